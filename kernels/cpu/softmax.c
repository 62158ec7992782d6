/* softmax and log_softmax along p->axis (any axis), and the fused
 * softmax_cross_entropy loss. All subtract the row maximum before exp so
 * that large logits do not overflow; f32 sums accumulate in double. Rows
 * are split over ctx->par; the loss's sum over rows uses fixed chunks.
 *
 * Contiguous f32 rows (the last axis, the common case) take a vectorisable
 * path: fgk_expf instead of libm, and the row sum in XLANES double
 * accumulators combined in a fixed order, so it depends on the row alone.
 * Short rows go several per call (softmax_rows_f32_contig), with the same
 * bits as one at a time. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

/* One softmax row of n elements `stride` apart; y may alias x. */
#define SOFTMAX_ROW(fn, T, EXP)                                                                    \
  static void fn(const T *x, T *y, int64_t n, int64_t stride, int want_log) {                      \
    T m = x[0];                                                                                    \
    for (int64_t j = 1; j < n; j++) {                                                              \
      const T v = x[j * stride];                                                                   \
      if (v > m || v != v) m = v;                                                                  \
    }                                                                                              \
    double sum = 0;                                                                                \
    if (want_log) {                                                                                \
      for (int64_t j = 0; j < n; j++)                                                              \
        sum += EXP(x[j * stride] - m);                                                             \
      const double lse = (double)m + log(sum);                                                     \
      for (int64_t j = 0; j < n; j++)                                                              \
        y[j * stride] = (T)((double)x[j * stride] - lse);                                          \
    } else {                                                                                       \
      for (int64_t j = 0; j < n; j++) {                                                            \
        const T e = EXP(x[j * stride] - m);                                                        \
        y[j * stride] = e;                                                                         \
        sum += e;                                                                                  \
      }                                                                                            \
      const T inv = (T)(1.0 / sum);                                                                \
      for (int64_t j = 0; j < n; j++)                                                              \
        y[j * stride] *= inv;                                                                      \
    }                                                                                              \
  }

SOFTMAX_ROW(softmax_row_f32, float, fgk_expf)
SOFTMAX_ROW(softmax_row_f64, double, exp)

/* Accumulators of a contiguous row's max and sum; a row is processed in
 * blocks of XBLOCK elements through a local buffer (y may alias x). */
#define XLANES 8
#define XBLOCK 256

/* Lanes of the max: too many for GCC to unroll their loop, which it then
 * vectorises (eight it unrolls into scalar code). The max is exact, so the
 * lanes and the order they are combined in change nothing but the speed. */
#define MLANES 64

/* The maximum of x[0..n), n >= 1; NaN elements are skipped (they make the
 * row's sum NaN, and so every output, as the strided path does). */
FGK_CLONES static float row_max_f32(const float *x, int64_t n) {
  float lane[MLANES];
  for (int k = 0; k < MLANES; k++)
    lane[k] = x[0];
  int64_t j = 0;
  for (; j + MLANES <= n; j += MLANES)
    for (int k = 0; k < MLANES; k++)
      lane[k] = x[j + k] > lane[k] ? x[j + k] : lane[k];
  for (int k = 0; j + k < n; k++)
    lane[k] = x[j + k] > lane[k] ? x[j + k] : lane[k];
  for (int w = MLANES / 2; w > 0; w /= 2) /* halves: no long dependency chain */
    for (int k = 0; k < w; k++)
      lane[k] = lane[k + w] > lane[k] ? lane[k + w] : lane[k];
  return lane[0];
}

/* Adds e[0..len) to the sum of a row: whole groups of XLANES into the
 * lanes (element k of a group into lane k), the rest into *tail, in order. */
static inline void lanes_add(const float *e, int64_t len, double *lane, double *tail) {
  int64_t j = 0;
  for (; j + XLANES <= len; j += XLANES)
    for (int k = 0; k < XLANES; k++)
      lane[k] += (double)e[j + k];
  for (; j < len; j++)
    *tail += (double)e[j];
}

