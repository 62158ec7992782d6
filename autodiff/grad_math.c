/* Gradients of the elementwise math ops, cast and the reductions.
 *
 * Every gradient is composed from ordinary differentiable ops (mul, select,
 * exp, ...) rather than fused "*_grad" kernels, so the backward graph can be
 * differentiated again (Hessian-vector products). Masks for kinks (relu,
 * abs, maximum, pow's log) are built with select on a comparison: the
 * comparison yields bool, which carries no gradient, so a second pass sees
 * only the selected values. Zeros are scalar constants rather than
 * zeros_like(dy): a constant has no inputs and so never lies on a path.
 *
 * Conventions follow PyTorch where the math leaves a choice: the derivative
 * of relu and abs at 0 is 0, maximum/minimum split ties equally, pow's
 * exponent gradient is 0 where the base is not positive, and reduce_max
 * shares the gradient equally among tied maxima (torch.amax). */
#include <stdio.h>
#include <stdlib.h>

#include "autodiff/grad.h"
#include "graph/builders_internal.h"

/* ---- small builders ----------------------------------------------------- */

static fg_dtype dtype_of(fg_graph *g, fg_output o) {
  const fg_tinfo *t = fg_graph_tinfo(g, o);
  return t ? t->dtype : FG_F32;
}

/* A scalar constant of `like`'s dtype, so it combines with `like` in binary
 * ops (there is no implicit promotion). */
static fg_output sc(fg_graph *g, fg_output like, double v) {
  return fg_scalar(g, dtype_of(g, like), v);
}

static int done(fg_grad_ctx *ctx) { return fg_graph_failed(ctx->g) ? -1 : 0; }

/* ---- binary arithmetic -------------------------------------------------- */

static int grad_add(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_output a = fg_grad_input(ctx, 0), b = fg_grad_input(ctx, 1), dy = ctx->dy[0];
  if (ctx->wants[0]) ctx->dx[0] = fg_grad_sum_to(g, dy, a);
  if (ctx->wants[1]) ctx->dx[1] = fg_grad_sum_to(g, dy, b);
  return done(ctx);
}

static int grad_sub(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_output a = fg_grad_input(ctx, 0), b = fg_grad_input(ctx, 1), dy = ctx->dy[0];
  if (ctx->wants[0]) ctx->dx[0] = fg_grad_sum_to(g, dy, a);
  if (ctx->wants[1]) ctx->dx[1] = fg_grad_sum_to(g, fg_neg(g, dy), b);
  return done(ctx);
}

static int grad_mul(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_output a = fg_grad_input(ctx, 0), b = fg_grad_input(ctx, 1), dy = ctx->dy[0];
  if (ctx->wants[0]) ctx->dx[0] = fg_grad_sum_to(g, fg_mul(g, dy, b), a);
  if (ctx->wants[1]) ctx->dx[1] = fg_grad_sum_to(g, fg_mul(g, dy, a), b);
  return done(ctx);
}

/* y = a / b: da = dy / b, db = -dy * y / b (y = a / b saves a division). */
static int grad_div(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_output a = fg_grad_input(ctx, 0), b = fg_grad_input(ctx, 1), y = fg_grad_output(ctx, 0);
  fg_output dy = ctx->dy[0];
  if (ctx->wants[0]) ctx->dx[0] = fg_grad_sum_to(g, fg_div(g, dy, b), a);
  if (ctx->wants[1]) ctx->dx[1] = fg_grad_sum_to(g, fg_neg(g, fg_div(g, fg_mul(g, dy, y), b)), b);
  return done(ctx);
}

/* y = a^b. da = dy * b * a^(b-1), and 0 where b == 0 (PyTorch's mask: it
 * keeps 0^0's gradient finite instead of 0 * inf). db = dy * y * log(a)
 * where a > 0, else 0; log sees a safe base (1) where masked, so a second
 * derivative does not meet log's 1/a at a <= 0. */
static int grad_pow(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_output a = fg_grad_input(ctx, 0), b = fg_grad_input(ctx, 1), y = fg_grad_output(ctx, 0);
  fg_output dy = ctx->dy[0];
  fg_output zero = sc(g, dy, 0), one = sc(g, dy, 1);
  if (ctx->wants[0]) {
    fg_output d = fg_mul(g, dy, fg_mul(g, b, fg_pow(g, a, fg_sub(g, b, one))));
    d = fg_select(g, fg_equal(g, b, zero), zero, d);
    ctx->dx[0] = fg_grad_sum_to(g, d, a);
  }
  if (ctx->wants[1]) {
    fg_output pos = fg_greater(g, a, zero);
    fg_output la = fg_select(g, pos, fg_log(g, fg_select(g, pos, a, one)), zero);
    ctx->dx[1] = fg_grad_sum_to(g, fg_mul(g, dy, fg_mul(g, y, la)), b);
  }
  return done(ctx);
}

