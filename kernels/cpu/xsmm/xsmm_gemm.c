/* Matmul tiles through libxsmm (Debian's libxsmm-dev), which generates each
 * tile shape's GEMM kernel once, for the CPU it runs on, and keeps it.
 *
 * Which tiles it takes (measured one thread per tile; the figures are in
 * docs/performance.md):
 * - OpenBLAS running kernels narrower than the CPU's (OPENBLAS_CORETYPE set
 *   to an older core, or an OpenBLAS older than the CPU): every tile
 *   libxsmm has a kernel for, since it ran all of them faster.
 * - OpenBLAS at the CPU's width: only tiles of at most XSMM_SMALL_MACS
 *   multiply-adds (128 x 128 x 128), where what a call costs beside its
 *   arithmetic counts. libxsmm was faster there, about even up to
 *   128 x 512 x 512, and far slower on larger ones: its kernels do not
 *   block for the cache.
 * - Tiles with transpose_b: libxsmm 1.17 has no kernel for row-major b^T
 *   (column-major A^T), so libxsmm_otrans first copies b's block
 *   transposed into a buffer of the thread's, when it fits (at most
 *   XSMM_TRANS_BYTES), and the kernel reads that; copy and kernel together
 *   beat OpenBLAS's transposed GEMM on such tiles. Tiles with fewer rows
 *   than that block copy a and the result instead (FGK_XSMM_BT_BY_AT).
 * - Never: K above XSMM_MAX_K.
 *
 * The choice depends on the shapes and the process's OpenBLAS alone, so
 * results stay the same for any thread count. FG_LIBXSMM=0 in the
 * environment sends every tile to OpenBLAS (to compare the two in one
 * build).
 *
 * The tests that count allocations by wrapping malloc at link time link
 * xsmm_none.c instead (tests/CMakeLists.txt): libxsmm's archive refers to
 * a hidden __real_realloc of its own, which such a link cannot resolve. */
#include <cblas.h>
#include <libxsmm.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels/cpu/cpu_kernels.h"

#define XSMM_MAX_K       4096
#define XSMM_SMALL_MACS  (1 << 21)
#define XSMM_TRANS_BYTES 65536
/* The transposed copy's rows are XSMM_TRANS_PAD bytes longer than b's
 * block is wide: at 128 floats a row (512 bytes) the stores of each block
 * the transpose writes fall into the same cache sets, and copying 128 x
 * 128 floats took 3.3 us against 1.7 us with rows of 144 (one 64-byte
 * line more). */
#define XSMM_TRANS_PAD 64

/* b's block, transposed, for a transpose_b tile: up to XSMM_TRANS_BYTES
 * of it, its rows padded while the room lasts. Per thread: tiles run on
 * the executor's threads side by side. */
static _Thread_local _Alignas(64) unsigned char xsmm_bt[XSMM_TRANS_BYTES + 8192];

/* A failed dispatch costs microseconds each time, so a
 * CPU that libxsmm cannot generate code for turns it off once, here. So
 * does one without AVX2: the vzeroupper below needs AVX. */
static int xsmm_on;
/* Whether libxsmm takes large tiles too: its kernels are wider than
 * OpenBLAS's. */
static int xsmm_large;

