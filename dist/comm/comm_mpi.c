/* The MPI communicator; see dist/comm/comm_mpi.h for the contract.
 *
 * Why not MPI_Allreduce: MPI leaves the reduction order to the library (it
 * changes with the algorithm it picks per size), so two runs, or MPI and the
 * in-process communicator, could differ in the last bits. Here the buffer is
 * cut into n chunks; rank c receives everyone's chunk c, adds them in rank
 * order 0..n-1 and sends the sum back to all: the same 2(n-1)/n bytes per
 * rank as a ring, and a fixed order (a buffer of a few KB goes in one round
 * instead: MSG_SMALL; two ranks swap whole buffers up to 32 KB: PAIR_MAX).
 * Every wait polls MPI_Testsome against a deadline, so
 * a silent peer turns into FG_DEADLINE_EXCEEDED, not a hang. When every
 * rank is on one host (the usual case of `mpirun -np N` on one machine) the
 * first all_reduce sets up one POSIX shared-memory segment instead
 * (dist/comm/shm_reduce.h: the same slices, the same order, no messages, and
 * sessions' buffers read in place, several times MPI_Allreduce's bus
 * bandwidth on large buffers), and later ones go
 * through it; its waits probe for aborts as these do.
 *
 * Threads: MPI runs at MPI_THREAD_SERIALIZED, so every MPI call of the
 * process holds g_mpi_mu, and only for that call: waits poll MPI_Testsome
 * under the lock and sleep outside it. A send waiting for its peer on one
 * thread therefore never holds up a recv or a collective on another (model
 * parallelism runs several device threads per process). Collectives
 * additionally hold the communicator's mu from start to end: they share its
 * request arrays and must keep one order on every rank.
 *
 * Point-to-point messages travel on a second duplicate of MPI_COMM_WORLD,
 * so user tags never meet the collectives' tags. Each message is a 16-byte
 * header holding its size and piece size, then the data in pieces of at
 * most 1 GiB (MPI counts are int): the receiver learns the sender's size
 * and cut before any data moves, so a size mismatch names both sizes exactly, and the data is
 * drained so the next message of that (peer, tag) still lines up.
 *
 * Aborts travel on a third duplicate: a rank whose step failed sends its
 * reason to every peer there, and every wait probes it, so the survivors
 * stop at once with FG_ABORTED naming the failed rank rather than waiting
 * out the deadline. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm/comm_mpi.h"
#include "dist/comm/poll_pause.h"
#include "dist/comm/rank_sum.h"
#include "dist/comm/shm_reduce.h"

uint64_t fg_hash_bytes(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

int fg_mpi_launched(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

#ifndef FG_HAVE_MPI

int fg_mpi_built(void) { return 0; }

fg_comm *fg_comm_mpi_new(double timeout_s, fg_status *st) {
  (void)timeout_s;
  fg_status_set(st, FG_UNIMPLEMENTED,
                "this flowgraph was built without MPI (install libopenmpi-dev and rebuild)");
  return NULL;
}

fg_comm *fg_comm_mpi_split(fg_comm *parent, int color, int key, fg_status *st) {
  (void)parent, (void)color, (void)key;
  return fg_comm_mpi_new(0, st);
}

void fg_mpi_shutdown(int code) {
  if (code != 0) {
    fflush(NULL);
    _Exit(code);
  }
}

const char *fg_comm_mpi_reduce_path(const fg_comm *c) {
  (void)c;
  return "not an MPI communicator";
}

int fg_comm_mpi_shares_arenas(const fg_comm *c) {
  (void)c;
  return 0;
}

int fg_comm_mpi_host_procs(const fg_comm *c) {
  (void)c;
  return 1;
}

uint64_t fg_comm_mpi_in_place_count(const fg_comm *c) {
  (void)c;
  return 0;
}

uint64_t fg_comm_mpi_fused_count(const fg_comm *c) {
  (void)c;
  return 0;
}

uint64_t fg_comm_mpi_message_bytes(const fg_comm *c) {
  (void)c;
  return 0;
}

#else

#include "dist/comm/comm_mpi_internal.h"

/* Set once MPI is initialised by us; cleared by a clean finalize. */
int fgm_inited;
atomic_int fgm_any_broken;
/* Held around every MPI call of the process (MPI_THREAD_SERIALIZED), never
 * while sleeping. */
