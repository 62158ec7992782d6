/* Elementwise unary kernels: out[i] = f(in[i]). The output may share the
 * input's buffer (in-place), which a read-then-write loop allows. */
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"

#define FGK_SQRT1_2 0.70710678118654752440

/* Integer neg/abs go through unsigned arithmetic: -INT_MIN wraps to INT_MIN
 * (as NumPy does) instead of being undefined behaviour. */
static inline int32_t neg_i32(int32_t x) { return (int32_t)(0u - (uint32_t)x); }
static inline int64_t neg_i64(int64_t x) { return (int64_t)(UINT64_C(0) - (uint64_t)x); }

/* Split at 0 so that exp never overflows: for large |x| the result
 * saturates to 0 or 1 instead of becoming inf/inf. */
static inline float sigmoid_f32(float x) {
  if (x >= 0) return 1.0f / (1.0f + expf(-x));
  const float e = expf(x);
  return e / (1.0f + e);
}
static inline double sigmoid_f64(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  const double e = exp(x);
  return e / (1.0 + e);
}

/* Arguments of one unary kernel call, shared by its chunks. */
typedef struct un_arg {
  const void *in;
  void *out;
  const fg_op_params *p;
} un_arg;

/* GRAIN: elements per parallel chunk (FGK_GRAIN_CHEAP or _MATH). Chunks
 * are disjoint output ranges, so the split never changes a result. */
#define FGK_UNARY(fn, T, DT, GRAIN, EXPR)                                                          \
  FGK_CLONES static void fn##_range(void *arg, int64_t b, int64_t e) {                             \
    const un_arg *a = (const un_arg *)arg;                                                         \
    const T *in = (const T *)a->in;                                                                \
    T *out = (T *)a->out;                                                                          \
    const fg_op_params *p = a->p;                                                                  \
    (void)p;                                                                                       \
    for (int64_t i = b; i < e; i++) {                                                              \
      const T x = in[i];                                                                           \
      out[i] = (EXPR);                                                                             \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_check(ctx, 1, 1) != 0) return -1;                                                      \
    const int64_t n = fgk_numel(&ctx->out[0]);                                                     \
    if (ctx->in[0].dtype != DT || ctx->out[0].dtype != DT)                                         \
      return fgk_fail(ctx, "expected %s input and output, got %s and %s", fg_dtype_name(DT),       \
                      fg_dtype_name(ctx->in[0].dtype), fg_dtype_name(ctx->out[0].dtype));          \
    if (fgk_numel(&ctx->in[0]) != n)                                                               \
      return fgk_fail(ctx, "input has %lld elements, output %lld",                                 \
                      (long long)fgk_numel(&ctx->in[0]), (long long)n);                            \
    un_arg a = {ctx->in[0].data, ctx->out[0].data, ctx->p};                                        \
    fgk_parallel_for(ctx, n, GRAIN, fn##_range, &a);                                               \
    return 0;                                                                                      \
  }

#define CHEAP FGK_GRAIN_CHEAP
#define MATH  FGK_GRAIN_MATH

FGK_UNARY(fgk_neg_f32, float, FG_F32, CHEAP, -x)
FGK_UNARY(fgk_neg_f64, double, FG_F64, CHEAP, -x)
FGK_UNARY(fgk_neg_i32, int32_t, FG_I32, CHEAP, neg_i32(x))
FGK_UNARY(fgk_neg_i64, int64_t, FG_I64, CHEAP, neg_i64(x))

FGK_UNARY(fgk_exp_f32, float, FG_F32, MATH, fgk_expf(x))
FGK_UNARY(fgk_exp_f64, double, FG_F64, MATH, exp(x))
FGK_UNARY(fgk_log_f32, float, FG_F32, MATH, logf(x))
FGK_UNARY(fgk_log_f64, double, FG_F64, MATH, log(x))
FGK_UNARY(fgk_sqrt_f32, float, FG_F32, MATH, sqrtf(x))
FGK_UNARY(fgk_sqrt_f64, double, FG_F64, MATH, sqrt(x))
FGK_UNARY(fgk_rsqrt_f32, float, FG_F32, MATH, 1.0f / sqrtf(x))
FGK_UNARY(fgk_rsqrt_f64, double, FG_F64, MATH, 1.0 / sqrt(x))

