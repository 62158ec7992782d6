/* Data movement on the GPU: transpose, slice, slice_grad, broadcast_like,
 * concat, gather, gather_grad and one_hot. Apart from gather_grad's sums
 * and one_hot's ones these only move bytes, so one kernel per element size
 * (1, 4, 8 bytes) serves every dtype.
 *
 * Out-of-range indices cannot fail the call (the host never sees them):
 * they are recorded in the error flag (FG_CUDA_ERR_INDEX) with position,
 * value and limit, and the affected output elements are left 0. */
#include <string.h>

#include "kernels/cuda/common.cuh"

/* ---- strided copies ----------------------------------------------------- */

/* dst[off1] = src[off0] over the walk's C-order index (operand 0: source
 * strides, operand 1: destination strides). */
template <typename W>
__global__ void walk_copy_kernel(const W *src, W *dst, int64_t n, fgc_walk w) {
  FGC_GRID_STRIDE(i, n) {
    int64_t off[3];
    fgc_walk_at<2>(w, i, off);
    dst[off[1]] = src[off[0]];
  }
}

/* Tiled 2-D transpose of each of `batch` matrices: src is [batch][R][C],
 * dst [batch][C][R]; a 32 x 33 shared tile keeps both sides coalesced. */
template <typename W>
__global__ void transpose_tile_kernel(const W *src, W *dst, int64_t R, int64_t C, int64_t tiles_r,
                                      int64_t tiles_c, int64_t n_tiles) {
  __shared__ W tile[32][33];
  for (int64_t t = blockIdx.x; t < n_tiles; t += gridDim.x) {
    const int64_t b = t / (tiles_r * tiles_c), rem = t - b * tiles_r * tiles_c;
    const int64_t r0 = (rem / tiles_c) * 32, c0 = (rem % tiles_c) * 32;
    const W *s = src + b * R * C;
    W *d = dst + b * R * C;
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
      const int64_t r = r0 + k, c = c0 + threadIdx.x;
      if (r < R && c < C) tile[k][threadIdx.x] = s[r * C + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
      const int64_t c = c0 + k, r = r0 + threadIdx.x;
      if (r < R && c < C) d[c * R + r] = tile[threadIdx.x][k];
    }
    __syncthreads();
  }
}

static int walk_copy(const fg_kctx *ctx, size_t es, const void *src, void *dst, int64_t n,
                     const fgc_walk &w) {
  if (n == 0) return 0;
  cudaStream_t s = fgc_stream(ctx);
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  switch (es) {
  case 1:
    walk_copy_kernel<uint8_t>
        <<<blocks, FGC_THREADS, 0, s>>>((const uint8_t *)src, (uint8_t *)dst, n, w);
    break;
  case 4:
    walk_copy_kernel<uint32_t>
        <<<blocks, FGC_THREADS, 0, s>>>((const uint32_t *)src, (uint32_t *)dst, n, w);
    break;
  case 8:
    walk_copy_kernel<uint64_t>
        <<<blocks, FGC_THREADS, 0, s>>>((const uint64_t *)src, (uint64_t *)dst, n, w);
    break;
  default: return fgk_fail(ctx, "unsupported element size %zu", es);
  }
  return fgc_launched(ctx, "strided copy kernel");
}

static void contiguous_strides(int rank, const int64_t *dims, int64_t *st) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= dims[i];
  }
}

/* A transpose whose coalesced walk swaps the last two dims of contiguous
 * (batched) matrices: out walk dims [B?, C, R] with source strides
 * [R*C, 1, C]. Returns 1 when launched (or failed: *rc set), 0 otherwise. */