pthread_mutex_t fgm_mpi_mu = PTHREAD_MUTEX_INITIALIZER;

int fg_mpi_built(void) { return 1; }

double fgm_now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const char *mpi_errstr(int rc, char *buf) {
  int len = 0;
  pthread_mutex_lock(&fgm_mpi_mu);
  int erc = MPI_Error_string(rc, buf, &len);
  pthread_mutex_unlock(&fgm_mpi_mu);
  if (erc != MPI_SUCCESS) snprintf(buf, MPI_MAX_ERROR_STRING, "?");
  return buf;
}

void fgm_set_broken(mpi_comm *m) {
  atomic_store(&m->broken, 1);
  atomic_store(&fgm_any_broken, 1);
}

/* Records why waits must stop (the first reason wins); kind as m->stop. */
static void record_stop(mpi_comm *m, int kind, const char *why) {
  pthread_mutex_lock(&m->stop_mu);
  if (!atomic_load(&m->stop)) {
    snprintf(m->stop_why, sizeof m->stop_why, "%s", why);
    atomic_store(&m->stop, kind);
  }
  pthread_mutex_unlock(&m->stop_mu);
  fgm_set_broken(m);
}

/* Takes a peer's abort message off the control communicator, if one came.
 * fgm_mpi_mu is held across the probe and the receive, so no other thread
 * takes the message between them. */
