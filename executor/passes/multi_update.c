/* Multi-tensor optimizer updates: a step's apply_sgd, apply_momentum or
 * apply_adam nodes of one dtype, with the same learning rate (and Adam's
 * step) and the same hyper-parameters, become one multi_apply_* node
 * whose kernel updates every variable in one parallel loop on the CPU and
 * one launch per 32 variables on the GPU, as torch.optim's foreach and
 * fused implementations do. Each element gets the single update's
 * arithmetic, so the bits are the same.
 *
 * Where the node goes. Node ids stay topological and nothing is added, so
 * the group's first update (the lowest id, m0) is rewritten in place into
 * the multi node: its name and output (variable 0, updated) stay. Every
 * input of every member (its gradient, scalars and control inputs) must
 * therefore come before m0, which holds for fg_minimize's graphs: it makes
 * every update after every gradient; but for the variables the updates
 * write, which fg_minimize makes next to each update (momentum buffers,
 * Adam's moments): a session plans sources first whatever their ids, and
 * fg_optimize puts a variable read by an earlier node first. Each other member k is rewritten in
 * place into after(var_k, m0): a run that fetches it gets variable k as
 * updated, once, and a group that waited for it (the train target) waits
 * for m0 instead. The copy records each member's group (multi_of): a
 * session plans a run that needs some of a group's updates but not all
 * on its source graph, so that it updates those variables only.
 *
 * Moving member k's write from its own id up to m0 must not change what
 * any node reads: no node between m0 and member k may touch variable k or
 * its state (the plan orders a variable's reads and writes by node id).
 * Members lie in one device group.
 *
 * Memory. A single update runs as soon as its gradient exists, beside the
 * rest of the backward pass, and frees the gradient's buffer; a multi
 * update waits for all its members' gradients, holding them. So a group
 * takes at most group_cap elements of variables, taken in node order
 * (fg_minimize's variables come layer by layer, so their gradients come
 * at nearby times), and a larger variable keeps its own update and frees
 * its gradient early. On a GPU, where each launch costs microseconds and
 * a few MiB update in about as long, the cap is 2^20 elements (4 MiB of
 * f32); on the CPU, where a node costs a fraction of a microsecond, only
 * small variables gain, and the cap is 2^16 (256 KiB of f32: the medium
 * MLP's arena grew from 1.78 to 2.80 MiB at 2^20). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"
#include "graph/op_table.h"

enum { GPU_GROUP_ELEMS = 1 << 20, CPU_GROUP_ELEMS = 1 << 16 };

/* One rule: its single and multi ops, and its lists before the gradient. */
typedef struct rule_ops {
  int single, multi, state_lists, n_fixed;
} rule_ops;

static const rule_ops rules[] = {
    {FG_OP_APPLY_SGD, FG_OP_MULTI_APPLY_SGD, 1, 3},
    {FG_OP_APPLY_MOMENTUM, FG_OP_MULTI_APPLY_MOMENTUM, 2, 4},
    {FG_OP_APPLY_ADAM, FG_OP_MULTI_APPLY_ADAM, 3, 6},
};

static const rule_ops *rule_of(int op) {
  for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++)
    if (rules[r].single == op) return &rules[r];
  return NULL;
}

/* The same update rule and hyper-parameters, scalars and dtype. */
static int same_update(const fg_node *a, const fg_node *b) {
  static const char *const hyper[] = {"momentum", "beta1",        "beta2",
                                      "epsilon",  "weight_decay", "l2"};
  const rule_ops *r = rule_of(a->op);
  if (a->op != b->op || a->outputs[0].dtype != b->outputs[0].dtype) return 0;
  for (int i = r->state_lists + 1; i < r->n_fixed; i++) /* lr, step */
    if (a->inputs[i].node != b->inputs[i].node || a->inputs[i].index != b->inputs[i].index)
      return 0;
  if (fg_attr_int_or(a, "nesterov", 0) != fg_attr_int_or(b, "nesterov", 0)) return 0;
  for (size_t h = 0; h < sizeof hyper / sizeof hyper[0]; h++) {
    const fg_attr *x = fg_attrs_find(&a->attrs, hyper[h]), *y = fg_attrs_find(&b->attrs, hyper[h]);
    if (!x != !y || (x && fg_attr_float_or(a, hyper[h], 0) != fg_attr_float_or(b, hyper[h], 0)))
      return 0;
  }
  return 1;
}

