/* Gradients of the normalization ops: each forward node gets one fused
 * *_grad node (kernels/cpu/norm.c) with outputs dx, dscale, dshift, fed by
 * the mean and inv_std the forward saved. batch_norm's running statistics
 * and training flag get no gradient: they are buffers, not parameters, as
 * in PyTorch. In inference mode the kernel treats the running statistics
 * as constants (dx = dy scale inv_std).
 *
 * Unlike the math ops, these gradients are not composed of differentiable
 * ops, so a second derivative through them refuses (FG_UNIMPLEMENTED)
 * instead of coming out as a silent zero; so does a gradient arriving at
 * the statistics outputs (mean, inv_std, var), which no formula here
 * covers. */
#include <stdio.h>

#include "autodiff/grad.h"
#include "graph/builders_internal.h"

static int refuse(fg_grad_ctx *ctx, const char *what) {
  const fg_node *n = fg_graph_node(ctx->g, ctx->node);
  fg_graph_fail(ctx->g, FG_UNIMPLEMENTED, "node '%s' (%s): %s", n ? n->name : "?",
                n ? fg_op_table[n->op].name : "?", what);
  return -1;
}

/* Fails when a gradient reaches outputs 1.. (the statistics). */
static int stats_unused(fg_grad_ctx *ctx, int n_out) {
  for (int o = 1; o < n_out; o++)
    if (ctx->dy[o].node >= 0)
      return refuse(ctx, "a gradient through the saved statistics (outputs 1 and up) is not "
                         "implemented; use output 0");
  return 0;
}

/* Makes the *_grad node from `in` and hands out dx, dscale, dshift to the
 * forward inputs 0, 1, 2. */
static int finish(fg_grad_ctx *ctx, const char *op, const fg_output *in, int n_in, fg_attrs *a) {
  if (!ctx->wants[0] && !ctx->wants[1] && !ctx->wants[2]) {
    fg_attrs_free(a);
    return 0;
  }
  fg_output r = fg_op(ctx->g, op, NULL, in, n_in, a);
  fg_attrs_free(a);
  if (fg_graph_failed(ctx->g)) return -1;
  for (int i = 0; i < 3; i++)
    if (ctx->wants[i]) ctx->dx[i] = fg_output_at(r, i);
  return 0;
}

static int grad_batch_norm(fg_grad_ctx *ctx) {
  if (stats_unused(ctx, 4) != 0) return -1;
  if (ctx->dy[0].node < 0) return 0;
  fg_output in[6] = {ctx->dy[0],
                     fg_grad_input(ctx, 0),
                     fg_grad_input(ctx, 1),
                     fg_grad_output(ctx, 1),
                     fg_grad_output(ctx, 2),
                     fg_grad_input(ctx, 5)};
  const int sync = fg_graph_node(ctx->g, ctx->node)->op == FG_OP_SYNC_BATCH_NORM;
  return finish(ctx, sync ? "sync_batch_norm_grad" : "batch_norm_grad", in, 6, NULL);
}

/* layer_norm_grad takes normalized_rank, group_norm_grad num_groups (C
 * for instance_norm, which must then be known). */
static int grad_row_norm(fg_grad_ctx *ctx) {
  if (stats_unused(ctx, 3) != 0) return -1;
  if (ctx->dy[0].node < 0) return 0;
  const fg_node *n = fg_graph_node(ctx->g, ctx->node);
  fg_attrs *a = fg_attrs_new();
  if (!a) {
    fg_graph_fail(ctx->g, FG_RESOURCE_EXHAUSTED, "gradient of '%s': out of memory", n->name);
    return -1;
  }
  const char *op = "group_norm_grad";
  if (n->op == FG_OP_LAYER_NORM) {
    const fg_attr *k = fg_attrs_find(&n->attrs, "normalized_rank");
    fg_attrs_set_int(a, "normalized_rank", k ? k->i : 1);
    op = "layer_norm_grad";
  } else if (n->op == FG_OP_GROUP_NORM) {
    const fg_attr *gr = fg_attrs_find(&n->attrs, "num_groups");
    fg_attrs_set_int(a, "num_groups", gr ? gr->i : 0);
  } else {
    int64_t dims[FG_MAX_RANK];
    const int r = fg_output_shape(ctx->g, fg_grad_input(ctx, 0), dims);
    if (r < 2 || dims[1] < 1) {
      fg_attrs_free(a);
      return refuse(ctx, "the gradient needs x's channel count (axis 1) known when it is built");
    }
    fg_attrs_set_int(a, "num_groups", dims[1]);
  }
  fg_output in[5] = {ctx->dy[0], fg_grad_input(ctx, 0), fg_grad_input(ctx, 1),
                     fg_grad_output(ctx, 1), fg_grad_output(ctx, 2)};
  return finish(ctx, op, in, 5, a);
}

static int grad_of_grad(fg_grad_ctx *ctx) {
  return refuse(ctx, "second derivatives of the normalization ops are not implemented");
}

const fg_grad_reg fg_grads_norm[] = {
    {FG_OP_BATCH_NORM, grad_batch_norm},        {FG_OP_LAYER_NORM, grad_row_norm},
    {FG_OP_GROUP_NORM, grad_row_norm},          {FG_OP_INSTANCE_NORM, grad_row_norm},
    {FG_OP_BATCH_NORM_GRAD, grad_of_grad},      {FG_OP_LAYER_NORM_GRAD, grad_of_grad},
    {FG_OP_GROUP_NORM_GRAD, grad_of_grad},      {FG_OP_SYNC_BATCH_NORM, grad_batch_norm},
    {FG_OP_SYNC_BATCH_NORM_GRAD, grad_of_grad}, {-1, NULL},
};
