/* Convolution kernels: conv2d, conv2d_grad_input, conv2d_grad_weight and
 * conv_transpose2d, NCHW (graph/infer_conv.c defines the shapes).
 *
 * All four are one forward convolution x [N, C, H, W] * w [O, C/g, kH, kW]
 * -> y [N, O, OH, OW] read in different directions: conv2d computes y,
 * conv2d_grad_input x's gradient from y's (backward data), conv2d_grad_weight
 * w's gradient (backward weights), and conv_transpose2d is backward data
 * with its input in y's place (plus its bias).
 *
 * f32 runs on oneDNN where the library has it (conv_dnnl.c says how).
 *
 * f64 (for gradient checks; oneDNN has no f64) and f32 without oneDNN run
 * direct loops, parallel over disjoint outputs in a fixed order, so the bits
 * do not depend on the thread count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/conv_impl.h"
#include "kernels/cpu/elementwise_scalar.h"

/* ---- direct loops (f64; f32 without oneDNN) ------------------------------ */

typedef struct ref_job {
  const conv_geo *G;
  conv_mode mode;
  const void *a, *b, *bias; /* fwd: x, w; bwd data: dy, w; bwd weights: x, dy */
  void *out;
} ref_job;

/* The input row and column that kernel tap (kh, kw) of output (oh, ow)
 * reads, or -1 in the padding. */
static inline int64_t tap(int64_t o, int64_t k, int64_t s, int64_t d, int64_t pad, int64_t len) {
  int64_t i = o * s - pad + k * d;
  return i >= 0 && i < len ? i : -1;
}

/* Runs STMT for every kernel tap (kh, kw) of output (oh, ow) that reads
 * input (ih, iw) inside the image, skipping the padding. */
#define CONV_TAPS(STMT)                                                                            \
  for (int64_t kh = 0; kh < G->kh; kh++) {                                                         \
    int64_t ih = tap(oh, kh, p->stride[0], p->dilation[0], p->pad[0], G->h);                       \
    if (ih < 0) continue;                                                                          \
    for (int64_t kw = 0; kw < G->kw; kw++) {                                                       \
      int64_t iw = tap(ow, kw, p->stride[1], p->dilation[1], p->pad[1], G->w);                     \
      if (iw >= 0) STMT;                                                                           \
    }                                                                                              \
  }

