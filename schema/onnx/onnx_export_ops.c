/* The per-op writers of the ONNX exporter: each turns one flowgraph node
 * into the ONNX node(s) computing the same values at opsets 11..17, with
 * the attributes' meaning carried over exactly. Where ONNX has no op of
 * that meaning (rsqrt, silu, gelu before opset 20, ...) the writer emits
 * the formula flowgraph's doc gives, from ONNX ops. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "schema/onnx/onnx_export.h"

#define NODE_NAME(c, id) fg_node_name(fgo_graph(c), id)
#define OP_NAME(c, id)   fg_node_op(fgo_graph(c), id)

static fg_dtype in_dtype(fgo_ctx *c, int id, int i) {
  const fg_tinfo *t = fgo_in_info(c, id, i);
  return t ? t->dtype : FG_DTYPE_INVALID;
}

static int in_rank(fgo_ctx *c, int id, int i) {
  const fg_tinfo *t = fgo_in_info(c, id, i);
  return t ? t->rank : -1;
}

/* A valid-but-unsupported value: FG_UNIMPLEMENTED naming the node. */
#define UNSUPPORTED(c, id, ...)                                                                    \
  fgo_fail(c, FG_UNIMPLEMENTED, "ONNX export: node '%s' (%s): " __VA_ARGS__)

static int done(Onnx__NodeProto *n) { return n ? 0 : -1; }

/* ---- elementwise ----------------------------------------------------------- */

static int unary(fgo_ctx *c, int id, const char *type) {
  return done(fgo_emit1(c, id, type, fgo_in(c, id, 0), fgo_out(c, id, 0)));
}

static int binary_to(fgo_ctx *c, int id, const char *type, const char *a, const char *b,
                     const char *out) {
  const char *in[2] = {a, b};
  return done(fgo_emit(c, id, type, in, 2, &out, 1));
}

/* Input 0 through `type` into a new tensor, whose name is returned. */
static const char *step(fgo_ctx *c, int id, const char *type, const char *in) {
  const char *out = fgo_tmp(c, id, type);
  return out && fgo_emit1(c, id, type, in, out) ? out : NULL;
}

/* The element-wise writers work from tensor names (fgo_ew), so that a
 * plain node and an instruction of a fused_elementwise program
 * (onnx_export_fused.c) are written by the same code. Their refusals name
 * e->who. */
#define EW_UNSUPPORTED(c, e, ...) fgo_fail(c, FG_UNIMPLEMENTED, "ONNX export: %s: " __VA_ARGS__)

static int e_unary(fgo_ctx *c, const fgo_ew *e, const char *type) {
  return done(fgo_emit1(c, e->id, type, e->in[0], e->out));
}

static int e_binary(fgo_ctx *c, const fgo_ew *e, const char *type) {
  return binary_to(c, e->id, type, e->in[0], e->in[1], e->out);
}

#define UNARY_WRITER(fn, type)                                                                     \
  static int fn(fgo_ctx *c, const fgo_ew *e) { return e_unary(c, e, type); }
#define BINARY_WRITER(fn, type)                                                                    \
  static int fn(fgo_ctx *c, const fgo_ew *e) { return e_binary(c, e, type); }

UNARY_WRITER(e_neg, "Neg")
UNARY_WRITER(e_exp, "Exp")
UNARY_WRITER(e_log, "Log")
UNARY_WRITER(e_sqrt, "Sqrt")
UNARY_WRITER(e_abs, "Abs")
UNARY_WRITER(e_tanh, "Tanh")
UNARY_WRITER(e_sigmoid, "Sigmoid")
UNARY_WRITER(e_relu, "Relu")
UNARY_WRITER(e_sign, "Sign")
UNARY_WRITER(e_reciprocal, "Reciprocal")
UNARY_WRITER(e_floor, "Floor")
UNARY_WRITER(e_ceil, "Ceil")
UNARY_WRITER(e_round, "Round")
UNARY_WRITER(e_erf, "Erf")
UNARY_WRITER(e_identity, "Identity")
/* The bool ops (logical_not/and/or): Not, And, Or, broadcasting alike. */
UNARY_WRITER(e_logical_not, "Not")
BINARY_WRITER(e_logical_and, "And")
BINARY_WRITER(e_logical_or, "Or")
BINARY_WRITER(e_add, "Add")
BINARY_WRITER(e_sub, "Sub")
BINARY_WRITER(e_mul, "Mul")
BINARY_WRITER(e_div, "Div")
BINARY_WRITER(e_equal, "Equal")
BINARY_WRITER(e_greater, "Greater")
BINARY_WRITER(e_less, "Less")

/* Pow, Max, Min and Clip take integers from opset 12; at 11, float only. */
static int ints_need_12(fgo_ctx *c, const fgo_ew *e, const char *type) {
  if (fgo_opset(c) >= 12 || fg_dtype_is_float(e->dtype)) return 0;
  return EW_UNSUPPORTED(c, e, "%s of %s needs opset 12 or later", e->who, type,
                        fg_dtype_name(e->dtype));
}

static int e_pow(fgo_ctx *c, const fgo_ew *e) {
  return ints_need_12(c, e, "Pow") != 0 ? -1 : e_binary(c, e, "Pow");
}

static int e_maximum(fgo_ctx *c, const fgo_ew *e) {
  return ints_need_12(c, e, "Max") != 0 ? -1 : e_binary(c, e, "Max");
}

static int e_minimum(fgo_ctx *c, const fgo_ew *e) {
  return ints_need_12(c, e, "Min") != 0 ? -1 : e_binary(c, e, "Min");
}

