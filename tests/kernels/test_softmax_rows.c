/* Contiguous rows along the last axis, short ones above all: softmax,
 * log_softmax, softmax_cross_entropy and its gradient on f32 rows of 1 to
 * 1003 elements (short rows go several per call, in blocks with a
 * remainder), and argmax/argmin of every dtype over the last axis (a
 * per-row scan, and lanes for rows of 64 or more). Values against plain
 * reference loops in double and rows worked by hand; results that depend
 * on the row alone (a row computed among others gives the bits it gives
 * alone); and bitwise identical results with par == NULL and pools of 1, 2
 * and 4 threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "executor/threadpool.h"
#include "fgtest.h"
#include "kernels/kernel.h"
#include "test_kernels_par.h"

/* Row lengths: single elements, around the 8 accumulator lanes, the
 * digits' 10 classes, around 64, and around the 256-element block beyond
 * which a row goes alone. Row counts: one row, a few, and enough for
 * several blocks of short rows with a remainder. */
static const int64_t CS[] = {1, 3, 7, 8, 9, 10, 15, 16, 17, 33, 64, 100, 255, 256, 257, 1003};
static const int64_t NS[] = {1, 5, 130, 301};
#define N_CS (int)(sizeof CS / sizeof *CS)
#define N_NS (int)(sizeof NS / sizeof *NS)

/* Logits [N, C] in [-8, 8) with rows that test the edges: a NaN (row 3),
 * -inf entries (row 1), large logits (row 2), ties (row 4), gaps down to
 * -200 (row 6), a single large logit (rows 5, 7, 8), when the rows exist. */
static fg_kbuf logits(int64_t N, int64_t C, uint64_t *seed) {
  const int64_t d[2] = {N, C};
  fg_kbuf b = make_kbuf(FG_F32, 2, d);
  float *x = (float *)b.data;
  for (int64_t i = 0; i < N * C; i++)
    x[i] = (float)(rng_unit(seed) * 8);
  for (int64_t j = 0; j < C; j++) {
    if (N > 1) x[1 * C + j] = j % 3 ? -INFINITY : 1.0f;
    if (N > 2) x[2 * C + j] = (float)(1e4 + (j % 17) * 3);
    if (N > 4) x[4 * C + j] = (float)(j % 2);
    if (N > 6) x[6 * C + j] = (float)(-j * 200.0 / (double)C);
  }
  if (N > 3) x[3 * C + C / 2] = NAN;
  /* One logit far above the rest, at the end, near the start and in the
   * middle: a max that missed it would overflow the exp. */
  if (N > 5) x[5 * C + C - 1] = 150;
  if (N > 7) x[7 * C + 1 % C] = 150;
  if (N > 8) x[8 * C + C / 2] = 150;
  return b;
}

static int row_has_nan(const float *row, int64_t C) {
  for (int64_t j = 0; j < C; j++)
    if (row[j] != row[j]) return 1;
  return 0;
}

/* logsumexp of a row in double, with libm's exp. */
static double ref_lse(const float *row, int64_t C) {
  double m = -INFINITY, s = 0;
  for (int64_t j = 0; j < C; j++)
    m = row[j] > m ? row[j] : m;
  for (int64_t j = 0; j < C; j++)
    s += exp((double)row[j] - m);
  return m + log(s);
}

/* Checks y = softmax(x) (or log_softmax) of [N, C] against ref_lse: a NaN
 * row all NaN, others within 2e-6 relative (absolute below 1e-30). */
