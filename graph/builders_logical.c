/* Builders for logical_not, logical_and and logical_or (flowgraph/graph.h):
 * no attributes; shape inference (graph/infer_logical.c) checks the
 * operands are bool and broadcast. */
#include "graph/builders_internal.h"

fg_output fg_logical_not(fg_graph *g, fg_output x) {
  return fg_build_finish(g, "logical_not", &x, 1, NULL, 0);
}

fg_output fg_logical_and(fg_graph *g, fg_output a, fg_output b) {
  const fg_output in[2] = {a, b};
  return fg_build_finish(g, "logical_and", in, 2, NULL, 0);
}

fg_output fg_logical_or(fg_graph *g, fg_output a, fg_output b) {
  const fg_output in[2] = {a, b};
  return fg_build_finish(g, "logical_or", in, 2, NULL, 0);
}
