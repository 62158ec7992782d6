/* The training flag, dropout and dropout_grad on the GPU: one thread per
 * 4-element block (grid-stride), each computing its mask bits with the
 * CPU kernels' function (kernels/philox.h), so the mask is the CPU's bit for
 * bit; the kept elements are multiplied by the same rounded factor, so the
 * outputs are the CPU's bit for bit too. The training input is read on the
 * device: a flag fed or computed on the GPU costs no host round trip. */
#include "kernels/cuda/common.cuh"
#include "kernels/dropout.h"

__global__ void training_flag_kernel(unsigned char *out, int value) { *out = (unsigned char)value; }

int fgc_training_flag(const fg_kctx *ctx) {
  if (fgc_check(ctx, 0, 1) != 0) return -1;
  if (ctx->out[0].dtype != FG_BOOL || ctx->out[0].rank != 0)
    return fgk_fail(ctx, "output is %s of rank %d, expected a bool scalar",
                    fg_dtype_name(ctx->out[0].dtype), ctx->out[0].rank);
  training_flag_kernel<<<1, 1, 0, fgc_stream(ctx)>>>((unsigned char *)ctx->out[0].data,
                                                     ctx->run_training != 0);
  return fgc_launched(ctx, "training flag kernel");
}

template <typename T>
__global__ void dropout_kernel(const T *x, T *y, const unsigned char *training, int64_t n,
                               int64_t blocks, fg_dropout_key k, T scale) {
  const int train = *training != 0;
  FGC_GRID_STRIDE(b, blocks) {
    const int64_t e0 = b * 4, cnt = n - e0 < 4 ? n - e0 : 4;
    unsigned bits = 0xFu;
    if (train) bits = fg_dropout_keep4(k.seed, k.stream, k.step, k.replica, (uint64_t)b, k.thr);
    for (int64_t e = 0; e < cnt; e++) {
      T v = x[e0 + e];
      if (train) v = ((bits >> e) & 1u) ? fgc_mul_rn(v, scale) : (T)0;
      y[e0 + e] = v;
    }
  }
}

template <typename T> static int run_dropout(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 2, 1) != 0) return -1;
  fg_dropout_key k;
  if (fgk_dropout_check(ctx, dt, &k) != 0) return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  const int64_t blocks = (n + 3) / 4;
  dropout_kernel<T><<<fgc_blocks(blocks, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const T *)ctx->in[0].data, (T *)ctx->out[0].data, (const unsigned char *)ctx->in[1].data, n,
      blocks, k, (T)k.scale);
  return fgc_launched(ctx, "dropout kernel");
}

int fgc_dropout_f32(const fg_kctx *ctx) { return run_dropout<float>(ctx, FG_F32); }
int fgc_dropout_f64(const fg_kctx *ctx) { return run_dropout<double>(ctx, FG_F64); }
int fgc_dropout_grad_f32(const fg_kctx *ctx) { return run_dropout<float>(ctx, FG_F32); }
int fgc_dropout_grad_f64(const fg_kctx *ctx) { return run_dropout<double>(ctx, FG_F64); }
