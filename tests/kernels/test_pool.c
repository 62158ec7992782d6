/* The pooling ops: forward and gradient against PyTorch (tests/data/
 * pool_fixtures.h, from tests/gen/gen_pool.py) in f64 and f32, through the
 * graph API and fg_gradients; f64 finite-difference checks; refusals of bad
 * attributes and shapes, naming the node and the value; a .fgb round trip;
 * thread-count independence; and (gpu label) the CUDA kernels against the
 * CPU's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../autodiff/grad_check.h"
#include "../data/pool_fixtures.h"
#include "autodiff/grad.h"
#include "fgtest.h"
#include "test_kernels_util.h"
#include "flowgraph/flowgraph.h"
#include "graph/op_table.h"
#include "kernels/kernel.h"

#define N_CASES ((int)(sizeof pool_cases / sizeof pool_cases[0]))

static fg_pool2d_opts opts_of(const pool_case *c) {
  fg_pool2d_opts o;
  memset(&o, 0, sizeof o);
  memcpy(o.kernel, c->kernel, sizeof o.kernel);
  memcpy(o.strides, c->strides, sizeof o.strides);
  memcpy(o.pads, c->pads, sizeof o.pads);
  memcpy(o.dilations, c->dilations, sizeof o.dilations);
  o.ceil_mode = c->ceil_mode;
  o.count_include_pad = c->count_include_pad;
  return o;
}

/* The case's op applied to x with the public builders. */
static fg_output build_case(fg_graph *g, const pool_case *c, fg_output x) {
  fg_pool2d_opts o = opts_of(c);
  if (!strcmp(c->op, "max_pool2d")) return fg_max_pool2d(g, x, &o);
  if (!strcmp(c->op, "avg_pool2d")) return fg_avg_pool2d(g, x, &o);
  if (!strcmp(c->op, "adaptive_avg_pool2d"))
    return fg_adaptive_avg_pool2d(g, x, c->out[0], c->out[1]);
  if (!strcmp(c->op, "global_avg_pool")) return fg_global_avg_pool(g, x);
  return fg_global_max_pool(g, x);
}

static int64_t numel4(const int64_t *d) { return d[0] * d[1] * d[2] * d[3]; }

/* Graph: x placeholder, y = pool(x), dx = gradient of y with seed dy
 * (a constant); names "x", "y", "dx". */
static fg_graph *case_graph(const pool_case *c, fg_dtype dt) {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", dt, 4, c->dims);
  fg_output y = build_case(g, c, x);
  fg_set_name(g, y, "y");
  const int64_t yd[4] = {c->dims[0], c->dims[1], c->out[0], c->out[1]};
  fg_tensor *dyt = tensor_of_doubles(dt, 4, yd, c->dy);
  fg_output dy = fg_constant(g, "dy", dyt);
  fg_tensor_free(dyt);
  fg_output dx;
  fg_status *st = fg_status_new();
  if (fg_gradients(g, &y, 1, &x, 1, &dy, &dx, st) == 0) fg_set_name(g, dx, "dx");
  fg_status_free(st);
  return g;
}

