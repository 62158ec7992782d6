/* Inference-time folding.
 *
 * dropout(x, training) with a constant false training input is x, bit for
 * bit: consumers read x. A training input that is the graph's training
 * flag (fg_training) is known only per run, so such a dropout stays.
 *
 * batch_norm(conv2d(x, W[, b]), scale, shift, mean, var, false) with
 * constant parameters is conv2d(x, W', b'), per output channel o (and
 * batch_norm(matmul(x, W) [+ b]) over [N, F] is matmul(x, W') + b'):
 *   s = scale[o] / sqrt(var[o] + epsilon),
 *   W'[o] = W[o] * s,  b'[o] = (b[o] - mean[o]) * s + shift[o],
 * each computed in double and rounded once. That changes the rounding
 * (not bitwise; within 1e-5 relative in f32 in the tests). The batch_norm
 * node is rewritten in place into that conv2d (or into the add of b'; or
 * the matmul's own bias add stands for it), with W' in W's constant and
 * b' in the bias constant (or the shift's), so node ids stay topological
 * and nothing is added. That rewrites the values of the conv,
 * its weight and that constant under their own names, so it applies only
 * where nobody can fetch them: each has this one consumer and none is
 * kept, nor is the batch_norm (whose outputs 1..3 must have no consumer).
 * That is fg_optimize, which keeps only what it is asked for.
 *
 * A session keeps every node (any name may be fetched), so there W' and b'
 * are new constants "<bn>/folded_weight" and "<bn>/folded_bias" appended
 * to the copy (fg_pass_add_constant; placed on the batch_norm's device in
 * a multi-device session; not in a GPU session with host steps), and
 * the batch_norm becomes conv2d(x, W', b') with the conv's attributes, or
 * fused_matmul(x, W', b') with the matmul's; the conv or matmul (and its
 * add), W and b stay as they are, computed only when a run fetches them.
 * The producer must have no other consumer (it would be computed twice),
 * and no node may read the batch_norm's outputs 1..3: the rewritten node
 * has one output, and a run that fetches one of them plans from the
 * source graph (executor/session.c). Neither way folds variables (a graph
 * may update them), nor batch norms in training. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

/* A constant bool holding one false. */
static int const_false(const fg_graph *g, fg_output o) {
  const fg_tensor *t = fg_pass_const_value(g, o);
  return t && t->dtype == FG_BOOL && fg_tensor_num_bytes(t) == 1 &&
         ((const unsigned char *)t->data)[0] == 0;
}

static int fold_dropout(fg_pass_ctx *ctx, int id, fg_status *st) {
  const fg_node *n = &ctx->w->g.nodes[id];
  if (n->n_inputs != 2 || !const_false(&ctx->w->g, n->inputs[1]) ||
      !fg_pass_can_replace(ctx, id, n->inputs[0]))
    return 0;
  return fg_pass_replace(ctx, id, n->inputs[0], "folded", "dropout in inference mode", st);
}

/* Per node, how many input edges of live nodes read it (any output), and
 * per node how many read an output other than 0. */
typedef struct uses {
  int *all, *past0;
} uses;

static int count_uses(const fg_pass_ctx *ctx, uses *u) {
  const fg_graph *g = &ctx->w->g;
  u->all = calloc((size_t)g->n_nodes + 1, sizeof *u->all);
  u->past0 = calloc((size_t)g->n_nodes + 1, sizeof *u->past0);
  if (!u->all || !u->past0) return -1;
  for (int id = 0; id < g->n_nodes; id++) {
    if (ctx->dead[id]) continue;
    for (int i = 0; i < g->nodes[id].n_inputs; i++) {
      fg_output o = fg_pass_resolve(ctx, g->nodes[id].inputs[i]);
      u->all[o.node]++;
      u->past0[o.node] += o.index != 0;
    }
  }
  return 0;
}

/* Output o is a constant [c] vector of dtype dt (or c elements, for W). */
static const fg_tensor *param(const fg_graph *g, fg_output o, fg_dtype dt, int64_t c) {
  const fg_tensor *t = fg_pass_const_value(g, o);
  return t && t->dtype == dt && t->rank == 1 && t->dims[0] == c ? t : NULL;
}

static double at(const fg_tensor *t, int64_t i) {
  return t->dtype == FG_F32 ? (double)((const float *)t->data)[i] : ((const double *)t->data)[i];
}

