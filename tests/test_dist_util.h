/* Shared by the dist tests: the digits MLP (as examples/digits/build_mlp.c
 * builds it, in f32 or f64, with a fixed initialisation) and its data. */
#ifndef FG_TEST_DIST_UTIL_H
#define FG_TEST_DIST_UTIL_H

#include <flowgraph/flowgraph.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm/comm_inproc.h"
#include "fgtest.h"

static inline uint64_t dist_rng(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A tensor of `dt` from doubles. */
static inline fg_tensor *dist_tensor(fg_dtype dt, int rank, const int64_t *dims, const double *v,
                                     int64_t n) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  if (!t) return NULL;
  for (int64_t i = 0; i < n; i++) {
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)v[i];
    else
      ((double *)fg_tensor_data(t))[i] = v[i];
  }
  return t;
}

/* x [?, in] -> x w + b, variables "<name>/w" and "<name>/b"; nodes placed
 * on `device` when it is not NULL. */
static inline fg_output dist_dense(fg_graph *g, fg_dtype dt, fg_output x, int in, int out,
                                   const char *name, uint64_t *rng, const char *device) {
  double *w = malloc((size_t)in * out * sizeof *w), *b = calloc((size_t)out, sizeof *b);
  double bound = sqrt(6.0 / in);
  for (int i = 0; i < in * out; i++)
    w[i] = (2.0 * ((double)(dist_rng(rng) >> 40) * 0x1p-24) - 1.0) * bound;
  int64_t wd[2] = {in, out}, bd[1] = {out};
  fg_tensor *wt = dist_tensor(dt, 2, wd, w, (int64_t)in * out),
            *bt = dist_tensor(dt, 1, bd, b, out);
  char wn[64], bn[64];
  snprintf(wn, sizeof wn, "%s/w", name);
  snprintf(bn, sizeof bn, "%s/b", name);
  fg_output wv = fg_variable(g, wn, wt), bv = fg_variable(g, bn, bt);
  fg_output mm = fg_matmul(g, x, wv, 0, 0);
  fg_output y = fg_add(g, mm, bv);
  if (device) {
    fg_set_device(g, wv, device);
    fg_set_device(g, bv, device);
    fg_set_device(g, mm, device);
    fg_set_device(g, y, device);
  }
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  free(w);
  free(b);
  return y;
}

/* 64-128-64-10 MLP with softmax cross-entropy "loss" and an optimizer step
 * "train" configured by cfg (learning rate, clipping, weight decay, ...).
 * dev1/dev2: devices of the first two layers and the last (NULL:
 * unplaced); `seed` draws the initial weights. */
static inline fg_graph *dist_mlp_seeded(fg_dtype dt, const fg_optimizer_config *cfg,
                                        const char *dev1, const char *dev2, uint64_t seed) {
  fg_graph *g = fg_graph_new();
  uint64_t rng = seed;
  int64_t xd[2] = {FG_DIM_UNKNOWN, 64}, yd[1] = {FG_DIM_UNKNOWN};
  fg_output x = fg_placeholder(g, "x", dt, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  fg_output h1 = fg_relu(g, dist_dense(g, dt, x, 64, 128, "dense1", &rng, dev1));
  if (dev1) fg_set_device(g, h1, dev1);
  fg_output h2 = fg_relu(g, dist_dense(g, dt, h1, 128, 64, "dense2", &rng, dev2));
  if (dev2) fg_set_device(g, h2, dev2);
  fg_output logits = dist_dense(g, dt, h2, 64, 10, "dense3", &rng, dev2);
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, y), "loss");
  if (dev2) fg_set_device(g, loss, dev2);
  fg_status *st = fg_status_new();
  fg_output train = fg_minimize(g, loss, NULL, 0, cfg, st);
  if (train.node >= 0) fg_set_name(g, train, "train");
  fg_graph_set_metadata(g, "train_target", "train");
  fg_status_free(st);
  return g;
}

/* x [?, widths[0]] -> dense layers widths[l] x widths[l + 1] named
 * names[l] ("<name>/w", "<name>/b"), relu between them -> softmax
 * cross-entropy "loss", step "train" (the train_target) of optimizer `opt`
 * at lr 0.05; weights drawn from `seed`. */