void fgm_probe_abort(mpi_comm *m) {
  int flag = 0, len = 0;
  MPI_Status s;
  char msg[STOP_MSG];
  if (m->ctl == MPI_COMM_NULL) return; /* still joining the group */
  pthread_mutex_lock(&fgm_mpi_mu);
  if (MPI_Iprobe(MPI_ANY_SOURCE, 0, m->ctl, &flag, &s) == MPI_SUCCESS && flag) {
    MPI_Get_count(&s, MPI_CHAR, &len);
    if (MPI_Recv(msg, STOP_MSG, MPI_CHAR, s.MPI_SOURCE, 0, m->ctl, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS)
      len = 0;
  }
  pthread_mutex_unlock(&fgm_mpi_mu);
  if (!flag) return;
  if (len < 0) len = 0;
  if (len >= STOP_MSG) len = STOP_MSG - 1;
  msg[len] = '\0';
  char why[STOP_MSG + 64];
  char who[48];
  snprintf(why, sizeof why, "rank %d%s failed: %s", s.MPI_SOURCE,
           world_note(m, s.MPI_SOURCE, who, sizeof who), msg[0] ? msg : "(no reason)");
  record_stop(m, 2, why);
}

/* Fails with FG_ABORTED when a wait must stop; `desc` names the wait. */
int fgm_stopped(mpi_comm *m, const char *desc, fg_status *st) {
  if (!atomic_load(&m->stop)) return 0;
  char me[48];
  pthread_mutex_lock(&m->stop_mu);
  fg_status_set(st, FG_ABORTED, "%s on rank %d of %d%s: stopped: %s", desc, m->base.rank,
                m->base.size, world_note(m, m->base.rank, me, sizeof me), m->stop_why);
  pthread_mutex_unlock(&m->stop_mu);
  return 1;
}

int fgm_check_usable(mpi_comm *m, const char *op, fg_status *st) {
  if (fgm_stopped(m, op, st)) return -1;
  if (atomic_load(&m->broken)) {
    fg_status_set(st, FG_INTERNAL,
                  "%s on rank %d: the MPI communicator failed earlier (deadline or peer error); "
                  "the process must exit",
                  op, m->base.rank);
    return -1;
  }
  return 0;
}

/* Waits for n requests (reqs[i] talks to rank peers[i], -1: all) until
 * t0 + the timeout. Polls (Open MPI progresses only inside MPI calls),
 * pausing as dist/comm/poll_pause.h says; fgm_mpi_mu is held for each poll only.
 * `desc` names the operation in errors ("all_reduce (collective #3)"). */
int fgm_wait_reqs(mpi_comm *m, MPI_Request *reqs, const int *peers, int n, double t0,
                  const char *desc, fg_status *st) {
  double timeout = m->base.timeout_s > 0 ? m->base.timeout_s : DEFAULT_TIMEOUT_S;
  double deadline = t0 + timeout;
  int left = n, idx_small[8], *idx = n <= 8 ? idx_small : malloc((size_t)n * sizeof *idx);
  if (!idx) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "%s: out of memory", desc);
    fgm_set_broken(m);
    return -1;
  }
  int rc = 0;
  for (long polls = 0; left > 0; polls++) {
    int done = 0;
    pthread_mutex_lock(&fgm_mpi_mu);
    int mrc = MPI_Testsome(n, reqs, &done, idx, MPI_STATUSES_IGNORE);
    pthread_mutex_unlock(&fgm_mpi_mu);
    if (mrc != MPI_SUCCESS) {
      char buf[MPI_MAX_ERROR_STRING], me[48];
      fg_status_set(st, FG_DEADLINE_EXCEEDED,
                    "%s on rank %d of %d%s: MPI error talking to a peer (%s); "
                    "a peer died or the network failed",
                    desc, m->base.rank, m->base.size, world_note(m, m->base.rank, me, sizeof me),
                    mpi_errstr(mrc, buf));
      fgm_set_broken(m);
      rc = -1;
      break;
    }
    if (done == MPI_UNDEFINED) break; /* all were already complete */
    left -= done;
    if (left == 0) break;
    if (done > 0) polls = 0;
    /* A peer's abort: probed every 64 spins, and at every slower poll. */
    if ((polls & 63) == 0 || polls >= FG_POLL_SPINS) fgm_probe_abort(m);
    if (fgm_stopped(m, desc, st)) {
      rc = -1;
      break;
    }
    double t = fgm_now_s();
    if (t > deadline) {
      char peer_list[256] = "", note[48], me[48];
      size_t used = 0;
      for (int i = 0; i < n && used + 48 < sizeof peer_list; i++) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        int p = peers[i];
        /* A peer appears once even when it owes several messages. */
        int seen = 0;
        for (int j = 0; j < i; j++)
          if (reqs[j] != MPI_REQUEST_NULL && peers[j] == p) seen = 1;
        if (!seen)
          used +=
              (size_t)(p < 0 ? snprintf(peer_list + used, sizeof peer_list - used,
                                        "(any: a collective, MPI does not say which)")
                             : snprintf(peer_list + used, sizeof peer_list - used, "%s%d%s",
                                        used ? ", " : "", p, world_note(m, p, note, sizeof note)));
      }
      fg_status_set(st, FG_DEADLINE_EXCEEDED,
                    "%s on rank %d of %d%s: waited %.1f s (timeout %.1f s) for "
                    "rank(s) %s; a peer died or is stuck",
                    desc, m->base.rank, m->base.size, world_note(m, m->base.rank, me, sizeof me),
                    t - t0, timeout, peer_list[0] ? peer_list : "?");
      fgm_set_broken(m);
      rc = -1;
      break;
    }
    fg_poll_pause(polls);
  }
  if (idx != idx_small) free(idx);
  return rc;
}

/* A collective's wait: its requests are m->reqs, its name carries its
 * sequence number. */
int fgm_wait_all(mpi_comm *m, int n, const char *op, fg_status *st) {
  char desc[160];
  snprintf(desc, sizeof desc, "%s (collective #%llu)", op, (unsigned long long)m->seq);
  return fgm_wait_reqs(m, m->reqs, m->req_peer, n, fgm_now_s(), desc, st);
}

