/* The thread pool (executor/threadpool.h): DAG order against every edge,
 * tie-breaking, error stops, malformed DAGs, parallel_for coverage and
 * chunking, ready tasks taken before other threads' chunks, nested
 * parallel_for on every thread at once, concurrent callers, a randomized
 * stress test compared bitwise with the sequential run, and idle workers
 * that sleep.
 *
 * Tasks and chunks run on pool threads, where the fgtest checks (which
 * count failures in a plain global) must not run: they record what they
 * saw, and the checks run on the main thread afterwards. A deadlock would
 * hang, so the cases that could deadlock arm alarm() first. */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "executor/threadpool.h"
#include "fgtest.h"

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static int rng_int(uint64_t *s, int n) { return (int)(rng_next(s) % (uint64_t)n); }

static void shuffle(int *a, int n, uint64_t *s) {
  for (int i = n - 1; i > 0; i--) {
    const int j = rng_int(s, i + 1);
    const int t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "test_threadpool: timed out (deadlock?)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  _exit(1);
}
/* Under ThreadSanitizer everything is several times slower. */
static void arm_alarm(unsigned seconds) {
  signal(SIGALRM, on_alarm);
  alarm(seconds);
}

/* A DAG in CSR form: succ[succ_off[t] .. succ_off[t+1]). */
typedef struct dag {
  int n;
  int *n_preds, *succ_off, *succ;
} dag;

static void dag_free(dag *d) {
  free(d->n_preds);
  free(d->succ_off);
  free(d->succ);
}

/* A random DAG: edges go from lower to higher positions of a random
 * permutation, so the topological order is not the index order. */
static dag dag_random(int n, int max_preds, uint64_t *s) {
  dag d = {n, calloc((size_t)n, sizeof(int)), calloc((size_t)n + 1, sizeof(int)), NULL};
  int *perm = malloc((size_t)n * sizeof(int));
  int *src = malloc((size_t)n * (size_t)max_preds * sizeof(int));
  int *dst = malloc((size_t)n * (size_t)max_preds * sizeof(int));
  for (int i = 0; i < n; i++)
    perm[i] = i;
  shuffle(perm, n, s);
  int ne = 0;
  for (int pos = 1; pos < n; pos++) {
    const int k = rng_int(s, max_preds + 1);
    int chosen[16], nc = 0;
    for (int e = 0; e < k && e < 16; e++) {
      const int from = perm[rng_int(s, pos)];
      int dup = 0;
      for (int c = 0; c < nc; c++)
        dup |= chosen[c] == from;
      if (dup) continue;
      chosen[nc++] = from;
      src[ne] = from;
      dst[ne] = perm[pos];
      ne++;
    }
  }
  for (int e = 0; e < ne; e++) {
    d.succ_off[src[e] + 1]++;
    d.n_preds[dst[e]]++;
  }
  for (int t = 0; t < n; t++)
    d.succ_off[t + 1] += d.succ_off[t];
  d.succ = malloc((size_t)(ne > 0 ? ne : 1) * sizeof(int));
  int *fill = calloc((size_t)n, sizeof(int));
  for (int e = 0; e < ne; e++)
    d.succ[d.succ_off[src[e]] + fill[src[e]]++] = dst[e];
  free(fill);
  free(perm);
  free(src);
  free(dst);
  return d;
}

/* ---- DAG order ---------------------------------------------------------------- */

typedef struct stamp_ctx {
  pthread_mutex_t mu;
  int clock;
  int *start, *end, *runs, *worker;
  atomic_int busy[8]; /* per worker: tasks running on it now (must stay <= 1) */
  atomic_int overlap;
  int n_threads;
  int fail_task, fail_code; /* -1: none */
  int sleep_ms;             /* per task, instead of a little arithmetic */
  int late_after;           /* a task starting after this one ended (-1: none) */
  int late_sleep_ms;        /* sleeps this long instead of sleep_ms */
} stamp_ctx;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int stamp_task(void *vctx, int task, int worker) {
  stamp_ctx *c = vctx;
  if (worker >= 0 && worker < 8 && atomic_fetch_add(&c->busy[worker], 1) != 0)
    atomic_store(&c->overlap, 1);
  pthread_mutex_lock(&c->mu);
  c->start[task] = ++c->clock;
  c->runs[task]++;
  c->worker[task] = worker;
  const int late = c->late_after >= 0 && c->end[c->late_after] != 0;
  pthread_mutex_unlock(&c->mu);
  const int sleep_ms = late ? c->late_sleep_ms : c->sleep_ms;
  if (sleep_ms > 0) {
    struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  } else {
    volatile double x = 0; /* a little work so that tasks overlap */
    for (int i = 0; i < 200 + (task % 7) * 100; i++)
      x += sqrt((double)i);
  }
  pthread_mutex_lock(&c->mu);
  c->end[task] = ++c->clock;
  pthread_mutex_unlock(&c->mu);
  if (worker >= 0 && worker < 8) atomic_fetch_sub(&c->busy[worker], 1);
  return task == c->fail_task ? c->fail_code : 0;
}

static void stamp_init(stamp_ctx *c, int n, int n_threads) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  c->start = calloc((size_t)n, sizeof(int));
  c->end = calloc((size_t)n, sizeof(int));
  c->runs = calloc((size_t)n, sizeof(int));
  c->worker = calloc((size_t)n, sizeof(int));
  c->n_threads = n_threads;
  c->fail_task = -1;
  c->late_after = -1;
}

