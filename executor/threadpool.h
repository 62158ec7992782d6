/* A persistent pthread pool, created once per session. It runs a plan's
 * steps as a DAG (a step is dispatched when its dependency counter reaches
 * zero) and splits large kernels with parallel_for. Idle threads sleep on a
 * condition variable; they never spin.
 *
 * Determinism: parallel_for cuts [0, n) into chunks of `grain` elements
 * whatever the thread count, so a kernel that combines per-chunk results in
 * chunk order gives bitwise-identical results for any number of threads. */
#ifndef FG_THREADPOOL_H
#define FG_THREADPOOL_H

#include <stdint.h>

typedef struct fg_pool fg_pool;

/* n_threads >= 1 counts the calling thread: a pool of 1 has no workers and
 * runs everything inline. NULL on failure. */
fg_pool *fg_pool_new(int n_threads);
void fg_pool_free(fg_pool *p); /* accepts NULL; joins the workers */
int fg_pool_threads(const fg_pool *p);

/* Runs task `task` on worker `worker` (0 = the calling thread); returns 0,
 * or non-zero to stop the run (tasks not yet started are skipped). */
typedef int (*fg_pool_task_fn)(void *ctx, int task, int worker);

/* Runs n tasks whose direct successors are succ[succ_off[t] .. succ_off[t+1])
 * and whose predecessor counts are n_preds[t]. The calling thread takes part
 * and returns when every task has finished or one failed: then it returns
 * the first non-zero task result. `order` (optional, n entries) is a
 * permutation used to break ties among ready tasks, for the randomized
 * stress test; NULL = task index order. Returns -1 without running
 * anything when the DAG is malformed (offsets or successors out of range,
 * n_preds disagreeing with the successor lists, `order` not a permutation, a
 * cycle) or memory runs out. Worker 0 is the caller, 1..n-1 the pool's. */
int fg_pool_run_dag(fg_pool *p, int n, const int *n_preds, const int *succ_off, const int *succ,
                    const int *order, fg_pool_task_fn fn, void *ctx);

/* Calls fn(arg, begin, end) over [0, n) in chunks of `grain` (the last may be
 * shorter), spread over the pool's threads, and returns when all are done.
 * Callable from inside a DAG task (other workers help with the chunks) and
 * with p == NULL (runs inline). */
typedef void (*fg_range_fn)(void *arg, int64_t begin, int64_t end);
void fg_pool_parallel_for(fg_pool *p, int64_t n, int64_t grain, fg_range_fn fn, void *arg);
/* The same with the pool as void *: a kernel's fg_kparallel.parallel_for
 * (kernels/kernel.h). */
void fg_pool_parallel_for_fn(void *pool, int64_t n, int64_t grain, fg_range_fn fn, void *arg);

#endif
