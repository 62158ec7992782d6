/* matmul: out[..., M, N] = op(a)[..., M, K] @ op(b)[..., K, N], where op
 * transposes the last two dims when transpose_a / transpose_b is set and the
 * leading (batch) dims broadcast NumPy-style to out's. Floats go to one GEMM
 * per batch (one GEMM in all when b is shared by every batch and a is not
 * transposed: a's batches then stack into one taller matrix). Large
 * products are cut into fixed tiles of the output, one GEMM each, spread
 * over ctx->par (see mm_tiles); a tile runs on libxsmm when
 * kernels/cpu/xsmm/xsmm_gemm.c takes it, else on OpenBLAS. Products of at
 * most FGK_MV_MAX_M rows stream b instead (kernels/cpu/matvec.c).
 *
 * fused_matmul runs the same code with an epilogue (matvec.h): each tile,
 * once its GEMM is done and while it is in cache, gets the bias added and
 * the activation applied, so the bits are those of matmul -> add -> relu
 * and the output is written to memory once. fused_matmul_relu_grad's
 * epilogue masks each tile with relu's output the same way. */
#include <cblas.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matvec.h"
#include "kernels/cpu/sgemm.h"

/* The plan is shared with kernels/cuda/matmul.cu (kernels/kernel_shape.h). */
typedef fgk_mm_plan mm_plan;

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
      return fgk_fail(ctx,
                      "input %d batch dim %d (%lld) does not broadcast to output dim %d "
                      "(%lld)",
                      which, j, (long long)d, i, (long long)pl->bdims[i]);
    s *= d;
    *count *= d;
  }
  return 0;
}

int fgk_mm_plan_init(const fg_kctx *ctx, fg_dtype dt, fgk_mm_plan *pl) {
  if (fgk_check(ctx, 2, 1) != 0) return -1;
  return fgk_mm_plan_init_tr(ctx, dt, ctx->p->matmul.transpose_a, ctx->p->matmul.transpose_b, pl);
}

int fgk_mm_plan_init_tr(const fg_kctx *ctx, fg_dtype dt, int ta, int tb, fgk_mm_plan *pl) {
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
  pl->ta = ta != 0;
  pl->tb = tb != 0;
  const int64_t a0 = a->dims[a->rank - 2], a1 = a->dims[a->rank - 1];
  const int64_t b0 = b->dims[b->rank - 2], b1 = b->dims[b->rank - 1];
  pl->M = pl->ta ? a1 : a0;
  pl->K = pl->ta ? a0 : a1;
  const int64_t kb = pl->tb ? b1 : b0;
  pl->N = pl->tb ? b0 : b1;
  if (kb != pl->K)
    return fgk_fail(ctx, "inner dims differ: a gives K = %lld, b gives K = %lld", (long long)pl->K,
                    (long long)kb);
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
  pl->lda = pl->ta ? pl->M : pl->K;
  pl->ldb = pl->tb ? pl->K : pl->N;
  pl->ldc = pl->N;
  pl->strided = 0;
  int64_t s = pl->M * pl->N;
  for (int i = pl->nb - 1; i >= 0; i--) {
    pl->o_bstride[i] = s;
    s *= pl->bdims[i];
  }
  return 0;
}

int fgk_mm_check_bias(const fg_kctx *ctx, fg_dtype dt, const fgk_mm_plan *pl) {
  if (fgk_check(ctx, 3, 1) != 0) return -1;
  const fg_kbuf *bias = &ctx->in[2];
  if (bias->dtype != dt)
    return fgk_fail(ctx, "input 2 (bias) is %s, expected %s", fg_dtype_name(bias->dtype),
                    fg_dtype_name(dt));
  if (bias->rank != 1 || bias->dims[0] != pl->N)
    return fgk_fail(ctx,
                    "input 2 (bias) must have shape [N] = [%lld], got rank %d with %lld elements",
                    (long long)pl->N, bias->rank, (long long)fgk_numel(bias));
  return 0;
}

static int fits_blasint(int64_t x) { return (int64_t)(blasint)x == x; }