static void put(fg_tensor *t, int64_t i, double v) {
  if (t->dtype == FG_F32)
    ((float *)t->data)[i] = (float)v;
  else
    ((double *)t->data)[i] = v;
}

/* What the batch_norm reads: conv2d(x, W[, b]), matmul(x, W), or
 * matmul(x, W) + b. */
typedef enum { BN_CONV, BN_MATMUL, BN_MATMUL_ADD } bn_kind;

/* The batch_norm's pieces. W's element i scales with channel i / inner,
 * or i % c where inner is 0 (a matmul's [K, c] weight). */
typedef struct bn_fold {
  bn_kind kind;
  int bn, prod, add, w_node, b_node;
  int64_t c, inner;
  const fg_tensor *w, *b, *scale, *shift, *mean, *var;
  double eps;
} bn_fold;

/* 1 where the fold appends W' and b' as new constants (a session, where
 * any name may be fetched, and one that may append), 0 where it rewrites
 * them in place (fg_optimize, or a session with host steps, whose kept
 * nodes it then leaves). */
static int appends(const fg_pass_ctx *ctx) {
  return ctx->w->may_append && ctx->all_kept && !ctx->w->optimizing;
}

/* A node nobody else can see: kept by no one, read only by its one user. */
static int private_node(const fg_pass_ctx *ctx, const uses *u, int id) {
  return !ctx->keep[id] && u->all[id] == 1;
}

/* A node the fold may read past: private where its value is rewritten in
 * place; where the fold appends constants, one it leaves as it is, read
 * only by its one user (else it would be computed twice). */
static int sole_use(const fg_pass_ctx *ctx, const uses *u, int id) {
  return appends(ctx) ? u->all[id] == 1 : private_node(ctx, u, id);
}

/* A constant the fold reads (W, b): private where it is rewritten in
 * place, any constant where the fold appends new ones. */
static int readable(const fg_pass_ctx *ctx, const uses *u, int id) {
  return appends(ctx) || private_node(ctx, u, id);
}

/* A constant weight of dtype dt and rank >= 1 at output o, as readable. */
static const fg_tensor *weight(const fg_pass_ctx *ctx, const uses *u, fg_output o, fg_dtype dt) {
  const fg_tensor *w = fg_pass_const_value(&ctx->w->g, o);
  return w && w->dtype == dt && w->rank >= 1 && readable(ctx, u, o.node) ? w : NULL;
}

/* Node id as the producer: a private conv2d or 2-D matmul with a constant
 * weight (and bias); fills kind, prod, w, c, inner, b and b_node. */
static int match_producer(const fg_pass_ctx *ctx, const uses *u, int id, bn_fold *f) {
  const fg_node *p = &ctx->w->g.nodes[id];
  fg_dtype dt = p->outputs[0].dtype;
  if (!sole_use(ctx, u, id) || (dt != FG_F32 && dt != FG_F64)) return 0;
  f->prod = id, f->w_node = p->n_inputs > 1 ? p->inputs[1].node : -1;
  f->w = p->n_inputs > 1 ? weight(ctx, u, p->inputs[1], dt) : NULL;
  if (!f->w) return 0;
  if (p->op == FG_OP_CONV2D) {
    f->kind = BN_CONV, f->c = f->w->dims[0];
    f->inner = f->c ? fg_tensor_num_elements(f->w) / f->c : 0;
    f->b_node = p->n_inputs == 3 ? p->inputs[2].node : -1;
    f->b = p->n_inputs == 3 ? param(&ctx->w->g, p->inputs[2], dt, f->c) : NULL;
    return p->n_inputs == 2 || (f->b && readable(ctx, u, f->b_node));
  }
  if (p->op != FG_OP_MATMUL || f->w->rank != 2 || p->outputs[0].rank != 2) return 0;
  int tb = fg_attr_int_or(p, "transpose_b", 0) != 0;
  f->kind = BN_MATMUL, f->c = f->w->dims[tb ? 0 : 1], f->inner = tb ? f->w->dims[1] : 0;
  f->b = NULL, f->b_node = -1;
  return 1;
}

