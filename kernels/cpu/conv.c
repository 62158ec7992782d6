/* Convolution kernels: conv2d, conv2d_grad_input, conv2d_grad_weight and
 * conv_transpose2d, NCHW (graph/infer_conv.c defines the shapes).
 *
 * All four are one forward convolution x [N, C, H, W] * w [O, C/g, kH, kW]
 * -> y [N, O, OH, OW] read in different directions: conv2d computes y,
 * conv2d_grad_input x's gradient from y's (backward data), conv2d_grad_weight
 * w's gradient (backward weights), and conv_transpose2d is backward data
 * with its input in y's place (plus its bias).
 *
 * f32 runs on oneDNN (built with FG_HAVE_DNNL). The prepare hook makes the
 * primitive for the plan's exact shapes with the layouts oneDNN prefers
 * (blocked, for its fastest kernels), the reorders between those and the
 * executor's plain NCHW / (g)oihw buffers, the blocked buffers and the
 * scratchpads (oneDNN's user scratchpad mode), so a run binds the buffers,
 * reorders and executes: nothing is created or allocated. The blocked
 * copies live outside the plan's arena, one set per step.
 *
 * Threads: Debian builds oneDNN on OpenMP, and a primitive's team size is
 * fixed when it is made, from the calling thread's OpenMP thread count.
 * Prepare sets that to the threads a run gives the step (the session's, or
 * 1 for a plan the executor runs on one thread), so the team never
 * outnumbers the session; the weight gradient gets 1, because oneDNN
 * splits its sum over the batch between threads and the bits would depend
 * on the thread count.
 *
 * f64 (for gradient checks; oneDNN has no f64) and f32 without oneDNN run
 * direct loops, parallel over disjoint outputs in a fixed order, so the bits
 * do not depend on the thread count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static conv_bufs bufs_of(const fg_kctx *ctx, conv_mode m) {
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

static conv_geo geo_of(const fg_kctx *ctx, const conv_bufs *b) {
  conv_geo G;
  G.n = b->x->dims[0], G.c = b->x->dims[1], G.h = b->x->dims[2], G.w = b->x->dims[3];
  G.o = b->y->dims[1], G.oh = b->y->dims[2], G.ow = b->y->dims[3];
  G.kh = b->w->dims[2], G.kw = b->w->dims[3];
  G.p = &ctx->p->conv;
  G.g = G.p->groups;
  G.cg = G.c / G.g, G.og = G.o / G.g;
  return G;
}

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

static void par_for(const fg_kctx *ctx, int64_t n, fg_krange_fn fn, void *arg) {
  if (n <= 0) return;
  if (ctx->par && n > 1)
    ctx->par->parallel_for(ctx->par->pool, n, 1, fn, arg);
  else
    fn(arg, 0, n);
}

static int conv_ref(const fg_kctx *ctx, conv_mode m) {
  conv_bufs b = bufs_of(ctx, m);
  conv_geo G = geo_of(ctx, &b);
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

/* ---- oneDNN (f32) -------------------------------------------------------- */
#ifdef FG_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>

/* One tensor of the primitive: `user` is bound to the executor's plain
 * NCHW / (g)oihw buffer each call; when the primitive chose another
 * layout (oneDNN's blocked formats, which its fastest kernels need),
 * `inner` holds the tensor in that layout in a buffer made at prepare
 * time, and `reorder` converts between the two (before the convolution for
 * an input, after it for the output). */
typedef struct conv_port {
  dnnl_memory_t user, inner;
  void *buf;
  dnnl_primitive_t reorder;
  dnnl_memory_t rscratch; /* the reorder's scratchpad, NULL when it needs none */
  void *rscratch_buf;
  int out;
} conv_port;

typedef struct conv_state {
  conv_mode mode;
  int threads;
  /* The weight is a variable or constant input (fg_kctx.fixed_inputs):
   * its reordered copy is kept while the session's var_version and the
   * weight's buffer stay the same (w_valid: it holds one). */
  int w_fixed, w_valid;
  uint64_t w_version;
  const void *w_data;
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  dnnl_primitive_t prim;
  conv_port port[3]; /* x, w, y */
  dnnl_memory_t mb, scratch;
  void *scratch_buf;
  dnnl_exec_arg_t args[6];
  int n_args;
} conv_state;