static inline fg_graph *dist_relu_mlp(fg_dtype dt, const int *widths, int layers,
                                      const char *const *names, fg_optimizer_kind opt,
                                      uint64_t seed) {
  fg_graph *g = fg_graph_new();
  uint64_t rng = seed;
  int64_t xd[2] = {FG_DIM_UNKNOWN, widths[0]}, yd[1] = {FG_DIM_UNKNOWN};
  fg_output h = fg_placeholder(g, "x", dt, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  for (int l = 0; l < layers; l++) {
    h = dist_dense(g, dt, h, widths[l], widths[l + 1], names[l], &rng, NULL);
    if (l < layers - 1) h = fg_relu(g, h);
  }
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, h, y), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, opt);
  cfg.learning_rate = 0.05;
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, NULL);
  if (train.node >= 0) fg_set_name(g, train, "train");
  fg_graph_set_metadata(g, "train_target", "train");
  return g;
}

/* x [?, in] -> dense in x hid ("<n1>/w", "<n1>/b") -> relu -> dense hid x
 * 10 ("<n2>/...") -> softmax cross-entropy (dist_relu_mlp): the models
 * whose first weight is large enough (FG_DP_FUSE_MAX_BYTES) for an
 * all_reduce of its own. */
static inline fg_graph *dist_wide_mlp(fg_dtype dt, int in, int hid, fg_optimizer_kind opt,
                                      const char *n1, const char *n2) {
  const int widths[3] = {in, hid, 10};
  const char *const names[2] = {n1, n2};
  return dist_relu_mlp(dt, widths, 2, names, opt, 3);
}

/* digits x [?, 64] -> dense 64x128 -> relu -> dense 128x1024 (1 MiB of
 * f64: its update fuses, and its gradient is relu1^T delta2, so it takes
 * the factors: sufficient_factor_apply_sgd) -> relu -> dense 1024x10, SGD at lr 0.05.
 * dense1's weight is 64 KiB: a bucket's. */
static inline fg_graph *dist_deep_mlp(void) {
  static const int widths[4] = {64, 128, 1024, 10};
  static const char *const names[3] = {"dense1", "dense2", "dense3"};
  return dist_relu_mlp(FG_F64, widths, 3, names, FG_OPTIMIZER_SGD, 5);
}

/* g saved to a .fgb file in a fresh directory and loaded back (the
 * directory removed), or NULL. */
static inline fg_graph *dist_save_load(const fg_graph *g, fg_status *st) {
  char dir[256], path[600];
  if (!fgt_mkdtemp(dir, sizeof dir, "fg_dist_fgb")) return NULL;
  snprintf(path, sizeof path, "%s/g.fgb", dir);
  fg_graph *back = fg_graph_save(g, path, st) == 0 ? fg_graph_load(path, st) : NULL;
  fgt_rmtree(dir);
  return back;
}

/* g rewritten for data parallelism over `replicas` (batch inputs x and y,
 * the default options but fused_update), or NULL (the error printed). */
static inline fg_graph *dist_rewrite_fused(const fg_graph *g, int replicas, int fused) {
  static const char *const batch[2] = {"x", "y"};
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  o.fused_update = fused;
  fg_status *st = fg_status_new();
  fg_graph *dg = fg_data_parallel(g, replicas, batch, 2, &o, st);
  if (!dg) fprintf(stderr, "fg_data_parallel: %s\n", fg_status_message(st));
  fg_status_free(st);
  return dg;
}

/* Update "upd" of op `op` (apply_sgd, all_reduce_apply_sgd,
 * sufficient_factor_apply_sgd) of inputs in[0 .. n_in) and attributes `a`
 * must be refused when it is built, naming it, with `want` in the
 * message. */
static inline void dist_check_update_refused(fg_graph *g, const char *op, const fg_output *in,
                                             int n_in, const fg_attrs *a, const char *want) {
  fg_status *st = fg_status_new();
  FG_CHECK(fg_op(g, op, "upd", in, n_in, a).node < 0);
  FG_CHECK(fg_graph_status(g, st) != FG_OK);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'upd'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), want);
  fg_status_free(st);
}

