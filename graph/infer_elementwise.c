/* Shape inference for elementwise ops: binary arithmetic and comparisons
 * (NumPy broadcasting), select, unary math and cast. There is no implicit
 * type promotion: both operands of a binary op must have the same dtype, as
 * in TensorFlow, so a mismatch is reported rather than silently widened. */
#include <math.h>

#include "graph/infer_common.h"

int fgi_infer_binary(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int op = node->op;
  if (fgi_same_dtype(node, in, 0, 1, status)) return -1;
  fg_dtype dt = in[0].dtype;
  int is_cmp = op == FG_OP_EQUAL || op == FG_OP_GREATER || op == FG_OP_LESS;
  if (op == FG_OP_POW) {
    if (!fg_dtype_is_float(dt))
      return fgi_fail(node, status, "input 0 dtype %s is not allowed; pow needs f32 or f64",
                      fg_dtype_name(dt));
  } else if (op == FG_OP_EQUAL) {
    if (!fgi_dtype_valid(dt))
      return fgi_fail(node, status, "input 0 has invalid dtype %d", (int)dt);
  } else if (!fgi_is_numeric(dt)) {
    return fgi_fail(node, status, "input 0 dtype %s is not allowed; %s needs f32, f64, i32 or i64",
                    fg_dtype_name(dt), fgi_opname(node));
  }
  if (fgi_broadcast(node, in, 0, 1, &out[0], status)) return -1;
  out[0].dtype = is_cmp ? FG_BOOL : dt;
  return fgi_check_bytes(node, &out[0], status);
}

int fgi_infer_select(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  if (in[0].dtype != FG_BOOL)
    return fgi_fail(node, status, "input 0 (cond) dtype %s must be bool",
                    fg_dtype_name(in[0].dtype));
  if (fgi_same_dtype(node, in, 1, 2, status)) return -1;
  fg_tinfo ca;
  if (fgi_broadcast(node, in, 0, 1, &ca, status)) return -1;
  int bad;
  int64_t va, vb;
  if (fgi_broadcast_dims(ca.rank, ca.dims, in[2].rank, in[2].dims, out[0].dims, &bad, &va, &vb))
    return fgi_fail(node, status,
                    "input 2 shape %s does not broadcast with shape %s of inputs 0 "
                    "and 1 (dim %d: %lld vs %lld)",
                    fgi_shape(&in[2], s1), fgi_shape(&ca, s2), bad, (long long)vb, (long long)va);
  out[0].rank = ca.rank > in[2].rank ? ca.rank : in[2].rank;
  out[0].dtype = in[1].dtype;
  return fgi_check_bytes(node, &out[0], status);
}

/* Which dtypes a unary op accepts. */
enum { ANY_DTYPE, NUMERIC, FLOAT_ONLY };

static int unary_class(int op) {
  switch (op) {
  case FG_OP_NEG:
  case FG_OP_ABS:
  case FG_OP_RELU:
  case FG_OP_SIGN: return NUMERIC;
  case FG_OP_IDENTITY:
  case FG_OP_STOP_GRADIENT:
  case FG_OP_ZEROS_LIKE:
  case FG_OP_ONES_LIKE: return ANY_DTYPE;
  default: return FLOAT_ONLY;
  }
}

int fgi_infer_unary(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  fg_dtype dt = in[0].dtype;
  switch (unary_class(node->op)) {
  case FLOAT_ONLY:
    if (!fg_dtype_is_float(dt))
      return fgi_fail(node, status, "input 0 dtype %s is not allowed; %s needs f32 or f64",
                      fg_dtype_name(dt), fgi_opname(node));
    break;
  case NUMERIC:
    if (!fgi_is_numeric(dt))
      return fgi_fail(node, status,
                      "input 0 dtype %s is not allowed; %s needs f32, f64, i32 or i64",
                      fg_dtype_name(dt), fgi_opname(node));
    break;
  default:
    if (!fgi_dtype_valid(dt))
      return fgi_fail(node, status, "input 0 has invalid dtype %d", (int)dt);
    break;
  }
  out[0] = in[0];
  return 0;
}

/* torch.clamp with min > max returns max everywhere; a bound pair the wrong
 * way round is almost always a bug, so it is refused when the node is made. */
int fgi_clip_bounds(const fg_node *node, double *lo, double *hi, fg_status *status) {
  if (fgi_attr_float(node, "min", NAN, lo, status) || fgi_attr_float(node, "max", NAN, hi, status))
    return -1;
  if (isnan(*lo) || isnan(*hi))
    return fgi_fail(node, status, "attribute '%s' is missing; clip needs both min and max",
                    isnan(*lo) ? "min" : "max");
  if (*lo > *hi) return fgi_fail(node, status, "min = %g is greater than max = %g", *lo, *hi);
  return 0;
}

int fgi_infer_clip(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  double lo, hi;
  if (fgi_clip_bounds(node, &lo, &hi, status) != 0) return -1;
  return fgi_infer_unary(node, in, out, status);
}

int fgi_infer_cast(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  fg_dtype dt;
  if (fgi_attr_dtype(node, "dtype", &dt, status)) return -1;
  if (!fgi_dtype_valid(in[0].dtype))
    return fgi_fail(node, status, "input 0 has invalid dtype %d", (int)in[0].dtype);
  out[0] = in[0];
  out[0].dtype = dt;
  return fgi_check_bytes(node, &out[0], status);
}

/* One FLOP per output element, transcendental or not: a rough, documented
 * count. Ops that only move or produce bytes (identity, stop_gradient,
 * zeros_like, ones_like, cast) count 0. */
int64_t fgi_flops_elementwise(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)in;
  switch (node->op) {
  case FG_OP_IDENTITY:
  case FG_OP_STOP_GRADIENT:
  case FG_OP_ZEROS_LIKE:
  case FG_OP_ONES_LIKE:
  case FG_OP_CAST: return 0;
  default: return fgi_elements(&out[0]);
  }
}