/* maximum (is_max) or minimum: the winner takes dy, a tie gives each input
 * half (PyTorch). */
static int grad_minmax(fg_grad_ctx *ctx, int is_max) {
  fg_graph *g = ctx->g;
  fg_output a = fg_grad_input(ctx, 0), b = fg_grad_input(ctx, 1), dy = ctx->dy[0];
  fg_output zero = sc(g, dy, 0);
  fg_output tie = fg_select(g, fg_equal(g, a, b), fg_mul(g, dy, sc(g, dy, 0.5)), zero);
  if (ctx->wants[0]) {
    fg_output wins = is_max ? fg_greater(g, a, b) : fg_less(g, a, b);
    ctx->dx[0] = fg_grad_sum_to(g, fg_select(g, wins, dy, tie), a);
  }
  if (ctx->wants[1]) {
    fg_output wins = is_max ? fg_less(g, a, b) : fg_greater(g, a, b);
    ctx->dx[1] = fg_grad_sum_to(g, fg_select(g, wins, dy, tie), b);
  }
  return done(ctx);
}

static int grad_maximum(fg_grad_ctx *ctx) { return grad_minmax(ctx, 1); }
static int grad_minimum(fg_grad_ctx *ctx) { return grad_minmax(ctx, 0); }

/* select(c, a, b): the condition is bool and gets nothing. */
static int grad_select(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_output c = fg_grad_input(ctx, 0), a = fg_grad_input(ctx, 1), b = fg_grad_input(ctx, 2);
  fg_output dy = ctx->dy[0];
  fg_output zero = sc(g, dy, 0);
  if (ctx->wants[1]) ctx->dx[1] = fg_grad_sum_to(g, fg_select(g, c, dy, zero), a);
  if (ctx->wants[2]) ctx->dx[2] = fg_grad_sum_to(g, fg_select(g, c, zero, dy), b);
  return done(ctx);
}

/* ---- unary -------------------------------------------------------------- */

/* The unary ops share a shape: dx[0] = f(x, y, dy). */
#define UNARY_GRAD(fn, expr)                                                                       \
  static int fn(fg_grad_ctx *ctx) {                                                                \
    fg_graph *g = ctx->g;                                                                          \
    fg_output x = fg_grad_input(ctx, 0), y = fg_grad_output(ctx, 0), dy = ctx->dy[0];              \
    (void)g;                                                                                       \
    (void)x;                                                                                       \
    (void)y;                                                                                       \
    if (ctx->wants[0]) ctx->dx[0] = (expr);                                                        \
    return done(ctx);                                                                              \
  }

UNARY_GRAD(grad_neg, fg_neg(g, dy))
UNARY_GRAD(grad_exp, fg_mul(g, dy, y))
UNARY_GRAD(grad_log, fg_div(g, dy, x))
/* sqrt: dy / (2 y) */
UNARY_GRAD(grad_sqrt, fg_div(g, fg_mul(g, dy, sc(g, dy, 0.5)), y))
/* rsqrt: y = x^(-1/2), dy/dx = -x^(-3/2) / 2 = -y^3 / 2 */
UNARY_GRAD(grad_rsqrt, fg_mul(g, fg_mul(g, dy, sc(g, dy, -0.5)), fg_mul(g, y, fg_mul(g, y, y))))
/* tanh: dy (1 - y^2) */
UNARY_GRAD(grad_tanh, fg_mul(g, dy, fg_sub(g, sc(g, dy, 1), fg_mul(g, y, y))))
/* sigmoid: dy y (1 - y) */
UNARY_GRAD(grad_sigmoid, fg_mul(g, dy, fg_mul(g, y, fg_sub(g, sc(g, dy, 1), y))))
/* relu: dy where x > 0, else 0 (0 at the kink, as PyTorch). The mask
 * reads relu's output y = (x < 0 ? 0 : x): y > 0 exactly where x > 0
 * (x = -0.0 gives y = -0.0 and x = NaN gives NaN, neither > 0), so the
 * mask is the same for every x, and the pre-activation x keeps relu as
 * its only consumer, which lets the epilogue pass fuse it into the
 * matmul that makes it. */
