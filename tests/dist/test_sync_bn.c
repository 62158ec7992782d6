/* fg_data_parallel's sync_batch_norm option (ops sync_batch_norm and
 * sync_batch_norm_grad, kernels/cpu/norm_sync.c) over 2 in-process
 * replicas: the outputs, running statistics and trained variables equal
 * those of plain batch_norm run on the whole batch on one device (an
 * independent path: no shard, no collective), for uneven (7 = 4 + 3) and
 * even (6 = 3 + 3) shards, mean and summed losses, f32 and f64; the
 * running statistics after the first step also equal a two-pass mean and
 * variance computed here by hand. Without the option the statistics are
 * per replica (they differ); a group of one is batch_norm bit for bit; bad
 * input is refused as batch_norm refuses it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "test_dist_util.h"

#define CH     2 /* channels */
#define SP     3 /* values per channel and row */
#define ROW    (CH * SP)
#define MAXROW 8

static const char *const batch_names[2] = {"x", "t"};
static const int rows_of[2] = {7, 6}; /* step 1 splits unevenly, step 2 evenly */
static const double a0[ROW] = {1.0, 0.5, -0.75, 2.0, 1.25, -1.5};
static const double scale0[CH] = {1.5, 0.5}, shift0[CH] = {0.1, -0.2};
static const double rm0[CH] = {0, 0}, rv0[CH] = {1, 1};
static const char *const var_names[5] = {"a", "scale", "shift", "rm", "rv"};

static fg_output var_of(fg_graph *g, const char *name, fg_dtype dt, int rank, const int64_t *dims,
                        const double *v, int64_t n) {
  fg_tensor *t = dist_tensor(dt, rank, dims, v, n);
  fg_output o = fg_variable(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* x [?, 2, 3] * a [2, 3] -> batch_norm "bn" (momentum 0.1, running
 * statistics "rm", "rv", mode the placeholder "training") -> the mean (or
 * sum) of (bn - t)^2 over every element, "loss"; SGD at lr 0.5. */
static fg_graph *model(fg_dtype dt, int sum_loss) {
  fg_graph *g = fg_graph_new();
  const int64_t xd[3] = {FG_DIM_UNKNOWN, CH, SP}, ad[2] = {CH, SP}, cd[1] = {CH};
  fg_output x = fg_placeholder(g, "x", dt, 3, xd), t = fg_placeholder(g, "t", dt, 3, xd);
  fg_output tr = fg_placeholder(g, "training", FG_BOOL, 0, NULL);
  fg_output a = var_of(g, "a", dt, 2, ad, a0, ROW);
  fg_output sc = var_of(g, "scale", dt, 1, cd, scale0, CH);
  fg_output sh = var_of(g, "shift", dt, 1, cd, shift0, CH);
  fg_output rm = var_of(g, "rm", dt, 1, cd, rm0, CH), rv = var_of(g, "rv", dt, 1, cd, rv0, CH);
  fg_output y = fg_batch_norm(g, fg_mul(g, x, a), sc, sh, rm, rv, tr, 0.1, 1e-5);
  fg_set_name(g, y, "bn");
  fg_output d = fg_sub(g, y, t), sq = fg_mul(g, d, d);
  fg_output loss = sum_loss ? fg_reduce_sum(g, sq, NULL, 0, 0) : fg_reduce_mean(g, sq, NULL, 0, 0);
  fg_set_name(g, loss, "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = 0.5;
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, NULL);
  if (train.node >= 0) fg_set_name(g, train, "train");
  fg_graph_set_metadata(g, "train_target", "train");
  return g;
}

/* Step k's batch: x with channel means about 3 and -1, targets in [-1, 1]. */
static void batch(int k, double *x, double *t) {
  uint64_t rng = 1000 + (uint64_t)k;
  for (int i = 0; i < rows_of[k] * ROW; i++) {
    const double u = (double)(dist_rng(&rng) >> 11) * 0x1p-53;
    x[i] = 4 * u - 2 + ((i / SP) % CH == 0 ? 3 : -1);
    t[i] = 2 * (double)(dist_rng(&rng) >> 11) * 0x1p-53 - 1;
  }
}

/* Runs step k (training = train; a training run also applies the
 * update), fetching `fetch` into out (n of them). */
static int run_step(fg_session *s, fg_dtype dt, int k, int train, const char *const *fetch, int n,
                    fg_tensor **out, fg_status *st) {
  double x[MAXROW * ROW], t[MAXROW * ROW];
  batch(k, x, t);
  const int64_t dims[3] = {rows_of[k], CH, SP};
  fg_tensor *xt = dist_tensor(dt, 3, dims, x, rows_of[k] * ROW);
  fg_tensor *tt = dist_tensor(dt, 3, dims, t, rows_of[k] * ROW);
  fg_tensor *ft = fg_tensor_new(FG_BOOL, 0, NULL, NULL);
  *(uint8_t *)fg_tensor_data(ft) = (uint8_t)train;
  fg_feed f[3] = {{"x", xt}, {"t", tt}, {"training", ft}};
  const char *target = "train";
  int rc = fg_session_run(s, f, 3, fetch, n, out, &target, train, st);
  fg_tensor_free(xt);
  fg_tensor_free(tt);
  fg_tensor_free(ft);
  return rc;
}

static double at(const fg_tensor *t, int64_t i) {
  return fg_tensor_dtype(t) == FG_F32 ? ((const float *)fg_tensor_data(t))[i]
                                      : ((const double *)fg_tensor_data(t))[i];
}

/* |a - b| <= tol (|b| + 1) for n elements of a from a0 on; the count off. */
static int near(const fg_tensor *a, int64_t a_from, const fg_tensor *b, int64_t b_from, int64_t n,
                double tol, const char *what) {
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    const double u = at(a, a_from + i), v = at(b, b_from + i);
    if (!(fabs(u - v) <= tol * (fabs(v) + 1)) && bad++ < 3)
      FG_FAIL_AT("%s[%lld] = %.17g, want %.17g", what, (long long)i, u, v);
  }
  return bad;
}

/* The largest |a - b| over n elements. */
static double max_diff(const fg_tensor *a, int64_t a_from, const fg_tensor *b, int64_t b_from,
                       int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++)
    m = fmax(m, fabs(at(a, a_from + i) - at(b, b_from + i)));
  return m;
}

