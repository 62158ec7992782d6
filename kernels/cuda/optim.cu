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
#include <cublas_v2.h>
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cpu/optim_multi.h"

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

/* The updates run V elements per thread and iteration: 4, as aligned
 * vector loads and stores, when every buffer is aligned to 4 elements (a
 * separate allocation or arena slot always is), which brings them to the
 * memory's bandwidth; else 1. The < V tail goes to block 0. The per-element
 * arithmetic is the same either way. */
template <typename T>
static int vec4_ok(const void *a, const void *b, const void *c = NULL, const void *d = NULL) {
  const uintptr_t m = 4 * sizeof(T) - 1;
  return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) & m) == 0;
}
/* var -= lr * grad */
template <typename T, int V>
__global__ void sgd_kernel(T *var, const T *g, int64_t n, const void *lr_p, int lr_dt) {
  __shared__ T a;
  if (threadIdx.x == 0) a = (T)read_scalar(lr_p, lr_dt);
  __syncthreads();
  typedef fgc_vec<T, V> VT;
  const int64_t nv = n / V;
  FGC_GRID_STRIDE(j, nv) {
    VT x = ((const VT *)var)[j];
    const VT d = ((const VT *)g)[j];
#pragma unroll
    for (int k = 0; k < V; k++)
      x.v[k] -= a * d.v[k];
    ((VT *)var)[j] = x;
  }
  if (V > 1 && blockIdx.x == 0 && (int64_t)threadIdx.x < n - nv * V) {
    const int64_t i = nv * V + threadIdx.x;
    var[i] -= a * g[i];
  }
}

template <typename T> static int sgd(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 3, 1) != 0 || fgk_optim_check(ctx, dt, 2) != 0 || scalar_in(ctx, 2, "lr") != 0)
    return -1;
  const int64_t n = fgk_numel(&ctx->in[0]);
  if (n == 0) return 0;
  T *var = (T *)ctx->in[0].data;
  const T *g = (const T *)ctx->in[1].data;
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  if (vec4_ok<T>(var, g))
    sgd_kernel<T, 4>
        <<<blocks, FGC_THREADS, 0, fgc_stream(ctx)>>>(var, g, n, ctx->in[2].data, ctx->in[2].dtype);
  else
    sgd_kernel<T, 1>
        <<<blocks, FGC_THREADS, 0, fgc_stream(ctx)>>>(var, g, n, ctx->in[2].data, ctx->in[2].dtype);
  if (fgc_launched(ctx, "apply_sgd kernel") != 0) return -1;
  return publish(ctx, sizeof(T));
}
int fgc_apply_sgd_f32(const fg_kctx *ctx) { return sgd<float>(ctx, FG_F32); }
int fgc_apply_sgd_f64(const fg_kctx *ctx) { return sgd<double>(ctx, FG_F64); }

/* matmul_apply_sgd: var -= lr * a^T b as one cuBLAS GEMM that adds into
 * var (alpha -lr, beta 1), the gradient never stored. lr stays on the
 * device: a one-thread kernel writes alpha and beta into the stream's
 * scratch and the GEMM reads them there (device pointer mode), so nothing
 * waits for the host. Row-major var [m, n] = a^T b is column-major
 * var^T = b^T a: b [R, n] read as (n x R) untransposed, a [R, m] as
 * (m x R) transposed, as kernels/cuda/matmul.cu maps its products. */
template <typename T> __global__ void sgd_gemm_scalars(T *ab, const void *lr_p, int lr_dt) {
  ab[0] = -(T)read_scalar(lr_p, lr_dt);
  ab[1] = (T)1;
}

