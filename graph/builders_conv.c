/* The convolution builders (flowgraph/graph.h): fg_conv2d_opts into the
 * nodes' attributes. Values are checked by shape inference, which names
 * the node; only what the attributes cannot say is refused here. */
#include <string.h>

#include "flowgraph/graph.h"
#include "graph/builders_internal.h"
#include "graph/graph_internal.h"

/* opts' fields into attributes, zero fields left to the op's defaults;
 * nonzero when out of memory. */
static int conv_attrs(const fg_conv2d_opts *o, fg_attrs *a) {
  int bad = 0;
  if (o->strides[0] || o->strides[1]) {
    int64_t v[2] = {o->strides[0] ? o->strides[0] : 1, o->strides[1] ? o->strides[1] : 1};
    bad |= fg_attrs_set_ints(a, "strides", v, 2);
  }
  if (o->dilations[0] || o->dilations[1]) {
    int64_t v[2] = {o->dilations[0] ? o->dilations[0] : 1, o->dilations[1] ? o->dilations[1] : 1};
    bad |= fg_attrs_set_ints(a, "dilations", v, 2);
  }
  if (o->pads[0] || o->pads[1] || o->pads[2] || o->pads[3])
    bad |= fg_attrs_set_ints(a, "pads", o->pads, 4);
  if (o->groups) bad |= fg_attrs_set_int(a, "groups", o->groups);
  if (o->same) bad |= fg_attrs_set_string(a, "auto_pad", "same");
  if (o->output_padding[0] || o->output_padding[1])
    bad |= fg_attrs_set_ints(a, "output_padding", o->output_padding, 2);
  return bad;
}

static fg_output conv(fg_graph *g, const char *op, fg_output x, fg_output w, fg_output bias,
                      const fg_conv2d_opts *opts) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  static const fg_conv2d_opts defaults;
  if (!opts) opts = &defaults;
  int transpose = strcmp(op, "conv_transpose2d") == 0;
  if (!transpose && (opts->output_padding[0] || opts->output_padding[1])) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT,
                  "conv2d: output_padding %lld,%lld is for conv_transpose2d only",
                  (long long)opts->output_padding[0], (long long)opts->output_padding[1]);
    return FG_NO_OUTPUT;
  }
  if (transpose && opts->same) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT,
                  "conv_transpose2d: 'same' padding is not supported (nor by PyTorch's "
                  "conv_transpose2d); give pads");
    return FG_NO_OUTPUT;
  }
  fg_attrs *a = fg_attrs_new();
  fg_output in[3] = {x, w, bias};
  return fg_build_finish(g, op, in, bias.node < 0 ? 2 : 3, a, !a || conv_attrs(opts, a) != 0);
}

fg_output fg_conv2d(fg_graph *g, fg_output x, fg_output w, fg_output bias,
                    const fg_conv2d_opts *opts) {
  return conv(g, "conv2d", x, w, bias, opts);
}

fg_output fg_conv_transpose2d(fg_graph *g, fg_output x, fg_output w, fg_output bias,
                              const fg_conv2d_opts *opts) {
  return conv(g, "conv_transpose2d", x, w, bias, opts);
}

fg_output fg_conv1d(fg_graph *g, fg_output x, fg_output w, fg_output bias,
                    const fg_conv1d_opts *opts) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  static const fg_conv1d_opts defaults;
  if (!opts) opts = &defaults;
  int64_t dims[FG_MAX_RANK];
  const int64_t axis = 2;
  int rx = fg_output_shape(g, x, dims), rw = fg_output_shape(g, w, dims);
  if (rx != 3 || rw != 3) {
    fg_graph_fail(
        g, FG_INVALID_ARGUMENT,
        "conv1d: x has rank %d and w rank %d, expected 3 ([N, C, L] and [O, C/groups, k])", rx, rw);
    return FG_NO_OUTPUT;
  }
  fg_conv2d_opts o2 = {{1, opts->stride},   {0, opts->pads[0], 0, opts->pads[1]},
                       {1, opts->dilation}, opts->groups,
                       opts->same,          {0, 0}};
  fg_output y =
      fg_conv2d(g, fg_expand_dims(g, x, &axis, 1), fg_expand_dims(g, w, &axis, 1), bias, &o2);
  if (fg_output_shape(g, y, dims) != 4) return FG_NO_OUTPUT;
  int64_t out[3] = {dims[0], dims[1], dims[3]};
  int unknown = 0;
  for (int i = 0; i < 3; i++)
    unknown += out[i] < 0;
  if (unknown > 1) {
    fg_graph_fail(g, FG_UNIMPLEMENTED,
                  "conv1d: the output has %d unknown dims; a reshape back to rank 3 infers one",
                  unknown);
    return FG_NO_OUTPUT;
  }
  return fg_reshape(g, y, 3, out);
}
