/* cumsum, topk and topk_grad on the GPU (logsumexp is in reduce.cu, beside
 * the reduction walks it shares): one thread per line along the axis, each
 * walking its elements in the CPU kernel's order, so the results are the
 * CPU's (kernels/cpu/reduce2.c). Simple rather than fast: these ops are
 * small parts of the graphs that use them. Shapes are checked by the CPU code
 * (kernels/kernel_shape.h), so both backends refuse the same calls with the same text. */
#include <math.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

/* ---- cumsum -------------------------------------------------------------- */

/* Line t = (outer position, column): its running sum in ACC, in order
 * along the axis (backwards when reverse). */
template <typename T, typename ACC>
__global__ void cumsum_kernel(const T *x, T *o, int64_t lines, int64_t A, int64_t inner,
                              int exclusive, int reverse) {
  FGC_GRID_STRIDE(t, lines) {
    const int64_t op = t / inner, c = t - op * inner;
    const int64_t base = op * A * inner + c;
    ACC acc = 0;
    for (int64_t s = 0; s < A; s++) {
      const int64_t e = base + (reverse ? A - 1 - s : s) * inner;
      const ACC v = (ACC)x[e];
      if (!exclusive) acc += v;
      o[e] = (T)acc;
      if (exclusive) acc += v;
    }
  }
}

template <typename T, typename ACC> static int cumsum(const fg_kctx *ctx, fg_dtype dt) {
  int64_t outer, A, inner;
  if (fgc_check(ctx, 1, 1) != 0 || fgk_cumsum_check(ctx, dt, &outer, &A, &inner) != 0) return -1;
  const int64_t lines = outer * inner;
  if (lines * A == 0) return 0;
  cumsum_kernel<T, ACC><<<fgc_blocks(lines, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const T *)ctx->in[0].data, (T *)ctx->out[0].data, lines, A, inner, ctx->p->cumsum.exclusive,
      ctx->p->cumsum.reverse);
  return fgc_launched(ctx, "cumsum kernel");
}
int fgc_cumsum_f32(const fg_kctx *ctx) { return cumsum<float, double>(ctx, FG_F32); }
int fgc_cumsum_f64(const fg_kctx *ctx) { return cumsum<double, double>(ctx, FG_F64); }
/* Integers wrap in uint64; the low bits are the i32 sum. */
int fgc_cumsum_i32(const fg_kctx *ctx) { return cumsum<int32_t, uint64_t>(ctx, FG_I32); }
int fgc_cumsum_i64(const fg_kctx *ctx) { return cumsum<int64_t, uint64_t>(ctx, FG_I64); }

/* ---- topk ------------------------------------------------------------------ */

/* (a, i) comes before (b, j): a NaN is larger than any number, equal
 * values go by the lower index (the CPU's TK_BETTER). */
template <typename T>
__device__ __forceinline__ bool tk_better(T a, int64_t i, T b, int64_t j, int largest) {
  const bool an = a != a, bn = b != b;
  if (an || bn) return (an && bn) ? i < j : (largest ? an : bn);
  if (a != b) return largest ? a > b : a < b;
  return i < j;
}

/* The CPU's heap in the row's output slots (stride st): root the worst. */
template <typename T>
__device__ void tk_sift(T *v, int64_t *ix, int64_t st, int64_t n, int64_t i, int largest) {
  for (;;) {
    int64_t w = i;
    for (int64_t c = 2 * i + 1; c <= 2 * i + 2 && c < n; c++)
      if (tk_better(v[w * st], ix[w * st], v[c * st], ix[c * st], largest)) w = c;
    if (w == i) return;
    const T tv = v[i * st];
    const int64_t ti = ix[i * st];
    v[i * st] = v[w * st], ix[i * st] = ix[w * st];
    v[w * st] = tv, ix[w * st] = ti;
    i = w;
  }
}

