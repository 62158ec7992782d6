/* The value table of an import (ONNX tensor name -> graph value or value
 * known at import) and the fgx_* functions mappers call on it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "schema/onnx/onnx_internal.h"

/* ---- memory and errors ---------------------------------------------------- */

void *fgx_alloc(fgx_ctx *c, size_t size) {
  if (c->n_owned == c->cap_owned) {
    int cap = c->cap_owned ? c->cap_owned * 2 : 64;
    void **p = realloc(c->owned, (size_t)cap * sizeof *p);
    if (!p) {
      fgx_fail_model(c, FG_RESOURCE_EXHAUSTED, "out of memory");
      return NULL;
    }
    c->owned = p;
    c->cap_owned = cap;
  }
  void *m = calloc(1, size ? size : 1);
  if (!m) {
    fgx_fail_model(c, FG_RESOURCE_EXHAUSTED, "out of memory (%zu bytes)", size);
    return NULL;
  }
  c->owned[c->n_owned++] = m;
  return m;
}

char *fgx_strdup(fgx_ctx *c, const char *s, size_t len) {
  char *m = fgx_alloc(c, len + 1);
  if (m && len) memcpy(m, s, len);
  return m;
}

static void vfail(fgx_ctx *c, fg_code code, const char *prefix, const char *fmt, va_list ap) {
  if (c->failed) return; /* the first error says what went wrong */
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  fg_status_set(c->st, code, "%s%s", prefix, msg);
  c->failed = 1;
}

int fgx_fail_model(fgx_ctx *c, fg_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(c, code, "ONNX model: ", fmt, ap);
  va_end(ap);
  return -1;
}

static int node_index_of(const fgx_ctx *c, const fgx_node *n) {
  if (c->node >= 0 && (size_t)c->node < c->graph->n_node && c->graph->node[c->node] == n)
    return c->node;
  for (size_t i = 0; i < c->graph->n_node; i++)
    if (c->graph->node[i] == n) return (int)i;
  return -1;
}

const char *fgx_node_label(fgx_ctx *c, const fgx_node *n) {
  if (n->name && n->name[0]) return n->name;
  char buf[32];
  snprintf(buf, sizeof buf, "#%d", node_index_of(c, n));
  char *s = fgx_strdup(c, buf, strlen(buf));
  return s ? s : "#?";
}

int fgx_fail(fgx_ctx *c, const fgx_node *n, fg_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (!n) {
    vfail(c, code, "ONNX model: ", fmt, ap);
  } else {
    char prefix[1024];
    const char *label = c->failed ? "?" : fgx_node_label(c, n);
    snprintf(prefix, sizeof prefix, "ONNX node '%.900s' (%.64s): ", label,
             n->op_type ? n->op_type : "");
    vfail(c, code, prefix, fmt, ap);
  }
  va_end(ap);
  return -1;
}

fg_graph *fgx_graph(fgx_ctx *c) { return c->g; }
int fgx_opset(const fgx_ctx *c) { return c->opset; }

/* ---- the name table ------------------------------------------------------- */

static size_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return (size_t)h;
}

int fgx_value_index(const fgx_ctx *c, const char *name) {
  if (!c->index_cap || !name) return -1;
  size_t mask = c->index_cap - 1;
  for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
    int v = c->index[i];
    if (v < 0) return -1;
    if (strcmp(c->vals[v].name, name) == 0) return v;
  }
}

static int index_grow(fgx_ctx *c) {
  size_t cap = c->index_cap ? c->index_cap * 2 : 256;
  int *idx = malloc(cap * sizeof *idx);
  if (!idx) return -1;
  for (size_t i = 0; i < cap; i++)
    idx[i] = -1;
  for (int v = 0; v < c->n_vals; v++) {
    size_t i = hash_name(c->vals[v].name) & (cap - 1);
    while (idx[i] >= 0)
      i = (i + 1) & (cap - 1);
    idx[i] = v;
  }
  free(c->index);
  c->index = idx;
  c->index_cap = cap;
  return 0;
}

