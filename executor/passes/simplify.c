/* Algebraic simplification: rewrites that give the same bits, node by node
 * in id order (each node sees its inputs already simplified).
 *
 * Only exact identities: x*1 and x/1 are x for every x (NaN included);
 * x+(-0.0) and x-(+0.0) are x, but x+(+0.0) turns -0.0 into +0.0, so a
 * float zero counts only with the sign that keeps x. The constant must not
 * broadcast x to a larger shape nor change its dtype. Chains compose:
 * transpose(transpose(x, p), q) is one transpose by p[q[i]] (none when
 * that is the identity), reshape(reshape(x)) one reshape of x. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "executor/passes/passes.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

/* What a constant operand must hold. */
typedef enum { ONE, NEG_ZERO, POS_ZERO } want_value;

static int value_is(double v, fg_dtype dt, want_value want) {
  if (dt == FG_F32 || dt == FG_F64) {
    if (want == ONE) return v == 1.0;
    return v == 0.0 && (signbit(v) != 0) == (want == NEG_ZERO);
  }
  if (dt == FG_I32 || dt == FG_I64) return v == (want == ONE ? 1.0 : 0.0);
  return 0;
}

static double element(const fg_tensor *t, size_t i) {
  switch (t->dtype) {
  case FG_F32: return ((const float *)t->data)[i];
  case FG_F64: return ((const double *)t->data)[i];
  case FG_I32: return ((const int32_t *)t->data)[i];
  case FG_I64: return (double)((const int64_t *)t->data)[i];
  default: return NAN;
  }
}

/* 1 when output o is a constant (or a fill) whose every element is `want`. */
static int const_all(const fg_graph *g, fg_output o, want_value want) {
  const fg_node *n = &g->nodes[o.node];
  if (n->op == FG_OP_FILL)
    return value_is(fg_attr_float_or(n, "value", 0.0), n->outputs[0].dtype, want);
  if (n->op != FG_OP_CONSTANT) return 0;
  const fg_attr *v = fg_attrs_find(&n->attrs, "value");
  if (!v || v->type != FG_ATTR_TENSOR || !v->t) return 0;
  size_t count =
      fg_tensor_num_bytes(v->t) / (fg_dtype_size(v->t->dtype) ? fg_dtype_size(v->t->dtype) : 1);
  for (size_t i = 0; i < count; i++)
    if (!value_is(element(v->t, i), v->t->dtype, want)) return 0;
  return 1;
}

int fg_pass_const_all_one(const fg_graph *g, fg_output o) { return const_all(g, o, ONE); }

/* c broadcast against x gives x's shape, and the result has x's dtype. */
static int keeps_x(const fg_graph *g, int id, fg_output x, fg_output c) {
  const fg_tinfo *tx = fg_pass_type_of(g, x), *tc = fg_pass_type_of(g, c),
                 *out = &g->nodes[id].outputs[0];
  if (out->dtype != tx->dtype || tc->dtype != tx->dtype || tc->rank > tx->rank) return 0;
  for (int d = 0; d < tc->rank; d++) {
    int64_t cd = tc->dims[d], xd = tx->dims[tx->rank - tc->rank + d];
    if (cd != 1 && (cd != xd || xd < 0)) return 0;
  }
  return 1;
}

/* Equal types with at most one unknown dim: the element count then fixes it. */
static int same_type(const fg_tinfo *a, const fg_tinfo *b) {
  int unknown = 0;
  if (a->dtype != b->dtype || a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; d++) {
    if (a->dims[d] != b->dims[d]) return 0;
    unknown += a->dims[d] < 0;
  }
  return unknown <= 1;
}

static int fully_known(const fg_tinfo *t) {
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d] < 0) return 0;
  return 1;
}

/* The replacement of a binary node with a neutral constant operand. */
static fg_output binary_rule(const fg_graph *g, int id, const char **rule) {
  const fg_node *n = &g->nodes[id];
  fg_output none = {-1, -1};
  int binary = n->op == FG_OP_MUL || n->op == FG_OP_DIV || n->op == FG_OP_ADD || n->op == FG_OP_SUB;
  if (!binary || n->n_inputs != 2) return none;
  fg_output a = n->inputs[0], b = n->inputs[1];
  switch (n->op) {
  case FG_OP_MUL:
    *rule = "x*1";
    if (const_all(g, b, ONE) && keeps_x(g, id, a, b)) return a;
    return const_all(g, a, ONE) && keeps_x(g, id, b, a) ? b : none;
  case FG_OP_DIV: *rule = "x/1"; return const_all(g, b, ONE) && keeps_x(g, id, a, b) ? a : none;
  case FG_OP_ADD:
    *rule = "x+0";
    if (const_all(g, b, NEG_ZERO) && keeps_x(g, id, a, b)) return a;
    return const_all(g, a, NEG_ZERO) && keeps_x(g, id, b, a) ? b : none;
  case FG_OP_SUB:
    *rule = "x-0";
    return const_all(g, b, POS_ZERO) && keeps_x(g, id, a, b) ? a : none;
  default: return none;
  }
}

