/* ONNX element-wise and logic ops onto flowgraph's (fgx_ops_math; the
 * reductions are in onnx_math_reduce.c, the folding of values known at
 * import in onnx_math_fold.c).
 *
 * Broadcasting: from opset 7 every binary op here broadcasts NumPy-style
 * ("multidirectional"), as flowgraph's do; Min, Max, Sum and Mean take one
 * or more inputs and broadcast all of them (opset 8; opset 7's versions
 * required equal shapes, a special case). Shapes that do not broadcast are
 * refused here, naming the node and both shapes, before any node is made.
 *
 * Dtypes: ONNX gives both operands one type, as flowgraph wants, except
 * Pow (opset 12: the exponent may have another numeric type, the output
 * has the base's) and the exponent is cast to the base's type; an integer
 * base is raised in f64 and cast back (exact while the result fits in 53
 * bits). Integer Div truncates toward zero in ONNX and in flowgraph alike.
 *
 * Ops without a flowgraph op of their own are composed: Clip's one-sided
 * or integer bounds as maximum/minimum, GreaterOrEqual as greater or equal
 * (not "not less", which would be true for NaN), Xor as not equal on bool,
 * Mean as the sum over the count. Erf, Sigmoid and Tanh belong to the nn
 * mappers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "schema/onnx/onnx_math.h"

/* ---- shared helpers ------------------------------------------------------ */

int onnx_math_finish(fgx_ctx *c, const fgx_node *n, fg_output o) {
  if (o.node >= 0) return fgx_set_output(c, n, 0, o);
  fg_status *st = fg_status_new();
  fg_code code = fg_graph_status(fgx_graph(c), st);
  int rc = fgx_fail(c, n, code == FG_OK ? FG_INTERNAL : code, "%s",
                    st ? fg_status_message(st) : "out of memory building the node");
  fg_status_free(st);
  return rc;
}

/* "[2, ?, 3]": a shape as error messages print it. */
static const char *shape_str(int rank, const int64_t *dims, char *buf, size_t size) {
  size_t at = 0;
  at += (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < rank && at < size; i++) {
    if (dims[i] < 0)
      at += (size_t)snprintf(buf + at, size - at, "%s?", i ? ", " : "");
    else
      at += (size_t)snprintf(buf + at, size - at, "%s%lld", i ? ", " : "", (long long)dims[i]);
  }
  if (at < size) snprintf(buf + at, size - at, "]");
  return buf;
}

int onnx_math_check_bcast(fgx_ctx *c, const fgx_node *n, const int *in, int k) {
  int64_t acc[FGX_MAX_DIMS] = {0}, dims[FGX_MAX_DIMS];
  int racc = 0, first = -1;
  for (int t = 0; t < k; t++) {
    fg_dtype dt;
    int r;
    if (!fgx_has_input(n, in[t])) continue;
    if (fgx_input_info(c, n, in[t], &dt, &r, dims) != 0) return -1;
    if (first < 0) {
      first = in[t];
      racc = r;
      memcpy(acc, dims, (size_t)r * sizeof dims[0]);
      continue;
    }
    const int ro = r > racc ? r : racc;
    int64_t out[FGX_MAX_DIMS];
    for (int i = 0; i < ro; i++) {
      const int ia = i - (ro - racc), ib = i - (ro - r);
      const int64_t a = ia >= 0 ? acc[ia] : 1, b = ib >= 0 ? dims[ib] : 1;
      if (a >= 0 && b >= 0 && a != b && a != 1 && b != 1) {
        char s1[160], s2[160];
        if (k == 2)
          return fgx_fail(c, n, FG_INVALID_GRAPH,
                          "input %d shape %s and input %d shape %s do not broadcast (dim %d: "
                          "%lld vs %lld)",
                          first, shape_str(racc, acc, s1, sizeof s1), in[t],
                          shape_str(r, dims, s2, sizeof s2), i, (long long)a, (long long)b);
        return fgx_fail(c, n, FG_INVALID_GRAPH,
                        "input %d shape %s does not broadcast with shape %s of the inputs "
                        "before it (dim %d: %lld vs %lld)",
                        in[t], shape_str(r, dims, s2, sizeof s2),
                        shape_str(racc, acc, s1, sizeof s1), i, (long long)b, (long long)a);
      }
      out[i] = a == 1 ? b : b == 1 ? a : a >= 0 ? a : b;
    }
    racc = ro;
    memcpy(acc, out, (size_t)ro * sizeof out[0]);
  }
  return 0;
}

/* Inputs 0..k-1 as graph values; -1 when one failed (fgx_input has said
 * why, naming the node). */
