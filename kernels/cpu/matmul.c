/* matmul: out[..., M, N] = op(a)[..., M, K] @ op(b)[..., K, N], where op
 * transposes the last two dims when transpose_a / transpose_b is set and the
 * leading (batch) dims broadcast NumPy-style to out's. Floats go to OpenBLAS
 * one GEMM per batch (one GEMM in all when b is shared by every batch and a
 * is not transposed: a's batches then stack into one taller matrix). */
#include <cblas.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

typedef struct mm_plan {
  int64_t M, N, K;
  int ta, tb;
  int nb; /* batch rank (out rank - 2) */
  int64_t bdims[FG_MAX_RANK];
  int64_t a_bstride[FG_MAX_RANK], b_bstride[FG_MAX_RANK]; /* 0 where broadcast */
  int64_t batch, a_batch, b_batch;                          /* matrices in out, a, b */
} mm_plan;

/* Element strides of x's batch dims, right-aligned to out's nb batch dims. */
static int batch_strides(const fg_kctx *ctx, const fg_kbuf *x, int which, const mm_plan *pl,
                         int64_t *st, int64_t *count) {
  const int xb = x->rank - 2;
  int64_t s = x->dims[x->rank - 1] * x->dims[x->rank - 2];
  *count = 1;
  for (int i = pl->nb - 1; i >= 0; i--) {
    const int j = i - (pl->nb - xb);
    const int64_t d = j >= 0 ? x->dims[j] : 1;
    if (d == pl->bdims[i] && d != 1)
      st[i] = s;
    else if (d == 1)
      st[i] = 0;
    else
      return fgk_fail(ctx, "input %d batch dim %d (%lld) does not broadcast to output dim %d "
                      "(%lld)", which, j, (long long)d, i, (long long)pl->bdims[i]);
    s *= d;
    *count *= d;
  }
  return 0;
}

static int mm_plan_init(const fg_kctx *ctx, fg_dtype dt, mm_plan *pl) {
  if (fgk_check(ctx, 2, 1) != 0) return -1;
  const fg_kbuf *a = &ctx->in[0], *b = &ctx->in[1], *o = &ctx->out[0];
  if (a->dtype != dt || b->dtype != dt || o->dtype != dt)
    return fgk_fail(ctx, "expected %s inputs and output, got %s, %s and %s", fg_dtype_name(dt),
                    fg_dtype_name(a->dtype), fg_dtype_name(b->dtype), fg_dtype_name(o->dtype));
  if (a->rank < 2 || b->rank < 2 || o->rank < 2)
    return fgk_fail(ctx, "inputs and output need rank >= 2, got %d, %d and %d", a->rank, b->rank,
                    o->rank);
  if (a->rank > o->rank || b->rank > o->rank)
    return fgk_fail(ctx, "input ranks %d and %d exceed the output rank %d", a->rank, b->rank,
                    o->rank);
  pl->ta = ctx->p->transpose_a != 0;
  pl->tb = ctx->p->transpose_b != 0;
  const int64_t a0 = a->dims[a->rank - 2], a1 = a->dims[a->rank - 1];
  const int64_t b0 = b->dims[b->rank - 2], b1 = b->dims[b->rank - 1];
  pl->M = pl->ta ? a1 : a0;
  pl->K = pl->ta ? a0 : a1;
  const int64_t kb = pl->tb ? b1 : b0;
  pl->N = pl->tb ? b0 : b1;
  if (kb != pl->K)
    return fgk_fail(ctx, "inner dims differ: a gives K = %lld, b gives K = %lld",
                    (long long)pl->K, (long long)kb);
  if (o->dims[o->rank - 2] != pl->M || o->dims[o->rank - 1] != pl->N)
    return fgk_fail(ctx, "output is [..., %lld, %lld], expected [..., %lld, %lld]",
                    (long long)o->dims[o->rank - 2], (long long)o->dims[o->rank - 1],
                    (long long)pl->M, (long long)pl->N);
  pl->nb = o->rank - 2;
  pl->batch = 1;
  for (int i = 0; i < pl->nb; i++) {
    pl->bdims[i] = o->dims[i];
    pl->batch *= o->dims[i];
  }
  if (batch_strides(ctx, a, 0, pl, pl->a_bstride, &pl->a_batch) != 0) return -1;
  if (batch_strides(ctx, b, 1, pl, pl->b_bstride, &pl->b_batch) != 0) return -1;
  return 0;
}

/* Advances the batch counters and a's and b's matrix offsets to the next
 * output batch, without dividing. */
static void mm_next(const mm_plan *pl, int64_t *cnt, int64_t *ao, int64_t *bo) {
  for (int d = pl->nb - 1; d >= 0; d--) {
    *ao += pl->a_bstride[d];
    *bo += pl->b_bstride[d];
    if (++cnt[d] < pl->bdims[d]) return;
    *ao -= pl->a_bstride[d] * pl->bdims[d];
    *bo -= pl->b_bstride[d] * pl->bdims[d];
    cnt[d] = 0;
  }
}

