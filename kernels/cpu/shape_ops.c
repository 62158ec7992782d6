/* Data movement: reshape/identity copies, transpose's checks (its kernel
 * is kernels/cpu/transpose.c), concat, slice, gather, one_hot and cast.
 * Apart from one_hot and cast these only move bytes, so one function
 * serves every dtype, switching on the element size. */
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

/* reshape, identity, stop_gradient: the bytes unchanged. */
int fgk_copy(const fg_kctx *ctx) {
  if (fgk_check(ctx, 1, 1) != 0 || fgk_same_dtypes(ctx, 1) != 0) return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (fgk_numel(&ctx->in[0]) != n)
    return fgk_fail(ctx, "input has %lld elements, output %lld", (long long)fgk_numel(&ctx->in[0]),
                    (long long)n);
  if (n > 0 && ctx->in[0].data != ctx->out[0].data)
    memmove(ctx->out[0].data, ctx->in[0].data, (size_t)n * fg_dtype_size(ctx->out[0].dtype));
  return 0;
}

/* Copies the output of a coalesced walk from `src` (operand 0). */
#define WALK_COPY(T, bc, src, dst)                                                                 \
  do {                                                                                             \
    const T *s_ = (const T *)(src);                                                                \
    T *d_ = (T *)(dst);                                                                            \
    const int64_t st_ = (bc).strides[0][(bc).rank - 1];                                            \
    FGK_BCAST_ROWS((bc), {                                                                         \
      const T *sr = s_ + fgk_off[0];                                                               \
      T *dr = d_ + fgk_oo;                                                                         \
      if (st_ == 1)                                                                                \
        memcpy(dr, sr, (size_t)fgk_row_len * sizeof(T));                                           \
      else                                                                                         \
        for (int64_t j = 0; j < fgk_row_len; j++)                                                  \
          dr[j] = sr[j * st_];                                                                     \
    });                                                                                            \
  } while (0)

static int walk_copy(const fg_kctx *ctx, const fgk_bcast *bc, const void *src, void *dst) {
  switch (fg_dtype_size(ctx->out[0].dtype)) {
  case 1: WALK_COPY(uint8_t, *bc, src, dst); break;
  case 4: WALK_COPY(uint32_t, *bc, src, dst); break;
  case 8: WALK_COPY(uint64_t, *bc, src, dst); break;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(ctx->out[0].dtype));
  }
  return 0;
}

static void contiguous_strides(const fg_kbuf *b, int64_t *st) {
  int64_t s = 1;
  for (int i = b->rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= b->dims[i];
  }
}

