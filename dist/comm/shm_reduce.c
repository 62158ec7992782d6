/* dist/comm/shm_reduce.h: all-reduce through one POSIX shared-memory segment. */
#define _GNU_SOURCE /* posix_fallocate, shm_open on older glibc */
#include "dist/comm/shm_reduce.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm/poll_pause.h"
#include "dist/comm/rank_sum.h"
#include "dist/comm/shm_arena.h"

#define LINE      64
#define MIN_CHUNK ((size_t)4096)
#define MAX_CHUNK ((size_t)1 << 30)
/* A buffer whose n copies together take at most this many bytes goes
 * through in one round with one barrier (see fg_shm_all_reduce). */
#define SMALL_BYTES ((size_t)16 << 10)

/* A rank's header, alone on its cache line so one rank's barrier store does
 * not bounce the line the others poll. Lock-free 64-bit atomics are
 * address-free, so they synchronise processes that map the page at
 * different addresses. */
typedef struct shm_header {
  _Atomic uint64_t gen; /* barriers this rank has reached */
  /* The collective's count and dtype, by the parity of its first round.
   * Read by the others after that round's barrier and before their next
   * one. A pair is rewritten at the earliest two rounds later (past the
   * next round's barrier, so every rank is done reading it): after a
   * one-round collective, a rank that finishes early writes its next
   * collective's into the other pair while the others still compare this
   * one; after several rounds, the same pair may come again, past that
   * barrier. */
  int64_t count[2];
  int32_t dtype[2];
  /* The low 32 bits of gen, for futex waits (a futex word has 32), and
   * how many ranks sleep on it, so an arrival with no sleeper makes no
   * system call. */
  _Atomic uint32_t word;
  _Atomic uint32_t sleepers;
  /* By parity, as count: 1 when this rank mapped every other rank's
   * buffer (in_place). */
  int32_t mapped[2];
  /* By parity, as count: fg_shm_all_reduce_apply's agreement value, which
   * every rank's must equal (each writes its slice into all variables). */
  double agree[2];
} shm_header;
_Static_assert(sizeof(shm_header) == LINE, "one header per cache line");

/* After the header, on a line of its own: where the rank's buffer is, by
 * parity, when it lies in an arena the others can map (pid 0: it does
 * not). */
typedef struct shm_refs {
  fg_shm_arena_ref ref[2];
} shm_refs;
_Static_assert(sizeof(shm_refs) == LINE, "one line of arena references");

/* Another rank's arena mapped here, kept for the next collectives (a
 * session's plan keeps its arena). Three per rank: its variables' arena
 * (fg_shm_all_reduce_apply) and plans' arenas (a plan rebuilt for new
 * shapes gets a new one, and the least recently used mapping goes). The
 * cost: up to three arenas a peer freed stay mapped here, their pages
 * resident, until a newer one evicts them or the group is freed. */
typedef struct peer_map {
  int32_t pid;
  uint64_t serial, size;
  unsigned char *base;
  uint64_t used; /* collective count at last use (least recent goes) */
} peer_map;
enum { MAPS_PER_PEER = 3 };

struct fg_shm_reduce {
  int rank, n;
  size_t chunk;    /* bytes per slot */
  size_t per_rank; /* header + 2 slots */
  unsigned char *base;
  size_t bytes;    /* of the mapping */
  uint64_t gen;    /* barriers this rank passed */
  uint64_t rounds; /* chunks so far: the slot parity */
  void **src;      /* n scratch pointers */
  void **dst;      /* n more */
  peer_map *maps;  /* [r * MAPS_PER_PEER + k] */
  uint64_t calls;  /* collectives so far */
  uint64_t in_place;
  uint64_t fused;   /* of in_place: fg_shm_all_reduce_apply */
  int try_in_place; /* fg_shm_reduce_set_in_place */
  int *names;       /* fg_shm_reduce_name_ranks: how errors name rank p */
  int names_of;     /* ... of how many */
  void *gather;     /* fg_shm_gather_factors's factors, kept */
  size_t gather_bytes;
};

/* Rank p as errors name it, and the group's size. */
static int name_of(const fg_shm_reduce *s, int p) { return s->names ? s->names[p] : p; }
static int names_of(const fg_shm_reduce *s) { return s->names ? s->names_of : s->n; }

size_t fg_shm_chunk_bytes(size_t requested) {
  size_t c = requested ? requested : FG_SHM_DEFAULT_CHUNK;
  if (c < MIN_CHUNK) c = MIN_CHUNK;
  if (c > MAX_CHUNK) c = MAX_CHUNK;
  return (c + LINE - 1) & ~(size_t)(LINE - 1);
}

/* Per rank: the header, the line of its buffers' references, a second
 * line for the variables of fg_shm_all_reduce_apply, and two slots. */
static size_t per_rank_bytes(size_t chunk) {
  return sizeof(shm_header) + 2 * sizeof(shm_refs) + 2 * chunk;
}

static int os_fail(fg_status *st, const char *call, const char *name, int err) {
  fg_status_set(st, err == ENOSPC || err == ENOMEM ? FG_RESOURCE_EXHAUSTED : FG_IO_ERROR,
                "shared-memory all_reduce: %s(\"%s\") failed: %s", call, name, strerror(err));
  return -1;
}

