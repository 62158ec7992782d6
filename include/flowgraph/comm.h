/* flowgraph: communicators, the groups that data and model parallelism run
 * over (attach one to a session with fg_session_set_comm, flowgraph/dist.h).
 *
 * An fg_comm is one participant, rank r of a group of n. Three kinds:
 * - in-process (threads of one process, sharing memory);
 * - MPI (one process per rank: `mpirun -np N program`);
 * - NCCL (one GPU per rank; buffers are device memory on that GPU).
 *
 * Ownership: whoever creates a handle owns it and frees it with
 * fg_comm_free, after every session it is attached to (a session never
 * owns its communicator) and, for groups made from a parent (split, NCCL's
 * bootstrap by broadcast), before the parent where that says so.
 *
 * Deadlines: every collective, send and recv returns 0, or -1 with the
 * status set; a peer that does not arrive within the handle's timeout
 * (timeout_s <= 0: 60 s) gives FG_DEADLINE_EXCEEDED, never a hang. After a
 * deadline or an abort an MPI or NCCL handle stays broken: later calls fail
 * at once, and the process should report and end (fg_mpi_shutdown).
 *
 * Threads: one thread at a time per handle for collectives; sends and
 * receives may run on other threads concurrently with them (see
 * fg_comm_send).
 */
#ifndef FLOWGRAPH_COMM_H
#define FLOWGRAPH_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "flowgraph/export.h"
#include "flowgraph/status.h"
#include "flowgraph/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_comm fg_comm;

/* ---- making and freeing communicators ----------------------------------- */

/* An in-process group of `size` ranks (1 .. FG_MAX_CPU_DEVICES): fills
 * handles[0..size) with one new handle per rank, each used by its own
 * thread and freed with fg_comm_free (the shared state goes with the last
 * one). timeout_s <= 0: 60 s. 0, or -1 with nothing to free. */
FG_API int fg_comm_inproc_group(int size, double timeout_s, fg_comm **handles, fg_status *st);

/* 1 when this build has the MPI communicator; without it fg_comm_mpi_new
 * and fg_comm_mpi_split fail with FG_UNIMPLEMENTED. */
FG_API int fg_mpi_built(void);
/* 1 when the process looks started by mpirun/mpiexec (Open MPI's or PMI's
 * environment), so a program can say why an MPI run is refused. */
FG_API int fg_mpi_launched(void);
/* This process's handle on all of the job's ranks (a duplicate of
 * MPI_COMM_WORLD), initialising MPI on first use. A new handle the caller
 * frees with fg_comm_free, then ends MPI with fg_mpi_shutdown. Since
 * MPI's initialisation cannot be abandoned when a peer dies, a watchdog
 * ends the process with status 1 and a DEADLINE_EXCEEDED line on stderr
 * when it takes longer than max(timeout_s, 30 s). NULL on error. */
FG_API fg_comm *fg_comm_mpi_new(double timeout_s, fg_status *st);
/* The group of `parent`'s ranks that pass the same `color` (>= 0), ranked
 * by `key` (>= 0), then by parent rank, with parent's timeout (the replica
 * and stage groups of hybrid parallelism). Every rank of parent calls it;
 * a dead rank gives FG_DEADLINE_EXCEEDED. A new handle, freed with
 * fg_comm_free before parent. NULL on error. */
FG_API fg_comm *fg_comm_mpi_split(fg_comm *parent, int color, int key, fg_status *st);
/* Ends MPI for the process. code 0: a clean MPI_Finalize when every
 * communicator finished cleanly, then returns (nothing when MPI was never
 * initialised). Otherwise flushes stdio and exits with `code` at once
 * without MPI_Finalize, which would wait for a dead or stuck peer; mpirun
 * then ends the other ranks. Free every handle before code 0. */
FG_API void fg_mpi_shutdown(int code);

/* 1 when this build has the NCCL communicator (a CUDA build whose toolkit
 * has NCCL); without it the constructors fail with FG_UNIMPLEMENTED. */
FG_API int fg_nccl_built(void);
/* Rank fg_comm_rank(boot) of fg_comm_size(boot) on GPU cuda:`device`; NCCL's
 * unique id travels from rank 0 by boot's broadcast (boot is typically
 * fg_comm_mpi_new's handle and may be freed after this returns). Buffers
 * given to its collectives are device memory on that GPU; every call
 * returns once the result is in the buffer. A new handle (fg_comm_free),
 * or NULL. */
FG_API fg_comm *fg_comm_nccl_new(fg_comm *boot, int device, double timeout_s, fg_status *st);
/* The same without a bootstrap communicator: rank 0 writes the id to
 * `path` (a shared file system), the others wait for it up to the
 * timeout. Remove the file once every rank joined. */
FG_API fg_comm *fg_comm_nccl_new_file(const char *path, int rank, int size, int device,
                                      double timeout_s, fg_status *st);

