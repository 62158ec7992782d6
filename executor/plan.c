/* Building execution plans: prune, order, resolve shapes, pick kernels,
 * normalise parameters and lay out buffers. See plan.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor/memplan.h"
#include "executor/plan.h"
#include "executor/edges.h"
#include "executor/plan_order.h"
#include "executor/plan_xfer.h"
#include "executor/dist/exec.h"
#include "executor/cuda_backend.h"
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
    for (int d = 0; d < FG_MAX_RANK; d++)
      k[p++] = d < t->rank ? t->dims[d] : 0;
  }
  k[p++] = req->n_fetches;
  for (int i = 0; i < req->n_fetches; i++) {
    k[p++] = req->fetches[i].node;
    k[p++] = req->fetches[i].index;
  }
  k[p++] = req->n_targets;
  for (int i = 0; i < req->n_targets; i++)
    k[p++] = req->targets[i];
  *len = p;
  return k;
}

/* Compares the request with the stored key in place: looking up a cached
 * plan must not allocate. */
int fg_plan_matches(const fg_plan *plan, const fg_graph *g, const fg_plan_request *req) {
  if (plan->graph_version != fg_graph_version(g)) return 0;
  const int64_t *k = plan->key;
  size_t len = 3 + (size_t)req->n_feeds * (3 + FG_MAX_RANK) + (size_t)req->n_fetches * 2 +
               (size_t)req->n_targets;
  if (len != plan->key_len) return 0;
  size_t p = 0;
  if (k[p++] != req->n_feeds) return 0;
  for (int i = 0; i < req->n_feeds; i++) {
    const fg_tensor *t = req->feed_tensors[i];
    if (k[p++] != req->feed_nodes[i] || k[p++] != t->dtype || k[p++] != t->rank) return 0;
    for (int d = 0; d < FG_MAX_RANK; d++)
      if (k[p++] != (d < t->rank ? t->dims[d] : 0)) return 0;
  }
  if (k[p++] != req->n_fetches) return 0;
  for (int i = 0; i < req->n_fetches; i++)
    if (k[p++] != req->fetches[i].node || k[p++] != req->fetches[i].index) return 0;
  if (k[p++] != req->n_targets) return 0;
  for (int i = 0; i < req->n_targets; i++)
    if (k[p++] != req->targets[i]) return 0;
  return 1;
}

/* A plan that failed before choosing its allocator has none. */
static void release_arena(fg_plan *plan, void *p) {
  if (p) (plan->arena_free ? plan->arena_free : free)(p);
}

void fg_plan_free(fg_plan *plan) {
  if (!plan) return;
  for (int i = 0; i < plan->n_steps; i++) {
    free(plan->steps[i].in_slots);
    free(plan->steps[i].out_slots);
    free(plan->steps[i].in);
  }
  free(plan->steps);
  free(plan->key);
  free(plan->slots);
  free(plan->slot_node);
  free(plan->slot_kind);
  free(plan->slot_step);
  free(plan->slot_last);
  free(plan->slot_shared);
  free(plan->slot_offset);
  free(plan->slot_of_output);
  free(plan->n_preds);
  free(plan->succ_off);
  free(plan->succ);
  free(plan->feed_slots);
  free(plan->fetch_slots);
  release_arena(plan, plan->arena);
  for (int d = 0; plan->dev_arena && d < plan->n_dev; d++)
    release_arena(plan, plan->dev_arena[d]);
  free(plan->dev_arena);
  free(plan->dev_bytes);
  free(plan->step_dev);
  free(plan->slot_dev);
  free(plan->step_lane);
  free(plan->pinned);
  free(plan->timings);
  fg_cuda_plan_release(plan->device);
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
  p->l2 = fg_attr_float_or(n, "l2", 0.0);
  const fg_attr *axes = fg_attrs_find(&n->attrs, "axes");
  if (axes && axes->type == FG_ATTR_INTS && axes->n > 0) {
    for (int i = 0; i < axes->n && i < FG_MAX_RANK; i++)
      p->axes[i] = normalize_axis(axes->ints[i], rank);
    p->n_axes = axes->n < FG_MAX_RANK ? axes->n : FG_MAX_RANK;
    qsort(p->axes, (size_t)p->n_axes, sizeof p->axes[0], cmp_int);
  } else {
    for (int i = 0; i < rank; i++)
      p->axes[i] = i;
    p->n_axes = rank;
  }
  const fg_attr *perm = fg_attrs_find(&n->attrs, "perm");
  if (perm && perm->type == FG_ATTR_INTS)
    for (int i = 0; i < perm->n && i < FG_MAX_RANK; i++)
      p->perm[i] = (int)perm->ints[i];
  const fg_attr *begin = fg_attrs_find(&n->attrs, "begin");
  if (begin && begin->type == FG_ATTR_INTS)
    for (int i = 0; i < begin->n && i < FG_MAX_RANK; i++)
      p->begin[i] = begin->ints[i];
  /* Data-parallel ops (kernels/cpu/collective.c): shard reuses fields
   * (replica index and count); the collectives (all_reduce and the fused
   * updates) read mean (default 1) and weighted (default 0). */
  if (n->op == FG_OP_SHARD) {
    p->begin[0] = fg_attr_int_or(n, "index", 0);
    p->depth = fg_attr_int_or(n, "count", 1);
  } else if (fg_node_is_collective(n)) {
    p->mean = (int)fg_attr_int_or(n, "mean", 1);
    p->weighted = (int)fg_attr_int_or(n, "weighted", 0);
  }
}

static void set_kbuf(fg_kbuf *b, const fg_tinfo *t, void *data) {
  b->dtype = t->dtype;
  b->rank = t->rank;
  for (int d = 0; d < FG_MAX_RANK; d++)
    b->dims[d] = d < t->rank ? t->dims[d] : 0;
  b->data = data;
}

static fg_tinfo tinfo_of_tensor(const fg_tensor *t) {
  fg_tinfo ti = {t->dtype, t->rank, {0}};
  for (int d = 0; d < t->rank; d++)
    ti.dims[d] = t->dims[d];
  return ti;
}

static int fail_oom(fg_status *st, const char *what) {
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "plan: out of memory (%s)", what);
  return -1;
}

/* The machine's physical memory in bytes, 0 if unknown. A plan above it
 * would be killed by the OOM killer on first touch (malloc overcommits), so
 * it is refused like one over the session's limit. */
