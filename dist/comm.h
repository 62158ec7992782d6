/* Communicators: the collectives data parallelism needs, behind one small
 * interface so the executor runs an all_reduce node the same way whether the
 * replicas are cpu:N devices in this process (dist/comm_inproc.c), MPI ranks
 * (dist/comm_mpi.c) or GPUs (NCCL). Each participant holds its own handle
 * (rank r of size n); handles of one group share state inside the
 * implementation. Every call returns 0, or -1 with `st` set: a peer that does
 * not arrive within the timeout gives FG_DEADLINE_EXCEEDED (BAD_INPUTS M1),
 * never a hang. */
#ifndef FG_DIST_COMM_H
#define FG_DIST_COMM_H

#include <stdint.h>

#include "flowgraph/status.h"
#include "flowgraph/types.h"

typedef struct fg_comm fg_comm;

typedef struct fg_comm_ops {
  /* In place over `count` elements of `buf` on every rank: the sum, or the
   * mean when `mean` is 1. The summation order is fixed (rank 0 + rank 1 +
   * ...), so every rank gets the same bits and runs repeat bitwise. */
  int (*all_reduce)(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean, fg_status *st);
  /* out[r] = value of rank r, for all n ranks (graph-hash check, M2). */
  int (*all_gather_u64)(fg_comm *c, uint64_t value, uint64_t *out, fg_status *st);
  /* Copies `bytes` of rank `root`'s buf to every rank. */
  int (*broadcast)(fg_comm *c, void *buf, int64_t bytes, int root, fg_status *st);
  void (*free)(fg_comm *c);
} fg_comm_ops;

struct fg_comm {
  const fg_comm_ops *ops;
  int rank, size;
  double timeout_s; /* 0: the default (60 s) */
};

#endif
