/* fg_gradients: symbolic reverse-mode differentiation. The backward nodes
 * are appended to the same graph, so forward, backward and update form one
 * static graph. Node ids are topological, so one sweep from the highest id
 * down visits every node after all of its consumers: when a node is reached,
 * the gradients of its outputs are complete. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/grad.h"
#include "flowgraph/autodiff.h"

static fg_grad_fn registry[FG_OP_COUNT];
static int registry_ready;

static void registry_fill(void) {
  /* Families, each owned by its own file; the last entry wins, and a
   * test checks that no op is registered twice. */
  const fg_grad_reg *tables[] = {
      fg_grads_math,      /* */
      fg_grads_shape,     /* */
      fg_grads_reduce2,   /* */
      fg_grads_shape_ops, /* */
      fg_grads_pool,      /* */
      fg_grads_resize,    /* */
      fg_grads_norm,      /* */
      fg_grads_dropout,   /* */
      fg_grads_conv,      /* */
  };
  for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
    for (const fg_grad_reg *r = tables[t]; r->op >= 0; r++)
      if (r->op < FG_OP_COUNT) registry[r->op] = r->fn;
  registry_ready = 1;
}

fg_grad_fn fg_grad_lookup(int op) {
  /* Filling is idempotent and writes the same values, so a race between two
   * first callers is benign; still, callers are graph builders, which are
   * single-threaded per graph. */
  if (!registry_ready) registry_fill();
  return (op >= 0 && op < FG_OP_COUNT) ? registry[op] : NULL;
}

void fg_gradients_options_init(fg_gradients_options *opts) {
  if (opts) opts->zeros_for_unconnected = 1;
}

fg_output fg_grad_input(const fg_grad_ctx *ctx, int i) {
  const fg_node *n = fg_graph_node(ctx->g, ctx->node);
  return (n && i >= 0 && i < n->n_inputs) ? n->inputs[i] : FG_NO_OUTPUT;
}

fg_output fg_grad_output(const fg_grad_ctx *ctx, int i) {
  const fg_node *n = fg_graph_node(ctx->g, ctx->node);
  return (n && i >= 0 && i < n->n_outputs) ? (fg_output){ctx->node, i} : FG_NO_OUTPUT;
}

fg_attrs *fg_grad_copy_attrs(const fg_grad_ctx *ctx, const char *const *names, int n) {
  const fg_node *node = &ctx->g->nodes[ctx->node];
  fg_attrs *a = fg_attrs_new();
  int bad = !a;
  for (int k = 0; !bad && k < n; k++) {
    const fg_attr *v = fg_attrs_find(&node->attrs, names[k]);
    if (!v) continue;
    if (v->type == FG_ATTR_INTS)
      bad = fg_attrs_set_ints(a, names[k], v->ints, v->n) != 0;
    else if (v->type == FG_ATTR_INT)
      bad = fg_attrs_set_int(a, names[k], v->i) != 0;
    else if (v->type == FG_ATTR_FLOAT)
      bad = fg_attrs_set_float(a, names[k], v->f) != 0;
    else if (v->type == FG_ATTR_FLOATS)
      bad = fg_attrs_set_floats(a, names[k], v->floats, v->n) != 0;
    else if (v->type == FG_ATTR_STRING)
      bad = fg_attrs_set_string(a, names[k], v->s) != 0;
  }
  if (!bad) return a;
  fg_attrs_free(a);
  fg_graph_fail(ctx->g, FG_RESOURCE_EXHAUSTED, "node '%s' (%s): out of memory in its gradient",
                node->name, fg_op_table[node->op].name);
  return NULL;
}

static int fully_known_equal(const fg_tinfo *a, const fg_tinfo *b) {
  if (a->rank != b->rank) return 0;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] < 0 || a->dims[d] != b->dims[d]) return 0;
  return 1;
}

fg_output fg_grad_sum_to(fg_graph *g, fg_output x, fg_output like) {
  const fg_tinfo *tx = fg_graph_tinfo(g, x), *tl = fg_graph_tinfo(g, like);
  if (!tx || !tl) return FG_NO_OUTPUT;
  /* Statically equal shapes need no reduction. With an unknown dim the
   * shapes may still differ at run time (a batch of 1 broadcast against a
   * batch of n), so sum_to decides then. */
  if (fully_known_equal(tx, tl)) return x;
  fg_output in[2] = {x, like};
  return fg_op(g, "sum_to", NULL, in, 2, NULL);
}

