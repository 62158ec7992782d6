/* The communicators and file-writing helpers through the public API only
 * (flowgraph/comm.h, flowgraph/io.h), as the CLI and the benchmarks use
 * them: this file includes no internal header. Ranks of the in-process
 * group are threads. Expected values are worked out here from the inputs
 * (sums by hand, FNV-1a test vectors from Python), never read back from
 * what the library wrote. */
#include <errno.h>
#include <flowgraph/comm.h>
#include <flowgraph/io.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fgtest.h"

FG_TEST(comm_api_null_handle, "dist,badinput") {
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_comm_rank(NULL), -1);
  FG_CHECK_INT(fg_comm_size(NULL), 0);
  FG_CHECK_INT(fg_comm_cuda_device(NULL), -1);
  fg_comm_free(NULL);
  fg_comm_abort(NULL, "nothing to abort");
  double x = 1;
  uint64_t out[1];
  FG_CHECK_INT(fg_comm_all_reduce(NULL, &x, 1, FG_F64, 0, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "all_reduce: no communicator");
  FG_CHECK_INT(fg_comm_all_gather_u64(NULL, 1, out, st), -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "all_gather: no communicator");
  FG_CHECK_INT(fg_comm_broadcast(NULL, &x, 8, 0, st), -1);
  FG_CHECK_INT(fg_comm_send(NULL, &x, 8, 0, 0, st), -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "send: no communicator");
  FG_CHECK_INT(fg_comm_recv(NULL, &x, 8, 0, 0, st), -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "recv: no communicator");
  fg_comm_stats s;
  memset(&s, 0xFF, sizeof s);
  fg_comm_get_stats(NULL, &s);
  FG_CHECK(s.reduce_path == NULL);
  FG_CHECK_INT(s.shares_arenas, 0);
  FG_CHECK(s.in_place_reduces == 0 && s.fused_updates == 0 && s.message_bytes == 0);
  fg_status_free(st);
}

enum { R = 3, N = 5 };

typedef struct rank_job {
  fg_comm *c;
  double sum[N], mean[N], bcast[N];
  uint64_t gathered[R];
  int32_t received[2];
  int failed;
  char err[256];
} rank_job;

static void *rank_main(void *p) {
  rank_job *j = p;
  fg_status *st = fg_status_new();
  int r = fg_comm_rank(j->c), n = fg_comm_size(j->c);
  for (int i = 0; i < N; i++) {
    j->sum[i] = r * 10 + i;
    j->mean[i] = r * 10 + i;
    j->bcast[i] = r == 2 ? 100 + i : -1;
  }
  int rc = fg_comm_all_reduce(j->c, j->sum, N, FG_F64, 0, st);
  if (rc == 0) rc = fg_comm_all_reduce(j->c, j->mean, N, FG_F64, 1, st);
  if (rc == 0) rc = fg_comm_all_gather_u64(j->c, (uint64_t)r * 7 + 1, j->gathered, st);
  if (rc == 0) rc = fg_comm_broadcast(j->c, j->bcast, (int64_t)sizeof j->bcast, 2, st);
  /* A ring: each rank sends {rank, rank * rank} to the right, then receives
   * from the left (in-process sends are buffered, so all send first). */
  int32_t msg[2] = {r, r * r};
  if (rc == 0) rc = fg_comm_send(j->c, msg, sizeof msg, (r + 1) % n, 7, st);
  if (rc == 0) rc = fg_comm_recv(j->c, j->received, sizeof j->received, (r + n - 1) % n, 7, st);
  if (rc != 0) {
    j->failed = 1;
    snprintf(j->err, sizeof j->err, "%s", fg_status_message(st));
  }
  fg_status_free(st);
  return NULL;
}

