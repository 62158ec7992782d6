/* softmax and log_softmax along p->axis, and the fused
 * softmax_cross_entropy loss, on the GPU. As on the CPU: the row maximum is
 * subtracted before exp (NaN anywhere in a row makes the row NaN), sums of
 * exp accumulate in double, softmax writes exp(x - m) * (T)(1 / sum) and
 * log_softmax x - (m + log(sum)) computed in double.
 *
 * Contiguous rows (the last axis) get a warp per row (rows up to 1024
 * elements) or a block of 256 threads per row: rows over 1024, and rows of
 * 256 or more when there are fewer than 2048 of them, which as warps would
 * leave most of a large GPU idle. The choice depends on the shape alone. Reductions are
 * butterfly shuffles plus a fixed pass over the warps' results, so every
 * thread sees the same, deterministic value. Rows along another axis get a
 * thread per column. The loss sums its rows' losses in fixed partials
 * (scratch) and adds those in order in a second kernel: deterministic, no
 * atomics. Its rows take a block each when they have 256 or more classes
 * and there are fewer than 2048 of them, else a warp each (at any width). */
#include <math.h>

#include "kernels/cuda/common.cuh"

__device__ __forceinline__ float s_exp(float x) { return expf(x); }
__device__ __forceinline__ double s_exp(double x) { return exp(x); }

template <typename T> struct MaxNan {
  __device__ T operator()(T a, T b) const { return (b > a || b != b) ? b : a; }
};
struct AddD {
  __device__ double operator()(double a, double b) const { return a + b; }
};

/* The reduction of v over the TPR threads that share a row (32: one warp;
 * 256: the whole block, through sh, which needs FGC_THREADS / 32 slots).
 * Every participating thread returns the same value. */
template <int TPR, typename V, class F> __device__ __forceinline__ V row_reduce(V v, F f, V *sh) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    v = f(v, __shfl_xor_sync(0xffffffffu, v, off));
  if (TPR == 32) return v;
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) sh[warp] = v;
  __syncthreads();
  V r = sh[0];
  for (int k = 1; k < FGC_THREADS / 32; k++)
    r = f(r, sh[k]);
  __syncthreads();
  return r;
}

/* max and sum of exp(x - max) of one contiguous row, by TPR threads. */
template <typename T, int TPR>
__device__ __forceinline__ void row_stats(const T *xr, int64_t A, int lane, T *m_out, double *s_out,
                                          T *shm, double *shd) {
  T m = -INFINITY;
  for (int64_t j = lane; j < A; j += TPR)
    m = MaxNan<T>()(m, xr[j]);
  m = row_reduce<TPR>(m, MaxNan<T>(), shm);
  double s = 0;
  for (int64_t j = lane; j < A; j += TPR)
    s += (double)s_exp(xr[j] - m);
  s = row_reduce<TPR>(s, AddD(), shd);
  *m_out = m;
  *s_out = s;
}

/* Rows of A contiguous elements; FGC_THREADS / TPR rows per block pass. */
template <typename T, int TPR, bool LOG>
__global__ void softmax_rows_kernel(const T *x, T *y, int64_t rows, int64_t A) {
  __shared__ T shm[FGC_THREADS / 32];
  __shared__ double shd[FGC_THREADS / 32];
  const int rpb = FGC_THREADS / TPR, lane = threadIdx.x % TPR, sub = threadIdx.x / TPR;
  for (int64_t row0 = (int64_t)blockIdx.x * rpb; row0 < rows; row0 += (int64_t)gridDim.x * rpb) {
    const int64_t row = row0 + sub;
    if (TPR == 32 && row >= rows) continue; /* a whole warp; no block barrier in this mode */
    const T *xr = x + row * A;
    T *yr = y + row * A;
    T m;
    double s;
    row_stats<T, TPR>(xr, A, lane, &m, &s, shm, shd);
    if (LOG) {
      const double lse = (double)m + log(s);
      for (int64_t j = lane; j < A; j += TPR)
        yr[j] = (T)((double)xr[j] - lse);
    } else {
      const T inv = (T)(1.0 / s);
      for (int64_t j = lane; j < A; j += TPR)
        yr[j] = s_exp(xr[j] - m) * inv;
    }
  }
}

