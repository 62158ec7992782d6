/* The matmul tiles' libxsmm path (kernels/cpu/xsmm/): which tiles it takes,
 * that it writes only its block of a wider output, its values against
 * products worked by hand and against a double-precision loop, and
 * FG_LIBXSMM=0. The tiled matmul as a whole, libxsmm and OpenBLAS tiles
 * mixed, is checked in test_threadpool_kernels.c. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fgtest.h"
#include "kernels/cpu/cpu_kernels.h"

/* Built with libxsmm (tests/CMakeLists.txt) on a CPU with AVX2: the path
 * must be taken, or the tests would pass with OpenBLAS doing everything. */
static int want_xsmm(void) {
#ifdef FG_TEST_HAVE_LIBXSMM
  return __builtin_cpu_supports("avx2");
#else
  return 0;
#endif
}

static void start_xsmm(void) {
  unsetenv("FG_LIBXSMM");
  fgk_xsmm_start();
}

/* a [2,3] = [[1,2,3],[4,5,6]], b [3,2] = [[7,8],[9,10],[11,12]]:
 * a b = [[1*7+2*9+3*11, 1*8+2*10+3*12], [4*7+5*9+6*11, 4*8+5*10+6*12]]
 *     = [[58, 64], [139, 154]], by hand. Also with a given as a^T [3,2]
 * and transpose_a, with b given as b^T [2,3] and transpose_b, and in f64. */
FG_TEST(xsmm_product_by_hand, "") {
  if (!want_xsmm()) FG_SKIP("built without libxsmm or no AVX2: every tile goes to OpenBLAS");
  start_xsmm();
  const float a[6] = {1, 2, 3, 4, 5, 6}, at[6] = {1, 4, 2, 5, 3, 6};
  const float b[6] = {7, 8, 9, 10, 11, 12}, bt[6] = {7, 9, 11, 8, 10, 12};
  const float want[4] = {58, 64, 139, 154};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      float o[4] = {-1, -1, -1, -1};
      FG_CHECK_INT(fgk_xsmm_gemm_f32(ta, tb, 2, 2, 3, ta ? at : a, ta ? 2 : 3, tb ? bt : b,
                                     tb ? 3 : 2, o, 2),
                   0);
      for (int i = 0; i < 4; i++)
        FG_CHECK_NEAR(o[i], want[i], 0);
    }
  const double ad[6] = {1, 2, 3, 4, 5, 6}, bd[6] = {7, 8, 9, 10, 11, 12};
  double od[4] = {-1, -1, -1, -1};
  FG_CHECK_INT(fgk_xsmm_gemm_f64(0, 0, 2, 2, 3, ad, 3, bd, 2, od, 2), 0);
  for (int i = 0; i < 4; i++)
    FG_CHECK_NEAR(od[i], want[i], 0);
}

static float frand(uint64_t *s) {
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* Tiles of mlp_small_train's shapes and odd ones, all at most 128^3
 * multiply-adds (taken whichever kernels OpenBLAS runs), with a and b plain
 * and transposed, written at column c0 of a wider output (ldo > n) the way
 * matmul.c's tiles are: every value within 1e-6 of the terms' magnitude of
 * a double loop, and the columns around the block untouched. A transposed
 * b over 64 KB is declined (-1) and leaves the output alone. */
FG_TEST(xsmm_tiles_match_double_loop, "") {
  if (!want_xsmm()) FG_SKIP("built without libxsmm or no AVX2: every tile goes to OpenBLAS");
  start_xsmm();
  /* With b transposed, its copy's rows are padded by a cache line where
   * that fits (128 x 128 just fits; 32 x 512 fills 64 KB unpadded). */
  static const int shapes[][3] = {{32, 128, 64},  {32, 128, 128}, {128, 10, 32},
                                  {64, 128, 200}, {17, 33, 5},    {8, 32, 512}};
  uint64_t seed = 5;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], c0 = 3, ldo = n + 7;
    for (int t = 0; t < 4; t++) {
      const int ta = t & 1, tb = t >> 1;
      float *a = malloc(sizeof(float) * (size_t)m * k), *b = malloc(sizeof(float) * (size_t)k * n);
      float *o = malloc(sizeof(float) * (size_t)m * ldo);
      FG_REQUIRE(a && b && o);
      for (int i = 0; i < m * k; i++)
        a[i] = frand(&seed);
      for (int i = 0; i < k * n; i++)
        b[i] = frand(&seed);
      for (int i = 0; i < m * ldo; i++)
        o[i] = 12345.0f;
      const int lda = ta ? m : k, ldb = tb ? k : n; /* a is [k, m], b [n, k] when transposed */
      const int taken = !tb || n * k * 4 <= 65536;
      FG_CHECK_INT(fgk_xsmm_gemm_f32(ta, tb, m, n, k, a, lda, b, ldb, o + c0, ldo), taken ? 0 : -1);
      int bad = 0;
      for (int i = 0; i < m; i++)
        for (int j = 0; j < ldo; j++) {
          const float got = o[i * ldo + j];
          if (!taken || j < c0 || j >= c0 + n) {
            if (got != 12345.0f && bad++ < 3)
              FG_FAIL_AT("shape %zu ta %d tb %d: [%d,%d] outside the block changed to %g", s, ta,
                         tb, i, j, got);
            continue;
          }
          double want = 0, mag = 0;
          for (int kk = 0; kk < k; kk++) {
            const double av = ta ? a[kk * m + i] : a[i * k + kk];
            const double bv = tb ? b[(j - c0) * k + kk] : b[kk * n + (j - c0)];
            want += av * bv;
            mag += fabs(av * bv);
          }
          /* f32 rounding grows with the sum of the terms' magnitudes, not
           * with the result's (784 terms gave 6.6e-8 of it here). */
          if (!(fabs(got - want) <= 1e-6 * (1 + mag)) && bad++ < 3)
            FG_FAIL_AT("shape %zu ta %d tb %d: [%d,%d] = %.9g, want %.9g", s, ta, tb, i, j - c0,
                       got, want);
        }
      FG_CHECK_INT(bad, 0);
      free(a);
      free(b);
      free(o);
    }
  }
}

