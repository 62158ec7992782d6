/* flowgraph: devices, placement, partitioning and data parallelism.
 *
 * Devices are named "cpu:N" and "cuda:N", optionally prefixed with the
 * MPI rank that runs them: "rank:R/cpu:N", "rank:R/cuda:N" (model
 * parallelism across processes). Several cpu:N devices in one
 * process are real: a session whose graph uses more than one device runs
 * each device's steps on its own thread with its own share of the session's
 * threads (num_threads / devices, at least 1), concurrently. CPU devices
 * share the address space, so a cross-device edge costs no copy; the
 * partition (fg_partition) still lists every such edge as a send/recv pair
 * with a unique key and its byte size, which `flowgraph plan` prints.
 * cpu:0 .. cpu:(FG_MAX_CPU_DEVICES-1) exist; cuda:N exists when N is below
 * the number of GPUs the process sees. A session on cuda:N runs the nodes
 * its graph places on cpu devices on the host (host steps: their inputs
 * copied from the GPU, the CPU kernel, their outputs and updated
 * variables copied back; every tensor stays in the GPU's memory), unless
 * the graph also holds all_reduce nodes or a communicator is attached
 * (FG_UNIMPLEMENTED naming a node). A CPU session refuses nodes placed on
 * a GPU, and a graph using two cuda devices is refused with
 * FG_UNIMPLEMENTED.
 *
 * Ranks: a graph is cross-process when any node is placed on a device with
 * a rank (or the default device has one). Then every device named without
 * a rank, explicitly or through the default device, is rank 0's, and each
 * edge between devices of different ranks is a transfer between processes
 * (fg_comm_send/fg_comm_recv, flowgraph/comm.h). Without any rank every device keeps rank -1:
 * "this process", and every process runs the whole graph (one process, or
 * data parallelism). A rank-qualified cuda:N is not checked against this
 * process's GPUs (it may live on another host); its index must still parse.
 * Each process plans and runs only its rank's nodes, with its session's
 * threads shared by its own devices. Not supported yet, and refused with
 * FG_UNIMPLEMENTED naming the node: a cross-process graph with a node on a
 * CUDA device. Data parallelism over such a model (K replicas of it on
 * K x S processes) takes fg_data_parallel with replicas = 1 and a second
 * communicator per process (fg_session_set_data_comm below).
 *
 * Placement (fg_partition_new, and every session):
 *   1. A node placed with fg_set_device (or a device in the .fgb file) runs
 *      there. fg_node_device returns that string; for an unplaced node it
 *      returns NULL (fg_partition_node_device gives where it runs).
 *   2. An unplaced node that is not a source and has a string attribute
 *      "_colocate" naming an earlier node runs on that node's device.
 *      fg_gradients sets it on every node it makes, naming the forward node
 *      being differentiated (TensorFlow's colocate_gradients_with_ops): a
 *      layer's backward pass runs on its layer's device, so only
 *      activations and their gradients cross devices. Other unplaced
 *      non-sources, and those whose "_colocate" names no earlier node,
 *      colocate with their first input (in input order) that is not a
 *      source, not an update op, and has a device; with no such input they
 *      get the default device (the session's `device` option, else
 *      "cpu:0").
 *   3. An unplaced source (variable, placeholder, constant, fill) colocates
 *      with its first consumer (lowest node id) placed by rules 1-2; failing
 *      that, with its first update op (rule 4); else the default device.
 *   4. An unplaced update op (assign, apply_*: ops whose input 0 is a
 *      variable they write in place) goes with that variable.
 *   Conflicts: an update op placed explicitly on another device than its
 *   variable is refused (FG_INVALID_ARGUMENT naming both nodes and both
 *   devices): a variable lives on exactly one device, with its update.
 *   Explicit placement always wins over rules 2-3, so an input on another
 *   device simply becomes a transfer.
 *   A device that does not exist (cpu:-1, gpu:0, cuda:7 on a machine with
 *   one GPU, "cpu:x") fails fg_session_new with FG_INVALID_ARGUMENT naming
 *   the node, the device and what exists.
 *
 * Data parallelism: fg_data_parallel rewrites a training graph (one built
 * with fg_minimize) into N replicas with bucketed all_reduce nodes on the
 * gradients; see below. The all_reduce kernel calls the communicator the
 * session hands it: an in-process one over the replicas' cpu:N devices
 * (made by the session), or a process-level one attached with
 * fg_session_set_comm (MPI: one replica per process).
 */
