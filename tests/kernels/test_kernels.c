/* CPU kernels against NumPy references (tests/data/kernel_fixtures.h, one
 * case per FG_TEST), plus hand-written checks of the registry, in-place
 * use, determinism and mis-wired calls.
 *
 * Inputs are copied to exact-size heap buffers and zero-element tensors get
 * data == NULL, so ASan catches any read or write past a tensor and a
 * kernel that touches an empty tensor's data crashes here, not in a user's
 * run. Outputs start as 0xA5 bytes so an unwritten element fails. */
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "graph/op_table.h"
#include "kernels/kernel.h"
#include "test_kernels_util.h"

#include "data/kernel_fixtures.h"

static size_t dt_size(fg_dtype dt) {
  switch (dt) {
  case FG_F32:
  case FG_I32: return 4;
  case FG_F64:
  case FG_I64: return 8;
  case FG_BOOL: return 1;
  default: return 0;
  }
}

static int64_t numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  return n;
}

static void *dup_bytes(const void *src, size_t bytes) {
  if (bytes == 0) return NULL;
  void *p = malloc(bytes);
  if (p && src) memcpy(p, src, bytes);
  return p;
}

/* Returns the number of mismatches, printing the first few. */
static int compare(const fgk_fcase *c, const void *got) {
  const fgk_ftensor *w = &c->out;
  const int64_t n = numel(w->rank, w->dims);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    int ok;
    if (w->dtype == FG_I64) {
      ok = ((const int64_t *)got)[i] == ((const int64_t *)w->data)[i];
    } else if (w->dtype == FG_I32 || w->dtype == FG_BOOL) {
      ok = elem_as_double(got, w->dtype, i) == elem_as_double(w->data, w->dtype, i);
    } else {
      const double g = elem_as_double(got, w->dtype, i), e = elem_as_double(w->data, w->dtype, i);
      if (isnan(e))
        ok = isnan(g);
      else if (isinf(e))
        ok = g == e;
      else
        ok = fabs(g - e) <= c->atol + c->rtol * fabs(e);
    }
    if (!ok && bad++ < 5)
      fprintf(stderr, "  %s: element %lld: got %.17g, want %.17g\n", c->name, (long long)i,
              elem_as_double(got, w->dtype, i), elem_as_double(w->data, w->dtype, i));
  }
  return bad;
}

static void run_fixture(int index) {
  const fgk_fcase *c = &fgk_cases[index];
  fg_kernel_fn fn = fg_cpu_kernel(c->op, c->key);
  FG_REQUIRE(fn != NULL);
  fg_kbuf in[4];
  memset(in, 0, sizeof in);
  for (int k = 0; k < c->n_in; k++) {
    const fgk_ftensor *t = &c->in[k];
    in[k].dtype = t->dtype;
    in[k].rank = t->rank;
    memcpy(in[k].dims, t->dims, sizeof in[k].dims);
    in[k].data = dup_bytes(t->data, (size_t)numel(t->rank, t->dims) * dt_size(t->dtype));
  }
  fg_kbuf out = {c->out.dtype, c->out.rank, {0}, NULL, 0};
  memcpy(out.dims, c->out.dims, sizeof out.dims);
  const size_t out_bytes = (size_t)numel(out.rank, out.dims) * dt_size(out.dtype);
  out.data = dup_bytes(NULL, out_bytes);
  if (out.data) memset(out.data, 0xA5, out_bytes);
  char err[256] = "";
  fg_kctx ctx = {in,   c->n_in, &out, 1, &c->p, err, sizeof err, NULL, NULL, NULL,
                 NULL, NULL,    0,    0, 0,     0,   0,          0,    NULL};
  const int rc = fn(&ctx);
  FG_CHECK_INT(rc, c->rc);
  if (rc != 0 && c->rc == 0) fprintf(stderr, "  error: %s\n", err);
  if (rc == 0 && c->rc == 0) FG_CHECK_INT(compare(c, out.data), 0);
  if (c->rc != 0) {
    for (int i = 0; i < 2; i++)
      if (c->err[i]) FG_CHECK_STR_CONTAINS(err, c->err[i]);
  }
  for (int k = 0; k < c->n_in; k++)
    free(in[k].data);
  free(out.data);
}

#define FGK_DEFINE_TEST(name, labels, index)                                                       \
  FG_TEST(name, labels) { run_fixture(index); }
