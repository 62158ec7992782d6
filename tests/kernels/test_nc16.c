/* The kernels that accept NC16 (kernels/kernel.h: oneDNN's nChw16c, channels
 * innermost in blocks of 16): batch_norm and batch_norm_grad against the
 * formulas worked out here in double (PyTorch's batch norm, biased variance
 * to normalise, unbiased for the running variance), and conv2d against its
 * own C-order result. The test converts between the layouts itself, from
 * the index formula. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "kernels/kernel.h"

#define N  3
#define C  32
#define S  20 /* H 4 x W 5 */
#define NE (N * C * S)

/* Index of (n, c, s) in NC16. */
static int64_t nc16_at(int64_t n, int64_t c, int64_t s) {
  return ((n * (C / 16) + c / 16) * S + s) * 16 + c % 16;
}

static void to_nc16(const float *plain, float *blk) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t s = 0; s < S; s++)
        blk[nc16_at(n, c, s)] = plain[(n * C + c) * S + s];
}

static void from_nc16(const float *blk, float *plain) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t s = 0; s < S; s++)
        plain[(n * C + c) * S + s] = blk[nc16_at(n, c, s)];
}

/* Deterministic values in about [-lo, hi] with a per-channel offset, so the
 * channels' statistics differ. */
static void fill(float *v, int64_t n, unsigned seed, float offset) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1103515245u + 12345u;
    v[i] = (float)((seed >> 9) % 20000) / 10000.0f - 1.0f + offset * (float)((i / S) % C) / C;
  }
}

static fg_kbuf buf4(float *data, int layout) {
  fg_kbuf b = {FG_F32, 4, {N, C, 4, 5}, data, layout};
  return b;
}

static fg_kbuf buf1(float *data) {
  fg_kbuf b = {FG_F32, 1, {C}, data, FGK_LAYOUT_PLAIN};
  return b;
}

static fg_kctx ctx_of(fg_kbuf *in, int n_in, fg_kbuf *out, int n_out, fg_op_params *p, char *err,
                      size_t err_size) {
  fg_kctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.in = in, ctx.n_in = n_in, ctx.out = out, ctx.n_out = n_out, ctx.p = p;
  ctx.err = err, ctx.err_size = err_size;
  return ctx;
}

typedef struct bn_data {
  float x[NE], dy[NE], scale[C], shift[C], rm[C], rv[C];
  /* The reference, in double. */
  double mean[C], inv[C], var_unbiased[C], y[NE], dx[NE], dscale[C], dshift[C];
} bn_data;

static void bn_reference(bn_data *d, int training, double eps) {
  const double M = N * S;
  for (int c = 0; c < C; c++) {
    double s = 0, q = 0;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++)
        s += d->x[(n * C + c) * S + k];
    const double mean = s / M;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        const double e = d->x[(n * C + c) * S + k] - mean;
        q += e * e;
      }
    d->var_unbiased[c] = q / (M - 1);
    d->mean[c] = training ? mean : d->rm[c];
    d->inv[c] = 1.0 / sqrt((training ? q / M : d->rv[c]) + eps);
    double sdy = 0, sdyx = 0;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        const int64_t i = (n * C + c) * S + k;
        const double xh = (d->x[i] - d->mean[c]) * d->inv[c];
        d->y[i] = xh * d->scale[c] + d->shift[c];
        sdy += d->dy[i];
        sdyx += d->dy[i] * xh;
      }
    d->dscale[c] = sdyx, d->dshift[c] = sdy;
    for (int n = 0; n < N; n++)
      for (int k = 0; k < S; k++) {
        const int64_t i = (n * C + c) * S + k;
        const double xh = (d->x[i] - d->mean[c]) * d->inv[c];
        const double g = training ? d->dy[i] - sdy / M - xh * sdyx / M : d->dy[i];
        d->dx[i] = d->scale[c] * d->inv[c] * g;
      }
  }
}

static void bn_fill(bn_data *d) {
  fill(d->x, NE, 7, 3.0f);
  fill(d->dy, NE, 11, 0.5f);
  for (int c = 0; c < C; c++) {
    d->scale[c] = 0.5f + (float)c / C;
    d->shift[c] = (float)c / 8 - 1;
    d->rm[c] = (float)c / 16;
    d->rv[c] = 0.5f + (float)c / 32;
  }
}

static int max_err(const float *got, const double *want, int64_t n, double tol) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])))) {
      FG_FAIL_AT("[%lld]: got %.8g, want %.8g", (long long)i, got[i], want[i]);
      return 1;
    }
  return 0;
}

