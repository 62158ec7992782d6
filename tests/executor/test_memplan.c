/* The memory planner on small hand-made DAGs whose plans are worked out by
 * hand in the comments, plus bad input. Randomised and MLP-shaped graphs are
 * in test_memplan_random.c. */
#include "test_memplan_util.h"

/* a -> b -> c -> d on a chain, 100 bytes each (128 aligned). Sizes tie, so
 * placement goes by producer: a@0; b reads a at step 1, so b@128; a is dead
 * before step 2 on every schedule, so c takes a's bytes, d takes b's. At
 * step 3 both c and d are live: the lower bound is 2 x 128. */
static tg *chain4(int inplace) {
  tg *g = tg_new();
  int a = tg_op(g, 100, -1, -1, -1);
  int b = tg_op(g, 100, a, -1, -1);
  int c = tg_op(g, 100, b, -1, -1);
  int d = tg_op(g, 100, c, -1, -1);
  if (inplace) {
    g->t[b].inplace_from = a;
    g->t[c].inplace_from = b;
    g->t[d].inplace_from = c;
  }
  return g;
}

FG_TEST(memplan_chain_reuses_two_buffers, "") {
  tg *g = chain4(0);
  FG_REQUIRE(g);
  FG_REQUIRE(tg_plan(g, 64) == 0);
  FG_CHECK_INT(g->r.arena_bytes, 256);
  FG_CHECK_INT(g->r.lower_bound_bytes, 256);
  FG_CHECK_INT(g->r.naive_bytes, 512);
  FG_CHECK_INT(g->offsets[0], 0);
  FG_CHECK_INT(g->offsets[1], 128);
  FG_CHECK_INT(g->offsets[2], 0);
  FG_CHECK_INT(g->offsets[3], 128);
  for (int t = 0; t < 4; t++)
    FG_CHECK_INT(g->shared[t], -1);
  FG_CHECK_INT(tg_check(g, 64), 0);
  free(g);
}

FG_TEST(memplan_chain_in_place_is_one_buffer, "") {
  tg *g = chain4(1);
  FG_REQUIRE(g);
  FG_REQUIRE(tg_plan(g, 64) == 0);
  FG_CHECK_INT(g->r.arena_bytes, 128);
  FG_CHECK_INT(g->r.lower_bound_bytes, 128);
  FG_CHECK_INT(g->r.naive_bytes, 512);
  for (int t = 0; t < 4; t++)
    FG_CHECK_INT(g->offsets[t], 0);
  FG_CHECK_INT(g->shared[0], -1);
  FG_CHECK_INT(g->shared[1], 0);
  FG_CHECK_INT(g->shared[2], 1);
  FG_CHECK_INT(g->shared[3], 2);
  FG_CHECK_INT(tg_check(g, 64), 0);
  free(g);
}

/* a (step 0) feeds two branches, b1 -> b2 (steps 1, 2) and c1 -> c2 (steps
 * 3, 4), joined by d (step 5); 128 bytes each. In index order b1 dies at
 * step 2 before c1 is written at step 3, but a pool may run step 3 first,
 * so they must not share. Only d (whose producer descends from every other
 * step) can reuse: a, b1 and c1 are all over by then. Every other pair
 * conflicts, so the arena is 5 x 128 while the serial peak is 3 x 128.
 * Placement (ties by producer): a@0, b1@128, b2@256, c1@384, c2@512; d
 * conflicts only with b2 and c2, so the gaps are [0,256) and [384,512) and
 * best fit takes the smaller: c1's bytes. */
