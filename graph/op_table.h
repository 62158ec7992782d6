/* The op table: one row per op. Ops are data: name, arity, attributes,
 * shape inference, FLOP count and flags. Kernels register per (op name,
 * device, dtype) in kernels/, gradients per op in autodiff/.
 *
 * Attribute names (the contract with builders, files and kernels):
 *   placeholder: dtype (int), shape (ints)
 *   constant, variable: value (tensor)
 *   fill: dtype (int), shape (ints), value (float)
 *   matmul: transpose_a, transpose_b (int 0/1)
 *   reshape: shape (ints, one entry may be -1)
 *   transpose: perm (ints)
 *   concat, softmax, log_softmax, argmax: axis (int, negative from the end)
 *   slice: begin (ints), size (ints, -1 = to the end)
 *   one_hot: depth (int), dtype (int)
 *   cast: dtype (int)
 *   leaky_relu: alpha (float, default 0.01)
 *   reduce_sum, reduce_mean, reduce_max: axes (ints; absent or empty = all),
 *                                        keepdims (int 0/1)
 *
 * Ops that gradients and optimizers are built from (inputs; attributes):
 *   erf(x)                       elementwise error function, floats
 *   expand_dims(x; axes)         inserts size-1 dims at `axes`, positions in
 *                                the output (negative from the end)
 *   reshape_like(x, like)        x's elements in like's runtime shape
 *   broadcast_like(x, like)      x broadcast (one way) to like's runtime shape
 *   sum_to(x, like)              x summed down to like's runtime shape (the
 *                                inverse of broadcasting: like broadcasts to x)
 *   numel(x; dtype)              scalar: element count of x at run time
 *   slice_grad(dy, like; begin, size)  zeros of like's shape with dy placed
 *                                at `begin` (the slice's own attributes)
 *   gather_grad(dy, indices, like)     zeros of like's shape (the gathered
 *                                params) with dy's rows added at indices
 *   group(inputs...)             runs after all its inputs; output i32 scalar 0
 *   apply_sgd(var, grad, lr, ctrl...)              var -= lr * grad
 *   apply_momentum(var, buf, grad, lr, ctrl...; momentum, nesterov)
 *                                torch.optim.SGD: buf = m*buf + grad;
 *                                var -= lr * (nesterov ? grad + m*buf : buf)
 *   apply_adam(var, m, v, grad, lr, step, ctrl...; beta1, beta2, epsilon,
 *              weight_decay)     torch.optim.AdamW when weight_decay > 0
 *                                (var *= 1 - lr*wd first), else Adam; `step`
 *                                is the 1-based step count after increment
 *   In apply_*, var/buf/m/v come straight from variable nodes and are updated
 *   in place (op_def.mutable_inputs); lr and step are scalars of any float
 *   type; trailing ctrl inputs only order the update after them.
 *
 * Data-parallel ops (dist/, flowgraph/dist.h):
 *   all_reduce(x, [rows, sums,] ctrl...; mean, weighted)
 *                                 x reduced over the communicator the
 *                                 executor gives the node's device (sum, or
 *                                 mean when mean = 1, the default); a group
 *                                 of one is the identity. weighted = 1
 *                                 (default 0): the mean weighted by each
 *                                 rank's rows (f64 scalar `rows`) over the
 *                                 all-reduced [sum of rows, sum of rows^2]
 *                                 (f64 [2] `sums`), for uneven shards. ctrl
 *                                 inputs only order collectives the same on
 *                                 every rank.
 *   all_reduce_apply_sgd(var, grad, lr, [rows, sums,] ctrl...; mean, weighted)
 *                                 var -= lr * all_reduce(grad; mean,
 *                                 weighted), in one collective that updates
 *                                 every rank's variable (fg_data_parallel's
 *                                 fused_update). rows and sums as for
 *                                 all_reduce (present when weighted = 1).
 *   sufficient_factor_apply_sgd(var, a, lr, b, [rows, sums,] ctrl...; mean,
 *                               weighted)
 *                                 the same update with the gradient given
 *                                 as its factors: grad = a^T b, a [rows, m],
 *                                 b [rows, n], var [m, n], never made where
 *                                 the transport lets every rank read the
 *                                 others' factors (sufficient factor
 *                                 broadcasting, Xie et al. 2016;
 *                                 fg_data_parallel's fused_update of a
 *                                 matmul's weight).
 *                                 These three are collectives (op flag
 *                                 FG_OPF_COLLECTIVE) and not differentiable.
 *   shard(x; index, count)        rows [index*B/count, (index+1)*B/count) of
 *                                 x along axis 0 (B = x.dims[0] must divide
 *                                 by count)
 *   after(x, ctrl...)             x's bytes (a view), once every ctrl input
 *                                 is computed: an ordering edge, as TF's
 *                                 control dependencies (fg_micro_batch bounds
 *                                 the micro-batches in flight with it)
 */
#ifndef FG_OP_TABLE_H
#define FG_OP_TABLE_H

#include "graph/graph_internal.h"

/* X(ENUM, "name") for every op, in table order. */
#define FG_OPS(X)                                                                                  \
  X(PLACEHOLDER, "placeholder")                                                                    \
  X(CONSTANT, "constant")                                                                          \
  X(VARIABLE, "variable")                                                                          \
  X(FILL, "fill")                                                                                  \
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
  X(GELU, "gelu")                                                                                  \
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
  X(SUFFICIENT_FACTOR_APPLY_SGD, "sufficient_factor_apply_sgd")

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
  FG_OPF_COLLECTIVE = 1u << 7        /* calls the communicator (all_reduce and the fused updates) */
};

/* Infers output tinfos from input tinfos and attrs; on error sets status
 * (FG_INVALID_GRAPH) with a message that starts with the node and op. */
typedef int (*fg_infer_fn)(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                           fg_status *status);
/* FLOPs for fully known shapes. */
typedef int64_t (*fg_flops_fn)(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out);

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
} fg_op_def;

extern const fg_op_def fg_op_table[];

/* 1 for the nodes that call the communicator (ops flagged
 * FG_OPF_COLLECTIVE). The executor pairs, chains and places them alike. */
static inline int fg_node_is_collective(const fg_node *n) {
  return (fg_op_table[n->op].flags & FG_OPF_COLLECTIVE) != 0;
}

/* Op id by name, or -1. */
int fg_op_lookup(const char *name);

#endif
