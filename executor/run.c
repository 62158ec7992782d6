/* Running a plan: bind the feeds, then call each step's kernel, in order on
 * the calling thread or as a DAG on the session's thread pool (a step starts
 * when all its predecessors finished). Kernels may split their own work with
 * the pool's parallel_for. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "executor/dist/exec.h"
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
  int check_numerics;
  int nan_step; /* the earliest step (plan order) whose output held NaN/Inf, or n_steps */
  char nan_err[768];
  const fg_dist_exec
      *dist;    /* several devices or a communicator (executor/dist/exec.h), else NULL */
  fg_code code; /* of the first failure: a collective's deadline stays one */
} run_ctx;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* NaN and Inf among a floating-point buffer's elements; 0 for other dtypes.
 * The common all-finite case is one branch-free pass over the exponent bits
 * (which the compiler vectorizes); only a buffer with some non-finite
 * element is scanned again to tell NaN from Inf. */
static int64_t count_nonfinite(const fg_kbuf *b, int64_t *n_nan, int64_t *n_inf) {
  int64_t n = 1, bad = 0;
  for (int d = 0; d < b->rank; d++)
    n *= b->dims[d];
  *n_nan = *n_inf = 0;
  if (b->dtype == FG_F32) {
    const unsigned char *p = b->data;
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, p + 4 * i, 4);
      bad += (u & 0x7f800000u) == 0x7f800000u;
    }
    if (!bad) return 0;
    const float *x = b->data;
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(x[i])) *(isnan(x[i]) ? n_nan : n_inf) += 1;
  } else if (b->dtype == FG_F64) {
    const unsigned char *p = b->data;
    for (int64_t i = 0; i < n; i++) {
      uint64_t u;
      memcpy(&u, p + 8 * i, 8);
      bad += (u & 0x7ff0000000000000u) == 0x7ff0000000000000u;
    }
    if (!bad) return 0;
    const double *x = b->data;
    for (int64_t i = 0; i < n; i++)
      if (!isfinite(x[i])) *(isnan(x[i]) ? n_nan : n_inf) += 1;
  }
  return *n_nan + *n_inf;
}

/* check_numerics: 0 when every floating-point output of step si is
 * finite. Otherwise records the step if it is the earliest in plan order so
 * far and returns -1. A sequential run stops at the first such step; a DAG
 * run lets the other branches finish (a successor of a bad step comes later
 * in plan order and cannot win), so the node named is the same for any
 * thread count. */
static int check_step(run_ctx *rc, int si) {
  const fg_step *step = &rc->plan->steps[si];
  for (int o = 0; o < step->n_out; o++) {
    int64_t n_nan, n_inf;
    if (!count_nonfinite(&rc->plan->slots[step->out_slots[o]], &n_nan, &n_inf)) continue;
    const fg_node *n = &rc->g->nodes[step->node];
    pthread_mutex_lock(&rc->lock);
    if (si < rc->nan_step) {
      rc->nan_step = si;
      snprintf(rc->nan_err, sizeof rc->nan_err,
               "node '%s' (%s): produced %lld NaN and %lld Inf in output %d (check_numerics)",
               n->name, fg_op_table[n->op].name, (long long)n_nan, (long long)n_inf, o);
    }
    pthread_mutex_unlock(&rc->lock);
    return -1;
  }
  return 0;
}

int fg_plan_check_feeds(const fg_graph *g, const fg_plan *plan, const fg_plan_request *req,
                        fg_status *st) {
  for (int i = 0; i < plan->n_feeds; i++) {
    int slot = plan->feed_slots[i];
    if (slot < 0) continue;
    const fg_tensor *t = req->feed_tensors[i];
    fg_kbuf b = {t->dtype, t->rank, {0}, t->data, 0};
    memcpy(b.dims, t->dims, sizeof b.dims);
    int64_t n_nan, n_inf;
    if (!count_nonfinite(&b, &n_nan, &n_inf)) continue;
    fg_status_set(st, FG_INVALID_ARGUMENT,
                  "feed '%s' (placeholder): holds %lld NaN and %lld Inf (check_numerics)",
                  g->nodes[plan->slot_node[slot]].name, (long long)n_nan, (long long)n_inf);
    return -1;
  }
  return 0;
}

/* A transfer between processes: the tensor of slot `slot` to or from rank
 * step->peer under step->tag, through the session's process communicator. */
static int p2p(run_ctx *rc, const fg_step *step, char *err, size_t err_size, fg_code *code) {
  fg_plan *plan = rc->plan;
  int slot = step->xfer == FG_XFER_SEND ? step->in_slots[0] : step->out_slots[0];
  fg_kbuf *b = &plan->slots[slot];
  int64_t bytes = (int64_t)fg_dtype_size(b->dtype);
  for (int d = 0; d < b->rank; d++)
    bytes *= b->dims[d];
  fg_comm *c = rc->dist->p2p;
  fg_status *st = fg_status_new();
  int r = step->xfer == FG_XFER_SEND ? c->ops->send(c, b->data, bytes, step->peer, step->tag, st)
                                     : c->ops->recv(c, b->data, bytes, step->peer, step->tag, st);
  if (r != 0) *code = fg_status_code(st);
  if (r != 0)
    snprintf(err, err_size, "%s rank %d (tag %d, %lld bytes): %s: %s",
             step->xfer == FG_XFER_SEND ? "send to" : "recv from", step->peer, step->tag,
             (long long)bytes, fg_code_name(fg_status_code(st)), fg_status_message(st));
  fg_status_free(st);
  return r;
}