FG_TEST(memplan_diamond_branches_do_not_share, "") {
  tg *g = tg_new();
  FG_REQUIRE(g);
  int a = tg_op(g, 128, -1, -1, -1);
  int b1 = tg_op(g, 128, a, -1, -1);
  int b2 = tg_op(g, 128, b1, -1, -1);
  int c1 = tg_op(g, 128, a, -1, -1);
  int c2 = tg_op(g, 128, c1, -1, -1);
  int d = tg_op(g, 128, b2, c2, -1);
  FG_REQUIRE(tg_plan(g, 64) == 0);
  FG_CHECK_INT(g->r.arena_bytes, 5 * 128);
  FG_CHECK_INT(g->r.lower_bound_bytes, 3 * 128);
  FG_CHECK_INT(g->r.naive_bytes, 6 * 128);
  int branch1[2] = {b1, b2}, branch2[2] = {c1, c2};
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++) {
      size_t x = g->offsets[branch1[i]], y = g->offsets[branch2[j]];
      FG_CHECK(x + 128 <= y || y + 128 <= x);
    }
  FG_CHECK_INT(g->offsets[a], 0);
  FG_CHECK_INT(g->offsets[b1], 128);
  FG_CHECK_INT(g->offsets[b2], 256);
  FG_CHECK_INT(g->offsets[c1], 384);
  FG_CHECK_INT(g->offsets[c2], 512);
  FG_CHECK_INT(g->offsets[d], 384);
  FG_CHECK_INT(tg_check(g, 64), 0);
  free(g);
}

/* A chain of 4 steps; tensors by size, live range [producer, last user]:
 *   A 512 [0,1]  C 256 [0,3]  B 256 [2,3]  D 128 [0,1]  F 128 [0,3]  N 128 [2,2]
 * Placement (size, then producer, then id): A@0; C conflicts A -> 512;
 * B conflicts only C -> the gap [0,512) -> 0; D conflicts A, C -> 768;
 * F conflicts all -> 896. N conflicts B, C and F but not A or D: gaps are
 * [256,512) (256 bytes, after B) and [768,896) (128, D's place); best fit
 * takes the smaller one, 768, where first fit would take 256. The arena
 * equals the peak at step 0 (A+C+D+F = 1024). */
FG_TEST(memplan_best_fit_takes_the_smallest_hole, "") {
  tg *g = tg_new();
  FG_REQUIRE(g);
  int s0 = tg_step(g, NULL, 0, NULL, 0);
  int A = tg_out(g, s0, 512), C = tg_out(g, s0, 256), D = tg_out(g, s0, 128);
  int F = tg_out(g, s0, 128);
  int in1[2] = {A, D};
  int s1 = tg_step(g, in1, 2, NULL, 0);
  int ctl1[1] = {s1};
  int s2 = tg_step(g, NULL, 0, ctl1, 1);
  int B = tg_out(g, s2, 256), N = tg_out(g, s2, 128);
  int in3[3] = {C, B, F};
  tg_step(g, in3, 3, NULL, 0);
  FG_REQUIRE(tg_plan(g, 64) == 0);
  FG_CHECK_INT(g->offsets[A], 0);
  FG_CHECK_INT(g->offsets[C], 512);
  FG_CHECK_INT(g->offsets[B], 0);
  FG_CHECK_INT(g->offsets[D], 768);
  FG_CHECK_INT(g->offsets[F], 896);
  FG_CHECK_INT(g->offsets[N], 768);
  FG_CHECK_INT(g->r.arena_bytes, 1024);
  FG_CHECK_INT(g->r.lower_bound_bytes, 1024);
  FG_CHECK_INT(tg_check(g, 64), 0);
  free(g);
}

/* The middle of a chain is a fetched output: it stays out of the arena and
 * out of every count; its neighbours still reuse around it. */
FG_TEST(memplan_pinned_tensors_stay_out, "") {
  tg *g = tg_new();
  FG_REQUIRE(g);
  int a = tg_op(g, 64, -1, -1, -1);
  int b = tg_op(g, 1 << 20, a, -1, -1);
  int c = tg_op(g, 64, b, -1, -1);
  tg_op(g, 64, c, -1, -1);
  g->t[b].pinned = 1;
  g->t[c].inplace_from = b; /* a pinned source is never taken over */
  FG_REQUIRE(tg_plan(g, 64) == 0);
  FG_CHECK(g->offsets[b] == SIZE_MAX);
  FG_CHECK_INT(g->shared[b], -1);
  FG_CHECK_INT(g->shared[c], -1);
  FG_CHECK_INT(g->r.naive_bytes, 3 * 64);
  /* a dies at step 1; c and d overlap at step 3 */
  FG_CHECK_INT(g->r.lower_bound_bytes, 128);
  FG_CHECK_INT(g->r.arena_bytes, 128);
  FG_CHECK_INT(tg_check(g, 64), 0);
  free(g);
}

/* b = f(a) would overwrite a, but c = g(a) runs in a parallel branch and
 * may still read a: refused, and a and b get separate bytes. */