#ifndef FLOWGRAPH_DIST_H
#define FLOWGRAPH_DIST_H

#include <stdint.h>

#include "flowgraph/graph.h"
#include "flowgraph/session.h"
#include "flowgraph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- devices ------------------------------------------------------------ */

#define FG_MAX_CPU_DEVICES 64

typedef enum fg_device_kind { FG_DEVICE_CPU = 1, FG_DEVICE_CUDA = 2 } fg_device_kind;

#define FG_MAX_RANKS 65536 /* ranks R of "rank:R/..." are 0 .. FG_MAX_RANKS-1 */

typedef struct fg_device {
  fg_device_kind kind;
  int index;
  int rank; /* the MPI rank running it; -1: no rank named (this process) */
} fg_device;

/* Parses "cpu:N" / "cuda:N" (N decimal, no sign, no spaces; "cpu" alone
 * means cpu:0), optionally after "rank:R/" (R decimal, 0 <= R <
 * FG_MAX_RANKS), and checks that the device exists (for a rank-qualified
 * cuda:N only that N parses). rank is -1 without the prefix. 0, or -1 with
 * FG_INVALID_ARGUMENT naming the string and what is expected or exists. */
FG_API int fg_parse_device(const char *name, fg_device *out, fg_status *status);
/* "cpu:3", or "rank:1/cpu:3" when d.rank >= 0, into buf (at least 32
 * bytes: the longest, "rank:65535/cuda:999999999", takes 26); returns buf. */
FG_API const char *fg_device_str(fg_device d, char *buf, size_t size);

/* ---- partitions --------------------------------------------------------- */

typedef struct fg_partition fg_partition;

/* Places every node of `g` (rules above) and cuts the graph into one part
 * per device. NULL with status set (invalid device, conflicting placement,
 * sticky graph error). Free with fg_partition_free. */
FG_API fg_partition *fg_partition_new(const fg_graph *g, const char *default_device,
                                      fg_status *status);
FG_API void fg_partition_free(fg_partition *p); /* accepts NULL */

/* Devices in use, sorted by rank, then cpu before cuda, then by index. In a
 * cross-process graph (see Ranks above) every device has a rank >= 0. */
FG_API int fg_partition_num_devices(const fg_partition *p);
FG_API fg_device fg_partition_device(const fg_partition *p, int i);
/* Device index (into the list above) of node `node`, -1 for a bad id. */
FG_API int fg_partition_node_device(const fg_partition *p, int node);
/* Nodes placed on device i. */
FG_API int fg_partition_num_nodes(const fg_partition *p, int device);
/* 0 when the graph is not cross-process (no device names a rank: every
 * process runs all of it), else 1 + the largest rank used: the number of
 * MPI processes the graph needs at least. 0 for NULL. */
FG_API int fg_partition_num_ranks(const fg_partition *p);

/* Every edge from a node on one device to a consumer on another is one
 * transfer: a send on the producer's device and a recv on the consumer's,
 * matched by `key` ("<producer>:<output>-><device>", unique in the graph,
 * e.g. "h1:0->cpu:1" or, across processes, "h1:0->rank:1/cpu:0").
 * A tensor consumed by several nodes on one other device is sent once. */
typedef struct fg_transfer {
  const char *key; /* owned by the partition */
  fg_output src;
  int src_device, dst_device; /* indexes into the device list */
  int64_t bytes;              /* -1 when a dimension is unknown before feeding */
} fg_transfer;
FG_API int fg_partition_num_transfers(const fg_partition *p);
/* NULL for a bad index. */
FG_API const fg_transfer *fg_partition_transfer(const fg_partition *p, int i);

