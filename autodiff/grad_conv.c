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
  return fg_grad_copy_attrs(ctx, names, 5);
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

/* A gradient rule: dx[i] = op[i](arg[i][0], arg[i][1] [, arg[i][2]]) for
 * the wanted inputs i of 0 and 1, each argument the node's input 0 (IN0),
 * input 1 (IN1), its output's gradient (DY) or absent (NONE); with `bias`,
 * an input 2 gets db. */
enum { IN0, IN1, DY, NONE };
typedef struct conv_rule {
  const char *op[2];
  int arg[2][3];
  int bias;
} conv_rule;

static int apply_rule(fg_grad_ctx *ctx, const conv_rule *r) {
  fg_attrs *a = geometry(ctx);
  if (!a) return -1;
  fg_graph *g = ctx->g;
  const fg_output v[4] = {fg_grad_input(ctx, 0), fg_grad_input(ctx, 1), ctx->dy[0], FG_NO_OUTPUT};
  for (int i = 0; i < 2; i++)
    if (ctx->wants[i])
      ctx->dx[i] = op3(g, r->op[i], v[r->arg[i][0]], v[r->arg[i][1]], v[r->arg[i][2]], a);
  if (r->bias && g->nodes[ctx->node].n_inputs > 2 && ctx->wants[2])
    ctx->dx[2] = bias_grad(g, ctx->dy[0]);
  return finish(ctx, a);
}

/* y = conv2d(x, w [, b]): dx = conv2d_grad_input(dy, w, like x),
 * dw = conv2d_grad_weight(x, dy, like w). */
static int grad_conv2d(fg_grad_ctx *ctx) {
  static const conv_rule r = {
      {"conv2d_grad_input", "conv2d_grad_weight"}, {{DY, IN1, IN0}, {IN0, DY, IN1}}, 1};
  return apply_rule(ctx, &r);
}

/* y = conv_transpose2d(x, w [, b]): dx = conv2d(dy, w),
 * dw = conv2d_grad_weight(dy, x, like w). */
static int grad_conv_transpose2d(fg_grad_ctx *ctx) {
  static const conv_rule r = {
      {"conv2d", "conv2d_grad_weight"}, {{DY, IN1, NONE}, {DY, IN0, IN1}}, 1};
  return apply_rule(ctx, &r);
}

/* dx = conv2d_grad_input(dy, w): linear in dy (adjoint conv2d) and in w:
 * d(dy) = conv2d(gx, w), dw = conv2d_grad_weight(gx, dy, like w). */
static int grad_conv2d_grad_input(fg_grad_ctx *ctx) {
  static const conv_rule r = {
      {"conv2d", "conv2d_grad_weight"}, {{DY, IN1, NONE}, {DY, IN0, IN1}}, 0};
  return apply_rule(ctx, &r);
}

/* dw = conv2d_grad_weight(x, dy): linear in x and in dy:
 * dx = conv2d_grad_input(dy, gw, like x), d(dy) = conv2d(x, gw). */
static int grad_conv2d_grad_weight(fg_grad_ctx *ctx) {
  static const conv_rule r = {
      {"conv2d_grad_input", "conv2d"}, {{IN1, DY, IN0}, {IN0, DY, NONE}}, 0};
  return apply_rule(ctx, &r);
}

const fg_grad_reg fg_grads_conv[] = {
    {FG_OP_CONV2D, grad_conv2d},
    {FG_OP_CONV2D_GRAD_INPUT, grad_conv2d_grad_input},
    {FG_OP_CONV2D_GRAD_WEIGHT, grad_conv2d_grad_weight},
    {FG_OP_CONV_TRANSPOSE2D, grad_conv_transpose2d},
    {-1, NULL},
};
