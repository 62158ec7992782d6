/* The passes' working copy of a graph (passes.h): cheap to make, since it
 * borrows everything but the inputs arrays, which the passes rewire. */
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"

static int oom(fg_status *st) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "passes: out of memory (working copy of the graph)");
  return -1;
}

static int copy_inputs(fg_node *dst, const fg_node *src) {
  dst->inputs = malloc(((size_t)src->n_inputs + 1) * sizeof *dst->inputs);
  if (!dst->inputs) return -1;
  if (src->n_inputs) memcpy(dst->inputs, src->inputs, (size_t)src->n_inputs * sizeof *src->inputs);
  return 0;
}

fg_pass_graph *fg_pass_graph_new(const fg_graph *src, fg_status *st) {
  fg_pass_graph *w = calloc(1, sizeof *w);
  size_t n = (size_t)src->n_nodes;
  if (!w) return oom(st), NULL;
  w->g = *src; /* names, outputs, metadata, error and scope: borrowed */
  w->g.nodes = calloc(n + 1, sizeof *w->g.nodes);
  w->g.cap_nodes = src->n_nodes;
  w->g.name_index = malloc(((size_t)src->name_cap + 1) * sizeof *w->g.name_index);
  w->attrs_owned = calloc(n + 1, 1);
  if (!w->g.nodes || !w->g.name_index || !w->attrs_owned) {
    w->g.n_nodes = 0;
    fg_pass_graph_free(w);
    return oom(st), NULL;
  }
  if (src->name_cap)
    memcpy(w->g.name_index, src->name_index, (size_t)src->name_cap * sizeof *src->name_index);
  for (size_t i = 0; i < n; i++) {
    w->g.nodes[i] = src->nodes[i];
    w->g.nodes[i].inputs = NULL;
  }
  for (size_t i = 0; i < n; i++)
    if (copy_inputs(&w->g.nodes[i], &src->nodes[i]) != 0) {
      fg_pass_graph_free(w);
      return oom(st), NULL;
    }
  return w;
}

void fg_pass_graph_free(fg_pass_graph *w) {
  if (!w) return;
  for (int i = 0; w->g.nodes && i < w->g.n_nodes; i++) {
    free(w->g.nodes[i].inputs);
    if (w->attrs_owned && w->attrs_owned[i]) fg_attrs_clear(&w->g.nodes[i].attrs);
  }
  free(w->g.nodes);
  free(w->g.name_index);
  free(w->attrs_owned);
  free(w);
}

void fg_pass_graph_refresh(fg_pass_graph *w, const fg_graph *src) {
  if (!w) return;
  for (int i = 0; i < w->g.n_nodes && i < src->n_nodes; i++)
    if (!w->attrs_owned[i]) w->g.nodes[i].attrs = src->nodes[i].attrs;
}

int fg_pass_graph_own_attrs(fg_pass_graph *w, int id) {
  if (w->attrs_owned[id]) return 0;
  struct fg_attrs copy;
  memset(&copy, 0, sizeof copy);
  if (fg_attrs_copy(&copy, &w->g.nodes[id].attrs) != 0) return -1;
  w->g.nodes[id].attrs = copy;
  w->attrs_owned[id] = 1;
  return 0;
}
