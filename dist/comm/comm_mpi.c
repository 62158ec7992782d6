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
 * sessions' buffers read in place; 10.987 GB/s of bus bandwidth at 256 MB
 * against MPI_Allreduce's 1.440 to 1.947 on the dev VM), and later ones go
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

#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_S 60.0
/* Tags cycle below the 32767 every MPI guarantees for MPI_TAG_UB; an
 * all_reduce takes three (counts, reduce-scatter, all-gather). */
#define TAG_CYCLE         10000
/* Point-to-point data moves in pieces of this many bytes (an int count). */
#define P2P_CHUNK         ((int64_t)1 << 30)
/* An abort's reason, as sent to the peers (longer ones are cut). */
#define STOP_MSG          512

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
static const char *world_note(const mpi_comm *m, int r, char *buf, size_t n) {
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
static int g_inited;
static atomic_int g_any_broken;
/* Held around every MPI call of the process (MPI_THREAD_SERIALIZED), never
 * while sleeping. */
static pthread_mutex_t g_mpi_mu = PTHREAD_MUTEX_INITIALIZER;

int fg_mpi_built(void) { return 1; }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const char *mpi_errstr(int rc, char *buf) {
  int len = 0;
  pthread_mutex_lock(&g_mpi_mu);
  int erc = MPI_Error_string(rc, buf, &len);
  pthread_mutex_unlock(&g_mpi_mu);
  if (erc != MPI_SUCCESS) snprintf(buf, MPI_MAX_ERROR_STRING, "?");
  return buf;
}

static void set_broken(mpi_comm *m) {
  atomic_store(&m->broken, 1);
  atomic_store(&g_any_broken, 1);
}

/* Records why waits must stop (the first reason wins); kind as m->stop. */
static void record_stop(mpi_comm *m, int kind, const char *why) {
  pthread_mutex_lock(&m->stop_mu);
  if (!atomic_load(&m->stop)) {
    snprintf(m->stop_why, sizeof m->stop_why, "%s", why);
    atomic_store(&m->stop, kind);
  }
  pthread_mutex_unlock(&m->stop_mu);
  set_broken(m);
}

/* Takes a peer's abort message off the control communicator, if one came.
 * g_mpi_mu is held across the probe and the receive, so no other thread
 * takes the message between them. */
static void probe_abort(mpi_comm *m) {
  int flag = 0, len = 0;
  MPI_Status s;
  char msg[STOP_MSG];
  if (m->ctl == MPI_COMM_NULL) return; /* still joining the group */
  pthread_mutex_lock(&g_mpi_mu);
  if (MPI_Iprobe(MPI_ANY_SOURCE, 0, m->ctl, &flag, &s) == MPI_SUCCESS && flag) {
    MPI_Get_count(&s, MPI_CHAR, &len);
    if (MPI_Recv(msg, STOP_MSG, MPI_CHAR, s.MPI_SOURCE, 0, m->ctl, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS)
      len = 0;
  }
  pthread_mutex_unlock(&g_mpi_mu);
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
static int stopped(mpi_comm *m, const char *desc, fg_status *st) {
  if (!atomic_load(&m->stop)) return 0;
  char me[48];
  pthread_mutex_lock(&m->stop_mu);
  fg_status_set(st, FG_ABORTED, "%s on rank %d of %d%s: stopped: %s", desc, m->base.rank,
                m->base.size, world_note(m, m->base.rank, me, sizeof me), m->stop_why);
  pthread_mutex_unlock(&m->stop_mu);
  return 1;
}

static int check_usable(mpi_comm *m, const char *op, fg_status *st) {
  if (stopped(m, op, st)) return -1;
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
 * pausing as dist/comm/poll_pause.h says; g_mpi_mu is held for each poll only.
 * `desc` names the operation in errors ("all_reduce (collective #3)"). */
static int wait_reqs(mpi_comm *m, MPI_Request *reqs, const int *peers, int n, double t0,
                     const char *desc, fg_status *st) {
  double timeout = m->base.timeout_s > 0 ? m->base.timeout_s : DEFAULT_TIMEOUT_S;
  double deadline = t0 + timeout;
  int left = n, idx_small[8], *idx = n <= 8 ? idx_small : malloc((size_t)n * sizeof *idx);
  if (!idx) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "%s: out of memory", desc);
    set_broken(m);
    return -1;
  }
  int rc = 0;
  for (long polls = 0; left > 0; polls++) {
    int done = 0;
    pthread_mutex_lock(&g_mpi_mu);
    int mrc = MPI_Testsome(n, reqs, &done, idx, MPI_STATUSES_IGNORE);
    pthread_mutex_unlock(&g_mpi_mu);
    if (mrc != MPI_SUCCESS) {
      char buf[MPI_MAX_ERROR_STRING], me[48];
      fg_status_set(st, FG_DEADLINE_EXCEEDED,
                    "%s on rank %d of %d%s: MPI error talking to a peer (%s); "
                    "a peer died or the network failed",
                    desc, m->base.rank, m->base.size, world_note(m, m->base.rank, me, sizeof me),
                    mpi_errstr(mrc, buf));
      set_broken(m);
      rc = -1;
      break;
    }
    if (done == MPI_UNDEFINED) break; /* all were already complete */
    left -= done;
    if (left == 0) break;
    if (done > 0) polls = 0;
    /* A peer's abort: probed every 64 spins, and at every slower poll. */
    if ((polls & 63) == 0 || polls >= FG_POLL_SPINS) probe_abort(m);
    if (stopped(m, desc, st)) {
      rc = -1;
      break;
    }
    double t = now_s();
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
      set_broken(m);
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
static int wait_all(mpi_comm *m, int n, const char *op, fg_status *st) {
  char desc[160];
  snprintf(desc, sizeof desc, "%s (collective #%llu)", op, (unsigned long long)m->seq);
  return wait_reqs(m, m->reqs, m->req_peer, n, now_s(), desc, st);
}

/* MPI_Isend / MPI_Irecv of bytes under the process lock. */
static int post(int is_send, void *buf, int bytes, int peer, int tag, MPI_Comm comm,
                MPI_Request *req) {
  pthread_mutex_lock(&g_mpi_mu);
  int rc = is_send ? MPI_Isend(buf, bytes, MPI_BYTE, peer, tag, comm, req)
                   : MPI_Irecv(buf, bytes, MPI_BYTE, peer, tag, comm, req);
  pthread_mutex_unlock(&g_mpi_mu);
  return rc;
}

static int reserve(mpi_comm *m, size_t scratch, fg_status *st) {
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
static int post_failed(mpi_comm *m, const char *desc, fg_status *st) {
  fg_status_set(st, FG_INTERNAL, "%s on rank %d: posting a message failed", desc, m->base.rank);
  set_broken(m);
  return -1;
}

/* One MPI_Iallgather of a u64, waited for under the deadline; the caller
 * holds m->mu. */
static int gather_locked(mpi_comm *m, uint64_t value, uint64_t *out, const char *op,
                         fg_status *st) {
  uint64_t v = value;
  m->req_peer[0] = -1;
  pthread_mutex_lock(&g_mpi_mu);
  int mrc = MPI_Iallgather(&v, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, m->comm, &m->reqs[0]);
  pthread_mutex_unlock(&g_mpi_mu);
  if (mrc != MPI_SUCCESS) {
    fg_status_set(st, FG_INTERNAL, "%s on rank %d: MPI_Iallgather failed", op, m->base.rank);
    set_broken(m);
    return -1;
  }
  return wait_all(m, 1, op, st);
}

/* ---- all_reduce through shared memory (dist/comm/shm_reduce.h) -------------- */

static const fg_comm_ops mpi_ops;

static atomic_uint g_shm_serial; /* this process's segments so far: names */

/* The stop hook of shared-memory waits: a peer's abort, or this rank's. */
static int shm_stop(void *ctx, const char *desc, fg_status *st) {
  mpi_comm *m = ctx;
  probe_abort(m);
  return stopped(m, desc, st);
}

/* Neither FG_MPI_SHM=0 nor FG_MPI_SHM_ARENA=0 here. */
static int arenas_allowed(void) {
  const char *env = getenv("FG_MPI_SHM"), *arena = getenv("FG_MPI_SHM_ARENA");
  return !(env && strcmp(env, "0") == 0) && !(arena && strcmp(arena, "0") == 0);
}

/* Which host each rank is on, from the gathered values' host hashes
 * (high 32 bits): hosts in order of their first rank. Fills host[p],
 * local[p] (rank p's index among its host's ranks) and size[h] (host h's
 * rank count; n entries), and returns the number of hosts, or 0 when out
 * of memory. One pass, each rank against the hosts so far: O(n * hosts). */
static int group_hosts(const uint64_t *all, int n, int *host, int *local, int *size) {
  int *first = malloc((size_t)n * sizeof *first); /* each host's first rank */
  if (!first) return 0;
  int hosts = 0;
  for (int p = 0; p < n; p++) {
    int h = 0;
    while (h < hosts && all[first[h]] >> 32 != all[p] >> 32)
      h++;
    if (h == hosts) {
      first[hosts] = p;
      size[hosts++] = 0;
    }
    host[p] = h;
    local[p] = size[h]++;
  }
  free(first);
  return hosts;
}

/* Decides, on the first all_reduce and the same way on every rank, whether
 * all_reduce goes through shared memory: none may have FG_MPI_SHM=0; the
 * ranks are grouped by host (the host name's hash; FG_MPI_HOST replaces
 * the name, to try several hosts on one machine); each host's first rank
 * creates its segment (named after its pid; slot size from its
 * FG_MPI_SHM_CHUNK) and every rank of the host attaches it. Ranks on
 * several hosts take hier_all_reduce unless every host holds one rank.
 * Three all-gathers under the deadline; each
 * creator unlinks its name after the last. Returns -1 only when a gather
 * fails (the communicator is broken then); any other failure leaves m->shm
 * NULL, with why in m->shm_why, and the MPI message path. Under m->mu. */
static int shm_setup(mpi_comm *m, fg_status *st) {
  const int n = m->base.size, me = m->base.rank;
  m->shm_tried = 1;
  if (n < 2) {
    snprintf(m->shm_why, sizeof m->shm_why, "one rank: nothing to exchange");
    return 0;
  }
  uint64_t *all = m->gathered;
  char host[256] = "";
  const char *fake = getenv("FG_MPI_HOST");
  if (fake && *fake)
    snprintf(host, sizeof host, "%s", fake);
  else
    gethostname(host, sizeof host - 1);
  const char *env = getenv("FG_MPI_SHM");
  int off = env && strcmp(env, "0") == 0;
  /* Whether this rank reads the others' arenas in place
   * (fg_comm_mpi_shares_arenas): all must, or none does. */
  int no_arena = !arenas_allowed();
  uint64_t hh = fg_hash_bytes(FG_HASH_SEED, host, strlen(host));
  uint64_t mine = ((hh ^ (hh >> 32)) << 32) | ((uint64_t)getpid() & 0x3fffffffu) |
                  (no_arena ? (uint64_t)1 << 30 : 0) | (off ? (uint64_t)1 << 31 : 0);
  int rc = -1, hosts = 0, leader = 0, local_n = n;
  fg_shm_reduce *s = NULL;
  char name[64] = "";
  int *host_of = malloc(3 * (size_t)n * sizeof *host_of), *local = host_of ? host_of + n : NULL,
      *size = host_of ? host_of + 2 * (size_t)n : NULL;
  if (!host_of) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "all_reduce setup: out of memory");
    set_broken(m); /* the others gather: this rank cannot follow */
    return -1;
  }
  if (gather_locked(m, mine, all, "all_reduce setup (shared memory)", st) != 0) goto out;
  rc = 0;
  int in_place = 1;
  for (int p = 0; p < n; p++)
    if (all[p] & ((uint64_t)1 << 30)) in_place = 0;
  for (int p = 0; p < n; p++)
    if (all[p] & ((uint64_t)1 << 31)) {
      snprintf(m->shm_why, sizeof m->shm_why, "rank %d has FG_MPI_SHM=0", p);
      goto out;
    }
  hosts = group_hosts(all, n, host_of, local, size);
  if (hosts == 0) {
    /* The others go on to the next gather: this rank cannot follow. */
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "all_reduce setup: out of memory");
    set_broken(m);
    rc = -1;
    goto out;
  }
  int smallest = n, largest = 0;
  for (int h = 0; h < hosts; h++) {
    smallest = size[h] < smallest ? size[h] : smallest;
    largest = size[h] > largest ? size[h] : largest;
  }
  if (largest == 1) {
    snprintf(m->shm_why, sizeof m->shm_why, "one rank on each of %d hosts", hosts);
    goto out;
  }
  local_n = size[host_of[me]];
  while (host_of[leader] != host_of[me] || local[leader] != 0)
    leader++;
  unsigned pid_leader = (unsigned)(all[leader] & 0x3fffffffu);
  /* Each host's first rank offers (serial << 32 | slot bytes), or 0 when
   * it could not create the segment. */
  uint64_t offer = 0;
  fg_status *why = fg_status_new();
  if (leader == me) {
    const char *ce = getenv("FG_MPI_SHM_CHUNK");
    size_t chunk = fg_shm_chunk_bytes(ce ? (size_t)strtoull(ce, NULL, 10) : 0);
    unsigned serial = atomic_fetch_add(&g_shm_serial, 1) + 1;
    snprintf(name, sizeof name, "/fg-mpi-%u-%u", pid_leader, serial);
    if (fg_shm_reduce_create(name, local_n, chunk, why) == 0) {
      offer = ((uint64_t)serial << 32) | (uint64_t)chunk;
    } else {
      snprintf(m->shm_why, sizeof m->shm_why, "%s", fg_status_message(why));
      name[0] = '\0'; /* not ours to unlink: it may be another job's */
    }
  }
  if (gather_locked(m, offer, all, "all_reduce setup (shared memory)", st) != 0) {
    fg_status_free(why);
    rc = -1;
    goto out;
  }
  /* Every rank looks at every host's offer, so all take the same path. */
  for (int p = 0; p < n; p++)
    if (local[p] == 0 && all[p] == 0) {
      if (p != me)
        snprintf(m->shm_why, sizeof m->shm_why, "rank %d could not create the segment", p);
      fg_status_free(why);
      goto out;
    }
  offer = all[leader];
  char seg[64];
  snprintf(seg, sizeof seg, "/fg-mpi-%u-%u", pid_leader, (unsigned)(offer >> 32));
  s = fg_shm_reduce_attach(seg, local[me], local_n, (size_t)(offer & 0xffffffffu), why);
  if (!s) snprintf(m->shm_why, sizeof m->shm_why, "%s", fg_status_message(why));
  fg_status_free(why);
  if (gather_locked(m, s != NULL, all, "all_reduce setup (shared memory)", st) != 0) {
    rc = -1;
    goto out;
  }
  int ok = 1;
  for (int p = 0; p < n && ok; p++)
    if (!all[p]) {
      ok = 0;
      if (s) snprintf(m->shm_why, sizeof m->shm_why, "rank %d could not map the segment", p);
    }
  if (ok && hosts > 1) {
    /* The smallest host's count of ranks own the slices: every host has
     * them, so each owner's group spans every host. */
    m->cross = malloc((size_t)hosts * sizeof *m->cross);
    if (!m->cross) {
      /* Every rank must take the same path, and this one cannot follow. */
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "all_reduce setup: out of memory");
      set_broken(m);
      rc = -1;
      goto out;
    }
    /* Only an owner's group is complete (a non-owner's local index may be
     * past a smaller host's ranks): -1 elsewhere, never used. The segment's
     * errors name ranks as the user knows them: this host's ranks by local
     * index, in `size` (no longer needed). */
    for (int h = 0; h < hosts; h++)
      m->cross[h] = -1;
    for (int p = 0; p < n; p++) {
      if (local[p] == local[me]) m->cross[host_of[p]] = p;
      if (host_of[p] == host_of[me]) size[local[p]] = p;
    }
    fg_shm_reduce_name_ranks(s, size, n);
    m->hosts = hosts;
    m->cross_me = host_of[me];
    m->owners = smallest;
  }
  if (ok) {
    fg_shm_reduce_set_in_place(s, in_place);
    m->shm = s;
    m->shm_local = local[me];
    s = NULL;
    if (hosts > 1 && smallest == largest)
      snprintf(m->shm_why, sizeof m->shm_why,
               "shared memory within each of %d hosts (%d ranks each), MPI messages across", hosts,
               local_n);
    else if (hosts > 1)
      snprintf(m->shm_why, sizeof m->shm_why,
               "shared memory within each of %d hosts (%d to %d ranks), MPI messages across among "
               "the first %d of each",
               hosts, smallest, largest, smallest);
    else
      snprintf(m->shm_why, sizeof m->shm_why, "shared memory");
  }
out:
  if (!m->shm && strncmp(m->shm_why, "MPI messages", 12) != 0) {
    char reason[sizeof m->shm_why];
    snprintf(reason, sizeof reason, "%s", m->shm_why[0] ? m->shm_why : "setup failed");
    snprintf(m->shm_why, sizeof m->shm_why, "MPI messages (%.130s)", reason);
  }
  if (leader == me && name[0]) fg_shm_reduce_unlink(name);
  fg_shm_reduce_free(s);
  free(host_of);
  return rc;
}

/* The path all_reduce takes on c: "shared memory", "shared memory within
 * each of H hosts ...", or why it goes through
 * MPI messages ("not yet decided" before the first all_reduce). */
const char *fg_comm_mpi_reduce_path(const fg_comm *c) {
  const mpi_comm *m = (const mpi_comm *)c;
  if (!c || c->ops != &mpi_ops) return "not an MPI communicator";
  return !m->shm_tried ? "not yet decided" : m->shm_why;
}

int fg_comm_mpi_shares_arenas(const fg_comm *c) {
  const mpi_comm *m = (const mpi_comm *)c;
  if (!c || c->ops != &mpi_ops || c->size < 2 || (m->shm_tried && !m->shm)) return 0;
  return arenas_allowed();
}

int fg_comm_mpi_host_procs(const fg_comm *c) {
  if (!c || c->ops != &mpi_ops) return 1;
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    if (v && *v && !*end && n >= 1 && n <= 1 << 20) return (int)n;
  }
  return 1;
}