FGK_FIXTURE_CASES(FGK_DEFINE_TEST)

/* ---- registry ------------------------------------------------------------ */

FG_TEST(registry_lookup, "") {
  FG_CHECK(fg_cpu_kernel("no_such_op", FG_F32) == NULL);
  FG_CHECK(fg_cpu_kernel(NULL, FG_F32) == NULL);
  FG_CHECK(fg_cpu_kernel("add", FG_DTYPE_INVALID) == NULL);
  FG_CHECK(fg_cpu_kernel("add", FG_BOOL) == NULL);
  FG_CHECK(fg_cpu_kernel("placeholder", FG_F32) == NULL);
  FG_CHECK(fg_cpu_kernel("ad", FG_F32) == NULL);
  fg_kernel_fn add = fg_cpu_kernel("add", FG_F32);
  FG_REQUIRE(add != NULL);
  FG_CHECK(fg_cpu_kernel("add", FG_F64) != add);
  int found = 0;
  for (const fg_kernel_reg *r = fg_cpu_kernel_registry(); r->op; r++)
    found += strcmp(r->op, "add") == 0 && r->dtype == FG_F32 && r->fn == add;
  FG_CHECK_INT(found, 1);
}

/* Every op in the table except the sources has f32 and f64 kernels; every
 * registry row names a real op; no (op, dtype) is registered twice. */
FG_TEST(registry_covers_op_table, "") {
#define FGK_NAME(e, s) s,
  static const char *const ops[] = {FG_OPS(FGK_NAME)};
#undef FGK_NAME
  const int n_ops = (int)(sizeof ops / sizeof ops[0]);
  for (int i = 0; i < n_ops; i++) {
    if (!strcmp(ops[i], "placeholder") || !strcmp(ops[i], "constant") ||
        !strcmp(ops[i], "variable"))
      continue;
    if (!fg_cpu_kernel(ops[i], FG_F32)) FG_FAIL_AT("no f32 kernel for %s", ops[i]);
    if (!fg_cpu_kernel(ops[i], FG_F64)) FG_FAIL_AT("no f64 kernel for %s", ops[i]);
  }
  const fg_kernel_reg *rows = fg_cpu_kernel_registry();
  for (int a = 0; rows[a].op; a++) {
    int known = 0;
    for (int i = 0; i < n_ops; i++)
      known |= !strcmp(rows[a].op, ops[i]);
    if (!known) FG_FAIL_AT("registry row %d names unknown op %s", a, rows[a].op);
    if (!rows[a].fn) FG_FAIL_AT("registry row %d (%s) has no function", a, rows[a].op);
    for (int b = 0; b < a; b++)
      if (!strcmp(rows[a].op, rows[b].op) && rows[a].dtype == rows[b].dtype)
        FG_FAIL_AT("%s dtype %d registered twice", rows[a].op, (int)rows[a].dtype);
  }
}

/* The integer and bool coverage the op table's inference allows. */
FG_TEST(registry_integer_coverage, "") {
  static const char *const numeric[] = {
      "add",  "sub",        "mul",         "div",        "maximum", "minimum", "neg",     "abs",
      "relu", "reduce_sum", "reduce_mean", "reduce_max", "argmax",  "one_hot", "greater", "less"};
  static const char *const all5[] = {
      "equal",    "select",        "reshape",    "transpose", "concat", "slice",  "gather",
      "identity", "stop_gradient", "zeros_like", "ones_like", "fill",   "assign", "cast"};
  for (size_t i = 0; i < sizeof numeric / sizeof numeric[0]; i++)
    for (fg_dtype dt = FG_F32; dt <= FG_I64; dt++)
      if (!fg_cpu_kernel(numeric[i], dt)) FG_FAIL_AT("no %s kernel for dtype %d", numeric[i], dt);
  for (size_t i = 0; i < sizeof all5 / sizeof all5[0]; i++)
    for (fg_dtype dt = FG_F32; dt <= FG_BOOL; dt++)
      if (!fg_cpu_kernel(all5[i], dt)) FG_FAIL_AT("no %s kernel for dtype %d", all5[i], dt);
  FG_CHECK(fg_cpu_kernel("pow", FG_I32) == NULL);
  FG_CHECK(fg_cpu_kernel("exp", FG_I64) == NULL);
}

