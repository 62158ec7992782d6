/* fg_variable_set_value: a new value for a variable of a built graph (what
 * `flowgraph train --lr X` writes into a model's learning-rate variable),
 * as TensorFlow's Variable.load or torch's param.data.copy_ before a run. */
#include <string.h>

#include "flowgraph/graph.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"

int fg_variable_set_value(fg_graph *g, const char *name, const fg_tensor *value, fg_status *st) {
  if (!g || !name || !value) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_variable_set_value: %s is NULL",
                  !g      ? "the graph"
                  : !name ? "the name"
                          : "the value");
    return -1;
  }
  if (fg_graph_status(g, st) != FG_OK) return -1;
  const int id = fg_graph_find(g, name);
  if (id < 0) {
    fg_status_set(st, FG_NOT_FOUND, "fg_variable_set_value: no node named '%s'", name);
    return -1;
  }
  fg_node *n = &g->nodes[id];
  if (n->op != FG_OP_VARIABLE) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_variable_set_value: '%s' is a %s, not a variable",
                  name, fg_op_table[n->op].name);
    return -1;
  }
  const fg_tinfo *t = &n->outputs[0];
  const int rank = fg_tensor_rank(value);
  int same = fg_tensor_dtype(value) == t->dtype && rank == t->rank;
  for (int d = 0; same && d < rank; d++)
    same = fg_tensor_dims(value)[d] == t->dims[d];
  if (!same) {
    char want[96], got[96];
    fg_shape_str(t->rank, t->dims, want, sizeof want);
    fg_shape_str(rank, fg_tensor_dims(value), got, sizeof got);
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_variable_set_value: variable '%s' is %s %s, the value %s %s", name,
                  fg_dtype_name(t->dtype), want, fg_dtype_name(fg_tensor_dtype(value)), got);
    return -1;
  }
  if (fg_attrs_set_tensor(&n->attrs, "value", value) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_variable_set_value: out of memory for '%s'", name);
    return -1;
  }
  g->version++;
  return 0;
}
