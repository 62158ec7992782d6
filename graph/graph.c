/* The graph: nodes in insertion (= topological) order, a name index, the
 * sticky first error, graph outputs and metadata. Every node enters through
 * fg_op(), which checks arity and references, copies the attributes and runs
 * shape inference, so a graph built through the API is always valid. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/op_table.h"
#include "graph/suggest.h"

#define NAME_EMPTY   (-1)
#define NAME_DELETED (-2)
#define NAME_MAX_LEN 4096

/* ---- lifetime and the sticky error ------------------------------------ */

fg_graph *fg_graph_new(void) {
  fg_graph *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->error = fg_status_new();
  if (!g->error) {
    free(g);
    return NULL;
  }
  return g;
}

static void node_release(fg_node *n) {
  free(n->name);
  free(n->device);
  free(n->inputs);
  free(n->outputs);
  fg_attrs_clear(&n->attrs);
}

void fg_graph_free(fg_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_nodes; i++)
    node_release(&g->nodes[i]);
  free(g->nodes);
  free(g->outputs);
  for (int i = 0; i < g->n_meta; i++) {
    free(g->meta_keys[i]);
    free(g->meta_vals[i]);
  }
  free(g->meta_keys);
  free(g->meta_vals);
  free(g->name_index);
  free(g->scope);
  fg_status_free(g->error);
  free(g);
}

int fg_graph_set_scope(fg_graph *g, const char *scope) {
  if (!g) return -1;
  char *copy = NULL;
  if (scope && scope[0]) {
    if (strlen(scope) > NAME_MAX_LEN / 2 || strchr(scope, ':')) return -1;
    if (!(copy = fg_strdup(scope))) return -1;
  }
  free(g->scope);
  g->scope = copy;
  return 0;
}

const char *fg_graph_scope(const fg_graph *g) { return g && g->scope ? g->scope : ""; }

void fg_graph_fail(fg_graph *g, fg_code code, const char *fmt, ...) {
  if (!g || fg_status_code(g->error) != FG_OK) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fg_status_set(g->error, code, "%s", msg);
}

int fg_graph_failed(const fg_graph *g) { return !g || fg_status_code(g->error) != FG_OK; }

fg_code fg_graph_status(const fg_graph *g, fg_status *status) {
  if (!g) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "graph is NULL");
    return FG_INVALID_ARGUMENT;
  }
  fg_status_copy(status, g->error);
  return fg_status_code(g->error);
}

uint64_t fg_graph_version(const fg_graph *g) { return g ? g->version : 0; }

const fg_node *fg_graph_node(const fg_graph *g, int id) {
  return (g && id >= 0 && id < g->n_nodes) ? &g->nodes[id] : NULL;
}

const fg_tinfo *fg_graph_tinfo(const fg_graph *g, fg_output o) {
  const fg_node *n = fg_graph_node(g, o.node);
  return (n && o.index >= 0 && o.index < n->n_outputs) ? &n->outputs[o.index] : NULL;
}

/* ---- the name index: open addressing with tombstones ------------------ */

static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

int fg_graph_find(const fg_graph *g, const char *name) {
  if (!g || !name || !g->name_cap) return -1;
  size_t mask = (size_t)g->name_cap - 1;
  for (size_t i = name_hash(name) & mask, probes = 0; probes < (size_t)g->name_cap;
       i = (i + 1) & mask, probes++) {
    int id = g->name_index[i];
    if (id == NAME_EMPTY) return -1;
    if (id >= 0 && strcmp(g->nodes[id].name, name) == 0) return id;
  }
  return -1;
}

static void index_put(int *index, int cap, const char *name, int id) {
  size_t mask = (size_t)cap - 1;
  size_t i = name_hash(name) & mask;
  while (index[i] >= 0)
    i = (i + 1) & mask;
  index[i] = id;
}

/* Keeps the load (live + tombstones) under one half. */
static int index_reserve(fg_graph *g, int need) {
  if (g->name_cap && (size_t)need * 2 <= (size_t)g->name_cap) return 0;
  int cap = 16;
  while ((size_t)cap < (size_t)need * 4)
    cap *= 2;
  int *index = malloc((size_t)cap * sizeof *index);
  if (!index) return -1;
  for (int i = 0; i < cap; i++)
    index[i] = NAME_EMPTY;
  for (int id = 0; id < g->n_nodes; id++)
    index_put(index, cap, g->nodes[id].name, id);
  free(g->name_index);
  g->name_index = index;
  g->name_cap = cap;
  return 0;
}