uint64_t fg_comm_mpi_in_place_count(const fg_comm *c) {
  const mpi_comm *m = (const mpi_comm *)c;
  return c && c->ops == &mpi_ops && m->shm ? fg_shm_reduce_in_place_count(m->shm) : 0;
}

uint64_t fg_comm_mpi_fused_count(const fg_comm *c) {
  const mpi_comm *m = (const mpi_comm *)c;
  return c && c->ops == &mpi_ops && m->shm ? fg_shm_reduce_fused_count(m->shm) : 0;
}

uint64_t fg_comm_mpi_message_bytes(const fg_comm *c) {
  const mpi_comm *m = (const mpi_comm *)c;
  if (!c || c->ops != &mpi_ops) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&m->mu);
  uint64_t b = m->msg_bytes;
  pthread_mutex_unlock((pthread_mutex_t *)&m->mu);
  return b;
}

/* The message path's agreement on count and dtype (the shared-memory path
 * compares them in its segment): each rank sends both, packed into one u64
 * (counts reach 2^56 long before memory runs out), to every other rank.
 * Messages rather than an all-gather, so a deadline names the ranks that
 * never answered. The refusal names this rank and the first rank that
 * differs, in the shared-memory path's words; the group stays usable. The
 * caller holds m->mu; m->gathered outlives an abandoned wait. */
