/* The resolve stage of plan building (plan_stages.h): what the request
 * needs, the step order, slots, steps, sources and transfers. */
#include <stdlib.h>
#include <string.h>

#include "executor/dist/exec.h"
#include "executor/plan_order.h"
#include "executor/plan_stages.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

static void mark_ancestors(const fg_graph *g, char *needed) {
  for (int id = g->n_nodes - 1; id >= 0; id--) {
    if (!needed[id]) continue;
    const fg_node *n = &g->nodes[id];
    for (int i = 0; i < n->n_inputs; i++)
      needed[n->inputs[i].node] = 1;
  }
}

/* Devices' all_reduce steps pair up by order: the k-th on each device is one
 * collective. A fetch that needs device 0's k-th (one replica's reduced
 * gradient, say) would run it alone, and it would wait for the other
 * devices until the deadline. So when any device needs its k-th, every
 * device runs its first k + 1, with what they need. Returns -1 on OOM. */
static int close_collectives(const fg_graph *g, const fg_dist_exec *dx, char *needed) {
  /* dx->node_dev is indexed for collectives only: a session's optimized
   * copy may end with constants its passes appended, past the partition's
   * nodes (fg_dist_run_key passes the partition's own array), and those
   * are never collectives. */
  if (!dx || dx->n_dev < 2) return 0;
  int *count = calloc((size_t)dx->n_dev, sizeof *count);
  if (!count) return -1;
  /* Needed only grows, so this ends; one round unless ancestors on one
   * device need a later collective of another. */
  for (;;) {
    /* k: how many collectives the device that needs the most must run */
    int k = 0, changed = 0;
    memset(count, 0, (size_t)dx->n_dev * sizeof *count);
    for (int id = 0; id < g->n_nodes; id++) {
      if (!fg_node_is_collective(&g->nodes[id])) continue;
      int c = ++count[dx->node_dev[id]];
      if (needed[id] && c > k) k = c;
    }
    memset(count, 0, (size_t)dx->n_dev * sizeof *count);
    for (int id = 0; id < g->n_nodes && k > 0; id++)
      if (fg_node_is_collective(&g->nodes[id]) && ++count[dx->node_dev[id]] <= k && !needed[id])
        needed[id] = changed = 1;
    if (!changed) break;
    mark_ancestors(g, needed);
  }
  free(count);
  return 0;
}

/* Marks what the fetches and targets need, walking inputs backwards. Node
 * ids are topological, so one descending sweep suffices (a session's
 * copy may end with constants its passes appended, read by earlier nodes:
 * they have no inputs to walk, and are bound before every step). */
int fg_plan_mark_needed(const fg_graph *g, const fg_plan_request *req, char *needed) {
  for (int i = 0; i < req->n_fetches; i++)
    needed[req->fetches[i].node] = 1;
  for (int i = 0; i < req->n_targets; i++)
    needed[req->targets[i]] = 1;
  mark_ancestors(g, needed);
  return close_collectives(g, req->dist, needed);
}

/* A placeholder nobody fed: name it and the first fetch or target that
 * needs it. */
static void report_missing_feed(const fg_graph *g, const fg_plan_request *req, int ph,
                                fg_status *st) {
  const char *who = NULL;
  char *reach = calloc((size_t)g->n_nodes, 1);
  for (int f = 0; reach && !who && f < req->n_fetches + req->n_targets; f++) {
    int root = f < req->n_fetches ? req->fetches[f].node : req->targets[f - req->n_fetches];
    memset(reach, 0, (size_t)g->n_nodes);
    reach[root] = 1;
    for (int id = root; id >= ph; id--)
      if (reach[id])
        for (int i = 0; i < g->nodes[id].n_inputs; i++)
          reach[g->nodes[id].inputs[i].node] = 1;
    if (reach[ph]) who = g->nodes[root].name;
  }
  free(reach);
  char buf[FG_SHAPE_STR_MAX];
  const fg_tinfo *t = &g->nodes[ph].outputs[0];
  fg_status_set(st, FG_INVALID_ARGUMENT,
                "placeholder '%s' (%s %s) is needed by '%s' but was not fed", g->nodes[ph].name,
                fg_dtype_name(t->dtype), fg_shape_str(t->rank, t->dims, buf, sizeof buf),
                who ? who : "?");
}

/* Numbers the needed nodes' slots in node order and counts their steps;
 * refuses a placeholder nobody fed. */
static int number_slots(fg_plan_builder *b, int *n_slots, int *n_steps, fg_status *st) {
  const fg_graph *g = b->g;
  *n_slots = *n_steps = 0;
  for (int id = 0; id < g->n_nodes; id++) {
    if (!b->needed[id]) continue;
    if (g->nodes[id].op == FG_OP_PLACEHOLDER && b->feed_of[id] < 0) {
      report_missing_feed(g, b->req, id, st);
      return -1;
    }
    b->plan->slot_of_output[id] = *n_slots;
    *n_slots += g->nodes[id].n_outputs;
    if (!(fg_op_table[g->nodes[id].op].flags & FG_OPF_SOURCE)) (*n_steps)++;
  }
  return 0;
}

