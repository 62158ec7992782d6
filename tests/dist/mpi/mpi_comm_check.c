/* A program test_mpi.c starts under mpirun to exercise dist/comm/comm_mpi.c.
 *
 *   mpi_comm_check collectives TIMEOUT   all_reduce / all_gather / broadcast
 *   mpi_comm_check kill K TIMEOUT        rank 1 dies (SIGKILL) before all_reduce K
 *   mpi_comm_check stuck K TIMEOUT       rank 1 sleeps 10*TIMEOUT before all_reduce K
 *   mpi_comm_check hash same|mismatch    the graph-hash check
 *   mpi_comm_check p2p TIMEOUT           send/recv: ring, threads, refusals
 *   mpi_comm_check p2p_deadline recv|send TIMEOUT
 *                                        rank 0 waits on rank 1, which sleeps
 *   mpi_comm_check p2p_deadline_split recv TIMEOUT
 *                                        the same in a split group whose
 *                                        ranks are the world's reversed
 *   mpi_comm_check mismatch TIMEOUT      counts, an empty tensor and dtypes
 *                                        that differ between ranks
 *   mpi_comm_check abort TIMEOUT         rank 1 aborts while rank 0 waits in a
 *                                        recv from it and the others in an
 *                                        all_reduce
 *   mpi_comm_check die_at_init TIMEOUT   rank 1 dies (SIGKILL) before MPI starts
 *   mpi_comm_check die_at_split TIMEOUT  rank 1 joins the split's gather, then
 *                                        dies before its MPI_Comm_split
 *   mpi_comm_check late_join TIMEOUT     every rank initialises MPI itself;
 *                                        rank 1 then sleeps 10*TIMEOUT before
 *                                        joining the communicator
 *
 * Each rank prints "rank R: ..." lines. Expected values are computed here
 * by a plain loop over every rank's data (each rank can regenerate all of
 * it), never by the communicator. Exit codes: 0 all good, 1 a wrong value,
 * 3 a collective failed (the code name and message are printed). */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "../test_comm_util.h"
#include "dist/comm/comm_mpi.h"
#include "dist/comm/shm_arena.h"

/* FG_TEST_HOSTS="0,0,1,1": rank r pretends to be on host list[r]
 * (FG_MPI_HOST), so one machine tries the path across hosts (shared
 * memory within each, messages between). g_host[r] is that list. */
static int g_host[64];
static int g_hosts_given;

static void pretend_hosts(fg_comm *c) {
  const char *list = getenv("FG_TEST_HOSTS");
  if (!list || !*list) return;
  int label[64];
  for (int r = 0; r < c->size && r < 64; r++) {
    label[r] = atoi(list);
    list = strchr(list, ',');
    list = list ? list + 1 : "0";
  }
  /* Hosts numbered in order of their first rank, as the reference sums
   * them (whatever the list's labels). */
  for (int r = 0, hosts = 0; r < c->size && r < 64; r++) {
    g_host[r] = -1;
    for (int q = 0; q < r && g_host[r] < 0; q++)
      if (label[q] == label[r]) g_host[r] = g_host[q];
    if (g_host[r] < 0) g_host[r] = hosts++;
  }
  char name[32];
  snprintf(name, sizeof name, "test-host-%d", label[c->rank < 64 ? c->rank : 0]);
  setenv("FG_MPI_HOST", name, 1);
  g_hosts_given = 1;
}

/* The reference for the path the communicator took: across hosts, each
 * host's sum first (reduce_expected_hosts), else rank order. Across hosts
 * a buffer that fits one message round (at most 4088 bytes, and n copies
 * at most 16 KiB: dist/comm/comm_mpi.c) is summed in rank order too. */
static void expected(fg_comm *c, fg_dtype dt, void *want, int64_t count, int mean) {
  const size_t bytes = (size_t)count * fg_dtype_size(dt);
  const int one_round = count > 0 && bytes <= 4088 && bytes * (size_t)c->size <= 16384;
  int across = g_hosts_given && !one_round &&
               strncmp(fg_comm_mpi_reduce_path(c), "shared memory within", 20) == 0;
  reduce_expected_hosts(dt, want, 0, c->size, across ? g_host : NULL, count, mean);
}

