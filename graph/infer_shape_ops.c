/* Shape inference for the shape ops that CNNs and ONNX models use: pad,
 * flatten, squeeze, expand, tile, split and stack, and the gradient ops
 * pad_grad and tile_grad. Where PyTorch and ONNX disagree, the attributes
 * mean what ONNX says (these ops back an ONNX importer):
 * - pad: pads are ONNX's [x1_begin, x2_begin, ..., x1_end, x2_end], not
 *   torch.nn.functional.pad's pairs from the last dim backwards; edge is
 *   torch's "replicate". Negative pads (ONNX's cropping) are refused.
 * - expand: ONNX's two-way broadcast (a 1 in shape keeps x's dim), not
 *   NumPy's broadcast_to, which needs the result to equal shape.
 * - tile: one repeat per dim (ONNX), not NumPy's padding of short lists.
 * - flatten: ONNX's 2-D result, not torch.flatten(start_dim, end_dim).
 * - split: sizes (ONNX's split input) or num_outputs, where an uneven dim
 *   gives ceil(dim / n) to each output but the last (ONNX opset 18).
 * Unknown dims (negative) are checked at run time, when the executor
 * infers again with the fed shapes. */
#include <string.h>

#include "graph/infer_shape_ops.h"

static int valid_dtype(const fg_node *node, const fg_tinfo *in, int i, const char *what,
                       fg_status *st) {
  if (fgi_dtype_valid(in[i].dtype)) return 0;
  return fgi_fail(node, st, "input %d (%s) has invalid dtype %d", i, what, (int)in[i].dtype);
}

static int numeric_input(const fg_node *node, const fg_tinfo *in, int i, const char *what,
                         fg_status *st) {
  if (fgi_is_numeric(in[i].dtype)) return 0;
  return fgi_fail(node, st, "input %d (%s) is %s; expected f32, f64, i32 or i64", i, what,
                  fg_dtype_name(in[i].dtype));
}

/* ---- pad and pad_grad ----------------------------------------------------- */

static int pad_mode(const fg_node *node, int *mode, fg_status *st) {
  const fg_attr *a = fg_attrs_find(&node->attrs, "mode");
  if (!a) {
    *mode = FG_PAD_CONSTANT;
    return 0;
  }
  if (a->type != FG_ATTR_STRING || !a->s)
    return fgi_fail(node, st, "attribute 'mode' must be a string");
  if (strcmp(a->s, "constant") == 0)
    *mode = FG_PAD_CONSTANT;
  else if (strcmp(a->s, "reflect") == 0)
    *mode = FG_PAD_REFLECT;
  else if (strcmp(a->s, "edge") == 0)
    *mode = FG_PAD_EDGE;
  else
    return fgi_fail(node, st, "mode '%.64s' is not one of constant, reflect, edge", a->s);
  return 0;
}

/* The pads of a pad of `t` (`label`): 2 * rank entries, none negative;
 * reflect needs each pad below its (known) dim, edge a non-empty dim to
 * repeat; dims plus pads must not overflow. */
static int pad_attrs(const fg_node *node, const fg_tinfo *t, const char *label,
                     const int64_t **pads, int *mode, fg_status *st) {
  int n;
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_attr_ints(node, "pads", 1, pads, &n, st) || pad_mode(node, mode, st)) return -1;
  const int r = t->rank;
  const int64_t *p = *pads;
  if (n != 2 * r)
    return fgi_fail(node, st, "pads %s has %d entries, but %s shape %s needs 2 * rank = %d",
                    fgi_ints(p, n, s1), n, label, fgi_shape(t, s2), 2 * r);
  for (int i = 0; i < n; i++)
    if (p[i] < 0)
      return fgi_fail(node, st, "pads[%d] = %lld is negative (pads %s)", i, (long long)p[i],
                      fgi_ints(p, n, s1));
  for (int d = 0; d < r; d++) {
    const int64_t dim = t->dims[d], b = p[d], e = p[d + r];
    if (dim < 0) continue;
    if (*mode == FG_PAD_REFLECT && (b >= dim || e >= dim))
      return fgi_fail(node, st,
                      "reflect pads of dim %d are %lld and %lld, but each must be below the dim, "
                      "%lld (%s shape %s)",
                      d, (long long)b, (long long)e, (long long)dim, label, fgi_shape(t, s1));
    if (*mode == FG_PAD_EDGE && dim == 0 && (b > 0 || e > 0))
      return fgi_fail(node, st,
                      "edge pads of dim %d are %lld and %lld, but the dim is empty (%s shape %s)",
                      d, (long long)b, (long long)e, label, fgi_shape(t, s1));
    if (b > INT64_MAX - dim || e > INT64_MAX - dim - b)
      return fgi_fail(node, st, "dim %d (%lld) plus pads %lld and %lld overflows", d,
                      (long long)dim, (long long)b, (long long)e);
  }
  return 0;
}

