/* Helpers of the shape and tensor op mappers; see onnx_map_tensor_fold.h. */
#include "onnx_map_tensor_fold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowgraph/tensor.h"

int fgt_info_of(fgx_ctx *c, const fgx_node *n, int i, fgt_info *f) {
  return fgx_input_info(c, n, i, &f->dtype, &f->rank, f->dims);
}

int64_t fgt_mul(int64_t a, int64_t b) {
  if (a < 0 || b < 0 || (b != 0 && a > INT64_MAX / b)) return -1;
  return a * b;
}

int64_t fgt_elems(int rank, const int64_t *dims) {
  int64_t e = 1;
  for (int d = 0; d < rank; d++) {
    if (dims[d] < 0) return -1;
    if (dims[d] != 0 && e > INT64_MAX / dims[d]) return -1;
    e *= dims[d];
  }
  return e;
}

/* Element i of an integer tensor as int64; 0 for other dtypes (callers
 * check the dtype first). */
static int64_t int_at(const fg_tensor *t, int64_t i) {
  const void *p = fg_tensor_data(t);
  switch (fg_tensor_dtype(t)) {
  case FG_I64: return ((const int64_t *)p)[i];
  case FG_I32: return ((const int32_t *)p)[i];
  default: return 0;
  }
}

int fgt_read_ivec(fgx_ctx *c, const fgx_node *n, int i, const char *what, fgt_ivec *out) {
  const fgx_known *k = fgx_input_known(c, n, i);
  memset(out, 0, sizeof *out);
  if (!fgx_has_input(n, i))
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d (%s) is missing", i, what);
  if (!k)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input %d (%s) is computed at run time; flowgraph needs it known at import "
                    "(an initializer, a Constant or shape arithmetic on known shapes)",
                    i, what);
  fg_dtype dt = fg_tensor_dtype(k->t);
  if (dt != FG_I64 && dt != FG_I32)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d (%s) has dtype %s; it must be int64", i, what,
                    fg_dtype_name(dt));
  int64_t e = fg_tensor_num_elements(k->t);
  if (fg_tensor_rank(k->t) > 1 || e > FGT_MAXV)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input %d (%s) has rank %d and %lld elements; it must be 1-D with at most %d",
                    i, what, fg_tensor_rank(k->t), (long long)e, FGT_MAXV);
  out->n = (int)e;
  for (int j = 0; j < out->n; j++) {
    out->v[j] = int_at(k->t, j);
    out->sym[j] = k->sym ? k->sym[j] : 0;
    out->any_sym |= out->sym[j];
  }
  return 0;
}

int fgt_read_scalar(fgx_ctx *c, const fgx_node *n, int i, const char *what, double *v) {
  const fgx_known *k = fgx_input_known(c, n, i);
  if (!k)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input %d (%s) is computed at run time; flowgraph needs it known at import", i,
                    what);
  if (fg_tensor_num_elements(k->t) != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d (%s) has %lld elements; it must have one", i,
                    what, (long long)fg_tensor_num_elements(k->t));
  if (k->sym && k->sym[0])
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input %d (%s) depends on the batch size; flowgraph needs it fixed", i, what);
  const void *p = fg_tensor_data(k->t);
  switch (fg_tensor_dtype(k->t)) {
  case FG_F32: *v = ((const float *)p)[0]; break;
  case FG_F64: *v = ((const double *)p)[0]; break;
  case FG_I32: *v = ((const int32_t *)p)[0]; break;
  case FG_I64: *v = (double)((const int64_t *)p)[0]; break;
  case FG_BOOL: *v = ((const uint8_t *)p)[0] != 0; break;
  default:
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "input %d (%s) has dtype %s", i, what,
                    fg_dtype_name(fg_tensor_dtype(k->t)));
  }
  return 0;
}

int fgt_bind(fgx_ctx *c, const fgx_node *n, int i, fg_output o) {
  if (o.node >= 0) return fgx_set_output(c, n, i, o);
  fg_status *st = fg_status_new();
  fg_code code = fg_graph_status(fgx_graph(c), st);
  int r = fgx_fail(c, n, code == FG_OK ? FG_INTERNAL : code, "%s",
                   st && code != FG_OK ? fg_status_message(st) : "a builder failed");
  fg_status_free(st);
  return r;
}

