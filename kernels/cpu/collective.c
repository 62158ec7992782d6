/* Kernels of the data-parallel ops: all_reduce (calls the communicator the
 * executor passes in ctx->comm; without one it is a group of one, the
 * identity), the fused updates all_reduce_apply_sgd and
 * sufficient_factor_apply_sgd, and shard (one replica's rows of a batch). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flowgraph/dist.h"
#include "kernels/collective.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/sgd.h"

static size_t elem_size(fg_dtype dt) {
  return dt == FG_F64 || dt == FG_I64 ? 8 : dt == FG_BOOL ? 1 : 4;
}

/* y = x * w (w: this rank's rows; an empty shard adds nothing, even where
 * its gradient is NaN), before the sum of a weighted all_reduce. */
static void scale_into(fg_kbuf *y, const fg_kbuf *x, int64_t n, double w) {
  if (y->dtype == FG_F64) {
    const double *xs = x->data;
    double *ys = y->data;
    for (int64_t i = 0; i < n; i++)
      ys[i] = w == 0 ? 0 : xs[i] * w;
  } else {
    const float *xs = x->data;
    float *ys = y->data;
    for (int64_t i = 0; i < n; i++)
      ys[i] = w == 0 ? 0 : (float)((double)xs[i] * w);
  }
}

static void divide(fg_kbuf *y, int64_t n, double total) {
  if (y->dtype == FG_F64) {
    double *ys = y->data;
    for (int64_t i = 0; i < n; i++)
      ys[i] /= total;
  } else {
    float *ys = y->data;
    for (int64_t i = 0; i < n; i++)
      ys[i] = (float)((double)ys[i] / total);
  }
}

int fgk_all_reduce_weights(double rows, const double sums[2], int size, int *plain, double *w,
                           double *total, char *err, size_t err_size) {
  *w = rows;
  *total = sums[0];
  if (!(*w >= 0) || !(*total > 0) || !(sums[1] >= 0) || *w > *total) {
    snprintf(err, err_size,
             "weighted all_reduce: this rank's rows %g and the ranks' total %g (sum of squares "
             "%g) must satisfy 0 <= rows <= total, total > 0",
             *w, *total, sums[1]);
    return -1;
  }
  *plain = sums[0] * sums[0] == (double)size * sums[1];
  return 0;
}

/* The weighted form's inputs (graph/infer_dist.c): `first` = this rank's
 * rows (1 for all_reduce, 3 for apply_sgd), first + 1 = the all-reduced
 * [sum of rows, sum of rows^2]. */
static int weights(const fg_kctx *ctx, int first, int size, int *plain, double *w, double *total) {
  const fg_kbuf *r = &ctx->in[first], *s = &ctx->in[first + 1];
  if (ctx->n_in < first + 2 || r->dtype != FG_F64 || r->rank != 0 || s->dtype != FG_F64 ||
      s->rank != 1 || s->dims[0] != 2)
    return fgk_fail(ctx, "weighted all_reduce needs an f64 rows scalar and an f64 [2] of sums");
  char err[256];
  if (fgk_all_reduce_weights(*(const double *)r->data, s->data, size, plain, w, total, err,
                             sizeof err) != 0)
    return fgk_fail(ctx, "%s", err);
  return 0;
}

/* The communicator's error, kept in the message (deadline vs bad input):
 * the executor reports the node. */
/* Keeps the communicator's code (a peer's deadline stays one). */
static int comm_fail(const fg_kctx *ctx, const fg_status *st) {
  if (ctx->code) *ctx->code = fg_status_code(st);
  return fgk_fail(ctx, "%s: %s", fg_code_name(fg_status_code(st)), fg_status_message(st));
}

int fgk_all_reduce(const fg_kctx *ctx) {
  if (fgk_check(ctx, 1, 1)) return -1;
  const fg_kbuf *x = &ctx->in[0];
  fg_kbuf *y = &ctx->out[0];
  int64_t n = fgk_numel(x);
  fg_comm *c = ctx->comm;
  int size = c ? c->size : 1, plain = 1, mean = ctx->p->all_reduce.mean;
  double w = 1, total = 1;
  if (ctx->p->all_reduce.weighted && size > 1 && weights(ctx, 1, size, &plain, &w, &total) != 0)
    return -1;
  if (!plain) {
    scale_into(y, x, n, w);
    mean = 0;
  } else if (y->data != x->data && n > 0) {
    memcpy(y->data, x->data, (size_t)n * elem_size(x->dtype));
  }
  /* An empty tensor still takes part: its partners are waiting for it,
   * and a partner with elements must hear that the counts differ rather
   * than wait out the deadline (a fuzzed graph did, on a batch of 0 rows). */
  if (size <= 1) return 0;
  fg_status *st = fg_comm_kernel_status(c);
  if (!st) return fgk_fail(ctx, "all_reduce: out of memory");
  if (c->ops->all_reduce(c, y->data, n, y->dtype, mean, st) != 0) return comm_fail(ctx, st);
  if (!plain) divide(y, n, total);
  return 0;
}