/* The replacement of a node that passes its input through unchanged. */
static fg_output unary_rule(const fg_graph *g, int id, const char **rule) {
  const fg_node *n = &g->nodes[id];
  fg_output x = n->n_inputs ? n->inputs[0] : (fg_output){-1, -1}, none = {-1, -1};
  const fg_tinfo *out = &n->outputs[0];
  switch (n->op) {
  case FG_OP_IDENTITY: *rule = "identity(x)"; return x;
  case FG_OP_STOP_GRADIENT: *rule = "stop_gradient(x)"; return x;
  case FG_OP_CAST:
    *rule = "cast(x) to x's dtype";
    return fg_pass_type_of(g, x)->dtype == out->dtype ? x : none;
  case FG_OP_NEG:
    *rule = "neg(neg(x))";
    return g->nodes[x.node].op == FG_OP_NEG ? g->nodes[x.node].inputs[0] : none;
  case FG_OP_RESHAPE:
  case FG_OP_RESHAPE_LIKE:
  case FG_OP_FLATTEN:
  case FG_OP_SQUEEZE:
  case FG_OP_EXPAND:
    /* Views and a broadcast whose output type is x's: x's elements as
     * they are (one unknown dim is fixed by the element count). */
    *rule = "a shape op that changes nothing";
    return same_type(fg_pass_type_of(g, x), out) ? x : none;
  case FG_OP_BROADCAST_LIKE:
  case FG_OP_SUM_TO:
    /* like's shape decides at run time: only when every dim is known. */
    *rule = "a broadcast or sum to x's own shape";
    return fully_known(out) && fully_known(fg_pass_type_of(g, x)) &&
                   same_type(fg_pass_type_of(g, x), out)
               ? x
               : none;
  default: return none;
  }
}

/* The transpose's permutation, checked (values 0..rank-1), or NULL. */
static const int64_t *perm_of(const fg_node *n) {
  const fg_attr *p = fg_attrs_find(&n->attrs, "perm");
  if (!p || p->type != FG_ATTR_INTS || p->n != n->outputs[0].rank) return NULL;
  for (int i = 0; i < p->n; i++)
    if (p->ints[i] < 0 || p->ints[i] >= p->n) return NULL;
  return p->ints;
}

static int is_identity_perm(const int64_t *p, int n) {
  for (int i = 0; i < n; i++)
    if (p[i] != i) return 0;
  return 1;
}

/* transpose(transpose(x, p), q) -> transpose(x, p[q[i]]) in place; 1 when
 * rewritten, 0 when not applicable, -1 out of memory. */
static int fold_transposes(fg_pass_ctx *ctx, int id) {
  fg_graph *g = &ctx->w->g;
  fg_node *n = &g->nodes[id];
  int inner = n->inputs[0].node;
  const int64_t *q = perm_of(n),
                *p = g->nodes[inner].op == FG_OP_TRANSPOSE ? perm_of(&g->nodes[inner]) : NULL;
  fg_output x = p ? g->nodes[inner].inputs[0] : n->inputs[0];
  if (!q || !p || !fg_pass_can_replace(ctx, inner, x)) return 0;
  int64_t comp[FG_MAX_RANK];
  int rank = n->outputs[0].rank;
  for (int i = 0; i < rank; i++)
    comp[i] = p[q[i]];
  if (fg_pass_graph_own_attrs(ctx->w, id) != 0) return -1;
  fg_attr *a = (fg_attr *)fg_attrs_find(&n->attrs, "perm");
  memcpy(a->ints, comp, (size_t)rank * sizeof *comp);
  n->inputs[0] = x;
  return 1;
}

/* reshape(reshape(x)) -> reshape(x) in place: the outer shape alone
 * decides (only -1 is relative, and the element count is x's). */
static int fold_reshapes(fg_pass_ctx *ctx, int id) {
  fg_node *n = &ctx->w->g.nodes[id];
  const fg_node *inner = &ctx->w->g.nodes[n->inputs[0].node];
  if (inner->op != FG_OP_RESHAPE || !fg_pass_can_replace(ctx, n->inputs[0].node, inner->inputs[0]))
    return 0;
  n->inputs[0] = inner->inputs[0];
  return 1;
}

/* Node n's k pads, all >= 0, or NULL (absent or malformed). */
static const int64_t *pads_of(const fg_node *n, int k) {
  const fg_attr *p = fg_attrs_find(&n->attrs, "pads");
  if (!p || p->type != FG_ATTR_INTS || p->n != k) return NULL;
  for (int i = 0; i < k; i++)
    if (p->ints[i] < 0) return NULL;
  return p->ints;
}

/* 1 when node n has no pads (the attribute absent, or all 0). */
static int unpadded(const fg_node *n) {
  if (!fg_attrs_find(&n->attrs, "pads")) return 1;
  const int64_t *p = pads_of(n, 4);
  return p && !p[0] && !p[1] && !p[2] && !p[3];
}

