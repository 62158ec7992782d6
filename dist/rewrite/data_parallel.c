/* fg_data_parallel: replicate a training graph over N devices (or leave it
 * whole for one process per replica) and insert bucketed all_reduce nodes
 * on the gradients before the optimizer updates. See flowgraph/dist.h. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/rewrite/dp_internal.h"
#include "flowgraph/dist.h"
#include "graph/builders_internal.h"
#include "graph/init.h"
#include "graph/op_table.h"

void fg_data_parallel_options_init(fg_data_parallel_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->bucket_bytes = FG_DEFAULT_BUCKET_BYTES;
  opts->device_type = "cpu";
}

static void place(dp *d, fg_output o, int r) {
  if (o.node >= 0 && d->n <= 1 && d->cur_dev) fg_set_device(d->ng, o, d->cur_dev);
  if (d->n <= 1 || o.node < 0) return;
  char dev[48];
  snprintf(dev, sizeof dev, "%s:%d", d->o->device_type ? d->o->device_type : "cpu",
           d->o->first_device + r);
  fg_set_device(d->ng, o, dev);
}

static const char *replica_name(const dp *d, int r, const char *name, char *buf, size_t size) {
  if (d->n <= 1) return name;
  snprintf(buf, size, "replica_%d/%s", r, name);
  return buf;
}

/* A copied node's FG_COLOCATE_ATTR names the original node; in replica r
 * it must name that node's copy in the same replica (which has the same
 * placement anyway: every copy is placed explicitly, so this keeps the
 * saved graph telling the truth rather than changing where anything runs). */
static void rename_colocate(dp *d, int r, int node) {
  /* The copy still names the original; look the name up in `g`. */
  int f = fg_node_colocate(d->g, &d->ng->nodes[node]);
  if (f < 0 || (r == 0 && d->g->nodes[f].op == FG_OP_VARIABLE)) return;
  char buf[600];
  const char *nm = replica_name(d, r, d->g->nodes[f].name, buf, sizeof buf);
  if (fg_attrs_set_string(&d->ng->nodes[node].attrs, FG_COLOCATE_ATTR, nm) != 0)
    fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory");
}

/* Sets the automatic-name scope for replica r's bucket nodes. */
static void bucket_scope(dp *d, int r, int k) {
  char scope[96];
  if (d->n <= 1)
    snprintf(scope, sizeof scope, "data_parallel/bucket_%d/", k);
  else
    snprintf(scope, sizeof scope, "replica_%d/data_parallel/bucket_%d/", r, k);
  fg_graph_set_scope(d->ng, scope);
}

/* One all_reduce of `x` for replica r, after the replica's previous one
 * (so all ranks issue collectives in one order). */
static fg_output reduce_one(dp *d, int r, fg_output x, const fg_attrs *a) {
  fg_output in[4] = {x};
  int n_in = 1;
  if (d->stats[r].node >= 0) {
    in[n_in++] = d->rows[r];
    in[n_in++] = d->stats[r];
  }
  /* One chain per replica, or per rank of a cross-process graph: the
   * ranks of one stage issue their collectives in the same order, and
   * different stages use different communicators. */
  int c = d->part ? d->chain : r;
  if (d->prev[c].node >= 0) in[n_in++] = d->prev[c];
  char name[96];
  if (d->n <= 1)
    snprintf(name, sizeof name, "data_parallel/all_reduce_%d", d->n_reduces);
  else
    snprintf(name, sizeof name, "replica_%d/data_parallel/all_reduce_%d", r, d->n_reduces);
  fg_output ar = fg_op(d->ng, "all_reduce", name, in, n_in, a);
  place(d, ar, r);
  d->prev[c] = ar;
  return ar;
}

/* Bucket k for every replica. Its small gradients are flattened,
 * concatenated, all-reduced at once and split back; a gradient of
 * FG_DP_FUSE_MAX_BYTES or more gets an all_reduce of its own, in place:
 * at that size a collective's fixed cost (tens of microseconds) is below
 * what copying it into the bucket and back out would cost, so fusing it
 * would only add two copies to the backward pass (PyTorch avoids them
 * with gradient_as_bucket_view). Either way the bucket's collectives start
 * once all its gradients exist, in gradient order. */
