/* The serial step order (executor/plan_order.h).
 *
 * Movable nodes (updates, groups) wait on counters: one per input produced
 * by a step, and for an update one per earlier access to each variable it
 * writes (the last write and the reads since). The other nodes go out in
 * node order; after each, the movable nodes whose counters reach zero
 * follow at once. A movable node only waits for nodes with lower ids, so by
 * induction it goes out before every non-movable node with a higher id:
 * the order is topological, and a variable's reads and writes keep their
 * node order (the executor orders them by step order, plan_schedule.c build_edges). */
#include "executor/plan_order.h"

#include <stdlib.h>
#include <string.h>

#include "executor/edges.h"
#include "graph/op_table.h"

static int is_source(const fg_node *n) { return (fg_op_table[n->op].flags & FG_OPF_SOURCE) != 0; }

/* Collectives never move (the fused updates included): each
 * rank's plan must issue them in node order whatever else it runs. */
static int movable(const fg_node *n) {
  return (n->op == FG_OP_GROUP || fg_op_table[n->op].mutable_inputs != 0) &&
         !fg_node_is_collective(n);
}

/* A growable list of ints: each variable's readers. */
typedef struct ivec {
  int *v, n, cap;
} ivec;

static int ivec_push(ivec *a, int x) {
  if (a->n == a->cap) {
    int cap = a->cap ? 2 * a->cap : 16;
    int *v = realloc(a->v, (size_t)cap * sizeof *v);
    if (!v) return -1;
    a->v = v;
    a->cap = cap;
  }
  a->v[a->n++] = x;
  return 0;
}

/* Per variable: its last writer and the readers since (node ids). */
typedef struct var_touch {
  int last_writer;
  ivec readers;
} var_touch;

/* A new array numbering the variables marked in needed[] 0, 1, ... by node
 * id (-1 for other nodes), their count in *n_vars; NULL when out of
 * memory. */
static int *index_variables(const fg_graph *g, const char *needed, int *n_vars) {
  int *var_idx = malloc(((size_t)g->n_nodes + 1) * sizeof *var_idx);
  *n_vars = 0;
  for (int id = 0; var_idx && id < g->n_nodes; id++)
    var_idx[id] = g->nodes[id].op == FG_OP_VARIABLE && needed[id] ? (*n_vars)++ : -1;
  return var_idx;
}

/* The wait edges (from, to) of every movable node, into E. */
static int wait_edges(const fg_graph *g, const char *needed, fg_edges *E) {
  const int n = g->n_nodes;
  var_touch *vt = NULL;
  int n_vars, rc = -1;
  int *var_idx = index_variables(g, needed, &n_vars);
  if (!var_idx) return -1;
  vt = calloc((size_t)n_vars + 1, sizeof *vt);
  if (!vt) goto done;
  for (int v = 0; v < n_vars; v++)
    vt[v].last_writer = -1;
  for (int id = 0; id < n; id++) {
    const fg_node *nd = &g->nodes[id];
    if (!needed[id] || is_source(nd)) continue;
    const int mov = movable(nd);
    for (int k = 0; k < nd->n_inputs; k++) {
      const int q = nd->inputs[k].node;
      if (q < 0 || q >= n) continue;
      if (mov && !is_source(&g->nodes[q]) && fg_edge_add(E, q, id)) goto done;
      const int v = var_idx[q];
      if (v < 0) continue;
      var_touch *t = &vt[v];
      if (fg_node_writes_input(nd, k)) {
        /* A writer that does not move goes out in node order, after every
         * access with a lower id: it waits on no counter. */
        if (mov && t->last_writer >= 0 && fg_edge_add(E, t->last_writer, id)) goto done;
        for (int r = 0; mov && r < t->readers.n; r++)
          if (fg_edge_add(E, t->readers.v[r], id)) goto done;
        t->last_writer = id;
        t->readers.n = 0;
      } else {
        if (mov && t->last_writer >= 0 && fg_edge_add(E, t->last_writer, id)) goto done;
        if ((t->readers.n == 0 || t->readers.v[t->readers.n - 1] != id) &&
            ivec_push(&t->readers, id))
          goto done;
      }
    }
  }
  rc = 0;
done:
  for (int v = 0; vt && v < n_vars; v++)
    free(vt[v].readers.v);
  free(vt);
  free(var_idx);
  return rc;
}

/* Per variable, while walking an order: whether its last writer, or a
 * reader since, waits for a collective. */
typedef struct var_late {
  char writer, readers;
} var_late;

/* Moves every node that waits for an all_reduce (through its inputs, or
 * through an earlier access to a variable it touches) after every node
 * that does not, keeping relative order on each side; the all_reduces
 * themselves stay unless they wait for such a node. Why: a collective
 * finishes when the slowest rank gets there, and steps after it (a
 * bucket's slices, the updates reading the reduced gradients) finish
 * later still. The memory plan reuses bytes along this order, and each
 * reuse becomes a scheduling edge (plan_memory.c add_reuse_edges): with an update
 * placed before the last gradient's matmul, that matmul waited for the
 * peer's arrival at the bucket before it (a 16 MB gradient's bytes, then a
 * bias bucket's). Past every step that does not wait, such steps can
 * only make other late steps wait. This is PyTorch DDP's order too: the
 * optimizer after the backward pass. `order` holds k ids, topological;
 * the result is too. -1 when out of memory. */
