/* `flowgraph train --optimizer ... --lr-schedule / --warmup` and `--seed`:
 * the trained weights against SGD done in double in the test with the
 * closed-form rate of each step (torch.optim.lr_scheduler's formulas,
 * written out here), a --save'd model trained again continuing the
 * schedule, the usage errors of bad schedule options, and --seed giving
 * the same bytes for one seed and other weights for another. */
#include <math.h>

#include "test_cli_train_util.h"

#define PI_D 3.14159265358979323846 /* M_PI is not C11 */

/* The linear regression model of test_cli_train_util.h without a training
 * step (the step comes from --optimizer). */
static int build_lin_nostep(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 2}, yd[2] = {FG_DIM_UNKNOWN, 1}, wd[2] = {2, 1}, bd[1] = {1};
  float w0[2] = {(float)LIN_W0, (float)LIN_W1}, b0[1] = {(float)LIN_B};
  fg_tensor *w = tensor_f32(2, wd, w0), *b = tensor_f32(1, bd, b0);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, yd);
  fg_output pred = fg_add(g, fg_matmul(g, x, fg_variable(g, "w", w), 0, 0), fg_variable(g, "b", b));
  fg_output d = fg_sub(g, pred, y);
  fg_set_name(g, fg_reduce_mean(g, fg_mul(g, d, d), NULL, 0, 0), "loss");
  fg_tensor_free(w);
  fg_tensor_free(b);
  return save_and_free_graph(g, path);
}

/* The closed-form rate at step t (steps done before it). */
typedef struct sched {
  int kind; /* 0 constant, 1 step, 2 cosine */
  int step_size;
  double gamma;
  int t_max;
  double eta_min;
  int warmup;
  double factor;
} sched;

static double rate(const sched *s, double base, int t) {
  if (t < s->warmup) return base * (s->factor + (1 - s->factor) * t / s->warmup);
  double u = t - s->warmup;
  if (s->kind == 1) return base * pow(s->gamma, floor(u / s->step_size));
  if (s->kind == 2) return s->eta_min + (base - s->eta_min) * (1 + cos(PI_D * u / s->t_max)) / 2;
  return base;
}

/* SGD in double over `epochs` epochs of LIN_ROWS rows in file order, batch
 * `batch`, from the initial values, the rate of step t (counted from
 * `t0`) from the schedule. */
static void reference(const sched *s, double base, int batch, int epochs, int t0, linp *p) {
  float x[LIN_ROWS][2], y[LIN_ROWS];
  linreg_data(LIN_ROWS, x, y);
  int64_t idx[LIN_ROWS];
  for (int i = 0; i < LIN_ROWS; i++)
    idx[i] = i;
  int t = t0;
  for (int e = 0; e < epochs; e++)
    for (int r = 0; r < LIN_ROWS; r += batch, t++) {
      int n = LIN_ROWS - r < batch ? LIN_ROWS - r : batch;
      lin_step(p, (const float(*)[2])x, y, idx + r, n, rate(s, base, t));
    }
}

/* The saved w, b against p. */
static void check_weights(const char *path, const linp *p) {
  float w[2], b[1];
  FG_REQUIRE(saved_variable(path, "w", w, 2) == 2);
  FG_REQUIRE(saved_variable(path, "b", b, 1) == 1);
  FG_CHECK_NEAR(w[0], p->w[0], 1e-5);
  FG_CHECK_NEAR(w[1], p->w[1], 1e-5);
  FG_CHECK_NEAR(b[0], p->b, 1e-5);
}

/* check_weights, and the saved step counter against `steps`. */
static void check_saved(const char *path, const linp *p, int steps) {
  check_weights(path, p);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(path, st);
  fg_session *s = g ? fg_session_new(g, NULL, st) : NULL;
  fg_tensor *c = s ? fg_session_variable(s, "train/step", st) : NULL;
  FG_REQUIRE(c);
  FG_CHECK(*(const double *)fg_tensor_data(c) == (double)steps);
  fg_tensor_free(c);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

static void data_args(char *xi, char *yi) {
  snprintf(xi, 600, "x=%s", tpath("x.npy"));
  snprintf(yi, 600, "y=%s", tpath("y.npy"));
}

/* A temp dir holding m.fgb (build_lin_nostep) and the data, xi and yi the
 * -i arguments for it: 0, or -1. */
static int setup_lin(char *xi, char *yi) {
  if (!make_tmpdir() || build_lin_nostep(tpath("m.fgb")) != 0 ||
      write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) != 0)
    return -1;
  data_args(xi, yi);
  return 0;
}

