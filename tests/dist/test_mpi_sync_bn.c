/* `mpirun -np 2 flowgraph train ... --dist mpi --dist-sync-bn` on a model
 * with batch norm (label dist): the statistics are the whole batch's, so
 * the trained variables and running statistics are those of one process
 * training on the full batches (within 1e-5 relative in f32), also when a
 * batch splits unevenly over the ranks. Without --dist-sync-bn each rank
 * normalises its own shard, as PyTorch DDP does, and the results differ. */
#include "mpi/mpi_lin.h"

/* pred = relu(bn(x w1)) w2 + b over the linear-regression data, with
 * batch norm over 4 features in training mode (fg_training), SGD. */
static int build_bn_model(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 2}, yd[2] = {FG_DIM_UNKNOWN, 1};
  int64_t w1d[2] = {2, 4}, w2d[2] = {4, 1}, cd[1] = {4}, bd[1] = {1};
  float w1[8] = {0.5f, -0.25f, 0.75f, 0.1f, -0.4f, 0.3f, 0.2f, -0.6f};
  float w2[4] = {0.3f, -0.2f, 0.5f, 0.1f}, b0[1] = {0.0f};
  float ones[4] = {1, 1, 1, 1}, zeros[4] = {0, 0, 0, 0};
  fg_tensor *t[7] = {tensor_f32(2, w1d, w1),  tensor_f32(2, w2d, w2),   tensor_f32(1, bd, b0),
                     tensor_f32(1, cd, ones), tensor_f32(1, cd, zeros), tensor_f32(1, cd, zeros),
                     tensor_f32(1, cd, ones)};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, yd);
  fg_output h = fg_matmul(g, x, fg_variable(g, "w1", t[0]), 0, 0);
  h = fg_batch_norm(g, h, fg_variable(g, "scale", t[3]), fg_variable(g, "shift", t[4]),
                    fg_variable(g, "running_mean", t[5]), fg_variable(g, "running_var", t[6]),
                    fg_training(g), 0.1, 1e-5);
  fg_output pred = fg_add(g, fg_matmul(g, fg_relu(g, h), fg_variable(g, "w2", t[1]), 0, 0),
                          fg_variable(g, "b", t[2]));
  fg_output d = fg_sub(g, pred, y);
  fg_output loss = fg_set_name(g, fg_reduce_mean(g, fg_mul(g, d, d), NULL, 0, 0), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = LR;
  fg_status *st = fg_status_new();
  int rc = fg_minimize(g, loss, NULL, 0, &cfg, st).node < 0 ? -1 : save_graph(g, path, 0);
  if (rc != 0) fprintf(stderr, "build_bn_model: %s\n", fg_status_message(st));
  fg_status_free(st);
  for (int i = 0; i < 7; i++)
    fg_tensor_free(t[i]);
  fg_graph_free(g);
  return rc;
}

static const char *const vars[] = {"w1",    "w2",           "b",          "scale",
                                   "shift", "running_mean", "running_var"};
static const int sizes[] = {8, 4, 1, 4, 4, 4, 4};
#define N_VARS 7

/* The largest relative difference between the variables of two saved
 * models (files of the test's folder); -1 when one cannot be read. */
static double max_var_diff(const char *a, const char *b) {
  double worst = 0;
  for (int v = 0; v < N_VARS; v++) {
    float va[8], vb[8];
    if (saved_variable(tpath(a), vars[v], va, 8) != sizes[v] ||
        saved_variable(tpath(b), vars[v], vb, 8) != sizes[v])
      return -1;
    for (int i = 0; i < sizes[v]; i++) {
      double e = rel_err(va[i], vb[i]);
      if (e > worst) worst = e;
    }
  }
  return worst;
}

/* One process and 2 ranks (with and without --dist-sync-bn) train bn.fgb
 * for 3 epochs of `batch`. */
static void check_sync_bn(const char *batch) {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  FG_REQUIRE(build_bn_model(tpath("bn.fgb")) == 0);
  char xi[700], yi[700], m[700];
  lin_inputs(xi, yi);
  snprintf(m, sizeof m, "%s", tpath("bn.fgb"));
  cli_result r;
  cli(&r, "train", m, "-i", xi, "-i", yi, "--batch", batch, "--epochs", "3", "--save",
      tpath("single.fgb"), NULL);
  FG_CHECK_INT(r.code, 0);
  run_result *res = malloc(sizeof *res);
  const char *sync[] = {"--dist-sync-bn", NULL};
  mpi_train_at(NULL, 0, 2, "bn.fgb", batch, sync, "sync.fgb", res);
  FG_CHECK_INT(res->status, 0);
  double e = max_var_diff("sync.fgb", "single.fgb");
  if (!(e >= 0 && e < 1e-5))
    FG_FAIL_AT("--dist-sync-bn: variables differ from one process's by %g (tolerance 1e-5)\n%s", e,
               res->out);
  mpi_train_at(NULL, 0, 2, "bn.fgb", batch, NULL, "ddp.fgb", res);
  FG_CHECK_INT(res->status, 0);
  e = max_var_diff("ddp.fgb", "single.fgb");
  /* Per-rank statistics normalise each half with its own mean: a
   * different model after 15 steps. */
  if (!(e > 1e-3)) FG_FAIL_AT("without --dist-sync-bn the variables differ by only %g", e);
  result_free(&r);
  free(res);
  fgt_rmtree(tmpdir);
}

FG_TEST(mpi_train_sync_bn_np2_matches_single, "dist") { check_sync_bn("8"); }

/* 7 rows per batch: shards of 4 and 3 (and 3 and 2 for the last batch of
 * 5), whose statistics are weighted by rows. */
FG_TEST(mpi_train_sync_bn_np2_uneven_matches_single, "dist") { check_sync_bn("7"); }

/* Without --dist mpi there are no ranks to synchronise with: a usage error
 * (exit 2) that says so. */
FG_TEST(train_sync_bn_without_dist_refused, "badinput") {
  FG_REQUIRE(setup_linreg() == 0);
  FG_REQUIRE(build_bn_model(tpath("bn.fgb")) == 0);
  char xi[700], yi[700], m[700];
  lin_inputs(xi, yi);
  snprintf(m, sizeof m, "%s", tpath("bn.fgb"));
  cli_result r;
  cli(&r, "train", m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--dist-sync-bn", NULL);
  FG_CHECK_INT(r.code, 2);
  FG_CHECK_STR_CONTAINS(r.err, "--dist-sync-bn needs --dist mpi");
  result_free(&r);
  fgt_rmtree(tmpdir);
}
