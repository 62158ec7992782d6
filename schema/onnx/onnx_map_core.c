/* Mappers of the core ONNX ops: Constant, Identity, Cast, Shape,
 * ConstantOfShape, Range and Dropout (inference). Most of them produce
 * values known at import, so the shape arithmetic exporters emit folds
 * away (onnx_import.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "schema/onnx/onnx_import.h"
#include "schema/onnx/onnx_internal.h"

/* Known values larger than this become fill nodes rather than tensors held
 * at import (ConstantOfShape of activations' size). */
#define KNOWN_MAX_ELEMENTS 65536
/* Range's output is built at import: refuse absurd lengths. */
#define RANGE_MAX_ELEMENTS (1 << 26)

static fg_tensor *new_tensor(fgx_ctx *c, const fgx_node *n, fg_dtype dt, int rank,
                             const int64_t *dims) {
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_tensor_new(dt, rank, dims, st);
  if (!t)
    fgx_fail(c, n, fg_status_code(st) ? fg_status_code(st) : FG_RESOURCE_EXHAUSTED, "%s",
             st ? fg_status_message(st) : "out of memory");
  fg_status_free(st);
  return t;
}

static double get_elem(const fg_tensor *t, int64_t i) {
  const void *d = fg_tensor_data(t);
  switch (fg_tensor_dtype(t)) {
  case FG_F32: return ((const float *)d)[i];
  case FG_F64: return ((const double *)d)[i];
  case FG_I32: return ((const int32_t *)d)[i];
  case FG_I64: return (double)((const int64_t *)d)[i];
  default: return ((const uint8_t *)d)[i];
  }
}

/* Element i of t converted to dtype dt into dst (ONNX Cast: float to int
 * truncates toward zero; anything to bool is != 0). */
static void convert_elem(const fg_tensor *t, int64_t i, fg_dtype dt, void *dst) {
  fg_dtype st = fg_tensor_dtype(t);
  if (st == FG_I64 && (dt == FG_I64 || dt == FG_I32 || dt == FG_BOOL)) {
    /* exact for large int64 values a double would round */
    int64_t v = ((const int64_t *)fg_tensor_data(t))[i];
    if (dt == FG_I64) ((int64_t *)dst)[i] = v;
    if (dt == FG_I32) ((int32_t *)dst)[i] = (int32_t)v;
    if (dt == FG_BOOL) ((uint8_t *)dst)[i] = v != 0;
    return;
  }
  double v = get_elem(t, i);
  switch (dt) {
  case FG_F32: ((float *)dst)[i] = (float)v; break;
  case FG_F64: ((double *)dst)[i] = v; break;
  case FG_I32: ((int32_t *)dst)[i] = isfinite(v) && fabs(v) < 2147483648.0 ? (int32_t)v : 0; break;
  case FG_I64: ((int64_t *)dst)[i] = isfinite(v) && fabs(v) < 9.2e18 ? (int64_t)v : 0; break;
  default: ((uint8_t *)dst)[i] = v != 0; break;
  }
}

static fg_tensor *convert(fgx_ctx *c, const fgx_node *n, const fg_tensor *t, fg_dtype dt) {
  fg_tensor *o = new_tensor(c, n, dt, fg_tensor_rank(t), fg_tensor_dims(t));
  if (!o) return NULL;
  int64_t count = fg_tensor_num_elements(t);
  for (int64_t i = 0; i < count; i++)
    convert_elem(t, i, dt, fg_tensor_data(o));
  return o;
}

