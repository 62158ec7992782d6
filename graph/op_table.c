/* The op table: one row per op, indexed by its FG_OP_* id. Rows are placed
 * with designated initializers, so their order cannot drift from FG_OPS; a
 * duplicate row warns (-Woverride-init), the row count is checked below and
 * a missing row (NULL name) fails the op-table test in tests/graph/test_infer.c.
 *
 * Flag choices worth knowing:
 * - variable is a leaf: gradients are taken with respect to it, but it has
 *   no inputs to pass a gradient on to, so it needs no gradient function and
 *   is not marked FG_OPF_DIFFERENTIABLE (nor are placeholder and constant).
 * - FG_OPF_INPLACE marks ops whose output always has input 0's dtype and
 *   shape and whose output[i] depends only on input[i]: the unary ops and
 *   identity-like ops. Binary ops are not marked, since broadcasting can
 *   make the output larger than input 0; the planner may still decide per
 *   node when the shapes happen to match.
 * - fill has no inputs but runs a kernel, so it is not a source.
 * - comparisons and argmax produce bool/i64 whatever their input, so their
 *   kernels are looked up by input 0's dtype (FG_OPF_KERNEL_KEY_INPUT). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/infer_common.h"
#include "graph/infer_grad.h"
#include "graph/infer_shape_ops.h"
#include "graph/suggest.h"

#define SRC   FG_OPF_SOURCE
#define EW    FG_OPF_ELEMENTWISE
#define INPL  FG_OPF_INPLACE
#define DIFF  FG_OPF_DIFFERENTIABLE
#define STATE FG_OPF_STATEFUL
#define COLL  FG_OPF_COLLECTIVE
#define KEYIN FG_OPF_KERNEL_KEY_INPUT
#define VIEW  FG_OPF_VIEW
#define RAND  FG_OPF_RANDOM

/* ---- attributes, per op (see fg_attr_def) -------------------------------- */
#define A_END                                                                                      \
  { NULL, 0, NULL, NULL, FG_NO_PARAM }
static const fg_attr_def a_placeholder[] = {
    {"dtype", FG_ATTR_INT, NULL, "element type (f32=1, f64=2, i32=3, i64=4, bool=5)", FG_NO_PARAM},
    {"shape", FG_ATTR_INTS, NULL, "dims; the first may be -1, the batch known when fed",
     FG_NO_PARAM},
    A_END};
static const fg_attr_def a_value[] = {{"value", FG_ATTR_TENSOR, NULL, "the value", FG_NO_PARAM},
                                      A_END};
static const fg_attr_def a_fill[] = {
    {"dtype", FG_ATTR_INT, NULL, "element type", FG_NO_PARAM},
    {"shape", FG_ATTR_INTS, NULL, "dims", FG_NO_PARAM},
    {"value", FG_ATTR_FLOAT, "0", "every element's value", FG_PARAM(F64, fill.value)},
    A_END};
static const fg_attr_def a_random_uniform[] = {
    {"dtype", FG_ATTR_INT, NULL, "element type, f32 or f64", FG_NO_PARAM},
    {"shape", FG_ATTR_INTS, NULL, "dims, all known", FG_NO_PARAM},
    {"seed", FG_ATTR_INT, "0", "the Philox key", FG_PARAM(I64, random.seed)},
    {"stream", FG_ATTR_INT, "-1", "[0, 2^32), or -1: a hash of the node's name", FG_NO_PARAM},
    {"low", FG_ATTR_FLOAT, "0", "smallest value", FG_PARAM(F64, random.low)},
    {"high", FG_ATTR_FLOAT, "1", "bound above, > low, excluded", FG_PARAM(F64, random.high)},
    A_END};
static const fg_attr_def a_random_normal[] = {
    {"dtype", FG_ATTR_INT, NULL, "element type, f32 or f64", FG_NO_PARAM},
    {"shape", FG_ATTR_INTS, NULL, "dims, all known", FG_NO_PARAM},
    {"seed", FG_ATTR_INT, "0", "the Philox key", FG_PARAM(I64, random.seed)},
    {"stream", FG_ATTR_INT, "-1", "[0, 2^32), or -1: a hash of the node's name", FG_NO_PARAM},
    {"mean", FG_ATTR_FLOAT, "0", "the mean", FG_PARAM(F64, random.mean)},
    {"stddev", FG_ATTR_FLOAT, "1", "standard deviation, > 0", FG_PARAM(F64, random.stddev)},
    A_END};
/* A variable starts at `value`, or when it has none at what its initialiser
 * draws when a session is made (graph/init.c): the kind and its numbers are
 * attributes, so a saved graph holds no initial bytes. */
static const fg_attr_def a_variable[] = {
    {"value", FG_ATTR_TENSOR, "none", "the initial value; absent: init", FG_NO_PARAM},
    {"dtype", FG_ATTR_INT, "none", "element type, without value", FG_NO_PARAM},
    {"shape", FG_ATTR_INTS, "none", "dims, without value", FG_NO_PARAM},
    {"init", FG_ATTR_INT, "none",
     "fg_init_kind: zeros=0 ones=1 constant=2 uniform=3 normal=4 kaiming_uniform=5 "
     "kaiming_normal=6 xavier_uniform=7 xavier_normal=8",
     FG_NO_PARAM},
    {"init_a", FG_ATTR_FLOAT, "0", "constant; uniform low; normal mean; kaiming slope; xavier gain",
     FG_NO_PARAM},
    {"init_b", FG_ATTR_FLOAT, "0", "uniform high; normal stddev", FG_NO_PARAM},
    {"init_fan_out", FG_ATTR_INT, "0", "kaiming: 1 scales by fan_out, 0 by fan_in", FG_NO_PARAM},
    {"seed", FG_ATTR_INT, "0", "the initialiser's Philox key", FG_NO_PARAM},
    {"stream", FG_ATTR_INT, "-1", "the Philox stream, or -1: a hash of the node's name",
     FG_NO_PARAM},
    A_END};
static const fg_attr_def a_dropout[] = {
    {"p", FG_ATTR_FLOAT, "0.5", "probability of zeroing an element, [0, 1)",
     FG_PARAM(F64, dropout.p)},
    {"seed", FG_ATTR_INT, "0", "the Philox key", FG_PARAM(I64, dropout.seed)},
    {"stream", FG_ATTR_INT, "-1", "[0, 2^32), or -1: a hash of the node's name", FG_NO_PARAM},
    {"replica", FG_ATTR_INT, "0", "data-parallel replica, [0, 2^16): its own masks",
     FG_PARAM(I64, dropout.replica)},
    A_END};
static const fg_attr_def a_matmul[] = {
    {"transpose_a", FG_ATTR_INT, "0", "1: use a's last two dims swapped",
     FG_PARAM(FLAG, matmul.transpose_a)},
    {"transpose_b", FG_ATTR_INT, "0", "1: use b's last two dims swapped",
     FG_PARAM(FLAG, matmul.transpose_b)},
    A_END};
