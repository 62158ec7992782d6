/* The ranks agree to start every run that holds collectives (executor/dist/exec.h
 * fg_dist_run_agree; label dist): a run refused before it starts on one
 * rank (its feed's dtype or shape, its plan, check_numerics) stops the
 * peers at once, told why, instead of leaving them in the run's first
 * all_reduce until the deadline; ranks asking for different collectives
 * are refused alike; runs without collectives take no part. Two threads
 * with an in-process group stand in for two processes (the MPI runs are in
 * test_mpi.c, mpi_run_refused_*), each following a script of runs.
 * Reference: SGD on the full batch of the linear regression, worked out
 * here in double. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/comm/comm_inproc.h"
#include "fgtest.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"
#include "test_dist_util.h"

enum { ROWS = 6, FEAT = 3, MAX_RUNS = 8 };
#define LR      0.1
#define TIMEOUT 20.0

static const double W0[FEAT] = {0.5, -0.25, 0.125}, B0 = 0.1;
/* The name runs feed x under (a test renames it). */
static const char *x_name = "x";

static double xv(int i, int j) { return 0.25 * (double)((i * 5 + j * 2) % 7) - 0.5; }
static double yv(int i) { return 0.5 * (double)(i % 3) - 0.25; }

/* What a run of a script does. */
typedef enum {
  END = 0,
  TRAIN,      /* target "train" on this rank's 3 rows */
  BAD_DTYPE,  /* ... x fed as f32 (the placeholder is f64): refused by the feed check */
  BAD_ROWS,   /* ... y with 2 rows for x's 3: refused by the plan (shapes) */
  NAN_FEED,   /* ... x holding a NaN, check_numerics on: refused before it runs */
  EVAL,       /* fetch "loss": no collective */
  EVAL_BAD,   /* ... with x as f32: refused, no collective */
  FETCH_GRAD, /* fetch the first all_reduce's output: fewer collectives than TRAIN */
  NULL_FEED,  /* TRAIN with x's tensor NULL (a loader that failed on this rank) */
  TRAIN_MD,   /* TRAIN with run metadata (agree_ns kept) */
  EVAL_MD,    /* EVAL with run metadata */
} run_kind;

typedef struct proc {
  fg_graph *g;
  fg_comm *comm;
  run_kind script[MAX_RUNS];
  int rc[MAX_RUNS];
  fg_code code[MAX_RUNS];
  char err[MAX_RUNS][1100]; /* a status message fits whole */
  double sec[MAX_RUNS];
  int64_t agree_ns[MAX_RUNS]; /* *_MD runs: fg_run_metadata's */
  double w[FEAT], b;
} proc;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The name of the first all_reduce node of g. */
static const char *first_all_reduce(const fg_graph *g) {
  for (int id = 0; id < g->n_nodes; id++)
    if (g->nodes[id].op == FG_OP_ALL_REDUCE) return g->nodes[id].name;
  return "(none)";
}

