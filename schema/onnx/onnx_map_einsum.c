/* Einsum of one or two operands, as flowgraph ops.
 *
 * Exporters write attention as Einsum (MaxViT: "BGHID,BGHJD->BGHIJ" and
 * "BGHIJ,BGHJD->BGHID"). Each label of the equation is one of:
 * - batch: in both operands and the output;
 * - contracted: in both operands, not the output (summed by the product);
 * - free: in one operand and the output;
 * - summed: in one operand only (reduced out of it first).
 * An operand's summed labels are reduce_sum'd away; the two operands are
 * transposed to [batch, free, contracted] and [batch, contracted, free]
 * (or the matmul transposes one, when its layout is already the other
 * way), the free and contracted groups reshaped into one dim each, and a
 * batched matmul gives [batch, M, N], reshaped to the labels and
 * transposed into the output's order. Steps that would change nothing are
 * left out. One operand: reduce_sum and a transpose.
 *
 * Refused by name: an ellipsis, a label repeated within one operand (a
 * diagonal), more than two operands, non-float operands, an unknown
 * dimension anywhere but the first batch label. */
#include <stdio.h>
#include <string.h>

#include "schema/onnx/onnx_map_nn.h"

#define EIN_MAX 2

typedef struct ein_term {
  int n;
  char l[FG_MAX_RANK];
} ein_term;

typedef struct ein {
  int k; /* operands */
  ein_term in[EIN_MAX], out;
  int64_t dim[128]; /* by label; -2 unseen */
} ein;

static int is_label(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }

static int term_has(const ein_term *t, char ch) { return memchr(t->l, ch, (size_t)t->n) != NULL; }

/* One term of the equation, spaces dropped. */
static int parse_term(fgx_ctx *c, const fgx_node *n, const char *s, size_t len, ein_term *t) {
  t->n = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == ' ') continue;
    if (s[i] == '.')
      return fgx_fail(c, n, FG_UNIMPLEMENTED, "the equation's ellipsis ('...') is not supported");
    if (!is_label(s[i]))
      return fgx_fail(c, n, FG_INVALID_GRAPH, "equation character '%c' is not a letter", s[i]);
    if (term_has(t, s[i]))
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "label '%c' repeats within one term (a diagonal), which is not supported",
                      s[i]);
    if (t->n == FG_MAX_RANK)
      return fgx_fail(c, n, FG_UNIMPLEMENTED, "a term has more than %d labels", FG_MAX_RANK);
    t->l[t->n++] = s[i];
  }
  return 0;
}

/* Implicit output: the labels seen once in the inputs, in ASCII order.
 * Two terms of up to FG_MAX_RANK labels each can leave up to twice that
 * many: refused past FG_MAX_RANK, as an explicit output term is. */
static int implicit_out(fgx_ctx *c, const fgx_node *n, const char *eq, ein *e) {
  e->out.n = 0;
  for (int ch = 'A'; ch <= 'z'; ch++) {
    int seen = 0;
    for (int i = 0; i < e->k; i++)
      seen += term_has(&e->in[i], (char)ch);
    if (!is_label((char)ch) || seen != 1) continue;
    if (e->out.n == FG_MAX_RANK)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "equation '%s': its implicit output has more than %d labels", eq,
                      FG_MAX_RANK);
    e->out.l[e->out.n++] = (char)ch;
  }
  return 0;
}

static int parse(fgx_ctx *c, const fgx_node *n, const char *eq, ein *e) {
  const char *arrow = strstr(eq, "->");
  const size_t lhs = arrow ? (size_t)(arrow - eq) : strlen(eq);
  e->k = 0;
  for (size_t at = 0; at <= lhs;) {
    const char *comma = memchr(eq + at, ',', lhs - at);
    const size_t end = comma ? (size_t)(comma - eq) : lhs;
    if (e->k == EIN_MAX)
      return fgx_fail(c, n, FG_UNIMPLEMENTED, "Einsum of more than %d operands is not supported",
                      EIN_MAX);
    if (parse_term(c, n, eq + at, end - at, &e->in[e->k++]) != 0) return -1;
    at = end + 1;
  }
  if (!arrow) return implicit_out(c, n, eq, e);
  if (parse_term(c, n, arrow + 2, strlen(arrow + 2), &e->out) != 0) return -1;
  for (int j = 0; j < e->out.n; j++)
    if (!term_has(&e->in[0], e->out.l[j]) && !(e->k > 1 && term_has(&e->in[1], e->out.l[j])))
      return fgx_fail(c, n, FG_INVALID_GRAPH, "output label '%c' is in no input", e->out.l[j]);
  return 0;
}

