/* What the MPI communicator's files share (internal; dist/comm/comm_mpi.c:
 * state, errors, waits, creation and teardown; comm_mpi_shm.c: the
 * shared-memory path's setup; comm_mpi_msg.c: collectives over messages,
 * the fused updates, send and recv). Only in builds with MPI. */
#ifndef FG_DIST_COMM_COMM_MPI_INTERNAL_H
#define FG_DIST_COMM_COMM_MPI_INTERNAL_H
#ifdef FG_HAVE_MPI

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm/comm_mpi.h"
#include "dist/comm/poll_pause.h"
#include "dist/comm/rank_sum.h"
#include "dist/comm/shm_reduce.h"

#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_S 60.0
/* Tags cycle below the 32767 every MPI guarantees for MPI_TAG_UB; an
 * all_reduce takes three (counts, reduce-scatter, all-gather). */
#define TAG_CYCLE 10000
/* Point-to-point data moves in pieces of this many bytes (an int count). */
#define P2P_CHUNK ((int64_t)1 << 30)
/* An abort's reason, as sent to the peers (longer ones are cut). */
#define STOP_MSG 512

typedef struct mpi_comm {
  fg_comm base;
  MPI_Comm comm;
  MPI_Comm p2p;       /* send/recv: their own tag space */
  int tag_ub;         /* the largest tag MPI allows on p2p */
  pthread_mutex_t mu; /* one collective at a time (same order on every rank) */
  uint64_t seq;       /* collectives so far; names them in errors and tags */
  atomic_int broken;  /* a deadline or MPI error: every later call fails */
  unsigned char *scratch;
  size_t scratch_size;
  MPI_Request *reqs;
  int *req_peer;
  uint64_t *gathered;      /* size values: the shared-memory setup's gathers */
  struct p2p_header *kept; /* headers of abandoned send/recv (see keep) */
  MPI_Comm ctl;            /* aborts; MPI_COMM_NULL until joined */
  MPI_Comm ctl_joining;    /* the dup in flight: not probed until complete */
  /* Set once a wait must stop (this rank's abort, or a peer's arrived),
   * with the reason every later call reports: 1 = this rank's, 2 = a
   * peer's. The reason is written under stop_mu before stop is set. */
  atomic_int stop;
  pthread_mutex_t stop_mu;
  char stop_why[STOP_MSG + 64];
  char abort_msg[STOP_MSG]; /* what this rank sent; MPI reads it until delivered */
  /* all_reduce through shared memory (dist/comm/shm_reduce.h): this host's
   * segment, for all ranks on one host or (with cross below) for each
   * host's; set up by the first all_reduce (shm_tried), NULL when it goes
   * through MPI messages, for the reason in shm_why. */
  int shm_tried;
  fg_shm_reduce *shm;
  char shm_why[160];
  /* Ranks on several hosts (hosts > 1): m->shm is this host's segment;
   * the first `owners` local indices (the smallest host's rank count) each
   * own a slice, and for an owner cross[h] is the rank of its local index
   * on host h, in host order (cross_me = this host's index). NULL for one
   * host or messages. */
  int hosts, cross_me, owners;
  int *cross;
  uint64_t msg_bytes;         /* all_reduce data sent as messages (under mu) */
  int shm_local;              /* this rank's index in m->shm */
  struct mpi_comm *kept_next; /* the next broken communicator kept (keep_broken) */
  /* A split group's ranks in MPI_COMM_WORLD (by group rank), which mpirun
   * and the user know them by; NULL where the two numberings agree. */
  int *world_of;
} mpi_comm;

/* " (MPI world rank W)" for rank r of a split group, "" where the ranks
 * are the world's: errors of a hybrid run's replica or stage groups say
 * which process they mean. */
static inline const char *world_note(const mpi_comm *m, int r, char *buf, size_t n) {
  if (!m->world_of || r < 0 || r >= m->base.size) return "";
  snprintf(buf, n, " (MPI world rank %d)", m->world_of[r]);
  return buf;
}

/* A send/recv's size header on the heap: after a deadline MPI may still
 * write it, so it is kept (reachable from the broken communicator) rather
 * than left on a dead stack frame. */
typedef struct p2p_header {
  int64_t v[2]; /* the message's size, the sender's piece size */
  struct p2p_header *next;
} p2p_header;

/* Set once MPI is initialised by us; cleared by a clean finalize. */
extern int fgm_inited;
extern atomic_int fgm_any_broken;
/* Held around every MPI call of the process (MPI_THREAD_SERIALIZED), never
 * while sleeping. */
extern pthread_mutex_t fgm_mpi_mu;
/* The MPI communicator's table (comm_mpi.c). */
extern const fg_comm_ops fgm_mpi_ops;

/* Shared between the three files; each is described where it is defined. */
int fgm_check_usable(mpi_comm *m, const char *op, fg_status *st);
int fgm_gather_locked(mpi_comm *m, uint64_t value, uint64_t *out, const char *op, fg_status *st);
double fgm_now_s(void);
int fgm_post(int is_send, void *buf, int bytes, int peer, int tag, MPI_Comm comm, MPI_Request *req);
int fgm_post_failed(mpi_comm *m, const char *desc, fg_status *st);
void fgm_probe_abort(mpi_comm *m);
int fgm_reserve(mpi_comm *m, size_t scratch, fg_status *st);
void fgm_set_broken(mpi_comm *m);
int fgm_stopped(mpi_comm *m, const char *desc, fg_status *st);
int fgm_wait_all(mpi_comm *m, int n, const char *op, fg_status *st);
int fgm_wait_reqs(mpi_comm *m, MPI_Request *reqs, const int *peers, int n, double t0,
                  const char *desc, fg_status *st);
int fgm_shm_setup(mpi_comm *m, fg_status *st);
int fgm_shm_stop(void *ctx, const char *desc, fg_status *st);
int fgm_hier_all_reduce(mpi_comm *m, unsigned char *b, int64_t count, fg_dtype dtype, int mean,
                        int tag, fg_status *st);
int fgm_mpi_all_gather_u64(fg_comm *c, uint64_t value, uint64_t *out, fg_status *st);
int fgm_mpi_all_reduce(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean,
                       fg_status *st);
int fgm_mpi_all_reduce_apply(fg_comm *c, void *dst, const void *src, int64_t count, fg_dtype dtype,
                             int mean, double agree, const char *what, fg_comm_block_fn fn,
                             void *arg, fg_status *st);
int fgm_mpi_gather_factors(fg_comm *c, void *dst, const void *a, const void *b, int64_t rows,
                           int64_t m, int64_t n, fg_dtype dtype, double agree, const char *what,
                           fg_comm_factors_fn fn, void *arg, fg_status *st);
int fgm_mpi_broadcast(fg_comm *c, void *buf, int64_t bytes, int root, fg_status *st);
int fgm_mpi_recv(fg_comm *c, void *buf, int64_t bytes, int peer, int tag, fg_status *st);
int fgm_mpi_send(fg_comm *c, const void *buf, int64_t bytes, int peer, int tag, fg_status *st);

#endif
#endif
