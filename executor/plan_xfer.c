/* Transfer steps of a plan across devices and processes: see plan_xfer.h. */
#include <stdlib.h>
#include <string.h>

#include "executor/plan_xfer.h"
#include "graph/op_table.h"

static int oom(fg_status *st) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "plan: out of memory (transfers)");
  return -1;
}

/* The recv half of a transfer between devices of this process: a copy from
 * the producer's buffer into the consumer device's arena. */
static int copy_kernel(const fg_kctx *c) {
  size_t bytes = fg_dtype_size(c->in[0].dtype);
  for (int d = 0; d < c->in[0].rank; d++)
    bytes *= (size_t)c->in[0].dims[d];
  if (bytes) memcpy(c->out[0].data, c->in[0].data, bytes);
  return 0;
}

int64_t fg_xfer_max_steps(const fg_graph *g, const char *needed, const fg_plan_request *req) {
  if (!req->dist) return 0;
  int64_t n = 0;
  for (int id = 0; id < g->n_nodes; id++)
    if (needed[id]) n += g->nodes[id].n_inputs;
  int ranks = req->dist->p2p ? req->dist->p2p->size : 1;
  return n + (int64_t)req->n_fetches * (ranks + 1) + 1;
}

int fg_xfer_init(fg_xfer_state *x, const fg_graph *g, fg_plan *plan, const fg_plan_request *req,
                 int n_node_slots, int64_t cap, fg_status *st) {
  memset(x, 0, sizeof *x);
  x->g = g;
  x->plan = plan;
  x->dx = req->dist;
  x->next_slot = n_node_slots;
  if (!plan->multi_device) return 0;
  x->xp = x->dx->my_rank >= 0;
  size_t n = (size_t)n_node_slots * (size_t)x->dx->n_dev + 1;
  cap++;
  x->local_slot = malloc(n * sizeof *x->local_slot);
  x->tagged = calloc(n, sizeof *x->tagged);
  x->sends = malloc((size_t)cap * sizeof *x->sends);
  x->recvs = malloc((size_t)cap * sizeof *x->recvs);
  x->fetch_slot = malloc(((size_t)req->n_fetches + 1) * sizeof *x->fetch_slot);
  if (!x->local_slot || !x->tagged || !x->sends || !x->recvs || !x->fetch_slot) return oom(st);
  for (size_t k = 0; k < n; k++)
    x->local_slot[k] = -1;
  for (int i = 0; i < req->n_fetches; i++)
    x->fetch_slot[i] = -1;
  for (int d = x->dx->n_dev - 1; d >= 0; d--)
    if (!x->xp || x->dx->dev_rank[d] == x->dx->my_rank) x->my_dev = d;
  if (x->xp) {
    /* What a local node's control input from another rank reads: nothing
     * (an empty tensor). Ordering across processes comes from the data
     * that travels, not from control edges. */
    int e = x->empty_slot = x->next_slot++;
    plan->slots[e] = (fg_kbuf){FG_F32, 1, {0}, NULL, 0};
    plan->slot_node[e] = 0;
    plan->slot_kind[e] = FG_SLOT_REMOTE;
    plan->slot_step[e] = plan->slot_shared[e] = plan->slot_offset[e] = plan->slot_last[e] = -1;
    plan->slot_dev[e] = -1;
  }
  return 0;
}

void fg_xfer_free(fg_xfer_state *x) {
  free(x->local_slot);
  free(x->tagged);
  free(x->sends);
  free(x->recvs);
  free(x->fetch_slot);
  memset(x, 0, sizeof *x);
}

static int rank_of(const fg_xfer_state *x, int node) {
  return x->dx->dev_rank[x->dx->node_dev[node]];
}

int fg_xfer_local(const fg_xfer_state *x, int id) {
  return !x->xp || rank_of(x, id) == x->dx->my_rank;
}

/* A transfer step on device `dev` carrying `node`'s tensor in_slot (a
 * recv from another process only names it), writing out_slot (-1: none). */
static int add_step(fg_xfer_state *x, int kind, int node, int dev, int in_slot, int out_slot,
                    int peer, int tag, fg_status *st) {
  fg_plan *plan = x->plan;
  int si = plan->n_steps++;
  fg_step *step = &plan->steps[si];
  step->node = node;
  step->xfer = kind;
  step->peer = peer;
  step->tag = tag;
  /* A recv from another process reads nothing here; in_slots[0] still
   * names the sent tensor's slot, so a profile can say which output it is. */
  step->n_in = in_slot >= 0 && kind != FG_XFER_RECV;
  step->n_out = out_slot >= 0;
  step->fn = kind == FG_XFER_COPY ? copy_kernel : NULL;
  step->in_slots = malloc(sizeof(int));
  step->out_slots = malloc(sizeof(int));
  step->in = calloc(1, sizeof *step->in);
  if (!step->in_slots || !step->out_slots || !step->in) return oom(st);
  step->in_slots[0] = in_slot;
  /* A send writes nothing; out_slots[0] names its tensor for profiles. */
  step->out_slots[0] = out_slot >= 0 ? out_slot : in_slot;
  plan->step_dev[si] = dev;
  if (kind == FG_XFER_SEND) x->sends[x->n_sends++] = si;
  if (kind == FG_XFER_RECV) x->recvs[x->n_recvs++] = si;
  if (out_slot >= 0 && plan->slot_step[out_slot] < 0) plan->slot_step[out_slot] = si;
  return si;
}

