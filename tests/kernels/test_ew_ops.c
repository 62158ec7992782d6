/* CPU kernels of the element-wise ops added for CNN ports (softplus, selu,
 * silu, hard_sigmoid, hard_swish, mish, sign, reciprocal, floor, ceil,
 * round, clip) against PyTorch, at their kinks and edges, plus the checks
 * made when a clip node is built. Gradients are in
 * tests/autodiff/test_grad_math.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "graph/op_table.h"
#include "kernels/kernel.h"

typedef struct ew_case {
  const char *op;
  double a, b; /* softplus: beta, threshold; clip: min, max */
  int n;
  double x[9];
  double y64[9]; /* torch, float64 */
  double y32[9]; /* torch, float32 on (float)x */
} ew_case;

/* Made by `/usr/bin/python3 tests/gen/gen_ew_ops.py` (torch 1.13). */
static const ew_case CASES[] = {
    {"softplus",
     1.0,
     20.0,
     8,
     {-30.0, -1.0, 0.0, 1.0, 19.5, 20.0, 20.5, 40.0},
     {9.357622968839737e-14, 0.31326168751822286, 0.6931471805599453, 1.3132616875182228,
      19.500000003398267, 20.000000002061153, 20.5, 40.0},
     {9.357622912219837e-14, 0.3132616877555847, 0.6931471824645996, 1.31326162815094, 19.5, 20.0,
      20.5, 40.0}},
    {"softplus",
     2.0,
     1.0,
     7,
     {-1.0, 0.0, 0.25, 0.5, 0.5000001, 3.0, -40.0},
     {0.06346400552148625, 0.34657359027997264, 0.48703849209005334, 0.6566308437591114, 0.5000001,
      3.0, 9.024256939227076e-36},
     {0.06346400082111359, 0.3465735912322998, 0.4870384931564331, 0.65663081407547,
      0.5000001192092896, 3.0, 9.024256642924203e-36}},
    {"selu",
     0.0,
     0.0,
     7,
     {-5.0, -1.0, -0.1, 0.0, 1e-09, 0.5, 3.0},
     {-1.7462533606696198, -1.1113307378125625, -0.16730527262431402, 0.0, 1.0507009873554806e-09,
      0.5253504936777402, 3.1521029620664414},
     {-1.7462533712387085, -1.1113307476043701, -0.16730524599552155, 0.0, 1.0507009706728354e-09,
      0.5253505110740662, 3.1521029472351074}},
    {"silu",
     0.0,
     0.0,
     7,
     {-100.0, -3.0, -1.0, 0.0, 1.0, 3.0, 100.0},
     {-3.720075976020836e-42, -0.14227761953270035, -0.2689414213699951, 0.0, 0.7310585786300049,
      2.8577223804672998, 100.0},
     {-0.0, -0.14227761328220367, -0.2689414322376251, 0.0, 0.7310585975646973, 2.857722520828247,
      100.0}},
    {"hard_sigmoid",
     0.0,
     0.0,
     8,
     {-4.0, -3.0, -2.5, 0.0, 1.0, 3.0, 4.0, NAN},
     {0.0, 0.0, 0.08333333333333333, 0.5, 0.6666666666666666, 1.0, 1.0, NAN},
     {0.0, 0.0, 0.0833333358168602, 0.5, 0.6666666865348816, 1.0, 1.0, NAN}},
    {"hard_swish",
     0.0,
     0.0,
     8,
     {-4.0, -3.0, -2.5, 0.0, 1.0, 3.0, 4.0, NAN},
     {-0.0, -0.0, -0.20833333333333334, 0.0, 0.6666666666666666, 3.0, 4.0, NAN},
     {-0.0, -0.0, -0.2083333283662796, 0.0, 0.6666666865348816, 3.0, 4.0, NAN}},
    {"mish",
     0.0,
     0.0,
     7,
     {-20.0, -1.0, 0.0, 0.5, 1.0, 20.0, 100.0},
     {-4.122307240628762e-08, -0.30340146137410895, 0.0, 0.3752452113048951, 0.8650983882673103,
      20.0, 100.0},
     {-4.1223074731533416e-08, -0.3034014403820038, 0.0, 0.37524524331092834, 0.8650983572006226,
      20.0, 100.0}},
    {"sign",
     0.0,
     0.0,
     7,
     {-2.5, -0.0, 0.0, 1e-30, 3.0, NAN, -INFINITY},
     {-1.0, 0.0, 0.0, 1.0, 1.0, 0.0, -1.0},
     {-1.0, 0.0, 0.0, 1.0, 1.0, 0.0, -1.0}},
    {"reciprocal",
     0.0,
     0.0,
     7,
     {-4.0, -0.5, 0.1, 3.0, 0.0, -0.0, INFINITY},
     {-0.25, -2.0, 10.0, 0.3333333333333333, INFINITY, -INFINITY, 0.0},
     {-0.25, -2.0, 10.0, 0.3333333432674408, INFINITY, -INFINITY, 0.0}},
    {"floor",
     0.0,
     0.0,
     8,
     {-2.5, -1.5, -0.5, -0.0, 0.5, 1.5, 2.7, NAN},
     {-3.0, -2.0, -1.0, -0.0, 0.0, 1.0, 2.0, NAN},
     {-3.0, -2.0, -1.0, -0.0, 0.0, 1.0, 2.0, NAN}},
    {"ceil",
     0.0,
     0.0,
     8,
     {-2.5, -1.5, -0.5, -0.0, 0.5, 1.5, 2.7, NAN},
     {-2.0, -1.0, -0.0, -0.0, 1.0, 2.0, 3.0, NAN},
     {-2.0, -1.0, -0.0, -0.0, 1.0, 2.0, 3.0, NAN}},
    {"round",
     0.0,
     0.0,
     9,
     {-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999999999999994, 2.4, -2.6},
     {-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 0.0, 2.0, -3.0},
     {-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 0.0, 2.0, -3.0}},
    {"clip",
     -1.0,
     2.0,
     7,
     {NAN, -3.0, -1.0, 0.0, 2.0, 2.5, -INFINITY},
     {NAN, -1.0, -1.0, 0.0, 2.0, 2.0, -1.0},
     {NAN, -1.0, -1.0, 0.0, 2.0, 2.0, -1.0}},
    {"clip",
     1.0,
     1.0,
     6,
     {NAN, -3.0, 0.5, 1.0, 1.5, INFINITY},
     {NAN, 1.0, 1.0, 1.0, 1.0, 1.0},
     {NAN, 1.0, 1.0, 1.0, 1.0, 1.0}},
};

