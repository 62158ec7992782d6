/* Builders for the training flag, dropout and initialised variables
 * (flowgraph/graph.h). Values are checked by shape inference
 * (graph/infer_dropout.c, graph/init.c), so a file meets the same rules. */
#include <stdio.h>

#include "graph/graph_internal.h"
#include "graph/init.h"
#include "graph/op_table.h"

fg_output fg_training(fg_graph *g) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  int id = fg_graph_find(g, "training");
  if (id >= 0) {
    if (g->nodes[id].op == FG_OP_TRAINING_FLAG) return (fg_output){id, 0};
    fg_graph_fail(g, FG_INVALID_ARGUMENT,
                  "fg_training: node 'training' exists and is a %s, not the training flag",
                  fg_op_table[g->nodes[id].op].name);
    return FG_NO_OUTPUT;
  }
  return fg_op(g, "training_flag", "training", NULL, 0, NULL);
}

fg_output fg_dropout(fg_graph *g, fg_output x, fg_output training, double p, int64_t seed) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  fg_attrs *a = fg_attrs_new();
  if (!a || fg_attrs_set_float(a, "p", p) || fg_attrs_set_int(a, "seed", seed)) {
    fg_attrs_free(a);
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "dropout: out of memory building attributes");
    return FG_NO_OUTPUT;
  }
  fg_output in[2] = {x, training};
  fg_output o = fg_op(g, "dropout", NULL, in, 2, a);
  fg_attrs_free(a);
  return o;
}

fg_output fg_variable_init(fg_graph *g, const char *name, fg_dtype dtype, int rank,
                           const int64_t *dims, const fg_init *init) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  const char *nm = name ? name : "(unnamed)";
  if (!init || rank < 0 || (rank > 0 && !dims)) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "node '%s' (variable): %s", nm,
                  !init      ? "init is NULL"
                  : rank < 0 ? "rank is negative"
                             : "dims is NULL with a positive rank");
    return FG_NO_OUTPUT;
  }
  fg_attrs *a = fg_attrs_new();
  int bad = !a;
  bad = bad || fg_attrs_set_int(a, "dtype", dtype) || fg_attrs_set_ints(a, "shape", dims, rank);
  bad = bad || fg_attrs_set_int(a, "init", (int64_t)init->kind);
  bad = bad || fg_attrs_set_float(a, "init_a", init->a) || fg_attrs_set_float(a, "init_b", init->b);
  bad = bad || fg_attrs_set_int(a, "init_fan_out", init->fan_out ? 1 : 0);
  bad = bad || fg_attrs_set_int(a, "seed", init->seed);
  /* The stream from the name as given, fixed now: copies of the variable
   * under other names (data-parallel replicas) draw the same values. An
   * unnamed variable's stream comes from its automatic name (below). */
  if (name) bad = bad || fg_attrs_set_int(a, "stream", fg_name_stream(name));
  if (bad) {
    fg_attrs_free(a);
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "node '%s' (variable): out of memory", nm);
    return FG_NO_OUTPUT;
  }
  fg_output o = fg_op(g, "variable", name, NULL, 0, a);
  fg_attrs_free(a);
  if (o.node >= 0 && !name &&
      fg_attrs_set_int(&g->nodes[o.node].attrs, "stream", fg_name_stream(g->nodes[o.node].name)) !=
          0) {
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "node '%s' (variable): out of memory",
                  g->nodes[o.node].name);
    return FG_NO_OUTPUT;
  }
  return o;
}

int fg_replica_attrs(const fg_node *node, int index, int count, fg_attrs **out) {
  *out = NULL;
  if (!fg_op_attr(node->op, "replica")) return 0;
  fg_attrs *a = fg_attrs_new();
  const int64_t r = fg_attr_int_or(node, "replica", 0) * count + index;
  int bad = !a || fg_attrs_copy(a, &node->attrs) != 0 || fg_attrs_set_int(a, "replica", r) != 0;
  if (!bad && fg_attr_int_or(node, "stream", -1) == -1)
    bad = fg_attrs_set_int(a, "stream", fg_name_stream(node->name)) != 0;
  if (bad) {
    fg_attrs_free(a);
    return -1;
  }
  *out = a;
  return 1;
}
