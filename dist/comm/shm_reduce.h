/* All-reduce through POSIX shared memory among processes of one host
 * (internal; the MPI communicator's path when all its ranks share a host,
 * and within each host when they are on several, dist/comm/comm_mpi.c).
 *
 * Why: over Open MPI's shared-memory transport a large all_reduce between
 * two processes reaches a small fraction of memcpy's bandwidth, through
 * MPI messages or MPI_Allreduce alike: every byte goes through MPI's
 * fragment queues or a process_vm_readv per message. In one mapping all ranks can
 * see, each rank copies its buffer in once, sums its own 1/n slice straight
 * from the other ranks' copies, and copies the summed slices out: no
 * message, no per-fragment handshake (about 3 times as fast). NCCL and Gloo
 * do the same inside a host.
 *
 * The segment holds, per rank, a 64-byte header (a barrier counter and
 * two count/dtype pairs, used in turn by collectives), a 64-byte line
 * saying where its buffer is when that lies in an arena the others can
 * map (fg_shm_reduce_set_in_place below), and two slots of `chunk` bytes
 * used in turn, so a rank may start the next chunk while a slower one
 * still reads the last. A buffer larger than a slot goes through in
 * chunks; per chunk:
 *   1. copy in the slices the other ranks sum (every slice but its own);
 *   2. barrier;
 *   3. sum its slice in rank order 0 + 1 + ... + n-1 (dist/comm/rank_sum.h, the
 *      same bits as the other communicators) into its own slot;
 *   4. barrier;
 *   5. copy every rank's summed slice out into the buffer.
 * A buffer whose n copies fit in 16 KiB (and itself in a slot) takes one
 * round with one barrier instead: every rank copies all of it in, and
 * after the barrier sums all of it in rank order itself. At 1 to 4 KB
 * over 2 ranks the waits are most of the time, and this saves one (about a
 * quarter of the time at 1 to 4 KB).
 * Barriers are counters in the headers, polled with a spin, then yields,
 * then 50 us sleeps, against a deadline, and the caller's `stop` hook is
 * asked every 64 polls (the MPI communicator probes for a peer's abort
 * there). The segment's name is unlinked as soon as every rank mapped it,
 * so a crash leaves nothing in /dev/shm. */
#ifndef FG_DIST_SHM_REDUCE_H
#define FG_DIST_SHM_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "dist/comm/comm.h"
#include "flowgraph/status.h"
#include "flowgraph/types.h"

typedef struct fg_shm_reduce fg_shm_reduce;

/* How a wait ends early: `stop` (may be NULL) returns non-zero with st set
 * when the caller's group was aborted. The deadline is timeout_s after the
 * wait began. */
typedef struct fg_shm_wait {
  double timeout_s;
  int (*stop)(void *ctx, const char *desc, fg_status *st);
  void *ctx;
} fg_shm_wait;

/* Slot sizes outside [4 KiB, 1 GiB] are clamped; the slot is rounded up to
 * 64 bytes. The default is FG_SHM_DEFAULT_CHUNK. */
#define FG_SHM_DEFAULT_CHUNK ((size_t)128 << 10)
size_t fg_shm_chunk_bytes(size_t requested);

/* Rank 0 creates the segment `name` ("/..." as shm_open takes) for n ranks
 * of `chunk` bytes per slot (fg_shm_chunk_bytes), with every page allocated
 * up front (posix_fallocate: a /dev/shm too small fails here with its
 * errno, not with SIGBUS later). Then every rank, rank 0 included, attaches;
 * then rank 0 unlinks the name (fg_shm_reduce_unlink), once every rank
 * reported its attach. NULL / -1 with status set naming the call and its
 * errno: FG_RESOURCE_EXHAUSTED for ENOSPC and ENOMEM, FG_IO_ERROR
 * otherwise, FG_INVALID_ARGUMENT for a bad rank, n or name. */
int fg_shm_reduce_create(const char *name, int n, size_t chunk, fg_status *st);
fg_shm_reduce *fg_shm_reduce_attach(const char *name, int rank, int n, size_t chunk, fg_status *st);
void fg_shm_reduce_unlink(const char *name);
void fg_shm_reduce_free(fg_shm_reduce *s); /* accepts NULL; local, not a collective */

/* In place over `count` elements of buf (f32, f64, i32, i64), the same
 * count and dtype on every rank: the sum in rank order, or the mean when
 * `mean` is 1. `desc` names the collective in errors ("all_reduce
 * (collective #3)"). Count 0 takes part like any other (the counts are
 * compared). Errors, the same on every rank where the peers are alive:
 * FG_INVALID_ARGUMENT when the ranks' counts or dtypes differ (naming
 * both; the group stays usable), FG_DEADLINE_EXCEEDED naming the
 * ranks that did not arrive, or the stop hook's status. After a deadline
 * or a stop the group is out of step: the caller must not use it again. */