int fgx_value_add(fgx_ctx *c, const char *name, int producer) {
  if (c->n_vals == c->cap_vals) {
    int cap = c->cap_vals ? c->cap_vals * 2 : 256;
    fgx_value *p = realloc(c->vals, (size_t)cap * sizeof *p);
    if (!p) return fgx_fail_model(c, FG_RESOURCE_EXHAUSTED, "out of memory");
    c->vals = p;
    c->cap_vals = cap;
  }
  /* Keep the table at most half full. */
  if ((size_t)(c->n_vals + 1) * 2 > c->index_cap && index_grow(c) != 0)
    return fgx_fail_model(c, FG_RESOURCE_EXHAUSTED, "out of memory");
  int v = c->n_vals++;
  fgx_value *x = &c->vals[v];
  memset(x, 0, sizeof *x);
  x->name = name;
  x->producer = producer;
  x->out = FG_NO_OUTPUT;
  size_t mask = c->index_cap - 1, i = hash_name(name) & mask;
  while (c->index[i] >= 0)
    i = (i + 1) & mask;
  c->index[i] = v;
  return v;
}

void fgx_values_free(fgx_ctx *c) {
  for (int v = 0; v < c->n_vals; v++) {
    fg_tensor_free(c->vals[v].known.t);
    free(c->vals[v].known.sym);
  }
  free(c->vals);
  free(c->index);
  free(c->fixed);
  free(c->suffix);
  for (int i = 0; i < c->n_owned; i++)
    free(c->owned[i]);
  free(c->owned);
}

int fgx_mark_fixed(fgx_ctx *c, int node) {
  if (node < 0) return 0;
  if (node >= c->fixed_cap) {
    int cap = c->fixed_cap ? c->fixed_cap : 256;
    while (cap <= node)
      cap *= 2;
    unsigned char *p = realloc(c->fixed, (size_t)cap);
    if (!p) return fgx_fail_model(c, FG_RESOURCE_EXHAUSTED, "out of memory");
    memset(p + c->fixed_cap, 0, (size_t)(cap - c->fixed_cap));
    c->fixed = p;
    c->fixed_cap = cap;
  }
  c->fixed[node] = 1;
  return 0;
}

int fgx_is_fixed(const fgx_ctx *c, int node) {
  return node >= 0 && node < c->fixed_cap && c->fixed[node];
}

/* The suffix counter of `base`, added at 2 when absent; NULL when out of
 * memory. */
static long *suffix_slot(fgx_ctx *c, const char *base) {
  if ((c->n_suffix + 1) * 2 > c->suffix_cap) {
    size_t cap = c->suffix_cap ? c->suffix_cap * 2 : 64;
    struct fgx_suffix *t = calloc(cap, sizeof *t);
    if (!t) return NULL;
    for (size_t i = 0; i < c->suffix_cap; i++) {
      if (!c->suffix[i].base) continue;
      size_t h = hash_name(c->suffix[i].base) & (cap - 1);
      while (t[h].base)
        h = (h + 1) & (cap - 1);
      t[h] = c->suffix[i];
    }
    free(c->suffix);
    c->suffix = t;
    c->suffix_cap = cap;
  }
  size_t mask = c->suffix_cap - 1, h = hash_name(base) & mask;
  while (c->suffix[h].base && strcmp(c->suffix[h].base, base) != 0)
    h = (h + 1) & mask;
  if (!c->suffix[h].base) {
    c->suffix[h].base = base;
    c->suffix[h].next = 2;
    c->n_suffix++;
  }
  return &c->suffix[h].next;
}

const char *fgx_unique_name(fgx_ctx *c, const char *want) {
  size_t len = strlen(want);
  if (len > 3000) len = 3000; /* flowgraph's names stop at 4096 bytes */
  char *base = fgx_strdup(c, len ? want : "_", len ? len : 1);
  if (!base) return NULL;
  for (char *p = base; *p; p++)
    if (*p == ':') *p = '_';
  if (fg_graph_find(c->g, base) < 0) return base;
  long *next = suffix_slot(c, base);
  char *buf = fgx_alloc(c, strlen(base) + 24);
  if (!buf || !next) {
    if (!next) fgx_fail_model(c, FG_RESOURCE_EXHAUSTED, "out of memory");
    return NULL;
  }
  for (;; (*next)++) {
    sprintf(buf, "%s_%ld", base, *next);
    if (fg_graph_find(c->g, buf) < 0) return buf;
  }
}

