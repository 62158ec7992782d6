/* Bad API calls (NULL arguments, unknown feeds and fetches, wrong feed
 * dtypes and shapes, missing feeds, out-of-range indices, bad thread
 * counts) through the public API: every case gets a status code
 * and a message naming the culprit, never a crash. */
#include <flowgraph/flowgraph.h>

#include "executor/cuda_backend.h"
#include "fgtest.h"

static fg_graph *small_graph(void) {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {-1, 3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  fg_set_name(g, fg_tanh(g, x), "y");
  return g;
}

static fg_tensor *zeros(fg_dtype dt, int rank, const int64_t *dims) {
  return fg_tensor_new(dt, rank, dims, NULL);
}

#define CHECK_STATUS(st, code, text)                                                               \
  do {                                                                                             \
    FG_CHECK_INT(fg_status_code(st), code);                                                        \
    FG_CHECK_STR_CONTAINS(fg_status_message(st), text);                                            \
  } while (0)

FG_TEST(a1_null_arguments_session, "badinput") {
  fg_status *st = fg_status_new();
  FG_CHECK(fg_session_new(NULL, NULL, st) == NULL);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "graph is NULL");
  const char *fetch = "y";
  fg_tensor *out = NULL;
  FG_CHECK(fg_session_run(NULL, NULL, 0, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "session is NULL");
  fg_graph *g = small_graph();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  FG_CHECK(fg_session_run(s, NULL, 0, &fetch, 1, NULL, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "outputs");
  FG_CHECK(fg_session_run(s, NULL, 0, NULL, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "fetches");
  const char *null_name = NULL;
  FG_CHECK(fg_session_run(s, NULL, 0, &null_name, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "fetch 0");
  fg_feed feed = {"x", NULL};
  FG_CHECK(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "tensor is NULL");
  fg_feed feed2 = {NULL, NULL};
  FG_CHECK(fg_session_run(s, &feed2, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "name is NULL");
  FG_CHECK(fg_session_run(s, NULL, 0, NULL, 0, NULL, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "nothing to fetch");
  FG_CHECK(fg_session_run(s, NULL, -1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "negative");
  /* A NULL status is allowed: the call still fails cleanly. */
  FG_CHECK(fg_session_run(s, NULL, 0, &fetch, 1, NULL, NULL, 0, NULL) != 0);
  FG_CHECK(fg_session_variable(NULL, "v", st) == NULL);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "session");
  FG_CHECK(fg_session_variable(s, NULL, st) == NULL);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "name");
  fg_session_free(s);
  fg_session_free(NULL);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(a1_null_arguments_graph_and_tensor, "badinput") {
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_graph_status(NULL, st), FG_INVALID_ARGUMENT);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "graph is NULL");
  fg_output o = fg_add(NULL, FG_NO_OUTPUT, FG_NO_OUTPUT);
  FG_CHECK_INT(o.node, -1);
  FG_CHECK_INT(fg_graph_num_nodes(NULL), 0);
  FG_CHECK(fg_node_name(NULL, 0) == NULL);
  FG_CHECK(fg_graph_find(NULL, "x") == -1);
  fg_graph *g = fg_graph_new();
  FG_CHECK(fg_graph_find(g, NULL) == -1);
  FG_CHECK_INT(fg_op(g, NULL, NULL, NULL, 0, NULL).node, -1);
  fg_graph_status(g, st);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "op name is NULL");
  fg_graph_free(g);
  g = fg_graph_new();
  FG_CHECK_INT(fg_set_name(g, (fg_output){0, 0}, "x").node, -1);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 0");
  fg_graph_free(g);
  g = fg_graph_new();
  int64_t d[1] = {2};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  FG_CHECK_INT(fg_set_name(g, x, NULL).node, -1);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'x'");
  fg_graph_free(g);
  g = fg_graph_new();
  FG_CHECK_INT(fg_placeholder(g, "x", FG_F32, 1, NULL).node, -1);
  FG_CHECK(fg_graph_status(g, st) != FG_OK);
  fg_graph_free(g);
  g = fg_graph_new();
  FG_CHECK_INT(fg_constant(g, "c", NULL).node, -1);
  FG_CHECK(fg_graph_status(g, st) != FG_OK);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'c'");
  fg_graph_free(g);
  FG_CHECK(fg_tensor_new(FG_F32, 2, NULL, st) == NULL);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "dims is NULL");
  FG_CHECK(fg_tensor_from_data(FG_F32, 1, d, NULL, 8, st) == NULL);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "bytes");
  FG_CHECK(fg_tensor_clone(NULL, st) == NULL);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "NULL");
  FG_CHECK(fg_tensor_data(NULL) == NULL);
  FG_CHECK_INT(fg_tensor_rank(NULL), -1);
  fg_tensor_free(NULL);
  fg_graph_free(NULL);
  fg_status_free(NULL);
  FG_CHECK(fg_graph_load(NULL, st) == NULL);
  FG_CHECK(fg_status_code(st) != FG_OK);
  FG_CHECK(fg_npy_read(NULL, st) == NULL);
  FG_CHECK(fg_status_code(st) != FG_OK);
  FG_CHECK(fg_graph_save(NULL, "/tmp/x.fgb", st) != 0);
  FG_CHECK(fg_status_code(st) != FG_OK);
  fg_status_free(st);
}