/* ---- communicators on sessions ------------------------------------------ */

/* An fg_comm is one participant (rank r of n) of a group; its collectives
 * fail with FG_DEADLINE_EXCEEDED when a peer does not arrive within its
 * timeout. Making, using and freeing them: flowgraph/comm.h. */
typedef struct fg_comm fg_comm;

/* Attaches a process-level communicator to a session: MPI, one replica per
 * process, the graph rewritten by fg_data_parallel with replicas = 1 (every
 * all_reduce node then calls `comm`; they must all be on one device); or a
 * cross-process graph ("Ranks" above), whose transfers between ranks then
 * go through `comm`'s send/recv. In a cross-process graph every rank runs
 * the same fg_session_run calls with the same feeds, runs its own nodes and
 * returns every fetch (another rank's fetched tensors are sent to it); a
 * rank the graph names that the communicator lacks is refused here with
 * FG_INVALID_ARGUMENT naming the device, and a run without a communicator
 * is refused. The session does not own `comm`, which
 * must outlive it; NULL detaches. Without one, a session makes its own
 * in-process group over the devices holding all_reduce nodes (rank = the
 * device's position in the sorted device list), or, with all_reduce on one
 * device only, treats them as a group of one (the identity). In such a
 * group the k-th all_reduce of each device (node id order) reduces with the
 * k-th of the others, as fg_data_parallel builds them; fg_session_new
 * refuses (FG_INVALID_ARGUMENT, naming the nodes and devices) devices with
 * unequal counts, partners of different dtypes or forms (weighted or not),
 * and partners that need, through their inputs, each other's result or a
 * later reduction's, which would wait for each other forever.
 *
 * With a communicator attached, every run that holds all_reduce nodes
 * (and every run of a cross-process graph) starts with the ranks'
 * agreement to run it: a run refused on one rank before it starts (a
 * feed's dtype or shape, a NULL feed tensor, the plan's shapes,
 * check_numerics of the feeds) returns its own error there and
 * FG_ABORTED on the other ranks ("rank R of N ... refused the run before
 * it started, so no rank ran it: <reason>"), at once and with nothing
 * run, and the ranks may run again; ranks whose runs hold different
 * collectives all get FG_INVALID_ARGUMENT ("ranks asked for different
 * runs"). 0 or -1. */
FG_API int fg_session_set_comm(fg_session *s, fg_comm *comm, fg_status *status);

/* Data parallelism over a model split across processes (hybrid: every
 * stage replicated). Run W = S x K processes for a graph naming S ranks:
 * the processes form K replicas of S stages. Each process attaches two
 * communicators: with fg_session_set_comm its replica's group (S ranks;
 * its rank there is its stage, the R of "rank:R/"), which carries the
 * transfers, and here the group of the K processes running the same stage
 * in every replica (rank = replica), which the graph's all_reduce nodes
 * use. The graph is the model rewritten by fg_data_parallel with
 * replicas = 1, which gives each rank its own buckets, chained per rank,
 * and counts the rows where the first batch input lives (the other stages
 * receive the counts). Every process of replica k feeds the same shard
 * (fg_shard_rows(B, K, k)). Without a data communicator the all_reduce
 * nodes are the identity (one replica). Refused with FG_INVALID_ARGUMENT
 * when the graph names no rank (attach a data-parallel communicator with
 * fg_session_set_comm instead); the session does not own `comm`; NULL
 * detaches. 0 or -1. */
FG_API int fg_session_set_data_comm(fg_session *s, fg_comm *comm, fg_status *status);

/* Cross-process graphs (model parallelism, "Ranks" above): each process
 * updates only the variables of its rank's devices, so its copies of the
 * others' go stale. Every rank calls this (a collective over the attached
 * communicator); afterwards rank `root` holds every variable's current
 * value (for fg_session_variable and fg_session_save, which only `root`
 * then calls). A no-op for graphs that are not cross-process. 0 or -1
 * (FG_DEADLINE_EXCEEDED when a peer does not take part in time). */
