/* Inference folding (fold_inference): batch_norm folded into the conv2d
 * before it (values by hand, a small CNN against the graph without passes
 * within 1e-5 of its largest output), dropout in inference removed, and
 * neither where the mode or the parameters may change; in fg_optimize and
 * in sessions, where every name keeps its value. */
#include <math.h>

#include "test_passes_util.h"

/* A reproducible value in [lo, hi) for element i of stream k. */
static float value_at(int k, int i, float lo, float hi) {
  double u = 0.5 + 0.5 * sin(12.9898 * (i + 1) + 78.233 * (k + 1));
  return (float)(lo + (hi - lo) * u);
}

static fg_output const_f32(fg_graph *g, const char *name, int rank, const int64_t *dims, int k,
                           float lo, float hi) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  float *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++)
    v[i] = value_at(k, (int)i, lo, hi);
  fg_tensor *t = fg_tensor_from_data(FG_F32, rank, dims, v, (size_t)n * sizeof *v, NULL);
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  free(v);
  return o;
}

static fg_output const_false(fg_graph *g) {
  unsigned char f = 0;
  fg_tensor *t = fg_tensor_from_data(FG_BOOL, 0, NULL, &f, 1, NULL);
  fg_output o = fg_constant(g, "is_training", t);
  fg_tensor_free(t);
  return o;
}

/* batch_norm as an importer makes it: constant statistics, no update. */
static fg_output bn(fg_graph *g, const char *name, fg_output x, const fg_output *p4,
                    fg_output training) {
  fg_output in[6] = {x, p4[0], p4[1], p4[2], p4[3], training};
  return fg_op(g, "batch_norm", name, in, 6, NULL);
}

/* scale, shift, mean, var [c] constants named <prefix>_{g,b,m,v}. */
static void bn_params(fg_graph *g, const char *prefix, int64_t c, int k, fg_output *p4) {
  const char *suffix[4] = {"g", "b", "m", "v"};
  const float lo[4] = {0.5f, -0.5f, -0.3f, 0.4f}, hi[4] = {1.5f, 0.5f, 0.3f, 1.6f};
  for (int i = 0; i < 4; i++) {
    char name[64];
    snprintf(name, sizeof name, "%s_%s", prefix, suffix[i]);
    p4[i] = const_f32(g, name, 1, &c, k + i, lo[i], hi[i]);
  }
}

/* Largest |a - b| over the largest |b|. */
static double max_rel_diff(const fg_tensor *a, const fg_tensor *b) {
  const float *x = fg_tensor_data(a), *y = fg_tensor_data(b);
  int64_t n = fg_tensor_num_elements(b);
  double d = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)x[i] - y[i]));
    m = fmax(m, fabs((double)y[i]));
  }
  return m > 0 ? d / m : d;
}

FG_TEST(passes_fold_bn_into_conv_by_hand, "") {
  fg_graph *g = fg_graph_new();
  int64_t dx[4] = {1, 1, 1, 2}, dw[4] = {1, 1, 1, 1}, d1[1] = {1};
  float w = 2, sc = 3, sh = 1, mean = 0.5f, var = 3;
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, dx);
  fg_tensor *t[5] = {fg_tensor_from_data(FG_F32, 4, dw, &w, 4, NULL),
                     fg_tensor_from_data(FG_F32, 1, d1, &sc, 4, NULL),
                     fg_tensor_from_data(FG_F32, 1, d1, &sh, 4, NULL),
                     fg_tensor_from_data(FG_F32, 1, d1, &mean, 4, NULL),
                     fg_tensor_from_data(FG_F32, 1, d1, &var, 4, NULL)};
  const char *names[5] = {"w", "g", "b", "m", "v"};
  fg_output c[5];
  for (int i = 0; i < 5; i++) {
    c[i] = fg_constant(g, names[i], t[i]);
    fg_tensor_free(t[i]);
  }
  fg_output conv = fg_set_name(g, fg_conv2d(g, x, c[0], (fg_output){-1, 0}, NULL), "conv");
  fg_set_name(g, fg_relu(g, bn(g, "bn", conv, c + 1, const_false(g))), "out");
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_passes(g, "out", NO_CONV_EPILOGUE, &r);
  FG_REQUIRE(o);
  /* x, w (now W'), b (now b'), bn (now a conv2d), out. */
  FG_CHECK_INT(fg_graph_num_nodes(o), 5);
  FG_CHECK_INT(count_op(o, "batch_norm"), 0);
  int bn_id = fg_graph_find_output(o, "bn").node;
  FG_CHECK_STR(fg_node_op(o, bn_id), "conv2d");
  FG_CHECK_INT(fg_node_num_inputs(o, bn_id), 3);
  const fg_tensor *w2 = NULL, *b2 = NULL;
  FG_REQUIRE(fg_node_attr_tensor(o, fg_graph_find_output(o, "w").node, "value", &w2) == 0);
  FG_REQUIRE(fg_node_attr_tensor(o, fg_graph_find_output(o, "b").node, "value", &b2) == 0);
  /* s = 3 / sqrt(3 + 1e-5); W' = 2 s; b' = (0 - 0.5) s + 1, rounded once. */
  double s = 3.0 / sqrt(3.0 + 1e-5);
  FG_CHECK(((const float *)fg_tensor_data(w2))[0] == (float)(2.0 * s));
  FG_CHECK(((const float *)fg_tensor_data(b2))[0] == (float)(-0.5 * s + 1.0));
  FG_REQUIRE(find_change(r, "fold_inference", "bn"));
  FG_CHECK_STR(find_change(r, "fold_inference", "bn")->rule, "batch_norm(conv2d) into conv2d");
  /* out = relu((2 x - 0.5) / sqrt(3 + 1e-5) * 3 + 1) for x = 1, 2. */
  float xv[2] = {1, 2};
  fg_tensor *xt = fg_tensor_from_data(FG_F32, 4, dx, xv, sizeof xv, NULL);
  fg_tensor *y = run_fetch(o, xt, "out", 0);
  FG_REQUIRE(y);
  for (int i = 0; i < 2; i++)
    FG_CHECK_NEAR(((const float *)fg_tensor_data(y))[i], (2.0 * xv[i] - 0.5) * s + 1.0, 1e-5);
  fg_tensor_free(y);
  fg_tensor_free(xt);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* x [2,3,8,8] -> conv(W1, pad 1) -> bn1 -> relu -> conv(W2, stride 2, b2)
 * -> bn2 -> relu -> dropout(false) -> global average pool "out": 21 nodes.
 * training: the batch norms' and the dropout's mode input. */
