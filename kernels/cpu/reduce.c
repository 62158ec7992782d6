/* Reductions (reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod
 * over p->axes), argmax and argmin.
 *
 * Determinism: every output element folds its reduced elements in
 * row-major order, starting from the identity, in runs of RED_SPLIT
 * elements whose partials are combined in order. Within a run the fold is
 * a left fold, but for the floating sums and means of a contiguous
 * reduction (the innermost group reduced: a row's mean, a layer norm's
 * statistics), which fold element i of the run into lane i % 16, each
 * lane a left fold, and add the lanes pairwise at the run's end (lanes 2k
 * and 2k + 1, then the same on the 8 sums, down to one): a left fold is
 * one add after another, at the add's latency per element, where the
 * lanes are two vectors (a [8, 128, 256] f32 mean over the last axis took
 * 134 us a call on one thread before, 42-60 us after; PyTorch 33 us). The
 * runs and the lanes depend on the shape alone, so results are bitwise
 * identical for any thread count; f32 sums and means accumulate in
 * double. Outputs are split over threads when there are many, and
 * (output, run) partials when there are few.
 *
 * The input dims are first coalesced into alternating kept/reduced groups
 * (size-1 dims dropped, neighbours of the same kind merged). When the
 * innermost group is reduced, each output is one contiguous fold; when it is
 * kept, a chunk of neighbouring outputs is folded together over contiguous
 * input rows, with the accumulators on the stack (no allocation). */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

/* Neighbouring outputs folded together, with their accumulators on the
 * stack. */
#define RED_CHUNK 256
/* The fixed chunking of a long reduction: its elements are folded in runs
 * of RED_SPLIT (row-major over the reduced dims), and the runs' partials
 * combined in order. It depends on the shape alone, so the result is the
 * same for any thread count, and with ctx->par NULL. */
#define RED_SPLIT    16384
#define RED_PARTIALS 2048  /* partial accumulators on the stack */
#define RED_GRAIN    16384 /* input elements per parallel chunk, at least */
#define RED_LANES    16    /* a contiguous floating sum's lanes (the top) */

/* The plan is shared with kernels/cuda/reduce.cu (kernels/kernel_shape.h). */
typedef fgk_red_plan red_plan;

int fgk_red_plan_init(const fg_kctx *ctx, fg_dtype dt, fgk_red_plan *pl) {
  if (fgk_check(ctx, 1, 1) != 0) return -1;
  const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];
  const fg_reduce_params *p = &ctx->p->reduce;
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

/* One call, shared by its parallel chunks. A "group" is one output when
 * the innermost group is reduced (inner == 1), else up to RED_CHUNK
 * neighbouring outputs of one outer position, folded together. */
typedef struct red_job {
  red_plan pl;
  const void *in;
  void *out;
  int64_t n_cc;     /* groups per outer position: ceil(inner / RED_CHUNK) */
  int64_t n_groups; /* outer_total * n_cc */
  int64_t n_split;  /* reduced chunks per output: ceil(count / RED_SPLIT) */
  int64_t width;    /* accumulators per group: min(inner, RED_CHUNK) */
  void *parts;      /* partials mode: [group][split][width] accumulators */
} red_job;

/* A reduction over nothing but size-1 dims (sum_to's [N, C] -> [N, C]) is
 * a copy: folding one element from the identity gives it back, except that
 * a sum from +0.0 turns -0.0 into +0.0; the copy keeps -0.0, as NumPy does. */
typedef struct red_copy_job {
  const char *src;
  char *dst;
  size_t esize;
} red_copy_job;

static void red_copy_range(void *arg, int64_t e0, int64_t e1) {
  const red_copy_job *J = (const red_copy_job *)arg;
  memcpy(J->dst + (size_t)e0 * J->esize, J->src + (size_t)e0 * J->esize,
         (size_t)(e1 - e0) * J->esize);
}

static int red_copy(const fg_kctx *ctx, size_t esize) {
  const int64_t n = fgk_numel(&ctx->out[0]);
  red_copy_job J = {(const char *)ctx->in[0].data, (char *)ctx->out[0].data, esize};
  const size_t bytes = (size_t)n * esize;
  if (J.src == J.dst) return 0;
  if (J.src < J.dst + bytes && J.dst < J.src + bytes) { /* overlap: no parallel copy */
    memmove(J.dst, J.src, bytes);
    return 0;
  }
  fgk_parallel_for(ctx, n, FGK_GRAIN_CHEAP * 4, red_copy_range, &J);
  return 0;
}

/* COMBINE(acc, x) folds one element (and combines two partials);
 * FINISH(acc) gives the output value and may use `count`, the number of
 * reduced elements.
 *
 * fn##_fold folds reduced elements [r0, r1) of the nc outputs whose input
 * starts at ibase into acc[0..nc), by rows with ROWS (below).
 * fn##_groups computes whole groups; fn##_parts computes one (group,
 * reduced chunk) partial each, for when the
 * outputs are too few to keep the threads busy. Both give every output the
 * same value: partial 0, then partials 1, 2, ... combined in order. */