FG_TEST(memplan_in_place_refused_for_parallel_reader, "") {
  tg *g = tg_new();
  FG_REQUIRE(g);
  int a = tg_op(g, 256, -1, -1, -1);
  int b = tg_op(g, 256, a, -1, -1);
  int c = tg_op(g, 256, a, -1, -1);
  tg_op(g, 256, b, c, -1);
  g->t[b].inplace_from = a;
  FG_REQUIRE(tg_plan(g, 64) == 0);
  FG_CHECK_INT(g->shared[b], -1);
  FG_CHECK(g->offsets[a] + 256 <= g->offsets[b] || g->offsets[b] + 256 <= g->offsets[a]);
  FG_CHECK_INT(tg_check(g, 64), 0);
  free(g);
}

/* The other reader of a (step 1) is an ancestor of b's producer (step 2),
 * so b may take a's bytes; then a and b form one buffer. */
FG_TEST(memplan_in_place_accepted_after_other_readers, "") {
  tg *g = tg_new();
  FG_REQUIRE(g);
  int a = tg_op(g, 256, -1, -1, -1);
  int c = tg_op(g, 64, a, -1, -1);
  int b = tg_op(g, 256, a, c, -1);
  tg_op(g, 64, b, -1, -1);
  g->t[b].inplace_from = a;
  FG_REQUIRE(tg_plan(g, 64) == 0);
  FG_CHECK_INT(g->shared[b], a);
  FG_CHECK_INT(g->offsets[b], g->offsets[a]);
  /* a+c live at step 1, b(=a)+c at step 2: 256 + 64 */
  FG_CHECK_INT(g->r.lower_bound_bytes, 320);
  FG_CHECK_INT(g->r.arena_bytes, 320);
  FG_CHECK_INT(tg_check(g, 64), 0);
  free(g);
}

FG_TEST(memplan_in_place_refused_cases, "") {
  tg *g = tg_new();
  FG_REQUIRE(g);
  int a = tg_op(g, 256, -1, -1, -1);
  int b = tg_op(g, 200, a, -1, -1); /* 256 aligned: allowed */
  int c = tg_op(g, 320, b, -1, -1); /* different aligned size */
  int d = tg_op(g, 320, c, -1, -1);
  int e = tg_op(g, 320, d, -1, -1); /* asks for c, which step 4 does not read */
  /* one step, two outputs, both asking for d's bytes: only the first */
  int in[1] = {e};
  int s = tg_step(g, in, 1, NULL, 0);
  int f1 = tg_out(g, s, 320), f2 = tg_out(g, s, 320);
  tg_op(g, 64, f1, f2, -1);
  g->t[b].inplace_from = a;
  g->t[c].inplace_from = b;
  g->t[e].inplace_from = c;
  g->t[f1].inplace_from = e;
  g->t[f2].inplace_from = e;
  FG_REQUIRE(tg_plan(g, 64) == 0);
  FG_CHECK_INT(g->shared[b], a);
  FG_CHECK_INT(g->shared[c], -1);
  FG_CHECK_INT(g->shared[e], -1);
  FG_CHECK_INT(g->shared[f1], e);
  FG_CHECK_INT(g->shared[f2], -1);
  FG_CHECK(g->offsets[f1] != g->offsets[f2]);
  FG_CHECK_INT(tg_check(g, 64), 0);
  free(g);
}

/* Sizes round up to the alignment and offsets are multiples of it. A chain
 * 1 -> 65 -> 100 -> 3 bytes: with alignment 1 the arena packs exact bytes;
 * with 64, sizes become 64, 128, 128, 64. */
