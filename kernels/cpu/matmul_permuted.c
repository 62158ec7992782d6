/* permuted_matmul: transpose(transpose(a, perm_a) @ transpose(b, perm_b),
 * perm_out) without moving a, b or the product. Each batch's matrices are
 * strided views: a's last axis (unit stride) is the permuted a's column
 * axis (a plain row-major operand, lda = the stride of its row axis) or
 * its row axis (a transposed operand, lda = the stride of its column
 * axis), b likewise, and the product's rows are ldc apart in the output.
 * The GEMM calls and their tiles are matmul's for the same M, N and K
 * (kernels/cpu/matmul.c), so the products are matmul's on the transposed
 * copies; the few-row path and the stacking of batches, which need packed
 * operands, are not taken. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/matvec.h"

/* Row-major element strides of x. */
static void strides_of(const fg_kbuf *x, int64_t *st) {
  int64_t s = 1;
  for (int i = x->rank - 1; i >= 0; i--) {
    st[i] = s;
    s *= x->dims[i];
  }
}

/* Operand x read through perm: its matrix's dims (rows,
 * cols), whether it is stored transposed, its leading dim, and its batch
 * dims with their strides. */
static void operand(const fg_kbuf *x, const int *perm, int64_t *dims, int64_t *st_out, int *t,
                    int64_t *ld) {
  const int r = x->rank;
  int64_t st[FG_MAX_RANK];
  strides_of(x, st);
  for (int i = 0; i < r; i++) {
    dims[i] = x->dims[perm[i]];
    st_out[i] = st[perm[i]];
  }
  *t = perm[r - 1] != r - 1;
  *ld = *t ? st[perm[r - 1]] : st[perm[r - 2]];
}

/* Batch dim i of an operand of dims d and strides s against out's
 * batch dim bd: its stride, 0 where it broadcasts; -1 when it does not. */
static int64_t batch_stride(int64_t d, int64_t s, int64_t bd) {
  if (d == bd && d != 1) return s;
  return d == 1 ? 0 : -1;
}

static int check_perms(const fg_kctx *ctx, const fg_permuted_matmul_params *p, int r) {
  if (p->rank != r || r < 2)
    return fgk_fail(ctx, "inputs and output have rank %d, the parameters rank %d", r, p->rank);
  if ((p->perm_a[r - 1] != r - 1 && p->perm_a[r - 2] != r - 1) ||
      (p->perm_b[r - 1] != r - 1 && p->perm_b[r - 2] != r - 1) || p->perm_out[r - 1] != r - 1)
    return fgk_fail(ctx, "a perm moves a last axis out of the matrix axes");
  return 0;
}

int fgk_mm_plan_init_permuted(const fg_kctx *ctx, fg_dtype dt, fgk_mm_plan *pl) {
  if (fgk_check(ctx, 2, 1) != 0) return -1;
  const fg_kbuf *a = &ctx->in[0], *b = &ctx->in[1], *o = &ctx->out[0];
  const fg_permuted_matmul_params *p = &ctx->p->permuted_matmul;
  if (a->dtype != dt || b->dtype != dt || o->dtype != dt)
    return fgk_fail(ctx, "expected %s inputs and output, got %s, %s and %s", fg_dtype_name(dt),
                    fg_dtype_name(a->dtype), fg_dtype_name(b->dtype), fg_dtype_name(o->dtype));
  const int r = o->rank;
  if (a->rank != r || b->rank != r)
    return fgk_fail(ctx, "inputs of rank %d and %d for an output of rank %d", a->rank, b->rank, r);
  if (check_perms(ctx, p, r) != 0) return -1;
  int64_t ad[FG_MAX_RANK], as[FG_MAX_RANK], bd[FG_MAX_RANK], bs[FG_MAX_RANK], os[FG_MAX_RANK];
  operand(a, p->perm_a, ad, as, &pl->ta, &pl->lda);
  operand(b, p->perm_b, bd, bs, &pl->tb, &pl->ldb);
  pl->M = ad[r - 2], pl->K = ad[r - 1], pl->N = bd[r - 1];
  if (bd[r - 2] != pl->K)
    return fgk_fail(ctx, "inner dims differ: a gives K = %lld, b gives K = %lld", (long long)pl->K,
                    (long long)bd[r - 2]);
  /* Output dim i is the product's dim perm_out[i]. */
  int64_t st[FG_MAX_RANK], pd[FG_MAX_RANK];
  strides_of(o, st);
  for (int i = 0; i < r; i++) {
    os[p->perm_out[i]] = st[i];
    pd[p->perm_out[i]] = o->dims[i];
  }
  if (pd[r - 2] != pl->M || pd[r - 1] != pl->N)
    return fgk_fail(ctx, "output's product is [..., %lld, %lld], expected [..., %lld, %lld]",
                    (long long)pd[r - 2], (long long)pd[r - 1], (long long)pl->M, (long long)pl->N);
  pl->ldc = os[r - 2];
  pl->nb = r - 2;
  pl->batch = pl->a_batch = pl->b_batch = 1;
  for (int i = 0; i < pl->nb; i++) {
    pl->bdims[i] = pd[i];
    pl->a_bstride[i] = batch_stride(ad[i], as[i], pd[i]);
    pl->b_bstride[i] = batch_stride(bd[i], bs[i], pd[i]);
    if (pl->a_bstride[i] < 0 || pl->b_bstride[i] < 0)
      return fgk_fail(ctx, "batch dim %d: a has %lld, b %lld, the output %lld", i, (long long)ad[i],
                      (long long)bd[i], (long long)pd[i]);
    pl->o_bstride[i] = os[i];
    pl->batch *= pd[i];
    pl->a_batch *= ad[i];
    pl->b_batch *= bd[i];
  }
  /* BLAS wants every leading dim >= 1 even where a dim is 0 or 1. */
  pl->lda = pl->lda < 1 ? 1 : pl->lda;
  pl->ldb = pl->ldb < 1 ? 1 : pl->ldb;
  pl->ldc = pl->ldc < 1 ? 1 : pl->ldc;
  pl->strided = 1;
  return 0;
}

static int permuted_matmul(const fg_kctx *ctx, fg_dtype dt) {
  fgk_mm_plan pl;
  if (fgk_mm_plan_init_permuted(ctx, dt, &pl) != 0) return -1;
  return fgk_mm_float(ctx, dt, &pl, NULL);
}

int fgk_permuted_matmul_f32(const fg_kctx *ctx) { return permuted_matmul(ctx, FG_F32); }
int fgk_permuted_matmul_f64(const fg_kctx *ctx) { return permuted_matmul(ctx, FG_F64); }
