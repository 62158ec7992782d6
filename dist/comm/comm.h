/* The communicators (dist/comm/): in-process, MPI and NCCL
 * implementations of the interface kernels call, declared in
 * kernels/collective.h (fg_comm, fg_comm_ops), plus what every
 * communicator offers on top of it. Each participant holds its own handle
 * (rank r of size n); handles of one group share state inside the
 * implementation. */
#ifndef FG_DIST_COMM_COMM_H
#define FG_DIST_COMM_COMM_H

#include <stdint.h>

#include "flowgraph/status.h"
#include "kernels/collective.h"

/* The ranks' agreement over any communicator (dist/comm/comm_check.c): every
 * rank passes its hash of `what` (e.g. "graph"); 0 when all agree, else -1 with
 * FG_INVALID_ARGUMENT naming the ranks and both hashes ("rank 0 has graph
 * hash 0x..., rank 1 has 0x... (hint)"), the same on every rank. */
int fg_comm_check_same(fg_comm *c, uint64_t value, const char *what, const char *hint,
                       fg_status *st);
/* The same with the hint of the CLI, whose ranks load one file. */
int fg_comm_check_same_u64(fg_comm *c, uint64_t value, const char *what, fg_status *st);

#endif
