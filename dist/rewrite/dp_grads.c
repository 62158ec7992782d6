/* fg_data_parallel's analysis of the original graph: the gradients the
 * updates consume (found by FG_NODE_MADE_BY_GRADIENTS, walked back from
 * each update through clipping and the like), their buckets, the updates
 * that fuse with their all_reduce and those that take their gradient's
 * factors; and the checks of its arguments. The emission is in
 * dist/rewrite/data_parallel.c. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/rewrite/dp_internal.h"

int fg_dp_fail(fg_status *st, fg_code code, const char *fmt, const char *a, const char *b) {
  fg_status_set(st, code, fmt, a, b);
  return -1;
}

/* Adds gradient `src` (an output of fg_gradients) that update u needs,
 * kept sorted by producer id: the backward pass makes them in node order,
 * so this is the order they become ready. A gradient read by several
 * consumers (a clip's norm and its scaling) is added, so reduced, once. */
static int add_grad(dp *d, fg_output src, int u, fg_status *st) {
  const fg_graph *g = d->g;
  if (grad_index(d, src) >= 0) return 0;
  const fg_tinfo *ti = fg_graph_tinfo(g, src);
  grad gr = {src, 0, 0, ti ? ti->dtype : FG_F32, 0, -1, 0};
  if (d->part) {
    gr.dev = fg_partition_node_device(d->part, src.node);
    gr.rank = fg_partition_device(d->part, gr.dev).rank;
  }
  if (!ti || fg_tinfo_bytes(ti, &gr.bytes) != 0 || fg_shape_elements(ti->rank, ti->dims, &gr.elems))
    return fg_dp_fail(st, FG_INVALID_ARGUMENT,
                      "fg_data_parallel: gradient '%s' of update '%s' has an unknown shape",
                      g->nodes[src.node].name, g->nodes[u].name);
  int j = d->n_grads++;
  while (j > 0 && d->grads[j - 1].src.node > src.node) {
    d->grads[j] = d->grads[j - 1];
    j--;
  }
  d->grads[j] = gr;
  return 0;
}

static int is_batch(const dp *d, const fg_node *nd) {
  if (nd->op != FG_OP_PLACEHOLDER) return 0;
  for (int b = 0; b < d->n_batch; b++)
    if (strcmp(d->batch[b], nd->name) == 0) return 1;
  return 0;
}

/* Walks back from update u's gradient input through the nodes outside
 * fg_gradients (gradient clipping; Adam's L2 term in graphs made before
 * apply_adam took it as its attribute l2) to the outputs of
 * fg_gradients, which are the gradients to all-reduce, and marks the nodes
 * passed ON_PATH. As with PyTorch DDP + clip_grad_norm_, those nodes then
 * compute on the reduced (mean) gradients, identically on every replica,
 * so the variables stay equal. `stack` holds n_nodes ints; nodes marked by
 * an earlier update's walk are not walked again. */
static int walk_update(dp *d, int u, int *stack, fg_status *st) {
  const fg_graph *g = d->g;
  fg_output start = g->nodes[u].inputs[fg_update_grad_input(g->nodes[u].op)];
  if (!(d->mark[start.node] & DERIVES))
    return fg_dp_fail(
        st, FG_UNIMPLEMENTED,
        "fg_data_parallel: the gradient of update '%s' comes from '%s', which does not "
        "derive from any output of fg_gradients: there is no gradient to all-reduce",
        g->nodes[u].name, g->nodes[start.node].name);
  if (d->mark[start.node] & IN_GRADIENTS) return add_grad(d, start, u, st);
  int top = 0;
  if (!(d->mark[start.node] & ON_PATH)) {
    d->mark[start.node] |= ON_PATH;
    stack[top++] = start.node;
  }
  while (top > 0) {
    const fg_node *nd = &g->nodes[stack[--top]];
    /* A batch input reaches each replica as a different shard: what the
     * update computes from it would differ between replicas. */
    if (is_batch(d, nd))
      return fg_dp_fail(st, FG_UNIMPLEMENTED,
                        "fg_data_parallel: the gradient of update '%s' depends on batch input '%s' "
                        "outside fg_gradients: replicas would update their variables differently",
                        g->nodes[u].name, nd->name);
    for (int k = 0; k < nd->n_inputs; k++) {
      fg_output in = nd->inputs[k];
      if (d->mark[in.node] & IN_GRADIENTS) {
        if (add_grad(d, in, u, st) != 0) return -1;
      } else if (!(d->mark[in.node] & ON_PATH)) {
        d->mark[in.node] |= ON_PATH;
        stack[top++] = in.node;
      }
    }
  }
  return 0;
}

