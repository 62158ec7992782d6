/* Execution plans: the pruned, ordered steps of one (feeds, fetches,
 * targets, feed shapes) signature, with every tensor's concrete shape, its
 * kernel, its buffer and the dependency graph the thread pool schedules. A
 * session caches plans; running a cached plan allocates nothing but the
 * fetched tensors it returns.
 *
 * Buffers ("slots"): every output a plan touches has one slot. Placeholder
 * slots point at the feed (rebound each run), constant slots at the graph's
 * constant data, variable slots and the outputs of ops that update a
 * variable at the session's storage, fetched outputs at their own pinned
 * buffers, and every other slot at the offset the memory planner
 * (memplan.h) gave it in one 64-byte aligned arena. */
#ifndef FG_PLAN_H
#define FG_PLAN_H

#include "executor/threadpool.h"
#include "flowgraph/profile.h"
#include "flowgraph/session.h"
#include "graph/graph_internal.h"
#include "kernels/kernel.h"

typedef struct fg_step {
  int node;
  fg_kernel_fn fn;
  fg_op_params params; /* the op's parameters, parsed once (fg_op_parse_params) */
  int n_in, n_out;
  int *in_slots;  /* n_in slot ids */
  int *out_slots; /* n_out slot ids (consecutive) */
  fg_kbuf *in;    /* n_in kbufs, refreshed from the slots at the start of a run */
  int64_t flops;  /* the op table's estimate for the concrete shapes */
  /* Several devices (FG_XFER_*): a transfer step of one cross-device edge
   * carrying `node`'s output (plan_xfer.h); 0 for an ordinary step. A
   * node another process runs has no step (its outputs' slots are
   * FG_SLOT_REMOTE). */
  int xfer;
  int peer, tag; /* FG_XFER_SEND / FG_XFER_RECV: the other rank, the message tag */
  /* A GPU plan's step of a node placed on a CPU device: fn is the CPU
   * kernel, and the CUDA backend runs it on host copies of its inputs
   * (fg_plan_request.host_nodes). */
  int host;
  /* The kernel's plan-time state (fg_kprep) and what frees it with the
   * plan; NULL for kernels without a prepare hook. */
  void *kstate;
  fg_krelease_fn krelease;
  fg_kbytes_fn kbytes;   /* the state's buffers (plan info), or NULL */
  unsigned fixed_inputs; /* fg_kctx.fixed_inputs: inputs from variable or constant slots */
  unsigned const_inputs; /* fg_kctx.const_inputs: inputs from constant slots */
} fg_step;

enum {
  FG_XFER_NONE,
  FG_XFER_COPY, /* recv between devices of this process: a memcpy */
  FG_XFER_RECV, /* recv from another process (the communicator's recv) */
  FG_XFER_SEND, /* send to another process */
};
/* A step that receives a tensor (profiles call it "recv"). */
static inline int fg_step_is_recv(const fg_step *s) {
  return s->xfer == FG_XFER_COPY || s->xfer == FG_XFER_RECV;
}

/* Where a slot's bytes live. */
enum {
  FG_SLOT_FEED,
  FG_SLOT_CONSTANT,
  FG_SLOT_VARIABLE,
  FG_SLOT_ARENA,
  FG_SLOT_PINNED,
  FG_SLOT_REMOTE /* output of a node another process runs: no bytes here */
};

