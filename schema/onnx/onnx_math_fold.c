/* Folding of element-wise ops whose inputs are all known at import.
 *
 * Exporters compute shapes with Shape, Gather, Add, Mul, Div, Equal,
 * Where, ... on int64 values; folding them keeps a Reshape's shape input
 * known, so it becomes a reshape with fixed dims. Integer (i32, i64) and
 * bool inputs are folded; floats are left to the graph (a constant
 * subgraph there is still computed once per run).
 *
 * The batch rule. An element of an int64 known value may stand for
 * data[i] * B, B the unknown batch size (sym[i] 1; see onnx_import.h).
 * Writing an element as (v, s) for v * B^s, with B >= 1:
 * - Add, Sub: (v, s) +- (w, s) = (v +- w, s); a zero operand leaves the
 *   other; B + 3 (s 1 with s 0, both nonzero) has no form.
 * - Mul: (v, s) * (w, t) = (v w, s + t) while s + t <= 1; B * B has none.
 * - Div (truncating): (v, 0) / (w, 0) as integers; (v, 1) / (w, 1) = v / w
 *   (B cancels); (v, 1) / (w, 0) = (v / w, 1) only when w divides v, since
 *   trunc(B v / w) is not B trunc(v / w) otherwise; 0 / anything is 0;
 *   a known zero divisor fails naming the node.
 * - Min, Max, Equal, Greater, Less: equal s compare v with w (B >= 1 keeps
 *   the order); different s are decided by the signs of v and w when they
 *   differ (B v has v's sign), and otherwise have no form.
 * - Mod (either sign rule): (v, 0) % (w, 0) as integers; (v, 1) % (w, 1)
 *   = (v % w, 1) (B factors out); (v, 1) % (w, 0) is 0 when w divides v
 *   and has no form otherwise; (0, 0) % anything is 0. A known zero
 *   divisor fails naming the node.
 * - Not, Where: elements are picked, each keeping its flag.
 * - ReduceSum, ReduceProd, ReduceMax, ReduceMin: the rules of Add, Mul,
 *   Max and Min applied along the reduced axes (ReduceProd of a Shape with
 *   one batch entry is (product, 1)).
 * When any element has no form the node is not folded: it becomes graph
 * ops, and fgx_input refuses the batch-dependent input, naming the node,
 * since the graph holds no value it could be computed from. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "schema/onnx/onnx_math.h"

/* Larger results are left to the graph: folding is for shape arithmetic. */
#define FOLD_MAX_ELEMENTS 65536

/* One element: v * B^s. */
typedef struct elem {
  int64_t v;
  int s;
} elem;

enum { OK = 0, NO_FORM = 1, DIV_ZERO = 2 };

static elem read_elem(const fgx_known *k, int64_t i) {
  const void *p = fg_tensor_data(k->t);
  elem e = {0, 0};
  switch (fg_tensor_dtype(k->t)) {
  case FG_I32: e.v = ((const int32_t *)p)[i]; break;
  case FG_I64:
    e.v = ((const int64_t *)p)[i];
    e.s = k->sym && k->sym[i] && e.v != 0;
    break;
  default: e.v = ((const uint8_t *)p)[i] != 0; break;
  }
  return e;
}

/* Two's complement wrap-around into dt, as flowgraph's kernels compute. */
static int64_t wrap(uint64_t u, fg_dtype dt) {
  return dt == FG_I32 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
}

static int sign_of(int64_t v) { return (v > 0) - (v < 0); }

/* The order of a and b (-1, 0, 1), or 2 when it depends on B. */
static int order(elem a, elem b) {
  if (a.s == b.s) return (a.v > b.v) - (a.v < b.v);
  if (sign_of(a.v) != sign_of(b.v)) return sign_of(a.v) > sign_of(b.v) ? 1 : -1;
  return 2;
}

static int fold_div(elem a, elem b, fg_dtype dt, elem *r) {
  if (b.v == 0) return DIV_ZERO;
  if (a.v == 0) return *r = (elem){0, 0}, OK;
  if (a.s == 1 && b.s == 0 && a.v % b.v != 0) return NO_FORM;
  if (a.s == 0 && b.s == 1) return NO_FORM;
  /* INT64_MIN / -1 wraps to INT64_MIN, as the kernels. */
  int64_t q = (a.v == INT64_MIN && b.v == -1) ? INT64_MIN : a.v / b.v;
  r->v = wrap((uint64_t)q, dt);
  r->s = a.s == 1 && b.s == 0;
  return OK;
}

