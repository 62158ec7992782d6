/* Pooling on the GPU: the same ops, windows and tie rules as
 * kernels/cpu/pool.c (the geometry is kernels/pool_geom.h, shared), one
 * thread per output element, grid-stride. The gradients gather: one thread
 * per input element sums, in a fixed order, the dy of the outputs whose
 * windows take it, so they need no atomics and are deterministic. The max
 * gradient recomputes each candidate window's argmax (first maximum in
 * window order, NaN winning), as the CPU does. The global max gradient is
 * one thread per plane writing dy at its argmax into a zeroed dx. */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/pool_geom.h"

enum { K_MAX, K_AVG, K_ADAPTIVE };

/* Flat plane index of output (oh, ow)'s first maximum, or -1. */
template <typename T>
__device__ int64_t max_argmax(const fgk_pool_geom &g, const T *x, int64_t oh, int64_t ow, T *mv) {
  const int64_t h0 = oh * g.sh - g.pt, w0 = ow * g.sw - g.pl;
  int64_t best = -1;
  T m = (T)-INFINITY;
  for (int64_t i = 0; i < g.kh; i++) {
    const int64_t ih = h0 + i * g.dh;
    if (ih < 0 || ih >= g.H) continue;
    for (int64_t j = 0; j < g.kw; j++) {
      const int64_t iw = w0 + j * g.dw;
      if (iw < 0 || iw >= g.W) continue;
      const T v = x[ih * g.W + iw];
      if (best < 0 || v > m || v != v) {
        best = ih * g.W + iw;
        m = v;
      }
    }
  }
  *mv = m;
  return best;
}

template <typename T>
__global__ void pool_fwd_kernel(fgk_pool_geom g, int kind, const T *x, T *y, int64_t n) {
  FGC_GRID_STRIDE(e, n) {
    const int64_t ow = e % g.OW, oh = (e / g.OW) % g.OH, p = e / (g.OW * g.OH);
    const T *xp = x + p * g.H * g.W;
    if (kind == K_MAX) {
      T m;
      max_argmax(g, xp, oh, ow, &m);
      y[e] = m;
      continue;
    }
    int64_t h0, h1, w0, w1, div;
    if (kind == K_AVG) {
      div = fgk_avg_divisor(&g, oh, ow, &h0, &h1, &w0, &w1);
    } else {
      fgk_adaptive_window(oh, g.H, g.OH, &h0, &h1);
      fgk_adaptive_window(ow, g.W, g.OW, &w0, &w1);
      div = (h1 - h0) * (w1 - w0);
    }
    double s = 0;
    for (int64_t ih = h0; ih < h1; ih++)
      for (int64_t iw = w0; iw < w1; iw++)
        s += (double)xp[ih * g.W + iw];
    y[e] = div > 0 ? (T)(s / (double)div) : (T)0;
  }
}

/* The outputs along one dim whose window (k taps d apart from o * s - pb)
 * hold input i: taps t with (i + pb - t * d) a non-negative multiple of s
 * below s * n_out. Visited in tap order. */
#define FOR_TAPS(o, i, k, s, d, pb, n_out, ...)                                                    \
  for (int64_t tap_ = 0; tap_ < (k); tap_++) {                                                     \
    const int64_t num_ = (i) + (pb)-tap_ * (d);                                                    \
    if (num_ < 0 || num_ % (s) != 0) continue;                                                     \
    const int64_t o = num_ / (s);                                                                  \
    if (o >= (n_out)) continue;                                                                    \
    __VA_ARGS__;                                                                                   \
  }