static int fail_status(fg_comm *c, const char *what, fg_status *st, double t0) {
  printf("rank %d: %s failed: %s after %.2f s: %s\n", c->rank, what,
         fg_code_name(fg_status_code(st)), comm_now_s() - t0, fg_status_message(st));
  fflush(stdout);
  return 3;
}

static int collectives(fg_comm *c, fg_status *st) {
  static const fg_dtype dts[] = {FG_F32, FG_F64, FG_I32, FG_I64};
  /* Over messages between two ranks, 1000 and 5000 elements take every
   * path by dtype: one round with the counts (up to 4088 bytes), whole
   * buffers swapped (up to 32 KB) and two phases (beyond). */
  const int64_t counts[] = {0, 1, 3, c->size - 1, c->size + 1, 1000, 5000, 10007, 200003};
  int bad = 0, checks = 0;
  double t0 = comm_now_s();
  /* Pass 1 on the heap; pass 2 in arenas the other ranks can map
   * (dist/comm/shm_arena.h), where a session's plan puts its buffers: read in
   * place over shared memory. */
  for (int pass = 0; pass < 2; pass++)
    for (size_t d = 0; d < 4; d++) {
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        for (int mean = 0; mean < 2; mean++) {
          fg_dtype dt = dts[d];
          int64_t n = counts[k];
          size_t es = fg_dtype_size(dt);
          unsigned char *buf = pass ? fg_shm_arena_alloc_host((size_t)n * es + 1)
                                    : malloc((size_t)n * es + 1),
                        *want = malloc((size_t)n * es + 1);
          reduce_fill(dt, buf, c->rank, n);
          if (c->ops->all_reduce(c, buf, n, dt, mean, st) != 0) {
            pass ? fg_shm_arena_free(buf) : free(buf);
            free(want);
            return fail_status(c, "all_reduce", st, t0);
          }
          expected(c, dt, want, n, mean); /* after the first: the path is known */
          if (memcmp(buf, want, (size_t)n * es) != 0) {
            int64_t i = 0;
            while (memcmp(buf + i * (int64_t)es, want + i * (int64_t)es, es) == 0)
              i++;
            printf("rank %d: all_reduce %s count %lld mean %d differs at [%lld]\n", c->rank,
                   fg_dtype_name(dt), (long long)n, mean, (long long)i);
            bad++;
          }
          checks++;
          pass ? fg_shm_arena_free(buf) : free(buf);
          free(want);
        }
      }
    }
  /* Bad arguments are refused on every rank before any message moves, so
   * the group stays in step. */
  char dummy[8] = {0};
  if (c->ops->all_reduce(c, dummy, 8, FG_BOOL, 0, st) == 0 ||
      fg_status_code(st) != FG_INVALID_ARGUMENT) {
    printf("rank %d: bool all_reduce was not refused\n", c->rank);
    bad++;
  }
  if (c->ops->all_reduce(c, dummy, -1, FG_F32, 0, st) == 0 ||
      fg_status_code(st) != FG_INVALID_ARGUMENT) {
    printf("rank %d: negative count was not refused\n", c->rank);
    bad++;
  }
  checks += 2;
  uint64_t *all = calloc((size_t)c->size, sizeof *all);
  if (c->ops->all_gather_u64(c, 1000003ull * (uint64_t)c->rank + 7, all, st) != 0) {
    free(all);
    return fail_status(c, "all_gather_u64", st, t0);
  }
  for (int r = 0; r < c->size; r++)
    if (all[r] != 1000003ull * (uint64_t)r + 7) {
      printf("rank %d: all_gather_u64[%d] = %llu\n", c->rank, r, (unsigned long long)all[r]);
      bad++;
    }
  checks++;
  free(all);
  const int64_t nb = 1000003;
  unsigned char *b = malloc((size_t)nb);
  int root = c->size - 1;
  for (int64_t i = 0; i < nb; i++)
    b[i] = (unsigned char)(c->rank == root ? i * 7 + 3 : 0);
  if (c->ops->broadcast(c, b, nb, root, st) != 0) {
    free(b);
    return fail_status(c, "broadcast", st, t0);
  }
  for (int64_t i = 0; i < nb; i++)
    if (b[i] != (unsigned char)(i * 7 + 3)) {
      printf("rank %d: broadcast byte %lld = %d\n", c->rank, (long long)i, b[i]);
      bad++;
      break;
    }
  checks++;
  free(b);
  /* The bytes one all_reduce of 200003 f32 sends as messages (the test
   * knows what each path must send). */
  float *big = calloc(200003, sizeof *big);
  uint64_t sent = fg_comm_mpi_message_bytes(c);
  if (!big || c->ops->all_reduce(c, big, 200003, FG_F32, 0, st) != 0) {
    free(big);
    return fail_status(c, "all_reduce", st, t0);
  }
  free(big);
  printf("rank %d: 200003 f32 sent %llu bytes\n", c->rank,
         (unsigned long long)(fg_comm_mpi_message_bytes(c) - sent));
  printf("rank %d: %d checks, %d wrong\n", c->rank, checks, bad);
  printf("rank %d: all_reduce path: %s\n", c->rank, fg_comm_mpi_reduce_path(c));
  /* What a session's default collective_lanes counts: mpirun's ranks here. */
  printf("rank %d: host procs %d\n", c->rank, fg_comm_mpi_host_procs(c));
  printf("rank %d: in place %llu\n", c->rank, (unsigned long long)fg_comm_mpi_in_place_count(c));
  return bad ? 1 : 0;
}