FGK_UNARY(fgk_abs_f32, float, FG_F32, CHEAP, fabsf(x))
FGK_UNARY(fgk_abs_f64, double, FG_F64, CHEAP, fabs(x))
FGK_UNARY(fgk_abs_i32, int32_t, FG_I32, CHEAP, x < 0 ? neg_i32(x) : x)
FGK_UNARY(fgk_abs_i64, int64_t, FG_I64, CHEAP, x < 0 ? neg_i64(x) : x)

FGK_UNARY(fgk_tanh_f32, float, FG_F32, MATH, tanhf(x))
FGK_UNARY(fgk_tanh_f64, double, FG_F64, MATH, tanh(x))
FGK_UNARY(fgk_sigmoid_f32, float, FG_F32, MATH, sigmoid_f32(x))
FGK_UNARY(fgk_sigmoid_f64, double, FG_F64, MATH, sigmoid_f64(x))

/* `x < 0 ? 0 : x` keeps NaN as NaN, as PyTorch's relu does. */
FGK_UNARY(fgk_relu_f32, float, FG_F32, CHEAP, x < 0 ? 0.0f : x)
FGK_UNARY(fgk_relu_f64, double, FG_F64, CHEAP, x < 0 ? 0.0 : x)
FGK_UNARY(fgk_relu_i32, int32_t, FG_I32, CHEAP, x < 0 ? 0 : x)
FGK_UNARY(fgk_relu_i64, int64_t, FG_I64, CHEAP, x < 0 ? 0 : x)
FGK_UNARY(fgk_leaky_relu_f32, float, FG_F32, CHEAP, x > 0 ? x : (float)p->leaky_relu.alpha * x)
FGK_UNARY(fgk_leaky_relu_f64, double, FG_F64, CHEAP, x > 0 ? x : p->leaky_relu.alpha * x)
/* expm1 keeps the digits of e^x - 1 for x near 0, as torch's ELU does. */
FGK_UNARY(fgk_elu_f32, float, FG_F32, MATH, x > 0 ? x : (float)p->elu.alpha * expm1f(x))
FGK_UNARY(fgk_elu_f64, double, FG_F64, MATH, x > 0 ? x : p->elu.alpha * expm1(x))

/* The exact erf form, PyTorch's default (approximate='none'). */
FGK_UNARY(fgk_gelu_f32, float, FG_F32, MATH, 0.5f * x * (1.0f + fgk_erff(x * (float)FGK_SQRT1_2)))
FGK_UNARY(fgk_gelu_f64, double, FG_F64, MATH, 0.5 * x * (1.0 + erf(x * FGK_SQRT1_2)))

/* ---- the activations and rounding ops CNN ports need (torch's formulas) ---- */

/* torch.nn.SELU's fixed constants. */
#define FGK_SELU_ALPHA 1.6732632423543772848170429916717
#define FGK_SELU_SCALE 1.0507009873554804934193349852946

/* min(max(t, 0), 6) written with comparisons so that NaN stays NaN, as
 * std::min/std::max do in torch's hardsigmoid and hardswish. */
static inline float relu6_f32(float t) {
  t = t < 0 ? 0.0f : t;
  return t > 6 ? 6.0f : t;
}
static inline double relu6_f64(double t) {
  t = t < 0 ? 0.0 : t;
  return t > 6 ? 6.0 : t;
}

/* Past the threshold softplus is x itself, so exp never overflows there. */
FGK_UNARY(fgk_softplus_f32, float, FG_F32, MATH,
          x *(float)p->softplus.beta > (float)p->softplus.threshold
              ? x
              : log1pf(expf(x * (float)p->softplus.beta)) / (float)p->softplus.beta)
FGK_UNARY(fgk_softplus_f64, double, FG_F64, MATH,
          x * p->softplus.beta > p->softplus.threshold
              ? x
              : log1p(exp(x * p->softplus.beta)) / p->softplus.beta)