static uint8_t *copy_sym(fgx_ctx *c, const fgx_node *n, const fgx_known *k) {
  if (!k->sym) return NULL;
  size_t count = (size_t)fg_tensor_num_elements(k->t);
  uint8_t *s = malloc(count ? count : 1);
  if (!s) {
    fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  memcpy(s, k->sym, count);
  return s;
}

/* Output i bound to a copy of a known value. */
static int set_known_copy(fgx_ctx *c, const fgx_node *n, int i, const fgx_known *k) {
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_tensor_clone(k->t, st);
  fg_status_free(st);
  if (!t) return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory");
  uint8_t *sym = copy_sym(c, n, k);
  if (k->sym && !sym) {
    fg_tensor_free(t);
    return -1;
  }
  return fgx_set_output_known(c, n, i, t, sym);
}

/* ---- Constant ------------------------------------------------------------- */

static int map_constant(fgx_ctx *c, const fgx_node *n) {
  static const char *refused[] = {"sparse_value", "value_string", "value_strings"};
  for (size_t k = 0; k < n->n_attribute; k++)
    for (size_t r = 0; r < sizeof refused / sizeof *refused; r++)
      if (n->attribute[k]->name && strcmp(n->attribute[k]->name, refused[r]) == 0)
        return fgx_fail(c, n, FG_UNSUPPORTED, "attribute '%s' is not supported by flowgraph",
                        refused[r]);
  if (n->n_attribute != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "a Constant needs exactly one value attribute; it has %zu attributes",
                    n->n_attribute);
  const char *name = n->attribute[0]->name ? n->attribute[0]->name : "";
  fg_tensor *t = NULL;
  int64_t one = 1;
  if (strcmp(name, "value") == 0) {
    if (fgx_attr_tensor(c, n, "value", &t) != 1) return -1;
  } else if (strcmp(name, "value_float") == 0 || strcmp(name, "value_int") == 0) {
    int is_f = name[6] == 'f';
    double f = 0;
    int64_t i = 0;
    if ((is_f ? fgx_attr_float(c, n, name, 0, &f) : fgx_attr_int(c, n, name, 0, &i)) != 1)
      return -1;
    t = new_tensor(c, n, is_f ? FG_F32 : FG_I64, 0, NULL);
    if (!t) return -1;
    if (is_f)
      *(float *)fg_tensor_data(t) = (float)f;
    else
      *(int64_t *)fg_tensor_data(t) = i;
  } else if (strcmp(name, "value_floats") == 0 || strcmp(name, "value_ints") == 0) {
    int is_f = name[6] == 'f';
    const float *fv = NULL;
    const int64_t *iv = NULL;
    int64_t len = 0;
    if ((is_f ? fgx_attr_floats(c, n, name, &fv, &len) : fgx_attr_ints(c, n, name, &iv, &len)) != 1)
      return -1;
    one = len;
    t = new_tensor(c, n, is_f ? FG_F32 : FG_I64, 1, &one);
    if (!t) return -1;
    if (len)
      memcpy(fg_tensor_data(t), is_f ? (const void *)fv : (const void *)iv,
             (size_t)len * (is_f ? sizeof(float) : sizeof(int64_t)));
  } else {
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute '%s' is not one of Constant's", name);
  }
  return fgx_set_output_known(c, n, 0, t, NULL);
}

/* ---- Identity and Cast ---------------------------------------------------- */

static int map_identity(fgx_ctx *c, const fgx_node *n) {
  const fgx_known *k = fgx_input_known(c, n, 0);
  if (k) return set_known_copy(c, n, 0, k);
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  return fgx_set_output(c, n, 0, fg_identity(fgx_graph(c), x));
}

static int map_cast(fgx_ctx *c, const fgx_node *n) {
  int64_t to;
  int r = fgx_attr_int(c, n, "to", 0, &to);
  if (r < 0) return -1;
  if (r == 0) return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'to' is required");
  fg_dtype dt = fgx_dtype_from_onnx((int32_t)to);
  if (dt == FG_DTYPE_INVALID || to != (int32_t)to)
    return fgx_fail(c, n, FG_UNSUPPORTED, "attribute 'to' is %s, which flowgraph does not support",
                    fgx_onnx_dtype_name((int32_t)to));
  const fgx_known *k = fgx_input_known(c, n, 0);
  if (k) {
    int keeps_sym = dt == FG_I64 || dt == FG_I32;
    if (k->sym && !keeps_sym) {
      for (int64_t i = 0; i < fg_tensor_num_elements(k->t); i++)
        if (k->sym[i])
          return fgx_fail(c, n, FG_UNIMPLEMENTED,
                          "input '%s' depends on the unknown batch size; casting it to %s is not "
                          "supported",
                          n->input[0], fg_dtype_name(dt));
    }
    fg_tensor *t = convert(c, n, k->t, dt);
    if (!t) return -1;
    uint8_t *sym = keeps_sym ? copy_sym(c, n, k) : NULL;
    if (keeps_sym && k->sym && !sym) {
      fg_tensor_free(t);
      return -1;
    }
    return fgx_set_output_known(c, n, 0, t, sym);
  }
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  if (fg_output_dtype(fgx_graph(c), x) == dt) return fgx_set_output(c, n, 0, x);
  return fgx_set_output(c, n, 0, fg_cast(fgx_graph(c), x, dt));
}

/* ---- Shape ---------------------------------------------------------------- */

static int map_shape(fgx_ctx *c, const fgx_node *n) {
  fg_dtype dt;
  int rank;
  int64_t dims[FGX_MAX_DIMS];
  if (fgx_input_info(c, n, 0, &dt, &rank, dims) != 0) return -1;
  int64_t start = 0, end = rank;
  if (fgx_opset(c) >= 15) {
    if (fgx_attr_int(c, n, "start", 0, &start) < 0 || fgx_attr_int(c, n, "end", rank, &end) < 0)
      return -1;
    /* Out-of-range values are clamped, as the operator's documentation says. */
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = start < 0 ? 0 : start > rank ? rank : start;
    end = end < 0 ? 0 : end > rank ? rank : end;
  }
  int64_t len = end > start ? end - start : 0;
  fg_tensor *t = new_tensor(c, n, FG_I64, 1, &len);
  if (!t) return -1;
  uint8_t *sym = NULL;
  int64_t *v = fg_tensor_data(t);
  for (int64_t i = 0; i < len; i++) {
    int64_t d = dims[start + i];
    if (d != FG_DIM_UNKNOWN) {
      v[i] = d;
      continue;
    }
    /* An unknown dimension is a multiple of the batch (the only size
     * flowgraph leaves unknown): k x batch, k 1 unless a Reshape merged
     * the batch with other dims. */
    if (!sym && !(sym = calloc((size_t)len, 1))) {
      fg_tensor_free(t);
      return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (fgx_input_batch_multiple(c, n, 0, (int)(start + i), &v[i]) != 0) {
      fg_tensor_free(t);
      free(sym);
      return -1;
    }
    sym[i] = 1;
  }
  return fgx_set_output_known(c, n, 0, t, sym);
}

/* ---- ConstantOfShape and Range -------------------------------------------- */

/* ConstantOfShape of a shape with one batch-dependent entry (exporters'
 * zero initial states of recurrent layers, [1, batch, hidden]): no tensor
 * can hold it at import, so it is a fill with 1 in the batch's place,
 * broadcast against ones of [batch] taken from the graph input that carries
 * the batch (c->batch_src). */
static int batch_fill(fgx_ctx *c, const fgx_node *n, const fgx_known *k, fg_dtype dt, double fill) {
  const int64_t rank = fg_tensor_num_elements(k->t), *v = fg_tensor_data(k->t);
  int at = -1;
  int64_t dims[FG_MAX_RANK], ones_dims[FG_MAX_RANK];
  if (rank > FG_MAX_RANK)
    return fgx_fail(c, n, FG_UNSUPPORTED, "shape of %lld dims is above flowgraph's %d",
                    (long long)rank, FG_MAX_RANK);
  for (int i = 0; i < rank; i++) {
    dims[i] = k->sym[i] ? 1 : v[i], ones_dims[i] = 1;
    if (!k->sym[i]) continue;
    if (at >= 0 || v[i] != 1)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "input 0 (shape) has dimension %d = %lld x the batch size; only one "
                      "dimension equal to the batch size is supported",
                      i, (long long)v[i]);
    at = i, ones_dims[i] = -1;
  }
  fg_graph *g = fgx_graph(c);
  fg_output src = c->batch_src;
  if (src.node < 0 || dt == FG_BOOL)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    src.node < 0 ? "input 0 (shape) depends on the batch size, which no graph "
                                   "input carries"
                                 : "a bool ConstantOfShape of a batch-dependent shape is not "
                                   "supported");
  int64_t src_dims[FG_MAX_RANK], begin[FG_MAX_RANK] = {0}, size[FG_MAX_RANK];
  int src_rank = fg_output_shape(g, src, src_dims);
  for (int i = 0; i < src_rank; i++)
    size[i] = i == 0 ? -1 : 1;
  fg_output col = fg_reshape(g, fg_slice(g, src, src_rank, begin, size), (int)rank, ones_dims);
  fg_output ones = fg_cast(g, fg_ones_like(g, col), dt);
  return fgx_set_output(c, n, 0, fg_mul(g, fg_fill(g, dt, (int)rank, dims, fill), ones));
}