#define REF_LOOPS(T)                                                                               \
  /* y rows [begin, end) of n * o: each output element once. */                                    \
  static void ref_fwd_##T(void *arg, int64_t begin, int64_t end) {                                 \
    const ref_job *j = arg;                                                                        \
    const conv_geo *G = j->G;                                                                      \
    const fg_conv_params *p = G->p;                                                                \
    const T *x = j->a, *w = j->b, *bias = j->bias;                                                 \
    T *y = j->out;                                                                                 \
    for (int64_t r = begin; r < end; r++) {                                                        \
      int64_t n = r / G->o, oc = r % G->o, gi = oc / G->og;                                        \
      T *yr = y + r * G->oh * G->ow;                                                               \
      for (int64_t oh = 0; oh < G->oh; oh++)                                                       \
        for (int64_t ow = 0; ow < G->ow; ow++) {                                                   \
          T acc = bias ? bias[oc] : 0;                                                             \
          for (int64_t c = 0; c < G->cg; c++) {                                                    \
            const T *xc = x + ((n * G->c) + gi * G->cg + c) * G->h * G->w;                         \
            const T *wc = w + (oc * G->cg + c) * G->kh * G->kw;                                    \
            CONV_TAPS(acc += xc[ih * G->w + iw] * wc[kh * G->kw + kw]);                            \
          }                                                                                        \
          yr[oh * G->ow + ow] = acc;                                                               \
        }                                                                                          \
    }                                                                                              \
  }                                                                                                \
  /* dx of (n, group) pairs [begin, end): only that group's outputs reach                          \
   * those channels. */                                                                            \
  static void ref_bwd_data_##T(void *arg, int64_t begin, int64_t end) {                            \
    const ref_job *j = arg;                                                                        \
    const conv_geo *G = j->G;                                                                      \
    const fg_conv_params *p = G->p;                                                                \
    const T *dy = j->a, *w = j->b;                                                                 \
    T *dx = j->out;                                                                                \
    for (int64_t r = begin; r < end; r++) {                                                        \
      int64_t n = r / G->g, gi = r % G->g;                                                         \
      T *dxg = dx + (n * G->c + gi * G->cg) * G->h * G->w;                                         \
      memset(dxg, 0, (size_t)(G->cg * G->h * G->w) * sizeof(T));                                   \
      for (int64_t oc = gi * G->og; oc < (gi + 1) * G->og; oc++)                                   \
        for (int64_t oh = 0; oh < G->oh; oh++)                                                     \
          for (int64_t ow = 0; ow < G->ow; ow++) {                                                 \
            T v = dy[((n * G->o + oc) * G->oh + oh) * G->ow + ow];                                 \
            for (int64_t c = 0; c < G->cg; c++) {                                                  \
              const T *wc = w + (oc * G->cg + c) * G->kh * G->kw;                                  \
              T *dxc = dxg + c * G->h * G->w;                                                      \
              CONV_TAPS(dxc[ih * G->w + iw] += v * wc[kh * G->kw + kw]);                           \
            }                                                                                      \
          }                                                                                        \
    }                                                                                              \
  }                                                                                                \
  /* dw of output channels [begin, end), summed over n in order. */                                \
  static void ref_bwd_weights_##T(void *arg, int64_t begin, int64_t end) {                         \
    const ref_job *j = arg;                                                                        \
    const conv_geo *G = j->G;                                                                      \
    const fg_conv_params *p = G->p;                                                                \
    const T *x = j->a, *dy = j->b;                                                                 \
    T *dw = j->out;                                                                                \
    int64_t per = G->cg * G->kh * G->kw;                                                           \
    memset(dw + begin * per, 0, (size_t)((end - begin) * per) * sizeof(T));                        \
    for (int64_t oc = begin; oc < end; oc++) {                                                     \
      int64_t gi = oc / G->og;                                                                     \
      for (int64_t n = 0; n < G->n; n++)                                                           \
        for (int64_t oh = 0; oh < G->oh; oh++)                                                     \
          for (int64_t ow = 0; ow < G->ow; ow++) {                                                 \
            T v = dy[((n * G->o + oc) * G->oh + oh) * G->ow + ow];                                 \
            for (int64_t c = 0; c < G->cg; c++) {                                                  \
              const T *xc = x + ((n * G->c) + gi * G->cg + c) * G->h * G->w;                       \
              T *dwc = dw + (oc * G->cg + c) * G->kh * G->kw;                                      \
              CONV_TAPS(dwc[kh * G->kw + kw] += v * xc[ih * G->w + iw]);                           \
            }                                                                                      \
          }                                                                                        \
    }                                                                                              \
  }                                                                                                \
  /* conv_transpose2d's bias, per (n, channel) plane. */                                           \
  static void add_bias_##T(const conv_geo *G, const void *bias, void *out) {                       \
    const T *b = bias;                                                                             \
    T *x = out;                                                                                    \
    for (int64_t n = 0; n < G->n; n++)                                                             \
      for (int64_t c = 0; c < G->c; c++) {                                                         \
        T *plane = x + (n * G->c + c) * G->h * G->w;                                               \
        for (int64_t i = 0; i < G->h * G->w; i++)                                                  \
          plane[i] += b[c];                                                                        \
      }                                                                                            \
  }

REF_LOOPS(double)
REF_LOOPS(float)

void fgk_conv_add_bias_f32(const conv_geo *G, const void *bias, void *out) {
  add_bias_float(G, bias, out);
}

static void par_for(const fg_kctx *ctx, int64_t n, fg_krange_fn fn, void *arg) {
  if (n <= 0) return;
  if (ctx->par && n > 1)
    ctx->par->parallel_for(ctx->par->pool, n, 1, fn, arg);
  else
    fn(arg, 0, n);
}