static int inputs(fgx_ctx *c, const fgx_node *n, int k, fg_output *o) {
  for (int i = 0; i < k; i++) {
    o[i] = fgx_input(c, n, i);
    if (o[i].node < 0) return -1;
  }
  return 0;
}

static int input_dtype(fgx_ctx *c, const fgx_node *n, int i, fg_dtype *dt) {
  int rank;
  int64_t dims[FGX_MAX_DIMS];
  return fgx_input_info(c, n, i, dt, &rank, dims);
}

static int is_int(fg_dtype dt) { return dt == FG_I32 || dt == FG_I64; }

/* ---- unary ------------------------------------------------------------- */

typedef fg_output (*unary_fn)(fg_graph *g, fg_output x);

static int map_unary(fgx_ctx *c, const fgx_node *n, unary_fn f) {
  fg_output x;
  if (inputs(c, n, 1, &x) != 0) return -1;
  return onnx_math_finish(c, n, f(fgx_graph(c), x));
}

#define UNARY_MAPPER(name, fn)                                                                     \
  static int name(fgx_ctx *c, const fgx_node *n) { return map_unary(c, n, fn); }
UNARY_MAPPER(map_sqrt, fg_sqrt)
UNARY_MAPPER(map_reciprocal, fg_reciprocal)
UNARY_MAPPER(map_exp, fg_exp)
UNARY_MAPPER(map_log, fg_log)
UNARY_MAPPER(map_abs, fg_abs)
UNARY_MAPPER(map_neg, fg_neg)
UNARY_MAPPER(map_sign, fg_sign)
UNARY_MAPPER(map_floor, fg_floor)
UNARY_MAPPER(map_ceil, fg_ceil)
UNARY_MAPPER(map_round, fg_round)

static int map_not(fgx_ctx *c, const fgx_node *n) {
  int f = onnx_math_fold(c, n, ONNX_FOLD_NOT);
  if (f != 0) return f < 0 ? -1 : 0;
  return map_unary(c, n, fg_logical_not);
}

/* ---- binary ------------------------------------------------------------ */

typedef fg_output (*binary_fn)(fg_graph *g, fg_output a, fg_output b);

/* fold: the folding of known integer inputs, or -1 for none. */
static int map_binary(fgx_ctx *c, const fgx_node *n, binary_fn f, int fold) {
  static const int both[2] = {0, 1};
  if (onnx_math_check_bcast(c, n, both, 2) != 0) return -1;
  if (fold >= 0) {
    int r = onnx_math_fold(c, n, (onnx_fold_op)fold);
    if (r != 0) return r < 0 ? -1 : 0;
  }
  fg_output in[2];
  if (inputs(c, n, 2, in) != 0) return -1;
  return onnx_math_finish(c, n, f(fgx_graph(c), in[0], in[1]));
}

#define BINARY_MAPPER(name, fn, fold)                                                              \
  static int name(fgx_ctx *c, const fgx_node *n) { return map_binary(c, n, fn, fold); }
BINARY_MAPPER(map_add, fg_add, ONNX_FOLD_ADD)
BINARY_MAPPER(map_sub, fg_sub, ONNX_FOLD_SUB)
BINARY_MAPPER(map_mul, fg_mul, ONNX_FOLD_MUL)
BINARY_MAPPER(map_div, fg_div, ONNX_FOLD_DIV)
BINARY_MAPPER(map_equal, fg_equal, ONNX_FOLD_EQUAL)
BINARY_MAPPER(map_greater, fg_greater, ONNX_FOLD_GREATER)
BINARY_MAPPER(map_less, fg_less, ONNX_FOLD_LESS)
BINARY_MAPPER(map_and, fg_logical_and, -1)
BINARY_MAPPER(map_or, fg_logical_or, -1)

static fg_output greater_or_equal(fg_graph *g, fg_output a, fg_output b) {
  return fg_logical_or(g, fg_greater(g, a, b), fg_equal(g, a, b));
}
static fg_output less_or_equal(fg_graph *g, fg_output a, fg_output b) {
  return fg_logical_or(g, fg_less(g, a, b), fg_equal(g, a, b));
}
/* On bool, a != b. */
static fg_output xor_of(fg_graph *g, fg_output a, fg_output b) {
  return fg_logical_not(g, fg_equal(g, a, b));
}
BINARY_MAPPER(map_greater_or_equal, greater_or_equal, -1)
BINARY_MAPPER(map_less_or_equal, less_or_equal, -1)
BINARY_MAPPER(map_xor, xor_of, -1)