template <typename T>
__global__ void topk_kernel(const T *xs, T *vs, int64_t *ixs, int64_t rows, int64_t A, int64_t st,
                            int64_t k, int lg) {
  FGC_GRID_STRIDE(r, rows) {
    const int64_t op = r / st, c = r - op * st;
    const T *x = xs + op * A * st + c;
    T *v = vs + op * k * st + c;
    int64_t *ix = ixs + op * k * st + c;
    for (int64_t a = 0; a < A; a++) {
      const T xv = x[a * st];
      if (a < k) {
        int64_t i = a;
        while (i > 0 && tk_better(v[(i - 1) / 2 * st], ix[(i - 1) / 2 * st], xv, a, lg)) {
          v[i * st] = v[(i - 1) / 2 * st], ix[i * st] = ix[(i - 1) / 2 * st];
          i = (i - 1) / 2;
        }
        v[i * st] = xv, ix[i * st] = a;
      } else if (k > 0 && tk_better(xv, a, v[0], ix[0], lg)) {
        v[0] = xv, ix[0] = a;
        tk_sift(v, ix, st, k, 0, lg);
      }
    }
    for (int64_t n = k; n > 1; n--) {
      const T tv = v[0];
      const int64_t ti = ix[0];
      v[0] = v[(n - 1) * st], ix[0] = ix[(n - 1) * st];
      v[(n - 1) * st] = tv, ix[(n - 1) * st] = ti;
      tk_sift(v, ix, st, n - 1, 0, lg);
    }
  }
}

template <typename T> static int topk(const fg_kctx *ctx, fg_dtype dt) {
  int64_t outer, A, inner;
  if (fgc_check(ctx, 1, 2) != 0 || fgk_topk_check(ctx, dt, &outer, &A, &inner) != 0) return -1;
  const int64_t k = ctx->p->topk.k, rows = outer * inner;
  if (rows * k == 0) return 0;
  topk_kernel<T><<<fgc_blocks(rows, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const T *)ctx->in[0].data, (T *)ctx->out[0].data, (int64_t *)ctx->out[1].data, rows, A,
      inner, k, ctx->p->topk.largest);
  return fgc_launched(ctx, "topk kernel");
}
int fgc_topk_f32(const fg_kctx *ctx) { return topk<float>(ctx, FG_F32); }
int fgc_topk_f64(const fg_kctx *ctx) { return topk<double>(ctx, FG_F64); }
int fgc_topk_i32(const fg_kctx *ctx) { return topk<int32_t>(ctx, FG_I32); }
int fgc_topk_i64(const fg_kctx *ctx) { return topk<int64_t>(ctx, FG_I64); }

/* ---- topk_grad ------------------------------------------------------------- */

/* Line t adds its K values of dy, in order, into its own column of the
 * (zeroed) output: no two threads write one element, no atomics. A bad
 * index is flagged (the first one wins) and skipped. */
template <typename T>
__global__ void topk_grad_kernel(const T *dy, const int64_t *idx, T *o, int64_t lines, int64_t A,
                                 int64_t K, int64_t inner, int *flag) {
  FGC_GRID_STRIDE(t, lines) {
    const int64_t op = t / inner, c = t - op * inner;
    for (int64_t j = 0; j < K; j++) {
      const int64_t e = (op * K + j) * inner + c, v = idx[e];
      if (v < 0 || v >= A)
        fgc_raise(flag, FG_CUDA_ERR_INDEX, e, v, A, 0);
      else
        o[(op * A + v) * inner + c] += dy[e];
    }
  }
}

template <typename T> static int topk_grad(const fg_kctx *ctx, fg_dtype dt) {
  int64_t outer, A, K, inner;
  if (fgc_check(ctx, 3, 1) != 0 || fgc_need_flag(ctx) != 0 ||
      fgk_topk_grad_check(ctx, dt, &outer, &A, &K, &inner) != 0)
    return -1;
  const int64_t n = fgk_numel(&ctx->out[0]), lines = outer * inner;
  cudaStream_t s = fgc_stream(ctx);
  if (n == 0) return 0;
  if (cudaMemsetAsync(ctx->out[0].data, 0, (size_t)n * sizeof(T), s) != cudaSuccess)
    return fgc_launched(ctx, "topk_grad zeroing");
  if (lines * K == 0) return 0;
  topk_grad_kernel<T><<<fgc_blocks(lines, FGC_THREADS), FGC_THREADS, 0, s>>>(
      (const T *)ctx->in[0].data, (const int64_t *)ctx->in[1].data, (T *)ctx->out[0].data, lines, A,
      K, inner, ctx->cuda->error_flag);
  return fgc_launched(ctx, "topk_grad kernel");
}
int fgc_topk_grad_f32(const fg_kctx *ctx) { return topk_grad<float>(ctx, FG_F32); }
int fgc_topk_grad_f64(const fg_kctx *ctx) { return topk_grad<double>(ctx, FG_F64); }