static void index_remove(fg_graph *g, const char *name) {
  size_t mask = (size_t)g->name_cap - 1;
  for (size_t i = name_hash(name) & mask;; i = (i + 1) & mask) {
    int id = g->name_index[i];
    if (id == NAME_EMPTY) return;
    if (id >= 0 && strcmp(g->nodes[id].name, name) == 0) {
      g->name_index[i] = NAME_DELETED;
      return;
    }
  }
}

/* Names are unique, non-empty, at most NAME_MAX_LEN bytes and free of ':'
 * (which separates "node:output" in fetch names). */
static int check_name(fg_graph *g, const char *name, int self) {
  size_t len = strlen(name);
  if (len == 0 || len > NAME_MAX_LEN) {
    fg_graph_fail(g, FG_INVALID_GRAPH, "node name of %zu bytes: names must have 1 to %d bytes", len,
                  NAME_MAX_LEN);
    return -1;
  }
  if (strchr(name, ':')) {
    fg_graph_fail(g, FG_INVALID_GRAPH, "node name '%s' contains ':' (reserved for node:output)",
                  name);
    return -1;
  }
  int other = fg_graph_find(g, name);
  if (other >= 0 && other != self) {
    fg_graph_fail(g, FG_INVALID_GRAPH, "node name '%s' is used twice (nodes %d and %d)", name,
                  other, self);
    return -1;
  }
  return 0;
}

/* ---- inference --------------------------------------------------------- */

int fg_infer(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const fg_op_def *def = &fg_op_table[node->op];
  for (int i = 0; i < node->n_outputs; i++)
    memset(&out[i], 0, sizeof out[i]);
  if (def->infer(node, in, out, status) != 0) {
    if (fg_status_code(status) == FG_OK)
      fg_status_set(status, FG_INVALID_GRAPH, "node '%s' (%s): shape inference failed", node->name,
                    def->name);
    return -1;
  }
  /* Whatever an op's rule says, no output may escape with a bad dtype,
   * rank or a byte size that overflows. */
  for (int i = 0; i < node->n_outputs; i++) {
    fg_tinfo t = out[i];
    char buf[FG_SHAPE_STR_MAX];
    if (fg_dtype_size(t.dtype) == 0 || t.rank < 0 || t.rank > FG_MAX_RANK) {
      fg_status_set(status, FG_INVALID_GRAPH, "node '%s' (%s): output %d has dtype %d rank %d",
                    node->name, def->name, i, (int)t.dtype, t.rank);
      return -1;
    }
    for (int d = 0; d < t.rank; d++) {
      if (t.dims[d] < FG_DIM_UNKNOWN) {
        fg_status_set(status, FG_INVALID_GRAPH, "node '%s' (%s): output %d has shape %s",
                      node->name, def->name, i, fg_shape_str(t.rank, t.dims, buf, sizeof buf));
        return -1;
      }
      if (t.dims[d] == FG_DIM_UNKNOWN) t.dims[d] = 1;
    }
    size_t bytes;
    if (fg_tinfo_bytes(&t, &bytes) != 0) {
      fg_status_set(status, FG_INVALID_GRAPH,
                    "node '%s' (%s): output %d shape %s of %s overflows 64-bit byte size",
                    node->name, def->name, i,
                    fg_shape_str(out[i].rank, out[i].dims, buf, sizeof buf),
                    fg_dtype_name(t.dtype));
      return -1;
    }
  }
  return 0;
}

/* ---- building ---------------------------------------------------------- */

/* Attributes the op does not declare, or of another type, are refused: a
 * misspelt name must not run as if it were absent. */
static int check_attrs(fg_graph *g, int opid, const char *name, const fg_attrs *attrs) {
  fg_status *st = fg_status_new();
  if (!st) {
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "node '%s': out of memory", name);
    return -1;
  }
  int rc = fg_op_check_attrs(opid, name, attrs, st);
  if (rc != 0) fg_graph_fail(g, fg_status_code(st), "%s", fg_status_message(st));
  fg_status_free(st);
  return rc;
}

