/* What the partition (dist/rewrite/partition.c) offers the rest of the
 * library beyond flowgraph/dist.h (internal): the device of every node,
 * and which inputs are there for ordering only. The executor's
 * multi-device runtime (executor/dist/) and the micro-batch rewrite read
 * them. */
#ifndef FG_DIST_REWRITE_PARTITION_H
#define FG_DIST_REWRITE_PARTITION_H

#include "flowgraph/dist.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"

/* Per node id of the partitioned graph: its device index in p. */
const int *fg_partition_node_devices(const fg_partition *p);

/* Whether input k of `nd` is there for ordering only (group, the control
 * inputs of updates and all_reduce): its edge between devices carries no
 * bytes, so the partition counts none and the plan copies nothing. A
 * weighted all_reduce reads inputs 1 and 2 (rows and their sums), a
 * weighted all_reduce_apply_sgd inputs 3 and 4 (4 and 5 for
 * sufficient_factor_apply_sgd, whose input 3 is the factor b): data,
 * which a stage of a data-parallel model split across processes receives
 * from the stage that counted the rows. */
static inline int fg_dist_control_input(const fg_node *nd, int k) {
  switch (nd->op) {
  case FG_OP_GROUP: return 1;
  case FG_OP_ALL_REDUCE: return k >= (fg_attr_int_or(nd, "weighted", 0) ? 3 : 1);
  case FG_OP_APPLY_SGD: return k >= 3;
  case FG_OP_ALL_REDUCE_APPLY_SGD: return k >= (fg_attr_int_or(nd, "weighted", 0) ? 5 : 3);
  case FG_OP_SUFFICIENT_FACTOR_APPLY_SGD: return k >= (fg_attr_int_or(nd, "weighted", 0) ? 6 : 4);
  case FG_OP_MATMUL_APPLY_SGD: return k >= 4;
  case FG_OP_APPLY_MOMENTUM: return k >= 4;
  case FG_OP_APPLY_ADAM: return k >= 6;
  case FG_OP_MULTI_APPLY_SGD:
  case FG_OP_MULTI_APPLY_MOMENTUM:
  case FG_OP_MULTI_APPLY_ADAM: return k >= fg_multi_update_inputs(nd);
  default: return 0;
  }
}

#endif