/* a `type` (a scalar v of e's dtype), into out (NULL: a new tensor); its
 * name. */
static const char *with_scalar(fgo_ctx *c, const fgo_ew *e, const char *type, const char *a,
                               double v, const char *out) {
  const char *k = fgo_const_scalar(c, e->id, "k", e->dtype, v);
  if (!out) out = fgo_tmp(c, e->id, type);
  return k && out && binary_to(c, e->id, type, a, k, out) == 0 ? out : NULL;
}

static int e_rsqrt(fgo_ctx *c, const fgo_ew *e) {
  const char *s = step(c, e->id, "Sqrt", e->in[0]);
  return s ? done(fgo_emit1(c, e->id, "Reciprocal", s, e->out)) : -1;
}

static int e_select(fgo_ctx *c, const fgo_ew *e) {
  return done(fgo_emit(c, e->id, "Where", e->in, 3, &e->out, 1));
}

static int e_leaky_relu(fgo_ctx *c, const fgo_ew *e) {
  return fgo_attr_float(c, fgo_emit1(c, e->id, "LeakyRelu", e->in[0], e->out), "alpha", e->attr[0]);
}

static int e_elu(fgo_ctx *c, const fgo_ew *e) {
  return fgo_attr_float(c, fgo_emit1(c, e->id, "Elu", e->in[0], e->out), "alpha", e->attr[0]);
}

/* torch's constants (ONNX's defaults are the same numbers in float). */
static int e_selu(fgo_ctx *c, const fgo_ew *e) {
  Onnx__NodeProto *n = fgo_emit1(c, e->id, "Selu", e->in[0], e->out);
  if (fgo_attr_float(c, n, "alpha", 1.6732632423543772848170429916717) != 0) return -1;
  return fgo_attr_float(c, n, "gamma", 1.0507009873554804934193349852946);
}

/* softplus(x, beta, threshold) = Softplus(beta x) / beta. Above the
 * threshold flowgraph returns x itself, which Softplus misses by at most
 * e^-threshold / beta: below f32's resolution of x there for torch's 20,
 * so small thresholds, where the two differ visibly, are refused. */
static int e_softplus(fgo_ctx *c, const fgo_ew *e) {
  double beta = e->attr[0], threshold = e->attr[1];
  if (threshold < 15)
    return EW_UNSUPPORTED(c, e,
                          "threshold %g: ONNX Softplus has no threshold, and below 15 "
                          "its values differ from x's above it",
                          e->who, threshold);
  if (beta == 1) return e_unary(c, e, "Softplus");
  const char *bx = with_scalar(c, e, "Mul", e->in[0], beta, NULL);
  const char *sp = bx ? step(c, e->id, "Softplus", bx) : NULL;
  return sp && with_scalar(c, e, "Div", sp, beta, e->out) ? 0 : -1;
}

/* x * f(x) with f a chain of unary ops. */
static int x_times(fgo_ctx *c, const fgo_ew *e, const char *const *chain, int n) {
  const char *t = e->in[0];
  for (int i = 0; i < n && t; i++)
    t = step(c, e->id, chain[i], t);
  return t ? binary_to(c, e->id, "Mul", e->in[0], t, e->out) : -1;
}

static int e_silu(fgo_ctx *c, const fgo_ew *e) {
  static const char *const chain[] = {"Sigmoid"};
  return x_times(c, e, chain, 1);
}

static int e_mish(fgo_ctx *c, const fgo_ew *e) {
  static const char *const chain[] = {"Softplus", "Tanh"};
  return x_times(c, e, chain, 2);
}

/* relu6(x + 3) / 6 as flowgraph computes it, with constants of x's dtype:
 * HardSigmoid's alpha is a float attribute, so 1/6 would be rounded to f32
 * (visible in f64) and x * alpha + beta rounds differently from the
 * division. */
static const char *hard_sigmoid(fgo_ctx *c, const fgo_ew *e, const char *out) {
  const char *p3 = with_scalar(c, e, "Add", e->in[0], 3, NULL);
  const char *clip[3] = {p3, fgo_const_scalar(c, e->id, "zero", e->dtype, 0),
                         fgo_const_scalar(c, e->id, "six", e->dtype, 6)};
  const char *r6 = fgo_tmp(c, e->id, "Clip");
  if (!clip[0] || !clip[1] || !clip[2] || !r6 || !fgo_emit(c, e->id, "Clip", clip, 3, &r6, 1))
    return NULL;
  return with_scalar(c, e, "Div", r6, 6, out);
}

static int e_hard_sigmoid(fgo_ctx *c, const fgo_ew *e) {
  return hard_sigmoid(c, e, e->out) ? 0 : -1;
}

/* HardSwish is opset 14; before it, x * hard_sigmoid(x). */
static int e_hard_swish(fgo_ctx *c, const fgo_ew *e) {
  if (fgo_opset(c) >= 14) return e_unary(c, e, "HardSwish");
  const char *hs = hard_sigmoid(c, e, NULL);
  return hs ? binary_to(c, e->id, "Mul", e->in[0], hs, e->out) : -1;
}

/* The exact form: x * (1 + erf(x / sqrt(2))) / 2 (Gelu is opset 20). */
static int e_gelu(fgo_ctx *c, const fgo_ew *e) {
  const char *x = e->in[0];
  const char *s = with_scalar(c, e, "Mul", x, 0.70710678118654752440, NULL);
  const char *er = s ? step(c, e->id, "Erf", s) : NULL;
  const char *p = er ? with_scalar(c, e, "Add", er, 1.0, NULL) : NULL;
  const char *xp = fgo_tmp(c, e->id, "Mul");
  if (!p || !xp || binary_to(c, e->id, "Mul", x, p, xp) != 0) return -1;
  return with_scalar(c, e, "Mul", xp, 0.5, e->out) ? 0 : -1;
}

