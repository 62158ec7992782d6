/* End-to-end tests of sessions through the public API: feeds, fetches,
 * targets, variables, pruning, plan caching and graph edits. Reference
 * values are worked out by hand in the comments. */
#include <cblas.h>
#include <flowgraph/flowgraph.h>

#include "fgtest.h"
#include "test_threads_util.h"

static fg_tensor *tensor_f32(int rank, const int64_t *dims, const float *data, size_t n) {
  return fg_tensor_from_data(FG_F32, rank, dims, data, n * sizeof(float), NULL);
}

/* y = relu(x @ w + b); s = sum(y, axis 1). x [?,3], w [3,2], b [2]. */
static fg_graph *mlp_graph(void) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {-1, 3}, wd[2] = {3, 2}, bd[1] = {2};
  float w[6] = {1, 0, 0, 1, 1, 1}, b[2] = {2.5f, 0.5f};
  fg_tensor *wt = tensor_f32(2, wd, w, 6), *bt = tensor_f32(1, bd, b, 2);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_relu(
      g, fg_add(g, fg_matmul(g, x, fg_constant(g, "w", wt), 0, 0), fg_constant(g, "b", bt)));
  fg_set_name(g, y, "y");
  int64_t axis = 1;
  fg_set_name(g, fg_reduce_sum(g, y, &axis, 1, 0), "s");
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  return g;
}

