/* fg_data_parallel's sync_batch_norm option: the copies of batch_norm and
 * batch_norm_grad become sync_batch_norm and sync_batch_norm_grad, whose
 * kernels all-reduce the statistics over the replicas (as
 * torch.nn.SyncBatchNorm.convert_sync_batchnorm). They are collectives:
 * every replica's copies issue them in node order, which is the same in
 * every replica because each node is copied for all replicas at once. */
#include "dist/rewrite/dp_internal.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"

const char *fg_dp_op_name(const dp *d, const fg_node *nd, fg_attrs **own) {
  const char *name = fg_op_table[nd->op].name;
  if (!d->o->sync_batch_norm) return name;
  if (nd->op == FG_OP_BATCH_NORM) return "sync_batch_norm";
  if (nd->op != FG_OP_BATCH_NORM_GRAD) return name;
  /* Where the buckets take the mean weighted by each replica's rows, each
   * replica's dy is of the mean over its own rows: the gradient weighs
   * the replicas' sums alike, so dx is the full batch's for uneven shards
   * too. */
  if (d->stats[0].node >= 0 && !*own) {
    fg_attrs *a = fg_attrs_new();
    if (!a || fg_attrs_copy(a, &nd->attrs) != 0 || fg_attrs_set_int(a, "weighted", 1) != 0) {
      fg_attrs_free(a);
      fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory");
      return name;
    }
    *own = a;
  }
  return "sync_batch_norm_grad";
}
