/* Shape inference for the softmax family and assign. */
#include "graph/infer_common.h"

int fgi_infer_softmax(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int64_t axis_attr;
  int axis;
  if (!fg_dtype_is_float(in[0].dtype))
    return fgi_fail(node, status, "input 0 dtype %s is not allowed; %s needs f32 or f64",
                    fg_dtype_name(in[0].dtype), fgi_opname(node));
  if (fgi_attr_int(node, "axis", 1, 0, &axis_attr, status)) return -1;
  if (fgi_axis(node, "axis", axis_attr, &in[0], &axis, status)) return -1;
  out[0] = in[0];
  return 0;
}

int fgi_infer_softmax_cross_entropy(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                                    fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  const fg_tinfo *lg = &in[0], *lb = &in[1];
  if (lg->rank != 2)
    return fgi_fail(node, status, "input 0 (logits) shape %s has rank %d; it must be [N, C]",
                    fgi_shape(lg, s1), lg->rank);
  if (!fg_dtype_is_float(lg->dtype))
    return fgi_fail(node, status,
                    "input 0 (logits) dtype %s is not allowed; it must be f32 or "
                    "f64",
                    fg_dtype_name(lg->dtype));
  if (lb->rank != 1)
    return fgi_fail(node, status, "input 1 (labels) shape %s has rank %d; it must be [N]",
                    fgi_shape(lb, s1), lb->rank);
  if (!fgi_is_index(lb->dtype))
    return fgi_fail(node, status,
                    "input 1 (labels) dtype %s is not allowed; it must be i32 or "
                    "i64",
                    fg_dtype_name(lb->dtype));
  if (lg->dims[0] >= 0 && lb->dims[0] >= 0 && lg->dims[0] != lb->dims[0])
    return fgi_fail(node, status,
                    "input 0 (logits) shape %s and input 1 (labels) shape %s differ "
                    "in N (%lld vs %lld)",
                    fgi_shape(lg, s1), fgi_shape(lb, s2), (long long)lg->dims[0],
                    (long long)lb->dims[0]);
  out[0].dtype = lg->dtype;
  out[0].rank = 0;
  return 0;
}

/* softmax_cross_entropy_grad(logits, labels, dy): logits and labels as the
 * loss takes them, dy a scalar of the logits' dtype; the result is shaped
 * as the logits. */
int fgi_infer_softmax_cross_entropy_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                                         fg_status *status) {
  char s[FGI_STR];
  if (fgi_infer_softmax_cross_entropy(node, in, out, status)) return -1;
  const fg_tinfo *dy = &in[2];
  if (dy->dtype != in[0].dtype)
    return fgi_fail(node, status, "input 2 (dy) dtype %s differs from input 0 (logits) dtype %s",
                    fg_dtype_name(dy->dtype), fg_dtype_name(in[0].dtype));
  int64_t n = fgi_elements(dy);
  if (dy->rank > 1 || (n >= 0 && n != 1))
    return fgi_fail(node, status, "input 2 (dy) shape %s is not a scalar", fgi_shape(dy, s));
  out[0] = in[0];
  return 0;
}

/* softmax_cross_entropy_and_grad(logits, labels): output 0 the loss (a
 * scalar), output 1 shaped as the logits. */
int fgi_infer_softmax_cross_entropy_and_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                                             fg_status *status) {
  if (fgi_infer_softmax_cross_entropy(node, in, out, status)) return -1;
  out[1] = in[0];
  return 0;
}

/* The producer of input 0 being a variable is checked by fg_op, which sees
 * the graph; here only the value's dtype and shape must fit the variable. */
int fgi_infer_assign(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_same_dtype(node, in, 0, 1, status)) return -1;
  int same = in[0].rank == in[1].rank;
  for (int d = 0; same && d < in[0].rank; d++)
    if (in[0].dims[d] >= 0 && in[1].dims[d] >= 0 && in[0].dims[d] != in[1].dims[d]) same = 0;
  if (!same)
    return fgi_fail(node, status,
                    "input 1 (value) shape %s does not match input 0 (variable) "
                    "shape %s",
                    fgi_shape(&in[1], s1), fgi_shape(&in[0], s2));
  out[0] = in[0];
  return 0;
}

/* About five operations per element: max, subtract, exp, sum, divide. */
int64_t fgi_flops_softmax(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)node;
  (void)in;
  int64_t e = fgi_elements(&out[0]);
  return e < 0 ? -1 : fgi_mul_sat(e, 5);
}

int64_t fgi_flops_softmax_cross_entropy(const fg_node *node, const fg_tinfo *in,
                                        const fg_tinfo *out) {
  (void)node;
  (void)out;
  int64_t e = fgi_elements(&in[0]);
  return e < 0 ? -1 : fgi_mul_sat(e, 5);
}

/* The loss's work and the gradient's. */
int64_t fgi_flops_softmax_cross_entropy_and_grad(const fg_node *node, const fg_tinfo *in,
                                                 const fg_tinfo *out) {
  int64_t f = fgi_flops_softmax_cross_entropy(node, in, out);
  return f < 0 ? -1 : fgi_mul_sat(f, 2);
}

int fgi_parse_softmax(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  int64_t axis;
  if (fgi_attr_int(node, "axis", 1, 0, &axis, st)) return -1;
  return fgi_axis(node, "axis", axis, &in[0], &p->softmax.axis, st);
}