/* ---- inputs --------------------------------------------------------------- */

int fgx_num_inputs(const fgx_node *n) { return (int)n->n_input; }
int fgx_has_input(const fgx_node *n, int i) {
  return i >= 0 && (size_t)i < n->n_input && n->input[i] && n->input[i][0];
}
int fgx_num_outputs(const fgx_node *n) { return (int)n->n_output; }
int fgx_has_output(const fgx_node *n, int i) {
  return i >= 0 && (size_t)i < n->n_output && n->output[i] && n->output[i][0];
}

int fgx_value_ready(fgx_ctx *c, int v, const fgx_node *who) {
  fgx_value *x = &c->vals[v];
  if (x->init && !x->known.t && x->out.node < 0) {
    char where[256];
    snprintf(where, sizeof where, "initializer '%.200s'", x->name);
    x->known.t = fgx_tensor_from_proto(c, who, x->init, where);
    if (!x->known.t) return -1;
    /* The proto's copy of the bytes is not read again (known.t holds the
     * value from now on): freed at once, so a large model's weights are
     * not held twice while the rest of it imports. The importer owns the
     * unpacked model (load_bytes unpacks its own). */
    Onnx__TensorProto *tp = (Onnx__TensorProto *)x->init;
    if (tp->has_raw_data && tp->raw_data.data) {
      free(tp->raw_data.data);
      tp->raw_data.data = NULL;
    }
  }
  return 0;
}

/* The value of input i, converting an initializer on first use; -1 after
 * fgx_fail when absent. */
static int input_value(fgx_ctx *c, const fgx_node *n, int i) {
  if (!fgx_has_input(n, i))
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d is required but absent", i);
  int v = fgx_value_index(c, n->input[i]);
  if (v < 0) /* the structure check before mapping makes this unreachable */
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d '%s' names no tensor", i, n->input[i]);
  if (fgx_value_ready(c, v, n) != 0) return -1;
  fgx_value *x = &c->vals[v];
  if (!x->known.t && x->out.node < 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input %d '%s' has no value (its producer did not make that output)", i,
                    x->name);
  return v;
}

static int has_sym(const fgx_known *k) {
  if (!k->sym) return 0;
  int64_t n = fg_tensor_num_elements(k->t);
  for (int64_t i = 0; i < n; i++)
    if (k->sym[i]) return 1;
  return 0;
}

/* The graph took x's tensor (the constant's or variable's "value"):
 * known.t becomes a borrowed view of it, for the mappers that read values.
 * The graph's tensor is never replaced while the import runs; the view is
 * freed (not its data) with the values. */
static void share_graph_copy(fgx_value *x, const fg_graph *g) {
  const fg_tensor *in_graph = NULL;
  if (fg_node_attr_tensor(g, x->out.node, "value", &in_graph) != 0 || !in_graph) return;
  fg_status *st = fg_status_new();
  fg_tensor *view = st ? fg_tensor_wrap(fg_tensor_dtype(in_graph), fg_tensor_rank(in_graph),
                                        fg_tensor_dims(in_graph), fg_tensor_data(in_graph),
                                        fg_tensor_num_bytes(in_graph), st)
                       : NULL;
  fg_status_free(st);
  /* An empty tensor has no data to borrow; out of memory leaves the value
   * unknown to the mappers, which then refuse what needs it. */
  x->known.t = view ? view : fg_tensor_clone(in_graph, NULL);
}