static void check_softmax_values(const float *x, const float *y, int64_t N, int64_t C,
                                 int want_log) {
  double worst = 0;
  int ok = 1;
  for (int64_t n = 0; n < N; n++) {
    const float *xr = x + n * C, *yr = y + n * C;
    if (row_has_nan(xr, C)) {
      for (int64_t j = 0; j < C; j++)
        ok = ok && isnan(yr[j]);
      continue;
    }
    const double lse = ref_lse(xr, C);
    for (int64_t j = 0; j < C; j++) {
      const double want = want_log ? (double)xr[j] - lse : exp((double)xr[j] - lse);
      const double got = yr[j];
      if (isinf(want)) {
        ok = ok && got == want;
        continue;
      }
      if (want_log || want >= 1e-30) {
        const double err = fabs(got - want) / (want_log ? 1 + fabs(want) : want);
        worst = err > worst ? err : worst;
      } else {
        ok = ok && fabs(got - want) < 1e-37; /* subnormal or zero: absolute */
      }
    }
  }
  if (!ok || !(worst < 2e-6))
    fprintf(stderr, "  C %lld N %lld log %d: worst %g\n", (long long)C, (long long)N, want_log,
            worst);
  FG_CHECK(ok);
  FG_CHECK(worst < 2e-6);
}

/* Each row of y equals, bit for bit, the op on that row alone ([1, C]). */
static void check_rows_alone(const char *op, const fg_kbuf *x, const fg_kbuf *y,
                             const fg_op_params *p) {
  const int64_t N = x->dims[0], C = x->dims[1], d1[2] = {1, C};
  fg_kbuf xi = make_kbuf(FG_F32, 2, d1), yi = make_kbuf(FG_F32, 2, d1);
  int same = 1;
  for (int64_t n = 0; n < N; n++) {
    memcpy(xi.data, (const float *)x->data + n * C, (size_t)C * sizeof(float));
    FG_CHECK_INT(run_kernel(op, FG_F32, &xi, 1, &yi, p, NULL), 0);
    same = same && memcmp(yi.data, (const float *)y->data + n * C, (size_t)C * sizeof(float)) == 0;
  }
  FG_CHECK(same);
  free(xi.data);
  free(yi.data);
}

FG_TEST(softmax_rows_short_and_long_match_reference, "") {
  uint64_t seed = 21;
  fg_op_params p = {.softmax = {.axis = 1}};
  for (int ci = 0; ci < N_CS; ci++)
    for (int ni = 0; ni < N_NS; ni++) {
      const int64_t N = NS[ni], C = CS[ci], d[2] = {N, C};
      fg_kbuf x = logits(N, C, &seed), y = make_kbuf(FG_F32, 2, d);
      for (int want_log = 0; want_log < 2; want_log++) {
        const char *op = want_log ? "log_softmax" : "softmax";
        run_bitwise(op, FG_F32, &x, 1, &y, &p);
        check_softmax_values((const float *)x.data, (const float *)y.data, N, C, want_log);
        if (N == 130 || N == 5) check_rows_alone(op, &x, &y, &p);
        /* In place (y == x), as a memory plan may run it: the same bits. */
        fg_kbuf xy = make_kbuf(FG_F32, 2, d);
        memcpy(xy.data, x.data, kbuf_nbytes(&x));
        FG_CHECK_INT(run_kernel(op, FG_F32, &xy, 1, &xy, &p, NULL), 0);
        FG_CHECK(memcmp(xy.data, y.data, kbuf_nbytes(&y)) == 0);
        free(xy.data);
      }
      free(x.data);
      free(y.data);
    }
}

/* Rows worked by hand: one element gives 1 (log 0); four equal ones give
 * 1/4 exactly; [0, ln 3] gives 1/4 and 3/4 (to f32 rounding); a row with
 * a NaN is all NaN; a row of -inf is NaN (-inf - -inf), as before. */
