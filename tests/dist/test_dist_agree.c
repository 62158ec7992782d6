/* The graph-hash check for sessions across processes (label dist): before the first run with
 * an attached communicator the processes compare their graphs and their
 * replicas' variable values, and fg_session_broadcast_variables gives every
 * replica rank 0's values (as PyTorch DDP does when it wraps a model). Two
 * threads with an in-process group stand in for two processes; the MPI
 * runs of the CLI are in test_mpi_train.c. Reference: SGD on the full batch
 * worked out here in double. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm/comm_inproc.h"
#include "fgtest.h"
#include "graph/graph_internal.h"
#include "test_dist_util.h"

enum { ROWS = 6, FEAT = 3, STEPS = 3 };

static double xs[ROWS][FEAT], ys[ROWS];

static void make_data(void) {
  for (int i = 0; i < ROWS; i++) {
    for (int j = 0; j < FEAT; j++)
      xs[i][j] = 0.25 * (double)((i * 5 + j * 2) % 7) - 0.5;
    ys[i] = 0.5 * (double)(i % 3) - 0.25;
  }
}

/* Linear regression, loss = mean squared error, SGD at `lr`, w starting at
 * w0 (b at 0.1), rewritten for one replica per process. */
static fg_graph *replica_model(double lr, const double w0[FEAT]) {
  fg_graph *g = dist_linreg(FEAT, w0, 0.1, lr, 0);
  fg_status *st = fg_status_new();
  const char *batch[2] = {"x", "y"};
  fg_graph *dg = fg_data_parallel(g, 1, batch, 2, NULL, st);
  if (!dg) fprintf(stderr, "replica_model: %s\n", fg_status_message(st));
  fg_status_free(st);
  fg_graph_free(g);
  return dg;
}

/* One "process": its graph, its handle of the group, what it did. */
typedef struct proc {
  fg_graph *g;
  fg_comm *comm;
  int broadcast_root; /* >= 0: call fg_session_broadcast_variables first */
  int first_rc, rc;   /* the first run's result; the whole job's */
  fg_code first_code, code;
  char first_err[600], err[600];
  double w[FEAT], b;
} proc;

/* Rows [rank * 3, rank * 3 + 3) of every step's full batch. */
static int run_steps(fg_session *s, int rank, int steps, fg_status *st) {
  int64_t xd[2] = {ROWS / 2, FEAT}, yd[2] = {ROWS / 2, 1};
  fg_tensor *x = fg_tensor_from_data(FG_F64, 2, xd, xs[rank * 3], sizeof(double) * 3 * FEAT, st);
  fg_tensor *y = fg_tensor_from_data(FG_F64, 2, yd, ys + rank * 3, sizeof(double) * 3, st);
  int rc = x && y ? 0 : -1;
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *target = "train";
  for (int k = 0; rc == 0 && k < steps; k++)
    rc = fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st);
  fg_tensor_free(x);
  fg_tensor_free(y);
  return rc;
}

/* Runs fn(p0) and fn(p1) on two threads, as two processes; returns the
 * seconds both took. */
