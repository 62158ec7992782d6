/* dropout, dropout_grad and the training flag (fg_training): the mask's
 * statistics and scaling, its independence of the thread count, a new mask
 * per training step, the identity in inference, the gradient, the mode's
 * default (true only in a run that applies an optimizer update), the step
 * count across save and load, data-parallel replicas, bad input, and the
 * CUDA kernels against the CPU's (gpu label).
 *
 * Expected values are computed here from the definition of the mask
 * (kernels/philox.h: keep iff word >= ceil(p 2^32), word k of the Philox
 * block (i / 4, step, stream, 2^31 | replica) keyed by the seed), whose
 * Philox core test_random.c checks against Random123's known answers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fgtest.h"
#include "flowgraph/autodiff.h"
#include "flowgraph/dist.h"
#include "flowgraph/graph.h"
#include "flowgraph/io.h"
#include "flowgraph/session.h"
#include "flowgraph/status.h"
#include "flowgraph/tensor.h"
#include "graph/graph_internal.h"
#include "graph/init.h"
#include "graph/op_table.h"
#include "kernels/kernel.h"
#include "kernels/philox.h"

#ifdef FG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_kernels.h"
#endif

static fg_op_params dparams(double p, int64_t seed, int64_t stream, int64_t replica) {
  fg_op_params o;
  memset(&o, 0, sizeof o);
  o.dropout.p = p;
  o.dropout.seed = seed;
  o.dropout.stream = stream;
  o.dropout.replica = replica;
  return o;
}

/* The reference mask bit of element i, from the Philox core directly. */
static int ref_keep(double p, uint64_t seed, uint32_t stream, uint64_t step, uint32_t replica,
                    int64_t i) {
  const fg_philox4 w =
      fg_philox4x32_10((uint32_t)(i / 4), (uint32_t)step, stream, 0x80000000u | replica,
                       (uint32_t)seed, (uint32_t)(seed >> 32));
  const double thr = ceil(p * 4294967296.0);
  return (double)w.v[i % 4] >= thr;
}

/* The CPU kernel of op on n elements: x (dt) into y, training as given. */
static int run_kernel(const char *op, fg_dtype dt, int64_t n, const void *x, void *y, int training,
                      const fg_op_params *p, uint64_t step, uint32_t replica, char *err) {
  uint8_t t = (uint8_t)training;
  fg_kbuf in[2] = {{dt, 1, {n}, (void *)x, 0}, {FG_BOOL, 0, {0}, &t, 0}};
  fg_kbuf out = {dt, 1, {n}, y, 0};
  fg_kctx ctx = {in,   2,    &out, 1,       p, err, 200, NULL, NULL, NULL,
                 NULL, NULL, step, replica, 0, 0,   0,   0,    NULL};
  fg_kernel_fn fn = fg_cpu_kernel(op, dt);
  return fn ? fn(&ctx) : -2;
}

/* 10^6 draws per p: the keep rate within 0.3% of 1 - p (relative; the
 * rate's standard deviation is below 0.07% of it for these p), every kept
 * element exactly x times the factor 1 / (1 - p) rounded to the type,
 * every dropped one 0, and each bit the reference's. */
FG_TEST(dropout_keep_rate_scale_and_bits, "") {
  const int64_t n = 1000000;
  const double ps[4] = {0.1, 0.3, 0.5, 0.9};
  float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
  double *xd = malloc((size_t)n * sizeof *xd), *yd = malloc((size_t)n * sizeof *yd);
  FG_REQUIRE(x && y && xd && yd);
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)(xd[i] = 0.25 + (double)(i % 13) * 0.5);
  for (int k = 0; k < 4; k++) {
    const fg_op_params p = dparams(ps[k], 1234567, 99, 0);
    char err[200] = "";
    FG_REQUIRE(run_kernel("dropout", FG_F32, n, x, y, 1, &p, 5, 0, err) == 0);
    FG_REQUIRE(run_kernel("dropout", FG_F64, n, xd, yd, 1, &p, 5, 0, err) == 0);
    const float sf = (float)(1.0 / (1.0 - ps[k]));
    const double sd = 1.0 / (1.0 - ps[k]);
    int64_t kept = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
      const int want = ref_keep(ps[k], 1234567, 99, 5, 0, i);
      kept += want;
      if (want ? (y[i] != x[i] * sf || yd[i] != xd[i] * sd) : (y[i] != 0.0f || yd[i] != 0.0)) bad++;
    }
    const double rate = (double)kept / (double)n;
    if (fabs(rate - (1 - ps[k])) > 0.003 * (1 - ps[k]))
      FG_FAIL_AT("p = %g: keep rate %.6f, want %.6f within 0.3%%", ps[k], rate, 1 - ps[k]);
    FG_CHECK_INT(bad, 0);
  }
  /* p = 0 keeps everything, times 1. */
  const fg_op_params p0 = dparams(0.0, 1, 2, 0);
  char err[200] = "";
  FG_REQUIRE(run_kernel("dropout", FG_F32, n, x, y, 1, &p0, 0, 0, err) == 0);
  FG_CHECK(memcmp(x, y, (size_t)n * sizeof *x) == 0);
  free(x), free(y), free(xd), free(yd);
}

