/* The op table: one row per op. Ops are data: name, arity, the inputs'
 * names, the attributes with their types and defaults, the parse hook that
 * turns attributes into the op's typed parameters (flowgraph/op_params.h),
 * shape inference, FLOP count and flags. Kernels register per (op name,
 * device, dtype) in kernels/, gradients per op in autodiff/.
 *
 * `flowgraph ops` prints the table (docs/ops.md is its output); the rows in
 * graph/op_table.c say what each input and attribute means. Conventions:
 * - In apply_*, var/buf/m/v come straight from variable nodes and are
 *   updated in place (mutable_inputs); lr and step are scalars of any float
 *   type; inputs past the fixed ones only order the update after them.
 * - all_reduce reduces over the communicator the executor gives the node's
 *   device; a group of one is the identity. Its ctrl inputs only order
 *   collectives the same on every rank. all_reduce_apply_sgd and
 *   sufficient_factor_apply_sgd are fg_data_parallel's fused updates: one
 *   collective that reduces the gradient and updates every rank's variable;
 *   the second takes the gradient as its factors a^T b, never made where
 *   the transport lets every rank read the others' (sufficient factor
 *   broadcasting, Xie et al. 2016). They and all_reduce are collectives
 *   (FG_OPF_COLLECTIVE).
 * - after(x, ctrl...) is x's bytes once every ctrl input is computed: an
 *   ordering edge, as TF's control dependencies.
 */
#ifndef FG_OP_TABLE_H
#define FG_OP_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "flowgraph/op_params.h"
#include "graph/graph_internal.h"

