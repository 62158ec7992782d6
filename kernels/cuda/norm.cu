/* The normalization ops on the GPU, with the CPU kernels' formulas
 * (kernels/cpu/norm.c): two-pass statistics with double accumulators, y =
 * x a + b with a = scale inv_std and b = shift - mean a in double.
 *
 * One block per channel (batch_norm) or row (layer, group and instance
 * norm), summing through a fixed shared-memory tree, so results are
 * deterministic; the row norms' dscale and dshift take one thread per
 * parameter looping over the samples in order. batch_norm's training flag
 * stays on the device: every block reads it, nothing goes back to the
 * host. So one check differs from the CPU: a training batch of one value
 * per channel gives a NaN unbiased variance here instead of an error. */
#include <math.h>

#include "kernels/cuda/common.cuh"

/* Sum over the block's FGC_THREADS threads; every thread gets it. */
__device__ __forceinline__ double block_sum(double v, double *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = FGC_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}

/* Element i of channel c (batch_norm): sample i / S, position i % S. */
__device__ __forceinline__ int64_t bn_at(int64_t i, int64_t c, int64_t C, int64_t S) {
  return ((i / S) * C + c) * S + i % S;
}

template <typename T>
__global__ void bn_fwd_kernel(const T *x, const T *scale, const T *shift, const T *rm, const T *rv,
                              const uint8_t *training, T *y, T *mean_o, T *inv_o, T *var_o,
                              int64_t N, int64_t C, int64_t S, double eps) {
  __shared__ double sh[FGC_THREADS];
  const int tr = *training != 0;
  const int64_t M = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double mean, inv, vout;
    if (tr) {
      double s = 0, q = 0;
      for (int64_t i = threadIdx.x; i < M; i += blockDim.x)
        s += (double)x[bn_at(i, c, C, S)];
      mean = block_sum(s, sh) / (double)M;
      for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
        const double d = (double)x[bn_at(i, c, C, S)] - mean;
        q += d * d;
      }
      q = block_sum(q, sh);
      inv = 1.0 / sqrt(q / (double)M + eps);
      vout = q / (double)(M - 1);
    } else {
      mean = (double)rm[c];
      vout = (double)rv[c];
      inv = 1.0 / sqrt(vout + eps);
    }
    const double a = (double)scale[c] * inv, b = (double)shift[c] - mean * a;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t o = bn_at(i, c, C, S);
      y[o] = (T)((double)x[o] * a + b);
    }
    if (threadIdx.x == 0) {
      mean_o[c] = (T)mean;
      inv_o[c] = (T)inv;
      var_o[c] = (T)vout;
    }
  }
}

template <typename T>
__global__ void bn_grad_kernel(const T *dy, const T *x, const T *scale, const T *mean_i,
                               const T *inv_i, const uint8_t *training, T *dx, T *dscale, T *dshift,
                               int64_t N, int64_t C, int64_t S) {
  __shared__ double sh[FGC_THREADS];
  const int tr = *training != 0;
  const int64_t M = N * S;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const double mean = (double)mean_i[c], inv = (double)inv_i[c];
    double sdy = 0, sdyx = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t o = bn_at(i, c, C, S);
      const double g = (double)dy[o];
      sdy += g;
      sdyx += g * ((double)x[o] - mean) * inv;
    }
    sdy = block_sum(sdy, sh);
    sdyx = block_sum(sdyx, sh);
    const double a = (double)scale[c] * inv;
    const double m1 = tr ? sdy / (double)M : 0, m2 = tr ? sdyx / (double)M : 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t o = bn_at(i, c, C, S);
      const double xh = ((double)x[o] - mean) * inv;
      dx[o] = (T)(a * ((double)dy[o] - m1 - xh * m2));
    }
    if (threadIdx.x == 0) {
      dscale[c] = (T)sdyx;
      dshift[c] = (T)sdy;
    }
  }
}

template <typename T>
__global__ void bn_update_kernel(T *rm, T *rv, const T *mean, const T *var, const uint8_t *training,
                                 int64_t C, double m) {
  if (*training == 0) return;
  FGC_GRID_STRIDE(c, C) {
    rm[c] = (T)((1 - m) * (double)rm[c] + m * (double)mean[c]);
    rv[c] = (T)((1 - m) * (double)rv[c] + m * (double)var[c]);
  }
}

/* Row r of the row norms: L = Cg S contiguous elements; element j takes
 * parameter (r % G) Cg + j / S. */
