/* What the executor needs from the dist layer to run one plan across
 * devices (internal; executor/run.c and executor/session.c use it).
 *
 * A plan is built for the whole graph (one memory plan: CPU devices share
 * the address space, and the planner only reuses a buffer along ancestor
 * paths, which every device-respecting schedule keeps). Running it with
 * more than one device gives each device one thread (the calling thread is
 * device 0's) that runs that device's steps as they become ready, with its
 * own thread pool for the kernels' parallel_for. An edge between devices is
 * the send/recv pair: the consumer's device receives the producer's
 * completion (a release/acquire pair through the ready counter), no copy. */
#ifndef FG_DIST_EXEC_H
#define FG_DIST_EXEC_H

#include "dist/comm.h"
#include "executor/threadpool.h"
#include "flowgraph/dist.h"
#include "graph/graph_internal.h"
#include "kernels/kernel.h"

typedef struct fg_dist_exec {
  int n_dev;
  const int *node_dev; /* per node id: device index */
  fg_kparallel *par;   /* per device: its pool's parallel_for (pool NULL: inline) */
  fg_comm **comm;      /* per device: the communicator its all_reduce nodes call */
} fg_dist_exec;

/* Runs a DAG of n steps (n_preds, succ_off, succ as in fg_pool_run_dag)
 * where step t belongs to device step_dev[t]; fn(ctx, t, device). Returns 0,
 * or the first non-zero result after every device thread stopped. When a
 * step fails the in-process communicators are aborted so no device waits
 * out a collective's timeout. */
int fg_dist_run_dag(const fg_dist_exec *dx, int n, const int *n_preds, const int *succ_off,
                    const int *succ, const int *step_dev, int (*fn)(void *, int, int), void *ctx);

/* The session's dist state: the partition of its graph, per-device pools,
 * communicators. */
typedef struct fg_dist_session fg_dist_session;

/* (Re)builds the state for the session's graph: placement with
 * default_device, device checks (M3), pools of max(1, threads / devices)
 * threads per device, and an in-process communicator group over the
 * devices that hold all_reduce nodes (unless a process communicator is
 * attached). *ds may be NULL (created). 0 or -1 with status set; on failure
 * *ds keeps its old state. */
int fg_dist_session_sync(const fg_graph *g, fg_dist_session **ds, const char *default_device,
                         int threads, fg_status *st);
void fg_dist_session_free(fg_dist_session *ds);
/* NULL when the session runs on one device without a communicator (the
 * plain path). */
const fg_dist_exec *fg_dist_session_exec(fg_dist_session *ds);
/* Clears aborted in-process groups before a run. */
void fg_dist_session_before_run(fg_dist_session *ds);
int fg_dist_session_set_comm(const fg_graph *g, fg_dist_session **ds, fg_comm *comm,
                             const char *default_device, int threads, fg_status *st);
const fg_partition *fg_dist_session_partition(const fg_dist_session *ds);
/* Whether the session's graph uses only one device, and that device is a
 * GPU (the CUDA executor's case). */
int fg_dist_session_num_devices(const fg_dist_session *ds);

const int *fg_partition_node_devices(const fg_partition *p);

#endif
