/* The persistent pthread pool (executor/threadpool.h).
 *
 * One mutex guards the shared state: the DAG's ready heap, the list of
 * parallel_for jobs that still have unclaimed chunks, and the idle stack.
 * Dependency counters are C11 atomics, decremented outside the lock, so a
 * finishing task takes the lock once: to push the successors it made ready,
 * pop its next task and wake helpers.
 *
 * Sleeping: every thread that may take work (the workers, and the caller of
 * fg_pool_run_dag while its DAG runs) has a slot with its own condition
 * variable. A thread with nothing to do pushes its slot on the idle stack
 * and waits until someone pops it and sets `woken`. Wakers wake only as
 * many sleepers as there is claimable work not already promised to a
 * thread that is waking up (`n_waking`), so a chain of tasks runs on one
 * thread without waking anybody.
 *
 * Spinning: before it sleeps, an idle thread watches `pub`, which every
 * publication of work for other threads (and the end of a DAG) bumps, for
 * up to SPIN_NS, unlocked; the caller of parallel_for likewise watches its job's
 * `finished` before it waits on the job's condition variable. A wake-up
 * through the futex took tens of microseconds on a virtual machine, paid
 * at every parallel product of a step: a batch-1 forward is a chain of
 * them, each a few hundred microseconds on two threads. A spinner is not on
 * the idle stack, so nobody wakes it: it sees `pub` change and retries
 * under the lock; after the spin it checks `pub` again under the lock
 * before it sleeps, so no publication is missed.
 *
 * parallel_for: a job lives on its caller's stack and is linked into the
 * pool's job list while it has unclaimed chunks. Idle threads (workers, or
 * the DAG caller while it waits) claim chunks when no DAG task is ready
 * (take_work says why tasks come first). The caller claims its own chunks
 * too and then sleeps on the job's condition variable until the last chunk
 * is done; it never waits for anything but its own chunks, so parallel_for
 * calls made by every thread at once (from DAG tasks, or nested inside
 * chunks) always finish.
 *
 * fg_pool_run_dag is serialised per pool (run_mu). A call made from inside a
 * running task of the same pool (a pool thread, or the DAG caller) would
 * wait on itself, so it runs sequentially on the calling thread instead.
 * Besides the task results, it returns -1 when the DAG is malformed (bad
 * offsets or successor ids, predecessor counts that disagree with the
 * successor lists, `order` not a permutation, a cycle) or scratch memory
 * cannot be had; scratch grows with the largest DAG seen, so running the
 * same DAG again allocates nothing.
 *
 * BLAS: flowgraph owns the threads. The matmul kernel sets OpenBLAS to one
 * thread (kernels/cpu/matmul.c) and splits large products over this pool,
 * so the cores are never oversubscribed by two thread pools. */
#define _GNU_SOURCE /* pthread_setname_np */
#include "executor/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define FG_POOL_MAX_THREADS 1024
/* How long an idle thread watches for work before it sleeps. */
#define SPIN_NS 50000
/* A spin whose burst and yield took longer than PREEMPT_NS lost its core:
 * the machine has more runnable threads than cores. A spinner then runs
 * off its share of the scheduler's time while the thread it waits for
 * waits for a core, where a sleeper is woken ahead of the others: a
 * batch-1 ResNet-18 took 10 times as long beside two compilers. So the
 * pool's threads sleep at once for CONTENDED_NS after that.
 *
 * A core given to another runnable thread is gone for its time slice:
 * beside two busy processes on the 2-core VM of docs/performance.md,
 * 496 of 497 yields lost the core for over 500 us. Without them the
 * spinner still saw gaps of 20 to 95 us, 200 to 300 a second (the
 * hypervisor's timer ticks), 2 over 500 us in 2 s; at 20 us those put
 * the pool to sleeping about every 50 ms, and the 2-thread batch-1
 * forward took 0.73 to 0.90 ms instead of 0.65 to 0.66. */