UNARY_GRAD(grad_relu, fg_select(g, fg_greater(g, y, sc(g, dy, 0)), dy, sc(g, dy, 0)))
/* abs: dy * sign(x), sign(0) = 0 */
UNARY_GRAD(grad_abs,
           fg_select(g, fg_greater(g, x, sc(g, dy, 0)), dy,
                     fg_select(g, fg_less(g, x, sc(g, dy, 0)), fg_neg(g, dy), sc(g, dy, 0))))
UNARY_GRAD(grad_identity, dy)

/* erf: dy * 2/sqrt(pi) * exp(-x^2) */
#define FG_2_OVER_SQRT_PI 1.12837916709551257390
UNARY_GRAD(grad_erf, fg_mul(g, fg_mul(g, dy, sc(g, dy, FG_2_OVER_SQRT_PI)),
                            fg_exp(g, fg_neg(g, fg_mul(g, x, x)))))

/* leaky_relu: dy where x > 0, else alpha * dy (PyTorch's rule at 0). */
static int grad_leaky_relu(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  double alpha = fg_attr_float_or(fg_graph_node(g, ctx->node), "alpha", 0.01);
  fg_output x = fg_grad_input(ctx, 0), dy = ctx->dy[0];
  if (ctx->wants[0])
    ctx->dx[0] = fg_select(g, fg_greater(g, x, sc(g, dy, 0)), dy, fg_mul(g, dy, sc(g, dy, alpha)));
  return done(ctx);
}

/* elu: dy where x > 0, else dy * alpha * e^x (PyTorch's rule: alpha at 0). */
static int grad_elu(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  double alpha = fg_attr_float_or(fg_graph_node(g, ctx->node), "alpha", 1.0);
  fg_output x = fg_grad_input(ctx, 0), dy = ctx->dy[0];
  if (ctx->wants[0])
    ctx->dx[0] = fg_select(g, fg_greater(g, x, sc(g, dy, 0)), dy,
                           fg_mul(g, dy, fg_mul(g, sc(g, dy, alpha), fg_exp(g, x))));
  return done(ctx);
}

/* softplus: dy where beta x > threshold, else dy * sigmoid(beta x)
 * (torch's softplus_backward: z / (z + 1) with z = e^(beta x)). */
static int grad_softplus(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  const fg_node *n = fg_graph_node(g, ctx->node);
  double beta = fg_attr_float_or(n, "beta", 1.0), thr = fg_attr_float_or(n, "threshold", 20.0);
  fg_output x = fg_grad_input(ctx, 0), dy = ctx->dy[0];
  if (ctx->wants[0]) {
    fg_output bx = fg_mul(g, x, sc(g, dy, beta));
    ctx->dx[0] =
        fg_select(g, fg_greater(g, bx, sc(g, dy, thr)), dy, fg_mul(g, dy, fg_sigmoid(g, bx)));
  }
  return done(ctx);
}

/* selu: dy * scale where x > 0, else dy * scale * alpha * e^x (torch: the
 * exponential side at 0). */
#define FG_SELU_ALPHA 1.6732632423543772848170429916717
#define FG_SELU_SCALE 1.0507009873554804934193349852946
UNARY_GRAD(grad_selu,
           fg_select(g, fg_greater(g, x, sc(g, dy, 0)), fg_mul(g, dy, sc(g, dy, FG_SELU_SCALE)),
                     fg_mul(g, dy,
                            fg_mul(g, sc(g, dy, FG_SELU_ALPHA *FG_SELU_SCALE), fg_exp(g, x)))))

/* silu: dy * s * (1 + x (1 - s)) with s = sigmoid(x). */
static int grad_silu(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_output x = fg_grad_input(ctx, 0), dy = ctx->dy[0];
  if (!ctx->wants[0]) return 0;
  fg_output s = fg_sigmoid(g, x), one = sc(g, dy, 1);
  ctx->dx[0] = fg_mul(g, dy, fg_mul(g, s, fg_add(g, one, fg_mul(g, x, fg_sub(g, one, s)))));
  return done(ctx);
}