/* Runs y and dx for the case's x with `threads` threads; 0 or -1. */
static int run_case(fg_graph *g, const pool_case *c, fg_dtype dt, int threads, const char *device,
                    fg_tensor **y, fg_tensor **dx) {
  fg_status *st = fg_status_new();
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = threads;
  if (device) so.device = device;
  fg_session *s = fg_session_new(g, &so, st);
  fg_tensor *xt = tensor_of_doubles(dt, 4, c->dims, c->x);
  fg_feed feed = {"x", xt};
  const char *fetch[2] = {"y", "dx"};
  fg_tensor *out[2] = {NULL, NULL};
  int rc = s ? fg_session_run(s, &feed, 1, fetch, 2, out, NULL, 0, st) : -1;
  if (rc) fprintf(stderr, "run_case %s: %s\n", c->op, fg_status_message(st));
  *y = out[0];
  *dx = out[1];
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

/* Largest |got - want| / (|want| + 1) over n elements. */
static double max_err(const fg_tensor *got, const double *want, int64_t n) {
  double e = 0;
  for (int64_t i = 0; i < n; i++) {
    const double d = fabs(tensor_elem(got, i) - want[i]) / (fabs(want[i]) + 1);
    if (!(d <= e)) e = d; /* NaN counts as an error */
  }
  return e;
}

static void check_against_torch(fg_dtype dt, double tol) {
  for (int k = 0; k < N_CASES; k++) {
    const pool_case *c = &pool_cases[k];
    fg_graph *g = case_graph(c, dt);
    FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
    fg_tensor *y = NULL, *dx = NULL;
    FG_REQUIRE(run_case(g, c, dt, 1, NULL, &y, &dx) == 0);
    const int64_t yd[4] = {c->dims[0], c->dims[1], c->out[0], c->out[1]};
    FG_CHECK_INT(fg_tensor_num_elements(y), numel4(yd));
    FG_CHECK_INT(fg_tensor_num_elements(dx), numel4(c->dims));
    const double ey = max_err(y, c->y, numel4(yd)), ed = max_err(dx, c->dx, numel4(c->dims));
    if (!(ey <= tol) || !(ed <= tol))
      FG_FAIL_AT("case %d (%s) %s: forward error %g, gradient error %g", k, c->op,
                 fg_dtype_name(dt), ey, ed);
    fg_tensor_free(y);
    fg_tensor_free(dx);
    fg_graph_free(g);
  }
}

FG_TEST(pool_vs_torch_f64, "") { check_against_torch(FG_F64, 1e-12); }
/* f32: sums of at most a dozen values, each exact in f32. */
FG_TEST(pool_vs_torch_f32, "") { check_against_torch(FG_F32, 2e-6); }

/* The fixtures cover what they claim: ceil_mode changing the size,
 * asymmetric pads, dilation 2, both count_include_pad values, ties. */
FG_TEST(pool_fixture_coverage, "") {
  int ceil = 0, asym = 0, dil = 0, cip0 = 0, cip1 = 0, adapt_odd = 0;
  for (int k = 0; k < N_CASES; k++) {
    const pool_case *c = &pool_cases[k];
    ceil += c->ceil_mode;
    asym += c->pads[0] != c->pads[2] || c->pads[1] != c->pads[3];
    dil += c->dilations[0] == 2 || c->dilations[1] == 2;
    if (!strcmp(c->op, "avg_pool2d")) {
      cip1 += c->count_include_pad;
      cip0 += !c->count_include_pad;
    }
    adapt_odd += !strcmp(c->op, "adaptive_avg_pool2d") && (c->dims[2] % c->out[0] != 0);
    FG_CHECK(c->dims[1] % 8 != 0);
  }
  FG_CHECK(ceil >= 3 && asym >= 3 && dil >= 3 && cip0 >= 3 && cip1 >= 3 && adapt_odd >= 2);
}

/* One run of g feeding xt as placeholder "x": the tensor named `fetch`
 * (the caller frees it), or NULL after reporting the failure. */
static fg_tensor *run_x(fg_graph *g, fg_tensor *xt, const char *fetch) {
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  fg_feed f = {"x", xt};
  fg_tensor *out = NULL;
  if (!s || fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) != 0)
    FG_FAIL_AT("running the pool graph: %s", fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return out;
}

/* Ties: a window of equal maxima sends the whole gradient to its first
 * element (by hand: one 2x2 window over [[1, 1], [1, 1]]). */
FG_TEST(pool_max_tie_first_wins, "") {
  fg_graph *g = fg_graph_new();
  const int64_t d[4] = {1, 1, 2, 3};
  fg_output x = fg_placeholder(g, "x", FG_F64, 4, d);
  fg_pool2d_opts o = {{2, 2}, {1, 1}, {0, 0, 0, 0}, {0, 0}, 0, 0};
  fg_output y = fg_max_pool2d(g, x, &o);
  fg_output dx;
  FG_REQUIRE(fg_gradients(g, &y, 1, &x, 1, NULL, &dx, NULL) == 0);
  fg_set_name(g, dx, "dx");
  const double xv[6] = {1, 1, 3, 1, 1, 3};
  fg_tensor *xt = fg_tensor_new(FG_F64, 4, d, NULL);
  memcpy(fg_tensor_data(xt), xv, sizeof xv);
  fg_tensor *out = run_x(g, xt, "dx");
  FG_REQUIRE(out);
  /* windows: cols 0-1 -> max 1 first at (0,0); cols 1-2 -> 3 first at (0,2) */
  const double want[6] = {1, 0, 1, 0, 0, 0};
  for (int i = 0; i < 6; i++)
    FG_CHECK_NEAR(tensor_elem(out, i), want[i], 0);
  fg_tensor_free(out);
  fg_tensor_free(xt);
  fg_graph_free(g);
}

/* The 2x2 stride-2 window's own loop (no padding): among equal maxima the
 * first tap's value stays, so -0.0 before +0.0 gives -0.0 and +0.0 before
 * -0.0 gives +0.0 (by hand); a trailing odd row and column are not read. */
FG_TEST(pool_max_2x2s2_signed_zero_ties, "") {
  fg_graph *g = fg_graph_new();
  const int64_t d[4] = {1, 1, 3, 5};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, d);
  fg_pool2d_opts o = {{2, 2}, {2, 2}, {0, 0, 0, 0}, {0, 0}, 0, 0};
  fg_set_name(g, fg_max_pool2d(g, x, &o), "y");
  /* windows: cols 0-1 {-0, +0, -1, -2} -> -0.0; cols 2-3 {+0, -0, -3, -0}
   * -> +0.0; column 4 and row 2 (9s) lie outside every window. */
  const double xv[15] = {-0.0, 0.0, 0.0, -0.0, 9, -1, -2, -3, -0.0, 9, 9, 9, 9, 9, 9};
  fg_tensor *xt = tensor_of_doubles(FG_F32, 4, d, xv);
  fg_tensor *out = run_x(g, xt, "y");
  FG_REQUIRE(out);
  FG_CHECK_INT((int)fg_tensor_num_elements(out), 2);
  const float *y = fg_tensor_data(out);
  FG_CHECK(y[0] == 0 && signbit(y[0]));
  FG_CHECK(y[1] == 0 && !signbit(y[1]));
  fg_tensor_free(out);
  fg_tensor_free(xt);
  fg_graph_free(g);
}

/* global_avg_pool: each plane's sum in double, elements in order, divided
 * once by the element count and rounded to the dtype: the same bits as that
 * loop written here, on 21 planes (groups of planes summed side by side and
 * a remainder), f32 and f64. */
FG_TEST(pool_global_avg_bits_by_hand, "") {
  const int64_t d[4] = {3, 7, 5, 3};
  static double xv[3 * 7 * 5 * 3];
  uint64_t r = 17;
  for (size_t i = 0; i < sizeof xv / sizeof xv[0]; i++)
    xv[i] = (fgt_uniform(&r) - 0.5) * 1e3;
  for (int dt = 0; dt < 2; dt++) {
    const fg_dtype t = dt ? FG_F64 : FG_F32;
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", t, 4, d);
    fg_set_name(g, fg_global_avg_pool(g, x), "y");
    fg_tensor *xt = tensor_of_doubles(t, 4, d, xv);
    fg_tensor *out = run_x(g, xt, "y");
    FG_REQUIRE(out);
    for (int p = 0; p < 21; p++) {
      double sum = 0;
      for (int e = 0; e < 15; e++)
        sum += dt ? xv[p * 15 + e] : (double)(float)xv[p * 15 + e];
      const double want = dt ? sum / 15.0 : (double)(float)(sum / 15.0);
      if (tensor_elem(out, p) != want)
        FG_FAIL_AT("%s plane %d: %.17g, want %.17g", fg_dtype_name(t), p, tensor_elem(out, p),
                   want);
    }
    fg_tensor_free(out);
    fg_tensor_free(xt);
    fg_graph_free(g);
  }
}

