/* What conv.c (direct loops, dispatch) and conv_dnnl.c (oneDNN) share: the
 * four convolution ops read as one forward convolution in different
 * directions (see conv.c). */
#ifndef FG_KERNELS_CPU_CONV_IMPL_H
#define FG_KERNELS_CPU_CONV_IMPL_H

#include <math.h>

#include "kernels/cpu/cpu_kernels.h"

typedef enum conv_mode { CONV_FWD, CONV_BWD_DATA, CONV_BWD_WEIGHTS, CONV_TRANSPOSE } conv_mode;

/* One forward convolution's sizes, in the roles above. */
typedef struct conv_geo {
  int64_t n, c, h, w; /* x */
  int64_t o, kh, kw;  /* w: [o, c / g, kh, kw] */
  int64_t oh, ow;     /* y: [n, o, oh, ow] */
  int64_t g, cg, og;  /* groups, channels per group in x and y */
  const fg_conv_params *p;
} conv_geo;

/* The fused ops' activation when `on`: clip's y < lo ? lo : y, then
 * y > hi ? hi : y, as the clip kernel computes it (bounds rounded to the
 * element type). relu is clip(0, inf): y < 0 ? 0 : y, then y > inf, never
 * true, so relu's bits (NaN and -0.0 kept). */
typedef struct conv_act {
  int on;
  double lo, hi;
} conv_act;

/* The buffers of x, w, y and bias (NULL: none) for this mode, and the
 * node's convolution parameters. The fused ops (forward only) add the
 * epilogue: y = y + z where z is given, then the activation. */
typedef struct conv_bufs {
  fg_kbuf *x, *w, *y;
  const fg_kbuf *bias;
  const fg_kbuf *z; /* fused_conv2d_add's residual */
  conv_act act;
  const fg_conv_params *p;
} conv_bufs;

/* Which op a forward convolution computes: conv2d, fused_conv2d or
 * fused_conv2d_add (their inputs: x, w, [b]; x, w, [b]; x, w, z, [b]). */
typedef enum conv_epi { CONV_PLAIN, CONV_FUSED, CONV_FUSED_ADD } conv_epi;

static inline conv_bufs conv_bufs_fused(const fg_kctx *ctx, conv_epi e) {
  fg_kbuf *in = (fg_kbuf *)ctx->in;
  const int bi = e == CONV_FUSED_ADD ? 3 : 2;
  const fg_fused_conv_params *fp = &ctx->p->fused_conv;
  const int clip = fp->activation == FG_ACTIVATION_CLIP;
  conv_act act = {fp->activation != FG_ACTIVATION_NONE, clip ? fp->clip_min : 0.0,
                  clip ? fp->clip_max : INFINITY};
  conv_bufs b = {&in[0],
                 &in[1],
                 ctx->out,
                 ctx->n_in > bi ? &in[bi] : NULL,
                 e == CONV_FUSED_ADD ? &in[2] : NULL,
                 act,
                 &fp->conv};
  return b;
}

static inline conv_bufs conv_bufs_of(const fg_kctx *ctx, conv_mode m) {
  fg_kbuf *in = (fg_kbuf *)ctx->in, *out = ctx->out;
  conv_bufs b = {NULL, NULL, NULL, NULL, NULL, {0, 0, 0}, NULL};
  switch (m) {
  case CONV_FWD:
    b.x = &in[0], b.w = &in[1], b.y = out, b.bias = ctx->n_in > 2 ? &in[2] : NULL;
    break;
  case CONV_BWD_DATA: b.x = out, b.w = &in[1], b.y = &in[0]; break;
  case CONV_BWD_WEIGHTS: b.x = &in[0], b.w = out, b.y = &in[1]; break;
  case CONV_TRANSPOSE:
    b.x = out, b.w = &in[1], b.y = &in[0], b.bias = ctx->n_in > 2 ? &in[2] : NULL;
    break;
  }
  b.p = &ctx->p->conv;
  return b;
}

static inline conv_geo conv_geo_of(const conv_bufs *b) {
  conv_geo G;
  G.n = b->x->dims[0], G.c = b->x->dims[1], G.h = b->x->dims[2], G.w = b->x->dims[3];
  G.o = b->y->dims[1], G.oh = b->y->dims[2], G.ow = b->y->dims[3];
  G.kh = b->w->dims[2], G.kw = b->w->dims[3];
  G.p = b->p;
  G.g = G.p->groups;
  G.cg = G.c / G.g, G.og = G.o / G.g;
  return G;
}

/* conv_transpose2d's bias added to every (n, channel) plane of out. */
void fgk_conv_add_bias_f32(const conv_geo *G, const void *bias, void *out);

/* The fused ops' epilogue on n elements of y, in the chain's order and
 * arithmetic: y = y + z (z NULL: none), then the activation. */
void fgk_conv_epilogue_f32(float *y, const float *z, int64_t n, const conv_act *a);

/* oneDNN (conv_dnnl.c, built with FG_HAVE_DNNL): the prepare hook and the
 * f32 kernel for mode m; e (forward only) names the op. */
int fgk_conv_dnnl_prepare(const fg_kctx *ctx, conv_mode m, conv_epi e, int threads, void **state);
int fgk_conv_dnnl(const fg_kctx *ctx, conv_mode m, conv_epi e);

#endif /* FG_KERNELS_CPU_CONV_IMPL_H */
