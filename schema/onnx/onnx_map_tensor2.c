/* ONNX Slice, Expand, Tile, Pad and OneHot (the table is in
 * onnx_map_tensor.c). */
#include <stdlib.h>
#include <string.h>

#include "onnx_map_tensor_fold.h"

#define STR     160
#define PAD_MAX (INT64_C(1) << 48)
/* The largest OneHot depth: its range becomes a constant. */
#define DEPTH_MAX (1 << 24)

/* ---- Slice ---------------------------------------------------------------- */

/* One axis of a Slice: the first index, the step and the count. len -1:
 * to the end of a dim that depends on the batch size. */
typedef struct slice_axis {
  int64_t start, step, len;
} slice_axis;

/* starts, ends, axes and steps: attributes before opset 10, inputs from
 * 10. *na and *np are 0 where absent. */
static int slice_args(fgx_ctx *c, const fgx_node *n, const int64_t **st, const int64_t **en,
                      const int64_t **ax, const int64_t **sp, int64_t *ns, int64_t *ne, int64_t *na,
                      int64_t *np) {
  *ax = *sp = NULL;
  *na = *np = 0;
  if (fgx_opset(c) < 10) {
    int a = fgx_attr_ints(c, n, "starts", st, ns), b = fgx_attr_ints(c, n, "ends", en, ne);
    if (a < 0 || b < 0 || fgx_attr_ints(c, n, "axes", ax, na) < 0) return -1;
    if (!a || !b)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute %s is required", a ? "ends" : "starts");
  } else {
    if (fgx_input_ints(c, n, 1, st, ns) || fgx_input_ints(c, n, 2, en, ne)) return -1;
    if (fgx_has_input(n, 3) && fgx_input_ints(c, n, 3, ax, na)) return -1;
    if (fgx_has_input(n, 4) && fgx_input_ints(c, n, 4, sp, np)) return -1;
  }
  if (*ne != *ns || (*ax && *na != *ns) || (*sp && *np != *ns))
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "starts has %lld entries, ends %lld, axes %lld and steps %lld; they must agree",
                    (long long)*ns, (long long)*ne, (long long)(*ax ? *na : *ns),
                    (long long)(*sp ? *np : *ns));
  return 0;
}

/* ONNX's rule: negative start and end count from the end, then both are
 * clamped to [0, dim] (step > 0) or start to [0, dim - 1] and end to
 * [-1, dim - 1] (step < 0). */
static void slice_clamp(int64_t dim, int64_t s, int64_t e, int64_t step, slice_axis *o) {
  if (s < 0) s += dim;
  if (e < 0) e += dim;
  if (step > 0) {
    s = s < 0 ? 0 : s > dim ? dim : s;
    e = e < 0 ? 0 : e > dim ? dim : e;
    o->len = e > s ? 1 + (e - s - 1) / step : 0;
  } else {
    s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
    e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
    o->len = s > e ? 1 + (s - e - 1) / -step : 0;
  }
  o->start = s;
  o->step = step;
}

/* The per-dim slices; dims not named keep everything. */
static int slice_plan(fgx_ctx *c, const fgx_node *n, const fgt_info *x, slice_axis *sa) {
  const int64_t *st, *en, *ax, *sp;
  int64_t ns, ne, na, np;
  int named[FG_MAX_RANK] = {0};
  if (slice_args(c, n, &st, &en, &ax, &sp, &ns, &ne, &na, &np)) return -1;
  for (int d = 0; d < x->rank; d++)
    sa[d] = (slice_axis){0, 1, x->dims[d]};
  for (int64_t i = 0; i < ns; i++) {
    int64_t a, step = sp ? sp[i] : 1;
    if (fgx_axis(c, n, "axes", ax ? ax[i] : i, x->rank, &a)) return -1;
    if (named[a]) return fgx_fail(c, n, FG_INVALID_GRAPH, "axes name dim %lld twice", (long long)a);
    named[a] = 1;
    if (step == 0 || step == INT64_MIN)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "steps[%lld] is %lld", (long long)i, (long long)step);
    int64_t dim = x->dims[a];
    if (dim >= 0) {
      slice_clamp(dim, st[i], en[i], step, &sa[a]);
      continue;
    }
    /* A dim that depends on the batch size: forward slices from a start
     * counted from the front; the plan checks the end against the dim. */
    if (step != 1 || st[i] < 0 || en[i] < 0)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "dim %lld depends on the batch size; flowgraph slices it only with step 1 "
                      "and start, end >= 0 (start %lld, end %lld, step %lld)",
                      (long long)a, (long long)st[i], (long long)en[i], (long long)step);
    sa[a].start = st[i];
    sa[a].len = en[i] >= INT64_MAX / 2 ? -1 : en[i] > st[i] ? en[i] - st[i] : 0;
  }
  return 0;
}

