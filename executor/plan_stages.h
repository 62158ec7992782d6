/* The stages of building a plan (internal to executor/plan*.c): fg_plan_build
 * (plan.c) runs them in order on one builder, each reading what the stages
 * before it produced and never reaching back:
 *
 *   resolve       (plan_resolve.c)  what the fetches and targets need, the
 *                 step order, one slot per output and one step per node this
 *                 process runs, sources bound to their tensors, transfer
 *                 steps between devices and processes (plan_xfer.h);
 *   infer         (plan_infer.c)    every slot's concrete shape for the fed
 *                 shapes, size limits, the kernels' parameters and FLOPs;
 *   layout        (plan_layout.c)   which intermediates stay in oneDNN's
 *                 channel-blocked layout between convolutions (CPU plans);
 *   select        (plan_select.c)   each step's backend and kernel, asking the
 *                 backend table (backend.h);
 *   dependencies  (plan_schedule.c) the edges any schedule must keep: data,
 *                 each variable's reads and writes, transfers and collectives
 *                 in the order every rank pairs them;
 *   memory        (plan_memory.c)   where each slot's bytes live, the arena
 *                 layout (with the edges that make its reuse safe), fetch
 *                 buffers;
 *   schedule      (plan_schedule.c) the pool's DAG, lanes, feed and fetch
 *                 slots.
 *
 * A stage returns 0, or -1 with the status set; the builder is then freed
 * with fg_plan_builder_free and the plan with fg_plan_free. */
#ifndef FG_PLAN_STAGES_H
#define FG_PLAN_STAGES_H

#include "executor/edges.h"
#include "executor/plan.h"
#include "executor/plan_xfer.h"

/* The fetch buffers' and the arena's alignment. */
#define FG_PLAN_ALIGN 64

typedef struct fg_plan_builder {
  const fg_graph *g;
  const fg_plan_request *req;
  fg_var_lookup_fn vars;
  void *vars_ctx;
  fg_plan *plan;
  /* The backends the select stage asks (backend.h): fg_backends, or a
   * test's own table. */
  const struct fg_backend *const *backends;
  /* resolve */
  char *needed;        /* per node: needed by the fetches and targets */
  int *feed_of;        /* per node: its index in req's feeds, or -1 */
  char *fetched;       /* per slot: 1 for an output a fetch returns */
  const int *node_dev; /* per node its device (multi-device plans), else NULL */
  int n_node_slots;    /* the nodes' slots; transfer slots follow */
  int slot_cap;        /* slots allocated */
  /* The resolved walk, in step order: a step index, or -1 - id for node id
   * that another process runs (its shapes are needed, a step is not). */
  int *seq;
  int n_seq;
  fg_xfer_state X;
  /* dependencies, then memory (reuse edges) */
  fg_edges E;
} fg_plan_builder;

/* Allocates the plan and the bookkeeping; 0 or -1 (out of memory). */
int fg_plan_builder_init(fg_plan_builder *b, const fg_graph *g, const fg_plan_request *req,
                         fg_var_lookup_fn vars, void *vars_ctx, fg_status *st);
/* Frees the bookkeeping, not the plan. */
void fg_plan_builder_free(fg_plan_builder *b);

int fg_plan_resolve(fg_plan_builder *b, fg_status *st);
int fg_plan_infer(fg_plan_builder *b, fg_status *st);
int fg_plan_layout(fg_plan_builder *b, fg_status *st);
int fg_plan_select(fg_plan_builder *b, fg_status *st);
int fg_plan_dependencies(fg_plan_builder *b, fg_status *st);
int fg_plan_memory(fg_plan_builder *b, fg_status *st);
int fg_plan_schedule(fg_plan_builder *b, fg_status *st);

/* Shared by the stages. */
int fg_plan_oom(fg_status *st, const char *what);
/* Checks `need` bytes against the session's limit (max_memory_bytes, 0:
 * none) and the machine's memory before anything of that size is
 * allocated; `what` names the buffer in the message. */
int fg_plan_check_memory(uint64_t need, int64_t limit, const char *what, fg_status *st);
/* Sorts the edges by (from, to) and drops repeats: successor lists come out
 * grouped by source, as the pool wants them. */
void fg_plan_edges_sort_unique(fg_edges *E);
/* Frees an arena with the plan's allocator (a plan that failed before
 * choosing one has none: free). */
void fg_plan_release_arena(fg_plan *plan, void *p);

#endif