fg_output fgx_materialize(fgx_ctx *c, int v, const fgx_node *who) {
  fgx_value *x = &c->vals[v];
  if (x->out.node >= 0) return x->out;
  if (fgx_value_ready(c, v, who) != 0) return FG_NO_OUTPUT;
  if (!x->known.t) {
    fgx_fail(c, who, FG_INVALID_GRAPH, "'%s' has no value", x->name);
    return FG_NO_OUTPUT;
  }
  if (has_sym(&x->known)) {
    fgx_fail(c, who, FG_UNIMPLEMENTED,
             "'%s' depends on the unknown batch size and has no constant form here (only shape "
             "arithmetic that ends in a Reshape shape is supported)",
             x->name);
    return FG_NO_OUTPUT;
  }
  const char *name = fgx_unique_name(c, x->name);
  if (!name) return FG_NO_OUTPUT;
  fg_dtype dt = fg_tensor_dtype(x->known.t);
  int var = c->trainable && x->initializer && (dt == FG_F32 || dt == FG_F64);
  /* The graph takes the importer's tensor rather than a copy: a large
   * model's weights are held once. */
  fg_output o = fg_source_take(c->g, name, x->known.t, var);
  x->known.t = NULL;
  if (o.node < 0) {
    fg_status *gs = fg_status_new();
    fg_graph_status(c->g, gs);
    fgx_fail(c, who, fg_status_code(gs) ? fg_status_code(gs) : FG_INTERNAL, "tensor '%s': %s",
             x->name, fg_status_message(gs));
    fg_status_free(gs);
    return FG_NO_OUTPUT;
  }
  if (fgx_mark_fixed(c, o.node) != 0) return FG_NO_OUTPUT;
  x->out = o;
  share_graph_copy(x, c->g);
  return o;
}

fg_output fgx_input(fgx_ctx *c, const fgx_node *n, int i) {
  int v = input_value(c, n, i);
  if (v < 0) return FG_NO_OUTPUT;
  return fgx_materialize(c, v, n);
}

const fgx_known *fgx_input_known(fgx_ctx *c, const fgx_node *n, int i) {
  if (!fgx_has_input(n, i)) return NULL;
  int v = fgx_value_index(c, n->input[i]);
  if (v < 0) return NULL;
  fgx_value *x = &c->vals[v];
  /* A trainable weight is not a constant: its value changes in training. */
  if (c->trainable && x->initializer && x->init) {
    int32_t t = x->init->data_type;
    if (t == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT || t == ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE)
      return NULL;
  }
  if (x->out.node >= 0 && !x->known.t) return NULL;
  if (!x->known.t) {
    if (!x->init) return NULL;
    if (input_value(c, n, i) < 0) return NULL;
  }
  return &x->known;
}

int fgx_input_ints(fgx_ctx *c, const fgx_node *n, int i, const int64_t **v, int64_t *len) {
  *v = NULL;
  *len = 0;
  if (!fgx_has_input(n, i))
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d is required but absent", i);
  const fgx_known *k = fgx_input_known(c, n, i);
  if (c->failed) return -1;
  if (!k)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input %d '%s' must be known at import (a constant or shape arithmetic on "
                    "constants); it is computed at run time",
                    i, n->input[i]);
  fg_dtype dt = fg_tensor_dtype(k->t);
  if (dt != FG_I64 && dt != FG_I32)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d '%s' is %s, expected int32 or int64", i,
                    n->input[i], fg_dtype_name(dt));
  if (has_sym(k))
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "input %d '%s' depends on the unknown batch size; this input must be known "
                    "at import",
                    i, n->input[i]);
  int64_t count = fg_tensor_num_elements(k->t);
  if (dt == FG_I64) {
    *v = fg_tensor_data(k->t);
  } else {
    int64_t *w = fgx_alloc(c, (size_t)count * sizeof *w);
    if (!w) return -1;
    const int32_t *s = fg_tensor_data(k->t);
    for (int64_t j = 0; j < count; j++)
      w[j] = s[j];
    *v = w;
  }
  *len = count;
  return 0;
}

int fgx_input_int(fgx_ctx *c, const fgx_node *n, int i, const char *what, int64_t *v) {
  const int64_t *vals;
  int64_t len;
  if (fgx_input_ints(c, n, i, &vals, &len) != 0) return -1;
  if (len != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d (%s) has %lld entries; it needs one", i, what,
                    (long long)len);
  *v = vals[0];
  return 0;
}

