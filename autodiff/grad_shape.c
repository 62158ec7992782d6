/* Gradients of the linear-algebra, shaping, indexing and softmax ops, and of
 * the support ops those gradients are built from (expand_dims, reshape_like,
 * broadcast_like, sum_to, slice_grad, gather_grad), so that a gradient graph
 * can itself be differentiated (Hessian-vector products).
 *
 * Rules every function here keeps:
 * - Sizes that may be unknown until run time (the batch dimension) never go
 *   into an attribute: shapes come from the *_like ops and numel.
 * - Attributes of the forward node are copied into locals before the first
 *   builder call, because appending nodes may move the node array.
 * - Only wanted inputs get a gradient; the others stay FG_NO_OUTPUT. */
#include <stdio.h>

#include "autodiff/grad.h"
#include "graph/builders_internal.h"

static const fg_node *fwd(const fg_grad_ctx *ctx) { return &ctx->g->nodes[ctx->node]; }

static int want(const fg_grad_ctx *ctx, int i) { return ctx->wants[i] != 0; }

static int done(const fg_grad_ctx *ctx) { return fg_graph_failed(ctx->g) ? -1 : 0; }

/* The gradients that are one builder call: dx[0] = build(dy, input k). */
static int grad_one_call(fg_grad_ctx *ctx, fg_output (*build)(fg_graph *, fg_output, fg_output),
                         int k) {
  if (want(ctx, 0)) ctx->dx[0] = build(ctx->g, ctx->dy[0], fg_grad_input(ctx, k));
  return done(ctx);
}

/* Rank of input i of the forward node (-1 if it has no tinfo). */
static int input_rank(const fg_grad_ctx *ctx, int i) {
  const fg_tinfo *t = fg_graph_tinfo(ctx->g, fg_grad_input(ctx, i));
  return t ? t->rank : -1;
}

/* The forward node's int attribute `axis`, made non-negative for `rank`.
 * Inference already range-checked it, so a bad value means a corrupted
 * node: reported rather than used as an index. */
static int norm_axis(const fg_grad_ctx *ctx, int rank, int *axis) {
  const fg_node *n = fwd(ctx);
  int64_t a = fg_attr_int_or(n, "axis", 0);
  if (a < -(int64_t)rank || a >= rank) {
    fg_graph_fail(ctx->g, FG_INTERNAL, "node '%s' (%s): axis %lld is out of range for rank %d",
                  n->name, fg_op_table[n->op].name, (long long)a, rank);
    return -1;
  }
  *axis = (int)(a < 0 ? a + rank : a);
  return 0;
}

/* Copies the forward node's ints attribute `name` (which inference checked
 * has `rank` entries) into out[FG_MAX_RANK]. */
static int copy_ints(const fg_grad_ctx *ctx, const char *name, int rank, int64_t *out) {
  const fg_node *n = fwd(ctx);
  const fg_attr *a = fg_attrs_find(&n->attrs, name);
  if (!a || a->type != FG_ATTR_INTS || a->n != rank || rank > FG_MAX_RANK) {
    fg_graph_fail(ctx->g, FG_INTERNAL, "node '%s' (%s): attribute %s is missing or not %d ints",
                  n->name, fg_op_table[n->op].name, name, rank);
    return -1;
  }
  for (int i = 0; i < rank; i++)
    out[i] = a->ints[i];
  return 0;
}

/* ---- linear algebra ------------------------------------------------------ */

/* C = op(A) op(B) with op = transpose of the last two dims when flagged:
 *   ta tb   dA                dB
 *   0  0    dC B^T            A^T dC
 *   0  1    dC B              dC^T A
 *   1  0    B dC^T            A dC
 *   1  1    B^T dC^T          dC^T A^T
 * Batch dims broadcast in the forward matmul, so each result is summed back
 * to its input's shape. */
static int grad_matmul(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  const fg_node *n = fwd(ctx);
  int ta = fg_attr_int_or(n, "transpose_a", 0) != 0;
  int tb = fg_attr_int_or(n, "transpose_b", 0) != 0;
  fg_output a = fg_grad_input(ctx, 0), b = fg_grad_input(ctx, 1), dc = ctx->dy[0];
  if (want(ctx, 0)) {
    fg_output d;
    if (!ta)
      d = fg_matmul(g, dc, b, 0, !tb);
    else
      d = fg_matmul(g, b, dc, tb, 1);
    ctx->dx[0] = fg_grad_sum_to(g, d, a);
  }
  if (want(ctx, 1)) {
    fg_output d;
    if (!tb)
      d = fg_matmul(g, a, dc, !ta, 0);
    else
      d = fg_matmul(g, dc, a, 1, ta);
    ctx->dx[1] = fg_grad_sum_to(g, d, b);
  }
  return done(ctx);
}