/* NaN in a window wins the maximum, as in torch. */
FG_TEST(pool_max_nan_propagates, "") {
  fg_graph *g = fg_graph_new();
  const int64_t d[4] = {1, 1, 1, 4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, d);
  fg_pool2d_opts o = {{1, 2}, {0, 0}, {0, 0, 0, 0}, {0, 0}, 0, 0};
  fg_set_name(g, fg_max_pool2d(g, x, &o), "y");
  const float xv[4] = {NAN, 5, 2, 1};
  fg_tensor *xt = fg_tensor_new(FG_F32, 4, d, NULL);
  memcpy(fg_tensor_data(xt), xv, sizeof xv);
  fg_tensor *out = run_x(g, xt, "y");
  FG_REQUIRE(out);
  FG_CHECK(isnan(tensor_elem(out, 0)));
  FG_CHECK_NEAR(tensor_elem(out, 1), 2, 0);
  fg_tensor_free(out);
  fg_tensor_free(xt);
  fg_graph_free(g);
}

/* The gradient follows torch's index rule with NaN: a NaN takes the
 * index, a later larger number does not, a later NaN does (by hand:
 * windows [1, NaN, 5] and [NaN, 2, NaN] of a 1x3 kernel, stride 3). */
FG_TEST(pool_max_grad_nan_index, "") {
  for (int dt = 0; dt < 2; dt++) {
    const fg_dtype t = dt ? FG_F64 : FG_F32;
    fg_graph *g = fg_graph_new();
    const int64_t d[4] = {1, 1, 1, 6};
    fg_output x = fg_placeholder(g, "x", t, 4, d);
    fg_pool2d_opts o = {{1, 3}, {0, 0}, {0, 0, 0, 0}, {0, 0}, 0, 0};
    fg_output y = fg_max_pool2d(g, x, &o);
    fg_output dx;
    FG_REQUIRE(fg_gradients(g, &y, 1, &x, 1, NULL, &dx, NULL) == 0);
    fg_set_name(g, dx, "dx");
    const double xv[6] = {1, NAN, 5, NAN, 2, NAN};
    fg_tensor *xt = tensor_of_doubles(t, 4, d, xv);
    fg_tensor *out = run_x(g, xt, "dx");
    FG_REQUIRE(out);
    const double want[6] = {0, 1, 0, 0, 0, 1};
    for (int i = 0; i < 6; i++)
      FG_CHECK_NEAR(tensor_elem(out, i), want[i], 0);
    fg_tensor_free(out);
    fg_tensor_free(xt);
    fg_graph_free(g);
  }
}

/* NaN through every path of the forward (the fused 3x3/s2 rows, the
 * row passes of 3x3/s1 and 2x2/s2, the edge taps): an output is NaN
 * exactly when its window holds a NaN, else the maximum of its window,
 * computed here by plain loops. */
FG_TEST(pool_max_nan_every_path, "") {
  const int64_t d[4] = {1, 2, 9, 9};
  static const int64_t geo[4][4] = {{3, 2, 1, 1}, {3, 1, 1, 1}, {2, 2, 0, 0}, {3, 3, 1, 1}};
  for (int gi = 0; gi < 4; gi++)
    for (int dt = 0; dt < 2; dt++) {
      const int64_t k = geo[gi][0], s = geo[gi][1], p = geo[gi][2];
      const int64_t oh = (9 + 2 * p - k) / s + 1;
      double xv[162];
      uint64_t r = 11 + (uint64_t)gi;
      for (int i = 0; i < 162; i++)
        xv[i] = fgt_uniform(&r) - 0.5;
      xv[4 * 9 + 4] = NAN;      /* plane 0, centre */
      xv[81 + 0] = NAN;         /* plane 1, a corner (edge taps) */
      xv[81 + 8 * 9 + 5] = NAN; /* plane 1, bottom row */
      const fg_dtype t = dt ? FG_F64 : FG_F32;
      fg_graph *g = fg_graph_new();
      fg_output x = fg_placeholder(g, "x", t, 4, d);
      fg_pool2d_opts o = {{k, k}, {s, s}, {p, p, p, p}, {0, 0}, 0, 0};
      fg_set_name(g, fg_max_pool2d(g, x, &o), "y");
      fg_tensor *xt = tensor_of_doubles(t, 4, d, xv);
      fg_tensor *out = run_x(g, xt, "y");
      FG_REQUIRE(out);
      for (int64_t pl = 0; pl < 2; pl++)
        for (int64_t a = 0; a < oh; a++)
          for (int64_t b = 0; b < oh; b++) {
            double m = -INFINITY;
            int nan = 0;
            for (int64_t i = a * s - p; i < a * s - p + k; i++)
              for (int64_t j = b * s - p; j < b * s - p + k; j++) {
                if (i < 0 || j < 0 || i >= 9 || j >= 9) continue;
                const double v = dt ? xv[pl * 81 + i * 9 + j] : (float)xv[pl * 81 + i * 9 + j];
                nan |= isnan(v);
                if (v > m) m = v;
              }
            const double got = tensor_elem(out, (pl * oh + a) * oh + b);
            if (nan ? !isnan(got) : got != m)
              FG_FAIL_AT("geometry %d %s plane %lld out (%lld,%lld): %g, want %s%g", gi,
                         fg_dtype_name(t), (long long)pl, (long long)a, (long long)b, got,
                         nan ? "NaN " : "", m);
          }
      fg_tensor_free(out);
      fg_tensor_free(xt);
      fg_graph_free(g);
    }
}

