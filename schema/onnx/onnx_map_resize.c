/* ONNX Resize (opsets 10 to 17) onto flowgraph's resize_nearest and
 * resize_linear, which resize the last two dims.
 *
 * - The output size comes from a known scales or sizes input: with
 *   scales, floor(in * scale) per axis and the scales themselves drive the
 *   coordinates; with sizes, the coordinates use sizes / in (the ops'
 *   default). Every axis before the last two must keep its size (scale 1,
 *   or a size equal to the input's, the batch included when it is
 *   symbolic: exporters build it from Shape).
 * - Modes nearest and linear; cubic is refused. The coordinate modes
 *   half_pixel, pytorch_half_pixel, asymmetric and align_corners;
 *   tf_half_pixel_for_nn and tf_crop_and_resize (with its roi) are
 *   refused, as is exclude_outside = 1.
 * - Opset 10 has no coordinate attributes: its coordinates are o / scale
 *   (asymmetric). Its nearest rounding is not written down; ONNX Runtime
 *   floors when upsampling, which is what PyTorch exports, so opset 10's
 *   nearest is taken only when no axis shrinks. */
#include <math.h>
#include <string.h>

#include "flowgraph/graph.h"
#include "graph/graph_internal.h"
#include "schema/onnx/onnx_map_nn.h"

/* A string attribute that must be one of `names` (*v its index). */
static int choice(fgx_ctx *c, const fgx_node *n, const char *attr, const char *def,
                  const char *const *names, int count, int *v) {
  const char *s;
  if (fgx_attr_string(c, n, attr, def, &s) < 0) return -1;
  for (int i = 0; i < count; i++)
    if (!strcmp(s, names[i])) return *v = i, 0;
  return fgx_fail(c, n, FG_UNIMPLEMENTED,
                  "attribute '%s' = '%s' is not supported (%s, %s, %s or %s)", attr, s, names[0],
                  names[1], names[2], names[3]);
}

/* mode, coordinate mode and nearest mode, checked. */
static int resize_modes(fgx_ctx *c, const fgx_node *n, int *linear, fg_resize_opts *o) {
  const char *mode;
  int64_t excl;
  if (fgx_attr_string(c, n, "mode", "nearest", &mode) < 0 ||
      fgx_attr_int(c, n, "exclude_outside", 0, &excl) < 0)
    return -1;
  if (strcmp(mode, "nearest") && strcmp(mode, "linear"))
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "attribute 'mode' = '%s' is not supported: flowgraph resizes with nearest "
                    "and linear",
                    mode);
  *linear = !strcmp(mode, "linear");
  if (excl != 0)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "attribute 'exclude_outside' = %lld is not supported",
                    (long long)excl);
  int coord = FG_RESIZE_ASYMMETRIC, nearest = FG_NEAREST_FLOOR;
  if (fgx_opset(c) >= 11 && (choice(c, n, "coordinate_transformation_mode", "half_pixel",
                                    fg_resize_coord_names, 4, &coord) < 0 ||
                             choice(c, n, "nearest_mode", "round_prefer_floor",
                                    fg_resize_nearest_names, 4, &nearest) < 0))
    return -1;
  o->coord = (fg_resize_coord)coord;
  o->nearest = (fg_resize_nearest_mode)nearest;
  return 0;
}

/* The scales input (index i): rank floats, 1 before the last two axes;
 * fills o->sizes and o->scales from x's plane. */
static int from_scales(fgx_ctx *c, const fgx_node *n, int i, int rank, const int64_t *xd,
                       fg_resize_opts *o) {
  const fgx_known *k = fgx_input_known(c, n, i);
  char b[256];
  if (!k)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input %d (scales) is not known at import: flowgraph needs fixed scales", i);
  if (fg_tensor_dtype(k->t) != FG_F32 || fg_tensor_rank(k->t) != 1 ||
      fg_tensor_dim(k->t, 0) != rank)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input %d (scales) must be %d floats, one per axis of input 0 (X) %s", i, rank,
                    nnx_fmt(xd, rank, b, sizeof b));
  const float *s = fg_tensor_data(k->t);
  for (int a = 0; a < rank; a++) {
    if (a < rank - 2 && s[a] != 1.0f)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "input %d (scales) is %g on axis %d: flowgraph resizes the last two axes "
                      "only",
                      i, (double)s[a], a);
    if (a < rank - 2) continue;
    const int d = a - (rank - 2);
    if (!(s[a] > 0) || !isfinite(s[a]))
      return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d (scales) is %g on axis %d; it must be > 0",
                      i, (double)s[a], a);
    if (xd[a] < 1)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "input 0 (X) %s: scales need its last two dims known and non-empty",
                      nnx_fmt(xd, rank, b, sizeof b));
    /* The size is checked in double before it becomes an integer. */
    const double size = floor((double)xd[a] * (double)s[a]);
    if (!(size >= 1 && size <= (double)NNX_ATTR_MAX))
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "input %d (scales) %g on axis %d of size %lld gives %g outputs; it must be "
                      "in [1, %lld]",
                      i, (double)s[a], a, (long long)xd[a], size, (long long)NNX_ATTR_MAX);
    o->scales[d] = s[a];
    o->sizes[d] = (int64_t)size;
  }
  return 0;
}