/* The row's sum: the lanes added 0..XLANES-1, then the tail. */
static inline double lanes_total(const double *lane, double tail) {
  double sum = 0;
  for (int k = 0; k < XLANES; k++)
    sum += lane[k];
  return sum + tail;
}

/* e[j] = exp(x[j] - m) for j < n, returning their sum in double: per-lane
 * partials folded in order, then the lanes added 0..XLANES-1. e may be x.
 * A row is summed in blocks of XBLOCK (a multiple of XLANES), so only the
 * last block has a tail. */
FGK_CLONES static double row_expsum_f32(const float *x, float *e, int64_t n, float m, int keep) {
  double lane[XLANES] = {0};
  float buf[XBLOCK];
  double tail = 0;
  for (int64_t j0 = 0; j0 < n; j0 += XBLOCK) {
    const int64_t len = n - j0 < XBLOCK ? n - j0 : XBLOCK;
    for (int64_t j = 0; j < len; j++)
      buf[j] = fgk_expf(x[j0 + j] - m);
    lanes_add(buf, len, lane, &tail);
    if (keep) memcpy(e + j0, buf, (size_t)len * sizeof *buf);
  }
  return lanes_total(lane, tail);
}

FGK_CLONES static void softmax_row_f32_contig(const float *x, float *y, int64_t n, int want_log) {
  const float m = row_max_f32(x, n);
  if (want_log) {
    const double lse = (double)m + log(row_expsum_f32(x, NULL, n, m, 0));
    for (int64_t j = 0; j < n; j++)
      y[j] = (float)((double)x[j] - lse);
  } else {
    const float inv = (float)(1.0 / row_expsum_f32(x, y, n, m, 1));
    for (int64_t j = 0; j < n; j++)
      y[j] *= inv;
  }
}

/* Short rows (C <= XBLOCK) go several at a time, up to SBLOCK elements
 * and SROWS rows per block: each row's max, then exp(x - max) over the
 * whole block in one flat loop (full vectors however short the rows), then
 * each row's sum with lanes_add. A row of C <= XBLOCK is one block of
 * row_expsum_f32, and the same floats are added in the same order, so each
 * row gets the bits the one-row path gives it: they depend on the row
 * alone, not on its neighbours in a block. */
#define SBLOCK 1024
#define SROWS  128

/* Rows per block for rows of C elements: 1 when they take the one-row path. */
static int64_t rows_per_block(int64_t C) {
  if (C > XBLOCK) return 1;
  return SBLOCK / C < SROWS ? SBLOCK / C : SROWS;
}

/* For the nr <= rows_per_block(C) rows of x: m[k] the max of row k (a NaN
 * makes the row's sum NaN, as with row_max_f32), e[k * C + j] =
 * exp(x[k * C + j] - m[k]) and s[k] its row's sum in double. Cloned
 * rather than inline: inlined or not is GCC's choice, and a copy outside
 * the callers' clones would be built for the baseline x86-64. */
