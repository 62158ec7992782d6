/* Building execution plans: prune, order, resolve shapes, pick kernels,
 * normalise parameters and lay out buffers. See plan.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/plan.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

#define ALIGN 64

/* The cache key: feeds (node, dtype, rank, dims), fetches, targets, each
 * list prefixed by its length. */
static int64_t *plan_key(const fg_plan_request *req, size_t *len) {
  size_t n = 3 + (size_t)req->n_feeds * (3 + FG_MAX_RANK) + (size_t)req->n_fetches * 2 +
             (size_t)req->n_targets;
  int64_t *k = malloc(n * sizeof *k);
  if (!k) return NULL;
  size_t p = 0;
  k[p++] = req->n_feeds;
  for (int i = 0; i < req->n_feeds; i++) {
    const fg_tensor *t = req->feed_tensors[i];
    k[p++] = req->feed_nodes[i];
    k[p++] = t->dtype;
    k[p++] = t->rank;
    for (int d = 0; d < FG_MAX_RANK; d++) k[p++] = d < t->rank ? t->dims[d] : 0;
  }
  k[p++] = req->n_fetches;
  for (int i = 0; i < req->n_fetches; i++) {
    k[p++] = req->fetches[i].node;
    k[p++] = req->fetches[i].index;
  }
  k[p++] = req->n_targets;
  for (int i = 0; i < req->n_targets; i++) k[p++] = req->targets[i];
  *len = p;
  return k;
}

int fg_plan_matches(const fg_plan *plan, const fg_graph *g, const fg_plan_request *req) {
  if (plan->graph_version != fg_graph_version(g)) return 0;
  size_t len;
  int64_t *k = plan_key(req, &len);
  int same = k && len == plan->key_len && memcmp(k, plan->key, len * sizeof *k) == 0;
  free(k);
  return same;
}

void fg_plan_free(fg_plan *plan) {
  if (!plan) return;
  for (int i = 0; i < plan->n_steps; i++) {
    free(plan->steps[i].in_slots);
    free(plan->steps[i].out_slots);
  }
  free(plan->steps);
  free(plan->key);
  free(plan->slots);
  free(plan->slot_of_output);
  free(plan->scratch_in);
  free(plan->feed_slots);
  free(plan->fetch_slots);
  free(plan->arena);
  free(plan);
}

static int normalize_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Turns attributes into kernel parameters. Shape inference has already
 * checked every value, so this only normalises (negative axes, "all"). */
static void fill_params(const fg_node *n, const fg_tinfo *in, fg_kparams *p) {
  memset(p, 0, sizeof *p);
  int rank = n->n_inputs ? in[0].rank : 0;
  p->transpose_a = (int)fg_attr_int_or(n, "transpose_a", 0);
  p->transpose_b = (int)fg_attr_int_or(n, "transpose_b", 0);
  p->axis = normalize_axis(fg_attr_int_or(n, "axis", 0), rank);
  p->keepdims = (int)fg_attr_int_or(n, "keepdims", 0);
  p->alpha = fg_attr_float_or(n, "alpha", 0.01);
  p->value = fg_attr_float_or(n, "value", 0.0);
  p->depth = fg_attr_int_or(n, "depth", 0);
  /* Optimizer updates; defaults as in graph/infer_optim.c (torch's). */
  p->momentum = fg_attr_float_or(n, "momentum", 0.0);
  p->nesterov = (int)fg_attr_int_or(n, "nesterov", 0);
  p->beta1 = fg_attr_float_or(n, "beta1", 0.9);
  p->beta2 = fg_attr_float_or(n, "beta2", 0.999);
  p->epsilon = fg_attr_float_or(n, "epsilon", 1e-8);
  p->weight_decay = fg_attr_float_or(n, "weight_decay", 0.0);
  const fg_attr *axes = fg_attrs_find(&n->attrs, "axes");
  if (axes && axes->type == FG_ATTR_INTS && axes->n > 0) {
    for (int i = 0; i < axes->n && i < FG_MAX_RANK; i++)
      p->axes[i] = normalize_axis(axes->ints[i], rank);
    p->n_axes = axes->n < FG_MAX_RANK ? axes->n : FG_MAX_RANK;
    qsort(p->axes, (size_t)p->n_axes, sizeof p->axes[0], cmp_int);
  } else {
    for (int i = 0; i < rank; i++) p->axes[i] = i;
    p->n_axes = rank;
  }
  const fg_attr *perm = fg_attrs_find(&n->attrs, "perm");
  if (perm && perm->type == FG_ATTR_INTS)
    for (int i = 0; i < perm->n && i < FG_MAX_RANK; i++) p->perm[i] = (int)perm->ints[i];
  const fg_attr *begin = fg_attrs_find(&n->attrs, "begin");
  if (begin && begin->type == FG_ATTR_INTS)
    for (int i = 0; i < begin->n && i < FG_MAX_RANK; i++) p->begin[i] = begin->ints[i];
}

