/* Building execution plans: the chain of stages (plan_stages.h) and the
 * plan's cache key and lifetime. See plan.h. */
#include <stdlib.h>
#include <string.h>

#include "executor/backend.h"
#include "executor/cuda_backend.h"
#include "executor/plan_stages.h"
#include "graph/tensor_internal.h"

/* The cache key: feeds (node, dtype, rank, dims), fetches, targets, each
 * list prefixed by its length. */
static int64_t *plan_key(const fg_plan_request *req, size_t *len) {
  size_t n = 3 + (size_t)req->n_feeds * (3 + FG_MAX_RANK) + (size_t)req->n_fetches * 2 +
             (size_t)req->n_targets;
  int64_t *k = malloc(n * sizeof *k);
  if (!k) return NULL;
  size_t p = 0;
  k[p++] = req->n_feeds;
  for (int i = 0; i < req->n_feeds; i++) {
    const fg_tensor *t = req->feed_tensors[i];
    k[p++] = req->feed_nodes[i];
    k[p++] = t->dtype;
    k[p++] = t->rank;
    for (int d = 0; d < FG_MAX_RANK; d++)
      k[p++] = d < t->rank ? t->dims[d] : 0;
  }
  k[p++] = req->n_fetches;
  for (int i = 0; i < req->n_fetches; i++) {
    k[p++] = req->fetches[i].node;
    k[p++] = req->fetches[i].index;
  }
  k[p++] = req->n_targets;
  for (int i = 0; i < req->n_targets; i++)
    k[p++] = req->targets[i];
  *len = p;
  return k;
}

/* Compares the request with the stored key in place: looking up a cached
 * plan must not allocate. */
int fg_plan_matches(const fg_plan *plan, const fg_graph *g, const fg_plan_request *req) {
  if (plan->graph_version != fg_graph_version(g)) return 0;
  const int64_t *k = plan->key;
  size_t len = 3 + (size_t)req->n_feeds * (3 + FG_MAX_RANK) + (size_t)req->n_fetches * 2 +
               (size_t)req->n_targets;
  if (len != plan->key_len) return 0;
  size_t p = 0;
  if (k[p++] != req->n_feeds) return 0;
  for (int i = 0; i < req->n_feeds; i++) {
    const fg_tensor *t = req->feed_tensors[i];
    if (k[p++] != req->feed_nodes[i] || k[p++] != t->dtype || k[p++] != t->rank) return 0;
    for (int d = 0; d < FG_MAX_RANK; d++)
      if (k[p++] != (d < t->rank ? t->dims[d] : 0)) return 0;
  }
  if (k[p++] != req->n_fetches) return 0;
  for (int i = 0; i < req->n_fetches; i++)
    if (k[p++] != req->fetches[i].node || k[p++] != req->fetches[i].index) return 0;
  if (k[p++] != req->n_targets) return 0;
  for (int i = 0; i < req->n_targets; i++)
    if (k[p++] != req->targets[i]) return 0;
  return 1;
}

void fg_plan_release_arena(fg_plan *plan, void *p) {
  if (p) (plan->arena_free ? plan->arena_free : free)(p);
}

void fg_plan_free(fg_plan *plan) {
  if (!plan) return;
  for (int i = 0; i < plan->n_steps; i++) {
    free(plan->steps[i].in_slots);
    free(plan->steps[i].out_slots);
    free(plan->steps[i].in);
    if (plan->steps[i].krelease) plan->steps[i].krelease(plan->steps[i].kstate);
  }
  free(plan->steps);
  free(plan->key);
  free(plan->slots);
  free(plan->slot_node);
  free(plan->slot_kind);
  free(plan->slot_step);
  free(plan->slot_last);
  free(plan->slot_shared);
  free(plan->slot_offset);
  free(plan->slot_of_output);
  free(plan->n_preds);
  free(plan->succ_off);
  free(plan->succ);
  free(plan->feed_slots);
  free(plan->fetch_slots);
  fg_plan_release_arena(plan, plan->arena);
  for (int d = 0; plan->dev_arena && d < plan->n_dev; d++)
    fg_plan_release_arena(plan, plan->dev_arena[d]);
  free(plan->dev_arena);
  free(plan->dev_bytes);
  free(plan->step_dev);
  free(plan->slot_dev);
  free(plan->step_lane);
  free(plan->pinned);
  free(plan->timings);
  fg_cuda_plan_release(plan->device);
  free(plan);
}

