/* The MPI communicator (dist/comm/comm_mpi.c) under real mpirun runs on
 * localhost (label dist), through the helper program tests/dist/mpi/
 * mpi_comm_check.c: collectives against plain-loop references, a killed and
 * a stuck rank (a deadline error, no hang), and the graph-hash check. */
#include "mpi/mpi_run.h"

static char *helper(void) {
  static char path[1024];
  snprintf(path, sizeof path, "%s/mpi_comm_check", FG_MPI_HELPER_DIR);
  return path;
}

/* Sets (or, with set 0, unsets) each NAME=VALUE of the space-separated
 * list `env` (NULL: none). */
static void set_env_list(const char *env, int set) {
  for (const char *e = env; e && *e;) {
    const char *eq = strchr(e, '='), *end = strchr(e, ' ');
    if (!end) end = e + strlen(e);
    char name[64], value[128];
    snprintf(name, sizeof name, "%.*s", (int)(eq - e), e);
    snprintf(value, sizeof value, "%.*s", (int)(end - eq - 1), eq + 1);
    if (set)
      setenv(name, value, 1);
    else
      unsetenv(name);
    e = *end ? end + 1 : end;
  }
}

/* Bytes rank r of np must send as messages for one all_reduce of 200003
 * f32, by the path: none over one host's shared memory; over messages,
 * the others' slices (reduce-scatter) and its own slice to each of np - 1
 * (all-gather); across hosts, its host's slice of its local index, split
 * between the hosts (the others' parts, then its own part to each). */
static long long message_bytes(int np, const char *env, const char *path, int r) {
  const long long count = 200003;
  if (strncmp(path, "MPI messages", 12) == 0) {
    long long mine = count / np + (r < count % np);
    return 4 * (count - mine + (np - 1) * mine);
  }
  const char *hosts = env ? strstr(env, "FG_TEST_HOSTS=") : NULL;
  if (!hosts || strncmp(path, "shared memory within", 20) != 0) return 0;
  int host[16], size[16] = {0}, n_hosts = 0, local = 0, owners = np;
  hosts += strlen("FG_TEST_HOSTS=");
  int label[16];
  for (int p = 0; p < np; p++, hosts = strchr(hosts, ',') + 1)
    label[p] = atoi(hosts);
  /* Hosts numbered in order of their first rank, as the communicator
   * orders them. */
  for (int p = 0, seen = 0; p < np; p++) {
    host[p] = -1;
    for (int q = 0; q < p && host[p] < 0; q++)
      if (label[q] == label[p]) host[p] = host[q];
    if (host[p] < 0) host[p] = seen++;
  }
  for (int p = 0; p < np; p++) {
    if (host[p] + 1 > n_hosts) n_hosts = host[p] + 1;
    if (p < r && host[p] == host[r]) local++;
    size[host[p]]++;
  }
  /* The smallest host's count of ranks own the slices; the others send
   * nothing. */
  for (int h = 0; h < n_hosts; h++)
    owners = size[h] < owners ? size[h] : owners;
  if (local >= owners) return 0;
  long long slice = count / owners + (local < count % owners);
  /* This host's part of the slice. */
  long long part = slice / n_hosts;
  part += host[r] < slice % n_hosts;
  return 4 * (slice - part + (n_hosts - 1) * part);
}

/* `env`: NAME=VALUE pairs set for the run (set_env_list; NULL: none);
 * FG_TEST_HOSTS=0,0,1,1 puts rank r on pretend host list[r] (mpi_comm_check
 * sets FG_MPI_HOST). `path`: what every rank must report as its all_reduce
 * path (fg_comm_mpi_reduce_path; NULL: this machine's own, shared memory
 * where /dev/shm works). */
static void check_collectives(int np, const char *env, const char *path) {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "collectives", "20", NULL};
  set_env_list(env, 1);
  mpirun(np, NULL, args, 50, res);
  set_env_list(env, 0);
  FG_CHECK_INT(res->status, 0);
  /* 2 passes x 4 dtypes x 9 counts x sum/mean, 2 refusals, all_gather, broadcast. */
  for (int r = 0; r < np; r++) {
    char want[200];
    snprintf(want, sizeof want, "rank %d: 148 checks, 0 wrong", r);
    if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
    /* Every rank runs on this machine, whatever host it pretends to be on. */
    snprintf(want, sizeof want, "rank %d: host procs %d\n", r, np);
    if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
    snprintf(want, sizeof want, "rank %d: all_reduce path: %s", r,
             path ? path : mpi_local_reduce_path());
    if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
    /* Over shared memory, the second pass's buffers lie in arenas: at
     * least its 10007- and 200003-element ones (4 dtypes x sum/mean),
     * which never take the small path, are read in place; at most its 64.
     * Over messages, or with FG_MPI_SHM_ARENA=0, none. */
    snprintf(want, sizeof want, "rank %d: 200003 f32 sent %lld bytes", r,
             message_bytes(np, env, path ? path : mpi_local_reduce_path(), r));
    FG_CHECK_STR_CONTAINS(res->out, want);
    snprintf(want, sizeof want, "rank %d: in place ", r);
    const char *at = strstr(res->out, want);
    long in_place = at ? atol(at + strlen(want)) : -1;
    int shared = strncmp(path ? path : mpi_local_reduce_path(), "shared memory", 13) == 0 &&
                 !(env && strstr(env, "FG_MPI_SHM_ARENA=0"));
    FG_CHECK(shared ? in_place >= 16 && in_place <= 64 : in_place == 0);
    if (shared ? !(in_place >= 16 && in_place <= 64) : in_place != 0)
      fprintf(stderr, "rank %d: in place %ld\n", r, in_place);
  }
  free(res);
}

