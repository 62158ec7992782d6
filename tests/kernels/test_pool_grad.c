/* The pooling gradients' CPU kernels (max_pool2d_grad, avg_pool2d_grad,
 * adaptive_avg_pool2d_grad as global_avg_pool's gradient), called directly,
 * against reference loops written here: torch's argmax rule (taps in
 * window order; a tap takes the index when it is larger than the value held
 * or NaN, so the first of equal maxima keeps it, a NaN keeps it against
 * later numbers and a later NaN takes it), dx starting at 0 and each
 * window's contribution added in output order in the element type. Results
 * are compared bit for bit (sign of zero included) on windows that take
 * each loop of kernels/cpu/pool_impl.h: the 2x2/stride-2 planes, the
 * vectorised 2x2 and 3x3 argmax passes, the general inside loop and the
 * edge windows; every run also repeats with pools of 1, 2 and 4 threads,
 * which must write the same bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor/threadpool.h"
#include "fgtest.h"
#include "kernels/kernel.h"
#include "test_kernels_util.h"

/* One pooling window: kernel, strides, pads (top, left, bottom, right),
 * dilations, count_include_pad, and whether the output size rounds up. */
typedef struct geo {
  int64_t kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
  int cip, ceil;
} geo;

static fg_op_params params_of(const geo *g) {
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.pool2d.kernel[0] = g->kh, p.pool2d.kernel[1] = g->kw;
  p.pool2d.strides[0] = g->sh, p.pool2d.strides[1] = g->sw;
  p.pool2d.pads[0] = g->pt, p.pool2d.pads[1] = g->pl;
  p.pool2d.pads[2] = g->pb, p.pool2d.pads[3] = g->pr;
  p.pool2d.dilations[0] = g->dh, p.pool2d.dilations[1] = g->dw;
  p.pool2d.count_include_pad = g->cip;
  p.pool2d.ceil_mode = g->ceil;
  return p;
}

/* torch's output size along one dim (0 when no window fits). */
static int64_t out_size(int64_t n, int64_t k, int64_t s, int64_t pb, int64_t pe, int64_t d,
                        int ceil) {
  const int64_t span = n + pb + pe - d * (k - 1) - 1;
  if (span < 0) return 0;
  int64_t o = (ceil ? (span + s - 1) / s : span / s) + 1;
  /* ceil mode: the last window must start inside the input or left pad */
  if (ceil && (o - 1) * s >= n + pb) o--;
  return o;
}

/* v rounded to the element type. */
static double rt(fg_dtype dt, double v) { return dt == FG_F32 ? (double)(float)v : v; }

/* Reference max_pool2d_grad of one [N, C, H, W] x (values already of the
 * element type) into dx. */
static void ref_max_grad(fg_dtype dt, const int64_t *xd, int64_t OH, int64_t OW, const geo *g,
                         const double *x, const double *dy, double *dx) {
  const int64_t H = xd[2], W = xd[3], planes = xd[0] * xd[1];
  for (int64_t e = 0; e < planes * H * W; e++)
    dx[e] = 0;
  for (int64_t p = 0; p < planes; p++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t best = -1;
        double m = 0;
        for (int64_t i = 0; i < g->kh; i++)
          for (int64_t j = 0; j < g->kw; j++) {
            const int64_t ih = oh * g->sh - g->pt + i * g->dh, iw = ow * g->sw - g->pl + j * g->dw;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            const int64_t idx = p * H * W + ih * W + iw;
            if (best < 0 || x[idx] > m || isnan(x[idx])) best = idx, m = x[idx];
          }
        if (best >= 0) dx[best] = rt(dt, dx[best] + dy[(p * OH + oh) * OW + ow]);
      }
}

/* Reference avg_pool2d_grad: each window's dy / divisor, rounded to the
 * element type, added to the window's elements inside the input. The
 * divisor counts the window clipped to the padded input (cip) or to the
 * input. */