FG_TEST(comm_api_inproc_collectives, "dist") {
  fg_comm *h[R];
  FG_REQUIRE(fg_comm_inproc_group(R, 20, h, NULL) == 0);
  rank_job jobs[R];
  pthread_t th[R];
  for (int r = 0; r < R; r++) {
    memset(&jobs[r], 0, sizeof jobs[r]);
    jobs[r].c = h[r];
    FG_CHECK_INT(fg_comm_rank(h[r]), r);
    FG_CHECK_INT(fg_comm_size(h[r]), R);
    FG_CHECK_INT(fg_comm_cuda_device(h[r]), -1); /* host memory */
    pthread_create(&th[r], NULL, rank_main, &jobs[r]);
  }
  for (int r = 0; r < R; r++)
    pthread_join(th[r], NULL);
  for (int r = 0; r < R; r++) {
    if (jobs[r].failed) FG_FAIL_AT("rank %d: %s", r, jobs[r].err);
    for (int i = 0; i < N; i++) {
      /* (0 + i) + (10 + i) + (20 + i) = 30 + 3i; the mean is 10 + i. */
      FG_CHECK_NEAR(jobs[r].sum[i], 30 + 3 * i, 0);
      FG_CHECK_NEAR(jobs[r].mean[i], 10 + i, 1e-12);
      FG_CHECK_NEAR(jobs[r].bcast[i], 100 + i, 0);
    }
    for (int q = 0; q < R; q++)
      FG_CHECK(jobs[r].gathered[q] == (uint64_t)q * 7 + 1);
    int left = (r + R - 1) % R;
    FG_CHECK_INT(jobs[r].received[0], left);
    FG_CHECK_INT(jobs[r].received[1], left * left);
  }
  fg_comm_stats s;
  fg_comm_get_stats(h[0], &s);
  FG_CHECK_STR(s.reduce_path, "not an MPI communicator");
  FG_CHECK(s.in_place_reduces == 0 && s.message_bytes == 0 && s.shares_arenas == 0);
  for (int r = 0; r < R; r++)
    fg_comm_free(h[r]);
}

FG_TEST(comm_api_abort_ends_peers_wait, "dist") {
  fg_comm *h[2];
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_comm_inproc_group(2, 20, h, NULL) == 0);
  fg_comm_abort(h[0], "disk full");
  /* Rank 1 alone: without the abort this all_reduce would wait 20 s for
   * rank 0 and then fail with FG_DEADLINE_EXCEEDED. */
  double x = 1;
  FG_CHECK_INT(fg_comm_all_reduce(h[1], &x, 1, FG_F64, 0, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_ABORTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "rank 0 failed: disk full");
  fg_comm_free(h[0]);
  fg_comm_free(h[1]);
  fg_status_free(st);
}

typedef struct check_job {
  fg_comm *c;
  uint64_t value;
  int rc;
  fg_code code;
  char msg[512];
} check_job;

static void *check_main(void *p) {
  check_job *j = p;
  fg_status *st = fg_status_new();
  j->rc = fg_comm_check_same(j->c, j->value, "graph", "load the same file", st);
  j->code = fg_status_code(st);
  snprintf(j->msg, sizeof j->msg, "%s", fg_status_message(st));
  fg_status_free(st);
  return NULL;
}

static void run_check(fg_comm **h, const uint64_t *values, check_job *jobs) {
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    jobs[r] = (check_job){.c = h[r], .value = values[r]};
    pthread_create(&th[r], NULL, check_main, &jobs[r]);
  }
  for (int r = 0; r < 2; r++)
    pthread_join(th[r], NULL);
}

