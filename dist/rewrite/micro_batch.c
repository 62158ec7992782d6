/* fg_micro_batch: GPipe-style micro-batches inside one training step. See
 * flowgraph/dist.h.
 *
 * The rewrite copies, once per micro-batch, every node that depends on a
 * batch input (the forward pass, the loss, the backward pass), with the
 * batch inputs replaced by shards of them (the shard op, as
 * fg_data_parallel's replicas), and keeps one copy of everything else:
 * variables, constants, the optimizer updates and what follows them. At
 * each output of fg_gradients that an update consumes (directly or through
 * clipping), the micro-batches' gradients are combined, weighted by their
 * rows (each micro-batch's loss is a mean over its rows), so the update
 * sees the full batch's gradient. Nothing else ties micro-batch k to k+1,
 * so on a model split across devices or processes the executor runs k+1's
 * first stage while k is in the next one: the pipeline falls out of the
 * dataflow schedule, with no scheduler of its own. Only where there are
 * more than 2 micro-batches per stage does k + 2S (S stages) wait for k on
 * each device ("after" nodes on a per-device gate; plan_window says why),
 * so that its buffers can be reused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowgraph/dist.h"
#include "graph/builders_internal.h"
#include "dist/rewrite/partition.h"
#include "dist/rewrite/rewrite.h"
#include "graph/init.h"
#include "graph/op_table.h"

/* Per-node marks of the original graph. */
enum {
  DEP = 1,      /* depends on a batch input: copied per micro-batch */
  SINGLE = 2,   /* an update, or after one: one copy */
  ON_PATH = 4,  /* between fg_gradients and an update (clipping): one copy,
                   reading the combined gradients */
  GRAD_SRC = 8, /* an output of fg_gradients an update consumes */
  QUEUED = 16   /* on the walk's stack already (each node goes once) */
};

typedef struct mb {
  const fg_graph *g;
  fg_graph *ng;
  int m; /* micro-batches */
  int loss_sum;
  char *mark;
  int *map;  /* [k * n_nodes + node]: the copy for micro-batch k */
  int *orig; /* per node: the copy under its own name (full batch) */
  int loss_node;
  fg_output *comb; /* per node (output 0 .. ): combined gradient, lazily */
  int *comb_off;   /* per node: first index into comb */
  fg_output *rows; /* per micro-batch: its share of the rows (f64), once made */
  int first_batch; /* node id of the first batch input (rows from it) */
  fg_output full;  /* its placeholder in the new graph */
  const char *const *batch;
  int n_batch;
  char *comb_used; /* per comb slot: a single-copy node reads that gradient */
  /* Bounding the micro-batches in flight (see gate_for): set after a first
   * emission, from where its copies were placed. */
  int window;    /* W: micro-batch k + W waits for k on each device; 0: off */
  int in_flight; /* fg_micro_batch_options.max_in_flight */
  int n_dev;     /* devices of that placement */
  int *dev;      /* per node: the device of its copies (-1: not copied) */
  char *entry;   /* per node: a copy with no input copied on its device */
  char *sink;    /* per node: a copy no copy on its device reads */
  int *gate;     /* [k * n_dev + device]: micro-batch k's gate there, -1 */
} mb;

static int *mapped(mb *d, int k, int node) { return &d->map[(size_t)k * d->g->n_nodes + node]; }

static int per_batch(const mb *d, int node) {
  return (d->mark[node] & DEP) && !(d->mark[node] & (SINGLE | ON_PATH));
}

static const char *copy_name(int k, const char *name, char *buf, size_t size) {
  snprintf(buf, size, "micro_batch_%d/%s", k, name);
  return buf;
}

/* Micro-batch k's share of the batch, rows_k / rows, as `dt`: the
 * elements of its shard of the first batch input over the input's (every
 * batch input is cut alike, fg_shard_rows, and every row of one input has
 * as many elements). */
static fg_output share_of(mb *d, int k, fg_dtype dt) {
  if (d->rows[k].node < 0) {
    fg_output part = fg_numel(d->ng, (fg_output){*mapped(d, k, d->first_batch), 0}, FG_F64);
    fg_output all = fg_numel(d->ng, d->full, FG_F64);
    d->rows[k] = fg_div(d->ng, part, all);
  }
  return dt == FG_F64 ? d->rows[k] : fg_cast(d->ng, d->rows[k], dt);
}

/* sum_k x_k * share_k (a loss summed over rows: sum_k x_k), in k order,
 * under `scope`; named `name` when not NULL. */
