/* The training flag, dropout and dropout_grad on the CPU. The mask comes
 * from kernels/philox.h, shared with the CUDA kernels: element i's bit is a
 * function of (seed, stream, step, replica, i) alone, so the output is the
 * same for any split over threads, and the same as the GPU's.
 *
 * dropout_grad recomputes the forward's mask rather than reading a stored
 * one: a stored mask would hold a byte (or an element) per input element
 * from the forward pass to the backward, the largest tensors of a network,
 * while recomputing costs 10 Philox rounds per 4 elements on data the
 * kernel streams anyway. */
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/dropout.h"

/* The run's mode (fg_kctx.run_training) as a bool scalar. */
int fgk_training_flag(const fg_kctx *ctx) {
  if (fgk_check(ctx, 0, 1) != 0) return -1;
  if (ctx->out[0].dtype != FG_BOOL || ctx->out[0].rank != 0)
    return fgk_fail(ctx, "output is %s of rank %d, expected a bool scalar",
                    fg_dtype_name(ctx->out[0].dtype), ctx->out[0].rank);
  *(uint8_t *)ctx->out[0].data = ctx->run_training != 0;
  return 0;
}

typedef struct drop_job {
  fg_dropout_key k;
  int f64;
  int64_t n;
  const void *x;
  void *y;
} drop_job;

/* Blocks [b0, b1) of 4 elements: y = keep ? x * scale : 0. */
static void drop_range(void *arg, int64_t b0, int64_t b1) {
  const drop_job *j = arg;
  const float sf = (float)j->k.scale;
  const double sd = j->k.scale;
  for (int64_t b = b0; b < b1; b++) {
    unsigned bits =
        fg_dropout_keep4(j->k.seed, j->k.stream, j->k.step, j->k.replica, (uint64_t)b, j->k.thr);
    const int64_t e0 = b * 4, cnt = j->n - e0 < 4 ? j->n - e0 : 4;
    for (int64_t e = 0; e < cnt; e++) {
      const int keep = (bits >> e) & 1u;
      if (j->f64)
        ((double *)j->y)[e0 + e] = keep ? ((const double *)j->x)[e0 + e] * sd : 0.0;
      else
        ((float *)j->y)[e0 + e] = keep ? ((const float *)j->x)[e0 + e] * sf : 0.0f;
    }
  }
}

/* dropout and dropout_grad are one computation: the gradient of
 * x * mask * scale is dy * mask * scale, with the same mask. */
static int run_dropout(const fg_kctx *ctx, fg_dtype dt) {
  if (fgk_check(ctx, 2, 1) != 0) return -1;
  drop_job j;
  if (fgk_dropout_check(ctx, dt, &j.k) != 0) return -1;
  j.f64 = dt == FG_F64;
  j.n = fgk_numel(&ctx->out[0]);
  j.x = ctx->in[0].data;
  j.y = ctx->out[0].data;
  if (j.n == 0) return 0;
  if (!*(const uint8_t *)ctx->in[1].data) { /* inference: the identity */
    if (j.y != j.x) memmove(j.y, j.x, (size_t)j.n * fg_dtype_size(dt));
    return 0;
  }
  fgk_parallel_for(ctx, (j.n + 3) / 4, FGK_GRAIN_MATH / 4, drop_range, &j);
  return 0;
}

int fgk_dropout_f32(const fg_kctx *ctx) { return run_dropout(ctx, FG_F32); }
int fgk_dropout_f64(const fg_kctx *ctx) { return run_dropout(ctx, FG_F64); }
int fgk_dropout_grad_f32(const fg_kctx *ctx) { return run_dropout(ctx, FG_F32); }
int fgk_dropout_grad_f64(const fg_kctx *ctx) { return run_dropout(ctx, FG_F64); }