/* x = matmul + b (either order) with b a private constant [c]. */
static int match_bias_add(const fg_pass_ctx *ctx, const uses *u, int id, bn_fold *f) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *a = &g->nodes[id];
  if (a->op != FG_OP_ADD || a->n_inputs != 2 || !sole_use(ctx, u, id)) return 0;
  for (int k = 0; k < 2; k++) {
    fg_output mm = a->inputs[k], b = a->inputs[1 - k];
    if (g->nodes[mm.node].op != FG_OP_MATMUL || !match_producer(ctx, u, mm.node, f)) continue;
    f->b = param(g, b, a->outputs[0].dtype, f->c);
    f->b_node = b.node, f->kind = BN_MATMUL_ADD, f->add = id;
    return f->b && readable(ctx, u, b.node);
  }
  return 0;
}

/* batch_norm bn in inference (a constant false mode), nothing reading its
 * outputs 1..3, and not kept where the rewrite is in place. */
static int bn_rewritable(const fg_pass_ctx *ctx, const uses *u, int bn) {
  const fg_node *n = &ctx->w->g.nodes[bn];
  return n->n_inputs == 6 && !(ctx->keep[bn] && !appends(ctx)) && !u->past0[bn] &&
         const_false(&ctx->w->g, n->inputs[5]);
}

/* The batch_norm's scale, shift, mean and variance (constants [f->c] of
 * dtype dt) and epsilon into f: 1 when all four are such constants. */
static int bn_constants(const fg_graph *g, const fg_node *n, fg_dtype dt, bn_fold *f) {
  f->scale = param(g, n->inputs[1], dt, f->c), f->shift = param(g, n->inputs[2], dt, f->c);
  f->mean = param(g, n->inputs[3], dt, f->c), f->var = param(g, n->inputs[4], dt, f->c);
  f->eps = fg_attr_float_or(n, "epsilon", 1e-5);
  return f->scale && f->shift && f->mean && f->var;
}

/* Fills *f when batch_norm `bn` folds into what it reads. */
static int match_bn(const fg_pass_ctx *ctx, const uses *u, int bn, bn_fold *f) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[bn];
  if (!bn_rewritable(ctx, u, bn)) return 0;
  fg_output x = n->inputs[0];
  f->bn = bn, f->add = -1;
  if (x.index != 0 || !fg_pass_can_replace(ctx, bn, x)) return 0;
  if (!match_producer(ctx, u, x.node, f) && !match_bias_add(ctx, u, x.node, f)) return 0;
  /* The rewritten node reads the producer's input later, at its own id. */
  if (!fg_pass_can_replace(ctx, bn, g->nodes[f->prod].inputs[0])) return 0;
  /* In place, b' goes where b was, or else into the shift (an earlier
   * node). */
  if (f->b_node < 0 && !appends(ctx)) f->b_node = n->inputs[2].node;
  return bn_constants(g, n, f->w->dtype, f) && (appends(ctx) || private_node(ctx, u, f->b_node));
}

/* W' and b' (new tensors) from the matched pieces; -1 out of memory. */
static int folded_values(const bn_fold *f, fg_tensor **w2, fg_tensor **b2) {
  int64_t c = f->c, n = fg_tensor_num_elements(f->w);
  double *s = malloc(((size_t)c + 1) * sizeof *s);
  *w2 = fg_tensor_new(f->w->dtype, f->w->rank, f->w->dims, NULL);
  *b2 = fg_tensor_new(f->w->dtype, 1, &c, NULL);
  if (!s || !*w2 || !*b2) {
    free(s);
    return -1;
  }
  for (int64_t k = 0; k < c; k++) {
    s[k] = at(f->scale, k) / sqrt(at(f->var, k) + f->eps);
    put(*b2, k, ((f->b ? at(f->b, k) : 0.0) - at(f->mean, k)) * s[k] + at(f->shift, k));
  }
  for (int64_t i = 0; i < n; i++)
    put(*w2, i, at(f->w, i) * s[f->inner ? i / f->inner : i % c]);
  free(s);
  return 0;
}

/* W' and b' into their constants. -1 out of memory. */
static int store_values(fg_pass_ctx *ctx, const bn_fold *f) {
  fg_tensor *w2 = NULL, *b2 = NULL;
  if (folded_values(f, &w2, &b2) != 0) {
    fg_tensor_free(w2);
    fg_tensor_free(b2);
    return -1;
  }
  if (fg_pass_graph_set_constant(ctx->w, f->w_node, w2) != 0) {
    fg_tensor_free(b2); /* w2 is taken over, even on failure */
    return -1;
  }
  return fg_pass_graph_set_constant(ctx->w, f->b_node, b2);
}

