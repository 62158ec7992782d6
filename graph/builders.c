/* The typed builders of include/flowgraph/graph.h: each packs its arguments
 * into attributes named as in graph/op_table.h and calls fg_op(), which
 * checks inputs, runs shape inference and appends the node. Checking values
 * is left to inference, so a graph loaded from a file and one built here
 * meet exactly the same rules. */
#include <stdarg.h>
#include <stdio.h>

#include "graph/graph_internal.h"

/* Attributes being built; `bad` remembers a failed setter so the builder
 * reports one out-of-memory error instead of checking every call. */
typedef struct attrs_b {
  fg_attrs *a;
  int bad;
} attrs_b;

static attrs_b ab_new(void) {
  attrs_b b = {fg_attrs_new(), 0};
  b.bad = b.a == NULL;
  return b;
}

static void ab_int(attrs_b *b, const char *name, int64_t v) {
  if (fg_attrs_set_int(b->a, name, v) != 0) b->bad = 1;
}

static void ab_float(attrs_b *b, const char *name, double v) {
  if (fg_attrs_set_float(b->a, name, v) != 0) b->bad = 1;
}

static void ab_ints(attrs_b *b, const char *name, const int64_t *v, int n) {
  if (fg_attrs_set_ints(b->a, name, v, n) != 0) b->bad = 1;
}

static void ab_tensor(attrs_b *b, const char *name, const fg_tensor *t) {
  if (fg_attrs_set_tensor(b->a, name, t) != 0) b->bad = 1;
}

/* A nothing-to-do builder: no graph, or the graph already failed. */
static int skip(fg_graph *g) { return !g || fg_graph_failed(g); }

