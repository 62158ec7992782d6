/* `flowgraph train` on a model with batch_norm: the train target that
 * fg_minimize records also runs the running-statistics update, so after
 * two epochs of one full batch each the saved running mean and variance are
 * PyTorch's rule applied twice to the batch's mean and unbiased variance,
 * worked out here in double. */
#include "test_cli_train_util.h"

#define BN_ROWS 10

static void bn_data(float (*x)[3]) {
  for (int r = 0; r < BN_ROWS; r++)
    for (int c = 0; c < 3; c++)
      x[r][c] = (float)((r * 7 + c * 3) % 11) * (0.5f + (float)c) - 2.0f * (float)c;
}

static int build_bn_model(const char *path) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t xd[2] = {FG_DIM_UNKNOWN, 3}, c = 3;
  const float zeros[3] = {0, 0, 0}, ones[3] = {1, 1, 1}, rm0[3] = {0.5f, -1, 2};
  const char *names[4] = {"w", "b", "rm", "rv"};
  const float *init[4] = {ones, zeros, rm0, ones};
  fg_output v[4];
  for (int i = 0; i < 4; i++) {
    fg_tensor *t = fg_tensor_from_data(FG_F32, 1, &c, init[i], sizeof ones, st);
    v[i] = fg_variable(g, names[i], t);
    fg_tensor_free(t);
  }
  fg_tensor *on = fg_tensor_new(FG_BOOL, 0, NULL, st);
  *(uint8_t *)fg_tensor_data(on) = 1;
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y =
      fg_batch_norm(g, x, v[0], v[1], v[2], v[3], fg_constant(g, "training", on), 0.1, 1e-5);
  fg_output d = fg_sub(g, y, fg_scalar(g, FG_F32, 0.5));
  fg_set_name(g, fg_reduce_mean(g, fg_mul(g, d, d), NULL, 0, 0), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  fg_output loss = {fg_graph_find(g, "loss"), 0};
  int rc = fg_minimize(g, loss, NULL, 0, &cfg, st).node >= 0 ? save_graph(g, path, 0) : -1;
  if (rc != 0) fprintf(stderr, "build: %s\n", fg_status_message(st));
  fg_tensor_free(on);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

FG_TEST(cli_train_updates_batch_norm_running_stats, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_bn_model(tpath("bn.fgb")) == 0);
  float x[BN_ROWS][3];
  bn_data(x);
  const int64_t xd[2] = {BN_ROWS, 3};
  FG_REQUIRE(write_npy_f32(tpath("x.npy"), 2, xd, &x[0][0]) == 0);
  char xi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("bn.fgb"), "-i", xi, "--batch", "10", "--epochs", "2", "--save",
                 tpath("trained.fgb"), NULL) == 0);
  CHECK_OK(r);
  float rm[3], rv[3];
  FG_REQUIRE(saved_variable(tpath("trained.fgb"), "rm", rm, 3) == 3);
  FG_REQUIRE(saved_variable(tpath("trained.fgb"), "rv", rv, 3) == 3);
  const double rm0[3] = {0.5, -1, 2};
  for (int c = 0; c < 3; c++) {
    double mean = 0, ss = 0;
    for (int k = 0; k < BN_ROWS; k++)
      mean += x[k][c] / (double)BN_ROWS;
    for (int k = 0; k < BN_ROWS; k++)
      ss += (x[k][c] - mean) * (x[k][c] - mean);
    const double var = ss / (BN_ROWS - 1);
    double m = rm0[c], v = 1;
    for (int step = 0; step < 2; step++) {
      m = 0.9 * m + 0.1 * mean;
      v = 0.9 * v + 0.1 * var;
    }
    FG_CHECK_NEAR(rm[c], m, 1e-5);
    FG_CHECK_NEAR(rv[c], v, 1e-5);
  }
  result_free(&r);
  fgt_rmtree(tmpdir);
}