/* X(ENUM, "name") for every op, in table order. */
#define FG_OPS(X)                                                                                  \
  X(PLACEHOLDER, "placeholder")                                                                    \
  X(CONSTANT, "constant")                                                                          \
  X(VARIABLE, "variable")                                                                          \
  X(FILL, "fill")                                                                                  \
  X(RANDOM_UNIFORM, "random_uniform")                                                              \
  X(RANDOM_NORMAL, "random_normal")                                                                \
  X(TRUNCATED_NORMAL, "truncated_normal")                                                          \
  X(MATMUL, "matmul")                                                                              \
  X(RESHAPE, "reshape")                                                                            \
  X(TRANSPOSE, "transpose")                                                                        \
  X(CONCAT, "concat")                                                                              \
  X(SLICE, "slice")                                                                                \
  X(GATHER, "gather")                                                                              \
  X(ONE_HOT, "one_hot")                                                                            \
  X(CAST, "cast")                                                                                  \
  X(ADD, "add")                                                                                    \
  X(SUB, "sub")                                                                                    \
  X(MUL, "mul")                                                                                    \
  X(DIV, "div")                                                                                    \
  X(POW, "pow")                                                                                    \
  X(MAXIMUM, "maximum")                                                                            \
  X(MINIMUM, "minimum")                                                                            \
  X(EQUAL, "equal")                                                                                \
  X(GREATER, "greater")                                                                            \
  X(LESS, "less")                                                                                  \
  X(SELECT, "select")                                                                              \
  X(NEG, "neg")                                                                                    \
  X(EXP, "exp")                                                                                    \
  X(LOG, "log")                                                                                    \
  X(SQRT, "sqrt")                                                                                  \
  X(RSQRT, "rsqrt")                                                                                \
  X(ABS, "abs")                                                                                    \
  X(TANH, "tanh")                                                                                  \
  X(SIGMOID, "sigmoid")                                                                            \
  X(RELU, "relu")                                                                                  \
  X(LEAKY_RELU, "leaky_relu")                                                                      \
  X(ELU, "elu")                                                                                    \
  X(SOFTPLUS, "softplus")                                                                          \
  X(SELU, "selu")                                                                                  \
  X(SILU, "silu")                                                                                  \
  X(HARD_SIGMOID, "hard_sigmoid")                                                                  \
  X(HARD_SWISH, "hard_swish")                                                                      \
  X(MISH, "mish")                                                                                  \
  X(SIGN, "sign")                                                                                  \
  X(RECIPROCAL, "reciprocal")                                                                      \
  X(FLOOR, "floor")                                                                                \
  X(CEIL, "ceil")                                                                                  \
  X(ROUND, "round")                                                                                \
  X(CLIP, "clip")                                                                                  \
  X(GELU, "gelu")                                                                                  \
  X(GELU_TANH, "gelu_tanh")                                                                        \
  X(IDENTITY, "identity")                                                                          \
  X(STOP_GRADIENT, "stop_gradient")                                                                \
  X(ZEROS_LIKE, "zeros_like")                                                                      \
  X(ONES_LIKE, "ones_like")                                                                        \
  X(REDUCE_SUM, "reduce_sum")                                                                      \
  X(REDUCE_MEAN, "reduce_mean")                                                                    \
  X(REDUCE_MAX, "reduce_max")                                                                      \
  X(ARGMAX, "argmax")                                                                              \
  X(SOFTMAX, "softmax")                                                                            \
  X(LOG_SOFTMAX, "log_softmax")                                                                    \
  X(SOFTMAX_CROSS_ENTROPY, "softmax_cross_entropy")                                                \
  X(ASSIGN, "assign")                                                                              \
  X(ERF, "erf")                                                                                    \
  X(EXPAND_DIMS, "expand_dims")                                                                    \
  X(RESHAPE_LIKE, "reshape_like")                                                                  \
  X(BROADCAST_LIKE, "broadcast_like")                                                              \
  X(SUM_TO, "sum_to")                                                                              \
  X(NUMEL, "numel")                                                                                \
  X(SLICE_GRAD, "slice_grad")                                                                      \
  X(GATHER_GRAD, "gather_grad")                                                                    \
  X(GROUP, "group")                                                                                \
  X(APPLY_SGD, "apply_sgd")                                                                        \
  X(APPLY_MOMENTUM, "apply_momentum")                                                              \
  X(APPLY_ADAM, "apply_adam")                                                                      \
  X(ALL_REDUCE, "all_reduce")                                                                      \
  X(SHARD, "shard")                                                                                \
  X(AFTER, "after")                                                                                \
  X(ALL_REDUCE_APPLY_SGD, "all_reduce_apply_sgd")                                                  \
  X(SUFFICIENT_FACTOR_APPLY_SGD, "sufficient_factor_apply_sgd")                                    \
  X(REDUCE_MIN, "reduce_min")                                                                      \
  X(REDUCE_PROD, "reduce_prod")                                                                    \
  X(ARGMIN, "argmin")                                                                              \
  X(LOGSUMEXP, "logsumexp")                                                                        \
  X(CUMSUM, "cumsum")                                                                              \
  X(TOPK, "topk")                                                                                  \
  X(TOPK_GRAD, "topk_grad")                                                                        \
  X(PAD, "pad")                                                                                    \
  X(PAD_GRAD, "pad_grad")                                                                          \
  X(FLATTEN, "flatten")                                                                            \
  X(SQUEEZE, "squeeze")                                                                            \
  X(EXPAND, "expand")                                                                              \
  X(TILE, "tile")                                                                                  \
  X(TILE_GRAD, "tile_grad")                                                                        \
  X(SPLIT, "split")                                                                                \
  X(STACK, "stack")                                                                                \
  X(MAX_POOL2D, "max_pool2d")                                                                      \
  X(AVG_POOL2D, "avg_pool2d")                                                                      \
  X(GLOBAL_AVG_POOL, "global_avg_pool")                                                            \
  X(GLOBAL_MAX_POOL, "global_max_pool")                                                            \
  X(ADAPTIVE_AVG_POOL2D, "adaptive_avg_pool2d")                                                    \
  X(MAX_POOL2D_GRAD, "max_pool2d_grad")                                                            \
  X(AVG_POOL2D_GRAD, "avg_pool2d_grad")                                                            \
  X(ADAPTIVE_AVG_POOL2D_GRAD, "adaptive_avg_pool2d_grad")                                          \
  X(GLOBAL_MAX_POOL_GRAD, "global_max_pool_grad")                                                  \
  X(RESIZE_NEAREST, "resize_nearest")                                                              \
  X(RESIZE_LINEAR, "resize_linear")                                                                \
  X(RESIZE_NEAREST_GRAD, "resize_nearest_grad")                                                    \
  X(RESIZE_LINEAR_GRAD, "resize_linear_grad")                                                      \
  X(BATCH_NORM, "batch_norm")                                                                      \
  X(BATCH_NORM_UPDATE_STATS, "batch_norm_update_stats")                                            \
  X(BATCH_NORM_GRAD, "batch_norm_grad")                                                            \
  X(LAYER_NORM, "layer_norm")                                                                      \
  X(LAYER_NORM_GRAD, "layer_norm_grad")                                                            \
  X(GROUP_NORM, "group_norm")                                                                      \
  X(GROUP_NORM_GRAD, "group_norm_grad")                                                            \
  X(INSTANCE_NORM, "instance_norm")                                                                \
  X(TRAINING_FLAG, "training_flag")                                                                \
  X(DROPOUT, "dropout")                                                                            \
  X(DROPOUT_GRAD, "dropout_grad")                                                                  \
  X(CONV2D, "conv2d")                                                                              \
  X(CONV2D_GRAD_INPUT, "conv2d_grad_input")                                                        \
  X(CONV2D_GRAD_WEIGHT, "conv2d_grad_weight")                                                      \
  X(CONV_TRANSPOSE2D, "conv_transpose2d")                                                          \
  X(SYNC_BATCH_NORM, "sync_batch_norm")                                                            \
  X(SYNC_BATCH_NORM_GRAD, "sync_batch_norm_grad")                                                  \
  X(LOGICAL_NOT, "logical_not")                                                                    \
  X(LOGICAL_AND, "logical_and")                                                                    \
  X(LOGICAL_OR, "logical_or")                                                                      \
  X(SOFTMAX_CROSS_ENTROPY_GRAD, "softmax_cross_entropy_grad")                                      \
  X(FUSED_MATMUL, "fused_matmul")                                                                  \
  X(FUSED_ELEMENTWISE, "fused_elementwise")                                                        \
  X(MULTI_APPLY_SGD, "multi_apply_sgd")                                                            \
  X(MULTI_APPLY_MOMENTUM, "multi_apply_momentum")                                                  \
  X(MULTI_APPLY_ADAM, "multi_apply_adam")                                                          \
  X(FUSED_CONV2D, "fused_conv2d")                                                                  \
  X(FUSED_CONV2D_ADD, "fused_conv2d_add")                                                          \
  X(FUSED_MATMUL_RELU_GRAD, "fused_matmul_relu_grad")                                              \
  X(MATMUL_BIAS_GRAD, "matmul_bias_grad")                                                          \
  X(MATMUL_APPLY_SGD, "matmul_apply_sgd")                                                          \
  X(SOFTMAX_CROSS_ENTROPY_AND_GRAD, "softmax_cross_entropy_and_grad")                              \
  X(PERMUTED_MATMUL, "permuted_matmul")