static int try_tiled_transpose(const fg_kctx *ctx, size_t es, const fgc_walk &w, int *rc) {
  if (w.rank != 2 && w.rank != 3) return 0;
  const int o = w.rank - 2;
  const int64_t C = w.dims[o], R = w.dims[o + 1]; /* out is [C][R], src [R][C] */
  if (w.strides[0][o] != 1 || w.strides[0][o + 1] != C) return 0;
  if (w.rank == 3 && w.strides[0][0] != R * C) return 0;
  const int64_t batch = w.rank == 3 ? w.dims[0] : 1;
  const int64_t tr = (R + 31) / 32, tc = (C + 31) / 32, nt = batch * tr * tc;
  const unsigned blocks = (unsigned)(nt < 65536 ? nt : 65536);
  const dim3 threads(32, 8);
  cudaStream_t s = fgc_stream(ctx);
  const void *src = ctx->in[0].data;
  void *dst = ctx->out[0].data;
  switch (es) {
  case 1:
    transpose_tile_kernel<uint8_t>
        <<<blocks, threads, 0, s>>>((const uint8_t *)src, (uint8_t *)dst, R, C, tr, tc, nt);
    break;
  case 4:
    transpose_tile_kernel<uint32_t>
        <<<blocks, threads, 0, s>>>((const uint32_t *)src, (uint32_t *)dst, R, C, tr, tc, nt);
    break;
  case 8:
    transpose_tile_kernel<uint64_t>
        <<<blocks, threads, 0, s>>>((const uint64_t *)src, (uint64_t *)dst, R, C, tr, tc, nt);
    break;
  default: *rc = fgk_fail(ctx, "unsupported element size %zu", es); return 1;
  }
  *rc = fgc_launched(ctx, "transpose kernel");
  return 1;
}

