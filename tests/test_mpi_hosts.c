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
 *    within the timeout (BAD_INPUTS M1), and once the link is back mpirun
 *    ends by itself. */
#include <pthread.h>

#include "mpi/mpi_lin.h"
#include "mpi/mpi_procs.h"
#include "mpi/netns_hosts.h"

/* mpirun over the two hosts, `per_host` ranks on each, training lin.fgb in
 * batches of `batch`; checks the gradients' path rank 0 reports (`path`)
 * and the results against one process. */
static void check_hosts_train(int per_host, const char *batch, const char *path) {
  MPI_REQUIRED();
  netns_hosts h;
  NETNS_HOSTS_REQUIRED(&h, per_host);
  FG_REQUIRE(setup_linreg() == 0);
  run_result *res = malloc(sizeof *res);
  FG_REQUIRE(res);
  mpi_train_at(h.where, 0, 2 * per_host, "lin.fgb", batch, NULL, "mpi.fgb", res);
  netns_hosts_down(&h);
  FG_CHECK_INT(res->status, 0);
  FG_CHECK_STR_CONTAINS(res->out, path);
  cli_result r;
  single_train(&r, "lin.fgb", batch, 0);
  FG_CHECK_INT(r.code, 0);
  float wm[2], bm[1];
  check_vs_single(res->out, r.out, "mpi.fgb", atoi(batch), 0, 0, wm, bm);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\nsingle:\n%s\n", res->out, r.out);
  result_free(&r);
  free(res);
  fgt_rmtree(tmpdir);
}

/* 2 ranks on each host: shared memory within a host, TCP between. */
FG_TEST(mpi_hosts_train_np4_two_hosts_matches_single, "dist") {
  const char *path = strcmp(mpi_local_reduce_path(), "shared memory") == 0
                         ? "--dist mpi: gradients all-reduced over shared memory within each of 2 "
                           "hosts (2 ranks each), MPI messages across"
                         : "--dist mpi: gradients all-reduced over MPI messages";
  check_hosts_train(2, "8", path);
}

/* One rank on each host, batches of 7 rows (4 + 3): all by messages. */
FG_TEST(mpi_hosts_train_np2_uneven_matches_single, "dist") {
  check_hosts_train(1, "7",
                    "--dist mpi: gradients all-reduced over MPI messages (one rank on each "
                    "of 2 hosts)");
}

/* ---- M1 across hosts: the link between them cut mid-training ------------ */

#define CUT_TIMEOUT_S 2.0

typedef struct cutter {
  netns_hosts *h;
  char mark[32];
  int cut;              /* the link went down */
  int host_of[4];       /* which host each rank ran on */
  double gone_after[4]; /* seconds from the cut to the rank's exit; -1: never */
} cutter;

/* Waits until rank 3 is training (it has mapped the all_reduce segment, or
 * on the message path simply run, and used 0.3 s of CPU since), notes each
 * rank's host, cuts the link, waits for every rank to exit (at most 60 s),
 * then brings the link back so that Open MPI's daemons can wind up. */
static void *cut_link(void *arg) {
  cutter *c = arg;
  int no_segment = strcmp(mpi_local_reduce_path(), "shared memory") != 0;
  double mapped_at = -1;
  for (int r = 0; r < 4; r++)
    c->gone_after[r] = -1, c->host_of[r] = -1;
  for (int tries = 0; tries < 1200 && !c->cut; tries++) {
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
    pid_t p = find_rank(c->mark, 3);
    if (p <= 0) continue;
    if (mapped_at < 0 && (no_segment || maps_segment(p)))
      mapped_at = no_segment ? 0.3 : cpu_seconds(p);
    if (mapped_at < 0 || cpu_seconds(p) < mapped_at + 0.3) continue;
    for (int r = 0; r < 4; r++) {
      pid_t q = find_rank(c->mark, r);
      c->host_of[r] = q > 0 ? netns_hosts_of(c->h, q) : -1;
    }
    c->cut = netns_hosts_link(c->h, 0) == 0;
  }
  if (!c->cut) return NULL;
  double t0 = mpi_now_s();
  int left = 4;
  while (left > 0 && mpi_now_s() - t0 < 60) {
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    left = 0;
    for (int r = 0; r < 4; r++) {
      if (c->gone_after[r] >= 0) continue;
      if (find_rank(c->mark, r) > 0)
        left++;
      else
        c->gone_after[r] = mpi_now_s() - t0;
    }
  }
  netns_hosts_link(c->h, 1);
  return NULL;
}

