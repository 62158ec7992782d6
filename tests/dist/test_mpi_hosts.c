/* MPI across two hosts (label dist). Two network namespaces with host names
 * of their own, joined by a veth link (tools/netns_hosts.sh), stand in for
 * two machines: mpirun runs on the first, Open MPI starts its daemon on the
 * second through the rsh launcher, ranks on different hosts talk TCP over
 * the link, and flowgraph groups ranks by host name. Unlike the pretend
 * hosts of test_mpi_train.c (FG_MPI_HOST), nothing here tells flowgraph or
 * Open MPI that the hosts share a machine, and the link can be cut.
 *  - `flowgraph train --dist mpi` over 2 hosts gives the losses and trained
 *    variables of one process (within 1e-5 relative) and of SGD by hand;
 *  - a link cut mid-training (a network partition: no peer dies, every
 *    message just stops) gives every rank on both sides a deadline error
 *    within the timeout, and once the link is back mpirun
 *    ends by itself;
 *  - a rank killed mid-training on the second host stops the other three
 *    within the timeout, one deadline naming it. */
#include <pthread.h>
#include <stdatomic.h>

#include "mpi/mpi_lin.h"
#include "mpi/mpi_procs.h"
#include "mpi/netns_hosts.h"

/* mpirun over the two hosts, n0 ranks on the first and n1 on the second,
 * training lin.fgb in batches of `batch`; checks the gradients' path rank 0
 * reports (`path`) and the results against one process. */
static void check_hosts_train(int n0, int n1, const char *batch, const char *path) {
  MPI_REQUIRED();
  netns_hosts h;
  FG_REQUIRE(setup_linreg() == 0);
  NETNS_HOSTS_REQUIRED2(&h, n0, n1);
  run_result *res = malloc(sizeof *res);
  if (!res) netns_hosts_down(&h);
  FG_REQUIRE(res);
  mpi_train_at(h.where, 0, n0 + n1, "lin.fgb", batch, NULL, "mpi.fgb", res);
  netns_hosts_down(&h);
  FG_CHECK_INT(res->status, 0);
  /* Open MPI's own map: the ranks went where asked. */
  FG_CHECK_INT(netns_hosts_procs(&h, res->out, 0), n0);
  FG_CHECK_INT(netns_hosts_procs(&h, res->out, 1), n1);
  FG_CHECK_STR_CONTAINS(res->out, path);
  check_vs_single_train(res, batch);
}

/* What rank 0 says of the gradients' path over hosts where shared memory
 * works, or the message path where it does not (no /dev/shm). */
static const char *hosts_path(const char *shm_path) {
  return strcmp(mpi_local_reduce_path(), "shared memory") == 0
             ? shm_path
             : "--dist mpi: gradients all-reduced over MPI messages";
}

/* 2 ranks on each host: shared memory within a host, TCP between. */
FG_TEST(mpi_hosts_train_np4_two_hosts_matches_single, "dist") {
  check_hosts_train(2, 2, "8",
                    hosts_path("--dist mpi: gradients all-reduced over shared memory within each "
                               "of 2 hosts (2 ranks each), MPI messages across"));
}

/* 2 ranks on the first host, 1 on the second, batches of 7 rows (3 + 2 +
 * 2): rank 0 alone sends its host's sum across. */
FG_TEST(mpi_hosts_train_np3_uneven_hosts_matches_single, "dist") {
  check_hosts_train(2, 1, "7",
                    hosts_path("--dist mpi: gradients all-reduced over shared memory within each "
                               "of 2 hosts (1 to 2 ranks), MPI messages across among the first 1 "
                               "of each"));
}

/* One rank on each host, batches of 7 rows (4 + 3): all by messages. */
FG_TEST(mpi_hosts_train_np2_uneven_matches_single, "dist") {
  check_hosts_train(1, 1, "7",
                    "--dist mpi: gradients all-reduced over MPI messages (one rank on each "
                    "of 2 hosts)");
}

/* ---- Deadlines across hosts: a link cut or a rank killed mid-training ---------- */

#define FAULT_TIMEOUT_S 2.0

typedef enum { CUT_LINK, KILL_RANK3 } fault_kind;

