/* ONNX reductions and ArgMax/ArgMin onto flowgraph's reduce_* and argmax
 * ops (fgx_ops_math lists them).
 *
 * Axes: an attribute of every reduction through opset 17, except
 * ReduceSum from opset 13, where they are input 1 and must be known at
 * import (flowgraph's reductions take their axes as attributes); a missing
 * or empty list means every axis, unless ReduceSum-13's
 * noop_with_empty_axes is 1, which makes the node the identity. Negative
 * axes count from the end; an axis out of range or named twice is refused
 * naming the node and the value. keepdims (default 1) keeps the reduced
 * axes as size 1.
 *
 * ReduceL1, ReduceL2, ReduceSumSquare and ReduceLogSum are composed of
 * abs, mul, reduce_sum, sqrt and log; ReduceLogSumExp is flowgraph's
 * logsumexp, which shifts by the maximum so that large inputs do not
 * overflow. An integer ReduceL2 is computed in f64 and truncated back, as
 * ONNX's reference (a square root cast to the input type).
 *
 * ArgMax/ArgMin give int64 indices of the first extreme along `axis`
 * (default 0); keepdims 1 puts the axis back as size 1. select_last_index
 * 1 (opset 12) is refused: flowgraph's kernels pick the first index and a
 * reversed view would cost two copies.
 *
 * TopK is flowgraph's topk: values and int64 indices of the k largest (or,
 * largest 0 from opset 11, smallest) along `axis` (default -1), best
 * first, equal values by their lower index, as the operator's text asks.
 * k is the attribute before opset 10, input 1 (one int64, known at import)
 * from 10; sorted 0 leaves the order free, so sorted output serves it.
 *
 * CumSum (opset 11) is flowgraph's cumsum: axis is input 1 (a scalar or
 * one entry, known at import), exclusive and reverse attributes. */
#include <string.h>

#include "schema/onnx/onnx_math.h"

typedef enum red_kind {
  R_SUM,
  R_MEAN,
  R_MAX,
  R_MIN,
  R_PROD,
  R_L1,
  R_L2,
  R_SUM_SQUARE,
  R_LOG_SUM,
  R_LOG_SUM_EXP
} red_kind;

/* The reduction's axes, made non-negative, into axes[0..*n_axes) (0: every
 * axis); *noop 1 when the node is the identity (ReduceSum-13's
 * noop_with_empty_axes with no axes). 0, or -1 after fgx_fail. */
static int reduce_axes(fgx_ctx *c, const fgx_node *n, int axes_input, int rank, int64_t *axes,
                       int *n_axes, int *noop) {
  const int64_t *v = NULL;
  int64_t len = 0, noop_attr = 0;
  *noop = 0;
  if (axes_input) {
    int64_t ignored;
    const int64_t *unused;
    const int has = fgx_attr_ints(c, n, "axes", &unused, &ignored);
    if (has < 0) return -1;
    if (has > 0)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "attribute 'axes' is not part of ReduceSum from opset 13 (axes are input 1)");
    if (fgx_attr_int(c, n, "noop_with_empty_axes", 0, &noop_attr) < 0) return -1;
    if (noop_attr != 0 && noop_attr != 1)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "attribute 'noop_with_empty_axes' = %lld; want 0 or 1", (long long)noop_attr);
    if (fgx_num_inputs(n) > 2)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "has %d inputs; ReduceSum takes data, axes",
                      fgx_num_inputs(n));
    if (fgx_has_input(n, 1) && fgx_input_ints(c, n, 1, &v, &len) != 0) return -1;
  } else {
    if (fgx_num_inputs(n) > 1)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "has %d inputs; before opset 18 this reduction takes only data (axes are an "
                      "attribute)",
                      fgx_num_inputs(n));
    if (fgx_attr_ints(c, n, "axes", &v, &len) < 0) return -1;
  }
  if (len == 0) {
    *n_axes = 0;
    *noop = (int)noop_attr;
    return 0;
  }
  if (len > rank)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "has %lld axes for an input of rank %d", (long long)len,
                    rank);
  for (int64_t i = 0; i < len; i++) {
    if (fgx_axis(c, n, "axes", v[i], rank, &axes[i]) != 0) return -1;
    for (int64_t j = 0; j < i; j++)
      if (axes[j] == axes[i])
        return fgx_fail(c, n, FG_INVALID_GRAPH, "axes name axis %lld twice (entries %lld and %lld)",
                        (long long)axes[i], (long long)j, (long long)i);
  }
  *n_axes = (int)len;
  return 0;
}

static int keepdims_attr(fgx_ctx *c, const fgx_node *n, int64_t *keep) {
  if (fgx_attr_int(c, n, "keepdims", 1, keep) < 0) return -1;
  if (*keep != 0 && *keep != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'keepdims' = %lld; want 0 or 1",
                    (long long)*keep);
  return 0;
}

