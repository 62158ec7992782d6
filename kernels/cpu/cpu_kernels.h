/* Private to kernels/cpu/: the list of CPU kernels (one X-macro that both
 * declares them and fills the registry, so the two cannot drift apart) and
 * the helpers the op families share. Not part of the kernel ABI. */
#ifndef FG_CPU_KERNELS_H
#define FG_CPU_KERNELS_H

#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "flowgraph/types.h"
#include "kernels/kernel.h"
#include "kernels/kernel_shape.h"

/* The dtype sets FGK_FLOAT, FGK_NUM, FGK_ALL and FGK_ANY, and the shape
 * helpers shared with kernels/cuda/, are in kernels/kernel_shape.h. */

/* X(op name, dtype key, function). Registry order is this order. */
#define FGK_KERNELS(X)                                                                             \
  /* elementwise_unary.c */                                                                        \
  FGK_NUM(X, "neg", fgk_neg)                                                                       \
  FGK_FLOAT(X, "exp", fgk_exp)                                                                     \
  FGK_FLOAT(X, "log", fgk_log)                                                                     \
  FGK_FLOAT(X, "sqrt", fgk_sqrt)                                                                   \
  FGK_FLOAT(X, "rsqrt", fgk_rsqrt)                                                                 \
  FGK_NUM(X, "abs", fgk_abs)                                                                       \
  FGK_FLOAT(X, "tanh", fgk_tanh)                                                                   \
  FGK_FLOAT(X, "sigmoid", fgk_sigmoid)                                                             \
  FGK_NUM(X, "relu", fgk_relu)                                                                     \
  FGK_FLOAT(X, "leaky_relu", fgk_leaky_relu)                                                       \
  FGK_FLOAT(X, "elu", fgk_elu)                                                                     \
  FGK_FLOAT(X, "softplus", fgk_softplus)                                                           \
  FGK_FLOAT(X, "selu", fgk_selu)                                                                   \
  FGK_FLOAT(X, "silu", fgk_silu)                                                                   \
  FGK_FLOAT(X, "hard_sigmoid", fgk_hard_sigmoid)                                                   \
  FGK_FLOAT(X, "hard_swish", fgk_hard_swish)                                                       \
  FGK_FLOAT(X, "mish", fgk_mish)                                                                   \
  FGK_NUM(X, "sign", fgk_sign)                                                                     \
  FGK_FLOAT(X, "reciprocal", fgk_reciprocal)                                                       \
  FGK_FLOAT(X, "floor", fgk_floor)                                                                 \
  FGK_FLOAT(X, "ceil", fgk_ceil)                                                                   \
  FGK_FLOAT(X, "round", fgk_round)                                                                 \
  FGK_FLOAT(X, "clip", fgk_clip)                                                                   \
  FGK_FLOAT(X, "gelu", fgk_gelu)                                                                   \
  FGK_FLOAT(X, "gelu_tanh", fgk_gelu_tanh)                                                         \
  /* binary.c */                                                                                   \
  FGK_NUM(X, "add", fgk_add)                                                                       \
  FGK_NUM(X, "sub", fgk_sub)                                                                       \
  FGK_NUM(X, "mul", fgk_mul)                                                                       \
  FGK_NUM(X, "div", fgk_div)                                                                       \
  FGK_FLOAT(X, "pow", fgk_pow)                                                                     \
  FGK_NUM(X, "maximum", fgk_maximum)                                                               \
  FGK_NUM(X, "minimum", fgk_minimum)                                                               \
  FGK_ALL(X, "equal", fgk_equal)                                                                   \
  FGK_ALL(X, "greater", fgk_greater)                                                               \
  FGK_ALL(X, "less", fgk_less)                                                                     \
  FGK_ANY(X, "select", fgk_select)                                                                 \
  /* matmul.c */                                                                                   \
  FGK_NUM(X, "matmul", fgk_matmul)                                                                 \
  /* reduce.c */                                                                                   \
  FGK_NUM(X, "reduce_sum", fgk_reduce_sum)                                                         \
  FGK_NUM(X, "reduce_mean", fgk_reduce_mean)                                                       \
  FGK_NUM(X, "reduce_max", fgk_reduce_max)                                                         \
  FGK_NUM(X, "argmax", fgk_argmax)                                                                 \
  /* shape_ops.c */                                                                                \
  FGK_ANY(X, "reshape", fgk_copy)                                                                  \
  FGK_ANY(X, "transpose", fgk_transpose)                                                           \
  FGK_ANY(X, "concat", fgk_concat)                                                                 \
  FGK_ANY(X, "slice", fgk_slice)                                                                   \
  FGK_ANY(X, "gather", fgk_gather)                                                                 \
  FGK_ALL(X, "one_hot", fgk_one_hot)                                                               \
  FGK_ALL(X, "cast", fgk_cast)                                                                     \
  /* softmax.c */                                                                                  \
  FGK_FLOAT(X, "softmax", fgk_softmax)                                                             \
  FGK_FLOAT(X, "log_softmax", fgk_log_softmax)                                                     \
  FGK_FLOAT(X, "softmax_cross_entropy", fgk_softmax_xent)                                          \
  /* random.c */                                                                                   \
  FGK_FLOAT(X, "random_uniform", fgk_random_uniform)                                               \
  FGK_FLOAT(X, "random_normal", fgk_random_normal)                                                 \
  FGK_FLOAT(X, "truncated_normal", fgk_truncated_normal)                                           \
  /* misc.c */                                                                                     \
  FGK_ALL(X, "fill", fgk_fill)                                                                     \
  FGK_ANY(X, "identity", fgk_copy)                                                                 \
  FGK_ANY(X, "after", fgk_copy)                                                                    \
  FGK_ANY(X, "stop_gradient", fgk_copy)                                                            \
  FGK_ALL(X, "zeros_like", fgk_zeros_like)                                                         \
  FGK_ALL(X, "ones_like", fgk_ones_like)                                                           \
  FGK_ANY(X, "assign", fgk_assign)                                                                 \
  /* grad_ops.c; expand_dims and reshape_like only relabel the bytes */                            \
  FGK_FLOAT(X, "erf", fgk_erf)                                                                     \
  FGK_ANY(X, "expand_dims", fgk_copy)                                                              \
  FGK_ANY(X, "reshape_like", fgk_copy)                                                             \
  FGK_ANY(X, "broadcast_like", fgk_broadcast_like)                                                 \
  FGK_NUM(X, "sum_to", fgk_sum_to)                                                                 \
  FGK_NUM(X, "numel", fgk_count)                                                                   \
  FGK_ANY(X, "slice_grad", fgk_slice_grad)                                                         \
  FGK_NUM(X, "gather_grad", fgk_gather_grad)                                                       \
  /* group: output always i32; other keys so every op has f32/f64 */                               \
  FGK_ANY(X, "group", fgk_group)                                                                   \
  /* optim.c */                                                                                    \
  FGK_FLOAT(X, "apply_sgd", fgk_apply_sgd)                                                         \
  FGK_FLOAT(X, "apply_momentum", fgk_apply_momentum)                                               \
  FGK_FLOAT(X, "apply_adam", fgk_apply_adam)                                                       \
  /* collective.c */                                                                               \
  FGK_ANY(X, "all_reduce", fgk_all_reduce)                                                         \
  FGK_ANY(X, "shard", fgk_shard)                                                                   \
  /* norm_sync.c: batch_norm's statistics over the device's communicator */                        \
  FGK_FLOAT(X, "sync_batch_norm", fgk_sync_batch_norm)                                             \
  FGK_FLOAT(X, "sync_batch_norm_grad", fgk_sync_batch_norm_grad)                                   \
  X("all_reduce_apply_sgd", FG_F32, fgk_all_reduce_apply_sgd)                                      \
  X("all_reduce_apply_sgd", FG_F64, fgk_all_reduce_apply_sgd)                                      \
  X("sufficient_factor_apply_sgd", FG_F32, fgk_sufficient_factor_apply_sgd)                        \
  X("sufficient_factor_apply_sgd", FG_F64, fgk_sufficient_factor_apply_sgd)                        \
  /* reduce.c, reduce2.c, shape_copy.c, pool.c, resize.c, norm.c, dropout.c, conv.c (oneDNN        \
   * in f32, prepare hooks in FGK_PREPS; direct loops in f64) */                                   \
  FGK_SHARED_KERNELS(X, fgk)                                                                       \
  /* logical.c: bool only, registered under every key (f32 and f64 for every op) */                \
  FGK_ANY(X, "logical_not", fgk_logical_not)                                                       \
  FGK_ANY(X, "logical_and", fgk_logical_and)                                                       \
  FGK_ANY(X, "logical_or", fgk_logical_or)                                                         \
  /* softmax.c */                                                                                  \
  FGK_FLOAT(X, "softmax_cross_entropy_grad", fgk_softmax_xent_grad)                                \
  FGK_FLOAT(X, "softmax_cross_entropy_and_grad", fgk_softmax_xent_and_grad)                        \
  /* matmul.c: matmul with its bias and activation on each tile */                                 \
  FGK_FLOAT(X, "fused_matmul", fgk_fused_matmul)                                                   \
  /* matmul_permuted.c: the transpose_matmul pass's strided product */                             \
  FGK_FLOAT(X, "permuted_matmul", fgk_permuted_matmul)                                             \
  /* fused.c: the fuse pass's programs */                                                          \
  FGK_FLOAT(X, "fused_elementwise", fgk_fused_elementwise)                                         \
  /* optim_multi.c: the multi-tensor updates */                                                    \
  FGK_FLOAT(X, "multi_apply_sgd", fgk_multi_apply_sgd)                                             \
  FGK_FLOAT(X, "multi_apply_momentum", fgk_multi_apply_momentum)                                   \
  FGK_FLOAT(X, "multi_apply_adam", fgk_multi_apply_adam)                                           \
  /* conv.c: the conv_epilogue pass's convolutions (oneDNN in f32, as conv2d) */                   \
  FGK_FLOAT(X, "fused_conv2d", fgk_fused_conv2d)                                                   \
  FGK_FLOAT(X, "fused_conv2d_add", fgk_fused_conv2d_add)                                           \
  /* matmul.c and matmul_grad.c: the grad_epilogue pass's nodes */                                 \
  FGK_FLOAT(X, "fused_matmul_relu_grad", fgk_fused_matmul_relu_grad)                               \
  FGK_FLOAT(X, "matmul_bias_grad", fgk_matmul_bias_grad)                                           \
  /* optim.c: the update_epilogue pass's update */                                                 \
  FGK_FLOAT(X, "matmul_apply_sgd", fgk_matmul_apply_sgd)

