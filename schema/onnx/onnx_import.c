/* The ONNX importer's driver: decode the ModelProto, check what the file
 * claims (opset, names, order), then build the graph: initializers and
 * inputs, each node through its mapper (onnx_import.h), graph outputs and
 * metadata. The fgx_* functions mappers call live in onnx_values.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "schema/onnx/onnx_internal.h"
#include "schema/onnx/onnx_stream.h"

#define FGX_OPSET_MIN 7
#define FGX_OPSET_MAX 17

void fg_onnx_options_init(fg_onnx_options *o) {
  if (o) memset(o, 0, sizeof *o);
}

int fg_onnx_available(void) { return 1; }

static const char *str_or(const char *s, const char *dflt) { return s && s[0] ? s : dflt; }

static int is_default_domain(const char *d) { return !d || !d[0] || strcmp(d, "ai.onnx") == 0; }

/* ---- opsets and mappers --------------------------------------------------- */

static int read_opset(fgx_ctx *c) {
  int found = 0;
  for (size_t i = 0; i < c->model->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = c->model->opset_import[i];
    if (!is_default_domain(o->domain)) continue;
    if (found)
      return fgx_fail_model(c, FG_INVALID_GRAPH,
                            "opset_import lists the default domain twice (opset_import[%zu])", i);
    found = 1;
    if (!o->has_version || o->version < FGX_OPSET_MIN || o->version > FGX_OPSET_MAX)
      return fgx_fail_model(c, FG_UNSUPPORTED,
                            "opset %lld of the default domain (opset_import[%zu]) is outside "
                            "the opsets flowgraph reads (%d to %d)",
                            (long long)(o->has_version ? o->version : 0), i, FGX_OPSET_MIN,
                            FGX_OPSET_MAX);
    c->opset = (int)o->version;
  }
  if (!found)
    return fgx_fail_model(c, FG_UNSUPPORTED,
                          "opset_import declares no opset of the default domain (flowgraph "
                          "reads opsets %d to %d)",
                          FGX_OPSET_MIN, FGX_OPSET_MAX);
  return 0;
}

static long long domain_opset(const fgx_ctx *c, const char *domain) {
  for (size_t i = 0; i < c->model->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *o = c->model->opset_import[i];
    if (strcmp(o->domain ? o->domain : "", domain ? domain : "") == 0 && o->has_version)
      return (long long)o->version;
  }
  return -1;
}

static fgx_map_fn find_mapper(const char *type) {
  const fgx_op *tables[] = {fgx_ops_core, fgx_ops_nn, fgx_ops_math, fgx_ops_tensor, fgx_ops_rnn};
  for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
    for (const fgx_op *op = tables[t]; op->type; op++)
      if (strcmp(op->type, type) == 0) return op->map;
  return NULL;
}

static fgx_map_fn node_mapper(const fgx_node *n) {
  if (!is_default_domain(n->domain) || !n->op_type) return NULL;
  return find_mapper(n->op_type);
}

/* An unmapped node, for grouping by (op type, domain). */
typedef struct unmapped {
  const fgx_node *n;
  size_t index;
  int count; /* nodes of the group, on its first node */
} unmapped;

static int cmp_type(const void *a, const void *b) {
  const unmapped *x = a, *y = b;
  int r = strcmp(x->n->op_type, y->n->op_type);
  if (!r) r = strcmp(str_or(x->n->domain, ""), str_or(y->n->domain, ""));
  return r ? r : (x->index > y->index) - (x->index < y->index);
}

static int cmp_index(const void *a, const void *b) {
  const unmapped *x = a, *y = b;
  return (x->index > y->index) - (x->index < y->index);
}

/* Every node whose op has no mapper, grouped by (op type, domain) in the
 * order of first appearance, in one FG_UNIMPLEMENTED error. Sorting keeps
 * a file of many distinct unknown types from costing n^2. */
