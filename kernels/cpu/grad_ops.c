/* Kernels of the ops that gradients are built from: erf, broadcast_like,
 * sum_to, numel, slice_grad, gather_grad and group (expand_dims and
 * reshape_like share fgk_copy). The executor has already checked shapes by
 * re-running inference with the concrete shapes; the checks here keep a
 * mis-wired direct call from touching memory out of bounds.
 *
 * Determinism: sum_to is reduce_sum's fold (row-major order in fixed runs,
 * f32 in double, parallel through reduce_sum); gather_grad adds rows in
 * index order. erf and broadcast_like split their output over ctx->par. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

/* ---- erf ------------------------------------------------------------------ */

typedef struct erf_job {
  const void *in;
  void *out;
} erf_job;

/* Element by element, read before write, so out may be in's buffer. */
#define FGK_ERF(fn, T, DT, F)                                                                      \
  FGK_CLONES static void fn##_range(void *arg, int64_t i0, int64_t i1) {                           \
    const erf_job *J = (const erf_job *)arg;                                                       \
    const T *in = (const T *)J->in;                                                                \
    T *out = (T *)J->out;                                                                          \
    for (int64_t i = i0; i < i1; i++)                                                              \
      out[i] = F(in[i]);                                                                           \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_check(ctx, 1, 1) != 0) return -1;                                                      \
    if (ctx->in[0].dtype != DT || ctx->out[0].dtype != DT)                                         \
      return fgk_fail(ctx, "expected %s input and output, got %s and %s", fg_dtype_name(DT),       \
                      fg_dtype_name(ctx->in[0].dtype), fg_dtype_name(ctx->out[0].dtype));          \
    const int64_t n = fgk_numel(&ctx->out[0]);                                                     \
    if (fgk_numel(&ctx->in[0]) != n)                                                               \
      return fgk_fail(ctx, "input has %lld elements, output %lld",                                 \
                      (long long)fgk_numel(&ctx->in[0]), (long long)n);                            \
    erf_job J = {ctx->in[0].data, ctx->out[0].data};                                               \
    fgk_parallel_for(ctx, n, FGK_GRAIN_MATH, fn##_range, &J);                                      \
    return 0;                                                                                      \
  }
FGK_ERF(fgk_erf_f32, float, FG_F32, fgk_erff)
FGK_ERF(fgk_erf_f64, double, FG_F64, erf)

/* ---- byte walks ----------------------------------------------------------- */

/* Copies along a coalesced walk: the walk's C-order index is `dst_walk` ?
 * the destination : the source; operand 0 (offsets fgk_off[0], inner
 * stride st_) is the other side. */
#define WALK(T, bc, src, dst, dst_walk)                                                            \
  do {                                                                                             \
    const T *s_ = (const T *)(src);                                                                \
    T *d_ = (T *)(dst);                                                                            \
    const int64_t st_ = (bc).strides[0][(bc).rank - 1];                                            \
    FGK_BCAST_ROWS((bc), {                                                                         \
      if (dst_walk) {                                                                              \
        const T *sr = s_ + fgk_off[0];                                                             \
        T *dr = d_ + fgk_oo;                                                                       \
        for (int64_t j = 0; j < fgk_row_len; j++)                                                  \
          dr[j] = sr[j * st_];                                                                     \
      } else {                                                                                     \
        const T *sr = s_ + fgk_oo;                                                                 \
        T *dr = d_ + fgk_off[0];                                                                   \
        for (int64_t j = 0; j < fgk_row_len; j++)                                                  \
          dr[j * st_] = sr[j];                                                                     \
      }                                                                                            \
    });                                                                                            \
  } while (0)

static int walk(const fg_kctx *ctx, const fgk_bcast *bc, size_t es, const void *src, void *dst,
                int dst_walk) {
  switch (es) {
  case 1: WALK(uint8_t, *bc, src, dst, dst_walk); break;
  case 4: WALK(uint32_t, *bc, src, dst, dst_walk); break;
  case 8: WALK(uint64_t, *bc, src, dst, dst_walk); break;
  default: return fgk_fail(ctx, "unsupported element size %zu", es);
  }
  return 0;
}

