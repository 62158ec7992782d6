/* The NCCL communicator (dist/comm_nccl.c), label gpu: single-process
 * cases that need at most one GPU. Each skips with a visible reason in a
 * build without NCCL, and the GPU cases also on a machine without a GPU.
 * (Two or more GPUs, one MPI rank each, is the same code path with
 * fg_comm_nccl_new over fg_comm_mpi_new; it needs such a machine.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm_nccl.h"
#include "fgtest.h"

#ifdef FG_HAVE_NCCL
#include <cuda_runtime.h>
#endif

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#ifdef FG_HAVE_NCCL
static int gpu_count(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}
#define NEED_NCCL()
#define NEED_GPU()                                                                                 \
  do {                                                                                             \
    if (gpu_count() < 1) FG_SKIP("no CUDA GPU visible");                                           \
  } while (0)
#else
#define NEED_NCCL() FG_SKIP("flowgraph was built without NCCL (CUDA toolkit with nccl.h)")
#define NEED_GPU()  NEED_NCCL()
#endif

static void id_path(char *buf, size_t size) {
  snprintf(buf, size, "/tmp/fg_nccl_id_%ld_%ld", (long)getpid(), (long)(now_s() * 1e6));
}

FG_TEST(nccl_stub_or_built, "gpu") {
  fg_status *st = fg_status_new();
#ifdef FG_HAVE_NCCL
  FG_CHECK_INT(fg_nccl_built(), 1);
#else
  FG_CHECK_INT(fg_nccl_built(), 0);
  FG_CHECK(fg_comm_nccl_new_file("/tmp/x", 0, 1, 0, 1, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
#endif
  fg_status_free(st);
}

/* A rank whose rank 0 never writes the id gives a deadline, not a hang. */
FG_TEST(nccl_file_bootstrap_deadline, "dist,gpu,badinput") {
  NEED_NCCL();
  char path[128];
  id_path(path, sizeof path);
  fg_status *st = fg_status_new();
  double t0 = now_s();
  fg_comm *c = fg_comm_nccl_new_file(path, 1, 2, 0, 1.0, st);
  double t = now_s() - t0;
  FG_CHECK(c == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_DEADLINE_EXCEEDED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "waited 1.0 s for rank 0");
  FG_CHECK(t >= 0.99 && t < 5.0);
  fg_status_free(st);
}

FG_TEST(nccl_bad_device_refused, "dist,gpu,badinput") {
  NEED_NCCL();
  char path[128];
  id_path(path, sizeof path);
  fg_status *st = fg_status_new();
  fg_comm *c = fg_comm_nccl_new_file(path, 0, 1, 99, 1.0, st);
  FG_CHECK(c == NULL);
  /* Without a driver, ncclGetUniqueId may fail first (FG_INTERNAL); with
   * one, the device check names cuda:99. */
  if (fg_status_code(st) == FG_INVALID_ARGUMENT)
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "cuda:99 does not exist");
  else
    FG_CHECK_INT(fg_status_code(st), FG_INTERNAL);
  unlink(path);
  fg_status_free(st);
}

#ifdef FG_HAVE_NCCL
/* A group of one on GPU 0, bootstrapped through a file. */
static fg_comm *one_rank(fg_status *st) {
  char path[128];
  id_path(path, sizeof path);
  fg_comm *c = fg_comm_nccl_new_file(path, 0, 1, 0, 20, st);
  unlink(path);
  if (!c) FG_FAIL_AT("init: %s", fg_status_message(st));
  return c;
}

/* One rank on GPU 0: the sum and mean of a group of one are the values;
 * all_gather and broadcast round-trip. */
FG_TEST(nccl_single_rank_collectives, "gpu") {
  NEED_GPU();
  fg_status *st = fg_status_new();
  fg_comm *c = one_rank(st);
  FG_REQUIRE(c != NULL);
  enum { N = 1000 };
  float h[N], back[N];
  for (int i = 0; i < N; i++)
    h[i] = sinf((float)i) * 3.0f;
  float *d = NULL;
  FG_REQUIRE(cudaMalloc((void **)&d, sizeof h) == cudaSuccess);
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  FG_CHECK_INT(c->ops->all_reduce(c, d, N, FG_F32, 0, st), 0);
  FG_CHECK_INT(c->ops->all_reduce(c, d, N, FG_F32, 1, st), 0);
  cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost);
  FG_CHECK(memcmp(back, h, sizeof h) == 0);
  uint64_t all[1] = {0};
  FG_CHECK_INT(c->ops->all_gather_u64(c, 0x1234567890abcdefull, all, st), 0);
  FG_CHECK(all[0] == 0x1234567890abcdefull);
  FG_CHECK_INT(c->ops->broadcast(c, d, (int64_t)sizeof h, 0, st), 0);
  FG_CHECK(c->ops->all_reduce(c, d, N, FG_BOOL, 0, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  cudaFree(d);
  c->ops->free(c);
  fg_status_free(st);
}

/* A failed step's abort on one rank: the next call ends at once with
 * FG_ABORTED and the reason; a second abort changes nothing. */
FG_TEST(nccl_abort_stops_calls, "dist,gpu,badinput") {
  NEED_GPU();
  fg_status *st = fg_status_new();
  fg_comm *c = one_rank(st);
  FG_REQUIRE(c != NULL && c->ops->abort != NULL);
  float *d = NULL;
  FG_REQUIRE(cudaMalloc((void **)&d, 64 * sizeof *d) == cudaSuccess);
  c->ops->abort(c, "node 'x' failed");
  c->ops->abort(c, "a second reason");
  FG_CHECK(c->ops->all_reduce(c, d, 64, FG_F32, 0, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_ABORTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "this rank failed: node 'x' failed");
  cudaFree(d);
  c->ops->free(c);
  fg_status_free(st);
}

/* M1 on NCCL: rank 0 of 2 whose peer never joins gives a deadline at init
 * (NCCL's nonblocking init, aborted), not a hang. */
FG_TEST(nccl_missing_peer_deadline, "dist,gpu,badinput") {
  NEED_GPU();
  char path[128];
  id_path(path, sizeof path);
  fg_status *st = fg_status_new();
  double t0 = now_s();
  fg_comm *c = fg_comm_nccl_new_file(path, 0, 2, 0, 3.0, st);
  double t = now_s() - t0;
  unlink(path);
  FG_CHECK(c == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_DEADLINE_EXCEEDED);
  FG_CHECK(t >= 2.99 && t < 15.0);
  if (c) c->ops->free(c);
  fg_status_free(st);
}
#endif