static int check_mapped(fgx_ctx *c) {
  const Onnx__GraphProto *gp = c->graph;
  size_t n_un = 0;
  for (size_t k = 0; k < gp->n_node; k++)
    n_un += node_mapper(gp->node[k]) == NULL;
  if (!n_un) return 0;
  unmapped *u = fgx_alloc(c, n_un * sizeof *u);
  if (!u) return -1;
  for (size_t k = 0, i = 0; k < gp->n_node; k++)
    if (!node_mapper(gp->node[k])) u[i++] = (unmapped){gp->node[k], k, 0};
  qsort(u, n_un, sizeof *u, cmp_type);
  size_t types = 0;
  for (size_t i = 0; i < n_un;) {
    size_t j = i + 1;
    while (j < n_un && strcmp(u[j].n->op_type, u[i].n->op_type) == 0 &&
           strcmp(str_or(u[j].n->domain, ""), str_or(u[i].n->domain, "")) == 0)
      j++;
    u[types] = u[i];
    u[types++].count = (int)(j - i);
    i = j;
  }
  qsort(u, types, sizeof *u, cmp_index);
  char msg[960];
  size_t len = 0, shown = 0;
  for (size_t t = 0; t < types; t++) {
    const fgx_node *n = u[t].n;
    const char *domain = str_or(n->domain, "");
    long long opset = is_default_domain(domain) ? c->opset : domain_opset(c, domain);
    char one[400];
    c->node = (int)u[t].index;
    snprintf(one, sizeof one, "%s%.64s (domain '%.48s', opset %lld) at node '%.80s'", t ? "; " : "",
             n->op_type, domain, opset, fgx_node_label(c, n));
    if (u[t].count > 1)
      snprintf(one + strlen(one), sizeof one - strlen(one), " and %d more", u[t].count - 1);
    if (len + strlen(one) >= sizeof msg - 40) break;
    memcpy(msg + len, one, strlen(one) + 1);
    len += strlen(one);
    shown++;
  }
  c->node = -1;
  if (shown < types)
    snprintf(msg + len, sizeof msg - len, "; and %zu more op types", types - shown);
  return fgx_fail_model(c, FG_UNIMPLEMENTED, "%zu ONNX op type%s with no mapping in flowgraph: %s",
                        types, types > 1 ? "s" : "", msg);
}

/* ---- structure: names, order, duplicates ---------------------------------- */

static const char *producer_text(fgx_ctx *c, int producer, char *buf, size_t size) {
  if (producer == FGX_FROM_INITIALIZER) return "an initializer";
  if (producer == FGX_FROM_INPUT) return "a graph input";
  snprintf(buf, size, "node '%.200s' (#%d)", fgx_node_label(c, c->graph->node[producer]), producer);
  return buf;
}

static int check_inputs_outputs(fgx_ctx *c) {
  Onnx__GraphProto *gp = c->graph;
  for (size_t i = 0; i < gp->n_initializer; i++) {
    const Onnx__TensorProto *t = gp->initializer[i];
    if (!t->name || !t->name[0])
      return fgx_fail_model(c, FG_INVALID_GRAPH, "initializer[%zu] has no name", i);
    if (fgx_value_index(c, t->name) >= 0)
      return fgx_fail_model(c, FG_INVALID_GRAPH, "initializer '%s' is listed twice", t->name);
    /* Every initializer is checked, used or not; its data is read on use. */
    char where[300];
    snprintf(where, sizeof where, "initializer '%.200s'", t->name);
    if (fgx_tensor_check(c, NULL, t, where) < 0) return -1;
    int v = fgx_value_add(c, t->name, FGX_FROM_INITIALIZER);
    if (v < 0) return -1;
    c->vals[v].init = t;
    c->vals[v].initializer = 1;
  }
  for (size_t i = 0; i < gp->n_input; i++) {
    const char *name = gp->input[i]->name;
    if (!name || !name[0])
      return fgx_fail_model(c, FG_INVALID_GRAPH, "graph input[%zu] has no name", i);
    int v = fgx_value_index(c, name);
    if (v >= 0 && c->vals[v].producer == FGX_FROM_INITIALIZER) continue; /* a default value */
    if (v >= 0)
      return fgx_fail_model(c, FG_INVALID_GRAPH, "graph input '%s' is listed twice", name);
    if (fgx_value_add(c, name, FGX_FROM_INPUT) < 0) return -1;
  }
  return 0;
}

/* A node input naming nothing defined before it: a cycle, an order that
 * is not topological (both refused: ONNX requires the order), or no tensor. */