/* X(op name, dtype key, prepare, release): the kernels with plan-time
 * state (kernels/kernel.h, fg_kprep). */
#define FGK_PREPS(X)                                                                               \
  X("conv2d", FG_F32, fgk_conv2d_prepare, fgk_conv_release, fgk_conv_bytes)                        \
  X("conv2d_grad_input", FG_F32, fgk_conv2d_grad_input_prepare, fgk_conv_release, fgk_conv_bytes)  \
  X("conv2d_grad_weight", FG_F32, fgk_conv2d_grad_weight_prepare, fgk_conv_release,                \
    fgk_conv_bytes)                                                                                \
  X("conv_transpose2d", FG_F32, fgk_conv_transpose2d_prepare, fgk_conv_release, fgk_conv_bytes)    \
  X("fused_conv2d", FG_F32, fgk_fused_conv2d_prepare, fgk_conv_release, fgk_conv_bytes)            \
  X("fused_conv2d_add", FG_F32, fgk_fused_conv2d_add_prepare, fgk_conv_release, fgk_conv_bytes)

#define FGK_DECLARE_PREP(op, dt, prep, rel, bytes)                                                 \
  int prep(const fg_kctx *ctx, int threads, void **state);                                         \
  void rel(void *state);                                                                           \
  size_t bytes(const void *state, size_t *shared);
