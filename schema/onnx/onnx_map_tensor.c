/* ONNX shape and tensor ops: Reshape, Flatten, Transpose, Squeeze,
 * Unsqueeze, Concat, Split and Gather here; Slice, Expand, Tile, Pad and
 * OneHot in onnx_map_tensor2.c. Each folds when its data is known at import
 * (onnx_map_tensor_fold.h), carrying batch-dependent entries, and otherwise
 * appends the flowgraph op.
 *
 * The unknown batch size. flowgraph resolves one unknown dimension per
 * tensor from the feeds when it plans a run, and the importer gives every
 * unknown dimension the meaning "the batch size" (Shape marks it so). A
 * Reshape whose shape holds one batch-dependent entry leaves that entry to
 * the plan (-1). When the shape also holds a -1, the -1 is computed here
 * from the input's known dimensions under the same convention (the
 * input's one unknown dimension is the batch), so the plan still sees a
 * single -1. */
#include <stdlib.h>
#include <string.h>

#include "onnx_map_tensor_fold.h"

#define STR 160

static fg_graph *G(fgx_ctx *c) { return fgx_graph(c); }

/* ---- Reshape -------------------------------------------------------------- */

/* out[] from the shape s for input x: 0 copies x's dim (allowzero 0), -1 is
 * inferred; *batch_at is the entry that stands for coef * batch (-1: none),
 * *infer_at the -1 (-1: none). */
static int reshape_entries(fgx_ctx *c, const fgx_node *n, const fgt_info *x, const fgt_ivec *s,
                           int allowzero, int64_t *out, int *batch_at, int64_t *coef,
                           int *infer_at) {
  char b1[STR], b2[STR];
  int has_zero = 0;
  *batch_at = *infer_at = -1;
  *coef = 1;
  for (int i = 0; i < s->n; i++) {
    int64_t v = s->v[i];
    int batch = s->sym[i];
    out[i] = v;
    if (!batch && v == 0 && !allowzero) {
      if (i >= x->rank)
        return fgx_fail(
            c, n, FG_INVALID_GRAPH, "shape %s copies dim %d (a 0) but input 0 shape %s has rank %d",
            fgt_ivec_str(s, b1, STR), i, fgt_dims_str(x->rank, x->dims, b2, STR), x->rank);
      out[i] = x->dims[i];
      batch = x->dims[i] < 0;
      v = 1;
    } else if (!batch && v == -1) {
      if (*infer_at >= 0)
        return fgx_fail(c, n, FG_INVALID_GRAPH, "shape %s has two -1 entries",
                        fgt_ivec_str(s, b1, STR));
      *infer_at = i;
      continue;
    } else if (!batch && v < 0) {
      return fgx_fail(c, n, FG_INVALID_GRAPH, "shape %s has the negative entry %lld at %d",
                      fgt_ivec_str(s, b1, STR), (long long)v, i);
    }
    has_zero |= !batch && v == 0;
    if (batch) {
      if (*batch_at >= 0)
        return fgx_fail(c, n, FG_UNIMPLEMENTED,
                        "shape %s (input 0 shape %s) has two entries that depend on the batch "
                        "size (%d and %d); flowgraph resolves one per tensor",
                        fgt_ivec_str(s, b1, STR), fgt_dims_str(x->rank, x->dims, b2, STR),
                        *batch_at, i);
      *batch_at = i;
      *coef = v;
    }
  }
  if (allowzero && has_zero && *infer_at >= 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "shape %s has both 0 and -1 with allowzero=1",
                    fgt_ivec_str(s, b1, STR));
  return 0;
}

/* Shape holds coef * batch at batch_at and a -1 at infer_at: the -1 is
 * x's elements / batch over the other entries, x's one unknown dim being
 * the batch. */
static int reshape_resolve(fgx_ctx *c, const fgx_node *n, const fgt_info *x, const fgt_ivec *s,
                           int64_t *out, int batch_at, int64_t coef, int infer_at) {
  char b1[STR], b2[STR];
  int64_t per_batch = 1, rest = coef;
  int unknown = 0;
  for (int d = 0; d < x->rank; d++) {
    if (x->dims[d] < 0)
      unknown++;
    else
      per_batch *= x->dims[d];
  }
  for (int i = 0; i < s->n; i++)
    if (i != batch_at && i != infer_at) rest = fgt_mul(rest, out[i]);
  if (unknown != 1 || rest <= 0 || per_batch % rest != 0)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "shape %s for input 0 shape %s holds a -1 beside an entry that depends on "
                    "the batch size, and the -1 does not follow from the known dims",
                    fgt_ivec_str(s, b1, STR), fgt_dims_str(x->rank, x->dims, b2, STR));
  out[infer_at] = per_batch / rest;
  out[batch_at] = -1;
  return 0;
}

