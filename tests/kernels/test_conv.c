/* conv2d, its gradient ops and conv_transpose2d through the graph API:
 * forward and every gradient against PyTorch (tests/data/conv_fixtures.h,
 * written by tests/gen/gen_conv.py) in f32 (oneDNN) and f64 (direct loops),
 * finite-difference checks in f64 (first and second order), the refusals
 * of shape inference, a plan that runs twice with the same bits, a cached
 * plan's run that allocates nothing but its fetch, and a .fgb round trip. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_count.h"
#include "autodiff/grad_check.h"
#include "data/conv_fixtures.h"
#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "flowgraph/io.h"
#include "kernels/kernel.h"

#ifdef FG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static fg_conv2d_opts opts_of(const conv_case *c) {
  fg_conv2d_opts o;
  memset(&o, 0, sizeof o);
  memcpy(o.strides, c->strides, sizeof o.strides);
  if (!c->same) memcpy(o.pads, c->pads, sizeof o.pads);
  memcpy(o.dilations, c->dilations, sizeof o.dilations);
  o.groups = c->groups;
  o.same = c->same;
  memcpy(o.output_padding, c->output_padding, sizeof o.output_padding);
  return o;
}

static int64_t numel4(const int64_t *d) { return d[0] * d[1] * d[2] * d[3]; }

static fg_tensor *tensor_of(fg_dtype dt, int rank, const int64_t *dims, const double *v) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  if (!t) return NULL;
  int64_t n = fg_tensor_num_elements(t);
  for (int64_t i = 0; i < n; i++) {
    if (dt == FG_F64)
      ((double *)fg_tensor_data(t))[i] = v[i];
    else
      ((float *)fg_tensor_data(t))[i] = (float)v[i];
  }
  return t;
}

/* Largest |got - want| / (1 + |want|), and where. */
static double max_err(const fg_tensor *t, const double *want, int64_t n, int64_t *at) {
  double worst = 0;
  *at = -1;
  if (fg_tensor_num_elements(t) != n) return INFINITY;
  for (int64_t i = 0; i < n; i++) {
    double g = fg_tensor_dtype(t) == FG_F64 ? ((const double *)fg_tensor_data(t))[i]
                                            : ((const float *)fg_tensor_data(t))[i];
    double e = fabs(g - want[i]) / (1 + fabs(want[i]));
    if (!(e <= worst)) worst = e, *at = i;
  }
  return worst;
}

/* The case's graph: y = conv(x, w[, b]), L = sum(y * dy), and dL/dx, dL/dw,
 * dL/db named dx, dw, db. */
static fg_graph *case_graph(const conv_case *c, fg_dtype dt) {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", dt, 4, c->x), w = fg_placeholder(g, "w", dt, 4, c->w);
  int64_t blen = c->transpose ? c->w[1] * c->groups : c->w[0];
  fg_output b = c->has_bias ? fg_placeholder(g, "b", dt, 1, &blen) : FG_NO_OUTPUT;
  fg_conv2d_opts o = opts_of(c);
  fg_output y = c->transpose ? fg_conv_transpose2d(g, x, w, b, &o) : fg_conv2d(g, x, w, b, &o);
  fg_set_name(g, y, "y");
  fg_tensor *dyt = tensor_of(dt, 4, c->y, c->dyv);
  fg_output loss = fg_reduce_sum(g, fg_mul(g, y, fg_constant(g, "dy", dyt)), NULL, 0, 0);
  fg_tensor_free(dyt);
  fg_output wrt[3] = {x, w, b}, d[3];
  fg_status *st = fg_status_new();
  if (fg_gradients(g, &loss, 1, wrt, c->has_bias ? 3 : 2, NULL, d, st) == 0) {
    static const char *const names[3] = {"dx", "dw", "db"};
    for (int i = 0; i < (c->has_bias ? 3 : 2); i++)
      fg_set_name(g, fg_identity(g, d[i]), names[i]);
  }
  fg_status_free(st);
  return g;
}