FGK_CLONES static void rows_expsum_f32(const float *restrict x, int64_t nr, int64_t C,
                                       float *restrict m, float *restrict e, double *restrict s) {
  /* Rows of MLANES or more by lanes; shorter ones four at a time, so
   * that their max chains interleave. */
  int64_t k = 0;
  if (C >= MLANES)
    for (; k < nr; k++)
      m[k] = row_max_f32(x + k * C, C);
  for (; k + 4 <= nr; k += 4) {
    const float *r = x + k * C;
    float m0 = r[0], m1 = r[C], m2 = r[2 * C], m3 = r[3 * C];
    for (int64_t j = 1; j < C; j++) {
      m0 = r[j] > m0 ? r[j] : m0;
      m1 = r[C + j] > m1 ? r[C + j] : m1;
      m2 = r[2 * C + j] > m2 ? r[2 * C + j] : m2;
      m3 = r[3 * C + j] > m3 ? r[3 * C + j] : m3;
    }
    m[k] = m0;
    m[k + 1] = m1;
    m[k + 2] = m2;
    m[k + 3] = m3;
  }
  for (; k < nr; k++) {
    const float *r = x + k * C;
    float mk = r[0];
    for (int64_t j = 1; j < C; j++)
      mk = r[j] > mk ? r[j] : mk;
    m[k] = mk;
  }
  for (k = 0; k < nr; k++)
    for (int64_t j = 0; j < C; j++)
      e[k * C + j] = x[k * C + j] - m[k];
  for (int64_t i = 0; i < nr * C; i++)
    e[i] = fgk_expf(e[i]);
  for (k = 0; k < nr; k++) {
    double lane[XLANES] = {0}, tail = 0;
    lanes_add(e + k * C, C, lane, &tail);
    s[k] = lanes_total(lane, tail);
  }
}

/* softmax (or log_softmax) of n contiguous rows of C elements; y may
 * alias x. Every row as softmax_row_f32_contig computes it. */
FGK_CLONES static void softmax_rows_f32_contig(const float *x, float *y, int64_t n, int64_t C,
                                               int want_log) {
  const int64_t per = rows_per_block(C);
  if (per == 1) {
    for (int64_t r = 0; r < n; r++)
      softmax_row_f32_contig(x + r * C, y + r * C, C, want_log);
    return;
  }
  float m[SROWS], e[SBLOCK];
  double s[SROWS];
  for (int64_t r0 = 0; r0 < n; r0 += per) {
    const int64_t nr = n - r0 < per ? n - r0 : per;
    const float *xb = x + r0 * C;
    float *yb = y + r0 * C;
    rows_expsum_f32(xb, nr, C, m, e, s);
    for (int64_t k = 0; k < nr; k++) {
      if (want_log) {
        const double lse = (double)m[k] + log(s[k]);
        for (int64_t j = 0; j < C; j++)
          yb[k * C + j] = (float)((double)xb[k * C + j] - lse);
      } else {
        const float inv = (float)(1.0 / s[k]);
        for (int64_t j = 0; j < C; j++)
          yb[k * C + j] = e[k * C + j] * inv;
      }
    }
  }
}

static void softmax_rows_f64_contig(const double *x, double *y, int64_t n, int64_t C,
                                    int want_log) {
  for (int64_t r = 0; r < n; r++)
    softmax_row_f64(x + r * C, y + r * C, C, 1, want_log);
}

typedef struct softmax_job {
  const void *x;
  void *y;
  int64_t A, inner;
} softmax_job;

/* Rows are independent: parallel over the flat row index (outer * inner). */
#define FGK_SOFTMAX(fn, T, DT, ROW, ROWS, WANT_LOG)                                                \
  static void fn##_rows(void *arg, int64_t r0, int64_t r1) {                                       \
    const softmax_job *J = (const softmax_job *)arg;                                               \
    const int64_t A = J->A, inner = J->inner;                                                      \
    if (inner == 1) {                                                                              \
      ROWS((const T *)J->x + r0 * A, (T *)J->y + r0 * A, r1 - r0, A, WANT_LOG);                    \
      return;                                                                                      \
    }                                                                                              \
    for (int64_t r = r0; r < r1; r++) {                                                            \
      const int64_t start = (r / inner) * A * inner + r % inner;                                   \
      ROW((const T *)J->x + start, (T *)J->y + start, A, inner, WANT_LOG);                         \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_check(ctx, 1, 1) != 0) return -1;                                                      \
    const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];                                          \
    if (in->dtype != DT || out->dtype != DT)                                                       \
      return fgk_fail(ctx, "expected %s input and output, got %s and %s", fg_dtype_name(DT),       \
                      fg_dtype_name(in->dtype), fg_dtype_name(out->dtype));                        \
    const int axis = ctx->p->softmax.axis;                                                         \
    if (axis < 0 || axis >= in->rank)                                                              \
      return fgk_fail(ctx, "axis %d is out of range [0, %d)", axis, in->rank);                     \
    const int64_t n = fgk_numel(in);                                                               \
    if (fgk_numel(out) != n)                                                                       \
      return fgk_fail(ctx, "input has %lld elements, output %lld", (long long)n,                   \
                      (long long)fgk_numel(out));                                                  \
    if (n == 0) return 0;                                                                          \
    int64_t outer = 1, inner = 1;                                                                  \
    const int64_t A = in->dims[axis];                                                              \
    for (int i = 0; i < axis; i++)                                                                 \
      outer *= in->dims[i];                                                                        \
    for (int i = axis + 1; i < in->rank; i++)                                                      \
      inner *= in->dims[i];                                                                        \
    softmax_job J = {in->data, out->data, A, inner};                                               \
    fgk_parallel_for(ctx, outer *inner, A >= FGK_GRAIN_MATH ? 1 : FGK_GRAIN_MATH / A, fn##_rows,   \
                     &J);                                                                          \
    return 0;                                                                                      \
  }