static int is_float(fg_dtype dt) { return dt == FG_F32 || dt == FG_F64; }

/* The reduction of x (dtype dt) of kind k; the composed kinds build their
 * element-wise parts around a reduce_sum. */
static fg_output build_reduce(fg_graph *g, red_kind k, fg_output x, fg_dtype dt,
                              const int64_t *axes, int na, int keep) {
  switch (k) {
  case R_SUM: return fg_reduce_sum(g, x, axes, na, keep);
  case R_MEAN: return fg_reduce_mean(g, x, axes, na, keep);
  case R_MAX: return fg_reduce_max(g, x, axes, na, keep);
  case R_MIN: return fg_reduce_min(g, x, axes, na, keep);
  case R_PROD: return fg_reduce_prod(g, x, axes, na, keep);
  case R_L1: return fg_reduce_sum(g, fg_abs(g, x), axes, na, keep);
  case R_SUM_SQUARE: return fg_reduce_sum(g, fg_mul(g, x, x), axes, na, keep);
  case R_LOG_SUM: return fg_log(g, fg_reduce_sum(g, x, axes, na, keep));
  case R_LOG_SUM_EXP: return fg_logsumexp(g, x, axes, na, keep);
  case R_L2: {
    fg_output w = is_float(dt) ? x : fg_cast(g, x, FG_F64);
    fg_output y = fg_sqrt(g, fg_reduce_sum(g, fg_mul(g, w, w), axes, na, keep));
    return is_float(dt) ? y : fg_cast(g, y, dt);
  }
  }
  return FG_NO_OUTPUT;
}

static int map_reduce(fgx_ctx *c, const fgx_node *n, red_kind k) {
  fg_dtype dt;
  int rank, na = 0, noop = 0;
  int64_t dims[FGX_MAX_DIMS], axes[FGX_MAX_DIMS], keep;
  if (fgx_input_info(c, n, 0, &dt, &rank, dims) != 0) return -1;
  const int axes_input = k == R_SUM && fgx_opset(c) >= 13;
  if (reduce_axes(c, n, axes_input, rank, axes, &na, &noop) != 0 || keepdims_attr(c, n, &keep) != 0)
    return -1;
  if (!is_float(dt) && (k == R_LOG_SUM || k == R_LOG_SUM_EXP))
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 0 has dtype %s; this reduction needs f32 or f64",
                    fg_dtype_name(dt));
  if (!is_float(dt) && dt != FG_I32 && dt != FG_I64)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 0 has dtype %s; reductions need a number",
                    fg_dtype_name(dt));
  /* Known integers (a Shape's entries, say) reduce at import. */
  static const int fold_of[] = {[R_SUM] = ONNX_FOLD_ADD + 1,
                                [R_PROD] = ONNX_FOLD_MUL + 1,
                                [R_MAX] = ONNX_FOLD_MAX + 1,
                                [R_MIN] = ONNX_FOLD_MIN + 1};
  if (!noop && (size_t)k < sizeof fold_of / sizeof fold_of[0] && fold_of[k]) {
    int r = onnx_math_fold_reduce(c, n, (onnx_fold_op)(fold_of[k] - 1), axes, na, (int)keep);
    if (r != 0) return r < 0 ? -1 : 0;
  }
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  if (noop) return onnx_math_finish(c, n, fg_identity(g, x));
  return onnx_math_finish(c, n, build_reduce(g, k, x, dt, axes, na, (int)keep));
}

int onnx_map_reduce_sum(fgx_ctx *c, const fgx_node *n) { return map_reduce(c, n, R_SUM); }
int onnx_map_reduce_mean(fgx_ctx *c, const fgx_node *n) { return map_reduce(c, n, R_MEAN); }
int onnx_map_reduce_max(fgx_ctx *c, const fgx_node *n) { return map_reduce(c, n, R_MAX); }
int onnx_map_reduce_min(fgx_ctx *c, const fgx_node *n) { return map_reduce(c, n, R_MIN); }
int onnx_map_reduce_prod(fgx_ctx *c, const fgx_node *n) { return map_reduce(c, n, R_PROD); }
int onnx_map_reduce_l1(fgx_ctx *c, const fgx_node *n) { return map_reduce(c, n, R_L1); }
int onnx_map_reduce_l2(fgx_ctx *c, const fgx_node *n) { return map_reduce(c, n, R_L2); }
int onnx_map_reduce_sum_square(fgx_ctx *c, const fgx_node *n) {
  return map_reduce(c, n, R_SUM_SQUARE);
}
int onnx_map_reduce_log_sum(fgx_ctx *c, const fgx_node *n) { return map_reduce(c, n, R_LOG_SUM); }
int onnx_map_reduce_log_sum_exp(fgx_ctx *c, const fgx_node *n) {
  return map_reduce(c, n, R_LOG_SUM_EXP);
}