/* Rank `r`'s error line (from its own stderr file, appended in rank order
 * by mpirun_at): where "on rank R of 4: " starts, or NULL. */
static const char *rank_line(const char *out, int r) {
  char key[32];
  snprintf(key, sizeof key, "on rank %d of 4: ", r);
  return strstr(out, key);
}

/* Whether the "for rank(s) A, B" of the line at `line` names a rank of the
 * other host than rank `r`'s (ranks 0, 1 on host 0; 2, 3 on host 1). */
static int names_other_host(const char *line, int r) {
  const char *key = "for rank(s) ";
  const char *eol = strchr(line, '\n');
  const char *p = strstr(line, key);
  if (!p || (eol && p > eol)) return 0;
  for (const char *q = p + strlen(key); *q >= '0' && *q <= '9';) {
    char *end;
    long peer = strtol(q, &end, 10);
    if (peer / 2 != r / 2) return 1;
    q = end;
    if (q[0] == ',' && q[1] == ' ') q += 2;
  }
  return 0;
}

FG_TEST(mpi_hosts_link_cut_gives_deadline, "dist,badinput") {
  MPI_REQUIRED();
  netns_hosts h;
  NETNS_HOSTS_REQUIRED(&h, 2);
  FG_REQUIRE(setup_linreg() == 0);
  cutter c = {.h = &h};
  snprintf(c.mark, sizeof c.mark, "%ld", (long)getpid());
  setenv("FG_TEST_MARK", c.mark, 1);
  char xi[700], yi[700], timeout[16];
  lin_inputs(xi, yi);
  snprintf(timeout, sizeof timeout, "%.0f", CUT_TIMEOUT_S);
  /* Far more epochs than the test lets it run: the cut lands mid-run. */
  char *args[] = {FG_CLI_PATH, "train",    (char *)tpath("lin.fgb"),
                  "-i",        xi,         "-i",
                  yi,          "--batch",  "8",
                  "--epochs",  "10000000", "-q",
                  "--dist",    "mpi",      "--dist-timeout",
                  timeout,     NULL};
  pthread_t th;
  FG_REQUIRE(pthread_create(&th, NULL, cut_link, &c) == 0);
  run_result *res = malloc(sizeof *res);
  FG_REQUIRE(res);
  mpirun_at(h.where, 4, NULL, args, 120, res);
  pthread_join(th, NULL);
  unsetenv("FG_TEST_MARK");
  netns_hosts_down(&h);
  FG_CHECK(c.cut);
  fprintf(stderr, "ranks exited %.2f %.2f %.2f %.2f s after the cut; mpirun took %.1f s in all\n",
          c.gone_after[0], c.gone_after[1], c.gone_after[2], c.gone_after[3], res->wall);
  /* The ranks really ran apart: 0 and 1 in the first host's network, 2
   * and 3 in the second's. */
  for (int r = 0; r < 4; r++)
    if (c.host_of[r] != r / 2) FG_FAIL_AT("rank %d ran on host %d, not %d", r, c.host_of[r], r / 2);
  /* Every rank, on both sides of the cut, stops by itself soon after its
   * deadline: within 10 s of it, for ASan builds on a busy machine. */
  for (int r = 0; r < 4; r++)
    if (c.gone_after[r] < 0 || c.gone_after[r] > CUT_TIMEOUT_S + 10)
      FG_FAIL_AT("rank %d exited %.1f s after the cut (-1: never)", r, c.gone_after[r]);
  /* mpirun itself ends once the link is back (Open MPI's daemons cannot
   * wind up across a cut link), failing: it did not hang to the limit. */
  FG_CHECK(res->status > 0);
  FG_CHECK_STR_CONTAINS(res->out, "DEADLINE_EXCEEDED");
  /* Each rank says why: its own deadline, naming a rank across the cut,
   * or a stop a peer told it of (its abort names the peer that failed). */
  for (int r = 0; r < 4; r++) {
    const char *line = rank_line(res->out, r);
    char waited[64];
    snprintf(waited, sizeof waited, "on rank %d of 4: waited %.1f s", r, CUT_TIMEOUT_S);
    if (!line)
      FG_FAIL_AT("rank %d printed no error", r);
    else if (strncmp(line, waited, strlen(waited)) == 0) {
      if (!names_other_host(line, r))
        FG_FAIL_AT("rank %d's deadline names no rank across the cut", r);
    } else if (!strstr(line, "stopped: rank"))
      FG_FAIL_AT("rank %d reports neither its deadline nor a stop", r);
  }
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\n", res->out);
  free(res);
  fgt_rmtree(tmpdir);
}
