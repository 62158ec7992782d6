/* The xent_grad pass: softmax cross-entropy's gradient as one
 * softmax_cross_entropy_grad node. The expected values are computed here
 * in double from the definition, (softmax(row) - one_hot(label)) / N. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <flowgraph/autodiff.h>

#include "test_passes_util.h"

#define N 4
#define C 5

/* Logits with a large row (max subtraction) and a tie; labels in range. */
static const double LOGITS[N][C] = {{0.5, -1.25, 2.0, 0.0, 1.0},
                                    {100.0, 99.0, 98.5, -3.0, 100.0},
                                    {-0.75, -0.75, -0.75, -0.75, -0.75},
                                    {3.5, -2.0, 0.25, 1.5, -7.0}};
static const int32_t LABELS[N] = {2, 0, 4, 1};

/* loss = softmax_cross_entropy(x, labels); "dx" its gradient in x. */
static fg_graph *xent_graph(fg_dtype dt) {
  fg_graph *g = fg_graph_new();
  int64_t dx[2] = {N, C}, dl[1] = {N};
  fg_output x = fg_placeholder(g, "x", dt, 2, dx);
  fg_output lb = fg_placeholder(g, "labels", FG_I32, 1, dl);
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, x, lb), "loss");
  fg_output grad;
  fg_status *st = fg_status_new();
  if (fg_gradients(g, &loss, 1, &x, 1, NULL, &grad, st) != 0) {
    fprintf(stderr, "fg_gradients: %s\n", fg_status_message(st));
    fg_graph_free(g);
    g = NULL;
  } else {
    fg_set_name(g, grad, "dx");
  }
  fg_status_free(st);
  return g;
}

static fg_tensor *logits(fg_dtype dt) {
  int64_t d[2] = {N, C};
  fg_tensor *t = fg_tensor_new(dt, 2, d, NULL);
  for (int i = 0; t && i < N * C; i++) {
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)LOGITS[i / C][i % C];
    else
      ((double *)fg_tensor_data(t))[i] = LOGITS[i / C][i % C];
  }
  return t;
}

static fg_tensor *labels(const int32_t *v) {
  int64_t d[1] = {N};
  return fg_tensor_from_data(FG_I32, 1, d, v, N * sizeof *v, NULL);
}

/* Runs "dx" on `device` (NULL: the CPU) with the passes on (no_passes 0)
 * or off; status in st. */
static fg_tensor *run_dx_on(fg_graph *g, const char *device, fg_dtype dt, const int32_t *lab,
                            int no_passes, fg_status *st) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = 2;
  o.no_passes = no_passes;
  o.device = device;
  fg_session *s = fg_session_new(g, &o, st);
  fg_tensor *x = logits(dt), *l = labels(lab), *out = NULL;
  fg_feed f[2] = {{"x", x}, {"labels", l}};
  const char *fetch = "dx";
  if (s && fg_session_run(s, f, 2, &fetch, 1, &out, NULL, 0, st) != 0) out = NULL;
  fg_session_free(s);
  fg_tensor_free(x);
  fg_tensor_free(l);
  return out;
}

static double expected(int n, int c) {
  double m = LOGITS[n][0], s = 0;
  for (int j = 1; j < C; j++)
    m = fmax(m, LOGITS[n][j]);
  for (int j = 0; j < C; j++)
    s += exp(LOGITS[n][j] - m);
  return (exp(LOGITS[n][c] - m) / s - (c == LABELS[n])) / N;
}

/* On `device`: the fused gradient against the definition, and bit for bit
 * the unfused nodes' (passes off) on the same device. */