/* Shared with kernels/cpu/transpose.c and kernels/cuda/shape.cu. */
int fgk_transpose_check(const fg_kctx *ctx, int64_t *src) {
  if (fgk_same_dtypes(ctx, 1) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  const int R = in->rank;
  if (out->rank != R) return fgk_fail(ctx, "input rank %d, output rank %d", R, out->rank);
  int seen[FG_MAX_RANK] = {0};
  int64_t st[FG_MAX_RANK];
  contiguous_strides(in, st);
  for (int i = 0; i < R; i++) {
    const int q = ctx->p->transpose.perm[i];
    if (q < 0 || q >= R || seen[q])
      return fgk_fail(ctx, "perm[%d] = %d is not part of a permutation of [0, %d)", i, q, R);
    seen[q] = 1;
    if (out->dims[i] != in->dims[q])
      return fgk_fail(ctx, "output dim %d is %lld, input dim %d is %lld", i,
                      (long long)out->dims[i], q, (long long)in->dims[q]);
    src[i] = st[q];
  }
  return 0;
}

/* Shared with kernels/cuda/shape.cu. */
int fgk_slice_check(const fg_kctx *ctx, int64_t *base, int64_t *st) {
  if (fgk_same_dtypes(ctx, 1) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  const int R = in->rank;
  if (out->rank != R) return fgk_fail(ctx, "input rank %d, output rank %d", R, out->rank);
  contiguous_strides(in, st);
  *base = 0;
  for (int i = 0; i < R; i++) {
    const int64_t b = ctx->p->slice.begin[i];
    if (b < 0 || b > in->dims[i] || out->dims[i] > in->dims[i] - b)
      return fgk_fail(ctx, "slice [%lld, %lld) of dim %d is outside [0, %lld)", (long long)b,
                      (long long)(b + out->dims[i]), i, (long long)in->dims[i]);
    *base += b * st[i];
  }
  return 0;
}

int fgk_slice(const fg_kctx *ctx) {
  int64_t full[1][FG_MAX_RANK], base;
  if (fgk_check(ctx, 1, 1) != 0 || fgk_slice_check(ctx, &base, full[0]) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  if (fgk_numel(out) == 0) return 0;
  fgk_bcast bc;
  fgk_walk_init(&bc, 1, out->rank, out->dims, full);
  const char *src = (const char *)in->data + (size_t)base * fg_dtype_size(in->dtype);
  return walk_copy(ctx, &bc, src, out->data);
}

/* Shared with kernels/cuda/shape.cu. */
int fgk_concat_check(const fg_kctx *ctx) {
  if (fgk_same_dtypes(ctx, ctx->n_in) != 0) return -1;
  const fg_kbuf *out = &ctx->out[0];
  const int axis = ctx->p->concat.axis, R = out->rank;
  if (axis < 0 || axis >= R) return fgk_fail(ctx, "axis %d is out of range [0, %d)", axis, R);
  int64_t total = 0;
  for (int k = 0; k < ctx->n_in; k++) {
    const fg_kbuf *in = &ctx->in[k];
    if (in->rank != R) return fgk_fail(ctx, "input %d has rank %d, output %d", k, in->rank, R);
    for (int i = 0; i < R; i++)
      if (i != axis && in->dims[i] != out->dims[i])
        return fgk_fail(ctx, "input %d dim %d is %lld, output's is %lld", k, i,
                        (long long)in->dims[i], (long long)out->dims[i]);
    total += in->dims[axis];
  }
  if (total != out->dims[axis])
    return fgk_fail(ctx, "inputs add up to %lld along axis %d, output has %lld", (long long)total,
                    axis, (long long)out->dims[axis]);
  return 0;
}

int fgk_concat(const fg_kctx *ctx) {
  if (fgk_check(ctx, 1, 1) != 0 || fgk_concat_check(ctx) != 0) return -1;
  const fg_kbuf *out = &ctx->out[0];
  const int axis = ctx->p->concat.axis;
  if (fgk_numel(out) == 0) return 0;
  const size_t es = fg_dtype_size(out->dtype);
  int64_t outer, inner;
  fgk_axis_split(out, axis, &outer, &inner);
  char *dst = (char *)out->data;
  for (int64_t o = 0; o < outer; o++)
    for (int k = 0; k < ctx->n_in; k++) {
      const size_t chunk = (size_t)(ctx->in[k].dims[axis] * inner) * es;
      if (chunk == 0) continue;
      memcpy(dst, (const char *)ctx->in[k].data + (size_t)o * chunk, chunk);
      dst += chunk;
    }
  return 0;
}

static inline int64_t index_at(const fg_kbuf *idx, int64_t i) {
  return idx->dtype == FG_I32 ? (int64_t)((const int32_t *)idx->data)[i]
                              : ((const int64_t *)idx->data)[i];
}

/* Every index is checked, even when the rows are empty, so a bad index
 * is reported whatever the params' shape. */
static int check_indices(const fg_kctx *ctx, const fg_kbuf *idx, int64_t limit) {
  if (idx->dtype != FG_I32 && idx->dtype != FG_I64)
    return fgk_fail(ctx, "indices must be i32 or i64, got %s", fg_dtype_name(idx->dtype));
  const int64_t n = fgk_numel(idx);
  for (int64_t i = 0; i < n; i++) {
    const int64_t v = index_at(idx, i);
    if (v < 0 || v >= limit)
      return fgk_fail(ctx, "indices[%lld] = %lld is out of range [0, %lld)", (long long)i,
                      (long long)v, (long long)limit);
  }
  return 0;
}

/* gather(params [P, ...], indices [...]) -> indices.shape + params.shape[1:]. */
/* Shared with kernels/cuda/shape.cu. */
int fgk_gather_check(const fg_kctx *ctx) {
  const fg_kbuf *pr = &ctx->in[0], *idx = &ctx->in[1], *out = &ctx->out[0];
  if (pr->rank < 1 || out->rank != idx->rank + pr->rank - 1)
    return fgk_fail(ctx, "params rank %d, indices rank %d, output rank %d", pr->rank, idx->rank,
                    out->rank);
  for (int i = 0; i < out->rank; i++) {
    const int64_t want = i < idx->rank ? idx->dims[i] : pr->dims[i - idx->rank + 1];
    if (out->dims[i] != want)
      return fgk_fail(ctx, "output dim %d is %lld, expected %lld", i, (long long)out->dims[i],
                      (long long)want);
  }
  return 0;
}

int fgk_gather(const fg_kctx *ctx) {
  if (fgk_check(ctx, 2, 1) != 0 || fgk_same_dtypes(ctx, 1) != 0 || fgk_gather_check(ctx) != 0)
    return -1;
  const fg_kbuf *pr = &ctx->in[0], *idx = &ctx->in[1], *out = &ctx->out[0];
  if (check_indices(ctx, idx, pr->dims[0]) != 0) return -1;
  int64_t row = 1;
  for (int i = 1; i < pr->rank; i++)
    row *= pr->dims[i];
  const size_t row_bytes = (size_t)row * fg_dtype_size(out->dtype);
  if (row_bytes == 0) return 0;
  const int64_t n = fgk_numel(idx);
  for (int64_t i = 0; i < n; i++)
    memcpy((char *)out->data + (size_t)i * row_bytes,
           (const char *)pr->data + (size_t)index_at(idx, i) * row_bytes, row_bytes);
  return 0;
}

/* one_hot(indices [...]) -> indices.shape + [depth] of the output dtype:
 * 1 at the index, 0 elsewhere. Unlike TensorFlow (all zeros), an index
 * outside [0, depth) is an error naming the node and the value. */
/* Shared with kernels/cuda/shape.cu. */
int fgk_one_hot_check(const fg_kctx *ctx, fg_dtype dt) {
  const fg_kbuf *idx = &ctx->in[0], *out = &ctx->out[0];
  const int64_t depth = ctx->p->one_hot.depth;
  if (out->dtype != dt)
    return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(out->dtype), fg_dtype_name(dt));
  int ok = out->rank == idx->rank + 1 && out->dims[idx->rank] == depth;
  for (int i = 0; ok && i < idx->rank; i++)
    ok = out->dims[i] == idx->dims[i];
  if (!ok)
    return fgk_fail(ctx, "output rank %d does not match indices rank %d and depth %lld", out->rank,
                    idx->rank, (long long)depth);
  return 0;
}

static int one_hot(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_check(ctx, 1, 1) != 0 || fgk_one_hot_check(ctx, dt) != 0) return -1;
  const fg_kbuf *idx = &ctx->in[0], *out = &ctx->out[0];
  const int64_t depth = ctx->p->one_hot.depth;
  if (check_indices(ctx, idx, depth) != 0) return -1;
  const int64_t n = fgk_numel(idx);
  if (n == 0 || depth == 0) return 0;
  /* Zero is all-zero bits in every dtype. */
  memset(out->data, 0, (size_t)(n * depth) * fg_dtype_size(dt));
  for (int64_t i = 0; i < n; i++) {
    const int64_t at = i * depth + index_at(idx, i);
    switch (dt) {
    case FG_F32: ((float *)out->data)[at] = 1.0f; break;
    case FG_F64: ((double *)out->data)[at] = 1.0; break;
    case FG_I32: ((int32_t *)out->data)[at] = 1; break;
    case FG_I64: ((int64_t *)out->data)[at] = 1; break;
    case FG_BOOL: ((uint8_t *)out->data)[at] = 1; break;
    default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(dt));
    }
  }
  return 0;
}

