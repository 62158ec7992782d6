/* Common-subexpression elimination: a node equal to an earlier one (same
 * op, attributes, inputs after earlier merges, output types, device and
 * flags) is merged into it, so the value is computed once. Never merged:
 * pinned nodes (stateful, collective, random, placeholders), variables,
 * nodes that read what an update returns, and two reads of a variable
 * with a write of it between them. Attributes compare bit for bit (0.0
 * and -0.0 differ), so the merged graph computes the same bits. */
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

static uint64_t attr_hash(const fg_attr *a) {
  uint64_t h = fg_hash64(0x5eed, a->name, strlen(a->name));
  h = fg_hash64(h, &a->type, sizeof a->type);
  switch (a->type) {
  case FG_ATTR_INT: return fg_hash64(h, &a->i, sizeof a->i);
  case FG_ATTR_FLOAT: return fg_hash64(h, &a->f, sizeof a->f);
  case FG_ATTR_STRING: return a->s ? fg_hash64(h, a->s, strlen(a->s)) : h;
  case FG_ATTR_INTS: return fg_hash64(h, a->ints, (size_t)a->n * sizeof *a->ints);
  case FG_ATTR_FLOATS: return fg_hash64(h, a->floats, (size_t)a->n * sizeof *a->floats);
  case FG_ATTR_TENSOR:
    if (!a->t) return h;
    h = fg_hash64(h, &a->t->dtype, sizeof a->t->dtype);
    h = fg_hash64(h, a->t->dims, (size_t)a->t->rank * sizeof *a->t->dims);
    /* The first bytes only: a model's weights would cost a pass over every
     * byte at each session sync; equal hashes still compare every byte. */
    size_t n = fg_tensor_num_bytes(a->t);
    return fg_hash64(h, a->t->data, n < 256 ? n : 256);
  }
  return h;
}

static int tensors_equal(const fg_tensor *a, const fg_tensor *b) {
  if (!a || !b) return a == b;
  size_t n = fg_tensor_num_bytes(a);
  return a->dtype == b->dtype && a->rank == b->rank &&
         memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims) == 0 &&
         n == fg_tensor_num_bytes(b) && (n == 0 || memcmp(a->data, b->data, n) == 0);
}

static int attr_equal(const fg_attr *a, const fg_attr *b) {
  if (a->type != b->type || strcmp(a->name, b->name) != 0) return 0;
  switch (a->type) {
  case FG_ATTR_INT: return a->i == b->i;
  case FG_ATTR_FLOAT: return memcmp(&a->f, &b->f, sizeof a->f) == 0;
  case FG_ATTR_STRING: return (!a->s || !b->s) ? a->s == b->s : strcmp(a->s, b->s) == 0;
  case FG_ATTR_INTS:
    return a->n == b->n && memcmp(a->ints, b->ints, (size_t)a->n * sizeof *a->ints) == 0;
  case FG_ATTR_FLOATS:
    return a->n == b->n && memcmp(a->floats, b->floats, (size_t)a->n * sizeof *a->floats) == 0;
  case FG_ATTR_TENSOR: return tensors_equal(a->t, b->t);
  }
  return 0;
}

/* Attributes compare as sets: their order in the node carries no meaning. */
static int attrs_equal(const struct fg_attrs *a, const struct fg_attrs *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++) {
    const fg_attr *o = fg_attrs_find(b, a->items[i].name);
    if (!o || !attr_equal(&a->items[i], o)) return 0;
  }
  return 1;
}

static int nodes_equal(const fg_node *a, const fg_node *b) {
  if (a->op != b->op || a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs ||
      a->flags != b->flags || !fg_pass_str_equal(a->device, b->device))
    return 0;
  for (int i = 0; i < a->n_inputs; i++)
    if (a->inputs[i].node != b->inputs[i].node || a->inputs[i].index != b->inputs[i].index)
      return 0;
  for (int i = 0; i < a->n_outputs; i++)
    if (!fg_pass_tinfo_equal(&a->outputs[i], &b->outputs[i])) return 0;
  return attrs_equal(&a->attrs, &b->attrs);
}