/* Runs the case on `threads` threads; its four results checked to tol. */
static void check_case(const conv_case *c, fg_dtype dt, int threads, double tol,
                       const char *device) {
  fg_status *st = fg_status_new();
  fg_graph *g = case_graph(c, dt);
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = threads;
  so.device = device;
  fg_session *s = fg_session_new(g, &so, st);
  if (!s) FG_FAIL_AT("case %s: %s", c->name, fg_status_message(st));
  FG_REQUIRE(s);
  int64_t blen = c->transpose ? c->w[1] * c->groups : c->w[0];
  fg_tensor *x = tensor_of(dt, 4, c->x, c->xv), *w = tensor_of(dt, 4, c->w, c->wv);
  fg_tensor *b = c->has_bias ? tensor_of(dt, 1, &blen, c->bv) : NULL;
  fg_feed feeds[3] = {{"x", x}, {"w", w}, {"b", b}};
  const char *fetch[4] = {"y", "dx", "dw", "db"};
  int nf = c->has_bias ? 4 : 3;
  fg_tensor *out[4] = {0};
  if (fg_session_run(s, feeds, c->has_bias ? 3 : 2, fetch, nf, out, NULL, 0, st) != 0)
    FG_FAIL_AT("case %s: %s", c->name, fg_status_message(st));
  const double *want[4] = {c->yv, c->dxv, c->dwv, c->dbv};
  int64_t n[4] = {numel4(c->y), numel4(c->x), numel4(c->w), blen};
  for (int i = 0; i < nf && out[0]; i++) {
    int64_t at;
    double e = max_err(out[i], want[i], n[i], &at);
    if (!(e <= tol))
      FG_FAIL_AT("case %s (%s, %s, %d threads): %s differs from PyTorch by %g at %lld (tol %g)",
                 c->name, fg_dtype_name(dt), device ? device : "cpu", threads, fetch[i], e,
                 (long long)at, tol);
  }
  for (int i = 0; i < 4; i++)
    fg_tensor_free(out[i]);
  fg_tensor_free(x);
  fg_tensor_free(w);
  fg_tensor_free(b);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

#define N_CASES ((int)(sizeof conv_cases / sizeof conv_cases[0]))

FG_TEST(conv_torch_f32, "") {
  for (int i = 0; i < N_CASES; i++)
    check_case(&conv_cases[i], FG_F32, 1, 2e-5, NULL);
}

FG_TEST(conv_torch_f32_two_threads, "") {
  for (int i = 0; i < N_CASES; i++)
    check_case(&conv_cases[i], FG_F32, 2, 2e-5, NULL);
}

FG_TEST(conv_torch_f64, "") {
  for (int i = 0; i < N_CASES; i++)
    check_case(&conv_cases[i], FG_F64, 1, 1e-12, NULL);
  check_case(&conv_cases[1], FG_F64, 2, 1e-12, NULL);
}

/* The cuDNN kernels (kernels/cuda/conv.cu) through a cuda:0 session: every
 * case's forward and gradients against the same PyTorch values the CPU
 * meets (f32 without TF32, f64), asymmetric pads included. */
FG_TEST(conv_cuda_matches_torch, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  FG_SKIP_NO_CUDA_DEVICE();
  for (int i = 0; i < N_CASES; i++) {
    check_case(&conv_cases[i], FG_F32, 1, 1e-4, "cuda:0");
    check_case(&conv_cases[i], FG_F64, 1, 1e-11, "cuda:0");
  }
#endif
}

/* ---- finite differences (f64) -------------------------------------------- */

typedef struct fd_spec {
  const char *op; /* conv2d, conv_transpose2d, or a gradient op through fg_op */
  fg_conv2d_opts o;
  int n_in;
} fd_spec;

static fg_output build_fd(fg_graph *g, const fg_output *xs, void *vctx) {
  const fd_spec *s = vctx;
  fg_output b = s->n_in > 2 ? xs[2] : FG_NO_OUTPUT;
  if (strcmp(s->op, "conv2d") == 0) return fg_conv2d(g, xs[0], xs[1], b, &s->o);
  if (strcmp(s->op, "conv_transpose2d") == 0) return fg_conv_transpose2d(g, xs[0], xs[1], b, &s->o);
  /* The gradient ops: the same attributes, set directly. */
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_ints(a, "strides", s->o.strides, 2);
  fg_attrs_set_ints(a, "pads", s->o.pads, 4);
  fg_attrs_set_ints(a, "dilations", s->o.dilations, 2);
  fg_attrs_set_int(a, "groups", s->o.groups);
  fg_output y = fg_op(g, s->op, NULL, xs, 3, a);
  fg_attrs_free(a);
  return y;
}

#define IN4(a, b, c, d)                                                                            \
  { FG_F64, 4, {a, b, c, d}, NULL, 0, 0 }
#define IN1(a)                                                                                     \
  { FG_F64, 1, {a}, NULL, 0, 0 }

FG_TEST(conv_fd_stride2_asym_pads_bias, "") {
  fd_spec s = {"conv2d", {{2, 2}, {1, 0, 2, 1}, {1, 1}, 1, 0, {0, 0}}, 3};
  fgt_input in[3] = {IN4(1, 3, 6, 5), IN4(3, 3, 3, 2), IN1(3)};
  FG_CHECK_GRAD(fgt_grad_check(build_fd, &s, in, 3, 1));
}

FG_TEST(conv_fd_groups_dilation, "") {
  fd_spec s = {"conv2d", {{1, 2}, {2, 1, 1, 2}, {2, 1}, 3, 0, {0, 0}}, 2};
  fgt_input in[2] = {IN4(1, 6, 5, 5), IN4(6, 2, 2, 3)};
  FG_CHECK_GRAD(fgt_grad_check(build_fd, &s, in, 2, 2));
}

FG_TEST(conv_fd_depthwise_same, "") {
  fd_spec s = {"conv2d", {{1, 1}, {0, 0, 0, 0}, {1, 2}, 5, 1, {0, 0}}, 3};
  fgt_input in[3] = {IN4(2, 5, 5, 6), IN4(5, 1, 2, 3), IN1(5)};
  FG_CHECK_GRAD(fgt_grad_check(build_fd, &s, in, 3, 3));
}

FG_TEST(conv_fd_transpose_output_padding, "") {
  fd_spec s = {"conv_transpose2d", {{2, 3}, {1, 0, 0, 1}, {1, 2}, 2, 0, {1, 2}}, 3};
  fgt_input in[3] = {IN4(2, 4, 3, 4), IN4(4, 3, 3, 2), IN1(6)};
  FG_CHECK_GRAD(fgt_grad_check(build_fd, &s, in, 3, 4));
}

/* Second order: the gradient ops are differentiable (Hessian-vector
 * products of CNNs). Inputs: dy, w, like (grad_input); x, dy, like
 * (grad_weight); like gets no gradient, and L does not depend on it. */
FG_TEST(conv_fd_grad_input_second_order, "") {
  fd_spec s = {"conv2d_grad_input", {{2, 1}, {1, 1, 0, 2}, {1, 2}, 2, 0, {0, 0}}, 3};
  /* x [1, 4, 6, 5], w [6, 2, 3, 2]: y [1, 6, 3, 6]. */
  fgt_input in[3] = {IN4(1, 6, 3, 6), IN4(6, 2, 3, 2), IN4(1, 4, 6, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_fd, &s, in, 3, 5));
}

FG_TEST(conv_fd_grad_weight_second_order, "") {
  fd_spec s = {"conv2d_grad_weight", {{2, 1}, {1, 1, 0, 2}, {1, 2}, 2, 0, {0, 0}}, 3};
  /* x [1, 4, 4, 3], w [4, 2, 3, 2]: y [1, 4, 2, 4]. */
  fgt_input in[3] = {IN4(1, 4, 4, 3), IN4(1, 4, 2, 4), IN4(4, 2, 3, 2)};
  FG_CHECK_GRAD(fgt_grad_check(build_fd, &s, in, 3, 6));
}

/* conv1d (conv2d with a height of 1): values by hand, then gradients. */
static fg_tensor *run_conv1d(const fg_conv1d_opts *o, const double *xv, int64_t l, const double *wv,
                             int64_t k, double bias, int64_t *ol) {
  fg_graph *g = fg_graph_new();
  int64_t xd[3] = {-1, 1, l}, wd[3] = {1, 1, k}, bd = 1;
  fg_output x = fg_placeholder(g, "x", FG_F64, 3, xd);
  fg_tensor *wt = tensor_of(FG_F64, 3, wd, wv), *bt = tensor_of(FG_F64, 1, &bd, &bias);
  fg_output y = fg_conv1d(g, x, fg_constant(g, "w", wt), fg_constant(g, "b", bt), o);
  fg_set_name(g, y, "y");
  int64_t yd[4];
  *ol = fg_output_shape(g, y, yd) == 3 ? yd[2] : -1;
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  int64_t fx[3] = {1, 1, l};
  fg_tensor *xt = tensor_of(FG_F64, 3, fx, xv), *out = NULL;
  fg_feed feed = {"x", xt};
  const char *fetch = "y";
  if (!s || fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) != 0)
    FG_FAIL_AT("conv1d: %s", fg_status_message(st));
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
  return out;
}