FG_TEST(softmax_rows_by_hand, "") {
  const float ln3 = 1.0986122886681098f;
  const float xs[5][4] = {{5, 5, 5, 5},
                          {0, ln3, -INFINITY, -INFINITY},
                          {1, NAN, 2, 3},
                          {-INFINITY, -INFINITY, -INFINITY, -INFINITY},
                          {-100, 0, -100, -100}};
  const int64_t d[2] = {5, 4}, d1[2] = {7, 1};
  fg_kbuf x = make_kbuf(FG_F32, 2, d), y = make_kbuf(FG_F32, 2, d);
  memcpy(x.data, xs, sizeof xs);
  fg_op_params p = {.softmax = {.axis = 1}};
  run_bitwise("softmax", FG_F32, &x, 1, &y, &p);
  const float *yv = (const float *)y.data;
  for (int j = 0; j < 4; j++)
    FG_CHECK(yv[j] == 0.25f);
  FG_CHECK_NEAR(yv[4], 0.25, 1e-7);
  FG_CHECK_NEAR(yv[5], 0.75, 1e-7);
  FG_CHECK(yv[6] == 0 && yv[7] == 0);
  for (int j = 8; j < 16; j++)
    FG_CHECK(isnan(yv[j]));
  FG_CHECK_NEAR(yv[17], 1.0, 1e-7); /* exp(-100) = 3.7e-44: a subnormal f32 */
  FG_CHECK(yv[16] >= 0 && yv[16] < 1e-43);
  run_bitwise("log_softmax", FG_F32, &x, 1, &y, &p);
  for (int j = 0; j < 4; j++)
    FG_CHECK_NEAR(yv[j], -1.3862943611198906, 1e-7); /* log(1/4) */
  FG_CHECK_NEAR(yv[4], -1.3862943611198906, 1e-7);
  FG_CHECK_NEAR(yv[5], -0.28768207245178090, 1e-7); /* log(3/4) */
  FG_CHECK(yv[6] == -INFINITY);
  FG_CHECK_NEAR(yv[16], -100, 1e-7);
  FG_CHECK_NEAR(yv[17], 0, 1e-7);
  free(x.data);
  free(y.data);
  /* Rows of one element: softmax 1, log_softmax 0; NaN and inf give NaN. */
  fg_kbuf x1 = make_kbuf(FG_F32, 2, d1), y1 = make_kbuf(FG_F32, 2, d1);
  const float v1[7] = {3, -1e30f, 0, NAN, INFINITY, 7, -2};
  memcpy(x1.data, v1, sizeof v1);
  for (int want_log = 0; want_log < 2; want_log++) {
    run_bitwise(want_log ? "log_softmax" : "softmax", FG_F32, &x1, 1, &y1, &p);
    for (int n = 0; n < 7; n++) {
      const float got = ((const float *)y1.data)[n];
      if (n == 3 || n == 4)
        FG_CHECK(isnan(got));
      else
        FG_CHECK(got == (want_log ? 0.0f : 1.0f));
    }
  }
  free(x1.data);
  free(y1.data);
}

FG_TEST(softmax_cross_entropy_rows_match_reference, "") {
  uint64_t seed = 33;
  fg_op_params p;
  memset(&p, 0, sizeof p);
  for (int ci = 0; ci < N_CS; ci++)
    for (int ni = 0; ni < N_NS; ni++) {
      const int64_t N = NS[ni], C = CS[ci], nd[1] = {N};
      fg_kbuf in[2] = {logits(N, C, &seed), make_kbuf(FG_I32, 1, nd)};
      float *xv = (float *)in[0].data;
      if (N > 3) xv[3 * C + C / 2] = 0.5f; /* the NaN row is checked below */
      for (int64_t n = 0; n < N; n++)
        ((int32_t *)in[1].data)[n] = (int32_t)((n * 7) % C);
      if (N > 1) ((int32_t *)in[1].data)[1] = 0; /* a finite logit in the -inf row */
      fg_kbuf out = make_kbuf(FG_F32, 0, NULL);
      run_bitwise("softmax_cross_entropy", FG_F32, in, 2, &out, &p);
      double want = 0;
      for (int64_t n = 0; n < N; n++)
        want += ref_lse(xv + n * C, C) - xv[n * C + ((int32_t *)in[1].data)[n]];
      want /= (double)N;
      FG_CHECK_NEAR(*(float *)out.data, want, 2e-6);
      /* One NaN logit makes the loss NaN. */
      xv[(N - 1) * C] = NAN;
      run_bitwise("softmax_cross_entropy", FG_F32, in, 2, &out, &p);
      FG_CHECK(isnan(*(float *)out.data));
      free(in[0].data);
      free(in[1].data);
      free(out.data);
    }
  /* By hand: rows [0, 0] and [ln 3, 0] with labels 0 and 1: the losses
   * log 2 and log 4 - 0 = log 4, mean 1.5 log 2. */
  const int64_t d[2] = {2, 2}, nd[1] = {2};
  fg_kbuf in[2] = {make_kbuf(FG_F32, 2, d), make_kbuf(FG_I64, 1, nd)};
  ((float *)in[0].data)[2] = 1.0986122886681098f;
  ((int64_t *)in[1].data)[1] = 1;
  fg_kbuf out = make_kbuf(FG_F32, 0, NULL);
  run_bitwise("softmax_cross_entropy", FG_F32, in, 2, &out, &p);
  FG_CHECK_NEAR(*(float *)out.data, 1.0397207708399179, 2e-7);
  free(in[0].data);
  free(in[1].data);
  free(out.data);
}