/* OpenBLAS's x86-64 core names with 512-bit kernels. */
static int blas_is_512(const char *core) {
  static const char *const wide[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  for (size_t i = 0; core && i < sizeof wide / sizeof wide[0]; i++)
    if (strcasecmp(core, wide[i]) == 0) return 1;
  return 0;
}

/* Once per process (matmul.c's pthread_once); tests call it again after
 * changing FG_LIBXSMM, hence the reset. */
void fgk_xsmm_start(void) {
  xsmm_on = xsmm_large = 0;
  const char *env = getenv("FG_LIBXSMM");
  if (env && strcmp(env, "0") == 0) return;
  libxsmm_init();
  const int arch = libxsmm_get_target_archid();
  if (arch < LIBXSMM_X86_AVX2) return;
  const libxsmm_blasint n = 16;
  const int flags = LIBXSMM_GEMM_FLAG_NONE, pf = LIBXSMM_GEMM_PREFETCH_NONE;
  const float alpha = 1, beta = 0;
  xsmm_on = libxsmm_smmdispatch(n, n, n, &n, &n, &n, &alpha, &beta, &flags, &pf) != NULL;
  xsmm_large = arch >= LIBXSMM_X86_AVX512 && !blas_is_512(openblas_get_corename());
}

/* o = a b^T with fewer rows than columns (m (k + n) < n k: a backward
 * pass's input gradient dz w^T, w square or wide): rather than copy all
 * of b transposed, copy a transposed (m x k), compute o^T = b a^T (n x m)
 * with the plain kernel into the buffer's other part, and transpose that
 * into o: m (k + n) elements moved instead of n k. mlp_small_train's
 * 32 x 128 x 128 input gradient took 8.6 us the one way and 6.6 the
 * other (one thread, hot); each element is the same chain of multiply-
 * adds over k either way. -1 when the parts do not fit (the caller then
 * copies b). */
#define FGK_XSMM_BT_BY_AT(name, T, DISPATCH, FN)                                                   \
  static int name(int64_t m, int64_t n, int64_t k, const T *a, int64_t lda, const T *b,            \
                  int64_t ldb, T *o, int64_t ldo) {                                                \
    int64_t ldm = m + XSMM_TRANS_PAD / (int64_t)sizeof(T);                                         \
    if ((double)ldm * (double)(k + n) * sizeof(T) > sizeof xsmm_bt) ldm = m;                       \
    if ((double)ldm * (double)(k + n) * sizeof(T) > sizeof xsmm_bt) return -1;                     \
    T *at = (T *)xsmm_bt, *ot = at + ldm * k;                                                      \
    libxsmm_otrans(at, a, sizeof(T), (libxsmm_blasint)k, (libxsmm_blasint)m, (libxsmm_blasint)lda, \
                   (libxsmm_blasint)ldm);                                                          \
    const int flags = LIBXSMM_GEMM_FLAG_NONE, pf = LIBXSMM_GEMM_PREFETCH_NONE;                     \
    const T alpha = 1, beta = 0;                                                                   \
    const libxsmm_blasint M = (libxsmm_blasint)m, N = (libxsmm_blasint)n, K = (libxsmm_blasint)k,  \
                          ldA = (libxsmm_blasint)ldm, ldB = (libxsmm_blasint)ldb, ldC = ldA;       \
    FN f = DISPATCH(M, N, K, &ldA, &ldB, &ldC, &alpha, &beta, &flags, &pf);                        \
    if (!f) {                                                                                      \
      __asm__ volatile("vzeroupper"); /* after the copy's wide stores */                           \
      return -1;                                                                                   \
    }                                                                                              \
    f(at, b, ot);                                                                                  \
    libxsmm_otrans(o, ot, sizeof(T), M, N, ldC, (libxsmm_blasint)ldo);                             \
    __asm__ volatile("vzeroupper");                                                                \
    return 0;                                                                                      \
  }

FGK_XSMM_BT_BY_AT(fgk_xsmm_gemm_f32_bt_by_at, float, libxsmm_smmdispatch, libxsmm_smmfunction)
FGK_XSMM_BT_BY_AT(fgk_xsmm_gemm_f64_bt_by_at, double, libxsmm_dmmdispatch, libxsmm_dmmfunction)

/* Row-major o = op(a) op(b) is column-major o^T = op(b)^T op(a)^T: b comes
 * first, and a's transpose is libxsmm's TRANS_B.
 *
 * The generated kernels use the 512-bit registers and return with their
 * upper halves dirty. The SSE code compiled for the rest of the step then
 * ran about 3 times as slow (the AVX-SSE transition penalty), so
 * vzeroupper clears them after each call. */
#define FGK_XSMM(name, T, DISPATCH, FN)                                                            \
  int name(int ta, int tb, int64_t m, int64_t n, int64_t k, const T *a, int64_t lda, const T *b,   \
           int64_t ldb, T *o, int64_t ldo) {                                                       \
    if (!xsmm_on || k > XSMM_MAX_K || m > INT32_MAX || n > INT32_MAX || lda > INT32_MAX ||         \
        ldb > INT32_MAX || ldo > INT32_MAX)                                                        \
      return -1;                                                                                   \
    if (!xsmm_large && (double)m * (double)n * (double)k > XSMM_SMALL_MACS) return -1;             \
    if (tb && !ta && (double)n * (double)k * sizeof(T) <= XSMM_TRANS_BYTES &&                      \
        m * (k + n) < n * k && name##_bt_by_at(m, n, k, a, lda, b, ldb, o, ldo) == 0)              \
      return 0;                                                                                    \
    if (tb) {                                                                                      \
      if ((double)n * (double)k * sizeof(T) > XSMM_TRANS_BYTES) return -1;                         \
      /* b's rows [n, k] (ld ldb) are column-major k x n; the copy is n x k: b^T [k, n], its       \
       * rows one cache line longer than n where that fits (XSMM_TRANS_PAD). */                    \
      int64_t ldt = n + XSMM_TRANS_PAD / (int64_t)sizeof(T);                                       \
      if ((double)ldt * (double)k * sizeof(T) > sizeof xsmm_bt) ldt = n;                           \
      libxsmm_otrans(xsmm_bt, b, sizeof(T), (libxsmm_blasint)k, (libxsmm_blasint)n,                \
                     (libxsmm_blasint)ldb, (libxsmm_blasint)ldt);                                  \
      b = (const T *)xsmm_bt;                                                                      \
      ldb = ldt;                                                                                   \
    }                                                                                              \
    const int flags = ta ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE;                     \
    const int pf = LIBXSMM_GEMM_PREFETCH_NONE;                                                     \
    const T alpha = 1, beta = 0;                                                                   \
    const libxsmm_blasint M = (libxsmm_blasint)n, N = (libxsmm_blasint)m, K = (libxsmm_blasint)k,  \
                          ldA = (libxsmm_blasint)ldb, ldB = (libxsmm_blasint)lda,                  \
                          ldC = (libxsmm_blasint)ldo;                                              \
    FN f = DISPATCH(M, N, K, &ldA, &ldB, &ldC, &alpha, &beta, &flags, &pf);                        \
    if (!f) return -1;                                                                             \
    f(b, a, o);                                                                                    \
    __asm__ volatile("vzeroupper");                                                                \
    return 0;                                                                                      \
  }

FGK_XSMM(fgk_xsmm_gemm_f32, float, libxsmm_smmdispatch, libxsmm_smmfunction)
FGK_XSMM(fgk_xsmm_gemm_f64, double, libxsmm_dmmdispatch, libxsmm_dmmfunction)
