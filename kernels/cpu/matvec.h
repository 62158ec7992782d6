/* Products with few rows (kernels/cpu/matvec.c): out = op(a) @ op(b) for
 * at most FGK_MV_MAX_M rows of a, the batch-1 inference case, where the
 * product is bound by reading b once. matmul.c hands them over after its
 * checks. */
#ifndef FG_KERNELS_CPU_MATVEC_H
#define FG_KERNELS_CPU_MATVEC_H

#include "kernels/cpu/cpu_kernels.h"

#define FGK_MV_MAX_M 8

/* What a product does to each tile of its output once computed, while
 * the tile is in cache (fused_matmul): o = o + bias[column], then ReLU
 * (o < 0 ? 0 : o, the relu kernel's rule: NaN and -0.0 stay) when relu is
 * set. Per element exactly the add and relu kernels' arithmetic, so the
 * bits are those of matmul -> add -> relu. */
typedef struct fgk_mm_epilogue {
  const void *bias; /* [N], the product's dtype; NULL: none */
  int relu;
  /* fused_matmul_relu_grad: o = mask > 0 ? o : 0 with mask (relu's
   * output y) laid out as the output, which starts at out: each element
   * keeps the product where select(greater(y, 0), product, 0) does, and
   * the +0.0 of the select's zero elsewhere (NaN and -0.0 are not > 0).
   * NULL: none. */
  const void *mask, *out;
} fgk_mm_epilogue;

/* Applies e to rows x cols outputs at o (rows ld apart), whose first
 * column is column c0 of the product. (matmul.c) */
void fgk_mm_epilogue_apply(fg_dtype dt, const fgk_mm_epilogue *e, void *o, int64_t ld, int64_t rows,
                           int64_t c0, int64_t cols);

typedef struct fgk_mv_job {
  const fgk_mm_plan *pl; /* NULL: one product (a's batches stacked into M) */
  const void *a, *b;
  void *o;
  int64_t M, K, N, batches; /* per product; batches products, outputs one after another */
  int ta, tb;
  const fgk_mm_epilogue *epi; /* NULL: none */
} fgk_mv_job;

/* Runs J (dtype dt) over ctx->par when it is a few-row product this path
 * takes: 1 done, 0 not taken (the caller runs its GEMM). */
int fgk_matvec(const fg_kctx *ctx, fg_dtype dt, const fgk_mv_job *J);

/* A float product (plan pl, dtype dt) into out[0] in tiles over
 * ctx->par, with the epilogue epi (NULL: none; a strided plan takes
 * none) on each tile. 0 or -1. (matmul.c) */
int fgk_mm_float(const fg_kctx *ctx, fg_dtype dt, const fgk_mm_plan *pl,
                 const fgk_mm_epilogue *epi);

/* a's, b's and out's element offsets for output batch bi of pl.
 * (matmul.c) */
void fgk_mm_seek(const fgk_mm_plan *pl, int64_t bi, int64_t *ao, int64_t *bo, int64_t *oo);

#endif
