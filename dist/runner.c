/* Running one plan across devices: one thread per device (the caller is
 * device 0's), each taking its own ready steps in order. See dist/exec.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "dist/comm_inproc.h"
#include "dist/exec.h"

typedef struct run_state {
  const fg_dist_exec *dx;
  int n;
  const int *succ_off, *succ, *step_dev;
  int (*fn)(void *, int, int);
  void *ctx;
  atomic_int *preds;
  pthread_mutex_t lock;
  pthread_cond_t *cond; /* per device */
  int **queue;          /* per device: ready steps (FIFO, at most n) */
  int *head, *tail;
  int done;
  int failed;
  int result;
} run_state;

/* Under rs->lock. */
static void push(run_state *rs, int t) {
  int d = rs->step_dev[t];
  rs->queue[d][rs->tail[d]++] = t;
  pthread_cond_signal(&rs->cond[d]);
}

static void wake_all(run_state *rs) {
  for (int d = 0; d < rs->dx->n_dev; d++)
    pthread_cond_broadcast(&rs->cond[d]);
}

static void device_loop(run_state *rs, int d) {
  for (;;) {
    pthread_mutex_lock(&rs->lock);
    while (rs->head[d] == rs->tail[d] && !rs->failed && rs->done < rs->n)
      pthread_cond_wait(&rs->cond[d], &rs->lock);
    if (rs->failed || rs->head[d] == rs->tail[d]) {
      pthread_mutex_unlock(&rs->lock);
      return;
    }
    int t = rs->queue[d][rs->head[d]++];
    pthread_mutex_unlock(&rs->lock);
    int r = rs->fn(rs->ctx, t, d);
    pthread_mutex_lock(&rs->lock);
    if (r != 0) {
      if (!rs->failed) rs->result = r;
      rs->failed = 1;
      wake_all(rs);
      pthread_mutex_unlock(&rs->lock);
      /* Peers blocked in a collective would otherwise wait for its
       * timeout. */
      for (int e = 0; e < rs->dx->n_dev; e++)
        fg_comm_inproc_abort(rs->dx->comm[e], "a step on another device failed");
      return;
    }
    for (int k = rs->succ_off[t]; k < rs->succ_off[t + 1]; k++) {
      int s = rs->succ[k];
      if (atomic_fetch_sub(&rs->preds[s], 1) == 1) push(rs, s);
    }
    if (++rs->done == rs->n) wake_all(rs);
    pthread_mutex_unlock(&rs->lock);
  }
}

typedef struct dev_arg {
  run_state *rs;
  int d;
} dev_arg;

static void *device_thread(void *p) {
  dev_arg *a = p;
  device_loop(a->rs, a->d);
  return NULL;
}

int fg_dist_run_dag(const fg_dist_exec *dx, int n, const int *n_preds, const int *succ_off,
                    const int *succ, const int *step_dev, int (*fn)(void *, int, int), void *ctx) {
  if (n == 0) return 0;
  int nd = dx->n_dev;
  run_state rs = {dx,   n,    succ_off, succ, step_dev, fn, ctx, NULL, PTHREAD_MUTEX_INITIALIZER,
                  NULL, NULL, NULL,     NULL, 0,        0,  0};
  rs.preds = malloc((size_t)n * sizeof *rs.preds);
  rs.cond = malloc((size_t)nd * sizeof *rs.cond);
  rs.queue = calloc((size_t)nd, sizeof *rs.queue);
  rs.head = calloc((size_t)nd, sizeof *rs.head);
  rs.tail = calloc((size_t)nd, sizeof *rs.tail);
  pthread_t *th = calloc((size_t)nd, sizeof *th);
  dev_arg *args = calloc((size_t)nd, sizeof *args);
  int ok = rs.preds && rs.cond && rs.queue && rs.head && rs.tail && th && args;
  for (int d = 0; ok && d < nd; d++) {
    rs.queue[d] = malloc((size_t)n * sizeof(int));
    ok = rs.queue[d] != NULL;
  }
  int started = 0, result = -1;
  if (ok) {
    for (int d = 0; d < nd; d++)
      pthread_cond_init(&rs.cond[d], NULL);
    for (int t = 0; t < n; t++) {
      atomic_init(&rs.preds[t], n_preds[t]);
      if (n_preds[t] == 0) rs.queue[step_dev[t]][rs.tail[step_dev[t]]++] = t;
    }
    for (int d = 1; d < nd; d++) {
      args[d] = (dev_arg){&rs, d};
      if (pthread_create(&th[d], NULL, device_thread, &args[d]) != 0) break;
      started = d;
    }
    if (started == nd - 1) {
      device_loop(&rs, 0);
    } else {
      pthread_mutex_lock(&rs.lock);
      rs.failed = 1;
      rs.result = -1;
      wake_all(&rs);
      pthread_mutex_unlock(&rs.lock);
    }
    for (int d = 1; d <= started; d++)
      pthread_join(th[d], NULL);
    result = rs.failed ? (rs.result ? rs.result : -1) : rs.done == n ? 0 : -1;
    for (int d = 0; d < nd; d++)
      pthread_cond_destroy(&rs.cond[d]);
  }
  for (int d = 0; rs.queue && d < nd; d++)
    free(rs.queue[d]);
  free(rs.queue);
  free(rs.preds);
  free(rs.cond);
  free(rs.head);
  free(rs.tail);
  free(th);
  free(args);
  pthread_mutex_destroy(&rs.lock);
  return result;
}
