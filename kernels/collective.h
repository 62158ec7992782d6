/* What the collective kernels (kernels/cpu/collective.c) call: the
 * communicator interface, behind one small table of functions so that the
 * executor runs an all_reduce node the same way whether the replicas are
 * cpu:N devices in this process, MPI ranks or GPUs (NCCL); dist/comm/
 * implements it. Every call returns 0, or -1 with `st` set: a peer that
 * does not arrive within the timeout gives FG_DEADLINE_EXCEEDED, never a
 * hang.
 *
 * Also the weighted all_reduce's arithmetic, shared by the CPU kernel and
 * the CUDA executor's NCCL path (executor/cuda/staging.c), so both weigh
 * uneven shards alike. */
#ifndef FG_KERNELS_COLLECTIVE_H
#define FG_KERNELS_COLLECTIVE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* The public side of communicators (constructors, FG_API): definitions in
 * dist/comm/ see their exported declarations through this include. */
#include "flowgraph/comm.h"
#include "flowgraph/status.h"
#include "flowgraph/types.h"

typedef struct fg_comm fg_comm;

/* c[m x n] = alpha * a^T b + beta * c, beta 0 or 1, row-major: a [k
 * rows, lda apart] (its first m columns), b [k rows, ldb apart], c [m
 * rows, ldc apart]; f32 or f64 as `dtype`. The kernels' GEMM (kernels/cpu), passed to the
 * communicator so that it runs on the executor's threads (`arg`). */
typedef void (*fg_gemm_tn_fn)(void *arg, fg_dtype dtype, int64_t m, int64_t n, int64_t k,
                              double alpha, const void *a, int64_t lda, const void *b, int64_t ldb,
                              double beta, void *c, int64_t ldc);

typedef struct fg_comm_ops {
  /* In place over `count` elements of `buf` on every rank: the sum, or the
   * mean when `mean` is 1. The summation order is fixed (rank 0 + rank 1 +
   * ...), so every rank gets the same bits and runs repeat bitwise. */
  int (*all_reduce)(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean, fg_status *st);
  /* out[r] = value of rank r, for all n ranks (graph-hash check, M2). */
  int (*all_gather_u64)(fg_comm *c, uint64_t value, uint64_t *out, fg_status *st);
  /* Copies `bytes` of rank `root`'s buf to every rank. */
  int (*broadcast)(fg_comm *c, void *buf, int64_t bytes, int root, fg_status *st);
  /* Point-to-point (model parallelism across processes): sends `bytes` of
   * buf to rank `peer` under `tag` (>= 0), or receives exactly `bytes` from
   * rank `peer` under `tag` into buf. send returns once buf may be reused
   * (it may return before the peer received). A recv whose message has
   * another size fails naming both sizes. Deadline as for collectives.
   * Messages of one (sender, receiver, tag) arrive in the order sent; two
   * threads must not send (or receive) on the same (peer, tag) at once.
   * Sends and receives on other threads, and collectives, may run
   * concurrently: a send waiting for its peer never holds up a recv.
   * When send returns: in-process, at once (the data is copied); over MPI,
   * small messages at once, large ones (above MPI's eager limit, a few KB)
   * only once the peer has posted the matching recv. So two ranks that each
   * send a large message and then recv on one thread wait for each other
   * until the deadline: order them (one sends first) or use two threads. */
  int (*send)(fg_comm *c, const void *buf, int64_t bytes, int peer, int tag, fg_status *st);
  int (*recv)(fg_comm *c, void *buf, int64_t bytes, int peer, int tag, fg_status *st);
  void (*free)(fg_comm *c);
  /* This rank failed a step (`why` says how): every wait on the group, on
   * this rank and on the others, ends at once with FG_ABORTED naming this
   * rank and `why`, instead of waiting out its timeout. In-process groups
   * are reset before the next run; over MPI the communicator stays
   * unusable on every rank (the processes must exit, as after a deadline).
   * NCCL aborts its communicator (ncclCommAbort) but has no way to tell
   * the peers why: theirs fail through NCCL's error or their deadline.
   * Idempotent; NULL where not supported. */
  void (*abort)(fg_comm *c, const char *why);
  /* The GPU whose memory the collectives take (N of cuda:N: NCCL); NULL
   * for communicators of host memory. Read through fg_comm_gpu. */
  int (*gpu)(const fg_comm *c);
  /* In place over `count` f32 or f64 elements: the sum over ranks of
   * `scale` x buf, each rank passing its own scale (the weighted mean of
   * uneven shards: rows_r / total). NULL where not supported; called
   * through fg_comm_all_reduce_scaled. */
  int (*all_reduce_scaled)(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, double scale,
                           fg_status *st);
  /* var -= lr * (the sum, or the mean when `mean` is 1, over ranks of
   * grad), in one collective that updates every rank's var, with the bits
   * all_reduce and then apply_sgd give (f32 or f64, the same count on
   * every rank; the ranks' vars must hold the same values, as data
   * parallelism keeps them). 0 when done; 1 when this call cannot be
   * fused here (nothing changed, the same answer on every rank: the
   * caller all-reduces a copy of grad and updates var itself); -1 with st
   * set. NULL: never fused. */
  int (*all_reduce_sgd)(fg_comm *c, void *var, const void *grad, int64_t count, fg_dtype dtype,
                        int mean, double lr, fg_status *st);
  /* all_reduce_sgd of the gradient a^T b, never made: var [m, n], and on
   * each rank a [rows, m] and b [rows, n] (rows may differ between ranks).
   * var -= lr * (the sum over ranks of a^T b, or its mean over ranks when
   * `mean` is 1). A matmul's weight gradient has rows x (m + n) elements
   * where the gradient has m x n, so over one host's shared memory each
   * rank reads the others' factors and computes its slice of var's rows
   * over every rank's rows at once (gemm, called with gemm_arg), then
   * stores it into every rank's var. The bits differ from all_reduce_sgd
   * of the made gradient by rounding (one product over all rows instead
   * of a sum of products), and are the same on every rank. 0 done, 1 not
   * here (the same answer on every rank; nothing changed: the caller makes
   * the gradient, all-reduces it and updates), -1 with st set. NULL:
   * never. */
  int (*all_reduce_sgd_product)(fg_comm *c, void *var, const void *a, const void *b, int64_t rows,
                                int64_t m, int64_t n, fg_dtype dtype, int mean, double lr,
                                fg_gemm_tn_fn gemm, void *gemm_arg, fg_status *st);
} fg_comm_ops;

