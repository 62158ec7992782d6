/* Resizing on the GPU: resize_nearest, resize_linear and their gradients
 * over the planes of the last two dims, sampling as kernels/cpu/resize.c
 * does (the coordinate math is kernels/resize_geom.h, shared). The forward
 * ops are one thread per output element, grid-stride; the linear blend is
 * the CPU's expression in the element type, each product and sum rounded on
 * its own (fgc_mul_rn, fgc_add_rn) because the CPU builds without
 * contraction. The gradients gather: one thread per dx element sums, in
 * double and in output order (oh, then ow, then the forward's tap order),
 * the dy of the outputs whose taps land on it, so they need no atomics and
 * are deterministic. The source index of every mode is non-decreasing in
 * the output index, so along each dim those outputs are one contiguous
 * range, found by binary search (axis_span). */
#include "kernels/cuda/common.cuh"
#include "kernels/resize_geom.h"

/* Output o's tap along one dim of n inputs, m outputs and scale s: the
 * index that resize_nearest reads (linear 0), or resize_linear's first
 * (upper 0) or second (upper 1) tap. */
static __device__ int64_t axis_tap(const fgk_resize_geom &g, int linear, int upper, int64_t o,
                                   int64_t n, int64_t m, double s) {
  if (!linear) return fgk_resize_nearest_index(g.coord, g.nearest, o, n, m, s);
  int64_t i0, i1;
  double w;
  fgk_resize_linear_taps(g.coord, o, n, m, s, &i0, &i1, &w);
  return upper ? i1 : i0;
}

/* The first output in [0, m) whose tap exceeds t, or m. Correct because
 * every tap is non-decreasing in o: the outputs past t are a suffix. */