/* The sizes input (index 3): rank int64s, the input's own before the last
 * two axes (the symbolic batch as Shape marks it). */
static int from_sizes(fgx_ctx *c, const fgx_node *n, int rank, const int64_t *xd,
                      fg_resize_opts *o) {
  const fgx_known *k = fgx_input_known(c, n, 3);
  char b[256], e[256];
  if (!k)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input 3 (sizes) is not known at import: flowgraph needs fixed sizes");
  if (fg_tensor_dtype(k->t) != FG_I64 || fg_tensor_rank(k->t) != 1 ||
      fg_tensor_dim(k->t, 0) != rank)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 3 (sizes) must be %d int64s, one per axis of input 0 (X) %s", rank,
                    nnx_fmt(xd, rank, b, sizeof b));
  const int64_t *v = fg_tensor_data(k->t);
  for (int a = 0; a < rank - 2; a++) {
    const int sym = k->sym && k->sym[a];
    int64_t mult = 0; /* an unknown dim of X is mult x batch */
    if (xd[a] < 0 && fgx_input_batch_multiple(c, n, 0, a, &mult) != 0) return -1;
    const int same = xd[a] < 0 ? sym && v[a] == mult : !sym && v[a] == xd[a];
    if (!same)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "input 3 (sizes) %s changes axis %d of input 0 (X) %s: flowgraph resizes "
                      "the last two axes only",
                      nnx_fmt(v, rank, e, sizeof e), a, nnx_fmt(xd, rank, b, sizeof b));
  }
  for (int d = 0; d < 2; d++) {
    const int a = rank - 2 + d;
    if ((k->sym && k->sym[a]) || v[a] < 1 || v[a] > NNX_ATTR_MAX)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "input 3 (sizes) %s: axis %d must be a fixed size in [1, %lld]",
                      nnx_fmt(v, rank, e, sizeof e), a, (long long)NNX_ATTR_MAX);
    o->sizes[d] = v[a];
  }
  return 0;
}

int nnx_map_resize(fgx_ctx *c, const fgx_node *n) {
  fg_resize_opts o;
  int linear = 0, rank;
  fg_dtype dt;
  int64_t xd[FGX_MAX_DIMS];
  char b[256];
  memset(&o, 0, sizeof o);
  if (resize_modes(c, n, &linear, &o) < 0 || fgx_input_info(c, n, 0, &dt, &rank, xd) < 0) return -1;
  if (rank < 2)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 0 (X) %s has rank %d; it must be >= 2",
                    nnx_fmt(xd, rank, b, sizeof b), rank);
  const int v10 = fgx_opset(c) < 11;
  if (v10) {
    if (from_scales(c, n, 1, rank, xd, &o) < 0) return -1;
  } else {
    /* roi (input 1) only matters to tf_crop_and_resize, refused above. */
    /* An empty tensor stands for an input not given (opset 11 needs one). */
    const fgx_known *sk = fgx_has_input(n, 2) ? fgx_input_known(c, n, 2) : NULL;
    const fgx_known *zk = fgx_has_input(n, 3) ? fgx_input_known(c, n, 3) : NULL;
    const int has_scales = fgx_has_input(n, 2) && (!sk || fg_tensor_num_elements(sk->t) > 0);
    const int has_sizes = fgx_has_input(n, 3) && (!zk || fg_tensor_num_elements(zk->t) > 0);
    if (has_scales == has_sizes)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "exactly one of input 2 (scales) and input 3 (sizes) must be given");
    if ((has_scales ? from_scales(c, n, 2, rank, xd, &o) : from_sizes(c, n, rank, xd, &o)) < 0)
      return -1;
  }
  if (v10 && !linear && (o.scales[0] < 1 || o.scales[1] < 1))
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "opset 10 nearest with scales %g, %g: its rounding when shrinking is not "
                    "defined; use opset 11 or later",
                    o.scales[0], o.scales[1]);
  fg_graph *g = fgx_graph(c);
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  return nnx_set(c, n, 0, linear ? fg_resize_linear(g, x, &o) : fg_resize_nearest(g, x, &o));
}