static void check_values_and_bits(const char *device, fg_dtype dt, double tol) {
  fg_graph *g = xent_graph(dt);
  FG_REQUIRE(g);
  fg_status *st = fg_status_new();
  fg_tensor *on = run_dx_on(g, device, dt, LABELS, 0, st);
  fg_tensor *off = run_dx_on(g, device, dt, LABELS, 1, st);
  if (!on || !off) FG_FAIL_AT("%s", fg_status_message(st));
  FG_REQUIRE(on && off);
  for (int i = 0; i < N * C; i++) {
    double v = dt == FG_F32 ? ((const float *)fg_tensor_data(on))[i]
                            : ((const double *)fg_tensor_data(on))[i];
    FG_CHECK_NEAR(v, expected(i / C, i % C), tol);
  }
  FG_CHECK(memcmp(fg_tensor_data(on), fg_tensor_data(off), fg_tensor_num_bytes(on)) == 0);
  fg_tensor_free(on);
  fg_tensor_free(off);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(xent_grad_fuses_the_gradient, "") {
  fg_graph *g = xent_graph(FG_F32);
  FG_REQUIRE(g);
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "dx", &r);
  FG_REQUIRE(o);
  /* Only the fused node is left of the six: the gradient needs no loss. */
  FG_CHECK_INT(count_op(o, "softmax_cross_entropy_grad"), 1);
  FG_CHECK_INT(count_op(o, "softmax") + count_op(o, "one_hot") + count_op(o, "numel") +
                   count_op(o, "sub") + count_op(o, "div") + count_op(o, "mul"),
               0);
  const fg_pass_change *c = find_change(r, "xent_grad", "dx");
  FG_REQUIRE(c);
  FG_CHECK_STR(c->action, "fused");
  FG_CHECK_STR(c->rule, "softmax+one_hot+sub+numel+div+mul");
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

FG_TEST(xent_grad_values_and_bits_f32, "") { check_values_and_bits(NULL, FG_F32, 1e-7); }
FG_TEST(xent_grad_values_and_bits_f64, "") { check_values_and_bits(NULL, FG_F64, 1e-15); }

FG_TEST(xent_grad_cuda_values_and_bits, "gpu") {
  if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA device");
  check_values_and_bits("cuda:0", FG_F32, 5e-7); /* expf may differ from the CPU's by ulps */
  check_values_and_bits("cuda:0", FG_F64, 1e-15);
}

/* The pattern built by hand; `twist` breaks it in one way. */
static fg_graph *pattern(int twist) {
  fg_graph *g = fg_graph_new();
  int64_t dx[2] = {N, C}, dl[1] = {N};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, dx);
  fg_output lb = fg_placeholder(g, "labels", FG_I32, 1, dl);
  fg_output dy = fg_placeholder(g, "dy", FG_F32, 0, NULL);
  fg_output sm = fg_softmax(g, x, twist == 1 ? 0 : 1);
  fg_output diff = fg_set_name(g, fg_sub(g, sm, fg_one_hot(g, lb, C, FG_F32)), "diff");
  fg_output lb2 = twist == 2 ? fg_placeholder(g, "labels2", FG_I32, 1, dl) : lb;
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "dtype", FG_F32);
  fg_output scale = fg_div(g, dy, fg_op(g, "numel", NULL, &lb2, 1, a));
  fg_attrs_free(a);
  fg_set_name(g, fg_mul(g, scale, diff), "out");
  if (twist == 3) fg_set_name(g, fg_exp(g, diff), "other");
  return g;
}