/* Most ops have a fixed output count; split's comes from its attributes. */
static int count_outputs(fg_graph *g, int opid, const char *name, const fg_attrs *attrs) {
  if (fg_op_table[opid].n_outputs >= 0) return fg_op_table[opid].n_outputs;
  fg_status *st = fg_status_new();
  int n = st ? fg_op_output_count(opid, name, attrs, st) : -1;
  if (n < 0) {
    if (st)
      fg_graph_fail(g, fg_status_code(st), "%s", fg_status_message(st));
    else
      fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "node '%s': out of memory", name);
  }
  fg_status_free(st);
  return n;
}

/* attrs' contents into dst (empty), leaving attrs empty. */
static int attrs_move(struct fg_attrs *dst, fg_attrs *attrs) {
  if (!attrs) return 0;
  *dst = *attrs;
  attrs->items = NULL;
  attrs->n = attrs->cap = 0;
  return 0;
}

static fg_output add_op(fg_graph *g, const char *op, const char *name, const fg_output *inputs,
                        int n_inputs, const fg_attrs *attrs, fg_attrs *move);

fg_output fg_op(fg_graph *g, const char *op, const char *name, const fg_output *inputs,
                int n_inputs, const fg_attrs *attrs) {
  return add_op(g, op, name, inputs, n_inputs, attrs, NULL);
}

fg_output fg_op_move(fg_graph *g, const char *op, const char *name, const fg_output *inputs,
                     int n_inputs, fg_attrs *attrs) {
  return add_op(g, op, name, inputs, n_inputs, attrs, attrs);
}

/* fg_op; `move` (attrs itself, or NULL) is moved into the node rather
 * than copied. */
