/* fg_optimize (flowgraph/passes.h): the pipeline on a working copy, then
 * the copy without its dead nodes as a new graph, rebuilt through fg_op
 * so the result is checked like any graph a user builds. */
#include <stdio.h>
#include <stdlib.h>

#include "executor/passes/passes.h"
#include "graph/op_table.h"

/* Marks in early[] the live variables that a live node with a lower id
 * reads (a multi-tensor update reads the state variables the optimizers
 * made next to each single update), and the constants passes appended
 * (past the source's ids, which dead[] does not cover) that a live node
 * reads: they go first. */
static void mark_early(const fg_pass_graph *w, const unsigned char *dead, unsigned char *early) {
  const fg_graph *g = &w->g;
  for (int id = 0; id < w->n_src; id++)
    for (int i = 0; !dead[id] && i < g->nodes[id].n_inputs; i++) {
      const int q = g->nodes[id].inputs[i].node;
      if (q >= w->n_src || (q > id && !dead[q] && g->nodes[q].op == FG_OP_VARIABLE)) early[q] = 1;
    }
}

/* A name for an appended constant that neither the source nor out has:
 * its own ("<node>/<suffix>") or that with "_1", "_2", ... into buf. */
static const char *free_name(const fg_graph *src, const fg_graph *out, const char *name, char *buf,
                             size_t cap) {
  snprintf(buf, cap, "%s", name);
  for (int k = 1; fg_graph_find(src, buf) >= 0 || fg_graph_find(out, buf) >= 0; k++)
    snprintf(buf, cap, "%s_%d", name, k);
  return buf;
}

/* Adds live node id of w to out (inputs through map). */
static void emit(const fg_pass_graph *w, const fg_graph *src, int id, fg_graph *out, int *map,
                 fg_output *in) {
  const fg_node *n = &w->g.nodes[id];
  char buf[600];
  const char *name = id < w->n_src ? n->name : free_name(src, out, n->name, buf, sizeof buf);
  for (int i = 0; i < n->n_inputs; i++)
    in[i] = (fg_output){map[n->inputs[i].node], n->inputs[i].index};
  fg_output o = fg_op(out, fg_op_table[n->op].name, name, in, n->n_inputs, &n->attrs);
  if (n->device) fg_set_device(out, o, n->device);
  if (o.node >= 0) out->nodes[o.node].flags = n->flags;
  map[id] = o.node;
}

/* The live nodes of w, in id order (still topological) but for the early
 * variables and appended constants, which come first, with the graph
 * outputs and metadata of its source, into a new graph. */
static fg_graph *compact(const fg_pass_graph *w, const fg_graph *src, const unsigned char *dead,
                         fg_status *st) {
  const fg_graph *g = &w->g;
  fg_graph *out = fg_graph_new();
  int *map = malloc(((size_t)g->n_nodes + 1) * sizeof *map);
  int max_in = 0; /* a node may read one output many times: more inputs than nodes */
  for (int id = 0; id < g->n_nodes; id++)
    max_in = g->nodes[id].n_inputs > max_in ? g->nodes[id].n_inputs : max_in;
  fg_output *in = malloc(((size_t)max_in + 1) * sizeof *in);
  unsigned char *early = calloc((size_t)g->n_nodes + 1, 1);
  for (int id = 0; map && id < g->n_nodes; id++)
    map[id] = -1;
  if (early) mark_early(w, dead, early);
  for (int pass = 0; pass < 2; pass++)
    for (int id = 0; out && map && in && early && id < g->n_nodes && !fg_graph_failed(out); id++)
      if ((id < w->n_src ? !dead[id] : early[id]) && early[id] == (pass == 0))
        emit(w, src, id, out, map, in);
  const int have_early = early != NULL;
  free(early);
  for (int i = 0; out && map && i < src->n_outputs; i++)
    fg_graph_add_output(out, (fg_output){map[src->outputs[i].node], src->outputs[i].index});
  for (int i = 0; out && i < src->n_meta; i++)
    fg_graph_set_metadata(out, src->meta_keys[i], src->meta_vals[i]);
  free(map);
  free(in);
  if (!out || !map || !in || !have_early) {
    fg_graph_free(out);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_optimize: out of memory");
    return NULL;
  }
  if (fg_graph_status(out, st) != FG_OK) {
    fg_graph_free(out);
    return NULL;
  }
  return out;
}

static int resolve_fetches(const fg_graph *g, const char *const *fetches, int n, fg_output *outs,
                           fg_status *st) {
  for (int i = 0; i < n; i++) {
    outs[i] = fetches[i] ? fg_graph_find_output(g, fetches[i]) : (fg_output){-1, -1};
    if (outs[i].node < 0) {
      char hint[600];
      fg_graph_output_hint(g, fetches[i], hint, sizeof hint);
      fg_status_set(st, fetches[i] ? FG_NOT_FOUND : FG_INVALID_ARGUMENT,
                    "fg_optimize: fetch '%s': no such node or output%s%s",
                    fetches[i] ? fetches[i] : "(null)", hint[0] ? "; " : "", hint);
      return -1;
    }
  }
  return 0;
}

static int check_args(const fg_graph *g, const char *const *fetches, int n_fetches, fg_status *st) {
  if (!g) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_optimize: graph is NULL");
    return -1;
  }
  if (n_fetches < 0 || (n_fetches > 0 && !fetches)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_optimize: %d fetches with fetches=%p", n_fetches,
                  (const void *)fetches);
    return -1;
  }
  return fg_graph_status(g, st) == FG_OK ? 0 : -1;
}

fg_graph *fg_optimize(const fg_graph *g, const fg_pass_options *opts, const char *const *fetches,
                      int n_fetches, fg_pass_report **report, fg_status *st) {
  if (report) *report = NULL;
  if (check_args(g, fetches, n_fetches, st) != 0) return NULL;
  size_t n = (size_t)g->n_nodes + 1;
  fg_output *outs = malloc(((size_t)n_fetches + 1) * sizeof *outs);
  unsigned char *keep = calloc(n, 1), *dead = calloc(n, 1);
  fg_pass_report *rep = report ? calloc(1, sizeof *rep) : NULL;
  fg_pass_graph *w = NULL;
  fg_graph *out = NULL;
  if (!outs || !keep || !dead || (report && !rep)) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_optimize: out of memory");
  } else if (resolve_fetches(g, fetches, n_fetches, outs, st) == 0 &&
             (w = fg_pass_graph_new(g, st)) != NULL) {
    fg_pass_mark_keep(g, outs, n_fetches, keep);
    w->may_append = 1; /* compact writes appended constants first */
    w->optimizing = 1;
    if (fg_pass_pipeline_run(w, opts, keep, NULL, dead, rep, st) == 0)
      out = compact(w, g, dead, st);
  }
  fg_pass_graph_free(w);
  free(outs);
  free(keep);
  free(dead);
  if (out && report) {
    *report = rep;
    rep = NULL;
  }
  fg_pass_report_free(rep);
  if (out) fg_status_clear(st);
  return out;
}