static fg_graph *cnn(int variables, int training_flag) {
  fg_graph *g = fg_graph_new();
  int64_t dx[4] = {2, 3, 8, 8}, dw1[4] = {8, 3, 3, 3}, dw2[4] = {8, 8, 3, 3}, d8[1] = {8};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, dx);
  fg_output w1 = const_f32(g, "w1", 4, dw1, 1, -0.4f, 0.4f);
  fg_conv2d_opts o1 = {.pads = {1, 1, 1, 1}}, o2 = {.strides = {2, 2}};
  fg_output c1 = fg_set_name(g, fg_conv2d(g, x, w1, (fg_output){-1, 0}, &o1), "conv1");
  fg_output p1[4], p2[4];
  bn_params(g, "bn1", 8, 10, p1);
  fg_output tr = training_flag ? fg_training(g) : const_false(g);
  if (variables) {
    fg_tensor *m = fg_tensor_new(FG_F32, 1, d8, NULL);
    p1[2] = fg_variable(g, "bn1_mvar", m);
    fg_tensor_free(m);
  }
  fg_output r1 = fg_relu(g, bn(g, "bn1", c1, p1, tr));
  fg_output w2 = const_f32(g, "w2", 4, dw2, 2, -0.3f, 0.3f);
  fg_output b2 = const_f32(g, "b2", 1, d8, 3, -0.2f, 0.2f);
  fg_output c2 = fg_set_name(g, fg_conv2d(g, r1, w2, b2, &o2), "conv2");
  bn_params(g, "bn2", 8, 20, p2);
  fg_output r2 = fg_relu(g, bn(g, "bn2", c2, p2, tr));
  fg_output d = fg_set_name(g, fg_dropout(g, r2, tr, 0.5, 1), "drop");
  fg_set_name(g, fg_global_avg_pool(g, d), "out");
  return g;
}

static fg_tensor *cnn_input(void) {
  int64_t dx[4] = {2, 3, 8, 8};
  float v[384];
  for (int i = 0; i < 384; i++)
    v[i] = value_at(0, i, -1, 1);
  return fg_tensor_from_data(FG_F32, 4, dx, v, sizeof v, NULL);
}

FG_TEST(passes_fold_bn_cnn_against_passes_off, "") {
  fg_graph *g = cnn(0, 0);
  FG_CHECK_INT(fg_graph_num_nodes(g), 21);
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_passes(g, "out", NO_CONV_EPILOGUE, &r);
  FG_REQUIRE(o);
  /* x, w1, bn1_b, bn1 (conv), relu, w2, b2, bn2 (conv), relu, out. */
  FG_CHECK_INT(fg_graph_num_nodes(o), 10);
  FG_CHECK_INT(count_op(o, "batch_norm") + count_op(o, "dropout"), 0);
  FG_CHECK_INT(count_op(o, "conv2d"), 2);
  FG_CHECK(find_change(r, "fold_inference", "drop") != NULL);
  FG_CHECK_STR(find_change(r, "fold_inference", "drop")->rule, "dropout in inference mode");
  FG_CHECK(find_change(r, "fold_inference", "conv2") && find_change(r, "dce", "bn2_v"));
  FG_CHECK_STR(find_change(r, "fold_inference", "conv2")->action, "removed");
  fg_tensor *xt = cnn_input();
  fg_tensor *ref = run_fetch(g, xt, "out", 1), *got = run_fetch(o, xt, "out", 0);
  FG_REQUIRE(ref && got);
  FG_CHECK_INT(fg_tensor_num_elements(got), 16);
  double rel = max_rel_diff(got, ref);
  FG_CHECK(rel <= 1e-5);
  if (rel > 1e-5) fprintf(stderr, "max relative difference %g\n", rel);
  /* A session folds too (on constants of its own): the same bound. */
  fg_tensor *on = run_fetch(g, xt, "out", 0);
  FG_REQUIRE(on);
  FG_CHECK(max_rel_diff(on, ref) <= 1e-5);
  fg_tensor_free(on);
  fg_tensor_free(ref);
  fg_tensor_free(got);
  fg_tensor_free(xt);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* Optimizing `fetch` leaves n batch norms and d dropouts. */
static int left_after(fg_graph *g, const char *fetch, int n, int d) {
  fg_graph *o = optimize1(g, fetch, NULL);
  int ok = o && count_op(o, "batch_norm") == n && count_op(o, "dropout") == d;
  fg_graph_free(o);
  return ok;
}

FG_TEST(passes_fold_bn_not_in_training_mode, "") {
  /* The graph's training flag: the mode is known per run only. */
  fg_graph *g = cnn(0, 1);
  FG_CHECK(left_after(g, "out", 2, 1));
  fg_tensor *xt = cnn_input();
  FG_CHECK(same_bits_on_off(g, xt, "out"));
  fg_tensor_free(xt);
  fg_graph_free(g);
  /* A constant true: batch statistics. */
  g = fg_graph_new();
  int64_t dx[4] = {2, 2, 3, 3}, dw[4] = {2, 2, 1, 1};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, dx), p[4];
  fg_output c = fg_conv2d(g, x, const_f32(g, "w", 4, dw, 1, -1, 1), (fg_output){-1, 0}, NULL);
  bn_params(g, "bn", 2, 5, p);
  fg_set_name(g, fg_relu(g, bn(g, "bn", c, p, fg_scalar(g, FG_BOOL, 1))), "out");
  FG_CHECK(left_after(g, "out", 1, 0));
  fg_graph_free(g);
}