static int bad_args(const char *name, int rank, int n, fg_status *st) {
  if (!name || name[0] != '/' || strchr(name + 1, '/') || n < 1 || n > 4096 || rank < 0 ||
      rank >= n) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "shared-memory all_reduce: segment \"%s\" for rank %d of %d (the name is one "
                  "\"/word\", ranks 0 to n-1, n from 1 to 4096)",
                  name ? name : "(null)", rank, n);
    return 1;
  }
  return 0;
}

int fg_shm_reduce_create(const char *name, int n, size_t chunk, fg_status *st) {
  if (bad_args(name, 0, n, st)) return -1;
  chunk = fg_shm_chunk_bytes(chunk);
  size_t bytes = (size_t)n * per_rank_bytes(chunk);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return os_fail(st, "shm_open", name, errno);
  /* posix_fallocate returns its error instead of setting errno. */
  int err = ftruncate(fd, (off_t)bytes) != 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
  close(fd);
  if (err != 0) {
    shm_unlink(name);
    return os_fail(st, "posix_fallocate", name, err);
  }
  return 0;
}

void fg_shm_reduce_unlink(const char *name) {
  if (name) shm_unlink(name);
}

fg_shm_reduce *fg_shm_reduce_attach(const char *name, int rank, int n, size_t chunk,
                                    fg_status *st) {
  if (bad_args(name, rank, n, st)) return NULL;
  fg_shm_reduce *s = calloc(1, sizeof *s);
  if (s) {
    /* n pointers each, and n more for fg_shm_all_reduce_apply's blocks */
    s->src = calloc(2 * (size_t)n, sizeof *s->src);
    s->dst = calloc(2 * (size_t)n, sizeof *s->dst);
    s->maps = calloc((size_t)n * MAPS_PER_PEER, sizeof *s->maps);
  }
  if (!s || !s->src || !s->dst || !s->maps) {
    fg_shm_reduce_free(s); /* nothing mapped yet */
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "shared-memory all_reduce: out of memory");
    return NULL;
  }
  s->rank = rank;
  s->n = n;
  s->chunk = fg_shm_chunk_bytes(chunk);
  s->per_rank = per_rank_bytes(s->chunk);
  s->bytes = (size_t)n * s->per_rank;
  int fd = shm_open(name, O_RDWR, 0600);
  struct stat sb;
  int err = fd < 0 ? errno : fstat(fd, &sb) != 0 ? errno : 0;
  if (err == 0 && (size_t)sb.st_size != s->bytes) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "shared-memory all_reduce: segment \"%s\" has %lld bytes, rank %d expected %zu "
                  "(%d ranks, %zu-byte slots)",
                  name, (long long)sb.st_size, rank, s->bytes, n, s->chunk);
    close(fd);
    fg_shm_reduce_free(s);
    return NULL;
  }
  void *p = err == 0 ? mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (err == 0 && p == MAP_FAILED) err = errno;
  if (fd >= 0) close(fd);
  if (err != 0) {
    fg_shm_reduce_free(s);
    os_fail(st, fd < 0 ? "shm_open" : "mmap", name, err);
    return NULL;
  }
  s->base = p;
  return s;
}

void fg_shm_reduce_free(fg_shm_reduce *s) {
  if (!s) return;
  if (s->base) munmap(s->base, s->bytes);
  for (int k = 0; s->maps && k < s->n * MAPS_PER_PEER; k++)
    fg_shm_arena_unmap(s->maps[k].base, s->maps[k].size);
  free(s->src);
  free(s->dst);
  free(s->maps);
  free(s->names);
  free(s->gather);
  free(s);
}

uint64_t fg_shm_reduce_in_place_count(const fg_shm_reduce *s) { return s ? s->in_place : 0; }

uint64_t fg_shm_reduce_fused_count(const fg_shm_reduce *s) { return s ? s->fused : 0; }

static shm_header *header(const fg_shm_reduce *s, int r) {
  return (shm_header *)(s->base + (size_t)r * s->per_rank);
}

/* Line k (0: the buffer, 1: fg_shm_all_reduce_apply's variable) of rank
 * r's references. */
static shm_refs *refs_k(const fg_shm_reduce *s, int r, int k) {
  return (shm_refs *)(s->base + (size_t)r * s->per_rank + sizeof(shm_header) +
                      (size_t)k * sizeof(shm_refs));
}

static shm_refs *refs(const fg_shm_reduce *s, int r) { return refs_k(s, r, 0); }

