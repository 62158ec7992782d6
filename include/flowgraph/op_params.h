/* flowgraph: the typed parameters of each op, as its kernels receive them.
 *
 * A node's attributes are checked and normalised once, when a plan is built,
 * by the parse hook of the op's row in the op table; the kernel then reads
 * its own struct and nothing else (as TFLite's ParseOpData fills
 * TfLiteConvParams). Every field holds exactly what its name says; an op
 * without attributes that its kernels need has no struct here.
 *
 * `flowgraph ops` lists every op's attributes with their types and defaults;
 * the comment on each field names the attribute it comes from. */
#ifndef FLOWGRAPH_OP_PARAMS_H
#define FLOWGRAPH_OP_PARAMS_H

#include <stdint.h>

#include "flowgraph/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* matmul: transpose_a, transpose_b (0 or 1). */
typedef struct fg_matmul_params {
  int transpose_a, transpose_b;
} fg_matmul_params;

/* concat, softmax, log_softmax, argmax, argmin: axis, in [0, rank) of
 * input 0. */
typedef struct fg_axis_params {
  int axis;
} fg_axis_params;

/* reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod and
 * logsumexp: axes sorted, unique and in
 * [0, rank); n_axes == rank when the attribute is absent or empty (every
 * axis). keepdims 0 or 1. */
typedef struct fg_reduce_params {
  int n_axes;
  int axes[FG_MAX_RANK];
  int keepdims;
} fg_reduce_params;

/* transpose: out.dims[i] = in.dims[perm[i]]. */
typedef struct fg_transpose_params {
  int perm[FG_MAX_RANK];
} fg_transpose_params;

/* slice and slice_grad: the block's first index per dimension; its sizes
 * are the slice's output dims (the gradient's dy dims). */
typedef struct fg_slice_params {
  int64_t begin[FG_MAX_RANK];
} fg_slice_params;

/* leaky_relu: x > 0 ? x : alpha * x. */
typedef struct fg_leaky_relu_params {
  double alpha;
} fg_leaky_relu_params;

/* elu (torch.nn.ELU): x > 0 ? x : alpha * (e^x - 1). */
typedef struct fg_elu_params {
  double alpha;
} fg_elu_params;

/* softplus (torch.nn.Softplus): beta x > threshold ? x : log1p(e^(beta x)) / beta. */
typedef struct fg_softplus_params {
  double beta, threshold;
} fg_softplus_params;

/* clip (torch.clamp with both bounds): min(max(x, min), max); min <= max. */
typedef struct fg_clip_params {
  double min, max;
} fg_clip_params;

/* fill: every element's value (converted to the output dtype). */
typedef struct fg_fill_params {
  double value;
} fg_fill_params;

/* random_uniform (low, high), random_normal and truncated_normal (mean,
 * stddev): element i is a function of (seed, stream, i) only, through
 * Philox4x32-10 (kernels/philox.h). stream is the attribute, or when it is
 * -1 (the default) a 32-bit FNV-1a hash of the node's name, so that nodes
 * with one seed draw different values. */
typedef struct fg_random_params {
  int64_t seed;
  int64_t stream; /* [0, 2^32) once parsed */
  double low, high;
  double mean, stddev;
} fg_random_params;

/* dropout and dropout_grad: p in [0, 1); stream as the random ops'
 * (resolved, [0, 2^32)); replica in [0, 2^16) tells data-parallel copies
 * of one node apart. The mask is keyed by these and the run's training
 * step (fg_kctx.rng_step): kernels/philox.h, fg_dropout_keep4. */
typedef struct fg_dropout_params {
  double p;
  int64_t seed;
  int64_t stream;
  int64_t replica;
} fg_dropout_params;

/* one_hot: the number of classes. */
typedef struct fg_one_hot_params {
  int64_t depth;
} fg_one_hot_params;

/* apply_momentum (torch.optim.SGD): buf = momentum * buf + grad. */
typedef struct fg_momentum_params {
  double momentum;
  int nesterov; /* 0 or 1 */
} fg_momentum_params;

/* apply_adam: decoupled weight decay (AdamW) when weight_decay > 0; l2 adds
 * l2 * var to the gradient first (torch's Adam weight_decay). */
