/* Shape inference, parameters and FLOPs of the convolution ops: conv2d,
 * its gradients conv2d_grad_input and conv2d_grad_weight, and
 * conv_transpose2d. Layout NCHW, weights [O, C/groups, kH, kW] (a
 * transposed convolution's [C_in, C_out/groups, kH, kW]), semantics of
 * torch.nn.functional.
 *
 * All four are described here in the terms of one forward convolution:
 * x [N, C, H, W] * w [O, C/groups, kH, kW] -> y [N, O, OH, OW] with
 * OH = (H + pad_top + pad_bottom - (dilation (kH - 1) + 1)) / stride + 1
 * (rounded down). conv2d computes y from x; conv2d_grad_input computes x's
 * gradient from dy (y's role) with x's shape taken from its `like` input;
 * conv2d_grad_weight computes w's gradient (w's shape from `like`);
 * conv_transpose2d takes y's role as its input and produces x's role,
 * whose height is (H - 1) stride - pads + dilation (kH - 1) +
 * output_padding + 1. */
#include <string.h>

#include "graph/infer_common.h"

/* Attribute values past this are refused, so that the arithmetic on them
 * below cannot overflow. */
#define CONV_ATTR_MAX ((int64_t)1 << 30)

/* One int-list attribute of `n` entries, each in [lo, CONV_ATTR_MAX];
 * absent: the defaults. */
static int conv_ints(const fg_node *node, const char *name, int n, int64_t lo, const int64_t *dflt,
                     int64_t *v, fg_status *st) {
  const int64_t *a;
  int count;
  if (fgi_attr_ints(node, name, 0, &a, &count, st)) return -1;
  if (!a) {
    memcpy(v, dflt, (size_t)n * sizeof *v);
    return 0;
  }
  char buf[FGI_STR];
  if (count != n)
    return fgi_fail(node, st, "attribute '%s' = %s has %d entries, expected %d", name,
                    fgi_ints(a, count, buf), count, n);
  for (int i = 0; i < n; i++) {
    if (a[i] < lo)
      return fgi_fail(node, st, "attribute '%s' = %s: %s[%d] = %lld must be >= %lld", name,
                      fgi_ints(a, count, buf), name, i, (long long)a[i], (long long)lo);
    if (a[i] > CONV_ATTR_MAX)
      return fgi_fail(node, st, "attribute '%s' = %s: %s[%d] = %lld is too large (max %lld)", name,
                      fgi_ints(a, count, buf), name, i, (long long)a[i], (long long)CONV_ATTR_MAX);
    v[i] = a[i];
  }
  return 0;
}

/* The node's attributes into *p, checked; kernel sizes from w ([.., .., kH,
 * kW]) resolve auto_pad 'same' (unknown kernel sizes leave *pads_known 0). */
static int conv_params(const fg_node *node, const fg_tinfo *w, fg_conv_params *p, int *pads_known,
                       fg_status *st) {
  static const int64_t ones[2] = {1, 1}, zeros[4] = {0, 0, 0, 0};
  memset(p, 0, sizeof *p);
  *pads_known = 1;
  if (conv_ints(node, "strides", 2, 1, ones, p->stride, st) ||
      conv_ints(node, "dilations", 2, 1, ones, p->dilation, st) ||
      conv_ints(node, "pads", 4, 0, zeros, p->pad, st))
    return -1;
  if (fgi_attr_int(node, "groups", 0, 1, &p->groups, st)) return -1;
  if (p->groups < 1 || p->groups > CONV_ATTR_MAX)
    return fgi_fail(node, st, "attribute 'groups' = %lld must be in [1, %lld]",
                    (long long)p->groups, (long long)CONV_ATTR_MAX);
  if (node->op == FG_OP_CONV_TRANSPOSE2D) {
    if (conv_ints(node, "output_padding", 2, 0, zeros, p->output_padding, st)) return -1;
    for (int i = 0; i < 2; i++)
      if (p->output_padding[i] >= p->stride[i])
        return fgi_fail(
            node, st, "attribute 'output_padding'[%d] = %lld must be smaller than the stride %lld",
            i, (long long)p->output_padding[i], (long long)p->stride[i]);
    return 0;
  }
  const fg_attr *ap = fg_attrs_find(&node->attrs, "auto_pad");
  if (!ap || strcmp(ap->s, "explicit") == 0) return 0;
  if (strcmp(ap->s, "same") != 0)
    return fgi_fail(node, st, "attribute 'auto_pad' = '%s' must be 'explicit' or 'same'", ap->s);
  if (fg_attrs_find(&node->attrs, "pads"))
    return fgi_fail(node, st, "attributes 'pads' and auto_pad 'same' are both given");
  if (p->stride[0] != 1 || p->stride[1] != 1)
    return fgi_fail(node, st, "auto_pad 'same' needs strides 1,1 (as PyTorch), got %lld,%lld",
                    (long long)p->stride[0], (long long)p->stride[1]);
  /* PyTorch's padding='same': the total d (k - 1), its odd half at the
   * bottom and right. */
  for (int i = 0; i < 2; i++) {
    int64_t k = w->rank == 4 ? w->dims[2 + i] : -1;
    if (k < 1) {
      *pads_known = 0;
      continue;
    }
    int64_t total = p->dilation[i] * (k - 1);
    p->pad[i] = total / 2;
    p->pad[2 + i] = total - total / 2;
  }
  return 0;
}

