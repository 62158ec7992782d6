/* fg_graph_flops_at_batch: the op table's FLOP counts of every node with
 * the placeholders' unknown dimensions given a size, so that `flowgraph
 * inspect --batch N` can total a model whose work depends on its batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowgraph/graph.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"

static int known(const fg_tinfo *t) {
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d] < 0) return 0;
  return 1;
}

/* Node id's outputs into shapes[first[id]...] from its inputs' resolved
 * shapes, and its FLOPs; a placeholder's unknown dimensions become batch. */
static int resolve_node(const fg_graph *g, int id, int64_t batch, fg_tinfo *shapes,
                        const int *first, int64_t *flops, fg_status *st) {
  const fg_node *n = &g->nodes[id];
  fg_tinfo in_stack[8],
      *in = n->n_inputs <= 8 ? in_stack : malloc((size_t)n->n_inputs * sizeof *in);
  if (!in) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_graph_flops_at_batch: out of memory");
    return -1;
  }
  int all_known = 1;
  for (int i = 0; i < n->n_inputs; i++) {
    in[i] = shapes[first[n->inputs[i].node] + n->inputs[i].index];
    all_known &= known(&in[i]);
  }
  fg_tinfo *out = &shapes[first[id]];
  int rc = fg_infer(n, in, out, st);
  if (rc == 0 && strcmp(fg_op_table[n->op].name, "placeholder") == 0)
    for (int o = 0; o < n->n_outputs; o++)
      for (int d = 0; d < out[o].rank; d++)
        if (out[o].dims[d] < 0) out[o].dims[d] = batch;
  for (int o = 0; rc == 0 && o < n->n_outputs; o++)
    all_known &= known(&out[o]);
  const fg_op_def *def = &fg_op_table[n->op];
  flops[id] = rc != 0 || !all_known ? -1 : def->flops ? def->flops(n, in, out) : 0;
  if (in != in_stack) free(in);
  return rc;
}

int fg_graph_flops_at_batch(const fg_graph *g, int64_t batch, int64_t *flops, fg_status *status) {
  if (!g || !flops || batch < 1) {
    fg_status_set(status, FG_INVALID_ARGUMENT,
                  "fg_graph_flops_at_batch: needs a graph, an output array and a batch >= 1 "
                  "(got %lld)",
                  (long long)batch);
    return -1;
  }
  int n = g->n_nodes, rc = 0;
  int *first = malloc(((size_t)n + 1) * sizeof *first);
  size_t total = 0;
  for (int id = 0; first && id < n; id++) {
    first[id] = (int)total;
    total += (size_t)g->nodes[id].n_outputs;
  }
  fg_tinfo *shapes = first ? calloc(total + 1, sizeof *shapes) : NULL;
  if (!shapes) {
    free(first);
    fg_status_set(status, FG_RESOURCE_EXHAUSTED, "fg_graph_flops_at_batch: out of memory");
    return -1;
  }
  /* Node ids are topological: every input is resolved before its user. */
  for (int id = 0; id < n && rc == 0; id++) {
    rc = resolve_node(g, id, batch, shapes, first, flops, status);
    if (rc != 0) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", fg_status_message(status));
      fg_status_set(status, FG_INVALID_ARGUMENT, "with batch %lld: %s", (long long)batch, msg);
    }
  }
  free(shapes);
  free(first);
  return rc;
}