int fgx_input_info(fgx_ctx *c, const fgx_node *n, int i, fg_dtype *dtype, int *rank,
                   int64_t *dims) {
  int v = input_value(c, n, i);
  if (v < 0) return -1;
  fgx_value *x = &c->vals[v];
  if (x->out.node >= 0) {
    *dtype = fg_output_dtype(c->g, x->out);
    *rank = fg_output_shape(c->g, x->out, dims);
    if (*rank < 0) return fgx_fail(c, n, FG_INTERNAL, "input %d '%s' has no shape", i, x->name);
    return 0;
  }
  *dtype = fg_tensor_dtype(x->known.t);
  *rank = fg_tensor_rank(x->known.t);
  memcpy(dims, fg_tensor_dims(x->known.t), (size_t)*rank * sizeof *dims);
  return 0;
}

/* ---- attributes ----------------------------------------------------------- */

static const char *attr_type_name(int t) {
  switch (t) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: return "FLOAT";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: return "INT";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: return "STRING";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: return "TENSOR";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: return "GRAPH";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: return "FLOATS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: return "INTS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: return "STRINGS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS: return "TENSORS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS: return "GRAPHS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR: return "SPARSE_TENSOR";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS: return "SPARSE_TENSORS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO: return "TYPE_PROTO";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS: return "TYPE_PROTOS";
  default: return "UNDEFINED";
  }
}

/* An attribute's type: the declared one, or for files that leave it out
 * (IR version 1) the one field that is set. */
static int attr_type(const Onnx__AttributeProto *a) {
  if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED) return a->type;
  if (a->has_f) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  if (a->has_i) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  if (a->has_s) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
  if (a->t) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
  if (a->n_floats) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
  if (a->n_ints) return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED;
}

/* The attribute `name` when present with type `want`: 1 and *out; 0 when
 * absent; -1 after fgx_fail when of another type. */
static int find_attr(fgx_ctx *c, const fgx_node *n, const char *name, int want,
                     const Onnx__AttributeProto **out) {
  *out = NULL;
  for (size_t k = 0; k < n->n_attribute; k++) {
    const Onnx__AttributeProto *a = n->attribute[k];
    if (!a->name || strcmp(a->name, name) != 0) continue;
    int t = attr_type(a);
    if (t != want)
      return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute '%s' is %s, expected %s", name,
                      attr_type_name(t), attr_type_name(want));
    *out = a;
    return 1;
  }
  return 0;
}

int fgx_attr_int(fgx_ctx *c, const fgx_node *n, const char *name, int64_t def, int64_t *v) {
  const Onnx__AttributeProto *a;
  int r = find_attr(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, &a);
  *v = r == 1 ? a->i : def;
  return r;
}

int fgx_attr_float(fgx_ctx *c, const fgx_node *n, const char *name, double def, double *v) {
  const Onnx__AttributeProto *a;
  int r = find_attr(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, &a);
  *v = r == 1 ? (double)a->f : def;
  return r;
}

int fgx_attr_string(fgx_ctx *c, const fgx_node *n, const char *name, const char *def,
                    const char **v) {
  const Onnx__AttributeProto *a;
  int r = find_attr(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, &a);
  *v = def;
  if (r == 1) {
    char *s = fgx_strdup(c, (const char *)a->s.data, a->s.data ? a->s.len : 0);
    if (!s) return -1;
    *v = s;
  }
  return r;
}

int fgx_attr_ints(fgx_ctx *c, const fgx_node *n, const char *name, const int64_t **v,
                  int64_t *len) {
  const Onnx__AttributeProto *a;
  int r = find_attr(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, &a);
  *v = r == 1 ? a->ints : NULL;
  *len = r == 1 ? (int64_t)a->n_ints : 0;
  return r;
}