typedef struct fault {
  fault_kind kind;
  atomic_int mpirun_over; /* set when mpirun_at returned: stop waiting */
  netns_hosts *h;
  char mark[32];
  int done;             /* the link went down, or rank 3 was killed */
  int host_of[4];       /* which host each rank ran on */
  double gone_after[4]; /* seconds from the fault to the rank's exit; -1: never */
  double mpirun_after;  /* seconds from the link's return to mpirun's end; -1: ended by the test */
} fault;

/* Waits until rank 3 is training (it has mapped the all_reduce segment, or
 * on the message path simply run, and used 0.3 s of CPU since), notes each
 * rank's host, cuts the link or kills rank 3 (on the second host), and
 * waits for every rank to exit (at most 60 s). Then a cut link comes back,
 * and Open MPI's daemons and mpirun get 20 s to wind up (3 to 4 s in every
 * run here) before the hosts go down, taking what is left; after a kill
 * the hosts go down at once (under --enable-recovery, Open MPI 4.1's mpirun stays after
 * the ranks of two daemons are gone, printing PMIx BAD-PARAM errors; on one
 * host it ends). */
static void *inject_fault(void *arg) {
  fault *f = arg;
  for (int r = 0; r < 4; r++)
    f->gone_after[r] = -1, f->host_of[r] = -1;
  int no_segment = strcmp(mpi_local_reduce_path(), "shared memory") != 0;
  pid_t p = wait_training(f->mark, 3, no_segment, 1200, &f->mpirun_over);
  for (int r = 0; r < 4; r++) {
    pid_t q = find_rank(f->mark, r);
    f->host_of[r] = q > 0 ? netns_hosts_of(f->h, q) : -1;
  }
  f->done = p > 0 && (f->kind == CUT_LINK ? netns_hosts_link(f->h, 0) == 0 : kill(p, SIGKILL) == 0);
  if (!f->done) {
    netns_hosts_down(f->h); /* ends mpirun's endless run: the test fails, not hangs */
    return NULL;
  }
  double t0 = mpi_now_s();
  int left = 4;
  while (left > 0 && mpi_now_s() - t0 < 60 && !atomic_load(&f->mpirun_over)) {
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    left = 0;
    for (int r = 0; r < 4; r++) {
      if (f->gone_after[r] >= 0) continue;
      if (find_rank(f->mark, r) > 0)
        left++;
      else
        f->gone_after[r] = mpi_now_s() - t0;
    }
  }
  for (int r = 0; r < 4; r++)
    if (f->gone_after[r] < 0 && find_rank(f->mark, r) <= 0) f->gone_after[r] = mpi_now_s() - t0;
  f->mpirun_after = -1;
  if (f->kind == CUT_LINK && netns_hosts_link(f->h, 1) == 0) {
    double t1 = mpi_now_s();
    while (find_rank(f->mark, -1) > 0 && mpi_now_s() - t1 < 20) {
      struct timespec ts = {0, 50000000};
      nanosleep(&ts, NULL);
    }
    if (find_rank(f->mark, -1) <= 0) f->mpirun_after = mpi_now_s() - t1;
  }
  netns_hosts_down(f->h);
  return NULL;
}

static double waited_s(const char *line);

/* Rank `r`'s error line (from its own stderr file, appended in rank order
 * by mpirun_at): where "on rank R of 4: " starts, or NULL. mpirun's
 * forwarded stderr may cut a report in two ("on rank 0 of 4: w", another
 * rank's line, "aited 2.0 s"), so a whole report of a wait is preferred to
 * the first one seen. */
static const char *rank_line(const char *out, int r) {
  char key[32];
  snprintf(key, sizeof key, "on rank %d of 4: ", r);
  for (const char *p = strstr(out, key); p; p = strstr(p + 1, key))
    if (waited_s(p) >= 0) return p;
  return strstr(out, key);
}

/* Whether some report of rank r in `out` says it stopped ("... on rank r
 * of 4: stopped: rank ..."). mpirun forwards the ranks' stderr in pieces,
 * so another rank's line may cut one in two ("on rank 1 of 4: stop",
 * then elsewhere "ped: rank 0 failed ..."): the words right after the key
 * are enough. */