template <typename T> static int matmul_sgd(const fg_kctx *ctx, fg_dtype dt) {
  int64_t rows;
  if (fgc_check(ctx, 4, 1) != 0 || fgk_optim_check(ctx, dt, 1) != 0 ||
      scalar_in(ctx, 2, "lr") != 0 || fgk_sgd_product_check(ctx, &rows) != 0 ||
      fgc_need_scratch(ctx, 2 * sizeof(T)) != 0)
    return -1;
  const int64_t m = ctx->in[0].dims[0], n = ctx->in[0].dims[1];
  if (m == 0 || n == 0 || rows == 0) return publish(ctx, sizeof(T));
  cublasHandle_t h = (cublasHandle_t)ctx->cuda->blas;
  if (!h) return fgk_fail(ctx, "matmul_apply_sgd called without a cuBLAS handle");
  T *ab = (T *)ctx->cuda->scratch;
  sgd_gemm_scalars<T><<<1, 1, 0, fgc_stream(ctx)>>>(ab, ctx->in[2].data, ctx->in[2].dtype);
  if (fgc_launched(ctx, "matmul_apply_sgd scalars kernel") != 0) return -1;
  cudaDataType_t type;
  cublasComputeType_t compute;
  if (fgc_blas_setup(ctx, h, dt, CUBLAS_POINTER_MODE_DEVICE, &type, &compute) != 0) {
    (void)cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
    return -1;
  }
  cublasStatus_t st =
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, (int)n, (int)m, (int)rows, ab, ctx->in[3].data,
                   type, (int)n, ctx->in[1].data, type, (int)m, ab + 1, ctx->in[0].data, type,
                   (int)n, compute, CUBLAS_GEMM_DEFAULT);
  /* Host mode again for the handle's other users (matmul.cu sets it too). */
  const cublasStatus_t back = cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
  if (st == CUBLAS_STATUS_SUCCESS) st = back;
  if (st != CUBLAS_STATUS_SUCCESS)
    return fgk_fail(ctx, "matmul_apply_sgd: cublasGemmEx: %s", cublasGetStatusString(st));
  return publish(ctx, sizeof(T));
}
int fgc_matmul_apply_sgd_f32(const fg_kctx *ctx) { return matmul_sgd<float>(ctx, FG_F32); }
int fgc_matmul_apply_sgd_f64(const fg_kctx *ctx) { return matmul_sgd<double>(ctx, FG_F64); }

/* torch.optim.SGD (dampening 0): buf = mom*buf + grad;
 * var -= lr * (nesterov ? grad + mom*buf : buf). */
template <typename T>
__device__ __forceinline__ void momentum_elem(T &x, T &buf, T gi, T a, T mom, int nesterov) {
  const T b = mom * buf + gi;
  buf = b;
  x -= a * (nesterov ? gi + mom * b : b);
}

template <typename T, int V>
__global__ void momentum_kernel(T *var, T *buf, const T *g, int64_t n, const void *lr_p, int lr_dt,
                                T mom, int nesterov) {
  __shared__ T a;
  if (threadIdx.x == 0) a = (T)read_scalar(lr_p, lr_dt);
  __syncthreads();
  typedef fgc_vec<T, V> VT;
  const int64_t nv = n / V;
  FGC_GRID_STRIDE(j, nv) {
    VT x = ((const VT *)var)[j], b = ((const VT *)buf)[j];
    const VT d = ((const VT *)g)[j];
#pragma unroll
    for (int k = 0; k < V; k++)
      momentum_elem(x.v[k], b.v[k], d.v[k], a, mom, nesterov);
    ((VT *)buf)[j] = b;
    ((VT *)var)[j] = x;
  }
  if (V > 1 && blockIdx.x == 0 && (int64_t)threadIdx.x < n - nv * V) {
    const int64_t i = nv * V + threadIdx.x;
    momentum_elem(var[i], buf[i], g[i], a, mom, nesterov);
  }
}

template <typename T> static int momentum(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 4, 1) != 0 || fgk_optim_check(ctx, dt, 3) != 0 || scalar_in(ctx, 3, "lr") != 0)
    return -1;
  const int64_t n = fgk_numel(&ctx->in[0]);
  if (n == 0) return 0;
  T *var = (T *)ctx->in[0].data, *buf = (T *)ctx->in[1].data;
  const T *g = (const T *)ctx->in[2].data;
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  const T mom = (T)ctx->p->momentum.momentum;
  if (vec4_ok<T>(var, buf, g))
    momentum_kernel<T, 4><<<blocks, FGC_THREADS, 0, fgc_stream(ctx)>>>(
        var, buf, g, n, ctx->in[3].data, ctx->in[3].dtype, mom, ctx->p->momentum.nesterov);
  else
    momentum_kernel<T, 1><<<blocks, FGC_THREADS, 0, fgc_stream(ctx)>>>(
        var, buf, g, n, ctx->in[3].data, ctx->in[3].dtype, mom, ctx->p->momentum.nesterov);
  if (fgc_launched(ctx, "apply_momentum kernel") != 0) return -1;
  return publish(ctx, sizeof(T));
}
int fgc_apply_momentum_f32(const fg_kctx *ctx) { return momentum<float>(ctx, FG_F32); }
int fgc_apply_momentum_f64(const fg_kctx *ctx) { return momentum<double>(ctx, FG_F64); }

