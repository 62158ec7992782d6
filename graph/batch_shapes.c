/* fg_batch_shapes: graph/batch_shapes.h. */
#include "graph/batch_shapes.h"

#include <stdlib.h>
#include <string.h>

#include "graph/graph_internal.h"
#include "graph/op_table.h"

void fg_batch_shapes_init(fg_batch_shapes *s, int64_t batch) {
  memset(s, 0, sizeof *s);
  s->batch = batch;
}

void fg_batch_shapes_free(fg_batch_shapes *s) {
  free(s->first);
  free(s->shapes);
  memset(s, 0, sizeof *s);
}

static int grow(fg_batch_shapes *s, int nodes, size_t shapes) {
  if (nodes > s->cap_first) {
    int cap = s->cap_first ? s->cap_first : 64;
    while (cap < nodes)
      cap *= 2;
    int *f = realloc(s->first, (size_t)cap * sizeof *f);
    if (!f) return -1;
    s->first = f, s->cap_first = cap;
  }
  if (shapes > s->cap_shapes) {
    size_t cap = s->cap_shapes ? s->cap_shapes : 64;
    while (cap < shapes)
      cap *= 2;
    fg_tinfo *t = realloc(s->shapes, cap * sizeof *t);
    if (!t) return -1;
    s->shapes = t, s->cap_shapes = cap;
  }
  return 0;
}

/* Node id's outputs from its inputs' resolved shapes; rank -1 where an
 * input is unresolved or inference fails at this batch. */
static void resolve(fg_batch_shapes *s, const fg_node *n, fg_tinfo *out, fg_status *st) {
  fg_tinfo stack[8], *in = n->n_inputs <= 8 ? stack : malloc((size_t)n->n_inputs * sizeof *in);
  int ok = in != NULL;
  for (int i = 0; ok && i < n->n_inputs; i++) {
    in[i] = s->shapes[s->first[n->inputs[i].node] + n->inputs[i].index];
    ok = in[i].rank >= 0;
  }
  ok = ok && fg_infer(n, in, out, st) == 0;
  for (int o = 0; o < n->n_outputs; o++) {
    if (!ok) {
      out[o].rank = -1;
      continue;
    }
    if (n->op == FG_OP_PLACEHOLDER)
      for (int d = 0; d < out[o].rank; d++)
        if (out[o].dims[d] < 0) out[o].dims[d] = s->batch;
  }
  if (in != stack) free(in);
}

const fg_tinfo *fg_batch_shapes_get(fg_batch_shapes *s, const fg_graph *g, fg_output o) {
  if (!g || o.node < 0 || o.node >= g->n_nodes) return NULL;
  if (s->n_done < g->n_nodes) {
    size_t total = s->n_shapes;
    for (int id = s->n_done; id < g->n_nodes; id++)
      total += (size_t)g->nodes[id].n_outputs;
    if (grow(s, g->n_nodes, total + 1) != 0) return NULL;
    fg_status *st = fg_status_new();
    if (!st) return NULL;
    /* Node ids are topological: every input is resolved before its user. */
    for (; s->n_done < g->n_nodes; s->n_done++) {
      const int id = s->n_done;
      s->first[id] = (int)s->n_shapes;
      resolve(s, &g->nodes[id], &s->shapes[s->n_shapes], st);
      s->n_shapes += (size_t)g->nodes[id].n_outputs;
      if (fg_status_code(st) != FG_OK) { /* a fresh one for the next failure */
        fg_status_free(st);
        if (!(st = fg_status_new())) {
          s->n_done++;
          return NULL;
        }
      }
    }
    fg_status_free(st);
  }
  if (o.index < 0 || o.index >= g->nodes[o.node].n_outputs) return NULL;
  const fg_tinfo *t = &s->shapes[s->first[o.node] + o.index];
  return t->rank >= 0 ? t : NULL;
}