static int run_step(void *vctx, int si, int worker) {
  run_ctx *rc = vctx;
  fg_plan *plan = rc->plan;
  fg_step *step = &plan->steps[si];
  for (int i = 0; i < step->n_in; i++)
    step->in[i] = plan->slots[step->in_slots[i]];
  char err[512];
  fg_code code = FG_INVALID_ARGUMENT;
  fg_kctx ctx =
      fg_plan_step_kctx(plan, step, step->in, &plan->slots[step->out_slots[0]], err, sizeof err);
  ctx.par = rc->par.pool ? &rc->par : NULL;
  ctx.code = &code;
  ctx.state = step->kstate;
  if (rc->dist) {
    /* The step's device decides its pool share and its communicator. */
    int d = plan->step_dev ? plan->step_dev[si] : 0;
    ctx.comm = rc->dist->comm[d];
    if (rc->dist->n_dev > 1) ctx.par = rc->dist->par[d].pool ? &rc->dist->par[d] : NULL;
  }
  int64_t t_start = rc->timings ? now_ns() : 0;
  int status = step->xfer == FG_XFER_SEND || step->xfer == FG_XFER_RECV
                   ? p2p(rc, step, err, sizeof err, &code)
                   : step->fn(&ctx);
  if (rc->timings) {
    fg_node_timing *t = &plan->timings[si];
    t->thread = worker;
    t->start_ns = t_start - rc->t0;
    t->end_ns = now_ns() - rc->t0;
  }
  if (status != 0) {
    const fg_node *n = &rc->g->nodes[step->node];
    pthread_mutex_lock(&rc->lock);
    int first = !rc->failed;
    if (!rc->failed) {
      rc->failed = 1;
      if (step->xfer)
        snprintf(rc->err, sizeof rc->err, "transfer of node '%s''s output: %s", n->name, err);
      else
        snprintf(rc->err, sizeof rc->err, "node '%s' (%s): %s", n->name, fg_op_table[n->op].name,
                 err[0] ? err : "kernel failed");
      rc->code = code;
    }
    pthread_mutex_unlock(&rc->lock);
    /* Whoever waits for this step's results (this process's other lanes,
     * other ranks) stops now, told why. rc->err is final once set. */
    if (first) fg_dist_abort(rc->dist, rc->err);
    return -1;
  }
  /* Off: one predictable branch per step. */
  if (rc->check_numerics && !step->xfer && check_step(rc, si) != 0)
    return rc->par.pool || rc->dist ? 0 : -1;
  return 0;
}

int fg_plan_run(const fg_graph *g, fg_plan *plan, const fg_plan_request *req, fg_pool *pool,
                int timings, fg_status *st) {
  for (int i = 0; i < plan->n_feeds; i++)
    if (plan->feed_slots[i] >= 0)
      plan->slots[plan->feed_slots[i]].data = req->feed_tensors[i]->data;

  run_ctx rc = {g,
                plan,
                {pool, fg_pool_parallel_for_fn},
                timings,
                0,
                PTHREAD_MUTEX_INITIALIZER,
                0,
                "",
                req->check_numerics,
                plan->n_steps,
                "",
                req->dist,
                FG_INVALID_ARGUMENT};
  /* Waking a second thread costs microseconds; a plan with less work than
   * this runs faster on the calling thread alone. Kernels give the same bits
   * either way, so this changes speed only. */
  if (!pool || fg_pool_threads(pool) <= 1 || fg_plan_threads(plan) <= 1)
    rc.par.pool = NULL, rc.par.parallel_for = NULL;
  if (timings) plan->timings_t0 = rc.t0 = now_ns();
  int result = 0;
  if (rc.dist && plan->use_lanes) {
    /* Several devices, or collectives on their own lane: the persistent
     * lane threads (executor/dist/runner.c); worker = lane. */
    result = fg_dist_run_dag(rc.dist, plan->n_steps, plan->n_preds, plan->succ_off, plan->succ,
                             plan->step_lane, run_step, &rc);
  } else if (!rc.par.pool) {
    /* One thread: plain step order, no scheduling overhead. */
    for (int si = 0; si < plan->n_steps && result == 0; si++)
      result = run_step(&rc, si, 0);
  } else {
    result = fg_pool_run_dag(pool, plan->n_steps, plan->n_preds, plan->succ_off, plan->succ, NULL,
                             run_step, &rc);
  }
  pthread_mutex_destroy(&rc.lock);
  if (result != 0) {
    fg_status_set(st, rc.failed ? rc.code : FG_INVALID_ARGUMENT, "%s",
                  rc.failed                     ? rc.err
                  : rc.nan_step < plan->n_steps ? rc.nan_err
                                                : "run failed");
    return -1;
  }
  if (rc.nan_step < plan->n_steps) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "%s", rc.nan_err);
    return -1;
  }
  return 0;
}