/* Each operand's rank against its term, and one size per label. */
static int bind_dims(fgx_ctx *c, const fgx_node *n, ein *e) {
  for (int i = 0; i < 128; i++)
    e->dim[i] = -2;
  for (int i = 0; i < e->k; i++) {
    fg_dtype dt;
    int rank;
    int64_t d[FGX_MAX_DIMS];
    if (fgx_input_info(c, n, i, &dt, &rank, d) != 0) return -1;
    if (dt != FG_F32 && dt != FG_F64)
      return fgx_fail(c, n, FG_UNIMPLEMENTED, "input %d is %s; Einsum takes f32 and f64", i,
                      fg_dtype_name(dt));
    if (rank != e->in[i].n)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d has rank %d, its term %d labels", i, rank,
                      e->in[i].n);
    for (int j = 0; j < rank; j++) {
      int64_t *have = &e->dim[(int)e->in[i].l[j]];
      if (*have != -2 && *have != d[j])
        return fgx_fail(c, n, FG_INVALID_GRAPH, "label '%c' is %lld in input %d and %lld before",
                        e->in[i].l[j], (long long)d[j], i, (long long)*have);
      *have = d[j];
    }
  }
  return 0;
}

/* x with term t transposed to `want` (the same labels), or x when equal. */
static fg_output permute(fg_graph *g, fg_output x, const ein_term *t, const ein_term *want) {
  int64_t perm[FG_MAX_RANK];
  int moved = 0;
  for (int j = 0; j < want->n; j++) {
    perm[j] = (const char *)memchr(t->l, want->l[j], (size_t)t->n) - t->l;
    moved |= perm[j] != j;
  }
  return moved ? fg_transpose(g, x, want->n, perm) : x;
}

/* x reduced over its labels in no other term and not in the output. */
static fg_output sum_out(fg_graph *g, fg_output x, ein_term *t, const ein_term *other,
                         const ein_term *out) {
  int64_t axes[FG_MAX_RANK];
  int na = 0, kept = 0;
  for (int j = 0; j < t->n; j++)
    if ((other && term_has(other, t->l[j])) || term_has(out, t->l[j]))
      t->l[kept++] = t->l[j];
    else
      axes[na++] = j;
  t->n = kept;
  return na ? fg_reduce_sum(g, x, axes, na, 0) : x;
}

/* The terms in the order [batch, free, contracted] (a) or [batch,
 * contracted, free] (b); how many batch, free (of a, of b) and contracted
 * labels, and the free and contracted groups' sizes M, N and K. */
typedef struct ein_plan {
  ein_term a, b, y; /* operand layouts, and the product's labels */
  int nb, fa, fb, nk;
  int64_t m, nn, kk;
} ein_plan;

static void plan_of(const ein *e, const ein_term *ta, const ein_term *tb, ein_plan *p) {
  memset(p, 0, sizeof *p);
  p->m = p->nn = p->kk = 1;
  for (int j = 0; j < e->out.n; j++)
    if (term_has(ta, e->out.l[j]) && term_has(tb, e->out.l[j]))
      p->a.l[p->a.n++] = p->b.l[p->b.n++] = p->y.l[p->y.n++] = e->out.l[j];
  p->nb = p->a.n;
  for (int j = 0; j < e->out.n; j++)
    if (term_has(ta, e->out.l[j]) && !term_has(tb, e->out.l[j])) {
      p->a.l[p->a.n++] = p->y.l[p->y.n++] = e->out.l[j];
      p->m *= e->dim[(int)e->out.l[j]];
      p->fa++;
    }
  for (int j = 0; j < ta->n; j++)
    if (term_has(tb, ta->l[j]) && !term_has(&e->out, ta->l[j])) {
      p->a.l[p->a.n++] = p->b.l[p->b.n++] = ta->l[j];
      p->kk *= e->dim[(int)ta->l[j]];
      p->nk++;
    }
  for (int j = 0; j < e->out.n; j++)
    if (term_has(tb, e->out.l[j]) && !term_has(ta, e->out.l[j])) {
      p->b.l[p->b.n++] = p->y.l[p->y.n++] = e->out.l[j];
      p->nn *= e->dim[(int)e->out.l[j]];
      p->fb++;
    }
}

/* The batch dims then `tail` dims; an unknown first batch dim is
 * FG_DIM_UNKNOWN, -1, which fg_reshape infers. */
static int shape_of(const ein *e, const ein_plan *p, const int64_t *tail, int nt, int64_t *d) {
  for (int j = 0; j < p->nb; j++)
    d[j] = e->dim[(int)p->y.l[j]];
  for (int j = 0; j < nt; j++)
    d[p->nb + j] = tail[j];
  return p->nb + nt;
}

