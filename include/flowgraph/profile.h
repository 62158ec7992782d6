/* flowgraph: profiling a run and reading an execution plan.
 *
 * fg_session_run_ex is fg_session_run plus options; with collect_metadata
 * set it returns per-node timings (thread, start, end, output shape and
 * bytes), which `flowgraph profile` turns into tables and a Chrome trace.
 * fg_session_plan_info describes the plan a run with these feeds, fetches and
 * targets would use: its order and every tensor's offset, size and lifetime
 * in the arena, which `flowgraph plan` prints and draws. */
#ifndef FLOWGRAPH_PROFILE_H
#define FLOWGRAPH_PROFILE_H

#include "flowgraph/session.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor's dtype and shape, as a run saw it. */
typedef struct fg_tensor_shape {
  fg_dtype dtype;
  int rank;
  int64_t dims[FG_MAX_RANK];
} fg_tensor_shape;

typedef struct fg_node_timing {
  int node;         /* graph node id */
  const char *name; /* owned by the graph */
  const char *op;   /* owned by the graph */
  int thread;       /* worker index, 0 = the calling thread */
  int64_t start_ns; /* from the start of the run */
  int64_t end_ns;
  fg_dtype dtype; /* output 0 */
  int rank;
  int64_t dims[FG_MAX_RANK];
  size_t output_bytes; /* all outputs */
  /* Several devices (flowgraph/dist.h): the device that ran it, an index
   * into fg_session_partition's devices (0 on one device). A step with op
   * "recv" is the receiving half of a transfer between devices: it copied
   * node `node`'s output into this device's memory. */
  int device;
  /* The work and traffic of this step at this run's shapes: the op
   * table's FLOP estimate (what fg_node_flops counts; 0 for a transfer and
   * for ops counted as free), the bytes of the inputs it reads (control
   * inputs, which only order it, left out) and, of its
   * outputs (output_bytes, written), those placed in the arena: an output
   * that takes over an input's bytes in place, a fetched output and a
   * variable add none. */
  int64_t flops;
  size_t input_bytes;
  size_t arena_bytes;
  /* Its inputs' dtypes and shapes, n_inputs of them; owned by the
   * metadata (NULL when n_inputs is 0). */
  int n_inputs;
  const fg_tensor_shape *inputs;
} fg_node_timing;

typedef struct fg_run_metadata {
  int n_nodes; /* nodes run, in plan order */
  fg_node_timing *nodes;
  int64_t run_ns;  /* wall time of the run, plan building excluded */
  int64_t plan_ns; /* time spent building the plan in this call; 0 when cached */
  int threads;     /* threads the run could use */
  size_t arena_bytes;
  /* CLOCK_MONOTONIC time (ns) that the nodes' start_ns and end_ns count
   * from: with it, runs of several processes on one host share a time
   * axis (across hosts the clocks still need an offset; `flowgraph profile
   * --dist mpi` measures one per rank). */
  int64_t start_ns;
  /* With a communicator attached (flowgraph/dist.h): the time this run
   * spent in the ranks' agreement to start it, before run_ns began (a
   * peer still busy with its last run shows here); 0 when the run took no
   * part. */
  int64_t agree_ns;
  /* Storage of the nodes' `inputs`; fg_run_metadata_free frees it. */
  fg_tensor_shape *input_shapes;
} fg_run_metadata;

FG_API void fg_run_metadata_free(fg_run_metadata *md); /* accepts NULL */

typedef struct fg_run_options {
  int collect_metadata; /* 1: fill *metadata */
} fg_run_options;

/* fg_session_run with options. When opts->collect_metadata is set and
 * `metadata` is non-NULL, *metadata receives a new structure the caller
 * frees with fg_run_metadata_free (also on a kernel error: the nodes that
 * ran). Timing costs two clock reads per node and nothing when off. */
FG_API int fg_session_run_ex(fg_session *s, const fg_feed *feeds, int n_feeds,
                             const char *const *fetches, int n_fetches, fg_tensor **outputs,
                             const char *const *targets, int n_targets, const fg_run_options *opts,
                             fg_run_metadata **metadata, fg_status *status);

typedef struct fg_plan_tensor {
  int node;   /* producer node id */
  int output; /* output index */
  /* producer's name, owned by the graph (a constant the passes added, as
   * a folded batch norm's "<bn>/folded_weight": by the info) */
  const char *name;
  const char *kind; /* "arena", "feed", "constant", "variable", "fetch" */
  fg_dtype dtype;
  int rank;
  int64_t dims[FG_MAX_RANK];
  size_t bytes;
  int64_t offset;  /* in the arena; -1 when not in it */
  int first_step;  /* producing step (-1 for feeds, constants, variables) */
  int last_step;   /* last step that reads it */
  int shared_with; /* index of the tensor whose bytes it took over in place, or -1 */
  /* Several devices: the device whose arena holds it (index into
   * fg_session_partition's devices), -1 outside every arena; 0 on one
   * device. offset is then within that device's arena. A "recv" tensor is
   * a copy of `name`'s output received from another device. */
  int device;
  /* How its elements lie in memory: "nchw" (C order, as every tensor a
   * caller sees) or "nChw16c" (oneDNN's channel-blocked layout, which a CPU
   * plan keeps between convolutions, batch norms and element-wise ops of a
   * CNN so the convolutions need not convert; same bytes). Owned by the
   * library. */
  const char *layout;
} fg_plan_tensor;

typedef struct fg_plan_info {
  int n_steps;
  int *step_nodes; /* n_steps node ids, in plan order */
  int n_tensors;
  fg_plan_tensor *tensors;
  size_t arena_bytes;       /* the arena the plan allocates */
  size_t lower_bound_bytes; /* peak of live intermediate bytes over the schedule */
  size_t naive_bytes;       /* one buffer per intermediate tensor */
  /* Per step: its device (as fg_plan_tensor.device) and whether it is a
   * recv step (a transfer's copy onto that device; step_nodes then names
   * the tensor's producer). */
  int *step_devices;
  int *step_recv;
  /* Per step: whether it sends a tensor to another process (a cross-process
   * graph; step_nodes names the tensor's producer). */
  int *step_send;
  /* Per device of the partition (n_devices, 1 on one device): the bytes of
   * its own arena; arena_bytes is their sum. */
  int n_devices;
  size_t *device_arena_bytes;
  /* Per step: the op it runs, as fg_node_timing.op names it (a node the
   * passes fused: "fused_elementwise[add+relu]"); static strings. */
  const char **step_ops;
  /* Buffers the plan's kernels keep outside the arena for this plan alone:
   * oneDNN's converted tensors (a variable weight's blocked copy among
   * them) and scratchpads. */
  size_t kernel_bytes;
  /* Converted constants the plan's kernels read from the session (a
   * constant conv weight in oneDNN's layout): made by the first run that
   * needs each, one copy shared by every plan of the session that reads it
   * in that layout, so not to be added up across plans. Counted per step
   * reading it. */
  size_t kernel_shared_bytes;
} fg_plan_info;

/* Builds (or reuses) the plan for these feeds, fetches and targets without
 * running it. NULL on error. Free with fg_plan_info_free. */
FG_API fg_plan_info *fg_session_plan_info(fg_session *s, const fg_feed *feeds, int n_feeds,
                                          const char *const *fetches, int n_fetches,
                                          const char *const *targets, int n_targets,
                                          fg_status *status);
FG_API void fg_plan_info_free(fg_plan_info *info); /* accepts NULL */

#ifdef __cplusplus
}
#endif
#endif
