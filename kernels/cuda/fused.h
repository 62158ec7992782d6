/* The fused_elementwise CUDA kernel (kernels/cuda/fused.cu), callable from
 * C: the registry rows of common.cuh (fgc_fused_f32, fgc_fused_f64) and the
 * tests use these. Declared in every build; defined in CUDA builds only. */
#ifndef FG_CUDA_FUSED_H
#define FG_CUDA_FUSED_H

#include "kernels/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs ctx->p->fused over the step's buffers on its stream: the kernel
 * the prepare hook compiled (ctx->state), or, without a state (a direct
 * call), the one it makes for this call. The output is f32 or f64. */
int fgc_fused_elementwise(const fg_kctx *ctx);

/* The prepare hook: checks the program against the shapes, generates the
 * source, and compiles it with NVRTC for the current device (or takes it
 * from the process's or the disk's cache). Errors, NVRTC's log included,
 * go to ctx->err. */
int fgc_fused_prepare(const fg_kctx *ctx, int threads, void **state);
void fgc_fused_release(void *state);

/* Kernels this process has loaded from CUBINs (the in-process cache's
 * size), for the tests. */
int fgc_fused_loaded(void);

#ifdef __cplusplus
}
#endif
#endif
