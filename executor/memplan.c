/* The static memory planner (see memplan.h for the rules).
 *
 * Ancestry is what makes reuse safe under any schedule, so it is computed
 * exactly where that is affordable: one bitset row per step, built in one
 * pass because steps come topologically numbered. Rows cost n_steps^2 / 8
 * bytes, so above MP_BITSET_MAX_STEPS steps (32 MiB of rows) the planner
 * falls back to a conservative test that only ever answers "ancestor" when
 * it is true: x is an ancestor of y when x is a direct predecessor of y, or
 * when a "cut" step c with x <= c <= y (x < y) exists, c being a step that
 * every lower step reaches and every higher step descends from (see
 * mp_build_cuts). Graphs with a spine (layer stacks, residual stacks,
 * training steps) keep their reuse across the spine; reuse between
 * parallel branches needs a direct edge, so wide graphs lose some. No plan
 * is ever unsafe. Cuts also settle most pairs of distant buffers in O(1)
 * when the rows exist.
 *
 * In-place merging keeps one invariant per buffer: every step touching an
 * earlier member is an ancestor of the latest member's producer. So the
 * latest member's touching steps (producer and users) stand for the whole
 * buffer, both for the next merge and for conflicts, and the buffer's last
 * step is the latest member's last step.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/memplan.h"

#define MP_BITSET_MAX_STEPS   16384
#define MP_CONFLICT_CACHE_MAX 16384 /* buffers: a 32 MiB bit matrix */

static int mp_bitset_cap = MP_BITSET_MAX_STEPS;

/* Test hook: lets tests force the fallback ancestry on small graphs
 * (a negative cap restores the default). Not part of the public contract. */
void fg_memplan_test_set_bitset_cap(int cap);
void fg_memplan_test_set_bitset_cap(int cap) {
  mp_bitset_cap = cap >= 0 ? cap : MP_BITSET_MAX_STEPS;
}

