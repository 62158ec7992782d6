/* The normalization ops (batch_norm with its running-statistics update,
 * layer_norm, group_norm, instance_norm) through the graph API, against
 * PyTorch (tests/data/norm_refs.h, written by tests/gen/gen_norm.py):
 * forward values, gradients of L = sum(y * w) for x, scale and shift, in
 * f32 and f64; batch_norm in both modes, and the running statistics, weight
 * and bias after 3 SGD steps of fg_minimize; one saved (.fgb) graph with a
 * training placeholder serving both modes; the refusals of bad inputs;
 * batch_norm over many channels with small planes against its formulas;
 * and, where a GPU is present, a cuda:0 session against the CPU session. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/norm_refs.h"
#include "fgtest.h"
#include "test_kernels_util.h"
#include "flowgraph/dist.h"
#include "flowgraph/flowgraph.h"

#ifdef FG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- helpers ------------------------------------------------------------------ */

static fg_tensor *flag(int on) {
  fg_tensor *t = fg_tensor_new(FG_BOOL, 0, NULL, NULL);
  if (t) *(uint8_t *)fg_tensor_data(t) = (uint8_t)on;
  return t;
}

/* Counts (and reports the first few) elements off by more than
 * tol (|ref| + 1). */
static int close_to(const fg_tensor *t, const double *ref, int64_t n, double tol,
                    const char *what) {
  if (!t) {
    FG_FAIL_AT("%s: no tensor", what);
    return 1;
  }
  if (fg_tensor_num_elements(t) != n) {
    FG_FAIL_AT("%s: %lld elements, want %lld", what, (long long)fg_tensor_num_elements(t),
               (long long)n);
    return 1;
  }
  int bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(tensor_elem(t, i) - ref[i]) <= tol * (fabs(ref[i]) + 1)) && bad++ < 4)
      FG_FAIL_AT("%s[%lld] = %.17g, want %.17g", what, (long long)i, tensor_elem(t, i), ref[i]);
  return bad;
}

static fg_output variable(fg_graph *g, const char *name, fg_dtype dt, int64_t n, const double *v) {
  fg_tensor *t = tensor_of_doubles(dt, 1, &n, v);
  fg_output o = fg_variable(g, name, t);
  fg_tensor_free(t);
  return o;
}

static double tol_of(fg_dtype dt) { return dt == FG_F32 ? 2e-5 : 1e-11; }

/* One forward/backward reference: op, x's shape, the parameters' shape
 * (prank 0: none), the op's int argument (normalized_rank, num_groups),
 * batch_norm's mode and running statistics. */
typedef struct nref {
  const char *op;
  int rank;
  int64_t dims[4];
  int prank;
  int64_t pdims[2];
  int64_t arg;
  int training;
  const double *x, *w, *b, *rm, *rv, *dy, *y, *dx, *dw, *db;
} nref;

static fg_output build(fg_graph *g, const nref *c, fg_dtype dt, fg_output x, fg_output w,
                       fg_output b, fg_output tr) {
  if (!strcmp(c->op, "batch_norm")) {
    const int64_t C = c->dims[1];
    double *zeros = calloc((size_t)C, sizeof *zeros), *ones = malloc((size_t)C * sizeof *ones);
    for (int64_t i = 0; i < C; i++)
      ones[i] = 1;
    fg_output rm = variable(g, "rm", dt, C, c->rm ? c->rm : zeros);
    fg_output rv = variable(g, "rv", dt, C, c->rv ? c->rv : ones);
    free(zeros);
    free(ones);
    return fg_batch_norm(g, x, w, b, rm, rv, tr, 0.1, 1e-5);
  }
  if (!strcmp(c->op, "layer_norm")) return fg_layer_norm(g, x, w, b, (int)c->arg, 1e-5);
  if (!strcmp(c->op, "group_norm")) return fg_group_norm(g, x, w, b, c->arg, 1e-5);
  return fg_instance_norm(g, x, w, b, 1e-5);
}

/* Builds y and the gradients of sum(y * dy), runs them and compares. */
static void check_case(const nref *c, fg_dtype dt) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t n = dims_count(c->rank, c->dims), np = dims_count(c->prank, c->pdims);
  fg_output x = fg_placeholder(g, "x", dt, c->rank, c->dims), w = FG_NO_OUTPUT, b = FG_NO_OUTPUT;
  if (c->prank) {
    w = fg_placeholder(g, "w", dt, c->prank, c->pdims);
    b = fg_placeholder(g, "b", dt, c->prank, c->pdims);
  }
  fg_tensor *trt = flag(c->training);
  fg_output tr = fg_constant(g, "training", trt);
  fg_tensor *dyt = tensor_of_doubles(dt, c->rank, c->dims, c->dy);
  fg_output y = build(g, c, dt, x, w, b, tr);
  fg_set_name(g, y, "y");
  fg_output loss = fg_reduce_sum(g, fg_mul(g, y, fg_constant(g, "dy", dyt)), NULL, 0, 0);
  fg_output wrt[3] = {x, w, b}, d[3];
  const int nw = c->prank ? 3 : 1;
  if (fg_gradients(g, &loss, 1, wrt, nw, NULL, d, st) != 0) {
    FG_FAIL_AT("%s %s: fg_gradients: %s", c->op, fg_dtype_name(dt), fg_status_message(st));
    goto done;
  }
  const char *names[4] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < nw; i++)
    fg_set_name(g, fg_identity(g, d[i]), names[i + 1]);
  fg_tensor *xt = tensor_of_doubles(dt, c->rank, c->dims, c->x);
  fg_tensor *wt = c->prank ? tensor_of_doubles(dt, c->prank, c->pdims, c->w) : NULL;
  fg_tensor *bt = c->prank ? tensor_of_doubles(dt, c->prank, c->pdims, c->b) : NULL;
  fg_feed feeds[3] = {{"x", xt}, {"w", wt}, {"b", bt}};
  fg_tensor *out[4] = {0};
  fg_session *s = fg_session_new(g, NULL, st);
  if (!s || fg_session_run(s, feeds, nw, names, nw + 1, out, NULL, 0, st) != 0) {
    FG_FAIL_AT("%s %s: run: %s", c->op, fg_dtype_name(dt), fg_status_message(st));
  } else {
    char what[96];
    const double *ref[4] = {c->y, c->dx, c->dw, c->db};
    for (int i = 0; i < nw + 1; i++) {
      snprintf(what, sizeof what, "%s %s %s %s", c->op, c->training ? "train" : "eval",
               fg_dtype_name(dt), names[i]);
      close_to(out[i], ref[i], i < 2 ? n : np, tol_of(dt) * (i >= 2 ? 10 : 1), what);
    }
  }
  for (int i = 0; i < 4; i++)
    fg_tensor_free(out[i]);
  fg_session_free(s);
  fg_tensor_free(xt);
  fg_tensor_free(wt);
  fg_tensor_free(bt);