/* softmax_cross_entropy_grad is softmax's row, then the subtraction of the
 * one-hot label and the product with dy / N, in f32: exactly those bits
 * (from the softmax kernel's output), and close to the double reference. */
FG_TEST(softmax_cross_entropy_grad_rows_are_softmax_bits, "") {
  uint64_t seed = 45;
  fg_op_params p = {.softmax = {.axis = 1}};
  for (int ci = 0; ci < N_CS; ci++)
    for (int ni = 0; ni < N_NS; ni++) {
      const int64_t N = NS[ni], C = CS[ci], d[2] = {N, C}, nd[1] = {N};
      const fg_dtype ldt = ni % 2 ? FG_I64 : FG_I32;
      fg_kbuf in[3] = {logits(N, C, &seed), make_kbuf(ldt, 1, nd), make_kbuf(FG_F32, 0, NULL)};
      for (int64_t n = 0; n < N; n++) {
        const int64_t l = (n * 5 + 1) % C;
        if (ldt == FG_I64)
          ((int64_t *)in[1].data)[n] = l;
        else
          ((int32_t *)in[1].data)[n] = (int32_t)l;
      }
      const float dy = 0.7f;
      *(float *)in[2].data = dy;
      fg_kbuf g = make_kbuf(FG_F32, 2, d), s = make_kbuf(FG_F32, 2, d);
      run_bitwise("softmax_cross_entropy_grad", FG_F32, in, 3, &g, &p);
      FG_CHECK_INT(run_kernel("softmax", FG_F32, &in[0], 1, &s, &p, NULL), 0);
      const float scale = dy / (float)N;
      const float *xv = (const float *)in[0].data, *gv = (const float *)g.data,
                  *sv = (const float *)s.data;
      int bits = 1, near = 1;
      for (int64_t n = 0; n < N; n++) {
        const int64_t l = (n * 5 + 1) % C;
        const double lse = row_has_nan(xv + n * C, C) ? NAN : ref_lse(xv + n * C, C);
        for (int64_t j = 0; j < C; j++) {
          const float want = (sv[n * C + j] - (j == l ? 1.0f : 0.0f)) * scale;
          bits = bits && (isnan(want) ? isnan(gv[n * C + j])
                                      : memcmp(&want, &gv[n * C + j], sizeof want) == 0);
          const double ref = (exp((double)xv[n * C + j] - lse) - (j == l)) * (0.7 / (double)N);
          if (isnan(lse))
            near = near && isnan(gv[n * C + j]);
          else
            near = near && fabs(gv[n * C + j] - ref) <= 2e-6 * fabs(0.7 / (double)N);
        }
      }
      FG_CHECK(bits);
      FG_CHECK(near);
      for (int k = 0; k < 3; k++)
        free(in[k].data);
      free(g.data);
      free(s.data);
    }
}

/* Runs softmax_cross_entropy_and_grad (two outputs) with `par`; the
 * kernel's return, its message into err. */