static void stamp_free(stamp_ctx *c) {
  free(c->start);
  free(c->end);
  free(c->runs);
  free(c->worker);
  pthread_mutex_destroy(&c->mu);
}

FG_TEST(pool_new_and_free, "") {
  FG_CHECK(fg_pool_new(0) == NULL);
  FG_CHECK(fg_pool_new(-3) == NULL);
  FG_CHECK_INT(fg_pool_threads(NULL), 1);
  fg_pool_free(NULL);
  for (int t = 1; t <= 4; t++) {
    fg_pool *p = fg_pool_new(t);
    FG_REQUIRE(p != NULL);
    FG_CHECK_INT(fg_pool_threads(p), t);
    fg_pool_free(p); /* never used: the workers must still exit */
  }
}

FG_TEST(dag_respects_every_edge, "") {
  arm_alarm(120);
  uint64_t seed = 12345;
  for (int threads = 1; threads <= 4; threads++) {
    fg_pool *p = fg_pool_new(threads);
    FG_REQUIRE(p != NULL);
    for (int rep = 0; rep < 20; rep++) {
      const int n = 1 + rng_int(&seed, 300);
      dag d = dag_random(n, 4, &seed);
      stamp_ctx c;
      stamp_init(&c, n, threads);
      const int rc = fg_pool_run_dag(p, n, d.n_preds, d.succ_off, d.succ, NULL, stamp_task, &c);
      FG_CHECK_INT(rc, 0);
      int bad_runs = 0, bad_edges = 0, bad_workers = 0;
      for (int t = 0; t < n; t++) {
        bad_runs += c.runs[t] != 1;
        bad_workers += c.worker[t] < 0 || c.worker[t] >= threads;
        for (int e = d.succ_off[t]; e < d.succ_off[t + 1]; e++)
          bad_edges += !(c.end[t] < c.start[d.succ[e]]);
      }
      FG_CHECK_INT(bad_runs, 0);
      FG_CHECK_INT(bad_edges, 0);
      FG_CHECK_INT(bad_workers, 0);
      FG_CHECK_INT(atomic_load(&c.overlap), 0);
      stamp_free(&c);
      dag_free(&d);
    }
    fg_pool_free(p);
  }
  alarm(0);
}

/* One thread: ready tasks start in `order`'s order (or index order). */
static int record_order(void *vctx, int task, int worker) {
  (void)worker;
  int *log = vctx;
  log[++log[0]] = task;
  return 0;
}