int fg_plan_oom(fg_status *st, const char *what) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "plan: out of memory (%s)", what);
  return -1;
}

int fg_plan_builder_init(fg_plan_builder *b, const fg_graph *g, const fg_plan_request *req,
                         fg_var_lookup_fn vars, void *vars_ctx, fg_status *st) {
  memset(b, 0, sizeof *b);
  b->g = g;
  b->req = req;
  b->vars = vars;
  b->vars_ctx = vars_ctx;
  b->backends = fg_backends;
  fg_plan *plan = b->plan = calloc(1, sizeof *plan);
  b->needed = calloc((size_t)g->n_nodes + 1, 1);
  b->feed_of = malloc(((size_t)g->n_nodes + 1) * sizeof *b->feed_of);
  if (!plan || !b->needed || !b->feed_of) return fg_plan_oom(st, "bookkeeping");
  plan->graph_version = fg_graph_version(g);
  plan->threads = req->threads;
  plan->cuda = req->cuda;
  plan->arena_alloc =
      req->dist && req->dist->arena_alloc ? req->dist->arena_alloc : fg_aligned_alloc;
  plan->arena_free = req->dist && req->dist->arena_free ? req->dist->arena_free : free;
  plan->multi_device = req->dist && req->dist->n_dev > 1;
  plan->key = plan_key(req, &plan->key_len);
  plan->slot_of_output = malloc(((size_t)g->n_nodes + 1) * sizeof(int));
  if (!plan->key || !plan->slot_of_output) return fg_plan_oom(st, "key");
  for (int i = 0; i < g->n_nodes; i++)
    b->feed_of[i] = -1, plan->slot_of_output[i] = -1;
  for (int i = 0; i < req->n_feeds; i++)
    b->feed_of[req->feed_nodes[i]] = i;
  return 0;
}

void fg_plan_builder_free(fg_plan_builder *b) {
  free(b->E.e);
  free(b->needed);
  free(b->fetched);
  free(b->feed_of);
  free(b->seq);
  fg_xfer_free(&b->X);
  memset(b, 0, sizeof *b);
}

fg_plan *fg_plan_build(const fg_graph *g, const fg_plan_request *req, fg_var_lookup_fn vars,
                       void *vars_ctx, fg_status *st) {
  fg_plan_builder b;
  int rc = fg_plan_builder_init(&b, g, req, vars, vars_ctx, st);
  if (rc == 0) rc = fg_plan_resolve(&b, st);
  if (rc == 0) rc = fg_plan_infer(&b, st);
  if (rc == 0) rc = fg_plan_layout(&b, st);
  if (rc == 0) rc = fg_plan_select(&b, st);
  if (rc == 0) rc = fg_plan_dependencies(&b, st);
  if (rc == 0) rc = fg_plan_memory(&b, st);
  if (rc == 0) rc = fg_plan_schedule(&b, st);
  fg_plan *plan = b.plan;
  fg_plan_builder_free(&b);
  if (rc != 0) {
    fg_plan_free(plan);
    return NULL;
  }
  return plan;
}

void fg_plan_mark_run_modes(fg_plan *plan, const fg_graph *g) {
  for (int si = 0; si < plan->n_steps; si++) {
    int op = g->nodes[plan->steps[si].node].op;
    plan->train_step |= fg_op_is_update(op);
    plan->writes_vars |= fg_op_table[op].mutable_inputs != 0 || op == FG_OP_ASSIGN;
    plan->run_state |= fg_op_reads_run_state(op);
  }
}