FG_TEST(conv1d_values, "") {
  const double x[5] = {1, 2, 3, 4, 5}, diff[2] = {1, -1}, pair[2] = {1, 1};
  int64_t ol;
  /* stride 2, pads (1, 0): [0 1 2 3 4 5] read at 0, 2, 4: x[i] - x[i+1]. */
  fg_conv1d_opts a = {2, {1, 0}, 0, 0, 0};
  fg_tensor *y = run_conv1d(&a, x, 5, diff, 2, 0.5, &ol);
  FG_REQUIRE(y && ol == 3);
  const double want_a[3] = {-0.5, -0.5, -0.5};
  for (int i = 0; i < 3; i++)
    FG_CHECK_NEAR(((double *)fg_tensor_data(y))[i], want_a[i], 1e-15);
  fg_tensor_free(y);
  /* dilation 2: x[i] + x[i + 2]. */
  fg_conv1d_opts b = {0, {0, 0}, 2, 0, 0};
  y = run_conv1d(&b, x, 5, pair, 2, 0, &ol);
  FG_REQUIRE(y && ol == 3);
  const double want_b[3] = {4, 6, 8};
  for (int i = 0; i < 3; i++)
    FG_CHECK_NEAR(((double *)fg_tensor_data(y))[i], want_b[i], 1e-15);
  fg_tensor_free(y);
  /* 'same' with an even kernel: the odd pad on the right, x[i] - x[i+1]
   * with x[5] = 0. */
  fg_conv1d_opts c = {0, {0, 0}, 0, 0, 1};
  y = run_conv1d(&c, x, 5, diff, 2, 0, &ol);
  FG_REQUIRE(y && ol == 5);
  const double want_c[5] = {-1, -1, -1, -1, 5};
  for (int i = 0; i < 5; i++)
    FG_CHECK_NEAR(((double *)fg_tensor_data(y))[i], want_c[i], 1e-15);
  fg_tensor_free(y);
  /* rank 4 is refused by name */
  fg_graph *g = fg_graph_new();
  int64_t d4[4] = {1, 1, 5, 5}, d3[3] = {1, 1, 2};
  fg_conv1d(g, fg_placeholder(g, "x", FG_F64, 4, d4), fg_placeholder(g, "w", FG_F64, 3, d3),
            FG_NO_OUTPUT, NULL);
  fg_status *st = fg_status_new();
  FG_CHECK(fg_graph_status(g, st) == FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "conv1d: x has rank 4 and w rank 3, expected 3");
  fg_status_free(st);
  fg_graph_free(g);
}

static fg_output build_conv1d(fg_graph *g, const fg_output *xs, void *vctx) {
  return fg_conv1d(g, xs[0], xs[1], xs[2], vctx);
}

FG_TEST(conv1d_fd_gradients, "") {
  fg_conv1d_opts o = {2, {2, 1}, 2, 2, 0};
  fgt_input in[3] = {{FG_F64, 3, {2, 4, 9}, NULL, 0, 0},
                     {FG_F64, 3, {6, 2, 3}, NULL, 0, 0},
                     {FG_F64, 1, {6}, NULL, 0, 0}};
  FG_CHECK_GRAD(fgt_grad_check(build_conv1d, &o, in, 3, 9));
}

/* FLOPs: 2 N O OH OW (C/groups) kH kW for the forward convolution, and the
 * same count for each of its gradients and for the transposed one. */
