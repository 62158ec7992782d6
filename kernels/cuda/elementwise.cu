/* Elementwise CUDA kernels: unary math, broadcasting binary ops and
 * comparisons, select, cast, the constant writers (fill, zeros_like,
 * ones_like, numel, group) and the byte copies (reshape, identity, ...).
 *
 * Semantics follow kernels/cpu/ exactly: integer add/sub/mul/neg/abs wrap
 * (unsigned arithmetic), integer div truncates with INT_MIN / -1 = INT_MIN
 * and a zero divisor recorded in the error flag (FG_CUDA_ERR_DIV_ZERO),
 * float maximum/minimum propagate NaN, relu keeps NaN, sigmoid splits at 0,
 * gelu is the exact erf form, float-to-integer casts saturate with NaN -> 0.
 *
 * Launch shapes: grid-stride loops. When every operand is contiguous with
 * the output's shape and 16-byte aligned, threads move 4 elements at a time
 * through vector loads and stores. Broadcasts walk the coalesced output
 * (fgc_walk): 4 outputs per offset computation where each operand runs
 * along the innermost dim or is broadcast along it (fgc_walk4_ok: a bias
 * add, a tensor with a scalar), else one, which for a flat shape with
 * scalar operands needs no division. The output may alias input 0: each
 * element is read before it is written. */
#include <math.h>
#include <string.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"