/* Flowgraph owns the threads: OpenBLAS runs single-threaded inside each
 * tile, and the tiles go to the executor's pool, so two thread pools never
 * compete for the cores (and a process without a pool uses one core, as
 * its thread count says). Set once per process, when the first session is
 * made (fg_cpu_kernels_start) or on the first float matmul; it also
 * affects other OpenBLAS users in the process.
 *
 * The threaded OpenBLAS starts its server threads when it is loaded, and
 * each spins (yielding) for about 2^28 cycles before it sleeps: 0.1 s here,
 * while the executor's pool spins for its own work. The pool then lost its
 * core for 2 to 5 ms at a time, took that for another process and slept
 * (executor/threadpool.c), and a 2-layer transformer's first 30 runs took
 * 3.3 ms each instead of 2.1. Its threads are stopped here
 * (blas_thread_shutdown_, which OpenBLAS's own fork handler calls; weak,
 * as builds without threads lack it): single-threaded calls never wake
 * them, and OpenBLAS starts them again if someone asks for threads. */
extern int blas_thread_shutdown_(void) __attribute__((weak));
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
/* The fewest tiles a large product is cut into: the machine's online cores
 * (at least 2), read once with blas_once. One tile per core keeps every
 * core busy when the product runs alone, and each tile as large as that
 * allows: a tile is a GEMM of its own that packs its panels of a and b
 * again, so on 2 cores 8 tiles of mlp_medium_train's 128 x 784 x 512 cost
 * about 10% of its training step against 2. It depends on the machine, not
 * on a session's thread count, so results stay bitwise the same for any
 * thread count on one machine (and OpenBLAS's kernels differ between
 * machines anyway). */
static int64_t mm_min_items = 2;
static void blas_single_thread(void) {
  fgk_blas_core_start();
  openblas_set_num_threads(1);
  if (blas_thread_shutdown_) blas_thread_shutdown_();
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 2) mm_min_items = cores < 4096 ? cores : 4096;
  fgk_xsmm_start();
  fgk_sgemm_start();
}

void fg_cpu_kernels_start(void) { pthread_once(&blas_once, blas_single_thread); }

/* Tiles of C, from the shape and mm_min_items alone, so the GEMM calls (and
 * so the results) are the same for any thread count and with ctx->par
 * NULL: at most 256 rows x 2048 columns, made smaller while there are
 * fewer than mm_min_items tiles in all and a tile keeps at least
 * MM_MIN_MACS multiply-adds (tens of microseconds). Each tile packs its
 * panels of a and b again, so narrow tiles pack a's rows once per column
 * tile: at 512 columns, mlp_large_train's 256 x 2048 x 2048 products made
 * 4 tiles where 2 keep both cores busy, and its 2048 x 256 x 2048 weight
 * gradient 32 tiles that packed A^T 4 times (8 now, of whole rows: once),
 * which made its step measurably faster. 512 rows as well made
 * mlp_medium_train slower (its 512 x 512 weight gradient then split by
 * columns). */
#define MM_RB       256
#define MM_CB       2048
#define MM_MIN_MACS (1 << 21)

typedef struct mm_job {
  const mm_plan *pl;
  const void *a, *b;
  void *o;
  int64_t M, K, N; /* per GEMM (M is stacked batches when batches == 1) */
  int64_t lda, ldb, ldc;
  int64_t rb, cb, n_rt, n_ct;
  int ta, tb;
  const fgk_mm_epilogue *epi; /* NULL: none */
} mm_job;

static int64_t ceil_div(int64_t a, int64_t b) { return (a - 1) / b + 1; }

static void mm_tiles(mm_job *J, int64_t batches) {
  const int64_t M = J->M, N = J->N, K = J->K;
  int64_t n_rt = ceil_div(M, MM_RB), n_ct = ceil_div(N, MM_CB);
  while (batches * n_rt * n_ct < mm_min_items) {
    const int64_t rb = ceil_div(M, n_rt), cb = ceil_div(N, n_ct);
    if ((double)rb * (double)cb * (double)K < 2.0 * MM_MIN_MACS) break;
    if (cb >= 256 && cb >= rb)
      n_ct *= 2;
    else if (rb >= 64)
      n_rt *= 2;
    else if (cb >= 256)
      n_ct *= 2;
    else
      break;
  }
  /* Multiples of 16 suit the GEMM micro-kernels' register blocks. */
  J->rb = ceil_div(ceil_div(M, n_rt), 16) * 16;
  J->cb = ceil_div(ceil_div(N, n_ct), 16) * 16;
  J->n_rt = ceil_div(M, J->rb);
  J->n_ct = ceil_div(N, J->cb);
}