static fg_output add_op(fg_graph *g, const char *op, const char *name, const fg_output *inputs,
                        int n_inputs, const fg_attrs *attrs, fg_attrs *move) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  if (!op) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "fg_op: op name is NULL");
    return FG_NO_OUTPUT;
  }
  int id = g->n_nodes;
  int opid = fg_op_lookup(op);
  if (opid < 0) {
    fg_suggest s;
    fg_suggest_init(&s, op);
    for (int i = 0; i < FG_OP_COUNT; i++)
      fg_suggest_try(&s, fg_op_table[i].name);
    char tail[300];
    fg_graph_fail(g, FG_UNIMPLEMENTED, "node '%s': unknown op '%s'%s", name ? name : "(unnamed)",
                  op, fg_suggest_tail(&s, tail, sizeof tail));
    return FG_NO_OUTPUT;
  }
  const fg_op_def *def = &fg_op_table[opid];

  char autoname[NAME_MAX_LEN + 64];
  if (!name) {
    do
      snprintf(autoname, sizeof autoname, "%s%s_%u", g->scope ? g->scope : "", def->name,
               g->auto_name++);
    while (fg_graph_find(g, autoname) >= 0);
    name = autoname;
  }
  if (check_name(g, name, id) != 0) return FG_NO_OUTPUT;

  if (n_inputs < 0 || (n_inputs > 0 && !inputs)) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "node '%s' (%s): %d inputs given with inputs=%p", name,
                  def->name, n_inputs, (const void *)inputs);
    return FG_NO_OUTPUT;
  }
  if (n_inputs < def->min_inputs || (def->max_inputs >= 0 && n_inputs > def->max_inputs)) {
    if (def->max_inputs < 0)
      fg_graph_fail(g, FG_INVALID_GRAPH, "node '%s' (%s): takes at least %d inputs, got %d", name,
                    def->name, def->min_inputs, n_inputs);
    else if (def->min_inputs == def->max_inputs)
      fg_graph_fail(g, FG_INVALID_GRAPH, "node '%s' (%s): takes %d inputs, got %d", name, def->name,
                    def->min_inputs, n_inputs);
    else
      fg_graph_fail(g, FG_INVALID_GRAPH, "node '%s' (%s): takes %d to %d inputs, got %d", name,
                    def->name, def->min_inputs, def->max_inputs, n_inputs);
    return FG_NO_OUTPUT;
  }
  if (check_attrs(g, opid, name, attrs) != 0) return FG_NO_OUTPUT;
  int n_out = count_outputs(g, opid, name, attrs);
  if (n_out < 0) return FG_NO_OUTPUT;
  for (int i = 0; i < n_inputs; i++) {
    const fg_node *src = fg_graph_node(g, inputs[i].node);
    if (!src) {
      fg_graph_fail(g, FG_INVALID_GRAPH,
                    "node '%s' (%s): input %d refers to node %d, but the graph has %d nodes", name,
                    def->name, i, inputs[i].node, g->n_nodes);
      return FG_NO_OUTPUT;
    }
    if (inputs[i].index < 0 || inputs[i].index >= src->n_outputs) {
      fg_graph_fail(g, FG_INVALID_GRAPH,
                    "node '%s' (%s): input %d refers to output %d of node '%s' (%s), which has "
                    "%d output(s)",
                    name, def->name, i, inputs[i].index, src->name, fg_op_table[src->op].name,
                    src->n_outputs);
      return FG_NO_OUTPUT;
    }
  }
  for (int i = 0; i < n_inputs; i++) {
    const fg_node *src = &g->nodes[inputs[i].node];
    if (src->op != FG_OP_VARIABLE && fg_op_writes_input(opid, attrs, i)) {
      fg_graph_fail(g, FG_INVALID_GRAPH,
                    "node '%s' (%s): input %d must be a variable, got node '%s' (%s)", name,
                    def->name, i, src->name, fg_op_table[src->op].name);
      return FG_NO_OUTPUT;
    }
  }

  if (g->n_nodes == g->cap_nodes) {
    int cap = g->cap_nodes ? g->cap_nodes * 2 : 32;
    fg_node *nodes = realloc(g->nodes, (size_t)cap * sizeof *nodes);
    if (!nodes) {
      fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "node '%s': out of memory", name);
      return FG_NO_OUTPUT;
    }
    g->nodes = nodes;
    g->cap_nodes = cap;
  }
  fg_node node = {0};
  node.op = opid;
  node.name = fg_strdup(name);
  node.device = NULL; /* unplaced: the placer (dist/rewrite/partition.c) decides */
  node.n_inputs = n_inputs;
  node.inputs = malloc((size_t)(n_inputs ? n_inputs : 1) * sizeof *node.inputs);
  node.n_outputs = n_out;
  node.outputs = calloc((size_t)n_out + 1, sizeof *node.outputs);
  fg_tinfo in_stack[8], *in = n_inputs <= 8 ? in_stack : malloc((size_t)n_inputs * sizeof *in);
  if (!node.name || !node.inputs || !node.outputs || !in || index_reserve(g, g->n_nodes + 1) != 0 ||
      (move ? attrs_move(&node.attrs, move) : fg_attrs_copy(&node.attrs, attrs)) != 0) {
    node_release(&node);
    if (in != in_stack) free(in);
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "node '%s': out of memory", name);
    return FG_NO_OUTPUT;
  }
  for (int i = 0; i < n_inputs; i++) {
    node.inputs[i] = inputs[i];
    in[i] = g->nodes[inputs[i].node].outputs[inputs[i].index];
  }
  fg_status *st = fg_status_new();
  int rc = st ? fg_infer(&node, in, node.outputs, st) : -1;
  if (in != in_stack) free(in);
  if (rc != 0) {
    if (st)
      fg_graph_fail(g, fg_status_code(st), "%s", fg_status_message(st));
    else
      fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "node '%s': out of memory", name);
    fg_status_free(st);
    node_release(&node);
    return FG_NO_OUTPUT;
  }
  fg_status_free(st);
  g->nodes[id] = node;
  g->n_nodes++;
  index_put(g->name_index, g->name_cap, node.name, id);
  g->version++;
  return (fg_output){id, 0};
}

fg_output fg_output_at(fg_output o, int index) {
  o.index = index;
  return o;
}