/* Reports a caller error found before a node exists (so no node name). */
static fg_output refuse(fg_graph *g, fg_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static fg_output refuse(fg_graph *g, fg_code code, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (g && !fg_graph_failed(g)) fg_graph_fail(g, code, "%s", msg);
  return FG_NO_OUTPUT;
}

/* Calls fg_op with the built attributes (NULL: none) and frees them. */
static fg_output finish(fg_graph *g, const char *op, const char *name, const fg_output *in, int n,
                        attrs_b *b) {
  fg_output o;
  if (b && b->bad)
    o = refuse(g, FG_RESOURCE_EXHAUSTED, "%s: out of memory building attributes", op);
  else
    o = fg_op(g, op, name, in, n, b ? b->a : NULL);
  if (b) fg_attrs_free(b->a);
  return o;
}

/* How a builder error names its node: "node 'x' (placeholder)" when the
 * caller gave a name, else just the op. */
static const char *who(const char *op, const char *name, char *buf, size_t size) {
  if (name)
    snprintf(buf, size, "node '%.200s' (%s)", name, op);
  else
    snprintf(buf, size, "%s", op);
  return buf;
}

/* rank/dims pairs from the caller: a negative rank or NULL dims are caller
 * errors (invalid argument); ranks above the maximum go on to inference,
 * which names the node. */
static int bad_dims(fg_graph *g, const char *op, const char *name, const char *what, int rank,
                    const int64_t *dims) {
  char w[256];
  if (rank < 0) {
    refuse(g, FG_INVALID_ARGUMENT, "%s: %s rank %d is negative", who(op, name, w, sizeof w), what,
           rank);
    return 1;
  }
  if (rank > 0 && !dims) {
    refuse(g, FG_INVALID_ARGUMENT, "%s: %s is NULL with rank %d", who(op, name, w, sizeof w), what,
           rank);
    return 1;
  }
  return 0;
}

/* ---- sources ------------------------------------------------------------ */

fg_output fg_placeholder(fg_graph *g, const char *name, fg_dtype dtype, int rank,
                         const int64_t *dims) {
  if (skip(g) || bad_dims(g, "placeholder", name, "dims", rank, dims)) return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  ab_int(&b, "dtype", dtype);
  ab_ints(&b, "shape", dims, rank);
  return finish(g, "placeholder", name, NULL, 0, &b);
}

/* constant and variable: a source holding its tensor as attribute "value";
 * `what` names the argument in the NULL message. */
static fg_output tensor_source(fg_graph *g, const char *op, const char *name, const char *what,
                               const fg_tensor *value) {
  if (skip(g)) return FG_NO_OUTPUT;
  char w[256];
  if (!value)
    return refuse(g, FG_INVALID_ARGUMENT, "%s: %s is NULL", who(op, name, w, sizeof w), what);
  attrs_b b = ab_new();
  ab_tensor(&b, "value", value);
  return finish(g, op, name, NULL, 0, &b);
}

fg_output fg_source_take(fg_graph *g, const char *name, fg_tensor *value, int variable) {
  const char *op = variable ? "variable" : "constant";
  if (skip(g) || !value) {
    fg_tensor_free(value);
    return skip(g) ? FG_NO_OUTPUT : tensor_source(g, op, name, "value", NULL);
  }
  attrs_b b = ab_new();
  if (!b.bad && fg_attrs_take_tensor(b.a, "value", value) != 0) b.bad = 1;
  if (b.bad) fg_tensor_free(value); /* not taken */
  fg_output o = b.bad
                    ? refuse(g, FG_RESOURCE_EXHAUSTED, "%s: out of memory building attributes", op)
                    : fg_op_move(g, op, name, NULL, 0, b.a);
  fg_attrs_free(b.a); /* the value too, when the node was not made */
  return o;
}

fg_output fg_constant(fg_graph *g, const char *name, const fg_tensor *value) {
  return tensor_source(g, "constant", name, "value", value);
}

fg_output fg_scalar(fg_graph *g, fg_dtype dtype, double value) {
  if (skip(g)) return FG_NO_OUTPUT;
  /* Converting an out-of-range double to an integer is undefined in C. */
  if ((dtype == FG_I32 && !(value > -2147483649.0 && value < 2147483648.0)) ||
      (dtype == FG_I64 && !(value >= -9223372036854775808.0 && value < 9223372036854775808.0)))
    return refuse(g, FG_INVALID_ARGUMENT, "scalar: value %g does not fit in %s", value,
                  fg_dtype_name(dtype));
  fg_status *st = fg_status_new();
  if (!st) return refuse(g, FG_RESOURCE_EXHAUSTED, "scalar: out of memory");
  fg_tensor *t = fg_tensor_new(dtype, 0, NULL, st);
  if (!t) {
    fg_code code = fg_status_code(st);
    refuse(g, code == FG_OK ? FG_RESOURCE_EXHAUSTED : code, "scalar: %s", fg_status_message(st));
    fg_status_free(st);
    return FG_NO_OUTPUT;
  }
  fg_status_free(st);
  void *p = fg_tensor_data(t);
  switch (dtype) {
  case FG_F32: *(float *)p = (float)value; break;
  case FG_F64: *(double *)p = value; break;
  case FG_I32: *(int32_t *)p = (int32_t)value; break;
  case FG_I64: *(int64_t *)p = (int64_t)value; break;
  case FG_BOOL: *(uint8_t *)p = value != 0.0; break;
  default: break; /* unreachable: fg_tensor_new refuses unknown dtypes */
  }
  fg_output o = fg_constant(g, NULL, t);
  fg_tensor_free(t);
  return o;
}

fg_output fg_variable(fg_graph *g, const char *name, const fg_tensor *initial) {
  return tensor_source(g, "variable", name, "initial value", initial);
}

fg_output fg_fill(fg_graph *g, fg_dtype dtype, int rank, const int64_t *dims, double value) {
  if (skip(g) || bad_dims(g, "fill", NULL, "dims", rank, dims)) return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  ab_int(&b, "dtype", dtype);
  ab_ints(&b, "shape", dims, rank);
  ab_float(&b, "value", value);
  return finish(g, "fill", NULL, NULL, 0, &b);
}

static fg_output random_op(fg_graph *g, const char *op, fg_dtype dtype, int rank,
                           const int64_t *dims, const char *a, double va, const char *b, double vb,
                           int64_t seed) {
  if (skip(g) || bad_dims(g, op, NULL, "dims", rank, dims)) return FG_NO_OUTPUT;
  attrs_b ab = ab_new();
  ab_int(&ab, "dtype", dtype);
  ab_ints(&ab, "shape", dims, rank);
  ab_int(&ab, "seed", seed);
  ab_float(&ab, a, va);
  ab_float(&ab, b, vb);
  return finish(g, op, NULL, NULL, 0, &ab);
}

fg_output fg_random_uniform(fg_graph *g, fg_dtype dtype, int rank, const int64_t *dims, double low,
                            double high, int64_t seed) {
  return random_op(g, "random_uniform", dtype, rank, dims, "low", low, "high", high, seed);
}

fg_output fg_random_normal(fg_graph *g, fg_dtype dtype, int rank, const int64_t *dims, double mean,
                           double stddev, int64_t seed) {
  return random_op(g, "random_normal", dtype, rank, dims, "mean", mean, "stddev", stddev, seed);
}

fg_output fg_truncated_normal(fg_graph *g, fg_dtype dtype, int rank, const int64_t *dims,
                              double mean, double stddev, int64_t seed) {
  return random_op(g, "truncated_normal", dtype, rank, dims, "mean", mean, "stddev", stddev, seed);
}

/* ---- linear algebra and shaping ----------------------------------------- */

fg_output fg_matmul(fg_graph *g, fg_output a, fg_output b_, int transpose_a, int transpose_b) {
  if (skip(g)) return FG_NO_OUTPUT;
  fg_output in[2] = {a, b_};
  attrs_b b = ab_new();
  /* C truth values: any non-zero means transposed. */
  ab_int(&b, "transpose_a", transpose_a != 0);
  ab_int(&b, "transpose_b", transpose_b != 0);
  return finish(g, "matmul", NULL, in, 2, &b);
}

/* A one-input op whose one attribute is the int `attr`. */
static fg_output with_int(fg_graph *g, const char *op, fg_output x, const char *attr, int64_t v) {
  if (skip(g)) return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  ab_int(&b, attr, v);
  return finish(g, op, NULL, &x, 1, &b);
}

/* A one-input op whose one attribute `attr` is the caller's list `arg`. */
static fg_output with_ints(fg_graph *g, const char *op, fg_output x, const char *arg,
                           const char *attr, int rank, const int64_t *v) {
  if (skip(g) || bad_dims(g, op, NULL, arg, rank, v)) return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  ab_ints(&b, attr, v, rank);
  return finish(g, op, NULL, &x, 1, &b);
}

fg_output fg_reshape(fg_graph *g, fg_output x, int rank, const int64_t *dims) {
  return with_ints(g, "reshape", x, "dims", "shape", rank, dims);
}

fg_output fg_transpose(fg_graph *g, fg_output x, int rank, const int64_t *perm) {
  return with_ints(g, "transpose", x, "perm", "perm", rank, perm);
}

fg_output fg_concat(fg_graph *g, const fg_output *xs, int n, int axis) {
  if (skip(g)) return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  ab_int(&b, "axis", axis);
  return finish(g, "concat", NULL, xs, n, &b);
}

fg_output fg_slice(fg_graph *g, fg_output x, int rank, const int64_t *begin, const int64_t *size) {
  if (skip(g) || bad_dims(g, "slice", NULL, "begin", rank, begin) ||
      bad_dims(g, "slice", NULL, "size", rank, size))
    return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  ab_ints(&b, "begin", begin, rank);
  ab_ints(&b, "size", size, rank);
  return finish(g, "slice", NULL, &x, 1, &b);
}

fg_output fg_gather(fg_graph *g, fg_output params, fg_output indices) {
  fg_output in[2] = {params, indices};
  return finish(g, "gather", NULL, in, 2, NULL);
}

fg_output fg_one_hot(fg_graph *g, fg_output indices, int64_t depth, fg_dtype dtype) {
  if (skip(g)) return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  ab_int(&b, "depth", depth);
  ab_int(&b, "dtype", dtype);
  return finish(g, "one_hot", NULL, &indices, 1, &b);
}

fg_output fg_cast(fg_graph *g, fg_output x, fg_dtype dtype) {
  return with_int(g, "cast", x, "dtype", dtype);
}

/* ---- binary and unary: no attributes ------------------------------------ */

static fg_output binary(fg_graph *g, const char *op, fg_output a, fg_output b) {
  fg_output in[2] = {a, b};
  return finish(g, op, NULL, in, 2, NULL);
}

fg_output fg_add(fg_graph *g, fg_output a, fg_output b) { return binary(g, "add", a, b); }
fg_output fg_sub(fg_graph *g, fg_output a, fg_output b) { return binary(g, "sub", a, b); }
fg_output fg_mul(fg_graph *g, fg_output a, fg_output b) { return binary(g, "mul", a, b); }
fg_output fg_div(fg_graph *g, fg_output a, fg_output b) { return binary(g, "div", a, b); }
fg_output fg_pow(fg_graph *g, fg_output a, fg_output b) { return binary(g, "pow", a, b); }
fg_output fg_maximum(fg_graph *g, fg_output a, fg_output b) { return binary(g, "maximum", a, b); }
fg_output fg_minimum(fg_graph *g, fg_output a, fg_output b) { return binary(g, "minimum", a, b); }
fg_output fg_equal(fg_graph *g, fg_output a, fg_output b) { return binary(g, "equal", a, b); }
fg_output fg_greater(fg_graph *g, fg_output a, fg_output b) { return binary(g, "greater", a, b); }
fg_output fg_less(fg_graph *g, fg_output a, fg_output b) { return binary(g, "less", a, b); }

fg_output fg_select(fg_graph *g, fg_output cond, fg_output a, fg_output b) {
  fg_output in[3] = {cond, a, b};
  return finish(g, "select", NULL, in, 3, NULL);
}

static fg_output unary(fg_graph *g, const char *op, fg_output x) {
  return finish(g, op, NULL, &x, 1, NULL);
}

fg_output fg_neg(fg_graph *g, fg_output x) { return unary(g, "neg", x); }
fg_output fg_exp(fg_graph *g, fg_output x) { return unary(g, "exp", x); }
fg_output fg_log(fg_graph *g, fg_output x) { return unary(g, "log", x); }
fg_output fg_sqrt(fg_graph *g, fg_output x) { return unary(g, "sqrt", x); }
fg_output fg_rsqrt(fg_graph *g, fg_output x) { return unary(g, "rsqrt", x); }
fg_output fg_abs(fg_graph *g, fg_output x) { return unary(g, "abs", x); }
fg_output fg_tanh(fg_graph *g, fg_output x) { return unary(g, "tanh", x); }
fg_output fg_sigmoid(fg_graph *g, fg_output x) { return unary(g, "sigmoid", x); }
fg_output fg_relu(fg_graph *g, fg_output x) { return unary(g, "relu", x); }
fg_output fg_gelu(fg_graph *g, fg_output x) { return unary(g, "gelu", x); }
fg_output fg_gelu_tanh(fg_graph *g, fg_output x) { return unary(g, "gelu_tanh", x); }
fg_output fg_identity(fg_graph *g, fg_output x) { return unary(g, "identity", x); }
fg_output fg_stop_gradient(fg_graph *g, fg_output x) { return unary(g, "stop_gradient", x); }
fg_output fg_zeros_like(fg_graph *g, fg_output x) { return unary(g, "zeros_like", x); }
fg_output fg_ones_like(fg_graph *g, fg_output x) { return unary(g, "ones_like", x); }

/* A one-input op with float attributes a0 = v0 and, when a1 is not NULL,
 * a1 = v1. */
static fg_output with_floats(fg_graph *g, const char *op, fg_output x, const char *a0, double v0,
                             const char *a1, double v1) {
  if (skip(g)) return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  ab_float(&b, a0, v0);
  if (a1) ab_float(&b, a1, v1);
  return finish(g, op, NULL, &x, 1, &b);
}

fg_output fg_leaky_relu(fg_graph *g, fg_output x, double alpha) {
  return with_floats(g, "leaky_relu", x, "alpha", alpha, NULL, 0);
}
fg_output fg_elu(fg_graph *g, fg_output x, double alpha) {
  return with_floats(g, "elu", x, "alpha", alpha, NULL, 0);
}
fg_output fg_softplus(fg_graph *g, fg_output x, double beta, double threshold) {
  return with_floats(g, "softplus", x, "beta", beta, "threshold", threshold);
}
fg_output fg_selu(fg_graph *g, fg_output x) { return unary(g, "selu", x); }
fg_output fg_silu(fg_graph *g, fg_output x) { return unary(g, "silu", x); }
fg_output fg_hard_sigmoid(fg_graph *g, fg_output x) { return unary(g, "hard_sigmoid", x); }
fg_output fg_hard_swish(fg_graph *g, fg_output x) { return unary(g, "hard_swish", x); }
fg_output fg_mish(fg_graph *g, fg_output x) { return unary(g, "mish", x); }
fg_output fg_sign(fg_graph *g, fg_output x) { return unary(g, "sign", x); }
fg_output fg_reciprocal(fg_graph *g, fg_output x) { return unary(g, "reciprocal", x); }
fg_output fg_floor(fg_graph *g, fg_output x) { return unary(g, "floor", x); }
fg_output fg_ceil(fg_graph *g, fg_output x) { return unary(g, "ceil", x); }
fg_output fg_round(fg_graph *g, fg_output x) { return unary(g, "round", x); }

fg_output fg_clip(fg_graph *g, fg_output x, double min, double max) {
  return with_floats(g, "clip", x, "min", min, "max", max);
}

/* ---- reductions --------------------------------------------------------- */

static fg_output reduce(fg_graph *g, const char *op, fg_output x, const int64_t *axes, int n_axes,
                        int keepdims) {
  if (skip(g) || bad_dims(g, op, NULL, "axes", n_axes, axes)) return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  if (n_axes > 0) ab_ints(&b, "axes", axes, n_axes); /* absent: all axes */
  ab_int(&b, "keepdims", keepdims != 0);
  return finish(g, op, NULL, &x, 1, &b);
}

/* fg_reduce_sum, ..., fg_logsumexp (flowgraph/graph.h): one signature. */
#define REDUCE_BUILDER(op)                                                                         \
  fg_output fg_##op(fg_graph *g, fg_output x, const int64_t *axes, int n_axes, int keepdims) {     \
    return reduce(g, #op, x, axes, n_axes, keepdims);                                              \
  }
REDUCE_BUILDER(reduce_sum)
REDUCE_BUILDER(reduce_mean)
REDUCE_BUILDER(reduce_max)
REDUCE_BUILDER(reduce_min)
REDUCE_BUILDER(reduce_prod)
REDUCE_BUILDER(logsumexp)

fg_output fg_argmax(fg_graph *g, fg_output x, int axis) {
  return with_int(g, "argmax", x, "axis", axis);
}
fg_output fg_argmin(fg_graph *g, fg_output x, int axis) {
  return with_int(g, "argmin", x, "axis", axis);
}

fg_output fg_cumsum(fg_graph *g, fg_output x, int axis, int exclusive, int reverse) {
  if (skip(g)) return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  ab_int(&b, "axis", axis);
  ab_int(&b, "exclusive", exclusive != 0);
  ab_int(&b, "reverse", reverse != 0);
  return finish(g, "cumsum", NULL, &x, 1, &b);
}

fg_output fg_topk(fg_graph *g, fg_output x, int64_t k, int axis, int largest, int sorted) {
  if (skip(g)) return FG_NO_OUTPUT;
  attrs_b b = ab_new();
  ab_int(&b, "k", k);
  ab_int(&b, "axis", axis);
  ab_int(&b, "largest", largest != 0);
  ab_int(&b, "sorted", sorted != 0);
  return finish(g, "topk", NULL, &x, 1, &b);
}

fg_output fg_topk_grad(fg_graph *g, fg_output dy, fg_output indices, fg_output like, int axis) {
  if (skip(g)) return FG_NO_OUTPUT;
  fg_output in[3] = {dy, indices, like};
  attrs_b b = ab_new();
  ab_int(&b, "axis", axis);
  return finish(g, "topk_grad", NULL, in, 3, &b);
}

/* ---- softmax family and state ------------------------------------------- */

fg_output fg_softmax(fg_graph *g, fg_output x, int axis) {
  return with_int(g, "softmax", x, "axis", axis);
}
fg_output fg_log_softmax(fg_graph *g, fg_output x, int axis) {
  return with_int(g, "log_softmax", x, "axis", axis);
}

fg_output fg_softmax_cross_entropy(fg_graph *g, fg_output logits, fg_output labels) {
  fg_output in[2] = {logits, labels};
  return finish(g, "softmax_cross_entropy", NULL, in, 2, NULL);
}

fg_output fg_assign(fg_graph *g, fg_output variable, fg_output value) {
  fg_output in[2] = {variable, value};
  return finish(g, "assign", NULL, in, 2, NULL);
}