template <typename T>
__global__ void max_bwd_kernel(fgk_pool_geom g, const T *dy, const T *x, T *dx, int64_t n) {
  FGC_GRID_STRIDE(e, n) {
    const int64_t iw = e % g.W, ih = (e / g.W) % g.H, p = e / (g.W * g.H);
    const T *xp = x + p * g.H * g.W;
    const T *dyp = dy + p * g.OH * g.OW;
    const int64_t me = ih * g.W + iw;
    double s = 0;
    FOR_TAPS(oh, ih, g.kh, g.sh, g.dh, g.pt, g.OH, FOR_TAPS(ow, iw, g.kw, g.sw, g.dw, g.pl, g.OW, {
               T m;
               if (max_argmax(g, xp, oh, ow, &m) == me) s += (double)dyp[oh * g.OW + ow];
             }))
    dx[e] = (T)s;
  }
}

template <typename T>
__global__ void avg_bwd_kernel(fgk_pool_geom g, const T *dy, T *dx, int64_t n) {
  FGC_GRID_STRIDE(e, n) {
    const int64_t iw = e % g.W, ih = (e / g.W) % g.H, p = e / (g.W * g.H);
    const T *dyp = dy + p * g.OH * g.OW;
    double s = 0;
    FOR_TAPS(oh, ih, g.kh, g.sh, 1, g.pt, g.OH, FOR_TAPS(ow, iw, g.kw, g.sw, 1, g.pl, g.OW, {
               int64_t h0, h1, w0, w1;
               const int64_t div = fgk_avg_divisor(&g, oh, ow, &h0, &h1, &w0, &w1);
               if (div > 0) s += (double)(T)(dyp[oh * g.OW + ow] / (double)div);
             }))
    dx[e] = (T)s;
  }
}

/* The first and last adaptive windows along a dim that hold input i. */
static __device__ void adaptive_span(int64_t i, int64_t size, int64_t n_out, int64_t *o0,
                                     int64_t *o1) {
  int64_t lo = (i * n_out) / size, b, e;
  while (lo > 0) {
    fgk_adaptive_window(lo - 1, size, n_out, &b, &e);
    if (e <= i) break;
    lo--;
  }
  int64_t hi = lo;
  while (hi + 1 < n_out) {
    fgk_adaptive_window(hi + 1, size, n_out, &b, &e);
    if (b > i) break;
    hi++;
  }
  *o0 = lo;
  *o1 = hi + 1;
}

template <typename T>
__global__ void adaptive_bwd_kernel(fgk_pool_geom g, const T *dy, T *dx, int64_t n) {
  FGC_GRID_STRIDE(e, n) {
    const int64_t iw = e % g.W, ih = (e / g.W) % g.H, p = e / (g.W * g.H);
    const T *dyp = dy + p * g.OH * g.OW;
    int64_t oh0, oh1, ow0, ow1;
    adaptive_span(ih, g.H, g.OH, &oh0, &oh1);
    adaptive_span(iw, g.W, g.OW, &ow0, &ow1);
    double s = 0;
    for (int64_t oh = oh0; oh < oh1; oh++) {
      int64_t h0, h1;
      fgk_adaptive_window(oh, g.H, g.OH, &h0, &h1);
      if (ih < h0 || ih >= h1) continue;
      for (int64_t ow = ow0; ow < ow1; ow++) {
        int64_t w0, w1;
        fgk_adaptive_window(ow, g.W, g.OW, &w0, &w1);
        if (iw < w0 || iw >= w1) continue;
        s += (double)(T)(dyp[oh * g.OW + ow] / (double)((h1 - h0) * (w1 - w0)));
      }
    }
    dx[e] = (T)s;
  }
}

/* One thread per plane; dx was zeroed. */
template <typename T>
__global__ void global_max_bwd_kernel(fgk_pool_geom g, const T *dy, const T *x, T *dx) {
  FGC_GRID_STRIDE(p, g.planes) {
    T m;
    const int64_t a = max_argmax(g, x + p * g.H * g.W, 0, 0, &m);
    if (a >= 0) dx[p * g.H * g.W + a] = dy[p];
  }
}

enum { G_NONE, G_MAX, G_AVG, G_ADAPTIVE, G_GLOBAL_MAX };