/* A weight far from the reference only after the schedule's changes would
 * show: 3 epochs of 5 steps cross several decays. The saved model, trained
 * 2 more epochs, continues the schedule at step 15 (the reference: 25
 * uninterrupted steps). */
FG_TEST(cli_train_step_schedule_and_resume, "") {
  char xi[600], yi[600];
  FG_REQUIRE(setup_lin(xi, yi) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("m.fgb"), "--loss", "loss", "--optimizer", "sgd", "--lr", "0.2",
                 "--lr-schedule", "step", "--lr-step-size", "4", "--lr-gamma", "0.5", "-i", xi,
                 "-i", yi, "--batch", "8", "--epochs", "3", "--save", tpath("a.fgb"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  const sched s = {1, 4, 0.5, 0, 0, 0, 1.0 / 3};
  linp p = {{LIN_W0, LIN_W1}, LIN_B};
  reference(&s, 0.2, 8, 3, 0, &p);
  check_saved(tpath("a.fgb"), &p, 15);
  /* Without the schedule, the weights would differ: the test can tell. */
  linp flat = {{LIN_W0, LIN_W1}, LIN_B};
  const sched c = {0, 0, 0, 0, 0, 0, 1.0 / 3};
  reference(&c, 0.2, 8, 3, 0, &flat);
  FG_CHECK(fabs(flat.w[0] - p.w[0]) + fabs(flat.w[1] - p.w[1]) > 1e-3);

  FG_REQUIRE(cli(&r, "train", tpath("a.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs", "2",
                 "--save", tpath("b.fgb"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  reference(&s, 0.2, 8, 2, 15, &p);
  check_saved(tpath("b.fgb"), &p, 25);
  fgt_rmtree(tmpdir);
}

/* --lr without --optimizer on a model with a step: the saved rate
 * variable takes the new value, and the steps after run at it (SGD in
 * double: 0.2 for the first epoch, 0.05 for the second). */
FG_TEST(cli_train_lr_sets_a_models_rate, "") {
  char xi[600], yi[600];
  FG_REQUIRE(setup_lin(xi, yi) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("m.fgb"), "--loss", "loss", "--optimizer", "sgd", "--lr", "0.2",
                 "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--save", tpath("a.fgb"),
                 NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "train", tpath("a.fgb"), "--lr", "0.05", "-i", xi, "-i", yi, "--batch", "8",
                 "--epochs", "1", "--save", tpath("b.fgb"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  const sched c = {0, 0, 0, 0, 0, 0, 1.0 / 3};
  linp p = {{LIN_W0, LIN_W1}, LIN_B};
  reference(&c, 0.2, 8, 1, 0, &p);
  reference(&c, 0.05, 8, 1, 0, &p);
  check_weights(tpath("b.fgb"), &p);
  /* At 0.2 throughout the weights differ: the test can tell. */
  linp q = {{LIN_W0, LIN_W1}, LIN_B};
  reference(&c, 0.2, 8, 2, 0, &q);
  FG_CHECK(fabs(q.w[0] - p.w[0]) + fabs(q.w[1] - p.w[1]) > 1e-4);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(tpath("b.fgb"), st);
  FG_REQUIRE(g);
  const int id = fg_graph_find(g, fg_graph_metadata(g, "learning_rate"));
  const fg_tensor *lr = NULL;
  FG_REQUIRE(id >= 0 && fg_node_attr_tensor(g, id, "value", &lr) == 0 && lr);
  FG_CHECK(*(const double *)fg_tensor_data(lr) == 0.05);
  fg_graph_free(g);
  fg_status_free(st);
  /* A model without a step has no rate to set. */
  FG_REQUIRE(cli(&r, "train", tpath("m.fgb"), "--loss", "loss", "--lr", "0.1", "-i", xi, "-i", yi,
                 "--batch", "8", "--epochs", "1", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "has no learning-rate variable");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_train_cosine_with_warmup, "") {
  char xi[600], yi[600];
  FG_REQUIRE(setup_lin(xi, yi) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("m.fgb"), "--loss", "loss", "--optimizer", "sgd", "--lr", "0.3",
                 "--lr-schedule", "cosine", "--lr-t-max", "6", "--lr-min", "0.01", "--warmup", "3",
                 "--warmup-factor", "0.25", "-i", xi, "-i", yi, "--batch", "10", "--epochs", "4",
                 "--quiet", "--save", tpath("a.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR(r.out, "");
  result_free(&r);
  const sched s = {2, 0, 0, 6, 0.01, 3, 0.25};
  /* By hand: t = 1 is 0.3 * (0.25 + 0.75 / 3) = 0.15; t = 3 + 6 is 0.01. */
  FG_CHECK_NEAR(rate(&s, 0.3, 1), 0.15, 1e-15);
  FG_CHECK_NEAR(rate(&s, 0.3, 9), 0.01, 1e-15);
  linp p = {{LIN_W0, LIN_W1}, LIN_B};
  reference(&s, 0.3, 10, 4, 0, &p);
  check_saved(tpath("a.fgb"), &p, 16);
  fgt_rmtree(tmpdir);
}

/* Each bad option is a usage error (exit 2) naming the option. */
static void check_usage(const char *want, const char *a1, const char *a2, const char *a3,
                        const char *a4, const char *a5, const char *a6) {
  char xi[600], yi[600];
  data_args(xi, yi);
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("m.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1",
                 "--loss", "loss", a1, a2, a3, a4, a5, a6, NULL) == 0);
  FG_CHECK(r.exited);
  FG_CHECK_INT(r.code, 2);
  FG_CHECK_STR_CONTAINS(r.err, want);
  FG_CHECK(r.signaled == 0);
  result_free(&r);
}

FG_TEST(cli_train_schedule_bad_options, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_lin_nostep(tpath("m.fgb")) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  const char *o = "--optimizer", *sgd = "sgd";
  check_usage("--lr-schedule needs constant, step or cosine, got 'exponential'", o, sgd,
              "--lr-schedule", "exponential", NULL, NULL);
  check_usage("--lr-schedule needs constant, step or cosine, got ''", o, sgd, "--lr-schedule", NULL,
              NULL, NULL);
  check_usage("--warmup needs a number of steps from 0 to 2^50, got -3", o, sgd, "--warmup", "-3",
              NULL, NULL);
  check_usage("--warmup needs a whole number of steps, got '2.5'", o, sgd, "--warmup", "2.5", NULL,
              NULL);
  check_usage("--lr-gamma needs a decay factor > 0, got '0'", o, sgd, "--lr-schedule", "step",
              "--lr-gamma", "0");
  check_usage("--lr-gamma needs a decay factor > 0, got '-0.5'", o, sgd, "--lr-schedule", "step",
              "--lr-gamma", "-0.5");
  check_usage("--lr-step-size needs a number of steps from 1 to 2^50, got 0", o, sgd,
              "--lr-step-size", "0", NULL, NULL);
  check_usage("--lr-schedule step needs --lr-step-size N", o, sgd, "--lr-schedule", "step", NULL,
              NULL);
  check_usage("--lr-schedule cosine needs --lr-t-max N", o, sgd, "--lr-schedule", "cosine", NULL,
              NULL);
  check_usage("--lr-step-size and --lr-gamma need --lr-schedule step", o, sgd, "--lr-gamma", "0.5",
              NULL, NULL);
  check_usage("--lr-step-size and --lr-gamma need --lr-schedule step", o, sgd, "--lr-step-size",
              "3", "--lr-schedule", "constant");
  check_usage("--lr-t-max and --lr-min need --lr-schedule cosine", o, sgd, "--lr-min", "0.1", NULL,
              NULL);
  check_usage("--lr-min needs a learning rate >= 0, got '-1'", o, sgd, "--lr-min", "-1", NULL,
              NULL);
  check_usage("--warmup-factor needs a factor in (0, 1], got '0'", o, sgd, "--warmup", "2",
              "--warmup-factor", "0");
  check_usage("--warmup-factor needs a factor in (0, 1], got '1.5'", o, sgd, "--warmup", "2",
              "--warmup-factor", "1.5");
  check_usage("--warmup-factor needs --warmup N with N > 0", o, sgd, "--warmup-factor", "0.5", NULL,
              NULL);
  /* A schedule without --optimizer: the model's own step keeps its rate. */
  check_usage("--lr-schedule, --warmup and their options need --optimizer", "--lr-schedule",
              "cosine", "--lr-t-max", "5", NULL, NULL);
  check_usage("--lr-schedule, --warmup and their options need --optimizer", "--warmup", "5", NULL,
              NULL, NULL, NULL);
  check_usage("--seed needs an integer from 0 to", "--seed", "-1", NULL, NULL, NULL, NULL);
  check_usage("--seed needs an integer from 0 to", "--seed", "x1", NULL, NULL, NULL, NULL);
  fgt_rmtree(tmpdir);
}

/* ---- --seed ------------------------------------------------------------------------ */

/* x [?,4] -> dropout(relu(x W1), 0.5) W2 -> mean squared error against y
 * [?,1]; W1 drawn by a Kaiming initialiser unless `fixed`, when both
 * weights hold values (so only the dropout masks are random). */
static int build_dropout_model(const char *path, int fixed) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 4}, yd[2] = {FG_DIM_UNKNOWN, 1}, w1d[2] = {4, 8},
          w2d[2] = {8, 1};
  float w1v[32], w2v[8];
  for (int i = 0; i < 32; i++)
    w1v[i] = (float)((i * 7) % 11 - 5) / 10.0f;
  for (int i = 0; i < 8; i++)
    w2v[i] = (float)((i * 3) % 5 - 2) / 4.0f;
  fg_tensor *t1 = tensor_f32(2, w1d, w1v), *t2 = tensor_f32(2, w2d, w2v);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, yd);
  const fg_init k = {FG_INIT_KAIMING_UNIFORM, 0, 0, 0, 3};
  fg_output w1 = fixed ? fg_variable(g, "w1", t1) : fg_variable_init(g, "w1", FG_F32, 2, w1d, &k);
  fg_output h = fg_relu(g, fg_matmul(g, x, w1, 0, 0));
  h = fg_dropout(g, h, fg_training(g), 0.5, 11);
  fg_output d = fg_sub(g, fg_matmul(g, h, fg_variable(g, "w2", t2), 0, 0), y);
  fg_set_name(g, fg_reduce_mean(g, fg_mul(g, d, d), NULL, 0, 0), "loss");
  fg_tensor_free(t1);
  fg_tensor_free(t2);
  return save_and_free_graph(g, path);
}

static int write_dropout_data(void) {
  float x[32][4], y[32];
  for (int i = 0; i < 32; i++) {
    for (int j = 0; j < 4; j++)
      x[i][j] = (float)(((i + 1) * (j + 3)) % 9 - 4) / 4.0f;
    y[i] = x[i][0] - 0.5f * x[i][2];
  }
  int64_t xd[2] = {32, 4}, yd[2] = {32, 1};
  if (write_npy_f32(tpath("dx.npy"), 2, xd, &x[0][0]) != 0) return -1;
  return write_npy_f32(tpath("dy.npy"), 2, yd, y);
}

/* Trains `model` for 2 epochs with the extra options and saves to `out`. */
static void train_seeded(const char *model, const char *out, const char *a1, const char *a2,
                         const char *a3, const char *a4) {
  char xi[600], yi[600];
  snprintf(xi, sizeof xi, "x=%s", tpath("dx.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("dy.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "train", model, "--loss", "loss", "--optimizer", "sgd", "--lr", "0.05", "-i",
                 xi, "-i", yi, "--batch", "8", "--epochs", "2", "--quiet", "--save", out, a1, a2,
                 a3, a4, NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
}

/* 1 when the two files hold the same bytes. */
static int same_bytes(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  while (same) {
    int ca = fgetc(fa), cb = fgetc(fb);
    if (ca != cb) same = 0;
    if (ca == EOF || cb == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

static int same_variable(const char *a, const char *b, const char *name, int n) {
  float va[32], vb[32];
  if (saved_variable(a, name, va, 32) != n || saved_variable(b, name, vb, 32) != n) return -1;
  return memcmp(va, vb, (size_t)n * sizeof(float)) == 0;
}

FG_TEST(cli_train_seed_same_bits_and_other_draws, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(write_dropout_data() == 0);
  /* Initialiser and dropout: one seed, the same file byte for byte (with a
   * shuffle too); another seed, other weights; no --seed, the model's own
   * seeds, other weights again. */
  FG_REQUIRE(build_dropout_model(tpath("m.fgb"), 0) == 0);
  train_seeded(tpath("m.fgb"), tpath("s7a.fgb"), "--seed", "7", "--shuffle", "3");
  train_seeded(tpath("m.fgb"), tpath("s7b.fgb"), "--seed", "7", "--shuffle", "3");
  train_seeded(tpath("m.fgb"), tpath("s8.fgb"), "--seed", "8", "--shuffle", "3");
  train_seeded(tpath("m.fgb"), tpath("none.fgb"), "--shuffle", "3", NULL, NULL);
  FG_CHECK(same_bytes(tpath("s7a.fgb"), tpath("s7b.fgb")));
  FG_CHECK(!same_bytes(tpath("s7a.fgb"), tpath("s8.fgb")));
  FG_CHECK_INT(same_variable(tpath("s7a.fgb"), tpath("s7b.fgb"), "w1", 32), 1);
  FG_CHECK_INT(same_variable(tpath("s7a.fgb"), tpath("s8.fgb"), "w1", 32), 0);
  FG_CHECK_INT(same_variable(tpath("s7a.fgb"), tpath("none.fgb"), "w1", 32), 0);

  /* Fixed weights: only the dropout masks draw, and the seed changes them. */
  FG_REQUIRE(build_dropout_model(tpath("f.fgb"), 1) == 0);
  train_seeded(tpath("f.fgb"), tpath("f1a.fgb"), "--seed", "1", NULL, NULL);
  train_seeded(tpath("f.fgb"), tpath("f1b.fgb"), "--seed", "1", NULL, NULL);
  train_seeded(tpath("f.fgb"), tpath("f2.fgb"), "--seed", "2", NULL, NULL);
  FG_CHECK(same_bytes(tpath("f1a.fgb"), tpath("f1b.fgb")));
  FG_CHECK_INT(same_variable(tpath("f1a.fgb"), tpath("f1b.fgb"), "w2", 8), 1);
  FG_CHECK_INT(same_variable(tpath("f1a.fgb"), tpath("f2.fgb"), "w2", 8), 0);

  /* A model that draws nothing says so (the linear model: weights with
   * values, no dropout), and trains as without --seed. */
  FG_REQUIRE(build_lin_nostep(tpath("lin.fgb")) == 0);
  FG_REQUIRE(write_linreg_data("x.npy", "y.npy", LIN_ROWS, LIN_ROWS) == 0);
  char xi[600], yi[600];
  data_args(xi, yi);
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("lin.fgb"), "--loss", "loss", "--optimizer", "sgd", "-i", xi,
                 "-i", yi, "--batch", "8", "--epochs", "1", "--seed", "9", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "note: --seed 9: ");
  FG_CHECK_STR_CONTAINS(r.out, "lin.fgb draws nothing at random (no dropout, random op or "
                               "initialiser of an untrained variable); the row order is "
                               "--shuffle's\n");
  result_free(&r);
  snprintf(xi, sizeof xi, "x=%s", tpath("dx.npy"));
  snprintf(yi, sizeof yi, "y=%s", tpath("dy.npy"));
  FG_REQUIRE(cli(&r, "train", tpath("f.fgb"), "--loss", "loss", "--optimizer", "sgd", "-i", xi,
                 "-i", yi, "--batch", "8", "--epochs", "1", "--seed", "9", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK(strstr(r.out, "note: --seed") == NULL);
  result_free(&r);

  /* The row order is --shuffle's: one --seed, two shuffles, other weights. */
  train_seeded(tpath("f.fgb"), tpath("sh4.fgb"), "--seed", "1", "--shuffle", "4");
  train_seeded(tpath("f.fgb"), tpath("sh5.fgb"), "--seed", "1", "--shuffle", "5");
  FG_CHECK_INT(same_variable(tpath("sh4.fgb"), tpath("sh5.fgb"), "w2", 8), 0);
  fgt_rmtree(tmpdir);
}
