/* Shape inference for the ops that gradients are built from: erf is a
 * unary op (infer_elementwise.c) and slice_grad shares slice's rules
 * (infer_linalg.c); here expand_dims, the *_like ops, numel, gather_grad
 * and group.
 *
 * The *_like ops take their output shape from a tensor instead of an
 * attribute, so that a gradient never bakes in a size that is unknown when
 * the graph is built (the leading batch dimension). At build time such a
 * dimension is FG_DIM_UNKNOWN and only what is known is checked; the
 * executor infers again with the fed shapes, where every rule below is
 * checked in full before a kernel runs. */
#include <string.h>

#include "graph/infer_grad.h"

/* Input i (`what`) must have a valid dtype: any dtype is allowed, but a
 * file could carry garbage. */
static int valid_dtype(const fg_node *node, const fg_tinfo *in, int i, const char *what,
                       fg_status *st) {
  if (fgi_dtype_valid(in[i].dtype)) return 0;
  return fgi_fail(node, st, "input %d (%s) has invalid dtype %d", i, what, (int)in[i].dtype);
}

int fgi_infer_expand_dims(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                          fg_status *status) {
  const int64_t *axes;
  int n;
  char s1[FGI_STR], s2[FGI_STR];
  if (valid_dtype(node, in, 0, "x", status)) return -1;
  if (fgi_attr_ints(node, "axes", 1, &axes, &n, status)) return -1;
  int r = in[0].rank + n;
  if (n > FG_MAX_RANK || r > FG_MAX_RANK)
    return fgi_fail(node, status,
                    "axes %s add %d dims to input 0 shape %s: output rank %d is above the "
                    "maximum %d",
                    fgi_ints(axes, n, s1), n, fgi_shape(&in[0], s2), r, FG_MAX_RANK);
  int inserted[FG_MAX_RANK] = {0};
  for (int i = 0; i < n; i++) {
    /* Positions count in the output, as in NumPy's expand_dims. */
    if (axes[i] < -(int64_t)r || axes[i] >= r)
      return fgi_fail(node, status,
                      "axes[%d] = %lld is out of range [-%d, %d) for the output rank %d "
                      "(input 0 shape %s plus %d dims)",
                      i, (long long)axes[i], r, r, r, fgi_shape(&in[0], s1), n);
    int a = (int)(axes[i] < 0 ? axes[i] + r : axes[i]);
    if (inserted[a])
      return fgi_fail(node, status, "axes %s name output dim %d twice", fgi_ints(axes, n, s1), a);
    inserted[a] = 1;
  }
  out[0].dtype = in[0].dtype;
  out[0].rank = r;
  for (int d = 0, j = 0; d < r; d++)
    out[0].dims[d] = inserted[d] ? 1 : in[0].dims[j++];
  return 0;
}

int fgi_infer_reshape_like(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                           fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  if (valid_dtype(node, in, 0, "x", status) || valid_dtype(node, in, 1, "like", status)) return -1;
  int64_t nx, nl;
  /* Only when both counts are known; otherwise the run-time pass checks. */
  if (fg_shape_elements(in[0].rank, in[0].dims, &nx) == 0 &&
      fg_shape_elements(in[1].rank, in[1].dims, &nl) == 0 && nx != nl)
    return fgi_fail(node, status,
                    "cannot reshape input 0 shape %s (%lld elements) into input 1 (like) "
                    "shape %s (%lld elements)",
                    fgi_shape(&in[0], s1), (long long)nx, fgi_shape(&in[1], s2), (long long)nl);
  out[0] = in[1];
  out[0].dtype = in[0].dtype;
  return fgi_check_bytes(node, &out[0], status);
}

int fgi_infer_broadcast_like(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                             fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  const fg_tinfo *x = &in[0], *like = &in[1];
  if (valid_dtype(node, in, 0, "x", status) || valid_dtype(node, in, 1, "like", status)) return -1;
  if (x->rank > like->rank)
    return fgi_fail(node, status,
                    "input 0 shape %s has rank %d, above the rank %d of input 1 (like) shape %s; "
                    "broadcast_like only adds dims",
                    fgi_shape(x, s1), x->rank, like->rank, fgi_shape(like, s2));
  out[0] = *like;
  out[0].dtype = x->dtype;
  int off = like->rank - x->rank;
  for (int i = 0; i < x->rank; i++) {
    int64_t xd = x->dims[i], ld = like->dims[off + i];
    /* One way only: x's dim is 1 or equals like's. */
    if (xd >= 0 && ld >= 0 && xd != ld && xd != 1)
      return fgi_fail(node, status,
                      "input 0 shape %s does not broadcast to input 1 (like) shape %s "
                      "(dim %d: %lld vs %lld)",
                      fgi_shape(x, s1), fgi_shape(like, s2), off + i, (long long)xd, (long long)ld);
    /* A known x dim other than 1 fixes an unknown like dim. */
    if (ld < 0 && xd >= 0 && xd != 1) out[0].dims[off + i] = xd;
  }
  return fgi_check_bytes(node, &out[0], status);
}

