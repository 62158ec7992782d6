/* Shared pieces of shape inference: messages, attribute reads, broadcasting
 * and overflow-checked sizes. Attributes may come from an untrusted file, so
 * every read checks presence, type and range and says which was wrong. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph/infer_common.h"

const char *fgi_opname(const fg_node *n) {
  if (!n || n->op < 0 || n->op >= FG_OP_COUNT) return "?";
  return fg_op_table[n->op].name;
}

int fgi_fail(const fg_node *n, fg_status *st, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fg_status_set(st, FG_INVALID_GRAPH, "node '%s' (%s): %s", (n && n->name) ? n->name : "?",
                fgi_opname(n), msg);
  return -1;
}

const char *fgi_shape(const fg_tinfo *t, char *buf) {
  return fg_shape_str(t->rank, t->dims, buf, FGI_STR);
}

const char *fgi_ints(const int64_t *v, int n, char *buf) {
  size_t used = 0, size = FGI_STR;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, size, "[");
  for (int i = 0; i < n && v; i++) {
    /* Stop early so the closing "...]" always fits. */
    if (used + 32 >= size) {
      snprintf(buf + used, size - used, ",...");
      used += 4;
      break;
    }
    used += (size_t)snprintf(buf + used, size - used, "%s%lld", i ? "," : "", (long long)v[i]);
  }
  if (used < size) snprintf(buf + used, size - used, "]");
  return buf;
}

const char *fg_attr_type_name(fg_attr_type t) {
  switch (t) {
  case FG_ATTR_INT: return "int";
  case FG_ATTR_FLOAT: return "float";
  case FG_ATTR_STRING: return "string";
  case FG_ATTR_INTS: return "ints";
  case FG_ATTR_FLOATS: return "floats";
  case FG_ATTR_TENSOR: return "tensor";
  }
  return "unknown";
}

/* The attribute `name` if it has type `want`; NULL and *err = -1 when it is
 * present with another type or absent while required. */
static const fg_attr *find_typed(const fg_node *n, const char *name, fg_attr_type want,
                                 int required, int *err, fg_status *st) {
  const fg_attr *a = fg_attrs_find(&n->attrs, name);
  *err = 0;
  if (!a) {
    if (required)
      *err = fgi_fail(n, st, "missing attribute '%s' (%s)", name, fg_attr_type_name(want));
    return NULL;
  }
  if (a->type != want) {
    *err = fgi_fail(n, st, "attribute '%s' has type %s, expected %s", name,
                    fg_attr_type_name(a->type), fg_attr_type_name(want));
    return NULL;
  }
  return a;
}

int fgi_attr_int(const fg_node *n, const char *name, int required, int64_t dflt, int64_t *v,
                 fg_status *st) {
  int err;
  const fg_attr *a = find_typed(n, name, FG_ATTR_INT, required, &err, st);
  if (err) return -1;
  *v = a ? a->i : dflt;
  return 0;
}

int fgi_attr_flag(const fg_node *n, const char *name, int *v, fg_status *st) {
  int64_t x;
  if (fgi_attr_int(n, name, 0, 0, &x, st)) return -1;
  if (x != 0 && x != 1)
    return fgi_fail(n, st, "attribute '%s' = %lld must be 0 or 1", name, (long long)x);
  *v = (int)x;
  return 0;
}

int fgi_attr_float(const fg_node *n, const char *name, double dflt, double *v, fg_status *st) {
  const fg_attr *a = fg_attrs_find(&n->attrs, name);
  if (!a) {
    *v = dflt;
    return 0;
  }
  if (a->type == FG_ATTR_INT) {
    *v = (double)a->i;
    return 0;
  }
  if (a->type != FG_ATTR_FLOAT)
    return fgi_fail(n, st, "attribute '%s' has type %s, expected float", name,
                    fg_attr_type_name(a->type));
  if (!isfinite(a->f)) return fgi_fail(n, st, "attribute '%s' = %g is not finite", name, a->f);
  *v = a->f;
  return 0;
}

int fgi_attr_ints(const fg_node *n, const char *name, int required, const int64_t **v, int *count,
                  fg_status *st) {
  int err;
  const fg_attr *a = find_typed(n, name, FG_ATTR_INTS, required, &err, st);
  if (err) return -1;
  if (!a) {
    *v = NULL;
    *count = -1;
    return 0;
  }
  if (a->n < 0 || (a->n > 0 && !a->ints))
    return fgi_fail(n, st, "attribute '%s' is malformed (%d entries)", name, a->n);
  *v = a->ints;
  *count = a->n;
  return 0;
}

int fgi_attr_dtype(const fg_node *n, const char *name, fg_dtype *v, fg_status *st) {
  int64_t d;
  if (fgi_attr_int(n, name, 1, 0, &d, st)) return -1;
  if (!fgi_dtype_valid(d))
    return fgi_fail(n, st,
                    "attribute '%s' = %lld is not a valid dtype (f32=1, f64=2, i32=3, "
                    "i64=4, bool=5)",
                    name, (long long)d);
  *v = (fg_dtype)d;
  return 0;
}