FGK_PREPS(FGK_DECLARE_PREP)
#undef FGK_DECLARE_PREP

#define FGK_DECLARE(op, dt, fn) int fn(const fg_kctx *ctx);
FGK_KERNELS(FGK_DECLARE)
#undef FGK_DECLARE

/* optim.c, shared with the fused updates of collective.c: input i, a
 * rank-0 numeric scalar, as a double (0, or the kernel's failure); and the
 * copy of the updated variable into out[0] when a direct caller passed an
 * output buffer other than the variable. */
int fgk_scalar_in(const fg_kctx *ctx, int i, const char *what, double *v);
void fgk_optim_publish(const fg_kctx *ctx, size_t es);
/* var (in[0], [m, n]) -= lr * a^T b of a (in[1]) and b (in[3]), `rows`
 * rows each (fgk_sgd_product_check's), in one GEMM that adds into var:
 * matmul_apply_sgd's update and sufficient_factor_apply_sgd's in a group
 * of one. */
void fgk_sgd_product_apply(const fg_kctx *ctx, double lr, int64_t rows);

/* OpenBLAS's kernels for this CPU (kernels/cpu/blas_core.c): where
 * OpenBLAS fell back to kernels without AVX2 on a CPU with AVX2 and FMA,
 * it is initialised again with the best it has for the CPU. Once per
 * process (at load, and from fg_cpu_kernels_start). */