static void emit_bucket(dp *d, int k) {
  int lo = k ? d->bucket_end[k - 1] : 0, hi = d->bucket_end[k];
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "mean", d->o->loss_reduction == FG_DP_LOSS_MEAN);
  if (d->stats[0].node >= 0) fg_attrs_set_int(a, "weighted", 1);
  int n_small = 0, n_reduces = d->n_reduces;
  for (int j = lo; j < hi; j++)
    n_small += d->grads[j].bytes < FG_DP_FUSE_MAX_BYTES && !(d->fused && d->fused[j] >= 0);
  if (d->one_dev) {
    d->cur_dev = d->one_dev;
  } else if (d->part) {
    /* A bucket holds one rank's gradients (collect_grads); it is reduced
     * on the device of that rank's first gradient, in that rank's chain. */
    int rank = d->grads[lo].rank, first = lo;
    for (int j = 0; j < lo; j++)
      if (d->grads[j].rank == rank) {
        first = j;
        break;
      }
    d->chain = rank;
    d->cur_dev = fg_device_str(fg_partition_device(d->part, d->grads[first].dev), d->cur_dev_buf,
                               sizeof d->cur_dev_buf);
  }
  for (int r = 0; r < d->n; r++) {
    bucket_scope(d, r, k);
    d->n_reduces = n_reduces;
    fg_output *flat = malloc((size_t)(hi - lo) * sizeof *flat);
    if (!flat) {
      fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory");
      break;
    }
    int n_flat = 0;
    for (int j = lo; j < hi; j++) {
      fg_output src = d->grads[j].src;
      fg_output gr = {*mapped(d, r, src.node), src.index};
      if (d->fused && d->fused[j] >= 0) {
        /* Its update reduces it (emit_fused): it reads the replica's own. */
        d->red[(size_t)r * d->n_grads + j] = gr;
        continue;
      }
      if (d->grads[j].bytes >= FG_DP_FUSE_MAX_BYTES || n_small == 1) {
        d->red[(size_t)r * d->n_grads + j] = reduce_one(d, r, gr, a);
        d->n_reduces++;
        continue;
      }
      int64_t m1 = -1;
      flat[n_flat] = fg_reshape(d->ng, gr, 1, &m1);
      place(d, flat[n_flat++], r);
    }
    if (n_flat > 0) {
      fg_output cat = fg_concat(d->ng, flat, n_flat, 0);
      place(d, cat, r);
      fg_output ar = reduce_one(d, r, cat, a);
      d->n_reduces++;
      int64_t off = 0;
      for (int j = lo; j < hi; j++) {
        if (d->grads[j].bytes >= FG_DP_FUSE_MAX_BYTES) continue;
        const fg_tinfo *ti = fg_graph_tinfo(d->g, d->grads[j].src);
        int64_t begin = off, size = d->grads[j].elems;
        fg_output sl = fg_slice(d->ng, ar, 1, &begin, &size);
        place(d, sl, r);
        fg_output *out = &d->red[(size_t)r * d->n_grads + j];
        *out = fg_reshape(d->ng, sl, ti->rank, ti->dims);
        place(d, *out, r);
        off += size;
      }
    }
    free(flat);
  }
  d->cur_dev = NULL;
  fg_attrs_free(a);
  fg_graph_set_scope(d->ng, NULL);
}

/* The row counts behind the weighted mean, the first collective of every
 * step (bucket 0 reads it, so every rank issues it first): replica r's rows
 * of batch input `ph` and the all-reduced [sum of rows, sum of squared
 * rows], from which each bucket's all_reduce sees whether the shards are
 * equal (sum^2 == replicas * sum of squares: then it is the plain mean,
 * bit for bit as without weights) or weighs each replica by its rows. */
