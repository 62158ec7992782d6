/* The resizing builders of include/flowgraph/graph.h: they pack
 * fg_resize_opts into the attributes of graph/op_table.c and call fg_op();
 * shape inference (graph/infer_resize.c) checks the values, so a graph
 * loaded from a file meets the same rules. */
#include "graph/builders_internal.h"
#include "graph/graph_internal.h"

static fg_output resize(fg_graph *g, const char *op, fg_output x, const fg_resize_opts *o,
                        int nearest) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  if (!o) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "%s: options are NULL", op);
    return FG_NO_OUTPUT;
  }
  if ((unsigned)o->coord > FG_RESIZE_ALIGN_CORNERS ||
      (nearest && (unsigned)o->nearest > FG_NEAREST_CEIL)) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "%s: coordinate mode %d or nearest mode %d is unknown",
                  op, (int)o->coord, (int)o->nearest);
    return FG_NO_OUTPUT;
  }
  fg_attrs *a = fg_attrs_new();
  int bad =
      !a || fg_attrs_set_ints(a, "sizes", o->sizes, 2) ||
      fg_attrs_set_string(a, "coordinate_transformation_mode", fg_resize_coord_names[o->coord]);
  /* Zero scales mean "derive them": the attribute is left out. */
  if (!bad && (o->scales[0] != 0 || o->scales[1] != 0))
    bad = fg_attrs_set_floats(a, "scales", o->scales, 2);
  if (!bad && nearest)
    bad = fg_attrs_set_string(a, "nearest_mode", fg_resize_nearest_names[o->nearest]);
  return fg_build_finish(g, op, &x, 1, a, bad);
}

fg_output fg_resize_nearest(fg_graph *g, fg_output x, const fg_resize_opts *o) {
  return resize(g, "resize_nearest", x, o, 1);
}

fg_output fg_resize_linear(fg_graph *g, fg_output x, const fg_resize_opts *o) {
  return resize(g, "resize_linear", x, o, 0);
}