/* Data parallelism with fused updates (fg_data_parallel_options.
 * fused_update) through the helper tests/dist/mpi/mpi_dp_fused.c: each rank
 * trains its shard 3 steps with and without them. Every rank's variables
 * must equal the unfused run's bit for bit and the other ranks' (one
 * checksum), and rank 0's must match one process on the whole batch
 * within `tol` (relative). `fused`: the fused collectives each rank must
 * have run in place (3 steps x the one fused update, or 0 where the
 * update all-reduces a copy). */
static void check_dp_fused_model(int np, const char *batch, int f64, const char *env, int fused,
                                 double tol, int deep) {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char prog[1024], dt[4];
  snprintf(prog, sizeof prog, "%s/mpi_dp_fused", FG_MPI_HELPER_DIR);
  snprintf(dt, sizeof dt, "%d", f64);
  char *args[] = {prog, (char *)batch, dt, deep ? "deep" : NULL, NULL};
  set_env_list(env, 1);
  mpirun(np, NULL, args, 60, res);
  set_env_list(env, 0);
  FG_CHECK_INT(res->status, 0);
  char want[200], sum0[40] = "";
  for (int r = 0; r < np; r++) {
    snprintf(want, sizeof want, "rank %d: fused nodes 0 %d, fused in place 0 %d\n", r, 1 + deep,
             fused);
    FG_CHECK_STR_CONTAINS(res->out, want);
    snprintf(want, sizeof want, "rank %d: products 0 %d\n", r, deep);
    FG_CHECK_STR_CONTAINS(res->out, want);
    if (deep) {
      /* The product rounds differently from the made gradient's sum of
       * products, within the tolerance against one process. */
      snprintf(want, sizeof want, "rank %d: max rel diff fused vs unfused ", r);
      const char *at = strstr(res->out, want);
      FG_REQUIRE(at != NULL);
      double d = atof(at + strlen(want));
      FG_CHECK(d < tol);
    } else {
      snprintf(want, sizeof want, "rank %d: fused equals unfused: yes", r);
      FG_CHECK_STR_CONTAINS(res->out, want);
    }
    snprintf(want, sizeof want, "rank %d: checksum ", r);
    const char *at = strstr(res->out, want);
    FG_REQUIRE(at != NULL);
    char sum[40];
    snprintf(sum, sizeof sum, "%.18s", at + strlen(want));
    if (r == 0) snprintf(sum0, sizeof sum0, "%s", sum);
    FG_CHECK_STR(sum, sum0);
  }
  const char *at = strstr(res->out, "rank 0: max rel diff vs one process ");
  FG_REQUIRE(at != NULL);
  double diff = atof(at + strlen("rank 0: max rel diff vs one process "));
  FG_CHECK(diff < tol);
  if (res->status != 0 || !(diff < tol)) fprintf(stderr, "%s\n", res->out);
  free(res);
}

static void check_dp_fused(int np, const char *batch, int f64, const char *env, int fused,
                           double tol) {
  check_dp_fused_model(np, batch, f64, env, fused, tol, 0);
}

/* Even shards over one host: the fused update goes in place. */
FG_TEST(mpi_dp_fused_update_np2, "dist") { check_dp_fused(2, "64", 0, NULL, 3, 1e-5); }
/* 3 ranks (a mean that divides), f64. */
FG_TEST(mpi_dp_fused_update_np3_f64, "dist") { check_dp_fused(3, "63", 1, NULL, 3, 1e-12); }
/* Uneven shards (22, 21, 21 rows): the weighted mean, through a copy. */
FG_TEST(mpi_dp_fused_update_np3_uneven, "dist") { check_dp_fused(3, "64", 0, NULL, 0, 1e-5); }
/* Buffers outside arenas, and ranks on two hosts: through a copy. */
FG_TEST(mpi_dp_fused_update_np2_arenas_off, "dist") {
  check_dp_fused(2, "64", 0, "FG_MPI_SHM_ARENA=0", 0, 1e-5);
}
FG_TEST(mpi_dp_fused_update_np4_two_hosts, "dist") {
  check_dp_fused(4, "64", 0, "FG_TEST_HOSTS=0,0,1,1", 0, 1e-5);
}
/* A hidden layer's weight: its update takes the gradient's factors
 * (sufficient_factor_apply_sgd), read in place from every rank's arena, so 2 fused
 * updates x 3 steps go in place, without the gradient ever made. */
