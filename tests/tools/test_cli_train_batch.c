/* `flowgraph train` batch by batch: a placeholder with a fixed leading
 * dimension takes whole batches (each batch is checked, not the file; the
 * last, partial batch of an epoch is dropped, as PyTorch's drop_last does),
 * and an error in a step names the epoch, the step and the row of the -i
 * files that caused it, whatever the shuffle. References: SGD in double
 * (test_cli_train_util.h) and the documented shuffle, computed here. */
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

/* ---- where an error in the data is -------------------------------------------- */

#define CLS_ROWS 20
#define BAD_ROW  13

/* logits = x W (x [B,2], W [2,3]), loss = softmax_cross_entropy(logits, y)
 * with y i32 [B] labels in [0, 3), SGD; B is `batch` (or FG_DIM_UNKNOWN). */
static int build_classifier(const char *path, int64_t batch) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {batch, 2}, yd[1] = {batch}, wd[2] = {2, 3};
  float w0[6] = {0.1f, -0.2f, 0.3f, 0.4f, 0.0f, -0.1f};
  fg_tensor *w = tensor_f32(2, wd, w0);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  fg_output logits = fg_matmul(g, x, fg_variable(g, "W", w), 0, 0);
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, y), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  fg_status *st = fg_status_new();
  int rc = fg_minimize(g, loss, NULL, 0, &cfg, st).node >= 0 ? save_graph(g, path, 0) : -1;
  if (rc != 0) fprintf(stderr, "build_classifier: %s\n", fg_status_message(st));
  fg_status_free(st);
  fg_tensor_free(w);
  fg_graph_free(g);
  return rc;
}

/* x.npy [20,2] and y.npy [20] with labels i % 3, except `bad_label` at
 * row BAD_ROW (a valid label when it is in [0, 3)). */
static int write_classifier_data(const char *xname, const char *yname, int32_t bad_label) {
  float x[CLS_ROWS][2];
  int32_t y[CLS_ROWS];
  for (int i = 0; i < CLS_ROWS; i++) {
    x[i][0] = (float)(i % 5) / 4.0f;
    x[i][1] = (float)(i % 4) / 3.0f - 0.5f;
    y[i] = i % 3;
  }
  y[BAD_ROW] = bad_label;
  int64_t xd[2] = {CLS_ROWS, 2}, yd[1] = {CLS_ROWS};
  fg_status *st = fg_status_new();
  fg_tensor *yt = fg_tensor_from_data(FG_I32, 1, yd, y, sizeof y, st);
  int rc = yt && write_npy_f32(tpath(xname), 2, xd, &x[0][0]) == 0
               ? fg_npy_write(tpath(yname), yt, st)
               : -1;
  fg_tensor_free(yt);
  fg_status_free(st);
  return rc;
}

/* Label 42 at row 13 of 20, batches of 8: in file order, step 2 of 3 holds
 * rows 8..15, so row 13 is its row 5; shuffled (seed 5), the documented
 * order of the first epoch says where row 13 went. The error names the
 * epoch, the step and row 13, and keeps the kernel's own message. */
FG_TEST(cli_train_bad_label_names_row, "badinput") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_classifier(tpath("cls.fgb"), FG_DIM_UNKNOWN) == 0);
  FG_REQUIRE(write_classifier_data("x.npy", "y.npy", 42) == 0);
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  int64_t perm[CLS_ROWS];
  uint64_t rng = 5;
  ref_shuffle(perm, CLS_ROWS, &rng);
  int pos = -1;
  for (int i = 0; i < CLS_ROWS; i++)
    if (perm[i] == BAD_ROW) pos = i;
  FG_REQUIRE(pos >= 0);
  for (int shuffle = 0; shuffle < 2; shuffle++) {
    int at = shuffle ? pos : BAD_ROW; /* row 13's place in the epoch's order */
    char where[200], kernel[100];
    snprintf(where, sizeof where,
             "epoch 1/2, step %d/3: row %d of the -i files (counting from 0; row %d of the%s "
             "batch): ",
             at / 8 + 1, BAD_ROW, at % 8, shuffle ? " shuffled" : "");
    snprintf(kernel, sizeof kernel, "labels[%d] = 42 is out of range [0, 3)", at % 8);
    cli_result r;
    FG_REQUIRE(cli(&r, "train", tpath("cls.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs",
                   "2", "--save", tpath("t.fgb"), shuffle ? "--shuffle" : NULL, "5", NULL) == 0);
    CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", where);
    FG_CHECK_STR_CONTAINS(r.err, kernel);
    FG_CHECK(!exists(tpath("t.fgb")));
    result_free(&r);
  }
  /* In the eval data (fed whole, after an epoch): which eval run failed. */
  FG_REQUIRE(write_classifier_data("gx.npy", "gy.npy", 1) == 0);
  char gx[600], gy[600];
  snprintf(gx, sizeof gx, "x=%s", tpath("gx.npy"));
  snprintf(gy, sizeof gy, "y=%s", tpath("gy.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("cls.fgb"), "-i", gx, "-i", gy, "--batch", "8", "--epochs", "2",
                 "--eval", "loss", "--eval-input", xi, "--eval-input", yi, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "evals after epoch 1/2: ");
  FG_CHECK_STR_CONTAINS(r.err, "labels[13] = 42 is out of range [0, 3)");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* With a fixed batch dimension no part of a batch can be run alone, so the
 * error names the step's rows of the -i files instead: 8..15 in file order,
 * and the shuffled epoch's rows 8..15 (where row 13 went, seed 5) as the
 * documented shuffle puts them. */
FG_TEST(cli_train_bad_label_fixed_batch_names_rows, "badinput") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_classifier(tpath("cls8.fgb"), 8) == 0);
  FG_REQUIRE(write_classifier_data("x.npy", "y.npy", 42) == 0);
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  int64_t perm[CLS_ROWS];
  uint64_t rng = 5;
  ref_shuffle(perm, CLS_ROWS, &rng);
  int pos = -1;
  for (int i = 0; i < CLS_ROWS; i++)
    if (perm[i] == BAD_ROW) pos = i;
  /* In the second batch: the last 4 rows, which are dropped, would not fail. */
  FG_REQUIRE(pos >= 8 && pos < 16);
  for (int shuffle = 0; shuffle < 2; shuffle++) {
    char where[300], kernel[100];
    if (shuffle) {
      int n = snprintf(where, sizeof where, "epoch 1/1, step 2/2 (rows");
      for (int r = 8; r < 16; r++)
        n += snprintf(where + n, sizeof where - (size_t)n, "%s %d", r > 8 ? "," : "", (int)perm[r]);
      snprintf(where + n, sizeof where - (size_t)n, " of the -i files, counting from 0): ");
    } else {
      snprintf(where, sizeof where,
               "epoch 1/1, step 2/2 (rows 8..15 of the -i files, counting "
               "from 0): ");
    }
    snprintf(kernel, sizeof kernel, "labels[%d] = 42 is out of range [0, 3)",
             (shuffle ? pos : BAD_ROW) - 8);
    cli_result r;
    FG_REQUIRE(cli(&r, "train", tpath("cls8.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs",
                   "1", shuffle ? "--shuffle" : NULL, "5", NULL) == 0);
    CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", where);
    FG_CHECK_STR_CONTAINS(r.err, kernel);
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}
