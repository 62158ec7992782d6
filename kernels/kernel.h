/* The kernel ABI: pure functions over buffers and shapes. Kernels know
 * nothing of graphs or sessions; the executor resolves shapes, allocates the
 * outputs and normalises the parameters before calling them. */
#ifndef FG_KERNEL_H
#define FG_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "flowgraph/types.h"

typedef struct fg_kbuf {
  fg_dtype dtype;
  int rank;
  int64_t dims[FG_MAX_RANK]; /* all known */
  void *data;                /* C order */
} fg_kbuf;

/* Parameters, already normalised by the executor (axes >= 0, in range). */
typedef struct fg_kparams {
  int transpose_a, transpose_b; /* matmul */
  int axis;                     /* concat, softmax, log_softmax, argmax */
  int n_axes;                   /* reductions: sorted, unique; n_axes == rank for "all" */
  int axes[FG_MAX_RANK];
  int keepdims;                 /* reductions */
  int perm[FG_MAX_RANK];        /* transpose: out.dims[i] = in.dims[perm[i]] */
  int64_t begin[FG_MAX_RANK];   /* slice: start per dim; sizes are out.dims */
  double alpha;                 /* leaky_relu */
  double value;                 /* fill */
  int64_t depth;                /* one_hot */
  double momentum;              /* apply_momentum */
  int nesterov;                 /* apply_momentum: 0/1 */
  double beta1, beta2, epsilon; /* apply_adam */
  double weight_decay;          /* apply_adam: decoupled (AdamW) when > 0 */
  double l2;                    /* apply_adam: coupled, g + l2 * var (torch's Adam) */
  int mean;                     /* all_reduce, all_reduce_apply_sgd,
                                 * sufficient_factor_apply_sgd: 1 = mean over ranks, 0 = sum */
  int weighted;                 /* the same ops: 1 = mean weighted by rows (inputs rows, sums) */
} fg_kparams;

/* Intra-op parallelism offered by the executor: parallel_for(pool, n, grain,
 * fn, arg) calls fn(arg, begin, end) over [0, n) in chunks of `grain`
 * (chunking independent of the thread count, so results stay bitwise
 * identical for any thread count when chunk results combine in order).
 * NULL in fg_kctx means "run inline". */
typedef void (*fg_krange_fn)(void *arg, int64_t begin, int64_t end);
typedef struct fg_kparallel {
  void *pool;
  void (*parallel_for)(void *pool, int64_t n, int64_t grain, fg_krange_fn fn, void *arg);
} fg_kparallel;

/* The GPU side of a CUDA kernel call (NULL for CPU kernels). Kernels enqueue
 * their work on `stream` and never synchronise the device. */
typedef struct fg_kcuda {
  void *stream;  /* cudaStream_t */
  void *blas;    /* cublasHandle_t, already bound to `stream` */
  void *scratch; /* device scratch, scratch_bytes long, private to this stream */
  size_t scratch_bytes;
  int *error_flag; /* device int; kernels that find a bad index store a code in it */
  int allow_tf32;
} fg_kcuda;

typedef struct fg_kctx {
  const fg_kbuf *in;
  int n_in;
  fg_kbuf *out; /* shapes and buffers set by the executor */
  int n_out;
  const fg_kparams *p;
  char *err; /* on failure, a message naming the input and value */
  size_t err_size;
  const fg_kparallel *par; /* NULL: single-threaded */
  const fg_kcuda *cuda;    /* set for CUDA kernels only */
  void *comm;              /* fg_comm * (kernels/collective.h) for collective ops, else NULL */
} fg_kctx;

/* Returns 0, or -1 after writing ctx->err (for example a gather index out of
 * range: "indices[3] = 12 is out of range [0, 10)"). */
typedef int (*fg_kernel_fn)(const fg_kctx *ctx);

/* The CPU kernel for (op name, dtype), or NULL when none is registered.
 * The dtype key is output 0's dtype, or input 0's for ops flagged
 * FG_OPF_KERNEL_KEY_INPUT (comparisons, argmax). */
fg_kernel_fn fg_cpu_kernel(const char *op, fg_dtype dtype);

/* Registry rows, for the op-table test: NULL-terminated. */
typedef struct fg_kernel_reg {
  const char *op;
  fg_dtype dtype;
  fg_kernel_fn fn;
} fg_kernel_reg;
const fg_kernel_reg *fg_cpu_kernel_registry(void);

/* The CUDA kernel for (op name, dtype), same keys as fg_cpu_kernel; NULL when
 * none is registered or the build has no CUDA backend (FG_CUDA=OFF). */
fg_kernel_fn fg_cuda_kernel(const char *op, fg_dtype dtype);
/* NULL-terminated rows; an empty list in a build without CUDA. */
const fg_kernel_reg *fg_cuda_kernel_registry(void);

#endif