FGK_SOFTMAX(fgk_softmax_f32, float, FG_F32, softmax_row_f32, softmax_rows_f32_contig, 0)
FGK_SOFTMAX(fgk_softmax_f64, double, FG_F64, softmax_row_f64, softmax_rows_f64_contig, 0)
FGK_SOFTMAX(fgk_log_softmax_f32, float, FG_F32, softmax_row_f32, softmax_rows_f32_contig, 1)
FGK_SOFTMAX(fgk_log_softmax_f64, double, FG_F64, softmax_row_f64, softmax_rows_f64_contig, 1)

/* Reads label n as int64 from an i32 or i64 buffer. */
static inline int64_t label_at(const fg_kbuf *labels, int64_t n) {
  return labels->dtype == FG_I32 ? (int64_t)((const int32_t *)labels->data)[n]
                                 : ((const int64_t *)labels->data)[n];
}

/* The loss's row sum uses fixed chunks of rows: about XENT_CHUNK elements
 * each, at most XENT_PARTIALS of them (rows grow beyond that), both from
 * the shape alone. Each chunk sums its rows' losses in order from 0 and the
 * chunk sums add up in order, so the result is the same for any thread
 * count; up to one chunk of rows it is the plain row-order sum. */
#define XENT_CHUNK    8192
#define XENT_PARTIALS 1024

/* logsumexp of one contiguous row of C >= 1 logits, in double. */
static double lse_f64(const double *row, int64_t C) {
  double m = row[0];
  for (int64_t j = 1; j < C; j++)
    if (row[j] > m || row[j] != row[j]) m = row[j];
  double s = 0;
  for (int64_t j = 0; j < C; j++)
    s += exp(row[j] - m);
  return m + log(s);
}
static double lse_f32(const float *row, int64_t C) {
  const float m = row_max_f32(row, C);
  return (double)m + log(row_expsum_f32(row, NULL, C, m, 0));
}

/* lse[k] for the n <= SROWS contiguous rows of x, C each. Short f32 rows
 * go by blocks as in softmax_rows_f32_contig (the same bits as lse_f32). */
static void lse_rows_f64(const double *x, int64_t n, int64_t C, double *lse) {
  for (int64_t k = 0; k < n; k++)
    lse[k] = lse_f64(x + k * C, C);
}
FGK_CLONES static void lse_rows_f32(const float *x, int64_t n, int64_t C, double *lse) {
  const int64_t per = rows_per_block(C);
  if (per == 1) {
    for (int64_t k = 0; k < n; k++)
      lse[k] = lse_f32(x + k * C, C);
    return;
  }
  float m[SROWS], e[SBLOCK];
  double s[SROWS];
  for (int64_t r0 = 0; r0 < n; r0 += per) {
    const int64_t nr = n - r0 < per ? n - r0 : per;
    rows_expsum_f32(x + r0 * C, nr, C, m, e, s);
    for (int64_t k = 0; k < nr; k++)
      lse[r0 + k] = (double)m[k] + log(s[k]);
  }
}

