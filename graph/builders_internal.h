/* Internal builders for the ops that gradients and optimizers are built
 * from (graph/op_table.h lists their inputs and attributes). Used by
 * autodiff/ and the optimizers; not part of the public API. Like the public
 * builders, each appends one automatically named node (carrying the graph's
 * name scope) via fg_op(), and errors stick to the graph. */
#ifndef FG_BUILDERS_INTERNAL_H
#define FG_BUILDERS_INTERNAL_H

#include "flowgraph/graph.h"

/* fg_op with optional attributes a (NULL for none), which it frees; bad:
 * an attribute setter failed, reported once here as out of memory instead
 * of after every setter. */
fg_output fg_build_finish(fg_graph *g, const char *op, const fg_output *in, int n, fg_attrs *a,
                          int bad);
/* fg_op with one int attribute; nothing when g is NULL or failed. */
fg_output fg_build_int(fg_graph *g, const char *op, const fg_output *in, int n, const char *attr,
                       int64_t v);

fg_output fg_erf(fg_graph *g, fg_output x);
/* Size-1 dims at `axes`, positions in the output (negative from its end). */
fg_output fg_expand_dims(fg_graph *g, fg_output x, const int64_t *axes, int n_axes);
fg_output fg_reshape_like(fg_graph *g, fg_output x, fg_output like);
fg_output fg_broadcast_like(fg_graph *g, fg_output x, fg_output like);
fg_output fg_sum_to(fg_graph *g, fg_output x, fg_output like);
/* Rank-0 tensor of `dtype` (f32, f64, i32, i64): x's element count. */
fg_output fg_numel(fg_graph *g, fg_output x, fg_dtype dtype);
/* begin/size are the forward slice's attributes (rank entries each). */
fg_output fg_slice_grad(fg_graph *g, fg_output dy, fg_output like, int rank, const int64_t *begin,
                        const int64_t *size);
/* like: the gather's params. */
fg_output fg_gather_grad(fg_graph *g, fg_output dy, fg_output indices, fg_output like);
/* topk's gradient: zeros of like's shape (the topk's x) with dy added at
 * indices along axis (the topk's, negative from the end). */
fg_output fg_topk_grad(fg_graph *g, fg_output dy, fg_output indices, fg_output like, int axis);
/* n may be 0 (inputs may then be NULL). */
fg_output fg_group(fg_graph *g, const fg_output *inputs, int n);

/* Optimizer updates; var, buf, m and v must be variable outputs. `ctrl`
 * (n_ctrl entries, NULL when 0) only orders the update after them.
 * apply_adam's weight_decay is AdamW's (decoupled); its attribute "l2"
 * (float, default 0, set through fg_op) adds l2 * var to the gradient, as
 * torch.optim.Adam's weight_decay. */
fg_output fg_apply_sgd(fg_graph *g, fg_output var, fg_output grad, fg_output lr,
                       const fg_output *ctrl, int n_ctrl);
fg_output fg_apply_momentum(fg_graph *g, fg_output var, fg_output buf, fg_output grad, fg_output lr,
                            double momentum, int nesterov, const fg_output *ctrl, int n_ctrl);
fg_output fg_apply_adam(fg_graph *g, fg_output var, fg_output m, fg_output v, fg_output grad,
                        fg_output lr, fg_output step, double beta1, double beta2, double epsilon,
                        double weight_decay, const fg_output *ctrl, int n_ctrl);

#endif
