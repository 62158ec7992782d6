/* Gradients of the convolution ops (graph/infer_conv.c). With the forward
 * convolution y = x * w (+ b):
 *   dx = conv2d_grad_input(dy, w, like x), dw = conv2d_grad_weight(x, dy,
 *   like w), db = dy summed over N, H and W.
 * conv_transpose2d is conv2d's backward data, so its gradients are conv2d
 * ops with the same strides, pads, dilations and groups: dx = conv2d(dy, w),
 * dw = conv2d_grad_weight(dy, x, like w). The two gradient ops are linear
 * in each input, so their own gradients are convolutions too (second
 * derivatives, Hessian-vector products). */
#include "autodiff/grad.h"
#include "graph/graph_internal.h"

/* The forward node's geometry attributes (not output_padding, which only
 * conv_transpose2d declares), copied before any builder call moves the
 * node array. NULL when out of memory (the graph then fails). */
static fg_attrs *geometry(const fg_grad_ctx *ctx) {
  static const char *const names[] = {"strides", "pads", "dilations", "groups", "auto_pad"};
  const fg_node *n = &ctx->g->nodes[ctx->node];
  fg_attrs *a = fg_attrs_new();
  int bad = !a;
  for (int i = 0; !bad && i < 5; i++) {
    const fg_attr *v = fg_attrs_find(&n->attrs, names[i]);
    if (!v) continue;
    if (v->type == FG_ATTR_INTS)
      bad = fg_attrs_set_ints(a, names[i], v->ints, v->n) != 0;
    else if (v->type == FG_ATTR_INT)
      bad = fg_attrs_set_int(a, names[i], v->i) != 0;
    else if (v->type == FG_ATTR_STRING)
      bad = fg_attrs_set_string(a, names[i], v->s) != 0;
  }
  if (bad) {
    fg_attrs_free(a);
    fg_graph_fail(ctx->g, FG_RESOURCE_EXHAUSTED, "gradient of node '%s': out of memory",
                  ctx->g->nodes[ctx->node].name);
    return NULL;
  }
  return a;
}

static fg_output op3(fg_graph *g, const char *op, fg_output a, fg_output b, fg_output c,
                     const fg_attrs *attrs) {
  fg_output in[3] = {a, b, c};
  return fg_op(g, op, NULL, in, c.node < 0 ? 2 : 3, attrs);
}

static int finish(const fg_grad_ctx *ctx, fg_attrs *a) {
  fg_attrs_free(a);
  return fg_graph_failed(ctx->g) ? -1 : 0;
}

/* db: dy summed over N, H, W. */
static fg_output bias_grad(fg_graph *g, fg_output dy) {
  static const int64_t axes[3] = {0, 2, 3};
  return fg_reduce_sum(g, dy, axes, 3, 0);
}

static int grad_conv2d(fg_grad_ctx *ctx) {
  fg_attrs *a = geometry(ctx);
  if (!a) return -1;
  fg_graph *g = ctx->g;
  fg_output x = fg_grad_input(ctx, 0), w = fg_grad_input(ctx, 1), dy = ctx->dy[0];
  if (ctx->wants[0]) ctx->dx[0] = op3(g, "conv2d_grad_input", dy, w, x, a);
  if (ctx->wants[1]) ctx->dx[1] = op3(g, "conv2d_grad_weight", x, dy, w, a);
  if (g->nodes[ctx->node].n_inputs > 2 && ctx->wants[2]) ctx->dx[2] = bias_grad(g, dy);
  return finish(ctx, a);
}

static int grad_conv_transpose2d(fg_grad_ctx *ctx) {
  fg_attrs *a = geometry(ctx);
  if (!a) return -1;
  fg_graph *g = ctx->g;
  fg_output x = fg_grad_input(ctx, 0), w = fg_grad_input(ctx, 1), dy = ctx->dy[0];
  if (ctx->wants[0]) ctx->dx[0] = op3(g, "conv2d", dy, w, FG_NO_OUTPUT, a);
  if (ctx->wants[1]) ctx->dx[1] = op3(g, "conv2d_grad_weight", dy, x, w, a);
  if (g->nodes[ctx->node].n_inputs > 2 && ctx->wants[2]) ctx->dx[2] = bias_grad(g, dy);
  return finish(ctx, a);
}

/* dx = conv2d_grad_input(dy, w): linear in dy (adjoint conv2d) and in w. */
static int grad_conv2d_grad_input(fg_grad_ctx *ctx) {
  fg_attrs *a = geometry(ctx);
  if (!a) return -1;
  fg_graph *g = ctx->g;
  fg_output dy = fg_grad_input(ctx, 0), w = fg_grad_input(ctx, 1), gx = ctx->dy[0];
  if (ctx->wants[0]) ctx->dx[0] = op3(g, "conv2d", gx, w, FG_NO_OUTPUT, a);
  if (ctx->wants[1]) ctx->dx[1] = op3(g, "conv2d_grad_weight", gx, dy, w, a);
  return finish(ctx, a);
}

/* dw = conv2d_grad_weight(x, dy): linear in x and in dy. */
static int grad_conv2d_grad_weight(fg_grad_ctx *ctx) {
  fg_attrs *a = geometry(ctx);
  if (!a) return -1;
  fg_graph *g = ctx->g;
  fg_output x = fg_grad_input(ctx, 0), dy = fg_grad_input(ctx, 1), gw = ctx->dy[0];
  if (ctx->wants[0]) ctx->dx[0] = op3(g, "conv2d_grad_input", dy, gw, x, a);
  if (ctx->wants[1]) ctx->dx[1] = op3(g, "conv2d", x, gw, FG_NO_OUTPUT, a);
  return finish(ctx, a);
}

const fg_grad_reg fg_grads_conv[] = {
    {FG_OP_CONV2D, grad_conv2d},
    {FG_OP_CONV2D_GRAD_INPUT, grad_conv2d_grad_input},
    {FG_OP_CONV2D_GRAD_WEIGHT, grad_conv2d_grad_weight},
    {FG_OP_CONV_TRANSPOSE2D, grad_conv_transpose2d},
    {-1, NULL},
};
