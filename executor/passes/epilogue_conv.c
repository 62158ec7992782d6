/* Convolution epilogues: a conv2d followed by a residual add and a relu
 * (or a clip) becomes one node whose kernel applies them to the
 * convolution's output as it is produced (graph/infer_fused_conv.c;
 * kernels/cpu/conv_dnnl.c, kernels/cuda/conv.cu):
 *
 *   relu(conv2d(x, w[, b]))             -> fused_conv2d(x, w[, b]), relu
 *   relu(conv2d(x, w[, b]) + z)         -> fused_conv2d_add(x, w, z[, b]), relu
 *   conv2d(x, w[, b]) + z               -> fused_conv2d_add(x, w, z[, b]), none
 *   clip(conv2d(x, w[, b]) [+ z])       -> the same with activation clip and
 *                                          the clip's min and max
 *
 * clip(0, 6) is MobileNet's relu6, which an imported model writes as Clip
 * after each convolution its batch norm folded into.
 * These are what inference CNNs are made of once batch norm is folded into
 * the convolution before it (fold_inference): a ResNet block ends in
 * relu(conv + shortcut), the other convolutions in relu(conv). The bits
 * are the chain's: the kernels run the convolution exactly as conv2d's
 * kernel does (bias included), then y + z, then relu's x < 0 ? 0 : x.
 *
 * The add must be of the convolution's output and z, a tensor of exactly
 * the output's type (either operand order; no broadcast), with a sum of
 * that type; only the batch dim may be unknown (a z fed with batch 1
 * against a larger batch would have been broadcast by the add: the fused
 * node then refuses z's shape at plan time). A bias added by a separate
 * node ([C, 1, 1]) is left alone: conv2d adds its own bias inside the
 * convolution (its loops start the sum at b), which rounds differently
 * from adding it afterwards. The root, the last node of the chain, is
 * rewritten in place with conv2d's attributes (strides, pads, dilations,
 * groups, auto_pad) and the activation, so its name, id and output stay;
 * the conv2d and the add are absorbed under epilogue.c's rules
 * (epilogue_common.h: one consumer, waiters after the root, unpinned, one
 * device group, kept nodes in fg_optimize, variable state written between
 * reads). */
#include <stdlib.h>
#include <string.h>

#include "executor/passes/epilogue_common.h"
#include "graph/op_table.h"

typedef struct conv_chain {
  int root, conv, add, relu, clip; /* add: -1 when the activation reads the conv2d */
  fg_output z;
} conv_chain;

/* A conv2d of floats whose output the chain may take over. */
static int match_conv(const fg_pass_ctx *ctx, const fg_epi_state *s, int id, conv_chain *c) {
  const fg_node *n = &ctx->w->g.nodes[id];
  if (n->op != FG_OP_CONV2D || n->n_inputs < 2 || n->n_inputs > 3 ||
      !fg_epi_absorbable(ctx, s, id, c->root))
    return 0;
  c->conv = id;
  return 1;
}

/* z has the convolution's output type, every dim but the batch known. */
static int residual_fits(const fg_tinfo *z, const fg_tinfo *y) {
  if (!fg_pass_tinfo_equal(z, y) || y->rank != 4) return 0;
  for (int d = 1; d < 4; d++)
    if (y->dims[d] < 0) return 0;
  return 1;
}

/* add(conv2d, z) or add(z, conv2d), its sum of the convolution's type. */
static int match_add(const fg_pass_ctx *ctx, const fg_epi_state *s, int add, conv_chain *c) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[add];
  if (n->op != FG_OP_ADD || n->n_inputs != 2) return 0;
  for (int k = 0; k < 2; k++) {
    fg_output m = n->inputs[k], z = n->inputs[1 - k];
    if (m.index != 0 || m.node == z.node || !match_conv(ctx, s, m.node, c)) continue;
    const fg_tinfo *ty = &g->nodes[m.node].outputs[0];
    if (!residual_fits(&g->nodes[z.node].outputs[z.index], ty) ||
        !fg_pass_tinfo_equal(&n->outputs[0], ty))
      continue;
    c->add = add, c->z = z;
    return 1;
  }
  return 0;
}

