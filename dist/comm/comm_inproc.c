/* The in-process communicator (kernels/collective.h): ranks are threads sharing
 * memory. A collective is a generation of the group: every rank publishes
 * its buffer pointer and waits at a barrier; then each rank reduces its own
 * 1/n slice of the elements, summing the ranks' values in rank order
 * 0 + 1 + ... + n-1 (so every rank and every run gets the same bits, the
 * same as the MPI communicator's order), writing the result into every
 * rank's buffer; a second barrier ends the collective. Waiting uses a
 * condition variable with a deadline: a rank that does not arrive makes the
 * others fail with FG_DEADLINE_EXCEEDED, never hang.
 *
 * Point-to-point: send copies the data into a mailbox message keyed by
 * (source, destination, tag) and returns at once; recv takes the oldest
 * message of its key, waiting on the group's condition variable with the
 * deadline. Messages are copies, so a sender may reuse its buffer and no
 * rank ever waits for another to post first (no send/send deadlock). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm/comm_inproc.h"
#include "dist/comm/rank_sum.h"
#include "flowgraph/dist.h"

typedef struct group {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int size;
  int refs;            /* handles not yet freed */
  int arrived;         /* ranks at the current barrier */
  unsigned long phase; /* barrier generation */
  int aborted;
  fg_code abort_code; /* DEADLINE_EXCEEDED: a rank timed out; ABORTED: one failed */
  char why[256];
  void **bufs; /* per rank, published before the first barrier */
  uint64_t *u64;
  struct mail *mail, **mail_tail; /* send/recv messages, oldest first */
} group;

/* One sent message waiting for its recv; data follows the struct. */
typedef struct mail {
  struct mail *next;
  int src, dst, tag;
  int64_t bytes;
} mail;

typedef struct inproc {
  fg_comm base;
  group *g;
} inproc;

static void deadline_after(double s, struct timespec *ts) {
  clock_gettime(CLOCK_REALTIME, ts);
  double whole = (double)(long)s;
  ts->tv_sec += (time_t)whole;
  ts->tv_nsec += (long)((s - whole) * 1e9);
  if (ts->tv_nsec >= 1000000000L) ts->tv_sec++, ts->tv_nsec -= 1000000000L;
}

static double timeout_of(const fg_comm *c) { return c->timeout_s > 0 ? c->timeout_s : 60.0; }

/* Waits until every rank reached this barrier. 0, or -1 with st set. */
static int barrier(inproc *h, const char *what, fg_status *st) {
  group *g = h->g;
  struct timespec dl;
  deadline_after(timeout_of(&h->base), &dl);
  pthread_mutex_lock(&g->lock);
  if (g->aborted) goto aborted;
  unsigned long phase = g->phase;
  if (++g->arrived == g->size) {
    g->arrived = 0;
    g->phase++;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
    return 0;
  }
  while (g->phase == phase && !g->aborted) {
    if (pthread_cond_timedwait(&g->cond, &g->lock, &dl) == ETIMEDOUT && g->phase == phase) {
      int arrived = g->arrived;
      /* This rank gives up: the group is broken for everyone. */
      g->aborted = 1;
      g->abort_code = FG_DEADLINE_EXCEEDED;
      snprintf(g->why, sizeof g->why, "rank %d timed out in %s", h->base.rank, what);
      pthread_cond_broadcast(&g->cond);
      pthread_mutex_unlock(&g->lock);
      fg_status_set(st, FG_DEADLINE_EXCEEDED,
                    "in-process %s: rank %d of %d waited %.3g s, only %d rank%s arrived (timeout)",
                    what, h->base.rank, g->size, timeout_of(&h->base), arrived,
                    arrived == 1 ? "" : "s");
      return -1;
    }
  }
  if (g->phase != phase) {
    pthread_mutex_unlock(&g->lock);
    return 0;
  }
aborted:
  pthread_mutex_unlock(&g->lock);
  fg_status_set(st, g->abort_code, "in-process %s on rank %d: group aborted (%s)", what,
                h->base.rank, g->why);
  return -1;
}

static size_t dtype_size(fg_dtype dt) {
  switch (dt) {
  case FG_F32:
  case FG_I32: return 4;
  case FG_F64:
  case FG_I64: return 8;
  default: return 0;
  }
}