/* torch.optim.Adam / AdamW (weight_decay > 0, decoupled), t = step:
 *   g += l2 * var        (attribute l2: torch.optim.Adam's weight_decay)
 *   var *= 1 - lr*wd
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
 *   var -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps) */
template <typename T> struct AdamC {
  T step_size, bc2_sqrt, keep, b1, b2, c1, c2, eps, l2;
  bool decay, coupled;
};

/* The L2 term rounded as a mul and then an add, as the CPU kernel (and the
 * separate mul and add nodes of older graphs) compute it: no fused
 * multiply-add. */
__device__ __forceinline__ float l2_term(float g, float l2, float x) {
  return __fadd_rn(g, __fmul_rn(l2, x));
}
__device__ __forceinline__ double l2_term(double g, double l2, double x) {
  return __dadd_rn(g, __dmul_rn(l2, x));
}

template <typename T>
__device__ __forceinline__ void adam_elem(T &var, T &m, T &v, T gi, const AdamC<T> &c) {
  T x = var;
  if (c.coupled) gi = l2_term(gi, c.l2, x);
  if (c.decay) x *= c.keep;
  const T mi = c.b1 * m + c.c1 * gi;
  const T vi = c.b2 * v + c.c2 * (gi * gi);
  m = mi;
  v = vi;
  var = x - c.step_size * (mi / (o_sqrt(vi) / c.bc2_sqrt + c.eps));
}

/* Thread 0's part of an Adam launch: the step's scalars (into shared
 * memory), and 0 for a step below 1, which block 0 reports as input
 * step_input. */
template <typename T>
__device__ __forceinline__ int
adam_scalars(const void *lr_p, int lr_dt, const void *step_p, int step_dt, int step_input,
             double beta1, double beta2, double wd, int *flag, T *step_size, T *bc2_sqrt, T *keep) {
  const double lr = read_scalar(lr_p, lr_dt), t = read_scalar(step_p, step_dt);
  const int ok = t >= 1; /* false for NaN too */
  if (!ok && blockIdx.x == 0) fgc_raise(flag, FG_CUDA_ERR_ADAM_STEP, step_input, 0, 0, t);
  *step_size = (T)(lr / (1.0 - pow(beta1, t)));
  *bc2_sqrt = (T)sqrt(1.0 - pow(beta2, t));
  *keep = (T)(1.0 - lr * wd);
  return ok;
}

template <typename T, int V>
__global__ void adam_kernel(T *var, T *m, T *v, const T *g, int64_t n, const void *lr_p, int lr_dt,
                            const void *step_p, int step_dt, double beta1, double beta2,
                            double epsilon, double wd, double l2, int *flag) {
  __shared__ T step_size, bc2_sqrt, keep;
  __shared__ int ok;
  if (threadIdx.x == 0)
    ok = adam_scalars(lr_p, lr_dt, step_p, step_dt, 5, beta1, beta2, wd, flag, &step_size,
                      &bc2_sqrt, &keep);
  __syncthreads();
  if (!ok) return;
  const AdamC<T> c = {step_size,        bc2_sqrt,   keep,  (T)beta1, (T)beta2, (T)(1.0 - beta1),
                      (T)(1.0 - beta2), (T)epsilon, (T)l2, wd > 0,   l2 > 0};
  typedef fgc_vec<T, V> VT;
  const int64_t nv = n / V;
  FGC_GRID_STRIDE(j, nv) {
    VT x = ((const VT *)var)[j], mm = ((const VT *)m)[j], vv = ((const VT *)v)[j];
    const VT d = ((const VT *)g)[j];
#pragma unroll
    for (int k = 0; k < V; k++)
      adam_elem(x.v[k], mm.v[k], vv.v[k], d.v[k], c);
    ((VT *)m)[j] = mm;
    ((VT *)v)[j] = vv;
    ((VT *)var)[j] = x;
  }
  if (V > 1 && blockIdx.x == 0 && (int64_t)threadIdx.x < n - nv * V) {
    const int64_t i = nv * V + threadIdx.x;
    adam_elem(var[i], m[i], v[i], g[i], c);
  }
}