#define PREEMPT_NS   500000
#define CONTENDED_NS 50000000
/* One loss alone is not contention: the machine's own housekeeping took
 * the core for 0.7 ms about every 0.5 s here, and each such loss sent the
 * pool to sleep for 50 ms. Beside busy processes the next spin loses its
 * core again at once, so a second loss within REPEAT_NS is what sends the
 * pool to sleep. (A process's first 0.1 s had a cluster of 2 to 4 ms
 * losses too: the threaded OpenBLAS's server threads spinning after
 * load, which the first session now stops, kernels/cpu/matmul.c.) */
#define REPEAT_NS 20000000

typedef struct pf_job {
  fg_range_fn fn;
  void *arg;
  int64_t n, grain, n_chunks;
  int64_t next, done;   /* chunks claimed and finished, under mu */
  atomic_uint finished; /* written under mu; read unlocked by the spinning caller */
  pthread_cond_t cv;    /* the caller sleeps here */
  struct pf_job *prev, *nxt;
} pf_job;

typedef struct slot {
  pthread_cond_t cv;
  int woken; /* under mu */
} slot;

typedef struct dag_run {
  int n;
  const int *succ_off, *succ;
  fg_pool_task_fn fn;
  void *ctx;
  atomic_int *cnt; /* unfinished predecessors */
  const int *rank; /* tie-break key; NULL = task index */
  int *heap, heap_n;
  int running, done, stop, finished, err; /* under mu */
} dag_run;

struct fg_pool {
  int n_threads;
  pthread_t *threads; /* n_threads - 1 workers, slots 1.. */
  int n_started;
  slot *slots; /* n_threads; slot 0 is the DAG caller */
  int *idle;   /* stack of sleeping slots */
  int n_idle, n_waking, shutdown;
  atomic_uint pub;               /* bumped (under mu) whenever there may be new work */
  _Atomic int64_t no_spin_until; /* now_ns() before which nobody spins */
  _Atomic int64_t last_preempt;  /* now_ns() of the last spin that lost its core */
  pf_job *jobs, *jobs_tail;
  dag_run *dag;
  pthread_mutex_t mu;
  pthread_mutex_t run_mu; /* one fg_pool_run_dag at a time; guards the scratch */
  atomic_int *s_cnt;
  int *s_heap, *s_rank;
  int s_cap;
};

/* Which pool and slot the current thread works for (NULL outside). */
static _Thread_local fg_pool *tls_pool;
static _Thread_local int tls_slot;

/* ---- the ready heap (min-heap on rank) -------------------------------------- */

static inline int key_of(const dag_run *d, int t) { return d->rank ? d->rank[t] : t; }

static void heap_push(dag_run *d, int t) {
  int i = d->heap_n++;
  const int k = key_of(d, t);
  while (i > 0) {
    const int parent = (i - 1) / 2;
    if (key_of(d, d->heap[parent]) <= k) break;
    d->heap[i] = d->heap[parent];
    i = parent;
  }
  d->heap[i] = t;
}

static int heap_pop(dag_run *d) {
  const int top = d->heap[0];
  const int last = d->heap[--d->heap_n];
  const int k = key_of(d, last);
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= d->heap_n) break;
    if (c + 1 < d->heap_n && key_of(d, d->heap[c + 1]) < key_of(d, d->heap[c])) c++;
    if (key_of(d, d->heap[c]) >= k) break;
    d->heap[i] = d->heap[c];
    i = c;
  }
  if (d->heap_n > 0) d->heap[i] = last;
  return top;
}

/* ---- sleeping and waking (all under mu) ------------------------------------ */

static void wake_slot_at(fg_pool *p, int pos) {
  const int id = p->idle[pos];
  p->idle[pos] = p->idle[--p->n_idle];
  p->slots[id].woken = 1;
  p->n_waking++;
  pthread_cond_signal(&p->slots[id].cv);
}

static void wake_slot(fg_pool *p, int id) {
  for (int i = 0; i < p->n_idle; i++)
    if (p->idle[i] == id) {
      wake_slot_at(p, i);
      return;
    }
}