/* The tanh form as flowgraph computes it, x / (1 + exp(-2 u)) with u =
 * sqrt(2 / pi) (x + 0.044715 x^3) (Gelu's approximate="tanh" is opset 20):
 * Mul(Mul(x, x), x), Mul k, Add x, Mul 2 sqrt(2 / pi), Neg, Exp, Add 1,
 * Div. */
static int e_gelu_tanh(fgo_ctx *c, const fgo_ew *e) {
  const char *x = e->in[0], *x2 = fgo_tmp(c, e->id, "Mul"), *x3 = fgo_tmp(c, e->id, "Mul");
  if (!x2 || !x3 || binary_to(c, e->id, "Mul", x, x, x2) != 0 ||
      binary_to(c, e->id, "Mul", x2, x, x3) != 0)
    return -1;
  const char *kx3 = with_scalar(c, e, "Mul", x3, 0.044715, NULL);
  const char *in = fgo_tmp(c, e->id, "Add");
  if (!kx3 || !in || binary_to(c, e->id, "Add", x, kx3, in) != 0) return -1;
  const char *u2 = with_scalar(c, e, "Mul", in, 1.5957691216057307117, NULL);
  const char *n = u2 ? step(c, e->id, "Neg", u2) : NULL;
  const char *ex = n ? step(c, e->id, "Exp", n) : NULL;
  const char *d = ex ? with_scalar(c, e, "Add", ex, 1.0, NULL) : NULL;
  return d ? binary_to(c, e->id, "Div", x, d, e->out) : -1;
}

static int e_clip(fgo_ctx *c, const fgo_ew *e) {
  if (ints_need_12(c, e, "Clip") != 0) return -1;
  const char *in[3] = {e->in[0], fgo_const_scalar(c, e->id, "min", e->dtype, e->attr[0]),
                       fgo_const_scalar(c, e->id, "max", e->dtype, e->attr[1])};
  if (!in[1] || !in[2]) return -1;
  return done(fgo_emit(c, e->id, "Clip", in, 3, &e->out, 1));
}

/* The element-wise ops, with their attributes as fgo_ew.attr takes them
 * (the order of the fused program's attributes) and the values a node
 * without them has. */
typedef struct ew_op {
  const char *op;
  fgo_ew_writer write;
  const char *attr[2];
  double dflt[2];
} ew_op;

/* An op without attributes. */
#define EW(name, fn)                                                                               \
  { .op = name, .write = fn }

static const ew_op ew_ops[] = {
    EW("add", e_add),
    EW("sub", e_sub),
    EW("mul", e_mul),
    EW("div", e_div),
    EW("pow", e_pow),
    EW("maximum", e_maximum),
    EW("minimum", e_minimum),
    EW("equal", e_equal),
    EW("greater", e_greater),
    EW("less", e_less),
    EW("select", e_select),
    EW("neg", e_neg),
    EW("exp", e_exp),
    EW("log", e_log),
    EW("sqrt", e_sqrt),
    EW("rsqrt", e_rsqrt),
    EW("abs", e_abs),
    EW("tanh", e_tanh),
    EW("sigmoid", e_sigmoid),
    EW("relu", e_relu),
    {"leaky_relu", e_leaky_relu, {"alpha", NULL}, {0.01, 0}},
    {"elu", e_elu, {"alpha", NULL}, {1.0, 0}},
    {"softplus", e_softplus, {"beta", "threshold"}, {1, 20}},
    EW("selu", e_selu),
    EW("silu", e_silu),
    EW("hard_sigmoid", e_hard_sigmoid),
    EW("hard_swish", e_hard_swish),
    EW("mish", e_mish),
    EW("sign", e_sign),
    EW("reciprocal", e_reciprocal),
    EW("floor", e_floor),
    EW("ceil", e_ceil),
    EW("round", e_round),
    {"clip", e_clip, {"min", "max"}, {0, 0}},
    EW("gelu", e_gelu),
    EW("gelu_tanh", e_gelu_tanh),
    EW("erf", e_erf),
    EW("identity", e_identity),
    EW("stop_gradient", e_identity),
    EW("logical_not", e_logical_not),
    EW("logical_and", e_logical_and),
    EW("logical_or", e_logical_or),
    {NULL, NULL, {NULL, NULL}, {0, 0}},
};

static const ew_op *ew_find(const char *op) {
  for (const ew_op *o = ew_ops; op && o->op; o++)
    if (strcmp(o->op, op) == 0) return o;
  return NULL;
}

fgo_ew_writer fgo_ew_of(const char *op) {
  const ew_op *o = ew_find(op);
  return o ? o->write : NULL;
}

/* A plain element-wise node: its inputs, output, x's dtype (constants
 * take it) and attributes (the defaults where absent). */
static int w_ew(fgo_ctx *c, int id) {
  const ew_op *o = ew_find(OP_NAME(c, id));
  if (!o) return -1;
  char who[400];
  snprintf(who, sizeof who, "node '%s' (%s)", NODE_NAME(c, id), o->op);
  fgo_ew e = {.id = id, .out = fgo_out(c, id, 0), .dtype = in_dtype(c, id, 0), .who = who};
  int n_in = fg_node_num_inputs(fgo_graph(c), id);
  for (int i = 0; i < n_in && i < 3; i++)
    if (!(e.in[i] = fgo_in(c, id, i))) return -1;
  for (int k = 0; k < 2; k++)
    e.attr[k] = o->attr[k] ? fgo_get_float(c, id, o->attr[k], o->dflt[k]) : 0;
  return e.out ? o->write(c, &e) : -1;
}
static int w_cast(fgo_ctx *c, int id) {
  Onnx__NodeProto *n = fgo_emit1(c, id, "Cast", fgo_in(c, id, 0), fgo_out(c, id, 0));
  return fgo_attr_int(c, n, "to", fgo_onnx_dtype((fg_dtype)fgo_get_int(c, id, "dtype", 0)));
}

