/* matmul on the GPU: out[..., M, N] = op(a)[..., M, K] @ op(b)[..., K, N]
 * with NumPy-broadcast batch dims, as kernels/cpu/matmul.c.
 *
 * permuted_matmul runs the same calls with its operands' strides as the
 * leading dims and batch strides (kernels/cpu/matmul_permuted.c).
 *
 * Floats go to cuBLAS. cuBLAS is column-major; a row-major C = A B is the
 * column-major C^T = B^T A^T, so each call passes b first, a second, with
 * m = N, n = M: the row-major buffers read as their transposes for free.
 * Batches that are uniformly strided (each operand either has every batch
 * or is shared by all) become one strided-batched call; when b is shared
 * and a is not transposed, a's batches stack into one taller GEMM; other
 * broadcasts issue one GEMM per batch. f32 computes in full FP32
 * (CUBLAS_COMPUTE_32F) unless ctx->cuda->allow_tf32 asks for TF32.
 *
 * Integers have no cuBLAS: a thread per output element, wrapping through
 * unsigned arithmetic like the CPU kernel. */
#include <cublas_v2.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

/* The shapes are checked and planned by kernels/cpu/matmul.c's code
 * (kernels/kernel_shape.h); the plan is zeroed first because kernels take it
 * by value. */
typedef fgk_mm_plan mm_plan;

static int mm_plan_init(const fg_kctx *ctx, fg_dtype dt, mm_plan *pl) {
  if (fgc_check(ctx, 2, 1) != 0) return -1;
  memset(pl, 0, sizeof *pl);
  return fgk_mm_plan_init(ctx, dt, pl);
}

/* a's, b's and out's element offsets for output batch bi. */
__host__ __device__ static inline void mm_seek(const mm_plan &pl, int64_t bi, int64_t *ao,
                                               int64_t *bo, int64_t *oo) {
  *ao = *bo = *oo = 0;
  for (int d = pl.nb - 1; d >= 0; d--) {
    const int64_t c = bi % pl.bdims[d];
    bi /= pl.bdims[d];
    *ao += c * pl.a_bstride[d];
    *bo += c * pl.b_bstride[d];
    *oo += c * pl.o_bstride[d];
  }
}

static int fits_int(int64_t x) { return x >= 0 && x <= 2147483647; }

static int blas_fail(const fg_kctx *ctx, const char *what, cublasStatus_t st) {
  return fgk_fail(ctx, "%s: %s", what, cublasGetStatusString(st));
}