typedef struct xent_job {
  const void *x;
  const fg_kbuf *labels;
  int64_t N, C, rows; /* rows per chunk */
  double *parts;
} xent_job;

/* Every label in [0, C), or -1 naming the first that is not. */
static int labels_in_range(const fg_kctx *ctx) {
  const fg_kbuf *lg = &ctx->in[0], *lb = &ctx->in[1];
  const int64_t N = lg->dims[0], C = lg->dims[1];
  for (int64_t n = 0; n < N; n++) {
    const int64_t l = label_at(lb, n);
    if (l < 0 || l >= C)
      return fgk_fail(ctx, "labels[%lld] = %lld is out of range [0, %lld)", (long long)n,
                      (long long)l, (long long)C);
  }
  return 0;
}

/* The loss's buffers: dtypes and shapes. Shared with kernels/cuda/softmax.cu. */
int fgk_xent_check(const fg_kctx *ctx, fg_dtype dt) {
  const fg_kbuf *lg = &ctx->in[0], *lb = &ctx->in[1], *out = &ctx->out[0];
  if (lg->dtype != dt || out->dtype != dt)
    return fgk_fail(ctx, "expected %s logits and output, got %s and %s", fg_dtype_name(dt),
                    fg_dtype_name(lg->dtype), fg_dtype_name(out->dtype));
  if (lb->dtype != FG_I32 && lb->dtype != FG_I64)
    return fgk_fail(ctx, "labels must be i32 or i64, got %s", fg_dtype_name(lb->dtype));
  if (lg->rank != 2 || lb->rank != 1 || lb->dims[0] != lg->dims[0])
    return fgk_fail(ctx, "expected logits [N, C] and labels [N], got ranks %d and %d", lg->rank,
                    lb->rank);
  if (fgk_numel(out) != 1)
    return fgk_fail(ctx, "output must hold one element, has %lld", (long long)fgk_numel(out));
  return 0;
}

/* The buffers, then every label, before any arithmetic. */
static int xent_check(const fg_kctx *ctx, fg_dtype dt) {
  return fgk_xent_check(ctx, dt) != 0 ? -1 : labels_in_range(ctx);
}

/* J->rows for N > 0 rows of C > 0; the number of chunks. */
static int64_t xent_chunks(xent_job *J) {
  J->rows = J->C >= XENT_CHUNK ? 1 : XENT_CHUNK / J->C;
  if ((J->N - 1) / J->rows + 1 > XENT_PARTIALS) J->rows = (J->N - 1) / XENT_PARTIALS + 1;
  return (J->N - 1) / J->rows + 1;
}

/* The chunks' sums added in chunk order, over N. */
static double xent_mean(const double *parts, int64_t n_chunks, int64_t N) {
  double total = 0;
  for (int64_t c = 0; c < n_chunks; c++)
    total += parts[c];
  return total / (double)N;
}

/* softmax_cross_entropy(logits [N, C], labels [N] i32/i64) -> scalar:
 * mean over rows of logsumexp(row) - row[label], in double. N == 0 gives
 * NaN (the mean of nothing, as NumPy). Every label is checked before any
 * arithmetic. */