static int rank_stopped(const char *out, int r) {
  char key[32];
  snprintf(key, sizeof key, "on rank %d of 4: ", r);
  for (const char *p = strstr(out, key); p; p = strstr(p + 1, key))
    if (strncmp(p + strlen(key), "stop", 4) == 0) return 1;
  return 0;
}

/* Where `what` occurs in the line that starts at `line`, or NULL. */
static const char *line_find(const char *line, const char *what) {
  const char *eol = strchr(line, '\n');
  const char *p = strstr(line, what);
  return p && (!eol || p < eol) ? p : NULL;
}

/* The seconds of "waited S s" right after a rank line's "on rank R of 4: ",
 * or -1 when the line reports something else. */
static double waited_s(const char *line) {
  const char *p = strchr(line, ':');
  if (!p || strncmp(p, ": waited ", 9) != 0) return -1;
  return strtod(p + 9, NULL);
}

/* Whether the "for rank(s) A, B" of the line at `line` names a rank `want`
 * accepts. */
static int names_rank(const char *line, int (*want)(int rank, int me), int me) {
  const char *p = line_find(line, "for rank(s) ");
  return p && rank_list_any(p + strlen("for rank(s) "), want, me);
}

/* Whether some copy of rank r's deadline in `out` waited the timeout's
 * worth (give or take the scheduler and an ASan build) and names a rank
 * `want` accepts. The CLI wrote its error line byte by byte until CI's
 * stop 30 caught a copy with rank 1's words spliced after "for rank(s) ",
 * beside a whole copy of the same line: a whole copy is what counts. */
static int rank_deadline(const char *out, int r, int (*want)(int rank, int me)) {
  char key[32];
  snprintf(key, sizeof key, "on rank %d of 4: ", r);
  for (const char *p = strstr(out, key); p; p = strstr(p + 1, key)) {
    double w = waited_s(p);
    if (w >= FAULT_TIMEOUT_S && w <= FAULT_TIMEOUT_S + 10 && names_rank(p, want, r)) return 1;
  }
  return 0;
}

/* Ranks 0, 1 are on host 0; 2, 3 on host 1. */
static int across_the_cut(int rank, int me) { return rank / 2 != me / 2; }
static int is_rank3(int rank, int me) { return (void)me, rank == 3; }
static int any_rank(int rank, int me) { return (void)me, rank >= 0 && rank < 4; }

/* Trains lin.fgb over 2 hosts of 2 ranks without end; `kind` strikes
 * mid-run. Every rank left must stop by itself, with its own deadline
 * (naming a rank across the cut, or rank 3 when killed) or told of a peer's
 * failure, within 10 s of the timeout (ASan builds on a busy machine). */
