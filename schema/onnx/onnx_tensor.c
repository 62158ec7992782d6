/* TensorProto -> fg_tensor: dtypes, dims, typed fields, raw_data and
 * external data files. Nothing the file claims is believed: dims are
 * checked for overflow and against the bytes that are really there before
 * anything is allocated, and external data may not leave the model's
 * folder. */
#define _GNU_SOURCE /* realpath, fseeko */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "schema/onnx/onnx_internal.h"

#define DT(x) ONNX__TENSOR_PROTO__DATA_TYPE__##x

fg_dtype fgx_dtype_from_onnx(int32_t t) {
  switch (t) {
  case DT(FLOAT): return FG_F32;
  case DT(DOUBLE): return FG_F64;
  case DT(INT32): return FG_I32;
  case DT(INT64): return FG_I64;
  case DT(BOOL): return FG_BOOL;
  default: return FG_DTYPE_INVALID;
  }
}

const char *fgx_onnx_dtype_name(int32_t t) {
  switch (t) {
  case DT(UNDEFINED): return "undefined (ONNX TensorProto.UNDEFINED)";
  case DT(FLOAT): return "float32 (ONNX TensorProto.FLOAT)";
  case DT(UINT8): return "uint8 (ONNX TensorProto.UINT8)";
  case DT(INT8): return "int8 (ONNX TensorProto.INT8)";
  case DT(UINT16): return "uint16 (ONNX TensorProto.UINT16)";
  case DT(INT16): return "int16 (ONNX TensorProto.INT16)";
  case DT(INT32): return "int32 (ONNX TensorProto.INT32)";
  case DT(INT64): return "int64 (ONNX TensorProto.INT64)";
  case DT(STRING): return "string (ONNX TensorProto.STRING)";
  case DT(BOOL): return "bool (ONNX TensorProto.BOOL)";
  case DT(FLOAT16): return "float16 (ONNX TensorProto.FLOAT16)";
  case DT(DOUBLE): return "float64 (ONNX TensorProto.DOUBLE)";
  case DT(UINT32): return "uint32 (ONNX TensorProto.UINT32)";
  case DT(UINT64): return "uint64 (ONNX TensorProto.UINT64)";
  case DT(COMPLEX64): return "complex64 (ONNX TensorProto.COMPLEX64)";
  case DT(COMPLEX128): return "complex128 (ONNX TensorProto.COMPLEX128)";
  case DT(BFLOAT16): return "bfloat16 (ONNX TensorProto.BFLOAT16)";
  default: return "an unknown ONNX element type";
  }
}

static int host_is_big_endian(void) {
  const uint16_t one = 1;
  return *(const uint8_t *)&one == 0;
}

/* raw_data and external data are little-endian whatever the host. */
static void to_host_order(void *data, size_t count, size_t elem) {
  if (elem == 1 || !host_is_big_endian()) return;
  uint8_t *p = data;
  for (size_t i = 0; i < count; i++, p += elem)
    for (size_t a = 0, b = elem - 1; a < b; a++, b--) {
      uint8_t t = p[a];
      p[a] = p[b];
      p[b] = t;
    }
}

/* ---- external data -------------------------------------------------------- */

static int parse_u64(const char *s, int64_t *out) {
  if (!s || !*s) return -1;
  int64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    int d = *s - '0';
    if (v > (INT64_MAX - d) / 10) return -1;
    v = v * 10 + d;
  }
  *out = v;
  return 0;
}

/* 1 when the relative path has a ".." component. */
static int has_dotdot(const char *p) {
  for (const char *s = p; *s;) {
    const char *e = strchr(s, '/');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    if (len == 2 && s[0] == '.' && s[1] == '.') return 1;
    if (!e) break;
    s = e + 1;
  }
  return 0;
}

typedef struct ext_ref {
  const char *location;
  int64_t offset, length; /* length -1: to the end */
} ext_ref;

