/* Reductions (reduce_sum, reduce_mean, reduce_max over p->axes) and argmax.
 *
 * Determinism: every output element is a left fold over its reduced
 * elements in row-major order, starting from the identity, whatever the
 * shape or the chunking below; f32 sums and means accumulate in double.
 *
 * The input dims are first coalesced into alternating kept/reduced groups
 * (size-1 dims dropped, neighbours of the same kind merged). When the
 * innermost group is reduced, each output is one contiguous fold; when it is
 * kept, a chunk of neighbouring outputs is folded together over contiguous
 * input rows, with the accumulators on the stack (no allocation). */
#include <math.h>

#include "kernels/cpu/cpu_kernels.h"

#define RED_CHUNK 256

typedef struct red_plan {
  int n_outer, n_red;
  int64_t outer_dims[FG_MAX_RANK], outer_str[FG_MAX_RANK];
  int64_t red_dims[FG_MAX_RANK], red_str[FG_MAX_RANK];
  int64_t outer_total; /* output elements / inner */
  int64_t inner;       /* innermost kept group (stride 1), or 1 */
  int64_t count;       /* reduced elements per output */
} red_plan;

/* Returns 1 when there is work, 0 when the output is empty or the input is
 * (the caller then writes the empty-set value), -1 on error. */