static int map_reshape(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  fgt_ivec s;
  int64_t allowzero = 0, coef, out[FG_MAX_RANK];
  int batch_at, infer_at;
  char b1[STR], b2[STR];
  if (fgt_info_of(c, n, 0, &x)) return -1;
  if (fgx_opset(c) >= 14 && fgx_attr_int(c, n, "allowzero", 0, &allowzero) < 0) return -1;
  if (allowzero != 0 && allowzero != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute allowzero = %lld must be 0 or 1",
                    (long long)allowzero);
  if (fgt_read_ivec(c, n, 1, "shape", &s)) return -1;
  if (s.n > FG_MAX_RANK)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "shape %s has rank %d, above flowgraph's maximum %d",
                    fgt_ivec_str(&s, b1, STR), s.n, FG_MAX_RANK);
  if (reshape_entries(c, n, &x, &s, (int)allowzero, out, &batch_at, &coef, &infer_at)) return -1;
  if (batch_at >= 0 && infer_at >= 0) {
    if (reshape_resolve(c, n, &x, &s, out, batch_at, coef, infer_at)) return -1;
  } else if (batch_at >= 0) {
    out[batch_at] = -1;
  }
  int64_t count = fgt_elems(x.rank, x.dims);
  const fgx_known *k = fgt_foldable(c, n, 0, count);
  if (k && batch_at < 0) {
    int64_t known = 1;
    for (int i = 0; i < s.n; i++)
      if (i != infer_at) known = fgt_mul(known, out[i]);
    if (infer_at >= 0) out[infer_at] = known > 0 ? count / known : -1;
    if (known < 0 || fgt_elems(s.n, out) != count)
      return fgx_fail(
          c, n, FG_INVALID_GRAPH, "cannot reshape input 0 shape %s (%lld elements) into shape %s",
          fgt_dims_str(x.rank, x.dims, b1, STR), (long long)count, fgt_ivec_str(&s, b2, STR));
    return fgt_fold_reshape(c, n, 0, k, s.n, out);
  }
  fg_output xo = fgx_input(c, n, 0);
  if (xo.node < 0) return -1;
  return fgt_bind(c, n, 0, fg_reshape(G(c), xo, s.n, out));
}

/* ---- Flatten -------------------------------------------------------------- */

static int map_flatten(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  int64_t axis;
  char b1[STR];
  if (fgt_info_of(c, n, 0, &x)) return -1;
  if (fgx_attr_int(c, n, "axis", 1, &axis) < 0) return -1;
  if (axis < -(int64_t)x.rank || axis > x.rank)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "attribute axis = %lld is out of range [%d, %d] for input 0 shape %s",
                    (long long)axis, -x.rank, x.rank, fgt_dims_str(x.rank, x.dims, b1, STR));
  if (axis < 0) axis += x.rank;
  int64_t count = fgt_elems(x.rank, x.dims);
  const fgx_known *k = fgt_foldable(c, n, 0, count);
  if (k) {
    int64_t d[2] = {fgt_elems((int)axis, x.dims), 0};
    d[1] = d[0] ? count / d[0] : fgt_elems(x.rank - (int)axis, x.dims + axis);
    return fgt_fold_reshape(c, n, 0, k, 2, d);
  }
  fg_output xo = fgx_input(c, n, 0);
  if (xo.node < 0) return -1;
  return fgt_bind(c, n, 0, fg_flatten(G(c), xo, (int)axis));
}

/* ---- Transpose ------------------------------------------------------------ */