int fgx_attr_floats(fgx_ctx *c, const fgx_node *n, const char *name, const float **v,
                    int64_t *len) {
  const Onnx__AttributeProto *a;
  int r = find_attr(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS, &a);
  *v = r == 1 ? a->floats : NULL;
  *len = r == 1 ? (int64_t)a->n_floats : 0;
  return r;
}

int fgx_attr_tensor(fgx_ctx *c, const fgx_node *n, const char *name, fg_tensor **t) {
  const Onnx__AttributeProto *a;
  *t = NULL;
  int r = find_attr(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR, &a);
  if (r != 1) return r;
  if (!a->t) return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute '%s' holds no tensor", name);
  char where[128];
  snprintf(where, sizeof where, "attribute '%.64s'", name);
  *t = fgx_tensor_from_proto(c, n, a->t, where);
  return *t ? 1 : -1;
}

int fgx_axis(fgx_ctx *c, const fgx_node *n, const char *what, int64_t axis, int rank,
             int64_t *out) {
  if (axis < -(int64_t)rank || axis >= rank)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "%s %lld is outside [%d, %d) for rank %d", what,
                    (long long)axis, -rank, rank, rank);
  *out = axis < 0 ? axis + rank : axis;
  return 0;
}

/* ---- outputs -------------------------------------------------------------- */

/* The value output i names; -1 after fgx_fail when unnamed or bound. */
static int output_value(fgx_ctx *c, const fgx_node *n, int i) {
  if (!fgx_has_output(n, i))
    return fgx_fail(c, n, FG_INTERNAL, "the mapper set output %d, which the node does not have", i);
  int v = fgx_value_index(c, n->output[i]);
  if (v < 0)
    return fgx_fail(c, n, FG_INTERNAL, "output %d '%s' is not in the table", i, n->output[i]);
  fgx_value *x = &c->vals[v];
  if (x->out.node >= 0 || x->known.t)
    return fgx_fail(c, n, FG_INTERNAL, "the mapper set output %d '%s' twice", i, x->name);
  return v;
}

int fgx_set_output(fgx_ctx *c, const fgx_node *n, int i, fg_output o) {
  if (o.node < 0) {
    fg_status *gs = fg_status_new();
    fg_code code = fg_graph_status(c->g, gs);
    int r = fgx_fail(c, n, code ? code : FG_INTERNAL, "%s",
                     code ? fg_status_message(gs) : "output has no value");
    fg_status_free(gs);
    return r;
  }
  int v = output_value(c, n, i);
  if (v < 0) return -1;
  c->vals[v].out = o;
  return 0;
}

int fgx_set_output_known(fgx_ctx *c, const fgx_node *n, int i, fg_tensor *t, uint8_t *sym) {
  int v = t ? output_value(c, n, i) : -1;
  if (v < 0) {
    fg_tensor_free(t);
    free(sym);
    return t ? -1 : fgx_fail(c, n, FG_INTERNAL, "output %d: no tensor", i);
  }
  c->vals[v].known.t = t;
  c->vals[v].known.sym = sym;
  return 0;
}

int fgx_input_batch_multiple(fgx_ctx *c, const fgx_node *n, int i, int d, int64_t *k) {
  const int v = input_value(c, n, i);
  if (v < 0) return -1;
  const fg_output o = c->vals[v].out;
  int64_t at[2];
  for (int b = 0; b < 2; b++) {
    fg_batch_shapes *s = &c->at_batch[b];
    if (s->batch == 0) fg_batch_shapes_init(s, 2 << b);
    const fg_tinfo *t = o.node >= 0 ? fg_batch_shapes_get(s, c->g, o) : NULL;
    if (!t || d >= t->rank) {
      *k = 1; /* not inferable at these sizes: taken as the batch itself */
      return 0;
    }
    at[b] = t->dims[d];
  }
  if (at[0] < 2 || at[0] % 2 != 0 || at[1] != 2 * at[0])
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "dim %d of input %d ('%s') is %lld at batch 2 and %lld at batch 4: not a "
                    "multiple of the batch, which flowgraph cannot express",
                    d, i, n->input[i], (long long)at[0], (long long)at[1]);
  *k = at[0] / 2;
  return 0;
}
