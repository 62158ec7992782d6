/* Shape inference for reductions: reduce_sum, reduce_mean, reduce_max and
 * argmax. Axes are normalised and checked for range and duplicates here, so
 * the executor can hand kernels sorted, unique, non-negative axes. */
#include "graph/infer_common.h"

/* reduced[d] = 1 for each dim of input 0 that the axes attribute names
 * (every dim when it is absent or empty), and the keepdims flag. */
static int reduce_axes(const fg_node *node, const fg_tinfo *in, int *reduced, int *keepdims,
                       fg_status *status) {
  const int64_t *axes;
  int n, r = in[0].rank;
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_attr_ints(node, "axes", 0, &axes, &n, status)) return -1;
  if (fgi_attr_flag(node, "keepdims", keepdims, status)) return -1;
  if (n <= 0) {
    for (int d = 0; d < r; d++)
      reduced[d] = 1; /* absent or empty: every axis */
  } else {
    for (int i = 0; i < n; i++) {
      int64_t a = axes[i];
      if (a < -(int64_t)r || a >= r)
        return fgi_fail(node, status,
                        "axes[%d] = %lld is out of range [-%d, %d) for input 0 "
                        "shape %s",
                        i, (long long)a, r, r, fgi_shape(&in[0], s1));
      int d = (int)(a < 0 ? a + r : a);
      if (reduced[d])
        return fgi_fail(node, status, "axes %s name dim %d twice", fgi_ints(axes, n, s2), d);
      reduced[d] = 1;
    }
  }
  return 0;
}

int fgi_infer_reduce(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int keepdims, r = in[0].rank;
  int reduced[FG_MAX_RANK] = {0};
  if (!fgi_is_numeric(in[0].dtype))
    return fgi_fail(node, status, "input 0 dtype %s is not allowed; %s needs f32, f64, i32 or i64",
                    fg_dtype_name(in[0].dtype), fgi_opname(node));
  if (reduce_axes(node, in, reduced, &keepdims, status)) return -1;
  int k = 0;
  for (int d = 0; d < r; d++) {
    if (!reduced[d])
      out[0].dims[k++] = in[0].dims[d];
    else if (keepdims)
      out[0].dims[k++] = 1;
  }
  out[0].rank = k;
  out[0].dtype = in[0].dtype;
  return 0;
}

int fgi_infer_argmax(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int64_t axis_attr;
  int axis;
  if (!fgi_is_numeric(in[0].dtype))
    return fgi_fail(node, status,
                    "input 0 dtype %s is not allowed; %s needs f32, f64, i32 "
                    "or i64",
                    fg_dtype_name(in[0].dtype), fgi_opname(node));
  if (fgi_attr_int(node, "axis", 1, 0, &axis_attr, status)) return -1;
  if (fgi_axis(node, "axis", axis_attr, &in[0], &axis, status)) return -1;
  int k = 0;
  for (int d = 0; d < in[0].rank; d++)
    if (d != axis) out[0].dims[k++] = in[0].dims[d];
  out[0].rank = k;
  out[0].dtype = FG_I64;
  return 0;
}

/* One operation per input element (an add or a compare). */
int64_t fgi_flops_reduce(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)node;
  (void)out;
  return fgi_elements(&in[0]);
}

/* Kernels get the reduced axes sorted and unique (reduce_axes' order). */
int fgi_parse_reduce(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  int reduced[FG_MAX_RANK] = {0};
  fg_reduce_params *r = &p->reduce;
  if (reduce_axes(node, in, reduced, &r->keepdims, st)) return -1;
  for (int d = 0; d < in[0].rank; d++)
    if (reduced[d]) r->axes[r->n_axes++] = d;
  return 0;
}

int fgi_parse_argmax(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  int64_t axis;
  if (fgi_attr_int(node, "axis", 1, 0, &axis, st)) return -1;
  return fgi_axis(node, "axis", axis, &in[0], &p->argmax.axis, st);
}
