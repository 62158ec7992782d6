/* Point-to-point send/recv on the in-process communicator (dist/
 * comm_inproc.c): ranks are threads. The MPI communicator's send/recv are
 * checked under mpirun by test_mpi (mpi_p2p_*). Received values are
 * compared with a formula the test evaluates itself, never with what the
 * sender's buffer holds afterwards. */
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm/comm_inproc.h"
#include "fgtest.h"
#include "test_comm_util.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FGT_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define FGT_SANITIZER_ALLOCATOR 1
#endif
#endif
#ifndef FGT_SANITIZER_ALLOCATOR
#define FGT_SANITIZER_ALLOCATOR 0
#endif
#if FGT_SANITIZER_ALLOCATOR
/* The sanitizer runtimes' allocator statistics (GCC does not install
 * <sanitizer/allocator_interface.h>, which declares it). */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

typedef struct rank_arg {
  fg_comm *c;
  int role, iters;
  int bad, failed;
  fg_code code;
  char err[512];
} rank_arg;

static void record(rank_arg *a, fg_status *st) {
  a->failed = 1;
  a->code = fg_status_code(st);
  snprintf(a->err, sizeof a->err, "%s", fg_status_message(st));
}

/* A ring: every rank sends to the right (buffered, so all send first),
 * overwrites its buffer at once, then receives from the left. */
static void *ring_rank(void *p) {
  rank_arg *a = p;
  fg_comm *c = a->c;
  fg_status *st = fg_status_new();
  static const fg_dtype dts[] = {FG_F32, FG_F64, FG_I32, FG_I64};
  int right = (c->rank + 1) % c->size, left = (c->rank + c->size - 1) % c->size;
  for (int d = 0; d < 4 && !a->failed; d++) {
    size_t es = fg_dtype_size(dts[d]);
    const int64_t counts[] = {0, 1, 1000, (int64_t)(3 << 20) / (int64_t)es};
    for (int k = 0; k < 4 && !a->failed; k++) {
      int64_t n = counts[k];
      int tag = d * 4 + k;
      unsigned char *out = malloc((size_t)n * es + 1), *in = malloc((size_t)n * es + 1);
      p2p_fill(dts[d], out, c->rank, right, tag, n);
      if (c->ops->send(c, out, n * (int64_t)es, right, tag, st) != 0) record(a, st);
      /* send returned: the buffer is the caller's again. */
      memset(out, 0x5A, (size_t)n * es);
      if (!a->failed && c->ops->recv(c, in, n * (int64_t)es, left, tag, st) != 0) record(a, st);
      if (!a->failed && p2p_mismatch(dts[d], in, left, c->rank, tag, n) >= 0) a->bad++;
      free(out);
      free(in);
    }
  }
  fg_status_free(st);
  return NULL;
}

FG_TEST(comm_p2p_inproc_ring, "dist") {
  enum { R = 4 };
  fg_comm *h[R];
  FG_REQUIRE(fg_comm_inproc_group(R, 20, h, NULL) == 0);
  pthread_t th[R];
  rank_arg args[R];
  for (int r = 0; r < R; r++) {
    args[r] = (rank_arg){.c = h[r]};
    pthread_create(&th[r], NULL, ring_rank, &args[r]);
  }
  for (int r = 0; r < R; r++)
    pthread_join(th[r], NULL);
  for (int r = 0; r < R; r++) {
    if (args[r].failed) FG_FAIL_AT("rank %d: %s", r, args[r].err);
    FG_CHECK_INT(args[r].bad, 0);
  }
  for (int r = 0; r < R; r++)
    h[r]->ops->free(h[r]);
}

/* role 0: send right, recv from right; 1: recv from left, send left;
 * 2: all_reduce (p2p_duplex_step). */
static void *duplex(void *p) {
  rank_arg *a = p;
  fg_status *st = fg_status_new();
  double *buf = malloc((size_t)P2P_BIG * sizeof *buf);
  float ar[1000];
  for (int it = 0; it < a->iters && !a->failed; it++)
    if (p2p_duplex_step(a->c, a->role, it, buf, ar, 1000, &a->bad, st) != 0) record(a, st);
  free(buf);
  fg_status_free(st);
  return NULL;
}

/* Two threads per rank move 8 MB both ways while a third reduces. */
FG_TEST(comm_p2p_inproc_two_threads_per_rank, "dist") {
  enum { R = 2, T = 3 };
  fg_comm *h[R];
  FG_REQUIRE(fg_comm_inproc_group(R, 20, h, NULL) == 0);
  pthread_t th[R * T];
  rank_arg args[R * T];
  for (int i = 0; i < R * T; i++) {
    args[i] = (rank_arg){.c = h[i / T], .role = i % T, .iters = 4};
    pthread_create(&th[i], NULL, duplex, &args[i]);
  }
  for (int i = 0; i < R * T; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < R * T; i++) {
    if (args[i].failed) FG_FAIL_AT("rank %d thread %d: %s", i / T, i % T, args[i].err);
    FG_CHECK_INT(args[i].bad, 0);
  }
  for (int r = 0; r < R; r++)
    h[r]->ops->free(h[r]);
}