FG_TEST(mpi_dp_fused_product_np2, "dist") { check_dp_fused_model(2, "64", 0, NULL, 6, 1e-5, 1); }
FG_TEST(mpi_dp_fused_product_np3_f64, "dist") {
  check_dp_fused_model(3, "63", 1, NULL, 6, 1e-12, 1);
}
/* Uneven shards: the weighted mean of the made products, through a copy;
 * and the factors outside arenas, and two hosts: the made product. */
FG_TEST(mpi_dp_fused_product_np3_uneven, "dist") {
  check_dp_fused_model(3, "64", 0, NULL, 0, 1e-5, 1);
}
FG_TEST(mpi_dp_fused_product_np2_arenas_off, "dist") {
  check_dp_fused_model(2, "64", 0, "FG_MPI_SHM_ARENA=0", 0, 1e-5, 1);
}
FG_TEST(mpi_dp_fused_product_np4_two_hosts, "dist") {
  check_dp_fused_model(4, "64", 0, "FG_TEST_HOSTS=0,0,1,1", 0, 1e-5, 1);
}

/* A session run refused before it starts on some ranks (tests/dist/mpi/
 * mpi_refused.c, timeout 30 s; executor/dist/exec.h fg_dist_run_agree). `env` as
 * check_collectives'. */
static void check_refused(const char *mode, int np, const char *env) {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char prog[1024];
  snprintf(prog, sizeof prog, "%s/mpi_refused", FG_MPI_HELPER_DIR);
  char *args[] = {prog, (char *)mode, NULL};
  set_env_list(env, 1);
  mpirun(np, NULL, args, 50, res);
  set_env_list(env, 0);
  FG_CHECK(res->status != -1); /* not killed at the limit */
  FG_CHECK_INT(res->status, 0);
  char want[300];
  for (int r = 0; r < np; r++) {
    snprintf(want, sizeof want, "rank %d: as expected", r);
    FG_CHECK_STR_CONTAINS(res->out, want);
  }
  /* Every rank ends with the same variable, bit for bit. */
  const char *c0 = strstr(res->out, "rank 0: checksum 0x");
  FG_CHECK(c0 != NULL);
  for (int r = 1; c0 && r < np; r++) {
    snprintf(want, sizeof want, "rank %d: checksum %.18s", r, c0 + strlen("rank 0: checksum "));
    FG_CHECK_STR_CONTAINS(res->out, want);
  }
  if (strcmp(mode, "alone") == 0) {
    /* Rank 1's feed is refused; the others stop at once, told why, and
     * rank 1's retry trains with them. */
    FG_CHECK_STR_CONTAINS(res->out, "rank 1: run 2: INVALID_ARGUMENT after ");
    for (int r = 0; r < np; r++) {
      if (r == 1) continue;
      snprintf(want, sizeof want, "rank %d: run 2: ABORTED after ", r);
      const char *p = strstr(res->out, want);
      if (!p) {
        FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
        continue;
      }
      FG_CHECK(atof(p + strlen(want)) < 10.0);
      const char *nl = strchr(p, '\n');
      char line[800];
      snprintf(line, sizeof line, "%.*s", nl ? (int)(nl - p) : (int)strlen(p), p);
      snprintf(want, sizeof want,
               "rank 1 of %d in this process's data-parallel group refused the run before it "
               "started, so no rank ran it: feed 'x': expected f32 [?,8], given f64 [6,8]",
               np);
      FG_CHECK_STR_CONTAINS(line, want);
    }
    for (int r = 0; r < np; r++) {
      snprintf(want, sizeof want, "rank %d: run 4: ok", r);
      FG_CHECK_STR_CONTAINS(res->out, want);
    }
  }
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\n", res->out);
  free(res);
}

FG_TEST(mpi_run_refused_alone_stops_peers, "dist,badinput") { check_refused("alone", 3, NULL); }
/* The same over MPI messages. */
FG_TEST(mpi_run_refused_alone_stops_peers_messages, "dist,badinput") {
  check_refused("alone", 2, "FG_MPI_SHM=0");
}
/* Refused on every rank alike (a wrong fetch, before the ranks agree):
 * nobody waits; a broadcast and two more runs then work. */
FG_TEST(mpi_run_refused_alike_keeps_group, "dist,badinput") { check_refused("alike", 3, NULL); }
/* Refused on one rank, but the run holds no collective: the peers finish
 * it, and the next run trains on every rank. */
FG_TEST(mpi_run_refused_without_collectives_keeps_group, "dist,badinput") {
  check_refused("nocoll", 2, NULL);
}

/* One host: all_reduce goes through one shared segment (dist/comm/shm_reduce.c). */
FG_TEST(mpi_collectives_np2, "dist") { check_collectives(2, NULL, NULL); }
FG_TEST(mpi_collectives_np4, "dist") { check_collectives(4, NULL, NULL); }
/* 4 KiB slots: the 10007- and 200003-element buffers cross 10 to 391
 * chunks, both slots in turn, with 3 ranks' uneven slices. */
