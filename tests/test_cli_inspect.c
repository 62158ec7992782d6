/* `flowgraph inspect` on models with a training step: the optimizer state
 * fg_minimize adds is counted apart from the parameters (counts worked out
 * by hand from the layer sizes). The basic inspect cases are in
 * test_cli.c. */
#include "test_cli_train_util.h"

/* The digits MLP of examples/digits (64-128-64-10, Adam). By hand:
 * parameters 64*128 + 128 + 128*64 + 64 + 64*10 + 10 = 17226 f32 in 6
 * tensors (68904 bytes); Adam keeps m and v for each, 2 * 17226 = 34452
 * f32 in 12 tensors (137808 bytes), and one f64 step counter (8 bytes):
 * 34453 in 13 tensors, 137816 bytes. */
FG_TEST(cli_inspect_optimizer_state_apart, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder(tpath("digits.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("digits.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "  trainable (variables): 17226 (68904 bytes) in 6 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "optimizer state (kept by the update ops, not counted above): "
                               "34453 (137816 bytes) in 13 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "  Adam m and v: 34452 (137808 bytes) in 12 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "  step counters: 1 (8 bytes) in 1 tensor\n");
  FG_CHECK(strstr(r.out, "momentum buffers") == NULL);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* x [?,2] -> w [2,1], b [1] -> mean squared error against y [?,1],
 * trained by fg_minimize with `kind`. */
static int build_lin_optimizer(const char *path, fg_optimizer_kind kind) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 2}, yd[2] = {FG_DIM_UNKNOWN, 1}, wd[2] = {2, 1}, bd[1] = {1};
  float w0[2] = {0.5f, -0.5f}, b0[1] = {0};
  fg_tensor *w = tensor_f32(2, wd, w0), *b = tensor_f32(1, bd, b0);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, yd);
  fg_output d = fg_sub(
      g, fg_add(g, fg_matmul(g, x, fg_variable(g, "w", w), 0, 0), fg_variable(g, "b", b)), y);
  fg_output loss = fg_reduce_mean(g, fg_mul(g, d, d), NULL, 0, 0);
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, kind);
  fg_status *st = fg_status_new();
  int rc = fg_minimize(g, loss, NULL, 0, &cfg, st).node >= 0 ? save_graph(g, path, 0) : -1;
  if (rc != 0) fprintf(stderr, "build_lin_optimizer: %s\n", fg_status_message(st));
  fg_status_free(st);
  fg_tensor_free(w);
  fg_tensor_free(b);
  fg_graph_free(g);
  return rc;
}

/* w [2,1] and b [1]: 3 parameters (12 bytes) in 2 tensors. Momentum keeps
 * one buffer like each (3, 12 bytes, 2 tensors); SGD keeps nothing. */
FG_TEST(cli_inspect_momentum_and_sgd_state, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_lin_optimizer(tpath("mom.fgb"), FG_OPTIMIZER_MOMENTUM) == 0);
  FG_REQUIRE(build_lin_optimizer(tpath("sgd.fgb"), FG_OPTIMIZER_SGD) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("mom.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "  trainable (variables): 3 (12 bytes) in 2 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "optimizer state (kept by the update ops, not counted above): "
                               "3 (12 bytes) in 2 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "  momentum buffers: 3 (12 bytes) in 2 tensors\n");
  FG_CHECK(strstr(r.out, "step counters") == NULL);
  result_free(&r);
  FG_REQUIRE(cli(&r, "inspect", tpath("sgd.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "  trainable (variables): 3 (12 bytes) in 2 tensors\n");
  FG_CHECK(strstr(r.out, "optimizer state") == NULL);
  result_free(&r);
  fgt_rmtree(tmpdir);
}