FG_TEST(xent_grad_only_the_exact_pattern, "") {
  for (int twist = 0; twist < 4; twist++) {
    fg_graph *g = pattern(twist);
    const char *fetch[2] = {"out", "other"};
    fg_status *st = fg_status_new();
    fg_graph *o = fg_optimize(g, NULL, fetch, twist == 3 ? 2 : 1, NULL, st);
    FG_REQUIRE(o);
    /* 0: fused (either operand order of the mul); 1: softmax over axis 0;
     * 2: numel of other labels; 3: the difference has another reader. */
    FG_CHECK_INT(count_op(o, "softmax_cross_entropy_grad"), twist == 0);
    fg_status_free(st);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

/* Runs "out" of pattern(0) on `lab` (dy = 1), passes on. */
static int run_pattern(const int32_t *lab, fg_status *st) {
  fg_graph *g = pattern(0);
  fg_session *s = passes_session(g, 1, 0, st);
  fg_tensor *x = logits(FG_F32), *l = labels(lab), *out = NULL;
  fg_tensor *dy = fg_tensor_new(FG_F32, 0, NULL, st);
  *(float *)fg_tensor_data(dy) = 1.0f;
  fg_feed f[3] = {{"x", x}, {"labels", l}, {"dy", dy}};
  const char *fetch = "out";
  int rc = s ? fg_session_run(s, f, 3, &fetch, 1, &out, NULL, 0, st) : -1;
  fg_tensor_free(out);
  fg_tensor_free(x);
  fg_tensor_free(l);
  fg_tensor_free(dy);
  fg_session_free(s);
  fg_graph_free(g);
  return rc;
}

FG_TEST(xent_grad_label_out_of_range, "badinput") {
  fg_status *st = fg_status_new();
  FG_CHECK(run_pattern(LABELS, st) == 0);
  /* The fused node checks the labels (unfused, one_hot would name itself). */
  const int32_t bad[N] = {2, 0, 9, 1};
  FG_CHECK(run_pattern(bad, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "node 'out' (softmax_cross_entropy_grad): labels[2] = 9 is out of range "
                        "[0, 5)");
  const int32_t neg[N] = {-1, 0, 0, 1};
  FG_CHECK(run_pattern(neg, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "labels[0] = -1 is out of range [0, 5)");
  fg_status_free(st);
}

FG_TEST(xent_grad_infer_refuses_bad_inputs, "badinput") {
  fg_graph *g = fg_graph_new();
  int64_t dx[2] = {N, C}, dl[1] = {N}, d2[1] = {2};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, dx);
  fg_output lb = fg_placeholder(g, "labels", FG_I32, 1, dl);
  fg_output dy64 = fg_placeholder(g, "dy64", FG_F64, 0, NULL);
  fg_output in[3] = {x, lb, dy64};
  fg_status *st = fg_status_new();
  fg_op(g, "softmax_cross_entropy_grad", "g1", in, 3, NULL);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'g1'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "input 2 (dy) dtype f64 differs");
  fg_graph_free(g);
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 2, dx);
  lb = fg_placeholder(g, "labels", FG_I32, 1, dl);
  fg_output dy2 = fg_placeholder(g, "dy2", FG_F32, 1, d2);
  fg_output in2[3] = {x, lb, dy2};
  fg_op(g, "softmax_cross_entropy_grad", "g2", in2, 3, NULL);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "input 2 (dy) shape [2] is not a scalar");
  fg_status_free(st);
  fg_graph_free(g);
}

/* ---- softmax_cross_entropy_and_grad --------------------------------------- */

/* The loss and its gradient, as xent_graph, and "after" = neg(dx) reading
 * the gradient (a fetched gradient is kept whole by fg_optimize). */
static fg_graph *loss_and_grad_graph(fg_dtype dt) {
  fg_graph *g = xent_graph(dt);
  if (g) fg_set_name(g, fg_neg(g, fg_graph_find_output(g, "dx")), "after");
  return g;
}

/* The mean over rows of logsumexp(row) - row[label], in double. */
static double expected_loss(void) {
  double total = 0;
  for (int n = 0; n < N; n++) {
    double m = LOGITS[n][0], s = 0;
    for (int j = 1; j < C; j++)
      m = fmax(m, LOGITS[n][j]);
    for (int j = 0; j < C; j++)
      s += exp(LOGITS[n][j] - m);
    total += m + log(s) - LOGITS[n][LABELS[n]];
  }
  return total / N;
}

