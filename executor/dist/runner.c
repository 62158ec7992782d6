/* Running one plan across lanes (executor/dist/exec.h): persistent threads, one per
 * lane but the first (the calling thread's), each taking its own ready
 * steps in order. The threads and the scratch arrays live as long as the
 * session's dist state, so a run creates no thread and, once a plan of its
 * size ran, allocates nothing. */
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "dist/comm/comm_inproc.h"
#include "executor/dist/exec.h"

struct fg_dist_runner {
  int n_lanes;
  pthread_t *th;
  int started; /* threads created: lanes 1 .. started */
  pthread_mutex_t lock;
  pthread_cond_t *cond; /* per lane: a job started, or a step became ready */
  pthread_cond_t idle;  /* the last worker finished the job */
  unsigned long job;    /* generation of the current job */
  int quit;
  int active; /* workers still inside the current job */
  /* The current job. */
  const fg_dist_exec *dx;
  int n;
  const int *succ_off, *succ, *lane;
  int (*fn)(void *, int, int);
  void *ctx;
  int done, failed, result;
  /* Scratch, grown to the largest plan run so far. */
  int cap;
  atomic_int *preds;
  int *queue; /* n_lanes rows of cap: each lane's ready steps, a heap */
  int *tail;  /* per lane: its heap's size */
};

typedef struct lane_arg {
  fg_dist_runner *r;
  int lane;
} lane_arg;

/* Each lane's ready steps are a min-heap on the step index (plan order),
 * as the thread pool's (executor/threadpool.c): of two ready steps a lane
 * runs the earlier one in the plan. FIFO would run steps in the order they
 * became ready, which is breadth-first: with micro-batches
 * (fg_micro_batch) a stage ran layer 1 of every micro-batch before layer 2
 * of the first, so the next stage waited for all of them instead of
 * starting on the first (a pipeline with no overlap). Under r->lock. */
static void heap_push(fg_dist_runner *r, int l, int t) {
  int *h = r->queue + (size_t)l * (size_t)r->cap;
  int i = r->tail[l]++;
  while (i > 0 && h[(i - 1) / 2] > t) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = t;
}

static int heap_pop(fg_dist_runner *r, int l) {
  int *h = r->queue + (size_t)l * (size_t)r->cap;
  int top = h[0], last = h[--r->tail[l]], n = r->tail[l], i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && h[c + 1] < h[c]) c++;
    if (h[c] >= last) break;
    h[i] = h[c];
    i = c;
  }
  if (n > 0) h[i] = last;
  return top;
}

static void push(fg_dist_runner *r, int t) {
  int l = r->lane[t];
  heap_push(r, l, t);
  pthread_cond_signal(&r->cond[l]);
}

static void wake_all(fg_dist_runner *r) {
  for (int l = 0; l < r->n_lanes; l++)
    pthread_cond_broadcast(&r->cond[l]);
}

static void lane_loop(fg_dist_runner *r, int l) {
  for (;;) {
    pthread_mutex_lock(&r->lock);
    while (r->tail[l] == 0 && !r->failed && r->done < r->n)
      pthread_cond_wait(&r->cond[l], &r->lock);
    if (r->failed || r->tail[l] == 0) {
      pthread_mutex_unlock(&r->lock);
      return;
    }
    int t = heap_pop(r, l);
    pthread_mutex_unlock(&r->lock);
    int rc = r->fn(r->ctx, t, l);
    pthread_mutex_lock(&r->lock);
    if (rc != 0) {
      if (!r->failed) r->result = rc;
      r->failed = 1;
      wake_all(r);
      pthread_mutex_unlock(&r->lock);
      /* Peers blocked in a collective would otherwise wait for its
       * timeout (fn usually aborted them already, with its reason). */
      fg_dist_abort(r->dx, "a step on another device failed");
      return;
    }
    for (int k = r->succ_off[t]; k < r->succ_off[t + 1]; k++) {
      int s = r->succ[k];
      if (atomic_fetch_sub(&r->preds[s], 1) == 1) push(r, s);
    }
    if (++r->done == r->n) wake_all(r);
    pthread_mutex_unlock(&r->lock);
  }
}

