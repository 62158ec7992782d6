/* Which (device, dtype) pairs have a kernel for an op: the op table lives in
 * graph/, the kernel registries in kernels/, and the executor is the layer
 * that sees both. `flowgraph ops` prints this. */
#include <string.h>

#include "flowgraph/graph.h"
#include "kernels/kernel.h"

unsigned fg_op_kernel_dtypes(int op, const char *device) {
  const char *name = fg_op_name(op);
  if (!name || !device) return 0;
  const fg_kernel_reg *rows = strcmp(device, "cpu") == 0    ? fg_cpu_kernel_registry()
                              : strcmp(device, "cuda") == 0 ? fg_cuda_kernel_registry()
                                                            : NULL;
  unsigned bits = 0;
  for (const fg_kernel_reg *r = rows; r && r->op; r++)
    if (strcmp(r->op, name) == 0 && r->dtype > 0 && r->dtype < 32) bits |= 1u << r->dtype;
  return bits;
}