int fgc_transpose(const fg_kctx *ctx) {
  int64_t full[2][FG_MAX_RANK];
  if (fgc_check(ctx, 1, 1) != 0 || fgk_transpose_check(ctx, full[0]) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  const int R = in->rank;
  contiguous_strides(R, out->dims, full[1]);
  const int64_t n = fgk_numel(out);
  if (n == 0) return 0;
  const size_t es = fgc_esize(out->dtype);
  fgc_walk w;
  fgc_walk_init(&w, 2, R, out->dims, full);
  int rc = 0;
  if (try_tiled_transpose(ctx, es, w, &rc)) return rc;
  return walk_copy(ctx, es, in->data, out->data, n, w);
}

int fgc_slice(const fg_kctx *ctx) {
  int64_t full[2][FG_MAX_RANK], base;
  if (fgc_check(ctx, 1, 1) != 0 || fgk_slice_check(ctx, &base, full[0]) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  const int R = in->rank;
  contiguous_strides(R, out->dims, full[1]);
  const int64_t n = fgk_numel(out);
  if (n == 0) return 0;
  const size_t es = fgc_esize(out->dtype);
  fgc_walk w;
  fgc_walk_init(&w, 2, R, out->dims, full);
  return walk_copy(ctx, es, (const char *)in->data + (size_t)base * es, out->data, n, w);
}

/* out (like's shape) = zeros with dy at p->begin. */
int fgc_slice_grad(const fg_kctx *ctx) {
  int64_t full[2][FG_MAX_RANK], base;
  if (fgc_check(ctx, 1, 1) != 0 || fgk_slice_grad_check(ctx, &base, full[1]) != 0) return -1;
  const fg_kbuf *dy = &ctx->in[0], *out = &ctx->out[0];
  const int R = out->rank;
  const size_t es = fgc_esize(out->dtype);
  contiguous_strides(R, dy->dims, full[0]);
  const int64_t n = fgk_numel(out);
  if (n == 0) return 0;
  if (fgc_fill_bits(ctx, out->data, n, es, 0) != 0) return -1;
  const int64_t nd = fgk_numel(dy);
  if (nd == 0) return 0;
  fgc_walk w;
  fgc_walk_init(&w, 2, R, dy->dims, full);
  return walk_copy(ctx, es, dy->data, (char *)out->data + (size_t)base * es, nd, w);
}

/* out (like's shape) = in[0] broadcast one way. */
int fgc_broadcast_like(const fg_kctx *ctx) {
  if (fgc_check(ctx, 1, 1) != 0 || fgk_same_dtypes(ctx, 1) != 0) return -1;
  const fg_kbuf *out = &ctx->out[0];
  const int64_t n = fgk_numel(out);
  if (n == 0) return 0;
  fgc_walk b;
  if (fgc_bcast_init(ctx, 1, &b) != 0) return -1;
  /* Add the output's own (contiguous) strides as operand 1. */
  int64_t full[2][FG_MAX_RANK];
  memset(full, 0, sizeof full);
  int64_t s = 1;
  for (int i = b.rank - 1; i >= 0; i--) {
    full[0][i] = b.strides[0][i];
    full[1][i] = s;
    s *= b.dims[i];
  }
  fgc_walk w;
  fgc_walk_init(&w, 2, b.rank, b.dims, full);
  return walk_copy(ctx, fgc_esize(out->dtype), ctx->in[0].data, out->data, n, w);
}

int fgc_concat(const fg_kctx *ctx) {
  if (fgc_check(ctx, 1, 1) != 0 || fgk_concat_check(ctx) != 0) return -1;
  const fg_kbuf *out = &ctx->out[0];
  const int axis = ctx->p->concat.axis;
  if (fgk_numel(out) == 0) return 0;
  const size_t es = fgc_esize(out->dtype);
  int64_t outer, inner;
  fgk_axis_split(out, axis, &outer, &inner);
  const int64_t ow = out->dims[axis] * inner;
  int64_t at = 0; /* input k's column offset in an output row */
  for (int k = 0; k < ctx->n_in; k++) {
    const int64_t wk = ctx->in[k].dims[axis] * inner;
    if (wk > 0) {
      /* dims [outer, wk]: source rows wk apart, destination rows ow apart. */
      const int64_t dims[2] = {outer, wk};
      int64_t full[2][FG_MAX_RANK] = {{wk, 1}, {ow, 1}};
      fgc_walk w;
      fgc_walk_init(&w, 2, 2, dims, full);
      if (walk_copy(ctx, es, ctx->in[k].data, (char *)out->data + (size_t)at * es, outer * wk, w) !=
          0)
        return -1;
    }
    at += wk;
  }
  return 0;
}

/* ---- indices ------------------------------------------------------------ */

static int index_dtype(const fg_kctx *ctx, const fg_kbuf *idx) {
  if (idx->dtype == FG_I32 || idx->dtype == FG_I64) return 0;
  return fgk_fail(ctx, "indices must be i32 or i64, got %s", fg_dtype_name(idx->dtype));
}

/* Only checks indices (when there is nothing to move but the CPU kernel
 * would still refuse a bad index). */
__global__ void index_check_kernel(const void *idx, int is64, int64_t n, int64_t limit, int *flag) {
  FGC_GRID_STRIDE(i, n) {
    const int64_t v = fgc_index_at(idx, is64, i);
    if (v < 0 || v >= limit) fgc_raise(flag, FG_CUDA_ERR_INDEX, i, v, limit, 0);
  }
}

static int check_indices(const fg_kctx *ctx, const fg_kbuf *idx, int64_t limit) {
  const int64_t n = fgk_numel(idx);
  if (n == 0) return 0;
  index_check_kernel<<<fgc_blocks(n, FGC_THREADS * 4), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      idx->data, idx->dtype == FG_I64, n, limit, ctx->cuda->error_flag);
  return fgc_launched(ctx, "index check kernel");
}

template <typename W>
__global__ void gather_kernel(const W *params, const void *idx, int is64, W *out, int64_t total,
                              int64_t row, int64_t limit, int *flag) {
  FGC_GRID_STRIDE(e, total) {
    const int64_t i = e / row, j = e - i * row;
    const int64_t v = fgc_index_at(idx, is64, i);
    if (v < 0 || v >= limit) {
      if (j == 0) fgc_raise(flag, FG_CUDA_ERR_INDEX, i, v, limit, 0);
      out[e] = 0;
    } else {
      out[e] = params[v * row + j];
    }
  }
}

/* gather(params [P, ...], indices [...]) -> indices.shape + params.shape[1:]. */
int fgc_gather(const fg_kctx *ctx) {
  if (fgc_check(ctx, 2, 1) != 0 || fgk_same_dtypes(ctx, 1) != 0 || fgc_need_flag(ctx) != 0 ||
      fgk_gather_check(ctx) != 0)
    return -1;
  const fg_kbuf *pr = &ctx->in[0], *idx = &ctx->in[1], *out = &ctx->out[0];
  if (index_dtype(ctx, idx) != 0) return -1;
  int64_t row = 1;
  for (int i = 1; i < pr->rank; i++)
    row *= pr->dims[i];
  const int64_t n_idx = fgk_numel(idx), total = n_idx * row;
  if (n_idx == 0) return 0;
  if (total == 0) return check_indices(ctx, idx, pr->dims[0]);
  cudaStream_t s = fgc_stream(ctx);
  const unsigned blocks = fgc_blocks(total, FGC_THREADS * 4);
  const int is64 = idx->dtype == FG_I64;
  int *flag = ctx->cuda->error_flag;
  switch (fgc_esize(out->dtype)) {
  case 1:
    gather_kernel<uint8_t><<<blocks, FGC_THREADS, 0, s>>>((const uint8_t *)pr->data, idx->data,
                                                          is64, (uint8_t *)out->data, total, row,
                                                          pr->dims[0], flag);
    break;
  case 4:
    gather_kernel<uint32_t><<<blocks, FGC_THREADS, 0, s>>>((const uint32_t *)pr->data, idx->data,
                                                           is64, (uint32_t *)out->data, total, row,
                                                           pr->dims[0], flag);
    break;
  case 8:
    gather_kernel<uint64_t><<<blocks, FGC_THREADS, 0, s>>>((const uint64_t *)pr->data, idx->data,
                                                           is64, (uint64_t *)out->data, total, row,
                                                           pr->dims[0], flag);
    break;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(out->dtype));
  }
  return fgc_launched(ctx, "gather kernel");
}