typedef struct fg_plan {
  /* The cache key: see plan_key() in plan.c. */
  int64_t *key;
  size_t key_len;
  uint64_t graph_version;
  /* What the ranks agree on before a run of this plan (fg_dist_run_key):
   * the rounds (0: none) and the key. Set by the session. */
  int run_rounds;
  uint64_t run_key[2];

  fg_kbuf *slots;
  int n_slots;
  int *slot_node;       /* producer node per slot */
  int *slot_kind;       /* FG_SLOT_* */
  int *slot_step;       /* producing step, -1 for sources */
  int *slot_last;       /* last step reading it, -1 if none */
  int *slot_shared;     /* slot whose bytes it took over in place, or -1 */
  int64_t *slot_offset; /* arena offset, -1 outside the arena */
  int *slot_of_output;  /* first slot of each graph node (indexed by node id), -1 if unused */

  fg_step *steps;
  int n_steps;
  /* The DAG for the pool: predecessor counts and successor lists. */
  int *n_preds;
  int *succ_off;
  int *succ;

  int *feed_slots; /* per feed (in key order): the slot its tensor binds to, or -1 */
  int n_feeds;
  int *fetch_slots; /* per fetch */
  int n_fetches;

  void *arena; /* intermediate buffers */
  /* Host arenas come from arena_alloc and go back through arena_free:
   * req->dist's pair (memory the process communicator's peers on this host
   * can map, dist/comm/shm_arena.h), else fg_aligned_alloc and free. */
  void *(*arena_alloc)(size_t bytes);
  void (*arena_free)(void *p);
  size_t arena_bytes, lower_bound_bytes, naive_bytes;
  void *pinned; /* fetched outputs */
  size_t pinned_bytes;
  int64_t max_memory_bytes; /* the request's limit, checked before allocating */

  int64_t flops;           /* estimated work of one run (op table FLOP counts) */
  int threads;             /* the session's threads, which the layout was chosen for */
  fg_node_timing *timings; /* n_steps, filled when metadata is collected */
  /* CLOCK_MONOTONIC ns the timings' start_ns and end_ns count from, set
   * by the run that filled them (0: the caller's own clock reading). */
  int64_t timings_t0;

  /* GPU plans (req->cuda): no host arena (arena slots hold NULL until
   * fg_cuda_plan_prepare binds them to device memory); `device` is the
   * CUDA executor's state, freed with the plan. */
  int cuda;
  void *device;
  /* Built for several devices (req->dist): each device's tensors are
   * planned into that device's own arena (on the DAG, no reuse edges, which
   * could order one device's collective after another's and deadlock them),
   * and every data edge between devices is a recv step on the consumer's
   * device copying into its arena. */
  int multi_device;
  int n_dev;         /* devices of the partition (1 for a single-device plan) */
  int *step_dev;     /* per step: device index (multi-device plans), else NULL */
  int *slot_dev;     /* per slot: the device whose arena holds it, or -1 */
  void **dev_arena;  /* per device (multi-device plans) */
  size_t *dev_bytes; /* per device: its arena's bytes; arena_bytes is the sum */
  /* Plans of sessions with a dist state (executor/dist/exec.h): each step's lane;
   * NULL otherwise. use_lanes: the run goes through the lane runner
   * (several devices, or collectives on their own lane). */
  int *step_lane;
  int use_lanes;

  struct fg_plan *next; /* the session's cache list */
  /* The graph the plan was built on and runs on (the session's optimized
   * copy or its graph, fg_session_plan_graph); set by the session. */
  const struct fg_graph *built_on;

  /* Training mode (fg_training in flowgraph/graph.h). train_step: the plan
   * applies an optimizer update, so an unfed training flag is true;
   * run_state: some step reads the fields below (never captured into a
   * CUDA Graph, which would freeze them). The session sets the rest before
   * each run; the run loops copy them into every kernel's fg_kctx. */
  int train_step, run_state;
  /* writes_vars: some step may write a variable (an update, assign); the
   * session then counts the run in var_version, which kernels see. */
  int writes_vars;
  uint64_t var_version;
  uint64_t rng_step;
  uint32_t rng_replica;
  int run_training;
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
  int threads; /* the session's thread count (not part of the key: fixed per session) */
  /* Session options the planner and the run obey (not part of the key:
   * fixed per session). max_memory_bytes: 0 = only the machine's memory. */
  int check_numerics;
  int64_t max_memory_bytes;
  /* 1: a GPU plan (kernels from the CUDA row of backend.h); fixed per session. */
  int cuda;
  /* Several devices or a communicator (executor/dist/exec.h); NULL: one device. Not
   * part of the key: fixed per session and graph version. */
  const struct fg_dist_exec *dist;
  /* A GPU plan (cuda 1) only: per node id, 1 for a node that runs on the
   * host with its CPU kernel (fg_dist_session_host_nodes); NULL: none. Not
   * part of the key: fixed per session and graph version. */
  const unsigned char *host_nodes;
  /* The session's threads for those host steps' kernels; NULL: one. */
  const fg_kparallel *host_par;
  /* The session's store of converted constants its plans' kernels share
   * (kernels/share.h), handed to the prepare hooks; NULL: each plan keeps
   * its own. Not part of the key: fixed per session, and it outlives the
   * session's plans. */
  struct fgk_share *share;
} fg_plan_request;

