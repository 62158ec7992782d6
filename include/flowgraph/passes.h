/* flowgraph: graph optimization passes.
 *
 * A pass rewrites a graph into one that computes the same values with less
 * work. Sessions run the default pipeline (the passes on by default, in
 * the order fg_pass_name lists them) on their own copy of the graph when
 * they sync with it, after autodiff and the dist rewrites (which the user
 * applies to the graph before making the session): the user's fg_graph is
 * never changed. fg_session_options.no_passes and .passes (flowgraph/
 * session.h) choose the passes; the environment variable FG_PASSES=off
 * turns them off for every session of the process, and FG_PASSES=LIST (a
 * pass list as fg_pass_options.passes takes it) runs that list in every
 * session whose options name no list (an unknown name fails the session
 * with the message of fg_pass_list_check).
 *
 * What a pass may do (every pass keeps these):
 * - Fetch names keep working: in a session every node keeps its name and
 *   computes its value; only which equivalent node feeds a consumer
 *   changes (and fold_inference may feed a folded batch norm constants
 *   of the session's own, which no name fetches). fg_optimize keeps
 *   every node it is asked to fetch, every marked graph output, variable,
 *   placeholder and stateful node.
 * - Stateful nodes (variable updates, assign, batch_norm_update_stats,
 *   collectives, the training flag) and random ones (random_*, dropout)
 *   are never merged or removed while their effect is needed; a value
 *   read from a variable is never moved past an update of it.
 * - Results are bit for bit those of the graph without passes, but for
 *   fold_inference's batch norm folding (and what reads a folded batch
 *   norm, see below), the activations pass's silu, gelu and gelu_tanh (a few units
 *   in the last place), update_epilogue's SGD updates (rounded in the GEMM),
 *   the GPU's cuBLASLt epilogues (within rounding, see epilogue and
 *   grad_epilogue), a folded node placed on a GPU, which holds the CPU
 *   kernel's bits, and the sign and payload of a NaN that a fused
 *   addition or multiplication of two NaNs gives (which operand's NaN the
 *   hardware keeps follows the compiler's operand order).
 *
 * The passes (fg_pass_name order is the default pipeline's):
 *   simplify  x*1, x/1, x+(-0.0), x-(+0.0) (any zero for integers): x, when
 *             the constant does not broadcast x to a larger shape and the
 *             dtype is x's; neg(neg(x)), identity, stop_gradient, cast to
 *             the same dtype, a transpose of a transpose (composed; the
 *             identity permutation removed), a reshape of a reshape, and
 *             shape ops whose output type is x's (reshape, reshape_like,
 *             flatten, squeeze, expand; broadcast_like and sum_to when
 *             every dim is known). x+0.0 with a float +0.0 is kept: it
 *             turns -0.0 into +0.0. avg_pool2d(pad(x, 0)) (constant zero
 *             pads on H and W only, each within kernel / 2; the pool
 *             without pads of its own, in floor mode) is avg_pool2d(x)
 *             with the pad's pads and count_include_pad 1: every window
 *             lies in the padded input, so the divisor is the window's
 *             size either way, and the zeros add nothing (same bits).
 *   fold      a node whose inputs are all constants is evaluated once
 *             with its CPU kernel and becomes a constant of its name
 *             (chains fold whole). Not folded: stateful, collective and
 *             random nodes, readers of run state, sources, nodes with
 *             several outputs or no inputs, results holding a NaN or an
 *             infinity (check_numerics names the node that makes one),
 *             and outputs over 64 MiB or over 4 times their inputs'
 *             bytes (4 KiB always fold).
 *   fold_inference
 *             dropout whose training input is a constant false is its
 *             input. batch_norm whose training input is a constant false
 *             and whose scale, shift, mean and variance are constants,
 *             reading a conv2d with a constant weight (and bias), becomes
 *             that conv2d with W' = W s and b' = (b - mean) s + shift
 *             (likewise a 2-D matmul by a constant, + a constant bias),
 *             s = scale / sqrt(var + epsilon), in double and rounded once
 *             (not the same bits: within 1e-5 relative in the tests).
 *             fg_optimize writes W' and b' into the conv's weight and a
 *             bias constant, where none of them, nor the batch norm's
 *             other outputs, is fetched. A session (every name
 *             fetchable) on one device puts W' and b' in new constants
 *             of its own ("<bn>/folded_weight", "<bn>/folded_bias"): the
 *             batch norm becomes conv2d (or fused_matmul) on them, the
 *             conv and its constants keep their values, computed when
 *             fetched, and a run fetching the batch norm's statistics
 *             (outputs 1..3) runs the graph without this fold; the conv
 *             must have no other reader. Over several devices W' and b'
 *             are placed on the batch norm's device, which the conv and
 *             the value it reads must share; a GPU session with host
 *             steps folds none. A training flag known per run
 *             (fg_training) and variables are never folded. Such a
 *             batch_norm (constant parameters, constant false mode,
 *             input of rank >= 2) that folds into nothing before it
 *             (after a concat, an add, a pool) becomes fused_elementwise
 *             mul(x, a) then add(., b) with a = scale * (1 / sqrt(var
 *             + epsilon)) and b = shift - mean * a as [C, 1, ..., 1]
 *             constants, each rounded once from double: the CPU batch
 *             norm kernel's own arithmetic, so the same bits, and fuse
 *             joins it with what follows (a relu). On the CPU only for
 *             planes (the dims after C) of 1 element or at least 512:
 *             on smaller ones the fused kernel is the slower. fg_optimize
 *             writes a
 *             and b into the scale and shift constants where nothing
 *             else reads them; a session appends "<bn>/affine_scale" and
 *             "<bn>/affine_shift".
 *   cse       nodes with the same op, typed attributes, inputs, output
 *             types and device compute once.
 *   activations
 *             mul(x, sigmoid(x)) becomes silu(x), and the exact GELU as
 *             exporters write it, mul(mul(x, add(erf(div(x, c)), 1)),
 *             0.5) or mul(mul(x, 0.5), add(erf(div(x, c)), 1)) (either
 *             operand order; c = sqrt(2) in the dtype, or mul by 1 /
 *             sqrt(2) in div's place), becomes gelu(x), and its tanh
 *             form, with add(tanh(mul(add(x, mul(x^3, k)), t)), 1) in
 *             the erf term's place (t = sqrt(2 / pi), k = 0.044715 in
 *             the dtype; x^3 as two muls or pow(x, 3)), gelu_tanh(x):
 *             one op and one exp or erf per element. Not bitwise: silu
 *             divides x by 1 + exp(-x) where the pair rounds the sigmoid
 *             and then multiplies; gelu multiplies by 1 / sqrt(2) where
 *             the pattern divides; gelu_tanh computes x / (1 +
 *             exp(-2u)) where the pattern adds 1 + tanh(u) (within 1e-6
 *             relative in f32 and 1e-12 in f64 in the tests; in f32 the
 *             erf forms give -0 for x below about -5.5, the tanh pattern
 *             below about -5.4, where gelu_tanh keeps the value). The
 *             other nodes of the pattern must have no other reader (so
 *             a training graph, whose gradient reads the sigmoid, keeps
 *             it); the epilogue passes' rules hold.
 *   layer_norm
 *             layer normalization written out, as PyTorch exports
 *             nn.LayerNorm below opset 17: d = x - reduce_mean(x),
 *             d / sqrt(reduce_mean(d * d or pow(d, 2)) + eps), then * scale
 *             and + shift (either operand order), the means over the last
 *             k axes (written from the front or the end), becomes
 *             layer_norm(x, scale, shift) with normalized_rank k and
 *             epsilon eps. Not bitwise: layer_norm sums in double and
 *             scales by 1 / sqrt(v + eps) (within 1e-6 relative in f32
 *             and 1e-12 in f64 of the largest output in the tests). The
 *             pattern's other nodes must have no other reader. Without
 *             the shift, or without both parameters, the pass adds
 *             constants of zeros and ones ("<node>/shift", "<node>/scale";
 *             fg_optimize adds "_1", "_2", ... where the graph has that
 *             name).
 *   xent_grad the gradient autodiff builds for softmax_cross_entropy,
 *             mul(sub(softmax(logits), one_hot(labels)), div(dy,
 *             numel(labels))), becomes one softmax_cross_entropy_grad
 *             node (the mul rewritten in place), whose kernel makes each
 *             row's softmax and the result in one pass with the same
 *             arithmetic (the same bits), where the sub and the div have
 *             no other reader. When the loss softmax_cross_entropy(logits,
 *             labels) is in the graph too and dy is 1 (ones_like, as
 *             autodiff seeds a loss, or a constant 1), the loss node
 *             becomes softmax_cross_entropy_and_grad(logits, labels),
 *             outputs loss and gradient (same bits), read by the
 *             gradient's readers; it makes both whenever it runs.
 *   epilogue  relu(matmul(a, b) + bias) and matmul(a, b) + bias, bias of
 *             shape [N] (the product's last dim, either operand order),
 *             a rank-2 product or a batched one with a rank-2 b and a
 *             not transposed: the last node becomes fused_matmul(a, b,
 *             bias), whose kernel adds the bias and applies the relu to
 *             each tile of the product while it is in cache (the same
 *             bits). Only where the matmul and the add have no other
 *             consumer, none is stateful, all share a device, and in
 *             fg_optimize neither the matmul nor the add is kept; in a
 *             session they stay, computed only when fetched. On a GPU
 *             the f32 product runs through cuBLASLt with the bias and
 *             relu in its epilogue, whose algorithm may sum in another
 *             order than the unfused cuBLAS GEMM: within rounding there,
 *             not bit for bit.
 *   conv_epilogue
 *             relu(conv2d(x, w, b)), conv2d(x, w, b) + z and
 *             relu(conv2d(x, w, b) + z), z of the convolution's output
 *             dtype and shape (either operand order; b optional): the
 *             last node becomes fused_conv2d(x, w, [b]) or
 *             fused_conv2d_add(x, w, z, [b]) (activation "relu" or
 *             "none"), whose kernel adds z and applies the relu to each
 *             part of the convolution's output right after it is
 *             computed (the same bits, on the CPU and the GPU); a clip
 *             in the relu's place (relu6, as imported MobileNets write
 *             it) becomes activation "clip" with its min and max. Under
 *             epilogue's conditions for the conv2d and the add.
 *   update_epilogue
 *             apply_sgd(var, g, lr) whose gradient g is a dense layer's
 *             weight gradient matmul(a, dz, transpose_a) (2-D, read by
 *             nothing else) becomes matmul_apply_sgd(var, a, lr, dz): one
 *             GEMM with alpha -lr and beta 1 into the variable, so g is
 *             never written and read back. Not the same bits: the GEMM
 *             adds -lr times its unrounded sums (within the rounding of
 *             the update's terms). a and dz must not be the variable or
 *             a view of it, nor written between the matmul and the
 *             update.
 *   grad_epilogue
 *             relu's gradient of a product, select(greater(y, 0),
 *             matmul(a, b), 0) with a one-element 0 (either sign) in the
 *             comparison and +0.0 in the select, y, the product and the
 *             select of one type with every dim known: the select becomes
 *             fused_matmul_relu_grad(a, b, y), whose kernel masks each
 *             tile of the product (the same bits; on a GPU the matmul's
 *             cuBLAS product, then a mask kernel). The matmul and the
 *             greater must have no other consumer, the epilogue's other
 *             rules apply. And a dense layer's db = sum_to(dz, [N]) with
 *             the later dw = matmul(a, dz, transpose_a): the matmul
 *             becomes matmul_bias_grad(a, dz) (outputs dw, db; the
 *             sum_to's readers read db), one cuBLASLt call with the
 *             bias-gradient epilogue on a GPU (within rounding), the two
 *             kernels on the CPU (the same bits).
 *   transpose_matmul
 *             matmul(transpose(a, p), transpose(b, q)) and transpose(
 *             matmul(a, b), s), any of the three transposes (attention's
 *             heads split and merged), become one permuted_matmul(a, b)
 *             with perm_a, perm_b and perm_out (the matmul's transpose_a
 *             and transpose_b joined in), whose kernel hands each batch's
 *             matrices to the GEMM where they lie, their strides as the
 *             leading dims: no transposed copy is made. An operand's
 *             transpose folds where it keeps the operand's last axis among
 *             the product's matrix axes, the product's where it keeps the
 *             last axis last; the operands must have one rank. The GEMM
 *             calls are matmul's for the same shapes (the same bits on the
 *             CPU; on a GPU cuBLAS is given other leading dims, within
 *             rounding), so products that matmul runs otherwise are left
 *             alone: at most 8 rows (or unknown), and b shared by every
 *             batch with a not transposed. The folded transposes and the
 *             matmul under a folded transpose follow the epilogue's rules
 *             (no other reader, one device, not kept in fg_optimize).
 *   fuse      element-wise float nodes (add, sub, mul, div, maximum,
 *             minimum, pow, the comparisons read by a select, select and
 *             the unary math and activation ops) with one output shape and
 *             dtype become one fused_elementwise node whose program
 *             applies each node's own element function in node order (the
 *             same bits), reading its outside inputs once. A node joins
 *             its reader's group only when every reader of it is in the
 *             group; one-element constants become program constants. A
 *             fused_elementwise node already in the graph joins as its
 *             whole program (up to 32 instructions in all). The
 *             group's last node is rewritten in place (action "fused",
 *             into "fused_elementwise", rule its ops, "add+relu"); the
 *             others are reported "absorbed" into it and stay fetchable
 *             in a session; fg_optimize never absorbs a node it keeps.
 *   multi_update
 *             a step's apply_sgd, apply_momentum or apply_adam nodes of
 *             one dtype and the same hyper-parameters become one
 *             multi_apply_* node: one parallel loop on the CPU, one
 *             launch per 32 variables on the GPU, each element with the
 *             single update's arithmetic (the same bits). A group holds
 *             at most 2^16 elements of variables on the CPU (2^20 on a
 *             GPU): a multi update waits for all its gradients, holding
 *             their buffers. The first member is rewritten in place; the
 *             others become after(var, multi), which a run may fetch.
 *   dce       nodes nothing needs are removed.
 */