/* MPI_Isend / MPI_Irecv of bytes under the process lock. */
int fgm_post(int is_send, void *buf, int bytes, int peer, int tag, MPI_Comm comm,
             MPI_Request *req) {
  pthread_mutex_lock(&fgm_mpi_mu);
  int rc = is_send ? MPI_Isend(buf, bytes, MPI_BYTE, peer, tag, comm, req)
                   : MPI_Irecv(buf, bytes, MPI_BYTE, peer, tag, comm, req);
  pthread_mutex_unlock(&fgm_mpi_mu);
  return rc;
}

int fgm_reserve(mpi_comm *m, size_t scratch, fg_status *st) {
  if (scratch > m->scratch_size) {
    unsigned char *p = realloc(m->scratch, scratch);
    if (!p) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "all_reduce: cannot allocate %zu scratch bytes",
                    scratch);
      return -1;
    }
    m->scratch = p;
    m->scratch_size = scratch;
  }
  return 0;
}

/* A post (MPI_Isend / MPI_Irecv) of operation `desc` failed: MPI may hold
 * the others already posted, so the communicator is broken. -1. */
int fgm_post_failed(mpi_comm *m, const char *desc, fg_status *st) {
  fg_status_set(st, FG_INTERNAL, "%s on rank %d: posting a message failed", desc, m->base.rank);
  fgm_set_broken(m);
  return -1;
}

/* One MPI_Iallgather of a u64, waited for under the deadline; the caller
 * holds m->mu. */
int fgm_gather_locked(mpi_comm *m, uint64_t value, uint64_t *out, const char *op, fg_status *st) {
  uint64_t v = value;
  m->req_peer[0] = -1;
  pthread_mutex_lock(&fgm_mpi_mu);
  int mrc = MPI_Iallgather(&v, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, m->comm, &m->reqs[0]);
  pthread_mutex_unlock(&fgm_mpi_mu);
  if (mrc != MPI_SUCCESS) {
    fg_status_set(st, FG_INTERNAL, "%s on rank %d: MPI_Iallgather failed", op, m->base.rank);
    fgm_set_broken(m);
    return -1;
  }
  return fgm_wait_all(m, 1, op, st);
}

/* Broken communicators stay here until the process exits: MPI may still
 * write into their receives (and complete a dup into them), so they are
 * never freed, and they stay reachable so the leak checker does not report
 * them. A list: a process may break more than one (a split of a broken
 * world, a failed join after an earlier one). */
static mpi_comm *volatile fg_mpi_kept_broken;
static pthread_mutex_t g_kept_mu = PTHREAD_MUTEX_INITIALIZER;

static void keep_broken(mpi_comm *m) {
  pthread_mutex_lock(&g_kept_mu);
  m->kept_next = fg_mpi_kept_broken;
  fg_mpi_kept_broken = m;
  pthread_mutex_unlock(&g_kept_mu);
}

static void mpi_free(fg_comm *c) {
  mpi_comm *m = (mpi_comm *)c;
  if (!m) return;
  if (atomic_load(&m->broken)) {
    keep_broken(m);
    return;
  }
  pthread_mutex_lock(&fgm_mpi_mu);
  if (m->ctl != MPI_COMM_NULL) MPI_Comm_free(&m->ctl);
  if (m->p2p != MPI_COMM_NULL) MPI_Comm_free(&m->p2p);
  MPI_Comm_free(&m->comm);
  pthread_mutex_unlock(&fgm_mpi_mu);
  fg_shm_reduce_free(m->shm);
  free(m->cross);
  free(m->world_of);
  pthread_mutex_destroy(&m->mu);
  pthread_mutex_destroy(&m->stop_mu);
  free(m->scratch);
  fg_comm_free_base(&m->base);
  free(m->reqs);
  free(m->req_peer);
  free(m->gathered);
  free(m);
}

/* Stops this rank's waits and sends `why` to every peer (once; not again
 * when the stop came from a peer, which told everyone itself). The sends
 * are small, so MPI delivers them eagerly; their requests are freed. */