FG_TEST(dag_order_breaks_ties, "") {
  fg_pool *p = fg_pool_new(1);
  FG_REQUIRE(p != NULL);
  /* 0 -> 3, others independent: ready sets {0,1,2,4} then {3,...}. */
  const int n_preds[5] = {0, 0, 0, 1, 0};
  const int succ_off[6] = {0, 1, 1, 1, 1, 1};
  const int succ[1] = {3};
  int log[6] = {0};
  FG_CHECK_INT(fg_pool_run_dag(p, 5, n_preds, succ_off, succ, NULL, record_order, log), 0);
  const int want_index[5] = {0, 1, 2, 3, 4}; /* 3 becomes ready after 0 and beats 4 */
  for (int i = 0; i < 5; i++)
    FG_CHECK_INT(log[1 + i], want_index[i]);
  const int order[5] = {4, 3, 2, 0, 1}; /* 3 is preferred to everything but 4 */
  memset(log, 0, sizeof log);
  FG_CHECK_INT(fg_pool_run_dag(p, 5, n_preds, succ_off, succ, order, record_order, log), 0);
  const int want_order[5] = {4, 2, 0, 3, 1};
  for (int i = 0; i < 5; i++)
    FG_CHECK_INT(log[1 + i], want_order[i]);
  /* Without a pool the same order holds. */
  memset(log, 0, sizeof log);
  FG_CHECK_INT(fg_pool_run_dag(NULL, 5, n_preds, succ_off, succ, order, record_order, log), 0);
  for (int i = 0; i < 5; i++)
    FG_CHECK_INT(log[1 + i], want_order[i]);
  fg_pool_free(p);
}

FG_TEST(dag_error_stops_dispatch, "") {
  arm_alarm(60);
  /* A chain 0 -> 1 -> ... -> 9 where task 3 fails: 4..9 never run. */
  int n_preds[10], succ_off[11], succ[9];
  for (int t = 0; t < 10; t++) {
    n_preds[t] = t > 0;
    succ_off[t] = t < 9 ? t : 9;
    if (t < 9) succ[t] = t + 1;
  }
  succ_off[10] = 9;
  for (int threads = 1; threads <= 4; threads++) {
    fg_pool *p = fg_pool_new(threads);
    FG_REQUIRE(p != NULL);
    stamp_ctx c;
    stamp_init(&c, 10, threads);
    c.fail_task = 3;
    c.fail_code = 42;
    FG_CHECK_INT(fg_pool_run_dag(p, 10, n_preds, succ_off, succ, NULL, stamp_task, &c), 42);
    for (int t = 0; t < 10; t++)
      FG_CHECK_INT(c.runs[t], t <= 3);
    stamp_free(&c);

    /* A wide fan-out: root 0 -> 1..199 of 1 ms tasks, task 20 fails with
     * 7. Tasks in flight finish (every start has an end before the call
     * returns), and few start after the failure: only those popped between
     * the task's return and the pool recording its result, a window of
     * microseconds. Counted by the tasks' logical clock, not by time: a
     * task that starts after task 20 ended ("late") takes 50 ms, so each
     * other thread can start a second late one only if the failing thread
     * is kept off its core for 50 ms inside that window; the bound allows
     * three per thread. Running on, the ~180 other tasks would all be
     * late. */
    enum { W = 200 };
    int wp[W], woff[W + 1], ws[W - 1];
    for (int t = 0; t < W; t++)
      wp[t] = t > 0;
    woff[0] = 0;
    for (int t = 1; t <= W; t++)
      woff[t] = W - 1;
    for (int t = 1; t < W; t++)
      ws[t - 1] = t;
    stamp_init(&c, W, threads);
    c.fail_task = 20;
    c.fail_code = 7;
    c.sleep_ms = 1;
    c.late_after = 20;
    c.late_sleep_ms = 50;
    FG_CHECK_INT(fg_pool_run_dag(p, W, wp, woff, ws, NULL, stamp_task, &c), 7);
    int late = 0, unfinished = 0, ran = 0;
    for (int t = 0; t < W; t++) {
      ran += c.runs[t];
      unfinished += c.runs[t] && !c.end[t];
      late += c.runs[t] && c.start[t] > c.end[20];
    }
    FG_CHECK_INT(unfinished, 0);
    if (late > 3 * (threads - 1))
      FG_FAIL_AT("%d threads: %d tasks started after the failure", threads, late);
    FG_CHECK(ran < W);
    stamp_free(&c);
    fg_pool_free(p);
  }
  alarm(0);
}

static int count_task(void *vctx, int task, int worker) {
  (void)task;
  (void)worker;
  atomic_fetch_add((atomic_int *)vctx, 1);
  return 0;
}

