/* random_uniform, random_normal and truncated_normal on the CPU. The values
 * come from kernels/philox.h, shared with the CUDA kernels: element i is a
 * function of (seed, stream, i) alone, so the output is the same for any
 * split of the range over threads, and the same as the GPU's. */
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/philox.h"

enum { R_UNIFORM, R_NORMAL, R_TRUNC };

typedef struct rand_job {
  const fg_random_params *p;
  int kind;
  fg_dtype dt;
  int64_t n; /* elements */
  void *out;
} rand_job;

/* Elements per counter block: 4 f32 or 2 f64 (truncated_normal: 1). */
static int64_t per_block(const rand_job *j) {
  if (j->kind == R_TRUNC) return 1;
  return j->dt == FG_F32 ? 4 : 2;
}

/* Blocks [b0, b1): each writes the elements of its block that exist. */
static void rand_range(void *arg, int64_t b0, int64_t b1) {
  const rand_job *j = arg;
  const fg_random_params *p = j->p;
  const uint64_t seed = (uint64_t)p->seed;
  const uint32_t stream = (uint32_t)p->stream;
  const int64_t per = per_block(j);
  for (int64_t b = b0; b < b1; b++) {
    const int64_t e0 = b * per;
    const int64_t cnt = j->n - e0 < per ? j->n - e0 : per;
    float f[4];
    double d[2];
    if (j->kind == R_TRUNC) {
      const double z = fg_rand_trunc_z(seed, stream, (uint64_t)b, j->dt == FG_F64);
      const double v = fg_philox_axpb(p->stddev, z, p->mean);
      if (j->dt == FG_F32)
        ((float *)j->out)[e0] = (float)v;
      else
        ((double *)j->out)[e0] = v;
      continue;
    }
    if (j->dt == FG_F32) {
      if (j->kind == R_UNIFORM)
        fg_rand_uniform_f32(seed, stream, (uint64_t)b, p->low, p->high, f);
      else
        fg_rand_normal_f32(seed, stream, (uint64_t)b, p->mean, p->stddev, f);
      memcpy((float *)j->out + e0, f, (size_t)cnt * sizeof f[0]);
    } else {
      if (j->kind == R_UNIFORM)
        fg_rand_uniform_f64(seed, stream, (uint64_t)b, p->low, p->high, d);
      else
        fg_rand_normal_f64(seed, stream, (uint64_t)b, p->mean, p->stddev, d);
      memcpy((double *)j->out + e0, d, (size_t)cnt * sizeof d[0]);
    }
  }
}

static int run_random(const fg_kctx *ctx, fg_dtype dt, int kind) {
  if (fgk_check(ctx, 0, 1) != 0) return -1;
  fg_kbuf *out = &ctx->out[0];
  if (out->dtype != dt)
    return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(out->dtype), fg_dtype_name(dt));
  const fg_random_params *p = &ctx->p->random;
  if (p->stream < 0 || p->stream > (int64_t)UINT32_MAX)
    return fgk_fail(ctx, "stream %lld is outside [0, 2^32)", (long long)p->stream);
  rand_job j = {p, kind, dt, fgk_numel(out), out->data};
  if (j.n == 0) return 0;
  const int64_t per = per_block(&j);
  const int64_t blocks = (j.n + per - 1) / per;
  /* A block is ~10 rounds of two multiplies (plus log/sin/cos for the
   * normals): MATH-sized work per element. */
  fgk_parallel_for(ctx, blocks, FGK_GRAIN_MATH / per, rand_range, &j);
  return 0;
}

int fgk_random_uniform_f32(const fg_kctx *ctx) { return run_random(ctx, FG_F32, R_UNIFORM); }
int fgk_random_uniform_f64(const fg_kctx *ctx) { return run_random(ctx, FG_F64, R_UNIFORM); }
int fgk_random_normal_f32(const fg_kctx *ctx) { return run_random(ctx, FG_F32, R_NORMAL); }
int fgk_random_normal_f64(const fg_kctx *ctx) { return run_random(ctx, FG_F64, R_NORMAL); }
int fgk_truncated_normal_f32(const fg_kctx *ctx) { return run_random(ctx, FG_F32, R_TRUNC); }
int fgk_truncated_normal_f64(const fg_kctx *ctx) { return run_random(ctx, FG_F64, R_TRUNC); }