/* The update of the fallback below, split over the executor's threads as
 * apply_sgd's (elementwise: the split never changes a result). */
typedef struct sgd_job {
  fg_dtype dt;
  void *var;
  const void *g;
  double lr;
} sgd_job;

static void sgd_range(void *arg, int64_t i0, int64_t i1) {
  const sgd_job *J = arg;
  const size_t es = elem_size(J->dt), at = (size_t)i0 * es;
  void *dst[1] = {(char *)J->var + at};
  fgk_sgd_to(J->dt, dst, 1, dst[0], (const char *)J->g + at, i1 - i0, J->lr);
}

/* The arithmetic the peer-buffer collectives call back (kernels/
 * collective.h): the SGD update of one reduced block, written into every
 * rank's variable (the bits of apply_sgd, kernels/sgd.h); and a slice of
 * the variable's rows updated from every rank's factors in one GEMM,
 * var_slice += -lr (/ ranks for the mean) * a^T b, on the executor's
 * threads. */
typedef struct peer_sgd {
  void *kctx;
  double lr;
  int mean;
} peer_sgd;

static void sgd_block(void *arg, fg_dtype dtype, void *const *dst, int n, const void *own,
                      const void *sum, int64_t len) {
  fgk_sgd_to(dtype, dst, n, own, sum, len, ((const peer_sgd *)arg)->lr);
}

static void sgd_factors(void *arg, fg_dtype dtype, int64_t ml, int64_t n, int64_t total,
                        const void *ga, const void *gb, void *own, int nranks) {
  const peer_sgd *p = arg;
  fgk_gemm_tn(p->kctx, dtype, ml, n, total, p->mean ? -p->lr / nranks : -p->lr, ga, ml, gb, n, 1.0,
              own, n);
}

/* var -= lr * (the mean, weighted mean or sum over ranks of) the
 * gradient: in[1] (all_reduce_apply_sgd), or (prod,
 * sufficient_factor_apply_sgd) the product a^T b of in[1] and in[3],
 * which is made only where the communicator cannot fuse it. */
