/* flowgraph: sessions run graphs.
 *
 * fg_session_new validates the graph and creates the variables' current
 * values (copies of their initial values). fg_session_run prunes the graph to
 * what the fetches and targets need, checks every feed, runs the nodes and
 * returns the fetched tensors. Plans are cached per (feeds, fetches, targets,
 * feed shapes). A session notices when its graph changed (fg_graph_version)
 * and re-validates before the next run; existing variables keep their values.
 *
 * Threads and lifetime (tested in tests/executor/test_threads.c, under TSan):
 * - Building or editing a graph (fg_op and every helper that adds nodes,
 *   fg_set_name, fg_graph_add_output, fg_graph_set_metadata, fg_gradients,
 *   fg_minimize) is not thread-safe: one thread at a time, and no session on
 *   that graph may run meanwhile.
 * - Many sessions may share one graph, created and run from different
 *   threads at once, while nobody edits the graph. fg_session_save lends
 *   the session's variable values to the graph for the duration of the
 *   save, so it counts as an edit for the other sessions on that graph.
 * - One session is used by one thread at a time. A concurrent
 *   fg_session_run, fg_session_run_ex, fg_session_variable, fg_session_save
 *   or fg_session_plan_info on the same session is refused at once with
 *   FG_INVALID_ARGUMENT ("session is busy"); it never waits and never
 *   returns partial results.
 * - Editing the graph between runs is allowed: the next call sees the new
 *   version, re-validates, drops its cached plans and keeps the values of
 *   existing variables; new variables start from their initial values.
 * - The graph must outlive its sessions; fg_session_free must not overlap
 *   any other call on that session.
 */
#ifndef FLOWGRAPH_SESSION_H
#define FLOWGRAPH_SESSION_H

#include "flowgraph/graph.h"
#include "flowgraph/status.h"
#include "flowgraph/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_session fg_session;

typedef struct fg_session_options {
  /* Threads of the session's pool, the calling thread included; 0 means
   * "number of cores". Values above 1024 or below 0 are refused with
   * FG_INVALID_ARGUMENT. Results are bitwise identical for any value.
   * flowgraph sets OpenBLAS to one thread for the process (it splits
   * matmuls itself), so the cores are never oversubscribed: the first
   * fg_session_new does, and stops OpenBLAS's idle server threads (which
   * a threaded OpenBLAS restarts if a later call asks for threads). Make
   * no multi-threaded OpenBLAS call from another thread while that first
   * fg_session_new runs. Where OpenBLAS fell back to kernels without AVX2
   * on a CPU newer than it knows (Debian 12's on Emerald Rapids: Prescott's
   * SSE3 kernels), loading flowgraph initialises it again with its best
   * kernels for the CPU, unless OPENBLAS_CORETYPE is set (docs/design.md). */
  int num_threads;

  /* The device for nodes left unplaced: NULL or "cpu:0" (the default), or
   * "cuda:N" for a GPU build. A device that does not exist is refused by
   * fg_session_new with FG_INVALID_ARGUMENT, naming it and
   * how many CUDA devices there are ("cuda:0" in a build without the CUDA
   * backend too). On "cuda:N" the whole graph runs on that GPU: variables
   * live on the device (fg_session_variable and fg_session_save copy them
   * back), feeds and fetches go through pinned host buffers, and a node
   * placed on another CUDA device is refused (so is a node placed on a CUDA
   * device in a CPU session). GPU results equal the CPU's within float
   * tolerance, not bitwise (cuBLAS picks its own summation order). */
  const char *device;

  /* 1: after every node, check its floating-point outputs for NaN and Inf;
   * the first node that produced one fails the run with FG_INVALID_ARGUMENT
   * naming it, its op and the count: "node 'lg' (log):
   * produced 2 NaN and 1 Inf in output 0 (check_numerics)". "First" is plan
   * order (a topological order), the same for any thread count. A fed
   * tensor holding NaN/Inf is reported as "feed 'x' (placeholder): holds
   * ..." before anything runs. Variables and constants are not scanned; a
   * NaN in one is reported at the first node that reads it. Nodes already
   * run (e.g. assigns) keep their effect. 0 (default): no check, no cost.
   * On "cuda:N" the same, the message adding the device ("node 'lg' (log)
   * on cuda:0: produced ..."): the run waits for each node's counts, so
   * nothing after the first bad node runs, and such runs are never captured
   * into a CUDA Graph (slow: a debugging mode). The default pass pipeline
   * then leaves element-wise fusion out, so each node is checked alone. */
  int check_numerics;

  /* Resource limits; 0 means no limit, negative values are refused. A plan
   * whose arena plus fetched outputs would exceed max_memory_bytes (or one
   * tensor alone, which is then named), or a graph with more than max_nodes
   * nodes (checked by fg_session_new and again after every graph change),
   * fails with FG_RESOURCE_EXHAUSTED naming the bytes or nodes and the limit,
   * before the arena or fetch buffers are allocated. Without a limit a plan
   * larger than the machine's physical memory fails the same way, instead of
   * being killed by the OOM killer later; a failed arena allocation is
   * FG_RESOURCE_EXHAUSTED too. */
  int64_t max_memory_bytes;
  int64_t max_nodes;

  /* GPU sessions only. cuda_graphs: 0 (default) captures a cached plan into
   * a CUDA Graph on its second run with unchanged shapes and replays it; -1
   * never captures. allow_tf32: 1 lets cuBLAS use TF32 tensor cores for f32
   * matmuls (0 default: full f32). num_streams: CUDA streams a plan may use,
   * 0 = the default (4), 1 = everything on one stream; values below 0 or
   * above 64 are refused by fg_session_new with FG_INVALID_ARGUMENT (in
   * every session). Independent chains of nodes run on different streams,
   * ordered by CUDA events, never by host synchronisation; a run
   * synchronises once, at its end. With collect_metadata
   * (fg_session_run_ex) a GPU run is timed with CUDA events, not captured,
   * and each node's `thread` is its stream. */
  int cuda_graphs;
  int allow_tf32;
  int num_streams;

  /* Several devices in one process (data parallelism on cpu:N): the most
   * seconds a collective (all_reduce) waits for the other devices before
   * the run fails with FG_DEADLINE_EXCEEDED naming them.
   * 0: 60 s. Negative, NaN or above one day: refused by fg_session_new.
   * A process communicator (MPI) has its own timeout (fg_comm_mpi_new,
   * flowgraph/comm.h). */
  double dist_timeout_s;
  /* Sessions with collectives (data parallelism, in-process or with a
   * process communicator): 1 runs each device's all_reduce nodes on a
   * thread of their own, so a gradient bucket's reduction overlaps the
   * rest of the backward pass; -1 runs them in line with the device's other
   * nodes; 0 (default) is 1 where a core is free for those threads, else
   * -1: where the compute threads of this machine's ranks (num_threads
   * each, times the launcher's count of ranks on this host for MPI, unless
   * the process is bound to a subset of the cores) fill the cores it may
   * use, the reduction would only take turns with the compute. Results are
   * bitwise the same either way. Other values are refused by
   * fg_session_new. */
  int collective_lanes;

  /* Graph optimization passes (flowgraph/passes.h), run on the session's
   * own copy of the graph whenever it syncs with the graph; the graph
   * itself is never changed, and every node can still be fetched by name.
   * no_passes: 1 runs none; 0 (default) runs `passes`. passes: NULL
   * (default) for the default pipeline, else a comma-separated list of
   * pass names run in that order (the session keeps a copy); an unknown
   * name is refused by fg_session_new with FG_INVALID_ARGUMENT naming it
   * and the known passes. The environment variable FG_PASSES=off (or 0)
   * turns the passes off for every session of the process. Results are
   * bitwise the same either way. */
  int no_passes;
  const char *passes;
} fg_session_options;