done:
  fg_tensor_free(trt);
  fg_tensor_free(dyt);
  fg_graph_free(g);
  fg_status_free(st);
}

static void check_both(const nref *c) {
  check_case(c, FG_F64);
  check_case(c, FG_F32);
}

/* ---- against PyTorch ---------------------------------------------------------- */

FG_TEST(batch_norm_training_matches_torch, "") {
  const nref c = {"batch_norm", 4,           {2, 3, 7, 5}, 1,      {3},    0,     1,
                  bn_x0,        bn_w0,       bn_b0,        bn_rm0, bn_rv0, bn_dy, bn_train_y,
                  bn_train_dx,  bn_train_dw, bn_train_db};
  check_both(&c);
}

/* Inference normalises with the running statistics (those after the 3
 * steps) and treats them as constants in the gradient. */
FG_TEST(batch_norm_inference_matches_torch, "") {
  const nref c = {"batch_norm", 4,          {2, 3, 7, 5}, 1,      {3},    0,     0,
                  bn_x1,        bn_w0,      bn_b0,        bn_rm3, bn_rv3, bn_dy, bn_eval_y,
                  bn_eval_dx,   bn_eval_dw, bn_eval_db};
  check_both(&c);
}

FG_TEST(batch_norm_rank2_c5_matches_torch, "") {
  const nref c = {"batch_norm", 2,    {4, 5}, 1,      {5},   0,      1,      bn2_x, bn2_w,
                  bn2_b,        NULL, NULL,   bn2_dy, bn2_y, bn2_dx, bn2_dw, bn2_db};
  check_both(&c);
}

FG_TEST(layer_norm_last_two_dims_matches_torch, "") {
  const nref c = {"layer_norm", 3,    {3, 5, 7}, 2,     {5, 7}, 2,     0,     ln_x, ln_w,
                  ln_b,         NULL, NULL,      ln_dy, ln_y,   ln_dx, ln_dw, ln_db};
  check_both(&c);
}

FG_TEST(layer_norm_without_affine_matches_torch, "") {
  const nref c = {"layer_norm", 3,    {3, 5, 7}, 0,     {0},   1,      0,    ln_x, NULL,
                  NULL,         NULL, NULL,      ln_dy, ln1_y, ln1_dx, NULL, NULL};
  check_both(&c);
}

FG_TEST(group_norm_matches_torch, "") {
  const nref c = {"group_norm", 4,    {2, 6, 7, 5}, 1,     {6},  3,     0,     gn_x, gn_w,
                  gn_b,         NULL, NULL,         gn_dy, gn_y, gn_dx, gn_dw, gn_db};
  check_both(&c);
}

FG_TEST(instance_norm_matches_torch, "") {
  const nref c = {
      "instance_norm", 4,    {2, 5, 7, 5}, 1,     {5},  0, 0, in_x, in_w, in_b, NULL, NULL,
      in_dy,           in_y, in_dx,        in_dw, in_db};
  check_both(&c);
}

/* ---- the running statistics under fg_minimize ----------------------------------- */

/* fg_minimize (SGD, lr 0.1, every variable the loss depends on) trains
 * scale and shift only, and its train target also runs the update of the
 * running statistics: after 3 steps all four equal torch's. */