int fgi_infer_sum_to(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  const fg_tinfo *x = &in[0], *like = &in[1];
  if (!fgi_is_numeric(x->dtype))
    return fgi_fail(node, status,
                    "input 0 dtype %s is not allowed; sum_to needs f32, f64, i32 "
                    "or i64",
                    fg_dtype_name(x->dtype));
  if (valid_dtype(node, in, 1, "like", status)) return -1;
  if (like->rank > x->rank)
    return fgi_fail(node, status,
                    "input 1 (like) shape %s has rank %d, above the rank %d of input 0 shape %s; "
                    "sum_to only removes dims",
                    fgi_shape(like, s1), like->rank, x->rank, fgi_shape(x, s2));
  out[0] = *like;
  out[0].dtype = x->dtype;
  int off = x->rank - like->rank;
  for (int i = 0; i < like->rank; i++) {
    int64_t ld = like->dims[i], xd = x->dims[off + i];
    /* like broadcasts to x: like's dim is 1 or equals x's. */
    if (ld >= 0 && xd >= 0 && ld != xd && ld != 1)
      return fgi_fail(node, status,
                      "input 1 (like) shape %s does not broadcast to input 0 shape %s "
                      "(dim %d: %lld vs %lld), so input 0 cannot be summed down to it",
                      fgi_shape(like, s1), fgi_shape(x, s2), off + i, (long long)ld, (long long)xd);
    if (ld < 0 && xd == 1) out[0].dims[i] = 1;
  }
  return 0;
}

/* One add per input element. */
int64_t fgi_flops_sum_to(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)node;
  (void)out;
  return fgi_elements(&in[0]);
}

int fgi_infer_numel(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  fg_dtype dt;
  if (valid_dtype(node, in, 0, "x", status)) return -1;
  if (fgi_attr_dtype(node, "dtype", &dt, status)) return -1;
  if (!fgi_is_numeric(dt))
    return fgi_fail(node, status, "dtype %s is not allowed; numel needs f32, f64, i32 or i64",
                    fg_dtype_name(dt));
  out[0].dtype = dt;
  out[0].rank = 0;
  return 0;
}

int fgi_infer_gather_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                          fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR], s3[FGI_STR];
  const fg_tinfo *dy = &in[0], *idx = &in[1], *like = &in[2];
  if (!fgi_is_numeric(dy->dtype))
    return fgi_fail(node, status,
                    "input 0 (dy) dtype %s is not allowed; gather_grad needs f32, f64, i32 or i64",
                    fg_dtype_name(dy->dtype));
  if (!fgi_is_index(idx->dtype))
    return fgi_fail(node, status,
                    "input 1 (indices) dtype %s is not allowed; gather_grad needs i32 or i64",
                    fg_dtype_name(idx->dtype));
  if (valid_dtype(node, in, 2, "like", status)) return -1;
  if (like->rank < 1)
    return fgi_fail(node, status,
                    "input 2 (like) shape %s is a scalar; the gathered params have rank >= 1",
                    fgi_shape(like, s1));
  int r = idx->rank + like->rank - 1;
  int ok = dy->rank == r;
  for (int d = 0; ok && d < r; d++) {
    int64_t want = d < idx->rank ? idx->dims[d] : like->dims[d - idx->rank + 1];
    if (want >= 0 && dy->dims[d] >= 0 && dy->dims[d] != want) ok = 0;
  }
  if (!ok)
    return fgi_fail(node, status,
                    "input 0 (dy) shape %s is not input 1 (indices) shape %s + input 2 (like) "
                    "shape %s without dim 0",
                    fgi_shape(dy, s1), fgi_shape(idx, s2), fgi_shape(like, s3));
  out[0] = *like;
  out[0].dtype = dy->dtype;
  return fgi_check_bytes(node, &out[0], status);
}

/* One add per element of dy. */
int64_t fgi_flops_gather_grad(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)node;
  (void)out;
  return fgi_elements(&in[0]);
}

/* after(x, ctrl...): x as it is; the ctrl inputs only order it. */
int fgi_infer_after(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  for (int i = 0; i < node->n_inputs; i++)
    if (!fgi_dtype_valid(in[i].dtype))
      return fgi_fail(node, status, "input %d has invalid dtype %d", i, (int)in[i].dtype);
  out[0] = in[0];
  return 0;
}

int fgi_infer_group(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  for (int i = 0; i < node->n_inputs; i++)
    if (!fgi_dtype_valid(in[i].dtype))
      return fgi_fail(node, status, "input %d has invalid dtype %d", i, (int)in[i].dtype);
  out[0].dtype = FG_I32;
  out[0].rank = 0;
  return 0;
}
