/* Data parallelism with gradient clipping by global norm (fg_minimize's
 * clip_global_norm), as PyTorch DDP + clip_grad_norm_ does it: the
 * all_reduce runs on the raw gradients and every replica clips the
 * averaged ones, so all replicas compute the same norm and stay equal.
 * Reference: the single-device run of the same graph on the full batch (no
 * shard, no all_reduce); the norm that makes clipping active is computed
 * here from the fetched raw gradients, and at step 0 also by NumPy from the
 * initial weights and the batch (an independent forward/backward pass). */
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fgtest.h"
#include "test_dist_util.h"

extern char **environ;

#define STEPS 6
#define BATCH 64
/* The digits MLP's raw gradient norm stays well above this during the
 * first steps (checked every step below), so every step is clipped. */
#define CLIP 0.05

static const char *const batch_names[2] = {"x", "y"};

/* dist_mlp's model and initialisation with clipping (and optionally
 * weight decay) in fg_minimize. */
static fg_graph *clip_mlp(fg_dtype dt, fg_optimizer_kind opt, double lr, double clip, double wd) {
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, opt);
  cfg.learning_rate = lr;
  cfg.clip_global_norm = clip;
  if (wd > 0) cfg.weight_decay = wd;
  return dist_mlp_cfg(dt, &cfg, NULL, NULL);
}