/* A buffer that fits with its count in one message of 4 KiB, and whose n
 * copies fit in 16 KiB, goes in one round: each rank sends all of it, with
 * its count, to every other, and sums all of them itself in rank order
 * (the same bits as the two rounds below). 4 KiB is Open MPI's
 * shared-memory eager limit: above it a message waits for its receive
 * (rendezvous), and one round of 4 KB took 3.9 us against 2.7 for the two
 * rounds; 1 KB took 1.0 to 1.1 us against 2.5. */
#define MSG_SMALL         ((size_t)4096 - 8)

/* The ranks a message exchange runs over: member i is rank ranks[i] of
 * m->comm (ranks NULL: rank i), this rank is member `me`. All ranks, or,
 * across hosts, the ranks of one local index on every host. */
typedef struct msg_group {
  int n, me;
  const int *ranks;
} msg_group;

static int member(const msg_group *g, int i) { return g->ranks ? g->ranks[i] : i; }

/* Every member sends its count and dtype (a u64) to every other, followed
 * by `data_bytes` of `data` on the one-round path, and receives theirs into
 * m->scratch, a slot of 8 + MSG_SMALL (4096) bytes per member in order (the
 * data after each header). Every receive takes the largest message either
 * path sends, so a rank on the other path (another count) is refused, not
 * truncated. */