static uint64_t node_hash(const fg_node *n) {
  uint64_t h = fg_hash64(0, &n->op, sizeof n->op);
  h = fg_hash64(h, n->inputs, (size_t)n->n_inputs * sizeof *n->inputs);
  h = fg_hash64(h, &n->n_inputs, sizeof n->n_inputs);
  uint64_t attrs = 0; /* order-free: a sum */
  for (int i = 0; i < n->attrs.n; i++)
    attrs += attr_hash(&n->attrs.items[i]);
  return fg_hash64(h, &attrs, sizeof attrs);
}

/* A node CSE may merge into an equal earlier one. Of variable state it may
 * read variables themselves (see writes_between), not what an update
 * returns. */
static int mergeable(const fg_pass_ctx *ctx, int id) {
  const fg_node *n = &ctx->w->g.nodes[id];
  unsigned f = fg_op_table[n->op].flags;
  if (ctx->dead[id] || fg_pass_node_pinned(n)) return 0;
  if ((f & FG_OPF_SOURCE) && n->op != FG_OP_CONSTANT) return 0;
  for (int i = 0; i < n->n_inputs; i++) {
    int op = ctx->w->g.nodes[n->inputs[i].node].op;
    if (op != FG_OP_VARIABLE && (op == FG_OP_ASSIGN || fg_op_table[op].mutable_inputs)) return 0;
  }
  return 1;
}

/* Node id reads every variable it reads with the value node m (earlier)
 * reads: the plan orders a variable's reads and writes by node id, so the
 * two read the same value unless a write lies between them. */
static int same_variable_values(const fg_graph *g, int m, int id) {
  const fg_node *n = &g->nodes[id];
  for (int i = 0; i < n->n_inputs; i++) {
    int v = n->inputs[i].node;
    if (g->nodes[v].op == FG_OP_VARIABLE && fg_pass_written_between(g, v, m, id)) return 0;
  }
  return 1;
}

/* An open-addressed table of node ids by hash; -1 is empty. */
typedef struct cse_table {
  int *ids;
  uint64_t *hashes;
  size_t mask;
} cse_table;

/* The earlier node equal to id, or -1 after inserting id. */
static int find_or_insert(cse_table *t, const fg_graph *g, int id, uint64_t h) {
  for (size_t k = h & t->mask;; k = (k + 1) & t->mask) {
    if (t->ids[k] < 0) {
      t->ids[k] = id;
      t->hashes[k] = h;
      return -1;
    }
    if (t->hashes[k] == h && nodes_equal(&g->nodes[t->ids[k]], &g->nodes[id])) return t->ids[k];
  }
}

int fg_pass_cse(fg_pass_ctx *ctx, fg_status *st) {
  const fg_graph *g = &ctx->w->g;
  size_t cap = 16;
  while (cap < 2 * (size_t)g->n_nodes)
    cap *= 2;
  cse_table t = {malloc(cap * sizeof(int)), malloc(cap * sizeof(uint64_t)), cap - 1};
  int rc = t.ids && t.hashes ? 0 : -1;
  if (rc) fg_status_set(st, FG_RESOURCE_EXHAUSTED, "cse: out of memory");
  for (size_t k = 0; rc == 0 && k < cap; k++)
    t.ids[k] = -1;
  for (int id = 0; rc == 0 && id < g->n_nodes; id++) {
    fg_pass_resolve_inputs(ctx, id);
    if (!mergeable(ctx, id)) continue;
    int m = find_or_insert(&t, g, id, node_hash(&g->nodes[id]));
    if (m >= 0 && fg_pass_can_replace(ctx, id, (fg_output){m, 0}) && same_variable_values(g, m, id))
      rc = fg_pass_replace(ctx, id, (fg_output){m, -1}, "merged", NULL, st);
  }
  free(t.ids);
  free(t.hashes);
  return rc;
}
