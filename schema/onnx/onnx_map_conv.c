/* ONNX Conv and ConvTranspose (opsets 1 and 11; nothing changed in 7..17
 * beyond types) onto flowgraph's conv2d, conv1d and conv_transpose2d.
 *
 * ONNX's pads list every spatial axis's begin, then every axis's end:
 * for 2-D [top, left, bottom, right], flowgraph's order. auto_pad
 * SAME_UPPER / SAME_LOWER become explicit pads computed here (flowgraph's
 * own 'same' is PyTorch's, stride 1 only); VALID is no padding. A 1-D
 * transposed convolution runs as a 2-D one of height 1. 3-D and higher
 * convolutions are refused: flowgraph has no such kernel. */
#include <string.h>

#include "flowgraph/graph.h"
#include "schema/onnx/onnx_map_nn.h"

/* The attributes of one convolution, resolved to numbers. */
typedef struct conv_geo {
  int ns;               /* spatial axes: 1 or 2 */
  int64_t kernel[2];    /* from W (or kernel_shape when W's are unknown) */
  int64_t strides[2];   /* strides */
  int64_t dilations[2]; /* dilations */
  int64_t pads[4];      /* begins, then ends */
  int64_t out_pad[2];   /* ConvTranspose's output_padding */
  int64_t group;        /* group */
  int auto_pad;         /* NNX_PAD_* */
  int64_t in[2];        /* X's spatial sizes, -1 unknown */
} conv_geo;

/* X and W: rank 3 or 4, the same for both. */
static int conv_shapes(fgx_ctx *c, const fgx_node *n, conv_geo *geo, int64_t *xd, int64_t *wd,
                       int *rank) {
  fg_dtype xdt, wdt;
  int rw;
  char b1[256];
  if (fgx_input_info(c, n, 0, &xdt, rank, xd) < 0 || fgx_input_info(c, n, 1, &wdt, &rw, wd) < 0)
    return -1;
  if (*rank < 3)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 0 (X) shape %s has rank %d; it must be [N, C, spatial...], rank >= 3",
                    nnx_fmt(xd, *rank, b1, sizeof b1), *rank);
  geo->ns = *rank - 2;
  if (geo->ns > 2)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "%d-D convolution (input 0 (X) shape %s) is not supported: flowgraph has 1-D "
                    "and 2-D convolutions only",
                    geo->ns, nnx_fmt(xd, *rank, b1, sizeof b1));
  if (rw != *rank)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 1 (W) shape %s has rank %d; X has rank %d and they must agree",
                    nnx_fmt(wd, rw, b1, sizeof b1), rw, *rank);
  for (int k = 0; k < geo->ns; k++) {
    geo->in[k] = xd[2 + k];
    if (geo->in[k] > NNX_ATTR_MAX)
      return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 0 (X) spatial size %lld is above %lld",
                      (long long)geo->in[k], (long long)NNX_ATTR_MAX);
  }
  return 0;
}

/* kernel_shape (which must agree with W's spatial dims), strides,
 * dilations, pads, group and auto_pad. */
static int conv_attrs(fgx_ctx *c, const fgx_node *n, conv_geo *geo, const int64_t *wd, int rank) {
  int64_t ks[2];
  int has_ks;
  char b1[256], b2[256];
  const int ns = geo->ns;
  if (nnx_ints(c, n, "kernel_shape", ns, 1, 0, ks, &has_ks) < 0) return -1;
  for (int k = 0; k < ns; k++) {
    int64_t w = wd[2 + k];
    if (has_ks && w >= 0 && w != ks[k])
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "attribute 'kernel_shape' = %s disagrees with input 1 (W) shape %s",
                      nnx_fmt(ks, ns, b1, sizeof b1), nnx_fmt(wd, rank, b2, sizeof b2));
    geo->kernel[k] = w >= 0 ? w : has_ks ? ks[k] : -1;
    if (geo->kernel[k] > NNX_ATTR_MAX)
      return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 1 (W) kernel size %lld is above %lld",
                      (long long)geo->kernel[k], (long long)NNX_ATTR_MAX);
  }
  if (nnx_ints(c, n, "strides", ns, 1, 1, geo->strides, NULL) < 0 ||
      nnx_ints(c, n, "dilations", ns, 1, 1, geo->dilations, NULL) < 0 ||
      nnx_ints(c, n, "pads", 2 * ns, 0, 0, geo->pads, NULL) < 0 ||
      nnx_auto_pad(c, n, &geo->auto_pad) < 0)
    return -1;
  if (fgx_attr_int(c, n, "group", 1, &geo->group) < 0) return -1;
  if (geo->group < 1 || geo->group > NNX_ATTR_MAX)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'group' = %lld must be in [1, %lld]",
                    (long long)geo->group, (long long)NNX_ATTR_MAX);
  return 0;
}

/* Conv's SAME and VALID pads. ONNX forbids pads beside them; files that
 * hold both anyway get auto_pad's, and their pads are ignored. */