FG_TEST(dag_malformed_is_refused, "badinput") {
  arm_alarm(60);
  for (int threads = 1; threads <= 3; threads += 2) {
    fg_pool *p = fg_pool_new(threads);
    FG_REQUIRE(p != NULL);
    for (int pooled = 0; pooled < 2; pooled++) {
      fg_pool *q = pooled ? p : NULL;
      atomic_int ran = 0;
      /* n_preds disagreeing with the successor lists */
      const int np_bad[2] = {0, 0}, off[3] = {0, 1, 1}, sc[1] = {1};
      FG_CHECK_INT(fg_pool_run_dag(q, 2, np_bad, off, sc, NULL, count_task, &ran), -1);
      /* a successor id out of range */
      const int np2[2] = {0, 0}, sc_bad[1] = {5};
      FG_CHECK_INT(fg_pool_run_dag(q, 2, np2, off, sc_bad, NULL, count_task, &ran), -1);
      FG_CHECK_INT(atomic_load(&ran), 0);
      /* order not a permutation */
      const int np_ok[2] = {0, 1}, dup[2] = {1, 1};
      FG_CHECK_INT(fg_pool_run_dag(q, 2, np_ok, off, sc, dup, count_task, &ran), -1);
      /* a cycle behind a good task: 0 -> 1 -> 2 -> 1 */
      const int np_c[3] = {0, 2, 1}, off_c[4] = {0, 1, 2, 3}, sc_c[3] = {1, 2, 1};
      FG_CHECK_INT(fg_pool_run_dag(q, 3, np_c, off_c, sc_c, NULL, count_task, &ran), -1);
      FG_CHECK_INT(atomic_load(&ran), 1);
      /* nothing ready at all */
      const int np_r[2] = {1, 1}, off_r[3] = {0, 1, 2}, sc_r[2] = {1, 0};
      FG_CHECK_INT(fg_pool_run_dag(q, 2, np_r, off_r, sc_r, NULL, count_task, &ran), -1);
      FG_CHECK_INT(fg_pool_run_dag(q, -1, NULL, NULL, NULL, NULL, count_task, &ran), -1);
      FG_CHECK_INT(fg_pool_run_dag(q, 0, NULL, NULL, NULL, NULL, count_task, &ran), 0);
      FG_CHECK_INT(atomic_load(&ran), 1);
    }
    /* The pool still works after the refusals. */
    const int np[3] = {0, 0, 0}, off[4] = {0, 0, 0, 0};
    atomic_int ran = 0;
    FG_CHECK_INT(fg_pool_run_dag(p, 3, np, off, NULL, NULL, count_task, &ran), 0);
    FG_CHECK_INT(atomic_load(&ran), 3);
    fg_pool_free(p);
  }
  alarm(0);
}

/* ---- parallel_for ------------------------------------------------------------ */

typedef struct cover_ctx {
  atomic_int *hits;
  int64_t n, grain;
  atomic_int bad_bounds, calls;
} cover_ctx;

static void cover_range(void *vctx, int64_t b, int64_t e) {
  cover_ctx *c = vctx;
  atomic_fetch_add(&c->calls, 1);
  /* A split call is one chunk: begins on a multiple of grain, is grain long
   * (the last one shorter). An unsplit call covers everything. */
  const int whole = b == 0 && e == c->n;
  const int chunk = b % c->grain == 0 && e == (c->n - b > c->grain ? b + c->grain : c->n);
  if (!whole && !chunk) atomic_store(&c->bad_bounds, 1);
  for (int64_t i = b; i < e; i++)
    atomic_fetch_add(&c->hits[i], 1);
}

