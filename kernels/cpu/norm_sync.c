/* sync_batch_norm and its gradient on the CPU (torch.nn.SyncBatchNorm):
 * batch_norm whose per-channel sums are all-reduced over the communicator
 * the executor hands the node's device (ctx->comm), so every replica
 * normalises with the statistics of the whole batch. The loops are
 * batch_norm's (kernels/cpu/norm.c, norm_body.h); this file only reduces
 * between their passes.
 *
 * The forward takes two collectives, as batch_norm takes two passes: the
 * sums of x and the counts, then the squared deviations from the mean of
 * every replica, so a large mean does not cancel the variance (sums of x
 * and x^2 in one collective would). The gradient takes one, of sum dy and
 * sum dy xhat per channel; dscale and dshift stay this replica's, and
 * fg_data_parallel all-reduces them as any parameter's gradient (torch
 * does the same).
 *
 * Every call carries this rank's training flag, summed: ranks that
 * disagree all fail with the same message rather than issue different
 * collectives. A group of one (no communicator, or one rank) is batch_norm
 * bit for bit; in inference the results are batch_norm's on every rank
 * (the flags are still compared, one collective). */
#include <math.h>
#include <string.h>

#include "kernels/collective.h"
#include "kernels/cpu/norm_sync.h"

/* In place over n doubles of buf, summed over the ranks of c. */
static int reduce(const fg_kctx *ctx, fg_comm *c, double *buf, int64_t n) {
  fg_status *st = fg_comm_kernel_status(c);
  if (!st) return fgk_fail(ctx, "out of memory");
  if (c->ops->all_reduce(c, buf, n, FG_F64, 0, st) == 0) return 0;
  if (ctx->code) *ctx->code = fg_status_code(st);
  return fgk_fail(ctx, "%s: %s", fg_code_name(fg_status_code(st)), fg_status_message(st));
}

/* *training from the ranks' summed flags t: 0 or 1, or -1 with the failure
 * set when they differ (every rank sees the same t, so all fail alike). */
static int agree(const fg_kctx *ctx, double t, int size, int *training) {
  *training = t > 0;
  if (t == 0 || t == (double)size) return 0;
  return fgk_fail(ctx,
                  "input 'training' differs between the replicas (%g of %d in training mode); "
                  "every replica must run in the same mode",
                  t, size);
}

static int sync_bn(const fg_kctx *ctx, fg_dtype dt) {
  fg_comm *c = ctx->comm;
  if (!c || c->size <= 1) return fgk_bn_forward(ctx, dt, NULL);
  fgk_norm_geom g;
  if (fgk_norm_check(ctx, FGK_NORM_BN, dt, &g) != 0) return -1;
  const int64_t C = g.Cg;
  int training = *(const uint8_t *)ctx->in[5].data != 0;
  /* [sums C | count | training] then the statistics [mean | inv | var] */
  double *buf = fg_comm_update_buffer(c, (size_t)(4 * C + 2) * sizeof *buf), *gs = buf + C + 2;
  if (!buf) return fgk_fail(ctx, "out of memory");
  if (training)
    fgk_bn_partials(ctx, dt, 0, &g, NULL, buf);
  else
    memset(buf, 0, (size_t)C * sizeof *buf);
  buf[C] = (double)(g.N * g.S);
  buf[C + 1] = training;
  if (reduce(ctx, c, buf, C + 2) != 0 || agree(ctx, buf[C + 1], c->size, &training) != 0) return -1;
  if (!training) return fgk_bn_forward(ctx, dt, NULL);
  const double M = buf[C];
  if (M < 2)
    return fgk_fail(ctx,
                    "training needs more than 1 value per channel, got %g over the %d replicas", M,
                    c->size);
  for (int64_t k = 0; k < C; k++)
    gs[k] = buf[k] / M;
  fgk_bn_partials(ctx, dt, 0, &g, gs, buf);
  if (reduce(ctx, c, buf, C) != 0) return -1;
  const double eps = ctx->p->norm.epsilon;
  for (int64_t k = 0; k < C; k++) {
    gs[C + k] = 1.0 / sqrt(buf[k] / M + eps);
    gs[2 * C + k] = buf[k] / (M - 1); /* unbiased, for the running variance */
  }
  return fgk_bn_forward(ctx, dt, gs);
}

static void put(fg_kbuf *b, fg_dtype dt, int64_t i, double v) {
  if (dt == FG_F32)
    ((float *)b->data)[i] = (float)v;
  else
    ((double *)b->data)[i] = v;
}

/* dx = scale inv (dy - sum(g) / M_r - xhat sum(g xhat) / M_r) over every
 * replica's g, which is dy itself for a loss summed over all rows
 * (weighted 0), or dy M_r / M where each replica's loss is a mean over its
 * own M_r values and fg_data_parallel weighs the replicas' gradients by
 * M_r / M (weighted 1: the full batch's gradient for uneven shards too;
 * with even shards both are the same). */
static int sync_bn_grad(const fg_kctx *ctx, fg_dtype dt) {
  fg_comm *c = ctx->comm;
  if (!c || c->size <= 1) return fgk_bn_backward(ctx, dt, NULL);
  fgk_norm_geom g;
  if (fgk_norm_check(ctx, FGK_NORM_BN_GRAD, dt, &g) != 0) return -1;
  const int64_t C = g.Cg;
  const double Mr = (double)(g.N * g.S), w = ctx->p->norm.weighted ? Mr : 1;
  int training = *(const uint8_t *)ctx->in[5].data != 0;
  /* [sum dy C | sum dy xhat C | count | training] then gd [2 C] */
  double *buf = fg_comm_update_buffer(c, (size_t)(4 * C + 2) * sizeof *buf), *gd = buf + 2 * C + 2;
  if (!buf) return fgk_fail(ctx, "out of memory");
  memset(buf, 0, (size_t)(2 * C) * sizeof *buf);
  if (training) {
    fgk_bn_partials(ctx, dt, 1, &g, NULL, buf);
    for (int64_t k = 0; k < C; k++) {
      put(&ctx->out[1], dt, k, buf[C + k]);
      put(&ctx->out[2], dt, k, buf[k]);
      buf[k] *= w;
      buf[C + k] *= w;
    }
  }
  buf[2 * C] = Mr;
  buf[2 * C + 1] = training;
  if (reduce(ctx, c, buf, 2 * C + 2) != 0 || agree(ctx, buf[2 * C + 1], c->size, &training) != 0)
    return -1;
  if (!training) return fgk_bn_backward(ctx, dt, NULL);
  const double d = ctx->p->norm.weighted ? buf[2 * C] * Mr : buf[2 * C];
  for (int64_t k = 0; k < 2 * C; k++)
    gd[k] = d > 0 ? buf[k] / d : 0; /* a replica without values has no dx to make */
  return fgk_bn_backward(ctx, dt, gd);
}

#define SYNC_ENTRY(name, call)                                                                     \
  int name##_f32(const fg_kctx *ctx) { return call(ctx, FG_F32); }                                 \
  int name##_f64(const fg_kctx *ctx) { return call(ctx, FG_F64); }
SYNC_ENTRY(fgk_sync_batch_norm, sync_bn)
SYNC_ENTRY(fgk_sync_batch_norm_grad, sync_bn_grad)