static int ext_parse(fgx_ctx *c, const fgx_node *n, const Onnx__TensorProto *tp, const char *where,
                     ext_ref *r) {
  r->location = NULL;
  r->offset = 0;
  r->length = -1;
  for (size_t i = 0; i < tp->n_external_data; i++) {
    const char *k = tp->external_data[i]->key, *v = tp->external_data[i]->value;
    if (!k) continue;
    if (strcmp(k, "location") == 0) {
      r->location = v;
    } else if (strcmp(k, "offset") == 0 || strcmp(k, "length") == 0) {
      int64_t *dst = k[0] == 'o' ? &r->offset : &r->length;
      if (parse_u64(v, dst) != 0)
        return fgx_fail(c, n, FG_FORMAT_ERROR, "%s: external data %s '%.64s' is not a count", where,
                        k, v ? v : "");
    }
  }
  if (!r->location || !r->location[0])
    return fgx_fail(c, n, FG_INVALID_GRAPH, "%s: external data without a location", where);
  if (r->location[0] == '/' || strchr(r->location, '\\') || has_dotdot(r->location))
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "%s: external data location '%.300s' leaves the model's folder (absolute "
                    "paths and '..' are refused)",
                    where, r->location);
  if (!c->base_dir)
    return fgx_fail(c, n, FG_INVALID_ARGUMENT,
                    "%s: external data '%.300s' needs a folder to read from "
                    "(fg_onnx_options.base_dir)",
                    where, r->location);
  return 0;
}

/* Opens the file a checked location names, refusing symbolic links that
 * lead out of the base folder. NULL after fgx_fail. */
static FILE *ext_open(fgx_ctx *c, const fgx_node *n, const char *where, const char *location) {
  char *base = realpath(c->base_dir, NULL);
  if (!base) {
    fgx_fail(c, n, FG_NOT_FOUND, "%s: model folder '%.300s': %s", where, c->base_dir,
             strerror(errno));
    return NULL;
  }
  size_t len = strlen(base) + strlen(location) + 2;
  char *path = malloc(len);
  char *real = NULL;
  FILE *f = NULL;
  if (!path) {
    fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  snprintf(path, len, "%s/%s", base, location);
  real = realpath(path, NULL);
  if (!real) {
    fgx_fail(c, n, FG_NOT_FOUND, "%s: external data '%.300s': %s", where, location,
             strerror(errno));
    goto done;
  }
  size_t bl = strlen(base);
  int inside = strcmp(base, "/") == 0 || (strncmp(real, base, bl) == 0 && real[bl] == '/');
  if (!inside) {
    fgx_fail(c, n, FG_INVALID_GRAPH,
             "%s: external data '%.300s' leads out of the model's folder (to '%.300s')", where,
             location, real);
    goto done;
  }
  struct stat sb;
  if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    fgx_fail(c, n, FG_INVALID_GRAPH, "%s: external data '%.300s' is not a regular file", where,
             location);
    goto done;
  }
  f = fopen(real, "rb");
  if (!f)
    fgx_fail(c, n, FG_IO_ERROR, "%s: external data '%.300s': %s", where, location, strerror(errno));
done:
  free(base);
  free(path);
  free(real);
  return f;
}

/* Reads `bytes` bytes of external data into `dst`. */
static int ext_read(fgx_ctx *c, const fgx_node *n, const Onnx__TensorProto *tp, const char *where,
                    void *dst, size_t bytes) {
  ext_ref r;
  if (ext_parse(c, n, tp, where, &r) != 0) return -1;
  if (r.length >= 0 && (uint64_t)r.length != bytes)
    return fgx_fail(c, n, FG_FORMAT_ERROR,
                    "%s: external data length %lld disagrees with its dims (%zu bytes)", where,
                    (long long)r.length, bytes);
  FILE *f = ext_open(c, n, where, r.location);
  if (!f) return -1;
  int rc = -1;
  struct stat sb;
  if (fstat(fileno(f), &sb) != 0) {
    fgx_fail(c, n, FG_IO_ERROR, "%s: external data '%.300s': %s", where, r.location,
             strerror(errno));
  } else if (r.offset > sb.st_size || (uint64_t)(sb.st_size - r.offset) < bytes) {
    fgx_fail(c, n, FG_FORMAT_ERROR,
             "%s: external data '%.300s' has %lld bytes; offset %lld + %zu bytes runs past its "
             "end",
             where, r.location, (long long)sb.st_size, (long long)r.offset, bytes);
  } else if (fseeko(f, (off_t)r.offset, SEEK_SET) != 0 ||
             (bytes && fread(dst, 1, bytes, f) != bytes)) {
    fgx_fail(c, n, FG_IO_ERROR, "%s: reading external data '%.300s' failed", where, r.location);
  } else {
    rc = 0;
  }
  fclose(f);
  return rc;
}

/* ---- raw_data left in the model file -------------------------------------- */

static int cmp_self(const void *a, const void *b) {
  const uintptr_t x = (uintptr_t)((const fgx_self_raw *)a)->tp;
  const uintptr_t y = (uintptr_t)((const fgx_self_raw *)b)->tp;
  return x < y ? -1 : x > y;
}