/* 1 when input i is known at import, holds one element equal to v, and
 * has no more dims than input `like` (so it does not change the output's
 * shape). */
static int known_scalar_is(fgx_ctx *c, const fgx_node *n, int i, int like, double v) {
  const fgx_known *k = fgx_input_known(c, n, i);
  fg_dtype dt;
  int rank;
  int64_t dims[FGX_MAX_DIMS];
  if (!k || fg_tensor_num_elements(k->t) != 1 || fgx_input_info(c, n, like, &dt, &rank, dims))
    return 0;
  if (fg_tensor_rank(k->t) > rank) return 0;
  const void *p = fg_tensor_data(k->t);
  switch (fg_tensor_dtype(k->t)) {
  case FG_F32: return *(const float *)p == v;
  case FG_F64: return *(const double *)p == v;
  case FG_I32: return *(const int32_t *)p == v;
  case FG_I64: return !k->sym && (double)*(const int64_t *)p == v;
  default: return 0;
  }
}

static int map_pow(fgx_ctx *c, const fgx_node *n) {
  static const int both[2] = {0, 1};
  fg_dtype db, de;
  if (onnx_math_check_bcast(c, n, both, 2) != 0 || input_dtype(c, n, 0, &db) != 0 ||
      input_dtype(c, n, 1, &de) != 0)
    return -1;
  if (db != FG_F32 && db != FG_F64 && !is_int(db))
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 0 (X) has dtype %s; Pow needs a number",
                    fg_dtype_name(db));
  if (de != FG_F32 && de != FG_F64 && !is_int(de))
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 1 (Y) has dtype %s; Pow needs a number",
                    fg_dtype_name(de));
  if (!is_int(db) && known_scalar_is(c, n, 1, 0, 2.0)) {
    /* x ** 2 (layer norms as exporters write them) is x * x: a cheaper
     * kernel, the same correctly rounded square, a simpler gradient. */
    fg_output x = fgx_input(c, n, 0);
    if (x.node < 0) return -1;
    return onnx_math_finish(c, n, fg_mul(fgx_graph(c), x, x));
  }
  fg_output in[2];
  if (inputs(c, n, 2, in) != 0) return -1;
  fg_graph *g = fgx_graph(c);
  /* flowgraph's pow is f32/f64 with one dtype: the exponent takes the
   * base's float type; an integer base goes through f64 and back. */
  const fg_dtype work = is_int(db) ? FG_F64 : db;
  fg_output x = db == work ? in[0] : fg_cast(g, in[0], work);
  fg_output y = de == work ? in[1] : fg_cast(g, in[1], work);
  fg_output o = fg_pow(g, x, y);
  if (work != db) o = fg_cast(g, o, db);
  return onnx_math_finish(c, n, o);
}

static int map_where(fgx_ctx *c, const fgx_node *n) {
  static const int all3[3] = {0, 1, 2};
  if (onnx_math_check_bcast(c, n, all3, 3) != 0) return -1;
  int f = onnx_math_fold(c, n, ONNX_FOLD_WHERE);
  if (f != 0) return f < 0 ? -1 : 0;
  fg_output in[3];
  if (inputs(c, n, 3, in) != 0) return -1;
  return onnx_math_finish(c, n, fg_select(fgx_graph(c), in[0], in[1], in[2]));
}

/* ---- variadic: Min, Max, Sum, Mean ---------------------------------------- */

static int map_variadic(fgx_ctx *c, const fgx_node *n, binary_fn f, int fold, int mean) {
  const int k = fgx_num_inputs(n);
  int idx[64];
  if (k < 1) return fgx_fail(c, n, FG_INVALID_GRAPH, "needs at least one input, has none");
  if (k > 64) return fgx_fail(c, n, FG_UNIMPLEMENTED, "has %d inputs; at most 64 are supported", k);
  for (int i = 0; i < k; i++) {
    if (!fgx_has_input(n, i))
      return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d is empty; every input is required", i);
    idx[i] = i;
  }
  if (onnx_math_check_bcast(c, n, idx, k) != 0) return -1;
  if (k == 2 && fold >= 0) {
    int r = onnx_math_fold(c, n, (onnx_fold_op)fold);
    if (r != 0) return r < 0 ? -1 : 0;
  }
  fg_graph *g = fgx_graph(c);
  fg_output acc = fgx_input(c, n, 0);
  if (acc.node < 0) return -1;
  /* One input: the value itself, as a node of its own so that the output
   * has a name of this node. */
  if (k == 1) acc = fg_identity(g, acc);
  for (int i = 1; i < k; i++) {
    fg_output x = fgx_input(c, n, i);
    if (x.node < 0) return -1;
    acc = f(g, acc, x);
  }
  if (mean && k > 1) {
    fg_dtype dt;
    if (input_dtype(c, n, 0, &dt) != 0) return -1;
    if (dt != FG_F32 && dt != FG_F64)
      return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 0 has dtype %s; Mean needs f32 or f64",
                      fg_dtype_name(dt));
    acc = fg_div(g, acc, fg_scalar(g, dt, (double)k));
  }
  return onnx_math_finish(c, n, acc);
}