static int map_constant_of_shape(fgx_ctx *c, const fgx_node *n) {
  const int64_t *shape;
  int64_t rank;
  const fgx_known *k = fgx_input_known(c, n, 0);
  int batch_dependent = 0;
  for (int64_t i = 0; k && k->sym && i < fg_tensor_num_elements(k->t); i++)
    batch_dependent |= k->sym[i];
  if (batch_dependent) {
    fg_tensor *value = NULL;
    if (fgx_attr_tensor(c, n, "value", &value) < 0) return -1;
    fg_dtype dt = value ? fg_tensor_dtype(value) : FG_F32;
    double fill = value && fg_tensor_num_elements(value) == 1 ? get_elem(value, 0) : 0;
    int64_t got = value ? fg_tensor_num_elements(value) : 1;
    fg_tensor_free(value);
    if (got != 1)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'value' has %lld elements, expected 1",
                      (long long)got);
    return batch_fill(c, n, k, dt, fill);
  }
  if (fgx_input_ints(c, n, 0, &shape, &rank) != 0) return -1;
  if (rank > FG_MAX_RANK)
    return fgx_fail(c, n, FG_UNSUPPORTED, "shape of %lld dims is above flowgraph's %d",
                    (long long)rank, FG_MAX_RANK);
  int64_t count = 1;
  for (int64_t i = 0; i < rank; i++) {
    if (shape[i] < 0)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "input 'input' has dimension %lld = %lld",
                      (long long)i, (long long)shape[i]);
    count = shape[i] && count > INT64_MAX / shape[i] ? INT64_MAX : count * shape[i];
  }
  fg_tensor *value = NULL;
  if (fgx_attr_tensor(c, n, "value", &value) < 0) return -1;
  fg_dtype dt = value ? fg_tensor_dtype(value) : FG_F32;
  double fill = 0;
  if (value) {
    if (fg_tensor_num_elements(value) != 1) {
      int64_t got = fg_tensor_num_elements(value);
      fg_tensor_free(value);
      return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'value' has %lld elements, expected 1",
                      (long long)got);
    }
    fill = get_elem(value, 0);
  }
  if (count > KNOWN_MAX_ELEMENTS) {
    fg_tensor_free(value);
    return fgx_set_output(c, n, 0, fg_fill(fgx_graph(c), dt, (int)rank, shape, fill));
  }
  fg_tensor *t = new_tensor(c, n, dt, (int)rank, shape);
  if (!t) {
    fg_tensor_free(value);
    return -1;
  }
  size_t elem = fg_dtype_size(dt);
  for (int64_t i = 0; i < count; i++) /* copy the bytes: exact for int64 */
    memcpy((char *)fg_tensor_data(t) + (size_t)i * elem,
           value ? fg_tensor_data(value) : (const void *)&(float){0}, elem);
  fg_tensor_free(value);
  return fgx_set_output_known(c, n, 0, t, NULL);
}