/* One pooling case for the bit-for-bit checks: P planes of H x W values
 * xv (read as dtype t) and the op's attributes. */
typedef struct pool_def {
  int max;
  fg_dtype t;
  int64_t P, H, W;
  const double *xv;
  fg_pool2d_opts o;
} pool_def;

/* Element (pl, i, j) of x as the kernel sees it (rounded to f32 for f32). */
static double x_at(const pool_def *c, int64_t pl, int64_t i, int64_t j) {
  const double v = c->xv[(pl * c->H + i) * c->W + j];
  return c->t == FG_F32 ? (double)(float)v : v;
}

/* max_pool2d of output (a, b) of plane pl by the definition: taps in
 * window order, one replaces the maximum when larger; a NaN gives NaN. */
static double max_ref(const pool_def *c, int64_t pl, int64_t a, int64_t b) {
  const fg_pool2d_opts *o = &c->o;
  double m = -INFINITY;
  int nan = 0;
  for (int64_t i = 0; i < o->kernel[0]; i++)
    for (int64_t j = 0; j < o->kernel[1]; j++) {
      const int64_t ih = a * o->strides[0] - o->pads[0] + i * o->dilations[0];
      const int64_t iw = b * o->strides[1] - o->pads[1] + j * o->dilations[1];
      if (ih < 0 || iw < 0 || ih >= c->H || iw >= c->W) continue;
      const double v = x_at(c, pl, ih, iw);
      nan |= isnan(v);
      if (v > m) m = v;
    }
  return nan ? NAN : m;
}

/* avg_pool2d of output (a, b) by the definition: the window's elements
 * (window rows [a s - p, a s - p + kh) cut at H + p in ceil mode, columns
 * alike) summed in double in window order, divided by the window's size
 * (padded or clipped by count_include_pad), rounded once. */
static double avg_ref(const pool_def *c, int64_t pl, int64_t a, int64_t b) {
  const fg_pool2d_opts *o = &c->o;
  const int64_t r0 = a * o->strides[0] - o->pads[0], c0 = b * o->strides[1] - o->pads[1];
  const int64_t r1 = r0 + o->kernel[0] < c->H + o->pads[2] ? r0 + o->kernel[0] : c->H + o->pads[2];
  const int64_t c1 = c0 + o->kernel[1] < c->W + o->pads[3] ? c0 + o->kernel[1] : c->W + o->pads[3];
  double sum = 0;
  int64_t inside = 0;
  for (int64_t i = r0; i < r1; i++)
    for (int64_t j = c0; j < c1; j++) {
      if (i < 0 || j < 0 || i >= c->H || j >= c->W) continue;
      sum += x_at(c, pl, i, j);
      inside++;
    }
  const double v = sum / (o->count_include_pad ? (double)((r1 - r0) * (c1 - c0)) : (double)inside);
  return c->t == FG_F32 ? (double)(float)v : v;
}

/* Runs case c through a session and checks every output's bits against
 * the definition (NaN against NaN); `label` names the case in failures. */
static void check_pool_bits(const pool_def *c, const char *label) {
  fg_graph *g = fg_graph_new();
  const int64_t d[4] = {1, c->P, c->H, c->W};
  fg_output x = fg_placeholder(g, "x", c->t, 4, d);
  fg_set_name(g, c->max ? fg_max_pool2d(g, x, &c->o) : fg_avg_pool2d(g, x, &c->o), "y");
  fg_tensor *xt = tensor_of_doubles(c->t, 4, d, c->xv);
  fg_tensor *out = run_x(g, xt, "y");
  fg_tensor_free(xt);
  fg_graph_free(g);
  FG_REQUIRE(out);
  const int64_t OH = fg_tensor_dim(out, 2), OW = fg_tensor_dim(out, 3);
  for (int64_t pl = 0; pl < c->P; pl++)
    for (int64_t a = 0; a < OH; a++)
      for (int64_t b = 0; b < OW; b++) {
        const double want = c->max ? max_ref(c, pl, a, b) : avg_ref(c, pl, a, b);
        const double got = tensor_elem(out, (pl * OH + a) * OW + b);
        if (isnan(want) ? !isnan(got) : memcmp(&got, &want, sizeof got) != 0)
          FG_FAIL_AT("%s %s plane %lld out (%lld,%lld): %.17g, want %.17g", label,
                     fg_dtype_name(c->t), (long long)pl, (long long)a, (long long)b, got, want);
      }
  fg_tensor_free(out);
}

/* max_pool2d on small planes (the padded-row loop), bit for bit against
 * the definition. Values drawn from {-0.0, +0.0, -inf, 1, -1} so that ties
 * between signed zeros and all -inf windows are common, and a NaN; f32
 * and f64, with padding, stride 2, ceil mode and dilation. */
FG_TEST(pool_max_small_planes_bits_by_definition, "") {
  static const int64_t geo[5][6] = {/* k, s, pad, dilation, H = W, ceil */
                                    {3, 1, 1, 1, 7, 0},
                                    {3, 2, 1, 1, 14, 1},
                                    {2, 1, 0, 1, 5, 0},
                                    {3, 1, 1, 2, 9, 0},
                                    {5, 3, 2, 1, 11, 1}};
  static const double pick[5] = {-0.0, 0.0, -INFINITY, 1.0, -1.0};
  for (int gi = 0; gi < 5; gi++)
    for (int dt = 0; dt < 2; dt++) {
      const int64_t *q = geo[gi];
      const int64_t k = q[0], s = q[1], p = q[2], dl = q[3], H = q[4], n = 3 * H * H;
      double *xv = malloc((size_t)n * sizeof *xv);
      FG_REQUIRE(xv);
      uint64_t r = 3 + (uint64_t)gi;
      for (int64_t i = 0; i < n; i++)
        xv[i] = pick[(int)(fgt_uniform(&r) * 5) % 5];
      xv[2 * H * H + H + 1] = NAN; /* plane 2 */
      const pool_def c = {1,
                          dt ? FG_F64 : FG_F32,
                          3,
                          H,
                          H,
                          xv,
                          {{k, k}, {s, s}, {p, p, p, p}, {dl, dl}, (int)q[5], 0}};
      char label[32];
      snprintf(label, sizeof label, "geometry %d", gi);
      check_pool_bits(&c, label);
      free(xv);
    }
}

