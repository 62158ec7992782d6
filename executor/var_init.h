/* A variable's first value when the graph holds its initialiser rather than
 * a value (fg_variable_init in flowgraph/graph.h). */
#ifndef FG_VAR_INIT_H
#define FG_VAR_INIT_H

#include "flowgraph/tensor.h"
#include "graph/graph_internal.h"

/* A new tensor holding what node's initialiser draws; NULL with status set
 * (the node named) on a bad initialiser or out of memory. */
fg_tensor *fg_var_init_tensor(const fg_node *node, fg_status *st);

#endif