/* hard_sigmoid: dy / 6 for -3 < x < 3, else 0 (torch: 0 at both kinks). */
UNARY_GRAD(grad_hard_sigmoid, fg_select(g, fg_greater(g, x, sc(g, dy, -3)),
                                        fg_select(g, fg_less(g, x, sc(g, dy, 3)),
                                                  fg_mul(g, dy, sc(g, dy, 1.0 / 6)), sc(g, dy, 0)),
                                        sc(g, dy, 0)))

/* hard_swish: 0 for x < -3, dy (x / 3 + 1/2) for -3 <= x <= 3, dy above
 * (torch's hardswish_backward: -1/2 at x = -3 and 3/2 at x = 3). */
UNARY_GRAD(grad_hard_swish, fg_select(g, fg_less(g, x, sc(g, dy, -3)), sc(g, dy, 0),
                                      fg_select(g, fg_greater(g, x, sc(g, dy, 3)), dy,
                                                fg_mul(g, dy,
                                                       fg_add(g, fg_mul(g, x, sc(g, dy, 1.0 / 3)),
                                                              sc(g, dy, 0.5))))))

/* mish: dy (t + x s (1 - t^2)) with t = tanh(softplus(x)), s = sigmoid(x). */
static int grad_mish(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_output x = fg_grad_input(ctx, 0), dy = ctx->dy[0];
  if (!ctx->wants[0]) return 0;
  fg_output t = fg_tanh(g, fg_softplus(g, x, 1.0, 20.0)), s = fg_sigmoid(g, x);
  fg_output dt = fg_sub(g, sc(g, dy, 1), fg_mul(g, t, t));
  ctx->dx[0] = fg_mul(g, dy, fg_add(g, t, fg_mul(g, x, fg_mul(g, s, dt))));
  return done(ctx);
}

/* reciprocal: -dy y^2 */
UNARY_GRAD(grad_reciprocal, fg_neg(g, fg_mul(g, dy, fg_mul(g, y, y))))

/* sign, floor, ceil, round are piecewise constant: zeros, as PyTorch gives
 * (not dy * 0, which would turn an infinite dy into NaN). */
UNARY_GRAD(grad_zero, fg_zeros_like(g, dy))

/* clip: dy where min <= x <= max, else 0 (torch's clamp_backward: both
 * bounds pass dy, and a NaN x gets 0). */
static int grad_clip(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  const fg_node *n = fg_graph_node(g, ctx->node);
  double lo = fg_attr_float_or(n, "min", 0.0), hi = fg_attr_float_or(n, "max", 0.0);
  fg_output x = fg_grad_input(ctx, 0), dy = ctx->dy[0];
  if (!ctx->wants[0]) return 0;
  fg_output zero = sc(g, dy, 0);
  fg_output in = fg_select(g, fg_equal(g, x, x), dy, zero);
  in = fg_select(g, fg_greater(g, x, sc(g, dy, hi)), zero, in);
  ctx->dx[0] = fg_select(g, fg_less(g, x, sc(g, dy, lo)), zero, in);
  return done(ctx);
}

/* Exact gelu, y = x Phi(x): dy/dx = Phi(x) + x phi(x), with
 * Phi(x) = (1 + erf(x / sqrt 2)) / 2 and phi(x) = exp(-x^2 / 2) / sqrt(2 pi). */
#define FG_SQRT1_2      0.70710678118654752440
#define FG_INV_SQRT_2PI 0.39894228040143267794
static int grad_gelu(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_output x = fg_grad_input(ctx, 0), dy = ctx->dy[0];
  if (!ctx->wants[0]) return 0;
  fg_output cdf = fg_mul(g, sc(g, dy, 0.5),
                         fg_add(g, sc(g, dy, 1), fg_erf(g, fg_mul(g, x, sc(g, dy, FG_SQRT1_2)))));
  fg_output pdf =
      fg_mul(g, fg_exp(g, fg_mul(g, fg_mul(g, x, x), sc(g, dy, -0.5))), sc(g, dy, FG_INV_SQRT_2PI));
  ctx->dx[0] = fg_mul(g, dy, fg_add(g, cdf, fg_mul(g, x, pdf)));
  return done(ctx);
}

/* gelu_tanh, y = x s with s = sigmoid(2 u), u = c (x + k x^3), c =
 * sqrt(2 / pi), k = 0.044715: dy/dx = s + 2 x s (1 - s) c (1 + 3 k x^2). */
