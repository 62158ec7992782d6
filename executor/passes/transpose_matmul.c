/* Transposes around a matmul: matmul(transpose(x, p), transpose(y, q))
 * and transpose(matmul(...), s), as attention blocks write the heads'
 * split and merge, become one permuted_matmul (graph/
 * infer_permuted_matmul.c) whose kernel reads x and y and writes the
 * product where they lie, as strided matrices, so no transposed copy is
 * made. Either transpose of an operand, the one of the product, or any
 * two or three of them fold.
 *
 * An operand's transpose folds when it keeps the operand's last axis among
 * the product's matrix axes (the strided matrix then has unit stride one
 * way, as BLAS needs), the product's when it keeps the product's last axis
 * last; the matmul's own transpose_a and transpose_b join the operands'
 * perms. The operands must have one rank (no broadcast of ranks).
 *
 * The rewrite keeps the bits: the permuted kernel makes the GEMM calls
 * matmul makes for the same M, N and K, one per batch in the same tiles,
 * only with other leading dims. matmul takes two other paths on packed
 * operands, which a strided one cannot: products of at most 8 rows
 * stream b (kernels/cpu/matvec.c), and with b shared by every batch and a
 * not transposed a's batches stack into one GEMM. The pass leaves those
 * products alone (a product of unknown rows too).
 *
 * The root is the node rewritten in place: the product's transpose when it
 * folds, else the matmul. A folded transpose and a matmul under a folded
 * transpose are absorbed under the epilogue passes' rules (epilogue_
 * common.h): read by nothing else, in the root's device group, and so
 * on; an operand's transpose read by other nodes stays and is not folded
 * (its copy is made anyway). */
#include <string.h>

#include "executor/passes/epilogue_common.h"
#include "graph/op_table.h"

/* matmul's few-row path takes products of at most this many rows
 * (FGK_MV_MAX_M in kernels/cpu/matvec.h). */
#define MV_MAX_ROWS 8

typedef struct tm_plan {
  int mm, root, r;
  fg_output a, b;          /* what the permuted product reads */
  int ta, tb;              /* the matmul's own transposes */
  int fold_a, fold_b, out; /* which transposes fold: the nodes, or -1 */
  int perm_a[FG_MAX_RANK], perm_b[FG_MAX_RANK], perm_out[FG_MAX_RANK];
} tm_plan;

/* The perm of a transpose node of rank r into p; 0 when it has none. */
static int node_perm(const fg_node *n, int r, int *p) {
  const fg_attr *a = fg_attrs_find(&n->attrs, "perm");
  if (!a || a->type != FG_ATTR_INTS || a->n != r) return 0;
  for (int i = 0; i < r; i++)
    p[i] = (int)a->ints[i];
  return 1;
}

static void identity(int *p, int r, int swap_last) {
  for (int i = 0; i < r; i++)
    p[i] = i;
  if (swap_last) p[r - 2] = r - 1, p[r - 1] = r - 2;
}

/* An operand's perm keeps its last axis among the matrix axes. */
static int operand_ok(const int *p, int r) { return p[r - 1] == r - 1 || p[r - 2] == r - 1; }

/* Operand `o` of the matmul, read through *perm (the matmul's transpose):
 * when o is a transpose that may fold into the root, composes its perm
 * into *perm, points *src at its input and returns its node; else -1. */
static int fold_operand(const fg_pass_ctx *ctx, const fg_epi_state *s, const tm_plan *t,
                        fg_output o, int *perm, fg_output *src) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[o.node];
  int q[FG_MAX_RANK], c[FG_MAX_RANK];
  if (n->op != FG_OP_TRANSPOSE || n->n_inputs != 1 || o.index != 0 || !node_perm(n, t->r, q) ||
      !fg_epi_absorbable(ctx, s, o.node, t->root) ||
      !fg_epi_readable_at_root(g, n->inputs[0], o.node, t->root))
    return -1;
  /* perm[i] picks dim perm[i] of transpose(x, q), which is x's q[perm[i]]. */
  for (int i = 0; i < t->r; i++)
    c[i] = q[perm[i]];
  if (!operand_ok(c, t->r)) return -1;
  memcpy(perm, c, (size_t)t->r * sizeof *perm);
  *src = n->inputs[0];
  return o.node;
}

/* 1 when matmul would run this product as one GEMM per batch in tiles,
 * the calls permuted_matmul makes (see the top): more than 8 rows known,
 * and a transposed or a batch dim of b known to be above 1 (else b may be
 * shared by every batch at run time, and matmul stack a's batches). */
