/* The MPI communicator; see dist/comm_mpi.h for the contract.
 *
 * Why not MPI_Allreduce: MPI leaves the reduction order to the library (it
 * changes with the algorithm it picks per size), so two runs, or MPI and the
 * in-process communicator, could differ in the last bits. Here the buffer is
 * cut into n chunks; rank c receives everyone's chunk c, adds them in rank
 * order 0..n-1 and sends the sum back to all: the same 2(n-1)/n bytes per
 * rank as a ring, and a fixed order. Every wait polls MPI_Testsome against a
 * deadline, so a silent peer turns into FG_DEADLINE_EXCEEDED, not a hang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm_mpi.h"

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

int fg_comm_check_same_u64(fg_comm *c, uint64_t value, const char *what, fg_status *st) {
  if (!c || !c->ops || c->size < 1) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s check: no communicator", what);
    return -1;
  }
  uint64_t *all = calloc((size_t)c->size, sizeof *all);
  if (!all) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "%s check: out of memory", what);
    return -1;
  }
  if (c->ops->all_gather_u64(c, value, all, st) != 0) {
    free(all);
    return -1;
  }
  int rc = 0;
  for (int r = 1; r < c->size; r++) {
    if (all[r] != all[0]) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "ranks disagree on the %s: rank 0 has %s hash 0x%016llx, rank %d has "
                    "0x%016llx (every rank must load the same file with the same options)",
                    what, what, (unsigned long long)all[0], r, (unsigned long long)all[r]);
      rc = -1;
      break;
    }
  }
  free(all);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

#ifndef FG_HAVE_MPI

int fg_mpi_built(void) { return 0; }

fg_comm *fg_comm_mpi_new(double timeout_s, fg_status *st) {
  (void)timeout_s;
  fg_status_set(st, FG_UNIMPLEMENTED,
                "this flowgraph was built without MPI (install libopenmpi-dev and rebuild)");
  return NULL;
}

void fg_mpi_shutdown(int code) {
  if (code != 0) {
    fflush(NULL);
    _Exit(code);
  }
}

#else

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#define DEFAULT_TIMEOUT_S 60.0
/* Tags cycle below the 32767 every MPI guarantees for MPI_TAG_UB. */
#define TAG_CYCLE         16000

typedef struct mpi_comm {
  fg_comm base;
  MPI_Comm comm;
  pthread_mutex_t mu; /* one collective at a time: MPI_THREAD_SERIALIZED */
  uint64_t seq;       /* collectives so far; names them in errors and tags */
  int broken;         /* a deadline or MPI error: every later call fails */
  unsigned char *scratch;
  size_t scratch_size;
  MPI_Request *reqs;
  int *req_peer;
} mpi_comm;

/* Set once MPI is initialised by us; cleared by a clean finalize. */
static int g_inited;
static int g_any_broken;

int fg_mpi_built(void) { return 1; }

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static const char *mpi_errstr(int rc, char *buf) {
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) snprintf(buf, MPI_MAX_ERROR_STRING, "?");
  return buf;
}

static void set_broken(mpi_comm *m) {
  m->broken = 1;
  g_any_broken = 1;
}

static int check_usable(mpi_comm *m, const char *op, fg_status *st) {
  if (m->broken) {
    fg_status_set(st, FG_INTERNAL,
                  "%s on rank %d: the MPI communicator failed earlier (deadline or peer error); "
                  "the process must exit",
                  op, m->base.rank);
    return -1;
  }
  return 0;
}

/* Waits for n requests until the deadline. Polls (Open MPI progresses only
 * inside MPI calls) with a spin, then yields, then short sleeps, so a rank
 * waiting for a slow peer on a shared core does not starve it. */