static int defer_after_collectives(const fg_graph *g, const char *needed, int *order, int k) {
  int any = 0;
  for (int i = 0; i < k && !any; i++)
    any = fg_node_is_collective(&g->nodes[order[i]]);
  if (!any) return 0;
  int n_vars;
  char *late = calloc((size_t)g->n_nodes + 1, 1);
  int *var_idx = index_variables(g, needed, &n_vars), *tmp = malloc(((size_t)k + 1) * sizeof *tmp);
  var_late *vl = calloc((size_t)n_vars + 1, sizeof *vl);
  if (!late || !var_idx || !tmp || !vl) {
    free(late), free(var_idx), free(tmp), free(vl);
    return -1;
  }
  /* Once a collective is late, every later one is too: they stay in node
   * order, which every rank shares whatever else its run needs. */
  char coll_late = 0;
  for (int i = 0; i < k; i++) {
    const fg_node *nd = &g->nodes[order[i]];
    const int coll = fg_node_is_collective(nd);
    char l = coll && coll_late;
    for (int q = 0; q < nd->n_inputs; q++) {
      const int p = nd->inputs[q].node, v = var_idx[p];
      if (late[p] || (!coll && fg_node_is_collective(&g->nodes[p]))) l = 1;
      if (v >= 0 && (vl[v].writer || (fg_node_writes_input(nd, q) && vl[v].readers))) l = 1;
    }
    late[order[i]] = l;
    if (coll) coll_late |= l;
    for (int q = 0; q < nd->n_inputs; q++) {
      const int v = var_idx[nd->inputs[q].node];
      if (v < 0) continue;
      if (fg_node_writes_input(nd, q))
        vl[v].writer = l, vl[v].readers = 0;
      else
        vl[v].readers |= l;
    }
  }
  int m = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < k; i++)
      if (late[order[i]] == pass) tmp[m++] = order[i];
  memcpy(order, tmp, (size_t)k * sizeof *order);
  free(late), free(var_idx), free(tmp), free(vl);
  return 0;
}

static int plain_order(const fg_graph *g, const char *needed, int *order) {
  int k = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int id = 0; id < g->n_nodes; id++)
      if (needed[id] && is_source(&g->nodes[id]) == (pass == 0)) order[k++] = id;
  return k;
}

int fg_plan_order(const fg_graph *g, const char *needed, int hoist, int *order) {
  const int n = g->n_nodes;
  if (!hoist) return plain_order(g, needed, order);
  fg_edges E = {0};
  int *cnt = calloc((size_t)n + 1, sizeof *cnt), *off = calloc((size_t)n + 2, sizeof *off);
  int *succ = NULL, *queue = malloc(((size_t)n + 1) * sizeof *queue);
  int k = -1;
  if (!cnt || !off || !queue || wait_edges(g, needed, &E) != 0) goto done;
  const int ne = E.n;
  succ = malloc(((size_t)ne + 1) * sizeof *succ);
  if (!succ) goto done;
  /* Successor lists (CSR) and counters. A waiter whose wait is a source
   * never got an edge (sources are all out first). */
  for (int e = 0; e < ne; e++) {
    off[E.e[e][0] + 1]++;
    cnt[E.e[e][1]]++;
  }
  for (int id = 0; id < n; id++)
    off[id + 1] += off[id];
  {
    int *at = queue; /* borrowed as fill pointers */
    memcpy(at, off, (size_t)n * sizeof *at);
    for (int e = 0; e < ne; e++)
      succ[at[E.e[e][0]]++] = E.e[e][1];
  }
  k = 0;
  for (int id = 0; id < n; id++)
    if (needed[id] && is_source(&g->nodes[id])) order[k++] = id;
  int head = 0, tail = 0;
  for (int id = 0; id < n; id++)
    if (needed[id] && !is_source(&g->nodes[id]) && movable(&g->nodes[id]) && cnt[id] == 0)
      queue[tail++] = id;
  for (int id = 0; id <= n; id++) {
    /* Every movable node that is ready goes out before the next other one. */
    while (head < tail) {
      const int x = queue[head++];
      order[k++] = x;
      for (int e = off[x]; e < off[x + 1]; e++)
        if (--cnt[succ[e]] == 0) queue[tail++] = succ[e];
    }
    if (id == n) break;
    const fg_node *nd = &g->nodes[id];
    if (!needed[id] || is_source(nd) || movable(nd)) continue;
    order[k++] = id;
    for (int e = off[id]; e < off[id + 1]; e++)
      if (--cnt[succ[e]] == 0) queue[tail++] = succ[e];
  }
  /* Cannot happen (every wait is on a lower id); if it did, node order
   * is always valid. */
  int all = 0;
  for (int id = 0; id < n; id++)
    all += needed[id] != 0;
  if (k != all) k = plain_order(g, needed, order);
  if (defer_after_collectives(g, needed, order, k) != 0) k = -1;
done:
  free(E.e);
  free(cnt);
  free(off);
  free(succ);
  free(queue);
  return k;
}