/* f64 tiles o = a b^T: with fewer rows than b's block (32 x 128 x 64: a
 * and the result copied transposed) and more (128 x 32 x 64: b copied),
 * written into a block of a wider output: within 1e-14 of the terms'
 * magnitude of a long double loop, the columns around untouched; and the
 * same bits as the plain product a (b^T) with b^T copied by hand (each
 * element the same chain of multiply-adds over k either way). */
FG_TEST(xsmm_f64_transposed_b_both_ways, "") {
  if (!want_xsmm()) FG_SKIP("built without libxsmm or no AVX2: every tile goes to OpenBLAS");
  start_xsmm();
  static const int shapes[][3] = {{32, 128, 64}, {128, 32, 64}};
  uint64_t seed = 11;
  for (int s = 0; s < 2; s++) {
    const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], c0 = 2, ldo = n + 5;
    double *a = malloc(sizeof(double) * (size_t)m * k), *b = malloc(sizeof(double) * (size_t)n * k);
    double *o = malloc(sizeof(double) * (size_t)m * ldo);
    FG_REQUIRE(a && b && o);
    for (int i = 0; i < m * k; i++)
      a[i] = frand(&seed);
    for (int i = 0; i < n * k; i++)
      b[i] = frand(&seed);
    for (int i = 0; i < m * ldo; i++)
      o[i] = -7.0;
    FG_CHECK_INT(fgk_xsmm_gemm_f64(0, 1, m, n, k, a, k, b, k, o + c0, ldo), 0);
    int bad = 0;
    for (int i = 0; i < m; i++)
      for (int j = 0; j < ldo; j++) {
        if (j < c0 || j >= c0 + n) {
          bad += o[i * ldo + j] != -7.0;
          continue;
        }
        long double want = 0, mag = 0;
        for (int kk = 0; kk < k; kk++) {
          want += (long double)a[i * k + kk] * b[(j - c0) * k + kk];
          mag += fabsl((long double)a[i * k + kk] * b[(j - c0) * k + kk]);
        }
        bad += !(fabsl(o[i * ldo + j] - want) <= 1e-14L * (1 + mag));
      }
    FG_CHECK_INT(bad, 0);
    double *bt = malloc(sizeof(double) * (size_t)n * k),
           *o2 = malloc(sizeof(double) * (size_t)m * n);
    FG_REQUIRE(bt && o2);
    for (int j = 0; j < n; j++)
      for (int kk = 0; kk < k; kk++)
        bt[kk * n + j] = b[j * k + kk];
    FG_CHECK_INT(fgk_xsmm_gemm_f64(0, 0, m, n, k, a, k, bt, n, o2, n), 0);
    int differ = 0;
    for (int i = 0; i < m; i++)
      differ += memcmp(o + i * ldo + c0, o2 + i * n, sizeof(double) * (size_t)n) != 0;
    FG_CHECK_INT(differ, 0);
    free(bt), free(o2);
    free(a), free(b), free(o);
  }
}

/* What stays with OpenBLAS: transpose_b with b's block over 64 KB, a K
 * above 4096, and everything under FG_LIBXSMM=0. A declined call leaves the
 * output alone. */