template <typename T> static int adam(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 6, 1) != 0 || fgk_optim_check(ctx, dt, 4) != 0 ||
      scalar_in(ctx, 4, "lr") != 0 || scalar_in(ctx, 5, "step") != 0 || fgc_need_flag(ctx) != 0)
    return -1;
  const int64_t n = fgk_numel(&ctx->in[0]);
  const fg_adam_params *p = &ctx->p->adam;
  /* Launched even for an empty variable, so a bad step is still reported. */
  T *var = (T *)ctx->in[0].data, *m = (T *)ctx->in[1].data, *v = (T *)ctx->in[2].data;
  const T *g = (const T *)ctx->in[3].data;
  const unsigned blocks = fgc_blocks(n, FGC_THREADS * 4);
  if (vec4_ok<T>(var, m, v, g))
    adam_kernel<T, 4><<<blocks, FGC_THREADS, 0, fgc_stream(ctx)>>>(
        var, m, v, g, n, ctx->in[4].data, ctx->in[4].dtype, ctx->in[5].data, ctx->in[5].dtype,
        p->beta1, p->beta2, p->epsilon, p->weight_decay, p->l2, ctx->cuda->error_flag);
  else
    adam_kernel<T, 1><<<blocks, FGC_THREADS, 0, fgc_stream(ctx)>>>(
        var, m, v, g, n, ctx->in[4].data, ctx->in[4].dtype, ctx->in[5].data, ctx->in[5].dtype,
        p->beta1, p->beta2, p->epsilon, p->weight_decay, p->l2, ctx->cuda->error_flag);
  if (fgc_launched(ctx, "apply_adam kernel") != 0) return -1;
  return publish(ctx, sizeof(T));
}
int fgc_apply_adam_f32(const fg_kctx *ctx) { return adam<float>(ctx, FG_F32); }
int fgc_apply_adam_f64(const fg_kctx *ctx) { return adam<double>(ctx, FG_F64); }

/* ---- multi-tensor updates (kernels/cpu/optim_multi.h) --------------------
 * One launch updates up to FGC_MULTI_MAX variables: their pointers and
 * where each starts in the joint numbering of their elements travel as the
 * kernel's argument (a table in the device's parameter memory, captured
 * with the launch by a CUDA Graph), as torch's multi_tensor_apply does.
 * Each block takes chunks of FGC_MULTI_CHUNK joint elements and runs every
 * element with the single-variable kernels' own arithmetic. Longer lists
 * take one launch per FGC_MULTI_MAX variables. */
#define FGC_MULTI_MAX   32
#define FGC_MULTI_CHUNK 4096

template <typename T> struct MultiTable {
  T *t[4][FGC_MULTI_MAX]; /* per list (var, state..., grad last) */
  int64_t start[FGC_MULTI_MAX + 1];
  int n;
};

template <typename T> __device__ __forceinline__ void sgd_elem(T &x, T gi, T a) { x -= a * gi; }

/* Calls f(k, i) for every element i of variable k in joint chunk c. */
template <typename T, typename F>
__device__ __forceinline__ void multi_chunk(const MultiTable<T> &tb, int64_t c, F f) {
  const int64_t c0 = c * FGC_MULTI_CHUNK, c1 = c0 + FGC_MULTI_CHUNK;
  int k = 0;
  while (k + 1 < tb.n && tb.start[k + 1] <= c0)
    k++;
  for (; k < tb.n && tb.start[k] < c1; k++) {
    const int64_t a = c0 > tb.start[k] ? c0 : tb.start[k];
    const int64_t b = c1 < tb.start[k + 1] ? c1 : tb.start[k + 1];
    for (int64_t j = a + threadIdx.x; j < b; j += blockDim.x)
      f(k, j - tb.start[k]);
  }
}

