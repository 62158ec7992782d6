/* Resizing on the CPU: resize_nearest, resize_linear and their gradients
 * over the planes of the last two dims, with direct loops
 * (kernels/cpu/resize_impl.h, once per element type). The coordinate
 * arithmetic is kernels/resize_geom.h, shared with the CUDA kernels.
 * Planes are split over threads; each plane is computed the same way by
 * any thread, so results do not depend on the thread count. */
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/resize_geom.h"

/* Output columns whose taps one chunk keeps on the stack. */
#define RESIZE_TILE 256

typedef struct resize_job {
  fgk_resize_geom g;
  int linear, grad;
  const void *a; /* x, or dy for the gradients */
  void *out;
} resize_job;

#define RT       float
#define RS(name) name##_f32
#include "kernels/cpu/resize_impl.h"
#undef RT
#undef RS
#define RT       double
#define RS(name) name##_f64
#include "kernels/cpu/resize_impl.h"
#undef RT
#undef RS

int fgk_resize_geom_init(const fg_kctx *ctx, fg_dtype dt, int grad, fgk_resize_geom *g) {
  if (fgk_same_dtypes(ctx, grad ? 2 : 1) != 0) return -1;
  if (ctx->out[0].dtype != dt)
    return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(ctx->out[0].dtype),
                    fg_dtype_name(dt));
  const fg_kbuf *x = grad ? &ctx->in[1] : &ctx->in[0];
  const fg_kbuf *y = grad ? &ctx->in[0] : &ctx->out[0];
  const fg_resize_params *p = &ctx->p->resize;
  const int r = x->rank;
  if (r < 2 || y->rank != r || (grad && ctx->out[0].rank != r))
    return fgk_fail(ctx, "resizing needs tensors of one rank >= 2, got ranks %d and %d", r,
                    y->rank);
  g->planes = 1;
  for (int d = 0; d < r - 2; d++) {
    if (x->dims[d] != y->dims[d] || (grad && ctx->out[0].dims[d] != x->dims[d]))
      return fgk_fail(ctx, "dim %d is %lld in x but %lld in the resized tensor", d,
                      (long long)x->dims[d], (long long)y->dims[d]);
    g->planes *= x->dims[d];
  }
  g->H = x->dims[r - 2], g->W = x->dims[r - 1];
  g->OH = y->dims[r - 2], g->OW = y->dims[r - 1];
  if (g->OH != p->sizes[0] || g->OW != p->sizes[1] ||
      (grad && (ctx->out[0].dims[r - 2] != g->H || ctx->out[0].dims[r - 1] != g->W)))
    return fgk_fail(ctx, "planes [%lld,%lld] to [%lld,%lld] do not match sizes [%lld,%lld]",
                    (long long)g->H, (long long)g->W, (long long)g->OH, (long long)g->OW,
                    (long long)p->sizes[0], (long long)p->sizes[1]);
  if (g->planes > 0 && (g->H < 1 || g->W < 1))
    return fgk_fail(ctx, "an empty [%lld,%lld] plane has nothing to resize", (long long)g->H,
                    (long long)g->W);
  if (!(p->scales[0] > 0) || !(p->scales[1] > 0))
    return fgk_fail(ctx, "scales %g, %g are not positive", p->scales[0], p->scales[1]);
  g->scale_h = p->scales[0], g->scale_w = p->scales[1];
  g->coord = p->coord, g->nearest = p->nearest;
  return 0;
}

static void range_f32(void *arg, int64_t p0, int64_t p1) { resize_planes_f32(arg, p0, p1); }
static void range_f64(void *arg, int64_t p0, int64_t p1) { resize_planes_f64(arg, p0, p1); }

static int run_resize(const fg_kctx *ctx, fg_dtype dt, int linear, int grad) {
  resize_job j;
  if (fgk_check(ctx, grad ? 2 : 1, 1) != 0 || fgk_resize_geom_init(ctx, dt, grad, &j.g) != 0)
    return -1;
  j.linear = linear, j.grad = grad;
  j.a = ctx->in[0].data;
  j.out = ctx->out[0].data;
  if (j.g.planes == 0) return 0;
  /* A chunk of planes is about FGK_GRAIN_CHEAP elements of work. */
  int64_t work = j.g.OH * j.g.OW > j.g.H * j.g.W ? j.g.OH * j.g.OW : j.g.H * j.g.W;
  const int64_t grain = work >= FGK_GRAIN_CHEAP ? 1 : FGK_GRAIN_CHEAP / (work > 0 ? work : 1);
  fgk_parallel_for(ctx, j.g.planes, grain, dt == FG_F32 ? range_f32 : range_f64, &j);
  return 0;
}

#define RESIZE_KERNEL(name, linear, grad)                                                          \
  int name##_f32(const fg_kctx *ctx) { return run_resize(ctx, FG_F32, linear, grad); }             \
  int name##_f64(const fg_kctx *ctx) { return run_resize(ctx, FG_F64, linear, grad); }

RESIZE_KERNEL(fgk_resize_nearest, 0, 0)
RESIZE_KERNEL(fgk_resize_linear, 1, 0)
RESIZE_KERNEL(fgk_resize_nearest_grad, 0, 1)
RESIZE_KERNEL(fgk_resize_linear_grad, 1, 1)
