/* Inference-time folding.
 *
 * dropout(x, training) with a constant false training input is x, bit for
 * bit: consumers read x. A training input that is the graph's training
 * flag (fg_training) is known only per run, so such a dropout stays.
 *
 * batch_norm(conv2d(x, W[, b]), scale, shift, mean, var, false) with
 * constant parameters is conv2d(x, W', b'), per output channel o:
 *   s = scale[o] / sqrt(var[o] + epsilon),
 *   W'[o] = W[o] * s,  b'[o] = (b[o] - mean[o]) * s + shift[o],
 * each computed in double and rounded once. That changes the rounding
 * (not bitwise; within 1e-5 relative in f32 in the tests). The batch_norm
 * node is rewritten in place into that conv2d, with W' in W's constant and
 * b' in the conv's bias constant (or the shift's), so node ids stay
 * topological and nothing is added. That rewrites the values of the conv,
 * its weight and that constant under their own names, so it applies only
 * where nobody can fetch them: each has this one consumer and none is
 * kept, nor is the batch_norm (whose outputs 1..3 must have no consumer).
 * fg_optimize keeps only what it is asked for; a session keeps every node
 * (any name may be fetched), so there batch norms are not folded. Neither
 * are variables (a graph may update them), nor batch norms in training. */
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

/* The batch_norm's pieces: the conv, its weight, the constants. */
typedef struct bn_fold {
  int bn, conv, w_node, b_node;
  const fg_tensor *w, *b, *scale, *shift, *mean, *var;
  double eps;
} bn_fold;

/* A node nobody else can see: kept by no one, read only by its one user. */
static int private_node(const fg_pass_ctx *ctx, const uses *u, int id) {
  return !ctx->keep[id] && u->all[id] == 1;
}

/* Fills *f when batch_norm `bn` folds into the conv2d it reads. */
static int match_bn(const fg_pass_ctx *ctx, const uses *u, int bn, bn_fold *f) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[bn];
  if (n->n_inputs != 6 || ctx->keep[bn] || u->past0[bn] || !const_false(g, n->inputs[5])) return 0;
  fg_output x = n->inputs[0];
  const fg_node *c = &g->nodes[x.node];
  if (c->op != FG_OP_CONV2D || x.index != 0 || !private_node(ctx, u, x.node)) return 0;
  fg_dtype dt = c->outputs[0].dtype;
  f->bn = bn, f->conv = x.node, f->w_node = c->inputs[1].node;
  f->w = fg_pass_const_value(g, c->inputs[1]);
  if (!f->w || f->w->dtype != dt || (dt != FG_F32 && dt != FG_F64) || f->w->rank < 1 ||
      !private_node(ctx, u, f->w_node))
    return 0;
  int64_t o = f->w->dims[0];
  f->scale = param(g, n->inputs[1], dt, o), f->shift = param(g, n->inputs[2], dt, o);
  f->mean = param(g, n->inputs[3], dt, o), f->var = param(g, n->inputs[4], dt, o);
  f->b = c->n_inputs == 3 ? param(g, c->inputs[2], dt, o) : NULL;
  /* b' goes where b was, or else into the shift (an earlier node). */
  f->b_node = c->n_inputs == 3 ? c->inputs[2].node : n->inputs[2].node;
  f->eps = fg_attr_float_or(n, "epsilon", 1e-5);
  if (!f->scale || !f->shift || !f->mean || !f->var || (c->n_inputs == 3 && !f->b)) return 0;
  return private_node(ctx, u, f->b_node) && fg_pass_can_replace(ctx, bn, x);
}

/* W' and b' (new tensors) from the matched pieces; -1 out of memory. */
static int folded_values(const bn_fold *f, fg_tensor **w2, fg_tensor **b2) {
  int64_t o = f->w->dims[0], per = o ? fg_tensor_num_elements(f->w) / o : 0;
  *w2 = fg_tensor_new(f->w->dtype, f->w->rank, f->w->dims, NULL);
  *b2 = fg_tensor_new(f->w->dtype, 1, &o, NULL);
  if (!*w2 || !*b2) return -1;
  for (int64_t c = 0; c < o; c++) {
    double s = at(f->scale, c) / sqrt(at(f->var, c) + f->eps);
    for (int64_t k = 0; k < per; k++)
      put(*w2, c * per + k, at(f->w, c * per + k) * s);
    put(*b2, c, ((f->b ? at(f->b, c) : 0.0) - at(f->mean, c)) * s + at(f->shift, c));
  }
  return 0;
}

/* The batch_norm becomes conv2d(x, W', b') with the conv's attributes. */
static int rewrite_bn(fg_pass_ctx *ctx, const bn_fold *f, fg_status *st) {
  fg_tensor *w2 = NULL, *b2 = NULL;
  fg_graph *g = &ctx->w->g;
  int rc = folded_values(f, &w2, &b2);
  if (rc != 0) {
    fg_tensor_free(w2);
    fg_tensor_free(b2);
  } else if ((rc = fg_pass_graph_set_constant(ctx->w, f->w_node, w2)) != 0) {
    fg_tensor_free(b2); /* w2 is taken over, even on failure */
  } else {
    rc = fg_pass_graph_set_constant(ctx->w, f->b_node, b2);
  }
  if (rc == 0) rc = fg_pass_graph_set_attrs(ctx->w, f->bn, &g->nodes[f->conv].attrs);
  if (rc != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fold_inference: out of memory");
    return -1;
  }
  fg_node *n = &g->nodes[f->bn];
  n->inputs[0] = g->nodes[f->conv].inputs[0];
  n->inputs[1] = (fg_output){f->w_node, 0};
  n->inputs[2] = (fg_output){f->b_node, 0};
  n->n_inputs = 3;
  n->n_outputs = 1;
  n->op = FG_OP_CONV2D;
  /* The conv is left without a consumer, and now reads W' and b': gone,
   * so that nothing (CSE) takes it for the folded node. */
  ctx->dead[f->conv] = 1;
  if (fg_pass_record(ctx, f->bn, "folded", n->name, "batch_norm(conv2d) into conv2d", st) != 0)
    return -1;
  return fg_pass_record(ctx, f->conv, "removed", NULL, NULL, st);
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
    if (ctx->dead[id] || g->nodes[id].op != FG_OP_BATCH_NORM || !match_bn(ctx, &u, id, &f))
      continue;
    rc = rewrite_bn(ctx, &f, st);
  }
  free(u.all);
  free(u.past0);
  return rc;
}