FG_TEST(mpi_collectives_np3_small_slots, "dist") {
  check_collectives(3, "FG_MPI_SHM_CHUNK=4096", NULL);
}
/* Arenas off: the second pass goes through the slots too. */
FG_TEST(mpi_collectives_np2_arenas_off, "dist") {
  check_collectives(2, "FG_MPI_SHM_ARENA=0", NULL);
}
/* The MPI message path, which ranks on several hosts take. */
FG_TEST(mpi_collectives_np2_messages, "dist") {
  check_collectives(2, "FG_MPI_SHM=0", "MPI messages (rank 0 has FG_MPI_SHM=0)");
}
FG_TEST(mpi_collectives_np3_messages, "dist") {
  check_collectives(3, "FG_MPI_SHM=0", "MPI messages (rank 0 has FG_MPI_SHM=0)");
}

/* Ranks on several hosts (pretended through FG_MPI_HOST): shared memory
 * within each host, messages across. The helper's references sum each
 * host's ranks first, then the hosts in order (reduce_expected_hosts), and
 * compare bitwise: every rank must hold exactly that. */
#define ACROSS(H, L)                                                                               \
  "shared memory within each of " #H " hosts (" #L " ranks each), MPI messages across"
FG_TEST(mpi_collectives_np4_two_hosts, "dist") {
  check_collectives(4, "FG_TEST_HOSTS=0,0,1,1", ACROSS(2, 2));
}
/* Hosts interleaved (rank order is not host order), 4 KiB slots: the local
 * sums and gathers cross many chunks. */
FG_TEST(mpi_collectives_np4_two_hosts_interleaved_small_slots, "dist,slow") {
  check_collectives(4, "FG_TEST_HOSTS=0,1,0,1 FG_MPI_SHM_CHUNK=4096", ACROSS(2, 2));
}
/* Three hosts, arenas off: the local steps go through the slots. */
FG_TEST(mpi_collectives_np6_three_hosts_arenas_off, "dist,slow") {
  check_collectives(6, "FG_TEST_HOSTS=1,0,2,0,1,2 FG_MPI_SHM_ARENA=0", ACROSS(3, 2));
}
/* Hosts that hold different numbers of ranks: the smallest host's count
 * own the slices, and only they send messages. 2 + 1 ranks: rank 0 and 1
 * exchange whole buffers, rank 2 only shares its host's segment. */
FG_TEST(mpi_collectives_np3_uneven_hosts, "dist") {
  check_collectives(3, "FG_TEST_HOSTS=0,1,0",
                    "shared memory within each of 2 hosts (1 to 2 ranks), MPI messages across "
                    "among the first 1 of each");
}
/* 3 + 2 ranks, 4 KiB slots: the first 2 of each host own half each. */
FG_TEST(mpi_collectives_np5_uneven_hosts_small_slots, "dist,slow") {
  check_collectives(5, "FG_TEST_HOSTS=0,0,1,0,1 FG_MPI_SHM_CHUNK=4096",
                    "shared memory within each of 2 hosts (2 to 3 ranks), MPI messages across "
                    "among the first 2 of each");
}
/* Hosts {0}, {1, 2, 4} and {3} (labels not in rank order): one owner per
 * host, the ranks past it only share their host's segment. */
FG_TEST(mpi_collectives_np5_three_uneven_hosts, "dist") {
  check_collectives(5, "FG_TEST_HOSTS=1,0,0,2,0",
                    "shared memory within each of 3 hosts (1 to 3 ranks), MPI messages across "
                    "among the first 1 of each");
}
/* One rank on each host: the messages, saying why. */
FG_TEST(mpi_collectives_np2_one_rank_per_host_messages, "dist") {
  check_collectives(2, "FG_TEST_HOSTS=0,1", "MPI messages (one rank on each of 2 hosts)");
}

/* Ranks that reduce different counts, an empty tensor against elements,
 * or different dtypes are all refused with both sides named, and the next
 * all_reduce is right. `shm_off`: over MPI messages (FG_MPI_SHM=0), which
 * compare the counts with an all-gather, instead of the shared segment. */