/* Rows along a non-last axis: one thread per (outer, column), stride inner. */
template <typename T, bool LOG>
__global__ void softmax_cols_kernel(const T *x, T *y, int64_t n_cols, int64_t A, int64_t inner) {
  FGC_GRID_STRIDE(t, n_cols) {
    const int64_t op = t / inner, c = t - op * inner;
    const int64_t start = op * A * inner + c;
    const T *xr = x + start;
    T *yr = y + start;
    T m = xr[0];
    for (int64_t j = 1; j < A; j++)
      m = MaxNan<T>()(m, xr[j * inner]);
    double s = 0;
    for (int64_t j = 0; j < A; j++)
      s += (double)s_exp(xr[j * inner] - m);
    if (LOG) {
      const double lse = (double)m + log(s);
      for (int64_t j = 0; j < A; j++)
        yr[j * inner] = (T)((double)xr[j * inner] - lse);
    } else {
      const T inv = (T)(1.0 / s);
      for (int64_t j = 0; j < A; j++)
        yr[j * inner] = s_exp(xr[j * inner] - m) * inv;
    }
  }
}

template <typename T, bool LOG> static int softmax(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 1, 1) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  if (in->dtype != dt || out->dtype != dt)
    return fgk_fail(ctx, "expected %s input and output, got %s and %s", fg_dtype_name(dt),
                    fg_dtype_name(in->dtype), fg_dtype_name(out->dtype));
  const int axis = ctx->p->softmax.axis;
  if (axis < 0 || axis >= in->rank)
    return fgk_fail(ctx, "axis %d is out of range [0, %d)", axis, in->rank);
  const int64_t n = fgk_numel(in);
  if (fgk_numel(out) != n)
    return fgk_fail(ctx, "input has %lld elements, output %lld", (long long)n,
                    (long long)fgk_numel(out));
  if (n == 0) return 0;
  int64_t outer, inner;
  const int64_t A = in->dims[axis];
  fgk_axis_split(in, axis, &outer, &inner);
  const T *x = (const T *)in->data;
  T *y = (T *)out->data;
  cudaStream_t s = fgc_stream(ctx);
  if (inner > 1) {
    softmax_cols_kernel<T, LOG><<<fgc_blocks(outer * inner, FGC_THREADS), FGC_THREADS, 0, s>>>(
        x, y, outer * inner, A, inner);
  } else if (A <= 1024 && !(A >= 256 && outer < 2048)) {
    softmax_rows_kernel<T, 32, LOG>
        <<<fgc_blocks(outer, FGC_THREADS / 32), FGC_THREADS, 0, s>>>(x, y, outer, A);
  } else {
    softmax_rows_kernel<T, FGC_THREADS, LOG>
        <<<fgc_blocks(outer, 1), FGC_THREADS, 0, s>>>(x, y, outer, A);
  }
  return fgc_launched(ctx, LOG ? "log_softmax kernel" : "softmax kernel");
}
int fgc_softmax_f32(const fg_kctx *ctx) { return softmax<float, false>(ctx, FG_F32); }
int fgc_softmax_f64(const fg_kctx *ctx) { return softmax<double, false>(ctx, FG_F64); }
int fgc_log_softmax_f32(const fg_kctx *ctx) { return softmax<float, true>(ctx, FG_F32); }
int fgc_log_softmax_f64(const fg_kctx *ctx) { return softmax<double, true>(ctx, FG_F64); }

/* ---- softmax_cross_entropy ------------------------------------------------ */

#define XENT_MAX_BLOCKS 1024
#define XENT_WARPS      (FGC_THREADS / 32)

/* Block b sums the losses of rows [b * rpb, (b+1) * rpb): warp w takes
 * rows w, w + 8, ... of them in order, then the 8 warp sums add in order. */
template <typename T>
__global__ void xent_rows_kernel(const T *x, const void *labels, int is64, int64_t N, int64_t C,
                                 int64_t rpb, double *parts, int *flag) {
  __shared__ double wsum[XENT_WARPS];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t r0 = (int64_t)blockIdx.x * rpb, r1 = N - r0 > rpb ? r0 + rpb : N;
  double total = 0;
  for (int64_t n = r0 + warp; n < r1; n += XENT_WARPS) {
    const T *row = x + n * C;
    T m;
    double s;
    row_stats<T, 32>(row, C, lane, &m, &s, NULL, NULL);
    const int64_t l = fgc_index_at(labels, is64, n);
    if (l < 0 || l >= C) {
      if (lane == 0) fgc_raise(flag, FG_CUDA_ERR_LABEL, n, l, C, 0);
      total += NAN;
    } else {
      total += (double)m + log(s) - (double)row[l];
    }
  }
  if (lane == 0) wsum[warp] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    double b = wsum[0];
    for (int k = 1; k < XENT_WARPS; k++)
      b += wsum[k];
    parts[blockIdx.x] = b;
  }
}

/* Rows of 256 or more, fewer than 2048 of them (as in softmax): block n
 * takes row n alone, and its loss is partial n. */
