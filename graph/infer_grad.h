/* Declarations of the shape-inference and FLOP functions of the ops that
 * gradients and optimizers are built from (graph/infer_grad.c and
 * graph/infer_optim.c), for the op table. Internal to graph/. */
#ifndef FG_INFER_GRAD_H
#define FG_INFER_GRAD_H

#include "graph/infer_common.h"

#define FGI_DECL_INFER(fn)                                                                         \
  int fn(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status);
#define FGI_DECL_FLOPS(fn) int64_t fn(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out);

/* infer_grad.c */
FGI_DECL_INFER(fgi_infer_expand_dims)
FGI_DECL_INFER(fgi_infer_reshape_like)
FGI_DECL_INFER(fgi_infer_broadcast_like)
FGI_DECL_INFER(fgi_infer_sum_to)
FGI_DECL_INFER(fgi_infer_numel)
FGI_DECL_INFER(fgi_infer_gather_grad)
FGI_DECL_INFER(fgi_infer_group)
FGI_DECL_INFER(fgi_infer_after)
FGI_DECL_FLOPS(fgi_flops_sum_to)
FGI_DECL_FLOPS(fgi_flops_gather_grad)
/* infer_optim.c */
FGI_DECL_INFER(fgi_infer_apply) /* apply_sgd, apply_momentum, apply_adam, by node->op */
FGI_DECL_FLOPS(fgi_flops_apply)
FGI_DECL_INFER(fgi_infer_multi_apply) /* multi_apply_sgd, _momentum, _adam */
FGI_DECL_FLOPS(fgi_flops_multi_apply)

/* infer_linalg.c (beside slice, whose rules it shares) */
FGI_DECL_INFER(fgi_infer_slice_grad)

#undef FGI_DECL_INFER
#undef FGI_DECL_FLOPS

#endif
