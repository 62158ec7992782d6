/* The memory planner on randomised DAGs (checked against an independent
 * ancestry computation) and on MLP training graphs shaped like the ones
 * autodiff emits, where the issue sets arena targets. */
#include "test_memplan_util.h"

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static int rng_int(uint64_t *s, int n) { return (int)(rng_next(s) % (uint64_t)n); }

/* A random DAG: each step reads up to 3 earlier tensors (often recent ones,
 * so chains form), sometimes has a control predecessor, and writes 1 or 2
 * tensors of assorted sizes (some empty, some pinned, some asking to take
 * over an input's bytes). A "spine" graph also orders most steps after the
 * previous one, so it has many cut steps (the fallback's ancestry). */
static void random_graph(tg *g, uint64_t *rng, int spine) {
  int n = 1 + rng_int(rng, 60);
  for (int s = 0; s < n; s++) {
    int in[3], n_in = g->n_t ? rng_int(rng, 4) : 0;
    for (int i = 0; i < n_in; i++) {
      int recent = g->n_t < 8 ? g->n_t : 8;
      in[i] = rng_int(rng, 2) ? g->n_t - 1 - rng_int(rng, recent) : rng_int(rng, g->n_t);
    }
    int ctl[1] = {s > 0 ? rng_int(rng, s) : 0};
    int n_ctl = s > 0 && rng_int(rng, 10) == 0;
    if (spine && s > 0 && rng_int(rng, 10) < 7) {
      ctl[0] = s - 1;
      n_ctl = 1;
    }
    tg_step(g, in, n_in, ctl, n_ctl);
    int n_out = rng_int(rng, 5) == 0 ? 2 : 1;
    for (int o = 0; o < n_out; o++) {
      static const size_t sizes[6] = {0, 64, 128, 256, 1000, 4096};
      size_t bytes = rng_int(rng, 2) ? sizes[rng_int(rng, 6)] : (size_t)rng_int(rng, 3000);
      int t = tg_out(g, s, bytes);
      if (rng_int(rng, 10) == 0) g->t[t].pinned = 1;
      if (n_in > 0 && rng_int(rng, 5) < 2) {
        int src = in[rng_int(rng, n_in)];
        g->t[t].inplace_from = src;
        if (rng_int(rng, 4)) g->t[t].bytes = g->t[src].bytes;
      }
    }
  }
}

static void run_random(int fallback, const char *label) {
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  static const size_t aligns[3] = {1, 8, 64};
  double lo = 1e9, hi = 0, sum = 0;
  int counted = 0, merged = 0;
  fg_memplan_test_set_bitset_cap(fallback ? 0 : -1);
  for (int i = 0; i < 200; i++) {
    tg *g = tg_new();
    FG_REQUIRE(g);
    random_graph(g, &rng, i % 2);
    size_t al = aligns[i % 3];
    if (tg_plan(g, al) != 0) {
      FG_FAIL_AT("graph %d: %s", i, g->err);
      free(g);
      continue;
    }
    if (tg_check(g, al) != 0)
      FG_FAIL_AT("graph %d (%d steps, %d tensors) failed", i, g->n_steps, g->n_t);
    /* same input, same plan */
    size_t first[TG_MAX_TENSORS];
    memcpy(first, g->offsets, sizeof first);
    size_t arena = g->r.arena_bytes;
    FG_REQUIRE(tg_plan(g, al) == 0);
    FG_CHECK(memcmp(first, g->offsets, (size_t)g->n_t * sizeof *first) == 0);
    FG_CHECK_INT(g->r.arena_bytes, arena);
    for (int t = 0; t < g->n_t; t++)
      merged += g->shared[t] >= 0;
    if (g->r.lower_bound_bytes > 0) {
      double ratio = (double)g->r.arena_bytes / (double)g->r.lower_bound_bytes;
      lo = ratio < lo ? ratio : lo;
      hi = ratio > hi ? ratio : hi;
      sum += ratio;
      counted++;
    }
    free(g);
  }
  fg_memplan_test_set_bitset_cap(-1);
  printf("%s: arena/lower_bound over %d graphs: min %.3f mean %.3f max %.3f; %d in-place merges\n",
         label, counted, lo, counted ? sum / counted : 0.0, hi, merged);
  FG_CHECK(merged > 0);
}

FG_TEST(memplan_random_dags_are_safe, "") { run_random(0, "exact ancestry"); }

/* The conservative ancestry above the bitset cap must be just as safe. */
FG_TEST(memplan_random_dags_are_safe_with_fallback_ancestry, "") {
  run_random(1, "fallback ancestry");
}