/* a's, b's and out's matrix offsets for output batch bi (decomposed,
 * once per item). */
void fgk_mm_seek(const mm_plan *pl, int64_t bi, int64_t *ao, int64_t *bo, int64_t *oo) {
  *ao = *bo = *oo = 0;
  for (int d = pl->nb - 1; d >= 0; d--) {
    const int64_t c = bi % pl->bdims[d];
    bi /= pl->bdims[d];
    *ao += c * pl->a_bstride[d];
    *bo += c * pl->b_bstride[d];
    *oo += c * pl->o_bstride[d];
  }
}

/* The epilogue on one tile (matvec.h). Plain adds and compares: no
 * multiply for the compiler to contract, so every clone gives the add and
 * relu kernels' bits. */
#define FGK_MM_EPILOGUE(name, T)                                                                   \
  FGK_CLONES static void name(T *o, int64_t ld, int64_t rows, const T *bias, int64_t cols,         \
                              int relu) {                                                          \
    for (int64_t i = 0; i < rows; i++) {                                                           \
      T *restrict r = o + i * ld;                                                                  \
      if (relu)                                                                                    \
        for (int64_t j = 0; j < cols; j++) {                                                       \
          const T v = r[j] + bias[j];                                                              \
          r[j] = v < 0 ? (T)0 : v;                                                                 \
        }                                                                                          \
      else                                                                                         \
        for (int64_t j = 0; j < cols; j++)                                                         \
          r[j] = r[j] + bias[j];                                                                   \
    }                                                                                              \
  }
FGK_MM_EPILOGUE(epilogue_f32, float)
FGK_MM_EPILOGUE(epilogue_f64, double)

/* The relu gradient's mask on one tile: the select kernel's copy of the
 * product or of its +0.0 where greater(y, 0) is false, compared as the
 * greater kernel does (in T). m is the mask at the tile's first element. */
#define FGK_MM_MASK(name, T)                                                                       \
  FGK_CLONES static void name(T *o, const T *m, int64_t ld, int64_t rows, int64_t cols) {          \
    for (int64_t i = 0; i < rows; i++) {                                                           \
      T *restrict r = o + i * ld;                                                                  \
      const T *restrict y = m + i * ld;                                                            \
      for (int64_t j = 0; j < cols; j++)                                                           \
        r[j] = y[j] > 0 ? r[j] : (T)0;                                                             \
    }                                                                                              \
  }
FGK_MM_MASK(mask_f32, float)
FGK_MM_MASK(mask_f64, double)

void fgk_mm_epilogue_apply(fg_dtype dt, const fgk_mm_epilogue *e, void *o, int64_t ld, int64_t rows,
                           int64_t c0, int64_t cols) {
  if (e->mask) {
    /* The mask has the output's layout: the tile's offset in the output
     * is its offset in the mask. */
    const char *m = (const char *)e->mask + ((const char *)o - (const char *)e->out);
    if (dt == FG_F64)
      mask_f64(o, (const double *)m, ld, rows, cols);
    else
      mask_f32(o, (const float *)m, ld, rows, cols);
  }
  if (!e->bias) return;
  if (dt == FG_F64)
    epilogue_f64(o, ld, rows, (const double *)e->bias + c0, cols, e->relu);
  else
    epilogue_f32(o, ld, rows, (const float *)e->bias + c0, cols, e->relu);
}

/* Items are (batch, row tile, column tile), each one GEMM, then the
 * epilogue (if any) on the tile while it is in cache. */