void fgk_blas_core_start(void);
/* The OpenBLAS core type to force instead of `detected` (its name for the
 * core it chose) on a CPU with AVX2 and FMA (avx2_fma) or AVX-512 F, BW,
 * DQ and VL (avx512): "SkylakeX" or "Haswell" where `detected` has
 * neither kind of kernel; NULL to keep it. */
const char *fgk_blas_core_upgrade(const char *detected, int avx2_fma, int avx512);

/* libxsmm's GEMM for one matmul tile (kernels/cpu/xsmm/xsmm_gemm.c; without
 * libxsmm, kernels/cpu/xsmm/xsmm_none.c declines every tile): row-major
 * o[m, n] = op(a) op(b) with beta 0. Returns 0 when done, -1 when the
 * caller must run OpenBLAS. fgk_xsmm_start runs once, before the first. */
void fgk_xsmm_start(void);
int fgk_xsmm_gemm_f32(int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b, int64_t ldb, float *o, int64_t ldo);
int fgk_xsmm_gemm_f64(int ta, int tb, int64_t m, int64_t n, int64_t k, const double *a, int64_t lda,
                      const double *b, int64_t ldb, double *o, int64_t ldo);

/* c = alpha * a^T b + beta * c, beta 0 or 1 (row-major; a [k, lda] read
 * in its first m columns, b [k, ldb], c [m, ldc]), f32 or f64, in row
 * tiles over ctx's threads (a const fg_kctx *, or NULL: inline); the dims must fit BLAS's
 * index type. The GEMM of the sufficient-factor update (kernels/cpu/collective.c)
 * and of matmul_apply_sgd (optim.c). */
void fgk_gemm_tn(void *ctx, fg_dtype dt, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                 int64_t ldc);

/* ---- shared helpers (common.c) ------------------------------------------ */

/* Defines base##_f32 ... base##_bool, each calling impl(ctx, dtype), for
 * kernels that switch on the dtype inside one implementation. */
#define FGK_PER_DTYPE(base, impl)                                                                  \
  int base##_f32(const fg_kctx *ctx) { return impl(ctx, FG_F32); }                                 \
  int base##_f64(const fg_kctx *ctx) { return impl(ctx, FG_F64); }                                 \
  int base##_i32(const fg_kctx *ctx) { return impl(ctx, FG_I32); }                                 \
  int base##_i64(const fg_kctx *ctx) { return impl(ctx, FG_I64); }                                 \
  int base##_bool(const fg_kctx *ctx) { return impl(ctx, FG_BOOL); }

/* Walks the outer dims of a coalesced broadcast (all but the last),
 * keeping offsets for the operands and the output without dividing.
 * The body (variadic, so it may hold commas) runs once per row with
 * `fgk_off[k]` the operands' row offsets and `fgk_oo` the output row
 * offset; a row has fgk_row_len = bc.dims[bc.rank-1] elements. */
