/* fg_freeze (flowgraph/passes.h): the part of a graph that its fetches
 * need, with every variable it reads turned into a constant of the
 * variable's value, as TensorFlow's convert_variables_to_constants does.
 *
 * Nothing a fetch does not need is copied, so gradients, optimizer state
 * and the update ops go. A fetch that needs a node with an effect (an
 * update, assign, a collective, a group of them) is refused: a frozen
 * graph has no state left to write, and silently dropping the write would
 * change what the fetch computes. The graph's training flag stays, so a
 * dropout in the graph still reads the mode a run is in (inference, as
 * nothing in the frozen graph trains). */
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"
#include "executor/var_init.h"
#include "graph/op_table.h"

static int oom(fg_status *st) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_freeze: out of memory");
  return -1;
}

/* The fetched outputs: the names given, else the graph's marked outputs. */
static int resolve(const fg_graph *g, const char *const *fetches, int n, fg_output *outs,
                   fg_status *st) {
  for (int i = 0; i < n; i++) {
    outs[i] = fetches[i] ? fg_graph_find_output(g, fetches[i]) : FG_NO_OUTPUT;
    if (outs[i].node >= 0) continue;
    if (!fetches[i]) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "fg_freeze: fetch %d is NULL", i);
      return -1;
    }
    char hint[600];
    fg_graph_output_hint(g, fetches[i], hint, sizeof hint);
    fg_status_set(st, FG_NOT_FOUND, "fg_freeze: fetch '%s': no such node or output%s%s", fetches[i],
                  hint[0] ? "; " : "", hint);
    return -1;
  }
  return 0;
}

/* 1 for a node a frozen graph cannot hold: one that writes state or calls
 * the communicator. Variables become constants; the training flag is read
 * per run and stays. */
static int has_effect(const fg_node *n) {
  const fg_op_def *d = &fg_op_table[n->op];
  if (n->op == FG_OP_VARIABLE || n->op == FG_OP_TRAINING_FLAG) return 0;
  return (d->flags & (FG_OPF_STATEFUL | FG_OPF_COLLECTIVE)) != 0 || fg_op_is_update(n->op);
}

/* Marks in need[] every node the fetches read, refusing nodes with an
 * effect; the message names the fetch that needs it. */
static int mark_needed(const fg_graph *g, const fg_output *outs, int n, const char *const *names,
                       unsigned char *need, int *stack, fg_status *st) {
  for (int f = 0; f < n; f++) {
    int top = 0;
    if (!need[outs[f].node]) need[outs[f].node] = 1, stack[top++] = outs[f].node;
    while (top > 0) {
      const fg_node *nd = &g->nodes[stack[--top]];
      if (has_effect(nd)) {
        fg_status_set(st, FG_INVALID_ARGUMENT,
                      "fg_freeze: fetch '%s' needs node '%s' (%s), which %s: a frozen graph "
                      "computes inference only (fetch what the training step reads, such as the "
                      "loss or the model's outputs)",
                      names ? names[f] : g->nodes[outs[f].node].name, nd->name,
                      fg_op_table[nd->op].name,
                      fg_op_is_update(nd->op)     ? "updates variables (the training step)"
                      : fg_node_is_collective(nd) ? "calls the communicator"
                                                  : "writes or orders session state");
        return -1;
      }
      for (int k = 0; k < nd->n_inputs; k++) {
        const int q = nd->inputs[k].node;
        if (!need[q]) need[q] = 1, stack[top++] = q;
      }
    }
  }
  return 0;
}

/* The attributes of a constant standing for variable node n: its value,
 * and the annotations ('_' names: placement, colocation) it carries. */
static int constant_attrs(const fg_node *n, struct fg_attrs *out, fg_status *st) {
  const fg_attr *v = fg_attrs_find(&n->attrs, "value");
  fg_tensor *drawn = NULL;
  if (!v || v->type != FG_ATTR_TENSOR || !v->t) {
    /* Never trained or saved with a value: what a session starts it at. */
    drawn = fg_var_init_tensor(n, st);
    if (!drawn) return -1;
  }
  int rc = fg_attrs_set_tensor(out, "value", drawn ? drawn : v->t);
  fg_tensor_free(drawn);
  for (int i = 0; rc == 0 && i < n->attrs.n; i++) {
    const fg_attr *a = &n->attrs.items[i];
    if (a->name[0] == '_' && a->type == FG_ATTR_STRING)
      rc = fg_attrs_set_string(out, a->name, a->s);
  }
  return rc == 0 ? 0 : oom(st);
}

