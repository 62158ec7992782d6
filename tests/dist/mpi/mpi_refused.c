/* A program test_mpi.c starts under mpirun: a session run refused before
 * it starts on some ranks (executor/dist/exec.h fg_dist_run_agree), over
 * fg_data_parallel's replicas = 1 rewrite of a small softmax regression
 * (every training run all-reduces), communicator timeout 30 s.
 *
 *   mpi_refused alone    run 1 trains on every rank; in run 2 rank 1 feeds
 *                        x as f64 (refused: the placeholder is f32) while
 *                        the others train: they stop long before the
 *                        timeout, told why; rank 1 retries at once, and
 *                        runs 3 and 4 train on every rank
 *   mpi_refused alike    run 2 fetches a name no rank's graph has, on every
 *                        rank: all refused alike; then a broadcast of the
 *                        variables (a collective outside runs) and runs 3
 *                        and 4 train on every rank
 *   mpi_refused nocoll   run 2 is an evaluation (fetch "loss", no
 *                        collective), refused on rank 1 only; run 3 trains
 *                        on every rank
 *
 * Each rank prints "rank R: run K: ok", "rank R: run K: CODE after S s:
 * MESSAGE", "rank R: broadcast: ok", "rank R: checksum 0x..." (its
 * variable's bytes, which must be every rank's) and finally "rank R: as
 * expected" (or "NOT as expected"). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm/comm_mpi.h"
#include "flowgraph/flowgraph.h"

enum { IN = 8, OUT = 4, ROWS = 6 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static fg_graph *build(fg_status *st) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, IN}, yd[1] = {FG_DIM_UNKNOWN}, wd[2] = {IN, OUT};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  fg_tensor *w = fg_tensor_new(FG_F32, 2, wd, st);
  for (int i = 0; w && i < IN * OUT; i++)
    ((float *)fg_tensor_data(w))[i] = 0.01f * (float)(i % 7) - 0.03f;
  fg_output logits = fg_matmul(g, x, fg_variable(g, "w", w), 0, 0);
  fg_tensor_free(w);
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, y), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = 0.1;
  fg_minimize(g, loss, NULL, 0, &cfg, st);
  const char *bi[] = {"x", "y"};
  fg_graph *dg = fg_graph_status(g, st) == FG_OK ? fg_data_parallel(g, 1, bi, 2, NULL, st) : NULL;
  fg_graph_free(g);
  return dg;
}

/* One run: `bad_dtype` feeds x as f64; `fetch` NULL trains. 0 or -1, and
 * a line saying which. */
static int run(fg_session *s, const fg_graph *g, int rank, int k, int bad_dtype, const char *fetch,
               fg_status *st) {
  int64_t xd[2] = {ROWS, IN}, yd[1] = {ROWS};
  fg_tensor *x = fg_tensor_new(bad_dtype ? FG_F64 : FG_F32, 2, xd, st);
  fg_tensor *y = fg_tensor_new(FG_I32, 1, yd, st);
  for (int i = 0; x && i < ROWS * IN; i++) {
    double v = 0.1 * (double)((i * 7 + rank) % 11) - 0.5;
    if (bad_dtype)
      ((double *)fg_tensor_data(x))[i] = v;
    else
      ((float *)fg_tensor_data(x))[i] = (float)v;
  }
  for (int i = 0; y && i < ROWS; i++)
    ((int32_t *)fg_tensor_data(y))[i] = (i + rank) % OUT;
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *target = fg_graph_metadata(g, "train_target");
  fg_tensor *out = NULL;
  double t0 = now_s();
  int rc = fetch ? fg_session_run(s, feeds, 2, &fetch, 1, &out, NULL, 0, st)
                 : fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st);
  if (rc == 0)
    printf("rank %d: run %d: ok\n", rank, k);
  else
    printf("rank %d: run %d: %s after %.2f s: %s\n", rank, k, fg_code_name(fg_status_code(st)),
           now_s() - t0, fg_status_message(st));
  fflush(stdout);
  fg_tensor_free(out);
  fg_tensor_free(x);
  fg_tensor_free(y);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  const char *mode = argv[1];
  fg_status *st = fg_status_new();
  fg_comm *c = fg_comm_mpi_new(30, st);
  if (!c) {
    printf("rank -1: %s\n", fg_status_message(st));
    return 3;
  }
  const int r = c->rank;
  fg_graph *g = build(st);
  fg_session *s = g ? fg_session_new(g, NULL, st) : NULL;
  int ok = s && fg_session_set_comm(s, c, st) == 0;
  if (!ok) printf("rank %d: setup: %s\n", r, fg_status_message(st));
  ok = ok && run(s, g, r, 1, 0, NULL, st) == 0;
  if (ok && strcmp(mode, "alone") == 0) {
    int rc = run(s, g, r, 2, r == 1, NULL, st);
    ok = rc != 0 && fg_status_code(st) == (r == 1 ? FG_INVALID_ARGUMENT : FG_ABORTED);
    ok = ok && run(s, g, r, 3, 0, NULL, st) == 0 && run(s, g, r, 4, 0, NULL, st) == 0;
  } else if (ok && strcmp(mode, "alike") == 0) {
    ok = run(s, g, r, 2, 0, "no_such_node", st) != 0 && fg_status_code(st) == FG_NOT_FOUND;
    if (ok && fg_session_broadcast_variables(s, 0, st) == 0) {
      printf("rank %d: broadcast: ok\n", r);
    } else {
      printf("rank %d: broadcast: %s\n", r, fg_status_message(st));
      ok = 0;
    }
    ok = ok && run(s, g, r, 3, 0, NULL, st) == 0 && run(s, g, r, 4, 0, NULL, st) == 0;
  } else if (ok && strcmp(mode, "nocoll") == 0) {
    int rc = run(s, g, r, 2, r == 1, "loss", st);
    ok = r == 1 ? rc != 0 : rc == 0;
    ok = ok && run(s, g, r, 3, 0, NULL, st) == 0;
  }
  fg_tensor *w = ok ? fg_session_variable(s, "w", st) : NULL;
  if (w) {
    uint64_t sum = 1469598103934665603ull; /* FNV-1a of w's bytes */
    const unsigned char *b = fg_tensor_data(w);
    for (size_t i = 0; i < fg_tensor_num_bytes(w); i++)
      sum = (sum ^ b[i]) * 1099511628211ull;
    printf("rank %d: checksum 0x%016llx\n", r, (unsigned long long)sum);
  }
  fg_tensor_free(w);
  fg_session_free(s);
  fg_graph_free(g);
  c->ops->free(c);
  fg_status_free(st);
  printf("rank %d: %s\n", r, ok ? "as expected" : "NOT as expected");
  fflush(stdout);
  /* A refused run leaves the communicator usable: every rank finalizes. */
  fg_mpi_shutdown(ok ? 0 : 1);
  return ok ? 0 : 1;
}