/* The gradients the updates consume, in the order they become ready, cut
 * into buckets. */
int fg_dp_collect_grads(dp *d, fg_status *st) {
  const fg_graph *g = d->g;
  size_t n_out = 1;
  for (int i = 0; i < g->n_nodes; i++)
    n_out += g->nodes[i].n_outputs > 0 ? (size_t)g->nodes[i].n_outputs : 1;
  d->grads = calloc(n_out, sizeof *d->grads);
  d->mark = calloc((size_t)g->n_nodes + 1, 1);
  int *stack = malloc(((size_t)g->n_nodes + 1) * sizeof *stack);
  if (!d->grads || !d->mark || !stack) {
    free(stack);
    return fg_dp_fail(st, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory%s%s", "", "");
  }
  /* Node ids are topological, so one forward sweep finds what derives
   * from fg_gradients. */
  for (int i = 0; i < g->n_nodes; i++) {
    const fg_node *nd = &g->nodes[i];
    if (nd->flags & FG_NODE_MADE_BY_GRADIENTS) d->mark[i] |= IN_GRADIENTS | DERIVES;
    for (int k = 0; k < nd->n_inputs && !(d->mark[i] & DERIVES); k++)
      d->mark[i] |= d->mark[nd->inputs[k].node] & DERIVES;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    int gi = fg_update_grad_input(g->nodes[i].op);
    if (gi < 0 || gi >= g->nodes[i].n_inputs) continue;
    if (walk_update(d, i, stack, st) != 0) {
      free(stack);
      return -1;
    }
  }
  free(stack);
  if (d->n_grads == 0)
    return fg_dp_fail(
        st, FG_INVALID_ARGUMENT,
        "fg_data_parallel: the graph has no optimizer update (apply_*)%s%s; build it with "
        "fg_minimize first",
        "", "");
  d->bucket_end = malloc((size_t)d->n_grads * sizeof *d->bucket_end);
  if (!d->bucket_end)
    return fg_dp_fail(st, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory%s%s", "", "");
  int64_t cap = d->o->bucket_bytes > 0 ? d->o->bucket_bytes : FG_DEFAULT_BUCKET_BYTES;
  size_t fill = 0;
  for (int j = 0; j < d->n_grads; j++) {
    /* Across processes a bucket holds one rank's gradients: each rank
     * reduces its own with the ranks of the same stage. */
    int start = j == 0 || d->grads[j].dtype != d->grads[j - 1].dtype ||
                d->grads[j].rank != d->grads[j - 1].rank ||
                fill + d->grads[j].bytes > (uint64_t)cap;
    if (start && j > 0) d->bucket_end[d->n_buckets++] = j;
    if (start) fill = 0;
    fill += d->grads[j].bytes;
  }
  d->bucket_end[d->n_buckets++] = d->n_grads;
  return 0;
}

/* find_fused's updates whose gradient is a matmul's a^T b (a [rows, m], b
 * [rows, n], both 2-D, f32 or f64: a weight's gradient in a dense layer)
 * that nothing else reads: d->product[j] = that matmul. Such an update
 * takes a and b instead (sufficient_factor_apply_sgd), and the gradient is never made
 * where the communicator can fuse it: rows x (m + n) elements cross
 * between ranks instead of m x n (kernels/collective.h, gather_factors).
 * -1 on OOM. */
static int find_products(dp *d) {
  const fg_graph *g = d->g;
  d->product = malloc((size_t)d->n_grads * sizeof *d->product);
  if (!d->product) return -1;
  for (int j = 0; j < d->n_grads; j++) {
    d->product[j] = -1;
    const fg_output src = d->grads[j].src;
    const fg_node *mm = &g->nodes[src.node];
    if (d->fused[j] < 0 || mm->op != FG_OP_MATMUL || src.index != 0 || mm->n_inputs != 2 ||
        fg_attr_int_or(mm, "transpose_a", 0) != 1 || fg_attr_int_or(mm, "transpose_b", 0) != 0)
      continue;
    /* A fed tensor lies outside the plan's arenas, where the other ranks
     * cannot read it: a first layer's weight keeps the made gradient
     * (the kernel would fall back to making it anyway, then all-reduce a
     * copy, slower than the fused update of the made gradient). */
    if (g->nodes[mm->inputs[0].node].op == FG_OP_PLACEHOLDER ||
        g->nodes[mm->inputs[1].node].op == FG_OP_PLACEHOLDER)
      continue;
    const fg_tinfo *ta = fg_graph_tinfo(g, mm->inputs[0]), *tb = fg_graph_tinfo(g, mm->inputs[1]);
    if (!ta || !tb || ta->rank != 2 || tb->rank != 2 || ta->dtype != d->grads[j].dtype ||
        tb->dtype != d->grads[j].dtype)
      continue;
    int readers = 0;
    for (int i = src.node + 1; i < g->n_nodes && readers < 2; i++)
      for (int k = 0; k < g->nodes[i].n_inputs; k++)
        readers += g->nodes[i].inputs[k].node == src.node;
    if (readers == 1) d->product[j] = src.node;
  }
  return 0;
}

/* fused_update: d->fused[j] = the apply_sgd update that all-reduces
 * gradient j itself, for each gradient large enough for an all_reduce of
 * its own (FG_DP_FUSE_MAX_BYTES) whose reduced value nothing but that
 * update's gradient input reads (no clipping, no other optimizer); -1 for
 * the others. Only for one replica per process on one device (replicas =
 * 1, no rank:R/ devices, no device to pin collectives to): there the
 * update and its collective share the process communicator, which over
 * one host's shared memory updates every rank's variable at once
 * (dist/comm/shm_reduce.h). -1 on OOM. */
int fg_dp_find_fused(dp *d) {
  if (!d->o->fused_update || d->n != 1 || d->part || d->one_dev) return 0;
  d->fused = malloc((size_t)d->n_grads * sizeof *d->fused);
  int *uses = calloc((size_t)d->n_grads + 1, sizeof *uses);
  if (!d->fused || !uses) {
    free(uses);
    return -1;
  }
  for (int j = 0; j < d->n_grads; j++)
    d->fused[j] = -1;
  const fg_graph *g = d->g;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_inputs; k++) {
      int j = reduced_input(d, i, k);
      if (j < 0) continue;
      /* The first use names its update; a second use rules it out. */
      uses[j]++;
      if (g->nodes[i].op == FG_OP_APPLY_SGD && k == 1) d->fused[j] = i;
    }
  for (int j = 0; j < d->n_grads; j++)
    if (uses[j] != 1 || d->grads[j].bytes < FG_DP_FUSE_MAX_BYTES ||
        (d->grads[j].dtype != FG_F32 && d->grads[j].dtype != FG_F64))
      d->fused[j] = -1;
  free(uses);
  return find_products(d);
}

/* One replica of a model placed on several devices of this process
 * (model parallelism, with a process communicator for data parallelism
 * across processes): left to the placer, the inserted collectives would
 * follow their gradients onto several devices, which the session refuses.
 * They all go on one device the graph itself names: that of the first
 * placed node reading batch input `ph` (where the batch lives), else of
 * the first placed node. NULL, and nothing placed, when the graph names
 * fewer than two devices (the names are compared, not resolved: an
 * unplaced graph, or one placed on its session's device, keeps the
 * placer's choice). */
const char *fg_dp_reduce_device(const fg_graph *g, int ph) {
  const char *first = NULL;
  int several = 0;
  for (int id = 0; id < g->n_nodes && !several; id++) {
    const char *dev = g->nodes[id].device;
    if (!dev) continue;
    if (!first) first = dev;
    several = strcmp(dev, first) != 0;
  }
  if (!several) return NULL;
  for (int id = 0; ph >= 0 && id < g->n_nodes; id++) {
    const fg_node *nd = &g->nodes[id];
    for (int k = 0; nd->device && k < nd->n_inputs; k++)
      if (nd->inputs[k].node == ph) return nd->device;
  }
  return first;
}

/* 1 with st naming the first bad argument of fg_data_parallel and its
 * value, else 0. */
int fg_dp_bad_args(const fg_graph *g, int replicas, const char *const *batch_inputs,
                   int n_batch_inputs, const fg_data_parallel_options *o, fg_status *st) {
  const char *who = "fg_data_parallel";
  const int cuda = o->device_type && strcmp(o->device_type, "cuda") == 0;
  /* Replica r runs on first_device + r. */
  const long long last = (long long)o->first_device + replicas - 1;
  if (!g)
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: graph is NULL", who);
  else if (replicas < 1 || replicas > FG_MAX_CPU_DEVICES)
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: replicas %d must be 1 to %d", who, replicas,
                  FG_MAX_CPU_DEVICES);
  else if (n_batch_inputs < 0)
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: n_batch_inputs %d must be >= 0", who,
                  n_batch_inputs);
  else if (n_batch_inputs > 0 && !batch_inputs)
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: batch_inputs is NULL but n_batch_inputs is %d", who,
                  n_batch_inputs);
  else if (o->bucket_bytes < 0)
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: bucket_bytes %lld must be >= 0", who,
                  (long long)o->bucket_bytes);
  else if (o->first_device < 0)
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: first_device %d must be >= 0", who,
                  o->first_device);
  else if (replicas > 1 && !cuda && last >= FG_MAX_CPU_DEVICES)
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s: first_device %d with %d replicas would place the last on cpu:%lld; CPU "
                  "devices are cpu:0 to cpu:%d",
                  who, o->first_device, replicas, last, FG_MAX_CPU_DEVICES - 1);
  else if (replicas > 1 && cuda && last > INT_MAX)
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s: first_device %d with %d replicas would place the last on cuda:%lld, past "
                  "the largest device index",
                  who, o->first_device, replicas, last);
  else
    return 0;
  return 1;
}

