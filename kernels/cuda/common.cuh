/* Private to kernels/cuda/: the list of CUDA kernels (one X-macro that
 * declares them and fills the registry) and the helpers the families share:
 * argument checks, error text, launch sizes, the broadcast walk and the
 * device side of the error report (cuda_kernels.h). */
#ifndef FG_CUDA_COMMON_CUH
#define FG_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "kernels/kernel.h"
}
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cpu/optim_multi.h"
#include "kernels/cuda/fused.h"
/* The shape checks and plans (broadcast, matmul, reduction, sum_to), the
 * error text and the dtype sets are the CPU kernels' own, defined once in
 * kernels/cpu/, so both backends accept the same shapes with the same
 * messages and the two registries line up row for row. */
#include "kernels/kernel_shape.h"

#define FGC_KERNELS(X)                                                                             \
  /* elementwise.cu */                                                                             \
  FGK_NUM(X, "neg", fgc_neg)                                                                       \
  FGK_FLOAT(X, "exp", fgc_exp)                                                                     \
  FGK_FLOAT(X, "log", fgc_log)                                                                     \
  FGK_FLOAT(X, "sqrt", fgc_sqrt)                                                                   \
  FGK_FLOAT(X, "rsqrt", fgc_rsqrt)                                                                 \
  FGK_NUM(X, "abs", fgc_abs)                                                                       \
  FGK_FLOAT(X, "tanh", fgc_tanh)                                                                   \
  FGK_FLOAT(X, "sigmoid", fgc_sigmoid)                                                             \
  FGK_NUM(X, "relu", fgc_relu)                                                                     \
  FGK_FLOAT(X, "leaky_relu", fgc_leaky_relu)                                                       \
  FGK_FLOAT(X, "elu", fgc_elu)                                                                     \
  FGK_FLOAT(X, "softplus", fgc_softplus)                                                           \
  FGK_FLOAT(X, "selu", fgc_selu)                                                                   \
  FGK_FLOAT(X, "silu", fgc_silu)                                                                   \
  FGK_FLOAT(X, "hard_sigmoid", fgc_hard_sigmoid)                                                   \
  FGK_FLOAT(X, "hard_swish", fgc_hard_swish)                                                       \
  FGK_FLOAT(X, "mish", fgc_mish)                                                                   \
  FGK_NUM(X, "sign", fgc_sign)                                                                     \
  FGK_FLOAT(X, "reciprocal", fgc_reciprocal)                                                       \
  FGK_FLOAT(X, "floor", fgc_floor)                                                                 \
  FGK_FLOAT(X, "ceil", fgc_ceil)                                                                   \
  FGK_FLOAT(X, "round", fgc_round)                                                                 \
  FGK_FLOAT(X, "clip", fgc_clip)                                                                   \
  FGK_FLOAT(X, "gelu", fgc_gelu)                                                                   \
  FGK_FLOAT(X, "gelu_tanh", fgc_gelu_tanh)                                                         \
  FGK_FLOAT(X, "erf", fgc_erf)                                                                     \
  FGK_NUM(X, "add", fgc_add)                                                                       \
  FGK_NUM(X, "sub", fgc_sub)                                                                       \
  FGK_NUM(X, "mul", fgc_mul)                                                                       \
  FGK_NUM(X, "div", fgc_div)                                                                       \
  FGK_FLOAT(X, "pow", fgc_pow)                                                                     \
  FGK_NUM(X, "maximum", fgc_maximum)                                                               \
  FGK_NUM(X, "minimum", fgc_minimum)                                                               \
  FGK_ALL(X, "equal", fgc_equal)                                                                   \
  FGK_ALL(X, "greater", fgc_greater)                                                               \
  FGK_ALL(X, "less", fgc_less)                                                                     \
  FGK_ANY(X, "select", fgc_select)                                                                 \
  FGK_ALL(X, "cast", fgc_cast)                                                                     \
  FGK_ALL(X, "fill", fgc_fill)                                                                     \
  /* random.cu */                                                                                  \
  FGK_FLOAT(X, "random_uniform", fgc_random_uniform)                                               \
  FGK_FLOAT(X, "random_normal", fgc_random_normal)                                                 \
  FGK_FLOAT(X, "truncated_normal", fgc_truncated_normal)                                           \
  FGK_ALL(X, "zeros_like", fgc_zeros_like)                                                         \
  FGK_ALL(X, "ones_like", fgc_ones_like)                                                           \
  FGK_ANY(X, "reshape", fgc_copy)                                                                  \
  FGK_ANY(X, "identity", fgc_copy)                                                                 \
  FGK_ANY(X, "after", fgc_copy)                                                                    \
  FGK_ANY(X, "stop_gradient", fgc_copy)                                                            \
  FGK_ANY(X, "expand_dims", fgc_copy)                                                              \
  FGK_ANY(X, "reshape_like", fgc_copy)                                                             \
  FGK_ANY(X, "assign", fgc_assign)                                                                 \
  FGK_NUM(X, "numel", fgc_count)                                                                   \
  FGK_ANY(X, "group", fgc_group)                                                                   \
  /* shape.cu */                                                                                   \
  FGK_ANY(X, "transpose", fgc_transpose)                                                           \
  FGK_ANY(X, "concat", fgc_concat)                                                                 \
  FGK_ANY(X, "slice", fgc_slice)                                                                   \
  FGK_ANY(X, "slice_grad", fgc_slice_grad)                                                         \
  FGK_ANY(X, "broadcast_like", fgc_broadcast_like)                                                 \
  FGK_ANY(X, "gather", fgc_gather)                                                                 \
  FGK_NUM(X, "gather_grad", fgc_gather_grad)                                                       \
  FGK_ALL(X, "one_hot", fgc_one_hot)                                                               \
  FGK_ANY(X, "shard", fgc_shard)                                                                   \
  /* reduce.cu */                                                                                  \
  FGK_NUM(X, "reduce_sum", fgc_reduce_sum)                                                         \
  FGK_NUM(X, "reduce_mean", fgc_reduce_mean)                                                       \
  FGK_NUM(X, "reduce_max", fgc_reduce_max)                                                         \
  FGK_NUM(X, "argmax", fgc_argmax)                                                                 \
  FGK_NUM(X, "sum_to", fgc_sum_to)                                                                 \
  /* softmax.cu */                                                                                 \
  FGK_FLOAT(X, "softmax", fgc_softmax)                                                             \
  FGK_FLOAT(X, "log_softmax", fgc_log_softmax)                                                     \
  FGK_FLOAT(X, "softmax_cross_entropy", fgc_softmax_xent)                                          \
  /* matmul.cu */                                                                                  \
  FGK_NUM(X, "matmul", fgc_matmul)                                                                 \
  /* optim.cu */                                                                                   \
  FGK_FLOAT(X, "apply_sgd", fgc_apply_sgd)                                                         \
  FGK_FLOAT(X, "apply_momentum", fgc_apply_momentum)                                               \
  FGK_FLOAT(X, "apply_adam", fgc_apply_adam)                                                       \
  /* reduce.cu, reduce2.cu, shape_copy.cu, pool.cu, resize.cu, norm.cu, dropout.cu, conv.cu */     \
  FGK_SHARED_KERNELS(X, fgc)                                                                       \
  /* logical.cu */                                                                                 \
  FGK_ANY(X, "logical_not", fgc_logical_not)                                                       \
  FGK_ANY(X, "logical_and", fgc_logical_and)                                                       \
  FGK_ANY(X, "logical_or", fgc_logical_or)                                                         \
  /* softmax.cu */                                                                                 \
  FGK_FLOAT(X, "softmax_cross_entropy_grad", fgc_softmax_xent_grad)                                \
  FGK_FLOAT(X, "softmax_cross_entropy_and_grad", fgc_softmax_xent_and_grad)                        \
  /* fused_matmul.cu: cuBLASLt with the bias and relu in its epilogue */                           \
  FGK_FLOAT(X, "fused_matmul", fgc_fused_matmul)                                                   \
  /* matmul.cu: the transpose_matmul pass's strided product */                                     \
  FGK_FLOAT(X, "permuted_matmul", fgc_permuted_matmul)                                             \
  /* fused.cu: fused_elementwise, its kernel compiled with NVRTC at plan time */                   \
  FGK_FLOAT(X, "fused_elementwise", fgc_fused)                                                     \
  /* optim.cu: the multi-tensor updates */                                                         \
  FGK_FLOAT(X, "multi_apply_sgd", fgc_multi_apply_sgd)                                             \
  FGK_FLOAT(X, "multi_apply_momentum", fgc_multi_apply_momentum)                                   \
  FGK_FLOAT(X, "multi_apply_adam", fgc_multi_apply_adam)                                           \
  /* conv.cu: the conv_epilogue pass's convolutions, cuDNN and one epilogue kernel */              \
  FGK_FLOAT(X, "fused_conv2d", fgc_fused_conv2d)                                                   \
  FGK_FLOAT(X, "fused_conv2d_add", fgc_fused_conv2d_add)                                           \
  /* matmul_grad.cu: the grad_epilogue pass's nodes */                                             \
  FGK_FLOAT(X, "fused_matmul_relu_grad", fgc_fused_matmul_relu_grad)                               \
  FGK_FLOAT(X, "matmul_bias_grad", fgc_matmul_bias_grad)                                           \
  /* optim.cu: the update_epilogue pass's update */                                                \
  FGK_FLOAT(X, "matmul_apply_sgd", fgc_matmul_apply_sgd)

