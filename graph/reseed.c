/* fg_graph_reseed: one seed for every random draw of a graph (the
 * `--seed N` of `flowgraph train`), set on the nodes themselves, so that
 * a saved graph keeps drawing the same streams when resumed. */
#include <stdint.h>

#include "flowgraph/graph.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"

/* splitmix64's finaliser: neighbouring inputs give unrelated outputs. */
static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int draws(const fg_node *n) {
  if (fg_op_table[n->op].flags & FG_OPF_RANDOM) return 1;
  /* A variable drawn by its initialiser, not one holding a value (whose
   * seed no longer matters). */
  if (n->op != FG_OP_VARIABLE || fg_attrs_find(&n->attrs, "value")) return 0;
  const fg_attr *k = fg_attrs_find(&n->attrs, "init");
  return k && k->type == FG_ATTR_INT && k->i >= FG_INIT_UNIFORM;
}

int fg_graph_reseed(fg_graph *g, int64_t seed, fg_status *st) {
  if (!g) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_graph_reseed: graph is NULL");
    return -1;
  }
  if (fg_graph_status(g, st) != FG_OK) return -1;
  int changed = 0;
  for (int id = 0; id < g->n_nodes; id++) {
    fg_node *n = &g->nodes[id];
    if (!draws(n)) continue;
    const fg_attr *a = fg_attrs_find(&n->attrs, "seed");
    const uint64_t old = a && a->type == FG_ATTR_INT ? (uint64_t)a->i : 0;
    /* From the node's own seed too: a dropout and its gradient, which
     * share a seed, still share one, and nodes given different seeds
     * still draw differently. Non-negative, as users' seeds are. */
    const int64_t s = (int64_t)(mix64(mix64((uint64_t)seed) ^ old) >> 1);
    if (fg_attrs_set_int(&n->attrs, "seed", s) != 0) {
      fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_graph_reseed: out of memory at node '%s'",
                    n->name);
      fg_graph_status(g, st);
      return -1;
    }
    changed++;
  }
  if (changed) g->version++;
  return changed;
}