static int undefined_input(fgx_ctx *c, size_t k, size_t i) {
  const fgx_node *n = c->graph->node[k];
  const char *name = n->input[i];
  for (size_t j = k; j < c->graph->n_node; j++) {
    const fgx_node *m = c->graph->node[j];
    for (size_t o = 0; o < m->n_output; o++)
      if (m->output[o] && strcmp(m->output[o], name) == 0) {
        c->node = (int)j;
        const char *later = fgx_node_label(c, m);
        c->node = (int)k;
        return fgx_fail(c, n, FG_INVALID_GRAPH,
                        "input %zu '%s' is produced by node '%s' (#%zu), %s: the graph has a "
                        "cycle or its nodes are not in topological order",
                        i, name, later, j, j == k ? "this node itself" : "which comes later");
      }
  }
  return fgx_fail(c, n, FG_INVALID_GRAPH, "input %zu '%s' names no tensor", i, name);
}

static int check_nodes(fgx_ctx *c) {
  Onnx__GraphProto *gp = c->graph;
  for (size_t k = 0; k < gp->n_node; k++) {
    const fgx_node *n = gp->node[k];
    c->node = (int)k;
    if (!n->op_type || !n->op_type[0])
      return fgx_fail(c, n, FG_INVALID_GRAPH, "the node has no op_type");
    for (size_t i = 0; i < n->n_input; i++) {
      if (!n->input[i] || !n->input[i][0]) continue; /* an absent optional input */
      int v = fgx_value_index(c, n->input[i]);
      if (v < 0) return undefined_input(c, k, i);
      c->vals[v].used = 1;
    }
    for (size_t o = 0; o < n->n_output; o++) {
      if (!n->output[o] || !n->output[o][0]) continue; /* an unused optional output */
      int v = fgx_value_index(c, n->output[o]);
      if (v >= 0) {
        char buf[300];
        return fgx_fail(c, n, FG_INVALID_GRAPH, "output %zu '%s' is already produced by %s", o,
                        n->output[o], producer_text(c, c->vals[v].producer, buf, sizeof buf));
      }
      if (fgx_value_add(c, n->output[o], (int)k) < 0) return -1;
    }
  }
  c->node = -1;
  if (gp->n_output == 0) return fgx_fail_model(c, FG_INVALID_GRAPH, "the graph has no outputs");
  for (size_t j = 0; j < gp->n_output; j++) {
    const char *name = gp->output[j]->name;
    int v = name ? fgx_value_index(c, name) : -1;
    if (v < 0)
      return fgx_fail_model(c, FG_INVALID_GRAPH, "graph output[%zu] '%s' names no tensor", j,
                            name ? name : "");
    if (c->vals[v].output_index > 0)
      return fgx_fail_model(c, FG_INVALID_GRAPH,
                            "graph output '%s' is listed twice (outputs %d and %zu)", name,
                            c->vals[v].output_index - 1, j);
    c->vals[v].output_index = (int)j + 1;
    c->vals[v].used = 1;
    c->vals[v].info = gp->output[j];
  }
  /* value_info naming no tensor says nothing about this graph: ignored. */
  for (size_t j = 0; j < gp->n_value_info; j++) {
    int v = gp->value_info[j]->name ? fgx_value_index(c, gp->value_info[j]->name) : -1;
    if (v >= 0 && !c->vals[v].info) c->vals[v].info = gp->value_info[j];
  }
  return 0;
}

/* ---- graph inputs --------------------------------------------------------- */

static int input_type(fgx_ctx *c, const Onnx__ValueInfoProto *vi, fg_dtype *dt, int *rank,
                      int64_t *dims) {
  const Onnx__TypeProto *tp = vi->type;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
    return fgx_fail_model(c, FG_UNSUPPORTED,
                          "graph input '%s' is not a tensor (sequences, maps and optionals are "
                          "not supported)",
                          vi->name);
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  *dt = fgx_dtype_from_onnx(tt->has_elem_type ? tt->elem_type : 0);
  if (*dt == FG_DTYPE_INVALID)
    return fgx_fail_model(c, FG_UNSUPPORTED,
                          "graph input '%s' has elem_type %s, which flowgraph does not support",
                          vi->name, fgx_onnx_dtype_name(tt->has_elem_type ? tt->elem_type : 0));
  if (!tt->shape)
    return fgx_fail_model(c, FG_UNSUPPORTED,
                          "graph input '%s' has no shape (flowgraph needs every input's rank)",
                          vi->name);
  if (tt->shape->n_dim > FG_MAX_RANK)
    return fgx_fail_model(c, FG_UNSUPPORTED, "graph input '%s' has rank %zu, above %d", vi->name,
                          tt->shape->n_dim, FG_MAX_RANK);
  *rank = (int)tt->shape->n_dim;
  for (int i = 0; i < *rank; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      if (d->dim_value < 0)
        return fgx_fail_model(c, FG_INVALID_GRAPH, "graph input '%s': dimension %d is %lld",
                              vi->name, i, (long long)d->dim_value);
      dims[i] = d->dim_value;
      continue;
    }
    const char *param = d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM
                            ? str_or(d->dim_param, "?")
                            : "?";
    if (i != 0)
      return fgx_fail_model(c, FG_UNSUPPORTED,
                            "graph input '%s': dimension %d is symbolic ('%s'); flowgraph "
                            "supports an unknown leading (batch) dimension only",
                            vi->name, i, param);
    dims[i] = FG_DIM_UNKNOWN;
  }
  return 0;
}

