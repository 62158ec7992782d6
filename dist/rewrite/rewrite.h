/* Pieces shared by the training-graph rewrites of dist/ (internal):
 * fg_data_parallel (data_parallel.c) and fg_micro_batch (micro_batch.c). */
#ifndef FG_DIST_REWRITE_REWRITE_H
#define FG_DIST_REWRITE_REWRITE_H

#include <stdio.h>

#include "graph/graph_internal.h"
#include "graph/op_table.h"

/* Input index of the gradient in an optimizer update, -1 for other ops.
 * The fused updates count as updates (input 1: the gradient, or its factor
 * a), so that a rewrite of an already rewritten graph finds them and
 * refuses what it cannot combine. */
static inline int fg_update_grad_input(int op) {
  switch (op) {
  case FG_OP_APPLY_SGD:
  case FG_OP_ALL_REDUCE_APPLY_SGD:
  case FG_OP_SUFFICIENT_FACTOR_APPLY_SGD: return 1;
  case FG_OP_APPLY_MOMENTUM: return 2;
  case FG_OP_APPLY_ADAM: return 3;
  default: return -1;
  }
}

/* Checks that every batch input names a placeholder of g; returns the
 * smallest node id among them (-2 when there are none), or -1 with st
 * naming the input (FG_NOT_FOUND or FG_INVALID_ARGUMENT, the message
 * starting with `who`). */
static inline int fg_rewrite_batch_inputs(const fg_graph *g, const char *who,
                                          const char *const *batch, int n_batch, fg_status *st) {
  int first = -2;
  for (int b = 0; b < n_batch; b++) {
    if (!batch[b]) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "%s: batch_inputs[%d] is NULL", who, b);
      return -1;
    }
    int id = fg_graph_find(g, batch[b]);
    if (id < 0 || g->nodes[id].op != FG_OP_PLACEHOLDER) {
      fg_status_set(st, id < 0 ? FG_NOT_FOUND : FG_INVALID_ARGUMENT, "%s: batch input '%s' %s", who,
                    batch[b], id < 0 ? "is not a node of the graph" : "is not a placeholder");
      return -1;
    }
    if (first < 0 || id < first) first = id;
  }
  return first;
}

/* The training step a rewrite works on: the nodes that g's metadata
 * "loss" and "train_target" name (as fg_minimize records them) into *loss
 * and *target. 0, or -1 with st set (FG_INVALID_ARGUMENT, the message
 * starting with `who`) when either is missing, names a source (a
 * placeholder, variable or constant: nothing the step computes), or both
 * name one node, or when `done_key` is in g's metadata: the rewrite ran on
 * g already, and its new nodes' names would clash. */
static inline int fg_rewrite_train_nodes(const fg_graph *g, const char *who, const char *done_key,
                                         fg_output *loss, int *target, fg_status *st) {
  const char *done = fg_graph_metadata(g, done_key);
  if (done) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s: the graph is a rewrite of this kind already (metadata \"%s\" = %s); "
                  "apply it to the original graph",
                  who, done_key, done);
    return -1;
  }
  const char *loss_name = fg_graph_metadata(g, "loss");
  const char *target_name = fg_graph_metadata(g, "train_target");
  *loss = loss_name ? fg_graph_find_output(g, loss_name) : FG_NO_OUTPUT;
  *target = target_name ? fg_graph_find(g, target_name) : -1;
  if (loss->node < 0 || *target < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s: the graph needs metadata \"loss\" and \"train_target\" naming nodes (as "
                  "fg_minimize records them); found loss '%s', train_target '%s'",
                  who, loss_name ? loss_name : "(none)", target_name ? target_name : "(none)");
    return -1;
  }
  const fg_node *ln = &g->nodes[loss->node], *tn = &g->nodes[*target];
  const int loss_src = (fg_op_table[ln->op].flags & FG_OPF_SOURCE) != 0;
  if (loss_src || (fg_op_table[tn->op].flags & FG_OPF_SOURCE) || *target == loss->node) {
    const fg_node *bad = loss_src ? ln : tn;
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: metadata \"%s\" names '%s' (%s), %s", who,
                  loss_src ? "loss" : "train_target", bad->name, fg_op_table[bad->op].name,
                  *target == loss->node && !loss_src
                      ? "the node \"loss\" names too: the target is the step's updates"
                  : loss_src ? "not a loss the step computes"
                             : "not the step's updates (an optimizer update or a group of them)");
    return -1;
  }
  return 0;
}

/* The rewritten graph keeps g's metadata ("loss", "train_target", ...)
 * and records the rewrite's parameter as `key` = value. */
static inline void fg_rewrite_metadata(fg_graph *ng, const fg_graph *g, const char *key,
                                       long long value) {
  for (int i = 0; i < g->n_meta; i++)
    fg_graph_set_metadata(ng, g->meta_keys[i], g->meta_vals[i]);
  char num[32];
  snprintf(num, sizeof num, "%lld", value);
  fg_graph_set_metadata(ng, key, num);
}

#endif