static void check_fault(fault_kind kind) {
  MPI_REQUIRED();
  netns_hosts h;
  FG_REQUIRE(setup_linreg() == 0);
  NETNS_HOSTS_REQUIRED(&h, 2);
  run_result *res = malloc(sizeof *res);
  if (!res) netns_hosts_down(&h);
  FG_REQUIRE(res);
  fault f = {.kind = kind, .h = &h};
  snprintf(f.mark, sizeof f.mark, "%ld", (long)getpid());
  setenv("FG_TEST_MARK", f.mark, 1);
  char xi[700], yi[700], timeout[16];
  lin_inputs(xi, yi);
  snprintf(timeout, sizeof timeout, "%.0f", FAULT_TIMEOUT_S);
  /* Far more epochs than the test lets it run: the fault lands mid-run. */
  char *args[] = {FG_CLI_PATH, "train",    (char *)tpath("lin.fgb"),
                  "-i",        xi,         "-i",
                  yi,          "--batch",  "8",
                  "--epochs",  "10000000", "-q",
                  "--dist",    "mpi",      "--dist-timeout",
                  timeout,     NULL};
  pthread_t th;
  if (pthread_create(&th, NULL, inject_fault, &f) != 0) {
    unsetenv("FG_TEST_MARK");
    netns_hosts_down(&h);
    free(res);
    FG_FAIL_AT("pthread_create failed");
    return;
  }
  /* Without --enable-recovery mpirun would end the job itself when rank 3
   * dies: the survivors must find out on their own. */
  mpirun_at(h.where, 4, kind == KILL_RANK3 ? "--enable-recovery" : NULL, args, 120, res);
  atomic_store(&f.mpirun_over, 1);
  pthread_join(th, NULL);
  unsetenv("FG_TEST_MARK");
  netns_hosts_down(&h);
  FG_CHECK(f.done);
  int left = kind == KILL_RANK3 ? 3 : 4;
  fprintf(stderr,
          "ranks exited %.2f %.2f %.2f %.2f s after the fault; mpirun took %.1f s (ended by "
          "itself %.1f s after the link's return; -1: no)\n",
          f.gone_after[0], f.gone_after[1], f.gone_after[2], f.gone_after[3], res->wall,
          f.mpirun_after);
  /* The ranks really ran apart: 0 and 1 in the first host's network, 2
   * and 3 in the second's. */
  for (int r = 0; r < 4; r++)
    if (f.host_of[r] != r / 2) FG_FAIL_AT("rank %d ran on host %d, not %d", r, f.host_of[r], r / 2);
  for (int r = 0; r < left; r++)
    if (f.gone_after[r] < 0 || f.gone_after[r] > FAULT_TIMEOUT_S + 10)
      FG_FAIL_AT("rank %d exited %.1f s after the fault (-1: never)", r, f.gone_after[r]);
  /* mpirun failed, never hung to the limit: after a cut it ended by
   * itself once the link was back; after a kill the test ended it (see
   * inject_fault). */
  FG_CHECK(res->status != -1 && res->status != 0);
  if (kind == CUT_LINK && f.mpirun_after < 0)
    FG_FAIL_AT("mpirun was still there 20 s after the link came back");
  FG_CHECK_STR_CONTAINS(res->out, "DEADLINE_EXCEEDED");
  int named = 0;
  for (int r = 0; r < left; r++) {
    const char *line = rank_line(res->out, r);
    if (!line) {
      /* Open MPI itself ends a rank whose TCP connection to the killed
       * one fails again (1 run in 5 here, rank 1, the owner of the slice
       * rank 3 swapped across hosts), saying so in one of two ways (a
       * failed reconnect, or the peer's disconnection seen first on a
       * loaded machine): no hang either (the rank's exit time is checked
       * above), but nothing flowgraph can turn into a status. */
      if (kind == KILL_RANK3 &&
          (strstr(res->out, "Open MPI failed to TCP connect to a peer MPI process") ||
           strstr(res->out, "An MPI communication peer process has unexpectedly disconnected")))
        continue;
      FG_FAIL_AT("rank %d printed no error", r);
    } else if (waited_s(line) >= 0) {
      /* Its own deadline: the timeout's worth of waiting, give or take the
       * scheduler, naming whom it waited for. A copy of the line that
       * another rank's output cut in two may lack either, so one whole
       * copy is enough. */
      if (!rank_deadline(res->out, r, any_rank))
        FG_FAIL_AT("rank %d waited %.1f s, timeout %.1f s, or named no rank", r, waited_s(line),
                   FAULT_TIMEOUT_S);
      int ok = rank_deadline(res->out, r, kind == CUT_LINK ? across_the_cut : is_rank3);
      named += ok;
      if (kind == CUT_LINK && !ok) FG_FAIL_AT("rank %d's deadline names no rank across the cut", r);
    } else if (!line_find(line, "stopped: rank ") && !rank_stopped(res->out, r))
      FG_FAIL_AT("rank %d reports neither its deadline nor a stop", r);
  }
  /* After a kill, a survivor slow to reach the collective may be named
   * beside rank 3 (or in place of it, by a rank that waited on it): one
   * deadline naming rank 3 is enough. */
  if (kind == KILL_RANK3 && !named) FG_FAIL_AT("no deadline names rank 3, the killed one");
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\n", res->out);
  free(res);
  fgt_rmtree(tmpdir);
}

/* A network partition: no peer dies, every message just stops. */
FG_TEST(mpi_hosts_link_cut_gives_deadline, "dist,badinput,slow") { check_fault(CUT_LINK); }

/* Rank 3 killed on the second host: its host-mate and the ranks across. */
FG_TEST(mpi_hosts_killed_rank_gives_deadline, "dist,badinput") { check_fault(KILL_RANK3); }
