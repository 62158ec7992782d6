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
