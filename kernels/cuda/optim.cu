/* Optimizer updates on the GPU: apply_sgd, apply_momentum and apply_adam,
 * one fused kernel per variable, with torch.optim's formulas exactly as
 * kernels/cpu/optim.c arranges them (per-element arithmetic in the
 * variable's dtype, the scalars in double rounded once to it).
 *
 * lr and step live on the device (rank-0 tensors of any numeric dtype), so
 * each block's thread 0 reads them and derives the scalars into shared
 * memory; nothing goes back to the host. An Adam step below 1 cannot fail
 * the call: it is recorded in the error flag (FG_CUDA_ERR_ADAM_STEP) and the
 * update is skipped, leaving var, m and v untouched, as on the CPU. */
#include <math.h>

#include "kernels/cuda/common.cuh"

__device__ __forceinline__ double read_scalar(const void *p, int dt) {
  switch (dt) {
  case FG_F32: return *(const float *)p;
  case FG_F64: return *(const double *)p;
  case FG_I32: return *(const int32_t *)p;
  default: return (double)*(const int64_t *)p;
  }
}

__device__ __forceinline__ float o_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double o_sqrt(double x) { return sqrt(x); }

/* A rank-0 numeric input (checked on the host; read on the device). */
static int scalar_in(const fg_kctx *ctx, int i, const char *what) {
  const fg_kbuf *b = &ctx->in[i];
  if (b->rank != 0) return fgk_fail(ctx, "input %d (%s) has rank %d, expected 0", i, what, b->rank);
  switch (b->dtype) {
  case FG_F32:
  case FG_F64:
  case FG_I32:
  case FG_I64: return 0;
  default: return fgk_fail(ctx, "input %d (%s) is %s", i, what, fg_dtype_name(b->dtype));
  }
}

/* For direct callers that pass an output buffer other than the variable. */
static int publish(const fg_kctx *ctx, size_t es) {
  return fgc_copy_bytes(ctx, ctx->out[0].data, ctx->in[0].data,
                        (size_t)fgk_numel(&ctx->out[0]) * es);
}

/* var -= lr * grad */
template <typename T>
__global__ void sgd_kernel(T *var, const T *g, int64_t n, const void *lr_p, int lr_dt) {
  __shared__ T a;
  if (threadIdx.x == 0) a = (T)read_scalar(lr_p, lr_dt);
  __syncthreads();
  FGC_GRID_STRIDE(i, n) { var[i] -= a * g[i]; }
}

template <typename T> static int sgd(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 3, 1) != 0 || fgk_optim_check(ctx, dt, 2) != 0 || scalar_in(ctx, 2, "lr") != 0)
    return -1;
  const int64_t n = fgk_numel(&ctx->in[0]);
  if (n == 0) return 0;
  sgd_kernel<T><<<fgc_blocks(n, FGC_THREADS * 4), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (T *)ctx->in[0].data, (const T *)ctx->in[1].data, n, ctx->in[2].data, ctx->in[2].dtype);
  if (fgc_launched(ctx, "apply_sgd kernel") != 0) return -1;
  return publish(ctx, sizeof(T));
}
int fgc_apply_sgd_f32(const fg_kctx *ctx) { return sgd<float>(ctx, FG_F32); }
int fgc_apply_sgd_f64(const fg_kctx *ctx) { return sgd<double>(ctx, FG_F64); }

/* torch.optim.SGD (dampening 0): buf = mom*buf + grad;
 * var -= lr * (nesterov ? grad + mom*buf : buf). */
template <typename T>
__global__ void momentum_kernel(T *var, T *buf, const T *g, int64_t n, const void *lr_p, int lr_dt,
                                T mom, int nesterov) {
  __shared__ T a;
  if (threadIdx.x == 0) a = (T)read_scalar(lr_p, lr_dt);
  __syncthreads();
  FGC_GRID_STRIDE(i, n) {
    const T gi = g[i];
    const T b = mom * buf[i] + gi;
    buf[i] = b;
    var[i] -= a * (nesterov ? gi + mom * b : b);
  }
}

