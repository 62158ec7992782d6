/* Shape inference for resize_nearest, resize_linear and their gradients,
 * and the parse hook that turns their attributes into fg_resize_params.
 * The ops resize the last two dims of x (rank >= 2) to the attribute
 * sizes; the leading dims are planes. Attribute values may come from an
 * untrusted file: each is range-checked before use. */
#include <math.h>
#include <string.h>

#include "graph/infer_common.h"

/* The attribute strings of fg_resize_coord and fg_resize_nearest_mode, in
 * enum order (graph/graph_internal.h): the builders, this file and the
 * ONNX importer read them. */
const char *const fg_resize_coord_names[4] = {"half_pixel", "pytorch_half_pixel", "asymmetric",
                                              "align_corners"};
const char *const fg_resize_nearest_names[4] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                                "ceil"};

/* Sizes above this are refused (as the pools' window attributes). */
#define RESIZE_SIZE_MAX 2147483647LL
/* Scales outside [1/SCALE_MAX, SCALE_MAX] are refused: no real model
 * resizes by more, and the bound keeps o / s finite and small. */
#define RESIZE_SCALE_MAX 1e6

static int is_nearest(const fg_node *n) {
  return n->op == FG_OP_RESIZE_NEAREST || n->op == FG_OP_RESIZE_NEAREST_GRAD;
}

/* A string attribute naming one of `names` (absent: 0). */
static int choice(const fg_node *node, const char *name, const char *const *names, int count,
                  int *v, fg_status *st) {
  const fg_attr *a = fg_attrs_find(&node->attrs, name);
  *v = 0;
  if (!a) return 0;
  if (a->type != FG_ATTR_STRING) return fgi_fail(node, st, "attribute '%s' must be a string", name);
  for (int i = 0; i < count; i++)
    if (strcmp(a->s, names[i]) == 0) return *v = i, 0;
  char list[160] = "";
  for (int i = 0; i < count; i++) {
    strncat(list, names[i], sizeof list - strlen(list) - 1);
    if (i + 1 < count) strncat(list, i + 2 < count ? ", " : " or ", sizeof list - strlen(list) - 1);
  }
  return fgi_fail(node, st, "attribute '%s' = '%s' must be %s", name, a->s, list);
}

/* The attributes on their own (no shapes): scales stay 0 when absent. */
static int resize_attrs(const fg_node *node, fg_resize_params *p, fg_status *st) {
  const int64_t *v;
  int n;
  char s[FGI_STR];
  memset(p, 0, sizeof *p);
  if (fgi_attr_ints(node, "sizes", 1, &v, &n, st)) return -1;
  if (n != 2)
    return fgi_fail(node, st, "attribute 'sizes' = %s has %d values; it needs 2 (height, width)",
                    fgi_ints(v, n, s), n);
  for (int d = 0; d < 2; d++) {
    if (v[d] < 1 || v[d] > RESIZE_SIZE_MAX)
      return fgi_fail(node, st, "attribute 'sizes' = %s: value %d is %lld; it must be in [1, %lld]",
                      fgi_ints(v, n, s), d, (long long)v[d], RESIZE_SIZE_MAX);
    p->sizes[d] = v[d];
  }
  const fg_attr *a = fg_attrs_find(&node->attrs, "scales");
  if (a) {
    if (a->type != FG_ATTR_FLOATS || a->n != 2)
      return fgi_fail(node, st, "attribute 'scales' must be 2 floats (height, width)");
    for (int d = 0; d < 2; d++) {
      const double x = a->floats[d];
      if (!(x >= 1.0 / RESIZE_SCALE_MAX && x <= RESIZE_SCALE_MAX))
        return fgi_fail(node, st, "attribute 'scales' value %d is %g; it must be in [%g, %g]", d, x,
                        1.0 / RESIZE_SCALE_MAX, RESIZE_SCALE_MAX);
      p->scales[d] = x;
    }
  }
  if (choice(node, "coordinate_transformation_mode", fg_resize_coord_names, 4, &p->coord, st))
    return -1;
  if (is_nearest(node) && choice(node, "nearest_mode", fg_resize_nearest_names, 4, &p->nearest, st))
    return -1;
  return 0;
}