static int map_min(fgx_ctx *c, const fgx_node *n) {
  return map_variadic(c, n, fg_minimum, ONNX_FOLD_MIN, 0);
}
static int map_max(fgx_ctx *c, const fgx_node *n) {
  return map_variadic(c, n, fg_maximum, ONNX_FOLD_MAX, 0);
}
static int map_sum(fgx_ctx *c, const fgx_node *n) { return map_variadic(c, n, fg_add, -1, 0); }
static int map_mean(fgx_ctx *c, const fgx_node *n) { return map_variadic(c, n, fg_add, -1, 1); }

/* ---- Clip ---------------------------------------------------------------- */

/* A bound of Clip from opset 11: input i, absent or "" for none. A known
 * one-element bound sets *v and *known; an unknown one is a graph value. */
static int clip_bound(fgx_ctx *c, const fgx_node *n, int i, const char *what, fg_dtype dt,
                      int *present, int *known, double *v, fg_output *o) {
  *present = fgx_has_input(n, i);
  *known = 0;
  if (!*present) return 0;
  fg_dtype bdt;
  int rank;
  int64_t dims[FGX_MAX_DIMS];
  if (fgx_input_info(c, n, i, &bdt, &rank, dims) != 0) return -1;
  if (bdt != dt)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d (%s) has dtype %s, input 0 %s", i, what,
                    fg_dtype_name(bdt), fg_dtype_name(dt));
  int64_t count = 1;
  for (int d = 0; d < rank; d++)
    count *= dims[d];
  if (count != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d (%s) must be a scalar, has %d dims", i, what,
                    rank);
  const fgx_known *k = fgx_input_known(c, n, i);
  if (k && !k->sym) {
    const void *p = fg_tensor_data(k->t);
    switch (dt) {
    case FG_F32: *v = *(const float *)p; break;
    case FG_F64: *v = *(const double *)p; break;
    case FG_I32: *v = *(const int32_t *)p; break;
    default: *v = (double)*(const int64_t *)p; break;
    }
    /* An integer bound beyond 2^53 would not survive the trip through a
     * double: keep it a graph value. */
    *known = dt != FG_I64 || fabs(*v) < 9007199254740992.0;
    if (*known) return 0;
  }
  *o = fgx_input(c, n, i);
  return o->node < 0 ? -1 : 0;
}

/* min(max(x, lo), hi) with either bound absent (no bound). ONNX: a
 * minimum above the maximum gives the maximum everywhere, which this
 * order of maximum then minimum does; so does NaN stay NaN. flowgraph's
 * own clip (one node) takes two finite float bounds with lo <= hi. */
static int map_clip(fgx_ctx *c, const fgx_node *n) {
  fg_dtype dt;
  if (input_dtype(c, n, 0, &dt) != 0) return -1;
  if (dt != FG_F32 && dt != FG_F64 && !is_int(dt))
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 0 has dtype %s; Clip needs a number",
                    fg_dtype_name(dt));
  int has_lo, has_hi, k_lo, k_hi;
  double lo = 0, hi = 0;
  fg_output o_lo = FG_NO_OUTPUT, o_hi = FG_NO_OUTPUT;
  if (fgx_opset(c) < 11) {
    int rl = fgx_attr_float(c, n, "min", 0, &lo), rh = fgx_attr_float(c, n, "max", 0, &hi);
    if (rl < 0 || rh < 0) return -1;
    has_lo = k_lo = rl;
    has_hi = k_hi = rh;
  } else {
    if (fgx_num_inputs(n) > 3)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "has %d inputs; Clip takes input, min, max",
                      fgx_num_inputs(n));
    if (clip_bound(c, n, 1, "min", dt, &has_lo, &k_lo, &lo, &o_lo) != 0 ||
        clip_bound(c, n, 2, "max", dt, &has_hi, &k_hi, &hi, &o_hi) != 0)
      return -1;
  }
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  if (!has_lo && !has_hi) return onnx_math_finish(c, n, fg_identity(g, x));
  if (has_lo && has_hi && k_lo && k_hi && !is_int(dt) && isfinite(lo) && isfinite(hi) && lo <= hi)
    return onnx_math_finish(c, n, fg_clip(g, x, lo, hi));
  if (has_lo) x = fg_maximum(g, x, k_lo ? fg_scalar(g, dt, lo) : o_lo);
  if (has_hi) x = fg_minimum(g, x, k_hi ? fg_scalar(g, dt, hi) : o_hi);
  return onnx_math_finish(c, n, x);
}