static void set_kbuf(fg_kbuf *b, const fg_tinfo *t, void *data) {
  b->dtype = t->dtype;
  b->rank = t->rank;
  for (int d = 0; d < FG_MAX_RANK; d++) b->dims[d] = d < t->rank ? t->dims[d] : 0;
  b->data = data;
}

static fg_tinfo tinfo_of_tensor(const fg_tensor *t) {
  fg_tinfo ti = {t->dtype, t->rank, {0}};
  for (int d = 0; d < t->rank; d++) ti.dims[d] = t->dims[d];
  return ti;
}

static int fail_oom(fg_status *st, const char *what) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "plan: out of memory (%s)", what);
  return -1;
}

/* Marks what the fetches and targets need, walking inputs backwards. Node
 * ids are topological, so one descending sweep suffices. */
static int mark_needed(const fg_graph *g, const fg_plan_request *req, char *needed) {
  for (int i = 0; i < req->n_fetches; i++) needed[req->fetches[i].node] = 1;
  for (int i = 0; i < req->n_targets; i++) needed[req->targets[i]] = 1;
  for (int id = g->n_nodes - 1; id >= 0; id--) {
    if (!needed[id]) continue;
    const fg_node *n = &g->nodes[id];
    for (int i = 0; i < n->n_inputs; i++) needed[n->inputs[i].node] = 1;
  }
  return 0;
}

/* A placeholder nobody fed: name it and the first fetch or target that
 * needs it (A4). */
static void report_missing_feed(const fg_graph *g, const fg_plan_request *req, int ph,
                                fg_status *st) {
  const char *who = NULL;
  char *reach = calloc((size_t)g->n_nodes, 1);
  for (int f = 0; reach && !who && f < req->n_fetches + req->n_targets; f++) {
    int root = f < req->n_fetches ? req->fetches[f].node : req->targets[f - req->n_fetches];
    memset(reach, 0, (size_t)g->n_nodes);
    reach[root] = 1;
    for (int id = root; id >= ph; id--)
      if (reach[id])
        for (int i = 0; i < g->nodes[id].n_inputs; i++) reach[g->nodes[id].inputs[i].node] = 1;
    if (reach[ph]) who = g->nodes[root].name;
  }
  free(reach);
  char buf[FG_SHAPE_STR_MAX];
  const fg_tinfo *t = &g->nodes[ph].outputs[0];
  fg_status_set(st, FG_INVALID_ARGUMENT,
                "placeholder '%s' (%s %s) is needed by '%s' but was not fed", g->nodes[ph].name,
                fg_dtype_name(t->dtype), fg_shape_str(t->rank, t->dims, buf, sizeof buf),
                who ? who : "?");
}