/* raw_data bytes of tp that fg_onnx_load left in the model file into dst;
 * for any other tensor without its bytes, they went to the graph already
 * (onnx_values.c frees the message's copy on first use), and a second
 * conversion, which a mapper could ask for after the graph refused the
 * first node, has nothing to read. */
static int self_read(fgx_ctx *c, const fgx_node *n, const Onnx__TensorProto *tp, const char *where,
                     void *dst, size_t bytes) {
  const fgx_self_raw key = {tp, 0};
  const fgx_self_raw *s =
      c->n_self_raw ? bsearch(&key, c->self_raw, c->n_self_raw, sizeof key, cmp_self) : NULL;
  if (!s)
    return fgx_fail(c, n, FG_INTERNAL, "%s: its bytes were already given to the graph", where);
  if (fseeko(c->self, (off_t)s->offset, SEEK_SET) != 0 || fread(dst, 1, bytes, c->self) != bytes)
    return fgx_fail(c, n, FG_IO_ERROR,
                    "%s: reading its %zu bytes of raw_data at byte %llu of the model file failed "
                    "(did the file change while it loaded?)",
                    where, bytes, (unsigned long long)s->offset);
  return 0;
}

void fgx_self_raw_sort(fgx_ctx *c) {
  if (c->n_self_raw) qsort(c->self_raw, c->n_self_raw, sizeof *c->self_raw, cmp_self);
}

/* ---- typed fields --------------------------------------------------------- */

/* The typed field that holds this dtype's values, and its length. */
static size_t typed_count(const Onnx__TensorProto *tp, const char **field) {
  switch (tp->data_type) {
  case DT(FLOAT): *field = "float_data"; return tp->n_float_data;
  case DT(DOUBLE): *field = "double_data"; return tp->n_double_data;
  case DT(INT64): *field = "int64_data"; return tp->n_int64_data;
  default: *field = "int32_data"; return tp->n_int32_data; /* INT32, BOOL */
  }
}

/* 1 when a typed field other than the dtype's own holds values. */
static const char *stray_field(const Onnx__TensorProto *tp) {
  int t = tp->data_type;
  if (tp->n_float_data && t != DT(FLOAT)) return "float_data";
  if (tp->n_double_data && t != DT(DOUBLE)) return "double_data";
  if (tp->n_int64_data && t != DT(INT64)) return "int64_data";
  if (tp->n_int32_data && t != DT(INT32) && t != DT(BOOL)) return "int32_data";
  if (tp->n_uint64_data) return "uint64_data";
  if (tp->n_string_data) return "string_data";
  return NULL;
}

static void copy_typed(const Onnx__TensorProto *tp, void *dst, size_t count) {
  switch (tp->data_type) {
  case DT(FLOAT): memcpy(dst, tp->float_data, count * sizeof(float)); break;
  case DT(DOUBLE): memcpy(dst, tp->double_data, count * sizeof(double)); break;
  case DT(INT64): memcpy(dst, tp->int64_data, count * sizeof(int64_t)); break;
  case DT(INT32): memcpy(dst, tp->int32_data, count * sizeof(int32_t)); break;
  default: /* BOOL: one int32 per element */
    for (size_t i = 0; i < count; i++)
      ((uint8_t *)dst)[i] = tp->int32_data[i] != 0;
  }
}

/* Checks dtype and dims; the element count, or -1 after fgx_fail. */
static int64_t check_header(fgx_ctx *c, const fgx_node *n, const Onnx__TensorProto *tp,
                            const char *where, fg_dtype *dt) {
  if (!tp->has_data_type || tp->data_type == DT(UNDEFINED))
    return fgx_fail(c, n, FG_INVALID_GRAPH, "%s: data_type is missing", where);
  *dt = fgx_dtype_from_onnx(tp->data_type);
  if (*dt == FG_DTYPE_INVALID)
    return fgx_fail(c, n, FG_UNSUPPORTED,
                    "%s: data_type is %s, which flowgraph does not support (it has float32, "
                    "float64, int32, int64 and bool)",
                    where, fgx_onnx_dtype_name(tp->data_type));
  if (tp->n_dims > FG_MAX_RANK)
    return fgx_fail(c, n, FG_UNSUPPORTED, "%s: rank %zu is above flowgraph's maximum of %d", where,
                    tp->n_dims, FG_MAX_RANK);
  int64_t count = 1;
  for (size_t i = 0; i < tp->n_dims; i++) {
    int64_t d = tp->dims[i];
    if (d < 0)
      return fgx_fail(c, n, FG_FORMAT_ERROR, "%s: dims[%zu] is %lld", where, i, (long long)d);
    if (d && count > INT64_MAX / d)
      return fgx_fail(c, n, FG_FORMAT_ERROR,
                      "%s: dims multiply past 2^63 (dims[%zu] = %lld after a product of %lld)",
                      where, i, (long long)d, (long long)count);
    count *= d;
  }
  if ((uint64_t)count > SIZE_MAX / 8)
    return fgx_fail(c, n, FG_FORMAT_ERROR, "%s: %lld elements do not fit in memory", where,
                    (long long)count);
  return count;
}