#ifndef FLOWGRAPH_PASSES_H
#define FLOWGRAPH_PASSES_H

#include "flowgraph/graph.h"
#include "flowgraph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_pass_options {
  /* 1: run no pass. 0 (default): run `passes`. */
  int disable;
  /* NULL (default): the default pipeline. Otherwise a comma-separated list
   * of pass names, run in the order given ("" runs none). An unknown name
   * is refused with FG_INVALID_ARGUMENT naming it and the known passes. */
  const char *passes;
} fg_pass_options;

/* The passes, in default pipeline order: i from 0 to fg_pass_count() - 1.
 * Names and descriptions are static strings; out of range gives NULL. */
FG_API int fg_pass_count(void);
FG_API const char *fg_pass_name(int i);
FG_API const char *fg_pass_description(int i);
/* 1 when the default pipeline runs pass i. */
FG_API int fg_pass_default_on(int i);

/* Checks a pass list as fg_pass_options.passes takes it: 0, or -1 with
 * FG_INVALID_ARGUMENT ("unknown pass 'x' (known: simplify, fold, ...)"). */
FG_API int fg_pass_list_check(const char *list, fg_status *status);

/* One rewrite a pass made. Strings are owned by the report. */
typedef struct fg_pass_change {
  const char *pass;   /* "cse" */
  const char *action; /* "removed", "merged", "simplified", "folded", "fused" or "absorbed" */
  const char *node;   /* the node rewritten */
  /* merged, simplified, folded: the output that now stands for the node
   * ("x", "x:1"), or the node itself where it was rewritten in place (a
   * transpose of a transpose becomes one transpose; a folded constant; a
   * batch norm become a conv2d); fused: the node itself (a fused_matmul,
   * softmax_cross_entropy_grad) or "fused_elementwise"; absorbed: the
   * fused node; removed: NULL. */
  const char *into;
  /* simplified, folded: the rule ("x*1", "neg(neg(x))", "dropout in
   * inference mode", "batch_norm(conv2d) into conv2d"); fused: the ops
   * ("matmul+add+relu", "conv2d+add+relu", "add+relu"); else NULL (a
   * constant folded) */
  const char *rule;
} fg_pass_change;

