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

/* Per-family registration tables, each ending with {-1, NULL}. */
typedef struct fg_grad_reg {
  int op;
  fg_grad_fn fn;
} fg_grad_reg;
extern const fg_grad_reg fg_grads_math[];  /* autodiff/grad_math.c */
extern const fg_grad_reg fg_grads_shape[]; /* autodiff/grad_shape.c */
extern const fg_grad_reg fg_grads_conv[];  /* autodiff/grad_conv.c */
#endif