#define FGK_MM_TILES(name, T, DT, GEMM, XSMM)                                                      \
  static void name(void *arg, int64_t i0, int64_t i1) {                                            \
    const mm_job *J = (const mm_job *)arg;                                                         \
    const int64_t per_batch = J->n_rt * J->n_ct;                                                   \
    for (int64_t it = i0; it < i1; it++) {                                                         \
      const int64_t bi = it / per_batch, rt = (it % per_batch) / J->n_ct, ct = it % J->n_ct;       \
      int64_t ao = 0, bo = 0, oo = 0; /* no plan: one stacked product */                           \
      if (J->pl) fgk_mm_seek(J->pl, bi, &ao, &bo, &oo);                                            \
      const int64_t r0 = rt * J->rb, c0 = ct * J->cb;                                              \
      const blasint m = (blasint)(J->M - r0 < J->rb ? J->M - r0 : J->rb);                          \
      const blasint n = (blasint)(J->N - c0 < J->cb ? J->N - c0 : J->cb);                          \
      const blasint k = (blasint)J->K;                                                             \
      const blasint lda = (blasint)J->lda, ldb = (blasint)J->ldb, ldc = (blasint)J->ldc;           \
      const T *a = (const T *)J->a + ao + (J->ta ? r0 : r0 * J->lda);                              \
      const T *b = (const T *)J->b + bo + (J->tb ? c0 * J->ldb : c0);                              \
      T *o = (T *)J->o + oo + r0 * J->ldc + c0;                                                    \
      /* libxsmm first (kernels/cpu/xsmm/), OpenBLAS when it declines. */                          \
      if (XSMM(J->ta, J->tb, m, n, k, a, lda, b, ldb, o, ldc) != 0)                                \
        GEMM(CblasRowMajor, J->ta ? CblasTrans : CblasNoTrans, J->tb ? CblasTrans : CblasNoTrans,  \
             m, n, k, 1, a, lda, b, ldb, 0, o, ldc);                                               \
      if (J->epi) fgk_mm_epilogue_apply(DT, J->epi, o, J->ldc, m, c0, n);                          \
    }                                                                                              \
  }
FGK_MM_TILES(mm_tiles_f32, float, FG_F32, fgk_sgemm, fgk_xsmm_gemm_f32)
FGK_MM_TILES(mm_tiles_f64, double, FG_F64, cblas_dgemm, fgk_xsmm_gemm_f64)

/* A float product (plan pl) into out[0], then the epilogue epi (NULL:
 * none) on each tile: matmul's, fused_matmul's and permuted_matmul's
 * kernels. A strided plan (permuted_matmul's) takes no epilogue. */
int fgk_mm_float(const fg_kctx *ctx, fg_dtype dt, const mm_plan *pl, const fgk_mm_epilogue *epi) {
  const int64_t total = fgk_numel(&ctx->out[0]);
  if (total == 0) return 0;
  const size_t es = dt == FG_F64 ? sizeof(double) : sizeof(float);
  void *o = ctx->out[0].data;
  /* K == 0 is an empty sum; BLAS would want lda >= 1 for matrices without data. */
  if (pl->K == 0) {
    memset(o, 0, (size_t)total * es);
    if (epi) fgk_mm_epilogue_apply(dt, epi, o, pl->N, total / pl->N, 0, pl->N);
    return 0;
  }
  mm_job J = {.pl = pl,
              .a = ctx->in[0].data,
              .b = ctx->in[1].data,
              .o = o,
              .M = pl->M,
              .K = pl->K,
              .N = pl->N,
              .lda = pl->lda,
              .ldb = pl->ldb,
              .ldc = pl->ldc,
              .ta = pl->ta,
              .tb = pl->tb,
              .epi = epi};
  int64_t batches = pl->batch;
  /* b shared by every batch and a not transposed: a's batches stack into
   * one taller matrix (when they are packed). */
  if (!pl->strided && !pl->ta && pl->b_batch == 1 && pl->a_batch == pl->batch) {
    J.M *= pl->batch;
    batches = 1;
    J.pl = NULL;
  }
  if (!fits_blasint(J.M) || !fits_blasint(J.N) || !fits_blasint(J.K))
    return fgk_fail(ctx, "matrix dims %lld x %lld x %lld exceed the BLAS index type",
                    (long long)J.M, (long long)J.N, (long long)J.K);
  /* A few rows: stream b once (kernels/cpu/matvec.c) instead of packing
   * it (packed operands only). */
  const fgk_mv_job mv = {J.pl, J.a, J.b, o, J.M, J.K, J.N, batches, J.ta, J.tb, epi};
  if (!pl->strided && fgk_matvec(ctx, dt, &mv)) return 0;
  fg_cpu_kernels_start();
  mm_tiles(&J, batches);
  const double macs =
      (double)(J.rb < J.M ? J.rb : J.M) * (double)(J.cb < J.N ? J.cb : J.N) * (double)J.K;
  const int64_t grain = macs >= MM_MIN_MACS ? 1 : (int64_t)(MM_MIN_MACS / macs);
  fgk_parallel_for(ctx, batches * J.n_rt * J.n_ct, grain,
                   dt == FG_F64 ? mm_tiles_f64 : mm_tiles_f32, &J);
  return 0;
}