/* avg_pool2d, bit for bit, against the definition. Geometries where the
 * inside rows and columns take the vector loops (3x3 stride 1, Inception's;
 * 3x3 and 2x3 stride 2; 5x5 stride 1; wide rows past a 256-output block)
 * and edges on every side, in f32 and f64, with both divisor rules. */
FG_TEST(pool_avg_bits_by_definition, "") {
  static const int64_t geo[6][7] = {/* kh, kw, s, pad, H, W, ceil */
                                    {3, 3, 1, 1, 9, 11, 0},  {3, 3, 2, 1, 9, 12, 1},
                                    {2, 3, 2, 0, 8, 9, 0},   {5, 5, 1, 2, 7, 8, 0},
                                    {3, 3, 1, 0, 4, 600, 0}, {1, 1, 1, 0, 3, 5, 0}};
  for (int gi = 0; gi < 6; gi++)
    for (int dt = 0; dt < 2; dt++)
      for (int cip = 0; cip < 2; cip++) {
        const int64_t *q = geo[gi];
        const int64_t kh = q[0], kw = q[1], s = q[2], p = q[3], H = q[4], W = q[5], n = 2 * H * W;
        double *xv = malloc((size_t)n * sizeof *xv);
        FG_REQUIRE(xv);
        uint64_t r = 17 + (uint64_t)gi;
        for (int64_t i = 0; i < n; i++)
          xv[i] = fgt_uniform(&r) * 8 - 4;
        const pool_def c = {0,
                            dt ? FG_F64 : FG_F32,
                            2,
                            H,
                            W,
                            xv,
                            {{kh, kw}, {s, s}, {p, p, p, p}, {0, 0}, (int)q[6], cip}};
        char label[48];
        snprintf(label, sizeof label, "geometry %d cip %d", gi, cip);
        check_pool_bits(&c, label);
        free(xv);
      }
}

/* The same results, bit for bit, with 1 and 4 threads on a tensor big
 * enough to be split (64 planes of 40x40). */
FG_TEST(pool_threads_bitwise, "") {
  static double xv[2 * 32 * 40 * 40];
  uint64_t r = 5;
  for (size_t i = 0; i < sizeof xv / sizeof xv[0]; i++)
    xv[i] = fgt_uniform(&r) - 0.5;
  pool_case c = {"max_pool2d",
                 {2, 32, 40, 40},
                 {3, 3},
                 {2, 2},
                 {1, 1, 1, 1},
                 {1, 1},
                 0,
                 1,
                 {20, 20},
                 xv,
                 NULL,
                 NULL,
                 NULL};
  static double dyv[2 * 32 * 20 * 20];
  for (size_t i = 0; i < sizeof dyv / sizeof dyv[0]; i++)
    dyv[i] = fgt_uniform(&r);
  c.dy = dyv;
  const char *ops[2] = {"max_pool2d", "avg_pool2d"};
  for (int k = 0; k < 2; k++) {
    c.op = ops[k];
    fg_graph *g = case_graph(&c, FG_F32);
    fg_tensor *y1, *d1, *y4, *d4;
    FG_REQUIRE(run_case(g, &c, FG_F32, 1, NULL, &y1, &d1) == 0);
    FG_REQUIRE(run_case(g, &c, FG_F32, 4, NULL, &y4, &d4) == 0);
    FG_CHECK(memcmp(fg_tensor_data(y1), fg_tensor_data(y4), fg_tensor_num_bytes(y1)) == 0);
    FG_CHECK(memcmp(fg_tensor_data(d1), fg_tensor_data(d4), fg_tensor_num_bytes(d1)) == 0);
    fg_tensor_free(y1), fg_tensor_free(d1), fg_tensor_free(y4), fg_tensor_free(d4);
    fg_graph_free(g);
  }
}

/* ---- finite differences (f64) -------------------------------------------- */

static fg_output fd_build(fg_graph *g, const fg_output *xs, void *ctx) {
  return build_case(g, ctx, xs[0]);
}

/* Every fixture case, on random inputs (no ties, so max is smooth there). */
FG_TEST(pool_grad_check_f64, "") {
  for (int k = 0; k < N_CASES; k++) {
    pool_case c = pool_cases[k];
    fgt_input in = {FG_F64, 4, {c.dims[0], c.dims[1], c.dims[2], c.dims[3]}, NULL, -2, 2};
    const double e = fgt_grad_check(fd_build, &c, &in, 1, 100 + (uint64_t)k);
    if (!(e >= 0 && e < 1e-6)) FG_FAIL_AT("case %d (%s): gradient error %g", k, c.op, e);
  }
}

/* Second order through the average gradients: d/d(dy) of avg_pool2d_grad
 * is avg_pool2d, of adaptive_avg_pool2d_grad adaptive_avg_pool2d. */
static fg_output build_avg_grad(fg_graph *g, const fg_output *xs, void *ctx) {
  const pool_case *c = ctx;
  fg_output y = build_case(g, c, xs[0]);
  fg_output dx;
  if (fg_gradients(g, &y, 1, &xs[0], 1, &xs[1], &dx, NULL) != 0) return FG_NO_OUTPUT;
  return dx;
}