static void sleep_idle(fg_pool *p, int id) {
  slot *s = &p->slots[id];
  s->woken = 0;
  p->idle[p->n_idle++] = id;
  while (!s->woken)
    pthread_cond_wait(&s->cv, &p->mu);
  p->n_waking--;
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Spins up to SPIN_NS until *v differs from `seen`: 1 when it did. The
 * spin yields the core between short bursts, so a thread that is ready to
 * run there (an OpenMP team's thread in a oneDNN convolution, another
 * process) runs instead; when that took the core away (PREEMPT_NS), the
 * pool stops spinning for a while. */
static int spin_while_equal(fg_pool *p, atomic_uint *v, unsigned seen) {
  int64_t t = now_ns();
  if (t < atomic_load_explicit(&p->no_spin_until, memory_order_relaxed)) return 0;
  const int64_t end = t + SPIN_NS;
  for (;;) {
    for (int i = 0; i < 16; i++) {
      if (atomic_load_explicit(v, memory_order_acquire) != seen) return 1;
      cpu_relax();
    }
    sched_yield();
    const int64_t t2 = now_ns();
    if (t2 - t > PREEMPT_NS) {
      /* A second loss within REPEAT_NS of the last: contended. */
      const int64_t last = atomic_exchange_explicit(&p->last_preempt, t2, memory_order_relaxed);
      if (t2 - last < REPEAT_NS)
        atomic_store_explicit(&p->no_spin_until, t2 + CONTENDED_NS, memory_order_relaxed);
      return 0;
    }
    if (t2 >= end) return 0;
    t = t2;
  }
}

/* Nothing to take (called and returns with mu held): spins for new work,
 * then sleeps unless some came. The caller retries take_work. */
static void idle_wait(fg_pool *p, int id) {
  const unsigned seen = atomic_load_explicit(&p->pub, memory_order_relaxed);
  pthread_mutex_unlock(&p->mu);
  const int changed = spin_while_equal(p, &p->pub, seen);
  pthread_mutex_lock(&p->mu);
  if (changed || atomic_load_explicit(&p->pub, memory_order_relaxed) != seen) return;
  sleep_idle(p, id);
}

/* Wakes sleepers for the claimable work that neither the current thread
 * (`self` items) nor threads already waking up will take. */
static void kick(fg_pool *p, int self) {
  int64_t avail = -self - p->n_waking;
  if (p->dag && !p->dag->stop) avail += p->dag->heap_n;
  for (const pf_job *j = p->jobs; j && (avail <= 0 || avail < p->n_idle); j = j->nxt)
    avail += j->n_chunks - j->next;
  /* Spinners too: only for work nobody has claimed. A chain of small tasks
   * then stays on its thread, with no spinner taking the lock at each. */
  if (avail > 0) atomic_fetch_add_explicit(&p->pub, 1, memory_order_release);
  while (avail > 0 && p->n_idle > 0) {
    wake_slot_at(p, p->n_idle - 1); /* the most recent sleeper: warmest cache */
    avail--;
  }
}

/* ---- parallel_for jobs -------------------------------------------------------- */

static void job_unlink(fg_pool *p, pf_job *j) {
  if (j->prev)
    j->prev->nxt = j->nxt;
  else
    p->jobs = j->nxt;
  if (j->nxt)
    j->nxt->prev = j->prev;
  else
    p->jobs_tail = j->prev;
  j->prev = j->nxt = NULL;
}

/* Claims the next chunk of j (under mu), runs it unlocked and records it;
 * returns with mu held. */
static void run_chunk(fg_pool *p, pf_job *j) {
  const int64_t c = j->next++;
  if (j->next == j->n_chunks) job_unlink(p, j);
  pthread_mutex_unlock(&p->mu);
  const int64_t begin = c * j->grain;
  const int64_t end = j->n - begin > j->grain ? begin + j->grain : j->n;
  j->fn(j->arg, begin, end);
  pthread_mutex_lock(&p->mu);
  if (++j->done == j->n_chunks) {
    atomic_store_explicit(&j->finished, 1, memory_order_release);
    pthread_cond_signal(&j->cv);
  }
}

/* ---- DAG tasks ------------------------------------------------------------------- */

#define READY_BATCH 64

/* Pushes newly ready tasks (under mu). */
static void push_ready(dag_run *d, const int *ready, int n_ready) {
  if (d->stop) return;
  for (int i = 0; i < n_ready; i++)
    heap_push(d, ready[i]);
}

/* Marks the run finished when nothing more can happen: every task done, or
 * a stop with nothing in flight, or nothing ready or running (a cycle). */
static void check_finished(fg_pool *p, dag_run *d) {
  if (d->finished || d->running > 0) return;
  if (d->done == d->n || d->stop || d->heap_n == 0) {
    if (d->done < d->n && !d->stop && d->err == 0) d->err = -1; /* a cycle */
    d->finished = 1;
    atomic_fetch_add_explicit(&p->pub, 1, memory_order_release); /* a spinning caller */
    if (tls_pool != p || tls_slot != 0) wake_slot(p, 0);
  }
}

/* Pops task t (under mu), runs it unlocked, and returns with mu held after
 * its successors are released and its result recorded. */
static void run_task(fg_pool *p, dag_run *d, int worker) {
  const int t = heap_pop(d);
  d->running++;
  pthread_mutex_unlock(&p->mu);
  const int r = d->fn(d->ctx, t, worker);
  int ready[READY_BATCH], n_ready = 0;
  if (r == 0) {
    for (int e = d->succ_off[t]; e < d->succ_off[t + 1]; e++) {
      const int s = d->succ[e];
      if (atomic_fetch_sub_explicit(&d->cnt[s], 1, memory_order_acq_rel) != 1) continue;
      if (n_ready == READY_BATCH) { /* a wide fan-out: hand these over now */
        pthread_mutex_lock(&p->mu);
        push_ready(d, ready, n_ready);
        kick(p, 0);
        pthread_mutex_unlock(&p->mu);
        n_ready = 0;
      }
      ready[n_ready++] = s;
    }
  }
  pthread_mutex_lock(&p->mu);
  d->running--;
  d->done++;
  if (r != 0 && !d->stop) {
    d->stop = 1;
    d->err = r;
  }
  push_ready(d, ready, n_ready);
  check_finished(p, d);
  kick(p, 1);
}

/* Runs one item of claimable work, a ready DAG task before a chunk of
 * another thread's parallel_for. An independent task runs whole on one
 * core, without the split's cost (tiles smaller than the whole, a wait for
 * the last chunk), so while the DAG has tasks ready the threads spread over
 * them, and they help with chunks only when it has none: with 8 ready
 * matmuls on 2 threads, each thread runs matmuls instead of both running
 * halves of one after another. No job waits for it: a job's caller runs
 * every chunk nobody claimed. Called and returns with mu held; 0 when there
 * was nothing to take. */
static int take_work(fg_pool *p, int id) {
  dag_run *d = p->dag;
  if (d && !d->stop && d->heap_n > 0) {
    run_task(p, d, id);
    return 1;
  }
  if (p->jobs) {
    run_chunk(p, p->jobs);
    return 1;
  }
  return 0;
}

typedef struct worker_start {
  fg_pool *p;
  int id;
} worker_start;

static void *worker_main(void *arg) {
  fg_pool *p = ((worker_start *)arg)->p;
  const int id = ((worker_start *)arg)->id;
  free(arg);
  tls_pool = p;
  tls_slot = id;
  pthread_mutex_lock(&p->mu);
  while (!p->shutdown)
    if (!take_work(p, id)) idle_wait(p, id);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* ---- the pool ------------------------------------------------------------------------ */

fg_pool *fg_pool_new(int n_threads) {
  if (n_threads < 1 || n_threads > FG_POOL_MAX_THREADS) return NULL;
  fg_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n_threads = n_threads;
  p->slots = calloc((size_t)n_threads, sizeof *p->slots);
  p->idle = calloc((size_t)n_threads, sizeof *p->idle);
  p->threads = calloc((size_t)n_threads, sizeof *p->threads);
  if (!p->slots || !p->idle || !p->threads || pthread_mutex_init(&p->mu, NULL) != 0) {
    free(p->slots);
    free(p->idle);
    free(p->threads);
    free(p);
    return NULL;
  }
  pthread_mutex_init(&p->run_mu, NULL);
  for (int i = 0; i < n_threads; i++)
    pthread_cond_init(&p->slots[i].cv, NULL);
  for (int i = 1; i < n_threads; i++) {
    worker_start *ws = malloc(sizeof *ws);
    if (!ws) break;
    ws->p = p;
    ws->id = i;
    if (pthread_create(&p->threads[i], NULL, worker_main, ws) != 0) {
      free(ws);
      break;
    }
    /* Named by the creator, so the name is there once fg_pool_new returns:
     * top -H, debuggers and the tests tell these threads from the ones the
     * CUDA driver or Open MPI start in the same process. */
    pthread_setname_np(p->threads[i], "fg-pool");
    p->n_started++;
  }
  if (p->n_started != n_threads - 1) {
    fg_pool_free(p);
    return NULL;
  }
  return p;
}

void fg_pool_free(fg_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->shutdown = 1;
  atomic_fetch_add_explicit(&p->pub, 1, memory_order_release);
  while (p->n_idle > 0)
    wake_slot_at(p, p->n_idle - 1);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i <= p->n_started; i++)
    pthread_join(p->threads[i], NULL);
  for (int i = 0; i < p->n_threads; i++)
    pthread_cond_destroy(&p->slots[i].cv);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->run_mu);
  free(p->s_cnt);
  free(p->s_heap);
  free(p->s_rank);
  free(p->slots);
  free(p->idle);
  free(p->threads);
  free(p);
}

