/* cuBLASLt, loaded on first use rather than linked, for the same reasons
 * as cuBLAS (kernels/cuda/cublas_lazy.cu): its static initialisers would
 * cost every process at start, GPU or not. The cuBLASLt functions
 * flowgraph calls (fused_matmul's epilogues, kernels/cuda/fused_matmul.cu)
 * are defined here with cuBLASLt's own prototypes and forward to the real
 * ones, which the first call dlopens (libcublasLt.so.<major>, from the
 * library path, else from the toolkit the build used). Hidden, like
 * cuBLAS's. When the library cannot be loaded every call returns
 * CUBLAS_STATUS_NOT_INITIALIZED and fg_cublaslt_load_error says why. */
#include <cublasLt.h>
#include <pthread.h>
#include <stdio.h>

#include "kernels/cuda/cublas_lazy.h"
#include "kernels/cuda/dl_lib.h"

#define FG_STR2(x)         #x
#define FG_STR(x)          FG_STR2(x)
#define FG_CUBLASLT_SONAME "libcublasLt.so." FG_STR(CUBLAS_VER_MAJOR)

namespace {
struct Table {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtMatmulDescCreate) desc_create;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set;
  decltype(&cublasLtMatrixLayoutCreate) layout_create;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmul) matmul;
};
Table t;
pthread_once_t once = PTHREAD_ONCE_INIT;
char why[512];

template <typename F> bool sym(void *lib, const char *name, F &fp) {
  fp = reinterpret_cast<F>(fgc_dl_sym(lib, "cuBLASLt", FG_CUBLASLT_SONAME, name, why, sizeof why));
  return fp != nullptr;
}

void load() {
  void *lib = fgc_dl_open("cuBLASLt", FG_CUBLASLT_SONAME, FGC_TOOLKIT_LIB_DIR, why, sizeof why);
  if (!lib) return;
  Table n = {};
  if (sym(lib, "cublasLtCreate", n.create) && sym(lib, "cublasLtDestroy", n.destroy) &&
      sym(lib, "cublasLtMatmulDescCreate", n.desc_create) &&
      sym(lib, "cublasLtMatmulDescDestroy", n.desc_destroy) &&
      sym(lib, "cublasLtMatmulDescSetAttribute", n.desc_set) &&
      sym(lib, "cublasLtMatrixLayoutCreate", n.layout_create) &&
      sym(lib, "cublasLtMatrixLayoutDestroy", n.layout_destroy) &&
      sym(lib, "cublasLtMatmulPreferenceCreate", n.pref_create) &&
      sym(lib, "cublasLtMatmulPreferenceDestroy", n.pref_destroy) &&
      sym(lib, "cublasLtMatmulPreferenceSetAttribute", n.pref_set) &&
      sym(lib, "cublasLtMatmulAlgoGetHeuristic", n.heuristic) &&
      sym(lib, "cublasLtMatmul", n.matmul))
    t = n; /* all or nothing */
}

const Table &table() {
  pthread_once(&once, load);
  return t;
}

const cublasStatus_t NOT_LOADED = CUBLAS_STATUS_NOT_INITIALIZED;
} // namespace

extern "C" {

int fg_cublaslt_available(void) { return table().create != nullptr; }

const char *fg_cublaslt_load_error(void) { return fg_cublaslt_available() ? "" : why; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  return table().create ? t.create(h) : NOT_LOADED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  return table().destroy ? t.destroy(h) : NOT_LOADED;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  return table().desc_create ? t.desc_create(d, compute, scale) : NOT_LOADED;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  return table().desc_destroy ? t.desc_destroy(d) : NOT_LOADED;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t size) {
  return table().desc_set ? t.desc_set(d, attr, buf, size) : NOT_LOADED;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  return table().layout_create ? t.layout_create(l, type, rows, cols, ld) : NOT_LOADED;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  return table().layout_destroy ? t.layout_destroy(l) : NOT_LOADED;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  return table().pref_create ? t.pref_create(p) : NOT_LOADED;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  return table().pref_destroy ? t.pref_destroy(p) : NOT_LOADED;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size) {
  return table().pref_set ? t.pref_set(p, attr, buf, size) : NOT_LOADED;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int *returned) {
  return table().heuristic ? t.heuristic(h, op, a, b, c, d, pref, requested, results, returned)
                           : NOT_LOADED;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t ad, const void *B,
                              cublasLtMatrixLayout_t bd, const void *beta, const void *C,
                              cublasLtMatrixLayout_t cd, void *D, cublasLtMatrixLayout_t dd,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  return table().matmul ? t.matmul(h, op, alpha, A, ad, B, bd, beta, C, cd, D, dd, algo, workspace,
                                   workspace_bytes, stream)
                        : NOT_LOADED;
}

} // extern "C"