/* The hand computation of step 0's running statistics: h = x a over the
 * whole batch, per channel the mean and the unbiased variance (two
 * passes), then 0.9 r + 0.1 batch. */
static void hand_stats(double rm[CH], double rv[CH]) {
  double x[MAXROW * ROW], t[MAXROW * ROW];
  batch(0, x, t);
  const int B = rows_of[0];
  for (int c = 0; c < CH; c++) {
    double s = 0, q = 0;
    for (int n = 0; n < B; n++)
      for (int k = 0; k < SP; k++)
        s += x[n * ROW + c * SP + k] * a0[c * SP + k];
    const double m = s / (B * SP);
    for (int n = 0; n < B; n++)
      for (int k = 0; k < SP; k++) {
        const double d = x[n * ROW + c * SP + k] * a0[c * SP + k] - m;
        q += d * d;
      }
    rm[c] = 0.9 * rm0[c] + 0.1 * m;
    rv[c] = 0.9 * rv0[c] + 0.1 * q / (B * SP - 1);
  }
}

static fg_graph *rewrite(const fg_graph *g, int replicas, int sync, int sum_loss, fg_status *st) {
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  o.sync_batch_norm = sync;
  o.loss_reduction = sum_loss ? FG_DP_LOSS_SUM : FG_DP_LOSS_MEAN;
  fg_graph *dg = fg_data_parallel(g, replicas, batch_names, 2, &o, st);
  if (!dg) FG_FAIL_AT("fg_data_parallel: %s", fg_status_message(st));
  return dg;
}

/* Nodes of op `op` in g. */
static int count_op(const fg_graph *g, const char *op) {
  int n = 0;
  for (int id = 0; id < fg_graph_num_nodes(g); id++)
    n += strcmp(fg_node_op(g, id), op) == 0;
  return n;
}