/* A check that says which op and element failed. */
#define FG_CHECK_M(cond, ...)                                                                      \
  do {                                                                                             \
    if (!(cond)) FG_FAIL_AT(__VA_ARGS__);                                                          \
  } while (0)

static fg_kbuf kb1(fg_dtype dt, int64_t n, void *data) {
  fg_kbuf b;
  memset(&b, 0, sizeof b);
  b.dtype = dt;
  b.rank = 1;
  b.dims[0] = n;
  b.data = data;
  return b;
}

static fg_op_params params_of(const ew_case *c) {
  fg_op_params p;
  memset(&p, 0, sizeof p);
  if (strcmp(c->op, "softplus") == 0) {
    p.softplus.beta = c->a;
    p.softplus.threshold = c->b;
  } else if (strcmp(c->op, "clip") == 0) {
    p.clip.min = c->a;
    p.clip.max = c->b;
  }
  return p;
}

/* NaN must stay NaN, infinities and the sign of zero must match exactly;
 * other values within rel (torch's float32 kernels use other libm code). */
static void check_value(const char *op, int i, double got, double want, double rel) {
  if (isnan(want)) {
    FG_CHECK_M(isnan(got), "%s x[%d]: got %.17g, want NaN", op, i, got);
  } else if (isinf(want) || want == 0) {
    FG_CHECK_M(got == want && signbit(got) == signbit(want), "%s x[%d]: got %.17g, want %.17g", op,
               i, got, want);
  } else {
    FG_CHECK_M(fabs(got - want) <= rel * fabs(want), "%s x[%d]: got %.17g, want %.17g", op, i, got,
               want);
  }
}