FG_TEST(pool_avg_grad_of_grad_f64, "") {
  const int idx[3] = {9, 15, 17}; /* avg ceil_mode cip 0, adaptive, global avg */
  for (int k = 0; k < 3; k++) {
    pool_case c = pool_cases[idx[k]];
    fgt_input in[2] = {{FG_F64, 4, {c.dims[0], c.dims[1], c.dims[2], c.dims[3]}, NULL, -1, 1},
                       {FG_F64, 4, {c.dims[0], c.dims[1], c.out[0], c.out[1]}, NULL, -1, 1}};
    const double e = fgt_grad_check(build_avg_grad, &c, in, 2, 7 + (uint64_t)k);
    if (!(e >= 0 && e < 1e-6)) FG_FAIL_AT("case %d (%s): gradient error %g", idx[k], c.op, e);
  }
}

/* The max gradient's own derivative is refused, naming the node. */
FG_TEST(pool_max_grad_of_grad_refused, "badinput") {
  fg_graph *g = fg_graph_new();
  const int64_t d[4] = {1, 2, 4, 4};
  fg_output x = fg_placeholder(g, "x", FG_F64, 4, d);
  fg_pool2d_opts o = {{2, 2}, {0, 0}, {0, 0, 0, 0}, {0, 0}, 0, 0};
  fg_output y = fg_max_pool2d(g, x, &o);
  fg_output dy = fg_placeholder(g, "dy", FG_F64, 4, (int64_t[]){1, 2, 2, 2});
  fg_output dx, ddy;
  FG_REQUIRE(fg_gradients(g, &y, 1, &x, 1, &dy, &dx, NULL) == 0);
  fg_status *st = fg_status_new();
  FG_CHECK(fg_gradients(g, &dx, 1, &dy, 1, NULL, &ddy, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "max_pool2d_grad");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "second derivative");
  fg_status_free(st);
  fg_graph_free(g);
}

/* ---- refusals ------------------------------------------------------------ */

/* Builds op(x) on a named node through fg_op with the given attributes and
 * checks the failure's code and that the message holds each needle. */
static void expect_refused(const char *op, const int64_t *xdims, int xrank, fg_dtype dt,
                           const char *k1, const int64_t *v1, int n1, const char *k2,
                           const int64_t *v2, int n2, const char *needle1, const char *needle2) {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", dt, xrank, xdims);
  fg_attrs *a = fg_attrs_new();
  if (k1) n1 < 0 ? fg_attrs_set_int(a, k1, v1[0]) : fg_attrs_set_ints(a, k1, v1, n1);
  if (k2) n2 < 0 ? fg_attrs_set_int(a, k2, v2[0]) : fg_attrs_set_ints(a, k2, v2, n2);
  fg_output y = fg_op(g, op, "pool_node", &x, 1, a);
  fg_attrs_free(a);
  fg_status *st = fg_status_new();
  FG_CHECK(y.node < 0);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'pool_node'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), needle1);
  if (needle2) FG_CHECK_STR_CONTAINS(fg_status_message(st), needle2);
  fg_status_free(st);
  fg_graph_free(g);
}

static const int64_t X4[4] = {1, 3, 6, 6};

FG_TEST(pool_refuses_rank, "badinput") {
  const int64_t k[2] = {2, 2}, d3[3] = {3, 6, 6};
  expect_refused("max_pool2d", d3, 3, FG_F32, "kernel", k, 2, NULL, NULL, 0, "rank 3", NULL);
  expect_refused("global_avg_pool", d3, 3, FG_F32, NULL, NULL, 0, NULL, NULL, 0, "rank 3", NULL);
  const int64_t os[2] = {2, 2};
  expect_refused("adaptive_avg_pool2d", d3, 3, FG_F64, "output_size", os, 2, NULL, NULL, 0,
                 "rank 3", NULL);
}

FG_TEST(pool_refuses_dtype, "badinput") {
  const int64_t k[2] = {2, 2};
  expect_refused("avg_pool2d", X4, 4, FG_I32, "kernel", k, 2, NULL, NULL, 0, "i32", NULL);
}

FG_TEST(pool_refuses_kernel, "badinput") {
  const int64_t k0[2] = {0, 2}, kn[2] = {2, -3}, k1[1] = {2};
  expect_refused("max_pool2d", X4, 4, FG_F32, "kernel", k0, 2, NULL, NULL, 0, "'kernel'", "is 0");
  expect_refused("avg_pool2d", X4, 4, FG_F32, "kernel", kn, 2, NULL, NULL, 0, "'kernel'", "-3");
  expect_refused("max_pool2d", X4, 4, FG_F32, "kernel", k1, 1, NULL, NULL, 0, "'kernel'",
                 "needs 2");
  expect_refused("max_pool2d", X4, 4, FG_F32, NULL, NULL, 0, NULL, NULL, 0, "kernel", "missing");
}

FG_TEST(pool_refuses_stride_zero, "badinput") {
  const int64_t k[2] = {2, 2}, s[2] = {1, 0};
  expect_refused("max_pool2d", X4, 4, FG_F32, "kernel", k, 2, "strides", s, 2, "'strides'", "is 0");
  expect_refused("avg_pool2d", X4, 4, FG_F64, "kernel", k, 2, "strides", s, 2, "'strides'", "is 0");
}

FG_TEST(pool_refuses_dilation_zero, "badinput") {
  const int64_t k[2] = {2, 2}, dl[2] = {0, 1};
  expect_refused("max_pool2d", X4, 4, FG_F32, "kernel", k, 2, "dilations", dl, 2, "'dilations'",
                 "is 0");
}

FG_TEST(pool_refuses_negative_pad, "badinput") {
  const int64_t k[2] = {3, 3}, p[4] = {0, -1, 0, 0};
  expect_refused("max_pool2d", X4, 4, FG_F32, "kernel", k, 2, "pads", p, 4, "'pads'", "-1");
  expect_refused("avg_pool2d", X4, 4, FG_F32, "kernel", k, 2, "pads", p, 4, "'pads'", "-1");
}