/* ---- hand-written behaviour ------------------------------------------------ */

static fg_kbuf kb(fg_dtype dt, int rank, const int64_t *dims, void *data) {
  fg_kbuf b = {dt, rank, {0}, data, 0};
  for (int i = 0; i < rank; i++)
    b.dims[i] = dims[i];
  return b;
}

/* The executor may give add's output input 0's buffer (FG_OPF_INPLACE). */
FG_TEST(add_in_place_broadcast, "") {
  float a[6] = {1, 2, 3, 4, 5, 6};
  float b[3] = {10, 20, 30};
  const int64_t da[2] = {2, 3}, db[1] = {3};
  fg_kbuf in[2] = {kb(FG_F32, 2, da, a), kb(FG_F32, 1, db, b)};
  fg_kbuf out = kb(FG_F32, 2, da, a);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  char err[128] = "";
  fg_kctx ctx = {in,   2,    &out, 1, &p, err, sizeof err, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};
  FG_REQUIRE(fg_cpu_kernel("add", FG_F32)(&ctx) == 0);
  const float want[6] = {11, 22, 33, 14, 25, 36};
  for (int i = 0; i < 6; i++)
    FG_CHECK_NEAR(a[i], want[i], 0);
}

FG_TEST(unary_in_place, "") {
  double x[4] = {-1.5, 0.0, 2.0, -0.25};
  const int64_t d[1] = {4};
  fg_kbuf in = kb(FG_F64, 1, d, x), out = kb(FG_F64, 1, d, x);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.leaky_relu.alpha = 0.5;
  fg_kctx ctx = {&in,  1,    &out, 1, &p, NULL, 0, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,    0, 0,    NULL};
  FG_REQUIRE(fg_cpu_kernel("leaky_relu", FG_F64)(&ctx) == 0);
  FG_CHECK_NEAR(x[0], -0.75, 0);
  FG_CHECK_NEAR(x[1], 0.0, 0);
  FG_CHECK_NEAR(x[2], 2.0, 0);
  FG_CHECK_NEAR(x[3], -0.125, 0);
}

/* elu with alpha 0.5 by hand: 0.5 (e^x - 1) for x <= 0, x above; f32 is
 * the f64 value rounded (within an ulp of expm1f's result). */
FG_TEST(elu_by_hand, "") {
  const double x[5] = {-2.0, -0.5, 0.0, 1.5, -1e-9};
  const double want[5] = {-0.43233235838169365, -0.19673467014368329, 0.0, 1.5, -4.9999999975e-10};
  double y64[5];
  float x32[5], y32[5];
  const int64_t d[1] = {5};
  for (int i = 0; i < 5; i++)
    x32[i] = (float)x[i];
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.elu.alpha = 0.5;
  fg_kbuf in = kb(FG_F64, 1, d, (void *)x), out = kb(FG_F64, 1, d, y64);
  fg_kctx ctx = {&in,  1,    &out, 1, &p, NULL, 0, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,    0, 0,    NULL};
  FG_REQUIRE(fg_cpu_kernel("elu", FG_F64)(&ctx) == 0);
  for (int i = 0; i < 5; i++)
    FG_CHECK_NEAR(y64[i], want[i], 1e-16 + 1e-15 * fabs(want[i]));
  fg_kbuf in32 = kb(FG_F32, 1, d, x32), out32 = kb(FG_F32, 1, d, y32);
  fg_kctx c32 = {&in32, 1,    &out32, 1, &p, NULL, 0, NULL, NULL, NULL,
                 NULL,  NULL, 0,      0, 0,  0,    0, 0,    NULL};
  FG_REQUIRE(fg_cpu_kernel("elu", FG_F32)(&c32) == 0);
  for (int i = 0; i < 5; i++)
    FG_CHECK_NEAR(y32[i], want[i], 1e-7 * fabs(want[i]) + 1e-12);
}

