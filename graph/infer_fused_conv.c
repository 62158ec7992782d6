/* Shape inference, FLOPs and parameters of the fused convolutions the
 * conv_epilogue pass makes (executor/passes/epilogue_conv.c):
 *
 *   fused_conv2d(x, w, [b])         act(conv2d(x, w, b))
 *   fused_conv2d_add(x, w, z, [b])  act(conv2d(x, w, b) + z)
 *
 * The convolution follows conv2d's rules (graph/infer_conv.c, the same
 * attributes and the same optional bias); z, the residual a ResNet block
 * adds, has the convolution's output dtype and shape; the activation is
 * a string attribute, "none" or "relu" as fused_matmul's, or "clip" with
 * clip's float attributes min and max (MobileNet's relu6). Two op names,
 * not one with an optional z: an input's meaning never depends on how many
 * inputs there are beside it (input 2 of fused_conv2d is always the bias,
 * of fused_conv2d_add always the residual). */
#include <math.h>
#include <string.h>

#include "graph/infer_common.h"

/* The activation, and with clip its bounds (else -inf and inf); -1 with
 * the status set. */
static int conv_activation(const fg_node *node, double *lo, double *hi, fg_status *st) {
  *lo = -INFINITY, *hi = INFINITY;
  const int act = fgi_activation(node, 1, st);
  return act == FG_ACTIVATION_CLIP && fgi_clip_bounds(node, lo, hi, st) != 0 ? -1 : act;
}

int fgi_infer_fused_conv(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                         fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR];
  double lo, hi;
  if (conv_activation(node, &lo, &hi, status) < 0) return -1;
  if (fgi_infer_conv(node, in, out, status) != 0) return -1;
  if (node->op != FG_OP_FUSED_CONV2D_ADD) return 0;
  const fg_tinfo *z = &in[2];
  if (z->dtype != out[0].dtype)
    return fgi_fail(node, status, "input 2 (z) dtype %s differs from the convolution's %s",
                    fg_dtype_name(z->dtype), fg_dtype_name(out[0].dtype));
  int same = z->rank == 4;
  for (int d = 0; same && d < 4; d++)
    same = z->dims[d] < 0 || out[0].dims[d] < 0 || z->dims[d] == out[0].dims[d];
  if (!same)
    return fgi_fail(node, status,
                    "input 2 (z) shape %s must be the convolution's output shape %s (the "
                    "residual is added element by element, not broadcast)",
                    fgi_shape(z, s1), fgi_shape(&out[0], s2));
  /* A batch dim the convolution leaves unknown is z's when z knows it. */
  if (out[0].dims[0] < 0) out[0].dims[0] = z->dims[0];
  return 0;
}

/* conv2d's multiply-adds, and one operation per output element for each
 * of the bias add, the residual add and the activation present. */
int64_t fgi_flops_fused_conv(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  int64_t f = fgi_flops_conv(node, in, out), e = fgi_elements(&out[0]);
  if (f < 0 || e < 0) return f;
  const int add = node->op == FG_OP_FUSED_CONV2D_ADD;
  const fg_attr *a = fg_attrs_find(&node->attrs, "activation");
  const int act = a && a->type == FG_ATTR_STRING && a->s && strcmp(a->s, "none") != 0;
  int64_t ops = (node->n_inputs > 2 + add) + add + act;
  int64_t extra = fgi_mul_sat(e, ops);
  return f > INT64_MAX - extra ? INT64_MAX : f + extra;
}

int fgi_parse_fused_conv(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  fg_op_params conv;
  double lo, hi;
  int act = conv_activation(node, &lo, &hi, st);
  if (act < 0 || fgi_parse_conv(node, in, &conv, st) != 0) return -1;
  p->fused_conv.conv = conv.conv;
  p->fused_conv.activation = (fg_activation)act;
  p->fused_conv.clip_min = lo, p->fused_conv.clip_max = hi;
  return 0;
}