static int run_and_grad(const fg_kbuf *in, fg_kbuf *out, const fg_kparallel *par, char *err,
                        size_t size) {
  fg_kernel_fn fn = fg_cpu_kernel("softmax_cross_entropy_and_grad", FG_F32);
  if (!fn) return -99;
  fg_op_params p;
  memset(&p, 0, sizeof p);
  fg_kctx ctx = {in, 2, out, 2, &p, err, size, par, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL};
  return fn(&ctx);
}

/* softmax_cross_entropy_and_grad gives the loss kernel's bits in output 0
 * and the gradient kernel's with dy = 1 in output 1, on every shape above
 * (several chunks of rows where rows are long, NaN and -inf rows), with
 * par NULL and pools of 1, 2 and 4 threads; a wrong output 1 is refused. */
FG_TEST(softmax_cross_entropy_and_grad_is_both_kernels_bits, "") {
  uint64_t seed = 51;
  fg_op_params p;
  memset(&p, 0, sizeof p);
  for (int ci = 0; ci < N_CS; ci++)
    for (int ni = 0; ni < N_NS; ni++) {
      const int64_t N = NS[ni], C = CS[ci], d[2] = {N, C}, nd[1] = {N};
      fg_kbuf in[3] = {logits(N, C, &seed), make_kbuf(FG_I32, 1, nd), make_kbuf(FG_F32, 0, NULL)};
      for (int64_t n = 0; n < N; n++)
        ((int32_t *)in[1].data)[n] = (int32_t)((n * 3 + 2) % C);
      *(float *)in[2].data = 1.0f;
      fg_kbuf loss = make_kbuf(FG_F32, 0, NULL), grad = make_kbuf(FG_F32, 2, d);
      FG_CHECK_INT(run_kernel("softmax_cross_entropy", FG_F32, in, 2, &loss, &p, NULL), 0);
      FG_CHECK_INT(run_kernel("softmax_cross_entropy_grad", FG_F32, in, 3, &grad, &p, NULL), 0);
      fg_kbuf both[2] = {make_kbuf(FG_F32, 0, NULL), make_kbuf(FG_F32, 2, d)};
      char err[256] = "";
      for (int t = 0; t < 4; t++) {
        fg_pool *pool = t ? fg_pool_new(t == 3 ? 4 : t) : NULL;
        const fg_kparallel par = {pool, fg_pool_parallel_for_fn};
        memset(both[1].data, 0xA5, kbuf_nbytes(&both[1]));
        FG_CHECK_INT(run_and_grad(in, both, pool ? &par : NULL, err, sizeof err), 0);
        FG_CHECK(memcmp(both[0].data, loss.data, sizeof(float)) == 0);
        FG_CHECK(memcmp(both[1].data, grad.data, kbuf_nbytes(&grad)) == 0);
        fg_pool_free(pool);
      }
      /* Output 1 one row short: refused, naming what it must be. */
      fg_kbuf short_grad = both[1];
      short_grad.dims[0] = N - 1;
      fg_kbuf wrong[2] = {both[0], short_grad};
      FG_CHECK(run_and_grad(in, wrong, NULL, err, sizeof err) != 0);
      FG_CHECK_STR_CONTAINS(err, "output 1 must be f32 with the logits'");
      for (int k = 0; k < 3; k++)
        free(in[k].data);
      free(loss.data), free(grad.data), free(both[0].data), free(both[1].data);
    }
}

/* ---- argmax / argmin over the last axis ------------------------------------ */

/* np.argmax (want_max) or np.argmin of a row read as doubles (exact for
 * these values): the first NaN if there is one, else the first index of
 * the extreme. */
static int64_t ref_arg(const fg_kbuf *b, int64_t off, int64_t A, int want_max) {
  for (int64_t a = 0; a < A; a++) {
    const double v = elem_as_double(b->data, b->dtype, off + a);
    if (v != v) return a;
  }
  if (b->dtype == FG_I64) { /* int64 extremes do not survive a double */
    const int64_t *r = (const int64_t *)b->data + off;
    int64_t bi = 0;
    for (int64_t a = 1; a < A; a++)
      if (want_max ? r[a] > r[bi] : r[a] < r[bi]) bi = a;
    return bi;
  }
  int64_t bi = 0;
  double best = elem_as_double(b->data, b->dtype, off);
  for (int64_t a = 1; a < A; a++) {
    const double v = elem_as_double(b->data, b->dtype, off + a);
    if (want_max ? v > best : v < best) {
      best = v;
      bi = a;
    }
  }
  return bi;
}