/* ---- shaping ------------------------------------------------------------- */

/* reshape, expand_dims, reshape_like (wrt x): only the shape changed, so the
 * gradient is dy in x's runtime shape. reshape_like's `like` gets none. */
static int grad_reshape_like_x(fg_grad_ctx *ctx) { return grad_one_call(ctx, fg_reshape_like, 0); }

static int grad_transpose(fg_grad_ctx *ctx) {
  if (!want(ctx, 0)) return 0;
  int rank = input_rank(ctx, 0);
  int64_t perm[FG_MAX_RANK], inv[FG_MAX_RANK];
  if (rank < 0 || copy_ints(ctx, "perm", rank, perm)) return -1;
  for (int i = 0; i < rank; i++)
    inv[perm[i]] = i; /* perm was checked to be a permutation of 0..rank-1 */
  ctx->dx[0] = fg_transpose(ctx->g, ctx->dy[0], rank, inv);
  return done(ctx);
}

/* Input i's gradient is the slice of dy that input i filled. The slice needs
 * its begin along the axis as a constant, so inputs before i must have known
 * sizes; input i's own size may be unknown only when it is the last input
 * (it then runs to the end). Other cases (an unknown size, usually the
 * batch, before input i) have no static slice and are refused with
 * FG_UNIMPLEMENTED naming the node; concatenating along a non-batch axis,
 * the common case, always works. */
static int grad_concat(fg_grad_ctx *ctx) {
  fg_graph *g = ctx->g;
  int rank = input_rank(ctx, 0), axis;
  if (rank < 0 || norm_axis(ctx, rank, &axis)) return -1;
  int n_in = fwd(ctx)->n_inputs;
  int64_t offset = 0;
  int offset_known = 1;
  for (int i = 0; i < n_in; i++) {
    /* Re-read every round: the builders below may move the node array. */
    const fg_tinfo *t = fg_graph_tinfo(g, fg_grad_input(ctx, i));
    if (!t) return -1;
    int64_t size = t->dims[axis];
    if (want(ctx, i)) {
      if (!offset_known || (size < 0 && i != n_in - 1)) {
        const fg_node *n = fwd(ctx);
        char s[FG_SHAPE_STR_MAX];
        fg_graph_fail(g, FG_UNIMPLEMENTED,
                      "node '%s' (%s): gradient of input %d (shape %s) needs the sizes of "
                      "inputs 0..%d along axis %d at build time, but %s unknown",
                      n->name, fg_op_table[n->op].name, i,
                      fg_shape_str(t->rank, t->dims, s, sizeof s), i, axis,
                      offset_known ? "its own size is" : "an earlier input's size is");
        return -1;
      }
      int64_t begin[FG_MAX_RANK] = {0}, sz[FG_MAX_RANK];
      for (int d = 0; d < rank; d++)
        sz[d] = -1;
      begin[axis] = offset;
      sz[axis] = size; /* -1 (to the end) for an unknown last input */
      ctx->dx[i] = fg_slice(g, ctx->dy[0], rank, begin, sz);
    }
    if (size < 0)
      offset_known = 0;
    else
      offset += size;
  }
  return done(ctx);
}

/* slice and slice_grad (is_grad) are each other's adjoint: the gradient of
 * one is the other with the same begin and size. The rank is that of
 * slice's x (input 0) or of slice_grad's like (input 1). */
static int grad_slice_or_slice_grad(fg_grad_ctx *ctx, int is_grad) {
  if (!want(ctx, 0)) return 0;
  int rank = input_rank(ctx, is_grad ? 1 : 0);
  int64_t begin[FG_MAX_RANK], size[FG_MAX_RANK];
  if (rank < 0 || copy_ints(ctx, "begin", rank, begin) || copy_ints(ctx, "size", rank, size))
    return -1;
  if (is_grad)
    ctx->dx[0] = fg_slice(ctx->g, ctx->dy[0], rank, begin, size);
  else
    ctx->dx[0] = fg_slice_grad(ctx->g, ctx->dy[0], fg_grad_input(ctx, 0), rank, begin, size);
  return done(ctx);
}

static int grad_slice(fg_grad_ctx *ctx) { return grad_slice_or_slice_grad(ctx, 0); }
static int grad_slice_grad(fg_grad_ctx *ctx) { return grad_slice_or_slice_grad(ctx, 1); }

/* params get dy's rows added back at their indices (repeats accumulate);
 * integer indices get nothing. */
static int grad_gather(fg_grad_ctx *ctx) {
  if (!want(ctx, 0)) return 0;
  ctx->dx[0] = fg_gather_grad(ctx->g, ctx->dy[0], fg_grad_input(ctx, 1), fg_grad_input(ctx, 0));
  return done(ctx);
}