/* Prints a refusal; 1 when the all_reduce was accepted. */
static int refused(fg_comm *c, const char *what, int rc, fg_status *st) {
  printf("rank %d: %s: %s %s\n", c->rank, what,
         rc == 0 ? "ACCEPTED" : fg_code_name(fg_status_code(st)), fg_status_message(st));
  return rc == 0;
}

/* A 3-element f64 sum after a refusal: right when the group stayed in step. */
static int right_sum(fg_comm *c, const char *after, fg_status *st, double t0) {
  double buf[3], want[3];
  reduce_fill(FG_F64, buf, c->rank, 3);
  if (c->ops->all_reduce(c, buf, 3, FG_F64, 0, st) != 0) return fail_status(c, after, st, t0);
  expected(c, FG_F64, want, 3, 0);
  int ok = memcmp(buf, want, sizeof want) == 0;
  printf("rank %d: %s: %s\n", c->rank, after, ok ? "right sum" : "WRONG sum");
  return ok ? 0 : 1;
}

/* Three refusals, each followed by a right 3-element sum (the group stays
 * in step on both paths):
 *   1. rank 0 reduces 5 f64 elements, the others 6;
 *   2. rank 1 reduces 0 elements (no buffer), the others 2;
 *   3. the last rank reduces 4 f32, the others 4 f64.
 * Every rank must be refused, naming both sides. */
static int mismatch(fg_comm *c, fg_status *st) {
  double t0 = comm_now_s();
  double buf[6];
  reduce_fill(FG_F64, buf, c->rank, 6);
  int bad = refused(c, "mismatched counts",
                    c->ops->all_reduce(c, buf, c->rank == 0 ? 5 : 6, FG_F64, 0, st), st);
  if (bad) return 1;
  if ((bad = right_sum(c, "after the mismatch", st, t0)) != 0) return bad;
  int rc = c->rank == 1 ? c->ops->all_reduce(c, NULL, 0, FG_F64, 0, st)
                        : c->ops->all_reduce(c, buf, 2, FG_F64, 0, st);
  if (refused(c, "empty against 2", rc, st)) return 1;
  if ((bad = right_sum(c, "after the empty one", st, t0)) != 0) return bad;
  rc = c->ops->all_reduce(c, buf, 4, c->rank == c->size - 1 ? FG_F32 : FG_F64, 0, st);
  if (refused(c, "mismatched dtypes", rc, st)) return 1;
  if ((bad = right_sum(c, "after the dtypes", st, t0)) != 0) return bad;
  /* A buffer small enough for one round (2 f64) against one that is not
   * (3000): the paths differ, the refusal does not. */
  double *big = calloc(3000, sizeof *big);
  if (!big) return 3;
  rc = c->ops->all_reduce(c, big, c->rank == 0 ? 2 : 3000, FG_F64, 0, st);
  free(big);
  if (refused(c, "one round against two", rc, st)) return 1;
  return right_sum(c, "after the sizes", st, t0);
}

