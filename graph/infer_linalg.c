/* Shape inference for linear algebra and shaping: matmul, reshape,
 * transpose, concat, slice, gather and one_hot, and slice_grad, which
 * shares slice's rules. These ops take sizes from attributes (perms,
 * begins, depths), so every attribute is range-checked before it indexes
 * anything (out of range is an invalid graph, never a bad index). */
#include <string.h>

#include "graph/infer_common.h"
#include "graph/infer_grad.h"

int fgi_infer_matmul(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  const fg_tinfo *a = &in[0], *b = &in[1];
  for (int i = 0; i < 2; i++)
    if (in[i].rank < 2)
      return fgi_fail(node, status, "input %d shape %s has rank %d; matmul needs rank >= 2", i,
                      fgi_shape(&in[i], s1), in[i].rank);
  if (fgi_same_dtype(node, in, 0, 1, status)) return -1;
  /* Floats only: BLAS has no integer GEMM, and no integer kernel exists. */
  if (!fg_dtype_is_float(a->dtype))
    return fgi_fail(node, status, "input 0 dtype %s is not allowed; matmul needs f32 or f64",
                    fg_dtype_name(a->dtype));
  int ta, tb;
  if (fgi_attr_flag(node, "transpose_a", &ta, status)) return -1;
  if (fgi_attr_flag(node, "transpose_b", &tb, status)) return -1;
  int ra = a->rank, rb = b->rank;
  int64_t m = ta ? a->dims[ra - 1] : a->dims[ra - 2];
  int64_t ka = ta ? a->dims[ra - 2] : a->dims[ra - 1];
  int64_t kb = tb ? b->dims[rb - 1] : b->dims[rb - 2];
  int64_t n = tb ? b->dims[rb - 2] : b->dims[rb - 1];
  if (ka >= 0 && kb >= 0 && ka != kb)
    return fgi_fail(node, status,
                    "inner dimensions differ: input 0 shape %s (transpose_a=%d) "
                    "has K=%lld, input 1 shape %s (transpose_b=%d) has K=%lld",
                    fgi_shape(a, s1), ta, (long long)ka, fgi_shape(b, s2), tb, (long long)kb);
  int bad;
  int64_t va, vb;
  if (fgi_broadcast_dims(ra - 2, a->dims, rb - 2, b->dims, out[0].dims, &bad, &va, &vb))
    return fgi_fail(node, status,
                    "batch dimensions of input 0 shape %s and input 1 shape %s do "
                    "not broadcast (dim %d: %lld vs %lld)",
                    fgi_shape(a, s1), fgi_shape(b, s2), bad, (long long)va, (long long)vb);
  int r = ra > rb ? ra : rb;
  out[0].rank = r;
  out[0].dims[r - 2] = m < 0 ? FG_DIM_UNKNOWN : m;
  out[0].dims[r - 1] = n < 0 ? FG_DIM_UNKNOWN : n;
  out[0].dtype = a->dtype;
  return fgi_check_bytes(node, &out[0], status);
}

/* 2*M*N*K per batch entry: one multiply and one add per term. */
int64_t fgi_flops_matmul(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  int ta = (int)fg_attr_int_or(node, "transpose_a", 0) != 0;
  int64_t k = ta ? in[0].dims[in[0].rank - 2] : in[0].dims[in[0].rank - 1];
  int64_t e = fgi_elements(&out[0]); /* batch * M * N */
  if (e < 0 || k < 0) return -1;
  return fgi_mul_sat(fgi_mul_sat(e, k), 2);
}

