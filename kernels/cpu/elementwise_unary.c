/* Elementwise unary kernels: out[i] = f(in[i]). The output may share the
 * input's buffer (in-place), which a read-then-write loop allows. */
#include <math.h>

#include "kernels/cpu/elementwise_scalar.h"

/* Integer neg/abs go through unsigned arithmetic: -INT_MIN wraps to INT_MIN
 * (as NumPy does) instead of being undefined behaviour. */
static inline int32_t neg_i32(int32_t x) { return (int32_t)(0u - (uint32_t)x); }
static inline int64_t neg_i64(int64_t x) { return (int64_t)(UINT64_C(0) - (uint64_t)x); }

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

FGK_UNARY(fgk_neg_f32, float, FG_F32, CHEAP, neg_f32(x))
FGK_UNARY(fgk_neg_f64, double, FG_F64, CHEAP, neg_f64(x))
FGK_UNARY(fgk_neg_i32, int32_t, FG_I32, CHEAP, neg_i32(x))
FGK_UNARY(fgk_neg_i64, int64_t, FG_I64, CHEAP, neg_i64(x))

FGK_UNARY(fgk_exp_f32, float, FG_F32, MATH, exp_f32(x))
FGK_UNARY(fgk_exp_f64, double, FG_F64, MATH, exp_f64(x))
FGK_UNARY(fgk_log_f32, float, FG_F32, MATH, log_f32(x))
FGK_UNARY(fgk_log_f64, double, FG_F64, MATH, log_f64(x))
FGK_UNARY(fgk_sqrt_f32, float, FG_F32, MATH, sqrt_f32(x))
FGK_UNARY(fgk_sqrt_f64, double, FG_F64, MATH, sqrt_f64(x))
FGK_UNARY(fgk_rsqrt_f32, float, FG_F32, MATH, rsqrt_f32(x))
FGK_UNARY(fgk_rsqrt_f64, double, FG_F64, MATH, rsqrt_f64(x))

FGK_UNARY(fgk_abs_f32, float, FG_F32, CHEAP, abs_f32(x))
FGK_UNARY(fgk_abs_f64, double, FG_F64, CHEAP, abs_f64(x))
FGK_UNARY(fgk_abs_i32, int32_t, FG_I32, CHEAP, x < 0 ? neg_i32(x) : x)
FGK_UNARY(fgk_abs_i64, int64_t, FG_I64, CHEAP, x < 0 ? neg_i64(x) : x)

FGK_UNARY(fgk_tanh_f32, float, FG_F32, MATH, tanh_f32(x))
FGK_UNARY(fgk_tanh_f64, double, FG_F64, MATH, tanh_f64(x))
FGK_UNARY(fgk_sigmoid_f32, float, FG_F32, MATH, sigmoid_f32(x))
FGK_UNARY(fgk_sigmoid_f64, double, FG_F64, MATH, sigmoid_f64(x))

FGK_UNARY(fgk_relu_f32, float, FG_F32, CHEAP, relu_f32(x))
FGK_UNARY(fgk_relu_f64, double, FG_F64, CHEAP, relu_f64(x))
FGK_UNARY(fgk_relu_i32, int32_t, FG_I32, CHEAP, x < 0 ? 0 : x)
FGK_UNARY(fgk_relu_i64, int64_t, FG_I64, CHEAP, x < 0 ? 0 : x)
FGK_UNARY(fgk_leaky_relu_f32, float, FG_F32, CHEAP, leaky_relu_f32(x, p->leaky_relu.alpha))
FGK_UNARY(fgk_leaky_relu_f64, double, FG_F64, CHEAP, leaky_relu_f64(x, p->leaky_relu.alpha))
FGK_UNARY(fgk_elu_f32, float, FG_F32, MATH, elu_f32(x, p->elu.alpha))
FGK_UNARY(fgk_elu_f64, double, FG_F64, MATH, elu_f64(x, p->elu.alpha))