static int red_plan_init(const fg_kctx *ctx, fg_dtype dt, red_plan *pl) {
  if (fgk_check(ctx, 1, 1) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  const fg_kparams *p = ctx->p;
  if (in->dtype != dt || out->dtype != dt)
    return fgk_fail(ctx, "expected %s input and output, got %s and %s", fg_dtype_name(dt),
                    fg_dtype_name(in->dtype), fg_dtype_name(out->dtype));
  const int R = in->rank;
  if (p->n_axes < 0 || p->n_axes > R)
    return fgk_fail(ctx, "%d axes for a rank-%d input", p->n_axes, R);
  int reduced[FG_MAX_RANK] = {0};
  for (int i = 0; i < p->n_axes; i++) {
    if (p->axes[i] < 0 || p->axes[i] >= R)
      return fgk_fail(ctx, "axis %d is out of range [0, %d)", p->axes[i], R);
    reduced[p->axes[i]] = 1;
  }
  int64_t kept = 1, count = 1;
  for (int i = 0; i < R; i++) {
    if (reduced[i])
      count *= in->dims[i];
    else
      kept *= in->dims[i];
  }
  if (fgk_numel(out) != kept)
    return fgk_fail(ctx, "output has %lld elements, the reduction gives %lld",
                    (long long)fgk_numel(out), (long long)kept);
  pl->count = count;
  if (kept == 0 || count == 0) return 0;

  int n = 0, kind[FG_MAX_RANK];
  int64_t gd[FG_MAX_RANK], gs[FG_MAX_RANK], st = 1, str[FG_MAX_RANK];
  for (int i = R - 1; i >= 0; i--) {
    str[i] = st;
    st *= in->dims[i];
  }
  for (int i = 0; i < R; i++) {
    if (in->dims[i] == 1) continue;
    if (n > 0 && kind[n - 1] == reduced[i]) {
      gd[n - 1] *= in->dims[i];
      gs[n - 1] = str[i];
    } else {
      kind[n] = reduced[i];
      gd[n] = in->dims[i];
      gs[n] = str[i];
      n++;
    }
  }
  pl->inner = 1;
  if (n > 0 && !kind[n - 1]) pl->inner = gd[--n];
  pl->n_outer = pl->n_red = 0;
  pl->outer_total = 1;
  for (int g = 0; g < n; g++) {
    if (kind[g]) {
      pl->red_dims[pl->n_red] = gd[g];
      pl->red_str[pl->n_red++] = gs[g];
    } else {
      pl->outer_dims[pl->n_outer] = gd[g];
      pl->outer_str[pl->n_outer++] = gs[g];
      pl->outer_total *= gd[g];
    }
  }
  return 1;
}

/* Advances counters over dims[0..n) and the matching offset. */
static inline void red_next(int n, const int64_t *dims, const int64_t *str, int64_t *cnt,
                            int64_t *off) {
  for (int d = n - 1; d >= 0; d--) {
    *off += str[d];
    if (++cnt[d] < dims[d]) return;
    *off -= str[d] * dims[d];
    cnt[d] = 0;
  }
}

/* COMBINE(acc, x) folds one element; FINISH(acc) gives the output value
 * and may use `count`, the number of reduced elements. */
#define FGK_REDUCE(fn, T, DT, ACC, INIT, COMBINE, FINISH)                                          \
  int fn(const fg_kctx *ctx) {                                                                     \
    red_plan pl;                                                                                   \
    const int rc = red_plan_init(ctx, DT, &pl);                                                    \
    if (rc < 0) return -1;                                                                         \
    const int64_t count = pl.count;                                                                \
    (void)count;                                                                                   \
    T *out = (T *)ctx->out[0].data;                                                                \
    if (rc == 0) { /* the empty set, or nothing to write */                                        \
      const int64_t n = fgk_numel(&ctx->out[0]);                                                   \
      for (int64_t i = 0; i < n; i++) {                                                            \
        ACC acc = INIT;                                                                            \
        out[i] = FINISH(acc);                                                                      \
      }                                                                                            \
      return 0;                                                                                    \
    }                                                                                              \
    const T *in = (const T *)ctx->in[0].data;                                                      \
    const int nr = pl.n_red;                                                                       \
    int64_t ocnt[FG_MAX_RANK] = {0}, obase = 0;                                                    \
    for (int64_t op = 0; op < pl.outer_total; op++) {                                              \
      T *orow = out + op * pl.inner;                                                               \
      const T *ibase = in + obase;                                                                 \
      if (pl.inner == 1) {                                                                         \
        /* The last reduced group is innermost, so contiguous. */                                  \
        const int64_t len = nr > 0 ? pl.red_dims[nr - 1] : 1;                                      \
        int64_t rows = 1;                                                                          \
        for (int d = 0; d < nr - 1; d++) rows *= pl.red_dims[d];                                   \
        int64_t rcnt[FG_MAX_RANK] = {0}, roff = 0;                                                 \
        ACC acc = INIT;                                                                            \
        for (int64_t r = 0; r < rows; r++) {                                                       \
          const T *src = ibase + roff;                                                             \
          for (int64_t j = 0; j < len; j++) COMBINE(acc, src[j]);                                  \
          red_next(nr - 1, pl.red_dims, pl.red_str, rcnt, &roff);                                  \
        }                                                                                          \
        orow[0] = FINISH(acc);                                                                     \
      } else {                                                                                     \
        for (int64_t c0 = 0; c0 < pl.inner; c0 += RED_CHUNK) {                                     \
          const int64_t nc = pl.inner - c0 < RED_CHUNK ? pl.inner - c0 : RED_CHUNK;                \
          ACC acc[RED_CHUNK];                                                                      \
          for (int64_t j = 0; j < nc; j++) acc[j] = INIT;                                          \
          int64_t rcnt[FG_MAX_RANK] = {0}, roff = 0;                                               \
          for (int64_t r = 0; r < count; r++) {                                                    \
            const T *src = ibase + roff + c0;                                                      \
            for (int64_t j = 0; j < nc; j++) COMBINE(acc[j], src[j]);                              \
            red_next(nr, pl.red_dims, pl.red_str, rcnt, &roff);                                    \
          }                                                                                        \
          for (int64_t j = 0; j < nc; j++) orow[c0 + j] = FINISH(acc[j]);                          \
        }                                                                                          \
      }                                                                                            \
      red_next(pl.n_outer, pl.outer_dims, pl.outer_str, ocnt, &obase);                             \
    }                                                                                              \
    return 0;                                                                                      \
  }

#define SUM(acc, x) ((acc) += (x))
#define USUM(acc, x) ((acc) += (uint64_t)(x))
/* NaN wins once seen (np.max); `x != x` is false for integers. */
#define RMAX(acc, x)                                                                               \
  do {                                                                                             \
    if ((x) > (acc) || (x) != (x)) (acc) = (x);                                                    \
  } while (0)
#define AS_F32(acc) ((float)(acc))
#define AS_SELF(acc) (acc)
#define AS_I32(acc) ((int32_t)(uint32_t)(acc))
#define AS_I64(acc) ((int64_t)(acc))
#define MEAN_F32(acc) (count == 0 ? NAN : (float)((acc) / (double)count))
#define MEAN_F64(acc) (count == 0 ? NAN : (acc) / (double)count)
/* Integer means stay integers (as TensorFlow's reduce_mean): the exact sum
 * (mod 2^64) divided by the count, truncated toward zero; empty gives 0. */
#define MEAN_I32(acc) (count == 0 ? 0 : (int32_t)((int64_t)(acc) / count))
#define MEAN_I64(acc) (count == 0 ? 0 : (int64_t)(acc) / count)

FGK_REDUCE(fgk_reduce_sum_f32, float, FG_F32, double, 0.0, SUM, AS_F32)
FGK_REDUCE(fgk_reduce_sum_f64, double, FG_F64, double, 0.0, SUM, AS_SELF)
FGK_REDUCE(fgk_reduce_sum_i32, int32_t, FG_I32, uint64_t, 0, USUM, AS_I32)
FGK_REDUCE(fgk_reduce_sum_i64, int64_t, FG_I64, uint64_t, 0, USUM, AS_I64)
FGK_REDUCE(fgk_reduce_mean_f32, float, FG_F32, double, 0.0, SUM, MEAN_F32)
FGK_REDUCE(fgk_reduce_mean_f64, double, FG_F64, double, 0.0, SUM, MEAN_F64)
FGK_REDUCE(fgk_reduce_mean_i32, int32_t, FG_I32, uint64_t, 0, USUM, MEAN_I32)
FGK_REDUCE(fgk_reduce_mean_i64, int64_t, FG_I64, uint64_t, 0, USUM, MEAN_I64)
/* The max of an empty set is -inf for floats and the type's minimum for
 * integers (NumPy refuses it; a graph engine needs some value). */
FGK_REDUCE(fgk_reduce_max_f32, float, FG_F32, float, -INFINITY, RMAX, AS_SELF)
FGK_REDUCE(fgk_reduce_max_f64, double, FG_F64, double, -INFINITY, RMAX, AS_SELF)
FGK_REDUCE(fgk_reduce_max_i32, int32_t, FG_I32, int32_t, INT32_MIN, RMAX, AS_SELF)
FGK_REDUCE(fgk_reduce_max_i64, int64_t, FG_I64, int64_t, INT64_MIN, RMAX, AS_SELF)

/* argmax along p->axis: i64 output, the input without that dim. The first
 * index of the maximum wins; a NaN counts as the maximum (the first NaN),
 * as in np.argmax. Keyed by the input dtype. */
#define FGK_ARGMAX(fn, T, DT)                                                                      \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_check(ctx, 1, 1) != 0) return -1;                                                      \
    const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];                                          \
    if (in->dtype != DT || out->dtype != FG_I64)                                                   \
      return fgk_fail(ctx, "expected a %s input and an i64 output, got %s and %s",                 \
                      fg_dtype_name(DT), fg_dtype_name(in->dtype), fg_dtype_name(out->dtype));  \
    const int axis = ctx->p->axis;                                                                 \
    if (axis < 0 || axis >= in->rank)                                                              \
      return fgk_fail(ctx, "axis %d is out of range [0, %d)", axis, in->rank);                     \
    int64_t outer = 1, inner = 1;                                                                  \
    const int64_t A = in->dims[axis];                                                              \
    for (int i = 0; i < axis; i++) outer *= in->dims[i];                                           \
    for (int i = axis + 1; i < in->rank; i++) inner *= in->dims[i];                                \
    if (fgk_numel(out) != outer * inner)                                                           \
      return fgk_fail(ctx, "output has %lld elements, expected %lld",                              \
                      (long long)fgk_numel(out), (long long)(outer * inner));                      \
    if (outer * inner == 0) return 0;                                                              \
    if (A == 0) return fgk_fail(ctx, "argmax over axis %d, which has size 0", axis);               \
    const T *x = (const T *)in->data;                                                              \
    int64_t *o = (int64_t *)out->data;                                                             \
    for (int64_t op = 0; op < outer; op++) {                                                       \
      const T *base = x + op * A * inner;                                                          \
      for (int64_t c0 = 0; c0 < inner; c0 += RED_CHUNK) {                                          \
        const int64_t nc = inner - c0 < RED_CHUNK ? inner - c0 : RED_CHUNK;                        \
        T best[RED_CHUNK];                                                                         \
        int64_t *idx = o + op * inner + c0;                                                        \
        for (int64_t j = 0; j < nc; j++) {                                                         \
          best[j] = base[c0 + j];                                                                  \
          idx[j] = 0;                                                                              \
        }                                                                                          \
        for (int64_t a = 1; a < A; a++) {                                                          \
          const T *row = base + a * inner + c0;                                                    \
          for (int64_t j = 0; j < nc; j++) {                                                       \
            const T v = row[j];                                                                    \
            if (v > best[j] || (v != v && best[j] == best[j])) {                                   \
              best[j] = v;                                                                         \
              idx[j] = a;                                                                          \
            }                                                                                      \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
    return 0;                                                                                      \
  }

FGK_ARGMAX(fgk_argmax_f32, float, FG_F32)
FGK_ARGMAX(fgk_argmax_f64, double, FG_F64)
FGK_ARGMAX(fgk_argmax_i32, int32_t, FG_I32)
FGK_ARGMAX(fgk_argmax_i64, int64_t, FG_I64)
