/* The dependencies and schedule stages of plan building (plan_stages.h):
 * the edges every schedule keeps, then the pool's DAG, lanes, feed and
 * fetch slots. */
#include <stdlib.h>
#include <string.h>

#include "executor/dist/exec.h"
#include "executor/plan_stages.h"
#include "graph/op_table.h"

static int cmp_edge(const void *a, const void *b) {
  const int *x = a, *y = b;
  if (x[0] != y[0]) return (x[0] > y[0]) - (x[0] < y[0]);
  return (x[1] > y[1]) - (x[1] < y[1]);
}

void fg_plan_edges_sort_unique(fg_edges *E) {
  if (E->n == 0) return; /* E->e may be NULL */
  qsort(E->e, (size_t)E->n, sizeof E->e[0], cmp_edge);
  int w = 0;
  for (int i = 0; i < E->n; i++)
    if (w == 0 || cmp_edge(E->e[w - 1], E->e[i]) != 0)
      E->e[w][0] = E->e[i][0], E->e[w++][1] = E->e[i][1];
  E->n = w;
}

/* Data edges (producer step -> consumer step) plus, for every variable,
 * edges that keep its reads and writes in step order: a scheduler may run
 * anything in parallel but never reorder a read and an update of the same
 * variable, so results equal the sequential run's. */
static int build_edges(const fg_graph *g, fg_plan *plan, fg_edges *E) {
  for (int si = 0; si < plan->n_steps; si++) {
    const fg_step *st = &plan->steps[si];
    for (int i = 0; i < st->n_in; i++) {
      int p = plan->slot_step[st->in_slots[i]];
      if (p >= 0 && fg_edge_add(E, p, si) != 0) return -1;
    }
  }
  for (int s = 0; s < plan->n_slots; s++) {
    if (plan->slot_kind[s] != FG_SLOT_VARIABLE || plan->slot_step[s] >= 0) continue;
    /* s is a variable node's slot: every step touching it, in order. */
    int last_writer = -1, *readers_since = NULL, n_readers = 0;
    readers_since = malloc(((size_t)plan->n_steps + 1) * sizeof(int));
    if (!readers_since) return -1;
    for (int si = 0; si < plan->n_steps; si++) {
      const fg_step *st = &plan->steps[si];
      const fg_node *nd = &g->nodes[st->node];
      int reads = 0, writes = 0;
      for (int i = 0; i < st->n_in; i++)
        if (st->in_slots[i] == s) {
          if (fg_node_writes_input(nd, i))
            writes = 1;
          else
            reads = 1;
        }
      if (!reads && !writes) continue;
      if (last_writer >= 0 && fg_edge_add(E, last_writer, si) != 0) goto fail;
      if (writes) {
        for (int r = 0; r < n_readers; r++)
          if (fg_edge_add(E, readers_since[r], si) != 0) goto fail;
        n_readers = 0;
        last_writer = si;
      } else {
        readers_since[n_readers++] = si;
      }
    }
    free(readers_since);
    continue;
  fail:
    free(readers_since);
    return -1;
  }
  fg_plan_edges_sort_unique(E);
  return 0;
}

/* Each rank's sends, and its receives, in tag order (plan_xfer.h); each
 * device's collectives in step (node id) order: a collective pairs the
 * k-th call of every member, so each device must make its calls in the
 * order the graph pairs them (executor/dist/session_dist.c check_pairs), not in
 * whatever order its inputs become ready. */