static void three_steps(fg_dtype dt) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t dims[4] = {2, 3, 7, 5};
  fg_output x = fg_placeholder(g, "x", dt, 4, dims);
  fg_output w = variable(g, "w", dt, 3, bn_w0), b = variable(g, "b", dt, 3, bn_b0);
  fg_output rm = variable(g, "rm", dt, 3, bn_rm0), rv = variable(g, "rv", dt, 3, bn_rv0);
  fg_tensor *on = flag(1), *dyt = tensor_of_doubles(dt, 4, dims, bn_dy);
  fg_output y = fg_batch_norm(g, x, w, b, rm, rv, fg_constant(g, "training", on), 0.1, 1e-5);
  fg_output loss = fg_reduce_sum(g, fg_mul(g, y, fg_constant(g, "dy", dyt)), NULL, 0, 0);
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = 0.1;
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, st);
  FG_REQUIRE(train.node >= 0);
  /* No optimizer update touches the running statistics. */
  for (int id = 0; id < fg_graph_num_nodes(g); id++)
    if (!strncmp(fg_node_op(g, id), "apply_", 6))
      for (int k = 0; k < fg_node_num_inputs(g, id); k++)
        FG_CHECK(fg_node_input(g, id, k).node != rm.node &&
                 fg_node_input(g, id, k).node != rv.node);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s != NULL);
  const double *xs[3] = {bn_x0, bn_x1, bn_x2};
  const char *target = fg_node_name(g, train.node);
  for (int k = 0; k < 3; k++) {
    fg_tensor *xt = tensor_of_doubles(dt, 4, dims, xs[k]);
    fg_feed f = {"x", xt};
    if (fg_session_run(s, &f, 1, NULL, 0, NULL, &target, 1, st) != 0)
      FG_FAIL_AT("step %d: %s", k, fg_status_message(st));
    fg_tensor_free(xt);
  }
  const char *names[4] = {"rm", "rv", "w", "b"};
  const double *want[4] = {bn_rm3, bn_rv3, bn_w3, bn_b3};
  for (int i = 0; i < 4; i++) {
    fg_tensor *t = fg_session_variable(s, names[i], st);
    char what[64];
    snprintf(what, sizeof what, "%s after 3 steps (%s)", names[i], fg_dtype_name(dt));
    close_to(t, want[i], 3, tol_of(dt) * 10, what);
    fg_tensor_free(t);
  }
  fg_session_free(s);
  fg_tensor_free(on);
  fg_tensor_free(dyt);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(batch_norm_minimize_updates_running_stats_3_steps, "") {
  three_steps(FG_F64);
  three_steps(FG_F32);
}

/* Naming a running statistic among fg_minimize's variables is refused:
 * its update node already writes it. */
FG_TEST(batch_norm_minimize_refuses_running_stat_as_variable, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t dims[2] = {4, 3};
  const double z[3] = {0, 0, 0}, o[3] = {1, 1, 1};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, dims);
  fg_output w = variable(g, "w", FG_F64, 3, o);
  fg_output rm = variable(g, "rm", FG_F64, 3, z), rv = variable(g, "rv", FG_F64, 3, o);
  fg_tensor *on = flag(1);
  fg_output y = fg_batch_norm(g, x, w, FG_NO_OUTPUT, rm, rv, fg_constant(g, "tr", on), 0.1, 1e-5);
  fg_output loss = fg_reduce_sum(g, fg_mul(g, y, y), NULL, 0, 0);
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  fg_output vars[2] = {w, rv};
  FG_CHECK(fg_minimize(g, loss, vars, 2, &cfg, st).node < 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "vars[1] (rv) is a batch_norm running statistic");
  fg_tensor_free(on);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The update node itself: nothing in inference mode; PyTorch's rule with
 * the unbiased variance (by hand: batch {1, 2, 3, 6} has mean 3 and
 * unbiased variance 14/3) in training mode. */
FG_TEST(batch_norm_update_by_hand_and_noop_in_inference, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t dims[2] = {4, 1};
  const double xv[4] = {1, 2, 3, 6}, m0 = 0.5, v0 = 2;
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, dims);
  fg_output tr = fg_placeholder(g, "training", FG_BOOL, 0, NULL);
  fg_output rm = variable(g, "rm", FG_F64, 1, &m0), rv = variable(g, "rv", FG_F64, 1, &v0);
  fg_set_name(g, fg_batch_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, rm, rv, tr, 0.25, 1e-5), "y");
  int up = -1;
  for (int id = 0; id < fg_graph_num_nodes(g); id++)
    if (!strcmp(fg_node_op(g, id), "batch_norm_update_stats")) up = id;
  FG_REQUIRE(up >= 0);
  const char *target = fg_node_name(g, up);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s != NULL);
  fg_tensor *xt = tensor_of_doubles(FG_F64, 2, dims, xv), *off = flag(0), *on = flag(1);
  fg_feed f[2] = {{"x", xt}, {"training", off}};
  FG_CHECK(fg_session_run(s, f, 2, NULL, 0, NULL, &target, 1, st) == 0);
  fg_tensor *a = fg_session_variable(s, "rm", st), *v = fg_session_variable(s, "rv", st);
  FG_CHECK(a && tensor_elem(a, 0) == 0.5 && v && tensor_elem(v, 0) == 2);
  fg_tensor_free(a);
  fg_tensor_free(v);
  f[1].tensor = on;
  FG_CHECK(fg_session_run(s, f, 2, NULL, 0, NULL, &target, 1, st) == 0);
  a = fg_session_variable(s, "rm", st);
  v = fg_session_variable(s, "rv", st);
  FG_CHECK_NEAR(tensor_elem(a, 0), 0.75 * 0.5 + 0.25 * 3, 1e-15);
  FG_CHECK_NEAR(tensor_elem(v, 0), 0.75 * 2 + 0.25 * 14.0 / 3, 1e-15);
  fg_tensor_free(a);
  fg_tensor_free(v);
  fg_tensor_free(xt);
  fg_tensor_free(off);
  fg_tensor_free(on);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Under fg_data_parallel each replica normalises with its own shard's
 * statistics and updates its own copy of the running statistics (per
 * replica, as PyTorch DDP without SyncBatchNorm): replica 0 from rows 0-2,
 * replica 1 from rows 3-5 (by hand: means 2 and 5, unbiased variances 1
 * and 1 in channel 0; means 4 and 10, variances 4 and 4 in channel 1; with
 * momentum 0.5 from 0 and 1). */