template <typename T>
__global__ void xent_row_block_kernel(const T *x, const void *labels, int is64, int64_t C,
                                      double *parts, int *flag) {
  __shared__ T shm[FGC_THREADS / 32];
  __shared__ double shd[FGC_THREADS / 32];
  const int64_t n = blockIdx.x;
  const T *row = x + n * C;
  T m;
  double s;
  row_stats<T, FGC_THREADS>(row, C, threadIdx.x, &m, &s, shm, shd);
  if (threadIdx.x != 0) return;
  const int64_t l = fgc_index_at(labels, is64, n);
  if (l < 0 || l >= C) {
    fgc_raise(flag, FG_CUDA_ERR_LABEL, n, l, C, 0);
    parts[n] = NAN;
  } else {
    parts[n] = (double)m + log(s) - (double)row[l];
  }
}

/* One block: thread t adds parts t, t + 256, ... in order, then a fixed
 * tree; the mean is written as T. */
template <typename T>
__global__ void xent_final_kernel(const double *parts, int64_t n_parts, int64_t N, T *out) {
  __shared__ double sh[FGC_THREADS];
  double v = 0;
  for (int64_t k = threadIdx.x; k < n_parts; k += FGC_THREADS)
    v += parts[k];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = FGC_THREADS / 2; w > 0; w >>= 1) {
    if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[0] = (T)(sh[0] / (double)N);
}

/* softmax_cross_entropy(logits [N, C], labels [N] i32/i64) -> scalar mean
 * of logsumexp(row) - row[label]; N == 0 gives NaN. A label outside [0, C)
 * is recorded (FG_CUDA_ERR_LABEL). */
template <typename T> static int xent(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 2, 1) != 0 || fgc_need_flag(ctx) != 0 || fgk_xent_check(ctx, dt) != 0)
    return -1;
  const fg_kbuf *lg = &ctx->in[0], *lb = &ctx->in[1], *out = &ctx->out[0];
  const int64_t N = lg->dims[0], C = lg->dims[1];
  if (N == 0)
    return fgc_fill_bits(ctx, out->data, 1, sizeof(T),
                         sizeof(T) == 4 ? 0x7fc00000ull : 0x7ff8000000000000ull);
  cudaStream_t s = fgc_stream(ctx);
  if (C >= 256 && N < 2048) {
    if (fgc_need_scratch(ctx, (size_t)N * sizeof(double)) != 0) return -1;
    double *parts = (double *)ctx->cuda->scratch;
    xent_row_block_kernel<T><<<(unsigned)N, FGC_THREADS, 0, s>>>(
        (const T *)lg->data, lb->data, lb->dtype == FG_I64, C, parts, ctx->cuda->error_flag);
    if (fgc_launched(ctx, "softmax_cross_entropy kernel") != 0) return -1;
    xent_final_kernel<T><<<1, FGC_THREADS, 0, s>>>(parts, N, N, (T *)out->data);
    return fgc_launched(ctx, "softmax_cross_entropy kernel");
  }
  int64_t blocks = (N + XENT_WARPS - 1) / XENT_WARPS;
  if (blocks > XENT_MAX_BLOCKS) blocks = XENT_MAX_BLOCKS;
  const int64_t rpb = (N + blocks - 1) / blocks;
  blocks = (N + rpb - 1) / rpb;
  if (fgc_need_scratch(ctx, (size_t)blocks * sizeof(double)) != 0) return -1;
  double *parts = (double *)ctx->cuda->scratch;
  /* C == 0: every label is out of range [0, 0), which the row kernel
   * records without reading a logit. */
  xent_rows_kernel<T><<<(unsigned)blocks, FGC_THREADS, 0, s>>>(
      (const T *)lg->data, lb->data, lb->dtype == FG_I64, N, C, rpb, parts, ctx->cuda->error_flag);
  if (fgc_launched(ctx, "softmax_cross_entropy kernel") != 0) return -1;
  xent_final_kernel<T><<<1, FGC_THREADS, 0, s>>>(parts, blocks, N, (T *)out->data);
  return fgc_launched(ctx, "softmax_cross_entropy kernel");
}
int fgc_softmax_xent_f32(const fg_kctx *ctx) { return xent<float>(ctx, FG_F32); }
int fgc_softmax_xent_f64(const fg_kctx *ctx) { return xent<double>(ctx, FG_F64); }

/* ---- softmax_cross_entropy_grad --------------------------------------------- */

/* Rows as softmax_rows_kernel; each element is (softmax - one_hot) * (dy /
 * N), rounded step by step as the separate kernels round (the products
 * are fgc_mul_rn, so that no multiply-add contracts two roundings into one). */