/* avg_pool2d(pad(x, zeros on H and W), no pads, floor mode) ->
 * avg_pool2d(x, the pad's pads, count_include_pad 1), in place, as
 * imported models write F.avg_pool2d(x, 3, 1, 1) (Pad, then AveragePool):
 * the padded copy is gone. The same bits: every window lies in the padded
 * input, so both divide by kh kw, and the pad's zeros added to a double
 * sum that starts at +0 change nothing. Only pads within the op's limit
 * (each <= kernel / 2). 1 when rewritten, 0 when not applicable, -1 out of
 * memory. */
static int fold_pad_into_avg_pool(fg_pass_ctx *ctx, int id) {
  fg_graph *g = &ctx->w->g;
  fg_node *n = &g->nodes[id];
  const int inner = n->inputs[0].node;
  const fg_node *pd = &g->nodes[inner];
  const fg_attr *mode = fg_attrs_find(&pd->attrs, "mode"), *k = fg_attrs_find(&n->attrs, "kernel");
  const int64_t *pp = pd->op == FG_OP_PAD ? pads_of(pd, 8) : NULL;
  if (!pp || !unpadded(n) || !k || k->type != FG_ATTR_INTS || k->n != 2 ||
      n->inputs[0].index != 0 || pd->outputs[0].rank != 4 ||
      (mode && (mode->type != FG_ATTR_STRING || strcmp(mode->s, "constant"))) ||
      fg_attr_float_or(pd, "value", 0) != 0 || fg_attr_int_or(n, "ceil_mode", 0) != 0 ||
      !fg_pass_can_replace(ctx, id, pd->inputs[0]))
    return 0;
  /* pad's begins then ends over N, C, H, W; the pool's top, left, bottom, right */
  const int64_t nw[4] = {pp[2], pp[3], pp[6], pp[7]};
  if (pp[0] || pp[1] || pp[4] || pp[5] || nw[0] > k->ints[0] / 2 || nw[2] > k->ints[0] / 2 ||
      nw[1] > k->ints[1] / 2 || nw[3] > k->ints[1] / 2)
    return 0;
  if (fg_pass_graph_own_attrs(ctx->w, id) != 0 ||
      fg_attrs_set_ints(&n->attrs, "pads", nw, 4) != 0 ||
      fg_attrs_set_int(&n->attrs, "count_include_pad", 1) != 0)
    return -1;
  n->inputs[0] = pd->inputs[0];
  return 1;
}

static int oom(fg_status *st) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "simplify: out of memory");
  return -1;
}

static int simplify_node(fg_pass_ctx *ctx, int id, fg_status *st) {
  fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[id];
  const char *rule = NULL;
  if (n->op == FG_OP_TRANSPOSE || n->op == FG_OP_RESHAPE) {
    int folded = n->op == FG_OP_TRANSPOSE ? fold_transposes(ctx, id) : fold_reshapes(ctx, id);
    if (folded < 0) return oom(st);
    rule = n->op == FG_OP_TRANSPOSE ? "transpose(transpose(x))" : "reshape(reshape(x))";
    const int64_t *perm = n->op == FG_OP_TRANSPOSE ? perm_of(n) : NULL;
    int gone =
        (perm && is_identity_perm(perm, n->outputs[0].rank)) ||
        (n->op == FG_OP_RESHAPE && same_type(fg_pass_type_of(g, n->inputs[0]), &n->outputs[0]));
    if (gone && fg_pass_can_replace(ctx, id, n->inputs[0]))
      return fg_pass_replace(ctx, id, n->inputs[0], "simplified",
                             folded ? rule : "a shape op that changes nothing", st);
    return folded ? fg_pass_record(ctx, id, "simplified", n->name, rule, st) : 0;
  }
  if (n->op == FG_OP_AVG_POOL2D) {
    const int folded = fold_pad_into_avg_pool(ctx, id);
    if (folded < 0) return oom(st);
    return folded ? fg_pass_record(ctx, id, "simplified", n->name, "avg_pool2d(pad(x, 0))", st) : 0;
  }
  fg_output by = binary_rule(g, id, &rule);
  if (by.node < 0) by = unary_rule(g, id, &rule);
  if (by.node < 0 || !fg_pass_can_replace(ctx, id, by)) return 0;
  return fg_pass_replace(ctx, id, by, "simplified", rule, st);
}

int fg_pass_simplify(fg_pass_ctx *ctx, fg_status *st) {
  const fg_graph *g = &ctx->w->g;
  for (int id = 0; id < g->n_nodes; id++) {
    fg_pass_resolve_inputs(ctx, id);
    if (ctx->dead[id] || fg_pass_node_pinned(&g->nodes[id])) continue;
    if (simplify_node(ctx, id, st) != 0) return -1;
  }
  return 0;
}