/* A tensor of x's shape holding v: Shape, then ConstantOfShape. */
static int like_fill(fgo_ctx *c, int id, double v) {
  const char *s = step(c, id, "Shape", fgo_in(c, id, 0));
  Onnx__NodeProto *n = s ? fgo_emit1(c, id, "ConstantOfShape", s, fgo_out(c, id, 0)) : NULL;
  return fgo_attr_scalar(c, n, "value", in_dtype(c, id, 0), v);
}

static int w_zeros_like(fgo_ctx *c, int id) { return like_fill(c, id, 0); }
static int w_ones_like(fgo_ctx *c, int id) { return like_fill(c, id, 1); }

static int w_fill(fgo_ctx *c, int id) {
  int64_t dims[FG_MAX_RANK];
  int rank = fgo_get_ints(c, id, "shape", dims, FG_MAX_RANK);
  const char *shape = fgo_const_i64(c, id, "shape", dims, rank < 0 ? 0 : rank);
  Onnx__NodeProto *n = shape ? fgo_emit1(c, id, "ConstantOfShape", shape, fgo_out(c, id, 0)) : NULL;
  return fgo_attr_scalar(c, n, "value", (fg_dtype)fgo_get_int(c, id, "dtype", FG_F32),
                         fgo_get_float(c, id, "value", 0));
}

/* ---- linear algebra and shaping --------------------------------------------- */

const char *fgo_transpose_to(fgo_ctx *c, int id, const char *x, const int64_t *perm, int rank,
                             const char *out) {
  if (!out) out = fgo_tmp(c, id, "Transpose");
  Onnx__NodeProto *n = x && out ? fgo_emit1(c, id, "Transpose", x, out) : NULL;
  return fgo_attr_ints(c, n, "perm", perm, rank) == 0 ? out : NULL;
}

/* x with its last two dims swapped. */
static const char *swap_last(fgo_ctx *c, int id, int i) {
  int rank = in_rank(c, id, i);
  int64_t perm[FG_MAX_RANK];
  for (int d = 0; d < rank; d++)
    perm[d] = d;
  perm[rank - 2] = rank - 1, perm[rank - 1] = rank - 2;
  return fgo_transpose_to(c, id, fgo_in(c, id, i), perm, rank, NULL);
}

int fgo_matmul_to(fgo_ctx *c, int id, const char *out) {
  const char *a = fgo_get_int(c, id, "transpose_a", 0) ? swap_last(c, id, 0) : fgo_in(c, id, 0);
  const char *b = fgo_get_int(c, id, "transpose_b", 0) ? swap_last(c, id, 1) : fgo_in(c, id, 1);
  return a && b && out ? binary_to(c, id, "MatMul", a, b, out) : -1;
}

static int w_matmul(fgo_ctx *c, int id) { return fgo_matmul_to(c, id, fgo_out(c, id, 0)); }

/* ONNX Reshape reads a 0 as "copy x's dim" unless allowzero (opset 14). */
static int w_reshape(fgo_ctx *c, int id) {
  int64_t dims[FG_MAX_RANK];
  int rank = fgo_get_ints(c, id, "shape", dims, FG_MAX_RANK), zero = 0;
  for (int d = 0; d < rank; d++)
    zero |= dims[d] == 0;
  if (zero && fgo_opset(c) < 14)
    return UNSUPPORTED(c, id, "a 0 in the shape needs Reshape's allowzero (opset 14 and later)",
                       NODE_NAME(c, id), OP_NAME(c, id));
  const char *shape = fgo_const_i64(c, id, "shape", dims, rank < 0 ? 0 : rank);
  if (!shape) return -1;
  const char *in[2] = {fgo_in(c, id, 0), shape}, *out = fgo_out(c, id, 0);
  Onnx__NodeProto *n = fgo_emit(c, id, "Reshape", in, 2, &out, 1);
  return zero ? fgo_attr_int(c, n, "allowzero", 1) : done(n);
}

/* x and an i64 tensor input made from the node's ints attribute `attr`. */
static int with_ints_input(fgo_ctx *c, int id, const char *type, const char *attr) {
  int64_t v[64];
  int n = fgo_get_ints(c, id, attr, v, 64);
  const char *k = fgo_const_i64(c, id, attr, v, n < 0 ? 0 : n);
  return k ? binary_to(c, id, type, fgo_in(c, id, 0), k, fgo_out(c, id, 0)) : -1;
}

static int w_expand(fgo_ctx *c, int id) { return with_ints_input(c, id, "Expand", "shape"); }
static int w_tile(fgo_ctx *c, int id) { return with_ints_input(c, id, "Tile", "repeats"); }

/* Unsqueeze / Squeeze of `in` at axes into out: the axes are an input from
 * opset 13, an attribute before. */
static int axes_op(fgo_ctx *c, int id, const char *type, const char *in, const int64_t *axes, int n,
                   const char *out) {
  if (fgo_opset(c) < 13) return fgo_attr_ints(c, fgo_emit1(c, id, type, in, out), "axes", axes, n);
  const char *k = fgo_const_i64(c, id, "axes", axes, n);
  return k ? binary_to(c, id, type, in, k, out) : -1;
}

