/* fg_micro_batch (label dist): GPipe-style micro-batches. The digits MLP
 * split over cpu:0 (layers 1-2) and cpu:1 (layer 3, the loss), cut into
 * micro-batches, must train like one device on the full batch: the
 * reference is that plain run, a different computation (one matmul over
 * all rows instead of the rows-weighted sum of per-shard gradients), so the
 * tolerance is rounding's: 1e-5 relative in f32, 1e-12 in f64. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "graph/graph_internal.h"
#include "test_dist_util.h"

#define STEPS 5

static const char *const batch_xy[2] = {"x", "y"};

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

/* Trains `steps` steps of `batches` rows (NULL: 64) on the plain graph and
 * on its micro-batched, model-parallel twin; compares losses and every
 * variable. */
static void check_matches_full_batch_opts(fg_dtype dt, const fg_optimizer_config *cfg, int micro,
                                          const int *batches, const fg_micro_batch_options *o) {
  fg_status *st = fg_status_new();
  fg_graph *g1 = dist_mlp_cfg(dt, cfg, NULL, NULL);
  fg_graph *g2 = dist_mlp_cfg(dt, cfg, "cpu:0", "cpu:1");
  fg_graph *mg = fg_micro_batch_ex(g2, micro, batch_xy, 2, o, st);
  if (!mg) fprintf(stderr, "fg_micro_batch: %s\n", fg_status_message(st));
  FG_REQUIRE(mg != NULL);
  fg_session *s1 = fg_session_new(g1, NULL, st), *s2 = fg_session_new(mg, NULL, st);
  if (!s2) fprintf(stderr, "session: %s\n", fg_status_message(st));
  FG_REQUIRE(s1 && s2);
  FG_CHECK_INT(fg_partition_num_devices(fg_session_partition(s2)), 2);
  double l1[STEPS], l2[STEPS];
  FG_REQUIRE(dist_train_batches(s1, dt, STEPS, batches, 64, l1, st) == 0);
  int rc = dist_train_batches(s2, dt, STEPS, batches, 64, l2, st);
  if (rc != 0) fprintf(stderr, "micro-batched run: %s\n", fg_status_message(st));
  FG_REQUIRE(rc == 0);
  double tol = dt == FG_F32 ? 1e-5 : 1e-12;
  for (int k = 0; k < STEPS; k++) {
    FG_CHECK(rel(l2[k], l1[k]) < tol);
    if (rel(l2[k], l1[k]) >= tol) fprintf(stderr, "step %d: %.17g vs %.17g\n", k, l2[k], l1[k]);
  }
  /* It trained: the loss moved. */
  FG_CHECK(fabs(l1[STEPS - 1] - l1[0]) > 1e-3);
  for (int v = 0; v < 6; v++) {
    double dv = dist_var_diff(s2, dist_var_names[v], s1, dist_var_names[v]);
    FG_CHECK(dv >= 0 && dv < tol);
    if (!(dv >= 0 && dv < tol)) fprintf(stderr, "%s: %g\n", dist_var_names[v], dv);
  }
  fg_session_free(s1);
  fg_session_free(s2);
  fg_graph_free(g1);
  fg_graph_free(g2);
  fg_graph_free(mg);
  fg_status_free(st);
}

static void check_matches_full_batch(fg_dtype dt, const fg_optimizer_config *cfg, int micro,
                                     const int *batches, int loss_sum) {
  fg_micro_batch_options o;
  fg_micro_batch_options_init(&o);
  o.loss_reduction = loss_sum;
  check_matches_full_batch_opts(dt, cfg, micro, batches, &o);
}

static void sgd(fg_optimizer_config *c) {
  fg_optimizer_config_init(c, FG_OPTIMIZER_SGD);
  c->learning_rate = 0.1;
}

FG_TEST(micro_batch_4_matches_full_batch_f32, "dist") {
  fg_optimizer_config c;
  sgd(&c);
  check_matches_full_batch(FG_F32, &c, 4, NULL, FG_DP_LOSS_MEAN);
}

FG_TEST(micro_batch_4_matches_full_batch_f64, "dist") {
  fg_optimizer_config c;
  sgd(&c);
  check_matches_full_batch(FG_F64, &c, 4, NULL, FG_DP_LOSS_MEAN);
}

/* Batches of 30, 7 and 64 rows over 3 micro-batches: 10+10+10, 3+2+2,
 * 22+21+21; the rows-weighted sum is still the full batch's gradient. */
FG_TEST(micro_batch_uneven_rows_match_full_batch, "dist") {
  static const int batches[STEPS] = {30, 7, 64, 31, 9};
  fg_optimizer_config c;
  sgd(&c);
  check_matches_full_batch(FG_F64, &c, 3, batches, FG_DP_LOSS_MEAN);
}

/* Adam with clipping by global norm: the clip runs once, on the combined
 * gradients (as clip_grad_norm_ after accumulating in PyTorch), and Adam's
 * L2 term (inside apply_adam, attribute l2) is applied once. */
