/* Execution plans: the pruned, ordered nodes of one (feeds, fetches,
 * targets, feed shapes) signature, with every tensor's concrete shape, its
 * kernel and its buffer. A session caches plans; running a cached plan
 * allocates nothing but the fetched tensors it returns.
 *
 * Buffers ("slots"): every output a plan touches has one slot. Placeholder
 * slots point at the feed (rebound each run), constant slots at the graph's
 * constant data, variable slots at the session's storage, and every other
 * slot at its own region of one 64-byte aligned arena. The memory planner of
 * a later issue replaces the arena layout without touching the rest. */
#ifndef FG_PLAN_H
#define FG_PLAN_H

#include "flowgraph/session.h"
#include "graph/graph_internal.h"
#include "kernels/kernel.h"

typedef struct fg_step {
  int node;
  fg_kernel_fn fn;
  fg_kparams params;
  int n_in, n_out;
  int *in_slots;  /* n_in slot ids */
  int *out_slots; /* n_out slot ids */
} fg_step;

typedef struct fg_plan {
  /* The cache key: see plan_key() in plan.c. */
  int64_t *key;
  size_t key_len;
  uint64_t graph_version;

  fg_kbuf *slots;
  int n_slots;
  int *slot_of_output; /* first slot of each graph node (indexed by node id), -1 if unused */

  fg_step *steps;
  int n_steps;
  int max_inputs;
  fg_kbuf *scratch_in; /* max_inputs kbufs, filled per step */

  int *feed_slots;  /* per feed (in key order): the slot its tensor binds to */
  int n_feeds;
  int *fetch_slots; /* per fetch */
  int n_fetches;

  void *arena; /* intermediate buffers */
  size_t arena_bytes;

  struct fg_plan *next; /* the session's cache list */
} fg_plan;

/* What a plan is built for. Feed ids are node ids of placeholders. */
typedef struct fg_plan_request {
  const int *feed_nodes;
  const fg_tensor *const *feed_tensors;
  int n_feeds;
  const fg_output *fetches;
  const char *const *fetch_names; /* for messages */
  int n_fetches;
  const int *targets;
  int n_targets;
} fg_plan_request;

/* Variable storage lookup, provided by the session: the current value of the
 * variable node `node`. */
typedef fg_tensor *(*fg_var_lookup_fn)(void *ctx, int node);

/* Builds a plan; NULL with status set on failure. */
fg_plan *fg_plan_build(const fg_graph *g, const fg_plan_request *req, fg_var_lookup_fn vars,
                       void *vars_ctx, fg_status *status);
/* Whether `plan` was built for this request (same key). */
int fg_plan_matches(const fg_plan *plan, const fg_graph *g, const fg_plan_request *req);
void fg_plan_free(fg_plan *plan);

/* Runs the plan once with the request's feed tensors. */
int fg_plan_run(const fg_graph *g, fg_plan *plan, const fg_plan_request *req, fg_status *status);

#endif
