/* Shape inference for logical_not, logical_and and logical_or. They take
 * bool only: a number is not silently read as a truth value (cast it, or
 * compare it with zero, first). The binary ones broadcast NumPy-style, as
 * the arithmetic ops do. */
#include "graph/infer_common.h"

int fgi_infer_logical(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  const int n = node->op == FG_OP_LOGICAL_NOT ? 1 : 2;
  for (int i = 0; i < n; i++)
    if (in[i].dtype != FG_BOOL)
      return fgi_fail(node, status, "input %d dtype %s is not allowed; %s needs bool", i,
                      fg_dtype_name(in[i].dtype), fgi_opname(node));
  if (n == 1) {
    out[0] = in[0];
    return 0;
  }
  if (fgi_broadcast(node, in, 0, 1, &out[0], status)) return -1;
  out[0].dtype = FG_BOOL;
  return fgi_check_bytes(node, &out[0], status);
}
