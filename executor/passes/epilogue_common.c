/* The epilogue passes' shared rules (epilogue_common.h). */
#include <limits.h>
#include <stdlib.h>

#include "executor/passes/epilogue_common.h"
#include "graph/op_table.h"

/* Input i of n does not read its producer's values: it only orders n
 * after it (a group's inputs, and the control inputs past the fixed ones
 * of after and of the updates: the optimizers order each variable's
 * update after the nodes that read it this way), or n reads only its
 * shape and dtype (the like input of sum_to, broadcast_like and
 * reshape_like, which gradients make with an unknown batch dim; zeros_like,
 * ones_like, numel). Such an input may read the root instead: it has the
 * type and run-time shape of the nodes a chain absorbs (a matmul or a
 * conv2d, and an add). */
static int ctrl_input(const fg_node *n, int i) {
  const fg_op_def *d = &fg_op_table[n->op];
  switch (n->op) {
  case FG_OP_GROUP: return 1;
  case FG_OP_SUM_TO:
  case FG_OP_BROADCAST_LIKE:
  case FG_OP_RESHAPE_LIKE: return i == 1;
  case FG_OP_ZEROS_LIKE:
  case FG_OP_ONES_LIKE:
  case FG_OP_NUMEL: return i == 0;
  default:
    if (d->mutable_lists) return i >= fg_multi_update_inputs(n);
    return d->max_inputs < 0 && i >= d->min_inputs &&
           (n->op == FG_OP_AFTER || d->mutable_inputs != 0);
  }
}

static int count_uses(const fg_pass_ctx *ctx, fg_epi_state *s) {
  const fg_graph *g = &ctx->w->g;
  size_t n = (size_t)g->n_nodes + 1;
  s->uses = calloc(n, sizeof *s->uses);
  s->ctrl_first = malloc(n * sizeof *s->ctrl_first);
  s->absorbed = calloc(n, 1);
  if (!s->uses || !s->ctrl_first || !s->absorbed) return -1;
  for (int id = 0; id < g->n_nodes; id++)
    s->ctrl_first[id] = INT_MAX;
  for (int id = 0; id < g->n_nodes; id++) {
    if (ctx->dead[id]) continue;
    for (int i = 0; i < g->nodes[id].n_inputs; i++) {
      int p = g->nodes[id].inputs[i].node;
      if (!ctrl_input(&g->nodes[id], i))
        s->uses[p]++;
      else if (id < s->ctrl_first[p])
        s->ctrl_first[p] = id;
    }
  }
  return 0;
}

/* Resolves every node's inputs and counts the uses. 0, or -1 with the
 * status set (out of memory; `pass` names the pass). */
static int state_init(fg_pass_ctx *ctx, fg_epi_state *s, const char *pass, fg_status *st) {
  for (int id = 0; id < ctx->w->g.n_nodes; id++)
    fg_pass_resolve_inputs(ctx, id);
  s->uses = NULL, s->ctrl_first = NULL, s->absorbed = NULL;
  if (count_uses(ctx, s) == 0) return 0;
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "%s: out of memory", pass);
  return -1;
}

static void state_free(fg_epi_state *s) {
  free(s->uses);
  free(s->ctrl_first);
  free(s->absorbed);
}

int fg_epi_is_float(fg_dtype dt) { return dt == FG_F32 || dt == FG_F64; }

int fg_epi_root_ok(const fg_pass_ctx *ctx, const fg_epi_state *s, int root) {
  const fg_node *r = &ctx->w->g.nodes[root];
  return !ctx->dead[root] && !s->absorbed[root] && !fg_pass_node_pinned(r) && r->n_outputs == 1 &&
         fg_epi_is_float(r->outputs[0].dtype);
}

/* Node id may be absorbed into a chain rooted at `root`: read once (by the
 * chain), waited for only by nodes after the root, live, unpinned, in
 * root's group, and fetchable by nobody in fg_optimize. */
