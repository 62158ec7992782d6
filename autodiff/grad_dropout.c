/* Gradients of dropout and dropout_grad. Both are y = x * mask * scale with
 * one mask, so the gradient of either is dropout_grad(dy, training) with
 * the same attributes: the kernel recomputes the mask from (seed, stream,
 * step, replica) rather than reading one kept from the forward pass (see
 * kernels/cpu/dropout.c for why). The backward runs in the same session run
 * as its forward, so the step is the same.
 *
 * The stream: a forward node left at -1 hashes its own name, which the
 * gradient's node does not share, and which rewrites change (data-parallel
 * and micro-batch copies are renamed). So the forward's stream is fixed
 * here, on both nodes, before any rewrite copies them. */
#include "autodiff/grad.h"
#include "graph/init.h"

static int grad_dropout(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  fg_node *n = &g->nodes[ctx->node];
  if (fg_attr_int_or(n, "stream", -1) == -1 &&
      fg_attrs_set_int(&n->attrs, "stream", fg_name_stream(n->name)) != 0) {
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "node '%s' (%s): out of memory", n->name,
                  fg_op_table[n->op].name);
    return -1;
  }
  if (!ctx->wants[0]) return 0;
  /* The key and p, not the forward's annotations (its placement). */
  static const char *const keys[] = {"p", "seed", "stream", "replica"};
  fg_attrs *a = fg_grad_copy_attrs(ctx, keys, 4);
  if (!a) return -1;
  fg_output in[2] = {ctx->dy[0], fg_grad_input(ctx, 1)};
  ctx->dx[0] = fg_op(g, "dropout_grad", NULL, in, 2, a);
  fg_attrs_free(a);
  return fg_graph_failed(g) ? -1 : 0;
}

const fg_grad_reg fg_grads_dropout[] = {
    {FG_OP_DROPOUT, grad_dropout},
    {FG_OP_DROPOUT_GRAD, grad_dropout},
    {-1, NULL},
};