static void run_case(const ew_case *c, fg_dtype dt) {
  fg_op_params p = params_of(c);
  double x64[9], y64[9];
  float x32[9], y32[9];
  for (int i = 0; i < c->n; i++) {
    x64[i] = c->x[i];
    x32[i] = (float)c->x[i];
    y64[i] = 12345.0;
    y32[i] = 12345.0f;
  }
  fg_kernel_fn fn = fg_cpu_kernel(c->op, dt);
  if (!fn) {
    FG_FAIL_AT("no CPU kernel for %s", c->op);
    return;
  }
  fg_kbuf in = dt == FG_F64 ? kb1(dt, c->n, x64) : kb1(dt, c->n, x32);
  fg_kbuf out = dt == FG_F64 ? kb1(dt, c->n, y64) : kb1(dt, c->n, y32);
  fg_kctx ctx = {&in,  1,    &out, 1, &p, NULL, 0, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,    0, 0,    NULL};
  FG_REQUIRE(fn(&ctx) == 0);
  for (int i = 0; i < c->n; i++) {
    if (dt == FG_F64)
      check_value(c->op, i, y64[i], c->y64[i], 4e-15);
    else
      check_value(c->op, i, y32[i], c->y32[i], 4e-7);
  }
}

static void run_op(const char *op) {
  int seen = 0;
  for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++)
    if (strcmp(CASES[k].op, op) == 0) {
      run_case(&CASES[k], FG_F64);
      run_case(&CASES[k], FG_F32);
      seen++;
    }
  FG_CHECK_M(seen > 0, "no cases for %s", op);
}

FG_TEST(ew_softplus_vs_torch, "") { run_op("softplus"); }
FG_TEST(ew_selu_vs_torch, "") { run_op("selu"); }
FG_TEST(ew_silu_vs_torch, "") { run_op("silu"); }
FG_TEST(ew_hard_sigmoid_vs_torch, "") { run_op("hard_sigmoid"); }
FG_TEST(ew_hard_swish_vs_torch, "") { run_op("hard_swish"); }
FG_TEST(ew_mish_vs_torch, "") { run_op("mish"); }
FG_TEST(ew_sign_vs_torch, "") { run_op("sign"); }
FG_TEST(ew_reciprocal_vs_torch, "") { run_op("reciprocal"); }
FG_TEST(ew_floor_vs_torch, "") { run_op("floor"); }
FG_TEST(ew_ceil_vs_torch, "") { run_op("ceil"); }
FG_TEST(ew_round_vs_torch, "") { run_op("round"); }
FG_TEST(ew_clip_vs_torch, "") { run_op("clip"); }

/* clip by hand at the edges: NaN passes through (torch.clamp), infinities
 * and values outside [-1, 2] take the bound, values inside stay, in f32
 * and f64 (the kernels compare without branches). */
FG_TEST(ew_clip_nan_and_bounds_by_hand, "") {
  const double xs[6] = {NAN, -INFINITY, -3, 0.5, 7, INFINITY}, want[6] = {NAN, -1, -1, 0.5, 2, 2};
  float xf[6], yf[6];
  double yd[6];
  for (int i = 0; i < 6; i++)
    xf[i] = (float)xs[i];
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.clip.min = -1, p.clip.max = 2;
  fg_kbuf inf_ = kb1(FG_F32, 6, xf), outf = kb1(FG_F32, 6, yf);
  fg_kbuf ind = kb1(FG_F64, 6, (void *)xs), outd = kb1(FG_F64, 6, yd);
  fg_kctx cf = {&inf_, 1,    &outf, 1, &p, NULL, 0, NULL, NULL, NULL,
                NULL,  NULL, 0,     0, 0,  0,    0, 0,    NULL};
  fg_kctx cd = {&ind, 1,    &outd, 1, &p, NULL, 0, NULL, NULL, NULL,
                NULL, NULL, 0,     0, 0,  0,    0, 0,    NULL};
  FG_REQUIRE(fg_cpu_kernel("clip", FG_F32)(&cf) == 0);
  FG_REQUIRE(fg_cpu_kernel("clip", FG_F64)(&cd) == 0);
  FG_CHECK(isnan(yf[0]) && isnan(yd[0]));
  for (int i = 1; i < 6; i++) {
    FG_CHECK(yf[i] == (float)want[i]);
    FG_CHECK(yd[i] == want[i]);
  }
}

/* The long sweeps' arrays (up to 99 MB each) come from the heap and go back at
 * the case's end: as static arrays they made this binary's .bss 578 MB,
 * which LeakSanitizer scans at every process's exit (5 s per case under
 * ASan, whichever case ran). A case that returns early leaves its buffer
 * reachable here, not leaked. */
static float *g_sweep;