FGK_UNARY(fgk_selu_f32, float, FG_F32, MATH,
          x > 0 ? (float)FGK_SELU_SCALE * x : (float)(FGK_SELU_ALPHA * FGK_SELU_SCALE) * expm1f(x))
FGK_UNARY(fgk_selu_f64, double, FG_F64, MATH,
          x > 0 ? FGK_SELU_SCALE * x : (FGK_SELU_ALPHA * FGK_SELU_SCALE) * expm1(x))
/* x / (1 + e^-x): for very negative x, e^-x = inf gives -0, not NaN. */
FGK_UNARY(fgk_silu_f32, float, FG_F32, MATH, x / (1.0f + expf(-x)))
FGK_UNARY(fgk_silu_f64, double, FG_F64, MATH, x / (1.0 + exp(-x)))
FGK_UNARY(fgk_hard_sigmoid_f32, float, FG_F32, CHEAP, relu6_f32(x + 3.0f) / 6.0f)
FGK_UNARY(fgk_hard_sigmoid_f64, double, FG_F64, CHEAP, relu6_f64(x + 3.0) / 6.0)
FGK_UNARY(fgk_hard_swish_f32, float, FG_F32, CHEAP, x *relu6_f32(x + 3.0f) / 6.0f)
FGK_UNARY(fgk_hard_swish_f64, double, FG_F64, CHEAP, x *relu6_f64(x + 3.0) / 6.0)
/* torch's mish has no threshold: e^x = inf for large x gives tanh(inf) = 1. */
FGK_UNARY(fgk_mish_f32, float, FG_F32, MATH, x *tanhf(log1pf(expf(x))))
FGK_UNARY(fgk_mish_f64, double, FG_F64, MATH, x *tanh(log1p(exp(x))))
/* (0 < x) - (x < 0): sign(NaN) = 0 and sign(-0) = +0, as torch.sign. */
FGK_UNARY(fgk_sign_f32, float, FG_F32, CHEAP, (float)((0 < x) - (x < 0)))
FGK_UNARY(fgk_sign_f64, double, FG_F64, CHEAP, (double)((0 < x) - (x < 0)))
FGK_UNARY(fgk_sign_i32, int32_t, FG_I32, CHEAP, (int32_t)((0 < x) - (x < 0)))
FGK_UNARY(fgk_sign_i64, int64_t, FG_I64, CHEAP, (int64_t)((0 < x) - (x < 0)))
FGK_UNARY(fgk_reciprocal_f32, float, FG_F32, CHEAP, 1.0f / x)
FGK_UNARY(fgk_reciprocal_f64, double, FG_F64, CHEAP, 1.0 / x)
FGK_UNARY(fgk_floor_f32, float, FG_F32, CHEAP, floorf(x))
FGK_UNARY(fgk_floor_f64, double, FG_F64, CHEAP, floor(x))
FGK_UNARY(fgk_ceil_f32, float, FG_F32, CHEAP, ceilf(x))
FGK_UNARY(fgk_ceil_f64, double, FG_F64, CHEAP, ceil(x))
/* nearbyint in the default rounding mode rounds halves to even (torch.round). */
FGK_UNARY(fgk_round_f32, float, FG_F32, CHEAP, nearbyintf(x))
FGK_UNARY(fgk_round_f64, double, FG_F64, CHEAP, nearbyint(x))
/* NaN stays NaN (torch.clamp): both comparisons are false for it, so it
 * passes through; min <= max is checked when the node is made. Written
 * without branches so the loop vectorises (max then min). */
static inline float clip_f32(float x, float lo, float hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}
static inline double clip_f64(double x, double lo, double hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}
FGK_UNARY(fgk_clip_f32, float, FG_F32, CHEAP, clip_f32(x, (float)p->clip.min, (float)p->clip.max))
FGK_UNARY(fgk_clip_f64, double, FG_F64, CHEAP, clip_f64(x, p->clip.min, p->clip.max))