static int slice_fold(fgx_ctx *c, const fgx_node *n, const fgx_known *k, const slice_axis *sa) {
  int r = fg_tensor_rank(k->t);
  int64_t od[FG_MAX_RANK], strides[FG_MAX_RANK];
  for (int d = 0; d < r; d++)
    od[d] = sa[d].len;
  if (fgt_elems(r, od) == 0) return fgt_fold_map(c, n, 0, k, r, od, NULL, r, od);
  fgt_strides(k->t, strides);
  fgt_map m;
  if (fgt_map_init(c, n, &m, r, od)) return -1;
  for (int d = 0; d < r; d++)
    for (int64_t i = 0; i < od[d]; i++)
      m.off[d][i] = (sa[d].start + i * sa[d].step) * strides[d];
  int rc = fgt_fold_map(c, n, 0, k, r, od, m.off, r, od);
  fgt_map_free(&m);
  return rc;
}

/* Steps other than 1 become a gather of the picked indices along the axis
 * (its gradient is gather's), after a slice of the step-1 dims. */
int fgt_map_slice(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  slice_axis sa[FG_MAX_RANK];
  if (fgt_info_of(c, n, 0, &x)) return -1;
  if (slice_plan(c, n, &x, sa)) return -1;
  int64_t od[FG_MAX_RANK], begin[FG_MAX_RANK], size[FG_MAX_RANK];
  int strided = 0, whole = 1;
  for (int d = 0; d < x.rank; d++)
    od[d] = sa[d].len;
  const fgx_known *k = fgt_foldable(c, n, 0, fgt_elems(x.rank, od));
  if (k) return slice_fold(c, n, k, sa);
  for (int d = 0; d < x.rank; d++) {
    int gathered = sa[d].step != 1 && sa[d].len > 0;
    strided |= gathered;
    begin[d] = gathered ? 0 : sa[d].start;
    size[d] = gathered ? x.dims[d] : sa[d].len;
    whole &= begin[d] == 0 && (size[d] == x.dims[d] || size[d] < 0);
  }
  fg_output y = fgx_input(c, n, 0);
  if (y.node < 0) return -1;
  if (!whole) y = fg_slice(fgx_graph(c), y, x.rank, begin, size);
  for (int d = 0; d < x.rank && strided; d++) {
    if (sa[d].step == 1 || sa[d].len <= 0) continue;
    int64_t *idx = malloc((size_t)sa[d].len * sizeof *idx);
    if (!idx) return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory");
    for (int64_t i = 0; i < sa[d].len; i++)
      idx[i] = sa[d].start + i * sa[d].step;
    fg_output io = fgt_const_i64(c, 1, &sa[d].len, idx);
    free(idx);
    y = fgt_gather_axis(c, y, x.rank, d, io, 1);
  }
  return fgt_bind(c, n, 0, y);
}

/* ---- Expand --------------------------------------------------------------- */

/* ONNX Expand broadcasts x and shape both ways (the larger of the two
 * dims, a 1 on either side giving way). An entry of shape that depends on
 * the batch size is fine over x's batch dim (it keeps x's); over a known
 * dim of x it would make the batch dim here, which flowgraph cannot. */
