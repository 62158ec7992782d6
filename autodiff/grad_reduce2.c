/* Gradients of reduce_min, reduce_prod, logsumexp, cumsum and topk (and a
 * refusal for topk_grad's own). argmin is not differentiable.
 *
 * As in grad_math.c, each is composed from differentiable ops, so that a
 * second derivative can be taken, and follows PyTorch where the math leaves
 * a choice:
 * - reduce_min shares dy equally among tied minima, as reduce_max does;
 * - reduce_prod is torch.prod's: prod / x without zeros; with exactly one
 *   zero in a group the zero's gradient is the product of the others and
 *   the rest get 0; with two or more zeros everything gets 0;
 * - logsumexp: dy * exp(x - y), the softmax;
 * - cumsum: the cumsum of dy with the direction flipped;
 * - topk: dy scattered to the chosen indices (topk_grad); the indices get
 *   no gradient. */
#include <stdio.h>

#include "autodiff/grad.h"
#include "graph/builders_internal.h"

static int done(const fg_grad_ctx *ctx) { return fg_graph_failed(ctx->g) ? -1 : 0; }

static fg_dtype dtype_of(fg_graph *g, fg_output o) {
  const fg_tinfo *t = fg_graph_tinfo(g, o);
  return t ? t->dtype : FG_F32;
}

static int grad_reduce_min(fg_grad_ctx *ctx) { return fg_grad_reduce(ctx, fg_grad_extreme_rule); }

/* With m the zero mask and z = sum(m) per group (keepdims):
 *   z == 0: dx = dy * y / x;
 *   z == 1: dx = dy * m * prod(x + m), the product of the group's non-zeros
 *           at its zero and 0 elsewhere;
 *   z >= 2: dx = 0.
 * Selects, not masks multiplied in, so y / x is never formed where x is 0
 * (inf * 0 would be NaN). */
static fg_output reduce_prod_rule(fg_graph *g, const fg_grad_reduce_info *r, fg_output dy) {
  fg_dtype dt = dtype_of(g, dy);
  fg_output zero = fg_scalar(g, dt, 0), one = fg_scalar(g, dt, 1);
  fg_output is0 = fg_equal(g, r->x, zero);
  fg_output m = fg_cast(g, is0, dt);
  fg_output z = r->n_axes ? fg_reduce_sum(g, m, r->axes, r->n_axes, 1) : m;
  fg_output safe_x = fg_add(g, r->x, m); /* 1 at the zeros */
  fg_output y = fg_grad_reduce_keep(g, r, r->y);
  fg_output others = r->n_axes ? fg_reduce_prod(g, safe_x, r->axes, r->n_axes, 1) : safe_x;
  fg_output one_zero = fg_mul(g, m, fg_select(g, fg_equal(g, z, one), others, zero));
  fg_output scale = fg_select(g, fg_equal(g, z, zero), fg_div(g, y, safe_x), one_zero);
  return fg_mul(g, fg_grad_reduce_keep(g, r, dy), scale);
}

static int grad_reduce_prod(fg_grad_ctx *ctx) { return fg_grad_reduce(ctx, reduce_prod_rule); }

static fg_output logsumexp_rule(fg_graph *g, const fg_grad_reduce_info *r, fg_output dy) {
  fg_output p = fg_exp(g, fg_sub(g, r->x, fg_grad_reduce_keep(g, r, r->y)));
  return fg_mul(g, p, fg_grad_reduce_keep(g, r, dy));
}

static int grad_logsumexp(fg_grad_ctx *ctx) { return fg_grad_reduce(ctx, logsumexp_rule); }

/* y_i = sum of x_j over j <= i (j < i when exclusive), so dx_j is the sum
 * of dy_i over i >= j (i > j): the same exclusivity, the other direction. */
static int grad_cumsum(fg_grad_ctx *ctx) {
  if (!ctx->wants[0]) return 0;
  const fg_node *n = fg_graph_node(ctx->g, ctx->node);
  const int axis = (int)fg_attr_int_or(n, "axis", 0);
  const int exclusive = fg_attr_int_or(n, "exclusive", 0) != 0;
  const int reverse = fg_attr_int_or(n, "reverse", 0) != 0;
  ctx->dx[0] = fg_cumsum(ctx->g, ctx->dy[0], axis, exclusive, !reverse);
  return done(ctx);
}

/* dy of the values to x's shape at the indices; no gradient flows into the
 * indices output (dy[1] is ignored: its dtype is i64). */
static int grad_topk(fg_grad_ctx *ctx) {
  if (!ctx->wants[0] || ctx->dy[0].node < 0) return 0;
  const fg_node *n = fg_graph_node(ctx->g, ctx->node);
  const int axis = (int)fg_attr_int_or(n, "axis", -1);
  ctx->dx[0] =
      fg_topk_grad(ctx->g, ctx->dy[0], fg_grad_output(ctx, 1), fg_grad_input(ctx, 0), axis);
  return done(ctx);
}

/* topk_grad's derivative in dy is a gather along an axis at the indices,
 * an op flowgraph lacks: refused by name rather than silently zero. */
static int grad_topk_grad(fg_grad_ctx *ctx) {
  if (!ctx->wants[0]) return 0;
  const fg_node *n = fg_graph_node(ctx->g, ctx->node);
  fg_graph_fail(ctx->g, FG_UNIMPLEMENTED,
                "node '%s' (topk_grad): no gradient (a second derivative through topk needs a "
                "gather along an axis)",
                n ? n->name : "?");
  return -1;
}

/* Exactly the ops of this family flagged FG_OPF_DIFFERENTIABLE. */
const fg_grad_reg fg_grads_reduce2[] = {
    {FG_OP_REDUCE_MIN, grad_reduce_min},
    {FG_OP_REDUCE_PROD, grad_reduce_prod},
    {FG_OP_LOGSUMEXP, grad_logsumexp},
    {FG_OP_CUMSUM, grad_cumsum},
    {FG_OP_TOPK, grad_topk},
    {FG_OP_TOPK_GRAD, grad_topk_grad},
    {-1, NULL},
};