static fg_output combine(mb *d, const fg_output *x, fg_dtype dt, const char *scope,
                         const char *name) {
  fg_graph_set_scope(d->ng, scope);
  fg_output out = FG_NO_OUTPUT;
  for (int k = 0; k < d->m; k++) {
    fg_output term = d->loss_sum ? x[k] : fg_mul(d->ng, x[k], share_of(d, k, dt));
    out = k == 0 ? term : fg_add(d->ng, out, term);
  }
  fg_graph_set_scope(d->ng, NULL);
  if (name) out = fg_set_name(d->ng, out, name);
  return out;
}

static int fail(fg_status *st, fg_code code, const char *fmt, const char *a, const char *b) {
  fg_status_set(st, code, fmt, a, b);
  return -1;
}

static int is_batch(const mb *d, const fg_node *nd) {
  if (nd->op != FG_OP_PLACEHOLDER) return 0;
  for (int b = 0; b < d->n_batch; b++)
    if (strcmp(d->batch[b], nd->name) == 0) return 1;
  return 0;
}

/* Marks, in one forward sweep (node ids are topological), then one walk
 * back from every update's gradient input to the outputs of fg_gradients
 * (nodes flagged FG_NODE_MADE_BY_GRADIENTS), marking the nodes between ON_PATH: as
 * PyTorch's clip_grad_norm_ after accumulating micro-batches, they compute
 * once, on the full batch's gradients. */
static int mark_nodes(mb *d, fg_status *st) {
  const fg_graph *g = d->g;
  int *stack = malloc(((size_t)g->n_nodes + 1) * sizeof *stack);
  if (!stack) return fail(st, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory%s%s", "", "");
  int n_updates = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const fg_node *nd = &g->nodes[i];
    if (is_batch(d, nd)) d->mark[i] |= DEP;
    if (fg_update_grad_input(nd->op) >= 0) {
      d->mark[i] |= SINGLE;
      n_updates++;
    }
    for (int k = 0; k < nd->n_inputs; k++)
      d->mark[i] |= d->mark[nd->inputs[k].node] & (DEP | SINGLE);
  }
  if (n_updates == 0) {
    free(stack);
    return fail(st, FG_INVALID_ARGUMENT,
                "fg_micro_batch: the graph has no optimizer update (apply_*)%s%s; build it with "
                "fg_minimize first",
                "", "");
  }
  for (int u = 0; u < g->n_nodes; u++) {
    int gi = fg_update_grad_input(g->nodes[u].op);
    if (gi < 0 || gi >= g->nodes[u].n_inputs) continue;
    int top = 0, first = g->nodes[u].inputs[gi].node;
    if (!(d->mark[first] & QUEUED)) {
      d->mark[first] |= QUEUED;
      stack[top++] = first;
    }
    while (top > 0) {
      int i = stack[--top];
      const fg_node *nd = &g->nodes[i];
      if (nd->flags & FG_NODE_MADE_BY_GRADIENTS) {
        d->mark[i] |= GRAD_SRC;
        continue;
      }
      /* Not from fg_gradients and not fed by the batch (a constant
       * gradient, a variable's own term): one copy serves every
       * micro-batch as it is. */
      if (!(d->mark[i] & DEP)) continue;
      if (is_batch(d, nd)) {
        free(stack);
        return fail(st, FG_UNIMPLEMENTED,
                    "fg_micro_batch: the gradient of update '%s' depends on batch input '%s' "
                    "outside fg_gradients: it cannot be combined over micro-batches",
                    g->nodes[u].name, nd->name);
      }
      d->mark[i] |= ON_PATH;
      for (int k = 0; k < nd->n_inputs; k++) {
        int in = nd->inputs[k].node;
        if (d->mark[in] & QUEUED) continue;
        d->mark[in] |= QUEUED;
        stack[top++] = in;
      }
    }
  }
  free(stack);
  /* What reads a node that runs once runs once too (fg_minimize's group of
   * the clipped gradients, say): it cannot be copied per micro-batch ahead
   * of what it reads. So does a group of gradients (the "every gradient
   * before any update" of graphs fg_minimize made before its updates
   * waited for their variables' readers alone): once, over the combined
   * gradients, it orders the same (each sum needs every micro-batch's
   * term). A copy per micro-batch would read each micro-batch's gradients
   * unordered with their `mul` by the row share, which then could not take
   * the gradient's bytes in place. fg_minimize's wait for the readers of a
   * variable (forward nodes) is copied per micro-batch, and the update
   * waits for every copy (single_input). */
  for (int i = 0; i < g->n_nodes; i++) {
    const fg_node *nd = &g->nodes[i];
    int grads_only = nd->op == FG_OP_GROUP && nd->n_inputs > 0 && (d->mark[i] & DEP);
    for (int k = 0; k < nd->n_inputs && grads_only; k++)
      grads_only = (d->mark[nd->inputs[k].node] & (GRAD_SRC | SINGLE | ON_PATH)) != 0;
    if (grads_only) d->mark[i] |= SINGLE;
    for (int k = 0; k < nd->n_inputs && !(d->mark[i] & (SINGLE | ON_PATH)); k++)
      if (d->mark[nd->inputs[k].node] & (SINGLE | ON_PATH)) d->mark[i] |= SINGLE;
  }
  return 0;
}

