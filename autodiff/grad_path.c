/* fg_gradient_blocked (flowgraph/autodiff.h): why a gradient is
 * identically zero. It follows the rule fg_gradients backpropagates by: a
 * gradient flows from a node's output to an input only through an op
 * flagged differentiable, and only along float tensors. */
#include <stdlib.h>

#include "flowgraph/autodiff.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"

/* 1 when a gradient flows from node n's output back to its input k. */
static int passes(const fg_graph *g, const fg_node *n, int k) {
  const fg_tinfo *t = fg_graph_tinfo(g, n->inputs[k]);
  return (fg_op_table[n->op].flags & FG_OPF_DIFFERENTIABLE) && t && fg_dtype_is_float(t->dtype);
}

int fg_gradient_blocked(const fg_graph *g, fg_output y, fg_output x, int *blocker) {
  if (blocker) *blocker = -1;
  if (!g || !fg_graph_tinfo(g, y) || !fg_graph_tinfo(g, x)) return -1;
  const int n = g->n_nodes;
  /* reach[id]: x reaches node id along any edges; grad[id]: along edges a
   * gradient flows back through; to_y[id]: node id reaches y. */
  unsigned char *reach = calloc((size_t)n + 1, 1), *grad = calloc((size_t)n + 1, 1);
  unsigned char *to_y = calloc((size_t)n + 1, 1);
  if (!reach || !grad || !to_y) {
    free(reach), free(grad), free(to_y);
    return -1;
  }
  reach[x.node] = grad[x.node] = 1;
  /* Node ids are topological (a node reads only earlier ones). */
  for (int id = x.node + 1; id <= y.node; id++) {
    const fg_node *nd = &g->nodes[id];
    for (int k = 0; k < nd->n_inputs; k++) {
      const int q = nd->inputs[k].node;
      reach[id] |= reach[q];
      grad[id] |= grad[q] && passes(g, nd, k);
    }
  }
  to_y[y.node] = 1;
  for (int id = y.node; id > x.node; id--)
    for (int k = 0; to_y[id] && k < g->nodes[id].n_inputs; k++)
      to_y[g->nodes[id].inputs[k].node] = 1;
  const int blocked = reach[y.node] && !grad[y.node];
  /* The blocker: the first node on the way to y that a gradient reaches
   * but does not pass back to that input (argmax, a comparison,
   * stop_gradient, a cast from an integer...). */
  for (int id = x.node + 1; blocked && blocker && *blocker < 0 && id <= y.node; id++) {
    const fg_node *nd = &g->nodes[id];
    for (int k = 0; to_y[id] && k < nd->n_inputs; k++)
      if (grad[nd->inputs[k].node] && !passes(g, nd, k)) *blocker = id;
  }
  free(reach), free(grad), free(to_y);
  return blocked;
}