template <typename T>
__global__ void multi_sgd_kernel(MultiTable<T> tb, const void *lr_p, int lr_dt) {
  __shared__ T a;
  if (threadIdx.x == 0) a = (T)read_scalar(lr_p, lr_dt);
  __syncthreads();
  const int64_t chunks = (tb.start[tb.n] + FGC_MULTI_CHUNK - 1) / FGC_MULTI_CHUNK;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x)
    multi_chunk(tb, c, [&](int k, int64_t i) { sgd_elem(tb.t[0][k][i], tb.t[1][k][i], a); });
}

template <typename T>
__global__ void multi_momentum_kernel(MultiTable<T> tb, const void *lr_p, int lr_dt, T mom,
                                      int nesterov) {
  __shared__ T a;
  if (threadIdx.x == 0) a = (T)read_scalar(lr_p, lr_dt);
  __syncthreads();
  const int64_t chunks = (tb.start[tb.n] + FGC_MULTI_CHUNK - 1) / FGC_MULTI_CHUNK;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x)
    multi_chunk(tb, c, [&](int k, int64_t i) {
      momentum_elem(tb.t[0][k][i], tb.t[1][k][i], tb.t[2][k][i], a, mom, nesterov);
    });
}

template <typename T>
__global__ void multi_adam_kernel(MultiTable<T> tb, const void *lr_p, int lr_dt, const void *step_p,
                                  int step_dt, int step_input, double beta1, double beta2,
                                  double epsilon, double wd, double l2, int *flag) {
  __shared__ T step_size, bc2_sqrt, keep;
  __shared__ int ok;
  if (threadIdx.x == 0)
    ok = adam_scalars(lr_p, lr_dt, step_p, step_dt, step_input, beta1, beta2, wd, flag, &step_size,
                      &bc2_sqrt, &keep);
  __syncthreads();
  if (!ok) return;
  const AdamC<T> cs = {step_size,        bc2_sqrt,   keep,  (T)beta1, (T)beta2, (T)(1.0 - beta1),
                       (T)(1.0 - beta2), (T)epsilon, (T)l2, wd > 0,   l2 > 0};
  const int64_t chunks = (tb.start[tb.n] + FGC_MULTI_CHUNK - 1) / FGC_MULTI_CHUNK;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x)
    multi_chunk(tb, c, [&](int k, int64_t i) {
      adam_elem(tb.t[0][k][i], tb.t[1][k][i], tb.t[2][k][i], tb.t[3][k][i], cs);
    });
}

/* The table of variables [k0, k0 + n) over `lists` input lists. */
template <typename T>
static MultiTable<T> multi_table(const fg_kctx *ctx, int lists, int k0, int n) {
  MultiTable<T> tb;
  memset(&tb, 0, sizeof tb);
  const int total = (int)ctx->p->multi_update.n;
  tb.n = n;
  for (int k = 0; k < n; k++) {
    for (int l = 0; l < lists; l++)
      tb.t[l][k] = (T *)ctx->in[l * total + k0 + k].data;
    tb.start[k + 1] = tb.start[k] + fgk_numel(&ctx->in[k0 + k]);
  }
  return tb;
}

/* How many variables the launch from k0 takes. */
static int multi_count(int n, int k0) { return n - k0 < FGC_MULTI_MAX ? n - k0 : FGC_MULTI_MAX; }

static unsigned multi_blocks(int64_t n) {
  const int64_t chunks = (n + FGC_MULTI_CHUNK - 1) / FGC_MULTI_CHUNK;
  return (unsigned)(chunks < 1 ? 1 : chunks < 65535 ? chunks : 65535);
}

/* Output 0 is variable 0: a separate output buffer receives a copy, as
 * the single-variable kernels do. */
static int multi_publish(const fg_kctx *ctx, size_t es) {
  if (ctx->out[0].data == ctx->in[0].data) return 0;
  return fgc_copy_bytes(ctx, ctx->out[0].data, ctx->in[0].data,
                        (size_t)fgk_numel(&ctx->out[0]) * es);
}