FG_TEST(batch_norm_data_parallel_per_replica_stats, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t dims[2] = {FG_DIM_UNKNOWN, 2}, fed[2] = {6, 2};
  const double xv[12] = {1, 2, 2, 4, 3, 6, 4, 8, 5, 10, 6, 12}, z[2] = {0, 0}, o[2] = {1, 1};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, dims);
  fg_output w = variable(g, "w", FG_F64, 2, o), b = variable(g, "b", FG_F64, 2, z);
  fg_output rm = variable(g, "rm", FG_F64, 2, z), rv = variable(g, "rv", FG_F64, 2, o);
  fg_tensor *on = flag(1);
  fg_output y = fg_batch_norm(g, x, w, b, rm, rv, fg_constant(g, "training", on), 0.5, 1e-5);
  fg_output loss = fg_reduce_mean(g, fg_mul(g, y, y), NULL, 0, 0);
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  FG_REQUIRE(fg_minimize(g, loss, NULL, 0, &cfg, st).node >= 0);
  const char *batch[1] = {"x"};
  fg_graph *dp = fg_data_parallel(g, 2, batch, 1, NULL, st);
  if (!dp) FG_FAIL_AT("fg_data_parallel: %s", fg_status_message(st));
  fg_session *s = dp ? fg_session_new(dp, NULL, st) : NULL;
  if (s) {
    fg_tensor *xt = tensor_of_doubles(FG_F64, 2, fed, xv);
    fg_feed f = {"x", xt};
    const char *target = fg_graph_metadata(dp, "train_target");
    if (fg_session_run(s, &f, 1, NULL, 0, NULL, &target, 1, st) != 0)
      FG_FAIL_AT("step: %s", fg_status_message(st));
    const char *names[4] = {"rm", "rv", "replica_1/rm", "replica_1/rv"};
    const double want[4][2] = {{1, 2}, {1, 2.5}, {2.5, 5}, {1, 2.5}};
    for (int i = 0; i < 4; i++) {
      fg_tensor *t = fg_session_variable(s, names[i], st);
      close_to(t, want[i], 2, 1e-12, names[i]);
      fg_tensor_free(t);
    }
    fg_tensor_free(xt);
  } else {
    FG_FAIL_AT("session: %s", fg_status_message(st));
  }
  fg_session_free(s);
  fg_graph_free(dp);
  fg_tensor_free(on);
  fg_graph_free(g);
  fg_status_free(st);
}

/* One value per channel cannot give an unbiased variance: the run fails
 * naming the count (PyTorch raises too). */
FG_TEST(batch_norm_training_single_value_refused, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t dims[2] = {1, 3};
  const double zero3[3] = {0, 0, 0}, one3[3] = {1, 1, 1};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, dims);
  fg_tensor *on = flag(1);
  fg_output rm = variable(g, "rm", FG_F64, 3, zero3), rv = variable(g, "rv", FG_F64, 3, one3);
  fg_output y = fg_batch_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, rm, rv,
                              fg_constant(g, "training", on), 0.1, 1e-5);
  fg_set_name(g, y, "bn");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s != NULL);
  fg_tensor *xt = tensor_of_doubles(FG_F64, 2, dims, one3), *out = NULL;
  fg_feed f = {"x", xt};
  const char *fetch = "bn";
  FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "bn");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "more than 1 value per channel, got 1");
  fg_tensor_free(xt);
  fg_tensor_free(on);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- one saved graph, both modes ------------------------------------------------ */

/* Runs the loaded graph `h` in both modes against torch's y. */
static void both_modes(fg_graph *h, const char *how) {
  fg_status *st = fg_status_new();
  const int64_t dims[4] = {2, 3, 7, 5};
  fg_session *s = fg_session_new(h, NULL, st);
  if (!s) FG_FAIL_AT("%s: %s", how, fg_status_message(st));
  const double *xs[2] = {bn_x0, bn_x1}, *ys[2] = {bn_train_y, bn_eval_y};
  for (int mode = 1; s && mode >= 0; mode--) {
    /* The training run does not reach the update node (not fetched), so
     * the inference run still sees bn_rm3. */
    fg_tensor *xt = tensor_of_doubles(FG_F64, 4, dims, xs[1 - mode]), *t = flag(mode), *out = NULL;
    fg_feed f[2] = {{"x", xt}, {"training", t}};
    const char *fetch = "y";
    char what[96];
    snprintf(what, sizeof what, "%s, %s y", how, mode ? "training" : "inference");
    if (fg_session_run(s, f, 2, &fetch, 1, &out, NULL, 0, st) != 0)
      FG_FAIL_AT("%s: %s", what, fg_status_message(st));
    else
      close_to(out, ys[1 - mode], 210, 1e-11, what);
    fg_tensor_free(out);
    fg_tensor_free(xt);
    fg_tensor_free(t);
  }
  fg_session_free(s);
  fg_status_free(st);
}

FG_TEST(batch_norm_fgb_and_json_round_trip_serve_both_modes, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t dims[4] = {2, 3, 7, 5};
  fg_output x = fg_placeholder(g, "x", FG_F64, 4, dims);
  fg_output tr = fg_placeholder(g, "training", FG_BOOL, 0, NULL);
  fg_output w = variable(g, "w", FG_F64, 3, bn_w0), b = variable(g, "b", FG_F64, 3, bn_b0);
  fg_output rm = variable(g, "rm", FG_F64, 3, bn_rm3), rv = variable(g, "rv", FG_F64, 3, bn_rv3);
  fg_set_name(g, fg_batch_norm(g, x, w, b, rm, rv, tr, 0.1, 1e-5), "y");
  fg_set_name(g, fg_layer_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, 3, 1e-5), "ln");
  fg_set_name(g, fg_group_norm(g, x, w, b, 3, 1e-5), "gn");
  fg_set_name(g, fg_instance_norm(g, x, w, b, 1e-5), "in");
  void *bytes = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &bytes, &size, st) == 0);
  fg_graph *h = fg_graph_load_memory(bytes, size, st);
  free(bytes);
  FG_REQUIRE(h != NULL);
  FG_CHECK_INT(fg_graph_num_nodes(h), fg_graph_num_nodes(g));
  both_modes(h, ".fgb");
  fg_graph_free(h);
  char dir[256], path[300];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_norm") != NULL);
  snprintf(path, sizeof path, "%s/bn.json", dir);
  FG_REQUIRE(fg_graph_save_json(g, path, st) == 0);
  h = fg_graph_load_json(path, st);
  if (!h) FG_FAIL_AT("json: %s", fg_status_message(st));
  if (h) both_modes(h, "json");
  fg_graph_free(h);
  fgt_rmtree(dir);
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- refusals ------------------------------------------------------------------- */

