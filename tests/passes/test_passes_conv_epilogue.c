/* The conv_epilogue pass (executor/passes/epilogue_conv.c) on crafted
 * graphs: what becomes fused_conv2d or fused_conv2d_add and what stays
 * (an outside consumer, a fetched node in fg_optimize, a bias added by a
 * separate node, a residual that is broadcast, a variable written between
 * its read and the root), the bits with the passes on and off, a ResNet
 * block whose batch norms fold into the convolutions first, and a CNN
 * training session whose losses and weights are bit for bit those
 * without passes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_passes_epi_util.h"

#define CLIP_LO (-0.5)
#define CLIP_HI 0.75

/* How the crafted block varies. */
typedef struct block_opts {
  int bias;         /* conv2d(x, w, b) */
  int add;          /* s = c + x (the identity shortcut) */
  int z_first;      /* add(x, c) */
  int relu;         /* out = relu(s or c) */
  int clip;         /* out = clip(s or c, CLIP_LO, CLIP_HI) */
  int side_of_conv; /* side = exp(c) */
  int side_of_add;  /* side = exp(s) */
  int bias_node;    /* no residual: s = c + bias [C, 1, 1] */
  int z_bcast;      /* the residual [1, C, 1, 1] (broadcast) */
  int64_t channels; /* C = O */
} block_opts;

/* x [2, C, 6, 6] -> c = conv2d(x, w[, b]) (3x3, pad 1) -> s = c + z ->
 * out = relu(s). */
static fg_graph *block(const block_opts *o) {
  fg_graph *g = fg_graph_new();
  const int64_t C = o->channels ? o->channels : 4;
  const int64_t xd[4] = {2, C, 6, 6}, wd[4] = {C, C, 3, 3}, bd[1] = {C}, cd[3] = {C, 1, 1};
  const int64_t zd[4] = {1, C, 1, 1};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  fg_output w = const_f32(g, "w", 4, wd, 0.3f, 1);
  fg_output b = o->bias ? const_f32(g, "b", 1, bd, 0.2f, 2) : FG_NO_OUTPUT;
  fg_conv2d_opts co = {.pads = {1, 1, 1, 1}};
  fg_output c = fg_set_name(g, fg_conv2d(g, x, w, b, &co), "c");
  fg_output s = c;
  if (o->add || o->bias_node) {
    fg_output z = o->bias_node ? const_f32(g, "bias", 3, cd, 0.2f, 3)
                  : o->z_bcast ? const_f32(g, "z", 4, zd, 0.2f, 3)
                               : x;
    s = fg_set_name(g, o->z_first ? fg_add(g, z, c) : fg_add(g, c, z), "s");
  }
  if (o->relu) fg_set_name(g, fg_relu(g, s), "out");
  if (o->clip) fg_set_name(g, fg_clip(g, s, CLIP_LO, CLIP_HI), "out");
  if (o->side_of_conv) fg_set_name(g, fg_exp(g, c), "side");
  if (o->side_of_add) fg_set_name(g, fg_exp(g, s), "side");
  return g;
}

/* x's values, with a NaN and -0.0 among them. */
static fg_tensor *block_x(const fg_graph *g) {
  int node = fg_graph_find(g, "x");
  const int64_t *dims = NULL;
  int n = 0;
  fg_node_attr_ints(g, node, "shape", &dims, &n);
  fg_tensor *t = f32_tensor(n, dims, 1.0f, 3);
  float *p = fg_tensor_data(t);
  p[5] = -0.0f, p[40] = NAN;
  return t;
}

static int n_changes(const fg_pass_report *r) {
  int n = 0;
  for (int i = 0; i < fg_pass_report_size(r); i++)
    n += strcmp(fg_pass_report_change(r, i)->pass, "conv_epilogue") == 0;
  return n;
}

/* 1 when `fetch` of a (passes off) and of b (passes on) give the same
 * bytes (NaNs as same_values compares them). */
static int same_bits(fg_graph *a, fg_graph *b, const char *fetch) {
  fg_tensor *x = block_x(a);
  fg_tensor *ta = run_fetch(a, x, fetch, 1), *tb = run_fetch(b, x, fetch, 0);
  int same = same_values(ta, tb);
  fg_tensor_free(ta), fg_tensor_free(tb), fg_tensor_free(x);
  return same;
}

