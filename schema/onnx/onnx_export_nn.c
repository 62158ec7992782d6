/* Writers of the CNN and normalization ops for the ONNX exporter:
 * pooling, convolution, batch/layer/group/instance norm and dropout, in
 * their inference form. flowgraph's 2-D windows list pads as (top, left,
 * bottom, right), which is ONNX's [x1_begin, x2_begin, x1_end, x2_end]
 * for NCHW, so pads carry over as they are. */
#include <string.h>

#include "schema/onnx/onnx_export.h"

#define UNSUPPORTED(c, id, ...)                                                                    \
  fgo_fail(c, FG_UNIMPLEMENTED, "ONNX export: node '%s' (%s): " __VA_ARGS__)
#define NODE_NAME(c, id) fg_node_name(fgo_graph(c), id)
#define OP_NAME(c, id)   fg_node_op(fgo_graph(c), id)

static int done(Onnx__NodeProto *n) { return n ? 0 : -1; }

static const fg_tinfo *in_info(fgo_ctx *c, int id, int i) { return fgo_in_info(c, id, i); }

/* An ints attribute of exactly n entries, or dflt (n entries) when absent. */
static void ints_or(fgo_ctx *c, int id, const char *name, int64_t *v, int n, const int64_t *dflt) {
  if (fgo_get_ints(c, id, name, v, n) != n) memcpy(v, dflt, (size_t)n * sizeof *v);
}

/* ---- pooling ------------------------------------------------------------------ */

/* With ceil_mode, flowgraph (as torch) drops a last window that would start
 * in the bottom/right padding; ONNX's output size, ceil((in + pads -
 * span) / stride) + 1, keeps it. Such a window changes the output's shape,
 * so the export is refused where the two sizes differ. */
static int ceil_mismatch(fgo_ctx *c, int id, const int64_t *k, const int64_t *s, const int64_t *p,
                         const int64_t *dil) {
  const fg_tinfo *in = in_info(c, id, 0), *out = fgo_info(c, (fg_output){id, 0});
  if (!fgo_get_int(c, id, "ceil_mode", 0) || !in || !out || in->rank != 4 || out->rank != 4)
    return 0;
  for (int d = 0; d < 2; d++) {
    int64_t size = in->dims[2 + d], span = (k[d] - 1) * dil[d] + 1;
    if (size < 0 || out->dims[2 + d] < 0) continue;
    int64_t room = size + p[d] + p[d + 2] - span;
    int64_t onnx = (room + s[d] - 1) / s[d] + 1; /* room >= 0: inference checked it */
    if (onnx != out->dims[2 + d])
      return UNSUPPORTED(c, id,
                         "with ceil_mode its output has %lld positions along dim %d where "
                         "ONNX's ceil_mode gives %lld (a last window starting in the padding)",
                         NODE_NAME(c, id), OP_NAME(c, id), (long long)out->dims[2 + d], 2 + d,
                         (long long)onnx);
  }
  return 0;
}

/* MaxPool / AveragePool with every attribute written out: ONNX's default
 * strides are 1, flowgraph's the kernel. */
static int pool(fgo_ctx *c, int id, const char *type, int is_max) {
  static const int64_t zero4[4] = {0, 0, 0, 0}, one2[2] = {1, 1};
  int64_t kernel[2], strides[2], pads[4], dil[2];
  if (fgo_get_ints(c, id, "kernel", kernel, 2) != 2)
    return UNSUPPORTED(c, id, "no 2-D kernel attribute", NODE_NAME(c, id), OP_NAME(c, id));
  ints_or(c, id, "strides", strides, 2, kernel);
  ints_or(c, id, "pads", pads, 4, zero4);
  ints_or(c, id, "dilations", dil, 2, one2);
  for (int d = 0; d < 2; d++) {
    if (strides[d] <= 0) strides[d] = kernel[d];
    if (dil[d] <= 0) dil[d] = 1;
  }
  if (ceil_mismatch(c, id, kernel, strides, pads, dil) != 0) return -1;
  Onnx__NodeProto *n = fgo_emit1(c, id, type, fgo_in(c, id, 0), fgo_out(c, id, 0));
  if (fgo_attr_ints(c, n, "kernel_shape", kernel, 2) != 0 ||
      fgo_attr_ints(c, n, "strides", strides, 2) != 0 ||
      fgo_attr_ints(c, n, "pads", pads, 4) != 0 ||
      fgo_attr_int(c, n, "ceil_mode", fgo_get_int(c, id, "ceil_mode", 0)) != 0)
    return -1;
  if (is_max) return fgo_attr_ints(c, n, "dilations", dil, 2);
  return fgo_attr_int(c, n, "count_include_pad", fgo_get_int(c, id, "count_include_pad", 1));
}

