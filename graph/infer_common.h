/* Helpers shared by the shape-inference functions (graph/infer_*.c) and the
 * declarations of those functions, which graph/op_table.c puts in the table.
 * Internal to graph/: nothing outside the op table calls these directly.
 *
 * Inference runs at build time, where a dimension may be FG_DIM_UNKNOWN, and
 * again at run time with the fed (concrete) shapes, so every rule below
 * treats a negative dimension as "unknown" and checks only what is known. */
#ifndef FG_INFER_COMMON_H
#define FG_INFER_COMMON_H

#include <stdint.h>

#include "graph/op_table.h"

/* Room for one shape or attribute list in a message. */
#define FGI_STR FG_SHAPE_STR_MAX

/* ---- messages ----------------------------------------------------------- */
const char *fgi_opname(const fg_node *n);
/* Sets FG_INVALID_GRAPH with "node '<name>' (<op>): <fmt...>"; returns -1. */
int fgi_fail(const fg_node *n, fg_status *st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* "[2,?,3]" for a tinfo; buf holds FGI_STR chars. */
const char *fgi_shape(const fg_tinfo *t, char *buf);
/* "[0,0]" for a raw integer list (attribute values print as given, -1 as
 * -1); long lists end in "...". buf holds FGI_STR chars. */
const char *fgi_ints(const int64_t *v, int n, char *buf);

/* ---- attributes --------------------------------------------------------- */
/* Each returns 0, or -1 with status set (missing when required, wrong type,
 * value out of range). Absent optional attributes yield the default. */
int fgi_attr_int(const fg_node *n, const char *name, int required, int64_t dflt, int64_t *v,
                 fg_status *st);
/* An int attribute that must be 0 or 1 (absent: 0). */
int fgi_attr_flag(const fg_node *n, const char *name, int *v, fg_status *st);
/* A collective's attributes mean and weighted (graph/infer_dist.c): in[x]
 * is what it reduces; weighted reads inputs first and first + 1. */
int fgi_check_collective(const fg_node *node, const fg_tinfo *in, int x, int first, fg_status *st);
/* FLOAT or INT; must be finite. */
int fgi_attr_float(const fg_node *n, const char *name, double dflt, double *v, fg_status *st);
/* Absent and not required: *v = NULL, *count = -1. */
int fgi_attr_ints(const fg_node *n, const char *name, int required, const int64_t **v, int *count,
                  fg_status *st);
/* Int list attribute `name` as a permutation of input `which` (x)'s dims
 * into perm; messages call it `what` ("perm", "attribute 'perm_a'"). */
int fgi_attr_perm(const fg_node *n, const char *name, const char *what, const fg_tinfo *x,
                  int which, int *perm, fg_status *st);
/* A required int naming a valid dtype. */
int fgi_attr_dtype(const fg_node *n, const char *name, fg_dtype *v, fg_status *st);
/* A required tensor; returns NULL with status set when absent. */
const fg_tensor *fgi_attr_tensor(const fg_node *n, const char *name, fg_status *st);

/* ---- dtypes and axes ---------------------------------------------------- */
int fgi_dtype_valid(int64_t d);
int fgi_is_numeric(fg_dtype d); /* f32, f64, i32, i64 */
int fgi_is_index(fg_dtype d);   /* i32, i64 */
/* Checks in[j].dtype == in[i].dtype, naming both. */
int fgi_same_dtype(const fg_node *n, const fg_tinfo *in, int i, int j, fg_status *st);
/* Normalises `axis` into [0, rank); fails naming the input shape. */
int fgi_axis(const fg_node *n, const char *what, int64_t axis, const fg_tinfo *t, int *out,
             fg_status *st);

/* ---- shapes ------------------------------------------------------------- */
/* NumPy broadcasting of one dimension; negative means unknown. Returns -1
 * when both are known, differ and neither is 1. */
int fgi_broadcast_dim(int64_t a, int64_t b, int64_t *out);
/* Right-aligned broadcast of two dim lists into out (rank max(ra, rb)). On
 * conflict returns -1 with the output dim index and both values. */
int fgi_broadcast_dims(int ra, const int64_t *a, int rb, const int64_t *b, int64_t *out,
                       int *bad_dim, int64_t *va, int64_t *vb);
/* Broadcasts in[i] and in[j] into out's rank/dims (dtype untouched). */
int fgi_broadcast(const fg_node *n, const fg_tinfo *in, int i, int j, fg_tinfo *out, fg_status *st);
/* Fails when the byte size of t, counting unknown dims as 1, overflows. */
int fgi_check_bytes(const fg_node *n, const fg_tinfo *t, fg_status *st);
/* Elements of a fully known shape, saturating at INT64_MAX; -1 if unknown. */
int64_t fgi_elements(const fg_tinfo *t);
/* a * b for non-negative values, saturating at INT64_MAX. */
int64_t fgi_mul_sat(int64_t a, int64_t b);

/* ---- inference and FLOP functions, one per op (or family) --------------- */
#define FGI_DECL_INFER(fn)                                                                         \
  int fn(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status);
#define FGI_DECL_FLOPS(fn) int64_t fn(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out);

/* infer_sources.c */
FGI_DECL_INFER(fgi_infer_placeholder)
FGI_DECL_INFER(fgi_infer_constant) /* also variable */
FGI_DECL_INFER(fgi_infer_fill)
/* random_uniform, random_normal, truncated_normal (infer_sources.c) */
FGI_DECL_INFER(fgi_infer_random)
/* infer_elementwise.c */
FGI_DECL_INFER(fgi_infer_binary) /* arithmetic, pow and comparisons, by node->op */
FGI_DECL_INFER(fgi_infer_select)
FGI_DECL_INFER(fgi_infer_unary) /* float, numeric or any dtype, by node->op */
FGI_DECL_INFER(fgi_infer_clip)  /* unary, and min <= max */
FGI_DECL_INFER(fgi_infer_cast)
FGI_DECL_FLOPS(fgi_flops_elementwise)
/* infer_linalg.c */
FGI_DECL_INFER(fgi_infer_matmul)
FGI_DECL_INFER(fgi_infer_reshape)
FGI_DECL_INFER(fgi_infer_transpose)
FGI_DECL_INFER(fgi_infer_concat)
FGI_DECL_INFER(fgi_infer_slice)
FGI_DECL_INFER(fgi_infer_gather)
FGI_DECL_INFER(fgi_infer_one_hot)
FGI_DECL_FLOPS(fgi_flops_matmul)
/* infer_reduce.c */
FGI_DECL_INFER(fgi_infer_reduce) /* reduce_sum, reduce_mean, reduce_max */
FGI_DECL_INFER(fgi_infer_argmax)
FGI_DECL_FLOPS(fgi_flops_reduce)
/* infer_nn.c */
FGI_DECL_INFER(fgi_infer_softmax) /* also log_softmax */
FGI_DECL_INFER(fgi_infer_softmax_cross_entropy)
FGI_DECL_INFER(fgi_infer_softmax_cross_entropy_grad)
FGI_DECL_INFER(fgi_infer_softmax_cross_entropy_and_grad)
FGI_DECL_FLOPS(fgi_flops_softmax_cross_entropy_and_grad)
FGI_DECL_INFER(fgi_infer_assign)
FGI_DECL_FLOPS(fgi_flops_softmax)
FGI_DECL_FLOPS(fgi_flops_softmax_cross_entropy)

/* infer_reduce2.c */
FGI_DECL_INFER(fgi_infer_logsumexp)
FGI_DECL_INFER(fgi_infer_cumsum)
FGI_DECL_INFER(fgi_infer_topk)
FGI_DECL_INFER(fgi_infer_topk_grad)
FGI_DECL_FLOPS(fgi_flops_logsumexp)

/* infer_dist.c */
FGI_DECL_INFER(fgi_infer_all_reduce)
FGI_DECL_INFER(fgi_infer_shard)
/* infer_optim.c: all_reduce_apply_sgd, sufficient_factor_apply_sgd */
FGI_DECL_INFER(fgi_infer_collective_sgd)
/* infer_optim.c: matmul_apply_sgd */
FGI_DECL_INFER(fgi_infer_matmul_apply_sgd)
FGI_DECL_FLOPS(fgi_flops_matmul_apply_sgd)
/* infer_pool.c: the pools (x) and their gradients (dy, x) */
FGI_DECL_INFER(fgi_infer_pool)
FGI_DECL_INFER(fgi_infer_pool_grad)
FGI_DECL_FLOPS(fgi_flops_pool)
FGI_DECL_INFER(fgi_infer_resize)      /* infer_resize.c */
FGI_DECL_INFER(fgi_infer_resize_grad) /* infer_resize.c */
FGI_DECL_FLOPS(fgi_flops_resize)      /* infer_resize.c */

/* infer_norm.c: batch_norm and its update and gradient; layer_norm,
 * group_norm and instance_norm (one infer for the latter two) and their
 * gradients */
FGI_DECL_INFER(fgi_infer_batch_norm)
FGI_DECL_INFER(fgi_infer_batch_norm_update)
FGI_DECL_INFER(fgi_infer_batch_norm_grad)
FGI_DECL_INFER(fgi_infer_layer_norm)
FGI_DECL_INFER(fgi_infer_layer_norm_grad)
FGI_DECL_INFER(fgi_infer_group_norm)
FGI_DECL_INFER(fgi_infer_group_norm_grad)
FGI_DECL_FLOPS(fgi_flops_norm)
/* infer_conv.c: conv2d, conv2d_grad_input, conv2d_grad_weight, conv_transpose2d */
FGI_DECL_INFER(fgi_infer_conv)
FGI_DECL_FLOPS(fgi_flops_conv)

/* ---- parse hooks (fg_parse_fn), beside each op's inference -------------- */
#define FGI_DECL_PARSE(fn)                                                                         \
  int fn(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *status);
/* Only ops whose attributes need their input shapes (negative axes) have
 * hooks; scalar attributes reach their fields through FG_PARAM rows. */
FGI_DECL_PARSE(fgi_parse_transpose) /* infer_linalg.c */
FGI_DECL_PARSE(fgi_parse_concat)
FGI_DECL_PARSE(fgi_parse_slice)  /* also slice_grad */
FGI_DECL_PARSE(fgi_parse_reduce) /* infer_reduce.c */
FGI_DECL_PARSE(fgi_parse_argmax)
FGI_DECL_PARSE(fgi_parse_softmax) /* infer_nn.c; also log_softmax */
FGI_DECL_PARSE(fgi_parse_random)  /* infer_sources.c */
FGI_DECL_PARSE(fgi_parse_cumsum)  /* infer_reduce2.c */
FGI_DECL_PARSE(fgi_parse_topk)
FGI_DECL_PARSE(fgi_parse_topk_grad)
FGI_DECL_PARSE(fgi_parse_pool2d)        /* infer_pool.c: max/avg_pool2d and their gradients */
FGI_DECL_PARSE(fgi_parse_resize)        /* infer_resize.c: the resize ops and their gradients */
FGI_DECL_PARSE(fgi_parse_instance_norm) /* infer_norm.c: num_groups = C */
/* infer_dropout.c: training_flag, dropout, dropout_grad, variable */
FGI_DECL_INFER(fgi_infer_training_flag)
FGI_DECL_INFER(fgi_infer_dropout) /* also dropout_grad */
FGI_DECL_INFER(fgi_infer_variable)
FGI_DECL_PARSE(fgi_parse_dropout)
FGI_DECL_PARSE(fgi_parse_conv) /* infer_conv.c; all four conv ops */
/* infer_logical.c: logical_not, logical_and, logical_or */
FGI_DECL_INFER(fgi_infer_logical)
/* infer_fused_matmul.c: fused_matmul, and the activation attribute it
 * shares with fused_conv2d: the fg_activation a node names (absent: none;
 * clip only where allow_clip, as fused_conv2d's), or -1 after failing with
 * a status that names the node and the value. */
int fgi_activation(const fg_node *node, int allow_clip, fg_status *st);
/* infer_elementwise.c: clip's float attributes min and max, both present
 * and min <= max; 0, or -1 with a status naming the node. */
int fgi_clip_bounds(const fg_node *node, double *lo, double *hi, fg_status *status);
FGI_DECL_INFER(fgi_infer_fused_matmul)
FGI_DECL_FLOPS(fgi_flops_fused_matmul)
FGI_DECL_PARSE(fgi_parse_fused_matmul)
/* infer_permuted_matmul.c: the transpose_matmul pass's product */
FGI_DECL_INFER(fgi_infer_permuted_matmul)
FGI_DECL_FLOPS(fgi_flops_permuted_matmul)
FGI_DECL_PARSE(fgi_parse_permuted_matmul)
/* infer_fused_conv.c: fused_conv2d, fused_conv2d_add */
FGI_DECL_INFER(fgi_infer_fused_conv)
FGI_DECL_FLOPS(fgi_flops_fused_conv)
FGI_DECL_PARSE(fgi_parse_fused_conv)
/* infer_fused.c: fused_elementwise, from its program */
FGI_DECL_INFER(fgi_infer_fused)
FGI_DECL_PARSE(fgi_parse_fused)
FGI_DECL_FLOPS(fgi_flops_fused)
/* infer_matmul_grad.c: fused_matmul_relu_grad, matmul_bias_grad */
FGI_DECL_INFER(fgi_infer_fused_matmul_relu_grad)
FGI_DECL_FLOPS(fgi_flops_fused_matmul_relu_grad)
FGI_DECL_INFER(fgi_infer_matmul_bias_grad)
FGI_DECL_FLOPS(fgi_flops_matmul_bias_grad)
#undef FGI_DECL_PARSE

#undef FGI_DECL_INFER
#undef FGI_DECL_FLOPS

#endif