FG_TEST(pool_refuses_pad_over_half_kernel, "badinput") {
  const int64_t k[2] = {3, 4}, p[4] = {0, 0, 0, 3}, q[4] = {2, 0, 0, 0};
  expect_refused("max_pool2d", X4, 4, FG_F32, "kernel", k, 2, "pads", p, 4, "right pad 3",
                 "width 4");
  expect_refused("avg_pool2d", X4, 4, FG_F32, "kernel", k, 2, "pads", q, 4, "top pad 2",
                 "height 3");
}

FG_TEST(pool_refuses_kernel_larger_than_padded_input, "badinput") {
  const int64_t k[2] = {9, 2}, p[4] = {1, 0, 1, 0};
  expect_refused("max_pool2d", X4, 4, FG_F32, "kernel", k, 2, "pads", p, 4, "kernel height 9",
                 "padded input height 8");
  const int64_t k2[2] = {3, 3}, dl[2] = {1, 4};
  expect_refused("max_pool2d", X4, 4, FG_F32, "kernel", k2, 2, "dilations", dl, 2,
                 "dilated by 4 to 9", "padded input width 6");
}

FG_TEST(pool_refuses_output_not_positive, "badinput") {
  const int64_t d[4] = {1, 2, 0, 5}, os[2] = {2, 2};
  expect_refused("global_max_pool", d, 4, FG_F32, NULL, NULL, 0, NULL, NULL, 0, "height is 0",
                 NULL);
  expect_refused("adaptive_avg_pool2d", d, 4, FG_F32, "output_size", os, 2, NULL, NULL, 0,
                 "height is 0", NULL);
  const int64_t zero[2] = {0, 2};
  expect_refused("adaptive_avg_pool2d", X4, 4, FG_F32, "output_size", zero, 2, NULL, NULL, 0,
                 "'output_size'", "is 0");
  /* an empty padded input: the 1-wide window does not fit in 0 rows */
  const int64_t k[2] = {1, 1};
  expect_refused("max_pool2d", d, 4, FG_F32, "kernel", k, 2, NULL, NULL, 0, "kernel height 1",
                 "padded input height 0");
}

FG_TEST(pool_refuses_bad_flags, "badinput") {
  const int64_t k[2] = {2, 2}, two[1] = {2};
  expect_refused("avg_pool2d", X4, 4, FG_F32, "kernel", k, 2, "count_include_pad", two, -1,
                 "'count_include_pad' = 2", NULL);
  expect_refused("max_pool2d", X4, 4, FG_F32, "kernel", k, 2, "ceil_mode", two, -1,
                 "'ceil_mode' = 2", NULL);
}

/* The gradient ops check dy against x's pooled shape. */
FG_TEST(pool_grad_refuses_wrong_dy, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output in[2] = {fg_placeholder(g, "dy", FG_F32, 4, (int64_t[]){1, 3, 4, 3}),
                     fg_placeholder(g, "x", FG_F32, 4, X4)};
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_ints(a, "kernel", (int64_t[]){2, 2}, 2);
  fg_output r = fg_op(g, "max_pool2d_grad", "mpg", in, 2, a);
  fg_attrs_free(a);
  fg_status *st = fg_status_new();
  FG_CHECK(r.node < 0);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'mpg'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "[1,3,4,3]");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "[1,3,3,3]");
  fg_status_free(st);
  fg_graph_free(g);
}

/* Builder-level refusals: NULL options, dilation on avg_pool2d. */
FG_TEST(pool_builders_refuse, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, X4);
  FG_CHECK(fg_max_pool2d(g, x, NULL).node < 0);
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "max_pool2d");
  fg_graph_free(g);
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 4, X4);
  fg_pool2d_opts o = {{2, 2}, {0, 0}, {0, 0, 0, 0}, {2, 1}, 0, 1};
  FG_CHECK(fg_avg_pool2d(g, x, &o).node < 0);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "dilations [2,1]");
  fg_status_free(st);
  fg_graph_free(g);
  /* a failed graph makes every builder a no-op */
  FG_CHECK(fg_global_avg_pool(NULL, x).node < 0);
}

/* ---- shapes, .fgb, registry ------------------------------------------------ */

/* An unknown batch stays unknown; spatial sizes follow torch's formula. */
FG_TEST(pool_infer_unknown_batch, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, (int64_t[]){-1, 3, 112, 112});
  fg_pool2d_opts o = {{3, 3}, {2, 2}, {1, 1, 1, 1}, {0, 0}, 0, 0};
  fg_output y = fg_max_pool2d(g, x, &o);
  const fg_tinfo *t = fg_graph_tinfo(g, y);
  FG_REQUIRE(t && t->rank == 4);
  FG_CHECK_INT(t->dims[0], -1);
  FG_CHECK_INT(t->dims[2], 56);
  FG_CHECK_INT(t->dims[3], 56);
  fg_graph_free(g);
}

/* Saved and loaded, the graph computes the same y and dx. */
FG_TEST(pool_fgb_round_trip, "") {
  char dir[256];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_pool"));
  char path[300];
  snprintf(path, sizeof path, "%s/pool.fgb", dir);
  const int cases[5] = {1, 5, 12, 16, 18};
  for (int k = 0; k < 5; k++) {
    const pool_case *c = &pool_cases[cases[k]];
    fg_graph *g = case_graph(c, FG_F64);
    fg_status *st = fg_status_new();
    FG_REQUIRE(fg_graph_save(g, path, st) == 0);
    fg_graph *h = fg_graph_load(path, st);
    if (!h) FG_FAIL_AT("load: %s", fg_status_message(st));
    FG_REQUIRE(h);
    fg_tensor *y1, *d1, *y2, *d2;
    FG_REQUIRE(run_case(g, c, FG_F64, 1, NULL, &y1, &d1) == 0);
    FG_REQUIRE(run_case(h, c, FG_F64, 1, NULL, &y2, &d2) == 0);
    FG_CHECK(memcmp(fg_tensor_data(y1), fg_tensor_data(y2), fg_tensor_num_bytes(y1)) == 0);
    FG_CHECK(memcmp(fg_tensor_data(d1), fg_tensor_data(d2), fg_tensor_num_bytes(d1)) == 0);
    FG_CHECK(max_err(y2, c->y, fg_tensor_num_elements(y2)) < 1e-12);
    fg_tensor_free(y1), fg_tensor_free(d1), fg_tensor_free(y2), fg_tensor_free(d2);
    fg_graph_free(h);
    fg_graph_free(g);
    fg_status_free(st);
  }
  fgt_rmtree(dir);
}