FG_TEST(parallel_for_covers_each_index_once, "") {
  arm_alarm(120);
  const int64_t ns[] = {0, 1, 2, 7, 63, 64, 65, 1000, 4099, 100000};
  const int64_t grains[] = {1, 3, 64, 1000, 1 << 20, 0};
  for (int threads = 0; threads <= 4; threads++) { /* 0: no pool */
    fg_pool *p = threads ? fg_pool_new(threads) : NULL;
    FG_REQUIRE(threads == 0 || p != NULL);
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
      for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
        const int64_t n = ns[a], grain = grains[g];
        if (grain == 1 && n > 5000) continue; /* 100k one-element chunks: slow under TSan */
        cover_ctx c = {.hits = calloc((size_t)(n > 0 ? n : 1), sizeof(atomic_int)),
                       .n = n,
                       .grain = grain < 1 ? 1 : grain};
        fg_pool_parallel_for(p, n, grain, cover_range, &c);
        int wrong = 0;
        for (int64_t i = 0; i < n; i++)
          wrong += atomic_load(&c.hits[i]) != 1;
        if (wrong || atomic_load(&c.bad_bounds))
          fprintf(stderr, "  threads %d n %lld grain %lld\n", threads, (long long)n,
                  (long long)grain);
        FG_CHECK_INT(wrong, 0);
        FG_CHECK_INT(atomic_load(&c.bad_bounds), 0);
        /* Inline (one call) exactly when n <= grain or there is one thread. */
        const int64_t gr = grain < 1 ? 1 : grain;
        const int64_t want = n == 0 ? 0 : (threads <= 1 || n <= gr) ? 1 : (n - 1) / gr + 1;
        FG_CHECK_INT(atomic_load(&c.calls), want);
        free(c.hits);
      }
    fg_pool_free(p);
  }
  alarm(0);
}

/* Every thread of the pool sits in a DAG task (a barrier makes sure) and
 * then calls parallel_for, whose chunks call parallel_for again. */
typedef struct nested_ctx {
  fg_pool *p;
  pthread_barrier_t barrier;
  int n_threads;
  atomic_long sum;
} nested_ctx;

static void inner_range(void *vctx, int64_t b, int64_t e) {
  nested_ctx *c = vctx;
  long s = 0;
  for (int64_t i = b; i < e; i++)
    s += (long)i;
  atomic_fetch_add(&c->sum, s);
}

static void outer_range(void *vctx, int64_t b, int64_t e) {
  nested_ctx *c = vctx;
  for (int64_t i = b; i < e; i++)
    fg_pool_parallel_for(c->p, 1000, 100, inner_range, c);
}

static int nested_task(void *vctx, int task, int worker) {
  (void)worker;
  nested_ctx *c = vctx;
  if (task < c->n_threads) pthread_barrier_wait(&c->barrier);
  fg_pool_parallel_for(c->p, 40, 3, outer_range, c);
  return 0;
}

FG_TEST(nested_parallel_for_on_every_thread, "") {
  arm_alarm(120);
  for (int threads = 1; threads <= 4; threads++) {
    fg_pool *p = fg_pool_new(threads);
    FG_REQUIRE(p != NULL);
    for (int rep = 0; rep < 5; rep++) {
      nested_ctx c = {.p = p, .n_threads = threads};
      pthread_barrier_init(&c.barrier, NULL, (unsigned)threads);
      enum { T = 12 };
      int np[T] = {0}, off[T + 1] = {0};
      FG_CHECK_INT(fg_pool_run_dag(p, T, np, off, NULL, NULL, nested_task, &c), 0);
      /* T tasks x 40 outer indices x sum(0..999) */
      FG_CHECK_INT(atomic_load(&c.sum), (long)T * 40 * 499500);
      pthread_barrier_destroy(&c.barrier);
    }
    fg_pool_free(p);
  }
  alarm(0);
}

/* Ready DAG tasks come before other threads' parallel_for chunks: two
 * independent tasks on 2 threads run side by side, each splitting its own
 * work, instead of both threads running the chunks of one task and then of
 * the other. Each task's chunks wait (up to 5 s) until both tasks have
 * started. When the idle thread took the first task's chunk instead of the
 * second task (the order before), nothing could start it: the chunks time
 * out, and `both_seen` stays short. */
typedef struct side_ctx {
  fg_pool *p;
  atomic_int started, both_seen, timed_out;
} side_ctx;

static void wait_both_range(void *vctx, int64_t b, int64_t e) {
  (void)b;
  (void)e;
  side_ctx *c = vctx;
  const double t0 = now_s();
  while (atomic_load(&c->started) < 2 && now_s() - t0 < 5.0) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  atomic_fetch_add(atomic_load(&c->started) == 2 ? &c->both_seen : &c->timed_out, 1);
}

static int side_task(void *vctx, int task, int worker) {
  (void)task;
  (void)worker;
  side_ctx *c = vctx;
  atomic_fetch_add(&c->started, 1);
  fg_pool_parallel_for(c->p, 2, 1, wait_both_range, c);
  return 0;
}

