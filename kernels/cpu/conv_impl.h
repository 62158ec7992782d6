/* What conv.c (direct loops, dispatch) and conv_dnnl.c (oneDNN) share: the
 * four convolution ops read as one forward convolution in different
 * directions (see conv.c). */
#ifndef FG_KERNELS_CPU_CONV_IMPL_H
#define FG_KERNELS_CPU_CONV_IMPL_H

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

/* The buffers of x, w, y and bias (NULL: none) for this mode. */
typedef struct conv_bufs {
  fg_kbuf *x, *w, *y;
  const fg_kbuf *bias;
} conv_bufs;

static inline conv_bufs conv_bufs_of(const fg_kctx *ctx, conv_mode m) {
  fg_kbuf *in = (fg_kbuf *)ctx->in, *out = ctx->out;
  conv_bufs b = {NULL, NULL, NULL, NULL};
  switch (m) {
  case CONV_FWD: b = (conv_bufs){&in[0], &in[1], out, ctx->n_in > 2 ? &in[2] : NULL}; break;
  case CONV_BWD_DATA: b = (conv_bufs){out, &in[1], &in[0], NULL}; break;
  case CONV_BWD_WEIGHTS: b = (conv_bufs){&in[0], out, &in[1], NULL}; break;
  case CONV_TRANSPOSE: b = (conv_bufs){out, &in[1], &in[0], ctx->n_in > 2 ? &in[2] : NULL}; break;
  }
  return b;
}

static inline conv_geo conv_geo_of(const fg_kctx *ctx, const conv_bufs *b) {
  conv_geo G;
  G.n = b->x->dims[0], G.c = b->x->dims[1], G.h = b->x->dims[2], G.w = b->x->dims[3];
  G.o = b->y->dims[1], G.oh = b->y->dims[2], G.ow = b->y->dims[3];
  G.kh = b->w->dims[2], G.kw = b->w->dims[3];
  G.p = &ctx->p->conv;
  G.g = G.p->groups;
  G.cg = G.c / G.g, G.og = G.o / G.g;
  return G;
}

/* conv_transpose2d's bias added to every (n, channel) plane of out. */
void fgk_conv_add_bias_f32(const conv_geo *G, const void *bias, void *out);

/* oneDNN (conv_dnnl.c, built with FG_HAVE_DNNL): the prepare hook and the
 * f32 kernel for mode m. */
int fgk_conv_dnnl_prepare(const fg_kctx *ctx, conv_mode m, int threads, void **state);
int fgk_conv_dnnl(const fg_kctx *ctx, conv_mode m);

#endif /* FG_KERNELS_CPU_CONV_IMPL_H */
