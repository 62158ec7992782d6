/* The CUDA registry of a build without the CUDA backend (FG_CUDA=OFF or no
 * toolkit): no kernels, so every GPU session is refused with a clear error
 * and the op-table test reports every op as lacking a CUDA kernel. The CUDA
 * build compiles kernels/cuda/registry.cu instead of this file. */
#include <stddef.h>

#include "kernels/kernel.h"

fg_kernel_fn fg_cuda_kernel(const char *op, fg_dtype dtype) {
  (void)op;
  (void)dtype;
  return NULL;
}

const fg_kprep *fg_cuda_kernel_prep(const char *op, fg_dtype dtype) {
  (void)op;
  (void)dtype;
  return NULL;
}

const fg_kernel_reg *fg_cuda_kernel_registry(void) {
  static const fg_kernel_reg none[1] = {{NULL, FG_F32, NULL}};
  return none;
}