static void mpi_abort(fg_comm *c, const char *why) {
  mpi_comm *m = (mpi_comm *)c;
  if (!m) return;
  char own[STOP_MSG + 64];
  snprintf(own, sizeof own, "this rank failed: %s", why ? why : "(no reason)");
  record_stop(m, 1, own);
  pthread_mutex_lock(&m->stop_mu);
  int send = atomic_load(&m->stop) == 1 && !m->abort_msg[0];
  if (send) snprintf(m->abort_msg, sizeof m->abort_msg, "%s", why && why[0] ? why : "(no reason)");
  pthread_mutex_unlock(&m->stop_mu);
  if (!send) return;
  pthread_mutex_lock(&fgm_mpi_mu);
  for (int p = 0; p < c->size; p++) {
    MPI_Request req;
    if (p != c->rank && MPI_Isend(m->abort_msg, (int)strlen(m->abort_msg) + 1, MPI_CHAR, p, 0,
                                  m->ctl, &req) == MPI_SUCCESS)
      MPI_Request_free(&req);
  }
  pthread_mutex_unlock(&fgm_mpi_mu);
}

/* Host memory, no scaled reduction: gpu and all_reduce_scaled are NULL;
 * peer buffers over one host's shared memory. */
const fg_comm_ops fgm_mpi_ops = {.all_reduce = fgm_mpi_all_reduce,
                                 .all_reduce_apply = fgm_mpi_all_reduce_apply,
                                 .gather_factors = fgm_mpi_gather_factors,
                                 .all_gather_u64 = fgm_mpi_all_gather_u64,
                                 .broadcast = fgm_mpi_broadcast,
                                 .send = fgm_mpi_send,
                                 .recv = fgm_mpi_recv,
                                 .free = mpi_free,
                                 .abort = mpi_abort};

/* Duplicates MPI_COMM_WORLD into *out, polled against the deadline (the dup
 * is a collective: a rank that died after start-up gives a deadline here
 * too, not a hang), with errors returned as codes instead of MPI's default
 * abort. On a deadline MPI may still complete the dup into m, so the caller
 * keeps m allocated (wait_reqs marked the process broken). */
static int dup_world(mpi_comm *m, MPI_Comm src, MPI_Comm *out, const char *what, fg_status *st) {
  char buf[MPI_MAX_ERROR_STRING];
  MPI_Request req;
  int peer = -1;
  pthread_mutex_lock(&fgm_mpi_mu);
  int rc = MPI_Comm_idup(src, out, &req);
  pthread_mutex_unlock(&fgm_mpi_mu);
  if (rc != MPI_SUCCESS) {
    fg_status_set(st, FG_INTERNAL, "MPI_Comm_idup failed: %s", mpi_errstr(rc, buf));
    return -1;
  }
  if (fgm_wait_reqs(m, &req, &peer, 1, fgm_now_s(), what, st) != 0) return -1;
  pthread_mutex_lock(&fgm_mpi_mu);
  rc = MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  pthread_mutex_unlock(&fgm_mpi_mu);
  if (rc != MPI_SUCCESS) {
    fg_status_set(st, FG_INTERNAL, "MPI_Comm_set_errhandler failed: %s", mpi_errstr(rc, buf));
    fgm_set_broken(m);
    return -1;
  }
  return 0;
}

/* A communicator over the ranks of `src` (MPI_COMM_WORLD, or a split of
 * it), on three duplicates of it (collectives, send/recv, aborts). */
/* m->world_of for a group whose ranks are not the world's (a split); left
 * NULL, and errors then name group ranks alone, when MPI cannot say. */
