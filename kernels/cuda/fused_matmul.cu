/* fused_matmul on the GPU: out = act(op(a) @ op(b) + bias), bias [N].
 *
 * f32 products that are one GEMM (2-D, or a's batches stacked over a
 * shared b, as the epilogue pass makes them) run as one cuBLASLt matmul
 * with CUBLASLT_EPILOGUE_BIAS or CUBLASLT_EPILOGUE_RELU_BIAS: the bias and
 * relu are applied to each tile in registers before it is stored, one
 * launch in all. Row-major as in matmul.cu: cuBLASLt computes the
 * column-major D^T = op(b)^T op(a)^T, whose rows are the output's columns,
 * so its per-row bias is our per-column bias. Compute in FP32, or TF32
 * when ctx->cuda->allow_tf32 says so. The algorithm comes from cuBLASLt's
 * heuristic for the shape, the pointers' alignments and the workspace
 * (the stream's scratch), cached per device. cuBLASLt's relu is
 * max(x, 0): a NaN product gives 0 there where the relu kernel keeps NaN.
 *
 * Everything else (f64, batched products, a shape cuBLASLt declines, no
 * libcublasLt) is the cuBLAS product of matmul.cu, then one kernel that
 * adds the bias and applies the relu kernel's rule (x < 0 ? 0 : x). */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cublas_lazy.h"

/* o[i] = act(o[i] + bias[i % n]) over total elements. */
template <typename T>
__global__ void bias_act_kernel(T *o, const T *bias, int64_t total, int64_t n, int relu) {
  FGC_GRID_STRIDE(i, total) {
    const T v = o[i] + bias[i % n];
    o[i] = relu && v < (T)0 ? (T)0 : v;
  }
}

template <typename T> static int bias_act(const fg_kctx *ctx, int64_t total, int64_t n, int relu) {
  bias_act_kernel<T><<<fgc_blocks(total, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (T *)ctx->out[0].data, (const T *)ctx->in[2].data, total, n, relu);
  return fgc_launched(ctx, "fused_matmul bias kernel");
}

namespace {

enum { LT_DEVICES = 64, LT_CACHE = 256 };

/* What the heuristic's answer depends on. */
struct LtKey {
  int dev, ta, tb, epi, tf32; /* epi: an FGC_LT_* of common.cuh */
  int64_t m, n, k;
  unsigned align[4]; /* a, b, d and bias, in bytes up to 256 */
  size_t workspace;
};

struct LtAlgo {
  LtKey key;
  cublasLtMatmulAlgo_t algo;
};

pthread_mutex_t lt_mu = PTHREAD_MUTEX_INITIALIZER;
cublasLtHandle_t lt_handle[LT_DEVICES];
LtAlgo lt_cache[LT_CACHE];
int lt_cached;

unsigned align_of(const void *p) {
  uintptr_t a = (uintptr_t)p;
  unsigned k = 1;
  while (k < 256 && a % (2 * k) == 0)
    k *= 2;
  return k;
}

/* The descriptors of one call, destroyed with it. */
struct LtDescs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

/* The device's handle (made once), or nullptr. */
cublasLtHandle_t handle_for(int dev) {
  if (dev < 0 || dev >= LT_DEVICES) return nullptr;
  pthread_mutex_lock(&lt_mu);
  if (!lt_handle[dev] && cublasLtCreate(&lt_handle[dev]) != CUBLAS_STATUS_SUCCESS)
    lt_handle[dev] = nullptr;
  cublasLtHandle_t h = lt_handle[dev];
  pthread_mutex_unlock(&lt_mu);
  return h;
}

bool same_key(const LtKey &x, const LtKey &y) { return memcmp(&x, &y, sizeof x) == 0; }

/* The operation and layouts of key's product: A is b (m = N rows of
 * D), B is a (n = M columns), as in matmul.cu. */
bool make_descs(const LtKey &key, const void *bias, LtDescs *d) {
  const cublasComputeType_t compute = key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cublasOperation_t opa = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opb = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = key.epi == FGC_LT_RELU_BIAS ? CUBLASLT_EPILOGUE_RELU_BIAS
                                 : key.epi == FGC_LT_BGRADA  ? CUBLASLT_EPILOGUE_BGRADA
                                                             : CUBLASLT_EPILOGUE_BIAS;
  const uint64_t m = (uint64_t)key.m, n = (uint64_t)key.n, k = (uint64_t)key.k;
  return cublasLtMatmulDescCreate(&d->op, compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi) ==
             CUBLAS_STATUS_SUCCESS &&
         cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                        sizeof bias) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&d->a, CUDA_R_32F, key.tb ? k : m, key.tb ? m : k,
                                    (int64_t)(key.tb ? k : m)) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&d->b, CUDA_R_32F, key.ta ? n : k, key.ta ? k : n,
                                    (int64_t)(key.ta ? n : k)) == CUBLAS_STATUS_SUCCESS &&
         cublasLtMatrixLayoutCreate(&d->d, CUDA_R_32F, m, n, (int64_t)m) == CUBLAS_STATUS_SUCCESS;
}

/* key's algorithm, from the cache or the heuristic; false when cuBLASLt
 * has none. */