static int check_counts(mpi_comm *m, const msg_group *g, int64_t count, fg_dtype dtype,
                        const void *data, size_t data_bytes, int tag, fg_status *st) {
  const int n = g->n, me = g->me;
  const size_t slot = 8 + MSG_SMALL;
  if (reserve(m, (size_t)n * slot, st) != 0) return -1;
  unsigned char *mine = m->scratch + (size_t)me * slot;
  const uint64_t h = (uint64_t)count << 8 | (uint64_t)dtype;
  memcpy(mine, &h, 8);
  if (data_bytes) memcpy(mine + 8, data, data_bytes);
  int nr = 0;
  for (int p = 0; p < n; p++) {
    if (p == me) continue;
    m->req_peer[nr] = member(g, p);
    if (post(0, m->scratch + (size_t)p * slot, (int)slot, member(g, p), tag, m->comm,
             &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
    m->req_peer[nr] = member(g, p);
    if (post(1, mine, (int)(8 + data_bytes), member(g, p), tag, m->comm, &m->reqs[nr++]) !=
        MPI_SUCCESS)
      goto mpi_fail;
    m->msg_bytes += data_bytes;
  }
  if (wait_all(m, nr, "all_reduce", st) != 0) return -1;
  for (int p = 0; p < n; p++) {
    uint64_t hp;
    memcpy(&hp, m->scratch + (size_t)p * slot, 8);
    if (hp == h) continue;
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "all_reduce (collective #%llu) on rank %d of %d: rank %d has %lld elements of "
                  "%s, rank %d has %lld of %s; every rank must reduce the same tensor",
                  (unsigned long long)m->seq, m->base.rank, m->base.size, m->base.rank,
                  (long long)count, fg_dtype_name(dtype), member(g, p), (long long)(hp >> 8),
                  fg_dtype_name((fg_dtype)(hp & 0xff)));
    return -1;
  }
  return 0;
mpi_fail:
  return post_failed(m, "all_reduce", st);
}

/* Messages are counted in MPI_BYTE with an int: refused when the largest
 * of `parts` slices of count would pass 2 GiB. The same answer on every
 * rank of the same count. */
static int over_int_messages(int64_t count, int parts, fg_dtype dtype, fg_status *st) {
  if ((uint64_t)(count / parts + 1) + 1 <= (uint64_t)INT32_MAX / fg_dtype_size(dtype)) return 0;
  fg_status_set(st, FG_INVALID_ARGUMENT,
                "all_reduce: %lld elements of %s over %d slices gives chunks over 2 GiB; split "
                "the buffer (smaller gradient buckets)",
                (long long)count, fg_dtype_name(dtype), parts);
  return -1;
}

/* Whether count elements go in one round over messages among n ranks
 * (MSG_SMALL above). */
static int msg_small(int64_t count, fg_dtype dtype, int n) {
  const size_t bytes = (size_t)count * fg_dtype_size(dtype);
  return count > 0 && bytes <= MSG_SMALL && bytes * (size_t)n <= ((size_t)16 << 10);
}

/* Two members and at most PAIR_MAX bytes: each sends the whole buffer to
 * the other and sums both in member order itself. The same bytes per rank
 * as the two phases below (half, then half) and the same bits, in one round
 * instead of two, but each rank sums the whole buffer rather than half.
 * Between two network namespaces over TCP (tools/netns_hosts.sh) 4 KB took
 * 16.9 to 17.1 us against 25.8 to 26.8 in two phases, 16 KB 18.5 to 18.9
 * against 28.2 to 29.2; from 64 KB on it was no faster, and from 1 MB on
 * slower (64 MB: 47 to 50 ms against 38: the kernel's copies fill both
 * cores, and the sum's second half is no longer free). */
#define PAIR_MAX          ((size_t)32 << 10)
static int pair_all_reduce(mpi_comm *m, const msg_group *g, unsigned char *b, int64_t count,
                           fg_dtype dtype, int mean, int tag, fg_status *st) {
  const size_t bytes = (size_t)count * fg_dtype_size(dtype);
  const int peer = member(g, 1 - g->me);
  if (reserve(m, bytes, st) != 0) return -1;
  m->req_peer[0] = m->req_peer[1] = peer;
  if (post(0, m->scratch, (int)bytes, peer, tag, m->comm, &m->reqs[0]) != MPI_SUCCESS ||
      post(1, b, (int)bytes, peer, tag, m->comm, &m->reqs[1]) != MPI_SUCCESS)
    return post_failed(m, "all_reduce", st);
  m->msg_bytes += bytes;
  if (wait_all(m, 2, "all_reduce", st) != 0) return -1;
  void *all[2];
  all[g->me] = b;
  all[1 - g->me] = m->scratch;
  fg_rank_sum(dtype, b, all, 2, count, mean);
  return 0;
}

/* The all_reduce over messages among g's members, in member order; the
 * caller holds m->mu and has numbered the collective (tags tag .. tag+2).
 * Counts are compared first (check_counts) unless the caller's group
 * already agreed on them. */
static int msg_all_reduce(mpi_comm *m, const msg_group *g, unsigned char *b, int64_t count,
                          fg_dtype dtype, int mean, int agreed, int tag, fg_status *st) {
  const int n = g->n, me = g->me;
  const size_t es = fg_dtype_size(dtype);
  const size_t bytes = (size_t)count * es;
  const int small = msg_small(count, dtype, n);
  /* Every member states its count and dtype first, so a mismatch is
   * refused on all of them before a byte moves: otherwise the rank
   * expecting fewer bytes fails with a truncated message, which breaks its
   * communicator, and the other may accept a wrong sum. Count 0 takes part
   * too, so a partner with elements learns of it at once. */
  if ((small || !agreed) &&
      check_counts(m, g, count, dtype, b, small ? bytes : 0, tag + 2, st) != 0)
    return -1;
  if (small) {
    /* Everyone's data came with the counts: one round. */
    void **all = calloc((size_t)n, sizeof *all);
    if (!all) {
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "all_reduce: out of memory");
      return -1;
    }
    for (int p = 0; p < n; p++)
      all[p] = p == me ? b : m->scratch + (size_t)p * (8 + MSG_SMALL) + 8;
    fg_rank_sum(dtype, b, all, n, count, mean);
    free(all);
    return 0;
  }
  if (count == 0 || over_int_messages(count, n, dtype, st) != 0) return count == 0 ? 0 : -1;
  if (n == 2 && bytes <= PAIR_MAX) return pair_all_reduce(m, g, b, count, dtype, mean, tag, st);
  int64_t my_start, my_len;
  fg_rank_slice(count, n, me, &my_start, &my_len);
  int rc = -1;
  void **src = calloc((size_t)n, sizeof *src);
  if (!src || reserve(m, (size_t)(n - 1) * (size_t)my_len * es + 1, st) != 0) {
    if (!src) fg_status_set(st, FG_RESOURCE_EXHAUSTED, "all_reduce: out of memory");
    goto out;
  }
  /* Phase 1 (reduce-scatter): everyone's chunk `me` arrives here. */
  int nr = 0;
  for (int p = 0, slot = 0; p < n; p++) {
    if (p == me) {
      src[p] = b + my_start * (int64_t)es;
      continue;
    }
    src[p] = m->scratch + (size_t)slot++ * (size_t)my_len * es;
    if (my_len == 0) continue;
    m->req_peer[nr] = member(g, p);
    if (post(0, src[p], (int)(my_len * (int64_t)es), member(g, p), tag, m->comm, &m->reqs[nr++]) !=
        MPI_SUCCESS)
      goto mpi_fail;
  }
  for (int p = 0; p < n; p++) {
    int64_t s, l;
    fg_rank_slice(count, n, p, &s, &l);
    if (p == me || l == 0) continue;
    m->req_peer[nr] = member(g, p);
    if (post(1, b + s * (int64_t)es, (int)(l * (int64_t)es), member(g, p), tag, m->comm,
             &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
    m->msg_bytes += (uint64_t)(l * (int64_t)es);
  }
  if (wait_all(m, nr, "all_reduce", st) != 0) goto out;
  /* My chunk's sum, in member order; src[me] aliases the output, which is
   * safe because each block is read before it is written. */
  fg_rank_sum(dtype, b + my_start * (int64_t)es, src, n, my_len, mean);
  /* Phase 2 (all-gather): send my sum to all, receive everyone else's. */
  nr = 0;
  for (int p = 0; p < n; p++) {
    int64_t s, l;
    fg_rank_slice(count, n, p, &s, &l);
    if (p == me || l == 0) continue;
    m->req_peer[nr] = member(g, p);
    if (post(0, b + s * (int64_t)es, (int)(l * (int64_t)es), member(g, p), tag + 1, m->comm,
             &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
  }
  for (int p = 0; p < n && my_len > 0; p++) {
    if (p == me) continue;
    m->req_peer[nr] = member(g, p);
    if (post(1, b + my_start * (int64_t)es, (int)(my_len * (int64_t)es), member(g, p), tag + 1,
             m->comm, &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
    m->msg_bytes += (uint64_t)(my_len * (int64_t)es);
  }
  if (wait_all(m, nr, "all_reduce", st) != 0) goto out;
  rc = 0;
  goto out;
mpi_fail:
  post_failed(m, "all_reduce", st);
out:
  free(src);
  return rc;
}

/* Ranks on several hosts (m->cross): shared memory within each host and
 * messages between hosts, as NCCL and Horovod's hierarchical all-reduce do.
 * The first L ranks of each host (L = m->owners, the smallest host's
 * count) own a slice each; with L ranks on every host, each rank sends 1/L
 * of what the message path among all ranks sends to other hosts.
 *   1. every rank states its count and dtype to every other, as the message
 *      path does (check_counts), so all go on or all refuse before any
 *      data moves. A buffer small enough comes with its count and is
 *      summed right there, in rank order: one round, as on the message
 *      path (a small buffer's time is its rounds, not its bytes);
 *   2. owner i gets slice i of its host's sum, in rank order
 *      (fg_shm_reduce_scatter);
 *   3. that slice, summed over the hosts in host order (messages among the
 *      owners of local index i), and scaled for a mean;
 *   4. every rank of a host gathers the owners' slices
 *      (fg_shm_all_gather_slices).
 * Every rank ends with the same bits; a larger buffer's order (hosts'
 * sums, each in rank order) differs from one host's, so the last bits can
 * differ from a run on one host. The caller holds m->mu and numbers the
 * collective. */
static int hier_all_reduce(mpi_comm *m, unsigned char *b, int64_t count, fg_dtype dtype, int mean,
                           int tag, fg_status *st) {
  const msg_group all = {m->base.size, m->base.rank, NULL};
  if (msg_small(count, dtype, all.n))
    return msg_all_reduce(m, &all, b, count, dtype, mean, 0, tag, st);
  if (check_counts(m, &all, count, dtype, NULL, 0, tag + 2, st) != 0) {
    /* A refusal leaves the group in step; a failed wait or no memory do not. */
    if (fg_status_code(st) != FG_INVALID_ARGUMENT) set_broken(m);
    return -1;
  }
  char desc[160];
  snprintf(desc, sizeof desc, "all_reduce (collective #%llu)", (unsigned long long)m->seq);
  const fg_shm_wait w = {m->base.timeout_s, shm_stop, m};
  const int owner = m->shm_local < m->owners;
  const msg_group cross = {m->hosts, m->cross_me, m->cross};
  /* The same count everywhere now: a refusal below is every rank's. The
   * largest slice (owner 0's) decides, so every rank refuses alike where
   * msg_all_reduce would refuse one of them. */
  const size_t es = fg_dtype_size(dtype);
  int64_t start = 0, len = 0;
  fg_rank_slice(count, m->owners, 0, &start, &len);
  if (over_int_messages(len, m->hosts, dtype, st) != 0) return -1;
  if (owner) fg_rank_slice(count, m->owners, m->shm_local, &start, &len);
  if (fg_shm_reduce_scatter(m->shm, b, count, dtype, 0, m->owners, desc, &w, st) != 0 ||
      (owner &&
       msg_all_reduce(m, &cross, b + start * (int64_t)es, len, dtype, 0, 1, tag, st) != 0)) {
    set_broken(m);
    return -1;
  }
  if (owner && mean) fg_rank_mean(dtype, b + start * (int64_t)es, len, m->base.size);
  if (fg_shm_all_gather_slices(m->shm, b, count, dtype, m->owners, desc, &w, st) != 0) {
    set_broken(m);
    return -1;
  }
  return 0;
}

static int mpi_all_reduce(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean,
                          fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  if (dtype != FG_F32 && dtype != FG_F64 && dtype != FG_I32 && dtype != FG_I64) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "all_reduce: dtype %s is not supported (f32, f64, "
                  "i32, i64)",
                  fg_dtype_name(dtype));
    return -1;
  }
  if (count < 0 || (count > 0 && !buf)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "all_reduce: count %lld with buffer %p",
                  (long long)count, buf);
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  if (check_usable(m, "all_reduce", st) != 0 || (!m->shm_tried && shm_setup(m, st) != 0)) {
    pthread_mutex_unlock(&m->mu);
    return -1;
  }
  const int tag = (int)(m->seq % TAG_CYCLE) * 3;
  unsigned char none = 0, *b = count > 0 ? buf : &none;
  int rc;
  if (m->shm && m->cross) {
    rc = hier_all_reduce(m, b, count, dtype, mean, tag, st);
  } else if (m->shm) {
    char desc[160];
    snprintf(desc, sizeof desc, "all_reduce (collective #%llu)", (unsigned long long)m->seq);
    fg_shm_wait w = {m->base.timeout_s, shm_stop, m};
    rc = fg_shm_all_reduce(m->shm, buf, count, dtype, mean, desc, &w, st);
    /* A mismatch leaves the group in step; a deadline or a stop does not. */
    if (rc != 0 && fg_status_code(st) != FG_INVALID_ARGUMENT) set_broken(m);
  } else {
    const msg_group all = {c->size, c->rank, NULL};
    rc = msg_all_reduce(m, &all, b, count, dtype, mean, 0, tag, st);
  }
  m->seq++;
  pthread_mutex_unlock(&m->mu);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

/* The fused update's arguments: grad, or (product) the gradient a^T b
 * with `a` in grad. */
typedef struct fused_args {
  int product;
  void *var;
  const void *grad, *b;
  int64_t count, rows, m, n;
  fg_dtype dtype;
  int mean;
  double lr;
  fg_gemm_tn_fn gemm;
  void *gemm_arg;
} fused_args;

/* Fused only over one host's shared memory (fg_shm_all_reduce_sgd, or
 * fg_shm_all_reduce_sgd_product); 1 elsewhere (ranks on several hosts, or
 * without the segment), the same on every rank. */
static int mpi_fused(fg_comm *c, const fused_args *f, fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  pthread_mutex_lock(&m->mu);
  if (check_usable(m, "all_reduce", st) != 0 || (!m->shm_tried && shm_setup(m, st) != 0)) {
    pthread_mutex_unlock(&m->mu);
    return -1;
  }
  int rc = 1;
  if (m->shm && !m->cross) {
    char desc[160];
    snprintf(desc, sizeof desc, "all_reduce (collective #%llu)", (unsigned long long)m->seq);
    fg_shm_wait w = {m->base.timeout_s, shm_stop, m};
    rc = f->product ? fg_shm_all_reduce_sgd_product(m->shm, f->var, f->grad, f->b, f->rows, f->m,
                                                    f->n, f->dtype, f->mean, f->lr, f->gemm,
                                                    f->gemm_arg, desc, &w, st)
                    : fg_shm_all_reduce_sgd(m->shm, f->var, f->grad, f->count, f->dtype, f->mean,
                                            f->lr, desc, &w, st);
    if (rc < 0 && fg_status_code(st) != FG_INVALID_ARGUMENT) set_broken(m);
    if (rc != 1) m->seq++; /* else the caller's all_reduce counts it */
  }
  pthread_mutex_unlock(&m->mu);
  if (rc >= 0) fg_status_clear(st);
  return rc;
}

static int mpi_all_reduce_sgd(fg_comm *c, void *var, const void *grad, int64_t count,
                              fg_dtype dtype, int mean, double lr, fg_status *st) {
  fused_args f = {.var = var, .grad = grad, .count = count, .dtype = dtype, .mean = mean, .lr = lr};
  return mpi_fused(c, &f, st);
}

static int mpi_all_reduce_sgd_product(fg_comm *c, void *var, const void *a, const void *b,
                                      int64_t rows, int64_t m, int64_t n, fg_dtype dtype, int mean,
                                      double lr, fg_gemm_tn_fn gemm, void *gemm_arg,
                                      fg_status *st) {
  fused_args f = {.product = 1,
                  .var = var,
                  .grad = a,
                  .b = b,
                  .rows = rows,
                  .m = m,
                  .n = n,
                  .dtype = dtype,
                  .mean = mean,
                  .lr = lr,
                  .gemm = gemm,
                  .gemm_arg = gemm_arg};
  return mpi_fused(c, &f, st);
}

static int mpi_all_gather_u64(fg_comm *c, uint64_t value, uint64_t *out, fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  if (!out) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "all_gather_u64: NULL output");
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  int rc = check_usable(m, "all_gather_u64", st);
  if (rc == 0) {
    rc = gather_locked(m, value, out, "all_gather_u64", st);
    m->seq++;
  }
  pthread_mutex_unlock(&m->mu);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

static int mpi_broadcast(fg_comm *c, void *buf, int64_t bytes, int root, fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  if (root < 0 || root >= c->size || bytes < 0 || (bytes > 0 && !buf)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "broadcast: root %d of %d ranks, %lld bytes", root,
                  c->size, (long long)bytes);
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  int rc = check_usable(m, "broadcast", st);
  /* Pieces of 1 GiB keep every count inside an int. */
  for (int64_t off = 0; rc == 0 && off < bytes; off += (int64_t)1 << 30) {
    int64_t k = bytes - off < ((int64_t)1 << 30) ? bytes - off : ((int64_t)1 << 30);
    m->req_peer[0] = root;
    pthread_mutex_lock(&g_mpi_mu);
    int mrc = MPI_Ibcast((unsigned char *)buf + off, (int)k, MPI_BYTE, root, m->comm, &m->reqs[0]);
    pthread_mutex_unlock(&g_mpi_mu);
    if (mrc != MPI_SUCCESS) {
      fg_status_set(st, FG_INTERNAL, "broadcast on rank %d: MPI_Ibcast failed", c->rank);
      set_broken(m);
      rc = -1;
    } else {
      rc = wait_all(m, 1, "broadcast", st);
    }
  }
  m->seq++;
  pthread_mutex_unlock(&m->mu);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

/* The piece size: P2P_CHUNK, or FG_MPI_P2P_CHUNK bytes from the
 * environment (for tests: 3 MB in 64 KiB pieces takes the same multi-piece
 * path as a 5 GiB tensor, without the memory). */
static int64_t p2p_chunk(void) {
  const char *e = getenv("FG_MPI_P2P_CHUNK");
  long long v = e ? atoll(e) : 0;
  return v > 0 && v <= P2P_CHUNK ? (int64_t)v : P2P_CHUNK;
}

/* Hands a failed operation's header to the communicator (never freed:
 * a broken communicator lives until the process exits). */
static void keep(mpi_comm *m, p2p_header *h) {
  pthread_mutex_lock(&g_mpi_mu);
  h->next = m->kept;
  m->kept = h;
  pthread_mutex_unlock(&g_mpi_mu);
}

/* Bad arguments of send/recv, refused before any message moves. */
static int p2p_args(mpi_comm *m, const char *op, const void *buf, int64_t bytes, int peer, int tag,
                    fg_status *st) {
  const int n = m->base.size, me = m->base.rank;
  if (peer < 0 || peer >= n || peer == me) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s on rank %d: peer rank %d is not another rank of the group (ranks 0 to %d, "
                  "this one is %d)",
                  op, me, peer, n - 1, me);
    return -1;
  }
  if (tag < 0 || tag > m->tag_ub) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s on rank %d (peer %d): tag %d is outside [0, %d]", op,
                  me, peer, tag, m->tag_ub);
    return -1;
  }
  if (bytes < 0 || (bytes > 0 && !buf)) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  bytes < 0 ? "%s on rank %d (peer %d, tag %d): %lld bytes is negative"
                            : "%s on rank %d (peer %d, tag %d): buffer is NULL for %lld bytes",
                  op, me, peer, tag, (long long)bytes);
    return -1;
  }
  return check_usable(m, op, st);
}

/* Posts `bytes` at buf (send or recv) as pieces of `chunk` bytes and waits
 * for them, and for the header request *hdr when not NULL. The pieces go
 * out a window at a time so the request array stays small. */
static int p2p_data(mpi_comm *m, int is_send, unsigned char *buf, int64_t bytes, int64_t chunk,
                    int peer, int tag, MPI_Request *hdr, double t0, const char *desc,
                    fg_status *st) {
  enum { WINDOW = 8 };
  MPI_Request reqs[WINDOW + 1];
  int peers[WINDOW + 1];
  int64_t off = 0;
  do {
    int nr = 0;
    if (hdr) {
      reqs[nr] = *hdr;
      peers[nr++] = peer;
      hdr = NULL;
    }
    for (int k = 0; k < WINDOW && off < bytes; k++) {
      int64_t len = bytes - off < chunk ? bytes - off : chunk;
      peers[nr] = peer;
      if (post(is_send, buf + off, (int)len, peer, tag, m->p2p, &reqs[nr++]) != MPI_SUCCESS)
        return post_failed(m, desc, st);
      off += len;
    }
    if (wait_reqs(m, reqs, peers, nr, t0, desc, st) != 0) return -1;
  } while (off < bytes);
  return 0;
}

/* The opening of a send or recv: checks the arguments, names the
 * operation in desc, and posts the 16-byte header (the size and piece size
 * a send announces; a recv's lands in the returned block). NULL with st
 * set; on a posting failure the communicator is broken and the header kept
 * (MPI may still write it). */
static p2p_header *p2p_start(mpi_comm *m, int is_send, const void *buf, int64_t bytes, int peer,
                             int tag, char *desc, size_t desc_size, MPI_Request *hdr,
                             fg_status *st) {
  if (p2p_args(m, is_send ? "send" : "recv", buf, bytes, peer, tag, st) != 0) return NULL;
  snprintf(desc, desc_size, "%s rank %d tag %d (%lld bytes)", is_send ? "send to" : "recv from",
           peer, tag, (long long)bytes);
  p2p_header *h = calloc(1, sizeof *h);
  if (!h) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "%s: out of memory", desc);
    return NULL;
  }
  h->v[0] = is_send ? bytes : -1;
  h->v[1] = is_send ? p2p_chunk() : -1;
  if (post(is_send, h->v, (int)sizeof h->v, peer, tag, m->p2p, hdr) != MPI_SUCCESS) {
    post_failed(m, desc, st);
    keep(m, h);
    return NULL;
  }
  return h;
}