static void port_release(conv_port *p) {
  if (p->user) dnnl_memory_destroy(p->user);
  if (p->inner) dnnl_memory_destroy(p->inner);
  if (p->reorder) dnnl_primitive_destroy(p->reorder);
  if (p->rscratch) dnnl_memory_destroy(p->rscratch);
  free(p->buf);
  free(p->rscratch_buf);
}

void fgk_conv_release(void *state) {
  conv_state *s = state;
  if (!s) return;
  for (int i = 0; i < 3; i++)
    port_release(&s->port[i]);
  if (s->mb) dnnl_memory_destroy(s->mb);
  if (s->scratch) dnnl_memory_destroy(s->scratch);
  if (s->prim) dnnl_primitive_destroy(s->prim);
  if (s->stream) dnnl_stream_destroy(s->stream);
  if (s->engine) dnnl_engine_destroy(s->engine);
  free(s->scratch_buf);
  free(s);
}

static int dnnl_fail(const fg_kctx *ctx, const char *what, dnnl_status_t r) {
  if (ctx->err) snprintf(ctx->err, ctx->err_size, "oneDNN: %s failed (status %d)", what, (int)r);
  return -1;
}

#define DNNL_TRY(call, what)                                                                       \
  do {                                                                                             \
    dnnl_status_t r_ = (call);                                                                     \
    if (r_ != dnnl_success) {                                                                      \
      rc = dnnl_fail(ctx, what, r_);                                                               \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

/* A 64-byte aligned buffer of `bytes` and a memory of `md` over it. */
static int owned_memory(const fg_kctx *ctx, const dnnl_memory_desc_t *md, dnnl_engine_t eng,
                        void **buf, dnnl_memory_t *mem) {
  size_t bytes = dnnl_memory_desc_get_size(md);
  if (posix_memalign(buf, 64, bytes ? bytes : 64) != 0) {
    *buf = NULL;
    snprintf(ctx->err, ctx->err_size, "out of memory (%zu bytes of oneDNN buffers)", bytes);
    return -1;
  }
  dnnl_status_t r = dnnl_memory_create(mem, md, eng, *buf);
  return r == dnnl_success ? 0 : dnnl_fail(ctx, "memory", r);
}

/* Port i: plain layout `plain`, the primitive's layout `chosen`. */
static int port_init(const fg_kctx *ctx, conv_state *s, conv_port *p, int out,
                     const dnnl_memory_desc_t *plain, const dnnl_memory_desc_t *chosen) {
  int rc = 0;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t rpd = NULL;
  p->out = out;
  DNNL_TRY(dnnl_memory_create(&p->user, plain, s->engine, DNNL_MEMORY_NONE), "memory");
  if (dnnl_memory_desc_equal(plain, chosen)) return 0;
  if (owned_memory(ctx, chosen, s->engine, &p->buf, &p->inner) != 0) return -1;
  DNNL_TRY(dnnl_primitive_attr_create(&attr), "attributes");
  DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad");
  DNNL_TRY(dnnl_reorder_primitive_desc_create(&rpd, out ? chosen : plain, s->engine,
                                              out ? plain : chosen, s->engine, attr),
           "reorder");
  DNNL_TRY(dnnl_primitive_create(&p->reorder, rpd), "reorder primitive");
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(rpd, dnnl_query_scratchpad_md, 0);
  if (smd && dnnl_memory_desc_get_size(smd) > 0 &&
      owned_memory(ctx, smd, s->engine, &p->rscratch_buf, &p->rscratch) != 0)
    rc = -1;
done:
  if (rpd) dnnl_primitive_desc_destroy(rpd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  return rc;
}

/* The convolution descriptor of G in `m`'s direction (fwd: the forward one,
 * also the backward passes' hint), layouts left to oneDNN (tag any). */
static dnnl_status_t conv_desc(const conv_geo *G, int fwd, int bias, conv_mode m,
                               dnnl_convolution_desc_t *d) {
  const fg_conv_params *p = G->p;
  dnnl_dims_t xd = {G->n, G->c, G->h, G->w}, yd = {G->n, G->o, G->oh, G->ow}, bd = {G->o};
  dnnl_dims_t wd = {G->o, G->cg, G->kh, G->kw}, gwd = {G->g, G->og, G->cg, G->kh, G->kw};
  dnnl_dims_t strides = {p->stride[0], p->stride[1]};
  dnnl_dims_t dil = {p->dilation[0] - 1, p->dilation[1] - 1};
  dnnl_dims_t pl = {p->pad[0], p->pad[1]}, pr = {p->pad[2], p->pad[3]};
  dnnl_memory_desc_t mx, mw, my, mb;
  dnnl_status_t r = dnnl_memory_desc_init_by_tag(&mx, 4, xd, dnnl_f32, dnnl_format_tag_any);
  if (r == dnnl_success)
    r = dnnl_memory_desc_init_by_tag(&my, 4, yd, dnnl_f32, dnnl_format_tag_any);
  if (r == dnnl_success)
    r = G->g == 1 ? dnnl_memory_desc_init_by_tag(&mw, 4, wd, dnnl_f32, dnnl_format_tag_any)
                  : dnnl_memory_desc_init_by_tag(&mw, 5, gwd, dnnl_f32, dnnl_format_tag_any);
  if (r == dnnl_success) r = dnnl_memory_desc_init_by_tag(&mb, 1, bd, dnnl_f32, dnnl_a);
  if (r != dnnl_success) return r;
  if (fwd)
    return dnnl_dilated_convolution_forward_desc_init(
        d, dnnl_forward_training, dnnl_convolution_direct, &mx, &mw,
        m == CONV_FWD && bias ? &mb : NULL, &my, strides, dil, pl, pr);
  if (m == CONV_BWD_WEIGHTS)
    return dnnl_dilated_convolution_backward_weights_desc_init(d, dnnl_convolution_direct, &mx, &mw,
                                                               NULL, &my, strides, dil, pl, pr);
  return dnnl_dilated_convolution_backward_data_desc_init(d, dnnl_convolution_direct, &mx, &mw, &my,
                                                          strides, dil, pl, pr);
}

/* The plain layouts of x, w (grouped: goihw) and y. */
static dnnl_status_t plain_mds(const conv_geo *G, dnnl_memory_desc_t *md) {
  dnnl_dims_t xd = {G->n, G->c, G->h, G->w}, yd = {G->n, G->o, G->oh, G->ow};
  dnnl_dims_t wd = {G->o, G->cg, G->kh, G->kw}, gwd = {G->g, G->og, G->cg, G->kh, G->kw};
  dnnl_status_t r = dnnl_memory_desc_init_by_tag(&md[0], 4, xd, dnnl_f32, dnnl_nchw);
  if (r == dnnl_success)
    r = G->g == 1 ? dnnl_memory_desc_init_by_tag(&md[1], 4, wd, dnnl_f32, dnnl_oihw)
                  : dnnl_memory_desc_init_by_tag(&md[1], 5, gwd, dnnl_f32, dnnl_goihw);
  if (r == dnnl_success) r = dnnl_memory_desc_init_by_tag(&md[2], 4, yd, dnnl_f32, dnnl_nchw);
  return r;
}

static int conv_prepare(const fg_kctx *ctx, conv_mode m, int threads, void **state) {
  conv_bufs b = bufs_of(ctx, m);
  conv_geo G = geo_of(ctx, &b);
  int rc = 0;
  *state = NULL;
  /* An empty x or y has nothing to convolve (the kernels' empty()). */
  if (fgk_numel(b.x) == 0 || fgk_numel(b.y) == 0) return 0;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t fwd_pd = NULL, pd = NULL;
  conv_state *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(ctx->err, ctx->err_size, "out of memory (convolution state)");
    return -1;
  }
  s->mode = m;
  /* oneDNN sizes a primitive's OpenMP team when it makes it, from the
   * calling thread's OpenMP thread count: set it to what a run gives this
   * step. The weight gradient gets one: oneDNN splits its sum over the
   * batch between threads, so its bits would depend on the thread count,
   * which sessions promise they do not. */
  s->threads = m == CONV_BWD_WEIGHTS || threads < 1 ? 1 : threads;
  s->w_fixed = m != CONV_BWD_WEIGHTS && (ctx->fixed_inputs >> 1 & 1u);
  omp_set_num_threads(s->threads);
  dnnl_convolution_desc_t fd, bd;
  dnnl_memory_desc_t plain[3], mb;
  DNNL_TRY(dnnl_engine_create(&s->engine, dnnl_cpu, 0), "engine");
  DNNL_TRY(dnnl_stream_create(&s->stream, s->engine, dnnl_stream_default_flags), "stream");
  DNNL_TRY(dnnl_primitive_attr_create(&attr), "attributes");
  DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "scratchpad");
  DNNL_TRY(conv_desc(&G, 1, b.bias != NULL, m, &fd), "convolution descriptor");
  DNNL_TRY(dnnl_primitive_desc_create(&fwd_pd, &fd, attr, s->engine, NULL), "forward primitive");
  if (m != CONV_FWD) {
    DNNL_TRY(conv_desc(&G, 0, 0, m, &bd), "backward descriptor");
    DNNL_TRY(dnnl_primitive_desc_create(&pd, &bd, attr, s->engine, fwd_pd), "backward primitive");
  }
  const_dnnl_primitive_desc_t use = pd ? pd : fwd_pd;
  DNNL_TRY(dnnl_primitive_create(&s->prim, use), "primitive");
  DNNL_TRY(plain_mds(&G, plain), "memory descriptors");
  /* x, w, y: their argument in this direction, and whether it is written. */
  int fwd = m == CONV_FWD, bwd_w = m == CONV_BWD_WEIGHTS;
  const int arg[3] = {fwd || bwd_w ? DNNL_ARG_SRC : DNNL_ARG_DIFF_SRC,
                      bwd_w ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS,
                      fwd ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST};
  const int out[3] = {!fwd && !bwd_w, bwd_w, fwd};
  for (int i = 0; i < 3; i++) {
    const dnnl_memory_desc_t *chosen =
        dnnl_primitive_desc_query_md(use, dnnl_query_exec_arg_md, arg[i]);
    if (!chosen || port_init(ctx, s, &s->port[i], out[i], &plain[i], chosen) != 0) {
      if (!chosen) snprintf(ctx->err, ctx->err_size, "oneDNN: no layout for argument %d", arg[i]);
      rc = -1;
      goto done;
    }
    conv_port *p = &s->port[i];
    s->args[s->n_args++] = (dnnl_exec_arg_t){arg[i], p->inner ? p->inner : p->user};
  }
  if (fwd && b.bias) {
    dnnl_dims_t bd1 = {G.o};
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&mb, 1, bd1, dnnl_f32, dnnl_a), "bias descriptor");
    DNNL_TRY(dnnl_memory_create(&s->mb, &mb, s->engine, DNNL_MEMORY_NONE), "memory");
    s->args[s->n_args++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, s->mb};
  }
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(use, dnnl_query_scratchpad_md, 0);
  if (smd && dnnl_memory_desc_get_size(smd) > 0) {
    if (owned_memory(ctx, smd, s->engine, &s->scratch_buf, &s->scratch) != 0) {
      rc = -1;
      goto done;
    }
    s->args[s->n_args++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, s->scratch};
  }