FG_TEST(xsmm_declines_what_openblas_keeps, "") {
  if (!want_xsmm()) FG_SKIP("built without libxsmm or no AVX2: every tile goes to OpenBLAS");
  start_xsmm();
  float *a = calloc(8 * 5000, sizeof(float)), *b = calloc(5000 * 8, sizeof(float));
  float o[64];
  FG_REQUIRE(a && b);
  for (int i = 0; i < 64; i++)
    o[i] = 7;
  /* b's block 8 x 2049 floats: 65568 bytes, one row over. */
  FG_CHECK_INT(fgk_xsmm_gemm_f32(0, 1, 8, 8, 2049, a, 2049, b, 2049, o, 8), -1);
  FG_CHECK_INT(fgk_xsmm_gemm_f32(1, 1, 8, 8, 2049, a, 8, b, 2049, o, 8), -1);
  FG_CHECK_NEAR(o[0], 7, 0);
  FG_CHECK_INT(fgk_xsmm_gemm_f32(0, 1, 8, 8, 2048, a, 2048, b, 2048, o, 8), 0);
  FG_CHECK_INT(fgk_xsmm_gemm_f32(0, 0, 8, 8, 5000, a, 5000, b, 8, o, 8), -1);
  FG_CHECK_INT(fgk_xsmm_gemm_f32(0, 0, 8, 8, 4096, a, 4096, b, 8, o, 8), 0);
  FG_CHECK_NEAR(o[0], 0, 0); /* taken: zeros times zeros */
  for (int i = 0; i < 64; i++)
    o[i] = 7;
  setenv("FG_LIBXSMM", "0", 1);
  fgk_xsmm_start();
  FG_CHECK_INT(fgk_xsmm_gemm_f32(0, 0, 8, 8, 8, a, 8, b, 8, o, 8), -1);
  FG_CHECK_NEAR(o[0], 7, 0);
  start_xsmm();
  FG_CHECK_INT(fgk_xsmm_gemm_f32(0, 0, 8, 8, 8, a, 8, b, 8, o, 8), 0);
  free(a);
  free(b);
}

/* Run by xsmm_large_tiles_follow_openblas in a child whose OpenBLAS runs
 * the kernels OPENBLAS_CORETYPE names: libxsmm takes large tiles only when
 * FG_TEST_XSMM_EXPECT is "all" (OpenBLAS narrower than libxsmm), small ones
 * always. Skipped when run on its own. */
FG_TEST(xsmm_large_tiles_child, "") {
  const char *expect = getenv("FG_TEST_XSMM_EXPECT");
  if (!expect) FG_SKIP("run by xsmm_large_tiles_follow_openblas");
  start_xsmm();
  const int all = strcmp(expect, "all") == 0;
  /* {m, n, k, taken with OpenBLAS at the CPU's width} */
  static const int tiles[][4] = {
      {32, 128, 64, 1}, {128, 128, 128, 1}, {32, 128, 600, 0}, {256, 2048, 256, 0}};
  for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; t++) {
    const int m = tiles[t][0], n = tiles[t][1], k = tiles[t][2];
    float *a = malloc(sizeof(float) * (size_t)m * k), *b = malloc(sizeof(float) * (size_t)k * n);
    float *o = malloc(sizeof(float) * (size_t)m * n);
    FG_REQUIRE(a && b && o);
    for (int i = 0; i < m * k; i++)
      a[i] = 0.5f;
    for (int i = 0; i < k * n; i++)
      b[i] = 2.0f;
    o[0] = o[m * n - 1] = -1;
    const int want = all || tiles[t][3] ? 0 : -1;
    FG_CHECK_INT(fgk_xsmm_gemm_f32(0, 0, m, n, k, a, k, b, n, o, n), want);
    if (want == 0) { /* each output is k times 0.5 * 2 */
      FG_CHECK_NEAR(o[0], k, 0);
      FG_CHECK_NEAR(o[m * n - 1], k, 0);
    }
    free(a);
    free(b);
    free(o);
  }
}

/* OpenBLAS's kernels are chosen when it loads (OPENBLAS_CORETYPE), so each
 * choice runs in a child: Haswell's 256-bit kernels leave large tiles to
 * libxsmm on a CPU with AVX-512; SkylakeX's 512-bit ones keep them. */
FG_TEST(xsmm_large_tiles_follow_openblas, "") {
  if (!want_xsmm()) FG_SKIP("built without libxsmm or no AVX2: every tile goes to OpenBLAS");
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  FG_REQUIRE(len > 0);
  self[len] = 0;
  const int avx512 = __builtin_cpu_supports("avx512f");
  const char *cores[] = {"Haswell", avx512 ? "SkylakeX" : NULL};
  for (int c = 0; c < 2 && cores[c]; c++) {
    const char *expect = avx512 && c == 0 ? "all" : "small";
    char cmd[4300];
    snprintf(cmd, sizeof cmd,
             "env -u FG_LIBXSMM OPENBLAS_CORETYPE=%s FG_TEST_XSMM_EXPECT=%s '%s' "
             "xsmm_large_tiles_child",
             cores[c], expect, self);
    const int rc = system(cmd);
    if (!(WIFEXITED(rc) && WEXITSTATUS(rc) == 0))
      FG_FAIL_AT("OPENBLAS_CORETYPE=%s, expecting libxsmm to take %s tiles: the child failed "
                 "(status %d)",
                 cores[c], expect, rc);
  }
}