static int map_arg(fgx_ctx *c, const fgx_node *n, int is_max) {
  fg_dtype dt;
  int rank;
  int64_t dims[FGX_MAX_DIMS], axis, keep, last = 0;
  if (fgx_input_info(c, n, 0, &dt, &rank, dims) != 0) return -1;
  if (fgx_attr_int(c, n, "axis", 0, &axis) < 0 || keepdims_attr(c, n, &keep) != 0) return -1;
  if (fgx_opset(c) >= 12 && fgx_attr_int(c, n, "select_last_index", 0, &last) < 0) return -1;
  if (last != 0)
    return fgx_fail(c, n, last == 1 ? FG_UNIMPLEMENTED : FG_INVALID_GRAPH,
                    "attribute 'select_last_index' = %lld is not supported (only 0: the first "
                    "index of the extreme)",
                    (long long)last);
  if (!is_float(dt) && dt != FG_I32 && dt != FG_I64)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 0 has dtype %s; %s needs a number",
                    fg_dtype_name(dt), is_max ? "ArgMax" : "ArgMin");
  int64_t a;
  if (fgx_axis(c, n, "axis", axis, rank, &a) != 0) return -1;
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  fg_output y = is_max ? fg_argmax(g, x, (int)a) : fg_argmin(g, x, (int)a);
  if (keep) y = fg_unsqueeze(g, y, &a, 1);
  return onnx_math_finish(c, n, y);
}

int onnx_map_argmax(fgx_ctx *c, const fgx_node *n) { return map_arg(c, n, 1); }
int onnx_map_argmin(fgx_ctx *c, const fgx_node *n) { return map_arg(c, n, 0); }

/* TopK's k: the attribute before opset 10, else input 1 (one entry). */
static int topk_k(fgx_ctx *c, const fgx_node *n, int64_t *k) {
  if (fgx_opset(c) < 10) {
    const int rc = fgx_attr_int(c, n, "k", -1, k);
    return rc < 0 ? -1 : rc == 0 ? fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'k' is missing") : 0;
  }
  return fgx_input_int(c, n, 1, "K", k);
}

int onnx_map_topk(fgx_ctx *c, const fgx_node *n) {
  fg_dtype dt;
  int rank;
  int64_t dims[FGX_MAX_DIMS], axis, largest = 1, sorted = 1, k, a;
  if (fgx_input_info(c, n, 0, &dt, &rank, dims) != 0 || topk_k(c, n, &k) != 0) return -1;
  if (fgx_attr_int(c, n, "axis", -1, &axis) < 0) return -1;
  if (fgx_opset(c) >= 11 && (fgx_attr_int(c, n, "largest", 1, &largest) < 0 ||
                             fgx_attr_int(c, n, "sorted", 1, &sorted) < 0))
    return -1;
  if (!is_float(dt) && dt != FG_I32 && dt != FG_I64)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 0 has dtype %s; TopK needs a number",
                    fg_dtype_name(dt));
  if (fgx_axis(c, n, "axis", axis, rank, &a) != 0) return -1;
  if (k < 0 || (dims[a] >= 0 && k > dims[a]))
    return fgx_fail(c, n, FG_INVALID_GRAPH, "K = %lld is outside [0, %lld], the size of axis %lld",
                    (long long)k, (long long)dims[a], (long long)a);
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  fg_output y = fg_topk(fgx_graph(c), x, k, (int)a, largest != 0, 1);
  if (onnx_math_finish(c, n, y) != 0) return -1;
  return fgx_has_output(n, 1) ? fgx_set_output(c, n, 1, fg_output_at(y, 1)) : 0;
}

int onnx_map_cumsum(fgx_ctx *c, const fgx_node *n) {
  fg_dtype dt;
  int rank;
  int64_t dims[FGX_MAX_DIMS], exclusive, reverse, axis = 0, a;
  if (fgx_input_info(c, n, 0, &dt, &rank, dims) != 0 || fgx_input_int(c, n, 1, "axis", &axis) != 0)
    return -1;
  if (fgx_attr_int(c, n, "exclusive", 0, &exclusive) < 0 ||
      fgx_attr_int(c, n, "reverse", 0, &reverse) < 0)
    return -1;
  if (fgx_axis(c, n, "axis", axis, rank, &a) != 0) return -1;
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  return onnx_math_finish(c, n, fg_cumsum(fgx_graph(c), x, (int)a, exclusive != 0, reverse != 0));
}