static int collective_sgd(const fg_kctx *ctx, double lr, int prod) {
  const fg_kbuf *v = &ctx->in[0], *g = &ctx->in[1], *b = prod ? &ctx->in[3] : NULL;
  const int64_t n = fgk_numel(v), m = v->rank == 2 ? v->dims[0] : 0,
                cols = v->rank == 2 ? v->dims[1] : 0;
  const fg_dtype dt = v->dtype;
  fg_comm *c = ctx->comm;
  int size = c ? c->size : 1, plain = 1, mean = ctx->p->all_reduce.mean;
  double w = 1, total = 1;
  int64_t rows = 0;
  void *kc = (void *)ctx;
  if (prod && fgk_sgd_product_check(ctx, &rows) != 0) return -1;
  /* Rows and sums follow the gradient: inputs 3 and 4, or 4 and 5. */
  if (ctx->p->all_reduce.weighted && size > 1 &&
      weights(ctx, prod ? 4 : 3, size, &plain, &w, &total) != 0)
    return -1;
  sgd_job job = {dt, v->data, g->data, lr};
  if (size <= 1) {
    /* A group of one: the mean of one gradient is itself (a product
     * goes into var in the GEMM). */
    if (prod)
      fgk_sgd_product_apply(ctx, lr, rows);
    else
      fgk_parallel_for(ctx, n, FGK_GRAIN_CHEAP, sgd_range, &job);
    return 0;
  }
  fg_status *st = fg_comm_kernel_status(c);
  if (!st) return fgk_fail(ctx, "all_reduce: out of memory");
  /* Even shards, where the communicator exposes the ranks' buffers (MPI
   * over one host's shared memory): each rank reduces its slice of the
   * gradients (or gathers its slice's factors) straight from the others'
   * buffers and this kernel writes the updated slice into every rank's
   * variable; the ranks' learning rates must agree. */
  int rc = 1;
  peer_sgd ps = {kc, lr, mean};
  if (plain && prod && c->ops->gather_factors)
    rc = c->ops->gather_factors(c, v->data, g->data, b->data, rows, m, cols, dt, lr,
                                "learning rate", sgd_factors, &ps, st);
  else if (plain && !prod && c->ops->all_reduce_apply)
    rc = c->ops->all_reduce_apply(c, v->data, g->data, n, dt, mean, lr, "learning rate", sgd_block,
                                  &ps, st);
  if (rc < 0) return comm_fail(ctx, st);
  if (rc == 0) return 0;
  /* Otherwise all_reduce a copy (the gradient is an input, not this
   * node's to change), or the made product, in a buffer the communicator
   * keeps, then update; uneven shards scale it by this rank's rows, sum,
   * and divide by all rows. */
  size_t bytes = (size_t)(n > 0 ? n : 1) * elem_size(dt);
  fg_kbuf y = *v;
  y.data = fg_comm_update_buffer(c, bytes);
  if (!y.data)
    return fgk_fail(ctx, "all_reduce: cannot allocate %zu bytes for the reduced gradient", bytes);
  if (prod)
    fgk_gemm_tn(kc, dt, m, cols, rows, plain ? 1.0 : w, g->data, m, b->data, cols, 0.0, y.data,
                cols);
  else if (!plain)
    scale_into(&y, g, n, w);
  else if (n > 0)
    memcpy(y.data, g->data, bytes);
  if (c->ops->all_reduce(c, y.data, n, dt, plain && mean, st) != 0) return comm_fail(ctx, st);
  if (!plain) divide(&y, n, total);
  job.g = y.data;
  fgk_parallel_for(ctx, n, FGK_GRAIN_CHEAP, sgd_range, &job);
  return 0;
}

/* The checks of apply_sgd's kernel (kernels/cpu/optim.c) for the fixed
 * inputs, then collective_sgd; the variable is the output. */
static int fused_sgd(const fg_kctx *ctx, int prod) {
  double lr;
  const fg_dtype dt = ctx->in[0].dtype;
  if (fgk_check(ctx, prod ? 4 : 3, 1) != 0) return -1;
  if (dt != FG_F32 && dt != FG_F64)
    return fgk_fail(ctx, "input 0 (var) is %s; f32 or f64 only", fg_dtype_name(dt));
  /* With the factors, in[1] is not the gradient (product_dims checks it). */
  if (fgk_optim_check(ctx, dt, prod ? 1 : 2) != 0 || fgk_scalar_in(ctx, 2, "lr", &lr) != 0 ||
      collective_sgd(ctx, lr, prod) != 0)
    return -1;
  fgk_optim_publish(ctx, elem_size(dt));
  return 0;
}

int fgk_all_reduce_apply_sgd(const fg_kctx *ctx) { return fused_sgd(ctx, 0); }
int fgk_sufficient_factor_apply_sgd(const fg_kctx *ctx) { return fused_sgd(ctx, 1); }

int fgk_shard(const fg_kctx *ctx) {
  if (fgk_check(ctx, 1, 1)) return -1;
  const fg_kbuf *x = &ctx->in[0];
  fg_kbuf *y = &ctx->out[0];
  int64_t count = ctx->p->shard.count, index = ctx->p->shard.index, first = 0;
  int64_t rows = x->rank >= 1 ? x->dims[0] : 0;
  if (x->rank < 1 || count < 1 || index < 0 || index >= count || rows < count ||
      y->dims[0] != fg_shard_rows(rows, count, index, &first))
    return fgk_fail(ctx,
                    "shard %lld of %lld: input has %lld rows; every one of the %lld shards "
                    "needs at least one",
                    (long long)index, (long long)count, (long long)rows, (long long)count);
  int64_t row = 1;
  for (int d = 1; d < x->rank; d++)
    row *= x->dims[d];
  size_t esz = elem_size(x->dtype), bytes = (size_t)(row * y->dims[0]) * esz;
  if (bytes) memcpy(y->data, (const char *)x->data + (size_t)(first * row) * esz, bytes);
  return 0;
}