static int make_inputs(fgx_ctx *c) {
  for (size_t i = 0; i < c->graph->n_input; i++) {
    const Onnx__ValueInfoProto *vi = c->graph->input[i];
    int v = fgx_value_index(c, vi->name);
    if (v < 0 || c->vals[v].producer != FGX_FROM_INPUT) continue; /* an initializer */
    fg_dtype dt = FG_DTYPE_INVALID;
    int rank = 0;
    int64_t dims[FG_MAX_RANK];
    if (input_type(c, vi, &dt, &rank, dims) != 0) return -1;
    const char *name = fgx_unique_name(c, vi->name);
    if (!name) return -1;
    fg_output o = fg_placeholder(c->g, name, dt, rank, dims);
    if (o.node < 0) {
      fg_status *gs = fg_status_new();
      fg_code code = fg_graph_status(c->g, gs);
      fgx_fail_model(c, code ? code : FG_INTERNAL, "graph input '%s': %s", vi->name,
                     fg_status_message(gs));
      fg_status_free(gs);
      return -1;
    }
    if (fgx_mark_fixed(c, o.node) != 0) return -1;
    c->vals[v].out = o;
    if (rank > 0 && dims[0] == FG_DIM_UNKNOWN && c->batch_src.node < 0) c->batch_src = o;
  }
  return 0;
}

/* ---- nodes ---------------------------------------------------------------- */

/* Names the flowgraph nodes node k's mapper made (ids from `first`): the
 * one that makes output 0 gets the ONNX node's name (or "<op_type>_<k>"),
 * the others that name plus "/<flowgraph op>", all made unique. */
static int name_nodes(fgx_ctx *c, const fgx_node *n, int k, int first) {
  int last = fg_graph_num_nodes(c->g), main_node = -1;
  if (fgx_has_output(n, 0)) {
    int v = fgx_value_index(c, n->output[0]);
    if (v >= 0 && c->vals[v].out.node >= first && !fgx_is_fixed(c, c->vals[v].out.node))
      main_node = c->vals[v].out.node;
  }
  char base[3100];
  if (n->name && n->name[0])
    snprintf(base, sizeof base, "%.3000s", n->name);
  else
    snprintf(base, sizeof base, "%.64s_%d", n->op_type, k);
  for (int id = first; id < last; id++) {
    if (fgx_is_fixed(c, id)) continue;
    char want[3200];
    if (id == main_node)
      snprintf(want, sizeof want, "%s", base);
    else
      snprintf(want, sizeof want, "%s/%s", base, fg_node_op(c->g, id));
    const char *cur = fg_node_name(c->g, id);
    if (cur && strcmp(cur, want) == 0) continue;
    const char *name = fgx_unique_name(c, want);
    if (!name) return -1;
    if (fg_set_name(c->g, (fg_output){id, 0}, name).node < 0)
      return fgx_fail(c, n, FG_INTERNAL, "naming node %d '%s' failed", id, name);
  }
  return 0;
}

/* Output o of node n against what the file's value_info (or graph output)
 * declares: the dtype, the rank and every dimension known on both sides.
 * A difference is a wrong file or a wrong mapping; either way the import
 * must not go on with a graph that computes something else. */