#define FGK_REDUCE(fn, T, DT, ACC, INIT, COMBINE, FINISH, ROWS, FOLD)                              \
  static void fn##_fold(const red_plan *pl, const T *ibase, ACC *acc, int64_t nc, int64_t r0,      \
                        int64_t r1) {                                                              \
    const int nr = pl->n_red;                                                                      \
    int64_t rcnt[FG_MAX_RANK] = {0};                                                               \
    if (pl->inner == 1) {                                                                          \
      /* The last reduced group is innermost, so contiguous: fold row runs. */                     \
      const int nrows = nr > 0 ? nr - 1 : 0;                                                       \
      const int64_t len = nr > 0 ? pl->red_dims[nr - 1] : 1;                                       \
      int64_t col = r0 % len;                                                                      \
      int64_t roff = fgk_walk_seek(nrows, pl->red_dims, pl->red_str, r0 / len, rcnt);              \
      ACC lane[RED_LANES];                                                                         \
      for (int k = 0; k < RED_LANES; k++)                                                          \
        lane[k] = INIT;                                                                            \
      for (int64_t r = r0; r < r1;) {                                                              \
        const int64_t seg = len - col < r1 - r ? len - col : r1 - r;                               \
        const T *src = ibase + roff + col;                                                         \
        SEG_##FOLD(COMBINE, acc[0], lane, src, seg, r - r0);                                       \
        r += seg;                                                                                  \
        col = 0;                                                                                   \
        fgk_walk_next(nrows, pl->red_dims, pl->red_str, rcnt, &roff);                              \
      }                                                                                            \
      END_##FOLD(acc[0], lane);                                                                    \
    } else if (nr == 1) { /* rows one stride apart: one call */                                    \
      ROWS(COMBINE, acc, ibase + r0 * pl->red_str[0], pl->red_str[0], r1 - r0, nc);                \
    } else {                                                                                       \
      int64_t roff = fgk_walk_seek(nr, pl->red_dims, pl->red_str, r0, rcnt);                       \
      for (int64_t r = r0; r < r1; r++) {                                                          \
        ROWS(COMBINE, acc, ibase + roff, 0, 1, nc);                                                \
        fgk_walk_next(nr, pl->red_dims, pl->red_str, rcnt, &roff);                                 \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  /* Outputs g0..g1 of a reduction over one innermost group of at most                             \
   * RED_SPLIT elements (rows of an [outputs, count] input): the fold's                            \
   * adds without its walk, built per instruction set (the lanes'                                  \
   * vectors) with the lanes inlined. */                                                           \
  FGK_CLONES static void fn##_rows(void *arg, int64_t g0, int64_t g1) {                            \
    const red_job *J = (const red_job *)arg;                                                       \
    const int64_t count = J->pl.count;                                                             \
    const T *in = (const T *)J->in;                                                                \
    T *out = (T *)J->out;                                                                          \
    for (int64_t g = g0; g < g1; g++) {                                                            \
      ACC acc = INIT;                                                                              \
      ROW_##FOLD(COMBINE, acc, in + g * count, count);                                             \
      out[g] = FINISH(acc);                                                                        \
    }                                                                                              \
  }                                                                                                \
  static void fn##_groups(void *arg, int64_t g0, int64_t g1) {                                     \
    const red_job *J = (const red_job *)arg;                                                       \
    const red_plan *pl = &J->pl;                                                                   \
    const int64_t count = pl->count;                                                               \
    (void)count;                                                                                   \
    const T *in = (const T *)J->in;                                                                \
    T *out = (T *)J->out;                                                                          \
    int64_t ocnt[FG_MAX_RANK] = {0};                                                               \
    int64_t op = g0 / J->n_cc, cc = g0 % J->n_cc;                                                  \
    int64_t obase = fgk_walk_seek(pl->n_outer, pl->outer_dims, pl->outer_str, op, ocnt);           \
    ACC tot[RED_CHUNK], part[RED_CHUNK];                                                           \
    for (int64_t g = g0; g < g1; g++) {                                                            \
      const int64_t c0 = cc * RED_CHUNK;                                                           \
      const int64_t nc = pl->inner - c0 < RED_CHUNK ? pl->inner - c0 : RED_CHUNK;                  \
      for (int64_t k = 0; k < J->n_split; k++) {                                                   \
        const int64_t r0 = k * RED_SPLIT, r1 = count - r0 > RED_SPLIT ? r0 + RED_SPLIT : count;    \
        ACC *dst = k == 0 ? tot : part;                                                            \
        for (int64_t j = 0; j < nc; j++)                                                           \
          dst[j] = INIT;                                                                           \
        fn##_fold(pl, in + obase + c0, dst, nc, r0, r1);                                           \
        if (k > 0)                                                                                 \
          for (int64_t j = 0; j < nc; j++)                                                         \
            COMBINE(tot[j], part[j]);                                                              \
      }                                                                                            \
      T *orow = out + op * pl->inner + c0;                                                         \
      for (int64_t j = 0; j < nc; j++)                                                             \
        orow[j] = FINISH(tot[j]);                                                                  \
      if (++cc == J->n_cc) {                                                                       \
        cc = 0;                                                                                    \
        op++;                                                                                      \
        fgk_walk_next(pl->n_outer, pl->outer_dims, pl->outer_str, ocnt, &obase);                   \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  static void fn##_parts(void *arg, int64_t i0, int64_t i1) {                                      \
    const red_job *J = (const red_job *)arg;                                                       \
    const red_plan *pl = &J->pl;                                                                   \
    for (int64_t i = i0; i < i1; i++) {                                                            \
      const int64_t g = i / J->n_split, k = i % J->n_split;                                        \
      const int64_t op = g / J->n_cc, c0 = (g % J->n_cc) * RED_CHUNK;                              \
      const int64_t nc = pl->inner - c0 < RED_CHUNK ? pl->inner - c0 : RED_CHUNK;                  \
      int64_t ocnt[FG_MAX_RANK];                                                                   \
      const int64_t obase = fgk_walk_seek(pl->n_outer, pl->outer_dims, pl->outer_str, op, ocnt);   \
      const int64_t r0 = k * RED_SPLIT;                                                            \
      const int64_t r1 = pl->count - r0 > RED_SPLIT ? r0 + RED_SPLIT : pl->count;                  \
      ACC *dst = (ACC *)J->parts + i * J->width;                                                   \
      for (int64_t j = 0; j < nc; j++)                                                             \
        dst[j] = INIT;                                                                             \
      fn##_fold(pl, (const T *)J->in + obase + c0, dst, nc, r0, r1);                               \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    red_job J;                                                                                     \
    const int rc = fgk_red_plan_init(ctx, DT, &J.pl);                                              \
    if (rc < 0) return -1;                                                                         \
    const int64_t count = J.pl.count;                                                              \
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
    if (count == 1) return red_copy(ctx, sizeof(T));                                               \
    J.in = ctx->in[0].data;                                                                        \
    J.out = out;                                                                                   \
    J.n_cc = (J.pl.inner - 1) / RED_CHUNK + 1;                                                     \
    J.n_groups = J.pl.outer_total * J.n_cc;                                                        \
    J.n_split = (count - 1) / RED_SPLIT + 1;                                                       \
    J.width = J.pl.inner < RED_CHUNK ? J.pl.inner : RED_CHUNK;                                     \
    if (J.pl.inner == 1 && J.pl.n_red == 1 && J.n_split == 1) {                                    \
      fgk_parallel_for(ctx, J.n_groups, count >= RED_GRAIN ? 1 : RED_GRAIN / count, fn##_rows,     \
                       &J);                                                                        \
      return 0;                                                                                    \
    }                                                                                              \
    if (J.n_split > 1 && J.n_groups <= RED_PARTIALS && J.n_split <= RED_PARTIALS &&                \
        J.n_groups * J.n_split * J.width <= RED_PARTIALS) {                                        \
      ACC parts[RED_PARTIALS];                                                                     \
      J.parts = parts;                                                                             \
      fgk_parallel_for(ctx, J.n_groups *J.n_split, 1, fn##_parts, &J);                             \
      for (int64_t g = 0; g < J.n_groups; g++) {                                                   \
        const int64_t op = g / J.n_cc, c0 = (g % J.n_cc) * RED_CHUNK;                              \
        const int64_t nc = J.pl.inner - c0 < RED_CHUNK ? J.pl.inner - c0 : RED_CHUNK;              \
        ACC *tot = parts + g * J.n_split * J.width;                                                \
        for (int64_t k = 1; k < J.n_split; k++)                                                    \
          for (int64_t j = 0; j < nc; j++)                                                         \
            COMBINE(tot[j], tot[k * J.width + j]);                                                 \
        for (int64_t j = 0; j < nc; j++)                                                           \
          out[op * J.pl.inner + c0 + j] = FINISH(tot[j]);                                          \
      }                                                                                            \
      return 0;                                                                                    \
    }                                                                                              \
    J.parts = NULL;                                                                                \
    int64_t per_group = count; /* input elements per group, capped at the grain */                 \
    if (per_group < RED_GRAIN) per_group *= J.width;                                               \
    const int64_t grain = per_group >= RED_GRAIN ? 1 : RED_GRAIN / per_group;                      \
    fgk_parallel_for(ctx, J.n_groups, grain, fn##_groups, &J);                                     \
    return 0;                                                                                      \
  }

/* ROWS(COMBINE, acc, src, stride, n, nc) folds n input rows src[r *
 * stride + 0 .. nc), in order, into nc independent accumulators. */
#define ROWS_LOOP(COMBINE, acc, src, stride, n, nc)                                                \
  do {                                                                                             \
    for (int64_t r_ = 0; r_ < (n); r_++) {                                                         \
      const __typeof__(*(src)) *row_ = (src) + r_ * (stride);                                      \
      for (int64_t j_ = 0; j_ < (nc); j_++)                                                        \
        COMBINE((acc)[j_], row_[j_]);                                                              \
    }                                                                                              \
  } while (0)
/* The floating sums' rows (a bias gradient's column sums, sum_to's [B, N]
 * -> [N]) are built for AVX-512 and AVX2 beside the baseline
 * (FGK_CLONES), ROWS_BLOCK accumulators at a time held in registers over
 * all the rows: the same adds, each accumulator's in row order, so the
 * same bits. A [32, 128] f32 column sum took 1.3 us in mlp_small_train's
 * profile with the baseline's two doubles a vector, 0.6 cloned a row at a
 * time. Only this leaf is cloned: the whole fold built that way (no
 * longer inlined into its callers) made op_overhead's step about 15%
 * slower. */
#define ROWS_BLOCK 32
#define FGK_ROWS_SUM(name, T)                                                                      \
  FGK_CLONES static void name(double *restrict acc, const T *restrict src, int64_t stride,         \
                              int64_t n, int64_t nc) {                                             \
    int64_t j = 0;                                                                                 \
    for (; j + ROWS_BLOCK <= nc; j += ROWS_BLOCK) {                                                \
      double a[ROWS_BLOCK];                                                                        \
      for (int k = 0; k < ROWS_BLOCK; k++)                                                         \
        a[k] = acc[j + k];                                                                         \
      for (int64_t r = 0; r < n; r++)                                                              \
        for (int k = 0; k < ROWS_BLOCK; k++)                                                       \
          a[k] += src[r * stride + j + k];                                                         \
      for (int k = 0; k < ROWS_BLOCK; k++)                                                         \
        acc[j + k] = a[k];                                                                         \
    }                                                                                              \
    for (int64_t r = 0; r < n && j < nc; r++)                                                      \
      for (int64_t k = j; k < nc; k++)                                                             \
        acc[k] += src[r * stride + k];                                                             \
  }
FGK_ROWS_SUM(rows_sum_f32, float)
FGK_ROWS_SUM(rows_sum_f64, double)
#define ROWS_SUM_F32(COMBINE, acc, src, stride, n, nc) rows_sum_f32(acc, src, stride, n, nc)
#define ROWS_SUM_F64(COMBINE, acc, src, stride, n, nc) rows_sum_f64(acc, src, stride, n, nc)

/* How a contiguous run folds, by FGK_REDUCE's FOLD: SEG_x(COMBINE, acc,
 * lane, src, n, at) folds a segment src[0, n) of a run, whose first
 * element is the run's element `at`, and END_x(acc, lane) closes the run
 * (the top); ROW_x(COMBINE, acc, src, n) folds a whole run at once (the
 * rows pass), the same adds. LEFT folds into acc one after another;
 * LANES_F32 / _F64 into 16 lanes added pairwise into acc. */
#define SEG_LEFT(COMBINE, acc, lane, src, n, at)                                                   \
  do {                                                                                             \
    (void)(lane);                                                                                  \
    for (int64_t j_ = 0; j_ < (n); j_++)                                                           \
      COMBINE(acc, (src)[j_]);                                                                     \
  } while (0)
#define END_LEFT(acc, lane) ((void)(lane))
#define ROW_LEFT(COMBINE, acc, src, n)                                                             \
  do {                                                                                             \
    for (int64_t j_ = 0; j_ < (n); j_++)                                                           \
      COMBINE(acc, (src)[j_]);                                                                     \
  } while (0)
/* Element j of src goes into lane (at + j) % RED_LANES: one at a time up
 * to a lane-0 element, then 16 at a time as two vectors of 8 doubles (GCC
 * and clang vector types: one AVX-512 register each, two or four
 * narrower ones in the other clones; written out because the compilers
 * assembled the loads of the plain loop element by element), then the
 * tail. The same adds in the same order per lane whatever the build.
 * Inlined into its callers: the rows pass (cloned per instruction set)
 * and the general fold. */
typedef float red_v8f __attribute__((vector_size(32)));
typedef double red_v8d __attribute__((vector_size(64)));
typedef double red_v4d __attribute__((vector_size(32)));
typedef double red_v2d __attribute__((vector_size(16)));
#define RED_LOAD8_F32(p)                                                                           \
  __extension__({                                                                                  \
    red_v8f v_;                                                                                    \
    memcpy(&v_, (p), sizeof v_);                                                                   \
    __builtin_convertvector(v_, red_v8d);                                                          \
  })
#define RED_LOAD8_F64(p)                                                                           \
  __extension__({                                                                                  \
    red_v8d v_;                                                                                    \
    memcpy(&v_, (p), sizeof v_);                                                                   \
    v_;                                                                                            \
  })
#define FGK_LANES_SUM(name, T, LOAD8)                                                              \
  FGK_INLINE void name(double *restrict lane, const T *restrict src, int64_t n, int64_t at) {      \
    int64_t j = 0;                                                                                 \
    for (; j < n && (at + j) % RED_LANES != 0; j++)                                                \
      lane[(at + j) % RED_LANES] += src[j];                                                        \
    red_v8d a0, a1;                                                                                \
    memcpy(&a0, lane, sizeof a0);                                                                  \
    memcpy(&a1, lane + 8, sizeof a1);                                                              \
    for (; j + RED_LANES <= n; j += RED_LANES) {                                                   \
      a0 += LOAD8(src + j);                                                                        \
      a1 += LOAD8(src + j + 8);                                                                    \
    }                                                                                              \
    memcpy(lane, &a0, sizeof a0);                                                                  \
    memcpy(lane + 8, &a1, sizeof a1);                                                              \
    for (; j < n; j++)                                                                             \
      lane[(at + j) % RED_LANES] += src[j];                                                        \
  }
FGK_LANES_SUM(lanes_sum_f32, float, RED_LOAD8_F32)
FGK_LANES_SUM(lanes_sum_f64, double, RED_LOAD8_F64)
#define SEG_LANES_F32(COMBINE, acc, lane, src, n, at) lanes_sum_f32(lane, src, n, at)
#define SEG_LANES_F64(COMBINE, acc, lane, src, n, at) lanes_sum_f64(lane, src, n, at)
/* The lanes added pairwise, 16 -> 8 -> 4 -> 2 -> 1 (lanes 2k and 2k + 1,
 * then the same on the sums), from the two vectors holding lanes 0-7 and
 * 8-15: the even lanes plus the odd ones, halving. (By pointer: a 64-byte
 * vector passed by value changes the ABI outside AVX-512.) */
FGK_INLINE double lanes_total_v(const red_v8d *a0, const red_v8d *a1) {
  red_v8d s8 = __builtin_shufflevector(*a0, *a1, 0, 2, 4, 6, 8, 10, 12, 14) +
               __builtin_shufflevector(*a0, *a1, 1, 3, 5, 7, 9, 11, 13, 15);
  red_v4d s4 =
      __builtin_shufflevector(s8, s8, 0, 2, 4, 6) + __builtin_shufflevector(s8, s8, 1, 3, 5, 7);
  red_v2d s2 = __builtin_shufflevector(s4, s4, 0, 2) + __builtin_shufflevector(s4, s4, 1, 3);
  return s2[0] + s2[1];
}
/* The same total of lanes held in memory (the general fold's). */
FGK_INLINE double lanes_total(const double *lane) {
  red_v8d a0, a1;
  memcpy(&a0, lane, sizeof a0);
  memcpy(&a1, lane + 8, sizeof a1);
  return lanes_total_v(&a0, &a1);
}
#define END_LANES_F32(acc, lane) ((acc) += lanes_total(lane))
#define END_LANES_F64            END_LANES_F32
/* A whole run from lane 0, the lanes in registers; the tail is added as
 * vectors padded with +0.0, which leaves a lane as it is (a lane starts
 * at +0.0 and so is never -0.0). */
#define FGK_ROW_LANES(name, T, LOAD8)                                                              \
  FGK_INLINE double name(const T *restrict src, int64_t n) {                                       \
    red_v8d a0 = {0}, a1 = {0};                                                                    \
    int64_t j = 0;                                                                                 \
    for (; j + RED_LANES <= n; j += RED_LANES) {                                                   \
      a0 += LOAD8(src + j);                                                                        \
      a1 += LOAD8(src + j + 8);                                                                    \
    }                                                                                              \
    if (j < n) {                                                                                   \
      T t[RED_LANES] = {0};                                                                        \
      memcpy(t, src + j, (size_t)(n - j) * sizeof *t);                                             \
      a0 += LOAD8(t);                                                                              \
      a1 += LOAD8(t + 8);                                                                          \
    }                                                                                              \
    return lanes_total_v(&a0, &a1);                                                                \
  }
FGK_ROW_LANES(row_lanes_f32, float, RED_LOAD8_F32)
FGK_ROW_LANES(row_lanes_f64, double, RED_LOAD8_F64)
#define ROW_LANES_F32(COMBINE, acc, src, n) ((acc) += row_lanes_f32(src, n))
#define ROW_LANES_F64(COMBINE, acc, src, n) ((acc) += row_lanes_f64(src, n))

#define SUM(acc, x)  ((acc) += (x))
#define USUM(acc, x) ((acc) += (uint64_t)(x))
/* NaN wins once seen (np.max); `x != x` is false for integers. */
#define RMAX(acc, x)                                                                               \
  do {                                                                                             \
    if ((x) > (acc) || (x) != (x)) (acc) = (x);                                                    \
  } while (0)
#define RMIN(acc, x)                                                                               \
  do {                                                                                             \
    if ((x) < (acc) || (x) != (x)) (acc) = (x);                                                    \
  } while (0)
#define PROD(acc, x)  ((acc) *= (x))
#define UPROD(acc, x) ((acc) *= (uint64_t)(x))
#define AS_F32(acc)   ((float)(acc))
#define AS_SELF(acc)  (acc)
#define AS_I32(acc)   ((int32_t)(uint32_t)(acc))
#define AS_I64(acc)   ((int64_t)(acc))
#define MEAN_F32(acc) (count == 0 ? NAN : (float)((acc) / (double)count))
#define MEAN_F64(acc) (count == 0 ? NAN : (acc) / (double)count)
/* Integer means stay integers (as TensorFlow's reduce_mean): the exact sum
 * (mod 2^64) divided by the count, truncated toward zero; empty gives 0. */
#define MEAN_I32(acc) (count == 0 ? 0 : (int32_t)((int64_t)(acc) / count))
#define MEAN_I64(acc) (count == 0 ? 0 : (int64_t)(acc) / count)

FGK_REDUCE(fgk_reduce_sum_f32, float, FG_F32, double, 0.0, SUM, AS_F32, ROWS_SUM_F32, LANES_F32)
FGK_REDUCE(fgk_reduce_sum_f64, double, FG_F64, double, 0.0, SUM, AS_SELF, ROWS_SUM_F64, LANES_F64)
FGK_REDUCE(fgk_reduce_sum_i32, int32_t, FG_I32, uint64_t, 0, USUM, AS_I32, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_sum_i64, int64_t, FG_I64, uint64_t, 0, USUM, AS_I64, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_mean_f32, float, FG_F32, double, 0.0, SUM, MEAN_F32, ROWS_SUM_F32, LANES_F32)
FGK_REDUCE(fgk_reduce_mean_f64, double, FG_F64, double, 0.0, SUM, MEAN_F64, ROWS_SUM_F64, LANES_F64)
FGK_REDUCE(fgk_reduce_mean_i32, int32_t, FG_I32, uint64_t, 0, USUM, MEAN_I32, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_mean_i64, int64_t, FG_I64, uint64_t, 0, USUM, MEAN_I64, ROWS_LOOP, LEFT)
/* The max of an empty set is -inf for floats and the type's minimum for
 * integers (NumPy refuses it; a graph engine needs some value). */
FGK_REDUCE(fgk_reduce_max_f32, float, FG_F32, float, -INFINITY, RMAX, AS_SELF, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_max_f64, double, FG_F64, double, -INFINITY, RMAX, AS_SELF, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_max_i32, int32_t, FG_I32, int32_t, INT32_MIN, RMAX, AS_SELF, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_max_i64, int64_t, FG_I64, int64_t, INT64_MIN, RMAX, AS_SELF, ROWS_LOOP, LEFT)
/* The min of an empty set is +inf, or the type's maximum. */
FGK_REDUCE(fgk_reduce_min_f32, float, FG_F32, float, INFINITY, RMIN, AS_SELF, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_min_f64, double, FG_F64, double, INFINITY, RMIN, AS_SELF, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_min_i32, int32_t, FG_I32, int32_t, INT32_MAX, RMIN, AS_SELF, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_min_i64, int64_t, FG_I64, int64_t, INT64_MAX, RMIN, AS_SELF, ROWS_LOOP, LEFT)
/* Products as torch.prod: f32 in double, integers in uint64 wrapping (the
 * low bits are the i32 product, as torch's int64 accumulation truncated);
 * the empty product is 1. */
FGK_REDUCE(fgk_reduce_prod_f32, float, FG_F32, double, 1.0, PROD, AS_F32, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_prod_f64, double, FG_F64, double, 1.0, PROD, AS_SELF, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_prod_i32, int32_t, FG_I32, uint64_t, 1, UPROD, AS_I32, ROWS_LOOP, LEFT)
FGK_REDUCE(fgk_reduce_prod_i64, int64_t, FG_I64, uint64_t, 1, UPROD, AS_I64, ROWS_LOOP, LEFT)

/* argmax (argmin) along p->axis: i64 output, the input without that dim.
 * The first index of the maximum (minimum) wins; a NaN counts as the
 * extreme (the first NaN), as in np.argmax and np.argmin. Keyed by the
 * input dtype. OP is > (argmax) or < (argmin); AM_BETTER(v, OP, best) says
 * v replaces the best so far. */
#define AM_BETTER(v, OP, best) ((v)OP(best) || ((v) != (v) && (best) == (best)))
typedef struct argmax_job {
  const void *x;
  int64_t *o;
  int64_t A, inner, n_cc;
} argmax_job;

/* When the reduced axis is not the last (inner > 1), over groups of up to
 * RED_CHUNK neighbouring outputs, each independent. When it is the last,
 * over rows, each output one contiguous row, in passes that have no
 * branches on the data: the row's extreme (exact, so in any order) and
 * whether it holds a NaN, then the first index of the first NaN, or else of
 * the extreme (-0 and +0 compare equal, so the first zero of either sign,
 * as in a scan that keeps the first of equal values). Rows of AM_LANES
 * elements or more take the extreme in AM_LANES lanes, and search blocks of
 * that many, which vectorise. */
#define AM_LANES 64 /* too many for GCC to unroll the lane loop, which it then vectorises */
#define FGK_ARGMAX(fn, T, DT, OP, NAME)                                                            \
  /* The first index of the row's first NaN if any_nan, else of m. */                              \
  static inline int64_t fn##_find(const T *row, int64_t A, T m, int any_nan) {                     \
    int64_t bi = 0;                                                                                \
    for (int64_t a = A - 1; a >= 0; a--) {                                                         \
      const T v = row[a];                                                                          \
      bi = (any_nan ? v != v : v == m) ? a : bi;                                                   \
    }                                                                                              \
    return bi;                                                                                     \
  }                                                                                                \
  /* A row of A >= AM_LANES elements; cloned, as an out-of-line copy of an inline function would   \
   * be built for the baseline x86-64. */                                                          \
  FGK_CLONES static int64_t fn##_long(const T *row, int64_t A) {                                   \
    T lane[AM_LANES], nan[AM_LANES]; /* nan[k]: a NaN seen in lane k, else 0 */                    \
    for (int k = 0; k < AM_LANES; k++) {                                                           \
      lane[k] = row[k];                                                                            \
      nan[k] = 0;                                                                                  \
    }                                                                                              \
    int64_t a = 0;                                                                                 \
    for (; a + AM_LANES <= A; a += AM_LANES)                                                       \
      for (int k = 0; k < AM_LANES; k++) {                                                         \
        const T v = row[a + k];                                                                    \
        lane[k] = v OP lane[k] ? v : lane[k];                                                      \
        nan[k] = v != v ? v : nan[k];                                                              \
      }                                                                                            \
    for (int k = 0; a + k < A; k++) {                                                              \
      const T v = row[a + k];                                                                      \
      lane[k] = v OP lane[k] ? v : lane[k];                                                        \
      nan[k] = v != v ? v : nan[k];                                                                \
    }                                                                                              \
    for (int w = AM_LANES / 2; w > 0; w /= 2) /* halves: no long dependency chain */               \
      for (int k = 0; k < w; k++)                                                                  \
        lane[k] = lane[k + w] OP lane[k] ? lane[k + w] : lane[k];                                  \
    const T m = lane[0];                                                                           \
    int any_nan = 0;                                                                               \
    for (int k = 0; k < AM_LANES; k++)                                                             \
      any_nan |= nan[k] != nan[k];                                                                 \
    a = 0;                                                                                         \
    if (any_nan) {                                                                                 \
      while (row[a] == row[a])                                                                     \
        a++;                                                                                       \
      return a;                                                                                    \
    }                                                                                              \
    for (; a + AM_LANES <= A; a += AM_LANES) {                                                     \
      int hit = 0;                                                                                 \
      for (int k = 0; k < AM_LANES; k++)                                                           \
        hit |= row[a + k] == m;                                                                    \
      if (hit) break;                                                                              \
    }                                                                                              \
    while (row[a] != m)                                                                            \
      a++;                                                                                         \
    return a;                                                                                      \
  }                                                                                                \
  /* Short rows four at a time: their extremes' dependency chains interleave. */                   \
  FGK_CLONES static void fn##_rows(void *arg, int64_t r0, int64_t r1) {                            \
    const argmax_job *J = (const argmax_job *)arg;                                                 \
    const int64_t A = J->A;                                                                        \
    const T *x = (const T *)J->x;                                                                  \
    if (A >= AM_LANES) {                                                                           \
      for (int64_t r = r0; r < r1; r++)                                                            \
        J->o[r] = fn##_long(x + r * A, A);                                                         \
      return;                                                                                      \
    }                                                                                              \
    int64_t r = r0;                                                                                \
    for (; r + 4 <= r1; r += 4) {                                                                  \
      const T *row = x + r * A;                                                                    \
      T m[4];                                                                                      \
      int any_nan[4];                                                                              \
      for (int q = 0; q < 4; q++) {                                                                \
        m[q] = row[q * A];                                                                         \
        any_nan[q] = m[q] != m[q];                                                                 \
      }                                                                                            \
      for (int64_t a = 1; a < A; a++)                                                              \
        for (int q = 0; q < 4; q++) {                                                              \
          const T v = row[q * A + a];                                                              \
          m[q] = v OP m[q] ? v : m[q];                                                             \
          any_nan[q] |= v != v;                                                                    \
        }                                                                                          \
      for (int q = 0; q < 4; q++)                                                                  \
        J->o[r + q] = fn##_find(row + q * A, A, m[q], any_nan[q]);                                 \
    }                                                                                              \
    for (; r < r1; r++) {                                                                          \
      const T *row = x + r * A;                                                                    \
      T m = row[0];                                                                                \
      int any_nan = m != m;                                                                        \
      for (int64_t a = 1; a < A; a++) {                                                            \
        const T v = row[a];                                                                        \
        m = v OP m ? v : m;                                                                        \
        any_nan |= v != v;                                                                         \
      }                                                                                            \
      J->o[r] = fn##_find(row, A, m, any_nan);                                                     \
    }                                                                                              \
  }                                                                                                \
  static void fn##_groups(void *arg, int64_t g0, int64_t g1) {                                     \
    const argmax_job *J = (const argmax_job *)arg;                                                 \
    const int64_t A = J->A, inner = J->inner;                                                      \
    for (int64_t g = g0; g < g1; g++) {                                                            \
      const int64_t op = g / J->n_cc, c0 = (g % J->n_cc) * RED_CHUNK;                              \
      const int64_t nc = inner - c0 < RED_CHUNK ? inner - c0 : RED_CHUNK;                          \
      const T *base = (const T *)J->x + op * A * inner;                                            \
      T best[RED_CHUNK];                                                                           \
      int64_t *idx = J->o + op * inner + c0;                                                       \
      for (int64_t j = 0; j < nc; j++) {                                                           \
        best[j] = base[c0 + j];                                                                    \
        idx[j] = 0;                                                                                \
      }                                                                                            \
      for (int64_t a = 1; a < A; a++) {                                                            \
        const T *row = base + a * inner + c0;                                                      \
        for (int64_t j = 0; j < nc; j++) {                                                         \
          const T v = row[j];                                                                      \
          if (AM_BETTER(v, OP, best[j])) {                                                         \
            best[j] = v;                                                                           \
            idx[j] = a;                                                                            \
          }                                                                                        \
        }                                                                                          \
      }                                                                                            \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    if (fgk_check(ctx, 1, 1) != 0) return -1;                                                      \
    const fg_kbuf *in = &ctx->in[0], *out = &ctx->out[0];                                          \
    if (in->dtype != DT || out->dtype != FG_I64)                                                   \
      return fgk_fail(ctx, "expected a %s input and an i64 output, got %s and %s",                 \
                      fg_dtype_name(DT), fg_dtype_name(in->dtype), fg_dtype_name(out->dtype));     \
    const int axis = ctx->p->argmax.axis; /* argmax and argmin */                                  \
    if (axis < 0 || axis >= in->rank)                                                              \
      return fgk_fail(ctx, "axis %d is out of range [0, %d)", axis, in->rank);                     \
    int64_t outer = 1, inner = 1;                                                                  \
    const int64_t A = in->dims[axis];                                                              \
    for (int i = 0; i < axis; i++)                                                                 \
      outer *= in->dims[i];                                                                        \
    for (int i = axis + 1; i < in->rank; i++)                                                      \
      inner *= in->dims[i];                                                                        \
    if (fgk_numel(out) != outer * inner)                                                           \
      return fgk_fail(ctx, "output has %lld elements, expected %lld", (long long)fgk_numel(out),   \
                      (long long)(outer * inner));                                                 \
    if (outer * inner == 0) return 0;                                                              \
    if (A == 0) return fgk_fail(ctx, NAME " over axis %d, which has size 0", axis);                \
    argmax_job J = {in->data, (int64_t *)out->data, A, inner, (inner - 1) / RED_CHUNK + 1};        \
    if (inner == 1) {                                                                              \
      fgk_parallel_for(ctx, outer, A >= RED_GRAIN ? 1 : RED_GRAIN / A, fn##_rows, &J);             \
      return 0;                                                                                    \
    }                                                                                              \
    const int64_t per = A * (inner < RED_CHUNK ? inner : RED_CHUNK);                               \
    fgk_parallel_for(ctx, outer *J.n_cc, per >= RED_GRAIN ? 1 : RED_GRAIN / per, fn##_groups, &J); \
    return 0;                                                                                      \
  }

FGK_ARGMAX(fgk_argmax_f32, float, FG_F32, >, "argmax")
FGK_ARGMAX(fgk_argmax_f64, double, FG_F64, >, "argmax")
FGK_ARGMAX(fgk_argmax_i32, int32_t, FG_I32, >, "argmax")
FGK_ARGMAX(fgk_argmax_i64, int64_t, FG_I64, >, "argmax")
FGK_ARGMAX(fgk_argmin_f32, float, FG_F32, <, "argmin")
FGK_ARGMAX(fgk_argmin_f64, double, FG_F64, <, "argmin")
FGK_ARGMAX(fgk_argmin_i32, int32_t, FG_I32, <, "argmin")
FGK_ARGMAX(fgk_argmin_i64, int64_t, FG_I64, <, "argmin")