FG_TEST(conv_flops, "") {
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {2, 6, 9, 8}, wd[4] = {4, 3, 3, 2}, td[4] = {6, 5, 3, 2};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd), w = fg_placeholder(g, "w", FG_F32, 4, wd);
  fg_conv2d_opts o = {{2, 1}, {1, 0, 1, 1}, {1, 2}, 2, 0, {0, 0}};
  fg_output y = fg_conv2d(g, x, w, FG_NO_OUTPUT, &o);
  /* OH = (9 + 2 - 3) / 2 + 1 = 5, OW = (8 + 1 - 3) / 1 + 1 = 7. */
  int64_t yd[4];
  FG_REQUIRE(fg_output_shape(g, y, yd) == 4);
  FG_CHECK(yd[0] == 2 && yd[1] == 4 && yd[2] == 5 && yd[3] == 7);
  FG_CHECK_INT(fg_node_flops(g, y.node), 2 * 2 * 4 * 5 * 7 * 3 * 3 * 2);
  fg_output wrt[2] = {x, w}, d[2];
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_gradients(g, &y, 1, wrt, 2, NULL, d, st) == 0);
  FG_CHECK_INT(fg_node_flops(g, d[0].node), 2 * 2 * 4 * 5 * 7 * 3 * 3 * 2);
  FG_CHECK_INT(fg_node_flops(g, d[1].node), 2 * 2 * 4 * 5 * 7 * 3 * 3 * 2);
  /* conv_transpose2d: x [2, 6, 9, 8] * w [6, 5, 3, 2] with groups 2:
   * 2 * (N C_in H W) * (C_out/groups) kH kW. */
  fg_output t = fg_conv_transpose2d(g, x, fg_placeholder(g, "t", FG_F32, 4, td), FG_NO_OUTPUT, &o);
  FG_REQUIRE(t.node >= 0);
  FG_CHECK_INT(fg_node_flops(g, t.node), 2 * (2 * 6 * 9 * 8) * 5 * 3 * 2);
  fg_status_free(st);
  fg_graph_free(g);
}

/* ---- refusals -------------------------------------------------------------- */

typedef struct bad_spec {
  const char *op;
  int xrank, wrank;
  int64_t x[4], w[4];
  int64_t blen; /* -1: no bias */
  const char *attr;
  int64_t v[4];
  int nv;
  const char *needle;
} bad_spec;

/* Builds node 'c' from the spec; the graph's error must name the node and
 * contain `needle`. */
static void expect_refusal(const bad_spec *b) {
  fg_graph *g = fg_graph_new();
  fg_output in[3];
  in[0] = fg_placeholder(g, "x", FG_F32, b->xrank, b->x);
  in[1] = fg_placeholder(g, "w", FG_F32, b->wrank, b->w);
  int n = 2;
  if (b->blen >= 0) in[n++] = fg_placeholder(g, "b", FG_F32, 1, &b->blen);
  fg_attrs *a = fg_attrs_new();
  if (b->attr && b->nv == 0) fg_attrs_set_int(a, b->attr, b->v[0]);
  if (b->attr && b->nv > 0) fg_attrs_set_ints(a, b->attr, b->v, b->nv);
  fg_output y = fg_op(g, b->op, "c", in, n, a);
  fg_attrs_free(a);
  fg_status *st = fg_status_new();
  FG_CHECK(y.node < 0);
  FG_CHECK(fg_graph_status(g, st) == FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'c'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), b->needle);
  fg_status_free(st);
  fg_graph_free(g);
}
/* expect_refusal of a bad_spec given as its fields, in order. */
#define REFUSE(...) expect_refusal(&(bad_spec){__VA_ARGS__})

FG_TEST(conv_refuses_kernel_larger_than_padded_input, "badinput") {
  REFUSE("conv2d", 4, 4, {1, 3, 4, 9}, {2, 3, 3, 3}, -1, "dilations", {2, 1}, 2,
         "kernel height 3 (dilation 2: extent 5) is larger than input 0 (x)'s padded "
         "height 4");
  REFUSE("conv2d", 4, 4, {1, 3, 4, 3}, {2, 3, 3, 5}, -1, "pads", {0, 1, 0, 0}, 4, "kernel width 5");
}

FG_TEST(conv_refuses_groups_not_dividing, "badinput") {
  REFUSE("conv2d", 4, 4, {1, 6, 5, 5}, {4, 2, 3, 3}, -1, "groups", {4}, 0,
         "groups 4 does not divide input 0 (x)'s 6 channels");
  REFUSE("conv2d", 4, 4, {1, 6, 5, 5}, {4, 2, 3, 3}, -1, "groups", {3}, 0,
         "groups 3 does not divide input 1 (w)'s 4 output channels");
  REFUSE("conv_transpose2d", 4, 4, {1, 6, 5, 5}, {6, 2, 3, 3}, -1, "groups", {4}, 0,
         "groups 4 does not divide input 0 (x)'s 6 channels");
}

FG_TEST(conv_refuses_negative_pad_and_zero_stride_dilation, "badinput") {
  REFUSE("conv2d", 4, 4, {1, 3, 5, 5}, {2, 3, 3, 3}, -1, "pads", {0, -1, 0, 0}, 4,
         "pads[1] = -1 must be >= 0");
  REFUSE("conv2d", 4, 4, {1, 3, 5, 5}, {2, 3, 3, 3}, -1, "strides", {1, 0}, 2,
         "strides[1] = 0 must be >= 1");
  REFUSE("conv_transpose2d", 4, 4, {1, 3, 5, 5}, {3, 3, 3, 3}, -1, "dilations", {0, 1}, 2,
         "dilations[0] = 0 must be >= 1");
  REFUSE("conv2d", 4, 4, {1, 3, 5, 5}, {2, 3, 3, 3}, -1, "groups", {0}, 0,
         "'groups' = 0 must be in [1,");
  REFUSE("conv2d", 4, 4, {1, 3, 5, 5}, {2, 3, 3, 3}, -1, "strides", {1, 2, 3}, 3,
         "has 3 entries, expected 2");
}

