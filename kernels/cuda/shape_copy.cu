/* pad, tile, split and stack on the GPU, and the gradients pad_grad and
 * tile_grad. The index maps and shape checks are the CPU kernels' own
 * (kernels/shape_copy.h). The gradients use no atomics: each output
 * element walks the big (dy) positions that map onto it in increasing C
 * order, which is the order the CPU kernel adds them in, so both give the
 * same bits. flatten and squeeze are fgc_copy; expand is broadcast_like's
 * kernel. */
#include "kernels/cuda/common.cuh"
#include "kernels/shape_copy.h"

/* Everything a map kernel needs, by value. */
struct map_args {
  int rank;
  int64_t big[FG_MAX_RANK], small[FG_MAX_RANK];
  fgk_dim_map m[FG_MAX_RANK];
};

static map_args make_args(const fg_kbuf *small, const fg_kbuf *big, const fgk_dim_map *m) {
  map_args a;
  memset(&a, 0, sizeof a);
  a.rank = big->rank;
  for (int d = 0; d < a.rank; d++) {
    a.big[d] = big->dims[d];
    a.small[d] = small->dims[d];
    a.m[d] = m[d];
  }
  return a;
}

/* big[e] = small[map(e)], or the fill. */
template <typename W>
__global__ void map_gather_kernel(const W *small, W *big, int64_t n, map_args a, W fill) {
  FGC_GRID_STRIDE(e, n) {
    int64_t rest = e, off = 0, stride = 1;
    int inside = 1;
    for (int d = a.rank - 1; d >= 0; d--) {
      const int64_t o = rest % a.big[d];
      rest /= a.big[d];
      const int64_t i = fgk_map_index(a.m[d], o);
      if (i < 0) inside = 0;
      off += i * stride;
      stride *= a.small[d];
    }
    big[e] = inside ? small[off] : fill;
  }
}

/* How many big indices of a dim (big size O) map to small index i, and
 * the k-th of them in increasing order. */
__device__ __forceinline__ int64_t preimage_count(const fgk_dim_map &m, int64_t i, int64_t O) {
  switch (m.kind) {
  case FGK_MAP_TILE: return O / m.n;
  case FG_PAD_EDGE: {
    const int64_t lo = i == 0 ? 0 : i + m.begin, hi = i == m.n - 1 ? O - 1 : i + m.begin;
    return hi - lo + 1;
  }
  case FG_PAD_REFLECT: {
    const int64_t end = O - m.n - m.begin; /* the pad after */
    return 1 + (i >= 1 && i <= m.begin) + (i <= m.n - 2 && i >= m.n - 1 - end);
  }
  default: return 1;
  }
}

__device__ __forceinline__ int64_t preimage(const fgk_dim_map &m, int64_t i, int64_t k) {
  switch (m.kind) {
  case FGK_MAP_TILE: return i + k * m.n;
  case FG_PAD_EDGE: return (i == 0 ? 0 : i + m.begin) + k;
  case FG_PAD_REFLECT: {
    /* In order: the mirror in the pad before (when there is one), i
     * itself, the mirror in the pad after (preimage_count says whether). */
    const int before = i >= 1 && i <= m.begin;
    if (before && k == 0) return m.begin - i;
    if (k == before) return i + m.begin;
    return m.begin + 2 * (m.n - 1) - i;
  }
  default: return i + m.begin;
  }
}

/* small[e] = the sum over big positions mapping to e, in C order. */
template <typename T, typename U>
__global__ void map_sum_kernel(const T *big, T *small, int64_t n, map_args a) {
  FGC_GRID_STRIDE(e, n) {
    int64_t idx[FG_MAX_RANK], cnt[FG_MAX_RANK], k[FG_MAX_RANK];
    int64_t rest = e, total = 1;
    for (int d = a.rank - 1; d >= 0; d--) {
      idx[d] = rest % a.small[d];
      rest /= a.small[d];
      cnt[d] = preimage_count(a.m[d], idx[d], a.big[d]);
      k[d] = 0;
      total *= cnt[d];
    }
    U acc = 0;
    for (int64_t t = 0; t < total; t++) {
      int64_t off = 0;
      for (int d = 0; d < a.rank; d++)
        off = off * a.big[d] + preimage(a.m[d], idx[d], k[d]);
      acc = (U)(acc + (U)big[off]);
      for (int d = a.rank - 1; d >= 0 && ++k[d] == cnt[d]; d--)
        k[d] = 0;
    }
    small[e] = (T)acc;
  }
}