int fg_pool_threads(const fg_pool *p) { return p ? p->n_threads : 1; }

/* ---- fg_pool_run_dag ---------------------------------------------------------------- */

/* Checks the DAG's arrays and fills the counters, the ranks (when order is
 * given) and the initial ready heap. -1 when malformed. */
static int dag_prepare(dag_run *d, const int *n_preds, const int *order, int *rank) {
  const int n = d->n;
  int *indeg = d->heap; /* borrowed until the heap is filled */
  if (d->succ_off[0] != 0) return -1;
  for (int t = 0; t < n; t++) {
    if (d->succ_off[t + 1] < d->succ_off[t]) return -1;
    indeg[t] = 0;
  }
  for (int e = 0; e < d->succ_off[n]; e++) {
    const int s = d->succ[e];
    if (s < 0 || s >= n) return -1;
    indeg[s]++;
  }
  for (int t = 0; t < n; t++) {
    if (indeg[t] != n_preds[t]) return -1;
    atomic_store_explicit(&d->cnt[t], n_preds[t], memory_order_relaxed);
  }
  d->rank = NULL;
  if (order) {
    for (int t = 0; t < n; t++)
      rank[t] = -1;
    for (int i = 0; i < n; i++) {
      if (order[i] < 0 || order[i] >= n || rank[order[i]] != -1) return -1;
      rank[order[i]] = i;
    }
    d->rank = rank;
  }
  d->heap_n = 0;
  for (int t = 0; t < n; t++)
    if (n_preds[t] == 0) heap_push(d, t);
  return 0;
}