static int w_expand_dims(fgo_ctx *c, int id) {
  int64_t axes[FG_MAX_RANK];
  int n = fgo_get_ints(c, id, "axes", axes, FG_MAX_RANK);
  return axes_op(c, id, "Unsqueeze", fgo_in(c, id, 0), axes, n < 0 ? 0 : n, fgo_out(c, id, 0));
}

static int w_squeeze(fgo_ctx *c, int id) {
  int64_t axes[FG_MAX_RANK];
  int n = fgo_get_ints(c, id, "axes", axes, FG_MAX_RANK);
  if (n <= 0) return unary(c, id, "Squeeze"); /* every size-1 dim, as ONNX without axes */
  return axes_op(c, id, "Squeeze", fgo_in(c, id, 0), axes, n, fgo_out(c, id, 0));
}

static int w_flatten(fgo_ctx *c, int id) {
  Onnx__NodeProto *n = fgo_emit1(c, id, "Flatten", fgo_in(c, id, 0), fgo_out(c, id, 0));
  return fgo_attr_int(c, n, "axis", fgo_get_int(c, id, "axis", 1));
}

static int w_transpose(fgo_ctx *c, int id) {
  int64_t perm[FG_MAX_RANK];
  int n = fgo_get_ints(c, id, "perm", perm, FG_MAX_RANK);
  Onnx__NodeProto *p = fgo_emit1(c, id, "Transpose", fgo_in(c, id, 0), fgo_out(c, id, 0));
  return fgo_attr_ints(c, p, "perm", perm, n < 0 ? 0 : n);
}

static int w_concat(fgo_ctx *c, int id) {
  int n_in = fg_node_num_inputs(fgo_graph(c), id);
  const char *in[256];
  if (n_in > 256)
    return UNSUPPORTED(c, id, "%d inputs (the exporter writes at most 256)", NODE_NAME(c, id),
                       OP_NAME(c, id), n_in);
  for (int i = 0; i < n_in; i++)
    if (!(in[i] = fgo_in(c, id, i))) return -1;
  const char *out = fgo_out(c, id, 0);
  Onnx__NodeProto *n = fgo_emit(c, id, "Concat", in, n_in, &out, 1);
  return fgo_attr_int(c, n, "axis", fgo_get_int(c, id, "axis", 0));
}

/* stack: every input unsqueezed at the new axis, then concatenated. */
static int w_stack(fgo_ctx *c, int id) {
  int n_in = fg_node_num_inputs(fgo_graph(c), id);
  int64_t axis = fgo_get_int(c, id, "axis", 0);
  if (axis < 0) axis += in_rank(c, id, 0) + 1;
  const char *in[256];
  if (n_in > 256)
    return UNSUPPORTED(c, id, "%d inputs (the exporter writes at most 256)", NODE_NAME(c, id),
                       OP_NAME(c, id), n_in);
  for (int i = 0; i < n_in; i++) {
    in[i] = fgo_tmp(c, id, "Unsqueeze");
    if (!in[i] || axes_op(c, id, "Unsqueeze", fgo_in(c, id, i), &axis, 1, in[i]) != 0) return -1;
  }
  const char *out = fgo_out(c, id, 0);
  Onnx__NodeProto *n = fgo_emit(c, id, "Concat", in, n_in, &out, 1);
  return fgo_attr_int(c, n, "axis", axis);
}

/* begin and size per dim; size -1 runs to the end (INT64_MAX in ONNX). */
static int w_slice(fgo_ctx *c, int id) {
  int64_t begin[FG_MAX_RANK], size[FG_MAX_RANK], end[FG_MAX_RANK], axes[FG_MAX_RANK];
  int rank = fgo_get_ints(c, id, "begin", begin, FG_MAX_RANK);
  if (rank < 0 || fgo_get_ints(c, id, "size", size, FG_MAX_RANK) != rank) return -1;
  for (int d = 0; d < rank; d++) {
    end[d] = size[d] < 0 ? INT64_MAX : begin[d] + size[d];
    axes[d] = d;
  }
  const char *in[4] = {fgo_in(c, id, 0), fgo_const_i64(c, id, "starts", begin, rank),
                       fgo_const_i64(c, id, "ends", end, rank),
                       fgo_const_i64(c, id, "axes", axes, rank)};
  const char *out = fgo_out(c, id, 0);
  if (!in[1] || !in[2] || !in[3]) return -1;
  return done(fgo_emit(c, id, "Slice", in, 4, &out, 1));
}

/* Rows of params (axis 0; an "axis" attribute, should gather get one, is
 * carried over). */
static int w_gather(fgo_ctx *c, int id) {
  const char *in[2] = {fgo_in(c, id, 0), fgo_in(c, id, 1)}, *out = fgo_out(c, id, 0);
  Onnx__NodeProto *n = fgo_emit(c, id, "Gather", in, 2, &out, 1);
  return fgo_attr_int(c, n, "axis", fgo_get_int(c, id, "axis", 0));
}

/* OneHot(indices, depth, [off, on]) along a new last axis. */
static int w_one_hot(fgo_ctx *c, int id) {
  static const double off_on[2] = {0, 1};
  fg_dtype dt = (fg_dtype)fgo_get_int(c, id, "dtype", FG_F32);
  const char *in[3] = {
      fgo_in(c, id, 0),
      fgo_const_scalar(c, id, "depth", FG_I64, (double)fgo_get_int(c, id, "depth", 0)),
      fgo_const_vec(c, id, "values", dt, off_on, 2)};
  const char *out = fgo_out(c, id, 0);
  if (!in[1] || !in[2]) return -1;
  Onnx__NodeProto *n = fgo_emit(c, id, "OneHot", in, 3, &out, 1);
  return fgo_attr_int(c, n, "axis", -1);
}