static int run_one(fg_session *s, proc *p, int k, fg_status *st) {
  const run_kind kind = p->script[k];
  int rank = p->comm->rank, rows = ROWS / 2;
  int64_t xd[2] = {rows, FEAT}, yd[2] = {kind == BAD_ROWS ? rows - 1 : rows, 1};
  int f32 = kind == BAD_DTYPE || kind == EVAL_BAD;
  fg_tensor *x = fg_tensor_new(f32 ? FG_F32 : FG_F64, 2, xd, st);
  fg_tensor *y = fg_tensor_new(FG_F64, 2, yd, st);
  if (!x || !y) return -1;
  for (int i = 0; i < rows; i++)
    for (int j = 0; j < FEAT; j++) {
      double v = kind == NAN_FEED && i == 1 && j == 2 ? NAN : xv(rank * rows + i, j);
      if (f32)
        ((float *)fg_tensor_data(x))[i * FEAT + j] = (float)v;
      else
        ((double *)fg_tensor_data(x))[i * FEAT + j] = v;
    }
  for (int i = 0; i < yd[0]; i++)
    ((double *)fg_tensor_data(y))[i] = yv(rank * rows + i);
  fg_feed feeds[2] = {{x_name, kind == NULL_FEED ? NULL : x}, {"y", y}};
  const char *fetch = kind == FETCH_GRAD ? first_all_reduce(p->g) : "loss", *target = "train";
  fg_tensor *out = NULL;
  const int eval = kind == EVAL || kind == EVAL_BAD || kind == FETCH_GRAD || kind == EVAL_MD;
  fg_run_options ro = {kind == TRAIN_MD || kind == EVAL_MD};
  fg_run_metadata *md = NULL;
  int rc = eval ? fg_session_run_ex(s, feeds, 2, &fetch, 1, &out, NULL, 0, &ro, &md, st)
                : fg_session_run_ex(s, feeds, 2, NULL, 0, NULL, &target, 1, &ro, &md, st);
  p->agree_ns[k] = md ? md->agree_ns : -1;
  fg_run_metadata_free(md);
  fg_tensor_free(out);
  fg_tensor_free(x);
  fg_tensor_free(y);
  return rc;
}

static void *proc_main(void *arg) {
  proc *p = arg;
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.check_numerics = 1;
  fg_session *s = fg_session_new(p->g, &o, st);
  int ok = s && fg_session_set_comm(s, p->comm, st) == 0;
  for (int k = 0; k < MAX_RUNS && p->script[k] != END; k++) {
    double t0 = now_s();
    p->rc[k] = ok ? run_one(s, p, k, st) : -1;
    p->sec[k] = now_s() - t0;
    p->code[k] = fg_status_code(st);
    snprintf(p->err[k], sizeof p->err[k], "%s", fg_status_message(st));
  }
  fg_tensor *w = ok ? fg_session_variable(s, "w", st) : NULL;
  fg_tensor *b = ok ? fg_session_variable(s, "b", st) : NULL;
  if (w && b) {
    memcpy(p->w, fg_tensor_data(w), sizeof p->w);
    p->b = *(const double *)fg_tensor_data(b);
  }
  fg_tensor_free(w);
  fg_tensor_free(b);
  fg_session_free(s);
  fg_status_free(st);
  return NULL;
}

/* The replicas = 1 rewrite of the linear regression; with `per_gradient`
 * every gradient gets an all_reduce of its own. */
static fg_graph *model(int per_gradient) {
  fg_graph *g = dist_linreg(FEAT, W0, B0, LR, 0);
  fg_status *st = fg_status_new();
  fg_data_parallel_options o;
  fg_data_parallel_options_init(&o);
  if (per_gradient) o.bucket_bytes = 1;
  const char *batch[2] = {"x", "y"};
  fg_graph *dg = fg_data_parallel(g, 1, batch, 2, &o, st);
  if (!dg) fprintf(stderr, "model: %s\n", fg_status_message(st));
  fg_status_free(st);
  fg_graph_free(g);
  return dg;
}

/* Runs the two scripts on two threads; p[r] filled. */
static void run_scripts(fg_graph *g, const run_kind *s0, const run_kind *s1, proc p[2]) {
  fg_comm *h[2];
  memset(p, 0, 2 * sizeof *p);
  if (fg_comm_inproc_group(2, TIMEOUT, h, NULL) != 0) {
    FG_FAIL_AT("cannot make an in-process group");
    return;
  }
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    p[r].g = g;
    p[r].comm = h[r];
    /* Up to the script's END (the rest of p is zero: END). */
    const run_kind *src = r ? s1 : s0;
    for (int k = 0; k < MAX_RUNS && src[k] != END; k++)
      p[r].script[k] = src[k];
    pthread_create(&th[r], NULL, proc_main, &p[r]);
  }
  for (int r = 0; r < 2; r++)
    pthread_join(th[r], NULL);
  for (int r = 0; r < 2; r++)
    h[r]->ops->free(h[r]);
}

