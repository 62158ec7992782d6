/* The MPI communicator (dist/comm_mpi.c) under real mpirun runs on
 * localhost (label dist), through the helper program tests/mpi/
 * mpi_comm_check.c: collectives against plain-loop references, a killed and
 * a stuck rank (M1), and the graph-hash check (M2). */
#include "mpi/mpi_run.h"

static char *helper(void) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/mpi_comm_check", FG_MPI_HELPER_DIR);
  return path;
}

static void check_collectives(int np) {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "collectives", "20", NULL};
  mpirun(np, NULL, args, 50, res);
  FG_CHECK_INT(res->status, 0);
  /* 4 dtypes x 8 counts x sum/mean, 2 refusals, all_gather, broadcast. */
  for (int r = 0; r < np; r++) {
    char want[64];
    snprintf(want, sizeof want, "rank %d: 68 checks, 0 wrong", r);
    if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
  }
  free(res);
}

FG_TEST(mpi_collectives_np2, "dist") { check_collectives(2); }
FG_TEST(mpi_collectives_np4, "dist") { check_collectives(4); }

/* Seconds a survivor reported in "... failed: DEADLINE_EXCEEDED after X s". */
static int survivor_deadline(const char *out, int rank, double *after) {
  char want[96];
  snprintf(want, sizeof want, "rank %d: all_reduce failed: DEADLINE_EXCEEDED after ", rank);
  const char *p = strstr(out, want);
  if (!p) return 0;
  *after = atof(p + strlen(want));
  return 1;
}

/* M1: rank 1 dies mid-run; --enable-recovery keeps mpirun from tearing the
 * job down at once, so the survivors must notice by themselves. */
FG_TEST(mpi_killed_rank_gives_deadline, "dist,badinput") {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  const double timeout = 2.0;
  char *args[] = {helper(), "kill", "3", "2", NULL};
  mpirun(3, "--enable-recovery", args, 30, res);
  FG_CHECK(res->status != -1);
  for (int r = 0; r < 3; r += 2) {
    double after = -1;
    if (!survivor_deadline(res->out, r, &after)) {
      FG_FAIL_AT("rank %d reported no deadline error:\n%s", r, res->out);
      continue;
    }
    /* The deadline, plus slack for a loaded 2-core machine. */
    FG_CHECK(after >= timeout - 0.05);
    FG_CHECK(after < timeout + 3.0);
  }
  FG_CHECK(strstr(res->out, "waited") != NULL);
  FG_CHECK(strstr(res->out, "rank(s) 1") != NULL);
  FG_CHECK(strstr(res->out, "all steps done") == NULL);
  FG_CHECK(res->wall < 25);
  free(res);
}

/* M1, stuck peer: rank 1 sleeps through the collective. Rank 0 reports the
 * deadline and exits non-zero, and mpirun then ends the sleeper, so the
 * run takes about the timeout, not the sleep. */
FG_TEST(mpi_stuck_rank_gives_deadline, "dist,badinput") {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "stuck", "1", "2", NULL};
  mpirun(2, NULL, args, 30, res);
  FG_CHECK(res->status != -1 && res->status != 0);
  double after = -1;
  FG_CHECK(survivor_deadline(res->out, 0, &after));
  FG_CHECK(after >= 1.95 && after < 5.0);
  FG_CHECK(strstr(res->out, "all steps done") == NULL);
  FG_CHECK(res->wall < 5.9); /* the sleeper would take 6 s */
  if (res->status == 0 || after < 0) fprintf(stderr, "%s\n", res->out);
  free(res);
}

/* FNV-1a, written out again here so the expected hashes do not come from
 * the code under test. */
static unsigned long long fnv1a(const char *s) {
  unsigned long long h = 14695981039346656037ull;
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

FG_TEST(mpi_graph_hash_mismatch_refused, "dist,badinput") {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "hash", "mismatch", NULL};
  mpirun(3, NULL, args, 30, res);
  FG_CHECK(res->status != -1 && res->status != 0);
  char want[160];
  snprintf(want, sizeof want, "rank 0 has graph hash 0x%016llx, rank 2 has 0x%016llx",
           fnv1a("graph A"), fnv1a("graph B"));
  for (int r = 0; r < 3; r++) {
    char line[200];
    snprintf(line, sizeof line, "rank %d: hash 0x%016llx: INVALID_ARGUMENT ranks disagree", r,
             r == 2 ? fnv1a("graph B") : fnv1a("graph A"));
    if (!strstr(res->out, line)) FG_FAIL_AT("missing '%s' in:\n%s", line, res->out);
  }
  if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
  free(res);
}

FG_TEST(mpi_graph_hash_same_accepted, "dist") {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "hash", "same", NULL};
  mpirun(2, NULL, args, 30, res);
  FG_CHECK_INT(res->status, 0);
  FG_CHECK(strstr(res->out, "rank 0: hash") && strstr(res->out, ": OK"));
  free(res);
}