const fg_tensor *fgi_attr_tensor(const fg_node *n, const char *name, fg_status *st) {
  int err;
  const fg_attr *a = find_typed(n, name, FG_ATTR_TENSOR, 1, &err, st);
  if (err) return NULL;
  if (!a->t) {
    fgi_fail(n, st, "attribute '%s' holds no tensor", name);
    return NULL;
  }
  return a->t;
}

int fgi_dtype_valid(int64_t d) { return d >= FG_F32 && d <= FG_BOOL; }

int fgi_is_numeric(fg_dtype d) { return d == FG_F32 || d == FG_F64 || d == FG_I32 || d == FG_I64; }

int fgi_is_index(fg_dtype d) { return d == FG_I32 || d == FG_I64; }

int fgi_same_dtype(const fg_node *n, const fg_tinfo *in, int i, int j, fg_status *st) {
  if (in[i].dtype == in[j].dtype) return 0;
  return fgi_fail(n, st, "input %d dtype %s does not match input %d dtype %s", j,
                  fg_dtype_name(in[j].dtype), i, fg_dtype_name(in[i].dtype));
}

int fgi_axis(const fg_node *n, const char *what, int64_t axis, const fg_tinfo *t, int *out,
             fg_status *st) {
  char s[FGI_STR];
  if (axis < -(int64_t)t->rank || axis >= t->rank)
    return fgi_fail(n, st, "%s %lld is out of range [-%d, %d) for input 0 shape %s", what,
                    (long long)axis, t->rank, t->rank, fgi_shape(t, s));
  *out = (int)(axis < 0 ? axis + t->rank : axis);
  return 0;
}

int fgi_broadcast_dim(int64_t a, int64_t b, int64_t *out) {
  /* An unknown dim against 1 stays unknown; against a known n != 1 the
   * run-time value must be 1 or n, so the result is n either way. */
  if (a < 0 && b < 0)
    *out = FG_DIM_UNKNOWN;
  else if (a < 0)
    *out = b == 1 ? FG_DIM_UNKNOWN : b;
  else if (b < 0)
    *out = a == 1 ? FG_DIM_UNKNOWN : a;
  else if (a == b || b == 1)
    *out = a;
  else if (a == 1)
    *out = b;
  else
    return -1;
  return 0;
}

int fgi_broadcast_dims(int ra, const int64_t *a, int rb, const int64_t *b, int64_t *out,
                       int *bad_dim, int64_t *va, int64_t *vb) {
  int r = ra > rb ? ra : rb;
  for (int k = 0; k < r; k++) {
    int ia = k - (r - ra), ib = k - (r - rb);
    int64_t x = ia >= 0 ? a[ia] : 1, y = ib >= 0 ? b[ib] : 1;
    if (fgi_broadcast_dim(x, y, &out[k])) {
      *bad_dim = k;
      *va = x;
      *vb = y;
      return -1;
    }
  }
  return 0;
}

int fgi_broadcast(const fg_node *n, const fg_tinfo *in, int i, int j, fg_tinfo *out,
                  fg_status *st) {
  int bad;
  int64_t va, vb, dims[FG_MAX_RANK];
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_broadcast_dims(in[i].rank, in[i].dims, in[j].rank, in[j].dims, dims, &bad, &va, &vb))
    return fgi_fail(n, st,
                    "input %d shape %s and input %d shape %s do not broadcast "
                    "(dim %d: %lld vs %lld)",
                    i, fgi_shape(&in[i], s1), j, fgi_shape(&in[j], s2), bad, (long long)va,
                    (long long)vb);
  out->rank = in[i].rank > in[j].rank ? in[i].rank : in[j].rank;
  memcpy(out->dims, dims, (size_t)out->rank * sizeof dims[0]);
  return 0;
}

int fgi_check_bytes(const fg_node *n, const fg_tinfo *t, fg_status *st) {
  fg_tinfo k = *t;
  size_t bytes;
  char s[FGI_STR];
  for (int i = 0; i < k.rank; i++)
    if (k.dims[i] < 0) k.dims[i] = 1;
  if (fg_tinfo_bytes(&k, &bytes) == 0) return 0;
  return fgi_fail(n, st, "shape %s %s overflows 64-bit byte size", fgi_shape(t, s),
                  fg_dtype_name(t->dtype));
}

int64_t fgi_mul_sat(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  if (a > INT64_MAX / b) return INT64_MAX;
  return a * b;
}

int64_t fgi_elements(const fg_tinfo *t) {
  int64_t e = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return -1;
    e = fgi_mul_sat(e, t->dims[i]);
  }
  return e;
}
