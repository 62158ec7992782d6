/* Multi-tensor optimizer updates on the CPU (kernels/cpu/optim_multi.c):
 * one call updates a list of variables with the same hyper-parameters, as
 * torch.optim's foreach implementations do, in one parallel loop over the
 * elements of all of them.
 *
 * For n variables (ctx->p->multi_update.n) the inputs are lists of n
 * tensors, one list after another, then the scalars (and control inputs,
 * which are not read):
 *   multi_apply_sgd:      var[n], grad[n], lr
 *   multi_apply_momentum: var[n], buf[n], grad[n], lr      (p->multi_update.momentum)
 *   multi_apply_adam:     var[n], m[n], v[n], grad[n], lr, step (p->multi_update.adam)
 * Entry k of every list must have variable k's dtype and element count.
 * The state tensors are updated in place and the one output is variable 0
 * (a separate output buffer receives a copy). Each element gets exactly the
 * arithmetic of apply_sgd, apply_momentum and apply_adam
 * (kernels/cpu/optim.c), so the results are the same bits. */
#ifndef FG_KERNELS_CPU_OPTIM_MULTI_H
#define FG_KERNELS_CPU_OPTIM_MULTI_H

#include "kernels/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The update rules, for fgk_multi_optim_check. */
enum { FGK_MULTI_SGD, FGK_MULTI_MOMENTUM, FGK_MULTI_ADAM };
/* The list lengths against the inputs, and every list entry against
 * its variable (dtype `dt`, element count); the error names the input.
 * Shared with the CUDA kernels (kernels/cuda/optim.cu). 0 or -1. */
int fgk_multi_optim_check(const fg_kctx *ctx, int rule, fg_dtype dt);

int fgk_multi_apply_sgd_f32(const fg_kctx *ctx);
int fgk_multi_apply_sgd_f64(const fg_kctx *ctx);
int fgk_multi_apply_momentum_f32(const fg_kctx *ctx);
int fgk_multi_apply_momentum_f64(const fg_kctx *ctx);
int fgk_multi_apply_adam_f32(const fg_kctx *ctx);
int fgk_multi_apply_adam_f64(const fg_kctx *ctx);

/* The same on the GPU (kernels/cuda/optim.cu; CUDA builds only): one
 * launch per 32 variables, a table of their pointers as its argument. */
int fgc_multi_apply_sgd_f32(const fg_kctx *ctx);
int fgc_multi_apply_sgd_f64(const fg_kctx *ctx);
int fgc_multi_apply_momentum_f32(const fg_kctx *ctx);
int fgc_multi_apply_momentum_f64(const fg_kctx *ctx);
int fgc_multi_apply_adam_f32(const fg_kctx *ctx);
int fgc_multi_apply_adam_f64(const fg_kctx *ctx);

#ifdef __cplusplus
}
#endif

#endif
