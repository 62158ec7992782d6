/* Helpers for the memory planner tests: a small DAG builder over plain
 * fg_mp_input arrays, and an independent checker of a plan's safety. The
 * checker computes ancestry by Warshall's transitive closure (not the
 * planner's bitset pass) and validates every overlapping pair of byte
 * ranges, so a planner bug cannot hide behind a shared helper. */
#ifndef TEST_MEMPLAN_UTIL_H
#define TEST_MEMPLAN_UTIL_H

#include "executor/memplan.h"
#include "fgtest.h"

#define TG_MAX_STEPS   256
#define TG_MAX_TENSORS 512
#define TG_MAX_USERS   64
#define TG_MAX_EDGES   4096

/* Test hook in memplan.c: the step count above which ancestry falls back to
 * the conservative cut rule (negative restores the default). */
void fg_memplan_test_set_bitset_cap(int cap);

typedef struct tg {
  int n_steps;
  int pred_off[TG_MAX_STEPS + 1];
  int preds[TG_MAX_EDGES];
  int n_t;
  fg_mp_tensor t[TG_MAX_TENSORS];
  int users[TG_MAX_TENSORS][TG_MAX_USERS];
  /* plan outputs */
  size_t offsets[TG_MAX_TENSORS];
  int shared[TG_MAX_TENSORS];
  fg_mp_result r;
  char err[256];
} tg;

static inline tg *tg_new(void) { return calloc(1, sizeof(tg)); }

/* Adds a step reading tensors `in` (-1 entries: a source outside the plan,
 * such as a variable) plus control predecessors `ctl`; returns its index. */
static inline int tg_step(tg *g, const int *in, int n_in, const int *ctl, int n_ctl) {
  int s = g->n_steps++;
  int k = g->pred_off[s];
  for (int i = 0; i < n_in + n_ctl; i++) {
    int p = i < n_in ? (in[i] >= 0 ? g->t[in[i]].producer : -1) : ctl[i - n_in];
    if (i < n_in && in[i] >= 0) {
      fg_mp_tensor *x = &g->t[in[i]];
      int dup = 0;
      for (int u = 0; u < x->n_users; u++)
        dup |= g->users[in[i]][u] == s;
      if (!dup && x->n_users < TG_MAX_USERS) g->users[in[i]][x->n_users++] = s;
    }
    if (p < 0) continue;
    int dup = 0;
    for (int j = g->pred_off[s]; j < k; j++)
      dup |= g->preds[j] == p;
    if (!dup && k < TG_MAX_EDGES) g->preds[k++] = p;
  }
  g->pred_off[s + 1] = k;
  return s;
}

/* Adds a tensor written by step `s`. */
static inline int tg_out(tg *g, int s, size_t bytes) {
  int id = g->n_t++;
  g->t[id] = (fg_mp_tensor){bytes, s, 0, g->users[id], -1, 0};
  return id;
}

/* One step with inputs a, b, c (-1: none or a source) and one output. */
static inline int tg_op(tg *g, size_t bytes, int a, int b, int c) {
  int in[3] = {a, b, c};
  return tg_out(g, tg_step(g, in, 3, NULL, 0), bytes);
}

static inline void tg_input(const tg *g, fg_mp_input *in, size_t alignment) {
  *in = (fg_mp_input){g->n_steps, g->pred_off, g->preds, g->n_t, g->t, alignment};
}

static inline int tg_plan(tg *g, size_t alignment) {
  fg_mp_input in;
  tg_input(g, &in, alignment);
  memset(&g->r, 0, sizeof g->r);
  g->r.offsets = g->offsets;
  g->r.shared_with = g->shared;
  g->err[0] = '\0';
  return fg_memplan(&in, &g->r, g->err, sizeof g->err);
}

static inline size_t tg_asz(size_t bytes, size_t al) { return (bytes + al - 1) / al * al; }

/* reach[x][y]: x is a strict ancestor of y (Warshall's closure). */
typedef unsigned char tg_row[TG_MAX_STEPS];
static inline tg_row *tg_reach(const tg *g) {
  tg_row *r = calloc(TG_MAX_STEPS, sizeof *r);
  if (!r) return NULL;
  for (int s = 0; s < g->n_steps; s++)
    for (int k = g->pred_off[s]; k < g->pred_off[s + 1]; k++)
      r[g->preds[k]][s] = 1;
  for (int k = 0; k < g->n_steps; k++)
    for (int i = 0; i < g->n_steps; i++)
      if (r[i][k])
        for (int j = 0; j < g->n_steps; j++)
          if (r[k][j]) r[i][j] = 1;
  return r;
}

/* Every step touching a (producer, users) is a strict ancestor of `step`,
 * except possibly `skip`. */
static inline int tg_all_before(const tg *g, tg_row *reach, int a, int step, int skip) {
  const fg_mp_tensor *x = &g->t[a];
  if (x->producer != skip && !reach[x->producer][step]) return 0;
  for (int u = 0; u < x->n_users; u++)
    if (x->users[u] != skip && !reach[x->users[u]][step]) return 0;
  return 1;
}

static inline int tg_reads(const tg *g, int a, int step) {
  for (int u = 0; u < g->t[a].n_users; u++)
    if (g->t[a].users[u] == step) return 1;
  return 0;
}

