/* The MPI communicator (kernels/collective.h over Open MPI), for data parallelism
 * across processes: `mpirun -np N flowgraph train ... --dist mpi`.
 *
 * Collectives are nonblocking MPI calls polled against a deadline, so a
 * peer that died or is stuck gives FG_DEADLINE_EXCEEDED on the survivors
 * within the timeout instead of a hang. After a deadline or
 * MPI error the communicator is broken: every later call fails at once, and
 * the process should report and exit (fg_mpi_shutdown(1)); MPI may still
 * own buffers of the abandoned operation, so it cannot continue safely.
 *
 * all_reduce sums in rank order 0, 1, ..., n-1 (a reduce-scatter where the
 * owner of each chunk adds the contributions in that order, then an
 * all-gather), so every rank gets the same bits, and the same bits as the
 * in-process communicator on the same data. The mean divides the sum by n.
 *
 * send/recv (model parallelism) run on a second duplicate of
 * MPI_COMM_WORLD, as a 16-byte header (size, piece size) then the data in
 * pieces of at most 1 GiB; send returns when MPI is done with the buffer (small messages
 * at once, large ones once the peer posted the recv). Every MPI call of the
 * process holds one lock for that call only, never while waiting, so device
 * threads may send, receive and run collectives concurrently. The
 * environment variable FG_MPI_P2P_CHUNK (bytes) shrinks the pieces, for
 * tests.
 *
 * In a build without MPI (FG_HAVE_MPI unset) every function below exists and
 * fg_comm_mpi_new fails with FG_UNIMPLEMENTED. */
#ifndef FG_DIST_COMM_MPI_H
#define FG_DIST_COMM_MPI_H

#include "dist/comm/comm.h"

/* 1 when this build has the MPI communicator. */
int fg_mpi_built(void);
/* 1 when the process looks started by mpirun/mpiexec (Open MPI's or PMI's
 * environment), so a plain run can say why --dist mpi is refused. */
int fg_mpi_launched(void);

/* Initialises MPI on first use (MPI_THREAD_SERIALIZED: calls may come from
 * any thread, serialised by the process lock) and returns a handle on a duplicate of
 * MPI_COMM_WORLD with MPI_ERRORS_RETURN. timeout_s <= 0 means the default
 * (60 s). Free with c->ops->free. MPI_Init_thread (like fg_comm_mpi_split's
 * MPI_Comm_split) cannot be abandoned when a peer dies: a watchdog ends the
 * process with status 1 and a DEADLINE_EXCEEDED line on stderr when one
 * takes longer than max(timeout_s, 30 s) (FG_MPI_WATCHDOG_MIN_S replaces
 * the 30 s). */
fg_comm *fg_comm_mpi_new(double timeout_s, fg_status *st);

/* The group of `parent`'s ranks that pass the same `color` (>= 0), ranked
 * by `key` (>= 0), then by parent rank (MPI_Comm_split), with parent's
 * timeout: the replica and stage groups of hybrid parallelism. Every rank
 * of parent calls it. The colours are first gathered under parent's
 * deadline, so a dead rank gives FG_DEADLINE_EXCEEDED instead of a hang
 * in the split. Free with c->ops->free, before parent's. */
fg_comm *fg_comm_mpi_split(fg_comm *parent, int color, int key, fg_status *st);

/* How c's all_reduce moves data: "shared memory" when every rank is on one
 * host (dist/comm/shm_reduce.h; decided by the first all_reduce, on every rank
 * alike); "shared memory within each of H hosts (L ranks each), MPI
 * messages across" (or "(L to M ranks), MPI messages across among the
 * first L of each") when the ranks are on several hosts, more than one on
 * some: each host sums in its own segment, each of the first L ranks of a
 * host (L the smallest host's count) sums its slice across hosts by
 * messages, and each host gathers the slices; the sum is each host's
 * ranks in rank order, then the hosts in order (a buffer that fits one
 * message round goes as on the message path, in rank order). Else "MPI
 * messages (why)"; "not yet decided" before the first all_reduce. FG_MPI_SHM=0 on
 * any rank keeps the messages; FG_MPI_SHM_CHUNK (bytes, each host's first
 * rank's) sets the shared slot size, for tests and benchmarks; FG_MPI_HOST
 * replaces a rank's host name (several pretend hosts on one machine). */
const char *fg_comm_mpi_reduce_path(const fg_comm *c);

/* 1 when c's all_reduce may go through shared memory (an MPI communicator
 * of several ranks, FG_MPI_SHM not 0 here, and not already found to take
 * messages): a session then puts its host arenas where the peers can map
 * them (dist/comm/shm_arena.h), so the reduction reads their buffers in place.
 * FG_MPI_SHM_ARENA=0 keeps ordinary memory (the copy through the
 * segment's slots, for comparison). */
int fg_comm_mpi_shares_arenas(const fg_comm *c);
/* The processes of c's job on this machine, this one included, as the
 * launcher states them (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's
 * MPI_LOCALNRANKS); 1 when it does not or c is not an MPI communicator.
 * Sessions ask it to know whether their ranks' compute already fills the
 * cores (collective_lanes 0). Reads the environment only: no MPI call. */
int fg_comm_mpi_host_procs(const fg_comm *c);
/* All_reduces of c that read the ranks' buffers in place so far
 * (fg_shm_reduce_set_in_place); 0 for other communicators. */
uint64_t fg_comm_mpi_in_place_count(const fg_comm *c);
/* Of those, the peer-buffer collectives (all_reduce_apply, gather_factors:
 * the fused updates). */
uint64_t fg_comm_mpi_fused_count(const fg_comm *c);
/* Bytes of all_reduce data this rank has sent as MPI messages so far (not
 * the counts that go with them); 0 for other communicators. What crosses
 * between hosts: over H hosts of L ranks, the message path among all ranks
 * sends 2 (H-1)/H of a buffer's bytes from each rank to other hosts, the
 * path across hosts 2 (H-1)/H of its 1/L slice, L times less. */
uint64_t fg_comm_mpi_message_bytes(const fg_comm *c);

/* fg_comm_check_same_u64 (the graph-hash check, over any communicator) is in
 * kernels/collective.h. */

/* FNV-1a over bytes, chained through `h` (start with FG_HASH_SEED), for the
 * graph hash of the check above. */
#define FG_HASH_SEED 14695981039346656037ull
uint64_t fg_hash_bytes(uint64_t h, const void *data, size_t n);

/* Ends MPI for the process. code 0: MPI_Finalize when every communicator
 * finished cleanly, then returns. Otherwise flushes stdio and _exits with
 * `code` without MPI_Finalize, which would wait for operations a dead or
 * stuck peer never completes; mpirun then ends the other ranks. No-op for
 * code 0 when MPI was never initialised. */
void fg_mpi_shutdown(int code);

#endif
