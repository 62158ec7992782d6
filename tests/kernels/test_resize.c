/* The resize ops: forward and gradient against PyTorch's interpolate or
 * NumPy written from the ONNX Resize documentation (tests/data/
 * resize_fixtures.h, from tests/gen/gen_resize.py) in f64 and f32, through
 * the public builders and fg_gradients; the second derivative; thread-count
 * independence; refusals naming the node and the value; and (gpu label) the
 * CUDA kernels against the CPU's. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../data/resize_fixtures.h"
#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "kernels/resize_geom.h"
#include "test_kernels_util.h"

static int64_t numel(const int64_t *d, int rank) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= d[i];
  return n;
}

static void out_dims(const resize_case *c, int64_t *yd) {
  memcpy(yd, c->dims, sizeof c->dims);
  yd[c->rank - 2] = c->sizes[0];
  yd[c->rank - 1] = c->sizes[1];
}

static fg_resize_opts opts_of(const resize_case *c) {
  fg_resize_opts o;
  memset(&o, 0, sizeof o);
  memcpy(o.sizes, c->sizes, sizeof o.sizes);
  memcpy(o.scales, c->scales, sizeof o.scales);
  o.coord = (fg_resize_coord)c->coord;
  o.nearest = (fg_resize_nearest_mode)c->nearest;
  return o;
}

/* x placeholder, y = resize(x), dx = gradient of y with seed dy (a
 * constant); names "x", "y", "dx". */
static fg_graph *case_graph(const resize_case *c, fg_dtype dt) {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", dt, c->rank, c->dims);
  const fg_resize_opts o = opts_of(c);
  fg_output y = c->linear ? fg_resize_linear(g, x, &o) : fg_resize_nearest(g, x, &o);
  fg_set_name(g, y, "y");
  int64_t yd[4];
  out_dims(c, yd);
  fg_tensor *dyt = tensor_of_doubles(dt, c->rank, yd, c->dy);
  fg_output dy = fg_constant(g, "dy", dyt);
  fg_tensor_free(dyt);
  fg_output dx;
  if (fg_gradients(g, &y, 1, &x, 1, &dy, &dx, NULL) == 0) fg_set_name(g, dx, "dx");
  return g;
}