static int check_declared(fgx_ctx *c, const fgx_node *n, size_t o, const fgx_value *x) {
  const Onnx__TypeProto *tp = x->info ? x->info->type : NULL;
  if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type) return 0;
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  fg_dtype dt;
  int rank;
  int64_t dims[FG_MAX_RANK];
  if (x->known.t) {
    dt = fg_tensor_dtype(x->known.t);
    rank = fg_tensor_rank(x->known.t);
    memcpy(dims, fg_tensor_dims(x->known.t), (size_t)rank * sizeof *dims);
  } else {
    dt = fg_output_dtype(c->g, x->out);
    rank = fg_output_shape(c->g, x->out, dims);
  }
  if (tt->has_elem_type && tt->elem_type != 0 && fgx_dtype_from_onnx(tt->elem_type) != dt)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "output %zu '%s' is %s here, but the model declares %s (value_info)", o,
                    x->name, fg_dtype_name(dt), fgx_onnx_dtype_name(tt->elem_type));
  if (!tt->shape || rank < 0) return 0;
  int same = (size_t)rank == tt->shape->n_dim;
  for (int i = 0; same && i < rank; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
        dims[i] != FG_DIM_UNKNOWN && d->dim_value != dims[i])
      same = 0;
  }
  if (same) return 0;
  char got[160] = "", want[160] = "";
  for (int i = 0; i < rank; i++)
    snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "",
             (long long)dims[i]);
  for (size_t i = 0; i < tt->shape->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
    if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "," : "",
               (long long)d->dim_value);
    else
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s?", i ? "," : "");
  }
  return fgx_fail(c, n, FG_INVALID_GRAPH,
                  "output %zu '%s' has shape [%s] here, but the model declares [%s] "
                  "(value_info; -1 is the unknown batch)",
                  o, x->name, got, want);
}

/* The graph's sticky error after a mapper, as this node's error. */
static int graph_error(fgx_ctx *c, const fgx_node *n) {
  fg_status *gs = fg_status_new();
  fg_code code = fg_graph_status(c->g, gs);
  int r = 0;
  if (code != FG_OK) r = fgx_fail(c, n, code, "%s", fg_status_message(gs));
  fg_status_free(gs);
  return r;
}

static int map_nodes(fgx_ctx *c) {
  for (size_t k = 0; k < c->graph->n_node; k++) {
    const fgx_node *n = c->graph->node[k];
    c->node = (int)k;
    int first = fg_graph_num_nodes(c->g);
    int r = node_mapper(n)(c, n);
    if (c->failed || graph_error(c, n) != 0) return -1;
    if (r != 0) return fgx_fail(c, n, FG_INTERNAL, "the mapper failed without saying why");
    for (size_t o = 0; o < n->n_output; o++) {
      if (!fgx_has_output(n, (int)o)) continue;
      fgx_value *x = &c->vals[fgx_value_index(c, n->output[o])];
      if (x->used && x->out.node < 0 && !x->known.t)
        return fgx_fail(c, n, FG_UNIMPLEMENTED,
                        "output %zu '%s' is used, but flowgraph's mapping of %s does not make it",
                        o, x->name, n->op_type);
      if ((x->out.node >= 0 || x->known.t) && check_declared(c, n, o, x) != 0) return -1;
    }
    if (name_nodes(c, n, (int)k, first) != 0) return -1;
  }
  c->node = -1;
  return 0;
}

/* ---- graph outputs and metadata ------------------------------------------ */

static int make_output(fgx_ctx *c, size_t j) {
  const char *name = c->graph->output[j]->name;
  int v = fgx_value_index(c, name);
  fg_output o = fgx_materialize(c, v, NULL);
  if (o.node < 0) return -1;
  char want[3100];
  snprintf(want, sizeof want, "%.3000s", name);
  for (char *p = want; *p; p++)
    if (*p == ':') *p = '_';
  int id = fg_graph_find(c->g, want);
  if (id == o.node && o.index == 0) {
    /* already so named (an input or initializer that is also an output) */
  } else if (id < 0 && o.index == 0 && !fgx_is_fixed(c, o.node)) {
    if (fg_set_name(c->g, o, want).node < 0) return graph_error(c, NULL), -1;
  } else {
    /* The name belongs to another node of the importer's naming: free it. */
    if (id >= 0 && !fgx_is_fixed(c, id)) {
      const char *other = fgx_unique_name(c, want);
      if (!other || fg_set_name(c->g, (fg_output){id, 0}, other).node < 0) return -1;
    }
    const char *ident = fgx_unique_name(c, want);
    if (!ident) return -1;
    o = fg_set_name(c->g, fg_identity(c->g, o), ident);
    if (o.node < 0) return fgx_fail_model(c, FG_INTERNAL, "graph output '%s': no identity", name);
  }
  if (fgx_mark_fixed(c, o.node) != 0) return -1;
  if (fg_graph_add_output(c->g, o) != 0 || graph_error(c, NULL) != 0)
    return fgx_fail_model(c, FG_INTERNAL, "graph output '%s' could not be marked", name);
  return 0;
}