template <typename T>
__global__ void row_fwd_kernel(const T *x, const T *scale, const T *shift, T *y, T *mean_o,
                               T *inv_o, int64_t R, int64_t G, int64_t Cg, int64_t S, double eps) {
  __shared__ double sh[FGC_THREADS];
  const int64_t L = Cg * S;
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T *xr = x + r * L;
    T *yr = y + r * L;
    double s = 0, q = 0;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x)
      s += (double)xr[j];
    const double mean = block_sum(s, sh) / (double)L;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const double d = (double)xr[j] - mean;
      q += d * d;
    }
    const double inv = 1.0 / sqrt(block_sum(q, sh) / (double)L + eps);
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const int64_t ai = (r % G) * Cg + j / S;
      const double a = (double)scale[ai] * inv, b = (double)shift[ai] - mean * a;
      yr[j] = (T)((double)xr[j] * a + b);
    }
    if (threadIdx.x == 0) {
      mean_o[r] = (T)mean;
      inv_o[r] = (T)inv;
    }
  }
}

template <typename T>
__global__ void row_dx_kernel(const T *dy, const T *x, const T *scale, const T *mean_i,
                              const T *inv_i, T *dx, int64_t R, int64_t G, int64_t Cg, int64_t S) {
  __shared__ double sh[FGC_THREADS];
  const int64_t L = Cg * S;
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T *xr = x + r * L, *dyr = dy + r * L;
    T *dxr = dx + r * L;
    const double mean = (double)mean_i[r], inv = (double)inv_i[r];
    double s1 = 0, s2 = 0;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const double g = (double)dyr[j] * (double)scale[(r % G) * Cg + j / S];
      s1 += g;
      s2 += g * ((double)xr[j] - mean) * inv;
    }
    s1 = block_sum(s1, sh) / (double)L;
    s2 = block_sum(s2, sh) / (double)L;
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
      const double g = (double)dyr[j] * (double)scale[(r % G) * Cg + j / S];
      const double xh = ((double)xr[j] - mean) * inv;
      dxr[j] = (T)(inv * (g - s1 - xh * s2));
    }
  }
}

template <typename T>
__global__ void row_dparam_kernel(const T *dy, const T *x, const T *mean_i, const T *inv_i,
                                  T *dscale, T *dshift, int64_t N, int64_t G, int64_t Cg,
                                  int64_t S) {
  const int64_t L = Cg * S;
  FGC_GRID_STRIDE(ai, G * Cg) {
    double s = 0, t = 0;
    for (int64_t n = 0; n < N; n++) {
      const int64_t r = n * G + ai / Cg, o = r * L + (ai % Cg) * S;
      const double mean = (double)mean_i[r], inv = (double)inv_i[r];
      for (int64_t k = 0; k < S; k++) {
        const double g = (double)dy[o + k];
        t += g;
        s += g * ((double)x[o + k] - mean) * inv;
      }
    }
    dscale[ai] = (T)s;
    dshift[ai] = (T)t;
  }
}

static unsigned grid_of(int64_t items) { return fgc_blocks(items, 1); }

template <typename T> static int batch_norm(const fg_kctx *ctx, fg_dtype dt) {
  fgk_norm_geom g;
  if (fgc_check(ctx, 6, 4) != 0 || fgk_norm_check(ctx, FGK_NORM_BN, dt, &g) != 0) return -1;
  if (g.Cg == 0) return 0;
  const fg_kbuf *in = ctx->in, *out = ctx->out;
  bn_fwd_kernel<T><<<grid_of(g.Cg), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const T *)in[0].data, (const T *)in[1].data, (const T *)in[2].data, (const T *)in[3].data,
      (const T *)in[4].data, (const uint8_t *)in[5].data, (T *)out[0].data, (T *)out[1].data,
      (T *)out[2].data, (T *)out[3].data, g.N, g.Cg, g.S, ctx->p->norm.epsilon);
  return fgc_launched(ctx, "batch_norm kernel");
}

template <typename T> static int batch_norm_grad(const fg_kctx *ctx, fg_dtype dt) {
  fgk_norm_geom g;
  if (fgc_check(ctx, 6, 3) != 0 || fgk_norm_check(ctx, FGK_NORM_BN_GRAD, dt, &g) != 0) return -1;
  if (g.Cg == 0) return 0;
  const fg_kbuf *in = ctx->in, *out = ctx->out;
  bn_grad_kernel<T><<<grid_of(g.Cg), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const T *)in[0].data, (const T *)in[1].data, (const T *)in[2].data, (const T *)in[3].data,
      (const T *)in[4].data, (const uint8_t *)in[5].data, (T *)out[0].data, (T *)out[1].data,
      (T *)out[2].data, g.N, g.Cg, g.S);
  return fgc_launched(ctx, "batch_norm_grad kernel");
}