static uint64_t phys_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

/* Checks `need` bytes against the limit and the machine before anything of
 * that size is allocated; `what` names the buffer for the message. */
static int check_memory(uint64_t need, int64_t limit, const char *what, fg_status *st) {
  uint64_t phys = phys_memory();
  if (limit > 0 && need > (uint64_t)limit) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                  "%s needs %llu bytes, over the session's limit of %lld bytes (max_memory_bytes)",
                  what, (unsigned long long)need, (long long)limit);
    return -1;
  }
  if (phys && need > phys) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                  "%s needs %llu bytes, more than the machine's %llu bytes of memory", what,
                  (unsigned long long)need, (unsigned long long)phys);
    return -1;
  }
  return 0;
}

static void mark_ancestors(const fg_graph *g, char *needed) {
  for (int id = g->n_nodes - 1; id >= 0; id--) {
    if (!needed[id]) continue;
    const fg_node *n = &g->nodes[id];
    for (int i = 0; i < n->n_inputs; i++)
      needed[n->inputs[i].node] = 1;
  }
}

/* 1 when some device of dx has a communicator for its collectives. */
static int any_comm(const fg_dist_exec *dx) {
  for (int d = 0; dx && dx->comm && d < dx->n_dev; d++)
    if (dx->comm[d]) return 1;
  return 0;
}

/* The op whose CUDA kernel runs node n. The fused updates have no CUDA
 * kernel (their communicators reduce host memory), so a GPU plan reports
 * "no CUDA kernel" for them; except all_reduce_apply_sgd with no
 * communicator (a group of one), whose plain update is the fused one: a
 * model trained on CPUs over MPI and saved goes on training on a GPU. */
static const char *cuda_kernel_op(const fg_node *n, const fg_plan_request *req) {
  if (n->op == FG_OP_ALL_REDUCE_APPLY_SGD && !any_comm(req->dist))
    return fg_op_table[FG_OP_APPLY_SGD].name;
  return fg_op_table[n->op].name;
}

/* Devices' all_reduce steps pair up by order: the k-th on each device is one
 * collective. A fetch that needs device 0's k-th (one replica's reduced
 * gradient, say) would run it alone, and it would wait for the other
 * devices until the deadline. So when any device needs its k-th, every
 * device runs its first k + 1, with what they need. Returns -1 on OOM. */
static int close_collectives(const fg_graph *g, const fg_dist_exec *dx, char *needed) {
  if (!dx || dx->n_dev < 2) return 0;
  int *count = calloc((size_t)dx->n_dev, sizeof *count);
  if (!count) return -1;
  /* Needed only grows, so this ends; one round unless ancestors on one
   * device need a later collective of another. */
  for (;;) {
    /* k: how many collectives the device that needs the most must run */
    int k = 0, changed = 0;
    memset(count, 0, (size_t)dx->n_dev * sizeof *count);
    for (int id = 0; id < g->n_nodes; id++) {
      if (!fg_node_is_collective(&g->nodes[id])) continue;
      int c = ++count[dx->node_dev[id]];
      if (needed[id] && c > k) k = c;
    }
    memset(count, 0, (size_t)dx->n_dev * sizeof *count);
    for (int id = 0; id < g->n_nodes && k > 0; id++)
      if (fg_node_is_collective(&g->nodes[id]) && ++count[dx->node_dev[id]] <= k && !needed[id])
        needed[id] = changed = 1;
    if (!changed) break;
    mark_ancestors(g, needed);
  }
  free(count);
  return 0;
}

/* Marks what the fetches and targets need, walking inputs backwards. Node
 * ids are topological, so one descending sweep suffices. */
