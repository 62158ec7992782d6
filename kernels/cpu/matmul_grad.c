/* matmul_bias_grad (graph/infer_matmul_grad.c): dw = a^T @ dz into output
 * 0 and db = the sum of dz's rows into output 1, for a [R, K], dz [R, N].
 *
 * On the CPU it is the two kernels of the graph it replaces, one after the
 * other: matmul's with transpose_a (the same tiles and GEMM calls), then
 * sum_to's reduce_sum over dz's rows (the same order and accumulators), so
 * the bits are those of matmul(a, dz, transpose_a) and sum_to(dz, [N]).
 * Only the GPU has one library call for both (cuBLASLt's bias-gradient
 * epilogue, kernels/cuda/matmul_grad.cu). */
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

/* The shapes, for a direct call that skipped inference. */
int fgk_matmul_bias_grad_check(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_check(ctx, 2, 2) != 0) return -1;
  const fg_kbuf *a = &ctx->in[0], *dz = &ctx->in[1], *dw = &ctx->out[0], *db = &ctx->out[1];
  if (a->dtype != dt || dz->dtype != dt || dw->dtype != dt || db->dtype != dt)
    return fgk_fail(ctx, "expected %s inputs and outputs, got a %s, dz %s, dw %s, db %s",
                    fg_dtype_name(dt), fg_dtype_name(a->dtype), fg_dtype_name(dz->dtype),
                    fg_dtype_name(dw->dtype), fg_dtype_name(db->dtype));
  if (a->rank != 2 || dz->rank != 2 || a->dims[0] != dz->dims[0])
    return fgk_fail(ctx,
                    "input 0 (a) of rank %d and input 1 (dz) of rank %d must be [R, K] and "
                    "[R, N] with one R",
                    a->rank, dz->rank);
  if (dw->rank != 2 || dw->dims[0] != a->dims[1] || dw->dims[1] != dz->dims[1] || db->rank != 1 ||
      db->dims[0] != dz->dims[1])
    return fgk_fail(ctx, "outputs must be dw [%lld, %lld] and db [%lld]", (long long)a->dims[1],
                    (long long)dz->dims[1], (long long)dz->dims[1]);
  return 0;
}

int fgk_matmul_bias_grad_split(const fg_kctx *ctx, fg_kernel_fn matmul, fg_kernel_fn sum_to) {
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.matmul.transpose_a = 1;
  fg_kctx mm = *ctx;
  mm.n_out = 1;
  mm.p = &p;
  if (matmul(&mm) != 0) return -1;
  /* sum_to(dz, db): input dz, output db. */
  fg_kctx red = *ctx;
  red.in = &ctx->in[1], red.n_in = 1;
  red.out = &ctx->out[1], red.n_out = 1;
  return sum_to(&red);
}

static int matmul_bias_grad(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_matmul_bias_grad_check(ctx, dt) != 0) return -1;
  return dt == FG_F64 ? fgk_matmul_bias_grad_split(ctx, fgk_matmul_f64, fgk_sum_to_f64)
                      : fgk_matmul_bias_grad_split(ctx, fgk_matmul_f32, fgk_sum_to_f32);
}

int fgk_matmul_bias_grad_f32(const fg_kctx *ctx) { return matmul_bias_grad(ctx, FG_F32); }
int fgk_matmul_bias_grad_f64(const fg_kctx *ctx) { return matmul_bias_grad(ctx, FG_F64); }