int fgo_w_max_pool2d(fgo_ctx *c, int id) { return pool(c, id, "MaxPool", 1); }
int fgo_w_avg_pool2d(fgo_ctx *c, int id) { return pool(c, id, "AveragePool", 0); }

int fgo_w_global_avg_pool(fgo_ctx *c, int id) {
  return done(fgo_emit1(c, id, "GlobalAveragePool", fgo_in(c, id, 0), fgo_out(c, id, 0)));
}

int fgo_w_global_max_pool(fgo_ctx *c, int id) {
  return done(fgo_emit1(c, id, "GlobalMaxPool", fgo_in(c, id, 0), fgo_out(c, id, 0)));
}

/* Where each output cell averages an equal block (H and W multiples of
 * the output size), adaptive pooling is an AveragePool; ONNX has no op for
 * the uneven windows. */
int fgo_w_adaptive_avg_pool2d(fgo_ctx *c, int id) {
  const fg_tinfo *t = in_info(c, id, 0);
  int64_t os[2];
  if (!t || t->rank != 4 || fgo_get_ints(c, id, "output_size", os, 2) != 2)
    return UNSUPPORTED(c, id, "needs a 4-D input and a 2-D output_size", NODE_NAME(c, id),
                       OP_NAME(c, id));
  int64_t k[2];
  for (int d = 0; d < 2; d++) {
    int64_t in = t->dims[2 + d];
    if (in <= 0 || os[d] <= 0 || in % os[d] != 0)
      return UNSUPPORTED(c, id,
                         "input %lld by %lld to output %lld by %lld: only sizes that divide "
                         "evenly map onto AveragePool",
                         NODE_NAME(c, id), OP_NAME(c, id), (long long)t->dims[2],
                         (long long)t->dims[3], (long long)os[0], (long long)os[1]);
    k[d] = in / os[d];
  }
  Onnx__NodeProto *n = fgo_emit1(c, id, "AveragePool", fgo_in(c, id, 0), fgo_out(c, id, 0));
  if (fgo_attr_ints(c, n, "kernel_shape", k, 2) != 0) return -1;
  return fgo_attr_ints(c, n, "strides", k, 2);
}

/* ---- convolution ------------------------------------------------------------------ */

/* Conv / ConvTranspose of inputs 0 (x) and 1 (w) and the bias b (NULL:
 * none) into out. */
static int conv(fgo_ctx *c, int id, const char *type, int transpose, const char *b,
                const char *out) {
  static const int64_t zero4[4] = {0, 0, 0, 0}, one2[2] = {1, 1}, zero2[2] = {0, 0};
  const fg_tinfo *w = in_info(c, id, 1);
  if (!w || w->rank != 4 || w->dims[2] < 0 || w->dims[3] < 0)
    return UNSUPPORTED(c, id, "the weight must be 4-D with a known kernel size", NODE_NAME(c, id),
                       OP_NAME(c, id));
  int64_t kernel[2] = {w->dims[2], w->dims[3]}, strides[2], pads[4], dil[2], opad[2];
  ints_or(c, id, "strides", strides, 2, one2);
  ints_or(c, id, "pads", pads, 4, zero4);
  ints_or(c, id, "dilations", dil, 2, one2);
  ints_or(c, id, "output_padding", opad, 2, zero2);
  const char *auto_pad = "explicit";
  fg_node_attr_string(fgo_graph(c), id, "auto_pad", &auto_pad);
  if (strcmp(auto_pad, "same") == 0) {
    /* flowgraph's 'same' (stride 1): dilation (k - 1) in all, the odd one
     * at the bottom/right, written as explicit pads. */
    for (int d = 0; d < 2; d++) {
      int64_t total = dil[d] * (kernel[d] - 1);
      pads[d] = total / 2, pads[d + 2] = total - total / 2;
    }
  } else if (strcmp(auto_pad, "explicit") != 0) {
    return UNSUPPORTED(c, id, "auto_pad '%s'", NODE_NAME(c, id), OP_NAME(c, id), auto_pad);
  }
  const char *in[3] = {fgo_in(c, id, 0), fgo_in(c, id, 1), b};
  if (!in[0] || !in[1] || !out) return -1;
  Onnx__NodeProto *n = fgo_emit(c, id, type, in, b ? 3 : 2, &out, 1);
  if (fgo_attr_ints(c, n, "kernel_shape", kernel, 2) != 0 ||
      fgo_attr_ints(c, n, "strides", strides, 2) != 0 ||
      fgo_attr_ints(c, n, "pads", pads, 4) != 0 || fgo_attr_ints(c, n, "dilations", dil, 2) != 0 ||
      fgo_attr_int(c, n, "group", fgo_get_int(c, id, "groups", 1)) != 0)
    return -1;
  return transpose ? fgo_attr_ints(c, n, "output_padding", opad, 2) : 0;
}