int fg_plan_mark_needed(const fg_graph *g, const fg_plan_request *req, char *needed) {
  for (int i = 0; i < req->n_fetches; i++)
    needed[req->fetches[i].node] = 1;
  for (int i = 0; i < req->n_targets; i++)
    needed[req->targets[i]] = 1;
  mark_ancestors(g, needed);
  return close_collectives(g, req->dist, needed);
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
        for (int i = 0; i < g->nodes[id].n_inputs; i++)
          reach[g->nodes[id].inputs[i].node] = 1;
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

static int cmp_edge(const void *a, const void *b) {
  const int *x = a, *y = b;
  if (x[0] != y[0]) return (x[0] > y[0]) - (x[0] < y[0]);
  return (x[1] > y[1]) - (x[1] < y[1]);
}

/* Sorts by (from, to) and drops repeats: successor lists come out grouped
 * by source, as the pool wants them. */
static void edges_sort_unique(fg_edges *E) {
  if (E->n == 0) return; /* E->e may be NULL */
  qsort(E->e, (size_t)E->n, sizeof E->e[0], cmp_edge);
  int w = 0;
  for (int i = 0; i < E->n; i++)
    if (w == 0 || cmp_edge(E->e[w - 1], E->e[i]) != 0)
      E->e[w][0] = E->e[i][0], E->e[w++][1] = E->e[i][1];
  E->n = w;
}

/* Data edges (producer step -> consumer step) plus, for every variable,
 * edges that keep its reads and writes in step order: a scheduler may run
 * anything in parallel but never reorder a read and an update of the same
 * variable, so results equal the sequential run's. */
static int build_edges(const fg_graph *g, fg_plan *plan, fg_edges *E) {
  for (int si = 0; si < plan->n_steps; si++) {
    const fg_step *st = &plan->steps[si];
    for (int i = 0; i < st->n_in; i++) {
      int p = plan->slot_step[st->in_slots[i]];
      if (p >= 0 && fg_edge_add(E, p, si) != 0) return -1;
    }
  }
  for (int s = 0; s < plan->n_slots; s++) {
    if (plan->slot_kind[s] != FG_SLOT_VARIABLE || plan->slot_step[s] >= 0) continue;
    /* s is a variable node's slot: every step touching it, in order. */
    int last_writer = -1, *readers_since = NULL, n_readers = 0;
    readers_since = malloc(((size_t)plan->n_steps + 1) * sizeof(int));
    if (!readers_since) return -1;
    for (int si = 0; si < plan->n_steps; si++) {
      const fg_step *st = &plan->steps[si];
      unsigned mut = fg_op_table[g->nodes[st->node].op].mutable_inputs;
      int reads = 0, writes = 0;
      for (int i = 0; i < st->n_in; i++)
        if (st->in_slots[i] == s) {
          if (i < 32 && (mut >> i & 1u))
            writes = 1;
          else
            reads = 1;
        }
      if (!reads && !writes) continue;
      if (last_writer >= 0 && fg_edge_add(E, last_writer, si) != 0) goto fail;
      if (writes) {
        for (int r = 0; r < n_readers; r++)
          if (fg_edge_add(E, readers_since[r], si) != 0) goto fail;
        n_readers = 0;
        last_writer = si;
      } else {
        readers_since[n_readers++] = si;
      }
    }
    free(readers_since);
    continue;
  fail:
    free(readers_since);
    return -1;
  }
  edges_sort_unique(E);
  return 0;
}

/* Lays out the arena with the memory planner and binds every slot. */
/* Scheduling edges that make memory reuse safe under any schedule the pool
 * picks: when B's bytes overlap A's and A comes first, every step touching
 * A becomes an ancestor of B's producer (the rule of memplan.h). The memory
 * plan is made on the serial step order, which reaches the serial lower
 * bound; these edges then keep the parallel run within it. Tensors that are
 * live at the same time never overlap, so independent branches stay free to
 * run in parallel.
 *
 * Only edges that add something are kept: ancestor bitsets, built in step
 * order (every edge goes from a lower to a higher step), skip a step that
 * already precedes B's producer. Without that a chain reusing two buffers
 * would get O(n^2) edges. Above REUSE_BITSET_CAP steps the bitsets would be
 * too large; the steps are then simply chained in order, which is safe and
 * only gives up inter-op parallelism. */
#define REUSE_BITSET_CAP 16384

static int add_reuse_edges(fg_plan *plan, const fg_mp_tensor *t, fg_edges *E) {
  int n = plan->n_slots, ns = plan->n_steps;
  if (ns > REUSE_BITSET_CAP) {
    for (int si = 1; si < ns; si++)
      if (fg_edge_add(E, si - 1, si) != 0) return -1;
    return 0;
  }
  size_t words = ((size_t)ns + 63) / 64;
  uint64_t *anc = calloc((size_t)ns * words + 1, sizeof *anc);
  int *arena = malloc(((size_t)n + 1) * sizeof *arena);
  /* The edges so far, indexed by target, seed the bitsets. */
  edges_sort_unique(E);
  int n_base = E->n;
  int *tgt_off = calloc((size_t)ns + 2, sizeof *tgt_off);
  int *tgt_src = malloc(((size_t)n_base + 1) * sizeof *tgt_src);
  int *fill = calloc((size_t)ns + 1, sizeof *fill);
  int rc = (anc && arena && tgt_off && tgt_src && fill) ? 0 : -1;
  int n_arena = 0;
  for (int k = 0; rc == 0 && k < n; k++)
    if (plan->slot_kind[k] == FG_SLOT_ARENA && t[k].bytes > 0) arena[n_arena++] = k;
  for (int i = 0; rc == 0 && i < n_base; i++)
    tgt_off[E->e[i][1] + 1]++;
  for (int si = 0; rc == 0 && si < ns; si++)
    tgt_off[si + 1] += tgt_off[si];
  for (int i = 0; rc == 0 && i < n_base; i++) {
    int to = E->e[i][1];
    tgt_src[tgt_off[to] + fill[to]++] = E->e[i][0];
  }
#define ANC(s) (anc + (size_t)(s)*words)
#define MARK(s, u)                                                                                 \
  do {                                                                                             \
    uint64_t *d_ = ANC(s), *a_ = ANC(u);                                                           \
    for (size_t w_ = 0; w_ < words; w_++)                                                          \
      d_[w_] |= a_[w_];                                                                            \
    d_[(u) / 64] |= 1ull << ((u) % 64);                                                            \
  } while (0)
  for (int sb = 0; rc == 0 && sb < ns; sb++) {
    for (int i = tgt_off[sb]; i < tgt_off[sb + 1]; i++)
      MARK(sb, tgt_src[i]);
    /* Tensors produced by this step: order their bytes after every earlier
     * overlapping tensor's accesses. */
    const fg_step *st = &plan->steps[sb];
    for (int o = 0; rc == 0 && o < st->n_out; o++) {
      int b = st->out_slots[o];
      if (plan->slot_kind[b] != FG_SLOT_ARENA || t[b].bytes == 0) continue;
      int64_t b0 = plan->slot_offset[b], b1 = b0 + (int64_t)t[b].bytes;
      for (int ia = 0; rc == 0 && ia < n_arena; ia++) {
        int a = arena[ia];
        if (a == b || t[a].producer >= sb) continue;
        int64_t a0 = plan->slot_offset[a], a1 = a0 + (int64_t)t[a].bytes;
        if (a1 <= b0 || b1 <= a0) continue;
        for (int u = -1; rc == 0 && u < t[a].n_users; u++) {
          int step = u < 0 ? t[a].producer : t[a].users[u];
          if (step > sb) rc = -2; /* the planner let live tensors overlap */
          if (rc != 0 || step == sb || (ANC(sb)[step / 64] >> (step % 64) & 1u)) continue;
          if (fg_edge_add(E, step, sb) != 0)
            rc = -1;
          else
            MARK(sb, step);
        }
      }
    }
  }
#undef MARK
#undef ANC
  free(tgt_off);
  free(tgt_src);
  free(fill);
  free(anc);
  free(arena);
  return rc;
}

/* Runs the memory planner over the given step order and binds the arena
 * slots to the offsets it chose. */
static int layout(fg_plan *plan, const fg_mp_tensor *t, int ns, const int *pred_off,
                  const int *preds, size_t *off, int *shared, fg_status *st) {
  int n = plan->n_slots;
  fg_mp_input in = {ns, pred_off, preds, n, t, ALIGN};
  fg_mp_result out = {off, shared, 0, 0, 0};
  char err[256];
  if (fg_memplan(&in, &out, err, sizeof err) != 0) {
    fg_status_set(st, FG_INTERNAL, "memory planner: %s", err);
    return -1;
  }
  /* Arena plus fetched outputs: what the plan holds while it is cached. */
  uint64_t need = (uint64_t)out.arena_bytes + plan->pinned_bytes;
  if (check_memory(need < out.arena_bytes ? UINT64_MAX : need, plan->max_memory_bytes,
                   "plan (arena plus fetched outputs)", st) != 0)
    return -1;
  release_arena(plan, plan->arena);
  plan->arena = NULL;
  plan->arena_bytes = out.arena_bytes;
  plan->lower_bound_bytes = out.lower_bound_bytes;
  plan->naive_bytes = out.naive_bytes;
  /* A GPU plan's arena is device memory, allocated by the CUDA executor. */
  plan->arena = plan->cuda ? NULL : plan->arena_alloc(out.arena_bytes);
  if (!plan->arena && !plan->cuda) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "plan: cannot allocate a %zu-byte arena",
                  out.arena_bytes);
    return -1;
  }
  for (int s = 0; s < n; s++) {
    plan->slot_shared[s] = shared[s];
    plan->slot_offset[s] = -1;
    if (plan->slot_kind[s] == FG_SLOT_ARENA) {
      plan->slot_offset[s] = (int64_t)off[s];
      plan->slots[s].data = plan->arena ? (char *)plan->arena + off[s] : NULL;
    }
  }
  return 0;
}