/* Adds micro-batch k's term to every gradient a single-copy node reads,
 * right after k's copies: sum_k g_k * share_k (a summed loss: sum_k g_k),
 * in k order as combine() does, so the bits are the same, and so that k's
 * gradients are folded in (and their buffers free) before k + W starts
 * where the micro-batches in flight are bounded. Flagged
 * FG_NODE_MADE_BY_GRADIENTS (and named under "gradients/") so that
 * fg_data_parallel, applied after this rewrite (hybrid runs), all-reduces
 * the combined gradient once per step rather than every micro-batch's. */
static fg_output after_gate(mb *d, fg_output x, int gate, const char *name);

static void fold_gradients(mb *d, int k) {
  const fg_graph *g = d->g;
  int first = d->ng->n_nodes;
  for (int i = 0; i < g->n_nodes && !fg_graph_failed(d->ng); i++) {
    int n_out = g->nodes[i].n_outputs > 0 ? g->nodes[i].n_outputs : 1;
    for (int idx = 0; idx < n_out; idx++) {
      int slot = d->comb_off[i] + idx;
      if (!d->comb_used[slot]) continue;
      fg_output x = {*mapped(d, k, i), idx};
      const fg_tinfo *ti = fg_graph_tinfo(g, (fg_output){i, idx});
      char scope[300];
      snprintf(scope, sizeof scope, "gradients/micro_batch/%s/", g->nodes[i].name);
      fg_graph_set_scope(d->ng, scope);
      fg_output term = d->loss_sum ? x : fg_mul(d->ng, x, share_of(d, k, ti ? ti->dtype : FG_F32));
      fg_output prev = d->comb[slot];
      /* Micro-batch k - 1's gate reads the sum so far; the next add must
       * wait for it, or it could not take the sum's bytes in place. */
      if (k > 0 && d->window && d->dev[i] >= 0)
        prev = after_gate(d, prev, d->gate[(size_t)(k - 1) * d->n_dev + d->dev[i]], NULL);
      d->comb[slot] = k == 0 ? term : fg_add(d->ng, prev, term);
      fg_graph_set_scope(d->ng, NULL);
    }
  }
  /* The combined gradients are gradients as fg_gradients' own are. */
  for (int i = first; i < d->ng->n_nodes; i++)
    d->ng->nodes[i].flags |= FG_NODE_MADE_BY_GRADIENTS;
}

/* The micro-batches' gradient output `src` combined (fold_gradients made
 * it). */
static fg_output combined(mb *d, fg_output src) {
  return d->comb[d->comb_off[src.node] + src.index];
}

/* Input k of single-copy node i in the new graph. A per-micro-batch input
 * is either a gradient to combine, or a control input (fg_minimize's wait
 * for the readers of the update's variable), which then waits for every
 * micro-batch's copy. */
static fg_output single_input(mb *d, int i, int k) {
  const fg_node *nd = &d->g->nodes[i];
  fg_output src = nd->inputs[k];
  if (d->mark[src.node] & GRAD_SRC && per_batch(d, src.node)) return combined(d, src);
  if (!per_batch(d, src.node)) return (fg_output){*mapped(d, 0, src.node), src.index};
  int control =
      nd->op == FG_OP_GROUP || (fg_op_table[nd->op].mutable_inputs && fg_dist_control_input(nd, k));
  if (!control) {
    fg_graph_fail(d->ng, FG_UNIMPLEMENTED,
                  "fg_micro_batch: '%s' runs once per step but reads '%s', which each "
                  "micro-batch computes for itself",
                  nd->name, d->g->nodes[src.node].name);
    return FG_NO_OUTPUT;
  }
  fg_output *w = malloc((size_t)d->m * sizeof *w);
  if (!w) {
    fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory");
    return FG_NO_OUTPUT;
  }
  for (int q = 0; q < d->m; q++)
    w[q] = (fg_output){*mapped(d, q, src.node), src.index};
  char name[300];
  snprintf(name, sizeof name, "micro_batch/%s", d->g->nodes[src.node].name);
  int have = fg_graph_find(d->ng, name);
  fg_output all = have >= 0 ? (fg_output){have, 0} : fg_op(d->ng, "group", name, w, d->m, NULL);
  free(w);
  return all;
}