typedef struct fg_adam_params {
  double beta1, beta2, epsilon, weight_decay, l2;
} fg_adam_params;

/* multi_apply_sgd, multi_apply_momentum, multi_apply_adam: one update of
 * n variables with one rule's hyper-parameters (the member of that rule). */
typedef struct fg_multi_update_params {
  int64_t n;
  fg_momentum_params momentum;
  fg_adam_params adam;
} fg_multi_update_params;

/* all_reduce, all_reduce_apply_sgd and sufficient_factor_apply_sgd: mean divides
 * the sum by the group size (or by the total rows when weighted); weighted
 * scales each rank's value by its rows first. Both 0 or 1. */
typedef struct fg_all_reduce_params {
  int mean, weighted;
} fg_all_reduce_params;

/* shard: rows [index * B / count, (index + 1) * B / count) of input 0. */
typedef struct fg_shard_params {
  int64_t index, count;
} fg_shard_params;

/* cumsum (ONNX CumSum): out[i] = the sum of x[j] along axis for j <= i
 * (j < i when exclusive; j >= i, or j > i, when reverse). axis in
 * [0, rank); exclusive and reverse 0 or 1. */
typedef struct fg_cumsum_params {
  int axis, exclusive, reverse;
} fg_cumsum_params;

/* topk (torch.topk) and topk_grad: the k largest (smallest when largest is
 * 0) along axis, in [0, rank) of x; 0 <= k <= that dim. Ties go to the
 * lower index. The values always come out best first, whatever sorted
 * says (an unsorted order is any order). */
typedef struct fg_topk_params {
  int64_t k;
  int axis, largest, sorted;
} fg_topk_params;
/* pad and pad_grad (ONNX Pad): begin[d] and end[d] elements added before
 * and after dim d, all >= 0; mode FG_PAD_CONSTANT fills with value (converted
 * to the dtype), FG_PAD_REFLECT mirrors without repeating the edge (needs
 * begin[d], end[d] < dim d), FG_PAD_EDGE repeats the edge element. */
enum { FG_PAD_CONSTANT = 0, FG_PAD_REFLECT = 1, FG_PAD_EDGE = 2 };
typedef struct fg_pad_params {
  int64_t begin[FG_MAX_RANK], end[FG_MAX_RANK];
  int mode;
  double value;
} fg_pad_params;

/* tile and tile_grad (ONNX Tile): copies of x along each dim, >= 0. */
typedef struct fg_tile_params {
  int64_t repeats[FG_MAX_RANK];
} fg_tile_params;
/* max_pool2d, avg_pool2d and their gradients (NCHW, as
 * torch.nn.functional): kernel (kh, kw) >= 1; strides (sh, sw) >= 1
 * (attribute absent: the kernel); pads (top, left, bottom, right), each
 * in [0, kernel/2] of its dimension; dilations (dh, dw) >= 1 (avg_pool2d:
 * always 1); ceil_mode 0/1 rounds the output size up, keeping only windows
 * that start inside the input or its top/left padding; count_include_pad
 * (avg_pool2d only) 1 divides by the window's size clipped to the padded
 * input, 0 by its element count inside the input. */
typedef fg_pool2d_opts fg_pool2d_params; /* flowgraph/types.h, here normalised */

/* resize_nearest, resize_linear and their gradients (flowgraph/types.h,
 * fg_resize_opts): the output's height and width, the coordinate scales
 * resolved (the sizes over the input's where the node gives none), the
 * coordinate mode and the nearest mode (fg_resize_coord,
 * fg_resize_nearest_mode; 0 for the linear ops). */
typedef struct fg_resize_params {
  int64_t sizes[2];
  double scales[2];
  int coord;
  int nearest;
} fg_resize_params;
/* batch_norm, layer_norm, group_norm, instance_norm, their *_grad ops and
 * batch_norm_update_stats (torch.nn.functional's semantics). */
typedef struct fg_norm_params {
  double epsilon;          /* epsilon: y = (x - mean) / sqrt(var + epsilon); > 0 */
  double momentum;         /* momentum (update_stats): r = (1 - m) r + m batch; [0, 1] */
  int64_t num_groups;      /* num_groups (group_norm); instance_norm: C, one group a channel */
  int64_t normalized_rank; /* normalized_rank (layer_norm): the last k axes, 1 <= k <= rank */
  int weighted; /* weighted (sync_batch_norm_grad): dy is of a row-mean loss per replica */
} fg_norm_params;
/* conv2d, conv2d_grad_input, conv2d_grad_weight and conv_transpose2d (NCHW,
 * as torch.nn.functional), checked and resolved at plan time: auto_pad
 * 'same' has become pads. */