typedef enum fg_op_id {
#define FG_OP_ENUM(e, s) FG_OP_##e,
  FG_OPS(FG_OP_ENUM)
#undef FG_OP_ENUM
      FG_OP_COUNT
} fg_op_id;

enum {
  FG_OPF_SOURCE = 1u << 0,           /* no inputs, no kernel: the executor provides the value */
  FG_OPF_ELEMENTWISE = 1u << 1,      /* output[i] depends on input[i] (after broadcasting) */
  FG_OPF_INPLACE = 1u << 2,          /* output may share input 0's buffer */
  FG_OPF_DIFFERENTIABLE = 1u << 3,   /* has (or must have) a gradient */
  FG_OPF_STATEFUL = 1u << 4,         /* reads or writes session state; never pruned as pure */
  FG_OPF_KERNEL_KEY_INPUT = 1u << 5, /* kernel is looked up by input 0's dtype, not output 0's */
  FG_OPF_VIEW = 1u << 6,             /* output is input 0's bytes (reshape) */
  FG_OPF_COLLECTIVE = 1u << 7,       /* calls the communicator (all_reduce and the fused updates) */
  /* Draws random values (random_uniform, ...): deterministic, but two such
   * nodes with equal attributes draw different values (their streams come
   * from their names), so a common-subexpression pass must not merge them. */
  FG_OPF_RANDOM = 1u << 8
};

