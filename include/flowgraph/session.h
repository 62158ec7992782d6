/* flowgraph: sessions run graphs.
 *
 * fg_session_new validates the graph and creates the variables' current
 * values (copies of their initial values). fg_session_run prunes the graph to
 * what the fetches and targets need, checks every feed, runs the nodes and
 * returns the fetched tensors. Plans are cached per (feeds, fetches, targets,
 * feed shapes). A session notices when its graph changed (fg_graph_version)
 * and re-validates before the next run; existing variables keep their values.
 *
 * Threads: one session must not be run from two threads at once; a second
 * concurrent fg_session_run is refused with FG_INVALID_ARGUMENT ("session is
 * busy"). Several sessions may share one graph while nobody edits it.
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
   * matmuls itself), so the cores are never oversubscribed. */
  int num_threads;

  /* The device for nodes left unplaced: NULL or "cpu:0" (the default), or
   * "cuda:N" for a GPU build. A device that does not exist is refused by
   * fg_session_new with FG_INVALID_ARGUMENT (BAD_INPUTS M3). */
  const char *device;

  /* 1: after every node, check its floating-point outputs for NaN and Inf;
   * the first node that produced one fails the run with FG_INVALID_ARGUMENT
   * naming it, its op and the count (BAD_INPUTS M4). 0 (default): no check,
   * no cost. */
  int check_numerics;

  /* Resource limits; 0 means no limit. A plan whose arena (plus fetched and
   * staged buffers) would exceed max_memory_bytes, or a graph with more than
   * max_nodes nodes, fails with FG_RESOURCE_EXHAUSTED before anything is
   * allocated. */
  int64_t max_memory_bytes;
  int64_t max_nodes;

  /* GPU sessions only. cuda_graphs: 0 (default) captures a cached plan into
   * a CUDA Graph on its second run with unchanged shapes and replays it; -1
   * never captures. allow_tf32: 1 lets cuBLAS use TF32 tensor cores for f32
   * matmuls (0 default: full f32). num_streams: CUDA streams a plan may use,
   * 0 = the default (4), 1 = everything on one stream. */
  int cuda_graphs;
  int allow_tf32;
  int num_streams;
} fg_session_options;

/* Fills the defaults. */
void fg_session_options_init(fg_session_options *opts);

/* `opts` may be NULL (defaults). The graph must outlive the session. */
fg_session *fg_session_new(fg_graph *g, const fg_session_options *opts, fg_status *status);
/* Accepts NULL. */
void fg_session_free(fg_session *s);

typedef struct fg_feed {
  const char *name; /* a placeholder's name */
  const fg_tensor *tensor;
} fg_feed;

/* Runs the graph. `fetches` are "node" or "node:index" names; `outputs`
 * receives n_fetches new tensors owned by the caller (free each with
 * fg_tensor_free). `targets` are nodes run for their effect (assign).
 * Returns 0 on success; on failure every outputs[i] is NULL. */
int fg_session_run(fg_session *s, const fg_feed *feeds, int n_feeds, const char *const *fetches,
                   int n_fetches, fg_tensor **outputs, const char *const *targets, int n_targets,
                   fg_status *status);

/* The current value of variable `name`, as a new owning copy; NULL and
 * FG_NOT_FOUND when there is no such variable. */
fg_tensor *fg_session_variable(fg_session *s, const char *name, fg_status *status);

/* Writes the graph to `path` (.fgb) with every variable's current value as
 * its initial value, so loading the file resumes exactly where the session
 * is (optimizer state included: it lives in variables). Temporary file plus
 * rename: no partial file is left. The session's graph is not changed. */
int fg_session_save(fg_session *s, const char *path, fg_status *status);

#ifdef __cplusplus
}
#endif
#endif
