/* Reductions (reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod,
 * sum_to, logsumexp), argmax and argmin on
 * the GPU, deterministic: no atomics, and how the work is cut depends on
 * the shape alone, never on the device, so a result is bitwise the same
 * from run to run (it may differ from the CPU's in the last bits: the
 * summation order is not the CPU's).
 *
 * The input dims are coalesced into alternating kept/reduced groups as in
 * kernels/cpu/reduce.c. Two layouts:
 *   - the innermost group is reduced (inner == 1): a block of 256 threads
 *     folds one output (threads stride over the reduced elements, then a
 *     fixed shared-memory tree);
 *   - the innermost group is kept (inner > 1): one thread per output, a
 *     sequential fold in row-major order, neighbouring threads reading
 *     neighbouring columns; or, for one reduced dim of at most 1024 rows
 *     over enough columns, 8 row groups per column in one kernel whose
 *     group results combine in order (red_cols_kernel).
 * Long reductions with few outputs are cut into S fixed chunks whose
 * partials go to the stream's scratch and are combined in chunk order by a
 * second kernel. In the thread layout the chunks are also what fills the
 * device: 2048 outputs of 4096 rows each would be 8 blocks on a GPU of 132
 * SMs, each thread walking 4096 rows; cut into 64 chunks of 64 rows it is
 * 131072 threads, where one thread per output left a bias gradient (sum_to
 * of [256, 2048] to [2048]) slow.
 * S is a function of the shape alone. f32 sums and means accumulate in
 * double, integer sums in uint64 (wrapping), as on the CPU. */
#include <math.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

/* Partials at most (8 bytes each): FG_CUDA_SCRATCH_MIN covers them. */
#define RED_MAX_PARTS (FG_CUDA_SCRATCH_MIN / 8)
/* Reduced elements per chunk before a reduction is split. */
#define RED_BLOCK_CHUNK  32768
#define RED_THREAD_CHUNK 256
/* The thread layout aims for this many folds in flight (enough for a
 * large GPU: 132 SMs x 2048 threads is 270k, and each fold is a short
 * loop), but no fold of fewer than RED_THREAD_MIN elements. */
#define RED_THREAD_WANT 131072
#define RED_THREAD_MIN  8

/* The shapes are checked and planned by kernels/cpu/reduce.c's code
 * (kernels/kernel_shape.h); the plan is zeroed first because kernels take it
 * by value. 1 when there is work, 0 for an empty output or input, -1 on
 * error. */
typedef fgk_red_plan red_plan;

static int red_plan_init(const fg_kctx *ctx, fg_dtype dt, red_plan *pl) {
  if (fgc_check(ctx, 1, 1) != 0) return -1;
  memset(pl, 0, sizeof *pl);
  return fgk_red_plan_init(ctx, dt, pl);
}

/* Input offset of element r of a row-major walk over dims[0..n). */
__device__ __forceinline__ int64_t seek(int n, const int64_t *dims, const int64_t *str, int64_t r) {
  int64_t off = 0;
  for (int d = n - 1; d >= 0; d--) {
    const int64_t q = r / dims[d];
    off += (r - q * dims[d]) * str[d];
    r = q;
  }
  return off;
}

/* Folds n elements p[0], p[st], p[2 st], ... into acc in that order, with
 * 8 independent loads in flight rather than one at a time. */
