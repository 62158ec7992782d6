/* logsumexp over p->reduce's axes, cumsum along an axis, topk and its
 * gradient topk_grad. (reduce_min, reduce_prod and argmin are reduce.c's
 * folds with other operations.)
 *
 * Each output element is computed by one thread in a fixed order, so the
 * results are bitwise the same for any thread count. f32 sums accumulate in
 * double, as torch's CPU kernels do for logsumexp's and cumsum's sums, and
 * integer running sums in uint64, wrapping. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

/* Neighbouring columns of one outer position done together (cumsum), their
 * accumulators on the stack. */
#define R2_CHUNK 256
/* Input elements per parallel chunk, at least. */
#define R2_GRAIN 16384

static int64_t r2_grain(int64_t per_item) {
  return per_item >= R2_GRAIN ? 1 : R2_GRAIN / (per_item > 0 ? per_item : 1);
}

/* ---- logsumexp ----------------------------------------------------------- */

/* torch.logsumexp: m + log(sum(exp(x - m))) with m the maximum, or 0 where
 * the maximum is infinite (all -inf gives log(0) = -inf; a +inf gives +inf).
 * A NaN anywhere gives NaN. The empty set gives -inf. */
typedef struct lse_job {
  fgk_red_plan pl;
  const void *in;
  void *out;
} lse_job;