/* Sequential run on the calling thread, in the same tie-break order. */
static int dag_run_inline(dag_run *d, int worker) {
  while (d->heap_n > 0) {
    const int t = heap_pop(d);
    const int r = d->fn(d->ctx, t, worker);
    if (r != 0) return r;
    d->done++;
    for (int e = d->succ_off[t]; e < d->succ_off[t + 1]; e++)
      if (atomic_fetch_sub_explicit(&d->cnt[d->succ[e]], 1, memory_order_relaxed) == 1)
        heap_push(d, d->succ[e]);
  }
  return d->done == d->n ? 0 : -1;
}

/* For a pool-less or nested call: scratch of its own. */
static int run_dag_alloc(int n, const int *n_preds, const int *order, dag_run *d, int worker) {
  atomic_int *cnt = malloc((size_t)n * sizeof *cnt);
  int *heap = malloc((size_t)n * sizeof *heap);
  int *rank = order ? malloc((size_t)n * sizeof *rank) : NULL;
  int rc = -1;
  if (cnt && heap && (rank || !order)) {
    d->cnt = cnt;
    d->heap = heap;
    if (dag_prepare(d, n_preds, order, rank) == 0) rc = dag_run_inline(d, worker);
  }
  free(cnt);
  free(heap);
  free(rank);
  return rc;
}