static const fg_attr_def a_fused_matmul[] = {
    {"transpose_a", FG_ATTR_INT, "0", "1: use a's last two dims swapped",
     FG_PARAM(FLAG, fused_matmul.transpose_a)},
    {"transpose_b", FG_ATTR_INT, "0", "1: use b's last two dims swapped",
     FG_PARAM(FLAG, fused_matmul.transpose_b)},
    {"activation", FG_ATTR_STRING, "none", "applied last: \"none\" or \"relu\"", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_permuted_matmul[] = {
    {"perm_a", FG_ATTR_INTS, NULL,
     "a read as transpose(a, perm_a); a's last axis at one of the last two positions", FG_NO_PARAM},
    {"perm_b", FG_ATTR_INTS, NULL,
     "b read as transpose(b, perm_b); b's last axis at one of the last two positions", FG_NO_PARAM},
    {"perm_out", FG_ATTR_INTS, NULL,
     "out = transpose(product, perm_out); the product's last axis stays last", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_shape[] = {
    {"shape", FG_ATTR_INTS, NULL, "the new dims; one may be -1 (inferred)", FG_NO_PARAM}, A_END};
static const fg_attr_def a_perm[] = {
    {"perm", FG_ATTR_INTS, NULL, "out.dims[i] = in.dims[perm[i]]", FG_NO_PARAM}, A_END};
static const fg_attr_def a_axis[] = {
    {"axis", FG_ATTR_INT, NULL, "the axis, negative from the end", FG_NO_PARAM}, A_END};
static const fg_attr_def a_slice[] = {
    {"begin", FG_ATTR_INTS, NULL, "first index per dim", FG_NO_PARAM},
    {"size", FG_ATTR_INTS, NULL, "length per dim, -1 = to the end", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_one_hot[] = {
    {"depth", FG_ATTR_INT, NULL, "number of classes", FG_PARAM(I64, one_hot.depth)},
    {"dtype", FG_ATTR_INT, NULL, "output element type", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_dtype[] = {
    {"dtype", FG_ATTR_INT, NULL, "output element type", FG_NO_PARAM}, A_END};
static const fg_attr_def a_leaky_relu[] = {
    {"alpha", FG_ATTR_FLOAT, "0.01", "slope for x < 0", FG_PARAM(F64, leaky_relu.alpha)}, A_END};
static const fg_attr_def a_elu[] = {
    {"alpha", FG_ATTR_FLOAT, "1", "scale of the negative part", FG_PARAM(F64, elu.alpha)}, A_END};
static const fg_attr_def a_softplus[] = {
    {"beta", FG_ATTR_FLOAT, "1", "log1p(e^(beta x)) / beta", FG_PARAM(F64, softplus.beta)},
    {"threshold", FG_ATTR_FLOAT, "20", "x where beta x > threshold",
     FG_PARAM(F64, softplus.threshold)},
    A_END};
static const fg_attr_def a_clip[] = {
    {"min", FG_ATTR_FLOAT, NULL, "lower bound", FG_PARAM(F64, clip.min)},
    {"max", FG_ATTR_FLOAT, NULL, "upper bound, >= min", FG_PARAM(F64, clip.max)},
    A_END};
static const fg_attr_def a_reduce[] = {
    {"axes", FG_ATTR_INTS, "all", "axes to reduce, negative from the end; empty = all",
     FG_NO_PARAM},
    {"keepdims", FG_ATTR_INT, "0", "1: keep reduced axes as size 1", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_expand_dims[] = {
    {"axes", FG_ATTR_INTS, NULL, "positions of the new size-1 dims in the output", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_momentum[] = {
    {"momentum", FG_ATTR_FLOAT, NULL, "buf = momentum * buf + grad",
     FG_PARAM(F64, momentum.momentum)},
    {"nesterov", FG_ATTR_INT, "0", "1: Nesterov momentum", FG_PARAM(FLAG, momentum.nesterov)},
    A_END};
static const fg_attr_def a_adam[] = {
    {"beta1", FG_ATTR_FLOAT, "0.9", "first moment decay, [0, 1)", FG_PARAM(F64, adam.beta1)},
    {"beta2", FG_ATTR_FLOAT, "0.999", "second moment decay, [0, 1)", FG_PARAM(F64, adam.beta2)},
    {"epsilon", FG_ATTR_FLOAT, "1e-08", "added to the denominator", FG_PARAM(F64, adam.epsilon)},
    {"weight_decay", FG_ATTR_FLOAT, "0", "decoupled decay (AdamW): var *= 1 - lr * wd",
     FG_PARAM(F64, adam.weight_decay)},
    {"l2", FG_ATTR_FLOAT, "0", "coupled decay (torch's Adam): grad += l2 * var",
     FG_PARAM(F64, adam.l2)},
    A_END};
/* The multi-tensor updates: the list length, then their rule's attributes
 * (a_momentum's and a_adam's, with the same defaults and meanings). */
#define A_MULTI_N                                                                                  \
  {                                                                                                \
    "n", FG_ATTR_INT, NULL, "variables updated (the length of each input list), >= 1",             \
        FG_PARAM(I64, multi_update.n)                                                              \
  }
static const fg_attr_def a_multi_sgd[] = {A_MULTI_N, A_END};
static const fg_attr_def a_multi_momentum[] = {
    A_MULTI_N,
    {"momentum", FG_ATTR_FLOAT, NULL, "buf = momentum * buf + grad",
     FG_PARAM(F64, multi_update.momentum.momentum)},
    {"nesterov", FG_ATTR_INT, "0", "1: Nesterov momentum",
     FG_PARAM(FLAG, multi_update.momentum.nesterov)},
    A_END};
static const fg_attr_def a_multi_adam[] = {
    A_MULTI_N,
    {"beta1", FG_ATTR_FLOAT, "0.9", "first moment decay, [0, 1)",
     FG_PARAM(F64, multi_update.adam.beta1)},
    {"beta2", FG_ATTR_FLOAT, "0.999", "second moment decay, [0, 1)",
     FG_PARAM(F64, multi_update.adam.beta2)},
    {"epsilon", FG_ATTR_FLOAT, "1e-08", "added to the denominator",
     FG_PARAM(F64, multi_update.adam.epsilon)},
    {"weight_decay", FG_ATTR_FLOAT, "0", "decoupled decay (AdamW): var *= 1 - lr * wd",
     FG_PARAM(F64, multi_update.adam.weight_decay)},
    {"l2", FG_ATTR_FLOAT, "0", "coupled decay (torch's Adam): grad += l2 * var",
     FG_PARAM(F64, multi_update.adam.l2)},
    A_END};
#undef A_MULTI_N
static const fg_attr_def a_all_reduce[] = {
    {"mean", FG_ATTR_INT, "1", "the mean over ranks, not the sum", FG_PARAM(FLAG, all_reduce.mean)},
    {"weighted", FG_ATTR_INT, "0", "weighted by rows (inputs rows, sums)",
     FG_PARAM(FLAG, all_reduce.weighted)},
    A_END};
static const fg_attr_def a_shard[] = {
    {"index", FG_ATTR_INT, NULL, "this replica, [0, count)", FG_PARAM(I64, shard.index)},
    {"count", FG_ATTR_INT, NULL, "replicas", FG_PARAM(I64, shard.count)},
    A_END};
static const fg_attr_def a_cumsum[] = {
    {"axis", FG_ATTR_INT, NULL, "the axis, negative from the end", FG_NO_PARAM},
    {"exclusive", FG_ATTR_INT, "0", "1: leave x[i] itself out of out[i]",
     FG_PARAM(FLAG, cumsum.exclusive)},
    {"reverse", FG_ATTR_INT, "0", "1: sum from the end of the axis",
     FG_PARAM(FLAG, cumsum.reverse)},
    A_END};
static const fg_attr_def a_topk[] = {
    {"k", FG_ATTR_INT, NULL, "how many, in [0, x's dim at axis]", FG_PARAM(I64, topk.k)},
    {"axis", FG_ATTR_INT, "-1", "the axis, negative from the end", FG_NO_PARAM},
    {"largest", FG_ATTR_INT, "1", "0: the k smallest", FG_PARAM(FLAG, topk.largest)},
    {"sorted", FG_ATTR_INT, "1", "accepted for torch and ONNX; values always come best first",
     FG_PARAM(FLAG, topk.sorted)},
    A_END};
static const fg_attr_def a_topk_grad[] = {
    {"axis", FG_ATTR_INT, NULL, "the forward topk's axis, negative from the end", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_pad[] = {
    {"pads", FG_ATTR_INTS, NULL, "2 * rank, >= 0: every dim's begin, then every dim's end (ONNX)",
     FG_NO_PARAM},
    {"mode", FG_ATTR_STRING, "constant", "constant, reflect (pads < dim) or edge", FG_NO_PARAM},
    {"value", FG_ATTR_FLOAT, "0", "the fill of constant mode", FG_PARAM(F64, pad.value)},
    A_END};
static const fg_attr_def a_pad_grad[] = {
    {"pads", FG_ATTR_INTS, NULL, "the forward pad's", FG_NO_PARAM},
    {"mode", FG_ATTR_STRING, "constant", "the forward pad's", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_flatten[] = {{"axis", FG_ATTR_INT, "1",
                                         "in [-rank, rank]: [prod(dims[:axis]), prod(dims[axis:])]",
                                         FG_NO_PARAM},
                                        A_END};
static const fg_attr_def a_squeeze[] = {{"axes", FG_ATTR_INTS, "all",
                                         "dims of size 1 to drop; empty: every dim of size 1",
                                         FG_NO_PARAM},
                                        A_END};
static const fg_attr_def a_expand[] = {
    {"shape", FG_ATTR_INTS, NULL, "broadcast with x's dims both ways (ONNX Expand)", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_tile[] = {
    {"repeats", FG_ATTR_INTS, NULL, "copies along each dim, one per dim, >= 0", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_split[] = {
    {"axis", FG_ATTR_INT, "0", "the axis, negative from the end", FG_NO_PARAM},
    {"sizes", FG_ATTR_INTS, "none", "each output's length along axis; or num_outputs", FG_NO_PARAM},
    {"num_outputs", FG_ATTR_INT, "none", "parts of ceil(dim / n), the last what is left",
     FG_NO_PARAM},
    A_END};
static const fg_attr_def a_stack[] = {
    {"axis", FG_ATTR_INT, "0", "the new axis in the output, [-rank - 1, rank]", FG_NO_PARAM},
    A_END};
/* Pooling (graph/infer_pool.c): as torch.nn.functional, NCHW. */
static const fg_attr_def a_max_pool2d[] = {
    {"kernel", FG_ATTR_INTS, NULL, "window (kh, kw), >= 1", FG_NO_PARAM},
    {"strides", FG_ATTR_INTS, "kernel", "(sh, sw), >= 1", FG_NO_PARAM},
    {"pads", FG_ATTR_INTS, "0,0,0,0", "top, left, bottom, right; each <= kernel/2", FG_NO_PARAM},
    {"dilations", FG_ATTR_INTS, "1,1", "(dh, dw), >= 1", FG_NO_PARAM},
    {"ceil_mode", FG_ATTR_INT, "0", "1: round the output size up (windows start in the input)",
     FG_NO_PARAM},
    A_END};
static const fg_attr_def a_avg_pool2d[] = {
    {"kernel", FG_ATTR_INTS, NULL, "window (kh, kw), >= 1", FG_NO_PARAM},
    {"strides", FG_ATTR_INTS, "kernel", "(sh, sw), >= 1", FG_NO_PARAM},
    {"pads", FG_ATTR_INTS, "0,0,0,0", "top, left, bottom, right; each <= kernel/2", FG_NO_PARAM},
    {"ceil_mode", FG_ATTR_INT, "0", "1: round the output size up (windows start in the input)",
     FG_NO_PARAM},
    {"count_include_pad", FG_ATTR_INT, "1", "1: divide by the window incl. padding (torch)",
     FG_NO_PARAM},
    A_END};
static const fg_attr_def a_adaptive_pool[] = {
    {"output_size", FG_ATTR_INTS, NULL, "(oh, ow), >= 1", FG_NO_PARAM}, A_END};
/* Resizing (graph/infer_resize.c): ONNX Resize's nearest and linear modes
 * on the last two dims (flowgraph/types.h, fg_resize_opts). */
#define RESIZE_ATTRS                                                                               \
  {"sizes", FG_ATTR_INTS, NULL, "output (height, width), >= 1", FG_NO_PARAM},                      \
      {"scales", FG_ATTR_FLOATS, "sizes / input",                                                  \
       "coordinate scales (h, w), > 0 (ONNX's scales input)", FG_NO_PARAM},                        \
  {                                                                                                \
    "coordinate_transformation_mode", FG_ATTR_STRING, "half_pixel",                                \
        "half_pixel, pytorch_half_pixel, asymmetric or align_corners (ONNX's)", FG_NO_PARAM        \
  }
static const fg_attr_def a_resize_nearest[] = {
    RESIZE_ATTRS,
    {"nearest_mode", FG_ATTR_STRING, "round_prefer_floor",
     "round_prefer_floor, round_prefer_ceil, floor or ceil", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_resize_linear[] = {RESIZE_ATTRS, A_END};
#undef RESIZE_ATTRS
static const fg_attr_def a_norm_eps[] = {
    {"epsilon", FG_ATTR_FLOAT, "1e-05", "added to the variance, > 0", FG_PARAM(F64, norm.epsilon)},
    A_END};
static const fg_attr_def a_bn_update[] = {{"momentum", FG_ATTR_FLOAT, "0.1",
                                           "running = (1 - momentum) running + momentum batch",
                                           FG_PARAM(F64, norm.momentum)},
                                          A_END};
static const fg_attr_def a_layer_norm[] = {
    {"normalized_rank", FG_ATTR_INT, "1", "statistics over the last k axes, 1 <= k <= rank",
     FG_PARAM(I64, norm.normalized_rank)},
    {"epsilon", FG_ATTR_FLOAT, "1e-05", "added to the variance, > 0", FG_PARAM(F64, norm.epsilon)},
    A_END};
static const fg_attr_def a_layer_norm_grad[] = {{"normalized_rank", FG_ATTR_INT, "1",
                                                 "the forward's normalized_rank",
                                                 FG_PARAM(I64, norm.normalized_rank)},
                                                A_END};
static const fg_attr_def a_group_norm[] = {
    {"num_groups", FG_ATTR_INT, NULL, "groups of channels, dividing C",
     FG_PARAM(I64, norm.num_groups)},
    {"epsilon", FG_ATTR_FLOAT, "1e-05", "added to the variance, > 0", FG_PARAM(F64, norm.epsilon)},
    A_END};
static const fg_attr_def a_group_norm_grad[] = {
    {"num_groups", FG_ATTR_INT, NULL, "the forward's num_groups", FG_PARAM(I64, norm.num_groups)},
    A_END};
static const fg_attr_def a_sync_bn_grad[] = {
    {"weighted", FG_ATTR_INT, "0",
     "1: each replica's dy is of a mean over its own rows (fg_data_parallel's weighted mean)",
     FG_PARAM(FLAG, norm.weighted)},
    A_END};
/* conv2d and its gradients; conv_transpose2d adds output_padding. */
#define A_CONV_COMMON                                                                              \
  {"strides", FG_ATTR_INTS, "1,1", "(height, width), >= 1", FG_NO_PARAM},                          \
      {"pads", FG_ATTR_INTS, "0,0,0,0", "top, left, bottom, right, >= 0", FG_NO_PARAM},            \
      {"dilations", FG_ATTR_INTS, "1,1", "(height, width), >= 1", FG_NO_PARAM}, {                  \
    "groups", FG_ATTR_INT, "1", "channel groups, dividing both channel counts", FG_NO_PARAM        \
  }
static const fg_attr_def a_conv[] = {
    A_CONV_COMMON,
    {"auto_pad", FG_ATTR_STRING, "explicit",
     "explicit (pads), or same: total pad dilation*(k-1), the odd one bottom/right (stride 1)",
     FG_NO_PARAM},
    A_END};
static const fg_attr_def a_conv_transpose[] = {
    A_CONV_COMMON,
    {"output_padding", FG_ATTR_INTS, "0,0", "rows and columns added at the bottom/right, < stride",
     FG_NO_PARAM},
    A_END};
/* fused_conv2d and fused_conv2d_add: conv2d's, and the activation. */
static const fg_attr_def a_fused_conv[] = {
    A_CONV_COMMON,
    {"auto_pad", FG_ATTR_STRING, "explicit",
     "explicit (pads), or same: total pad dilation*(k-1), the odd one bottom/right (stride 1)",
     FG_NO_PARAM},
    {"activation", FG_ATTR_STRING, "none",
     "applied last: \"none\", \"relu\" or \"clip\" (min(max(y, min), max), NaN kept)", FG_NO_PARAM},
    {"min", FG_ATTR_FLOAT, NULL, "clip's lower bound (activation clip only)", FG_NO_PARAM},
    {"max", FG_ATTR_FLOAT, NULL, "clip's upper bound, >= min (activation clip only)", FG_NO_PARAM},
    A_END};
static const fg_attr_def a_fused[] = {
    {"program", FG_ATTR_STRING, NULL,
     "instructions `op(arg, ...)` separated by ';', args xI (input), tJ (earlier result) or a "
     "number; the last one's result is the output (flowgraph/op_params.h)",
     FG_NO_PARAM},
    A_END};
const fg_attr_def fg_common_attrs[] = {
    {FG_COLOCATE_ATTR, FG_ATTR_STRING, "none", "a node whose device this one takes", FG_NO_PARAM},
    A_END};

#define BINARY(e, name, flags, doc)                                                                \
  [FG_OP_##e] = {name, 2,      2,    1,    flags, fgi_infer_binary, fgi_flops_elementwise,         \
                 0,    "a, b", NULL, NULL, doc}
#define UNARY(e, name, flags, doc)                                                                 \
  [FG_OP_##                                                                                        \
      e] = {name, 1, 1, 1, flags, fgi_infer_unary, fgi_flops_elementwise, 0, "x", NULL, NULL, doc}

/* Binary arithmetic is in-place-able into input 0: the executor only shares
 * the bytes when input 0 has the output's dtype and element count (so the
 * same shape), and the kernels read element i before writing it. The *_like
 * ops take sizes from a tensor rather than an attribute, so an unknown batch
 * dimension is resolved at run time; expand_dims and reshape_like only
 * relabel input 0's bytes (VIEW). numel and group are not differentiable:
 * numel's value does not depend on x's values, and group is control. */
const fg_op_def fg_op_table[] = {
    /* name, min_inputs, max_inputs, n_outputs, flags, infer, flops, mutable_inputs,
     * inputs, attrs, parse, doc */
    [FG_OP_PLACEHOLDER] = {"placeholder", 0, 0, 1, SRC, fgi_infer_placeholder, NULL, 0, "",
                           a_placeholder, NULL, "a value fed at run time"},
    [FG_OP_CONSTANT] = {"constant", 0, 0, 1, SRC, fgi_infer_constant, NULL, 0, "", a_value, NULL,
                        "a value stored in the graph"},
    [FG_OP_VARIABLE] = {"variable", 0, 0, 1, SRC | STATE, fgi_infer_variable, NULL, 0, "",
                        a_variable, NULL,
                        "persistent state, starting at value or init; updated in place"},
    [FG_OP_FILL] = {"fill", 0, 0, 1, 0, fgi_infer_fill, NULL, 0, "", a_fill, NULL,
                    "a tensor of one value"},
    [FG_OP_RANDOM_UNIFORM] = {"random_uniform", 0, 0, 1, RAND, fgi_infer_random, NULL, 0, "",
                              a_random_uniform, fgi_parse_random,
                              "uniform in [low, high), Philox4x32-10 keyed by seed and stream"},
    [FG_OP_RANDOM_NORMAL] = {"random_normal", 0, 0, 1, RAND, fgi_infer_random, NULL, 0, "",
                             a_random_normal, fgi_parse_random,
                             "normal(mean, stddev), Box-Muller on Philox4x32-10"},
    [FG_OP_TRUNCATED_NORMAL] = {"truncated_normal", 0, 0, 1, RAND, fgi_infer_random, NULL, 0, "",
                                a_random_normal, fgi_parse_random,
                                "normal(mean, stddev), values beyond 2 stddev redrawn"},
    [FG_OP_MATMUL] = {"matmul", 2, 2, 1, DIFF, fgi_infer_matmul, fgi_flops_matmul, 0, "a, b",
                      a_matmul, NULL, "a @ b, batched over leading dims"},
    [FG_OP_RESHAPE] = {"reshape", 1, 1, 1, VIEW | DIFF, fgi_infer_reshape, NULL, 0, "x", a_shape,
                       NULL, "x's elements in a new shape"},
    [FG_OP_TRANSPOSE] = {"transpose", 1, 1, 1, DIFF, fgi_infer_transpose, NULL, 0, "x", a_perm,
                         fgi_parse_transpose, "x's dims permuted"},
    [FG_OP_CONCAT] = {"concat", 1, -1, 1, DIFF, fgi_infer_concat, NULL, 0, "x...", a_axis,
                      fgi_parse_concat, "inputs joined along axis"},
    [FG_OP_SLICE] = {"slice", 1, 1, 1, DIFF, fgi_infer_slice, NULL, 0, "x", a_slice,
                     fgi_parse_slice, "the block of x at begin of size"},
    [FG_OP_GATHER] = {"gather", 2, 2, 1, DIFF, fgi_infer_gather, NULL, 0, "params, indices", NULL,
                      NULL, "rows of params (axis 0) at integer indices"},
    [FG_OP_ONE_HOT] = {"one_hot", 1, 1, 1, 0, fgi_infer_one_hot, NULL, 0, "indices", a_one_hot,
                       NULL, "1 at each index along a new last axis of depth"},
    [FG_OP_CAST] = {"cast", 1, 1, 1, EW | DIFF, fgi_infer_cast, fgi_flops_elementwise, 0, "x",
                    a_dtype, NULL, "x converted to dtype"},
    BINARY(ADD, "add", EW | INPL | DIFF, "a + b, broadcasting"),
    BINARY(SUB, "sub", EW | INPL | DIFF, "a - b, broadcasting"),
    BINARY(MUL, "mul", EW | INPL | DIFF, "a * b, broadcasting"),
    BINARY(DIV, "div", EW | INPL | DIFF, "a / b, broadcasting"),
    BINARY(POW, "pow", EW | INPL | DIFF, "a ** b, broadcasting"),
    BINARY(MAXIMUM, "maximum", EW | INPL | DIFF, "max(a, b), broadcasting"),
    BINARY(MINIMUM, "minimum", EW | INPL | DIFF, "min(a, b), broadcasting"),
    BINARY(EQUAL, "equal", EW | KEYIN, "a == b as bool"),
    BINARY(GREATER, "greater", EW | KEYIN, "a > b as bool"),
    BINARY(LESS, "less", EW | KEYIN, "a < b as bool"),
    [FG_OP_SELECT] = {"select", 3, 3, 1, EW | DIFF, fgi_infer_select, fgi_flops_elementwise, 0,
                      "cond, a, b", NULL, NULL, "cond ? a : b, broadcasting"},
    UNARY(NEG, "neg", EW | INPL | DIFF, "-x"),
    UNARY(EXP, "exp", EW | INPL | DIFF, "e^x"),
    UNARY(LOG, "log", EW | INPL | DIFF, "natural logarithm"),
    UNARY(SQRT, "sqrt", EW | INPL | DIFF, "square root"),
    UNARY(RSQRT, "rsqrt", EW | INPL | DIFF, "1 / sqrt(x)"),
    UNARY(ABS, "abs", EW | INPL | DIFF, "|x|"),
    UNARY(TANH, "tanh", EW | INPL | DIFF, "hyperbolic tangent"),
    UNARY(SIGMOID, "sigmoid", EW | INPL | DIFF, "1 / (1 + e^-x)"),
    UNARY(RELU, "relu", EW | INPL | DIFF, "max(x, 0)"),
    [FG_OP_LEAKY_RELU] = {"leaky_relu", 1, 1, 1, EW | INPL | DIFF, fgi_infer_unary,
                          fgi_flops_elementwise, 0, "x", a_leaky_relu, NULL,
                          "x > 0 ? x : alpha * x"},
    [FG_OP_ELU] = {"elu", 1, 1, 1, EW | INPL | DIFF, fgi_infer_unary, fgi_flops_elementwise, 0, "x",
                   a_elu, NULL, "x > 0 ? x : alpha * (e^x - 1)"},
    [FG_OP_SOFTPLUS] = {"softplus", 1, 1, 1, EW | INPL | DIFF, fgi_infer_unary,
                        fgi_flops_elementwise, 0, "x", a_softplus, NULL,
                        "beta x > threshold ? x : log1p(e^(beta x)) / beta"},
    UNARY(SELU, "selu", EW | INPL | DIFF, "scale * elu(x, alpha), torch's fixed alpha and scale"),
    UNARY(SILU, "silu", EW | INPL | DIFF, "x * sigmoid(x) (swish)"),
    UNARY(HARD_SIGMOID, "hard_sigmoid", EW | INPL | DIFF, "min(max(x + 3, 0), 6) / 6"),
    UNARY(HARD_SWISH, "hard_swish", EW | INPL | DIFF, "x * min(max(x + 3, 0), 6) / 6"),
    UNARY(MISH, "mish", EW | INPL | DIFF, "x * tanh(log1p(e^x))"),
    UNARY(SIGN, "sign", EW | INPL | DIFF, "-1, 0 or 1 (0 for NaN); zero gradient"),
    UNARY(RECIPROCAL, "reciprocal", EW | INPL | DIFF, "1 / x"),
    UNARY(FLOOR, "floor", EW | INPL | DIFF, "largest integer <= x; zero gradient"),
    UNARY(CEIL, "ceil", EW | INPL | DIFF, "smallest integer >= x; zero gradient"),
    UNARY(ROUND, "round", EW | INPL | DIFF, "nearest integer, halves to even; zero gradient"),
    [FG_OP_CLIP] = {"clip", 1, 1, 1, EW | INPL | DIFF, fgi_infer_clip, fgi_flops_elementwise, 0,
                    "x", a_clip, NULL, "min(max(x, min), max), NaN kept (torch.clamp)"},
    UNARY(GELU, "gelu", EW | INPL | DIFF, "x * Phi(x), the exact (erf) form"),
    UNARY(GELU_TANH, "gelu_tanh", EW | INPL | DIFF,
          "x * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2, the tanh approximation"),
    UNARY(IDENTITY, "identity", EW | INPL | DIFF, "x"),
    UNARY(STOP_GRADIENT, "stop_gradient", EW | INPL, "x, with no gradient flowing back"),
    UNARY(ZEROS_LIKE, "zeros_like", EW | INPL, "zeros of x's dtype and shape"),
    UNARY(ONES_LIKE, "ones_like", EW | INPL, "ones of x's dtype and shape"),
    [FG_OP_REDUCE_SUM] = {"reduce_sum", 1, 1, 1, DIFF, fgi_infer_reduce, fgi_flops_reduce, 0, "x",
                          a_reduce, fgi_parse_reduce, "sum over axes"},
    [FG_OP_REDUCE_MEAN] = {"reduce_mean", 1, 1, 1, DIFF, fgi_infer_reduce, fgi_flops_reduce, 0, "x",
                           a_reduce, fgi_parse_reduce, "mean over axes"},
    [FG_OP_REDUCE_MAX] = {"reduce_max", 1, 1, 1, DIFF, fgi_infer_reduce, fgi_flops_reduce, 0, "x",
                          a_reduce, fgi_parse_reduce, "maximum over axes"},
    [FG_OP_ARGMAX] = {"argmax", 1, 1, 1, KEYIN, fgi_infer_argmax, fgi_flops_reduce, 0, "x", a_axis,
                      fgi_parse_argmax, "i64 index of the first maximum along axis"},
    [FG_OP_SOFTMAX] = {"softmax", 1, 1, 1, DIFF, fgi_infer_softmax, fgi_flops_softmax, 0, "x",
                       a_axis, fgi_parse_softmax, "exp(x) / sum(exp(x)) along axis"},
    [FG_OP_LOG_SOFTMAX] = {"log_softmax", 1, 1, 1, DIFF, fgi_infer_softmax, fgi_flops_softmax, 0,
                           "x", a_axis, fgi_parse_softmax, "log(softmax(x)) along axis"},
    [FG_OP_SOFTMAX_CROSS_ENTROPY] = {"softmax_cross_entropy", 2, 2, 1, DIFF,
                                     fgi_infer_softmax_cross_entropy,
                                     fgi_flops_softmax_cross_entropy, 0, "logits, labels", NULL,
                                     NULL, "per-row cross-entropy of softmax(logits) and labels"},
    [FG_OP_ASSIGN] = {"assign", 2, 2, 1, STATE, fgi_infer_assign, NULL, 1u, "var, value", NULL,
                      NULL, "var = value, in place"},
    /* Ops that gradients and optimizers are built from. */
    UNARY(ERF, "erf", EW | INPL | DIFF, "the error function"),
    [FG_OP_EXPAND_DIMS] = {"expand_dims", 1, 1, 1, VIEW | DIFF, fgi_infer_expand_dims, NULL, 0, "x",
                           a_expand_dims, NULL, "x with size-1 dims inserted at axes"},
    [FG_OP_RESHAPE_LIKE] = {"reshape_like", 2, 2, 1, VIEW | DIFF, fgi_infer_reshape_like, NULL, 0,
                            "x, like", NULL, NULL, "x's elements in like's runtime shape"},
    [FG_OP_BROADCAST_LIKE] = {"broadcast_like", 2, 2, 1, DIFF, fgi_infer_broadcast_like, NULL, 0,
                              "x, like", NULL, NULL, "x broadcast to like's runtime shape"},
    /* A view when nothing is summed (same element count): see plan_memory.c. */
    [FG_OP_SUM_TO] = {"sum_to", 2, 2, 1, DIFF, fgi_infer_sum_to, fgi_flops_sum_to, 0, "x, like",
                      NULL, NULL, "x summed down to like's shape (undoes broadcasting)"},
    [FG_OP_NUMEL] = {"numel", 1, 1, 1, 0, fgi_infer_numel, NULL, 0, "x", a_dtype, NULL,
                     "scalar: x's element count at run time"},
    [FG_OP_SLICE_GRAD] = {"slice_grad", 2, 2, 1, DIFF, fgi_infer_slice_grad, NULL, 0, "dy, like",
                          a_slice, fgi_parse_slice, "zeros of like's shape with dy at begin"},
    [FG_OP_GATHER_GRAD] = {"gather_grad", 3, 3, 1, DIFF, fgi_infer_gather_grad,
                           fgi_flops_gather_grad, 0, "dy, indices, like", NULL, NULL,
                           "zeros of like's shape with dy's rows added at indices"},
    /* Stateful so that pruning never drops it: it exists for its inputs. */
    [FG_OP_GROUP] = {"group", 0, -1, 1, STATE, fgi_infer_group, NULL, 0, "ctrl...", NULL, NULL,
                     "runs after all its inputs; i32 scalar 0"},
    /* The optimizer updates write their variable inputs in place (bits of
     * mutable_inputs); inputs past the fixed ones are control inputs. */
    [FG_OP_APPLY_SGD] = {"apply_sgd", 3, -1, 1, STATE, fgi_infer_apply, fgi_flops_apply, 0x1u,
                         "var, grad, lr, ctrl...", NULL, NULL, "var -= lr * grad"},
    [FG_OP_APPLY_MOMENTUM] = {"apply_momentum", 4, -1, 1, STATE, fgi_infer_apply, fgi_flops_apply,
                              0x3u, "var, buf, grad, lr, ctrl...", a_momentum, NULL,
                              "torch.optim.SGD with momentum"},
    [FG_OP_APPLY_ADAM] = {"apply_adam", 6, -1, 1, STATE, fgi_infer_apply, fgi_flops_apply, 0x7u,
                          "var, m, v, grad, lr, step, ctrl...", a_adam, NULL,
                          "torch.optim.Adam / AdamW; step is 1-based"},
    /* Data parallelism (graph/infer_dist.c). all_reduce is stateful: it
     * synchronises with other ranks, so no rank may prune it alone. Neither
     * is differentiable: they are inserted after the gradients exist. */
    [FG_OP_ALL_REDUCE] = {"all_reduce", 1, -1, 1, STATE | INPL | COLL, fgi_infer_all_reduce, NULL,
                          0, "x, [rows, sums,] ctrl...", a_all_reduce, NULL,
                          "x summed (or averaged) over the device's communicator"},
    [FG_OP_SHARD] = {"shard", 1, 1, 1, 0, fgi_infer_shard, NULL, 0, "x", a_shard, NULL,
                     "this replica's rows of x (axis 0)"},
    [FG_OP_AFTER] = {"after", 1, -1, 1, VIEW, fgi_infer_after, NULL, 0, "x, ctrl...", NULL, NULL,
                     "x, once every ctrl input is computed"},
    /* The fused updates of fg_data_parallel (graph/infer_optim.c): updates
     * (var in place) and collectives at once. */
    [FG_OP_ALL_REDUCE_APPLY_SGD] = {"all_reduce_apply_sgd", 3, -1, 1, STATE | COLL,
                                    fgi_infer_collective_sgd, fgi_flops_apply, 0x1u,
                                    "var, grad, lr, [rows, sums,] ctrl...", a_all_reduce, NULL,
                                    "var -= lr * all_reduce(grad), one collective"},
    [FG_OP_SUFFICIENT_FACTOR_APPLY_SGD] =
        {"sufficient_factor_apply_sgd", 4, -1, 1, STATE | COLL, fgi_infer_collective_sgd,
         fgi_flops_apply, 0x1u, "var, a, lr, b, [rows, sums,] ctrl...", a_all_reduce, NULL,
         "var -= lr * all_reduce(a^T b), the gradient's factors never multiplied out"},
    /* More reductions (graph/infer_reduce2.c). argmin, like argmax, gives
     * i64 whatever its input (KEYIN). topk has two outputs, the values and
     * their i64 indices; only the values carry a gradient (topk_grad). */
    [FG_OP_REDUCE_MIN] = {"reduce_min", 1, 1, 1, DIFF, fgi_infer_reduce, fgi_flops_reduce, 0, "x",
                          a_reduce, fgi_parse_reduce, "minimum over axes"},
    [FG_OP_REDUCE_PROD] = {"reduce_prod", 1, 1, 1, DIFF, fgi_infer_reduce, fgi_flops_reduce, 0, "x",
                           a_reduce, fgi_parse_reduce, "product over axes"},
    [FG_OP_ARGMIN] = {"argmin", 1, 1, 1, KEYIN, fgi_infer_argmax, fgi_flops_reduce, 0, "x", a_axis,
                      fgi_parse_argmax, "i64 index of the first minimum along axis"},
    [FG_OP_LOGSUMEXP] = {"logsumexp", 1, 1, 1, DIFF, fgi_infer_logsumexp, fgi_flops_logsumexp, 0,
                         "x", a_reduce, fgi_parse_reduce,
                         "log(sum(exp(x))) over axes, shifted by the maximum"},
    [FG_OP_CUMSUM] = {"cumsum", 1, 1, 1, DIFF, fgi_infer_cumsum, fgi_flops_reduce, 0, "x", a_cumsum,
                      fgi_parse_cumsum, "running sum along axis (ONNX CumSum)"},
    [FG_OP_TOPK] = {"topk", 1, 1, 2, DIFF, fgi_infer_topk, NULL, 0, "x", a_topk, fgi_parse_topk,
                    "the k largest (or smallest) along axis and their i64 indices"},
    [FG_OP_TOPK_GRAD] = {"topk_grad", 3, 3, 1, DIFF, fgi_infer_topk_grad, NULL, 0,
                         "dy, indices, like", a_topk_grad, fgi_parse_topk_grad,
                         "zeros of like's shape with dy added at indices along axis"},
    /* Shape ops of CNNs and ONNX models (graph/infer_shape_ops.c, which says
     * where ONNX's meaning was chosen over PyTorch's). flatten and squeeze
     * only relabel x's bytes (VIEW); unsqueeze is expand_dims. split's output
     * count comes from its attributes (n_outputs -1). pad_grad and tile_grad
     * add dy's elements back onto like's shape. */
    [FG_OP_PAD] = {"pad", 1, 1, 1, DIFF, fgi_infer_pad, NULL, 0, "x", a_pad, fgi_parse_pad,
                   "x with pads added before and after each dim"},
    [FG_OP_PAD_GRAD] = {"pad_grad", 2, 2, 1, DIFF, fgi_infer_pad_grad, NULL, 0, "dy, like",
                        a_pad_grad, fgi_parse_pad,
                        "the sum of dy's elements onto the x of pad(x) = dy"},
    [FG_OP_FLATTEN] = {"flatten", 1, 1, 1, VIEW | DIFF, fgi_infer_flatten, NULL, 0, "x", a_flatten,
                       NULL, "x as 2-D [prod(dims[:axis]), prod(dims[axis:])] (ONNX)"},
    [FG_OP_SQUEEZE] = {"squeeze", 1, 1, 1, VIEW | DIFF, fgi_infer_squeeze, NULL, 0, "x", a_squeeze,
                       NULL, "x without the size-1 dims at axes"},
    [FG_OP_EXPAND] = {"expand", 1, 1, 1, DIFF, fgi_infer_expand, NULL, 0, "x", a_expand, NULL,
                      "x broadcast to shape (ONNX Expand)"},
    [FG_OP_TILE] = {"tile", 1, 1, 1, DIFF, fgi_infer_tile, NULL, 0, "x", a_tile, fgi_parse_tile,
                    "x repeated along each dim"},
    [FG_OP_TILE_GRAD] = {"tile_grad", 2, 2, 1, DIFF, fgi_infer_tile_grad, NULL, 0, "dy, like",
                         a_tile, fgi_parse_tile, "the sum of dy's tiles, in like's shape"},
    [FG_OP_SPLIT] = {"split", 1, 1, -1, DIFF, fgi_infer_split, NULL, 0, "x", a_split,
                     fgi_parse_split, "consecutive parts of x along axis, one per output",
                     fgi_count_split},
    [FG_OP_STACK] = {"stack", 1, -1, 1, DIFF, fgi_infer_stack, NULL, 0, "x...", a_stack,
                     fgi_parse_stack, "inputs of one shape joined along a new axis"},
    /* Pooling over NCHW planes (graph/infer_pool.c). The gradients take x
     * for its shape (and max_pool2d_grad for its values: the argmax is
     * recomputed, the first maximum in window order taking the gradient,
     * as torch's CPU kernel). */
    [FG_OP_MAX_POOL2D] = {"max_pool2d", 1, 1, 1, DIFF, fgi_infer_pool, fgi_flops_pool, 0, "x",
                          a_max_pool2d, fgi_parse_pool2d, "maximum over each window (NaN wins)"},
    [FG_OP_AVG_POOL2D] = {"avg_pool2d", 1, 1, 1, DIFF, fgi_infer_pool, fgi_flops_pool, 0, "x",
                          a_avg_pool2d, fgi_parse_pool2d, "mean over each window"},
    [FG_OP_GLOBAL_AVG_POOL] = {"global_avg_pool", 1, 1, 1, DIFF, fgi_infer_pool, fgi_flops_pool, 0,
                               "x", NULL, NULL, "[N, C, 1, 1]: the mean of each plane"},
    [FG_OP_GLOBAL_MAX_POOL] = {"global_max_pool", 1, 1, 1, DIFF, fgi_infer_pool, fgi_flops_pool, 0,
                               "x", NULL, NULL, "[N, C, 1, 1]: the maximum of each plane"},
    [FG_OP_ADAPTIVE_AVG_POOL2D] = {"adaptive_avg_pool2d", 1, 1, 1, DIFF, fgi_infer_pool,
                                   fgi_flops_pool, 0, "x", a_adaptive_pool, NULL,
                                   "mean over rows [i*H/OH, ceil((i+1)*H/OH)) and columns alike"},
    [FG_OP_MAX_POOL2D_GRAD] = {"max_pool2d_grad", 2, 2, 1, DIFF, fgi_infer_pool_grad, NULL, 0,
                               "dy, x", a_max_pool2d, fgi_parse_pool2d,
                               "dy added at each window's first maximum in x"},
    [FG_OP_AVG_POOL2D_GRAD] = {"avg_pool2d_grad", 2, 2, 1, DIFF, fgi_infer_pool_grad, NULL, 0,
                               "dy, x", a_avg_pool2d, fgi_parse_pool2d,
                               "dy spread over each window, divided as avg_pool2d"},
    [FG_OP_ADAPTIVE_AVG_POOL2D_GRAD] = {"adaptive_avg_pool2d_grad", 2, 2, 1, DIFF,
                                        fgi_infer_pool_grad, NULL, 0, "dy, x", NULL, NULL,
                                        "dy spread over adaptive windows; dy's H, W give OH, OW"},
    [FG_OP_GLOBAL_MAX_POOL_GRAD] = {"global_max_pool_grad", 2, 2, 1, DIFF, fgi_infer_pool_grad,
                                    NULL, 0, "dy, x", NULL, NULL,
                                    "dy at each plane's first maximum in x"},
    /* Resizing the last two dims (graph/infer_resize.c). The gradients
     * take x for its shape only; each is linear in dy, with the forward op
     * as its adjoint. */
    [FG_OP_RESIZE_NEAREST] = {"resize_nearest", 1, 1, 1, DIFF, fgi_infer_resize, fgi_flops_resize,
                              0, "x", a_resize_nearest, fgi_parse_resize,
                              "each output takes its nearest input (ONNX Resize, nearest)"},
    [FG_OP_RESIZE_LINEAR] = {"resize_linear", 1, 1, 1, DIFF, fgi_infer_resize, fgi_flops_resize, 0,
                             "x", a_resize_linear, fgi_parse_resize,
                             "bilinear blend of the 4 nearest inputs (ONNX Resize, linear)"},
    [FG_OP_RESIZE_NEAREST_GRAD] = {"resize_nearest_grad", 2, 2, 1, DIFF, fgi_infer_resize_grad,
                                   fgi_flops_resize, 0, "dy, x", a_resize_nearest, fgi_parse_resize,
                                   "dy summed into the inputs each output took"},
    [FG_OP_RESIZE_LINEAR_GRAD] = {"resize_linear_grad", 2, 2, 1, DIFF, fgi_infer_resize_grad,
                                  fgi_flops_resize, 0, "dy, x", a_resize_linear, fgi_parse_resize,
                                  "dy spread over the 4 inputs by the forward's weights"},
    /* Normalization (graph/infer_norm.c, kernels/cpu/norm.c). Outputs past
     * y are what the gradient and the running-statistics update read: the
     * mean and 1 / sqrt(var + epsilon) that normalised x, and for
     * batch_norm the batch's unbiased variance (running_var in inference).
     * They carry no gradient. batch_norm's mode is its bool input, so one
     * saved graph serves training and inference; its running statistics
     * change only through batch_norm_update_stats (in place, mutable
     * inputs 0 and 1), which fg_batch_norm makes and fg_minimize runs. The
     * *_grad ops are differentiable only in name: their own gradient
     * refuses (FG_UNIMPLEMENTED) rather than pass a silent zero. */
    [FG_OP_BATCH_NORM] = {"batch_norm", 6, 6, 4, DIFF, fgi_infer_batch_norm, fgi_flops_norm, 0,
                          "x, scale, shift, running_mean, running_var, training", a_norm_eps, NULL,
                          "per channel (axis 1): (x - mean) / sqrt(var + epsilon) * scale + shift; "
                          "outputs y, mean, inv_std, var"},
    [FG_OP_BATCH_NORM_UPDATE_STATS] = {"batch_norm_update_stats", 5, 5, 1, STATE,
                                       fgi_infer_batch_norm_update, NULL, 0x3u,
                                       "running_mean, running_var, mean, var, training",
                                       a_bn_update, NULL,
                                       "when training: running = (1 - momentum) running + "
                                       "momentum batch, in place; else nothing"},
    [FG_OP_BATCH_NORM_GRAD] = {"batch_norm_grad", 6, 6, 3, DIFF, fgi_infer_batch_norm_grad,
                               fgi_flops_norm, 0, "dy, x, scale, mean, inv_std, training", NULL,
                               NULL, "batch_norm's dx, dscale, dshift"},
    [FG_OP_LAYER_NORM] = {"layer_norm", 3, 3, 3, DIFF, fgi_infer_layer_norm, fgi_flops_norm, 0,
                          "x, scale, shift", a_layer_norm, NULL,
                          "normalised over the last normalized_rank axes; outputs y, mean, "
                          "inv_std"},
    [FG_OP_LAYER_NORM_GRAD] = {"layer_norm_grad", 5, 5, 3, DIFF, fgi_infer_layer_norm_grad,
                               fgi_flops_norm, 0, "dy, x, scale, mean, inv_std", a_layer_norm_grad,
                               NULL, "layer_norm's dx, dscale, dshift"},
    [FG_OP_GROUP_NORM] = {"group_norm", 3, 3, 3, DIFF, fgi_infer_group_norm, fgi_flops_norm, 0,
                          "x, scale, shift", a_group_norm, NULL,
                          "normalised per sample and group of C / num_groups channels; outputs "
                          "y, mean, inv_std"},
    [FG_OP_GROUP_NORM_GRAD] = {"group_norm_grad", 5, 5, 3, DIFF, fgi_infer_group_norm_grad,
                               fgi_flops_norm, 0, "dy, x, scale, mean, inv_std", a_group_norm_grad,
                               NULL, "group_norm's (and instance_norm's) dx, dscale, dshift"},
    [FG_OP_INSTANCE_NORM] = {"instance_norm", 3, 3, 3, DIFF, fgi_infer_group_norm, fgi_flops_norm,
                             0, "x, scale, shift", a_norm_eps, fgi_parse_instance_norm,
                             "normalised per sample and channel (group_norm with C groups); "
                             "outputs y, mean, inv_std"},
    /* Training mode and dropout (graph/infer_dropout.c). training_flag has
     * a kernel that writes the run's mode (fg_kctx.run_training), so it is
     * no source; stateful so that nothing merges or folds it. */
    [FG_OP_TRAINING_FLAG] = {"training_flag", 0, 0, 1, STATE, fgi_infer_training_flag, NULL, 0, "",
                             NULL, NULL,
                             "bool scalar: fed, or true in a run that applies an optimizer update"},
    [FG_OP_DROPOUT] = {"dropout", 2, 2, 1, RAND | DIFF, fgi_infer_dropout, fgi_flops_elementwise, 0,
                       "x, training", a_dropout, fgi_parse_dropout,
                       "training ? x * mask / (1 - p) : x, mask keyed by seed, stream and step"},
    [FG_OP_DROPOUT_GRAD] = {"dropout_grad", 2, 2, 1, RAND | DIFF, fgi_infer_dropout,
                            fgi_flops_elementwise, 0, "dy, training", a_dropout, fgi_parse_dropout,
                            "dropout's gradient: dy through the forward's mask, recomputed"},
    /* Convolution (graph/infer_conv.c). The gradient ops take the shape
     * they produce from an input (like: the forward x or w), as slice_grad. */
    [FG_OP_CONV2D] = {"conv2d", 2, 3, 1, DIFF, fgi_infer_conv, fgi_flops_conv, 0, "x, w, [b]",
                      a_conv, fgi_parse_conv, "2-D convolution, NCHW; w [O, C/groups, kH, kW]"},
    [FG_OP_CONV2D_GRAD_INPUT] = {"conv2d_grad_input", 3, 3, 1, DIFF, fgi_infer_conv, fgi_flops_conv,
                                 0, "dy, w, like", a_conv, fgi_parse_conv,
                                 "conv2d's gradient for x (shaped like like)"},
    [FG_OP_CONV2D_GRAD_WEIGHT] = {"conv2d_grad_weight", 3, 3, 1, DIFF, fgi_infer_conv,
                                  fgi_flops_conv, 0, "x, dy, like", a_conv, fgi_parse_conv,
                                  "conv2d's gradient for w (shaped like like)"},
    [FG_OP_CONV_TRANSPOSE2D] = {"conv_transpose2d", 2, 3, 1, DIFF, fgi_infer_conv, fgi_flops_conv,
                                0, "x, w, [b]", a_conv_transpose, fgi_parse_conv,
                                "transposed 2-D convolution, NCHW; w [C, O/groups, kH, kW]"},
    /* batch_norm with statistics over every replica of the communicator the
     * executor gives the node's device (torch.nn.SyncBatchNorm): collectives,
     * so every rank runs them in node order (kernels/cpu/norm_sync.c). A
     * group of one is batch_norm. fg_data_parallel's sync_batch_norm option
     * makes them from batch_norm and batch_norm_grad. */
    [FG_OP_SYNC_BATCH_NORM] = {"sync_batch_norm", 6, 6, 4, DIFF | COLL, fgi_infer_batch_norm,
                               fgi_flops_norm, 0,
                               "x, scale, shift, running_mean, running_var, training", a_norm_eps,
                               NULL,
                               "batch_norm with the mean and variance of every replica's x "
                               "(all-reduced sums); outputs y, mean, inv_std, var"},
    [FG_OP_SYNC_BATCH_NORM_GRAD] = {"sync_batch_norm_grad", 6, 6, 3, DIFF | COLL,
                                    fgi_infer_batch_norm_grad, fgi_flops_norm, 0,
                                    "dy, x, scale, mean, inv_std, training", a_sync_bn_grad, NULL,
                                    "sync_batch_norm's dx (all-reduced sums of dy and dy xhat), "
                                    "and this replica's dscale, dshift"},
    /* Logic on bool (graph/infer_logical.c), for ONNX's Not, And, Or and
     * Xor: bool in, bool out, so no gradient flows through them. */
    [FG_OP_LOGICAL_NOT] = {"logical_not", 1, 1, 1, EW | INPL, fgi_infer_logical,
                           fgi_flops_elementwise, 0, "x", NULL, NULL, "!x, bool"},
    [FG_OP_LOGICAL_AND] = {"logical_and", 2, 2, 1, EW | INPL, fgi_infer_logical,
                           fgi_flops_elementwise, 0, "a, b", NULL, NULL,
                           "a && b, bool, broadcasting"},
    [FG_OP_LOGICAL_OR] = {"logical_or", 2, 2, 1, EW | INPL, fgi_infer_logical,
                          fgi_flops_elementwise, 0, "a, b", NULL, NULL,
                          "a || b, bool, broadcasting"},
    [FG_OP_SOFTMAX_CROSS_ENTROPY_GRAD] =
        {"softmax_cross_entropy_grad", 3, 3, 1, 0,
         fgi_infer_softmax_cross_entropy_grad, fgi_flops_softmax_cross_entropy, 0,
         "logits, labels, dy", NULL, NULL,
         "(softmax(logits) - one_hot(labels)) * dy / N: the "
         "gradient of softmax_cross_entropy in one pass"},
    /* The epilogue pass's node (executor/passes/epilogue.c; graph/
     * infer_fused_matmul.c): matmul, bias add and activation in one
     * kernel. Made after autodiff, so it has no gradient. */
    [FG_OP_FUSED_MATMUL] = {"fused_matmul", 3, 3, 1, 0, fgi_infer_fused_matmul,
                            fgi_flops_fused_matmul, 0, "a, b, bias", a_fused_matmul,
                            fgi_parse_fused_matmul,
                            "act(a @ b + bias), bias [N] added to every row, as matmul then add "
                            "then the activation"},
    /* Element-wise fusion (graph/infer_fused.c): what the fuse pass makes of
     * a group of element-wise nodes. No gradient: passes run after autodiff.
     * In place like the binary ops (when input 0 has the output's bytes):
     * each block's inputs are read before its output is written. */
    [FG_OP_FUSED_ELEMENTWISE] = {"fused_elementwise", 1, FG_FUSED_MAX_INPUTS, 1, EW | INPL,
                                 fgi_infer_fused, fgi_flops_fused, 0, "x...", a_fused,
                                 fgi_parse_fused,
                                 "element-wise ops run as one program per block of elements, "
                                 "inputs broadcast"},
    /* Multi-tensor updates (graph/infer_optim.c): what the multi_update pass
     * makes of a step's updates of one rule. Lists of n tensors (attribute
     * n), the first mutable_lists of them written in place; output 0 is
     * variable 0 (mutable_inputs bit 0). Inputs after the lists and the
     * scalars are control inputs. */
    [FG_OP_MULTI_APPLY_SGD] = {"multi_apply_sgd", 3, -1, 1, STATE, fgi_infer_multi_apply,
                               fgi_flops_multi_apply, 0x1u, "var[n], grad[n], lr, ctrl...",
                               a_multi_sgd, NULL, "apply_sgd of n variables in one kernel", NULL,
                               1},
    [FG_OP_MULTI_APPLY_MOMENTUM] = {"multi_apply_momentum", 4, -1, 1, STATE, fgi_infer_multi_apply,
                                    fgi_flops_multi_apply, 0x1u,
                                    "var[n], buf[n], grad[n], lr, ctrl...", a_multi_momentum, NULL,
                                    "apply_momentum of n variables in one kernel", NULL, 2},
    [FG_OP_MULTI_APPLY_ADAM] = {"multi_apply_adam", 6, -1, 1, STATE, fgi_infer_multi_apply,
                                fgi_flops_multi_apply, 0x1u,
                                "var[n], m[n], v[n], grad[n], lr, step, ctrl...", a_multi_adam,
                                NULL, "apply_adam of n variables in one kernel", NULL, 3},
    /* The conv_epilogue pass's nodes (executor/passes/epilogue_conv.c;
     * graph/infer_fused_conv.c): a convolution, its residual add and its
     * activation in one kernel. Made after autodiff: no gradient. */
    [FG_OP_FUSED_CONV2D] = {"fused_conv2d", 2, 3, 1, 0, fgi_infer_fused_conv, fgi_flops_fused_conv,
                            0, "x, w, [b]", a_fused_conv, fgi_parse_fused_conv,
                            "act(conv2d(x, w, b)), as conv2d then the activation"},
    [FG_OP_FUSED_CONV2D_ADD] = {"fused_conv2d_add", 3, 4, 1, 0, fgi_infer_fused_conv,
                                fgi_flops_fused_conv, 0, "x, w, z, [b]", a_fused_conv,
                                fgi_parse_fused_conv,
                                "act(conv2d(x, w, b) + z), z shaped like the convolution's output: "
                                "conv2d, then add, then the activation"},
    /* The grad_epilogue pass's nodes (executor/passes/epilogue_grad.c;
     * graph/infer_matmul_grad.c). Made after autodiff: no gradient. The
     * relu gradient's transposes are matmul's, parsed into its member. */
    [FG_OP_FUSED_MATMUL_RELU_GRAD] =
        {"fused_matmul_relu_grad", 3, 3, 1, 0, fgi_infer_fused_matmul_relu_grad,
         fgi_flops_fused_matmul_relu_grad, 0, "a, b, y", a_matmul, NULL,
         "a @ b where y > 0, else 0 (y of the product's shape): "
         "relu's gradient of a matmul's product, as "
         "select(greater(y, 0), matmul, 0)"},
    [FG_OP_MATMUL_BIAS_GRAD] = {"matmul_bias_grad", 2, 2, 2, 0, fgi_infer_matmul_bias_grad,
                                fgi_flops_matmul_bias_grad, 0, "a, dz", NULL, NULL,
                                "dw = a^T @ dz and db = the sum of dz's rows (a [R, K], dz [R, "
                                "N]): a dense layer's weight and bias gradients, as "
                                "matmul(a, dz, transpose_a) and sum_to(dz, [N])"},
    /* The update_epilogue pass's node (executor/passes/epilogue_update.c;
     * graph/infer_optim.c): apply_sgd of a weight gradient made in the
     * product's GEMM. Inputs in sufficient_factor_apply_sgd's order. */
    [FG_OP_MATMUL_APPLY_SGD] = {"matmul_apply_sgd", 4, -1, 1, STATE, fgi_infer_matmul_apply_sgd,
                                fgi_flops_matmul_apply_sgd, 0x1u, "var, a, lr, b, ctrl...", NULL,
                                NULL,
                                "var -= lr * a^T @ b (a [R, M], b [R, N], var [M, N]): apply_sgd "
                                "of the weight gradient matmul(a, b, transpose_a), added into var "
                                "by the product's GEMM"},
    /* The xent_grad pass's node when the loss and its gradient are both in
     * the plan (executor/passes/xent_grad.c; graph/infer_nn.c), as TF's
     * SoftmaxCrossEntropyWithLogits: both outputs always. No gradient. */
    [FG_OP_SOFTMAX_CROSS_ENTROPY_AND_GRAD] =
        {"softmax_cross_entropy_and_grad", 2, 2, 2, 0, fgi_infer_softmax_cross_entropy_and_grad,
         fgi_flops_softmax_cross_entropy_and_grad, 0, "logits, labels", NULL, NULL,
         "loss = softmax_cross_entropy(logits, labels) and its gradient in the logits, "
         "(softmax(logits) - one_hot(labels)) / N, in one pass"},
    /* The transpose_matmul pass's node (executor/passes/transpose_matmul.c;
     * graph/infer_permuted_matmul.c): the transposes around a matmul read
     * and written in place as strided matrices. Made after autodiff: no
     * gradient. */
    [FG_OP_PERMUTED_MATMUL] = {"permuted_matmul", 2, 2, 1, 0, fgi_infer_permuted_matmul,
                               fgi_flops_permuted_matmul, 0, "a, b", a_permuted_matmul,
                               fgi_parse_permuted_matmul,
                               "transpose(transpose(a, perm_a) @ transpose(b, perm_b), perm_out), "
                               "as the transposes and matmul, without moving a or b"},
};

_Static_assert(sizeof fg_op_table / sizeof fg_op_table[0] == FG_OP_COUNT,
               "fg_op_table needs exactly one row per op in FG_OPS");

/* Names straight from FG_OPS, so the public name of op i never depends on
 * the table rows being right; the op-table test compares the two. */
static const char *const op_names[] = {
#define FG_OP_NAME(e, s) s,
    FG_OPS(FG_OP_NAME)
#undef FG_OP_NAME
};

_Static_assert(sizeof op_names / sizeof op_names[0] == FG_OP_COUNT, "FG_OPS and FG_OP_COUNT");

int fg_op_lookup(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < FG_OP_COUNT; i++)
    if (strcmp(op_names[i], name) == 0) return i;
  return -1;
}

int fg_num_ops(void) { return FG_OP_COUNT; }

const char *fg_op_name(int i) { return (i >= 0 && i < FG_OP_COUNT) ? op_names[i] : NULL; }

const fg_attr_def *fg_op_attr(int op, const char *name) {
  if (op < 0 || op >= FG_OP_COUNT || !name) return NULL;
  for (const fg_attr_def *a = fg_op_table[op].attrs; a && a->name; a++)
    if (strcmp(a->name, name) == 0) return a;
  for (const fg_attr_def *a = fg_common_attrs; a->name; a++)
    if (strcmp(a->name, name) == 0) return a;
  return NULL;
}

/* "transpose_a (int, default 0), transpose_b (int, default 0)" into buf. */
static const char *accepted_list(int op, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (const fg_attr_def *a = fg_op_table[op].attrs; a && a->name && used < size; a++) {
    int w = snprintf(buf + used, size - used, "%s%s (%s, %s%s)", used ? ", " : "", a->name,
                     fg_attr_type_name(a->type), a->dflt ? "default " : "required",
                     a->dflt ? a->dflt : "");
    if (w < 0) break;
    used += (size_t)w;
  }
  if (!buf[0]) snprintf(buf, size, "none");
  return buf;
}

int fg_op_check_attrs(int op, const char *name, const struct fg_attrs *attrs, fg_status *st) {
  if (!attrs) return 0;
  const char *opname = fg_op_table[op].name;
  for (int i = 0; i < attrs->n; i++) {
    const fg_attr *a = &attrs->items[i];
    const fg_attr_def *d = fg_op_attr(op, a->name);
    char list[512];
    /* Names that start with '_' and no row declares are annotations (as in
     * TensorFlow): kept and saved, read by no kernel. */
    if (!d && a->name[0] == '_') continue;
    if (!d) {
      fg_suggest s;
      fg_suggest_init(&s, a->name);
      for (const fg_attr_def *c = fg_op_table[op].attrs; c && c->name; c++)
        fg_suggest_try(&s, c->name);
      char tail[300];
      fg_status_set(st, FG_INVALID_GRAPH,
                    "node '%s' (%s): unknown attribute '%s'%s; %s accepts: %s", name, opname,
                    a->name, fg_suggest_tail(&s, tail, sizeof tail), opname,
                    accepted_list(op, list, sizeof list));
      return -1;
    }
    /* A float attribute may be written as an int (lr = 1); nothing else
     * converts. */
    if (a->type != d->type && !(d->type == FG_ATTR_FLOAT && a->type == FG_ATTR_INT)) {
      fg_status_set(st, FG_INVALID_GRAPH, "node '%s' (%s): attribute '%s' has type %s, expected %s",
                    name, opname, a->name, fg_attr_type_name(a->type), fg_attr_type_name(d->type));
      return -1;
    }
    if (a->type == FG_ATTR_FLOAT && !isfinite(a->f)) {
      fg_status_set(st, FG_INVALID_GRAPH, "node '%s' (%s): attribute '%s' = %g is not finite", name,
                    opname, a->name, a->f);
      return -1;
    }
  }
  return 0;
}

/* One attribute with a param kind into its field: the node's value, or the
 * row's default (text, as `flowgraph ops` prints it). */
static int parse_scalar(const fg_node *node, const fg_attr_def *a, fg_op_params *p, fg_status *st) {
  char *field = (char *)p + a->offset;
  int required = a->dflt == NULL;
  if (a->kind == FG_PARAM_F64) {
    double v;
    if (required && !fg_attrs_find(&node->attrs, a->name))
      return fgi_fail(node, st, "missing attribute '%s' (float)", a->name);
    if (fgi_attr_float(node, a->name, required ? 0.0 : strtod(a->dflt, NULL), &v, st)) return -1;
    memcpy(field, &v, sizeof v);
    return 0;
  }
  int64_t v;
  if (fgi_attr_int(node, a->name, required, required ? 0 : strtoll(a->dflt, NULL, 10), &v, st))
    return -1;
  if (a->kind == FG_PARAM_I64) {
    memcpy(field, &v, sizeof v);
    return 0;
  }
  if (v != 0 && v != 1)
    return fgi_fail(node, st, "attribute '%s' = %lld must be 0 or 1", a->name, (long long)v);
  int flag = (int)v;
  memcpy(field, &flag, sizeof flag);
  return 0;
}

int fg_op_parse_params(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  memset(p, 0, sizeof *p);
  const fg_op_def *def = &fg_op_table[node->op];
  for (const fg_attr_def *a = def->attrs; a && a->name; a++)
    if (a->kind != FG_PARAM_NONE && parse_scalar(node, a, p, st) != 0) return -1;
  return def->parse ? def->parse(node, in, p, st) : 0;
}

int fg_op_output_count(int op, const char *name, const struct fg_attrs *attrs, fg_status *st) {
  const fg_op_def *d = &fg_op_table[op];
  if (d->n_outputs >= 0) return d->n_outputs;
  if (!d->count_outputs) {
    fg_status_set(st, FG_INTERNAL, "node '%s' (%s): the op has no output count", name, d->name);
    return -1;
  }
  return d->count_outputs(name, attrs, st);
}

int fg_op_writes_input(int op, const struct fg_attrs *attrs, int k) {
  const fg_op_def *d = &fg_op_table[op];
  if (d->mutable_lists == 0) return k < 32 && (d->mutable_inputs >> k & 1u);
  const fg_attr *a = attrs ? fg_attrs_find(attrs, "n") : NULL;
  const int64_t n = a && a->type == FG_ATTR_INT ? a->i : 0;
  return k >= 0 && n > 0 && k < (int64_t)d->mutable_lists * n;
}

int fg_op_find(const char *name) { return fg_op_lookup(name); }

static int count_attrs(const fg_attr_def *a) {
  int n = 0;
  while (a && a[n].name)
    n++;
  return n;
}

int fg_op_info_get(int op, fg_op_info *info) {
  if (op < 0 || op >= FG_OP_COUNT || !info) return -1;
  const fg_op_def *d = &fg_op_table[op];
  unsigned f = d->flags;
  info->name = d->name;
  info->inputs = d->inputs;
  info->doc = d->doc;
  info->min_inputs = d->min_inputs;
  info->max_inputs = d->max_inputs;
  info->n_outputs = d->n_outputs;
  info->n_attrs = count_attrs(d->attrs);
  info->flags = (f & FG_OPF_ELEMENTWISE ? FG_OP_INFO_ELEMENTWISE : 0) |
                (f & FG_OPF_DIFFERENTIABLE ? FG_OP_INFO_DIFFERENTIABLE : 0) |
                (f & FG_OPF_STATEFUL ? FG_OP_INFO_STATEFUL : 0) |
                (f & FG_OPF_SOURCE ? FG_OP_INFO_SOURCE : 0);
  return 0;
}

int fg_op_common_attrs(void) { return count_attrs(fg_common_attrs); }

int fg_op_attr_info_get(int op, int k, fg_op_attr_info *info) {
  if (op < -1 || op >= FG_OP_COUNT || !info) return -1;
  const fg_attr_def *list = op < 0 ? fg_common_attrs : fg_op_table[op].attrs;
  if (k < 0 || k >= count_attrs(list)) return -1;
  info->name = list[k].name;
  info->type = list[k].type;
  info->dflt = list[k].dflt;
  info->doc = list[k].doc;
  return 0;
}
