/* Gradients of the resize ops. Each forward op's gradient is its own op
 * (graph/op_table.h) taking (dy, x), x for its shape only; the attributes
 * are copied from the forward node before any node is appended (appending
 * may move the node array).
 *
 * Second order: the gradients are linear in dy, with the forward op as
 * their adjoint; their x gives only a shape (no gradient). */
#include "autodiff/grad.h"

static const char *const attr_names[] = {"sizes", "scales", "coordinate_transformation_mode",
                                         "nearest_mode"};

/* dx = op(in...) with the node's attributes. */
static int with_attrs(fg_grad_ctx *ctx, const char *op, const fg_output *in, int n_in) {
  if (!ctx->wants[0]) return 0;
  fg_attrs *a = fg_grad_copy_attrs(ctx, attr_names, 4);
  if (!a) return -1;
  ctx->dx[0] = fg_op(ctx->g, op, NULL, in, n_in, a);
  fg_attrs_free(a);
  return fg_graph_failed(ctx->g) ? -1 : 0;
}

static int grad_nearest(fg_grad_ctx *ctx) {
  const fg_output in[2] = {ctx->dy[0], fg_grad_input(ctx, 0)};
  return with_attrs(ctx, "resize_nearest_grad", in, 2);
}

static int grad_linear(fg_grad_ctx *ctx) {
  const fg_output in[2] = {ctx->dy[0], fg_grad_input(ctx, 0)};
  return with_attrs(ctx, "resize_linear_grad", in, 2);
}

static int grad_nearest_grad(fg_grad_ctx *ctx) {
  return with_attrs(ctx, "resize_nearest", &ctx->dy[0], 1);
}

static int grad_linear_grad(fg_grad_ctx *ctx) {
  return with_attrs(ctx, "resize_linear", &ctx->dy[0], 1);
}

const fg_grad_reg fg_grads_resize[] = {
    {FG_OP_RESIZE_NEAREST, grad_nearest},
    {FG_OP_RESIZE_LINEAR, grad_linear},
    {FG_OP_RESIZE_NEAREST_GRAD, grad_nearest_grad},
    {FG_OP_RESIZE_LINEAR_GRAD, grad_linear_grad},
    {-1, NULL},
};