FG_API int fg_session_gather_variables(fg_session *s, int root, fg_status *status);

/* Data parallelism across processes: every replica of the session's
 * variables takes rank `root`'s current values (PyTorch DDP does this when
 * it wraps a model), so replicas whose variables were initialised
 * differently (random initial values drawn per process) start alike.
 * Every process calls it (a collective over the communicator the
 * all_reduce nodes use: the one attached with fg_session_set_comm when the
 * graph names no rank, else the data communicator, and then only each
 * rank's own variables). A no-op without such a communicator. Refused
 * with FG_UNIMPLEMENTED over an NCCL communicator (broadcast over the MPI
 * one first). 0 or -1 (FG_INVALID_ARGUMENT for a root that is not a
 * replica; FG_DEADLINE_EXCEEDED when a peer does not take part in time).
 *
 * The graph-hash check across processes: before the first run after a communicator is
 * attached (or the graph changed), the processes compare a hash of the
 * graph (nodes, names, the rank:R/ their devices name, attributes,
 * constants; each process may place its own nodes on its own cpu:N or
 * cuda:N) over every attached communicator, and a hash of their
 * variables' values over the replicas;
 * a difference fails that run on every process with FG_INVALID_ARGUMENT
 * naming the ranks and both hashes, before any collective of the graph. */
FG_API int fg_session_broadcast_variables(fg_session *s, int root, fg_status *status);

/* The partition of the session's graph (placement of every node, devices,
 * transfers), rebuilt when the graph changes; owned by the session, valid
 * until the next run or fg_session_free. NULL for a NULL session. */
FG_API const fg_partition *fg_session_partition(fg_session *s);

/* ---- data parallelism --------------------------------------------------- */

#define FG_DEFAULT_BUCKET_BYTES ((int64_t)25 * 1024 * 1024) /* PyTorch DDP's 25 MB */
/* A gradient this large is all-reduced in place by a collective of its own
 * within its bucket instead of being copied into the fused buffer and back:
 * at 1 MiB a collective's fixed cost is below that of the two copies. */
#define FG_DP_FUSE_MAX_BYTES ((size_t)1 << 20)

/* How the loss adds up over a batch's rows, which decides how replicas'
 * gradients combine (as tf.distribute's ReduceOp for losses). */
typedef enum fg_dp_loss_reduction {
  /* A mean over rows (softmax_cross_entropy, reduce_mean; PyTorch DDP's
   * assumption): the row-weighted mean of the replicas' gradients. */
  FG_DP_LOSS_MEAN = 0,
  /* A sum over rows (reduce_sum of per-row losses): the plain sum of the
   * replicas' gradients, and "loss" is the sum of their losses. */
  FG_DP_LOSS_SUM = 1
} fg_dp_loss_reduction;