static fg_node *node_for(fg_graph *g, fg_output o, const char *what) {
  if (!g || fg_graph_failed(g)) return NULL;
  if (o.node < 0 || o.node >= g->n_nodes) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT,
                  "%s: output refers to node %d, but the graph has %d nodes", what, o.node,
                  g->n_nodes);
    return NULL;
  }
  return &g->nodes[o.node];
}

/* Metadata whose value names a node or "node:index" (fg_minimize's
 * records, read by `flowgraph train` and the dist rewrites). */
static const char *const node_metadata_keys[] = {"loss", "train_target"};

/* The node-naming metadata follows a rename, so what it records stays the
 * same node: a value `old` or "old:INDEX" becomes `name` or "name:INDEX".
 * Names hold no ':', so "old:" cannot be the start of another node's name. */
static int follow_rename(fg_graph *g, const char *old, const char *name) {
  size_t old_len = strlen(old);
  for (size_t k = 0; k < sizeof node_metadata_keys / sizeof node_metadata_keys[0]; k++) {
    const char *v = fg_graph_metadata(g, node_metadata_keys[k]);
    if (!v || strncmp(v, old, old_len) != 0 || (v[old_len] && v[old_len] != ':')) continue;
    const char *suffix = v + old_len;
    size_t len = strlen(name) + strlen(suffix) + 1;
    char *renamed = malloc(len);
    if (!renamed) return -1;
    snprintf(renamed, len, "%s%s", name, suffix);
    int rc = fg_graph_set_metadata(g, node_metadata_keys[k], renamed);
    free(renamed);
    if (rc != 0) return -1;
  }
  return 0;
}

fg_output fg_set_name(fg_graph *g, fg_output o, const char *name) {
  fg_node *n = node_for(g, o, "fg_set_name");
  if (!n) return FG_NO_OUTPUT;
  if (!name) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "fg_set_name: name is NULL for node '%s'", n->name);
    return FG_NO_OUTPUT;
  }
  if (strcmp(n->name, name) == 0) return o;
  if (check_name(g, name, o.node) != 0) return FG_NO_OUTPUT;
  char *copy = fg_strdup(name);
  if (!copy) {
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_set_name: out of memory");
    return FG_NO_OUTPUT;
  }
  if (follow_rename(g, n->name, copy) != 0) {
    free(copy);
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_set_name: out of memory");
    return FG_NO_OUTPUT;
  }
  index_remove(g, n->name);
  free(n->name);
  n->name = copy;
  /* Tombstones count towards the load; rebuild when they pile up. */
  if (index_reserve(g, g->n_nodes + 1) == 0) index_put(g->name_index, g->name_cap, copy, o.node);
  g->version++;
  return o;
}

fg_output fg_set_device(fg_graph *g, fg_output o, const char *device) {
  fg_node *n = node_for(g, o, "fg_set_device");
  if (!n) return FG_NO_OUTPUT;
  if (!device || !device[0] || strlen(device) > 256) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "fg_set_device: node '%s': device must be 1 to 256 bytes",
                  n->name);
    return FG_NO_OUTPUT;
  }
  char *copy = fg_strdup(device);
  if (!copy) {
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_set_device: out of memory");
    return FG_NO_OUTPUT;
  }
  free(n->device);
  n->device = copy;
  g->version++;
  return o;
}

/* ---- graph outputs and metadata ---------------------------------------- */

int fg_graph_add_output(fg_graph *g, fg_output o) {
  if (!g || fg_graph_failed(g)) return -1;
  if (!fg_graph_tinfo(g, o)) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "fg_graph_add_output: no output %d of node %d", o.index,
                  o.node);
    return -1;
  }
  if (g->n_outputs == g->cap_outputs) {
    int cap = g->cap_outputs ? g->cap_outputs * 2 : 4;
    fg_output *outs = realloc(g->outputs, (size_t)cap * sizeof *outs);
    if (!outs) {
      fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_graph_add_output: out of memory");
      return -1;
    }
    g->outputs = outs;
    g->cap_outputs = cap;
  }
  g->outputs[g->n_outputs++] = o;
  g->version++;
  return 0;
}

int fg_graph_num_outputs(const fg_graph *g) { return g ? g->n_outputs : 0; }

