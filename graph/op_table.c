/* The op table: one row per op, indexed by its FG_OP_* id. Rows are placed
 * with designated initializers, so their order cannot drift from FG_OPS; a
 * duplicate row warns (-Woverride-init), the row count is checked below and
 * a missing row (NULL name) fails the op-table test in tests/test_infer.c.
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
#include <string.h>

#include "graph/infer_common.h"
#include "graph/infer_grad.h"

int fgi_infer_all_reduce(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *st);
int fgi_infer_shard(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *st);
int fgi_infer_collective_sgd(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *st);

#define SRC   FG_OPF_SOURCE
#define EW    FG_OPF_ELEMENTWISE
#define INPL  FG_OPF_INPLACE
#define DIFF  FG_OPF_DIFFERENTIABLE
#define STATE FG_OPF_STATEFUL
#define COLL  FG_OPF_COLLECTIVE
#define KEYIN FG_OPF_KERNEL_KEY_INPUT
#define VIEW  FG_OPF_VIEW

#define BINARY(e, name, flags)                                                                     \
  [FG_OP_##e] = {name, 2, 2, 1, flags, fgi_infer_binary, fgi_flops_elementwise}
#define UNARY(e, name, flags)                                                                      \
  [FG_OP_##e] = {name, 1, 1, 1, flags, fgi_infer_unary, fgi_flops_elementwise}

/* Binary arithmetic is in-place-able into input 0: the executor only shares
 * the bytes when input 0 has the output's dtype and element count (so the
 * same shape), and the kernels read element i before writing it. */
