/* random_uniform, random_normal and truncated_normal on the GPU: one thread
 * per counter block (grid-stride), each computing its values with the same
 * functions as the CPU kernels (kernels/philox.h), so element i is the
 * CPU's element i: bit for bit for the uniforms, and for the normals up to
 * the device's log/sin/cos, which are within 1-2 ulp of glibc's (f64 may
 * differ in the last bits; f32, rounded from double, practically never). */
#include "kernels/cuda/common.cuh"
#include "kernels/philox.h"

enum { R_UNIFORM, R_NORMAL, R_TRUNC };

template <typename T>
__global__ void random_kernel(T *out, int64_t n, int64_t blocks, int kind, fg_random_params p) {
  const uint64_t seed = (uint64_t)p.seed;
  const uint32_t stream = (uint32_t)p.stream;
  const int f64 = sizeof(T) == 8;
  for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < blocks;
       b += (int64_t)gridDim.x * blockDim.x) {
    if (kind == R_TRUNC) {
      const double z = fg_rand_trunc_z(seed, stream, (uint64_t)b, f64);
      out[b] = (T)fg_philox_axpb(p.stddev, z, p.mean);
      continue;
    }
    const int64_t per = f64 ? 2 : 4, e0 = b * per;
    const int64_t cnt = n - e0 < per ? n - e0 : per;
    if (f64) {
      double d[2];
      if (kind == R_UNIFORM)
        fg_rand_uniform_f64(seed, stream, (uint64_t)b, p.low, p.high, d);
      else
        fg_rand_normal_f64(seed, stream, (uint64_t)b, p.mean, p.stddev, d);
      for (int64_t k = 0; k < cnt; k++)
        out[e0 + k] = (T)d[k];
    } else {
      float f[4];
      if (kind == R_UNIFORM)
        fg_rand_uniform_f32(seed, stream, (uint64_t)b, p.low, p.high, f);
      else
        fg_rand_normal_f32(seed, stream, (uint64_t)b, p.mean, p.stddev, f);
      for (int64_t k = 0; k < cnt; k++)
        out[e0 + k] = (T)f[k];
    }
  }
}

template <typename T> static int run_random(const fg_kctx *ctx, fg_dtype dt, int kind) {
  if (fgc_check(ctx, 0, 1) != 0) return -1;
  fg_kbuf *out = &ctx->out[0];
  if (out->dtype != dt)
    return fgk_fail(ctx, "output is %s, expected %s", fg_dtype_name(out->dtype), fg_dtype_name(dt));
  const fg_random_params p = ctx->p->random;
  if (p.stream < 0 || p.stream > (int64_t)UINT32_MAX)
    return fgk_fail(ctx, "stream %lld is outside [0, 2^32)", (long long)p.stream);
  const int64_t n = fgk_numel(out);
  if (n == 0) return 0;
  const int64_t per = kind == R_TRUNC ? 1 : (sizeof(T) == 8 ? 2 : 4);
  const int64_t blocks = (n + per - 1) / per;
  random_kernel<T><<<fgc_blocks(blocks, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (T *)out->data, n, blocks, kind, p);
  return fgc_launched(ctx, "random kernel");
}

int fgc_random_uniform_f32(const fg_kctx *ctx) { return run_random<float>(ctx, FG_F32, R_UNIFORM); }
int fgc_random_uniform_f64(const fg_kctx *ctx) {
  return run_random<double>(ctx, FG_F64, R_UNIFORM);
}
int fgc_random_normal_f32(const fg_kctx *ctx) { return run_random<float>(ctx, FG_F32, R_NORMAL); }
int fgc_random_normal_f64(const fg_kctx *ctx) { return run_random<double>(ctx, FG_F64, R_NORMAL); }
int fgc_truncated_normal_f32(const fg_kctx *ctx) { return run_random<float>(ctx, FG_F32, R_TRUNC); }
int fgc_truncated_normal_f64(const fg_kctx *ctx) {
  return run_random<double>(ctx, FG_F64, R_TRUNC);
}