/* Loops all_reduce; `victim` misbehaves before collective k. */
static int fault(fg_comm *c, int k, int kill_it, double timeout, fg_status *st) {
  /* In an arena, as a session's gradients are: over shared memory the
   * survivors wait in the in-place path's barriers (16 KB on 3 ranks is
   * over the small path). */
  float *buf = fg_shm_arena_alloc_host(4096 * sizeof *buf);
  if (!buf) return 3;
  for (int step = 0; step < k + 3; step++) {
    if (c->rank == 1 && step == k) {
      printf("rank 1: %s before all_reduce %d\n", kill_it ? "SIGKILL" : "stuck", k);
      fflush(stdout);
      if (kill_it) raise(SIGKILL);
      struct timespec ts = {(time_t)(10 * timeout), 0};
      nanosleep(&ts, NULL);
    }
    for (int i = 0; i < 4096; i++)
      buf[i] = (float)(c->rank + i);
    double t0 = comm_now_s();
    if (c->ops->all_reduce(c, buf, 4096, FG_F32, 1, st) != 0) {
      fg_shm_arena_free(buf);
      printf("rank %d: %llu in place before\n", c->rank,
             (unsigned long long)fg_comm_mpi_in_place_count(c));
      return fail_status(c, "all_reduce", st, t0);
    }
  }
  printf("rank %d: all steps done (%llu in place)\n", c->rank,
         (unsigned long long)fg_comm_mpi_in_place_count(c));
  fg_shm_arena_free(buf);
  return 0;
}

/* ---- point-to-point ------------------------------------------------------ */

typedef struct p2p_thread {
  fg_comm *c;
  int role; /* 0: send right then recv from right; 1: recv from left, send
             * left; 2: all_reduce */
  int iters, bad, failed;
  char err[600];
} p2p_thread;

static void *p2p_worker(void *p) {
  p2p_thread *t = p;
  fg_status *st = fg_status_new();
  double *buf = malloc((size_t)P2P_BIG * sizeof *buf);
  float *ar = malloc(100000 * sizeof *ar);
  for (int it = 0; it < t->iters && !t->failed; it++) {
    if (p2p_duplex_step(t->c, t->role, it, buf, ar, 100000, &t->bad, st) != 0) {
      t->failed = 1;
      snprintf(t->err, sizeof t->err, "%s: %s", fg_code_name(fg_status_code(st)),
               fg_status_message(st));
    }
  }
  free(buf);
  free(ar);
  fg_status_free(st);
  return NULL;
}

/* A refused call: prints its message, counts a wrong result. */
static int expect_refused(fg_comm *c, int rc, fg_status *st, const char *what) {
  printf("rank %d: %s: %s %s\n", c->rank, what, rc == 0 ? "ACCEPTED" : "refused",
         fg_status_message(st));
  return rc != 0 && fg_status_code(st) == FG_INVALID_ARGUMENT ? 0 : 1;
}