/* A copy of node i with inputs `in`, named `name`, on i's device. */
static fg_output copy_node(mb *d, int i, const fg_output *in, int n_in, const char *name, int k) {
  const fg_node *nd = &d->g->nodes[i];
  /* Each micro-batch's dropout draws its own mask (graph/init.h). */
  fg_attrs *own = NULL;
  if (k >= 0 && d->m > 1 && fg_replica_attrs(nd, k, d->m, &own) < 0)
    fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory");
  fg_output o = fg_op(d->ng, fg_op_table[nd->op].name, name, in, n_in, own ? own : &nd->attrs);
  fg_attrs_free(own);
  if (o.node < 0) return o;
  d->ng->nodes[o.node].flags |= nd->flags;
  if (nd->device) fg_set_device(d->ng, o, nd->device);
  /* The colocation attribute names a node of `g`; in micro-batch k it
   * must name that node's copy in k when the node is copied per batch. */
  int f = fg_node_colocate(d->g, nd);
  if (k >= 0 && f >= 0 && per_batch(d, f)) {
    char buf[600];
    if (fg_attrs_set_string(&d->ng->nodes[o.node].attrs, FG_COLOCATE_ATTR,
                            copy_name(k, d->g->nodes[f].name, buf, sizeof buf)) != 0)
      fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory");
  }
  return o;
}

/* x once `gate` ran (x itself when gate is -1): an "after" node, a view of
 * x, colocated with the gate so that the order holds inside the device's
 * plan. `name` NULL: named in the current scope. */
static fg_output after_gate(mb *d, fg_output x, int gate, const char *name) {
  if (gate < 0) return x;
  fg_output in[2] = {x, {gate, 0}};
  fg_output o = fg_op(d->ng, "after", name, in, 2, NULL);
  if (o.node >= 0 && fg_attrs_set_string(&d->ng->nodes[o.node].attrs, FG_COLOCATE_ATTR,
                                         d->ng->nodes[gate].name) != 0)
    fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory");
  return o;
}

/* Micro-batch k's input `x` of node i, made to wait for micro-batch
 * k - W's gate on i's device when i is an entry there (a copy no other copy
 * on that device feeds: what starts k's work on the device). Everything k
 * computes on the device then descends from the gate, so the memory plan,
 * which reuses a buffer only where the order is certain, can give k the
 * buffers k - W is done with. The wait is an "after" node (a view of x)
 * colocated with the gate, so the order holds inside the device's plan. */
static fg_output gated(mb *d, int k, int i, fg_output x) {
  if (!d->window || k < d->window || !d->entry[i] || d->dev[i] < 0) return x;
  char name[600];
  snprintf(name, sizeof name, "micro_batch_%d/%s/after", k, d->g->nodes[i].name);
  return after_gate(d, x, d->gate[(size_t)(k - d->window) * d->n_dev + d->dev[i]], name);
}

/* Micro-batch k's gate on each device, once its copies and its gradient
 * terms exist: a group of its sinks there (the copies no copy on the
 * device reads) and of the gradient sums it added to there. Only where a
 * micro-batch k + W will wait for it. */
static void make_gates(mb *d, int k) {
  if (!d->window || k + d->window >= d->m) return;
  const fg_graph *g = d->g;
  fg_output *in = malloc(((size_t)g->n_nodes * 2 + 1) * sizeof *in);
  if (!in) {
    fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory");
    return;
  }
  for (int dev = 0; dev < d->n_dev && !fg_graph_failed(d->ng); dev++) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) {
      if (d->dev[i] != dev) continue;
      int n_out = g->nodes[i].n_outputs > 0 ? g->nodes[i].n_outputs : 1, folded = 0;
      for (int idx = 0; idx < n_out; idx++)
        if (d->comb_used[d->comb_off[i] + idx]) {
          in[n++] = d->comb[d->comb_off[i] + idx];
          folded = 1;
        }
      /* A folded gradient is reached through its sum; the gate reading it
       * too would keep it alive past its term, which then could not take
       * its bytes in place (16 MB more per gradient per micro-batch on the
       * pipeline bench). */
      if (d->sink[i] && !folded) in[n++] = (fg_output){*mapped(d, k, i), 0};
    }
    if (n == 0) continue;
    char name[64];
    snprintf(name, sizeof name, "micro_batch_%d/pipeline_gate_%d", k, dev);
    d->gate[(size_t)k * d->n_dev + dev] = fg_op(d->ng, "group", name, in, n, NULL).node;
  }
  free(in);
}