FG_TEST(xent_and_grad_fuses_the_loss_with_its_gradient, "") {
  fg_graph *g = loss_and_grad_graph(FG_F32);
  FG_REQUIRE(g);
  const char *fetch[2] = {"loss", "after"};
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, fetch, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "softmax_cross_entropy_and_grad"), 1);
  FG_CHECK_INT(count_op(o, "softmax_cross_entropy") + count_op(o, "softmax_cross_entropy_grad") +
                   count_op(o, "ones_like"),
               0);
  /* The loss node in place (its name stays), read by the neg as :1. */
  fg_output loss = fg_graph_find_output(o, "loss"), after = fg_graph_find_output(o, "after");
  FG_REQUIRE(loss.node >= 0 && after.node >= 0);
  FG_CHECK_STR(fg_node_op(o, loss.node), "softmax_cross_entropy_and_grad");
  FG_CHECK_INT(fg_node_num_outputs(o, loss.node), 2);
  FG_CHECK_INT(fg_node_input(o, after.node, 0).node, loss.node);
  FG_CHECK_INT(fg_node_input(o, after.node, 0).index, 1);
  const fg_pass_change *c = find_change(r, "xent_grad", "loss");
  FG_REQUIRE(c);
  FG_CHECK_STR(c->action, "fused");
  FG_CHECK_STR(c->rule, "softmax_cross_entropy+softmax_cross_entropy_grad");
  /* dx: first the mul made one node, then that node read from the loss. */
  int into_loss = 0;
  for (int i = 0; i < fg_pass_report_size(r); i++) {
    c = fg_pass_report_change(r, i);
    into_loss += strcmp(c->node, "dx") == 0 && c->into && strcmp(c->into, "loss:1") == 0;
  }
  FG_CHECK_INT(into_loss, 1);
  fg_pass_report_free(r);
  fg_graph_free(o);
  /* The gradient itself fetched: fg_optimize keeps it whole and fuses
   * nothing (the fused node would compute it a second time). */
  const char *fetch2[2] = {"loss", "dx"};
  o = optimize_fetches(g, fetch2, 2, NULL);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "softmax_cross_entropy_and_grad"), 0);
  FG_CHECK_INT(count_op(o, "softmax_cross_entropy_grad"), 1);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* Runs `fetch` of g on `device` (NULL: the CPU) with the passes on or
 * off, into out; the plan's softmax_cross_entropy_and_grad steps into
 * *fused. 0 or -1 (st). */
static int run_fetches(fg_graph *g, const char *device, fg_dtype dt, const int32_t *lab,
                       int no_passes, int threads, const char **fetch, int n, fg_tensor **out,
                       int *fused, fg_status *st) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  o.no_passes = no_passes;
  o.device = device;
  fg_session *s = fg_session_new(g, &o, st);
  fg_tensor *x = logits(dt), *l = labels(lab);
  fg_feed f[2] = {{"x", x}, {"labels", l}};
  int rc = s ? fg_session_run(s, f, 2, fetch, n, out, NULL, 0, st) : -1;
  fg_plan_info *pi = rc == 0 ? fg_session_plan_info(s, f, 2, fetch, n, NULL, 0, st) : NULL;
  *fused = 0;
  for (int i = 0; pi && pi->step_ops && i < pi->n_steps; i++)
    *fused += strcmp(pi->step_ops[i], "softmax_cross_entropy_and_grad") == 0;
  if (rc == 0 && !pi) rc = -1;
  fg_plan_info_free(pi);
  fg_session_free(s);
  fg_tensor_free(x);
  fg_tensor_free(l);
  return rc;
}

static double value_at(const fg_tensor *t, int64_t i) {
  return fg_tensor_dtype(t) == FG_F32 ? ((const float *)fg_tensor_data(t))[i]
                                      : ((const double *)fg_tensor_data(t))[i];
}

/* On `device`: loss and -gradient fetched together run as one fused node;
 * both against the definition, and bit for bit the unfused nodes' on the
 * same device, at 1 and 2 threads; the loss alone runs the fused node too
 * and gives the same bits. */
