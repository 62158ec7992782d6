/* Bad inputs to `flowgraph grad` and `flowgraph train`: unknown names,
 * integer losses, missing or mismatched feeds, out-of-range values. Each
 * gives exit 1 with one stderr line naming the culprit (or exit 2 with a
 * usage line) and writes no output file. */
#include "test_cli_train_util.h"

/* ---- grad ------------------------------------------------------------------------- */

static void grad_setup(void) {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_grad_model(tpath("m.fgb"), 0) == 0);
}

FG_TEST(cli_grad_unknown_names, "badinput") {
  grad_setup();
  cli_result r;
  FG_REQUIRE(cli(&r, "grad", tpath("m.fgb"), "--loss", "nope", "--wrt", "W", "-o", tpath("g.fgb"),
                 NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "loss 'nope'");
  result_free(&r);
  FG_REQUIRE(cli(&r, "grad", tpath("m.fgb"), "--loss", "loss", "--wrt", "W,missing", "-o",
                 tpath("g.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "'missing'");
  result_free(&r);
  FG_REQUIRE(cli(&r, "grad", tpath("m.fgb"), "--loss", "loss:3", "--wrt", "W", "-o", tpath("g.fgb"),
                 NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "loss:3");
  result_free(&r);
  FG_CHECK(!exists(tpath("g.fgb")));
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_grad_integer_tensors, "badinput") {
  grad_setup();
  cli_result r;
  FG_REQUIRE(cli(&r, "grad", tpath("m.fgb"), "--loss", "n", "--wrt", "W", "-o", tpath("g.fgb"),
                 NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "loss 'n' is i32");
  result_free(&r);
  FG_REQUIRE(cli(&r, "grad", tpath("m.fgb"), "--loss", "loss", "--wrt", "n", "-o", tpath("g.fgb"),
                 NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "'n' is i32");
  result_free(&r);
  FG_CHECK(!exists(tpath("g.fgb")));
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_grad_twice_and_repeated_wrt, "badinput") {
  grad_setup();
  cli_result r;
  FG_REQUIRE(cli(&r, "grad", tpath("m.fgb"), "--loss", "loss", "--wrt", "W,W:0", "-o",
                 tpath("g.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "twice");
  result_free(&r);
  FG_CHECK(!exists(tpath("g.fgb")));
  FG_REQUIRE(cli(&r, "grad", tpath("m.fgb"), "--loss", "loss", "--wrt", "W", "-o", tpath("g.fgb"),
                 NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  /* A second grad of the output would need a second "grad/W". */
  FG_REQUIRE(cli(&r, "grad", tpath("g.fgb"), "--loss", "loss", "--wrt", "W", "-o", tpath("g2.fgb"),
                 NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "grad/W");
  result_free(&r);
  FG_CHECK(!exists(tpath("g2.fgb")));
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_grad_usage_errors, "badinput") {
  grad_setup();
  const char *m = tpath("m.fgb"), *o = tpath("g.fgb");
  cli_result r;
  const char *cases[][8] = {
      {"grad", NULL},
      {"grad", m, "--wrt", "W", "-o", o, NULL},              /* no --loss */
      {"grad", m, "--loss", "loss", "-o", o, NULL},          /* no --wrt */
      {"grad", m, "--loss", "loss", "--wrt", "W", NULL},     /* no -o */
      {"grad", m, "--loss", "loss", "--wrt", "W,", "-o", o}, /* empty name */
      {"grad", m, "--loss", "loss", "--wrt", "W", "-o", tpath("g.txt")},
      {"grad", m, "--loss", "loss", "--wrt", "W", "--bogus", o},
      {"grad", m, "--loss", "loss", "--wrt", "W", "-o", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char **c = cases[i];
    int n = 0;
    while (n < 8 && c[n])
      n++;
    FG_REQUIRE(cli(&r, c[0], n > 1 ? c[1] : NULL, n > 2 ? c[2] : NULL, n > 3 ? c[3] : NULL,
                   n > 4 ? c[4] : NULL, n > 5 ? c[5] : NULL, n > 6 ? c[6] : NULL,
                   n > 7 ? c[7] : NULL, NULL) == 0);
    if (r.code != 2) fprintf(stderr, "case %zu\n", i);
    CHECK_USAGE_ERROR(r);
    result_free(&r);
  }
  FG_CHECK(!exists(o));
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_grad_missing_model, "badinput") {
  FG_REQUIRE(make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "grad", tpath("none.fgb"), "--loss", "loss", "--wrt", "W", "-o",
                 tpath("g.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "none.fgb");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- train ------------------------------------------------------------------------ */

static char xi[600], yi[600];

static void train_setup(void) {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_linreg(tpath("lin.fgb"), 0, 0.1) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("y.npy"));
}

/* Runs train with up to 8 extra arguments after the model and both feeds,
 * --batch 8 --epochs 1 and --save t.fgb, and checks one runtime error line. */
#define TRAIN_FAILS(code_name, needle, ...)                                                        \
  do {                                                                                             \
    cli_result r_;                                                                                 \
    FG_REQUIRE(cli(&r_, "train", __VA_ARGS__, "--save", tpath("t.fgb"), NULL) == 0);               \
    CHECK_RUNTIME_ERROR(r_, code_name, needle);                                                    \
    FG_CHECK(!exists(tpath("t.fgb")));                                                             \
    result_free(&r_);                                                                              \
  } while (0)

#define TRAIN_USAGE(...)                                                                           \
  do {                                                                                             \
    cli_result r_;                                                                                 \
    FG_REQUIRE(cli(&r_, "train", __VA_ARGS__, NULL) == 0);                                         \
    CHECK_USAGE_ERROR(r_);                                                                         \
    FG_CHECK(!exists(tpath("t.fgb")));                                                             \
    result_free(&r_);                                                                              \
  } while (0)

FG_TEST(cli_train_missing_feed, "badinput") {
  train_setup();
  TRAIN_FAILS("INVALID_ARGUMENT", "placeholder 'y'", tpath("lin.fgb"), "-i", xi, "--batch", "8",
              "--epochs", "1");
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_train_mismatched_rows, "badinput") {
  train_setup();
  FG_REQUIRE(write_linreg_data("x39.npy", "y39.npy", LIN_ROWS, 39) == 0);
  char y39[600];
  snprintf(y39, sizeof y39, "y=%s", tpath("y39.npy"));
  TRAIN_FAILS("INVALID_ARGUMENT", "different leading sizes", tpath("lin.fgb"), "-i", xi, "-i", y39,
              "--batch", "8", "--epochs", "1");
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_train_unknown_names, "badinput") {
  train_setup();
  char m[600];
  snprintf(m, sizeof m, "%s", tpath("lin.fgb"));
  TRAIN_FAILS("NOT_FOUND", "target 'nope'", m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1",
              "--target", "nope");
  TRAIN_FAILS("NOT_FOUND", "loss 'nope'", m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1",
              "--loss", "nope");
  TRAIN_FAILS("NOT_FOUND", "eval 'nope'", m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1",
              "--eval", "nope");
  TRAIN_FAILS("NOT_FOUND", "feed 'z'", m, "-i", xi, "-i", yi, "-i", "z=whatever.npy", "--batch",
              "8", "--epochs", "1");
  /* w is a variable, not a placeholder. */
  TRAIN_FAILS("NOT_FOUND", "'w'", m, "-i", xi, "-i", yi, "-i", "w=whatever.npy", "--batch", "8",
              "--epochs", "1");
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_train_bad_loss_and_eval, "badinput") {
  train_setup();
  char m[600];
  snprintf(m, sizeof m, "%s", tpath("lin.fgb"));
  /* pred is [?,1]: not a scalar loss (found when the batch is run). */
  TRAIN_FAILS("INVALID_ARGUMENT", "loss 'pred'", m, "-i", xi, "-i", yi, "--batch", "8", "--epochs",
              "1", "--loss", "pred");
  /* x is [?,2] f32: an eval must be one value. */
  TRAIN_FAILS("INVALID_ARGUMENT", "eval 'x'", m, "-i", xi, "-i", yi, "--batch", "8", "--epochs",
              "1", "--eval", "x");
  fgt_rmtree(tmpdir);
}

/* A model without training metadata (no fg_minimize) needs --target. */
FG_TEST(cli_train_no_target_metadata, "badinput") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_grad_model(tpath("m.fgb"), 0) == 0);
  int64_t xd[2] = {2, 3};
  FG_REQUIRE(write_npy_f32(tpath("x.npy"), 2, xd, &GX[0][0]) == 0);
  char in[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  TRAIN_FAILS("INVALID_ARGUMENT", "--target", tpath("m.fgb"), "-i", in, "--batch", "1", "--epochs",
              "1");
  /* An integer loss. */
  TRAIN_FAILS("INVALID_ARGUMENT", "loss 'n'", tpath("m.fgb"), "-i", in, "--batch", "1", "--epochs",
              "1", "--target", "loss", "--loss", "n");
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_train_bad_feeds, "badinput") {
  train_setup();
  char m[600];
  snprintf(m, sizeof m, "%s", tpath("lin.fgb"));
  /* y fed with x's file: [40,2] where [?,1] is wanted. */
  char yx[600];
  snprintf(yx, sizeof yx, "y=%s", tpath("x.npy"));
  TRAIN_FAILS("INVALID_ARGUMENT", "feed 'y'", m, "-i", xi, "-i", yx, "--batch", "8", "--epochs",
              "1");
  TRAIN_FAILS("NOT_FOUND", "missing.npy", m, "-i", xi, "-i", "y=/nonexistent/missing.npy",
              "--batch", "8", "--epochs", "1");
  TRAIN_FAILS("INVALID_ARGUMENT", "given twice", m, "-i", xi, "-i", yi, "-i", xi, "--batch", "8",
              "--epochs", "1");
  /* Zero rows. */
  int64_t xd[2] = {0, 2}, yd[2] = {0, 1};
  float none[1] = {0};
  FG_REQUIRE(write_npy_f32(tpath("x0.npy"), 2, xd, none) == 0);
  FG_REQUIRE(write_npy_f32(tpath("y0.npy"), 2, yd, none) == 0);
  char x0[600], y0[600];
  snprintf(x0, sizeof x0, "x=%s", tpath("x0.npy"));
  snprintf(y0, sizeof y0, "y=%s", tpath("y0.npy"));
  TRAIN_FAILS("INVALID_ARGUMENT", "no rows", m, "-i", x0, "-i", y0, "--batch", "8", "--epochs",
              "1");
  /* --eval-input that misses a placeholder the eval needs. */
  TRAIN_FAILS("INVALID_ARGUMENT", "placeholder 'y'", m, "-i", xi, "-i", yi, "--batch", "8",
              "--epochs", "1", "--eval", "mae", "--eval-input", xi);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_train_bad_save_and_threads, "badinput") {
  train_setup();
  char m[600];
  snprintf(m, sizeof m, "%s", tpath("lin.fgb"));
  cli_result r;
  FG_REQUIRE(cli(&r, "train", m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--save",
                 "/nonexistent/dir/t.fgb", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "IO_ERROR", "/nonexistent/dir");
  FG_CHECK_INT(strlen(r.out), 0); /* refused before training */
  result_free(&r);
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--threads", "-1", "--save",
              tpath("t.fgb"));
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_train_usage_errors, "badinput") {
  train_setup();
  char m[600];
  snprintf(m, sizeof m, "%s", tpath("lin.fgb"));
  char t[600];
  snprintf(t, sizeof t, "%s", tpath("t.fgb"));
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "0", "--epochs", "1", "--save", t);
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "-5", "--epochs", "1", "--save", t);
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "10000001", "--epochs", "1", "--save", t);
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8x", "--epochs", "1", "--save", t);
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "0", "--save", t);
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "10000001", "--save", t);
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "99999999999999999999");
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8", "--save", t);  /* no --epochs */
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--epochs", "1", "--save", t); /* no --batch */
  TRAIN_USAGE(m, "--batch", "8", "--epochs", "1", "--save", t);     /* no -i */
  TRAIN_USAGE(m, "-i", "xnofile", "--batch", "8", "--epochs", "1");
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--shuffle", "-1");
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--eval-input", xi);
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--save", tpath("t.txt"));
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--frobnicate");
  TRAIN_USAGE(m, "-i", xi, "-i", yi, "--batch", "8", "--epochs");
  TRAIN_USAGE("-i", xi, "--batch", "8", "--epochs", "1");
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_train_missing_model, "badinput") {
  train_setup();
  TRAIN_FAILS("NOT_FOUND", "none.fgb", tpath("none.fgb"), "-i", xi, "-i", yi, "--batch", "8",
              "--epochs", "1");
  fgt_rmtree(tmpdir);
}