static int map_transpose(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  const int64_t *pv;
  int64_t plen, perm[FG_MAX_RANK];
  char b1[STR];
  if (fgt_info_of(c, n, 0, &x)) return -1;
  int has = fgx_attr_ints(c, n, "perm", &pv, &plen);
  if (has < 0) return -1;
  if (has && plen != x.rank)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute perm has %lld entries for input 0 shape %s",
                    (long long)plen, fgt_dims_str(x.rank, x.dims, b1, STR));
  int seen[FG_MAX_RANK] = {0};
  for (int d = 0; d < x.rank; d++) {
    perm[d] = has ? pv[d] : x.rank - 1 - d; /* default: the dims reversed */
    if (perm[d] < 0 || perm[d] >= x.rank || seen[perm[d]]) {
      fgt_ivec s = {.n = x.rank};
      memcpy(s.v, pv, (size_t)x.rank * sizeof pv[0]);
      return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute perm %s is not a permutation of 0..%d",
                      fgt_ivec_str(&s, b1, STR), x.rank - 1);
    }
    seen[perm[d]] = 1;
  }
  const fgx_known *k = fgt_foldable(c, n, 0, fgt_elems(x.rank, x.dims));
  if (k) {
    int64_t od[FG_MAX_RANK], st[FG_MAX_RANK];
    fgt_map m;
    fgt_strides(k->t, st);
    for (int d = 0; d < x.rank; d++)
      od[d] = x.dims[perm[d]];
    if (fgt_elems(x.rank, od) == 0) return fgt_fold_map(c, n, 0, k, x.rank, od, NULL, x.rank, od);
    if (fgt_map_init(c, n, &m, x.rank, od)) return -1;
    for (int d = 0; d < x.rank; d++)
      for (int64_t i = 0; i < od[d]; i++)
        m.off[d][i] = i * st[perm[d]];
    int r = fgt_fold_map(c, n, 0, k, x.rank, od, m.off, x.rank, od);
    fgt_map_free(&m);
    return r;
  }
  fg_output xo = fgx_input(c, n, 0);
  if (xo.node < 0) return -1;
  return fgt_bind(c, n, 0, fg_transpose(G(c), xo, x.rank, perm));
}

/* ---- Squeeze and Unsqueeze ------------------------------------------------ */

/* The axes of Squeeze/Unsqueeze: the attribute before opset 13, input 1
 * from 13. *present 0 when neither is given. */
static int read_axes(fgx_ctx *c, const fgx_node *n, const int64_t **axes, int64_t *len,
                     int *present) {
  *len = 0;
  *present = 0;
  if (fgx_opset(c) < 13) {
    int has = fgx_attr_ints(c, n, "axes", axes, len);
    if (has < 0) return -1;
    *present = has;
    return 0;
  }
  if (!fgx_has_input(n, 1)) return 0;
  *present = 1;
  return fgx_input_ints(c, n, 1, axes, len);
}

static int map_squeeze(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  const int64_t *av = NULL;
  int64_t alen, axes[FG_MAX_RANK], od[FG_MAX_RANK];
  int present, k = 0, r = 0;
  char b1[STR];
  if (fgt_info_of(c, n, 0, &x)) return -1;
  if (read_axes(c, n, &av, &alen, &present)) return -1;
  int drop[FG_MAX_RANK] = {0};
  if (alen > x.rank)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "%lld axes for input 0 shape %s", (long long)alen,
                    fgt_dims_str(x.rank, x.dims, b1, STR));
  for (int64_t i = 0; i < alen; i++) {
    int64_t a;
    if (fgx_axis(c, n, "axes", av[i], x.rank, &a)) return -1;
    if (drop[a]) return fgx_fail(c, n, FG_INVALID_GRAPH, "axes name dim %lld twice", (long long)a);
    if (x.dims[a] >= 0 && x.dims[a] != 1)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "axes name dim %lld of input 0 shape %s, which is not 1", (long long)a,
                      fgt_dims_str(x.rank, x.dims, b1, STR));
    drop[a] = 1;
  }
  for (int d = 0; !present && d < x.rank; d++) {
    if (x.dims[d] < 0)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "no axes given, so every dim of size 1 goes, but dim %d of input 0 shape %s "
                      "depends on the batch size",
                      d, fgt_dims_str(x.rank, x.dims, b1, STR));
    drop[d] = x.dims[d] == 1;
  }
  for (int d = 0; d < x.rank; d++) {
    if (drop[d])
      axes[k++] = d;
    else
      od[r++] = x.dims[d];
  }
  const fgx_known *kn = fgt_foldable(c, n, 0, fgt_elems(x.rank, x.dims));
  if (kn) return fgt_fold_reshape(c, n, 0, kn, r, od);
  fg_output xo = fgx_input(c, n, 0);
  if (xo.node < 0) return -1;
  if (k == 0) return fgt_bind(c, n, 0, fg_reshape(G(c), xo, r, od)); /* nothing to drop */
  return fgt_bind(c, n, 0, fg_squeeze(G(c), xo, axes, k));
}