static float *sweep_buffer(size_t n) {
  free(g_sweep);
  return g_sweep = calloc(n, sizeof *g_sweep);
}

static void sweep_done(void) {
  free(g_sweep);
  g_sweep = NULL;
}

/* exp in f32 (a polynomial the compiler vectorises, not libm's expf):
 * within 2 ulp of the double-precision exp over its range, and libm's
 * answers at the edges: overflow to inf past log(FLT_MAX), 0 below the
 * smallest denormal, exp(-inf) = 0, NaN stays NaN. */
FG_TEST(ew_exp_f32_edges_and_ulps, "") {
  enum { N = 2001 };
  static float x[N + 7], y[N + 7];
  for (int i = 0; i < N; i++)
    x[i] = -87.0f + 175.0f * (float)i / (float)(N - 1); /* -87 .. 88 */
  const float edge[7] = {INFINITY, -INFINITY, NAN, 89.0f, -110.0f, 88.72f, 0.0f};
  memcpy(x + N, edge, sizeof edge);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  fg_kbuf in = kb1(FG_F32, N + 7, x), out = kb1(FG_F32, N + 7, y);
  fg_kctx ctx = {&in,  1,    &out, 1, &p, NULL, 0, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,    0, 0,    NULL};
  FG_REQUIRE(fg_cpu_kernel("exp", FG_F32)(&ctx) == 0);
  for (int i = 0; i < N; i++) {
    const double want = exp((double)x[i]);
    const double ulp = nextafterf((float)want, INFINITY) - (float)want;
    if (!(fabs((double)y[i] - want) <= 2 * ulp))
      FG_FAIL_AT("exp(%.9g) = %.9g, want %.9g (more than 2 ulp)", x[i], y[i], want);
  }
  FG_CHECK(isinf(y[N]) && y[N] > 0);
  FG_CHECK(y[N + 1] == 0.0f);
  FG_CHECK(isnan(y[N + 2]));
  FG_CHECK(isinf(y[N + 3]) && y[N + 3] > 0);
  FG_CHECK(y[N + 4] == 0.0f);
  FG_CHECK(isfinite(y[N + 5]) && y[N + 5] > 3.3e38f);
  FG_CHECK(y[N + 6] == 1.0f);
}

/* Runs op's f32 kernel with parameters p over x[0..n) into y. */
static int run_f32_with(const char *op, fg_op_params *p, float *x, float *y, int n) {
  fg_kbuf in = kb1(FG_F32, n, x), out = kb1(FG_F32, n, y);
  fg_kctx ctx = {&in, 1, &out, 1, p, NULL, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL};
  return fg_cpu_kernel(op, FG_F32)(&ctx);
}

/* The same with zeroed parameters. */
static int run_f32(const char *op, float *x, float *y, int n) {
  fg_op_params p;
  memset(&p, 0, sizeof p);
  return run_f32_with(op, &p, x, y, n);
}

/* Fails for each y[i] more than `ulps` ulp (of the f32 nearest the
 * reference; a subnormal step where that is 0) from ref(x[i]) in double. */
static void check_ulps(const char *op, const float *x, const float *y, int n, double (*ref)(double),
                       double ulps) {
  for (int i = 0; i < n; i++) {
    const double want = ref((double)x[i]);
    double ulp = fabs(nextafterf((float)want, INFINITY) - (float)want);
    if (ulp == 0) ulp = 1.4e-45;
    if (!(fabs((double)y[i] - want) <= ulps * ulp))
      FG_FAIL_AT("%s(%.9g) = %.9g, want %.9g (more than %g ulp)", op, x[i], y[i], want, ulps);
  }
}

/* erf in f32 (two fitted polynomials, no libm, so it vectorises): within
 * 2 ulp of erf in double on a grid of 120001 points over [-6, 6], on
 * every 509th f32 from 0 to 4 (where the two pieces meet at 1 and erf
 * reaches 1 at 3.85) and at tiny arguments, and libm's edges (+-inf to
 * +-1, NaN stays NaN, -0 stays -0). gelu f32 uses it. The form it replaced
 * was off by up to 2.76 ulp. */