/* The per-slot and per-step arrays, for n_slots slots and n_steps steps
 * (the nodes' and at most xcap transfers'). */
static int alloc_tables(fg_plan_builder *b, int n_slots, int n_steps, int64_t xcap, fg_status *st) {
  fg_plan *plan = b->plan;
  const fg_plan_request *req = b->req;
  n_slots += (int)xcap;
  n_steps += (int)xcap;
  size_t ns1 = (size_t)n_slots + 1;
  b->slot_cap = n_slots;
  plan->slots = calloc(ns1, sizeof *plan->slots);
  plan->slot_node = malloc(ns1 * sizeof(int));
  plan->slot_kind = malloc(ns1 * sizeof(int));
  plan->slot_step = malloc(ns1 * sizeof(int));
  plan->slot_last = malloc(ns1 * sizeof(int));
  plan->slot_shared = malloc(ns1 * sizeof(int));
  plan->slot_offset = malloc(ns1 * sizeof(int64_t));
  plan->steps = calloc((size_t)n_steps + 1, sizeof *plan->steps);
  plan->slot_dev = malloc(ns1 * sizeof(int));
  if (req->dist) plan->step_lane = malloc(((size_t)n_steps + 1) * sizeof(int));
  if (b->node_dev) plan->step_dev = malloc(((size_t)n_steps + 1) * sizeof(int));
  b->fetched = calloc(ns1, 1);
  /* The walk: every step, and the nodes other processes run. */
  b->seq = malloc(((size_t)n_steps + (size_t)b->g->n_nodes + 1) * sizeof *b->seq);
  if (!plan->slots || !plan->slot_node || !plan->slot_kind || !plan->slot_step ||
      !plan->slot_last || !plan->slot_shared || !plan->slot_offset || !plan->steps || !b->fetched ||
      !b->seq || !plan->slot_dev || (req->dist && !plan->step_lane) ||
      (b->node_dev && !plan->step_dev))
    return fg_plan_oom(st, "slots");
  for (int i = 0; i < req->n_fetches; i++)
    b->fetched[plan->slot_of_output[req->fetches[i].node] + req->fetches[i].index] = 1;
  return 0;
}

/* A source's slot s0: the feed (placeholder), the session's storage
 * (variable) or the graph's value (constant). */
static int bind_source(fg_plan_builder *b, int id, int s0, fg_status *st) {
  fg_plan *plan = b->plan;
  const fg_node *n = &b->g->nodes[id];
  const fg_tensor *t = NULL;
  if (n->op == FG_OP_PLACEHOLDER) {
    t = b->req->feed_tensors[b->feed_of[id]];
    plan->slot_kind[s0] = FG_SLOT_FEED;
  } else if (n->op == FG_OP_VARIABLE) {
    t = b->vars(b->vars_ctx, id);
    plan->slot_kind[s0] = FG_SLOT_VARIABLE;
  } else {
    t = fg_attrs_find(&n->attrs, "value")->t;
    plan->slot_kind[s0] = FG_SLOT_CONSTANT;
  }
  if (!t) {
    fg_status_set(st, FG_INTERNAL, "node '%s' (%s): no value", n->name, fg_op_table[n->op].name);
    return -1;
  }
  fg_kbuf *k = &plan->slots[s0];
  k->dtype = t->dtype;
  k->rank = t->rank;
  for (int d = 0; d < FG_MAX_RANK; d++)
    k->dims[d] = d < t->rank ? t->dims[d] : 0;
  k->data = t->data;
  return 0;
}

/* Node id's step, reading its inputs through the transfers that bring them
 * to its device; a node another process runs gets no step (its outputs'
 * slots are FG_SLOT_REMOTE), only a place in the walk. */