FG_TEST(argmax_argmin_last_axis_rows_match_reference, "") {
  uint64_t seed = 57;
  const fg_dtype dts[4] = {FG_F32, FG_F64, FG_I32, FG_I64};
  const int64_t As[] = {1, 2, 3, 4, 5, 7, 10, 31, 63, 64, 65, 100, 128, 129, 1000};
  const int64_t Ns[] = {1, 2, 3, 4, 5, 6, 7, 9, 50};
  for (int di = 0; di < 4; di++)
    for (int ai = 0; ai < (int)(sizeof As / sizeof *As); ai++)
      for (int ni = 0; ni < (int)(sizeof Ns / sizeof *Ns); ni++) {
        const fg_dtype dt = dts[di];
        const int is_float = dt == FG_F32 || dt == FG_F64;
        const int64_t A = As[ai], N = Ns[ni], d[2] = {N, A}, od[1] = {N};
        fg_kbuf x = make_kbuf(dt, 2, d), o = make_kbuf(FG_I64, 1, od);
        for (int64_t n = 0; n < N; n++) {
          for (int64_t a = 0; a < A; a++) /* few distinct values: many ties */
            elem_store(x.data, dt, n * A + a, floor(rng_unit(&seed) * 4));
          const int64_t r = n % 9, at = (int64_t)((rng_unit(&seed) + 1) / 2 * (double)A);
          if (is_float && r == 1) elem_store(x.data, dt, n * A + at, NAN);
          if (is_float && r == 2) { /* two NaNs, the first wins */
            elem_store(x.data, dt, n * A + A - 1, NAN);
            elem_store(x.data, dt, n * A + at, NAN);
          }
          if (is_float && r == 3) elem_store(x.data, dt, n * A, NAN);
          if (is_float && r == 4) /* signed zeros and infinities only */
            for (int64_t a = 0; a < A; a++)
              elem_store(x.data, dt, n * A + a,
                         a % 4 == 0   ? -0.0
                         : a % 4 == 1 ? 0.0
                                      : (a % 4 == 2 ? -INFINITY : 0.0));
          if (r == 5) /* one extreme of the type at a random place */
            elem_store(x.data, dt, n * A + at,
                       dt == FG_I32 ? 2147483647.0
                       : is_float   ? INFINITY
                                    : 9.2e18);
          if (r == 6)
            elem_store(x.data, dt, n * A + at,
                       dt == FG_I32 ? -2147483648.0
                       : is_float   ? -INFINITY
                                    : -9.2e18);
          if (r == 7) /* all equal: index 0 */
            for (int64_t a = 0; a < A; a++)
              elem_store(x.data, dt, n * A + a, 2);
        }
        for (int want_max = 0; want_max < 2; want_max++) {
          fg_op_params p = {.argmax = {.axis = 1}};
          run_bitwise(want_max ? "argmax" : "argmin", dt, &x, 1, &o, &p);
          int ok = 1;
          for (int64_t n = 0; n < N; n++) {
            const int64_t want = ref_arg(&x, n * A, A, want_max), got = ((int64_t *)o.data)[n];
            if (got != want && ok)
              fprintf(stderr, "  %s %s A %lld N %lld row %lld: %lld, want %lld\n",
                      want_max ? "argmax" : "argmin", fg_dtype_name(dt), (long long)A, (long long)N,
                      (long long)n, (long long)got, (long long)want);
            ok = ok && got == want;
          }
          FG_CHECK(ok);
        }
        free(x.data);
        free(o.data);
      }
}