/* cast: keyed by the output dtype, accepts every input dtype. Float to
 * integer truncates toward zero, saturates at the type's limits and maps
 * NaN to 0 (C leaves these undefined; NumPy gives platform garbage).
 * i64 -> i32 wraps (as NumPy's astype). To bool is x != 0 (NaN -> 1). */
#define CAST_LOOP(TI, TO, CONV)                                                                    \
  do {                                                                                             \
    const TI *s = (const TI *)ctx->in[0].data;                                                     \
    TO *d = (TO *)ctx->out[0].data;                                                                \
    for (int64_t i = 0; i < n; i++)                                                                \
      d[i] = CONV(s[i]);                                                                           \
  } while (0)
#define C_PLAIN(x)      (x)
#define C_BOOL(x)       ((uint8_t)((x) != 0))
#define C_F2I32(x)      fgk_f2i32((double)(x))
#define C_F2I64(x)      fgk_f2i64((double)(x))
#define C_I64_TO_I32(x) ((int32_t)(uint32_t)(uint64_t)(x))

/* One output type TO: CF for float sources, CI64 for i64 sources, CB for
 * everything else (i32, bool). */
#define CAST_FROM_ANY(TO, CF, CI64, CB)                                                            \
  switch (ctx->in[0].dtype) {                                                                      \
  case FG_F32: CAST_LOOP(float, TO, CF); break;                                                    \
  case FG_F64: CAST_LOOP(double, TO, CF); break;                                                   \
  case FG_I32: CAST_LOOP(int32_t, TO, CB); break;                                                  \
  case FG_I64: CAST_LOOP(int64_t, TO, CI64); break;                                                \
  case FG_BOOL: CAST_LOOP(uint8_t, TO, CB); break;                                                 \
  default: return fgk_fail(ctx, "cannot cast from %s", fg_dtype_name(ctx->in[0].dtype));           \
  }