/* X(op name, dtype key, prepare, release): the CUDA kernels with plan-time
 * state. */
#define FGC_PREPS(X)                                                                               \
  X("fused_elementwise", FG_F32, fgc_fused_prepare, fgc_fused_release)                             \
  X("fused_elementwise", FG_F64, fgc_fused_prepare, fgc_fused_release)

/* Declares each function once (ANY rows repeat a name). */
#define FGC_DECLARE(op, dt, fn) int fn(const fg_kctx *ctx);
FGC_KERNELS(FGC_DECLARE)
#undef FGC_DECLARE

/* ---- host helpers (common.cu) ------------------------------------------- */

/* Errors are written with fgk_fail (kernels/kernel_shape.h). */
/* As fgk_check, plus ctx->cuda present. */
int fgc_check(const fg_kctx *ctx, int n_in, int n_out);
/* Fails unless ctx->cuda->error_flag is set (kernels that may flag). */
int fgc_need_flag(const fg_kctx *ctx);
/* After a launch: 0, or -1 with "what: <CUDA error>" in ctx->err. */
int fgc_launched(const fg_kctx *ctx, const char *what);
/* Fails unless the scratch holds `bytes`. */
int fgc_need_scratch(const fg_kctx *ctx, size_t bytes);

static inline cudaStream_t fgc_stream(const fg_kctx *ctx) {
  return (cudaStream_t)ctx->cuda->stream;
}