/* 1 with st naming what fg_data_parallel cannot do with g and these
 * options, else 0. */
int fg_dp_bad_graph(const fg_graph *g, int replicas, const fg_data_parallel_options *o,
                    fg_status *st) {
  if (o->loss_reduction != FG_DP_LOSS_MEAN && o->loss_reduction != FG_DP_LOSS_SUM) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_data_parallel: loss_reduction %d must be FG_DP_LOSS_MEAN (0) or "
                  "FG_DP_LOSS_SUM (1)",
                  o->loss_reduction);
    return 1;
  }
  if (o->device_type && strcmp(o->device_type, "cpu") != 0 && strcmp(o->device_type, "cuda") != 0) {
    fg_dp_fail(st, FG_INVALID_ARGUMENT,
               "fg_data_parallel: device_type '%s' must be \"cpu\" or \"cuda\"%s", o->device_type,
               "");
    return 1;
  }
  /* Each replica's gradient is reduced before its variable's update; an
   * update of several variables (the multi_update pass's) has no one
   * gradient to reduce. Sessions run that pass after this rewrite. */
  for (int id = 0; id < g->n_nodes; id++)
    if (fg_op_table[g->nodes[id].op].mutable_lists) {
      fg_dp_fail(st, FG_UNIMPLEMENTED,
                 "fg_data_parallel: node '%s' (%s) updates several variables in one node; "
                 "replicate the graph before optimizing it (flowgraph optimize --passes without "
                 "multi_update)",
                 g->nodes[id].name, fg_op_table[g->nodes[id].op].name);
      return 1;
    }
  /* A model split across processes is replicated by running the whole
   * group of processes several times (replicas = 1 here: each process
   * group is one replica); copies of every stage inside one graph would
   * need per-copy ranks, which no device name can say. */
  for (int id = 0; id < g->n_nodes && replicas > 1; id++)
    if (g->nodes[id].device && strncmp(g->nodes[id].device, "rank:", 5) == 0) {
      fg_dp_fail(st, FG_UNIMPLEMENTED,
                 "fg_data_parallel: node '%s' is placed on '%s' (model parallelism across "
                 "processes): such a model is replicated one process group per replica, with "
                 "replicas = 1 (flowgraph train --dist mpi on a multiple of its ranks)",
                 g->nodes[id].name, g->nodes[id].device);
      return 1;
    }
  return 0;
}