/* Several devices: one memory plan and arena per device, each over the
 * whole DAG (so reuse is safe under any interleaving of the devices' lanes)
 * with the other devices' tensors left out as pinned. */
static int layout_devices(fg_plan *plan, const fg_mp_tensor *t, int ns, const int *pred_off,
                          const int *preds, size_t *off, int *shared, fg_status *st) {
  int n = plan->n_slots, nd = plan->n_dev, rc = -1;
  fg_mp_tensor *td = malloc(((size_t)n + 1) * sizeof *td);
  size_t *doff = malloc(((size_t)n + 1) * sizeof *doff);
  int *dsh = malloc(((size_t)n + 1) * sizeof *dsh);
  plan->dev_bytes = calloc((size_t)nd, sizeof *plan->dev_bytes);
  plan->dev_arena = calloc((size_t)nd, sizeof *plan->dev_arena);
  if (!td || !doff || !dsh || !plan->dev_bytes || !plan->dev_arena) {
    fail_oom(st, "device memory plans");
    goto done;
  }
  uint64_t total = 0;
  plan->lower_bound_bytes = plan->naive_bytes = 0;
  for (int k = 0; k < n; k++)
    off[k] = SIZE_MAX, shared[k] = -1;
  for (int d = 0; d < nd; d++) {
    for (int k = 0; k < n; k++) {
      td[k] = t[k];
      if (plan->slot_dev[k] != d) td[k].pinned = 1;
      if (td[k].inplace_from >= 0 && plan->slot_dev[td[k].inplace_from] != d)
        td[k].inplace_from = -1;
    }
    fg_mp_input in = {ns, pred_off, preds, n, td, ALIGN};
    fg_mp_result out = {doff, dsh, 0, 0, 0};
    char err[256];
    if (fg_memplan(&in, &out, err, sizeof err) != 0) {
      fg_status_set(st, FG_INTERNAL, "memory planner (device %d): %s", d, err);
      goto done;
    }
    for (int k = 0; k < n; k++)
      if (plan->slot_dev[k] == d) off[k] = doff[k], shared[k] = dsh[k];
    plan->dev_bytes[d] = out.arena_bytes;
    total += out.arena_bytes;
    plan->lower_bound_bytes += out.lower_bound_bytes;
    plan->naive_bytes += out.naive_bytes;
  }
  uint64_t need = total + plan->pinned_bytes;
  if (check_memory(need < total ? UINT64_MAX : need, plan->max_memory_bytes,
                   "plan (the devices' arenas plus fetched outputs)", st) != 0)
    goto done;
  plan->arena_bytes = (size_t)total;
  for (int d = 0; d < nd; d++) {
    plan->dev_arena[d] = plan->arena_alloc(plan->dev_bytes[d]);
    if (!plan->dev_arena[d]) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                    "plan: cannot allocate the %zu-byte arena of device %d", plan->dev_bytes[d], d);
      goto done;
    }
  }
  for (int s = 0; s < n; s++) {
    plan->slot_shared[s] = shared[s];
    plan->slot_offset[s] = -1;
    if (plan->slot_kind[s] == FG_SLOT_ARENA) {
      plan->slot_offset[s] = (int64_t)off[s];
      plan->slots[s].data = (char *)plan->dev_arena[plan->slot_dev[s]] + off[s];
    }
  }
  rc = 0;
done:
  free(td);
  free(doff);
  free(dsh);
  return rc;
}

/* Plans memory on the DAG of `e` (sorted by source) itself: parallel-safe
 * by construction, without reuse edges. */
static int dag_layout(fg_plan *plan, const fg_mp_tensor *t, const int (*e)[2], int n_e, size_t *off,
                      int *shared, fg_status *st) {
  int ns = plan->n_steps;
  int *pred_off = calloc((size_t)ns + 2, sizeof *pred_off);
  int *fill = calloc((size_t)ns + 1, sizeof *fill);
  int *preds = malloc(((size_t)n_e + 1) * sizeof *preds);
  if (!pred_off || !fill || !preds) {
    free(pred_off), free(fill), free(preds);
    return fail_oom(st, "memory plan");
  }
  for (int i = 0; i < n_e; i++)
    pred_off[e[i][1] + 1]++;
  for (int si = 0; si < ns; si++)
    pred_off[si + 1] += pred_off[si];
  for (int i = 0; i < n_e; i++) {
    int to = e[i][1];
    preds[pred_off[to] + fill[to]++] = e[i][0];
  }
  int rc = plan->multi_device ? layout_devices(plan, t, ns, pred_off, preds, off, shared, st)
                              : layout(plan, t, ns, pred_off, preds, off, shared, st);
  free(pred_off);
  free(fill);
  free(preds);
  return rc;
}

/* Estimated run time of the steps on `threads` threads with these edges:
 * the longer of the critical path and the total work divided by the
 * threads. A step costs its FLOPs plus a fixed launch cost; a step large
 * enough for its kernel to split itself (FG_SPLIT_FLOPS) costs FLOPs /
 * threads. Edges are sorted by source and all go forward. */
#define FG_SPLIT_FLOPS ((int64_t)1 << 20)