static void check_mismatch(int shm_off) {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "mismatch", "20", NULL};
  if (shm_off) setenv("FG_MPI_SHM", "0", 1);
  mpirun(3, NULL, args, 40, res);
  if (shm_off) unsetenv("FG_MPI_SHM");
  FG_CHECK_INT(res->status, 0);
  for (int r = 0; r < 3; r++) {
    char want[400];
    /* Each rank names itself and the first rank that differs from it. */
    snprintf(want, sizeof want,
             "rank %d: mismatched counts: INVALID_ARGUMENT all_reduce (collective #0) on rank %d "
             "of 3: rank %d has %d elements of f64, rank %d has %d of f64; every rank must "
             "reduce the same tensor",
             r, r, r, r == 0 ? 5 : 6, r == 0 ? 1 : 0, r == 0 ? 6 : 5);
    if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
    snprintf(want, sizeof want,
             "rank %d: empty against 2: INVALID_ARGUMENT all_reduce (collective #2) on rank %d "
             "of 3: rank %d has %d elements of f64, rank %d has %d of f64;",
             r, r, r, r == 1 ? 0 : 2, r == 1 ? 0 : 1, r == 1 ? 2 : 0);
    if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
    snprintf(want, sizeof want,
             "rank %d: mismatched dtypes: INVALID_ARGUMENT all_reduce (collective #4) on rank %d "
             "of 3: rank %d has 4 elements of %s, rank %d has 4 of %s;",
             r, r, r, r == 2 ? "f32" : "f64", r == 2 ? 0 : 2, r == 2 ? "f64" : "f32");
    if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
    snprintf(want, sizeof want,
             "rank %d: one round against two: INVALID_ARGUMENT all_reduce (collective #6) on rank "
             "%d of 3: rank %d has %d elements of f64, rank %d has %d of f64;",
             r, r, r, r == 0 ? 2 : 3000, r == 0 ? 1 : 0, r == 0 ? 3000 : 2);
    if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
    static const char *const after[] = {"after the mismatch", "after the empty one",
                                        "after the dtypes", "after the sizes"};
    for (int k = 0; k < 4; k++) {
      snprintf(want, sizeof want, "rank %d: %s: right sum", r, after[k]);
      if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
    }
  }
  FG_CHECK(res->wall < 15); /* no refusal waits for a deadline (20 s) */
  free(res);
}

/* The mismatch helper's 4 refusals at np ranks over pretend hosts: every
 * rank refused with INVALID_ARGUMENT naming itself, then a right sum, and
 * no deadline. Leaves the output in res. */
static void check_mismatch_across(int np, const char *hosts, run_result *res) {
  char *args[] = {helper(), "mismatch", "20", NULL};
  setenv("FG_TEST_HOSTS", hosts, 1);
  mpirun(np, NULL, args, 40, res);
  unsetenv("FG_TEST_HOSTS");
  FG_CHECK_INT(res->status, 0);
  static const char *const what[] = {"mismatched counts", "empty against 2", "mismatched dtypes",
                                     "one round against two"};
  static const char *const after[] = {"after the mismatch", "after the empty one",
                                      "after the dtypes", "after the sizes"};
  for (int r = 0; r < np; r++)
    for (int k = 0; k < 4; k++) {
      char want[200];
      snprintf(want, sizeof want,
               "rank %d: %s: INVALID_ARGUMENT all_reduce (collective #%d) on rank %d of %d: ", r,
               what[k], 2 * k, r, np);
      FG_CHECK_STR_CONTAINS(res->out, want);
      snprintf(want, sizeof want, "rank %d: %s: right sum", r, after[k]);
      FG_CHECK_STR_CONTAINS(res->out, want);
    }
  FG_CHECK(res->wall < 15); /* no refusal waits for a deadline (20 s) */
}

/* Across hosts, every rank is refused too, and the group stays in step:
 * every rank states its count to every other first, as over messages,
 * before any data moves; each names itself and the first rank that
 * differs. */
FG_TEST(mpi_all_reduce_count_mismatch_refused_across_hosts, "dist,badinput") {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  /* Hosts {0, 1} and {2, 3}; rank 0 has 5 elements, the others 6. */
  check_mismatch_across(4, "0,0,1,1", res);
  for (int r = 0; r < 4; r++) {
    char want[300];
    snprintf(want, sizeof want,
             "rank %d: mismatched counts: INVALID_ARGUMENT all_reduce (collective #0) on rank %d "
             "of 4: rank %d has %d elements of f64, rank %d has %d of f64;",
             r, r, r, r == 0 ? 5 : 6, r == 0 ? 1 : 0, r == 0 ? 6 : 5);
    FG_CHECK_STR_CONTAINS(res->out, want);
  }
  free(res);
}

/* Uneven hosts {0, 2} and {1}: rank 1 reduces 0 elements, the others 2. */
FG_TEST(mpi_all_reduce_count_mismatch_refused_uneven_hosts, "dist,badinput") {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  check_mismatch_across(3, "0,1,0", res);
  FG_CHECK_STR_CONTAINS(res->out, "rank 2: empty against 2: INVALID_ARGUMENT all_reduce "
                                  "(collective #2) on rank 2 of 3: rank 2 has 2 elements of f64, "
                                  "rank 1 has 0 of f64;");
  FG_CHECK_STR_CONTAINS(res->out, "rank 1: empty against 2: INVALID_ARGUMENT all_reduce "
                                  "(collective #2) on rank 1 of 3: rank 1 has 0 elements of f64, "
                                  "rank 0 has 2 of f64;");
  free(res);
}

FG_TEST(mpi_all_reduce_count_mismatch_refused, "dist,badinput") { check_mismatch(0); }
FG_TEST(mpi_all_reduce_count_mismatch_refused_messages, "dist,badinput") { check_mismatch(1); }

/* Seconds a survivor reported in "... failed: DEADLINE_EXCEEDED after X s". */
static int survivor_deadline(const char *out, int rank, double *after) {
  char want[96];
  snprintf(want, sizeof want, "rank %d: all_reduce failed: DEADLINE_EXCEEDED after ", rank);
  const char *p = strstr(out, want);
  if (!p) return 0;
  *after = atof(p + strlen(want));
  return 1;
}