static int add_node_step(fg_plan_builder *b, int id, int s0, fg_status *st) {
  fg_plan *plan = b->plan;
  const fg_node *n = &b->g->nodes[id];
  int local = fg_xfer_local(&b->X, id);
  for (int o = 0; o < n->n_outputs; o++) {
    plan->slot_dev[s0 + o] = b->node_dev ? b->node_dev[id] : 0;
    /* The memory stage places a local step's outputs. */
    plan->slot_kind[s0 + o] = local ? FG_SLOT_ARENA : FG_SLOT_REMOTE;
  }
  if (!local) {
    b->seq[b->n_seq++] = -1 - id;
    return 0;
  }
  int si = plan->n_steps++;
  fg_step *step = &plan->steps[si];
  step->node = id;
  if (b->node_dev) plan->step_dev[si] = b->node_dev[id];
  step->n_in = n->n_inputs;
  step->n_out = n->n_outputs;
  step->in_slots = malloc((size_t)(n->n_inputs ? n->n_inputs : 1) * sizeof(int));
  step->out_slots = malloc((size_t)(n->n_outputs ? n->n_outputs : 1) * sizeof(int));
  step->in = calloc((size_t)(n->n_inputs ? n->n_inputs : 1), sizeof *step->in);
  if (!step->in_slots || !step->out_slots || !step->in) return fg_plan_oom(st, "steps");
  for (int i = 0; i < n->n_inputs; i++) {
    int s = plan->slot_of_output[n->inputs[i].node] + n->inputs[i].index;
    step->in_slots[i] = fg_xfer_input_slot(&b->X, id, i, s);
  }
  for (int o = 0; o < n->n_outputs; o++) {
    step->out_slots[o] = s0 + o;
    plan->slot_step[s0 + o] = si;
  }
  b->seq[b->n_seq++] = si;
  return 0;
}

/* Adds the steps from `first` on (transfers) to the walk. */
static void walk_steps(fg_plan_builder *b, int first) {
  for (int si = first; si < b->plan->n_steps; si++)
    b->seq[b->n_seq++] = si;
}

/* One node of the serial order: its slots, and its step or its source. */
static int resolve_node(fg_plan_builder *b, int id, fg_status *st) {
  fg_plan *plan = b->plan;
  const fg_node *n = &b->g->nodes[id];
  int s0 = plan->slot_of_output[id];
  for (int o = 0; o < n->n_outputs; o++) {
    plan->slot_node[s0 + o] = id;
    plan->slot_step[s0 + o] = -1;
    plan->slot_shared[s0 + o] = -1;
    plan->slot_offset[s0 + o] = -1;
    plan->slot_last[s0 + o] = -1;
    plan->slot_dev[s0 + o] = -1;
  }
  if (fg_op_table[n->op].flags & FG_OPF_SOURCE) return bind_source(b, id, s0, st);
  int first = plan->n_steps;
  if (fg_xfer_before_node(&b->X, id, st) != 0) return -1;
  walk_steps(b, first);
  return add_node_step(b, id, s0, st);
}

int fg_plan_resolve(fg_plan_builder *b, fg_status *st) {
  const fg_graph *g = b->g;
  const fg_plan_request *req = b->req;
  fg_plan *plan = b->plan;
  if (fg_plan_mark_needed(g, req, b->needed) != 0) return fg_plan_oom(st, "needed nodes");
  int n_slots, n_steps;
  if (number_slots(b, &n_slots, &n_steps, st) != 0) return -1;
  b->node_dev = plan->multi_device ? req->dist->node_dev : NULL;
  b->n_node_slots = n_slots;
  plan->n_dev = plan->multi_device ? req->dist->n_dev : 1;
  /* Also a graph whose every node is on one other rank's device: a single
   * device here, but not this process's to run alone. */
  if (req->dist && req->dist->my_rank == -2) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "the graph places nodes on devices of other MPI ranks (rank:R/...) but the "
                  "session has no process communicator; attach one with fg_session_set_comm "
                  "(flowgraph train/run --dist mpi)");
    return -1;
  }
  /* Several devices: room for the transfer steps and their slots
   * (plan_xfer.h). */
  int64_t xcap = fg_xfer_max_steps(g, b->needed, req);
  if (xcap > INT32_MAX / 4) return fg_plan_oom(st, "transfers");
  if (alloc_tables(b, n_slots, n_steps, xcap, st) != 0 ||
      fg_xfer_init(&b->X, g, plan, req, n_slots, xcap, st) != 0)
    return -1;
  /* The serial step order (plan_order.h). Several devices keep node order:
   * their transfers are numbered in it (plan_xfer.h), and their arenas are
   * laid out on the DAG (plan_memory.c), not on the serial order, so moving
   * updates up would not change them (the in-process data-parallel
   * mlp_large_train: the same 41.2 MB per device either way). */
  int *order = malloc(((size_t)g->n_nodes + 1) * sizeof *order);
  int n_order = order ? fg_plan_order(g, b->needed, !plan->multi_device, order) : -1;
  int rc = n_order < 0 ? fg_plan_oom(st, "step order") : 0;
  for (int oi = 0; rc == 0 && oi < n_order; oi++)
    rc = resolve_node(b, order[oi], st);
  free(order);
  if (rc != 0) return -1;
  /* The fetched tensors of other ranks, which their owners send. */
  int first = plan->n_steps;
  if (fg_xfer_fetches(&b->X, req, st) != 0) return -1;
  walk_steps(b, first);
  plan->n_slots = plan->multi_device ? b->X.next_slot : n_slots;
  return 0;
}
