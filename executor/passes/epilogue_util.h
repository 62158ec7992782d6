/* What the epilogue passes share (epilogue.c, epilogue_grad.c): who reads
 * each node, whether a node may be absorbed into a fused node rooted at
 * a later one, whether an input may be read at the root, and moving the
 * nodes that waited for an absorbed node onto the root. */
#ifndef FG_PASSES_EPILOGUE_UTIL_H
#define FG_PASSES_EPILOGUE_UTIL_H

#include "executor/passes/passes.h"

typedef struct fg_epi_state {
  int *uses;       /* per node: data input edges of live nodes that read it */
  int *ctrl_first; /* per node: the first live node that waits for it, or INT_MAX */
  char *absorbed;  /* per node: already part of a fused chain */
} fg_epi_state;

/* Resolves every node's inputs and fills s. 0, or -1 with the status set
 * (out of memory; `pass` names the pass in the message). */
int fg_epi_state_init(fg_pass_ctx *ctx, fg_epi_state *s, const char *pass, fg_status *st);
void fg_epi_state_free(fg_epi_state *s);

/* 1 when input i of n does not read its producer's values (it orders n
 * after it, or n reads only its shape and dtype): such an input may read
 * a fused root instead of an absorbed node of the same type. */
int fg_epi_ctrl_input(const fg_node *n, int i);

/* Node id may be absorbed into a node rooted at `root` (id < root): read
 * once (by the chain), waited for only by nodes after the root, live,
 * unpinned, one output, in root's group, and fetchable by nobody in
 * fg_optimize. The output's dtype is the caller's to check. */
int fg_epi_absorbable(const fg_pass_ctx *ctx, const fg_epi_state *s, int id, int root);

/* The fused node may read o (first read at node `from`) at the root: a
 * variable nobody writes in between, or no variable state at all (the
 * plan orders a variable's reads and writes by node id). */
int fg_epi_readable_at_root(const fg_graph *g, fg_output o, int from, int root);

/* The root's attributes made the copy's own, with transpose_a and
 * transpose_b set to the matmul mm's. 0 or -1 (out of memory). */
int fg_epi_take_transposes(fg_pass_ctx *ctx, int root, int mm);

/* Marks `part` absorbed into `root`: the nodes that waited for it wait for
 * the root, nothing reads it, it is dead unless kept (a session keeps
 * it), and the report says it was fused into the root by `rule`. 0 or -1
 * (out of memory, status set). */
int fg_epi_absorb(fg_pass_ctx *ctx, fg_epi_state *s, int part, int root, const char *rule,
                  fg_status *st);

#endif