done:
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
  if (attr) dnnl_primitive_attr_destroy(attr);
  if (rc != 0) {
    fgk_conv_release(s);
    return -1;
  }
  *state = s;
  return 0;
}

/* Converts port p between its plain buffer and its inner layout. */
static dnnl_status_t port_reorder(conv_state *s, conv_port *p) {
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, p->out ? p->inner : p->user},
                             {DNNL_ARG_TO, p->out ? p->user : p->inner},
                             {DNNL_ARG_SCRATCHPAD, p->rscratch}};
  return dnnl_primitive_execute(p->reorder, s->stream, p->rscratch ? 3 : 2, args);
}

static int conv_exec(const fg_kctx *ctx, conv_state *s) {
  conv_bufs b = bufs_of(ctx, s->mode);
  int rc = 0;
  void *data[3] = {b.x->data, b.w->data, b.y->data};
  for (int i = 0; i < 3; i++)
    DNNL_TRY(dnnl_memory_set_data_handle(s->port[i].user, data[i]), "binding a buffer");
  if (s->mb) DNNL_TRY(dnnl_memory_set_data_handle(s->mb, b.bias->data), "binding the bias");
  /* The executor's pool already runs this step on one of its threads;
   * oneDNN's OpenMP team for this call has the size the primitive was
   * made for (conv_prepare). */
  omp_set_num_threads(s->threads);
  /* A variable's weight in the primitive's layout is still current when no
   * run may have written a variable since it was reordered (inference
   * reuses it; a training step's update makes the next run reorder). */
  const int w_kept =
      s->w_fixed && s->w_valid && s->w_version == ctx->var_version && s->w_data == data[1];
  s->w_valid = 0;
  for (int i = 0; i < 3; i++)
    if (s->port[i].reorder && !s->port[i].out && !(i == 1 && w_kept))
      DNNL_TRY(port_reorder(s, &s->port[i]), "reordering an input");
  DNNL_TRY(dnnl_primitive_execute(s->prim, s->stream, s->n_args, s->args), "execute");
  for (int i = 0; i < 3; i++)
    if (s->port[i].reorder && s->port[i].out)
      DNNL_TRY(port_reorder(s, &s->port[i]), "reordering the output");
  DNNL_TRY(dnnl_stream_wait(s->stream), "stream wait");
  s->w_valid = s->w_fixed, s->w_version = ctx->var_version, s->w_data = data[1];
  if (s->mode == CONV_TRANSPOSE && b.bias) {
    conv_geo G = geo_of(ctx, &b);
    add_bias_float(&G, b.bias->data, b.x->data);
  }
done:
  return rc;
}