FG_TEST(micro_batch_adam_clipped_matches_full_batch, "dist") {
  fg_optimizer_config c;
  fg_optimizer_config_init(&c, FG_OPTIMIZER_ADAM);
  c.learning_rate = 2e-3;
  c.clip_global_norm = 0.5;
  c.weight_decay = 1e-3;
  check_matches_full_batch(FG_F64, &c, 4, NULL, FG_DP_LOSS_MEAN);
}

/* 8 micro-batches over 2 stages: at most 4 in flight (micro-batch k + 4
 * starts on a device once k is done there), and the step is still the
 * full batch's. */
FG_TEST(micro_batch_8_bounded_matches_full_batch_f64, "dist") {
  fg_optimizer_config c;
  sgd(&c);
  check_matches_full_batch(FG_F64, &c, 8, NULL, FG_DP_LOSS_MEAN);
}

/* The arena of each device of the digits MLP split over cpu:0 / cpu:1,
 * micro-batched M ways, for a step of 256 rows. */
static void arenas_in_flight(int micro, int in_flight, size_t out[2]) {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  fg_micro_batch_options o;
  fg_micro_batch_options_init(&o);
  o.max_in_flight = in_flight;
  fg_graph *mg = fg_micro_batch_ex(g, micro, batch_xy, 2, &o, st);
  fg_session *s = mg ? fg_session_new(mg, NULL, st) : NULL;
  fg_tensor *x = NULL, *y = NULL;
  FG_REQUIRE(s && dist_batch(FG_F32, 0, 256, &x, &y) == 0);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *target = "train";
  fg_plan_info *pi = fg_session_plan_info(s, feeds, 2, NULL, 0, &target, 1, st);
  if (!pi) fprintf(stderr, "plan: %s\n", fg_status_message(st));
  FG_REQUIRE(pi && pi->n_devices == 2);
  out[0] = pi->device_arena_bytes[0];
  out[1] = pi->device_arena_bytes[1];
  fg_plan_info_free(pi);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_session_free(s);
  fg_graph_free(mg);
  fg_graph_free(g);
  fg_status_free(st);
}

static void arenas(int micro, size_t out[2]) { arenas_in_flight(micro, 0, out); }

/* With every micro-batch in flight, each device's arena held all of their
 * activations and weight gradients at once, growing with M (cpu:1: 897 KB
 * at M = 4, 1755 KB at 16, measured before the bound). Bounded to 4 in
 * flight, micro-batch k + 4 reuses k's buffers, so more micro-batches of
 * fewer rows take less, not more: M = 32 below M = 8 on both devices. */
FG_TEST(micro_batch_memory_bounded_in_flight, "dist") {
  size_t m8[2], m32[2];
  arenas(8, m8);
  arenas(32, m32);
  for (int dev = 0; dev < 2; dev++) {
    FG_CHECK(m32[dev] < m8[dev]);
    if (m32[dev] >= m8[dev])
      fprintf(stderr, "cpu:%d: M=32 %zu bytes, M=8 %zu bytes\n", dev, m32[dev], m8[dev]);
  }
}

/* One weight w [N, N] f32 (256 KB), x [rows, N] fed, the loss the mean of
 * (x w)^2, SGD, on one device: its weight gradient is the step's only
 * large buffer (the arena holds no variable). Each micro-batch's gradient
 * g_k is scaled by its row share and added to the running sum. With the
 * term computed in g_k's bytes and the sum added in place, what is alive at
 * most is the sum and the gradients of the 2 micro-batches in flight on
 * one stage: 3 x 256 KB plus the small activations (824,320 bytes
 * measured at M = 8). Before, fg_minimize's "every gradient before any
 * update" group was copied per micro-batch and read g_k unordered with its
 * term, so each term took new bytes: 1,332,288 at M = 8, 1,366,080 at 16,
 * over the 4 x 256 KB this allows. */
enum { WIDE_N = 256 };
static size_t wide_arena(int micro) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {-1, WIDE_N}, wd[2] = {WIDE_N, WIDE_N};
  fg_tensor *w0 = fg_tensor_new(FG_F32, 2, wd, NULL);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output w = fg_variable(g, "w", w0);
  fg_output h = fg_matmul(g, x, w, 0, 0);
  fg_output loss = fg_reduce_mean(g, fg_mul(g, h, h), NULL, 0, 0);
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  const char *bx[1] = {"x"};
  fg_graph *mg = fg_minimize(g, loss, NULL, 0, &cfg, st).node < 0 ? NULL
                 : micro > 1 ? fg_micro_batch(g, micro, bx, 1, FG_DP_LOSS_MEAN, st)
                             : g;
  fg_session *s = mg ? fg_session_new(mg, NULL, st) : NULL;
  int64_t fd[2] = {4 * micro, WIDE_N};
  fg_tensor *xt = fg_tensor_new(FG_F32, 2, fd, NULL);
  fg_feed feeds[1] = {{"x", xt}};
  const char *target = "train";
  fg_plan_info *pi = s ? fg_session_plan_info(s, feeds, 1, NULL, 0, &target, 1, st) : NULL;
  /* 0 (which the test refuses) when any step failed. */
  if (!pi) fprintf(stderr, "M=%d: %s\n", micro, fg_status_message(st));
  size_t bytes = pi ? pi->arena_bytes : 0;
  fg_plan_info_free(pi);
  fg_tensor_free(xt);
  fg_tensor_free(w0);
  fg_session_free(s);
  if (mg && mg != g) fg_graph_free(mg);
  fg_graph_free(g);
  fg_status_free(st);
  return bytes;
}

