/* The helpers every pass uses: replacements, what must stay, what a pass
 * may not touch, and recording changes (passes.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"
#include "graph/fused_program.h"
#include "graph/op_table.h"
#include "kernels/cuda/nvrtc_cache.h"

fg_output fg_pass_resolve(const fg_pass_ctx *ctx, fg_output o) {
  /* Replacements point at earlier nodes, so this ends. */
  while (o.node >= 0 && ctx->fwd[o.node].node >= 0) {
    fg_output f = ctx->fwd[o.node];
    o = (fg_output){f.node, f.index < 0 ? o.index : f.index};
  }
  return o;
}

void fg_pass_count_uses(const fg_pass_ctx *ctx, int *uses) {
  const fg_graph *g = &ctx->w->g;
  memset(uses, 0, (size_t)g->n_nodes * sizeof *uses);
  for (int id = 0; id < g->n_nodes; id++)
    for (int i = 0; !ctx->dead[id] && i < g->nodes[id].n_inputs; i++)
      uses[fg_pass_resolve(ctx, g->nodes[id].inputs[i]).node]++;
}

void fg_pass_resolve_inputs(fg_pass_ctx *ctx, int id) {
  fg_node *n = &ctx->w->g.nodes[id];
  for (int i = 0; i < n->n_inputs; i++)
    n->inputs[i] = fg_pass_resolve(ctx, n->inputs[i]);
}

/* Variable state: a variable, or the output of an op that writes one (it
 * aliases the variable). Such a value depends on when it is read: the plan
 * orders each variable's reads and writes by node id, so a consumer that
 * read it through another node must keep doing so. */
static int state_valued(const fg_graph *g, fg_output o) {
  int op = g->nodes[o.node].op;
  return op == FG_OP_VARIABLE || op == FG_OP_ASSIGN || fg_op_table[op].mutable_inputs != 0;
}

int fg_pass_can_replace(const fg_pass_ctx *ctx, int id, fg_output by) {
  if (ctx->group && ctx->group[id] != ctx->group[by.node]) return 0;
  return !state_valued(&ctx->w->g, by);
}

/* 1 when node n writes variable node v in place (assign, the updates). */
static int node_writes(const fg_node *n, int v) {
  for (int i = 0; i < n->n_inputs; i++)
    if (n->inputs[i].node == v && (n->op == FG_OP_ASSIGN ? i == 0 : fg_node_writes_input(n, i)))
      return 1;
  return 0;
}

int fg_pass_written_between(const fg_graph *g, int v, int lo, int hi) {
  for (int k = lo + 1; k < hi; k++)
    if (node_writes(&g->nodes[k], v)) return 1;
  return 0;
}

int fg_pass_node_pinned(const fg_node *n) {
  unsigned f = fg_op_table[n->op].flags;
  return (f & (FG_OPF_STATEFUL | FG_OPF_COLLECTIVE | FG_OPF_RANDOM)) != 0 ||
         n->op == FG_OP_PLACEHOLDER || fg_op_reads_run_state(n->op);
}

int fg_pass_tinfo_equal(const fg_tinfo *a, const fg_tinfo *b) {
  return a->dtype == b->dtype && a->rank == b->rank &&
         memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims) == 0;
}

int fg_pass_str_equal(const char *a, const char *b) {
  return (!a || !b) ? a == b : strcmp(a, b) == 0;
}

const fg_tensor *fg_pass_const_value(const fg_graph *g, fg_output o) {
  const fg_node *n = &g->nodes[o.node];
  if (n->op != FG_OP_CONSTANT || o.index != 0) return NULL;
  const fg_attr *v = fg_attrs_find(&n->attrs, "value");
  return v && v->type == FG_ATTR_TENSOR ? v->t : NULL;
}

int fg_pass_fusion_allowed(const fg_pass_ctx *ctx) {
  return !ctx->w->gpu || fgc_nvrtc_available(NULL, 0);
}

int fg_pass_fused_attrs(const fg_node *like, const fg_fused_params *p, struct fg_attrs *a) {
  char text[8192];
  memset(a, 0, sizeof *a);
  if (fg_fused_format(p, text, sizeof text) < 0) return 1;
  const fg_attr *co = fg_attrs_find(&like->attrs, FG_COLOCATE_ATTR);
  if (fg_attrs_set_string(a, "program", text) != 0 ||
      (co && co->type == FG_ATTR_STRING && co->s &&
       fg_attrs_set_string(a, FG_COLOCATE_ATTR, co->s) != 0)) {
    fg_attrs_clear(a);
    return -1;
  }
  return 0;
}