static int map_unsqueeze(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  const int64_t *av = NULL;
  int64_t alen, axes[FG_MAX_RANK], od[FG_MAX_RANK];
  int present;
  if (fgt_info_of(c, n, 0, &x)) return -1;
  if (read_axes(c, n, &av, &alen, &present)) return -1;
  if (!present || alen == 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "axes are required (%s)",
                    fgx_opset(c) < 13 ? "attribute axes" : "input 1");
  if (x.rank + alen > FG_MAX_RANK)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "output rank %lld is above flowgraph's maximum %d",
                    (long long)(x.rank + alen), FG_MAX_RANK);
  int r = x.rank + (int)alen, newd[FG_MAX_RANK] = {0};
  for (int64_t i = 0; i < alen; i++) {
    if (fgx_axis(c, n, "axes", av[i], r, &axes[i])) return -1;
    if (newd[axes[i]])
      return fgx_fail(c, n, FG_INVALID_GRAPH, "axes name output dim %lld twice",
                      (long long)axes[i]);
    newd[axes[i]] = 1;
  }
  for (int d = 0, j = 0; d < r; d++)
    od[d] = newd[d] ? 1 : x.dims[j++];
  const fgx_known *kn = fgt_foldable(c, n, 0, fgt_elems(x.rank, x.dims));
  if (kn) return fgt_fold_reshape(c, n, 0, kn, r, od);
  fg_output xo = fgx_input(c, n, 0);
  if (xo.node < 0) return -1;
  return fgt_bind(c, n, 0, fg_unsqueeze(G(c), xo, axes, (int)alen));
}

/* ---- Concat --------------------------------------------------------------- */

/* All inputs known: same rank, same dims off the axis; folds. */
static int concat_fold(fgx_ctx *c, const fgx_node *n, const fgx_known **ks, int k, int64_t axis) {
  char b1[STR], b2[STR];
  const fg_tensor *t0 = ks[0]->t;
  for (int i = 1; i < k; i++) {
    const fg_tensor *t = ks[i]->t;
    int bad = fg_tensor_rank(t) != fg_tensor_rank(t0);
    for (int d = 0; !bad && d < fg_tensor_rank(t0); d++)
      bad = d != axis && fg_tensor_dim(t, d) != fg_tensor_dim(t0, d);
    if (bad || fg_tensor_dtype(t) != fg_tensor_dtype(t0))
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "input %d shape %s %s does not match input 0 shape %s %s off axis %lld", i,
                      fgt_dims_str(fg_tensor_rank(t), fg_tensor_dims(t), b1, STR),
                      fg_dtype_name(fg_tensor_dtype(t)),
                      fgt_dims_str(fg_tensor_rank(t0), fg_tensor_dims(t0), b2, STR),
                      fg_dtype_name(fg_tensor_dtype(t0)), (long long)axis);
  }
  return fgt_fold_concat(c, n, 0, ks, k, (int)axis);
}

static int map_concat(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  int64_t axis;
  int k = fgx_num_inputs(n), r;
  if (k < 1) return fgx_fail(c, n, FG_INVALID_GRAPH, "needs at least one input");
  if (fgt_info_of(c, n, 0, &x)) return -1;
  int has = fgx_attr_int(c, n, "axis", 0, &axis);
  if (has < 0) return -1;
  if (!has) return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute axis is required");
  if (fgx_axis(c, n, "axis", axis, x.rank, &axis)) return -1;
  const fgx_known **ks = calloc((size_t)k, sizeof *ks);
  fg_output *xs = calloc((size_t)k, sizeof *xs);
  if (!ks || !xs) {
    free(ks), free(xs);
    return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory for %d inputs", k);
  }
  int all = 1, any_sym = 0;
  int64_t total = 0;
  for (int i = 0; i < k; i++) {
    ks[i] = fgx_input_known(c, n, i);
    all &= ks[i] != NULL;
    if (!ks[i]) continue;
    any_sym |= ks[i]->sym != NULL;
    int64_t e = fg_tensor_num_elements(ks[i]->t);
    total = total > FGT_FOLD_MAX || e > FGT_FOLD_MAX ? FGT_FOLD_MAX + 1 : total + e;
  }
  if (all && (any_sym || total <= FGT_FOLD_MAX)) {
    r = concat_fold(c, n, ks, k, axis);
  } else {
    r = 0;
    for (int i = 0; i < k && !r; i++) {
      xs[i] = fgx_input(c, n, i);
      r = xs[i].node < 0 ? -1 : 0;
    }
    if (!r) r = fgt_bind(c, n, 0, fg_concat(G(c), xs, k, (int)axis));
  }
  free(ks), free(xs);
  return r;
}