FG_TEST(micro_batch_gradient_terms_in_place, "dist") {
  const size_t wbytes = (size_t)WIDE_N * WIDE_N * 4;
  for (int m = 4; m <= 16; m *= 2) {
    size_t a = wide_arena(m);
    FG_CHECK(a >= wbytes && a <= 4 * wbytes + 16384);
    if (getenv("FG_TEST_VERBOSE") || a > 4 * wbytes + 16384)
      fprintf(stderr, "M=%d: %zu bytes\n", m, a);
  }
  /* One step without micro-batches stores no weight gradient at all:
   * update_epilogue adds it into w in its GEMM (the arena holds no
   * variable). */
  FG_CHECK(wide_arena(1) < wbytes);
}

/* An update runs once per step, over the combined gradients, and waits
 * (its control input, fg_minimize's group of the nodes that read its
 * variable) for those reads in every micro-batch: one group per
 * micro-batch of that micro-batch's reads, gathered by one group. */
FG_TEST(micro_batch_update_waits_for_every_copy, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  fg_graph *mg = fg_micro_batch(g, 8, batch_xy, 2, FG_DP_LOSS_MEAN, st);
  FG_REQUIRE(mg != NULL);
  int updates = 0;
  for (int i = 0; i < mg->n_nodes; i++) {
    const fg_node *nd = &mg->nodes[i];
    if (strncmp(fg_node_op(mg, i), "apply_", 6) != 0) continue;
    updates++;
    if (strncmp(nd->name, "micro_batch_", 12) == 0)
      FG_FAIL_AT("update '%s' is copied per micro-batch", nd->name);
    FG_CHECK(strncmp(mg->nodes[nd->inputs[1].node].name, "gradients/micro_batch/", 22) == 0);
    const int var = nd->inputs[0].node, c = nd->inputs[nd->n_inputs - 1].node;
    const fg_node *ctrl = &mg->nodes[c];
    FG_CHECK(strcmp(fg_node_op(mg, c), "group") == 0);
    FG_REQUIRE(ctrl->n_inputs == 8);
    for (int k = 0; k < ctrl->n_inputs; k++) {
      const fg_node *per = &mg->nodes[ctrl->inputs[k].node];
      char prefix[32];
      snprintf(prefix, sizeof prefix, "micro_batch_%d/", k);
      FG_CHECK(strncmp(per->name, prefix, strlen(prefix)) == 0);
      FG_CHECK(strcmp(fg_node_op(mg, ctrl->inputs[k].node), "group") == 0);
      FG_CHECK(per->n_inputs >= 1);
      /* Each is a read of the update's variable in micro-batch k. */
      for (int q = 0; q < per->n_inputs; q++) {
        const fg_node *rd = &mg->nodes[per->inputs[q].node];
        int reads = 0;
        for (int j = 0; j < rd->n_inputs; j++)
          reads |= rd->inputs[j].node == var;
        FG_CHECK(reads && strncmp(rd->name, prefix, strlen(prefix)) == 0);
      }
    }
  }
  FG_CHECK_INT(updates, 6);
  fg_graph_free(g);
  fg_graph_free(mg);
  fg_status_free(st);
}

static void ancestors(const fg_graph *g, int i, char *seen);

/* The gates: micro-batch 4 starts on each device after micro-batch 0's
 * gate there, and waits for nothing of micro-batches 1 to 3 (they stay in
 * flight together); micro-batch 3 waits for no other micro-batch. */