static void emit_row_stats(dp *d, int ph) {
  const fg_tinfo *ti = fg_graph_tinfo(d->g, (fg_output){ph, 0});
  int64_t row = 1; /* elements per row; -1: unknown before feeding */
  for (int k = 1; ti && k < ti->rank; k++)
    row = row < 0 || ti->dims[k] < 0 ? -1 : row * ti->dims[k];
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "mean", 0);
  /* Across processes the counts are made where the batch input lives
   * (where the original graph placed it), and the stages that reduce
   * gradients elsewhere receive the 24 bytes: a count placed by default
   * would pull the whole batch input to rank 0 instead. */
  if (d->one_dev)
    d->cur_dev = d->one_dev;
  else if (d->part)
    d->cur_dev = fg_device_str(fg_partition_device(d->part, fg_partition_node_device(d->part, ph)),
                               d->cur_dev_buf, sizeof d->cur_dev_buf);
  for (int r = 0; r < d->n; r++) {
    char name[96];
    if (d->n <= 1)
      snprintf(name, sizeof name, "data_parallel/");
    else
      snprintf(name, sizeof name, "replica_%d/data_parallel/", r);
    fg_graph_set_scope(d->ng, name);
    /* Elements, or rows when a row's size is known (smaller numbers keep
     * the sums of squares exact in f64); either is proportional to rows. */
    fg_output c = fg_numel(d->ng, (fg_output){*mapped(d, r, ph), 0}, FG_F64);
    place(d, c, r);
    if (row > 1) {
      c = fg_div(d->ng, c, fg_scalar(d->ng, FG_F64, (double)row));
      place(d, c, r);
    }
    int64_t one = 1;
    fg_output pair[2];
    pair[0] = fg_reshape(d->ng, c, 1, &one);
    place(d, pair[0], r);
    pair[1] = fg_mul(d->ng, pair[0], pair[0]);
    place(d, pair[1], r);
    fg_output cat = fg_concat(d->ng, pair, 2, 0);
    place(d, cat, r);
    if (d->n <= 1)
      snprintf(name, sizeof name, "data_parallel/rows");
    else
      snprintf(name, sizeof name, "replica_%d/data_parallel/rows", r);
    d->stats[r] = fg_op(d->ng, "all_reduce", name, &cat, 1, a);
    place(d, d->stats[r], r);
    d->rows[r] = c;
  }
  d->cur_dev = NULL;
  fg_attrs_free(a);
  fg_graph_set_scope(d->ng, NULL);
}

/* The replicas' losses as one: weighted by rows when there are batch
 * inputs (the full batch's mean loss for uneven shards too), else their
 * mean. Named as `g`'s loss. */
static void emit_loss(dp *d, fg_output loss) {
  const fg_tinfo *lt = fg_graph_tinfo(d->g, loss);
  fg_dtype dt = lt ? lt->dtype : FG_F32;
  int weighted = d->stats[0].node >= 0;
  fg_output sum = FG_NO_OUTPUT, rows = FG_NO_OUTPUT;
  for (int r = 0; r < d->n; r++) {
    fg_output l = {*mapped(d, r, loss.node), loss.index};
    if (weighted) {
      fg_output c = fg_cast(d->ng, d->rows[r], dt);
      l = fg_mul(d->ng, l, c);
      /* Summed here, not read from the rows all_reduce: fetching the
       * loss alone must not run one replica's collective without the
       * others'. */
      rows = r == 0 ? c : fg_add(d->ng, rows, c);
    }
    sum = r == 0 ? l : fg_add(d->ng, sum, l);
  }
  /* A loss summed over rows sums over the replicas too. */
  fg_output mean = d->o->loss_reduction == FG_DP_LOSS_SUM
                       ? sum
                       : fg_div(d->ng, sum, weighted ? rows : fg_scalar(d->ng, dt, d->n));
  fg_set_name(d->ng, mean, d->g->nodes[loss.node].name);
}

/* Emits the next buckets whose gradients all exist. */
static void emit_ready_buckets(dp *d) {
  while (d->emitted < d->n_buckets) {
    int k = d->emitted, lo = k ? d->bucket_end[k - 1] : 0;
    for (int j = lo; j < d->bucket_end[k]; j++)
      if (*mapped(d, 0, d->grads[j].src.node) < 0) return;
    emit_bucket(d, k);
    d->emitted++;
  }
}