/* The passes of the emission (emit_pass). */
enum { PASS_SHARED, PASS_MICRO, PASS_FULL, PASS_ONCE };

/* Emits node i's part of `pass`; k is the micro-batch of PASS_MICRO.
 *   PASS_SHARED: what no batch input reaches (variables, constants,
 *                placeholders): one copy, its own name;
 *   PASS_MICRO:  micro-batch k's copy of what the batch reaches (its shard
 *                of a batch input);
 *   PASS_FULL:   the same on the full batch, under its own name;
 *   PASS_ONCE:   the updates, clipping and what follows: one copy, reading
 *                the combined gradients. */
static void emit(mb *d, int i, int pass, int k) {
  const fg_node *nd = &d->g->nodes[i];
  int batch = is_batch(d, nd), per = per_batch(d, i) && !batch;
  int mine = pass == PASS_SHARED ? !(d->mark[i] & DEP) || batch
             : pass == PASS_ONCE ? (d->mark[i] & DEP) && !per && !batch
                                 : per || (batch && pass == PASS_MICRO);
  if (!mine) return;
  if (batch && pass == PASS_MICRO) {
    char name[300];
    fg_attrs *a = fg_attrs_new();
    fg_attrs_set_int(a, "index", k);
    fg_attrs_set_int(a, "count", d->m);
    snprintf(name, sizeof name, "micro_batch_%d/%s/shard", k, nd->name);
    fg_output ph = gated(d, k, i, (fg_output){d->orig[i], 0});
    fg_output o = fg_op(d->ng, "shard", name, &ph, 1, a);
    fg_attrs_free(a);
    if (nd->device && o.node >= 0) fg_set_device(d->ng, o, nd->device);
    *mapped(d, k, i) = o.node;
    return;
  }
  fg_output stack_in[8],
      *in = nd->n_inputs <= 8 ? stack_in : malloc((size_t)nd->n_inputs * sizeof *in);
  if (!in) {
    fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory");
    return;
  }
  if (pass == PASS_MICRO) {
    for (int q = 0; q < nd->n_inputs; q++)
      in[q] = (fg_output){*mapped(d, k, nd->inputs[q].node), nd->inputs[q].index};
    if (nd->n_inputs > 0) in[0] = gated(d, k, i, in[0]);
    char buf[600];
    *mapped(d, k, i) =
        copy_node(d, i, in, nd->n_inputs, copy_name(k, nd->name, buf, sizeof buf), k).node;
  } else if (pass == PASS_FULL) {
    /* The node as it was, on the full batch, under its own name: what the
     * training step does not run (the executor prunes it), but what
     * `--eval`, inference and graph outputs fetch by name. The loss's name
     * goes to the combined loss. */
    for (int q = 0; q < nd->n_inputs; q++)
      in[q] = (fg_output){d->orig[nd->inputs[q].node], nd->inputs[q].index};
    char full[600];
    if (i == d->loss_node) snprintf(full, sizeof full, "%s/full_batch", nd->name);
    d->orig[i] = copy_node(d, i, in, nd->n_inputs, i == d->loss_node ? full : nd->name, -1).node;
  } else {
    for (int q = 0; q < nd->n_inputs; q++)
      in[q] = single_input(d, i, q);
    int o = copy_node(d, i, in, nd->n_inputs, nd->name, -1).node;
    for (int q = 0; q < d->m; q++)
      *mapped(d, q, i) = o;
    d->orig[i] = o;
    if (batch && i == d->first_batch) d->full = (fg_output){o, 0};
  }
  if (in != stack_in) free(in);
}

/* Node ids are topological, and each pass reads only what earlier passes
 * (or earlier ids of its own) made. Micro-batch 0's nodes all come before
 * micro-batch 1's: the executor runs the earliest ready step of the plan
 * first (executor/dist/runner.c), so a stage finishes micro-batch 0 and passes it
 * on before it starts micro-batch 1, and takes up 0's backward pass as
 * soon as it arrives (GPipe's pipeline, in the 1F1B order of PipeDream's
 * flush schedule). */