/* a % b for b != 0 with the sign of b (floored) or of a (C's); v % -1 is
 * 0 (INT64_MIN % -1 traps in C). */
static int64_t rem64(int64_t a, int64_t b, int floored) {
  const int64_t r = b == -1 ? 0 : a % b;
  return floored && r != 0 && (r < 0) != (b < 0) ? r + b : r;
}

static int fold_mod(elem a, elem b, int floored, elem *r) {
  if (b.v == 0) return DIV_ZERO;
  if (a.v == 0) return *r = (elem){0, 0}, OK;
  if (a.s == 0 && b.s == 1) return NO_FORM;
  if (a.s == 1 && b.s == 0 && rem64(a.v, b.v, 0) != 0) return NO_FORM;
  r->v = a.s == 1 && b.s == 0 ? 0 : rem64(a.v, b.v, floored);
  r->s = a.s == 1 && b.s == 1 && r->v != 0;
  return OK;
}

static int fold_elem(onnx_fold_op op, elem a, elem b, elem cnd, fg_dtype dt, elem *r) {
  int o;
  r->s = 0;
  switch (op) {
  case ONNX_FOLD_ADD:
  case ONNX_FOLD_SUB: {
    const int sub = op == ONNX_FOLD_SUB;
    if (a.s != b.s && a.v != 0 && b.v != 0) return NO_FORM;
    r->v = wrap(sub ? (uint64_t)a.v - (uint64_t)b.v : (uint64_t)a.v + (uint64_t)b.v, dt);
    r->s = (a.s || b.s) && r->v != 0;
    return OK;
  }
  case ONNX_FOLD_MUL:
    if (a.s + b.s > 1) return NO_FORM;
    r->v = wrap((uint64_t)a.v * (uint64_t)b.v, dt);
    r->s = (a.s || b.s) && r->v != 0;
    return OK;
  case ONNX_FOLD_DIV: return fold_div(a, b, dt, r);
  case ONNX_FOLD_MOD:
  case ONNX_FOLD_FMOD: return fold_mod(a, b, op == ONNX_FOLD_MOD, r);
  case ONNX_FOLD_MIN:
  case ONNX_FOLD_MAX:
    if ((o = order(a, b)) == 2) return NO_FORM;
    *r = (op == ONNX_FOLD_MIN) == (o <= 0) ? a : b;
    return OK;
  case ONNX_FOLD_EQUAL:
  case ONNX_FOLD_GREATER:
  case ONNX_FOLD_LESS:
    if ((o = order(a, b)) == 2) return NO_FORM;
    r->v = op == ONNX_FOLD_EQUAL ? o == 0 : op == ONNX_FOLD_GREATER ? o > 0 : o < 0;
    return OK;
  case ONNX_FOLD_NOT: r->v = a.v == 0; return OK;
  case ONNX_FOLD_WHERE: *r = cnd.v ? a : b; return OK;
  }
  return NO_FORM;
}

/* Which dtypes each op folds; the result's dtype in *out. */
static int dtypes_fold(onnx_fold_op op, const fgx_known *const *k, int nin, fg_dtype *out) {
  const fg_dtype d0 = fg_tensor_dtype(k[0]->t);
  const fg_dtype dv = op == ONNX_FOLD_WHERE ? fg_tensor_dtype(k[1]->t) : d0;
  const int is_int = dv == FG_I32 || dv == FG_I64;
  for (int i = op == ONNX_FOLD_WHERE ? 1 : 0; i < nin; i++)
    if (fg_tensor_dtype(k[i]->t) != dv) return 0;
  switch (op) {
  case ONNX_FOLD_NOT: *out = FG_BOOL; return d0 == FG_BOOL;
  case ONNX_FOLD_WHERE: *out = dv; return d0 == FG_BOOL && (is_int || dv == FG_BOOL);
  case ONNX_FOLD_EQUAL: *out = FG_BOOL; return is_int || dv == FG_BOOL;
  case ONNX_FOLD_GREATER:
  case ONNX_FOLD_LESS: *out = FG_BOOL; return is_int;
  default: *out = dv; return is_int;
  }
}