/* On cpu:r: variable "v<r>" of value vt, constant "g<r>" of value gt, and
 * `name` = all_reduce_apply_sgd(v, g, lr; mean): the fused updates
 * built by hand, one per device of a two-device graph. */
static inline fg_output dist_fused_sgd_on(fg_graph *g, int r, const fg_tensor *vt,
                                          const fg_tensor *gt, fg_dtype lr_dt, double lr, int mean,
                                          const char *name) {
  char dev[16], vn[16], gn[16];
  snprintf(dev, sizeof dev, "cpu:%d", r);
  snprintf(vn, sizeof vn, "v%d", r);
  snprintf(gn, sizeof gn, "g%d", r);
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "mean", mean);
  fg_output in[3] = {fg_variable(g, vn, vt), fg_constant(g, gn, gt), fg_scalar(g, lr_dt, lr)};
  fg_output u = fg_op(g, "all_reduce_apply_sgd", name, in, 3, a);
  for (int k = 0; k < 3; k++)
    fg_set_device(g, in[k], dev);
  fg_set_device(g, u, dev);
  fg_attrs_free(a);
  return u;
}

/* Runs g's updates "u0" .. (ranks of them, on cpu:0 ..; dist_fused_sgd_on)
 * once in one session: each update's output and variable "v<r>" must be
 * `want` (n f64 values), exactly. Frees g. */
static inline void dist_check_updates(fg_graph *g, int ranks, const double *want, int n) {
  fg_status *st = fg_status_new();
  const char *fetch[2] = {"u0", "u1"};
  FG_REQUIRE(ranks <= 2 && fg_graph_status(g, st) == FG_OK);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  fg_tensor *out[2] = {NULL, NULL};
  FG_REQUIRE(fg_session_run(s, NULL, 0, fetch, ranks, out, NULL, 0, st) == 0);
  for (int r = 0; r < ranks; r++) {
    fg_tensor *v = fg_session_variable(s, r ? "v1" : "v0", st);
    FG_REQUIRE(v && out[r]);
    for (int i = 0; i < n; i++) {
      FG_CHECK(((const double *)fg_tensor_data(v))[i] == want[i]);
      FG_CHECK(((const double *)fg_tensor_data(out[r]))[i] == want[i]);
    }
    fg_tensor_free(v);
    fg_tensor_free(out[r]);
  }
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* dist_mlp_seeded with the initialisation every dist test shares. */
static inline fg_graph *dist_mlp_cfg(fg_dtype dt, const fg_optimizer_config *cfg, const char *dev1,
                                     const char *dev2) {
  return dist_mlp_seeded(dt, cfg, dev1, dev2, 1);
}

/* dist_mlp_cfg with optimizer `opt` at learning rate lr. */
static inline fg_graph *dist_mlp(fg_dtype dt, fg_optimizer_kind opt, double lr, const char *dev1,
                                 const char *dev2) {
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, opt);
  cfg.learning_rate = lr;
  return dist_mlp_cfg(dt, &cfg, dev1, dev2);
}

static fg_tensor *dist_ax, *dist_ay;
static inline void dist_load_digits(void) {
  dist_ax = fg_npy_read(FG_SOURCE_DIR "/examples/digits/data/train_x.npy", NULL);
  dist_ay = fg_npy_read(FG_SOURCE_DIR "/examples/digits/data/train_y.npy", NULL);
}

/* Rows [row0, row0 + rows) of the digits training set, x in `dt`. */
static inline int dist_batch(fg_dtype dt, int row0, int rows, fg_tensor **x, fg_tensor **y) {
  /* Read once, also when several threads ask first (the process-comm
   * test trains from two threads). */
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, dist_load_digits);
  if (!dist_ax || !dist_ay) return -1;
  const fg_tensor *ax = dist_ax, *ay = dist_ay;
  int64_t xd[2] = {rows, 64}, yd[1] = {rows};
  *x = fg_tensor_new(dt, 2, xd, NULL);
  *y = fg_tensor_new(FG_I32, 1, yd, NULL);
  const float *sx = fg_tensor_data(ax);
  for (int64_t i = 0; i < (int64_t)rows * 64; i++) {
    if (dt == FG_F32)
      ((float *)fg_tensor_data(*x))[i] = sx[(int64_t)row0 * 64 + i];
    else
      ((double *)fg_tensor_data(*x))[i] = sx[(int64_t)row0 * 64 + i];
  }
  memcpy(fg_tensor_data(*y), (const int32_t *)fg_tensor_data(ay) + row0, (size_t)rows * 4);
  return 0;
}

