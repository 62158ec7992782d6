/* pad, tile, split and stack, and the gradients pad_grad and tile_grad.
 * The forward ops only move bytes (pad also writes its fill), so one
 * function per op serves every dtype by element size; the gradients add
 * dy's elements onto their sources in C order, one thread, so the sums are
 * the same on every run. flatten and squeeze are reshape's copy and expand
 * is broadcast_like's kernel (cpu_kernels.h). */
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/shape_copy.h"

/* ---- the shared checks (kernels/shape_copy.h) ----------------------------- */

static int same_rank(const fg_kctx *ctx, const fg_kbuf *small, const fg_kbuf *big) {
  if (small->rank == big->rank) return 0;
  return fgk_fail(ctx, "ranks differ: %d and %d", small->rank, big->rank);
}

int fgk_pad_maps(const fg_kctx *ctx, const fg_kbuf *small, const fg_kbuf *big, fgk_dim_map *m) {
  if (same_rank(ctx, small, big) != 0) return -1;
  const fg_pad_params *p = &ctx->p->pad;
  for (int d = 0; d < small->rank; d++) {
    const int64_t n = small->dims[d], b = p->begin[d], e = p->end[d];
    if (b < 0 || e < 0 || big->dims[d] != n + b + e)
      return fgk_fail(ctx, "dim %d: %lld plus pads %lld and %lld is not %lld", d, (long long)n,
                      (long long)b, (long long)e, (long long)big->dims[d]);
    if (p->mode == FG_PAD_REFLECT && (b >= n || e >= n))
      return fgk_fail(ctx, "dim %d: reflect pads %lld and %lld must be below the dim, %lld", d,
                      (long long)b, (long long)e, (long long)n);
    if (p->mode == FG_PAD_EDGE && n == 0 && (b > 0 || e > 0))
      return fgk_fail(ctx, "dim %d: edge pads %lld and %lld of an empty dim", d, (long long)b,
                      (long long)e);
    if (p->mode != FG_PAD_CONSTANT && p->mode != FG_PAD_REFLECT && p->mode != FG_PAD_EDGE)
      return fgk_fail(ctx, "pad mode %d is not constant, reflect or edge", p->mode);
    m[d] = (fgk_dim_map){p->mode, b, n};
  }
  return 0;
}

int fgk_tile_maps(const fg_kctx *ctx, const fg_kbuf *small, const fg_kbuf *big, fgk_dim_map *m) {
  if (same_rank(ctx, small, big) != 0) return -1;
  for (int d = 0; d < small->rank; d++) {
    const int64_t n = small->dims[d], r = ctx->p->tile.repeats[d];
    /* An empty tensor may carry a huge dim (shape inference saturates
     * n * r when another dim is 0): the product is checked, not trusted. */
    int64_t want;
    if (r < 0 || __builtin_mul_overflow(n, r, &want) || big->dims[d] != want)
      return fgk_fail(ctx, "dim %d: %lld repeated %lld times is not %lld", d, (long long)n,
                      (long long)r, (long long)big->dims[d]);
    m[d] = (fgk_dim_map){FGK_MAP_TILE, 0, n > 0 ? n : 1};
  }
  return 0;
}

uint64_t fgk_pad_value_bits(fg_dtype dt, double v) {
  uint64_t bits = 0;
  switch (dt) {
  case FG_F32: {
    float f = (float)v;
    memcpy(&bits, &f, sizeof f);
    break;
  }
  case FG_F64: memcpy(&bits, &v, sizeof v); break;
  case FG_I32: {
    int32_t i = fgk_f2i32(v);
    memcpy(&bits, &i, sizeof i);
    break;
  }
  case FG_I64: {
    int64_t i = fgk_f2i64(v);
    memcpy(&bits, &i, sizeof i);
    break;
  }
  default: bits = v != 0; break; /* bool */
  }
  return bits;
}