static int conv_ref(const fg_kctx *ctx, conv_mode m, const conv_bufs *bufs) {
  const conv_bufs b = *bufs;
  conv_geo G = conv_geo_of(&b);
  int f64 = b.y->dtype == FG_F64;
  ref_job j = {&G, m, NULL, NULL, NULL, NULL};
  switch (m) {
  case CONV_FWD:
    j.a = b.x->data, j.b = b.w->data, j.bias = b.bias ? b.bias->data : NULL, j.out = b.y->data;
    par_for(ctx, G.n * G.o, f64 ? ref_fwd_double : ref_fwd_float, &j);
    return 0;
  case CONV_BWD_DATA:
  case CONV_TRANSPOSE:
    j.a = b.y->data, j.b = b.w->data, j.out = b.x->data;
    par_for(ctx, G.n * G.g, f64 ? ref_bwd_data_double : ref_bwd_data_float, &j);
    if (b.bias) (f64 ? add_bias_double : add_bias_float)(&G, b.bias->data, b.x->data);
    return 0;
  case CONV_BWD_WEIGHTS:
    j.a = b.x->data, j.b = b.y->data, j.out = b.w->data;
    par_for(ctx, G.o, f64 ? ref_bwd_weights_double : ref_bwd_weights_float, &j);
    return 0;
  }
  return 0;
}

#ifdef FG_HAVE_DNNL
int fgk_nc16_available(void) { return 1; }
static int conv_f32(const fg_kctx *ctx, conv_mode m, conv_epi e, const conv_bufs *b) {
  (void)b;
  return fgk_conv_dnnl(ctx, m, e);
}
#define PREP(name, mode, epi)                                                                      \
  int name(const fg_kctx *ctx, int threads, void **state) {                                        \
    return fgk_conv_dnnl_prepare(ctx, mode, epi, threads, state);                                  \
  }
#else
int fgk_nc16_available(void) { return 0; }
/* Without oneDNN the fused ops' epilogue runs after the loops. */
static int conv_f32(const fg_kctx *ctx, conv_mode m, conv_epi e, const conv_bufs *b) {
  int rc = conv_ref(ctx, m, b);
  if (rc == 0 && e != CONV_PLAIN)
    fgk_conv_epilogue_f32(b->y->data, b->z ? b->z->data : NULL, fgk_numel(b->y), &b->act);
  return rc;
}
void fgk_conv_release(void *state) { (void)state; }
size_t fgk_conv_bytes(const void *state, size_t *shared) {
  (void)state, (void)shared;
  return 0;
}
/* Without oneDNN there is nothing to prepare. */
#define PREP(name, mode, epi)                                                                      \
  int name(const fg_kctx *ctx, int threads, void **state) {                                        \
    (void)ctx, (void)threads;                                                                      \
    *state = NULL;                                                                                 \
    return 0;                                                                                      \
  }
#endif

PREP(fgk_conv2d_prepare, CONV_FWD, CONV_PLAIN)
PREP(fgk_conv2d_grad_input_prepare, CONV_BWD_DATA, CONV_PLAIN)
PREP(fgk_conv2d_grad_weight_prepare, CONV_BWD_WEIGHTS, CONV_PLAIN)
PREP(fgk_conv_transpose2d_prepare, CONV_TRANSPOSE, CONV_PLAIN)
PREP(fgk_fused_conv2d_prepare, CONV_FWD, CONV_FUSED)
PREP(fgk_fused_conv2d_add_prepare, CONV_FWD, CONV_FUSED_ADD)

/* An empty x or y (N = 0, no channels) leaves nothing to convolve: the
 * output is zeros, plus the bias where the op has one. 1 when so. */
static int empty(const fg_kctx *ctx, conv_mode m, const conv_bufs *bufs) {
  const conv_bufs b = *bufs;
  int64_t ex = 1, ey = 1;
  for (int d = 0; d < 4; d++)
    ex *= b.x->dims[d], ey *= b.y->dims[d];
  if (ex > 0 && ey > 0) return 0;
  fg_kbuf *o = ctx->out;
  int f64 = o->dtype == FG_F64;
  int64_t planes = o->dims[0] * o->dims[1], area = o->dims[2] * o->dims[3];
  if (o->rank != 4) return 1;
  for (int64_t i = 0; i < planes; i++)
    for (int64_t k = 0; k < area; k++) {
      double v = b.bias && m != CONV_BWD_WEIGHTS
                     ? (f64 ? ((const double *)b.bias->data)[i % o->dims[1]]
                            : ((const float *)b.bias->data)[i % o->dims[1]])
                     : 0.0;
      if (f64)
        ((double *)o->data)[i * area + k] = v;
      else
        ((float *)o->data)[i * area + k] = (float)v;
    }
  return 1;
}