static int same_dtype(const fg_kctx *ctx, int i) {
  if (ctx->in[i].dtype == ctx->out[0].dtype) return 0;
  return fgk_fail(ctx, "input %d is %s, the output %s", i, fg_dtype_name(ctx->in[i].dtype),
                  fg_dtype_name(ctx->out[0].dtype));
}

/* ---- broadcast_like -------------------------------------------------------- */

typedef struct bcast_like_job {
  fgk_bcast bc;
  const void *src;
  void *dst;
} bcast_like_job;

#define BCAST_LIKE_RANGE(name, T)                                                                  \
  static void name(void *arg, int64_t e0, int64_t e1) {                                            \
    const bcast_like_job *J = (const bcast_like_job *)arg;                                         \
    const T *s = (const T *)J->src;                                                                \
    T *d = (T *)J->dst;                                                                            \
    const int64_t st = J->bc.strides[0][J->bc.rank - 1];                                           \
    FGK_BCAST_RANGE(J->bc, e0, e1, {                                                               \
      const T *sr = s + fgk_off[0];                                                                \
      T *dr = d + fgk_oo;                                                                          \
      for (int64_t j = 0; j < fgk_len; j++)                                                        \
        dr[j] = sr[j * st];                                                                        \
    });                                                                                            \
  }
BCAST_LIKE_RANGE(bcast_like_1, uint8_t)
BCAST_LIKE_RANGE(bcast_like_4, uint32_t)
BCAST_LIKE_RANGE(bcast_like_8, uint64_t)

/* out (like's shape) = in[0] broadcast one way; fgk_bcast_init refuses any
 * dim of x that is neither 1 nor the output's. Split over output ranges. */
int fgk_broadcast_like(const fg_kctx *ctx) {
  if (fgk_check(ctx, 1, 1) != 0 || same_dtype(ctx, 0) != 0) return -1;
  const int64_t n = fgk_numel(&ctx->out[0]);
  if (n == 0) return 0;
  bcast_like_job J = {.src = ctx->in[0].data, .dst = ctx->out[0].data};
  if (fgk_bcast_init(ctx, 1, &J.bc) != 0) return -1;
  fg_krange_fn range;
  switch (fg_dtype_size(ctx->out[0].dtype)) {
  case 1: range = bcast_like_1; break;
  case 4: range = bcast_like_4; break;
  case 8: range = bcast_like_8; break;
  default: return fgk_fail(ctx, "unsupported element size %zu", fg_dtype_size(ctx->out[0].dtype));
  }
  fgk_parallel_for(ctx, n, FGK_GRAIN_CHEAP, range, &J);
  return 0;
}

/* ---- sum_to ------------------------------------------------------------------ */

/* sum_to is reduce_sum over x's leading extra dims and the dims where the
 * output has 1 and x does not; the output's C-order layout is that of the
 * keepdims result without the leading 1s, so the reduce_sum kernel writes
 * it directly, with the same summation order and accumulators. Shared with
 * kernels/cuda/reduce.cu, which passes its own reduce_sum. */
int fgk_sum_to(const fg_kctx *ctx, fg_kernel_fn reduce) {
  if (fgk_check(ctx, 1, 1) != 0 || same_dtype(ctx, 0) != 0) return -1;
  const fg_kbuf *x = &ctx->in[0], *out = &ctx->out[0];
  const int R = x->rank, off = R - out->rank;
  if (off < 0) return fgk_fail(ctx, "output rank %d is above input rank %d", out->rank, R);
  /* sum_to has no attributes: its reduce_sum's parameters are made here. */
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.reduce.keepdims = 1;
  for (int i = 0; i < R; i++) {
    if (i < off || (out->dims[i - off] == 1 && x->dims[i] != 1)) {
      p.reduce.axes[p.reduce.n_axes++] = i;
    } else if (out->dims[i - off] != x->dims[i]) {
      return fgk_fail(ctx, "output dim %d (%lld) does not broadcast to input dim %d (%lld)",
                      i - off, (long long)out->dims[i - off], i, (long long)x->dims[i]);
    }
  }
  fg_kctx sub = *ctx;
  sub.n_in = 1;
  sub.p = &p;
  return reduce(&sub);
}