static unsigned char *slot(const fg_shm_reduce *s, int r, uint64_t round) {
  return s->base + (size_t)r * s->per_rank + sizeof(shm_header) + 2 * sizeof(shm_refs) +
         (size_t)(round & 1) * s->chunk;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A shared (not FUTEX_PRIVATE) futex: the word lives in a mapping other
 * processes share, and the kernel finds it by the mapped object. */
static void futex_wait_ms(_Atomic uint32_t *word, uint32_t seen, long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Sleeps until rank r's header passes barrier g, or for at most 4 ms (the
 * caller then asks its stop hook and checks the deadline). The word is read
 * before gen is checked, and FUTEX_WAIT sleeps only while the word still
 * holds what was read, so an arrival in between is never missed; the
 * sleeper count is raised before that check, and the arriving rank reads
 * it after its store (all seq_cst), so one of the two sees the other. */
static void sleep_on(shm_header *h, uint64_t g) {
  uint32_t seen = atomic_load(&h->word);
  if (atomic_load(&h->gen) >= g) return;
  atomic_fetch_add(&h->sleepers, 1);
  if (atomic_load(&h->gen) < g) futex_wait_ms(&h->word, seen, 4);
  atomic_fetch_sub(&h->sleepers, 1);
}

/* Every rank has reached barrier s->gen + 1. Waits spin, then yield, then
 * sleep on a futex: a rank whose peer is still computing (a gradient
 * bucket ready before the peer's) gives its core to the compute thread
 * beside it instead of waking every 50 us; the peer's arrival wakes it.
 * Against a late peer the waiting rank used a tenth of the CPU it did with
 * 50 us sleeps, for a wake-up that costs about 50 us more than a poll
 * (without the wake call, the 4 ms ticks would bound it). On
 * a deadline the status names the ranks still missing, in the MPI
 * communicator's words. */
static int barrier(fg_shm_reduce *s, const char *desc, const fg_shm_wait *w, fg_status *st) {
  uint64_t g = ++s->gen;
  shm_header *me = header(s, s->rank);
  atomic_store_explicit(&me->gen, g, memory_order_release);
  atomic_store(&me->word, (uint32_t)g);
  if (atomic_load(&me->sleepers) > 0) futex_wake_all(&me->word);
  double t0 = now_s(), timeout = w && w->timeout_s > 0 ? w->timeout_s : 60.0;
  int r = 0;
  for (long polls = 0; r < s->n; polls++) {
    if (r == s->rank || atomic_load_explicit(&header(s, r)->gen, memory_order_acquire) >= g) {
      r++;
      polls = -1; /* progress: spin again */
      continue;
    }
    if ((polls & 63) != 0 && polls < FG_POLL_SPINS) continue;
    if (w && w->stop && w->stop(w->ctx, desc, st)) return -1;
    double t = now_s();
    if (t - t0 > timeout) {
      char missing[256] = "";
      size_t used = 0;
      for (int p = 0; p < s->n && used + 16 < sizeof missing; p++)
        if (p != s->rank && atomic_load(&header(s, p)->gen) < g)
          used += (size_t)snprintf(missing + used, sizeof missing - used, "%s%d", used ? ", " : "",
                                   name_of(s, p));
      fg_status_set(st, FG_DEADLINE_EXCEEDED,
                    "%s on rank %d of %d: waited %.1f s (timeout %.1f s) for rank(s) %s; a peer "
                    "died or is stuck",
                    desc, name_of(s, s->rank), names_of(s), t - t0, timeout, missing);
      return -1;
    }
    if (polls < 2 * FG_POLL_SPINS)
      fg_poll_pause(polls); /* spins, then yields */
    else
      sleep_on(header(s, r), g);
  }
  return 0;
}

/* After the first barrier: 0 when every rank has this count and dtype,
 * else -1 with the refusal (every rank finds it after the same barrier). */
static int check_counts(fg_shm_reduce *s, int par, int64_t count, fg_dtype dtype, const char *desc,
                        fg_status *st) {
  for (int p = 0; p < s->n; p++) {
    const shm_header *h = header(s, p);
    if (h->count[par] == count && h->dtype[par] == (int32_t)dtype) continue;
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s on rank %d of %d: rank %d has %lld elements of %s, rank %d has %lld of "
                  "%s; every rank must reduce the same tensor",
                  desc, name_of(s, s->rank), names_of(s), name_of(s, s->rank), (long long)count,
                  fg_dtype_name(dtype), name_of(s, p), (long long)h->count[par],
                  fg_dtype_name((fg_dtype)h->dtype[par]));
    return -1;
  }
  return 0;
}

/* Rank p's buffer as `ref` names it, mapped here (cached), or NULL. */
static unsigned char *peer_buffer(fg_shm_reduce *s, int p, const fg_shm_arena_ref *ref) {
  peer_map *m = &s->maps[(size_t)p * MAPS_PER_PEER], *victim = m;
  for (int k = 0; k < MAPS_PER_PEER; k++) {
    if (m[k].base && m[k].pid == ref->pid && m[k].serial == ref->serial && m[k].size == ref->size) {
      m[k].used = s->calls;
      return m[k].base + ref->offset;
    }
    if (!m[k].base || m[k].used < victim->used) victim = &m[k];
  }
  void *base = fg_shm_arena_map(ref);
  if (!base) return NULL;
  fg_shm_arena_unmap(victim->base, victim->size);
  *victim = (peer_map){ref->pid, ref->serial, ref->size, base, s->calls};
  return victim->base + ref->offset;
}

/* Publishes whether this rank mapped (`ok`) every buffer it needs, and
 * after a barrier reads every rank's: 1 when all did, 0 when some could not
 * (-1 on a failed wait). A rank that cannot map the others' arenas (no
 * /proc, another user, no memory for its buffers) will not later either,
 * and every rank saw the same flags, so all stop trying alike. */
static int agree_mapped(fg_shm_reduce *s, int par, int ok, const char *desc, const fg_shm_wait *w,
                        fg_status *st) {
  header(s, s->rank)->mapped[par] = ok;
  if (barrier(s, desc, w, st) != 0) return -1;
  for (int p = 0; p < s->n; p++)
    if (!header(s, p)->mapped[par]) {
      s->try_in_place = 0;
      return 0;
    }
  return 1;
}