/* The pool family's gradients: each differentiable, once, and what the
 * registry hands out; no other family registers them. */
FG_TEST(pool_grad_registry, "") {
  int n = 0;
  for (const fg_grad_reg *r = fg_grads_pool; r->op >= 0; r++, n++) {
    FG_CHECK(fg_op_table[r->op].flags & FG_OPF_DIFFERENTIABLE);
    FG_CHECK(fg_grad_lookup(r->op) == r->fn);
    for (const fg_grad_reg *m = fg_grads_math; m->op >= 0; m++)
      FG_CHECK(m->op != r->op);
    for (const fg_grad_reg *m = fg_grads_shape; m->op >= 0; m++)
      FG_CHECK(m->op != r->op);
  }
  FG_CHECK_INT(n, 9);
  const char *ops[9] = {
      "max_pool2d",          "avg_pool2d",      "global_avg_pool", "global_max_pool",
      "adaptive_avg_pool2d", "max_pool2d_grad", "avg_pool2d_grad", "adaptive_avg_pool2d_grad",
      "global_max_pool_grad"};
  for (int i = 0; i < 9; i++) {
    const int op = fg_op_lookup(ops[i]);
    FG_CHECK(op >= 0);
    FG_CHECK(fg_cpu_kernel(ops[i], FG_F32) != NULL && fg_cpu_kernel(ops[i], FG_F64) != NULL);
  }
}

/* ---- the GPU against the CPU ----------------------------------------------- */

/* Every fixture case, forward and gradient, in a cuda:0 session against a
 * CPU session on the same random f32 input. */
FG_TEST(cuda_pool_vs_cpu, "gpu") {
  if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA device or no CUDA backend");
  for (int k = 0; k < N_CASES; k++) {
    pool_case c = pool_cases[k];
    fg_graph *g = case_graph(&c, FG_F32);
    fg_tensor *y1, *d1, *y2, *d2;
    FG_REQUIRE(run_case(g, &c, FG_F32, 1, NULL, &y1, &d1) == 0);
    FG_REQUIRE(run_case(g, &c, FG_F32, 1, "cuda:0", &y2, &d2) == 0);
    const int64_t ny = fg_tensor_num_elements(y1), nd = fg_tensor_num_elements(d1);
    for (int64_t i = 0; i < ny; i++)
      if (!(fabs(tensor_elem(y1, i) - tensor_elem(y2, i)) <= 1e-6 * (fabs(tensor_elem(y1, i)) + 1)))
        FG_FAIL_AT("case %d y[%lld]: cpu %g gpu %g", k, (long long)i, tensor_elem(y1, i),
                   tensor_elem(y2, i));
    for (int64_t i = 0; i < nd; i++)
      if (!(fabs(tensor_elem(d1, i) - tensor_elem(d2, i)) <= 1e-6 * (fabs(tensor_elem(d1, i)) + 1)))
        FG_FAIL_AT("case %d dx[%lld]: cpu %g gpu %g", k, (long long)i, tensor_elem(d1, i),
                   tensor_elem(d2, i));
    fg_tensor_free(y1), fg_tensor_free(d1), fg_tensor_free(y2), fg_tensor_free(d2);
    fg_graph_free(g);
  }
}

/* A larger random input (many thread blocks; ResNet's 3x3/s2 stem pool). */
FG_TEST(cuda_pool_large_vs_cpu, "gpu") {
  if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA device or no CUDA backend");
  static double xv[2 * 13 * 57 * 57], dyv[2 * 13 * 29 * 29];
  uint64_t r = 9;
  for (size_t i = 0; i < sizeof xv / sizeof xv[0]; i++)
    xv[i] = fgt_uniform(&r) - 0.5;
  for (size_t i = 0; i < sizeof dyv / sizeof dyv[0]; i++)
    dyv[i] = fgt_uniform(&r) - 0.5;
  const char *ops[2] = {"max_pool2d", "avg_pool2d"};
  for (int k = 0; k < 2; k++) {
    pool_case c = {ops[k], {2, 13, 57, 57}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0,
                   0,      {29, 29},        xv,     NULL,   dyv,          NULL};
    fg_graph *g = case_graph(&c, FG_F32);
    fg_tensor *y1, *d1, *y2, *d2;
    FG_REQUIRE(run_case(g, &c, FG_F32, 2, NULL, &y1, &d1) == 0);
    FG_REQUIRE(run_case(g, &c, FG_F32, 1, "cuda:0", &y2, &d2) == 0);
    int bad = 0;
    for (int64_t i = 0; i < fg_tensor_num_elements(d1); i++)
      bad +=
          !(fabs(tensor_elem(d1, i) - tensor_elem(d2, i)) <= 1e-6 * (fabs(tensor_elem(d1, i)) + 1));
    for (int64_t i = 0; i < fg_tensor_num_elements(y1); i++)
      bad +=
          !(fabs(tensor_elem(y1, i) - tensor_elem(y2, i)) <= 1e-6 * (fabs(tensor_elem(y1, i)) + 1));
    if (bad) FG_FAIL_AT("%s: %d mismatches", ops[k], bad);
    fg_tensor_free(y1), fg_tensor_free(d1), fg_tensor_free(y2), fg_tensor_free(d2);
    fg_graph_free(g);
  }
}
