/* What the epilogue passes share: epilogue.c (matmul, bias add, relu into
 * fused_matmul), epilogue_conv.c (conv2d, residual add, relu into
 * fused_conv2d and fused_conv2d_add) and epilogue_grad.c (relu's gradient
 * into fused_matmul_relu_grad, weight and bias gradients into
 * matmul_bias_grad). All rewrite a chain in place at its
 * last node (the root) and absorb the nodes before it under the same
 * rules, stated here once:
 *
 * - an absorbed node has no consumer but the next node of the chain
 *   (nodes that only wait for it or read only its shape read the root
 *   instead, which has its type and run-time shape, so they must come
 *   after the root), is live, unpinned, in the root's device group, and
 *   in fg_optimize not kept (a kept node would be computed twice);
 * - what the fused node reads must not be variable state written between
 *   its first read and the root (the plan orders a variable's reads and
 *   writes by node id, and the root reads later);
 * - a session keeps every node (ctx->all_kept): there the absorbed nodes
 *   stay, computed only when a run fetches them, so a session fuses
 *   regardless of keep[]. */
#ifndef FG_PASSES_EPILOGUE_COMMON_H
#define FG_PASSES_EPILOGUE_COMMON_H

#include "executor/passes/passes.h"

typedef struct fg_epi_state {
  int *uses;       /* per node: data input edges of live nodes that read it */
  int *ctrl_first; /* per node: the first live node that waits for it, or INT_MAX */
  char *absorbed;  /* per node: already part of a fused chain */
} fg_epi_state;

int fg_epi_is_float(fg_dtype dt);
/* Node `root` may end a chain: live, not yet fused, unpinned, one float
 * output. */
int fg_epi_root_ok(const fg_pass_ctx *ctx, const fg_epi_state *s, int root);
/* Node id may be absorbed into the chain ending at `root` (rules above). */
int fg_epi_absorbable(const fg_pass_ctx *ctx, const fg_epi_state *s, int id, int root);
/* The fused node may read o (first read at node `from`) at the root. */
int fg_epi_readable_at_root(const fg_graph *g, fg_output o, int from, int root);
/* After the root was rewritten: the parts (the root among them is
 * skipped) are absorbed (waiters rewired to the root, dead in
 * fg_optimize) and everything is recorded under `rule`. 0 or -1. */
int fg_epi_absorb(fg_pass_ctx *ctx, fg_epi_state *s, const int *parts, int n_parts, int root,
                  const char *rule, fg_status *st);

/* Tries node `root` (a relu or an add) as the end of a chain and fuses
 * it: 0 (fused or not), or -1 with the status set. */
typedef int (*fg_epi_try_fn)(fg_pass_ctx *ctx, fg_epi_state *s, int root, fg_status *st);
/* Runs `try_root` on every relu and add from the last node back, so a
 * relu claims its add before the add is tried as a root of its own. */
int fg_epi_run(fg_pass_ctx *ctx, const char *pass, fg_epi_try_fn try_root, fg_status *st);

/* For epilogue_grad.c. */
/* fg_epi_absorbable whatever the node's output dtype: the relu gradient's
 * comparison, whose bool output nobody reads once it is absorbed. */
int fg_epi_absorbable_any(const fg_pass_ctx *ctx, const fg_epi_state *s, int id, int root);
/* fg_epi_absorbable_any for a node the chain reads `reads` times (and
 * nothing else reads): layer_norm.c's x - mean(x), squared and divided. */
int fg_epi_absorbable_reads(const fg_pass_ctx *ctx, const fg_epi_state *s, int id, int root,
                            int reads);
/* fg_epi_run over the nodes whose op is one of ops[0..n_ops), from the
 * last node back. */
int fg_epi_run_ops(fg_pass_ctx *ctx, const char *pass, const int *ops, int n_ops,
                   fg_epi_try_fn try_root, fg_status *st);

#endif