static int gather(const fg_kctx *ctx, const fg_kbuf *small, const fg_kbuf *big,
                  const fgk_dim_map *m, uint64_t fill) {
  const int64_t n = fgk_numel(big);
  if (n == 0) return 0;
  const map_args a = make_args(small, big, m);
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  cudaStream_t s = fgc_stream(ctx);
  switch (fgc_esize(big->dtype)) {
  case 1:
    map_gather_kernel<uint8_t><<<blocks, FGC_THREADS, 0, s>>>(
        (const uint8_t *)small->data, (uint8_t *)big->data, n, a, (uint8_t)fill);
    break;
  case 4:
    map_gather_kernel<uint32_t><<<blocks, FGC_THREADS, 0, s>>>(
        (const uint32_t *)small->data, (uint32_t *)big->data, n, a, (uint32_t)fill);
    break;
  case 8:
    map_gather_kernel<uint64_t><<<blocks, FGC_THREADS, 0, s>>>(
        (const uint64_t *)small->data, (uint64_t *)big->data, n, a, (uint64_t)fill);
    break;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(big->dtype));
  }
  return fgc_launched(ctx, "pad/tile kernel");
}

template <typename T, typename U> static int map_sum(const fg_kctx *ctx, const fgk_dim_map *m) {
  const fg_kbuf *big = &ctx->in[0], *small = &ctx->out[0];
  const int64_t n = fgk_numel(small);
  if (n == 0) return 0;
  if (fgk_numel(big) == 0) return fgc_fill_bits(ctx, small->data, n, sizeof(T), 0);
  const map_args a = make_args(small, big, m);
  map_sum_kernel<T, U><<<fgc_blocks(n, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const T *)big->data, (T *)small->data, n, a);
  return fgc_launched(ctx, "pad_grad/tile_grad kernel");
}

int fgc_pad(const fg_kctx *ctx) {
  fgk_dim_map m[FG_MAX_RANK];
  if (fgc_check(ctx, 1, 1) != 0 || fgk_map_op_maps(ctx, fgk_pad_maps, 0, m) != 0) return -1;
  return gather(ctx, &ctx->in[0], &ctx->out[0], m,
                fgk_pad_value_bits(ctx->out[0].dtype, ctx->p->pad.value));
}

int fgc_tile(const fg_kctx *ctx) {
  fgk_dim_map m[FG_MAX_RANK];
  if (fgc_check(ctx, 1, 1) != 0 || fgk_map_op_maps(ctx, fgk_tile_maps, 0, m) != 0) return -1;
  return gather(ctx, &ctx->in[0], &ctx->out[0], m, 0);
}

/* pad_grad and tile_grad. Integers add in their unsigned type, so overflow
 * wraps as on the CPU. */
template <typename T, typename U> static int map_grad(const fg_kctx *ctx, fgk_maps_fn maps) {
  fgk_dim_map m[FG_MAX_RANK];
  if (fgc_check(ctx, 2, 1) != 0 || fgk_map_op_maps(ctx, maps, 1, m) != 0) return -1;
  return map_sum<T, U>(ctx, m);
}

