/* The CPU kernel registry: one row per (op name, dtype key), generated from
 * FGK_KERNELS in cpu_kernels.h, so the declarations and the table come from
 * the same list. Read-only data: safe to use from any thread. */
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"

#define FGK_ROW(op, dt, fn) {op, dt, fn},
static const fg_kernel_reg fgk_rows[] = {FGK_KERNELS(FGK_ROW){NULL, FG_DTYPE_INVALID, NULL}};
#undef FGK_ROW

const fg_kernel_reg *fg_cpu_kernel_registry(void) { return fgk_rows; }

/* A linear scan: the executor looks kernels up once per plan, not per run. */
fg_kernel_fn fg_cpu_kernel(const char *op, fg_dtype dtype) {
  if (!op) return NULL;
  for (const fg_kernel_reg *r = fgk_rows; r->op; r++)
    if (r->dtype == dtype && strcmp(r->op, op) == 0) return r->fn;
  return NULL;
}

#define FGK_PREP_ROW(op, dt, prep, rel, bytes) {op, dt, prep, rel, bytes},
static const fg_kprep fgk_prep_rows[] = {
    FGK_PREPS(FGK_PREP_ROW){NULL, FG_DTYPE_INVALID, NULL, NULL, NULL}};
#undef FGK_PREP_ROW

const fg_kprep *fg_cpu_kernel_prep(const char *op, fg_dtype dtype) {
  if (!op) return NULL;
  for (const fg_kprep *r = fgk_prep_rows; r->op; r++)
    if (r->dtype == dtype && strcmp(r->op, op) == 0) return r;
  return NULL;
}
