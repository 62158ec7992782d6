/* Matmul epilogues: relu(matmul(a, b) + bias), and matmul(a, b) + bias
 * without the relu, become one fused_matmul node (graph/
 * infer_fused_matmul.c) whose kernel adds the bias and applies the ReLU
 * on each tile of the product while it is in cache: the bits are the
 * chain's (the same products, then x + b, then relu's x < 0 ? 0 : x).
 *
 * The chain: a matmul of floats whose output is rank 2, or batched with
 * a rank-2 b and a not transposed (one GEMM over the stacked rows); an
 * add of it and a bias of shape [N] (the product's last dim, either
 * operand order) whose output is the product's type; optionally a relu of
 * that sum. The last node of the chain (the root) is rewritten in place
 * into fused_matmul(a, b, bias), so its name, id and output stay and its
 * consumers need no rewiring. The matmul and the add must have no
 * consumer but the next node of the chain (nodes that only wait for
 * them, as an optimizer's update waits for the readers of its variable,
 * or read only their shape, as a gradient's sum_to with an unknown batch
 * dim, read the root instead), none of the three may be
 * pinned, all lie in one device group, and a, b and bias must not be
 * variable state written between their first read and the root (the plan
 * orders a variable's reads and writes by node id, and the root reads
 * them later than the matmul and the add did).
 *
 * What the absorbed matmul and add become depends on who may fetch them.
 * fg_optimize keeps only what it is asked for: a kept (fetched) matmul or
 * add is not fused (it would be computed twice), and the others are
 * removed. A session keeps every node (any name may be fetched): there
 * they stay, computing their own values only when a run fetches them, so
 * a session fuses regardless. The pass tells the two apart by
 * ctx->all_kept. */
#include <stdlib.h>

#include "executor/passes/epilogue_common.h"
#include "graph/op_table.h"

typedef struct epi_chain {
  int root, add, mm, relu;
  fg_output a, b, bias;
} epi_chain;

/* A matmul the fused kernel runs as one GEMM (see the top). */
static int match_matmul(const fg_pass_ctx *ctx, const fg_epi_state *s, int mm, epi_chain *c) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[mm];
  if (n->op != FG_OP_MATMUL || n->n_inputs != 2 || !fg_epi_absorbable(ctx, s, mm, c->root))
    return 0;
  const fg_tinfo *b = &g->nodes[n->inputs[1].node].outputs[n->inputs[1].index];
  int ta = fg_attr_int_or(n, "transpose_a", 0) != 0;
  if (n->outputs[0].rank != 2 && (b->rank != 2 || ta)) return 0;
  c->mm = mm, c->a = n->inputs[0], c->b = n->inputs[1];
  return 1;
}

/* add(matmul, bias) or add(bias, matmul) with bias [N] of the product's
 * dtype, and the sum the product's type (bias broadcast over the rows). */
static int match_add(const fg_pass_ctx *ctx, const fg_epi_state *s, int add, epi_chain *c) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[add];
  if (n->op != FG_OP_ADD || n->n_inputs != 2) return 0;
  for (int k = 0; k < 2; k++) {
    fg_output m = n->inputs[k], bias = n->inputs[1 - k];
    if (m.index != 0 || m.node == bias.node || !match_matmul(ctx, s, m.node, c)) continue;
    const fg_tinfo *tm = &g->nodes[m.node].outputs[0];
    const fg_tinfo *tb = &g->nodes[bias.node].outputs[bias.index];
    int64_t nd = tm->dims[tm->rank - 1];
    if (tb->rank != 1 || tb->dtype != tm->dtype || nd < 0 || tb->dims[0] != nd ||
        !fg_pass_tinfo_equal(&n->outputs[0], tm))
      return 0;
    c->add = add, c->bias = bias;
    return 1;
  }
  return 0;
}

/* The chain whose last node is `root` (a relu or an add), into *c. */
static int match_chain(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, epi_chain *c) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *r = &g->nodes[root];
  c->root = root, c->relu = 0;
  if (!fg_epi_root_ok(ctx, s, root)) return 0;
  if (r->op == FG_OP_RELU) {
    fg_output x = r->inputs[0];
    if (r->n_inputs != 1 || x.index != 0 || !fg_epi_absorbable(ctx, s, x.node, root) ||
        !match_add(ctx, s, x.node, c))
      return 0;
    c->relu = 1;
  } else if (r->op != FG_OP_ADD || !match_add(ctx, s, root, c)) {
    return 0;
  }
  return fg_epi_readable_at_root(g, c->a, c->mm, root) &&
         fg_epi_readable_at_root(g, c->b, c->mm, root) &&
         fg_epi_readable_at_root(g, c->bias, c->add, root);
}

/* Root rewritten in place into fused_matmul(a, b, bias); -1 out of memory. */
static int rewrite_root(fg_pass_ctx *ctx, const epi_chain *c) {
  fg_graph *g = &ctx->w->g;
  const fg_node *m = &g->nodes[c->mm];
  int64_t ta = fg_attr_int_or(m, "transpose_a", 0) != 0,
          tb = fg_attr_int_or(m, "transpose_b", 0) != 0;
  fg_node *n = &g->nodes[c->root];
  fg_output *in = realloc(n->inputs, 3 * sizeof *in);
  if (!in) return -1;
  n->inputs = in;
  if (fg_pass_graph_own_attrs(ctx->w, c->root) != 0 ||
      fg_attrs_set_int(&n->attrs, "transpose_a", ta) != 0 ||
      fg_attrs_set_int(&n->attrs, "transpose_b", tb) != 0 ||
      fg_attrs_set_string(&n->attrs, "activation", c->relu ? "relu" : "none") != 0)
    return -1;
  in[0] = c->a, in[1] = c->b, in[2] = c->bias;
  n->n_inputs = 3;
  n->op = FG_OP_FUSED_MATMUL;
  return 0;
}

static int fuse_chain(fg_pass_ctx *ctx, fg_epi_state *s, const epi_chain *c, fg_status *st) {
  if (rewrite_root(ctx, c) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "epilogue: out of memory");
    return -1;
  }
  const int parts[2] = {c->mm, c->add};
  return fg_epi_absorb(ctx, s, parts, 2, c->root, c->relu ? "matmul+add+relu" : "matmul+add", st);
}

static int try_root(fg_pass_ctx *ctx, fg_epi_state *s, int root, fg_status *st) {
  epi_chain c;
  return match_chain(ctx, s, root, &c) ? fuse_chain(ctx, s, &c, st) : 0;
}

int fg_pass_epilogue(fg_pass_ctx *ctx, fg_status *st) {
  return fg_epi_run(ctx, "epilogue", try_root, st);
}