/* Checks the lists and scalars, then calls launch(table, blocks, lr) once
 * per FGC_MULTI_MAX variables (rule + 2 lists: var, its state, grad). */
template <typename T, typename L>
static int multi_run(const fg_kctx *ctx, fg_dtype dt, int rule, const char *what, L launch) {
  if (fgc_check(ctx, 0, 1) != 0 || fgk_multi_optim_check(ctx, rule, dt) != 0) return -1;
  const int n = (int)ctx->p->multi_update.n, lists = rule + 2, lr = lists * n;
  const int adam = rule == FGK_MULTI_ADAM;
  if (scalar_in(ctx, lr, "lr") != 0 ||
      (adam && (scalar_in(ctx, lr + 1, "step") != 0 || fgc_need_flag(ctx) != 0)))
    return -1;
  for (int k0 = 0; k0 < n; k0 += FGC_MULTI_MAX) {
    const MultiTable<T> tb = multi_table<T>(ctx, lists, k0, multi_count(n, k0));
    /* Adam launches even for empty variables, so a bad step is still reported. */
    if (tb.start[tb.n] == 0 && !adam) continue;
    launch(tb, multi_blocks(tb.start[tb.n]), &ctx->in[lr]);
    if (fgc_launched(ctx, what) != 0) return -1;
  }
  return multi_publish(ctx, sizeof(T));
}

template <typename T> static int multi_sgd(const fg_kctx *ctx, fg_dtype dt) {
  return multi_run<T>(ctx, dt, FGK_MULTI_SGD, "multi_apply_sgd kernel",
                      [&](const MultiTable<T> &tb, unsigned blocks, const fg_kbuf *lr) {
                        multi_sgd_kernel<T>
                            <<<blocks, FGC_THREADS, 0, fgc_stream(ctx)>>>(tb, lr->data, lr->dtype);
                      });
}
int fgc_multi_apply_sgd_f32(const fg_kctx *ctx) { return multi_sgd<float>(ctx, FG_F32); }
int fgc_multi_apply_sgd_f64(const fg_kctx *ctx) { return multi_sgd<double>(ctx, FG_F64); }

template <typename T> static int multi_momentum(const fg_kctx *ctx, fg_dtype dt) {
  const T mom = (T)ctx->p->multi_update.momentum.momentum;
  const int nesterov = ctx->p->multi_update.momentum.nesterov;
  return multi_run<T>(ctx, dt, FGK_MULTI_MOMENTUM, "multi_apply_momentum kernel",
                      [&](const MultiTable<T> &tb, unsigned blocks, const fg_kbuf *lr) {
                        multi_momentum_kernel<T><<<blocks, FGC_THREADS, 0, fgc_stream(ctx)>>>(
                            tb, lr->data, lr->dtype, mom, nesterov);
                      });
}
int fgc_multi_apply_momentum_f32(const fg_kctx *ctx) { return multi_momentum<float>(ctx, FG_F32); }
int fgc_multi_apply_momentum_f64(const fg_kctx *ctx) { return multi_momentum<double>(ctx, FG_F64); }

template <typename T> static int multi_adam(const fg_kctx *ctx, fg_dtype dt) {
  const fg_adam_params *p = &ctx->p->multi_update.adam;
  const int step_input = 4 * (int)ctx->p->multi_update.n + 1;
  return multi_run<T>(ctx, dt, FGK_MULTI_ADAM, "multi_apply_adam kernel",
                      [&](const MultiTable<T> &tb, unsigned blocks, const fg_kbuf *lr) {
                        multi_adam_kernel<T><<<blocks, FGC_THREADS, 0, fgc_stream(ctx)>>>(
                            tb, lr->data, lr->dtype, lr[1].data, lr[1].dtype, step_input, p->beta1,
                            p->beta2, p->epsilon, p->weight_decay, p->l2, ctx->cuda->error_flag);
                      });
}
int fgc_multi_apply_adam_f32(const fg_kctx *ctx) { return multi_adam<float>(ctx, FG_F32); }
int fgc_multi_apply_adam_f64(const fg_kctx *ctx) { return multi_adam<double>(ctx, FG_F64); }