/* Every rank but 1 of np reported a deadline within the timeout (plus
 * slack for a loaded 2-core machine), none finished, and the run ended. */
static void check_survivors(run_result *res, int np, double timeout) {
  FG_CHECK(res->status != -1);
  for (int r = 0; r < np; r++) {
    if (r == 1) continue;
    double after = -1;
    if (!survivor_deadline(res->out, r, &after)) {
      FG_FAIL_AT("rank %d reported no deadline error:\n%s", r, res->out);
      continue;
    }
    FG_CHECK(after >= timeout - 0.05);
    FG_CHECK(after < timeout + 3.0);
  }
  FG_CHECK(strstr(res->out, "waited") != NULL);
  FG_CHECK(strstr(res->out, "rank(s) 1") != NULL);
  FG_CHECK(strstr(res->out, "all steps done") == NULL);
  FG_CHECK(res->wall < 25);
}

/* A killed rank: rank 1 dies mid-run; --enable-recovery keeps mpirun from tearing the
 * job down at once, so the survivors must notice by themselves. `shm_off`:
 * with FG_MPI_SHM=0 (the message path) instead of the shared segment. */
static void check_killed_rank(int shm_off) {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  const double timeout = 2.0;
  char *args[] = {helper(), "kill", "3", "2", NULL};
  if (shm_off) setenv("FG_MPI_SHM", "0", 1);
  mpirun(3, "--enable-recovery", args, 30, res);
  if (shm_off) unsetenv("FG_MPI_SHM");
  check_survivors(res, 3, timeout);
  /* Over shared memory the 3 all_reduces before the kill read the arenas
   * in place, so the survivors waited in that path's barrier. */
  if (!shm_off && strcmp(mpi_local_reduce_path(), "shared memory") == 0)
    for (int r = 0; r < 3; r += 2) {
      char want[64];
      snprintf(want, sizeof want, "rank %d: 3 in place before", r);
      FG_CHECK_STR_CONTAINS(res->out, want);
    }
  free(res);
}

/* Across hosts {0, 1} and {2, 3}: every survivor waits for rank 1's
 * count, and names it by its MPI number. */
FG_TEST(mpi_killed_rank_gives_deadline_across_hosts, "dist,badinput") {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "kill", "3", "2", NULL};
  setenv("FG_TEST_HOSTS", "0,0,1,1", 1);
  mpirun(4, "--enable-recovery", args, 30, res);
  unsetenv("FG_TEST_HOSTS");
  check_survivors(res, 4, 2.0);
  for (int r = 0; r < 4; r += r == 0 ? 2 : 1) {
    char want[120];
    snprintf(want, sizeof want, "on rank %d of 4: waited 2.0 s (timeout 2.0 s) for rank(s) 1;", r);
    FG_CHECK_STR_CONTAINS(res->out, want);
  }
  for (int r = 0; r < 4; r++) {
    char want[64];
    snprintf(want, sizeof want, "rank %d: 3 in place before", r);
    if (r != 1 && strcmp(mpi_local_reduce_path(), "shared memory") == 0)
      FG_CHECK_STR_CONTAINS(res->out, want);
  }
  free(res);
}

FG_TEST(mpi_killed_rank_gives_deadline, "dist,badinput") { check_killed_rank(0); }

/* Rank 1 of 3 dies at `mode` (a mpi_comm_check mode) under
 * --enable-recovery, leaving the others in `call`, which MPI cannot
 * abandon. The watchdog ends each survivor with a deadline message after
 * max(timeout, its floor), so the run ends instead of hanging. `alt`, when
 * set, is another ending a survivor may print instead (an MPI error, should
 * MPI report the dead peer); `never` must not appear. */
static void check_watchdog(const char *mode, const char *call, const char *alt, const char *never) {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), (char *)mode, "2", NULL};
  /* The watchdog's floor (30 s by default), shortened for the test. */
  setenv("FG_MPI_WATCHDOG_MIN_S", "5", 1);
  mpirun(3, "--enable-recovery", args, 40, res);
  unsetenv("FG_MPI_WATCHDOG_MIN_S");
  /* Ended, not killed as hung (mpirun --enable-recovery exits 0 here even
   * when ranks fail: the messages below are what tells). */
  FG_CHECK(res->status != -1);
  for (int r = 0; r < 3; r += 2) {
    char want[160], other[64] = "";
    snprintf(want, sizeof want,
             "flowgraph: DEADLINE_EXCEEDED: %s on rank %d did not return within 5.0 s (timeout "
             "2.0 s",
             call, r);
    if (alt) snprintf(other, sizeof other, "rank %d: %s", r, alt);
    if (!strstr(res->out, want) && !(alt && strstr(res->out, other)))
      FG_FAIL_AT("rank %d: no '%s' in:\n%s", r, want, res->out);
  }
  FG_CHECK(strstr(res->out, never) == NULL);
  FG_CHECK(res->wall < 30);
  free(res);
}

/* Rank 1 dies before MPI starts: Open MPI keeps the others waiting in
 * MPI_Init_thread for its start-up data, for good. */