FG_TEST(micro_batch_gates_shape, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  fg_graph *mg = fg_micro_batch(g, 8, batch_xy, 2, FG_DP_LOSS_MEAN, st);
  FG_REQUIRE(mg != NULL);
  FG_CHECK(fg_graph_find(mg, "micro_batch_0/pipeline_gate_0") >= 0);
  FG_CHECK(fg_graph_find(mg, "micro_batch_0/pipeline_gate_1") >= 0);
  FG_CHECK(fg_graph_find(mg, "micro_batch_3/pipeline_gate_0") >= 0);
  /* The last 4 have no micro-batch to hold back. */
  FG_CHECK(fg_graph_find(mg, "micro_batch_4/pipeline_gate_0") < 0);
  int loss4 = fg_graph_find(mg, "micro_batch_4/loss"),
      loss3 = fg_graph_find(mg, "micro_batch_3/loss");
  FG_REQUIRE(loss4 >= 0 && loss3 >= 0);
  char *seen = calloc((size_t)mg->n_nodes, 1);
  ancestors(mg, loss4, seen);
  FG_CHECK(seen[fg_graph_find(mg, "micro_batch_0/pipeline_gate_0")]);
  FG_CHECK(seen[fg_graph_find(mg, "micro_batch_0/pipeline_gate_1")]);
  FG_CHECK(seen[fg_graph_find(mg, "micro_batch_0/loss")]);
  for (int k = 1; k < 4; k++) {
    char name[64];
    snprintf(name, sizeof name, "micro_batch_%d/loss", k);
    FG_CHECK(!seen[fg_graph_find(mg, name)]);
  }
  memset(seen, 0, (size_t)mg->n_nodes);
  ancestors(mg, loss3, seen);
  for (int j = 0; j < mg->n_nodes; j++)
    if (seen[j] && strncmp(mg->nodes[j].name, "micro_batch_", 12) == 0 &&
        strncmp(mg->nodes[j].name, "micro_batch_3/", 14) != 0)
      FG_FAIL_AT("micro_batch_3/loss depends on '%s'", mg->nodes[j].name);
  /* The waits stay on the gate's device: no transfer carries a gate. */
  fg_session *s = fg_session_new(mg, NULL, st);
  FG_REQUIRE(s != NULL);
  const fg_partition *p = fg_session_partition(s);
  for (int t = 0; t < fg_partition_num_transfers(p); t++) {
    const char *src = fg_node_name(mg, fg_partition_transfer(p, t)->src.node);
    if (strstr(src, "pipeline_gate") || strstr(src, "/after")) FG_FAIL_AT("transfer of '%s'", src);
  }
  fg_session_free(s);
  free(seen);
  fg_graph_free(mg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* after(x, ctrl...): x's values, once the ctrl inputs (any dtype) ran. */
FG_TEST(after_op_passes_its_first_input, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d3[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F64, 1, d3);
  fg_output c = fg_scalar(g, FG_I32, 7);
  fg_output in[2] = {x, c};
  fg_output y = fg_op(g, "after", "y", in, 2, NULL);
  FG_REQUIRE(y.node >= 0);
  fg_output z = fg_mul(g, y, fg_scalar(g, FG_F64, 2.0));
  fg_set_name(g, z, "z");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s != NULL);
  double xv[3] = {1.5, -2.0, 4.25};
  fg_tensor *xt = fg_tensor_wrap(FG_F64, 1, d3, xv, sizeof xv, st);
  fg_feed f = {"x", xt};
  const char *fetch[2] = {"y", "z"};
  fg_tensor *out[2] = {NULL, NULL};
  FG_REQUIRE(fg_session_run(s, &f, 1, fetch, 2, out, NULL, 0, st) == 0);
  const double *yv = fg_tensor_data(out[0]), *zv = fg_tensor_data(out[1]);
  for (int i = 0; i < 3; i++) {
    FG_CHECK(yv[i] == xv[i]);
    FG_CHECK(zv[i] == 2.0 * xv[i]);
  }
  fg_tensor_free(out[0]);
  fg_tensor_free(out[1]);
  fg_tensor_free(xt);
  fg_session_free(s);
  /* No input: refused by the op's arity, naming the op. */
  fg_output none = fg_op(g, "after", "bad", NULL, 0, NULL);
  FG_CHECK(none.node < 0);
  FG_CHECK(fg_graph_status(g, st) != FG_OK);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "after");
  fg_graph_free(g);
  fg_status_free(st);
}

/* The digits MLP (f32, SGD) over cpu:0 / cpu:1, its M-micro-batch
 * rewrite, and a session on each, with the default passes but
 * update_epilogue: the plain step would add each weight gradient into its
 * weight inside the gradient's GEMM, which the micro-batched step (a sum
 * of gradients) cannot, and that rounds otherwise (within its documented
 * bound; which bits depends on the CPU's GEMM kernels). */
typedef struct twin {
  fg_status *st;
  fg_graph *g, *mg;
  fg_session *s1, *s2;
} twin;

static int twin_new(twin *t, int micro) {
  t->st = fg_status_new();
  t->g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  t->mg = fg_micro_batch(t->g, micro, batch_xy, 2, FG_DP_LOSS_MEAN, t->st);
  fg_session_options o;
  fg_session_options_init(&o);
  o.passes = "simplify,fold,fold_inference,cse,xent_grad,epilogue,conv_epilogue,grad_epilogue,fuse,"
             "multi_update,dce";
  t->s1 = t->mg ? fg_session_new(t->g, &o, t->st) : NULL;
  t->s2 = t->s1 ? fg_session_new(t->mg, &o, t->st) : NULL;
  if (!t->s2) fprintf(stderr, "twin_new: %s\n", fg_status_message(t->st));
  return t->s2 ? 0 : -1;
}