static int set_meta(fgx_ctx *c, const char *key, const char *value) {
  if (!value || !value[0]) return 0;
  if (fg_graph_set_metadata(c->g, key, value) != 0)
    return fgx_fail_model(c, FG_RESOURCE_EXHAUSTED, "metadata '%s': out of memory", key);
  return 0;
}

static int make_metadata(fgx_ctx *c) {
  const Onnx__ModelProto *m = c->model;
  char num[32];
  int r = set_meta(c, "onnx.producer_name", m->producer_name);
  r |= set_meta(c, "onnx.producer_version", m->producer_version);
  r |= set_meta(c, "onnx.domain", m->domain);
  r |= set_meta(c, "onnx.doc_string", m->doc_string);
  r |= set_meta(c, "onnx.graph.name", c->graph->name);
  r |= set_meta(c, "onnx.graph.doc_string", c->graph->doc_string);
  if (m->has_model_version) {
    snprintf(num, sizeof num, "%lld", (long long)m->model_version);
    r |= set_meta(c, "onnx.model_version", num);
  }
  if (m->has_ir_version) {
    snprintf(num, sizeof num, "%lld", (long long)m->ir_version);
    r |= set_meta(c, "onnx.ir_version", num);
  }
  snprintf(num, sizeof num, "%d", c->opset);
  r |= set_meta(c, "onnx.opset", num);
  for (size_t i = 0; i < m->n_metadata_props && !r; i++) {
    const Onnx__StringStringEntryProto *e = m->metadata_props[i];
    if (!e->key || !e->key[0]) continue;
    char *key = fgx_alloc(c, strlen(e->key) + 32);
    if (!key) return -1;
    sprintf(key, "onnx.metadata_props.%s", e->key);
    r |= set_meta(c, key, e->value ? e->value : "");
  }
  return r ? -1 : 0;
}

/* ---- entry points --------------------------------------------------------- */

static int import(fgx_ctx *c) {
  c->graph = c->model->graph;
  if (read_opset(c) != 0) return -1;
  if (!c->graph) return fgx_fail_model(c, FG_INVALID_GRAPH, "the model has no graph");
  if (check_inputs_outputs(c) != 0 || check_nodes(c) != 0 || check_mapped(c) != 0) return -1;
  if (make_inputs(c) != 0 || map_nodes(c) != 0) return -1;
  for (size_t j = 0; j < c->graph->n_output; j++)
    if (make_output(c, j) != 0) return -1;
  return make_metadata(c);
}

/* The unpacked model of data[0, size), or NULL with st set. */
static Onnx__ModelProto *unpack(const uint8_t *data, size_t size, fg_status *st) {
  if (!data && size) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_onnx_load_memory: data is NULL");
    return NULL;
  }
  char where[512];
  if (size == 0) {
    fg_status_set(st, FG_FORMAT_ERROR, "ONNX model: the file is empty");
    return NULL;
  }
  /* The wire walk first: it says where a malformed file goes wrong, and
   * it bounds the nesting protobuf-c would otherwise recurse into. */
  if (fgx_wire_check(data, size, where, sizeof where) != 0) {
    fg_status_set(st, FG_FORMAT_ERROR, "ONNX model: not a well-formed ModelProto: %s", where);
    return NULL;
  }
  Onnx__ModelProto *model = onnx__model_proto__unpack(NULL, size, data);
  if (!model)
    fg_status_set(st, FG_FORMAT_ERROR,
                  "ONNX model: not a well-formed ModelProto (protobuf-c refused its %zu bytes)",
                  size);
  return model;
}

/* The graph of an unpacked model, which it frees. Every field the import
 * reads is a copy in the unpacked message, so fg_onnx_load frees the
 * file's buffer before this runs: a large model's bytes are not held a
 * third time while its tensors are made. */
/* The initializers whose raw_data the file keeps (fgx_stream_compact's
 * ranges) into c: each one's length into its decoded (empty) raw_data, its
 * offset into c->self_raw. 0, or -1 after fgx_fail_model. */