int fgi_infer_pad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const int64_t *pads;
  int mode;
  if (valid_dtype(node, in, 0, "x", status)) return -1;
  if (pad_attrs(node, &in[0], "input 0", &pads, &mode, status)) return -1;
  out[0] = in[0];
  for (int d = 0; d < in[0].rank; d++)
    if (in[0].dims[d] >= 0) out[0].dims[d] = in[0].dims[d] + pads[d] + pads[d + in[0].rank];
  return fgi_check_bytes(node, &out[0], status);
}

/* pad_grad and tile_grad: dy must have like's rank and, where both are
 * known, the dims of `big` (like padded or tiled, -1 where unknown); the
 * result is like's shape in dy's dtype. what: "pad" or "tile". */
static int grad_like(const fg_node *node, const fg_tinfo *dy, const fg_tinfo *like,
                     const int64_t *big, const char *what, fg_tinfo *out, fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  if (dy->rank != like->rank)
    return fgi_fail(node, status, "input 0 (dy) shape %s has rank %d, input 1 (like) shape %s %d",
                    fgi_shape(dy, s1), dy->rank, fgi_shape(like, s2), like->rank);
  for (int d = 0; d < like->rank; d++)
    if (big[d] >= 0 && dy->dims[d] >= 0 && dy->dims[d] != big[d])
      return fgi_fail(node, status,
                      "input 0 (dy) shape %s is not the %s of input 1 (like) shape %s at dim %d",
                      fgi_shape(dy, s1), what, fgi_shape(like, s2), d);
  out[0] = *like;
  out[0].dtype = dy->dtype;
  return fgi_check_bytes(node, &out[0], status);
}

/* pad_grad(dy, like): like's shape; dy must be the pad of like. */
int fgi_infer_pad_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const int64_t *pads;
  int mode;
  const fg_tinfo *dy = &in[0], *like = &in[1];
  if (numeric_input(node, in, 0, "dy", status) || valid_dtype(node, in, 1, "like", status))
    return -1;
  if (pad_attrs(node, like, "input 1 (like)", &pads, &mode, status)) return -1;
  const int r = like->rank;
  int64_t big[FG_MAX_RANK];
  for (int d = 0; d < r; d++)
    big[d] = like->dims[d] < 0 ? FG_DIM_UNKNOWN : like->dims[d] + pads[d] + pads[d + r];
  return grad_like(node, dy, like, big, "pad", out, status);
}

/* pad: input 0's shape; pad_grad: input 1's (like). */
int fgi_parse_pad(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  const fg_tinfo *t = node->op == FG_OP_PAD_GRAD ? &in[1] : &in[0];
  const int64_t *pads;
  int mode;
  if (pad_attrs(node, t, node->op == FG_OP_PAD_GRAD ? "input 1 (like)" : "input 0", &pads, &mode,
                st))
    return -1;
  for (int d = 0; d < t->rank; d++) {
    p->pad.begin[d] = pads[d];
    p->pad.end[d] = pads[d + t->rank];
  }
  p->pad.mode = mode;
  return 0; /* value: the FG_PARAM row */
}

/* ---- flatten, squeeze, expand ------------------------------------------- */

/* Product of dims [lo, hi) of t: unknown if any is unknown, saturating. */
static int64_t dims_product(const fg_tinfo *t, int lo, int hi) {
  int64_t p = 1;
  int unknown = 0;
  for (int d = lo; d < hi; d++) {
    if (t->dims[d] == 0) return 0;
    if (t->dims[d] < 0)
      unknown = 1;
    else
      p = fgi_mul_sat(p, t->dims[d]);
  }
  return unknown ? FG_DIM_UNKNOWN : p;
}

