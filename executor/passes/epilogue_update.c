/* Optimizer update epilogues: a weight gradient's product added into its
 * variable by the product's own GEMM.
 *
 * apply_sgd(var, g, lr, ctrl...) whose gradient g is matmul(a, dz,
 * transpose_a) of a 2-D a [R, M] and dz [R, N] (a dense layer's weight
 * gradient, as autodiff makes it) becomes matmul_apply_sgd(var, a, lr,
 * dz, ctrl...), whose kernel is one GEMM with alpha -lr and beta 1 into
 * the variable: the [M, N] gradient is never written and read back, and
 * the update's own pass over memory (var, g and var again) is gone. The
 * apply_sgd (the root) is rewritten in place: its name, id and output
 * (the updated variable) stay, and so do its control inputs, which order
 * it after the variable's readers (the layer's input gradient reads the
 * weight). The matmul is absorbed under the epilogue passes' rules
 * (epilogue_common.h); a session keeps it, computed only when a run
 * fetches the gradient.
 *
 * Not bit for bit: apply_sgd rounds the product, then var - lr * g; the
 * GEMM adds -lr times its unrounded sums into var (and where the library
 * splits R into blocks, adds each block's part in turn). The two differ
 * within the rounding of the update's terms (docs/design.md states the
 * bound the tests check).
 *
 * a and dz must be readable at the root (no variable state written in
 * between) and must not be the variable itself or a view of it: the GEMM
 * would read the variable while it writes it. The pass runs before
 * grad_epilogue, which would pair the matmul with the bias gradient's
 * sum_to; on the CPU that pair costs what the two nodes cost, so the
 * sum_to simply stays a node of its own here. */
#include <stdlib.h>

#include "executor/passes/epilogue_common.h"
#include "graph/op_table.h"

/* 1 when o is node v's output or a view of it (reshape, after...): the
 * same bytes. */
static int views_of(const fg_graph *g, fg_output o, int v) {
  for (int depth = 0; depth < 64; depth++) {
    if (o.node == v) return 1;
    const fg_node *n = &g->nodes[o.node];
    if (!(fg_op_table[n->op].flags & FG_OPF_VIEW) || n->n_inputs < 1) return 0;
    o = n->inputs[0];
  }
  return 1; /* too deep to tell: treat as the variable */
}

/* The weight-gradient matmul feeding apply_sgd `root` as its gradient,
 * absorbable into it; -1 when there is none. */
static int weight_grad(const fg_pass_ctx *ctx, const fg_epi_state *s, int root) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *r = &g->nodes[root];
  if (ctx->dead[root] || s->absorbed[root] || r->n_inputs < 3 || r->n_outputs != 1 ||
      !fg_epi_is_float(r->outputs[0].dtype) || r->inputs[1].index != 0)
    return -1;
  const int mm = r->inputs[1].node;
  const fg_node *m = &g->nodes[mm];
  if (m->op != FG_OP_MATMUL || m->n_inputs != 2 || fg_attr_int_or(m, "transpose_a", 0) == 0 ||
      fg_attr_int_or(m, "transpose_b", 0) != 0 || !fg_epi_absorbable(ctx, s, mm, root) ||
      !fg_pass_tinfo_equal(&m->outputs[0], &r->outputs[0]) || m->outputs[0].rank != 2)
    return -1;
  const fg_output a = m->inputs[0], dz = m->inputs[1], var = r->inputs[0];
  const fg_tinfo *ta = &g->nodes[a.node].outputs[a.index];
  const fg_tinfo *tz = &g->nodes[dz.node].outputs[dz.index];
  if (ta->rank != 2 || tz->rank != 2 || views_of(g, a, var.node) || views_of(g, dz, var.node) ||
      !fg_epi_readable_at_root(g, a, mm, root) || !fg_epi_readable_at_root(g, dz, mm, root))
    return -1;
  return mm;
}

static int try_update(fg_pass_ctx *ctx, fg_epi_state *s, int root, fg_status *st) {
  const int mm = weight_grad(ctx, s, root);
  if (mm < 0) return 0;
  fg_graph *g = &ctx->w->g;
  const fg_node *r = &g->nodes[root], *m = &g->nodes[mm];
  /* var, a, lr, dz, then the control inputs as they were. */
  const int n = r->n_inputs + 1;
  fg_output *in = malloc((size_t)n * sizeof *in);
  if (!in) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "update_epilogue: out of memory");
    return -1;
  }
  in[0] = r->inputs[0], in[1] = m->inputs[0], in[2] = r->inputs[2], in[3] = m->inputs[1];
  for (int i = 3; i < r->n_inputs; i++)
    in[i + 1] = r->inputs[i];
  const int rc = fg_pass_graph_set_op(ctx->w, root, FG_OP_MATMUL_APPLY_SGD, in, n);
  free(in);
  if (rc != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "update_epilogue: out of memory");
    return -1;
  }
  const int parts[1] = {mm};
  return fg_epi_absorb(ctx, s, parts, 1, root, "matmul+apply_sgd", st);
}

int fg_pass_update_epilogue(fg_pass_ctx *ctx, fg_status *st) {
  static const int ops[1] = {FG_OP_APPLY_SGD};
  return fg_epi_run_ops(ctx, "update_epilogue", ops, 1, try_update, st);
}