/* 2 training steps and an inference run of the 2-replica rewrite (sync or
 * not) against the single device; y compared row for row (replica r holds
 * fg_shard_rows' rows). Returns the largest difference seen in y and in
 * the variables, so the per-replica case can show that they differ. */
static void compare(fg_dtype dt, int sum_loss, int sync, double tol, double *ydiff, double *vdiff) {
  fg_status *st = fg_status_new();
  fg_graph *g = model(dt, sum_loss), *dg = rewrite(g, 2, sync, sum_loss, st);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK && dg);
  FG_CHECK_INT(count_op(dg, "sync_batch_norm"), sync ? 2 : 0);
  FG_CHECK_INT(count_op(dg, "sync_batch_norm_grad"), sync ? 2 : 0);
  FG_CHECK_INT(count_op(dg, "batch_norm"), sync ? 0 : 2);
  fg_session *s1 = fg_session_new(g, NULL, st), *s2 = s1 ? fg_session_new(dg, NULL, st) : NULL;
  if (!s2) FG_FAIL_AT("session: %s", fg_status_message(st));
  FG_REQUIRE(s1 && s2);
  const char *one = "bn", *two[2] = {"replica_0/bn", "replica_1/bn"};
  *ydiff = *vdiff = 0;
  for (int k = 0; k < 3; k++) {
    const int step = k < 2 ? k : 1, train = k < 2;
    fg_tensor *y1 = NULL, *y2[2] = {NULL, NULL};
    int rc = run_step(s1, dt, step, train, &one, 1, &y1, st);
    if (rc == 0) rc = run_step(s2, dt, step, train, two, 2, y2, st);
    if (rc) FG_FAIL_AT("run %d: %s", k, fg_status_message(st));
    for (int r = 0; rc == 0 && r < 2; r++) {
      int64_t first, n = fg_shard_rows(rows_of[step], 2, r, &first);
      char what[64];
      snprintf(what, sizeof what, "run %d replica %d y", k, r);
      if (sync) near(y2[r], 0, y1, first * ROW, n * ROW, tol, what);
      *ydiff = fmax(*ydiff, max_diff(y2[r], 0, y1, first * ROW, n * ROW));
    }
    fg_tensor_free(y1);
    fg_tensor_free(y2[0]);
    fg_tensor_free(y2[1]);
    if (k == 0 && sync) {
      /* The running statistics after step 1 against the hand computation. */
      double want[2][CH];
      hand_stats(want[0], want[1]);
      for (int v = 0; v < 2; v++) {
        fg_tensor *t = fg_session_variable(s2, var_names[3 + v], st);
        FG_REQUIRE(t);
        for (int c = 0; c < CH; c++)
          FG_CHECK_NEAR(at(t, c), want[v][c], tol * (fabs(want[v][c]) + 1));
        fg_tensor_free(t);
      }
    }
  }
  /* Both replicas' variables against the single device's after 2 steps;
   * they moved (the gradients are not zero). */
  const double *init[5] = {a0, scale0, shift0, rm0, rv0};
  for (int v = 0; v < 5; v++) {
    fg_tensor *t1 = fg_session_variable(s1, var_names[v], st);
    FG_REQUIRE(t1);
    const int64_t n = fg_tensor_num_elements(t1);
    double moved = 0;
    for (int64_t i = 0; i < n; i++)
      moved = fmax(moved, fabs(at(t1, i) - init[v][i]));
    if (!(moved > 1e-3)) FG_FAIL_AT("%s moved only %g", var_names[v], moved);
    for (int r = 0; r < 2; r++) {
      char name[64];
      snprintf(name, sizeof name, r ? "replica_1/%s" : "%s", var_names[v]);
      fg_tensor *t2 = fg_session_variable(s2, name, st);
      FG_REQUIRE(t2);
      if (sync) near(t2, 0, t1, 0, n, tol, name);
      *vdiff = fmax(*vdiff, max_diff(t2, 0, t1, 0, n));
      fg_tensor_free(t2);
    }
    fg_tensor_free(t1);
  }
  fg_session_free(s2);
  fg_session_free(s1);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(sync_bn_dp_equals_whole_batch_f64, "dist") {
  double yd, vd;
  compare(FG_F64, 0, 1, 1e-12, &yd, &vd);
}

