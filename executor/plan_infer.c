/* The infer stage of plan building (plan_stages.h): every slot's concrete
 * shape for the fed shapes, size limits, the kernels' parameters and FLOPs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/plan_stages.h"
#include "graph/op_table.h"

static int normalize_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Turns attributes into kernel parameters. Shape inference has already
 * checked every value, so this only normalises (negative axes, "all"). */
static void fill_params(const fg_node *n, const fg_tinfo *in, fg_kparams *p) {
  memset(p, 0, sizeof *p);
  int rank = n->n_inputs ? in[0].rank : 0;
  p->transpose_a = (int)fg_attr_int_or(n, "transpose_a", 0);
  p->transpose_b = (int)fg_attr_int_or(n, "transpose_b", 0);
  p->axis = normalize_axis(fg_attr_int_or(n, "axis", 0), rank);
  p->keepdims = (int)fg_attr_int_or(n, "keepdims", 0);
  p->alpha = fg_attr_float_or(n, "alpha", 0.01);
  p->value = fg_attr_float_or(n, "value", 0.0);
  p->depth = fg_attr_int_or(n, "depth", 0);
  /* Optimizer updates; defaults as in graph/infer_optim.c (torch's). */
  p->momentum = fg_attr_float_or(n, "momentum", 0.0);
  p->nesterov = (int)fg_attr_int_or(n, "nesterov", 0);
  p->beta1 = fg_attr_float_or(n, "beta1", 0.9);
  p->beta2 = fg_attr_float_or(n, "beta2", 0.999);
  p->epsilon = fg_attr_float_or(n, "epsilon", 1e-8);
  p->weight_decay = fg_attr_float_or(n, "weight_decay", 0.0);
  p->l2 = fg_attr_float_or(n, "l2", 0.0);
  const fg_attr *axes = fg_attrs_find(&n->attrs, "axes");
  if (axes && axes->type == FG_ATTR_INTS && axes->n > 0) {
    for (int i = 0; i < axes->n && i < FG_MAX_RANK; i++)
      p->axes[i] = normalize_axis(axes->ints[i], rank);
    p->n_axes = axes->n < FG_MAX_RANK ? axes->n : FG_MAX_RANK;
    qsort(p->axes, (size_t)p->n_axes, sizeof p->axes[0], cmp_int);
  } else {
    for (int i = 0; i < rank; i++)
      p->axes[i] = i;
    p->n_axes = rank;
  }
  const fg_attr *perm = fg_attrs_find(&n->attrs, "perm");
  if (perm && perm->type == FG_ATTR_INTS)
    for (int i = 0; i < perm->n && i < FG_MAX_RANK; i++)
      p->perm[i] = (int)perm->ints[i];
  const fg_attr *begin = fg_attrs_find(&n->attrs, "begin");
  if (begin && begin->type == FG_ATTR_INTS)
    for (int i = 0; i < begin->n && i < FG_MAX_RANK; i++)
      p->begin[i] = begin->ints[i];
  /* Data-parallel ops (kernels/cpu/collective.c) reuse fields: shard's
   * replica index and count, all_reduce's mean flag (default 1) and
   * weighted flag (default 0), also for apply_sgd with all_reduce = 1. */
  if (n->op == FG_OP_SHARD) {
    p->begin[0] = fg_attr_int_or(n, "index", 0);
    p->depth = fg_attr_int_or(n, "count", 1);
  } else if (fg_node_is_collective(n)) {
    p->all_reduce = n->op == FG_OP_APPLY_SGD;
    p->grad_product = p->all_reduce && fg_attr_int_or(n, "grad_product", 0) != 0;
    p->keepdims = (int)fg_attr_int_or(n, "mean", 1);
    p->depth = fg_attr_int_or(n, "weighted", 0);
  }
}

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
  if (rc == 0 && fg_infer(n, in, out, st) != 0) {
    /* The graph was valid with unknown dims; the fed shapes made it fail. */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", fg_status_message(st));
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s (with the fed shapes)", msg);
    rc = -1;
  }
  if (rc == 0 && step) {
    fill_params(n, in, &step->params);
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
