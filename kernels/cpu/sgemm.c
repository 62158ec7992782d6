/* The f32 GEMM of one matmul tile (kernels/cpu/matmul.c), with
 * cblas_sgemm's signature: row-major c = alpha op(a) op(b) + beta c on
 * the calling thread.
 *
 * oneDNN's sgemm (its JIT kernels for the CPU it runs on) where the
 * library is built with oneDNN, OpenBLAS's otherwise. One thread per tile
 * on the 2-core AVX-512 VM of docs/performance.md, oneDNN's against
 * OpenBLAS's: 128 x 784 x 256 in 252 against 285 us, the 2048 x 256 x
 * 2048 weight gradient in 10.1 against 11.4 ms, and two tiles side by
 * side (each core one) 5 to 40% faster on the MLPs' products. libxsmm
 * still takes the smallest tiles first (kernels/cpu/xsmm/), and OpenBLAS
 * the small ones libxsmm declines (DNNL_MIN_MACS).
 *
 * oneDNN sizes its OpenMP team from the calling thread's OpenMP thread
 * count, which is set to 1 around the call and restored: the executor's
 * pool supplies the parallelism, one tile per call. FG_SGEMM=openblas in
 * the environment (read once, with the rest of matmul.c's set-up)
 * selects OpenBLAS, to compare the two in one build. Either is
 * deterministic at one thread, and the choice depends on the build and
 * the environment alone, so results do not depend on the thread count. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/sgemm.h"

#ifdef FG_HAVE_DNNL
#include <dnnl.h>
#include <omp.h>

static int use_dnnl = 1;
/* Below about a million multiply-adds oneDNN's call costs more than its
 * kernel saves (128 x 128 x 32 with beta 1: 5.7 against 5.1 us; 128 x 128
 * x 128: 20.0 against 24.2 us), and OpenBLAS does the tile. */
#define DNNL_MIN_MACS (1 << 20)

void fgk_sgemm_start(void) {
  const char *e = getenv("FG_SGEMM");
  use_dnnl = !(e && strcmp(e, "openblas") == 0);
}

int fgk_sgemm_takes_dnnl(int64_t m, int64_t n, int64_t k) {
  return use_dnnl && (double)m * (double)n * (double)k >= DNNL_MIN_MACS;
}

void fgk_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n,
               blasint k, float alpha, const float *a, blasint lda, const float *b, blasint ldb,
               float beta, float *c, blasint ldc) {
  if (order == CblasRowMajor && fgk_sgemm_takes_dnnl(m, n, k)) {
    const int prev = omp_get_max_threads();
    if (prev != 1) omp_set_num_threads(1);
    const dnnl_status_t st = dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N',
                                        m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (prev != 1) omp_set_num_threads(prev);
    /* oneDNN checks its arguments and allocates its packing buffers
     * before it writes c; where either fails, OpenBLAS does the tile. */
    if (st == dnnl_success) return;
  }
  cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#else
void fgk_sgemm_start(void) {}

int fgk_sgemm_takes_dnnl(int64_t m, int64_t n, int64_t k) {
  (void)m, (void)n, (void)k;
  return 0;
}

void fgk_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n,
               blasint k, float alpha, const float *a, blasint lda, const float *b, blasint ldb,
               float beta, float *c, blasint ldc) {
  cblas_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
#endif