/* Runs `steps` training steps on session s, writing each step's loss into
 * losses[]: step k takes batches[k] rows from row 100 k, or, with batches
 * NULL, `batch` rows each, from row (k batch) mod (1400 - batch). 0 or -1. */
static inline int dist_train_batches(fg_session *s, fg_dtype dt, int steps, const int *batches,
                                     int batch, double *losses, fg_status *st) {
  for (int k = 0; k < steps; k++) {
    fg_tensor *x, *y;
    int row0 = batches ? 100 * k : (k * batch) % (1400 - batch);
    if (dist_batch(dt, row0, batches ? batches[k] : batch, &x, &y) != 0) return -1;
    fg_feed feeds[2] = {{"x", x}, {"y", y}};
    const char *fetch = "loss", *target = "train";
    fg_tensor *out = NULL;
    int rc = fg_session_run(s, feeds, 2, &fetch, 1, &out, &target, 1, st);
    fg_tensor_free(x);
    fg_tensor_free(y);
    if (rc != 0) return -1;
    losses[k] =
        dt == FG_F32 ? *(const float *)fg_tensor_data(out) : *(const double *)fg_tensor_data(out);
    fg_tensor_free(out);
  }
  return 0;
}

static inline int dist_train(fg_session *s, fg_dtype dt, int steps, int batch, double *losses,
                             fg_status *st) {
  return dist_train_batches(s, dt, steps, NULL, batch, losses, st);
}

/* max |a - b| / max |b| over the elements of a variable in two sessions
 * (the error relative to the tensor's scale: Adam moves near-zero weights
 * by about lr whatever the gradient's size, so an element-wise ratio there
 * measures the rounding of 1e-9 gradients, not the training); 0 when equal
 * bit for bit, -1 when missing or of different shapes. */
static inline double dist_var_diff(fg_session *a, const char *na, fg_session *b, const char *nb) {
  fg_tensor *ta = fg_session_variable(a, na, NULL), *tb = fg_session_variable(b, nb, NULL);
  double worst = -1;
  if (ta && tb && fg_tensor_dtype(ta) == fg_tensor_dtype(tb) &&
      fg_tensor_num_elements(ta) == fg_tensor_num_elements(tb)) {
    worst = 0;
    double scale = 0;
    int64_t n = fg_tensor_num_elements(ta);
    for (int64_t i = 0; i < n; i++) {
      double x, y;
      if (fg_tensor_dtype(ta) == FG_F32)
        x = ((float *)fg_tensor_data(ta))[i], y = ((float *)fg_tensor_data(tb))[i];
      else
        x = ((double *)fg_tensor_data(ta))[i], y = ((double *)fg_tensor_data(tb))[i];
      if (fabs(x - y) > worst) worst = fabs(x - y);
      if (fabs(y) > scale) scale = fabs(y);
    }
    if (worst > 0) worst /= scale > 0 ? scale : 1e-300;
  }
  fg_tensor_free(ta);
  fg_tensor_free(tb);
  return worst;
}

/* Trains sessions a and b `steps` (at most 16) steps of `batch` rows on
 * the same data: the same kernels on the same data must give the same
 * losses and the variables v1 and v2, bit for bit. */
static inline void dist_check_same_training(fg_session *a, fg_session *b, fg_dtype dt, int steps,
                                            int batch, const char *v1, const char *v2) {
  fg_status *st = fg_status_new();
  double la[16], lb[16];
  FG_REQUIRE(steps <= 16);
  FG_REQUIRE(dist_train(a, dt, steps, batch, la, st) == 0);
  FG_REQUIRE(dist_train(b, dt, steps, batch, lb, st) == 0);
  for (int k = 0; k < steps; k++)
    FG_CHECK(la[k] == lb[k]);
  FG_CHECK(dist_var_diff(a, v1, b, v1) == 0.0);
  FG_CHECK(dist_var_diff(a, v2, b, v2) == 0.0);
  fg_status_free(st);
}

