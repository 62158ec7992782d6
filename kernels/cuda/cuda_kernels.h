/* The CUDA kernels' report of data-dependent errors, shared by the kernels
 * (kernels/cuda/) and the executor that reads it back after a run.
 *
 * A kernel cannot fail synchronously on a value it only sees on the device
 * (a gather index, a label, an integer divisor, Adam's step), so it records
 * the first such error in a small device struct and the host turns it into
 * the same message the CPU kernel gives.
 *
 * Protocol for the executor:
 *   - allocate one fg_cuda_error in device memory per node that runs a
 *     kernel (or at least per node whose op fg_cuda_op_may_flag() names),
 *     and pass its address, cast to int *, as fg_kcuda.error_flag;
 *   - zero them (cudaMemsetAsync, sizeof(fg_cuda_error) each) before the
 *     kernels of a run are enqueued (captured graphs: as the first node);
 *   - after the run's final stream synchronisation, copy them back and, for
 *     the first node in plan order whose code is nonzero, build its message
 *     with fg_cuda_error_message() and name the node.
 * Several threads may find an error: atomicCAS on `code` (0 -> code) lets
 * exactly one of them fill in the details, so the message is consistent,
 * though not necessarily about the lowest bad index the CPU would name. */
#ifndef FG_CUDA_KERNELS_H
#define FG_CUDA_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  FG_CUDA_ERR_NONE = 0,
  FG_CUDA_ERR_INDEX = 1, /* gather, gather_grad, one_hot: "indices[a] = b is out of range [0, c)" */
  FG_CUDA_ERR_LABEL = 2, /* softmax_cross_entropy: "labels[a] = b is out of range [0, c)" */
  FG_CUDA_ERR_DIV_ZERO = 3, /* integer div: "division by zero at output element a" */
  FG_CUDA_ERR_ADAM_STEP = 4 /* apply_adam: step d below 1 */
};

/* 40 bytes, 8-byte aligned; all-zero means "no error". */
typedef struct fg_cuda_error {
  int code; /* FG_CUDA_ERR_*, written first with atomicCAS */
  int reserved;
  long long a, b, c; /* position, value, limit (see the codes) */
  double d;          /* a float value (ADAM_STEP) */
} fg_cuda_error;

/* Writes the message for *e to buf (n bytes, NUL-terminated) and returns
 * e->code; 0 (and an empty message) when no error was recorded. */
int fg_cuda_error_message(const fg_cuda_error *e, char *buf, size_t n);

/* 1 when the CUDA kernel of `op` may record an error in its error_flag
 * (it then needs a non-NULL one), else 0. */
int fg_cuda_op_may_flag(const char *op);

/* check_numerics: adds the number of NaN among the n elements of a
 * floating-point device buffer (dtype FG_F32 or FG_F64) to counts[0] and of
 * Inf to counts[1] (device memory), on `stream` (a cudaStream_t). 0, or -1
 * for another dtype or a failed launch (cudaGetLastError says why). */
int fg_cuda_count_nonfinite(const void *data, long long n, int dtype, unsigned long long *counts,
                            void *stream);

/* Device scratch (fg_kcuda.scratch_bytes) that is enough for every CUDA
 * kernel whatever the shapes; kernels given less fail with the bytes they
 * need. Reductions, argmax and the cross-entropy loss use it for fixed-size
 * partials (deterministic two-pass sums). */
#define FG_CUDA_SCRATCH_MIN (1024 * 1024)

#ifdef __cplusplus
}
#endif
#endif