static int ip_all_reduce(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean,
                         fg_status *st) {
  inproc *h = (inproc *)c;
  group *g = h->g;
  if (count < 0 || (count > 0 && !buf) || dtype_size(dtype) == 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "in-process all_reduce: bad buffer (%lld elements, %s)",
                  (long long)count, fg_dtype_name(dtype));
    return -1;
  }
  int n = g->size;
  if (n == 1) {
    /* The mean of one value is the value. */
    return 0;
  }
  /* Buffers are published under the lock; the barrier's mutex hand-off
   * orders them before the other ranks read. Counts must agree: every rank
   * runs the same graph. */
  pthread_mutex_lock(&g->lock);
  g->bufs[c->rank] = buf;
  g->u64[c->rank] = (uint64_t)count;
  pthread_mutex_unlock(&g->lock);
  if (barrier(h, "all_reduce", st) != 0) return -1;
  for (int r = 0; r < n; r++)
    if (g->u64[r] != (uint64_t)count) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "in-process all_reduce: rank %d has %lld elements, rank %d has %lld", c->rank,
                    (long long)count, r, (long long)g->u64[r]);
      /* Still take part in the closing barrier so the others are not left
       * waiting; they see the same mismatch. */
      barrier(h, "all_reduce", NULL);
      return -1;
    }
  int64_t per = (count + n - 1) / n;
  int64_t lo = per * c->rank, hi = lo + per;
  if (lo > count) lo = count;
  if (hi > count) hi = count;
  /* My slice of every rank's buffer, summed block by block in rank order
   * and each block stored back to all of them while it is in L1 (an
   * element at a time over n buffers was slower). */
  void *slice[FG_MAX_CPU_DEVICES];
  size_t es = dtype_size(dtype);
  for (int r = 0; r < n; r++)
    slice[r] = (char *)g->bufs[r] + (size_t)lo * es;
  if (hi > lo) fg_rank_sum_to(dtype, slice, n, slice, n, hi - lo, mean);
  return barrier(h, "all_reduce", st);
}

static int ip_all_gather_u64(fg_comm *c, uint64_t value, uint64_t *out, fg_status *st) {
  inproc *h = (inproc *)c;
  group *g = h->g;
  if (!out) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "in-process all_gather: out is NULL");
    return -1;
  }
  pthread_mutex_lock(&g->lock);
  g->u64[c->rank] = value;
  pthread_mutex_unlock(&g->lock);
  if (barrier(h, "all_gather", st) != 0) return -1;
  pthread_mutex_lock(&g->lock);
  memcpy(out, g->u64, (size_t)g->size * sizeof *out);
  pthread_mutex_unlock(&g->lock);
  /* Nobody may overwrite u64 before every rank copied it. */
  return barrier(h, "all_gather", st);
}

static int ip_broadcast(fg_comm *c, void *buf, int64_t bytes, int root, fg_status *st) {
  inproc *h = (inproc *)c;
  group *g = h->g;
  if (root < 0 || root >= g->size || bytes < 0 || (bytes > 0 && !buf)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "in-process broadcast: root %d of %d, %lld bytes", root,
                  g->size, (long long)bytes);
    return -1;
  }
  pthread_mutex_lock(&g->lock);
  g->bufs[c->rank] = buf;
  pthread_mutex_unlock(&g->lock);
  if (barrier(h, "broadcast", st) != 0) return -1;
  if (c->rank != root && bytes > 0) memcpy(buf, g->bufs[root], (size_t)bytes);
  return barrier(h, "broadcast", st);
}

/* Bad send/recv arguments, refused before anything moves. */
static int p2p_args(const fg_comm *c, const char *op, const void *buf, int64_t bytes, int peer,
                    int tag, fg_status *st) {
  if (peer < 0 || peer >= c->size || peer == c->rank) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "in-process %s on rank %d: peer rank %d is not another rank of the group "
                  "(ranks 0 to %d, this one is %d)",
                  op, c->rank, peer, c->size - 1, c->rank);
    return -1;
  }
  if (tag < 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "in-process %s on rank %d (peer %d): tag %d is negative",
                  op, c->rank, peer, tag);
    return -1;
  }
  if (bytes < 0 || (bytes > 0 && !buf)) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  bytes < 0
                      ? "in-process %s on rank %d (peer %d, tag %d): %lld bytes is negative"
                      : "in-process %s on rank %d (peer %d, tag %d): buffer is NULL for %lld bytes",
                  op, c->rank, peer, tag, (long long)bytes);
    return -1;
  }
  return 0;
}

