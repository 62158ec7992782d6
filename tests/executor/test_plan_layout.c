/* The plan's layout stage (executor/plan_layout.c): which tensors of a CNN's
 * training step stay in nChw16c between convolutions, and that the step
 * computes the same thing either way.
 *
 * The model: x [4, 16, 6, 6] -> conv 3x3 (32) -> batch_norm -> relu (r1)
 * -> conv 3x3 (32) -> batch_norm -> + conv 1x1 (32) of x -> relu (r2) ->
 * global average pool -> dense (10) -> softmax cross-entropy, trained with
 * momentum SGD. The first conv's output, its batch norm and r1 only meet
 * convolutions, batch norms and element-wise ops, so they (and their
 * gradients) go nChw16c; r2 feeds the pool, which reads C order, so r2's
 * group (the second batch norm, the residual add) stays "nchw"; x is fed
 * and the weights are variables: C order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "kernels/kernel.h"

#define BATCH 4

static fg_output var(fg_graph *g, const char *name, int rank, const int64_t *dims,
                     fg_init_kind kind, int64_t seed) {
  fg_init init = {kind, 0, 0, 0, seed};
  return fg_variable_init(g, name, FG_F32, rank, dims, &init);
}

static fg_output conv(fg_graph *g, fg_output x, int64_t cin, int64_t cout, int k, const char *name,
                      int64_t seed) {
  int64_t wd[4] = {cout, cin, k, k};
  fg_conv2d_opts o = {{1, 1}, {k / 2, k / 2, k / 2, k / 2}, {1, 1}, 1, 0, {0, 0}};
  fg_output y =
      fg_conv2d(g, x, var(g, name, 4, wd, FG_INIT_KAIMING_UNIFORM, seed), (fg_output){-1, 0}, &o);
  char nm[64];
  snprintf(nm, sizeof nm, "%s_out", name);
  return fg_set_name(g, y, nm);
}

static fg_output bn(fg_graph *g, fg_output x, int64_t c, const char *name) {
  char n[4][64];
  const char *suffix[4] = {"scale", "shift", "rm", "rv"};
  const fg_init_kind kind[4] = {FG_INIT_ONES, FG_INIT_ZEROS, FG_INIT_ZEROS, FG_INIT_ONES};
  fg_output v[4];
  for (int i = 0; i < 4; i++) {
    snprintf(n[i], sizeof n[i], "%s/%s", name, suffix[i]);
    v[i] = var(g, n[i], 1, &c, kind[i], 0);
  }
  return fg_batch_norm(g, x, v[0], v[1], v[2], v[3], fg_training(g), 0.1, 1e-5);
}

/* The model above, with `channels` in place of 32 (and of x's 16 when it
 * is 8, to test a width that is not a multiple of 16). */
static fg_graph *build(int64_t channels) {
  fg_graph *g = fg_graph_new();
  const int64_t cin = channels == 8 ? 8 : 16;
  int64_t xd[4] = {BATCH, cin, 6, 6}, ld[1] = {BATCH}, flat[2] = {BATCH, channels};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  fg_output r1 = fg_set_name(
      g, fg_relu(g, bn(g, conv(g, x, cin, channels, 3, "c1", 1), channels, "bn1")), "r1");
  fg_output b2 = bn(g, conv(g, r1, channels, channels, 3, "c2", 2), channels, "bn2");
  fg_output sc = conv(g, x, cin, channels, 1, "down", 3);
  fg_output r2 = fg_set_name(g, fg_relu(g, fg_add(g, b2, sc)), "r2");
  fg_output h = fg_reshape(g, fg_global_avg_pool(g, r2), 2, flat);
  int64_t wd[2] = {channels, 10};
  fg_output logits = fg_matmul(g, h, var(g, "dense", 2, wd, FG_INIT_XAVIER_UNIFORM, 4), 0, 0);
  fg_output labels = fg_placeholder(g, "labels", FG_I32, 1, ld);
  fg_output loss = fg_set_name(
      g, fg_reduce_mean(g, fg_softmax_cross_entropy(g, logits, labels), NULL, 0, 0), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_MOMENTUM);
  fg_status *st = fg_status_new();
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, st);
  fg_set_name(g, train, "train");
  fg_status_free(st);
  return g;
}

typedef struct inputs {
  fg_tensor *x, *labels;
  fg_feed feeds[2];
} inputs;

static void inputs_init(inputs *in, int64_t cin) {
  int64_t xd[4] = {BATCH, cin, 6, 6}, ld[1] = {BATCH};
  in->x = fg_tensor_new(FG_F32, 4, xd, NULL);
  in->labels = fg_tensor_new(FG_I32, 1, ld, NULL);
  float *x = fg_tensor_data(in->x);
  unsigned seed = 17;
  for (int64_t i = 0; i < fg_tensor_num_elements(in->x); i++) {
    seed = seed * 1103515245u + 12345u;
    x[i] = (float)((seed >> 9) % 20000) / 10000.0f - 1.0f;
  }
  int32_t *l = fg_tensor_data(in->labels);
  for (int i = 0; i < BATCH; i++)
    l[i] = (i * 3) % 10;
  in->feeds[0] = (fg_feed){"x", in->x};
  in->feeds[1] = (fg_feed){"labels", in->labels};
}

static void inputs_free(inputs *in) {
  fg_tensor_free(in->x);
  fg_tensor_free(in->labels);
}

