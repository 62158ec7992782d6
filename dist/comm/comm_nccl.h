/* The NCCL communicator (kernels/collective.h over NCCL) for cuda:N replicas.
 *
 * Buffers passed to its collectives are device memory on the handle's GPU;
 * every call is synchronous (it returns once the result is in the buffer),
 * on a stream of its own, so the caller must have finished writing the
 * buffer first. NCCL picks its own reduction order (rings and trees by
 * topology): runs repeat bitwise on the same machine and NCCL version, but
 * the bits need not equal the CPU communicators' rank-order sums.
 *
 * Init and every collective are nonblocking NCCL calls polled against the
 * timeout: a peer that never joins or stops answering, and any asynchronous
 * NCCL error, abort the communicator (ncclCommAbort) and give
 * FG_DEADLINE_EXCEEDED, never a hang. A handle that failed
 * so is broken: later calls fail at once.
 *
 * The unique id NCCL needs on every rank comes from rank 0 either through
 * another communicator's broadcast (MPI: fg_comm_mpi_new) or through a file
 * on a shared file system (single-process multi-GPU, or no MPI).
 *
 * In a build without CUDA and nccl.h (FG_HAVE_NCCL unset) the functions
 * exist and fail with FG_UNIMPLEMENTED. */
#ifndef FG_DIST_COMM_NCCL_H
#define FG_DIST_COMM_NCCL_H

#include "dist/comm/comm.h"

/* 1 when this build has the NCCL communicator. Its ops include gpu (the
 * handle's device: fg_comm_gpu) and all_reduce_scaled (NCCL's
 * pre-multiplied sum: fg_comm_all_reduce_scaled). */
int fg_nccl_built(void);

/* Rank boot->rank of boot->size on GPU `device`; rank 0's unique id travels
 * by boot->ops->broadcast. timeout_s <= 0: 60 s. Free with c->ops->free
 * (boot may be freed before). */
fg_comm *fg_comm_nccl_new(fg_comm *boot, int device, double timeout_s, fg_status *st);

/* Same, bootstrapped through `path`: rank 0 writes the unique id there
 * (temporary file plus rename), the others wait for it up to the timeout.
 * Remove the file after every rank joined. */
fg_comm *fg_comm_nccl_new_file(const char *path, int rank, int size, int device, double timeout_s,
                               fg_status *st);

#endif