int fgk_sum_to_f32(const fg_kctx *ctx) { return fgk_sum_to(ctx, fgk_reduce_sum_f32); }
int fgk_sum_to_f64(const fg_kctx *ctx) { return fgk_sum_to(ctx, fgk_reduce_sum_f64); }
int fgk_sum_to_i32(const fg_kctx *ctx) { return fgk_sum_to(ctx, fgk_reduce_sum_i32); }
int fgk_sum_to_i64(const fg_kctx *ctx) { return fgk_sum_to(ctx, fgk_reduce_sum_i64); }

/* ---- numel ------------------------------------------------------------------- */

static int count(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_check(ctx, 1, 1) != 0) return -1;
  fg_kbuf *out = &ctx->out[0];
  if (out->dtype != dt || out->rank != 0)
    return fgk_fail(ctx, "output is %s of rank %d, expected a %s scalar", fg_dtype_name(out->dtype),
                    out->rank, fg_dtype_name(dt));
  const int64_t n = fgk_numel(&ctx->in[0]);
  switch (dt) {
  case FG_F32: *(float *)out->data = (float)n; break; /* rounds above 2^24, as a cast would */
  case FG_F64: *(double *)out->data = (double)n; break;
  case FG_I32:
    if (n > INT32_MAX)
      return fgk_fail(ctx, "input 0 has %lld elements, more than an i32 holds", (long long)n);
    *(int32_t *)out->data = (int32_t)n;
    break;
  case FG_I64: *(int64_t *)out->data = n; break;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(dt));
  }
  return 0;
}

int fgk_count_f32(const fg_kctx *ctx) { return count(ctx, FG_F32); }
int fgk_count_f64(const fg_kctx *ctx) { return count(ctx, FG_F64); }
int fgk_count_i32(const fg_kctx *ctx) { return count(ctx, FG_I32); }
int fgk_count_i64(const fg_kctx *ctx) { return count(ctx, FG_I64); }

/* ---- slice_grad -------------------------------------------------------------- */

/* out (like's shape) = zeros with dy at p->begin: the forward slice's walk
 * with source and destination swapped. */
/* Shared with kernels/cuda/shape.cu. */
int fgk_slice_grad_check(const fg_kctx *ctx, int64_t *base, int64_t *st) {
  if (same_dtype(ctx, 0) != 0) return -1;
  const fg_kbuf *dy = &ctx->in[0], *out = &ctx->out[0];
  const int R = out->rank;
  if (dy->rank != R) return fgk_fail(ctx, "dy rank %d, output rank %d", dy->rank, R);
  int64_t s = 1;
  for (int i = R - 1; i >= 0; i--) {
    st[i] = s;
    s *= out->dims[i];
  }
  *base = 0;
  for (int i = 0; i < R; i++) {
    const int64_t b = ctx->p->slice.begin[i];
    if (b < 0 || b > out->dims[i] || dy->dims[i] > out->dims[i] - b)
      return fgk_fail(ctx, "dy's block [%lld, %lld) of dim %d is outside [0, %lld)", (long long)b,
                      (long long)(b + dy->dims[i]), i, (long long)out->dims[i]);
    *base += b * st[i];
  }
  return 0;
}

int fgk_slice_grad(const fg_kctx *ctx) {
  int64_t full[1][FG_MAX_RANK], base;
  if (fgk_check(ctx, 1, 1) != 0 || fgk_slice_grad_check(ctx, &base, full[0]) != 0) return -1;
  const fg_kbuf *dy = &ctx->in[0], *out = &ctx->out[0];
  const int R = out->rank;
  const size_t es = fg_dtype_size(out->dtype);
  const int64_t n = fgk_numel(out);
  if (n == 0) return 0;
  memset(out->data, 0, (size_t)n * es);
  if (fgk_numel(dy) == 0) return 0;
  fgk_bcast bc;
  fgk_walk_init(&bc, 1, R, dy->dims, full);
  return walk(ctx, &bc, es, dy->data, (char *)out->data + (size_t)base * es, 0);
}