int fg_pass_record(fg_pass_ctx *ctx, int id, const char *action, const char *into, const char *rule,
                   fg_status *st) {
  if (!ctx->report) return 0;
  if (fg_pass_report_add(ctx->report, ctx->pass, action, ctx->w->g.nodes[id].name, into, rule) == 0)
    return 0;
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "passes: out of memory (report)");
  return -1;
}

/* Room in fwd, dead, keep and group for one more node. 0 or -1. */
static int reserve_ctx(fg_pass_ctx *ctx) {
  if (ctx->w->g.n_nodes < ctx->cap) return 0;
  int cap = ctx->cap + ctx->cap / 4 + 8;
  fg_output *fwd = realloc(ctx->fwd, ((size_t)cap + 1) * sizeof *fwd);
  if (fwd) ctx->fwd = fwd;
  unsigned char *dead = realloc(ctx->dead, (size_t)cap + 1);
  if (dead) ctx->dead = dead;
  unsigned char *keep = realloc(ctx->keep, (size_t)cap + 1);
  if (keep) ctx->keep = keep;
  int *group = ctx->group ? realloc(ctx->group, ((size_t)cap + 1) * sizeof *group) : NULL;
  if (group) ctx->group = group;
  if (!fwd || !dead || !keep || (ctx->group && !group)) return -1;
  ctx->cap = cap;
  return 0;
}

int fg_pass_add_constant(fg_pass_ctx *ctx, int node, const char *suffix, fg_tensor *value,
                         fg_status *st) {
  char name[512];
  snprintf(name, sizeof name, "%s/%s", ctx->w->g.nodes[node].name, suffix);
  int id = -1;
  if (ctx->w->may_append && reserve_ctx(ctx) == 0)
    id = fg_pass_graph_append_constant(ctx->w, name, value, node);
  else
    fg_tensor_free(value);
  if (id < 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "passes: out of memory (constant '%s')", name);
    return -1;
  }
  ctx->fwd[id] = (fg_output){-1, -1};
  ctx->dead[id] = ctx->keep[id] = 0;
  if (ctx->group) ctx->group[id] = ctx->group[node];
  return id;
}

void fg_pass_retire(fg_pass_ctx *ctx, int id) {
  if (!ctx->keep[id] || ctx->all_kept) ctx->dead[id] = 1;
}

int fg_pass_replace(fg_pass_ctx *ctx, int id, fg_output by, const char *action, const char *rule,
                    fg_status *st) {
  ctx->fwd[id] = by;
  fg_pass_retire(ctx, id);
  const fg_node *b = &ctx->w->g.nodes[by.node];
  char into[512];
  if (by.index <= 0)
    snprintf(into, sizeof into, "%s", b->name);
  else
    snprintf(into, sizeof into, "%s:%d", b->name, by.index);
  return fg_pass_record(ctx, id, action, into, rule, st);
}

/* A node whose run has an effect or whose value is session state. */
static int always_kept(const fg_node *n) {
  return n->op == FG_OP_VARIABLE || n->op == FG_OP_PLACEHOLDER ||
         (fg_op_table[n->op].flags & (FG_OPF_STATEFUL | FG_OPF_COLLECTIVE)) != 0;
}

void fg_pass_mark_keep(const fg_graph *g, const fg_output *fetches, int n_fetches,
                       unsigned char *keep) {
  for (int i = 0; i < n_fetches; i++)
    keep[fetches[i].node] = 1;
  for (int i = 0; i < g->n_outputs; i++)
    keep[g->outputs[i].node] = 1;
  if (n_fetches == 0 && g->n_outputs == 0) {
    /* Neither: every sink is a result someone may want. */
    for (int id = 0; id < g->n_nodes; id++)
      keep[id] = 1;
    for (int id = 0; id < g->n_nodes; id++)
      for (int i = 0; i < g->nodes[id].n_inputs; i++)
        keep[g->nodes[id].inputs[i].node] = 0;
  }
  for (int id = 0; id < g->n_nodes; id++)
    keep[id] |= always_kept(&g->nodes[id]);
}