FG_TEST(ready_tasks_before_foreign_chunks, "") {
  arm_alarm(120);
  fg_pool *p = fg_pool_new(2);
  FG_REQUIRE(p != NULL);
  for (int rep = 0; rep < 3; rep++) {
    side_ctx c = {.p = p};
    int np[2] = {0, 0}, off[3] = {0, 0, 0};
    FG_CHECK_INT(fg_pool_run_dag(p, 2, np, off, NULL, NULL, side_task, &c), 0);
    FG_CHECK_INT(atomic_load(&c.started), 2);
    FG_CHECK_INT(atomic_load(&c.timed_out), 0);
    FG_CHECK_INT(atomic_load(&c.both_seen), 4); /* 2 tasks x 2 chunks */
  }
  fg_pool_free(p);
  alarm(0);
}

/* A DAG task may run a DAG on the same pool: it runs inline. */
static int inner_dag_task(void *vctx, int task, int worker) {
  (void)task;
  (void)worker;
  nested_ctx *c = vctx;
  int np[4] = {0, 1, 1, 2}, off[5] = {0, 2, 3, 4, 4}, sc[4] = {1, 2, 3, 3};
  atomic_int ran = 0;
  if (fg_pool_run_dag(c->p, 4, np, off, sc, NULL, count_task, &ran) != 0) return 1;
  atomic_fetch_add(&c->sum, atomic_load(&ran));
  return 0;
}

FG_TEST(nested_dag_runs_inline, "") {
  arm_alarm(60);
  fg_pool *p = fg_pool_new(3);
  FG_REQUIRE(p != NULL);
  nested_ctx c = {.p = p};
  int np[6] = {0}, off[7] = {0};
  FG_CHECK_INT(fg_pool_run_dag(p, 6, np, off, NULL, NULL, inner_dag_task, &c), 0);
  FG_CHECK_INT(atomic_load(&c.sum), 24);
  fg_pool_free(p);
  alarm(0);
}

/* Two outside threads use one pool at once: one runs DAGs, one calls
 * parallel_for. */
typedef struct caller_ctx {
  fg_pool *p;
  int rc;
  long sum;
} caller_ctx;

static void *dag_caller(void *arg) {
  caller_ctx *cc = arg;
  uint64_t seed = 99;
  for (int rep = 0; rep < 20 && cc->rc == 0; rep++) {
    dag d = dag_random(100, 3, &seed);
    atomic_int ran = 0;
    cc->rc = fg_pool_run_dag(cc->p, d.n, d.n_preds, d.succ_off, d.succ, NULL, count_task, &ran);
    cc->sum += atomic_load(&ran);
    dag_free(&d);
  }
  return NULL;
}

static void *pf_caller(void *arg) {
  caller_ctx *cc = arg;
  nested_ctx c = {.p = cc->p};
  for (int rep = 0; rep < 20; rep++)
    fg_pool_parallel_for(cc->p, 1000, 10, inner_range, &c);
  cc->sum = atomic_load(&c.sum);
  return NULL;
}

FG_TEST(concurrent_outside_callers, "") {
  arm_alarm(60);
  fg_pool *p = fg_pool_new(3);
  FG_REQUIRE(p != NULL);
  caller_ctx a = {p, 0, 0}, b = {p, 0, 0}, c = {p, 0, 0};
  pthread_t ta, tb, tc;
  pthread_create(&ta, NULL, dag_caller, &a);
  pthread_create(&tb, NULL, dag_caller, &b);
  pthread_create(&tc, NULL, pf_caller, &c);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  pthread_join(tc, NULL);
  FG_CHECK_INT(a.rc, 0);
  FG_CHECK_INT(b.rc, 0);
  FG_CHECK_INT(a.sum, 2000);
  FG_CHECK_INT(b.sum, 2000);
  FG_CHECK_INT(c.sum, 20L * 499500);
  fg_pool_free(p);
  alarm(0);
}

/* ---- the randomized stress test ----------------------------------------------- */

/* Kernel-like tasks: task t fills buf[t] (L doubles) from its predecessors'
 * buffers with non-associative arithmetic, using an intra-op parallel_for
 * whose reduction combines fixed chunks in order. Any missed dependency,
 * lost update or order-dependent sum changes the bits. */
enum { STRESS_L = 2048, STRESS_GRAIN = 256 };