static int w_pad(fgo_ctx *c, int id) {
  int64_t pads[2 * FG_MAX_RANK];
  int n = fgo_get_ints(c, id, "pads", pads, 2 * FG_MAX_RANK);
  const char *mode = "constant";
  fg_node_attr_string(fgo_graph(c), id, "mode", &mode);
  const char *in[3] = {
      fgo_in(c, id, 0), fgo_const_i64(c, id, "pads", pads, n < 0 ? 0 : n),
      fgo_const_scalar(c, id, "value", in_dtype(c, id, 0), fgo_get_float(c, id, "value", 0))};
  const char *out = fgo_out(c, id, 0);
  if (!in[1] || !in[2]) return -1;
  Onnx__NodeProto *p = fgo_emit(c, id, "Pad", in, 3, &out, 1);
  return fgo_attr_string(c, p, "mode", mode);
}

/* The sizes of the parts: the node's `sizes`, or its outputs' dims. */
static int w_split(fgo_ctx *c, int id) {
  const fg_graph *g = fgo_graph(c);
  int n_out = fg_node_num_outputs(g, id), rank = in_rank(c, id, 0);
  int64_t axis = fgo_get_int(c, id, "axis", 0), sizes[256];
  if (axis < 0) axis += rank;
  if (n_out > 256 || axis < 0 || axis >= rank)
    return UNSUPPORTED(c, id, "%d outputs along axis %lld", NODE_NAME(c, id), OP_NAME(c, id), n_out,
                       (long long)axis);
  const char *out[256];
  for (int k = 0; k < n_out; k++) {
    const fg_tinfo *t = fgo_info(c, (fg_output){id, k});
    sizes[k] = t ? t->dims[axis] : -1;
    if (sizes[k] < 0)
      return UNSUPPORTED(c, id, "output %d's size along axis %lld is unknown", NODE_NAME(c, id),
                         OP_NAME(c, id), k, (long long)axis);
    if (!(out[k] = fgo_out(c, id, k))) return -1;
  }
  /* The sizes are an input from opset 13, an attribute before. */
  const char *in[2] = {fgo_in(c, id, 0), NULL};
  if (fgo_opset(c) >= 13 && !(in[1] = fgo_const_i64(c, id, "split", sizes, n_out))) return -1;
  Onnx__NodeProto *n = fgo_emit(c, id, "Split", in, in[1] ? 2 : 1, out, n_out);
  if (!in[1] && fgo_attr_ints(c, n, "split", sizes, n_out) != 0) return -1;
  return fgo_attr_int(c, n, "axis", axis);
}

/* ---- reductions --------------------------------------------------------------- */

/* ReduceSum takes its axes as an input from opset 13 (the others from 18,
 * so attributes here); no axes means every axis in both forms. */
static int reduce(fgo_ctx *c, int id, const char *type, int axes_input) {
  int64_t axes[FG_MAX_RANK];
  int n = fgo_get_ints(c, id, "axes", axes, FG_MAX_RANK);
  const char *in[2] = {fgo_in(c, id, 0), NULL}, *out = fgo_out(c, id, 0);
  if (axes_input && n > 0 && !(in[1] = fgo_const_i64(c, id, "axes", axes, n))) return -1;
  Onnx__NodeProto *node = fgo_emit(c, id, type, in, in[1] ? 2 : 1, &out, 1);
  if (!axes_input && n > 0 && fgo_attr_ints(c, node, "axes", axes, n) != 0) return -1;
  return fgo_attr_int(c, node, "keepdims", fgo_get_int(c, id, "keepdims", 0));
}

static int w_reduce_sum(fgo_ctx *c, int id) {
  return reduce(c, id, "ReduceSum", fgo_opset(c) >= 13);
}
static int w_reduce_mean(fgo_ctx *c, int id) { return reduce(c, id, "ReduceMean", 0); }
static int w_reduce_max(fgo_ctx *c, int id) { return reduce(c, id, "ReduceMax", 0); }
static int w_reduce_min(fgo_ctx *c, int id) { return reduce(c, id, "ReduceMin", 0); }
static int w_reduce_prod(fgo_ctx *c, int id) { return reduce(c, id, "ReduceProd", 0); }
static int w_logsumexp(fgo_ctx *c, int id) { return reduce(c, id, "ReduceLogSumExp", 0); }

/* The first extreme index (select_last_index 0), the axis dropped. */
static int arg(fgo_ctx *c, int id, const char *type) {
  Onnx__NodeProto *n = fgo_emit1(c, id, type, fgo_in(c, id, 0), fgo_out(c, id, 0));
  if (fgo_attr_int(c, n, "axis", fgo_get_int(c, id, "axis", 0)) != 0) return -1;
  return fgo_attr_int(c, n, "keepdims", 0);
}

static int w_argmax(fgo_ctx *c, int id) { return arg(c, id, "ArgMax"); }
static int w_argmin(fgo_ctx *c, int id) { return arg(c, id, "ArgMin"); }

/* x with dims `axis` and the last swapped into out (NULL: a new tensor). */
static const char *swap_to_last(fgo_ctx *c, int id, const char *x, int rank, int axis,
                                const char *out) {
  int64_t perm[FG_MAX_RANK];
  for (int d = 0; d < rank; d++)
    perm[d] = d;
  perm[axis] = rank - 1, perm[rank - 1] = axis;
  return fgo_transpose_to(c, id, x, perm, rank, out);
}