FG_TEST(mpi_rank_dead_at_start_gives_deadline, "dist,badinput") {
  check_watchdog("die_at_init", "MPI_Init_thread", NULL, "MPI_Init_thread on rank 1 ");
}

/* Rank 1 dies between fg_comm_mpi_split's gather and its blocking
 * MPI_Comm_split. */
FG_TEST(mpi_rank_dead_at_split_gives_deadline, "dist,badinput") {
  check_watchdog("die_at_split", "MPI_Comm_split", "split failed: ", "split returned");
}

/* A rank that started but never joins the communicator (here: asleep): the
 * others' join is a deadline within the timeout, not a hang, and (under
 * ASan) leaks nothing. The join is an MPI collective, so it cannot say
 * which rank is missing. */
FG_TEST(mpi_late_rank_gives_join_deadline, "dist,badinput") {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "late_join", "2", NULL};
  mpirun(3, NULL, args, 30, res);
  FG_CHECK(res->status != -1 && res->status != 0);
  for (int r = 0; r < 3; r += 2) {
    char want[160];
    snprintf(want, sizeof want,
             "fg_comm_mpi_new: DEADLINE_EXCEEDED: joining the MPI group (MPI_Comm_idup) on rank %d "
             "of 3: waited 2.",
             r);
    if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
  }
  FG_CHECK(strstr(res->out, "rank 1 of 3: waited") == NULL);
  /* A collective: the message says it cannot name the missing rank. */
  FG_CHECK_STR_CONTAINS(res->out, "for rank(s) (any: a collective, MPI does not say which); a peer "
                                  "died or is stuck");
  if (strstr(res->out, "LeakSanitizer")) FG_FAIL_AT("a leak:\n%s", res->out);
  /* Rank 1 would sleep 20 s after MPI_Init: the survivors' exit ended the
   * run (with room for a slow start under ASan on a loaded machine). */
  FG_CHECK(res->wall < 15);
  free(res);
}
FG_TEST(mpi_killed_rank_gives_deadline_messages, "dist,badinput") { check_killed_rank(1); }

/* A stuck peer: rank 1 sleeps through the collective. Rank 0 reports the
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
  FG_CHECK(res->wall < 15); /* the sleeper would take 20 s */
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

/* ---- point-to-point (model parallelism) --------------------------------- */

/* The helper's p2p mode: a ring of 4 dtypes x 4 sizes (0, 1, 1000
 * elements, 3 MB) checked against the sender's formula, 8 MB both ways on
 * two threads per rank beside a thread of all_reduces (the deadlock case),
 * a wrong-size recv, six bad calls. `chunk`: FG_MPI_P2P_CHUNK for the run
 * (NULL: the default 1 GiB pieces). */
static void check_p2p(int np, const char *chunk) {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "p2p", "20", NULL};
  if (chunk) setenv("FG_MPI_P2P_CHUNK", chunk, 1);
  mpirun(np, NULL, args, 60, res);
  if (chunk) unsetenv("FG_MPI_P2P_CHUNK");
  FG_CHECK_INT(res->status, 0);
  for (int r = 0; r < np; r++) {
    char want[200];
    /* 16 ring messages, 3 threads, 1 mismatch pair, 6 refusals. */
    snprintf(want, sizeof want, "rank %d: p2p 26 checks, 0 wrong", r);
    if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
    if (r % 2 == 1) {
      snprintf(want, sizeof want,
               "rank %d: wrong size: INVALID_ARGUMENT rank %d: recv from rank %d tag 7: expected "
               "800 bytes, the message has 1000",
               r, r, r - 1);
      if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
    }
  }
  char want[200];
  snprintf(want, sizeof want,
           "rank 0: send to rank n: refused send on rank 0: peer rank %d is not another rank of "
           "the group (ranks 0 to %d, this one is 0)",
           np, np - 1);
  if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
  FG_CHECK(strstr(res->out, "rank 0: send to itself: refused send on rank 0: peer rank 0 is not "
                            "another rank") != NULL);
  FG_CHECK(strstr(res->out, "rank 0: recv from rank -1: refused recv on rank 0: peer rank -1") !=
           NULL);
  FG_CHECK(strstr(res->out, "rank 0: recv tag -1: refused recv on rank 0 (peer 1): tag -1 is "
                            "outside [0, ") != NULL);
  FG_CHECK(strstr(res->out, "rank 0: send -1 bytes: refused send on rank 0 (peer 1, tag 1): -1 "
                            "bytes is negative") != NULL);
  snprintf(want, sizeof want,
           "rank 0: recv into NULL: refused recv on rank 0 (peer %d, tag 1): buffer is NULL for 8 "
           "bytes",
           np - 1);
  if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
  FG_CHECK(strstr(res->out, "ACCEPTED") == NULL);
  free(res);
}

FG_TEST(mpi_p2p_np2, "dist,badinput") { check_p2p(2, NULL); }
FG_TEST(mpi_p2p_np4, "dist,badinput") { check_p2p(4, NULL); }
/* 64 KiB pieces: the 3 MB and 8 MB messages go as 48 and 128 pieces, the
 * path a tensor over 1 GiB takes. */