#define CONV_KERNELS(name, mode)                                                                   \
  int name##_f32(const fg_kctx *ctx) {                                                             \
    conv_bufs b = conv_bufs_of(ctx, mode);                                                         \
    return empty(ctx, mode, &b) ? 0 : conv_f32(ctx, mode, CONV_PLAIN, &b);                         \
  }                                                                                                \
  int name##_f64(const fg_kctx *ctx) {                                                             \
    conv_bufs b = conv_bufs_of(ctx, mode);                                                         \
    return empty(ctx, mode, &b) ? 0 : conv_ref(ctx, mode, &b);                                     \
  }

CONV_KERNELS(fgk_conv2d, CONV_FWD)
CONV_KERNELS(fgk_conv2d_grad_input, CONV_BWD_DATA)
CONV_KERNELS(fgk_conv2d_grad_weight, CONV_BWD_WEIGHTS)
CONV_KERNELS(fgk_conv_transpose2d, CONV_TRANSPOSE)

/* ---- fused_conv2d, fused_conv2d_add -------------------------------------- */

/* One pass over y (the add and the activation of an element together, as
 * the chain computes them one after the other), built per instruction set
 * (FGK_CLONES): it runs on a part's rows right after the convolution wrote
 * them, in cache. Built for the baseline only, MobileNetV2 at batch 8 ran
 * about 10% slower with its clips fused than with separate clip nodes
 * (whose kernel is cloned); cloned, a little faster (medians of 6
 * alternating runs each). The add and the comparisons round alike in
 * every clone. */
FGK_CLONES void fgk_conv_epilogue_f32(float *y, const float *z, int64_t n, const conv_act *a) {
  const float lo = (float)a->lo, hi = (float)a->hi;
  if (z && a->on) {
    for (int64_t i = 0; i < n; i++)
      y[i] = clip_f32(y[i] + z[i], lo, hi);
  } else if (z) {
    for (int64_t i = 0; i < n; i++)
      y[i] = y[i] + z[i];
  } else if (a->on) {
    for (int64_t i = 0; i < n; i++)
      y[i] = clip_f32(y[i], lo, hi);
  }
}

static void epilogue_f64(double *y, const double *z, int64_t n, const conv_act *a) {
  for (int64_t i = 0; i < n && (z || a->on); i++) {
    const double v = z ? y[i] + z[i] : y[i];
    y[i] = a->on ? clip_f64(v, a->lo, a->hi) : v;
  }
}

/* The convolution exactly as conv2d computes it, then the epilogue in the
 * chain's order (conv2d -> add -> relu): with oneDNN, the add is its sum
 * post-op and the relu runs on each part's output right after it
 * (conv_dnnl.c says why not oneDNN's relu); elsewhere both run after the
 * loops. An empty x (no channels) leaves y the bias, then the epilogue. */
static int fused_conv(const fg_kctx *ctx, conv_epi e) {
  conv_bufs b = conv_bufs_fused(ctx, e);
  const int f64 = b.y->dtype == FG_F64;
  if (!empty(ctx, CONV_FWD, &b)) {
    if (!f64) return conv_f32(ctx, CONV_FWD, e, &b); /* the epilogue included */
    if (conv_ref(ctx, CONV_FWD, &b) != 0) return -1;
  }
  if (f64)
    epilogue_f64(b.y->data, b.z ? b.z->data : NULL, fgk_numel(b.y), &b.act);
  else
    fgk_conv_epilogue_f32(b.y->data, b.z ? b.z->data : NULL, fgk_numel(b.y), &b.act);
  return 0;
}

int fgk_fused_conv2d_f32(const fg_kctx *ctx) { return fused_conv(ctx, CONV_FUSED); }
int fgk_fused_conv2d_f64(const fg_kctx *ctx) { return fused_conv(ctx, CONV_FUSED); }
int fgk_fused_conv2d_add_f32(const fg_kctx *ctx) { return fused_conv(ctx, CONV_FUSED_ADD); }
int fgk_fused_conv2d_add_f64(const fg_kctx *ctx) { return fused_conv(ctx, CONV_FUSED_ADD); }