int fgc_pad_grad_f32(const fg_kctx *ctx) { return map_grad<float, float>(ctx, fgk_pad_maps); }
int fgc_pad_grad_f64(const fg_kctx *ctx) { return map_grad<double, double>(ctx, fgk_pad_maps); }
int fgc_pad_grad_i32(const fg_kctx *ctx) { return map_grad<int32_t, uint32_t>(ctx, fgk_pad_maps); }
int fgc_pad_grad_i64(const fg_kctx *ctx) { return map_grad<int64_t, uint64_t>(ctx, fgk_pad_maps); }
int fgc_tile_grad_f32(const fg_kctx *ctx) { return map_grad<float, float>(ctx, fgk_tile_maps); }
int fgc_tile_grad_f64(const fg_kctx *ctx) { return map_grad<double, double>(ctx, fgk_tile_maps); }
int fgc_tile_grad_i32(const fg_kctx *ctx) {
  return map_grad<int32_t, uint32_t>(ctx, fgk_tile_maps);
}
int fgc_tile_grad_i64(const fg_kctx *ctx) {
  return map_grad<int64_t, uint64_t>(ctx, fgk_tile_maps);
}

/* ---- split and stack: row copies --------------------------------------- */

/* rows x width elements from src (rows sp apart) to dst (rows dp apart). */
template <typename W>
__global__ void rows_copy_kernel(const W *src, W *dst, int64_t rows, int64_t width, int64_t sp,
                                 int64_t dp) {
  FGC_GRID_STRIDE(e, rows * width) {
    const int64_t r = e / width, c = e - r * width;
    dst[r * dp + c] = src[r * sp + c];
  }
}

static int rows_copy(const fg_kctx *ctx, size_t es, const void *src, void *dst, int64_t rows,
                     int64_t width, int64_t sp, int64_t dp) {
  const int64_t n = rows * width;
  if (n == 0) return 0;
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  cudaStream_t s = fgc_stream(ctx);
  switch (es) {
  case 1:
    rows_copy_kernel<uint8_t>
        <<<blocks, FGC_THREADS, 0, s>>>((const uint8_t *)src, (uint8_t *)dst, rows, width, sp, dp);
    break;
  case 4:
    rows_copy_kernel<uint32_t><<<blocks, FGC_THREADS, 0, s>>>((const uint32_t *)src,
                                                              (uint32_t *)dst, rows, width, sp, dp);
    break;
  case 8:
    rows_copy_kernel<uint64_t><<<blocks, FGC_THREADS, 0, s>>>((const uint64_t *)src,
                                                              (uint64_t *)dst, rows, width, sp, dp);
    break;
  default: return fgk_fail(ctx, "unsupported element size %zu", es);
  }
  return fgc_launched(ctx, "row copy kernel");
}

int fgc_split(const fg_kctx *ctx) {
  if (fgc_check(ctx, 1, ctx->n_out) != 0 || ctx->n_out < 1 || fgk_split_check(ctx) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0];
  const int axis = ctx->p->split.axis;
  const size_t es = fgc_esize(in->dtype);
  int64_t outer, inner;
  fgk_axis_split(in, axis, &outer, &inner);
  const int64_t row = in->dims[axis] * inner;
  int64_t at = 0;
  for (int k = 0; k < ctx->n_out; k++) {
    const int64_t w = ctx->out[k].dims[axis] * inner;
    if (rows_copy(ctx, es, (const char *)in->data + (size_t)at * es, ctx->out[k].data, outer, w,
                  row, w) != 0)
      return -1;
    at += w;
  }
  return 0;
}

int fgc_stack(const fg_kctx *ctx) {
  if (fgc_check(ctx, 1, 1) != 0 || fgk_stack_check(ctx) != 0) return -1;
  const fg_kbuf *out = &ctx->out[0];
  const int axis = ctx->p->stack.axis, n = ctx->n_in;
  const size_t es = fgc_esize(out->dtype);
  int64_t outer, inner;
  fgk_axis_split(out, axis, &outer, &inner);
  for (int k = 0; k < n; k++)
    if (rows_copy(ctx, es, ctx->in[k].data, (char *)out->data + (size_t)(k * inner) * es, outer,
                  inner, inner, n * inner) != 0)
      return -1;
  return 0;
}