static int conv_f32(const fg_kctx *ctx, conv_mode m) {
  if (ctx->state) return conv_exec(ctx, ctx->state);
  /* No plan-time state (constant folding, a direct call): make it for
   * this call alone. */
  void *s = NULL;
  if (conv_prepare(ctx, m, 1, &s) != 0) return -1;
  int rc = conv_exec(ctx, s);
  fgk_conv_release(s);
  return rc;
}

#define PREP(name, mode)                                                                           \
  int name(const fg_kctx *ctx, int threads, void **state) {                                        \
    return conv_prepare(ctx, mode, threads, state);                                                \
  }
#else
static int conv_f32(const fg_kctx *ctx, conv_mode m) { return conv_ref(ctx, m); }
void fgk_conv_release(void *state) { (void)state; }
/* Without oneDNN there is nothing to prepare. */
#define PREP(name, mode)                                                                           \
  int name(const fg_kctx *ctx, int threads, void **state) {                                        \
    (void)ctx, (void)threads;                                                                      \
    *state = NULL;                                                                                 \
    return 0;                                                                                      \
  }
#endif

PREP(fgk_conv2d_prepare, CONV_FWD)
PREP(fgk_conv2d_grad_input_prepare, CONV_BWD_DATA)
PREP(fgk_conv2d_grad_weight_prepare, CONV_BWD_WEIGHTS)
PREP(fgk_conv_transpose2d_prepare, CONV_TRANSPOSE)

/* An empty x or y (N = 0, no channels) leaves nothing to convolve: the
 * output is zeros, plus the bias where the op has one. 1 when so. */
static int empty(const fg_kctx *ctx, conv_mode m) {
  conv_bufs b = bufs_of(ctx, m);
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
  int name##_f32(const fg_kctx *ctx) { return empty(ctx, mode) ? 0 : conv_f32(ctx, mode); }        \
  int name##_f64(const fg_kctx *ctx) { return empty(ctx, mode) ? 0 : conv_ref(ctx, mode); }

CONV_KERNELS(fgk_conv2d, CONV_FWD)
CONV_KERNELS(fgk_conv2d_grad_input, CONV_BWD_DATA)
CONV_KERNELS(fgk_conv2d_grad_weight, CONV_BWD_WEIGHTS)
CONV_KERNELS(fgk_conv_transpose2d, CONV_TRANSPOSE)
