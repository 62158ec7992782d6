/* batch_norm's passes as kernels/cpu/norm.c runs them, for
 * sync_batch_norm (kernels/cpu/norm_sync.c), which all-reduces the sums
 * between them: one loop body (norm_body.h) serves both ops. */
#ifndef FG_KERNELS_CPU_NORM_SYNC_H
#define FG_KERNELS_CPU_NORM_SYNC_H

#include "kernels/cpu/cpu_kernels.h"

/* batch_norm's kernel; gs (3 C doubles: mean, inv_std, var per channel)
 * replaces the batch's own statistics when not NULL. */
int fgk_bn_forward(const fg_kctx *ctx, fg_dtype dt, const double *gs);
/* batch_norm_grad's kernel; with gd (2 C doubles: sum dy / M and sum dy
 * xhat / M per channel, M every replica's count) dx takes those means, and
 * dscale, dshift (which the caller wrote) are left alone. */
int fgk_bn_backward(const fg_kctx *ctx, fg_dtype dt, const double *gd);
/* This replica's sums per channel into part, in batch_norm's order. The
 * forward (grad 0): sum x, or with gm (C means) sum (x - gm)^2. The
 * gradient (grad 1): part[c] = sum dy, part[C + c] = sum dy xhat. Inputs
 * checked by fgk_norm_check, whose geometry g is. */
void fgk_bn_partials(const fg_kctx *ctx, fg_dtype dt, int grad, const fgk_norm_geom *g,
                     const double *gm, double *part);

#endif