fg_output fg_graph_output(const fg_graph *g, int i) {
  return (g && i >= 0 && i < g->n_outputs) ? g->outputs[i] : FG_NO_OUTPUT;
}

int fg_graph_set_metadata(fg_graph *g, const char *key, const char *value) {
  if (!g || !key || !value) return -1;
  for (int i = 0; i < g->n_meta; i++)
    if (strcmp(g->meta_keys[i], key) == 0) {
      char *v = fg_strdup(value);
      if (!v) return -1;
      free(g->meta_vals[i]);
      g->meta_vals[i] = v;
      return 0;
    }
  if (g->n_meta == g->cap_meta) {
    int cap = g->cap_meta ? g->cap_meta * 2 : 4;
    char **k = realloc(g->meta_keys, (size_t)cap * sizeof *k);
    if (!k) return -1;
    g->meta_keys = k;
    char **v = realloc(g->meta_vals, (size_t)cap * sizeof *v);
    if (!v) return -1;
    g->meta_vals = v;
    g->cap_meta = cap;
  }
  char *k = fg_strdup(key), *v = fg_strdup(value);
  if (!k || !v) {
    free(k);
    free(v);
    return -1;
  }
  g->meta_keys[g->n_meta] = k;
  g->meta_vals[g->n_meta] = v;
  g->n_meta++;
  return 0;
}

int fg_graph_num_metadata(const fg_graph *g) { return g ? g->n_meta : 0; }

const char *fg_graph_metadata_key(const fg_graph *g, int i) {
  return (g && i >= 0 && i < g->n_meta) ? g->meta_keys[i] : NULL;
}

const char *fg_graph_metadata(const fg_graph *g, const char *key) {
  if (!g || !key) return NULL;
  for (int i = 0; i < g->n_meta; i++)
    if (strcmp(g->meta_keys[i], key) == 0) return g->meta_vals[i];
  return NULL;
}

/* ---- reading ----------------------------------------------------------- */

int fg_graph_num_nodes(const fg_graph *g) { return g ? g->n_nodes : 0; }

fg_output fg_graph_find_output(const fg_graph *g, const char *name) {
  if (!g || !name) return FG_NO_OUTPUT;
  const char *colon = strrchr(name, ':');
  if (!colon) {
    int id = fg_graph_find(g, name);
    return id >= 0 ? (fg_output){id, 0} : FG_NO_OUTPUT;
  }
  size_t len = (size_t)(colon - name);
  char *end = NULL;
  long index = strtol(colon + 1, &end, 10);
  if (len == 0 || len > NAME_MAX_LEN || !colon[1] || *end || index < 0 || index > 1000000)
    return FG_NO_OUTPUT;
  char buf[NAME_MAX_LEN + 1];
  memcpy(buf, name, len);
  buf[len] = '\0';
  int id = fg_graph_find(g, buf);
  if (id < 0 || index >= g->nodes[id].n_outputs) return FG_NO_OUTPUT;
  return (fg_output){id, (int)index};
}

const char *fg_node_name(const fg_graph *g, int node) {
  const fg_node *n = fg_graph_node(g, node);
  return n ? n->name : NULL;
}

const char *fg_node_op(const fg_graph *g, int node) {
  const fg_node *n = fg_graph_node(g, node);
  return n ? fg_op_table[n->op].name : NULL;
}

const char *fg_node_device(const fg_graph *g, int node) {
  const fg_node *n = fg_graph_node(g, node);
  return n ? (n->device ? n->device : "cpu:0") : NULL;
}

const char *fg_node_device_explicit(const fg_graph *g, int node) {
  const fg_node *n = fg_graph_node(g, node);
  return n ? n->device : NULL;
}

int fg_node_num_inputs(const fg_graph *g, int node) {
  const fg_node *n = fg_graph_node(g, node);
  return n ? n->n_inputs : -1;
}

fg_output fg_node_input(const fg_graph *g, int node, int i) {
  const fg_node *n = fg_graph_node(g, node);
  return (n && i >= 0 && i < n->n_inputs) ? n->inputs[i] : FG_NO_OUTPUT;
}

int fg_node_num_outputs(const fg_graph *g, int node) {
  const fg_node *n = fg_graph_node(g, node);
  return n ? n->n_outputs : -1;
}