static void emit_all(mb *d) {
  const int n = d->g->n_nodes;
  for (int i = 0; i < n && !fg_graph_failed(d->ng); i++)
    emit(d, i, PASS_SHARED, 0);
  for (int k = 0; k < d->m; k++) {
    for (int i = 0; i < n && !fg_graph_failed(d->ng); i++)
      emit(d, i, PASS_MICRO, k);
    fold_gradients(d, k);
    make_gates(d, k);
  }
  for (int i = 0; i < n && !fg_graph_failed(d->ng); i++)
    emit(d, i, PASS_FULL, 0);
  for (int i = 0; i < n && !fg_graph_failed(d->ng); i++)
    emit(d, i, PASS_ONCE, 0);
}

/* Which gradients single-copy nodes read (fold_gradients combines those):
 * the inputs single_input combines. */
static void mark_comb_used(mb *d) {
  const fg_graph *g = d->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const fg_node *nd = &g->nodes[i];
    if (!(d->mark[i] & DEP) || per_batch(d, i) || is_batch(d, nd)) continue;
    for (int q = 0; q < nd->n_inputs; q++) {
      fg_output src = nd->inputs[q];
      if (d->mark[src.node] & GRAD_SRC && per_batch(d, src.node))
        d->comb_used[d->comb_off[src.node] + src.index] = 1;
    }
  }
}

/* One emission of the rewrite into a new d->ng, from a clean map. */
static int emit_graph(mb *d, fg_output loss, const char *loss_name, fg_status *st) {
  const fg_graph *g = d->g;
  size_t n = (size_t)g->n_nodes;
  for (size_t j = 0; j < n * (size_t)d->m; j++)
    d->map[j] = -1;
  for (size_t j = 0; j < n; j++)
    d->orig[j] = -1;
  for (int j = 0; j < d->comb_off[n]; j++)
    d->comb[j] = FG_NO_OUTPUT;
  for (int k = 0; k < d->m; k++)
    d->rows[k] = FG_NO_OUTPUT;
  d->full = FG_NO_OUTPUT;
  d->ng = fg_graph_new();
  if (!d->ng) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory");
    return -1;
  }
  emit_all(d);
  /* The full batch's loss under the loss's own name (the copies carry a
   * micro_batch_K/ prefix), so fetching it by name still works. */
  if (!fg_graph_failed(d->ng) && per_batch(d, loss.node)) {
    fg_output *x = malloc((size_t)d->m * sizeof *x);
    if (!x) {
      fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory");
    } else {
      for (int k = 0; k < d->m; k++)
        x[k] = (fg_output){*mapped(d, k, loss.node), loss.index};
      const fg_tinfo *lt = fg_graph_tinfo(g, loss);
      combine(d, x, lt ? lt->dtype : FG_F32, "micro_batch/loss/", loss_name);
      free(x);
    }
  }
  for (int i = 0; i < g->n_outputs && !fg_graph_failed(d->ng); i++) {
    fg_output o = g->outputs[i];
    if (o.node == loss.node) {
      int id = fg_graph_find(d->ng, loss_name);
      if (id >= 0) fg_graph_add_output(d->ng, (fg_output){id, 0});
      continue;
    }
    fg_graph_add_output(d->ng, (fg_output){d->orig[o.node], o.index});
  }
  fg_rewrite_metadata(d->ng, g, "micro_batches", d->m);
  return fg_graph_status(d->ng, st) == FG_OK ? 0 : -1;
}

/* After the first emission: where its copies were placed decides whether
 * to bound the micro-batches in flight. Without a bound the memory plan,
 * which cannot know the order the runner will choose, keeps every
 * micro-batch's activations and weight gradients at once, so the arena
 * grows with M (the digits MLP over 2 devices, 256 rows: cpu:1 held 897 KB
 * at M = 4, 1183 KB at 8, 1755 KB at 16). With S devices holding copies
 * (stages), micro-batch k + W starts on a device once k is done there,
 * its gradients folded in. W = S is PipeDream's 1F1B bound and takes the
 * least memory, but the 2-rank pipeline bench ran about a tenth slower
 * with it: the runner is greedy, not a 1F1B scheduler, and the stages are
 * uneven. W = 2S keeps the arena about flat in M (where all in flight
 * grows with M) and ran about 6% slower than no bound. On one device (S = 1)
 * two micro-batches are in flight. Only nodes the training step needs
 * count (the rest is pruned at run time and must stay so). Returns 1 when
 * a second emission with gates is due (M > W). */