FG_TEST(ew_erf_f32_within_2_ulps, "") {
  enum { G = 120001, W = 0x40800000 / 509 + 1, N = G + W, E = 7 };
  float *x = sweep_buffer(2 * (N + E));
  FG_REQUIRE(x);
  float *y = x + N + E;
  for (int i = 0; i < G; i++)
    x[i] = (float)(-6.0 + 12.0 * (double)i / (G - 1));
  for (int i = 0; i < W; i++) {
    const uint32_t bits = (uint32_t)i * 509u;
    memcpy(&x[G + i], &bits, sizeof bits);
  }
  const float edge[E] = {1e-30f, -3e-8f, 1e-38f, -0.0f, INFINITY, -INFINITY, NAN};
  memcpy(x + N, edge, sizeof edge);
  FG_REQUIRE(run_f32("erf", x, y, N + E) == 0);
  check_ulps("erf", x, y, N + 3, erf, 2);
  FG_CHECK(y[N + 3] == 0.0f && signbit(y[N + 3]));
  FG_CHECK(y[N + 4] == 1.0f && y[N + 5] == -1.0f);
  FG_CHECK(isnan(y[N + 6]));
  sweep_done();
}

/* sigmoid in f32 (exp(-|x|) by fgk_expf, the numerator picked by a mask,
 * so it vectorises): within 3 ulp of 1 / (1 + exp(-x)) in double on every
 * 97th f32 of either sign up to 128 (beyond, it is 0 or 1; the measured
 * worst is 2.28 ulp), and the edges: +-inf to 1 and 0, -0 to 0.5, NaN
 * stays NaN, -100 to a subnormal within a step of e^-100. */
static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }

FG_TEST(ew_sigmoid_f32_within_3_ulps, "") {
  enum { W = 0x43000000 / 97 + 1, N = 2 * W, E = 5 };
  float *x = sweep_buffer(2 * (N + E));
  FG_REQUIRE(x);
  float *y = x + N + E;
  for (int i = 0; i < W; i++) {
    const uint32_t pos = (uint32_t)i * 97u, neg = pos | 0x80000000u;
    memcpy(&x[2 * i], &pos, sizeof pos);
    memcpy(&x[2 * i + 1], &neg, sizeof neg);
  }
  const float edge[E] = {INFINITY, -INFINITY, -0.0f, NAN, -100.0f};
  memcpy(x + N, edge, sizeof edge);
  FG_REQUIRE(run_f32("sigmoid", x, y, N + E) == 0);
  check_ulps("sigmoid", x, y, N, sigmoid_ref, 3);
  FG_CHECK(y[N] == 1.0f && y[N + 1] == 0.0f && y[N + 2] == 0.5f && isnan(y[N + 3]));
  /* e^-100 / (1 + e^-100) = 3.72e-44, within one subnormal step */
  FG_CHECK(fabs((double)y[N + 4] - exp(-100.0)) <= 1.5e-45);
  sweep_done();
}

/* tanh in f32 (an odd polynomial below 0.625, 1 - 2 / (e^(2|x|) + 1) by
 * fgk_expf above, so it vectorises): within 2 ulp of tanh in double on
 * every 89th f32 of either sign up to 16 (beyond, it is +-1), on a grid of
 * 20001 points over [-1, 1] (where the pieces meet at 0.625), and the
 * edges: +-inf to +-1, -0 stays -0, NaN stays NaN, a subnormal itself.
 * libm's tanhf it replaced is a call per element. */
FG_TEST(ew_tanh_f32_within_2_ulps, "") {
  enum { W = 0x41800000 / 89 + 1, G = 20001, N = 2 * W + G, E = 5 };
  float *x = sweep_buffer(2 * (N + E));
  FG_REQUIRE(x);
  float *y = x + N + E;
  for (int i = 0; i < W; i++) {
    const uint32_t pos = (uint32_t)i * 89u, neg = pos | 0x80000000u;
    memcpy(&x[2 * i], &pos, sizeof pos);
    memcpy(&x[2 * i + 1], &neg, sizeof neg);
  }
  for (int i = 0; i < G; i++)
    x[2 * W + i] = (float)(-1.0 + 2.0 * (double)i / (G - 1));
  const float edge[E] = {INFINITY, -INFINITY, -0.0f, NAN, 1e-40f};
  memcpy(x + N, edge, sizeof edge);
  FG_REQUIRE(run_f32("tanh", x, y, N + E) == 0);
  check_ulps("tanh", x, y, N, tanh, 2);
  FG_CHECK(y[N] == 1.0f && y[N + 1] == -1.0f);
  FG_CHECK(y[N + 2] == 0.0f && signbit(y[N + 2]));
  FG_CHECK(isnan(y[N + 3]));
  FG_CHECK(y[N + 4] == 1e-40f);
  sweep_done();
}