#define FGK_XENT(fn, T, DT, LSE_ROWS)                                                              \
  static void fn##_chunks(void *arg, int64_t c0, int64_t c1) {                                     \
    const xent_job *J = (const xent_job *)arg;                                                     \
    const int64_t C = J->C;                                                                        \
    for (int64_t c = c0; c < c1; c++) {                                                            \
      const int64_t n0 = c * J->rows, n1 = J->N - n0 > J->rows ? n0 + J->rows : J->N;              \
      double total = 0, lse[SROWS];                                                                \
      for (int64_t b0 = n0; b0 < n1; b0 += SROWS) {                                                \
        const int64_t nb = n1 - b0 < SROWS ? n1 - b0 : SROWS;                                      \
        LSE_ROWS((const T *)J->x + b0 * C, nb, C, lse);                                            \
        for (int64_t n = b0; n < b0 + nb; n++)                                                     \
          total += lse[n - b0] - (double)((const T *)J->x)[n * C + label_at(J->labels, n)];        \
      }                                                                                            \
      J->parts[c] = total;                                                                         \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_check(ctx, 2, 1) != 0 || xent_check(ctx, DT) != 0) return -1;                          \
    const fg_kbuf *lg = &ctx->in[0];                                                               \
    T *o = (T *)ctx->out[0].data;                                                                  \
    if (lg->dims[0] == 0) {                                                                        \
      o[0] = (T)NAN;                                                                               \
      return 0;                                                                                    \
    }                                                                                              \
    double parts[XENT_PARTIALS];                                                                   \
    xent_job J = {lg->data, &ctx->in[1], lg->dims[0], lg->dims[1], 0, parts};                      \
    const int64_t n_chunks = xent_chunks(&J);                                                      \
    fgk_parallel_for(ctx, n_chunks, 1, fn##_chunks, &J);                                           \
    o[0] = (T)xent_mean(parts, n_chunks, J.N);                                                     \
    return 0;                                                                                      \
  }

FGK_XENT(fgk_softmax_xent_f32, float, FG_F32, lse_rows_f32)
FGK_XENT(fgk_softmax_xent_f64, double, FG_F64, lse_rows_f64)

/* softmax_cross_entropy_grad(logits [N, C], labels [N], dy scalar) ->
 * [N, C]: (softmax(row) - one_hot(label)) * (dy / N), a block of rows at a
 * time (one row when they are long). The arithmetic is that of the nodes it
 * stands for (the softmax rows above, the very function the softmax kernel
 * runs, the subtraction of a 1 or 0, dy divided by N in the logits' dtype,
 * then the product), so it gives their bits. */
typedef struct xent_grad_job {
  const void *x;
  void *y;
  const fg_kbuf *labels;
  int64_t C;
  double scale; /* holds a value of the kernel's type exactly */
} xent_grad_job;

/* A gradient row from its softmax values p (in y): (p - one_hot(l)) *
 * scale, the subtraction of a 1 or 0 and then the product, as the nodes it
 * stands for compute them. */
#define XENT_ONEHOT_ROW(T)                                                                         \
  static inline void xent_onehot_row_##T(T *y, int64_t C, int64_t l, T scale) {                    \
    for (int64_t j = 0; j < C; j++)                                                                \
      y[j] = (y[j] - (j == l ? (T)1 : (T)0)) * scale;                                              \
  }
XENT_ONEHOT_ROW(float)
XENT_ONEHOT_ROW(double)