/* gather_grad: out = zeros; out[indices[p]] += dy[p] in order of p, as the
 * CPU kernel, without atomics: output rows are split into P parts (rows
 * with v % P == part, P a power of two), block row blockIdx.y owns one part
 * and each thread one column j, walking p in order; so every output element
 * has one writer adding in index order, bitwise as on the CPU. */
template <typename T, typename U>
__global__ void gather_grad_kernel(const T *dy, const void *idx, int is64, T *out, int64_t n_idx,
                                   int64_t row, int64_t limit, int64_t parts, int *flag) {
  const int64_t part = blockIdx.y;
  for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < row;
       j += (int64_t)gridDim.x * blockDim.x) {
    for (int64_t p = 0; p < n_idx; p++) {
      const int64_t v = fgc_index_at(idx, is64, p);
      if (v < 0 || v >= limit) {
        if (part == 0 && j == 0) fgc_raise(flag, FG_CUDA_ERR_INDEX, p, v, limit, 0);
        continue;
      }
      if ((v & (parts - 1)) != part) continue;
      T *d = out + v * row + j;
      *d = (T)((U)*d + (U)dy[p * row + j]);
    }
  }
}

template <typename T, typename U> static int gather_grad(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 2, 1) != 0 || fgk_same_dtypes(ctx, 1) != 0 || fgc_need_flag(ctx) != 0)
    return -1;
  const fg_kbuf *dy = &ctx->in[0], *idx = &ctx->in[1], *out = &ctx->out[0];
  if (out->dtype != dt)
    return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(out->dtype), fg_dtype_name(dt));
  if (index_dtype(ctx, idx) != 0) return -1;
  int ok = out->rank >= 1 && dy->rank == idx->rank + out->rank - 1;
  for (int i = 0; ok && i < dy->rank; i++)
    ok = dy->dims[i] == (i < idx->rank ? idx->dims[i] : out->dims[i - idx->rank + 1]);
  if (!ok)
    return fgk_fail(ctx, "dy rank %d, indices rank %d, output rank %d do not fit", dy->rank,
                    idx->rank, out->rank);
  const int64_t n_idx = fgk_numel(idx), limit = out->dims[0], n = fgk_numel(out);
  if (n > 0 && fgc_fill_bits(ctx, out->data, n, sizeof(T), 0) != 0) return -1;
  if (n == 0) return check_indices(ctx, idx, limit);
  if (n_idx == 0) return 0;
  const int64_t row = n / limit;
  int64_t parts = 1;
  while (parts * 2 <= limit && parts < 128)
    parts *= 2;
  const int threads = row >= FGC_THREADS ? FGC_THREADS : (int)((row + 31) / 32 * 32);
  int64_t bx = (row + threads - 1) / threads;
  if (bx > 1024) bx = 1024;
  const dim3 grid((unsigned)bx, (unsigned)parts);
  gather_grad_kernel<T, U><<<grid, threads, 0, fgc_stream(ctx)>>>(
      (const T *)dy->data, idx->data, idx->dtype == FG_I64, (T *)out->data, n_idx, row, limit,
      parts, ctx->cuda->error_flag);
  return fgc_launched(ctx, "gather_grad kernel");
}
int fgc_gather_grad_f32(const fg_kctx *ctx) { return gather_grad<float, float>(ctx, FG_F32); }
int fgc_gather_grad_f64(const fg_kctx *ctx) { return gather_grad<double, double>(ctx, FG_F64); }
int fgc_gather_grad_i32(const fg_kctx *ctx) { return gather_grad<int32_t, uint32_t>(ctx, FG_I32); }
int fgc_gather_grad_i64(const fg_kctx *ctx) { return gather_grad<int64_t, uint64_t>(ctx, FG_I64); }