typedef struct mu_state {
  fg_pass_ctx *ctx;
  int *touch_start, *touch; /* per node, the live nodes that read it, ascending (CSR) */
  int *members, n_members;  /* the open group, ascending ids */
  int64_t elems;            /* the open group's variables' elements */
  int64_t cap;              /* at most this many */
} mu_state;

/* Elements of the variable node u updates, or -1 when unknown. */
static int64_t var_elems(const fg_graph *g, int u) {
  const fg_tinfo *t = &g->nodes[u].outputs[0];
  int64_t e = 1;
  for (int d = 0; d < t->rank; d++) {
    if (t->dims[d] < 0) return -1;
    e *= t->dims[d];
  }
  return e;
}

/* Readers of every node, ascending: touch[touch_start[v] .. touch_start[v+1]). */
static int build_touch(mu_state *S) {
  const fg_graph *g = &S->ctx->w->g;
  const int n = g->n_nodes;
  int *start = calloc((size_t)n + 2, sizeof *start), total = 0;
  if (!start) return -1;
  for (int id = 0; id < n; id++)
    for (int i = 0; !S->ctx->dead[id] && i < g->nodes[id].n_inputs; i++, total++)
      start[g->nodes[id].inputs[i].node + 2]++;
  for (int v = 0; v < n; v++)
    start[v + 2] += start[v + 1];
  int *touch = malloc(((size_t)total + 1) * sizeof *touch);
  if (!touch) return free(start), -1;
  for (int id = 0; id < n; id++)
    for (int i = 0; !S->ctx->dead[id] && i < g->nodes[id].n_inputs; i++)
      touch[start[g->nodes[id].inputs[i].node + 1]++] = id;
  S->touch_start = start, S->touch = touch;
  return 0;
}

/* 1 when a node with an id in (lo, hi) reads node v. */
static int touched_between(const mu_state *S, int v, int lo, int hi) {
  for (int j = S->touch_start[v]; j < S->touch_start[v + 1]; j++)
    if (S->touch[j] > lo && S->touch[j] < hi) return 1;
  return 0;
}

/* 1 when update u may join the open group (first member m0). */
static int can_join(const mu_state *S, int u) {
  const fg_pass_ctx *ctx = S->ctx;
  const fg_graph *g = &ctx->w->g;
  const int m0 = S->members[0];
  const fg_node *n = &g->nodes[u];
  const rule_ops *r = rule_of(n->op);
  const int64_t e = var_elems(g, u);
  if (!same_update(&g->nodes[m0], n) || e < 0 || S->elems + e > S->cap) return 0;
  if (ctx->group && ctx->group[u] != ctx->group[m0]) return 0;
  /* Variables are sources, which plans take first whatever their ids;
   * fg_optimize's compaction moves them up (fg_optimize: the optimizers
   * make each state variable just before its update). */
  for (int i = 0; i < n->n_inputs; i++) {
    const int q = n->inputs[i].node;
    if (q >= m0 && !(i < r->state_lists && g->nodes[q].op == FG_OP_VARIABLE)) return 0;
  }
  for (int l = 0; l < r->state_lists; l++) {
    const int v = n->inputs[l].node;
    if (touched_between(S, v, m0, u)) return 0;
    for (int k = 0; k < S->n_members; k++)
      for (int l2 = 0; l2 < r->state_lists; l2++)
        if (g->nodes[S->members[k]].inputs[l2].node == v) return 0;
  }
  return 1;
}