/* Frees a handle of any kind; NULL is allowed. */
FG_API void fg_comm_free(fg_comm *c);

/* ---- the group ----------------------------------------------------------- */

/* This handle's rank (0 .. size - 1), or -1 for NULL. */
FG_API int fg_comm_rank(const fg_comm *c);
/* The group's size, or 0 for NULL. */
FG_API int fg_comm_size(const fg_comm *c);
/* The GPU (N of cuda:N) whose device memory the collectives take (NCCL),
 * or -1 for communicators of host memory and NULL. */
FG_API int fg_comm_cuda_device(const fg_comm *c);

/* This rank failed (`why` says how): every wait on the group, here and on
 * the other ranks, ends at once with FG_ABORTED naming this rank and `why`
 * instead of waiting out the timeout (NCCL cannot pass `why` on: its peers
 * fail through NCCL's error or their deadline). Idempotent; a no-op for
 * NULL. */
FG_API void fg_comm_abort(fg_comm *c, const char *why);

/* ---- collectives and messages (every rank calls the collectives) -------- */

/* In place over `count` elements of `buf` on every rank: the sum, or the
 * mean when `mean` is 1. The CPU communicators sum in rank order, so every
 * rank gets the same bits and runs repeat bitwise. */
FG_API int fg_comm_all_reduce(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean,
                              fg_status *st);
/* out[r] = rank r's `value`, for every rank (out holds fg_comm_size). */
FG_API int fg_comm_all_gather_u64(fg_comm *c, uint64_t value, uint64_t *out, fg_status *st);
/* Copies `bytes` of rank `root`'s buf into every rank's buf. */
FG_API int fg_comm_broadcast(fg_comm *c, void *buf, int64_t bytes, int root, fg_status *st);
/* Sends `bytes` of buf to rank `peer` under `tag` (>= 0); returns once buf
 * may be reused, which over MPI is only once the peer posted the matching
 * recv for messages above MPI's eager limit (a few KB): two ranks that
 * both send large messages before receiving on one thread wait for each
 * other until the deadline. Messages of one (sender, receiver, tag) arrive
 * in order. Not on NCCL handles (FG_UNIMPLEMENTED). */
FG_API int fg_comm_send(fg_comm *c, const void *buf, int64_t bytes, int peer, int tag,
                        fg_status *st);
/* Receives exactly `bytes` from rank `peer` under `tag` into buf; a message
 * of another size fails naming both sizes. */
FG_API int fg_comm_recv(fg_comm *c, void *buf, int64_t bytes, int peer, int tag, fg_status *st);

/* Every rank passes its hash of `what` ("graph", "input shapes"); 0 when
 * all ranks passed the same value, else -1 with FG_INVALID_ARGUMENT on
 * every rank naming the ranks and both values, followed by `hint` (may be
 * NULL) in parentheses. */
FG_API int fg_comm_check_same(fg_comm *c, uint64_t value, const char *what, const char *hint,
                              fg_status *st);
/* FNV-1a over n bytes, chained through h (start with FG_HASH_SEED): the
 * hash the library's own agreement checks use. */
#define FG_HASH_SEED 14695981039346656037ull
FG_API uint64_t fg_hash_bytes(uint64_t h, const void *data, size_t n);

/* ---- what a communicator did (MPI) --------------------------------------- */

typedef struct fg_comm_stats {
  /* How all_reduce moves data, e.g. "shared memory", "MPI messages (why)",
   * "not yet decided" before the first all_reduce, "not an MPI
   * communicator" for the other kinds. Owned by the handle: valid until it
   * is freed. */
  const char *reduce_path;
  /* 1 when all_reduce may read the ranks' buffers in place through shared
   * memory (every rank on one host): sessions then put their arenas where
   * peers can map them, and so may a program (fg_shared_host_alloc). */
  int shares_arenas;
  uint64_t in_place_reduces; /* all_reduces that read the ranks' buffers in place */
  uint64_t fused_updates;    /* of those, fused gradient updates */
  uint64_t message_bytes;    /* all_reduce bytes this rank sent as MPI messages */
} fg_comm_stats;
/* Fills *out: the counts are 0 for handles that are not MPI's, and
 * everything is 0 or NULL for a NULL handle. */
FG_API void fg_comm_get_stats(const fg_comm *c, fg_comm_stats *out);

/* `bytes` of zeroed, page-aligned host memory that the other processes of
 * an MPI communicator on this host can map, so an all_reduce over it reads
 * it in place; ordinary 64-byte aligned memory where shared memory is not
 * available. NULL when out of memory. Free with fg_shared_host_free (not
 * free()); NULL is allowed there. */
FG_API void *fg_shared_host_alloc(size_t bytes);
FG_API void fg_shared_host_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
