/* What the executor needs from the dist layer to run one plan across
 * devices (internal; executor/run.c and executor/session.c use it).
 *
 * A plan is built for the whole graph, and each device's tensors get their
 * own memory plan and arena (executor/plan.c); every data edge between
 * devices is a recv step on the consumer's device that copies the tensor
 * into its arena (the send/recv pair of the partition's transfer). Running
 * it uses lanes, each served by one persistent thread (lane 0 is the
 * calling thread): one lane per device, whose steps run in ready order with
 * that device's own thread pool for the kernels' parallel_for, and, when a
 * communicator is in use, one more lane per device for its collectives, so
 * a gradient bucket's all_reduce overlaps the rest of the backward pass
 * (PyTorch DDP's overlap) instead of stalling the device's compute. */
#ifndef FG_EXECUTOR_DIST_EXEC_H
#define FG_EXECUTOR_DIST_EXEC_H

#include "dist/comm/comm.h"
#include "dist/rewrite/partition.h"
#include "executor/threadpool.h"
#include "flowgraph/dist.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"
#include "kernels/kernel.h"

typedef struct fg_dist_runner fg_dist_runner;
struct fg_plan_request; /* executor/plan.h */

typedef struct fg_dist_exec {
  int n_dev;
  const int *node_dev; /* per node id: device index */
  fg_kparallel *par;   /* per device: its pool's parallel_for (pool NULL: inline) */
  fg_comm **comm;      /* per device: the communicator its all_reduce nodes call */
  fg_dist_runner *runner;
  /* 1: lanes n_dev .. 2 n_dev - 1 run the devices' all_reduce steps and
   * receives from other processes. */
  int comm_lanes;
  /* Cross-process graphs (flowgraph/dist.h "Ranks"): this process's rank
   * (-1: the graph is not cross-process; -2: it is, but no process
   * communicator is attached), each device's rank, and the communicator
   * carrying the transfers. Lanes 2 n_dev .. 3 n_dev - 1 run the sends. */
  int my_rank;
  const int *dev_rank;
  fg_comm *p2p;
  /* The devices this process runs (all of them unless the graph is
   * cross-process): n_local of them (at least 1), and each device's
   * position among them (-1: another rank's). Lanes, threads and pools exist for these
   * only; another rank's nodes have no steps in this process's plans. */
  int n_local;
  const int *local_index;
  /* The host arenas' allocator (executor/plan.h), NULL: the default. Set
   * when a process communicator reduces through shared memory, so its
   * all_reduce reads the other ranks' buffers in place. */
  void *(*arena_alloc)(size_t bytes);
  void (*arena_free)(void *p);
  /* 1 when those arenas are shared with the other ranks of the host: the
   * session then moves its variables into one too (executor/session.c), so
   * fused updates write every rank's copy where it lies. */
  int shared_arenas;
} fg_dist_exec;

enum { FG_LANE_COMPUTE, FG_LANE_COMM, FG_LANE_SEND };

/* collective_lanes 0 (the default): whether collectives get lanes of their
 * own. An own lane overlaps a bucket's reduction with the rest of the
 * backward pass only where a core is free to run it. Where this machine's
 * compute threads already fill the cores it can use (host_procs processes
 * of compute_threads each; a process bound to fewer cores than the machine
 * has counts alone, its peers being bound elsewhere), the lane only takes
 * turns with the compute on the same cores, and in line was slightly
 * faster, the reduction being memory-bound CPU work either way. */
static inline int fg_dist_auto_own_lanes(int compute_threads, int host_procs, int avail_cores,
                                         int online_cores) {
  long procs = avail_cores < online_cores ? 1 : host_procs;
  return (long)compute_threads * procs < (long)avail_cores;
}

/* The lane of a step of device `dev` of kind FG_LANE_*: one of this
 * process's devices, or, for a rank that runs none, whatever device its
 * fetches' receives name (lane set 0). */
static inline int fg_dist_lane(const fg_dist_exec *dx, int dev, int kind) {
  int l = dx->local_index ? dx->local_index[dev] : dev;
  if (l < 0) l = 0;
  if (kind == FG_LANE_COMM && dx->comm_lanes) return l + dx->n_local;
  if (kind == FG_LANE_SEND && dx->my_rank >= 0) return l + 2 * dx->n_local;
  return l;
}
/* Lanes a session's runner has. */
static inline int fg_dist_num_lanes(const fg_dist_exec *dx) {
  return dx->n_local * (dx->my_rank >= 0 ? 3 : dx->comm_lanes ? 2 : 1);
}

/* Starts n_lanes - 1 threads (lane 0 is the caller's). NULL with status. */
fg_dist_runner *fg_dist_runner_new(int n_lanes, fg_status *st);
void fg_dist_runner_free(fg_dist_runner *r); /* accepts NULL */
int fg_dist_runner_lanes(const fg_dist_runner *r);

/* Runs a DAG of n steps (n_preds, succ_off, succ as in fg_pool_run_dag)
 * where step t runs on lane step_lane[t]; fn(ctx, t, lane). Returns 0, or
 * the first non-zero result after every lane stopped. When a step fails the
 * in-process communicators are aborted so no device waits out a
 * collective's timeout. Allocates only when n exceeds every earlier run. */
int fg_dist_run_dag(const fg_dist_exec *dx, int n, const int *n_preds, const int *succ_off,
                    const int *succ, const int *step_lane, int (*fn)(void *, int, int), void *ctx);

/* A step failed (`why`): aborts every communicator the run uses (each
 * device's and the cross-process one; kernels/collective.h `abort`), so that
 * neither this process's other lanes nor the other ranks wait out a
 * collective's or a transfer's timeout. */