#define FGK_XENT_GRAD(fn, T, DT, ROWS)                                                             \
  static void fn##_rows(void *arg, int64_t r0, int64_t r1) {                                       \
    const xent_grad_job *J = (const xent_grad_job *)arg;                                           \
    const int64_t C = J->C;                                                                        \
    const T scale = (T)J->scale;                                                                   \
    const int64_t per = rows_per_block(C);                                                         \
    for (int64_t b0 = r0; b0 < r1; b0 += per) {                                                    \
      const int64_t nb = r1 - b0 < per ? r1 - b0 : per;                                            \
      ROWS((const T *)J->x + b0 * C, (T *)J->y + b0 * C, nb, C, 0);                                \
      for (int64_t r = b0; r < b0 + nb; r++)                                                       \
        xent_onehot_row_##T((T *)J->y + r * C, C, label_at(J->labels, r), scale);                  \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_check(ctx, 3, 1) != 0 || xent_grad_check(ctx, DT) != 0) return -1;                     \
    const fg_kbuf *lg = &ctx->in[0];                                                               \
    const int64_t N = lg->dims[0], C = lg->dims[1];                                                \
    if (N == 0) return 0;                                                                          \
    const T scale = *(const T *)ctx->in[2].data / (T)N;                                            \
    xent_grad_job J = {lg->data, ctx->out[0].data, &ctx->in[1], C, (double)scale};                 \
    fgk_parallel_for(ctx, N, C >= FGK_GRAIN_MATH ? 1 : FGK_GRAIN_MATH / C, fn##_rows, &J);         \
    return 0;                                                                                      \
  }

/* The buffers' dtypes and shapes. Shared with kernels/cuda/softmax.cu. */
int fgk_xent_grad_check(const fg_kctx *ctx, fg_dtype dt) {
  const fg_kbuf *lg = &ctx->in[0], *lb = &ctx->in[1], *dy = &ctx->in[2], *out = &ctx->out[0];
  if (lg->dtype != dt || dy->dtype != dt || out->dtype != dt)
    return fgk_fail(ctx, "expected %s logits, dy and output, got %s, %s and %s", fg_dtype_name(dt),
                    fg_dtype_name(lg->dtype), fg_dtype_name(dy->dtype), fg_dtype_name(out->dtype));
  if (lb->dtype != FG_I32 && lb->dtype != FG_I64)
    return fgk_fail(ctx, "labels must be i32 or i64, got %s", fg_dtype_name(lb->dtype));
  if (lg->rank != 2 || lb->rank != 1 || lb->dims[0] != lg->dims[0])
    return fgk_fail(ctx, "expected logits [N, C] and labels [N], got ranks %d and %d", lg->rank,
                    lb->rank);
  if (fgk_numel(dy) != 1)
    return fgk_fail(ctx, "dy must hold one element, has %lld", (long long)fgk_numel(dy));
  if (fgk_numel(out) != fgk_numel(lg))
    return fgk_fail(ctx, "output has %lld elements, logits %lld", (long long)fgk_numel(out),
                    (long long)fgk_numel(lg));
  return 0;
}

/* The buffers, then every label, before any arithmetic. */
static int xent_grad_check(const fg_kctx *ctx, fg_dtype dt) {
  return fgk_xent_grad_check(ctx, dt) != 0 ? -1 : labels_in_range(ctx);
}

FGK_XENT_GRAD(fgk_softmax_xent_grad_f32, float, FG_F32, softmax_rows_f32_contig)
FGK_XENT_GRAD(fgk_softmax_xent_grad_f64, double, FG_F64, softmax_rows_f64_contig)

/* softmax_cross_entropy_and_grad(logits [N, C], labels [N]) -> loss, and
 * (softmax(row) - one_hot(label)) / N, by the loss's chunks of rows: each
 * chunk makes its part of the loss and its rows of the gradient. In f32
 * each row's max, exp(x - max) and sum are made once for both (the very
 * functions and blocks of rows of the two kernels above, so the same
 * bits: the loss adds (double)max + log(sum) - x[label] row by row, the
 * gradient is (e * (float)(1 / sum) - one_hot) * (1 / N)); in f64 the two
 * kernels' own functions run on the chunk in turn, while it is in cache. */
typedef struct xent_both_job {
  xent_job loss;
  xent_grad_job grad;
} xent_both_job;

/* A row's gradient from its exps e and inverse sum, into y (may be e):
 * its softmax values, as the softmax kernel stores them, then the
 * gradient kernel's one-hot step on them. */
static inline void xent_grad_row_f32(const float *e, float inv, int64_t C, int64_t l, float scale,
                                     float *y) {
  for (int64_t j = 0; j < C; j++)
    y[j] = e[j] * inv;
  xent_onehot_row_float(y, C, l, scale);
}

FGK_CLONES static void xent_and_grad_chunk_f32(const xent_both_job *J, int64_t c) {
  const int64_t C = J->loss.C, n0 = c * J->loss.rows;
  const int64_t n1 = J->loss.N - n0 > J->loss.rows ? n0 + J->loss.rows : J->loss.N;
  const float *x = (const float *)J->loss.x;
  float *y = (float *)J->grad.y;
  const float scale = (float)J->grad.scale;
  const int64_t per = rows_per_block(C);
  double total = 0;
  float m[SROWS], e[SBLOCK];
  double s[SROWS];
  for (int64_t b0 = n0; b0 < n1; b0 += per) {
    const int64_t nb = n1 - b0 < per ? n1 - b0 : per;
    if (per == 1) {
      /* A long row: its exps go to its gradient row, then scaled there. */
      m[0] = row_max_f32(x + b0 * C, C);
      s[0] = row_expsum_f32(x + b0 * C, y + b0 * C, C, m[0], 1);
    } else {
      rows_expsum_f32(x + b0 * C, nb, C, m, e, s);
    }
    for (int64_t k = 0; k < nb; k++) {
      const int64_t r = b0 + k, l = label_at(J->loss.labels, r);
      total += ((double)m[k] + log(s[k])) - (double)x[r * C + l];
      xent_grad_row_f32(per == 1 ? y + r * C : e + k * C, (float)(1.0 / s[k]), C, l, scale,
                        y + r * C);
    }
  }
  J->loss.parts[c] = total;
}

static void xent_and_grad_chunk_f64(const xent_both_job *J, int64_t c) {
  const int64_t rows = J->loss.rows, N = J->loss.N;
  fgk_softmax_xent_f64_chunks((void *)&J->loss, c, c + 1);
  fgk_softmax_xent_grad_f64_rows((void *)&J->grad, c * rows,
                                 N - c * rows > rows ? (c + 1) * rows : N);
}

#define FGK_XENT_AND_GRAD(fn, T, DT, CHUNK)                                                        \
  static void fn##_chunks(void *arg, int64_t c0, int64_t c1) {                                     \
    for (int64_t c = c0; c < c1; c++)                                                              \
      CHUNK((const xent_both_job *)arg, c);                                                        \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_check(ctx, 2, 2) != 0 || xent_check(ctx, DT) != 0) return -1;                          \
    const fg_kbuf *lg = &ctx->in[0], *dx = &ctx->out[1];                                           \
    if (dx->dtype != DT || fgk_numel(dx) != fgk_numel(lg))                                         \
      return fgk_fail(ctx, "output 1 must be %s with the logits' %lld elements, is %s with %lld",  \
                      fg_dtype_name(DT), (long long)fgk_numel(lg), fg_dtype_name(dx->dtype),       \
                      (long long)fgk_numel(dx));                                                   \
    const int64_t N = lg->dims[0], C = lg->dims[1];                                                \
    if (N == 0) {                                                                                  \
      *(T *)ctx->out[0].data = (T)NAN;                                                             \
      return 0;                                                                                    \
    }                                                                                              \
    double parts[XENT_PARTIALS];                                                                   \
    xent_both_job J = {{lg->data, &ctx->in[1], N, C, 0, parts},                                    \
                       {lg->data, dx->data, &ctx->in[1], C, (double)((T)1 / (T)N)}};               \
    const int64_t n_chunks = xent_chunks(&J.loss);                                                 \
    fgk_parallel_for(ctx, n_chunks, 1, fn##_chunks, &J);                                           \
    *(T *)ctx->out[0].data = (T)xent_mean(parts, n_chunks, N);                                     \
    return 0;                                                                                      \
  }

FGK_XENT_AND_GRAD(fgk_softmax_xent_and_grad_f32, float, FG_F32, xent_and_grad_chunk_f32)
FGK_XENT_AND_GRAD(fgk_softmax_xent_and_grad_f64, double, FG_F64, xent_and_grad_chunk_f64)