static int check_rank4(const fg_node *node, const fg_tinfo *in, int i, const char *name,
                       const char *layout, fg_status *st) {
  char s[FGI_STR];
  if (in[i].rank != 4)
    return fgi_fail(node, st, "input %d (%s) shape %s has rank %d, expected 4 (%s)", i, name,
                    fgi_shape(&in[i], s), in[i].rank, layout);
  return 0;
}

static int check_float(const fg_node *node, const fg_tinfo *in, int i, const char *name,
                       fg_status *st) {
  if (in[i].dtype != FG_F32 && in[i].dtype != FG_F64)
    return fgi_fail(node, st, "input %d (%s) has dtype %s, expected f32 or f64", i, name,
                    fg_dtype_name(in[i].dtype));
  return i == 0 ? 0 : fgi_same_dtype(node, in, 0, i, st);
}

/* The channel rules of x [N, C, ..] (input xi) and w [O, C/groups, ..]
 * (input wi) under p->groups. */
static int check_channels(const fg_node *node, const fg_tinfo *in, int xi, const char *xname,
                          int wi, const char *wname, const fg_conv_params *p, fg_status *st) {
  int64_t c = in[xi].dims[1], o = in[wi].dims[0], cg = in[wi].dims[1], g = p->groups;
  char s[FGI_STR];
  if (c >= 0 && c % g != 0)
    return fgi_fail(node, st, "groups %lld does not divide input %d (%s)'s %lld channels",
                    (long long)g, xi, xname, (long long)c);
  if (o >= 0 && o % g != 0)
    return fgi_fail(node, st, "groups %lld does not divide input %d (%s)'s %lld output channels",
                    (long long)g, wi, wname, (long long)o);
  if (c >= 0 && cg >= 0 && cg != c / g)
    return fgi_fail(node, st,
                    "input %d (%s) shape %s has %lld channels per group, expected C/groups = "
                    "%lld/%lld = %lld",
                    wi, wname, fgi_shape(&in[wi], s), (long long)cg, (long long)c, (long long)g,
                    (long long)(c / g));
  for (int d = 2; d < 4; d++)
    if (in[wi].dims[d] == 0)
      return fgi_fail(node, st, "input %d (%s) shape %s has an empty kernel", wi, wname,
                      fgi_shape(&in[wi], s));
  return 0;
}

/* y's spatial dims from x's (input xi) and w's (input wi); unknown stays -1. */
static int conv_out_hw(const fg_node *node, const fg_tinfo *in, int xi, const char *xname, int wi,
                       const fg_conv_params *p, int pads_known, int64_t *hw, fg_status *st) {
  static const char *const what[2] = {"height", "width"};
  for (int i = 0; i < 2; i++) {
    int64_t h = in[xi].dims[2 + i], k = in[wi].dims[2 + i];
    hw[i] = -1;
    if (h < 0 || k < 0 || !pads_known) continue;
    int64_t ext = p->dilation[i] * (k - 1) + 1, padded = h + p->pad[i] + p->pad[2 + i];
    if (ext > padded)
      return fgi_fail(node, st,
                      "kernel %s %lld (dilation %lld: extent %lld) is larger than input %d (%s)'s "
                      "padded %s %lld (%lld + pads %lld + %lld)",
                      what[i], (long long)k, (long long)p->dilation[i], (long long)ext, xi, xname,
                      what[i], (long long)padded, (long long)h, (long long)p->pad[i],
                      (long long)p->pad[2 + i]);
    hw[i] = (padded - ext) / p->stride[i] + 1;
  }
  return 0;
}