FG_TEST(memplan_alignment, "") {
  size_t als[4] = {1, 8, 64, 4096};
  for (int i = 0; i < 4; i++) {
    tg *g = tg_new();
    FG_REQUIRE(g);
    int a = tg_op(g, 1, -1, -1, -1);
    int b = tg_op(g, 65, a, -1, -1);
    int c = tg_op(g, 100, b, -1, -1);
    tg_op(g, 3, c, -1, -1);
    size_t al = als[i];
    FG_REQUIRE(tg_plan(g, al) == 0);
    size_t sa = tg_asz(1, al), sb = tg_asz(65, al), sc = tg_asz(100, al), sd = tg_asz(3, al);
    FG_CHECK_INT(g->r.naive_bytes, sa + sb + sc + sd);
    /* peaks: a+b at step 1, b+c at 2, c+d at 3 */
    size_t lb = sa + sb;
    if (sb + sc > lb) lb = sb + sc;
    if (sc + sd > lb) lb = sc + sd;
    FG_CHECK_INT(g->r.lower_bound_bytes, lb);
    FG_CHECK_INT(g->r.arena_bytes, lb);
    for (int t = 0; t < 4; t++)
      FG_CHECK_INT(g->offsets[t] % al, 0);
    FG_CHECK_INT(tg_check(g, al), 0);
    free(g);
  }
}

/* Empty tensors take no bytes: offset 0, no effect on any count. */
FG_TEST(memplan_zero_size_tensors, "") {
  tg *g = tg_new();
  FG_REQUIRE(g);
  int a = tg_op(g, 0, -1, -1, -1);
  int b = tg_op(g, 128, a, -1, -1);
  int c = tg_op(g, 0, b, -1, -1);
  int d = tg_op(g, 128, b, c, -1);
  g->t[c].inplace_from = b; /* sizes differ: refused */
  FG_REQUIRE(tg_plan(g, 64) == 0);
  FG_CHECK_INT(g->offsets[a], 0);
  FG_CHECK_INT(g->offsets[c], 0);
  FG_CHECK_INT(g->shared[c], -1);
  FG_CHECK_INT(g->r.naive_bytes, 256);
  FG_CHECK_INT(g->r.lower_bound_bytes, 256);
  FG_CHECK_INT(g->r.arena_bytes, 256);
  FG_CHECK(g->offsets[b] != g->offsets[d]);
  FG_CHECK_INT(tg_check(g, 64), 0);
  free(g);
}

FG_TEST(memplan_empty_plan, "") {
  fg_mp_input in = {0, NULL, NULL, 0, NULL, 64};
  fg_mp_result r = {NULL, NULL, 7, 7, 7};
  char err[128];
  FG_REQUIRE(fg_memplan(&in, &r, err, sizeof err) == 0);
  FG_CHECK_INT(r.arena_bytes, 0);
  FG_CHECK_INT(r.lower_bound_bytes, 0);
  FG_CHECK_INT(r.naive_bytes, 0);
}

/* Same input, same plan, byte for byte. */
FG_TEST(memplan_deterministic, "") {
  tg *g = chain4(0);
  FG_REQUIRE(g);
  tg_op(g, 100, 1, 2, -1);
  FG_REQUIRE(tg_plan(g, 64) == 0);
  size_t first[8];
  memcpy(first, g->offsets, sizeof first);
  fg_mp_result r1 = g->r;
  FG_REQUIRE(tg_plan(g, 64) == 0);
  FG_CHECK(memcmp(first, g->offsets, sizeof first) == 0);
  FG_CHECK_INT(g->r.arena_bytes, r1.arena_bytes);
  free(g);
}

/* Bad input: -1 and a message naming the problem, never a crash. */
static void expect_bad(tg *g, size_t al, const char *needle) {
  FG_CHECK_INT(tg_plan(g, al), -1);
  FG_CHECK_STR_CONTAINS(g->err, needle);
}

FG_TEST(memplan_bad_counts, "badinput") {
  tg *g = chain4(0);
  FG_REQUIRE(g);
  fg_mp_input in;
  tg_input(g, &in, 64);
  fg_mp_result r = {g->offsets, g->shared, 0, 0, 0};
  char err[160];
  in.n_steps = -1;
  FG_CHECK_INT(fg_memplan(&in, &r, err, sizeof err), -1);
  FG_CHECK_STR_CONTAINS(err, "n_steps is -1");
  tg_input(g, &in, 64);
  in.n_tensors = -3;
  FG_CHECK_INT(fg_memplan(&in, &r, err, sizeof err), -1);
  FG_CHECK_STR_CONTAINS(err, "n_tensors is -3");
  tg_input(g, &in, 64);
  FG_CHECK_INT(fg_memplan(NULL, &r, err, sizeof err), -1);
  FG_CHECK_INT(fg_memplan(&in, NULL, err, sizeof err), -1);
  r.offsets = NULL;
  FG_CHECK_INT(fg_memplan(&in, &r, err, sizeof err), -1);
  FG_CHECK_STR_CONTAINS(err, "NULL");
  r.offsets = g->offsets;
  in.pred_off = NULL;
  FG_CHECK_INT(fg_memplan(&in, &r, err, sizeof err), -1);
  FG_CHECK_STR_CONTAINS(err, "pred_off");
  /* a NULL err buffer is allowed */
  FG_CHECK_INT(fg_memplan(&in, &r, NULL, 0), -1);
  free(g);
}