fg_output fgt_const_i64(fgx_ctx *c, int rank, const int64_t *dims, const int64_t *v) {
  int64_t e = fgt_elems(rank, dims);
  if (e < 0) return FG_NO_OUTPUT;
  fg_tensor *t = fg_tensor_from_data(FG_I64, rank, dims, v, (size_t)e * sizeof(int64_t), NULL);
  if (!t) return FG_NO_OUTPUT;
  fg_output o = fg_constant(fgx_graph(c), NULL, t);
  fg_tensor_free(t);
  return o;
}

const fgx_known *fgt_foldable(fgx_ctx *c, const fgx_node *n, int i, int64_t out_elems) {
  const fgx_known *k = fgx_input_known(c, n, i);
  if (!k) return NULL;
  if (k->sym) return k; /* no constant form: folding is the only way */
  if (out_elems < 0 || out_elems > FGT_FOLD_MAX) return NULL;
  return k;
}

void fgt_strides(const fg_tensor *t, int64_t *strides) {
  int r = fg_tensor_rank(t);
  const int64_t *d = fg_tensor_dims(t);
  int64_t s = 1;
  for (int i = r - 1; i >= 0; i--) {
    strides[i] = s;
    s *= d[i];
  }
}

/* A new tensor and flag array for a fold's output; -1 after fgx_fail. */
static int new_out(fgx_ctx *c, const fgx_node *n, const fgx_known *x, int64_t total, int rank,
                   const int64_t *dims, fg_tensor **t, uint8_t **sym) {
  fg_status *st = fg_status_new();
  *t = fg_tensor_new(fg_tensor_dtype(x->t), rank, dims, st);
  *sym = NULL;
  if (!*t) {
    int r = fgx_fail(c, n, st ? fg_status_code(st) : FG_RESOURCE_EXHAUSTED,
                     "folding a known value: %s", st ? fg_status_message(st) : "out of memory");
    fg_status_free(st);
    return r;
  }
  fg_status_free(st);
  if (x->sym) {
    *sym = calloc((size_t)(total > 0 ? total : 1), 1);
    if (!*sym) {
      fg_tensor_free(*t);
      return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory folding a known value");
    }
  }
  return 0;
}

int fgt_fold_reshape(fgx_ctx *c, const fgx_node *n, int oi, const fgx_known *x, int rank,
                     const int64_t *dims) {
  fg_tensor *t;
  uint8_t *sym;
  int64_t e = fg_tensor_num_elements(x->t);
  if (fgt_elems(rank, dims) != e)
    return fgx_fail(c, n, FG_INTERNAL, "fold of %lld elements into another count", (long long)e);
  if (new_out(c, n, x, e, rank, dims, &t, &sym)) return -1;
  if (e > 0) memcpy(fg_tensor_data(t), fg_tensor_data(x->t), fg_tensor_num_bytes(x->t));
  if (sym && e > 0) memcpy(sym, x->sym, (size_t)e);
  return fgx_set_output_known(c, n, oi, t, sym);
}

int fgt_fold_map(fgx_ctx *c, const fgx_node *n, int oi, const fgx_known *x, int rank,
                 const int64_t *dims, int64_t *const *off, int out_rank, const int64_t *out_dims) {
  fg_tensor *t;
  uint8_t *sym;
  int64_t total = fgt_elems(rank, dims);
  if (total < 0 || total != fgt_elems(out_rank, out_dims))
    return fgx_fail(c, n, FG_INTERNAL, "fold map and output shape disagree");
  if (new_out(c, n, x, total, out_rank, out_dims, &t, &sym)) return -1;
  size_t es = fg_dtype_size(fg_tensor_dtype(x->t));
  const char *src = fg_tensor_data(x->t);
  char *dst = fg_tensor_data(t);
  int64_t k[FG_MAX_RANK] = {0};
  for (int64_t j = 0; j < total; j++) {
    int64_t s = 0;
    for (int d = 0; d < rank; d++)
      s += off[d][k[d]];
    memcpy(dst + (size_t)j * es, src + (size_t)s * es, es);
    if (sym) sym[j] = x->sym[s];
    for (int d = rank - 1; d >= 0; d--) {
      if (++k[d] < dims[d]) break;
      k[d] = 0;
    }
  }
  return fgx_set_output_known(c, n, oi, t, sym);
}

