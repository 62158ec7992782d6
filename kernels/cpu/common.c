/* Helpers shared by the CPU kernel families: error text, argument checks,
 * the broadcast planner and the entry to intra-op parallelism. */
#include <stdarg.h>
#include <stdio.h>

#include "kernels/cpu/cpu_kernels.h"

int fgk_fail(const fg_kctx *ctx, const char *fmt, ...) {
  if (ctx && ctx->err && ctx->err_size > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, ctx->err_size, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int check_buf(const fg_kctx *ctx, const fg_kbuf *b, const char *what, int i) {
  if (b->rank < 0 || b->rank > FG_MAX_RANK)
    return fgk_fail(ctx, "%s %d has rank %d, outside [0, %d]", what, i, b->rank, FG_MAX_RANK);
  for (int d = 0; d < b->rank; d++)
    if (b->dims[d] < 0)
      return fgk_fail(ctx, "%s %d has dim %d = %lld", what, i, d, (long long)b->dims[d]);
  if (fg_dtype_size(b->dtype) == 0)
    return fgk_fail(ctx, "%s %d has unknown dtype %d", what, i, (int)b->dtype);
  if (b->data == NULL && fgk_numel(b) > 0) return fgk_fail(ctx, "%s %d has no data", what, i);
  return 0;
}

int fgk_check(const fg_kctx *ctx, int n_in, int n_out) {
  if (!ctx || !ctx->p || ((n_in > 0 || ctx->n_in > 0) && !ctx->in) || (n_out > 0 && !ctx->out))
    return fgk_fail(ctx, "kernel called without its context");
  if (ctx->n_in < n_in) return fgk_fail(ctx, "expected %d inputs, got %d", n_in, ctx->n_in);
  if (ctx->n_out < n_out) return fgk_fail(ctx, "expected %d outputs, got %d", n_out, ctx->n_out);
  for (int i = 0; i < ctx->n_in; i++)
    if (check_buf(ctx, &ctx->in[i], "input", i) != 0) return -1;
  for (int i = 0; i < n_out; i++)
    if (check_buf(ctx, &ctx->out[i], "output", i) != 0) return -1;
  return 0;
}

int fgk_bcast_init(const fg_kctx *ctx, int n_ops, fgk_bcast *bc) {
  const fg_kbuf *out = &ctx->out[0];
  const int R = out->rank;
  int64_t full[3][FG_MAX_RANK];
  if (n_ops < 1 || n_ops > 3) return fgk_fail(ctx, "bad operand count %d", n_ops);
  for (int k = 0; k < n_ops; k++) {
    const fg_kbuf *in = &ctx->in[k];
    const int r = in->rank;
    if (r > R) return fgk_fail(ctx, "input %d has rank %d, above the output's rank %d", k, r, R);
    int64_t st[FG_MAX_RANK];
    int64_t s = 1;
    for (int j = r - 1; j >= 0; j--) {
      st[j] = s;
      s *= in->dims[j];
    }
    for (int i = 0; i < R; i++) {
      const int j = i - (R - r);
      const int64_t d = j >= 0 ? in->dims[j] : 1;
      if (d == out->dims[i] && d != 1)
        full[k][i] = st[j];
      else if (d == 1)
        full[k][i] = 0;
      else
        return fgk_fail(ctx, "input %d dim %d (%lld) does not broadcast to output dim %d (%lld)", k,
                        j, (long long)d, i, (long long)out->dims[i]);
    }
  }
  fgk_walk_init(bc, n_ops, R, out->dims, full);
  return 0;
}

void fgk_walk_init(fgk_bcast *bc, int n_ops, int rank, const int64_t *dims,
                   int64_t (*strides)[FG_MAX_RANK]) {
  bc->n_ops = n_ops;
  int n = 0;
  for (int i = 0; i < rank; i++) {
    const int64_t d = dims[i];
    if (d == 1) continue;
    int merge = n > 0;
    for (int k = 0; k < n_ops && merge; k++)
      merge = bc->strides[k][n - 1] == strides[k][i] * d;
    if (merge) {
      bc->dims[n - 1] *= d;
      for (int k = 0; k < n_ops; k++)
        bc->strides[k][n - 1] = strides[k][i];
    } else {
      bc->dims[n] = d;
      for (int k = 0; k < n_ops; k++)
        bc->strides[k][n] = strides[k][i];
      n++;
    }
  }
  if (n == 0) {
    bc->dims[0] = 1;
    for (int k = 0; k < n_ops; k++)
      bc->strides[k][0] = 0;
    n = 1;
  }
  bc->rank = n;
}

void fgk_parallel_for(const fg_kctx *ctx, int64_t n, int64_t grain, fg_krange_fn fn, void *arg) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const fg_kparallel *par = ctx ? ctx->par : NULL;
  if (!par || !par->parallel_for || n <= grain) {
    fn(arg, 0, n);
    return;
  }
  par->parallel_for(par->pool, n, grain, fn, arg);
}