static void twin_free(twin *t) {
  fg_session_free(t->s1);
  fg_session_free(t->s2);
  fg_graph_free(t->g);
  fg_graph_free(t->mg);
  fg_status_free(t->st);
}

/* One micro-batch is the original step: the weights are rows/rows = 1, so
 * the same bits. */
FG_TEST(micro_batch_one_is_the_plain_step, "dist") {
  twin t;
  FG_REQUIRE(twin_new(&t, 1) == 0);
  double l1[STEPS], l2[STEPS];
  FG_REQUIRE(dist_train(t.s1, FG_F32, STEPS, 64, l1, t.st) == 0);
  FG_REQUIRE(dist_train(t.s2, FG_F32, STEPS, 64, l2, t.st) == 0);
  for (int k = 0; k < STEPS; k++)
    FG_CHECK(l1[k] == l2[k]);
  FG_CHECK(dist_var_diff(t.s2, "dense1/w", t.s1, "dense1/w") == 0.0);
  twin_free(&t);
}

/* Node ids of `g` that node i reaches through its inputs, as marks. */
static void ancestors(const fg_graph *g, int i, char *seen) {
  if (seen[i]) return;
  seen[i] = 1;
  for (int k = 0; k < g->nodes[i].n_inputs; k++)
    ancestors(g, g->nodes[i].inputs[k].node, seen);
}

/* What makes the pipeline: micro-batch 1 never waits for micro-batch 0
 * before the updates, and only one copy of each variable and update. */
FG_TEST(micro_batch_graph_shape, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  fg_graph *mg = fg_micro_batch(g, 3, batch_xy, 2, FG_DP_LOSS_MEAN, st);
  FG_REQUIRE(mg != NULL);
  int updates = 0, updates0 = 0;
  for (int i = 0; i < g->n_nodes; i++)
    updates0 += strncmp(fg_node_op(g, i), "apply_", 6) == 0;
  for (int i = 0; i < mg->n_nodes; i++)
    updates += strncmp(fg_node_op(mg, i), "apply_", 6) == 0;
  FG_CHECK_INT(updates, updates0);
  FG_CHECK_INT(updates, 6);
  FG_CHECK(fg_graph_find(mg, "dense1/w") >= 0);
  FG_CHECK(fg_graph_find(mg, "micro_batch_1/dense1/w") < 0);
  FG_CHECK(fg_graph_find(mg, "micro_batch_2/loss") >= 0);
  FG_CHECK(fg_graph_find(mg, "loss") >= 0);
  FG_CHECK(fg_graph_find(mg, "loss/full_batch") >= 0);
  FG_CHECK(strcmp(fg_graph_metadata(mg, "micro_batches"), "3") == 0);
  FG_CHECK(strcmp(fg_graph_metadata(mg, "train_target"), "train") == 0);
  /* Every copy of micro-batch 1 is independent of micro-batch 0. */
  char *seen = calloc((size_t)mg->n_nodes, 1);
  int copies = 0;
  for (int i = 0; i < mg->n_nodes; i++) {
    if (strncmp(mg->nodes[i].name, "micro_batch_1/", 14) != 0) continue;
    copies++;
    memset(seen, 0, (size_t)mg->n_nodes);
    ancestors(mg, i, seen);
    for (int j = 0; j < mg->n_nodes; j++)
      if (seen[j] && strncmp(mg->nodes[j].name, "micro_batch_0/", 14) == 0) {
        FG_FAIL_AT("'%s' depends on '%s'", mg->nodes[i].name, mg->nodes[j].name);
        j = mg->n_nodes;
      }
  }
  FG_CHECK(copies > 20);
  free(seen);
  /* Layer 3's copies stay on cpu:1, layer 1's on cpu:0. */
  fg_session *s = fg_session_new(mg, NULL, st);
  FG_REQUIRE(s != NULL);
  const fg_partition *p = fg_session_partition(s);
  int d3 = fg_graph_find(mg, "micro_batch_2/loss"), d1 = fg_graph_find(mg, "dense1/w");
  FG_CHECK_INT(fg_partition_node_device(p, d3), 1);
  FG_CHECK_INT(fg_partition_node_device(p, d1), 0);
  fg_session_free(s);
  fg_graph_free(g);
  fg_graph_free(mg);
  fg_status_free(st);
}

/* Data parallelism over micro-batched replicas (2 replicas on cpu:0,
 * cpu:1, each of 5 micro-batches: its 32 rows as 7+7+6+6+6, and beyond 2
 * in flight gated, the copies and gates renamed per replica): the combined
 * gradients are all-reduced once per step, and the step is still the full
 * batch's. */
