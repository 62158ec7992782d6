/* Shape inference for logsumexp, cumsum, topk and topk_grad. reduce_min,
 * reduce_prod and argmin share reduce_sum's and argmax's rules
 * (graph/infer_reduce.c). Attributes are checked here against the shapes, so
 * a bad k or axis is refused naming the node and the value before any
 * kernel runs; a dim unknown at build time is checked again when the graph
 * runs with the fed shapes. */
#include "graph/infer_common.h"

static int is_float(fg_dtype d) { return d == FG_F32 || d == FG_F64; }

/* logsumexp is a reduction whose result is a logarithm: floats only. */
int fgi_infer_logsumexp(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  if (!is_float(in[0].dtype))
    return fgi_fail(node, status, "input 0 dtype %s is not allowed; logsumexp needs f32 or f64",
                    fg_dtype_name(in[0].dtype));
  return fgi_infer_reduce(node, in, out, status);
}

/* A max, a subtraction, an exp and an add per element. */
int64_t fgi_flops_logsumexp(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)node;
  (void)out;
  return fgi_mul_sat(fgi_elements(&in[0]), 4);
}

int fgi_infer_cumsum(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int64_t axis;
  int a;
  if (!fgi_is_numeric(in[0].dtype))
    return fgi_fail(node, status,
                    "input 0 dtype %s is not allowed; cumsum needs f32, f64, i32 or i64",
                    fg_dtype_name(in[0].dtype));
  if (in[0].rank == 0)
    return fgi_fail(node, status, "input 0 is a scalar; cumsum needs an axis to run along");
  if (fgi_attr_int(node, "axis", 1, 0, &axis, status)) return -1;
  if (fgi_axis(node, "axis", axis, &in[0], &a, status)) return -1;
  int flag;
  if (fgi_attr_flag(node, "exclusive", &flag, status)) return -1;
  if (fgi_attr_flag(node, "reverse", &flag, status)) return -1;
  out[0] = in[0];
  return 0;
}

int fgi_parse_cumsum(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  int64_t axis;
  if (fgi_attr_int(node, "axis", 1, 0, &axis, st)) return -1;
  return fgi_axis(node, "axis", axis, &in[0], &p->cumsum.axis, st);
}

/* k and axis checked against x: 0 <= k <= x.dims[axis] where that dim is
 * known. *axis normalised into [0, rank). */
static int topk_attrs(const fg_node *node, const fg_tinfo *x, int64_t *k, int *axis,
                      fg_status *st) {
  int64_t ax;
  char s[FGI_STR];
  if (x->rank == 0)
    return fgi_fail(node, st, "input 0 is a scalar; topk needs an axis to choose along");
  if (fgi_attr_int(node, "k", 1, 0, k, st)) return -1;
  if (fgi_attr_int(node, "axis", 0, -1, &ax, st)) return -1;
  if (fgi_axis(node, "axis", ax, x, axis, st)) return -1;
  if (*k < 0) return fgi_fail(node, st, "k = %lld is negative", (long long)*k);
  const int64_t dim = x->dims[*axis];
  if (dim >= 0 && *k > dim)
    return fgi_fail(node, st,
                    "k = %lld is larger than input 0's dim %d (%lld) of shape %s; "
                    "it has only %lld values to choose from",
                    (long long)*k, *axis, (long long)dim, fgi_shape(x, s), (long long)dim);
  return 0;
}

int fgi_infer_topk(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int64_t k;
  int axis, flag;
  if (!fgi_is_numeric(in[0].dtype))
    return fgi_fail(node, status,
                    "input 0 dtype %s is not allowed; topk needs f32, f64, i32 or i64",
                    fg_dtype_name(in[0].dtype));
  if (topk_attrs(node, &in[0], &k, &axis, status)) return -1;
  if (fgi_attr_flag(node, "largest", &flag, status)) return -1;
  if (fgi_attr_flag(node, "sorted", &flag, status)) return -1;
  out[0] = in[0];
  out[0].dims[axis] = k;
  out[1] = out[0];
  out[1].dtype = FG_I64;
  return 0;
}

int fgi_parse_topk(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  return topk_attrs(node, &in[0], &p->topk.k, &p->topk.axis, st);
}

/* topk_grad(dy, indices, like): dy and indices have like's shape except at
 * axis; the result has like's shape and dy's dtype. */
static int topk_grad_axis(const fg_node *node, const fg_tinfo *in, int *axis, fg_status *st) {
  int64_t ax;
  char s[FGI_STR];
  const int r = in[2].rank;
  if (fgi_attr_int(node, "axis", 1, 0, &ax, st)) return -1;
  if (ax < -(int64_t)r || ax >= r)
    return fgi_fail(node, st, "axis %lld is out of range [-%d, %d) for input 2 (like) shape %s",
                    (long long)ax, r, r, fgi_shape(&in[2], s));
  *axis = (int)(ax < 0 ? ax + r : ax);
  return 0;
}

int fgi_infer_topk_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int axis = 0;
  char s0[FGI_STR], s1[FGI_STR], s2[FGI_STR];
  if (!is_float(in[0].dtype))
    return fgi_fail(node, status,
                    "input 0 (dy) dtype %s is not allowed; topk_grad needs f32 or f64",
                    fg_dtype_name(in[0].dtype));
  if (in[1].dtype != FG_I64)
    return fgi_fail(node, status, "input 1 (indices) dtype %s is not allowed; it must be i64",
                    fg_dtype_name(in[1].dtype));
  if (topk_grad_axis(node, in, &axis, status)) return -1;
  int bad = in[0].rank != in[2].rank || in[1].rank != in[2].rank;
  for (int d = 0; !bad && d < in[2].rank; d++) {
    const int64_t a = in[0].dims[d], b = in[1].dims[d], c = in[2].dims[d];
    if (a >= 0 && b >= 0 && a != b) bad = 1;
    if (d != axis && a >= 0 && c >= 0 && a != c) bad = 1;
    if (d == axis && a >= 0 && c >= 0 && a > c) bad = 1;
  }
  if (bad)
    return fgi_fail(node, status,
                    "dy %s and indices %s must match like %s except along axis %d, where "
                    "they may be shorter",
                    fgi_shape(&in[0], s0), fgi_shape(&in[1], s1), fgi_shape(&in[2], s2), axis);
  out[0] = in[2];
  out[0].dtype = in[0].dtype;
  return 0;
}

int fgi_parse_topk_grad(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  if (topk_grad_axis(node, in, &p->topk.axis, st)) return -1;
  p->topk.k = in[0].dims[p->topk.axis];
  return 0;
}
