/* The element functions of the float element-wise ops, one per op and
 * dtype, shared by their own kernels (binary.c, elementwise_unary.c) and
 * the fused kernel (fused.c): a fused node calls exactly the function the
 * op's kernel calls, so it gives the same bits. Private to kernels/cpu/. */
#ifndef FG_ELEMENTWISE_SCALAR_H
#define FG_ELEMENTWISE_SCALAR_H

#include <math.h>

#include "kernels/cpu/cpu_kernels.h"

#define FGK_SQRT1_2 0.70710678118654752440

/* ---- binary --------------------------------------------------------------- */
static inline float add_f32(float x, float y) { return x + y; }
static inline double add_f64(double x, double y) { return x + y; }
static inline float sub_f32(float x, float y) { return x - y; }
static inline double sub_f64(double x, double y) { return x - y; }
static inline float mul_f32(float x, float y) { return x * y; }
static inline double mul_f64(double x, double y) { return x * y; }
static inline float div_f32(float x, float y) { return x / y; }
static inline double div_f64(double x, double y) { return x / y; }
/* A square is one multiplication (correctly rounded, as PyTorch's pow
 * computes x ** 2), not a libm call: exported layer norms and L2 norms
 * square with Pow(x, 2). */
static inline float pow_f32(float x, float y) { return y == 2.0f ? x * x : powf(x, y); }
static inline double pow_f64(double x, double y) { return y == 2.0 ? x * x : pow(x, y); }
/* NaN propagates, as np.maximum/np.minimum. */
static inline float max_f32(float x, float y) { return (x > y || x != x) ? x : y; }
static inline double max_f64(double x, double y) { return (x > y || x != x) ? x : y; }
static inline float min_f32(float x, float y) { return (x < y || x != x) ? x : y; }
static inline double min_f64(double x, double y) { return (x < y || x != x) ? x : y; }

/* ---- unary ---------------------------------------------------------------- */
static inline float neg_f32(float x) { return -x; }
static inline double neg_f64(double x) { return -x; }
static inline float exp_f32(float x) { return fgk_expf(x); }
static inline double exp_f64(double x) { return exp(x); }
static inline float log_f32(float x) { return fgk_logf(x); }
static inline double log_f64(double x) { return log(x); }
static inline float sqrt_f32(float x) { return sqrtf(x); }
static inline double sqrt_f64(double x) { return sqrt(x); }
static inline float rsqrt_f32(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt_f64(double x) { return 1.0 / sqrt(x); }
static inline float abs_f32(float x) { return fabsf(x); }
static inline double abs_f64(double x) { return fabs(x); }
static inline float tanh_f32(float x) { return fgk_tanhf(x); }
static inline double tanh_f64(double x) { return tanh(x); }

/* Split at 0 so that exp never overflows: for large |x| the result
 * saturates to 0 or 1 instead of becoming inf/inf. In f32, e = exp(-|x|)
 * by fgk_expf and the numerator (1 for x >= 0, else e) picked by a mask,
 * so loops over it vectorise: with libm's expf and a branch, the SiLU
 * (x * sigmoid(x)) of an imported EfficientNet-B0 took 71% of its time. */
static inline float sigmoid_f32(float x) {
  const float e = fgk_expf(-fabsf(x));
  return fgk_pick(fgk_mask(x >= 0), 1.0f, e) / (1.0f + e);
}
static inline double sigmoid_f64(double x) {
  if (x >= 0) return 1.0 / (1.0 + exp(-x));
  const double e = exp(x);
  return e / (1.0 + e);
}

/* `x < 0 ? 0 : x` keeps NaN as NaN, as PyTorch's relu does. */
static inline float relu_f32(float x) { return x < 0 ? 0.0f : x; }
static inline double relu_f64(double x) { return x < 0 ? 0.0 : x; }
/* The attributes arrive as doubles; f32 rounds them once, as the ops do. */
static inline float leaky_relu_f32(float x, double alpha) { return x > 0 ? x : (float)alpha * x; }
static inline double leaky_relu_f64(double x, double alpha) { return x > 0 ? x : alpha * x; }
/* expm1 keeps the digits of e^x - 1 for x near 0, as torch's ELU does. */
static inline float elu_f32(float x, double alpha) { return x > 0 ? x : (float)alpha * expm1f(x); }
static inline double elu_f64(double x, double alpha) { return x > 0 ? x : alpha * expm1(x); }
/* Past the threshold softplus is x itself, so exp never overflows there.
 * In f32 both sides are computed and one picked by a mask (fgk_expf,
 * fgk_log1pf), so loops over it vectorise. */
static inline float softplus_f32(float x, double beta, double threshold) {
  const float b = (float)beta, s = fgk_log1pf(fgk_expf(x * b)) / b;
  return fgk_pick(fgk_mask(x * b > (float)threshold), x, s);
}
static inline double softplus_f64(double x, double beta, double threshold) {
  return x * beta > threshold ? x : log1p(exp(x * beta)) / beta;
}
/* x / (1 + e^-x): for very negative x, e^-x = inf gives -0, not NaN
 * (fgk_expf, so loops over it vectorise). */
static inline float silu_f32(float x) { return x / (1.0f + fgk_expf(-x)); }
static inline double silu_f64(double x) { return x / (1.0 + exp(-x)); }
/* The exact erf form, PyTorch's default (approximate='none'). */
static inline float gelu_f32(float x) {
  return 0.5f * x * (1.0f + fgk_erff(x * (float)FGK_SQRT1_2));
}
static inline double gelu_f64(double x) { return 0.5 * x * (1.0 + erf(x * FGK_SQRT1_2)); }
/* The tanh approximation as x sigmoid(2 u), u = sqrt(2 / pi) (x + 0.044715
 * x^3): (1 + tanh(u)) / 2 is sigmoid(2 u), which keeps its digits where 1
 * + tanh(u) would cancel (u << 0), and fgk_expf vectorises. For very
 * negative x, e^(-2u) = inf gives -0; where x^3 overflows (|x| > 2e12 in
 * f32) the limits x and -0 come out as well. */
#define FGK_GELU_2C 1.5957691216057307117 /* 2 sqrt(2 / pi) */
#define FGK_GELU_K  0.044715
static inline float gelu_tanh_f32(float x) {
  const float u2 = (float)FGK_GELU_2C * (x + (float)FGK_GELU_K * (x * x * x));
  return x / (1.0f + fgk_expf(-u2));
}
static inline double gelu_tanh_f64(double x) {
  const double u2 = FGK_GELU_2C * (x + FGK_GELU_K * (x * x * x));
  return x / (1.0 + exp(-u2));
}
static inline float erf_f32(float x) { return fgk_erff(x); }
static inline double erf_f64(double x) { return erf(x); }
/* (0 < x) - (x < 0): sign(NaN) = 0 and sign(-0) = +0, as torch.sign. */
static inline float sign_f32(float x) { return (float)((0 < x) - (x < 0)); }
static inline double sign_f64(double x) { return (double)((0 < x) - (x < 0)); }
static inline float reciprocal_f32(float x) { return 1.0f / x; }
static inline double reciprocal_f64(double x) { return 1.0 / x; }
static inline float floor_f32(float x) { return floorf(x); }
static inline double floor_f64(double x) { return floor(x); }
static inline float ceil_f32(float x) { return ceilf(x); }
static inline double ceil_f64(double x) { return ceil(x); }
/* nearbyint in the default rounding mode rounds halves to even (torch.round). */
static inline float round_f32(float x) { return nearbyintf(x); }
static inline double round_f64(double x) { return nearbyint(x); }
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

#endif
