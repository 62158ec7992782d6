/* fg_onnx_save: a flowgraph graph as an ONNX inference model.
 *
 * The export walks back from the fetches, so gradients, optimizer updates
 * and their state are never written unless a fetch needs them, and then
 * the export fails naming the node: an inference model has no use for
 * them and ONNX no op for them. Sources become the model's inputs
 * (placeholders) and initializers (constants, and variables frozen at the
 * value the graph holds); every other node goes through its op's writer
 * (onnx_export_ops.c). All protobuf-c messages are allocated from one arena
 * that is freed after packing, so no message is freed field by field. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowgraph/flowgraph.h"
#include "flowgraph/io.h"
#include "flowgraph/onnx.h"
#include "flowgraph/session.h"
#include "schema/file_write.h"
#include "schema/onnx/onnx_export.h"

#define FGO_DEFAULT_OPSET 17
#define FGO_MIN_OPSET     11
#define FGO_MAX_OPSET     17
#define FGO_IR_VERSION    8

typedef struct fgo_block {
  struct fgo_block *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
} fgo_block;

/* A growable array of pointers. */
typedef struct fgo_vec {
  void **items;
  size_t n, cap;
} fgo_vec;

struct fgo_ctx {
  const fg_graph *g;
  int opset;
  fg_status *st;
  int failed;
  fgo_block *arena;
  fgo_vec nodes, inits, inputs, outputs, owned; /* owned: fg_tensor* freed at the end */
  unsigned tmp_count;
  int last_id, node_count; /* names of the extra ONNX nodes of one flowgraph node */
};

/* ---- memory ------------------------------------------------------------- */

