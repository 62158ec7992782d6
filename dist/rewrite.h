/* Pieces shared by the training-graph rewrites of dist/ (internal):
 * fg_data_parallel (data_parallel.c) and fg_micro_batch (micro_batch.c). */
#ifndef FG_DIST_REWRITE_H
#define FG_DIST_REWRITE_H

#include <stdio.h>

#include "graph/graph_internal.h"
#include "graph/op_table.h"

/* Input index of the gradient in an optimizer update, -1 for other ops. */
static inline int fg_update_grad_input(int op) {
  switch (op) {
  case FG_OP_APPLY_SGD: return 1;
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
    int id = batch[b] ? fg_graph_find(g, batch[b]) : -1;
    if (id < 0 || g->nodes[id].op != FG_OP_PLACEHOLDER) {
      fg_status_set(st, id < 0 ? FG_NOT_FOUND : FG_INVALID_ARGUMENT, "%s: batch input '%s' %s", who,
                    batch[b] ? batch[b] : "(null)",
                    id < 0 ? "is not a node of the graph" : "is not a placeholder");
      return -1;
    }
    if (first < 0 || id < first) first = id;
  }
  return first;
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
