/* The shared-memory all_reduce (dist/comm/shm_reduce.c) that MPI ranks on one
 * host use (label dist). Threads stand in for the processes: each attaches
 * the segment itself, so each has its own mapping of it, as a process
 * would. Expected values come from test_comm_util.h's plain loop over every
 * rank's data in rank order, never from the code under test; the MPI runs
 * are in test_mpi.c. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm/shm_arena.h"
#include "dist/comm/shm_reduce.h"
#include "fgtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/sgd.h"
#include "test_comm_util.h"

enum { MAX_RANKS = 4 };

static void seg_name(char *buf, size_t size, const char *what) {
  static int serial;
  snprintf(buf, size, "/fg-test-%d-%s-%d", (int)getpid(), what, ++serial);
}

typedef struct rank_run {
  const char *name;
  int rank, n;
  size_t chunk;
  double timeout;
  int (*body)(struct rank_run *r, fg_shm_reduce *s, fg_status *st);
  /* Results. */
  int checks, wrong, attach_failed;
  fg_code code;
  char msg[600];
  double seconds;
} rank_run;

static void *rank_thread(void *p) {
  rank_run *r = p;
  fg_status *st = fg_status_new();
  fg_shm_reduce *s = fg_shm_reduce_attach(r->name, r->rank, r->n, r->chunk, st);
  if (!s) {
    r->attach_failed = 1;
    snprintf(r->msg, sizeof r->msg, "%s", fg_status_message(st));
  } else {
    double t0 = comm_now_s();
    if (r->body(r, s, st) != 0) {
      r->code = fg_status_code(st);
      snprintf(r->msg, sizeof r->msg, "%s", fg_status_message(st));
    }
    r->seconds = comm_now_s() - t0;
  }
  fg_shm_reduce_free(s);
  fg_status_free(st);
  return NULL;
}

/* Creates the segment, runs `body` on ranks 0 .. n-1 except `absent`, and
 * unlinks it. */
static void run_ranks(rank_run *runs, int n, size_t chunk, double timeout, int absent,
                      int (*body)(rank_run *, fg_shm_reduce *, fg_status *)) {
  char name[96];
  seg_name(name, sizeof name, "run");
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_shm_reduce_create(name, n, chunk, st) == 0);
  pthread_t th[MAX_RANKS];
  for (int r = 0; r < n; r++) {
    runs[r] = (rank_run){
        .name = name, .rank = r, .n = n, .chunk = chunk, .timeout = timeout, .body = body};
    if (r != absent) FG_REQUIRE(pthread_create(&th[r], NULL, rank_thread, &runs[r]) == 0);
  }
  for (int r = 0; r < n; r++)
    if (r != absent) pthread_join(th[r], NULL);
  fg_shm_reduce_unlink(name);
  fg_status_free(st);
}

/* Every rank of n attached, ran `checks` checks, none wrong, no error. */
static void check_all_right(const rank_run *runs, int n, int checks) {
  for (int r = 0; r < n; r++) {
    FG_CHECK(!runs[r].attach_failed);
    FG_CHECK_INT(runs[r].code, FG_OK);
    FG_CHECK_INT(runs[r].checks, checks);
    FG_CHECK_INT(runs[r].wrong, 0);
    if (runs[r].code != FG_OK || runs[r].wrong)
      fprintf(stderr, "n %d rank %d: %d wrong: %s\n", n, r, runs[r].wrong, runs[r].msg);
  }
}

/* `body` on n ranks with 4 KiB slots and a 20 s timeout: all right. */
static void run_and_check(int n, int (*body)(rank_run *, fg_shm_reduce *, fg_status *),
                          int checks) {
  rank_run runs[MAX_RANKS];
  run_ranks(runs, n, 4096, 20, -1, body);
  check_all_right(runs, n, checks);
}

static int reduce(rank_run *r, fg_shm_reduce *s, void *buf, int64_t count, fg_dtype dt, int mean,
                  fg_status *st) {
  fg_shm_wait w = {r->timeout, NULL, NULL};
  return fg_shm_all_reduce(s, buf, count, dt, mean, "all_reduce (test)", &w, st);
}

/* 4 dtypes x 7 counts x sum/mean against the rank-order reference. */
static int sweep(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  static const fg_dtype dts[] = {FG_F32, FG_F64, FG_I32, FG_I64};
  /* With 4 KiB slots: 1024 f32 or 512 f64 per chunk, so 1025, 3000 and
   * 10007 cross chunks, and 2 leaves some ranks an empty slice. */
  const int64_t counts[] = {1, 2, 3, 1024, 1025, 3000, 10007};
  for (size_t d = 0; d < 4; d++)
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
      for (int mean = 0; mean < 2; mean++) {
        size_t es = fg_dtype_size(dts[d]);
        unsigned char *buf = malloc((size_t)counts[k] * es), *want = malloc((size_t)counts[k] * es);
        reduce_fill(dts[d], buf, r->rank, counts[k]);
        reduce_expected(dts[d], want, r->n, counts[k], mean);
        int rc = reduce(r, s, buf, counts[k], dts[d], mean, st);
        r->checks++;
        if (rc == 0 && memcmp(buf, want, (size_t)counts[k] * es) != 0) r->wrong++;
        free(buf);
        free(want);
        if (rc != 0) return -1;
      }
  return 0;
}

FG_TEST(shm_all_reduce_matches_rank_order_sum, "dist") {
  for (int n = 1; n <= 4; n++)
    run_and_check(n, sweep, 56);
}

/* In place (fg_shm_reduce_set_in_place): the sweep's dtypes, counts and
 * means again, each buffer at an odd offset in an arena of its own, so
 * every collective maps new arenas (more than the 3 kept per rank). Those
 * over the small path's 16 KiB go in place, the others through the slots;
 * all match the rank-order reference. Then a rank with a heap buffer:
 * every rank takes the slots, still right. Then one arena for all the
 * collectives (the mapping kept). */