/* After the first barrier of a collective whose buffers may lie in
 * arenas: maps every rank's buffers of `nb` kinds (kind k's references on
 * line k; out[k][p] its address here, bufs[k] for this rank's own), and the
 * ranks agree through `mapped` and a barrier, so all take one path. 1 when
 * every rank mapped every buffer, 0 when some buffer is not in an arena
 * or some rank could not map it, -1 on a failed wait. */
static int map_peers_k(fg_shm_reduce *s, unsigned char *const *bufs, void **const *out, int nb,
                       int par, int64_t count, size_t es, const char *desc, const fg_shm_wait *w,
                       fg_status *st) {
  const int n = s->n, me = s->rank;
  for (int k = 0; k < nb; k++)
    for (int p = 0; p < n; p++)
      if (refs_k(s, p, k)->ref[par].pid == 0) return 0; /* the same answer on every rank */
  int ok = 1;
  for (int k = 0; k < nb && ok; k++)
    for (int p = 0; p < n && ok; p++) {
      const fg_shm_arena_ref *r = &refs_k(s, p, k)->ref[par];
      ok = r->offset <= r->size && (uint64_t)count * es <= r->size - r->offset;
      out[k][p] = !ok ? NULL : p == me ? bufs[k] : peer_buffer(s, p, r);
      ok = out[k][p] != NULL;
    }
  return agree_mapped(s, par, ok, desc, w, st);
}

/* map_peers_k for one buffer per rank, into s->dst. */
static int map_peers(fg_shm_reduce *s, unsigned char *buf, int par, int64_t count, size_t es,
                     const char *desc, const fg_shm_wait *w, fg_status *st) {
  void **out[1] = {s->dst};
  return map_peers_k(s, &buf, out, 1, par, count, es, desc, w, st);
}

/* The in-place path, after the first barrier and the count check: when
 * every rank's buffer lies in an arena and every rank could map all of
 * them (map_peers), each rank sums its slice straight from the buffers in
 * rank order and stores it into every buffer (a reduce-scatter: each
 * owner into its own buffer only, the others nothing), and a last barrier
 * keeps every buffer unchanged until all are done: 1 with the collective
 * done, 0 to take the slots instead, -1 on a failed wait. */
static int reduce_in_place(fg_shm_reduce *s, unsigned char *buf, int par, int64_t count,
                           fg_dtype dtype, size_t es, int mean, int owners, const char *desc,
                           const fg_shm_wait *w, fg_status *st) {
  const int n = s->n, me = s->rank;
  int mapped = map_peers(s, buf, par, count, es, desc, w, st);
  if (mapped <= 0) return mapped;
  int64_t ms = 0, ml = 0;
  if (!owners || me < owners) fg_rank_slice(count, owners ? owners : n, me, &ms, &ml);
  for (int p = 0; p < n; p++)
    s->dst[p] = s->src[p] = (unsigned char *)s->dst[p] + ms * (int64_t)es;
  /* A reduce-scatter stores the slice into this rank's buffer alone. */
  if (owners)
    fg_rank_sum_to(dtype, &s->dst[me], 1, s->src, n, ml, mean);
  else
    fg_rank_sum_to(dtype, s->dst, n, s->src, n, ml, mean);
  if (barrier(s, desc, w, st) != 0) return -1;
  s->in_place++;
  return 1;
}

int fg_shm_reduce_name_ranks(fg_shm_reduce *s, const int *names, int of) {
  int *copy = s && names ? malloc((size_t)s->n * sizeof *copy) : NULL;
  if (!copy) return -1;
  memcpy(copy, names, (size_t)s->n * sizeof *copy);
  free(s->names);
  s->names = copy;
  s->names_of = of;
  return 0;
}

void fg_shm_reduce_set_in_place(fg_shm_reduce *s, int on) {
  if (s) s->try_in_place = on;
}

/* The element size of a collective's dtype, or 0 with the refusal. */
static size_t checked_size(const fg_shm_reduce *s, const char *op, const void *buf, int64_t count,
                           fg_dtype dtype, fg_status *st) {
  size_t es = dtype == FG_F32 || dtype == FG_I32 ? 4 : dtype == FG_F64 || dtype == FG_I64 ? 8 : 0;
  if (!s || es == 0 || count < 0 || (count > 0 && !buf)) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "shared-memory %s: %s over %lld elements of %s at %p (f32, f64, i32 or i64)", op,
                  s ? "a group" : "no group", (long long)count, fg_dtype_name(dtype), buf);
    return 0;
  }
  return es;
}

/* Owners outside 0 (every rank) .. n: refused, before any barrier. */
static int bad_owners(const fg_shm_reduce *s, const char *op, int owners, fg_status *st) {
  if (s && owners >= 0 && owners <= s->n) return 0;
  fg_status_set(st, FG_INVALID_ARGUMENT, "shared-memory %s: %d slice owners in a group of %d", op,
                owners, s ? s->n : 0);
  return 1;
}

/* Where rank p's slice of `count` (one of `owners`, the first ranks; the
 * others own none) lies inside the chunk [off, end): its first element
 * and length (0 when none does). */
static int64_t part_in_chunk(int64_t count, int owners, int p, int64_t off, int64_t end,
                             int64_t *lo) {
  int64_t ps = 0, pl = 0;
  if (p < owners) fg_rank_slice(count, owners, p, &ps, &pl);
  *lo = ps > off ? ps : off;
  int64_t hi = ps + pl < end ? ps + pl : end;
  return hi > *lo ? hi - *lo : 0;
}

