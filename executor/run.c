/* Running a plan: bind the feeds, then call each step's kernel, in order on
 * the calling thread or as a DAG on the session's thread pool (a step starts
 * when all its predecessors finished). Kernels may split their own work with
 * the pool's parallel_for. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "executor/plan.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

typedef struct run_ctx {
  const fg_graph *g;
  fg_plan *plan;
  fg_kparallel par;
  int timings;
  int64_t t0;
  pthread_mutex_t lock; /* guards the first error */
  int failed;
  char err[768];
} run_ctx;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void pool_parallel_for(void *pool, int64_t n, int64_t grain, fg_krange_fn fn, void *arg) {
  fg_pool_parallel_for(pool, n, grain, fn, arg);
}

static int run_step(void *vctx, int si, int worker) {
  run_ctx *rc = vctx;
  fg_plan *plan = rc->plan;
  fg_step *step = &plan->steps[si];
  for (int i = 0; i < step->n_in; i++)
    step->in[i] = plan->slots[step->in_slots[i]];
  char err[512];
  err[0] = '\0';
  fg_kctx ctx = {step->in, step->n_in, &plan->slots[step->out_slots[0]], step->n_out, &step->params,
                 err,      sizeof err, rc->par.pool ? &rc->par : NULL,   NULL,        NULL};
  int64_t t_start = rc->timings ? now_ns() : 0;
  int status = step->fn(&ctx);
  if (rc->timings) {
    fg_node_timing *t = &plan->timings[si];
    t->thread = worker;
    t->start_ns = t_start - rc->t0;
    t->end_ns = now_ns() - rc->t0;
  }
  if (status != 0) {
    const fg_node *n = &rc->g->nodes[step->node];
    pthread_mutex_lock(&rc->lock);
    if (!rc->failed) {
      rc->failed = 1;
      snprintf(rc->err, sizeof rc->err, "node '%s' (%s): %s", n->name, fg_op_table[n->op].name,
               err[0] ? err : "kernel failed");
    }
    pthread_mutex_unlock(&rc->lock);
    return -1;
  }
  return 0;
}

int fg_plan_run(const fg_graph *g, fg_plan *plan, const fg_plan_request *req, fg_pool *pool,
                int timings, fg_status *st) {
  for (int i = 0; i < plan->n_feeds; i++)
    if (plan->feed_slots[i] >= 0)
      plan->slots[plan->feed_slots[i]].data = req->feed_tensors[i]->data;

  run_ctx rc = {g, plan, {pool, pool_parallel_for}, timings, 0, PTHREAD_MUTEX_INITIALIZER, 0, ""};
  /* Waking a second thread costs microseconds; a plan with less work than
   * this runs faster on the calling thread alone. Kernels give the same bits
   * either way, so this changes speed only. */
  if (!pool || fg_pool_threads(pool) <= 1 || fg_plan_threads(plan) <= 1)
    rc.par.pool = NULL, rc.par.parallel_for = NULL;
  if (timings) rc.t0 = now_ns();
  int result = 0;
  if (!rc.par.pool) {
    /* One thread: plain step order, no scheduling overhead. */
    for (int si = 0; si < plan->n_steps && result == 0; si++)
      result = run_step(&rc, si, 0);
  } else {
    result = fg_pool_run_dag(pool, plan->n_steps, plan->n_preds, plan->succ_off, plan->succ, NULL,
                             run_step, &rc);
  }
  pthread_mutex_destroy(&rc.lock);
  if (result != 0) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s", rc.failed ? rc.err : "run failed");
    return -1;
  }
  return 0;
}