/* On a chain every step is a cut, so the fallback loses nothing. On a
 * residual stack (step s reads s-1 and s-2, edges jumping over s-1) every
 * step is still a cut, found through the predecessors' prefixes: step s
 * reads s-2 and s-1, whose own ancestors are everything before them. */
FG_TEST(memplan_fallback_keeps_chain_and_residual_reuse, "") {
  for (int residual = 0; residual < 2; residual++) {
    tg *g = tg_new();
    FG_REQUIRE(g);
    int prev2 = -1, prev = tg_op(g, 128, -1, -1, -1);
    for (int i = 0; i < 30; i++) {
      int t = tg_op(g, 128, prev, residual ? prev2 : -1, -1);
      prev2 = prev;
      prev = t;
    }
    fg_memplan_test_set_bitset_cap(0);
    int rc = tg_plan(g, 64);
    fg_memplan_test_set_bitset_cap(-1);
    FG_REQUIRE(rc == 0);
    /* chain: t and its reader; residual: t-1, t, and their reader */
    size_t want = residual ? 3 * 128 : 2 * 128;
    FG_CHECK_INT(g->r.arena_bytes, want);
    FG_CHECK_INT(g->r.lower_bound_bytes, want);
    FG_CHECK_INT(tg_check(g, 64), 0);
    free(g);
  }
}

/* An MLP training step as autodiff and fg_minimize emit it (compare
 * `flowgraph inspect` on examples/digits): per layer matmul, add, relu;
 * softmax cross-entropy; then per layer from the top sum_to (which reads
 * the forward matmul for its shape), the bias gradient, the input gradient
 * matmul, sum_to, the weight gradient matmul, greater on the forward
 * pre-activation and select; a group of all gradients; one optimizer
 * update per parameter (writing variables, so pinned); a final group.
 * Variables, feeds and constants are sources outside the plan. Adam adds
 * the step counter update. The loss is fetched (pinned). */
typedef struct mlp_shape {
  const char *name;
  int batch, n_layers;
  int widths[6];
  int adam;
} mlp_shape;

static void build_mlp_train(tg *g, const mlp_shape *m, int inplace) {
  int B = m->batch, L = m->n_layers;
  size_t f = 4;
  int mm[6], z[6], h[6];
  int x = -1; /* the feed */
  for (int l = 0; l < L; l++) {
    size_t act = (size_t)B * (size_t)m->widths[l + 1] * f;
    mm[l] = tg_op(g, act, l ? h[l - 1] : x, -1, -1);
    z[l] = tg_op(g, act, mm[l], -1, -1);
    if (inplace) g->t[z[l]].inplace_from = mm[l];
    h[l] = -1;
    if (l + 1 < L) {
      h[l] = tg_op(g, act, z[l], -1, -1);
      if (inplace) g->t[h[l]].inplace_from = z[l];
    }
  }
  int C = m->widths[L];
  size_t logit_bytes = (size_t)B * (size_t)C * f;
  int logits = z[L - 1];
  int loss = tg_op(g, f, logits, -1, -1);
  g->t[loss].pinned = 1;
  int ones = tg_op(g, f, loss, -1, -1);
  int onehot = tg_op(g, logit_bytes, -1, -1, -1);
  int sm = tg_op(g, logit_bytes, logits, -1, -1);
  int sub = tg_op(g, logit_bytes, sm, onehot, -1);
  int numel = tg_op(g, f, -1, -1, -1);
  int div = tg_op(g, f, ones, numel, -1);
  int grad = tg_op(g, logit_bytes, sub, div, -1);
  if (inplace) {
    g->t[sub].inplace_from = sm;
    g->t[grad].inplace_from = sub;
  }
  int pgrads[12], n_pg = 0;
  for (int l = L - 1; l >= 0; l--) {
    size_t out = (size_t)B * (size_t)m->widths[l + 1] * f;
    size_t in = (size_t)B * (size_t)m->widths[l] * f;
    int dz = tg_op(g, out, grad, mm[l], -1);
    if (inplace) g->t[dz].inplace_from = grad;
    int db = tg_op(g, (size_t)m->widths[l + 1] * f, grad, -1, -1);
    int dh = -1;
    if (l > 0) {
      int dm = tg_op(g, in, dz, -1, -1);
      dh = tg_op(g, in, dm, h[l - 1], -1);
      if (inplace) g->t[dh].inplace_from = dm;
    }
    int dw =
        tg_op(g, (size_t)m->widths[l] * (size_t)m->widths[l + 1] * f, l ? h[l - 1] : x, dz, -1);
    pgrads[n_pg++] = db;
    pgrads[n_pg++] = dw;
    if (l > 0) {
      int gt = tg_op(g, (size_t)B * (size_t)m->widths[l], z[l - 1], -1, -1); /* bool */
      grad = tg_op(g, in, gt, dh, -1);
      if (inplace) g->t[grad].inplace_from = dh;
    }
  }
  int in_group[12];
  for (int i = 0; i < n_pg; i++)
    in_group[i] = pgrads[i];
  int gs = tg_step(g, in_group, n_pg, NULL, 0);
  int group = tg_out(g, gs, 4);
  int assign = -1;
  if (m->adam) {
    int add = tg_op(g, 8, -1, -1, -1);
    assign = tg_op(g, 8, add, -1, -1);
    g->t[assign].pinned = 1;
  }
  int updates[12];
  for (int i = 0; i < n_pg; i++) {
    int pg = pgrads[n_pg - 1 - i]; /* layer order, as fg_minimize emits */
    updates[i] = tg_op(g, g->t[pg].bytes, pg, group, assign);
    g->t[updates[i]].pinned = 1;
  }
  int fs = tg_step(g, updates, n_pg, NULL, 0);
  tg_out(g, fs, 4);
}