/* 1 when input k of update i is a group of all gradients (a control input
 * past the op's data inputs), which narrow_update_wait replaces, so
 * emitting i need not wait for it. fg_minimize made that group until it
 * made each update wait for its variable's readers alone; saved files
 * still hold it. */
static int waits_for_all_grads(const dp *d, int i, int k) {
  const fg_node *nd = &d->g->nodes[i];
  if (!fg_op_table[nd->op].mutable_inputs || k < fg_op_table[nd->op].min_inputs) return 0;
  const fg_node *c = &d->g->nodes[nd->inputs[k].node];
  int all_grads = c->op == FG_OP_GROUP && c->n_inputs > 0;
  for (int q = 0; q < c->n_inputs && all_grads; q++)
    all_grads = (d->mark[c->inputs[q].node] & (IN_GRADIENTS | ON_PATH)) != 0;
  return all_grads;
}

/* Older fg_minimize graphs make every update wait for a group of all
 * gradients, so that no update overwrites a variable a gradient still
 * reads. Here that
 * would hold every update until the last bucket's gradients exist, and the
 * updates of buckets reduced long before would all run on the step's tail
 * (PyTorch's DDP has the same tail; its optimizer runs after backward).
 * The exact condition is narrower: update i of replica r waits for the
 * nodes before it that read its variable. This replaces such a group
 * control input of in[] (the inputs already mapped for replica r) by a
 * group of those readers; returns the new input count. Other control
 * inputs stay. var_conflict has already emitted every such reader. */
static int narrow_update_wait(dp *d, int i, int r, fg_output *in) {
  const fg_graph *g = d->g;
  const fg_node *nd = &g->nodes[i];
  int n_in = nd->n_inputs, var = -1;
  for (int k = 0; k < n_in && var < 0; k++)
    if (fg_op_table[nd->op].mutable_inputs & (1u << k)) var = nd->inputs[k].node;
  for (int k = 0, orig = 0; k < n_in && var >= 0; k++, orig++) {
    if (!waits_for_all_grads(d, i, orig)) continue;
    int n_rd = 0;
    fg_output *rd = malloc((size_t)i * sizeof *rd + 1);
    if (!rd) {
      fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory");
      return n_in;
    }
    /* Only readers the step runs: waiting for another (a full-batch
     * copy) would make the step run it. */
    for (int c = d->vc_off[var]; c < d->vc_off[var + 1] && d->vc[c] < i; c++)
      if (d->in_step[d->vc[c]]) rd[n_rd++] = (fg_output){*mapped(d, r, d->vc[c]), 0};
    if (n_rd > 0) {
      /* Named in the update's scope ("train/apply_sgd_3/group_12"),
       * automatically, so it cannot collide with a name the user took. */
      char scope[640], buf[600];
      snprintf(scope, sizeof scope, "%s/", replica_name(d, r, nd->name, buf, sizeof buf));
      fg_graph_set_scope(d->ng, scope);
      in[k] = fg_op(d->ng, "group", NULL, rd, n_rd, NULL);
      fg_graph_set_scope(d->ng, NULL);
      place(d, in[k], r);
    } else {
      memmove(&in[k], &in[k + 1], (size_t)(n_in - k - 1) * sizeof *in);
      n_in--;
      k--;
    }
    free(rd);
  }
  return n_in;
}

/* 1 when node i must wait for an earlier node that is not emitted yet
 * because both touch one variable and one of them updates it: emitting i
 * first would swap a read and an update, and the executor orders a
 * variable's reads and updates by plan order. */
static int var_conflict(const dp *d, int i, const char *done) {
  const fg_graph *g = d->g;
  const fg_node *nd = &g->nodes[i];
  int upd_i = fg_op_table[nd->op].mutable_inputs != 0;
  for (int k = 0; k < nd->n_inputs; k++) {
    int v = nd->inputs[k].node;
    for (int c = d->vc_off[v]; c < d->vc_off[v + 1] && d->vc[c] < i; c++) {
      int j = d->vc[c];
      if (!done[j] && (upd_i || fg_op_table[g->nodes[j].op].mutable_inputs)) return 1;
    }
  }
  return 0;
}