/* ---- Split ---------------------------------------------------------------- */

/* Output i of a Split of known x: the part [start, start + len) of axis. */
static int split_fold(fgx_ctx *c, const fgx_node *n, const fgx_known *k, int axis, int oi,
                      int64_t start, int64_t len) {
  int r = fg_tensor_rank(k->t);
  int64_t od[FG_MAX_RANK], st[FG_MAX_RANK];
  memcpy(od, fg_tensor_dims(k->t), (size_t)r * sizeof od[0]);
  od[axis] = len;
  if (fgt_elems(r, od) == 0) return fgt_fold_map(c, n, oi, k, r, od, NULL, r, od);
  fgt_strides(k->t, st);
  fgt_map m;
  if (fgt_map_init(c, n, &m, r, od)) return -1;
  for (int d = 0; d < r; d++)
    for (int64_t i = 0; i < od[d]; i++)
      m.off[d][i] = (i + (d == axis ? start : 0)) * st[d];
  int rc = fgt_fold_map(c, n, oi, k, r, od, m.off, r, od);
  fgt_map_free(&m);
  return rc;
}

static int map_split(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  int64_t axis, sizes[64], len = 0;
  const int64_t *sv = NULL;
  int k = fgx_num_outputs(n);
  char b1[STR];
  if (fgt_info_of(c, n, 0, &x)) return -1;
  if (fgx_attr_int(c, n, "axis", 0, &axis) < 0) return -1;
  if (fgx_axis(c, n, "axis", axis, x.rank, &axis)) return -1;
  if (k < 1 || k > 64)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "%d outputs; flowgraph splits into 1 to 64", k);
  if (fgx_opset(c) < 13) {
    if (fgx_attr_ints(c, n, "split", &sv, &len) < 0) return -1;
  } else if (fgx_has_input(n, 1) && fgx_input_ints(c, n, 1, &sv, &len)) {
    return -1;
  }
  int64_t dim = x.dims[axis], sum = 0;
  if (sv) {
    if (len != k)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "split has %lld sizes for %d outputs", (long long)len,
                      k);
    for (int i = 0; i < k; i++) {
      if (sv[i] < 0)
        return fgx_fail(c, n, FG_INVALID_GRAPH, "split size %d is negative (%lld)", i,
                        (long long)sv[i]);
      if (sv[i] > INT64_MAX - sum)
        return fgx_fail(c, n, FG_INVALID_GRAPH, "split sizes add up past 2^63");
      sizes[i] = sv[i];
      sum += sv[i];
    }
    if (dim >= 0 && sum != dim)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "split sizes add up to %lld but dim %lld of input 0 shape %s is %lld",
                      (long long)sum, (long long)axis, fgt_dims_str(x.rank, x.dims, b1, STR),
                      (long long)dim);
  } else if (dim >= 0) {
    if (dim % k != 0)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "dim %lld of input 0 shape %s (%lld) does not split into %d equal parts",
                      (long long)axis, fgt_dims_str(x.rank, x.dims, b1, STR), (long long)dim, k);
    for (int i = 0; i < k; i++)
      sizes[i] = dim / k;
  }
  const fgx_known *kn = fgt_foldable(c, n, 0, fgt_elems(x.rank, x.dims));
  if (kn) {
    int64_t start = 0;
    for (int i = 0; i < k; i++) {
      if (fgx_has_output(n, i) && split_fold(c, n, kn, (int)axis, i, start, sizes[i])) return -1;
      start += sizes[i];
    }
    return 0;
  }
  fg_output xo = fgx_input(c, n, 0), outs[64];
  if (xo.node < 0) return -1;
  if (fg_split(G(c), xo, (int)axis, sv || dim >= 0 ? sizes : NULL, k, outs))
    return fgt_bind(c, n, 0, FG_NO_OUTPUT);
  for (int i = 0; i < k; i++)
    if (fgx_has_output(n, i) && fgt_bind(c, n, i, outs[i])) return -1;
  return 0;
}