static void ref_avg_grad(fg_dtype dt, const int64_t *xd, int64_t OH, int64_t OW, const geo *g,
                         const double *dy, double *dx) {
  const int64_t H = xd[2], W = xd[3], planes = xd[0] * xd[1];
  for (int64_t e = 0; e < planes * H * W; e++)
    dx[e] = 0;
  for (int64_t p = 0; p < planes; p++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        const int64_t h0 = oh * g->sh - g->pt, w0 = ow * g->sw - g->pl;
        int64_t h1 = h0 + g->kh, w1 = w0 + g->kw;
        if (h1 > H + g->pb) h1 = H + g->pb;
        if (w1 > W + g->pr) w1 = W + g->pr;
        const int64_t a0 = h0 < 0 ? 0 : h0, a1 = h1 > H ? H : h1;
        const int64_t b0 = w0 < 0 ? 0 : w0, b1 = w1 > W ? W : w1;
        const int64_t div = g->cip ? (h1 - h0) * (w1 - w0) : (a1 - a0) * (b1 - b0);
        if (div <= 0) continue;
        const double v = rt(dt, dy[(p * OH + oh) * OW + ow] / (double)div);
        for (int64_t ih = a0; ih < a1; ih++)
          for (int64_t iw = b0; iw < b1; iw++)
            dx[p * H * W + ih * W + iw] = rt(dt, dx[p * H * W + ih * W + iw] + v);
      }
}

/* Runs `op` (inputs dy [N, C, OH, OW] and x, output dx of x's shape) with
 * par NULL, then with pools of 1, 2 and 4 threads, each run writing the
 * same bytes as the first; dx (numel of x doubles) gets the first run's
 * values. x may be NULL for the ops that only read its shape (a zero x is
 * passed). 0, or -1 after reporting. */
static int run_grad(const char *op, fg_dtype dt, const int64_t *xd, int64_t OH, int64_t OW,
                    const fg_op_params *p, const double *x, const double *dy, double *dx) {
  const int64_t yd[4] = {xd[0], xd[1], OH, OW};
  const int64_t nx = dims_count(4, xd), ny = dims_count(4, yd);
  const size_t es = float_size(dt);
  fg_kbuf in[2] = {{.dtype = dt, .rank = 4}, {.dtype = dt, .rank = 4}};
  fg_kbuf out = {.dtype = dt, .rank = 4};
  memcpy(in[0].dims, yd, sizeof yd);
  memcpy(in[1].dims, xd, sizeof yd);
  memcpy(out.dims, xd, sizeof yd);
  in[0].data = malloc((size_t)(ny > 0 ? ny : 1) * es);
  in[1].data = calloc((size_t)(nx > 0 ? nx : 1), es);
  out.data = malloc((size_t)(nx > 0 ? nx : 1) * es);
  void *first = malloc((size_t)(nx > 0 ? nx : 1) * es);
  int rc = -1;
  if (!in[0].data || !in[1].data || !out.data || !first) goto done;
  for (int64_t i = 0; i < ny; i++)
    elem_store(in[0].data, dt, i, dy[i]);
  for (int64_t i = 0; x && i < nx; i++)
    elem_store(in[1].data, dt, i, x[i]);
  fg_kernel_fn fn = fg_cpu_kernel(op, dt);
  if (!fn) {
    FG_FAIL_AT("no CPU kernel %s for %s", op, fg_dtype_name(dt));
    goto done;
  }
  char err[256] = "";
  const int threads[4] = {0, 1, 2, 4};
  for (int t = 0; t < 4; t++) {
    fg_pool *pool = threads[t] ? fg_pool_new(threads[t]) : NULL;
    const fg_kparallel par = {pool, fg_pool_parallel_for_fn};
    fg_kctx ctx = {.in = in,
                   .n_in = 2,
                   .out = &out,
                   .n_out = 1,
                   .p = p,
                   .err = err,
                   .err_size = sizeof err,
                   .par = threads[t] ? &par : NULL};
    memset(out.data, 0xA5, (size_t)nx * es); /* every element must be written */
    const int k = fn(&ctx);
    fg_pool_free(pool);
    if (k != 0) {
      FG_FAIL_AT("%s %s: %s", op, fg_dtype_name(dt), err);
      goto done;
    }
    if (t == 0) {
      memcpy(first, out.data, (size_t)nx * es);
    } else if (memcmp(first, out.data, (size_t)nx * es) != 0) {
      FG_FAIL_AT("%s %s [%lld,%lld,%lld,%lld]: %d threads wrote other bytes than par NULL", op,
                 fg_dtype_name(dt), (long long)xd[0], (long long)xd[1], (long long)xd[2],
                 (long long)xd[3], threads[t]);
      goto done;
    }
  }
  for (int64_t i = 0; i < nx; i++)
    dx[i] = elem_as_double(first, dt, i);
  rc = 0;
done:
  free(in[0].data), free(in[1].data), free(out.data), free(first);
  return rc;
}