/* The bias, input 2, where the node has one. */
static const char *bias_in(fgo_ctx *c, int id) {
  return fg_node_num_inputs(fgo_graph(c), id) > 2 ? fgo_in(c, id, 2) : NULL;
}

int fgo_conv2d_to(fgo_ctx *c, int id, const char *b, const char *out) {
  return conv(c, id, "Conv", 0, b, out);
}

int fgo_w_conv2d(fgo_ctx *c, int id) {
  return conv(c, id, "Conv", 0, bias_in(c, id), fgo_out(c, id, 0));
}

int fgo_w_conv_transpose2d(fgo_ctx *c, int id) {
  return conv(c, id, "ConvTranspose", 1, bias_in(c, id), fgo_out(c, id, 0));
}

/* ---- training mode ---------------------------------------------------------------- */

/* The exporter writes the inference form: the op's training input must be
 * the graph's training flag (false in a run without an update) or a
 * constant false. */
static int inference_mode(fgo_ctx *c, int id, int input) {
  const fg_graph *g = fgo_graph(c);
  fg_output t = fg_node_input(g, id, input);
  const char *op = fg_node_op(g, t.node);
  if (op && strcmp(op, "training_flag") == 0) return 0;
  const fg_tensor *v = NULL;
  if (op && strcmp(op, "constant") == 0 && fg_node_attr_tensor(g, t.node, "value", &v) == 0 &&
      fg_tensor_dtype(v) == FG_BOOL && fg_tensor_num_elements(v) == 1) {
    if (!*(const unsigned char *)fg_tensor_data(v)) return 0;
    return UNSUPPORTED(c, id,
                       "its training input '%s' is a constant true: the exporter writes the "
                       "inference form only",
                       NODE_NAME(c, id), OP_NAME(c, id), fg_node_name(g, t.node));
  }
  return UNSUPPORTED(c, id,
                     "its training input '%s' (%s) is neither the training flag nor a constant "
                     "false, so the mode of the exported model is unknown",
                     NODE_NAME(c, id), OP_NAME(c, id), op ? fg_node_name(g, t.node) : "?",
                     op ? op : "?");
}

/* With the running statistics; only output 0 (y) has an ONNX form. */
int fgo_w_batch_norm(fgo_ctx *c, int id) {
  if (inference_mode(c, id, 5) != 0) return -1;
  const char *in[5], *out = fgo_out(c, id, 0);
  for (int i = 0; i < 5; i++)
    if (!(in[i] = fgo_in(c, id, i))) return -1;
  Onnx__NodeProto *n = fgo_emit(c, id, "BatchNormalization", in, 5, &out, 1);
  return fgo_attr_float(c, n, "epsilon", fgo_get_float(c, id, "epsilon", 1e-5));
}

/* Inference: x itself. */
int fgo_w_dropout(fgo_ctx *c, int id) {
  if (inference_mode(c, id, 1) != 0) return -1;
  return done(fgo_emit1(c, id, "Identity", fgo_in(c, id, 0), fgo_out(c, id, 0)));
}

/* ---- layer, group and instance norm -------------------------------------------------- */

static const char *emit2(fgo_ctx *c, int id, const char *type, const char *a, const char *b,
                         const char *out) {
  const char *in[2] = {a, b};
  if (!out) out = fgo_tmp(c, id, type);
  return out && fgo_emit(c, id, type, in, 2, &out, 1) ? out : NULL;
}

/* ReduceMean over axes, keeping them. */
static const char *mean_over(fgo_ctx *c, int id, const char *x, const int64_t *axes, int n) {
  const char *out = fgo_tmp(c, id, "ReduceMean");
  Onnx__NodeProto *r = out ? fgo_emit1(c, id, "ReduceMean", x, out) : NULL;
  if (fgo_attr_ints(c, r, "axes", axes, n) != 0 || fgo_attr_int(c, r, "keepdims", 1) != 0)
    return NULL;
  return out;
}

/* LayerNormalization is opset 17; before it, its formula:
 * (x - mean) / sqrt(var + epsilon) * scale + shift over the last k axes. */