fg_dtype fg_output_dtype(const fg_graph *g, fg_output o) {
  const fg_tinfo *t = fg_graph_tinfo(g, o);
  return t ? t->dtype : FG_DTYPE_INVALID;
}

int fg_output_shape(const fg_graph *g, fg_output o, int64_t *dims) {
  const fg_tinfo *t = fg_graph_tinfo(g, o);
  if (!t) return -1;
  if (dims)
    for (int i = 0; i < t->rank; i++)
      dims[i] = t->dims[i];
  return t->rank;
}

int64_t fg_node_flops(const fg_graph *g, int node) {
  const fg_node *n = fg_graph_node(g, node);
  if (!n) return -1;
  const fg_op_def *def = &fg_op_table[n->op];
  fg_tinfo in_stack[8],
      *in = n->n_inputs <= 8 ? in_stack : malloc((size_t)n->n_inputs * sizeof *in);
  if (!in) return -1;
  int known = 1;
  for (int i = 0; i < n->n_inputs; i++) {
    in[i] = g->nodes[n->inputs[i].node].outputs[n->inputs[i].index];
    for (int d = 0; d < in[i].rank; d++)
      known &= in[i].dims[d] >= 0;
  }
  for (int i = 0; i < n->n_outputs; i++)
    for (int d = 0; d < n->outputs[i].rank; d++)
      known &= n->outputs[i].dims[d] >= 0;
  int64_t flops = !known ? -1 : def->flops ? def->flops(n, in, n->outputs) : 0;
  if (in != in_stack) free(in);
  return flops;
}

int fg_node_num_attrs(const fg_graph *g, int node) {
  const fg_node *n = fg_graph_node(g, node);
  return n ? n->attrs.n : -1;
}

const char *fg_node_attr_name(const fg_graph *g, int node, int i) {
  const fg_node *n = fg_graph_node(g, node);
  return (n && i >= 0 && i < n->attrs.n) ? n->attrs.items[i].name : NULL;
}

static const fg_attr *attr_of(const fg_graph *g, int node, const char *name, fg_attr_type type) {
  const fg_node *n = fg_graph_node(g, node);
  const fg_attr *a = n ? fg_attrs_find(&n->attrs, name) : NULL;
  return (a && (type == 0 || a->type == type)) ? a : NULL;
}

fg_attr_type fg_node_attr_type(const fg_graph *g, int node, const char *name) {
  const fg_attr *a = attr_of(g, node, name, 0);
  return a ? a->type : (fg_attr_type)0;
}

int fg_node_attr_int(const fg_graph *g, int node, const char *name, int64_t *v) {
  const fg_attr *a = attr_of(g, node, name, FG_ATTR_INT);
  if (!a || !v) return -1;
  *v = a->i;
  return 0;
}

int fg_node_attr_float(const fg_graph *g, int node, const char *name, double *v) {
  const fg_attr *a = attr_of(g, node, name, FG_ATTR_FLOAT);
  if (!a || !v) return -1;
  *v = a->f;
  return 0;
}

int fg_node_attr_string(const fg_graph *g, int node, const char *name, const char **v) {
  const fg_attr *a = attr_of(g, node, name, FG_ATTR_STRING);
  if (!a || !v) return -1;
  *v = a->s;
  return 0;
}

int fg_node_attr_ints(const fg_graph *g, int node, const char *name, const int64_t **v, int *n) {
  const fg_attr *a = attr_of(g, node, name, FG_ATTR_INTS);
  if (!a || !v || !n) return -1;
  *v = a->ints;
  *n = a->n;
  return 0;
}

int fg_node_attr_floats(const fg_graph *g, int node, const char *name, const double **v, int *n) {
  const fg_attr *a = attr_of(g, node, name, FG_ATTR_FLOATS);
  if (!a || !v || !n) return -1;
  *v = a->floats;
  *n = a->n;
  return 0;
}

int fg_node_attr_tensor(const fg_graph *g, int node, const char *name, const fg_tensor **v) {
  const fg_attr *a = attr_of(g, node, name, FG_ATTR_TENSOR);
  if (!a || !v) return -1;
  *v = a->t;
  return 0;
}