FG_TEST(conv_refuses_channels_bias_rank, "badinput") {
  REFUSE("conv2d", 4, 4, {1, 8, 5, 5}, {4, 3, 3, 3}, -1, "groups", {2}, 0,
         "has 3 channels per group, expected C/groups = 8/2 = 4");
  REFUSE("conv2d", 4, 4, {1, 3, 5, 5}, {4, 3, 3, 3}, 5, NULL, {0}, 0,
         "input 2 (b) has 5 entries, expected the 4 output channels");
  REFUSE("conv2d", 3, 4, {1, 3, 5}, {4, 3, 3, 3}, -1, NULL, {0}, 0,
         "input 0 (x) shape [1,3,5] has rank 3, expected 4");
  REFUSE("conv2d", 4, 3, {1, 3, 5, 5}, {4, 3, 3}, -1, NULL, {0}, 0,
         "input 1 (w) shape [4,3,3] has rank 3, expected 4");
  REFUSE("conv_transpose2d", 4, 4, {1, 4, 5, 5}, {4, 3, 3, 3}, 4, "groups", {2}, 0,
         "input 2 (b) has 4 entries, expected the 6 output channels");
}

FG_TEST(conv_refuses_bad_same_and_output_padding, "badinput") {
  REFUSE("conv_transpose2d", 4, 4, {1, 3, 5, 5}, {3, 3, 3, 3}, -1, "output_padding", {2, 0}, 2,
         "'output_padding'[0] = 2 must be smaller than the stride 1");
  REFUSE("conv_transpose2d", 4, 4, {1, 3, 1, 5}, {3, 3, 1, 1}, -1, "pads", {1, 0, 1, 0}, 4,
         "output height -1 < 1");
  /* auto_pad is a string attribute: set it through the generic API. */
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {1, 3, 5, 5}, wd[4] = {2, 3, 3, 3};
  fg_output in[2] = {fg_placeholder(g, "x", FG_F32, 4, xd), fg_placeholder(g, "w", FG_F32, 4, wd)};
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_string(a, "auto_pad", "valid");
  fg_op(g, "conv2d", "c", in, 2, a);
  fg_status *st = fg_status_new();
  FG_CHECK(fg_graph_status(g, st) == FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'c' (conv2d): attribute 'auto_pad' = 'valid'");
  fg_attrs_free(a);
  fg_graph_free(g);
  /* PyTorch refuses padding='same' with a stride, and so does conv2d. */
  g = fg_graph_new();
  in[0] = fg_placeholder(g, "x", FG_F32, 4, xd);
  in[1] = fg_placeholder(g, "w", FG_F32, 4, wd);
  fg_conv2d_opts o = {{2, 2}, {0, 0, 0, 0}, {0, 0}, 0, 1, {0, 0}};
  FG_CHECK(fg_conv2d(g, in[0], in[1], FG_NO_OUTPUT, &o).node < 0);
  FG_CHECK(fg_graph_status(g, st) == FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "auto_pad 'same' needs strides 1,1");
  fg_graph_free(g);
  /* A builder refuses what the op cannot say. */
  g = fg_graph_new();
  in[0] = fg_placeholder(g, "x", FG_F32, 4, xd);
  in[1] = fg_placeholder(g, "w", FG_F32, 4, wd);
  fg_conv2d_opts t = {{0, 0}, {0, 0, 0, 0}, {0, 0}, 0, 1, {0, 0}};
  FG_CHECK(fg_conv_transpose2d(g, in[0], in[1], FG_NO_OUTPUT, &t).node < 0);
  FG_CHECK(fg_graph_status(g, st) == FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'same' padding is not supported");
  fg_graph_free(g);
  fg_status_free(st);
}

/* w's output channels unknown when built and not divisible by groups when
 * fed: refused at plan time, naming the node and the value. */
FG_TEST(conv_refuses_fed_shape_at_plan_time, "badinput") {
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {1, 6, 5, 5}, wd[4] = {-1, 3, 3, 3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd), w = fg_placeholder(g, "w", FG_F32, 4, wd);
  fg_conv2d_opts o = {{0, 0}, {0, 0, 0, 0}, {0, 0}, 2, 0, {0, 0}};
  fg_set_name(g, fg_conv2d(g, x, w, FG_NO_OUTPUT, &o), "c");
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  int64_t fw[4] = {3, 3, 3, 3};
  fg_tensor *xt = fg_tensor_new(FG_F32, 4, xd, st), *wt = fg_tensor_new(FG_F32, 4, fw, st);
  memset(fg_tensor_data(xt), 0, fg_tensor_num_bytes(xt));
  memset(fg_tensor_data(wt), 0, fg_tensor_num_bytes(wt));
  fg_feed feeds[2] = {{"x", xt}, {"w", wt}};
  const char *fetch = "c";
  fg_tensor *out = NULL;
  FG_CHECK(fg_session_run(s, feeds, 2, &fetch, 1, &out, NULL, 0, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'c' (conv2d): groups 2 does not divide input "
                                               "1 (w)'s 3 output channels");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "with the fed shapes");
  fg_tensor_free(xt);
  fg_tensor_free(wt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- plans: same bits twice, no allocation, a .fgb round trip ------------- */

static fg_tensor *run_once(fg_session *s, const conv_case *c, fg_dtype dt, const char *fetch) {
  int64_t blen = c->transpose ? c->w[1] * c->groups : c->w[0];
  fg_tensor *x = tensor_of(dt, 4, c->x, c->xv), *w = tensor_of(dt, 4, c->w, c->wv);
  fg_tensor *b = tensor_of(dt, 1, &blen, c->bv);
  fg_feed feeds[3] = {{"x", x}, {"w", w}, {"b", b}};
  fg_tensor *out = NULL;
  fg_status *st = fg_status_new();
  if (fg_session_run(s, feeds, 3, &fetch, 1, &out, NULL, 0, st) != 0)
    FG_FAIL_AT("run: %s", fg_status_message(st));
  fg_status_free(st);
  fg_tensor_free(x);
  fg_tensor_free(w);
  fg_tensor_free(b);
  return out;
}

static int same_bits(const fg_tensor *a, const fg_tensor *b) {
  return a && b && fg_tensor_num_bytes(a) == fg_tensor_num_bytes(b) &&
         memcmp(fg_tensor_data(a), fg_tensor_data(b), fg_tensor_num_bytes(a)) == 0;
}

FG_TEST(conv_plan_runs_twice_with_same_bits, "") {
  const conv_case *c = &conv_cases[6]; /* 11 channels, with bias */
  FG_REQUIRE(c->has_bias);
  fg_graph *g = case_graph(c, FG_F32);
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = 2;
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, &so, st);
  FG_REQUIRE(s);
  static const char *const names[4] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 4; i++) {
    fg_tensor *a = run_once(s, c, FG_F32, names[i]), *b = run_once(s, c, FG_F32, names[i]);
    if (!same_bits(a, b)) FG_FAIL_AT("%s differs between two runs of one plan", names[i]);
    fg_tensor_free(a);
    fg_tensor_free(b);
  }
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Sessions promise the same bits for any thread count: oneDNN's team
 * follows the session's threads, and its kernels must not split a sum
 * differently with more of them. The layer is large enough (about 10^8
 * FLOPs per pass) that a 2-thread session runs it on 2 threads. */
/* One random layer x [8, 16, 24, 24] * w [32, 16/groups, 3, 3] + b with its
 * gradients (of sum(y^2)), run by n sessions (threads, device); results
 * of sessions 1.. compared with session 0's: bitwise (tol 0) or within
 * tol. */
static void random_layer(const fg_conv2d_opts *o, int64_t batch, int n, const int *threads,
                         const char *const *devices, double tol) {
  int64_t xd[4] = {batch, 16, 24, 24}, wd[4] = {32, 16 / (o->groups ? o->groups : 1), 3, 3};
  int64_t bl = 32;
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd), w = fg_placeholder(g, "w", FG_F32, 4, wd);
  fg_output b = fg_placeholder(g, "b", FG_F32, 1, &bl);
  fg_output y = fg_conv2d(g, x, w, b, o);
  fg_set_name(g, y, "y");
  fg_output loss = fg_reduce_sum(g, fg_mul(g, y, y), NULL, 0, 0);
  fg_output wrt[3] = {x, w, b}, d[3];
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_gradients(g, &loss, 1, wrt, 3, NULL, d, st) == 0);
  static const char *const names[4] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 3; i++)
    fg_set_name(g, fg_identity(g, d[i]), names[i + 1]);
  fg_tensor *t[3] = {fg_tensor_new(FG_F32, 4, xd, st), fg_tensor_new(FG_F32, 4, wd, st),
                     fg_tensor_new(FG_F32, 1, &bl, st)};
  uint64_t rng = 7;
  for (int k = 0; k < 3; k++)
    for (int64_t i = 0; i < fg_tensor_num_elements(t[k]); i++)
      ((float *)fg_tensor_data(t[k]))[i] = (float)(fgt_uniform(&rng) - 0.5);
  fg_feed feeds[3] = {{"x", t[0]}, {"w", t[1]}, {"b", t[2]}};
  fg_tensor *out[4][4] = {{0}};
  for (int k = 0; k < n && k < 4; k++) {
    fg_session_options so;
    fg_session_options_init(&so);
    so.num_threads = threads[k];
    so.device = devices ? devices[k] : NULL;
    fg_session *s = fg_session_new(g, &so, st);
    if (!s) FG_FAIL_AT("session %d: %s", k, fg_status_message(st));
    if (s && fg_session_run(s, feeds, 3, (const char **)names, 4, out[k], NULL, 0, st) != 0)
      FG_FAIL_AT("run %d: %s", k, fg_status_message(st));
    fg_session_free(s);
  }
  for (int i = 0; i < 4; i++) {
    for (int k = 1; k < n && k < 4 && out[0][i] && out[k][i]; k++) {
      const char *dev = devices && devices[k] ? devices[k] : "cpu";
      if (tol == 0 && !same_bits(out[0][i], out[k][i]))
        FG_FAIL_AT("%s differs between 1 thread and %d (%s)", names[i], threads[k], dev);
      const int64_t m = fg_tensor_num_elements(out[0][i]);
      double *want = malloc((size_t)m * sizeof *want);
      for (int64_t e = 0; want && e < m; e++)
        want[e] = ((const float *)fg_tensor_data(out[0][i]))[e];
      int64_t at;
      double err = want ? max_err(out[k][i], want, m, &at) : INFINITY;
      if (tol > 0 && !(err <= tol))
        FG_FAIL_AT("%s on %s differs from the CPU by %g at %lld", names[i], dev, err,
                   (long long)at);
      free(want);
    }
    for (int k = 0; k < n && k < 4; k++)
      fg_tensor_free(out[k][i]);
  }
  for (int k = 0; k < 3; k++)
    fg_tensor_free(t[k]);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Sessions promise the same bits for any thread count: oneDNN's team
 * follows the session's threads, and its kernels must not split a sum
 * differently with more of them. The layer is large enough (about 10^8
 * FLOPs per pass) that a 2-thread session runs it on 2 threads. */
FG_TEST(conv_same_bits_for_1_2_and_4_threads, "") {
  fg_conv2d_opts o = {{1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 0, {0, 0}};
  const int threads[3] = {1, 2, 4};
  random_layer(&o, 8, 3, threads, NULL, 0);
  fg_conv2d_opts s2 = {{2, 2}, {1, 0, 2, 1}, {1, 1}, 2, 0, {0, 0}};
  random_layer(&s2, 8, 3, threads, NULL, 0);
  /* One image: the forward convolution's output channels are cut into
   * parts (16-channel blocks) by the machine's cores, never by threads. */
  random_layer(&o, 1, 3, threads, NULL, 0);
}

/* The CUDA kernels against the CPU kernels on random inputs: a plain layer,
 * and one with stride 2, groups 2 and asymmetric pads (cuDNN's padded copy
 * of x in the scratch). */
FG_TEST(conv_cuda_matches_cpu_random, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  FG_SKIP_NO_CUDA_DEVICE();
  const int threads[2] = {1, 1};
  const char *const devices[2] = {NULL, "cuda:0"};
  fg_conv2d_opts o = {{1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 0, {0, 0}};
  random_layer(&o, 8, 2, threads, devices, 1e-4);
  fg_conv2d_opts s2 = {{2, 2}, {1, 0, 2, 1}, {1, 1}, 2, 0, {0, 0}};
  random_layer(&s2, 8, 2, threads, devices, 1e-4);
#endif
}

/* The oneDNN primitives and scratchpads are made when the plan is built:
 * a cached run costs only the fetched tensor (struct and buffer), as for
 * every other op. (Allocations inside libdnnl.so are not counted here.) */
FG_TEST(conv_cached_plan_run_allocates_only_its_fetch, "") {
  const conv_case *c = &conv_cases[7]; /* conv_transpose2d, with bias */
  fg_graph *g = case_graph(c, FG_F32);
  for (int threads = 1; threads <= 2; threads++) {
    fg_session_options so;
    fg_session_options_init(&so);
    so.num_threads = threads;
    fg_status *st = fg_status_new();
    fg_session *s = fg_session_new(g, &so, st);
    FG_REQUIRE(s);
    int64_t blen = c->w[1] * c->groups;
    fg_tensor *x = tensor_of(FG_F32, 4, c->x, c->xv), *w = tensor_of(FG_F32, 4, c->w, c->wv);
    fg_tensor *b = tensor_of(FG_F32, 1, &blen, c->bv);
    fg_feed feeds[3] = {{"x", x}, {"w", w}, {"b", b}};
    const char *fetch = "dw";
    fg_tensor *out = NULL;
    FG_REQUIRE(fg_session_run(s, feeds, 3, &fetch, 1, &out, NULL, 0, st) == 0);
    fg_tensor_free(out);
    long before = atomic_load(&n_allocs);
    FG_REQUIRE(fg_session_run(s, feeds, 3, &fetch, 1, &out, NULL, 0, st) == 0);
    FG_CHECK_INT(atomic_load(&n_allocs) - before, 2);
    int64_t at;
    FG_CHECK(max_err(out, c->dwv, numel4(c->w), &at) <= 2e-5);
    fg_tensor_free(out);
    fg_tensor_free(x);
    fg_tensor_free(w);
    fg_tensor_free(b);
    fg_session_free(s);
    fg_status_free(st);
  }
  fg_graph_free(g);
}

FG_TEST(conv_fgb_round_trip, "") {
  const conv_case *c = &conv_cases[5]; /* padding 'same', dilation */
  fg_graph *g = case_graph(c, FG_F32);
  fg_status *st = fg_status_new();
  void *bytes = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &bytes, &size, st) == 0);
  fg_graph *h = fg_graph_load_memory(bytes, size, st);
  free(bytes);
  if (!h) FG_FAIL_AT("load: %s", fg_status_message(st));
  FG_REQUIRE(h);
  fg_session *s1 = fg_session_new(g, NULL, st), *s2 = fg_session_new(h, NULL, st);
  FG_REQUIRE(s1 && s2);
  static const char *const names[4] = {"y", "dx", "dw", "db"};
  for (int i = 0; i < 4; i++) {
    fg_tensor *a = run_once(s1, c, FG_F32, names[i]), *b = run_once(s2, c, FG_F32, names[i]);
    if (!same_bits(a, b)) FG_FAIL_AT("%s differs after a .fgb round trip", names[i]);
    fg_tensor_free(a);
    fg_tensor_free(b);
  }
  fg_session_free(s1);
  fg_session_free(s2);
  fg_graph_free(g);
  fg_graph_free(h);
  fg_status_free(st);
}

/* An empty batch: a plan is made (nothing for oneDNN to prepare) and the
 * outputs are empty, or zeros for the weight gradient and the bias's
 * gradient. */
FG_TEST(conv_empty_batch, "") {
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {-1, 3, 5, 5}, wd[4] = {4, 3, 3, 3}, bl = 4;
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd), w = fg_placeholder(g, "w", FG_F32, 4, wd);
  fg_output b = fg_placeholder(g, "b", FG_F32, 1, &bl);
  fg_output y = fg_conv2d(g, x, w, b, NULL);
  fg_set_name(g, y, "y");
  fg_output loss = fg_reduce_sum(g, y, NULL, 0, 0);
  fg_output wrt[2] = {w, b}, d[2];
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_gradients(g, &loss, 1, wrt, 2, NULL, d, st) == 0);
  fg_set_name(g, fg_identity(g, d[0]), "dw");
  fg_set_name(g, fg_identity(g, d[1]), "db");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  int64_t x0[4] = {0, 3, 5, 5};
  fg_tensor *xt = fg_tensor_new(FG_F32, 4, x0, st), *wt = fg_tensor_new(FG_F32, 4, wd, st);
  fg_tensor *bt = fg_tensor_new(FG_F32, 1, &bl, st);
  for (int64_t i = 0; i < 108; i++)
    ((float *)fg_tensor_data(wt))[i] = 1;
  for (int64_t i = 0; i < 4; i++)
    ((float *)fg_tensor_data(bt))[i] = 1;
  fg_feed feeds[3] = {{"x", xt}, {"w", wt}, {"b", bt}};
  const char *fetch[3] = {"y", "dw", "db"};
  fg_tensor *out[3] = {0};
  if (fg_session_run(s, feeds, 3, fetch, 3, out, NULL, 0, st) != 0)
    FG_FAIL_AT("run: %s", fg_status_message(st));
  FG_REQUIRE(out[0] && out[1] && out[2]);
  FG_CHECK_INT(fg_tensor_num_elements(out[0]), 0);
  for (int64_t i = 0; i < 108; i++)
    FG_CHECK(((const float *)fg_tensor_data(out[1]))[i] == 0.0f);
  for (int64_t i = 0; i < 4; i++)
    FG_CHECK(((const float *)fg_tensor_data(out[2]))[i] == 0.0f);
  for (int i = 0; i < 3; i++)
    fg_tensor_free(out[i]);
  fg_tensor_free(xt);
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A direct kernel call has no plan-time state: the f32 kernel makes its
 * primitive for the call and frees it; the result matches the f64 loops. */