typedef struct fg_data_parallel_options {
  /* Gradients are grouped into buckets of at most this many bytes (a single
   * larger gradient is a bucket of its own). A bucket's gradients under
   * FG_DP_FUSE_MAX_BYTES are flattened, concatenated, all-reduced at once
   * and split back; larger ones get one all_reduce each, in place. 0:
   * FG_DEFAULT_BUCKET_BYTES; 1: one bucket per gradient; a huge value: one
   * bucket. Buckets fill in the order gradients
   * become ready in the backward pass, and each bucket's all_reduce depends
   * only on its own gradients (and, to keep every rank issuing collectives
   * in one order, on the previous bucket's all_reduce), so it starts while
   * the rest of the backward pass still runs. */
  int64_t bucket_bytes;
  /* Replica r is placed on "<device_type>:<first_device + r>": "cpu"
   * (default, NULL) or "cuda". Unused when replicas == 1 (nothing is
   * placed). */
  const char *device_type;
  int first_device;
  /* FG_DP_LOSS_MEAN (default) or FG_DP_LOSS_SUM: how `g`'s loss adds up
   * over rows. The mean applied to a summed loss would scale every step by
   * the shards' shares of the rows; any other value is refused. */
  int loss_reduction;
  /* 1: each SGD update whose gradient gets an all_reduce of its own
   * (FG_DP_FUSE_MAX_BYTES or more) and is read by nothing else becomes
   * one node that reduces the gradient and updates the variable (the op
   * all_reduce_apply_sgd). Over the MPI communicator on one host it sums
   * each rank's slice of the gradients where they lie and writes the
   * updated slice into every rank's variable (ZeRO's sharded update):
   * about half the memory traffic of an all_reduce followed by a full
   * update on every rank. Elsewhere it all-reduces a copy of the
   * gradient, then updates: the same results, a little slower. The same
   * bits as without it, except for a weight whose gradient is a matmul's
   * a^T b of tensors the plan makes (a hidden layer's: its input and its
   * delta; not a fed batch): that update takes a and b (the op
   * sufficient_factor_apply_sgd, after sufficient factor broadcasting), and over shared memory each
   * rank computes its slice of the update over every rank's rows in one GEMM, the gradient never
   * made. Those bits differ by rounding, and are the same on every rank. Only with replicas = 1
   * (one replica per process, `flowgraph train --dist mpi`'s form) on a graph that names at most
   * one device and no rank:R/ ones; other graphs are rewritten as with 0. CPU sessions only: a GPU
   * session refuses the fused node. 0 (default): all_reduce nodes, then
   * the updates. */
  int fused_update;
  /* 1: batch norm's statistics are those of the whole batch, all-reduced
   * over the replicas each step (torch.nn.SyncBatchNorm): every batch_norm
   * node and its gradient are copied as sync_batch_norm and
   * sync_batch_norm_grad, collectives of the replicas' communicator. The
   * outputs, running statistics and gradients are the full batch's, for
   * uneven shards too (where the buckets take the weighted mean; with a
   * summed loss, where they add). 0 (default): each replica's own, as
   * PyTorch DDP. The ops have CPU kernels only (as the fused updates). */
  int sync_batch_norm;
} fg_data_parallel_options;

FG_API void fg_data_parallel_options_init(fg_data_parallel_options *opts);

/* How a batch of `rows` rows splits over `count` replicas (fg_data_parallel's
 * shard nodes, `flowgraph train --dist mpi`), as NumPy's array_split: the
 * first rows % count shards get one row more. Returns shard `index`'s row
 * count and, when `first` is not NULL, sets *first to its first row. A
 * program running one replica per process feeds rank r these rows. */
static inline int64_t fg_shard_rows(int64_t rows, int64_t count, int64_t index, int64_t *first) {
  int64_t base = rows / count, extra = rows % count;
  if (first) *first = index * base + (index < extra ? index : extra);
  return base + (index < extra ? 1 : 0);
}