int fgo_w_layer_norm(fgo_ctx *c, int id) {
  int64_t k = fgo_get_int(c, id, "normalized_rank", 1);
  double eps = fgo_get_float(c, id, "epsilon", 1e-5);
  const char *x = fgo_in(c, id, 0), *scale = fgo_in(c, id, 1), *shift = fgo_in(c, id, 2);
  if (k < 1 || k > FG_MAX_RANK)
    return UNSUPPORTED(c, id, "normalized_rank %lld", NODE_NAME(c, id), OP_NAME(c, id),
                       (long long)k);
  if (fgo_opset(c) >= 17) {
    const char *in[3] = {x, scale, shift}, *out = fgo_out(c, id, 0);
    Onnx__NodeProto *n = fgo_emit(c, id, "LayerNormalization", in, 3, &out, 1);
    if (fgo_attr_int(c, n, "axis", -k) != 0) return -1;
    return fgo_attr_float(c, n, "epsilon", eps);
  }
  int64_t axes[FG_MAX_RANK];
  for (int i = 0; i < k; i++)
    axes[i] = -k + i;
  const fg_tinfo *t = in_info(c, id, 0);
  const char *mean = mean_over(c, id, x, axes, (int)k);
  const char *d = mean ? emit2(c, id, "Sub", x, mean, NULL) : NULL;
  const char *sq = d ? emit2(c, id, "Mul", d, d, NULL) : NULL;
  const char *var = sq ? mean_over(c, id, sq, axes, (int)k) : NULL;
  const char *e = var ? fgo_const_scalar(c, id, "epsilon", t->dtype, eps) : NULL;
  const char *ve = e ? emit2(c, id, "Add", var, e, NULL) : NULL;
  const char *sd = ve ? fgo_tmp(c, id, "Sqrt") : NULL;
  if (!sd || !fgo_emit1(c, id, "Sqrt", ve, sd)) return -1;
  const char *nrm = emit2(c, id, "Div", d, sd, NULL);
  const char *sc = nrm ? emit2(c, id, "Mul", nrm, scale, NULL) : NULL;
  return sc && emit2(c, id, "Add", sc, shift, fgo_out(c, id, 0)) ? 0 : -1;
}

/* GroupNormalization is opset 18: x as [N, G, rest] through an
 * InstanceNormalization with unit scale, back to x's shape, then the
 * per-channel scale and shift. */
int fgo_w_group_norm(fgo_ctx *c, int id) {
  const fg_tinfo *t = in_info(c, id, 0);
  int64_t groups = fgo_get_int(c, id, "num_groups", 1);
  double eps = fgo_get_float(c, id, "epsilon", 1e-5);
  if (!t || t->rank < 3 || groups < 1 || groups > 1 << 20)
    return UNSUPPORTED(c, id, "needs x of rank >= 3 and a positive num_groups", NODE_NAME(c, id),
                       OP_NAME(c, id));
  double ones[64], zeros[64];
  if (groups > 64)
    return UNSUPPORTED(c, id, "%lld groups (the exporter writes at most 64)", NODE_NAME(c, id),
                       OP_NAME(c, id), (long long)groups);
  for (int i = 0; i < groups; i++)
    ones[i] = 1, zeros[i] = 0;
  int64_t gshape[3] = {0, groups, -1}, cshape[FG_MAX_RANK];
  cshape[0] = -1;
  for (int d = 1; d < t->rank - 1; d++)
    cshape[d] = 1;
  const char *x = fgo_in(c, id, 0);
  const char *gs = fgo_const_i64(c, id, "group_shape", gshape, 3);
  const char *r = gs ? emit2(c, id, "Reshape", x, gs, NULL) : NULL;
  const char *in[3] = {r, fgo_const_vec(c, id, "ones", t->dtype, ones, (int)groups),
                       fgo_const_vec(c, id, "zeros", t->dtype, zeros, (int)groups)};
  const char *inorm = fgo_tmp(c, id, "InstanceNormalization");
  if (!in[0] || !in[1] || !in[2] || !inorm) return -1;
  Onnx__NodeProto *n = fgo_emit(c, id, "InstanceNormalization", in, 3, &inorm, 1);
  if (fgo_attr_float(c, n, "epsilon", eps) != 0) return -1;
  const char *shape = fgo_tmp(c, id, "Shape");
  if (!shape || !fgo_emit1(c, id, "Shape", x, shape)) return -1;
  const char *back = emit2(c, id, "Reshape", inorm, shape, NULL);
  const char *cs = fgo_const_i64(c, id, "channel_shape", cshape, t->rank - 1);
  const char *sc = cs ? emit2(c, id, "Reshape", fgo_in(c, id, 1), cs, NULL) : NULL;
  const char *sh = cs ? emit2(c, id, "Reshape", fgo_in(c, id, 2), cs, NULL) : NULL;
  const char *m = back && sc ? emit2(c, id, "Mul", back, sc, NULL) : NULL;
  return m && sh && emit2(c, id, "Add", m, sh, fgo_out(c, id, 0)) ? 0 : -1;
}

int fgo_w_instance_norm(fgo_ctx *c, int id) {
  const char *in[3] = {fgo_in(c, id, 0), fgo_in(c, id, 1), fgo_in(c, id, 2)};
  const char *out = fgo_out(c, id, 0);
  Onnx__NodeProto *n = fgo_emit(c, id, "InstanceNormalization", in, 3, &out, 1);
  return fgo_attr_float(c, n, "epsilon", fgo_get_float(c, id, "epsilon", 1e-5));
}
