/* ScatterND, folded at import.
 *
 * flowgraph has no scatter op. Exporters emit ScatterND for slice
 * assignment (PyTorch's `mask[h0:h1, w0:w1] = k`), most often on values
 * computed from shapes alone: Swin's shifted-window attention mask is a
 * ConstantOfShape written region by region. With data, indices and
 * updates all known at import the result is known too, and is computed
 * here (as Range's is); anything else is refused naming the input that is
 * not known.
 *
 * The operator: indices [..., k] (int64) are k-tuples into data's leading
 * k dims (negative counts from the end); updates has the shape
 * indices.shape[:-1] + data.shape[k:], one slice per tuple; the output is
 * data with each tuple's slice replaced (reduction "none") or combined
 * with add or mul (opset 16), tuples in order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "schema/onnx/onnx_map_tensor_fold.h"

typedef enum { RED_NONE, RED_ADD, RED_MUL } red_kind;

/* Opset 16's reduction attribute (max and min came with 18, past the
 * opsets flowgraph reads). */
static int reduction_of(fgx_ctx *c, const fgx_node *n, red_kind *r) {
  const char *s;
  if (fgx_attr_string(c, n, "reduction", "none", &s) < 0) return -1;
  static const char *const names[] = {"none", "add", "mul"};
  for (int i = 0; i < 3; i++)
    if (!strcmp(s, names[i])) return *r = (red_kind)i, 0;
  return fgx_fail(c, n, FG_INVALID_GRAPH,
                  "attribute 'reduction' is '%s'; it must be none, add or mul", s);
}

/* Element `di` of out replaced by, or combined with, element `ui` of upd
 * (same dtype); integers wrap around as flowgraph's kernels do. */
static void combine(fg_tensor *out, int64_t di, const fg_tensor *upd, int64_t ui, red_kind r) {
  const fg_dtype dt = fg_tensor_dtype(out);
  const size_t es = fg_dtype_size(dt);
  char *o = (char *)fg_tensor_data(out) + (size_t)di * es;
  const char *u = (const char *)fg_tensor_data(upd) + (size_t)ui * es;
  if (r == RED_NONE) {
    memcpy(o, u, es);
    return;
  }
  const int add = r == RED_ADD;
  /* Unsigned integers: the wrap-around of two's complement. */
#define COMBINE(T)                                                                                 \
  do {                                                                                             \
    T a, b;                                                                                        \
    memcpy(&a, o, sizeof a), memcpy(&b, u, sizeof b);                                              \
    a = add ? (T)(a + b) : (T)(a * b);                                                             \
    memcpy(o, &a, sizeof a);                                                                       \
  } while (0)
  switch (dt) {
  case FG_F32: COMBINE(float); break;
  case FG_F64: COMBINE(double); break;
  case FG_I32: COMBINE(uint32_t); break;
  default: COMBINE(uint64_t); break; /* FG_I64 (bool is refused with a reduction) */
  }
#undef COMBINE
}

/* Shapes: indices [..., k] with k <= rank(data), updates
 * indices.shape[:-1] + data.shape[k:]. The tuples and the slice size. */
static int check_shapes(fgx_ctx *c, const fgx_node *n, const fg_tensor *d, const fg_tensor *ix,
                        const fg_tensor *u, int64_t *tuples, int64_t *slice) {
  const int r = fg_tensor_rank(d), q = fg_tensor_rank(ix);
  const int k = q >= 1 ? (int)fg_tensor_dim(ix, q - 1) : -1;
  char a[96], b[96], e[96], f[96];
  if (r < 1 || q < 1 || k < 1 || k > r)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "data %s and indices %s: indices' last dim (the tuple length) must be from "
                    "1 to data's rank",
                    fgt_dims_str(r, fg_tensor_dims(d), a, sizeof a),
                    fgt_dims_str(q, fg_tensor_dims(ix), b, sizeof b));
  int64_t want[FG_MAX_RANK * 2];
  int wr = 0;
  for (int i = 0; i < q - 1; i++)
    want[wr++] = fg_tensor_dim(ix, i);
  for (int i = k; i < r; i++)
    want[wr++] = fg_tensor_dim(d, i);
  int same = wr == fg_tensor_rank(u) && wr <= FG_MAX_RANK;
  for (int i = 0; same && i < wr; i++)
    same = fg_tensor_dim(u, i) == want[i];
  if (!same)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "updates %s must be indices' leading dims and data's trailing ones, %s "
                    "(data %s, indices %s)",
                    fgt_dims_str(fg_tensor_rank(u), fg_tensor_dims(u), a, sizeof a),
                    fgt_dims_str(wr, want, e, sizeof e),
                    fgt_dims_str(r, fg_tensor_dims(d), b, sizeof b),
                    fgt_dims_str(q, fg_tensor_dims(ix), f, sizeof f));
  *tuples = fgt_elems(q - 1, fg_tensor_dims(ix));
  *slice = fgt_elems(r - k, fg_tensor_dims(d) + k);
  return 0;
}