/* w and b after `steps` SGD steps on the full batch of 6 rows (mean
 * squared error): what every rank must hold. */
static void reference(int steps, double w[FEAT], double *b) {
  memcpy(w, W0, sizeof W0);
  *b = B0;
  for (int k = 0; k < steps; k++) {
    double gw[FEAT] = {0}, gb = 0;
    for (int i = 0; i < ROWS; i++) {
      double d = *b - yv(i);
      for (int j = 0; j < FEAT; j++)
        d += xv(i, j) * w[j];
      for (int j = 0; j < FEAT; j++)
        gw[j] += 2 * d * xv(i, j) / ROWS;
      gb += 2 * d / ROWS;
    }
    for (int j = 0; j < FEAT; j++)
      w[j] -= LR * gw[j];
    *b -= LR * gb;
  }
}

/* Both ranks hold the reference after `steps` good steps, bit for bit the
 * same as each other. */
static void check_trained(const proc p[2], int steps) {
  double w[FEAT], b;
  reference(steps, w, &b);
  for (int r = 0; r < 2; r++) {
    for (int j = 0; j < FEAT; j++)
      if (!(fabs(p[r].w[j] - w[j]) <= 1e-12 * fmax(1, fabs(w[j]))))
        FG_FAIL_AT("rank %d: w[%d] = %.17g, want %.17g after %d steps", r, j, p[r].w[j], w[j],
                   steps);
    if (!(fabs(p[r].b - b) <= 1e-12)) FG_FAIL_AT("rank %d: b = %.17g, want %.17g", r, p[r].b, b);
  }
  FG_CHECK(memcmp(p[0].w, p[1].w, sizeof p[0].w) == 0 && p[0].b == p[1].b);
  FG_CHECK(w[0] != W0[0]); /* the reference moved */
}

/* Run k: rank `bad` refused with `code` (its own message containing
 * `why`), the other rank stopped at once with FG_ABORTED, told why. */
static void check_refused(const proc p[2], int k, int bad, fg_code code, const char *why) {
  const proc *me = &p[bad], *peer = &p[1 - bad];
  FG_CHECK(me->rc[k] != 0 && peer->rc[k] != 0);
  FG_CHECK_INT(me->code[k], code);
  FG_CHECK_STR_CONTAINS(me->err[k], why);
  FG_CHECK_INT(peer->code[k], FG_ABORTED);
  char want[200];
  snprintf(want, sizeof want,
           "rank %d of 2 in this process's data-parallel group refused the run before it "
           "started, so no rank ran it: ",
           bad);
  FG_CHECK_STR_CONTAINS(peer->err[k], want);
  FG_CHECK_STR_CONTAINS(peer->err[k], why);
  /* Not the deadline: at once. */
  if (!(peer->sec[k] < TIMEOUT / 4))
    FG_FAIL_AT("run %d: the peer took %.2f s to stop", k, peer->sec[k]);
}

static void refused_case(int bad, run_kind kind, fg_code code, const char *why) {
  fg_graph *g = model(0);
  FG_REQUIRE(g);
  /* The refusing rank retries at once: its retry pairs with the peer's
   * next run, never with the refused one. */
  run_kind good[] = {TRAIN, TRAIN, TRAIN, TRAIN, END}, badrun[] = {TRAIN, kind, TRAIN, TRAIN, END};
  proc p[2];
  run_scripts(g, bad ? good : badrun, bad ? badrun : good, p);
  FG_CHECK(p[0].rc[0] == 0 && p[1].rc[0] == 0);
  check_refused(p, 1, bad, code, why);
  for (int k = 2; k < 4; k++)
    if (p[0].rc[k] || p[1].rc[k]) FG_FAIL_AT("run %d: %s | %s", k, p[0].err[k], p[1].err[k]);
  check_trained(p, 3);
  fg_graph_free(g);
}