FG_TEST(comm_p2p_inproc_wrong_size_names_both, "dist,badinput") {
  fg_comm *h[2];
  FG_REQUIRE(fg_comm_inproc_group(2, 5, h, NULL) == 0);
  fg_status *st = fg_status_new();
  unsigned char msg[1000];
  double small[3], got[3] = {0};
  for (int i = 0; i < 1000; i++)
    msg[i] = (unsigned char)(i * 13 + 5);
  p2p_fill(FG_F64, small, 0, 1, 77, 3);
  FG_CHECK_INT(h[0]->ops->send(h[0], msg, 1000, 1, 7, st), 0);
  FG_CHECK_INT(h[0]->ops->send(h[0], small, (int64_t)sizeof small, 1, 7, st), 0);
  FG_CHECK_INT(h[1]->ops->recv(h[1], msg, 800, 0, 7, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "rank 1: recv from rank 0 tag 7: expected 800 bytes, the message has 1000");
  /* The refused message is gone; the next one of (0 -> 1, tag 7) follows. */
  FG_CHECK_INT(h[1]->ops->recv(h[1], got, (int64_t)sizeof got, 0, 7, st), 0);
  FG_CHECK(p2p_mismatch(FG_F64, got, 0, 1, 77, 3) < 0);
  /* Tags and directions are separate mailboxes: the older message under
   * tag 8 does not block the one under tag 9. */
  double x = 1.5, y = -2.25, r = 0;
  FG_CHECK_INT(h[0]->ops->send(h[0], &x, 8, 1, 8, st), 0);
  FG_CHECK_INT(h[0]->ops->send(h[0], &y, 8, 1, 9, st), 0);
  FG_CHECK_INT(h[1]->ops->recv(h[1], &r, 8, 0, 9, st), 0);
  FG_CHECK(r == -2.25);
  FG_CHECK_INT(h[1]->ops->recv(h[1], &r, 8, 0, 8, st), 0);
  FG_CHECK(r == 1.5);
  fg_status_free(st);
  for (int i = 0; i < 2; i++)
    h[i]->ops->free(h[i]);
}

FG_TEST(comm_p2p_inproc_bad_arguments, "dist,badinput") {
  fg_comm *h[3];
  FG_REQUIRE(fg_comm_inproc_group(3, 5, h, NULL) == 0);
  fg_status *st = fg_status_new();
  char b[8] = {0};
  struct {
    int send, peer, tag;
    int64_t bytes;
    int null_buf;
    const char *msg;
  } cases[] = {
      {1, 3, 0, 8, 0,
       "in-process send on rank 1: peer rank 3 is not another rank of the group (ranks 0 to 2, "
       "this one is 1)"},
      {0, -1, 0, 8, 0, "in-process recv on rank 1: peer rank -1 is not another rank"},
      {1, 1, 0, 8, 0, "in-process send on rank 1: peer rank 1 is not another rank"},
      {0, 2, -1, 8, 0, "in-process recv on rank 1 (peer 2): tag -1 is negative"},
      {1, 0, 4, -1, 0, "in-process send on rank 1 (peer 0, tag 4): -1 bytes is negative"},
      {0, 0, 4, 8, 1, "in-process recv on rank 1 (peer 0, tag 4): buffer is NULL for 8 bytes"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    void *buf = cases[i].null_buf ? NULL : b;
    int rc = cases[i].send
                 ? h[1]->ops->send(h[1], buf, cases[i].bytes, cases[i].peer, cases[i].tag, st)
                 : h[1]->ops->recv(h[1], buf, cases[i].bytes, cases[i].peer, cases[i].tag, st);
    FG_CHECK_INT(rc, -1);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), cases[i].msg);
  }
  /* A 0-byte message with a NULL buffer is fine. */
  FG_CHECK_INT(h[1]->ops->send(h[1], NULL, 0, 2, 1, st), 0);
  FG_CHECK_INT(h[2]->ops->recv(h[2], NULL, 0, 1, 1, st), 0);
  fg_status_free(st);
  for (int i = 0; i < 3; i++)
    h[i]->ops->free(h[i]);
  /* A group of one has no peer. */
  fg_comm *one[1];
  FG_REQUIRE(fg_comm_inproc_group(1, 5, one, NULL) == 0);
  st = fg_status_new();
  FG_CHECK_INT(one[0]->ops->send(one[0], b, 8, 0, 0, st), -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "peer rank 0 is not another rank of the group");
  fg_status_free(st);
  one[0]->ops->free(one[0]);
}

typedef struct recv_arg {
  fg_comm *c;
  int peer, tag, rc;
  fg_code code;
  double waited;
  char msg[512];
} recv_arg;

static void *blocked_recv(void *p) {
  recv_arg *a = p;
  fg_status *st = fg_status_new();
  char buf[64];
  double t0 = comm_now_s();
  a->rc = a->c->ops->recv(a->c, buf, 64, a->peer, a->tag, st);
  a->waited = comm_now_s() - t0;
  a->code = fg_status_code(st);
  snprintf(a->msg, sizeof a->msg, "%s", fg_status_message(st));
  fg_status_free(st);
  return NULL;
}