/* The batch_norm becomes conv2d(x, W', b') (the conv's attributes; the
 * conv goes) or matmul + b'; or, where the matmul had its add, that add
 * stands for it. */
static int rewrite_bn(fg_pass_ctx *ctx, const bn_fold *f, fg_status *st) {
  fg_graph *g = &ctx->w->g;
  static const struct fg_attrs none;
  int rc = store_values(ctx, f);
  if (rc == 0 && f->kind != BN_MATMUL_ADD)
    rc = fg_pass_graph_set_attrs(ctx->w, f->bn,
                                 f->kind == BN_CONV ? &g->nodes[f->prod].attrs : &none);
  if (rc != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fold_inference: out of memory");
    return -1;
  }
  fg_node *n = &g->nodes[f->bn];
  if (f->kind == BN_MATMUL_ADD)
    return fg_pass_replace(ctx, f->bn, (fg_output){f->add, 0}, "folded",
                           "batch_norm(matmul + b) into matmul + b", st);
  if (f->kind == BN_MATMUL) {
    n->inputs[0] = (fg_output){f->prod, 0};
    n->inputs[1] = (fg_output){f->b_node, 0};
    n->n_inputs = 2, n->n_outputs = 1, n->op = FG_OP_ADD;
    return fg_pass_record(ctx, f->bn, "folded", n->name, "batch_norm(matmul) into matmul + b", st);
  }
  n->inputs[0] = g->nodes[f->prod].inputs[0];
  n->inputs[1] = (fg_output){f->w_node, 0};
  n->inputs[2] = (fg_output){f->b_node, 0};
  n->n_inputs = 3, n->n_outputs = 1, n->op = FG_OP_CONV2D;
  /* The conv is left without a consumer, and now reads W' and b': gone,
   * so that nothing (CSE) takes it for the folded node. */
  ctx->dead[f->prod] = 1;
  if (fg_pass_record(ctx, f->bn, "folded", n->name, "batch_norm(conv2d) into conv2d", st) != 0)
    return -1;
  return fg_pass_record(ctx, f->prod, "removed", NULL, NULL, st);
}

/* The session's way: W' and b' as new constants, the batch_norm rewritten
 * into conv2d or fused_matmul reading them, the rest untouched. */
static int rewrite_bn_appending(fg_pass_ctx *ctx, const bn_fold *f, fg_status *st) {
  fg_tensor *w2 = NULL, *b2 = NULL;
  if (folded_values(f, &w2, &b2) != 0) {
    fg_tensor_free(w2);
    fg_tensor_free(b2);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fold_inference: out of memory");
    return -1;
  }
  int wid = fg_pass_add_constant(ctx, f->bn, "folded_weight", w2, st);
  if (wid < 0) {
    fg_tensor_free(b2); /* w2 is taken over, even on failure */
    return -1;
  }
  int bid = fg_pass_add_constant(ctx, f->bn, "folded_bias", b2, st);
  if (bid < 0) return -1;
  /* Appending may have moved the nodes: pointers into them from here. */
  fg_graph *g = &ctx->w->g;
  const fg_node *p = &g->nodes[f->prod];
  if (fg_pass_graph_set_attrs(ctx->w, f->bn, &p->attrs) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fold_inference: out of memory");
    return -1;
  }
  fg_node *n = &g->nodes[f->bn];
  n->inputs[0] = p->inputs[0];
  n->inputs[1] = (fg_output){wid, 0};
  n->inputs[2] = (fg_output){bid, 0};
  n->n_inputs = 3, n->n_outputs = 1;
  n->op = f->kind == BN_CONV ? FG_OP_CONV2D : FG_OP_FUSED_MATMUL;
  return fg_pass_record(ctx, f->bn, "folded", n->name,
                        f->kind == BN_CONV ? "batch_norm(conv2d) into conv2d on new constants"
                        : f->kind == BN_MATMUL
                            ? "batch_norm(matmul) into fused_matmul on new constants"
                            : "batch_norm(matmul + b) into fused_matmul on new constants",
                        st);
}

