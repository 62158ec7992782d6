/* The passes' working copy of a graph (passes.h): cheap to make. It owns
 * the arrays a graph may reallocate without a new version (each node's
 * attribute array: fg_session_save adds and drops an attribute of every
 * variable without one, through the shared graph) and the inputs the
 * passes rewire; the strings, tensors and output types inside stay the
 * source's, which change only with its version. Constants a pass appends
 * (ids from n_src on) own everything. */
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

static int oom(fg_status *st) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "passes: out of memory (working copy of the graph)");
  return -1;
}

static int copy_arrays(fg_node *dst, const fg_node *src) {
  dst->inputs = malloc(((size_t)src->n_inputs + 1) * sizeof *dst->inputs);
  dst->attrs.items = malloc(((size_t)src->attrs.n + 1) * sizeof *dst->attrs.items);
  dst->attrs.cap = src->attrs.n;
  if (!dst->inputs || !dst->attrs.items) return -1;
  if (src->n_inputs) memcpy(dst->inputs, src->inputs, (size_t)src->n_inputs * sizeof *src->inputs);
  if (src->attrs.n)
    memcpy(dst->attrs.items, src->attrs.items, (size_t)src->attrs.n * sizeof *src->attrs.items);
  return 0;
}

fg_pass_graph *fg_pass_graph_new(const fg_graph *src, fg_status *st) {
  fg_pass_graph *w = calloc(1, sizeof *w);
  size_t n = (size_t)src->n_nodes;
  if (!w) return oom(st), NULL;
  w->g = *src; /* the error and scope: borrowed */
  /* Plans need neither, and save rewrites the metadata in place. */
  w->g.outputs = NULL, w->g.n_outputs = w->g.cap_outputs = 0;
  w->g.meta_keys = w->g.meta_vals = NULL, w->g.n_meta = w->g.cap_meta = 0;
  w->g.nodes = calloc(n + 1, sizeof *w->g.nodes);
  w->g.cap_nodes = src->n_nodes;
  w->n_src = src->n_nodes;
  w->g.name_index = malloc(((size_t)src->name_cap + 1) * sizeof *w->g.name_index);
  w->attrs_owned = calloc(n + 1, 1);
  w->outputs_owned = calloc(n + 1, 1);
  if (!w->g.nodes || !w->g.name_index || !w->attrs_owned || !w->outputs_owned) {
    w->g.n_nodes = 0;
    fg_pass_graph_free(w);
    return oom(st), NULL;
  }
  if (src->name_cap)
    memcpy(w->g.name_index, src->name_index, (size_t)src->name_cap * sizeof *src->name_index);
  for (size_t i = 0; i < n; i++) {
    w->g.nodes[i] = src->nodes[i];
    w->g.nodes[i].inputs = NULL;
    w->g.nodes[i].attrs.items = NULL;
  }
  for (size_t i = 0; i < n; i++)
    if (copy_arrays(&w->g.nodes[i], &src->nodes[i]) != 0) {
      fg_pass_graph_free(w);
      return oom(st), NULL;
    }
  return w;
}

int fg_pass_graph_placed_as(const fg_pass_graph *w, int id) {
  return id < w->n_src ? id : w->placed_as[id];
}

void fg_pass_graph_free(fg_pass_graph *w) {
  if (!w) return;
  for (int i = 0; w->g.nodes && i < w->g.n_nodes; i++) {
    free(w->g.nodes[i].inputs);
    if (i >= w->n_src) {
      free(w->g.nodes[i].name);
      free(w->g.nodes[i].device);
    }
    if (w->attrs_owned && w->attrs_owned[i])
      fg_attrs_clear(&w->g.nodes[i].attrs);
    else
      free(w->g.nodes[i].attrs.items);
    /* An appended node's outputs are marked owned when it is made. */
    if (w->outputs_owned && w->outputs_owned[i]) free(w->g.nodes[i].outputs);
  }
  free(w->g.nodes);
  free(w->multi_of);
  free(w->placed_as);
  free(w->g.name_index);
  free(w->attrs_owned);
  free(w->outputs_owned);
  free(w);
}

int fg_pass_graph_own_attrs(fg_pass_graph *w, int id) {
  if (w->attrs_owned[id]) return 0;
  struct fg_attrs copy;
  memset(&copy, 0, sizeof copy);
  if (fg_attrs_copy(&copy, &w->g.nodes[id].attrs) != 0) return -1;
  free(w->g.nodes[id].attrs.items);
  w->g.nodes[id].attrs = copy;
  w->attrs_owned[id] = 1;
  return 0;
}

/* Node id's attributes emptied and made the copy's own. */
static void drop_attrs(fg_pass_graph *w, int id) {
  fg_node *n = &w->g.nodes[id];
  if (w->attrs_owned[id])
    fg_attrs_clear(&n->attrs);
  else
    free(n->attrs.items);
  memset(&n->attrs, 0, sizeof n->attrs);
  w->attrs_owned[id] = 1;
}

/* Node id's attributes replaced by its placement attribute alone (none if
 * it has none) and `extra` (may be NULL: a tensor attribute, taken over,
 * freed on failure too). */
