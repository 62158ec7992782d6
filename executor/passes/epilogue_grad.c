/* Gradient epilogues: relu's gradient of a matmul's product,
 * select(greater(y, 0), matmul(a, b), 0), becomes one
 * fused_matmul_relu_grad(a, b, y) node (graph/infer_matmul_grad.c) whose
 * kernel masks each tile of the product while it is in cache: the bits
 * are the chain's (the same products; then y > 0 compared as greater
 * does, the product copied or the select's +0.0 written).
 *
 * In a training graph this is a layer's input gradient dX = dZ @ W^T
 * feeding the relu gradient of the layer before (autodiff/grad_math.c
 * makes relu's gradient from relu's output y). The chain: a matmul of
 * floats (any transposes and batch dims: the kernel masks whatever tiles
 * it computes); a greater(y, zero) with zero a constant of one element
 * equal to 0 (either sign: y > -0.0 is y > 0) no larger in rank than y; a
 * select(that, matmul, zero') whose zero' is a constant of one element
 * with the bits of +0.0; y, the product and the select all of one type
 * with every dim known (with an unknown dim, y and the product could
 * differ at run time where the select would broadcast them). The select
 * (the root) is rewritten in place, so its name, id and output stay.
 *
 * The legality rules are the epilogue pass's (epilogue_common.h): the
 * matmul and the greater have no other consumer, none of the three is
 * pinned, all lie in one device group, the matmul's inputs and y are not
 * variable state written between their reads and the root, fg_optimize
 * does not absorb a fetched node while a session (every node kept) does.
 * Nothing may wait for the greater (its bool output could not stand for
 * the root's float one).
 *
 * The bias gradient: a dense layer's db = sum_to(dz, b) ([N] from a 2-D
 * dz) and the later dw = matmul(a, dz, transpose_a) reading the same dz
 * become one matmul_bias_grad(a, dz) with outputs dw and db: the matmul
 * is rewritten in place (its output 0 stays dw) with a second output,
 * and the sum_to's readers read that. On a GPU the kernel is one cuBLASLt
 * call with the bias-gradient epilogue; on the CPU it runs the matmul and
 * the sum_to kernels one after the other (the same bits), which costs
 * what the two nodes cost, so the rewrite is made for every device rather
 * than only for GPU groups (which the pass cannot tell apart: its groups
 * say which nodes share a device, not what the device is). It needs every
 * reader of the sum_to after the matmul (they then read a node before
 * them), dz not written between the two, both in one group, and in
 * fg_optimize the sum_to not kept (it would be computed twice). */
#include <limits.h>
#include <math.h>

#include "executor/passes/epilogue_common.h"
#include "graph/op_table.h"

typedef struct grad_chain {
  int root, mm, gt;
  fg_output a, b, y;
} grad_chain;

static int fully_known(const fg_tinfo *t) {
  for (int i = 0; i < t->rank; i++)
    if (t->dims[i] < 0) return 0;
  return 1;
}

/* The value of o as a constant of one float element, into *v; 0 when o is
 * no such constant. */
static int one_float(const fg_graph *g, fg_output o, double *v) {
  const fg_tensor *t = fg_pass_const_value(g, o);
  if (!t || fg_tensor_num_elements(t) != 1) return 0;
  if (fg_tensor_dtype(t) == FG_F32)
    *v = *(const float *)fg_tensor_data(t);
  else if (fg_tensor_dtype(t) == FG_F64)
    *v = *(const double *)fg_tensor_data(t);
  else
    return 0;
  return 1;
}

/* greater(y, zero) absorbable into the root, into c->gt and c->y. */
static int match_greater(const fg_pass_ctx *ctx, const fg_epi_state *s, int gt, grad_chain *c) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[gt];
  double z;
  if (n->op != FG_OP_GREATER || n->n_inputs != 2 || !fg_epi_absorbable_any(ctx, s, gt, c->root) ||
      s->ctrl_first[gt] != INT_MAX || !one_float(g, n->inputs[1], &z) || z != 0)
    return 0;
  const fg_tinfo *ty = &g->nodes[n->inputs[0].node].outputs[n->inputs[0].index];
  const fg_tinfo *tz = &g->nodes[n->inputs[1].node].outputs[n->inputs[1].index];
  if (tz->dtype != ty->dtype || tz->rank > ty->rank) return 0;
  c->gt = gt, c->y = n->inputs[0];
  return 1;
}

