/* Activation patterns: the forms an exporter writes for an activation
 * flowgraph has as one op become that op.
 *
 *   mul(x, sigmoid(x))                          -> silu(x)
 *   mul(mul(x, add(erf(div(x, c)), 1)), 0.5)    -> gelu(x)
 *   mul(mul(x, 0.5), add(erf(div(x, c)), 1))    -> gelu(x)
 *   the same with add(tanh(mul(add(x, mul(x^3, k)), t)), 1) in the erf
 *   term's place                                -> gelu_tanh(x)
 *
 * (either operand order of each mul and add; c = sqrt(2) rounded to the
 * dtype, or mul by 1 / sqrt(2) in div's place; t = sqrt(2 / pi) and k =
 * 0.044715 rounded to the dtype; x^3 as mul(mul(x, x), x), mul(x, mul(x,
 * x)) or pow(x, 3)). PyTorch exports SiLU (EfficientNet, RegNet-Y's,
 * YOLO's) as Sigmoid then Mul, the exact GELU before opset 20 (BERT, ViT,
 * ConvNeXt) as Div, Erf, Add, Mul, Mul, and the tanh form (GPT-2's
 * gelu_new) as nine nodes; ONNX Runtime's GeluFusion and FastGeluFusion
 * and TensorFlow's remapper rewrite the same. One op is one pass over
 * memory with one exp or erf per element, where the pattern is two, five
 * or nine (fused: one pass, but as many loops over each block).
 *
 * Not bit for bit: silu computes x / (1 + exp(-x)) where the pair rounds
 * sigmoid(x) first and then multiplies; gelu multiplies x by 1 / sqrt(2)
 * where the pattern divides by sqrt(2); gelu_tanh computes x / (1 +
 * exp(-2u)), which keeps the digits the pattern's 1 + tanh(u) cancels for
 * x << 0. They differ by a few units in the last place of the largest
 * value (tests: within 1e-6 relative of the pattern in f32, 1e-12 in
 * f64). The chain is rewritten in place at its last mul (the root) under
 * epilogue_common.h's rules: every other node of it has no reader but the
 * next, is not kept in fg_optimize, shares the root's device group. */
#include <math.h>
#include <string.h>

#include "executor/passes/epilogue_common.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

static int same_output(fg_output a, fg_output b) { return a.node == b.node && a.index == b.index; }

/* o is a one-element constant of dtype dt equal to v rounded to dt. */
static int const_is(const fg_graph *g, fg_output o, fg_dtype dt, double v) {
  const fg_tensor *t = fg_pass_const_value(g, o);
  if (!t || t->dtype != dt || fg_tensor_num_bytes(t) != fg_dtype_size(dt)) return 0;
  return dt == FG_F32 ? ((const float *)t->data)[0] == (float)v : ((const double *)t->data)[0] == v;
}

/* Node id as a part of the chain ending at root (or root itself): op
 * `op` with two inputs (into *a and *b) and the root's output type. */
static int binary_part(const fg_pass_ctx *ctx, const fg_epi_state *s, int id, int root, int op,
                       fg_output *a, fg_output *b) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[id];
  if (n->op != op || n->n_inputs != 2 ||
      !fg_pass_tinfo_equal(&n->outputs[0], &g->nodes[root].outputs[0]))
    return 0;
  if (id != root && !fg_epi_absorbable(ctx, s, id, root)) return 0;
  *a = n->inputs[0], *b = n->inputs[1];
  return 1;
}

/* Of a and b, the one that is the constant v (into nothing) and the
 * other (into *rest): 1 when one is. */
static int split_const(const fg_graph *g, fg_output a, fg_output b, fg_dtype dt, double v,
                       fg_output *rest) {
  if (const_is(g, b, dt, v)) return *rest = a, 1;
  if (const_is(g, a, dt, v)) return *rest = b, 1;
  return 0;
}

/* mul(x, sigmoid(x)) at root: the sigmoid into parts[1]. */
static int match_silu(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, fg_output *x,
                      int *parts) {
  const fg_graph *g = &ctx->w->g;
  fg_output in[2];
  if (!binary_part(ctx, s, root, root, FG_OP_MUL, &in[0], &in[1])) return 0;
  for (int k = 0; k < 2; k++) {
    const fg_node *sg = &g->nodes[in[k].node];
    if (sg->op != FG_OP_SIGMOID || in[k].index != 0 || !same_output(sg->inputs[0], in[1 - k]) ||
        !fg_epi_absorbable(ctx, s, in[k].node, root))
      continue;
    *x = in[1 - k], parts[0] = root, parts[1] = in[k].node;
    return 2;
  }
  return 0;
}