/* ---- batch_norm as a per-channel affine ---------------------------------
 * A batch_norm in inference that folds into no producer (after a concat,
 * an add or a pool: DenseNet's norm after each concat) computes, on the
 * CPU (kernels/cpu/norm_body.h), y = x * a + b per channel c, with
 *   a = (T)(scale[c] * (1 / sqrt(var[c] + epsilon))),
 *   b = (T)(shift[c] - mean[c] * a'),  a' the unrounded a,
 * each computed in double and rounded once, and x * a + b two roundings.
 * It becomes fused_elementwise mul(x0, x1); add(t0, x2) over x and the
 * constants a and b as [C, 1, ..., 1]: the same bits, and element-wise
 * fusion can then take it into the relu that follows. The constants are
 * new ones "<bn>/affine_scale" and "<bn>/affine_shift" in a session; in
 * fg_optimize the scale and shift constants take their values, where
 * nobody else reads them. */

/* On the CPU the fused kernel fills a block's a and b run by run, which
 * for small planes costs more than the batch norm kernel's per-channel
 * loop. BN + ReLU, fused against two nodes (1 thread, alternating):
 * [1, 1024, 7, 7] 39-42 against 28-31 us, [1, 512, 14, 14] 49-54 against
 * 38-40, [1, 512, 16, 16] 60-72 against 57-61, [1, 256, 28, 28] 94-96
 * against 101-118, [1, 128, 56, 56] 186-194 against 251-263, and
 * [64, 1024] (plane 1, where the batch norm kernel strides) 18-19 against
 * 285-302. So the CPU takes planes of 1 element or of at least a block's
 * 512 (known); a GPU session (one kernel instead of two) any. */
#define AFFINE_MIN_PLANE 512

/* batch_norm bn in inference over x of rank >= 2 with a known channel
 * count, its parameters constants [C] of x's dtype, and no reader of its
 * outputs 1..3; fills c, scale, shift, mean, var and eps. */
static int match_affine(const fg_pass_ctx *ctx, const uses *u, int bn, bn_fold *f) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[bn];
  if (!bn_rewritable(ctx, u, bn) || !fg_pass_fusion_allowed(ctx)) return 0;
  const fg_tinfo *x = fg_pass_type_of(g, n->inputs[0]);
  if ((x->dtype != FG_F32 && x->dtype != FG_F64) || x->rank < 2 || x->dims[1] <= 0) return 0;
  int64_t plane = 1;
  for (int d = 2; d < x->rank; d++)
    plane = x->dims[d] < 0 || plane < 0 ? -1 : plane * x->dims[d];
  if (!ctx->w->gpu && plane != 1 && plane < AFFINE_MIN_PLANE) return 0;
  f->bn = bn, f->c = x->dims[1];
  if (!bn_constants(g, n, x->dtype, f)) return 0;
  return appends(ctx) ||
         (private_node(ctx, u, n->inputs[1].node) && private_node(ctx, u, n->inputs[2].node));
}

/* a and b as new [C, 1, ..., 1] tensors for an input of rank `rank`. */
static int affine_values(const bn_fold *f, int rank, fg_tensor **a, fg_tensor **b) {
  int64_t dims[FG_MAX_RANK];
  dims[0] = f->c;
  for (int d = 1; d + 1 < rank; d++)
    dims[d] = 1;
  *a = fg_tensor_new(f->scale->dtype, rank - 1, dims, NULL);
  *b = fg_tensor_new(f->scale->dtype, rank - 1, dims, NULL);
  if (!*a || !*b) return -1;
  for (int64_t k = 0; k < f->c; k++) {
    const double s = at(f->scale, k) * (1.0 / sqrt(at(f->var, k) + f->eps));
    put(*a, k, s);
    put(*b, k, at(f->shift, k) - at(f->mean, k) * s);
  }
  return 0;
}

/* Constant node id takes value v in place, its output type v's. */
static int set_const_typed(fg_pass_graph *w, int id, fg_tensor *v) {
  fg_tinfo t = {.dtype = v->dtype, .rank = v->rank};
  memcpy(t.dims, v->dims, (size_t)v->rank * sizeof *v->dims);
  return fg_pass_graph_set_outputs(w, id, &t, 1) != 0 ? (fg_tensor_free(v), -1)
                                                      : fg_pass_graph_set_constant(w, id, v);
}

