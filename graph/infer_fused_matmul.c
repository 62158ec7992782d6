/* Shape inference, FLOPs and parameters of fused_matmul(a, b, bias):
 * act(op(a) @ op(b) + bias). The product follows matmul's rules (2-D or
 * batched, transposes, broadcast batch dims); bias is a vector of the
 * output's last dim (N) and dtype, added to every row; the activation is
 * named by a string attribute, "none" or "relu". */
#include <string.h>

#include "graph/infer_common.h"

int fgi_activation(const fg_node *node, int allow_clip, fg_status *st) {
  const char *names = allow_clip ? "\"none\", \"relu\" or \"clip\"" : "\"none\" or \"relu\"";
  const fg_attr *a = fg_attrs_find(&node->attrs, "activation");
  if (!a) return FG_ACTIVATION_NONE;
  if (a->type != FG_ATTR_STRING || !a->s)
    return fgi_fail(node, st, "attribute 'activation' must be a string (%s)", names);
  if (strcmp(a->s, "none") == 0) return FG_ACTIVATION_NONE;
  if (strcmp(a->s, "relu") == 0) return FG_ACTIVATION_RELU;
  if (allow_clip && strcmp(a->s, "clip") == 0) return FG_ACTIVATION_CLIP;
  return fgi_fail(node, st, "attribute 'activation' = '%s' is not an activation (%s)", a->s, names);
}

int fgi_infer_fused_matmul(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                           fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_activation(node, 0, status) < 0) return -1;
  if (fgi_infer_matmul(node, in, out, status) != 0) return -1;
  const fg_tinfo *bias = &in[2];
  if (bias->dtype != in[0].dtype)
    return fgi_fail(node, status, "input 2 (bias) dtype %s differs from input 0's %s",
                    fg_dtype_name(bias->dtype), fg_dtype_name(in[0].dtype));
  const int64_t n = out[0].dims[out[0].rank - 1];
  if (bias->rank != 1 || (bias->dims[0] >= 0 && n >= 0 && bias->dims[0] != n))
    return fgi_fail(node, status,
                    "input 2 (bias) shape %s must be [N] = [%lld], the last dim of the product "
                    "shape %s",
                    fgi_shape(bias, s1), (long long)n, fgi_shape(&out[0], s2));
  return 0;
}

/* matmul's 2*M*N*K, and one add and one activation per output element. */
int64_t fgi_flops_fused_matmul(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  int64_t mm = fgi_flops_matmul(node, in, out), e = fgi_elements(&out[0]);
  if (mm < 0 || e < 0) return -1;
  int64_t extra = fgi_mul_sat(e, 2);
  return mm > INT64_MAX - extra ? INT64_MAX : mm + extra;
}

int fgi_parse_fused_matmul(const fg_node *node, const fg_tinfo *in, fg_op_params *p,
                           fg_status *st) {
  (void)in;
  int act = fgi_activation(node, 0, st);
  if (act < 0) return -1;
  p->fused_matmul.activation = (fg_activation)act;
  return 0;
}
