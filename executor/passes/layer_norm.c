/* Layer normalization written out becomes one layer_norm node:
 *
 *   m = reduce_mean(x, the last k axes, keepdims)
 *   d = sub(x, m)
 *   v = reduce_mean(mul(d, d) or pow(d, 2), the same axes, keepdims)
 *   n = div(d, sqrt(add(v, eps)))        eps a positive one-element constant
 *   y = add(mul(n, scale), shift)        scale and shift of x's last k dims
 *
 * into layer_norm(x, scale, shift) with normalized_rank k and epsilon eps
 * (either operand order of each add and of the scale's mul). Without the
 * shift's add, or without both, the node reads constants of zeros and
 * ones added here. PyTorch writes nn.LayerNorm so below opset 17, its
 * default export being opset 14 (BERT, ViT, GPT-2, ConvNeXt's channel
 * norms), and TensorFlow's layer norms are the same arithmetic; ONNX
 * Runtime's LayerNormFusion rewrites the same pattern. One node reads x
 * twice (its statistics, then the output) and writes y once, where the
 * pattern makes two reductions and up to seven passes over x's size.
 *
 * Not bit for bit: layer_norm sums the mean and the variance in double
 * and scales by 1 / sqrt(v + eps), where the pattern sums in the dtype and
 * divides by the square root. The two differ by a few units in the last
 * place of the largest output (tests: within 1e-6 relative in f32, 1e-12
 * in f64). The chain is rewritten in place at its last node under
 * epilogue_common.h's rules; d is read three times (twice by mul(d, d)),
 * all inside the chain. */
#include <math.h>
#include <string.h>

#include "executor/passes/epilogue_common.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

/* The chain found at a root: its input, parameters and nodes. */
typedef struct ln_match {
  fg_output x, scale, shift; /* scale / shift node -1: absent */
  int k;                     /* normalized_rank */
  double eps;
  int parts[10], n;
} ln_match;

static int same_output(fg_output a, fg_output b) { return a.node == b.node && a.index == b.index; }

/* Node id as a part of the chain at root: op `op` with n_in inputs, one
 * output of root's dtype, absorbed once its `reads` reads (all of them
 * the chain's) are counted; root itself needs neither. */
static int part(const fg_pass_ctx *ctx, const fg_epi_state *s, fg_output o, int root, int op,
                int n_in, int reads) {
  const fg_node *n = &ctx->w->g.nodes[o.node];
  if (o.index != 0 || n->op != op || n->n_inputs != n_in ||
      n->outputs[0].dtype != ctx->w->g.nodes[root].outputs[0].dtype)
    return 0;
  return o.node == root || fg_epi_absorbable_reads(ctx, s, o.node, root, reads);
}

/* The value of a one-element float constant at o, or NAN. */
static double scalar_value(const fg_graph *g, fg_output o) {
  const fg_tensor *t = fg_pass_const_value(g, o);
  if (!t || fg_tensor_num_elements(t) != 1) return NAN;
  if (t->dtype == FG_F32) return ((const float *)t->data)[0];
  return t->dtype == FG_F64 ? ((const double *)t->data)[0] : NAN;
}

/* reduce_mean node r keeps its dims and reduces exactly the last k axes of
 * its rank-`rank` input: k, or 0. */
static int trailing_mean(const fg_node *r, int rank) {
  const fg_attr *keep = fg_attrs_find(&r->attrs, "keepdims");
  const fg_attr *ax = fg_attrs_find(&r->attrs, "axes");
  if (!keep || keep->type != FG_ATTR_INT || keep->i != 1) return 0;
  if (!ax || ax->n == 0) return rank; /* every axis */
  if (ax->type != FG_ATTR_INTS || ax->n > rank) return 0;
  unsigned seen = 0;
  for (int i = 0; i < ax->n; i++) {
    int64_t a = ax->ints[i] < 0 ? ax->ints[i] + rank : ax->ints[i];
    if (a < rank - ax->n || a >= rank || (seen >> a & 1)) return 0;
    seen |= 1u << a;
  }
  return ax->n;
}

/* v = reduce_mean(mul(d, d) or pow(d, 2)) with d = sub(x, m), m =
 * reduce_mean(x) over the same last axes: fills x, k and the parts; d's
 * id into *d. 1 when it matches. */