/* Softmax over one axis from opset 13; before, over the flattened dims from
 * `axis` on, which is the same only for the last axis: another axis is
 * swapped to the end and back. */
static int softmax(fgo_ctx *c, int id, const char *type) {
  int rank = in_rank(c, id, 0);
  int64_t axis = fgo_get_int(c, id, "axis", -1);
  if (axis < 0) axis += rank;
  if (fgo_opset(c) >= 13 || axis == rank - 1) {
    Onnx__NodeProto *n = fgo_emit1(c, id, type, fgo_in(c, id, 0), fgo_out(c, id, 0));
    return fgo_attr_int(c, n, "axis", fgo_opset(c) >= 13 ? fgo_get_int(c, id, "axis", -1) : axis);
  }
  const char *t = swap_to_last(c, id, fgo_in(c, id, 0), rank, (int)axis, NULL);
  const char *sm = t ? fgo_tmp(c, id, type) : NULL;
  Onnx__NodeProto *n = sm ? fgo_emit1(c, id, type, t, sm) : NULL;
  if (fgo_attr_int(c, n, "axis", rank - 1) != 0) return -1;
  return swap_to_last(c, id, sm, rank, (int)axis, fgo_out(c, id, 0)) ? 0 : -1;
}

static int w_softmax(fgo_ctx *c, int id) { return softmax(c, id, "Softmax"); }
static int w_log_softmax(fgo_ctx *c, int id) { return softmax(c, id, "LogSoftmax"); }

/* The mean over rows of -log_softmax(logits)[n, labels[n]]. */
static int w_softmax_cross_entropy(fgo_ctx *c, int id) {
  if (fgo_opset(c) < 12)
    return UNSUPPORTED(c, id, "SoftmaxCrossEntropyLoss needs opset 12 or later", NODE_NAME(c, id),
                       OP_NAME(c, id));
  const char *in[2] = {fgo_in(c, id, 0), fgo_in(c, id, 1)}, *out = fgo_out(c, id, 0);
  Onnx__NodeProto *n = fgo_emit(c, id, "SoftmaxCrossEntropyLoss", in, 2, &out, 1);
  return fgo_attr_string(c, n, "reduction", "mean");
}

static int w_cumsum(fgo_ctx *c, int id) {
  const char *axis = fgo_const_scalar(c, id, "axis", FG_I64, (double)fgo_get_int(c, id, "axis", 0));
  const char *in[2] = {fgo_in(c, id, 0), axis}, *out = fgo_out(c, id, 0);
  Onnx__NodeProto *n = axis ? fgo_emit(c, id, "CumSum", in, 2, &out, 1) : NULL;
  if (fgo_attr_int(c, n, "exclusive", fgo_get_int(c, id, "exclusive", 0)) != 0) return -1;
  return fgo_attr_int(c, n, "reverse", fgo_get_int(c, id, "reverse", 0));
}

/* Values and i64 indices, best first, ties to the lower index (both). */
static int w_topk(fgo_ctx *c, int id) {
  int64_t k = fgo_get_int(c, id, "k", 0);
  const char *in[2] = {fgo_in(c, id, 0), fgo_const_i64(c, id, "k", &k, 1)};
  const char *out[2] = {fgo_out(c, id, 0), fgo_out(c, id, 1)};
  Onnx__NodeProto *n = in[1] ? fgo_emit(c, id, "TopK", in, 2, out, 2) : NULL;
  if (fgo_attr_int(c, n, "axis", fgo_get_int(c, id, "axis", -1)) != 0) return -1;
  if (fgo_attr_int(c, n, "largest", fgo_get_int(c, id, "largest", 1)) != 0) return -1;
  return fgo_attr_int(c, n, "sorted", 1);
}

/* ---- ops whose graph-only inputs are dropped ---------------------------------- */

static int w_after(fgo_ctx *c, int id) { return unary(c, id, "Identity"); }

/* x's bytes in like's run-time shape / broadcast to it. */
static int like_shape(fgo_ctx *c, int id, const char *type) {
  const char *s = step(c, id, "Shape", fgo_in(c, id, 1));
  return s ? binary_to(c, id, type, fgo_in(c, id, 0), s, fgo_out(c, id, 0)) : -1;
}

static int w_reshape_like(fgo_ctx *c, int id) { return like_shape(c, id, "Reshape"); }
static int w_broadcast_like(fgo_ctx *c, int id) { return like_shape(c, id, "Expand"); }

static int w_numel(fgo_ctx *c, int id) {
  const char *s = step(c, id, "Size", fgo_in(c, id, 0));
  Onnx__NodeProto *n = s ? fgo_emit1(c, id, "Cast", s, fgo_out(c, id, 0)) : NULL;
  return fgo_attr_int(c, n, "to", fgo_onnx_dtype((fg_dtype)fgo_get_int(c, id, "dtype", FG_I64)));
}