/* log in f32 (m 2^e split, a fitted polynomial in m - 1, no libm, so it
 * vectorises): within 1 ulp of log in double on every 97th positive f32
 * (subnormals included; the measured worst over every positive float is
 * 0.995 ulp), and the edges: +-0 to -inf, inf to inf, negatives, -inf and
 * NaN to NaN. */
FG_TEST(ew_log_f32_within_1_ulp, "") {
  enum { N = 0x7f800000 / 97, E = 6 };
  float *x = sweep_buffer(2 * (N + E));
  FG_REQUIRE(x);
  float *y = x + N + E;
  for (int i = 0; i < N; i++) {
    const uint32_t bits = (uint32_t)(i + 1) * 97u;
    memcpy(&x[i], &bits, sizeof bits);
  }
  const float edge[E] = {0.0f, -0.0f, INFINITY, -1.0f, -INFINITY, NAN};
  memcpy(x + N, edge, sizeof edge);
  FG_REQUIRE(run_f32("log", x, y, N + E) == 0);
  check_ulps("log", x, y, N, log, 1);
  FG_CHECK(y[N] == -INFINITY && y[N + 1] == -INFINITY && y[N + 2] == INFINITY);
  FG_CHECK(isnan(y[N + 3]) && isnan(y[N + 4]) && isnan(y[N + 5]));
  sweep_done();
}

/* softplus and mish in f32 (fgk_expf, then log(1 + z) as log(u) z / (u -
 * 1) by the f32 log above, and fgk_tanhf), against double on a grid of
 * 40001 points over [-30, 30]: softplus within 4 ulp, mish within 4 ulp
 * of max(|mish|, 2^-10) (mish has a root at 0 and tends to -0 below). */
static double softplus_ref(double x) { return x > 20 ? x : log1p(exp(x)); }
static double mish_ref(double x) { return x * tanh(log1p(exp(x))); }

FG_TEST(ew_softplus_mish_f32_against_double, "") {
  enum { G = 40001 };
  static float x[G], y[G], m[G];
  for (int i = 0; i < G; i++)
    x[i] = (float)(-30.0 + 60.0 * (double)i / (G - 1));
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.softplus.beta = 1, p.softplus.threshold = 20;
  FG_REQUIRE(run_f32_with("softplus", &p, x, y, G) == 0);
  check_ulps("softplus", x, y, G, softplus_ref, 4);
  FG_REQUIRE(run_f32("mish", x, m, G) == 0);
  for (int i = 0; i < G; i++) {
    const double want = mish_ref(x[i]), tol = 4 * 0x1p-23 * fmax(fabs(want), 0x1p-10);
    if (!(fabs(m[i] - want) <= tol)) FG_FAIL_AT("mish(%.9g) = %.9g, want %.9g", x[i], m[i], want);
  }
}

/* pow with exponent 2 is the correctly rounded square (x * x in double
 * is exact for an f32 x; for f64 the rounding error of the result,
 * fma(x, x, -y), is within half an ulp of y), edges included (-0 gives +0,
 * NaN stays NaN, 1e20 overflows to inf); other exponents beside it (3,
 * 0.5, -1) are within 1 ulp of pow in double (NaN for a negative base
 * to 0.5 as there). */