/* add(op(q), 1) at node o, op erf or tanh (a GELU term's head): q into
 * *q, the add and the op into parts[0..1], and q's node into parts[2]
 * (the term's next part); 1 when it matches and q is an output 0. */
static int one_plus(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, fg_output o, int op,
                    fg_output *q, int *parts) {
  const fg_graph *g = &ctx->w->g;
  fg_output a, b, e;
  if (o.index != 0 || !binary_part(ctx, s, o.node, root, FG_OP_ADD, &a, &b) ||
      !split_const(g, a, b, g->nodes[root].outputs[0].dtype, 1.0, &e))
    return 0;
  const fg_node *n = &g->nodes[e.node];
  if (n->op != op || e.index != 0 || !fg_epi_absorbable(ctx, s, e.node, root)) return 0;
  *q = n->inputs[0];
  parts[0] = o.node, parts[1] = e.node, parts[2] = q->node;
  return q->index == 0;
}

/* add(erf(x / sqrt(2)), 1) at node o: x into *x, its nodes into parts;
 * their count (3), or 0. */
static int match_erf_term(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, fg_output o,
                          fg_output *x, int *parts) {
  const fg_graph *g = &ctx->w->g;
  const fg_dtype dt = g->nodes[root].outputs[0].dtype;
  fg_output a, b, q;
  if (!one_plus(ctx, s, root, o, FG_OP_ERF, &q, parts)) return 0;
  if (binary_part(ctx, s, q.node, root, FG_OP_DIV, &a, &b) && const_is(g, b, dt, sqrt(2.0)))
    return *x = a, 3;
  if (binary_part(ctx, s, q.node, root, FG_OP_MUL, &a, &b) &&
      split_const(g, a, b, dt, 1.0 / sqrt(2.0), x))
    return 3;
  return 0;
}

/* x^3 at o, as mul(mul(x, x), x) in either order or pow(x, 3): x into
 * *x, its nodes into parts; their count, or 0. */
static int match_cube(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, fg_output o,
                      fg_output *x, int *parts) {
  const fg_graph *g = &ctx->w->g;
  const fg_dtype dt = g->nodes[root].outputs[0].dtype;
  fg_output a, b, p, q;
  if (o.index != 0) return 0;
  parts[0] = o.node;
  if (binary_part(ctx, s, o.node, root, FG_OP_POW, &a, &b))
    return const_is(g, b, dt, 3.0) ? (*x = a, 1) : 0;
  if (!binary_part(ctx, s, o.node, root, FG_OP_MUL, &a, &b)) return 0;
  for (int k = 0; k < 2; k++) {
    fg_output sq = k ? b : a, other = k ? a : b;
    if (sq.index == 0 && binary_part(ctx, s, sq.node, root, FG_OP_MUL, &p, &q) &&
        same_output(p, q) && same_output(p, other)) {
      parts[1] = sq.node;
      return *x = other, 2;
    }
  }
  return 0;
}

/* add(tanh(mul(add(x, mul(x^3, k)), t)), 1) at node o: x into *x, its
 * nodes into parts; their count (6 or 7), or 0. */
static int match_tanh_term(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, fg_output o,
                           fg_output *x, int *parts) {
  const fg_graph *g = &ctx->w->g;
  const fg_dtype dt = g->nodes[root].outputs[0].dtype;
  fg_output a, b, m, sum, x3;
  if (!one_plus(ctx, s, root, o, FG_OP_TANH, &m, parts) ||
      !binary_part(ctx, s, m.node, root, FG_OP_MUL, &a, &b) ||
      !split_const(g, a, b, dt, 0.79788456080286535588 /* sqrt(2 / pi) */, &sum) ||
      sum.index != 0 || !binary_part(ctx, s, sum.node, root, FG_OP_ADD, &a, &b))
    return 0;
  parts[3] = sum.node;
  for (int k = 0; k < 2; k++) {
    fg_output xs = k ? b : a, kx3 = k ? a : b, p, q;
    if (kx3.index != 0 || !binary_part(ctx, s, kx3.node, root, FG_OP_MUL, &p, &q) ||
        !split_const(g, p, q, dt, 0.044715, &x3))
      continue;
    parts[4] = kx3.node;
    const int n = match_cube(ctx, s, root, x3, x, parts + 5);
    if (n > 0 && same_output(*x, xs)) return 5 + n;
  }
  return 0;
}