/* Runs y and dx for the case's x; 0 or -1. */
static int run_case(fg_graph *g, const resize_case *c, fg_dtype dt, int threads, const char *device,
                    fg_tensor **y, fg_tensor **dx) {
  fg_status *st = fg_status_new();
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = threads;
  if (device) so.device = device;
  fg_session *s = fg_session_new(g, &so, st);
  fg_tensor *xt = tensor_of_doubles(dt, c->rank, c->dims, c->x);
  fg_feed feed = {"x", xt};
  const char *fetch[2] = {"y", "dx"};
  fg_tensor *out[2] = {NULL, NULL};
  int rc = s ? fg_session_run(s, &feed, 1, fetch, 2, out, NULL, 0, st) : -1;
  if (rc) fprintf(stderr, "run_case: %s\n", fg_status_message(st));
  *y = out[0];
  *dx = out[1];
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

/* Largest |got - want| / (|want| + 1) over n elements (NaN counts). */
static double max_err(const fg_tensor *got, const double *want, int64_t n) {
  double e = 0;
  for (int64_t i = 0; i < n; i++) {
    const double d = fabs(tensor_elem(got, i) - want[i]) / (fabs(want[i]) + 1);
    if (!(d <= e)) e = d;
  }
  return e;
}

static void check_against_reference(fg_dtype dt, double tol) {
  for (int k = 0; k < N_RESIZE_CASES; k++) {
    const resize_case *c = &resize_cases[k];
    fg_graph *g = case_graph(c, dt);
    FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
    fg_tensor *y = NULL, *dx = NULL;
    FG_REQUIRE(run_case(g, c, dt, 1, NULL, &y, &dx) == 0);
    int64_t yd[4];
    out_dims(c, yd);
    const int64_t ny = numel(yd, c->rank), nx = numel(c->dims, c->rank);
    FG_CHECK_INT(fg_tensor_num_elements(y), ny);
    FG_CHECK_INT(fg_tensor_num_elements(dx), nx);
    const double ey = max_err(y, c->y, ny), ed = max_err(dx, c->dx, nx);
    if (!(ey <= tol) || !(ed <= tol))
      FG_FAIL_AT("case %d (%s, coord %d, nearest %d) %s: forward error %g, gradient error %g", k,
                 c->linear ? "linear" : "nearest", c->coord, c->nearest, fg_dtype_name(dt), ey, ed);
    fg_tensor_free(y);
    fg_tensor_free(dx);
    fg_graph_free(g);
  }
}

FG_TEST(resize_vs_reference_f64, "") { check_against_reference(FG_F64, 1e-12); }
/* f32: the weights are rounded to f32, and a gradient sums up to a few
 * dozen terms. */
FG_TEST(resize_vs_reference_f32, "") { check_against_reference(FG_F32, 2e-6); }

/* The fixtures hold what the comments above claim: both ops, every
 * coordinate and nearest mode, given scales, ranks 2 to 4, shrinking and
 * growing, PyTorch and NumPy references, more columns than one tile. */
FG_TEST(resize_fixture_coverage, "") {
  int coords[2][4] = {{0}}, nearest[4] = {0}, ranks[5] = {0}, scales = 0, shrink = 0, torch = 0;
  int wide = 0;
  for (int k = 0; k < N_RESIZE_CASES; k++) {
    const resize_case *c = &resize_cases[k];
    coords[c->linear][c->coord]++;
    if (!c->linear) nearest[c->nearest]++;
    ranks[c->rank]++;
    scales += c->scales[0] > 0;
    shrink += c->sizes[0] < c->dims[c->rank - 2];
    torch += c->from_torch;
    wide += c->sizes[1] > 256;
  }
  for (int i = 0; i < 4; i++) {
    FG_CHECK(coords[0][i] > 0 && coords[1][i] > 0);
    FG_CHECK(nearest[i] > 0);
  }
  FG_CHECK(ranks[2] > 0 && ranks[3] > 0 && ranks[4] > 0);
  FG_CHECK(scales >= 2 && shrink >= 2 && torch >= 8 && torch < N_RESIZE_CASES && wide > 0);
}

/* A hand-checked value: 2x2 -> 3x3 bilinear, align_corners (the centre is
 * the mean of the four corners; edges the mean of their two). */
FG_TEST(resize_linear_align_corners_by_hand, "") {
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {2, 2};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, d);
  fg_resize_opts o = {{3, 3}, {0, 0}, FG_RESIZE_ALIGN_CORNERS, 0};
  fg_set_name(g, fg_resize_linear(g, x, &o), "y");
  const double xv[4] = {1, 2, 3, 5};
  fg_tensor *xt = tensor_of_doubles(FG_F64, 2, d, xv), *y = NULL;
  fg_session *s = fg_session_new(g, NULL, NULL);
  fg_feed f = {"x", xt};
  const char *fetch = "y";
  FG_REQUIRE(s && fg_session_run(s, &f, 1, &fetch, 1, &y, NULL, 0, NULL) == 0);
  const double want[9] = {1, 1.5, 2, 2, 2.75, 3.5, 3, 4, 5};
  for (int i = 0; i < 9; i++)
    FG_CHECK(tensor_elem(y, i) == want[i]);
  fg_tensor_free(y), fg_tensor_free(xt), fg_session_free(s), fg_graph_free(g);
}

/* The same bits with 1, 2 and 4 threads (the wide case has two column
 * tiles; the first has 6 planes). */