static void check_and_grad(const char *device, fg_dtype dt, double tol) {
  fg_graph *g = loss_and_grad_graph(dt);
  FG_REQUIRE(g);
  fg_status *st = fg_status_new();
  const char *fetch[2] = {"loss", "after"};
  fg_tensor *on[2] = {NULL, NULL}, *off[2] = {NULL, NULL}, *alone = NULL;
  int fused_on = 0, fused_off = 0, fused_alone = 0;
  for (int threads = 1; threads <= 2; threads++) {
    if (run_fetches(g, device, dt, LABELS, 0, threads, fetch, 2, on, &fused_on, st) != 0 ||
        run_fetches(g, device, dt, LABELS, 1, threads, fetch, 2, off, &fused_off, st) != 0 ||
        run_fetches(g, device, dt, LABELS, 0, threads, fetch, 1, &alone, &fused_alone, st) != 0)
      FG_FAIL_AT("%s", fg_status_message(st));
    FG_REQUIRE(on[0] && on[1] && off[0] && off[1] && alone);
    FG_CHECK_INT(fused_on, 1);
    FG_CHECK_INT(fused_off, 0);
    FG_CHECK_INT(fused_alone, 1);
    FG_CHECK_NEAR(value_at(on[0], 0), expected_loss(), tol * 10);
    for (int i = 0; i < N * C; i++)
      FG_CHECK_NEAR(value_at(on[1], i), -expected(i / C, i % C), tol);
    for (int k = 0; k < 2; k++)
      FG_CHECK(memcmp(fg_tensor_data(on[k]), fg_tensor_data(off[k]), fg_tensor_num_bytes(on[k])) ==
               0);
    FG_CHECK(memcmp(fg_tensor_data(alone), fg_tensor_data(off[0]), fg_tensor_num_bytes(alone)) ==
             0);
    for (int k = 0; k < 2; k++)
      fg_tensor_free(on[k]), fg_tensor_free(off[k]), on[k] = off[k] = NULL;
    fg_tensor_free(alone), alone = NULL;
  }
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(xent_and_grad_values_and_bits_f32, "") { check_and_grad(NULL, FG_F32, 1e-7); }
FG_TEST(xent_and_grad_values_and_bits_f64, "") { check_and_grad(NULL, FG_F64, 1e-15); }

FG_TEST(xent_and_grad_cuda_values_and_bits, "gpu") {
  if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA device");
  check_and_grad("cuda:0", FG_F32, 5e-7);
  check_and_grad("cuda:0", FG_F64, 1e-15);
}

/* Only a gradient whose dy is one element equal to 1 and whose inputs
 * hold the loss's values: a constant 3 for dy, a dy fed by the user, a
 * gradient of other logits, ones_like of a vector of unknown length (at
 * run time it may not be one element), and logits from a variable that
 * an assign writes between the loss and the gradient all stay apart. */
FG_TEST(xent_and_grad_only_with_dy_one_and_the_same_inputs, "") {
  for (int twist = 0; twist < 5; twist++) {
    fg_graph *g = fg_graph_new();
    int64_t dx[2] = {N, C}, dl[1] = {N}, du[1] = {-1};
    fg_output x = fg_placeholder(g, "x", FG_F32, 2, dx);
    if (twist == 4) {
      fg_tensor *v0 = logits(FG_F32);
      x = fg_variable(g, "v", v0);
      fg_tensor_free(v0);
    }
    fg_output lb = fg_placeholder(g, "labels", FG_I32, 1, dl);
    fg_output x2 = fg_exp(g, x);
    fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, x, lb), "loss");
    fg_output in[3] = {twist == 2 ? x2 : x, lb, {-1, -1}};
    if (twist == 0) {
      fg_tensor *three = fg_tensor_new(FG_F32, 0, NULL, NULL);
      *(float *)fg_tensor_data(three) = 3.0f;
      in[2] = fg_constant(g, "three", three);
      fg_tensor_free(three);
    } else if (twist == 3) {
      in[2] = fg_ones_like(g, fg_placeholder(g, "u", FG_F32, 1, du));
    } else {
      in[2] = twist == 1 ? fg_placeholder(g, "dy", FG_F32, 0, NULL) : fg_ones_like(g, loss);
    }
    if (twist == 4) {
      const fg_output av[2] = {x, fg_exp(g, x)};
      fg_op(g, "assign", "write_v", av, 2, NULL);
    }
    fg_output gr = fg_op(g, "softmax_cross_entropy_grad", "grad", in, 3, NULL);
    fg_set_name(g, fg_neg(g, gr), "after");
    const char *fetch[3] = {"loss", "after", "write_v"};
    fg_graph *o = optimize_fetches(g, fetch, twist == 4 ? 3 : 2, NULL);
    FG_REQUIRE(o);
    FG_CHECK_INT(count_op(o, "softmax_cross_entropy_and_grad"), 0);
    FG_CHECK_INT(count_op(o, "softmax_cross_entropy_grad"), 1);
    fg_graph_free(o);
    fg_graph_free(g);
  }
  /* The untwisted graph with a constant 1 for dy does fuse. */
  fg_graph *g = fg_graph_new();
  int64_t dx[2] = {N, C}, dl[1] = {N};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, dx);
  fg_output lb = fg_placeholder(g, "labels", FG_I32, 1, dl);
  fg_set_name(g, fg_softmax_cross_entropy(g, x, lb), "loss");
  fg_tensor *one = fg_tensor_new(FG_F32, 0, NULL, NULL);
  *(float *)fg_tensor_data(one) = 1.0f;
  fg_output in[3] = {x, lb, fg_constant(g, "one", one)};
  fg_tensor_free(one);
  fg_set_name(g, fg_neg(g, fg_op(g, "softmax_cross_entropy_grad", "grad", in, 3, NULL)), "after");
  const char *fetch[2] = {"loss", "after"};
  fg_graph *o = optimize_fetches(g, fetch, 2, NULL);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "softmax_cross_entropy_and_grad"), 1);
  fg_graph_free(o);
  fg_graph_free(g);
}