/* Blocks until buf may be reused: small messages leave at once (MPI's
 * eager protocol), large ones when the peer has posted its recv. */
static int mpi_send(fg_comm *c, const void *buf, int64_t bytes, int peer, int tag, fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  double t0 = now_s();
  char desc[96];
  MPI_Request hdr;
  p2p_header *h = p2p_start(m, 1, buf, bytes, peer, tag, desc, sizeof desc, &hdr, st);
  if (!h) return -1;
  /* The data pieces only read buf; the cast drops const for MPI's API. */
  if (p2p_data(m, 1, (unsigned char *)(uintptr_t)buf, bytes, h->v[1], peer, tag, &hdr, t0, desc,
               st) != 0) {
    keep(m, h);
    return -1;
  }
  free(h);
  fg_status_clear(st);
  return 0;
}

static int mpi_recv(fg_comm *c, void *buf, int64_t bytes, int peer, int tag, fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  double t0 = now_s();
  char desc[96];
  MPI_Request hdr;
  p2p_header *h = p2p_start(m, 0, buf, bytes, peer, tag, desc, sizeof desc, &hdr, st);
  if (!h) return -1;
  if (wait_reqs(m, &hdr, &peer, 1, t0, desc, st) != 0) {
    keep(m, h);
    return -1;
  }
  int64_t header = h->v[0], chunk = h->v[1];
  free(h);
  if (header < 0 || chunk <= 0 || chunk > P2P_CHUNK) {
    fg_status_set(st, FG_INTERNAL,
                  "%s on rank %d: corrupt message header (%lld bytes, pieces %lld)", desc, c->rank,
                  (long long)header, (long long)chunk);
    set_broken(m);
    return -1;
  }
  if (header == bytes) {
    if (p2p_data(m, 0, buf, bytes, chunk, peer, tag, NULL, t0, desc, st) != 0) return -1;
    fg_status_clear(st);
    return 0;
  }
  /* Wrong size: drain the data so this (peer, tag) stays in step for the
   * next message, then refuse naming both sizes. */
  int64_t room = header < chunk ? header : chunk;
  unsigned char *sink = malloc((size_t)room + 1);
  if (!sink) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                  "rank %d: recv from rank %d tag %d: expected %lld bytes, the message has %lld "
                  "(and no memory to drain it)",
                  c->rank, peer, tag, (long long)bytes, (long long)header);
    set_broken(m);
    return -1;
  }
  int rc = 0;
  for (int64_t off = 0; rc == 0 && off < header; off += room) {
    int64_t len = header - off < room ? header - off : room;
    rc = p2p_data(m, 0, sink, len, len, peer, tag, NULL, t0, desc, st);
  }
  free(sink);
  if (rc != 0) return -1;
  fg_status_set(st, FG_INVALID_ARGUMENT,
                "rank %d: recv from rank %d tag %d: expected %lld bytes, the message has %lld",
                c->rank, peer, tag, (long long)bytes, (long long)header);
  return -1;
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
  pthread_mutex_lock(&g_mpi_mu);
  if (m->ctl != MPI_COMM_NULL) MPI_Comm_free(&m->ctl);
  if (m->p2p != MPI_COMM_NULL) MPI_Comm_free(&m->p2p);
  MPI_Comm_free(&m->comm);
  pthread_mutex_unlock(&g_mpi_mu);
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
  pthread_mutex_lock(&g_mpi_mu);
  for (int p = 0; p < c->size; p++) {
    MPI_Request req;
    if (p != c->rank && MPI_Isend(m->abort_msg, (int)strlen(m->abort_msg) + 1, MPI_CHAR, p, 0,
                                  m->ctl, &req) == MPI_SUCCESS)
      MPI_Request_free(&req);
  }
  pthread_mutex_unlock(&g_mpi_mu);
}