FG_TEST(sync_bn_dp_equals_whole_batch_f32, "dist") {
  double yd, vd;
  compare(FG_F32, 0, 1, 2e-5, &yd, &vd);
}

/* A loss summed over rows: the buckets add the replicas' gradients, and
 * the gradient's sums are unweighted (sync_batch_norm_grad weighted 0). */
FG_TEST(sync_bn_dp_summed_loss_equals_whole_batch_f64, "dist") {
  double yd, vd;
  compare(FG_F64, 1, 1, 1e-12, &yd, &vd);
}

/* Without the option each replica normalises with its own shard's
 * statistics (PyTorch DDP's default): y, the running statistics and the
 * trained variables differ from the whole batch's. */
FG_TEST(sync_bn_dp_off_keeps_per_replica_stats, "dist") {
  double yd, vd;
  compare(FG_F64, 0, 0, 0, &yd, &vd);
  if (!(yd > 1e-3)) FG_FAIL_AT("per-replica y within %g of the whole batch's", yd);
  if (!(vd > 1e-3)) FG_FAIL_AT("per-replica variables within %g of the whole batch's", vd);
}

/* Bitwise equality of two tensors. */
static void same_bits(const fg_tensor *a, const fg_tensor *b, const char *what) {
  if (!a || !b || fg_tensor_num_elements(a) != fg_tensor_num_elements(b) ||
      memcmp(fg_tensor_data(a), fg_tensor_data(b),
             (size_t)fg_tensor_num_elements(a) * fg_dtype_size(fg_tensor_dtype(a))) != 0)
    FG_FAIL_AT("%s: not bit for bit equal", what);
}

/* replicas = 1 (one process per replica, here without a communicator): a
 * group of one, whose sync_batch_norm is batch_norm bit for bit. */
FG_TEST(sync_bn_group_of_one_is_batch_norm_bitwise, "dist") {
  for (int p = 0; p < 2; p++) {
    const fg_dtype dt = p ? FG_F32 : FG_F64;
    fg_status *st = fg_status_new();
    fg_graph *g = model(dt, 0), *dg = rewrite(g, 1, 1, 0, st);
    FG_REQUIRE(dg);
    FG_CHECK_INT(count_op(dg, "sync_batch_norm"), 1);
    FG_CHECK_INT(count_op(dg, "sync_batch_norm_grad"), 1);
    fg_session *s1 = fg_session_new(g, NULL, st), *s2 = fg_session_new(dg, NULL, st);
    FG_REQUIRE(s1 && s2);
    const char *fetch = "bn";
    for (int k = 0; k < 3; k++) {
      fg_tensor *y1 = NULL, *y2 = NULL;
      FG_REQUIRE(run_step(s1, dt, k < 2 ? k : 1, k < 2, &fetch, 1, &y1, st) == 0);
      FG_REQUIRE(run_step(s2, dt, k < 2 ? k : 1, k < 2, &fetch, 1, &y2, st) == 0);
      same_bits(y2, y1, "y");
      fg_tensor_free(y1);
      fg_tensor_free(y2);
    }
    for (int v = 0; v < 5; v++) {
      fg_tensor *t1 = fg_session_variable(s1, var_names[v], st),
                *t2 = fg_session_variable(s2, var_names[v], st);
      same_bits(t2, t1, var_names[v]);
      fg_tensor_free(t1);
      fg_tensor_free(t2);
    }
    fg_session_free(s1);
    fg_session_free(s2);
    fg_graph_free(dg);
    fg_graph_free(g);
    fg_status_free(st);
  }
}

/* x [?, 2] -> batch_norm "bn" in training, loss mean(bn^2), rewritten for
 * 2 replicas (sync or not) or left whole (replicas 0); runs one step on
 * rows {1, 2}, {3, 6}. 0 with y, or -1 with st set. */