/* got and want are the same value with the same sign (NaN never expected:
 * dy is finite); the first difference is reported. */
static int same_bits(const char *what, fg_dtype dt, const double *got, const double *want,
                     int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (!(got[i] == want[i]) || signbit(got[i]) != signbit(want[i])) {
      FG_FAIL_AT("%s %s element %lld: %.9g, want %.9g", what, fg_dtype_name(dt), (long long)i,
                 got[i], want[i]);
      return 0;
    }
  return 1;
}

/* x with many ties: NaN 4%, -inf 8%, values of {-1, -0.0, 0, 1, 2} 48%,
 * the rest uniform in [-1, 1); rounded to the element type. */
static void tie_values(fg_dtype dt, double *x, int64_t n, uint64_t *r) {
  static const double few[5] = {-1, -0.0, 0, 1, 2};
  for (int64_t i = 0; i < n; i++) {
    const double u = (rng_unit(r) + 1) / 2;
    if (u < 0.04)
      x[i] = NAN;
    else if (u < 0.12)
      x[i] = -INFINITY;
    else if (u < 0.60)
      x[i] = few[rng_next(r) % 5];
    else
      x[i] = rt(dt, rng_unit(r));
  }
}

/* dy uniform in [-1, 1) with -0.0 at 5% (0 + -0.0 is +0.0 in dx). */
static void dy_values(fg_dtype dt, double *dy, int64_t n, uint64_t *r) {
  for (int64_t i = 0; i < n; i++)
    dy[i] = (rng_unit(r) + 1) / 2 < 0.05 ? -0.0 : rt(dt, rng_unit(r));
}

/* ---- by hand --------------------------------------------------------------- */

/* The 2x2/stride-2 window on a [1, 2, 3, 5] x, worked by hand. Plane 0:
 * window {1, 1, 0, 1} -> the first 1, (0,0), gets dy 2; window {-inf x 4}
 * -> the first tap, (0,2), gets 0 + -0.0 = +0.0; column 4 and row 2 are in
 * no window: 0. Plane 1: window {NaN, 5, NaN, 6} -> the later NaN at
 * (1,0) (6 does not take it from a NaN); window {3, NaN, 2, 4} -> (0,3),
 * the NaN, not the later 4. */
