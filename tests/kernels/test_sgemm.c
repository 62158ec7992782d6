/* The f32 GEMM of a matmul tile (kernels/cpu/sgemm.c): oneDNN's sgemm from
 * 2^20 multiply-adds up, OpenBLAS's below and with FG_SGEMM=openblas.
 * Values against a double loop for all four transposes, alpha and beta,
 * in a block of a wider output (the rest untouched), on both sides of the
 * threshold; FG_SGEMM=openblas gives cblas_sgemm's bits; the calling
 * thread's OpenMP thread count is what it was. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FG_TEST_HAVE_DNNL
#include <omp.h>
#endif

#include "fgtest.h"
#include "kernels/cpu/sgemm.h"

static float frand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct case_t {
  int m, n, k, ta, tb;
  float alpha, beta;
} case_t;

/* c (m rows, ldc = n + 5, the block at column 2) = alpha op(a) op(b) +
 * beta c through fgk_sgemm, into *out (malloc'ed, m * ldc floats); the
 * worst error over the double loop's, as a fraction of 4 k eps times the
 * terms' magnitude, into *worst; 0 when the columns around the block are
 * untouched. */
static int run_case(const case_t *t, uint64_t seed, float **out, double *worst) {
  const int ldc = t->n + 5, c0 = 2, lda = t->ta ? t->m : t->k, ldb = t->tb ? t->k : t->n;
  float *a = malloc(sizeof(float) * (size_t)t->m * t->k);
  float *b = malloc(sizeof(float) * (size_t)t->k * t->n);
  float *c = malloc(sizeof(float) * (size_t)t->m * ldc),
        *c_in = malloc(sizeof(float) * (size_t)t->m * ldc);
  if (!a || !b || !c || !c_in) return -1;
  for (int i = 0; i < t->m * t->k; i++)
    a[i] = frand(&seed);
  for (int i = 0; i < t->k * t->n; i++)
    b[i] = frand(&seed);
  for (int i = 0; i < t->m * ldc; i++)
    c[i] = c_in[i] = frand(&seed);
  fgk_sgemm(CblasRowMajor, t->ta ? CblasTrans : CblasNoTrans, t->tb ? CblasTrans : CblasNoTrans,
            t->m, t->n, t->k, t->alpha, a, lda, b, ldb, t->beta, c + c0, ldc);
  int outside = 0;
  *worst = 0;
  for (int i = 0; i < t->m; i++)
    for (int j = 0; j < ldc; j++) {
      const int at = i * ldc + j;
      if (j < c0 || j >= c0 + t->n) {
        outside += c[at] != c_in[at];
        continue;
      }
      double s = 0, mag = 0;
      for (int r = 0; r < t->k; r++) {
        const double p = (double)(t->ta ? a[r * t->m + i] : a[i * t->k + r]) *
                         (t->tb ? b[(j - c0) * t->k + r] : b[r * t->n + (j - c0)]);
        s += p, mag += fabs(p);
      }
      const double want = t->alpha * s + t->beta * (double)c_in[at];
      const double scale = fabs(t->alpha) * mag + fabs(t->beta * c_in[at]);
      const double e = fabs(c[at] - want) / (4.0 * (t->k + 2) * 0x1p-24 * (scale + 1e-30));
      *worst = e > *worst ? e : *worst;
    }
  free(a), free(b), free(c_in);
  *out = c;
  return outside == 0 ? 0 : -1;
}

static const case_t cases[] = {
    {128, 200, 64, 0, 0, 1, 0},    {128, 200, 64, 1, 0, -0.5f, 1}, {128, 200, 64, 0, 1, 1, 0},
    {128, 200, 64, 1, 1, 2, 0.5f}, {33, 17, 9, 0, 0, 1, 0},        {33, 17, 9, 1, 0, -0.5f, 1},
    {33, 17, 9, 0, 1, 1, 0},       {256, 96, 300, 1, 0, -0.1f, 1},
};

/* Both sides of the threshold (128 x 200 x 64 is 1.6 M multiply-adds,
 * 33 x 17 x 9 five thousand), default and FG_SGEMM=openblas: within 4 (k
 * + 2) eps of the terms' magnitude, the block alone written. */