/* The chain whose last node is the select `root`, into *c. */
static int match_chain(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, grad_chain *c) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *r = &g->nodes[root];
  c->root = root;
  if (r->op != FG_OP_SELECT || r->n_inputs != 3 || !fg_epi_root_ok(ctx, s, root) ||
      !fully_known(&r->outputs[0]))
    return 0;
  fg_output cond = r->inputs[0], x = r->inputs[1];
  double z;
  /* The select writes the constant's bits where the mask is false: the
   * fused kernel writes +0.0. */
  if (!one_float(g, r->inputs[2], &z) || z != 0 || signbit(z)) return 0;
  if (cond.index != 0 || x.index != 0 || cond.node == x.node) return 0;
  const fg_node *m = &g->nodes[x.node];
  if (m->op != FG_OP_MATMUL || m->n_inputs != 2 || !fg_epi_absorbable(ctx, s, x.node, root) ||
      !fg_pass_tinfo_equal(&m->outputs[0], &r->outputs[0]) || !match_greater(ctx, s, cond.node, c))
    return 0;
  const fg_tinfo *ty = &g->nodes[c->y.node].outputs[c->y.index];
  if (!fg_pass_tinfo_equal(ty, &r->outputs[0])) return 0;
  c->mm = x.node, c->a = m->inputs[0], c->b = m->inputs[1];
  return fg_epi_readable_at_root(g, c->a, c->mm, root) &&
         fg_epi_readable_at_root(g, c->b, c->mm, root) &&
         fg_epi_readable_at_root(g, c->y, c->gt, root);
}

/* Root rewritten in place into fused_matmul_relu_grad(a, b, y) with the
 * matmul's transposes; its other attributes (placement) stay. -1 out of
 * memory. */
static int rewrite_root(fg_pass_ctx *ctx, const grad_chain *c) {
  fg_graph *g = &ctx->w->g;
  const fg_node *m = &g->nodes[c->mm];
  int64_t ta = fg_attr_int_or(m, "transpose_a", 0) != 0,
          tb = fg_attr_int_or(m, "transpose_b", 0) != 0;
  fg_node *n = &g->nodes[c->root];
  if (fg_pass_graph_own_attrs(ctx->w, c->root) != 0 ||
      fg_attrs_set_int(&n->attrs, "transpose_a", ta) != 0 ||
      fg_attrs_set_int(&n->attrs, "transpose_b", tb) != 0)
    return -1;
  n->inputs[0] = c->a, n->inputs[1] = c->b, n->inputs[2] = c->y;
  n->op = FG_OP_FUSED_MATMUL_RELU_GRAD;
  return 0;
}

static int try_relu_grad(fg_pass_ctx *ctx, fg_epi_state *s, int root, fg_status *st) {
  grad_chain c;
  if (!match_chain(ctx, s, root, &c)) return 0;
  if (rewrite_root(ctx, &c) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "grad_epilogue: out of memory");
    return -1;
  }
  const int parts[2] = {c.mm, c.gt};
  return fg_epi_absorb(ctx, s, parts, 2, root, "matmul+relu_grad", st);
}

/* ---- the bias gradient ---------------------------------------------------- */

/* 1 when a live node with an id in (id, upto] reads node id (as data
 * or waiting for it). */
static int read_before(const fg_pass_ctx *ctx, int id, int upto) {
  const fg_graph *g = &ctx->w->g;
  for (int k = id + 1; k <= upto; k++)
    for (int i = 0; !ctx->dead[k] && i < g->nodes[k].n_inputs; i++)
      if (g->nodes[k].inputs[i].node == id) return 1;
  return 0;
}

/* The weight gradient matmul(a, dz, transpose_a) after the sum_to `st_id`
 * that reads the same dz (a dense layer's db), or -1. */