FG_TEST(dist_run_refused_feed_dtype_stops_peer, "dist,badinput") {
  refused_case(1, BAD_DTYPE, FG_INVALID_ARGUMENT, "feed 'x': expected f64 [?,3], given f32 [3,3]");
}
/* The lowest refusing rank tells the others; here rank 0. */
FG_TEST(dist_run_refused_on_rank0_stops_peer, "dist,badinput") {
  refused_case(0, BAD_DTYPE, FG_INVALID_ARGUMENT, "feed 'x': expected f64 [?,3], given f32 [3,3]");
}
/* Refused by the plan: y's 2 rows do not broadcast against x's 3. */
FG_TEST(dist_run_refused_by_plan_stops_peer, "dist,badinput") {
  refused_case(1, BAD_ROWS, FG_INVALID_ARGUMENT,
               "input 0 shape [3,1] and input 1 shape [2,1] do not broadcast");
}
FG_TEST(dist_run_refused_null_feed_stops_peer, "dist,badinput") {
  refused_case(1, NULL_FEED, FG_INVALID_ARGUMENT, "feed 0 ('x'): tensor is NULL");
}
FG_TEST(dist_run_refused_by_check_numerics_stops_peer, "dist,badinput") {
  refused_case(1, NAN_FEED, FG_INVALID_ARGUMENT, "feed 'x' (placeholder): holds 1 NaN and 0 Inf");
}

/* Both ranks refuse the same run, for their own reasons: each returns its
 * own error (not ABORTED), and the next runs train. */