FG_TEST(sgemm_matches_double_loop, "") {
  for (int mode = 0; mode < 2; mode++) {
    if (mode)
      setenv("FG_SGEMM", "openblas", 1);
    else
      unsetenv("FG_SGEMM");
    fgk_sgemm_start();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      float *c = NULL;
      double worst = 0;
      if (run_case(&cases[i], 7 + i, &c, &worst) != 0)
        FG_FAIL_AT("case %zu (%s): columns outside the block changed", i,
                   mode ? "openblas" : "default");
      if (!(worst <= 1))
        FG_FAIL_AT("case %zu (%s): error %.3g x the bound", i, mode ? "openblas" : "default",
                   worst);
      free(c);
    }
  }
  unsetenv("FG_SGEMM");
  fgk_sgemm_start();
}

/* FG_SGEMM=openblas is cblas_sgemm itself, bit for bit, above the
 * threshold too; and the default path is deterministic. */
FG_TEST(sgemm_openblas_mode_is_cblas, "") {
  const case_t t = {128, 200, 64, 1, 0, -0.5f, 1};
  float *d1 = NULL, *d2 = NULL, *o = NULL;
  double w;
  unsetenv("FG_SGEMM");
  fgk_sgemm_start();
  FG_REQUIRE(run_case(&t, 3, &d1, &w) == 0 && run_case(&t, 3, &d2, &w) == 0);
  const size_t bytes = sizeof(float) * (size_t)t.m * (t.n + 5);
  FG_CHECK(memcmp(d1, d2, bytes) == 0);
  setenv("FG_SGEMM", "openblas", 1);
  fgk_sgemm_start();
  FG_REQUIRE(run_case(&t, 3, &o, &w) == 0);
  /* The same inputs through cblas_sgemm directly. */
  uint64_t seed = 3;
  float *a = malloc(sizeof(float) * 128 * 64), *b = malloc(sizeof(float) * 64 * 200);
  float *c = malloc(bytes);
  FG_REQUIRE(a && b && c);
  for (int i = 0; i < 128 * 64; i++)
    a[i] = frand(&seed);
  for (int i = 0; i < 64 * 200; i++)
    b[i] = frand(&seed);
  for (int i = 0; i < 128 * 205; i++)
    c[i] = frand(&seed);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 128, 200, 64, -0.5f, a, 128, b, 200, 1,
              c + 2, 205);
  FG_CHECK(memcmp(c, o, bytes) == 0);
  free(a), free(b), free(c), free(d1), free(d2), free(o);
  unsetenv("FG_SGEMM");
  fgk_sgemm_start();
}

/* Which library takes a product: oneDNN from 2^20 multiply-adds up where
 * the library has it, OpenBLAS below it and always with FG_SGEMM=openblas
 * (so the cases above run both). */
FG_TEST(sgemm_routes_by_size_and_environment, "") {
  unsetenv("FG_SGEMM");
  fgk_sgemm_start();
#ifdef FG_TEST_HAVE_DNNL
  FG_CHECK_INT(fgk_sgemm_takes_dnnl(128, 200, 64), 1);
  FG_CHECK_INT(fgk_sgemm_takes_dnnl(1024, 1024, 1), 1);
#else
  FG_CHECK_INT(fgk_sgemm_takes_dnnl(128, 200, 64), 0);
#endif
  FG_CHECK_INT(fgk_sgemm_takes_dnnl(1024, 1023, 1), 0);
  FG_CHECK_INT(fgk_sgemm_takes_dnnl(33, 17, 9), 0);
  setenv("FG_SGEMM", "openblas", 1);
  fgk_sgemm_start();
  FG_CHECK_INT(fgk_sgemm_takes_dnnl(128, 200, 64), 0);
  unsetenv("FG_SGEMM");
  fgk_sgemm_start();
}

/* oneDNN's path sets the calling thread's OpenMP count to 1 for the call
 * only: a user's setting survives it. */
FG_TEST(sgemm_keeps_the_callers_openmp_threads, "") {
#ifdef FG_TEST_HAVE_DNNL
  unsetenv("FG_SGEMM");
  fgk_sgemm_start();
  omp_set_num_threads(3);
  const case_t t = {128, 200, 64, 0, 0, 1, 0};
  float *c = NULL;
  double w;
  FG_REQUIRE(run_case(&t, 5, &c, &w) == 0);
  FG_CHECK_INT(omp_get_max_threads(), 3);
  free(c);
#else
  FG_SKIP("built without oneDNN: every tile goes to OpenBLAS");
#endif
}