/* Inference (training false): the identity, bit for bit, also in place. */
FG_TEST(dropout_inference_is_identity, "") {
  const int64_t n = 1003;
  float x[1003], y[1003];
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)sin((double)i) * 3.0f;
  const fg_op_params p = dparams(0.5, 7, 3, 0);
  char err[200] = "";
  FG_REQUIRE(run_kernel("dropout", FG_F32, n, x, y, 0, &p, 9, 0, err) == 0);
  FG_CHECK(memcmp(x, y, sizeof x) == 0);
  FG_REQUIRE(run_kernel("dropout_grad", FG_F32, n, x, y, 0, &p, 9, 0, err) == 0);
  FG_CHECK(memcmp(x, y, sizeof x) == 0);
  memcpy(y, x, sizeof x);
  FG_REQUIRE(run_kernel("dropout", FG_F32, n, y, y, 0, &p, 9, 0, err) == 0);
  FG_CHECK(memcmp(x, y, sizeof x) == 0);
}

/* Steps and replicas give different masks (about half the bits differ at
 * p = 0.5); f32 and f64 draw the same mask. */
FG_TEST(dropout_steps_and_replicas_differ, "") {
  const int64_t n = 40000;
  float *x = malloc((size_t)n * 4), *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4);
  double *xd = malloc((size_t)n * 8), *ad = malloc((size_t)n * 8);
  FG_REQUIRE(x && a && b && xd && ad);
  for (int64_t i = 0; i < n; i++)
    x[i] = 1.0f, xd[i] = 1.0;
  const fg_op_params p = dparams(0.5, 42, 17, 0), p1 = dparams(0.5, 42, 17, 1);
  char err[200] = "";
  const struct {
    uint64_t step;
    uint32_t proc;
    const fg_op_params *p;
  } other[3] = {{1, 0, &p}, {0, 1, &p}, {0, 0, &p1}};
  FG_REQUIRE(run_kernel("dropout", FG_F32, n, x, a, 1, &p, 0, 0, err) == 0);
  FG_REQUIRE(run_kernel("dropout", FG_F64, n, xd, ad, 1, &p, 0, 0, err) == 0);
  for (int64_t i = 0; i < n; i++)
    if ((a[i] != 0) != (ad[i] != 0)) FG_FAIL_AT("f32 and f64 masks differ at %lld", (long long)i);
  for (int k = 0; k < 3; k++) {
    FG_REQUIRE(run_kernel("dropout", FG_F32, n, x, b, 1, other[k].p, other[k].step, other[k].proc,
                          err) == 0);
    int64_t diff = 0;
    for (int64_t i = 0; i < n; i++)
      diff += (a[i] != 0) != (b[i] != 0);
    if (diff < n * 4 / 10 || diff > n * 6 / 10)
      FG_FAIL_AT("case %d: %lld of %lld mask bits differ, want about half", k, (long long)diff,
                 (long long)n);
  }
  free(x), free(a), free(b), free(xd), free(ad);
}

/* ---- through sessions ---------------------------------------------------- */

static fg_tensor *bool_scalar(int v) {
  fg_tensor *t = fg_tensor_new(FG_BOOL, 0, NULL, NULL);
  *(uint8_t *)fg_tensor_data(t) = (uint8_t)v;
  return t;
}

/* Graph: x [rows, cols] f32 placeholder, y = dropout(x, training) named "y". */
static fg_graph *drop_graph(int64_t rows, int64_t cols, double p) {
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {rows, cols};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  fg_set_name(g, fg_dropout(g, x, fg_training(g), p, 11), "y");
  return g;
}