#define FG_GELU_C 0.79788456080286535588
#define FG_GELU_K 0.044715
static fg_output gelu_tanh_dx(fg_graph *g, fg_output x, fg_output dy) {
  fg_output x2 = fg_mul(g, x, x);
  fg_output u = fg_mul(g, sc(g, dy, FG_GELU_C),
                       fg_add(g, x, fg_mul(g, sc(g, dy, FG_GELU_K), fg_mul(g, x2, x))));
  fg_output s = fg_sigmoid(g, fg_mul(g, sc(g, dy, 2), u));
  fg_output du = fg_mul(g, sc(g, dy, 2 * FG_GELU_C),
                        fg_add(g, sc(g, dy, 1), fg_mul(g, sc(g, dy, 3 * FG_GELU_K), x2)));
  fg_output ds = fg_mul(g, fg_mul(g, s, fg_sub(g, sc(g, dy, 1), s)), du);
  return fg_mul(g, dy, fg_add(g, s, fg_mul(g, x, ds)));
}
UNARY_GRAD(grad_gelu_tanh, gelu_tanh_dx(g, x, dy))

/* cast: float to float passes dy back in the input's dtype; from an integer
 * or bool there is nothing to differentiate. */
static int grad_cast(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_output x = fg_grad_input(ctx, 0), dy = ctx->dy[0];
  fg_dtype in = dtype_of(g, x), out = dtype_of(g, dy);
  if (!ctx->wants[0] || !fg_dtype_is_float(in) || !fg_dtype_is_float(out)) return 0;
  ctx->dx[0] = in == out ? dy : fg_cast(g, dy, in);
  return done(ctx);
}

/* ---- reductions --------------------------------------------------------- */

int fg_grad_reduce_read(fg_grad_ctx *ctx, fg_grad_reduce_info *r) {
  fg_graph *g = ctx->g;
  const fg_node *n = fg_graph_node(g, ctx->node);
  r->x = fg_grad_input(ctx, 0);
  r->y = fg_grad_output(ctx, 0);
  const fg_tinfo *tx = fg_graph_tinfo(g, r->x);
  if (!n || !tx) {
    fg_graph_fail(g, FG_INTERNAL, "gradient of node %d: missing node or input", ctx->node);
    return -1;
  }
  r->rank = tx->rank;
  r->keepdims = fg_attr_int_or(n, "keepdims", 0) != 0;
  char on[FG_MAX_RANK] = {0};
  const fg_attr *at = fg_attrs_find(&n->attrs, "axes");
  int given = at && at->type == FG_ATTR_INTS ? at->n : 0;
  if (given == 0)
    for (int d = 0; d < r->rank; d++)
      on[d] = 1;
  for (int k = 0; k < given; k++) {
    int64_t ax = at->ints[k] < 0 ? at->ints[k] + r->rank : at->ints[k];
    if (ax < 0 || ax >= r->rank) {
      /* Inference rejects this; a graph edited afterwards could still hold it. */
      fg_graph_fail(g, FG_INVALID_GRAPH, "node '%s' (%s): axis %lld out of range for rank %d",
                    n->name, fg_op_table[n->op].name, (long long)at->ints[k], r->rank);
      return -1;
    }
    on[ax] = 1;
  }
  r->n_axes = 0;
  r->count = 1;
  for (int d = 0; d < r->rank; d++) {
    if (!on[d]) continue;
    r->axes[r->n_axes++] = d;
    if (r->count >= 0 && tx->dims[d] >= 0)
      r->count *= tx->dims[d];
    else
      r->count = -1;
  }
  r->all = r->n_axes == r->rank;
  return 0;
}

/* dy in the keepdims layout, so it broadcasts against x. A scalar dy from a
 * full reduction already broadcasts. */
fg_output fg_grad_reduce_keep(fg_graph *g, const fg_grad_reduce_info *r, fg_output dy) {
  if (r->keepdims || r->all || r->n_axes == 0) return dy;
  return fg_expand_dims(g, dy, r->axes, r->n_axes);
}

int fg_grad_reduce(fg_grad_ctx *ctx, fg_grad_reduce_rule rule) {
  fg_grad_reduce_info r;
  if (!ctx->wants[0]) return 0;
  if (fg_grad_reduce_read(ctx, &r) != 0) return -1;
  ctx->dx[0] = rule(ctx->g, &r, ctx->dy[0]);
  return done(ctx);
}

static fg_output reduce_sum_rule(fg_graph *g, const fg_grad_reduce_info *r, fg_output dy) {
  return fg_broadcast_like(g, fg_grad_reduce_keep(g, r, dy), r->x);
}

