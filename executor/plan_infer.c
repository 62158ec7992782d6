/* The infer stage of plan building (plan_stages.h): every slot's concrete
 * shape for the fed shapes, size limits, the ops' parsed parameters and
 * FLOPs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/plan_stages.h"
#include "graph/op_table.h"

/* Output o of node n, of shape t: its bytes must be representable, and
 * one tensor alone over the limit is named (the whole plan is checked
 * again, arena plus fetches, before either is allocated). */
static int check_output(const fg_node *n, int o, const fg_tinfo *t, int64_t limit, fg_status *st) {
  const char *op = fg_op_table[n->op].name;
  size_t bytes = 0;
  if (fg_tinfo_bytes(t, &bytes) != 0 || bytes > SIZE_MAX / 4) {
    char buf[FG_SHAPE_STR_MAX];
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "node '%s' (%s): output %d of shape %s is too large",
                  n->name, op, o, fg_shape_str(t->rank, t->dims, buf, sizeof buf));
    return -1;
  }
  char what[300];
  snprintf(what, sizeof what, "node '%s' (%s) output %d", n->name, op, o);
  return fg_plan_check_memory(bytes, limit, what, st);
}

/* The shapes of node id's outputs from its inputs' slots: in_slots (its
 * step's), or NULL for the producers' own slots (a node another process
 * runs). With a step, also its parameters and FLOPs. */
static int infer_node(fg_plan_builder *b, int id, const int *in_slots, fg_step *step,
                      fg_status *st) {
  fg_plan *plan = b->plan;
  const fg_node *n = &b->g->nodes[id];
  const fg_op_def *def = &fg_op_table[n->op];
  fg_tinfo in_stack[8], out_stack[4];
  fg_tinfo *in = n->n_inputs <= 8 ? in_stack : malloc((size_t)n->n_inputs * sizeof *in);
  fg_tinfo *out = n->n_outputs <= 4 ? out_stack : malloc((size_t)n->n_outputs * sizeof *out);
  int rc = in && out ? 0 : fg_plan_oom(st, "steps");
  for (int i = 0; rc == 0 && i < n->n_inputs; i++) {
    int s = in_slots ? in_slots[i] : plan->slot_of_output[n->inputs[i].node] + n->inputs[i].index;
    const fg_kbuf *k = &plan->slots[s];
    in[i].dtype = k->dtype;
    in[i].rank = k->rank;
    for (int d = 0; d < FG_MAX_RANK; d++)
      in[i].dims[d] = k->dims[d];
  }
  if (rc == 0) {
    int bad = fg_infer(n, in, out, st);
    if (bad == 0 && step) bad = fg_op_parse_params(n, in, &step->params, st);
    if (bad != 0) {
      /* The graph was valid with unknown dims; the fed shapes made it fail. */
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", fg_status_message(st));
      fg_status_set(st, FG_INVALID_ARGUMENT, "%s (with the fed shapes)", msg);
      rc = -1;
    }
  }
  if (rc == 0 && step) {
    step->flops = def->flops ? def->flops(n, in, out) : 0;
    plan->flops += step->flops;
  }
  int s0 = plan->slot_of_output[id];
  for (int o = 0; rc == 0 && o < n->n_outputs; o++) {
    fg_kbuf *k = &plan->slots[s0 + o];
    k->dtype = out[o].dtype;
    k->rank = out[o].rank;
    for (int d = 0; d < FG_MAX_RANK; d++)
      k->dims[d] = d < out[o].rank ? out[o].dims[d] : 0;
    k->data = NULL;
    rc = check_output(n, o, &out[o], b->req->max_memory_bytes, st);
  }
  if (in != in_stack) free(in);
  if (out != out_stack) free(out);
  return rc;
}

int fg_plan_infer(fg_plan_builder *b, fg_status *st) {
  fg_plan *plan = b->plan;
  for (int k = 0; k < b->n_seq; k++) {
    if (b->seq[k] < 0) {
      if (infer_node(b, -1 - b->seq[k], NULL, NULL, st) != 0) return -1;
      continue;
    }
    fg_step *step = &plan->steps[b->seq[k]];
    if (!step->xfer) {
      if (infer_node(b, step->node, step->in_slots, step, st) != 0) return -1;
    } else if (step->n_out) {
      /* A transfer's slot holds a copy of the tensor it carries (named by
       * in_slots[0] also where a recv reads nothing here). */
      fg_kbuf *to = &plan->slots[step->out_slots[0]];
      const fg_kbuf *from = &plan->slots[step->in_slots[0]];
      to->dtype = from->dtype;
      to->rank = from->rank;
      memcpy(to->dims, from->dims, sizeof to->dims);
    }
  }
  return 0;
}
