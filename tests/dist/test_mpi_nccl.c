/* The NCCL communicator (dist/comm/comm_nccl.c), label gpu: single-process
 * cases that need at most one GPU. Each skips with a visible reason in a
 * build without NCCL, and the GPU cases also on a machine without a GPU
 * (which FG_REQUIRE_GPU=1 in the environment turns into a failure).
 * (Two or more GPUs, one MPI rank each, is the same code path with
 * fg_comm_nccl_new over fg_comm_mpi_new; it needs such a machine.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dist/comm/comm_inproc.h"
#include "dist/comm/comm_nccl.h"
#include "fgtest.h"
#include "flowgraph/dist.h"
#include "flowgraph/flowgraph.h"

#ifdef FG_HAVE_NCCL
#include <cuda_runtime.h>
#endif

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#ifdef FG_HAVE_NCCL
/* NULL when a GPU is visible, else why not. */
static const char *no_gpu(void) {
  static char why[160];
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    snprintf(why, sizeof why, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
  else if (n < 1)
    snprintf(why, sizeof why, "cudaGetDeviceCount found 0 devices");
  return e == cudaSuccess && n >= 1 ? NULL : why;
}
#define NEED_NCCL()
#define NEED_GPU()                                                                                 \
  do {                                                                                             \
    const char *why_ = no_gpu();                                                                   \
    if (why_) FG_SKIP_NO_GPU("no CUDA GPU visible (%s)", why_);                                    \
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

/* Host-memory communicators are not NCCL's: sessions stage them through
 * the host, and the scaled reduction refuses them, in every build. */
FG_TEST(nccl_device_of_other_communicators, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_comm *h[2] = {NULL, NULL};
  FG_REQUIRE(fg_comm_inproc_group(2, 5, h, st) == 0);
  FG_CHECK_INT(fg_comm_gpu(NULL), -1);
  FG_CHECK_INT(fg_comm_gpu(h[0]), -1);
  float x[2] = {1, 2};
  FG_CHECK(fg_comm_all_reduce_scaled(h[0], x, 2, FG_F32, 0.5, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK(x[0] == 1 && x[1] == 2);
  h[0]->ops->free(h[0]);
  h[1]->ops->free(h[1]);
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
#endif

/* One rank on GPU 0: the sum and mean of a group of one are the values;
 * all_gather and broadcast round-trip. */
FG_TEST(nccl_single_rank_collectives, "gpu") {
  NEED_GPU();
#ifdef FG_HAVE_NCCL
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
#endif
}

/* A failed step's abort on one rank: the next call ends at once with
 * FG_ABORTED and the reason; a second abort changes nothing. */
FG_TEST(nccl_abort_stops_calls, "dist,gpu,badinput") {
  NEED_GPU();
#ifdef FG_HAVE_NCCL
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
#endif
}

/* A missing peer on NCCL: rank 0 of 2 whose peer never joins gives a deadline at init
 * (NCCL's nonblocking init, aborted), not a hang. */
FG_TEST(nccl_missing_peer_deadline, "dist,gpu,badinput") {
  NEED_GPU();
#ifdef FG_HAVE_NCCL
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
#endif
}

/* The pre-multiplied sum on one rank is the buffer times the scale: exact
 * for a power of two in f32, within one rounding in f64; integer dtypes
 * are refused. */
FG_TEST(nccl_scaled_all_reduce_single_rank, "gpu") {
  NEED_GPU();
#ifdef FG_HAVE_NCCL
  fg_status *st = fg_status_new();
  fg_comm *c = one_rank(st);
  FG_REQUIRE(c != NULL);
  FG_CHECK_INT(fg_comm_gpu(c), 0);
  enum { N = 777 };
  float hf[N], backf[N];
  double hd[N], backd[N];
  for (int i = 0; i < N; i++) {
    hf[i] = cosf((float)i) * 5.0f;
    hd[i] = sin((double)i) * 7.0;
  }
  void *df = NULL, *dd = NULL;
  FG_REQUIRE(cudaMalloc(&df, sizeof hf) == cudaSuccess &&
             cudaMalloc(&dd, sizeof hd) == cudaSuccess);
  cudaMemcpy(df, hf, sizeof hf, cudaMemcpyHostToDevice);
  cudaMemcpy(dd, hd, sizeof hd, cudaMemcpyHostToDevice);
  FG_CHECK_INT(fg_comm_all_reduce_scaled(c, df, N, FG_F32, 0.25, st), 0);
  FG_CHECK_INT(fg_comm_all_reduce_scaled(c, dd, N, FG_F64, 0.1, st), 0);
  cudaMemcpy(backf, df, sizeof backf, cudaMemcpyDeviceToHost);
  cudaMemcpy(backd, dd, sizeof backd, cudaMemcpyDeviceToHost);
  for (int i = 0; i < N; i++) {
    FG_CHECK(backf[i] == hf[i] * 0.25f);
    FG_CHECK(fabs(backd[i] - hd[i] * 0.1) <= 1e-15 * fabs(hd[i]) + 1e-300);
  }
  FG_CHECK(fg_comm_all_reduce_scaled(c, df, N, FG_I32, 0.5, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  cudaFree(df);
  cudaFree(dd);
  c->ops->free(c);
  fg_status_free(st);
#endif
}

#ifdef FG_HAVE_NCCL
/* x -> all_reduce (mean) on cuda:0, and the weighted form with its row
 * counts, as fg_data_parallel builds them. */
static fg_graph *ar_graph(void) {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {5}, two = 2;
  fg_status *st = fg_status_new();
  double sums[2] = {3, 9};
  fg_tensor *t = fg_tensor_from_data(FG_F64, 1, &two, sums, sizeof sums, st);
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "mean", 1);
  fg_op(g, "all_reduce", "ar", &x, 1, a);
  fg_attrs_free(a);
  a = fg_attrs_new();
  fg_attrs_set_int(a, "weighted", 1);
  fg_output in[3] = {x, fg_scalar(g, FG_F64, 3), fg_constant(g, "sums", t)};
  fg_op(g, "all_reduce", "war", in, 3, a);
  fg_attrs_free(a);
  fg_tensor_free(t);
  fg_status_free(st);
  return g;
}
#endif

/* A cuda:0 session with a one-rank NCCL communicator attached: its
 * all_reduce steps give the values (a group of one), and they do call
 * NCCL: once the communicator is aborted, the run fails with FG_ABORTED
 * naming the node (the host-staged path never calls a group of one). */
FG_TEST(nccl_session_all_reduce_on_gpu, "dist,gpu") {
  NEED_GPU();
#ifdef FG_HAVE_NCCL
  fg_status *st = fg_status_new();
  fg_comm *c = one_rank(st);
  FG_REQUIRE(c != NULL);
  fg_graph *g = ar_graph();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = "cuda:0";
  fg_session *s = fg_session_new(g, &o, st);
  FG_REQUIRE(s != NULL);
  FG_REQUIRE(fg_session_set_comm(s, c, st) == 0);
  float xv[5] = {1.5f, -2.0f, 3.25f, 1e3f, 0.0f};
  int64_t d[1] = {5};
  fg_tensor *xt = fg_tensor_from_data(FG_F32, 1, d, xv, sizeof xv, st);
  fg_feed feed = {"x", xt};
  const char *fetch[2] = {"ar", "war"};
  for (int run = 0; run < 3; run++) {
    fg_tensor *out[2] = {NULL, NULL};
    FG_REQUIRE(fg_session_run(s, &feed, 1, fetch, 2, out, NULL, 0, st) == 0);
    for (int k = 0; k < 2; k++) {
      FG_CHECK(memcmp(fg_tensor_data(out[k]), xv, sizeof xv) == 0);
      fg_tensor_free(out[k]);
    }
  }
  c->ops->abort(c, "test abort");
  fg_tensor *out[2] = {NULL, NULL};
  FG_CHECK(fg_session_run(s, &feed, 1, fetch, 2, out, NULL, 0, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_ABORTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "(all_reduce) on cuda:0");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "test abort");
  fg_session_free(s);
  fg_tensor_free(xt);
  fg_graph_free(g);
  c->ops->free(c);
  fg_status_free(st);
#endif
}

/* An NCCL communicator reduces GPU memory: attached to a CPU session it is
 * refused, naming the node, its device and the communicator's GPU. */
FG_TEST(nccl_session_on_cpu_refused, "dist,gpu,badinput") {
  NEED_GPU();
#ifdef FG_HAVE_NCCL
  fg_status *st = fg_status_new();
  fg_comm *c = one_rank(st);
  FG_REQUIRE(c != NULL);
  fg_graph *g = ar_graph();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s != NULL);
  FG_CHECK(fg_session_set_comm(s, c, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "all_reduce node 'ar' runs on 'cpu:0', but its communicator is NCCL's on "
                        "cuda:0");
  /* The session still runs, without the communicator. */
  float xv[5] = {1, 2, 3, 4, 5};
  int64_t d[1] = {5};
  fg_tensor *xt = fg_tensor_from_data(FG_F32, 1, d, xv, sizeof xv, st);
  fg_feed feed = {"x", xt};
  const char *fetch[1] = {"ar"};
  fg_tensor *out[1] = {NULL};
  FG_CHECK(fg_session_run(s, &feed, 1, fetch, 1, out, NULL, 0, st) == 0);
  if (out[0]) FG_CHECK(memcmp(fg_tensor_data(out[0]), xv, sizeof xv) == 0);
  fg_tensor_free(out[0]);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  c->ops->free(c);
  fg_status_free(st);
#endif
}