static int in_place(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  static const fg_dtype dts[] = {FG_F32, FG_F64, FG_I32, FG_I64};
  const int64_t counts[] = {1, 2, 1025, 3000, 10007};
  fg_shm_reduce_set_in_place(s, 1);
  int expect_in_place = 0;
  unsigned char *kept = NULL;
  for (int pass = 0; pass < 3; pass++) {
    for (size_t d = 0; d < 4; d++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        for (int mean = 0; mean < 2; mean++) {
          size_t es = fg_dtype_size(dts[d]), bytes = (size_t)counts[k] * es;
          /* Pass 1: rank 1's buffer is on the heap. Pass 2: one arena. */
          int heap = pass == 1 && r->rank == 1;
          unsigned char *arena = heap        ? malloc(bytes + 64)
                                 : pass == 2 ? (kept ? kept : (kept = fg_shm_arena_alloc(1 << 20)))
                                             : fg_shm_arena_alloc(bytes + 64);
          if (!arena) return -1;
          unsigned char *buf = arena + 8 * es, *want = malloc(bytes);
          reduce_fill(dts[d], buf, r->rank, counts[k]);
          reduce_expected(dts[d], want, r->n, counts[k], mean);
          uint64_t before = fg_shm_reduce_in_place_count(s);
          int rc = reduce(r, s, buf, counts[k], dts[d], mean, st);
          /* Not the small path: over the 4 KiB slot, or n copies over 16 KiB. */
          int big = bytes > 4096 || bytes * (size_t)r->n > 16384;
          int went = fg_shm_reduce_in_place_count(s) > before;
          r->checks++;
          if (rc == 0 && (memcmp(buf, want, bytes) != 0 || went != (big && pass != 1))) r->wrong++;
          expect_in_place += big && pass != 1;
          if (heap)
            free(arena);
          else if (pass != 2)
            fg_shm_arena_free(arena);
          free(want);
          if (rc != 0) return -1;
        }
  }
  fg_shm_arena_free(kept);
  return fg_shm_reduce_in_place_count(s) == (uint64_t)expect_in_place ? 0 : -1;
}

FG_TEST(shm_in_place_reads_arena_buffers, "dist") {
  for (int n = 2; n <= 4; n++)
    run_and_check(n, in_place, 3 * 40);
}

/* A mismatch still refuses before anything moves, on every rank, in place
 * or not, and the next collective is right. */
static int in_place_mismatch(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  fg_shm_reduce_set_in_place(s, 1);
  double *a = fg_shm_arena_alloc(8 * 10000);
  if (!a) return -1;
  int64_t count = r->rank == 0 ? 9000 : 10000;
  reduce_fill(FG_F64, a, r->rank, count);
  int rc = reduce(r, s, a, count, FG_F64, 0, st);
  r->checks++;
  if (rc == 0 || fg_status_code(st) != FG_INVALID_ARGUMENT ||
      !strstr(fg_status_message(st), "every rank must reduce the same tensor"))
    r->wrong++;
  double want[10000];
  reduce_fill(FG_F64, a, r->rank, 10000);
  reduce_expected(FG_F64, want, r->n, 10000, 0);
  rc = reduce(r, s, a, 10000, FG_F64, 0, st);
  r->checks++;
  if (rc != 0 || memcmp(a, want, sizeof want) != 0 || fg_shm_reduce_in_place_count(s) != 1)
    r->wrong++;
  fg_shm_arena_free(a);
  return 0;
}

FG_TEST(shm_in_place_count_mismatch_refused, "dist,badinput") {
  run_and_check(3, in_place_mismatch, 2);
}

/* The arenas themselves: find names the arena and offset of bytes inside
 * one and nothing else; a second mapping shares the bytes; a reference
 * whose serial or size is not the arena's, or whose arena was freed, maps
 * nothing. */
FG_TEST(shm_arena_refs_checked, "dist,badinput") {
  unsigned char *a = fg_shm_arena_alloc(10000), *b = fg_shm_arena_alloc(64);
  FG_REQUIRE(a && b);
  fg_shm_arena_ref ref, rb;
  FG_CHECK(fg_shm_arena_find(a + 100, 9900, &ref) == 1);
  FG_CHECK_INT(ref.pid, (int)getpid());
  FG_CHECK(ref.size == 10000 && ref.offset == 100);
  FG_CHECK(fg_shm_arena_find(a + 100, 9901, &rb) == 0); /* past the end */
  FG_CHECK_INT(rb.pid, 0);
  FG_CHECK(fg_shm_arena_find(b, 64, &rb) == 1 && rb.serial != ref.serial);
  int on_stack = 0;
  FG_CHECK(fg_shm_arena_find(&on_stack, sizeof on_stack, &rb) == 0);
  unsigned char *m = fg_shm_arena_map(&ref);
  FG_REQUIRE(m != NULL);
  a[100] = 42;
  FG_CHECK_INT(m[100], 42);
  m[200] = 7;
  FG_CHECK_INT(a[200], 7);
  fg_shm_arena_unmap(m, ref.size);
  fg_shm_arena_ref bad = ref;
  bad.serial = ref.serial + 1000;
  FG_CHECK(fg_shm_arena_map(&bad) == NULL);
  bad = ref;
  bad.size = 20000; /* more than the file holds */
  FG_CHECK(fg_shm_arena_map(&bad) == NULL);
  bad = ref;
  bad.pid = 0;
  FG_CHECK(fg_shm_arena_map(&bad) == NULL);
  FG_CHECK(fg_shm_arena_map(NULL) == NULL);
  fg_shm_arena_free(a);
  FG_CHECK(fg_shm_arena_map(&ref) == NULL); /* its descriptor is closed */
  FG_CHECK(fg_shm_arena_find(b, 64, &rb) == 1);
  fg_shm_arena_free(b);
  /* The fallback's heap memory goes back through the same call. */
  void *h = fg_shm_arena_alloc_host(100);
  FG_CHECK(h != NULL && ((uintptr_t)h & 63) == 0);
  fg_shm_arena_free(h);
  fg_shm_arena_free(NULL);
}

/* At most 64 arenas at once (each holds a descriptor open); past that,
 * fg_shm_arena_alloc says no and the host allocator falls back to the
 * heap, which no peer can map. Freeing one makes room again. */
FG_TEST(shm_arena_count_bounded, "dist,badinput") {
  void *a[65];
  int n = 0;
  while (n < 65 && (a[n] = fg_shm_arena_alloc(4096)) != NULL)
    n++;
  FG_CHECK_INT(n, 64);
  void *h = fg_shm_arena_alloc_host(4096);
  fg_shm_arena_ref ref;
  FG_CHECK(h != NULL && fg_shm_arena_find(h, 4096, &ref) == 0);
  fg_shm_arena_free(h);
  fg_shm_arena_free(a[0]);
  a[0] = fg_shm_arena_alloc(4096);
  FG_CHECK(a[0] != NULL && fg_shm_arena_find(a[0], 4096, &ref) == 1);
  for (int k = 0; k < n; k++)
    fg_shm_arena_free(a[k]);
}

/* The default slot (128 KiB) with a buffer of 3.5 slots. */
static int large(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  const int64_t count = 7 * (int64_t)FG_SHM_DEFAULT_CHUNK / 8; /* f64: 3.5 slots */
  double *buf = malloc((size_t)count * sizeof *buf), *want = malloc((size_t)count * sizeof *want);
  reduce_fill(FG_F64, buf, r->rank, count);
  reduce_expected(FG_F64, want, r->n, count, 1);
  int rc = reduce(r, s, buf, count, FG_F64, 1, st);
  r->checks++;
  if (rc == 0 && memcmp(buf, want, (size_t)count * sizeof *buf) != 0) r->wrong++;
  free(buf);
  free(want);
  return rc;
}

FG_TEST(shm_all_reduce_default_slots, "dist") {
  rank_run runs[3];
  run_ranks(runs, 3, 0, 20, -1, large);
  for (int r = 0; r < 3; r++) {
    FG_CHECK_INT(runs[r].code, FG_OK);
    FG_CHECK_INT(runs[r].checks, 1);
    FG_CHECK_INT(runs[r].wrong, 0);
  }
}

/* The mean over 2 and 4 ranks multiplies by the exact reciprocal instead of
 * dividing: the same bits as a division for subnormal sums, sums that
 * overflow to infinity, negative zero and values that round. */
static const float edge_f32[] = {1e-40f, -3e-42f, 3e38f, -0.0f, 1.0f / 3.0f, 7.0e-39f, 1e-45f};

static int edges(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  enum { K = sizeof edge_f32 / sizeof edge_f32[0] };
  float buf[K], want[K];
  double dbuf[K], dwant[K];
  for (int i = 0; i < K; i++) {
    buf[i] = edge_f32[i] * (float)(r->rank + 1);
    dbuf[i] = (double)edge_f32[i] * 1e-270 * (r->rank + 1); /* subnormal doubles */
  }
  for (int i = 0; i < K; i++) {
    float sum = 0;
    double dsum = 0;
    for (int p = 0; p < r->n; p++) {
      sum = p ? sum + edge_f32[i] * (float)(p + 1) : edge_f32[i] * (float)(p + 1);
      dsum = p ? dsum + (double)edge_f32[i] * 1e-270 * (p + 1) : (double)edge_f32[i] * 1e-270;
    }
    want[i] = sum / (float)r->n;
    dwant[i] = dsum / (double)r->n;
  }
  if (reduce(r, s, buf, K, FG_F32, 1, st) != 0 || reduce(r, s, dbuf, K, FG_F64, 1, st) != 0)
    return -1;
  r->checks += 2;
  r->wrong += memcmp(buf, want, sizeof buf) != 0;
  r->wrong += memcmp(dbuf, dwant, sizeof dbuf) != 0;
  return 0;
}

FG_TEST(shm_mean_of_power_of_two_ranks_is_a_division, "dist") {
  for (int n = 2; n <= 4; n++) {
    rank_run runs[MAX_RANKS];
    run_ranks(runs, n, 4096, 20, -1, edges);
    for (int r = 0; r < n; r++) {
      FG_CHECK_INT(runs[r].code, FG_OK);
      FG_CHECK_INT(runs[r].checks, 2);
      FG_CHECK_INT(runs[r].wrong, 0);
    }
  }
}

/* Rank 0 reduces 5 elements, rank 1 6: both refused naming both; then a
 * 3-element reduction is right on both (the group stays in step). */
static int mismatch(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  double buf[6], want[3];
  reduce_fill(FG_F64, buf, r->rank, 6);
  if (reduce(r, s, buf, r->rank == 0 ? 5 : 6, FG_F64, 0, st) == 0) return 0; /* checks == 0 */
  snprintf(r->msg, sizeof r->msg, "%s", fg_status_message(st));
  r->code = fg_status_code(st);
  reduce_fill(FG_F64, buf, r->rank, 3);
  reduce_expected(FG_F64, want, r->n, 3, 0);
  fg_status *st2 = fg_status_new();
  int rc = reduce(r, s, buf, 3, FG_F64, 0, st2);
  r->checks++;
  r->wrong += rc != 0 || memcmp(buf, want, sizeof want) != 0;
  fg_status_free(st2);
  return 0;
}

/* An empty tensor against one of 3 elements (a batch of 0 rows on one
 * replica): both refused at once, naming 0 and 3; then a right sum. */
static int empty_vs_three(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  double buf[3], want[3];
  int rc = reduce(r, s, r->rank == 0 ? NULL : buf, r->rank == 0 ? 0 : 3, FG_F64, 1, st);
  if (rc == 0) return 0; /* checks == 0 */
  snprintf(r->msg, sizeof r->msg, "%s", fg_status_message(st));
  r->code = fg_status_code(st);
  reduce_fill(FG_F64, buf, r->rank, 3);
  reduce_expected(FG_F64, want, r->n, 3, 1);
  fg_status *st2 = fg_status_new();
  rc = reduce(r, s, buf, 3, FG_F64, 1, st2);
  r->checks++;
  r->wrong += rc != 0 || memcmp(buf, want, sizeof want) != 0;
  fg_status_free(st2);
  return 0;
}

FG_TEST(shm_all_reduce_empty_against_elements_refused, "dist,badinput") {
  rank_run runs[2];
  run_ranks(runs, 2, 4096, 20, -1, empty_vs_three);
  for (int r = 0; r < 2; r++) {
    FG_CHECK_INT(runs[r].code, FG_INVALID_ARGUMENT);
    FG_CHECK(runs[r].seconds < 5.0);
    FG_CHECK_INT(runs[r].checks, 1);
    FG_CHECK_INT(runs[r].wrong, 0);
  }
  FG_CHECK_STR_CONTAINS(runs[0].msg, "rank 0 has 0 elements of f64, rank 1 has 3 of f64");
  FG_CHECK_STR_CONTAINS(runs[1].msg, "rank 1 has 3 elements of f64, rank 0 has 0 of f64");
}

FG_TEST(shm_all_reduce_count_mismatch_refused, "dist,badinput") {
  rank_run runs[2];
  run_ranks(runs, 2, 4096, 20, -1, mismatch);
  FG_CHECK_INT(runs[0].code, FG_INVALID_ARGUMENT);
  FG_CHECK_INT(runs[1].code, FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(runs[0].msg, "all_reduce (test) on rank 0 of 2: rank 0 has 5 elements of "
                                     "f64, rank 1 has 6 of f64; every rank must reduce the same "
                                     "tensor");
  FG_CHECK_STR_CONTAINS(runs[1].msg, "rank 1 has 6 elements of f64, rank 0 has 5 of f64");
  for (int r = 0; r < 2; r++) {
    FG_CHECK_INT(runs[r].checks, 1);
    FG_CHECK_INT(runs[r].wrong, 0);
  }
}

/* 300 collectives that mix the one-barrier path for small buffers (up to
 * 16 KiB over all ranks) with chunked ones, and every 7th a mismatch where
 * rank 0 has one element more, so it may take the other path than the
 * rest. Every refusal must come on every rank, and every other sum must be
 * right: the slots and the count/dtype pairs alternate safely whatever
 * the neighbours' paths. */
static int interleave(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  /* With 4 KiB slots: 1, 3 and 1024 f32 fit one slot; 1025 and 5000 do
   * not (2 and 5 chunks); 512 f64 fills a slot. */
  static const int64_t counts[] = {1, 1025, 3, 1024, 5000, 512};
  unsigned char *buf = malloc(5001 * sizeof(double)), *want = malloc(5001 * sizeof(double));
  int i = 0;
  for (; i < 300; i++) {
    int64_t n = counts[i % 6];
    fg_dtype dt = n == 512 ? FG_F64 : FG_F32;
    int bad = i % 7 == 3;
    size_t es = fg_dtype_size(dt);
    /* Every round's data differs (rank p fills as rank 8i + p), so a
     * slot read a round late gives wrong bits. */
    reduce_fill(dt, buf, 8 * i + r->rank, n + 1);
    int rc = reduce(r, s, buf, n + (bad && r->rank == 0), dt, i & 1, st);
    r->checks++;
    if (bad) {
      r->wrong += rc == 0 || fg_status_code(st) != FG_INVALID_ARGUMENT;
      continue;
    }
    if (rc != 0) break;
    reduce_expected_from(dt, want, 8 * i, r->n, n, i & 1);
    r->wrong += memcmp(buf, want, (size_t)n * es) != 0;
  }
  free(buf);
  free(want);
  return i == 300 ? 0 : -1;
}

FG_TEST(shm_small_and_chunked_collectives_interleave, "dist,badinput") {
  for (int n = 2; n <= 4; n++)
    run_and_check(n, interleave, 300);
}

/* Rank r arrives 60 x r ms late at each of 3 all_reduces, so the others
 * wait past their spins and yields, asleep on the late rank's futex word,
 * and its arrival must wake them: every sum right, well within the 20 s
 * timeout (a missed wake-up would still end within 4 ms, so this checks
 * that sleeping loses nothing, not the wake-up's speed). */
static int late_ranks(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  double buf[37], want[37];
  for (int i = 0; i < 3; i++) {
    struct timespec ts = {0, 60000000L * r->rank};
    nanosleep(&ts, NULL);
    reduce_fill(FG_F64, buf, 8 * i + r->rank, 37);
    if (reduce(r, s, buf, 37, FG_F64, 1, st) != 0) return -1;
    reduce_expected_from(FG_F64, want, 8 * i, r->n, 37, 1);
    r->checks++;
    r->wrong += memcmp(buf, want, sizeof want) != 0;
  }
  return 0;
}

FG_TEST(shm_late_rank_wakes_sleepers, "dist") {
  rank_run runs[3];
  run_ranks(runs, 3, 4096, 20, -1, late_ranks);
  check_all_right(runs, 3, 3);
  for (int r = 0; r < 3; r++)
    FG_CHECK(runs[r].seconds < 10.0);
}

static int one_reduce(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  float buf[64] = {0};
  return reduce(r, s, buf, 64, FG_F32, 1, st);
}

/* A missing rank: rank 2 never comes; 0 and 1 give the deadline naming it, after the
 * 0.3 s timeout and well before 3 s. */
FG_TEST(shm_missing_rank_gives_deadline, "dist,badinput") {
  rank_run runs[3];
  run_ranks(runs, 3, 4096, 0.3, 2, one_reduce);
  for (int r = 0; r < 2; r++) {
    FG_CHECK_INT(runs[r].code, FG_DEADLINE_EXCEEDED);
    char want[160];
    snprintf(want, sizeof want, "all_reduce (test) on rank %d of 3: waited 0.", r);
    FG_CHECK_STR_CONTAINS(runs[r].msg, want);
    FG_CHECK_STR_CONTAINS(runs[r].msg, "(timeout 0.3 s) for rank(s) 2; a peer died or is stuck");
    FG_CHECK(runs[r].seconds >= 0.29 && runs[r].seconds < 3.0);
  }
}

/* The stop hook (the MPI communicator's abort probe) ends a wait at once. */
static int stop_calls;
static int stop_now(void *ctx, const char *desc, fg_status *st) {
  (void)ctx;
  if (++stop_calls < 3) return 0;
  fg_status_set(st, FG_ABORTED, "%s: stopped: rank 1 failed: test", desc);
  return 1;
}

static int stopped_reduce(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  float buf[8] = {0};
  fg_shm_wait w = {r->timeout, stop_now, NULL};
  return fg_shm_all_reduce(s, buf, 8, FG_F32, 0, "all_reduce (test)", &w, st);
}

FG_TEST(shm_stop_hook_ends_the_wait, "dist,badinput") {
  rank_run runs[2];
  stop_calls = 0;
  run_ranks(runs, 2, 4096, 30, 1, stopped_reduce);
  FG_CHECK_INT(runs[0].code, FG_ABORTED);
  FG_CHECK_STR_CONTAINS(runs[0].msg, "all_reduce (test): stopped: rank 1 failed: test");
  FG_CHECK(runs[0].seconds < 5.0);
  FG_CHECK_INT(stop_calls, 3);
}

FG_TEST(shm_bad_setup_refused, "dist,badinput") {
  fg_status *st = fg_status_new();
  char name[96], other[96];
  seg_name(name, sizeof name, "bad");
  seg_name(other, sizeof other, "never");
  /* Names and ranks. */
  FG_CHECK(fg_shm_reduce_create("no-slash", 2, 4096, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "segment \"no-slash\" for rank 0 of 2");
  FG_CHECK(fg_shm_reduce_create("/a/b", 2, 4096, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_shm_reduce_create(NULL, 2, 4096, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "segment \"(null)\"");
  FG_CHECK(fg_shm_reduce_create(name, 0, 4096, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "for rank 0 of 0");
  FG_CHECK(fg_shm_reduce_attach(name, 2, 2, 4096, st) == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "for rank 2 of 2");
  FG_CHECK(fg_shm_reduce_attach(name, -1, 2, 4096, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  /* A segment nobody created, one created twice, one of another size. */
  FG_CHECK(fg_shm_reduce_attach(other, 0, 2, 4096, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "shm_open(\"");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "No such file or directory");
  FG_REQUIRE(fg_shm_reduce_create(name, 2, 4096, st) == 0);
  FG_CHECK(fg_shm_reduce_create(name, 2, 4096, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "File exists");
  FG_CHECK(fg_shm_reduce_attach(name, 0, 2, 8192, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  /* Per rank a 64-byte header, two 64-byte lines of arena references
   * (buffers, and the variables of fg_shm_all_reduce_apply) and 2 slots:
   * 2 x (192 + 2 x 4096) = 16768 bytes; rank 0 expects
   * 2 x (192 + 2 x 8192) = 33152. */
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "has 16768 bytes, rank 0 expected 33152 (2 ranks, "
                                               "8192-byte slots)");
  FG_CHECK(fg_shm_reduce_attach(name, 0, 3, 4096, st) == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "has 16768 bytes, rank 0 expected 25152");
  /* Attached, then unlinked: the name is gone, the mapping stays usable. */
  fg_shm_reduce *s = fg_shm_reduce_attach(name, 0, 1, 4096 * 2 + 128, st);
  FG_CHECK(s == NULL); /* 1 rank of 128 + 2 x 8320 bytes: still the wrong size */
  s = fg_shm_reduce_attach(name, 1, 2, 4096, st);
  FG_REQUIRE(s != NULL);
  fg_shm_reduce_unlink(name);
  FG_CHECK(fg_shm_reduce_attach(name, 0, 2, 4096, st) == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "No such file or directory");
  /* Bad calls on a group: refused before any wait. */
  float f[4] = {1, 2, 3, 4};
  fg_shm_wait w = {0.2, NULL, NULL};
  FG_CHECK(fg_shm_all_reduce(NULL, f, 4, FG_F32, 0, "t", &w, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "no group over 4 elements of f32");
  FG_CHECK(fg_shm_all_reduce(s, f, 4, FG_BOOL, 0, "t", &w, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "elements of bool");
  FG_CHECK(fg_shm_all_reduce(s, f, -1, FG_F32, 0, "t", &w, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "-1 elements");
  FG_CHECK(fg_shm_all_reduce(s, NULL, 4, FG_F32, 0, "t", &w, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  /* Nothing to reduce still takes part: it waits for the absent rank 0
   * (its partners must learn the counts) and leaves the buffer alone. */
  FG_CHECK(fg_shm_all_reduce(s, NULL, 0, FG_F32, 0, "t", &w, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_DEADLINE_EXCEEDED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "for rank(s) 0;");
  FG_CHECK(f[0] == 1 && f[3] == 4);
  fg_shm_reduce_free(s);
  fg_shm_reduce_free(NULL);
  fg_status_free(st);
}

FG_TEST(shm_slot_sizes, "dist") {
  FG_CHECK_INT((long long)fg_shm_chunk_bytes(0), 131072);
  FG_CHECK_INT((long long)fg_shm_chunk_bytes(1), 4096);
  FG_CHECK_INT((long long)fg_shm_chunk_bytes(4097), 4160);
  FG_CHECK_INT((long long)fg_shm_chunk_bytes((size_t)1 << 40), 1073741824);
}

/* ---- the pieces of the path across hosts (dist/comm/comm_mpi.c) ------------ */

/* Slice p of n over count elements, written out here (the first count % n
 * slices get one more) rather than taken from dist/comm/rank_sum.h; a rank from
 * n on (not an owner) has none. */
static void slice_of(int64_t count, int n, int p, int64_t *start, int64_t *len) {
  int64_t q = count / n, extra = count % n;
  *start = p < n ? q * p + (p < extra ? p : extra) : 0;
  *len = p < n ? q + (p < extra ? 1 : 0) : 0;
}

/* The slice owners the tests try in a group of n: all (0), the first
 * rank alone, and all but the last. */
static int owners_of(int variant, int n) { return variant == 0 ? 0 : variant == 1 ? 1 : n - 1; }

/* fg_shm_all_gather_slices: each rank holds only its slice of "rank 99's"
 * data (the rest is junk of its own; a rank that owns no slice holds only
 * junk), and afterwards all of it, over every dtype, counts across chunks
 * and empty slices, and 3 choices of owners (owners_of). Pass 0 on the
 * heap (slots), pass 1 in arenas (in place), pass 2 with rank 1 on the
 * heap (every rank takes the slots). Each gather is followed by a small
 * all_reduce (one barrier), so the slot and header pairs alternate in every
 * order. */
static int gather_slices(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  static const fg_dtype dts[] = {FG_F32, FG_F64, FG_I32, FG_I64};
  const int64_t counts[] = {0, 1, 2, 1025, 3000, 10007};
  fg_shm_wait w = {r->timeout, NULL, NULL};
  for (int pass = 0; pass < 3 * 3; pass++) {
    const int owners = owners_of(pass / 3, r->n), all = owners ? owners : r->n;
    fg_shm_reduce_set_in_place(s, pass % 3 > 0);
    for (size_t d = 0; d < 4; d++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        size_t es = fg_dtype_size(dts[d]), bytes = (size_t)counts[k] * es;
        int heap = pass % 3 == 0 || (pass % 3 == 2 && r->rank == 1);
        unsigned char *buf = heap ? malloc(bytes + 8) : fg_shm_arena_alloc(bytes + 8),
                      *want = malloc(bytes + 8);
        if (!buf || !want) return -1;
        reduce_fill(dts[d], want, 99, counts[k]);
        memset(buf, 0xA0 + r->rank, bytes);
        int64_t start, len;
        slice_of(counts[k], all, r->rank, &start, &len);
        memcpy(buf + start * (int64_t)es, want + start * (int64_t)es, (size_t)len * es);
        uint64_t before = fg_shm_reduce_in_place_count(s);
        int rc = fg_shm_all_gather_slices(s, buf, counts[k], dts[d], owners, "all_gather (test)",
                                          &w, st);
        r->checks++;
        if (rc == 0 && (memcmp(buf, want, bytes) != 0 || fg_shm_reduce_in_place_count(s) != before))
          r->wrong++;
        heap ? free(buf) : fg_shm_arena_free(buf);
        free(want);
        double small[3], small_want[3];
        reduce_fill(FG_F64, small, r->rank, 3);
        reduce_expected(FG_F64, small_want, r->n, 3, 0);
        if (rc != 0 || reduce(r, s, small, 3, FG_F64, 0, st) != 0) return -1;
        r->checks++;
        if (memcmp(small, small_want, sizeof small) != 0) r->wrong++;
      }
  }
  return 0;
}

FG_TEST(shm_all_gather_slices_in_place_and_through_slots, "dist") {
  for (int n = 1; n <= 4; n++)
    run_and_check(n, gather_slices, 3 * 3 * 4 * 6 * 2);
}

/* A gather of slices with another count on rank 0 is refused on every
 * rank naming both, and the next one is right; bad arguments are refused
 * before any barrier. */
static int gather_refusals(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  fg_shm_wait w = {r->timeout, NULL, NULL};
  float buf[10] = {0};
  int rc = fg_shm_all_gather_slices(s, buf, r->rank == 0 ? 9 : 10, FG_F32, 0, "all_gather (test)",
                                    &w, st);
  char want[200];
  snprintf(want, sizeof want,
           "all_gather (test) on rank %d of %d: rank %d has %d elements of f32, rank %d has %d "
           "of f32; every rank must reduce the same tensor",
           r->rank, r->n, r->rank, r->rank == 0 ? 9 : 10, r->rank == 0 ? 1 : 0,
           r->rank == 0 ? 10 : 9);
  r->checks++;
  if (rc == 0 || fg_status_code(st) != FG_INVALID_ARGUMENT ||
      strcmp(fg_status_message(st), want) != 0)
    r->wrong++;
  r->checks++;
  if (fg_shm_all_gather_slices(s, buf, 10, FG_BOOL, 0, "g", &w, st) == 0 ||
      !strstr(fg_status_message(st), "shared-memory all_gather: a group over 10 elements of bool"))
    r->wrong++;
  /* Owners beyond the group, or negative, refused before any barrier. */
  char owners_msg[96];
  snprintf(owners_msg, sizeof owners_msg,
           "shared-memory all_gather: %d slice owners in a group of %d", r->n + 1, r->n);
  r->checks++;
  if (fg_shm_all_gather_slices(s, buf, 10, FG_F32, r->n + 1, "g", &w, st) == 0 ||
      strcmp(fg_status_message(st), owners_msg) != 0)
    r->wrong++;
  r->checks++;
  if (fg_shm_reduce_scatter(s, buf, 10, FG_F32, 0, -1, "g", &w, st) == 0 ||
      !strstr(fg_status_message(st), "shared-memory reduce_scatter: -1 slice owners in a group of"))
    r->wrong++;
  for (int i = 0; i < 10; i++)
    buf[i] = (float)(i * 3 + 1);
  int64_t start, len;
  slice_of(10, r->n, r->rank, &start, &len);
  for (int i = 0; i < 10; i++)
    if (i < start || i >= start + len) buf[i] = -1.0f;
  if (fg_shm_all_gather_slices(s, buf, 10, FG_F32, 0, "all_gather (test)", &w, st) != 0) return -1;
  for (int i = 0; i < 10; i++) {
    r->checks++;
    if (buf[i] != (float)(i * 3 + 1)) r->wrong++;
  }
  fg_status_clear(st);
  return 0;
}

FG_TEST(shm_all_gather_refusals, "dist,badinput") {
  rank_run runs[3];
  run_ranks(runs, 3, 4096, 20, -1, gather_refusals);
  check_all_right(runs, 3, 4 + 10);
}

/* The ranks of one host within a larger group (the MPI ranks 5, 7 and 9 of
 * 12): a deadline names them as the user knows them. */
static int named_reduce(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  static const int names[3] = {5, 7, 9};
  if (fg_shm_reduce_name_ranks(s, names, 12) != 0) return -1;
  return one_reduce(r, s, st);
}

FG_TEST(shm_errors_name_ranks_as_given, "dist,badinput") {
  rank_run runs[3];
  run_ranks(runs, 3, 4096, 0.3, 2, named_reduce);
  for (int r = 0; r < 2; r++) {
    FG_CHECK_INT(runs[r].code, FG_DEADLINE_EXCEEDED);
    char want[160];
    snprintf(want, sizeof want, "all_reduce (test) on rank %d of 12: waited 0.", r == 0 ? 5 : 7);
    FG_CHECK_STR_CONTAINS(runs[r].msg, want);
    FG_CHECK_STR_CONTAINS(runs[r].msg, "for rank(s) 9; a peer died or is stuck");
  }
  FG_CHECK(fg_shm_reduce_name_ranks(NULL, (const int[]){1}, 1) == -1);
}

/* fg_shm_reduce_scatter: owner p's slice p holds the rank-order sum (or
 * mean) of every rank's slice p, and the rest of its buffer is untouched
 * (all of it on a rank that owns none), except on the small path (n copies
 * within 16 KiB and one 4 KiB slot), where the whole buffer is summed. On
 * the heap (slots, one barrier per chunk) and in arenas (in place), for 3
 * choices of owners (owners_of), interleaved with all_reduces. */
static int scatter_sweep(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  static const fg_dtype dts[] = {FG_F32, FG_F64, FG_I32, FG_I64};
  const int64_t counts[] = {1, 2, 3, 1025, 3000, 10007};
  fg_shm_wait w = {r->timeout, NULL, NULL};
  for (int variant = 0; variant < 2 * 3; variant++) {
    const int pass = variant % 2, owners = owners_of(variant / 2, r->n);
    fg_shm_reduce_set_in_place(s, pass);
    for (size_t d = 0; d < 4; d++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        for (int mean = 0; mean < 2; mean++) {
          size_t es = fg_dtype_size(dts[d]), bytes = (size_t)counts[k] * es;
          unsigned char *buf = pass ? fg_shm_arena_alloc(bytes) : malloc(bytes),
                        *mine = malloc(bytes), *want = malloc(bytes);
          if (!buf || !mine || !want) return -1;
          reduce_fill(dts[d], buf, r->rank, counts[k]);
          memcpy(mine, buf, bytes);
          reduce_expected(dts[d], want, r->n, counts[k], mean);
          int rc = fg_shm_reduce_scatter(s, buf, counts[k], dts[d], mean, owners,
                                         "reduce_scatter (test)", &w, st);
          int64_t start, len;
          slice_of(counts[k], owners ? owners : r->n, r->rank, &start, &len);
          int small = bytes <= 4096 && bytes * (size_t)r->n <= 16384;
          r->checks++;
          if (rc == 0 && (memcmp(buf + start * (int64_t)es, want + start * (int64_t)es,
                                 (size_t)len * es) != 0 ||
                          (small ? memcmp(buf, want, bytes) != 0
                                 : memcmp(buf, mine, (size_t)start * es) != 0 ||
                                       memcmp(buf + (start + len) * (int64_t)es,
                                              mine + (start + len) * (int64_t)es,
                                              bytes - (size_t)(start + len) * es) != 0)))
            r->wrong++;
          pass ? fg_shm_arena_free(buf) : free(buf);
          free(mine);
          free(want);
          double one[3], one_want[3];
          reduce_fill(FG_F64, one, r->rank, 3);
          reduce_expected(FG_F64, one_want, r->n, 3, 1);
          if (rc != 0 || reduce(r, s, one, 3, FG_F64, 1, st) != 0) return -1;
          r->checks++;
          if (memcmp(one, one_want, sizeof one) != 0) r->wrong++;
        }
  }
  return 0;
}

FG_TEST(shm_reduce_scatter_sums_own_slice_only, "dist") {
  for (int n = 1; n <= 4; n++)
    run_and_check(n, scatter_sweep, 3 * 2 * 4 * 6 * 2 * 2);
}

/* ---- fg_shm_all_reduce_apply with the SGD update (the fused update) ----- */

/* The kernel's callbacks (kernels/cpu/collective.c does the same): the
 * SGD step of a reduced block into every rank's variable, and a slice's
 * GEMM from every rank's factors. */
typedef struct sgd_arg {
  double lr;
  int mean;
} sgd_arg;

static void sgd_block(void *arg, fg_dtype dt, void *const *dst, int n, const void *own,
                      const void *sum, int64_t len) {
  fgk_sgd_to(dt, dst, n, own, sum, len, ((const sgd_arg *)arg)->lr);
}

static void sgd_factors(void *arg, fg_dtype dt, int64_t ml, int64_t n, int64_t total,
                        const void *ga, const void *gb, void *own, int nranks) {
  const sgd_arg *p = arg;
  fgk_gemm_tn(NULL, dt, ml, n, total, p->mean ? -p->lr / nranks : -p->lr, ga, ml, gb, n, 1.0, own,
              n);
}

static int reduce_sgd(rank_run *r, fg_shm_reduce *s, void *var, const void *grad, int64_t count,
                      fg_dtype dt, int mean, double lr, fg_status *st) {
  fg_shm_wait w = {r->timeout, NULL, NULL};
  sgd_arg a = {lr, mean};
  return fg_shm_all_reduce_apply(s, var, grad, count, dt, mean, lr, "learning rate", sgd_block, &a,
                                 "all_reduce (test)", &w, st);
}

/* The same starting variable on every rank, as data parallelism keeps it. */
static void var_fill(fg_dtype dt, void *v, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    double x = 0.5 + 0.25 * (double)(i % 7) - 1e-3 * (double)(i % 11);
    if (dt == FG_F32)
      ((float *)v)[i] = (float)x;
    else
      ((double *)v)[i] = x;
  }
}

/* want = var - lr * (the rank-order reference of test_comm_util.h), in the
 * variable's dtype with lr rounded to it once, as torch.optim.SGD. */
static void sgd_expected(fg_dtype dt, void *want, int n, int64_t count, int mean, double lr) {
  size_t es = fg_dtype_size(dt);
  unsigned char *g = malloc((size_t)count * es + 1);
  reduce_expected(dt, g, n, count, mean);
  var_fill(dt, want, count);
  for (int64_t i = 0; i < count; i++) {
    if (dt == FG_F32)
      ((float *)want)[i] = ((float *)want)[i] - (float)lr * ((float *)g)[i];
    else
      ((double *)want)[i] = ((double *)want)[i] - lr * ((double *)g)[i];
  }
  free(g);
}

/* Over arenas (in place on): every rank's variable ends as var - lr *
 * mean (or sum) of the gradients, bit for bit the reference, for counts
 * that cross the 8 KiB blocks and leave ranks uneven slices. Counts of
 * the small path, and 0, return 1 and change nothing. Then rank 1's
 * variable on the heap: every rank gets 1, nothing changes, and the next
 * call over arenas still updates. */
static int sgd_in_place(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  static const fg_dtype dts[] = {FG_F32, FG_F64};
  const int64_t counts[] = {0, 3, 5000, 10007, 300001};
  fg_shm_reduce_set_in_place(s, 1);
  for (int pass = 0; pass < 2; pass++)
    for (size_t d = 0; d < 2; d++)
      for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
        for (int mean = 0; mean < 2; mean++) {
          const fg_dtype dt = dts[d];
          const int64_t count = counts[k];
          const size_t es = fg_dtype_size(dt), bytes = (size_t)count * es;
          const int heap = pass == 1 && r->rank == 1;
          unsigned char *ga = fg_shm_arena_alloc(bytes + 64),
                        *va = heap ? malloc(bytes + 64) : fg_shm_arena_alloc(bytes + 64),
                        *want = malloc(bytes + 1), *orig = malloc(bytes + 1);
          if (!ga || !va || !want || !orig) return -1;
          /* odd offsets: slices start anywhere */
          void *g = ga + 3 * es, *v = va + 5 * es;
          reduce_fill(dt, g, r->rank, count);
          var_fill(dt, v, count);
          var_fill(dt, orig, count);
          sgd_expected(dt, want, r->n, count, mean, 0.1);
          uint64_t before = fg_shm_reduce_in_place_count(s);
          int rc = reduce_sgd(r, s, v, g, count, dt, mean, 0.1, st);
          const int fused = pass == 0 && bytes * (size_t)r->n > 16384;
          r->checks++;
          if (rc != (fused ? 0 : 1) || memcmp(v, fused ? want : orig, bytes) != 0 ||
              fg_shm_reduce_in_place_count(s) != before + (uint64_t)fused)
            r->wrong++;
          fg_shm_arena_free(ga);
          if (heap)
            free(va);
          else
            fg_shm_arena_free(va);
          free(want);
          free(orig);
          if (rc < 0) return -1;
        }
  return 0;
}

FG_TEST(shm_all_reduce_sgd_updates_every_rank, "dist") {
  for (int n = 2; n <= 4; n++)
    run_and_check(n, sgd_in_place, 2 * 20);
}

/* Refusals: an i32 variable before any wait; counts, then learning rates,
 * that differ, refused on every rank alike, after which the group is
 * usable; in place off: 1. */
static int sgd_refusals(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  const int64_t count = 20000;
  float *g = fg_shm_arena_alloc(4 * count), *v = fg_shm_arena_alloc(4 * count);
  float *want = malloc(4 * count);
  if (!g || !v || !want) return -1;
  int rc = reduce_sgd(r, s, v, g, count, FG_I32, 1, 0.1, st);
  r->checks++;
  if (rc != -1 || fg_status_code(st) != FG_INVALID_ARGUMENT ||
      !strstr(fg_status_message(st), "elements of i32 (f32 or f64)"))
    r->wrong++;
  rc = reduce_sgd(r, s, v, g, count, FG_F32, 1, 0.1, st); /* in place is off */
  r->checks++;
  if (rc != 1) r->wrong++;
  fg_shm_reduce_set_in_place(s, 1);
  var_fill(FG_F32, v, count);
  rc = reduce_sgd(r, s, v, g, r->rank == 0 ? count - 1 : count, FG_F32, 1, 0.1, st);
  r->checks++;
  if (rc != -1 || fg_status_code(st) != FG_INVALID_ARGUMENT ||
      !strstr(fg_status_message(st), "every rank must reduce the same tensor"))
    r->wrong++;
  /* Learning rates that differ: refused on every rank, naming both. */
  rc = reduce_sgd(r, s, v, g, count, FG_F32, 1, r->rank == 1 ? 0.2 : 0.1, st);
  r->checks++;
  if (rc != -1 || fg_status_code(st) != FG_INVALID_ARGUMENT ||
      !strstr(fg_status_message(st), r->rank == 1 ? "rank 1 has learning rate 0.20000000000000001"
                                                  : "rank 1 has 0.20000000000000001"))
    r->wrong++;
  reduce_fill(FG_F32, g, r->rank, count);
  var_fill(FG_F32, v, count);
  sgd_expected(FG_F32, want, r->n, count, 1, 0.1);
  rc = reduce_sgd(r, s, v, g, count, FG_F32, 1, 0.1, st);
  r->checks++;
  if (rc != 0 || memcmp(v, want, 4 * count) != 0) r->wrong++;
  fg_shm_arena_free(g);
  fg_shm_arena_free(v);
  free(want);
  return 0;
}

FG_TEST(shm_all_reduce_sgd_refusals, "dist,badinput") { run_and_check(3, sgd_refusals, 5); }

/* ---- fg_shm_gather_factors with the SGD update (the product form) ------- */

static int reduce_product(rank_run *r, fg_shm_reduce *s, void *var, const void *a, const void *b,
                          int64_t rows, int64_t m, int64_t n, fg_dtype dt, int mean, double lr,
                          fg_status *st) {
  fg_shm_wait w = {r->timeout, NULL, NULL};
  sgd_arg p = {lr, mean};
  return fg_shm_gather_factors(s, var, a, b, rows, m, n, dt, lr, "learning rate", sgd_factors, &p,
                               "all_reduce (test)", &w, st);
}

/* Rank p's factors: rows_of(p) rows, a [rows, m] and b [rows, n]. */
static int64_t rows_of(int p, int zero_rank) { return p == zero_rank ? 0 : 5 + 3 * p; }
static double a_val(int p, int64_t i, int64_t j) {
  return 0.01 * (double)((p * 7 + i * 3 + j) % 13) - 0.06;
}
static double b_val(int p, int64_t i, int64_t j) {
  return 0.02 * (double)((p * 5 + i + 2 * j) % 11) - 0.1;
}

/* The update worked out in double by plain loops over every rank's rows:
 * var - lr * (sum over ranks of a^T b, / ranks for the mean). */
static void product_expected(double *want, int ranks, int zero_rank, int64_t m, int64_t n, int mean,
                             double lr) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double g = 0;
      for (int p = 0; p < ranks; p++)
        for (int64_t k = 0; k < rows_of(p, zero_rank); k++)
          g += a_val(p, k, i) * b_val(p, k, j);
      double v0 = 0.5 + 0.25 * (double)((i * n + j) % 7) - 1e-3 * (double)((i * n + j) % 11);
      want[i * n + j] = v0 - lr * (mean ? g / ranks : g);
    }
}

static void fill2(fg_dtype dt, void *t, int64_t rows, int64_t cols, int p,
                  double (*f)(int, int64_t, int64_t)) {
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) {
      if (dt == FG_F32)
        ((float *)t)[i * cols + j] = (float)f(p, i, j);
      else
        ((double *)t)[i * cols + j] = f(p, i, j);
    }
}

/* Each rank's variable after every case, hashed: all ranks must agree. */
static uint64_t product_hash[MAX_RANKS][32];

/* Over arenas: every rank's variable ends within rounding of the loops'
 * answer, every rank's the same bits, for shapes whose slices of rows
 * are uneven or empty (m = 3 over 4 ranks), ranks with different rows
 * (one with none), sum and mean, f32 and f64. The small path returns 1
 * and changes nothing. */
static int product_in_place(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  static const int64_t shapes[][2] = {{3, 5}, {3, 4000}, {300, 41}, {257, 130}};
  fg_shm_reduce_set_in_place(s, 1);
  int c = 0;
  for (int d = 0; d < 2; d++)
    for (size_t k = 0; k < 4; k++)
      for (int mean = 0; mean < 2; mean++, c++) {
        const fg_dtype dt = d ? FG_F64 : FG_F32;
        const int64_t m = shapes[k][0], n = shapes[k][1], count = m * n;
        const int zero = mean ? 1 : -1, me = r->rank;
        const int64_t rows = rows_of(me, zero);
        const size_t es = fg_dtype_size(dt);
        unsigned char *a = fg_shm_arena_alloc((size_t)(rows * m) * es + 64),
                      *b = fg_shm_arena_alloc((size_t)(rows * n) * es + 64),
                      *v = fg_shm_arena_alloc((size_t)count * es + 64);
        double *want = malloc((size_t)count * sizeof *want);
        if (!a || !b || !v || !want) return -1;
        fill2(dt, a, rows, m, me, a_val);
        fill2(dt, b, rows, n, me, b_val);
        var_fill(dt, v, count);
        product_expected(want, r->n, zero, m, n, mean, 0.1);
        int rc = reduce_product(r, s, v, a, b, rows, m, n, dt, mean, 0.1, st);
        const int fused = (size_t)count * es * (size_t)r->n > 16384;
        r->checks++;
        double worst = 0;
        for (int64_t i = 0; i < count; i++) {
          const double x = dt == FG_F32 ? ((float *)v)[i] : ((double *)v)[i];
          const double e = fused ? fabs(x - want[i]) : 0; /* else compared below */
          if (e > worst || e != e) worst = e != e ? 1e300 : e;
        }
        if (!fused) {
          unsigned char *orig = malloc((size_t)count * es + 1);
          var_fill(dt, orig, count);
          worst = memcmp(orig, v, (size_t)count * es) != 0 ? 1 : 0;
          free(orig);
        }
        if (rc != (fused ? 0 : 1) || worst > (dt == FG_F32 ? 2e-6 : 1e-14)) {
          r->wrong++;
          fprintf(stderr, "rank %d case %d: rc %d worst %g\n", me, c, rc, worst);
        }
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < (size_t)count * es; i++)
          h = (h ^ v[i]) * 1099511628211ull;
        product_hash[me][c] = h;
        fg_shm_arena_free(a);
        fg_shm_arena_free(b);
        fg_shm_arena_free(v);
        free(want);
        if (rc < 0) return -1;
      }
  return 0;
}

FG_TEST(shm_all_reduce_sgd_product_updates_every_rank, "dist") {
  for (int n = 2; n <= 4; n++) {
    memset(product_hash, 0, sizeof product_hash);
    run_and_check(n, product_in_place, 16);
    for (int r = 1; r < n; r++)
      for (int c = 0; c < 16; c++)
        FG_CHECK(product_hash[r][c] == product_hash[0][c]);
  }
}

/* Refusals: variables of the same size but another shape, then learning
 * rates that differ, refused on every rank alike; a factor on the heap on
 * one rank: 1 on every rank, nothing changed; then a call that works. */
static int product_refusals(rank_run *r, fg_shm_reduce *s, fg_status *st) {
  const int64_t rows = 8, m = 60, n = 400, count = m * n;
  float *a = fg_shm_arena_alloc(4 * rows * 600), *b = fg_shm_arena_alloc(4 * rows * 600),
        *v = fg_shm_arena_alloc(4 * count), *heap = malloc(4 * rows * 600);
  float *orig = malloc(4 * count);
  if (!a || !b || !v || !heap || !orig) return -1;
  fg_shm_reduce_set_in_place(s, 1);
  fill2(FG_F32, a, rows, m, r->rank, a_val);
  fill2(FG_F32, b, rows, n, r->rank, b_val);
  var_fill(FG_F32, v, count);
  var_fill(FG_F32, orig, count);
  /* rank 0: [40, 600], the others [60, 400] */
  int rc = reduce_product(r, s, v, a, b, rows, r->rank == 0 ? 40 : m, r->rank == 0 ? 600 : n,
                          FG_F32, 1, 0.1, st);
  r->checks++;
  if (rc != -1 || fg_status_code(st) != FG_INVALID_ARGUMENT ||
      !strstr(fg_status_message(st), "every rank must update the same variable"))
    r->wrong++;
  rc = reduce_product(r, s, v, a, b, rows, m, n, FG_F32, 1, r->rank == 1 ? 0.2 : 0.1, st);
  r->checks++;
  if (rc != -1 || fg_status_code(st) != FG_INVALID_ARGUMENT ||
      !strstr(fg_status_message(st), "learning rate"))
    r->wrong++;
  memcpy(heap, b, 4 * rows * n);
  rc = reduce_product(r, s, v, a, r->rank == 1 ? heap : b, rows, m, n, FG_F32, 1, 0.1, st);
  r->checks++;
  if (rc != 1 || memcmp(v, orig, 4 * count) != 0) r->wrong++;
  /* Bad arguments, before any wait (this rank alone). */
  sgd_arg p = {0.1, 1};
  rc = fg_shm_gather_factors(s, v, a, b, rows, m, n, FG_I32, 0.1, "learning rate", sgd_factors, &p,
                             "t", NULL, st);
  r->checks++;
  if (rc != -1 || !strstr(fg_status_message(st), "of i32 (f32 or f64)")) r->wrong++;
  rc = reduce_product(r, s, v, a, b, rows, m, n, FG_F32, 1, 0.1, st);
  r->checks++;
  if (rc != 0 || memcmp(v, orig, 4 * count) == 0) r->wrong++;
  fg_shm_arena_free(a);
  fg_shm_arena_free(b);
  fg_shm_arena_free(v);
  free(heap);
  free(orig);
  return 0;
}

FG_TEST(shm_all_reduce_sgd_product_refusals, "dist,badinput") {
  run_and_check(3, product_refusals, 5);
}