/* ---- Gather --------------------------------------------------------------- */

fg_output fgt_gather_axis(fgx_ctx *c, fg_output x, int r, int axis, fg_output idx, int q) {
  fg_graph *g = G(c);
  if (axis == 0) return fg_gather(g, x, idx);
  int64_t p1[FG_MAX_RANK], p2[FG_MAX_RANK];
  /* x's axis first: gather gives [idx..., x[:axis], x[axis+1:]] */
  p1[0] = axis;
  for (int d = 0, j = 1; d < r; d++)
    if (d != axis) p1[j++] = d;
  fg_output y = fg_gather(g, fg_transpose(g, x, r, p1), idx);
  /* ... and back to [x[:axis], idx..., x[axis+1:]] */
  int out_r = q + r - 1;
  for (int j = 0; j < out_r; j++)
    p2[j] = j < axis ? q + j : j < axis + q ? j - axis : j;
  return fg_transpose(g, y, out_r, p2);
}

/* Known indices, negative ones counted from the end, each checked against
 * dim: a new array of *m entries the caller frees; NULL after fgx_fail. */
static int64_t *known_indices(fgx_ctx *c, const fgx_node *n, const fgx_known *ik, int64_t dim,
                              int64_t axis) {
  int64_t m = fg_tensor_num_elements(ik->t);
  fg_dtype dt = fg_tensor_dtype(ik->t);
  if (ik->sym)
    for (int64_t i = 0; i < m; i++)
      if (ik->sym[i]) {
        fgx_fail(c, n, FG_UNIMPLEMENTED, "input 1 (indices) depends on the batch size");
        return NULL;
      }
  int64_t *v = malloc((size_t)(m > 0 ? m : 1) * sizeof *v);
  if (!v) {
    fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory for %lld indices", (long long)m);
    return NULL;
  }
  const void *p = fg_tensor_data(ik->t);
  for (int64_t i = 0; i < m; i++) {
    int64_t e = dt == FG_I64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
    if (dim >= 0 && (e < -dim || e >= dim)) {
      fgx_fail(c, n, FG_INVALID_GRAPH,
               "input 1 (indices) element %lld is %lld, out of range [%lld, %lld) for dim %lld",
               (long long)i, (long long)e, (long long)-dim, (long long)dim, (long long)axis);
      free(v);
      return NULL;
    }
    if (e < 0 && dim < 0) {
      fgx_fail(c, n, FG_UNIMPLEMENTED,
               "input 1 (indices) element %lld is %lld, counted from the end of dim %lld, "
               "which depends on the batch size",
               (long long)i, (long long)e, (long long)axis);
      free(v);
      return NULL;
    }
    v[i] = e < 0 ? e + dim : e;
  }
  return v;
}

/* Gather of known data at known indices v (m of them, shape idims). */
static int gather_fold(fgx_ctx *c, const fgx_node *n, const fgx_known *k, int axis,
                       const int64_t *v, int64_t m, int q, const int64_t *idims) {
  int r = fg_tensor_rank(k->t);
  const int64_t *xd = fg_tensor_dims(k->t);
  int64_t md[FG_MAX_RANK], od[FG_MAX_RANK], st[FG_MAX_RANK];
  int orank = 0;
  for (int d = 0; d < r; d++)
    md[d] = d == axis ? m : xd[d];
  for (int d = 0; d < axis; d++)
    od[orank++] = xd[d];
  for (int d = 0; d < q; d++)
    od[orank++] = idims[d];
  for (int d = axis + 1; d < r; d++)
    od[orank++] = xd[d];
  if (fgt_elems(r, md) == 0) return fgt_fold_map(c, n, 0, k, r, md, NULL, orank, od);
  fgt_strides(k->t, st);
  fgt_map mp;
  if (fgt_map_init(c, n, &mp, r, md)) return -1;
  for (int d = 0; d < r; d++)
    for (int64_t i = 0; i < md[d]; i++)
      mp.off[d][i] = (d == axis ? v[i] : i) * st[d];
  int rc = fgt_fold_map(c, n, 0, k, r, md, mp.off, orank, od);
  fgt_map_free(&mp);
  return rc;
}

/* Gather of graph value xo at known indices v. Consecutive ascending
 * indices (x[:, 0], a class token, a window) with at most one index dim
 * are a slice along the axis (and a squeeze for a scalar index), which
 * copies only what is picked; others gather. */