int fgi_infer_flatten(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int64_t axis;
  char s1[FGI_STR];
  const int r = in[0].rank;
  if (valid_dtype(node, in, 0, "x", status)) return -1;
  if (fgi_attr_int(node, "axis", 0, 1, &axis, status)) return -1;
  /* ONNX: axis in [-r, r]; axis r gives [numel, 1]. */
  if (axis < -(int64_t)r || axis > r)
    return fgi_fail(node, status, "axis %lld is out of range [-%d, %d] for input 0 shape %s",
                    (long long)axis, r, r, fgi_shape(&in[0], s1));
  const int a = (int)(axis < 0 ? axis + r : axis);
  out[0].dtype = in[0].dtype;
  out[0].rank = 2;
  out[0].dims[0] = dims_product(&in[0], 0, a);
  out[0].dims[1] = dims_product(&in[0], a, r);
  return fgi_check_bytes(node, &out[0], status);
}

/* axes present: those dims, each 1 (checked at run time where unknown);
 * absent or empty: every dim that is 1 (ONNX), so every dim must be
 * known, or the output rank would depend on the fed shapes. */
int fgi_infer_squeeze(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const int64_t *axes;
  int n;
  char s1[FGI_STR], s2[FGI_STR];
  const fg_tinfo *x = &in[0];
  const int r = x->rank;
  if (valid_dtype(node, in, 0, "x", status)) return -1;
  if (fgi_attr_ints(node, "axes", 0, &axes, &n, status)) return -1;
  int drop[FG_MAX_RANK] = {0};
  if (n <= 0) {
    for (int d = 0; d < r; d++) {
      if (x->dims[d] < 0)
        return fgi_fail(node, status,
                        "no axes given, so every dim of size 1 goes, but dim %d of input 0 shape "
                        "%s is unknown until run time; name the axes",
                        d, fgi_shape(x, s1));
      drop[d] = x->dims[d] == 1;
    }
  }
  for (int i = 0; i < n; i++) {
    if (axes[i] < -(int64_t)r || axes[i] >= r)
      return fgi_fail(node, status,
                      "axes[%d] = %lld is out of range [-%d, %d) for input 0 shape %s", i,
                      (long long)axes[i], r, r, fgi_shape(x, s1));
    const int a = (int)(axes[i] < 0 ? axes[i] + r : axes[i]);
    if (drop[a])
      return fgi_fail(node, status, "axes %s name dim %d twice", fgi_ints(axes, n, s1), a);
    if (x->dims[a] >= 0 && x->dims[a] != 1)
      return fgi_fail(node, status,
                      "axes[%d] = %lld names dim %d of input 0 shape %s, which is %lld, not 1", i,
                      (long long)axes[i], a, fgi_shape(x, s2), (long long)x->dims[a]);
    drop[a] = 1;
  }
  out[0].dtype = x->dtype;
  out[0].rank = 0;
  for (int d = 0; d < r; d++)
    if (!drop[d]) out[0].dims[out[0].rank++] = x->dims[d];
  return 0;
}

int fgi_infer_expand(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const int64_t *shape;
  int n, bad;
  int64_t va, vb;
  char s1[FGI_STR], s2[FGI_STR];
  if (valid_dtype(node, in, 0, "x", status)) return -1;
  if (fgi_attr_ints(node, "shape", 1, &shape, &n, status)) return -1;
  if (n > FG_MAX_RANK)
    return fgi_fail(node, status, "shape %s has rank %d, above the maximum %d",
                    fgi_ints(shape, n, s1), n, FG_MAX_RANK);
  for (int i = 0; i < n; i++)
    if (shape[i] < 0)
      return fgi_fail(node, status, "shape[%d] = %lld is negative (shape %s)", i,
                      (long long)shape[i], fgi_ints(shape, n, s1));
  out[0].dtype = in[0].dtype;
  out[0].rank = n > in[0].rank ? n : in[0].rank;
  if (fgi_broadcast_dims(in[0].rank, in[0].dims, n, shape, out[0].dims, &bad, &va, &vb) != 0)
    return fgi_fail(node, status,
                    "input 0 shape %s does not broadcast with shape %s: output dim %d is %lld in "
                    "x and %lld in shape",
                    fgi_shape(&in[0], s1), fgi_ints(shape, n, s2), bad, (long long)va,
                    (long long)vb);
  return fgi_check_bytes(node, &out[0], status);
}

/* ---- tile and tile_grad --------------------------------------------------- */