int64_t fgx_tensor_check(fgx_ctx *c, const fgx_node *n, const Onnx__TensorProto *tp,
                         const char *where) {
  fg_dtype dt = FG_DTYPE_INVALID;
  int64_t count = check_header(c, n, tp, where, &dt);
  if (count < 0) return -1;
  size_t elem = fg_dtype_size(dt), bytes = (size_t)count * elem;
  int external =
      tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  const char *field = NULL, *stray = stray_field(tp);
  size_t typed = typed_count(tp, &field);
  if (stray) {
    fgx_fail(c, n, FG_FORMAT_ERROR, "%s: holds %s, which tensors of %s do not use", where, stray,
             fgx_onnx_dtype_name(tp->data_type));
    return -1;
  }
  if ((external || tp->has_raw_data) && typed) {
    fgx_fail(c, n, FG_FORMAT_ERROR, "%s: holds both %s and %s", where, field,
             external ? "external data" : "raw_data");
    return -1;
  }
  if (!external && tp->has_raw_data && tp->raw_data.len != bytes) {
    fgx_fail(c, n, FG_FORMAT_ERROR,
             "%s: raw_data has %zu bytes but its dims give %lld elements of %zu bytes (%zu)", where,
             tp->raw_data.len, (long long)count, elem, bytes);
    return -1;
  }
  if (!external && !tp->has_raw_data && typed != (size_t)count) {
    fgx_fail(c, n, FG_FORMAT_ERROR, "%s: %s has %zu values but its dims give %lld elements", where,
             field, typed, (long long)count);
    return -1;
  }
  if (external) {
    ext_ref r;
    if (ext_parse(c, n, tp, where, &r) != 0) return -1;
  }
  return count;
}

fg_tensor *fgx_tensor_from_proto(fgx_ctx *c, const fgx_node *n, const Onnx__TensorProto *tp,
                                 const char *where) {
  int64_t count = fgx_tensor_check(c, n, tp, where);
  if (count < 0) return NULL;
  fg_dtype dt = fgx_dtype_from_onnx(tp->data_type);
  size_t elem = fg_dtype_size(dt), bytes = (size_t)count * elem;
  int external =
      tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  int64_t dims[FG_MAX_RANK];
  for (size_t i = 0; i < tp->n_dims; i++)
    dims[i] = tp->dims[i];
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_tensor_new(dt, (int)tp->n_dims, dims, st);
  if (!t) {
    fgx_fail(c, n, fg_status_code(st) ? fg_status_code(st) : FG_RESOURCE_EXHAUSTED, "%s: %s", where,
             fg_status_message(st));
    fg_status_free(st);
    return NULL;
  }
  fg_status_free(st);
  void *data = fg_tensor_data(t);
  if (external) {
    if (ext_read(c, n, tp, where, data, bytes) != 0) {
      fg_tensor_free(t);
      return NULL;
    }
    to_host_order(data, (size_t)count, elem);
  } else if (tp->has_raw_data) {
    /* The bytes go to the graph on first use (onnx_values.c frees the
     * message's copy): a second conversion, which a mapper could ask for
     * after the graph refused the first node, has nothing to read. */
    if (bytes && !tp->raw_data.data ? self_read(c, n, tp, where, data, bytes) != 0 : 0) {
      fg_tensor_free(t);
      return NULL;
    }
    if (bytes && tp->raw_data.data) memcpy(data, tp->raw_data.data, bytes);
    to_host_order(data, (size_t)count, elem);
  } else if (count) {
    copy_typed(tp, data, (size_t)count);
  }
  if (dt == FG_BOOL) /* one byte per element; anything but 0 is true */
    for (int64_t i = 0; i < count; i++)
      ((uint8_t *)data)[i] = ((uint8_t *)data)[i] != 0;
  return t;
}