/* Rows worked by hand (np.argmax and np.argmin give the same answers). */
FG_TEST(argmax_argmin_last_axis_by_hand, "") {
  const float xs[6][5] = {
      {1, 3, 3, 2, 0},          {NAN, 1, NAN, 9, -9},
      {1, 2, NAN, 9, NAN},      {-0.0f, 0.0f, 1, 1, 0},
      {0.0f, -0.0f, -1, -1, 0}, {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}};
  const int64_t want_max[6] = {1, 0, 2, 2, 0, 0}, want_min[6] = {4, 0, 2, 0, 2, 0};
  const int64_t d[2] = {6, 5}, od[1] = {6};
  fg_kbuf x = make_kbuf(FG_F32, 2, d), o = make_kbuf(FG_I64, 1, od);
  memcpy(x.data, xs, sizeof xs);
  fg_op_params p = {.argmax = {.axis = 1}};
  run_bitwise("argmax", FG_F32, &x, 1, &o, &p);
  for (int n = 0; n < 6; n++)
    FG_CHECK_INT(((int64_t *)o.data)[n], want_max[n]);
  run_bitwise("argmin", FG_F32, &x, 1, &o, &p);
  for (int n = 0; n < 6; n++)
    FG_CHECK_INT(((int64_t *)o.data)[n], want_min[n]);
  free(x.data);
  free(o.data);

  /* Rows of 70 (the lanes path): x[a] = a % 35, so the max 34 first at 34
   * and the min 0 at 0; then a NaN at 66 wins both; then -0 at 3 and +0 at
   * 0 and 35 tie for the min: index 0. */
  const int64_t d70[2] = {1, 70}, o1[1] = {1};
  fg_kbuf l = make_kbuf(FG_F64, 2, d70), lo = make_kbuf(FG_I64, 1, o1);
  double *lv = (double *)l.data;
  for (int a = 0; a < 70; a++)
    lv[a] = a % 35;
  run_bitwise("argmax", FG_F64, &l, 1, &lo, &p);
  FG_CHECK_INT(((int64_t *)lo.data)[0], 34);
  run_bitwise("argmin", FG_F64, &l, 1, &lo, &p);
  FG_CHECK_INT(((int64_t *)lo.data)[0], 0);
  lv[3] = -0.0;
  lv[35] = 0.0;
  run_bitwise("argmin", FG_F64, &l, 1, &lo, &p);
  FG_CHECK_INT(((int64_t *)lo.data)[0], 0);
  lv[0] = 5;
  run_bitwise("argmin", FG_F64, &l, 1, &lo, &p);
  FG_CHECK_INT(((int64_t *)lo.data)[0], 3);
  lv[66] = NAN;
  run_bitwise("argmax", FG_F64, &l, 1, &lo, &p);
  FG_CHECK_INT(((int64_t *)lo.data)[0], 66);
  run_bitwise("argmin", FG_F64, &l, 1, &lo, &p);
  FG_CHECK_INT(((int64_t *)lo.data)[0], 66);
  free(l.data);
  free(lo.data);

  /* i64 extremes that a double cannot tell apart from their neighbours. */
  const int64_t d3[2] = {1, 3}, di[2] = {1, 80};
  fg_kbuf w = make_kbuf(FG_I64, 2, d3);
  int64_t *wv = (int64_t *)w.data;
  wv[0] = INT64_MAX - 1;
  wv[1] = INT64_MAX;
  wv[2] = INT64_MIN + 1;
  lo = make_kbuf(FG_I64, 1, o1);
  run_bitwise("argmax", FG_I64, &w, 1, &lo, &p);
  FG_CHECK_INT(((int64_t *)lo.data)[0], 1);
  fg_kbuf wl = make_kbuf(FG_I64, 2, di);
  int64_t *wlv = (int64_t *)wl.data;
  for (int a = 0; a < 80; a++)
    wlv[a] = INT64_MIN + 2 + a % 3;
  wlv[71] = INT64_MIN + 1;
  wlv[77] = INT64_MIN + 1;
  run_bitwise("argmin", FG_I64, &wl, 1, &lo, &p);
  FG_CHECK_INT(((int64_t *)lo.data)[0], 71);
  free(w.data);
  free(wl.data);
  free(lo.data);
}