static int map_range(fgx_ctx *c, const fgx_node *n) {
  const fgx_known *k[3];
  static const char *names[3] = {"start", "limit", "delta"};
  for (int i = 0; i < 3; i++) {
    k[i] = fgx_input_known(c, n, i);
    if (!k[i])
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "input %d '%s' (%s) must be known at import (a constant or shape "
                      "arithmetic on constants)",
                      i, fgx_has_input(n, i) ? n->input[i] : "", names[i]);
    if (fg_tensor_num_elements(k[i]->t) != 1)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d (%s) must be a scalar", i, names[i]);
    if (k[i]->sym && k[i]->sym[0])
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "input %d (%s) depends on the unknown batch size; Range needs it known", i,
                      names[i]);
    if (fg_tensor_dtype(k[i]->t) != fg_tensor_dtype(k[0]->t))
      return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d (%s) is %s, input 0 (start) is %s", i,
                      names[i], fg_dtype_name(fg_tensor_dtype(k[i]->t)),
                      fg_dtype_name(fg_tensor_dtype(k[0]->t)));
  }
  fg_dtype dt = fg_tensor_dtype(k[0]->t);
  if (dt == FG_BOOL) return fgx_fail(c, n, FG_INVALID_GRAPH, "Range of bool is not defined");
  double start = get_elem(k[0]->t, 0), limit = get_elem(k[1]->t, 0), delta = get_elem(k[2]->t, 0);
  if (delta == 0 || !isfinite(start) || !isfinite(limit) || !isfinite(delta))
    return fgx_fail(c, n, FG_INVALID_GRAPH, "start %g, limit %g, delta %g give no range", start,
                    limit, delta);
  /* The operator's definition: max(ceil((limit - start) / delta), 0). */
  double len_d = ceil((limit - start) / delta);
  if (len_d > RANGE_MAX_ELEMENTS)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "a range of %.0f elements is above flowgraph's %d",
                    len_d, RANGE_MAX_ELEMENTS);
  int64_t len = len_d > 0 ? (int64_t)len_d : 0;
  fg_tensor *t = new_tensor(c, n, dt, 1, &len);
  if (!t) return -1;
  void *d = fg_tensor_data(t);
  for (int64_t i = 0; i < len; i++) {
    /* Exact in int64: every element lies between start and limit, so the
     * wrap-around of unsigned arithmetic never shows in the result. */
    if (dt == FG_I64) {
      uint64_t s0 = (uint64_t)((const int64_t *)fg_tensor_data(k[0]->t))[0];
      uint64_t d0 = (uint64_t)((const int64_t *)fg_tensor_data(k[2]->t))[0];
      ((int64_t *)d)[i] = (int64_t)(s0 + (uint64_t)i * d0);
    }
    if (dt == FG_I32) ((int32_t *)d)[i] = (int32_t)(start + (double)i * delta);
    if (dt == FG_F32) ((float *)d)[i] = (float)(start + (double)i * delta);
    if (dt == FG_F64) ((double *)d)[i] = start + (double)i * delta;
  }
  return fgx_set_output_known(c, n, 0, t, NULL);
}