int fgk_split_check(const fg_kctx *ctx) {
  const fg_kbuf *in = &ctx->in[0];
  const int axis = ctx->p->split.axis, R = in->rank;
  if (axis < 0 || axis >= R) return fgk_fail(ctx, "axis %d is out of range [0, %d)", axis, R);
  int64_t total = 0;
  for (int k = 0; k < ctx->n_out; k++) {
    const fg_kbuf *o = &ctx->out[k];
    if (o->dtype != in->dtype || o->rank != R)
      return fgk_fail(ctx, "output %d is %s rank %d, input %s rank %d", k, fg_dtype_name(o->dtype),
                      o->rank, fg_dtype_name(in->dtype), R);
    for (int d = 0; d < R; d++)
      if (d != axis && o->dims[d] != in->dims[d])
        return fgk_fail(ctx, "output %d dim %d is %lld, input's is %lld", k, d,
                        (long long)o->dims[d], (long long)in->dims[d]);
    total += o->dims[axis];
  }
  if (total != in->dims[axis])
    return fgk_fail(ctx, "outputs add up to %lld along axis %d, input has %lld", (long long)total,
                    axis, (long long)in->dims[axis]);
  return 0;
}

int fgk_stack_check(const fg_kctx *ctx) {
  if (fgk_same_dtypes(ctx, ctx->n_in) != 0) return -1;
  const fg_kbuf *out = &ctx->out[0];
  const int axis = ctx->p->stack.axis, R = out->rank;
  if (axis < 0 || axis >= R) return fgk_fail(ctx, "axis %d is out of range [0, %d)", axis, R);
  if (out->dims[axis] != ctx->n_in)
    return fgk_fail(ctx, "output dim %d is %lld for %d inputs", axis, (long long)out->dims[axis],
                    ctx->n_in);
  for (int k = 0; k < ctx->n_in; k++) {
    const fg_kbuf *in = &ctx->in[k];
    int ok = in->rank == R - 1;
    for (int d = 0, j = 0; ok && d < R; d++)
      if (d != axis) ok = in->dims[j++] == out->dims[d];
    if (!ok)
      return fgk_fail(ctx, "input %d does not have the output's dims without axis %d", k, axis);
  }
  return 0;
}

/* ---- the walk over big's elements in C order -------------------------------- */

/* Calls ROW once per row r0 <= r < r1 of big's last dim with `base` (the
 * small offset of the row's mapped outer dims, or -1 when one of them falls
 * in pad's fill), `bo` (the row's offset in big) and `len`. Rank 0 is one
 * row of one element mapped to itself. */
#define WALK_ROWS(big, small, m, r0, r1, ROW)                                                      \
  do {                                                                                             \
    const int R_ = (big)->rank;                                                                    \
    int64_t sst_[FG_MAX_RANK], idx_[FG_MAX_RANK] = {0}, acc_ = 1, rest_ = (r0);                    \
    for (int d_ = R_ - 1; d_ >= 0; d_--) {                                                         \
      sst_[d_] = acc_;                                                                             \
      acc_ *= (small)->dims[d_];                                                                   \
      if (d_ < R_ - 1) {                                                                           \
        idx_[d_] = rest_ % (big)->dims[d_];                                                        \
        rest_ /= (big)->dims[d_];                                                                  \
      }                                                                                            \
    }                                                                                              \
    const int64_t len = R_ ? (big)->dims[R_ - 1] : 1;                                              \
    for (int64_t r_ = (r0); r_ < (r1); r_++) {                                                     \
      int64_t base = 0;                                                                            \
      for (int d_ = 0; d_ < R_ - 1 && base >= 0; d_++) {                                           \
        const int64_t s_ = fgk_map_index((m)[d_], idx_[d_]);                                       \
        base = s_ < 0 ? -1 : base + s_ * sst_[d_];                                                 \
      }                                                                                            \
      const int64_t bo = r_ * len;                                                                 \
      ROW;                                                                                         \
      for (int d_ = R_ - 2; d_ >= 0 && ++idx_[d_] == (big)->dims[d_]; d_--)                        \
        idx_[d_] = 0;                                                                              \
    }                                                                                              \
  } while (0)

/* Rows of big's last dim (1 for rank 0). */
static int64_t rows_of(const fg_kbuf *big) {
  int64_t rows = 1;
  for (int d = 0; d < big->rank - 1; d++)
    rows *= big->dims[d];
  return rows;
}

/* pad and tile: big[o] = small[map(o)], or the fill; rows in parallel
 * (each row is written by one chunk, so any cut gives the same bytes). */