static void check_fused(const fg_pass_report *r, const char *node, const char *into,
                        const char *rule) {
  check_change(r, "conv_epilogue", node, into, rule);
}

static int is_attr(const fg_graph *g, const char *node, const char *name, const char *want) {
  const char *v = NULL;
  return fg_node_attr_string(g, fg_graph_find(g, node), name, &v) == 0 && v && !strcmp(v, want);
}

/* relu(conv2d(x, w[, b]) + x), either operand order: one
 * fused_conv2d_add(x, w, x[, b]) named out, with conv2d's pads. */
FG_TEST(conv_epilogue_fuses_conv_add_relu, "") {
  test_pass_list = WITH_CONV_EPILOGUE;
  for (int k = 0; k < 4; k++) {
    block_opts d = {.bias = k & 1, .add = 1, .z_first = k >> 1, .relu = 1};
    fg_graph *g = block(&d);
    fg_pass_report *r = NULL;
    fg_graph *o = optimize1(g, "out", &r);
    FG_REQUIRE(o);
    /* x, w, [b,] out. */
    FG_CHECK_INT(fg_graph_num_nodes(o), 3 + d.bias);
    FG_CHECK_INT(count_op(o, "fused_conv2d_add"), 1);
    FG_CHECK_INT(count_op(o, "conv2d") + count_op(o, "add") + count_op(o, "relu"), 0);
    FG_CHECK_INT(n_changes(r), 3);
    check_fused(r, "out", "out", "conv2d+add+relu");
    check_fused(r, "c", "out", "conv2d+add+relu");
    check_fused(r, "s", "out", "conv2d+add+relu");
    const int out = fg_graph_find(o, "out");
    FG_CHECK(is_attr(o, "out", "activation", "relu"));
    const int64_t *pads = NULL;
    int np = 0;
    FG_CHECK(fg_node_attr_ints(o, out, "pads", &pads, &np) == 0 && np == 4 && pads[3] == 1);
    FG_CHECK_INT(fg_node_num_inputs(o, out), 3 + d.bias);
    FG_CHECK_STR(fg_node_name(o, fg_node_input(o, out, 0).node), "x");
    FG_CHECK_STR(fg_node_name(o, fg_node_input(o, out, 1).node), "w");
    FG_CHECK_STR(fg_node_name(o, fg_node_input(o, out, 2).node), "x");
    if (d.bias) FG_CHECK_STR(fg_node_name(o, fg_node_input(o, out, 3).node), "b");
    FG_CHECK(same_bits(g, o, "out"));
    fg_tensor *x = block_x(g);
    FG_CHECK(same_bits_on_off(g, x, "out"));
    fg_tensor_free(x);
    fg_pass_report_free(r);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

/* relu(conv2d) becomes fused_conv2d (relu); conv2d + z without a relu
 * becomes fused_conv2d_add (none). */
FG_TEST(conv_epilogue_fuses_conv_relu_and_conv_add, "") {
  test_pass_list = WITH_CONV_EPILOGUE;
  block_opts d = {.bias = 1, .relu = 1};
  fg_graph *g = block(&d);
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "out", &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(fg_graph_num_nodes(o), 4);
  FG_CHECK_INT(count_op(o, "fused_conv2d"), 1);
  FG_CHECK_INT(n_changes(r), 2);
  check_fused(r, "out", "out", "conv2d+relu");
  check_fused(r, "c", "out", "conv2d+relu");
  FG_CHECK(is_attr(o, "out", "activation", "relu"));
  FG_CHECK(same_bits(g, o, "out"));
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);

  block_opts a = {.add = 1, .z_first = 1};
  g = block(&a);
  o = optimize1(g, "s", &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "fused_conv2d_add"), 1);
  FG_CHECK_INT(n_changes(r), 2);
  check_fused(r, "s", "s", "conv2d+add");
  check_fused(r, "c", "s", "conv2d+add");
  FG_CHECK(is_attr(o, "s", "activation", "none"));
  FG_CHECK_INT(fg_node_num_inputs(o, fg_graph_find(o, "s")), 3);
  FG_CHECK(same_bits(g, o, "s"));
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* clip(conv2d + x) and clip(conv2d) (relu6's form, as imported models
 * write it): fused_conv2d_add / fused_conv2d with activation clip and the
 * clip's bounds; the bits of the chain, and each value the clip of the
 * unfused sum computed here (NaN kept). */
FG_TEST(conv_epilogue_fuses_conv_clip, "") {
  test_pass_list = WITH_CONV_EPILOGUE;
  for (int add = 0; add < 2; add++) {
    block_opts d = {.bias = 1, .add = add, .clip = 1};
    fg_graph *g = block(&d);
    fg_pass_report *r = NULL;
    fg_graph *o = optimize1(g, "out", &r);
    FG_REQUIRE(o);
    FG_CHECK_INT(fg_graph_num_nodes(o), 4);
    FG_CHECK_INT(count_op(o, add ? "fused_conv2d_add" : "fused_conv2d"), 1);
    FG_CHECK_INT(count_op(o, "conv2d") + count_op(o, "add") + count_op(o, "clip"), 0);
    FG_CHECK_INT(n_changes(r), 2 + add);
    const char *rule = add ? "conv2d+add+clip" : "conv2d+clip";
    check_fused(r, "out", "out", rule);
    check_fused(r, "c", "out", rule);
    if (add) check_fused(r, "s", "out", rule);
    FG_CHECK(is_attr(o, "out", "activation", "clip"));
    double lo = 0, hi = 0;
    const int out = fg_graph_find(o, "out");
    FG_CHECK(fg_node_attr_float(o, out, "min", &lo) == 0 && lo == CLIP_LO);
    FG_CHECK(fg_node_attr_float(o, out, "max", &hi) == 0 && hi == CLIP_HI);
    FG_CHECK(same_bits(g, o, "out"));
    fg_tensor *x = block_x(g);
    FG_CHECK(same_bits_on_off(g, x, "out"));
    fg_tensor *got = run_fetch(o, x, "out", 0), *sum = run_fetch(g, x, add ? "s" : "c", 1);
    FG_REQUIRE(got && sum);
    const float *gv = fg_tensor_data(got), *sv = fg_tensor_data(sum);
    int64_t n = fg_tensor_num_elements(got), at_lo = 0, at_hi = 0, nan = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
      float want = sv[i] < (float)CLIP_LO   ? (float)CLIP_LO
                   : sv[i] > (float)CLIP_HI ? (float)CLIP_HI
                                            : sv[i];
      at_lo += want == (float)CLIP_LO, at_hi += want == (float)CLIP_HI, nan += isnan(sv[i]);
      bad += isnan(want) ? !isnan(gv[i]) : gv[i] != want;
    }
    FG_CHECK_INT(bad, 0);
    FG_CHECK(at_lo > 0 && at_hi > 0 && nan > 0); /* both bounds and the NaN were met */
    fg_tensor_free(got), fg_tensor_free(sum), fg_tensor_free(x);
    fg_pass_report_free(r);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

/* A reader outside the chain: of the conv2d, nothing fuses; of the add,
 * the relu stays and conv2d + x becomes fused_conv2d_add. */
FG_TEST(conv_epilogue_outside_consumer, "") {
  test_pass_list = WITH_CONV_EPILOGUE;
  const char *fetch[2] = {"out", "side"};
  block_opts d = {.bias = 1, .add = 1, .relu = 1, .side_of_conv = 1};
  fg_graph *g = block(&d);
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, fetch, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(n_changes(r), 0);
  FG_CHECK_INT(count_op(o, "conv2d"), 1);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);

  d.side_of_conv = 0, d.side_of_add = 1;
  g = block(&d);
  o = optimize_fetches(g, fetch, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(n_changes(r), 2);
  check_fused(r, "s", "s", "conv2d+add");
  FG_CHECK(find_change(r, "conv_epilogue", "out") == NULL);
  FG_CHECK_INT(count_op(o, "relu"), 1);
  FG_CHECK_INT(count_op(o, "fused_conv2d_add"), 1);
  FG_CHECK(same_bits(g, o, "out") && same_bits(g, o, "side"));
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* fg_optimize keeps what it is asked for: a fetched conv2d is not fused;
 * a fetched add is the root of its own fusion and the relu stays. */
FG_TEST(conv_epilogue_fetched_nodes_in_optimize, "") {
  test_pass_list = WITH_CONV_EPILOGUE;
  block_opts d = {.bias = 1, .add = 1, .relu = 1};
  fg_graph *g = block(&d);
  const char *fetch_c[2] = {"out", "c"}, *fetch_s[2] = {"out", "s"};
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, fetch_c, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(n_changes(r), 0);
  fg_pass_report_free(r);
  fg_graph_free(o);
  o = optimize_fetches(g, fetch_s, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(n_changes(r), 2);
  check_fused(r, "s", "s", "conv2d+add");
  FG_CHECK_INT(count_op(o, "relu"), 1);
  FG_CHECK(same_bits(g, o, "out") && same_bits(g, o, "s"));
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* Left alone: a bias [C, 1, 1] added by its own node (conv2d's own bias
 * rounds differently), and a residual [1, C, 1, 1] the add broadcasts.
 * Without fuse, which would take the add and the relu. */
FG_TEST(conv_epilogue_leaves_bias_node_and_broadcast, "") {
  test_pass_list = WITH_CONV_EPILOGUE;
  const block_opts cases[2] = {{.bias_node = 1, .relu = 1}, {.add = 1, .z_bcast = 1, .relu = 1}};
  for (int k = 0; k < 2; k++) {
    fg_graph *g = block(&cases[k]);
    fg_pass_report *r = NULL;
    fg_graph *o = optimize_passes(g, "out", "simplify,fold,cse,conv_epilogue,dce", &r);
    FG_REQUIRE(o);
    FG_CHECK_INT(n_changes(r), 0);
    FG_CHECK_INT(count_op(o, "conv2d") + count_op(o, "add") + count_op(o, "relu"), 3);
    fg_pass_report_free(r);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

/* s reads variable v before an assign to v and the relu comes after it:
 * the fused node would read v at the relu's place, after the write. The
 * add alone fuses (it reads v where it did); the relu stays, and a
 * session running the write and out together gives the same bits with
 * the passes on and off. */
FG_TEST(conv_epilogue_variable_written_between, "") {
  test_pass_list = WITH_CONV_EPILOGUE;
  fg_graph *g = fg_graph_new();
  const int64_t xd[4] = {2, 4, 6, 6}, wd[4] = {4, 4, 3, 3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  fg_tensor *v0 = f32_tensor(4, xd, 0.3f, 2);
  fg_output v = fg_variable(g, "v", v0);
  fg_conv2d_opts co = {.pads = {1, 1, 1, 1}};
  fg_output c =
      fg_set_name(g, fg_conv2d(g, x, const_f32(g, "w", 4, wd, 0.3f, 1), FG_NO_OUTPUT, &co), "c");
  fg_output s = fg_set_name(g, fg_add(g, c, v), "s");
  fg_set_name(g, fg_assign(g, v, const_f32(g, "two", 4, xd, 2.0f, 5)), "write");
  fg_set_name(g, fg_relu(g, s), "out");
  fg_tensor_free(v0);
  fg_pass_report *r = NULL;
  const char *fetch[1] = {"out"};
  fg_graph *o = optimize_fetches(g, fetch, 1, &r);
  FG_REQUIRE(o);
  check_fused(r, "s", "s", "conv2d+add");
  FG_CHECK(find_change(r, "conv_epilogue", "out") == NULL);
  FG_CHECK_INT(count_op(o, "relu"), 1);
  fg_tensor *xt = block_x(g), *res[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    fg_status *st = fg_status_new();
    fg_session *s2 = passes_session(g, 1, k, st);
    fg_feed feed = {"x", xt};
    const char *out = "out", *write = "write";
    FG_CHECK(s2 && fg_session_run(s2, &feed, 1, &out, 1, &res[k], &write, 1, st) == 0);
    fg_session_free(s2);
    fg_status_free(st);
  }
  FG_REQUIRE(res[0] && res[1]);
  FG_CHECK(same_values(res[0], res[1]));
  fg_tensor_free(res[0]), fg_tensor_free(res[1]), fg_tensor_free(xt);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* batch_norm as an importer makes it (constant statistics, constant
 * false training): fold_inference folds it into the conv2d first. */
static fg_output bn(fg_graph *g, const char *name, fg_output x, int64_t c, int salt) {
  unsigned char f = 0;
  fg_tensor *t = fg_tensor_from_data(FG_BOOL, 0, NULL, &f, 1, NULL);
  char tn[64];
  snprintf(tn, sizeof tn, "%s_training", name);
  fg_output in[6] = {x};
  for (int i = 0; i < 4; i++) {
    char pn[64];
    snprintf(pn, sizeof pn, "%s_p%d", name, i);
    in[1 + i] = const_f32(g, pn, 1, &c, 0.2f, salt + i);
  }
  /* The variance positive, the scale away from 0. */
  fg_output one = fg_scalar(g, FG_F32, 1.0);
  in[1] = fg_add(g, in[1], one), in[4] = fg_add(g, fg_abs(g, in[4]), one);
  in[5] = fg_constant(g, tn, t);
  fg_tensor_free(t);
  return fg_op(g, "batch_norm", name, in, 6, NULL);
}

/* A ResNet basic block in inference: relu(bn1(conv1(x))) -> bn2(conv2)
 * -> + x -> relu, C = 16 (the NC16 layout). */
static fg_graph *resnet_block(void) {
  fg_graph *g = fg_graph_new();
  const int64_t xd[4] = {2, 16, 6, 6}, wd[4] = {16, 16, 3, 3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  fg_conv2d_opts co = {.pads = {1, 1, 1, 1}};
  fg_output c1 = fg_conv2d(g, x, const_f32(g, "w1", 4, wd, 0.1f, 1), FG_NO_OUTPUT, &co);
  fg_output h = fg_set_name(g, fg_relu(g, bn(g, "bn1", c1, 16, 10)), "h");
  fg_output c2 = fg_conv2d(g, h, const_f32(g, "w2", 4, wd, 0.1f, 2), FG_NO_OUTPUT, &co);
  fg_set_name(g, fg_relu(g, fg_add(g, bn(g, "bn2", c2, 16, 20), x)), "out");
  return g;
}

/* fg_optimize folds both batch norms, then makes h one fused_conv2d and
 * out one fused_conv2d_add: x, two weights, two biases and the two fused
 * nodes are left. The values are within rounding of the unfolded graph
 * (folding rounds W s once), and a session (which folds nothing) gives
 * the same bits with the passes on and off. */
FG_TEST(conv_epilogue_resnet_block_after_folding, "") {
  test_pass_list = WITH_CONV_EPILOGUE;
  fg_graph *g = resnet_block();
  FG_REQUIRE(!fg_graph_status(g, NULL));
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "out", &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "batch_norm"), 0);
  FG_CHECK_INT(count_op(o, "fused_conv2d"), 1);
  FG_CHECK_INT(count_op(o, "fused_conv2d_add"), 1);
  FG_CHECK_INT(count_op(o, "conv2d") + count_op(o, "relu") + count_op(o, "add"), 0);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "h")), "fused_conv2d");
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "out")), "fused_conv2d_add");
  FG_CHECK_INT(fg_graph_num_nodes(o), 7);
  fg_tensor *x = block_x(g);
  fg_tensor *want = run_fetch(g, x, "out", 1), *got = run_fetch(o, x, "out", 0);
  FG_REQUIRE(want && got);
  double d = 0, m = 0;
  for (int64_t i = 0; i < fg_tensor_num_elements(want); i++) {
    float a = ((float *)fg_tensor_data(want))[i], b = ((float *)fg_tensor_data(got))[i];
    if (isnan(a) || isnan(b)) {
      FG_CHECK(isnan(a) && isnan(b));
      continue;
    }
    d = fmax(d, fabs((double)a - b)), m = fmax(m, fabs((double)a));
  }
  FG_CHECK(m > 0 && d <= 1e-5 * m);
  /* A session folds the batch norm too (onto new constants), and fuses
   * alike: within the folding's rounding of the unfused graph. */
  fg_tensor *on = run_fetch(g, x, "out", 0);
  FG_REQUIRE(on);
  d = 0;
  for (int64_t i = 0; i < fg_tensor_num_elements(want); i++) {
    float a = ((float *)fg_tensor_data(want))[i], b = ((float *)fg_tensor_data(on))[i];
    if (!isnan(a) || !isnan(b)) d = fmax(d, fabs((double)a - b));
  }
  FG_CHECK(d <= 1e-5 * m);
  fg_tensor_free(on);
  fg_tensor_free(want), fg_tensor_free(got), fg_tensor_free(x);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* A small CNN trained with SGD, conv2d -> relu twice (C = 16, so the
 * activations stay NC16) and a dense head: relu's gradient reads relu's
 * output, so a session fuses each conv2d into its relu. Losses and
 * weights after 3 steps are the same bits with the passes on and off,
 * and fg_optimize of the step makes 2 fused_conv2d nodes. Without
 * update_epilogue: the head's update made in its product's GEMM rounds
 * differently (within its documented bound), and which bits that gives
 * depends on the CPU's GEMM kernels. */
FG_TEST(conv_epilogue_cnn_training_bit_identical, "") {
  test_pass_list = NO_UPDATE_EPILOGUE;
  fg_graph *g = fg_graph_new();
  const int64_t xd[4] = {4, 3, 6, 6}, yd[1] = {4}, w1d[4] = {16, 3, 3, 3}, w2d[4] = {16, 16, 3, 3};
  const int64_t bd[1] = {16}, fd[2] = {16 * 36, 3}, sh[2] = {4, 16 * 36};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd), y = fg_placeholder(g, "y", FG_I32, 1, yd);
  fg_conv2d_opts co = {.pads = {1, 1, 1, 1}};
  const char *vars[5] = {"w1", "b1", "w2", "b2", "wf"};
  fg_tensor *init[5] = {f32_tensor(4, w1d, 0.3f, 1), f32_tensor(1, bd, 0.1f, 2),
                        f32_tensor(4, w2d, 0.1f, 3), f32_tensor(1, bd, 0.1f, 4),
                        f32_tensor(2, fd, 0.05f, 5)};
  fg_output v[5];
  for (int i = 0; i < 5; i++)
    v[i] = fg_variable(g, vars[i], init[i]), fg_tensor_free(init[i]);
  fg_output h = fg_relu(g, fg_conv2d(g, x, v[0], v[1], &co));
  h = fg_relu(g, fg_conv2d(g, h, v[2], v[3], &co));
  fg_output logits = fg_matmul(g, fg_reshape(g, h, 2, sh), v[4], 0, 0);
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, y), "loss");
  fg_optimizer_config c;
  fg_optimizer_config_init(&c, FG_OPTIMIZER_SGD);
  c.learning_rate = 0.05;
  fg_output t = fg_minimize(g, loss, NULL, 0, &c, NULL);
  FG_REQUIRE(t.node >= 0);
  const char *target = fg_node_name(g, t.node);
  fg_tensor *xt = f32_tensor(4, xd, 1.0f, 7), *yt = fg_tensor_new(FG_I32, 1, yd, NULL);
  for (int i = 0; i < 4; i++)
    ((int32_t *)fg_tensor_data(yt))[i] = i % 3;
  float losses[2][3];
  fg_tensor *after[2][5];
  for (int k = 0; k < 2; k++) {
    fg_status *st = fg_status_new();
    fg_session *s = passes_session(g, 2, k, st);
    fg_feed feeds[2] = {{"x", xt}, {"y", yt}};
    const char *fetch = "loss";
    for (int i = 0; i < 3; i++) {
      fg_tensor *l = NULL;
      FG_CHECK(s && fg_session_run(s, feeds, 2, &fetch, 1, &l, &target, 1, st) == 0);
      losses[k][i] = l ? *(float *)fg_tensor_data(l) : NAN;
      fg_tensor_free(l);
    }
    for (int i = 0; i < 5; i++)
      after[k][i] = s ? fg_session_variable(s, vars[i], st) : NULL;
    fg_session_free(s);
    fg_status_free(st);
  }
  FG_CHECK(memcmp(losses[0], losses[1], sizeof losses[0]) == 0);
  FG_CHECK(losses[0][2] < losses[0][0]);
  for (int i = 0; i < 5; i++) {
    FG_CHECK(same_values(after[0][i], after[1][i]));
    fg_tensor_free(after[0][i]), fg_tensor_free(after[1][i]);
  }
  const char *fetch[2] = {"loss", target};
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, fetch, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "fused_conv2d"), 2);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_tensor_free(xt), fg_tensor_free(yt);
  fg_graph_free(g);
}