static int fits_blasint(int64_t x) { return (int64_t)(blasint)x == x; }

#define FGK_MATMUL_BLAS(fn, T, DT, GEMM)                                                           \
  int fn(const fg_kctx *ctx) {                                                                     \
    mm_plan pl;                                                                                    \
    if (mm_plan_init(ctx, DT, &pl) != 0) return -1;                                                \
    const int64_t total = fgk_numel(&ctx->out[0]);                                                 \
    if (total == 0) return 0;                                                                      \
    T *o = (T *)ctx->out[0].data;                                                                  \
    /* K == 0 is an empty sum; BLAS would want lda >= 1 for matrices without data. */              \
    if (pl.K == 0) {                                                                               \
      memset(o, 0, (size_t)total * sizeof(T));                                                     \
      return 0;                                                                                    \
    }                                                                                              \
    const T *a = (const T *)ctx->in[0].data, *b = (const T *)ctx->in[1].data;                      \
    int64_t M = pl.M, batches = pl.batch;                                                          \
    if (!pl.ta && pl.b_batch == 1 && pl.a_batch == pl.batch) {                                     \
      M *= pl.batch;                                                                               \
      batches = 1;                                                                                 \
    }                                                                                              \
    if (!fits_blasint(M) || !fits_blasint(pl.N) || !fits_blasint(pl.K))                            \
      return fgk_fail(ctx, "matrix dims %lld x %lld x %lld exceed the BLAS index type",            \
                      (long long)M, (long long)pl.N, (long long)pl.K);                             \
    const blasint m = (blasint)M, n = (blasint)pl.N, k = (blasint)pl.K;                            \
    const blasint lda = pl.ta ? m : k, ldb = pl.tb ? k : n;                                        \
    const enum CBLAS_TRANSPOSE tra = pl.ta ? CblasTrans : CblasNoTrans;                            \
    const enum CBLAS_TRANSPOSE trb = pl.tb ? CblasTrans : CblasNoTrans;                            \
    int64_t cnt[FG_MAX_RANK] = {0}, ao = 0, bo = 0;                                                \
    for (int64_t bi = 0; bi < batches; bi++) {                                                     \
      GEMM(CblasRowMajor, tra, trb, m, n, k, 1, a + ao, lda, b + bo, ldb, 0, o + bi * M * pl.N,    \
           n);                                                                                     \
      mm_next(&pl, cnt, &ao, &bo);                                                                 \
    }                                                                                              \
    return 0;                                                                                      \
  }

FGK_MATMUL_BLAS(fgk_matmul_f32, float, FG_F32, cblas_sgemm)
FGK_MATMUL_BLAS(fgk_matmul_f64, double, FG_F64, cblas_dgemm)

/* Integers have no BLAS: a plain i-k-j loop (row-major friendly), wrapping
 * on overflow through unsigned arithmetic like the binary integer ops. */
#define FGK_MATMUL_INT(fn, T, U, DT)                                                               \
  int fn(const fg_kctx *ctx) {                                                                     \
    mm_plan pl;                                                                                    \
    if (mm_plan_init(ctx, DT, &pl) != 0) return -1;                                                \
    if (fgk_numel(&ctx->out[0]) == 0) return 0;                                                    \
    const int64_t M = pl.M, N = pl.N, K = pl.K;                                                    \
    int64_t cnt[FG_MAX_RANK] = {0}, ao = 0, bo = 0;                                                \
    for (int64_t bi = 0; bi < pl.batch; bi++) {                                                    \
      const T *a = (const T *)ctx->in[0].data + ao, *b = (const T *)ctx->in[1].data + bo;          \
      T *o = (T *)ctx->out[0].data + bi * M * N;                                                   \
      for (int64_t i = 0; i < M; i++) {                                                            \
        T *orow = o + i * N;                                                                       \
        for (int64_t j = 0; j < N; j++) orow[j] = 0;                                               \
        for (int64_t kk = 0; kk < K; kk++) {                                                       \
          const U aik = (U)(pl.ta ? a[kk * M + i] : a[i * K + kk]);                                \
          for (int64_t j = 0; j < N; j++)                                                          \
            orow[j] = (T)((U)orow[j] + aik * (U)(pl.tb ? b[j * K + kk] : b[kk * N + j]));          \
        }                                                                                          \
      }                                                                                            \
      mm_next(&pl, cnt, &ao, &bo);                                                                 \
    }                                                                                              \
    return 0;                                                                                      \
  }

FGK_MATMUL_INT(fgk_matmul_i32, int32_t, uint32_t, FG_I32)
FGK_MATMUL_INT(fgk_matmul_i64, int64_t, uint64_t, FG_I64)