/* Rank 1 never sends: rank 0's recv gives a deadline after the group's
 * timeout, naming the peer and tag, and the group is broken after it. */
FG_TEST(comm_p2p_inproc_recv_deadline, "dist,badinput") {
  fg_comm *h[2];
  const double timeout = 0.5;
  FG_REQUIRE(fg_comm_inproc_group(2, timeout, h, NULL) == 0);
  recv_arg a = {h[0], 1, 5, 0, FG_OK, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, blocked_recv, &a);
  pthread_join(t, NULL);
  FG_CHECK_INT(a.rc, -1);
  FG_CHECK_INT(a.code, FG_DEADLINE_EXCEEDED);
  FG_CHECK_STR_CONTAINS(a.msg, "in-process recv from rank 1 tag 5 (64 bytes) on rank 0 of 2: "
                               "waited ");
  FG_CHECK_STR_CONTAINS(a.msg, "(timeout 0.5 s)");
  FG_CHECK(a.waited >= timeout - 0.01);
  FG_CHECK(a.waited < timeout + 2.0);
  /* Like a collective's timeout, it breaks the group for the others. */
  fg_status *st = fg_status_new();
  char b[8] = {0};
  FG_CHECK_INT(h[1]->ops->send(h[1], b, 8, 0, 6, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_DEADLINE_EXCEEDED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "group aborted (rank 0 timed out in recv from rank 1 tag 5)");
  fg_status_free(st);
  for (int i = 0; i < 2; i++)
    h[i]->ops->free(h[i]);
}

/* fg_comm_inproc_abort wakes a recv blocked with a long timeout at once;
 * fg_comm_inproc_reset then drops the messages of the failed run. */
FG_TEST(comm_p2p_inproc_abort_wakes_recv, "dist,badinput") {
  fg_comm *h[3];
  FG_REQUIRE(fg_comm_inproc_group(3, 30, h, NULL) == 0);
  recv_arg a = {h[2], 0, 9, 0, FG_OK, 0, ""};
  pthread_t t;
  pthread_create(&t, NULL, blocked_recv, &a);
  struct timespec ts = {0, 200000000};
  nanosleep(&ts, NULL);
  double t0 = comm_now_s();
  fg_comm_inproc_abort(h[1], "rank 1 failed a step");
  pthread_join(t, NULL);
  double woke = comm_now_s() - t0;
  FG_CHECK_INT(a.rc, -1);
  FG_CHECK_INT(a.code, FG_ABORTED);
  FG_CHECK_STR_CONTAINS(a.msg, "in-process recv from rank 0 tag 9 on rank 2: group aborted (rank 1 "
                               "failed a step)");
  FG_CHECK(a.waited >= 0.15);
  FG_CHECK(woke < 2.0); /* not the 30 s timeout */
  /* A message sent before the reset must not reach the next run. */
  fg_comm_inproc_reset(h[0]);
  fg_status *st = fg_status_new();
  double x = 4, y = 0;
  FG_CHECK_INT(h[0]->ops->send(h[0], &x, 8, 1, 3, st), 0);
  fg_comm_inproc_reset(h[0]);
  x = 5;
  FG_CHECK_INT(h[0]->ops->send(h[0], &x, 8, 1, 3, st), 0);
  FG_CHECK_INT(h[1]->ops->recv(h[1], &y, 8, 0, 3, st), 0);
  FG_CHECK(y == 5);
  fg_status_free(st);
  for (int i = 0; i < 3; i++)
    h[i]->ops->free(h[i]);
}

/* Bytes the allocator has handed out and not got back: the sanitizer's
 * own count under ASan or TSan (their allocator replaces glibc's), else
 * glibc's arena and mmap totals. */
static size_t heap_in_use(void) {
#if FGT_SANITIZER_ALLOCATOR
  return __sanitizer_get_current_allocated_bytes();
#else
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
#endif
}

/* Messages left unreceived are freed with the group: the heap grows by at
 * least their 640 KB while they wait and is back within 16 KB (the
 * allocator's per-thread caches) of where it started once both ranks are
 * freed. The leak check of the sanitizer builds says the same. */
FG_TEST(comm_p2p_inproc_unreceived_freed, "dist") {
  enum { MSGS = 10, BYTES = 64 * 1024 };
  char *b = calloc(1, BYTES);
  FG_REQUIRE(b != NULL);
  const size_t before = heap_in_use();
  fg_comm *h[2];
  FG_REQUIRE(fg_comm_inproc_group(2, 5, h, NULL) == 0);
  for (int i = 0; i < MSGS; i++)
    FG_CHECK_INT(h[0]->ops->send(h[0], b, BYTES, 1, i, NULL), 0);
  const size_t queued = heap_in_use();
  FG_CHECK(queued >= before + (size_t)MSGS * BYTES);
  h[0]->ops->free(h[0]);
  h[1]->ops->free(h[1]);
  const size_t after = heap_in_use();
  if (after > before + 16 * 1024)
    FG_FAIL_AT("%zu bytes still allocated after the group was freed", after - before);
  free(b);
}
