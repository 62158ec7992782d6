/* Dead-node elimination: a node that no kept node needs is removed. The
 * kept nodes (fg_pass_mark_keep) include every node with an effect, so
 * nothing whose run matters goes. */
#include <stdlib.h>

#include "executor/passes/passes.h"

int fg_pass_dce(fg_pass_ctx *ctx, fg_status *st) {
  const fg_graph *g = &ctx->w->g;
  unsigned char *live = calloc((size_t)g->n_nodes + 1, 1);
  if (!live) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "dce: out of memory");
    return -1;
  }
  /* Node ids are topological: one descending sweep marks every ancestor
   * (a constant a pass appended, read by an earlier node, has no inputs
   * to mark). */
  for (int id = g->n_nodes - 1; id >= 0; id--) {
    if (!ctx->keep[id] && !live[id]) continue;
    live[id] = 1;
    for (int i = 0; i < g->nodes[id].n_inputs; i++)
      live[fg_pass_resolve(ctx, g->nodes[id].inputs[i]).node] = 1;
  }
  int rc = 0;
  for (int id = 0; rc == 0 && id < g->n_nodes; id++) {
    if (live[id] || ctx->dead[id]) continue;
    ctx->dead[id] = 1;
    rc = fg_pass_record(ctx, id, "removed", NULL, NULL, st);
  }
  free(live);
  return rc;
}