static void set_world_ranks(mpi_comm *m) {
  int n = m->base.size, *in = malloc(((size_t)n + 1) * sizeof *in);
  int *out = malloc(((size_t)n + 1) * sizeof *out);
  MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  int rc = in && out ? MPI_SUCCESS : MPI_ERR_NO_MEM;
  for (int i = 0; in && i < n; i++)
    in[i] = i;
  pthread_mutex_lock(&fgm_mpi_mu);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(m->comm, &g);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(MPI_COMM_WORLD, &wg);
  if (rc == MPI_SUCCESS) rc = MPI_Group_translate_ranks(g, n, in, wg, out);
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg);
  pthread_mutex_unlock(&fgm_mpi_mu);
  int same = 1;
  for (int i = 0; rc == MPI_SUCCESS && i < n; i++)
    same &= out[i] == i;
  if (rc == MPI_SUCCESS && !same) {
    m->world_of = out;
    out = NULL;
  }
  free(in);
  free(out);
}

static fg_comm *mpi_make(MPI_Comm src, double timeout_s, fg_status *st) {
  mpi_comm *m = calloc(1, sizeof *m);
  int size = 0;
  if (m) {
    pthread_mutex_lock(&fgm_mpi_mu);
    MPI_Comm_size(src, &size);
    MPI_Comm_rank(src, &m->base.rank);
    pthread_mutex_unlock(&fgm_mpi_mu);
    m->reqs = calloc((size_t)2 * (size_t)size + 2, sizeof *m->reqs);
    m->req_peer = calloc((size_t)2 * (size_t)size + 2, sizeof *m->req_peer);
    m->gathered = calloc((size_t)size + 1, sizeof *m->gathered);
  }
  if (!m || !m->reqs || !m->req_peer || !m->gathered) {
    if (m) {
      free(m->reqs);
      free(m->req_peer);
      free(m->gathered);
    }
    free(m);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "MPI communicator: out of memory");
    return NULL;
  }
  pthread_mutex_init(&m->mu, NULL);
  pthread_mutex_init(&m->stop_mu, NULL);
  m->base.ops = &fgm_mpi_ops;
  m->base.size = size;
  m->base.timeout_s = timeout_s > 0 ? timeout_s : DEFAULT_TIMEOUT_S;
  m->p2p = m->ctl = MPI_COMM_NULL;
  /* Our own communicators, so flowgraph's tags never meet the user's: one
   * for collectives, one for send/recv. */
  if (dup_world(m, src, &m->comm, "joining the MPI group (MPI_Comm_idup)", st) != 0) {
    if (atomic_load(&m->broken)) {
      keep_broken(m);
      return NULL;
    }
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->stop_mu);
    free(m->reqs);
    free(m->req_peer);
    free(m->gathered);
    free(m);
    return NULL;
  }
  if (dup_world(m, src, &m->p2p, "joining the MPI group (MPI_Comm_idup, point-to-point)", st) !=
          0 ||
      dup_world(m, src, &m->ctl_joining, "joining the MPI group (MPI_Comm_idup, aborts)", st) !=
          0) {
    fgm_set_broken(m);
    keep_broken(m);
    return NULL;
  }
  m->ctl = m->ctl_joining;
  /* MPI guarantees tags up to at least 32767; Open MPI allows more. The
   * attribute lives on MPI_COMM_WORLD and holds for every communicator: a
   * split group's duplicate does not carry it (asked there, split groups
   * fell back to 32767 and refused the larger tags of the variable gather
   * and the profile's exchanges). */
  void *ub = NULL;
  int found = 0;
  pthread_mutex_lock(&fgm_mpi_mu);
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  pthread_mutex_unlock(&fgm_mpi_mu);
  m->tag_ub = found && ub ? *(int *)ub : 32767;
  set_world_ranks(m);
  fg_status_clear(st);
  return &m->base;
}

/* MPI_Init_thread waits for every peer (Open MPI's PMIx exchange) and
 * cannot be abandoned, nor can the blocking MPI_Comm_split: with mpirun
 * --enable-recovery, a peer killed during start-up left the others in
 * MPI_Init_thread for good. A watchdog thread bounds both instead: past
 * its deadline it writes DEADLINE_EXCEEDED to stderr and ends the process
 * (each survivor by its own watchdog; without --enable-recovery mpirun
 * then ends the rest), the only way out of a call that never returns.
 * The deadline is the communicator's timeout, but at least WATCHDOG_MIN_S
 * (FG_MPI_WATCHDOG_MIN_S overrides it, for tests): it runs from this
 * rank's call until the slowest rank has started, which on a loaded
 * machine under a sanitizer takes seconds, longer than the short timeouts
 * tests give collectives. MPI_Finalize is not bounded: rank 0 may still be
 * saving a model while the others wait there, for as long as that takes. */