int fgi_infer_reshape(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const int64_t *dims;
  int n, unknown_at = -1;
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_attr_ints(node, "shape", 1, &dims, &n, status)) return -1;
  if (n > FG_MAX_RANK)
    return fgi_fail(node, status, "shape %s has rank %d, above the maximum %d",
                    fgi_ints(dims, n, s1), n, FG_MAX_RANK);
  int64_t known = 1; /* product of the entries other than -1 */
  for (int i = 0; i < n; i++) {
    if (dims[i] == -1) {
      if (unknown_at >= 0)
        return fgi_fail(node, status, "shape %s has more than one -1", fgi_ints(dims, n, s1));
      unknown_at = i;
      continue;
    }
    if (dims[i] < 0)
      return fgi_fail(node, status, "shape %s has negative dimension %lld at dim %d",
                      fgi_ints(dims, n, s1), (long long)dims[i], i);
    if (dims[i] != 0 && known > INT64_MAX / dims[i])
      return fgi_fail(node, status, "shape %s has more than 2^63 elements", fgi_ints(dims, n, s1));
    known *= dims[i];
  }
  out[0].dtype = in[0].dtype;
  out[0].rank = n;
  if (n) memcpy(out[0].dims, dims, (size_t)n * sizeof dims[0]);
  int64_t count;
  if (fg_shape_elements(in[0].rank, in[0].dims, &count) != 0)
    /* An unknown input dim: the -1 (if any) stays unknown until run time,
     * when the executor infers again with the fed shapes. */
    return fgi_check_bytes(node, &out[0], status);
  if (unknown_at >= 0) {
    if (known == 0)
      return fgi_fail(node, status,
                      "cannot reshape input 0 shape %s into %s: the -1 is "
                      "ambiguous when the other dimensions hold 0 elements",
                      fgi_shape(&in[0], s1), fgi_ints(dims, n, s2));
    if (count % known != 0)
      return fgi_fail(node, status,
                      "cannot reshape input 0 shape %s (%lld elements) into %s: "
                      "%lld is not a multiple of %lld",
                      fgi_shape(&in[0], s1), (long long)count, fgi_ints(dims, n, s2),
                      (long long)count, (long long)known);
    out[0].dims[unknown_at] = count / known;
  } else if (known != count) {
    return fgi_fail(node, status,
                    "cannot reshape input 0 shape %s (%lld elements) into %s "
                    "(%lld elements)",
                    fgi_shape(&in[0], s1), (long long)count, fgi_ints(dims, n, s2),
                    (long long)known);
  }
  return 0;
}

int fgi_attr_perm(const fg_node *node, const char *name, const char *what, const fg_tinfo *x,
                  int which, int *perm, fg_status *st) {
  const int64_t *v;
  int n;
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_attr_ints(node, name, 1, &v, &n, st)) return -1;
  if (n != x->rank)
    return fgi_fail(node, st, "%s %s has %d entries but input %d shape %s has rank %d", what,
                    fgi_ints(v, n, s1), n, which, fgi_shape(x, s2), x->rank);
  int seen[FG_MAX_RANK] = {0};
  for (int i = 0; i < n; i++) {
    if (v[i] < 0 || v[i] >= n || seen[v[i]])
      return fgi_fail(node, st, "%s %s is not a permutation of 0..%d", what, fgi_ints(v, n, s1),
                      n - 1);
    seen[v[i]] = 1;
    perm[i] = (int)v[i];
  }
  return 0;
}

int fgi_infer_transpose(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int perm[FG_MAX_RANK];
  if (fgi_attr_perm(node, "perm", "perm", &in[0], 0, perm, status)) return -1;
  out[0].dtype = in[0].dtype;
  out[0].rank = in[0].rank;
  for (int i = 0; i < in[0].rank; i++)
    out[0].dims[i] = in[0].dims[perm[i]];
  return 0;
}

int fgi_infer_concat(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  int64_t axis_attr;
  int axis;
  if (node->n_inputs < 1) return fgi_fail(node, status, "needs at least one input");
  if (fgi_attr_int(node, "axis", 1, 0, &axis_attr, status)) return -1;
  if (fgi_axis(node, "axis", axis_attr, &in[0], &axis, status)) return -1;
  out[0] = in[0];
  for (int i = 1; i < node->n_inputs; i++) {
    if (fgi_same_dtype(node, in, 0, i, status)) return -1;
    if (in[i].rank != in[0].rank)
      return fgi_fail(node, status,
                      "input %d shape %s has rank %d but input 0 shape %s has "
                      "rank %d",
                      i, fgi_shape(&in[i], s1), in[i].rank, fgi_shape(&in[0], s2), in[0].rank);
    for (int d = 0; d < in[0].rank; d++) {
      int64_t x = out[0].dims[d], y = in[i].dims[d];
      if (d == axis) {
        if (x < 0 || y < 0)
          out[0].dims[d] = FG_DIM_UNKNOWN;
        else if (x > INT64_MAX - y)
          return fgi_fail(node, status, "concatenated dim %d overflows", d);
        else
          out[0].dims[d] = x + y;
      } else if (x >= 0 && y >= 0 && x != y) {
        return fgi_fail(node, status,
                        "input %d shape %s does not match input 0 shape %s at dim "
                        "%d (%lld vs %lld); only the axis %d may differ",
                        i, fgi_shape(&in[i], s1), fgi_shape(&in[0], s2), d, (long long)y,
                        (long long)x, axis);
      } else if (x < 0) {
        out[0].dims[d] = y < 0 ? FG_DIM_UNKNOWN : y;
      }
    }
  }
  return fgi_check_bytes(node, &out[0], status);
}