/* d->vc_off / d->vc: every variable's consumers, ascending (CSR over node
 * ids; other nodes have none), so the checks above cost what a variable's
 * readers number, not the graph's size. -1 on OOM. */
static int index_var_consumers(dp *d) {
  const fg_graph *g = d->g;
  int n = g->n_nodes;
  d->vc_off = calloc((size_t)n + 2, sizeof *d->vc_off);
  if (!d->vc_off) return -1;
  for (int pass = 0; pass < 2; pass++) {
    for (int j = 0; j < n; j++)
      for (int q = 0; q < g->nodes[j].n_inputs; q++) {
        int v = g->nodes[j].inputs[q].node, dup = 0;
        if (g->nodes[v].op != FG_OP_VARIABLE) continue;
        for (int p = 0; p < q && !dup; p++)
          dup = g->nodes[j].inputs[p].node == v;
        if (dup) continue;
        if (pass == 0)
          d->vc_off[v + 2]++;
        else
          d->vc[d->vc_off[v + 1]++] = j;
      }
    if (pass == 0) {
      for (int v = 0; v < n; v++)
        d->vc_off[v + 2] += d->vc_off[v + 1];
      d->vc = malloc(((size_t)d->vc_off[n + 1] + 1) * sizeof *d->vc);
      if (!d->vc) return -1;
    }
  }
  return 0;
}

static int try_emit(dp *d, int i, const char *const *batch, int n_batch);

/* Emits, right after a bucket, what was waiting for it (its updates and
 * their inputs, clipping), ahead of the rest of the backward pass in node
 * order: the executor runs ready steps by plan order, so an update placed
 * after the backward pass would run on the step's tail even though its
 * bucket was reduced long before. The backward pass keeps its order and
 * collectives stay in bucket order; var_conflict keeps every read of a
 * variable on the side of its updates that node order gives it. Returns
 * the number of nodes emitted. */
static int emit_waiting(dp *d, char *done, const char *const *batch, int n_batch) {
  const fg_graph *g = d->g;
  int emitted = 0, progress = 1;
  while (progress && !fg_graph_failed(d->ng)) {
    progress = 0;
    for (int j = 0; j < g->n_nodes && !fg_graph_failed(d->ng); j++) {
      if (done[j] || (d->mark[j] & IN_GRADIENTS) || g->nodes[j].op == FG_OP_ALL_REDUCE ||
          var_conflict(d, j, done) || !try_emit(d, j, batch, n_batch))
        continue;
      done[j] = 1;
      emitted++;
      progress = 1;
      emit_ready_buckets(d);
    }
  }
  return emitted;
}

/* Update nd (apply_sgd) of replica r as the collective that also reduces
 * its gradient: all_reduce_apply_sgd with the bucket's mean and weights,
 * in[1] the replica's own gradient (emit_bucket), in[0 .. n_in) its mapped
 * inputs (var, grad, lr, control inputs); the rows and sums of a weighted
 * mean go in as inputs 3 and 4, and it joins the chain of collectives
 * (reduce_one). An update that takes its gradient's factors
 * (d->product[j]) is sufficient_factor_apply_sgd: a as input 1 and b as
 * input 3, the rows and sums after them. in[] has room for 4 more. */