FGK_UNARY(fgk_gelu_f32, float, FG_F32, MATH, gelu_f32(x))
FGK_UNARY(fgk_gelu_f64, double, FG_F64, MATH, gelu_f64(x))
FGK_UNARY(fgk_gelu_tanh_f32, float, FG_F32, MATH, gelu_tanh_f32(x))
FGK_UNARY(fgk_gelu_tanh_f64, double, FG_F64, MATH, gelu_tanh_f64(x))

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

FGK_UNARY(fgk_softplus_f32, float, FG_F32, MATH,
          softplus_f32(x, p->softplus.beta, p->softplus.threshold))
FGK_UNARY(fgk_softplus_f64, double, FG_F64, MATH,
          softplus_f64(x, p->softplus.beta, p->softplus.threshold))
FGK_UNARY(fgk_selu_f32, float, FG_F32, MATH,
          x > 0 ? (float)FGK_SELU_SCALE * x : (float)(FGK_SELU_ALPHA * FGK_SELU_SCALE) * expm1f(x))
FGK_UNARY(fgk_selu_f64, double, FG_F64, MATH,
          x > 0 ? FGK_SELU_SCALE * x : (FGK_SELU_ALPHA * FGK_SELU_SCALE) * expm1(x))
FGK_UNARY(fgk_silu_f32, float, FG_F32, MATH, silu_f32(x))
FGK_UNARY(fgk_silu_f64, double, FG_F64, MATH, silu_f64(x))
FGK_UNARY(fgk_hard_sigmoid_f32, float, FG_F32, CHEAP, relu6_f32(x + 3.0f) / 6.0f)
FGK_UNARY(fgk_hard_sigmoid_f64, double, FG_F64, CHEAP, relu6_f64(x + 3.0) / 6.0)
FGK_UNARY(fgk_hard_swish_f32, float, FG_F32, CHEAP, x *relu6_f32(x + 3.0f) / 6.0f)
FGK_UNARY(fgk_hard_swish_f64, double, FG_F64, CHEAP, x *relu6_f64(x + 3.0) / 6.0)
/* torch's mish has no threshold: for large x, e^x (at most e^88.8 from
 * fgk_expf) gives tanh(log1p(e^x)) = 1, so x. */
FGK_UNARY(fgk_mish_f32, float, FG_F32, MATH, x *fgk_tanhf(fgk_log1pf(fgk_expf(x))))
FGK_UNARY(fgk_mish_f64, double, FG_F64, MATH, x *tanh(log1p(exp(x))))
FGK_UNARY(fgk_sign_f32, float, FG_F32, CHEAP, sign_f32(x))
FGK_UNARY(fgk_sign_f64, double, FG_F64, CHEAP, sign_f64(x))
FGK_UNARY(fgk_sign_i32, int32_t, FG_I32, CHEAP, (int32_t)((0 < x) - (x < 0)))
FGK_UNARY(fgk_sign_i64, int64_t, FG_I64, CHEAP, (int64_t)((0 < x) - (x < 0)))
FGK_UNARY(fgk_reciprocal_f32, float, FG_F32, CHEAP, reciprocal_f32(x))
FGK_UNARY(fgk_reciprocal_f64, double, FG_F64, CHEAP, reciprocal_f64(x))
FGK_UNARY(fgk_floor_f32, float, FG_F32, CHEAP, floor_f32(x))
FGK_UNARY(fgk_floor_f64, double, FG_F64, CHEAP, floor_f64(x))
FGK_UNARY(fgk_ceil_f32, float, FG_F32, CHEAP, ceil_f32(x))
FGK_UNARY(fgk_ceil_f64, double, FG_F64, CHEAP, ceil_f64(x))
FGK_UNARY(fgk_round_f32, float, FG_F32, CHEAP, round_f32(x))
FGK_UNARY(fgk_round_f64, double, FG_F64, CHEAP, round_f64(x))
FGK_UNARY(fgk_clip_f32, float, FG_F32, CHEAP, clip_f32(x, (float)p->clip.min, (float)p->clip.max))
FGK_UNARY(fgk_clip_f64, double, FG_F64, CHEAP, clip_f64(x, p->clip.min, p->clip.max))