static int match_stats(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, fg_output v,
                       fg_output d, ln_match *mt) {
  const fg_graph *g = &ctx->w->g;
  if (!part(ctx, s, v, root, FG_OP_REDUCE_MEAN, 1, 1)) return 0;
  fg_output p = g->nodes[v.node].inputs[0];
  const fg_node *pn = &g->nodes[p.node];
  int squared = part(ctx, s, p, root, FG_OP_MUL, 2, 1) && same_output(pn->inputs[0], d) &&
                same_output(pn->inputs[1], d);
  int powered = part(ctx, s, p, root, FG_OP_POW, 2, 1) && same_output(pn->inputs[0], d) &&
                scalar_value(g, pn->inputs[1]) == 2.0;
  /* d: read by the square (once or twice) and by the div. */
  if (!(squared || powered) || !part(ctx, s, d, root, FG_OP_SUB, 2, squared ? 3 : 2)) return 0;
  fg_output x = g->nodes[d.node].inputs[0], m = g->nodes[d.node].inputs[1];
  if (!part(ctx, s, m, root, FG_OP_REDUCE_MEAN, 1, 1) ||
      !same_output(g->nodes[m.node].inputs[0], x))
    return 0;
  const fg_tinfo *tx = fg_pass_type_of(g, x);
  int k = trailing_mean(&g->nodes[m.node], tx->rank);
  if (k == 0 || k != trailing_mean(&g->nodes[v.node], tx->rank) ||
      !fg_pass_tinfo_equal(tx, &g->nodes[d.node].outputs[0]))
    return 0;
  mt->x = x, mt->k = k;
  int at = mt->n;
  mt->parts[at] = v.node, mt->parts[at + 1] = p.node, mt->parts[at + 2] = d.node;
  mt->parts[at + 3] = m.node, mt->n += 4;
  return 1;
}

/* div(d, sqrt(add(v, eps))) at o. */
static int match_core(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, fg_output o,
                      ln_match *mt) {
  const fg_graph *g = &ctx->w->g;
  if (!part(ctx, s, o, root, FG_OP_DIV, 2, 1)) return 0;
  fg_output d = g->nodes[o.node].inputs[0], q = g->nodes[o.node].inputs[1];
  if (!part(ctx, s, q, root, FG_OP_SQRT, 1, 1)) return 0;
  fg_output ve = g->nodes[q.node].inputs[0];
  if (!part(ctx, s, ve, root, FG_OP_ADD, 2, 1)) return 0;
  mt->parts[mt->n++] = o.node, mt->parts[mt->n++] = q.node, mt->parts[mt->n++] = ve.node;
  for (int i = 0; i < 2; i++) {
    double eps = scalar_value(g, g->nodes[ve.node].inputs[1 - i]);
    int n = mt->n;
    if (eps > 0 && match_stats(ctx, s, root, g->nodes[ve.node].inputs[i], d, mt))
      return mt->eps = eps, 1;
    mt->n = n;
  }
  return 0;
}

/* mul(core, scale) at o, either order. */
static int match_scaled(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, fg_output o,
                        ln_match *mt) {
  const fg_graph *g = &ctx->w->g;
  if (!part(ctx, s, o, root, FG_OP_MUL, 2, 1)) return 0;
  const int n = mt->n;
  mt->parts[mt->n++] = o.node;
  for (int i = 0; i < 2; i++) {
    if (match_core(ctx, s, root, g->nodes[o.node].inputs[i], mt))
      return mt->scale = g->nodes[o.node].inputs[1 - i], 1;
    mt->n = n + 1;
  }
  mt->n = n;
  return 0;
}

/* The chain at root: add(scaled, shift), scaled alone, or the core alone. */
static int match(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, ln_match *mt) {
  const fg_graph *g = &ctx->w->g;
  const fg_output r = {root, 0};
  memset(mt, 0, sizeof *mt);
  mt->scale = mt->shift = (fg_output){-1, 0};
  if (g->nodes[root].op == FG_OP_ADD && g->nodes[root].n_inputs == 2) {
    mt->parts[mt->n++] = root;
    for (int i = 0; i < 2; i++) {
      if (match_scaled(ctx, s, root, g->nodes[root].inputs[i], mt))
        return mt->shift = g->nodes[root].inputs[1 - i], 1;
      mt->n = 1;
    }
    return 0;
  }
  return match_scaled(ctx, s, root, r, mt) || match_core(ctx, s, root, r, mt);
}

/* A parameter (scale or shift) has x's last k dims and dtype, and may be
 * read at the root. */