static int64_t estimated_time(const fg_plan *plan, const int (*e)[2], int n_edges, int threads) {
  int64_t *dist = malloc(((size_t)plan->n_steps + 1) * sizeof *dist);
  if (!dist) return -1;
  const int64_t launch = 1000;
  int64_t cp = 0, total = 0;
  for (int si = 0; si < plan->n_steps; si++) {
    int64_t f = plan->steps[si].flops;
    dist[si] = launch + (f >= FG_SPLIT_FLOPS ? f / threads : f);
    total += launch + f; /* all the work, shared by the threads below */
  }
  int64_t *w = malloc(((size_t)plan->n_steps + 1) * sizeof *w);
  if (!w) {
    free(dist);
    return -1;
  }
  memcpy(w, dist, (size_t)plan->n_steps * sizeof *w);
  for (int i = 0; i < n_edges; i++) {
    int u = e[i][0], v = e[i][1];
    if (dist[u] + w[v] > dist[v]) dist[v] = dist[u] + w[v];
  }
  for (int si = 0; si < plan->n_steps; si++)
    if (dist[si] > cp) cp = dist[si];
  free(dist);
  free(w);
  return cp > total / threads ? cp : total / threads;
}

/* Input i of step st only orders it (fg_dist_control_input: a group's
 * inputs, an update's past the data its kernel reads such as
 * fg_minimize's wait for the readers of its variable, an all_reduce's
 * past its buffer). Its bytes are never read, so it is no use of the
 * tensor in the memory plan and keeps it alive no longer; the data edge to
 * its producer (build_edges) still orders the step. */
static int control_input(const fg_graph *g, const fg_step *st, int i) {
  return !st->xfer && fg_dist_control_input(&g->nodes[st->node], i);
}

static int plan_memory(const fg_graph *g, fg_plan *plan, fg_edges *E, fg_status *st) {
  int n = plan->n_slots, ns = plan->n_steps, rc = -1;
  int(*data_edges)[2] = NULL;
  fg_mp_tensor *t = calloc((size_t)n + 1, sizeof *t);
  int *use_cnt = calloc((size_t)n + 1, sizeof *use_cnt);
  int *pred_off = calloc((size_t)ns + 2, sizeof *pred_off);
  int *preds = malloc(((size_t)ns + 1) * sizeof *preds);
  size_t *off = malloc(((size_t)n + 1) * sizeof *off);
  int *shared = malloc(((size_t)n + 1) * sizeof *shared);
  int total_uses = 0;
  for (int si = 0; si < ns; si++)
    total_uses += plan->steps[si].n_in;
  int *all_users = malloc(((size_t)total_uses + 1) * sizeof *all_users);
  if (!t || !use_cnt || !pred_off || !preds || !off || !shared || !all_users) {
    fail_oom(st, "memory plan");
    goto done;
  }
  /* Users per slot (CSR). */
  for (int si = 0; si < ns; si++)
    for (int i = 0; i < plan->steps[si].n_in; i++)
      if (!control_input(g, &plan->steps[si], i)) use_cnt[plan->steps[si].in_slots[i]]++;
  int acc = 0;
  for (int s = 0; s < n; s++) {
    t[s].users = all_users + acc;
    acc += use_cnt[s];
    use_cnt[s] = 0;
  }
  for (int si = 0; si < ns; si++)
    for (int i = 0; i < plan->steps[si].n_in; i++) {
      if (control_input(g, &plan->steps[si], i)) continue;
      int s = plan->steps[si].in_slots[i];
      int *u = (int *)t[s].users;
      /* A step reading a slot twice counts once. */
      if (use_cnt[s] == 0 || u[use_cnt[s] - 1] != si) u[use_cnt[s]++] = si;
    }
  for (int s = 0; s < n; s++) {
    t[s].n_users = use_cnt[s];
    size_t bytes = fg_dtype_size(plan->slots[s].dtype);
    for (int d = 0; d < plan->slots[s].rank; d++)
      bytes *= (size_t)plan->slots[s].dims[d];
    t[s].bytes = bytes;                 /* checked at shape time */
    t[s].producer = plan->slot_step[s]; /* -1 for sources, which are pinned */
    t[s].pinned = plan->slot_kind[s] != FG_SLOT_ARENA;
    t[s].inplace_from = -1;
    int step = plan->slot_step[s];
    if (step >= 0 && !t[s].pinned && plan->steps[step].out_slots[0] == s &&
        plan->steps[step].n_in > 0) {
      unsigned f = fg_op_table[g->nodes[plan->steps[step].node].op].flags;
      /* Exactly equal bytes (same dtype, same element count): then even a
       * view-like op such as sum_to only copies, and can share the bytes. */
      int src = plan->steps[step].in_slots[0];
      size_t src_bytes = fg_dtype_size(plan->slots[src].dtype);
      for (int d = 0; d < plan->slots[src].rank; d++)
        src_bytes *= (size_t)plan->slots[src].dims[d];
      if ((f & (FG_OPF_INPLACE | FG_OPF_VIEW)) && src_bytes == t[s].bytes &&
          plan->slots[src].dtype == plan->slots[s].dtype)
        t[s].inplace_from = src;
    }
    plan->slot_last[s] = t[s].n_users ? t[s].users[t[s].n_users - 1] : -1;
  }
  if (plan->multi_device) {
    edges_sort_unique(E);
    rc = dag_layout(plan, t, (const int(*)[2])E->e, E->n, off, shared, st);
    goto done;
  }
  /* First the serial order (step s - 1 precedes step s), which reaches the
   * serial lower bound, made parallel-safe by reuse edges. */
  for (int si = 1; si < ns; si++)
    pred_off[si + 1] = 1;
  for (int si = 0; si < ns; si++)
    pred_off[si + 1] += pred_off[si];
  for (int si = 1; si < ns; si++)
    preds[pred_off[si]] = si - 1;
  edges_sort_unique(E);
  data_edges = malloc(((size_t)E->n + 1) * sizeof *data_edges);
  if (!data_edges) {
    fail_oom(st, "memory plan");
    goto done;
  }
  if (E->n > 0) memcpy(data_edges, E->e, (size_t)E->n * sizeof *data_edges);
  int n_data = E->n;
  if (layout(plan, t, ns, pred_off, preds, off, shared, st) != 0) goto done;
  int re = add_reuse_edges(plan, t, E);
  if (re != 0) {
    if (re == -2)
      fg_status_set(st, FG_INTERNAL, "memory planner: a buffer is reused while still live");
    else
      fail_oom(st, "reuse edges");
    goto done;
  }
  edges_sort_unique(E);
  /* Reuse edges can serialise independent branches. When that makes the
   * estimated run time on the session's threads more than 10% longer, plan
   * on the DAG itself instead: parallel-safe by construction, no extra
   * edges, more memory. (Large kernels split themselves over the threads,
   * so serialising them costs little; many small independent ops lose.) */
  int threads = fg_plan_threads(plan);
  int64_t cp_data = estimated_time(plan, data_edges, n_data, threads);
  int64_t cp_all = estimated_time(plan, E->e, E->n, threads);
  if (cp_all < 0 || cp_data < 0) {
    fail_oom(st, "critical path");
    goto done;
  }
  if ((double)cp_all > 1.1 * (double)cp_data) {
    E->n = n_data;
    if (n_data > 0) memcpy(E->e, data_edges, (size_t)n_data * sizeof *data_edges);
    if (dag_layout(plan, t, (const int(*)[2])data_edges, n_data, off, shared, st) != 0) goto done;
  }
  rc = 0;
done:
  free(data_edges);
  free(t);
  free(use_cnt);
  free(pred_off);
  free(preds);
  free(off);
  free(shared);
  free(all_users);
  return rc;
}