static inline size_t fgc_esize(fg_dtype dt) { return fg_dtype_size(dt); }

#define FGC_THREADS 256
/* Blocks for n work items at `per_block` items each, capped: the kernels
 * are grid-stride loops, so the cap only bounds the launch. */
static inline unsigned fgc_blocks(int64_t n, int64_t per_block) {
  int64_t b = (n + per_block - 1) / per_block;
  if (b < 1) b = 1;
  if (b > 65536) b = 65536;
  return (unsigned)b;
}

/* A coalesced walk over an output in C order with up to three operands:
 * the CPU kernels' fgk_bcast, passed to kernels by value. The wrappers
 * zero it first, so the bytes a launch (or a captured CUDA Graph) copies
 * never hold stack garbage in the unused entries. */
typedef fgk_bcast fgc_walk;

/* Broadcasts inputs 0..n_ops-1 to out[0] (NumPy rules), then coalesces. */
static inline int fgc_bcast_init(const fg_kctx *ctx, int n_ops, fgc_walk *w) {
  memset(w, 0, sizeof *w);
  return fgk_bcast_init(ctx, n_ops, w);
}
/* The coalescing step alone (size-1 dims dropped, mergeable runs merged). */
static inline void fgc_walk_init(fgc_walk *w, int n_ops, int rank, const int64_t *dims,
                                 int64_t (*strides)[FG_MAX_RANK]) {
  memset(w, 0, sizeof *w);
  fgk_walk_init(w, n_ops, rank, dims, strides);
}