fg_plan *fg_plan_build(const fg_graph *g, const fg_plan_request *req, fg_var_lookup_fn vars,
                       void *vars_ctx, fg_status *st) {
  fg_plan *plan = calloc(1, sizeof *plan);
  char *needed = calloc((size_t)g->n_nodes + 1, 1);
  int *feed_of = malloc(((size_t)g->n_nodes + 1) * sizeof *feed_of);
  fg_tinfo *shapes = NULL; /* concrete tinfo per slot */
  size_t *offsets = NULL;
  if (!plan || !needed || !feed_of) {
    fail_oom(st, "bookkeeping");
    goto fail;
  }
  plan->graph_version = fg_graph_version(g);
  plan->key = plan_key(req, &plan->key_len);
  plan->slot_of_output = malloc(((size_t)g->n_nodes + 1) * sizeof(int));
  if (!plan->key || !plan->slot_of_output) {
    fail_oom(st, "key");
    goto fail;
  }
  for (int i = 0; i < g->n_nodes; i++) feed_of[i] = -1, plan->slot_of_output[i] = -1;
  for (int i = 0; i < req->n_feeds; i++) feed_of[req->feed_nodes[i]] = i;
  mark_needed(g, req, needed);

  /* Slots for every output of every needed node, in node order. */
  int n_slots = 0, n_steps = 0;
  for (int id = 0; id < g->n_nodes; id++) {
    if (!needed[id]) continue;
    if (g->nodes[id].op == FG_OP_PLACEHOLDER && feed_of[id] < 0) {
      report_missing_feed(g, req, id, st);
      goto fail;
    }
    plan->slot_of_output[id] = n_slots;
    n_slots += g->nodes[id].n_outputs;
    if (!(fg_op_table[g->nodes[id].op].flags & FG_OPF_SOURCE)) n_steps++;
  }
  plan->n_slots = n_slots;
  plan->slots = calloc((size_t)n_slots + 1, sizeof *plan->slots);
  shapes = calloc((size_t)n_slots + 1, sizeof *shapes);
  offsets = calloc((size_t)n_slots + 1, sizeof *offsets);
  plan->steps = calloc((size_t)n_steps + 1, sizeof *plan->steps);
  if (!plan->slots || !shapes || !offsets || !plan->steps) {
    fail_oom(st, "slots");
    goto fail;
  }

  /* Concrete shapes, kernels and parameters, in topological order. */
  size_t arena = 0;
  for (int id = 0; id < g->n_nodes; id++) {
    if (!needed[id]) continue;
    const fg_node *n = &g->nodes[id];
    const fg_op_def *def = &fg_op_table[n->op];
    int s0 = plan->slot_of_output[id];
    if (def->flags & FG_OPF_SOURCE) {
      const fg_tensor *t = NULL;
      if (n->op == FG_OP_PLACEHOLDER) t = req->feed_tensors[feed_of[id]];
      else if (n->op == FG_OP_VARIABLE) t = vars(vars_ctx, id);
      else t = fg_attrs_find(&n->attrs, "value")->t;
      if (!t) {
        fg_status_set(st, FG_INTERNAL, "node '%s' (%s): no value", n->name, def->name);
        goto fail;
      }
      shapes[s0] = tinfo_of_tensor(t);
      set_kbuf(&plan->slots[s0], &shapes[s0], t->data);
      continue;
    }
    fg_tinfo in_stack[8];
    fg_tinfo *in = n->n_inputs <= 8 ? in_stack : malloc((size_t)n->n_inputs * sizeof *in);
    fg_step *step = &plan->steps[plan->n_steps];
    step->node = id;
    step->n_in = n->n_inputs;
    step->n_out = n->n_outputs;
    step->in_slots = malloc((size_t)(n->n_inputs ? n->n_inputs : 1) * sizeof(int));
    step->out_slots = malloc((size_t)n->n_outputs * sizeof(int));
    plan->n_steps++;
    if (!in || !step->in_slots || !step->out_slots) {
      if (in != in_stack) free(in);
      fail_oom(st, "steps");
      goto fail;
    }
    for (int i = 0; i < n->n_inputs; i++) {
      int s = plan->slot_of_output[n->inputs[i].node] + n->inputs[i].index;
      step->in_slots[i] = s;
      in[i] = shapes[s];
    }
    if (n->n_inputs > plan->max_inputs) plan->max_inputs = n->n_inputs;
    int rc = fg_infer(n, in, &shapes[s0], st);
    if (rc == 0) fill_params(n, in, &step->params);
    if (in != in_stack) free(in);
    if (rc != 0) {
      /* The graph was valid with unknown dims; the fed shapes made it fail. */
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", fg_status_message(st));
      fg_status_set(st, FG_INVALID_ARGUMENT, "%s (with the fed shapes)", msg);
      goto fail;
    }
    fg_dtype key = (def->flags & FG_OPF_KERNEL_KEY_INPUT) ? shapes[step->in_slots[0]].dtype
                                                          : shapes[s0].dtype;
    step->fn = fg_cpu_kernel(def->name, key);
    if (!step->fn) {
      fg_status_set(st, FG_UNIMPLEMENTED, "node '%s' (%s): no CPU kernel for dtype %s", n->name,
                    def->name, fg_dtype_name(key));
      goto fail;
    }
    for (int o = 0; o < n->n_outputs; o++) {
      step->out_slots[o] = s0 + o;
      if (o == 0 && def->mutable_inputs) continue; /* the variable's storage, bound below */
      size_t bytes;
      if (fg_tinfo_bytes(&shapes[s0 + o], &bytes) != 0 || arena > SIZE_MAX - bytes - ALIGN) {
        char buf[FG_SHAPE_STR_MAX];
        fg_status_set(st, FG_RESOURCE_EXHAUSTED, "node '%s' (%s): output %d of shape %s is too large",
                      n->name, def->name, o,
                      fg_shape_str(shapes[s0 + o].rank, shapes[s0 + o].dims, buf, sizeof buf));
        goto fail;
      }
      offsets[s0 + o] = arena;
      arena += (bytes + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    }
  }

  plan->arena_bytes = arena;
  plan->arena = fg_aligned_alloc(arena);
  plan->scratch_in = calloc((size_t)plan->max_inputs + 1, sizeof *plan->scratch_in);
  if (!plan->arena || !plan->scratch_in) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "plan: cannot allocate a %zu-byte arena", arena);
    goto fail;
  }
  for (int si = 0; si < plan->n_steps; si++) {
    const fg_step *step = &plan->steps[si];
    const fg_node *n = &g->nodes[step->node];
    for (int o = 0; o < step->n_out; o++) {
      int s = step->out_slots[o];
      void *data = (char *)plan->arena + offsets[s];
      if (o == 0 && fg_op_table[n->op].mutable_inputs) data = plan->slots[step->in_slots[0]].data;
      set_kbuf(&plan->slots[s], &shapes[s], data);
    }
  }

  plan->n_feeds = req->n_feeds;
  plan->n_fetches = req->n_fetches;
  plan->feed_slots = malloc(((size_t)req->n_feeds + 1) * sizeof(int));
  plan->fetch_slots = malloc(((size_t)req->n_fetches + 1) * sizeof(int));
  if (!plan->feed_slots || !plan->fetch_slots) {
    fail_oom(st, "feeds");
    goto fail;
  }
  for (int i = 0; i < req->n_feeds; i++)
    plan->feed_slots[i] = needed[req->feed_nodes[i]] ? plan->slot_of_output[req->feed_nodes[i]] : -1;
  for (int i = 0; i < req->n_fetches; i++)
    plan->fetch_slots[i] = plan->slot_of_output[req->fetches[i].node] + req->fetches[i].index;

  free(needed);
  free(feed_of);
  free(shapes);
  free(offsets);
  return plan;

fail:
  free(needed);
  free(feed_of);
  free(shapes);
  free(offsets);
  fg_plan_free(plan);
  return NULL;
}