/* The layout of output 0 of node `name` in the plan of (fetch, train). */
static const char *layout_of(const fg_plan_info *info, const char *name) {
  for (int i = 0; i < info->n_tensors; i++)
    if (info->tensors[i].output == 0 && !strcmp(info->tensors[i].name, name))
      return info->tensors[i].layout;
  return "(absent)";
}

static fg_plan_info *plan_of(fg_session *s, inputs *in, const char *fetch, fg_status *st) {
  const char *target = "train";
  return fg_session_plan_info(s, in->feeds, 2, &fetch, 1, &target, 1, st);
}

FG_TEST(layout_cnn_step_keeps_conv_chain_blocked, "") {
  if (!fgk_nc16_available()) FG_SKIP("built without oneDNN: every tensor is C order");
  fg_graph *g = build(32);
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  inputs in;
  inputs_init(&in, 16);
  fg_plan_info *info = plan_of(s, &in, "loss", st);
  FG_REQUIRE(info);
  FG_CHECK_STR(layout_of(info, "c1_out"), "nChw16c");
  FG_CHECK_STR(layout_of(info, "r1"), "nChw16c");
  FG_CHECK_STR(layout_of(info, "r2"), "nchw");
  FG_CHECK_STR(layout_of(info, "c2_out"), "nchw");
  FG_CHECK_STR(layout_of(info, "x"), "nchw");
  FG_CHECK_STR(layout_of(info, "c1"), "nchw"); /* the weight */
  FG_CHECK_STR(layout_of(info, "loss"), "nchw");
  int blocked = 0;
  for (int i = 0; i < info->n_tensors; i++)
    if (!strcmp(info->tensors[i].layout, "nChw16c")) {
      blocked++;
      FG_CHECK(info->tensors[i].rank == 4 && info->tensors[i].dims[1] % 16 == 0);
      FG_CHECK_STR(info->tensors[i].kind, "arena");
    }
  /* c1's output, bn1's y, r1, and in the backward pass at least r1's
   * gradient, the ReLU mask and bn1's dx. */
  FG_CHECK(blocked >= 6);
  fg_plan_info_free(info);
  /* A fetched tensor is C order, and so is its whole group. */
  info = plan_of(s, &in, "r1", st);
  FG_REQUIRE(info);
  FG_CHECK_STR(layout_of(info, "r1"), "nchw");
  FG_CHECK_STR(layout_of(info, "c1_out"), "nchw");
  fg_plan_info_free(info);
  inputs_free(&in);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* 8 channels: nChw16c would need padding, so nothing is blocked. */
FG_TEST(layout_narrow_channels_stay_plain, "") {
  fg_graph *g = build(8);
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  inputs in;
  inputs_init(&in, 8);
  fg_plan_info *info = plan_of(s, &in, "loss", st);
  FG_REQUIRE(info);
  for (int i = 0; i < info->n_tensors; i++)
    FG_CHECK_STR(info->tensors[i].layout, "nchw");
  fg_plan_info_free(info);
  inputs_free(&in);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Runs `steps` training steps and returns the losses and the first
 * convolution's weight after them. FG_NC16=off turns the stage off. */
static int train(int nc16, int threads, float *losses, int steps, fg_tensor **w) {
  if (!nc16) setenv("FG_NC16", "off", 1);
  fg_graph *g = build(32);
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  fg_session *s = fg_session_new(g, &o, st);
  inputs in;
  inputs_init(&in, 16);
  int rc = s ? 0 : -1;
  const char *fetch = "loss", *target = "train";
  for (int k = 0; k < steps && rc == 0; k++) {
    fg_tensor *out = NULL;
    rc = fg_session_run(s, in.feeds, 2, &fetch, 1, &out, &target, 1, st);
    if (rc == 0) losses[k] = *(const float *)fg_tensor_data(out);
    fg_tensor_free(out);
  }
  if (rc != 0) FG_FAIL_AT("training: %s", fg_status_message(st));
  *w = rc == 0 ? fg_session_variable(s, "c1", st) : NULL;
  unsetenv("FG_NC16");
  inputs_free(&in);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

/* The blocked step trains like the C-order one (the batch norms sum in
 * another order, so the bits may differ in the last places), and its own
 * bits do not depend on the thread count. */
FG_TEST(layout_blocked_step_trains_like_plain, "") {
  enum { STEPS = 4 };
  float plain[STEPS], blk1[STEPS], blk2[STEPS];
  fg_tensor *wp = NULL, *w1 = NULL, *w2 = NULL;
  FG_REQUIRE(train(0, 2, plain, STEPS, &wp) == 0);
  FG_REQUIRE(train(1, 1, blk1, STEPS, &w1) == 0);
  FG_REQUIRE(train(1, 2, blk2, STEPS, &w2) == 0);
  FG_REQUIRE(wp && w1 && w2);
  for (int k = 0; k < STEPS; k++) {
    FG_CHECK_NEAR(blk2[k], plain[k], 1e-5 * (1 + fabs(plain[k])));
    FG_CHECK(blk1[k] == blk2[k]);
  }
  /* The loss moved: the steps trained something. */
  FG_CHECK(fabs(plain[STEPS - 1] - plain[0]) > 1e-4);
  const float *a = fg_tensor_data(wp), *b = fg_tensor_data(w2);
  for (int64_t i = 0; i < fg_tensor_num_elements(wp); i++)
    FG_CHECK_NEAR(b[i], a[i], 1e-5 * (1 + fabs(a[i])));
  FG_CHECK(memcmp(fg_tensor_data(w1), b, fg_tensor_num_bytes(w2)) == 0);
  fg_tensor_free(wp);
  fg_tensor_free(w1);
  fg_tensor_free(w2);
}