/* "gradients/", or "gradients_N/" for the first N whose prefix no node uses. */
static void pick_scope(const fg_graph *g, char *buf, size_t size) {
  for (int k = 0;; k++) {
    if (k == 0)
      snprintf(buf, size, "gradients/");
    else
      snprintf(buf, size, "gradients_%d/", k);
    size_t len = strlen(buf);
    int used = 0;
    for (int i = 0; i < g->n_nodes && !used; i++)
      used = strncmp(g->nodes[i].name, buf, len) == 0;
    if (!used) return;
  }
}

static const char *out_name(const fg_graph *g, fg_output o, char *buf, size_t size) {
  const fg_node *n = fg_graph_node(g, o.node);
  snprintf(buf, size, "%s:%d", n ? n->name : "?", o.index);
  return buf;
}

static int fail(fg_graph *g, fg_status *st, fg_code code, const char *fmt, const char *a,
                const char *b) {
  char msg[1024];
  snprintf(msg, sizeof msg, fmt, a, b);
  fg_graph_fail(g, code, "%s", msg);
  fg_graph_status(g, st);
  return -1;
}

/* Checks one y or x: a float output of a node that exists. */
static int check_tensor(fg_graph *g, fg_output o, const char *role, int i, fg_status *st) {
  char name[300], what[64];
  snprintf(what, sizeof what, "%s[%d]", role, i);
  const fg_tinfo *t = fg_graph_tinfo(g, o);
  if (!t) {
    snprintf(name, sizeof name, "node %d output %d", o.node, o.index);
    return fail(g, st, FG_INVALID_ARGUMENT, "fg_gradients: %s (%s) does not exist", what, name);
  }
  if (!fg_dtype_is_float(t->dtype)) {
    char msg[400];
    snprintf(msg, sizeof msg, "'%s' is %s; only f32/f64 tensors are differentiable",
             out_name(g, o, name, sizeof name), fg_dtype_name(t->dtype));
    return fail(g, st, FG_INVALID_ARGUMENT, "fg_gradients: %s %s", what, msg);
  }
  return 0;
}

/* Per-output gradient accumulators: slot_of[node] + output index. */
typedef struct acc {
  int *slot_of;
  fg_output *sum;
} acc;

/* Tags nodes [from, g->n_nodes) with FG_COLOCATE_ATTR = the name of node
 * `fwd`, unless they already carry one (a node reused from an earlier
 * gradient keeps its first tag). The placer (dist/rewrite/partition.c) puts them on
 * fwd's device, as TensorFlow's colocate_gradients_with_ops does: a layer's
 * backward pass stays on its layer's device, so only activations and their
 * gradients cross devices, never a weight gradient or a copy of the labels. */
static int colocate(fg_graph *g, int from, int fwd) {
  for (int i = from; i < g->n_nodes; i++) {
    if (fg_attrs_find(&g->nodes[i].attrs, FG_COLOCATE_ATTR)) continue;
    if (fg_attrs_set_string(&g->nodes[i].attrs, FG_COLOCATE_ATTR, g->nodes[fwd].name) != 0) {
      fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_gradients: out of memory");
      return -1;
    }
  }
  return 0;
}

static int accumulate(fg_graph *g, acc *a, fg_output target, fg_output d) {
  int s = a->slot_of[target.node];
  if (s < 0 || d.node < 0) return 0;
  s += target.index;
  a->sum[s] = a->sum[s].node < 0 ? d : fg_add(g, a->sum[s], d);
  return fg_graph_failed(g) ? -1 : 0;
}

/* Checks the arguments of fg_gradients_ex: 0, or -1 with st and the
 * graph's error set. */