FG_TEST(session_mlp_forward_unknown_batch, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = mlp_graph();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  /* x = [[1,2,3],[-1,0,1]]: x@w = [[4,5],[0,1]], +b = [[6.5,5.5],[2.5,1.5]]. */
  float x[6] = {1, 2, 3, -1, 0, 1};
  int64_t xd[2] = {2, 3};
  fg_tensor *xt = tensor_f32(2, xd, x, 6);
  fg_feed feed = {"x", xt};
  const char *fetches[2] = {"y", "s"};
  fg_tensor *out[2];
  FG_REQUIRE(fg_session_run(s, &feed, 1, fetches, 2, out, NULL, 0, st) == 0);
  FG_CHECK_INT(fg_tensor_rank(out[0]), 2);
  FG_CHECK_INT(fg_tensor_dim(out[0], 0), 2);
  FG_CHECK_INT(fg_tensor_dim(out[0], 1), 2);
  const float *y = fg_tensor_data(out[0]), *sum = fg_tensor_data(out[1]);
  float want[4] = {6.5f, 5.5f, 2.5f, 1.5f};
  for (int i = 0; i < 4; i++)
    FG_CHECK_NEAR(y[i], want[i], 1e-6);
  FG_CHECK_NEAR(sum[0], 12.0, 1e-6);
  FG_CHECK_NEAR(sum[1], 4.0, 1e-6);
  for (int i = 0; i < 2; i++)
    fg_tensor_free(out[i]);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(session_batch_size_changes_between_runs, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = mlp_graph();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const char *fetch = "s";
  for (int batch = 1; batch <= 5; batch += 2) {
    float x[15];
    for (int i = 0; i < batch * 3; i++)
      x[i] = (float)(i % 3); /* rows [0,1,2] */
    int64_t xd[2] = {batch, 3};
    fg_tensor *xt = tensor_f32(2, xd, x, (size_t)batch * 3);
    fg_feed feed = {"x", xt};
    fg_tensor *out = NULL;
    FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
    /* [0,1,2]@w = [2,3], +b = [4.5,3.5], sum 8 per row. */
    FG_CHECK_INT(fg_tensor_dim(out, 0), batch);
    for (int i = 0; i < batch; i++)
      FG_CHECK_NEAR(((float *)fg_tensor_data(out))[i], 8.0, 1e-6);
    fg_tensor_free(out);
    fg_tensor_free(xt);
  }
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(session_same_plan_reused_gives_same_result, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = mlp_graph();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  float x[3] = {1, 1, 1};
  int64_t xd[2] = {1, 3};
  fg_tensor *xt = tensor_f32(2, xd, x, 3);
  fg_feed feed = {"x", xt};
  const char *fetch = "s";
  for (int r = 0; r < 3; r++) {
    fg_tensor *out = NULL;
    FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
    /* [1,1,1]@w = [2,2], +b = [4.5,2.5] -> 7. */
    FG_CHECK_NEAR(((float *)fg_tensor_data(out))[0], 7.0, 1e-6);
    fg_tensor_free(out);
    ((float *)fg_tensor_data(xt))[0] = 2; /* next run: [2,1,1] -> [3,2]+b -> 8 */
    out = NULL;
    FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
    FG_CHECK_NEAR(((float *)fg_tensor_data(out))[0], 8.0, 1e-6);
    fg_tensor_free(out);
    ((float *)fg_tensor_data(xt))[0] = 1;
  }
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(session_variables_persist_and_assign, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {2};
  double init[2] = {1, -2};
  fg_tensor *it = fg_tensor_from_data(FG_F64, 1, d, init, sizeof init, st);
  fg_output v = fg_variable(g, "v", it);
  fg_output twice = fg_mul(g, v, fg_scalar(g, FG_F64, 2.0));
  fg_set_name(g, fg_assign(g, v, twice), "double_v");
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const char *target = "double_v", *fetch = "v";
  for (int i = 0; i < 3; i++)
    FG_REQUIRE(fg_session_run(s, NULL, 0, NULL, 0, NULL, &target, 1, st) == 0);
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, NULL, 0, &fetch, 1, &out, NULL, 0, st) == 0);
  /* Three doublings: [8, -16]. */
  FG_CHECK_NEAR(((double *)fg_tensor_data(out))[0], 8.0, 0);
  FG_CHECK_NEAR(((double *)fg_tensor_data(out))[1], -16.0, 0);
  fg_tensor_free(out);
  fg_tensor *cur = fg_session_variable(s, "v", st);
  FG_REQUIRE(cur);
  FG_CHECK_NEAR(((double *)fg_tensor_data(cur))[1], -16.0, 0);
  fg_tensor_free(cur);
  /* The graph's initial value is untouched. */
  FG_CHECK_NEAR(init[0], 1.0, 0);
  /* A second session starts from the initial value. */
  fg_session *s2 = fg_session_new(g, NULL, st);
  FG_REQUIRE(s2);
  FG_REQUIRE(fg_session_run(s2, NULL, 0, &fetch, 1, &out, NULL, 0, st) == 0);
  FG_CHECK_NEAR(((double *)fg_tensor_data(out))[0], 1.0, 0);
  fg_tensor_free(out);
  FG_CHECK(fg_session_variable(s, "nope", st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);
  fg_session_free(s2);
  fg_session_free(s);
  fg_tensor_free(it);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(session_prunes_unneeded_placeholders, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {2};
  fg_output a = fg_placeholder(g, "a", FG_F32, 1, d);
  fg_placeholder(g, "unused", FG_F32, 1, d);
  fg_set_name(g, fg_exp(g, a), "ea");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  float av[2] = {0, 1};
  fg_tensor *at = tensor_f32(1, d, av, 2);
  fg_feed feed = {"a", at};
  const char *fetch = "ea";
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
  FG_CHECK_NEAR(((float *)fg_tensor_data(out))[0], 1.0, 1e-7);
  FG_CHECK_NEAR(((float *)fg_tensor_data(out))[1], 2.718281828459045, 1e-6);
  fg_tensor_free(out);
  fg_tensor_free(at);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(session_fetch_by_output_index_and_feed_fetch, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  fg_output a = fg_placeholder(g, "a", FG_I64, 1, d);
  fg_set_name(g, fg_neg(g, a), "na");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  int64_t av[3] = {5, -7, 0};
  fg_tensor *at = fg_tensor_from_data(FG_I64, 1, d, av, sizeof av, st);
  fg_feed feed = {"a", at};
  const char *fetches[2] = {"na:0", "a"};
  fg_tensor *out[2];
  FG_REQUIRE(fg_session_run(s, &feed, 1, fetches, 2, out, NULL, 0, st) == 0);
  const int64_t *na = fg_tensor_data(out[0]), *ac = fg_tensor_data(out[1]);
  FG_CHECK_INT(na[0], -5);
  FG_CHECK_INT(na[1], 7);
  FG_CHECK_INT(na[2], 0);
  FG_CHECK_INT(ac[1], -7);
  fg_tensor_free(out[0]);
  fg_tensor_free(out[1]);
  const char *bad = "na:1";
  FG_CHECK(fg_session_run(s, &feed, 1, &bad, 1, out, NULL, 0, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "na:1");
  fg_tensor_free(at);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A session after its graph changed: nodes added after the session was made are picked up. */
FG_TEST(session_sees_graph_changes, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = mlp_graph();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  int64_t d[1] = {1};
  double one = 3.0;
  fg_tensor *t = fg_tensor_from_data(FG_F64, 1, d, &one, sizeof one, st);
  fg_output v = fg_variable(g, "late_var", t);
  fg_set_name(g, fg_add(g, v, v), "late");
  const char *fetch = "late";
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, NULL, 0, &fetch, 1, &out, NULL, 0, st) == 0);
  FG_CHECK_NEAR(((double *)fg_tensor_data(out))[0], 6.0, 0);
  fg_tensor_free(out);
  /* A failed edit makes the next run report the graph's error. */
  fg_add(g, v, fg_scalar(g, FG_F32, 1.0));
  FG_CHECK(fg_session_run(s, NULL, 0, &fetch, 1, &out, NULL, 0, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "f32");
  fg_tensor_free(t);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(session_reshape_with_unknown_batch, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[3] = {-1, 2, 2}, rd[2] = {-1, 4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 3, xd);
  int64_t axis0 = 0;
  fg_set_name(g, fg_reduce_mean(g, fg_reshape(g, x, 2, rd), &axis0, 1, 0), "m");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  float xv[12];
  for (int i = 0; i < 12; i++)
    xv[i] = (float)i;
  int64_t fd[3] = {3, 2, 2};
  fg_tensor *xt = tensor_f32(3, fd, xv, 12);
  fg_feed feed = {"x", xt};
  const char *fetch = "m";
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
  /* rows [0..3],[4..7],[8..11]: column means 4,5,6,7. */
  FG_CHECK_INT(fg_tensor_dim(out, 0), 4);
  for (int i = 0; i < 4; i++)
    FG_CHECK_NEAR(((float *)fg_tensor_data(out))[i], 4.0 + i, 1e-6);
  fg_tensor_free(out);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(session_cross_entropy_end_to_end, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t ld[2] = {-1, 2}, yd[1] = {-1};
  fg_output logits = fg_placeholder(g, "logits", FG_F64, 2, ld);
  fg_output labels = fg_placeholder(g, "labels", FG_I32, 1, yd);
  fg_set_name(g, fg_softmax_cross_entropy(g, logits, labels), "loss");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  /* Row 0: [0,0], label 0 -> ln 2. Row 1: [ln 3, 0], label 1 -> softmax
   * [3/4, 1/4] -> ln 4. Mean: 1.5 ln 2. */
  double lv[4] = {0, 0, 1.0986122886681098, 0};
  int32_t yv[2] = {0, 1};
  int64_t lfd[2] = {2, 2}, yfd[1] = {2};
  fg_tensor *lt = fg_tensor_from_data(FG_F64, 2, lfd, lv, sizeof lv, st);
  fg_tensor *yt = fg_tensor_from_data(FG_I32, 1, yfd, yv, sizeof yv, st);
  fg_feed feeds[2] = {{"logits", lt}, {"labels", yt}};
  const char *fetch = "loss";
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, feeds, 2, &fetch, 1, &out, NULL, 0, st) == 0);
  FG_CHECK_INT(fg_tensor_rank(out), 0);
  FG_CHECK_NEAR(((double *)fg_tensor_data(out))[0], 1.0397207708399179, 1e-12);
  fg_tensor_free(out);
  fg_tensor_free(lt);
  fg_tensor_free(yt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* num_threads = n gives the session n threads: n - 1 pool workers of its
 * own (counted in /proc by their "fg-pool" name; the caller is thread 0),
 * which end with the session, and a run's metadata says n and names no
 * thread outside [0, n). */
FG_TEST(session_options_threads, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = mlp_graph();
  fg_session_options o;
  fg_session_options_init(&o);
  FG_CHECK_INT(o.num_threads, 0);
  /* Other cases' workers, run before this one in the same process, may
   * still be listed for a moment after they were joined. */
  const int base = fgt_threads_reach(1, 0, 2.0);
  FG_REQUIRE(base >= 0);
  float x[6] = {1, 2, 3, -1, 0, 1};
  int64_t xd[2] = {2, 3};
  fg_tensor *xt = tensor_f32(2, xd, x, 6);
  fg_feed feed = {"x", xt};
  const char *fetch = "y";
  fg_run_options ro = {1};
  for (int n = 1; n <= 3; n++) {
    o.num_threads = n;
    fg_session *s = fg_session_new(g, &o, st);
    FG_REQUIRE(s != NULL);
    FG_CHECK_INT(fgt_count_threads(1), base + n - 1);
    fg_tensor *y = NULL;
    fg_run_metadata *md = NULL;
    FG_REQUIRE(fg_session_run_ex(s, &feed, 1, &fetch, 1, &y, NULL, 0, &ro, &md, st) == 0);
    FG_REQUIRE(md != NULL);
    FG_CHECK_INT(md->threads, n);
    FG_CHECK(md->n_nodes > 0);
    for (int i = 0; i < md->n_nodes; i++)
      FG_CHECK(md->nodes[i].thread >= 0 && md->nodes[i].thread < n);
    /* y = [[6.5,5.5],[2.5,1.5]] (session_mlp_forward_unknown_batch) */
    const float want[4] = {6.5f, 5.5f, 2.5f, 1.5f};
    FG_CHECK(memcmp(fg_tensor_data(y), want, sizeof want) == 0);
    fg_run_metadata_free(md);
    fg_tensor_free(y);
    fg_session_free(s);
    FG_CHECK_INT(fgt_threads_reach(1, base, 5.0), base);
  }
  fg_tensor_free(xt);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Making a session sets OpenBLAS to one thread and stops its server
 * threads, which the threaded OpenBLAS starts at load and which spin for
 * about 0.1 s (kernels/cpu/matmul.c): with a one-thread session (no pool
 * workers) the process has those threads fewer (a sanitizer's own
 * thread stays), and a product still computes
 * [[1, 2], [3, 4]] [[5], [6]] = [[17], [39]]. */
FG_TEST(session_stops_openblas_server_threads, "") {
  /* OpenBLAS's server threads, started at load: one fewer than its count. */
  const int servers = openblas_get_num_threads() - 1, before = fgt_count_threads(0);
  if (before < 0) FG_SKIP("no /proc/self/task");
  fg_graph *g = fg_graph_new();
  const int64_t da[2] = {2, 2}, db[2] = {2, 1};
  const float av[4] = {1, 2, 3, 4}, bv[2] = {5, 6};
  fg_tensor *ta = tensor_f32(2, da, av, 4), *tb = tensor_f32(2, db, bv, 2);
  FG_REQUIRE(ta && tb);
  fg_output y = fg_matmul(g, fg_constant(g, "a", ta), fg_constant(g, "b", tb), 0, 0);
  fg_set_name(g, y, "y");
  fg_tensor_free(ta), fg_tensor_free(tb);
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = 1;
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, &o, st);
  FG_REQUIRE(s);
  FG_CHECK_INT(openblas_get_num_threads(), 1);
  /* Joined threads can linger in /proc a moment (fgt_threads_reach). */
  FG_CHECK_INT(fgt_threads_reach(0, before - servers, 5.0), before - servers);
  const char *fetch = "y";
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, NULL, 0, &fetch, 1, &out, NULL, 0, st) == 0);
  const float *v = fg_tensor_data(out);
  FG_CHECK(v[0] == 17 && v[1] == 39);
  fg_tensor_free(out);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}
