/* Kernels of the data-parallel ops: all_reduce (calls the communicator the
 * executor passes in ctx->comm; without one it is a group of one, the
 * identity) and shard (one replica's rows of a batch). */
#include <stdio.h>
#include <string.h>

#include "dist/comm.h"
#include "kernels/cpu/cpu_kernels.h"

static size_t elem_size(fg_dtype dt) {
  return dt == FG_F64 || dt == FG_I64 ? 8 : dt == FG_BOOL ? 1 : 4;
}

int fgk_all_reduce(const fg_kctx *ctx) {
  if (fgk_check(ctx, 1, 1)) return -1;
  const fg_kbuf *x = &ctx->in[0];
  fg_kbuf *y = &ctx->out[0];
  int64_t n = fgk_numel(x);
  if (y->data != x->data && n > 0) memcpy(y->data, x->data, (size_t)n * elem_size(x->dtype));
  fg_comm *c = ctx->comm;
  if (!c || c->size <= 1 || n == 0) return 0;
  fg_status *st = fg_status_new();
  if (!st) return fgk_fail(ctx, "all_reduce: out of memory");
  /* p->keepdims carries the node's "mean" attribute (executor/plan.c). */
  int rc = c->ops->all_reduce(c, y->data, n, y->dtype, ctx->p->keepdims, st);
  if (rc != 0) {
    /* The communicator's code matters (deadline vs bad input): keep it in
     * the message, the executor reports the node. */
    fgk_fail(ctx, "%s: %s", fg_code_name(fg_status_code(st)), fg_status_message(st));
  }
  fg_status_free(st);
  return rc != 0 ? -1 : 0;
}

int fgk_shard(const fg_kctx *ctx) {
  if (fgk_check(ctx, 1, 1)) return -1;
  const fg_kbuf *x = &ctx->in[0];
  fg_kbuf *y = &ctx->out[0];
  int64_t count = ctx->p->depth, index = ctx->p->begin[0];
  if (x->rank < 1 || count < 1 || index < 0 || index >= count || x->dims[0] % count != 0 ||
      y->dims[0] != x->dims[0] / count)
    return fgk_fail(ctx, "shard %lld of %lld: input has %lld rows, which do not split evenly",
                    (long long)index, (long long)count, (long long)(x->rank ? x->dims[0] : 0));
  int64_t row = 1;
  for (int d = 1; d < x->rank; d++)
    row *= x->dims[d];
  size_t bytes = (size_t)(row * y->dims[0]) * elem_size(x->dtype);
  if (bytes) memcpy(y->data, (const char *)x->data + (size_t)index * bytes, bytes);
  return 0;
}
