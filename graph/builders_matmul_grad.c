/* The builders of the gradient epilogue ops (flowgraph/graph.h); shape
 * inference (graph/infer_matmul_grad.c) checks the shapes. */
#include "graph/builders_internal.h"
#include "graph/graph_internal.h"

fg_output fg_fused_matmul_relu_grad(fg_graph *g, fg_output a, fg_output b, fg_output y,
                                    int transpose_a, int transpose_b) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  const fg_output in[3] = {a, b, y};
  fg_attrs *at = fg_attrs_new();
  int bad = at == NULL;
  /* C truth values: any non-zero means transposed. */
  bad = bad || fg_attrs_set_int(at, "transpose_a", transpose_a != 0) != 0;
  bad = bad || fg_attrs_set_int(at, "transpose_b", transpose_b != 0) != 0;
  return fg_build_finish(g, "fused_matmul_relu_grad", in, 3, at, bad);
}

fg_output fg_matmul_bias_grad(fg_graph *g, fg_output a, fg_output dz) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  const fg_output in[2] = {a, dz};
  return fg_build_finish(g, "matmul_bias_grad", in, 2, NULL, 0);
}