static int tile_attrs(const fg_node *node, const fg_tinfo *t, const char *label,
                      const int64_t **reps, fg_status *st) {
  int n;
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_attr_ints(node, "repeats", 1, reps, &n, st)) return -1;
  if (n != t->rank)
    return fgi_fail(node, st, "repeats %s has %d entries, but %s shape %s has rank %d",
                    fgi_ints(*reps, n, s1), n, label, fgi_shape(t, s2), t->rank);
  for (int i = 0; i < n; i++)
    if ((*reps)[i] < 0)
      return fgi_fail(node, st, "repeats[%d] = %lld is negative (repeats %s)", i,
                      (long long)(*reps)[i], fgi_ints(*reps, n, s1));
  return 0;
}

static int64_t tiled_dim(int64_t dim, int64_t rep) {
  if (rep == 0 || dim == 0) return 0;
  return dim < 0 ? FG_DIM_UNKNOWN : fgi_mul_sat(dim, rep);
}

int fgi_infer_tile(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const int64_t *reps;
  if (valid_dtype(node, in, 0, "x", status)) return -1;
  if (tile_attrs(node, &in[0], "input 0", &reps, status)) return -1;
  out[0] = in[0];
  for (int d = 0; d < in[0].rank; d++)
    out[0].dims[d] = tiled_dim(in[0].dims[d], reps[d]);
  return fgi_check_bytes(node, &out[0], status);
}

int fgi_infer_tile_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const int64_t *reps;
  const fg_tinfo *dy = &in[0], *like = &in[1];
  if (numeric_input(node, in, 0, "dy", status) || valid_dtype(node, in, 1, "like", status))
    return -1;
  if (tile_attrs(node, like, "input 1 (like)", &reps, status)) return -1;
  int64_t big[FG_MAX_RANK];
  for (int d = 0; d < like->rank; d++)
    big[d] = tiled_dim(like->dims[d], reps[d]);
  return grad_like(node, dy, like, big, "tile", out, status);
}

int fgi_parse_tile(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  const fg_tinfo *t = node->op == FG_OP_TILE_GRAD ? &in[1] : &in[0];
  const int64_t *reps;
  if (tile_attrs(node, t, node->op == FG_OP_TILE_GRAD ? "input 1 (like)" : "input 0", &reps, st))
    return -1;
  for (int d = 0; d < t->rank; d++)
    p->tile.repeats[d] = reps[d];
  return 0;
}

/* ---- split and stack ------------------------------------------------------ */

int fgi_count_split(const char *name, const struct fg_attrs *attrs, fg_status *st) {
  const fg_attr *sizes = attrs ? fg_attrs_find(attrs, "sizes") : NULL;
  const fg_attr *num = attrs ? fg_attrs_find(attrs, "num_outputs") : NULL;
  int64_t n;
  if (sizes && num) {
    fg_status_set(st, FG_INVALID_GRAPH,
                  "node '%s' (split): give either sizes or num_outputs, not both", name);
    return -1;
  }
  if (!sizes && !num) {
    fg_status_set(st, FG_INVALID_GRAPH,
                  "node '%s' (split): needs sizes (ints) or num_outputs (int)", name);
    return -1;
  }
  if (sizes) {
    if (sizes->type != FG_ATTR_INTS) {
      fg_status_set(st, FG_INVALID_GRAPH, "node '%s' (split): sizes must be ints", name);
      return -1;
    }
    n = sizes->n;
  } else {
    if (num->type != FG_ATTR_INT) {
      fg_status_set(st, FG_INVALID_GRAPH, "node '%s' (split): num_outputs must be an int", name);
      return -1;
    }
    n = num->i;
  }
  if (n < 1 || n > FGI_SPLIT_MAX_OUTPUTS) {
    fg_status_set(st, FG_INVALID_GRAPH,
                  "node '%s' (split): %s gives %lld outputs; expected 1 to %d", name,
                  sizes ? "sizes" : "num_outputs", (long long)n, FGI_SPLIT_MAX_OUTPUTS);
    return -1;
  }
  return (int)n;
}

