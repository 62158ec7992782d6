/* Softmax cross-entropy's gradient in one node.
 *
 * The gradient of softmax_cross_entropy(logits, labels) that autodiff
 * builds is
 *   mul(sub(softmax(logits, axis 1), one_hot(labels, C)),
 *       div(dy, numel(labels)))
 * six nodes and four [N, C] buffers. This pass rewrites the mul in place
 * into softmax_cross_entropy_grad(logits, labels, dy), whose kernel makes
 * each row's softmax and the result in one pass with the same arithmetic
 * (bit for bit). The sub and the div must have the mul as their only
 * reader; the softmax, one_hot and numel may have others (they then still
 * run for them).
 *
 * When the loss itself, softmax_cross_entropy(logits, labels), is in the
 * graph too and the gradient's dy is 1 (ones_like of anything, as
 * autodiff seeds a loss, or a constant 1), the loss node becomes
 * softmax_cross_entropy_and_grad(logits, labels), whose output 1 the
 * gradient's readers read: one node reads the logits once for both (the
 * bits of the two). Like TF's SoftmaxCrossEntropyWithLogits it makes both
 * outputs always, so a run fetching only the loss pays for the gradient
 * too (an [N, C] write beside the loss's own read). */
#include <stdlib.h>

#include "executor/passes/passes.h"
#include "graph/op_table.h"

/* The node producing output 0 of o when it is an `op` node, else NULL. */
static const fg_node *producer(const fg_pass_ctx *ctx, fg_output o, int op) {
  const fg_node *n = &ctx->w->g.nodes[o.node];
  return o.index == 0 && n->op == op ? n : NULL;
}

static int same_output(fg_output a, fg_output b) { return a.node == b.node && a.index == b.index; }

static const fg_tinfo *tinfo(const fg_pass_ctx *ctx, fg_output o) {
  return &ctx->w->g.nodes[o.node].outputs[o.index];
}

/* The softmax is over the last axis of a rank-2 input. */
static int softmax_rows(const fg_node *sm) {
  const fg_attr *a = fg_attrs_find(&sm->attrs, "axis");
  const int64_t axis = a && a->type == FG_ATTR_INT ? a->i : 1;
  return sm->outputs[0].rank == 2 && (axis == 1 || axis == -1);
}

/* The inputs (logits, labels, dy) when mul node id is the gradient with
 * `diff` its input a and the scale its input b; 0 when it is not. */
static int match(const fg_pass_ctx *ctx, const int *uses, int id, int a, int b, fg_output *out) {
  const fg_node *mul = &ctx->w->g.nodes[id];
  const fg_node *sub = producer(ctx, mul->inputs[a], FG_OP_SUB);
  const fg_node *dv = producer(ctx, mul->inputs[b], FG_OP_DIV);
  if (!sub || !dv || uses[mul->inputs[a].node] != 1 || uses[mul->inputs[b].node] != 1) return 0;
  const fg_node *sm = producer(ctx, sub->inputs[0], FG_OP_SOFTMAX);
  const fg_node *oh = producer(ctx, sub->inputs[1], FG_OP_ONE_HOT);
  const fg_node *nm = producer(ctx, dv->inputs[1], FG_OP_NUMEL);
  if (!sm || !oh || !nm || !softmax_rows(sm) || !same_output(oh->inputs[0], nm->inputs[0]))
    return 0;
  const fg_tinfo *t = &mul->outputs[0], *lb = tinfo(ctx, oh->inputs[0]);
  const fg_tinfo *dy = tinfo(ctx, dv->inputs[0]);
  if (!fg_dtype_is_float(t->dtype) || !fg_pass_tinfo_equal(t, &sm->outputs[0]) ||
      !fg_pass_tinfo_equal(t, &oh->outputs[0]) || !fg_pass_tinfo_equal(t, &sub->outputs[0]) ||
      nm->outputs[0].dtype != t->dtype || dy->dtype != t->dtype || dy->rank != 0 || lb->rank != 1 ||
      (lb->dtype != FG_I32 && lb->dtype != FG_I64) || t->dims[0] != lb->dims[0])
    return 0;
  /* Rewrites stay within one device. */
  const int ids[] = {mul->inputs[a].node, mul->inputs[b].node, sub->inputs[0].node,
                     sub->inputs[1].node, dv->inputs[1].node};
  for (int k = 0; ctx->group && k < 5; k++)
    if (ctx->group[ids[k]] != ctx->group[id]) return 0;
  out[0] = sm->inputs[0];
  out[1] = oh->inputs[0];
  out[2] = dv->inputs[0];
  return 1;
}

