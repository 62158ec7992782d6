/* The ONNX exporter's writer of resize_nearest and resize_linear: Resize
 * (opset 11 and later) with the node's modes. flowgraph's node holds the
 * output size; without a scales attribute its coordinates use sizes / in,
 * which is what Resize does with a sizes input, so that is what is
 * written: a constant when the leading dims are known, else the input's
 * Shape up to the last two dims followed by the two sizes. With a scales
 * attribute the coordinates follow those scales, so Resize gets a scales
 * input, which is exact only where floor(in x scale) gives the node's
 * sizes; otherwise the export is refused. Opsets 11 and 12 take empty
 * tensors for the inputs not given. */
#include <math.h>
#include <string.h>

#include "schema/onnx/onnx_export.h"

#define UNSUPPORTED(c, id, ...)                                                                    \
  fgo_fail(c, FG_UNIMPLEMENTED, "ONNX export: node '%s' (%s): " __VA_ARGS__)
#define NODE_NAME(c, id) fg_node_name(fgo_graph(c), id)
#define OP_NAME(c, id)   fg_node_op(fgo_graph(c), id)

/* Resize's scales input: 1 on the leading axes, the node's two scales. */
static const char *scales_input(fgo_ctx *c, int id, const fg_tinfo *x, const int64_t *sizes,
                                const double *sc) {
  double v[FG_MAX_RANK];
  for (int a = 0; a < x->rank; a++)
    v[a] = a < x->rank - 2 ? 1.0 : (double)(float)sc[a - (x->rank - 2)];
  for (int d = 0; d < 2; d++) {
    const int64_t in = x->dims[x->rank - 2 + d];
    if (in < 1 || floor((double)in * v[x->rank - 2 + d]) != (double)sizes[d]) {
      UNSUPPORTED(c, id, "scales %g, %g of a %lld by %lld plane do not give its sizes %lld, %lld",
                  NODE_NAME(c, id), OP_NAME(c, id), sc[0], sc[1], (long long)x->dims[x->rank - 2],
                  (long long)x->dims[x->rank - 1], (long long)sizes[0], (long long)sizes[1]);
      return NULL;
    }
  }
  return fgo_const_vec(c, id, "scales", FG_F32, v, x->rank);
}

/* Resize's sizes input: x's leading dims (from its Shape when one is not
 * known), then the node's two sizes. */
static const char *sizes_input(fgo_ctx *c, int id, const fg_tinfo *x, const int64_t *sizes) {
  int64_t v[FG_MAX_RANK];
  int known = 1;
  for (int a = 0; a < x->rank - 2; a++)
    known &= (v[a] = x->dims[a]) >= 0;
  v[x->rank - 2] = sizes[0], v[x->rank - 1] = sizes[1];
  if (known) return fgo_const_i64(c, id, "sizes", v, x->rank);
  const int64_t zero = 0, lead = x->rank - 2;
  const char *shape = fgo_tmp(c, id, "Shape"), *head = fgo_tmp(c, id, "leading");
  const char *out = fgo_tmp(c, id, "sizes");
  const char *sl[3] = {shape, fgo_const_i64(c, id, "start", &zero, 1),
                       fgo_const_i64(c, id, "end", &lead, 1)};
  const char *cat[2] = {head, fgo_const_i64(c, id, "plane", sizes, 2)};
  if (!shape || !head || !out || !sl[1] || !sl[2] || !cat[1] ||
      !fgo_emit1(c, id, "Shape", fgo_in(c, id, 0), shape) ||
      !fgo_emit(c, id, "Slice", sl, 3, &head, 1))
    return NULL;
  Onnx__NodeProto *n = fgo_emit(c, id, "Concat", cat, 2, &out, 1);
  return n && fgo_attr_int(c, n, "axis", 0) == 0 ? out : NULL;
}

int fgo_w_resize(fgo_ctx *c, int id) {
  const fg_graph *g = fgo_graph(c);
  const int nearest = strcmp(OP_NAME(c, id), "resize_nearest") == 0;
  const fg_tinfo *x = fgo_in_info(c, id, 0);
  int64_t sizes[2];
  const double *sc = NULL;
  int n_sc = 0;
  if (!x || x->rank < 2 || fgo_get_ints(c, id, "sizes", sizes, 2) != 2)
    return UNSUPPORTED(c, id, "needs an input of rank >= 2 and 2 sizes", NODE_NAME(c, id),
                       OP_NAME(c, id));
  const int has_scales = fg_node_attr_floats(g, id, "scales", &sc, &n_sc) == 0 && n_sc == 2;
  const char *arg = has_scales ? scales_input(c, id, x, sizes, sc) : sizes_input(c, id, x, sizes);
  /* Before opset 13, roi and scales are required inputs: empty tensors
   * stand for "not given". */
  const double none = 0;
  const char *empty = fgo_opset(c) < 13 ? fgo_const_vec(c, id, "empty", FG_F32, &none, 0) : "";
  const char *in[4] = {fgo_in(c, id, 0), empty, has_scales ? arg : empty, has_scales ? "" : arg};
  const char *out = fgo_out(c, id, 0);
  if (!arg || !empty || !in[0] || !out) return -1;
  Onnx__NodeProto *n = fgo_emit(c, id, "Resize", in, has_scales ? 3 : 4, &out, 1);
  const char *coord = "half_pixel", *mode = "round_prefer_floor";
  fg_node_attr_string(g, id, "coordinate_transformation_mode", &coord);
  fg_node_attr_string(g, id, "nearest_mode", &mode);
  if (fgo_attr_string(c, n, "mode", nearest ? "nearest" : "linear") != 0 ||
      fgo_attr_string(c, n, "coordinate_transformation_mode", coord) != 0)
    return -1;
  return nearest ? fgo_attr_string(c, n, "nearest_mode", mode) : (n ? 0 : -1);
}