template <typename T> static int bn_update(const fg_kctx *ctx, fg_dtype dt) {
  fgk_norm_geom g;
  if (fgc_check(ctx, 5, 1) != 0 || fgk_norm_check(ctx, FGK_NORM_BN_UPDATE, dt, &g) != 0) return -1;
  const double m = ctx->p->norm.momentum;
  if (!(m >= 0 && m <= 1)) return fgk_fail(ctx, "momentum %g is outside [0, 1]", m);
  const int64_t C = g.Cg;
  if (C == 0) return 0;
  const fg_kbuf *in = ctx->in;
  bn_update_kernel<T><<<fgc_blocks(C, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (T *)in[0].data, (T *)in[1].data, (const T *)in[2].data, (const T *)in[3].data,
      (const uint8_t *)in[4].data, C, m);
  if (fgc_launched(ctx, "batch_norm_update_stats kernel") != 0) return -1;
  return fgc_copy_bytes(ctx, ctx->out[0].data, in[0].data, (size_t)C * sizeof(T));
}

template <typename T> static int row_norm(const fg_kctx *ctx, int op, fg_dtype dt) {
  fgk_norm_geom g;
  if (fgc_check(ctx, 3, 3) != 0 || fgk_norm_check(ctx, op, dt, &g) != 0) return -1;
  const int64_t R = g.N * g.G;
  if (R == 0 || g.Cg * g.S == 0) return 0;
  const fg_kbuf *in = ctx->in, *out = ctx->out;
  row_fwd_kernel<T><<<grid_of(R), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const T *)in[0].data, (const T *)in[1].data, (const T *)in[2].data, (T *)out[0].data,
      (T *)out[1].data, (T *)out[2].data, R, g.G, g.Cg, g.S, ctx->p->norm.epsilon);
  return fgc_launched(ctx, "row norm kernel");
}

template <typename T> static int row_norm_grad(const fg_kctx *ctx, int op, fg_dtype dt) {
  fgk_norm_geom g;
  if (fgc_check(ctx, 5, 3) != 0 || fgk_norm_check(ctx, op, dt, &g) != 0) return -1;
  const int64_t R = g.N * g.G, P = g.G * g.Cg;
  const fg_kbuf *in = ctx->in, *out = ctx->out;
  if (R > 0 && g.Cg * g.S > 0) {
    row_dx_kernel<T><<<grid_of(R), FGC_THREADS, 0, fgc_stream(ctx)>>>(
        (const T *)in[0].data, (const T *)in[1].data, (const T *)in[2].data, (const T *)in[3].data,
        (const T *)in[4].data, (T *)out[0].data, R, g.G, g.Cg, g.S);
    if (fgc_launched(ctx, "row norm dx kernel") != 0) return -1;
  }
  if (P == 0) return 0;
  row_dparam_kernel<T><<<fgc_blocks(P, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const T *)in[0].data, (const T *)in[1].data, (const T *)in[3].data, (const T *)in[4].data,
      (T *)out[1].data, (T *)out[2].data, g.N, g.G, g.Cg, g.S);
  return fgc_launched(ctx, "row norm dscale kernel");
}

int fgc_batch_norm_f32(const fg_kctx *ctx) { return batch_norm<float>(ctx, FG_F32); }
int fgc_batch_norm_f64(const fg_kctx *ctx) { return batch_norm<double>(ctx, FG_F64); }
int fgc_batch_norm_grad_f32(const fg_kctx *ctx) { return batch_norm_grad<float>(ctx, FG_F32); }
int fgc_batch_norm_grad_f64(const fg_kctx *ctx) { return batch_norm_grad<double>(ctx, FG_F64); }
int fgc_batch_norm_update_stats_f32(const fg_kctx *ctx) { return bn_update<float>(ctx, FG_F32); }
int fgc_batch_norm_update_stats_f64(const fg_kctx *ctx) { return bn_update<double>(ctx, FG_F64); }
int fgc_layer_norm_f32(const fg_kctx *ctx) { return row_norm<float>(ctx, FGK_NORM_LAYER, FG_F32); }
int fgc_layer_norm_f64(const fg_kctx *ctx) { return row_norm<double>(ctx, FGK_NORM_LAYER, FG_F64); }
int fgc_layer_norm_grad_f32(const fg_kctx *ctx) {
  return row_norm_grad<float>(ctx, FGK_NORM_LAYER_GRAD, FG_F32);
}
int fgc_layer_norm_grad_f64(const fg_kctx *ctx) {
  return row_norm_grad<double>(ctx, FGK_NORM_LAYER_GRAD, FG_F64);
}
int fgc_group_norm_f32(const fg_kctx *ctx) { return row_norm<float>(ctx, FGK_NORM_GROUP, FG_F32); }
int fgc_group_norm_f64(const fg_kctx *ctx) { return row_norm<double>(ctx, FGK_NORM_GROUP, FG_F64); }
int fgc_group_norm_grad_f32(const fg_kctx *ctx) {
  return row_norm_grad<float>(ctx, FGK_NORM_GROUP_GRAD, FG_F32);
}
int fgc_group_norm_grad_f64(const fg_kctx *ctx) {
  return row_norm_grad<double>(ctx, FGK_NORM_GROUP_GRAD, FG_F64);
}
