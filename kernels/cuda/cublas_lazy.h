/* cuBLAS loaded on first use (kernels/cuda/cublas_lazy.cu): the cuBLAS
 * calls flowgraph makes keep cuBLAS's names and prototypes; these two say
 * whether the library could be loaded, and why not. */
#ifndef FG_CUBLAS_LAZY_H
#define FG_CUBLAS_LAZY_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when libcublas was loaded and has every function flowgraph calls (the
 * first call tries to load it), else 0. */
int fg_cublas_available(void);
/* Why it could not be loaded ("" when it was). */
const char *fg_cublas_load_error(void);
/* The same for libcublasLt (kernels/cuda/cublaslt_lazy.cu), which
 * fused_matmul's epilogues use. */
int fg_cublaslt_available(void);
const char *fg_cublaslt_load_error(void);

#ifdef __cplusplus
}
#endif
#endif
