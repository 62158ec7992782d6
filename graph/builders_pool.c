/* The pooling builders of include/flowgraph/graph.h. Like graph/builders.c
 * they pack their arguments into the attributes of graph/op_table.h and
 * call fg_op(); shape inference (graph/infer_pool.c) checks the values, so
 * a graph loaded from a file meets the same rules. */
#include "graph/builders_internal.h"
#include "graph/graph_internal.h"

/* Packs a window; nonzero when out of memory. */
static int window_attrs(const fg_pool2d_opts *o, int is_max, fg_attrs *a) {
  int64_t strides[2], dil[2];
  for (int d = 0; d < 2; d++) {
    strides[d] = o->strides[d] == 0 ? o->kernel[d] : o->strides[d];
    dil[d] = o->dilations[d] == 0 ? 1 : o->dilations[d];
  }
  int bad =
      fg_attrs_set_ints(a, "kernel", o->kernel, 2) || fg_attrs_set_ints(a, "strides", strides, 2) ||
      fg_attrs_set_ints(a, "pads", o->pads, 4) || fg_attrs_set_int(a, "ceil_mode", o->ceil_mode);
  if (is_max)
    bad = bad || fg_attrs_set_ints(a, "dilations", dil, 2);
  else
    bad = bad || fg_attrs_set_int(a, "count_include_pad", o->count_include_pad);
  return bad;
}

static fg_output windowed(fg_graph *g, const char *op, fg_output x, const fg_pool2d_opts *o,
                          int is_max) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  if (!o) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "%s: options are NULL", op);
    return FG_NO_OUTPUT;
  }
  if (!is_max && ((o->dilations[0] != 0 && o->dilations[0] != 1) ||
                  (o->dilations[1] != 0 && o->dilations[1] != 1))) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "%s: dilations [%lld,%lld]; avg_pool2d has none", op,
                  (long long)o->dilations[0], (long long)o->dilations[1]);
    return FG_NO_OUTPUT;
  }
  fg_attrs *a = fg_attrs_new();
  return fg_build_finish(g, op, &x, 1, a, !a || window_attrs(o, is_max, a) != 0);
}

fg_output fg_max_pool2d(fg_graph *g, fg_output x, const fg_pool2d_opts *o) {
  return windowed(g, "max_pool2d", x, o, 1);
}

fg_output fg_avg_pool2d(fg_graph *g, fg_output x, const fg_pool2d_opts *o) {
  return windowed(g, "avg_pool2d", x, o, 0);
}

fg_output fg_global_avg_pool(fg_graph *g, fg_output x) {
  return fg_op(g, "global_avg_pool", NULL, &x, 1, NULL);
}

fg_output fg_global_max_pool(fg_graph *g, fg_output x) {
  return fg_op(g, "global_max_pool", NULL, &x, 1, NULL);
}

fg_output fg_adaptive_avg_pool2d(fg_graph *g, fg_output x, int64_t out_h, int64_t out_w) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  const int64_t size[2] = {out_h, out_w};
  fg_attrs *a = fg_attrs_new();
  int bad = !a || fg_attrs_set_ints(a, "output_size", size, 2) != 0;
  return fg_build_finish(g, "adaptive_avg_pool2d", &x, 1, a, bad);
}