/* The broadcast shape of the inputs (all known, so all dims known) and
 * each input's element strides along it (0 where broadcast). 0, or -1
 * when they do not broadcast or the result is too large to fold. */
static int fold_shape(const fgx_known *const *k, int nin, int *rank, int64_t *dims,
                      int64_t (*strides)[FG_MAX_RANK], int64_t *count) {
  int r = 0;
  for (int i = 0; i < nin; i++)
    if (fg_tensor_rank(k[i]->t) > r) r = fg_tensor_rank(k[i]->t);
  for (int d = 0; d < r; d++)
    dims[d] = 1;
  for (int i = 0; i < nin; i++) {
    const int ri = fg_tensor_rank(k[i]->t);
    for (int d = 0; d < ri; d++) {
      const int64_t x = fg_tensor_dim(k[i]->t, d), o = r - ri + d;
      if (x != 1 && dims[o] != 1 && x != dims[o]) return -1;
      if (x != 1) dims[o] = x;
    }
  }
  *count = 1;
  for (int d = 0; d < r; d++) {
    if (dims[d] > FOLD_MAX_ELEMENTS || *count * dims[d] > FOLD_MAX_ELEMENTS) return -1;
    *count *= dims[d];
  }
  for (int i = 0; i < nin; i++) {
    const int ri = fg_tensor_rank(k[i]->t);
    int64_t st = 1;
    for (int d = r - 1; d >= 0; d--) {
      const int di = d - (r - ri);
      const int64_t x = di >= 0 ? fg_tensor_dim(k[i]->t, di) : 1;
      strides[i][d] = x == 1 ? 0 : st;
      st *= x;
    }
  }
  *rank = r;
  return 0;
}

static void write_elem(fg_tensor *t, int64_t i, int64_t v) {
  void *p = fg_tensor_data(t);
  switch (fg_tensor_dtype(t)) {
  case FG_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case FG_I64: ((int64_t *)p)[i] = v; break;
  default: ((uint8_t *)p)[i] = v != 0; break;
  }
}

/* Computes every element into t and sym; OK, NO_FORM or DIV_ZERO (with
 * the output index in *bad). */
static int fold_all(onnx_fold_op op, const fgx_known *const *k, int nin, int rank,
                    const int64_t *dims, int64_t (*strides)[FG_MAX_RANK], int64_t count,
                    fg_tensor *t, uint8_t *sym, int64_t *bad) {
  const fg_dtype dt = fg_tensor_dtype(t);
  for (int64_t e = 0; e < count; e++) {
    int64_t off[3] = {0, 0, 0}, rem = e;
    for (int d = rank - 1; d >= 0; d--) {
      const int64_t coord = rem % dims[d];
      rem /= dims[d];
      for (int i = 0; i < nin; i++)
        off[i] += coord * strides[i][d];
    }
    elem in[3] = {{0, 0}, {0, 0}, {0, 0}}, r;
    for (int i = 0; i < nin; i++)
      in[i] = read_elem(k[i], off[i]);
    const int rc = op == ONNX_FOLD_WHERE ? fold_elem(op, in[1], in[2], in[0], dt, &r)
                                         : fold_elem(op, in[0], in[1], in[2], dt, &r);
    if (rc != OK) {
      *bad = e;
      return rc;
    }
    write_elem(t, e, r.v);
    sym[e] = (uint8_t)r.s;
  }
  return OK;
}