FG_TEST(resize_threads_bitwise, "") {
  const int cases[3] = {0, 8, 15};
  for (int i = 0; i < 3; i++) {
    const resize_case *c = &resize_cases[cases[i]];
    fg_graph *g = case_graph(c, FG_F32);
    fg_tensor *y1, *d1, *y2, *d2;
    FG_REQUIRE(run_case(g, c, FG_F32, 1, NULL, &y1, &d1) == 0);
    for (int t = 2; t <= 4; t += 2) {
      FG_REQUIRE(run_case(g, c, FG_F32, t, NULL, &y2, &d2) == 0);
      FG_CHECK(memcmp(fg_tensor_data(y1), fg_tensor_data(y2), fg_tensor_num_bytes(y1)) == 0);
      FG_CHECK(memcmp(fg_tensor_data(d1), fg_tensor_data(d2), fg_tensor_num_bytes(d1)) == 0);
      fg_tensor_free(y2), fg_tensor_free(d2);
    }
    fg_tensor_free(y1), fg_tensor_free(d1), fg_graph_free(g);
  }
}

/* f32 bilinear output bit for bit against the formula written out per
 * element with the shared taps: a (v x[h0][w0] + w x[h0][w1]) +
 * b (v x[h1][w0] + w x[h1][w1]). The kernel blends each input row once
 * and reuses it across output rows; that must not change a bit (the
 * growing, shrinking, align_corners and two-tile cases). */
FG_TEST(resize_linear_bits_by_formula, "") {
  const int cases[4] = {8, 9, 10, 15};
  for (int i = 0; i < 4; i++) {
    const resize_case *c = &resize_cases[cases[i]];
    fg_graph *g = case_graph(c, FG_F32);
    fg_tensor *y, *dx;
    FG_REQUIRE(run_case(g, c, FG_F32, 2, NULL, &y, &dx) == 0);
    const int r = c->rank;
    const int64_t H = c->dims[r - 2], W = c->dims[r - 1], OH = c->sizes[0], OW = c->sizes[1];
    const int64_t planes = numel(c->dims, r) / (H * W);
    const double sh = c->scales[0] > 0 ? c->scales[0] : (double)OH / H;
    const double sw = c->scales[1] > 0 ? c->scales[1] : (double)OW / W;
    const float *yv = fg_tensor_data(y);
    int64_t bad = 0;
    for (int64_t p = 0; p < planes; p++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          int64_t h0, h1, w0, w1;
          double dh, dw;
          fgk_resize_linear_taps(c->coord, oh, H, OH, sh, &h0, &h1, &dh);
          fgk_resize_linear_taps(c->coord, ow, W, OW, sw, &w0, &w1, &dw);
          const float b = (float)dh, a = 1.0f - b, w = (float)dw, v = 1.0f - w;
          const double *xp = c->x + p * H * W;
          const float x00 = (float)xp[h0 * W + w0], x01 = (float)xp[h0 * W + w1];
          const float x10 = (float)xp[h1 * W + w0], x11 = (float)xp[h1 * W + w1];
          const float want = a * (v * x00 + w * x01) + b * (v * x10 + w * x11);
          bad += memcmp(&want, &yv[(p * OH + oh) * OW + ow], sizeof want) != 0;
        }
    if (bad) FG_FAIL_AT("case %d: %lld outputs differ from the formula", cases[i], (long long)bad);
    fg_tensor_free(y), fg_tensor_free(dx), fg_graph_free(g);
  }
}

/* The gradient ops are linear in dy with the forward op as adjoint: the
 * derivative of <resize_grad(dy, x), s> in dy is resize(s). With s the
 * fixture's x, that is the fixture's y. */