/* The ids of the constants a and b, new or rewritten. -1 out of memory
 * (the status set). */
static int affine_constants(fg_pass_ctx *ctx, const bn_fold *f, int rank, int ids[2],
                            fg_status *st) {
  fg_tensor *a = NULL, *b = NULL;
  const fg_node *n = &ctx->w->g.nodes[f->bn];
  ids[0] = n->inputs[1].node, ids[1] = n->inputs[2].node;
  if (affine_values(f, rank, &a, &b) != 0) {
    fg_tensor_free(a);
    fg_tensor_free(b);
  } else if (appends(ctx)) {
    ids[0] = fg_pass_add_constant(ctx, f->bn, "affine_scale", a, st);
    if (ids[0] < 0) return fg_tensor_free(b), -1; /* a is taken over */
    ids[1] = fg_pass_add_constant(ctx, f->bn, "affine_shift", b, st);
    return ids[1] < 0 ? -1 : 0;
  } else if (set_const_typed(ctx->w, ids[0], a) == 0) {
    if (set_const_typed(ctx->w, ids[1], b) == 0) return 0;
  } else {
    fg_tensor_free(b);
  }
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fold_inference: out of memory");
  return -1;
}

static int rewrite_affine(fg_pass_ctx *ctx, const bn_fold *f, fg_status *st) {
  const fg_node *n = &ctx->w->g.nodes[f->bn];
  fg_output x = n->inputs[0];
  int ids[2];
  if (affine_constants(ctx, f, fg_pass_type_of(&ctx->w->g, x)->rank, ids, st) != 0) return -1;
  fg_fused_params p = {.n_inputs = 3, .n_instrs = 2};
  p.ins[0] = (fg_fused_instr){
      .op = FG_FUSED_MUL, .n_args = 2, .arg = {{FG_FUSED_INPUT, 0}, {FG_FUSED_INPUT, 1}}};
  p.ins[1] = (fg_fused_instr){
      .op = FG_FUSED_ADD, .n_args = 2, .arg = {{FG_FUSED_TEMP, 0}, {FG_FUSED_INPUT, 2}}};
  const fg_output in[3] = {x, {ids[0], 0}, {ids[1], 0}};
  struct fg_attrs a;
  /* Appending may have moved the nodes: n again from here. */
  n = &ctx->w->g.nodes[f->bn];
  if (fg_pass_fused_attrs(n, &p, &a) != 0 ||
      fg_pass_graph_set_op(ctx->w, f->bn, FG_OP_FUSED_ELEMENTWISE, in, 3) != 0 ||
      fg_pass_graph_set_attrs(ctx->w, f->bn, &a) != 0) {
    fg_attrs_clear(&a);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fold_inference: out of memory");
    return -1;
  }
  fg_attrs_clear(&a);
  ctx->w->g.nodes[f->bn].n_outputs = 1;
  return fg_pass_record(ctx, f->bn, "folded", "fused_elementwise[mul+add]",
                        "batch_norm into x * a + b per channel (same bits)", st);
}

int fg_pass_fold_inference(fg_pass_ctx *ctx, fg_status *st) {
  const fg_graph *g = &ctx->w->g;
  uses u = {NULL, NULL};
  int rc = 0;
  for (int id = 0; rc == 0 && id < g->n_nodes; id++) {
    fg_pass_resolve_inputs(ctx, id);
    if (!ctx->dead[id] && g->nodes[id].op == FG_OP_DROPOUT) rc = fold_dropout(ctx, id, st);
  }
  if (rc == 0 && count_uses(ctx, &u) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fold_inference: out of memory");
    rc = -1;
  }
  for (int id = 0; rc == 0 && id < g->n_nodes; id++) {
    bn_fold f;
    if (ctx->dead[id] || g->nodes[id].op != FG_OP_BATCH_NORM) continue;
    if (match_bn(ctx, &u, id, &f))
      rc = appends(ctx) ? rewrite_bn_appending(ctx, &f, st) : rewrite_bn(ctx, &f, st);
    else if (match_affine(ctx, &u, id, &f))
      rc = rewrite_affine(ctx, &f, st);
  }
  free(u.all);
  free(u.past0);
  return rc;
}
