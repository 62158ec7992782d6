/* Constant folding: a node whose inputs are all constants is evaluated
 * once, with the CPU kernel a plan would run (same parameters, single
 * threaded, no prepared state: kernels give the same bits for any thread
 * count and without their plan-time state), and rewritten in place into a
 * constant holding the result under its own name. Nodes go in id order,
 * which is topological, so a node sees its inputs already folded: one
 * sweep folds whole chains (the fixed point).
 *
 * Never folded: pinned nodes (stateful, collective, random, placeholders,
 * readers of run state), sources, nodes with several outputs, nodes
 * without inputs (a fill would only grow the file), and nodes whose output
 * type is not fully known or which inference, parameter checks or the
 * kernel refuse (the run then reports the error as it would have), and
 * results holding a NaN or an infinity (a run with check_numerics names
 * the node that made one, so it must run).
 *
 * The size cap: a folded output holds at most FOLD_MAX_BYTES, and at most
 * FOLD_GROWTH times the bytes of its inputs (FOLD_SMALL_BYTES always
 * fold), so a broadcast of a scalar to a large shape stays a node instead
 * of a large constant in the saved file. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"
#include "kernels/kernel.h"

#define FOLD_MAX_BYTES   ((size_t)64 << 20)
#define FOLD_GROWTH      4
#define FOLD_SMALL_BYTES 4096

/* 1 when node id may be folded, judging by its op and output alone. */
static int candidate(const fg_pass_ctx *ctx, int id) {
  const fg_node *n = &ctx->w->g.nodes[id];
  const fg_op_def *def = &fg_op_table[n->op];
  if (ctx->dead[id] || fg_pass_node_pinned(n) || (def->flags & FG_OPF_SOURCE)) return 0;
  if (n->n_outputs != 1 || n->n_inputs < 1 || def->mutable_inputs || n->op == FG_OP_ASSIGN ||
      n->op == FG_OP_GROUP)
    return 0;
  for (int d = 0; d < n->outputs[0].rank; d++)
    if (n->outputs[0].dims[d] < 0) return 0;
  return 1;
}

static fg_kbuf kbuf_of(fg_dtype dt, int rank, const int64_t *dims, void *data) {
  fg_kbuf k;
  memset(&k, 0, sizeof k);
  k.dtype = dt;
  k.rank = rank;
  for (int d = 0; d < rank; d++)
    k.dims[d] = dims[d];
  k.data = data;
  return k;
}

/* Runs n's CPU kernel on `in` (tinfos ti) into a new tensor of type *out,
 * or NULL when it has none or refuses. */
static fg_tensor *run_kernel(const fg_node *n, const fg_tensor *const *in, const fg_tinfo *ti,
                             const fg_tinfo *out, fg_status *st) {
  const fg_op_def *def = &fg_op_table[n->op];
  fg_op_params p;
  if (fg_op_parse_params(n, ti, &p, st) != 0) return NULL;
  fg_dtype key = (def->flags & FG_OPF_KERNEL_KEY_INPUT) ? ti[0].dtype : out->dtype;
  fg_kernel_fn fn = fg_cpu_kernel(def->name, key);
  fg_tensor *t = fn ? fg_tensor_new(out->dtype, out->rank, out->dims, NULL) : NULL;
  fg_kbuf *kin = t ? malloc((size_t)n->n_inputs * sizeof *kin) : NULL;
  if (!kin) {
    fg_tensor_free(t);
    return NULL;
  }
  for (int i = 0; i < n->n_inputs; i++)
    kin[i] = kbuf_of(in[i]->dtype, in[i]->rank, in[i]->dims, in[i]->data);
  fg_kbuf kout = kbuf_of(t->dtype, t->rank, t->dims, t->data);
  char err[256] = "";
  fg_code code = FG_INVALID_ARGUMENT;
  fg_kctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.in = kin, ctx.n_in = n->n_inputs, ctx.out = &kout, ctx.n_out = 1, ctx.p = &p;
  ctx.err = err, ctx.err_size = sizeof err, ctx.code = &code;
  ctx.fixed_inputs = n->n_inputs >= 32 ? ~0u : (1u << n->n_inputs) - 1u;
  int rc = fn(&ctx);
  free(kin);
  if (rc != 0) {
    fg_tensor_free(t);
    return NULL;
  }
  return t;
}

/* The folded value of node id, or NULL when it does not fold (an input
 * that is no constant, a shape that disagrees, over the cap, no kernel,
 * or no memory to try). */
static fg_tensor *evaluate(const fg_graph *g, int id, fg_status *st) {
  const fg_node *n = &g->nodes[id];
  const fg_tensor **in = malloc((size_t)n->n_inputs * sizeof *in);
  fg_tinfo *ti = calloc((size_t)n->n_inputs, sizeof *ti);
  fg_tensor *t = NULL;
  size_t in_bytes = 0, out_bytes = 0;
  int ok = in && ti;
  for (int i = 0; ok && i < n->n_inputs; i++) {
    ok = (in[i] = fg_pass_const_value(g, n->inputs[i])) != NULL;
    if (!ok) break;
    ti[i].dtype = in[i]->dtype;
    ti[i].rank = in[i]->rank;
    memcpy(ti[i].dims, in[i]->dims, sizeof ti[i].dims);
    in_bytes += fg_tensor_num_bytes(in[i]);
  }
  fg_tinfo out;
  memset(&out, 0, sizeof out);
  ok = ok && fg_infer(n, ti, &out, st) == 0 && fg_pass_tinfo_equal(&out, &n->outputs[0]) &&
       fg_tinfo_bytes(&out, &out_bytes) == 0 && out_bytes <= FOLD_MAX_BYTES &&
       (out_bytes <= FOLD_SMALL_BYTES || out_bytes / FOLD_GROWTH <= in_bytes);
  if (ok) t = run_kernel(n, in, ti, &out, st);
  free(in);
  free(ti);
  return t;
}

/* 1 when a float result holds a NaN or an infinity. */
static int non_finite(const fg_tensor *t) {
  int64_t n = fg_tensor_num_elements(t);
  for (int64_t i = 0; i < n; i++) {
    double v = t->dtype == FG_F32   ? (double)((const float *)t->data)[i]
               : t->dtype == FG_F64 ? ((const double *)t->data)[i]
                                    : 0.0;
    if (!isfinite(v)) return 1;
  }
  return 0;
}

int fg_pass_fold(fg_pass_ctx *ctx, fg_status *st) {
  fg_graph *g = &ctx->w->g;
  for (int id = 0; id < g->n_nodes; id++) {
    fg_pass_resolve_inputs(ctx, id);
    if (!candidate(ctx, id)) continue;
    fg_tensor *t = evaluate(g, id, st);
    /* A node that does not fold keeps its error for the run to report. */
    fg_status_clear(st);
    if (t && non_finite(t)) {
      /* check_numerics names the node that makes a NaN or an infinity:
       * it must still run. */
      fg_tensor_free(t);
      t = NULL;
    }
    if (!t) continue;
    if (fg_pass_graph_set_constant(ctx->w, id, t) != 0) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fold: out of memory");
      return -1;
    }
    if (fg_pass_record(ctx, id, "folded", g->nodes[id].name, NULL, st) != 0) return -1;
  }
  return 0;
}