int fgt_map_expand(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  fgt_ivec s;
  char b1[STR], b2[STR];
  if (fgt_info_of(c, n, 0, &x) || fgt_read_ivec(c, n, 1, "shape", &s)) return -1;
  int r = x.rank > s.n ? x.rank : s.n;
  if (r > FG_MAX_RANK)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "shape %s has rank %d, above flowgraph's maximum %d",
                    fgt_ivec_str(&s, b1, STR), s.n, FG_MAX_RANK);
  int64_t shape[FG_MAX_RANK], xd[FG_MAX_RANK], od[FG_MAX_RANK];
  for (int d = 0; d < r; d++) {
    int i = d - (r - s.n), j = d - (r - x.rank);
    int64_t sv = i >= 0 ? s.v[i] : 1;
    xd[d] = j >= 0 ? x.dims[j] : 1;
    if (i >= 0 && s.sym[i]) {
      if (xd[d] >= 0)
        return fgx_fail(c, n, FG_UNIMPLEMENTED,
                        "shape %s broadcasts dim %d of input 0 shape %s to the batch size; "
                        "flowgraph's batch dim must come from an input",
                        fgt_ivec_str(&s, b1, STR), j, fgt_dims_str(x.rank, x.dims, b2, STR));
      sv = 1;
    } else if (sv < 0) {
      return fgx_fail(c, n, FG_INVALID_GRAPH, "shape %s has a negative entry",
                      fgt_ivec_str(&s, b1, STR));
    } else if (xd[d] >= 0 && sv != xd[d] && sv != 1 && xd[d] != 1) {
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "input 0 shape %s does not broadcast with shape %s (output dim %d: %lld vs "
                      "%lld)",
                      fgt_dims_str(x.rank, x.dims, b1, STR), fgt_ivec_str(&s, b2, STR), d,
                      (long long)xd[d], (long long)sv);
    }
    if (i >= 0) shape[i] = sv;
    od[d] = xd[d] < 0 ? -1 : xd[d] == 1 ? sv : xd[d];
  }
  const fgx_known *k = fgt_foldable(c, n, 0, fgt_elems(r, od));
  if (k && !s.any_sym) {
    int64_t st[FG_MAX_RANK], xs[FG_MAX_RANK];
    fgt_strides(k->t, st);
    for (int d = 0; d < r; d++)
      xs[d] = d - (r - x.rank) >= 0 ? st[d - (r - x.rank)] : 0;
    if (fgt_elems(r, od) == 0) return fgt_fold_map(c, n, 0, k, r, od, NULL, r, od);
    fgt_map m;
    if (fgt_map_init(c, n, &m, r, od)) return -1;
    for (int d = 0; d < r; d++)
      for (int64_t i = 0; i < od[d]; i++)
        m.off[d][i] = (xd[d] == 1 ? 0 : i) * xs[d];
    int rc = fgt_fold_map(c, n, 0, k, r, od, m.off, r, od);
    fgt_map_free(&m);
    return rc;
  }
  fg_output xo = fgx_input(c, n, 0);
  if (xo.node < 0) return -1;
  return fgt_bind(c, n, 0, fg_expand(fgx_graph(c), xo, s.n, shape));
}

/* ---- Tile ----------------------------------------------------------------- */