static int self_ranges(fgx_ctx *c, const fgx_stream_src *src) {
  const Onnx__GraphProto *g = c->model->graph;
  c->self = src->f;
  c->self_raw = malloc((src->n_ranges + 1) * sizeof *c->self_raw);
  if (!c->self_raw) return fgx_fail_model(c, FG_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < src->n_ranges; i++) {
    const fgx_raw_range *r = &src->ranges[i];
    Onnx__TensorProto *tp =
        g && r->init >= 0 && (size_t)r->init < g->n_initializer ? g->initializer[r->init] : NULL;
    /* The walk and protobuf-c read the same fields: unreachable. */
    if (!tp || !tp->has_raw_data || tp->raw_data.len != 0 || r->length > SIZE_MAX)
      return fgx_fail_model(c, FG_INTERNAL,
                            "initializer %ld: its raw_data was not where the "
                            "file's walk found it",
                            r->init);
    free(tp->raw_data.data);
    tp->raw_data.data = NULL;
    tp->raw_data.len = (size_t)r->length;
    c->self_raw[c->n_self_raw++] = (fgx_self_raw){tp, r->offset};
  }
  fgx_self_raw_sort(c);
  return 0;
}

static fg_graph *load_model(Onnx__ModelProto *model, const fg_onnx_options *opts,
                            const char *base_dir, const fgx_stream_src *src, fg_status *st) {
  if (!model) return NULL;
  fgx_ctx c;
  memset(&c, 0, sizeof c);
  c.model = model;
  c.st = st;
  c.node = -1;
  c.batch_src = FG_NO_OUTPUT;
  c.trainable = opts ? opts->trainable : 0;
  c.base_dir = base_dir;
  c.g = fg_graph_new();
  if (!c.g) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "ONNX model: out of memory");
  } else if ((src && self_ranges(&c, src) != 0) || import(&c) != 0) {
    fg_graph_free(c.g);
    c.g = NULL;
  } else {
    fg_status_clear(st);
  }
  fgx_values_free(&c);
  free(c.self_raw);
  fg_batch_shapes_free(&c.at_batch[0]);
  fg_batch_shapes_free(&c.at_batch[1]);
  onnx__model_proto__free_unpacked(model, NULL);
  return c.g;
}

fg_graph *fg_onnx_load_memory(const void *data, size_t size, const fg_onnx_options *opts,
                              fg_status *status) {
  return load_model(unpack(data, size, status), opts, opts ? opts->base_dir : NULL, NULL, status);
}

/* Protobuf messages stop at 2 GiB; larger weights travel as external data. */
#define FGX_MAX_FILE ((size_t)INT32_MAX)

/* The whole of f (from its start; size from fstat for a regular file, or
 * 0) into a new buffer of *n bytes, or NULL with status set. */
static uint8_t *read_all(FILE *f, const char *path, int regular, uint64_t size, size_t *n,
                         fg_status *status) {
  size_t cap = regular ? (size_t)size + 1 : 65536;
  uint8_t *buf = fseeko(f, 0, SEEK_SET) == 0 || !regular ? malloc(cap) : NULL;
  *n = 0;
  while (buf) {
    *n += fread(buf + *n, 1, cap - *n, f);
    if (*n < cap || cap > FGX_MAX_FILE) break;
    uint8_t *bigger = realloc(buf, cap * 2);
    if (!bigger) free(buf);
    buf = bigger;
    cap *= 2;
  }
  int read_error = ferror(f);
  if (!buf || read_error || *n > FGX_MAX_FILE) {
    free(buf);
    fg_status_set(status, buf ? FG_IO_ERROR : FG_RESOURCE_EXHAUSTED, "ONNX file '%s': %s", path,
                  !buf         ? "out of memory"
                  : read_error ? "read error"
                               : "above 2 GiB");
    return NULL;
  }
  return buf;
}

/* f opened, or NULL with status set. */
static FILE *open_model(const char *path, struct stat *sb, fg_status *status) {
  FILE *f = fopen(path, "rb");
  if (!f || fstat(fileno(f), sb) != 0 || S_ISDIR(sb->st_mode)) {
    int err = f ? (S_ISDIR(sb->st_mode) ? EISDIR : errno) : errno;
    if (f) fclose(f);
    fg_status_set(status, err == ENOENT ? FG_NOT_FOUND : FG_IO_ERROR, "ONNX file '%s': %s", path,
                  strerror(err));
    return NULL;
  }
  if (S_ISREG(sb->st_mode) && (uint64_t)sb->st_size > FGX_MAX_FILE) {
    fclose(f);
    fg_status_set(status, FG_FORMAT_ERROR,
                  "ONNX file '%s': %lld bytes, above protobuf's 2 GiB limit for one message", path,
                  (long long)sb->st_size);
    return NULL;
  }
  return f;
}

