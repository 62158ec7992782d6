/* The MPI communicator's collectives: all_reduce over messages (one
 * round for small buffers, reduce-scatter and all-gather otherwise, and
 * across hosts the hierarchical form through each host's shared segment),
 * the fused updates, the u64 all-gather, broadcast, and point-to-point
 * send and recv. State, waits and creation are in dist/comm/comm_mpi.c. */
#ifdef FG_HAVE_MPI
#include "dist/comm/comm_mpi_internal.h"

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
 * (rendezvous), and one round of 4 KB was slower than the two rounds,
 * while one round of 1 KB took less than half their time. */
#define MSG_SMALL ((size_t)4096 - 8)

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
  if (fgm_reserve(m, (size_t)n * slot, st) != 0) return -1;
  unsigned char *mine = m->scratch + (size_t)me * slot;
  const uint64_t h = (uint64_t)count << 8 | (uint64_t)dtype;
  memcpy(mine, &h, 8);
  if (data_bytes) memcpy(mine + 8, data, data_bytes);
  int nr = 0;
  for (int p = 0; p < n; p++) {
    if (p == me) continue;
    m->req_peer[nr] = member(g, p);
    if (fgm_post(0, m->scratch + (size_t)p * slot, (int)slot, member(g, p), tag, m->comm,
                 &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
    m->req_peer[nr] = member(g, p);
    if (fgm_post(1, mine, (int)(8 + data_bytes), member(g, p), tag, m->comm, &m->reqs[nr++]) !=
        MPI_SUCCESS)
      goto mpi_fail;
    m->msg_bytes += data_bytes;
  }
  if (fgm_wait_all(m, nr, "all_reduce", st) != 0) return -1;
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
  return fgm_post_failed(m, "all_reduce", st);
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
 * Between two network namespaces over TCP (tools/netns_hosts.sh) it took
 * about two thirds of the two phases' time up to 16 KB; from 64 KB on it
 * was no faster, and from 1 MB on slower (the kernel's copies fill the
 * cores, and the sum's second half is no longer free). */
#define PAIR_MAX ((size_t)32 << 10)
static int pair_all_reduce(mpi_comm *m, const msg_group *g, unsigned char *b, int64_t count,
                           fg_dtype dtype, int mean, int tag, fg_status *st) {
  const size_t bytes = (size_t)count * fg_dtype_size(dtype);
  const int peer = member(g, 1 - g->me);
  if (fgm_reserve(m, bytes, st) != 0) return -1;
  m->req_peer[0] = m->req_peer[1] = peer;
  if (fgm_post(0, m->scratch, (int)bytes, peer, tag, m->comm, &m->reqs[0]) != MPI_SUCCESS ||
      fgm_post(1, b, (int)bytes, peer, tag, m->comm, &m->reqs[1]) != MPI_SUCCESS)
    return fgm_post_failed(m, "all_reduce", st);
  m->msg_bytes += bytes;
  if (fgm_wait_all(m, 2, "all_reduce", st) != 0) return -1;
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
  if (!src || fgm_reserve(m, (size_t)(n - 1) * (size_t)my_len * es + 1, st) != 0) {
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
    if (fgm_post(0, src[p], (int)(my_len * (int64_t)es), member(g, p), tag, m->comm,
                 &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
  }
  for (int p = 0; p < n; p++) {
    int64_t s, l;
    fg_rank_slice(count, n, p, &s, &l);
    if (p == me || l == 0) continue;
    m->req_peer[nr] = member(g, p);
    if (fgm_post(1, b + s * (int64_t)es, (int)(l * (int64_t)es), member(g, p), tag, m->comm,
                 &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
    m->msg_bytes += (uint64_t)(l * (int64_t)es);
  }
  if (fgm_wait_all(m, nr, "all_reduce", st) != 0) goto out;
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
    if (fgm_post(0, b + s * (int64_t)es, (int)(l * (int64_t)es), member(g, p), tag + 1, m->comm,
                 &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
  }
  for (int p = 0; p < n && my_len > 0; p++) {
    if (p == me) continue;
    m->req_peer[nr] = member(g, p);
    if (fgm_post(1, b + my_start * (int64_t)es, (int)(my_len * (int64_t)es), member(g, p), tag + 1,
                 m->comm, &m->reqs[nr++]) != MPI_SUCCESS)
      goto mpi_fail;
    m->msg_bytes += (uint64_t)(my_len * (int64_t)es);
  }
  if (fgm_wait_all(m, nr, "all_reduce", st) != 0) goto out;
  rc = 0;
  goto out;
mpi_fail:
  fgm_post_failed(m, "all_reduce", st);
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
int fgm_hier_all_reduce(mpi_comm *m, unsigned char *b, int64_t count, fg_dtype dtype, int mean,
                        int tag, fg_status *st) {
  const msg_group all = {m->base.size, m->base.rank, NULL};
  if (msg_small(count, dtype, all.n))
    return msg_all_reduce(m, &all, b, count, dtype, mean, 0, tag, st);
  if (check_counts(m, &all, count, dtype, NULL, 0, tag + 2, st) != 0) {
    /* A refusal leaves the group in step; a failed wait or no memory do not. */
    if (fg_status_code(st) != FG_INVALID_ARGUMENT) fgm_set_broken(m);
    return -1;
  }
  char desc[160];
  snprintf(desc, sizeof desc, "all_reduce (collective #%llu)", (unsigned long long)m->seq);
  const fg_shm_wait w = {m->base.timeout_s, fgm_shm_stop, m};
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
    fgm_set_broken(m);
    return -1;
  }
  if (owner && mean) fg_rank_mean(dtype, b + start * (int64_t)es, len, m->base.size);
  if (fg_shm_all_gather_slices(m->shm, b, count, dtype, m->owners, desc, &w, st) != 0) {
    fgm_set_broken(m);
    return -1;
  }
  return 0;
}

int fgm_mpi_all_reduce(fg_comm *c, void *buf, int64_t count, fg_dtype dtype, int mean,
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
  if (fgm_check_usable(m, "all_reduce", st) != 0 || (!m->shm_tried && fgm_shm_setup(m, st) != 0)) {
    pthread_mutex_unlock(&m->mu);
    return -1;
  }
  const int tag = (int)(m->seq % TAG_CYCLE) * 3;
  unsigned char none = 0, *b = count > 0 ? buf : &none;
  int rc;
  if (m->shm && m->cross) {
    rc = fgm_hier_all_reduce(m, b, count, dtype, mean, tag, st);
  } else if (m->shm) {
    char desc[160];
    snprintf(desc, sizeof desc, "all_reduce (collective #%llu)", (unsigned long long)m->seq);
    fg_shm_wait w = {m->base.timeout_s, fgm_shm_stop, m};
    rc = fg_shm_all_reduce(m->shm, buf, count, dtype, mean, desc, &w, st);
    /* A mismatch leaves the group in step; a deadline or a stop does not. */
    if (rc != 0 && fg_status_code(st) != FG_INVALID_ARGUMENT) fgm_set_broken(m);
  } else {
    const msg_group all = {c->size, c->rank, NULL};
    rc = msg_all_reduce(m, &all, b, count, dtype, mean, 0, tag, st);
  }
  m->seq++;
  pthread_mutex_unlock(&m->mu);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

/* The peer-buffer collectives' arguments: all_reduce_apply's, or
 * (factors) gather_factors'. */
typedef struct peer_args {
  int factors;
  void *dst;
  const void *src, *b;
  int64_t count, rows, m, n;
  fg_dtype dtype;
  int mean;
  double agree;
  const char *what;
  fg_comm_block_fn block;
  fg_comm_factors_fn product;
  void *arg;
} peer_args;

/* Only over one host's shared memory (fg_shm_all_reduce_apply,
 * fg_shm_gather_factors); 1 elsewhere (ranks on several hosts, or without
 * the segment), the same on every rank. */
static int mpi_peers(fg_comm *c, const peer_args *f, fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  pthread_mutex_lock(&m->mu);
  if (fgm_check_usable(m, "all_reduce", st) != 0 || (!m->shm_tried && fgm_shm_setup(m, st) != 0)) {
    pthread_mutex_unlock(&m->mu);
    return -1;
  }
  int rc = 1;
  if (m->shm && !m->cross) {
    char desc[160];
    snprintf(desc, sizeof desc, "all_reduce (collective #%llu)", (unsigned long long)m->seq);
    fg_shm_wait w = {m->base.timeout_s, fgm_shm_stop, m};
    rc = f->factors
             ? fg_shm_gather_factors(m->shm, f->dst, f->src, f->b, f->rows, f->m, f->n, f->dtype,
                                     f->agree, f->what, f->product, f->arg, desc, &w, st)
             : fg_shm_all_reduce_apply(m->shm, f->dst, f->src, f->count, f->dtype, f->mean,
                                       f->agree, f->what, f->block, f->arg, desc, &w, st);
    if (rc < 0 && fg_status_code(st) != FG_INVALID_ARGUMENT) fgm_set_broken(m);
    if (rc != 1) m->seq++; /* else the caller's all_reduce counts it */
  }
  pthread_mutex_unlock(&m->mu);
  if (rc >= 0) fg_status_clear(st);
  return rc;
}

int fgm_mpi_all_reduce_apply(fg_comm *c, void *dst, const void *src, int64_t count, fg_dtype dtype,
                             int mean, double agree, const char *what, fg_comm_block_fn fn,
                             void *arg, fg_status *st) {
  peer_args f = {.dst = dst,
                 .src = src,
                 .count = count,
                 .dtype = dtype,
                 .mean = mean,
                 .agree = agree,
                 .what = what,
                 .block = fn,
                 .arg = arg};
  return mpi_peers(c, &f, st);
}

int fgm_mpi_gather_factors(fg_comm *c, void *dst, const void *a, const void *b, int64_t rows,
                           int64_t m, int64_t n, fg_dtype dtype, double agree, const char *what,
                           fg_comm_factors_fn fn, void *arg, fg_status *st) {
  peer_args f = {.factors = 1,
                 .dst = dst,
                 .src = a,
                 .b = b,
                 .rows = rows,
                 .m = m,
                 .n = n,
                 .dtype = dtype,
                 .agree = agree,
                 .what = what,
                 .product = fn,
                 .arg = arg};
  return mpi_peers(c, &f, st);
}

int fgm_mpi_all_gather_u64(fg_comm *c, uint64_t value, uint64_t *out, fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  if (!out) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "all_gather_u64: NULL output");
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  int rc = fgm_check_usable(m, "all_gather_u64", st);
  if (rc == 0) {
    rc = fgm_gather_locked(m, value, out, "all_gather_u64", st);
    m->seq++;
  }
  pthread_mutex_unlock(&m->mu);
  if (rc == 0) fg_status_clear(st);
  return rc;
}

int fgm_mpi_broadcast(fg_comm *c, void *buf, int64_t bytes, int root, fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  if (root < 0 || root >= c->size || bytes < 0 || (bytes > 0 && !buf)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "broadcast: root %d of %d ranks, %lld bytes", root,
                  c->size, (long long)bytes);
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  int rc = fgm_check_usable(m, "broadcast", st);
  /* Pieces of 1 GiB keep every count inside an int. */
  for (int64_t off = 0; rc == 0 && off < bytes; off += (int64_t)1 << 30) {
    int64_t k = bytes - off < ((int64_t)1 << 30) ? bytes - off : ((int64_t)1 << 30);
    m->req_peer[0] = root;
    pthread_mutex_lock(&fgm_mpi_mu);
    int mrc = MPI_Ibcast((unsigned char *)buf + off, (int)k, MPI_BYTE, root, m->comm, &m->reqs[0]);
    pthread_mutex_unlock(&fgm_mpi_mu);
    if (mrc != MPI_SUCCESS) {
      fg_status_set(st, FG_INTERNAL, "broadcast on rank %d: MPI_Ibcast failed", c->rank);
      fgm_set_broken(m);
      rc = -1;
    } else {
      rc = fgm_wait_all(m, 1, "broadcast", st);
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
  pthread_mutex_lock(&fgm_mpi_mu);
  h->next = m->kept;
  m->kept = h;
  pthread_mutex_unlock(&fgm_mpi_mu);
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
  return fgm_check_usable(m, op, st);
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
      if (fgm_post(is_send, buf + off, (int)len, peer, tag, m->p2p, &reqs[nr++]) != MPI_SUCCESS)
        return fgm_post_failed(m, desc, st);
      off += len;
    }
    if (fgm_wait_reqs(m, reqs, peers, nr, t0, desc, st) != 0) return -1;
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
  if (fgm_post(is_send, h->v, (int)sizeof h->v, peer, tag, m->p2p, hdr) != MPI_SUCCESS) {
    fgm_post_failed(m, desc, st);
    keep(m, h);
    return NULL;
  }
  return h;
}

/* Blocks until buf may be reused: small messages leave at once (MPI's
 * eager protocol), large ones when the peer has posted its recv. */
int fgm_mpi_send(fg_comm *c, const void *buf, int64_t bytes, int peer, int tag, fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  double t0 = fgm_now_s();
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

int fgm_mpi_recv(fg_comm *c, void *buf, int64_t bytes, int peer, int tag, fg_status *st) {
  mpi_comm *m = (mpi_comm *)c;
  double t0 = fgm_now_s();
  char desc[96];
  MPI_Request hdr;
  p2p_header *h = p2p_start(m, 0, buf, bytes, peer, tag, desc, sizeof desc, &hdr, st);
  if (!h) return -1;
  if (fgm_wait_reqs(m, &hdr, &peer, 1, t0, desc, st) != 0) {
    keep(m, h);
    return -1;
  }
  int64_t header = h->v[0], chunk = h->v[1];
  free(h);
  if (header < 0 || chunk <= 0 || chunk > P2P_CHUNK) {
    fg_status_set(st, FG_INTERNAL,
                  "%s on rank %d: corrupt message header (%lld bytes, pieces %lld)", desc, c->rank,
                  (long long)header, (long long)chunk);
    fgm_set_broken(m);
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
    fgm_set_broken(m);
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

#endif