/* Infers output tinfos from input tinfos and attrs; on error sets status
 * (FG_INVALID_GRAPH) with a message that starts with the node and op. */
typedef int (*fg_infer_fn)(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                           fg_status *status);
/* FLOPs for fully known shapes. */
typedef int64_t (*fg_flops_fn)(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out);
/* Fills the op's member of *p from the node's attributes, checked and
 * normalised against the input tinfos `in` (known shapes, at plan time):
 * 0, or -1 with status set naming the node. *p is zeroed first. */
typedef int (*fg_parse_fn)(const fg_node *node, const fg_tinfo *in, fg_op_params *p,
                           fg_status *status);

/* Where the parse step that every op shares puts a scalar attribute: the
 * C type of the field of fg_op_params at fg_attr_def.offset. NONE: only
 * shape inference or the op's parse hook reads the attribute. */
typedef enum fg_param_kind {
  FG_PARAM_NONE = 0,
  FG_PARAM_FLAG, /* int, 0 or 1 */
  FG_PARAM_I64,  /* int64_t */
  FG_PARAM_F64   /* double, finite; an int attribute converts */
} fg_param_kind;

/* One attribute an op accepts. An attribute that neither its op's row nor
 * fg_common_attrs names is refused when the node is made, naming the ones
 * the op accepts, unless its name starts with '_' (an annotation that no
 * kernel reads, kept and saved with the node). A scalar attribute with a
 * param kind lands in its field without any code of the op's own. */
typedef struct fg_attr_def {
  const char *name;
  fg_attr_type type; /* FG_ATTR_FLOAT also accepts an int */
  const char *dflt;  /* the default as text, or NULL: required */
  const char *doc;   /* one line, for `flowgraph ops` */
  fg_param_kind kind;
  size_t offset; /* in fg_op_params, when kind is not NONE */
} fg_attr_def;
/* The last two fields of an fg_attr_def whose value the kernels read as
 * member `field` of fg_op_params (matmul.transpose_a). */
#define FG_PARAM(kind, field) FG_PARAM_##kind, offsetof(fg_op_params, field)
/* The same for an attribute the kernels never read directly. */
#define FG_NO_PARAM FG_PARAM_NONE, 0

typedef struct fg_op_def {
  const char *name;
  int min_inputs;
  int max_inputs; /* -1: variadic */
  int n_outputs;
  unsigned flags;
  fg_infer_fn infer;
  fg_flops_fn flops; /* NULL: 0 FLOPs */
  /* Bit i set: input i must come straight from a variable node, and the
   * kernel writes it in place (the executor hands the kernel the variable's
   * storage). Output 0 of such an op aliases input 0 (the updated value). */
  unsigned mutable_inputs;
  const char *inputs;       /* the inputs' names, "a, b"; "..." where variadic */
  const fg_attr_def *attrs; /* NULL-name terminated; NULL: none */
  fg_parse_fn parse;        /* NULL: the kernels read no parameters */
  const char *doc;          /* one line, for `flowgraph ops` */
  /* Where n_outputs is -1 (split): the node's output count from its
   * attributes, or -1 with status set naming the node. */
  int (*count_outputs)(const char *name, const struct fg_attrs *attrs, fg_status *st);
  /* Multi-tensor updates: inputs are lists of attribute n tensors each,
   * and the first mutable_lists lists are written in place (in place of
   * the mutable_inputs bits, which hold only bit 0: output 0 still
   * aliases input 0). 0 for every other op. */
  int mutable_lists;
} fg_op_def;