/* Returns a new graph (owned by the caller; `g` is not changed) that runs
 * `g`'s training step data-parallel over `replicas` replicas. `g` must hold
 * metadata "loss" and "train_target" (as fg_minimize records them), and its
 * updates are apply_* ops whose gradient input derives from fg_gradients.
 * The tensors all-reduced are the outputs of fg_gradients ("gradients*"
 * nodes) that an update's gradient input reaches, directly or through other
 * nodes; those nodes (fg_minimize's clip_global_norm, Adam's L2 term) are
 * copied per replica and read the reduced gradients, as PyTorch DDP +
 * clip_grad_norm_ does: every replica clips the same averaged gradients by
 * the same global norm, so the variables stay equal. Each gradient is
 * reduced once, however many of those nodes read it.
 *
 * replicas > 1: every node but the placeholders is copied per replica r,
 * named "replica_<r>/<name>" and placed on device r. Each placeholder named
 * in batch_inputs stays one placeholder (same name, fed the full batch) and
 * each replica gets its rows of it (fg_shard_rows: B need not divide by N,
 * but B < N fails the run naming the shard and B) through a "shard" node.
 * Other placeholders are shared. Replica 0's variables keep their names (so
 * fg_session_variable and fg_session_save see them); other replicas' copies
 * are "replica_<r>/<name>" and stay equal to them bit for bit, because every
 * replica applies the same all-reduced gradient. New nodes named as `g`'s
 * "loss" (the replicas' losses weighted by their rows: the full-batch mean
 * for a loss that is a mean over rows) and "train_target" (a group of every
 * replica's update) keep the metadata working, so `flowgraph train` runs
 * the result unchanged. `g`'s graph outputs map to replica 0's copies.
 *
 * Uneven shards: with batch inputs, every bucket's all_reduce is the mean
 * weighted by each replica's rows of batch_inputs[0] (all_reduce attribute
 * "weighted"; a first all_reduce "data_parallel/rows" sums the rows each
 * step), so for a loss that is a mean over rows the reduced gradient is the
 * full batch's however the rows split, across processes too. When every
 * replica has the same rows it is the plain mean, bit for bit. Without
 * batch inputs the buckets take the plain mean. With loss_reduction =
 * FG_DP_LOSS_SUM (a loss summed over rows) the buckets take the plain sum,
 * which is the full batch's gradient however the rows split, and no row
 * counts are made.
 *
 * replicas == 1: the same graph with the all_reduce buckets inserted and
 * nothing renamed: the form for one process per replica (MPI,
 * fg_session_set_comm), where each process feeds its own shard. When `g`
 * places nodes on several devices of the process (cpu:0 and cpu:1, say),
 * every inserted collective and its bucket's nodes go on one device, the
 * first batch input's (without batch inputs, the first gradient's), since a
 * process communicator serves one device's all_reduce nodes.
 *
 * A graph placing nodes on rank:R/ devices (a model split over S
 * processes) takes replicas = 1 only: each rank's gradients go into
 * buckets of their own, reduced on that rank (on the device of its first
 * gradient) and chained per rank, and the row counts are made where the
 * first batch input lives; fg_session_set_data_comm says how it runs.
 * replicas > 1 is refused (FG_UNIMPLEMENTED) for such a graph.
 *
 * Refused, naming the argument and its value: replicas < 1 or >
 * FG_MAX_CPU_DEVICES, first_device + replicas - 1 past cpu:63 (or past an
 * int for cuda), a NULL batch_inputs or entry in it, a batch input that is
 * not a placeholder, a graph without the metadata or updates, metadata
 * "loss" or "train_target" naming a source (placeholder, variable,
 * constant) or both the same node, a graph fg_data_parallel made already
 * (all FG_INVALID_ARGUMENT); an update whose gradient input derives from no
 * fg_gradients output, or reaches a batch input outside fg_gradients (the
 * replicas would update differently) (FG_UNIMPLEMENTED naming the update
 * and the node). */
FG_API fg_graph *fg_data_parallel(const fg_graph *g, int replicas, const char *const *batch_inputs,
                                  int n_batch_inputs, const fg_data_parallel_options *opts,
                                  fg_status *status);

/* ---- micro-batches (pipeline parallelism) -------------------------------- */

#define FG_MAX_MICRO_BATCHES 1024