template <typename T> static int momentum(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 4, 1) != 0 || fgk_optim_check(ctx, dt, 3) != 0 || scalar_in(ctx, 3, "lr") != 0)
    return -1;
  const int64_t n = fgk_numel(&ctx->in[0]);
  if (n == 0) return 0;
  momentum_kernel<T><<<fgc_blocks(n, FGC_THREADS * 4), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (T *)ctx->in[0].data, (T *)ctx->in[1].data, (const T *)ctx->in[2].data, n, ctx->in[3].data,
      ctx->in[3].dtype, (T)ctx->p->momentum, ctx->p->nesterov);
  if (fgc_launched(ctx, "apply_momentum kernel") != 0) return -1;
  return publish(ctx, sizeof(T));
}
int fgc_apply_momentum_f32(const fg_kctx *ctx) { return momentum<float>(ctx, FG_F32); }
int fgc_apply_momentum_f64(const fg_kctx *ctx) { return momentum<double>(ctx, FG_F64); }

/* torch.optim.Adam / AdamW (weight_decay > 0, decoupled), t = step:
 *   var *= 1 - lr*wd
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
 *   var -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps) */
template <typename T>
__global__ void adam_kernel(T *var, T *m, T *v, const T *g, int64_t n, const void *lr_p, int lr_dt,
                            const void *step_p, int step_dt, double beta1, double beta2,
                            double epsilon, double wd, int *flag) {
  __shared__ T step_size, bc2_sqrt, keep;
  __shared__ int ok;
  if (threadIdx.x == 0) {
    const double lr = read_scalar(lr_p, lr_dt), t = read_scalar(step_p, step_dt);
    ok = t >= 1; /* false for NaN too */
    if (!ok && blockIdx.x == 0) fgc_raise(flag, FG_CUDA_ERR_ADAM_STEP, 5, 0, 0, t);
    step_size = (T)(lr / (1.0 - pow(beta1, t)));
    bc2_sqrt = (T)sqrt(1.0 - pow(beta2, t));
    keep = (T)(1.0 - lr * wd);
  }
  __syncthreads();
  if (!ok) return;
  const T b1 = (T)beta1, b2 = (T)beta2, c1 = (T)(1.0 - beta1), c2 = (T)(1.0 - beta2);
  const T eps = (T)epsilon;
  const bool decay = wd > 0;
  FGC_GRID_STRIDE(i, n) {
    T x = var[i];
    if (decay) x *= keep;
    const T gi = g[i];
    const T mi = b1 * m[i] + c1 * gi;
    const T vi = b2 * v[i] + c2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    var[i] = x - step_size * (mi / (o_sqrt(vi) / bc2_sqrt + eps));
  }
}

template <typename T> static int adam(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 6, 1) != 0 || fgk_optim_check(ctx, dt, 4) != 0 ||
      scalar_in(ctx, 4, "lr") != 0 || scalar_in(ctx, 5, "step") != 0 || fgc_need_flag(ctx) != 0)
    return -1;
  const int64_t n = fgk_numel(&ctx->in[0]);
  const fg_kparams *p = ctx->p;
  /* Launched even for an empty variable, so a bad step is still reported. */
  adam_kernel<T><<<fgc_blocks(n, FGC_THREADS * 4), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (T *)ctx->in[0].data, (T *)ctx->in[1].data, (T *)ctx->in[2].data, (const T *)ctx->in[3].data,
      n, ctx->in[4].data, ctx->in[4].dtype, ctx->in[5].data, ctx->in[5].dtype, p->beta1, p->beta2,
      p->epsilon, p->weight_decay, ctx->cuda->error_flag);
  if (fgc_launched(ctx, "apply_adam kernel") != 0) return -1;
  return publish(ctx, sizeof(T));
}
int fgc_apply_adam_f32(const fg_kctx *ctx) { return adam<float>(ctx, FG_F32); }
int fgc_apply_adam_f64(const fg_kctx *ctx) { return adam<double>(ctx, FG_F64); }