FG_TEST(passes_fold_bn_not_with_variables_or_visible_nodes, "") {
  /* bn1's running mean is a variable (a graph may update it): bn1 stays,
   * bn2 folds. */
  fg_graph *g = cnn(1, 0);
  FG_CHECK(left_after(g, "out", 1, 0));
  fg_graph_free(g);
  /* A fetched conv must keep its value: its batch norm stays (on planes
   * of 4 x 4, under the per-channel rewrite's 512 elements). */
  g = cnn(0, 0);
  const char *fetches[2] = {"out", "conv2"};
  fg_status *st = fg_status_new();
  fg_pass_options po = {0, NO_CONV_EPILOGUE};
  fg_graph *o = fg_optimize(g, &po, fetches, 2, NULL, st);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "batch_norm"), 1);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "bn2").node), "batch_norm");
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "bn1").node), "conv2d");
  fg_graph_free(o);
  /* A batch norm whose mean output is read stays. */
  fg_output m = fg_output_at((fg_output){fg_graph_find_output(g, "bn1").node, 0}, 1);
  fg_set_name(g, fg_neg(g, m), "mean_read");
  const char *f2[2] = {"out", "mean_read"};
  o = fg_optimize(g, &po, f2, 2, NULL, st);
  FG_REQUIRE(o);

  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "bn1").node), "batch_norm");
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "bn2").node), "conv2d");
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}

/* Every node fetched, bn1's mean output 1 too: fg_optimize keeps every
 * node as it is (nothing folds: the kept batch norms keep their values and
 * outputs), where a session's rules, which take every node as kept, would
 * fold. The optimized graph computes what the source does. */
FG_TEST(passes_fold_bn_not_when_everything_is_fetched, "") {
  fg_graph *g = cnn(0, 0);
  const int n = fg_graph_num_nodes(g);
  const char **all = malloc(((size_t)n + 1) * sizeof *all);
  FG_REQUIRE(all);
  for (int i = 0; i < n; i++)
    all[i] = fg_node_name(g, i);
  all[n] = "bn1:1";
  fg_status *st = fg_status_new();
  fg_pass_options po = {0, NULL};
  fg_graph *o = fg_optimize(g, &po, all, n + 1, NULL, st);
  if (!o) fprintf(stderr, "fg_optimize: %s\n", fg_status_message(st));
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "batch_norm"), 2);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "bn1").node), "batch_norm");
  fg_tensor *xt = cnn_input();
  fg_tensor *a = run_fetch(o, xt, "out", 1), *b = run_fetch(g, xt, "out", 1);
  FG_CHECK(same_values(a, b));
  fg_tensor_free(a);
  fg_tensor_free(b);
  fg_tensor_free(xt);
  fg_graph_free(o);
  fg_status_free(st);
  free(all);
  fg_graph_free(g);
}

FG_TEST(passes_fold_dropout_in_inference, "") {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  fg_output dr = fg_set_name(g, fg_dropout(g, x, const_false(g), 0.5, 3), "d");
  fg_set_name(g, fg_relu(g, dr), "r");
  fg_set_name(g, fg_relu(g, fg_set_name(g, fg_dropout(g, x, fg_training(g), 0.5, 3), "dt")), "rt");
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "r", &r);
  FG_REQUIRE(o);
  /* x, r, and the training flag (stateful nodes always stay). */
  FG_CHECK_INT(fg_graph_num_nodes(o), 3);
  int rid = fg_graph_find_output(o, "r").node;
  FG_CHECK_STR(fg_node_name(o, fg_node_input(o, rid, 0).node), "x");
  FG_REQUIRE(find_change(r, "fold_inference", "d"));
  FG_CHECK_STR(find_change(r, "fold_inference", "d")->into, "x");
  fg_pass_report_free(r);
  fg_graph_free(o);
  FG_CHECK(left_after(g, "rt", 0, 1)); /* the run's mode: stays */
  float v[6] = {-1, 2, -3, 4, 0.5f, -0.25f};
  fg_tensor *xt = fg_tensor_from_data(FG_F32, 2, d, v, sizeof v, NULL);
  FG_CHECK(same_bits_on_off(g, xt, "r"));
  FG_CHECK(same_bits_on_off(g, xt, "d"));
  fg_tensor_free(xt);
  fg_graph_free(g);
}