FG_TEST(mpi_p2p_np2_small_pieces, "dist") { check_p2p(2, "65536"); }

/* Rank 0 waits on rank 1, which sleeps 10 timeouts: a deadline after the
 * 2 s timeout naming the peer and the tag, and the run ends then. */
static void check_p2p_deadline(const char *op) {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "p2p_deadline", (char *)op, "2", NULL};
  mpirun(2, NULL, args, 30, res);
  FG_CHECK(res->status != -1 && res->status != 0);
  char want[160];
  snprintf(want, sizeof want, "rank 0: %s failed: DEADLINE_EXCEEDED after ", op);
  const char *p = strstr(res->out, want);
  if (!p) {
    FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
  } else {
    double after = atof(p + strlen(want));
    FG_CHECK(after >= 1.95 && after < 5.0);
  }
  snprintf(want, sizeof want, "%s rank 1 tag 5 (%s bytes) on rank 0 of 2: waited ",
           strcmp(op, "send") == 0 ? "send to" : "recv from",
           strcmp(op, "send") == 0 ? "8388608" : "64");
  if (!strstr(res->out, want)) FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
  FG_CHECK(strstr(res->out, "(timeout 2.0 s) for rank(s) 1") != NULL);
  FG_CHECK(strstr(res->out, "completed") == NULL);
  FG_CHECK(res->wall < 15); /* the sleeper would take 20 s */
  free(res);
}

FG_TEST(mpi_p2p_recv_deadline, "dist,badinput") { check_p2p_deadline("recv"); }

/* The same in a split group numbered against the world (group rank 0 is
 * world rank 1): the deadline names both numbers of the waiting rank and
 * of the peer, since mpirun and the user know the world's. */
FG_TEST(mpi_split_deadline_names_world_ranks, "dist,badinput") {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "p2p_deadline_split", "recv", "2", NULL};
  mpirun(2, NULL, args, 30, res);
  FG_CHECK(res->status != -1 && res->status != 0);
  FG_CHECK_STR_CONTAINS(res->out, "recv from rank 1 tag 5 (64 bytes) on rank 0 of 2 (MPI world "
                                  "rank 1): waited ");
  FG_CHECK_STR_CONTAINS(res->out, "(timeout 2.0 s) for rank(s) 1 (MPI world rank 0); a peer");
  FG_CHECK(res->wall < 15);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\n", res->out);
  free(res);
}
FG_TEST(mpi_p2p_send_deadline, "dist,badinput") { check_p2p_deadline("send"); }

/* A rank that fails a step aborts the communicator (what the executor does
 * on any failed step): rank 0, waiting in a recv from it, and ranks 2 and
 * 3, waiting in an all_reduce, stop at once with FG_ABORTED naming rank 1
 * and its reason, not after the 30 s timeout; rank 1's own later call is
 * refused with the same reason. */
static void check_abort_stops_peers(const char *hosts) {
  MPI_REQUIRED();
  run_result *res = malloc(sizeof *res);
  char *args[] = {helper(), "abort", "30", NULL};
  if (hosts) setenv("FG_TEST_HOSTS", hosts, 1);
  mpirun(4, NULL, args, 40, res);
  if (hosts) unsetenv("FG_TEST_HOSTS");
  FG_CHECK(res->status != -1);
  for (int r = 0; r < 4; r++) {
    char want[200];
    snprintf(want, sizeof want, "rank %d: %s failed: ABORTED after ", r,
             r == 0   ? "recv"
             : r == 1 ? "all_reduce after abort"
                      : "all_reduce");
    const char *p = strstr(res->out, want);
    if (!p) {
      FG_FAIL_AT("missing '%s' in:\n%s", want, res->out);
      continue;
    }
    double after = atof(p + strlen(want));
    FG_CHECK(after < 10.0); /* rank 1 aborts 0.3 s in; the timeout is 30 s */
    const char *nl = strchr(p, '\n');
    int len = nl ? (int)(nl - p) : (int)strlen(p);
    char line[600];
    snprintf(line, sizeof line, "%.*s", len, p);
    FG_CHECK_STR_CONTAINS(line, r == 1 ? "stopped: this rank failed: rank one gave up"
                                       : "stopped: rank 1 failed: rank one gave up");
    snprintf(want, sizeof want, "on rank %d of 4", r);
    FG_CHECK_STR_CONTAINS(line, want);
  }
  FG_CHECK(strstr(res->out, "not stopped") == NULL);
  FG_CHECK(strstr(res->out, "a second abort") == NULL);
  FG_CHECK(res->wall < 25.0);
  free(res);
}

FG_TEST(mpi_abort_stops_peers, "dist,badinput") { check_abort_stops_peers(NULL); }
/* Across hosts {0, 2} and {1, 3}: rank 3 waits in its host's segment or
 * across, and stops the same. */
FG_TEST(mpi_abort_stops_peers_across_hosts, "dist,badinput") { check_abort_stops_peers("0,1,0,1"); }