/* Names the file in front of what went wrong inside it. */
static void name_file(const char *path, fg_status *status) {
  fg_status *tmp = fg_status_new();
  if (tmp) {
    fg_status_copy(tmp, status);
    fg_status_set(status, fg_status_code(tmp), "%s: %s", path, fg_status_message(tmp));
    fg_status_free(tmp);
  }
}

/* A regular file is read without its initializers' large payloads where
 * it can be (onnx_stream.c), which the import then reads from the file
 * into the graph's tensors; else whole. */
fg_graph *fg_onnx_load(const char *path, const fg_onnx_options *opts, fg_status *status) {
  if (!path) {
    fg_status_set(status, FG_INVALID_ARGUMENT, "fg_onnx_load: path is NULL");
    return NULL;
  }
  struct stat sb;
  FILE *f = open_model(path, &sb, status);
  if (!f) return NULL;
  /* External data is found beside the model unless the caller says. */
  char *dir = NULL;
  const char *base = opts ? opts->base_dir : NULL;
  if (!base) {
    const char *slash = strrchr(path, '/');
    dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    base = dir;
  }
  fgx_raw_range *ranges = NULL;
  fgx_stream_src src = {f, NULL, 0};
  size_t n = 0;
  const int regular = S_ISREG(sb.st_mode);
  uint8_t *buf = regular && base
                     ? fgx_stream_compact(f, (uint64_t)sb.st_size, &n, &ranges, &src.n_ranges)
                     : NULL;
  src.ranges = ranges;
  Onnx__ModelProto *model = buf ? unpack(buf, n, status) : NULL;
  free(buf);
  if (!model && base) {
    /* Not of the walk's shape, or malformed: decoded whole, so that the
     * wire check names the byte of the file, not of the walk's copy. */
    free(ranges);
    ranges = NULL, src.n_ranges = 0;
    clearerr(f);
    buf = read_all(f, path, regular, (uint64_t)sb.st_size, &n, status);
    model = buf ? unpack(buf, n, status) : NULL;
    free(buf);
  }
  if (!base) fg_status_set(status, FG_RESOURCE_EXHAUSTED, "out of memory");
  fg_graph *g = load_model(model, opts, base, src.n_ranges ? &src : NULL, status);
  if (!g && fg_status_code(status) != FG_OK) name_file(path, status);
  fclose(f);
  free(ranges);
  free(dir);
  return g;
}

/* ---- sniffing ------------------------------------------------------------- */

static int read_varint(const uint8_t *p, size_t size, size_t *pos, uint64_t *v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *pos < size; shift += 7) {
    uint8_t b = p[(*pos)++];
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return 0;
  }
  return -1;
}

int fg_onnx_sniff(const void *data, size_t size) {
  const uint8_t *p = data;
  if (!p || size < 2) return 0;
  size_t pos = 0;
  int fields = 0, strong = 0;
  /* ModelProto's fields and their wire types (0 varint, 2 bytes). */
  while (pos < size && fields < 8) {
    uint64_t tag, v;
    if (read_varint(p, size, &pos, &tag) != 0) break;
    unsigned field = (unsigned)(tag >> 3), wt = (unsigned)(tag & 7);
    int want = field == 1 || field == 5 ? 0
               : field == 2 || field == 3 || field == 4 || field == 6 || field == 7 || field == 8 ||
                       field == 14 || field == 20 || field == 25
                   ? 2
                   : -1;
    if (want < 0 || (int)wt != want) return 0;
    if (read_varint(p, size, &pos, &v) != 0) break;  /* the sniffed prefix ends here */
    if (field == 1 && v >= 1 && v <= 64) strong = 1; /* ir_version */
    if (field == 7 || field == 8) strong = 1;        /* graph, opset_import */
    fields++;
    if (wt == 2) {
      if (v > size - pos) break; /* runs past the prefix: fine for a sniff */
      pos += (size_t)v;
    }
  }
  return fields >= 2 && strong;
}