static inline int aligned_to(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

/* ---- maps ------------------------------------------------------------------ */

/* y[i] = f(x[i]) over n elements, V at a time (the < V tail by block 0). */
template <typename TI, typename TO, int V, class F>
__global__ void map1_kernel(const TI *x, TO *y, int64_t n, F f) {
  const int64_t nv = n / V;
  FGC_GRID_STRIDE(i, nv) {
    const fgc_vec<TI, V> a = ((const fgc_vec<TI, V> *)x)[i];
    fgc_vec<TO, V> r;
#pragma unroll
    for (int k = 0; k < V; k++)
      r.v[k] = f(a.v[k]);
    ((fgc_vec<TO, V> *)y)[i] = r;
  }
  if (V > 1 && blockIdx.x == 0 && (int64_t)threadIdx.x < n - nv * V) {
    const int64_t i = nv * V + threadIdx.x;
    y[i] = f(x[i]);
  }
}

template <typename TI, typename TO, class F>
static int map1(const fg_kctx *ctx, const void *x, void *y, int64_t n, F f, const char *what) {
  if (n == 0) return 0;
  cudaStream_t s = fgc_stream(ctx);
  if (aligned_to(x, 4 * sizeof(TI)) && aligned_to(y, 4 * sizeof(TO)))
    map1_kernel<TI, TO, 4, F>
        <<<fgc_blocks(n, FGC_THREADS * 4), FGC_THREADS, 0, s>>>((const TI *)x, (TO *)y, n, f);
  else
    map1_kernel<TI, TO, 1, F>
        <<<fgc_blocks(n, FGC_THREADS * 4), FGC_THREADS, 0, s>>>((const TI *)x, (TO *)y, n, f);
  return fgc_launched(ctx, what);
}

/* o[i] = f(a[i], b[i], i), all contiguous and aligned. */
template <typename TI, typename TO, class F>
__global__ void map2_vec_kernel(const TI *a, const TI *b, TO *o, int64_t n, F f) {
  const int64_t nv = n / 4;
  FGC_GRID_STRIDE(i, nv) {
    const fgc_vec<TI, 4> x = ((const fgc_vec<TI, 4> *)a)[i];
    const fgc_vec<TI, 4> y = ((const fgc_vec<TI, 4> *)b)[i];
    fgc_vec<TO, 4> r;
#pragma unroll
    for (int k = 0; k < 4; k++)
      r.v[k] = f(x.v[k], y.v[k], i * 4 + k);
    ((fgc_vec<TO, 4> *)o)[i] = r;
  }
  if (blockIdx.x == 0 && (int64_t)threadIdx.x < n - nv * 4) {
    const int64_t i = nv * 4 + threadIdx.x;
    o[i] = f(a[i], b[i], i);
  }
}

/* o[i] = f(a[...], b[...], i) over a broadcast walk. */
template <typename TI, typename TO, class F>
__global__ void map2_walk_kernel(const TI *a, const TI *b, TO *o, int64_t n, fgc_walk w, F f) {
  FGC_GRID_STRIDE(i, n) {
    int64_t off[3];
    fgc_walk_at<2>(w, i, off);
    o[i] = f(a[off[0]], b[off[1]], i);
  }
}

/* The same over a 4-wide walk (fgc_walk4_ok): 4 outputs per offset. */
template <typename TI, typename TO, class F>
__global__ void map2_walk4_kernel(const TI *a, const TI *b, TO *o, int64_t n, fgc_walk w, F f) {
  FGC_GRID_STRIDE(j, n / 4) {
    int64_t off[3];
    fgc_walk_at<2>(w, j * 4, off);
    const fgc_vec<TI, 4> x = fgc_load4(w, 0, a, off[0]), y = fgc_load4(w, 1, b, off[1]);
    fgc_vec<TO, 4> r;
#pragma unroll
    for (int k = 0; k < 4; k++)
      r.v[k] = f(x.v[k], y.v[k], j * 4 + k);
    ((fgc_vec<TO, 4> *)o)[j] = r;
  }
}

template <typename TI, typename TO, class F>
static int map2(const fg_kctx *ctx, fg_dtype dti, fg_dtype dto, F f, const char *what) {
  if (fgc_check(ctx, 2, 1) != 0) return -1;
  if (ctx->in[0].dtype != dti || ctx->in[1].dtype != dti || ctx->out[0].dtype != dto)
    return fgk_fail(ctx, "expected %s inputs and a %s output, got %s, %s and %s",
                    fg_dtype_name(dti), fg_dtype_name(dto), fg_dtype_name(ctx->in[0].dtype),
                    fg_dtype_name(ctx->in[1].dtype), fg_dtype_name(ctx->out[0].dtype));
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  fgc_walk w;
  if (fgc_bcast_init(ctx, 2, &w) != 0) return -1;
  const TI *a = (const TI *)ctx->in[0].data, *b = (const TI *)ctx->in[1].data;
  TO *o = (TO *)ctx->out[0].data;
  cudaStream_t s = fgc_stream(ctx);
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  const void *ptrs[2] = {a, b};
  const size_t es[2] = {sizeof(TI), sizeof(TI)};
  if (w.rank == 1 && w.strides[0][0] == 1 && w.strides[1][0] == 1 &&
      aligned_to(a, 4 * sizeof(TI)) && aligned_to(b, 4 * sizeof(TI)) &&
      aligned_to(o, 4 * sizeof(TO)))
    map2_vec_kernel<TI, TO, F><<<blocks, FGC_THREADS, 0, s>>>(a, b, o, n, f);
  else if (fgc_walk4_ok(&w, ptrs, es, o, sizeof(TO)))
    map2_walk4_kernel<TI, TO, F><<<blocks, FGC_THREADS, 0, s>>>(a, b, o, n, w, f);
  else
    map2_walk_kernel<TI, TO, F><<<blocks, FGC_THREADS, 0, s>>>(a, b, o, n, w, f);
  return fgc_launched(ctx, what);
}

/* ---- unary ----------------------------------------------------------------- */

template <typename T>
static int unary(const fg_kctx *ctx, fg_dtype dt,
                 int (*go)(const fg_kctx *, const void *, void *, int64_t)) {
  if (fgc_check(ctx, 1, 1) != 0) return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (ctx->in[0].dtype != dt || ctx->out[0].dtype != dt)
    return fgk_fail(ctx, "expected %s input and output, got %s and %s", fg_dtype_name(dt),
                    fg_dtype_name(ctx->in[0].dtype), fg_dtype_name(ctx->out[0].dtype));
  if (fgk_numel(&ctx->in[0]) != n)
    return fgk_fail(ctx, "input has %lld elements, output %lld", (long long)fgk_numel(&ctx->in[0]),
                    (long long)n);
  return go(ctx, ctx->in[0].data, ctx->out[0].data, n);
}

/* Overloads so one functor body serves f32 and f64. */
#define FGC_MATH1(name, ff, df)                                                                    \
  __device__ __forceinline__ float name(float x) { return ff(x); }                                 \
  __device__ __forceinline__ double name(double x) { return df(x); }
FGC_MATH1(m_exp, expf, exp)
FGC_MATH1(m_log, logf, log)
FGC_MATH1(m_sqrt, sqrtf, sqrt)
FGC_MATH1(m_tanh, tanhf, tanh)
FGC_MATH1(m_erf, erff, erf)
FGC_MATH1(m_fabs, fabsf, fabs)
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return pow(x, y); }

/* Integers through unsigned arithmetic: -INT_MIN wraps to INT_MIN. */
__device__ __forceinline__ int32_t wneg(int32_t x) { return (int32_t)(0u - (uint32_t)x); }
__device__ __forceinline__ int64_t wneg(int64_t x) { return (int64_t)((uint64_t)0 - (uint64_t)x); }
__device__ __forceinline__ float wneg(float x) { return -x; }
__device__ __forceinline__ double wneg(double x) { return -x; }