/* A GELU term matcher: match_erf_term or match_tanh_term. */
typedef int (*term_fn)(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, fg_output o,
                       fg_output *x, int *parts);

/* The two GELU forms at root, with `term` the erf or the tanh one: x into
 * *x, the chain's nodes into parts; their count, or 0. */
static int match_gelu(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, term_fn term,
                      fg_output *x, int *parts) {
  const fg_graph *g = &ctx->w->g;
  const fg_dtype dt = g->nodes[root].outputs[0].dtype;
  fg_output a, b, inner, u, v, x2;
  if (!binary_part(ctx, s, root, root, FG_OP_MUL, &a, &b)) return 0;
  parts[0] = root;
  /* mul(mul(x, term), 0.5) */
  if (split_const(g, a, b, dt, 0.5, &inner) && inner.index == 0 &&
      binary_part(ctx, s, inner.node, root, FG_OP_MUL, &u, &v)) {
    parts[1] = inner.node;
    for (int k = 0; k < 2; k++) {
      const int n = term(ctx, s, root, k ? u : v, x, parts + 2);
      if (n > 0 && same_output(*x, k ? v : u)) return 2 + n;
    }
  }
  /* mul(mul(x, 0.5), term) */
  for (int k = 0; k < 2; k++) {
    fg_output half = k ? b : a;
    if (half.index != 0 || !binary_part(ctx, s, half.node, root, FG_OP_MUL, &u, &v) ||
        !split_const(g, u, v, dt, 0.5, &x2))
      continue;
    parts[1] = half.node;
    const int n = term(ctx, s, root, k ? a : b, x, parts + 2);
    if (n > 0 && same_output(*x, x2)) return 2 + n;
  }
  return 0;
}

/* Rewrites root into op(x) and absorbs the other parts. */
static int rewrite(fg_pass_ctx *ctx, fg_epi_state *s, int root, int op, fg_output x,
                   const int *parts, int n, const char *rule, fg_status *st) {
  if (fg_pass_graph_set_op(ctx->w, root, op, &x, 1) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "activations: out of memory");
    return -1;
  }
  return fg_epi_absorb(ctx, s, parts, n, root, rule, st);
}

/* x, which the chain's parts first read, may be read at the root
 * instead, and has the root's type. */
static int x_fits(const fg_graph *g, fg_output x, const int *parts, int n, int root) {
  int first = root;
  for (int k = 0; k < n; k++)
    first = parts[k] < first ? parts[k] : first;
  return fg_pass_tinfo_equal(fg_pass_type_of(g, x), &g->nodes[root].outputs[0]) &&
         fg_epi_readable_at_root(g, x, first, root);
}

static int try_root(fg_pass_ctx *ctx, fg_epi_state *s, int root, fg_status *st) {
  const fg_graph *g = &ctx->w->g;
  int parts[9], n;
  fg_output x;
  if (!fg_epi_root_ok(ctx, s, root)) return 0;
  if ((n = match_silu(ctx, s, root, &x, parts)) > 0 && x_fits(g, x, parts, n, root))
    return rewrite(ctx, s, root, FG_OP_SILU, x, parts, n, "mul(x, sigmoid(x)) into silu", st);
  if ((n = match_gelu(ctx, s, root, match_erf_term, &x, parts)) > 0 && x_fits(g, x, parts, n, root))
    return rewrite(ctx, s, root, FG_OP_GELU, x, parts, n,
                   "x * 0.5 * (1 + erf(x / sqrt(2))) into gelu", st);
  if ((n = match_gelu(ctx, s, root, match_tanh_term, &x, parts)) > 0 &&
      x_fits(g, x, parts, n, root))
    return rewrite(ctx, s, root, FG_OP_GELU_TANH, x, parts, n,
                   "x * 0.5 * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) into gelu_tanh", st);
  return 0;
}

int fg_pass_activations(fg_pass_ctx *ctx, fg_status *st) {
  static const int mul_op[1] = {FG_OP_MUL};
  return fg_epi_run_ops(ctx, "activations", mul_op, 1, try_root, st);
}