FG_TEST(resize_second_derivative, "") {
  const int cases[2] = {3, 8}; /* nearest half_pixel, linear half_pixel */
  for (int i = 0; i < 2; i++) {
    const resize_case *c = &resize_cases[cases[i]];
    fg_graph *g = fg_graph_new();
    int64_t yd[4];
    out_dims(c, yd);
    fg_output x = fg_placeholder(g, "x", FG_F64, c->rank, c->dims);
    fg_output dy = fg_placeholder(g, "dy", FG_F64, c->rank, yd);
    const fg_resize_opts o = opts_of(c);
    fg_output y = c->linear ? fg_resize_linear(g, x, &o) : fg_resize_nearest(g, x, &o);
    fg_output dx, ddy;
    FG_REQUIRE(fg_gradients(g, &y, 1, &x, 1, &dy, &dx, NULL) == 0);
    fg_tensor *st = tensor_of_doubles(FG_F64, c->rank, c->dims, c->x);
    fg_output seed = fg_constant(g, "seed", st);
    FG_REQUIRE(fg_gradients(g, &dx, 1, &dy, 1, &seed, &ddy, NULL) == 0);
    fg_set_name(g, ddy, "ddy");
    fg_tensor *dyt = tensor_of_doubles(FG_F64, c->rank, yd, c->dy), *out = NULL;
    fg_session *s = fg_session_new(g, NULL, NULL);
    fg_feed f[2] = {{"x", st}, {"dy", dyt}};
    const char *fetch = "ddy";
    FG_REQUIRE(s && fg_session_run(s, f, 2, &fetch, 1, &out, NULL, 0, NULL) == 0);
    FG_CHECK(max_err(out, c->y, numel(yd, c->rank)) <= 1e-12);
    fg_tensor_free(out), fg_tensor_free(dyt), fg_tensor_free(st);
    fg_session_free(s), fg_graph_free(g);
  }
}

/* ---- refusals ------------------------------------------------------------ */

/* op(x) on a node named "rs" with sizes (and scales and a coordinate mode
 * when given) through fg_op; the failure names the node and each needle. */
static void expect_refused(const char *op, const int64_t *xd, int rank, fg_dtype dt,
                           const int64_t *sizes, int n_sizes, const double *scales,
                           const char *coord, const char *needle1, const char *needle2) {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", dt, rank, xd);
  fg_attrs *a = fg_attrs_new();
  if (sizes) fg_attrs_set_ints(a, "sizes", sizes, n_sizes);
  if (scales) fg_attrs_set_floats(a, "scales", scales, 2);
  if (coord) fg_attrs_set_string(a, "coordinate_transformation_mode", coord);
  fg_output y = fg_op(g, op, "rs", &x, 1, a);
  fg_attrs_free(a);
  fg_status *st = fg_status_new();
  FG_CHECK(y.node < 0);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'rs'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), needle1);
  if (needle2) FG_CHECK_STR_CONTAINS(fg_status_message(st), needle2);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(resize_refuses_bad_attributes, "badinput") {
  const int64_t xd[4] = {1, 2, 4, 4}, s2[2] = {8, 8}, s0[2] = {0, 8}, s3[3] = {8, 8, 8};
  const double neg[2] = {-1, 2}, inf[2] = {2, INFINITY};
  expect_refused("resize_linear", xd, 4, FG_F32, s0, 2, NULL, NULL, "'sizes'", "value 0 is 0");
  expect_refused("resize_nearest", xd, 4, FG_F32, s3, 3, NULL, NULL, "'sizes'", "needs 2");
  expect_refused("resize_linear", xd, 4, FG_F32, NULL, 0, NULL, NULL, "sizes", NULL);
  expect_refused("resize_linear", xd, 4, FG_F32, s2, 2, neg, NULL, "'scales' value 0 is -1", NULL);
  expect_refused("resize_nearest", xd, 4, FG_F64, s2, 2, inf, NULL, "'scales' value 1 is inf",
                 NULL);
  expect_refused("resize_linear", xd, 4, FG_F32, s2, 2, NULL, "tf_crop_and_resize",
                 "'coordinate_transformation_mode' = 'tf_crop_and_resize'", "align_corners");
}