static void *lane_thread(void *p) {
  lane_arg *a = p;
  fg_dist_runner *r = a->r;
  int l = a->lane;
  free(a);
  unsigned long seen = 0;
  pthread_mutex_lock(&r->lock);
  for (;;) {
    while (r->job == seen && !r->quit)
      pthread_cond_wait(&r->cond[l], &r->lock);
    if (r->quit) break;
    seen = r->job;
    pthread_mutex_unlock(&r->lock);
    lane_loop(r, l);
    pthread_mutex_lock(&r->lock);
    if (--r->active == 0) pthread_cond_signal(&r->idle);
  }
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

void fg_dist_runner_free(fg_dist_runner *r) {
  if (!r) return;
  pthread_mutex_lock(&r->lock);
  r->quit = 1;
  wake_all(r);
  pthread_mutex_unlock(&r->lock);
  for (int l = 1; l <= r->started; l++)
    pthread_join(r->th[l], NULL);
  for (int l = 0; r->cond && l < r->n_lanes; l++)
    pthread_cond_destroy(&r->cond[l]);
  pthread_cond_destroy(&r->idle);
  pthread_mutex_destroy(&r->lock);
  free(r->cond);
  free(r->th);
  free(r->preds);
  free(r->queue);
  free(r->tail);
  free(r);
}

fg_dist_runner *fg_dist_runner_new(int n_lanes, fg_status *st) {
  fg_dist_runner *r = calloc(1, sizeof *r);
  if (!r) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory (device threads)");
    return NULL;
  }
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->idle, NULL);
  r->n_lanes = n_lanes;
  r->cond = malloc((size_t)n_lanes * sizeof *r->cond);
  r->th = calloc((size_t)n_lanes, sizeof *r->th);
  r->tail = calloc((size_t)n_lanes, sizeof *r->tail);
  if (!r->cond || !r->th || !r->tail) {
    free(r->cond);
    r->cond = NULL;
    fg_dist_runner_free(r);
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: out of memory (device threads)");
    return NULL;
  }
  for (int l = 0; l < n_lanes; l++)
    pthread_cond_init(&r->cond[l], NULL);
  for (int l = 1; l < n_lanes; l++) {
    lane_arg *a = malloc(sizeof *a);
    if (a) *a = (lane_arg){r, l};
    if (!a || pthread_create(&r->th[l], NULL, lane_thread, a) != 0) {
      free(a);
      fg_dist_runner_free(r);
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "session: cannot start the thread of lane %d of %d",
                    l, n_lanes);
      return NULL;
    }
    pthread_setname_np(r->th[l], "fg-lane"); /* as the pool's "fg-pool" */
    r->started = l;
  }
  return r;
}

int fg_dist_runner_lanes(const fg_dist_runner *r) { return r ? r->n_lanes : 0; }

/* Grows the scratch to n steps. Only between jobs (the workers are idle). */
static int reserve(fg_dist_runner *r, int n) {
  if (n <= r->cap) return 0;
  atomic_int *p = malloc((size_t)n * sizeof *p);
  int *q = malloc((size_t)n * (size_t)r->n_lanes * sizeof *q);
  if (!p || !q) {
    free(p);
    free(q);
    return -1;
  }
  free(r->preds);
  free(r->queue);
  r->preds = p;
  r->queue = q;
  r->cap = n;
  return 0;
}

void fg_dist_abort(const fg_dist_exec *dx, const char *why) {
  if (!dx) return;
  for (int e = 0; e <= dx->n_dev; e++) {
    fg_comm *c = e < dx->n_dev ? dx->comm[e] : dx->p2p;
    /* Devices often share one communicator: abort each once. */
    int seen = 0;
    for (int k = 0; k < e && k < dx->n_dev && !seen; k++)
      seen = dx->comm[k] == c;
    if (c && !seen && c->ops && c->ops->abort) c->ops->abort(c, why);
  }
}

int fg_dist_run_dag(const fg_dist_exec *dx, int n, const int *n_preds, const int *succ_off,
                    const int *succ, const int *step_lane, int (*fn)(void *, int, int), void *ctx) {
  fg_dist_runner *r = dx->runner;
  if (n == 0) return 0;
  if (!r || reserve(r, n) != 0) return -1;
  pthread_mutex_lock(&r->lock);
  r->dx = dx;
  r->n = n;
  r->succ_off = succ_off;
  r->succ = succ;
  r->lane = step_lane;
  r->fn = fn;
  r->ctx = ctx;
  r->done = r->failed = r->result = 0;
  for (int l = 0; l < r->n_lanes; l++)
    r->tail[l] = 0;
  for (int t = 0; t < n; t++) {
    atomic_init(&r->preds[t], n_preds[t]);
    if (n_preds[t] == 0) heap_push(r, step_lane[t], t);
  }
  r->active = r->n_lanes - 1;
  r->job++;
  wake_all(r);
  pthread_mutex_unlock(&r->lock);
  lane_loop(r, 0);
  pthread_mutex_lock(&r->lock);
  while (r->active > 0)
    pthread_cond_wait(&r->idle, &r->lock);
  int result = r->failed ? (r->result ? r->result : -1) : r->done == n ? 0 : -1;
  pthread_mutex_unlock(&r->lock);
  return result;
}