/* Fills the defaults. */
FG_API void fg_session_options_init(fg_session_options *opts);

/* The CUDA devices this process can use (cuda:0 .. cuda:N-1 for `device`
 * above): 0 in a build without the CUDA backend, without a driver or
 * without a GPU. Never fails. */
FG_API int fg_cuda_device_count(void);

/* `opts` may be NULL (defaults). The graph must outlive the session. */
FG_API fg_session *fg_session_new(fg_graph *g, const fg_session_options *opts, fg_status *status);
/* Accepts NULL. */
FG_API void fg_session_free(fg_session *s);

typedef struct fg_feed {
  /* A placeholder's name, or "training" (the training flag, fg_training in
   * flowgraph/graph.h: a bool scalar that sets the run's mode). */
  const char *name;
  const fg_tensor *tensor;
} fg_feed;

/* Runs the graph. `fetches` are "node" or "node:index" names; `outputs`
 * receives n_fetches new tensors owned by the caller (free each with
 * fg_tensor_free). `targets` are nodes run for their effect (assign).
 * Returns 0 on success; on failure every outputs[i] is NULL. */
FG_API int fg_session_run(fg_session *s, const fg_feed *feeds, int n_feeds,
                          const char *const *fetches, int n_fetches, fg_tensor **outputs,
                          const char *const *targets, int n_targets, fg_status *status);

/* The current value of variable `name`, as a new owning copy; NULL and
 * FG_NOT_FOUND when there is no such variable. */
FG_API fg_tensor *fg_session_variable(fg_session *s, const char *name, fg_status *status);

/* Writes the graph to `path` (.fgb) with every variable's current value as
 * its initial value, so loading the file resumes exactly where the session
 * is (optimizer state included: it lives in variables). Temporary file plus
 * rename: no partial file is left. The session's graph is not changed. */
FG_API int fg_session_save(fg_session *s, const char *path, fg_status *status);

#ifdef __cplusplus
}
#endif
#endif