static int p2p(fg_comm *c, fg_status *st) {
  static const fg_dtype dts[] = {FG_F32, FG_F64, FG_I32, FG_I64};
  const int n = c->size, me = c->rank, right = (me + 1) % n, left = (me + n - 1) % n;
  int bad = 0, checks = 0;
  double t0 = comm_now_s();
  /* 1. A ring: even ranks send first, odd ranks receive first, so a
   * blocking send always meets a posted recv (n is even). */
  for (int d = 0; d < 4; d++) {
    size_t es = fg_dtype_size(dts[d]);
    const int64_t counts[] = {0, 1, 1000, (int64_t)(3 << 20) / (int64_t)es};
    for (int k = 0; k < 4; k++) {
      int64_t cnt = counts[k];
      int tag = d * 4 + k;
      unsigned char *out = malloc((size_t)cnt * es + 1), *in = malloc((size_t)cnt * es + 1);
      p2p_fill(dts[d], out, me, right, tag, cnt);
      memset(in, 0xEE, (size_t)cnt * es);
      for (int phase = 0; phase < 2; phase++) {
        int rc = (phase == 0) == (me % 2 == 0)
                     ? c->ops->send(c, out, cnt * (int64_t)es, right, tag, st)
                     : c->ops->recv(c, in, cnt * (int64_t)es, left, tag, st);
        if (rc != 0) {
          free(out);
          free(in);
          return fail_status(c, "ring send/recv", st, t0);
        }
      }
      int64_t at = p2p_mismatch(dts[d], in, left, me, tag, cnt);
      if (at >= 0) {
        printf("rank %d: ring %s count %lld from rank %d differs at [%lld]\n", me,
               fg_dtype_name(dts[d]), (long long)cnt, left, (long long)at);
        bad++;
      }
      checks++;
      free(out);
      free(in);
    }
  }
  /* 2. Two threads per rank send and receive 8 MB in opposite directions
   * while a third runs all_reduces: a send waiting for its peer must not
   * hold up the recv (or the collective) of another thread. */
  p2p_thread th[3];
  pthread_t tid[3];
  double t1 = comm_now_s();
  for (int i = 0; i < 3; i++) {
    th[i] = (p2p_thread){c, i, 4, 0, 0, ""};
    pthread_create(&tid[i], NULL, p2p_worker, &th[i]);
  }
  for (int i = 0; i < 3; i++)
    pthread_join(tid[i], NULL);
  for (int i = 0; i < 3; i++) {
    if (th[i].failed) {
      printf("rank %d: thread %d failed: %s\n", me, i, th[i].err);
      return 3;
    }
    bad += th[i].bad;
    checks++;
  }
  printf("rank %d: threads done in %.2f s\n", me, comm_now_s() - t1);
  /* 3. A recv of the wrong size is refused naming both sizes, and the next
   * message on the same (peer, tag) still arrives intact. Pairs (0,1),
   * (2,3), ...: the even rank sends. */
  int pair = me % 2 == 0 ? me + 1 : me - 1;
  unsigned char msg[1000];
  double small[3];
  if (me % 2 == 0) {
    p2p_fill(FG_F64, small, me, pair, 77, 3);
    for (int i = 0; i < 1000; i++)
      msg[i] = (unsigned char)(i * 13 + 5);
    if (c->ops->send(c, msg, 1000, pair, 7, st) != 0 ||
        c->ops->send(c, small, (int64_t)sizeof small, pair, 7, st) != 0)
      return fail_status(c, "send before the size mismatch", st, t0);
    checks++;
  } else {
    int rc = c->ops->recv(c, msg, 800, pair, 7, st);
    printf("rank %d: wrong size: %s %s\n", me, fg_code_name(fg_status_code(st)),
           fg_status_message(st));
    if (rc == 0 || fg_status_code(st) != FG_INVALID_ARGUMENT) bad++;
    memset(small, 0, sizeof small);
    if (c->ops->recv(c, small, (int64_t)sizeof small, pair, 7, st) != 0)
      return fail_status(c, "recv after the size mismatch", st, t0);
    if (p2p_mismatch(FG_F64, small, pair, me, 77, 3) >= 0) {
      printf("rank %d: the message after the mismatch is wrong\n", me);
      bad++;
    }
    checks++;
  }
  /* 4. Bad arguments are refused before anything moves. */
  char b8[8] = {0};
  bad += expect_refused(c, c->ops->send(c, b8, 8, n, 1, st), st, "send to rank n");
  bad += expect_refused(c, c->ops->recv(c, b8, 8, -1, 1, st), st, "recv from rank -1");
  bad += expect_refused(c, c->ops->send(c, b8, 8, me, 1, st), st, "send to itself");
  bad += expect_refused(c, c->ops->recv(c, b8, 8, right, -1, st), st, "recv tag -1");
  bad += expect_refused(c, c->ops->send(c, b8, -1, right, 1, st), st, "send -1 bytes");
  bad += expect_refused(c, c->ops->recv(c, NULL, 8, left, 1, st), st, "recv into NULL");
  checks += 6;
  /* The group still works after the refusals. */
  if (c->ops->all_reduce(c, small, 1, FG_F64, 0, st) != 0)
    return fail_status(c, "all_reduce after the refusals", st, t0);
  printf("rank %d: p2p %d checks, %d wrong\n", me, checks, bad);
  return bad ? 1 : 0;
}