typedef struct fg_conv_params {
  int64_t stride[2];         /* strides (height, width), >= 1 */
  int64_t dilation[2];       /* dilations, >= 1 */
  int64_t pad[4];            /* pads: top, left, bottom, right, >= 0 */
  int64_t groups;            /* groups, >= 1, dividing both channel counts */
  int64_t output_padding[2]; /* conv_transpose2d's output_padding, < stride; 0 otherwise */
} fg_conv_params;

/* fused_elementwise: the program of its "program" attribute, parsed. The
 * fusion pass writes the attribute; users rarely do. Syntax: instructions
 * separated by ';', each `op(arg, ...)`, where an argument is `xI` (input
 * I), `tJ` (the result of instruction J < this one) or a number (a scalar
 * constant, strtod syntax; the pass writes C99 hex floats so the value is
 * exact), and the op's own attributes follow as `name=number`
 * (`leaky_relu(t0, alpha=0x1.47ae147ae147bp-7)`). The last instruction's
 * result is the output. Example: "add(x0, x1); relu(t0)".
 *
 * Every value is computed in the output's dtype (f32 or f64), element by
 * element, in exactly the arithmetic of the op's own kernel, so a fused
 * node gives the bits of the nodes it replaces. Inputs broadcast NumPy
 * style to the output shape; an input may be bool only where a select's
 * condition reads it. Comparisons give 1 or 0 and are read only by select
 * (a comparison is never the last instruction). */
enum { FG_FUSED_MAX_INPUTS = 16, FG_FUSED_MAX_INSTRS = 32, FG_FUSED_MAX_CONSTS = 32 };

typedef enum fg_fused_opcode {
  /* binary */
  FG_FUSED_ADD,
  FG_FUSED_SUB,
  FG_FUSED_MUL,
  FG_FUSED_DIV,
  FG_FUSED_MAXIMUM,
  FG_FUSED_MINIMUM,
  FG_FUSED_POW,
  FG_FUSED_GREATER,
  FG_FUSED_LESS,
  FG_FUSED_EQUAL,
  /* ternary: arg 0 != 0 ? arg 1 : arg 2 */
  FG_FUSED_SELECT,
  /* unary */
  FG_FUSED_NEG,
  FG_FUSED_EXP,
  FG_FUSED_LOG,
  FG_FUSED_SQRT,
  FG_FUSED_RSQRT,
  FG_FUSED_ABS,
  FG_FUSED_TANH,
  FG_FUSED_SIGMOID,
  FG_FUSED_RELU,
  FG_FUSED_LEAKY_RELU, /* attr[0] alpha */
  FG_FUSED_ELU,        /* attr[0] alpha */
  FG_FUSED_SOFTPLUS,   /* attr[0] beta, attr[1] threshold */
  FG_FUSED_CLIP,       /* attr[0] min, attr[1] max */
  FG_FUSED_SILU,
  FG_FUSED_GELU,
  FG_FUSED_ERF,
  FG_FUSED_SIGN,
  FG_FUSED_RECIPROCAL,
  FG_FUSED_FLOOR,
  FG_FUSED_CEIL,
  FG_FUSED_ROUND,
  FG_FUSED_GELU_TANH,
  FG_FUSED_OPCODE_COUNT
} fg_fused_opcode;

/* Where an argument comes from. */
typedef enum fg_fused_ref_kind {
  FG_FUSED_INPUT, /* index: the node's input */
  FG_FUSED_TEMP,  /* index: an earlier instruction's result */
  FG_FUSED_CONST  /* index: into consts */
} fg_fused_ref_kind;

typedef struct fg_fused_ref {
  uint8_t kind, index;
} fg_fused_ref;

typedef struct fg_fused_instr {
  uint8_t op;     /* fg_fused_opcode */
  uint8_t n_args; /* 1, 2 or 3, as the opcode takes */
  fg_fused_ref arg[3];
  double attr[2]; /* the op's attributes, as in the comments above; 0 unused */
} fg_fused_instr;