static int grow_scratch(fg_pool *p, int n) {
  if (n <= p->s_cap) return 0;
  atomic_int *cnt = malloc((size_t)n * sizeof *cnt);
  int *heap = malloc((size_t)n * sizeof *heap);
  int *rank = malloc((size_t)n * sizeof *rank);
  if (!cnt || !heap || !rank) {
    free(cnt);
    free(heap);
    free(rank);
    return -1;
  }
  free(p->s_cnt);
  free(p->s_heap);
  free(p->s_rank);
  p->s_cnt = cnt;
  p->s_heap = heap;
  p->s_rank = rank;
  p->s_cap = n;
  return 0;
}

int fg_pool_run_dag(fg_pool *p, int n, const int *n_preds, const int *succ_off, const int *succ,
                    const int *order, fg_pool_task_fn fn, void *ctx) {
  if (n < 0 || !fn || (n > 0 && (!n_preds || !succ_off || (!succ && succ_off[n] > 0)))) return -1;
  if (n == 0) return 0;
  dag_run d = {.n = n, .succ_off = succ_off, .succ = succ, .fn = fn, .ctx = ctx};
  if (!p) return run_dag_alloc(n, n_preds, order, &d, 0);
  if (tls_pool == p) return run_dag_alloc(n, n_preds, order, &d, tls_slot); /* nested */

  pthread_mutex_lock(&p->run_mu);
  if (grow_scratch(p, n) != 0) {
    pthread_mutex_unlock(&p->run_mu);
    return -1;
  }
  d.cnt = p->s_cnt;
  d.heap = p->s_heap;
  int rc = dag_prepare(&d, n_preds, order, p->s_rank);
  /* The caller may be a thread of another pool: restore its identity. */
  fg_pool *const outer_pool = tls_pool;
  const int outer_slot = tls_slot;
  if (rc == 0 && p->n_threads == 1) {
    tls_pool = p;
    tls_slot = 0;
    rc = dag_run_inline(&d, 0);
  } else if (rc == 0) {
    pthread_mutex_lock(&p->mu);
    tls_pool = p;
    tls_slot = 0;
    p->dag = &d;
    check_finished(p, &d); /* nothing ready at all: a cycle */
    kick(p, 1);
    while (!d.finished)
      if (!take_work(p, 0)) idle_wait(p, 0);
    p->dag = NULL;
    pthread_mutex_unlock(&p->mu);
    rc = d.err;
  }
  tls_pool = outer_pool;
  tls_slot = outer_slot;
  pthread_mutex_unlock(&p->run_mu);
  return rc;
}

/* ---- fg_pool_parallel_for -------------------------------------------------------- */

void fg_pool_parallel_for_fn(void *pool, int64_t n, int64_t grain, fg_range_fn fn, void *arg) {
  fg_pool_parallel_for(pool, n, grain, fn, arg);
}

void fg_pool_parallel_for(fg_pool *p, int64_t n, int64_t grain, fg_range_fn fn, void *arg) {
  if (n <= 0 || !fn) return;
  if (grain < 1) grain = 1;
  if (!p || p->n_threads <= 1 || n <= grain) {
    fn(arg, 0, n);
    return;
  }
  pf_job j = {.fn = fn, .arg = arg, .n = n, .grain = grain, .n_chunks = (n - 1) / grain + 1};
  pthread_cond_init(&j.cv, NULL);
  pthread_mutex_lock(&p->mu);
  j.prev = p->jobs_tail;
  if (p->jobs_tail)
    p->jobs_tail->nxt = &j;
  else
    p->jobs = &j;
  p->jobs_tail = &j;
  kick(p, 1);
  while (j.next < j.n_chunks)
    run_chunk(p, &j);
  if (!atomic_load_explicit(&j.finished, memory_order_relaxed)) {
    pthread_mutex_unlock(&p->mu);
    spin_while_equal(p, &j.finished, 0);
    pthread_mutex_lock(&p->mu);
  }
  while (!atomic_load_explicit(&j.finished, memory_order_relaxed))
    pthread_cond_wait(&j.cv, &p->mu);
  pthread_mutex_unlock(&p->mu);
  pthread_cond_destroy(&j.cv);
}