/* ---- gather_grad ------------------------------------------------------------- */

static inline int64_t index_at(const fg_kbuf *idx, int64_t i) {
  return idx->dtype == FG_I32 ? (int64_t)((const int32_t *)idx->data)[i]
                              : ((const int64_t *)idx->data)[i];
}

/* Integer sums wrap (through unsigned arithmetic) instead of being
 * undefined, as reduce_sum's do. */
#define ADD_F(a, b)   ((a) + (b))
#define ADD_I32(a, b) ((int32_t)((uint32_t)(a) + (uint32_t)(b)))
#define ADD_I64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))

/* out (like's shape [N, ...]) = zeros; out[indices[p]] += dy[p] in order of
 * p. Every index is checked before anything is written. */
#define FGK_GATHER_GRAD(fn, T, DT, ADD)                                                            \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_check(ctx, 2, 1) != 0 || same_dtype(ctx, 0) != 0) return -1;                           \
    const fg_kbuf *dy = &ctx->in[0], *idx = &ctx->in[1], *out = &ctx->out[0];                      \
    if (out->dtype != DT)                                                                          \
      return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(out->dtype),                 \
                      fg_dtype_name(DT));                                                          \
    if (idx->dtype != FG_I32 && idx->dtype != FG_I64)                                              \
      return fgk_fail(ctx, "indices must be i32 or i64, got %s", fg_dtype_name(idx->dtype));       \
    int ok = out->rank >= 1 && dy->rank == idx->rank + out->rank - 1;                              \
    for (int i = 0; ok && i < dy->rank; i++)                                                       \
      ok = dy->dims[i] == (i < idx->rank ? idx->dims[i] : out->dims[i - idx->rank + 1]);           \
    if (!ok)                                                                                       \
      return fgk_fail(ctx, "dy rank %d, indices rank %d, output rank %d do not fit", dy->rank,     \
                      idx->rank, out->rank);                                                       \
    const int64_t n_idx = fgk_numel(idx), limit = out->dims[0];                                    \
    for (int64_t i = 0; i < n_idx; i++) {                                                          \
      const int64_t v = index_at(idx, i);                                                          \
      if (v < 0 || v >= limit)                                                                     \
        return fgk_fail(ctx, "indices[%lld] = %lld is out of range [0, %lld)", (long long)i,       \
                        (long long)v, (long long)limit);                                           \
    }                                                                                              \
    const int64_t n = fgk_numel(out);                                                              \
    if (n == 0) return 0;                                                                          \
    memset(out->data, 0, (size_t)n * sizeof(T));                                                   \
    const int64_t row = n / limit;                                                                 \
    const T *src = (const T *)dy->data;                                                            \
    T *dst = (T *)out->data;                                                                       \
    for (int64_t i = 0; i < n_idx; i++) {                                                          \
      T *d = dst + index_at(idx, i) * row;                                                         \
      const T *s = src + i * row;                                                                  \
      for (int64_t j = 0; j < row; j++)                                                            \
        d[j] = ADD(d[j], s[j]);                                                                    \
    }                                                                                              \
    return 0;                                                                                      \
  }
FGK_GATHER_GRAD(fgk_gather_grad_f32, float, FG_F32, ADD_F)
FGK_GATHER_GRAD(fgk_gather_grad_f64, double, FG_F64, ADD_F)
FGK_GATHER_GRAD(fgk_gather_grad_i32, int32_t, FG_I32, ADD_I32)
FGK_GATHER_GRAD(fgk_gather_grad_i64, int64_t, FG_I64, ADD_I64)

/* ---- group ------------------------------------------------------------------- */

/* Its inputs have run by the time it does; it only writes its i32 0. */
int fgk_group(const fg_kctx *ctx) {
  if (fgk_check(ctx, 0, 1) != 0) return -1;
  fg_kbuf *out = &ctx->out[0];
  if (out->dtype != FG_I32 || out->rank != 0)
    return fgk_fail(ctx, "output is %s of rank %d, expected an i32 scalar",
                    fg_dtype_name(out->dtype), out->rank);
  *(int32_t *)out->data = 0;
  return 0;
}
