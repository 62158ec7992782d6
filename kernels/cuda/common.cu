/* Helpers shared by the CUDA kernel families: error text, argument checks,
 * the broadcast planner (the same coalescing as kernels/cpu/common.c) and
 * byte copies and fills on the stream. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

int fgc_fail(const fg_kctx *ctx, const char *fmt, ...) {
  if (ctx && ctx->err && ctx->err_size > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, ctx->err_size, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int check_buf(const fg_kctx *ctx, const fg_kbuf *b, const char *what, int i) {
  if (b->rank < 0 || b->rank > FG_MAX_RANK)
    return fgc_fail(ctx, "%s %d has rank %d, outside [0, %d]", what, i, b->rank, FG_MAX_RANK);
  for (int d = 0; d < b->rank; d++)
    if (b->dims[d] < 0)
      return fgc_fail(ctx, "%s %d has dim %d = %lld", what, i, d, (long long)b->dims[d]);
  if (fg_dtype_size(b->dtype) == 0)
    return fgc_fail(ctx, "%s %d has unknown dtype %d", what, i, (int)b->dtype);
  if (b->data == NULL && fgc_numel(b) > 0) return fgc_fail(ctx, "%s %d has no data", what, i);
  return 0;
}

int fgc_check(const fg_kctx *ctx, int n_in, int n_out) {
  if (!ctx || !ctx->p || ((n_in > 0 || ctx->n_in > 0) && !ctx->in) || (n_out > 0 && !ctx->out))
    return fgc_fail(ctx, "kernel called without its context");
  /* A NULL stream is CUDA's default stream: allowed. */
  if (!ctx->cuda) return fgc_fail(ctx, "CUDA kernel called without a CUDA context (ctx->cuda)");
  if (ctx->n_in < n_in) return fgc_fail(ctx, "expected %d inputs, got %d", n_in, ctx->n_in);
  if (ctx->n_out < n_out) return fgc_fail(ctx, "expected %d outputs, got %d", n_out, ctx->n_out);
  for (int i = 0; i < ctx->n_in; i++)
    if (check_buf(ctx, &ctx->in[i], "input", i) != 0) return -1;
  for (int i = 0; i < n_out; i++)
    if (check_buf(ctx, &ctx->out[i], "output", i) != 0) return -1;
  return 0;
}

int fgc_need_flag(const fg_kctx *ctx) {
  if (ctx->cuda->error_flag) return 0;
  return fgc_fail(ctx, "CUDA kernel needs an error flag (ctx->cuda->error_flag) to report "
                       "bad values");
}

int fgc_launched(const fg_kctx *ctx, const char *what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return 0;
  return fgc_fail(ctx, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

int fgc_need_scratch(const fg_kctx *ctx, size_t bytes) {
  if (bytes == 0 || (ctx->cuda->scratch && ctx->cuda->scratch_bytes >= bytes)) return 0;
  return fgc_fail(ctx, "needs %zu bytes of CUDA scratch, the stream has %zu", bytes,
                  ctx->cuda->scratch ? ctx->cuda->scratch_bytes : (size_t)0);
}

int fgc_bcast_init(const fg_kctx *ctx, int n_ops, fgc_walk *w) {
  const fg_kbuf *out = &ctx->out[0];
  const int R = out->rank;
  int64_t full[3][FG_MAX_RANK];
  if (n_ops < 1 || n_ops > 3) return fgc_fail(ctx, "bad operand count %d", n_ops);
  for (int k = 0; k < n_ops; k++) {
    const fg_kbuf *in = &ctx->in[k];
    const int r = in->rank;
    if (r > R) return fgc_fail(ctx, "input %d has rank %d, above the output's rank %d", k, r, R);
    int64_t st[FG_MAX_RANK];
    int64_t s = 1;
    for (int j = r - 1; j >= 0; j--) {
      st[j] = s;
      s *= in->dims[j];
    }
    for (int i = 0; i < R; i++) {
      const int j = i - (R - r);
      const int64_t d = j >= 0 ? in->dims[j] : 1;
      if (d == out->dims[i] && d != 1)
        full[k][i] = st[j];
      else if (d == 1)
        full[k][i] = 0;
      else
        return fgc_fail(ctx, "input %d dim %d (%lld) does not broadcast to output dim %d (%lld)", k,
                        j, (long long)d, i, (long long)out->dims[i]);
    }
  }
  fgc_walk_init(w, n_ops, R, out->dims, full);
  return 0;
}

void fgc_walk_init(fgc_walk *w, int n_ops, int rank, const int64_t *dims,
                   int64_t (*strides)[FG_MAX_RANK]) {
  memset(w, 0, sizeof *w);
  w->n_ops = n_ops;
  int n = 0;
  for (int i = 0; i < rank; i++) {
    const int64_t d = dims[i];
    if (d == 1) continue;
    int merge = n > 0;
    for (int k = 0; k < n_ops && merge; k++)
      merge = w->strides[k][n - 1] == strides[k][i] * d;
    if (merge) {
      w->dims[n - 1] *= d;
      for (int k = 0; k < n_ops; k++)
        w->strides[k][n - 1] = strides[k][i];
    } else {
      w->dims[n] = d;
      for (int k = 0; k < n_ops; k++)
        w->strides[k][n] = strides[k][i];
      n++;
    }
  }
  if (n == 0) {
    w->dims[0] = 1;
    for (int k = 0; k < n_ops; k++)
      w->strides[k][0] = 0;
    n = 1;
  }
  w->rank = n;
}

int fgc_copy_bytes(const fg_kctx *ctx, void *dst, const void *src, size_t bytes) {
  if (bytes == 0 || dst == src) return 0;
  const char *s = (const char *)src;
  char *d = (char *)dst;
  /* The executor hands over either one buffer or disjoint ones. */
  if (s < d + bytes && d < s + bytes)
    return fgc_fail(ctx, "source and destination overlap without being the same buffer");
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, fgc_stream(ctx));
  if (e != cudaSuccess)
    return fgc_fail(ctx, "cudaMemcpyAsync (%zu bytes): %s", bytes, cudaGetErrorString(e));
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
    if (e != cudaSuccess) return fgc_fail(ctx, "cudaMemsetAsync: %s", cudaGetErrorString(e));
    return 0;
  }
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  if (es == 4)
    fill_kernel<uint32_t><<<blocks, FGC_THREADS, 0, s>>>((uint32_t *)dst, n, (uint32_t)bits);
  else if (es == 8)
    fill_kernel<uint64_t><<<blocks, FGC_THREADS, 0, s>>>((uint64_t *)dst, n, bits);
  else
    return fgc_fail(ctx, "unsupported element size %zu", es);
  return fgc_launched(ctx, "fill kernel");
}