void fg_dist_abort(const fg_dist_exec *dx, const char *why);

/* The session's dist state: the partition of its graph, per-device pools,
 * communicators. */
typedef struct fg_dist_session fg_dist_session;

/* (Re)builds the state for the session's graph from the session's options
 * (checked): placement with o->device as the default, device checks (a device
 * that does not exist is refused),
 * pools of max(1, num_threads / devices) threads per device, an in-process
 * communicator group over the devices that hold all_reduce nodes (unless a
 * process communicator is attached) whose collectives wait at most
 * o->dist_timeout_s (0: 60 s), and the lane threads (collective lanes
 * as o->collective_lanes says: fg_dist_auto_own_lanes for 0). *ds may be NULL (created). 0 or -1
 * with status set; on failure *ds keeps its old state. */
int fg_dist_session_sync(const fg_graph *g, fg_dist_session **ds, const fg_session_options *o,
                         fg_status *st);
void fg_dist_session_free(fg_dist_session *ds);
/* NULL when the session runs on one device without a communicator (the
 * plain path). */
const fg_dist_exec *fg_dist_session_exec(fg_dist_session *ds);
/* Clears aborted in-process groups before a run. */
void fg_dist_session_before_run(fg_dist_session *ds);
/* Attaches `comm` as the process communicator (data 0: transfers between
 * ranks, or the collectives of one replica per process) or as the data
 * communicator (data 1: a cross-process graph's collectives, among the
 * replicas of one stage), and rebuilds the state. */
int fg_dist_session_set_comm(const fg_graph *g, fg_dist_session **ds, fg_comm *comm, int data,
                             const fg_session_options *o, fg_status *st);
const fg_partition *fg_dist_session_partition(const fg_dist_session *ds);
/* A session on cuda:N whose graph places nodes on cpu:N devices: per node
 * id, 1 for a node that runs on the host (its kernel the CPU's, its inputs
 * and outputs staged through pinned memory by the CUDA backend); NULL for
 * every other session. */
const unsigned char *fg_dist_session_host_nodes(const fg_dist_session *ds);
/* Where a single-device plan's node runs and where its arena lives, as the
 * partition numbers devices: with host steps the partition's device of the
 * node and the GPU's index; otherwise 0 and 0. */
int fg_dist_session_step_device(const fg_dist_session *ds, int node);
int fg_dist_session_arena_device(const fg_dist_session *ds);
/* The communicator over this process's replicas of its variables: the
 * process communicator of data parallelism (the graph names no rank), the
 * data communicator of a cross-process graph, or NULL. */
fg_comm *fg_dist_session_replica_comm(const fg_dist_session *ds);
/* This process's variables (in node order, those it owns) as replicas must
 * hold them: their ids and sizes, and with `values` their bytes. */
uint64_t fg_dist_session_vars_hash(const fg_dist_session *ds, fg_tensor *const *vars, int n_vars,
                                   int values);
/* Whether variable `node` is this process's to keep (every variable unless
 * the graph is cross-process: then those on this rank's devices). */
int fg_dist_session_owns_var(const fg_dist_session *ds, int node);
/* The graph-hash check for sessions: 1 when nothing is left to check (no process or data
 * communicator, or checked since the last attach or graph change). */
int fg_dist_session_agreed(const fg_dist_session *ds);
/* Before the first run after attaching a communicator or changing the
 * graph, every process calls this (a collective): the graph's structure
 * hash (graph/hash.c) must be the same on every rank of each attached
 * communicator, and the variables' values (vars, per node id; this
 * process's own) on every replica. FG_INVALID_ARGUMENT naming the ranks
 * and both hashes otherwise, the same on every rank. 0 or -1. */
int fg_dist_session_agree(fg_dist_session *ds, const fg_graph *g, fg_tensor *const *vars,
                          int n_vars, fg_status *st);
/* The ranks agree to start a run (executor/dist/run_agree.c): a run that holds
 * collectives, or any run of a graph split across processes (its
 * transfers and fetches pair by number), first exchanges one word per
 * rank, "ready, with this key" or "refused", so a rank whose run is refused
 * before it starts (a feed's dtype or shape, its plan, check_numerics)
 * stops its peers at once instead of leaving them in the run's first
 * collective or transfer until the deadline, and ranks asking for
 * different collectives are told so before any pair wrongly. Data-parallel
 * runs without collectives take no part (rank 0 may evaluate alone).
 *
 * fg_dist_run_key: which rounds a run of `req` needs (bit 0: over the
 * process communicator, the data-parallel replicas' or a split graph's
 * replica group; bit 1: over the data communicator, a split graph's stage
 * group; 0: none) and each round's key (key[0], key[1]): the collectives
 * the run needs, and for a split graph's replica group also its needed
 * nodes and fetches. -1 when out of memory. */
int fg_dist_run_key(const fg_dist_session *ds, const fg_graph *g, const struct fg_plan_request *req,
                    uint64_t key[2], fg_status *st);
/* fg_dist_run_agree: the rounds, each rank passing `refused` 1 when this
 * run was refused here (st holds why). 0: every rank is ready with the same
 * key, run it. -1: this rank's own refusal (st as it was), FG_ABORTED
 * naming the rank that refused and its reason, FG_INVALID_ARGUMENT when
 * the keys differ (the same on every rank), or the exchange's error (a peer
 * that never came: the deadline). The group stays usable unless the
 * exchange itself failed. */
int fg_dist_run_agree(fg_dist_session *ds, int rounds, const uint64_t key[2], int refused,
                      fg_status *st);
/* Whether the session's graph uses only one device, and that device is a
 * GPU (the CUDA executor's case). */
int fg_dist_session_num_devices(const fg_dist_session *ds);

#endif