FG_TEST(micro_batch_then_data_parallel, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g1 = dist_mlp(FG_F64, FG_OPTIMIZER_SGD, 0.1, NULL, NULL);
  fg_graph *mg = fg_micro_batch(g1, 5, batch_xy, 2, FG_DP_LOSS_MEAN, st);
  FG_REQUIRE(mg != NULL);
  FG_CHECK(fg_graph_find(mg, "micro_batch_2/pipeline_gate_0") >= 0);
  fg_graph *dg = fg_data_parallel(mg, 2, batch_xy, 2, NULL, st);
  if (!dg) fprintf(stderr, "fg_data_parallel: %s\n", fg_status_message(st));
  FG_REQUIRE(dg != NULL);
  int reduces = 0;
  for (int i = 0; i < dg->n_nodes; i++)
    reduces += strcmp(fg_node_op(dg, i), "all_reduce") == 0;
  /* Per replica: the row counts, and one bucket of the 6 gradients (4 KB
   * to 64 KB, fused under 25 MB): 2 x 2, not one per micro-batch. */
  FG_CHECK_INT(reduces, 4);
  fg_session *s1 = fg_session_new(g1, NULL, st), *s2 = fg_session_new(dg, NULL, st);
  if (!s2) fprintf(stderr, "session: %s\n", fg_status_message(st));
  FG_REQUIRE(s1 && s2);
  /* The step runs the micro-batches' matmuls only. The full batch's stay in
   * the graph for evaluation; an update waiting for every reader of its
   * variable (fg_data_parallel's narrowed wait) must not pull them in. */
  fg_tensor *x = NULL, *y = NULL;
  FG_REQUIRE(dist_batch(FG_F64, 0, 64, &x, &y) == 0);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *target = "train";
  fg_plan_info *pi = fg_session_plan_info(s2, feeds, 2, NULL, 0, &target, 1, st);
  FG_REQUIRE(pi != NULL);
  int matmuls = 0;
  for (int t = 0; t < pi->n_steps; t++) {
    int id = pi->step_nodes[t];
    const char *op = fg_node_op(dg, id);
    /* A forward layer's nodes (the adds of gradients sum micro-batches). */
    int layer = !strcmp(op, "matmul") || !strcmp(op, "relu") ||
                (!strcmp(op, "add") && !strstr(dg->nodes[id].name, "gradients"));
    if (pi->step_recv[t] || !layer) continue;
    matmuls += strcmp(op, "matmul") == 0;
    if (!strstr(dg->nodes[id].name, "/micro_batch_"))
      FG_FAIL_AT("the step runs full-batch '%s'", dg->nodes[id].name);
  }
  /* Per replica and micro-batch: 3 forward, 3 weight-gradient and 2
   * input-gradient matmuls; with the passes on the forward ones run
   * inside their relu or bias add (fused_matmul, the epilogue pass). */
  const char *env = getenv("FG_PASSES");
  const int passes = !env || (strcmp(env, "off") != 0 && strcmp(env, "0") != 0);
  FG_CHECK_INT(matmuls, 2 * 5 * (passes ? 5 : 8));
  fg_plan_info_free(pi);
  fg_tensor_free(x);
  fg_tensor_free(y);
  double l1[STEPS], l2[STEPS];
  FG_REQUIRE(dist_train(s1, FG_F64, STEPS, 64, l1, st) == 0);
  int rc = dist_train(s2, FG_F64, STEPS, 64, l2, st);
  if (rc != 0) fprintf(stderr, "run: %s\n", fg_status_message(st));
  FG_REQUIRE(rc == 0);
  for (int k = 0; k < STEPS; k++)
    FG_CHECK(rel(l2[k], l1[k]) < 1e-12);
  FG_CHECK(dist_var_diff(s2, "dense2/w", s1, "dense2/w") < 1e-12);
  fg_session_free(s1);
  fg_session_free(s2);
  fg_graph_free(g1);
  fg_graph_free(mg);
  fg_graph_free(dg);
  fg_status_free(st);
}

static int count_gates(const fg_graph *g) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    n += strstr(g->nodes[i].name, "/pipeline_gate_") != NULL;
  return n;
}

static fg_graph *micro_in_flight(const fg_graph *g, int micro, int in_flight, fg_status *st) {
  fg_micro_batch_options o;
  fg_micro_batch_options_init(&o);
  o.max_in_flight = in_flight;
  return fg_micro_batch_ex(g, micro, batch_xy, 2, &o, st);
}

/* max_in_flight = 2 on the 2 stages (PipeDream's S): micro-batch 2 starts
 * on each device once micro-batch 0 is done there; 6 gates per device (the
 * last 2 hold nothing back). Less memory than the default 2S = 4 on
 * cpu:1, where the loss's stage holds every in-flight micro-batch's
 * activations; the same training. */