int onnx_math_fold(fgx_ctx *c, const fgx_node *n, onnx_fold_op op) {
  const int nin = op == ONNX_FOLD_NOT ? 1 : op == ONNX_FOLD_WHERE ? 3 : 2;
  const fgx_known *k[3] = {NULL, NULL, NULL};
  if (fgx_num_inputs(n) != nin) return 0;
  for (int i = 0; i < nin; i++)
    if (!(k[i] = fgx_input_known(c, n, i))) return 0;
  fg_dtype odt;
  int rank;
  int64_t dims[FG_MAX_RANK], strides[3][FG_MAX_RANK], count, bad = 0;
  if (!dtypes_fold(op, k, nin, &odt) || fold_shape(k, nin, &rank, dims, strides, &count) != 0)
    return 0;
  fg_tensor *t = fg_tensor_new(odt, rank, dims, NULL);
  uint8_t *sym = calloc((size_t)(count > 0 ? count : 1), 1);
  if (!t || !sym) {
    fg_tensor_free(t);
    free(sym);
    return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory folding a known value");
  }
  const int rc = fold_all(op, k, nin, rank, dims, strides, count, t, sym, &bad);
  int any = 0;
  for (int64_t e = 0; rc == OK && e < count; e++)
    any |= sym[e];
  if (rc != OK || !any) {
    free(sym);
    sym = NULL;
  }
  if (rc == NO_FORM) {
    fg_tensor_free(t);
    return 0;
  }
  if (rc == DIV_ZERO) {
    fg_tensor_free(t);
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "integer %s by zero at output element %lld (both inputs are known at import)",
                    op == ONNX_FOLD_DIV ? "division" : "remainder", (long long)bad);
  }
  return fgx_set_output_known(c, n, 0, t, sym) != 0 ? -1 : 1;
}

/* ---- reductions ------------------------------------------------------------ */

int onnx_math_fold_reduce(fgx_ctx *c, const fgx_node *n, onnx_fold_op op, const int64_t *axes,
                          int n_axes, int keepdims) {
  const fgx_known *k = fgx_input_known(c, n, 0);
  if (!k) return 0;
  const fg_dtype dt = fg_tensor_dtype(k->t);
  const int rank = fg_tensor_rank(k->t);
  const int64_t count = fg_tensor_num_elements(k->t);
  if ((dt != FG_I32 && dt != FG_I64) || count == 0 || count > FOLD_MAX_ELEMENTS) return 0;
  int red[FG_MAX_RANK] = {0}, orank = 0;
  int64_t odims[FG_MAX_RANK], ostride[FG_MAX_RANK], st = 1;
  for (int d = 0; d < rank; d++)
    red[d] = n_axes == 0;
  for (int i = 0; i < n_axes; i++)
    red[axes[i]] = 1;
  /* The output index of an input element: its kept coordinates, in C
   * order over the kept dims (a reduced dim contributes nothing). */
  for (int d = rank - 1; d >= 0; d--) {
    ostride[d] = red[d] ? 0 : st;
    st *= red[d] ? 1 : fg_tensor_dim(k->t, d);
  }
  for (int d = 0; d < rank; d++)
    if (!red[d] || keepdims) odims[orank++] = red[d] ? 1 : fg_tensor_dim(k->t, d);
  fg_tensor *t = fg_tensor_new(dt, orank, odims, NULL);
  elem *acc = calloc((size_t)st, sizeof *acc);
  uint8_t *sym = calloc((size_t)st, 1), *seen = calloc((size_t)st, 1);
  int rc = OK, any = 0;
  if (!t || !acc || !sym || !seen) {
    rc = -1;
  } else {
    for (int64_t e = 0; e < count && rc == OK; e++) {
      int64_t o = 0, rem = e;
      for (int d = rank - 1; d >= 0; d--) {
        o += (rem % fg_tensor_dim(k->t, d)) * ostride[d];
        rem /= fg_tensor_dim(k->t, d);
      }
      const elem x = read_elem(k, e);
      if (!seen[o]) {
        acc[o] = x;
        seen[o] = 1;
      } else {
        rc = fold_elem(op, acc[o], x, x, dt, &acc[o]);
      }
    }
    for (int64_t o = 0; o < st && rc == OK; o++) {
      write_elem(t, o, acc[o].v);
      sym[o] = (uint8_t)acc[o].s;
      any |= acc[o].s;
    }
  }
  free(acc);
  free(seen);
  if (rc != OK || !any) {
    free(sym);
    sym = NULL;
  }
  if (rc != OK) {
    fg_tensor_free(t);
    return rc < 0 ? fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory folding a known value")
                  : 0;
  }
  return fgx_set_output_known(c, n, 0, t, sym) != 0 ? -1 : 1;
}
