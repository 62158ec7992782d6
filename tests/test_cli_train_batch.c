/* `flowgraph train` batch by batch: a placeholder with a fixed leading
 * dimension takes whole batches (each batch is checked, not the file; the
 * last, partial batch of an epoch is dropped, as PyTorch's drop_last does).
 * References: SGD in double (test_cli_train_util.h) and the documented
 * shuffle, computed here. */
#include "test_cli_train_util.h"

#define LR 0.1

/* linreg with placeholders x [8,2] and y [8,1] into `path`. */
static int build_fixed_linreg(const char *path) {
  fg_graph *g = linreg_graph(LR, 0, 8, NULL, NULL);
  int rc = g ? save_graph(g, path, 0) : -1;
  fg_graph_free(g);
  return rc;
}

/* SGD over the first `rows` rows of linreg_data in whole batches of
 * `batch` (the rows after the last whole batch of each epoch's order are
 * left out), from the model's initial values; epoch_loss[e] is the mean
 * of the batch losses. */
static void drop_last_reference(int rows, int batch, int epochs, int shuffle, uint64_t seed,
                                linp *p, double *epoch_loss) {
  float x[64][2], y[64];
  linreg_data(rows, x, y);
  *p = (linp){{LIN_W0, LIN_W1}, LIN_B};
  int64_t perm[64];
  for (int i = 0; i < rows; i++)
    perm[i] = i;
  uint64_t rng = seed;
  for (int e = 0; e < epochs; e++) {
    if (shuffle) ref_shuffle(perm, rows, &rng);
    double total = 0;
    for (int s = 0; s + batch <= rows; s += batch)
      total += lin_step(p, (const float(*)[2])x, y, perm + s, batch, LR);
    epoch_loss[e] = total / (rows / batch);
  }
}

static void check_saved(const char *saved, const linp *p) {
  float w[2], b[1];
  FG_CHECK_INT(saved_variable(saved, "w", w, 2), 2);
  FG_CHECK_INT(saved_variable(saved, "b", b, 1), 1);
  FG_CHECK_NEAR(w[0], p->w[0], 1e-4);
  FG_CHECK_NEAR(w[1], p->w[1], 1e-4);
  FG_CHECK_NEAR(b[0], p->b, 1e-4);
}

/* x [8,2], y [8,1] and a 40-row file: five whole batches of 8 per epoch,
 * the SGD reference's losses and variables; an eval on 8 rows of its own
 * gives the reference's mean absolute error after every epoch. */
FG_TEST(cli_train_fixed_batch_whole_batches, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_fixed_linreg(tpath("lin8.fgb")) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  FG_REQUIRE(write_linreg_data("ex.npy", "ey.npy", 8, 8) == 0);
  char xi[600], yi[600], exi[600], eyi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  snprintf(exi, sizeof exi, "x=%s", tpath("ex.npy"));
  snprintf(eyi, sizeof eyi, "y=%s", tpath("ey.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("lin8.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs",
                 "2", "--eval", "mae", "--eval-input", exi, "--eval-input", eyi, "--save",
                 tpath("t.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK(strstr(r.out, "left out") == NULL); /* 40 rows are 5 whole batches */
  FG_CHECK_STR_CONTAINS(r.out, "trained 2 epochs of 5 steps");
  float ex[8][2], ey[8];
  linreg_data(8, ex, ey);
  double got[8], mae[8];
  FG_REQUIRE(parse_epochs(r.out, got, 8, "mae", mae) == 2);
  linp p;
  double want[2];
  for (int e = 1; e <= 2; e++) {
    lin_train_reference(8, e, 0, 0, LR, &p, want);
    FG_CHECK_NEAR(got[e - 1], want[e - 1], 1e-4);
    FG_CHECK_NEAR(mae[e - 1], lin_mae(&p, (const float(*)[2])ex, ey, 8), 1e-4);
  }
  check_saved(tpath("t.fgb"), &p);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* 36 rows in fixed batches of 8: four steps per epoch, the 4 rows after
 * them (a different 4 each shuffled epoch) left out, with a note. */
FG_TEST(cli_train_fixed_batch_drops_last, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_fixed_linreg(tpath("lin8.fgb")) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", 36, 36) == 0);
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  for (int shuffle = 0; shuffle < 2; shuffle++) {
    cli_result r;
    FG_REQUIRE(cli(&r, "train", tpath("lin8.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs",
                   "3", "--save", tpath("t.fgb"), shuffle ? "--shuffle" : NULL, "7", NULL) == 0);
    CHECK_OK(r);
    FG_CHECK_STR_CONTAINS(r.out, shuffle ? "placeholder 'x' takes batches of exactly 8 rows: the "
                                           "last 4 rows of every epoch (shuffled) are left out\n"
                                         : "placeholder 'x' takes batches of exactly 8 rows: the "
                                           "last 4 rows of every epoch are left out\n");
    FG_CHECK_STR_CONTAINS(r.out, "trained 3 epochs of 4 steps");
    linp p;
    double want[3], got[8];
    drop_last_reference(36, 8, 3, shuffle, 7, &p, want);
    FG_REQUIRE(parse_epochs(r.out, got, 8, NULL, NULL) == 3);
    for (int e = 0; e < 3; e++)
      FG_CHECK_NEAR(got[e], want[e], 1e-4);
    check_saved(tpath("t.fgb"), &p);
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

/* A batch that cannot match the fixed dimension is refused before the
 * first step, naming the placeholder, its shape and what to pass. */
FG_TEST(cli_train_fixed_batch_refused, "badinput") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_fixed_linreg(tpath("lin8.fgb")) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  FG_REQUIRE(write_linreg_data("x5.npy", "y5.npy", 5, 5) == 0);
  char xi[600], yi[600], x5[600], y5[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  snprintf(x5, sizeof x5, "x=%s", tpath("x5.npy"));
  snprintf(y5, sizeof y5, "y=%s", tpath("y5.npy"));
  const char *m = tpath("lin8.fgb");
  cli_result r;
  FG_REQUIRE(cli(&r, "train", m, "-i", xi, "-i", yi, "--batch", "16", "--epochs", "1", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT",
                      "--batch 16 feeds 16 rows per step, but placeholder 'x' (f32 [8,2]) takes "
                      "exactly 8: pass --batch 8");
  FG_CHECK_INT(strlen(r.out), 0);
  result_free(&r);
  FG_REQUIRE(cli(&r, "train", m, "-i", x5, "-i", y5, "--batch", "8", "--epochs", "1", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT",
                      "has 5 rows, fewer than --batch 8, and placeholder "
                      "'x' (f32 [8,2]) takes batches of exactly 8 rows");
  result_free(&r);
  /* The evals on the training set run on all 40 rows at once. */
  FG_REQUIRE(cli(&r, "train", m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--eval",
                 "mae", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT",
                      "--eval without --eval-input runs on the whole training set (40 rows) at "
                      "once, but placeholder 'x' (f32 [8,2]) takes exactly 8 rows");
  result_free(&r);
  fgt_rmtree(tmpdir);
}