FG_TEST(resize_refuses_bad_inputs, "badinput") {
  const int64_t s2[2] = {8, 8}, d1[1] = {4}, d4[4] = {1, 2, 4, 4}, e3[3] = {2, 0, 4};
  expect_refused("resize_linear", d1, 1, FG_F32, s2, 2, NULL, NULL, "rank 1", "rank >= 2");
  expect_refused("resize_nearest", d4, 4, FG_I32, s2, 2, NULL, NULL, "dtype i32", NULL);
  expect_refused("resize_linear", e3, 3, FG_F32, s2, 2, NULL, NULL, "[2,0,4]", "empty plane");
}

/* The gradient op refuses a dy that is not the resized shape of its x. */
FG_TEST(resize_grad_refuses_dy_shape, "badinput") {
  fg_graph *g = fg_graph_new();
  const int64_t xd[4] = {1, 2, 4, 4}, dyd[4] = {1, 2, 8, 7}, s2[2] = {8, 8};
  fg_output in[2] = {fg_placeholder(g, "dy", FG_F32, 4, dyd),
                     fg_placeholder(g, "x", FG_F32, 4, xd)};
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_ints(a, "sizes", s2, 2);
  fg_output y = fg_op(g, "resize_linear_grad", "rg", in, 2, a);
  fg_attrs_free(a);
  fg_status *st = fg_status_new();
  FG_CHECK(y.node < 0);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'rg'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "[1,2,8,7] is not the resized shape [1,2,8,8]");
  fg_status_free(st);
  fg_graph_free(g);
}

/* The builders refuse NULL options and modes outside their enums. */
FG_TEST(resize_builders_refuse_bad_options, "badinput") {
  const int64_t xd[4] = {1, 2, 4, 4};
  for (int i = 0; i < 3; i++) {
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
    fg_resize_opts o = {{8, 8}, {0, 0}, FG_RESIZE_HALF_PIXEL, FG_NEAREST_FLOOR};
    if (i == 1) o.coord = (fg_resize_coord)7;
    if (i == 2) o.nearest = (fg_resize_nearest_mode)-1;
    fg_output y = i == 0 ? fg_resize_linear(g, x, NULL) : fg_resize_nearest(g, x, &o);
    fg_status *st = fg_status_new();
    FG_CHECK(y.node < 0);
    FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), i == 0   ? "resize_linear: options are NULL"
                                                 : i == 1 ? "coordinate mode 7"
                                                          : "nearest mode -1");
    fg_status_free(st);
    fg_graph_free(g);
  }
}

/* ---- the GPU against the CPU ---------------------------------------------- */

/* Every fixture case, forward and gradient, in a cuda:0 session against a
 * CPU session (the GPU's gradients sum in double, the CPU's in f32). */
FG_TEST(cuda_resize_vs_cpu, "gpu") {
  if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA device or no CUDA backend");
  for (int k = 0; k < N_RESIZE_CASES; k++) {
    const resize_case *c = &resize_cases[k];
    fg_graph *g = case_graph(c, FG_F32);
    fg_tensor *y1, *d1, *y2, *d2;
    FG_REQUIRE(run_case(g, c, FG_F32, 1, NULL, &y1, &d1) == 0);
    FG_REQUIRE(run_case(g, c, FG_F32, 1, "cuda:0", &y2, &d2) == 0);
    FG_CHECK(memcmp(fg_tensor_data(y1), fg_tensor_data(y2), fg_tensor_num_bytes(y1)) == 0);
    const int64_t nd = fg_tensor_num_elements(d1);
    for (int64_t i = 0; i < nd; i++)
      if (!(fabs(tensor_elem(d1, i) - tensor_elem(d2, i)) <= 1e-6 * (fabs(tensor_elem(d1, i)) + 1)))
        FG_FAIL_AT("case %d dx[%lld]: cpu %g gpu %g", k, (long long)i, tensor_elem(d1, i),
                   tensor_elem(d2, i));
    fg_tensor_free(y1), fg_tensor_free(d1), fg_tensor_free(y2), fg_tensor_free(d2);
    fg_graph_free(g);
  }
}
