/* The f32 GEMM of one matmul tile (kernels/cpu/sgemm.c): oneDNN's sgemm on
 * the calling thread, or OpenBLAS's. */
#ifndef FG_KERNELS_CPU_SGEMM_H
#define FG_KERNELS_CPU_SGEMM_H

#include <cblas.h>
#include <stdint.h>

/* Once per process, before the first fgk_sgemm: reads FG_SGEMM. */
void fgk_sgemm_start(void);
/* 1 when fgk_sgemm gives an m x n x k product to oneDNN, 0 to OpenBLAS. */
int fgk_sgemm_takes_dnnl(int64_t m, int64_t n, int64_t k);
/* cblas_sgemm's contract, on the calling thread alone. */
void fgk_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n,
               blasint k, float alpha, const float *a, blasint lda, const float *b, blasint ldb,
               float beta, float *c, blasint ldc);

#endif