FG_TEST(micro_batch_in_flight_s, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  fg_graph *mg = micro_in_flight(g, 8, 2, st);
  FG_REQUIRE(mg != NULL);
  FG_CHECK_INT(count_gates(mg), 2 * 6);
  int loss2 = fg_graph_find(mg, "micro_batch_2/loss"),
      gate0 = fg_graph_find(mg, "micro_batch_0/pipeline_gate_1");
  FG_REQUIRE(loss2 >= 0 && gate0 >= 0);
  char *seen = calloc((size_t)mg->n_nodes, 1);
  ancestors(mg, loss2, seen);
  FG_CHECK(seen[gate0]);
  FG_CHECK(!seen[fg_graph_find(mg, "micro_batch_1/loss")]);
  free(seen);
  size_t w2[2], w4[2];
  arenas_in_flight(16, 2, w2);
  arenas_in_flight(16, 0, w4);
  FG_CHECK(w2[1] < w4[1]);
  FG_CHECK(w2[0] <= w4[0]);
  if (getenv("FG_TEST_VERBOSE") || w2[1] >= w4[1] || w2[0] > w4[0])
    fprintf(stderr, "W=2: %zu / %zu bytes, W=4: %zu / %zu\n", w2[0], w2[1], w4[0], w4[1]);
  fg_optimizer_config c;
  sgd(&c);
  fg_micro_batch_options o;
  fg_micro_batch_options_init(&o);
  o.max_in_flight = 2;
  check_matches_full_batch_opts(FG_F64, &c, 8, NULL, &o);
  /* One in flight: the stages take turns, and still train alike. */
  o.max_in_flight = 1;
  check_matches_full_batch_opts(FG_F64, &c, 4, NULL, &o);
  fg_graph_free(mg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* FG_MICRO_BATCH_UNBOUNDED: no gates, every micro-batch in flight, so the
 * arena grows with M (the behaviour before the bound); a bound of M or
 * more has nothing to hold back either. */
FG_TEST(micro_batch_in_flight_unbounded, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  fg_graph *mg = micro_in_flight(g, 8, FG_MICRO_BATCH_UNBOUNDED, st);
  FG_REQUIRE(mg != NULL);
  FG_CHECK_INT(count_gates(mg), 0);
  fg_graph_free(mg);
  mg = micro_in_flight(g, 8, 8, st);
  FG_REQUIRE(mg != NULL);
  FG_CHECK_INT(count_gates(mg), 0);
  fg_graph_free(mg);
  mg = micro_in_flight(g, 8, 7, st);
  FG_REQUIRE(mg != NULL);
  FG_CHECK_INT(count_gates(mg), 2);
  fg_graph_free(mg);
  size_t m8[2], m32[2];
  arenas_in_flight(8, FG_MICRO_BATCH_UNBOUNDED, m8);
  arenas_in_flight(32, FG_MICRO_BATCH_UNBOUNDED, m32);
  for (int dev = 0; dev < 2; dev++)
    FG_CHECK(m32[dev] > m8[dev]);
  if (getenv("FG_TEST_VERBOSE"))
    fprintf(stderr, "unbounded: M=8 %zu / %zu bytes, M=32 %zu / %zu\n", m8[0], m8[1], m32[0],
            m32[1]);
  fg_optimizer_config c;
  sgd(&c);
  fg_micro_batch_options o;
  fg_micro_batch_options_init(&o);
  o.max_in_flight = FG_MICRO_BATCH_UNBOUNDED;
  check_matches_full_batch_opts(FG_F64, &c, 8, NULL, &o);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(micro_batch_in_flight_bad_values_refused, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  const int bad[3] = {-2, FG_MAX_MICRO_BATCHES + 1, -1000000};
  for (int k = 0; k < 3; k++) {
    fg_graph *mg = micro_in_flight(g, 8, bad[k], st);
    FG_CHECK(mg == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    char want[64];
    snprintf(want, sizeof want, "max_in_flight %d must be 0 (2 per stage), 1 to 1024", bad[k]);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), want);
    fg_graph_free(mg);
  }
  /* NULL options are the defaults: gated as fg_micro_batch. */
  fg_graph *mg = fg_micro_batch_ex(g, 8, batch_xy, 2, NULL, st);
  FG_REQUIRE(mg != NULL);
  FG_CHECK_INT(count_gates(mg), 2 * 4);
  fg_graph_free(mg);
  fg_graph_free(g);
  fg_status_free(st);
}

static void check_refused(const fg_graph *g, int m, const char *const *batch, int n_batch, int loss,
                          fg_code code, const char *msg) {
  fg_status *st = fg_status_new();
  fg_graph *mg = fg_micro_batch(g, m, batch, n_batch, loss, st);
  FG_CHECK(mg == NULL);
  FG_CHECK_INT(fg_status_code(st), code);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), msg);
  fg_graph_free(mg);
  fg_status_free(st);
}