/* V elements moved as one aligned load or store (16 bytes for 4 floats). */
template <typename T, int V> struct alignas(sizeof(T) * V) fgc_vec { T v[V]; };

/* The 4-wide walk: when the walk's innermost dim is a multiple of 4 and
 * each operand k either runs along it (stride 1, every outer stride a
 * multiple of 4 and ptr[k] aligned to 4 elements, so each group of 4 is
 * one aligned vector) or is broadcast along it (stride 0), 4 consecutive
 * outputs share one offset computation and each running operand one vector
 * load. This is the bias add ([M, N] + [N]), a tensor with a scalar (relu's
 * gradient mask) and a select over them. 1 when it applies. */
static inline int fgc_walk4_ok(const fgc_walk *w, const void *const *ptr, const size_t *es,
                               const void *out, size_t out_es) {
  if (w->rank < 1 || w->dims[w->rank - 1] % 4 != 0 || (uintptr_t)out % (4 * out_es) != 0) return 0;
  for (int k = 0; k < w->n_ops; k++) {
    const int64_t s = w->strides[k][w->rank - 1];
    if (s == 0) continue;
    if (s != 1 || (uintptr_t)ptr[k] % (4 * es[k]) != 0) return 0;
    for (int d = 0; d < w->rank - 1; d++)
      if (w->strides[k][d] % 4 != 0) return 0;
  }
  return 1;
}

/* Copies `bytes` on the stream (nothing when dst == src). */
int fgc_copy_bytes(const fg_kctx *ctx, void *dst, const void *src, size_t bytes);
/* Fills n elements of es bytes (1, 4 or 8) with the bit pattern `bits`. */
int fgc_fill_bits(const fg_kctx *ctx, void *dst, int64_t n, size_t es, uint64_t bits);
/* A float product of plan pl (inputs 0 and 1 into out[0]) through cuBLAS,
 * for matmul and fused_matmul. 0 or -1. (matmul.cu) */
int fgc_mm_blas(const fg_kctx *ctx, const fgk_mm_plan &pl, fg_dtype dt);
/* ctx's cuBLAS handle h set up for a float GEMM of dt: pointer mode
 * `mode`, the math mode of ctx's TF32 choice; the call's data and compute
 * types into *type and *compute. 0, or the kernel's failure. (matmul.cu,
 * for matmul and matmul_apply_sgd) */
int fgc_blas_setup(const fg_kctx *ctx, cublasHandle_t h, fg_dtype dt, cublasPointerMode_t mode,
                   cudaDataType_t *type, cublasComputeType_t *compute);
/* The cuBLASLt epilogues flowgraph uses (fgc_lt_matmul). */
enum { FGC_LT_BIAS = 0, FGC_LT_RELU_BIAS = 1, FGC_LT_BGRADA = 2 };
/* One f32 cuBLASLt product d = op(a) @ op(b) of row-major M x K and K x N
 * (transposes ta, tb) with epilogue epi: FGC_LT_BIAS and FGC_LT_RELU_BIAS
 * add bias [N] (then relu) to every row; FGC_LT_BGRADA stores into bias
 * [N] bias[j] = the sum over k of op(b)[k][j] (cuBLASLt's A is our b, its
 * rows D's columns: BGRADA reduces A over the GEMM's k). 0 done, 1 not
 * taken (no cuBLASLt, no algorithm for the shape: nothing enqueued), -1
 * failed. (fused_matmul.cu) */