FG_TEST(pool_grad_max_2x2s2_by_hand, "") {
  const int64_t xd[4] = {1, 2, 3, 5};
  const double x[30] = {
      1,   1, -INFINITY, -INFINITY, 7, 0,   1, -INFINITY, -INFINITY, 7, 9, 9, 9, 9, 9, /* plane 1 */
      NAN, 5, 3,         NAN,       8, NAN, 6, 2,         4,         8, 9, 9, 9, 9, 9};
  const double dy[4] = {2, -0.0, 3, 5};
  const double want[30] = {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                           0, 0, 0, 5, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const geo g = {2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 0, 0};
  const fg_op_params p = params_of(&g);
  for (int d = 0; d < 2; d++) {
    const fg_dtype dt = d ? FG_F64 : FG_F32;
    double dx[30];
    FG_REQUIRE(run_grad("max_pool2d_grad", dt, xd, 1, 2, &p, x, dy, dx) == 0);
    same_bits("by hand", dt, dx, want, 30);
    FG_CHECK(dx[2] == 0 && !signbit(dx[2])); /* 0 + -0.0 */
  }
}

/* avg_pool2d_grad 2x2/stride 2 on [1, 1, 3, 5] by hand: every element of a
 * window gets dy / 4 (-0.0 / 4 added to 0: +0.0); column 4, row 2: 0. */
FG_TEST(pool_grad_avg_2x2s2_by_hand, "") {
  const int64_t xd[4] = {1, 1, 3, 5};
  const double dy[2] = {-0.0, 3};
  const double want[15] = {0, 0, 0.75, 0.75, 0, 0, 0, 0.75, 0.75, 0, 0, 0, 0, 0, 0};
  for (int cip = 0; cip < 2; cip++) {
    const geo g = {2, 2, 2, 2, 0, 0, 0, 0, 1, 1, cip, 0};
    const fg_op_params p = params_of(&g);
    for (int d = 0; d < 2; d++) {
      const fg_dtype dt = d ? FG_F64 : FG_F32;
      double dx[15];
      FG_REQUIRE(run_grad("avg_pool2d_grad", dt, xd, 1, 2, &p, NULL, dy, dx) == 0);
      same_bits("avg by hand", dt, dx, want, 15);
      FG_CHECK(!signbit(dx[0]) && !signbit(dx[1]));
    }
  }
}

/* ---- against the reference loops ----------------------------------------- */

static const int64_t SHAPES[][4] = {
    {2, 3, 7, 9},    /* odd rows and columns left out of 2x2/s2 windows */
    {3, 5, 24, 24},  /* LeNet's first pool plane */
    {8, 16, 8, 8},   /* LeNet's second */
    {16, 40, 8, 8},  /* enough 8x8 planes (640) to be split over threads */
    {4, 16, 24, 24}, /* enough 24x24 planes (64) to be split over threads */
    {2, 3, 2, 2},    /* one window */
    {1, 2, 1, 5},    /* no 2x2 window fits: dx is all 0 */
    {1, 2, 5, 601},  /* rows longer than the argmax passes' 256 outputs */
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))