static int two_rows(int replicas, int sync, fg_tensor **y, fg_status *st) {
  fg_graph *g = fg_graph_new();
  const int64_t dims[2] = {FG_DIM_UNKNOWN, 2}, fed[2] = {2, 2}, cd[1] = {2};
  const double xv[4] = {1, 2, 3, 6}, z[2] = {0, 0}, o[2] = {1, 1};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, dims);
  fg_tensor *on = fg_tensor_new(FG_BOOL, 0, NULL, NULL);
  *(uint8_t *)fg_tensor_data(on) = 1;
  fg_output w = var_of(g, "w", FG_F64, 1, cd, o, 2), b = var_of(g, "b", FG_F64, 1, cd, z, 2);
  fg_output rm = var_of(g, "rm", FG_F64, 1, cd, z, 2), rv = var_of(g, "rv", FG_F64, 1, cd, o, 2);
  fg_output bn = fg_batch_norm(g, x, w, b, rm, rv, fg_constant(g, "training", on), 0.5, 1e-5);
  fg_set_name(g, bn, "bn");
  fg_output loss = fg_reduce_mean(g, fg_mul(g, bn, bn), NULL, 0, 0);
  fg_set_name(g, loss, "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, st);
  if (train.node >= 0) fg_set_name(g, train, "train");
  fg_graph_set_metadata(g, "train_target", "train");
  fg_data_parallel_options opt;
  fg_data_parallel_options_init(&opt);
  opt.sync_batch_norm = sync;
  const char *batch[1] = {"x"};
  fg_graph *run = replicas ? fg_data_parallel(g, replicas, batch, 1, &opt, st) : g;
  fg_session *s = run ? fg_session_new(run, NULL, st) : NULL;
  int rc = -1;
  if (s) {
    fg_tensor *xt = dist_tensor(FG_F64, 2, fed, xv, 4);
    fg_feed f = {"x", xt};
    const char *fetch[2] = {"replica_0/bn", "replica_1/bn"}, *target = "train";
    rc = fg_session_run(s, &f, 1, fetch, 2, y, &target, 1, st);
    fg_tensor_free(xt);
  }
  fg_session_free(s);
  if (run != g) fg_graph_free(run);
  fg_tensor_free(on);
  fg_graph_free(g);
  return rc;
}

/* One row per replica: each replica alone has 1 value per channel, which
 * batch_norm refuses (no unbiased variance), but the whole batch has 2:
 * sync_batch_norm normalises with it. By hand: channel 0 {1, 3}, mean 2,
 * biased variance 1; channel 1 {2, 6}, mean 4, variance 4. */