/* x: f32 or f64, rank >= 2, a non-empty plane where its size is known. */
static int check_x(const fg_node *node, const fg_tinfo *x, int i, const char *what, fg_status *st) {
  char s[FGI_STR];
  if (x->rank < 2)
    return fgi_fail(node, st, "input %d (%s) shape %s has rank %d; resizing needs rank >= 2", i,
                    what, fgi_shape(x, s), x->rank);
  if (!fg_dtype_is_float(x->dtype))
    return fgi_fail(node, st, "input %d (%s) dtype %s is not allowed; resizing needs f32 or f64", i,
                    what, fg_dtype_name(x->dtype));
  for (int d = x->rank - 2; d < x->rank; d++)
    if (x->dims[d] == 0)
      return fgi_fail(node, st, "input %d (%s) shape %s has an empty plane: nothing to resize", i,
                      what, fgi_shape(x, s));
  return 0;
}

/* The forward output for x: x's leading dims, then sizes. */
static int forward_shape(const fg_node *node, const fg_tinfo *x, fg_tinfo *y, fg_status *st) {
  fg_resize_params p;
  if (resize_attrs(node, &p, st)) return -1;
  *y = *x;
  y->dims[x->rank - 2] = p.sizes[0];
  y->dims[x->rank - 1] = p.sizes[1];
  return 0;
}

int fgi_infer_resize(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  if (check_x(node, &in[0], 0, "x", status) || forward_shape(node, &in[0], &out[0], status))
    return -1;
  return fgi_check_bytes(node, &out[0], status);
}

/* (dy, x) -> dx in x's shape; dy must be the forward output for x. */
int fgi_infer_resize_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                          fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR], s3[FGI_STR];
  fg_tinfo y;
  if (check_x(node, &in[1], 1, "x", status) || fgi_same_dtype(node, in, 1, 0, status) ||
      forward_shape(node, &in[1], &y, status))
    return -1;
  int bad = in[0].rank != y.rank;
  for (int d = 0; !bad && d < y.rank; d++)
    bad = in[0].dims[d] >= 0 && y.dims[d] >= 0 && in[0].dims[d] != y.dims[d];
  if (bad)
    return fgi_fail(node, status,
                    "input 0 (dy) shape %s is not the resized shape %s of input 1 (x) shape %s",
                    fgi_shape(&in[0], s1), fgi_shape(&y, s2), fgi_shape(&in[1], s3));
  out[0] = in[1];
  return fgi_check_bytes(node, &out[0], status);
}

/* The scales the node leaves out are the sizes over x's plane. */
int fgi_parse_resize(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  const int grad = node->op == FG_OP_RESIZE_NEAREST_GRAD || node->op == FG_OP_RESIZE_LINEAR_GRAD;
  const fg_tinfo *x = &in[grad ? 1 : 0];
  char s[FGI_STR];
  if (resize_attrs(node, &p->resize, st)) return -1;
  for (int d = 0; d < 2; d++) {
    if (p->resize.scales[d] > 0) continue;
    const int64_t n = x->rank >= 2 ? x->dims[x->rank - 2 + d] : -1;
    if (n < 1)
      return fgi_fail(node, st, "input %d (x) shape %s: its plane must be known and non-empty",
                      grad ? 1 : 0, fgi_shape(x, s));
    p->resize.scales[d] = (double)p->resize.sizes[d] / (double)n;
  }
  return 0;
}

/* Linear: 4 products and 3 sums per output (the gradient: per dy
 * element); nearest only copies. */
int64_t fgi_flops_resize(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  if (is_nearest(node)) return 0;
  const int grad = node->op == FG_OP_RESIZE_LINEAR_GRAD;
  const int64_t e = fgi_elements(grad ? &in[0] : &out[0]);
  return e < 0 ? -1 : fgi_mul_sat(e, 7);
}