typedef struct fg_pass_report fg_pass_report;
/* The changes in the order they were made; NULL report: 0 and NULL. */
FG_API int fg_pass_report_size(const fg_pass_report *r);
FG_API const fg_pass_change *fg_pass_report_change(const fg_pass_report *r, int i);
/* Accepts NULL. */
FG_API void fg_pass_report_free(fg_pass_report *r);

/* Runs the passes of `opts` (NULL: the default pipeline) on a copy of `g`
 * and returns the optimized graph, new and owned by the caller (free with
 * fg_graph_free); `g` is not changed. `fetches` ("node" or "node:index"),
 * with the graph's marked outputs, say what must stay: without either,
 * every node that nothing consumes does. Variables (with their values),
 * placeholders and stateful nodes always stay. `report` (may be NULL)
 * receives what each pass did, owned by the caller (fg_pass_report_free).
 * On failure NULL, *report NULL and the status set: a graph in error, an
 * unknown fetch (FG_NOT_FOUND), an unknown pass (FG_INVALID_ARGUMENT). */
FG_API fg_graph *fg_optimize(const fg_graph *g, const fg_pass_options *opts,
                             const char *const *fetches, int n_fetches, fg_pass_report **report,
                             fg_status *status);

/* The inference graph of `fetches` ("node" or "node:index"; n_fetches 0:
 * the graph's marked outputs), as TensorFlow's
 * convert_variables_to_constants makes it: only the nodes the fetches
 * read, in the same order and with the same names, attributes and devices,
 * where each variable becomes a constant holding its value (the trained
 * value a saved graph holds; a variable with only an initialiser gets what
 * a session would draw for it). Gradients, optimizer state and update ops
 * that no fetch reads are left out; the fetches are the new graph's marked
 * outputs; metadata is copied but for keys whose value names a node left
 * out (a training graph's "loss", "train_target"). A graph without
 * variables comes out as the subgraph the fetches read (all of it: a
 * copy). Running a fetch of the frozen graph gives the bits the source
 * graph gives with the same feeds, but where a session's fold_inference
 * pass now folds a batch_norm whose training input is a constant false and
 * whose parameters were variables (now constants): within its rounding
 * then. A batch norm reading the training flag (fg_training) is not
 * folded. New graph, owned by the caller (fg_graph_free); `g` is not
 * changed. On failure NULL with the status set: a graph in error, an
 * unknown fetch (FG_NOT_FOUND, with fg_graph_output_hint's hint), no
 * fetches and no marked outputs, or a fetch that reads a node with an
 * effect, such as an update op, assign, a collective or the group of a
 * training step (FG_INVALID_ARGUMENT naming the fetch and the node). */
FG_API fg_graph *fg_freeze(const fg_graph *g, const char *const *fetches, int n_fetches,
                           fg_status *status);

#ifdef __cplusplus
}
#endif
#endif