/* The bias, input i: [o] of x's dtype. */
static int check_bias(const fg_node *node, const fg_tinfo *in, int i, int64_t o, fg_status *st) {
  char s[FGI_STR];
  if (check_float(node, in, i, "b", st)) return -1;
  if (in[i].rank != 1)
    return fgi_fail(node, st, "input %d (b) shape %s has rank %d, expected 1 ([O])", i,
                    fgi_shape(&in[i], s), in[i].rank);
  if (o >= 0 && in[i].dims[0] >= 0 && in[i].dims[0] != o)
    return fgi_fail(node, st, "input %d (b) has %lld entries, expected the %lld output channels", i,
                    (long long)in[i].dims[0], (long long)o);
  return 0;
}

/* dy (input yi) must have the shape the convolution gives: [N, O, OH, OW]. */
static int check_dy(const fg_node *node, const fg_tinfo *in, int yi, const int64_t *want,
                    fg_status *st) {
  char s[FGI_STR];
  for (int d = 0; d < 4; d++)
    if (want[d] >= 0 && in[yi].dims[d] >= 0 && in[yi].dims[d] != want[d])
      return fgi_fail(node, st,
                      "input %d (dy) shape %s does not match the convolution's output at dim %d "
                      "(%lld, expected %lld)",
                      yi, fgi_shape(&in[yi], s), d, (long long)in[yi].dims[d], (long long)want[d]);
  return 0;
}

static const char *const XL = "[N, C, H, W]", *const WL = "[O, C/groups, kH, kW]";

/* conv2d, or a fused op computing conv2d first (graph/infer_fused_conv.c):
 * x, w and the optional b at input bias_input. */
static int forward_conv(int op, int *bias_input) {
  *bias_input = op == FG_OP_FUSED_CONV2D_ADD ? 3 : 2;
  return op == FG_OP_CONV2D || op == FG_OP_FUSED_CONV2D || op == FG_OP_FUSED_CONV2D_ADD;
}

/* conv2d, conv2d_grad_input, conv2d_grad_weight: x and w are inputs (one
 * of them as `like`), y is computed and is the output or dy. */
static int infer_forward_family(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                                fg_status *st) {
  int op = node->op, bi;
  const int fwd = forward_conv(op, &bi);
  int xi = op == FG_OP_CONV2D_GRAD_INPUT ? 2 : 0, wi = op == FG_OP_CONV2D_GRAD_WEIGHT ? 2 : 1;
  const char *xname = xi == 2 ? "like" : "x", *wname = wi == 2 ? "like" : "w";
  int yi = op == FG_OP_CONV2D_GRAD_INPUT ? 0 : op == FG_OP_CONV2D_GRAD_WEIGHT ? 1 : -1;
  if (check_float(node, in, 0, op == FG_OP_CONV2D_GRAD_INPUT ? "dy" : "x", st) ||
      check_float(node, in, 1, op == FG_OP_CONV2D_GRAD_WEIGHT ? "dy" : "w", st))
    return -1;
  if (!fwd && check_float(node, in, 2, "like", st)) return -1;
  if (check_rank4(node, in, xi, xname, XL, st) || check_rank4(node, in, wi, wname, WL, st))
    return -1;
  if (yi >= 0 && check_rank4(node, in, yi, "dy", "[N, O, OH, OW]", st)) return -1;
  fg_conv_params p;
  int pads_known;
  if (conv_params(node, &in[wi], &p, &pads_known, st) ||
      check_channels(node, in, xi, xname, wi, wname, &p, st))
    return -1;
  if (fwd && node->n_inputs > bi && check_bias(node, in, bi, in[wi].dims[0], st)) return -1;
  int64_t y[4] = {in[xi].dims[0], in[wi].dims[0], -1, -1};
  if (conv_out_hw(node, in, xi, xname, wi, &p, pads_known, y + 2, st)) return -1;
  if (yi >= 0 && check_dy(node, in, yi, y, st)) return -1;
  out[0].dtype = in[0].dtype;
  out[0].rank = 4;
  /* The gradients have their like input's shape. */
  const int64_t *dims = fwd ? y : in[2].dims;
  memcpy(out[0].dims, dims, 4 * sizeof *dims);
  return fgi_check_bytes(node, &out[0], st);
}