/* 1 for an update this pass may take: live, one rule, a float output. */
static int candidate(const fg_pass_ctx *ctx, int id) {
  const fg_node *n = &ctx->w->g.nodes[id];
  return !ctx->dead[id] && rule_of(n->op) && n->n_outputs == 1 &&
         n->n_inputs >= rule_of(n->op)->n_fixed;
}

/* The multi node's inputs: the lists, the scalars, then each member's
 * control inputs (once each). NULL when out of memory. */
static fg_output *multi_inputs(const mu_state *S, int *n_in) {
  const fg_graph *g = &S->ctx->w->g;
  const fg_node *first = &g->nodes[S->members[0]];
  const rule_ops *r = rule_of(first->op);
  const int lists = r->state_lists + 1, nm = S->n_members;
  int cap = lists * nm + (r->n_fixed - lists);
  for (int k = 0; k < nm; k++)
    cap += g->nodes[S->members[k]].n_inputs - r->n_fixed;
  fg_output *in = malloc(((size_t)cap + 1) * sizeof *in);
  if (!in) return NULL;
  int c = 0;
  for (int l = 0; l < lists; l++)
    for (int k = 0; k < nm; k++)
      in[c++] = g->nodes[S->members[k]].inputs[l];
  for (int i = lists; i < r->n_fixed; i++)
    in[c++] = first->inputs[i];
  const int fixed = c;
  for (int k = 0; k < nm; k++) {
    const fg_node *m = &g->nodes[S->members[k]];
    for (int i = r->n_fixed; i < m->n_inputs; i++) {
      int seen = 0;
      for (int j = fixed; j < c && !seen; j++)
        seen = in[j].node == m->inputs[i].node && in[j].index == m->inputs[i].index;
      if (!seen) in[c++] = m->inputs[i];
    }
  }
  *n_in = c;
  return in;
}

/* A group that waits for member u (fg_minimize's train target) waits for
 * m0 instead: both stand for the same multi update, and the group reads
 * no bytes. Then nothing but a fetch needs u's after node, whose copy of
 * variable k a run planned it for (an after of a variable's bytes is a
 * copy: the variable outlives the arena) and the plan skips it. m0 is
 * listed once. A group's inputs only order it and carry no bytes between
 * devices, so a group of another device group is rewired too. */
static void rewire_groups(fg_pass_ctx *ctx, int u, int m0) {
  fg_graph *g = &ctx->w->g;
  for (int c = u + 1; c < g->n_nodes; c++) {
    fg_node *n = &g->nodes[c];
    if (ctx->dead[c] || n->op != FG_OP_GROUP) continue;
    int has_m0 = 0, k = 0;
    for (int i = 0; i < n->n_inputs; i++)
      has_m0 |= n->inputs[i].node == m0;
    for (int i = 0; i < n->n_inputs; i++) {
      fg_output in = n->inputs[i];
      if (in.node == u) {
        if (has_m0) continue;
        in = (fg_output){m0, 0};
        has_m0 = 1;
      }
      n->inputs[k++] = in;
    }
    n->n_inputs = k;
  }
}

/* Records the open group's members in w->multi_of (made on first use).
 * 0 or -1 (out of memory). */
static int record_members(const mu_state *S) {
  fg_pass_graph *w = S->ctx->w;
  if (!w->multi_of) {
    w->multi_of = malloc(((size_t)w->n_src + 1) * sizeof *w->multi_of);
    if (!w->multi_of) return -1;
    for (int id = 0; id < w->n_src; id++)
      w->multi_of[id] = -1;
  }
  for (int k = 0; k < S->n_members; k++)
    if (S->members[k] < w->n_src) w->multi_of[S->members[k]] = S->members[0];
  return 0;
}

/* Rewrites the open group: m0 into the multi node, the others into
 * after(var_k, m0). 0 or -1 (out of memory). */