bool find_algo(cublasLtHandle_t h, const LtKey &key, LtDescs *d, cublasLtMatmulAlgo_t *algo) {
  pthread_mutex_lock(&lt_mu);
  for (int i = 0; i < lt_cached; i++)
    if (same_key(lt_cache[i].key, key)) {
      *algo = lt_cache[i].algo;
      pthread_mutex_unlock(&lt_mu);
      return true;
    }
  pthread_mutex_unlock(&lt_mu);
  const uint64_t ws = key.workspace;
  const uint32_t al[4] = {key.align[1], key.align[0], key.align[2], key.align[2]};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  if (cublasLtMatmulPreferenceCreate(&d->pref) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                           sizeof ws) != CUBLAS_STATUS_SUCCESS)
    return false;
  for (int i = 0; i < 4; i++)
    if (cublasLtMatmulPreferenceSetAttribute(d->pref, which[i], &al[i], sizeof al[i]) !=
        CUBLAS_STATUS_SUCCESS)
      return false;
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  if (cublasLtMatmulAlgoGetHeuristic(h, d->op, d->a, d->b, d->d, d->d, d->pref, 1, &res, &found) !=
          CUBLAS_STATUS_SUCCESS ||
      found < 1)
    return false;
  *algo = res.algo;
  pthread_mutex_lock(&lt_mu);
  if (lt_cached < LT_CACHE) lt_cache[lt_cached++] = {key, res.algo};
  pthread_mutex_unlock(&lt_mu);
  return true;
}

} // namespace

int fgc_lt_matmul(const fg_kctx *ctx, int64_t M, int64_t N, int64_t K, int ta, int tb, int epi,
                  const void *a, const void *b, const void *bias, void *d) {
  int dev = 0;
  if (!fg_cublaslt_available() || cudaGetDevice(&dev) != cudaSuccess) return 1;
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) return 1;
  cublasLtHandle_t h = handle_for(dev);
  if (!h) return 1;
  LtKey key;
  memset(&key, 0, sizeof key); /* compared bytewise: no padding garbage */
  key.dev = dev, key.ta = ta != 0, key.tb = tb != 0, key.epi = epi;
  key.tf32 = ctx->cuda->allow_tf32 != 0;
  key.m = N, key.n = M, key.k = K;
  key.align[0] = align_of(a), key.align[1] = align_of(b);
  key.align[2] = align_of(d), key.align[3] = align_of(bias);
  key.workspace = ctx->cuda->scratch ? ctx->cuda->scratch_bytes : 0;
  LtDescs ds;
  cublasLtMatmulAlgo_t algo;
  if (!make_descs(key, bias, &ds) || !find_algo(h, key, &ds, &algo)) return 1;
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t st = cublasLtMatmul(h, ds.op, &one, b, ds.a, a, ds.b, &zero, d, ds.d, d, ds.d,
                                     &algo, ctx->cuda->scratch, key.workspace, fgc_stream(ctx));
  /* Refused before anything was enqueued (an alignment or shape the
   * algorithm does not take): the cuBLAS path then, which reports its own
   * errors. Any other status may come after cuBLASLt's own launch failed,
   * which leaves an error pending that the next launch check would blame
   * on another kernel: reported here, with the pending error cleared. */
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) return 1;
  if (st != CUBLAS_STATUS_SUCCESS) {
    const cudaError_t pending = cudaGetLastError();
    return fgk_fail(ctx, "cublasLtMatmul: %s (CUDA: %s)", cublasGetStatusString(st),
                    cudaGetErrorString(pending));
  }
  return fgc_launched(ctx, "cublasLtMatmul");
}

/* One cuBLASLt matmul with the epilogue: 0 done, 1 not taken (the caller
 * runs cuBLAS and the bias kernel), -1 failed. */
static int lt_fused(const fg_kctx *ctx, const fgk_mm_plan &pl, int relu) {
  int64_t M = pl.M;
  if (pl.batch != 1) {
    if (pl.ta || pl.b_batch != 1 || pl.a_batch != pl.batch) return 1;
    M *= pl.batch; /* a's batches stacked over the shared b */
  }
  return fgc_lt_matmul(ctx, M, pl.N, pl.K, pl.ta, pl.tb, relu ? FGC_LT_RELU_BIAS : FGC_LT_BIAS,
                       ctx->in[0].data, ctx->in[1].data, ctx->in[2].data, ctx->out[0].data);
}

template <typename T> static int fused_matmul(const fg_kctx *ctx, fg_dtype dt) {
  if (fgc_check(ctx, 3, 1) != 0) return -1;
  const fg_fused_matmul_params *p = &ctx->p->fused_matmul;
  if (p->activation != FG_ACTIVATION_NONE && p->activation != FG_ACTIVATION_RELU)
    return fgk_fail(ctx, "unknown activation %d", (int)p->activation);
  fgk_mm_plan pl;
  memset(&pl, 0, sizeof pl);
  if (fgk_mm_plan_init_tr(ctx, dt, p->transpose_a, p->transpose_b, &pl) != 0 ||
      fgk_mm_check_bias(ctx, dt, &pl) != 0)
    return -1;
  const int64_t total = fgk_numel(&ctx->out[0]);
  const int relu = p->activation == FG_ACTIVATION_RELU;
  if (total == 0) return 0;
  if (pl.K == 0) {
    /* An empty sum: the bias alone, through the activation. */
    if (fgc_fill_bits(ctx, ctx->out[0].data, total, sizeof(T), 0) != 0) return -1;
    return bias_act<T>(ctx, total, pl.N, relu);
  }
  if (dt == FG_F32) {
    const int rc = lt_fused(ctx, pl, relu);
    if (rc <= 0) return rc;
  }
  if (fgc_mm_blas(ctx, pl, dt) != 0) return -1;
  return bias_act<T>(ctx, total, pl.N, relu);
}

int fgc_fused_matmul_f32(const fg_kctx *ctx) { return fused_matmul<float>(ctx, FG_F32); }
int fgc_fused_matmul_f64(const fg_kctx *ctx) { return fused_matmul<double>(ctx, FG_F64); }