static int ip_send(fg_comm *c, const void *buf, int64_t bytes, int peer, int tag, fg_status *st) {
  inproc *h = (inproc *)c;
  group *g = h->g;
  if (p2p_args(c, "send", buf, bytes, peer, tag, st) != 0) return -1;
  mail *m = malloc(sizeof *m + (size_t)bytes);
  if (!m) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED,
                  "in-process send to rank %d tag %d: cannot buffer %lld bytes", peer, tag,
                  (long long)bytes);
    return -1;
  }
  *m = (mail){NULL, c->rank, peer, tag, bytes};
  if (bytes > 0) memcpy(m + 1, buf, (size_t)bytes);
  pthread_mutex_lock(&g->lock);
  if (g->aborted) {
    pthread_mutex_unlock(&g->lock);
    free(m);
    fg_status_set(st, g->abort_code,
                  "in-process send to rank %d tag %d on rank %d: group aborted (%s)", peer, tag,
                  c->rank, g->why);
    return -1;
  }
  *g->mail_tail = m;
  g->mail_tail = &m->next;
  /* Every waiter rechecks its key; the group is small. */
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->lock);
  fg_status_clear(st);
  return 0;
}

/* Unlinks and returns the oldest message from `src` to `dst` under `tag`,
 * or NULL. Under g->lock. */
static mail *take_mail(group *g, int src, int dst, int tag) {
  for (mail **pp = &g->mail; *pp; pp = &(*pp)->next) {
    mail *m = *pp;
    if (m->src != src || m->dst != dst || m->tag != tag) continue;
    *pp = m->next;
    if (g->mail_tail == &m->next) g->mail_tail = pp;
    return m;
  }
  return NULL;
}

static int ip_recv(fg_comm *c, void *buf, int64_t bytes, int peer, int tag, fg_status *st) {
  inproc *h = (inproc *)c;
  group *g = h->g;
  if (p2p_args(c, "recv", buf, bytes, peer, tag, st) != 0) return -1;
  struct timespec dl, t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  deadline_after(timeout_of(c), &dl);
  pthread_mutex_lock(&g->lock);
  mail *m = NULL;
  while (!g->aborted && !(m = take_mail(g, peer, c->rank, tag))) {
    if (pthread_cond_timedwait(&g->cond, &g->lock, &dl) == ETIMEDOUT) {
      m = take_mail(g, peer, c->rank, tag);
      if (m) break;
      /* Like a collective's timeout: the group is broken for everyone, so
       * the ranks still waiting on this one fail at once. */
      g->aborted = 1;
      g->abort_code = FG_DEADLINE_EXCEEDED;
      snprintf(g->why, sizeof g->why, "rank %d timed out in recv from rank %d tag %d", c->rank,
               peer, tag);
      pthread_cond_broadcast(&g->cond);
      pthread_mutex_unlock(&g->lock);
      struct timespec t1;
      clock_gettime(CLOCK_MONOTONIC, &t1);
      double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
      fg_status_set(st, FG_DEADLINE_EXCEEDED,
                    "in-process recv from rank %d tag %d (%lld bytes) on rank %d of %d: waited "
                    "%.1f s (timeout %.1f s); the peer never sent",
                    peer, tag, (long long)bytes, c->rank, g->size, waited, timeout_of(c));
      return -1;
    }
  }
  if (!m) {
    pthread_mutex_unlock(&g->lock);
    fg_status_set(st, g->abort_code,
                  "in-process recv from rank %d tag %d on rank %d: group aborted (%s)", peer, tag,
                  c->rank, g->why);
    return -1;
  }
  pthread_mutex_unlock(&g->lock);
  int64_t got = m->bytes;
  if (got == bytes && bytes > 0) memcpy(buf, m + 1, (size_t)bytes);
  free(m);
  if (got != bytes) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "in-process rank %d: recv from rank %d tag %d: expected %lld bytes, the message "
                  "has %lld",
                  c->rank, peer, tag, (long long)bytes, (long long)got);
    return -1;
  }
  fg_status_clear(st);
  return 0;
}