typedef struct gather_job {
  const fg_kbuf *small;
  fg_kbuf *big;
  const fgk_dim_map *m;
  uint64_t fill_bits;
} gather_job;

#define GATHER_RANGE(T, name)                                                                      \
  static void name(void *arg, int64_t r0, int64_t r1) {                                            \
    const gather_job *J = arg;                                                                     \
    const fg_kbuf *small = J->small, *big = J->big;                                                \
    const fgk_dim_map *m = J->m;                                                                   \
    const int R = big->rank;                                                                       \
    const T *s = (const T *)small->data;                                                           \
    T *b = (T *)big->data;                                                                         \
    T fill;                                                                                        \
    memcpy(&fill, &J->fill_bits, sizeof fill);                                                     \
    const fgk_dim_map last = R ? m[R - 1] : (fgk_dim_map){FGK_MAP_TILE, 0, 1};                     \
    WALK_ROWS(big, small, m, r0, r1, {                                                             \
      for (int64_t j = 0; j < len; j++) {                                                          \
        const int64_t i = base < 0 ? -1 : fgk_map_index(last, j);                                  \
        b[bo + j] = i < 0 ? fill : s[base + i];                                                    \
      }                                                                                            \
    });                                                                                            \
  }
GATHER_RANGE(uint8_t, gather_1)
GATHER_RANGE(uint32_t, gather_4)
GATHER_RANGE(uint64_t, gather_8)

static int gather(const fg_kctx *ctx, const fg_kbuf *small, fg_kbuf *big, const fgk_dim_map *m,
                  uint64_t fill_bits) {
  if (fgk_numel(big) == 0) return 0;
  gather_job J = {small, big, m, fill_bits};
  fg_krange_fn range;
  switch (fg_dtype_size(big->dtype)) {
  case 1: range = gather_1; break;
  case 4: range = gather_4; break;
  case 8: range = gather_8; break;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(big->dtype));
  }
  const int64_t len = big->rank ? big->dims[big->rank - 1] : 1;
  const int64_t grain = len >= FGK_GRAIN_CHEAP ? 1 : FGK_GRAIN_CHEAP / len;
  fgk_parallel_for(ctx, rows_of(big), grain, range, &J);
  return 0;
}

/* small = 0, then small[map(o)] += big[o]. */
#define SCATTER_ADD(T)                                                                             \
  do {                                                                                             \
    T *s = (T *)small->data;                                                                       \
    const T *b = (const T *)big->data;                                                             \
    memset(s, 0, (size_t)fgk_numel(small) * sizeof(T));                                            \
    const fgk_dim_map last = R ? m[R - 1] : (fgk_dim_map){FGK_MAP_TILE, 0, 1};                     \
    WALK_ROWS(big, small, m, 0, rows_of(big), {                                                    \
      if (base >= 0)                                                                               \
        for (int64_t j = 0; j < len; j++) {                                                        \
          const int64_t i = fgk_map_index(last, j);                                                \
          if (i >= 0) s[base + i] += b[bo + j];                                                    \
        }                                                                                          \
    });                                                                                            \
  } while (0)

static int scatter_add(const fg_kctx *ctx, fg_kbuf *small, const fg_kbuf *big,
                       const fgk_dim_map *m) {
  const int R = big->rank;
  if (fgk_numel(small) == 0) return 0;
  if (fgk_numel(big) == 0) {
    memset(small->data, 0, (size_t)fgk_numel(small) * fg_dtype_size(small->dtype));
    return 0;
  }
  switch (small->dtype) {
  case FG_F32: SCATTER_ADD(float); break;
  case FG_F64: SCATTER_ADD(double); break;
  case FG_I32: SCATTER_ADD(int32_t); break;
  case FG_I64: SCATTER_ADD(int64_t); break;
  default: return fgk_fail(ctx, "unsupported dtype %s", fg_dtype_name(small->dtype));
  }
  return 0;
}

int fgk_map_op_maps(const fg_kctx *ctx, fgk_maps_fn maps, int grad, fgk_dim_map *m) {
  if (fgk_same_dtypes(ctx, 1) != 0) return -1;
  return grad ? maps(ctx, &ctx->out[0], &ctx->in[0], m) : maps(ctx, &ctx->in[0], &ctx->out[0], m);
}