FG_TEST(conv_kernel_without_state, "") {
  const conv_case *c = &conv_cases[1];
  float xf[3 * 9 * 8], wf[5 * 3 * 3 * 2], bf[5], yf[5 * 5 * 4];
  FG_REQUIRE(numel4(c->x) == 216 && numel4(c->w) == 90 && numel4(c->y) == 100);
  for (int i = 0; i < 216; i++)
    xf[i] = (float)c->xv[i];
  for (int i = 0; i < 90; i++)
    wf[i] = (float)c->wv[i];
  for (int i = 0; i < 5; i++)
    bf[i] = (float)c->bv[i];
  fg_kbuf in[3] = {
      {FG_F32, 4, {1, 3, 9, 8}, xf, 0}, {FG_F32, 4, {5, 3, 3, 2}, wf, 0}, {FG_F32, 1, {5}, bf, 0}};
  fg_kbuf out = {FG_F32, 4, {1, 5, 5, 4}, yf, 0};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  fg_conv_params cp = {{2, 2}, {1, 1}, {1, 0, 2, 1}, 1, {0, 0}};
  p.conv = cp;
  char err[256] = "";
  fg_kctx ctx = {in,   3,    &out, 1, &p, err, sizeof err, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};
  fg_kernel_fn fn = fg_cpu_kernel("conv2d", FG_F32);
  FG_REQUIRE(fn);
  FG_REQUIRE(fn(&ctx) == 0);
  for (int i = 0; i < 100; i++)
    FG_CHECK_NEAR(yf[i], c->yv[i], 2e-5);
  FG_CHECK(fg_cpu_kernel_prep("conv2d", FG_F32) != NULL);
  FG_CHECK(fg_cpu_kernel_prep("add", FG_F32) == NULL);
}