#define WATCHDOG_MIN_S 30.0
#define WATCHDOG_MAX_S 1e7 /* keeps the deadline representable */
#define WATCHDOG_EXIT  1

typedef struct watchdog {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int done, running;
  double limit_s;
  char msg[320]; /* written on the caller's thread: no getenv or stdio later */
} watchdog;

static void *watchdog_main(void *arg) {
  watchdog *w = arg;
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  double end = (double)dl.tv_sec + (double)dl.tv_nsec * 1e-9 + w->limit_s;
  dl.tv_sec = (time_t)end;
  dl.tv_nsec = (long)((end - (double)dl.tv_sec) * 1e9);
  if (dl.tv_nsec < 0 || dl.tv_nsec >= 1000000000L) dl.tv_nsec = 0;
  pthread_mutex_lock(&w->mu);
  int fire = 0;
  while (!w->done) {
    int rc = pthread_cond_timedwait(&w->cv, &w->mu, &dl);
    if (rc == ETIMEDOUT) {
      fire = !w->done;
      break;
    }
    if (rc != 0 && rc != EINTR) break; /* cannot wait: leave the call unguarded */
  }
  pthread_mutex_unlock(&w->mu);
  if (!fire) return NULL;
  /* write(2), not stdio: another thread may hold a FILE lock for good. */
  size_t len = strlen(w->msg), off = 0;
  while (off < len) {
    ssize_t k = write(2, w->msg + off, len - off);
    if (k <= 0) break;
    off += (size_t)k;
  }
  _exit(WATCHDOG_EXIT);
}

/* Starts the watchdog over `what`; without a thread (out of resources) the
 * call simply runs unguarded. */
static void watchdog_start(watchdog *w, const char *what, double timeout_s) {
  memset(w, 0, sizeof *w);
  double timeout = timeout_s > 0 ? timeout_s : DEFAULT_TIMEOUT_S, least = WATCHDOG_MIN_S;
  const char *env = getenv("FG_MPI_WATCHDOG_MIN_S");
  if (env && atof(env) > 0) least = atof(env);
  w->limit_s = timeout > least ? timeout : least;
  if (!(w->limit_s < WATCHDOG_MAX_S)) w->limit_s = WATCHDOG_MAX_S;
  /* MPI is not up yet: the rank comes from the launcher's environment. */
  const char *rank = getenv("OMPI_COMM_WORLD_RANK");
  if (!rank) rank = getenv("PMIX_RANK");
  if (!rank) rank = getenv("PMI_RANK");
  snprintf(w->msg, sizeof w->msg,
           "flowgraph: DEADLINE_EXCEEDED: %s on rank %.12s did not return within %.1f s "
           "(timeout %.1f s, at least %.0f s for a blocking MPI call): a peer died or is stuck; "
           "MPI cannot abandon the call, so this process exits with status %d\n",
           what, rank ? rank : "?", w->limit_s, timeout, least, WATCHDOG_EXIT);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  w->running = pthread_create(&w->th, NULL, watchdog_main, w) == 0;
}

static void watchdog_stop(watchdog *w) {
  pthread_mutex_lock(&w->mu);
  w->done = 1;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (w->running) pthread_join(w->th, NULL);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
}