static int same_gemms(const fg_graph *g, const tm_plan *t) {
  const fg_tinfo *a = fg_pass_type_of(g, g->nodes[t->mm].inputs[0]);
  const fg_tinfo *b = fg_pass_type_of(g, g->nodes[t->mm].inputs[1]);
  const int64_t rows = a->dims[t->r - (t->ta ? 1 : 2)];
  if (rows < 0 || rows <= MV_MAX_ROWS) return 0;
  int b_batched = 0;
  for (int i = 0; i < t->r - 2; i++)
    b_batched |= b->dims[i] > 1;
  return t->ta || b_batched;
}

/* The plan for the matmul `mm` under `root` (its transpose, or itself). */
static int plan(const fg_pass_ctx *ctx, const fg_epi_state *s, int mm, int root, tm_plan *t) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *m = &g->nodes[mm];
  if (m->op != FG_OP_MATMUL || m->n_inputs != 2) return 0;
  const fg_tinfo *a = fg_pass_type_of(g, m->inputs[0]), *b = fg_pass_type_of(g, m->inputs[1]);
  if (a->rank != b->rank || !fg_epi_is_float(m->outputs[0].dtype)) return 0;
  t->mm = mm, t->root = root, t->r = a->rank;
  t->ta = fg_attr_int_or(m, "transpose_a", 0) != 0;
  t->tb = fg_attr_int_or(m, "transpose_b", 0) != 0;
  if (!same_gemms(g, t)) return 0;
  t->a = m->inputs[0], t->b = m->inputs[1];
  identity(t->perm_a, t->r, t->ta);
  identity(t->perm_b, t->r, t->tb);
  identity(t->perm_out, t->r, 0);
  t->fold_a = fold_operand(ctx, s, t, m->inputs[0], t->perm_a, &t->a);
  t->fold_b = m->inputs[1].node == m->inputs[0].node
                  ? -1
                  : fold_operand(ctx, s, t, m->inputs[1], t->perm_b, &t->b);
  t->out = -1;
  if (root != mm) {
    if (!node_perm(&g->nodes[root], t->r, t->perm_out) || t->perm_out[t->r - 1] != t->r - 1)
      return 0;
    t->out = root;
  }
  return t->fold_a >= 0 || t->fold_b >= 0 || t->out >= 0;
}

/* The root rewritten in place into permuted_matmul; -1 out of memory. */
static int rewrite_root(fg_pass_ctx *ctx, const tm_plan *t) {
  int64_t pa[FG_MAX_RANK], pb[FG_MAX_RANK], po[FG_MAX_RANK];
  for (int i = 0; i < t->r; i++)
    pa[i] = t->perm_a[i], pb[i] = t->perm_b[i], po[i] = t->perm_out[i];
  const fg_output in[2] = {t->a, t->b};
  fg_pass_graph *w = ctx->w;
  if (fg_pass_graph_set_op(w, t->root, FG_OP_PERMUTED_MATMUL, in, 2) != 0 ||
      fg_pass_graph_own_attrs(w, t->root) != 0)
    return -1;
  fg_attrs *at = &w->g.nodes[t->root].attrs;
  return fg_attrs_set_ints(at, "perm_a", pa, t->r) != 0 ||
                 fg_attrs_set_ints(at, "perm_b", pb, t->r) != 0 ||
                 fg_attrs_set_ints(at, "perm_out", po, t->r) != 0
             ? -1
             : 0;
}

static int try_root(fg_pass_ctx *ctx, fg_epi_state *s, int root, fg_status *st) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *r = &g->nodes[root];
  if (!fg_epi_root_ok(ctx, s, root)) return 0;
  tm_plan t;
  int ok = 0;
  if (r->op == FG_OP_TRANSPOSE && r->n_inputs == 1 && r->inputs[0].index == 0 &&
      fg_epi_absorbable(ctx, s, r->inputs[0].node, root))
    ok = plan(ctx, s, r->inputs[0].node, root, &t);
  if (!ok && r->op == FG_OP_MATMUL) ok = plan(ctx, s, root, root, &t);
  if (!ok) return 0;
  const char *rule = t.out < 0                        ? "transpose+matmul"
                     : t.fold_a >= 0 || t.fold_b >= 0 ? "transpose+matmul+transpose"
                                                      : "matmul+transpose";
  if (rewrite_root(ctx, &t) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "transpose_matmul: out of memory");
    return -1;
  }
  int parts[3], n = 0;
  if (t.fold_a >= 0) parts[n++] = t.fold_a;
  if (t.fold_b >= 0) parts[n++] = t.fold_b;
  if (t.mm != root) parts[n++] = t.mm;
  return fg_epi_absorb(ctx, s, parts, n, root, rule, st);
}

int fg_pass_transpose_matmul(fg_pass_ctx *ctx, fg_status *st) {
  static const int ops[2] = {FG_OP_TRANSPOSE, FG_OP_MATMUL};
  return fg_epi_run_ops(ctx, "transpose_matmul", ops, 2, try_root, st);
}