static int param_fits(const fg_graph *g, fg_output p, const ln_match *mt, int first, int root) {
  if (p.node < 0) return 1;
  const fg_tinfo *tp = fg_pass_type_of(g, p), *tx = fg_pass_type_of(g, mt->x);
  if (tp->dtype != tx->dtype || tp->rank != mt->k) return 0;
  for (int i = 0; i < mt->k; i++)
    if (tp->dims[i] < 0 || tp->dims[i] != tx->dims[tx->rank - mt->k + i]) return 0;
  return fg_epi_readable_at_root(g, p, first, root);
}

/* A constant of x's last k dims (known: try_root checked) filled with v,
 * added for an absent parameter: its output, or node -1 with the status
 * set (out of memory). */
static fg_output fill_param(fg_pass_ctx *ctx, int root, const ln_match *mt, const char *suffix,
                            double v, fg_status *st) {
  const fg_tinfo *tx = fg_pass_type_of(&ctx->w->g, mt->x);
  fg_tensor *t = fg_tensor_new(tx->dtype, mt->k, tx->dims + tx->rank - mt->k, NULL);
  if (!t) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "layer_norm: out of memory (constant '%s')", suffix);
    return (fg_output){-1, 0};
  }
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    if (tx->dtype == FG_F32)
      ((float *)t->data)[i] = (float)v;
    else
      ((double *)t->data)[i] = v;
  int id = fg_pass_add_constant(ctx, root, suffix, t, st);
  return (fg_output){id, 0};
}

static int rewrite(fg_pass_ctx *ctx, fg_epi_state *s, int root, ln_match *mt, fg_status *st) {
  fg_graph *g = &ctx->w->g;
  const fg_tinfo *tx = fg_pass_type_of(g, mt->x);
  if (mt->scale.node < 0) mt->scale = fill_param(ctx, root, mt, "scale", 1.0, st);
  if (mt->scale.node >= 0 && mt->shift.node < 0)
    mt->shift = fill_param(ctx, root, mt, "shift", 0.0, st);
  if (mt->scale.node < 0 || mt->shift.node < 0) return -1;
  fg_tinfo outs[3] = {g->nodes[root].outputs[0], *tx, *tx};
  for (int i = 1; i < 3; i++)
    outs[i].rank = tx->rank - mt->k;
  const fg_output in[3] = {mt->x, mt->scale, mt->shift};
  fg_node *n = &g->nodes[root];
  if (fg_pass_graph_set_outputs(ctx->w, root, outs, 3) != 0 ||
      fg_pass_graph_set_op(ctx->w, root, FG_OP_LAYER_NORM, in, 3) != 0 ||
      fg_pass_graph_own_attrs(ctx->w, root) != 0 ||
      fg_attrs_set_int(&n->attrs, "normalized_rank", mt->k) != 0 ||
      fg_attrs_set_float(&n->attrs, "epsilon", mt->eps) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "layer_norm: out of memory");
    return -1;
  }
  return fg_epi_absorb(ctx, s, mt->parts, mt->n, root,
                       "(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * scale + shift into "
                       "layer_norm",
                       st);
}

static int try_root(fg_pass_ctx *ctx, fg_epi_state *s, int root, fg_status *st) {
  const fg_graph *g = &ctx->w->g;
  ln_match mt;
  if (!fg_epi_root_ok(ctx, s, root) || !match(ctx, s, root, &mt)) return 0;
  int first = root;
  for (int k = 0; k < mt.n; k++)
    first = mt.parts[k] < first ? mt.parts[k] : first;
  const fg_tinfo *tx = fg_pass_type_of(g, mt.x);
  int absent = mt.scale.node < 0 || mt.shift.node < 0;
  for (int i = tx->rank - mt.k; absent && i < tx->rank; i++)
    if (tx->dims[i] < 0) return 0; /* the constants need the dims */
  if (!fg_pass_tinfo_equal(tx, &g->nodes[root].outputs[0]) ||
      !fg_epi_readable_at_root(g, mt.x, first, root) ||
      !param_fits(g, mt.scale, &mt, first, root) || !param_fits(g, mt.shift, &mt, first, root) ||
      (absent && !ctx->w->may_append))
    return 0;
  return rewrite(ctx, s, root, &mt, st);
}

int fg_pass_layer_norm(fg_pass_ctx *ctx, fg_status *st) {
  static const int roots[3] = {FG_OP_ADD, FG_OP_MUL, FG_OP_DIV};
  return fg_epi_run_ops(ctx, "layer_norm", roots, 3, try_root, st);
}
