/* What fg_data_parallel's two files share (internal): the rewrite's state
 * and the analysis of the original graph (dist/rewrite/dp_grads.c: which
 * gradients to all-reduce, which updates to fuse) that the emission
 * (dist/rewrite/data_parallel.c) reads. */
#ifndef FG_DIST_REWRITE_DP_INTERNAL_H
#define FG_DIST_REWRITE_DP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dist/rewrite/rewrite.h"
#include "flowgraph/dist.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"

typedef struct grad {
  fg_output src; /* in the original graph */
  size_t bytes;
  int64_t elems;
  fg_dtype dtype;
  int bucket;
  int rank; /* cross-process graphs: the rank computing it; else -1 */
  int dev;  /* its device in the partition of the original graph */
} grad;

/* Per-node marks of the original graph (dp.mark). */
enum {
  IN_GRADIENTS = 1, /* made by fg_gradients (FG_NODE_MADE_BY_GRADIENTS) */
  DERIVES = 2,      /* depends on some node made by fg_gradients */
  ON_PATH = 4       /* between fg_gradients and an update (clipping, weight
                       decay): its copies read the reduced gradients */
};

typedef struct dp {
  const fg_graph *g;
  fg_graph *ng;
  int n; /* replicas */
  const fg_data_parallel_options *o;
  const char *const *batch;
  int n_batch;
  char *mark; /* per node of g */
  int *map;   /* [r * n_nodes + node]: new node id, -1 = not yet */
  grad *grads;
  int n_grads;
  int n_buckets;
  int *bucket_end;  /* per bucket: one past its last grad */
  int emitted;      /* buckets emitted so far (in order) */
  int n_reduces;    /* all_reduce nodes per replica so far (their names) */
  int *vc_off, *vc; /* variables' consumers (index_var_consumers) */
  /* Per node of g: 1 when the training step runs it (the train target
   * depends on it). A graph may hold readers of a variable that the step
   * never runs: fg_micro_batch keeps the full-batch forward pass for
   * evaluation. */
  char *in_step;
  fg_output *red;  /* [r * n_grads + j]: the reduced gradient in the new graph */
  fg_output *prev; /* per replica: the previous bucket's all_reduce */
  /* Shards may differ in rows (uneven batches), so each bucket is the
   * row-weighted mean: per replica its rows (f64 scalar) and the all-reduced
   * [sum of rows, sum of rows^2] that every bucket's all_reduce reads. No
   * batch inputs: .node = -1, plain mean. */
  fg_output *rows, *stats;
  /* A model split across processes (devices rank:R/...), one replica per
   * process group: the partition of `g`, and each rank's bucket chain
   * (prev is indexed by rank then, not by replica). place() puts the
   * nodes it is given on cur_dev while that is set: a bucket on its rank's
   * device, the row counts with their batch input. */
  fg_partition *part;
  int n_chains;
  int chain;
  /* replicas = 1 over several devices of this process (no rank:R/): the
   * one device, as `g` names it, that every collective goes on (a process
   * communicator serves one device's all_reduce nodes,
   * executor/dist/session_dist.c); NULL otherwise (reduce_device). */
  const char *one_dev;
  const char *cur_dev;
  char cur_dev_buf[48];
  /* fused_update: per gradient, the apply_sgd node of g that reduces it
   * itself (emitted as all_reduce_apply_sgd), else -1; NULL when not asked
   * (find_fused). */
  int *fused;
  /* ... and of those, the matmul node of g (a^T b) whose product that
   * update takes instead of the gradient (emitted as
   * sufficient_factor_apply_sgd), else -1. */
  int *product;
} dp;

static inline int *mapped(dp *d, int r, int node) {
  return &d->map[(size_t)r * d->g->n_nodes + node];
}

static inline int grad_index(const dp *d, fg_output o) {
  for (int j = 0; j < d->n_grads; j++)
    if (d->grads[j].src.node == o.node && d->grads[j].src.index == o.index) return j;
  return -1;
}

/* Index into d->grads of the reduced gradient that input k of node i
 * reads, or -1 when it reads the replica's own tensor: an update's gradient
 * input and the inputs of the nodes between fg_gradients and the updates
 * read the all-reduced gradients; every other consumer (the forward pass,
 * the backward pass itself) keeps the replica's own. */
static inline int reduced_input(const dp *d, int i, int k) {
  const fg_node *nd = &d->g->nodes[i];
  fg_output src = nd->inputs[k];
  if (!(d->mark[src.node] & IN_GRADIENTS)) return -1;
  if (!(d->mark[i] & ON_PATH) && k != fg_update_grad_input(nd->op)) return -1;
  return grad_index(d, src);
}

/* fg_status_set(st, code, fmt, a, b); returns -1. */
int fg_dp_fail(fg_status *st, fg_code code, const char *fmt, const char *a, const char *b);
/* The gradients the updates consume, in the order they become ready, cut
 * into buckets (d->grads, d->bucket_end, d->mark). 0, or -1 with st set. */
int fg_dp_collect_grads(dp *d, fg_status *st);
/* fused_update: d->fused and d->product (see dp). 0, or -1 on OOM. */
int fg_dp_find_fused(dp *d);
/* The op node nd's copies are made as: its own, or with the
 * sync_batch_norm option the sync_* form of batch_norm and its gradient,
 * with *own (when NULL) set to new attributes where the gradient needs
 * some (dist/rewrite/dp_sync_bn.c). */
const char *fg_dp_op_name(const dp *d, const fg_node *nd, fg_attrs **own);
/* The device the replicas = 1 rewrite puts its collectives on, or NULL. */
const char *fg_dp_reduce_device(const fg_graph *g, int ph);
/* 1 with st naming the first bad argument of fg_data_parallel and its
 * value, else 0. */
int fg_dp_bad_args(const fg_graph *g, int replicas, const char *const *batch_inputs,
                   int n_batch_inputs, const fg_data_parallel_options *o, fg_status *st);
/* 1 with st naming what fg_data_parallel cannot do with g (a graph split
 * across processes with replicas > 1) or the options (loss_reduction,
 * device_type), else 0. */
int fg_dp_bad_graph(const fg_graph *g, int replicas, const fg_data_parallel_options *o,
                    fg_status *st);

#endif