/* Rank 0 waits on rank 1, which sleeps through it. */
static int p2p_deadline(fg_comm *c, int send, double timeout, fg_status *st) {
  if (c->rank != 0) {
    if (c->rank == 1) {
      struct timespec ts = {(time_t)(10 * timeout), 0};
      nanosleep(&ts, NULL);
    }
    return 0;
  }
  double t0 = comm_now_s();
  int rc;
  if (send) {
    /* 8 MB: far above any eager limit, so it waits for a recv. */
    double *buf = calloc((size_t)P2P_BIG, sizeof *buf);
    rc = c->ops->send(c, buf, (int64_t)P2P_BIG * 8, 1, 5, st);
    free(buf);
  } else {
    char buf[64];
    rc = c->ops->recv(c, buf, 64, 1, 5, st);
  }
  if (rc != 0) return fail_status(c, send ? "send" : "recv", st, t0);
  printf("rank 0: %s completed\n", send ? "send" : "recv");
  return 0;
}

/* fail_status, but an FG_ABORTED is what abort mode expects: exit 0 then,
 * so that mpirun does not kill the ranks still printing. */
static int aborted_status(fg_comm *c, const char *what, fg_status *st, double t0) {
  int rc = fail_status(c, what, st, t0);
  return fg_status_code(st) == FG_ABORTED ? 0 : rc;
}

/* Two good all_reduces, then rank 1 aborts after 0.3 s (the others are
 * waiting by then: rank 0 in a recv from rank 1, the rest in an
 * all_reduce) and tries one more all_reduce itself. Every wait ends with
 * FG_ABORTED long before TIMEOUT. */
static int abort_peers(fg_comm *c, fg_status *st) {
  float buf[64];
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 64; i++)
      buf[i] = (float)(c->rank + i);
    double t0 = comm_now_s();
    if (c->ops->all_reduce(c, buf, 64, FG_F32, 1, st) != 0)
      return fail_status(c, "all_reduce", st, t0);
  }
  double t0 = comm_now_s();
  int rc;
  if (c->rank == 1) {
    struct timespec ts = {0, 300000000};
    nanosleep(&ts, NULL);
    c->ops->abort(c, "rank one gave up");
    c->ops->abort(c, "a second abort changes nothing");
    rc = c->ops->all_reduce(c, buf, 64, FG_F32, 1, st);
    if (rc != 0) return aborted_status(c, "all_reduce after abort", st, t0);
  } else if (c->rank == 0) {
    if (c->ops->recv(c, buf, 64, 1, 7, st) != 0) return aborted_status(c, "recv", st, t0);
  } else if (c->ops->all_reduce(c, buf, 64, FG_F32, 1, st) != 0) {
    return aborted_status(c, "all_reduce", st, t0);
  }
  printf("rank %d: not stopped\n", c->rank);
  return 1;
}

/* fg_comm_mpi_split gathers every rank's (color, key) under the deadline,
 * then calls MPI_Comm_split, which blocks. Rank 1 takes part in the gather
 * (the same collective, made by hand) and dies before the split. */