/* one_hot: zeros, then 1 at each index; a bad index is recorded. */
template <typename W>
__global__ void one_hot_kernel(const void *idx, int is64, W *out, int64_t n, int64_t depth, W one,
                               int *flag) {
  FGC_GRID_STRIDE(i, n) {
    const int64_t v = fgc_index_at(idx, is64, i);
    if (v < 0 || v >= depth)
      fgc_raise(flag, FG_CUDA_ERR_INDEX, i, v, depth, 0);
    else
      out[i * depth + v] = one;
  }
}

static int one_hot(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 1, 1) != 0 || fgc_need_flag(ctx) != 0 || fgk_one_hot_check(ctx, dt) != 0)
    return -1;
  const fg_kbuf *idx = &ctx->in[0], *out = &ctx->out[0];
  const int64_t depth = ctx->p->one_hot.depth;
  if (index_dtype(ctx, idx) != 0) return -1;
  const int64_t n = fgk_numel(idx);
  if (n == 0) return 0;
  if (depth == 0) return check_indices(ctx, idx, depth);
  const size_t es = fgc_esize(dt);
  if (fgc_fill_bits(ctx, out->data, n * depth, es, 0) != 0) return -1;
  cudaStream_t s = fgc_stream(ctx);
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  const int is64 = idx->dtype == FG_I64;
  int *flag = ctx->cuda->error_flag;
  switch (dt) {
  case FG_F32:
    one_hot_kernel<uint32_t><<<blocks, FGC_THREADS, 0, s>>>(idx->data, is64, (uint32_t *)out->data,
                                                            n, depth, 0x3f800000u, flag);
    break;
  case FG_F64:
    one_hot_kernel<uint64_t><<<blocks, FGC_THREADS, 0, s>>>(idx->data, is64, (uint64_t *)out->data,
                                                            n, depth, 0x3ff0000000000000ull, flag);
    break;
  case FG_I32:
    one_hot_kernel<uint32_t>
        <<<blocks, FGC_THREADS, 0, s>>>(idx->data, is64, (uint32_t *)out->data, n, depth, 1u, flag);
    break;
  case FG_I64:
    one_hot_kernel<uint64_t><<<blocks, FGC_THREADS, 0, s>>>(idx->data, is64, (uint64_t *)out->data,
                                                            n, depth, 1ull, flag);
    break;
  case FG_BOOL:
    one_hot_kernel<uint8_t><<<blocks, FGC_THREADS, 0, s>>>(idx->data, is64, (uint8_t *)out->data, n,
                                                           depth, (uint8_t)1, flag);
    break;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(dt));
  }
  return fgc_launched(ctx, "one_hot kernel");
}
int fgc_one_hot_f32(const fg_kctx *ctx) { return one_hot(ctx, FG_F32); }
int fgc_one_hot_f64(const fg_kctx *ctx) { return one_hot(ctx, FG_F64); }
int fgc_one_hot_i32(const fg_kctx *ctx) { return one_hot(ctx, FG_I32); }
int fgc_one_hot_i64(const fg_kctx *ctx) { return one_hot(ctx, FG_I64); }
int fgc_one_hot_bool(const fg_kctx *ctx) { return one_hot(ctx, FG_BOOL); }

/* shard(x; index = begin[0], count = depth): rows [index*B/count,
 * (index+1)*B/count) of x along axis 0, as kernels/cpu/collective.c. */
int fgc_shard(const fg_kctx *ctx) {
  if (fgc_check(ctx, 1, 1) != 0 || fgk_same_dtypes(ctx, 1) != 0) return -1;
  const fg_kbuf *x = &ctx->in[0], *y = &ctx->out[0];
  const int64_t count = ctx->p->shard.count, index = ctx->p->shard.index;
  if (x->rank < 1 || count < 1 || index < 0 || index >= count || x->dims[0] % count != 0 ||
      y->rank < 1 || y->dims[0] != x->dims[0] / count)
    return fgk_fail(ctx, "shard %lld of %lld: input has %lld rows, which do not split evenly",
                    (long long)index, (long long)count, (long long)(x->rank ? x->dims[0] : 0));
  int64_t row = 1;
  for (int d = 1; d < x->rank; d++)
    row *= x->dims[d];
  if (fgk_numel(y) != row * y->dims[0])
    return fgk_fail(ctx, "output has %lld elements, a shard %lld", (long long)fgk_numel(y),
                    (long long)(row * y->dims[0]));
  const size_t bytes = (size_t)(row * y->dims[0]) * fgc_esize(x->dtype);
  return fgc_copy_bytes(ctx, y->data, (const char *)x->data + (size_t)index * bytes, bytes);
}