/* Returns a new graph (owned by the caller; `g` is not changed) whose
 * training step cuts every batch input along axis 0 into `micro_batches`
 * shards (fg_shard_rows, as fg_data_parallel's replicas: B need not divide
 * by M, but B < M fails the run naming the shard and B) and runs the
 * forward and backward pass once per shard, GPipe's micro-batches. Every
 * node that depends on a batch input is copied per micro-batch K, named
 * "micro_batch_<K>/<name>", on the same device as in `g`. Everything else
 * keeps one copy under its own name: variables, constants, placeholders,
 * and the optimizer updates with whatever follows them. Each output of
 * fg_gradients that an update consumes (directly or through clipping, which
 * then runs once on the combined gradients) becomes the micro-batches'
 * gradients weighted by their rows (FG_DP_LOSS_MEAN: each is a mean over
 * its rows; FG_DP_LOSS_SUM: their plain sum), a node under
 * "gradients/micro_batch/", so each update applies the full batch's
 * gradient once. The loss keeps its name as the same weighted
 * combination, so metadata "loss" and "train_target" still work and
 * `flowgraph train` runs the result unchanged. The nodes that are copied
 * also stay as they were, under their own names, on the full batch (the
 * original loss as "<loss>/full_batch"): the training step never runs
 * them (the executor prunes what its fetches do not need), but evaluation,
 * inference and `g`'s graph outputs fetch them by name.
 *
 * Why: on a model split across devices or processes (layer 1 on cpu:0 or
 * rank:0/, layer 2 on cpu:1 or rank:1/), one batch keeps one stage busy at
 * a time. Micro-batches depend on each other only through the updates, so
 * the executor starts micro-batch K+1 on the first stage while K runs on
 * the next: a pipeline, from the static schedule alone.
 *
 * Memory: with S devices holding copies (stages, 1 without placement) and
 * more than 2S micro-batches, micro-batch K + 2S starts on a device only
 * once K is done there (its gradients added to the combination): an
 * "after" node (x's bytes, once its other inputs ran) on a group named
 * "micro_batch_<K>/pipeline_gate_<device>". The memory plan then reuses
 * K's buffers for K + 2S, so at most 2S micro-batches' activations and
 * weight gradients are alive per device, however large M is, where
 * otherwise all M would be. fg_micro_batch_ex's max_in_flight sets
 * another bound, or none: S (PipeDream's 1F1B bound) holds the least
 * memory that keeps every stage busy; 2S runs about as fast as no bound
 * with much less memory.
 *
 * fg_data_parallel may be applied to the result (replicas = 1: hybrid runs
 * over MPI); it all-reduces the combined gradients, once per step.
 *
 * Refused: micro_batches < 1 or > FG_MAX_MICRO_BATCHES, no batch input, a
 * loss_reduction other than FG_DP_LOSS_MEAN or FG_DP_LOSS_SUM, a batch
 * input that is not a placeholder of g (or NULL), a graph without the
 * metadata or updates, metadata "loss" or "train_target" naming a source
 * or both the same node, a graph fg_micro_batch made already, a loss that
 * does not depend on the batch inputs (all FG_INVALID_ARGUMENT or
 * FG_NOT_FOUND); an update whose gradient reaches a
 * batch input outside fg_gradients, a node that runs once per step reading
 * a per-micro-batch tensor as data, and a loss that is not output 0 of its
 * node (FG_UNIMPLEMENTED, naming the nodes). */
FG_API fg_graph *fg_micro_batch(const fg_graph *g, int micro_batches,
                                const char *const *batch_inputs, int n_batch_inputs,
                                int loss_reduction, fg_status *status);

/* fg_micro_batch with options. */
typedef struct fg_micro_batch_options {
  /* FG_DP_LOSS_MEAN (default) or FG_DP_LOSS_SUM, as fg_micro_batch's
   * loss_reduction. */
  int loss_reduction;
  /* How many micro-batches a device may hold at once (started there and
   * not yet folded into the combined gradients): micro-batch K + W starts
   * on a device only once K is done there. 0 (default): W = 2S, S the
   * devices holding copies (see "Memory" above); 1 to
   * FG_MAX_MICRO_BATCHES: that W (S keeps a pipeline of S stages busy with
   * the least memory, PipeDream's 1F1B bound; below S the stages wait
   * for each other); FG_MICRO_BATCH_UNBOUNDED: no gates, every
   * micro-batch in flight (GPipe: the most memory, no waiting). Anything
   * else is refused. */
  int max_in_flight;
} fg_micro_batch_options;

#define FG_MICRO_BATCH_UNBOUNDED (-1)

FG_API void fg_micro_batch_options_init(fg_micro_batch_options *opts);

/* fg_micro_batch with `opts` (NULL: the defaults of
 * fg_micro_batch_options_init). */
FG_API fg_graph *fg_micro_batch_ex(const fg_graph *g, int micro_batches,
                                   const char *const *batch_inputs, int n_batch_inputs,
                                   const fg_micro_batch_options *opts, fg_status *status);

#ifdef __cplusplus
}
#endif
#endif