FG_TEST(ew_pow_square_correctly_rounded, "") {
  enum { G = 4001, E = 4, N = G + E };
  static double x[N], ex[N], y[N];
  static float xf[N], ef[N], yf[N];
  const double edge[E] = {-0.0, NAN, 1e20, -3e-30};
  for (int i = 0; i < N; i++) {
    x[i] = i < G ? -7.3 + 14.6 * (double)i / (G - 1) + 1e-9 * i : edge[i - G];
    ex[i] = i % 4 == 0 ? 3 : i % 4 == 1 ? 0.5 : i % 4 == 2 ? -1 : 2;
    if (i >= G) ex[i] = 2;
    xf[i] = (float)x[i], ef[i] = (float)ex[i];
  }
  fg_kbuf a = kb1(FG_F64, N, x), b = kb1(FG_F64, N, ex), o = kb1(FG_F64, N, y);
  fg_kbuf af = kb1(FG_F32, N, xf), bf = kb1(FG_F32, N, ef), of = kb1(FG_F32, N, yf);
  fg_kbuf in[2] = {a, b}, inf_[2] = {af, bf};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  fg_kctx c64 = {in, 2, &o, 1, &p, NULL, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL};
  fg_kctx c32 = {inf_, 2,    &of, 1, &p, NULL, 0, NULL, NULL, NULL,
                 NULL, NULL, 0,   0, 0,  0,    0, 0,    NULL};
  FG_REQUIRE(fg_cpu_kernel("pow", FG_F64)(&c64) == 0 && fg_cpu_kernel("pow", FG_F32)(&c32) == 0);
  for (int i = 0; i < N; i++) {
    if (ex[i] != 2) {
      const double w = pow((double)xf[i], (double)ef[i]);
      if (!(isnan(w) && isnan(yf[i])) &&
          !(fabs(yf[i] - w) <= fabs(nextafterf((float)w, INFINITY) - (float)w)))
        FG_FAIL_AT("powf(%.9g, %g) = %.9g, want %.9g", xf[i], ef[i], yf[i], w);
      continue;
    }
    const float sq = (float)((double)xf[i] * (double)xf[i]);
    if (memcmp(&yf[i], &sq, sizeof sq) != 0 && !(isnan(yf[i]) && isnan(sq)))
      FG_FAIL_AT("f32 %.9g^2 = %.9g, want %.9g", xf[i], yf[i], sq);
    const double err = fma(x[i], x[i], -y[i]), half = 0.5 * (nextafter(y[i], INFINITY) - y[i]);
    if (isfinite(y[i]) && !(fabs(err) <= half))
      FG_FAIL_AT("f64 %.17g^2 = %.17g, off by %g", x[i], y[i], err);
  }
  FG_CHECK(yf[G] == 0.0f && !signbit(yf[G]) && isnan(yf[G + 1]) && yf[G + 2] == INFINITY);
  FG_CHECK(y[G] == 0.0 && !signbit(y[G]) && isnan(y[G + 1]));
  FG_CHECK(y[G + 2] > 0.9999e40 && y[G + 2] < 1.0001e40);
  FG_CHECK(yf[G + 3] == 0.0f && y[G + 3] > 8.9e-60 && y[G + 3] < 9.1e-60);
}

/* selu near 0 by hand: torch 1.13 computes e^x - 1, which loses digits
 * there; expm1 keeps them. alpha scale (e^x - 1) with e^x - 1 = x + x^2/2
 * + x^3/6 for x = -1e-9: alpha scale = 1.7580993408473766, and
 * -1e-9 + 5e-19 = -9.999999995e-10, so y = -1.7580993399683269e-9. */
FG_TEST(ew_selu_near_zero_by_hand, "") {
  double x = -1e-9, y = 0;
  fg_op_params p;
  memset(&p, 0, sizeof p);
  fg_kbuf in = kb1(FG_F64, 1, &x), out = kb1(FG_F64, 1, &y);
  fg_kctx ctx = {&in,  1,    &out, 1, &p, NULL, 0, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,    0, 0,    NULL};
  FG_REQUIRE(fg_cpu_kernel("selu", FG_F64)(&ctx) == 0);
  FG_CHECK_NEAR(y, -1.7580993399683269e-9, 1e-24);
}

/* sign on integers: -1, 0, 1, including the extremes. */
FG_TEST(ew_sign_integers, "") {
  int32_t x32[5] = {INT32_MIN, -7, 0, 1, INT32_MAX}, y32[5];
  int64_t x64[5] = {INT64_MIN, -1, 0, 42, INT64_MAX}, y64[5];
  const int want[5] = {-1, -1, 0, 1, 1};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  fg_kbuf in = kb1(FG_I32, 5, x32), out = kb1(FG_I32, 5, y32);
  fg_kctx ctx = {&in,  1,    &out, 1, &p, NULL, 0, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,    0, 0,    NULL};
  FG_REQUIRE(fg_cpu_kernel("sign", FG_I32)(&ctx) == 0);
  fg_kbuf in64 = kb1(FG_I64, 5, x64), out64 = kb1(FG_I64, 5, y64);
  fg_kctx c64 = {&in64, 1,    &out64, 1, &p, NULL, 0, NULL, NULL, NULL,
                 NULL,  NULL, 0,      0, 0,  0,    0, 0,    NULL};
  FG_REQUIRE(fg_cpu_kernel("sign", FG_I64)(&c64) == 0);
  for (int i = 0; i < 5; i++) {
    FG_CHECK_INT(y32[i], want[i]);
    FG_CHECK_INT(y64[i], want[i]);
  }
}