/* Where rank p sums inside the chunk of `len` elements at `off` (relative
 * to the chunk): a slice of the chunk for an all_reduce (owners 0), the
 * part of its slice of the whole buffer for a reduce-scatter. */
static void chunk_part(int owners, int64_t count, int64_t off, int64_t len, int n, int p,
                       int64_t *ps, int64_t *pl) {
  if (!owners) {
    fg_rank_slice(len, n, p, ps, pl);
    return;
  }
  int64_t lo;
  *pl = part_in_chunk(count, owners, p, off, off + len, &lo);
  *ps = *pl > 0 ? lo - off : 0; /* no pointer past the chunk when empty */
}

/* fg_shm_all_reduce (owners 0), or fg_shm_reduce_scatter over `owners`
 * slices: each owner stores only its own slice's sum, into its own buffer,
 * and the slot path skips the copy out (and its barrier). */
static int shm_reduce(fg_shm_reduce *s, void *buf, int64_t count, fg_dtype dtype, int mean,
                      int owners, const char *desc, const fg_shm_wait *w, fg_status *st) {
  const size_t es =
      checked_size(s, owners ? "reduce_scatter" : "all_reduce", buf, count, dtype, st);
  if (es == 0) return -1;
  const int n = s->n, me = s->rank;
  s->calls++;
  /* Count 0 may come with no buffer: the empty round below then points
   * at a byte of its own (no arithmetic on NULL). */
  unsigned char none = 0, *b = count > 0 ? buf : &none;
  const int64_t per_chunk = (int64_t)(s->chunk / es);
  const int par = (int)(s->rounds & 1);
  /* Read by the others after the first barrier. The next collective
   * writes the other pair; the one after may rewrite this pair only past
   * the next collective's first barrier, which the others reach after
   * their comparison. */
  header(s, me)->count[par] = count;
  header(s, me)->dtype[par] = (int32_t)dtype;
  /* A small buffer: every rank copies all of it in, one barrier, and every
   * rank sums all of it in rank order itself (the same bits as the slices
   * below). Saving the second barrier halves the waiting, which is most of
   * a few-KiB collective's time. A slot is rewritten two collectives
   * later, past the next one's barrier, so the others are done reading. */
  const int small =
      (uint64_t)count * es <= s->chunk && (uint64_t)count * es * (uint64_t)n <= SMALL_BYTES;
  /* A larger one, where the group reads buffers in place: publish where it
   * is, then one barrier and the count check before anything moves. */
  const int first_checked = !small && s->try_in_place;
  if (first_checked) {
    fg_shm_arena_ref ref;
    fg_shm_arena_find(b, (size_t)count * es, &ref);
    refs(s, me)->ref[par] = ref;
    if (barrier(s, desc, w, st) != 0) return -1;
    if (check_counts(s, par, count, dtype, desc, st) != 0) {
      s->rounds++; /* as below: the other header pair next */
      return -1;
    }
    int done =
        count > 0 ? reduce_in_place(s, b, par, count, dtype, es, mean, owners, desc, w, st) : 0;
    if (done != 0) {
      s->rounds++; /* one round, so the next collective takes the other pair */
      return done < 0 ? -1 : 0;
    }
  }
  /* Count 0 still makes one empty round: its barrier and the count check
   * tell a partner with elements that the counts differ. */
  for (int64_t off = 0; off < count || off == 0; off += per_chunk, s->rounds++) {
    int64_t len = count - off < per_chunk ? count - off : per_chunk, ps, pl;
    unsigned char *mine = slot(s, me, s->rounds), *in = b + off * (int64_t)es;
    if (small)
      memcpy(mine, in, (size_t)(len * (int64_t)es));
    else
      for (int p = 0; p < n; p++) {
        if (p == me) continue;
        chunk_part(owners, count, off, len, n, p, &ps, &pl);
        if (pl > 0)
          memcpy(mine + ps * (int64_t)es, in + ps * (int64_t)es, (size_t)(pl * (int64_t)es));
      }
    if (barrier(s, desc, w, st) != 0) return -1;
    if (off == 0 && !first_checked && check_counts(s, par, count, dtype, desc, st) != 0) {
      /* Every rank finds a mismatch after the same one barrier, small path
       * or not, and all start the next collective on the other slot and
       * header pair, in step. */
      s->rounds++;
      return -1;
    }
    if (small) {
      for (int p = 0; p < n; p++)
        s->src[p] = p == me ? in : slot(s, p, s->rounds);
      fg_rank_sum(dtype, in, s->src, n, len, mean);
      continue; /* one round: len == count */
    }
    int64_t ms, ml;
    chunk_part(owners, count, off, len, n, me, &ms, &ml);
    for (int p = 0; p < n; p++)
      s->src[p] = p == me ? in + ms * (int64_t)es : slot(s, p, s->rounds) + ms * (int64_t)es;
    /* The sum goes to my slot for the others and, in the same pass, back
     * into the buffer, so only the others' slices are copied out. A
     * reduce-scatter keeps it: one barrier per chunk is enough, since a
     * slot is rewritten two rounds later, past the next round's barrier,
     * which every rank reaches only when done reading this one. */
    void *to[2] = {in + ms * (int64_t)es, mine + ms * (int64_t)es};
    fg_rank_sum_to(dtype, to, owners ? 1 : 2, s->src, n, ml, mean);
    if (owners) continue;
    if (barrier(s, desc, w, st) != 0) return -1;
    for (int p = 0; p < n; p++) {
      if (p == me) continue;
      fg_rank_slice(len, n, p, &ps, &pl);
      memcpy(in + ps * (int64_t)es, slot(s, p, s->rounds) + ps * (int64_t)es,
             (size_t)(pl * (int64_t)es));
    }
  }
  return 0;
}