#define FGK_BCAST_ROWS(bc, ...)                                                                    \
  do {                                                                                             \
    int64_t fgk_cnt[FG_MAX_RANK] = {0};                                                            \
    int64_t fgk_off[3] = {0, 0, 0};                                                                \
    int64_t fgk_rows = 1;                                                                          \
    const int fgk_last = (bc).rank - 1;                                                            \
    for (int fgk_d = 0; fgk_d < fgk_last; fgk_d++)                                                 \
      fgk_rows *= (bc).dims[fgk_d];                                                                \
    const int64_t fgk_row_len = (bc).dims[fgk_last];                                               \
    for (int64_t fgk_r = 0; fgk_r < fgk_rows; fgk_r++) {                                           \
      const int64_t fgk_oo = fgk_r * fgk_row_len;                                                  \
      __VA_ARGS__;                                                                                 \
      for (int fgk_d = fgk_last - 1; fgk_d >= 0; fgk_d--) {                                        \
        for (int fgk_k = 0; fgk_k < (bc).n_ops; fgk_k++)                                           \
          fgk_off[fgk_k] += (bc).strides[fgk_k][fgk_d];                                            \
        if (++fgk_cnt[fgk_d] < (bc).dims[fgk_d]) break;                                            \
        for (int fgk_k = 0; fgk_k < (bc).n_ops; fgk_k++)                                           \
          fgk_off[fgk_k] -= (bc).strides[fgk_k][fgk_d] * (bc).dims[fgk_d];                         \
        fgk_cnt[fgk_d] = 0;                                                                        \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* Walks output elements [e0, e1) of a coalesced broadcast, one run at a
 * time, for kernels that split their output over threads: the body runs
 * with `fgk_off[k]` operand k's offset of the run's first element, `fgk_oo`
 * that element's flat output index and `fgk_len` the run's length (it stays
 * inside one row of bc.dims[bc.rank-1] elements). Starting mid-shape costs
 * one division per dim, once per call. The body may `return`. */
#define FGK_BCAST_RANGE(bc, e0, e1, ...)                                                           \
  do {                                                                                             \
    const int fgk_last = (bc).rank - 1;                                                            \
    const int64_t fgk_rl = (bc).dims[fgk_last], fgk_end = (e1);                                    \
    int64_t fgk_cnt[FG_MAX_RANK] = {0};                                                            \
    int64_t fgk_base[3] = {0, 0, 0};                                                               \
    int64_t fgk_e = (e0);                                                                          \
    int64_t fgk_col = fgk_e % fgk_rl;                                                              \
    int64_t fgk_q = fgk_e / fgk_rl;                                                                \
    for (int fgk_d = fgk_last - 1; fgk_d >= 0 && fgk_q > 0; fgk_d--) {                             \
      fgk_cnt[fgk_d] = fgk_q % (bc).dims[fgk_d];                                                   \
      fgk_q /= (bc).dims[fgk_d];                                                                   \
      for (int fgk_k = 0; fgk_k < (bc).n_ops; fgk_k++)                                             \
        fgk_base[fgk_k] += fgk_cnt[fgk_d] * (bc).strides[fgk_k][fgk_d];                            \
    }                                                                                              \
    while (fgk_e < fgk_end) {                                                                      \
      const int64_t fgk_left = fgk_end - fgk_e;                                                    \
      const int64_t fgk_len = fgk_rl - fgk_col < fgk_left ? fgk_rl - fgk_col : fgk_left;           \
      int64_t fgk_off[3];                                                                          \
      for (int fgk_k = 0; fgk_k < (bc).n_ops; fgk_k++)                                             \
        fgk_off[fgk_k] = fgk_base[fgk_k] + fgk_col * (bc).strides[fgk_k][fgk_last];                \
      const int64_t fgk_oo = fgk_e;                                                                \
      (void)fgk_oo;                                                                                \
      __VA_ARGS__;                                                                                 \
      fgk_e += fgk_len;                                                                            \
      fgk_col = 0;                                                                                 \
      for (int fgk_d = fgk_last - 1; fgk_d >= 0; fgk_d--) {                                        \
        for (int fgk_k = 0; fgk_k < (bc).n_ops; fgk_k++)                                           \
          fgk_base[fgk_k] += (bc).strides[fgk_k][fgk_d];                                           \
        if (++fgk_cnt[fgk_d] < (bc).dims[fgk_d]) break;                                            \
        for (int fgk_k = 0; fgk_k < (bc).n_ops; fgk_k++)                                           \
          fgk_base[fgk_k] -= (bc).strides[fgk_k][fgk_d] * (bc).dims[fgk_d];                        \
        fgk_cnt[fgk_d] = 0;                                                                        \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* ---- intra-op parallelism ------------------------------------------------ */

/* Calls fn(arg, begin, end) over [0, n) through ctx->par in chunks of
 * `grain`, or once over the whole range when ctx->par is NULL or n <= grain
 * (small tensors stay on the calling thread: a wake-up costs microseconds).
 * How the range is cut must not change a kernel's results: kernels whose
 * arithmetic depends on grouping (sums) fix their own chunks from the shape
 * alone and parallelise over those. */
void fgk_parallel_for(const fg_kctx *ctx, int64_t n, int64_t grain, fg_krange_fn fn, void *arg);

/* Hot loops are built once per instruction set and the widest the CPU has
 * is picked when the library loads (GCC's function multiversioning, an
 * ifunc): the library targets the baseline x86-64, where these loops run
 * at a quarter of AVX-512's width. The clones are the x86-64 levels v4
 * (AVX-512) and v3 (AVX2 with FMA), so that an explicit fmaf is one
 * instruction in both. The clones compute the same operations in the same
 * order (no contracted multiply-adds: -std=c11 keeps -ffp-contract=off;
 * the polynomials' fmaf is exact in every clone, a libm call in the
 * baseline one), so results do not depend on which one runs. Only
 * compute-bound loops take it (softmax rows, unary math, the fused
 * program's instructions, layer norm's rows, batch norm's forward over
 * NC16 blocks): memory-bound ones measured no faster, and batch norm's
 * gradient over NC16 blocks slower (33 against 38 ms per ResNet-18 CIFAR
 * step). A clone must not call a helper built for the baseline: layer
 * norm's row pass, cloned with its sums left as calls, took 413-553 us
 * on [8, 128, 64] against 77 us uncloned; with them inlined (FGK_INLINE)
 * into the clone, 49 us. Not in sanitizer builds, where the ifunc
 * resolver runs before the runtime. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FGK_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FGK_CLONES
#endif

/* A helper of a cloned loop: inlined, so each clone gets its own copy. */
#if defined(__GNUC__)
#define FGK_INLINE static inline __attribute__((always_inline))
#else
#define FGK_INLINE static inline
#endif

/* A hot interpreter loop whose speed moved with where the linker put it:
 * the fused element-wise kernel's block loop took 9.2 or 11.0 us on
 * op_overhead as its function started at 0 or 16 bytes past a 64-byte
 * line, from builds that differed only in unrelated files. Starting it on
 * a line keeps its loops' alignment the same in every build. */
#if defined(__GNUC__)
#define FGK_HOT_ALIGN __attribute__((aligned(64)))
#else
#define FGK_HOT_ALIGN
#endif

/* Grains, in elements per chunk: about 10-50 us of work, so a chunk's
 * hand-off (~1-5 us) stays small next to it. */
#define FGK_GRAIN_CHEAP 16384 /* add, mul, relu, copies */
#define FGK_GRAIN_MATH  4096  /* exp, tanh, erf, pow, softmax rows */

/* ---- fast f32 exp (softmax family) --------------------------------------- */

/* exp(x) for f32 without a libm call, so loops over it vectorise: Cephes'
 * expf (range reduction x = n ln2 + r, |r| <= ln2/2, degree-7 polynomial;
 * relative error about 1e-7 over the normal range). 2^n is applied as two
 * factors so that results down to the subnormals and up to overflow come out
 * right without a branch: x above ~88.72 gives inf (+inf included), x below
 * ~-103.9 gives 0 (-inf included), and NaN stays NaN. The integer n is read
 * from the bits of a float rounded with the 1.5 * 2^23 trick, never by a
 * float-to-int conversion (undefined for NaN). The multiply-adds are fmaf,
 * one rounding each: with FMA in the clones, the softmax of [32, 128, 128]
 * took 500-613 us against 634-740 us as separate multiplies and adds. */
typedef union fgk_f32bits {
  float f;
  uint32_t u;
} fgk_f32bits;

/* All ones when c, else 0: a mask for fgk_pick. */
static inline uint32_t fgk_mask(int c) { return 0u - (uint32_t)c; }

/* m ? a : b for a mask m of fgk_mask, as a blend of bits: GCC (12) does
 * not if-convert a float ?: whose result feeds arithmetic, which would
 * keep the loops calling it scalar. */
static inline float fgk_pick(uint32_t m, float a, float b) {
  const fgk_f32bits x = {a}, y = {b};
  const fgk_f32bits r = {.u = (x.u & m) | (y.u & ~m)};
  return r.f;
}

/* ln 2 as a short head (exact in n ln 2 for any exponent n of a float)
 * and the rest: fgk_expf's reduction and fgk_logf's sum. */
#define FGK_LN2_HI 0.693359375f
#define FGK_LN2_LO (-2.12194440e-4f)

static inline float fgk_expf(float x) {
  float xc = fgk_pick(fgk_mask(x < -104.0f), -104.0f, x);
  xc = fgk_pick(fgk_mask(x > 88.8f), 88.8f, xc);
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  const float t = fmaf(xc, 1.44269504088896341f, magic);
  const float n = t - magic;
  float r = fmaf(n, -FGK_LN2_HI, xc);
  r = fmaf(n, -FGK_LN2_LO, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  const float y = fmaf(p, r * r, r) + 1.0f;
  const fgk_f32bits tb = {t}, mb = {magic};
  const uint32_t un = tb.u - mb.u; /* n, two's complement, |n| <= 150 */
  const uint32_t h = (uint32_t)((int32_t)un >> 1);
  fgk_f32bits s1, s2;
  s1.u = (h + 127u) << 23;
  s2.u = (un - h + 127u) << 23;
  return (y * s1.f) * s2.f;
}

/* p(v) = c[0] + c[1] v + ... + c[n-1] v^(n-1) by Horner's rule in f32
 * with fmaf (n a constant where it is used: the loop unrolls into the
 * chain). */
FGK_INLINE float fgk_horner(const float *c, int n, float v) {
  float p = c[n - 1];
  for (int i = n - 2; i >= 0; i--)
    p = fmaf(p, v, c[i]);
  return p;
}

/* fgk_erff's polynomials (tools/fit/erf_f32.py), lowest degree first. */
static const float fgk_erf_p[7] = {1.283791657e-01f,  -3.761262582e-01f, 1.128358515e-01f,
                                   -2.685381187e-02f, 5.188327560e-03f,  -8.010192522e-04f,
                                   7.853857712e-05f};
static const float fgk_erf_q[14] = {
    6.047446562e-04f,  -3.151515516e-03f, 7.643694795e-03f,  -1.130659956e-02f, 1.115149126e-02f,
    -7.426051485e-03f, 3.057799792e-03f,  -3.480359624e-04f, -4.843912104e-04f, 3.258643351e-04f,
    -4.316581182e-05f, -3.256189917e-05f, 9.468621796e-06f,  5.272652000e-07f};

/* erf(x) for f32 without a libm call, so loops over it vectorise. Two
 * polynomials in f32 by Horner's rule, fitted near-minimax by
 * tools/fit/erf_f32.py: |x| < 1, x + x P(x^2) (the leading term exact);
 * 1 <= |x| < 3.85, 1 - Q(|x| - 2.425) with Q fitting erfc; from 3.85 on,
 * 1 (erfc is below half an ulp of 1 there). Within 1.71 ulp of erf over
 * every f32, against 2.76 for the Taylor / erfc-with-exp form it replaced,
 * and no exp nor division: about 2.5x faster. Both pieces are computed and
 * one picked by masks (branches would keep callers scalar), the sign put
 * back by its bit; NaN stays NaN (it fails both comparisons). */
static inline float fgk_erff(float x) {
  fgk_f32bits a = {x}, r;
  const uint32_t sign = a.u & 0x80000000u;
  a.u &= 0x7fffffffu;
  const uint32_t big = fgk_mask(a.f > 3.85f);
  const float z = fgk_pick(big, 3.85f, a.f);
  const float lo = z + z * fgk_horner(fgk_erf_p, 7, z * z);
  const float hi = fgk_pick(big, 1.0f, 1.0f - fgk_horner(fgk_erf_q, 14, z - 2.425f));
  r.f = fgk_pick(fgk_mask(a.f < 1.0f), lo, hi);
  r.u |= sign;
  return r.f;
}

/* fgk_tanhf's polynomial (tools/fit/tanh_f32.py), lowest degree first. */
static const float fgk_tanh_p[5] = {-3.333328194e-01f, 1.333144216e-01f, -5.373971216e-02f,
                                    2.063907874e-02f, -5.704978373e-03f};

/* tanh in f32 without a branch, so loops over it vectorise (libm's tanhf
 * is a call per element: 12 ns each here, against about 1): below |x| =
 * 0.625 x + x q P(q) with q = x^2, above it 1 - 2 / (e^(2|x|) + 1) by
 * fgk_expf, which rounds to 1 from |x| = 9 and stays finite for infinite
 * x; the sign copied from x, so -0 and NaN keep theirs. Within 1.33 ulp
 * of tanh over every float below 16 (a scan; above, +-1 exactly);
 * tests/kernels/test_ew_ops.c checks every 89th within 2. */
static inline float fgk_tanhf(float x) {
  fgk_f32bits a = {x}, r;
  const uint32_t sign = a.u & 0x80000000u;
  a.u &= 0x7fffffffu;
  const float q = a.f * a.f;
  const float lo = a.f + a.f * (q * fgk_horner(fgk_tanh_p, 5, q));
  const float hi = 1.0f - 2.0f / (fgk_expf(2.0f * a.f) + 1.0f);
  r.f = fgk_pick(fgk_mask(a.f < 0.625f), lo, hi);
  r.u |= sign;
  return r.f;
}

/* fgk_logf's polynomial (tools/fit/log_f32.py), lowest degree first. */
static const float fgk_log_p[8] = {3.333333171e-01f,  -2.500082106e-01f, 2.000122667e-01f,
                                   -1.662335648e-01f, 1.420176247e-01f,  -1.316019505e-01f,
                                   1.276155036e-01f,  -7.634429911e-02f};

/* log in f32 without a branch, so loops over it vectorise: x = m 2^e with
 * m in [sqrt(1/2), sqrt(2)) and f = m - 1, log x = e ln 2 + f - f^2 / 2 +
 * f^3 P(f), with ln 2 in two parts (FGK_LN2_*) so that e ln 2 keeps its
 * digits; a subnormal x is scaled by 2^23 first. 0 gives -inf, inf
 * itself, a negative x or NaN NaN. Within 1 ulp of log over every
 * positive float (tests/kernels/test_ew_ops.c checks a scan). */
static inline float fgk_logf(float x) {
  const uint32_t tiny = fgk_mask(x < 1.17549435e-38f);
  fgk_f32bits a = {fgk_pick(tiny, x * 8388608.0f, x)}, m;
  int32_t e = (int32_t)((a.u >> 23) & 0xffu) - 127 - (int32_t)(tiny & 23u);
  m.u = (a.u & 0x007fffffu) | 0x3f800000u;
  const uint32_t big = fgk_mask(m.f > 1.41421356f);
  m.f = fgk_pick(big, 0.5f * m.f, m.f);
  e += (int32_t)(big & 1u);
  const float f = m.f - 1.0f, z = f * f, ef = (float)e;
  float y = f * z * fgk_horner(fgk_log_p, 8, f);
  y = fmaf(ef, FGK_LN2_LO, y);
  y = fmaf(-0.5f, z, y);
  float r = fmaf(ef, FGK_LN2_HI, f + y);
  r = fgk_pick(fgk_mask(x == 0.0f), -INFINITY, r);
  r = fgk_pick(fgk_mask(x == INFINITY), INFINITY, r);
  return fgk_pick(fgk_mask(x < 0.0f || x != x), NAN, r);
}

/* log(1 + z) by fgk_logf: log(u) z / (u - 1) with u = 1 + z rounded,
 * which cancels u's rounding (Goldberg's form); z itself where u rounds to
 * 1, inf for inf. */
static inline float fgk_log1pf(float z) {
  const float u = 1.0f + z, d = u - 1.0f;
  const float r = fgk_logf(u) * (z / d);
  return fgk_pick(fgk_mask(d == 0.0f || z == INFINITY), z, r);
}

/* Row-major walks over a reduction's coalesced dims (reduce.c, reduce2.c). */
/* Advances counters over dims[0..n) and the matching offset. */
static inline void fgk_walk_next(int n, const int64_t *dims, const int64_t *str, int64_t *cnt,
                                 int64_t *off) {
  for (int d = n - 1; d >= 0; d--) {
    *off += str[d];
    if (++cnt[d] < dims[d]) return;
    *off -= str[d] * dims[d];
    cnt[d] = 0;
  }
}

/* Counters and input offset of element r of a row-major walk over
 * dims[0..n) (one division per dim: for a chunk's start only). */
static inline int64_t fgk_walk_seek(int n, const int64_t *dims, const int64_t *str, int64_t r,
                                    int64_t *cnt) {
  int64_t off = 0;
  for (int d = n - 1; d >= 0; d--) {
    cnt[d] = r % dims[d];
    r /= dims[d];
    off += cnt[d] * str[d];
  }
  return off;
}

/* Lowers *x to v when v is smaller (first failing index across chunks). */
static inline void fgk_atomic_min(_Atomic int64_t *x, int64_t v) {
  int64_t cur = atomic_load_explicit(x, memory_order_relaxed);
  while (v < cur && !atomic_compare_exchange_weak_explicit(x, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

/* Float to integer conversion is undefined in C for NaN and out-of-range
 * values; flowgraph saturates and maps NaN to 0 (documented in cast). */
static inline int32_t fgk_f2i32(double x) {
  if (x != x) return 0;
  if (x >= 2147483647.0) return INT32_MAX;
  if (x <= -2147483648.0) return INT32_MIN;
  return (int32_t)x;
}
static inline int64_t fgk_f2i64(double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775807.0) return INT64_MAX; /* 2^63 as a double */
  if (x <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)x;
}

#endif