/* The divisor is a constant when the reduced dims are known; otherwise (the
 * unknown batch) numel(x) / numel(y) at run time. */
static fg_output reduce_mean_rule(fg_graph *g, const fg_grad_reduce_info *r, fg_output dy) {
  fg_dtype dt = dtype_of(g, dy);
  fg_output count = r->count >= 0 ? fg_scalar(g, dt, r->count > 0 ? (double)r->count : 1.0)
                                  : fg_div(g, fg_numel(g, r->x, dt), fg_numel(g, r->y, dt));
  return fg_broadcast_like(g, fg_grad_reduce_keep(g, r, fg_div(g, dy, count)), r->x);
}

/* dx = dy / (number of maxima) at every maximum, 0 elsewhere (reduce_max;
 * reduce_min alike, at every minimum). The mask is a
 * cast of a comparison, so it is a constant for a second derivative. */
fg_output fg_grad_extreme_rule(fg_graph *g, const fg_grad_reduce_info *r, fg_output dy) {
  fg_dtype dt = dtype_of(g, dy);
  fg_output mask = fg_cast(g, fg_equal(g, r->x, fg_grad_reduce_keep(g, r, r->y)), dt);
  /* With nothing reduced (a rank-0 x) every element is its own maximum. */
  fg_output ties = r->n_axes ? fg_reduce_sum(g, mask, r->axes, r->n_axes, 1) : mask;
  return fg_mul(g, mask, fg_div(g, fg_grad_reduce_keep(g, r, dy), ties));
}

static int grad_reduce_sum(fg_grad_ctx *ctx) { return fg_grad_reduce(ctx, reduce_sum_rule); }
static int grad_reduce_mean(fg_grad_ctx *ctx) { return fg_grad_reduce(ctx, reduce_mean_rule); }
static int grad_reduce_max(fg_grad_ctx *ctx) { return fg_grad_reduce(ctx, fg_grad_extreme_rule); }

/* ---- registry ----------------------------------------------------------- */

/* Exactly the ops of this family flagged FG_OPF_DIFFERENTIABLE; zeros_like,
 * ones_like and fill are not (no gradient flows through them), and the
 * core stops at unflagged ops. */
const fg_grad_reg fg_grads_math[] = {
    {FG_OP_ADD, grad_add},
    {FG_OP_SUB, grad_sub},
    {FG_OP_MUL, grad_mul},
    {FG_OP_DIV, grad_div},
    {FG_OP_POW, grad_pow},
    {FG_OP_MAXIMUM, grad_maximum},
    {FG_OP_MINIMUM, grad_minimum},
    {FG_OP_SELECT, grad_select},
    {FG_OP_NEG, grad_neg},
    {FG_OP_EXP, grad_exp},
    {FG_OP_LOG, grad_log},
    {FG_OP_SQRT, grad_sqrt},
    {FG_OP_RSQRT, grad_rsqrt},
    {FG_OP_ABS, grad_abs},
    {FG_OP_TANH, grad_tanh},
    {FG_OP_SIGMOID, grad_sigmoid},
    {FG_OP_RELU, grad_relu},
    {FG_OP_LEAKY_RELU, grad_leaky_relu},
    {FG_OP_ELU, grad_elu},
    {FG_OP_SOFTPLUS, grad_softplus},
    {FG_OP_SELU, grad_selu},
    {FG_OP_SILU, grad_silu},
    {FG_OP_HARD_SIGMOID, grad_hard_sigmoid},
    {FG_OP_HARD_SWISH, grad_hard_swish},
    {FG_OP_MISH, grad_mish},
    {FG_OP_SIGN, grad_zero},
    {FG_OP_RECIPROCAL, grad_reciprocal},
    {FG_OP_FLOOR, grad_zero},
    {FG_OP_CEIL, grad_zero},
    {FG_OP_ROUND, grad_zero},
    {FG_OP_CLIP, grad_clip},
    {FG_OP_GELU, grad_gelu},
    {FG_OP_GELU_TANH, grad_gelu_tanh},
    {FG_OP_ERF, grad_erf},
    {FG_OP_IDENTITY, grad_identity},
    {FG_OP_CAST, grad_cast},
    {FG_OP_REDUCE_SUM, grad_reduce_sum},
    {FG_OP_REDUCE_MEAN, grad_reduce_mean},
    {FG_OP_REDUCE_MAX, grad_reduce_max},
    {-1, NULL},
};