FG_TEST(comm_api_check_same, "dist") {
  fg_comm *h[2];
  FG_REQUIRE(fg_comm_inproc_group(2, 20, h, NULL) == 0);
  check_job jobs[2];
  const uint64_t same[2] = {42, 42}, differ[2] = {42, 43};
  run_check(h, same, jobs);
  FG_CHECK_INT(jobs[0].rc, 0);
  FG_CHECK_INT(jobs[1].rc, 0);
  run_check(h, differ, jobs);
  for (int r = 0; r < 2; r++) {
    FG_CHECK_INT(jobs[r].rc, -1);
    FG_CHECK_INT(jobs[r].code, FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(jobs[r].msg, "graph");
    FG_CHECK_STR_CONTAINS(jobs[r].msg, "load the same file");
  }
  fg_comm_free(h[0]);
  fg_comm_free(h[1]);
}

/* FNV-1a 64 test vectors (Python: h ^= byte; h = h * 0x100000001b3 mod
 * 2^64 from 0xcbf29ce484222325). */
FG_TEST(comm_api_hash_bytes, "dist") {
  FG_CHECK(FG_HASH_SEED == 0xcbf29ce484222325ull);
  FG_CHECK(fg_hash_bytes(FG_HASH_SEED, "", 0) == 0xcbf29ce484222325ull);
  FG_CHECK(fg_hash_bytes(FG_HASH_SEED, "a", 1) == 0xaf63dc4c8601ec8cull);
  FG_CHECK(fg_hash_bytes(FG_HASH_SEED, "foobar", 6) == 0x85944171f73967e8ull);
  /* Chained: "foo" then "bar" hashes as "foobar". */
  FG_CHECK(fg_hash_bytes(fg_hash_bytes(FG_HASH_SEED, "foo", 3), "bar", 3) == 0x85944171f73967e8ull);
}

FG_TEST(comm_api_shared_host_memory, "dist") {
  const size_t bytes = 10000;
  unsigned char *p = fg_shared_host_alloc(bytes);
  FG_REQUIRE(p != NULL);
  FG_CHECK_INT((int)((uintptr_t)p % 64), 0);
  size_t nonzero = 0;
  for (size_t i = 0; i < bytes; i++)
    nonzero += p[i] != 0;
  FG_CHECK_INT((int)nonzero, 0);
  memset(p, 0xAB, bytes); /* all of it is writable */
  FG_CHECK_INT(p[bytes - 1], 0xAB);
  fg_shared_host_free(p);
  fg_shared_host_free(NULL);
}

FG_TEST(io_api_write_paths, "io") {
  char dir[] = "/tmp/fg_io_api_XXXXXX";
  FG_REQUIRE(mkdtemp(dir) != NULL);
  char file[256], link[256], absent[256];
  snprintf(file, sizeof file, "%s/model.fgb", dir);
  snprintf(link, sizeof link, "%s/latest.fgb", dir);
  snprintf(absent, sizeof absent, "%s/none.fgb", dir);
  FILE *f = fopen(file, "w");
  FG_REQUIRE(f != NULL);
  fclose(f);
  FG_REQUIRE(symlink("model.fgb", link) == 0);
  /* A device is written in place; regular files, links to them and
   * nothing at all go through a temporary file and a rename. */
  FG_CHECK_INT(fg_path_write_in_place("/dev/null"), 1);
  FG_CHECK_INT(fg_path_write_in_place(file), 0);
  FG_CHECK_INT(fg_path_write_in_place(link), 0);
  FG_CHECK_INT(fg_path_write_in_place(absent), 0);
  /* The link's target is where the rename lands (the link stays). */
  char *t = fg_path_write_target(link);
  FG_REQUIRE(t != NULL);
  FG_CHECK_STR(t, file);
  free(t);
  t = fg_path_write_target(file);
  FG_REQUIRE(t != NULL);
  FG_CHECK_STR(t, file);
  free(t);
  char *tmp = NULL;
  int fd = fg_path_open_temp(file, &tmp);
  FG_REQUIRE(fd >= 0);
  FG_REQUIRE(tmp != NULL);
  char prefix[300];
  snprintf(prefix, sizeof prefix, "%s.tmp.%ld.", file, (long)getpid());
  FG_CHECK(strncmp(tmp, prefix, strlen(prefix)) == 0);
  FG_CHECK_INT((int)write(fd, "x", 1), 1);
  close(fd);
  struct stat sb;
  FG_CHECK(stat(tmp, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 1);
  unlink(tmp);
  free(tmp);
  unlink(link);
  unlink(file);
  rmdir(dir);
}