static int starts_with(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Fetch names of the raw gradients (outputs of fg_gradients) that the clip
 * chain reads, one per update: an update's gradient input is the clip's
 * mul(raw, scale), or add(that, wd * var) for Adam's L2 term. 0 or -1. */
static int raw_grad_names(const fg_graph *g, char names[][256], int *n) {
  *n = 0;
  for (int i = 0; i < fg_graph_num_nodes(g); i++) {
    const char *op = fg_node_op(g, i);
    int gi = strcmp(op, "apply_sgd") == 0        ? 1
             : strcmp(op, "apply_momentum") == 0 ? 2
             : strcmp(op, "apply_adam") == 0     ? 3
                                                 : -1;
    if (gi < 0) continue;
    fg_output o = fg_node_input(g, i, gi);
    if (strcmp(fg_node_op(g, o.node), "add") == 0) o = fg_node_input(g, o.node, 0);
    if (strcmp(fg_node_op(g, o.node), "mul") != 0) return -1;
    o = fg_node_input(g, o.node, 0);
    if (!starts_with(fg_node_name(g, o.node), "gradients")) return -1;
    if (o.index)
      snprintf(names[*n], 256, "%s:%d", fg_node_name(g, o.node), o.index);
    else
      snprintf(names[*n], 256, "%s", fg_node_name(g, o.node));
    (*n)++;
  }
  return *n == 6 ? 0 : -1;
}

/* sqrt of the sum of squares of every element of ts[0..n). */
static double global_norm(fg_tensor *const *ts, int n) {
  double ss = 0;
  for (int t = 0; t < n; t++)
    for (int64_t i = 0; i < fg_tensor_num_elements(ts[t]); i++) {
      double v = fg_tensor_dtype(ts[t]) == FG_F32 ? ((const float *)fg_tensor_data(ts[t]))[i]
                                                  : ((const double *)fg_tensor_data(ts[t]))[i];
      ss += v * v;
    }
  return sqrt(ss);
}

/* Trains the single-device clipped graph and its data-parallel rewrite on
 * the same batches, checking every step that the raw gradients' global
 * norm exceeds CLIP (clipping is active), then compares per-step losses
 * and final variables (relative to each tensor's scale) within tol, and
 * every replica's copy of every variable with replica 0's, bit for bit. */
static void compare_clip(fg_dtype dt, fg_optimizer_kind opt, double lr, double wd, int replicas,
                         double tol) {
  fg_status *st = fg_status_new();
  fg_graph *g = clip_mlp(dt, opt, lr, CLIP, wd);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  char gnames[6][256];
  int ng = 0;
  FG_REQUIRE(raw_grad_names(g, gnames, &ng) == 0);
  fg_graph *dg = fg_data_parallel(g, replicas, batch_names, 2, NULL, st);
  if (!dg) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(dg);
  fg_session *s1, *sn;
  FG_REQUIRE(dist_dp_sessions(g, dg, replicas, &s1, &sn, st) == 0);
  double l1[STEPS], ln[STEPS], min_norm = INFINITY;
  for (int k = 0; k < STEPS; k++) {
    fg_tensor *x, *y;
    FG_REQUIRE(dist_batch(dt, (k * BATCH) % (1400 - BATCH), BATCH, &x, &y) == 0);
    fg_feed feeds[2] = {{"x", x}, {"y", y}};
    const char *fetch[7] = {"loss"}, *target = "train";
    for (int j = 0; j < ng; j++)
      fetch[1 + j] = gnames[j];
    fg_tensor *out[7] = {NULL};
    int rc1 = fg_session_run(s1, feeds, 2, fetch, 1 + ng, out, &target, 1, st);
    if (rc1) fprintf(stderr, "%s\n", fg_status_message(st));
    fg_tensor *lo = NULL;
    int rcn = rc1 ? -1 : fg_session_run(sn, feeds, 2, fetch, 1, &lo, &target, 1, st);
    if (rcn) fprintf(stderr, "%s\n", fg_status_message(st));
    fg_tensor_free(x);
    fg_tensor_free(y);
    if (rc1 == 0) {
      double norm = global_norm(out + 1, ng);
      min_norm = fmin(min_norm, norm);
      if (!(norm > 2 * CLIP))
        FG_FAIL_AT("step %d: gradient norm %g is not above 2 x clip", k, norm);
      l1[k] = dt == FG_F32 ? *(const float *)fg_tensor_data(out[0])
                           : *(const double *)fg_tensor_data(out[0]);
    }
    if (rcn == 0)
      ln[k] =
          dt == FG_F32 ? *(const float *)fg_tensor_data(lo) : *(const double *)fg_tensor_data(lo);
    for (int j = 0; j < 7; j++)
      fg_tensor_free(out[j]);
    fg_tensor_free(lo);
    FG_REQUIRE(rc1 == 0 && rcn == 0);
  }
  double worst_loss = 0;
  for (int k = 0; k < STEPS; k++) {
    FG_CHECK_NEAR(ln[k], l1[k], tol);
    worst_loss = fmax(worst_loss, fabs(ln[k] - l1[k]) / fabs(l1[k]));
  }
  FG_CHECK(l1[STEPS - 1] < l1[0]); /* it learns, clipped */
  double worst_var = dist_check_dp_vars(sn, s1, replicas, tol);
  printf("%s, %d replicas: smallest raw gradient norm %.4g (clip %g), loss %.4g -> %.4g, "
         "worst relative loss difference %.3g, worst variable difference %.3g\n",
         dt == FG_F32 ? "f32" : "f64", replicas, min_norm, CLIP, l1[0], l1[STEPS - 1], worst_loss,
         worst_var);
  fg_session_free(s1);
  fg_session_free(sn);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_clip_digits_f32_1_replica, "dist") {
  compare_clip(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, 0, 1, 1e-5);
}
FG_TEST(dist_clip_digits_f32_2_replicas, "dist") {
  compare_clip(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, 0, 2, 1e-5);
}
FG_TEST(dist_clip_digits_f32_4_replicas, "dist") {
  compare_clip(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, 0, 4, 1e-5);
}
FG_TEST(dist_clip_digits_f32_4_replicas_sgd, "dist") {
  compare_clip(FG_F32, FG_OPTIMIZER_SGD, 0.5, 0, 4, 1e-5);
}
/* Adam's L2 term adds wd * var after the clip: the path from fg_gradients
 * to the update also reads a variable. */
FG_TEST(dist_clip_digits_f32_4_replicas_adam_weight_decay, "dist") {
  compare_clip(FG_F32, FG_OPTIMIZER_ADAM, 2e-3, 0.01, 4, 1e-5);
}
FG_TEST(dist_clip_digits_f64_1_replica, "dist") {
  compare_clip(FG_F64, FG_OPTIMIZER_SGD, 0.5, 0, 1, 1e-10);
}
FG_TEST(dist_clip_digits_f64_2_replicas, "dist") {
  compare_clip(FG_F64, FG_OPTIMIZER_ADAM, 2e-3, 0, 2, 1e-10);
}
FG_TEST(dist_clip_digits_f64_4_replicas, "dist") {
  compare_clip(FG_F64, FG_OPTIMIZER_MOMENTUM, 0.5, 0, 4, 1e-10);
}

/* Each raw gradient is all-reduced once (the clip's norm and its scaling
 * read the same reduced tensor), and no node of the clip chain reads a
 * replica's own (unreduced) gradient. */
FG_TEST(dist_clip_reduces_each_gradient_once, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = clip_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, CLIP, 0);
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  o.bucket_bytes = 1; /* one bucket per gradient */
  fg_graph *dg = fg_data_parallel(g, 2, batch_names, 2, &o, st);
  if (!dg) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(dg);
  FG_CHECK_INT(atoi(fg_graph_metadata(dg, "data_parallel_buckets")), 6);
  int n_ar = 0, n_clip_reads = 0;
  for (int n = 0; n < fg_graph_num_nodes(dg); n++) {
    n_ar += strcmp(fg_node_op(dg, n), "all_reduce") == 0;
    const char *name = fg_node_name(dg, n);
    if (!starts_with(name, "replica_") || !strstr(name, "/train/")) continue;
    /* An update's "wait" group only orders it after its variable's readers
     * (some of them gradient nodes); it reads no values. */
    if (strcmp(fg_node_op(dg, n), "group") == 0) continue;
    for (int k = 0; k < fg_node_num_inputs(dg, n); k++) {
      const char *in = fg_node_name(dg, fg_node_input(dg, n, k).node);
      if (strstr(in, "/gradients")) FG_FAIL_AT("clip node %s reads unreduced %s", name, in);
      n_clip_reads += strstr(in, "/data_parallel/") != NULL;
    }
  }
  FG_CHECK_INT(n_ar, 2 * (6 + 1)); /* + each replica's row count */
  /* Per replica and gradient: the norm's cast and the scaling's mul. */
  FG_CHECK_INT(n_clip_reads, 2 * 6 * 2);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The forward and backward pass of the MLP written out in NumPy. Exit
 * status 3 means NumPy cannot be imported (NUMPY_MISSING), the one reason
 * besides a missing interpreter for the check not to run. */
enum { NUMPY_MISSING = 3 };
static const char *const numpy_norm =
    "import sys\n"
    "try:\n"
    "    import numpy as np\n"
    "except ImportError:\n"
    "    sys.exit(3)\n"
    "d = sys.argv[1]\n"
    "L = lambda n: np.load(d + '/' + n + '.npy').astype(np.float64)\n"
    "x, y = L('x'), np.load(d + '/y.npy').astype(np.int64)\n"
    "w1, b1, w2, b2, w3, b3 = [L(n) for n in ('w1', 'b1', 'w2', 'b2', 'w3', 'b3')]\n"
    "z1 = x @ w1 + b1; h1 = np.maximum(z1, 0)\n"
    "z2 = h1 @ w2 + b2; h2 = np.maximum(z2, 0)\n"
    "z3 = h2 @ w3 + b3\n"
    "m = z3.max(1, keepdims=True); e = np.exp(z3 - m); p = e / e.sum(1, keepdims=True)\n"
    "n = x.shape[0]\n"
    "loss = -np.mean(np.log(p[np.arange(n), y]))\n"
    "g3 = p.copy(); g3[np.arange(n), y] -= 1; g3 /= n\n"
    "gw3, gb3 = h2.T @ g3, g3.sum(0)\n"
    "g2 = (g3 @ w3.T) * (z2 > 0)\n"
    "gw2, gb2 = h1.T @ g2, g2.sum(0)\n"
    "g1 = (g2 @ w2.T) * (z1 > 0)\n"
    "gw1, gb1 = x.T @ g1, g1.sum(0)\n"
    "norm = np.sqrt(sum((t * t).sum() for t in (gw1, gb1, gw2, gb2, gw3, gb3)))\n"
    "open(d + '/out.txt', 'w').write('%.17g %.17g\\n' % (norm, loss))\n";

/* The global norm at step 0 that the clip sees, from the fetched raw
 * gradients, equals NumPy's and exceeds the clip. */
FG_TEST(dist_clip_norm_matches_numpy, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = clip_mlp(FG_F64, FG_OPTIMIZER_SGD, 0.5, CLIP, 0);
  char gnames[6][256];
  int ng = 0;
  FG_REQUIRE(raw_grad_names(g, gnames, &ng) == 0);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  char dir[256];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_dist_clip"));
  char path[512];
  const char *files[6] = {"w1", "b1", "w2", "b2", "w3", "b3"};
  for (int v = 0; v < 6; v++) {
    fg_tensor *t = fg_session_variable(s, dist_var_names[v], st);
    FG_REQUIRE(t);
    snprintf(path, sizeof path, "%s/%s.npy", dir, files[v]);
    FG_CHECK(fg_npy_write(path, t, st) == 0);
    fg_tensor_free(t);
  }
  fg_tensor *x, *y;
  FG_REQUIRE(dist_batch(FG_F64, 0, BATCH, &x, &y) == 0);
  snprintf(path, sizeof path, "%s/x.npy", dir);
  FG_CHECK(fg_npy_write(path, x, st) == 0);
  snprintf(path, sizeof path, "%s/y.npy", dir);
  FG_CHECK(fg_npy_write(path, y, st) == 0);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *fetch[7] = {"loss"};
  for (int j = 0; j < ng; j++)
    fetch[1 + j] = gnames[j];
  fg_tensor *out[7] = {NULL};
  FG_REQUIRE(fg_session_run(s, feeds, 2, fetch, 7, out, NULL, 0, st) == 0);
  double norm = global_norm(out + 1, ng), loss = *(const double *)fg_tensor_data(out[0]);
  for (int j = 0; j < 7; j++)
    fg_tensor_free(out[j]);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
  int py = fgt_python(numpy_norm, dir, NULL);
  double np_norm = -1, np_loss = -1;
  snprintf(path, sizeof path, "%s/out.txt", dir);
  FILE *f = py == 0 ? fopen(path, "r") : NULL;
  int got = f && fscanf(f, "%lg %lg", &np_norm, &np_loss) == 2;
  if (f) fclose(f);
  fgt_rmtree(dir);
  if (py == FGT_PY_MISSING || py == NUMPY_MISSING)
    FG_SKIP("no %s with NumPy: the NumPy norm check did not run", FG_PYTHON);
  FG_CHECK_PYTHON(py);
  FG_REQUIRE(got);
  FG_CHECK_NEAR(loss, np_loss, 1e-12);
  FG_CHECK_NEAR(norm, np_norm, 1e-10);
  FG_CHECK(np_norm > 2 * CLIP);
}

/* An update whose gradient input derives from no fg_gradients output has
 * nothing to all-reduce: refused, naming the update and the node. */
FG_TEST(dist_clip_refuses_gradient_not_from_gradients, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d1[1] = {2};
  double v0[2] = {1, 2}, c0[2] = {0.5, 0.25};
  fg_tensor *vt = fg_tensor_from_data(FG_F64, 1, d1, v0, sizeof v0, st);
  fg_tensor *ct = fg_tensor_from_data(FG_F64, 1, d1, c0, sizeof c0, st);
  fg_output v = fg_variable(g, "v", vt);
  fg_set_name(g, fg_reduce_sum(g, fg_mul(g, v, v), NULL, 0, 0), "loss");
  fg_output fake = fg_mul(g, fg_constant(g, "fake_grad", ct), fg_scalar(g, FG_F64, 2.0));
  fg_set_name(g, fake, "scaled_fake_grad");
  fg_output in[3] = {v, fake, fg_scalar(g, FG_F64, 0.1)};
  fg_op(g, "apply_sgd", "my_update", in, 3, NULL);
  fg_graph_set_metadata(g, "loss", "loss");
  fg_graph_set_metadata(g, "train_target", "my_update");
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  for (int r = 1; r <= 2; r++) {
    FG_CHECK(fg_data_parallel(g, r, NULL, 0, NULL, st) == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "'my_update'");
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "'scaled_fake_grad'");
  }
  fg_tensor_free(vt);
  fg_tensor_free(ct);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A gradient scaled by something computed from a batch input differs per
 * replica even after the all_reduce: refused, naming the update and the
 * batch input. */
FG_TEST(dist_clip_refuses_batch_input_after_gradients, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d1[1] = {2}, xd[2] = {FG_DIM_UNKNOWN, 2};
  double v0[2] = {1, 2};
  fg_tensor *vt = fg_tensor_from_data(FG_F64, 1, d1, v0, sizeof v0, st);
  fg_output v = fg_variable(g, "v", vt);
  fg_output x = fg_placeholder(g, "xb", FG_F64, 2, xd);
  fg_output loss = fg_set_name(g, fg_reduce_mean(g, fg_mul(g, x, v), NULL, 0, 0), "loss");
  fg_output grad;
  FG_REQUIRE(fg_gradients(g, &loss, 1, &v, 1, NULL, &grad, st) == 0);
  fg_output scaled = fg_mul(g, grad, fg_reduce_mean(g, x, NULL, 0, 0));
  fg_output in[3] = {v, scaled, fg_scalar(g, FG_F64, 0.1)};
  fg_op(g, "apply_sgd", "upd_v", in, 3, NULL);
  fg_graph_set_metadata(g, "loss", "loss");
  fg_graph_set_metadata(g, "train_target", "upd_v");
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  const char *batch[1] = {"xb"};
  FG_CHECK(fg_data_parallel(g, 2, batch, 1, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'upd_v'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'xb'");
  /* Not a batch input (shared by every replica): accepted. */
  fg_graph *dg = fg_data_parallel(g, 2, NULL, 0, NULL, st);
  if (!dg) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_CHECK(dg != NULL);
  fg_graph_free(dg);
  fg_tensor_free(vt);
  fg_graph_free(g);
  fg_status_free(st);
}
