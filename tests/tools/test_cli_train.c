/* `flowgraph grad` and `flowgraph train` end to end: gradients fetched from
 * the saved file against gradients worked out by hand, training runs against
 * SGD done in double in the test, evals, JSON models, and the digits
 * classifier reaching 0.96 test accuracy. Bad inputs: test_cli_train_bad.c. */
#include "test_cli_train_util.h"

static void write_grad_x(void) {
  int64_t xd[2] = {2, 3};
  FG_CHECK(write_npy_f32(tpath("x.npy"), 2, xd, &GX[0][0]) == 0);
}

static void check_npy(const char *path, int n, const double *want, double tol) {
  fg_tensor *t = read_npy(path);
  FG_REQUIRE(t);
  FG_CHECK_INT(fg_tensor_dtype(t), FG_F32);
  FG_CHECK_INT(fg_tensor_num_elements(t), n);
  if (fg_tensor_num_elements(t) == n) {
    const float *v = fg_tensor_data(t);
    for (int i = 0; i < n; i++)
      FG_CHECK_NEAR(v[i], want[i], tol);
  }
  fg_tensor_free(t);
}

/* ---- grad ------------------------------------------------------------------------- */

static void grad_and_check(int json) {
  FG_REQUIRE(make_tmpdir());
  const char *model = json ? tpath("m.json") : tpath("m.fgb");
  const char *out = json ? tpath("g.json") : tpath("g.fgb");
  FG_REQUIRE(build_grad_model(model, json) == 0);
  write_grad_x();
  cli_result r;
  FG_REQUIRE(
      cli(&r, "grad", model, "--loss", "loss", "--wrt", "W,b", "--wrt", "x", "-o", out, NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "grad/W: f32 [3,2]");
  FG_CHECK_STR_CONTAINS(r.out, "grad/b: f32 [2]");
  FG_CHECK_STR_CONTAINS(r.out, "grad/x: f32 [?,3]");
  result_free(&r);

  char in[600], o1[600], o2[600], o3[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(o1, sizeof o1, "grad/W=%s", tpath("gw.npy"));
  snprintf(o2, sizeof o2, "grad/b=%s", tpath("gb.npy"));
  snprintf(o3, sizeof o3, "grad/x=%s", tpath("gx.npy"));
  FG_REQUIRE(cli(&r, "run", out, "-i", in, "-o", o1, "-o", o2, "-o", o3, NULL) == 0);
  CHECK_OK(r);
  double dw[3][2], db[2], dx[2][3];
  grad_model_reference(dw, db);
  /* dx = (2y) W^T, by hand as well. */
  for (int rr = 0; rr < 2; rr++)
    for (int k = 0; k < 3; k++) {
      dx[rr][k] = 0;
      for (int j = 0; j < 2; j++) {
        double y = GB[j];
        for (int m = 0; m < 3; m++)
          y += (double)GX[rr][m] * GW[m][j];
        dx[rr][k] += 2 * y * GW[k][j];
      }
    }
  check_npy(tpath("gw.npy"), 6, &dw[0][0], 1e-5);
  check_npy(tpath("gb.npy"), 2, db, 1e-5);
  check_npy(tpath("gx.npy"), 6, &dx[0][0], 1e-5);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_grad_matches_hand_gradient, "") { grad_and_check(0); }

FG_TEST(cli_grad_json_model, "") { grad_and_check(1); }

FG_TEST(cli_grad_unconnected_is_zero, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_grad_model(tpath("m.fgb"), 0) == 0);
  write_grad_x();
  cli_result r;
  FG_REQUIRE(cli(&r, "grad", tpath("m.fgb"), "--loss=loss", "--wrt=u", "--output", tpath("g.fgb"),
                 NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  char in[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("g.fgb"), "-i", in, "--fetch", "grad/u", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "grad/u: f32 [2]\n  [0, 0]\n");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- train ------------------------------------------------------------------------ */

#define LR 0.1

/* The w and b saved in `saved` are the reference's `p` (within 1e-4). */
static void check_saved_lin(const char *saved, const linp *p) {
  float w[2], b[1];
  FG_CHECK_INT(saved_variable(saved, "w", w, 2), 2);
  FG_CHECK_INT(saved_variable(saved, "b", b, 1), 1);
  FG_CHECK_NEAR(w[0], p->w[0], 1e-4);
  FG_CHECK_NEAR(w[1], p->w[1], 1e-4);
  FG_CHECK_NEAR(b[0], p->b, 1e-4);
}

/* Trains linreg.fgb (or .json) on x.npy/y.npy with extra arguments and
 * compares epoch losses and saved variables with lin_train_reference. */
static void train_and_compare(int json, const char *batch, int batch_n, const char *epochs,
                              int epochs_n, const char *shuffle_seed) {
  FG_REQUIRE(make_tmpdir());
  const char *model = json ? tpath("lin.json") : tpath("lin.fgb");
  const char *saved = json ? tpath("trained.json") : tpath("trained.fgb");
  FG_REQUIRE(build_linreg(model, json, LR) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  cli_result r;
  if (shuffle_seed)
    FG_REQUIRE(cli(&r, "train", model, "-i", xi, "-i", yi, "--batch", batch, "--epochs", epochs,
                   "--shuffle", shuffle_seed, "--save", saved, NULL) == 0);
  else
    FG_REQUIRE(cli(&r, "train", model, "-i", xi, "-i", yi, "--batch", batch, "--epochs", epochs,
                   "--save", saved, NULL) == 0);
  CHECK_OK(r);
  FG_CHECK(strchr(r.out, '\r') == NULL); /* no progress redraws outside a terminal */
  linp p;
  double want[64], got[64];
  lin_train_reference(batch_n, epochs_n, shuffle_seed != NULL,
                      shuffle_seed ? strtoull(shuffle_seed, NULL, 10) : 0, LR, &p, want);
  FG_CHECK_INT(parse_epochs(r.out, got, 64, NULL, NULL), epochs_n);
  for (int e = 0; e < epochs_n; e++)
    FG_CHECK_NEAR(got[e], want[e], 1e-4);
  char line[64];
  snprintf(line, sizeof line, "epoch %d/%d  loss ", epochs_n, epochs_n);
  FG_CHECK_STR_CONTAINS(r.out, line);
  check_saved_lin(saved, &p);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* 40 rows in batches of 16: steps of 16, 16 and 8 rows. */
FG_TEST(cli_train_sgd_matches_reference, "") { train_and_compare(0, "16", 16, "2", 2, NULL); }

FG_TEST(cli_train_shuffle_matches_reference, "") { train_and_compare(0, "16", 16, "3", 3, "5"); }

FG_TEST(cli_train_batch_above_rows, "") { train_and_compare(0, "1000", LIN_ROWS, "2", 2, NULL); }

FG_TEST(cli_train_json_model, "") { train_and_compare(1, "8", 8, "2", 2, "1"); }

FG_TEST(cli_train_lowers_loss, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_linreg(tpath("lin.fgb"), 0, LR) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs",
                 "40", "--shuffle", "3", "--save", tpath("t.fgb"), "--threads", "2", NULL) == 0);
  CHECK_OK(r);
  double loss[64];
  FG_REQUIRE(parse_epochs(r.out, loss, 64, NULL, NULL) == 40);
  FG_CHECK(loss[9] < loss[0]);
  FG_CHECK(loss[39] < loss[0] * 1e-3);
  FG_CHECK_STR_CONTAINS(r.out, "wrote ");
  /* The data is exactly y = 2 x0 - 3 x1 + 0.5: the trained variables are
   * near that, far from where they started. */
  float w[2], b[1];
  FG_CHECK_INT(saved_variable(tpath("t.fgb"), "w", w, 2), 2);
  FG_CHECK_INT(saved_variable(tpath("t.fgb"), "b", b, 1), 1);
  FG_CHECK(fabs(w[0] - 2.0) < 0.02 && fabs(w[1] + 3.0) < 0.02 && fabs(b[0] - 0.5) < 0.02);
  /* The input model is untouched. */
  FG_CHECK_INT(saved_variable(tpath("lin.fgb"), "w", w, 2), 2);
  FG_CHECK_NEAR(w[0], LIN_W0, 0);
  FG_CHECK_NEAR(w[1], LIN_W1, 0);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* --eval on the training set (default) and on --eval-input data, checked
 * against the reference model's mean absolute error after each epoch. */
FG_TEST(cli_train_eval, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_linreg(tpath("lin.fgb"), 0, LR) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  /* Eval data: 12 rows of a different grid. */
  float ex[12][2], ey[12];
  for (int i = 0; i < 12; i++) {
    ex[i][0] = 0.1f * (float)i - 0.5f;
    ex[i][1] = 0.3f - 0.05f * (float)i;
    ey[i] = 2.0f * ex[i][0] - 3.0f * ex[i][1] + 0.5f;
  }
  int64_t exd[2] = {12, 2}, eyd[2] = {12, 1};
  FG_REQUIRE(write_npy_f32(tpath("ex.npy"), 2, exd, &ex[0][0]) == 0);
  FG_REQUIRE(write_npy_f32(tpath("ey.npy"), 2, eyd, ey) == 0);
  char xi[600], yi[600], exi[600], eyi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  snprintf(exi, sizeof exi, "x=%s", tpath("ex.npy"));
  snprintf(eyi, sizeof eyi, "y=%s", tpath("ey.npy"));
  float x[LIN_ROWS][2], y[LIN_ROWS];
  linreg_data(LIN_ROWS, x, y);
  for (int own = 0; own < 2; own++) {
    cli_result r;
    if (own)
      FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "10", "--epochs",
                     "3", "--eval", "mae", "--eval-input", exi, "--eval-input", eyi, NULL) == 0);
    else
      FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "10", "--epochs",
                     "3", "--eval", "mae", NULL) == 0);
    CHECK_OK(r);
    double loss[8], mae[8], want_loss[8];
    FG_REQUIRE(parse_epochs(r.out, loss, 8, "mae", mae) == 3);
    for (int e = 1; e <= 3; e++) {
      linp p;
      lin_train_reference(10, e, 0, 0, LR, &p, want_loss);
      double want = own ? lin_mae(&p, (const float(*)[2])ex, ey, 12)
                        : lin_mae(&p, (const float(*)[2])x, y, LIN_ROWS);
      FG_CHECK_NEAR(mae[e - 1], want, 1e-4);
      FG_CHECK_NEAR(loss[e - 1], want_loss[e - 1], 1e-4);
    }
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

/* --target and --loss given explicitly (the names the metadata records);
 * --quiet prints nothing. */
FG_TEST(cli_train_explicit_names_quiet, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_linreg(tpath("lin.fgb"), 0, LR) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(tpath("lin.fgb"), st);
  FG_REQUIRE(g);
  char target[256];
  const char *meta = fg_graph_metadata(g, "train_target");
  FG_REQUIRE(meta);
  FG_CHECK(fg_graph_metadata(g, "loss") && strcmp(fg_graph_metadata(g, "loss"), "loss") == 0);
  snprintf(target, sizeof target, "%s", meta);
  fg_graph_free(g);
  fg_status_free(st);
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "--target", target, "--loss", "loss", "-i", xi,
                 "-i", yi, "--batch=40", "--epochs=1", "--quiet", "--save", tpath("t.fgb"),
                 NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_INT(strlen(r.out), 0);
  /* One full-batch step: w = w0 - lr * dL/dw, by hand. */
  linp p;
  double want[1];
  lin_train_reference(LIN_ROWS, 1, 0, 0, LR, &p, want);
  float w[2];
  FG_CHECK_INT(saved_variable(tpath("t.fgb"), "w", w, 2), 2);
  FG_CHECK_NEAR(w[0], p.w[0], 1e-5);
  FG_CHECK_NEAR(w[1], p.w[1], 1e-5);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* Renaming fg_minimize's target and the loss after fg_minimize recorded
 * them: the metadata follows the nodes (C API), keeps doing so through .fgb
 * and JSON save and load, and `flowgraph train` then trains with its
 * defaults exactly as with the original names (the SGD reference). */
FG_TEST(cli_train_renamed_target_and_loss, "") {
  FG_REQUIRE(make_tmpdir());
  fg_output loss, target;
  fg_graph *g = linreg_graph(LR, 0, FG_DIM_UNKNOWN, &loss, &target);
  FG_REQUIRE(g);
  FG_REQUIRE(fg_set_name(g, target, "sgd_step").node == target.node);
  FG_REQUIRE(fg_set_name(g, loss, "mse").node == loss.node);
  FG_CHECK_STR(fg_graph_metadata(g, "train_target"), "sgd_step");
  FG_CHECK_STR(fg_graph_metadata(g, "loss"), "mse");
  /* Other metadata is free-form: a "loss"-like value elsewhere stays. */
  FG_REQUIRE(fg_graph_set_metadata(g, "description", "mse") == 0);
  FG_REQUIRE(fg_set_name(g, loss, "sq_err").node == loss.node);
  FG_CHECK_STR(fg_graph_metadata(g, "loss"), "sq_err");
  FG_CHECK_STR(fg_graph_metadata(g, "description"), "mse");
  /* "node:index" follows too; a name the old one is a prefix of does not. */
  int pred = fg_graph_find(g, "pred");
  FG_REQUIRE(pred >= 0);
  FG_REQUIRE(fg_graph_set_metadata(g, "loss", "pred:0") == 0);
  FG_REQUIRE(fg_set_name(g, (fg_output){pred, 0}, "prediction").node == pred);
  FG_CHECK_STR(fg_graph_metadata(g, "loss"), "prediction:0");
  FG_REQUIRE(fg_graph_set_metadata(g, "loss", "predictions") == 0);
  FG_REQUIRE(fg_set_name(g, (fg_output){pred, 0}, "p").node == pred);
  FG_CHECK_STR(fg_graph_metadata(g, "loss"), "predictions");
  FG_REQUIRE(fg_graph_set_metadata(g, "loss", "sq_err") == 0);
  FG_REQUIRE(fg_set_name(g, loss, "mse").node == loss.node);
  FG_REQUIRE(save_graph(g, tpath("lin.fgb"), 0) == 0);
  FG_REQUIRE(save_graph(g, tpath("lin.json"), 1) == 0);
  fg_graph_free(g);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  linp p;
  double want[2], got[8];
  lin_train_reference(16, 2, 0, 0, LR, &p, want);
  for (int json = 0; json < 2; json++) {
    const char *model = json ? tpath("lin.json") : tpath("lin.fgb");
    fg_status *st = fg_status_new();
    fg_graph *lg = json ? fg_graph_load_json(model, st) : fg_graph_load(model, st);
    FG_REQUIRE(lg);
    FG_CHECK_STR(fg_graph_metadata(lg, "train_target"), "sgd_step");
    FG_CHECK_STR(fg_graph_metadata(lg, "loss"), "mse");
    fg_graph_free(lg);
    fg_status_free(st);
    cli_result r;
    FG_REQUIRE(cli(&r, "train", model, "-i", xi, "-i", yi, "--batch", "16", "--epochs", "2",
                   "--save", tpath("t.fgb"), NULL) == 0);
    CHECK_OK(r);
    FG_CHECK_STR_CONTAINS(r.out, "target 'sgd_step', loss 'mse'");
    FG_CHECK_INT(parse_epochs(r.out, got, 8, NULL, NULL), 2);
    for (int e = 0; e < 2; e++)
      FG_CHECK_NEAR(got[e], want[e], 1e-4);
    check_saved_lin(tpath("t.fgb"), &p);
    result_free(&r);
  }
  fgt_rmtree(tmpdir);
}

/* ---- the digits classifier (the main job of `make demo`) ------------------------- */

/* The demo's settings (tools/demo.sh): batch 64, 15 epochs, --shuffle 1. */
FG_TEST(train_digits_reaches_096, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder(tpath("digits.fgb")) == 0);
  double before = digits_accuracy(tpath("digits.fgb"));
  FG_CHECK(before >= 0 && before < 0.5); /* untrained: about chance */
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("digits.fgb"), "-i", "x=" DIGITS_DATA "/train_x.npy", "-i",
                 "y=" DIGITS_DATA "/train_y.npy", "--batch", "64", "--epochs", "15", "--shuffle",
                 "1", "--eval", "accuracy", "--eval-input", "x=" DIGITS_DATA "/test_x.npy",
                 "--eval-input", "y=" DIGITS_DATA "/test_y.npy", "--save", tpath("trained.fgb"),
                 NULL) == 0);
  CHECK_OK(r);
  double loss[32], acc[32];
  FG_REQUIRE(parse_epochs(r.out, loss, 32, "accuracy", acc) == 15);
  printf("digits: loss %.4f -> %.4f, test accuracy %.4f\n", loss[0], loss[14], acc[14]);
  FG_CHECK(loss[14] < loss[0]);
  FG_CHECK(loss[14] < 0.2);
  double after = digits_accuracy(tpath("trained.fgb"));
  FG_CHECK(after >= 0.96);
  /* The saved file holds the trained variables: same accuracy as the last
   * epoch's eval. */
  FG_CHECK_NEAR(after, acc[14], 1e-5);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* --micro-batches: each step's batch cut into micro-batches whose
 * gradients are combined by rows is still the step on the whole batch: the
 * hand-computed SGD reference (16-row steps as 6 + 5 + 5, the last 8 rows
 * as 3 + 3 + 2). `sum`: a loss summed over rows, with --dist-loss sum. */
static void micro_and_compare(const char *micro, int sum, const char *in_flight) {
  FG_REQUIRE(make_tmpdir());
  const char *model = tpath("lin.fgb"), *saved = tpath("trained.fgb");
  FG_REQUIRE(build_linreg_loss(model, 0, LR, sum) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  cli_result r;
  /* in_flight NULL: the option is left out (cli() stops at the NULL). */
  FG_REQUIRE(cli(&r, "train", model, "-i", xi, "-i", yi, "--batch", "16", "--epochs", "2",
                 "--micro-batches", micro, "--dist-loss", sum ? "sum" : "mean", "--save", saved,
                 in_flight ? "--in-flight" : NULL, in_flight, NULL) == 0);
  CHECK_OK(r);
  char says[64];
  snprintf(says, sizeof says, ", %s micro-batches per step\n", micro);
  FG_CHECK_STR_CONTAINS(r.out, says);
  linp p;
  double want[2], got[8];
  lin_train_reference_loss(16, 2, 0, 0, LR, sum, &p, want);
  FG_CHECK_INT(parse_epochs(r.out, got, 8, NULL, NULL), 2);
  for (int e = 0; e < 2; e++)
    FG_CHECK_NEAR(got[e], want[e], 1e-4 * fmax(1.0, fabs(want[e])));
  check_saved_lin(saved, &p);
  /* It trained: w moved from its start. */
  FG_CHECK(fabs(p.w[0] - LIN_W0) > 1e-3);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_train_micro_batches_match_reference, "dist") { micro_and_compare("3", 0, NULL); }
FG_TEST(cli_train_micro_batches_loss_sum, "dist") { micro_and_compare("4", 1, NULL); }
/* --in-flight: one micro-batch at a time, or all at once; the same step. */
FG_TEST(cli_train_micro_batches_in_flight, "dist") {
  micro_and_compare("3", 0, "1");
  micro_and_compare("3", 0, "all");
}

FG_TEST(cli_train_micro_batches_bad_args, "dist,badinput") {
  FG_REQUIRE(make_tmpdir());
  const char *model = tpath("lin.fgb");
  FG_REQUIRE(build_linreg(model, 0, LR) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
  static const char *const bad[3] = {"0", "1025", "two"};
  cli_result r;
  for (int k = 0; k < 3; k++) {
    cli(&r, "train", model, "-i", xi, "-i", yi, "--batch", "16", "--epochs", "1", "--micro-batches",
        bad[k], NULL);
    FG_CHECK_INT(r.code, 2);
    FG_CHECK_STR_CONTAINS(r.err, "--micro-batches");
    result_free(&r);
  }
  static const char *const bad_in_flight[3] = {"0", "1025", "many"};
  for (int k = 0; k < 3; k++) {
    cli(&r, "train", model, "-i", xi, "-i", yi, "--batch", "16", "--epochs", "1", "--micro-batches",
        "3", "--in-flight", bad_in_flight[k], NULL);
    FG_CHECK_INT(r.code, 2);
    FG_CHECK_STR_CONTAINS(r.err, "--in-flight needs an integer from 1 to 1024, or all");
    result_free(&r);
  }
  cli(&r, "train", model, "-i", xi, "-i", yi, "--batch", "16", "--epochs", "1", "--in-flight", "2",
      NULL);
  FG_CHECK_INT(r.code, 2);
  FG_CHECK_STR_CONTAINS(r.err, "--in-flight needs --micro-batches");
  result_free(&r);
  cli(&r, "train", model, "-i", xi, "-i", yi, "--batch", "16", "--epochs", "1", "--dist-loss",
      "sum", NULL);
  FG_CHECK_INT(r.code, 2);
  FG_CHECK_STR_CONTAINS(r.err, "--dist-loss needs --dist mpi or --micro-batches");
  result_free(&r);
  /* 2-row batches cannot feed 3 micro-batches; nor can the last 8 rows of
   * 16-row batches feed 9. Refused before the first step. */
  cli(&r, "train", model, "-i", xi, "-i", yi, "--batch", "2", "--epochs", "1", "--micro-batches",
      "3", NULL);
  FG_CHECK(r.code != 0);
  FG_CHECK_STR_CONTAINS(r.err, "--micro-batches 3: a batch of 2 rows gives 2 rows, fewer than the "
                               "micro-batches (40 rows in all)");
  FG_CHECK(strstr(r.out, "epoch 1/1") == NULL);
  result_free(&r);
  cli(&r, "train", model, "-i", xi, "-i", yi, "--batch", "16", "--epochs", "1", "--micro-batches",
      "9", NULL);
  FG_CHECK(r.code != 0);
  FG_CHECK_STR_CONTAINS(r.err, "a batch of 8 rows (the last batch) gives 8 rows");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- dropout and initialisers ------------------------------------------------------- */

/* `flowgraph train` on a model with dropout and an initialised weight:
 * every step is a training run (the flag is true without a feed), so the
 * saved file counts 8 training steps (16 rows, batch 4, 2 epochs), holds
 * the trained weight and keeps its initialiser's attributes. */
FG_TEST(cli_train_dropout_counts_training_steps, "") {
  FG_REQUIRE(make_tmpdir());
  fg_graph *g = fg_graph_new();
  const int64_t dx[2] = {-1, 4}, dy[2] = {-1, 1}, dw[2] = {4, 1};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, dx);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, dy);
  const fg_init xi = {FG_INIT_XAVIER_UNIFORM, 0, 0, 0, 4};
  fg_output w = fg_variable_init(g, "w", FG_F32, 2, dw, &xi);
  fg_output pred = fg_matmul(g, fg_dropout(g, x, fg_training(g), 0.5, 1), w, 0, 0);
  fg_output err = fg_sub(g, pred, y);
  fg_output loss = fg_set_name(g, fg_reduce_mean(g, fg_mul(g, err, err), NULL, 0, 0), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  fg_status *st = fg_status_new();
  fg_minimize(g, loss, NULL, 0, &cfg, st);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  FG_REQUIRE(fg_graph_save(g, tpath("d.fgb"), st) == 0);
  float xv[64], yv[16];
  for (int i = 0; i < 64; i++)
    xv[i] = (float)(i % 7) * 0.25f - 0.5f;
  for (int i = 0; i < 16; i++)
    yv[i] = (float)(i % 3);
  const int64_t nx[2] = {16, 4}, ny[2] = {16, 1};
  FG_REQUIRE(write_npy_f32(tpath("x.npy"), 2, nx, xv) == 0);
  FG_REQUIRE(write_npy_f32(tpath("y.npy"), 2, ny, yv) == 0);
  char xi_[600], yi_[600];
  snprintf(xi_, sizeof xi_, "x=%s", tpath("x.npy"));
  snprintf(yi_, sizeof yi_, "y=%s", tpath("y.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("d.fgb"), "-i", xi_, "-i", yi_, "--batch", "4", "--epochs", "2",
                 "--save", tpath("t.fgb"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  fg_graph *t = fg_graph_load(tpath("t.fgb"), st);
  FG_REQUIRE(t != NULL);
  FG_REQUIRE(fg_graph_metadata(t, "training_steps") != NULL);
  FG_CHECK(strcmp(fg_graph_metadata(t, "training_steps"), "8") == 0);
  const fg_tensor *v = NULL;
  const int id = fg_graph_find(t, "w");
  FG_CHECK(fg_node_attr_tensor(t, id, "value", &v) == 0 && v != NULL);
  int64_t kind = -1;
  FG_CHECK(fg_node_attr_int(t, id, "init", &kind) == 0 && kind == FG_INIT_XAVIER_UNIFORM);
  fg_graph_free(t);
  fg_graph_free(g);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}