static int wait_all(mpi_comm *m, int n, const char *op, fg_status *st) {
  double timeout = m->base.timeout_s > 0 ? m->base.timeout_s : DEFAULT_TIMEOUT_S;
  double t0 = now_s(), deadline = t0 + timeout;
  int left = n, *idx = n > 0 ? malloc((size_t)n * sizeof *idx) : NULL;
  if (n > 0 && !idx) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "%s: out of memory", op);
    set_broken(m);
    return -1;
  }
  for (long polls = 0; left > 0; polls++) {
    int done = 0;
    int rc = MPI_Testsome(n, m->reqs, &done, idx, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) {
      char buf[MPI_MAX_ERROR_STRING];
      fg_status_set(st, FG_DEADLINE_EXCEEDED,
                    "%s (collective #%llu) on rank %d of %d: MPI error talking to a peer (%s); "
                    "a peer died or the network failed",
                    op, (unsigned long long)m->seq, m->base.rank, m->base.size,
                    mpi_errstr(rc, buf));
      set_broken(m);
      free(idx);
      return -1;
    }
    if (done == MPI_UNDEFINED) break; /* all were already complete */
    left -= done;
    if (left == 0) break;
    if (done > 0) polls = 0;
    double t = now_s();
    if (t > deadline) {
      char peers[256] = "";
      size_t used = 0;
      for (int i = 0; i < n && used + 16 < sizeof peers; i++) {
        if (m->reqs[i] == MPI_REQUEST_NULL) continue;
        int p = m->req_peer[i];
        /* A peer appears once even when it owes several messages. */
        int seen = 0;
        for (int j = 0; j < i; j++)
          if (m->reqs[j] != MPI_REQUEST_NULL && m->req_peer[j] == p) seen = 1;
        if (!seen)
          used += (size_t)(p < 0 ? snprintf(peers + used, sizeof peers - used, "(any)")
                                 : snprintf(peers + used, sizeof peers - used, "%s%d",
                                            used ? ", " : "", p));
      }
      fg_status_set(st, FG_DEADLINE_EXCEEDED,
                    "%s (collective #%llu) on rank %d of %d: waited %.1f s (timeout %.1f s) for "
                    "rank(s) %s; a peer died or is stuck",
                    op, (unsigned long long)m->seq, m->base.rank, m->base.size, t - t0, timeout,
                    peers[0] ? peers : "?");
      set_broken(m);
      free(idx);
      return -1;
    }
    if (polls < 200) continue;
    if (polls < 2000) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
  free(idx);
  return 0;
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

/* Chunk c of n over count elements: balanced, deterministic on every rank. */
static void chunk_of(int64_t count, int n, int c, int64_t *start, int64_t *len) {
  int64_t q = count / n, r = count % n;
  *start = q * c + (c < r ? c : r);
  *len = q + (c < r ? 1 : 0);
}

/* dst[i] = src[0][i] + src[1][i] + ... in that order, then / n for a mean.
 * Blocked through a small accumulator so each element's sum is formed in
 * exactly the order the in-process communicator uses. */
#define DEFINE_SUM(NAME, T)                                                                        \
  static void NAME(T *dst, T *const *src, int n, int64_t len, int mean) {                          \
    enum { BLK = 512 };                                                                            \
    T acc[BLK];                                                                                    \
    for (int64_t b = 0; b < len; b += BLK) {                                                       \
      int64_t k = len - b < BLK ? len - b : BLK;                                                   \
      for (int64_t i = 0; i < k; i++)                                                              \
        acc[i] = src[0][b + i];                                                                    \
      for (int p = 1; p < n; p++)                                                                  \
        for (int64_t i = 0; i < k; i++)                                                            \
          acc[i] += src[p][b + i];                                                                 \
      if (mean)                                                                                    \
        for (int64_t i = 0; i < k; i++)                                                            \
          acc[i] /= (T)n;                                                                          \
      memcpy(dst + b, acc, (size_t)k * sizeof(T));                                                 \
    }                                                                                              \
  }
DEFINE_SUM(sum_f32, float)
DEFINE_SUM(sum_f64, double)
DEFINE_SUM(sum_i32, int32_t)
DEFINE_SUM(sum_i64, int64_t)

static void sum_into(fg_dtype dt, void *dst, void *const *src, int n, int64_t len, int mean) {
  switch (dt) {
  case FG_F32: sum_f32(dst, (float *const *)src, n, len, mean); break;
  case FG_F64: sum_f64(dst, (double *const *)src, n, len, mean); break;
  case FG_I32: sum_i32(dst, (int32_t *const *)src, n, len, mean); break;
  case FG_I64: sum_i64(dst, (int64_t *const *)src, n, len, mean); break;
  default: break;
  }
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
  const int n = c->size, me = c->rank;
  const size_t es = fg_dtype_size(dtype);
  int64_t my_start, my_len;
  chunk_of(count, n, me, &my_start, &my_len);
  /* Messages are counted in MPI_BYTE with an int. */
  if ((uint64_t)my_len + 1 > (uint64_t)INT32_MAX / es) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "all_reduce: %lld elements of %s over %d ranks gives chunks over 2 GiB; "
                  "split the buffer (smaller gradient buckets)",
                  (long long)count, fg_dtype_name(dtype), n);
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  if (check_usable(m, "all_reduce", st) != 0) {
    pthread_mutex_unlock(&m->mu);
    return -1;
  }
  int rc = -1;
  unsigned char *b = buf;
  const int tag = (int)(m->seq % TAG_CYCLE) * 2;
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
    m->req_peer[nr] = p;
    if (MPI_Irecv(src[p], (int)(my_len * (int64_t)es), MPI_BYTE, p, tag, m->comm, &m->reqs[nr++]) !=
        MPI_SUCCESS)
      goto mpi_fail;
  }
  for (int p = 0; p < n; p++) {
    int64_t s, l;
    chunk_of(count, n, p, &s, &l);
    if (p == me || l == 0) continue;
    m->req_peer[nr] = p;
    if (MPI_Isend(b + s * (int64_t)es, (int)(l * (int64_t)es), MPI_BYTE, p, tag, m->comm,
                  &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
  }
  if (wait_all(m, nr, "all_reduce", st) != 0) goto out;
  /* My chunk's sum, in rank order; src[me] aliases the output, which is
   * safe because each block is read before it is written. */
  sum_into(dtype, b + my_start * (int64_t)es, src, n, my_len, mean);
  /* Phase 2 (all-gather): send my sum to all, receive everyone else's. */
  nr = 0;
  for (int p = 0; p < n; p++) {
    int64_t s, l;
    chunk_of(count, n, p, &s, &l);
    if (p == me || l == 0) continue;
    m->req_peer[nr] = p;
    if (MPI_Irecv(b + s * (int64_t)es, (int)(l * (int64_t)es), MPI_BYTE, p, tag + 1, m->comm,
                  &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
  }
  for (int p = 0; p < n && my_len > 0; p++) {
    if (p == me) continue;
    m->req_peer[nr] = p;
    if (MPI_Isend(b + my_start * (int64_t)es, (int)(my_len * (int64_t)es), MPI_BYTE, p, tag + 1,
                  m->comm, &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
  }
  if (wait_all(m, nr, "all_reduce", st) != 0) goto out;
  rc = 0;
  goto out;
mpi_fail:
  fg_status_set(st, FG_INTERNAL, "all_reduce on rank %d: posting a message failed", me);
  set_broken(m);
out:
  m->seq++;
  pthread_mutex_unlock(&m->mu);
  free(src);
  if (rc == 0) fg_status_clear(st);
  return rc;
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
    uint64_t v = value;
    m->req_peer[0] = -1;
    if (MPI_Iallgather(&v, 1, MPI_UINT64_T, out, 1, MPI_UINT64_T, m->comm, &m->reqs[0]) !=
        MPI_SUCCESS) {
      fg_status_set(st, FG_INTERNAL, "all_gather_u64 on rank %d: MPI_Iallgather failed", c->rank);
      set_broken(m);
      rc = -1;
    } else {
      rc = wait_all(m, 1, "all_gather_u64", st);
    }
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
    if (MPI_Ibcast((unsigned char *)buf + off, (int)k, MPI_BYTE, root, m->comm, &m->reqs[0]) !=
        MPI_SUCCESS) {
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

/* Where a broken communicator stays until the process exits (see mpi_free). */
static mpi_comm *volatile fg_mpi_kept_broken;

static void mpi_free(fg_comm *c) {
  mpi_comm *m = (mpi_comm *)c;
  if (!m) return;
  /* A broken communicator may still have receives MPI writes into: leave
   * its buffers and handle to the process exit, reachable from here so the
   * leak checker does not report them. */
  if (m->broken) {
    fg_mpi_kept_broken = m;
    return;
  }
  MPI_Comm_free(&m->comm);
  pthread_mutex_destroy(&m->mu);
  free(m->scratch);
  free(m->reqs);
  free(m->req_peer);
  free(m);
}

static const fg_comm_ops mpi_ops = {mpi_all_reduce, mpi_all_gather_u64, mpi_broadcast, mpi_free};

fg_comm *fg_comm_mpi_new(double timeout_s, fg_status *st) {
  int inited = 0, rc;
  char buf[MPI_MAX_ERROR_STRING];
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
      fg_status_set(st, FG_INTERNAL, "MPI_Init_thread failed: %s", mpi_errstr(rc, buf));
      return NULL;
    }
    g_inited = 1;
    if (provided < MPI_THREAD_SERIALIZED) {
      fg_status_set(st, FG_UNSUPPORTED,
                    "MPI gives thread level %d; flowgraph needs MPI_THREAD_SERIALIZED (%d)",
                    provided, MPI_THREAD_SERIALIZED);
      return NULL;
    }
  }
  mpi_comm *m = calloc(1, sizeof *m);
  int size = 0;
  if (m) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    m->reqs = calloc((size_t)2 * (size_t)size + 2, sizeof *m->reqs);
    m->req_peer = calloc((size_t)2 * (size_t)size + 2, sizeof *m->req_peer);
  }
  if (!m || !m->reqs || !m->req_peer) {
    if (m) {
      free(m->reqs);
      free(m->req_peer);
    }
    free(m);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "MPI communicator: out of memory");
    return NULL;
  }
  pthread_mutex_init(&m->mu, NULL);
  m->base.ops = &mpi_ops;
  MPI_Comm_rank(MPI_COMM_WORLD, &m->base.rank);
  m->base.size = size;
  m->base.timeout_s = timeout_s > 0 ? timeout_s : DEFAULT_TIMEOUT_S;
  /* Our own communicator, so flowgraph's tags never meet the user's, and
   * errors come back as codes instead of MPI's default abort. The dup is a
   * collective: nonblocking and polled, so a rank that died after start-up
   * gives a deadline here too, not a hang. */
  m->req_peer[0] = -1;
  rc = MPI_Comm_idup(MPI_COMM_WORLD, &m->comm, &m->reqs[0]);
  if (rc != MPI_SUCCESS) {
    fg_status_set(st, FG_INTERNAL, "MPI_Comm_idup failed: %s", mpi_errstr(rc, buf));
    pthread_mutex_destroy(&m->mu);
    free(m->reqs);
    free(m->req_peer);
    free(m);
    return NULL;
  }
  /* On a deadline MPI may still complete the dup into m, so m stays
   * allocated (wait_all marked the process broken). */
  if (wait_all(m, 1, "joining the MPI group (MPI_Comm_idup)", st) != 0) return NULL;
  rc = MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    fg_status_set(st, FG_INTERNAL, "MPI_Comm_set_errhandler failed: %s", mpi_errstr(rc, buf));
    set_broken(m);
    return NULL;
  }
  fg_status_clear(st);
  return &m->base;
}

void fg_mpi_shutdown(int code) {
  if (code != 0 || g_any_broken) {
    fflush(NULL);
    _Exit(code != 0 ? code : 1);
  }
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (g_inited && inited && !finalized) MPI_Finalize();
  g_inited = 0;
}

#endif
