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

/* The caller's arithmetic on one block of this rank's slice of an
 * all-reduce over peer buffers (fg_comm_ops.all_reduce_apply): `sum` holds
 * the block's rank-order sum (or mean) of every rank's source, dst[p] the
 * block's place in rank p's destination (n of them), own = dst[this
 * rank]; the caller writes the result into every dst[p]. */
typedef void (*fg_comm_block_fn)(void *arg, fg_dtype dtype, void *const *dst, int n,
                                 const void *own, const void *sum, int64_t len);
/* The caller's arithmetic on this rank's rows of a destination [m, n]
 * from every rank's factors (fg_comm_ops.gather_factors): ga [total, ml]
 * holds every rank's rows of a's columns of this slice, gb [total, n]
 * every rank's b, both in rank order; `own` is this rank's destination
 * at the slice's first row (ml rows, n apart), which the caller updates;
 * the communicator then copies it into every other rank's destination. */
typedef void (*fg_comm_factors_fn)(void *arg, fg_dtype dtype, int64_t ml, int64_t n, int64_t total,
                                   const void *ga, const void *gb, void *own, int nranks);

typedef struct fg_comm_ops {
  /* In place over `count` elements of `buf` on every rank: the sum, or the
   * mean when `mean` is 1. The summation order is fixed (rank 0 + rank 1 +
   * ...), so every rank gets the same bits and runs repeat bitwise. */
  int (*all_reduce)(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean, fg_status *st);
  /* out[r] = value of rank r, for all n ranks (the ranks compare graph hashes). */
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
  /* Peer buffers, where a transport has them (one host's shared memory,
   * with every rank's buffers in arenas the others map): an all-reduce
   * whose result the caller computes into every rank's destination. Every
   * rank passes its `src` and `dst` (count f32 or f64 elements, the same
   * count everywhere) and `agree`, a value every rank must pass alike
   * (else FG_INVALID_ARGUMENT on every rank, naming `agree_what` and both
   * values). After a barrier (every rank's earlier reads of its dst are
   * done) the communicator reduces this rank's slice of the sources in
   * rank order, block by block, and calls fn(arg, ...) on each block with
   * the addresses of that block in every rank's dst; a last barrier ends
   * the writes. Each rank moves its slice once, where all_reduce and then
   * a local update would move every byte on every rank (ZeRO's sharded
   * update, with the all-gather folded into the caller's stores). 0 when
   * done; 1 when the transport cannot here (nothing moved, the same
   * answer on every rank: the caller all-reduces and computes itself); -1
   * with st set. NULL: never. */
  int (*all_reduce_apply)(fg_comm *c, void *dst, const void *src, int64_t count, fg_dtype dtype,
                          int mean, double agree, const char *agree_what, fg_comm_block_fn fn,
                          void *arg, fg_status *st);
  /* Peer buffers for two factors: on each rank a [rows, m] and b [rows,
   * n] (rows may differ between ranks) and dst [m, n]. The communicator
   * gathers, for this rank's slice of dst's rows, every rank's rows of
   * that slice of a's columns and every rank's b into buffers it keeps,
   * calls fn with them (once, when the slice and the rows are not empty),
   * and copies the slice fn computed into every other rank's dst. A
   * matmul's weight gradient a^T b has m x n elements where its factors
   * have rows x (m + n): the factors move instead of the product. Barriers,
   * agree and returns as all_reduce_apply; ranks whose m or n differ get
   * FG_INVALID_ARGUMENT naming both. NULL: never. */
  int (*gather_factors)(fg_comm *c, void *dst, const void *a, const void *b, int64_t rows,
                        int64_t m, int64_t n, fg_dtype dtype, double agree, const char *agree_what,
                        fg_comm_factors_fn fn, void *arg, fg_status *st);
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