/* Frees every queued message. Under g->lock or with the group unshared. */
static void drop_mail(group *g) {
  while (g->mail) {
    mail *m = g->mail;
    g->mail = m->next;
    free(m);
  }
  g->mail_tail = &g->mail;
}

static void ip_free(fg_comm *c) {
  if (!c) return;
  inproc *h = (inproc *)c;
  group *g = h->g;
  pthread_mutex_lock(&g->lock);
  int last = --g->refs == 0;
  pthread_mutex_unlock(&g->lock);
  if (last) {
    drop_mail(g);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    free(g->bufs);
    free(g->u64);
    free(g);
  }
  fg_comm_free_base(&h->base);
  free(h);
}

static void ip_abort(fg_comm *c, const char *why);

/* Host memory, no scaled reduction: gpu and all_reduce_scaled are NULL. */
static const fg_comm_ops inproc_ops = {.all_reduce = ip_all_reduce,
                                       .all_gather_u64 = ip_all_gather_u64,
                                       .broadcast = ip_broadcast,
                                       .send = ip_send,
                                       .recv = ip_recv,
                                       .free = ip_free,
                                       .abort = ip_abort};

int fg_comm_inproc_group(int size, double timeout_s, fg_comm **handles, fg_status *st) {
  if (size < 1 || size > FG_MAX_CPU_DEVICES || !handles) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "in-process communicator: %d ranks; must be 1 to %d",
                  size, FG_MAX_CPU_DEVICES);
    return -1;
  }
  group *g = calloc(1, sizeof *g);
  if (g) {
    g->bufs = calloc((size_t)size, sizeof *g->bufs);
    g->u64 = calloc((size_t)size, sizeof *g->u64);
  }
  if (!g || !g->bufs || !g->u64) goto oom;
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->cond, NULL);
  g->size = size;
  g->mail_tail = &g->mail;
  for (int r = 0; r < size; r++) {
    inproc *h = calloc(1, sizeof *h);
    if (!h) {
      for (int q = 0; q < r; q++)
        ip_free(handles[q]);
      if (r == 0) {
        pthread_mutex_destroy(&g->lock);
        pthread_cond_destroy(&g->cond);
        goto oom;
      }
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "in-process communicator: out of memory");
      return -1;
    }
    h->base = (fg_comm){
        .ops = &inproc_ops, .rank = r, .size = size, .timeout_s = timeout_s > 0 ? timeout_s : 0};
    h->g = g;
    g->refs++;
    handles[r] = &h->base;
  }
  return 0;
oom:
  if (g) {
    free(g->bufs);
    free(g->u64);
  }
  free(g);
  fg_status_set(st, FG_RESOURCE_EXHAUSTED, "in-process communicator: out of memory");
  return -1;
}

void fg_comm_inproc_abort(fg_comm *c, const char *why) {
  if (!c || c->ops != &inproc_ops) return;
  group *g = ((inproc *)c)->g;
  pthread_mutex_lock(&g->lock);
  if (!g->aborted) {
    g->aborted = 1;
    g->abort_code = FG_ABORTED;
    /* A longer reason is cut (the precision says so, for the compiler too). */
    snprintf(g->why, sizeof g->why, "%.*s", (int)sizeof g->why - 1, why ? why : "a peer failed");
  }
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->lock);
}

static void ip_abort(fg_comm *c, const char *why) {
  char buf[300];
  snprintf(buf, sizeof buf, "rank %d failed: %s", c->rank, why ? why : "(no reason given)");
  fg_comm_inproc_abort(c, buf);
}

void fg_comm_inproc_reset(fg_comm *c) {
  if (!c || c->ops != &inproc_ops) return;
  group *g = ((inproc *)c)->g;
  pthread_mutex_lock(&g->lock);
  g->aborted = 0;
  g->arrived = 0;
  g->why[0] = '\0';
  /* Messages of the failed run would be taken by the next run's recvs. */
  drop_mail(g);
  pthread_mutex_unlock(&g->lock);
}
