/* Gradients of the pooling ops. Each forward pool's gradient is its own op
 * (graph/op_table.h) taking (dy, x): x gives the shape and, for the max
 * pools, the values whose argmax is recomputed. The window attributes are
 * copied from the forward node into a fresh attribute set before any node
 * is appended (appending may move the node array).
 *
 * Second order: avg_pool2d_grad and adaptive_avg_pool2d_grad are linear in
 * dy, with the forward pool as their adjoint; their x only gives a shape
 * (no gradient). The max gradients' derivative in dy would need the argmax
 * as a gather and is refused with a clear error rather than silently
 * dropped; in x it is zero almost everywhere. */
#include "autodiff/grad.h"

static const fg_node *fwd(const fg_grad_ctx *ctx) { return &ctx->g->nodes[ctx->node]; }

static int done(const fg_grad_ctx *ctx) { return fg_graph_failed(ctx->g) ? -1 : 0; }

/* A copy of the forward node's window attributes (those present). */
static fg_attrs *window_copy(const fg_grad_ctx *ctx) {
  static const char *const names[] = {"kernel",    "strides",   "pads",
                                      "dilations", "ceil_mode", "count_include_pad"};
  return fg_grad_copy_attrs(ctx, names, 6);
}

/* dx = op(dy, x), with the forward's window when `window`. */
static int grad_op(fg_grad_ctx *ctx, const char *op, int window) {
  if (!ctx->wants[0]) return 0;
  fg_attrs *a = NULL;
  if (window && !(a = window_copy(ctx))) return -1;
  const fg_output in[2] = {ctx->dy[0], fg_grad_input(ctx, 0)};
  ctx->dx[0] = fg_op(ctx->g, op, NULL, in, 2, a);
  fg_attrs_free(a);
  return done(ctx);
}

static int grad_max_pool2d(fg_grad_ctx *ctx) { return grad_op(ctx, "max_pool2d_grad", 1); }
static int grad_avg_pool2d(fg_grad_ctx *ctx) { return grad_op(ctx, "avg_pool2d_grad", 1); }
/* The global mean is the adaptive mean to 1x1. */
static int grad_adaptive(fg_grad_ctx *ctx) { return grad_op(ctx, "adaptive_avg_pool2d_grad", 0); }
static int grad_global_max(fg_grad_ctx *ctx) { return grad_op(ctx, "global_max_pool_grad", 0); }

/* avg_pool2d_grad's adjoint in dy: avg_pool2d with the same window. */
static int grad_avg_pool2d_grad(fg_grad_ctx *ctx) {
  if (!ctx->wants[0]) return 0;
  fg_attrs *a = window_copy(ctx);
  if (!a) return -1;
  ctx->dx[0] = fg_op(ctx->g, "avg_pool2d", NULL, &ctx->dy[0], 1, a);
  fg_attrs_free(a);
  return done(ctx);
}

/* adaptive_avg_pool2d_grad's adjoint in dy: the adaptive mean to dy's
 * spatial size, which must be known when the gradient is built. */
static int grad_adaptive_grad(fg_grad_ctx *ctx) {
  if (!ctx->wants[0]) return 0;
  const fg_node *n = fwd(ctx);
  const fg_tinfo *t = fg_graph_tinfo(ctx->g, fg_grad_input(ctx, 0));
  if (!t || t->rank != 4 || t->dims[2] < 1 || t->dims[3] < 1) {
    fg_graph_fail(ctx->g, FG_UNIMPLEMENTED,
                  "node '%s' (%s): its gradient needs input 0 (dy)'s height and width known",
                  n->name, fg_op_table[n->op].name);
    return -1;
  }
  ctx->dx[0] = fg_adaptive_avg_pool2d(ctx->g, ctx->dy[0], t->dims[2], t->dims[3]);
  return done(ctx);
}

static int grad_max_grad(fg_grad_ctx *ctx) {
  if (!ctx->wants[0]) return 0;
  const fg_node *n = fwd(ctx);
  fg_graph_fail(ctx->g, FG_UNIMPLEMENTED,
                "node '%s' (%s): the second derivative of max pooling is not implemented", n->name,
                fg_op_table[n->op].name);
  return -1;
}

const fg_grad_reg fg_grads_pool[] = {
    {FG_OP_MAX_POOL2D, grad_max_pool2d},
    {FG_OP_AVG_POOL2D, grad_avg_pool2d},
    {FG_OP_GLOBAL_AVG_POOL, grad_adaptive},
    {FG_OP_GLOBAL_MAX_POOL, grad_global_max},
    {FG_OP_ADAPTIVE_AVG_POOL2D, grad_adaptive},
    {FG_OP_MAX_POOL2D_GRAD, grad_max_grad},
    {FG_OP_AVG_POOL2D_GRAD, grad_avg_pool2d_grad},
    {FG_OP_ADAPTIVE_AVG_POOL2D_GRAD, grad_adaptive_grad},
    {FG_OP_GLOBAL_MAX_POOL_GRAD, grad_max_grad},
    {-1, NULL},
};