/* ---- slice and slice_grad ------------------------------------------------ */

/* The begin and size attributes of a slice of `t`, which messages call
 * `label` ("input 0"): one entry per dim of t. */
static int slice_attrs(const fg_node *node, const fg_tinfo *t, const char *label,
                       const int64_t **begin, const int64_t **size, fg_status *status) {
  int nb, ns;
  char s1[FGI_STR];
  if (fgi_attr_ints(node, "begin", 1, begin, &nb, status)) return -1;
  if (fgi_attr_ints(node, "size", 1, size, &ns, status)) return -1;
  if (nb != t->rank || ns != t->rank)
    return fgi_fail(node, status, "begin has %d entries and size %d, but %s shape %s has rank %d",
                    nb, ns, label, fgi_shape(t, s1), t->rank);
  return 0;
}

/* Dim d of the slice of `t` from begin b with size s (-1: to the end),
 * checked against t's dim where it is known; FG_DIM_UNKNOWN until run time
 * where it is not. */
static int slice_dim(const fg_node *node, const fg_tinfo *t, const char *label, int d, int64_t b,
                     int64_t s, int64_t *out, fg_status *status) {
  char s1[FGI_STR];
  int64_t dim = t->dims[d];
  if (b < 0) return fgi_fail(node, status, "begin[%d] = %lld is negative", d, (long long)b);
  if (s < -1)
    return fgi_fail(node, status,
                    "size[%d] = %lld is negative (only -1, meaning to the end, is allowed)", d,
                    (long long)s);
  if (dim < 0) {
    /* Unknown at build time: checked again at run time. */
    *out = s == -1 ? FG_DIM_UNKNOWN : s;
    return 0;
  }
  if (b > dim)
    return fgi_fail(node, status, "begin[%d] = %lld is past the end of dim %d of %s shape %s", d,
                    (long long)b, d, label, fgi_shape(t, s1));
  if (s > dim - b)
    return fgi_fail(node, status,
                    "begin[%d] + size[%d] = %lld + %lld exceeds dim %d of %s shape %s", d, d,
                    (long long)b, (long long)s, d, label, fgi_shape(t, s1));
  *out = s == -1 ? dim - b : s;
  return 0;
}

int fgi_infer_slice(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const int64_t *begin, *size;
  int r = in[0].rank;
  if (slice_attrs(node, &in[0], "input 0", &begin, &size, status)) return -1;
  out[0].dtype = in[0].dtype;
  out[0].rank = r;
  for (int d = 0; d < r; d++)
    if (slice_dim(node, &in[0], "input 0", d, begin[d], size[d], &out[0].dims[d], status))
      return -1;
  return 0;
}

/* slice_grad(dy, like) places dy at the slice of a zero tensor shaped like
 * `like`: slice's rules applied to like's shape, plus dy having the slice's
 * shape. Any dtype passes, but a file could carry garbage. */
int fgi_infer_slice_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                         fg_status *status) {
  const int64_t *begin, *size;
  const fg_tinfo *dy = &in[0], *like = &in[1];
  int r = like->rank;
  char s1[FGI_STR], s2[FGI_STR];
  for (int i = 0; i < 2; i++)
    if (!fgi_dtype_valid(in[i].dtype))
      return fgi_fail(node, status, "input %d (%s) has invalid dtype %d", i, i ? "like" : "dy",
                      (int)in[i].dtype);
  if (slice_attrs(node, like, "input 1 (like)", &begin, &size, status)) return -1;
  if (dy->rank != r)
    return fgi_fail(node, status,
                    "input 0 (dy) shape %s has rank %d, but input 1 (like) shape %s has rank %d",
                    fgi_shape(dy, s1), dy->rank, fgi_shape(like, s2), r);
  for (int d = 0; d < r; d++) {
    int64_t want = -1;
    if (slice_dim(node, like, "input 1 (like)", d, begin[d], size[d], &want, status)) return -1;
    if (want >= 0 && dy->dims[d] >= 0 && dy->dims[d] != want)
      return fgi_fail(node, status,
                      "input 0 (dy) shape %s does not match the slice of input 1 (like) shape %s "
                      "at dim %d (%lld vs %lld, begin %lld size %lld)",
                      fgi_shape(dy, s1), fgi_shape(like, s2), d, (long long)dy->dims[d],
                      (long long)want, (long long)begin[d], (long long)size[d]);
  }
  out[0] = *like;
  out[0].dtype = dy->dtype;
  return fgi_check_bytes(node, &out[0], status);
}