static int conv_auto_pads(fgx_ctx *c, const fgx_node *n, conv_geo *geo) {
  if (geo->auto_pad == NNX_PAD_NOTSET) return 0;
  for (int k = 0; k < geo->ns; k++) {
    geo->pads[k] = geo->pads[geo->ns + k] = 0;
    if (geo->auto_pad == NNX_PAD_VALID) continue;
    if (geo->kernel[k] < 0)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "auto_pad SAME needs the kernel size of spatial axis %d, and input 1 (W)'s "
                      "is unknown",
                      k);
    int64_t ext = geo->dilations[k] * (geo->kernel[k] - 1) + 1;
    if (nnx_same_pads(c, n, geo->auto_pad == NNX_PAD_SAME_UPPER, geo->in[k], ext, geo->strides[k],
                      k, &geo->pads[k], &geo->pads[geo->ns + k]) < 0)
      return -1;
  }
  return 0;
}

/* Conv: W [M, C/group, k...]. */
static int conv_channels(fgx_ctx *c, const fgx_node *n, const conv_geo *geo, const int64_t *xd,
                         const int64_t *wd, int rank) {
  const int64_t ch = xd[1], g = geo->group;
  char b1[256];
  if (ch >= 0 && ch % g != 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "attribute 'group' = %lld does not divide input 0 (X)'s %lld channels",
                    (long long)g, (long long)ch);
  if (wd[0] >= 0 && wd[0] % g != 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "attribute 'group' = %lld does not divide input 1 (W)'s %lld output channels",
                    (long long)g, (long long)wd[0]);
  if (ch >= 0 && wd[1] >= 0 && wd[1] * g != ch)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 1 (W) shape %s has %lld channels per group; input 0 (X) has %lld "
                    "channels and group %lld, so it needs %lld",
                    nnx_fmt(wd, rank, b1, sizeof b1), (long long)wd[1], (long long)ch, (long long)g,
                    (long long)(ch / g));
  return 0;
}

/* The optional bias, or .node = -1. */
static int bias_of(fgx_ctx *c, const fgx_node *n, fg_output *b) {
  *b = (fg_output){-1, 0};
  if (!fgx_has_input(n, 2)) return 0;
  *b = fgx_input(c, n, 2);
  return b->node < 0 ? -1 : 0;
}

int nnx_map_conv(fgx_ctx *c, const fgx_node *n) {
  conv_geo geo;
  int64_t xd[FGX_MAX_DIMS], wd[FGX_MAX_DIMS];
  int rank;
  memset(&geo, 0, sizeof geo);
  if (conv_shapes(c, n, &geo, xd, wd, &rank) < 0 || conv_attrs(c, n, &geo, wd, rank) < 0 ||
      conv_auto_pads(c, n, &geo) < 0 || conv_channels(c, n, &geo, xd, wd, rank) < 0)
    return -1;
  fg_output x = fgx_input(c, n, 0), w = fgx_input(c, n, 1), b;
  if (x.node < 0 || w.node < 0 || bias_of(c, n, &b) < 0) return -1;
  fg_graph *g = fgx_graph(c);
  if (geo.ns == 1) {
    fg_conv1d_opts o;
    memset(&o, 0, sizeof o);
    o.stride = geo.strides[0];
    o.dilation = geo.dilations[0];
    o.pads[0] = geo.pads[0];
    o.pads[1] = geo.pads[1];
    o.groups = geo.group;
    return nnx_set(c, n, 0, fg_conv1d(g, x, w, b, &o));
  }
  fg_conv2d_opts o;
  memset(&o, 0, sizeof o);
  for (int k = 0; k < 2; k++) {
    o.strides[k] = geo.strides[k];
    o.dilations[k] = geo.dilations[k];
  }
  memcpy(o.pads, geo.pads, sizeof o.pads);
  o.groups = geo.group;
  return nnx_set(c, n, 0, fg_conv2d(g, x, w, b, &o));
}

/* ConvTranspose's pads: from output_shape, from auto_pad SAME (an output
 * of in * stride), none for VALID, else the pads attribute. The total
 * padding that gives an output size `out` is
 * stride (in - 1) + output_padding + dilation (kernel - 1) + 1 - out. */