static fg_tensor *ones(int64_t rows, int64_t cols) {
  const int64_t d[2] = {rows, cols};
  fg_tensor *t = fg_tensor_new(FG_F32, 2, d, NULL);
  for (int64_t i = 0; i < rows * cols; i++)
    ((float *)fg_tensor_data(t))[i] = 1.0f;
  return t;
}

/* One run fetching "y" with x = ones and training fed as `training` (-1:
 * not fed). */
static fg_tensor *fetch_y(fg_session *s, const fg_tensor *x, int training) {
  fg_status *st = fg_status_new();
  fg_tensor *tr = bool_scalar(training > 0);
  fg_feed feeds[2] = {{"x", x}, {"training", tr}};
  const char *fetch = "y";
  fg_tensor *y = NULL;
  if (fg_session_run(s, feeds, training < 0 ? 1 : 2, &fetch, 1, &y, NULL, 0, st) != 0)
    fprintf(stderr, "run: %s\n", fg_status_message(st));
  fg_tensor_free(tr);
  fg_status_free(st);
  return y;
}

static fg_session *session(fg_graph *g, int threads) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  return fg_session_new(g, &o, NULL);
}

/* 1 and 2 threads draw the same mask (the size spans many chunks of the
 * kernel's parallel loop); each training run is a new step; the first run
 * is step 0 of the reference. */
FG_TEST(dropout_session_threads_and_steps, "") {
  const int64_t rows = 301, cols = 333, n = rows * cols;
  fg_graph *g = drop_graph(rows, cols, 0.25);
  FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
  fg_tensor *x = ones(rows, cols);
  fg_session *s1 = session(g, 1), *s2 = session(g, 2);
  FG_REQUIRE(s1 && s2);
  fg_tensor *a0 = fetch_y(s1, x, 1), *b0 = fetch_y(s2, x, 1);
  fg_tensor *a1 = fetch_y(s1, x, 1), *b1 = fetch_y(s2, x, 1);
  FG_REQUIRE(a0 && b0 && a1 && b1);
  FG_CHECK(memcmp(fg_tensor_data(a0), fg_tensor_data(b0), (size_t)n * 4) == 0);
  FG_CHECK(memcmp(fg_tensor_data(a1), fg_tensor_data(b1), (size_t)n * 4) == 0);
  const float *y0 = fg_tensor_data(a0), *y1 = fg_tensor_data(a1);
  const uint32_t stream = fg_name_stream("y");
  int64_t bad = 0, diff = 0;
  for (int64_t i = 0; i < n; i++) {
    bad += (y0[i] != 0) != ref_keep(0.25, 11, stream, 0, 0, i);
    bad += (y1[i] != 0) != ref_keep(0.25, 11, stream, 1, 0, i);
    diff += (y0[i] != 0) != (y1[i] != 0);
  }
  FG_CHECK_INT(bad, 0);
  /* 2 p (1 - p) = 37.5% of the bits differ between two steps. */
  FG_CHECK(diff > n * 30 / 100 && diff < n * 45 / 100);
  /* Inference runs, unfed or fed false, are the identity and no step. */
  fg_tensor *c = fetch_y(s1, x, -1), *d = fetch_y(s1, x, 0), *a2 = fetch_y(s1, x, 1);
  FG_REQUIRE(c && d && a2);
  FG_CHECK(memcmp(fg_tensor_data(c), fg_tensor_data(x), (size_t)n * 4) == 0);
  FG_CHECK(memcmp(fg_tensor_data(d), fg_tensor_data(x), (size_t)n * 4) == 0);
  bad = 0;
  for (int64_t i = 0; i < n; i++)
    bad += (((const float *)fg_tensor_data(a2))[i] != 0) != ref_keep(0.25, 11, stream, 2, 0, i);
  FG_CHECK_INT(bad, 0);
  fg_tensor *ts[7] = {x, a0, b0, a1, b1, c, d};
  for (int i = 0; i < 7; i++)
    fg_tensor_free(ts[i]);
  fg_tensor_free(a2);
  fg_session_free(s1);
  fg_session_free(s2);
  fg_graph_free(g);
}

/* dx of sum(dropout(x) * c) is c * mask / (1 - p): dropout_grad recomputes
 * the forward's mask (its stream fixed to the hash of the forward's name). */