template <typename T, typename ACC, class Op>
__device__ __forceinline__ ACC fold_strided(ACC acc, const T *p, int64_t st, int64_t n) {
  int64_t r = 0;
  for (; r + 8 <= n; r += 8, p += 8 * st) {
    T v[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
      v[k] = p[k * st];
#pragma unroll
    for (int k = 0; k < 8; k++)
      acc = Op::combine(acc, Op::lift(v[k]));
  }
  for (; r < n; r++, p += st)
    acc = Op::combine(acc, Op::lift(*p));
  return acc;
}

/* The operations: init, combine (also of partials) and finish. */
template <typename T, typename ACC> struct SumOp {
  __device__ static ACC init() { return (ACC)0; }
  __device__ static ACC combine(ACC a, ACC x) { return a + x; }
  __device__ static ACC lift(T x) { return (ACC)x; }
  __device__ static T finish(ACC a, int64_t) { return (T)a; }
};
/* Integer sums in uint64 wrap; the low bits are the i32 result. */
template <typename T> struct SumIOp {
  __device__ static uint64_t init() { return 0; }
  __device__ static uint64_t combine(uint64_t a, uint64_t x) { return a + x; }
  __device__ static uint64_t lift(T x) { return (uint64_t)(int64_t)x; }
  __device__ static T finish(uint64_t a, int64_t) { return (T)a; }
};
template <typename T> struct MeanFOp : SumOp<T, double> {
  __device__ static T finish(double a, int64_t count) { return (T)(a / (double)count); }
};
/* Integer means stay integers: the exact sum (mod 2^64) / count, toward 0. */
template <typename T> struct MeanIOp : SumIOp<T> {
  __device__ static T finish(uint64_t a, int64_t count) { return (T)((int64_t)a / count); }
};
/* NaN wins once seen (np.max); `x != x` is false for integers. */
template <typename T> struct MaxOp {
  __device__ static T init();
  __device__ static T combine(T a, T x) { return (x > a || x != x) ? x : a; }
  __device__ static T lift(T x) { return x; }
  __device__ static T finish(T a, int64_t) { return a; }
};
template <> __device__ float MaxOp<float>::init() { return -INFINITY; }
template <> __device__ double MaxOp<double>::init() { return -INFINITY; }
template <> __device__ int32_t MaxOp<int32_t>::init() { return INT32_MIN; }
template <> __device__ int64_t MaxOp<int64_t>::init() { return INT64_MIN; }

/* reduce_min: MaxOp's fold with the comparison turned round. */
template <typename T> struct MinOp {
  __device__ static T init();
  __device__ static T combine(T a, T x) { return (x < a || x != x) ? x : a; }
  __device__ static T lift(T x) { return x; }
  __device__ static T finish(T a, int64_t) { return a; }
};
template <> __device__ float MinOp<float>::init() { return INFINITY; }
template <> __device__ double MinOp<double>::init() { return INFINITY; }
template <> __device__ int32_t MinOp<int32_t>::init() { return INT32_MAX; }
template <> __device__ int64_t MinOp<int64_t>::init() { return INT64_MAX; }
/* reduce_prod: floats in double, integers in uint64 wrapping (as the CPU). */
template <typename T> struct ProdFOp {
  __device__ static double init() { return 1.0; }
  __device__ static double combine(double a, double x) { return a * x; }
  __device__ static double lift(T x) { return (double)x; }
  __device__ static T finish(double a, int64_t) { return (T)a; }
};
template <typename T> struct ProdIOp {
  __device__ static uint64_t init() { return 1; }
  __device__ static uint64_t combine(uint64_t a, uint64_t x) { return a * x; }
  __device__ static uint64_t lift(T x) { return (uint64_t)(int64_t)x; }
  __device__ static T finish(uint64_t a, int64_t) { return (T)a; }
};

/* inner == 1: block b folds output g = b / S, chunk s = b % S. */
template <typename T, typename ACC, class Op>
__global__ void red_block_kernel(const T *in, T *out, ACC *parts, red_plan pl, int64_t S,
                                 int64_t chunk) {
  __shared__ ACC sh[FGC_THREADS];
  const int64_t n_items = pl.outer_total * S;
  for (int64_t item = blockIdx.x; item < n_items; item += gridDim.x) {
    const int64_t g = item / S, s = item - g * S;
    const int64_t obase = seek(pl.n_outer, pl.outer_dims, pl.outer_str, g);
    const int64_t r0 = s * chunk, r1 = pl.count - r0 > chunk ? r0 + chunk : pl.count;
    ACC acc = Op::init();
    if (pl.n_red == 1) { /* the reduced group is contiguous */
      for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
        acc = Op::combine(acc, Op::lift(in[obase + r]));
    } else {
      for (int64_t r = r0 + threadIdx.x; r < r1; r += blockDim.x)
        acc = Op::combine(acc, Op::lift(in[obase + seek(pl.n_red, pl.red_dims, pl.red_str, r)]));
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
      if ((int)threadIdx.x < w) sh[threadIdx.x] = Op::combine(sh[threadIdx.x], sh[threadIdx.x + w]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      if (S == 1)
        out[g] = Op::finish(sh[0], pl.count);
      else
        parts[item] = sh[0];
    }
    __syncthreads();
  }
}

/* inner > 1: thread item = s * n_out + o folds chunk s of output o
 * sequentially (row-major over the reduced dims). */
template <typename T, typename ACC, class Op>
__global__ void red_thread_kernel(const T *in, T *out, ACC *parts, red_plan pl, int64_t S,
                                  int64_t chunk) {
  const int64_t n_out = pl.outer_total * pl.inner;
  FGC_GRID_STRIDE(item, n_out * S) {
    const int64_t s = item / n_out, o = item - s * n_out;
    const int64_t op = o / pl.inner, c = o - op * pl.inner;
    const T *base = in + seek(pl.n_outer, pl.outer_dims, pl.outer_str, op) + c;
    int64_t r0 = s * chunk;
    const int64_t r1 = pl.count - r0 > chunk ? r0 + chunk : pl.count;
    int64_t cnt[FG_MAX_RANK];
    int64_t off = 0, q = r0;
    for (int d = pl.n_red - 1; d >= 0; d--) {
      cnt[d] = q % pl.red_dims[d];
      q /= pl.red_dims[d];
      off += cnt[d] * pl.red_str[d];
    }
    ACC acc = Op::init();
    if (pl.n_red == 1) { /* one reduced dim: the same order, loads in flight */
      acc = fold_strided<T, ACC, Op>(acc, base + off, pl.red_str[0], r1 - r0);
      r0 = r1; /* done: skip the general walk below */
    }
    for (int64_t r = r0; r < r1; r++) {
      acc = Op::combine(acc, Op::lift(base[off]));
      for (int d = pl.n_red - 1; d >= 0; d--) { /* next reduced element */
        off += pl.red_str[d];
        if (++cnt[d] < pl.red_dims[d]) break;
        off -= pl.red_str[d] * pl.red_dims[d];
        cnt[d] = 0;
      }
    }
    if (S == 1)
      out[o] = Op::finish(acc, pl.count);
    else
      parts[s * n_out + o] = acc; /* neighbouring threads, neighbouring slots */
  }
}

/* inner > 1 with one reduced dim of at most RED_COLS_MAX rows (a bias
 * gradient, [256, 2048] -> [2048]): one kernel, no partials. Block
 * (32, RED_COLS_GROUPS) takes 32 neighbouring outputs of outer index
 * blockIdx.y; row group y folds rows y, y + G, ... in order, 8 loads in
 * flight, and group 0 combines the G group results in order. */
#define RED_COLS_GROUPS 8
#define RED_COLS_MAX    1024
template <typename T, typename ACC, class Op>
__global__ void red_cols_kernel(const T *in, T *out, red_plan pl) {
  __shared__ ACC sh[RED_COLS_GROUPS][32];
  const int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x, op = blockIdx.y;
  const int g = threadIdx.y;
  ACC acc = Op::init();
  if (c < pl.inner && g < pl.count) {
    const T *p = in + seek(pl.n_outer, pl.outer_dims, pl.outer_str, op) + c + g * pl.red_str[0];
    const int64_t rows = (pl.count - g + RED_COLS_GROUPS - 1) / RED_COLS_GROUPS;
    acc = fold_strided<T, ACC, Op>(acc, p, pl.red_str[0] * RED_COLS_GROUPS, rows);
  }
  sh[g][threadIdx.x] = acc;
  __syncthreads();
  if (g == 0 && c < pl.inner) {
    ACC a = sh[0][threadIdx.x];
    for (int k = 1; k < RED_COLS_GROUPS; k++)
      a = Op::combine(a, sh[k][threadIdx.x]);
    out[op * pl.inner + c] = Op::finish(a, pl.count);
  }
}

/* Combines output o's S partials in chunk order; partial s of output o is
 * at o * os + s * ss (the block kernel's o * S + s, the thread kernel's
 * s * n_out + o). */
template <typename T, typename ACC, class Op>
__global__ void red_final_kernel(const ACC *parts, T *out, int64_t n_out, int64_t S, int64_t os,
                                 int64_t ss, int64_t count) {
  FGC_GRID_STRIDE(o, n_out) {
    const ACC *p = parts + o * os;
    ACC acc = p[0];
#pragma unroll 8
    for (int64_t s = 1; s < S; s++)
      acc = Op::combine(acc, p[s * ss]);
    out[o] = Op::finish(acc, count);
  }
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* empty_bits: the output of a reduction over nothing (or of no output). */
template <typename T, typename ACC, class Op>
static int reduce(const fg_kctx *ctx, fg_dtype dt, uint64_t empty_bits, const char *what) {
  red_plan pl;
  const int rc = red_plan_init(ctx, dt, &pl);
  if (rc < 0) return -1;
  T *out = (T *)ctx->out[0].data;
  const int64_t n_out = fgk_numel(&ctx->out[0]);
  if (rc == 0) return fgc_fill_bits(ctx, out, n_out, sizeof(T), empty_bits);
  /* Folding one element from the identity gives it back (a copy keeps -0.0,
   * as the CPU kernel does). */
  if (pl.count == 1) return fgc_copy_bytes(ctx, out, ctx->in[0].data, (size_t)n_out * sizeof(T));
  const T *in = (const T *)ctx->in[0].data;
  cudaStream_t s = fgc_stream(ctx);
  const int64_t col_blocks = ceil_div(pl.inner, 32);
  if (pl.inner > 1 && pl.n_red == 1 && pl.count <= RED_COLS_MAX && pl.outer_total <= 65535 &&
      (col_blocks * pl.outer_total >= 16 || pl.count <= 64)) {
    const dim3 grid((unsigned)col_blocks, (unsigned)pl.outer_total), block(32, RED_COLS_GROUPS);
    red_cols_kernel<T, ACC, Op><<<grid, block, 0, s>>>(in, out, pl);
    return fgc_launched(ctx, what);
  }
  const int64_t max_s = RED_MAX_PARTS / n_out;
  int64_t S = 1, chunk = pl.count;
  if (pl.inner == 1) {
    if (pl.count > RED_BLOCK_CHUNK && n_out < 512 && max_s > 1) {
      S = ceil_div(pl.count, RED_BLOCK_CHUNK);
      if (S > max_s) S = max_s;
    }
  } else if (max_s > 1) {
    int64_t fill = ceil_div(RED_THREAD_WANT, n_out);
    if (fill > pl.count / RED_THREAD_MIN) fill = pl.count / RED_THREAD_MIN;
    S = ceil_div(pl.count, RED_THREAD_CHUNK);
    if (S < fill) S = fill;
    if (S > max_s) S = max_s;
    if (S < 1) S = 1;
  }
  if (S > 1) chunk = ceil_div(pl.count, S);
  S = ceil_div(pl.count, chunk); /* no empty chunk */
  ACC *parts = NULL;
  if (S > 1) {
    const size_t bytes = (size_t)(n_out * S) * sizeof(ACC);
    if (fgc_need_scratch(ctx, bytes) != 0) return -1;
    parts = (ACC *)ctx->cuda->scratch;
  }
  if (pl.inner == 1) {
    const int64_t items = n_out * S;
    const unsigned blocks = (unsigned)(items < 65536 ? items : 65536);
    red_block_kernel<T, ACC, Op><<<blocks, FGC_THREADS, 0, s>>>(in, out, parts, pl, S, chunk);
  } else {
    red_thread_kernel<T, ACC, Op>
        <<<fgc_blocks(n_out * S, FGC_THREADS), FGC_THREADS, 0, s>>>(in, out, parts, pl, S, chunk);
  }
  if (fgc_launched(ctx, what) != 0) return -1;
  if (S == 1) return 0;
  const int64_t os = pl.inner == 1 ? S : 1, ss = pl.inner == 1 ? 1 : n_out;
  red_final_kernel<T, ACC, Op><<<fgc_blocks(n_out, FGC_THREADS), FGC_THREADS, 0, s>>>(
      parts, out, n_out, S, os, ss, pl.count);
  return fgc_launched(ctx, what);
}

#define F32_NAN    0x7fc00000ull
#define F64_NAN    0x7ff8000000000000ull
#define F32_NEGINF 0xff800000ull
#define F64_NEGINF 0xfff0000000000000ull

int fgc_reduce_sum_f32(const fg_kctx *ctx) {
  return reduce<float, double, SumOp<float, double>>(ctx, FG_F32, 0, "reduce_sum f32");
}
int fgc_reduce_sum_f64(const fg_kctx *ctx) {
  return reduce<double, double, SumOp<double, double>>(ctx, FG_F64, 0, "reduce_sum f64");
}
int fgc_reduce_sum_i32(const fg_kctx *ctx) {
  return reduce<int32_t, uint64_t, SumIOp<int32_t>>(ctx, FG_I32, 0, "reduce_sum i32");
}
int fgc_reduce_sum_i64(const fg_kctx *ctx) {
  return reduce<int64_t, uint64_t, SumIOp<int64_t>>(ctx, FG_I64, 0, "reduce_sum i64");
}
/* The mean of nothing is NaN for floats, 0 for integers (as the CPU). */
int fgc_reduce_mean_f32(const fg_kctx *ctx) {
  return reduce<float, double, MeanFOp<float>>(ctx, FG_F32, F32_NAN, "reduce_mean f32");
}
int fgc_reduce_mean_f64(const fg_kctx *ctx) {
  return reduce<double, double, MeanFOp<double>>(ctx, FG_F64, F64_NAN, "reduce_mean f64");
}
int fgc_reduce_mean_i32(const fg_kctx *ctx) {
  return reduce<int32_t, uint64_t, MeanIOp<int32_t>>(ctx, FG_I32, 0, "reduce_mean i32");
}
int fgc_reduce_mean_i64(const fg_kctx *ctx) {
  return reduce<int64_t, uint64_t, MeanIOp<int64_t>>(ctx, FG_I64, 0, "reduce_mean i64");
}
/* reduce_max and reduce_min keep the accumulator in x's type; `id`s are
 * the result of reducing nothing, as bit patterns of each dtype. */
#define EXTREME_ENTRIES(op, Op, f32_id, f64_id, i32_id, i64_id)                                    \
  int fgc_##op##_f32(const fg_kctx *ctx) {                                                         \
    return reduce<float, float, Op<float>>(ctx, FG_F32, f32_id, #op " f32");                       \
  }                                                                                                \
  int fgc_##op##_f64(const fg_kctx *ctx) {                                                         \
    return reduce<double, double, Op<double>>(ctx, FG_F64, f64_id, #op " f64");                    \
  }                                                                                                \
  int fgc_##op##_i32(const fg_kctx *ctx) {                                                         \
    return reduce<int32_t, int32_t, Op<int32_t>>(ctx, FG_I32, i32_id, #op " i32");                 \
  }                                                                                                \
  int fgc_##op##_i64(const fg_kctx *ctx) {                                                         \
    return reduce<int64_t, int64_t, Op<int64_t>>(ctx, FG_I64, i64_id, #op " i64");                 \
  }
/* The max of nothing is -inf for floats, the type's minimum for integers;
 * the min of nothing +inf for floats, the type's maximum for integers. */
#define F32_INF 0x7f800000ull
#define F64_INF 0x7ff0000000000000ull
EXTREME_ENTRIES(reduce_max, MaxOp, F32_NEGINF, F64_NEGINF, 0x80000000ull, 0x8000000000000000ull)
EXTREME_ENTRIES(reduce_min, MinOp, F32_INF, F64_INF, 0x7fffffffull, 0x7fffffffffffffffull)
/* The product of nothing is 1. */
int fgc_reduce_prod_f32(const fg_kctx *ctx) {
  return reduce<float, double, ProdFOp<float>>(ctx, FG_F32, 0x3f800000ull, "reduce_prod f32");
}
int fgc_reduce_prod_f64(const fg_kctx *ctx) {
  return reduce<double, double, ProdFOp<double>>(ctx, FG_F64, 0x3ff0000000000000ull,
                                                 "reduce_prod f64");
}
int fgc_reduce_prod_i32(const fg_kctx *ctx) {
  return reduce<int32_t, uint64_t, ProdIOp<int32_t>>(ctx, FG_I32, 1, "reduce_prod i32");
}
int fgc_reduce_prod_i64(const fg_kctx *ctx) {
  return reduce<int64_t, uint64_t, ProdIOp<int64_t>>(ctx, FG_I64, 1, "reduce_prod i64");
}

/* ---- logsumexp ----------------------------------------------------------- */

/* m + log(sum(exp(x - m))), m the maximum or 0 where it is infinite (as
 * kernels/cpu/reduce2.c): one thread per output, two passes in the CPU's
 * order, so the results are the CPU's but for exp and log's last bits. */
template <typename T> __global__ void logsumexp_kernel(const T *in, T *out, fgk_red_plan pl) {
  const int64_t n = pl.outer_total * pl.inner;
  FGC_GRID_STRIDE(t, n) {
    const int64_t op = t / pl.inner, c = t - op * pl.inner;
    const T *base = in + seek(pl.n_outer, pl.outer_dims, pl.outer_str, op) + c;
    double m = -INFINITY, s = 0;
    for (int64_t r = 0; r < pl.count; r++) {
      const double v = (double)base[seek(pl.n_red, pl.red_dims, pl.red_str, r)];
      if (v > m) m = v;
    }
    const double shift = isinf(m) ? 0.0 : m;
    for (int64_t r = 0; r < pl.count; r++)
      s += exp((double)base[seek(pl.n_red, pl.red_dims, pl.red_str, r)] - shift);
    out[t] = (T)(shift + log(s));
  }
}

template <typename T> static int logsumexp(const fg_kctx *ctx, fg_dtype dt, uint64_t ninf_bits) {
  red_plan pl;
  const int rc = red_plan_init(ctx, dt, &pl);
  if (rc < 0) return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (rc == 0) return fgc_fill_bits(ctx, ctx->out[0].data, n, sizeof(T), ninf_bits);
  logsumexp_kernel<T><<<fgc_blocks(n, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const T *)ctx->in[0].data, (T *)ctx->out[0].data, pl);
  return fgc_launched(ctx, "logsumexp kernel");
}
/* The logsumexp of nothing is -inf. */
int fgc_logsumexp_f32(const fg_kctx *ctx) { return logsumexp<float>(ctx, FG_F32, F32_NEGINF); }
int fgc_logsumexp_f64(const fg_kctx *ctx) { return logsumexp<double>(ctx, FG_F64, F64_NEGINF); }

/* ---- sum_to ------------------------------------------------------------- */

/* reduce_sum over x's extra leading dims and the dims where the output has
 * 1 and x does not, keepdims: kernels/cpu/grad_ops.c's code, with the CUDA
 * reduce_sum. */
static int sum_to(const fg_kctx *ctx, fg_kernel_fn reduce_fn) {
  if (fgc_check(ctx, 1, 1) != 0) return -1;
  return fgk_sum_to(ctx, reduce_fn);
}
int fgc_sum_to_f32(const fg_kctx *ctx) { return sum_to(ctx, fgc_reduce_sum_f32); }
int fgc_sum_to_f64(const fg_kctx *ctx) { return sum_to(ctx, fgc_reduce_sum_f64); }
int fgc_sum_to_i32(const fg_kctx *ctx) { return sum_to(ctx, fgc_reduce_sum_i32); }
int fgc_sum_to_i64(const fg_kctx *ctx) { return sum_to(ctx, fgc_reduce_sum_i64); }

/* ---- argmax --------------------------------------------------------------- */

/* (x, i) beats (y, j): the first NaN, else the first maximum (np.argmax),
 * or with IS_MIN the first minimum (np.argmin). */
template <typename T, bool IS_MIN>
__device__ __forceinline__ bool am_better(T x, int64_t i, T y, int64_t j) {
  const bool xn = x != x, yn = y != y;
  if (xn || yn) return xn && (!yn || i < j);
  if (x != y) return IS_MIN ? x < y : x > y;
  return i < j;
}

/* One thread per output (outer, column), scanning the axis in order. */
template <typename T, bool IS_MIN>
__global__ void argmax_thread_kernel(const T *x, int64_t *o, int64_t n_out, int64_t A,
                                     int64_t inner) {
  FGC_GRID_STRIDE(t, n_out) {
    const int64_t op = t / inner, c = t - op * inner;
    const T *base = x + op * A * inner + c;
    T best = base[0];
    int64_t bi = 0;
    for (int64_t a = 1; a < A; a++) {
      const T v = base[a * inner];
      if (am_better<T, IS_MIN>(v, a, best, bi)) {
        best = v;
        bi = a;
      }
    }
    o[t] = bi;
  }
}

/* inner == 1 and long rows: a block per row, threads striding over it,
 * then a fixed tree that keeps the lower index on ties. */
template <typename T, bool IS_MIN>
__global__ void argmax_block_kernel(const T *x, int64_t *o, int64_t rows, int64_t A) {
  __shared__ T sv[FGC_THREADS];
  __shared__ int64_t si[FGC_THREADS];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *base = x + row * A;
    T best = base[0];
    int64_t bi = 0;
    for (int64_t a = threadIdx.x; a < A; a += blockDim.x) {
      const T v = base[a];
      if (a == (int64_t)threadIdx.x || am_better<T, IS_MIN>(v, a, best, bi)) {
        best = v;
        bi = a;
      }
    }
    if ((int64_t)threadIdx.x >= A) bi = INT64_MAX; /* no element: never wins */
    sv[threadIdx.x] = best;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
      if ((int)threadIdx.x < w) {
        const int k = threadIdx.x + w;
        if (si[k] != INT64_MAX &&
            (si[threadIdx.x] == INT64_MAX ||
             am_better<T, IS_MIN>(sv[k], si[k], sv[threadIdx.x], si[threadIdx.x]))) {
          sv[threadIdx.x] = sv[k];
          si[threadIdx.x] = si[k];
        }
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) o[row] = si[0];
    __syncthreads();
  }
}

template <typename T, bool IS_MIN> static int argmax(const fg_kctx *ctx, fg_dtype dt) {
  const char *name = IS_MIN ? "argmin" : "argmax";
  if (fgc_check(ctx, 1, 1) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  if (in->dtype != dt || out->dtype != FG_I64)
    return fgk_fail(ctx, "expected a %s input and an i64 output, got %s and %s", fg_dtype_name(dt),
                    fg_dtype_name(in->dtype), fg_dtype_name(out->dtype));
  const int axis = ctx->p->argmax.axis; /* argmax and argmin */
  if (axis < 0 || axis >= in->rank)
    return fgk_fail(ctx, "axis %d is out of range [0, %d)", axis, in->rank);
  int64_t outer, inner;
  const int64_t A = in->dims[axis];
  fgk_axis_split(in, axis, &outer, &inner);
  if (fgk_numel(out) != outer * inner)
    return fgk_fail(ctx, "output has %lld elements, expected %lld", (long long)fgk_numel(out),
                    (long long)(outer * inner));
  if (outer * inner == 0) return 0;
  if (A == 0) return fgk_fail(ctx, "%s over axis %d, which has size 0", name, axis);
  const T *x = (const T *)in->data;
  int64_t *o = (int64_t *)out->data;
  cudaStream_t s = fgc_stream(ctx);
  if (inner == 1 && A > 256) {
    const unsigned blocks = (unsigned)(outer < 65536 ? outer : 65536);
    argmax_block_kernel<T, IS_MIN><<<blocks, FGC_THREADS, 0, s>>>(x, o, outer, A);
  } else {
    argmax_thread_kernel<T, IS_MIN><<<fgc_blocks(outer * inner, FGC_THREADS), FGC_THREADS, 0, s>>>(
        x, o, outer * inner, A, inner);
  }
  return fgc_launched(ctx, IS_MIN ? "argmin kernel" : "argmax kernel");
}
int fgc_argmax_f32(const fg_kctx *ctx) { return argmax<float, false>(ctx, FG_F32); }
int fgc_argmax_f64(const fg_kctx *ctx) { return argmax<double, false>(ctx, FG_F64); }
int fgc_argmax_i32(const fg_kctx *ctx) { return argmax<int32_t, false>(ctx, FG_I32); }
int fgc_argmax_i64(const fg_kctx *ctx) { return argmax<int64_t, false>(ctx, FG_I64); }
int fgc_argmin_f32(const fg_kctx *ctx) { return argmax<float, true>(ctx, FG_F32); }
int fgc_argmin_f64(const fg_kctx *ctx) { return argmax<double, true>(ctx, FG_F64); }
int fgc_argmin_i32(const fg_kctx *ctx) { return argmax<int32_t, true>(ctx, FG_I32); }
int fgc_argmin_i64(const fg_kctx *ctx) { return argmax<int64_t, true>(ctx, FG_I64); }