/* The weight of a variable keeps its reordered copy between inference runs,
 * and a run that writes the variable makes the next run use the new
 * values: x all ones [1, c, 12, 12], w [o, c, 3, 3] all ones then all twos
 * (assigned by a target run), no padding: every output is c * 9 sums of
 * x * w, so 9c then 18c, and 18c again on a third run. With 32 output
 * channels of 16 inputs the image's output channels are cut into parts
 * (on 2 cores or more), each converting its slice of the weight to a
 * blocked layout. */
static void variable_weight_case(int64_t o, int64_t c) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {1, c, 12, 12}, wd[4] = {o, c, 3, 3};
  double ones[32 * 16 * 9], twos[32 * 16 * 9];
  for (int i = 0; i < 32 * 16 * 9; i++)
    ones[i] = 1, twos[i] = 2;
  fg_tensor *w0 = tensor_of(FG_F32, 4, wd, ones), *w1 = tensor_of(FG_F32, 4, wd, twos);
  fg_tensor *x = tensor_of(FG_F32, 4, xd, ones);
  FG_REQUIRE(w0 && w1 && x);
  fg_output w = fg_variable(g, "w", w0);
  fg_output y = fg_conv2d(g, fg_placeholder(g, "x", FG_F32, 4, xd), w, (fg_output){-1, 0}, NULL);
  fg_set_name(g, y, "y");
  fg_set_name(g, fg_assign(g, w, fg_constant(g, "w1", w1)), "set_w");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  fg_feed feed = {"x", x};
  const char *fetch = "y", *target = "set_w";
  const float want[3] = {9.0f * c, 18.0f * c, 18.0f * c};
  for (int r = 0; r < 3; r++) {
    if (r == 1) FG_REQUIRE(fg_session_run(s, NULL, 0, NULL, 0, NULL, &target, 1, st) == 0);
    fg_tensor *out = NULL;
    FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
    const float *v = fg_tensor_data(out);
    FG_CHECK_INT(fg_tensor_num_elements(out), o * 10 * 10);
    for (int64_t i = 0; i < fg_tensor_num_elements(out); i++)
      if (v[i] != want[r])
        FG_FAIL_AT("o %lld, run %d: y[%lld] = %g, want %g", (long long)o, r, (long long)i, v[i],
                   want[r]);
    fg_tensor_free(out);
  }
  fg_session_free(s);
  fg_tensor_free(w0);
  fg_tensor_free(w1);
  fg_tensor_free(x);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(conv_variable_weight_follows_assign, "") {
  variable_weight_case(3, 2);
  variable_weight_case(32, 16);
}