FG_TEST(dropout_gradient_is_mask_times_dy, "") {
  const int64_t n = 5003;
  const double p = 0.4;
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {n};
  fg_tensor *ct = fg_tensor_new(FG_F64, 1, d, NULL), *xt = fg_tensor_new(FG_F64, 1, d, NULL);
  for (int64_t i = 0; i < n; i++) {
    ((double *)fg_tensor_data(ct))[i] = 0.5 + (double)(i % 17) * 0.25;
    ((double *)fg_tensor_data(xt))[i] = 1.0 + (double)(i % 5);
  }
  fg_output x = fg_placeholder(g, "x", FG_F64, 1, d);
  fg_output y = fg_set_name(g, fg_dropout(g, x, fg_training(g), p, -3), "drop");
  fg_output loss = fg_reduce_sum(g, fg_mul(g, y, fg_constant(g, "c", ct)), NULL, 0, 0);
  fg_output dx;
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_gradients(g, &loss, 1, &x, 1, NULL, &dx, st) == 0);
  fg_set_name(g, dx, "dx");
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  /* The forward's stream is now explicit, the gradient's the same. */
  const fg_node *fw = fg_graph_node(g, fg_graph_find(g, "drop"));
  FG_CHECK(fg_attr_int_or(fw, "stream", -1) == (int64_t)fg_name_stream("drop"));
  FG_CHECK(fg_attr_int_or(fg_graph_node(g, dx.node), "stream", -1) ==
           (int64_t)fg_name_stream("drop"));
  fg_session *s = session(g, 2);
  fg_tensor *tr = bool_scalar(1), *out[2] = {NULL, NULL};
  fg_feed feeds[2] = {{"x", xt}, {"training", tr}};
  const char *fetch[2] = {"drop", "dx"};
  FG_REQUIRE(s && fg_session_run(s, feeds, 2, fetch, 2, out, NULL, 0, st) == 0);
  const double *yv = fg_tensor_data(out[0]), *dv = fg_tensor_data(out[1]);
  const double *cv = fg_tensor_data(ct), *xv = fg_tensor_data(xt);
  int64_t bad = 0, kept = 0;
  for (int64_t i = 0; i < n; i++) {
    const int keep = ref_keep(p, (uint64_t)-3, fg_name_stream("drop"), 0, 0, i);
    kept += keep;
    bad += yv[i] != (keep ? xv[i] * (1 / (1 - p)) : 0.0);
    bad += dv[i] != (keep ? cv[i] * (1 / (1 - p)) : 0.0);
  }
  FG_CHECK_INT(bad, 0);
  FG_CHECK(kept > n / 2 && kept < n * 7 / 10);
  fg_tensor_free(out[0]), fg_tensor_free(out[1]), fg_tensor_free(tr);
  fg_tensor_free(ct), fg_tensor_free(xt);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

/* A training graph: h = dropout(x @ w) ("h"), loss mean(h^2), SGD. */
static fg_graph *train_graph(const char **target) {
  fg_graph *g = fg_graph_new();
  const int64_t dx[2] = {4, 6}, dw[2] = {6, 5};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, dx);
  const fg_init ki = {FG_INIT_KAIMING_UNIFORM, 0, 0, 0, 21};
  fg_output w = fg_variable_init(g, "w", FG_F32, 2, dw, &ki);
  fg_output h =
      fg_set_name(g, fg_dropout(g, fg_matmul(g, x, w, 0, 0), fg_training(g), 0.5, 3), "h");
  fg_output loss = fg_reduce_mean(g, fg_mul(g, h, h), NULL, 0, 0);
  fg_set_name(g, loss, "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  fg_output t = fg_minimize(g, loss, NULL, 0, &cfg, NULL);
  *target = t.node >= 0 ? fg_node_name(g, t.node) : "";
  return g;
}

static fg_tensor *xrows(void) {
  const int64_t d[2] = {4, 6};
  fg_tensor *t = fg_tensor_new(FG_F32, 2, d, NULL);
  for (int i = 0; i < 24; i++)
    ((float *)fg_tensor_data(t))[i] = 0.5f + (float)(i % 6) * 0.25f; /* the 4 rows equal */
  return t;
}

/* Fetches "training" (and runs `target` when given), training fed as
 * `fed` (-1: not fed): the flag's value. */