/* x [4,6] -> matmul(W) [+ b] -> batch_norm over the 5 features -> relu. */
static fg_graph *linear_bn(int transpose_b, int bias) {
  fg_graph *g = fg_graph_new();
  int64_t dx[2] = {4, 6}, dw[2] = {6, 5}, dwt[2] = {5, 6}, d5[1] = {5};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, dx), p[4];
  fg_output w = const_f32(g, "w", 2, transpose_b ? dwt : dw, 7, -0.5f, 0.5f);
  fg_output y = fg_set_name(g, fg_matmul(g, x, w, 0, transpose_b), "mm");
  if (bias) y = fg_set_name(g, fg_add(g, y, const_f32(g, "bias", 1, d5, 8, -0.2f, 0.2f)), "lin");
  bn_params(g, "bn", 5, 30, p);
  fg_set_name(g, fg_relu(g, bn(g, "bn", y, p, const_false(g))), "out");
  return g;
}

static fg_tensor *linear_input(void) {
  int64_t dx[2] = {4, 6};
  float v[24];
  for (int i = 0; i < 24; i++)
    v[i] = value_at(1, i, -1, 1);
  return fg_tensor_from_data(FG_F32, 2, dx, v, sizeof v, NULL);
}

FG_TEST(passes_fold_bn_into_linear, "") {
  for (int k = 0; k < 3; k++) {
    /* matmul + b; matmul with W transposed, no bias; matmul, no bias. */
    int tb = k == 1, bias = k == 0;
    fg_graph *g = linear_bn(tb, bias);
    FG_CHECK_INT(fg_graph_num_nodes(g), (bias ? 12 : 10));
    fg_pass_report *r = NULL;
    fg_graph *o = optimize1(g, "out", &r);
    FG_REQUIRE(o);
    /* bias: x, w, bias, mm, lin (standing for bn), out; else x, w, bn_b
     * (b'), mm, bn (now an add), out; then the epilogue pass makes the
     * matmul, its bias add and the relu one fused_matmul, out: x, w, the
     * bias and out stay. */
    FG_CHECK_INT(fg_graph_num_nodes(o), 4);
    FG_CHECK_INT(count_op(o, "batch_norm"), 0);
    FG_CHECK_INT(count_op(o, "add"), 0);
    FG_CHECK_INT(count_op(o, "fused_matmul"), 1);
    const fg_pass_change *e = find_change(r, "epilogue", bias ? "lin" : "bn");
    FG_REQUIRE(e && find_change(r, "epilogue", "out") && find_change(r, "epilogue", "mm"));
    FG_CHECK_STR(e->into, "out");
    FG_CHECK_STR(e->rule, "matmul+add+relu");
    const fg_pass_change *c = find_change(r, "fold_inference", "bn");
    FG_REQUIRE(c);
    FG_CHECK_STR(c->rule, bias ? "batch_norm(matmul + b) into matmul + b"
                               : "batch_norm(matmul) into matmul + b");
    FG_CHECK_STR(c->into, bias ? "lin" : "bn");
    fg_tensor *xt = linear_input();
    fg_tensor *ref = run_fetch(g, xt, "out", 1), *got = run_fetch(o, xt, "out", 0);
    FG_REQUIRE(ref && got);
    FG_CHECK(max_rel_diff(got, ref) <= 1e-5);
    fg_tensor_free(ref);
    fg_tensor_free(got);
    fg_tensor_free(xt);
    fg_pass_report_free(r);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

/* ---- Sessions: W' and b' are new constants, every name keeps its value */

/* The plan of a one-thread session on g (passes on, or off) for `fetch`
 * with x fed as "x"; NULL with the message printed. */
/* The plan of a session with the passes but conv_epilogue (which would
 * take the folded conv2d into a fused_conv2d with its relu), or none. */
static fg_plan_info *session_plan(fg_graph *g, const fg_tensor *x, const char *fetch,
                                  int no_passes) {
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = 1;
  o.no_passes = no_passes;
  o.passes = no_passes ? NULL : NO_CONV_EPILOGUE;
  fg_session *s = fg_session_new(g, &o, st);
  fg_feed feed = {"x", x};
  fg_plan_info *pi = s ? fg_session_plan_info(s, &feed, 1, &fetch, 1, NULL, 0, st) : NULL;
  if (!pi) fprintf(stderr, "plan '%s': %s\n", fetch, fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return pi;
}

static int count_steps(const fg_plan_info *pi, const char *op) {
  int n = 0;
  for (int si = 0; si < pi->n_steps; si++)
    n += strcmp(pi->step_ops[si], op) == 0;
  return n;
}

/* Fetches `names` of g in one run of a one-thread session, passes on or
 * off, into out[]; 0 or -1 with the message printed. */
static int run_fetches(fg_graph *g, const fg_tensor *x, const char **names, int n, int no_passes,
                       fg_tensor **out) {
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, no_passes, st);
  fg_feed feed = {"x", x};
  int rc = s ? fg_session_run(s, &feed, 1, names, n, out, NULL, 0, st) : -1;
  if (rc != 0) fprintf(stderr, "run: %s\n", fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

FG_TEST(passes_fold_bn_session_by_hand, "") {
  /* The graph of passes_fold_bn_into_conv_by_hand, in a session. */
  fg_graph *g = fg_graph_new();
  int64_t dx[4] = {1, 1, 1, 2}, dw[4] = {1, 1, 1, 1}, d1[1] = {1};
  float w = 2, sc = 3, sh = 1, mean = 0.5f, var = 3;
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, dx);
  const float *vals[5] = {&w, &sc, &sh, &mean, &var};
  const char *names[5] = {"w", "g", "b", "m", "v"};
  fg_output c[5];
  for (int i = 0; i < 5; i++) {
    fg_tensor *t = fg_tensor_from_data(FG_F32, i ? 1 : 4, i ? d1 : dw, vals[i], 4, NULL);
    c[i] = fg_constant(g, names[i], t);
    fg_tensor_free(t);
  }
  fg_output conv = fg_set_name(g, fg_conv2d(g, x, c[0], (fg_output){-1, 0}, NULL), "conv");
  fg_set_name(g, fg_relu(g, bn(g, "bn", conv, c + 1, const_false(g))), "out");
  float xv[2] = {1, 2};
  fg_tensor *xt = fg_tensor_from_data(FG_F32, 4, dx, xv, sizeof xv, NULL);
  fg_plan_info *pi = session_plan(g, xt, "out", 0);
  FG_REQUIRE(pi);
  /* bn runs as a conv2d on its folded constants; the conv is not run. */
  FG_CHECK_INT(pi->n_steps, 2);
  FG_CHECK_STR(step_op(pi, g, "bn"), "conv2d");
  FG_CHECK_STR(step_op(pi, g, "conv"), "");
  FG_CHECK(plan_constant(pi, "bn/folded_weight") && plan_constant(pi, "bn/folded_bias"));
  FG_CHECK(!plan_constant(pi, "w") && !plan_constant(pi, "m"));
  fg_plan_info_free(pi);
  /* s = 3 / sqrt(3 + 1e-5): out = relu((2 x - 0.5) s + 1), conv = 2 x,
   * bn's mean output the running mean 0.5. */
  double s = 3.0 / sqrt(3.0 + 1e-5);
  const char *f[4] = {"out", "conv", "bn", "bn:1"};
  fg_tensor *got[4] = {NULL, NULL, NULL, NULL};
  FG_REQUIRE(run_fetches(g, xt, f, 4, 0, got) == 0);
  for (int i = 0; i < 2; i++) {
    double want = (2.0 * xv[i] - 0.5) * s + 1.0;
    FG_CHECK_NEAR(((const float *)fg_tensor_data(got[0]))[i], want, 1e-5 * want);
    FG_CHECK_NEAR(((const float *)fg_tensor_data(got[2]))[i], want, 1e-5 * want);
    FG_CHECK(((const float *)fg_tensor_data(got[1]))[i] == 2.0f * xv[i]);
  }
  FG_CHECK_INT(fg_tensor_num_elements(got[3]), 1);
  FG_CHECK(((const float *)fg_tensor_data(got[3]))[0] == 0.5f);
  for (int i = 0; i < 4; i++)
    fg_tensor_free(got[i]);
  /* One session, its plans alternating between the folded graph (out)
   * and the graph as it is (bn's statistics): each keeps its values. */
  fg_status *st = fg_status_new();
  fg_session *ss = passes_session(g, 1, 0, st);
  FG_REQUIRE(ss);
  fg_feed feed = {"x", xt};
  for (int round = 0; round < 2; round++)
    for (int k = 0; k < 3; k++) {
      const char *one = k == 1 ? "bn:2" : k == 0 ? "out" : "conv";
      fg_tensor *t = NULL;
      FG_REQUIRE(fg_session_run(ss, &feed, 1, &one, 1, &t, NULL, 0, st) == 0);
      const float *v = fg_tensor_data(t);
      for (int i = 0; k != 1 && i < 2; i++) {
        double want = k == 0 ? (2.0 * xv[i] - 0.5) * s + 1.0 : 2.0 * xv[i];
        FG_CHECK_NEAR(v[i], want, 1e-5 * want);
      }
      /* inv_std = 1 / sqrt(3 + 1e-5) */
      if (k == 1) FG_CHECK_NEAR(v[0], 1.0 / sqrt(3.0 + 1e-5), 1e-7);
      fg_tensor_free(t);
    }
  /* batch_norm has outputs 0..3: a fifth is refused, not planned. */
  const char *bad = "bn:4";
  fg_tensor *none = NULL;
  FG_CHECK(fg_session_run(ss, &feed, 1, &bad, 1, &none, NULL, 0, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "fetch 'bn:4': no such node or output");
  fg_session_free(ss);
  fg_status_free(st);
  fg_tensor_free(xt);
  fg_graph_free(g);
}

FG_TEST(passes_fold_bn_session_cnn, "") {
  fg_graph *g = cnn(0, 0);
  fg_tensor *xt = cnn_input();
  fg_plan_info *pi = session_plan(g, xt, "out", 0), *off = session_plan(g, xt, "out", 1);
  FG_REQUIRE(pi && off);
  FG_CHECK_INT(count_steps(pi, "batch_norm") + count_steps(pi, "dropout"), 0);
  FG_CHECK_INT(count_steps(off, "batch_norm"), 2);
  FG_CHECK_INT(count_steps(off, "dropout"), 1);
  FG_CHECK_STR(step_op(pi, g, "bn1"), "conv2d");
  FG_CHECK_STR(step_op(pi, g, "bn2"), "conv2d");
  FG_CHECK_STR(step_op(pi, g, "conv1"), "");
  FG_CHECK_STR(step_op(pi, g, "conv2"), "");
  /* Two convs, two relus and the pool (two relu, pool fused, perhaps):
   * two steps fewer than conv, bn, relu twice, dropout, pool. */
  FG_CHECK_INT(count_steps(pi, "conv2d"), 2);
  FG_CHECK(pi->n_steps <= off->n_steps - 3);
  const fg_plan_tensor *w1 = plan_constant(pi, "bn1/folded_weight");
  const fg_plan_tensor *b2 = plan_constant(pi, "bn2/folded_bias");
  FG_REQUIRE(w1 && b2);
  FG_CHECK(w1->rank == 4 && w1->dims[0] == 8 && w1->dims[1] == 3 && w1->dims[3] == 3);
  FG_CHECK(b2->rank == 1 && b2->dims[0] == 8);
  fg_plan_info_free(pi);
  fg_plan_info_free(off);
  /* Within 1e-5 of the graph without passes: out, bn2, the dropout, and
   * conv2, whose input comes from the folded bn1. conv1, which reads x,
   * bit for bit, fetched with them or alone. */
  const char *f[5] = {"out", "bn2", "conv1", "conv2", "drop"};
  fg_tensor *on[5] = {NULL}, *ref[5] = {NULL};
  FG_REQUIRE(run_fetches(g, xt, f, 5, 0, on) == 0 && run_fetches(g, xt, f, 5, 1, ref) == 0);
  FG_CHECK(max_rel_diff(on[0], ref[0]) <= 1e-5);
  FG_CHECK(max_rel_diff(on[1], ref[1]) <= 1e-5);
  FG_CHECK(same_values(on[2], ref[2]));
  FG_CHECK(max_rel_diff(on[3], ref[3]) <= 1e-5);
  FG_CHECK(max_rel_diff(on[4], ref[4]) <= 1e-5);
  FG_CHECK(!same_values(on[0], ref[0])); /* folded: rounded otherwise */
  for (int i = 0; i < 5; i++) {
    fg_tensor_free(on[i]);
    fg_tensor_free(ref[i]);
  }
  FG_CHECK(same_bits_on_off(g, xt, "conv1"));
  /* bn1's statistics (outputs 1..3) plan from the graph as it is. */
  for (int k = 1; k <= 3; k++) {
    char name[16];
    snprintf(name, sizeof name, "bn1:%d", k);
    FG_CHECK(same_bits_on_off(g, xt, name));
  }
  /* fg_optimize still folds in place, as before. */
  fg_graph *o = optimize_passes(g, "out", NO_CONV_EPILOGUE, NULL);
  FG_REQUIRE(o);
  FG_CHECK_INT(fg_graph_num_nodes(o), 10);
  fg_graph_free(o);
  fg_tensor_free(xt);
  fg_graph_free(g);
}

FG_TEST(passes_fold_bn_session_not_folded, "") {
  fg_tensor *xt = cnn_input();
  /* bn1's running mean is a variable: bn1 stays, bn2 folds. */
  fg_graph *g = cnn(1, 0);
  fg_plan_info *pi = session_plan(g, xt, "out", 0);
  FG_REQUIRE(pi);
  FG_CHECK_STR(step_op(pi, g, "bn1"), "batch_norm");
  FG_CHECK_STR(step_op(pi, g, "bn2"), "conv2d");
  FG_CHECK_STR(step_op(pi, g, "conv1"), "conv2d");
  fg_plan_info_free(pi);
  fg_graph_free(g);
  /* The graph's training flag: both stay, the same bits as without. */
  g = cnn(0, 1);
  pi = session_plan(g, xt, "out", 0);
  FG_REQUIRE(pi);
  FG_CHECK_INT(count_steps(pi, "batch_norm"), 2);
  FG_CHECK_INT(count_steps(pi, "dropout"), 1);
  fg_plan_info_free(pi);
  FG_CHECK(same_bits_on_off(g, xt, "out"));
  fg_graph_free(g);
  /* A variable weight (a trainable import): conv2's batch norm stays. */
  g = fg_graph_new();
  int64_t dx[4] = {2, 3, 8, 8}, dw[4] = {4, 3, 3, 3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, dx), p[4];
  fg_tensor *wt = fg_tensor_new(FG_F32, 4, dw, NULL);
  float *wv = fg_tensor_data(wt);
  for (int i = 0; i < 108; i++)
    wv[i] = value_at(4, i, -0.5f, 0.5f);
  fg_output w = fg_variable(g, "w", wt);
  fg_tensor_free(wt);
  fg_output c = fg_set_name(g, fg_conv2d(g, x, w, (fg_output){-1, 0}, NULL), "conv");
  bn_params(g, "bn", 4, 40, p);
  fg_set_name(g, fg_relu(g, bn(g, "bn", c, p, const_false(g))), "out");
  pi = session_plan(g, xt, "out", 0);
  FG_REQUIRE(pi);
  FG_CHECK_STR(step_op(pi, g, "bn"), "batch_norm");
  FG_CHECK_STR(step_op(pi, g, "conv"), "conv2d");
  fg_plan_info_free(pi);
  FG_CHECK(same_bits_on_off(g, xt, "out"));
  fg_graph_free(g);
  /* A conv another node also reads would be computed twice: it stays. */
  g = cnn(0, 0);
  fg_set_name(g, fg_neg(g, fg_graph_find_output(g, "conv2")), "conv2_neg");
  pi = session_plan(g, xt, "out", 0);
  FG_REQUIRE(pi);
  FG_CHECK_STR(step_op(pi, g, "bn1"), "conv2d");
  FG_CHECK_STR(step_op(pi, g, "bn2"), "batch_norm");
  fg_plan_info_free(pi);
  fg_graph_free(g);
  fg_tensor_free(xt);
}

/* The device of node `name`'s step in the plan, or -1. */
static int step_device(const fg_plan_info *pi, const fg_graph *g, const char *name) {
  int id = fg_graph_find_output(g, name).node;
  for (int si = 0; id >= 0 && si < pi->n_steps; si++)
    if (pi->step_nodes[si] == id && !pi->step_recv[si]) return pi->step_devices[si];
  return -1;
}

/* How many steps of the plan run for node id (a transfer copies it). */
static int steps_of_node(const fg_plan_info *pi, int id) {
  int n = 0;
  for (int si = 0; si < pi->n_steps; si++)
    n += pi->step_nodes[si] == id;
  return n;
}

FG_TEST(passes_fold_bn_session_two_devices, "") {
  /* The first conv and batch norm on cpu:0, from bn1's relu on cpu:1:
   * each batch norm folds on its own device, its new constants placed
   * there. */
  fg_graph *g = cnn(0, 0);
  const char *second[5] = {"conv2", "bn2", "drop", "out", "w2"};
  for (int i = 0; i < 5; i++)
    fg_set_device(g, fg_graph_find_output(g, second[i]), "cpu:1");
  fg_set_device(g, fg_node_input(g, fg_graph_find_output(g, "conv2").node, 0), "cpu:1");
  fg_tensor *xt = cnn_input();
  fg_plan_info *pi = session_plan(g, xt, "out", 0);
  FG_REQUIRE(pi);
  FG_CHECK_INT(pi->n_devices, 2);
  FG_CHECK_INT(count_steps(pi, "batch_norm"), 0);
  FG_CHECK_STR(step_op(pi, g, "bn1"), "conv2d");
  FG_CHECK_STR(step_op(pi, g, "bn2"), "conv2d");
  FG_CHECK_STR(step_op(pi, g, "conv2"), "");
  const int d1 = step_device(pi, g, "bn1"), d2 = step_device(pi, g, "bn2");
  FG_CHECK(d1 >= 0 && d2 >= 0 && d1 != d2);
  const fg_plan_tensor *w1 = plan_constant(pi, "bn1/folded_weight");
  const fg_plan_tensor *b1 = plan_constant(pi, "bn1/folded_bias");
  const fg_plan_tensor *w2 = plan_constant(pi, "bn2/folded_weight");
  const fg_plan_tensor *b2 = plan_constant(pi, "bn2/folded_bias");
  FG_REQUIRE(w1 && b1 && w2 && b2);
  /* Each is on its batch norm's device: no step copies it to another. */
  FG_CHECK_INT(steps_of_node(pi, w1->node) + steps_of_node(pi, b1->node), 0);
  FG_CHECK_INT(steps_of_node(pi, w2->node) + steps_of_node(pi, b2->node), 0);
  FG_CHECK(w2->rank == 4 && w2->dims[0] == 8 && w2->dims[1] == 8);
  fg_plan_info_free(pi);
  /* Within 1e-5 of the graph without passes (the one-device bound),
   * rounded otherwise; conv1 (cpu:0, reads x) bit for bit. */
  const char *f[4] = {"out", "bn2", "conv2", "conv1"};
  fg_tensor *on[4] = {NULL}, *ref[4] = {NULL};
  FG_REQUIRE(run_fetches(g, xt, f, 4, 0, on) == 0 && run_fetches(g, xt, f, 4, 1, ref) == 0);
  for (int i = 0; i < 3; i++)
    FG_CHECK(max_rel_diff(on[i], ref[i]) <= 1e-5);
  FG_CHECK(!same_values(on[0], ref[0]));
  FG_CHECK(same_values(on[3], ref[3]));
  for (int i = 0; i < 4; i++) {
    fg_tensor_free(on[i]);
    fg_tensor_free(ref[i]);
  }
  /* A batch norm whose conv reads a value of the other device stays
   * (rewrites stay within a device). */
  fg_set_device(g, fg_node_input(g, fg_graph_find_output(g, "conv2").node, 0), "cpu:0");
  pi = session_plan(g, xt, "out", 0);
  FG_REQUIRE(pi);
  FG_CHECK_STR(step_op(pi, g, "bn1"), "conv2d");
  FG_CHECK_STR(step_op(pi, g, "bn2"), "batch_norm");
  FG_CHECK(!plan_constant(pi, "bn2/folded_weight"));
  fg_plan_info_free(pi);
  fg_tensor_free(xt);
  fg_graph_free(g);
}

FG_TEST(passes_fold_bn_session_linear, "") {
  for (int k = 0; k < 3; k++) {
    /* matmul + b; matmul with W transposed, no bias; matmul, no bias. */
    int tb = k == 1, bias = k == 0;
    fg_graph *g = linear_bn(tb, bias);
    fg_tensor *xt = linear_input();
    fg_plan_info *pi = session_plan(g, xt, "out", 0);
    FG_REQUIRE(pi);
    FG_CHECK_STR(step_op(pi, g, "bn"), "fused_matmul");
    FG_CHECK_STR(step_op(pi, g, "mm"), "");
    FG_CHECK_INT(count_steps(pi, "batch_norm") + count_steps(pi, "matmul"), 0);
    FG_CHECK(plan_constant(pi, "bn/folded_weight") && plan_constant(pi, "bn/folded_bias"));
    fg_plan_info_free(pi);
    const char *f[3] = {"out", "mm", bias ? "lin" : "mm"};
    fg_tensor *on[3] = {NULL}, *ref[3] = {NULL};
    FG_REQUIRE(run_fetches(g, xt, f, 3, 0, on) == 0 && run_fetches(g, xt, f, 3, 1, ref) == 0);
    FG_CHECK(max_rel_diff(on[0], ref[0]) <= 1e-5);
    FG_CHECK(same_values(on[1], ref[1]));
    FG_CHECK(same_values(on[2], ref[2]));
    for (int i = 0; i < 3; i++) {
      fg_tensor_free(on[i]);
      fg_tensor_free(ref[i]);
    }
    fg_tensor_free(xt);
    fg_graph_free(g);
  }
}

FG_TEST(passes_fold_dropout_in_session, "") {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  fg_output dr = fg_set_name(g, fg_dropout(g, x, const_false(g), 0.5, 3), "d");
  fg_set_name(g, fg_relu(g, dr), "r");
  fg_set_name(g, fg_relu(g, fg_set_name(g, fg_dropout(g, x, fg_training(g), 0.5, 3), "dt")), "rt");
  float v[6] = {-1, 2, -3, 4, 0.5f, -0.25f};
  fg_tensor *xt = fg_tensor_from_data(FG_F32, 2, d, v, sizeof v, NULL);
  fg_plan_info *pi = session_plan(g, xt, "r", 0);
  FG_REQUIRE(pi);
  /* relu(x) alone: the dropout with a constant false mode is not run. */
  FG_CHECK_INT(pi->n_steps, 1);
  FG_CHECK_STR(step_op(pi, g, "r"), "relu");
  fg_plan_info_free(pi);
  pi = session_plan(g, xt, "rt", 0);
  FG_REQUIRE(pi);
  FG_CHECK_STR(step_op(pi, g, "dt"), "dropout");
  fg_plan_info_free(pi);
  fg_tensor *r = run_fetch(g, xt, "r", 0);
  FG_REQUIRE(r);
  for (int i = 0; i < 6; i++)
    FG_CHECK(((const float *)fg_tensor_data(r))[i] == (v[i] > 0 ? v[i] : 0.0f));
  fg_tensor_free(r);
  fg_tensor_free(xt);
  fg_graph_free(g);
}

FG_TEST(passes_fold_bn_session_bad_params, "") {
  /* A scale one element too long: refused with the node named, passes on
   * or off, never folded past. */
  fg_graph *g = fg_graph_new();
  int64_t dx[4] = {1, 2, 3, 3}, dw[4] = {2, 2, 1, 1}, d3[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, dx), p[4];
  fg_output c = fg_conv2d(g, x, const_f32(g, "w", 4, dw, 1, -1, 1), (fg_output){-1, 0}, NULL);
  bn_params(g, "bn", 2, 5, p);
  p[0] = const_f32(g, "bn_g3", 1, d3, 9, 0.5f, 1.5f);
  fg_set_name(g, fg_relu(g, bn(g, "bn", c, p, const_false(g))), "out");
  for (int no_passes = 0; no_passes < 2; no_passes++) {
    fg_status *st = fg_status_new();
    fg_session *s = passes_session(g, 1, no_passes, st);
    FG_CHECK(s == NULL);
    FG_CHECK_STR_CONTAINS(fg_status_message(st),
                          "node 'bn' (batch_norm): input 1 (scale) has length 3, but x has C = 2");
    fg_session_free(s);
    fg_status_free(st);
  }
  fg_graph_free(g);
}