/* f64 linear regression: x [?, feat] -> x w + b against y [?, 1], "loss"
 * the mean (or, with `sum`, the sum) of squared errors over rows, "train"
 * its SGD step at lr; w starts at w0 (feat values), b at b0. */
static inline fg_graph *dist_linreg(int feat, const double *w0, double b0, double lr, int sum) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, feat}, yd[2] = {FG_DIM_UNKNOWN, 1}, wd[2] = {feat, 1},
          bd[1] = {1};
  fg_tensor *wt = dist_tensor(FG_F64, 2, wd, w0, feat), *bt = dist_tensor(FG_F64, 1, bd, &b0, 1);
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, xd), y = fg_placeholder(g, "y", FG_F64, 2, yd);
  fg_output w = fg_variable(g, "w", wt), b = fg_variable(g, "b", bt);
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  fg_output d = fg_sub(g, fg_add(g, fg_matmul(g, x, w, 0, 0), b), y);
  fg_output sq = fg_mul(g, d, d);
  fg_output loss = fg_set_name(
      g, sum ? fg_reduce_sum(g, sq, NULL, 0, 0) : fg_reduce_mean(g, sq, NULL, 0, 0), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = lr;
  fg_status *st = fg_status_new();
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, st);
  if (train.node >= 0) fg_set_name(g, train, "train");
  fg_status_free(st);
  return g;
}

/* dist_mlp's variables, layer by layer. */
static const char *const dist_var_names[6] = {"dense1/w", "dense1/b", "dense2/w",
                                              "dense2/b", "dense3/w", "dense3/b"};

/* Sessions (2 threads each) on g and on dg, its data-parallel rewrite over
 * `replicas` replicas, which must run on that many devices. 0, or -1 (with
 * st's message printed) when a session cannot start. */
static inline int dist_dp_sessions(fg_graph *g, fg_graph *dg, int replicas, fg_session **s1,
                                   fg_session **sn, fg_status *st) {
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 2;
  *s1 = fg_session_new(g, &so, st);
  *sn = fg_session_new(dg, &so, st);
  if (!*sn) fprintf(stderr, "%s\n", fg_status_message(st));
  if (!*s1 || !*sn) return -1;
  FG_CHECK_INT(fg_partition_num_devices(fg_session_partition(*sn)), replicas);
  return 0;
}

/* Checks each of dist_mlp's variables in sn (the data-parallel session)
 * against s1's within tol (dist_var_diff), and every replica's copy of it
 * against replica 0's, bit for bit. Returns the largest difference from
 * s1's. */
static inline double dist_check_dp_vars(fg_session *sn, fg_session *s1, int replicas, double tol) {
  double worst = 0;
  for (int v = 0; v < 6; v++) {
    const char *var = dist_var_names[v];
    double d = dist_var_diff(sn, var, s1, var);
    worst = fmax(worst, d);
    if (!(d >= 0 && d <= tol)) FG_FAIL_AT("variable %s differs by %g (tol %g)", var, d, tol);
    for (int r = 1; r < replicas; r++) {
      char name[64];
      snprintf(name, sizeof name, "replica_%d/%s", r, var);
      if (!(dist_var_diff(sn, name, sn, var) == 0.0))
        FG_FAIL_AT("%s is not the same bits as replica 0's %s", name, var);
    }
  }
  return worst;
}

/* a = x + 1 on cpu:0; b = a * 2 and c = a * 3 on cpu:1; d = b + c on cpu:0;
 * e = sum(a) on cpu:1. Transfers: a->cpu:1 (once, for b, c and e), b->cpu:0,
 * c->cpu:0. */
static inline fg_graph *dist_cut_graph(int place) {
  fg_graph *g = fg_graph_new();
  int64_t xd[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F64, 1, xd);
  fg_output a = fg_set_name(g, fg_add(g, x, fg_scalar(g, FG_F64, 1)), "a");
  fg_output b = fg_set_name(g, fg_mul(g, a, fg_scalar(g, FG_F64, 2)), "b");
  fg_output c = fg_set_name(g, fg_mul(g, a, fg_scalar(g, FG_F64, 3)), "c");
  fg_output d = fg_set_name(g, fg_add(g, b, c), "d");
  fg_output e = fg_set_name(g, fg_reduce_sum(g, a, NULL, 0, 0), "e");
  if (place) {
    fg_set_device(g, a, "cpu:0");
    fg_set_device(g, b, "cpu:1");
    fg_set_device(g, c, "cpu:1");
    fg_set_device(g, d, "cpu:0");
    fg_set_device(g, e, "cpu:1");
  }
  return g;
}