/* fg_tensor_new_pinned refuses what fg_tensor_new refuses, with the same
 * words; without a GPU (CI) it gives an ordinary zeroed tensor that reads
 * as not pinned. (On a GPU the pinned one is fed in test_cuda_session.) */
FG_TEST(a1_pinned_tensor_bad_shapes_and_fallback, "badinput") {
  fg_status *st = fg_status_new();
  FG_CHECK(fg_tensor_new_pinned(FG_F32, 2, NULL, st) == NULL);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "dims is NULL");
  FG_CHECK(fg_tensor_new_pinned(FG_F32, 1, (int64_t[]){-3}, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "-3");
  FG_CHECK(fg_tensor_new_pinned((fg_dtype)99, 1, (int64_t[]){3}, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_tensor_new_pinned(FG_F32, 3, (int64_t[]){1ll << 32, 1ll << 32, 4}, st) == NULL);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "overflows 64-bit byte size");
  FG_CHECK_INT(fg_tensor_is_pinned(NULL), 0);
  fg_tensor *t = fg_tensor_new_pinned(FG_I64, 2, (int64_t[]){3, 5}, st);
  FG_REQUIRE(t);
  FG_CHECK_INT(fg_status_code(st), FG_OK);
  FG_CHECK_INT(fg_tensor_num_bytes(t), 3 * 5 * 8);
  const int64_t *v = fg_tensor_data(t);
  int nonzero = 0;
  for (int i = 0; i < 15; i++)
    nonzero += v[i] != 0;
  FG_CHECK_INT(nonzero, 0);
  if (fg_cuda_device_count() == 0) FG_CHECK_INT(fg_tensor_is_pinned(t), 0);
  fg_tensor *e = fg_tensor_new_pinned(FG_F32, 1, (int64_t[]){0}, st); /* empty is fine */
  FG_REQUIRE(e);
  FG_CHECK_INT(fg_tensor_num_bytes(e), 0);
  fg_tensor_free(e);
  fg_tensor_free(t);
  fg_status_free(st);
}

