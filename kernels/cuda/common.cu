/* Helpers shared by the CUDA kernel families: argument checks and byte
 * copies and fills on the stream. The error text and the broadcast planner
 * are kernels/cpu/common.c's (kernels/kernel_shape.h). */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

int fgc_check(const fg_kctx *ctx, int n_in, int n_out) {
  /* The context test comes before the CUDA one, as it always has, so a call
   * without either still says "without its context"; fgk_check repeats it
   * harmlessly and does the rest (counts, ranks, dims, dtypes, data). */
  if (!ctx || !ctx->p || ((n_in > 0 || ctx->n_in > 0) && !ctx->in) || (n_out > 0 && !ctx->out))
    return fgk_fail(ctx, "kernel called without its context");
  /* A NULL stream is CUDA's default stream: allowed. */
  if (!ctx->cuda) return fgk_fail(ctx, "CUDA kernel called without a CUDA context (ctx->cuda)");
  return fgk_check(ctx, n_in, n_out);
}

int fgc_need_flag(const fg_kctx *ctx) {
  if (ctx->cuda->error_flag) return 0;
  return fgk_fail(ctx, "CUDA kernel needs an error flag (ctx->cuda->error_flag) to report "
                       "bad values");
}

int fgc_launched(const fg_kctx *ctx, const char *what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return 0;
  return fgk_fail(ctx, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

int fgc_need_scratch(const fg_kctx *ctx, size_t bytes) {
  if (bytes == 0 || (ctx->cuda->scratch && ctx->cuda->scratch_bytes >= bytes)) return 0;
  return fgk_fail(ctx, "needs %zu bytes of CUDA scratch, the stream has %zu", bytes,
                  ctx->cuda->scratch ? ctx->cuda->scratch_bytes : (size_t)0);
}

int fgc_copy_bytes(const fg_kctx *ctx, void *dst, const void *src, size_t bytes) {
  if (bytes == 0 || dst == src) return 0;
  const char *s = (const char *)src;
  char *d = (char *)dst;
  /* The executor hands over either one buffer or disjoint ones. */
  if (s < d + bytes && d < s + bytes)
    return fgk_fail(ctx, "source and destination overlap without being the same buffer");
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, fgc_stream(ctx));
  if (e != cudaSuccess)
    return fgk_fail(ctx, "cudaMemcpyAsync (%zu bytes): %s", bytes, cudaGetErrorString(e));
  return 0;
}

template <typename W> __global__ void fill_kernel(W *dst, int64_t n, W v) {
  FGC_GRID_STRIDE(i, n) { dst[i] = v; }
}

int fgc_fill_bits(const fg_kctx *ctx, void *dst, int64_t n, size_t es, uint64_t bits) {
  if (n <= 0) return 0;
  cudaStream_t s = fgc_stream(ctx);
  if (bits == 0 || es == 1) {
    const cudaError_t e = cudaMemsetAsync(dst, (int)(bits & 0xff), (size_t)n * es, s);
    if (e != cudaSuccess) return fgk_fail(ctx, "cudaMemsetAsync: %s", cudaGetErrorString(e));
    return 0;
  }
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  if (es == 4)
    fill_kernel<uint32_t><<<blocks, FGC_THREADS, 0, s>>>((uint32_t *)dst, n, (uint32_t)bits);
  else if (es == 8)
    fill_kernel<uint64_t><<<blocks, FGC_THREADS, 0, s>>>((uint64_t *)dst, n, bits);
  else
    return fgk_fail(ctx, "unsupported element size %zu", es);
  return fgc_launched(ctx, "fill kernel");
}
