/* The builders of the shape ops pad, flatten, squeeze, unsqueeze, expand,
 * tile, split and stack (include/flowgraph/graph.h). As in builders.c, each
 * packs its arguments into the attributes graph/op_table.c declares and
 * calls fg_op(); shape inference checks the values, so a graph loaded from
 * a file meets the same rules. unsqueeze is the existing expand_dims op:
 * both insert size-1 dims at positions counted in the output. */
#include <stdio.h>

#include "graph/builders_internal.h"
#include "graph/graph_internal.h"

static int skip(fg_graph *g) { return !g || fg_graph_failed(g); }

/* A caller error found before any node exists. */
static int refuse(fg_graph *g, const char *op, const char *what, int n, const void *p) {
  fg_graph_fail(g, FG_INVALID_ARGUMENT, "%s: %s has %d entries with pointer %p", op, what, n, p);
  return -1;
}

/* n entries at p: n >= 0, and p non-NULL when n > 0. */
static int bad_list(fg_graph *g, const char *op, const char *what, int n, const void *p) {
  return (n < 0 || (n > 0 && !p)) ? refuse(g, op, what, n, p) : 0;
}

/* One input, one ints attribute. */
static fg_output with_ints(fg_graph *g, const char *op, fg_output x, const char *attr,
                           const int64_t *v, int n) {
  if (skip(g) || bad_list(g, op, attr, n, v)) return FG_NO_OUTPUT;
  fg_attrs *a = fg_attrs_new();
  int bad = !a || fg_attrs_set_ints(a, attr, v, n) != 0;
  return fg_build_finish(g, op, &x, 1, a, bad);
}

fg_output fg_pad(fg_graph *g, fg_output x, const int64_t *pads, const char *mode, double value) {
  if (skip(g)) return FG_NO_OUTPUT;
  int64_t dims[FG_MAX_RANK];
  int rank = fg_output_shape(g, x, dims);
  if (rank < 0) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "pad: input x (node %d output %d) does not exist", x.node,
                  x.index);
    return FG_NO_OUTPUT;
  }
  if (bad_list(g, "pad", "pads", 2 * rank, pads)) return FG_NO_OUTPUT;
  fg_attrs *a = fg_attrs_new();
  int bad = !a || fg_attrs_set_ints(a, "pads", pads, 2 * rank) != 0 ||
            fg_attrs_set_string(a, "mode", mode ? mode : "constant") != 0 ||
            fg_attrs_set_float(a, "value", value) != 0;
  return fg_build_finish(g, "pad", &x, 1, a, bad);
}

fg_output fg_flatten(fg_graph *g, fg_output x, int axis) {
  return fg_build_int(g, "flatten", &x, 1, "axis", axis);
}

fg_output fg_squeeze(fg_graph *g, fg_output x, const int64_t *axes, int n_axes) {
  return with_ints(g, "squeeze", x, "axes", axes, n_axes);
}

fg_output fg_unsqueeze(fg_graph *g, fg_output x, const int64_t *axes, int n_axes) {
  return with_ints(g, "expand_dims", x, "axes", axes, n_axes);
}

fg_output fg_expand(fg_graph *g, fg_output x, int rank, const int64_t *dims) {
  return with_ints(g, "expand", x, "shape", dims, rank);
}

fg_output fg_tile(fg_graph *g, fg_output x, const int64_t *repeats, int n) {
  return with_ints(g, "tile", x, "repeats", repeats, n);
}

int fg_split(fg_graph *g, fg_output x, int axis, const int64_t *sizes, int n, fg_output *outs) {
  if (outs)
    for (int i = 0; i < n; i++)
      outs[i] = FG_NO_OUTPUT;
  if (skip(g)) return -1;
  if (n < 1 || !outs) return refuse(g, "split", "outs", n, (const void *)outs);
  fg_attrs *a = fg_attrs_new();
  int bad = !a || fg_attrs_set_int(a, "axis", axis) != 0 ||
            (sizes ? fg_attrs_set_ints(a, "sizes", sizes, n)
                   : fg_attrs_set_int(a, "num_outputs", n)) != 0;
  fg_output o = fg_build_finish(g, "split", &x, 1, a, bad);
  if (o.node < 0) return -1;
  for (int i = 0; i < n; i++)
    outs[i] = (fg_output){o.node, i};
  return 0;
}

fg_output fg_stack(fg_graph *g, const fg_output *xs, int n, int axis) {
  if (skip(g) || bad_list(g, "stack", "xs", n, xs)) return FG_NO_OUTPUT;
  return fg_build_int(g, "stack", xs, n, "axis", axis);
}