/* Builds one bad node and checks the graph's message names it and `want`. */
static void refused(fg_graph *g, const char *node_word, const char *want) {
  fg_status *st = fg_status_new();
  if (fg_graph_status(g, st) == FG_OK) {
    FG_FAIL_AT("accepted; expected \"%s\"", want);
  } else {
    FG_CHECK_STR_CONTAINS(fg_status_message(st), node_word);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), want);
  }
  fg_status_free(st);
  fg_graph_free(g);
}

typedef struct bad_bn {
  int64_t xdims[4];
  int xrank;
  int64_t len[4]; /* scale, shift, running_mean, running_var */
  fg_dtype tr_dtype;
  int tr_rank;
  double momentum, epsilon;
  const char *want;
} bad_bn;

static void bad_batch_norm(const bad_bn *c) {
  fg_graph *g = fg_graph_new();
  double v[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  fg_output x = fg_placeholder(g, "x", FG_F32, c->xrank, c->xdims);
  fg_output p[4];
  const char *names[4] = {"scale", "shift", "rm", "rv"};
  for (int i = 0; i < 4; i++)
    p[i] = variable(g, names[i], FG_F32, c->len[i], v);
  const int64_t two = 2;
  fg_output tr = fg_placeholder(g, "training", c->tr_dtype, c->tr_rank, &two);
  fg_batch_norm(g, x, p[0], p[1], p[2], p[3], tr, c->momentum, c->epsilon);
  refused(g, "batch_norm", c->want);
}

/* A bad_bn row as a call, so each case takes a line or two. */
#define BN_CASE(...)                                                                               \
  { __VA_ARGS__ }

FG_TEST(batch_norm_bad_inputs_refused, "badinput") {
  const bad_bn cases[] = {
      BN_CASE({4, 3, 5}, 3, {4, 3, 3, 3}, FG_BOOL, 0, 0.1, 1e-5,
              "input 1 (scale) has length 4, but x has C = 3"),
      BN_CASE({4, 3, 5}, 3, {3, 2, 3, 3}, FG_BOOL, 0, 0.1, 1e-5,
              "input 2 (shift) has length 2, but x has C = 3"),
      BN_CASE({4, 3, 5}, 3, {3, 3, 5, 3}, FG_BOOL, 0, 0.1, 1e-5,
              "input 3 (running_mean) has length 5, but x has C = 3"),
      BN_CASE({4, 3, 5}, 3, {3, 3, 3, 1}, FG_BOOL, 0, 0.1, 1e-5,
              "input 4 (running_var) has length 1, but x has C = 3"),
      BN_CASE({6}, 1, {3, 3, 3, 3}, FG_BOOL, 0, 0.1, 1e-5, "shape [6] has rank 1"),
      BN_CASE({4, 3}, 2, {3, 3, 3, 3}, FG_BOOL, 0, 0.1, 0, "attribute 'epsilon' = 0 must be > 0"),
      BN_CASE({4, 3}, 2, {3, 3, 3, 3}, FG_BOOL, 0, 0.1, -1e-3, "'epsilon' = -0.001 must be > 0"),
      BN_CASE({4, 3}, 2, {3, 3, 3, 3}, FG_BOOL, 0, 1.5, 1e-5, "'momentum' = 1.5 must be in [0, 1]"),
      BN_CASE({4, 3}, 2, {3, 3, 3, 3}, FG_BOOL, 0, -0.1, 1e-5,
              "'momentum' = -0.1 must be in [0, 1]"),
      BN_CASE({4, 3}, 2, {3, 3, 3, 3}, FG_F32, 0, 0.1, 1e-5,
              "input 5 (training) is f32 []; it must be a bool scalar"),
      BN_CASE({4, 3}, 2, {3, 3, 3, 3}, FG_BOOL, 1, 0.1, 1e-5,
              "input 5 (training) is bool [2]; it must be a bool scalar"),
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    bad_batch_norm(&cases[i]);
}

FG_TEST(group_instance_layer_norm_bad_inputs_refused, "badinput") {
  const int64_t x4[4] = {2, 6, 3, 3}, x1[1] = {6}, c6 = 6, c5 = 5, p2[2] = {3, 4};
  const double v[12] = {0};
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, x4);
  fg_group_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, 4, 1e-5);
  refused(g, "group_norm", "attribute 'num_groups' = 4 does not divide C = 6");
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 4, x4);
  fg_group_norm(g, x, variable(g, "s", FG_F32, c5, v), variable(g, "t", FG_F32, c6, v), 3, 1e-5);
  refused(g, "group_norm", "input 1 (scale) has length 5, but x has C = 6");
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 4, x4);
  fg_group_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, 3, 0);
  refused(g, "group_norm", "attribute 'epsilon' = 0 must be > 0");
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 1, x1);
  fg_group_norm(g, x, variable(g, "s", FG_F32, c6, v), variable(g, "t", FG_F32, c6, v), 3, 1e-5);
  refused(g, "group_norm", "shape [6] has rank 1");
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 4, x4);
  fg_instance_norm(g, x, variable(g, "s", FG_F32, c6, v), variable(g, "t", FG_F32, c5, v), 1e-5);
  refused(g, "instance_norm", "input 2 (shift) has length 5, but x has C = 6");
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 1, x1);
  fg_instance_norm(g, x, variable(g, "s", FG_F32, c6, v), variable(g, "t", FG_F32, c6, v), 1e-5);
  refused(g, "instance_norm", "shape [6] has rank 1");
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 1, x1);
  fg_instance_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, 1e-5);
  refused(g, "fg_instance_norm", "x has rank 1; it must be [N, C, ...]");
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 4, x4);
  fg_instance_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, -1);
  refused(g, "instance_norm", "attribute 'epsilon' = -1 must be > 0");
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 4, x4);
  fg_layer_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, 5, 1e-5);
  refused(g, "fg_layer_norm", "normalized_rank = 5 must be in [1, 4]");
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 4, x4);
  fg_tensor *pt = tensor_of_doubles(FG_F32, 2, p2, v);
  fg_output p = fg_constant(g, "p", pt);
  fg_tensor_free(pt);
  fg_layer_norm(g, x, p, p, 2, 1e-5);
  refused(g, "layer_norm", "input 1 (scale) is f32 [3,4]; it must be x's last 2 dims");
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 4, x4);
  fg_layer_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, 1, 0);
  refused(g, "layer_norm", "attribute 'epsilon' = 0 must be > 0");
}