fg_plan *fg_plan_build(const fg_graph *g, const fg_plan_request *req, fg_var_lookup_fn vars,
                       void *vars_ctx, fg_status *st) {
  fg_plan *plan = calloc(1, sizeof *plan);
  char *needed = calloc((size_t)g->n_nodes + 1, 1);
  char *fetched = NULL;
  int *order = NULL;
  int *feed_of = malloc(((size_t)g->n_nodes + 1) * sizeof *feed_of);
  fg_xfer_state X = {0};
  fg_edges E = {0};
  if (!plan || !needed || !feed_of) {
    fail_oom(st, "bookkeeping");
    goto fail;
  }
  plan->graph_version = fg_graph_version(g);
  plan->threads = req->threads;
  plan->cuda = req->cuda;
  plan->arena_alloc =
      req->dist && req->dist->arena_alloc ? req->dist->arena_alloc : fg_aligned_alloc;
  plan->arena_free = req->dist && req->dist->arena_free ? req->dist->arena_free : free;
  plan->multi_device = req->dist && req->dist->n_dev > 1;
  plan->key = plan_key(req, &plan->key_len);
  plan->slot_of_output = malloc(((size_t)g->n_nodes + 1) * sizeof(int));
  if (!plan->key || !plan->slot_of_output) {
    fail_oom(st, "key");
    goto fail;
  }
  for (int i = 0; i < g->n_nodes; i++)
    feed_of[i] = -1, plan->slot_of_output[i] = -1;
  for (int i = 0; i < req->n_feeds; i++)
    feed_of[req->feed_nodes[i]] = i;
  if (fg_plan_mark_needed(g, req, needed) != 0) {
    fail_oom(st, "needed nodes");
    goto fail;
  }

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
  /* Several devices: room for the transfer steps and their slots
   * (plan_xfer.h). */
  const int *node_dev = plan->multi_device ? req->dist->node_dev : NULL;
  int n_node_slots = n_slots;
  plan->n_dev = plan->multi_device ? req->dist->n_dev : 1;
  /* Also a graph whose every node is on one other rank's device: a single
   * device here, but not this process's to run alone. */
  if (req->dist && req->dist->my_rank == -2) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "the graph places nodes on devices of other MPI ranks (rank:R/...) but the "
                  "session has no process communicator; attach one with fg_session_set_comm "
                  "(flowgraph train/run --dist mpi)");
    goto fail;
  }
  int64_t xcap = fg_xfer_max_steps(g, needed, req);
  if (xcap > INT32_MAX / 4) {
    fail_oom(st, "transfers");
    goto fail;
  }
  n_slots += (int)xcap;
  n_steps += (int)xcap;
  size_t ns1 = (size_t)n_slots + 1;
  plan->slots = calloc(ns1, sizeof *plan->slots);
  plan->slot_node = malloc(ns1 * sizeof(int));
  plan->slot_kind = malloc(ns1 * sizeof(int));
  plan->slot_step = malloc(ns1 * sizeof(int));
  plan->slot_last = malloc(ns1 * sizeof(int));
  plan->slot_shared = malloc(ns1 * sizeof(int));
  plan->slot_offset = malloc(ns1 * sizeof(int64_t));
  plan->steps = calloc((size_t)n_steps + 1, sizeof *plan->steps);
  plan->slot_dev = malloc(ns1 * sizeof(int));
  if (req->dist) plan->step_lane = malloc(((size_t)n_steps + 1) * sizeof(int));
  if (node_dev) plan->step_dev = malloc(((size_t)n_steps + 1) * sizeof(int));
  fetched = calloc(ns1, 1);
  if (!plan->slots || !plan->slot_node || !plan->slot_kind || !plan->slot_step ||
      !plan->slot_last || !plan->slot_shared || !plan->slot_offset || !plan->steps || !fetched ||
      !plan->slot_dev || (req->dist && !plan->step_lane) || (node_dev && !plan->step_dev)) {
    fail_oom(st, "slots");
    goto fail;
  }
  for (int i = 0; i < req->n_fetches; i++)
    fetched[plan->slot_of_output[req->fetches[i].node] + req->fetches[i].index] = 1;
  if (fg_xfer_init(&X, g, plan, req, n_node_slots, xcap, st) != 0) goto fail;

  /* Concrete shapes, kernels and parameters, in the serial step order
   * (plan_order.h). Several devices keep node order: their transfers are
   * numbered in it (plan_xfer.h), and their arenas are laid out on the DAG
   * (dag_layout), not on the serial order, so moving updates up would not
   * change them (the in-process data-parallel mlp_large_train: the same
   * 41.2 MB per device either way). */
  order = malloc(((size_t)g->n_nodes + 1) * sizeof *order);
  int n_order = order ? fg_plan_order(g, needed, !plan->multi_device, order) : -1;
  if (n_order < 0) {
    fail_oom(st, "step order");
    goto fail;
  }
  size_t pinned_bytes = 0;
  for (int oi = 0; oi < n_order; oi++) {
    const int id = order[oi];
    const fg_node *n = &g->nodes[id];
    const fg_op_def *def = &fg_op_table[n->op];
    int s0 = plan->slot_of_output[id];
    for (int o = 0; o < n->n_outputs; o++) {
      plan->slot_node[s0 + o] = id;
      plan->slot_step[s0 + o] = -1;
      plan->slot_shared[s0 + o] = -1;
      plan->slot_offset[s0 + o] = -1;
      plan->slot_last[s0 + o] = -1;
      plan->slot_dev[s0 + o] = -1;
    }
    if (def->flags & FG_OPF_SOURCE) {
      const fg_tensor *t = NULL;
      if (n->op == FG_OP_PLACEHOLDER) {
        t = req->feed_tensors[feed_of[id]];
        plan->slot_kind[s0] = FG_SLOT_FEED;
      } else if (n->op == FG_OP_VARIABLE) {
        t = vars(vars_ctx, id);
        plan->slot_kind[s0] = FG_SLOT_VARIABLE;
      } else {
        t = fg_attrs_find(&n->attrs, "value")->t;
        plan->slot_kind[s0] = FG_SLOT_CONSTANT;
      }
      if (!t) {
        fg_status_set(st, FG_INTERNAL, "node '%s' (%s): no value", n->name, def->name);
        goto fail;
      }
      fg_tinfo ti = tinfo_of_tensor(t);
      set_kbuf(&plan->slots[s0], &ti, t->data);
      continue;
    }
    if (fg_xfer_before_node(&X, id, st) != 0) goto fail;
    int local = fg_xfer_local(&X, id);
    int si = plan->n_steps++;
    fg_step *step = &plan->steps[si];
    step->node = id;
    if (node_dev) plan->step_dev[si] = node_dev[id];
    step->n_in = n->n_inputs;
    step->n_out = n->n_outputs;
    step->in_slots = malloc((size_t)(n->n_inputs ? n->n_inputs : 1) * sizeof(int));
    step->out_slots = malloc((size_t)n->n_outputs * sizeof(int));
    step->in = calloc((size_t)(n->n_inputs ? n->n_inputs : 1), sizeof *step->in);
    fg_tinfo in_stack[8];
    fg_tinfo *in = n->n_inputs <= 8 ? in_stack : malloc((size_t)n->n_inputs * sizeof *in);
    fg_tinfo out_stack[4];
    fg_tinfo *out = n->n_outputs <= 4 ? out_stack : malloc((size_t)n->n_outputs * sizeof *out);
    if (!in || !out || !step->in_slots || !step->out_slots || !step->in) {
      if (in != in_stack) free(in);
      if (out != out_stack) free(out);
      fail_oom(st, "steps");
      goto fail;
    }
    for (int i = 0; i < n->n_inputs; i++) {
      int s = plan->slot_of_output[n->inputs[i].node] + n->inputs[i].index;
      if (local) s = fg_xfer_input_slot(&X, id, i, s);
      const fg_kbuf *b = &plan->slots[s];
      step->in_slots[i] = s;
      in[i].dtype = b->dtype;
      in[i].rank = b->rank;
      for (int d = 0; d < FG_MAX_RANK; d++)
        in[i].dims[d] = b->dims[d];
    }
    int rc = fg_infer(n, in, out, st);
    if (rc == 0 && local) {
      fill_params(n, in, &step->params);
      step->flops = def->flops ? def->flops(n, in, out) : 0;
      plan->flops += step->flops;
    }
    if (in != in_stack) free(in);
    if (rc != 0) {
      if (out != out_stack) free(out);
      /* The graph was valid with unknown dims; the fed shapes made it fail. */
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", fg_status_message(st));
      fg_status_set(st, FG_INVALID_ARGUMENT, "%s (with the fed shapes)", msg);
      goto fail;
    }
    fg_dtype key = (def->flags & FG_OPF_KERNEL_KEY_INPUT) ? plan->slots[step->in_slots[0]].dtype
                                                          : out[0].dtype;
    /* A GPU plan's all_reduce runs the CPU kernel on host copies: the
     * CUDA backend stages it (executor/cuda/backend.c), so the MPI and
     * in-process communicators serve GPU sessions too. So do the nodes
     * placed on a CPU device in a GPU session (host steps). */
    step->host = req->cuda && req->host_nodes && req->host_nodes[id];
    step->fn = !local ? NULL
               : req->cuda && n->op != FG_OP_ALL_REDUCE && !step->host
                   ? fg_cuda_kernel(cuda_kernel_op(n, req), key)
                   : fg_cpu_kernel(def->name, key);
    for (int o = 0; o < n->n_outputs; o++) {
      int s = s0 + o;
      step->out_slots[o] = s;
      plan->slot_step[s] = si;
      plan->slot_dev[s] = node_dev ? node_dev[id] : 0;
      set_kbuf(&plan->slots[s], &out[o], NULL);
      size_t bytes = 0;
      if (fg_tinfo_bytes(&out[o], &bytes) != 0 || bytes > SIZE_MAX / 4) {
        char buf[FG_SHAPE_STR_MAX];
        fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                      "node '%s' (%s): output %d of shape %s is too large", n->name, def->name, o,
                      fg_shape_str(out[o].rank, out[o].dims, buf, sizeof buf));
        if (out != out_stack) free(out);
        goto fail;
      }
      /* One tensor alone over the limit: name it (the whole plan is checked
       * again, arena plus fetches, before either is allocated). */
      char what[300];
      snprintf(what, sizeof what, "node '%s' (%s) output %d", n->name, def->name, o);
      if (check_memory(bytes, req->max_memory_bytes, what, st) != 0) {
        if (out != out_stack) free(out);
        goto fail;
      }
      if (!local) {
        /* Another process computes it; what this one needs arrives by a
         * recv step into a slot of its own. */
        plan->slot_kind[s] = FG_SLOT_REMOTE;
      } else if (o == 0 && def->mutable_inputs) {
        /* The update's result is the variable itself. */
        plan->slot_kind[s] = FG_SLOT_VARIABLE;
        plan->slots[s].data = plan->slots[step->in_slots[0]].data;
      } else if (fetched[s]) {
        plan->slot_kind[s] = FG_SLOT_PINNED;
        plan->slot_offset[s] = (int64_t)pinned_bytes; /* temporarily: offset in the pinned block */
        pinned_bytes += (bytes + ALIGN - 1) & ~(size_t)(ALIGN - 1);
      } else {
        plan->slot_kind[s] = FG_SLOT_ARENA;
      }
    }
    if (out != out_stack) free(out);
    if (!local) {
      /* Another process runs it. Its shapes were needed (what crosses to
       * this process is shaped by them); a step is not: this rank's plan
       * holds its own work only, so no lane wakes for nothing and no
       * ordering edge runs through a node this process never runs. */
      for (int o = 0; o < n->n_outputs; o++)
        plan->slot_step[s0 + o] = -1;
      free(step->in_slots);
      free(step->out_slots);
      free(step->in);
      memset(step, 0, sizeof *step);
      plan->n_steps--;
      continue;
    }
    if (!step->fn) {
      fg_status_set(st, FG_UNIMPLEMENTED, "node '%s' (%s): no %s kernel for dtype %s", n->name,
                    def->name, req->cuda && !step->host ? "CUDA" : "CPU", fg_dtype_name(key));
      goto fail;
    }
  }

  if (fg_xfer_fetches(&X, req, &pinned_bytes, st) != 0) goto fail;
  n_slots = plan->n_slots = plan->multi_device ? X.next_slot : n_node_slots;
  /* The fetch buffers are allocated after the arena's layout, so the
   * memory check sees both before either exists. */
  plan->pinned_bytes = pinned_bytes;
  plan->max_memory_bytes = req->max_memory_bytes;
  int64_t *pin_off = malloc(ns1 * sizeof *pin_off);
  if (!pin_off) {
    fail_oom(st, "fetches");
    goto fail;
  }
  for (int s = 0; s < n_slots; s++)
    pin_off[s] = plan->slot_offset[s];

  int chain_rc = 0;
  /* Each rank's sends, and its receives, in tag order (plan_xfer.h). */
  for (int i = 1; i < X.n_sends; i++)
    chain_rc |= fg_edge_add(&E, X.sends[i - 1], X.sends[i]);
  for (int i = 1; i < X.n_recvs; i++)
    chain_rc |= fg_edge_add(&E, X.recvs[i - 1], X.recvs[i]);
  /* Each device's all_reduce steps in step (node id) order: a collective
   * pairs the k-th call of every member, so each device must make its
   * calls in the order the graph pairs them (executor/dist/session_dist.c
   * check_pairs), not in whatever order its inputs become ready. */
  int n_dev = req->dist && node_dev ? req->dist->n_dev : 1;
  int *last_ar = malloc((size_t)n_dev * sizeof *last_ar);
  chain_rc |= !last_ar;
  for (int d = 0; last_ar && d < n_dev; d++)
    last_ar[d] = -1;
  for (int si = 0; last_ar && si < plan->n_steps; si++) {
    const fg_step *step = &plan->steps[si];
    if (step->xfer || !fg_node_is_collective(&g->nodes[step->node])) continue;
    int d = node_dev ? plan->step_dev[si] : 0;
    if (d < 0 || d >= n_dev) continue;
    if (last_ar[d] >= 0) chain_rc |= fg_edge_add(&E, last_ar[d], si);
    last_ar[d] = si;
  }
  free(last_ar);
  if (chain_rc != 0 || build_edges(g, plan, &E) != 0) {
    free(pin_off);
    fail_oom(st, "edges");
    goto fail;
  }
  if (plan_memory(g, plan, &E, st) != 0) {
    free(pin_off);
    goto fail;
  }
  plan->pinned = fg_aligned_alloc(pinned_bytes);
  if (!plan->pinned) {
    free(pin_off);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "plan: cannot allocate %zu bytes for fetches",
                  pinned_bytes);
    goto fail;
  }
  for (int s = 0; s < n_slots; s++)
    if (plan->slot_kind[s] == FG_SLOT_PINNED)
      plan->slots[s].data = (char *)plan->pinned + pin_off[s];
  free(pin_off);

  /* The pool's view of the DAG: predecessor counts and successor lists. */
  plan->n_preds = calloc((size_t)plan->n_steps + 1, sizeof(int));
  plan->succ_off = calloc((size_t)plan->n_steps + 2, sizeof(int));
  plan->succ = malloc(((size_t)E.n + 1) * sizeof(int));
  if (!plan->n_preds || !plan->succ_off || !plan->succ) {
    fail_oom(st, "schedule");
    goto fail;
  }
  for (int i = 0; i < E.n; i++) {
    plan->n_preds[E.e[i][1]]++;
    plan->succ_off[E.e[i][0] + 1]++;
    plan->succ[i] = E.e[i][1]; /* edges are sorted by source */
  }
  for (int si = 0; si < plan->n_steps; si++)
    plan->succ_off[si + 1] += plan->succ_off[si];
  for (int si = 0; req->dist && si < plan->n_steps; si++) {
    const fg_step *step = &plan->steps[si];
    int kind = step->xfer == FG_XFER_SEND ? FG_LANE_SEND
               : step->xfer == FG_XFER_RECV ||
                       (!step->xfer && fg_node_is_collective(&g->nodes[step->node]))
                   ? FG_LANE_COMM
                   : FG_LANE_COMPUTE;
    int lane = fg_dist_lane(req->dist, node_dev ? plan->step_dev[si] : 0, kind);
    plan->step_lane[si] = lane;
    plan->use_lanes |= lane != 0;
  }

  plan->n_feeds = req->n_feeds;
  plan->n_fetches = req->n_fetches;
  plan->feed_slots = malloc(((size_t)req->n_feeds + 1) * sizeof(int));
  plan->fetch_slots = malloc(((size_t)req->n_fetches + 1) * sizeof(int));
  plan->timings = calloc((size_t)plan->n_steps + 1, sizeof *plan->timings);
  if (!plan->feed_slots || !plan->fetch_slots || !plan->timings) {
    fail_oom(st, "feeds");
    goto fail;
  }
  for (int i = 0; i < req->n_feeds; i++)
    plan->feed_slots[i] =
        needed[req->feed_nodes[i]] ? plan->slot_of_output[req->feed_nodes[i]] : -1;
  for (int i = 0; i < req->n_fetches; i++) {
    plan->fetch_slots[i] = plan->slot_of_output[req->fetches[i].node] + req->fetches[i].index;
    if (X.fetch_slot && X.fetch_slot[i] >= 0) plan->fetch_slots[i] = X.fetch_slot[i];
  }

  free(E.e);
  free(order);
  free(needed);
  free(fetched);
  free(feed_of);
  fg_xfer_free(&X);
  return plan;

fail:
  free(E.e);
  free(order);
  free(needed);
  free(fetched);
  free(feed_of);
  fg_xfer_free(&X);
  fg_plan_free(plan);
  return NULL;
}