struct fg_comm {
  const fg_comm_ops *ops;
  int rank, size;
  double timeout_s; /* 0: the default (60 s) */
  /* fg_comm_update_buffer's bytes and fg_comm_kernel_status's status;
   * freed with the communicator. */
  void *update_buf;
  size_t update_bytes;
  fg_status *kernel_st;
};

/* A status owned by c, cleared, for the kernel running a collective on c
 * now (kernels/cpu/collective.c): made once, so collectives allocate
 * nothing per run. NULL when out of memory. */
static inline fg_status *fg_comm_kernel_status(fg_comm *c) {
  if (!c->kernel_st) c->kernel_st = fg_status_new();
  if (c->kernel_st) fg_status_clear(c->kernel_st);
  return c->kernel_st;
}

/* What a communicator's free does with the base's buffers. */
static inline void fg_comm_free_base(fg_comm *c) {
  free(c->update_buf);
  fg_status_free(c->kernel_st);
}

/* At least `bytes` of host memory owned by c, for the collective that
 * runs on c now (one at a time per handle, as collectives are ordered):
 * where a fused update (all_reduce_apply_sgd) reduces a copy of its gradient
 * (kernels/cpu/collective.c). Grown when asked for more and kept, so a
 * cached plan allocates nothing after its first run. NULL when out of
 * memory. */
static inline void *fg_comm_update_buffer(fg_comm *c, size_t bytes) {
  if (c->update_bytes < bytes) {
    void *p = realloc(c->update_buf, bytes);
    if (!p) return NULL;
    c->update_buf = p;
    c->update_bytes = bytes;
  }
  return c->update_buf;
}

/* The GPU whose memory c's collectives take, or -1 (host memory, NULL). */
static inline int fg_comm_gpu(const fg_comm *c) {
  return c && c->ops && c->ops->gpu ? c->ops->gpu(c) : -1;
}

/* ops->all_reduce_scaled, or FG_UNIMPLEMENTED where c has none. */
static inline int fg_comm_all_reduce_scaled(fg_comm *c, void *buf, int64_t count, fg_dtype dtype,
                                            double scale, fg_status *st) {
  if (c && c->ops && c->ops->all_reduce_scaled)
    return c->ops->all_reduce_scaled(c, buf, count, dtype, scale, st);
  fg_status_set(st, FG_UNIMPLEMENTED, "scaled all_reduce: this communicator has none (NCCL's has)");
  return -1;
}

/* From this rank's rows and the ranks' all-reduced sums (sums[0] = rows,
 * sums[1] = rows^2) over `size` ranks: *plain = 1 when every rank has the
 * same rows (the plain mean then is the weighted one; taking it keeps even
 * shards bit for bit as without weights), else *w = rows and *total =
 * sums[0] (the result is sum(x_r * w_r) / total). Every rank sees the same
 * sums, so all choose alike. 0, or -1 with `err` naming the values when
 * they are out of range. */
int fgk_all_reduce_weights(double rows, const double sums[2], int size, int *plain, double *w,
                           double *total, char *err, size_t err_size);

#endif