FG_TEST(memplan_bad_alignment, "badinput") {
  size_t bad[3] = {0, 48, 65};
  for (int i = 0; i < 3; i++) {
    tg *g = chain4(0);
    FG_REQUIRE(g);
    expect_bad(g, bad[i], "alignment");
    free(g);
  }
}

FG_TEST(memplan_bad_producer, "badinput") {
  tg *g = chain4(0);
  FG_REQUIRE(g);
  g->t[2].producer = 4;
  expect_bad(g, 64, "tensor 2: producer step 4 out of range [0, 4)");
  g->t[2].producer = -1; /* only pinned tensors may lack a producer */
  expect_bad(g, 64, "producer step -1");
  g->t[2].pinned = 1;
  FG_CHECK_INT(tg_plan(g, 64), 0);
  free(g);
}

FG_TEST(memplan_bad_users, "badinput") {
  tg *g = chain4(0);
  FG_REQUIRE(g);
  g->users[1][0] = 9;
  expect_bad(g, 64, "tensor 1: user 0 is step 9, out of range [0, 4)");
  g->users[1][0] = -2;
  expect_bad(g, 64, "step -2");
  g->users[1][0] = 1; /* its own producer */
  expect_bad(g, 64, "not after its producer");
  g->users[1][0] = 2;
  g->t[1].n_users = -1;
  expect_bad(g, 64, "n_users is -1");
  g->t[1].n_users = 1;
  g->t[1].users = NULL;
  expect_bad(g, 64, "NULL users");
  free(g);
}

/* A reader in a parallel branch with a higher index does not depend on the
 * producer: it would read bytes nobody wrote yet. */
FG_TEST(memplan_bad_user_not_descendant, "badinput") {
  tg *g = tg_new();
  FG_REQUIRE(g);
  int a = tg_op(g, 64, -1, -1, -1);
  int b = tg_op(g, 64, -1, -1, -1);
  tg_op(g, 64, b, -1, -1);
  g->users[a][g->t[a].n_users++] = 2; /* step 2 does not descend from step 0 */
  expect_bad(g, 64, "does not depend on its producer step 0");
  free(g);
}

FG_TEST(memplan_bad_preds, "badinput") {
  tg *g = chain4(0);
  FG_REQUIRE(g);
  g->preds[g->pred_off[2]] = 2; /* a self loop */
  expect_bad(g, 64, "step 2 has predecessor 2");
  g->preds[g->pred_off[2]] = 3; /* a later step: not topological */
  expect_bad(g, 64, "topologically");
  g->preds[g->pred_off[2]] = 1;
  g->pred_off[2] = 5;
  expect_bad(g, 64, "pred_off decreases");
  g->pred_off[2] = 2;
  g->pred_off[0] = 1;
  expect_bad(g, 64, "pred_off[0]");
  free(g);
}

FG_TEST(memplan_bad_inplace_from, "badinput") {
  tg *g = chain4(0);
  FG_REQUIRE(g);
  g->t[1].inplace_from = 4;
  expect_bad(g, 64, "tensor 1: inplace_from 4");
  g->t[1].inplace_from = 1;
  expect_bad(g, 64, "inplace_from 1");
  g->t[1].inplace_from = -2;
  expect_bad(g, 64, "inplace_from -2");
  free(g);
}

FG_TEST(memplan_bad_sizes_overflow, "badinput") {
  tg *g = chain4(0);
  FG_REQUIRE(g);
  g->t[1].bytes = SIZE_MAX - 10;
  expect_bad(g, 64, "overflow");
  g->t[1].bytes = SIZE_MAX / 2;
  g->t[2].bytes = SIZE_MAX / 2;
  expect_bad(g, 64, "overflow");
  free(g);
}