template <typename T, int TPR>
__global__ void xent_grad_kernel(const T *x, const void *labels, int is64, const T *dy, T *y,
                                 int64_t rows, int64_t A, int *flag) {
  __shared__ T shm[FGC_THREADS / 32];
  __shared__ double shd[FGC_THREADS / 32];
  const int rpb = FGC_THREADS / TPR, lane = threadIdx.x % TPR, sub = threadIdx.x / TPR;
  const T scale = (dy ? dy[0] : (T)1) / (T)rows; /* NULL: dy = 1 */
  for (int64_t row0 = (int64_t)blockIdx.x * rpb; row0 < rows; row0 += (int64_t)gridDim.x * rpb) {
    const int64_t row = row0 + sub;
    if (TPR == 32 && row >= rows) continue;
    const T *xr = x + row * A;
    T *yr = y + row * A;
    T m;
    double s;
    row_stats<T, TPR>(xr, A, lane, &m, &s, shm, shd);
    const int64_t l = fgc_index_at(labels, is64, row);
    if ((l < 0 || l >= A) && lane == 0) fgc_raise(flag, FG_CUDA_ERR_LABEL, row, l, A, 0);
    const T inv = (T)(1.0 / s);
    for (int64_t j = lane; j < A; j += TPR)
      yr[j] = fgc_mul_rn(fgc_mul_rn(s_exp(xr[j] - m), inv) - (j == l ? (T)1 : (T)0), scale);
  }
}

/* (softmax(lg) - one_hot(lb)) * (dy / N) into out, dy on the device or
 * NULL for 1. */
template <typename T>
static int launch_xent_grad(const fg_kctx *ctx, const fg_kbuf *lg, const fg_kbuf *lb, const T *dy,
                            fg_kbuf *out) {
  const int64_t N = lg->dims[0], C = lg->dims[1];
  if (N == 0 || C == 0) return 0;
  cudaStream_t s = fgc_stream(ctx);
  const T *x = (const T *)lg->data;
  const int is64 = lb->dtype == FG_I64;
  if (C <= 1024 && !(C >= 256 && N < 2048))
    xent_grad_kernel<T, 32><<<fgc_blocks(N, FGC_THREADS / 32), FGC_THREADS, 0, s>>>(
        x, lb->data, is64, dy, (T *)out->data, N, C, ctx->cuda->error_flag);
  else
    xent_grad_kernel<T, FGC_THREADS><<<fgc_blocks(N, 1), FGC_THREADS, 0, s>>>(
        x, lb->data, is64, dy, (T *)out->data, N, C, ctx->cuda->error_flag);
  return fgc_launched(ctx, "softmax_cross_entropy_grad kernel");
}

/* softmax_cross_entropy_grad(logits [N, C], labels [N], dy scalar) ->
 * (softmax(logits) - one_hot(labels)) * (dy / N). A label outside [0, C)
 * is recorded (FG_CUDA_ERR_LABEL). */
template <typename T> static int xent_grad(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 3, 1) != 0 || fgc_need_flag(ctx) != 0 || fgk_xent_grad_check(ctx, dt) != 0)
    return -1;
  return launch_xent_grad<T>(ctx, &ctx->in[0], &ctx->in[1], (const T *)ctx->in[2].data,
                             &ctx->out[0]);
}
int fgc_softmax_xent_grad_f32(const fg_kctx *ctx) { return xent_grad<float>(ctx, FG_F32); }
int fgc_softmax_xent_grad_f64(const fg_kctx *ctx) { return xent_grad<double>(ctx, FG_F64); }

/* softmax_cross_entropy_and_grad(logits, labels) -> loss, (softmax(logits)
 * - one_hot(labels)) / N: the loss kernels into output 0, then the
 * gradient's kernel with dy = 1 into output 1 (the bits of the two nodes
 * it stands for). */
template <typename T> static int xent_and_grad(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 2, 2) != 0) return -1;
  const fg_kbuf *lg = &ctx->in[0], *dx = &ctx->out[1];
  if (dx->dtype != dt || fgk_numel(dx) != fgk_numel(lg))
    return fgk_fail(ctx, "output 1 must be %s with the logits' %lld elements, is %s with %lld",
                    fg_dtype_name(dt), (long long)fgk_numel(lg), fg_dtype_name(dx->dtype),
                    (long long)fgk_numel(dx));
  fg_kctx loss = *ctx;
  loss.n_out = 1;
  if (xent<T>(&loss, dt) != 0) return -1;
  return launch_xent_grad<T>(ctx, lg, &ctx->in[1], NULL, &ctx->out[1]);
}
int fgc_softmax_xent_and_grad_f32(const fg_kctx *ctx) { return xent_and_grad<float>(ctx, FG_F32); }
int fgc_softmax_xent_and_grad_f64(const fg_kctx *ctx) { return xent_and_grad<double>(ctx, FG_F64); }