template <typename T> struct NegF {
  __device__ T operator()(T x) const { return wneg(x); }
};
template <typename T> struct ExpF {
  __device__ T operator()(T x) const { return m_exp(x); }
};
template <typename T> struct LogF {
  __device__ T operator()(T x) const { return m_log(x); }
};
template <typename T> struct SqrtF {
  __device__ T operator()(T x) const { return m_sqrt(x); }
};
template <typename T> struct RsqrtF {
  __device__ T operator()(T x) const { return (T)1 / m_sqrt(x); }
};
template <typename T> struct AbsF {
  __device__ T operator()(T x) const { return x < 0 ? wneg(x) : x; }
};
template <> struct AbsF<float> {
  __device__ float operator()(float x) const { return fabsf(x); }
};
template <> struct AbsF<double> {
  __device__ double operator()(double x) const { return fabs(x); }
};
template <typename T> struct TanhF {
  __device__ T operator()(T x) const { return m_tanh(x); }
};
/* Split at 0 so exp never overflows (as the CPU kernel). */
template <typename T> struct SigmoidF {
  __device__ T operator()(T x) const {
    if (x >= 0) return (T)1 / ((T)1 + m_exp(-x));
    const T e = m_exp(x);
    return e / ((T)1 + e);
  }
};
/* `x < 0 ? 0 : x` keeps NaN, as PyTorch's relu does. */
template <typename T> struct ReluF {
  __device__ T operator()(T x) const { return x < 0 ? (T)0 : x; }
};
template <typename T> struct LeakyF {
  T alpha;
  __device__ T operator()(T x) const { return x > 0 ? x : alpha * x; }
};
template <typename T> struct EluF {
  T alpha;
  __device__ T operator()(T x) const { return x > 0 ? x : alpha * expm1(x); }
};
template <typename T> struct GeluF {
  __device__ T operator()(T x) const {
    return (T)0.5 * x * ((T)1 + m_erf(x * (T)0.70710678118654752440));
  }
};
template <typename T> struct ErfF {
  __device__ T operator()(T x) const { return m_erf(x); }
};
/* The tanh approximation as the CPU computes it, x sigmoid(2 u) with u =
 * sqrt(2 / pi) (x + 0.044715 x^3), each product and sum rounded on its own
 * (no contraction into a fused multiply-add), as in the fused kernels. */
template <typename T> struct GeluTanhF {
  __device__ T operator()(T x) const {
    const T x3 = fgc_mul_rn(fgc_mul_rn(x, x), x);
    const T u2 = fgc_mul_rn((T)1.5957691216057307117, fgc_add_rn(x, fgc_mul_rn((T)0.044715, x3)));
    return x / ((T)1 + m_exp(-u2));
  }
};

/* The activations and rounding ops CNN ports need, as the CPU kernels. */
template <typename T> struct SoftplusF {
  T beta, threshold;
  __device__ T operator()(T x) const {
    return x * beta > threshold ? x : log1p(m_exp(x * beta)) / beta;
  }
};
template <typename T> struct SeluF {
  __device__ T operator()(T x) const {
    return x > 0 ? (T)1.0507009873554804934193349852946 * x
                 : (T)(1.6732632423543772848170429916717 * 1.0507009873554804934193349852946) *
                       expm1(x);
  }
};
template <typename T> struct SiluF {
  __device__ T operator()(T x) const { return x / ((T)1 + m_exp(-x)); }
};
/* min(max(t, 0), 6) that keeps NaN. */
template <typename T> __device__ __forceinline__ T relu6(T t) {
  t = t < 0 ? (T)0 : t;
  return t > 6 ? (T)6 : t;
}
template <typename T> struct HardSigmoidF {
  __device__ T operator()(T x) const { return relu6(x + (T)3) / (T)6; }
};
template <typename T> struct HardSwishF {
  __device__ T operator()(T x) const { return x * relu6(x + (T)3) / (T)6; }
};
template <typename T> struct MishF {
  __device__ T operator()(T x) const { return x * m_tanh(log1p(m_exp(x))); }
};
template <typename T> struct SignF {
  __device__ T operator()(T x) const { return (T)((0 < x) - (x < 0)); }
};
template <typename T> struct ReciprocalF {
  __device__ T operator()(T x) const { return (T)1 / x; }
};
template <typename T> struct FloorF {
  __device__ T operator()(T x) const { return floor(x); }
};
template <typename T> struct CeilF {
  __device__ T operator()(T x) const { return ceil(x); }
};
/* rint rounds halves to even (torch.round). */
template <typename T> struct RoundF {
  __device__ T operator()(T x) const { return rint(x); }
};
template <typename T> struct ClipF {
  T lo, hi;
  __device__ T operator()(T x) const { return x != x ? x : (x < lo ? lo : (x > hi ? hi : x)); }
};