static int plan_window(mb *d, const char *target_name) {
  const fg_graph *g = d->g;
  int n = g->n_nodes, target = fg_graph_find(g, target_name), rc = 0;
  fg_status *ignored = fg_status_new();
  /* A placement that fails here fails the session too, with its message. */
  fg_partition *p = ignored ? fg_partition_new(d->ng, NULL, ignored) : NULL;
  char *needed = calloc((size_t)n + 1, 1);
  int *stack = malloc(((size_t)n + 1) * sizeof *stack);
  if (!p || !needed || !stack || target < 0) goto done;
  d->n_dev = fg_partition_num_devices(p);
  d->dev = malloc(((size_t)n + 1) * sizeof *d->dev);
  d->entry = calloc((size_t)n + 1, 1);
  d->sink = calloc((size_t)n + 1, 1);
  d->gate = malloc(((size_t)d->m * (size_t)d->n_dev + 1) * sizeof *d->gate);
  if (!d->dev || !d->entry || !d->sink || !d->gate) goto done;
  int top = 0;
  needed[target] = 1;
  stack[top++] = target;
  while (top > 0) {
    const fg_node *nd = &g->nodes[stack[--top]];
    for (int q = 0; q < nd->n_inputs; q++)
      if (!needed[nd->inputs[q].node]) {
        needed[nd->inputs[q].node] = 1;
        stack[top++] = nd->inputs[q].node;
      }
  }
  /* A device of the first emission's placement per copied node (a batch
   * input's copy is its shard); used[] marks the stages. */
  char *used = calloc((size_t)d->n_dev + 1, 1);
  if (!used) goto done;
  int stages = 0;
  for (int i = 0; i < n; i++) {
    d->dev[i] = needed[i] && per_batch(d, i) ? fg_partition_node_device(p, *mapped(d, 0, i)) : -1;
    if (d->dev[i] >= 0 && !used[d->dev[i]]++) stages++;
    /* A batch input's copy is its shard, which reads the fed placeholder:
     * waiting there would copy the whole batch (a feed is no arena buffer
     * to view), so its readers wait instead. */
    d->entry[i] = d->dev[i] >= 0 && !is_batch(d, &g->nodes[i]);
    d->sink[i] = d->dev[i] >= 0;
  }
  free(used);
  for (int i = 0; i < n; i++) {
    const fg_node *nd = &g->nodes[i];
    if (d->dev[i] < 0) continue;
    for (int q = 0; q < nd->n_inputs; q++) {
      int in = nd->inputs[q].node;
      if (d->dev[in] != d->dev[i]) continue;
      if (!is_batch(d, &g->nodes[in])) d->entry[i] = 0;
      d->sink[in] = 0;
    }
  }
  for (size_t j = 0; j < (size_t)d->m * (size_t)d->n_dev; j++)
    d->gate[j] = -1;
  d->window = d->in_flight > 0 ? d->in_flight : 2 * stages;
  rc = stages > 0 && d->m > d->window;
  if (!rc) d->window = 0;
done:
  fg_partition_free(p);
  fg_status_free(ignored);
  free(needed);
  free(stack);
  return rc;
}

void fg_micro_batch_options_init(fg_micro_batch_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->loss_reduction = FG_DP_LOSS_MEAN;
}

fg_graph *fg_micro_batch(const fg_graph *g, int micro_batches, const char *const *batch_inputs,
                         int n_batch_inputs, int loss_reduction, fg_status *st) {
  fg_micro_batch_options o;
  fg_micro_batch_options_init(&o);
  o.loss_reduction = loss_reduction;
  return fg_micro_batch_ex(g, micro_batches, batch_inputs, n_batch_inputs, &o, st);
}