#define FGK_LOGSUMEXP(fn, T, DT)                                                                   \
  static void fn##_range(void *arg, int64_t t0, int64_t t1) {                                      \
    const lse_job *J = (const lse_job *)arg;                                                       \
    const fgk_red_plan *pl = &J->pl;                                                               \
    const T *in = (const T *)J->in;                                                                \
    int64_t ocnt[FG_MAX_RANK], rcnt[FG_MAX_RANK];                                                  \
    for (int64_t t = t0; t < t1; t++) {                                                            \
      const int64_t op = t / pl->inner, c = t - op * pl->inner;                                    \
      const T *base =                                                                              \
          in + fgk_walk_seek(pl->n_outer, pl->outer_dims, pl->outer_str, op, ocnt) + c;            \
      double m = -INFINITY, s = 0;                                                                 \
      int64_t off = fgk_walk_seek(pl->n_red, pl->red_dims, pl->red_str, 0, rcnt);                  \
      for (int64_t r = 0; r < pl->count; r++) {                                                    \
        if ((double)base[off] > m) m = (double)base[off];                                          \
        fgk_walk_next(pl->n_red, pl->red_dims, pl->red_str, rcnt, &off);                           \
      }                                                                                            \
      const double shift = isinf(m) ? 0.0 : m;                                                     \
      off = fgk_walk_seek(pl->n_red, pl->red_dims, pl->red_str, 0, rcnt);                          \
      for (int64_t r = 0; r < pl->count; r++) {                                                    \
        s += exp((double)base[off] - shift);                                                       \
        fgk_walk_next(pl->n_red, pl->red_dims, pl->red_str, rcnt, &off);                           \
      }                                                                                            \
      ((T *)J->out)[t] = (T)(shift + log(s));                                                      \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    lse_job J;                                                                                     \
    memset(&J, 0, sizeof J);                                                                       \
    const int rc = fgk_red_plan_init(ctx, DT, &J.pl);                                              \
    if (rc < 0) return -1;                                                                         \
    T *out = (T *)ctx->out[0].data;                                                                \
    const int64_t n = fgk_numel(&ctx->out[0]);                                                     \
    if (rc == 0) { /* nothing to write, or sums of nothing */                                      \
      for (int64_t i = 0; i < n; i++)                                                              \
        out[i] = (T)-INFINITY;                                                                     \
      return 0;                                                                                    \
    }                                                                                              \
    J.in = ctx->in[0].data;                                                                        \
    J.out = out;                                                                                   \
    fgk_parallel_for(ctx, n, r2_grain(2 * J.pl.count), fn##_range, &J);                            \
    return 0;                                                                                      \
  }

FGK_LOGSUMEXP(fgk_logsumexp_f32, float, FG_F32)
FGK_LOGSUMEXP(fgk_logsumexp_f64, double, FG_F64)

/* ---- cumsum -------------------------------------------------------------- */

int fgk_cumsum_check(const fg_kctx *ctx, fg_dtype dt, int64_t *outer, int64_t *A, int64_t *inner) {
  if (fgk_check(ctx, 1, 1) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  const int axis = ctx->p->cumsum.axis;
  if (in->dtype != dt || out->dtype != dt)
    return fgk_fail(ctx, "expected %s input and output, got %s and %s", fg_dtype_name(dt),
                    fg_dtype_name(in->dtype), fg_dtype_name(out->dtype));
  if (axis < 0 || axis >= in->rank)
    return fgk_fail(ctx, "axis %d is out of range [0, %d)", axis, in->rank);
  if (fgk_numel(out) != fgk_numel(in))
    return fgk_fail(ctx, "output has %lld elements, the input %lld", (long long)fgk_numel(out),
                    (long long)fgk_numel(in));
  fgk_axis_split(in, axis, outer, inner);
  *A = in->dims[axis];
  return 0;
}

typedef struct cumsum_job {
  const void *x;
  void *o;
  int64_t A, inner, n_cc;
  int exclusive, reverse;
} cumsum_job;

/* Group g: outer position g / n_cc, columns of chunk g % n_cc; the axis is
 * walked in order (backwards when reverse), each column its own sum. */
#define FGK_CUMSUM(fn, T, DT, ACC, OUT)                                                            \
  static void fn##_groups(void *arg, int64_t g0, int64_t g1) {                                     \
    const cumsum_job *J = (const cumsum_job *)arg;                                                 \
    const int64_t A = J->A, inner = J->inner;                                                      \
    ACC acc[R2_CHUNK];                                                                             \
    for (int64_t g = g0; g < g1; g++) {                                                            \
      const int64_t op = g / J->n_cc, c0 = (g % J->n_cc) * R2_CHUNK;                               \
      const int64_t nc = inner - c0 < R2_CHUNK ? inner - c0 : R2_CHUNK;                            \
      const T *x = (const T *)J->x + op * A * inner + c0;                                          \
      T *o = (T *)J->o + op * A * inner + c0;                                                      \
      for (int64_t j = 0; j < nc; j++)                                                             \
        acc[j] = 0;                                                                                \
      for (int64_t s = 0; s < A; s++) {                                                            \
        const int64_t row = (J->reverse ? A - 1 - s : s) * inner;                                  \
        for (int64_t j = 0; j < nc; j++) {                                                         \
          const ACC v = (ACC)x[row + j];                                                           \
          if (!J->exclusive) acc[j] += v;                                                          \
          o[row + j] = OUT(acc[j]);                                                                \
          if (J->exclusive) acc[j] += v;                                                           \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    int64_t outer, A, inner;                                                                       \
    if (fgk_cumsum_check(ctx, DT, &outer, &A, &inner) != 0) return -1;                             \
    if (outer * A * inner == 0) return 0;                                                          \
    cumsum_job J = {                                                                               \
        ctx->in[0].data,          ctx->out[0].data,      A, inner, (inner - 1) / R2_CHUNK + 1,     \
        ctx->p->cumsum.exclusive, ctx->p->cumsum.reverse};                                         \
    const int64_t per = A * (inner < R2_CHUNK ? inner : R2_CHUNK);                                 \
    fgk_parallel_for(ctx, outer *J.n_cc, r2_grain(per), fn##_groups, &J);                          \
    return 0;                                                                                      \
  }

#define CS_F32(a) ((float)(a))
#define CS_F64(a) (a)
#define CS_I32(a) ((int32_t)(uint32_t)(a))
#define CS_I64(a) ((int64_t)(a))
FGK_CUMSUM(fgk_cumsum_f32, float, FG_F32, double, CS_F32)
FGK_CUMSUM(fgk_cumsum_f64, double, FG_F64, double, CS_F64)
FGK_CUMSUM(fgk_cumsum_i32, int32_t, FG_I32, uint64_t, CS_I32)
FGK_CUMSUM(fgk_cumsum_i64, int64_t, FG_I64, uint64_t, CS_I64)

/* ---- topk ------------------------------------------------------------------ */

int fgk_topk_check(const fg_kctx *ctx, fg_dtype dt, int64_t *outer, int64_t *A, int64_t *inner) {
  if (fgk_check(ctx, 1, 2) != 0) return -1;
  const fg_kbuf *x = &ctx->in[0], *v = &ctx->out[0], *ix = &ctx->out[1];
  const int axis = ctx->p->topk.axis;
  const int64_t k = ctx->p->topk.k;
  if (x->dtype != dt || v->dtype != dt || ix->dtype != FG_I64)
    return fgk_fail(ctx, "expected %s input and values and i64 indices, got %s, %s and %s",
                    fg_dtype_name(dt), fg_dtype_name(x->dtype), fg_dtype_name(v->dtype),
                    fg_dtype_name(ix->dtype));
  if (axis < 0 || axis >= x->rank)
    return fgk_fail(ctx, "axis %d is out of range [0, %d)", axis, x->rank);
  if (k < 0 || k > x->dims[axis])
    return fgk_fail(ctx, "k = %lld is out of range [0, %lld] (input 0's dim %d)", (long long)k,
                    (long long)x->dims[axis], axis);
  int bad = v->rank != x->rank || ix->rank != x->rank;
  for (int d = 0; !bad && d < x->rank; d++)
    bad = v->dims[d] != (d == axis ? k : x->dims[d]) || ix->dims[d] != v->dims[d];
  if (bad) return fgk_fail(ctx, "the outputs' shapes are not the input's with k at axis %d", axis);
  fgk_axis_split(x, axis, outer, inner);
  *A = x->dims[axis];
  return 0;
}

typedef struct topk_job {
  const void *x;
  void *v;
  int64_t *ix;
  int64_t A, inner, k;
  int largest;
} topk_job;

/* TK_BETTER: (a, i) comes before (b, j). A NaN is larger than any number
 * (torch.topk): first when largest, last otherwise. Equal values, NaNs
 * included, go by the lower index. */
#define TK_BETTER(a, i, b, j, largest)                                                             \
  (((a) != (a) || (b) != (b)) ? (((a) != (a)) && ((b) != (b)) ? (i) < (j)                          \
                                 : (largest)                  ? (a) != (a)                         \
                                                              : (b) != (b))                                         \
   : (a) != (b)               ? ((largest) ? (a) > (b) : (a) < (b))                                \
                              : (i) < (j))

/* Row r's k best in its own slots of the outputs (stride inner), kept as a
 * heap whose root is the worst kept (O(A log k), no memory of its own), then
 * heap-sorted into best-first order. */
#define FGK_TOPK(fn, T, DT)                                                                        \
  static void fn##_sift(T *v, int64_t *ix, int64_t st, int64_t n, int64_t i, int largest) {        \
    for (;;) {                                                                                     \
      int64_t w = i;                                                                               \
      for (int64_t c = 2 * i + 1; c <= 2 * i + 2 && c < n; c++)                                    \
        if (TK_BETTER(v[w * st], ix[w * st], v[c * st], ix[c * st], largest)) w = c;               \
      if (w == i) return;                                                                          \
      const T tv = v[i * st];                                                                      \
      const int64_t ti = ix[i * st];                                                               \
      v[i * st] = v[w * st], ix[i * st] = ix[w * st];                                              \
      v[w * st] = tv, ix[w * st] = ti;                                                             \
      i = w;                                                                                       \
    }                                                                                              \
  }                                                                                                \
  static void fn##_rows(void *arg, int64_t r0, int64_t r1) {                                       \
    const topk_job *J = (const topk_job *)arg;                                                     \
    const int64_t A = J->A, st = J->inner, k = J->k;                                               \
    const int lg = J->largest;                                                                     \
    for (int64_t r = r0; r < r1; r++) {                                                            \
      const int64_t op = r / st, c = r - op * st;                                                  \
      const T *x = (const T *)J->x + op * A * st + c;                                              \
      T *v = (T *)J->v + op * k * st + c;                                                          \
      int64_t *ix = J->ix + op * k * st + c;                                                       \
      for (int64_t a = 0; a < A; a++) {                                                            \
        const T xv = x[a * st];                                                                    \
        if (a < k) { /* grow: sift the new leaf up past better parents */                          \
          int64_t i = a;                                                                           \
          while (i > 0 && TK_BETTER(v[(i - 1) / 2 * st], ix[(i - 1) / 2 * st], xv, a, lg)) {       \
            v[i * st] = v[(i - 1) / 2 * st], ix[i * st] = ix[(i - 1) / 2 * st];                    \
            i = (i - 1) / 2;                                                                       \
          }                                                                                        \
          v[i * st] = xv, ix[i * st] = a;                                                          \
        } else if (k > 0 && TK_BETTER(xv, a, v[0], ix[0], lg)) {                                   \
          v[0] = xv, ix[0] = a;                                                                    \
          fn##_sift(v, ix, st, k, 0, lg);                                                          \
        }                                                                                          \
      }                                                                                            \
      for (int64_t n = k; n > 1; n--) { /* the worst of n to slot n - 1 */                         \
        const T tv = v[0];                                                                         \
        const int64_t ti = ix[0];                                                                  \
        v[0] = v[(n - 1) * st], ix[0] = ix[(n - 1) * st];                                          \
        v[(n - 1) * st] = tv, ix[(n - 1) * st] = ti;                                               \
        fn##_sift(v, ix, st, n - 1, 0, lg);                                                        \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    int64_t outer, A, inner;                                                                       \
    if (fgk_topk_check(ctx, DT, &outer, &A, &inner) != 0) return -1;                               \
    const int64_t k = ctx->p->topk.k;                                                              \
    if (outer * inner * k == 0) return 0;                                                          \
    topk_job J = {ctx->in[0].data,     ctx->out[0].data, (int64_t *)ctx->out[1].data, A, inner, k, \
                  ctx->p->topk.largest};                                                           \
    fgk_parallel_for(ctx, outer *inner, r2_grain(A), fn##_rows, &J);                               \
    return 0;                                                                                      \
  }

FGK_TOPK(fgk_topk_f32, float, FG_F32)
FGK_TOPK(fgk_topk_f64, double, FG_F64)
FGK_TOPK(fgk_topk_i32, int32_t, FG_I32)
FGK_TOPK(fgk_topk_i64, int64_t, FG_I64)

/* ---- topk_grad ------------------------------------------------------------- */

/* dy [.., K, ..] and indices of its shape, like [.., A, ..] (any dtype: only
 * its shape is read): the output, like's shape, is zero but for dy added at
 * each index along p->topk.axis. An index outside [0, A) fails naming it.
 * One thread: the work is one pass over dy and one over the output. */
int fgk_topk_grad_check(const fg_kctx *ctx, fg_dtype dt, int64_t *outer, int64_t *A, int64_t *K,
                        int64_t *inner) {
  if (fgk_check(ctx, 3, 1) != 0) return -1;
  const fg_kbuf *dy = &ctx->in[0], *ix = &ctx->in[1], *like = &ctx->in[2], *out = &ctx->out[0];
  const int axis = ctx->p->topk.axis;
  if (dy->dtype != dt || out->dtype != dt || ix->dtype != FG_I64)
    return fgk_fail(ctx, "expected %s dy and output and i64 indices, got %s, %s and %s",
                    fg_dtype_name(dt), fg_dtype_name(dy->dtype), fg_dtype_name(out->dtype),
                    fg_dtype_name(ix->dtype));
  if (axis < 0 || axis >= like->rank || dy->rank != like->rank || ix->rank != like->rank ||
      out->rank != like->rank)
    return fgk_fail(ctx, "axis %d and ranks %d, %d, %d, %d do not fit", axis, dy->rank, ix->rank,
                    like->rank, out->rank);
  for (int d = 0; d < like->rank; d++)
    if (ix->dims[d] != dy->dims[d] || out->dims[d] != like->dims[d] ||
        (d != axis && dy->dims[d] != like->dims[d]) || dy->dims[d] > like->dims[d])
      return fgk_fail(ctx, "dy, indices and like disagree at dim %d (%lld, %lld, %lld)", d,
                      (long long)dy->dims[d], (long long)ix->dims[d], (long long)like->dims[d]);
  fgk_axis_split(like, axis, outer, inner);
  *A = like->dims[axis];
  *K = dy->dims[axis];
  return 0;
}

/* One thread: the work is one pass over dy and one over the output. An
 * index is checked before anything is written. */
#define FGK_TOPK_GRAD(fn, T, DT)                                                                   \
  int fn(const fg_kctx *ctx) {                                                                     \
    int64_t outer, A, K, inner;                                                                    \
    if (fgk_topk_grad_check(ctx, DT, &outer, &A, &K, &inner) != 0) return -1;                      \
    const int64_t *idx = (const int64_t *)ctx->in[1].data;                                         \
    const int64_t n_dy = outer * K * inner;                                                        \
    for (int64_t e = 0; e < n_dy; e++)                                                             \
      if (idx[e] < 0 || idx[e] >= A)                                                               \
        return fgk_fail(ctx, "indices[%lld] = %lld is out of range [0, %lld)", (long long)e,       \
                        (long long)idx[e], (long long)A);                                          \
    T *o = (T *)ctx->out[0].data;                                                                  \
    const T *g = (const T *)ctx->in[0].data;                                                       \
    memset(o, 0, (size_t)fgk_numel(&ctx->out[0]) * sizeof(T));                                     \
    for (int64_t e = 0; e < n_dy; e++) {                                                           \
      const int64_t op = e / (K * inner), c = e % inner;                                           \
      o[(op * A + idx[e]) * inner + c] += g[e];                                                    \
    }                                                                                              \
    return 0;                                                                                      \
  }

FGK_TOPK_GRAD(fgk_topk_grad_f32, float, FG_F32)
FGK_TOPK_GRAD(fgk_topk_grad_f64, double, FG_F64)