static void *arena_alloc(fgo_ctx *c, size_t size) {
  size = (size + 15) & ~(size_t)15;
  fgo_block *b = c->arena;
  if (!b || b->cap - b->used < size) {
    size_t cap = size > 65536 ? size : 65536;
    b = malloc(sizeof *b + cap);
    if (!b) {
      fgo_fail(c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory");
      return NULL;
    }
    b->next = c->arena, b->used = 0, b->cap = cap;
    c->arena = b;
  }
  void *p = b->data + b->used;
  b->used += size;
  memset(p, 0, size);
  return p;
}

static char *arena_strdup(fgo_ctx *c, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = arena_alloc(c, n);
  if (p) memcpy(p, s, n);
  return p;
}

static char *arena_printf(fgo_ctx *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static char *arena_printf(fgo_ctx *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return NULL;
  char *p = arena_alloc(c, (size_t)n + 1);
  if (!p) return NULL;
  va_start(ap, fmt);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return p;
}

static int vec_push(fgo_ctx *c, fgo_vec *v, void *item) {
  if (!item) return -1;
  if (v->n == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 16;
    void **items = realloc(v->items, cap * sizeof *items);
    if (!items) return fgo_fail(c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory");
    v->items = items, v->cap = cap;
  }
  v->items[v->n++] = item;
  return 0;
}

static void ctx_free(fgo_ctx *c) {
  while (c->arena) {
    fgo_block *next = c->arena->next;
    free(c->arena);
    c->arena = next;
  }
  for (size_t i = 0; i < c->owned.n; i++)
    fg_tensor_free(c->owned.items[i]);
  free(c->nodes.items), free(c->inits.items), free(c->inputs.items);
  free(c->outputs.items), free(c->owned.items);
}

/* ---- what the writers see --------------------------------------------------- */

const fg_graph *fgo_graph(const fgo_ctx *c) { return c->g; }
int fgo_opset(const fgo_ctx *c) { return c->opset; }

int fgo_fail(fgo_ctx *c, fg_code code, const char *fmt, ...) {
  if (c->failed) return -1; /* the first error is the one reported */
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fg_status_set(c->st, code, "%s", msg);
  c->failed = 1;
  return -1;
}

const char *fgo_out(fgo_ctx *c, int id, int index) {
  const char *name = fg_node_name(c->g, id);
  if (!name) return NULL;
  return index == 0 ? arena_strdup(c, name) : arena_printf(c, "%s:%d", name, index);
}

const char *fgo_in(fgo_ctx *c, int id, int i) {
  fg_output o = fg_node_input(c->g, id, i);
  return o.node < 0 ? NULL : fgo_out(c, o.node, o.index);
}

const char *fgo_tmp(fgo_ctx *c, int id, const char *what) {
  const char *base = fg_node_name(c->g, id);
  for (;;) {
    char *name = arena_printf(c, "%s/%s_%u", base ? base : "onnx", what, c->tmp_count++);
    if (!name || fg_graph_find(c->g, name) < 0) return name;
  }
}

const fg_tinfo *fgo_info(fgo_ctx *c, fg_output o) { return fg_graph_tinfo(c->g, o); }
const fg_tinfo *fgo_in_info(fgo_ctx *c, int id, int i) {
  return fgo_info(c, fg_node_input(c->g, id, i));
}

int fgo_onnx_dtype(fg_dtype dtype) {
  switch (dtype) {
  case FG_F32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  case FG_F64: return ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
  case FG_I32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
  case FG_I64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  case FG_BOOL: return ONNX__TENSOR_PROTO__DATA_TYPE__BOOL;
  default: return 0;
  }
}

static char **names_copy(fgo_ctx *c, const char *const *names, int n) {
  char **out = arena_alloc(c, (size_t)(n > 0 ? n : 1) * sizeof *out);
  if (!out) return NULL;
  for (int i = 0; i < n; i++)
    if (!names[i] || !(out[i] = arena_strdup(c, names[i]))) return NULL;
  return out;
}

Onnx__NodeProto *fgo_emit(fgo_ctx *c, int id, const char *op_type, const char *const *in, int n_in,
                          const char *const *out, int n_out) {
  if (c->failed) return NULL;
  Onnx__NodeProto *n = arena_alloc(c, sizeof *n);
  if (!n) return NULL;
  onnx__node_proto__init(n);
  const char *base = fg_node_name(c->g, id);
  if (c->last_id != id) c->last_id = id, c->node_count = 0;
  /* The first ONNX node keeps the flowgraph node's name; helpers are named
   * after it, so a reader can tell where each came from. */
  n->name = c->node_count++ == 0 ? arena_strdup(c, base)
                                 : arena_printf(c, "%s/%s_%d", base, op_type, c->node_count - 1);
  n->op_type = arena_strdup(c, op_type);
  n->input = names_copy(c, in, n_in);
  n->output = names_copy(c, out, n_out);
  if (!n->name || !n->op_type || !n->input || !n->output) {
    fgo_fail(c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory (names)");
    return NULL;
  }
  n->n_input = (size_t)n_in, n->n_output = (size_t)n_out;
  return vec_push(c, &c->nodes, n) == 0 ? n : NULL;
}

Onnx__NodeProto *fgo_emit1(fgo_ctx *c, int id, const char *op_type, const char *in,
                           const char *out) {
  return fgo_emit(c, id, op_type, &in, 1, &out, 1);
}

static Onnx__AttributeProto *attr_new(fgo_ctx *c, Onnx__NodeProto *n, const char *name,
                                      Onnx__AttributeProto__AttributeType type) {
  if (!n || c->failed) return NULL;
  Onnx__AttributeProto *a = arena_alloc(c, sizeof *a);
  if (!a) return NULL;
  onnx__attribute_proto__init(a);
  a->name = arena_strdup(c, name);
  a->has_type = 1, a->type = type;
  Onnx__AttributeProto **list = arena_alloc(c, (n->n_attribute + 1) * sizeof *list);
  if (!a->name || !list) return NULL;
  /* Few attributes per node: copying the list each time is cheap. */
  if (n->n_attribute) memcpy(list, n->attribute, n->n_attribute * sizeof *list);
  list[n->n_attribute++] = a;
  n->attribute = list;
  return a;
}

int fgo_attr_int(fgo_ctx *c, Onnx__NodeProto *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr_new(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (!a) return -1;
  a->has_i = 1, a->i = v;
  return 0;
}

int fgo_attr_float(fgo_ctx *c, Onnx__NodeProto *n, const char *name, double v) {
  Onnx__AttributeProto *a = attr_new(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  if (!a) return -1;
  a->has_f = 1, a->f = (float)v;
  return 0;
}

int fgo_attr_ints(fgo_ctx *c, Onnx__NodeProto *n, const char *name, const int64_t *v, int count) {
  Onnx__AttributeProto *a = attr_new(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  int64_t *copy = a ? arena_alloc(c, (size_t)(count > 0 ? count : 1) * sizeof *copy) : NULL;
  if (!copy) return -1;
  if (count > 0) memcpy(copy, v, (size_t)count * sizeof *copy);
  a->ints = copy, a->n_ints = (size_t)count;
  return 0;
}

int fgo_attr_string(fgo_ctx *c, Onnx__NodeProto *n, const char *name, const char *v) {
  Onnx__AttributeProto *a = attr_new(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
  char *copy = a ? arena_strdup(c, v) : NULL;
  if (!copy) return -1;
  a->has_s = 1, a->s.data = (uint8_t *)copy, a->s.len = strlen(copy);
  return 0;
}

/* ---- initializers ------------------------------------------------------- */

/* A TensorProto of `dtype` and shape holding `bytes` bytes at `data`
 * (little-endian raw_data, borrowed: it must outlive the packing). */
static Onnx__TensorProto *tensor_proto(fgo_ctx *c, const char *name, fg_dtype dtype, int rank,
                                       const int64_t *dims, const void *data, size_t bytes) {
  Onnx__TensorProto *t = arena_alloc(c, sizeof *t);
  int64_t *d = t ? arena_alloc(c, (size_t)(rank > 0 ? rank : 1) * sizeof *d) : NULL;
  if (!d) return NULL;
  onnx__tensor_proto__init(t);
  if (rank > 0) memcpy(d, dims, (size_t)rank * sizeof *d);
  t->dims = d, t->n_dims = (size_t)rank;
  t->has_data_type = 1, t->data_type = fgo_onnx_dtype(dtype);
  t->name = name ? arena_strdup(c, name) : NULL;
  t->has_raw_data = 1, t->raw_data.data = (uint8_t *)data, t->raw_data.len = bytes;
  return t;
}

/* A scalar's bytes of `dtype` in new arena memory. */
static void *scalar_bytes(fgo_ctx *c, fg_dtype dtype, double v) {
  void *p = arena_alloc(c, 8);
  if (!p) return NULL;
  switch (dtype) {
  case FG_F32: *(float *)p = (float)v; break;
  case FG_F64: *(double *)p = v; break;
  case FG_I32: *(int32_t *)p = (int32_t)v; break;
  case FG_I64: *(int64_t *)p = (int64_t)v; break;
  case FG_BOOL: *(uint8_t *)p = v != 0; break;
  default: return NULL;
  }
  return p;
}

int fgo_attr_scalar(fgo_ctx *c, Onnx__NodeProto *n, const char *name, fg_dtype dtype, double v) {
  Onnx__AttributeProto *a = attr_new(c, n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  void *bytes = a ? scalar_bytes(c, dtype, v) : NULL;
  int64_t one = 1;
  if (!bytes || !(a->t = tensor_proto(c, NULL, dtype, 1, &one, bytes, fg_dtype_size(dtype))))
    return -1;
  return 0;
}

static int add_init(fgo_ctx *c, Onnx__TensorProto *t) {
  if (!t) return fgo_fail(c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory (initializer)");
  return vec_push(c, &c->inits, t);
}

const char *fgo_const_i64(fgo_ctx *c, int id, const char *what, const int64_t *v, int count) {
  const char *name = fgo_tmp(c, id, what);
  int64_t *copy = name ? arena_alloc(c, (size_t)(count > 0 ? count : 1) * sizeof *copy) : NULL;
  if (!copy) return NULL;
  if (count > 0) memcpy(copy, v, (size_t)count * sizeof *copy);
  int64_t dim = count;
  Onnx__TensorProto *t =
      tensor_proto(c, name, FG_I64, 1, &dim, copy, (size_t)count * sizeof(int64_t));
  return add_init(c, t) == 0 ? name : NULL;
}

const char *fgo_const_scalar(fgo_ctx *c, int id, const char *what, fg_dtype dtype, double v) {
  const char *name = fgo_tmp(c, id, what);
  void *bytes = name ? scalar_bytes(c, dtype, v) : NULL;
  if (!bytes) return NULL;
  Onnx__TensorProto *t = tensor_proto(c, name, dtype, 0, NULL, bytes, fg_dtype_size(dtype));
  return add_init(c, t) == 0 ? name : NULL;
}

const char *fgo_const_vec(fgo_ctx *c, int id, const char *what, fg_dtype dtype, const double *v,
                          int n) {
  const char *name = fgo_tmp(c, id, what);
  size_t es = fg_dtype_size(dtype);
  unsigned char *bytes = name && es ? arena_alloc(c, (size_t)(n > 0 ? n : 1) * es) : NULL;
  if (!bytes) return NULL;
  for (int i = 0; i < n; i++) {
    void *one = scalar_bytes(c, dtype, v[i]);
    if (!one) return NULL;
    memcpy(bytes + (size_t)i * es, one, es);
  }
  int64_t dim = n;
  Onnx__TensorProto *t = tensor_proto(c, name, dtype, 1, &dim, bytes, (size_t)n * es);
  return add_init(c, t) == 0 ? name : NULL;
}

static int add_tensor_init(fgo_ctx *c, int id, const fg_tensor *v) {
  Onnx__TensorProto *t =
      tensor_proto(c, fg_node_name(c->g, id), fg_tensor_dtype(v), fg_tensor_rank(v),
                   fg_tensor_dims(v), fg_tensor_data(v), fg_tensor_num_bytes(v));
  return add_init(c, t);
}

/* ---- value infos ---------------------------------------------------------- */

/* dtype and shape; with `batch`, an unknown leading dim is the symbolic
 * "batch" (the inputs), otherwise unknown dims are left unnamed. */
static Onnx__ValueInfoProto *value_info(fgo_ctx *c, const char *name, const fg_tinfo *t,
                                        int batch) {
  Onnx__ValueInfoProto *v = arena_alloc(c, sizeof *v);
  Onnx__TypeProto *tp = v ? arena_alloc(c, sizeof *tp) : NULL;
  Onnx__TypeProto__Tensor *tt = tp ? arena_alloc(c, sizeof *tt) : NULL;
  Onnx__TensorShapeProto *sp = tt ? arena_alloc(c, sizeof *sp) : NULL;
  Onnx__TensorShapeProto__Dimension **dims =
      sp ? arena_alloc(c, (size_t)(t->rank > 0 ? t->rank : 1) * sizeof *dims) : NULL;
  if (!dims) return NULL;
  onnx__value_info_proto__init(v), onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt), onnx__tensor_shape_proto__init(sp);
  for (int d = 0; d < t->rank; d++) {
    Onnx__TensorShapeProto__Dimension *dim = arena_alloc(c, sizeof *dim);
    if (!dim) return NULL;
    onnx__tensor_shape_proto__dimension__init(dim);
    if (t->dims[d] >= 0) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dim->dim_value = t->dims[d];
    } else if (batch && d == 0) {
      dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      if (!(dim->dim_param = arena_strdup(c, "batch"))) return NULL;
    }
    dims[d] = dim;
  }
  sp->dim = dims, sp->n_dim = (size_t)t->rank;
  tt->has_elem_type = 1, tt->elem_type = fgo_onnx_dtype(t->dtype), tt->shape = sp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, tp->tensor_type = tt;
  v->name = arena_strdup(c, name), v->type = tp;
  return v->name ? v : NULL;
}

/* ---- the walk from the fetches ----------------------------------------------- */

static const fgo_op *writer_of(const char *op) {
  for (const fgo_op *w = fgo_ops; w->op; w++)
    if (strcmp(w->op, op) == 0) return w;
  return NULL;
}

/* Nodes that exist for training: an inference model has no place for
 * them (and ONNX no op), so a fetch that needs one is refused. */
static int training_only(const fg_graph *g, int id) {
  const fg_node *n = fg_graph_node(g, id);
  const char *op = fg_node_op(g, id);
  if (n->flags & FG_NODE_MADE_BY_GRADIENTS) return 1;
  static const char *const ops[] = {"assign",
                                    "group",
                                    "apply_sgd",
                                    "apply_momentum",
                                    "apply_adam",
                                    "multi_apply_sgd",
                                    "multi_apply_momentum",
                                    "multi_apply_adam",
                                    "all_reduce",
                                    "all_reduce_apply_sgd",
                                    "sufficient_factor_apply_sgd",
                                    "matmul_apply_sgd",
                                    "batch_norm_update_stats",
                                    "training_flag",
                                    "shard",
                                    NULL};
  for (int i = 0; ops[i]; i++)
    if (strcmp(op, ops[i]) == 0) return 1;
  size_t len = strlen(op);
  if (len > 5 && strcmp(op + len - 5, "_grad") == 0) return 1;
  return strcmp(op, "placeholder") == 0 && strcmp(fg_node_name(g, id), "labels") == 0;
}

/* Marks every node the fetches need: reach[id] = 1 + the first fetch that
 * needs it; used[id] has bit k set when output k is read (k < 32). */
static int walk(fgo_ctx *c, const fg_output *fetch, int n_fetch, int *reach, unsigned *used) {
  int n_nodes = fg_graph_num_nodes(c->g);
  int *stack = malloc((size_t)(n_nodes > 0 ? n_nodes : 1) * sizeof *stack);
  if (!stack) return fgo_fail(c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory");
  for (int f = 0; f < n_fetch; f++) {
    int top = 0;
    used[fetch[f].node] |= fetch[f].index < 32 ? 1u << fetch[f].index : 0;
    if (reach[fetch[f].node]) continue;
    reach[fetch[f].node] = f + 1;
    stack[top++] = fetch[f].node;
    while (top > 0) {
      int id = stack[--top];
      const fgo_op *w = writer_of(fg_node_op(c->g, id));
      unsigned follow = w && w->follow ? w->follow : ~0u;
      for (int i = 0; i < fg_node_num_inputs(c->g, id); i++) {
        fg_output in = fg_node_input(c->g, id, i);
        if (i < 32 && !(follow & (1u << i))) continue;
        if (in.node < 0) continue;
        used[in.node] |= in.index < 32 ? 1u << in.index : 0;
        if (reach[in.node]) continue;
        reach[in.node] = f + 1;
        stack[top++] = in.node;
      }
    }
  }
  free(stack);
  return 0;
}

/* Appends to a message being built in buf (cut short with "..." when full). */
static void msg_add(char *buf, size_t size, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void msg_add(char *buf, size_t size, const char *fmt, ...) {
  size_t len = strlen(buf);
  if (len + 4 >= size) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + len, size - len, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= size - len) strcpy(buf + size - 4, "...");
}

/* Names the training-only nodes a fetch needs: the updates, assigns and
 * inputs first (they say what the fetch is), then the gradient nodes, at
 * most 8 in all. */
static void list_training(fgo_ctx *c, const int *reach, int f, const char *fetch, char *buf,
                          size_t size) {
  int n = 0, shown = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int id = 0; id < fg_graph_num_nodes(c->g); id++) {
      if (reach[id] != f + 1 || !training_only(c->g, id)) continue;
      int grad = (fg_graph_node(c->g, id)->flags & FG_NODE_MADE_BY_GRADIENTS) != 0;
      if (grad != pass) continue;
      n++;
      if (shown < 8)
        msg_add(buf, size, "%s'%s' (%s)", shown++ ? ", " : "", fg_node_name(c->g, id),
                fg_node_op(c->g, id));
    }
  char head[600];
  snprintf(head, sizeof head, "fetch '%s' needs %d training-only node%s: ", fetch, n,
           n == 1 ? "" : "s");
  size_t hl = strlen(head), bl = strlen(buf);
  if (hl + bl + 1 < size) {
    memmove(buf + hl, buf, bl + 1);
    memcpy(buf, head, hl);
  }
  if (n > shown) msg_add(buf, size, " and %d more", n - shown);
}

/* Refuses training-only nodes (per fetch) and ops without a writer (every
 * one named in one message). */
static int check_reached(fgo_ctx *c, const int *reach, const char *const *fetch_names) {
  char unimpl[1536] = "";
  int n_unimpl = 0;
  for (int id = 0; id < fg_graph_num_nodes(c->g); id++) {
    if (!reach[id]) continue;
    const char *op = fg_node_op(c->g, id);
    if (training_only(c->g, id)) {
      char msg[1200] = "";
      list_training(c, reach, reach[id] - 1, fetch_names[reach[id] - 1], msg, sizeof msg);
      return fgo_fail(c, FG_INVALID_ARGUMENT,
                      "ONNX export: an inference model has no training-only nodes (gradients, "
                      "optimizer updates and their state, the training flag, labels): %s",
                      msg);
    }
    if (strcmp(op, "placeholder") != 0 && strcmp(op, "constant") != 0 &&
        strcmp(op, "variable") != 0 && !writer_of(op)) {
      msg_add(unimpl, sizeof unimpl, "%snode '%s' (%s)", n_unimpl ? ", " : "",
              fg_node_name(c->g, id), op);
      n_unimpl++;
    }
  }
  if (n_unimpl)
    return fgo_fail(c, FG_UNIMPLEMENTED, "ONNX export: %d node%s with no ONNX writer: %s", n_unimpl,
                    n_unimpl == 1 ? "" : "s", unimpl);
  return 0;
}

/* ---- variables ------------------------------------------------------------ */

/* The variables without a value in the graph (fg_variable_init: the
 * session draws it) get the value a new session would draw, from a
 * session on a graph holding copies of just those variables (their stream
 * follows their name, which the copies keep). */
static int draw_variables(fgo_ctx *c, const int *reach) {
  fg_graph *tmp = NULL;
  fg_session *s = NULL;
  int rc = 0;
  for (int id = 0; id < fg_graph_num_nodes(c->g) && rc == 0; id++) {
    if (!reach[id] || strcmp(fg_node_op(c->g, id), "variable") != 0) continue;
    const fg_node *n = fg_graph_node(c->g, id);
    if (fg_attrs_find(&n->attrs, "value")) continue;
    if (!tmp && !(tmp = fg_graph_new())) {
      rc = fgo_fail(c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory");
      break;
    }
    fg_op(tmp, "variable", n->name, NULL, 0, &n->attrs);
  }
  if (!tmp) return rc;
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 1;
  if (rc == 0 && (fg_graph_status(tmp, c->st) != FG_OK || !(s = fg_session_new(tmp, &so, c->st)))) {
    c->failed = 1;
    rc = -1;
  }
  for (int i = 0; rc == 0 && i < fg_graph_num_nodes(tmp); i++) {
    fg_tensor *v = fg_session_variable(s, fg_node_name(tmp, i), c->st);
    if (!v) {
      c->failed = 1;
      rc = -1;
    } else if (vec_push(c, &c->owned, v) != 0) {
      fg_tensor_free(v);
      rc = -1;
    } else {
      rc = add_tensor_init(c, fg_graph_find(c->g, fg_node_name(tmp, i)), v);
    }
  }
  fg_session_free(s);
  fg_graph_free(tmp);
  return rc;
}

/* Inputs, initializers and the nodes, in the graph's (topological) order. */
static int write_nodes(fgo_ctx *c, const int *reach, const unsigned *used) {
  for (int id = 0; id < fg_graph_num_nodes(c->g) && !c->failed; id++) {
    if (!reach[id]) continue;
    const char *op = fg_node_op(c->g, id);
    const fg_node *n = fg_graph_node(c->g, id);
    if (strcmp(op, "placeholder") == 0) {
      const fg_tinfo *t = fgo_info(c, (fg_output){id, 0});
      if (vec_push(c, &c->inputs, value_info(c, n->name, t, 1)) != 0)
        return fgo_fail(c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory");
    } else if (strcmp(op, "constant") == 0 || strcmp(op, "variable") == 0) {
      const fg_attr *v = fg_attrs_find(&n->attrs, "value");
      if (v && v->type == FG_ATTR_TENSOR && v->t && add_tensor_init(c, id, v->t) != 0) return -1;
    } else {
      if ((used[id] & ~1u) && n->n_outputs > 1 && strcmp(op, "topk") != 0 &&
          strcmp(op, "split") != 0)
        return fgo_fail(c, FG_UNIMPLEMENTED,
                        "ONNX export: node '%s' (%s): only its output 0 has an ONNX form, and "
                        "the fetches read another",
                        n->name, op);
      /* A writer that fails without saying why met attributes it cannot
       * read (a graph that passed validation has none). */
      if (writer_of(op)->write(c, id) != 0)
        return c->failed ? -1
                         : fgo_fail(c, FG_INVALID_GRAPH,
                                    "ONNX export: node '%s' (%s): its attributes could not be "
                                    "written",
                                    n->name, op);
    }
  }
  return c->failed ? -1 : 0;
}

/* ---- the model ------------------------------------------------------------ */

static int resolve_fetches(fgo_ctx *c, const fg_onnx_export_options *o, fg_output *fetch,
                           const char **names, int *n_fetch) {
  int n = o->fetches ? o->n_fetches : fg_graph_num_outputs(c->g);
  if (n <= 0)
    return fgo_fail(c, FG_INVALID_ARGUMENT,
                    "ONNX export: no fetches given and the graph marks no outputs "
                    "(fg_graph_add_output); name what the model computes");
  int k = 0;
  for (int i = 0; i < n; i++) {
    fg_output f;
    if (o->fetches) {
      if (!o->fetches[i])
        return fgo_fail(c, FG_INVALID_ARGUMENT, "ONNX export: fetch %d is NULL", i);
      f = fg_graph_find_output(c->g, o->fetches[i]);
      if (f.node < 0 || f.index < 0 || f.index >= fg_node_num_outputs(c->g, f.node))
        return fgo_fail(c, FG_INVALID_ARGUMENT,
                        "ONNX export: fetch '%s' names no output of the graph", o->fetches[i]);
    } else {
      f = fg_graph_output(c->g, i);
    }
    int dup = 0;
    for (int j = 0; j < k; j++)
      dup |= fetch[j].node == f.node && fetch[j].index == f.index;
    if (dup) continue;
    fetch[k] = f;
    if (!(names[k] = fgo_out(c, f.node, f.index))) return -1;
    k++;
  }
  *n_fetch = k;
  return 0;
}

static int add_outputs(fgo_ctx *c, const fg_output *fetch, const char **names, int n_fetch) {
  for (int i = 0; i < n_fetch; i++) {
    const fg_tinfo *t = fgo_info(c, fetch[i]);
    if (vec_push(c, &c->outputs, value_info(c, names[i], t, 0)) != 0)
      return fgo_fail(c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory");
  }
  return 0;
}

/* The graph's metadata, less the keys that name training nodes. */
static int add_metadata(fgo_ctx *c, Onnx__ModelProto *m) {
  int n = fg_graph_num_metadata(c->g), k = 0;
  Onnx__StringStringEntryProto **list = arena_alloc(c, (size_t)(n > 0 ? n : 1) * sizeof *list);
  if (!list) return -1;
  for (int i = 0; i < n; i++) {
    const char *key = fg_graph_metadata_key(c->g, i);
    if (strcmp(key, "loss") == 0 || strcmp(key, "train_target") == 0 ||
        strcmp(key, "training_steps") == 0)
      continue;
    Onnx__StringStringEntryProto *e = arena_alloc(c, sizeof *e);
    if (!e) return -1;
    onnx__string_string_entry_proto__init(e);
    e->key = arena_strdup(c, key);
    e->value = arena_strdup(c, fg_graph_metadata(c->g, key));
    if (!e->key || !e->value) return -1;
    list[k++] = e;
  }
  m->metadata_props = list, m->n_metadata_props = (size_t)k;
  return 0;
}

static int build_model(fgo_ctx *c, const fg_onnx_export_options *o, Onnx__ModelProto *m,
                       Onnx__GraphProto *gp) {
  int n_nodes = fg_graph_num_nodes(c->g);
  int n_max = o->fetches ? o->n_fetches : fg_graph_num_outputs(c->g);
  fg_output *fetch = malloc((size_t)(n_max > 0 ? n_max : 1) * sizeof *fetch);
  const char **names = malloc((size_t)(n_max > 0 ? n_max : 1) * sizeof *names);
  int *reach = calloc((size_t)(n_nodes > 0 ? n_nodes : 1), sizeof *reach);
  unsigned *used = calloc((size_t)(n_nodes > 0 ? n_nodes : 1), sizeof *used);
  int n_fetch = 0, rc = -1;
  if (!fetch || !names || !reach || !used) {
    fgo_fail(c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory");
    goto out;
  }
  if (resolve_fetches(c, o, fetch, names, &n_fetch) != 0 ||
      walk(c, fetch, n_fetch, reach, used) != 0 || check_reached(c, reach, names) != 0 ||
      draw_variables(c, reach) != 0 || write_nodes(c, reach, used) != 0 ||
      add_outputs(c, fetch, names, n_fetch) != 0)
    goto out;
  onnx__graph_proto__init(gp);
  const char *desc = fg_graph_metadata(c->g, "description");
  gp->name = arena_strdup(c, "flowgraph");
  gp->doc_string = desc ? arena_strdup(c, desc) : NULL;
  gp->node = (Onnx__NodeProto **)c->nodes.items, gp->n_node = c->nodes.n;
  gp->initializer = (Onnx__TensorProto **)c->inits.items, gp->n_initializer = c->inits.n;
  gp->input = (Onnx__ValueInfoProto **)c->inputs.items, gp->n_input = c->inputs.n;
  gp->output = (Onnx__ValueInfoProto **)c->outputs.items, gp->n_output = c->outputs.n;
  onnx__model_proto__init(m);
  Onnx__OperatorSetIdProto *os = arena_alloc(c, sizeof *os);
  Onnx__OperatorSetIdProto **osl = arena_alloc(c, sizeof *osl);
  if (!os || !osl || !gp->name || add_metadata(c, m) != 0) {
    fgo_fail(c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory");
    goto out;
  }
  onnx__operator_set_id_proto__init(os);
  os->domain = arena_strdup(c, ""), os->has_version = 1, os->version = c->opset;
  osl[0] = os;
  m->has_ir_version = 1, m->ir_version = FGO_IR_VERSION;
  m->opset_import = osl, m->n_opset_import = 1;
  m->producer_name = arena_strdup(c, "flowgraph");
  m->producer_version =
      arena_strdup(c, o->producer_version ? o->producer_version : FLOWGRAPH_VERSION_STRING);
  m->graph = gp;
  rc = c->failed ? -1 : 0;
out:
  free(fetch), free(names), free(reach), free(used);
  return rc;
}

void fg_onnx_export_options_init(fg_onnx_export_options *o) {
  if (o) memset(o, 0, sizeof *o);
}

int fg_onnx_save_memory(const fg_graph *g, void **data, size_t *size,
                        const fg_onnx_export_options *o, fg_status *status) {
  if (data) *data = NULL;
  if (size) *size = 0;
  if (!g || !data || !size) {
    fg_status_set(status, FG_INVALID_ARGUMENT,
                  "fg_onnx_save_memory: graph, data and size are "
                  "required");
    return -1;
  }
  if (fg_graph_status(g, status) != FG_OK) return -1;
  fg_onnx_export_options dflt;
  fg_onnx_export_options_init(&dflt);
  if (!o) o = &dflt;
  int opset = o->opset ? o->opset : FGO_DEFAULT_OPSET;
  if (opset < FGO_MIN_OPSET || opset > FGO_MAX_OPSET) {
    fg_status_set(status, FG_INVALID_ARGUMENT,
                  "ONNX export: opset %d is not supported: the exporter writes opsets %d to %d",
                  opset, FGO_MIN_OPSET, FGO_MAX_OPSET);
    return -1;
  }
  if (o->n_fetches < 0 || (o->n_fetches > 0 && !o->fetches)) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "ONNX export: n_fetches = %d with fetches %s",
                  o->n_fetches, o->fetches ? "given" : "NULL");
    return -1;
  }
  fgo_ctx c = {.g = g, .opset = opset, .st = status, .last_id = -1};
  Onnx__ModelProto m;
  Onnx__GraphProto gp;
  int rc = -1;
  if (build_model(&c, o, &m, &gp) == 0) {
    size_t n = onnx__model_proto__get_packed_size(&m);
    /* protobuf's limit for one message: bigger models need external data,
     * which the exporter does not write. */
    if (n > 0x7fffffffu) {
      fgo_fail(&c, FG_UNIMPLEMENTED,
               "ONNX export: the model is %zu bytes; a protobuf message is at most 2 GiB and "
               "the exporter does not write external data",
               n);
    } else if (!(*data = malloc(n ? n : 1))) {
      fgo_fail(&c, FG_RESOURCE_EXHAUSTED, "ONNX export: out of memory (%zu bytes)", n);
    } else {
      *size = onnx__model_proto__pack(&m, *data);
      fg_status_clear(status);
      rc = 0;
    }
  }
  ctx_free(&c);
  return rc;
}

int fg_onnx_save(const fg_graph *g, const char *path, const fg_onnx_export_options *o,
                 fg_status *status) {
  if (!path) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fg_onnx_save: path is NULL");
    return -1;
  }
  void *data = NULL;
  size_t size = 0;
  if (fg_onnx_save_memory(g, &data, &size, o, status) != 0) return -1;
  /* As fg_graph_save: no partial file is left. */
  int rc = fg_file_write_atomic(path, data, size, status);
  free(data);
  return rc;
}