static int mode_of(fg_session *s, const fg_tensor *x, const char *target, int fed) {
  fg_tensor *tr = bool_scalar(fed > 0), *out = NULL;
  fg_feed feeds[2] = {{"x", x}, {"training", tr}};
  const char *fetch = "training";
  fg_status *st = fg_status_new();
  int v = -1;
  if (fg_session_run(s, feeds, fed < 0 ? 1 : 2, &fetch, 1, &out, target ? &target : NULL,
                     target ? 1 : 0, st) == 0)
    v = *(const uint8_t *)fg_tensor_data(out);
  else
    fprintf(stderr, "mode run: %s\n", fg_status_message(st));
  fg_tensor_free(out);
  fg_tensor_free(tr);
  fg_status_free(st);
  return v;
}

/* Unfed, the flag is true exactly in runs that apply an update; a feed
 * overrides it. Training runs count; fg_session_save stores the count and
 * a session on the loaded file continues from it. */
FG_TEST(training_flag_default_and_saved_steps, "") {
  const char *target;
  fg_graph *g = train_graph(&target);
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_tensor *x = xrows();
  fg_session *s = session(g, 1);
  FG_REQUIRE(s != NULL);
  FG_CHECK_INT(mode_of(s, x, target, -1), 1); /* step 0 -> 1 */
  FG_CHECK_INT(mode_of(s, x, NULL, -1), 0);
  FG_CHECK_INT(mode_of(s, x, target, 0), 0);  /* fed false: no step */
  FG_CHECK_INT(mode_of(s, x, NULL, 1), 1);    /* fed true: step 1 -> 2 */
  FG_CHECK_INT(mode_of(s, x, target, -1), 1); /* step 2 -> 3 */
  char dir[256], path[300];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_dropout"));
  snprintf(path, sizeof path, "%s/steps.fgb", dir);
  FG_REQUIRE(fg_session_save(s, path, st) == 0);
  FG_CHECK(fg_graph_metadata(g, "training_steps") == NULL); /* the graph is unchanged */
  fg_graph *back = fg_graph_load(path, st);
  FG_REQUIRE(back != NULL);
  FG_REQUIRE(fg_graph_metadata(back, "training_steps") != NULL);
  FG_CHECK_STR_CONTAINS(fg_graph_metadata(back, "training_steps"), "3");
  /* The resumed session's next training run is step 3. */
  fg_session *r = session(back, 2);
  FG_REQUIRE(r != NULL);
  fg_tensor *tr = bool_scalar(1), *h = NULL;
  fg_feed feeds[2] = {{"x", x}, {"training", tr}};
  const char *fetch = "h";
  FG_REQUIRE(fg_session_run(r, feeds, 2, &fetch, 1, &h, NULL, 0, st) == 0);
  int bad = 0;
  for (int i = 0; i < 20; i++)
    bad += (((const float *)fg_tensor_data(h))[i] != 0) !=
           ref_keep(0.5, 3, fg_name_stream("h"), 3, 0, i);
  FG_CHECK_INT(bad, 0);
  /* Saving again: the file counts 4, the loaded graph still says 3. */
  FG_REQUIRE(fg_session_save(r, path, st) == 0);
  FG_CHECK(strcmp(fg_graph_metadata(back, "training_steps"), "3") == 0);
  fg_graph *again = fg_graph_load(path, st);
  FG_REQUIRE(again != NULL);
  FG_CHECK(strcmp(fg_graph_metadata(again, "training_steps"), "4") == 0);
  fg_graph_free(again);
  fgt_rmtree(dir);
  fg_tensor_free(h), fg_tensor_free(tr), fg_tensor_free(x);
  fg_session_free(r);
  fg_session_free(s);
  fg_graph_free(back);
  fg_graph_free(g);
  fg_status_free(st);
}

/* fg_data_parallel over cpu:0 and cpu:1: each replica's copy of the
 * dropout gets its own "replica" (the stream stays the original's), and
 * with equal rows and equal weights the replicas' outputs differ only by
 * their masks: they differ. */