static double run_pair(void *(*fn)(void *), void *p0, void *p1) {
  pthread_t th[2];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pthread_create(&th[0], NULL, fn, p0);
  pthread_create(&th[1], NULL, fn, p1);
  pthread_join(th[0], NULL);
  pthread_join(th[1], NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

static void *proc_main(void *p) {
  proc *a = p;
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(a->g, NULL, st);
  a->rc = !s || fg_session_set_comm(s, a->comm, st) != 0 ? -1 : 0;
  if (a->rc == 0) {
    /* Without a broadcast the first run meets the check as it comes. */
    a->first_rc = run_steps(s, a->comm->rank, 1, st);
    a->first_code = fg_status_code(st);
    snprintf(a->first_err, sizeof a->first_err, "%s", fg_status_message(st));
    if (a->first_rc != 0 && a->broadcast_root >= 0)
      a->rc = fg_session_broadcast_variables(s, a->broadcast_root, st);
    else
      a->rc = a->first_rc;
    if (a->rc == 0 && a->broadcast_root >= 0) a->rc = run_steps(s, a->comm->rank, STEPS, st);
  }
  a->code = fg_status_code(st);
  snprintf(a->err, sizeof a->err, "%s", fg_status_message(st));
  fg_tensor *w = a->rc == 0 ? fg_session_variable(s, "w", st) : NULL;
  fg_tensor *b = a->rc == 0 ? fg_session_variable(s, "b", st) : NULL;
  if (w && b) {
    memcpy(a->w, fg_tensor_data(w), sizeof a->w);
    a->b = *(const double *)fg_tensor_data(b);
  }
  fg_tensor_free(w);
  fg_tensor_free(b);
  fg_session_free(s);
  fg_status_free(st);
  return NULL;
}

/* Runs the two processes on graphs g0 and g1; returns the wall time. */
static double run_two(fg_graph *g0, fg_graph *g1, int broadcast_root, proc out[2]) {
  fg_comm *h[2];
  fg_status *st = fg_status_new();
  int ok = fg_comm_inproc_group(2, 10, h, st) == 0;
  fg_status_free(st);
  memset(out, 0, 2 * sizeof *out);
  if (!ok) {
    FG_FAIL_AT("cannot make an in-process group");
    out[0].rc = out[1].rc = out[0].first_rc = out[1].first_rc = -1;
    return -1;
  }
  for (int r = 0; r < 2; r++) {
    out[r].g = r ? g1 : g0;
    out[r].comm = h[r];
    out[r].broadcast_root = broadcast_root;
  }
  double secs = run_pair(proc_main, &out[0], &out[1]);
  h[0]->ops->free(h[0]);
  h[1]->ops->free(h[1]);
  return secs;
}

static const double W_A[FEAT] = {0.5, -0.25, 0.125}, W_B[FEAT] = {0.3, 0.2, -0.1};

/* Process 1's graph has a node more: both processes' first run fails,
 * naming both hashes, before any all_reduce (no wait for the timeout).
 * Built with another learning rate (the value of fg_minimize's rate
 * variable, like a weight's), it fails the variables' check instead. The
 * same graph on both runs. */
FG_TEST(dist_processes_must_hold_the_same_graph, "dist,badinput") {
  make_data();
  fg_graph *g0 = replica_model(0.1, W_A), *g1 = replica_model(0.1, W_A);
  FG_REQUIRE(g0 && g1);
  fg_set_name(g1, fg_scalar(g1, FG_F64, 2), "k");
  proc p[2];
  double sec = run_two(g0, g1, -1, p);
  for (int r = 0; r < 2; r++) {
    FG_CHECK(p[r].first_rc != 0);
    FG_CHECK_INT(p[r].first_code, FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(p[r].first_err, "ranks disagree on the graph: rank 0 has graph hash 0x");
    FG_CHECK_STR_CONTAINS(p[r].first_err, ", rank 1 has 0x");
    FG_CHECK_STR_CONTAINS(p[r].first_err, "every process must build or load the same graph");
  }
  FG_CHECK(sec < 5);
  fg_graph_free(g1);
  g1 = replica_model(0.2, W_A);
  FG_REQUIRE(g1);
  run_two(g0, g1, -1, p);
  for (int r = 0; r < 2; r++) {
    FG_CHECK(p[r].first_rc != 0);
    FG_CHECK_INT(p[r].first_code, FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(p[r].first_err, "ranks disagree on the variables");
  }
  fg_graph_free(g1);
  g1 = replica_model(0.1, W_A);
  run_two(g0, g1, -1, p);
  for (int r = 0; r < 2; r++) {
    FG_CHECK_INT(p[r].first_rc, 0);
    if (p[r].first_rc) fprintf(stderr, "process %d: %s\n", r, p[r].first_err);
  }
  fg_graph_free(g0);
  fg_graph_free(g1);
}

/* SGD on the full batch (ROWS rows) from w, b, by hand in double. */
static void sgd_reference(double w[FEAT], double *b, double lr, int steps) {
  for (int k = 0; k < steps; k++) {
    double gw[FEAT] = {0}, gb = 0;
    for (int i = 0; i < ROWS; i++) {
      double r = *b - ys[i];
      for (int j = 0; j < FEAT; j++)
        r += xs[i][j] * w[j];
      for (int j = 0; j < FEAT; j++)
        gw[j] += 2.0 * r * xs[i][j] / ROWS;
      gb += 2.0 * r / ROWS;
    }
    for (int j = 0; j < FEAT; j++)
      w[j] -= lr * gw[j];
    *b -= lr * gb;
  }
}

/* Replicas initialised differently (w drawn per process): the first run
 * fails on both, naming the variables and the way out; after
 * fg_session_broadcast_variables from rank 0 both train as one process on
 * the full batch from rank 0's values, and end with the same bits. */
FG_TEST(dist_replicas_start_alike_or_broadcast, "dist,badinput") {
  make_data();
  fg_graph *g0 = replica_model(0.1, W_A), *g1 = replica_model(0.1, W_B);
  FG_REQUIRE(g0 && g1);
  proc p[2];
  run_two(g0, g1, 0, p);
  double w[FEAT] = {W_A[0], W_A[1], W_A[2]}, b = 0.1;
  sgd_reference(w, &b, 0.1, STEPS);
  for (int r = 0; r < 2; r++) {
    FG_CHECK(p[r].first_rc != 0);
    FG_CHECK_INT(p[r].first_code, FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(p[r].first_err,
                          "ranks disagree on the variables: rank 0 has variables hash 0x");
    FG_CHECK_STR_CONTAINS(p[r].first_err, "fg_session_broadcast_variables");
    FG_CHECK_INT(p[r].rc, 0);
    if (p[r].rc) fprintf(stderr, "process %d: %s\n", r, p[r].err);
    for (int j = 0; j < FEAT; j++)
      FG_CHECK(fabs(p[r].w[j] - w[j]) <= 1e-12 * fabs(w[j]));
    FG_CHECK(fabs(p[r].b - b) <= 1e-12 * fabs(b));
  }
  FG_CHECK(memcmp(p[0].w, p[1].w, sizeof p[0].w) == 0 && p[0].b == p[1].b);
  /* From rank 1's values instead: rank 1's start. */
  run_two(g0, g1, 1, p);
  double w1[FEAT] = {W_B[0], W_B[1], W_B[2]}, b1 = 0.1;
  sgd_reference(w1, &b1, 0.1, STEPS);
  for (int r = 0; r < 2; r++)
    for (int j = 0; j < FEAT; j++)
      FG_CHECK(fabs(p[r].w[j] - w1[j]) <= 1e-12 * fabs(w1[j]));
  fg_graph_free(g0);
  fg_graph_free(g1);
}

/* Bad calls: a root that is not a replica is refused on every process
 * alike (before anything is exchanged); without a communicator the call
 * does nothing; a NULL session is refused. */
FG_TEST(dist_broadcast_variables_bad_calls, "dist,badinput") {
  make_data();
  fg_status *st = fg_status_new();
  fg_graph *g = replica_model(0.1, W_A);
  FG_REQUIRE(g);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  FG_CHECK_INT(fg_session_broadcast_variables(s, 5, st), 0);
  fg_comm *h[2];
  FG_REQUIRE(fg_comm_inproc_group(2, 1, h, st) == 0);
  FG_REQUIRE(fg_session_set_comm(s, h[0], st) == 0);
  FG_CHECK(fg_session_broadcast_variables(s, 2, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "root 2 is not a replica (0 to 1)");
  FG_CHECK(fg_session_broadcast_variables(s, -1, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "root -1 is not a replica (0 to 1)");
  FG_CHECK(fg_session_broadcast_variables(NULL, 0, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "session is NULL");
  /* The peer never takes part: a deadline (1 s) in the check before the
   * broadcasts. */
  FG_CHECK(fg_session_broadcast_variables(s, 1, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_DEADLINE_EXCEEDED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "fg_session_broadcast_variables: ");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "only 1 rank arrived");
  fg_session_set_comm(s, NULL, st);
  fg_session_free(s);
  h[0]->ops->free(h[0]);
  h[1]->ops->free(h[1]);
  fg_graph_free(g);
  fg_status_free(st);
}

/* One process's fg_session_broadcast_variables from `root`. */
typedef struct bcast_proc {
  fg_graph *g;
  fg_comm *comm;
  int root, rc;
  fg_code code;
  char err[600];
  double w0; /* w[0] afterwards */
} bcast_proc;

static void *bcast_main(void *p) {
  bcast_proc *a = p;
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(a->g, NULL, st);
  a->rc = !s || fg_session_set_comm(s, a->comm, st) != 0
              ? -1
              : fg_session_broadcast_variables(s, a->root, st);
  a->code = fg_status_code(st);
  snprintf(a->err, sizeof a->err, "%s", fg_status_message(st));
  fg_tensor *w = s ? fg_session_variable(s, "w", st) : NULL;
  a->w0 = w ? ((const double *)fg_tensor_data(w))[0] : 0;
  fg_tensor_free(w);
  fg_session_free(s);
  fg_status_free(st);
  return NULL;
}

/* The graph-hash check for the broadcast itself: processes whose graphs or variables differ,
 * or that name different roots, are refused on both before any variable
 * moves (a broadcast pairing buffers of different sizes truncated, and
 * killed an MPI rank); no wait for the timeout. Both keep their values. */
FG_TEST(dist_broadcast_variables_refuses_mismatch, "dist,badinput") {
  make_data();
  static const double W_WIDE[4] = {0.5, -0.25, 0.125, 1};
  fg_graph *ga = replica_model(0.1, W_A), *gb = replica_model(0.1, W_B);
  /* A different graph: 4 features, so w has another size. */
  fg_graph *lin4 = dist_linreg(4, W_WIDE, 0.1, 0.1, 0);
  const char *batch[2] = {"x", "y"};
  fg_status *st = fg_status_new();
  fg_graph *gw = lin4 ? fg_data_parallel(lin4, 1, batch, 2, NULL, st) : NULL;
  FG_REQUIRE(ga && gb && gw);
  struct {
    fg_graph *g1;
    int root1;
    const char *what;
  } cases[2] = {{gw, 0,
                 "ranks disagree on the graph and variable sizes: rank 0 has graph and "
                 "variable sizes hash 0x"},
                {gb, 1,
                 "ranks disagree on the broadcast root: rank 0 has broadcast root hash "
                 "0x0000000000000000, rank 1 has 0x0000000000000001"}};
  for (int k = 0; k < 2; k++) {
    fg_comm *h[2];
    FG_REQUIRE(fg_comm_inproc_group(2, 10, h, st) == 0);
    bcast_proc p[2] = {{ga, h[0], 0, 0, FG_OK, "", 0},
                       {cases[k].g1, h[1], cases[k].root1, 0, FG_OK, "", 0}};
    FG_CHECK(run_pair(bcast_main, &p[0], &p[1]) < 5); /* refused, not timed out (10 s) */
    for (int r = 0; r < 2; r++) {
      FG_CHECK(p[r].rc != 0);
      FG_CHECK_INT(p[r].code, FG_INVALID_ARGUMENT);
      FG_CHECK_STR_CONTAINS(p[r].err, "fg_session_broadcast_variables: ");
      FG_CHECK_STR_CONTAINS(p[r].err, cases[k].what);
    }
    FG_CHECK(p[0].w0 == W_A[0]);
    FG_CHECK(p[1].w0 == (k == 0 ? W_WIDE[0] : W_B[0]));
    h[0]->ops->free(h[0]);
    h[1]->ops->free(h[1]);
  }
  fg_graph_free(ga);
  fg_graph_free(gb);
  fg_graph_free(gw);
  fg_graph_free(lin4);
  fg_status_free(st);
}

/* What the processes' graph hash covers: the learning rate (an
 * attribute), a constant's value, a node's name and the rank a device
 * names; not a variable's value (replicas may differ there until they
 * broadcast) nor the device within a process (each places its replica on
 * its own cpu:N or cuda:N). */
static uint64_t hash_of(double lr, const double w0[FEAT], const char *dev, const char *name,
                        double c) {
  fg_graph *g = dist_linreg(FEAT, w0, 0.1, lr, 0);
  fg_output k = fg_set_name(g, fg_scalar(g, FG_F64, c), name);
  if (dev) fg_set_device(g, k, dev);
  uint64_t h = fg_graph_status(g, NULL) == FG_OK ? fg_graph_structure_hash(g) : 0;
  fg_graph_free(g);
  return h;
}

FG_TEST(dist_graph_hash_covers_what_processes_share, "dist") {
  uint64_t base = hash_of(0.1, W_A, NULL, "k", 2);
  FG_CHECK(base != 0);
  FG_CHECK(hash_of(0.1, W_A, NULL, "k", 2) == base);
  FG_CHECK(hash_of(0.1, W_B, NULL, "k", 2) == base);
  FG_CHECK(hash_of(0.1, W_A, "cpu:1", "k", 2) == base);
  FG_CHECK(hash_of(0.1, W_A, "cuda:3", "k", 2) == base);
  /* The learning rate is a variable's value (fg_minimize), which the
   * variables' hash covers, as it covers w. */
  FG_CHECK(hash_of(0.2, W_A, NULL, "k", 2) == base);
  FG_CHECK(hash_of(0.1, W_A, NULL, "k", 3) != base);
  FG_CHECK(hash_of(0.1, W_A, NULL, "k2", 2) != base);
  uint64_t r0 = hash_of(0.1, W_A, "rank:0/cpu:0", "k", 2);
  FG_CHECK(r0 != base);
  FG_CHECK(hash_of(0.1, W_A, "rank:0/cpu:1", "k", 2) == r0);
  FG_CHECK(hash_of(0.1, W_A, "rank:1/cpu:0", "k", 2) != r0);
}
