/* The memory stage of plan building (plan_stages.h): where each slot's
 * bytes live, the arena's layout by the memory planner (memplan.h) with the
 * edges that keep its reuse safe, and the fetch buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor/dist/exec.h"
#include "executor/memplan.h"
#include "executor/plan_stages.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

/* The machine's physical memory in bytes, 0 if unknown. A plan above it
 * would be killed by the OOM killer on first touch (malloc overcommits), so
 * it is refused like one over the session's limit. */
static uint64_t phys_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

int fg_plan_check_memory(uint64_t need, int64_t limit, const char *what, fg_status *st) {
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
  fg_plan_edges_sort_unique(E);
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
  fg_mp_input in = {ns, pred_off, preds, n, t, FG_PLAN_ALIGN};
  fg_mp_result out = {off, shared, 0, 0, 0};
  char err[256];
  if (fg_memplan(&in, &out, err, sizeof err) != 0) {
    fg_status_set(st, FG_INTERNAL, "memory planner: %s", err);
    return -1;
  }
  /* Arena plus fetched outputs: what the plan holds while it is cached. */
  uint64_t need = (uint64_t)out.arena_bytes + plan->pinned_bytes;
  if (fg_plan_check_memory(need < out.arena_bytes ? UINT64_MAX : need, plan->max_memory_bytes,
                           "plan (arena plus fetched outputs)", st) != 0)
    return -1;
  fg_plan_release_arena(plan, plan->arena);
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
    fg_plan_oom(st, "device memory plans");
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
    fg_mp_input in = {ns, pred_off, preds, n, td, FG_PLAN_ALIGN};
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
  if (fg_plan_check_memory(need < total ? UINT64_MAX : need, plan->max_memory_bytes,
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
    return fg_plan_oom(st, "memory plan");
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

static size_t kbuf_bytes(const fg_kbuf *k) {
  size_t bytes = fg_dtype_size(k->dtype);
  for (int d = 0; d < k->rank; d++)
    bytes *= (size_t)k->dims[d];
  return bytes;
}

/* Slot s as the memory planner sees it (its users already in t[s]), and
 * the last step reading it. */
static void describe_slot(const fg_graph *g, fg_plan *plan, fg_mp_tensor *t, int s) {
  t[s].bytes = kbuf_bytes(&plan->slots[s]); /* checked at shape time */
  t[s].producer = plan->slot_step[s];       /* -1 for sources, which are pinned */
  t[s].pinned = plan->slot_kind[s] != FG_SLOT_ARENA;
  t[s].inplace_from = -1;
  int step = plan->slot_step[s];
  if (step >= 0 && !t[s].pinned && plan->steps[step].out_slots[0] == s &&
      plan->steps[step].n_in > 0) {
    unsigned f = fg_op_table[g->nodes[plan->steps[step].node].op].flags;
    /* Exactly equal bytes (same dtype, same element count): then even a
     * view-like op such as sum_to only copies, and can share the bytes. */
    int src = plan->steps[step].in_slots[0];
    if ((f & (FG_OPF_INPLACE | FG_OPF_VIEW)) && kbuf_bytes(&plan->slots[src]) == t[s].bytes &&
        plan->slots[src].dtype == plan->slots[s].dtype)
      t[s].inplace_from = src;
  }
  plan->slot_last[s] = t[s].n_users ? t[s].users[t[s].n_users - 1] : -1;
}

/* The memory planner's tensors, one per slot; their users (CSR) in
 * *users, which the caller frees with the result. NULL when out of
 * memory. */
static fg_mp_tensor *planner_tensors(const fg_graph *g, fg_plan *plan, int **users) {
  int n = plan->n_slots, ns = plan->n_steps;
  fg_mp_tensor *t = calloc((size_t)n + 1, sizeof *t);
  int *use_cnt = calloc((size_t)n + 1, sizeof *use_cnt);
  int total_uses = 0;
  for (int si = 0; si < ns; si++)
    total_uses += plan->steps[si].n_in;
  int *all_users = *users = malloc(((size_t)total_uses + 1) * sizeof *all_users);
  if (!t || !use_cnt || !all_users) {
    free(t);
    free(use_cnt);
    return NULL;
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
    describe_slot(g, plan, t, s);
  }
  free(use_cnt);
  return t;
}

/* One device: first the serial order (step s - 1 precedes step s), which
 * reaches the serial lower bound, made parallel-safe by reuse edges added
 * to E. */
static int serial_layout(fg_plan *plan, const fg_mp_tensor *t, fg_edges *E, size_t *off,
                         int *shared, fg_status *st) {
  int ns = plan->n_steps, rc = -1;
  int *pred_off = calloc((size_t)ns + 2, sizeof *pred_off);
  int *preds = malloc(((size_t)ns + 1) * sizeof *preds);
  fg_plan_edges_sort_unique(E);
  int(*data_edges)[2] = malloc(((size_t)E->n + 1) * sizeof *data_edges);
  if (!pred_off || !preds || !data_edges) {
    fg_plan_oom(st, "memory plan");
    goto done;
  }
  for (int si = 1; si < ns; si++)
    pred_off[si + 1] = 1;
  for (int si = 0; si < ns; si++)
    pred_off[si + 1] += pred_off[si];
  for (int si = 1; si < ns; si++)
    preds[pred_off[si]] = si - 1;
  if (E->n > 0) memcpy(data_edges, E->e, (size_t)E->n * sizeof *data_edges);
  int n_data = E->n;
  if (layout(plan, t, ns, pred_off, preds, off, shared, st) != 0) goto done;
  int re = add_reuse_edges(plan, t, E);
  if (re != 0) {
    if (re == -2)
      fg_status_set(st, FG_INTERNAL, "memory planner: a buffer is reused while still live");
    else
      fg_plan_oom(st, "reuse edges");
    goto done;
  }
  fg_plan_edges_sort_unique(E);
  /* Reuse edges can serialise independent branches. When that makes the
   * estimated run time on the session's threads more than 10% longer, plan
   * on the DAG itself instead: parallel-safe by construction, no extra
   * edges, more memory. (Large kernels split themselves over the threads,
   * so serialising them costs little; many small independent ops lose.) */
  int threads = fg_plan_threads(plan);
  int64_t cp_data = estimated_time(plan, (const int(*)[2])data_edges, n_data, threads);
  int64_t cp_all = estimated_time(plan, (const int(*)[2])E->e, E->n, threads);
  if (cp_all < 0 || cp_data < 0) {
    fg_plan_oom(st, "critical path");
    goto done;
  }
  if ((double)cp_all > 1.1 * (double)cp_data) {
    E->n = n_data;
    if (n_data > 0) memcpy(E->e, data_edges, (size_t)n_data * sizeof *data_edges);
    if (dag_layout(plan, t, (const int(*)[2])data_edges, n_data, off, shared, st) != 0) goto done;
  }
  rc = 0;
done:
  free(pred_off);
  free(preds);
  free(data_edges);
  return rc;
}

/* Lays the arena (or the devices' arenas) out and binds the arena slots;
 * E gains the reuse edges the layout needs. */
static int layout_arena(const fg_graph *g, fg_plan *plan, fg_edges *E, fg_status *st) {
  int n = plan->n_slots, rc = -1;
  int *users = NULL;
  fg_mp_tensor *t = planner_tensors(g, plan, &users);
  size_t *off = malloc(((size_t)n + 1) * sizeof *off);
  int *shared = malloc(((size_t)n + 1) * sizeof *shared);
  if (!t || !off || !shared) {
    fg_plan_oom(st, "memory plan");
  } else if (plan->multi_device) {
    fg_plan_edges_sort_unique(E);
    rc = dag_layout(plan, t, (const int(*)[2])E->e, E->n, off, shared, st);
  } else {
    rc = serial_layout(plan, t, E, off, shared, st);
  }
  free(t);
  free(users);
  free(off);
  free(shared);
  return rc;
}

/* Where each step's outputs live: an update's output 0 is its variable,
 * a fetched output gets a fetch buffer (its offset in that block in
 * pin_off, in step order), and anything else goes in the arena. Returns
 * the fetch block's bytes. */
static size_t place_slots(fg_plan_builder *b, int64_t *pin_off) {
  fg_plan *plan = b->plan;
  size_t pinned = 0;
  for (int si = 0; si < plan->n_steps; si++) {
    const fg_step *step = &plan->steps[si];
    const fg_op_def *def = &fg_op_table[b->g->nodes[step->node].op];
    for (int o = 0; o < step->n_out; o++) {
      int s = step->out_slots[o];
      if (step->xfer) {
        /* Transfers placed their own (plan_xfer.c). */
      } else if (o == 0 && def->mutable_inputs) {
        plan->slot_kind[s] = FG_SLOT_VARIABLE;
        plan->slots[s].data = plan->slots[step->in_slots[0]].data;
      } else {
        plan->slot_kind[s] = b->fetched[s] ? FG_SLOT_PINNED : FG_SLOT_ARENA;
      }
      if (plan->slot_kind[s] != FG_SLOT_PINNED) continue;
      pin_off[s] = (int64_t)pinned;
      pinned += (kbuf_bytes(&plan->slots[s]) + FG_PLAN_ALIGN - 1) & ~(size_t)(FG_PLAN_ALIGN - 1);
    }
  }
  return pinned;
}

int fg_plan_memory(fg_plan_builder *b, fg_status *st) {
  fg_plan *plan = b->plan;
  int64_t *pin_off = malloc(((size_t)plan->n_slots + 1) * sizeof *pin_off);
  if (!pin_off) return fg_plan_oom(st, "fetches");
  /* The fetch buffers are allocated after the arena's layout, so the
   * memory check sees both before either exists. */
  plan->pinned_bytes = place_slots(b, pin_off);
  plan->max_memory_bytes = b->req->max_memory_bytes;
  if (layout_arena(b->g, plan, &b->E, st) != 0) {
    free(pin_off);
    return -1;
  }
  plan->pinned = fg_aligned_alloc(plan->pinned_bytes);
  if (!plan->pinned) {
    free(pin_off);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "plan: cannot allocate %zu bytes for fetches",
                  plan->pinned_bytes);
    return -1;
  }
  for (int s = 0; s < plan->n_slots; s++)
    if (plan->slot_kind[s] == FG_SLOT_PINNED)
      plan->slots[s].data = (char *)plan->pinned + pin_off[s];
  free(pin_off);
  return 0;
}