FG_TEST(xent_and_grad_label_out_of_range, "badinput") {
  fg_graph *g = loss_and_grad_graph(FG_F32);
  FG_REQUIRE(g);
  fg_status *st = fg_status_new();
  const char *fetch[2] = {"loss", "after"};
  fg_tensor *out[2] = {NULL, NULL};
  int fused = 0;
  const int32_t bad[N] = {2, 0, 9, 1};
  FG_CHECK(run_fetches(g, NULL, FG_F32, bad, 0, 1, fetch, 2, out, &fused, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "node 'loss' (softmax_cross_entropy_and_grad): labels[2] = 9 is out of "
                        "range [0, 5)");
  FG_CHECK(out[0] == NULL && out[1] == NULL);
  const int32_t neg[N] = {-1, 0, 0, 1};
  FG_CHECK(run_fetches(g, NULL, FG_F32, neg, 0, 2, fetch, 2, out, &fused, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "labels[0] = -1 is out of range [0, 5)");
  fg_status_free(st);
  fg_graph_free(g);
}

/* Built by hand, the op's inputs are checked at build time. */
FG_TEST(xent_and_grad_infer_refuses_bad_inputs, "badinput") {
  int64_t dx[2] = {N, C}, dl[1] = {N}, d3[1] = {3}, d1[1] = {C};
  struct {
    fg_dtype xt, lt;
    int xr;
    const int64_t *xd, *ld;
    const char *msg;
  } bad[] = {
      {FG_F32, FG_I32, 1, d1, dl, "input 0 (logits) shape [5] has rank 1; it must be [N, C]"},
      {FG_I32, FG_I32, 2, dx, dl, "input 0 (logits) dtype i32 is not allowed"},
      {FG_F32, FG_F32, 2, dx, dl, "input 1 (labels) dtype f32 is not allowed"},
      {FG_F32, FG_I32, 2, dx, d3, "differ in N (4 vs 3)"}};
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    fg_graph *g = fg_graph_new();
    fg_output in[2] = {fg_placeholder(g, "x", bad[k].xt, bad[k].xr, bad[k].xd),
                       fg_placeholder(g, "labels", bad[k].lt, 1, bad[k].ld)};
    fg_status *st = fg_status_new();
    fg_op(g, "softmax_cross_entropy_and_grad", "both", in, 2, NULL);
    FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "'both'");
    FG_CHECK_STR_CONTAINS(fg_status_message(st), bad[k].msg);
    fg_status_free(st);
    fg_graph_free(g);
  }
}