int fgt_map_tile(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  const int64_t *rep;
  int64_t len, od[FG_MAX_RANK];
  char b1[STR];
  if (fgt_info_of(c, n, 0, &x) || fgx_input_ints(c, n, 1, &rep, &len)) return -1;
  if (len != x.rank)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 1 (repeats) has %lld entries for input 0 shape "
                    "%s; it needs one per dim",
                    (long long)len, fgt_dims_str(x.rank, x.dims, b1, STR));
  for (int d = 0; d < x.rank; d++) {
    if (rep[d] < 0)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "input 1 (repeats) entry %d is negative (%lld)", d,
                      (long long)rep[d]);
    od[d] = x.dims[d] < 0 ? -1 : fgt_mul(x.dims[d], rep[d]);
    if (x.dims[d] >= 0 && od[d] < 0)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "repeats entry %d (%lld) overflows dim %d", d,
                      (long long)rep[d], d);
  }
  int64_t total = fgt_elems(x.rank, od);
  const fgx_known *k = fgt_foldable(c, n, 0, total);
  if (k) {
    int64_t st[FG_MAX_RANK];
    if (total == 0) return fgt_fold_map(c, n, 0, k, x.rank, od, NULL, x.rank, od);
    fgt_strides(k->t, st);
    fgt_map m;
    if (fgt_map_init(c, n, &m, x.rank, od)) return -1;
    for (int d = 0; d < x.rank; d++)
      for (int64_t i = 0; i < od[d]; i++)
        m.off[d][i] = (i % x.dims[d]) * st[d];
    int rc = fgt_fold_map(c, n, 0, k, x.rank, od, m.off, x.rank, od);
    fgt_map_free(&m);
    return rc;
  }
  fg_output xo = fgx_input(c, n, 0);
  if (xo.node < 0) return -1;
  return fgt_bind(c, n, 0, fg_tile(fgx_graph(c), xo, rep, x.rank));
}

/* ---- Pad ------------------------------------------------------------------ */

/* pads, mode and the constant: attributes before opset 11, inputs from 11
 * (pads, then an optional scalar constant_value). */
static int pad_args(fgx_ctx *c, const fgx_node *n, const int64_t **pads, int64_t *len,
                    const char **mode, double *value) {
  if (fgx_attr_string(c, n, "mode", "constant", mode) < 0) return -1;
  *value = 0;
  if (fgx_opset(c) < 11) {
    int has = fgx_attr_ints(c, n, "pads", pads, len);
    if (has < 0 || fgx_attr_float(c, n, "value", 0, value) < 0) return -1;
    if (!has) return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute pads is required");
    return 0;
  }
  if (fgx_input_ints(c, n, 1, pads, len)) return -1;
  if (fgx_has_input(n, 2) && fgt_read_scalar(c, n, 2, "constant_value", value)) return -1;
  return 0;
}

/* Negative pads remove elements: the positive ones go to flowgraph's pad,
 * the negative ones to a slice after it. */
int fgt_map_pad(fgx_ctx *c, const fgx_node *n) {
  fgt_info x;
  const int64_t *pads;
  int64_t len, grow[2 * FG_MAX_RANK], begin[FG_MAX_RANK], size[FG_MAX_RANK];
  const char *mode;
  double value;
  char b1[STR];
  int crop = 0;
  if (fgt_info_of(c, n, 0, &x) || pad_args(c, n, &pads, &len, &mode, &value)) return -1;
  if (strcmp(mode, "constant") && strcmp(mode, "reflect") && strcmp(mode, "edge"))
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "attribute mode '%s' is not one of constant, reflect, edge", mode);
  if (len != 2 * x.rank)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "pads has %lld entries for input 0 shape %s; it "
                    "needs 2 per dim",
                    (long long)len, fgt_dims_str(x.rank, x.dims, b1, STR));
  for (int d = 0; d < x.rank; d++) {
    int64_t pb = pads[d], pe = pads[d + x.rank];
    /* Far beyond any tensor, and keeps the sums below from overflowing. */
    if (pb < -PAD_MAX || pb > PAD_MAX || pe < -PAD_MAX || pe > PAD_MAX)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "pads for dim %d (%lld, %lld) are out of range", d,
                      (long long)pb, (long long)pe);
    grow[d] = pb > 0 ? pb : 0;
    grow[d + x.rank] = pe > 0 ? pe : 0;
    begin[d] = pb < 0 ? -pb : 0;
    size[d] = -1;
    if (pb >= 0 && pe >= 0) continue;
    crop = 1;
    if (x.dims[d] < 0 && pe < 0)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "pads remove %lld elements from the end of dim %d, which depends on the "
                      "batch size",
                      (long long)-pe, d);
    if (x.dims[d] >= 0) size[d] = x.dims[d] + pb + pe;
    if (x.dims[d] >= 0 && size[d] < 0)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "pads %lld and %lld leave dim %d of input 0 shape %s with %lld elements",
                      (long long)pb, (long long)pe, d, fgt_dims_str(x.rank, x.dims, b1, STR),
                      (long long)size[d]);
  }
  fg_output y = fgx_input(c, n, 0);
  if (y.node < 0) return -1;
  y = fg_pad(fgx_graph(c), y, grow, mode, value);
  if (crop) y = fg_slice(fgx_graph(c), y, x.rank, begin, size);
  return fgt_bind(c, n, 0, y);
}

