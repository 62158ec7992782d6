/* The kernel ABI: pure functions over buffers and shapes. Kernels know
 * nothing of graphs or sessions; the executor resolves shapes, allocates the
 * outputs and normalises the parameters before calling them. */
#ifndef FG_KERNEL_H
#define FG_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#include "flowgraph/op_params.h"
#include "flowgraph/status.h"
#include "flowgraph/types.h"

/* How a buffer's elements are laid out. PLAIN is C order. NC16 is
 * oneDNN's nChw16c for a rank-4 [N, C, H, W] with C a multiple of 16:
 * element (n, c, h, w) sits at ((n (C / 16) + c / 16) H W + h W + w) 16 +
 * c % 16, the same bytes as C order, channels innermost in blocks of 16, so
 * the convolutions read and write it without converting. The planner
 * (executor/plan_layout.c) hands NC16 only to the kernels that accept it
 * (fgk_nc16_available()), and never for a tensor a caller sees. */
enum { FGK_LAYOUT_PLAIN = 0, FGK_LAYOUT_NC16 = 1 };

typedef struct fg_kbuf {
  fg_dtype dtype;
  int rank;
  int64_t dims[FG_MAX_RANK]; /* all known */
  void *data;                /* C order unless layout says otherwise */
  int layout;                /* FGK_LAYOUT_*; 0, plain, wherever a caller does not set it */
} fg_kbuf;

/* 1 when the f32 CPU convolutions accept NC16 for their activations (x, y
 * and their gradients): built with oneDNN. batch_norm, batch_norm_grad and
 * the element-wise kernels accept it wherever all their same-shaped
 * operands share it. */
int fgk_nc16_available(void);

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
  const fg_op_params *p; /* the op's own member, checked and normalised */
  char *err;             /* on failure, a message naming the input and value */
  size_t err_size;
  const fg_kparallel *par; /* NULL: single-threaded */
  const fg_kcuda *cuda;    /* set for CUDA kernels only */
  void *comm;              /* fg_comm * (kernels/collective.h) for collective ops, else NULL */
  /* On failure a kernel may store the code that says why (a collective
   * whose peer missed its deadline: FG_DEADLINE_EXCEEDED); left alone, the
   * executor reports FG_INVALID_ARGUMENT. NULL: nowhere to store it. */
  fg_code *code;
  /* What the kernel's prepare hook (fg_kprep below) made for this step, or
   * NULL. Kernels with a hook must also run with NULL (constant folding,
   * direct calls): they then make what they need for this call alone. */
  void *state;
  /* The run's training step and mode (fg_training in flowgraph/graph.h):
   * rng_step counts the session's earlier training runs, rng_replica is
   * the process's data-parallel replica (0 without one), run_training 1
   * when the run's training flag is true. Read by dropout and the training
   * flag only; zero where a caller does not set them. */
  uint64_t rng_step;
  uint32_t rng_replica;
  int run_training;
  /* Bit i set: input i is a variable's or a constant's bytes, which
   * change between runs only when var_version does (the session counts
   * the runs that may write variables). A kernel may keep what it derived
   * from such an input (a weight in another layout) while both hold. */
  unsigned fixed_inputs;
  uint64_t var_version;
  /* Bit i set: input i is a constant's bytes (a subset of fixed_inputs),
   * which never change while the kernel's plan lives. */
  unsigned const_inputs;
  /* The session's store of what kernels derive from constant inputs,
   * shared by its plans (kernels/share.h), given to prepare hooks; NULL
   * where there is none (constant folding, direct calls, GPU sessions). */
  struct fgk_share *share;
} fg_kctx;

/* Returns 0, or -1 after writing ctx->err (for example a gather index out of
 * range: "indices[3] = 12 is out of range [0, 10)"). */
typedef int (*fg_kernel_fn)(const fg_kctx *ctx);

/* The CPU kernel for (op name, dtype), or NULL when none is registered.
 * The dtype key is output 0's dtype, or input 0's for ops flagged
 * FG_OPF_KERNEL_KEY_INPUT (comparisons, argmax). */
fg_kernel_fn fg_cpu_kernel(const char *op, fg_dtype dtype);
/* Once per process (later calls return at once): the CPU kernels'
 * libraries set up, OpenBLAS single-threaded with its idle server threads
 * stopped (kernels/cpu/matmul.c). Sessions call it when they are made;
 * the first float matmul does if nothing did. */
void fg_cpu_kernels_start(void);

/* Registry rows, for the op-table test: NULL-terminated. */
typedef struct fg_kernel_reg {
  const char *op;
  fg_dtype dtype;
  fg_kernel_fn fn;
} fg_kernel_reg;
const fg_kernel_reg *fg_cpu_kernel_registry(void);

/* Plan-time kernel state. A kernel that would otherwise build something
 * per call from the shapes and parameters alone (oneDNN primitives, their
 * scratchpads) registers a prepare hook beside it. The executor calls
 * prepare once when it builds a plan, with ctx's inputs and outputs shaped
 * but holding no data (data NULL), ctx->p parsed, ctx->par NULL and
 * ctx->state NULL; `threads` is the most threads a run of the plan gives
 * the kernel. On success (0) *state is handed to every call of the kernel
 * for that step (ctx->state) and passed to release when the plan is freed;
 * on failure (-1) prepare writes ctx->err and the plan is not built. A
 * plan runs one call at a time, so a kernel may write its state during a
 * call (binding buffers) but must keep it valid for the next. */
typedef int (*fg_kprepare_fn)(const fg_kctx *ctx, int threads, void **state);
typedef void (*fg_krelease_fn)(void *state);
/* The bytes a state holds outside the plan's arena for its step alone
 * (converted tensors, scratchpads); adds to *shared those of the converted
 * constants it reads from the session's store (kernels/share.h), made by
 * the first run and shared with the session's other plans. Accepts NULL. */
typedef size_t (*fg_kbytes_fn)(const void *state, size_t *shared);
typedef struct fg_kprep {
  const char *op;
  fg_dtype dtype;
  fg_kprepare_fn prepare;
  fg_krelease_fn release; /* accepts NULL */
  fg_kbytes_fn bytes;     /* NULL: the state holds no buffers worth counting */
} fg_kprep;
/* The prepare hook of CPU kernel (op name, dtype), or NULL when it has
 * none (most kernels are pure functions). */
const fg_kprep *fg_cpu_kernel_prep(const char *op, fg_dtype dtype);

/* The CUDA kernel for (op name, dtype), same keys as fg_cpu_kernel; NULL when
 * none is registered or the build has no CUDA backend (FG_CUDA=OFF). */
fg_kernel_fn fg_cuda_kernel(const char *op, fg_dtype dtype);
/* NULL-terminated rows; an empty list in a build without CUDA. */
const fg_kernel_reg *fg_cuda_kernel_registry(void);
/* The prepare hook of CUDA kernel (op name, dtype), or NULL (fused_elementwise
 * compiles its kernel there); always NULL in a build without CUDA. */
const fg_kprep *fg_cuda_kernel_prep(const char *op, fg_dtype dtype);

#endif
