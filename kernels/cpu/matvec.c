/* Products with at most FGK_MV_MAX_M rows: a forward pass at batch 1 is a
 * chain of them, and each reads its weights (b) once, so the time is that
 * of reading b. Packed GEMM tiles spend it packing b and running
 * micro-kernels sized for many rows; here b is streamed straight from
 * memory instead.
 *
 * The output columns are cut into chunks, one item of ctx->par each (per
 * batch), so threads read disjoint parts of b. Every output element is
 * computed by the same operations in the same order whatever chunk holds
 * it, so the results do not depend on the chunking nor the thread count:
 * - b not transposed ([K, N] row-major): rows of b stream through, each
 *   added into the chunk's outputs (which stay in L1) as out += a[m][k] *
 *   b[k][j], k in order;
 * - b transposed ([N, K]): one dot product per output over contiguous
 *   rows of a and b, in MV_LANES partial sums (lane l takes the k = l mod
 *   MV_LANES terms of the whole blocks, in order), folded lane 0 first,
 *   then the leftover terms.
 * fused_matmul's epilogue (matvec.h) runs on each span of columns right
 * after its sums, while the span's outputs are still in L1.
 *
 * A large b not transposed, in a single product, is cut by rows instead
 * (mv_ksplit): part p sums the terms of rows [K p / P, K (p + 1) / P) of b,
 * k in order, part 0 into the outputs and the others into a buffer, then
 * the outputs add the other parts in order, and the epilogue follows. A
 * thread then streams whole rows of b, one contiguous run of memory, where
 * a column chunk reads part of each row and skips the rest, which read
 * slower on two threads. P comes from the shape alone, so the bits still do
 * not depend on the thread count.
 * The hot loops are built per instruction set (FGK_CLONES): at 8 rows the
 * arithmetic, not the read of b, bounds them, and the baseline's SSE2 took
 * 1.3 to 1.8 times as long as AVX-512 there. Without fused multiply-adds
 * the clones give the same bits. */
#include "kernels/cpu/matvec.h"

#include <string.h>

/* The outputs a chunk accumulates stay in L1 while b streams by. */
#define MV_ACC_BYTES (16 << 10)
/* A b of this size or more is split over at least MV_MIN_PARTS chunks, so
 * both threads of a two-core machine take part; smaller ones run as one
 * item (a wake-up costs microseconds). No more than that: a chunk reads
 * only its part of each row of b, and 4 or 8 narrower chunks made the
 * large MLP's batch-1 forward slower on 1 and on 2 threads. */
#define MV_SPLIT_BYTES (256 << 10)
#define MV_MIN_PARTS   2
/* Items (batches of a batched product) are handed out at least this many
 * multiply-adds at a time: tens of microseconds. */
#define MV_MIN_MACS (1 << 16)
/* Rows of b added per pass over the outputs (see MV_ROWS). */
#define MV_PASS 8

/* Row parts of mv_ksplit, and the most bytes their partial outputs take. */
#define MV_KPARTS       2
#define MV_KSPLIT_BYTES (64 << 10)

/* Partial sums of a dot product: a vector register's worth or two. */
#define MV_LANES 32

typedef struct mv_work {
  const fgk_mv_job *J;
  int64_t w, parts; /* chunk width (columns), chunks per product */
  int64_t cap;      /* the widest span of columns one call runs */
} mv_work;

static int64_t ceil_div(int64_t a, int64_t b) { return (a - 1) / b + 1; }

/* o[m][0..w) = sum_k a[m][k] * b[k][0..w) for m < M, with a[m][k] at
 * a[m * sam + k * sak] and rows of b (and of o) N apart. MV_PASS rows of b
 * per pass over o cut its loads and stores, and keep that many streams of b
 * in flight (8 read a thread's half of each row faster than 4 or 2 did);
 * the terms are still added one at a time, k in order. */
