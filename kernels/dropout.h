/* What the CPU (kernels/cpu/dropout.c) and CUDA (kernels/cuda/dropout.cu)
 * dropout kernels share besides the mask (kernels/philox.h): the checks of
 * a call, so both refuse the same calls with the same text, and the key. */
#ifndef FG_KERNELS_DROPOUT_H
#define FG_KERNELS_DROPOUT_H

#include "kernels/kernel.h"
#include "kernels/kernel_shape.h"
#include "kernels/philox.h"

/* The mask's key besides the step. */
typedef struct fg_dropout_key {
  uint64_t seed, step, thr;
  uint32_t stream, replica;
  double scale; /* 1 / (1 - p), rounded by the kernel to its type */
} fg_dropout_key;

/* dropout(x, training) and dropout_grad(dy, training) into out[0]: x's
 * dtype dt and element count, training a bool scalar, p in [0, 1), a
 * stream in [0, 2^32) and fewer than 2^34 elements (the mask numbers its
 * 4-element blocks with 32 bits). 0 with *k filled, or -1. */
static inline int fgk_dropout_check(const fg_kctx *ctx, fg_dtype dt, fg_dropout_key *k) {
  const fg_kbuf *x = &ctx->in[0], *t = &ctx->in[1], *o = &ctx->out[0];
  const fg_dropout_params *p = &ctx->p->dropout;
  if (x->dtype != dt || o->dtype != dt)
    return fgk_fail(ctx, "input 0 is %s and the output %s, expected %s", fg_dtype_name(x->dtype),
                    fg_dtype_name(o->dtype), fg_dtype_name(dt));
  if (t->dtype != FG_BOOL || t->rank != 0)
    return fgk_fail(ctx, "input 'training' is %s of rank %d, expected a bool scalar",
                    fg_dtype_name(t->dtype), t->rank);
  if (fgk_numel(x) != fgk_numel(o))
    return fgk_fail(ctx, "input 0 has %lld elements, the output %lld", (long long)fgk_numel(x),
                    (long long)fgk_numel(o));
  if (fgk_numel(x) >= ((int64_t)1 << 34))
    return fgk_fail(ctx, "input 0 has %lld elements; dropout takes fewer than 2^34",
                    (long long)fgk_numel(x));
  if (!(p->p >= 0 && p->p < 1)) return fgk_fail(ctx, "p = %g is outside [0, 1)", p->p);
  if (p->stream < 0 || p->stream > (int64_t)UINT32_MAX)
    return fgk_fail(ctx, "stream %lld is outside [0, 2^32)", (long long)p->stream);
  if (p->replica < 0 || p->replica > 0xFFFF)
    return fgk_fail(ctx, "replica %lld is outside [0, 2^16)", (long long)p->replica);
  k->seed = (uint64_t)p->seed;
  k->step = ctx->rng_step;
  k->thr = fg_dropout_threshold(p->p);
  k->stream = (uint32_t)p->stream;
  k->replica = fg_dropout_replica(ctx->rng_replica, (uint32_t)p->replica);
  k->scale = 1.0 / (1.0 - p->p);
  return 0;
}

#endif