static int chain_edges(fg_plan_builder *b) {
  fg_plan *plan = b->plan;
  const fg_xfer_state *X = &b->X;
  int rc = 0;
  for (int i = 1; i < X->n_sends; i++)
    rc |= fg_edge_add(&b->E, X->sends[i - 1], X->sends[i]);
  for (int i = 1; i < X->n_recvs; i++)
    rc |= fg_edge_add(&b->E, X->recvs[i - 1], X->recvs[i]);
  int n_dev = b->req->dist && b->node_dev ? b->req->dist->n_dev : 1;
  int *last = malloc((size_t)n_dev * sizeof *last);
  if (!last) return -1;
  for (int d = 0; d < n_dev; d++)
    last[d] = -1;
  for (int si = 0; si < plan->n_steps; si++) {
    const fg_step *step = &plan->steps[si];
    if (step->xfer || !fg_node_is_collective(&b->g->nodes[step->node])) continue;
    int d = b->node_dev ? plan->step_dev[si] : 0;
    if (d < 0 || d >= n_dev) continue;
    if (last[d] >= 0) rc |= fg_edge_add(&b->E, last[d], si);
    last[d] = si;
  }
  free(last);
  return rc;
}

int fg_plan_dependencies(fg_plan_builder *b, fg_status *st) {
  if (chain_edges(b) != 0 || build_edges(b->g, b->plan, &b->E) != 0)
    return fg_plan_oom(st, "edges");
  return 0;
}

/* The pool's view of the DAG (sorted by source): predecessor counts and
 * successor lists. */
static int pool_dag(fg_plan *plan, const fg_edges *E, fg_status *st) {
  plan->n_preds = calloc((size_t)plan->n_steps + 1, sizeof(int));
  plan->succ_off = calloc((size_t)plan->n_steps + 2, sizeof(int));
  plan->succ = malloc(((size_t)E->n + 1) * sizeof(int));
  if (!plan->n_preds || !plan->succ_off || !plan->succ) return fg_plan_oom(st, "schedule");
  for (int i = 0; i < E->n; i++) {
    plan->n_preds[E->e[i][1]]++;
    plan->succ_off[E->e[i][0] + 1]++;
    plan->succ[i] = E->e[i][1];
  }
  for (int si = 0; si < plan->n_steps; si++)
    plan->succ_off[si + 1] += plan->succ_off[si];
  return 0;
}

/* Sessions with a dist state: each step's lane (executor/dist/exec.h), by kind:
 * sends, collectives and receives from other processes, compute. */
static void assign_lanes(fg_plan_builder *b) {
  fg_plan *plan = b->plan;
  for (int si = 0; b->req->dist && si < plan->n_steps; si++) {
    const fg_step *step = &plan->steps[si];
    int kind = step->xfer == FG_XFER_SEND ? FG_LANE_SEND
               : step->xfer == FG_XFER_RECV ||
                       (!step->xfer && fg_node_is_collective(&b->g->nodes[step->node]))
                   ? FG_LANE_COMM
                   : FG_LANE_COMPUTE;
    int lane = fg_dist_lane(b->req->dist, b->node_dev ? plan->step_dev[si] : 0, kind);
    plan->step_lane[si] = lane;
    plan->use_lanes |= lane != 0;
  }
}

int fg_plan_schedule(fg_plan_builder *b, fg_status *st) {
  fg_plan *plan = b->plan;
  const fg_plan_request *req = b->req;
  if (pool_dag(plan, &b->E, st) != 0) return -1;
  assign_lanes(b);
  plan->n_feeds = req->n_feeds;
  plan->n_fetches = req->n_fetches;
  plan->feed_slots = malloc(((size_t)req->n_feeds + 1) * sizeof(int));
  plan->fetch_slots = malloc(((size_t)req->n_fetches + 1) * sizeof(int));
  plan->timings = calloc((size_t)plan->n_steps + 1, sizeof *plan->timings);
  if (!plan->feed_slots || !plan->fetch_slots || !plan->timings) return fg_plan_oom(st, "feeds");
  for (int i = 0; i < req->n_feeds; i++)
    plan->feed_slots[i] =
        b->needed[req->feed_nodes[i]] ? plan->slot_of_output[req->feed_nodes[i]] : -1;
  for (int i = 0; i < req->n_fetches; i++) {
    plan->fetch_slots[i] = plan->slot_of_output[req->fetches[i].node] + req->fetches[i].index;
    if (b->X.fetch_slot && b->X.fetch_slot[i] >= 0) plan->fetch_slots[i] = b->X.fetch_slot[i];
  }
  return 0;
}