int fgk_matmul_f32(const fg_kctx *ctx) {
  mm_plan pl;
  return fgk_mm_plan_init(ctx, FG_F32, &pl) != 0 ? -1 : fgk_mm_float(ctx, FG_F32, &pl, NULL);
}

int fgk_matmul_f64(const fg_kctx *ctx) {
  mm_plan pl;
  return fgk_mm_plan_init(ctx, FG_F64, &pl) != 0 ? -1 : fgk_mm_float(ctx, FG_F64, &pl, NULL);
}

/* fused_matmul: the product with the bias and activation on each tile. */
static int fused_matmul(const fg_kctx *ctx, fg_dtype dt) {
  mm_plan pl;
  if (fgk_check(ctx, 3, 1) != 0) return -1;
  const fg_fused_matmul_params *p = &ctx->p->fused_matmul;
  if (p->activation != FG_ACTIVATION_NONE && p->activation != FG_ACTIVATION_RELU)
    return fgk_fail(ctx, "unknown activation %d", (int)p->activation);
  if (fgk_mm_plan_init_tr(ctx, dt, p->transpose_a, p->transpose_b, &pl) != 0 ||
      fgk_mm_check_bias(ctx, dt, &pl) != 0)
    return -1;
  const fgk_mm_epilogue epi = {ctx->in[2].data, p->activation == FG_ACTIVATION_RELU, NULL, NULL};
  return fgk_mm_float(ctx, dt, &pl, &epi);
}

int fgk_fused_matmul_f32(const fg_kctx *ctx) { return fused_matmul(ctx, FG_F32); }
int fgk_fused_matmul_f64(const fg_kctx *ctx) { return fused_matmul(ctx, FG_F64); }

int fgk_mm_check_mask(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_check(ctx, 3, 1) != 0) return -1;
  const fg_kbuf *y = &ctx->in[2], *o = &ctx->out[0];
  int same = y->dtype == dt && y->rank == o->rank;
  for (int i = 0; same && i < y->rank; i++)
    same = y->dims[i] == o->dims[i];
  if (!same)
    return fgk_fail(ctx,
                    "input 2 (y) is %s of rank %d with %lld elements; it must be %s of the "
                    "product's shape (rank %d, %lld elements)",
                    fg_dtype_name(y->dtype), y->rank, (long long)fgk_numel(y), fg_dtype_name(dt),
                    o->rank, (long long)fgk_numel(o));
  return 0;
}

/* fused_matmul_relu_grad: the product, masked by y > 0 on each tile. */
static int fused_matmul_relu_grad(const fg_kctx *ctx, fg_dtype dt) {
  mm_plan pl;
  if (fgk_check(ctx, 3, 1) != 0 || fgk_mm_plan_init(ctx, dt, &pl) != 0 ||
      fgk_mm_check_mask(ctx, dt) != 0)
    return -1;
  const fgk_mm_epilogue epi = {NULL, 0, ctx->in[2].data, ctx->out[0].data};
  return fgk_mm_float(ctx, dt, &pl, &epi);
}

int fgk_fused_matmul_relu_grad_f32(const fg_kctx *ctx) {
  return fused_matmul_relu_grad(ctx, FG_F32);
}
int fgk_fused_matmul_relu_grad_f64(const fg_kctx *ctx) {
  return fused_matmul_relu_grad(ctx, FG_F64);
}

/* The transposed-a product of a weight gradient (sufficient_factor_apply_sgd's
 * kernel, kernels/cpu/collective.c, and the communicator's fused update
 * through it): c = alpha * a^T b + beta * c in tiles of MM_RB rows of c
 * over the executor's threads (ctx, NULL: inline), each tile one GEMM
 * over all k rows, so the bits do not depend on the thread count. */
typedef struct tn_job {
  fg_dtype dt;
  int64_t m, n, k, lda, ldb, ldc;
  double alpha, beta;
  const void *a, *b;
  void *c;
} tn_job;