/* assign whose value already lives in the variable's storage: no copy. */
FG_TEST(assign_same_buffer, "") {
  int32_t v[3] = {7, 8, 9};
  int32_t var[3] = {0, 0, 0};
  const int64_t d[1] = {3};
  fg_kbuf in[2] = {kb(FG_I32, 1, d, var), kb(FG_I32, 1, d, v)};
  fg_kbuf out = kb(FG_I32, 1, d, v);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  fg_kctx ctx = {in, 2, &out, 1, &p, NULL, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL};
  FG_REQUIRE(fg_cpu_kernel("assign", FG_I32)(&ctx) == 0);
  FG_CHECK_INT(v[0], 7);
  FG_CHECK_INT(v[2], 9);
  out.data = var;
  FG_REQUIRE(fg_cpu_kernel("assign", FG_I32)(&ctx) == 0);
  FG_CHECK_INT(var[0], 7);
  FG_CHECK_INT(var[1], 8);
  FG_CHECK_INT(var[2], 9);
}

/* f32 sums are a double fold in row-major order of the reduced elements:
 * the result is bitwise what this loop computes, run after run. Shapes
 * wider than the kernel's 256-wide chunk and with a reduced inner dim. */
FG_TEST(reduce_sum_f32_fixed_order, "") {
  enum { R = 97, C = 611 };
  float *x = malloc(sizeof(float) * R * C);
  float out0[C], out1[C], out_rows[R];
  FG_REQUIRE(x != NULL);
  uint32_t s = 12345;
  for (int i = 0; i < R * C; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)((double)(s >> 8) / (1 << 24) * 2.0 - 1.0) * 1000.0f;
  }
  const int64_t din[2] = {R, C}, dcol[1] = {C}, drow[1] = {R};
  fg_kbuf in = kb(FG_F32, 2, din, x), out = kb(FG_F32, 1, dcol, out0);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.reduce.n_axes = 1;
  p.reduce.axes[0] = 0;
  fg_kctx ctx = {&in,  1,    &out, 1, &p, NULL, 0, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,    0, 0,    NULL};
  fg_kernel_fn sum = fg_cpu_kernel("reduce_sum", FG_F32);
  FG_REQUIRE(sum(&ctx) == 0);
  out.data = out1;
  FG_REQUIRE(sum(&ctx) == 0);
  FG_CHECK(memcmp(out0, out1, sizeof out0) == 0);
  int bad = 0;
  for (int j = 0; j < C; j++) {
    double acc = 0;
    for (int i = 0; i < R; i++)
      acc += x[i * C + j];
    bad += (float)acc != out0[j];
  }
  FG_CHECK_INT(bad, 0);
  p.reduce.axes[0] = 1;
  out = kb(FG_F32, 1, drow, out_rows);
  FG_REQUIRE(sum(&ctx) == 0);
  bad = 0;
  for (int i = 0; i < R; i++) {
    double acc = 0;
    for (int j = 0; j < C; j++)
      acc += x[i * C + j];
    bad += (float)acc != out_rows[i];
  }
  FG_CHECK_INT(bad, 0);
  free(x);
}

/* The f64 column sums and the f32 column means take the same row fold
 * (an AVX-512 or AVX2 build of it where the CPU has one): each output is
 * bitwise the plain row-order loop's. 300 columns: a 256-wide chunk and a
 * 44-wide rest, neither a multiple of a vector. */
FG_TEST(reduce_columns_f64_and_mean_fixed_order, "") {
  enum { R = 45, C = 300 };
  double *x = malloc(sizeof(double) * R * C), out[C];
  float *xf = malloc(sizeof(float) * R * C), outf[C];
  FG_REQUIRE(x != NULL && xf != NULL);
  uint32_t s = 777;
  for (int i = 0; i < R * C; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = ((double)(s >> 8) / (1 << 24) * 2.0 - 1.0) * 1e3 / (1 + i % 7);
    xf[i] = (float)x[i];
  }
  const int64_t din[2] = {R, C}, dcol[1] = {C};
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.reduce.n_axes = 1;
  p.reduce.axes[0] = 0;
  fg_kbuf in = kb(FG_F64, 2, din, x), o = kb(FG_F64, 1, dcol, out);
  fg_kctx ctx = {&in, 1, &o, 1, &p, NULL, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL};
  FG_REQUIRE(fg_cpu_kernel("reduce_sum", FG_F64)(&ctx) == 0);
  fg_kbuf inf = kb(FG_F32, 2, din, xf), of = kb(FG_F32, 1, dcol, outf);
  fg_kctx cf = {&inf, 1, &of, 1, &p, NULL, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL};
  FG_REQUIRE(fg_cpu_kernel("reduce_mean", FG_F32)(&cf) == 0);
  int bad = 0, badf = 0;
  for (int j = 0; j < C; j++) {
    double acc = 0, accf = 0;
    for (int i = 0; i < R; i++) {
      acc += x[i * C + j];
      accf += xf[i * C + j];
    }
    bad += acc != out[j];
    badf += (float)(accf / R) != outf[j];
  }
  FG_CHECK_INT(bad, 0);
  FG_CHECK_INT(badf, 0);
  free(x);
  free(xf);
}