/* Shared with kernels/cuda/elementwise.cu. */
int fgk_cast_check(const fg_kctx *ctx, fg_dtype dt) {
  if (ctx->out[0].dtype != dt)
    return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(ctx->out[0].dtype),
                    fg_dtype_name(dt));
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (fgk_numel(&ctx->in[0]) != n)
    return fgk_fail(ctx, "input has %lld elements, output %lld", (long long)fgk_numel(&ctx->in[0]),
                    (long long)n);
  return 0;
}

static int cast(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_check(ctx, 1, 1) != 0 || fgk_cast_check(ctx, dt) != 0) return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  if (ctx->in[0].dtype == dt) {
    if (ctx->in[0].data != ctx->out[0].data)
      memmove(ctx->out[0].data, ctx->in[0].data, (size_t)n * fg_dtype_size(dt));
    return 0;
  }
  switch (dt) {
  case FG_F32: CAST_FROM_ANY(float, C_PLAIN, C_PLAIN, C_PLAIN); break;
  case FG_F64: CAST_FROM_ANY(double, C_PLAIN, C_PLAIN, C_PLAIN); break;
  case FG_I32: CAST_FROM_ANY(int32_t, C_F2I32, C_I64_TO_I32, C_PLAIN); break;
  case FG_I64: CAST_FROM_ANY(int64_t, C_F2I64, C_PLAIN, C_PLAIN); break;
  case FG_BOOL: CAST_FROM_ANY(uint8_t, C_BOOL, C_BOOL, C_BOOL); break;
  default: return fgk_fail(ctx, "cannot cast to %s", fg_dtype_name(dt));
  }
  return 0;
}

FGK_PER_DTYPE(fgk_one_hot, one_hot)
FGK_PER_DTYPE(fgk_cast, cast)