/* The flat offset of tuple t's slice; -1 after fgx_fail when an entry is
 * outside [-dim, dim). */
static int64_t tuple_offset(fgx_ctx *c, const fgx_node *n, const fg_tensor *d, const int64_t *ix,
                            int k, int64_t t, int64_t slice) {
  int64_t off = 0;
  for (int j = 0; j < k; j++) {
    const int64_t dim = fg_tensor_dim(d, j), v = ix[t * k + j];
    if (v < -dim || v >= dim)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "indices tuple %lld has %lld at position %d, outside [-%lld, %lld) for "
                      "data's dim %d",
                      (long long)t, (long long)v, j, (long long)dim, (long long)dim, j);
    off = off * dim + (v < 0 ? v + dim : v);
  }
  return off * slice;
}

int fgt_map_scatter_nd(fgx_ctx *c, const fgx_node *n) {
  static const char *const names[3] = {"data", "indices", "updates"};
  red_kind red = RED_NONE;
  if (fgx_num_inputs(n) != 3)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "ScatterND takes 3 inputs (data, indices, updates), "
                    "got %d",
                    fgx_num_inputs(n));
  if (reduction_of(c, n, &red) != 0) return -1;
  const fgx_known *k[3];
  for (int i = 0; i < 3; i++)
    if (!(k[i] = fgx_input_known(c, n, i)))
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "input %d '%s' (%s) must be known at import (a constant or shape "
                      "arithmetic on constants): flowgraph folds ScatterND but has no scatter op",
                      i, n->input[i], names[i]);
  const fg_tensor *d = k[0]->t, *ix = k[1]->t, *u = k[2]->t;
  const fg_dtype dt = fg_tensor_dtype(d);
  if (fg_tensor_dtype(ix) != FG_I64)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 1 (indices) is %s; it must be int64",
                    fg_dtype_name(fg_tensor_dtype(ix)));
  if (fg_tensor_dtype(u) != dt)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 2 (updates) is %s, input 0 (data) is %s",
                    fg_dtype_name(fg_tensor_dtype(u)), fg_dtype_name(dt));
  if (k[1]->sym)
    return fgx_fail(
        c, n, FG_UNIMPLEMENTED,
        "input 1 (indices) depends on the unknown batch size; ScatterND needs it known");
  if (red != RED_NONE && (dt == FG_BOOL || k[0]->sym || k[2]->sym))
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "a reduction on %s is not folded",
                    dt == FG_BOOL ? "bool values" : "values that depend on the unknown batch size");
  int64_t tuples, slice;
  if (check_shapes(c, n, d, ix, u, &tuples, &slice) != 0) return -1;
  const int64_t total = fg_tensor_num_elements(d);
  if (total > FGT_FOLD_MAX)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "data has %lld elements, over the %d that folding at import takes",
                    (long long)total, FGT_FOLD_MAX);
  fg_tensor *t = fg_tensor_clone(d, NULL);
  const int any_sym = k[0]->sym || k[2]->sym;
  uint8_t *sym = any_sym ? calloc((size_t)(total > 0 ? total : 1), 1) : NULL;
  if (!t || (any_sym && !sym)) {
    fg_tensor_free(t);
    free(sym);
    return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory folding ScatterND");
  }
  if (k[0]->sym) memcpy(sym, k[0]->sym, (size_t)total);
  const int kk = (int)fg_tensor_dim(ix, fg_tensor_rank(ix) - 1);
  const int64_t *iv = fg_tensor_data(ix);
  for (int64_t tu = 0; tu < tuples; tu++) {
    const int64_t off = tuple_offset(c, n, d, iv, kk, tu, slice);
    if (off < 0) {
      fg_tensor_free(t);
      free(sym);
      return -1;
    }
    for (int64_t e = 0; e < slice; e++) {
      combine(t, off + e, u, tu * slice + e, red);
      if (sym) sym[off + e] = k[2]->sym ? k[2]->sym[tu * slice + e] : 0;
    }
  }
  return fgx_set_output_known(c, n, 0, t, sym);
}
