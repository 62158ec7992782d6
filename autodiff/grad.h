/* The gradient registry: one function per op that appends the backward
 * nodes of one node. The registry is indexed by op id (graph/op_table.h);
 * a test fails when an op flagged FG_OPF_DIFFERENTIABLE has no entry. */
#ifndef FG_GRAD_H
#define FG_GRAD_H

#include "graph/graph_internal.h"
#include "graph/op_table.h"

typedef struct fg_grad_ctx {
  fg_graph *g;
  int node;            /* the forward node being differentiated */
  const fg_output *dy; /* one per output of the node; node < 0 means zero
                          (no gradient flows into that output) */
  fg_output *dx;       /* one per input, to fill; leave FG_NO_OUTPUT where
                          no gradient flows (non-differentiable input) */
  const char *wants;   /* wants[i] != 0: input i's gradient is needed; others
                          may be left FG_NO_OUTPUT to save nodes */
} fg_grad_ctx;

/* Appends nodes with the graph's builders (automatic names, which carry the
 * "gradients/" scope). Returns 0, or -1 after fg_graph_fail() naming the
 * node (FG_UNIMPLEMENTED for an unsupported case). */
typedef int (*fg_grad_fn)(fg_grad_ctx *ctx);

/* The registry, indexed by op id; NULL: no gradient. */
fg_grad_fn fg_grad_lookup(int op);

/* Helpers shared by gradient functions. */
/* x reduced (summed) to the runtime shape of `like` (undoes broadcasting). */
fg_output fg_grad_sum_to(fg_graph *g, fg_output x, fg_output like);
/* The i-th input of node `node` as an fg_output. */
fg_output fg_grad_input(const fg_grad_ctx *ctx, int i);
/* Output i of the forward node. */
fg_output fg_grad_output(const fg_grad_ctx *ctx, int i);
/* A fresh set holding the forward node's attributes among names[0..n)
 * (those present; int, ints, float or string), to be taken before any node
 * is appended (appending may move the node array). NULL after failing the
 * graph when out of memory. */
fg_attrs *fg_grad_copy_attrs(const fg_grad_ctx *ctx, const char *const *names, int n);

/* What a reduce node did, read once (the node array may move later). */
typedef struct fg_grad_reduce_info {
  fg_output x, y;
  int rank; /* of x */
  int keepdims;
  int all;    /* every axis reduced */
  int n_axes; /* reduced axes, sorted, non-negative */
  int64_t axes[FG_MAX_RANK];
  int64_t count; /* reduced elements per output, -1 unknown */
} fg_grad_reduce_info;
/* Reads the reduce node's input, output, axes and keepdims: 0, or -1
 * after fg_graph_fail(). */
int fg_grad_reduce_read(fg_grad_ctx *ctx, fg_grad_reduce_info *r);
/* dy in the keepdims layout, so that it broadcasts against x. */
fg_output fg_grad_reduce_keep(fg_graph *g, const fg_grad_reduce_info *r, fg_output dy);
/* The reductions' gradients differ only in the rule mapping dy to dx;
 * fg_grad_reduce reads the node and applies one (autodiff/grad_math.c). */
typedef fg_output (*fg_grad_reduce_rule)(fg_graph *g, const fg_grad_reduce_info *r, fg_output dy);
int fg_grad_reduce(fg_grad_ctx *ctx, fg_grad_reduce_rule rule);
/* reduce_max's and reduce_min's rule: dy shared equally among the tied
 * extremes (x == y), 0 elsewhere. */
fg_output fg_grad_extreme_rule(fg_graph *g, const fg_grad_reduce_info *r, fg_output dy);

/* Per-family registration tables, each ending with {-1, NULL}. */
typedef struct fg_grad_reg {
  int op;
  fg_grad_fn fn;
} fg_grad_reg;
extern const fg_grad_reg fg_grads_math[];      /* autodiff/grad_math.c */
extern const fg_grad_reg fg_grads_shape[];     /* autodiff/grad_shape.c */
extern const fg_grad_reg fg_grads_reduce2[];   /* autodiff/grad_reduce2.c */
extern const fg_grad_reg fg_grads_shape_ops[]; /* autodiff/grad_shape_ops.c */
extern const fg_grad_reg fg_grads_pool[];      /* autodiff/grad_pool.c */
extern const fg_grad_reg fg_grads_resize[];    /* autodiff/grad_resize.c */
extern const fg_grad_reg fg_grads_norm[];      /* autodiff/grad_norm.c */
extern const fg_grad_reg fg_grads_dropout[];   /* autodiff/grad_dropout.c */
extern const fg_grad_reg fg_grads_conv[];      /* autodiff/grad_conv.c */
#endif