extern const fg_op_def fg_op_table[];

/* 1 for the nodes that call the communicator (ops flagged
 * FG_OPF_COLLECTIVE). The executor pairs, chains and places them alike. */
static inline int fg_node_is_collective(const fg_node *n) {
  return (fg_op_table[n->op].flags & FG_OPF_COLLECTIVE) != 0;
}

/* The output count of a node `name` of op `op` with `attrs`: the row's
 * n_outputs, or for ops whose count depends on an attribute (n_outputs
 * -1), the row's count_outputs. -1 with FG_INVALID_GRAPH naming the node
 * when the attributes give no valid count. */
int fg_op_output_count(int op, const char *name, const struct fg_attrs *attrs, fg_status *st);
/* An optimizer update: a run that applies one is a training step (the
 * value of an unfed training_flag, and the step count dropout masks are
 * keyed by; see fg_training in flowgraph/graph.h). */
static inline int fg_op_is_update(int op) {
  return op == FG_OP_APPLY_SGD || op == FG_OP_APPLY_MOMENTUM || op == FG_OP_APPLY_ADAM ||
         op == FG_OP_ALL_REDUCE_APPLY_SGD || op == FG_OP_SUFFICIENT_FACTOR_APPLY_SGD ||
         op == FG_OP_MATMUL_APPLY_SGD || fg_op_table[op].mutable_lists > 0;
}
/* A multi-tensor update's data inputs: its lists of attribute n tensors,
 * then lr (and Adam's step); the inputs after them are control inputs.
 * INT_MAX for an n too large to count (inference refuses it). */
static inline int fg_multi_update_inputs(const fg_node *n) {
  const fg_op_def *d = &fg_op_table[n->op];
  const int64_t len = fg_attr_int_or(n, "n", 0);
  if (len < 0 || len > (INT32_MAX - 2) / (d->mutable_lists + 1)) return INT32_MAX;
  return (d->mutable_lists + 1) * (int)len + (n->op == FG_OP_MULTI_APPLY_ADAM ? 2 : 1);
}
/* 1 when input k of a node of `op` with `attrs` must come straight from a
 * variable and is written in place: a bit of mutable_inputs, or for the
 * multi-tensor updates, an entry of one of its first mutable_lists lists. */
int fg_op_writes_input(int op, const struct fg_attrs *attrs, int k);
static inline int fg_node_writes_input(const fg_node *n, int k) {
  return fg_op_writes_input(n->op, &n->attrs, k);
}
/* Reads the run's mode or training-step count from fg_kctx (rng_step,
 * run_training): a CUDA Graph would freeze them, so a plan with one is
 * never captured. */
static inline int fg_op_reads_run_state(int op) {
  return op == FG_OP_TRAINING_FLAG || op == FG_OP_DROPOUT || op == FG_OP_DROPOUT_GRAD;
}

/* Op id by name, or -1. */
int fg_op_lookup(const char *name);

/* Attributes every op accepts (FG_COLOCATE_ATTR), NULL-name terminated. */
extern const fg_attr_def fg_common_attrs[];
/* The declaration of attribute `name` for op `op`, or NULL. */
const fg_attr_def *fg_op_attr(int op, const char *name);
/* Checks `attrs` of a node `name` of op `op` against the op's row: every
 * attribute declared, of the declared type. 0, or -1 with FG_INVALID_GRAPH
 * naming the node, the op, the attribute and the attributes it accepts. */
int fg_op_check_attrs(int op, const char *name, const struct fg_attrs *attrs, fg_status *st);
/* The op's parameters into *p: zeroed, then every attribute with a param
 * kind (its default when absent), then the op's parse hook if it has one.
 * 0, or -1 with status set naming the node. */
int fg_op_parse_params(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st);

#endif
