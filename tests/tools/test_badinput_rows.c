/* Bad inputs that had no test named after them: bad .npy feeds (end to end
 * through `flowgraph run`) and gradients with no path and of integer
 * tensors. Malformed files are in tests/schema/test_badfiles.c, bad API
 * calls in tests/graph/test_api_bad.c, threads and graph edits in
 * tests/executor/test_threads.c, NaN and Inf in
 * tests/executor/test_numerics.c. Every expected message names the feed,
 * both shapes/dtypes and the file. */
#include "flowgraph/autodiff.h"
#include "test_cli_harness.h"

/* Runs `flowgraph run mlp.fgb -i x=PATH -o probs=out.npy` and checks the
 * one-line error (a macro: CHECK_RUNTIME_ERROR pastes the code name). */
#define RUN_BAD_FEED(path, code, needle)                                                           \
  do {                                                                                             \
    char in_[700], out_[700];                                                                      \
    snprintf(in_, sizeof in_, "x=%s", path);                                                       \
    snprintf(out_, sizeof out_, "probs=%s", tpath("out.npy"));                                     \
    cli_result r_;                                                                                 \
    FG_REQUIRE(cli(&r_, "run", tpath("mlp.fgb"), "-i", in_, "-o", out_, NULL) == 0);               \
    CHECK_RUNTIME_ERROR(r_, code, needle);                                                         \
    FG_CHECK(!exists(tpath("out.npy")));                                                           \
    result_free(&r_);                                                                              \
  } while (0)

FG_TEST(badinput_F20_npy_feed_header_dtype_shape_truncated, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  /* A header that is not a Python dict literal. */
  static const char hdr[] = "\x93NUMPY\x01\x00\x10\x00{garbage}      \n";
  FG_REQUIRE(fgt_write_file(tpath("hdr.npy"), hdr, sizeof hdr - 1) == 0);
  RUN_BAD_FEED(tpath("hdr.npy"), "INVALID_ARGUMENT", "feed 'x'");
  /* Wrong dtype: f64 [4] for an f32 [?,4] placeholder. */
  RUN_BAD_FEED(NPY_DIR "/f64_4.npy", "INVALID_ARGUMENT", "feed 'x'");
  RUN_BAD_FEED(NPY_DIR "/f64_4.npy", "INVALID_ARGUMENT", "f64");
  /* Wrong shape: f32 [2,3] for [?,4]: both shapes named. */
  RUN_BAD_FEED(NPY_DIR "/f32_2x3.npy", "INVALID_ARGUMENT", "feed 'x'");
  RUN_BAD_FEED(NPY_DIR "/f32_2x3.npy", "INVALID_ARGUMENT", "[2,3]");
  /* Truncated data: x.npy (128-byte header + 32 data bytes) less 5 bytes. */
  char *bytes = slurp(tpath("x.npy"));
  FG_REQUIRE(bytes);
  FG_REQUIRE(fgt_write_file(tpath("trunc.npy"), bytes, 128 + 32 - 5) == 0);
  free(bytes);
  RUN_BAD_FEED(tpath("trunc.npy"), "INVALID_ARGUMENT", "feed 'x'");
  RUN_BAD_FEED(tpath("trunc.npy"), "INVALID_ARGUMENT", "trunc.npy");
  fgt_rmtree(tmpdir);
}

/* Gradients with no path and of integers: y = tanh(a) does not depend on b; n = cast(a, i32) is an
 * integer. */
FG_TEST(badinput_A7_gradients_unconnected_and_integer, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_status *st = fg_status_new();
  int64_t d[1] = {3};
  fg_output a = fg_placeholder(g, "a", FG_F32, 1, d);
  fg_output b = fg_placeholder(g, "b", FG_F32, 1, d);
  fg_output y = fg_reduce_sum(g, fg_tanh(g, a), NULL, 0, 0);
  /* No path from y to b: the default is a zeros_like(b) node. */
  fg_output db = FG_NO_OUTPUT;
  FG_REQUIRE(fg_gradients(g, &y, 1, &b, 1, NULL, &db, st) == 0);
  FG_REQUIRE(db.node >= 0);
  fg_set_name(g, db, "db");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  float bv[3] = {5, -7, 9};
  fg_tensor *bt = fg_tensor_from_data(FG_F32, 1, d, bv, sizeof bv, st);
  fg_feed feed = {"b", bt};
  const char *fetch = "db";
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
  for (int i = 0; i < 3; i++)
    FG_CHECK(((const float *)fg_tensor_data(out))[i] == 0.0f);
  fg_tensor_free(out);
  fg_session_free(s);
  /* With zeros_for_unconnected = 0 the result is FG_NO_OUTPUT. */
  fg_gradients_options o;
  fg_gradients_options_init(&o);
  o.zeros_for_unconnected = 0;
  db = (fg_output){0, 0};
  FG_REQUIRE(fg_gradients_ex(g, &y, 1, &b, 1, NULL, &db, &o, st) == 0);
  FG_CHECK_INT(db.node, -1);
  /* Of an integer tensor: a clear error naming the dtype, no crash. */
  fg_output n = fg_set_name(g, fg_cast(g, a, FG_I32), "n");
  fg_output dn = FG_NO_OUTPUT;
  FG_CHECK(fg_gradients(g, &y, 1, &n, 1, NULL, &dn, st) != 0);
  FG_CHECK(fg_status_code(st) != FG_OK);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "i32");
  fg_tensor_free(bt);
  fg_status_free(st);
  fg_graph_free(g);
}