/* The float-only ops refuse integers when the node is made; sign takes them. */
FG_TEST(ew_dtypes_when_built, "badinput") {
  const char *ops[] = {"softplus", "selu",       "silu",  "hard_sigmoid", "hard_swish",
                       "mish",     "reciprocal", "floor", "ceil",         "round"};
  for (int k = 0; k < 10; k++) {
    fg_graph *g = fg_graph_new();
    const int64_t d[1] = {3};
    fg_output x = fg_placeholder(g, "x", FG_I32, 1, d);
    FG_CHECK_M(fg_op(g, ops[k], "y", &x, 1, NULL).node == -1, "%s took i32", ops[k]);
    fg_graph_free(g);
  }
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_I64, 1, d);
  FG_CHECK(fg_sign(g, x).node >= 0);
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_graph_status(g, st), FG_OK);
  fg_status_free(st);
  fg_graph_free(g);
}

/* clip with min > max is refused naming the node and both bounds. */
FG_TEST(ew_clip_min_above_max_refused, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_float(at, "min", 2.5);
  fg_attrs_set_float(at, "max", -1);
  FG_CHECK_INT(fg_op(g, "clip", "clamp1", &x, 1, at).node, -1);
  fg_attrs_free(at);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR(fg_status_message(st), "node 'clamp1' (clip): min = 2.5 is greater than max = -1");
  fg_graph_free(g);
  /* Through the builder too; equal bounds are fine (torch.clamp(x, 1, 1)). */
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 1, d);
  FG_CHECK(fg_clip(g, x, 1, 1).node >= 0);
  FG_CHECK_INT(fg_clip(g, x, 0.5, 0.25).node, -1);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK(strstr(fg_status_message(st), "min = 0.5 is greater than max = 0.25") != NULL);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A misspelt bound, or a missing one, is refused naming the node. */
FG_TEST(ew_clip_bad_attributes_refused, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F64, 1, d);
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_float(at, "min", 0);
  fg_attrs_set_float(at, "maxx", 1);
  FG_CHECK_INT(fg_op(g, "clip", "c", &x, 1, at).node, -1);
  fg_attrs_free(at);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR(fg_status_message(st),
               "node 'c' (clip): unknown attribute 'maxx'; did you mean 'max'?; clip accepts: "
               "min (float, required), "
               "max (float, required)");
  fg_graph_free(g);
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F64, 1, d);
  at = fg_attrs_new();
  fg_attrs_set_float(at, "min", 0);
  FG_CHECK_INT(fg_op(g, "clip", "c2", &x, 1, at).node, -1);
  fg_attrs_free(at);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR(fg_status_message(st),
               "node 'c2' (clip): attribute 'max' is missing; clip needs both min and max");
  fg_graph_free(g);
  fg_status_free(st);
}

/* A node's attributes become the kernel's parameters: softplus without
 * attributes gets torch's defaults (beta 1, threshold 20), and clip its two
 * bounds. */
FG_TEST(ew_params_from_attributes, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_output sp = fg_op(g, "softplus", "sp", &x, 1, NULL);
  fg_output sp2 = fg_softplus(g, x, 0.5, 7);
  fg_output cl = fg_clip(g, x, -0.25, 6);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  const int ids[3] = {sp.node, sp2.node, cl.node};
  fg_op_params p[3];
  for (int k = 0; k < 3; k++) {
    const fg_node *n = fg_graph_node(g, ids[k]);
    fg_tinfo in[1] = {*fg_graph_tinfo(g, n->inputs[0])};
    memset(&p[k], 0xab, sizeof p[k]);
    FG_REQUIRE(fg_op_parse_params(n, in, &p[k], st) == 0);
  }
  FG_CHECK(p[0].softplus.beta == 1 && p[0].softplus.threshold == 20);
  FG_CHECK(p[1].softplus.beta == 0.5 && p[1].softplus.threshold == 7);
  FG_CHECK(p[2].clip.min == -0.25 && p[2].clip.max == 6);
  fg_graph_free(g);
  fg_status_free(st);
}