fg_comm *fg_comm_mpi_new(double timeout_s, fg_status *st) {
  int inited = 0, rc = MPI_SUCCESS, provided = MPI_THREAD_SERIALIZED;
  char buf[MPI_MAX_ERROR_STRING];
  pthread_mutex_lock(&fgm_mpi_mu);
  MPI_Initialized(&inited);
  if (!inited) {
    watchdog w;
    watchdog_start(&w, "MPI_Init_thread", timeout_s);
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    watchdog_stop(&w);
    if (rc == MPI_SUCCESS) fgm_inited = 1;
    /* Open MPI 4.1 reports a failed part of a nonblocking collective (a
     * truncated MPI_Ibcast) through MPI_COMM_WORLD's handler, not the
     * duplicate's, and the default handler aborts the process: errors
     * come back as codes where flowgraph started MPI. A program that
     * started MPI itself keeps its own handlers. */
    if (rc == MPI_SUCCESS) {
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    }
  }
  pthread_mutex_unlock(&fgm_mpi_mu);
  if (rc != MPI_SUCCESS) {
    fg_status_set(st, FG_INTERNAL, "MPI_Init_thread failed: %s", mpi_errstr(rc, buf));
    return NULL;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    fg_status_set(st, FG_UNSUPPORTED,
                  "MPI gives thread level %d; flowgraph needs MPI_THREAD_SERIALIZED (%d)", provided,
                  MPI_THREAD_SERIALIZED);
    return NULL;
  }
  return mpi_make(MPI_COMM_WORLD, timeout_s, st);
}

fg_comm *fg_comm_mpi_split(fg_comm *parent, int color, int key, fg_status *st) {
  if (!parent || parent->ops != &fgm_mpi_ops || color < 0 || key < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_comm_mpi_split: %s (color %d and key %d must be >= 0)",
                  !parent                       ? "no parent communicator"
                  : parent->ops != &fgm_mpi_ops ? "the parent is not an MPI communicator"
                                                : "bad argument",
                  color, key);
    return NULL;
  }
  mpi_comm *pm = (mpi_comm *)parent;
  /* MPI_Comm_split blocks until every rank calls it. A gather bound by
   * the deadline first: a rank that is dead or elsewhere gives
   * FG_DEADLINE_EXCEEDED here, and those that pass are all at the split. */
  uint64_t *all = calloc((size_t)parent->size, sizeof *all);
  if (!all) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fg_comm_mpi_split: out of memory");
    return NULL;
  }
  int grc = parent->ops->all_gather_u64(parent, ((uint64_t)(unsigned)color << 32) | (unsigned)key,
                                        all, st);
  free(all);
  if (grc != 0) return NULL;
  MPI_Comm sub = MPI_COMM_NULL;
  /* MPI_Comm_split has no nonblocking form: a rank that dies after the
   * gather would leave the others in it for good, so the watchdog bounds
   * it as it does MPI's start. */
  watchdog w;
  pthread_mutex_lock(&fgm_mpi_mu);
  watchdog_start(&w, "MPI_Comm_split", parent->timeout_s);
  int rc = MPI_Comm_split(pm->comm, color, key, &sub);
  watchdog_stop(&w);
  pthread_mutex_unlock(&fgm_mpi_mu);
  if (rc != MPI_SUCCESS) {
    char buf[MPI_MAX_ERROR_STRING];
    fg_status_set(st, FG_INTERNAL, "MPI_Comm_split failed: %s", mpi_errstr(rc, buf));
    fgm_set_broken(pm);
    return NULL;
  }
  fg_comm *c = mpi_make(sub, parent->timeout_s, st);
  pthread_mutex_lock(&fgm_mpi_mu);
  MPI_Comm_free(&sub);
  pthread_mutex_unlock(&fgm_mpi_mu);
  return c;
}

void fg_mpi_shutdown(int code) {
  if (code != 0 || atomic_load(&fgm_any_broken)) {
    fflush(NULL);
    _Exit(code != 0 ? code : 1);
  }
  int inited = 0, finalized = 0;
  pthread_mutex_lock(&fgm_mpi_mu);
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (fgm_inited && inited && !finalized) MPI_Finalize();
  pthread_mutex_unlock(&fgm_mpi_mu);
  fgm_inited = 0;
}

#endif