/* Host memory, no scaled reduction: gpu and all_reduce_scaled are NULL;
 * the fused update over one host's shared memory. */
static const fg_comm_ops mpi_ops = {.all_reduce = mpi_all_reduce,
                                    .all_reduce_sgd = mpi_all_reduce_sgd,
                                    .all_reduce_sgd_product = mpi_all_reduce_sgd_product,
                                    .all_gather_u64 = mpi_all_gather_u64,
                                    .broadcast = mpi_broadcast,
                                    .send = mpi_send,
                                    .recv = mpi_recv,
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
  pthread_mutex_lock(&g_mpi_mu);
  int rc = MPI_Comm_idup(src, out, &req);
  pthread_mutex_unlock(&g_mpi_mu);
  if (rc != MPI_SUCCESS) {
    fg_status_set(st, FG_INTERNAL, "MPI_Comm_idup failed: %s", mpi_errstr(rc, buf));
    return -1;
  }
  if (wait_reqs(m, &req, &peer, 1, now_s(), what, st) != 0) return -1;
  pthread_mutex_lock(&g_mpi_mu);
  rc = MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
  pthread_mutex_unlock(&g_mpi_mu);
  if (rc != MPI_SUCCESS) {
    fg_status_set(st, FG_INTERNAL, "MPI_Comm_set_errhandler failed: %s", mpi_errstr(rc, buf));
    set_broken(m);
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
  pthread_mutex_lock(&g_mpi_mu);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(m->comm, &g);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(MPI_COMM_WORLD, &wg);
  if (rc == MPI_SUCCESS) rc = MPI_Group_translate_ranks(g, n, in, wg, out);
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (wg != MPI_GROUP_NULL) MPI_Group_free(&wg);
  pthread_mutex_unlock(&g_mpi_mu);
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
    pthread_mutex_lock(&g_mpi_mu);
    MPI_Comm_size(src, &size);
    MPI_Comm_rank(src, &m->base.rank);
    pthread_mutex_unlock(&g_mpi_mu);
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
  m->base.ops = &mpi_ops;
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
    set_broken(m);
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
  pthread_mutex_lock(&g_mpi_mu);
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  pthread_mutex_unlock(&g_mpi_mu);
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
#define WATCHDOG_MIN_S    30.0
#define WATCHDOG_MAX_S    1e7 /* keeps the deadline representable */
#define WATCHDOG_EXIT     1

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
  pthread_mutex_lock(&g_mpi_mu);
  MPI_Initialized(&inited);
  if (!inited) {
    watchdog w;
    watchdog_start(&w, "MPI_Init_thread", timeout_s);
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    watchdog_stop(&w);
    if (rc == MPI_SUCCESS) g_inited = 1;
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
  pthread_mutex_unlock(&g_mpi_mu);
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
  if (!parent || parent->ops != &mpi_ops || color < 0 || key < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "fg_comm_mpi_split: %s (color %d and key %d must be >= 0)",
                  !parent                   ? "no parent communicator"
                  : parent->ops != &mpi_ops ? "the parent is not an MPI communicator"
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
  pthread_mutex_lock(&g_mpi_mu);
  watchdog_start(&w, "MPI_Comm_split", parent->timeout_s);
  int rc = MPI_Comm_split(pm->comm, color, key, &sub);
  watchdog_stop(&w);
  pthread_mutex_unlock(&g_mpi_mu);
  if (rc != MPI_SUCCESS) {
    char buf[MPI_MAX_ERROR_STRING];
    fg_status_set(st, FG_INTERNAL, "MPI_Comm_split failed: %s", mpi_errstr(rc, buf));
    set_broken(pm);
    return NULL;
  }
  fg_comm *c = mpi_make(sub, parent->timeout_s, st);
  pthread_mutex_lock(&g_mpi_mu);
  MPI_Comm_free(&sub);
  pthread_mutex_unlock(&g_mpi_mu);
  return c;
}

void fg_mpi_shutdown(int code) {
  if (code != 0 || atomic_load(&g_any_broken)) {
    fflush(NULL);
    _Exit(code != 0 ? code : 1);
  }
  int inited = 0, finalized = 0;
  pthread_mutex_lock(&g_mpi_mu);
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (g_inited && inited && !finalized) MPI_Finalize();
  pthread_mutex_unlock(&g_mpi_mu);
  g_inited = 0;
}

#endif