static fg_output emit_fused(dp *d, int r, int j, const fg_node *nd, const char *name, fg_output *in,
                            int n_in) {
  (void)nd; /* plain apply_sgd has no attributes to carry over */
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "mean", d->o->loss_reduction == FG_DP_LOSS_MEAN);
  const char *op = "all_reduce_apply_sgd";
  int at = 3; /* where the weighted mean's inputs go */
  if (d->product[j] >= 0) {
    /* The gradient a^T b as its factors: a in place of the gradient, b
     * after lr (graph/infer_optim.c). */
    const fg_node *mm = &d->g->nodes[d->product[j]];
    op = "sufficient_factor_apply_sgd";
    memmove(&in[4], &in[3], (size_t)(n_in > 3 ? n_in - 3 : 0) * sizeof *in);
    in[1] = (fg_output){*mapped(d, r, mm->inputs[0].node), mm->inputs[0].index};
    in[3] = (fg_output){*mapped(d, r, mm->inputs[1].node), mm->inputs[1].index};
    n_in++;
    at = 4;
  }
  if (d->stats[0].node >= 0) {
    fg_attrs_set_int(a, "weighted", 1);
    memmove(&in[at + 2], &in[at], (size_t)(n_in > at ? n_in - at : 0) * sizeof *in);
    in[at] = d->rows[r];
    in[at + 1] = d->stats[r];
    n_in += 2;
  }
  if (d->prev[r].node >= 0) in[n_in++] = d->prev[r];
  fg_output o = fg_op(d->ng, op, name, in, n_in, a);
  fg_attrs_free(a);
  d->prev[r] = o;
  return o;
}

