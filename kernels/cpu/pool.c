/* Pooling on the CPU: max_pool2d, avg_pool2d, adaptive_avg_pool2d, the
 * global pools and their gradients, over NCHW planes with direct loops
 * (kernels/cpu/pool_impl.h, once per element type). Every plane is
 * independent, so the N * C planes are split over threads and results are
 * the same for any thread count. The gradients recompute what they need
 * from x (the argmax, the window sizes) instead of keeping indices from the
 * forward pass, so the forward op has one output and the same meaning with
 * and without training. */
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/pool_geom.h"

enum { POOL_MAX, POOL_AVG, POOL_ADAPTIVE, POOL_MAX_GRAD, POOL_AVG_GRAD, POOL_ADAPTIVE_GRAD };

typedef struct pool_job {
  fgk_pool_geom g;
  int kind;
  const void *a; /* x, or dy for the gradients */
  const void *b; /* the gradients' x */
  void *out;
} pool_job;

/* Taps per window row whose output ranges max_fwd_plane keeps. */
#define POOL_KEEP_TAPS 16
/* Planes global_avg_planes sums side by side. */
#define POOL_SIDE 8
/* Outputs avg_row_inner sums at a time (double sums on the stack). */
#define POOL_AVG_BLOCK 256
/* max_small_row: planes up to this wide, and its padded row's room. */
#define POOL_SMALL_W   32
#define POOL_SMALL_BUF 256

/* PC: the type max_pool2d_grad's vector argmax pass keeps window
 * positions in (pool_impl.h, POOL_BWD_CODES). */
#define PT       float
#define PC       int32_t
#define PS(name) name##_f32
#include "kernels/cpu/pool_impl.h"
#undef PT
#undef PC
#undef PS
#define PT       double
#define PC       double
#define PS(name) name##_f64
#include "kernels/cpu/pool_impl.h"
#undef PT
#undef PC
#undef PS

int fgk_pool_geom_init(const fg_kctx *ctx, const fg_kbuf *x, const fg_kbuf *y,
                       const fg_pool2d_params *p, fgk_pool_geom *g) {
  if (x->rank != 4 || y->rank != 4)
    return fgk_fail(ctx, "pooling needs rank-4 NCHW tensors, got ranks %d and %d", x->rank,
                    y->rank);
  if (x->dims[0] != y->dims[0] || x->dims[1] != y->dims[1])
    return fgk_fail(ctx, "x is [%lld,%lld,...] but the pooled tensor [%lld,%lld,...]",
                    (long long)x->dims[0], (long long)x->dims[1], (long long)y->dims[0],
                    (long long)y->dims[1]);
  g->planes = x->dims[0] * x->dims[1];
  g->H = x->dims[2];
  g->W = x->dims[3];
  g->OH = y->dims[2];
  g->OW = y->dims[3];
  if (p) {
    g->kh = p->kernel[0], g->kw = p->kernel[1];
    g->sh = p->strides[0], g->sw = p->strides[1];
    g->dh = p->dilations[0], g->dw = p->dilations[1];
    g->pt = p->pads[0], g->pl = p->pads[1], g->pb = p->pads[2], g->pr = p->pads[3];
    g->count_include_pad = p->count_include_pad;
  } else {
    /* the global max: one window, the whole plane */
    g->kh = g->H, g->kw = g->W;
    g->sh = g->sw = g->dh = g->dw = 1;
    g->pt = g->pl = g->pb = g->pr = 0;
    g->count_include_pad = 0;
  }
  if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->pt < 0 ||
      g->pl < 0 || g->pb < 0 || g->pr < 0)
    return fgk_fail(ctx,
                    "pooling window kernel [%lld,%lld] strides [%lld,%lld] dilations "
                    "[%lld,%lld] pads [%lld,%lld,%lld,%lld] is not valid",
                    (long long)g->kh, (long long)g->kw, (long long)g->sh, (long long)g->sw,
                    (long long)g->dh, (long long)g->dw, (long long)g->pt, (long long)g->pl,
                    (long long)g->pb, (long long)g->pr);
  if (g->H < 0 || g->W < 0 || g->OH < 0 || g->OW < 0) return fgk_fail(ctx, "negative plane size");
  return 0;
}