/* INIT is variadic: a functor with two parameters is set with a braced list. */
#define FGC_UNARY(fn, T, DT, FUNCTOR, ...)                                                         \
  static int fn##_go(const fg_kctx *ctx, const void *x, void *y, int64_t n) {                      \
    FUNCTOR f __VA_ARGS__;                                                                         \
    return map1<T, T>(ctx, x, y, n, f, #fn);                                                       \
  }                                                                                                \
  int fn(const fg_kctx *ctx) { return unary<T>(ctx, DT, fn##_go); }
#define NOINIT
#define FGC_UNARY_FLOAT(base, F)                                                                   \
  FGC_UNARY(base##_f32, float, FG_F32, F<float>, NOINIT)                                           \
  FGC_UNARY(base##_f64, double, FG_F64, F<double>, NOINIT)
#define FGC_UNARY_NUM(base, F)                                                                     \
  FGC_UNARY_FLOAT(base, F)                                                                         \
  FGC_UNARY(base##_i32, int32_t, FG_I32, F<int32_t>, NOINIT)                                       \
  FGC_UNARY(base##_i64, int64_t, FG_I64, F<int64_t>, NOINIT)

FGC_UNARY_NUM(fgc_neg, NegF)
FGC_UNARY_FLOAT(fgc_exp, ExpF)
FGC_UNARY_FLOAT(fgc_log, LogF)
FGC_UNARY_FLOAT(fgc_sqrt, SqrtF)
FGC_UNARY_FLOAT(fgc_rsqrt, RsqrtF)
FGC_UNARY_NUM(fgc_abs, AbsF)
FGC_UNARY_FLOAT(fgc_tanh, TanhF)
FGC_UNARY_FLOAT(fgc_sigmoid, SigmoidF)
FGC_UNARY_NUM(fgc_relu, ReluF)
FGC_UNARY_FLOAT(fgc_gelu, GeluF)
FGC_UNARY_FLOAT(fgc_gelu_tanh, GeluTanhF)
FGC_UNARY_FLOAT(fgc_erf, ErfF)
FGC_UNARY(fgc_leaky_relu_f32, float, FG_F32, LeakyF<float>, = {(float)ctx->p->leaky_relu.alpha})
FGC_UNARY(fgc_leaky_relu_f64, double, FG_F64, LeakyF<double>, = {ctx->p->leaky_relu.alpha})
FGC_UNARY(fgc_elu_f32, float, FG_F32, EluF<float>, = {(float)ctx->p->elu.alpha})
FGC_UNARY(fgc_elu_f64, double, FG_F64, EluF<double>, = {ctx->p->elu.alpha})
FGC_UNARY(fgc_softplus_f32, float, FG_F32, SoftplusF<float>,
          = {(float)ctx->p->softplus.beta, (float)ctx->p->softplus.threshold})
FGC_UNARY(fgc_softplus_f64, double, FG_F64, SoftplusF<double>,
          = {ctx->p->softplus.beta, ctx->p->softplus.threshold})
FGC_UNARY_FLOAT(fgc_selu, SeluF)
FGC_UNARY_FLOAT(fgc_silu, SiluF)
FGC_UNARY_FLOAT(fgc_hard_sigmoid, HardSigmoidF)
FGC_UNARY_FLOAT(fgc_hard_swish, HardSwishF)
FGC_UNARY_FLOAT(fgc_mish, MishF)
FGC_UNARY_NUM(fgc_sign, SignF)
FGC_UNARY_FLOAT(fgc_reciprocal, ReciprocalF)
FGC_UNARY_FLOAT(fgc_floor, FloorF)
FGC_UNARY_FLOAT(fgc_ceil, CeilF)
FGC_UNARY_FLOAT(fgc_round, RoundF)
FGC_UNARY(fgc_clip_f32, float, FG_F32, ClipF<float>,
          = {(float)ctx->p->clip.min, (float)ctx->p->clip.max})
FGC_UNARY(fgc_clip_f64, double, FG_F64, ClipF<double>, = {ctx->p->clip.min, ctx->p->clip.max})

/* ---- binary ---------------------------------------------------------------- */

template <typename T> struct AddF {
  __device__ T operator()(T x, T y, int64_t) const { return x + y; }
};
template <typename T> struct SubF {
  __device__ T operator()(T x, T y, int64_t) const { return x - y; }
};
template <typename T> struct MulF {
  __device__ T operator()(T x, T y, int64_t) const { return x * y; }
};
/* Wrapping integer versions (signed overflow is undefined in C++ too). */
template <typename T, typename U> struct AddI {
  __device__ T operator()(T x, T y, int64_t) const { return (T)((U)x + (U)y); }
};
template <typename T, typename U> struct SubI {
  __device__ T operator()(T x, T y, int64_t) const { return (T)((U)x - (U)y); }
};
template <typename T, typename U> struct MulI {
  __device__ T operator()(T x, T y, int64_t) const { return (T)((U)x * (U)y); }
};
template <typename T> struct DivF {
  __device__ T operator()(T x, T y, int64_t) const { return x / y; }
};
/* A zero divisor is recorded (the output element is then 0). */
template <typename T> struct DivI {
  int *flag;
  T min;
  __device__ T operator()(T x, T y, int64_t i) const {
    if (y == 0) {
      fgc_raise(flag, FG_CUDA_ERR_DIV_ZERO, i, 0, 0, 0);
      return 0;
    }
    return (x == min && y == -1) ? min : x / y;
  }
};
template <typename T> struct PowF {
  __device__ T operator()(T x, T y, int64_t) const { return m_pow(x, y); }
};
/* `x != x` is false for integers; for floats it makes NaN win. */
template <typename T> struct MaxF {
  __device__ T operator()(T x, T y, int64_t) const { return (x > y || x != x) ? x : y; }
};
template <typename T> struct MinF {
  __device__ T operator()(T x, T y, int64_t) const { return (x < y || x != x) ? x : y; }
};
template <typename T> struct EqF {
  __device__ uint8_t operator()(T x, T y, int64_t) const { return (uint8_t)(x == y); }
};
template <typename T> struct GtF {
  __device__ uint8_t operator()(T x, T y, int64_t) const { return (uint8_t)(x > y); }
};
template <typename T> struct LtF {
  __device__ uint8_t operator()(T x, T y, int64_t) const { return (uint8_t)(x < y); }
};

#define FGC_BIN(fn, TI, DTI, TO, DTO, FUNCTOR)                                                     \
  int fn(const fg_kctx *ctx) { return map2<TI, TO>(ctx, DTI, DTO, FUNCTOR(), #fn); }
#define FGC_BIN_NUM(base, FF, FI32, FI64)                                                          \
  FGC_BIN(base##_f32, float, FG_F32, float, FG_F32, FF<float>)                                     \
  FGC_BIN(base##_f64, double, FG_F64, double, FG_F64, FF<double>)                                  \
  FGC_BIN(base##_i32, int32_t, FG_I32, int32_t, FG_I32, FI32)                                      \
  FGC_BIN(base##_i64, int64_t, FG_I64, int64_t, FG_I64, FI64)

typedef AddI<int32_t, uint32_t> AddI32;
typedef AddI<int64_t, uint64_t> AddI64;
typedef SubI<int32_t, uint32_t> SubI32;
typedef SubI<int64_t, uint64_t> SubI64;
typedef MulI<int32_t, uint32_t> MulI32;
typedef MulI<int64_t, uint64_t> MulI64;
FGC_BIN_NUM(fgc_add, AddF, AddI32, AddI64)
FGC_BIN_NUM(fgc_sub, SubF, SubI32, SubI64)
FGC_BIN_NUM(fgc_mul, MulF, MulI32, MulI64)
FGC_BIN_NUM(fgc_maximum, MaxF, MaxF<int32_t>, MaxF<int64_t>)
FGC_BIN_NUM(fgc_minimum, MinF, MinF<int32_t>, MinF<int64_t>)
FGC_BIN(fgc_pow_f32, float, FG_F32, float, FG_F32, PowF<float>)
FGC_BIN(fgc_pow_f64, double, FG_F64, double, FG_F64, PowF<double>)
FGC_BIN(fgc_div_f32, float, FG_F32, float, FG_F32, DivF<float>)
FGC_BIN(fgc_div_f64, double, FG_F64, double, FG_F64, DivF<double>)

int fgc_div_i32(const fg_kctx *ctx) {
  if (fgc_check(ctx, 2, 1) != 0 || fgc_need_flag(ctx) != 0) return -1;
  DivI<int32_t> f = {ctx->cuda->error_flag, INT32_MIN};
  return map2<int32_t, int32_t>(ctx, FG_I32, FG_I32, f, "fgc_div_i32");
}
int fgc_div_i64(const fg_kctx *ctx) {
  if (fgc_check(ctx, 2, 1) != 0 || fgc_need_flag(ctx) != 0) return -1;
  DivI<int64_t> f = {ctx->cuda->error_flag, INT64_MIN};
  return map2<int64_t, int64_t>(ctx, FG_I64, FG_I64, f, "fgc_div_i64");
}

/* Comparisons write bool and are keyed by the input dtype. */
#define FGC_COMPARE(base, F)                                                                       \
  FGC_BIN(base##_f32, float, FG_F32, uint8_t, FG_BOOL, F<float>)                                   \
  FGC_BIN(base##_f64, double, FG_F64, uint8_t, FG_BOOL, F<double>)                                 \
  FGC_BIN(base##_i32, int32_t, FG_I32, uint8_t, FG_BOOL, F<int32_t>)                               \
  FGC_BIN(base##_i64, int64_t, FG_I64, uint8_t, FG_BOOL, F<int64_t>)                               \
  FGC_BIN(base##_bool, uint8_t, FG_BOOL, uint8_t, FG_BOOL, F<uint8_t>)
FGC_COMPARE(fgc_equal, EqF)
FGC_COMPARE(fgc_greater, GtF)
FGC_COMPARE(fgc_less, LtF)

/* ---- select ---------------------------------------------------------------- */

/* select(cond, x, y) = cond ? x : y; only the element size matters. */
template <typename W>
__global__ void select_kernel(const uint8_t *c, const W *x, const W *y, W *o, int64_t n,
                              fgc_walk w) {
  FGC_GRID_STRIDE(i, n) {
    int64_t off[3];
    fgc_walk_at<3>(w, i, off);
    o[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

template <typename W>
__global__ void select4_kernel(const uint8_t *c, const W *x, const W *y, W *o, int64_t n,
                               fgc_walk w) {
  FGC_GRID_STRIDE(j, n / 4) {
    int64_t off[3];
    fgc_walk_at<3>(w, j * 4, off);
    const fgc_vec<uint8_t, 4> cv = fgc_load4(w, 0, c, off[0]);
    const fgc_vec<W, 4> xv = fgc_load4(w, 1, x, off[1]), yv = fgc_load4(w, 2, y, off[2]);
    fgc_vec<W, 4> r;
#pragma unroll
    for (int k = 0; k < 4; k++)
      r.v[k] = cv.v[k] ? xv.v[k] : yv.v[k];
    ((fgc_vec<W, 4> *)o)[j] = r;
  }
}

template <typename W>
static void select_launch(const uint8_t *c, const void *x, const void *y, void *o, int64_t n,
                          const fgc_walk &w, unsigned blocks, cudaStream_t s) {
  const void *ptrs[3] = {c, x, y};
  const size_t es[3] = {1, sizeof(W), sizeof(W)};
  if (fgc_walk4_ok(&w, ptrs, es, o, sizeof(W)))
    select4_kernel<W><<<blocks, FGC_THREADS, 0, s>>>(c, (const W *)x, (const W *)y, (W *)o, n, w);
  else
    select_kernel<W><<<blocks, FGC_THREADS, 0, s>>>(c, (const W *)x, (const W *)y, (W *)o, n, w);
}

int fgc_select(const fg_kctx *ctx) {
  if (fgc_check(ctx, 3, 1) != 0 || fgk_select_check(ctx) != 0) return -1;
  const fg_dtype dt = ctx->out[0].dtype;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  fgc_walk w;
  if (fgc_bcast_init(ctx, 3, &w) != 0) return -1;
  const uint8_t *c = (const uint8_t *)ctx->in[0].data;
  const void *x = ctx->in[1].data, *y = ctx->in[2].data;
  void *o = ctx->out[0].data;
  cudaStream_t s = fgc_stream(ctx);
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  switch (fg_dtype_size(dt)) {
  case 1: select_launch<uint8_t>(c, x, y, o, n, w, blocks, s); break;
  case 4: select_launch<uint32_t>(c, x, y, o, n, w, blocks, s); break;
  case 8: select_launch<uint64_t>(c, x, y, o, n, w, blocks, s); break;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(dt));
  }
  return fgc_launched(ctx, "select kernel");
}

/* ---- cast ------------------------------------------------------------------ */

/* Saturating float-to-integer with NaN -> 0 (as fgk_f2i32/fgk_f2i64). */
__device__ __forceinline__ int32_t f2i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483647.0) return INT32_MAX;
  if (x <= -2147483648.0) return INT32_MIN;
  return (int32_t)x;
}
__device__ __forceinline__ int64_t f2i64(double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775807.0) return INT64_MAX;
  if (x <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)x;
}

/* Float sources saturate into integers; i64 -> i32 wraps; to bool is
 * x != 0 (NaN -> 1); everything else converts plainly. */
template <typename TI, typename TO> struct CastF {
  __device__ TO operator()(TI x) const {
    constexpr bool src_float = std::is_floating_point<TI>::value;
    if constexpr (std::is_same<TO, uint8_t>::value) {
      return (uint8_t)(x != 0);
    } else if constexpr (std::is_same<TO, int32_t>::value) {
      if constexpr (src_float)
        return f2i32((double)x);
      else
        return (int32_t)(uint32_t)(uint64_t)x;
    } else if constexpr (std::is_same<TO, int64_t>::value) {
      if constexpr (src_float)
        return f2i64((double)x);
      else
        return (int64_t)x;
    } else {
      return (TO)x;
    }
  }
};

template <typename TO> static int cast_from(const fg_kctx *ctx, int64_t n) {
  const void *x = ctx->in[0].data;
  void *y = ctx->out[0].data;
  switch (ctx->in[0].dtype) {
  case FG_F32: return map1<float, TO>(ctx, x, y, n, CastF<float, TO>(), "cast kernel");
  case FG_F64: return map1<double, TO>(ctx, x, y, n, CastF<double, TO>(), "cast kernel");
  case FG_I32: return map1<int32_t, TO>(ctx, x, y, n, CastF<int32_t, TO>(), "cast kernel");
  case FG_I64: return map1<int64_t, TO>(ctx, x, y, n, CastF<int64_t, TO>(), "cast kernel");
  case FG_BOOL: return map1<uint8_t, TO>(ctx, x, y, n, CastF<uint8_t, TO>(), "cast kernel");
  default: return fgk_fail(ctx, "cannot cast from %s", fg_dtype_name(ctx->in[0].dtype));
  }
}

static int cast(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 1, 1) != 0 || fgk_cast_check(ctx, dt) != 0) return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  if (ctx->in[0].dtype == dt)
    return fgc_copy_bytes(ctx, ctx->out[0].data, ctx->in[0].data, (size_t)n * fgc_esize(dt));
  switch (dt) {
  case FG_F32: return cast_from<float>(ctx, n);
  case FG_F64: return cast_from<double>(ctx, n);
  case FG_I32: return cast_from<int32_t>(ctx, n);
  case FG_I64: return cast_from<int64_t>(ctx, n);
  case FG_BOOL: return cast_from<uint8_t>(ctx, n);
  default: return fgk_fail(ctx, "cannot cast to %s", fg_dtype_name(dt));
  }
}

/* ---- constants ------------------------------------------------------------- */

/* Host-side saturating conversions (as cast), for the constant writers. */
static int32_t h_f2i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483647.0) return INT32_MAX;
  if (x <= -2147483648.0) return INT32_MIN;
  return (int32_t)x;
}
static int64_t h_f2i64(double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775807.0) return INT64_MAX;
  if (x <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)x;
}

/* v converted to dt, as a bit pattern of fg_dtype_size(dt) bytes. */
static int value_bits(const fg_kctx *ctx, fg_dtype dt, double v, uint64_t *bits) {
  *bits = 0;
  switch (dt) {
  case FG_F32: {
    const float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    *bits = u;
    return 0;
  }
  case FG_F64: memcpy(bits, &v, 8); return 0;
  case FG_I32: *bits = (uint32_t)h_f2i32(v); return 0;
  case FG_I64: *bits = (uint64_t)h_f2i64(v); return 0;
  case FG_BOOL: *bits = v != 0; return 0;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(dt));
  }
}

static int write_all(const fg_kctx *ctx, fg_dtype dt, double v) {
  fg_kbuf *out = &ctx->out[0];
  if (out->dtype != dt)
    return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(out->dtype), fg_dtype_name(dt));
  uint64_t bits;
  if (value_bits(ctx, dt, v, &bits) != 0) return -1;
  return fgc_fill_bits(ctx, out->data, fgk_numel(out), fgc_esize(dt), bits);
}

static int fill(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 0, 1) != 0) return -1;
  return write_all(ctx, dt, ctx->p->fill.value);
}
static int zeros_like(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 0, 1) != 0) return -1;
  return write_all(ctx, dt, 0.0);
}
static int ones_like(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 0, 1) != 0) return -1;
  return write_all(ctx, dt, 1.0);
}

#define FGC_PER_DTYPE(base, impl)                                                                  \
  int base##_f32(const fg_kctx *ctx) { return impl(ctx, FG_F32); }                                 \
  int base##_f64(const fg_kctx *ctx) { return impl(ctx, FG_F64); }                                 \
  int base##_i32(const fg_kctx *ctx) { return impl(ctx, FG_I32); }                                 \
  int base##_i64(const fg_kctx *ctx) { return impl(ctx, FG_I64); }                                 \
  int base##_bool(const fg_kctx *ctx) { return impl(ctx, FG_BOOL); }
FGC_PER_DTYPE(fgc_cast, cast)
FGC_PER_DTYPE(fgc_fill, fill)
FGC_PER_DTYPE(fgc_zeros_like, zeros_like)
FGC_PER_DTYPE(fgc_ones_like, ones_like)

/* numel: the count is known on the host; a fill writes it (no host-to-
 * device copy from pageable memory, which stream capture would refuse). */
static int count(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 1, 1) != 0) return -1;
  fg_kbuf *out = &ctx->out[0];
  if (out->dtype != dt || out->rank != 0)
    return fgk_fail(ctx, "output is %s of rank %d, expected a %s scalar", fg_dtype_name(out->dtype),
                    out->rank, fg_dtype_name(dt));
  const int64_t n = fgk_numel(&ctx->in[0]);
  if (dt == FG_I32 && n > INT32_MAX)
    return fgk_fail(ctx, "input 0 has %lld elements, more than an i32 holds", (long long)n);
  uint64_t bits;
  if (dt == FG_I64)
    bits = (uint64_t)n;
  else if (value_bits(ctx, dt, (double)n, &bits) != 0)
    return -1;
  return fgc_fill_bits(ctx, out->data, 1, fgc_esize(dt), bits);
}
int fgc_count_f32(const fg_kctx *ctx) { return count(ctx, FG_F32); }
int fgc_count_f64(const fg_kctx *ctx) { return count(ctx, FG_F64); }
int fgc_count_i32(const fg_kctx *ctx) { return count(ctx, FG_I32); }
int fgc_count_i64(const fg_kctx *ctx) { return count(ctx, FG_I64); }

int fgc_group(const fg_kctx *ctx) {
  if (fgc_check(ctx, 0, 1) != 0) return -1;
  fg_kbuf *out = &ctx->out[0];
  if (out->dtype != FG_I32 || out->rank != 0)
    return fgk_fail(ctx, "output is %s of rank %d, expected an i32 scalar",
                    fg_dtype_name(out->dtype), out->rank);
  return fgc_fill_bits(ctx, out->data, 1, 4, 0);
}

/* ---- copies ---------------------------------------------------------------- */

/* reshape, identity, stop_gradient, expand_dims, reshape_like. */
int fgc_copy(const fg_kctx *ctx) {
  if (fgc_check(ctx, 1, 1) != 0) return -1;
  if (ctx->in[0].dtype != ctx->out[0].dtype)
    return fgk_fail(ctx, "input 0 is %s, the output %s", fg_dtype_name(ctx->in[0].dtype),
                    fg_dtype_name(ctx->out[0].dtype));
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (fgk_numel(&ctx->in[0]) != n)
    return fgk_fail(ctx, "input has %lld elements, output %lld", (long long)fgk_numel(&ctx->in[0]),
                    (long long)n);
  return fgc_copy_bytes(ctx, ctx->out[0].data, ctx->in[0].data,
                        (size_t)n * fgc_esize(ctx->out[0].dtype));
}

/* assign(variable, value): out[0] is the variable's storage. */
int fgc_assign(const fg_kctx *ctx) {
  if (fgc_check(ctx, 2, 1) != 0) return -1;
  const fg_kbuf *val = &ctx->in[1];
  fg_kbuf *out = &ctx->out[0];
  if (val->dtype != out->dtype)
    return fgk_fail(ctx, "value is %s, the variable %s", fg_dtype_name(val->dtype),
                    fg_dtype_name(out->dtype));
  const int64_t n = fgk_numel(out);
  if (fgk_numel(val) != n)
    return fgk_fail(ctx, "value has %lld elements, the variable %lld", (long long)fgk_numel(val),
                    (long long)n);
  return fgc_copy_bytes(ctx, out->data, val->data, (size_t)n * fgc_esize(out->dtype));
}