/* 1 when o is one element equal to 1: ones_like's output, or a constant
 * or fill of 1s, of a shape known to hold one element (dy of another size
 * is an error the gradient's kernel reports at run time, which the fused
 * node would not). */
static int is_one(const fg_pass_ctx *ctx, fg_output o) {
  const fg_tinfo *ti = tinfo(ctx, o);
  for (int i = 0; i < ti->rank; i++)
    if (ti->dims[i] != 1) return 0;
  return producer(ctx, o, FG_OP_ONES_LIKE) || fg_pass_const_all_one(&ctx->w->g, o);
}

/* The live softmax_cross_entropy node before `grad` on its logits and
 * labels, in its device group, or -1. */
static int loss_of(const fg_pass_ctx *ctx, int grad) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *gr = &g->nodes[grad];
  for (int id = 0; id < grad; id++) {
    const fg_node *n = &g->nodes[id];
    if (!ctx->dead[id] && n->op == FG_OP_SOFTMAX_CROSS_ENTROPY && n->n_outputs == 1 &&
        same_output(n->inputs[0], gr->inputs[0]) && same_output(n->inputs[1], gr->inputs[1]) &&
        (!ctx->group || ctx->group[id] == ctx->group[grad]))
      return id;
  }
  return -1;
}

/* softmax_cross_entropy_grad node `grad` with dy 1 and its loss become
 * one softmax_cross_entropy_and_grad (the loss node in place). Not in
 * fg_optimize when the gradient is kept (it would run twice). 0 or -1. */
static int try_and_grad(fg_pass_ctx *ctx, int grad, fg_status *st) {
  fg_graph *g = &ctx->w->g;
  const fg_node *gr = &g->nodes[grad];
  if (ctx->dead[grad] || gr->op != FG_OP_SOFTMAX_CROSS_ENTROPY_GRAD || gr->n_inputs != 3 ||
      (!ctx->all_kept && ctx->keep[grad]) || !is_one(ctx, gr->inputs[2]))
    return 0;
  const int loss = loss_of(ctx, grad);
  if (loss < 0 || !fg_pass_can_replace(ctx, grad, (fg_output){loss, 1})) return 0;
  /* The gradient is made at the loss now: a variable it reads must not
   * be written in between. */
  for (int i = 0; i < 2; i++)
    if (g->nodes[gr->inputs[i].node].op == FG_OP_VARIABLE &&
        fg_pass_written_between(g, gr->inputs[i].node, loss, grad))
      return 0;
  fg_tinfo outs[2] = {g->nodes[loss].outputs[0], gr->outputs[0]};
  fg_output in[2] = {gr->inputs[0], gr->inputs[1]};
  if (fg_pass_graph_set_outputs(ctx->w, loss, outs, 2) != 0 ||
      fg_pass_graph_set_op(ctx->w, loss, FG_OP_SOFTMAX_CROSS_ENTROPY_AND_GRAD, in, 2) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "passes: out of memory (xent_grad)");
    return -1;
  }
  const char *rule = "softmax_cross_entropy+softmax_cross_entropy_grad";
  if (fg_pass_replace(ctx, grad, (fg_output){loss, 1}, "fused", rule, st) != 0) return -1;
  return fg_pass_record(ctx, loss, "fused", g->nodes[loss].name, rule, st);
}

int fg_pass_xent_grad(fg_pass_ctx *ctx, fg_status *st) {
  fg_graph *g = &ctx->w->g;
  int *uses = malloc(((size_t)g->n_nodes + 1) * sizeof *uses);
  if (!uses) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "passes: out of memory (xent_grad)");
    return -1;
  }
  fg_pass_count_uses(ctx, uses);
  int rc = 0;
  for (int id = 0; rc == 0 && id < g->n_nodes; id++) {
    const fg_node *n = &g->nodes[id];
    fg_output in[3];
    if (ctx->dead[id] || n->op != FG_OP_MUL || n->n_inputs != 2 ||
        !(match(ctx, uses, id, 0, 1, in) || match(ctx, uses, id, 1, 0, in)))
      continue;
    if (fg_pass_graph_set_op(ctx->w, id, FG_OP_SOFTMAX_CROSS_ENTROPY_GRAD, in, 3) != 0) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "passes: out of memory (xent_grad)");
      rc = -1;
      break;
    }
    rc = fg_pass_record(ctx, id, "fused", n->name, "softmax+one_hot+sub+numel+div+mul", st);
  }
  free(uses);
  for (int id = 0; rc == 0 && id < g->n_nodes; id++)
    rc = try_and_grad(ctx, id, st);
  return rc;
}
