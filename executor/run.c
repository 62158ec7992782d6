/* The sequential run loop: bind feeds, call each step's kernel in order.
 * The thread-pool scheduler of a later issue replaces this file. */
#include <stdio.h>
#include <string.h>

#include "executor/plan.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

int fg_plan_run(const fg_graph *g, fg_plan *plan, const fg_plan_request *req, fg_status *st) {
  for (int i = 0; i < plan->n_feeds; i++)
    if (plan->feed_slots[i] >= 0) plan->slots[plan->feed_slots[i]].data = req->feed_tensors[i]->data;

  char err[512];
  for (int si = 0; si < plan->n_steps; si++) {
    const fg_step *step = &plan->steps[si];
    for (int i = 0; i < step->n_in; i++) plan->scratch_in[i] = plan->slots[step->in_slots[i]];
    /* Outputs of a node occupy consecutive slots. */
    fg_kctx ctx = {plan->scratch_in, step->n_in, &plan->slots[step->out_slots[0]], step->n_out,
                   &step->params, err, sizeof err, NULL};
    err[0] = '\0';
    if (step->fn(&ctx) != 0) {
      const fg_node *n = &g->nodes[step->node];
      fg_status_set(st, FG_INVALID_ARGUMENT, "node '%s' (%s): %s", n->name,
                    fg_op_table[n->op].name, err[0] ? err : "kernel failed");
      return -1;
    }
  }
  return 0;
}