typedef struct fg_fused_params {
  int n_inputs, n_instrs, n_consts;
  fg_fused_instr ins[FG_FUSED_MAX_INSTRS];
  double consts[FG_FUSED_MAX_CONSTS];
} fg_fused_params;

/* The epilogue's activation, from the string attribute "activation":
 * "none" or "relu" (fused_matmul, fused_conv2d), "clip" (fused_conv2d
 * only: clip's min(max(x, min), max), its float attributes min and max). */
typedef enum fg_activation {
  FG_ACTIVATION_NONE = 0,
  FG_ACTIVATION_RELU = 1,
  FG_ACTIVATION_CLIP = 2
} fg_activation;

/* fused_matmul: act(op(a) @ op(b) + bias). transpose_a, transpose_b (0 or
 * 1) as matmul's; activation parsed from its name. */
typedef struct fg_fused_matmul_params {
  int transpose_a, transpose_b;
  fg_activation activation;
} fg_fused_matmul_params;

/* permuted_matmul: transpose(transpose(a, perm_a) @ transpose(b, perm_b),
 * perm_out), every perm of the operands' common rank `rank`. a's and b's
 * last axes stay among their products' last two (perm_x[rank - 2] or
 * perm_x[rank - 1] is rank - 1) and perm_out[rank - 1] is rank - 1, so
 * each matrix is a strided BLAS operand. */
typedef struct fg_permuted_matmul_params {
  int rank;
  int perm_a[FG_MAX_RANK], perm_b[FG_MAX_RANK], perm_out[FG_MAX_RANK];
} fg_permuted_matmul_params;

/* fused_conv2d and fused_conv2d_add: conv2d's parameters and the
 * activation applied last, parsed from its name as fused_matmul's; with
 * clip its bounds (min <= max). */
typedef struct fg_fused_conv_params {
  fg_conv_params conv;
  fg_activation activation;
  double clip_min, clip_max;
} fg_fused_conv_params;

/* Room for any op's parameters in one plan step; a kernel reads only the
 * member of its own op. */
typedef union fg_op_params {
  fg_matmul_params matmul; /* matmul and fused_matmul_relu_grad */
  fg_axis_params concat;
  fg_axis_params softmax;  /* softmax and log_softmax */
  fg_axis_params argmax;   /* argmax and argmin */
  fg_reduce_params reduce; /* reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod,
                              logsumexp */
  fg_transpose_params transpose;
  fg_slice_params slice; /* slice and slice_grad */
  fg_leaky_relu_params leaky_relu;
  fg_elu_params elu;
  fg_softplus_params softplus;
  fg_clip_params clip;
  fg_fill_params fill;
  fg_random_params random; /* random_uniform, random_normal, truncated_normal */
  fg_one_hot_params one_hot;
  fg_momentum_params momentum;
  fg_adam_params adam;
  fg_all_reduce_params all_reduce; /* and the updates that reduce a gradient */
  fg_shard_params shard;
  fg_cumsum_params cumsum;
  fg_topk_params topk;       /* topk and topk_grad */
  fg_pad_params pad;         /* pad and pad_grad */
  fg_tile_params tile;       /* tile and tile_grad */
  fg_axis_params split;      /* axis in [0, rank); the outputs' dims give the sizes */
  fg_axis_params stack;      /* axis in [0, rank of the output) */
  fg_pool2d_params pool2d;   /* max_pool2d, avg_pool2d and their gradients */
  fg_resize_params resize;   /* resize_nearest, resize_linear and their gradients */
  fg_norm_params norm;       /* the normalization ops and their gradients */
  fg_dropout_params dropout; /* dropout, dropout_grad */
  fg_conv_params conv;       /* conv2d, its gradients and conv_transpose2d */
  fg_fused_params fused;     /* fused_elementwise */
  fg_fused_matmul_params fused_matmul;
  fg_permuted_matmul_params permuted_matmul;
  fg_multi_update_params multi_update; /* multi_apply_sgd, _momentum, _adam */
  fg_fused_conv_params fused_conv;     /* fused_conv2d, fused_conv2d_add */
} fg_op_params;

#ifdef __cplusplus
}
#endif
#endif
