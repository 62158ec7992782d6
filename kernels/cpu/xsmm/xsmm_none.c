/* Without libxsmm (not installed, FG_LIBXSMM=OFF, or the tests that wrap
 * malloc at link time; see xsmm_gemm.c): every matmul tile goes to
 * OpenBLAS. */
#include "kernels/cpu/cpu_kernels.h"

void fgk_xsmm_start(void) {}

int fgk_xsmm_gemm_f32(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *o, int64_t ldo) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)o;
  (void)ldo;
  return -1;
}

int fgk_xsmm_gemm_f64(int ta, int tb, int64_t m, int64_t n, int64_t k, const double *a, int64_t lda,
                      const double *b, int64_t ldb, double *o, int64_t ldo) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)o;
  (void)ldo;
  return -1;
}