static fg_output gather_known(fgx_ctx *c, fg_output xo, const fgt_info *x, int axis,
                              const int64_t *v, int64_t m, int q, const int64_t *idims) {
  int run = q <= 1 && m >= 1;
  for (int64_t i = 1; run && i < m; i++)
    run = v[i] == v[0] + i;
  if (!run) return fgt_gather_axis(c, xo, x->rank, axis, fgt_const_i64(c, q, idims, v), q);
  int64_t begin[FG_MAX_RANK], size[FG_MAX_RANK], ax = axis;
  for (int d = 0; d < x->rank; d++) {
    begin[d] = d == axis ? v[0] : 0;
    size[d] = d == axis ? m : -1;
  }
  fg_output y = fg_slice(fgx_graph(c), xo, x->rank, begin, size);
  return q == 0 ? fg_squeeze(fgx_graph(c), y, &ax, 1) : y;
}

static int map_gather(fgx_ctx *c, const fgx_node *n) {
  fgt_info x, ix;
  int64_t axis;
  char b1[STR], b2[STR];
  if (fgt_info_of(c, n, 0, &x) || fgt_info_of(c, n, 1, &ix)) return -1;
  if (fgx_attr_int(c, n, "axis", 0, &axis) < 0) return -1;
  if (x.rank < 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 0 (data) is a scalar; Gather needs rank >= 1");
  if (fgx_axis(c, n, "axis", axis, x.rank, &axis)) return -1;
  if (ix.dtype != FG_I64 && ix.dtype != FG_I32)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 1 (indices) has dtype %s; it must be int32 or "
                    "int64",
                    fg_dtype_name(ix.dtype));
  if (x.rank - 1 + ix.rank > FG_MAX_RANK)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "output rank %d (data %s, indices %s) is above flowgraph's maximum %d",
                    x.rank - 1 + ix.rank, fgt_dims_str(x.rank, x.dims, b1, STR),
                    fgt_dims_str(ix.rank, ix.dims, b2, STR), FG_MAX_RANK);
  int64_t dim = x.dims[axis];
  const fgx_known *ik = fgx_input_known(c, n, 1);
  if (ik) {
    int64_t m = fg_tensor_num_elements(ik->t);
    int64_t *v = known_indices(c, n, ik, dim, axis);
    if (!v) return -1;
    int64_t rest = fgt_elems(x.rank, x.dims);
    rest = rest < 0 || dim <= 0 ? -1 : fgt_mul(rest / dim, m);
    const fgx_known *k = fgt_foldable(c, n, 0, rest);
    int rc;
    if (k) {
      rc = gather_fold(c, n, k, (int)axis, v, m, ix.rank, ix.dims);
    } else {
      fg_output xo = fgx_input(c, n, 0);
      rc = xo.node < 0
               ? -1
               : fgt_bind(c, n, 0, gather_known(c, xo, &x, (int)axis, v, m, ix.rank, ix.dims));
    }
    free(v);
    return rc;
  }
  fg_output xo = fgx_input(c, n, 0), io = fgx_input(c, n, 1);
  if (xo.node < 0 || io.node < 0) return -1;
  /* Run-time indices: ONNX counts negative ones from the end. Where the
   * dim depends on the batch size, flowgraph's gather refuses them at run
   * time (an index out of range) rather than wrapping. */
  if (dim >= 0) io = fgt_wrap_negative(c, io, ix.dtype, dim);
  return fgt_bind(c, n, 0, fgt_gather_axis(c, xo, x.rank, (int)axis, io, ix.rank));
}

const fgx_op fgx_ops_tensor[] = {
    {"Reshape", map_reshape},
    {"Flatten", map_flatten},
    {"Transpose", map_transpose},
    {"Squeeze", map_squeeze},
    {"Unsqueeze", map_unsqueeze},
    {"Concat", map_concat},
    {"Split", map_split},
    {"Gather", map_gather},
    {"Slice", fgt_map_slice},
    {"Expand", fgt_map_expand},
    {"Tile", fgt_map_tile},
    {"Pad", fgt_map_pad},
    {"OneHot", fgt_map_one_hot},
    {"ScatterND", fgt_map_scatter_nd},
    {"DepthToSpace", fgt_map_depth_to_space},
    {"SpaceToDepth", fgt_map_space_to_depth},
    {"Trilu", fgt_map_trilu},
    {NULL, NULL},
};