/* Where every rank's buffer may lie in an arena (dist/comm/shm_arena.h), with
 * `on` the same on every rank: then a collective over more than the small
 * path's bytes first publishes where its buffer is, and when every
 * rank's is in an arena that every rank could map, each rank sums its
 * slice straight from the buffers and stores it into all of them (the
 * in-process group's way): no copy through the slots, 3 barriers in all.
 * Otherwise the slots as above, after one more barrier. Off by default.
 * In place ran 1.8 to 2 times as fast as the slots from 1 MB up. */
void fg_shm_reduce_set_in_place(fg_shm_reduce *s, int on);
/* Errors name rank p as names[p] of `of` (the group within a larger one:
 * the MPI ranks of one host); copied. -1 when out of memory. */
int fg_shm_reduce_name_ranks(fg_shm_reduce *s, const int *names, int of);

/* Collectives that went in place so far, and of those the fused updates
 * (fg_shm_all_reduce_apply, fg_shm_gather_factors). */
uint64_t fg_shm_reduce_in_place_count(const fg_shm_reduce *s);
uint64_t fg_shm_reduce_fused_count(const fg_shm_reduce *s);

int fg_shm_all_reduce(fg_shm_reduce *s, void *buf, int64_t count, fg_dtype dtype, int mean,
                      const char *desc, const fg_shm_wait *w, fg_status *st);

/* The communicator's all_reduce_apply (kernels/collective.h) over this
 * segment: when in-place reads are on and every rank's src (`grad`) and
 * dst (`var`) lie in arenas every rank can map, each rank sums its slice
 * of the sources straight from the ranks' buffers, a block at a time into
 * L1, and hands each block to fn with the block's addresses in every
 * rank's dst: each rank reads its slice of the sources and writes that
 * slice of every dst through fn, where all_reduce and then a local update
 * read and wrote every byte on every rank. The sums are those of
 * fg_shm_all_reduce (sum or mean). Three barriers: the first orders every
 * rank's earlier reads of its dst before any write (and is followed by the
 * count and `lr` checks: every rank must pass the same value, which
 * messages call `what`), the second agrees that every buffer is mapped,
 * the last ends the writes. f32 or f64 (else FG_INVALID_ARGUMENT on every
 * rank, naming both). 0 when done; 1 when it does not apply (in-place
 * reads off, count 0, the small path's sizes, or a buffer not in a
 * mappable arena: the same on every rank, nothing written); -1 with st
 * set, as fg_shm_all_reduce. */
int fg_shm_all_reduce_apply(fg_shm_reduce *s, void *var, const void *grad, int64_t count,
                            fg_dtype dtype, int mean, double lr, const char *what,
                            fg_comm_block_fn fn, void *arg, const char *desc, const fg_shm_wait *w,
                            fg_status *st);

/* The communicator's gather_factors (kernels/collective.h) over this
 * segment: var [m, n], and on each rank a [rows, m], b [rows, n] (rows
 * may differ between ranks). After the first barrier (every rank's reads
 * of its var are done; the counts, m and n, and lr are checked) and the
 * second (every buffer mapped), each rank gathers every rank's rows of its
 * slice of a's columns and of b into a buffer it keeps, calls fn on them
 * with its slice of var's rows, and copies the slice into every other
 * rank's var; a third barrier ends the writes. Returns as
 * fg_shm_all_reduce_apply (1 also when the gather buffer cannot be
 * allocated on some rank); ranks whose m or n differ (the same m x n) get
 * FG_INVALID_ARGUMENT naming both. */
int fg_shm_gather_factors(fg_shm_reduce *s, void *var, const void *a, const void *b, int64_t rows,
                          int64_t m, int64_t n, fg_dtype dtype, double lr, const char *what,
                          fg_comm_factors_fn fn, void *arg, const char *desc, const fg_shm_wait *w,
                          fg_status *st);

/* The pieces of the MPI communicator's path across hosts (dist/comm/comm_mpi.c:
 * shared memory within each host, messages between them). */

/* The buffer cut into `owners` slices (0: n), slice p owned by rank p
 * (fg_rank_slice(count, owners, p), dist/comm/rank_sum.h); ranks from owners
 * on own none. Owners outside 0 .. n are refused before any barrier. */

/* fg_shm_all_reduce's sum (or mean) of each owner p's slice p into rank
 * p's buffer only; the rest of each buffer is left as it was, except on
 * the small path (whole sums everywhere). With fg_shm_all_gather_slices
 * after it, an all_reduce that writes each buffer's other slices once
 * instead of twice. */
int fg_shm_reduce_scatter(fg_shm_reduce *s, void *buf, int64_t count, fg_dtype dtype, int mean,
                          int owners, const char *desc, const fg_shm_wait *w, fg_status *st);

/* Each owner p holds slice p of buf; afterwards every rank holds all of
 * them. The same count and dtype on every rank (compared, refused as
 * fg_shm_all_reduce refuses). With in-place reads on
 * (fg_shm_reduce_set_in_place) and every buffer in an arena, each rank
 * copies the others' slices straight from their buffers; otherwise through
 * the slots, a chunk at a time. */
int fg_shm_all_gather_slices(fg_shm_reduce *s, void *buf, int64_t count, fg_dtype dtype, int owners,
                             const char *desc, const fg_shm_wait *w, fg_status *st);

#endif