/* Writers of the CNN ops: onnx_export_nn.c. */
int fgo_w_max_pool2d(fgo_ctx *c, int id);
int fgo_w_avg_pool2d(fgo_ctx *c, int id);
int fgo_w_global_avg_pool(fgo_ctx *c, int id);
int fgo_w_global_max_pool(fgo_ctx *c, int id);
int fgo_w_adaptive_avg_pool2d(fgo_ctx *c, int id);
int fgo_w_resize(fgo_ctx *c, int id); /* onnx_export_resize.c */
int fgo_w_conv2d(fgo_ctx *c, int id);
int fgo_w_conv_transpose2d(fgo_ctx *c, int id);
int fgo_w_batch_norm(fgo_ctx *c, int id);
int fgo_w_dropout(fgo_ctx *c, int id);
int fgo_w_layer_norm(fgo_ctx *c, int id);
int fgo_w_group_norm(fgo_ctx *c, int id);
int fgo_w_instance_norm(fgo_ctx *c, int id);
/* Writers of the passes' fused ops: onnx_export_fused.c. */
int fgo_w_fused_matmul(fgo_ctx *c, int id);
int fgo_w_permuted_matmul(fgo_ctx *c, int id);
int fgo_w_fused_conv(fgo_ctx *c, int id);
int fgo_w_fused_elementwise(fgo_ctx *c, int id);

const fgo_op fgo_ops[] = {
    {"matmul", w_matmul, 0},
    {"reshape", w_reshape, 0},
    {"transpose", w_transpose, 0},
    {"concat", w_concat, 0},
    {"slice", w_slice, 0},
    {"gather", w_gather, 0},
    {"one_hot", w_one_hot, 0},
    {"cast", w_cast, 0},
    {"add", w_ew, 0},
    {"sub", w_ew, 0},
    {"mul", w_ew, 0},
    {"div", w_ew, 0},
    {"pow", w_ew, 0},
    {"maximum", w_ew, 0},
    {"minimum", w_ew, 0},
    {"equal", w_ew, 0},
    {"greater", w_ew, 0},
    {"less", w_ew, 0},
    {"select", w_ew, 0},
    {"neg", w_ew, 0},
    {"exp", w_ew, 0},
    {"log", w_ew, 0},
    {"sqrt", w_ew, 0},
    {"rsqrt", w_ew, 0},
    {"abs", w_ew, 0},
    {"tanh", w_ew, 0},
    {"sigmoid", w_ew, 0},
    {"relu", w_ew, 0},
    {"leaky_relu", w_ew, 0},
    {"elu", w_ew, 0},
    {"softplus", w_ew, 0},
    {"selu", w_ew, 0},
    {"silu", w_ew, 0},
    {"hard_sigmoid", w_ew, 0},
    {"hard_swish", w_ew, 0},
    {"mish", w_ew, 0},
    {"sign", w_ew, 0},
    {"reciprocal", w_ew, 0},
    {"floor", w_ew, 0},
    {"ceil", w_ew, 0},
    {"round", w_ew, 0},
    {"clip", w_ew, 0},
    {"gelu", w_ew, 0},
    {"gelu_tanh", w_ew, 0},
    {"erf", w_ew, 0},
    {"identity", w_ew, 0},
    {"logical_not", w_ew, 0},
    {"logical_and", w_ew, 0},
    {"logical_or", w_ew, 0},
    {"stop_gradient", w_ew, 0},
    {"zeros_like", w_zeros_like, 0},
    {"ones_like", w_ones_like, 0},
    {"fill", w_fill, 0},
    {"reduce_sum", w_reduce_sum, 0},
    {"reduce_mean", w_reduce_mean, 0},
    {"reduce_max", w_reduce_max, 0},
    {"reduce_min", w_reduce_min, 0},
    {"reduce_prod", w_reduce_prod, 0},
    {"logsumexp", w_logsumexp, 0},
    {"argmax", w_argmax, 0},
    {"argmin", w_argmin, 0},
    {"softmax", w_softmax, 0},
    {"log_softmax", w_log_softmax, 0},
    {"softmax_cross_entropy", w_softmax_cross_entropy, 0},
    {"cumsum", w_cumsum, 0},
    {"topk", w_topk, 0},
    {"expand_dims", w_expand_dims, 0},
    {"squeeze", w_squeeze, 0},
    {"flatten", w_flatten, 0},
    {"expand", w_expand, 0},
    {"tile", w_tile, 0},
    {"pad", w_pad, 0},
    {"split", w_split, 0},
    {"stack", w_stack, 0},
    {"after", w_after, 0x1u},
    {"reshape_like", w_reshape_like, 0},
    {"broadcast_like", w_broadcast_like, 0},
    {"numel", w_numel, 0},
    {"max_pool2d", fgo_w_max_pool2d, 0},
    {"avg_pool2d", fgo_w_avg_pool2d, 0},
    {"global_avg_pool", fgo_w_global_avg_pool, 0},
    {"global_max_pool", fgo_w_global_max_pool, 0},
    {"adaptive_avg_pool2d", fgo_w_adaptive_avg_pool2d, 0},
    {"resize_nearest", fgo_w_resize, 0},
    {"resize_linear", fgo_w_resize, 0},
    {"conv2d", fgo_w_conv2d, 0},
    {"conv_transpose2d", fgo_w_conv_transpose2d, 0},
    /* The training input is read by the writer, not followed. */
    {"batch_norm", fgo_w_batch_norm, 0x1fu},
    /* In inference it is batch_norm: the running statistics, no collective. */
    {"sync_batch_norm", fgo_w_batch_norm, 0x1fu},
    {"dropout", fgo_w_dropout, 0x1u},
    {"layer_norm", fgo_w_layer_norm, 0},
    {"group_norm", fgo_w_group_norm, 0},
    {"instance_norm", fgo_w_instance_norm, 0},
    {"fused_matmul", fgo_w_fused_matmul, 0},
    {"permuted_matmul", fgo_w_permuted_matmul, 0},
    {"fused_conv2d", fgo_w_fused_conv, 0},
    {"fused_conv2d_add", fgo_w_fused_conv, 0},
    {"fused_elementwise", fgo_w_fused_elementwise, 0},
    {NULL, NULL, 0}};