/* The update op made directly: its statistics must match the running
 * ones, and running_mean must be a variable (it is written in place). */
FG_TEST(batch_norm_update_stats_bad_inputs_refused, "badinput") {
  const double v[3] = {0, 0, 0};
  fg_graph *g = fg_graph_new();
  fg_tensor *on = flag(1), *two = tensor_of_doubles(FG_F32, 1, (const int64_t[]){2}, v);
  fg_output in[5] = {variable(g, "rm", FG_F32, 3, v), variable(g, "rv", FG_F32, 3, v),
                     fg_constant(g, "m", two), variable(g, "var", FG_F32, 3, v),
                     fg_constant(g, "tr", on)};
  fg_op(g, "batch_norm_update_stats", "up", in, 5, NULL);
  refused(g, "'up' (batch_norm_update_stats)",
          "input 2 (mean) has length 2, but input 0 (running_mean) has 3");
  g = fg_graph_new();
  fg_output c3 = fg_identity(g, variable(g, "v3", FG_F32, 3, v));
  fg_output in2[5] = {c3, c3, c3, c3, fg_constant(g, "tr", on)};
  fg_op(g, "batch_norm_update_stats", "up", in2, 5, NULL);
  refused(g, "up", "input 0 must be a variable");
  fg_tensor_free(on);
  fg_tensor_free(two);
}

/* A gradient reaching the saved statistics, or a second derivative, is
 * refused rather than silently zero. */
FG_TEST(norm_gradient_limits_refused, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {4, 6};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, d), dx;
  fg_output y = fg_layer_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, 1, 1e-5);
  fg_output m = fg_reduce_sum(g, fg_output_at(y, 1), NULL, 0, 0);
  FG_CHECK(fg_gradients(g, &m, 1, &x, 1, NULL, &dx, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "saved statistics");
  fg_graph_free(g);
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F64, 2, d);
  y = fg_layer_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, 1, 1e-5);
  fg_output l = fg_reduce_sum(g, fg_mul(g, y, y), NULL, 0, 0), ddx;
  FG_REQUIRE(fg_gradients(g, &l, 1, &x, 1, NULL, &dx, st) == 0);
  fg_output l2 = fg_reduce_sum(g, dx, NULL, 0, 0);
  FG_CHECK(fg_gradients(g, &l2, 1, &x, 1, NULL, &ddx, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "second derivatives");
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- batch_norm over many channels with small planes ------------------------- */

/* The kernels read channels in blocks, sample by sample (BatchNorm1d's
 * [N, C] is one row per sample). Shapes whose channels span several blocks
 * and thread chunks, none a multiple of the other, checked against the
 * textbook formulas in double on the same (rounded) inputs. */
typedef struct bn_wide {
  int rank;
  int64_t dims[3];
} bn_wide;

#define BNW_OUT 7
static const char *const bnw_names[BNW_OUT] = {"y", "mean", "inv", "var", "dx", "dw", "db"};

/* Runs y = batch_norm(x) (outputs 0..3) and the gradients of sum(y * dy)
 * for x, w and b with `threads` threads into out[BNW_OUT]; 0 or -1. */
static int bn_wide_run(const bn_wide *c, fg_dtype dt, int training, int threads,
                       const double *const *v, fg_tensor **out) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t C = c->dims[1];
  fg_tensor *xt = tensor_of_doubles(dt, c->rank, c->dims, v[0]);
  fg_tensor *dyt = tensor_of_doubles(dt, c->rank, c->dims, v[5]), *trt = flag(training);
  fg_output x = fg_variable(g, "x", xt), w = variable(g, "w", dt, C, v[1]);
  fg_output b = variable(g, "b", dt, C, v[2]);
  fg_output y = fg_batch_norm(g, x, w, b, variable(g, "rm", dt, C, v[3]),
                              variable(g, "rv", dt, C, v[4]), fg_constant(g, "tr", trt), 0.1, 1e-5);
  fg_output loss = fg_reduce_sum(g, fg_mul(g, y, fg_constant(g, "dy", dyt)), NULL, 0, 0);
  fg_output wrt[3] = {x, w, b}, d[3];
  int rc = fg_gradients(g, &loss, 1, wrt, 3, NULL, d, st);
  for (int i = 0; rc == 0 && i < BNW_OUT; i++)
    fg_set_name(g, fg_identity(g, i < 4 ? fg_output_at(y, i) : d[i - 4]), bnw_names[i]);
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  fg_session *s = rc == 0 ? fg_session_new(g, &o, st) : NULL;
  if (!s || fg_session_run(s, NULL, 0, bnw_names, BNW_OUT, out, NULL, 0, st) != 0) {
    FG_FAIL_AT("batch_norm %lld channels: %s", (long long)C, fg_status_message(st));
    rc = -1;
  }
  fg_session_free(s);
  fg_tensor_free(xt);
  fg_tensor_free(dyt);
  fg_tensor_free(trt);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

/* ref[BNW_OUT] from the inputs v (x, w, b, rm, rv, dy) rounded to dt. */
static void bn_wide_ref(const bn_wide *c, fg_dtype dt, int training, double *const *v,
                        double **ref) {
  const int64_t N = c->dims[0], C = c->dims[1], S = c->rank == 3 ? c->dims[2] : 1, M = N * S;
  const int64_t n = N * C * S;
  for (int k = 0; k < 6; k++) /* the values the session sees */
    for (int64_t i = 0; i < (k == 0 || k == 5 ? n : C); i++)
      v[k][i] = dt == FG_F32 ? (double)(float)v[k][i] : v[k][i];
  for (int64_t ch = 0; ch < C; ch++) {
    double s = 0, q = 0, sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < M; i++)
      s += v[0][(i / S * C + ch) * S + i % S];
    const double bm = s / (double)M;
    for (int64_t i = 0; i < M; i++)
      q += pow(v[0][(i / S * C + ch) * S + i % S] - bm, 2);
    const double mean = training ? bm : v[3][ch];
    const double inv = 1 / sqrt((training ? q / (double)M : v[4][ch]) + 1e-5);
    for (int64_t i = 0; i < M; i++) {
      const int64_t e = (i / S * C + ch) * S + i % S;
      sdy += v[5][e];
      sdyx += v[5][e] * (v[0][e] - mean) * inv;
    }
    for (int64_t i = 0; i < M; i++) {
      const int64_t e = (i / S * C + ch) * S + i % S;
      const double xh = (v[0][e] - mean) * inv;
      ref[0][e] = xh * v[1][ch] + v[2][ch];
      ref[4][e] = training ? v[1][ch] * inv * (v[5][e] - sdy / (double)M - xh * sdyx / (double)M)
                           : v[1][ch] * inv * v[5][e];
    }
    ref[1][ch] = mean;
    ref[2][ch] = inv;
    ref[3][ch] = training ? q / (double)(M - 1) : v[4][ch];
    ref[5][ch] = sdyx;
    ref[6][ch] = sdy;
  }
}

