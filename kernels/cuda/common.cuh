/* Private to kernels/cuda/: the list of CUDA kernels (one X-macro that
 * declares them and fills the registry) and the helpers the families share:
 * argument checks, error text, launch sizes, the broadcast walk and the
 * device side of the error report (cuda_kernels.h). */
#ifndef FG_CUDA_COMMON_CUH
#define FG_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include "kernels/kernel.h"
}
#include "kernels/cuda/cuda_kernels.h"

/* Dtype sets, named as in kernels/cpu/cpu_kernels.h so the two registries
 * line up row for row. */
#define FGC_FLOAT(X, op, base) X(op, FG_F32, base##_f32) X(op, FG_F64, base##_f64)
#define FGC_NUM(X, op, base)                                                                       \
  FGC_FLOAT(X, op, base) X(op, FG_I32, base##_i32) X(op, FG_I64, base##_i64)
#define FGC_ALL(X, op, base) FGC_NUM(X, op, base) X(op, FG_BOOL, base##_bool)
#define FGC_ANY(X, op, fn)                                                                         \
  X(op, FG_F32, fn) X(op, FG_F64, fn) X(op, FG_I32, fn) X(op, FG_I64, fn) X(op, FG_BOOL, fn)

#define FGC_KERNELS(X)                                                                             \
  /* elementwise.cu */                                                                             \
  FGC_NUM(X, "neg", fgc_neg)                                                                       \
  FGC_FLOAT(X, "exp", fgc_exp)                                                                     \
  FGC_FLOAT(X, "log", fgc_log)                                                                     \
  FGC_FLOAT(X, "sqrt", fgc_sqrt)                                                                   \
  FGC_FLOAT(X, "rsqrt", fgc_rsqrt)                                                                 \
  FGC_NUM(X, "abs", fgc_abs)                                                                       \
  FGC_FLOAT(X, "tanh", fgc_tanh)                                                                   \
  FGC_FLOAT(X, "sigmoid", fgc_sigmoid)                                                             \
  FGC_NUM(X, "relu", fgc_relu)                                                                     \
  FGC_FLOAT(X, "leaky_relu", fgc_leaky_relu)                                                       \
  FGC_FLOAT(X, "gelu", fgc_gelu)                                                                   \
  FGC_FLOAT(X, "erf", fgc_erf)                                                                     \
  FGC_NUM(X, "add", fgc_add)                                                                       \
  FGC_NUM(X, "sub", fgc_sub)                                                                       \
  FGC_NUM(X, "mul", fgc_mul)                                                                       \
  FGC_NUM(X, "div", fgc_div)                                                                       \
  FGC_FLOAT(X, "pow", fgc_pow)                                                                     \
  FGC_NUM(X, "maximum", fgc_maximum)                                                               \
  FGC_NUM(X, "minimum", fgc_minimum)                                                               \
  FGC_ALL(X, "equal", fgc_equal)                                                                   \
  FGC_ALL(X, "greater", fgc_greater)                                                               \
  FGC_ALL(X, "less", fgc_less)                                                                     \
  FGC_ANY(X, "select", fgc_select)                                                                 \
  FGC_ALL(X, "cast", fgc_cast)                                                                     \
  FGC_ALL(X, "fill", fgc_fill)                                                                     \
  FGC_ALL(X, "zeros_like", fgc_zeros_like)                                                         \
  FGC_ALL(X, "ones_like", fgc_ones_like)                                                           \
  FGC_ANY(X, "reshape", fgc_copy)                                                                  \
  FGC_ANY(X, "identity", fgc_copy)                                                                 \
  FGC_ANY(X, "stop_gradient", fgc_copy)                                                            \
  FGC_ANY(X, "expand_dims", fgc_copy)                                                              \
  FGC_ANY(X, "reshape_like", fgc_copy)                                                             \
  FGC_ANY(X, "assign", fgc_assign)                                                                 \
  FGC_NUM(X, "numel", fgc_count)                                                                   \
  FGC_ANY(X, "group", fgc_group)                                                                   \
  /* shape.cu */                                                                                   \
  FGC_ANY(X, "transpose", fgc_transpose)                                                           \
  FGC_ANY(X, "concat", fgc_concat)                                                                 \
  FGC_ANY(X, "slice", fgc_slice)                                                                   \
  FGC_ANY(X, "slice_grad", fgc_slice_grad)                                                         \
  FGC_ANY(X, "broadcast_like", fgc_broadcast_like)                                                 \
  FGC_ANY(X, "gather", fgc_gather)                                                                 \
  FGC_NUM(X, "gather_grad", fgc_gather_grad)                                                       \
  FGC_ALL(X, "one_hot", fgc_one_hot)                                                               \
  FGC_ANY(X, "shard", fgc_shard)                                                                   \
  /* reduce.cu */                                                                                  \
  FGC_NUM(X, "reduce_sum", fgc_reduce_sum)                                                         \
  FGC_NUM(X, "reduce_mean", fgc_reduce_mean)                                                       \
  FGC_NUM(X, "reduce_max", fgc_reduce_max)                                                         \
  FGC_NUM(X, "argmax", fgc_argmax)                                                                 \
  FGC_NUM(X, "sum_to", fgc_sum_to)                                                                 \
  /* softmax.cu */                                                                                 \
  FGC_FLOAT(X, "softmax", fgc_softmax)                                                             \
  FGC_FLOAT(X, "log_softmax", fgc_log_softmax)                                                     \
  FGC_FLOAT(X, "softmax_cross_entropy", fgc_softmax_xent)                                          \
  /* matmul.cu */                                                                                  \
  FGC_NUM(X, "matmul", fgc_matmul)                                                                 \
  /* optim.cu */                                                                                   \
  FGC_FLOAT(X, "apply_sgd", fgc_apply_sgd)                                                         \
  FGC_FLOAT(X, "apply_momentum", fgc_apply_momentum)                                               \
  FGC_FLOAT(X, "apply_adam", fgc_apply_adam)

/* Declares each function once (ANY rows repeat a name). */
#define FGC_DECLARE(op, dt, fn) int fn(const fg_kctx *ctx);
FGC_KERNELS(FGC_DECLARE)
#undef FGC_DECLARE

/* ---- host helpers (common.cu) ------------------------------------------- */

/* Writes a printf-style message to ctx->err and returns -1. */
int fgc_fail(const fg_kctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
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

static inline int64_t fgc_numel(const fg_kbuf *b) {
  int64_t n = 1;
  for (int i = 0; i < b->rank; i++)
    n *= b->dims[i] > 0 ? b->dims[i] : 0;
  return n;
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

/* A coalesced walk over an output in C order with up to three operands
 * (as fgk_bcast in kernels/cpu/): strides[k][i] is operand k's element
 * stride along dim i, 0 where it broadcasts. Passed to kernels by value. */
typedef struct fgc_walk {
  int rank, n_ops;
  int64_t dims[FG_MAX_RANK];
  int64_t strides[3][FG_MAX_RANK];
} fgc_walk;

/* Broadcasts inputs 0..n_ops-1 to out[0] (NumPy rules), then coalesces. */
int fgc_bcast_init(const fg_kctx *ctx, int n_ops, fgc_walk *w);
/* The coalescing step alone (size-1 dims dropped, mergeable runs merged). */
void fgc_walk_init(fgc_walk *w, int n_ops, int rank, const int64_t *dims,
                   int64_t (*strides)[FG_MAX_RANK]);

/* Copies `bytes` on the stream (nothing when dst == src). */
int fgc_copy_bytes(const fg_kctx *ctx, void *dst, const void *src, size_t bytes);
/* Fills n elements of es bytes (1, 4 or 8) with the bit pattern `bits`. */
int fgc_fill_bits(const fg_kctx *ctx, void *dst, int64_t n, size_t es, uint64_t bits);

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

#define FGC_GRID_STRIDE(i, n)                                                                      \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
       i += (int64_t)gridDim.x * blockDim.x)

#endif