FG_TEST(dropout_data_parallel_replicas_draw_their_own_masks, "") {
  const char *target;
  fg_graph *g = train_graph(&target);
  fg_status *st = fg_status_new();
  const char *batch = "x";
  fg_graph *dp = fg_data_parallel(g, 2, &batch, 1, NULL, st);
  if (!dp) FG_FAIL_AT("fg_data_parallel: %s", fg_status_message(st));
  FG_REQUIRE(dp != NULL);
  for (int r = 0; r < 2; r++) {
    char name[32];
    snprintf(name, sizeof name, "replica_%d/h", r);
    int id = fg_graph_find(dp, name);
    FG_REQUIRE(id >= 0);
    const fg_node *n = fg_graph_node(dp, id);
    FG_CHECK_INT(fg_attr_int_or(n, "replica", -1), r);
    FG_CHECK(fg_attr_int_or(n, "stream", -1) == (int64_t)fg_name_stream("h"));
  }
  /* Each replica's gradient recomputes that replica's mask. */
  int n_grad = 0;
  for (int id = 0; id < fg_graph_num_nodes(dp); id++) {
    const fg_node *n = fg_graph_node(dp, id);
    int r = -1;
    if (n->op != FG_OP_DROPOUT_GRAD) continue;
    n_grad++;
    FG_CHECK(sscanf(n->name, "replica_%d/", &r) == 1);
    FG_CHECK_INT(fg_attr_int_or(n, "replica", -1), r);
    FG_CHECK(fg_attr_int_or(n, "stream", -1) == (int64_t)fg_name_stream("h"));
  }
  FG_CHECK_INT(n_grad, 2);
  const char *dpt = fg_graph_metadata(dp, "train_target");
  fg_session *s = session(dp, 1);
  if (!s || !dpt) FG_FAIL_AT("session on the data-parallel graph: %s", fg_status_message(st));
  fg_tensor *x = xrows(), *out[2] = {NULL, NULL};
  fg_feed feed = {"x", x};
  const char *fetch[2] = {"replica_0/h", "replica_1/h"};
  FG_REQUIRE(s && fg_session_run(s, &feed, 1, fetch, 2, out, &dpt, 1, st) == 0);
  const float *a = fg_tensor_data(out[0]), *b = fg_tensor_data(out[1]);
  int diff = 0, bad = 0;
  for (int i = 0; i < 10; i++) {
    diff += (a[i] != 0) != (b[i] != 0);
    bad += (a[i] != 0) != ref_keep(0.5, 3, fg_name_stream("h"), 0, 0, i);
    bad += (b[i] != 0) != ref_keep(0.5, 3, fg_name_stream("h"), 0, 1, i);
  }
  FG_CHECK_INT(bad, 0);
  FG_CHECK(diff > 0);
  fg_tensor_free(out[0]), fg_tensor_free(out[1]), fg_tensor_free(x);
  fg_session_free(s);
  fg_graph_free(dp);
  fg_graph_free(g);
  fg_status_free(st);
}

/* fg_micro_batch with 2 micro-batches: each micro-batch's dropout and its
 * gradient carry replica k, so their masks differ; fg_data_parallel on top
 * numbers the copies micro-batch * 2 + replica. */
FG_TEST(dropout_micro_batches_draw_their_own_masks, "") {
  const char *target;
  fg_graph *g = train_graph(&target);
  fg_status *st = fg_status_new();
  const char *batch = "x";
  fg_graph *mb = fg_micro_batch(g, 2, &batch, 1, FG_DP_LOSS_MEAN, st);
  if (!mb) FG_FAIL_AT("fg_micro_batch: %s", fg_status_message(st));
  FG_REQUIRE(mb != NULL);
  int n_copies = 0;
  for (int id = 0; id < fg_graph_num_nodes(mb); id++) {
    const fg_node *n = fg_graph_node(mb, id);
    int k = -1;
    /* The whole-batch originals stay too, under their own names. */
    if ((n->op != FG_OP_DROPOUT && n->op != FG_OP_DROPOUT_GRAD) ||
        sscanf(n->name, "micro_batch_%d/", &k) != 1)
      continue;
    n_copies++;
    FG_CHECK_INT(fg_attr_int_or(n, "replica", -1), k);
  }
  FG_CHECK_INT(n_copies, 4);
  fg_session *s = session(mb, 1);
  const char *t = fg_graph_metadata(mb, "train_target");
  FG_REQUIRE(s && t);
  fg_tensor *x = xrows(), *out[2] = {NULL, NULL};
  fg_feed feed = {"x", x};
  const char *fetch[2] = {"micro_batch_0/h", "micro_batch_1/h"};
  FG_REQUIRE(fg_session_run(s, &feed, 1, fetch, 2, out, &t, 1, st) == 0);
  int bad = 0;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < 10; i++)
      bad += (((const float *)fg_tensor_data(out[k]))[i] != 0) !=
             ref_keep(0.5, 3, fg_name_stream("h"), 0, (uint32_t)k, i);
  FG_CHECK_INT(bad, 0);
  fg_graph *dp = fg_data_parallel(mb, 2, &batch, 1, NULL, st);
  if (!dp) FG_FAIL_AT("fg_data_parallel: %s", fg_status_message(st));
  FG_REQUIRE(dp != NULL);
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < 2; k++) {
      char name[64];
      snprintf(name, sizeof name, "replica_%d/micro_batch_%d/h", r, k);
      const int id = fg_graph_find(dp, name);
      FG_REQUIRE(id >= 0);
      FG_CHECK_INT(fg_attr_int_or(fg_graph_node(dp, id), "replica", -1), k * 2 + r);
    }
  fg_tensor_free(out[0]), fg_tensor_free(out[1]), fg_tensor_free(x);
  fg_session_free(s);
  fg_graph_free(dp);
  fg_graph_free(mb);
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- bad input ----------------------------------------------------------- */