static void bn_wide_check(const bn_wide *c, fg_dtype dt, int training) {
  const int64_t C = c->dims[1], n = dims_count(c->rank, c->dims);
  double *v[6], *ref[BNW_OUT];
  uint64_t r = 7 + (uint64_t)C;
  for (int k = 0; k < 6; k++) {
    v[k] = malloc((size_t)(k == 0 || k == 5 ? n : C) * sizeof(double));
    for (int64_t i = 0; i < (k == 0 || k == 5 ? n : C); i++) /* x around 3: a mean to remove */
      v[k][i] = (k == 0 ? 3 : k == 4 ? 1.5 : 0) + rng_unit(&r) * (k == 4 ? 0.5 : 2);
  }
  for (int k = 0; k < BNW_OUT; k++)
    ref[k] = malloc((size_t)(k == 0 || k == 4 ? n : C) * sizeof(double));
  bn_wide_ref(c, dt, training, v, ref);
  fg_tensor *one[BNW_OUT] = {0}, *two[BNW_OUT] = {0};
  if (bn_wide_run(c, dt, training, 1, (const double *const *)v, one) == 0 &&
      bn_wide_run(c, dt, training, 2, (const double *const *)v, two) == 0) {
    char what[96];
    for (int k = 0; k < BNW_OUT; k++) {
      snprintf(what, sizeof what, "C %lld %s %s %s", (long long)C, fg_dtype_name(dt),
               training ? "train" : "eval", bnw_names[k]);
      const double tol = tol_of(dt) * (k >= 5 ? 10 : 1);
      close_to(one[k], ref[k], k == 0 || k == 4 ? n : C, tol, what);
      if (two[k] && fg_tensor_num_bytes(one[k]) == fg_tensor_num_bytes(two[k]) &&
          memcmp(fg_tensor_data(one[k]), fg_tensor_data(two[k]), fg_tensor_num_bytes(two[k])))
        FG_FAIL_AT("%s differs between 1 and 2 threads", what);
    }
  }
  for (int k = 0; k < BNW_OUT; k++) {
    fg_tensor_free(one[k]);
    fg_tensor_free(two[k]);
    free(ref[k]);
  }
  for (int k = 0; k < 6; k++)
    free(v[k]);
}

FG_TEST(batch_norm_many_channels_small_planes_match_formula, "") {
  /* [N, C]; a plane of 3; a plane of 50 (blocks of 54 channels) */
  const bn_wide cases[] = {{2, {40, 150}}, {3, {40, 130, 3}}, {3, {3, 170, 50}}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int training = 0; training < 2; training++) {
      bn_wide_check(&cases[i], FG_F64, training);
      bn_wide_check(&cases[i], FG_F32, training);
    }
}

/* ---- CUDA against the CPU ---------------------------------------------------- */

#define N_ALL 9
/* Every norm forward, the gradients of their weighted sum and a batch_norm
 * update (then the running statistics), from a session on `device` (NULL:
 * the CPU) with `threads` threads, on seeded random f32 inputs. 0, or -1
 * (reported). */