static const mlp_shape mlp_shapes[] = {
    {"digits 64-128-64-10 adam b32", 32, 3, {64, 128, 64, 10}, 1},
    {"digits 64-128-64-10 adam b128", 128, 3, {64, 128, 64, 10}, 1},
    {"mlp4 784-512-512-512-10 sgd b128", 128, 4, {784, 512, 512, 512, 10}, 0},
    {"mlp_small 64-128-128-10 sgd b32", 32, 3, {64, 128, 128, 10}, 0},
    {"mlp_medium 784-512-512-10 sgd b128", 128, 3, {784, 512, 512, 10}, 0},
    {"mlp_large 1024-2048-2048-1000 sgd b256", 256, 3, {1024, 2048, 2048, 1000}, 0},
};
#define N_MLP_SHAPES (int)(sizeof mlp_shapes / sizeof *mlp_shapes)

/* Adds step s-1 to every step's predecessors: the order a one-thread run
 * (or a run with the plan's reuse turned into scheduling edges) keeps. */
static void serialize(tg *g) {
  int preds[TG_MAX_EDGES], off[TG_MAX_STEPS + 1], k = 0;
  off[0] = 0;
  for (int s = 0; s < g->n_steps; s++) {
    for (int j = g->pred_off[s]; j < g->pred_off[s + 1]; j++)
      preds[k++] = g->preds[j];
    if (s > 0 && k < TG_MAX_EDGES) preds[k++] = s - 1;
    off[s + 1] = k;
  }
  memcpy(g->preds, preds, (size_t)k * sizeof *preds);
  memcpy(g->pred_off, off, sizeof off);
}

/* The maximum-weight clique of the conflict graph between the plan's
 * buffers (in-place groups merged, as the plan chose them), by branch and
 * bound: two buffers conflict unless every step touching one is a strict
 * ancestor of the other's first producer. Any safe placement of these
 * buffers needs at least this many bytes. */
typedef struct clq {
  int n;
  size_t w[TG_MAX_TENSORS];
  unsigned char (*cf)[TG_MAX_TENSORS];
  size_t best;
} clq;

static void clq_search(clq *c, const int *cand, int nc, size_t cur) {
  if (cur > c->best) c->best = cur;
  size_t rest = 0;
  for (int i = 0; i < nc; i++)
    rest += c->w[cand[i]];
  for (int i = 0; i < nc && cur + rest > c->best; i++) {
    int v = cand[i], next[TG_MAX_TENSORS], nn = 0;
    for (int j = i + 1; j < nc; j++)
      if (c->cf[v][cand[j]]) next[nn++] = cand[j];
    clq_search(c, next, nn, cur + c->w[v]);
    rest -= c->w[v];
  }
}