/* ---- the kernels -------------------------------------------------------------- */

int fgk_pad(const fg_kctx *ctx) {
  fgk_dim_map m[FG_MAX_RANK];
  if (fgk_check(ctx, 1, 1) != 0 || fgk_map_op_maps(ctx, fgk_pad_maps, 0, m) != 0) return -1;
  return gather(ctx, &ctx->in[0], &ctx->out[0], m,
                fgk_pad_value_bits(ctx->out[0].dtype, ctx->p->pad.value));
}

int fgk_tile(const fg_kctx *ctx) {
  fgk_dim_map m[FG_MAX_RANK];
  if (fgk_check(ctx, 1, 1) != 0 || fgk_map_op_maps(ctx, fgk_tile_maps, 0, m) != 0) return -1;
  return gather(ctx, &ctx->in[0], &ctx->out[0], m, 0);
}

/* pad_grad and tile_grad: dy's elements summed into their source. */
static int map_grad(const fg_kctx *ctx, fgk_maps_fn maps) {
  fgk_dim_map m[FG_MAX_RANK];
  if (fgk_check(ctx, 2, 1) != 0 || fgk_map_op_maps(ctx, maps, 1, m) != 0) return -1;
  return scatter_add(ctx, &ctx->out[0], &ctx->in[0], m);
}

int fgk_pad_grad_f32(const fg_kctx *ctx) { return map_grad(ctx, fgk_pad_maps); }
int fgk_pad_grad_f64(const fg_kctx *ctx) { return map_grad(ctx, fgk_pad_maps); }
int fgk_pad_grad_i32(const fg_kctx *ctx) { return map_grad(ctx, fgk_pad_maps); }
int fgk_pad_grad_i64(const fg_kctx *ctx) { return map_grad(ctx, fgk_pad_maps); }
int fgk_tile_grad_f32(const fg_kctx *ctx) { return map_grad(ctx, fgk_tile_maps); }
int fgk_tile_grad_f64(const fg_kctx *ctx) { return map_grad(ctx, fgk_tile_maps); }
int fgk_tile_grad_i32(const fg_kctx *ctx) { return map_grad(ctx, fgk_tile_maps); }
int fgk_tile_grad_i64(const fg_kctx *ctx) { return map_grad(ctx, fgk_tile_maps); }

/* Output k takes its rows of each outer block of the input in turn. */
int fgk_split(const fg_kctx *ctx) {
  if (fgk_check(ctx, 1, ctx->n_out) != 0 || ctx->n_out < 1 || fgk_split_check(ctx) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0];
  const int axis = ctx->p->split.axis;
  const size_t es = fg_dtype_size(in->dtype);
  int64_t outer, inner;
  fgk_axis_split(in, axis, &outer, &inner);
  const size_t row = (size_t)(in->dims[axis] * inner) * es;
  size_t at = 0;
  for (int k = 0; k < ctx->n_out; k++) {
    const size_t chunk = (size_t)(ctx->out[k].dims[axis] * inner) * es;
    for (int64_t o = 0; chunk && o < outer; o++)
      memcpy((char *)ctx->out[k].data + (size_t)o * chunk,
             (const char *)in->data + (size_t)o * row + at, chunk);
    at += chunk;
  }
  return 0;
}

/* Input k is row k of each outer block of the output. */
int fgk_stack(const fg_kctx *ctx) {
  if (fgk_check(ctx, 1, 1) != 0 || fgk_stack_check(ctx) != 0) return -1;
  const fg_kbuf *out = &ctx->out[0];
  const int axis = ctx->p->stack.axis, n = ctx->n_in;
  int64_t outer, inner;
  fgk_axis_split(out, axis, &outer, &inner);
  const size_t chunk = (size_t)inner * fg_dtype_size(out->dtype);
  if (chunk == 0) return 0;
  for (int64_t o = 0; o < outer; o++)
    for (int k = 0; k < n; k++)
      memcpy((char *)out->data + ((size_t)o * (size_t)n + (size_t)k) * chunk,
             (const char *)ctx->in[k].data + (size_t)o * chunk, chunk);
  return 0;
}