typedef struct stress_ctx {
  fg_pool *p;
  const dag *d;
  int **preds; /* per task: predecessor ids, ascending */
  int *n_pred;
  double (*buf)[STRESS_L];
  double *sums; /* per task and chunk: [n][L / GRAIN] */
} stress_ctx;

typedef struct stress_chunk {
  stress_ctx *c;
  int task;
} stress_chunk;

static void stress_range(void *vctx, int64_t b, int64_t e) {
  const stress_chunk *sc = vctx;
  stress_ctx *c = sc->c;
  const int t = sc->task;
  double *out = c->buf[t];
  for (int64_t i = b; i < e; i++) {
    double v = sin((double)(t + 1) * 0.001 * (double)(i + 1));
    for (int k = 0; k < c->n_pred[t]; k++) {
      const double *in = c->buf[c->preds[t][k]];
      v = v * 0.75 + in[i] * in[(i * 7 + 3) % STRESS_L] + 1e-3 * in[STRESS_L - 1 - i];
    }
    out[i] = v;
  }
  /* per-chunk partial sums (each call here is exactly one chunk or all) */
  for (int64_t c0 = b; c0 < e; c0 += STRESS_GRAIN) {
    double s = 0;
    for (int64_t i = c0; i < c0 + STRESS_GRAIN && i < e; i++)
      s += out[i] * 1.000001;
    c->sums[(int64_t)t * (STRESS_L / STRESS_GRAIN) + c0 / STRESS_GRAIN] = s;
  }
}

static int stress_task(void *vctx, int task, int worker) {
  (void)worker;
  stress_ctx *c = vctx;
  stress_chunk sc = {c, task};
  fg_pool_parallel_for(c->p, STRESS_L, STRESS_GRAIN, stress_range, &sc);
  double total = 0; /* chunk partials in chunk order */
  for (int k = 0; k < STRESS_L / STRESS_GRAIN; k++)
    total += c->sums[(int64_t)task * (STRESS_L / STRESS_GRAIN) + k];
  c->buf[task][0] += total * 1e-9;
  return 0;
}

FG_TEST(stress_random_order_bitwise, "") {
  arm_alarm(600);
  uint64_t seed = 2024;
  const int n = 60;
  dag d = dag_random(n, 3, &seed);
  stress_ctx c = {.d = &d};
  c.preds = calloc((size_t)n, sizeof(int *));
  c.n_pred = calloc((size_t)n, sizeof(int));
  for (int t = 0; t < n; t++)
    c.preds[t] = malloc(8 * sizeof(int));
  for (int t = 0; t < n; t++) /* ascending predecessor ids: a fixed order */
    for (int e = d.succ_off[t]; e < d.succ_off[t + 1]; e++) {
      const int s = d.succ[e];
      c.preds[s][c.n_pred[s]++] = t;
    }
  c.buf = malloc((size_t)n * sizeof *c.buf);
  c.sums = malloc((size_t)n * (STRESS_L / STRESS_GRAIN) * sizeof(double));
  /* the reference: sequential, no pool */
  FG_REQUIRE(fg_pool_run_dag(NULL, n, d.n_preds, d.succ_off, d.succ, NULL, stress_task, &c) == 0);
  double(*want)[STRESS_L] = malloc((size_t)n * sizeof *want);
  memcpy(want, c.buf, (size_t)n * sizeof *want);

  fg_pool *pools[5] = {NULL};
  for (int t = 1; t <= 4; t++) {
    pools[t] = fg_pool_new(t);
    FG_REQUIRE(pools[t] != NULL);
  }
  int *order = malloc((size_t)n * sizeof(int));
  int mismatches = 0, failures = 0;
  for (int rep = 0; rep < 200; rep++) {
    const int threads = 1 + rep % 4;
    for (int i = 0; i < n; i++)
      order[i] = i;
    shuffle(order, n, &seed);
    c.p = pools[threads];
    memset(c.buf, 0xA5, (size_t)n * sizeof *c.buf);
    failures += fg_pool_run_dag(c.p, n, d.n_preds, d.succ_off, d.succ, order, stress_task, &c) != 0;
    if (memcmp(c.buf, want, (size_t)n * sizeof *want) != 0 && mismatches++ < 3)
      fprintf(stderr, "  rep %d (%d threads) differs from the sequential run\n", rep, threads);
  }
  FG_CHECK_INT(failures, 0);
  FG_CHECK_INT(mismatches, 0);
  for (int t = 1; t <= 4; t++)
    fg_pool_free(pools[t]);
  for (int t = 0; t < n; t++)
    free(c.preds[t]);
  free(c.preds);
  free(c.n_pred);
  free(c.buf);
  free(c.sums);
  free(want);
  free(order);
  dag_free(&d);
  alarm(0);
}