/* batch_norm then batch_norm_grad on NC16, in training and inference mode. */
static void bn_case(int training) {
  static bn_data d;
  bn_fill(&d);
  const double eps = 1e-5;
  bn_reference(&d, training, eps);
  static float xb[NE], dyb[NE], yb[NE], dxb[NE], y[NE], dx[NE];
  float mean[C], inv[C], var[C], dscale[C], dshift[C];
  uint8_t flag = (uint8_t)training;
  to_nc16(d.x, xb);
  to_nc16(d.dy, dyb);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.norm.epsilon = eps;
  char err[256] = "";
  fg_kbuf in[6] = {buf4(xb, FGK_LAYOUT_NC16),  buf1(d.scale), buf1(d.shift), buf1(d.rm), buf1(d.rv),
                   {FG_BOOL, 0, {0}, &flag, 0}};
  fg_kbuf out[4] = {buf4(yb, FGK_LAYOUT_NC16), buf1(mean), buf1(inv), buf1(var)};
  fg_kctx ctx = ctx_of(in, 6, out, 4, &p, err, sizeof err);
  fg_kernel_fn fwd = fg_cpu_kernel("batch_norm", FG_F32);
  FG_REQUIRE(fwd && fwd(&ctx) == 0);
  from_nc16(yb, y);
  max_err(y, d.y, NE, 2e-6);
  max_err(mean, d.mean, C, 1e-6);
  max_err(inv, d.inv, C, 1e-6);
  if (training) max_err(var, d.var_unbiased, C, 1e-6);

  /* dy, x, scale, mean, inv_std, training -> dx, dscale, dshift */
  fg_kbuf gin[6] = {buf4(dyb, FGK_LAYOUT_NC16),
                    buf4(xb, FGK_LAYOUT_NC16),
                    buf1(d.scale),
                    buf1(mean),
                    buf1(inv),
                    in[5]};
  fg_kbuf gout[3] = {buf4(dxb, FGK_LAYOUT_NC16), buf1(dscale), buf1(dshift)};
  fg_kctx gctx = ctx_of(gin, 6, gout, 3, &p, err, sizeof err);
  fg_kernel_fn bwd = fg_cpu_kernel("batch_norm_grad", FG_F32);
  FG_REQUIRE(bwd && bwd(&gctx) == 0);
  from_nc16(dxb, dx);
  max_err(dx, d.dx, NE, 2e-5);
  max_err(dscale, d.dscale, C, 2e-5);
  max_err(dshift, d.dshift, C, 2e-5);
}

FG_TEST(nc16_batch_norm_training_matches_formulas, "") { bn_case(1); }
FG_TEST(nc16_batch_norm_inference_matches_formulas, "") { bn_case(0); }

/* NC16 with C not a multiple of 16, or y in another layout than x, is
 * refused with a message, not read out of bounds. */
FG_TEST(nc16_batch_norm_refuses_bad_layouts, "badinput") {
  static float x[NE], y[NE];
  float sc[C], sh[C], rm[C], rv[C], mean[C], inv[C], var[C];
  for (int c = 0; c < C; c++)
    sc[c] = 1, sh[c] = 0, rm[c] = 0, rv[c] = 1;
  fill(x, NE, 3, 1.0f);
  uint8_t flag = 1;
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.norm.epsilon = 1e-5;
  char err[256] = "";
  fg_kbuf in[6] = {buf4(x, FGK_LAYOUT_NC16),   buf1(sc), buf1(sh), buf1(rm), buf1(rv),
                   {FG_BOOL, 0, {0}, &flag, 0}};
  fg_kbuf out[4] = {buf4(y, FGK_LAYOUT_PLAIN), buf1(mean), buf1(inv), buf1(var)};
  fg_kctx ctx = ctx_of(in, 6, out, 4, &p, err, sizeof err);
  fg_kernel_fn fwd = fg_cpu_kernel("batch_norm", FG_F32);
  FG_REQUIRE(fwd);
  FG_CHECK(fwd(&ctx) != 0);
  FG_CHECK_STR_CONTAINS(err, "NC16");
  /* 24 channels: [3, 24, 4, 5] with per-channel buffers of 24. */
  err[0] = '\0';
  out[0].layout = FGK_LAYOUT_NC16;
  in[0].dims[1] = out[0].dims[1] = 24, in[0].dims[3] = out[0].dims[3] = 5;
  for (int i = 1; i < 5; i++)
    in[i].dims[0] = 24;
  for (int o = 1; o < 4; o++)
    out[o].dims[0] = 24;
  FG_CHECK(fwd(&ctx) != 0);
  FG_CHECK_STR_CONTAINS(err, "C % 16 == 0");
}

/* conv2d with x and y in NC16 gives the bits of the C-order call (the same
 * oneDNN primitive; only the conversions are skipped). */
FG_TEST(nc16_conv2d_matches_plain, "") {
  if (!fgk_nc16_available()) FG_SKIP("built without oneDNN: no NC16 convolution");
  static float x[NE], xb[NE], w[C * C * 9], y[NE], yb[NE], y2[NE];
  fill(x, NE, 5, 1.0f);
  fill(w, C * C * 9, 9, 0.0f);
  to_nc16(x, xb);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  fg_conv_params cp = {{1, 1}, {1, 1}, {1, 1, 1, 1}, 1, {0, 0}};
  p.conv = cp;
  char err[256] = "";
  fg_kernel_fn fn = fg_cpu_kernel("conv2d", FG_F32);
  FG_REQUIRE(fn);
  fg_kbuf in[2] = {buf4(x, FGK_LAYOUT_PLAIN), {FG_F32, 4, {C, C, 3, 3}, w, 0}};
  fg_kbuf out = buf4(y, FGK_LAYOUT_PLAIN);
  fg_kctx ctx = ctx_of(in, 2, &out, 1, &p, err, sizeof err);
  FG_REQUIRE(fn(&ctx) == 0);
  in[0] = buf4(xb, FGK_LAYOUT_NC16), out = buf4(yb, FGK_LAYOUT_NC16);
  FG_REQUIRE(fn(&ctx) == 0);
  from_nc16(yb, y2);
  FG_CHECK(memcmp(y, y2, sizeof y) == 0);
  /* and the values are a convolution: y[0, 0, 1, 1] by hand (no padding
   * reached at the interior position (1, 1) of the 4 x 5 image). */
  double want = 0;
  for (int c = 0; c < C; c++)
    for (int kh = 0; kh < 3; kh++)
      for (int kw = 0; kw < 3; kw++)
        want += (double)x[(0 * C + c) * S + kh * 5 + kw] * w[((0 * C + c) * 3 + kh) * 3 + kw];
  FG_CHECK_NEAR(y[1 * 5 + 1], want, 1e-4);
}
