/* logical_not, logical_and and logical_or on bool, as kernels/cpu/logical.c:
 * any nonzero byte is true, the output is 0 or 1, only bool operands are
 * accepted (fgk_logical_check) whatever the registry key. The binary ones
 * walk the coalesced broadcast (fgc_walk); bool traffic is small next to
 * the float ops around it, so there is no vectorised path. */
#include "kernels/cuda/common.cuh"

__global__ void logical_not_kernel(const uint8_t *x, uint8_t *y, int64_t n) {
  FGC_GRID_STRIDE(i, n) { y[i] = (uint8_t)(x[i] == 0); }
}

/* op 0: and, 1: or. */
__global__ void logical_bin_kernel(const uint8_t *a, const uint8_t *b, uint8_t *o, int64_t n,
                                   fgc_walk w, int op) {
  FGC_GRID_STRIDE(i, n) {
    int64_t off[3];
    fgc_walk_at<2>(w, i, off);
    const int x = a[off[0]] != 0, y = b[off[1]] != 0;
    o[i] = (uint8_t)(op == 0 ? (x & y) : (x | y));
  }
}

int fgc_logical_not(const fg_kctx *ctx) {
  if (fgc_check(ctx, 1, 1) != 0 || fgk_logical_check(ctx, 1) != 0) return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (fgk_numel(&ctx->in[0]) != n)
    return fgk_fail(ctx, "input has %lld elements, output %lld", (long long)fgk_numel(&ctx->in[0]),
                    (long long)n);
  if (n == 0) return 0;
  logical_not_kernel<<<fgc_blocks(n, FGC_THREADS * 4), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const uint8_t *)ctx->in[0].data, (uint8_t *)ctx->out[0].data, n);
  return fgc_launched(ctx, "logical_not kernel");
}

static int logical_bin(const fg_kctx *ctx, int op) {
  if (fgc_check(ctx, 2, 1) != 0 || fgk_logical_check(ctx, 2) != 0) return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  fgc_walk w;
  if (fgc_bcast_init(ctx, 2, &w) != 0) return -1;
  logical_bin_kernel<<<fgc_blocks(n, FGC_THREADS * 4), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const uint8_t *)ctx->in[0].data, (const uint8_t *)ctx->in[1].data,
      (uint8_t *)ctx->out[0].data, n, w, op);
  return fgc_launched(ctx, op == 0 ? "logical_and kernel" : "logical_or kernel");
}

int fgc_logical_and(const fg_kctx *ctx) { return logical_bin(ctx, 0); }
int fgc_logical_or(const fg_kctx *ctx) { return logical_bin(ctx, 1); }