/* ---- idle workers sleep ------------------------------------------------------- */

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The pool's workers ("fg-pool" threads) as /proc shows them: the state
 * letter and the context switches so far (voluntary and not). */
typedef struct worker_snap {
  int n;
  long tid[16];
  char state[16];
  long switches[16];
} worker_snap;

static void snap_workers(worker_snap *w) {
  w->n = 0;
  DIR *dir = opendir("/proc/self/task");
  if (!dir) return;
  char path[300], buf[2048];
  for (struct dirent *e; (e = readdir(dir)) != NULL && w->n < 16;) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    const int ours = fgets(buf, sizeof buf, f) && strcmp(buf, "fg-pool\n") == 0;
    fclose(f);
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    if (!ours || !(f = fopen(path, "r"))) continue;
    char state = '?';
    long sw = 0, v;
    while (fgets(buf, sizeof buf, f)) {
      if (sscanf(buf, "State: %c", &state) == 1) continue;
      if (sscanf(buf, "voluntary_ctxt_switches: %ld", &v) == 1 ||
          sscanf(buf, "nonvoluntary_ctxt_switches: %ld", &v) == 1)
        sw += v;
    }
    fclose(f);
    w->tid[w->n] = atol(e->d_name);
    w->state[w->n] = state;
    w->switches[w->n++] = sw;
  }
  closedir(dir);
}

static int all_sleep(const worker_snap *w) {
  for (int i = 0; i < w->n; i++)
    if (w->state[i] != 'S') return 0;
  return 1;
}

/* After work, the 3 workers go to sleep and stay asleep: no CPU time and
 * not one context switch over 200 ms of idleness (a worker that spins, or
 * polls on a timer, is woken or preempted in that time). How soon they fall
 * asleep depends on the machine's load, so that is awaited (up to 10 s),
 * not timed. */
FG_TEST(idle_workers_sleep, "") {
  arm_alarm(60);
  fg_pool *p = fg_pool_new(4);
  FG_REQUIRE(p != NULL);
  uint64_t seed = 7;
  dag d = dag_random(200, 3, &seed);
  stamp_ctx c;
  stamp_init(&c, 200, 4);
  FG_CHECK_INT(fg_pool_run_dag(p, 200, d.n_preds, d.succ_off, d.succ, NULL, stamp_task, &c), 0);
  nested_ctx nc = {.p = p};
  fg_pool_parallel_for(p, 100000, 100, inner_range, &nc);
  worker_snap before, after;
  snap_workers(&before);
  for (int ms = 0; ms < 10000 && !(before.n == 3 && all_sleep(&before)); ms++) {
    nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    snap_workers(&before);
  }
  FG_CHECK_INT(before.n, 3);
  FG_CHECK(all_sleep(&before));
  const double cpu0 = cpu_seconds();
  nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
  const double used = cpu_seconds() - cpu0;
  snap_workers(&after);
  if (used > 0.2) fprintf(stderr, "  %.1f ms of CPU time over 200 ms idle\n", used * 1e3);
  /* Three spinning workers would burn ~600 ms here; sleeping ones ~0. The
   * margin leaves room for sanitizer runtimes' own background threads (TSan
   * used ~75 ms). */
  FG_CHECK(used < 0.2);
  FG_CHECK_INT(after.n, before.n);
  for (int i = 0; i < before.n && i < after.n; i++) {
    int j = 0;
    while (j < after.n && after.tid[j] != before.tid[i])
      j++;
    FG_REQUIRE(j < after.n);
    if (after.switches[j] != before.switches[i] || after.state[j] != 'S')
      FG_FAIL_AT("worker %ld: %ld context switches while idle, state %c", before.tid[i],
                 after.switches[j] - before.switches[i], after.state[j]);
  }
  stamp_free(&c);
  dag_free(&d);
  fg_pool_free(p);
  alarm(0);
}