/* sum(I_n I_n ... I_n), `count` matmuls by the n x n identity on `device`:
 * n, after work whose time grows with count (a device kept busy before
 * what reads it). FG_NO_OUTPUT when out of memory. */
static inline fg_output dist_identity_chain(fg_graph *g, int n, int count, const char *device) {
  int64_t md[2] = {n, n};
  float *eye = calloc((size_t)n * (size_t)n, sizeof *eye);
  if (!eye) return FG_NO_OUTPUT;
  for (int i = 0; i < n; i++)
    eye[(size_t)i * (size_t)(n + 1)] = 1;
  fg_tensor *et =
      fg_tensor_from_data(FG_F32, 2, md, eye, (size_t)n * (size_t)n * sizeof *eye, NULL);
  free(eye);
  if (!et) return FG_NO_OUTPUT;
  fg_output m = fg_constant(g, NULL, et), c = m;
  fg_tensor_free(et);
  fg_set_device(g, m, device);
  for (int i = 0; i < count; i++) {
    c = fg_matmul(g, c, m, 0, 0);
    fg_set_device(g, c, device);
  }
  fg_output sum = fg_reduce_sum(g, c, NULL, 0, 0);
  fg_set_device(g, sum, device);
  return sum;
}

/* One rank of dist_run_two_ranks: its session (on `device`, NULL: cpu)
 * attached to communicator c trains `steps` (at most 16) steps on its half
 * of `batch` digits rows (f64), keeping each step's loss and, at the end,
 * dense1/w. rc 0 when every step ran. */
typedef struct dist_rank_arg {
  fg_graph *g;
  fg_comm *c;
  int rank;
  const char *device;
  int steps, batch;
  double losses[16];
  fg_tensor *w;
  int rc;
} dist_rank_arg;

static inline void *dist_rank_thread(void *p) {
  dist_rank_arg *a = p;
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = a->device;
  fg_session *s = fg_session_new(a->g, &o, st);
  a->rc = -1;
  if (s && fg_session_set_comm(s, a->c, st) == 0) {
    a->rc = 0;
    for (int k = 0; k < a->steps && k < 16 && a->rc == 0; k++) {
      fg_tensor *x = NULL, *y = NULL;
      int half = a->batch / 2;
      dist_batch(FG_F64, (k * a->batch) % (1400 - a->batch) + a->rank * half, half, &x, &y);
      fg_feed feeds[2] = {{"x", x}, {"y", y}};
      const char *fetch = "loss", *target = "train";
      fg_tensor *out = NULL;
      a->rc = fg_session_run(s, feeds, 2, &fetch, 1, &out, &target, 1, st);
      if (a->rc == 0) a->losses[k] = *(const double *)fg_tensor_data(out);
      fg_tensor_free(out);
      fg_tensor_free(x);
      fg_tensor_free(y);
    }
    a->w = fg_session_variable(s, "dense1/w", st);
  }
  if (a->rc) fprintf(stderr, "rank %d: %s\n", a->rank, fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return NULL;
}

/* Runs g1 (a replicas = 1 rewrite) as two ranks of an in-process group,
 * one thread and session each (dist_rank_thread); 0 when both trained.
 * The caller frees args[r].w. */
static inline int dist_run_two_ranks(fg_graph *g1, const char *device, double timeout_s, int steps,
                                     int batch, dist_rank_arg args[2]) {
  fg_comm *h[2];
  if (fg_comm_inproc_group(2, timeout_s, h, NULL) != 0) return -1;
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    args[r] = (dist_rank_arg){g1, h[r], r, device, steps, batch, {0}, NULL, -1};
    pthread_create(&th[r], NULL, dist_rank_thread, &args[r]);
  }
  for (int r = 0; r < 2; r++)
    pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++)
    h[r]->ops->free(h[r]);
  return args[0].rc == 0 && args[1].rc == 0 ? 0 : -1;
}

#endif