static void tn_tiles(void *arg, int64_t t0, int64_t t1) {
  const tn_job *J = arg;
  for (int64_t t = t0; t < t1; t++) {
    const int64_t r0 = t * MM_RB, m = J->m - r0 < MM_RB ? J->m - r0 : MM_RB;
    if (J->dt == FG_F64)
      cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)m, (blasint)J->n, (blasint)J->k,
                  J->alpha, (const double *)J->a + r0, (blasint)J->lda, J->b, (blasint)J->ldb,
                  J->beta, (double *)J->c + r0 * J->ldc, (blasint)J->ldc);
    else
      fgk_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (blasint)m, (blasint)J->n, (blasint)J->k,
                (float)J->alpha, (const float *)J->a + r0, (blasint)J->lda, J->b, (blasint)J->ldb,
                (float)J->beta, (float *)J->c + r0 * J->ldc, (blasint)J->ldc);
  }
}

void fgk_gemm_tn(void *ctx, fg_dtype dt, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                 int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  const size_t es = dt == FG_F64 ? 8 : 4;
  if (k <= 0) {
    /* An empty sum (BLAS wants lda >= 1 for matrices without data): c
     * stays with beta 1, becomes 0 with beta 0. */
    for (int64_t i = 0; i < m && beta == 0; i++)
      memset((unsigned char *)c + (size_t)(i * ldc) * es, 0, (size_t)n * es);
    return;
  }
  fg_cpu_kernels_start();
  tn_job J = {dt, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};
  const int64_t tiles = ceil_div(m, MM_RB);
  const double macs = (double)(m < MM_RB ? m : MM_RB) * (double)n * (double)k;
  const int64_t grain = macs >= MM_MIN_MACS ? 1 : (int64_t)(MM_MIN_MACS / macs);
  if (ctx)
    fgk_parallel_for((const fg_kctx *)ctx, tiles, grain, tn_tiles, &J);
  else
    tn_tiles(&J, 0, tiles);
}

typedef struct mm_int_job {
  const mm_plan *pl;
  const void *a, *b;
  void *o;
} mm_int_job;

/* Integers have no BLAS: a plain i-k-j loop (row-major friendly), wrapping
 * on overflow through unsigned arithmetic like the binary integer ops.
 * Parallel over (batch, row) items; each row is computed alone. */
#define FGK_MATMUL_INT(fn, T, U, DT)                                                               \
  static void fn##_rows(void *arg, int64_t i0, int64_t i1) {                                       \
    const mm_int_job *J = (const mm_int_job *)arg;                                                 \
    const mm_plan *pl = J->pl;                                                                     \
    const int64_t M = pl->M, N = pl->N, K = pl->K;                                                 \
    for (int64_t it = i0; it < i1; it++) {                                                         \
      const int64_t bi = it / M, i = it % M;                                                       \
      int64_t ao, bo, oo;                                                                          \
      fgk_mm_seek(pl, bi, &ao, &bo, &oo);                                                          \
      const T *a = (const T *)J->a + ao, *b = (const T *)J->b + bo;                                \
      T *orow = (T *)J->o + oo + i * N;                                                            \
      for (int64_t j = 0; j < N; j++)                                                              \
        orow[j] = 0;                                                                               \
      for (int64_t kk = 0; kk < K; kk++) {                                                         \
        const U aik = (U)(pl->ta ? a[kk * M + i] : a[i * K + kk]);                                 \
        for (int64_t j = 0; j < N; j++)                                                            \
          orow[j] = (T)((U)orow[j] + aik * (U)(pl->tb ? b[j * K + kk] : b[kk * N + j]));           \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    mm_plan pl;                                                                                    \
    if (fgk_mm_plan_init(ctx, DT, &pl) != 0) return -1;                                            \
    if (fgk_numel(&ctx->out[0]) == 0) return 0;                                                    \
    mm_int_job J = {&pl, ctx->in[0].data, ctx->in[1].data, ctx->out[0].data};                      \
    const int64_t per_row = pl.N * (pl.K > 0 ? pl.K : 1);                                          \
    const int64_t grain = per_row >= FGK_GRAIN_CHEAP ? 1 : FGK_GRAIN_CHEAP / per_row;              \
    fgk_parallel_for(ctx, pl.batch *pl.M, grain, fn##_rows, &J);                                   \
    return 0;                                                                                      \
  }

FGK_MATMUL_INT(fgk_matmul_i32, int32_t, uint32_t, FG_I32)
FGK_MATMUL_INT(fgk_matmul_i64, int64_t, uint64_t, FG_I64)