/* A failing kernel with no error buffer still fails cleanly. */
FG_TEST(error_without_err_buffer, "badinput") {
  float params[4] = {1, 2, 3, 4};
  int64_t idx[2] = {1, 4};
  float out[2];
  const int64_t dp[1] = {4}, di[1] = {2};
  fg_kbuf in[2] = {kb(FG_F32, 1, dp, params), kb(FG_I64, 1, di, idx)};
  fg_kbuf o = kb(FG_F32, 1, di, out);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  fg_kctx ctx = {in, 2, &o, 1, &p, NULL, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL};
  FG_CHECK_INT(fg_cpu_kernel("gather", FG_F32)(&ctx), -1);
  char tiny[8];
  ctx.err = tiny;
  ctx.err_size = sizeof tiny;
  FG_CHECK_INT(fg_cpu_kernel("gather", FG_F32)(&ctx), -1);
  FG_CHECK(strlen(tiny) == sizeof tiny - 1); /* truncated, terminated */
}

/* Calls the executor should never make fail with a message, not a crash. */
FG_TEST(miswired_calls_fail_cleanly, "") {
  float a[6] = {0}, b[4] = {0}, o[12];
  char err[200];
  fg_op_params p;
  memset(&p, 0, sizeof p);
  const int64_t d23[2] = {2, 3}, d4[1] = {4}, d3[1] = {3}, d6[1] = {6};
  fg_kbuf in[2] = {kb(FG_F32, 2, d23, a), kb(FG_F32, 1, d4, b)};
  fg_kbuf out = kb(FG_F32, 2, d23, o);
  fg_kctx ctx = {in,   2,    &out, 1, &p, err, sizeof err, NULL, NULL, NULL,
                 NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};

  err[0] = '\0';
  FG_CHECK_INT(fg_cpu_kernel("add", FG_F32)(&ctx), -1); /* [2,3] + [4] */
  FG_CHECK_STR_CONTAINS(err, "does not broadcast");

  ctx.n_in = 1;
  err[0] = '\0';
  FG_CHECK_INT(fg_cpu_kernel("mul", FG_F32)(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "expected 2 inputs");
  ctx.n_in = 2;

  in[1] = kb(FG_F32, 1, d3, b);
  err[0] = '\0';
  FG_CHECK_INT(fg_cpu_kernel("matmul", FG_F32)(&ctx), -1); /* rank-1 b */
  FG_CHECK_STR_CONTAINS(err, "rank >= 2");

  in[1] = kb(FG_F64, 1, d3, b);
  err[0] = '\0';
  FG_CHECK_INT(fg_cpu_kernel("sub", FG_F32)(&ctx), -1); /* dtype mix */
  FG_CHECK_STR_CONTAINS(err, "f64");

  p.transpose.perm[0] = 0;
  p.transpose.perm[1] = 0;
  out = kb(FG_F32, 2, d23, o);
  err[0] = '\0';
  FG_CHECK_INT(fg_cpu_kernel("transpose", FG_F32)(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "perm[1] = 0");

  p.slice.begin[0] = 1;
  p.slice.begin[1] = 0;
  err[0] = '\0';
  FG_CHECK_INT(fg_cpu_kernel("slice", FG_F32)(&ctx), -1); /* rows [1, 3) of 2 */
  FG_CHECK_STR_CONTAINS(err, "outside");

  p.reduce.n_axes = 1;
  p.reduce.axes[0] = 5;
  out = kb(FG_F32, 1, d6, o);
  err[0] = '\0';
  FG_CHECK_INT(fg_cpu_kernel("reduce_sum", FG_F32)(&ctx), -1);
  FG_CHECK_STR_CONTAINS(err, "axis 5");

  FG_CHECK_INT(fg_cpu_kernel("relu", FG_F32)(NULL), -1);
}