/* Copies node i for every replica if its inputs exist; 1 when done. */
static int try_emit(dp *d, int i, const char *const *batch, int n_batch) {
  const fg_graph *g = d->g;
  const fg_node *nd = &g->nodes[i];
  for (int k = 0; k < nd->n_inputs; k++) {
    if (waits_for_all_grads(d, i, k)) continue;
    if (*mapped(d, 0, nd->inputs[k].node) < 0) return 0;
    int j = reduced_input(d, i, k);
    if (j >= 0 && d->red[j].node < 0) return 0;
  }
  if (nd->op == FG_OP_PLACEHOLDER) {
    fg_output ph = fg_op(d->ng, "placeholder", nd->name, NULL, 0, &nd->attrs);
    if (nd->device) fg_set_device(d->ng, ph, nd->device);
    int is_batch = 0;
    for (int b = 0; b < n_batch; b++)
      is_batch |= strcmp(batch[b], nd->name) == 0;
    for (int r = 0; r < d->n; r++) {
      fg_output o = ph;
      if (is_batch && d->n > 1) {
        char name[300];
        fg_attrs *a = fg_attrs_new();
        fg_attrs_set_int(a, "index", r);
        fg_attrs_set_int(a, "count", d->n);
        snprintf(name, sizeof name, "replica_%d/%s/shard", r, nd->name);
        o = fg_op(d->ng, "shard", name, &ph, 1, a);
        fg_attrs_free(a);
        place(d, o, r);
      }
      *mapped(d, r, i) = o.node;
    }
    return 1;
  }
  /* 4 more for a fused update's second factor, rows, sums and previous
   * collective */
  fg_output in_stack[12],
      *in = nd->n_inputs <= 8 ? in_stack : malloc(((size_t)nd->n_inputs + 4) * sizeof *in);
  if (!in) {
    fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory");
    return 1;
  }
  int fuse = -1; /* the gradient this update all-reduces itself */
  for (int j = 0; d->fused && nd->op == FG_OP_APPLY_SGD && j < d->n_grads && fuse < 0; j++)
    if (d->fused[j] == i) fuse = j;
  for (int r = 0; r < d->n; r++) {
    for (int k = 0; k < nd->n_inputs; k++) {
      fg_output src = nd->inputs[k];
      int j = reduced_input(d, i, k);
      in[k] = j >= 0 ? d->red[(size_t)r * d->n_grads + j]
                     : (fg_output){*mapped(d, r, src.node), src.index};
    }
    int n_in = nd->n_inputs;
    if (fg_op_table[nd->op].mutable_inputs) n_in = narrow_update_wait(d, i, r, in);
    char buf[600];
    /* Replica 0's variables keep their names: fg_session_variable, saving
     * and resuming see the model under its own names. */
    const char *name = r == 0 && nd->op == FG_OP_VARIABLE
                           ? nd->name
                           : replica_name(d, r, nd->name, buf, sizeof buf);
    /* Dropout's copies draw masks of their own (graph/init.h). */
    fg_attrs *own = NULL;
    if (d->n > 1 && fg_replica_attrs(nd, r, d->n, &own) < 0)
      fg_graph_fail(d->ng, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory");
    const char *op = fg_dp_op_name(d, nd, &own);
    fg_output o = fuse >= 0 ? emit_fused(d, r, fuse, nd, name, in, n_in)
                            : fg_op(d->ng, op, name, in, n_in, own ? own : &nd->attrs);
    fg_attrs_free(own);
    if (o.node >= 0) d->ng->nodes[o.node].flags |= nd->flags;
    if (d->n > 1 && o.node >= 0) rename_colocate(d, r, o.node);
    if (d->n > 1)
      place(d, o, r);
    else if (nd->device)
      fg_set_device(d->ng, o, nd->device);
    *mapped(d, r, i) = o.node;
    if (o.node < 0) break;
  }
  if (in != in_stack) free(in);
  return 1;
}

/* Emits every node of d->g in node order, except that an update waits for
 * its bucket, then (replicas > 1) the full-batch loss and the target that
 * groups every replica's update. 0, or -1 with st set (FG_INTERNAL when
 * some node could never be emitted). */
static int emit_all(dp *d, char *done, fg_output loss, int target, const char *target_name,
                    fg_status *st) {
  const fg_graph *g = d->g;
  const int n = g->n_nodes;
  /* Node order, except that an update waits for its bucket; whatever
   * waits is retried after every emission, so the new graph stays in
   * topological order, and after every bucket (emit_waiting). */
  int n_done = 0, progress = 1;
  if (d->n_batch > 0 && d->o->loss_reduction == FG_DP_LOSS_MEAN) {
    /* The first batch input and its row counts come first: every bucket
     * reads them. (A summed loss needs no counts: its gradients add.) */
    int ph = fg_graph_find(g, d->batch[0]);
    try_emit(d, ph, d->batch, d->n_batch);
    done[ph] = 1;
    n_done++;
    emit_row_stats(d, ph);
  }
  while (n_done < n && progress && !fg_graph_failed(d->ng)) {
    progress = 0;
    for (int i = 0; i < n && !fg_graph_failed(d->ng); i++) {
      if (done[i] || var_conflict(d, i, done) || !try_emit(d, i, d->batch, d->n_batch)) continue;
      done[i] = 1;
      n_done++;
      progress = 1;
      int before = d->emitted;
      emit_ready_buckets(d);
      if (d->emitted != before) n_done += emit_waiting(d, done, d->batch, d->n_batch);
    }
  }
  if (!fg_graph_failed(d->ng) && n_done < n) {
    fg_status_set(st, FG_INTERNAL, "fg_data_parallel: %d nodes could not be placed in order",
                  n - n_done);
    return -1;
  }
  if (d->n > 1 && !fg_graph_failed(d->ng)) {
    /* The full-batch loss and one target for every replica's update. */
    emit_loss(d, loss);
    fg_output *ts = malloc((size_t)d->n * sizeof *ts);
    if (ts) {
      for (int r = 0; r < d->n; r++)
        ts[r] = (fg_output){*mapped(d, r, target), 0};
      fg_op(d->ng, "group", target_name, ts, d->n, NULL);
      free(ts);
    }
  }
  return 0;
}

fg_graph *fg_data_parallel(const fg_graph *g, int replicas, const char *const *batch_inputs,
                           int n_batch_inputs, const fg_data_parallel_options *opts,
                           fg_status *st) {
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  if (opts) o = *opts;
  if (fg_dp_bad_args(g, replicas, batch_inputs, n_batch_inputs, &o, st)) return NULL;
  if (fg_graph_status(g, st) != FG_OK || fg_dp_bad_graph(g, replicas, &o, st)) return NULL;
  if (fg_rewrite_batch_inputs(g, "fg_data_parallel", batch_inputs, n_batch_inputs, st) == -1)
    return NULL;
  fg_output loss;
  int target;
  if (fg_rewrite_train_nodes(g, "fg_data_parallel", "data_parallel_replicas", &loss, &target, st))
    return NULL;
  const char *target_name = g->nodes[target].name;

  dp d = {.g = g,
          .ng = fg_graph_new(),
          .n = replicas,
          .o = &o,
          .batch = batch_inputs,
          .n_batch = n_batch_inputs};
  int n = g->n_nodes;
  d.n_chains = replicas;
  for (int id = 0; id < n && !d.part; id++)
    if (g->nodes[id].device && strncmp(g->nodes[id].device, "rank:", 5) == 0) {
      /* Where the original graph runs each gradient and batch input. */
      d.part = fg_partition_new(g, NULL, st);
      if (!d.part) {
        fg_graph_free(d.ng);
        return NULL;
      }
      d.n_chains = fg_partition_num_ranks(d.part);
    }
  if (replicas == 1 && !d.part)
    d.one_dev = fg_dp_reduce_device(g, n_batch_inputs > 0 ? fg_graph_find(g, batch_inputs[0]) : -1);
  d.map = malloc((size_t)replicas * (size_t)n * sizeof *d.map + 1);
  d.prev = malloc((size_t)d.n_chains * sizeof *d.prev);
  d.rows = malloc((size_t)replicas * sizeof *d.rows);
  d.stats = malloc((size_t)replicas * sizeof *d.stats);
  char *done = calloc((size_t)n + 1, 1);
  fg_graph *result = NULL;
  if (!d.ng || !d.map || !d.prev || !d.rows || !d.stats || !done) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory");
    goto out;
  }
  for (size_t i = 0; i < (size_t)replicas * (size_t)n; i++)
    d.map[i] = -1;
  for (int r = 0; r < replicas; r++)
    d.rows[r] = d.stats[r] = FG_NO_OUTPUT;
  for (int c = 0; c < d.n_chains; c++)
    d.prev[c] = FG_NO_OUTPUT;
  if (fg_dp_collect_grads(&d, st) != 0) goto out;
  d.in_step = calloc((size_t)n + 1, 1);
  if (!d.in_step || index_var_consumers(&d) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory");
    goto out;
  }
  /* Node ids are topological: one sweep down from the target. */
  d.in_step[target] = 1;
  for (int i = target; i >= 0; i--)
    for (int k = 0; d.in_step[i] && k < g->nodes[i].n_inputs; k++)
      d.in_step[g->nodes[i].inputs[k].node] = 1;
  d.red = malloc((size_t)replicas * (size_t)d.n_grads * sizeof *d.red);
  if (!d.red || fg_dp_find_fused(&d) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_data_parallel: out of memory");
    goto out;
  }
  for (size_t i = 0; i < (size_t)replicas * (size_t)d.n_grads; i++)
    d.red[i] = FG_NO_OUTPUT;

  if (emit_all(&d, done, loss, target, target_name, st) != 0) goto out;
  for (int i = 0; i < g->n_outputs && !fg_graph_failed(d.ng); i++)
    fg_graph_add_output(d.ng, (fg_output){*mapped(&d, 0, g->outputs[i].node), g->outputs[i].index});
  fg_rewrite_metadata(d.ng, g, "data_parallel_replicas", replicas);
  if (replicas > 1 && loss.index != 0)
    fg_graph_set_metadata(d.ng, "loss", g->nodes[loss.node].name);
  char num[32];
  snprintf(num, sizeof num, "%d", d.n_buckets);
  fg_graph_set_metadata(d.ng, "data_parallel_buckets", num);
  if (fg_graph_status(d.ng, st) != FG_OK) goto out;
  result = d.ng;
  d.ng = NULL;
  fg_status_clear(st);
out:
  fg_graph_free(d.ng);
  free(d.map);
  free(d.mark);
  free(d.prev);
  free(d.rows);
  free(d.stats);
  free(d.red);
  free(d.grads);
  free(d.bucket_end);
  free(d.vc_off);
  free(d.vc);
  free(d.in_step);
  free(d.fused);
  free(d.product);
  fg_partition_free(d.part);
  free(done);
  return result;
}