static inline int tg_find(int *parent, int x) {
  while (parent[x] != x)
    x = parent[x] = parent[parent[x]];
  return x;
}

/* Checks a successful plan; returns the number of violations (each
 * reported). Independent of the planner's own bookkeeping. */
static inline int tg_check(const tg *g, size_t al) {
  int bad = 0;
  tg_row *reach = tg_reach(g);
  if (!reach) return 1;
  size_t naive = 0;
  for (int t = 0; t < g->n_t; t++) {
    const fg_mp_tensor *x = &g->t[t];
    size_t sz = tg_asz(x->bytes, al);
    if (x->pinned) {
      if (g->offsets[t] != SIZE_MAX || g->shared[t] != -1) {
        FG_FAIL_AT("pinned tensor %d got offset %zu shared %d", t, g->offsets[t], g->shared[t]);
        bad++;
      }
      continue;
    }
    naive += sz;
    if (g->offsets[t] % al != 0 || g->offsets[t] > g->r.arena_bytes ||
        sz > g->r.arena_bytes - g->offsets[t]) {
      FG_FAIL_AT("tensor %d: offset %zu size %zu, arena %zu, alignment %zu", t, g->offsets[t], sz,
                 g->r.arena_bytes, al);
      bad++;
    }
    int s = g->shared[t];
    if (s >= 0) {
      const fg_mp_tensor *y = &g->t[s];
      if (s != x->inplace_from || y->pinned || tg_asz(y->bytes, al) != sz ||
          g->offsets[s] != g->offsets[t] || !tg_reads(g, s, x->producer) ||
          !tg_all_before(g, reach, s, x->producer, x->producer)) {
        FG_FAIL_AT("tensor %d shares tensor %d's bytes illegally", t, s);
        bad++;
      }
    }
  }
  if (naive != g->r.naive_bytes) {
    FG_FAIL_AT("naive_bytes %zu, expected %zu", g->r.naive_bytes, naive);
    bad++;
  }
  for (int a = 0; a < g->n_t; a++)
    for (int b = a + 1; b < g->n_t; b++) {
      const fg_mp_tensor *x = &g->t[a], *y = &g->t[b];
      size_t sa = tg_asz(x->bytes, al), sb = tg_asz(y->bytes, al);
      if (x->pinned || y->pinned || sa == 0 || sb == 0) continue;
      size_t oa = g->offsets[a], ob = g->offsets[b];
      if (oa + sa <= ob || ob + sb <= oa) continue;
      if (tg_all_before(g, reach, a, y->producer, -1)) continue;
      if (tg_all_before(g, reach, b, x->producer, -1)) continue;
      /* in place: the writer reads the source and every other step touching
       * the source precedes the writer */
      if (g->shared[b] == a && x->producer != y->producer &&
          tg_all_before(g, reach, a, y->producer, y->producer))
        continue;
      if (g->shared[a] == b && x->producer != y->producer &&
          tg_all_before(g, reach, b, x->producer, x->producer))
        continue;
      FG_FAIL_AT("tensors %d [%zu,+%zu) and %d [%zu,+%zu) overlap but may be live together", a, oa,
                 sa, b, ob, sb);
      bad++;
    }
  /* lower bound, recomputed: in-place groups live from their first
   * producer to their last touching step, counted once */
  int parent[TG_MAX_TENSORS];
  for (int t = 0; t < g->n_t; t++)
    parent[t] = t;
  for (int t = 0; t < g->n_t; t++)
    if (g->shared[t] >= 0) parent[tg_find(parent, t)] = tg_find(parent, g->shared[t]);
  int lo[TG_MAX_TENSORS], hi[TG_MAX_TENSORS];
  for (int t = 0; t < g->n_t; t++)
    lo[t] = INT32_MAX, hi[t] = -1;
  for (int t = 0; t < g->n_t; t++) {
    if (g->t[t].pinned) continue;
    int root = tg_find(parent, t);
    const fg_mp_tensor *x = &g->t[t];
    if (x->producer < lo[root]) lo[root] = x->producer;
    if (x->producer > hi[root]) hi[root] = x->producer;
    for (int u = 0; u < x->n_users; u++)
      if (x->users[u] > hi[root]) hi[root] = x->users[u];
  }
  size_t peak = 0;
  for (int s = 0; s < g->n_steps; s++) {
    size_t live = 0;
    for (int t = 0; t < g->n_t; t++)
      if (!g->t[t].pinned && parent[t] == t && lo[t] <= s && s <= hi[t])
        live += tg_asz(g->t[t].bytes, al);
    if (live > peak) peak = live;
  }
  if (peak != g->r.lower_bound_bytes) {
    FG_FAIL_AT("lower_bound_bytes %zu, expected %zu", g->r.lower_bound_bytes, peak);
    bad++;
  }
  if (g->r.arena_bytes < g->r.lower_bound_bytes || g->r.arena_bytes > g->r.naive_bytes) {
    FG_FAIL_AT("arena %zu outside [lower bound %zu, naive %zu]", g->r.arena_bytes,
               g->r.lower_bound_bytes, g->r.naive_bytes);
    bad++;
  }
  free(reach);
  return bad;
}

#endif