/* Node id of g into out (inputs through map), a variable as a constant. */
static int emit(const fg_graph *g, int id, fg_graph *out, int *map, fg_output *in, fg_status *st) {
  const fg_node *n = &g->nodes[id];
  for (int i = 0; i < n->n_inputs; i++)
    in[i] = (fg_output){map[n->inputs[i].node], n->inputs[i].index};
  struct fg_attrs cattrs;
  memset(&cattrs, 0, sizeof cattrs);
  const int var = n->op == FG_OP_VARIABLE;
  if (var && constant_attrs(n, &cattrs, st) != 0) {
    fg_attrs_clear(&cattrs);
    return -1;
  }
  fg_output o = fg_op(out, var ? "constant" : fg_op_table[n->op].name, n->name, in, n->n_inputs,
                      var ? &cattrs : &n->attrs);
  fg_attrs_clear(&cattrs);
  if (n->device) fg_set_device(out, o, n->device);
  if (o.node >= 0) out->nodes[o.node].flags = n->flags;
  map[id] = o.node;
  return 0;
}

static fg_graph *build(const fg_graph *g, const unsigned char *need, const fg_output *outs, int n,
                       fg_status *st) {
  fg_graph *out = fg_graph_new();
  int *map = malloc(((size_t)g->n_nodes + 1) * sizeof *map);
  fg_output *in = malloc(((size_t)g->n_nodes + 1) * sizeof *in);
  int rc = out && map && in ? 0 : oom(st);
  /* Node ids are topological (a node reads only earlier ones). */
  for (int id = 0; rc == 0 && id < g->n_nodes && !fg_graph_failed(out); id++)
    if (need[id]) rc = emit(g, id, out, map, in, st);
  for (int i = 0; rc == 0 && i < n; i++)
    fg_graph_add_output(out, (fg_output){map[outs[i].node], outs[i].index});
  /* Metadata describes the model (its description, producer, steps
   * trained), but a value naming a node left out ("train_target" =
   * "train", "loss") would point a reader at nothing: dropped. */
  for (int i = 0; rc == 0 && i < g->n_meta; i++) {
    const int named = fg_graph_find(g, g->meta_vals[i]);
    if (named < 0 || need[named]) fg_graph_set_metadata(out, g->meta_keys[i], g->meta_vals[i]);
  }
  free(map);
  free(in);
  if (rc == 0 && fg_graph_status(out, st) != FG_OK) rc = -1;
  if (rc != 0) {
    fg_graph_free(out);
    return NULL;
  }
  return out;
}

fg_graph *fg_freeze(const fg_graph *g, const char *const *fetches, int n_fetches, fg_status *st) {
  if (!g || n_fetches < 0 || (n_fetches > 0 && !fetches)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_freeze: graph %s, %d fetches with fetches=%p",
                  g ? "given" : "NULL", n_fetches, (const void *)fetches);
    return NULL;
  }
  if (fg_graph_status(g, st) != FG_OK) return NULL;
  const int n = n_fetches > 0 ? n_fetches : g->n_outputs;
  if (n == 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_freeze: no fetches given and the graph marks no outputs: name the "
                  "outputs to keep");
    return NULL;
  }
  fg_output *outs = malloc(((size_t)n + 1) * sizeof *outs);
  unsigned char *need = calloc((size_t)g->n_nodes + 1, 1);
  int *stack = malloc(((size_t)g->n_nodes + 1) * sizeof *stack);
  fg_graph *out = NULL;
  if (!outs || !need || !stack) {
    oom(st);
  } else {
    int ok = 0;
    if (n_fetches > 0) {
      ok = resolve(g, fetches, n, outs, st) == 0;
    } else {
      memcpy(outs, g->outputs, (size_t)n * sizeof *outs);
      ok = 1;
    }
    if (ok && mark_needed(g, outs, n, n_fetches > 0 ? fetches : NULL, need, stack, st) == 0)
      out = build(g, need, outs, n, st);
  }
  free(outs);
  free(need);
  free(stack);
  if (out) fg_status_clear(st);
  return out;
}