/* Variable storage lookup, provided by the session: the current value of the
 * variable node `node`. */
typedef fg_tensor *(*fg_var_lookup_fn)(void *ctx, int node);

/* Builds a plan; NULL with status set on failure. */
fg_plan *fg_plan_build(const fg_graph *g, const fg_plan_request *req, fg_var_lookup_fn vars,
                       void *vars_ctx, fg_status *status);
/* Sets needed[id] (zeroed by the caller, g->n_nodes + 1 bytes) for every
 * node the request's fetches and targets need, with the collectives every
 * device must run alongside (fg_plan_build's set). -1 when out of memory. */
int fg_plan_mark_needed(const fg_graph *g, const fg_plan_request *req, char *needed);
/* Whether `plan` was built for this request (same key). */
int fg_plan_matches(const fg_plan *plan, const fg_graph *g, const fg_plan_request *req);
void fg_plan_free(fg_plan *plan);

/* Waking a second thread costs microseconds: a plan with less work than
 * this (about 100 microseconds single-threaded) runs on the calling thread
 * alone. Kernels give the same bits either way, so this changes speed only. */
#define FG_PARALLEL_MIN_FLOPS ((int64_t)8 << 20)

/* The threads a run of this plan uses: the session's, or 1 for small plans. */
static inline int fg_plan_threads(const fg_plan *plan) {
  return plan->flops < FG_PARALLEL_MIN_FLOPS || plan->threads < 1 ? 1 : plan->threads;
}

/* The fg_kctx that runs plan step `step`, reading `in` and writing `out`:
 * its parameters, the error buffer (emptied here) and the run's training
 * step and mode. par, cuda, comm, code and state stay NULL for the caller
 * to set where it has them. */
static inline fg_kctx fg_plan_step_kctx(const fg_plan *plan, const fg_step *step, const fg_kbuf *in,
                                        fg_kbuf *out, char *err, size_t err_size) {
  err[0] = '\0';
  return (fg_kctx){.in = in,
                   .n_in = step->n_in,
                   .out = out,
                   .n_out = step->n_out,
                   .p = &step->params,
                   .err = err,
                   .err_size = err_size,
                   .rng_step = plan->rng_step,
                   .rng_replica = plan->rng_replica,
                   .run_training = plan->run_training,
                   .fixed_inputs = step->fixed_inputs,
                   .var_version = plan->var_version,
                   .const_inputs = step->const_inputs};
}

/* Sets plan's train_step, run_state and writes_vars from its steps' ops. */
void fg_plan_mark_run_modes(fg_plan *plan, const fg_graph *g);

/* check_numerics: fails with FG_INVALID_ARGUMENT naming the
 * first fed tensor that holds NaN or Inf ("feed 'x' (placeholder): holds 1
 * NaN and 0 Inf (check_numerics)"), before anything runs. The session
 * calls it before the ranks agree to start the run (executor/dist/exec.h
 * fg_dist_run_agree), so a NaN fed on one rank stops its peers at once. */
int fg_plan_check_feeds(const fg_graph *g, const fg_plan *plan, const fg_plan_request *req,
                        fg_status *st);

/* Runs the plan once with the request's feed tensors on `pool` (NULL or one
 * thread: in order on the calling thread). With `timings` set, fills
 * plan->timings. */
int fg_plan_run(const fg_graph *g, fg_plan *plan, const fg_plan_request *req, fg_pool *pool,
                int timings, fg_status *status);

#endif
