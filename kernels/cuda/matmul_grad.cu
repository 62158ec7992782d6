/* The grad_epilogue pass's nodes on the GPU.
 *
 * fused_matmul_relu_grad: the cuBLAS product of matmul.cu, then one kernel
 * that keeps each product element where relu's output y > 0 and writes
 * +0.0 elsewhere (select(greater(y, 0), product, 0) element by element:
 * NaN and -0.0 are not > 0). cuBLASLt's DRELU epilogue would apply the
 * mask inside the GEMM, but it reads the mask as the bit-packed aux
 * buffer a RELU_AUX forward writes in its own layout; the graph's forward
 * keeps y, not that buffer, and making it from y is a kernel over y of
 * its own, which is what the mask kernel already is.
 *
 * matmul_bias_grad: dw = a^T @ dz and db = the sum of dz's rows. f32 is one
 * cuBLASLt matmul with CUBLASLT_EPILOGUE_BGRADA: in matmul.cu's row-major
 * mapping cuBLASLt computes dw^T = dz^T a with dz as its A (N x R, not
 * transposed), and BGRADA sums A over the GEMM's k (R) into db, one entry
 * per row of dw^T: per column of dz. The order of that sum is cuBLASLt's
 * (db agrees with sum_to's within rounding). Everything else (f64, no
 * libcublasLt, a shape it declines) is matmul's product with transpose_a,
 * then sum_to's reduction. */
#include "kernels/cuda/common.cuh"

/* o[i] = y[i] > 0 ? o[i] : 0 over total elements. */
template <typename T> __global__ void relu_mask_kernel(T *o, const T *y, int64_t total) {
  FGC_GRID_STRIDE(i, total) { o[i] = y[i] > (T)0 ? o[i] : (T)0; }
}

template <typename T> static int fused_matmul_relu_grad(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 3, 1) != 0 || fgk_mm_check_mask(ctx, dt) != 0) return -1;
  /* ctx->p holds matmul's transposes (the op parses them into that
   * member), so matmul's kernel runs on inputs 0 and 1 as they are. */
  const int rc = dt == FG_F64 ? fgc_matmul_f64(ctx) : fgc_matmul_f32(ctx);
  const int64_t total = fgk_numel(&ctx->out[0]);
  if (rc != 0 || total == 0) return rc;
  relu_mask_kernel<T><<<fgc_blocks(total, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (T *)ctx->out[0].data, (const T *)ctx->in[2].data, total);
  return fgc_launched(ctx, "fused_matmul_relu_grad mask kernel");
}

int fgc_fused_matmul_relu_grad_f32(const fg_kctx *ctx) {
  return fused_matmul_relu_grad<float>(ctx, FG_F32);
}
int fgc_fused_matmul_relu_grad_f64(const fg_kctx *ctx) {
  return fused_matmul_relu_grad<double>(ctx, FG_F64);
}

static int matmul_bias_grad(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 2, 2) != 0 || fgk_matmul_bias_grad_check(ctx, dt) != 0) return -1;
  const int64_t R = ctx->in[0].dims[0], K = ctx->in[0].dims[1], N = ctx->in[1].dims[1];
  if (dt == FG_F32 && R > 0 && K > 0 && N > 0) {
    const int rc = fgc_lt_matmul(ctx, K, N, R, 1, 0, FGC_LT_BGRADA, ctx->in[0].data,
                                 ctx->in[1].data, ctx->out[1].data, ctx->out[0].data);
    if (rc <= 0) return rc;
  }
  return dt == FG_F64 ? fgk_matmul_bias_grad_split(ctx, fgc_matmul_f64, fgc_sum_to_f64)
                      : fgk_matmul_bias_grad_split(ctx, fgc_matmul_f32, fgc_sum_to_f32);
}

int fgc_matmul_bias_grad_f32(const fg_kctx *ctx) { return matmul_bias_grad(ctx, FG_F32); }
int fgc_matmul_bias_grad_f64(const fg_kctx *ctx) { return matmul_bias_grad(ctx, FG_F64); }