/* A new arena slot on `dev` shaped like slot `src`. */
static int new_slot(fg_xfer_state *x, int src, int dev) {
  fg_plan *plan = x->plan;
  int s = x->next_slot++;
  plan->slots[s] = plan->slots[src];
  plan->slots[s].data = NULL;
  plan->slot_node[s] = plan->slot_node[src];
  plan->slot_kind[s] = FG_SLOT_ARENA;
  plan->slot_step[s] = -1;
  plan->slot_shared[s] = plan->slot_offset[s] = plan->slot_last[s] = -1;
  plan->slot_dev[s] = dev;
  return s;
}

/* Whether input k of node `id` crosses devices and carries data (a control
 * input only orders, and is not copied). */
static int crosses(const fg_xfer_state *x, int id, int k) {
  const fg_node *n = &x->g->nodes[id];
  const int *nd = x->dx->node_dev;
  return nd[n->inputs[k].node] != nd[id] && !fg_dist_control_input(n, k);
}

int fg_xfer_before_node(fg_xfer_state *x, int id, fg_status *st) {
  if (!x->plan->multi_device) return 0;
  const fg_node *n = &x->g->nodes[id];
  int dev = x->dx->node_dev[id], me = x->dx->my_rank;
  for (int k = 0; k < n->n_inputs; k++) {
    if (!crosses(x, id, k)) continue;
    int src_node = n->inputs[k].node;
    int src = x->plan->slot_of_output[src_node] + n->inputs[k].index;
    size_t key = (size_t)src * (size_t)x->dx->n_dev + (size_t)dev;
    int src_dev = x->dx->node_dev[src_node];
    if (!x->xp || rank_of(x, src_node) == rank_of(x, id)) {
      /* Within one process: a copy, run by the consumer's process. */
      if (x->local_slot[key] >= 0 || !fg_xfer_local(x, id)) continue;
      int s = new_slot(x, src, dev);
      if (add_step(x, FG_XFER_COPY, src_node, dev, src, s, -1, -1, st) < 0) return -1;
      x->local_slot[key] = s;
      continue;
    }
    /* Between processes: every rank numbers it, the two ends act. */
    if (x->tagged[key]) continue;
    x->tagged[key] = 1;
    int tag = x->next_tag++;
    if (rank_of(x, src_node) == me) {
      if (add_step(x, FG_XFER_SEND, src_node, src_dev, src, -1, rank_of(x, id), tag, st) < 0)
        return -1;
    } else if (rank_of(x, id) == me) {
      int s = new_slot(x, src, dev);
      if (add_step(x, FG_XFER_RECV, src_node, dev, src, s, rank_of(x, src_node), tag, st) < 0)
        return -1;
      x->local_slot[key] = s;
    }
  }
  return 0;
}

int fg_xfer_input_slot(const fg_xfer_state *x, int id, int k, int s) {
  if (!x->plan->multi_device) return s;
  if (x->xp && !fg_xfer_local(x, x->g->nodes[id].inputs[k].node) &&
      fg_dist_control_input(&x->g->nodes[id], k))
    return x->empty_slot;
  if (!crosses(x, id, k)) return s;
  size_t key = (size_t)s * (size_t)x->dx->n_dev + (size_t)x->dx->node_dev[id];
  return x->local_slot[key] >= 0 ? x->local_slot[key] : s;
}

int fg_xfer_fetches(fg_xfer_state *x, const fg_plan_request *req, fg_status *st) {
  if (!x->xp) return 0;
  fg_plan *plan = x->plan;
  int me = x->dx->my_rank, size = x->dx->p2p->size;
  for (int i = 0; i < req->n_fetches; i++) {
    int node = req->fetches[i].node;
    int src = plan->slot_of_output[node] + req->fetches[i].index;
    /* The same tensor fetched twice travels once. */
    int dup = -1;
    for (int j = 0; j < i && dup < 0; j++)
      if (req->fetches[j].node == node && req->fetches[j].index == req->fetches[i].index) dup = j;
    if (dup >= 0) {
      x->fetch_slot[i] = x->fetch_slot[dup];
      continue;
    }
    int owner = rank_of(x, node), dev = x->dx->node_dev[node];
    for (int q = 0; q < size; q++) {
      if (q == owner) continue;
      int tag = x->next_tag++;
      if (me == owner) {
        if (add_step(x, FG_XFER_SEND, node, dev, src, -1, q, tag, st) < 0) return -1;
      } else if (me == q) {
        /* Its own fetch buffer: the producer's slot here may be a feed, a
         * constant or this process's stale copy of a variable. (The
         * memory stage gives it its place among the fetch buffers.) */
        int s = new_slot(x, src, -1);
        plan->slot_kind[s] = FG_SLOT_PINNED;
        if (add_step(x, FG_XFER_RECV, node, x->my_dev, src, s, owner, tag, st) < 0) return -1;
        x->fetch_slot[i] = s;
      }
    }
  }
  return 0;
}
