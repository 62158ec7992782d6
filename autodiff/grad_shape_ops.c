/* Gradients of pad, flatten, squeeze, expand, tile, split and stack, and of
 * the gradient ops pad_grad and tile_grad (for second order). The rules of
 * grad_shape.c hold here too: run-time sizes come from *_like ops, the
 * forward node's attributes are copied before the first builder call, and
 * only wanted inputs get a gradient. */
#include <stdlib.h>

#include "autodiff/grad.h"
#include "graph/builders_internal.h"

static const fg_node *fwd(const fg_grad_ctx *ctx) { return &ctx->g->nodes[ctx->node]; }

static int done(const fg_grad_ctx *ctx) { return fg_graph_failed(ctx->g) ? -1 : 0; }

/* A corrupted forward node (inference checked these attributes). */
static int corrupt(const fg_grad_ctx *ctx, const char *what) {
  const fg_node *n = fwd(ctx);
  fg_graph_fail(ctx->g, FG_INTERNAL, "node '%s' (%s): attribute %s is missing or malformed",
                n->name, fg_op_table[n->op].name, what);
  return -1;
}

/* The op `op` on dy (and `like`, when like.node >= 0) with the forward
 * node's ints attribute `list` and, for pad, its mode (value 0: the
 * gradient of pad's fill is nothing). */
static fg_output with_fwd_attrs(fg_grad_ctx *ctx, const char *op, const char *list, fg_output dy,
                                fg_output like) {
  const fg_node *n = fwd(ctx);
  const fg_attr *l = fg_attrs_find(&n->attrs, list);
  const fg_attr *mode = fg_attrs_find(&n->attrs, "mode");
  if (!l || l->type != FG_ATTR_INTS || (mode && mode->type != FG_ATTR_STRING)) {
    corrupt(ctx, list);
    return FG_NO_OUTPUT;
  }
  fg_attrs *a = fg_attrs_new();
  int bad = !a || fg_attrs_set_ints(a, list, l->ints, l->n) != 0 ||
            (mode && fg_attrs_set_string(a, "mode", mode->s) != 0);
  fg_output o = FG_NO_OUTPUT;
  if (bad) {
    fg_graph_fail(ctx->g, FG_RESOURCE_EXHAUSTED, "%s: out of memory building attributes", op);
  } else {
    fg_output in[2] = {dy, like};
    o = fg_op(ctx->g, op, NULL, in, like.node >= 0 ? 2 : 1, a);
  }
  fg_attrs_free(a);
  return o;
}

/* dx = op(dy [, like x]) with the forward's `attr`: pad's gradient adds
 * dy's elements back onto x (pad_grad), pad_grad's is its adjoint, pad
 * with the fill 0; tile and tile_grad alike. No gradient for `like`. */
static int grad_mapped(fg_grad_ctx *ctx, const char *op, const char *attr, int like) {
  if (ctx->wants[0])
    ctx->dx[0] =
        with_fwd_attrs(ctx, op, attr, ctx->dy[0], like ? fg_grad_input(ctx, 0) : FG_NO_OUTPUT);
  return done(ctx);
}

static int grad_pad(fg_grad_ctx *ctx) { return grad_mapped(ctx, "pad_grad", "pads", 1); }
static int grad_pad_grad(fg_grad_ctx *ctx) { return grad_mapped(ctx, "pad", "pads", 0); }
static int grad_tile(fg_grad_ctx *ctx) { return grad_mapped(ctx, "tile_grad", "repeats", 1); }
static int grad_tile_grad(fg_grad_ctx *ctx) { return grad_mapped(ctx, "tile", "repeats", 0); }

/* flatten, squeeze: dy in x's runtime shape. */
static int grad_reshape(fg_grad_ctx *ctx) {
  if (ctx->wants[0]) ctx->dx[0] = fg_reshape_like(ctx->g, ctx->dy[0], fg_grad_input(ctx, 0));
  return done(ctx);
}

/* expand copies x along the broadcast dims: the sum comes back. */
static int grad_expand(fg_grad_ctx *ctx) {
  if (ctx->wants[0]) ctx->dx[0] = fg_grad_sum_to(ctx->g, ctx->dy[0], fg_grad_input(ctx, 0));
  return done(ctx);
}

/* The forward node's axis, normalised for `rank` (inference checked it). */
static int axis_of(fg_grad_ctx *ctx, int rank, int *axis) {
  const fg_attr *a = fg_attrs_find(&fwd(ctx)->attrs, "axis");
  int64_t v = a && a->type == FG_ATTR_INT ? a->i : 0;
  if (a && a->type != FG_ATTR_INT) return corrupt(ctx, "axis");
  if (v < -(int64_t)rank || v >= rank) return corrupt(ctx, "axis");
  *axis = (int)(v < 0 ? v + rank : v);
  return 0;
}

/* The outputs' gradients joined along the axis; an output no gradient
 * reaches contributes zeros of its shape. */
static int grad_split(fg_grad_ctx *ctx) {
  if (!ctx->wants[0]) return 0;
  fg_graph *g = ctx->g;
  const fg_tinfo *t = fg_graph_tinfo(g, fg_grad_input(ctx, 0));
  int axis, n = fwd(ctx)->n_outputs, node = ctx->node;
  if (!t || axis_of(ctx, t->rank, &axis)) return -1;
  fg_output *parts = malloc((size_t)n * sizeof *parts);
  if (!parts) {
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "split gradient: out of memory");
    return -1;
  }
  for (int k = 0; k < n; k++)
    parts[k] = ctx->dy[k].node >= 0 ? ctx->dy[k] : fg_zeros_like(g, (fg_output){node, k});
  ctx->dx[0] = fg_concat(g, parts, n, axis);
  free(parts);
  return done(ctx);
}

/* Input k is dy's index k along the axis, in input k's runtime shape. */
static int grad_stack(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  const fg_tinfo *t = fg_graph_tinfo(g, (fg_output){ctx->node, 0});
  int axis;
  if (!t || axis_of(ctx, t->rank, &axis)) return -1;
  const int rank = t->rank, n = fwd(ctx)->n_inputs;
  int64_t begin[FG_MAX_RANK], size[FG_MAX_RANK];
  for (int d = 0; d < rank; d++)
    begin[d] = 0, size[d] = d == axis ? 1 : -1;
  for (int k = 0; k < n; k++) {
    if (!ctx->wants[k]) continue;
    begin[axis] = k;
    fg_output x = fg_grad_input(ctx, k);
    ctx->dx[k] = fg_reshape_like(g, fg_slice(g, ctx->dy[0], rank, begin, size), x);
  }
  return done(ctx);
}

const fg_grad_reg fg_grads_shape_ops[] = {
    {FG_OP_PAD, grad_pad},
    {FG_OP_PAD_GRAD, grad_pad_grad},
    {FG_OP_FLATTEN, grad_reshape},
    {FG_OP_SQUEEZE, grad_reshape},
    {FG_OP_EXPAND, grad_expand},
    {FG_OP_TILE, grad_tile},
    {FG_OP_TILE_GRAD, grad_tile_grad},
    {FG_OP_SPLIT, grad_split},
    {FG_OP_STACK, grad_stack},
    {-1, NULL},
};