/* ---- Dropout (inference) -------------------------------------------------- */

/* Dropout in an inference graph passes its input through. training_mode
 * (opset 12+) must be known and false: flowgraph imports models for
 * inference and fine-tuning without dropout. */
static int map_dropout(fgx_ctx *c, const fgx_node *n) {
  if (fgx_opset(c) >= 12) {
    if (fgx_has_input(n, 2)) {
      const fgx_known *tm = fgx_input_known(c, n, 2);
      if (!tm || fg_tensor_num_elements(tm->t) != 1)
        return fgx_fail(c, n, FG_UNIMPLEMENTED,
                        "input 2 'training_mode' must be a known scalar (inference only)");
      /* Training with a ratio of 0 drops nothing and scales by 1/(1 - 0):
       * the identity (torchvision's Swin exports its attention dropout so). */
      const fgx_known *rk = fgx_has_input(n, 1) ? fgx_input_known(c, n, 1) : NULL;
      const int no_drop = rk && fg_tensor_num_elements(rk->t) == 1 && get_elem(rk->t, 0) == 0;
      if (get_elem(tm->t, 0) != 0 && !no_drop)
        return fgx_fail(c, n, FG_UNIMPLEMENTED,
                        "training_mode is true with a ratio that is not a known 0; flowgraph "
                        "imports Dropout for inference only");
    }
    if (fgx_has_input(n, 1) && !fgx_input_known(c, n, 1) && c->failed) return -1;
  } else {
    double ratio;
    if (fgx_attr_float(c, n, "ratio", 0.5, &ratio) < 0) return -1;
  }
  const fgx_known *k = fgx_input_known(c, n, 0);
  fg_output x = FG_NO_OUTPUT;
  if (k) {
    if (set_known_copy(c, n, 0, k) != 0) return -1;
  } else {
    x = fgx_input(c, n, 0);
    if (x.node < 0 || fgx_set_output(c, n, 0, fg_identity(fgx_graph(c), x)) != 0) return -1;
  }
  if (!fgx_has_output(n, 1)) return 0;
  /* The mask keeps everything: ones, bool from opset 10 (x's type before). */
  fg_dtype mask_dt = fgx_opset(c) >= 10 ? FG_BOOL : FG_DTYPE_INVALID;
  if (k) {
    fg_dtype dt = mask_dt == FG_BOOL ? FG_BOOL : fg_tensor_dtype(k->t);
    fg_tensor *m = new_tensor(c, n, dt, fg_tensor_rank(k->t), fg_tensor_dims(k->t));
    if (!m) return -1;
    int64_t count = fg_tensor_num_elements(m);
    void *d = fg_tensor_data(m);
    for (int64_t i = 0; i < count; i++)
      switch (dt) {
      case FG_F32: ((float *)d)[i] = 1; break;
      case FG_F64: ((double *)d)[i] = 1; break;
      case FG_I32: ((int32_t *)d)[i] = 1; break;
      case FG_I64: ((int64_t *)d)[i] = 1; break;
      default: ((uint8_t *)d)[i] = 1; break;
      }
    return fgx_set_output_known(c, n, 1, m, NULL);
  }
  fg_output ones = fg_ones_like(fgx_graph(c), x);
  if (mask_dt == FG_BOOL) ones = fg_cast(fgx_graph(c), ones, FG_BOOL);
  return fgx_set_output(c, n, 1, ones);
}

const fgx_op fgx_ops_core[] = {
    {"Constant", map_constant},
    {"Identity", map_identity},
    {"Cast", map_cast},
    {"Shape", map_shape},
    {"ConstantOfShape", map_constant_of_shape},
    {"Range", map_range},
    {"Dropout", map_dropout},
    {NULL, NULL},
};
