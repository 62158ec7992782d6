/* The builder of fused_matmul (flowgraph/graph.h); shape inference
 * (graph/infer_fused_matmul.c) checks the shapes and the activation. */
#include "graph/builders_internal.h"
#include "graph/graph_internal.h"

fg_output fg_fused_matmul(fg_graph *g, fg_output a, fg_output b, fg_output bias, int transpose_a,
                          int transpose_b, const char *activation) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  const fg_output in[3] = {a, b, bias};
  fg_attrs *at = fg_attrs_new();
  int bad = at == NULL;
  /* C truth values: any non-zero means transposed. */
  bad = bad || fg_attrs_set_int(at, "transpose_a", transpose_a != 0) != 0;
  bad = bad || fg_attrs_set_int(at, "transpose_b", transpose_b != 0) != 0;
  bad = bad || fg_attrs_set_string(at, "activation", activation ? activation : "none") != 0;
  return fg_build_finish(g, "fused_matmul", in, 3, at, bad);
}