#define MV_ROWS(name, T)                                                                           \
  FGK_CLONES static void name(const T *a, int64_t sam, int64_t sak, const T *b, T *o, int64_t M,   \
                              int64_t K, int64_t N, int64_t w) {                                   \
    for (int64_t m = 0; m < M; m++)                                                                \
      memset(o + m * N, 0, (size_t)w * sizeof(T));                                                 \
    int64_t k = 0;                                                                                 \
    for (; k + MV_PASS <= K; k += MV_PASS) {                                                       \
      const T *bp[MV_PASS];                                                                        \
      for (int r = 0; r < MV_PASS; r++)                                                            \
        bp[r] = b + (k + r) * N;                                                                   \
      for (int64_t m = 0; m < M; m++) {                                                            \
        T av[MV_PASS];                                                                             \
        for (int r = 0; r < MV_PASS; r++)                                                          \
          av[r] = a[m * sam + (k + r) * sak];                                                      \
        T *restrict om = o + m * N;                                                                \
        for (int64_t j = 0; j < w; j++) {                                                          \
          T s = om[j];                                                                             \
          for (int r = 0; r < MV_PASS; r++)                                                        \
            s = s + av[r] * bp[r][j];                                                              \
          om[j] = s;                                                                               \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
    for (; k < K; k++) {                                                                           \
      const T *restrict bk = b + k * N;                                                            \
      for (int64_t m = 0; m < M; m++) {                                                            \
        const T am = a[m * sam + k * sak];                                                         \
        T *restrict om = o + m * N;                                                                \
        for (int64_t j = 0; j < w; j++)                                                            \
          om[j] = om[j] + am * bk[j];                                                              \
      }                                                                                            \
    }                                                                                              \
  }
MV_ROWS(mv_rows_f32, float)
MV_ROWS(mv_rows_f64, double)

/* o[m][n] = dot(a[m][0..K), b[n][0..K)) for m < M, n < w; rows of a and b
 * are K long, rows of o N apart. */
#define MV_DOTS(name, T)                                                                           \
  FGK_CLONES static void name(const T *a, const T *b, T *o, int64_t M, int64_t K, int64_t N,       \
                              int64_t w) {                                                         \
    const int64_t kb = K / MV_LANES * MV_LANES;                                                    \
    for (int64_t n = 0; n < w; n++) {                                                              \
      const T *restrict bn = b + n * K;                                                            \
      T acc[FGK_MV_MAX_M][MV_LANES];                                                               \
      memset(acc, 0, (size_t)M * sizeof acc[0]);                                                   \
      for (int64_t k = 0; k < kb; k += MV_LANES)                                                   \
        for (int64_t m = 0; m < M; m++)                                                            \
          for (int l = 0; l < MV_LANES; l++)                                                       \
            acc[m][l] = acc[m][l] + a[m * K + k + l] * bn[k + l];                                  \
      for (int64_t m = 0; m < M; m++) {                                                            \
        T s = 0;                                                                                   \
        for (int l = 0; l < MV_LANES; l++)                                                         \
          s = s + acc[m][l];                                                                       \
        for (int64_t k = kb; k < K; k++)                                                           \
          s = s + a[m * K + k] * bn[k];                                                            \
        o[m * N + n] = s;                                                                          \
      }                                                                                            \
    }                                                                                              \
  }
MV_DOTS(mv_dots_f32, float)
MV_DOTS(mv_dots_f64, double)

/* Items are (batch, column chunk). The consecutive chunks of one batch in
 * [i0, i1) run as one span of columns, cut at W->cap columns: on one thread
 * (ctx->par NULL) rows of b are then read whole, which streams faster than
 * a chunk's part of each row. */
#define MV_ITEMS(name, T, DT, ROWS, DOTS)                                                          \
  static void name(void *arg, int64_t i0, int64_t i1) {                                            \
    const mv_work *W = (const mv_work *)arg;                                                       \
    const fgk_mv_job *J = W->J;                                                                    \
    for (int64_t it = i0; it < i1;) {                                                              \
      const int64_t bi = it / W->parts, p1 = i1 - bi * W->parts;                                   \
      const int64_t c1 = p1 < W->parts ? p1 * W->w : J->N;                                         \
      int64_t ao = 0, bo = 0, oo = 0; /* no plan: one stacked product */                           \
      if (J->pl) fgk_mm_seek(J->pl, bi, &ao, &bo, &oo);                                            \
      const T *a = (const T *)J->a + ao, *b = (const T *)J->b + bo;                                \
      T *o = (T *)J->o + oo;                                                                       \
      for (int64_t c0 = it % W->parts * W->w; c0 < c1; c0 += W->cap) {                             \
        const int64_t w = c1 - c0 < W->cap ? c1 - c0 : W->cap;                                     \
        if (J->tb)                                                                                 \
          DOTS(a, b + c0 * J->K, o + c0, J->M, J->K, J->N, w);                                     \
        else                                                                                       \
          ROWS(a, J->ta ? 1 : J->K, J->ta ? J->M : 1, b + c0, o + c0, J->M, J->K, J->N, w);        \
        /* The span's outputs are still in L1. */                                                  \
        if (J->epi) fgk_mm_epilogue_apply(DT, J->epi, o + c0, J->N, J->M, c0, w);                  \
      }                                                                                            \
      it = (bi + 1) * W->parts;                                                                    \
    }                                                                                              \
  }
MV_ITEMS(mv_items_f32, float, FG_F32, mv_rows_f32, mv_dots_f32)
MV_ITEMS(mv_items_f64, double, FG_F64, mv_rows_f64, mv_dots_f64)

/* Chunk width from the shape alone: a multiple of 16 columns, at most
 * MV_ACC_BYTES of outputs, and at least MV_MIN_PARTS chunks of a large b.
 * A dot product keeps its sums in registers: its spans need no cap. */
static void mv_chunks(const fgk_mv_job *J, size_t es, mv_work *W) {
  const int64_t acc_cols = MV_ACC_BYTES / (J->M * (int64_t)es) / 16 * 16;
  int64_t parts = ceil_div(J->N, acc_cols);
  if ((double)J->K * (double)J->N * (double)es >= MV_SPLIT_BYTES && parts < MV_MIN_PARTS)
    parts = MV_MIN_PARTS;
  W->w = ceil_div(ceil_div(J->N, parts), 16) * 16;
  W->parts = ceil_div(J->N, W->w);
  W->cap = J->tb ? J->N : acc_cols > W->w ? acc_cols : W->w;
}

/* mv_ksplit's partial outputs: the calling thread's, written by the items
 * of its parallel loop, which returns before the buffer is read. */
static _Thread_local _Alignas(64) unsigned char mv_part_buf[MV_KSPLIT_BYTES];

typedef struct mv_kwork {
  const fgk_mv_job *J;
  int64_t w, cparts; /* column chunk width and count (chunks keep outputs in L1) */
  void *part;        /* outputs of row parts 1.., M x N each */
} mv_kwork;

/* Items are (row part, column chunk), row part major. */
#define MV_KITEMS(name, T, ROWS)                                                                   \
  static void name(void *arg, int64_t i0, int64_t i1) {                                            \
    const mv_kwork *W = (const mv_kwork *)arg;                                                     \
    const fgk_mv_job *J = W->J;                                                                    \
    const int64_t sam = J->ta ? 1 : J->K, sak = J->ta ? J->M : 1;                                  \
    for (int64_t it = i0; it < i1; it++) {                                                         \
      const int64_t p = it / W->cparts, c0 = it % W->cparts * W->w;                                \
      const int64_t w = J->N - c0 < W->w ? J->N - c0 : W->w;                                       \
      const int64_t k0 = J->K * p / MV_KPARTS, k1 = J->K * (p + 1) / MV_KPARTS;                    \
      T *o = p ? (T *)W->part + (p - 1) * J->M * J->N : (T *)J->o;                                 \
      ROWS((const T *)J->a + k0 * sak, sam, sak, (const T *)J->b + k0 * J->N + c0, o + c0, J->M,   \
           k1 - k0, J->N, w);                                                                      \
    }                                                                                              \
  }
MV_KITEMS(mv_kitems_f32, float, mv_rows_f32)
MV_KITEMS(mv_kitems_f64, double, mv_rows_f64)

/* The outputs plus the other parts' sums, part 1 first. */
#define MV_KSUM(name, T)                                                                           \
  static void name(const fgk_mv_job *J, const void *part) {                                        \
    T *restrict o = (T *)J->o;                                                                     \
    const int64_t n = J->M * J->N;                                                                 \
    for (int p = 1; p < MV_KPARTS; p++) {                                                          \
      const T *restrict q = (const T *)part + (p - 1) * n;                                         \
      for (int64_t i = 0; i < n; i++)                                                              \
        o[i] = o[i] + q[i];                                                                        \
    }                                                                                              \
  }
MV_KSUM(mv_ksum_f32, float)
MV_KSUM(mv_ksum_f64, double)

/* Runs J cut by rows of b when it qualifies (see the top): 1 done, else 0. */
static int mv_ksplit(const fg_kctx *ctx, fg_dtype dt, const fgk_mv_job *J, size_t es) {
  if (J->tb || J->batches != 1 || J->K < MV_KPARTS * MV_PASS) return 0;
  if ((double)J->K * (double)J->N * (double)es < MV_SPLIT_BYTES) return 0;
  if ((double)(MV_KPARTS - 1) * (double)J->M * (double)J->N * (double)es > MV_KSPLIT_BYTES)
    return 0;
  mv_kwork W = {.J = J, .part = mv_part_buf};
  const int64_t acc_cols = MV_ACC_BYTES / (J->M * (int64_t)es) / 16 * 16;
  W.cparts = ceil_div(J->N, acc_cols);
  W.w = ceil_div(ceil_div(J->N, W.cparts), 16) * 16;
  W.cparts = ceil_div(J->N, W.w);
  fgk_parallel_for(ctx, MV_KPARTS * W.cparts, 1, dt == FG_F64 ? mv_kitems_f64 : mv_kitems_f32, &W);
  if (dt == FG_F64)
    mv_ksum_f64(J, W.part);
  else
    mv_ksum_f32(J, W.part);
  if (J->epi) fgk_mm_epilogue_apply(dt, J->epi, J->o, J->N, J->M, 0, J->N);
  return 1;
}

int fgk_matvec(const fg_kctx *ctx, fg_dtype dt, const fgk_mv_job *J) {
  /* A transposed a under a transposed b would need its rows gathered for
   * the dot products; that rare case keeps the GEMM. */
  if (J->M > FGK_MV_MAX_M || J->M < 1 || (J->ta && J->tb)) return 0;
  if (dt != FG_F32 && dt != FG_F64) return 0;
  if (mv_ksplit(ctx, dt, J, dt == FG_F64 ? 8 : 4)) return 1;
  mv_work W = {.J = J};
  mv_chunks(J, dt == FG_F64 ? 8 : 4, &W);
  const double work = (double)J->M * (double)J->K * (double)W.w;
  const int64_t grain = work >= MV_MIN_MACS ? 1 : (int64_t)(MV_MIN_MACS / work);
  fgk_parallel_for(ctx, J->batches * W.parts, grain, dt == FG_F64 ? mv_items_f64 : mv_items_f32,
                   &W);
  return 1;
}