int fgc_lt_matmul(const fg_kctx *ctx, int64_t M, int64_t N, int64_t K, int ta, int tb, int epi,
                  const void *a, const void *b, const void *bias, void *d);

/* Element-size dispatch for the byte-moving kernels. */
template <size_t ES> struct fgc_word;
template <> struct fgc_word<1> { typedef uint8_t type; };
template <> struct fgc_word<4> { typedef uint32_t type; };
template <> struct fgc_word<8> { typedef uint64_t type; };

/* ---- device helpers ---------------------------------------------------- */

/* Offsets of flat output index i in each operand of w. */
__device__ __forceinline__ void fgc_walk_offsets(const fgc_walk &w, int64_t i, int64_t *off) {
  for (int k = 0; k < w.n_ops; k++)
    off[k] = 0;
  for (int d = w.rank - 1; d > 0; d--) {
    const int64_t n = w.dims[d];
    /* 32-bit division where it fits: several times cheaper than 64-bit. */
    const int64_t q =
        (((uint64_t)i | (uint64_t)n) >> 32) == 0 ? (int64_t)((uint32_t)i / (uint32_t)n) : i / n;
    const int64_t c = i - q * n;
    i = q;
    for (int k = 0; k < w.n_ops; k++)
      off[k] += c * w.strides[k][d];
  }
  /* What is left indexes the outermost dim (i < dims[0]). */
  for (int k = 0; k < w.n_ops; k++)
    off[k] += i * w.strides[k][0];
}

/* As fgc_walk_offsets for the first N operands (N <= w.n_ops), without a
 * division when the walk is flat (rank 1: the common contiguous case). */
template <int N>
__device__ __forceinline__ void fgc_walk_at(const fgc_walk &w, int64_t i, int64_t *off) {
  if (w.rank == 1) {
#pragma unroll
    for (int k = 0; k < N; k++)
      off[k] = i * w.strides[k][0];
  } else {
    fgc_walk_offsets(w, i, off);
  }
}

/* Operand k's 4 values at element offset off of a 4-wide walk: one vector
 * load where it runs along the innermost dim, one value repeated where it
 * is broadcast (fgc_walk4_ok). */
template <typename T>
__device__ __forceinline__ fgc_vec<T, 4> fgc_load4(const fgc_walk &w, int k, const T *p,
                                                   int64_t off) {
  if (w.strides[k][w.rank - 1] != 0) return *(const fgc_vec<T, 4> *)(p + off);
  const T x = p[off];
  return fgc_vec<T, 4>{{x, x, x, x}};
}

/* Records a data-dependent error; the first one wins (cuda_kernels.h). */
__device__ __forceinline__ void fgc_raise(int *flag, int code, long long a, long long b,
                                          long long c, double d) {
  if (!flag) return;
  fg_cuda_error *e = (fg_cuda_error *)flag;
  if (atomicCAS(&e->code, 0, code) == 0) {
    e->a = a;
    e->b = b;
    e->c = c;
    e->d = d;
  }
}

/* Index or label i of an i32/i64 buffer, as int64. */
__device__ __forceinline__ int64_t fgc_index_at(const void *p, int is64, int64_t i) {
  return is64 ? ((const int64_t *)p)[i] : (int64_t)((const int32_t *)p)[i];
}

/* A product and a sum rounded on their own, never contracted into one
 * multiply-add (nvcc contracts a * b + c by default): where the CPU's
 * bits are the reference (the CPU builds with -ffp-contract=off). */
__device__ __forceinline__ float fgc_mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double fgc_mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float fgc_add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double fgc_add_rn(double a, double b) { return __dadd_rn(a, b); }

#define FGC_GRID_STRIDE(i, n)                                                                      \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
       i += (int64_t)gridDim.x * blockDim.x)

#endif