FG_TEST(a2_feed_unknown_and_non_placeholder, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = small_graph();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  int64_t d[2] = {1, 3};
  fg_tensor *t = zeros(FG_F32, 2, d);
  const char *fetch = "y";
  fg_tensor *out = NULL;
  fg_feed f1 = {"nosuch", t};
  FG_CHECK(fg_session_run(s, &f1, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_NOT_FOUND, "'nosuch'");
  fg_feed f2 = {"y", t};
  FG_CHECK(fg_session_run(s, &f2, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_NOT_FOUND, "not a placeholder");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'y'");
  fg_feed f3[2] = {{"x", t}, {"x", t}};
  FG_CHECK(fg_session_run(s, f3, 2, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "twice");
  fg_tensor_free(t);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(a2_fetch_and_target_unknown, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = small_graph();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  int64_t d[2] = {1, 3};
  fg_tensor *t = zeros(FG_F32, 2, d);
  fg_feed f = {"x", t};
  const char *fetch = "missing_node";
  fg_tensor *out = (fg_tensor *)1;
  FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_NOT_FOUND, "'missing_node'");
  FG_CHECK(out == NULL);
  const char *target = "no_target";
  FG_CHECK(fg_session_run(s, &f, 1, NULL, 0, NULL, &target, 1, st) != 0);
  CHECK_STATUS(st, FG_NOT_FOUND, "'no_target'");
  const char *weird[3] = {"y:", "y:abc", ":0"};
  for (int i = 0; i < 3; i++) {
    FG_CHECK(fg_session_run(s, &f, 1, &weird[i], 1, &out, NULL, 0, st) != 0);
    CHECK_STATUS(st, FG_NOT_FOUND, weird[i]);
  }
  fg_tensor_free(t);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(a3_feed_wrong_dtype_rank_dim, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = small_graph();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const char *fetch = "y";
  fg_tensor *out = NULL;
  int64_t d2[2] = {2, 3}, d1[1] = {3}, d4[2] = {2, 4};
  fg_tensor *wrong_dtype = zeros(FG_F64, 2, d2), *wrong_rank = zeros(FG_F32, 1, d1),
            *wrong_dim = zeros(FG_F32, 2, d4);
  fg_feed f = {"x", wrong_dtype};
  FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "feed 'x': expected f32 [?,3], given f64 [2,3]");
  f.tensor = wrong_rank;
  FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "feed 'x': expected f32 [?,3], given f32 [3]");
  f.tensor = wrong_dim;
  FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "feed 'x': expected f32 [?,3], given f32 [2,4]");
  fg_tensor_free(wrong_dtype);
  fg_tensor_free(wrong_rank);
  fg_tensor_free(wrong_dim);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(a4_missing_feed, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = small_graph();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const char *fetch = "y";
  fg_tensor *out = NULL;
  FG_CHECK(fg_session_run(s, NULL, 0, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "placeholder 'x' (f32 [?,3]) is needed by 'y'");
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(a5_gather_index_out_of_range, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t pd[2] = {4, 2}, id[1] = {-1};
  float pv[8] = {0};
  fg_tensor *pt = fg_tensor_from_data(FG_F32, 2, pd, pv, sizeof pv, st);
  fg_output idx = fg_placeholder(g, "idx", FG_I64, 1, id);
  fg_set_name(g, fg_gather(g, fg_constant(g, "table", pt), idx), "rows");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  int64_t iv[3] = {0, 3, 4}, fd[1] = {3};
  fg_tensor *it = fg_tensor_from_data(FG_I64, 1, fd, iv, sizeof iv, st);
  fg_feed f = {"idx", it};
  const char *fetch = "rows";
  fg_tensor *out = NULL;
  FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "node 'rows' (gather)");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "4");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "[0, 4)");
  /* Negative indices are refused too. */
  int64_t *fed = fg_tensor_data(it);
  fed[2] = -1;
  FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "-1");
  /* In range works afterwards: the session is not left broken. */
  fed[2] = 2;
  FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) == 0);
  fg_tensor_free(out);
  fg_tensor_free(it);
  fg_tensor_free(pt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(a5_one_hot_and_label_out_of_range, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t yd[1] = {-1}, ld[2] = {-1, 3};
  fg_output y = fg_placeholder(g, "labels", FG_I32, 1, yd);
  fg_output logits = fg_placeholder(g, "logits", FG_F32, 2, ld);
  fg_set_name(g, fg_one_hot(g, y, 3, FG_F32), "onehot");
  fg_set_name(g, fg_softmax_cross_entropy(g, logits, y), "xent");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  int32_t yv[2] = {1, 3};
  int64_t fd[1] = {2}, lfd[2] = {2, 3};
  fg_tensor *yt = fg_tensor_from_data(FG_I32, 1, fd, yv, sizeof yv, st);
  fg_tensor *lt = fg_tensor_new(FG_F32, 2, lfd, st);
  fg_feed feeds[2] = {{"labels", yt}, {"logits", lt}};
  const char *f1 = "onehot", *f2 = "xent";
  fg_tensor *out = NULL;
  FG_CHECK(fg_session_run(s, feeds, 1, &f1, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "node 'onehot' (one_hot)");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "3");
  FG_CHECK(fg_session_run(s, feeds, 2, &f2, 1, &out, NULL, 0, st) != 0);
  CHECK_STATUS(st, FG_INVALID_ARGUMENT, "node 'xent' (softmax_cross_entropy)");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "[0, 3)");
  fg_tensor_free(yt);
  fg_tensor_free(lt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(a6_thread_counts, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = small_graph();
  fg_session_options o;
  fg_session_options_init(&o);
  int bad[3] = {-1, 1000000, -2147483647};
  for (int i = 0; i < 3; i++) {
    o.num_threads = bad[i];
    FG_CHECK(fg_session_new(g, &o, st) == NULL);
    CHECK_STATUS(st, FG_INVALID_ARGUMENT, "num_threads");
  }
  o.num_threads = 0; /* documented: all cores */
  fg_session *s = fg_session_new(g, &o, st);
  FG_CHECK(s != NULL);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(session_refuses_graph_with_sticky_error, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t a[1] = {2}, b[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, a);
  fg_output y = fg_placeholder(g, "y", FG_F32, 1, b);
  fg_output bad = fg_add(g, x, y);
  FG_CHECK_INT(bad.node, -1);
  fg_tanh(g, x); /* does nothing: the first error sticks */
  FG_CHECK_INT(fg_graph_num_nodes(g), 2);
  FG_CHECK(fg_session_new(g, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "[2]");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "[3]");
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(duplicate_and_bad_node_names, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t a[1] = {2};
  fg_placeholder(g, "x", FG_F32, 1, a);
  fg_placeholder(g, "x", FG_F32, 1, a);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'x' is used twice");
  fg_graph_free(g);
  g = fg_graph_new();
  fg_placeholder(g, "a:b", FG_F32, 1, a);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "':'");
  fg_graph_free(g);
  g = fg_graph_new();
  fg_placeholder(g, "", FG_F32, 1, a);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(assign_needs_a_variable, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t a[1] = {2};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, a);
  fg_assign(g, x, x);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "must be a variable");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'x'");
  fg_graph_free(g);
  fg_status_free(st);
}