static int run_all(const char *device, int threads, fg_tensor **out) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[4] = {4, 16, 16, 15}, c = 16, n = 4 * 16 * 16 * 15;
  double *xv = malloc((size_t)n * sizeof *xv), *wv = malloc((size_t)n * sizeof *wv);
  double pv[16], qv[16], rv[16];
  uint64_t r = 12345;
  for (int64_t i = 0; i < n; i++) {
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    xv[i] = (double)(r >> 11) / 9007199254740992.0 * 4 - 1.5;
    wv[i] = 0.5 + (double)(i % 7) / 7;
  }
  for (int i = 0; i < 16; i++)
    pv[i] = 0.5 + 0.1 * i, qv[i] = 0.2 * i - 0.4, rv[i] = 1 + 0.3 * i;
  fg_tensor *xt = tensor_of_doubles(FG_F32, 4, d, xv), *wt = tensor_of_doubles(FG_F32, 4, d, wv),
            *on = flag(1);
  fg_output x = fg_variable(g, "x", xt);
  fg_output w = variable(g, "w", FG_F32, c, pv), b = variable(g, "b", FG_F32, c, qv);
  fg_output rm = variable(g, "rm", FG_F32, c, qv), rvar = variable(g, "rv", FG_F32, c, rv);
  fg_output ys[4] = {fg_batch_norm(g, x, w, b, rm, rvar, fg_constant(g, "tr", on), 0.1, 1e-5),
                     fg_layer_norm(g, x, FG_NO_OUTPUT, FG_NO_OUTPUT, 2, 1e-5),
                     fg_group_norm(g, x, w, b, 4, 1e-5), fg_instance_norm(g, x, w, b, 1e-5)};
  fg_output wc = fg_constant(g, "wc", wt), loss = fg_scalar(g, FG_F32, 0);
  char names[N_ALL][16];
  const char *fetch[7];
  for (int i = 0; i < 4; i++) {
    loss = fg_add(g, loss, fg_reduce_sum(g, fg_mul(g, ys[i], wc), NULL, 0, 0));
    snprintf(names[i], sizeof names[i], "y%d", i);
    fg_set_name(g, ys[i], names[i]);
  }
  fg_output wrt[3] = {x, w, b}, dd[3];
  int rc = fg_gradients(g, &loss, 1, wrt, 3, NULL, dd, st);
  for (int i = 0; rc == 0 && i < 3; i++) {
    snprintf(names[4 + i], sizeof names[4 + i], "d%d", i);
    fg_set_name(g, fg_identity(g, dd[i]), names[4 + i]);
  }
  for (int i = 0; i < 7; i++)
    fetch[i] = names[i];
  const char *target = NULL;
  for (int id = 0; id < fg_graph_num_nodes(g); id++)
    if (!strcmp(fg_node_op(g, id), "batch_norm_update_stats")) target = fg_node_name(g, id);
  fg_session_options o;
  fg_session_options_init(&o);
  if (device) o.device = device;
  o.num_threads = threads;
  fg_session *s = rc == 0 ? fg_session_new(g, &o, st) : NULL;
  if (!s || fg_session_run(s, NULL, 0, fetch, 7, out, &target, 1, st) != 0) {
    FG_FAIL_AT("%s: %s", device ? device : "cpu", fg_status_message(st));
    rc = -1;
  } else {
    out[7] = fg_session_variable(s, "rm", st);
    out[8] = fg_session_variable(s, "rv", st);
  }
  fg_session_free(s);
  free(xv);
  free(wv);
  fg_tensor_free(xt);
  fg_tensor_free(wt);
  fg_tensor_free(on);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

/* The kernels split channels and rows over the pool in fixed chunks and
 * sum each in one thread: 1 and 4 threads give the same bits. */
FG_TEST(norm_same_bits_for_1_and_4_threads, "") {
  fg_tensor *one[N_ALL] = {0}, *four[N_ALL] = {0};
  if (run_all(NULL, 1, one) == 0 && run_all(NULL, 4, four) == 0)
    for (int i = 0; i < N_ALL; i++) {
      FG_REQUIRE(one[i] && four[i]);
      FG_CHECK_INT(fg_tensor_num_bytes(one[i]), fg_tensor_num_bytes(four[i]));
      if (memcmp(fg_tensor_data(one[i]), fg_tensor_data(four[i]), fg_tensor_num_bytes(one[i])))
        FG_FAIL_AT("fetch %d differs between 1 and 4 threads", i);
    }
  for (int i = 0; i < N_ALL; i++) {
    fg_tensor_free(one[i]);
    fg_tensor_free(four[i]);
  }
}

FG_TEST(cuda_norm_matches_cpu, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  FG_SKIP_NO_CUDA_DEVICE();
  fg_tensor *cpu[N_ALL] = {0}, *gpu[N_ALL] = {0};
  if (run_all(NULL, 0, cpu) == 0 && run_all("cuda:0", 0, gpu) == 0) {
    for (int i = 0; i < N_ALL; i++) {
      FG_REQUIRE(cpu[i] && gpu[i]);
      const int64_t n = fg_tensor_num_elements(cpu[i]);
      double *ref = malloc((size_t)n * sizeof *ref);
      for (int64_t k = 0; k < n; k++)
        ref[k] = tensor_elem(cpu[i], k);
      char what[32];
      snprintf(what, sizeof what, "cuda vs cpu, fetch %d", i);
      close_to(gpu[i], ref, n, 1e-5, what);
      free(ref);
    }
  }
  for (int i = 0; i < N_ALL; i++) {
    fg_tensor_free(cpu[i]);
    fg_tensor_free(gpu[i]);
  }
#endif
}