int fgi_infer_split(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int64_t axis_attr;
  int axis, n_sizes;
  const int64_t *sizes;
  char s1[FGI_STR], s2[FGI_STR];
  const int n = node->n_outputs;
  if (valid_dtype(node, in, 0, "x", status)) return -1;
  if (fgi_attr_int(node, "axis", 0, 0, &axis_attr, status)) return -1;
  if (fgi_axis(node, "axis", axis_attr, &in[0], &axis, status)) return -1;
  if (fgi_attr_ints(node, "sizes", 0, &sizes, &n_sizes, status)) return -1;
  const int64_t dim = in[0].dims[axis];
  for (int k = 0; k < n; k++)
    out[k] = in[0];
  if (sizes) {
    if (n_sizes != n)
      return fgi_fail(node, status, "sizes %s has %d entries for %d outputs",
                      fgi_ints(sizes, n_sizes, s1), n_sizes, n);
    int64_t total = 0;
    for (int k = 0; k < n; k++) {
      if (sizes[k] < 0)
        return fgi_fail(node, status, "sizes[%d] = %lld is negative (sizes %s)", k,
                        (long long)sizes[k], fgi_ints(sizes, n, s1));
      total = total > INT64_MAX - sizes[k] ? INT64_MAX : total + sizes[k];
      out[k].dims[axis] = sizes[k];
    }
    if (dim >= 0 && total != dim)
      return fgi_fail(
          node, status, "sizes %s add up to %lld, but dim %d of input 0 shape %s is %lld",
          fgi_ints(sizes, n, s1), (long long)total, axis, fgi_shape(&in[0], s2), (long long)dim);
    return 0;
  }
  if (dim < 0) {
    for (int k = 0; k < n; k++)
      out[k].dims[axis] = FG_DIM_UNKNOWN;
    return 0;
  }
  /* ONNX opset 18: ceil(dim / n) each, the last takes what is left. */
  const int64_t chunk = dim / n + (dim % n != 0);
  const int64_t last = dim - chunk * (n - 1);
  if (last < 0)
    return fgi_fail(node, status,
                    "num_outputs %d cannot split dim %d of input 0 shape %s (%lld): %d parts of "
                    "%lld leave %lld for the last",
                    n, axis, fgi_shape(&in[0], s1), (long long)dim, n - 1, (long long)chunk,
                    (long long)last);
  for (int k = 0; k < n; k++)
    out[k].dims[axis] = k == n - 1 ? last : chunk;
  return 0;
}

int fgi_parse_split(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  int64_t axis;
  if (fgi_attr_int(node, "axis", 0, 0, &axis, st)) return -1;
  return fgi_axis(node, "axis", axis, &in[0], &p->split.axis, st);
}

/* The axis of a stack of inputs of rank r: [-(r + 1), r], as np.stack. */
static int stack_axis(const fg_node *node, const fg_tinfo *in, int *axis, fg_status *st) {
  int64_t a;
  char s1[FGI_STR];
  const int r = in[0].rank;
  if (fgi_attr_int(node, "axis", 0, 0, &a, st)) return -1;
  if (r + 1 > FG_MAX_RANK)
    return fgi_fail(node, st, "input 0 shape %s has rank %d; the stack would exceed rank %d",
                    fgi_shape(&in[0], s1), r, FG_MAX_RANK);
  if (a < -(int64_t)(r + 1) || a > r)
    return fgi_fail(node, st, "axis %lld is out of range [-%d, %d] for inputs of shape %s",
                    (long long)a, r + 1, r, fgi_shape(&in[0], s1));
  *axis = (int)(a < 0 ? a + r + 1 : a);
  return 0;
}

int fgi_infer_stack(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  int axis = 0;
  char s1[FGI_STR], s2[FGI_STR];
  if (node->n_inputs < 1) return fgi_fail(node, status, "needs at least one input");
  if (valid_dtype(node, in, 0, "x", status) || stack_axis(node, in, &axis, status)) return -1;
  fg_tinfo common = in[0];
  for (int i = 1; i < node->n_inputs; i++) {
    if (fgi_same_dtype(node, in, 0, i, status)) return -1;
    int same = in[i].rank == in[0].rank;
    for (int d = 0; same && d < in[0].rank; d++) {
      const int64_t x = common.dims[d], y = in[i].dims[d];
      if (x >= 0 && y >= 0 && x != y) same = 0;
      if (x < 0) common.dims[d] = y;
    }
    if (!same)
      return fgi_fail(node, status, "input %d shape %s differs from input 0 shape %s", i,
                      fgi_shape(&in[i], s1), fgi_shape(&in[0], s2));
  }
  out[0].dtype = in[0].dtype;
  out[0].rank = in[0].rank + 1;
  for (int d = 0, j = 0; d < out[0].rank; d++)
    out[0].dims[d] = d == axis ? node->n_inputs : common.dims[j++];
  return fgi_check_bytes(node, &out[0], status);
}

int fgi_parse_stack(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  return stack_axis(node, in, &p->stack.axis, st);
}
