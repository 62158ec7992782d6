/* The CUDA kernel registry (replacing kernels/cuda_stub.c in a CUDA build):
 * one row per (op name, dtype key), generated from FGC_KERNELS in
 * common.cuh, with the same keys as the CPU registry. Also the host side
 * of the error report (cuda_kernels.h). Read-only data: thread-safe. */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

#define FGC_ROW(op, dt, fn) {op, dt, fn},
static const fg_kernel_reg fgc_rows[] = {FGC_KERNELS(FGC_ROW){NULL, FG_DTYPE_INVALID, NULL}};
#undef FGC_ROW

extern "C" const fg_kernel_reg *fg_cuda_kernel_registry(void) { return fgc_rows; }

extern "C" fg_kernel_fn fg_cuda_kernel(const char *op, fg_dtype dtype) {
  if (!op) return NULL;
  for (const fg_kernel_reg *r = fgc_rows; r->op; r++)
    if (r->dtype == dtype && strcmp(r->op, op) == 0) return r->fn;
  return NULL;
}

/* The prepare hooks (FGC_PREPS in common.cuh), NULL-terminated. */
#define FGC_PREP_ROW(op, dt, prep, rel) {op, dt, prep, rel, NULL},
static const fg_kprep fgc_prep_rows[] = {
    FGC_PREPS(FGC_PREP_ROW){NULL, FG_DTYPE_INVALID, NULL, NULL, NULL}};
#undef FGC_PREP_ROW

extern "C" const fg_kprep *fg_cuda_kernel_prep(const char *op, fg_dtype dtype) {
  if (!op) return NULL;
  for (const fg_kprep *r = fgc_prep_rows; r->op; r++)
    if (r->dtype == dtype && strcmp(r->op, op) == 0) return r;
  return NULL;
}

extern "C" int fg_cuda_error_message(const fg_cuda_error *e, char *buf, size_t n) {
  if (buf && n > 0) buf[0] = '\0';
  if (!e || e->code == FG_CUDA_ERR_NONE) return 0;
  if (!buf || n == 0) return e->code;
  switch (e->code) {
  case FG_CUDA_ERR_INDEX:
  case FG_CUDA_ERR_LABEL:
    snprintf(buf, n, "%s[%lld] = %lld is out of range [0, %lld)",
             e->code == FG_CUDA_ERR_INDEX ? "indices" : "labels", e->a, e->b, e->c);
    break;
  case FG_CUDA_ERR_DIV_ZERO:
    snprintf(buf, n, "division by zero at output element %lld", e->a);
    break;
  case FG_CUDA_ERR_ADAM_STEP:
    snprintf(buf, n, "input %lld (step) = %g must be >= 1 (the step count after incrementing)",
             e->a, e->d);
    break;
  default: snprintf(buf, n, "CUDA kernel reported error code %d", e->code); break;
  }
  return e->code;
}

extern "C" int fg_cuda_op_may_flag(const char *op) {
  static const char *const ops[] = {
      "gather", "gather_grad", "one_hot",          "softmax_cross_entropy",
      "div",    "apply_adam",  "multi_apply_adam", "softmax_cross_entropy_grad",
      "softmax_cross_entropy_and_grad"};
  if (!op) return 0;
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if (strcmp(ops[i], op) == 0) return 1;
  return 0;
}