static int mp_fail(char *err, size_t err_size, const char *fmt, ...) {
  if (err && err_size) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_size, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static void *mp_calloc(size_t n, size_t size) {
  if (n == 0) n = 1;
  if (size && n > SIZE_MAX / size) return NULL;
  return calloc(n, size);
}

/* The partial order: cut steps always (cheap, and they answer most
 * questions about distant steps at once), bitset rows when affordable. */
typedef struct mp_order {
  int n;
  const int *pred_off, *preds;
  int *next_cut; /* the smallest cut step >= i, or n */
  uint64_t *anc; /* n rows of `words` words: bit x of row y = x is an ancestor of y; or NULL */
  size_t words;
} mp_order;

/* x is an ancestor of y. Without rows the answer may be a false "no"
 * (costing reuse), never a false "yes". Through a cut c, x <= c <= y:
 * x reaches c (or is c) and c reaches y (or is y). */
static int mp_is_anc(const mp_order *o, int x, int y) {
  if (x < 0 || x >= y) return 0;
  if (o->next_cut[x] <= y) return 1;
  if (o->anc) return (int)((o->anc[(size_t)y * o->words + (size_t)x / 64] >> (x % 64)) & 1u);
  for (int k = o->pred_off[y]; k < o->pred_off[y + 1]; k++)
    if (o->preds[k] == x) return 1;
  return 0;
}

/* A step c is a cut when every lower step is its ancestor and every higher
 * step its descendant. low[t] is a sound estimate of the prefix of steps
 * all known to be ancestors of t ([0, low[t]) is inside them): a
 * predecessor p gives its own prefix, or [0, p] when that prefix is all of
 * [0, p); a predecessor equal to the prefix end extends it. Then c is a cut
 * when low[c] == c and low[t] > c for every t > c. This finds every cut of
 * chains, residual stacks and training graphs' spines; a missed cut only
 * costs reuse in the fallback and speed with rows. */
static int mp_build_cuts(mp_order *o) {
  int n = o->n;
  int *low = mp_calloc((size_t)n + 1, sizeof *low);
  o->next_cut = mp_calloc((size_t)n + 1, sizeof *o->next_cut);
  if (!low || !o->next_cut) {
    free(low);
    return -1;
  }
  for (int t = 0; t < n; t++) {
    int lt = 0, grew = 1;
    for (int k = o->pred_off[t]; k < o->pred_off[t + 1]; k++) {
      int p = o->preds[k], lp = low[p] == p ? p + 1 : low[p];
      if (lp > lt) lt = lp;
    }
    /* a few passes catch predecessors listed out of order; more would cost
     * quadratic time on a wide join for little */
    for (int pass = 0; grew && pass < 4; pass++) {
      grew = 0;
      for (int k = o->pred_off[t]; k < o->pred_off[t + 1]; k++) {
        int p = o->preds[k];
        if (p == lt) {
          lt = p + 1;
          grew = 1;
        }
      }
    }
    low[t] = lt;
  }
  int min_after = INT32_MAX; /* min low[t] over t > c */
  o->next_cut[n] = n;
  for (int c = n - 1; c >= 0; c--) {
    int cut = low[c] == c && min_after > c;
    o->next_cut[c] = cut ? c : o->next_cut[c + 1];
    if (low[c] < min_after) min_after = low[c];
  }
  free(low);
  return 0;
}

static int mp_build_order(mp_order *o) {
  int n = o->n;
  if (mp_build_cuts(o) != 0) return -1;
  if (n > mp_bitset_cap) return 0;
  o->words = ((size_t)n + 63) / 64;
  if (o->words && (size_t)n > SIZE_MAX / o->words) return -1;
  o->anc = mp_calloc((size_t)n * o->words, sizeof *o->anc);
  if (!o->anc) return -1;
  for (int s = 0; s < n; s++) {
    uint64_t *row = o->anc + (size_t)s * o->words;
    for (int k = o->pred_off[s]; k < o->pred_off[s + 1]; k++) {
      int p = o->preds[k];
      const uint64_t *prow = o->anc + (size_t)p * o->words;
      /* p < s, so only the words up to p's can be non-zero */
      for (size_t w = 0; w <= (size_t)p / 64; w++)
        row[w] |= prow[w];
      row[p / 64] |= (uint64_t)1 << (p % 64);
    }
  }
  return 0;
}

static int mp_check_input(const fg_mp_input *in, fg_mp_result *out, char *err, size_t es) {
  if (!in || !out) return mp_fail(err, es, "memplan: NULL input or result");
  if (in->n_steps < 0) return mp_fail(err, es, "memplan: n_steps is %d (negative)", in->n_steps);
  if (in->n_tensors < 0)
    return mp_fail(err, es, "memplan: n_tensors is %d (negative)", in->n_tensors);
  if (in->alignment == 0 || (in->alignment & (in->alignment - 1)) != 0)
    return mp_fail(err, es, "memplan: alignment %zu is not a power of two", in->alignment);
  if (in->n_tensors > 0 && (!in->tensors || !out->offsets || !out->shared_with))
    return mp_fail(err, es, "memplan: %d tensors but NULL tensors, offsets or shared_with",
                   in->n_tensors);
  int n = in->n_steps;
  if (n > 0 && !in->pred_off) return mp_fail(err, es, "memplan: %d steps but NULL pred_off", n);
  if (n > 0) {
    if (in->pred_off[0] != 0)
      return mp_fail(err, es, "memplan: pred_off[0] is %d, expected 0", in->pred_off[0]);
    for (int s = 0; s < n; s++)
      if (in->pred_off[s + 1] < in->pred_off[s])
        return mp_fail(err, es, "memplan: pred_off decreases at step %d (%d -> %d)", s,
                       in->pred_off[s], in->pred_off[s + 1]);
    if (in->pred_off[n] > 0 && !in->preds)
      return mp_fail(err, es, "memplan: %d predecessor entries but NULL preds", in->pred_off[n]);
    for (int s = 0; s < n; s++)
      for (int k = in->pred_off[s]; k < in->pred_off[s + 1]; k++)
        if (in->preds[k] < 0 || in->preds[k] >= s)
          return mp_fail(err, es,
                         "memplan: step %d has predecessor %d, outside [0, %d) (steps must be "
                         "numbered topologically)",
                         s, in->preds[k], s);
  }
  for (int t = 0; t < in->n_tensors; t++) {
    const fg_mp_tensor *x = &in->tensors[t];
    /* A pinned tensor may have no producing step (a feed or a variable). */
    int lo = x->pinned ? -1 : 0;
    if (x->producer < lo || x->producer >= n)
      return mp_fail(err, es, "memplan: tensor %d: producer step %d out of range [%d, %d)", t,
                     x->producer, lo, n);
    if (x->n_users < 0)
      return mp_fail(err, es, "memplan: tensor %d: n_users is %d (negative)", t, x->n_users);
    if (x->n_users > 0 && !x->users)
      return mp_fail(err, es, "memplan: tensor %d: %d users but NULL users", t, x->n_users);
    for (int u = 0; u < x->n_users; u++) {
      int us = x->users[u];
      if (us < 0 || us >= n)
        return mp_fail(err, es, "memplan: tensor %d: user %d is step %d, out of range [0, %d)", t,
                       u, us, n);
      if (!x->pinned && us <= x->producer)
        return mp_fail(err, es,
                       "memplan: tensor %d: user step %d is not after its producer step %d", t, us,
                       x->producer);
    }
    if (x->inplace_from < -1 || x->inplace_from >= in->n_tensors || x->inplace_from == t)
      return mp_fail(err, es,
                     "memplan: tensor %d: inplace_from %d is not -1 or another tensor in "
                     "[0, %d)",
                     t, x->inplace_from, in->n_tensors);
  }
  return 0;
}

/* Steps touching a tensor: its producer, then its users. */
static int mp_touch(const fg_mp_tensor *x, int i) { return i == 0 ? x->producer : x->users[i - 1]; }

typedef struct mp_buf {
  size_t size; /* aligned */
  int root;    /* first member (its producer writes first) */
  int latest;  /* last member merged in place */
  int start;   /* root's producer */
  int end;     /* last step touching the buffer */
  int id;      /* index in the buffer array */
} mp_buf;

/* Every step touching a may run before b's first write in any schedule. */
static int mp_before(const mp_order *o, const fg_mp_tensor *ts, const mp_buf *a, const mp_buf *b) {
  if (a->end >= b->start) return 0;
  /* a cut between them orders every touching step before b->start */
  if (o->next_cut[a->end] <= b->start) return 1;
  const fg_mp_tensor *l = &ts[a->latest];
  for (int i = 0; i <= l->n_users; i++)
    if (!mp_is_anc(o, mp_touch(l, i), b->start)) return 0;
  return 1;
}

static int mp_conflict(const mp_order *o, const fg_mp_tensor *ts, const mp_buf *a,
                       const mp_buf *b) {
  if (a->start <= b->end && b->start <= a->end) return 1; /* live at one index */
  return !mp_before(o, ts, a, b) && !mp_before(o, ts, b, a);
}

/* Conflicts between buffers, cached as a bit matrix when it is small enough
 * (every placement order asks for the same pairs), else computed each time. */
typedef struct mp_conf {
  const mp_order *o;
  const fg_mp_tensor *ts;
  const mp_buf *bufs;
  uint64_t *bits; /* nb rows of `words` words, or NULL */
  size_t words;
} mp_conf;

static int mp_conf_get(const mp_conf *c, int a, int b) {
  if (c->bits) return (int)((c->bits[(size_t)a * c->words + (size_t)b / 64] >> (b % 64)) & 1u);
  return mp_conflict(c->o, c->ts, &c->bufs[a], &c->bufs[b]);
}

static void mp_conf_build(mp_conf *c, int nb) {
  c->bits = NULL;
  if (nb > MP_CONFLICT_CACHE_MAX) return;
  c->words = ((size_t)nb + 63) / 64;
  c->bits = mp_calloc((size_t)nb * c->words, sizeof *c->bits);
  if (!c->bits) return; /* fine: computed on the fly */
  for (int a = 0; a < nb; a++)
    for (int b = a + 1; b < nb; b++)
      if (mp_conflict(c->o, c->ts, &c->bufs[a], &c->bufs[b])) {
        c->bits[(size_t)a * c->words + (size_t)b / 64] |= (uint64_t)1 << (b % 64);
        c->bits[(size_t)b * c->words + (size_t)a / 64] |= (uint64_t)1 << (a % 64);
      }
}

static int mp_cmp_size(const void *pa, const void *pb) {
  const mp_buf *a = pa, *b = pb;
  if (a->size != b->size) return a->size > b->size ? -1 : 1;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  return (a->root > b->root) - (a->root < b->root);
}

static int mp_cmp_life(const void *pa, const void *pb) {
  const mp_buf *a = pa, *b = pb;
  if (a->start != b->start) return a->start < b->start ? -1 : 1;
  if (a->size != b->size) return a->size > b->size ? -1 : 1;
  return (a->root > b->root) - (a->root < b->root);
}

static int mp_cmp_long(const void *pa, const void *pb) {
  const mp_buf *a = pa, *b = pb;
  int la = a->end - a->start, lb = b->end - b->start;
  if (la != lb) return la > lb ? -1 : 1;
  return mp_cmp_size(pa, pb);
}

static int mp_cmp_area(const void *pa, const void *pb) {
  const mp_buf *a = pa, *b = pb;
  double xa = (double)a->size * (a->end - a->start + 1),
         xb = (double)b->size * (b->end - b->start + 1);
  if (xa != xb) return xa > xb ? -1 : 1;
  return mp_cmp_size(pa, pb);
}

static size_t mp_ctz(uint64_t m) {
#if defined(__GNUC__)
  return (size_t)__builtin_ctzll(m);
#else
  size_t k = 0;
  while (!(m & 1u))
    m >>= 1, k++;
  return k;
#endif
}

/* A placed buffer that conflicts with the one being placed. */
typedef struct mp_slot {
  size_t off;
  int rank; /* placement order: breaks offset ties deterministically */
  int id;
} mp_slot;

static int mp_cmp_slot(const void *pa, const void *pb) {
  const mp_slot *a = pa, *b = pb;
  if (a->off != b->off) return a->off < b->off ? -1 : 1;
  return (a->rank > b->rank) - (a->rank < b->rank);
}

/* Scratch for one placement pass, nb entries each. */
typedef struct mp_scratch {
  mp_slot *slots;
  int *rank;   /* placement rank per buffer id, -1 while unplaced */
  int *placed; /* uncached conflicts: placed ids sorted by offset, then rank */
  uint64_t *placed_bits;
} mp_scratch;

/* Best-fit placement in the given order; offsets indexed by mp_buf.id.
 * Each buffer goes in the smallest gap between the placed buffers it
 * conflicts with (by offset), else after the last of them. Returns the
 * arena size, or SIZE_MAX on overflow (impossible below naive_bytes,
 * checked anyway). */
static size_t mp_place(const mp_conf *c, const mp_buf *order, int nb, size_t *off, mp_scratch *sc) {
  size_t arena = 0;
  int np = 0;
  for (int i = 0; i < nb; i++)
    sc->rank[i] = -1;
  if (c->bits) memset(sc->placed_bits, 0, c->words * sizeof *sc->placed_bits);
  for (int i = 0; i < nb; i++) {
    const mp_buf *b = &order[i];
    if (b->size == 0) {
      off[b->id] = 0;
      continue;
    }
    int ns = 0;
    if (c->bits) {
      /* the cached row, masked by what is placed: cost ~ nb / 64 + conflicts */
      const uint64_t *row = c->bits + (size_t)b->id * c->words;
      for (size_t w = 0; w < c->words; w++) {
        uint64_t m = row[w] & sc->placed_bits[w];
        while (m) {
          int id = (int)(w * 64 + mp_ctz(m));
          m &= m - 1;
          sc->slots[ns++] = (mp_slot){off[id], sc->rank[id], id};
        }
      }
      qsort(sc->slots, (size_t)ns, sizeof *sc->slots, mp_cmp_slot);
    } else {
      for (int j = 0; j < np; j++) {
        int id = sc->placed[j];
        if (mp_conf_get(c, b->id, id)) sc->slots[ns++] = (mp_slot){off[id], sc->rank[id], id};
      }
    }
    size_t prev_end = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (int j = 0; j < ns; j++) {
      size_t po = sc->slots[j].off, psz = c->bufs[sc->slots[j].id].size;
      if (po >= prev_end && po - prev_end >= b->size && po - prev_end < best_gap) {
        best_gap = po - prev_end;
        best = prev_end;
      }
      if (psz > SIZE_MAX - po) return SIZE_MAX;
      if (po + psz > prev_end) prev_end = po + psz;
    }
    if (best == SIZE_MAX) best = prev_end;
    if (b->size > SIZE_MAX - best) return SIZE_MAX;
    off[b->id] = best;
    if (best + b->size > arena) arena = best + b->size;
    sc->rank[b->id] = np;
    if (c->bits) {
      sc->placed_bits[b->id / 64] |= (uint64_t)1 << (b->id % 64);
    } else {
      int k = np;
      while (k > 0 && off[sc->placed[k - 1]] > best) {
        sc->placed[k] = sc->placed[k - 1];
        k--;
      }
      sc->placed[k] = b->id;
    }
    np++;
  }
  return arena;
}

/* Merges in-place pairs into buffers (buf_of) and fills shared_with. */
static int mp_merge(const fg_mp_input *in, const mp_order *o, const size_t *asz, int *buf_of,
                    int *latest, int *shared_with) {
  int n = in->n_steps, nt = in->n_tensors;
  const fg_mp_tensor *ts = in->tensors;
  /* Visit tensors by producer (then id): a source's producer comes strictly
   * before its in-place successor's, so its buffer is final by then. */
  int *start = mp_calloc((size_t)n + 1, sizeof *start);
  int *byprod = mp_calloc((size_t)nt, sizeof *byprod);
  if (!start || !byprod) {
    free(start);
    free(byprod);
    return -1;
  }
  for (int t = 0; t < nt; t++)
    if (!ts[t].pinned) start[ts[t].producer + 1]++;
  for (int s = 0; s < n; s++)
    start[s + 1] += start[s];
  for (int t = 0; t < nt; t++)
    if (!ts[t].pinned) byprod[start[ts[t].producer]++] = t;
  int m = start[n]; /* every arena tensor */
  for (int i = 0; i < m; i++) {
    int t = byprod[i], s = ts[t].inplace_from, p = ts[t].producer;
    if (s < 0 || ts[s].pinned || asz[s] != asz[t]) continue;
    int reads = 0;
    for (int u = 0; u < ts[s].n_users && !reads; u++)
      reads = ts[s].users[u] == p;
    if (!reads) continue;
    int b = buf_of[s];
    const fg_mp_tensor *l = &ts[latest[b]];
    /* two outputs of one step never share bytes */
    if (l->producer == p) continue;
    int ok = 1;
    for (int k = 0; k <= l->n_users && ok; k++) {
      int x = mp_touch(l, k);
      if (x != p && !mp_is_anc(o, x, p)) ok = 0;
    }
    if (!ok) continue;
    buf_of[t] = b;
    latest[b] = t;
    shared_with[t] = s;
  }
  free(start);
  free(byprod);
  return 0;
}

/* Placements the local search below may try: enough for a training
 * step's few dozen buffers, a bounded share of the planning time on large
 * plans. */
#define MP_SEARCH_PLACEMENTS 256
#define MP_SEARCH_MAX_BUFS   512

/* Local search over placement orders, while the arena is above the lower
 * bound `lb`: the best order with one buffer moved to the front (in turn,
 * a bounded number of tries), kept when it packs smaller. A 64-48-32-10
 * MLP training step at batch 600 whose relu gradients were fused
 * (grad_epilogue) packed into 331 KB with every greedy order against a
 * lower bound of 307 KB: the fused gradient cannot overwrite relu's output
 * it reads, which shifted the lifetimes the greedy orders rely on. Order
 * (best on entry) and off are updated in place; returns the arena. */
static size_t mp_search(const mp_conf *c, mp_buf *order, int nb, size_t arena, size_t lb,
                        size_t *off, size_t *trial, mp_buf *cand, mp_scratch *sc) {
  int tries = 0;
  for (int improved = 1; improved && arena > lb;) {
    improved = 0;
    for (int i = 1; i < nb && arena > lb && tries < MP_SEARCH_PLACEMENTS; i++, tries++) {
      cand[0] = order[i];
      memcpy(cand + 1, order, (size_t)i * sizeof *cand);
      memcpy(cand + i + 1, order + i + 1, (size_t)(nb - i - 1) * sizeof *cand);
      const size_t a = mp_place(c, cand, nb, trial, sc);
      if (a < arena) {
        arena = a;
        memcpy(order, cand, (size_t)nb * sizeof *order);
        memcpy(off, trial, (size_t)nb * sizeof *off);
        improved = 1;
      }
    }
  }
  return arena;
}

/* Greedy by size is TFLite's, but no single order wins everywhere: on a
 * serialised 1024-2048-2048-1000 MLP training step it leaves 6% over the
 * lower bound, which size x lifetime ("area") closes, and lifetime order
 * packs some random DAGs tighter. With the conflicts cached each order is
 * one more pass over the buffer pairs, so try them all and keep the
 * smallest arena (ties: the earlier order, TFLite's first); above the
 * lower bound `lb`, search from the best (mp_search). Fills off (indexed
 * by mp_buf.id); returns the arena, or SIZE_MAX on failure. */
static size_t mp_pack(const mp_order *o, const fg_mp_tensor *ts, const mp_buf *bufs, int nb,
                      size_t lb, size_t *off) {
  static int (*const orders[])(const void *, const void *) = {mp_cmp_size, mp_cmp_life, mp_cmp_long,
                                                              mp_cmp_area};
  mp_buf *order = mp_calloc((size_t)nb, sizeof *order), *best = mp_calloc((size_t)nb, sizeof *best);
  size_t *trial = mp_calloc((size_t)nb, sizeof *trial);
  mp_scratch sc = {mp_calloc((size_t)nb, sizeof(mp_slot)), mp_calloc((size_t)nb, sizeof(int)),
                   mp_calloc((size_t)nb, sizeof(int)), NULL};
  mp_conf conf = {o, ts, bufs, NULL, 0};
  size_t arena = SIZE_MAX;
  if (order && best && trial && sc.slots && sc.rank && sc.placed) {
    mp_conf_build(&conf, nb);
    if (conf.bits) sc.placed_bits = mp_calloc(conf.words, sizeof *sc.placed_bits);
    if (conf.bits && !sc.placed_bits) {
      free(conf.bits);
      conf.bits = NULL;
    }
    /* without the cache every pair costs an ancestry test: one order only */
    size_t n_orders = conf.bits ? sizeof orders / sizeof *orders : 1;
    for (size_t k = 0; k < n_orders; k++) {
      memcpy(order, bufs, (size_t)nb * sizeof *order);
      qsort(order, (size_t)nb, sizeof *order, orders[k]);
      size_t a = mp_place(&conf, order, nb, trial, &sc);
      if (a < arena) {
        arena = a;
        memcpy(off, trial, (size_t)nb * sizeof *off);
        memcpy(best, order, (size_t)nb * sizeof *best);
      }
    }
    /* the search needs the cache too: each try is one more placement */
    if (conf.bits && arena != SIZE_MAX && nb <= MP_SEARCH_MAX_BUFS)
      arena = mp_search(&conf, best, nb, arena, lb, off, trial, order, &sc);
  }
  free(conf.bits);
  free(best);
  free(order);
  free(trial);
  free(sc.slots);
  free(sc.rank);
  free(sc.placed);
  free(sc.placed_bits);
  return arena;
}

/* Buffers live at the same index conflict pairwise (an ancestor has a
 * smaller index), so this peak is a true lower bound on the arena.
 * Returns SIZE_MAX when out of memory. */
static size_t mp_lower_bound(const mp_buf *bufs, int nb, int n) {
  size_t *add = mp_calloc((size_t)n + 1, sizeof *add);
  size_t *sub = mp_calloc((size_t)n + 1, sizeof *sub);
  size_t cur = 0, peak = SIZE_MAX;
  if (add && sub) {
    peak = 0;
    for (int i = 0; i < nb; i++) {
      add[bufs[i].start] += bufs[i].size;
      sub[bufs[i].end] += bufs[i].size;
    }
    for (int s = 0; s < n; s++) {
      cur += add[s];
      if (cur > peak) peak = cur;
      cur -= sub[s];
    }
  }
  free(add);
  free(sub);
  return peak;
}

/* Aligned sizes and their sum; also rejects readers that do not descend
 * from the producer (they would read bytes nobody wrote yet). */
static int mp_sizes(const fg_mp_input *in, const mp_order *o, size_t *asz, size_t *naive, char *err,
                    size_t es) {
  const fg_mp_tensor *ts = in->tensors;
  size_t al = in->alignment, sum = 0;
  for (int t = 0; t < in->n_tensors; t++) {
    if (ts[t].pinned) continue;
    if (ts[t].bytes > SIZE_MAX - (al - 1))
      return mp_fail(err, es, "memplan: tensor %d: %zu bytes overflow when aligned to %zu", t,
                     ts[t].bytes, al);
    asz[t] = (ts[t].bytes + (al - 1)) & ~(al - 1);
    if (asz[t] > SIZE_MAX - sum)
      return mp_fail(err, es, "memplan: total tensor bytes overflow size_t at tensor %d", t);
    sum += asz[t];
    if (o->anc)
      for (int u = 0; u < ts[t].n_users; u++)
        if (!mp_is_anc(o, ts[t].producer, ts[t].users[u]))
          return mp_fail(err, es,
                         "memplan: tensor %d: user step %d does not depend on its producer step %d",
                         t, ts[t].users[u], ts[t].producer);
  }
  *naive = sum;
  return 0;
}

int fg_memplan(const fg_mp_input *in, fg_mp_result *out, char *err, size_t err_size) {
  if (err && err_size) err[0] = '\0';
  if (mp_check_input(in, out, err, err_size) != 0) return -1;
  int n = in->n_steps, nt = in->n_tensors, nb = 0, rc = -1;
  const fg_mp_tensor *ts = in->tensors;
  mp_order o = {n, in->pred_off, in->preds, NULL, NULL, 0};
  size_t naive = 0, arena = 0, peak = 0;
  size_t *asz = mp_calloc((size_t)nt, sizeof *asz);
  int *buf_of = mp_calloc((size_t)nt, sizeof *buf_of);
  int *latest = mp_calloc((size_t)nt, sizeof *latest);
  int *bid = mp_calloc((size_t)nt, sizeof *bid);
  mp_buf *bufs = NULL;
  size_t *off = NULL;
  if (!asz || !buf_of || !latest || !bid || mp_build_order(&o) != 0) {
    mp_fail(err, err_size, "memplan: out of memory for %d steps and %d tensors", n, nt);
    goto done;
  }
  if (mp_sizes(in, &o, asz, &naive, err, err_size) != 0) goto done;
  for (int t = 0; t < nt; t++) {
    out->shared_with[t] = -1;
    out->offsets[t] = SIZE_MAX;
    buf_of[t] = t;
    latest[t] = t;
  }
  if (mp_merge(in, &o, asz, buf_of, latest, out->shared_with) != 0) {
    mp_fail(err, err_size, "memplan: out of memory for %d tensors", nt);
    goto done;
  }

  for (int t = 0; t < nt; t++)
    if (!ts[t].pinned && buf_of[t] == t) nb++;
  bufs = mp_calloc((size_t)nb, sizeof *bufs);
  off = mp_calloc((size_t)nb, sizeof *off);
  if (!bufs || !off) {
    mp_fail(err, err_size, "memplan: out of memory for %d buffers", nb);
    goto done;
  }
  nb = 0;
  for (int t = 0; t < nt; t++) {
    if (ts[t].pinned || buf_of[t] != t) continue;
    mp_buf *b = &bufs[nb];
    const fg_mp_tensor *l = &ts[latest[t]];
    b->size = asz[t];
    b->root = t;
    b->latest = latest[t];
    b->start = ts[t].producer;
    b->end = l->producer;
    for (int u = 0; u < l->n_users; u++)
      if (l->users[u] > b->end) b->end = l->users[u];
    b->id = nb;
    bid[t] = nb++;
  }

  /* Offsets never pass naive_bytes, which did not overflow: SIZE_MAX here
   * means out of memory. */
  peak = mp_lower_bound(bufs, nb, n);
  arena = peak == SIZE_MAX ? SIZE_MAX : mp_pack(&o, ts, bufs, nb, peak, off);
  if (arena == SIZE_MAX || peak == SIZE_MAX) {
    mp_fail(err, err_size, "memplan: out of memory placing %d buffers", nb);
    goto done;
  }
  for (int t = 0; t < nt; t++)
    if (!ts[t].pinned) out->offsets[t] = off[bid[buf_of[t]]];
  out->arena_bytes = arena;
  out->lower_bound_bytes = peak;
  out->naive_bytes = naive;
  rc = 0;

done:
  free(o.anc);
  free(o.next_cut);
  free(asz);
  free(buf_of);
  free(latest);
  free(bid);
  free(bufs);
  free(off);
  return rc;
}