static __device__ int64_t first_above(const fgk_resize_geom &g, int linear, int upper, int64_t t,
                                      int64_t n, int64_t m, double s) {
  int64_t lo = 0, hi = m;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (axis_tap(g, linear, upper, mid, n, m, s) > t)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* The outputs [*o0, *o1) along a dim with a tap on input i. The second tap
 * is the first one or the next (i0 <= i1 <= i0 + 1), so output o reaches i
 * exactly when i1(o) >= i and i0(o) <= i; both conditions are monotone in
 * o, which makes the set the range between the two boundaries. Nearest has
 * one tap, i0 = i1. */
static __device__ void axis_span(const fgk_resize_geom &g, int linear, int64_t i, int64_t n,
                                 int64_t m, double s, int64_t *o0, int64_t *o1) {
  *o0 = first_above(g, linear, 1, i - 1, n, m, s);
  *o1 = first_above(g, linear, 0, i, n, m, s);
}

/* dx element e's plane (returned), row *ih and column *iw, and the
 * outputs [*oh0, *oh1) x [*ow0, *ow1) with a tap on it. */
static __device__ int64_t dx_span(const fgk_resize_geom &g, int linear, int64_t e, int64_t *ih,
                                  int64_t *iw, int64_t *oh0, int64_t *oh1, int64_t *ow0,
                                  int64_t *ow1) {
  *iw = e % g.W, *ih = (e / g.W) % g.H;
  axis_span(g, linear, *ih, g.H, g.OH, g.scale_h, oh0, oh1);
  axis_span(g, linear, *iw, g.W, g.OW, g.scale_w, ow0, ow1);
  return e / (g.W * g.H);
}

template <typename T>
__global__ void nearest_fwd_kernel(fgk_resize_geom g, const T *x, T *y, int64_t n) {
  FGC_GRID_STRIDE(e, n) {
    const int64_t ow = e % g.OW, oh = (e / g.OW) % g.OH, p = e / (g.OW * g.OH);
    const int64_t ih = fgk_resize_nearest_index(g.coord, g.nearest, oh, g.H, g.OH, g.scale_h);
    const int64_t iw = fgk_resize_nearest_index(g.coord, g.nearest, ow, g.W, g.OW, g.scale_w);
    y[e] = x[(p * g.H + ih) * g.W + iw];
  }
}

/* wa * a + wb * b without contraction, as the CPU computes it. */
template <typename T> __device__ T blend(T wa, T a, T wb, T b) {
  return fgc_add_rn(fgc_mul_rn(wa, a), fgc_mul_rn(wb, b));
}

template <typename T>
__global__ void linear_fwd_kernel(fgk_resize_geom g, const T *x, T *y, int64_t n) {
  FGC_GRID_STRIDE(e, n) {
    const int64_t ow = e % g.OW, oh = (e / g.OW) % g.OH, p = e / (g.OW * g.OH);
    int64_t h0, h1, w0, w1;
    double wh, ww;
    fgk_resize_linear_taps(g.coord, oh, g.H, g.OH, g.scale_h, &h0, &h1, &wh);
    fgk_resize_linear_taps(g.coord, ow, g.W, g.OW, g.scale_w, &w0, &w1, &ww);
    /* The weights rounded to T first, then 1 - w in T: the CPU's. */
    const T lh = (T)wh, hh = (T)1 - lh, lw = (T)ww, hw = (T)1 - lw;
    const T *r0 = x + (p * g.H + h0) * g.W, *r1 = x + (p * g.H + h1) * g.W;
    y[e] = blend(hh, blend(hw, r0[w0], lw, r0[w1]), lh, blend(hw, r1[w0], lw, r1[w1]));
  }
}

template <typename T>
__global__ void nearest_bwd_kernel(fgk_resize_geom g, const T *dy, T *dx, int64_t n) {
  FGC_GRID_STRIDE(e, n) {
    int64_t ih, iw, oh0, oh1, ow0, ow1;
    const T *dyp = dy + dx_span(g, 0, e, &ih, &iw, &oh0, &oh1, &ow0, &ow1) * g.OH * g.OW;
    double s = 0;
    for (int64_t oh = oh0; oh < oh1; oh++)
      for (int64_t ow = ow0; ow < ow1; ow++)
        s += (double)dyp[oh * g.OW + ow];
    dx[e] = (T)s;
  }
}

/* s plus d times the weight of each of one output's four taps that lands
 * on (ih, iw), in the forward's tap order. Each tap counts on its own, so
 * a border output whose two taps coincide adds both weights. The weights
 * are the forward's, rounded to T (their product is exact in double for
 * f32). */
template <typename T>
__device__ double add_taps(double s, double d, int64_t ih, int64_t iw, const int64_t *hs,
                           const int64_t *ws, T lh, T lw) {
  const double ah[2] = {(double)((T)1 - lh), (double)lh};
  const double aw[2] = {(double)((T)1 - lw), (double)lw};
#pragma unroll
  for (int a = 0; a < 2; a++)
#pragma unroll
    for (int b = 0; b < 2; b++)
      if (hs[a] == ih && ws[b] == iw) s = fgc_add_rn(s, fgc_mul_rn(fgc_mul_rn(ah[a], aw[b]), d));
  return s;
}

template <typename T>
__global__ void linear_bwd_kernel(fgk_resize_geom g, const T *dy, T *dx, int64_t n) {
  FGC_GRID_STRIDE(e, n) {
    int64_t ih, iw, oh0, oh1, ow0, ow1;
    const T *dyp = dy + dx_span(g, 1, e, &ih, &iw, &oh0, &oh1, &ow0, &ow1) * g.OH * g.OW;
    double s = 0;
    for (int64_t oh = oh0; oh < oh1; oh++) {
      int64_t hs[2], ws[2];
      double wh, ww;
      fgk_resize_linear_taps(g.coord, oh, g.H, g.OH, g.scale_h, &hs[0], &hs[1], &wh);
      for (int64_t ow = ow0; ow < ow1; ow++) {
        fgk_resize_linear_taps(g.coord, ow, g.W, g.OW, g.scale_w, &ws[0], &ws[1], &ww);
        s = add_taps<T>(s, (double)dyp[oh * g.OW + ow], ih, iw, hs, ws, (T)wh, (T)ww);
      }
    }
    dx[e] = (T)s;
  }
}

/* linear: resize_linear (else nearest); grad: the gradient, dy in[0] and
 * x in[1] (its shape only) into dx. */
template <typename T> static int run_resize(const fg_kctx *ctx, fg_dtype dt, int linear, int grad) {
  fgk_resize_geom g;
  memset(&g, 0, sizeof g);
  if (fgc_check(ctx, grad ? 2 : 1, 1) != 0 || fgk_resize_geom_init(ctx, dt, grad, &g) != 0)
    return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  const unsigned blocks = fgc_blocks(n, FGC_THREADS);
  cudaStream_t s = fgc_stream(ctx);
  const T *a = (const T *)ctx->in[0].data;
  T *o = (T *)ctx->out[0].data;
  if (grad && linear)
    linear_bwd_kernel<T><<<blocks, FGC_THREADS, 0, s>>>(g, a, o, n);
  else if (grad)
    nearest_bwd_kernel<T><<<blocks, FGC_THREADS, 0, s>>>(g, a, o, n);
  else if (linear)
    linear_fwd_kernel<T><<<blocks, FGC_THREADS, 0, s>>>(g, a, o, n);
  else
    nearest_fwd_kernel<T><<<blocks, FGC_THREADS, 0, s>>>(g, a, o, n);
  return fgc_launched(ctx, "resize kernel");
}

#define RESIZE_CUDA(name, linear, grad)                                                            \
  int name##_f32(const fg_kctx *ctx) { return run_resize<float>(ctx, FG_F32, linear, grad); }      \
  int name##_f64(const fg_kctx *ctx) { return run_resize<double>(ctx, FG_F64, linear, grad); }

RESIZE_CUDA(fgc_resize_nearest, 0, 0)
RESIZE_CUDA(fgc_resize_linear, 1, 0)
RESIZE_CUDA(fgc_resize_nearest_grad, 0, 1)
RESIZE_CUDA(fgc_resize_linear_grad, 1, 1)