int fgk_pool_bufs(const fg_kctx *ctx, fg_dtype dt, int grad, const fg_kbuf **x, const fg_kbuf **y) {
  if (fgk_same_dtypes(ctx, grad ? 2 : 1) != 0) return -1;
  if (ctx->out[0].dtype != dt)
    return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(ctx->out[0].dtype),
                    fg_dtype_name(dt));
  *x = grad ? &ctx->in[1] : &ctx->in[0];
  *y = grad ? &ctx->in[0] : &ctx->out[0];
  return 0;
}

static void pool_range_f32(void *arg, int64_t p0, int64_t p1) { pool_planes_f32(arg, p0, p1); }
static void pool_range_f64(void *arg, int64_t p0, int64_t p1) { pool_planes_f64(arg, p0, p1); }

/* Runs one pooling call: x (or dy and x for the gradients) into out[0].
 * `global` marks the global max, whose window is the plane. */
static int run_pool(const fg_kctx *ctx, fg_dtype dt, int kind, int global) {
  const int grad = kind >= POOL_MAX_GRAD;
  const fg_kbuf *x, *y;
  if (fgk_check(ctx, grad ? 2 : 1, 1) != 0 || fgk_pool_bufs(ctx, dt, grad, &x, &y) != 0) return -1;
  pool_job j;
  const int windowed =
      (kind == POOL_MAX || kind == POOL_AVG || kind == POOL_MAX_GRAD || kind == POOL_AVG_GRAD) &&
      !global;
  if (fgk_pool_geom_init(ctx, x, y, windowed ? &ctx->p->pool2d : NULL, &j.g) != 0) return -1;
  if (grad && (ctx->out[0].rank != 4 || fgk_numel(&ctx->out[0]) != fgk_numel(x)))
    return fgk_fail(ctx, "the gradient's output does not have x's shape");
  if ((kind == POOL_ADAPTIVE || kind == POOL_ADAPTIVE_GRAD) &&
      (j.g.OH < 1 || j.g.OW < 1 || j.g.H < 1 || j.g.W < 1) && j.g.planes > 0)
    return fgk_fail(ctx, "adaptive pooling of a [%lld,%lld] plane to [%lld,%lld]", (long long)j.g.H,
                    (long long)j.g.W, (long long)j.g.OH, (long long)j.g.OW);
  j.kind = kind;
  j.a = ctx->in[0].data;
  j.b = grad ? ctx->in[1].data : NULL;
  j.out = ctx->out[0].data;
  if (j.g.planes == 0) return 0;
  /* A chunk of planes is about FGK_GRAIN_CHEAP elements of work. */
  int64_t work = j.g.H * j.g.W > j.g.OH * j.g.OW ? j.g.H * j.g.W : j.g.OH * j.g.OW;
  if (work < 1) work = 1;
  const int64_t grain = work >= FGK_GRAIN_CHEAP ? 1 : FGK_GRAIN_CHEAP / work;
  fgk_parallel_for(ctx, j.g.planes, grain, dt == FG_F32 ? pool_range_f32 : pool_range_f64, &j);
  return 0;
}

#define POOL_KERNEL(name, kind, global)                                                            \
  int name##_f32(const fg_kctx *ctx) { return run_pool(ctx, FG_F32, kind, global); }               \
  int name##_f64(const fg_kctx *ctx) { return run_pool(ctx, FG_F64, kind, global); }

POOL_KERNEL(fgk_max_pool2d, POOL_MAX, 0)
POOL_KERNEL(fgk_avg_pool2d, POOL_AVG, 0)
POOL_KERNEL(fgk_global_avg_pool, POOL_ADAPTIVE, 0)
POOL_KERNEL(fgk_global_max_pool, POOL_MAX, 1)
POOL_KERNEL(fgk_adaptive_avg_pool2d, POOL_ADAPTIVE, 0)
POOL_KERNEL(fgk_max_pool2d_grad, POOL_MAX_GRAD, 0)
POOL_KERNEL(fgk_avg_pool2d_grad, POOL_AVG_GRAD, 0)
POOL_KERNEL(fgk_adaptive_avg_pool2d_grad, POOL_ADAPTIVE_GRAD, 0)
POOL_KERNEL(fgk_global_max_pool_grad, POOL_MAX_GRAD, 1)