/* dropout named "bad" on x (dt, [3]) and training (tdt, rank 0), with p and
 * stream; expects FG_INVALID_GRAPH naming the node and w1, w2. */
static void expect_bad(fg_dtype dt, fg_dtype tdt, double p, int64_t stream, const char *w1,
                       const char *w2) {
  fg_graph *g = fg_graph_new();
  fg_status *st = fg_status_new();
  const int64_t d[1] = {3};
  fg_output in[2] = {fg_placeholder(g, "x", dt, 1, d), fg_placeholder(g, "t", tdt, 0, NULL)};
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_float(a, "p", p);
  fg_attrs_set_int(a, "stream", stream);
  fg_op(g, "dropout", "bad", in, 2, a);
  fg_attrs_free(a);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'bad' (dropout)");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), w1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), w2);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(dropout_bad_inputs, "badinput") {
  expect_bad(FG_F32, FG_BOOL, 1.0, -1, "'p' = 1", "[0, 1)");
  expect_bad(FG_F32, FG_BOOL, -0.25, -1, "'p' = -0.25", "[0, 1)");
  expect_bad(FG_F32, FG_F32, 0.5, -1, "'training' is f32", "bool scalar");
  expect_bad(FG_I32, FG_BOOL, 0.5, -1, "'x' is i32", "f32 or f64");
  expect_bad(FG_F64, FG_BOOL, 0.5, -2, "'stream' = -2", "2^32");
  /* The builder reaches the same check. */
  fg_graph *g = fg_graph_new();
  fg_status *st = fg_status_new();
  const int64_t d[1] = {3};
  fg_dropout(g, fg_placeholder(g, "x", FG_F32, 1, d), fg_training(g), 1.0, 0);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'p' = 1");
  fg_graph_free(g);
  /* A node named "training" of another op. */
  g = fg_graph_new();
  fg_placeholder(g, "training", FG_BOOL, 0, NULL);
  fg_training(g);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'training' exists and is a placeholder");
  fg_graph_free(g);
  /* Feeding the flag anything but a bool scalar. */
  g = drop_graph(2, 2, 0.5);
  fg_session *s = session(g, 1);
  fg_tensor *x = ones(2, 2), *y = NULL, *bad = fg_tensor_new(FG_F32, 0, NULL, NULL);
  fg_feed feeds[2] = {{"x", x}, {"training", bad}};
  const char *fetch = "y";
  FG_CHECK(fg_session_run(s, feeds, 2, &fetch, 1, &y, NULL, 0, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "feed 'training' (training_flag)");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "expected bool [], given f32 []");
  feeds[1].tensor = NULL;
  FG_CHECK(fg_session_run(s, feeds, 2, &fetch, 1, &y, NULL, 0, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "given NULL tensor");
  fg_tensor_free(x), fg_tensor_free(bad);
  fg_session_free(s);
  fg_graph_free(g);
  /* The kernel refuses what a direct caller could pass. */
  float xv[4] = {1, 2, 3, 4}, yv[4];
  const fg_op_params p = dparams(1.0, 0, 0, 0);
  char err[200] = "";
  FG_CHECK(run_kernel("dropout", FG_F32, 4, xv, yv, 1, &p, 0, 0, err) != 0);
  FG_CHECK_STR_CONTAINS(err, "p = 1 is outside [0, 1)");
  fg_status_free(st);
}

/* ---- the GPU against the CPU --------------------------------------------- */

/* Sizes with partial blocks and one spanning many thread blocks, both
 * modes, dropout and dropout_grad: bit for bit (the mask is integer
 * arithmetic, the product one rounding on both sides). */
FG_TEST(cuda_dropout_vs_cpu, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  FG_SKIP_NO_CUDA_DEVICE();
  cudaStream_t stream;
  FG_REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  const int64_t sizes[4] = {1, 7, 4099, 1000003};
  const char *ops[2] = {"dropout", "dropout_grad"};
  for (int o = 0; o < 2; o++)
    for (int k = 0; k < 2; k++)
      for (int s = 0; s < 4; s++)
        for (int train = 0; train < 2; train++) {
          const fg_dtype dt = k ? FG_F64 : FG_F32;
          const int64_t n = sizes[s];
          const size_t bytes = (size_t)n * fg_dtype_size(dt);
          const fg_op_params p = dparams(0.3, -77, 0xabcdef01ll, 5);
          unsigned char *x = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes);
          void *dx = NULL, *dy = NULL, *dt_flag = NULL;
          FG_REQUIRE(x && want && got);
          for (int64_t i = 0; i < n; i++) {
            const double v = sin((double)i * 0.37) * 5.0;
            if (k)
              ((double *)x)[i] = v;
            else
              ((float *)x)[i] = (float)v;
          }
          char err[200] = "";
          FG_REQUIRE(run_kernel(ops[o], dt, n, x, want, train, &p, 12345, 3, err) == 0);
          uint8_t tv = (uint8_t)train;
          FG_REQUIRE(cudaMalloc(&dx, bytes) == cudaSuccess &&
                     cudaMalloc(&dy, bytes) == cudaSuccess &&
                     cudaMalloc(&dt_flag, 1) == cudaSuccess);
          FG_REQUIRE(cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
          FG_REQUIRE(cudaMemcpy(dt_flag, &tv, 1, cudaMemcpyHostToDevice) == cudaSuccess);
          fg_kbuf in[2] = {{dt, 1, {n}, dx, 0}, {FG_BOOL, 0, {0}, dt_flag, 0}};
          fg_kbuf out = {dt, 1, {n}, dy, 0};
          fg_kcuda kc = {stream, NULL, NULL, 0, NULL, 0};
          fg_kctx ctx = {in,   2,    &out,  1, &p, err, sizeof err, NULL, &kc, NULL,
                         NULL, NULL, 12345, 3, 0,  0,   0,          0,    NULL};
          fg_kernel_fn fn = fg_cuda_kernel(ops[o], dt);
          FG_REQUIRE(fn != NULL);
          if (fn(&ctx) != 0) FG_FAIL_AT("%s: %s", ops[o], err);
          FG_REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
          FG_REQUIRE(cudaMemcpy(got, dy, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
          if (memcmp(got, want, bytes) != 0)
            FG_FAIL_AT("%s %s n=%lld training=%d: GPU differs from CPU", ops[o], fg_dtype_name(dt),
                       (long long)n, train);
          cudaFree(dx), cudaFree(dy), cudaFree(dt_flag);
          free(x), free(want), free(got);
        }
  cudaStreamDestroy(stream);
#endif
}

/* A cuda:0 session runs the training graph's dropout with the CPU's mask,
 * steps advancing per training run (no CUDA Graph freezes them). */
FG_TEST(cuda_dropout_session_matches_cpu, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  FG_SKIP_NO_CUDA_DEVICE();
  const int64_t rows = 64, cols = 129, n = rows * cols;
  fg_graph *g = drop_graph(rows, cols, 0.5);
  fg_tensor *x = ones(rows, cols);
  fg_session *cpu = session(g, 2);
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = "cuda:0";
  fg_status *st = fg_status_new();
  fg_session *gpu = fg_session_new(g, &o, st);
  if (!gpu) FG_FAIL_AT("cuda session: %s", fg_status_message(st));
  FG_REQUIRE(cpu && gpu);
  for (int run = 0; run < 4; run++) {
    fg_tensor *a = fetch_y(cpu, x, 1), *b = fetch_y(gpu, x, 1);
    FG_REQUIRE(a && b);
    if (memcmp(fg_tensor_data(a), fg_tensor_data(b), (size_t)n * 4) != 0)
      FG_FAIL_AT("run %d: the GPU's dropout differs from the CPU's", run);
    fg_tensor_free(a), fg_tensor_free(b);
  }
  fg_tensor_free(x);
  fg_session_free(cpu);
  fg_session_free(gpu);
  fg_status_free(st);
  fg_graph_free(g);
#endif
}