/* kind: the forward family (K_*); grad: which gradient (G_*), or G_NONE;
 * global: the global max, whose window is the plane. */
template <typename T>
static int run_pool(const fg_kctx *ctx, fg_dtype dt, int kind, int grad, int global) {
  const fg_kbuf *x, *y;
  if (fgc_check(ctx, grad ? 2 : 1, 1) != 0 || fgk_pool_bufs(ctx, dt, grad, &x, &y) != 0) return -1;
  const int windowed = (kind == K_MAX || kind == K_AVG) && !global;
  fgk_pool_geom g;
  memset(&g, 0, sizeof g);
  if (fgk_pool_geom_init(ctx, x, y, windowed ? &ctx->p->pool2d : NULL, &g) != 0) return -1;
  if (grad && fgk_numel(&ctx->out[0]) != fgk_numel(x))
    return fgk_fail(ctx, "the gradient's output does not have x's shape");
  if (kind == K_ADAPTIVE && g.planes > 0 && (g.OH < 1 || g.OW < 1 || g.H < 1 || g.W < 1))
    return fgk_fail(ctx, "adaptive pooling of a [%lld,%lld] plane to [%lld,%lld]", (long long)g.H,
                    (long long)g.W, (long long)g.OH, (long long)g.OW);
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  const unsigned blocks = fgc_blocks(n, FGC_THREADS);
  cudaStream_t s = fgc_stream(ctx);
  const T *a = (const T *)ctx->in[0].data;
  T *o = (T *)ctx->out[0].data;
  switch (grad) {
  case G_NONE: pool_fwd_kernel<T><<<blocks, FGC_THREADS, 0, s>>>(g, kind, a, o, n); break;
  case G_MAX:
    max_bwd_kernel<T><<<blocks, FGC_THREADS, 0, s>>>(g, a, (const T *)ctx->in[1].data, o, n);
    break;
  case G_AVG: avg_bwd_kernel<T><<<blocks, FGC_THREADS, 0, s>>>(g, a, o, n); break;
  case G_ADAPTIVE: adaptive_bwd_kernel<T><<<blocks, FGC_THREADS, 0, s>>>(g, a, o, n); break;
  case G_GLOBAL_MAX:
    if (fgc_fill_bits(ctx, o, n, sizeof(T), 0) != 0) return -1;
    global_max_bwd_kernel<T><<<fgc_blocks(g.planes, FGC_THREADS), FGC_THREADS, 0, s>>>(
        g, a, (const T *)ctx->in[1].data, o);
    break;
  }
  return fgc_launched(ctx, "pooling kernel");
}

#define POOL_CUDA(name, kind, grad, global)                                                        \
  int name##_f32(const fg_kctx *ctx) { return run_pool<float>(ctx, FG_F32, kind, grad, global); }  \
  int name##_f64(const fg_kctx *ctx) { return run_pool<double>(ctx, FG_F64, kind, grad, global); }

POOL_CUDA(fgc_max_pool2d, K_MAX, G_NONE, 0)
POOL_CUDA(fgc_avg_pool2d, K_AVG, G_NONE, 0)
POOL_CUDA(fgc_global_avg_pool, K_ADAPTIVE, G_NONE, 0)
POOL_CUDA(fgc_global_max_pool, K_MAX, G_NONE, 1)
POOL_CUDA(fgc_adaptive_avg_pool2d, K_ADAPTIVE, G_NONE, 0)
POOL_CUDA(fgc_max_pool2d_grad, K_MAX, G_MAX, 0)
POOL_CUDA(fgc_avg_pool2d_grad, K_AVG, G_AVG, 0)
POOL_CUDA(fgc_adaptive_avg_pool2d_grad, K_ADAPTIVE, G_ADAPTIVE, 0)
POOL_CUDA(fgc_global_max_pool_grad, K_MAX, G_GLOBAL_MAX, 1)