static int die_at_split(fg_comm *c, fg_status *st) {
  if (c->rank == 1) {
    uint64_t all[64];
    if (c->size > 64 || c->ops->all_gather_u64(c, 1, all, st) != 0) return 3;
    raise(SIGKILL);
  }
  fg_comm *sub = fg_comm_mpi_split(c, 0, c->rank, st);
  if (!sub) {
    printf("rank %d: split failed: %s %s\n", c->rank, fg_code_name(fg_status_code(st)),
           fg_status_message(st));
    return 3;
  }
  printf("rank %d: split returned\n", c->rank);
  sub->ops->free(sub);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: mpi_comm_check collectives|kill|stuck|hash ...\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  fg_status *st = fg_status_new();
  const char *mode = argv[1];
  double timeout = strcmp(mode, "collectives") == 0 || strcmp(mode, "p2p") == 0 ||
                           strcmp(mode, "abort") == 0 || strcmp(mode, "mismatch") == 0 ||
                           strcmp(mode, "late_join") == 0 || strcmp(mode, "die_at_init") == 0 ||
                           strcmp(mode, "die_at_split") == 0
                       ? atof(argv[2])
                   : argc > 3 ? atof(argv[3])
                              : 10.0;
  if (strcmp(mode, "die_at_init") == 0) {
    /* MPI is not up, so the rank comes from Open MPI's environment. */
    const char *r = getenv("OMPI_COMM_WORLD_RANK");
    if (r && strcmp(r, "1") == 0) raise(SIGKILL);
  }
  if (strcmp(mode, "late_join") == 0) {
    /* MPI_Init first, as an application that owns MPI does: it is a fence
     * in Open MPI, so a rank late to it holds everyone there. The late rank
     * is late to flowgraph's join (a collective MPI_Comm_idup) instead. */
    int provided = 0, rank = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1) {
      struct timespec ts = {(time_t)(10 * timeout), 0};
      nanosleep(&ts, NULL);
    }
  }
  fg_comm *c = fg_comm_mpi_new(timeout, st);
  if (!c) {
    printf("fg_comm_mpi_new: %s: %s\n", fg_code_name(fg_status_code(st)), fg_status_message(st));
    fflush(stdout);
    fg_status_free(st);
    /* A failed rank's exit makes mpirun end the rest: give every rank time
     * to print (and, under ASan, to check for leaks) first. */
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
    return 3;
  }
  pretend_hosts(c);
  int rc;
  if (strcmp(mode, "collectives") == 0) {
    rc = collectives(c, st);
  } else if (strcmp(mode, "p2p") == 0) {
    rc = c->size % 2 == 0 ? p2p(c, st) : 2;
  } else if (strcmp(mode, "p2p_deadline") == 0) {
    rc = p2p_deadline(c, strcmp(argv[2], "send") == 0, timeout, st);
  } else if (strcmp(mode, "p2p_deadline_split") == 0) {
    /* Group rank r is world rank size - 1 - r: errors must say both. */
    fg_comm *sub = fg_comm_mpi_split(c, 0, c->size - 1 - c->rank, st);
    rc = sub ? p2p_deadline(sub, strcmp(argv[2], "send") == 0, timeout, st) : 3;
    if (sub) sub->ops->free(sub);
  } else if (strcmp(mode, "abort") == 0) {
    rc = abort_peers(c, st);
  } else if (strcmp(mode, "mismatch") == 0) {
    rc = mismatch(c, st);
  } else if (strcmp(mode, "die_at_split") == 0) {
    rc = die_at_split(c, st);
  } else if (strcmp(mode, "kill") == 0 || strcmp(mode, "stuck") == 0) {
    rc = fault(c, atoi(argv[2]), strcmp(mode, "kill") == 0, timeout, st);
  } else {
    /* The last rank hashes another "graph" in mismatch mode. */
    const char *graph =
        strcmp(argv[2], "mismatch") == 0 && c->rank == c->size - 1 ? "graph B" : "graph A";
    uint64_t h = fg_hash_bytes(FG_HASH_SEED, graph, strlen(graph));
    rc = fg_comm_check_same_u64(c, h, "graph", st) == 0 ? 0 : 4;
    printf("rank %d: hash 0x%016llx: %s %s\n", c->rank, (unsigned long long)h,
           fg_code_name(fg_status_code(st)), fg_status_message(st));
  }
  fflush(stdout);
  c->ops->free(c);
  fg_status_free(st);
  if (strcmp(mode, "abort") == 0) {
    /* A broken communicator makes the process exit non-zero, and mpirun
     * then kills the rest: give every rank time to print first. */
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
  }
  if (strcmp(mode, "late_join") == 0 && rc == 0) {
    /* This program started MPI itself, so it ends it too. */
    fflush(NULL);
    MPI_Finalize();
    return 0;
  }
  fg_mpi_shutdown(rc == 3 ? 3 : 0);
  return rc;
}