static int check_args(fg_graph *g, const fg_output *ys, int ny, const fg_output *xs, int nx,
                      const fg_output *dys, fg_status *st) {
  for (int j = 0; j < ny; j++)
    if (check_tensor(g, ys[j], "ys", j, st) != 0) return -1;
  for (int i = 0; i < nx; i++)
    if (check_tensor(g, xs[i], "xs", i, st) != 0) return -1;
  for (int j = 0; dys && j < ny; j++) {
    if (dys[j].node < 0) continue;
    const fg_tinfo *td = fg_graph_tinfo(g, dys[j]), *ty = fg_graph_tinfo(g, ys[j]);
    if (!td || td->dtype != ty->dtype) {
      char a[300], b[300];
      out_name(g, ys[j], a, sizeof a);
      snprintf(b, sizeof b, "%s", td ? fg_dtype_name(td->dtype) : "missing");
      return fail(g, st, FG_INVALID_ARGUMENT, "fg_gradients: dy for '%s' is %s, not y's dtype", a,
                  b);
    }
  }
  return 0;
}

/* Gives every node on a path from an x to a y (from_x and to_y) its first
 * accumulator slot in a->slot_of; the others get -1. Returns the number of
 * slots. */
static int assign_slots(const fg_graph *g, int n0, const fg_output *ys, int ny, const fg_output *xs,
                        int nx, char *from_x, char *to_y, acc *a) {
  int n_slots = 0;
  for (int i = 0; i < nx; i++)
    from_x[xs[i].node] = 1;
  for (int id = 0; id < n0; id++)
    for (int k = 0; !from_x[id] && k < g->nodes[id].n_inputs; k++)
      from_x[id] = from_x[g->nodes[id].inputs[k].node];
  for (int j = 0; j < ny; j++)
    to_y[ys[j].node] = 1;
  for (int id = n0 - 1; id >= 0; id--)
    if (to_y[id])
      for (int k = 0; k < g->nodes[id].n_inputs; k++)
        to_y[g->nodes[id].inputs[k].node] = 1;
  for (int id = 0; id < n0; id++) {
    a->slot_of[id] = (from_x[id] && to_y[id]) ? n_slots : -1;
    if (a->slot_of[id] >= 0) n_slots += g->nodes[id].n_outputs;
  }
  return n_slots;
}

/* Runs node id's gradient function on its summed output gradients and adds
 * what it returns to its inputs' sums. 0, or -1 with the graph's error set. */
static int backprop_node(fg_graph *g, acc *a, int id) {
  const fg_node *n = &g->nodes[id];
  const fg_op_def *def = &fg_op_table[n->op];
  int s0 = a->slot_of[id], any = 0;
  for (int k = 0; k < n->n_outputs; k++)
    any |= a->sum[s0 + k].node >= 0;
  if (!any || (def->flags & FG_OPF_SOURCE)) return 0;
  /* Non-differentiable ops (argmax, comparisons, stop_gradient, one_hot,
   * state updates) stop the gradient: nothing flows to their inputs. */
  if (!(def->flags & FG_OPF_DIFFERENTIABLE)) return 0;
  fg_grad_fn fn = fg_grad_lookup(n->op);
  if (!fn) {
    fg_graph_fail(g, FG_UNIMPLEMENTED, "node '%s' (%s): op has no gradient", n->name, def->name);
    return -1;
  }
  int ni = n->n_inputs;
  fg_output *dx = malloc(((size_t)ni + 1) * sizeof *dx);
  char *wants = calloc((size_t)ni + 1, 1);
  fg_output *dy = malloc(((size_t)n->n_outputs + 1) * sizeof *dy);
  if (!dx || !wants || !dy) {
    free(dx), free(wants), free(dy);
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_gradients: out of memory");
    return -1;
  }
  int wanted = 0;
  for (int i = 0; i < ni; i++) {
    fg_output in = n->inputs[i];
    dx[i] = FG_NO_OUTPUT;
    wants[i] =
        a->slot_of[in.node] >= 0 && fg_dtype_is_float(g->nodes[in.node].outputs[in.index].dtype);
    wanted |= wants[i];
  }
  for (int k = 0; k < n->n_outputs; k++)
    dy[k] = a->sum[s0 + k];
  int fn_rc = 0, before = g->n_nodes;
  if (wanted) {
    fg_grad_ctx ctx = {g, id, dy, dx, wants};
    fn_rc = fn(&ctx);
  }
  /* Builders (here and in accumulate) may move the node array: index it
   * afresh each time instead of holding a node pointer. */
  for (int i = 0; fn_rc == 0 && !fg_graph_failed(g) && i < ni; i++)
    if (wants[i] && dx[i].node >= 0 && accumulate(g, a, g->nodes[id].inputs[i], dx[i]) != 0) break;
  if (fn_rc == 0 && !fg_graph_failed(g)) colocate(g, before, id);
  n = &g->nodes[id];
  free(dx), free(wants), free(dy);
  if (fn_rc != 0 || fg_graph_failed(g)) {
    if (!fg_graph_failed(g))
      fg_graph_fail(g, FG_INTERNAL, "node '%s' (%s): gradient function failed", n->name, def->name);
    return -1;
  }
  return 0;
}

