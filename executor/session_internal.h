/* The session's state and the steps its calls share, for the files that
 * implement the session API (session.c, session_info.c). */
#ifndef FG_SESSION_INTERNAL_H
#define FG_SESSION_INTERNAL_H

#include <stdatomic.h>

#include "executor/cuda_backend.h"
#include "executor/dist/exec.h"
#include "executor/passes/passes.h"
#include "executor/plan.h"
#include "flowgraph/profile.h"

/* The graph metadata key of the session's training runs (train_steps). */
#define TRAIN_STEPS_KEY "training_steps"

struct fg_session {
  fg_graph *g;
  uint64_t version; /* graph version the variables and plans were made for */
  fg_session_options opts;
  fg_tensor **vars;      /* per node id: the current value of a variable, else NULL */
  int n_vars_cap;        /* entries in vars */
  fg_plan *plans;        /* the cache */
  fg_pool *pool;         /* opts.num_threads threads, made once */
  fg_kparallel host_par; /* the pool's parallel_for, for a GPU plan's host steps */
  atomic_flag busy;
  fg_cuda_ctx *cuda;     /* GPU state when opts.device is "cuda:N", else NULL */
  fg_dist_session *dist; /* placement, per-device pools, communicators (executor/dist/exec.h) */
  /* home_vars: the arena the variables live in, or NULL; vars_homed is 0
   * while some variable is outside it. */
  void *var_arena;
  int vars_homed;
  /* Runs whose training flag was true (fg_training in flowgraph/graph.h):
   * the step dropout masks are keyed by; saved as the graph's metadata
   * TRAIN_STEPS_KEY by fg_session_save. */
  uint64_t train_steps;
  uint64_t var_version; /* runs that may have written variables (fg_kctx.var_version) */
  /* The optimized copy of the graph plans are built from (the node ids
   * of g, then any constants the passes appended; executor/passes/
   * passes.h), or NULL: plans use g itself. See fg_session_plan_graph. */
  fg_pass_graph *opt;
  char *passes; /* the session's copy of opts.passes */
  /* Converted constants (a conv's weight in oneDNN's layout) the CPU
   * plans' kernels share (kernels/share.h); NULL when out of memory. */
  struct fgk_share *share;
};

/* The op a plan step of node `node` of the plan's graph g runs, as run
 * metadata and plan info name it: the op's name, or for a fused node the
 * ops it holds ("fused_elementwise[add+relu]"; interned, valid for the
 * process). */
const char *fg_session_op_label(const fg_graph *g, int node);
/* The graph a request's plan is built from and runs on (a function of the
 * request, decided when its plan is built; the plan keeps it in
 * built_on): the optimized copy, whose node ids are the source's and past
 * them the constants passes appended; but the source graph when a fetch
 * names an output the copy's node no longer has (a batch norm's
 * statistics, where fold_inference rewrote the batch norm into a
 * one-output conv2d), as the source still computes it, or when the run
 * needs some of a multi-tensor update's variables' updates but not all
 * (the multi node would apply the others too). NULL when out of memory. */
const fg_graph *fg_session_plan_graph(const fg_session *s, const fg_plan_request *req);
/* Brings the session up to date with its graph: validates it, creates
 * storage for variables added since (existing ones keep their values) and
 * runs the optimization passes on a new copy. 0, or -1 with st set. */
int fg_session_sync(fg_session *s, fg_status *st);
/* Resolves names and checks arguments into a plan request; a feed of the
 * training flag (fg_training) sets *training instead. 0 or -1. */
int fg_session_resolve(fg_session *s, const fg_feed *feeds, int n_feeds, const char *const *fetches,
                       int n_fetches, const char *const *targets, int n_targets,
                       fg_plan_request *req, int *feed_nodes, fg_output *fetch_outs,
                       int *target_nodes, const fg_tensor **feed_tensors,
                       const fg_tensor **training, fg_status *st);
/* Finds or builds the plan for a resolved request; *plan_ns (may be NULL)
 * receives the build time, 0 when cached. NULL with st set on failure. */
fg_plan *fg_session_plan_for(fg_session *s, const fg_plan_request *req, int64_t *plan_ns,
                             fg_status *st);
/* Step si's device as the partition numbers them. */
int fg_session_step_device(const fg_session *s, const fg_plan *plan, int si);

#endif