int fgt_map_init(fgx_ctx *c, const fgx_node *n, fgt_map *m, int rank, const int64_t *dims) {
  int64_t sum = 0;
  memset(m, 0, sizeof *m);
  m->rank = rank;
  for (int d = 0; d < rank; d++) {
    m->dims[d] = dims[d];
    sum += dims[d];
  }
  /* Callers fold only outputs of at most FGT_FOLD_MAX elements with no
   * zero dim, so every dim, and the sum, is small. */
  m->buf = malloc((size_t)(sum > 0 ? sum : 1) * sizeof(int64_t));
  if (!m->buf) return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory folding a value");
  int64_t at = 0;
  for (int d = 0; d < rank; d++) {
    m->off[d] = m->buf + at;
    at += dims[d];
  }
  return 0;
}

void fgt_map_free(fgt_map *m) {
  free(m->buf);
  m->buf = NULL;
}

int fgt_fold_concat(fgx_ctx *c, const fgx_node *n, int oi, const fgx_known *const *xs, int k,
                    int axis) {
  const fg_tensor *x0 = xs[0]->t;
  int r = fg_tensor_rank(x0);
  int64_t dims[FG_MAX_RANK];
  int any_sym = 0;
  memcpy(dims, fg_tensor_dims(x0), (size_t)r * sizeof dims[0]);
  dims[axis] = 0;
  for (int i = 0; i < k; i++) {
    dims[axis] += fg_tensor_dim(xs[i]->t, axis);
    any_sym |= xs[i]->sym != NULL;
  }
  int64_t total = fgt_elems(r, dims), outer = 1, inner = 1;
  for (int d = 0; d < axis; d++)
    outer *= dims[d];
  for (int d = axis + 1; d < r; d++)
    inner *= dims[d];
  fgx_known probe = {xs[0]->t, any_sym ? (uint8_t *)"" : NULL};
  fg_tensor *t;
  uint8_t *sym;
  if (new_out(c, n, &probe, total, r, dims, &t, &sym)) return -1;
  size_t es = fg_dtype_size(fg_tensor_dtype(x0));
  char *dst = fg_tensor_data(t);
  int64_t j = 0;
  for (int64_t o = 0; o < outer; o++)
    for (int i = 0; i < k; i++) {
      int64_t len = fg_tensor_dim(xs[i]->t, axis) * inner;
      if (len == 0) continue;
      const char *src = (const char *)fg_tensor_data(xs[i]->t) + (size_t)(o * len) * es;
      memcpy(dst + (size_t)j * es, src, (size_t)len * es);
      if (sym && xs[i]->sym) memcpy(sym + j, xs[i]->sym + o * len, (size_t)len);
      j += len;
    }
  return fgx_set_output_known(c, n, oi, t, sym);
}

const char *fgt_ivec_str(const fgt_ivec *s, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = 0;
  for (int i = 0; i < s->n && at + 24 < cap; i++)
    at += (size_t)snprintf(buf + at, cap - at, "%s%lld%s", i ? ", " : "[", (long long)s->v[i],
                           s->sym[i] ? "*batch" : "");
  snprintf(buf + at, cap - at, "%s", s->n ? "]" : "[]");
  return buf;
}

const char *fgt_dims_str(int rank, const int64_t *dims, char *buf, size_t cap) {
  size_t at = 0;
  buf[0] = 0;
  for (int i = 0; i < rank && at + 24 < cap; i++) {
    if (dims[i] < 0)
      at += (size_t)snprintf(buf + at, cap - at, "%s?", i ? ", " : "[");
    else
      at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "[", (long long)dims[i]);
  }
  snprintf(buf + at, cap - at, "%s", rank ? "]" : "[]");
  return buf;
}

fg_output fgt_wrap_negative(fgx_ctx *c, fg_output idx, fg_dtype dt, int64_t dim) {
  fg_graph *g = fgx_graph(c);
  fg_output zero = fg_scalar(g, dt, 0), d = fg_scalar(g, dt, (double)dim);
  return fg_select(g, fg_less(g, idx, zero), fg_add(g, idx, d), idx);
}