int fg_gradients_ex(fg_graph *g, const fg_output *ys, int ny, const fg_output *xs, int nx,
                    const fg_output *dys, fg_output *dxs, const fg_gradients_options *opts,
                    fg_status *st) {
  if (!g || !ys || !xs || !dxs || ny < 1 || nx < 1) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_gradients: need a graph, ys (%d), xs (%d) and dxs (graph %s, dxs %s)", ny, nx,
                  g ? "ok" : "NULL", dxs ? "ok" : "NULL");
    if (g) fg_graph_fail(g, FG_INVALID_ARGUMENT, "%s", fg_status_message(st));
    return -1;
  }
  for (int i = 0; i < nx; i++)
    dxs[i] = FG_NO_OUTPUT;
  if (fg_graph_status(g, st) != FG_OK) return -1;
  fg_gradients_options o;
  fg_gradients_options_init(&o);
  if (opts) o = *opts;
  if (check_args(g, ys, ny, xs, nx, dys, st) != 0) return -1;

  int n0 = g->n_nodes;
  char *from_x = calloc((size_t)n0, 1), *to_y = calloc((size_t)n0, 1);
  acc a = {malloc((size_t)n0 * sizeof(int)), NULL};
  int n_slots = 0, rc = -1;
  if (!from_x || !to_y || !a.slot_of) goto oom;
  n_slots = assign_slots(g, n0, ys, ny, xs, nx, from_x, to_y, &a);
  a.sum = malloc(((size_t)n_slots + 1) * sizeof *a.sum);
  if (!a.sum) goto oom;
  for (int s = 0; s < n_slots; s++)
    a.sum[s] = FG_NO_OUTPUT;

  char scope[64];
  pick_scope(g, scope, sizeof scope);
  char *saved_scope = fg_strdup(fg_graph_scope(g));
  if (!saved_scope || fg_graph_set_scope(g, scope) != 0) {
    free(saved_scope);
    goto oom;
  }

  for (int j = 0; j < ny; j++) {
    int before = g->n_nodes;
    fg_output d = (dys && dys[j].node >= 0) ? dys[j] : fg_ones_like(g, ys[j]);
    if (accumulate(g, &a, ys[j], d) != 0 || colocate(g, before, ys[j].node) != 0) goto restore;
  }
  for (int id = n0 - 1; id >= 0; id--)
    if (a.slot_of[id] >= 0 && backprop_node(g, &a, id) != 0) goto restore;
  for (int i = 0; i < nx; i++) {
    int s = a.slot_of[xs[i].node];
    fg_output d = s >= 0 ? a.sum[s + xs[i].index] : FG_NO_OUTPUT;
    if (d.node < 0 && o.zeros_for_unconnected) d = fg_zeros_like(g, xs[i]);
    dxs[i] = d;
  }
  rc = fg_graph_failed(g) ? -1 : 0;
  /* Record what this call made, so rewrites find the backward pass by this
   * flag and not by a name a user's node may share. */
  for (int id = n0; rc == 0 && id < g->n_nodes; id++)
    g->nodes[id].flags |= FG_NODE_MADE_BY_GRADIENTS;

restore:
  fg_graph_set_scope(g, saved_scope);
  free(saved_scope);
  goto done;
oom:
  fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_gradients: out of memory");
done:
  free(from_x);
  free(to_y);
  free(a.slot_of);
  free(a.sum);
  if (rc != 0) {
    fg_graph_status(g, st);
    for (int i = 0; i < nx; i++)
      dxs[i] = FG_NO_OUTPUT;
  } else {
    fg_status_clear(st);
  }
  return rc;
}

int fg_gradients(fg_graph *g, const fg_output *ys, int ny, const fg_output *xs, int nx,
                 const fg_output *dys, fg_output *dxs, fg_status *st) {
  return fg_gradients_ex(g, ys, ny, xs, nx, dys, dxs, NULL, st);
}