int fg_epi_absorbable_any(const fg_pass_ctx *ctx, const fg_epi_state *s, int id, int root) {
  return fg_epi_absorbable_reads(ctx, s, id, root, 1);
}

int fg_epi_absorbable_reads(const fg_pass_ctx *ctx, const fg_epi_state *s, int id, int root,
                            int reads) {
  const fg_node *n = &ctx->w->g.nodes[id];
  if (ctx->dead[id] || s->absorbed[id] || s->uses[id] != reads || fg_pass_node_pinned(n)) return 0;
  /* Nodes that wait for it will wait for the root instead: after it. */
  if (s->ctrl_first[id] <= root) return 0;
  if (!ctx->all_kept && ctx->keep[id]) return 0;
  if (n->n_outputs != 1) return 0;
  return !ctx->group || ctx->group[id] == ctx->group[root];
}

int fg_epi_absorbable(const fg_pass_ctx *ctx, const fg_epi_state *s, int id, int root) {
  return fg_epi_absorbable_any(ctx, s, id, root) &&
         fg_epi_is_float(ctx->w->g.nodes[id].outputs[0].dtype);
}

/* The fused node may read o (first read at node `from`) at the root: a
 * variable nobody writes in between, or no variable state at all. */
int fg_epi_readable_at_root(const fg_graph *g, fg_output o, int from, int root) {
  int op = g->nodes[o.node].op;
  if (op == FG_OP_VARIABLE) return !fg_pass_written_between(g, o.node, from, root);
  return op != FG_OP_ASSIGN && fg_op_table[op].mutable_inputs == 0;
}

/* Nodes that waited for `part` wait for the root: it reads what part
 * read (the optimizers order a variable's update after its readers). */
static void rewire_waiters(fg_pass_ctx *ctx, int part, int root) {
  fg_graph *g = &ctx->w->g;
  for (int id = root + 1; id < g->n_nodes; id++) {
    fg_node *n = &g->nodes[id];
    for (int i = 0; !ctx->dead[id] && i < n->n_inputs; i++)
      if (n->inputs[i].node == part && ctrl_input(n, i)) n->inputs[i] = (fg_output){root, 0};
  }
}

int fg_epi_absorb(fg_pass_ctx *ctx, fg_epi_state *s, const int *parts, int n_parts, int root,
                  const char *rule, fg_status *st) {
  const char *into = ctx->w->g.nodes[root].name;
  for (int k = 0; k < n_parts; k++) {
    if (parts[k] == root) continue;
    s->absorbed[parts[k]] = 1;
    if (s->ctrl_first[parts[k]] != INT_MAX) rewire_waiters(ctx, parts[k], root);
    /* Nothing reads it now; fg_optimize drops it, a session keeps it. */
    s->uses[parts[k]] = 0;
    fg_pass_retire(ctx, parts[k]);
    if (fg_pass_record(ctx, parts[k], "fused", into, rule, st) != 0) return -1;
  }
  return fg_pass_record(ctx, root, "fused", into, rule, st);
}

int fg_epi_run(fg_pass_ctx *ctx, const char *pass, fg_epi_try_fn try_root, fg_status *st) {
  static const int ops[2] = {FG_OP_RELU, FG_OP_ADD};
  return fg_epi_run_ops(ctx, pass, ops, 2, try_root, st);
}

int fg_epi_run_ops(fg_pass_ctx *ctx, const char *pass, const int *ops, int n_ops,
                   fg_epi_try_fn try_root, fg_status *st) {
  const fg_graph *g = &ctx->w->g;
  fg_epi_state s;
  int rc = state_init(ctx, &s, pass, st);
  for (int id = g->n_nodes - 1; rc == 0 && id >= 0; id--)
    for (int k = 0; k < n_ops; k++)
      if (g->nodes[id].op == ops[k]) {
        rc = try_root(ctx, &s, id, st);
        break;
      }
  state_free(&s);
  return rc;
}