int fg_shm_all_gather_slices(fg_shm_reduce *s, void *buf, int64_t count, fg_dtype dtype, int owners,
                             const char *desc, const fg_shm_wait *w, fg_status *st) {
  const size_t es = checked_size(s, "all_gather", buf, count, dtype, st);
  if (es == 0 || bad_owners(s, "all_gather", owners, st)) return -1;
  const int n = s->n, me = s->rank;
  if (owners == 0) owners = n;
  s->calls++;
  unsigned char none = 0, *b = count > 0 ? buf : &none;
  const int par = (int)(s->rounds & 1);
  header(s, me)->count[par] = count;
  header(s, me)->dtype[par] = (int32_t)dtype;
  int64_t lo, len;
  int checked = 0;
  if (s->try_in_place && (uint64_t)count * es * (uint64_t)n > SMALL_BYTES) {
    /* Every rank copies the others' slices straight from their buffers;
     * the last barrier keeps each buffer until all have read it. */
    fg_shm_arena_ref ref;
    fg_shm_arena_find(b, (size_t)count * es, &ref);
    refs(s, me)->ref[par] = ref;
    if (barrier(s, desc, w, st) != 0) return -1;
    if (check_counts(s, par, count, dtype, desc, st) != 0) {
      s->rounds++;
      return -1;
    }
    checked = 1;
    int mapped = map_peers(s, b, par, count, es, desc, w, st);
    if (mapped < 0) return -1;
    if (mapped) {
      for (int p = 0; p < n; p++)
        if (p != me && (len = part_in_chunk(count, owners, p, 0, count, &lo)) > 0)
          memcpy(b + lo * (int64_t)es, (unsigned char *)s->dst[p] + lo * (int64_t)es,
                 (size_t)(len * (int64_t)es));
      if (barrier(s, desc, w, st) != 0) return -1;
      s->rounds++;
      return 0;
    }
  }
  /* Through the slots, a chunk at a time: each rank copies the part of its
   * own slice inside the chunk into its slot, and after one barrier the
   * others' parts out of theirs. A slot is rewritten two rounds later,
   * past the next round's barrier, which every rank reaches only when done
   * reading this one. */
  const int64_t per_chunk = (int64_t)(s->chunk / es);
  for (int64_t off = 0; off < count || off == 0; off += per_chunk, s->rounds++) {
    const int64_t end = count - off < per_chunk ? count : off + per_chunk;
    unsigned char *mine = slot(s, me, s->rounds);
    if ((len = part_in_chunk(count, owners, me, off, end, &lo)) > 0)
      memcpy(mine + (lo - off) * (int64_t)es, b + lo * (int64_t)es, (size_t)(len * (int64_t)es));
    if (barrier(s, desc, w, st) != 0) return -1;
    if (!checked && check_counts(s, par, count, dtype, desc, st) != 0) {
      s->rounds++;
      return -1;
    }
    checked = 1;
    for (int p = 0; p < n; p++)
      if (p != me && (len = part_in_chunk(count, owners, p, off, end, &lo)) > 0)
        memcpy(b + lo * (int64_t)es, slot(s, p, s->rounds) + (lo - off) * (int64_t)es,
               (size_t)(len * (int64_t)es));
  }
  return 0;
}

int fg_shm_all_reduce(fg_shm_reduce *s, void *buf, int64_t count, fg_dtype dtype, int mean,
                      const char *desc, const fg_shm_wait *w, fg_status *st) {
  return shm_reduce(s, buf, count, dtype, mean, 0, desc, w, st);
}

/* Every rank's agreement value (by parity; a fused update's learning rate)
 * must equal this one's: each rank writes its slice into every rank's
 * buffer. `what` names the value in the message. */
static int check_agree(const fg_shm_reduce *s, int par, double agree, const char *what,
                       const char *desc, fg_status *st) {
  for (int p = 0; p < s->n; p++) {
    const double other = header(s, p)->agree[par];
    if (other == agree || (other != other && agree != agree)) continue;
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s on rank %d of %d: rank %d has %s %.17g, rank %d has %.17g; the result "
                  "of each rank's slice goes into every rank's buffer, so every rank must use "
                  "the same",
                  desc, name_of(s, s->rank), names_of(s), name_of(s, s->rank),
                  what ? what : "agreement value", agree, name_of(s, p), other);
    return -1;
  }
  return 0;
}

/* The first round of a fused update, after the caller published where
 * its gradient (or factors) lie: this rank's count, dtype, lr and var
 * published, one barrier (every rank is here: its update waited for its
 * own reads of its var, so from now on each may write the others'), and
 * the count and lr checks, alike on every rank. */