/* Mod. flowgraph has no remainder op: Mod is folded when both inputs are
 * integers known at import (the shape arithmetic exporters emit, such as
 * Swin's padding to whole windows, pad = (w - H % w) % w), and refused
 * naming why otherwise. */
static int map_mod(fgx_ctx *c, const fgx_node *n) {
  int64_t fmod;
  fg_dtype dt;
  int rank;
  int64_t dims[FGX_MAX_DIMS];
  static const int both[2] = {0, 1};
  if (fgx_num_inputs(n) != 2)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "Mod takes 2 inputs, got %d", fgx_num_inputs(n));
  if (fgx_attr_int(c, n, "fmod", 0, &fmod) < 0 || fgx_input_info(c, n, 0, &dt, &rank, dims) != 0)
    return -1;
  if (fmod != 0 && fmod != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'fmod' is %lld; it must be 0 or 1",
                    (long long)fmod);
  if (dt == FG_BOOL)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "Mod is not defined on bool (numeric types only)");
  if (!is_int(dt) && fmod == 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "Mod of %s needs fmod = 1 (the operator's rule for floating point)",
                    fg_dtype_name(dt));
  if (onnx_math_check_bcast(c, n, both, 2) != 0) return -1;
  int r = onnx_math_fold(c, n, fmod ? ONNX_FOLD_FMOD : ONNX_FOLD_MOD);
  if (r != 0) return r < 0 ? -1 : 0;
  for (int i = 0; i < 2; i++)
    if (!fgx_input_known(c, n, i))
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "input %d '%s' must be known at import (a constant or shape arithmetic on "
                      "constants): flowgraph folds Mod but has no remainder op",
                      i, n->input[i]);
  if (!is_int(dt))
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "Mod of %s values is not folded (integers only): flowgraph has no remainder op",
                    fg_dtype_name(dt));
  return fgx_fail(c, n, FG_UNIMPLEMENTED,
                  "the remainder cannot be folded (over 65536 elements, inputs of two integer "
                  "types, or a value that depends on the unknown batch size): flowgraph has no "
                  "remainder op");
}

const fgx_op fgx_ops_math[] = {
    {"Add", map_add},
    {"Sub", map_sub},
    {"Mul", map_mul},
    {"Div", map_div},
    {"Mod", map_mod},
    {"Pow", map_pow},
    {"Sqrt", map_sqrt},
    {"Reciprocal", map_reciprocal},
    {"Exp", map_exp},
    {"Log", map_log},
    {"Abs", map_abs},
    {"Neg", map_neg},
    {"Sign", map_sign},
    {"Floor", map_floor},
    {"Ceil", map_ceil},
    {"Round", map_round},
    {"Clip", map_clip},
    {"Min", map_min},
    {"Max", map_max},
    {"Sum", map_sum},
    {"Mean", map_mean},
    {"Equal", map_equal},
    {"Greater", map_greater},
    {"Less", map_less},
    {"GreaterOrEqual", map_greater_or_equal},
    {"LessOrEqual", map_less_or_equal},
    {"Not", map_not},
    {"And", map_and},
    {"Or", map_or},
    {"Xor", map_xor},
    {"Where", map_where},
    {"ReduceSum", onnx_map_reduce_sum},
    {"ReduceMean", onnx_map_reduce_mean},
    {"ReduceMax", onnx_map_reduce_max},
    {"ReduceMin", onnx_map_reduce_min},
    {"ReduceProd", onnx_map_reduce_prod},
    {"ReduceL1", onnx_map_reduce_l1},
    {"ReduceL2", onnx_map_reduce_l2},
    {"ReduceSumSquare", onnx_map_reduce_sum_square},
    {"ReduceLogSum", onnx_map_reduce_log_sum},
    {"ReduceLogSumExp", onnx_map_reduce_log_sum_exp},
    {"ArgMax", onnx_map_argmax},
    {"TopK", onnx_map_topk},
    {"CumSum", onnx_map_cumsum},
    {"ArgMin", onnx_map_argmin},
    {NULL, NULL},
};