/* ---- softmax family ------------------------------------------------------ */

/* With y the output along `axis`:
 *   softmax:     dx = y * (dy - sum(dy * y, axis))
 *   log_softmax: dx = dy - exp(y) * sum(dy, axis) */
static int grad_softmax_or_log(fg_grad_ctx *ctx, int is_log) {
  if (!want(ctx, 0)) return 0;
  fg_graph *g = ctx->g;
  int rank = input_rank(ctx, 0), axis;
  if (rank < 0 || norm_axis(ctx, rank, &axis)) return -1;
  int64_t ax = axis;
  fg_output y = fg_grad_output(ctx, 0), dy = ctx->dy[0];
  fg_output s = fg_reduce_sum(g, is_log ? dy : fg_mul(g, dy, y), &ax, 1, 1);
  if (is_log)
    ctx->dx[0] = fg_sub(g, dy, fg_mul(g, fg_exp(g, y), s));
  else
    ctx->dx[0] = fg_mul(g, y, fg_sub(g, dy, s));
  return done(ctx);
}

static int grad_softmax(fg_grad_ctx *ctx) { return grad_softmax_or_log(ctx, 0); }
static int grad_log_softmax(fg_grad_ctx *ctx) { return grad_softmax_or_log(ctx, 1); }

/* L = mean over N of -log_softmax(logits)[n, label_n], so
 * dlogits = (softmax(logits) - one_hot(labels, C)) * dy / N. N is read at
 * run time (numel of labels) so an unknown batch works; C becomes the
 * one_hot depth attribute and so must be known at build time. */
static int grad_softmax_cross_entropy(fg_grad_ctx *ctx) {
  if (!want(ctx, 0)) return 0;
  fg_graph *g = ctx->g;
  fg_output logits = fg_grad_input(ctx, 0), labels = fg_grad_input(ctx, 1);
  const fg_tinfo *t = fg_graph_tinfo(g, logits);
  if (!t || t->rank != 2) return -1;
  int64_t c = t->dims[1];
  fg_dtype dt = t->dtype;
  if (c < 0) {
    const fg_node *n = fwd(ctx);
    char s[FG_SHAPE_STR_MAX];
    fg_graph_fail(g, FG_UNIMPLEMENTED,
                  "node '%s' (%s): gradient needs the class count (dim 1 of input 0 "
                  "(logits) shape %s) at build time, but it is unknown",
                  n->name, fg_op_table[n->op].name, fg_shape_str(t->rank, t->dims, s, sizeof s));
    return -1;
  }
  fg_output diff = fg_sub(g, fg_softmax(g, logits, 1), fg_one_hot(g, labels, c, dt));
  fg_output scale = fg_div(g, ctx->dy[0], fg_numel(g, labels, dt));
  ctx->dx[0] = fg_mul(g, diff, scale);
  return done(ctx);
}

/* ---- support ops (their own gradients, for second order) ----------------- */

/* broadcast_like(x, like) copies x to like's shape: x gets the sum back. */
static int grad_broadcast_like(fg_grad_ctx *ctx) { return grad_one_call(ctx, fg_grad_sum_to, 0); }

/* sum_to(x, like) adds x's broadcast copies: each gets dy back. */
static int grad_sum_to(fg_grad_ctx *ctx) { return grad_one_call(ctx, fg_broadcast_like, 0); }

/* slice_grad's gradient is a slice: see grad_slice_or_slice_grad. */

/* gather_grad scatters dy's rows at indices; the adjoint gathers them. */
static int grad_gather_grad(fg_grad_ctx *ctx) { return grad_one_call(ctx, fg_gather, 1); }

const fg_grad_reg fg_grads_shape[] = {
    {FG_OP_MATMUL, grad_matmul},
    {FG_OP_RESHAPE, grad_reshape_like_x},
    {FG_OP_TRANSPOSE, grad_transpose},
    {FG_OP_CONCAT, grad_concat},
    {FG_OP_SLICE, grad_slice},
    {FG_OP_GATHER, grad_gather},
    {FG_OP_SOFTMAX, grad_softmax},
    {FG_OP_LOG_SOFTMAX, grad_log_softmax},
    {FG_OP_SOFTMAX_CROSS_ENTROPY, grad_softmax_cross_entropy},
    {FG_OP_EXPAND_DIMS, grad_reshape_like_x},
    {FG_OP_RESHAPE_LIKE, grad_reshape_like_x},
    {FG_OP_BROADCAST_LIKE, grad_broadcast_like},
    {FG_OP_SUM_TO, grad_sum_to},
    {FG_OP_SLICE_GRAD, grad_slice_grad},
    {FG_OP_GATHER_GRAD, grad_gather_grad},
    {-1, NULL},
};