/* The chain whose last node is `root` (a relu or an add), into *c. */
static int match_chain(const fg_pass_ctx *ctx, const fg_epi_state *s, int root, conv_chain *c) {
  const fg_graph *g = &ctx->w->g;
  const fg_node *r = &g->nodes[root];
  c->root = root, c->relu = c->clip = 0, c->add = -1;
  if (!fg_epi_root_ok(ctx, s, root)) return 0;
  if (r->op == FG_OP_RELU || r->op == FG_OP_CLIP) {
    fg_output x = r->inputs[0];
    if (r->n_inputs != 1 || x.index != 0 || !fg_epi_absorbable(ctx, s, x.node, root)) return 0;
    if (!match_add(ctx, s, x.node, c) && !match_conv(ctx, s, x.node, c)) return 0;
    c->relu = r->op == FG_OP_RELU, c->clip = r->op == FG_OP_CLIP;
  } else if (r->op != FG_OP_ADD || !match_add(ctx, s, root, c)) {
    return 0;
  }
  const fg_node *cv = &g->nodes[c->conv];
  for (int i = 0; i < cv->n_inputs; i++)
    if (!fg_epi_readable_at_root(g, cv->inputs[i], c->conv, root)) return 0;
  return c->add < 0 || fg_epi_readable_at_root(g, c->z, c->add, root);
}

/* conv2d's attributes (those it has) onto the root's, and the activation
 * (a clip root keeps its own attributes, min and max). */
static int set_attrs(fg_pass_ctx *ctx, const conv_chain *c) {
  static const char *const names[] = {"strides", "pads", "dilations", "groups", "auto_pad"};
  const fg_node *cv = &ctx->w->g.nodes[c->conv];
  fg_node *n = &ctx->w->g.nodes[c->root];
  if (fg_pass_graph_own_attrs(ctx->w, c->root) != 0) return -1;
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    const fg_attr *a = fg_attrs_find(&cv->attrs, names[k]);
    int rc = 0;
    if (!a) continue;
    if (a->type == FG_ATTR_INTS)
      rc = fg_attrs_set_ints(&n->attrs, a->name, a->ints, a->n);
    else if (a->type == FG_ATTR_INT)
      rc = fg_attrs_set_int(&n->attrs, a->name, a->i);
    else if (a->type == FG_ATTR_STRING)
      rc = fg_attrs_set_string(&n->attrs, a->name, a->s);
    if (rc != 0) return -1;
  }
  return fg_attrs_set_string(&n->attrs, "activation", c->relu ? "relu" : c->clip ? "clip" : "none");
}

/* Root rewritten in place into fused_conv2d(x, w[, b]) or
 * fused_conv2d_add(x, w, z[, b]); -1 out of memory. */
static int rewrite_root(fg_pass_ctx *ctx, const conv_chain *c) {
  fg_graph *g = &ctx->w->g;
  const fg_node *cv = &g->nodes[c->conv];
  fg_output in[4] = {cv->inputs[0], cv->inputs[1]};
  int n_in = 2;
  if (c->add >= 0) in[n_in++] = c->z;
  if (cv->n_inputs > 2) in[n_in++] = cv->inputs[2];
  fg_node *n = &g->nodes[c->root];
  fg_output *mem = realloc(n->inputs, (size_t)n_in * sizeof *mem);
  if (!mem) return -1;
  n->inputs = mem;
  if (set_attrs(ctx, c) != 0) return -1;
  memcpy(mem, in, (size_t)n_in * sizeof *mem);
  n->n_inputs = n_in;
  n->op = c->add >= 0 ? FG_OP_FUSED_CONV2D_ADD : FG_OP_FUSED_CONV2D;
  return 0;
}

static int fuse_chain(fg_pass_ctx *ctx, fg_epi_state *s, const conv_chain *c, fg_status *st) {
  static const char *const rules[2][3] = {{"conv2d+add", "conv2d+add+relu", "conv2d+add+clip"},
                                          {"conv2d+relu", "conv2d+relu", "conv2d+clip"}};
  if (rewrite_root(ctx, c) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "conv_epilogue: out of memory");
    return -1;
  }
  const int parts[2] = {c->conv, c->add < 0 ? c->root : c->add};
  return fg_epi_absorb(ctx, s, parts, 2, c->root, rules[c->add < 0][c->relu + 2 * c->clip], st);
}

static int try_root(fg_pass_ctx *ctx, fg_epi_state *s, int root, fg_status *st) {
  conv_chain c;
  return match_chain(ctx, s, root, &c) ? fuse_chain(ctx, s, &c, st) : 0;
}

int fg_pass_conv_epilogue(fg_pass_ctx *ctx, fg_status *st) {
  static const int roots[3] = {FG_OP_RELU, FG_OP_CLIP, FG_OP_ADD};
  return fg_epi_run_ops(ctx, "conv_epilogue", roots, 3, try_root, st);
}