FG_TEST(dist_run_refused_on_every_rank_keeps_own_errors, "dist,badinput") {
  fg_graph *g = model(0);
  FG_REQUIRE(g);
  run_kind s0[] = {BAD_DTYPE, TRAIN, TRAIN, END}, s1[] = {BAD_ROWS, TRAIN, TRAIN, END};
  proc p[2];
  run_scripts(g, s0, s1, p);
  FG_CHECK_INT(p[0].code[0], FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(p[0].err[0], "feed 'x': expected f64");
  FG_CHECK_INT(p[1].code[0], FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(p[1].err[0],
                        "input 0 shape [3,1] and input 1 shape [2,1] do not broadcast");
  FG_CHECK(p[0].rc[1] == 0 && p[1].rc[1] == 0 && p[0].rc[2] == 0 && p[1].rc[2] == 0);
  check_trained(p, 2);
  fg_graph_free(g);
}

/* Runs without collectives take no part: rank 0 evaluates alone three
 * times (the ranks' run counts drift), and a refused evaluation on rank 1
 * stops nobody; then a refusal in a training run still stops the peer, and
 * training goes on. */
FG_TEST(dist_run_without_collectives_takes_no_part, "dist,badinput") {
  fg_graph *g = model(0);
  FG_REQUIRE(g);
  run_kind s0[] = {EVAL, EVAL, EVAL, TRAIN, TRAIN, TRAIN, END};
  run_kind s1[] = {EVAL_BAD, TRAIN, BAD_DTYPE, TRAIN, END};
  proc p[2];
  run_scripts(g, s0, s1, p);
  for (int k = 0; k < 3; k++)
    FG_CHECK(p[0].rc[k] == 0);
  FG_CHECK_INT(p[1].code[0], FG_INVALID_ARGUMENT);
  FG_CHECK(p[0].rc[3] == 0 && p[1].rc[1] == 0);
  /* rank 0's run 4 is rank 1's run 2 */
  FG_CHECK_INT(p[1].code[2], FG_INVALID_ARGUMENT);
  FG_CHECK_INT(p[0].code[4], FG_ABORTED);
  FG_CHECK_STR_CONTAINS(p[0].err[4], "rank 1 of 2 in this process's data-parallel group refused");
  FG_CHECK(p[0].sec[4] < TIMEOUT / 4);
  FG_CHECK(p[0].rc[5] == 0 && p[1].rc[3] == 0);
  check_trained(p, 2);
  fg_graph_free(g);
}

/* Rank 1 fetches the first bucket's reduced gradient while rank 0 trains:
 * their runs hold different collectives, which would pair the wrong
 * all_reduce nodes. Both are refused alike, at once, and then train. */
FG_TEST(dist_run_different_collectives_refused_alike, "dist,badinput") {
  fg_graph *g = model(1);
  FG_REQUIRE(g);
  int n_ar = 0;
  for (int id = 0; id < g->n_nodes; id++)
    n_ar += g->nodes[id].op == FG_OP_ALL_REDUCE;
  FG_CHECK(n_ar >= 2);
  run_kind s0[] = {TRAIN, TRAIN, TRAIN, END}, s1[] = {FETCH_GRAD, TRAIN, TRAIN, END};
  proc p[2];
  run_scripts(g, s0, s1, p);
  for (int r = 0; r < 2; r++) {
    FG_CHECK_INT(p[r].code[0], FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(p[r].err[0], "ranks asked for different runs: in this process's "
                                       "data-parallel group rank 0's run has key 0x");
    FG_CHECK(p[r].sec[0] < TIMEOUT / 4);
    FG_CHECK(p[r].rc[1] == 0 && p[r].rc[2] == 0);
  }
  FG_CHECK(strcmp(p[0].err[0], p[1].err[0]) == 0);
  check_trained(p, 2);
  fg_graph_free(g);
}

/* A refusal whose message is longer than what the ranks send each other
 * (512 bytes): x renamed to 900 characters. The refusing rank keeps its
 * whole message; the peer's quotes the first part of it, cut cleanly. */
FG_TEST(dist_run_refused_long_reason_is_cut, "dist,badinput") {
  fg_graph *g = model(0);
  FG_REQUIRE(g);
  static char name[901];
  memset(name, 'x', 900);
  name[900] = 0;
  int id = fg_graph_find(g, "x");
  FG_REQUIRE(id >= 0);
  FG_REQUIRE(fg_set_name(g, (fg_output){id, 0}, name).node == id);
  x_name = name;
  run_kind good[] = {TRAIN, TRAIN, END}, bad[] = {BAD_DTYPE, TRAIN, END};
  proc p[2];
  run_scripts(g, good, bad, p);
  x_name = "x";
  FG_CHECK_INT(p[1].code[0], FG_INVALID_ARGUMENT);
  FG_CHECK(strstr(p[1].err[0], name) != NULL); /* its own message, whole */
  FG_CHECK_INT(p[0].code[0], FG_ABORTED);
  FG_CHECK_STR_CONTAINS(p[0].err[0],
                        "refused the run before it started, so no rank ran it: feed '");
  /* 511 bytes of the reason at most, after the prefix. */
  const char *reason = strstr(p[0].err[0], "no rank ran it: ");
  FG_CHECK(reason && strlen(reason + strlen("no rank ran it: ")) == 511);
  FG_CHECK(p[0].rc[1] == 0 && p[1].rc[1] == 0);
  check_trained(p, 1);
  fg_graph_free(g);
}

/* Run metadata says how long the agreement took (agree_ns, not part of
 * run_ns): some time for a training run, 0 for a run without collectives. */
FG_TEST(dist_run_metadata_times_the_agreement, "dist") {
  fg_graph *g = model(0);
  FG_REQUIRE(g);
  run_kind s[] = {TRAIN, TRAIN_MD, EVAL_MD, END};
  proc p[2];
  run_scripts(g, s, s, p);
  for (int r = 0; r < 2; r++) {
    FG_CHECK(p[r].rc[0] == 0 && p[r].rc[1] == 0 && p[r].rc[2] == 0);
    FG_CHECK(p[r].agree_ns[1] > 0 && p[r].agree_ns[1] < (int64_t)5e9);
    FG_CHECK(p[r].agree_ns[2] == 0);
  }
  check_trained(p, 2);
  fg_graph_free(g);
}
