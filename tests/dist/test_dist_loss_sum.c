/* fg_data_parallel with a loss summed over rows (loss_reduction =
 * FG_DP_LOSS_SUM): the replicas' gradients add, so uneven shards train
 * exactly as one device on the full batch. Checked against SGD on linear
 * regression worked out here in double, independently of the engine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "test_dist_util.h"

enum { ROWS = 7, FEAT = 3, STEPS = 3 };
static const double LR = 0.01;

static double xs[ROWS][FEAT], ys[ROWS];

static void make_data(void) {
  for (int i = 0; i < ROWS; i++) {
    for (int j = 0; j < FEAT; j++)
      xs[i][j] = 0.1 * (double)((i * 7 + j * 3) % 11) - 0.4;
    ys[i] = 0.3 * (double)(i % 4) - 0.2;
  }
}

/* loss = sum over rows of (x w + b - y)^2, SGD at LR; w starts at
 * (0.5, -0.25, 0.125), b at 0.1. */
static fg_graph *sum_loss_model(void) {
  static const double w0[FEAT] = {0.5, -0.25, 0.125};
  return dist_linreg(FEAT, w0, 0.1, LR, 1);
}

/* The same SGD in double: w, b after `steps` full-batch steps, and each
 * step's loss (before its update). */
static void sgd_by_hand(int steps, double *w, double *b, double *losses) {
  w[0] = 0.5, w[1] = -0.25, w[2] = 0.125, *b = 0.1;
  for (int s = 0; s < steps; s++) {
    double gw[FEAT] = {0, 0, 0}, gb = 0, l = 0;
    for (int i = 0; i < ROWS; i++) {
      double r = *b - ys[i];
      for (int j = 0; j < FEAT; j++)
        r += xs[i][j] * w[j];
      l += r * r;
      for (int j = 0; j < FEAT; j++)
        gw[j] += 2 * r * xs[i][j];
      gb += 2 * r;
    }
    losses[s] = l;
    for (int j = 0; j < FEAT; j++)
      w[j] -= LR * gw[j];
    *b -= LR * gb;
  }
}

/* Trains `g` (or its rewrite) for STEPS steps on the full batch; fills the
 * losses and the final w, b. 0 or -1. */
static int train(fg_graph *g, double *losses, double *w, double *b) {
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  int64_t xd[2] = {ROWS, FEAT}, yd[2] = {ROWS, 1};
  fg_tensor *x = dist_tensor(FG_F64, 2, xd, &xs[0][0], ROWS * FEAT),
            *y = dist_tensor(FG_F64, 2, yd, ys, ROWS);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *fetch = "loss", *target = "train";
  int rc = s ? 0 : -1;
  for (int k = 0; k < STEPS && rc == 0; k++) {
    fg_tensor *out = NULL;
    rc = fg_session_run(s, feeds, 2, &fetch, 1, &out, &target, 1, st);
    if (rc == 0) losses[k] = *(double *)fg_tensor_data(out);
    fg_tensor_free(out);
  }
  fg_tensor *wt = rc == 0 ? fg_session_variable(s, "w", st) : NULL;
  fg_tensor *bt = rc == 0 ? fg_session_variable(s, "b", st) : NULL;
  if (wt && bt) {
    memcpy(w, fg_tensor_data(wt), FEAT * sizeof *w);
    *b = *(double *)fg_tensor_data(bt);
  } else {
    rc = -1;
  }
  if (rc) fprintf(stderr, "train: %s\n", fg_status_message(st));
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

static double rel(double got, double want) {
  return fabs(got - want) / (fabs(want) > 1e-300 ? fabs(want) : 1e-300);
}

/* 2 replicas (4 + 3 rows) and 3 (3 + 2 + 2): per-step losses (the sum of
 * the replicas' sums) and the final variables match SGD by hand within
 * 1e-12 relative, as one device does. */
FG_TEST(dist_loss_sum_uneven_shards_train_as_full_batch, "dist") {
  make_data();
  double hw[FEAT], hb, hl[STEPS];
  sgd_by_hand(STEPS, hw, &hb, hl);
  fg_graph *g = sum_loss_model();
  double w[FEAT], b, l[STEPS];
  FG_REQUIRE(train(g, l, w, &b) == 0);
  for (int k = 0; k < STEPS; k++)
    FG_CHECK(rel(l[k], hl[k]) < 1e-12);
  for (int replicas = 2; replicas <= 3; replicas++) {
    fg_status *st = fg_status_new();
    fg_data_parallel_options o;
    fg_data_parallel_options_init(&o);
    o.loss_reduction = FG_DP_LOSS_SUM;
    const char *const batch[2] = {"x", "y"};
    fg_graph *dg = fg_data_parallel(g, replicas, batch, 2, &o, st);
    FG_REQUIRE(dg);
    /* No row counts: the sum needs none. */
    FG_CHECK(fg_graph_find(dg, "replica_0/data_parallel/rows") < 0);
    FG_REQUIRE(train(dg, l, w, &b) == 0);
    for (int k = 0; k < STEPS; k++)
      FG_CHECK(rel(l[k], hl[k]) < 1e-12);
    for (int j = 0; j < FEAT; j++)
      FG_CHECK(rel(w[j], hw[j]) < 1e-12);
    FG_CHECK(rel(b, hb) < 1e-12);
    fg_graph_free(dg);
    fg_status_free(st);
  }
  fg_graph_free(g);
}

/* The default (a mean over rows) on the same summed loss takes the
 * row-weighted mean of the replicas' sums: a different step, which is why
 * the option exists. After 3 steps b is off by far more than rounding. */
FG_TEST(dist_loss_sum_default_mean_differs, "dist") {
  make_data();
  double hw[FEAT], hb, hl[STEPS];
  sgd_by_hand(STEPS, hw, &hb, hl);
  fg_graph *g = sum_loss_model();
  fg_status *st = fg_status_new();
  const char *const batch[2] = {"x", "y"};
  fg_graph *dg = fg_data_parallel(g, 2, batch, 2, NULL, st);
  FG_REQUIRE(dg);
  double w[FEAT], b, l[STEPS];
  FG_REQUIRE(train(dg, l, w, &b) == 0);
  FG_CHECK(rel(b, hb) > 1e-3);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_loss_reduction_bad_value, "dist,badinput") {
  fg_graph *g = sum_loss_model();
  fg_status *st = fg_status_new();
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  const char *const batch[2] = {"x", "y"};
  const int bad[3] = {2, -1, 100};
  for (int i = 0; i < 3; i++) {
    o.loss_reduction = bad[i];
    FG_CHECK(fg_data_parallel(g, 2, batch, 2, &o, st) == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    char want[64];
    snprintf(want, sizeof want, "loss_reduction %d must be FG_DP_LOSS_MEAN (0)", bad[i]);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), want);
  }
  fg_graph_free(g);
  fg_status_free(st);
}
