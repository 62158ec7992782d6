/* The select stage of plan building (plan_stages.h): each step's backend
 * and kernel, from the backend table (backend.h). */
#include <stdio.h>
#include <stdlib.h>

#include "executor/backend.h"
#include "executor/plan_stages.h"

/* The dtype a step's kernel is registered under: input 0's for ops that
 * say so (casts, comparisons...), else output 0's. */
static fg_dtype kernel_key(const fg_plan *plan, const fg_step *step, const fg_op_def *def) {
  if ((def->flags & FG_OPF_KERNEL_KEY_INPUT) && step->n_in > 0)
    return plan->slots[step->in_slots[0]].dtype;
  return step->n_out > 0 ? plan->slots[step->out_slots[0]].dtype : FG_DTYPE_INVALID;
}

/* FG_UNIMPLEMENTED for a node its backend cannot run: the backend's own
 * reason, or which kernel is missing, naming the node, op, device and
 * dtype. */
static int refuse(const fg_backend_query *q, const fg_backend *be, const char *why, fg_status *st) {
  if (!be) {
    fg_status_set(st, FG_UNIMPLEMENTED, "node '%s' (%s): no backend of this session runs it",
                  q->node->name, q->def->name);
    return -1;
  }
  if (why[0]) {
    fg_status_set(st, FG_UNIMPLEMENTED, "%s", why);
    return -1;
  }
  char where[256];
  if (q->node->device && q->node->device[0])
    snprintf(where, sizeof where, "'%s'", q->node->device);
  else
    snprintf(where, sizeof where, "%s", be->where);
  fg_status_set(st, FG_UNIMPLEMENTED, "node '%s' (%s) on %s: no %s kernel for dtype %s",
                q->node->name, q->def->name, where, be->name, fg_dtype_name(q->key));
  return -1;
}

/* Runs the kernel's prepare hook on the step's shapes (no data yet) and
 * keeps its state with the step, freed with the plan. */
static int prepare(fg_plan *plan, fg_step *step, const fg_kprep *kp, const fg_backend_query *q,
                   fg_status *st) {
  fg_kbuf in_stack[8];
  fg_kbuf *in = step->n_in <= 8 ? in_stack : malloc((size_t)step->n_in * sizeof *in);
  fg_kbuf out_stack[4];
  fg_kbuf *out = step->n_out <= 4 ? out_stack : malloc((size_t)step->n_out * sizeof *out);
  if (!in || !out) {
    if (in != in_stack) free(in);
    if (out != out_stack) free(out);
    return fg_plan_oom(st, "kernel state");
  }
  for (int i = 0; i < step->n_in; i++) {
    in[i] = plan->slots[step->in_slots[i]];
    in[i].data = NULL;
  }
  for (int o = 0; o < step->n_out; o++) {
    out[o] = plan->slots[step->out_slots[o]];
    out[o].data = NULL;
  }
  char err[512];
  err[0] = '\0';
  fg_code code = FG_INVALID_ARGUMENT;
  fg_kctx ctx = {.in = in,
                 .n_in = step->n_in,
                 .out = out,
                 .n_out = step->n_out,
                 .p = &step->params,
                 .err = err,
                 .err_size = sizeof err,
                 .code = &code,
                 .fixed_inputs = step->fixed_inputs,
                 .const_inputs = step->const_inputs,
                 .share = q->req->share};
  /* The threads a run gives the kernel (the infer stage has summed the
   * plan's FLOPs, which decide it). */
  int threads = fg_plan_threads(plan);
  void *state = NULL;
  int rc = kp->prepare(&ctx, threads, &state);
  if (in != in_stack) free(in);
  if (out != out_stack) free(out);
  if (rc != 0) {
    fg_status_set(st, code, "node '%s' (%s): preparing its kernel: %s", q->node->name, q->def->name,
                  err[0] ? err : "failed");
    return -1;
  }
  step->kstate = state;
  step->krelease = kp->release;
  step->kbytes = kp->bytes;
  return 0;
}

int fg_plan_select(fg_plan_builder *b, fg_status *st) {
  fg_plan *plan = b->plan;
  for (int si = 0; si < plan->n_steps; si++) {
    fg_step *step = &plan->steps[si];
    if (step->xfer) continue; /* transfers carry their own copy (plan_xfer.c) */
    const fg_node *n = &b->g->nodes[step->node];
    const fg_op_def *def = &fg_op_table[n->op];
    fg_backend_query q = {b->req, n, step->node, def, kernel_key(plan, step, def)};
    const fg_backend *be = fg_backend_for(b->backends, &q);
    char why[512];
    why[0] = '\0';
    if (!be || !be->supports(&q, why, sizeof why)) return refuse(&q, be, why, st);
    step->fn = be->kernel(&q);
    step->host = be->host;
    for (int i = 0; i < step->n_in && i < 32; i++) {
      int kind = plan->slot_kind[step->in_slots[i]];
      if (kind == FG_SLOT_VARIABLE || kind == FG_SLOT_CONSTANT) step->fixed_inputs |= 1u << i;
      if (kind == FG_SLOT_CONSTANT) step->const_inputs |= 1u << i;
    }
    const fg_kprep *kp = be->prep ? be->prep(&q) : NULL;
    if (kp && prepare(plan, step, kp, &q, st) != 0) return -1;
  }
  return 0;
}