FG_TEST(micro_batch_bad_calls_refused, "dist,badinput") {
  fg_graph *g = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  const char *const nope[1] = {"nope"}, *const var[1] = {"dense1/w"}, *const null1[1] = {NULL};
  check_refused(NULL, 2, batch_xy, 2, 0, FG_INVALID_ARGUMENT, "graph is NULL");
  check_refused(g, 0, batch_xy, 2, 0, FG_INVALID_ARGUMENT, "micro_batches 0 must be 1 to 1024");
  check_refused(g, 1025, batch_xy, 2, 0, FG_INVALID_ARGUMENT, "micro_batches 1025");
  check_refused(g, 2, batch_xy, 0, 0, FG_INVALID_ARGUMENT,
                "n_batch_inputs 0: it needs at least one batch input to split");
  check_refused(g, 2, NULL, 2, 0, FG_INVALID_ARGUMENT,
                "batch_inputs is NULL but n_batch_inputs is 2");
  check_refused(g, 2, batch_xy, 2, 7, FG_INVALID_ARGUMENT, "loss_reduction 7");
  check_refused(g, 2, nope, 1, 0, FG_NOT_FOUND, "batch input 'nope' is not a node of the graph");
  check_refused(g, 2, null1, 1, 0, FG_INVALID_ARGUMENT, "fg_micro_batch: batch_inputs[0] is NULL");
  check_refused(g, 2, var, 1, 0, FG_INVALID_ARGUMENT,
                "batch input 'dense1/w' is not a placeholder");
  /* No training metadata: a forward graph. */
  fg_graph *fwd = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 3};
  fg_output x = fg_placeholder(fwd, "x", FG_F32, 2, xd);
  fg_output y = fg_set_name(fwd, fg_relu(fwd, x), "y");
  fg_set_name(fwd, fg_relu(fwd, y), "z");
  const char *const xs[1] = {"x"};
  check_refused(fwd, 2, xs, 1, 0, FG_INVALID_ARGUMENT,
                "needs metadata \"loss\" and \"train_target\" naming nodes");
  fg_graph_set_metadata(fwd, "loss", "y");
  fg_graph_set_metadata(fwd, "train_target", "y");
  check_refused(fwd, 2, xs, 1, 0, FG_INVALID_ARGUMENT,
                "metadata \"train_target\" names 'y' (relu), the node \"loss\" names too");
  fg_graph_set_metadata(fwd, "train_target", "z");
  check_refused(fwd, 2, xs, 1, 0, FG_INVALID_ARGUMENT, "has no optimizer update (apply_*)");
  fg_graph_free(fwd);
  /* A batch input the loss does not read. */
  fg_graph *g2 = dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, NULL, NULL);
  int64_t zd[1] = {FG_DIM_UNKNOWN};
  fg_placeholder(g2, "z", FG_F32, 1, zd);
  const char *const zs[1] = {"z"};
  check_refused(g2, 2, zs, 1, 0, FG_INVALID_ARGUMENT,
                "loss 'loss' does not depend on any batch input (first 'z')");
  fg_graph_free(g2);
  /* A batch of 3 rows cannot feed 4 micro-batches: the run says so. */
  fg_status *st = fg_status_new();
  fg_graph *mg = fg_micro_batch(g, 4, batch_xy, 2, FG_DP_LOSS_MEAN, st);
  FG_REQUIRE(mg != NULL);
  fg_session *s = fg_session_new(mg, NULL, st);
  FG_REQUIRE(s != NULL);
  double loss;
  FG_CHECK(dist_train(s, FG_F32, 1, 3, &loss, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "shard");
  fprintf(stderr, "3 rows over 4 micro-batches: %s\n", fg_status_message(st));
  fg_session_free(s);
  fg_graph_free(mg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The original nodes stay under their own names on the full batch: the
 * full-batch loss fetched by name is the plain graph's, bit for bit, and
 * fetching only it runs no micro-batch. */
FG_TEST(micro_batch_keeps_the_full_batch_nodes, "dist") {
  twin t;
  FG_REQUIRE(twin_new(&t, 4) == 0);
  fg_tensor *x, *y;
  FG_REQUIRE(dist_batch(FG_F32, 0, 3, &x, &y) == 0);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *f1 = "loss", *f2 = "loss/full_batch";
  fg_tensor *o1 = NULL, *o2 = NULL;
  FG_REQUIRE(fg_session_run(t.s1, feeds, 2, &f1, 1, &o1, NULL, 0, t.st) == 0);
  /* 3 rows: 4 micro-batches could not run, the full batch can. */
  int rc = fg_session_run(t.s2, feeds, 2, &f2, 1, &o2, NULL, 0, t.st);
  if (rc != 0) fprintf(stderr, "%s\n", fg_status_message(t.st));
  FG_REQUIRE(rc == 0);
  FG_CHECK(*(const float *)fg_tensor_data(o1) == *(const float *)fg_tensor_data(o2));
  fg_tensor_free(o1);
  fg_tensor_free(o2);
  fg_tensor_free(x);
  fg_tensor_free(y);
  twin_free(&t);
}