FG_TEST(sync_bn_one_row_per_replica_uses_the_whole_batch, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_tensor *y[2] = {NULL, NULL};
  FG_CHECK(two_rows(2, 0, y, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "more than 1 value per channel, got 1");
  FG_REQUIRE(two_rows(2, 1, y, st) == 0);
  const double want[2][2] = {{-1 / sqrt(1 + 1e-5), -2 / sqrt(4 + 1e-5)},
                             {1 / sqrt(1 + 1e-5), 2 / sqrt(4 + 1e-5)}};
  for (int r = 0; r < 2; r++) {
    FG_REQUIRE(y[r] && fg_tensor_num_elements(y[r]) == 2);
    for (int c = 0; c < 2; c++)
      FG_CHECK_NEAR(at(y[r], c), want[r][c], 1e-14);
    fg_tensor_free(y[r]);
  }
  fg_status_free(st);
}

/* The op's shape checks are batch_norm's: each bad input is refused with
 * batch_norm's message, the op's name aside. */
FG_TEST(sync_bn_bad_inputs_refused_as_batch_norm, "badinput") {
  /* x's channels, the lengths of scale .. running_var, training's rank */
  const struct {
    int64_t c, len[4];
    int tr_rank;
    const char *want;
  } cases[] = {{3, {2, 3, 3, 3}, 0, "scale"},
               {3, {3, 3, 3, 4}, 0, "running_var"},
               {3, {3, 3, 3, 3}, 1, "training"}};
  const char *ops[2] = {"batch_norm", "sync_batch_norm"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char msg[2][512];
    for (int k = 0; k < 2; k++) {
      fg_graph *g = fg_graph_new();
      const int64_t xd[3] = {4, cases[i].c, 5}, two = 2;
      const double v[4] = {1, 1, 1, 1};
      fg_output in[6];
      in[0] = fg_placeholder(g, "x", FG_F32, 3, xd);
      const char *names[4] = {"scale", "shift", "rm", "rv"};
      for (int p = 0; p < 4; p++)
        in[1 + p] = var_of(g, names[p], FG_F32, 1, &cases[i].len[p], v, cases[i].len[p]);
      in[5] = fg_placeholder(g, "training", FG_BOOL, cases[i].tr_rank, &two);
      fg_op(g, ops[k], "n", in, 6, NULL);
      fg_status *st = fg_status_new();
      if (fg_graph_status(g, st) == FG_OK) FG_FAIL_AT("%s case %zu accepted", ops[k], i);
      snprintf(msg[k], sizeof msg[k], "%s", fg_status_message(st));
      FG_CHECK_STR_CONTAINS(msg[k], "'n'");
      FG_CHECK_STR_CONTAINS(msg[k], cases[i].want);
      fg_status_free(st);
      fg_graph_free(g);
    }
    /* The same words after the op's name. */
    const char *a = strstr(msg[0], "batch_norm"), *b = strstr(msg[1], "sync_batch_norm");
    FG_REQUIRE(a && b);
    FG_CHECK_STR(a + strlen("batch_norm"), b + strlen("sync_batch_norm"));
  }
}

/* A group of one refuses a single value per channel as batch_norm does. */
FG_TEST(sync_bn_group_of_one_single_value_refused, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t dims[2] = {1, 3}, cd[1] = {3};
  const double one3[3] = {1, 1, 1}, zero3[3] = {0, 0, 0};
  fg_output in[6];
  in[0] = fg_placeholder(g, "x", FG_F64, 2, dims);
  in[1] = var_of(g, "scale", FG_F64, 1, cd, one3, 3);
  in[2] = var_of(g, "shift", FG_F64, 1, cd, zero3, 3);
  in[3] = var_of(g, "rm", FG_F64, 1, cd, zero3, 3);
  in[4] = var_of(g, "rv", FG_F64, 1, cd, one3, 3);
  fg_tensor *on = fg_tensor_new(FG_BOOL, 0, NULL, NULL);
  *(uint8_t *)fg_tensor_data(on) = 1;
  in[5] = fg_constant(g, "training", on);
  fg_op(g, "sync_batch_norm", "sbn", in, 6, NULL);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s != NULL);
  fg_tensor *xt = dist_tensor(FG_F64, 2, dims, one3, 3), *out = NULL;
  fg_feed f = {"x", xt};
  const char *fetch = "sbn";
  FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'sbn' (sync_batch_norm)");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "more than 1 value per channel, got 1");
  fg_tensor_free(xt);
  fg_tensor_free(on);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Two sync_batch_norm nodes on cpu:0 and cpu:1 (one collective), each fed
 * its own training flag: ranks that disagree on the mode would issue
 * different collectives, so both fail at once, naming the input, instead
 * of waiting for each other. Agreeing flags run. */
FG_TEST(sync_bn_replicas_disagreeing_on_mode_fail, "dist,badinput") {
  fg_graph *g = fg_graph_new();
  const int64_t xd[2] = {4, 2}, cd[1] = {2};
  const double xv[8] = {1, 2, 3, 4, 5, 6, 7, 9}, one[2] = {1, 1}, zero[2] = {0, 0};
  for (int r = 0; r < 2; r++) {
    char dev[16], name[16];
    snprintf(dev, sizeof dev, "cpu:%d", r);
    fg_output in[6];
    snprintf(name, sizeof name, "x%d", r);
    in[0] = fg_placeholder(g, name, FG_F64, 2, xd);
    const double *v[4] = {one, zero, zero, one};
    for (int p = 0; p < 4; p++) {
      fg_tensor *t = dist_tensor(FG_F64, 1, cd, v[p], 2);
      in[1 + p] = fg_constant(g, NULL, t);
      fg_tensor_free(t);
    }
    snprintf(name, sizeof name, "tr%d", r);
    in[5] = fg_placeholder(g, name, FG_BOOL, 0, NULL);
    snprintf(name, sizeof name, "n%d", r);
    fg_output y = fg_op(g, "sync_batch_norm", name, in, 6, NULL);
    for (int p = 0; p < 6; p++)
      fg_set_device(g, in[p], dev);
    fg_set_device(g, y, dev);
  }
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  if (!s) FG_FAIL_AT("session: %s", fg_status_message(st));
  FG_REQUIRE(s);
  for (int mode = 0; mode < 3; mode++) {
    /* mode 0: both train; 1: both infer; 2: they differ */
    fg_tensor *xt = dist_tensor(FG_F64, 2, xd, xv, 8), *f[2];
    for (int r = 0; r < 2; r++) {
      f[r] = fg_tensor_new(FG_BOOL, 0, NULL, NULL);
      *(uint8_t *)fg_tensor_data(f[r]) = (uint8_t)(mode == 0 || (mode == 2 && r == 0));
    }
    fg_feed feeds[4] = {{"x0", xt}, {"x1", xt}, {"tr0", f[0]}, {"tr1", f[1]}};
    const char *fetch[2] = {"n0", "n1"};
    fg_tensor *out[2] = {NULL, NULL};
    const int rc = fg_session_run(s, feeds, 4, fetch, 2, out, NULL, 0, st);
    if (mode < 2) {
      if (rc) FG_FAIL_AT("mode %d: %s", mode, fg_status_message(st));
      /* Both replicas see the same x: the statistics are those of 8 rows
       * made of the 4 twice, channel 0 {1, 3, 5, 7} (mean 4, biased
       * variance 5); in inference the running statistics (0, 1). */
      for (int r = 0; rc == 0 && r < 2; r++) {
        const double want = mode == 0 ? (1 - 4) / sqrt(5 + 1e-5) : 1 / sqrt(1 + 1e-5);
        FG_CHECK_NEAR(at(out[r], 0), want, 1e-14);
      }
    } else {
      FG_CHECK(rc != 0);
      FG_CHECK_STR_CONTAINS(fg_status_message(st), "input 'training' differs between the replicas");
      FG_CHECK_STR_CONTAINS(fg_status_message(st), "1 of 2 in training mode");
    }
    fg_tensor_free(out[0]);
    fg_tensor_free(out[1]);
    fg_tensor_free(xt);
    fg_tensor_free(f[0]);
    fg_tensor_free(f[1]);
  }
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The rewritten graph saves to .fgb and loads back with its sync ops and
 * their attributes: two steps on it give the same bits as on the original. */
FG_TEST(sync_bn_rewrite_save_load_round_trip, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = model(FG_F64, 0), *dg = rewrite(g, 2, 1, 0, st);
  FG_REQUIRE(dg);
  fg_graph *lg = dist_save_load(dg, st);
  if (!lg) FG_FAIL_AT("save/load: %s", fg_status_message(st));
  FG_REQUIRE(lg);
  FG_CHECK_INT(count_op(lg, "sync_batch_norm"), 2);
  FG_CHECK_INT(count_op(lg, "sync_batch_norm_grad"), 2);
  fg_session *a = fg_session_new(dg, NULL, st), *b = fg_session_new(lg, NULL, st);
  FG_REQUIRE(a && b);
  const char *fetch[2] = {"replica_0/bn", "replica_1/bn"};
  for (int k = 0; k < 2; k++) {
    fg_tensor *ya[2] = {NULL, NULL}, *yb[2] = {NULL, NULL};
    FG_REQUIRE(run_step(a, FG_F64, k, 1, fetch, 2, ya, st) == 0);
    FG_REQUIRE(run_step(b, FG_F64, k, 1, fetch, 2, yb, st) == 0);
    for (int r = 0; r < 2; r++) {
      same_bits(yb[r], ya[r], fetch[r]);
      fg_tensor_free(ya[r]);
      fg_tensor_free(yb[r]);
    }
  }
  for (int v = 0; v < 5; v++) {
    fg_tensor *ta = fg_session_variable(a, var_names[v], st),
              *tb = fg_session_variable(b, var_names[v], st);
    same_bits(tb, ta, var_names[v]);
    fg_tensor_free(ta);
    fg_tensor_free(tb);
  }
  fg_session_free(a);
  fg_session_free(b);
  fg_graph_free(lg);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}
