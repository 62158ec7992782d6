/* Host-side shape logic that the CPU kernels (kernels/cpu/) and the CUDA
 * kernels (kernels/cuda/) share: argument checks, error text, the broadcast
 * planner and the matmul, reduction and sum_to plans. The functions are
 * defined once, in kernels/cpu/, and the CUDA host code calls them, so the
 * two backends accept the same shapes and fail with the same messages.
 * Valid C and C++ (nvcc compiles .cu files as C++). Not part of the kernel
 * ABI. */
#ifndef FG_KERNEL_SHAPE_H
#define FG_KERNEL_SHAPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/kernel.h"

/* Dtype sets for the registries' X-macros: a kernel named base_f32,
 * base_f64, ... per dtype, or one dtype-agnostic function registered for
 * every dtype (ANY). */
#define FGK_FLOAT(X, op, base) X(op, FG_F32, base##_f32) X(op, FG_F64, base##_f64)
#define FGK_NUM(X, op, base)                                                                       \
  FGK_FLOAT(X, op, base) X(op, FG_I32, base##_i32) X(op, FG_I64, base##_i64)
#define FGK_ALL(X, op, base) FGK_NUM(X, op, base) X(op, FG_BOOL, base##_bool)
#define FGK_ANY(X, op, fn)                                                                         \
  X(op, FG_F32, fn) X(op, FG_F64, fn) X(op, FG_I32, fn) X(op, FG_I64, fn) X(op, FG_BOOL, fn)

/* The kernels that the CPU (fgk_ prefix, kernels/cpu/) and CUDA (fgc_,
 * kernels/cuda/) registries list alike: P##_name is that backend's kernel. */
#define FGK_SHARED_KERNELS(X, P)                                                                   \
  /* reduce.c(u) */                                                                                \
  FGK_NUM(X, "reduce_min", P##_reduce_min)                                                         \
  FGK_NUM(X, "reduce_prod", P##_reduce_prod)                                                       \
  FGK_NUM(X, "argmin", P##_argmin)                                                                 \
  /* reduce2.c(u) */                                                                               \
  FGK_FLOAT(X, "logsumexp", P##_logsumexp)                                                         \
  FGK_NUM(X, "cumsum", P##_cumsum)                                                                 \
  FGK_NUM(X, "topk", P##_topk)                                                                     \
  FGK_FLOAT(X, "topk_grad", P##_topk_grad)                                                         \
  /* shape_copy.c(u); flatten and squeeze only relabel the bytes */                                \
  FGK_ANY(X, "pad", P##_pad)                                                                       \
  FGK_NUM(X, "pad_grad", P##_pad_grad)                                                             \
  FGK_ANY(X, "flatten", P##_copy)                                                                  \
  FGK_ANY(X, "squeeze", P##_copy)                                                                  \
  FGK_ANY(X, "expand", P##_broadcast_like)                                                         \
  FGK_ANY(X, "tile", P##_tile)                                                                     \
  FGK_NUM(X, "tile_grad", P##_tile_grad)                                                           \
  FGK_ANY(X, "split", P##_split)                                                                   \
  FGK_ANY(X, "stack", P##_stack)                                                                   \
  /* pool.c(u) */                                                                                  \
  FGK_FLOAT(X, "max_pool2d", P##_max_pool2d)                                                       \
  FGK_FLOAT(X, "avg_pool2d", P##_avg_pool2d)                                                       \
  FGK_FLOAT(X, "global_avg_pool", P##_global_avg_pool)                                             \
  FGK_FLOAT(X, "global_max_pool", P##_global_max_pool)                                             \
  FGK_FLOAT(X, "adaptive_avg_pool2d", P##_adaptive_avg_pool2d)                                     \
  FGK_FLOAT(X, "max_pool2d_grad", P##_max_pool2d_grad)                                             \
  FGK_FLOAT(X, "avg_pool2d_grad", P##_avg_pool2d_grad)                                             \
  FGK_FLOAT(X, "adaptive_avg_pool2d_grad", P##_adaptive_avg_pool2d_grad)                           \
  FGK_FLOAT(X, "global_max_pool_grad", P##_global_max_pool_grad)                                   \
  /* resize.c(u) */                                                                                \
  FGK_FLOAT(X, "resize_nearest", P##_resize_nearest)                                               \
  FGK_FLOAT(X, "resize_linear", P##_resize_linear)                                                 \
  FGK_FLOAT(X, "resize_nearest_grad", P##_resize_nearest_grad)                                     \
  FGK_FLOAT(X, "resize_linear_grad", P##_resize_linear_grad)                                       \
  /* norm.c(u); instance_norm is group_norm with C groups (its parse hook) */                      \
  FGK_FLOAT(X, "batch_norm", P##_batch_norm)                                                       \
  FGK_FLOAT(X, "batch_norm_update_stats", P##_batch_norm_update_stats)                             \
  FGK_FLOAT(X, "batch_norm_grad", P##_batch_norm_grad)                                             \
  FGK_FLOAT(X, "layer_norm", P##_layer_norm)                                                       \
  FGK_FLOAT(X, "layer_norm_grad", P##_layer_norm_grad)                                             \
  FGK_FLOAT(X, "group_norm", P##_group_norm)                                                       \
  FGK_FLOAT(X, "group_norm_grad", P##_group_norm_grad)                                             \
  FGK_FLOAT(X, "instance_norm", P##_group_norm)                                                    \
  /* dropout.c(u); training_flag writes a bool, other keys so every op has f32/f64 */              \
  FGK_ANY(X, "training_flag", P##_training_flag)                                                   \
  FGK_FLOAT(X, "dropout", P##_dropout)                                                             \
  FGK_FLOAT(X, "dropout_grad", P##_dropout_grad)                                                   \
  /* conv.c(u) */                                                                                  \
  FGK_FLOAT(X, "conv2d", P##_conv2d)                                                               \
  FGK_FLOAT(X, "conv2d_grad_input", P##_conv2d_grad_input)                                         \
  FGK_FLOAT(X, "conv2d_grad_weight", P##_conv2d_grad_weight)                                       \
  FGK_FLOAT(X, "conv_transpose2d", P##_conv_transpose2d)

/* Writes a printf-style message to ctx->err (when there is room) and
 * returns -1, so a kernel can `return fgk_fail(ctx, ...)`. (common.c) */
int fgk_fail(const fg_kctx *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Checks that at least n_in inputs and n_out outputs are present with
 * ranks in [0, FG_MAX_RANK], so that a mis-wired call fails with a message
 * instead of reading out of bounds. 0 or -1 (ctx->err written). */
int fgk_check(const fg_kctx *ctx, int n_in, int n_out);

/* Elements of a buffer; the executor has already checked the product. */
static inline int64_t fgk_numel(const fg_kbuf *b) {
  int64_t n = 1;
  for (int i = 0; i < b->rank; i++)
    n *= b->dims[i] > 0 ? b->dims[i] : 0;
  return n;
}

/* Fails unless inputs 0..n_in-1 have the output's dtype. */
static inline int fgk_same_dtypes(const fg_kctx *ctx, int n_in) {
  for (int i = 0; i < n_in; i++)
    if (ctx->in[i].dtype != ctx->out[0].dtype)
      return fgk_fail(ctx, "input %d is %s, the output %s", i, fg_dtype_name(ctx->in[i].dtype),
                      fg_dtype_name(ctx->out[0].dtype));
  return 0;
}

/* The dims before and after `axis` multiplied out (softmax, argmax). */
static inline void fgk_axis_split(const fg_kbuf *b, int axis, int64_t *outer, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  for (int i = 0; i < axis; i++)
    *outer *= b->dims[i];
  for (int i = axis + 1; i < b->rank; i++)
    *inner *= b->dims[i];
}

/* A broadcast walk over the output with up to three operands. After
 * fgk_bcast_init the dims are coalesced (size-1 dims dropped, runs that are
 * contiguous for every operand merged), so the common shapes become one
 * flat loop; rank is at least 1. strides[k][i] is operand k's element
 * stride along dim i, 0 where it broadcasts. The CUDA kernels take it by
 * value (fgc_walk). */
typedef struct fgk_bcast {
  int rank, n_ops;
  int64_t dims[FG_MAX_RANK];
  int64_t strides[3][FG_MAX_RANK];
} fgk_bcast;
/* Broadcasts inputs 0..n_ops-1 to out[0] (NumPy rules), then coalesces. */
int fgk_bcast_init(const fg_kctx *ctx, int n_ops, fgk_bcast *bc);
/* The coalescing step alone, for walks that are not broadcasts (transpose,
 * slice): the output is C-order over dims, operand k steps strides[k]. */
void fgk_walk_init(fgk_bcast *bc, int n_ops, int rank, const int64_t *dims,
                   int64_t (*strides)[FG_MAX_RANK]);

/* matmul's shapes: out[..., M, N] = op(a)[..., M, K] @ op(b)[..., K, N]
 * with the batch dims broadcast NumPy-style to out's. (matmul.c) */
typedef struct fgk_mm_plan {
  int64_t M, N, K;
  int ta, tb;
  int nb; /* batch rank (out rank - 2) */
  int64_t bdims[FG_MAX_RANK];
  int64_t a_bstride[FG_MAX_RANK], b_bstride[FG_MAX_RANK]; /* 0 where broadcast */
  int64_t batch, a_batch, b_batch;                        /* matrices in out, a, b */
  /* Row-major leading dims: a's is the stride of its rows (of its columns
   * when ta), b's likewise, out's of the product's rows; o_bstride: out's
   * batch strides. matmul's are the packed ones (K or M, N or K, N; batches
   * M * N apart); permuted_matmul's are its operands' and output's strides,
   * and then `strided` is 1. */
  int64_t lda, ldb, ldc;
  int strided;
  int64_t o_bstride[FG_MAX_RANK];
} fgk_mm_plan;
/* Checks the matmul's inputs (dtype dt) and fills pl. 0 or -1. */
int fgk_mm_plan_init(const fg_kctx *ctx, fg_dtype dt, fgk_mm_plan *pl);
/* The same with the transposes given (fused_matmul's), and fused_matmul's
 * bias (input 2) checked: dtype dt, shape [N]. */
int fgk_mm_plan_init_tr(const fg_kctx *ctx, fg_dtype dt, int ta, int tb, fgk_mm_plan *pl);
int fgk_mm_check_bias(const fg_kctx *ctx, fg_dtype dt, const fgk_mm_plan *pl);
/* permuted_matmul's plan (ctx->p->permuted_matmul): the operands and the
 * output read and written where they lie, through their strides.
 * (kernels/cpu/matmul_permuted.c) 0 or -1. */
int fgk_mm_plan_init_permuted(const fg_kctx *ctx, fg_dtype dt, fgk_mm_plan *pl);
/* fused_matmul_relu_grad's y (input 2): dtype dt and the output's shape.
 * 0 or -1. (kernels/cpu/matmul.c) */
int fgk_mm_check_mask(const fg_kctx *ctx, fg_dtype dt);
/* matmul_bias_grad's inputs and outputs (dtype dt). 0 or -1.
 * (kernels/cpu/matmul_grad.c) */
int fgk_matmul_bias_grad_check(const fg_kctx *ctx, fg_dtype dt);
/* matmul_bias_grad as matmul's kernel (transpose_a) into output 0, then
 * sum_to's into output 1: the CPU's kernel, and the GPU's where cuBLASLt
 * does not take the product. 0 or -1. (kernels/cpu/matmul_grad.c) */
int fgk_matmul_bias_grad_split(const fg_kctx *ctx, fg_kernel_fn matmul, fg_kernel_fn sum_to);

/* A reduction over p->axes with the input dims coalesced into alternating
 * kept/reduced groups (size-1 dims dropped, neighbours of the same kind
 * merged). (reduce.c) */
typedef struct fgk_red_plan {
  int n_outer, n_red;
  int64_t outer_dims[FG_MAX_RANK], outer_str[FG_MAX_RANK];
  int64_t red_dims[FG_MAX_RANK], red_str[FG_MAX_RANK];
  int64_t outer_total; /* output elements / inner */
  int64_t inner;       /* innermost kept group (stride 1), or 1 */
  int64_t count;       /* reduced elements per output */
} fgk_red_plan;
/* Checks the reduction's input and output (dtype dt) and fills pl: 1 when
 * there is work, 0 when the output is empty or the input is (the caller
 * then writes the empty-set value), -1 on error. */
int fgk_red_plan_init(const fg_kctx *ctx, fg_dtype dt, fgk_red_plan *pl);

/* sum_to through a reduce_sum kernel of the backend: reduce_sum over x's
 * leading extra dims and the dims where the output has 1 and x does not,
 * keepdims. (grad_ops.c) */
int fgk_sum_to(const fg_kctx *ctx, fg_kernel_fn reduce);

/* Per-op checks of dtypes and shapes, run after fgk_check (or fgc_check),
 * so both backends refuse the same calls with the same text: 0, or -1 with
 * ctx->err written. The index values of gather and one_hot are not checked
 * here (the CPU checks them on the host, CUDA on the device). */
int fgk_concat_check(const fg_kctx *ctx);               /* shape_ops.c */
int fgk_cast_check(const fg_kctx *ctx, fg_dtype dt);    /* shape_ops.c; dt: output */
int fgk_one_hot_check(const fg_kctx *ctx, fg_dtype dt); /* shape_ops.c; dt: output */
/* softmax_cross_entropy's buffers (the loss: output 0), and
 * softmax_cross_entropy_grad's: dtypes and shapes (softmax.c). */
int fgk_xent_check(const fg_kctx *ctx, fg_dtype dt);
int fgk_xent_grad_check(const fg_kctx *ctx, fg_dtype dt);
int fgk_gather_check(const fg_kctx *ctx); /* shape_ops.c */
int fgk_select_check(const fg_kctx *ctx); /* binary.c */
/* logical.c: inputs 0..n_in-1 and the output bool. */
int fgk_logical_check(const fg_kctx *ctx, int n_in);
/* Inputs 0..n-1 (var, state, grad) and the output: the variable's dtype dt
 * and element count. (optim.c) */
int fgk_optim_check(const fg_kctx *ctx, fg_dtype dt, int n);
/* The weight-gradient factors of sufficient_factor_apply_sgd and
 * matmul_apply_sgd: in[1] (a) [rows, m] and in[3] (b) [rows, n] of var's
 * dtype for var (in[0]) [m, n], the gradient a^T b; 0 with *rows set,
 * else the kernel's failure. (optim.c) */
int fgk_sgd_product_check(const fg_kctx *ctx, int64_t *rows);
/* transpose (shape_ops.c): src[i] = the input's element stride along
 * output dim i. */
int fgk_transpose_check(const fg_kctx *ctx, int64_t *src);
/* slice (shape_ops.c): the output is the block at p->begin of the input;
 * *base is its first element's offset, st[] the input's C-order strides. */
int fgk_slice_check(const fg_kctx *ctx, int64_t *base, int64_t *st);
/* slice_grad (grad_ops.c): dy is the block at p->begin of the output;
 * *base is its first element's offset, st[] the output's C-order strides. */
int fgk_slice_grad_check(const fg_kctx *ctx, int64_t *base, int64_t *st);
/* cumsum (reduce2.c): one dtype dt in and out, of one shape, and
 * p->cumsum.axis in range; outer, A (the axis's dim) and inner. */
int fgk_cumsum_check(const fg_kctx *ctx, fg_dtype dt, int64_t *outer, int64_t *A, int64_t *inner);
/* topk (reduce2.c): x and values of dtype dt, i64 indices, the outputs x's
 * shape with p->topk.k at p->topk.axis; outer, A and inner of x. */
int fgk_topk_check(const fg_kctx *ctx, fg_dtype dt, int64_t *outer, int64_t *A, int64_t *inner);
/* topk_grad (reduce2.c): dy (dt) and i64 indices of one shape, like's but
 * for K <= A at p->topk.axis, the output dt in like's shape. The index
 * values are not checked here. */
int fgk_topk_grad_check(const fg_kctx *ctx, fg_dtype dt, int64_t *outer, int64_t *A, int64_t *K,
                        int64_t *inner);

/* The normalization ops (kernels/cpu/norm.c): x seen as [N, G, Cg, S]
 * (batch_norm: G = 1, Cg = C; layer_norm: N rows of Cg = the normalised
 * size, G = S = 1; group_norm: Cg = C / G). fgk_norm_check checks the
 * op's inputs and outputs (dtype dt, element counts) for op `op` (a
 * FGK_NORM_* value) and fills g. The training flag is read by the caller
 * (it may live on the device). */
enum {
  FGK_NORM_BN,
  FGK_NORM_BN_GRAD,
  FGK_NORM_LAYER,
  FGK_NORM_LAYER_GRAD,
  FGK_NORM_GROUP,
  FGK_NORM_GROUP_GRAD,
  FGK_NORM_BN_UPDATE
};
typedef struct fgk_norm_geom {
  int64_t N, G, Cg, S;
} fgk_norm_geom;
int fgk_norm_check(const fg_kctx *ctx, int op, fg_dtype dt, fgk_norm_geom *g);

#ifdef __cplusplus
}
#endif

#endif
