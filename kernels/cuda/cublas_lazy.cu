/* cuBLAS, loaded on first use rather than linked. libcublas and the
 * libcublasLt it pulls in run a third of a second of static initialisers
 * at every process start, which every `flowgraph` command, every test binary and
 * every program linking flowgraph paid in a CUDA build, GPU or not. So the
 * build does not link cuBLAS: the cuBLAS functions flowgraph calls are
 * defined here, with cuBLAS's own prototypes (the compiler checks them
 * against cublas_api.h), and forward to the real ones, which the first call
 * dlopens (libcublas.so.<major>, from the library path, else from the
 * toolkit the build used). They are hidden (this file is compiled with
 * -fvisibility=hidden), so libflowgraph.so exports none of them and a
 * program that links cuBLAS itself keeps its own. When cuBLAS cannot be
 * loaded every call returns CUBLAS_STATUS_NOT_INITIALIZED and
 * cublasGetStatusString says why, so creating a GPU session fails with that
 * message instead of the process failing to start. */
#include <cublas_v2.h>
#include <pthread.h>
#include <stdio.h>

#include "kernels/cuda/cublas_lazy.h"
#include "kernels/cuda/dl_lib.h"

#define FG_STR2(x)       #x
#define FG_STR(x)        FG_STR2(x)
#define FG_CUBLAS_SONAME "libcublas.so." FG_STR(CUBLAS_VER_MAJOR)

namespace {
/* cublas_api.h overloads these two for C++ (cudaDataType computeType);
 * the C entry points take cublasComputeType_t. */
typedef cublasStatus_t (*GemmEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                 int, const void *, const void *, cudaDataType, int, const void *,
                                 cudaDataType, int, const void *, void *, cudaDataType, int,
                                 cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*GemmStridedBatchedEx)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                                               int, int, int, const void *, const void *,
                                               cudaDataType, int, long long int, const void *,
                                               cudaDataType, int, long long int, const void *,
                                               void *, cudaDataType, int, long long int, int,
                                               cublasComputeType_t, cublasGemmAlgo_t);
struct Table {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSetPointerMode_v2) set_pointer_mode;
  decltype(&cublasGetStatusString) status_string;
  GemmEx gemm_ex;
  GemmStridedBatchedEx gemm_strided_batched_ex;
  decltype(&cublasSgemm_v2) sgemm;
};
Table t;
pthread_once_t once = PTHREAD_ONCE_INIT;
char why[512];

template <typename F> bool sym(void *lib, const char *name, F &fp) {
  fp = reinterpret_cast<F>(fgc_dl_sym(lib, "cuBLAS", FG_CUBLAS_SONAME, name, why, sizeof why));
  return fp != nullptr;
}

void load() {
  void *lib = fgc_dl_open("cuBLAS", FG_CUBLAS_SONAME, FGC_TOOLKIT_LIB_DIR, why, sizeof why);
  if (!lib) return;
  Table n = {};
  if (sym(lib, "cublasCreate_v2", n.create) && sym(lib, "cublasDestroy_v2", n.destroy) &&
      sym(lib, "cublasSetStream_v2", n.set_stream) &&
      sym(lib, "cublasSetWorkspace_v2", n.set_workspace) &&
      sym(lib, "cublasSetMathMode", n.set_math_mode) &&
      sym(lib, "cublasSetPointerMode_v2", n.set_pointer_mode) &&
      sym(lib, "cublasGetStatusString", n.status_string) && sym(lib, "cublasGemmEx", n.gemm_ex) &&
      sym(lib, "cublasGemmStridedBatchedEx", n.gemm_strided_batched_ex) &&
      sym(lib, "cublasSgemm_v2", n.sgemm))
    t = n; /* all or nothing: a partial table would fail later, less clearly */
}

/* The table, loaded once; its entries are all set or all NULL. */
const Table &table() {
  pthread_once(&once, load);
  return t;
}
} // namespace

extern "C" {

int fg_cublas_available(void) { return table().create != nullptr; }

const char *fg_cublas_load_error(void) { return fg_cublas_available() ? "" : why; }

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  return table().create ? t.create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  return table().destroy ? t.destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  return table().set_stream ? t.set_stream(handle, streamId) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                     size_t workspaceSizeInBytes) {
  return table().set_workspace ? t.set_workspace(handle, workspace, workspaceSizeInBytes)
                               : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  return table().set_math_mode ? t.set_math_mode(handle, mode) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  return table().set_pointer_mode ? t.set_pointer_mode(handle, mode)
                                  : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char *cublasGetStatusString(cublasStatus_t status) {
  return table().status_string ? t.status_string(status) : why;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  return table().gemm_ex ? t.gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B,
                                     Btype, ldb, beta, C, Ctype, ldc, computeType, algo)
                         : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return table().gemm_strided_batched_ex
             ? t.gemm_strided_batched_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                                         strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc,
                                         strideC, batchCount, computeType, algo)
             : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float *alpha,
                              const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
  return table().sgemm
             ? t.sgemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
             : CUBLAS_STATUS_NOT_INITIALIZED;
}

} // extern "C"