fg_graph *fg_micro_batch_ex(const fg_graph *g, int micro_batches, const char *const *batch_inputs,
                            int n_batch_inputs, const fg_micro_batch_options *opts, fg_status *st) {
  fg_micro_batch_options o;
  fg_micro_batch_options_init(&o);
  if (opts) o = *opts;
  const int loss_reduction = o.loss_reduction;
  /* Each bad argument named with its value. */
  const char *who = "fg_micro_batch";
  int bad = 1;
  if (!g)
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: graph is NULL", who);
  else if (micro_batches < 1 || micro_batches > FG_MAX_MICRO_BATCHES)
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: micro_batches %d must be 1 to %d", who,
                  micro_batches, FG_MAX_MICRO_BATCHES);
  else if (n_batch_inputs < 1)
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s: n_batch_inputs %d: it needs at least one batch input to split", who,
                  n_batch_inputs);
  else if (!batch_inputs)
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s: batch_inputs is NULL but n_batch_inputs is %d", who,
                  n_batch_inputs);
  else if (loss_reduction != FG_DP_LOSS_MEAN && loss_reduction != FG_DP_LOSS_SUM)
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s: loss_reduction %d must be FG_DP_LOSS_MEAN (0) or FG_DP_LOSS_SUM (1)", who,
                  loss_reduction);
  else
    bad = 0;
  if (bad) return NULL;
  if (o.max_in_flight < FG_MICRO_BATCH_UNBOUNDED || o.max_in_flight > FG_MAX_MICRO_BATCHES) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_micro_batch: max_in_flight %d must be 0 (2 per stage), 1 to %d, or "
                  "FG_MICRO_BATCH_UNBOUNDED (-1)",
                  o.max_in_flight, FG_MAX_MICRO_BATCHES);
    return NULL;
  }
  if (fg_graph_status(g, st) != FG_OK) return NULL;
  mb d = {.g = g,
          .m = micro_batches,
          .in_flight = o.max_in_flight,
          .loss_sum = loss_reduction == FG_DP_LOSS_SUM,
          .batch = batch_inputs,
          .n_batch = n_batch_inputs};
  d.first_batch = fg_rewrite_batch_inputs(g, "fg_micro_batch", batch_inputs, n_batch_inputs, st);
  if (d.first_batch < 0) return NULL; /* n_batch_inputs >= 1: never -2 */
  fg_output loss;
  int target;
  if (fg_rewrite_train_nodes(g, who, "micro_batches", &loss, &target, st)) return NULL;
  if (loss.index != 0) {
    fail(st, FG_UNIMPLEMENTED,
         "fg_micro_batch: loss '%s' is not output 0 of node '%s'; name a single-output loss",
         fg_graph_metadata(g, "loss"), g->nodes[loss.node].name);
    return NULL;
  }
  const char *loss_name = fg_graph_metadata(g, "loss"), *target_name = g->nodes[target].name;
  fg_graph *result = NULL;
  size_t n = (size_t)g->n_nodes;
  d.mark = calloc(n + 1, 1);
  d.map = malloc(n * (size_t)micro_batches * sizeof *d.map + 1);
  d.orig = malloc((n + 1) * sizeof *d.orig);
  d.loss_node = loss.node;
  d.comb_off = malloc((n + 1) * sizeof *d.comb_off);
  d.rows = malloc((size_t)micro_batches * sizeof *d.rows);
  if (!d.mark || !d.map || !d.orig || !d.comb_off || !d.rows) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory");
    goto out;
  }
  int n_out = 0;
  for (size_t i = 0; i < n; i++) {
    d.comb_off[i] = n_out;
    n_out += g->nodes[i].n_outputs > 0 ? g->nodes[i].n_outputs : 1;
  }
  d.comb = malloc(((size_t)n_out + 1) * sizeof *d.comb);
  d.comb_used = calloc((size_t)n_out + 1, 1);
  d.comb_off[n] = n_out;
  if (!d.comb || !d.comb_used) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_micro_batch: out of memory");
    goto out;
  }
  if (mark_nodes(&d, st) != 0) goto out;
  if (!(d.mark[loss.node] & DEP)) {
    fail(st, FG_INVALID_ARGUMENT,
         "fg_micro_batch: loss '%s' does not depend on any batch input (first '%s'): there is "
         "nothing to cut into micro-batches",
         loss_name, batch_inputs[0]);
    goto out;
  }
  mark_comb_used(&d);
  if (emit_graph(&d, loss, loss_name, st) != 0) goto out;
  /* Second emission, micro-batches bounded in flight, when the first's
   * placement says there is something to bound. */
  if (d.in_flight != FG_MICRO_BATCH_UNBOUNDED && plan_window(&d, target_name)) {
    fg_graph_free(d.ng);
    d.ng = NULL;
    if (emit_graph(&d, loss, loss_name, st) != 0) goto out;
  }
  result = d.ng;
  d.ng = NULL;
  fg_status_clear(st);
out:
  fg_graph_free(d.ng);
  free(d.mark);
  free(d.map);
  free(d.orig);
  free(d.comb_off);
  free(d.comb);
  free(d.rows);
  free(d.comb_used);
  free(d.dev);
  free(d.entry);
  free(d.sink);
  free(d.gate);
  return result;
}