static int fused_begin(fg_shm_reduce *s, void *var, int64_t count, fg_dtype dtype, size_t es,
                       double lr, const char *what, const char *desc, const fg_shm_wait *w,
                       fg_status *st) {
  const int par = (int)(s->rounds & 1), me = s->rank;
  header(s, me)->count[par] = count;
  header(s, me)->dtype[par] = (int32_t)dtype;
  header(s, me)->agree[par] = lr;
  fg_shm_arena_ref ref;
  fg_shm_arena_find(var, (size_t)count * es, &ref);
  refs_k(s, me, 1)->ref[par] = ref;
  if (barrier(s, desc, w, st) != 0) return -1;
  s->rounds++; /* one round: the next collective takes the other pair */
  return check_counts(s, par, count, dtype, desc, st) != 0 ||
                 check_agree(s, par, lr, what, desc, st) != 0
             ? -1
             : 0;
}

int fg_shm_all_reduce_apply(fg_shm_reduce *s, void *var, const void *grad, int64_t count,
                            fg_dtype dtype, int mean, double lr, const char *what,
                            fg_comm_block_fn fn, void *arg, const char *desc, const fg_shm_wait *w,
                            fg_status *st) {
  const size_t es = dtype == FG_F32 ? 4 : dtype == FG_F64 ? 8 : 0;
  if (!s || es == 0 || !fn || count < 0 || (count > 0 && (!var || !grad))) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "shared-memory all_reduce_apply: %s over %lld elements of %s (f32 or f64)",
                  s ? "a group" : "no group", (long long)count, fg_dtype_name(dtype));
    return -1;
  }
  /* Small buffers, or a group that does not read in place: the caller's
   * way (the same answer on every rank; nothing moved). */
  if (!s->try_in_place || count == 0 || (uint64_t)count * es * (uint64_t)s->n <= SMALL_BYTES)
    return 1;
  const int n = s->n, me = s->rank;
  s->calls++;
  const int par = (int)(s->rounds & 1);
  fg_shm_arena_ref ref;
  fg_shm_arena_find(grad, (size_t)count * es, &ref);
  refs_k(s, me, 0)->ref[par] = ref;
  if (fused_begin(s, var, count, dtype, es, lr, what, desc, w, st) != 0) return -1;
  unsigned char *bufs[2] = {(unsigned char *)grad, var};
  void **out[2] = {s->src, s->dst};
  int mapped = map_peers_k(s, bufs, out, 2, par, count, es, desc, w, st);
  if (mapped <= 0) return mapped < 0 ? -1 : 1;
  /* This rank's slice: summed in rank order from the gradients where they
   * are, a block at a time into L1, and the updated values stored into
   * every rank's variable. Each rank reads its own variable's slice, which
   * no one else writes. */
  int64_t ms, ml;
  fg_rank_slice(count, n, me, &ms, &ml);
  _Alignas(64) unsigned char sum[8192];
  const int64_t block = (int64_t)(sizeof sum / es);
  void **src = s->src + n, **dst = s->dst + n; /* the block's addresses */
  const unsigned char *own = s->dst[me];
  for (int64_t off = ms; off < ms + ml; off += block) {
    const int64_t len = ms + ml - off < block ? ms + ml - off : block;
    const size_t at = (size_t)off * es;
    for (int p = 0; p < n; p++) {
      src[p] = (unsigned char *)s->src[p] + at;
      dst[p] = (unsigned char *)s->dst[p] + at;
    }
    fg_rank_sum(dtype, sum, src, n, len, mean);
    fn(arg, dtype, dst, n, own + at, sum, len);
  }
  /* No rank reads or writes a variable again until every slice is in. */
  if (barrier(s, desc, w, st) != 0) return -1;
  s->in_place++;
  s->fused++;
  return 0;
}

int fg_shm_reduce_scatter(fg_shm_reduce *s, void *buf, int64_t count, fg_dtype dtype, int mean,
                          int owners, const char *desc, const fg_shm_wait *w, fg_status *st) {
  if (bad_owners(s, "reduce_scatter", owners, st)) return -1;
  return shm_reduce(s, buf, count, dtype, mean, owners ? owners : s->n, desc, w, st);
}

/* What a rank puts in its slot for fg_shm_gather_factors before
 * the first barrier (a slot is rewritten two rounds later, past the next
 * round's barrier): its rows, var's shape, and where its factors lie. */
typedef struct product_refs {
  int64_t rows, m, n;
  fg_shm_arena_ref a, b;
} product_refs;