static int keep_placement(fg_pass_graph *w, int id, fg_attr *extra) {
  fg_node *n = &w->g.nodes[id];
  const fg_attr *co = fg_attrs_find(&n->attrs, FG_COLOCATE_ATTR);
  char *colocate = co && co->type == FG_ATTR_STRING && co->s ? fg_strdup(co->s) : NULL;
  fg_attr *items = calloc(2, sizeof *items);
  if ((co && co->s && !colocate) || !items) {
    free(colocate), free(items);
    if (extra) free(extra->name), fg_tensor_free(extra->t); /* a constant's value */
    return -1;
  }
  drop_attrs(w, id);
  n->attrs.items = items;
  n->attrs.cap = 1;
  if (extra) {
    items[0] = *extra;
    n->attrs.n = 1;
  }
  int rc = colocate ? fg_attrs_set_string(&n->attrs, FG_COLOCATE_ATTR, colocate) : 0;
  free(colocate);
  return rc;
}

int fg_pass_graph_set_constant(fg_pass_graph *w, int id, fg_tensor *value) {
  fg_node *n = &w->g.nodes[id];
  /* A constant takes only its value and where it is placed. */
  char *name = fg_strdup("value");
  if (!name) {
    fg_tensor_free(value);
    return -1;
  }
  fg_attr v = {.name = name, .type = FG_ATTR_TENSOR, .t = value};
  if (keep_placement(w, id, &v) != 0) return -1;
  n->op = FG_OP_CONSTANT;
  n->n_inputs = 0;
  return 0;
}

int fg_pass_graph_set_op(fg_pass_graph *w, int id, int op, const fg_output *inputs, int n_inputs) {
  fg_node *n = &w->g.nodes[id];
  fg_output *in = malloc(((size_t)n_inputs + 1) * sizeof *in);
  if (!in || keep_placement(w, id, NULL) != 0) {
    free(in);
    return -1;
  }
  memcpy(in, inputs, (size_t)n_inputs * sizeof *in);
  free(n->inputs);
  n->inputs = in;
  n->n_inputs = n_inputs;
  n->op = op;
  return 0;
}

int fg_pass_graph_set_attrs(fg_pass_graph *w, int id, const struct fg_attrs *src) {
  struct fg_attrs copy;
  memset(&copy, 0, sizeof copy);
  if (fg_attrs_copy(&copy, src) != 0) {
    fg_attrs_clear(&copy);
    return -1;
  }
  drop_attrs(w, id);
  w->g.nodes[id].attrs = copy;
  return 0;
}

/* Room for one more node. 0 or -1. */
static int reserve_node(fg_pass_graph *w) {
  fg_graph *g = &w->g;
  if (g->n_nodes < g->cap_nodes) return 0;
  int cap = g->cap_nodes + g->cap_nodes / 4 + 8;
  fg_node *nodes = realloc(g->nodes, ((size_t)cap + 1) * sizeof *nodes);
  if (nodes) g->nodes = nodes;
  unsigned char *owned = realloc(w->attrs_owned, (size_t)cap + 1);
  if (owned) w->attrs_owned = owned;
  unsigned char *outs = realloc(w->outputs_owned, (size_t)cap + 1);
  if (outs) w->outputs_owned = outs;
  int *placed = realloc(w->placed_as, ((size_t)cap + 1) * sizeof *placed);
  if (placed) w->placed_as = placed;
  if (!nodes || !owned || !outs || !placed) return -1;
  g->cap_nodes = cap;
  return 0;
}

int fg_pass_graph_append_constant(fg_pass_graph *w, const char *name, fg_tensor *value, int like) {
  if (reserve_node(w) != 0) {
    fg_tensor_free(value);
    return -1;
  }
  int id = w->g.n_nodes;
  const fg_node *l = &w->g.nodes[like];
  fg_node *n = &w->g.nodes[id];
  memset(n, 0, sizeof *n);
  w->placed_as[id] = fg_pass_graph_placed_as(w, like);
  w->attrs_owned[id] = 1;
  w->outputs_owned[id] = 1; /* as everything an appended node holds */
  n->op = FG_OP_CONSTANT;
  n->name = fg_strdup(name);
  n->device = l->device ? fg_strdup(l->device) : NULL;
  n->inputs = malloc(sizeof *n->inputs);
  n->outputs = calloc(1, sizeof *n->outputs);
  n->n_outputs = 1;
  /* Counted in from here, so that freeing the copy frees what it holds. */
  w->g.n_nodes++;
  const fg_attr *co = fg_attrs_find(&l->attrs, FG_COLOCATE_ATTR);
  if (!n->name || (l->device && !n->device) || !n->inputs || !n->outputs ||
      (co && co->type == FG_ATTR_STRING && co->s &&
       fg_attrs_set_string(&n->attrs, FG_COLOCATE_ATTR, co->s) != 0)) {
    fg_tensor_free(value);
    return -1;
  }
  n->outputs[0].dtype = value->dtype;
  n->outputs[0].rank = value->rank;
  for (int d = 0; d < value->rank; d++)
    n->outputs[0].dims[d] = value->dims[d];
  /* The value last: keep_placement keeps the colocation just set. */
  return fg_pass_graph_set_constant(w, id, value) == 0 ? id : -1;
}

int fg_pass_graph_set_outputs(fg_pass_graph *w, int id, const fg_tinfo *outputs, int n) {
  fg_tinfo *o = malloc(((size_t)n + 1) * sizeof *o);
  if (!o) return -1;
  memcpy(o, outputs, (size_t)n * sizeof *o);
  if (w->outputs_owned[id]) free(w->g.nodes[id].outputs);
  w->g.nodes[id].outputs = o;
  w->g.nodes[id].n_outputs = n;
  w->outputs_owned[id] = 1;
  return 0;
}