/* The operand with term t (already [batch, g1, g2] in `layout`) as
 * [batch, prod g1, prod g2]; unchanged when that is its shape. */
static fg_output group(fg_graph *g, const ein *e, const ein_plan *p, fg_output x,
                       const ein_term *layout, int64_t d1, int64_t d2) {
  int64_t d[FG_MAX_RANK + 2], tail[2] = {d1, d2};
  const int r = shape_of(e, p, tail, 2, d);
  int same = r == layout->n;
  for (int j = p->nb; same && j < r; j++)
    same = e->dim[(int)layout->l[j]] == d[j];
  return same ? x : fg_reshape(g, x, r, d);
}

/* Swaps the groups after the batch in `t` (free and contracted). */
static void swap_groups(ein_term *t, int nb, int first) {
  ein_term s = *t;
  int at = nb;
  for (int j = nb + first; j < t->n; j++)
    s.l[at++] = t->l[j];
  for (int j = nb; j < nb + first; j++)
    s.l[at++] = t->l[j];
  *t = s;
}

static int map_two(fgx_ctx *c, const fgx_node *n, ein *e, fg_output a, fg_output b) {
  fg_graph *g = fgx_graph(c);
  a = sum_out(g, a, &e->in[0], &e->in[1], &e->out);
  b = sum_out(g, b, &e->in[1], &e->in[0], &e->out);
  ein_plan p;
  plan_of(e, &e->in[0], &e->in[1], &p);
  /* Reshapes infer one unknown dim, the leading one. */
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < e->in[i].n; j++) {
      const char l = e->in[i].l[j];
      if (e->dim[(int)l] == FG_DIM_UNKNOWN && !(p.nb > 0 && l == p.y.l[0]))
        return fgx_fail(c, n, FG_UNIMPLEMENTED,
                        "label '%c' has the unknown batch size but is not the first batch label",
                        l);
    }
  /* A matmul transposes an operand whose layout is the other order. */
  ein_term at = p.a, bt = p.b;
  swap_groups(&at, p.nb, p.fa);
  swap_groups(&bt, p.nb, p.nk);
  const int ta =
      memcmp(e->in[0].l, p.a.l, (size_t)p.a.n) && !memcmp(e->in[0].l, at.l, (size_t)at.n);
  const int tb =
      memcmp(e->in[1].l, p.b.l, (size_t)p.b.n) && !memcmp(e->in[1].l, bt.l, (size_t)bt.n);
  a = permute(g, a, &e->in[0], ta ? &at : &p.a);
  b = permute(g, b, &e->in[1], tb ? &bt : &p.b);
  a = ta ? group(g, e, &p, a, &at, p.kk, p.m) : group(g, e, &p, a, &p.a, p.m, p.kk);
  b = tb ? group(g, e, &p, b, &bt, p.nn, p.kk) : group(g, e, &p, b, &p.b, p.kk, p.nn);
  fg_output y = fg_matmul(g, a, b, ta, tb);
  /* [batch, M, N] back to the labels, then the output's order. */
  int64_t d[FG_MAX_RANK + 2], tail[FG_MAX_RANK];
  int nt = 0;
  for (int j = p.nb; j < p.y.n; j++)
    tail[nt++] = e->dim[(int)p.y.l[j]];
  const int r = shape_of(e, &p, tail, nt, d);
  if (!(p.fa == 1 && p.fb == 1)) y = fg_reshape(g, y, r, d);
  return nnx_set(c, n, 0, permute(g, y, &p.y, &e->out));
}

static int map_one(fgx_ctx *c, const fgx_node *n, ein *e, fg_output a) {
  fg_graph *g = fgx_graph(c);
  a = sum_out(g, a, &e->in[0], NULL, &e->out);
  return nnx_set(c, n, 0, permute(g, a, &e->in[0], &e->out));
}

int nnx_map_einsum(fgx_ctx *c, const fgx_node *n) {
  const char *eq;
  int has = fgx_attr_string(c, n, "equation", "", &eq);
  if (has < 0) return -1;
  if (!has) return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'equation' is required");
  ein e;
  if (parse(c, n, eq, &e) != 0) return -1;
  if (e.k != fgx_num_inputs(n))
    return fgx_fail(c, n, FG_INVALID_GRAPH, "the equation '%s' has %d terms for %d inputs", eq, e.k,
                    fgx_num_inputs(n));
  if (bind_dims(c, n, &e) != 0) return -1;
  fg_output x[EIN_MAX];
  for (int i = 0; i < e.k; i++)
    if ((x[i] = fgx_input(c, n, i)).node < 0) return -1;
  return e.k == 1 ? map_one(c, n, &e, x[0]) : map_two(c, n, &e, x[0], x[1]);
}