static size_t clique_bound(const tg *g, size_t al) {
  tg_row *reach = tg_reach(g);
  clq *c = calloc(1, sizeof *c);
  unsigned char(*cf)[TG_MAX_TENSORS] = calloc(TG_MAX_TENSORS, sizeof *cf);
  int parent[TG_MAX_TENSORS], root_of[TG_MAX_TENSORS], first[TG_MAX_TENSORS];
  size_t best = 0;
  if (!reach || !c || !cf) goto out;
  c->cf = cf;
  for (int t = 0; t < g->n_t; t++)
    parent[t] = t;
  for (int t = 0; t < g->n_t; t++)
    if (g->shared[t] >= 0) parent[tg_find(parent, t)] = tg_find(parent, g->shared[t]);
  for (int t = 0; t < g->n_t; t++)
    root_of[t] = -1;
  for (int t = 0; t < g->n_t; t++) {
    size_t sz = tg_asz(g->t[t].bytes, al);
    int r = tg_find(parent, t);
    if (g->t[t].pinned || sz == 0) continue;
    if (root_of[r] < 0) {
      root_of[r] = c->n;
      first[c->n] = g->t[t].producer;
      c->w[c->n++] = sz;
    }
    if (g->t[t].producer < first[root_of[r]]) first[root_of[r]] = g->t[t].producer;
  }
  /* b may follow a when every step touching any member of a precedes b */
  static unsigned char follows[TG_MAX_TENSORS][TG_MAX_TENSORS];
  memset(follows, 1, sizeof follows);
  for (int t = 0; t < g->n_t; t++) {
    if (g->t[t].pinned || tg_asz(g->t[t].bytes, al) == 0) continue;
    int a = root_of[tg_find(parent, t)];
    for (int b = 0; b < c->n; b++)
      if (!tg_all_before(g, reach, t, first[b], -1)) follows[a][b] = 0;
  }
  for (int a = 0; a < c->n; a++)
    for (int b = 0; b < c->n; b++)
      cf[a][b] = a != b && !follows[a][b] && !follows[b][a];
  int cand[TG_MAX_TENSORS];
  for (int i = 0; i < c->n; i++)
    cand[i] = i;
  clq_search(c, cand, c->n, 0);
  best = c->best;
out:
  free(reach);
  free(c);
  free(cf);
  return best;
}

/* On the DAG itself (any schedule a pool may pick) the safe rule forbids
 * reuse across parallel branches: weight gradients stay live until the
 * optimizer group while the rest of the backward pass runs beside them,
 * and sources such as one_hot may run first. The arena must then exceed
 * the serial lower bound; the test checks it meets the true bound for the
 * rule (the conflict graph's heaviest clique) exactly, and the 0.7 x naive
 * it reaches on these graphs. */
FG_TEST(memplan_mlp_training_dag_is_optimal_for_the_safe_rule, "") {
  for (int i = 0; i < N_MLP_SHAPES; i++)
    for (int inplace = 0; inplace < 2; inplace++) {
      tg *g = tg_new();
      FG_REQUIRE(g);
      build_mlp_train(g, &mlp_shapes[i], inplace);
      FG_REQUIRE(tg_plan(g, 64) == 0);
      FG_CHECK_INT(tg_check(g, 64), 0);
      size_t clique = clique_bound(g, 64);
      double lb = (double)g->r.arena_bytes / (double)g->r.lower_bound_bytes;
      double nv = (double)g->r.arena_bytes / (double)g->r.naive_bytes;
      printf("dag    %-40s in-place %d: arena %9zu lower_bound %9zu clique %9zu naive %9zu  "
             "arena/lb %.3f clique/lb %.3f arena/naive %.3f\n",
             mlp_shapes[i].name, inplace, g->r.arena_bytes, g->r.lower_bound_bytes, clique,
             g->r.naive_bytes, lb, (double)clique / (double)g->r.lower_bound_bytes, nv);
      FG_CHECK_INT(g->r.arena_bytes, clique);
      FG_CHECK(nv <= 0.7);
      free(g);
    }
}

/* Serialised, the targets hold: arena <= 1.05 x lower bound and
 * <= 0.5 x naive, with and without in-place marks. */
FG_TEST(memplan_mlp_training_serial_meets_targets, "") {
  for (int i = 0; i < N_MLP_SHAPES; i++)
    for (int inplace = 0; inplace < 2; inplace++) {
      tg *g = tg_new();
      FG_REQUIRE(g);
      build_mlp_train(g, &mlp_shapes[i], inplace);
      serialize(g);
      FG_REQUIRE(tg_plan(g, 64) == 0);
      FG_CHECK_INT(tg_check(g, 64), 0);
      double lb = (double)g->r.arena_bytes / (double)g->r.lower_bound_bytes;
      double nv = (double)g->r.arena_bytes / (double)g->r.naive_bytes;
      int merged = 0;
      for (int t = 0; t < g->n_t; t++)
        merged += g->shared[t] >= 0;
      printf("serial %-40s in-place %d: arena %9zu lower_bound %9zu naive %9zu  arena/lb %.3f "
             "arena/naive %.3f merges %d\n",
             mlp_shapes[i].name, inplace, g->r.arena_bytes, g->r.lower_bound_bytes,
             g->r.naive_bytes, lb, nv, merged);
      FG_CHECK(lb <= 1.05);
      FG_CHECK(nv <= 0.5);
      free(g);
    }
}