static const geo MAX_GEOS[] = {
    {2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 0, 0}, /* the 2x2/s2 plane loop */
    {2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 0, 1}, /* ceil mode: a cut last window (edges) */
    {2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0}, /* 2x2/s2 argmax pass, padded edges */
    {2, 2, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0}, /* 2x2/s1 argmax pass, overlapping */
    {3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0}, /* ResNet's stem: 3x3/s2 pass, edges */
    {3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, /* 3x3/s1 pass, overlapping by two */
    {2, 2, 3, 3, 0, 0, 0, 0, 1, 1, 0, 0}, /* stride 3: the unrolled 2x2 inside loop */
    {3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 0, 0}, /* stride 3: the unrolled 3x3 inside loop */
    {2, 3, 1, 2, 0, 1, 0, 1, 1, 1, 0, 0}, /* no fixed loop: the general inside loop */
    {3, 3, 2, 2, 1, 1, 1, 1, 2, 2, 0, 0}, /* dilated: the general inside loop */
};
#define N_MAX_GEOS ((int)(sizeof MAX_GEOS / sizeof MAX_GEOS[0]))

/* Every shape and max window in f32 and f64: the kernel's dx has the
 * reference's bits. */
FG_TEST(pool_grad_max_vs_reference, "") {
  uint64_t r = 29;
  for (int s = 0; s < N_SHAPES; s++)
    for (int gi = 0; gi < N_MAX_GEOS; gi++)
      for (int d = 0; d < 2; d++) {
        const fg_dtype dt = d ? FG_F64 : FG_F32;
        const int64_t *xd = SHAPES[s];
        const geo *g = &MAX_GEOS[gi];
        const int64_t OH = out_size(xd[2], g->kh, g->sh, g->pt, g->pb, g->dh, g->ceil);
        const int64_t OW = out_size(xd[3], g->kw, g->sw, g->pl, g->pr, g->dw, g->ceil);
        const int64_t nx = dims_count(4, xd), ny = xd[0] * xd[1] * OH * OW;
        double *x = malloc(sizeof(double) * (size_t)nx), *dx = malloc(sizeof(double) * (size_t)nx);
        double *want = malloc(sizeof(double) * (size_t)nx);
        double *dy = malloc(sizeof(double) * (size_t)(ny > 0 ? ny : 1));
        FG_REQUIRE(x && dx && want && dy);
        tie_values(dt, x, nx, &r);
        dy_values(dt, dy, ny, &r);
        ref_max_grad(dt, xd, OH, OW, g, x, dy, want);
        const fg_op_params p = params_of(g);
        char what[96];
        snprintf(what, sizeof what, "shape %d window %d", s, gi);
        if (run_grad("max_pool2d_grad", dt, xd, OH, OW, &p, x, dy, dx) == 0)
          same_bits(what, dt, dx, want, nx);
        free(x), free(dx), free(want), free(dy);
      }
}

static const geo AVG_GEOS[] = {
    {2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 0, 0}, /* the 2x2/s2 plane loop */
    {2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 0}, /* the same with count_include_pad */
    {2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 0, 1}, /* ceil mode: the general loop */
    {3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0}, /* the general loop, overlapping */
    {3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0},
};
#define N_AVG_GEOS ((int)(sizeof AVG_GEOS / sizeof AVG_GEOS[0]))

FG_TEST(pool_grad_avg_vs_reference, "") {
  uint64_t r = 31;
  for (int s = 0; s < N_SHAPES; s++)
    for (int gi = 0; gi < N_AVG_GEOS; gi++)
      for (int d = 0; d < 2; d++) {
        const fg_dtype dt = d ? FG_F64 : FG_F32;
        const int64_t *xd = SHAPES[s];
        const geo *g = &AVG_GEOS[gi];
        const int64_t OH = out_size(xd[2], g->kh, g->sh, g->pt, g->pb, g->dh, g->ceil);
        const int64_t OW = out_size(xd[3], g->kw, g->sw, g->pl, g->pr, g->dw, g->ceil);
        const int64_t nx = dims_count(4, xd), ny = xd[0] * xd[1] * OH * OW;
        double *dx = malloc(sizeof(double) * (size_t)nx);
        double *want = malloc(sizeof(double) * (size_t)nx);
        double *dy = malloc(sizeof(double) * (size_t)(ny > 0 ? ny : 1));
        FG_REQUIRE(dx && want && dy);
        dy_values(dt, dy, ny, &r);
        ref_avg_grad(dt, xd, OH, OW, g, dy, want);
        const fg_op_params p = params_of(g);
        char what[96];
        snprintf(what, sizeof what, "avg shape %d window %d", s, gi);
        if (run_grad("avg_pool2d_grad", dt, xd, OH, OW, &p, NULL, dy, dx) == 0)
          same_bits(what, dt, dx, want, nx);
        free(dx), free(want), free(dy);
      }
}

/* global_avg_pool's gradient (adaptive_avg_pool2d_grad to 1 x 1): every
 * element of a plane gets 0 + dy / (H * W) rounded to the element type,
 * on planes of 4x4, 7x7, 1x1 and 3x5, with enough planes (4096) to be split
 * over threads. */
FG_TEST(pool_grad_global_avg_vs_reference, "") {
  static const int64_t shapes[4][4] = {{8, 512, 4, 4}, {2, 3, 7, 7}, {2, 4, 1, 1}, {3, 7, 3, 5}};
  uint64_t r = 37;
  for (int s = 0; s < 4; s++)
    for (int d = 0; d < 2; d++) {
      const fg_dtype dt = d ? FG_F64 : FG_F32;
      const int64_t *xd = shapes[s], planes = xd[0] * xd[1], n = xd[2] * xd[3];
      double *dx = malloc(sizeof(double) * (size_t)(planes * n));
      double *want = malloc(sizeof(double) * (size_t)(planes * n));
      double *dy = malloc(sizeof(double) * (size_t)planes);
      FG_REQUIRE(dx && want && dy);
      dy_values(dt, dy, planes, &r);
      for (int64_t p = 0; p < planes; p++)
        for (int64_t e = 0; e < n; e++)
          want[p * n + e] = rt(dt, 0 + rt(dt, dy[p] / (double)n));
      const fg_op_params p = params_of(&(geo){1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0});
      if (run_grad("adaptive_avg_pool2d_grad", dt, xd, 1, 1, &p, NULL, dy, dx) == 0)
        same_bits("global avg", dt, dx, want, planes * n);
      free(dx), free(want), free(dy);
    }
}

/* ---- the 2x2/stride-2 loops against the general ones ---------------------- */

/* The same windows through the general loops: pads of 2 on the top and left
 * add a first row and column of windows wholly in the padding (no input
 * element: they add nothing) and move the others off the 2x2/s2 loops,
 * onto the argmax pass (max) and the per-window loop (avg); the other
 * windows are the unpadded ones. dx must have the same bits, on random
 * values with ties, for max and avg in f32 and f64. */
FG_TEST(pool_grad_2x2s2_fast_equals_general, "") {
  static const int64_t shapes[3][4] = {{3, 5, 24, 24}, {2, 3, 9, 7}, {16, 40, 8, 8}};
  uint64_t r = 41;
  for (int s = 0; s < 3; s++)
    for (int d = 0; d < 2; d++)
      for (int avg = 0; avg < 2; avg++) {
        const fg_dtype dt = d ? FG_F64 : FG_F32;
        const int64_t *xd = shapes[s], planes = xd[0] * xd[1];
        const int64_t OH = xd[2] / 2, OW = xd[3] / 2, nx = dims_count(4, xd);
        double *x = malloc(sizeof(double) * (size_t)nx);
        double *dy = malloc(sizeof(double) * (size_t)(planes * OH * OW));
        double *dyp = malloc(sizeof(double) * (size_t)(planes * (OH + 1) * (OW + 1)));
        double *fast = malloc(sizeof(double) * (size_t)nx);
        double *general = malloc(sizeof(double) * (size_t)nx);
        FG_REQUIRE(x && dy && dyp && fast && general);
        tie_values(dt, x, nx, &r);
        dy_values(dt, dy, planes * OH * OW, &r);
        dy_values(dt, dyp, planes * (OH + 1) * (OW + 1), &r); /* the padding windows' dy */
        for (int64_t p = 0; p < planes; p++)
          for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++)
              dyp[(p * (OH + 1) + oh + 1) * (OW + 1) + ow + 1] = dy[(p * OH + oh) * OW + ow];
        const geo g0 = {2, 2, 2, 2, 0, 0, 0, 0, 1, 1, avg, 0};
        const geo g2 = {2, 2, 2, 2, 2, 2, 0, 0, 1, 1, avg, 0};
        const fg_op_params p0 = params_of(&g0), p2 = params_of(&g2);
        const char *op = avg ? "avg_pool2d_grad" : "max_pool2d_grad";
        if (run_grad(op, dt, xd, OH, OW, &p0, x, dy, fast) == 0 &&
            run_grad(op, dt, xd, OH + 1, OW + 1, &p2, x, dyp, general) == 0)
          same_bits(op, dt, fast, general, nx);
        free(x), free(dy), free(dyp), free(fast), free(general);
      }
}