static int transpose_pads(fgx_ctx *c, const fgx_node *n, conv_geo *geo) {
  int64_t os[4];
  const int64_t *v;
  int64_t len;
  char b1[256];
  const int ns = geo->ns;
  if (fgx_attr_ints(c, n, "output_shape", &v, &len) < 0) return -1;
  /* The spatial sizes, optionally preceded by N and C. */
  if (len && len != ns && len != ns + 2)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "attribute 'output_shape' = %s has %lld values; expected %d (or %d with N "
                    "and C)",
                    nnx_fmt(v, len, b1, sizeof b1), (long long)len, ns, ns + 2);
  for (int k = 0; k < ns && len; k++) {
    os[k] = v[len - ns + k];
    if (os[k] < 1 || os[k] > NNX_ATTR_MAX)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "attribute 'output_shape' = %s: %lld is outside [1, %lld]",
                      nnx_fmt(v, len, b1, sizeof b1), (long long)os[k], (long long)NNX_ATTR_MAX);
  }
  if (!len && geo->auto_pad == NNX_PAD_NOTSET) return 0;
  for (int k = 0; k < ns; k++) {
    geo->pads[k] = geo->pads[ns + k] = 0;
    if (!len && geo->auto_pad == NNX_PAD_VALID) continue;
    const int64_t in = geo->in[k], s = geo->strides[k], kk = geo->kernel[k];
    if (in < 0 || kk < 0)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "%s needs spatial axis %d's input and kernel sizes at import, and %s unknown",
                      len ? "attribute 'output_shape'" : "auto_pad SAME", k,
                      in < 0 ? "input 0 (X)'s is" : "input 1 (W)'s is");
    const int64_t full = s * (in - 1) + geo->out_pad[k] + geo->dilations[k] * (kk - 1) + 1;
    const int64_t out = len ? os[k] : in * s;
    const int64_t total = full - out;
    if (total < 0)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "output size %lld of spatial axis %d is larger than the full transposed "
                      "convolution's %lld (it would need negative pads)",
                      (long long)out, k, (long long)full);
    const int upper = geo->auto_pad == NNX_PAD_SAME_UPPER;
    geo->pads[k] = upper ? total / 2 : total - total / 2;
    geo->pads[ns + k] = total - geo->pads[k];
  }
  return 0;
}

/* ConvTranspose: W [C, M/group, k...]. */
static int transpose_checks(fgx_ctx *c, const fgx_node *n, conv_geo *geo, const int64_t *xd,
                            const int64_t *wd, int rank) {
  char b1[256];
  const int64_t ch = xd[1], g = geo->group;
  if (nnx_ints(c, n, "output_padding", geo->ns, 0, 0, geo->out_pad, NULL) < 0) return -1;
  for (int k = 0; k < geo->ns; k++)
    if (geo->out_pad[k] >= geo->strides[k])
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "attribute 'output_padding' %lld on spatial axis %d is not below the stride "
                      "%lld (flowgraph's conv_transpose2d needs that)",
                      (long long)geo->out_pad[k], k, (long long)geo->strides[k]);
  if (ch >= 0 && ch % g != 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "attribute 'group' = %lld does not divide input 0 (X)'s %lld channels",
                    (long long)g, (long long)ch);
  if (ch >= 0 && wd[0] >= 0 && wd[0] != ch)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 1 (W) shape %s has %lld input channels; input 0 (X) has %lld",
                    nnx_fmt(wd, rank, b1, sizeof b1), (long long)wd[0], (long long)ch);
  return 0;
}

int nnx_map_conv_transpose(fgx_ctx *c, const fgx_node *n) {
  conv_geo geo;
  int64_t xd[FGX_MAX_DIMS], wd[FGX_MAX_DIMS];
  int rank;
  memset(&geo, 0, sizeof geo);
  if (conv_shapes(c, n, &geo, xd, wd, &rank) < 0 || conv_attrs(c, n, &geo, wd, rank) < 0 ||
      transpose_checks(c, n, &geo, xd, wd, rank) < 0 || transpose_pads(c, n, &geo) < 0)
    return -1;
  fg_output x = fgx_input(c, n, 0), w = fgx_input(c, n, 1), b;
  if (x.node < 0 || w.node < 0 || bias_of(c, n, &b) < 0) return -1;
  fg_graph *g = fgx_graph(c);
  fg_conv2d_opts o;
  memset(&o, 0, sizeof o);
  o.groups = geo.group;
  if (geo.ns == 1) {
    /* Height 1: x [N, C, 1, L], w [C, M/g, 1, k]. */
    static const int64_t ax2 = 2;
    x = fg_unsqueeze(g, x, &ax2, 1);
    w = fg_unsqueeze(g, w, &ax2, 1);
    const int64_t s[2] = {1, geo.strides[0]}, d[2] = {1, geo.dilations[0]};
    const int64_t p[4] = {0, geo.pads[0], 0, geo.pads[1]}, op[2] = {0, geo.out_pad[0]};
    memcpy(o.strides, s, sizeof s);
    memcpy(o.dilations, d, sizeof d);
    memcpy(o.pads, p, sizeof p);
    memcpy(o.output_padding, op, sizeof op);
    return nnx_set(c, n, 0, fg_squeeze(g, fg_conv_transpose2d(g, x, w, b, &o), &ax2, 1));
  }
  memcpy(o.strides, geo.strides, sizeof o.strides);
  memcpy(o.dilations, geo.dilations, sizeof o.dilations);
  memcpy(o.pads, geo.pads, sizeof o.pads);
  memcpy(o.output_padding, geo.out_pad, sizeof o.output_padding);
  return nnx_set(c, n, 0, fg_conv_transpose2d(g, x, w, b, &o));
}