static int weight_grad_of(const fg_pass_ctx *ctx, const fg_epi_state *s, int st_id) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *r = &g->nodes[st_id];
  fg_output dz = r->inputs[0];
  for (int m = st_id + 1; m < g->n_nodes; m++) {
    const fg_node *n = &g->nodes[m];
    /* In a session, a matmul nobody reads (absorbed by update_epilogue,
     * or a gradient only fetched) runs only when a run fetches it: db
     * must not make it run every time. */
    if (n->op != FG_OP_MATMUL || n->n_inputs != 2 || ctx->dead[m] || s->absorbed[m] ||
        (ctx->all_kept && s->uses[m] == 0) || n->inputs[1].node != dz.node ||
        n->inputs[1].index != dz.index || fg_attr_int_or(n, "transpose_a", 0) == 0 ||
        fg_attr_int_or(n, "transpose_b", 0) != 0)
      continue;
    const fg_tinfo *ta = &g->nodes[n->inputs[0].node].outputs[n->inputs[0].index];
    if (ta->rank == 2 && n->outputs[0].rank == 2 && !fg_pass_node_pinned(n) &&
        (!ctx->group || ctx->group[m] == ctx->group[st_id]))
      return m;
  }
  return -1;
}

/* sum_to(dz, [N]) of a 2-D float dz and the later weight gradient
 * matmul(a, dz, transpose_a) become one matmul_bias_grad(a, dz): the
 * matmul rewritten in place with db as its second output, the sum_to's
 * readers rewired to it. Only where every reader of the sum_to comes
 * after the matmul, and in fg_optimize the sum_to is not kept. 0 (fused
 * or not), or -1 out of memory. */
static int try_bias_grad(fg_pass_ctx *ctx, fg_epi_state *s, int st_id, fg_status *st) {
  fg_graph *g = &ctx->w->g;
  const fg_node *r = &g->nodes[st_id];
  if (r->n_inputs != 2 || r->n_outputs != 1 || ctx->dead[st_id] || s->absorbed[st_id] ||
      (!ctx->all_kept && ctx->keep[st_id]) || !fg_epi_is_float(r->outputs[0].dtype))
    return 0;
  const fg_tinfo *tz = &g->nodes[r->inputs[0].node].outputs[r->inputs[0].index];
  const fg_tinfo *tb = &r->outputs[0];
  if (tz->rank != 2 || tb->rank != 1 || tz->dtype != tb->dtype || tz->dims[1] < 0 ||
      tb->dims[0] != tz->dims[1])
    return 0;
  int m = weight_grad_of(ctx, s, st_id);
  if (m < 0 || read_before(ctx, st_id, m) ||
      !fg_epi_readable_at_root(g, g->nodes[m].inputs[1], st_id, m) ||
      !fg_pass_can_replace(ctx, st_id, (fg_output){m, 1}))
    return 0;
  fg_tinfo outs[2] = {g->nodes[m].outputs[0], *tb};
  fg_output in[2] = {g->nodes[m].inputs[0], g->nodes[m].inputs[1]};
  if (fg_pass_graph_set_outputs(ctx->w, m, outs, 2) != 0 ||
      fg_pass_graph_set_op(ctx->w, m, FG_OP_MATMUL_BIAS_GRAD, in, 2) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "grad_epilogue: out of memory");
    return -1;
  }
  s->absorbed[st_id] = s->absorbed[m] = 1;
  const char *rule = "matmul+sum_to";
  if (fg_pass_replace(ctx, st_id, (fg_output){m, 1}, "fused", rule, st) != 0) return -1;
  return fg_pass_record(ctx, m, "fused", g->nodes[m].name, rule, st);
}

int fg_pass_grad_epilogue(fg_pass_ctx *ctx, fg_status *st) {
  static const int select_op[1] = {FG_OP_SELECT}, sum_to_op[1] = {FG_OP_SUM_TO};
  if (fg_epi_run_ops(ctx, "grad_epilogue", select_op, 1, try_relu_grad, st) != 0) return -1;
  return fg_epi_run_ops(ctx, "grad_epilogue", sum_to_op, 1, try_bias_grad, st);
}