/* conv_transpose2d: x [N, C_in, H, W], w [C_in, C_out/groups, kH, kW]. */
static int infer_transpose(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *st) {
  static const char *const what[2] = {"height", "width"};
  char s[FGI_STR];
  if (check_float(node, in, 0, "x", st) || check_float(node, in, 1, "w", st) ||
      check_rank4(node, in, 0, "x", XL, st) ||
      check_rank4(node, in, 1, "w", "[C_in, C_out/groups, kH, kW]", st))
    return -1;
  fg_conv_params p;
  int pads_known;
  if (conv_params(node, &in[1], &p, &pads_known, st)) return -1;
  int64_t c = in[0].dims[1], wc = in[1].dims[0], g = p.groups;
  if (c >= 0 && c % g != 0)
    return fgi_fail(node, st, "groups %lld does not divide input 0 (x)'s %lld channels",
                    (long long)g, (long long)c);
  if (c >= 0 && wc >= 0 && wc != c)
    return fgi_fail(node, st,
                    "input 1 (w) shape %s has %lld input channels, but input 0 (x) has %lld",
                    fgi_shape(&in[1], s), (long long)wc, (long long)c);
  for (int d = 2; d < 4; d++)
    if (in[1].dims[d] == 0)
      return fgi_fail(node, st, "input 1 (w) shape %s has an empty kernel", fgi_shape(&in[1], s));
  int64_t cout = in[1].dims[1] >= 0 ? in[1].dims[1] * g : -1;
  if (node->n_inputs > 2 && check_bias(node, in, 2, cout, st)) return -1;
  out[0].dtype = in[0].dtype;
  out[0].rank = 4;
  out[0].dims[0] = in[0].dims[0];
  out[0].dims[1] = cout;
  for (int i = 0; i < 2; i++) {
    int64_t h = in[0].dims[2 + i], k = in[1].dims[2 + i];
    out[0].dims[2 + i] = -1;
    if (h < 0 || k < 0) continue;
    int64_t oh = (h - 1) * p.stride[i] - p.pad[i] - p.pad[2 + i] + p.dilation[i] * (k - 1) +
                 p.output_padding[i] + 1;
    if (h < 1 || oh < 1)
      return fgi_fail(node, st,
                      "output %s %lld < 1: the pads %lld + %lld remove more than input 0 (x)'s "
                      "%s %lld gives (stride %lld, kernel %lld, dilation %lld)",
                      what[i], (long long)oh, (long long)p.pad[i], (long long)p.pad[2 + i], what[i],
                      (long long)h, (long long)p.stride[i], (long long)k, (long long)p.dilation[i]);
    out[0].dims[2 + i] = oh;
  }
  return fgi_check_bytes(node, &out[0], st);
}

int fgi_infer_conv(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  return node->op == FG_OP_CONV_TRANSPOSE2D ? infer_transpose(node, in, out, status)
                                            : infer_forward_family(node, in, out, status);
}

int fgi_parse_conv(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  int pads_known;
  int wi = node->op == FG_OP_CONV2D_GRAD_WEIGHT ? 2 : 1;
  if (conv_params(node, &in[wi], &p->conv, &pads_known, st)) return -1;
  if (!pads_known) return fgi_fail(node, st, "auto_pad 'same' with an unknown kernel size");
  return 0;
}

/* 2 multiply-adds per (output element of the forward convolution, weight
 * of its group): 2 N O OH OW (C/groups) kH kW. The forward output is y
 * (conv2d), dy (the gradients) or x (conv_transpose2d). */
int64_t fgi_flops_conv(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  int bi;
  const fg_tinfo *y = forward_conv(node->op, &bi)            ? &out[0]
                      : node->op == FG_OP_CONV2D_GRAD_WEIGHT ? &in[1]
                                                             : &in[0];
  const fg_tinfo *w = node->op == FG_OP_CONV2D_GRAD_WEIGHT ? &out[0] : &in[1];
  int64_t e = fgi_elements(y);
  if (e < 0 || w->rank != 4) return 0;
  int64_t f = fgi_mul_sat(2, e);
  for (int d = 1; d < 4; d++)
    f = fgi_mul_sat(f, w->dims[d] < 0 ? 0 : w->dims[d]);
  return f;
}