static int rewrite_group(mu_state *S, fg_status *st) {
  fg_pass_ctx *ctx = S->ctx;
  fg_pass_graph *w = ctx->w;
  const int m0 = S->members[0];
  if (record_members(S) != 0) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "multi_update: out of memory");
    return -1;
  }
  const rule_ops *r = rule_of(w->g.nodes[m0].op);
  struct fg_attrs a = {0};
  int n_in = 0, rc = -1;
  fg_output *in = multi_inputs(S, &n_in);
  if (in && fg_attrs_copy(&a, &w->g.nodes[m0].attrs) == 0 &&
      fg_attrs_set_int(&a, "n", S->n_members) == 0 &&
      fg_pass_graph_set_op(w, m0, r->multi, in, n_in) == 0 &&
      fg_pass_graph_set_attrs(w, m0, &a) == 0)
    rc = 0;
  free(in);
  fg_attrs_clear(&a);
  const char *into = w->g.nodes[m0].name;
  if (rc == 0) rc = fg_pass_record(ctx, m0, "fused", fg_op_table[r->multi].name, NULL, st);
  for (int k = 1; rc == 0 && k < S->n_members; k++) {
    const int u = S->members[k];
    const fg_output after_in[2] = {w->g.nodes[u].inputs[0], {m0, 0}};
    rc = fg_pass_graph_set_op(w, u, FG_OP_AFTER, after_in, 2);
    if (rc == 0) rewire_groups(ctx, u, m0);
    if (rc == 0) rc = fg_pass_record(ctx, u, "absorbed", into, NULL, st);
  }
  if (rc != 0 && fg_status_code(st) == FG_OK)
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "multi_update: out of memory");
  return rc;
}

/* Closes the open group: rewritten when it has two members or more. */
static int close_group(mu_state *S, fg_status *st) {
  int rc = S->n_members >= 2 ? rewrite_group(S, st) : 0;
  S->n_members = 0;
  return rc;
}

int fg_pass_multi_update(fg_pass_ctx *ctx, fg_status *st) {
  const int n = ctx->w->g.n_nodes;
  mu_state S = {ctx,
                NULL,
                NULL,
                malloc(((size_t)n + 1) * sizeof(int)),
                0,
                0,
                ctx->w->gpu ? GPU_GROUP_ELEMS : CPU_GROUP_ELEMS};
  for (int id = 0; id < n; id++)
    fg_pass_resolve_inputs(ctx, id);
  int rc = S.members && build_touch(&S) == 0 ? 0 : -1;
  if (rc != 0) fg_status_set(st, FG_RESOURCE_EXHAUSTED, "multi_update: out of memory");
  /* One group per rule, dtype, scalars and hyper-parameters at a time, in
   * id order: an update that cannot join closes the open group of its
   * kind only when it is of that kind, so one pass per rule. */
  for (size_t r = 0; rc == 0 && r < sizeof rules / sizeof rules[0]; r++) {
    char *done = calloc((size_t)n + 1, 1);
    if (!done) {
      rc = -1;
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "multi_update: out of memory");
      break;
    }
    for (int start = 0; rc == 0 && start < n; start++) {
      if (done[start] || ctx->w->g.nodes[start].op != rules[r].single || !candidate(ctx, start))
        continue;
      S.members[0] = start, S.n_members = 1, done[start] = 1;
      S.elems = var_elems(&ctx->w->g, start);
      for (int u = start + 1; u < n && S.elems >= 0; u++)
        if (!done[u] && ctx->w->g.nodes[u].op == rules[r].single && candidate(ctx, u) &&
            can_join(&S, u)) {
          S.members[S.n_members++] = u, done[u] = 1;
          S.elems += var_elems(&ctx->w->g, u);
        }
      rc = close_group(&S, st);
    }
    free(done);
  }
  free(S.touch_start);
  free(S.touch);
  free(S.members);
  return rc;
}