/* ---- OneHot --------------------------------------------------------------- */

/* A scalar constant holding element i of the known tensor t. */
static fg_output element_const(fgx_ctx *c, const fg_tensor *t, int i) {
  fg_dtype dt = fg_tensor_dtype(t);
  size_t es = fg_dtype_size(dt);
  fg_tensor *s =
      fg_tensor_from_data(dt, 0, NULL, (const char *)fg_tensor_data(t) + (size_t)i * es, es, NULL);
  if (!s) return FG_NO_OUTPUT;
  fg_output o = fg_constant(fgx_graph(c), NULL, s);
  fg_tensor_free(s);
  return o;
}

/* ONNX OneHot: out = values[1] where the index (negative ones counted from
 * the end of depth) equals the position along the new axis, values[0]
 * elsewhere, so an index out of range gives a row of values[0]. Built as
 * equal(unsqueeze(indices), range(depth)) and a select, which keeps that
 * rule (flowgraph's one_hot refuses indices out of range). */
int fgt_map_one_hot(fgx_ctx *c, const fgx_node *n) {
  fgt_info ix;
  int64_t axis, a;
  double depthf;
  fg_graph *g = fgx_graph(c);
  if (fgt_info_of(c, n, 0, &ix)) return -1;
  if (fgx_attr_int(c, n, "axis", -1, &axis) < 0) return -1;
  if (ix.rank + 1 > FG_MAX_RANK)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "output rank %d is above flowgraph's maximum %d",
                    ix.rank + 1, FG_MAX_RANK);
  if (fgx_axis(c, n, "axis", axis, ix.rank + 1, &a)) return -1;
  if (fgt_read_scalar(c, n, 1, "depth", &depthf)) return -1;
  if (!(depthf >= 1))
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 1 (depth) is %g; it must be >= 1", depthf);
  if (depthf > DEPTH_MAX)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 1 (depth) is %g; flowgraph takes up to %d",
                    depthf, DEPTH_MAX);
  int64_t depth = (int64_t)depthf;
  const fgx_known *vk = fgx_input_known(c, n, 2);
  if (!vk)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input 2 (values) is computed at run time; flowgraph needs it known at import");
  if (fg_tensor_num_elements(vk->t) != 2 || vk->sym)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 2 (values) has %lld elements; it must be [off_value, on_value]",
                    (long long)fg_tensor_num_elements(vk->t));
  fg_output idx = fgx_input(c, n, 0);
  if (idx.node < 0) return -1;
  if (ix.dtype != FG_I64) idx = fg_cast(g, idx, FG_I64);
  idx = fgt_wrap_negative(c, idx, FG_I64, depth);
  idx = fg_unsqueeze(g, idx, &a, 1);
  int64_t rdims[FG_MAX_RANK];
  for (int d = 0; d <= ix.rank; d++)
    rdims[d] = d == a ? depth : 1;
  int64_t *rv = malloc((size_t)depth * sizeof *rv);
  if (!rv)
    return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory for depth %lld", (long long)depth);
  for (int64_t i = 0; i < depth; i++)
    rv[i] = i;
  fg_output range = fgt_const_i64(c, ix.rank + 1, rdims, rv);
  free(rv);
  fg_output eq = fg_equal(g, idx, range);
  return fgt_bind(c, n, 0,
                  fg_select(g, eq, element_const(c, vk->t, 1), element_const(c, vk->t, 0)));
}