const fg_op_def fg_op_table[] = {
    /* name, min_inputs, max_inputs, n_outputs, flags, infer, flops */
    [FG_OP_PLACEHOLDER] = {"placeholder", 0, 0, 1, SRC, fgi_infer_placeholder, NULL},
    [FG_OP_CONSTANT] = {"constant", 0, 0, 1, SRC, fgi_infer_constant, NULL},
    [FG_OP_VARIABLE] = {"variable", 0, 0, 1, SRC | STATE, fgi_infer_constant, NULL},
    [FG_OP_FILL] = {"fill", 0, 0, 1, 0, fgi_infer_fill, NULL},
    [FG_OP_MATMUL] = {"matmul", 2, 2, 1, DIFF, fgi_infer_matmul, fgi_flops_matmul},
    [FG_OP_RESHAPE] = {"reshape", 1, 1, 1, VIEW | DIFF, fgi_infer_reshape, NULL},
    [FG_OP_TRANSPOSE] = {"transpose", 1, 1, 1, DIFF, fgi_infer_transpose, NULL},
    [FG_OP_CONCAT] = {"concat", 1, -1, 1, DIFF, fgi_infer_concat, NULL},
    [FG_OP_SLICE] = {"slice", 1, 1, 1, DIFF, fgi_infer_slice, NULL},
    [FG_OP_GATHER] = {"gather", 2, 2, 1, DIFF, fgi_infer_gather, NULL},
    [FG_OP_ONE_HOT] = {"one_hot", 1, 1, 1, 0, fgi_infer_one_hot, NULL},
    [FG_OP_CAST] = {"cast", 1, 1, 1, EW | DIFF, fgi_infer_cast, fgi_flops_elementwise},
    BINARY(ADD, "add", EW | INPL | DIFF),
    BINARY(SUB, "sub", EW | INPL | DIFF),
    BINARY(MUL, "mul", EW | INPL | DIFF),
    BINARY(DIV, "div", EW | INPL | DIFF),
    BINARY(POW, "pow", EW | INPL | DIFF),
    BINARY(MAXIMUM, "maximum", EW | INPL | DIFF),
    BINARY(MINIMUM, "minimum", EW | INPL | DIFF),
    BINARY(EQUAL, "equal", EW | KEYIN),
    BINARY(GREATER, "greater", EW | KEYIN),
    BINARY(LESS, "less", EW | KEYIN),
    [FG_OP_SELECT] = {"select", 3, 3, 1, EW | DIFF, fgi_infer_select, fgi_flops_elementwise},
    UNARY(NEG, "neg", EW | INPL | DIFF),
    UNARY(EXP, "exp", EW | INPL | DIFF),
    UNARY(LOG, "log", EW | INPL | DIFF),
    UNARY(SQRT, "sqrt", EW | INPL | DIFF),
    UNARY(RSQRT, "rsqrt", EW | INPL | DIFF),
    UNARY(ABS, "abs", EW | INPL | DIFF),
    UNARY(TANH, "tanh", EW | INPL | DIFF),
    UNARY(SIGMOID, "sigmoid", EW | INPL | DIFF),
    UNARY(RELU, "relu", EW | INPL | DIFF),
    UNARY(LEAKY_RELU, "leaky_relu", EW | INPL | DIFF),
    UNARY(GELU, "gelu", EW | INPL | DIFF),
    UNARY(IDENTITY, "identity", EW | INPL | DIFF),
    UNARY(STOP_GRADIENT, "stop_gradient", EW | INPL),
    UNARY(ZEROS_LIKE, "zeros_like", EW | INPL),
    UNARY(ONES_LIKE, "ones_like", EW | INPL),
    [FG_OP_REDUCE_SUM] = {"reduce_sum", 1, 1, 1, DIFF, fgi_infer_reduce, fgi_flops_reduce},
    [FG_OP_REDUCE_MEAN] = {"reduce_mean", 1, 1, 1, DIFF, fgi_infer_reduce, fgi_flops_reduce},
    [FG_OP_REDUCE_MAX] = {"reduce_max", 1, 1, 1, DIFF, fgi_infer_reduce, fgi_flops_reduce},
    [FG_OP_ARGMAX] = {"argmax", 1, 1, 1, KEYIN, fgi_infer_argmax, fgi_flops_reduce},
    [FG_OP_SOFTMAX] = {"softmax", 1, 1, 1, DIFF, fgi_infer_softmax, fgi_flops_softmax},
    [FG_OP_LOG_SOFTMAX] = {"log_softmax", 1, 1, 1, DIFF, fgi_infer_softmax, fgi_flops_softmax},
    [FG_OP_SOFTMAX_CROSS_ENTROPY] = {"softmax_cross_entropy", 2, 2, 1, DIFF,
                                     fgi_infer_softmax_cross_entropy,
                                     fgi_flops_softmax_cross_entropy},
    [FG_OP_ASSIGN] = {"assign", 2, 2, 1, STATE, fgi_infer_assign, NULL, 1u},
    /* Ops that gradients and optimizers are built from. The *_like ops take
     * sizes from a tensor rather than an attribute, so an unknown batch
     * dimension is resolved at run time. expand_dims and reshape_like only
     * relabel input 0's bytes (VIEW). numel and group are not differentiable:
     * numel's value does not depend on x's values, and group is control. */
    UNARY(ERF, "erf", EW | INPL | DIFF),
    [FG_OP_EXPAND_DIMS] = {"expand_dims", 1, 1, 1, VIEW | DIFF, fgi_infer_expand_dims, NULL},
    [FG_OP_RESHAPE_LIKE] = {"reshape_like", 2, 2, 1, VIEW | DIFF, fgi_infer_reshape_like, NULL},
    [FG_OP_BROADCAST_LIKE] = {"broadcast_like", 2, 2, 1, DIFF, fgi_infer_broadcast_like, NULL},
    /* A view when nothing is summed (same element count): see plan.c. */
    [FG_OP_SUM_TO] = {"sum_to", 2, 2, 1, DIFF, fgi_infer_sum_to, fgi_flops_sum_to},
    [FG_OP_NUMEL] = {"numel", 1, 1, 1, 0, fgi_infer_numel, NULL},
    [FG_OP_SLICE_GRAD] = {"slice_grad", 2, 2, 1, DIFF, fgi_infer_slice_grad, NULL},
    [FG_OP_GATHER_GRAD] = {"gather_grad", 3, 3, 1, DIFF, fgi_infer_gather_grad,
                           fgi_flops_gather_grad},
    /* Stateful so that pruning never drops it: it exists for its inputs. */
    [FG_OP_GROUP] = {"group", 0, -1, 1, STATE, fgi_infer_group, NULL},
    /* The optimizer updates write their variable inputs in place (bits of
     * mutable_inputs); inputs past the fixed ones are control inputs. */
    [FG_OP_APPLY_SGD] = {"apply_sgd", 3, -1, 1, STATE, fgi_infer_apply, fgi_flops_apply, 0x1u},
    [FG_OP_APPLY_MOMENTUM] = {"apply_momentum", 4, -1, 1, STATE, fgi_infer_apply, fgi_flops_apply,
                              0x3u},
    [FG_OP_APPLY_ADAM] = {"apply_adam", 6, -1, 1, STATE, fgi_infer_apply, fgi_flops_apply, 0x7u},
    /* Data parallelism (graph/infer_dist.c). all_reduce is stateful: it
     * synchronises with other ranks, so no rank may prune it alone. Neither
     * is differentiable: they are inserted after the gradients exist. */
    [FG_OP_ALL_REDUCE] = {"all_reduce", 1, -1, 1, STATE | INPL | COLL, fgi_infer_all_reduce, NULL},
    [FG_OP_SHARD] = {"shard", 1, 1, 1, 0, fgi_infer_shard, NULL},
    [FG_OP_AFTER] = {"after", 1, -1, 1, VIEW, fgi_infer_after, NULL},
    /* The fused updates of fg_data_parallel (graph/infer_optim.c): updates
     * (var in place) and collectives at once. */
    [FG_OP_ALL_REDUCE_APPLY_SGD] = {"all_reduce_apply_sgd", 3, -1, 1, STATE | COLL,
                                    fgi_infer_collective_sgd, fgi_flops_apply, 0x1u},
    [FG_OP_SUFFICIENT_FACTOR_APPLY_SGD] = {"sufficient_factor_apply_sgd", 4, -1, 1, STATE | COLL,
                                           fgi_infer_collective_sgd, fgi_flops_apply, 0x1u},
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