int fgi_infer_gather(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  const fg_tinfo *p = &in[0], *idx = &in[1];
  if (p->rank < 1)
    return fgi_fail(node, status, "input 0 (params) shape %s is a scalar; gather needs rank >= 1",
                    fgi_shape(p, s1));
  if (!fgi_is_index(idx->dtype))
    return fgi_fail(node, status,
                    "input 1 (indices) dtype %s is not allowed; gather needs i32 "
                    "or i64",
                    fg_dtype_name(idx->dtype));
  int r = idx->rank + p->rank - 1;
  if (r > FG_MAX_RANK)
    return fgi_fail(node, status,
                    "output rank %d (input 1 shape %s + input 0 shape %s without "
                    "dim 0) is above the maximum %d",
                    r, fgi_shape(idx, s1), fgi_shape(p, s2), FG_MAX_RANK);
  out[0].dtype = p->dtype;
  out[0].rank = r;
  for (int i = 0; i < idx->rank; i++)
    out[0].dims[i] = idx->dims[i];
  for (int i = 1; i < p->rank; i++)
    out[0].dims[idx->rank + i - 1] = p->dims[i];
  return fgi_check_bytes(node, &out[0], status);
}

int fgi_infer_one_hot(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  char s1[FGI_STR];
  int64_t depth;
  fg_dtype dt;
  if (!fgi_is_index(in[0].dtype))
    return fgi_fail(node, status,
                    "input 0 (indices) dtype %s is not allowed; one_hot needs i32 "
                    "or i64",
                    fg_dtype_name(in[0].dtype));
  if (fgi_attr_int(node, "depth", 1, 0, &depth, status)) return -1;
  if (depth < 1) return fgi_fail(node, status, "depth %lld must be >= 1", (long long)depth);
  if (fgi_attr_dtype(node, "dtype", &dt, status)) return -1;
  if (!fgi_is_numeric(dt))
    return fgi_fail(node, status, "dtype %s is not allowed; one_hot needs f32, f64, i32 or i64",
                    fg_dtype_name(dt));
  if (in[0].rank + 1 > FG_MAX_RANK)
    return fgi_fail(node, status,
                    "output rank %d (input 0 shape %s + depth) is above the "
                    "maximum %d",
                    in[0].rank + 1, fgi_shape(&in[0], s1), FG_MAX_RANK);
  out[0].dtype = dt;
  out[0].rank = in[0].rank + 1;
  for (int i = 0; i < in[0].rank; i++)
    out[0].dims[i] = in[0].dims[i];
  out[0].dims[in[0].rank] = depth;
  return fgi_check_bytes(node, &out[0], status);
}

int fgi_parse_transpose(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  return fgi_attr_perm(node, "perm", "perm", &in[0], 0, p->transpose.perm, st);
}

int fgi_parse_concat(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  int64_t axis;
  if (fgi_attr_int(node, "axis", 1, 0, &axis, st)) return -1;
  return fgi_axis(node, "axis", axis, &in[0], &p->concat.axis, st);
}

/* slice and slice_grad: begin as given (inference checked its range); the
 * block's sizes are the output's (slice) or dy's (slice_grad) dims. */
int fgi_parse_slice(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  const int64_t *begin;
  int n;
  (void)in;
  if (fgi_attr_ints(node, "begin", 1, &begin, &n, st)) return -1;
  if (n > FG_MAX_RANK) return fgi_fail(node, st, "begin has %d entries", n);
  for (int i = 0; i < n; i++)
    p->slice.begin[i] = begin[i];
  return 0;
}