int fgc_blas_setup(const fg_kctx *ctx, cublasHandle_t h, fg_dtype dt, cublasPointerMode_t mode,
                   cudaDataType_t *type, cublasComputeType_t *compute) {
  const int f64 = dt == FG_F64;
  *type = f64 ? CUDA_R_64F : CUDA_R_32F;
  *compute = f64 ? CUBLAS_COMPUTE_64F
                 : (ctx->cuda->allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
  cublasStatus_t st = cublasSetPointerMode(h, mode);
  if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(ctx, "cublasSetPointerMode", st);
  /* The handle's math mode could also allow TF32 for f32; keep it in step
   * with the compute type (host-side handle state, no device work). */
  st = cublasSetMathMode(h,
                         ctx->cuda->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(ctx, "cublasSetMathMode", st);
  return 0;
}

/* One float matmul through cuBLAS (row-major via the transpose identity). */
int fgc_mm_blas(const fg_kctx *ctx, const mm_plan &pl, fg_dtype dt) {
  const int f64 = dt == FG_F64;
  const size_t es = f64 ? 8 : 4;
  cublasHandle_t h = (cublasHandle_t)ctx->cuda->blas;
  if (!h) return fgk_fail(ctx, "CUDA matmul called without a cuBLAS handle (ctx->cuda->blas)");
  const char *a = (const char *)ctx->in[0].data, *b = (const char *)ctx->in[1].data;
  char *o = (char *)ctx->out[0].data;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const void *alpha = f64 ? (const void *)&one_d : (const void *)&one_f;
  const void *beta = f64 ? (const void *)&zero_d : (const void *)&zero_f;
  cudaDataType_t type;
  cublasComputeType_t compute;
  if (fgc_blas_setup(ctx, h, dt, CUBLAS_POINTER_MODE_HOST, &type, &compute) != 0) return -1;
  cublasStatus_t st;

  int64_t M = pl.M, batch = pl.batch;
  const int64_t N = pl.N, K = pl.K;
  int stacked = 0;
  /* b shared by every batch and a not transposed: one taller GEMM (packed
   * batches only). */
  if (!pl.strided && !pl.ta && pl.b_batch == 1 && pl.a_batch == pl.batch) {
    M *= pl.batch;
    batch = 1;
    stacked = 1;
  }
  if (!fits_int(M) || !fits_int(N) || !fits_int(K) || !fits_int(pl.lda) || !fits_int(pl.ldb) ||
      !fits_int(pl.ldc))
    return fgk_fail(ctx,
                    "matrix dims %lld x %lld x %lld or leading dims %lld, %lld, %lld exceed "
                    "cuBLAS's int",
                    (long long)M, (long long)N, (long long)K, (long long)pl.lda, (long long)pl.ldb,
                    (long long)pl.ldc);
  const cublasOperation_t opb = pl.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opa = pl.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = (int)N, n = (int)M, k = (int)K;
  /* The plan's leading dims: the packed ones for matmul, the operands'
   * strides for permuted_matmul (stacking keeps a's, K). */
  const int ldb = (int)pl.ldb, lda = (int)pl.lda, ldc = (int)pl.ldc;
  if (batch == 1 || stacked) {
    st = cublasGemmEx(h, opb, opa, m, n, k, alpha, b, type, ldb, a, type, lda, beta, o, type, ldc,
                      compute, CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(ctx, "cublasGemmEx", st);
    return 0;
  }
  /* Packed batches are uniformly strided when each operand has every
   * batch or one; a strided plan's when it has one batch dim. */
  const int uniform_a = pl.a_batch == pl.batch || pl.a_batch == 1;
  const int uniform_b = pl.b_batch == pl.batch || pl.b_batch == 1;
  const int uniform = pl.strided ? pl.nb == 1 : uniform_a && uniform_b;
  if (uniform && fits_int(batch)) {
    long long sa = pl.a_batch == 1 ? 0 : (long long)(M * K);
    long long sb = pl.b_batch == 1 ? 0 : (long long)(K * N);
    long long sc = (long long)(M * N);
    if (pl.strided)
      sa = (long long)pl.a_bstride[0], sb = (long long)pl.b_bstride[0],
      sc = (long long)pl.o_bstride[0];
    st = cublasGemmStridedBatchedEx(h, opb, opa, m, n, k, alpha, b, type, ldb, sb, a, type, lda, sa,
                                    beta, o, type, ldc, sc, (int)batch, compute,
                                    CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(ctx, "cublasGemmStridedBatchedEx", st);
    return 0;
  }
  for (int64_t bi = 0; bi < batch; bi++) {
    int64_t ao, bo, oo;
    mm_seek(pl, bi, &ao, &bo, &oo);
    st = cublasGemmEx(h, opb, opa, m, n, k, alpha, b + (size_t)bo * es, type, ldb,
                      a + (size_t)ao * es, type, lda, beta, o + (size_t)oo * es, type, ldc, compute,
                      CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(ctx, "cublasGemmEx", st);
  }
  return 0;
}

/* The shape checks and plan: matmul's, or permuted_matmul's strided one. */
typedef int (*plan_fn)(const fg_kctx *ctx, fg_dtype dt, fgk_mm_plan *pl);

/* A float product planned by `plan` through cuBLAS: matmul, and
 * permuted_matmul with its operands' strides. */
template <typename T> static int matmul_float(const fg_kctx *ctx, fg_dtype dt, plan_fn plan) {
  mm_plan pl;
  if (fgc_check(ctx, 2, 1) != 0) return -1;
  memset(&pl, 0, sizeof pl);
  if (plan(ctx, dt, &pl) != 0) return -1;
  const int64_t total = fgk_numel(&ctx->out[0]);
  if (total == 0) return 0;
  /* K == 0 is an empty sum. */
  if (pl.K == 0) return fgc_fill_bits(ctx, ctx->out[0].data, total, sizeof(T), 0);
  return fgc_mm_blas(ctx, pl, dt);
}
int fgc_matmul_f32(const fg_kctx *ctx) {
  return matmul_float<float>(ctx, FG_F32, fgk_mm_plan_init);
}
int fgc_matmul_f64(const fg_kctx *ctx) {
  return matmul_float<double>(ctx, FG_F64, fgk_mm_plan_init);
}
int fgc_permuted_matmul_f32(const fg_kctx *ctx) {
  return matmul_float<float>(ctx, FG_F32, fgk_mm_plan_init_permuted);
}
int fgc_permuted_matmul_f64(const fg_kctx *ctx) {
  return matmul_float<double>(ctx, FG_F64, fgk_mm_plan_init_permuted);
}

template <typename T, typename U>
__global__ void mm_int_kernel(const T *a, const T *b, T *o, mm_plan pl, int64_t total) {
  const int64_t M = pl.M, N = pl.N, K = pl.K;
  FGC_GRID_STRIDE(t, total) {
    const int64_t bi = t / (M * N), rem = t - bi * M * N;
    const int64_t i = rem / N, j = rem - i * N;
    int64_t ao, bo, oo; /* oo is t - i * N - j: the output is packed */
    mm_seek(pl, bi, &ao, &bo, &oo);
    const T *ab = a + ao, *bb = b + bo;
    U acc = 0;
    for (int64_t kk = 0; kk < K; kk++) {
      const U x = (U)(pl.ta ? ab[kk * M + i] : ab[i * K + kk]);
      const U y = (U)(pl.tb ? bb[j * K + kk] : bb[kk * N + j]);
      acc += x * y;
    }
    o[t] = (T)acc;
  }
}

template <typename T, typename U> static int matmul_int(const fg_kctx *ctx, fg_dtype dt) {
  mm_plan pl;
  if (mm_plan_init(ctx, dt, &pl) != 0) return -1;
  const int64_t total = fgk_numel(&ctx->out[0]);
  if (total == 0) return 0;
  mm_int_kernel<T, U><<<fgc_blocks(total, FGC_THREADS), FGC_THREADS, 0, fgc_stream(ctx)>>>(
      (const T *)ctx->in[0].data, (const T *)ctx->in[1].data, (T *)ctx->out[0].data, pl, total);
  return fgc_launched(ctx, "integer matmul kernel");
}
int fgc_matmul_i32(const fg_kctx *ctx) { return matmul_int<int32_t, uint32_t>(ctx, FG_I32); }
int fgc_matmul_i64(const fg_kctx *ctx) { return matmul_int<int64_t, uint64_t>(ctx, FG_I64); }