int fg_shm_gather_factors(fg_shm_reduce *s, void *var, const void *a, const void *b, int64_t rows,
                          int64_t m, int64_t n, fg_dtype dtype, double lr, const char *what,
                          fg_comm_factors_fn fn, void *arg, const char *desc, const fg_shm_wait *w,
                          fg_status *st) {
  const size_t es = dtype == FG_F32 ? 4 : dtype == FG_F64 ? 8 : 0;
  if (!s || es == 0 || !fn || rows < 0 || m < 0 || n < 0 || (n > 0 && m > INT64_MAX / n) ||
      (m * n > 0 && !var) || (rows * m > 0 && !a) || (rows * n > 0 && !b) ||
      s->chunk < sizeof(product_refs)) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "shared-memory gather_factors: %s, a [%lld, %lld] and b [%lld, %lld] "
                  "of %s (f32 or f64)",
                  s ? "a group" : "no group", (long long)rows, (long long)m, (long long)rows,
                  (long long)n, fg_dtype_name(dtype));
    return -1;
  }
  const int64_t count = m * n;
  if (!s->try_in_place || count == 0 || (uint64_t)count * es * (uint64_t)s->n <= SMALL_BYTES)
    return 1;
  const int nr = s->n, me = s->rank;
  s->calls++;
  const uint64_t round = s->rounds;
  const int par = (int)(round & 1);
  product_refs *mine = (product_refs *)slot(s, me, round);
  mine->rows = rows;
  mine->m = m;
  mine->n = n;
  fg_shm_arena_find(a, (size_t)(rows * m) * es, &mine->a);
  fg_shm_arena_find(b, (size_t)(rows * n) * es, &mine->b);
  if (fused_begin(s, var, count, dtype, es, lr, what, desc, w, st) != 0) return -1;
  /* The shapes first, over every rank, then the arenas: if any two ranks
   * differ, every rank differs from some rank, so all fail alike. */
  for (int p = 0; p < nr; p++) {
    const product_refs *r = (const product_refs *)slot(s, p, round);
    if (r->m != m || r->n != n || r->rows < 0) {
      fg_status_set(st, FG_INVALID_ARGUMENT,
                    "%s on rank %d of %d: rank %d's variable is [%lld, %lld], rank %d's [%lld, "
                    "%lld] with %lld rows; every rank must update the same variable",
                    desc, name_of(s, me), names_of(s), name_of(s, me), (long long)m, (long long)n,
                    name_of(s, p), (long long)r->m, (long long)r->n, (long long)r->rows);
      return -1;
    }
  }
  int64_t total = 0;
  for (int p = 0; p < nr; p++) {
    const product_refs *r = (const product_refs *)slot(s, p, round);
    /* A factor outside an arena: the caller's way, on every rank alike. */
    if ((r->rows > 0 && (r->a.pid == 0 || r->b.pid == 0)) || refs_k(s, p, 1)->ref[par].pid == 0)
      return 1;
    total += r->rows;
  }
  if (total > INT32_MAX || m > INT32_MAX || n > INT32_MAX) {
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "%s on rank %d of %d: the ranks' %lld rows of [%lld, %lld] exceed the GEMM's "
                  "index type",
                  desc, name_of(s, me), names_of(s), (long long)total, (long long)m, (long long)n);
    return -1;
  }
  /* This rank's slice of var's rows, and the gather buffer: every rank's
   * rows of that slice of a's columns [total, ml], then of b [total, n]. */
  int64_t ms, ml;
  fg_rank_slice(m, nr, me, &ms, &ml);
  const size_t want = (size_t)(total * (ml + n)) * es;
  int ok = 1;
  if (want > s->gather_bytes) {
    free(s->gather);
    s->gather = malloc(want);
    s->gather_bytes = s->gather ? want : 0;
    ok = s->gather != NULL;
  }
  for (int p = 0; p < nr && ok; p++) {
    const product_refs *r = (const product_refs *)slot(s, p, round);
    const fg_shm_arena_ref *v = &refs_k(s, p, 1)->ref[par];
    ok = v->offset <= v->size && (uint64_t)count * es <= v->size - v->offset;
    s->dst[p] = !ok ? NULL : p == me ? var : peer_buffer(s, p, v);
    s->src[p] = s->src[nr + p] = NULL;
    if (ok && r->rows > 0) {
      const uint64_t ab = (uint64_t)(r->rows * m) * es, bb = (uint64_t)(r->rows * n) * es;
      ok = r->a.offset <= r->a.size && ab <= r->a.size - r->a.offset && r->b.offset <= r->b.size &&
           bb <= r->b.size - r->b.offset;
      s->src[p] = !ok ? NULL : p == me ? (void *)a : peer_buffer(s, p, &r->a);
      s->src[nr + p] = !ok || !s->src[p] ? NULL : p == me ? (void *)b : peer_buffer(s, p, &r->b);
      ok = s->src[p] && s->src[nr + p];
    }
    ok = ok && s->dst[p];
  }
  const int agreed = agree_mapped(s, par, ok, desc, w, st);
  if (agreed <= 0) return agreed < 0 ? -1 : 1;
  unsigned char *ga = s->gather, *gb = ga + (size_t)(total * ml) * es;
  int64_t at = 0;
  for (int p = 0; p < nr; p++) {
    const int64_t rp = ((const product_refs *)slot(s, p, round))->rows;
    const unsigned char *ap = s->src[p], *bp = s->src[nr + p];
    for (int64_t i = 0; i < rp && ml > 0; i++)
      memcpy(ga + (size_t)((at + i) * ml) * es, ap + (size_t)(i * m + ms) * es, (size_t)ml * es);
    if (rp > 0) memcpy(gb + (size_t)(at * n) * es, bp, (size_t)(rp * n) * es);
    at += rp;
  }
  unsigned char *own = (unsigned char *)s->dst[me] + (size_t)(ms * n) * es;
  /* No rows anywhere: the gradient is 0 and var stays. */
  if (ml > 0 && total > 0) fn(arg, dtype, ml, n, total, ga, gb, own, nr);
  for (int p = 0; p < nr; p++)
    if (p != me && ml > 0)
      memcpy((unsigned char *)s->dst[p] + (size_t)(ms * n) * es, own, (size_t)(ml * n) * es);
  /* No rank reads or writes a variable again until every slice is in. */
  if (barrier(s, desc, w, st) != 0) return -1;
  s->in_place++;
  s->fused++;
  return 0;
}
