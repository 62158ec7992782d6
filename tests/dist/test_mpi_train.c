/* `mpirun -np N flowgraph train ... --dist mpi` on localhost (label dist):
 * the MPI run gives the same epoch losses and trained variables as one
 * process on the full batch (within 1e-5 relative in f32), and both follow
 * SGD computed by hand in double, also when batches split unevenly over
 * the ranks; a batch with fewer rows than ranks, a run outside mpirun and
 * ranks with different model files are refused. */
#include "mpi/mpi_lin.h"
#include "mpi/netns_hosts.h"
#include "dist/comm/comm_nccl.h"
#include "executor/cuda_backend.h"
#include "flowgraph/dist.h"

/* When set, mpi_train puts every g_ranks_per_host consecutive ranks on a
 * pretend host of their own (FG_MPI_HOST). */
static int g_ranks_per_host;
/* When set, mpi_train starts mpirun on these two hosts of
 * tools/netns_hosts.sh. */
static const netns_hosts *g_hosts;

static void mpi_train(int np, const char *model, const char *batch, const char *extra[],
                      const char *save, run_result *res) {
  mpi_train_at(g_hosts ? g_hosts->where : NULL, g_ranks_per_host, np, model, batch, extra, save,
               res);
  if (g_hosts && !netns_hosts_both_used(g_hosts, res->out))
    FG_FAIL_AT("mpirun did not put ranks on both hosts:\n%s", res->out);
}

/* The in-process form of the same run: fg_data_parallel over `replicas`
 * cpu:N devices in one session, fed the full batches in order (no shuffle).
 * Leaves the trained w and b in w[2], b[1]; 0 or -1. */
static int inproc_train(int replicas, int batch, int epochs, float *w, float *b) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(tpath("lin.fgb"), st);
  const char *bi[] = {"x", "y"};
  fg_graph *dg = g ? fg_data_parallel(g, replicas, bi, 2, NULL, st) : NULL;
  fg_session_options so;
  fg_session_options_init(&so);
  so.num_threads = replicas; /* one thread per cpu:N device */
  fg_session *s = dg ? fg_session_new(dg, &so, st) : NULL;
  float x[LIN_ROWS][2], y[LIN_ROWS];
  linreg_data(LIN_ROWS, x, y);
  int rc = s ? 0 : -1;
  const char *target = dg ? fg_graph_metadata(dg, "train_target") : NULL;
  for (int e = 0; rc == 0 && e < epochs; e++)
    for (int start = 0; rc == 0 && start < LIN_ROWS; start += batch) {
      int b = LIN_ROWS - start < batch ? LIN_ROWS - start : batch;
      int64_t xd[2] = {b, 2}, yd[2] = {b, 1};
      fg_tensor *xt = fg_tensor_wrap(FG_F32, 2, xd, x[start], sizeof(float) * 2 * b, st);
      fg_tensor *yt = fg_tensor_wrap(FG_F32, 2, yd, y + start, sizeof(float) * b, st);
      fg_feed feeds[2] = {{"x", xt}, {"y", yt}};
      rc = xt && yt ? fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st) : -1;
      fg_tensor_free(xt);
      fg_tensor_free(yt);
    }
  fg_tensor *wt = rc == 0 ? fg_session_variable(s, "w", st) : NULL;
  fg_tensor *bt = rc == 0 ? fg_session_variable(s, "b", st) : NULL;
  if (wt && bt) {
    memcpy(w, fg_tensor_data(wt), 2 * sizeof(float));
    memcpy(b, fg_tensor_data(bt), sizeof(float));
  } else {
    fprintf(stderr, "inproc_train: %s\n", fg_status_message(st));
    rc = -1;
  }
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  fg_session_free(s);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

/* What rank 0 prints about the gradients' path on this machine
 * (mpi_local_reduce_path), after `prefix`. */
static const char *grads_line(const char *prefix) {
  static char line[128];
  snprintf(line, sizeof line, "%sgradients all-reduced over %s", prefix, mpi_local_reduce_path());
  return line;
}

/* `device`: the ranks' --device (NULL: the default, cpu:0); `comm`: their
 * --dist-comm (NULL: the default, auto), and `says`: a line the run must
 * print (NULL: none). */
static void check_matches_comm(int np, int shuffle, const char *batch, const char *device,
                               const char *comm, const char *says) {
  MPI_REQUIRED();
  if (device && fg_cuda_device_count() < 1)
    FG_SKIP_NO_GPU("no CUDA device (or no CUDA backend in this build) for --device %s", device);
  FG_REQUIRE(setup_linreg() == 0);
  const char *extra[7] = {NULL};
  int n_extra = 0;
  if (shuffle) extra[n_extra++] = "--shuffle", extra[n_extra++] = "7";
  if (device) extra[n_extra++] = "--device", extra[n_extra++] = device;
  if (comm) extra[n_extra++] = "--dist-comm", extra[n_extra++] = comm;
  run_result *res = malloc(sizeof *res);
  mpi_train(np, "lin.fgb", batch, extra, "mpi.fgb", res);
  if (says) FG_CHECK_STR_CONTAINS(res->out, says);
  FG_CHECK_INT(res->status, 0);
  /* The single-process run on the full batches, through the same CLI. */
  cli_result r;
  single_train(&r, "lin.fgb", batch, shuffle);
  FG_CHECK_INT(r.code, 0);
  float wm[2], bm[1];
  check_vs_single(res->out, r.out, "mpi.fgb", atoi(batch), shuffle, 0, wm, bm);
  /* The in-process replicas sum in the same rank order with the same
   * kernels: the same bits as the MPI ranks (on the CPU). */
  /* On one host the CPU ranks' gradients go through one shared segment
   * (dist/comm/shm_reduce.c); rank 0 alone says so. */
  if (!device) FG_CHECK_INT(count_substr(res->out, grads_line("--dist mpi: ")), 1);
  if (!shuffle && !device) {
    float wi[2], bi[1];
    FG_CHECK_INT(inproc_train(np, atoi(batch), 3, wi, bi), 0);
    FG_CHECK(memcmp(wi, wm, sizeof wi) == 0);
    FG_CHECK(memcmp(bi, bm, sizeof bi) == 0);
    if (memcmp(wi, wm, sizeof wi) != 0 || memcmp(bi, bm, sizeof bi) != 0)
      fprintf(stderr, "in-process w %.9g %.9g b %.9g, MPI w %.9g %.9g b %.9g\n", wi[0], wi[1],
              bi[0], wm[0], wm[1], bm[0]);
  }
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\nsingle:\n%s\n", res->out, r.out);
  result_free(&r);
  free(res);
  fgt_rmtree(tmpdir);
}

static void check_matches_on(int np, int shuffle, const char *batch, const char *device) {
  check_matches_comm(np, shuffle, batch, device, NULL, NULL);
}

static void check_matches_single(int np, int shuffle, const char *batch) {
  check_matches_on(np, shuffle, batch, NULL);
}

/* Ranks on two pretend hosts of 2: the gradients go through each host's
 * segment and across by messages. The sum's order (each host's ranks,
 * then the hosts) differs from one host's, so the comparison is within
 * 1e-5 relative, not bit for bit; SGD by hand within 1e-4 as always. */
FG_TEST(mpi_train_np4_two_hosts_matches_single, "dist") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  run_result *res = malloc(sizeof *res);
  g_ranks_per_host = 2;
  mpi_train(4, "lin.fgb", "8", NULL, "mpi.fgb", res);
  g_ranks_per_host = 0;
  FG_CHECK_INT(res->status, 0);
  if (strcmp(mpi_local_reduce_path(), "shared memory") == 0)
    FG_CHECK_INT(count_substr(res->out, "--dist mpi: gradients all-reduced over shared memory "
                                        "within each of 2 hosts (2 ranks each), MPI messages "
                                        "across"),
                 1);
  check_vs_single_train(res, "8");
}

/* One batch per epoch: every epoch line is one step's loss. */
FG_TEST(mpi_train_np2_matches_single, "dist") { check_matches_single(2, 0, "40"); }

/* Every rank on cuda:0 (one GPU serves both): the GPU plans' all_reduce
 * goes through host memory and MPI; the result is the single CPU run's
 * (within f32 rounding: the GPU kernels sum in another order). Uneven
 * shards (7 rows over 2 ranks) take the row-weighted all_reduce. */
FG_TEST(mpi_train_np2_on_gpu_matches_single, "dist,gpu") {
  /* Two ranks on one GPU: auto leaves NCCL out (it needs a GPU per rank). */
  check_matches_comm(2, 0, "40", "cuda:0", NULL,
                     "2 ranks on GPUs; gradients all-reduced through host memory over MPI");
}
FG_TEST(mpi_train_np2_on_gpu_uneven_matches_single, "dist,gpu") {
  check_matches_on(2, 1, "7", "cuda:0");
}

/* One GPU per rank (cuda:local): the gradients' all_reduce runs on the
 * GPUs with NCCL; even and uneven shards (the latter through NCCL's
 * pre-multiplied sum) match the single CPU run within f32 rounding. Needs
 * 2 GPUs and an NCCL build. */
static void check_nccl(const char *batch) {
  if (!fg_nccl_built()) FG_SKIP("flowgraph was built without NCCL");
  if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA device (or no CUDA backend)");
  if (fg_cuda_device_count() < 2)
    FG_SKIP("needs 2 CUDA GPUs for one per rank (this machine has %d)", fg_cuda_device_count());
  check_matches_comm(2, 0, batch, "cuda:local", "nccl",
                     "2 ranks on GPUs; gradients all-reduced with NCCL on the GPUs");
}
FG_TEST(mpi_train_np2_nccl_matches_single, "dist,gpu") { check_nccl("40"); }
FG_TEST(mpi_train_np2_nccl_uneven_matches_single, "dist,gpu") { check_nccl("7"); }
FG_TEST(mpi_train_np4_matches_single, "dist") { check_matches_single(4, 0, "8"); }
FG_TEST(mpi_train_np4_shuffled_matches_single, "dist") { check_matches_single(4, 1, "8"); }

/* Uneven shards: 40 rows in batches of 7 over 3 ranks split 3+2+2 and the
 * last batch (5) 2+2+1; batches of 6 over 4 ranks split 2+2+1+1. The
 * row-weighted all_reduce keeps each step the full batch's SGD step. */
FG_TEST(mpi_train_np3_uneven_batches_match_single, "dist") { check_matches_single(3, 0, "7"); }
FG_TEST(mpi_train_np4_uneven_batches_match_single, "dist") { check_matches_single(4, 0, "6"); }

/* A batch (or the last batch) with fewer rows than ranks would leave a rank
 * without rows. */
static void check_small_batch_refused(const char *batch, const char *want) {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  run_result *res = malloc(sizeof *res);
  mpi_train(4, "lin.fgb", batch, NULL, NULL, res);
  FG_CHECK(res->status != -1 && res->status != 0);
  FG_CHECK_STR_CONTAINS(res->out, want);
  free(res);
  fgt_rmtree(tmpdir);
}

FG_TEST(mpi_train_batch_below_ranks_refused, "dist,badinput") {
  check_small_batch_refused("2", "with 4 ranks: a batch of 2 rows leaves a rank without rows");
}
FG_TEST(mpi_train_last_batch_below_ranks_refused, "dist,badinput") {
  /* 40 = 3 * 13 + 1 */
  check_small_batch_refused("13", "a batch of 1 rows (the last batch) leaves a rank without rows");
}

FG_TEST(mpi_train_without_mpirun_refused, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  cli_result r;
  char xi[700], yi[700];
  lin_inputs(xi, yi);
  cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--dist",
      "mpi", NULL);
  FG_CHECK(r.code != 0);
  FG_CHECK_STR_CONTAINS(r.err, "not started by mpirun");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* --dist-loss sum on a model whose loss sums squared errors over rows
 * (lsum.fgb, SGD at 0.01): batches of 7 over 2 ranks (4 + 3, and 3 + 2 for
 * the last) add the ranks' gradients and losses, so the epoch losses and
 * saved w, b match one process on the full batches (1e-5) and SGD on the
 * summed loss by hand in double (1e-4). Without the flag the ranks'
 * gradients are averaged (weighted by rows): w ends elsewhere. */
#define LR_SUM 0.01
/* `model` (lsum.fgb or a split of it, in the test's folder) on np
 * processes with --dist-loss sum, against one process on lsum.fgb and SGD
 * by hand; then without the flag, which must end elsewhere. */
static void check_loss_sum(int np, const char *model) {
  const char *extra[3] = {"--dist-loss", "sum", NULL};
  run_result *res = malloc(sizeof *res);
  mpi_train(np, model, "7", extra, "mpi.fgb", res);
  FG_CHECK_INT(res->status, 0);
  cli_result r;
  single_train(&r, "lsum.fgb", "7", 0);
  FG_CHECK_INT(r.code, 0);
  double lm[8], ls[8], ref[8];
  linp p;
  lin_train_reference_loss(7, 3, 0, 7, LR_SUM, 1, &p, ref);
  FG_CHECK_INT(parse_epochs(res->out, lm, 8, NULL, NULL), 3);
  FG_CHECK_INT(parse_epochs(r.out, ls, 8, NULL, NULL), 3);
  for (int e = 0; e < 3; e++) {
    FG_CHECK(rel_err(lm[e], ls[e]) < 1e-5);
    FG_CHECK(rel_err(lm[e], ref[e]) < 1e-4);
  }
  float wm[2], bm[1], ws[2], bs[1];
  FG_CHECK_INT(saved_variable(tpath("mpi.fgb"), "w", wm, 2), 2);
  FG_CHECK_INT(saved_variable(tpath("single.fgb"), "w", ws, 2), 2);
  FG_CHECK_INT(saved_variable(tpath("mpi.fgb"), "b", bm, 1), 1);
  FG_CHECK_INT(saved_variable(tpath("single.fgb"), "b", bs, 1), 1);
  for (int i = 0; i < 2; i++) {
    FG_CHECK(rel_err(wm[i], ws[i]) < 1e-5);
    FG_CHECK(rel_err(wm[i], p.w[i]) < 1e-4);
  }
  FG_CHECK(rel_err(bm[0], bs[0]) < 1e-5);
  FG_CHECK(rel_err(bm[0], p.b) < 1e-4);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\nsingle:\n%s\n", res->out, r.out);
  result_free(&r);
  /* The default (mean) on the same model. */
  mpi_train(np, model, "7", NULL, "mean.fgb", res);
  FG_CHECK_INT(res->status, 0);
  FG_CHECK_INT(saved_variable(tpath("mean.fgb"), "w", wm, 2), 2);
  FG_CHECK(rel_err(wm[0], p.w[0]) > 1e-3 || rel_err(wm[1], p.w[1]) > 1e-3);
  free(res);
}

FG_TEST(mpi_train_loss_sum_np2_uneven, "dist") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  FG_REQUIRE(build_linreg_loss(tpath("lsum.fgb"), 0, LR_SUM, 1) == 0);
  check_loss_sum(2, "lsum.fgb");
  fgt_rmtree(tmpdir);
}

/* --dist-loss, --dist-comm and --device cuda:local: bad values and a
 * missing --dist mpi are usage errors. */
FG_TEST(mpi_train_dist_option_bad_args, "dist,badinput") {
  FG_REQUIRE(setup_linreg() == 0);
  char xi[700], yi[700];
  lin_inputs(xi, yi);
  cli_result r;
  cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--dist",
      "mpi", "--dist-loss", "max", NULL);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--dist-loss needs mean or sum");
  result_free(&r);
  cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1",
      "--dist-loss", "sum", NULL);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--dist-loss needs --dist mpi or --micro-batches");
  result_free(&r);
  /* --dist-comm and --device cuda:local likewise. */
  cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1", "--dist",
      "mpi", "--dist-comm", "tcp", NULL);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--dist-comm needs auto, mpi or nccl");
  result_free(&r);
  cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1",
      "--dist-comm", "nccl", NULL);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--dist-comm need --dist mpi");
  result_free(&r);
  cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs", "1",
      "--device", "cuda:local", NULL);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--device cuda:local needs --dist mpi");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* Under mpirun, NCCL asked for on cpu:0 is refused on every rank alike (no
 * rank waits for another), and so is cuda:local on a machine without a
 * GPU. */
FG_TEST(mpi_train_dist_comm_refused_off_gpu, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  run_result *res = malloc(sizeof *res);
  const char *nccl[] = {"--dist-comm", "nccl", NULL};
  mpi_train(2, "lin.fgb", "8", nccl, NULL, res);
  FG_CHECK(res->status != -1 && res->status != 0);
  FG_CHECK_STR_CONTAINS(res->out, "--dist-comm nccl: rank 0 does not run on a CUDA device");
  FG_CHECK(strstr(res->out, "epoch 1/") == NULL);
  if (fg_cuda_device_count() == 0) {
    const char *local[] = {"--device", "cuda:local", NULL};
    mpi_train(2, "lin.fgb", "8", local, NULL, res);
    FG_CHECK(res->status != -1 && res->status != 0);
    FG_CHECK_STR_CONTAINS(res->out, "--device cuda:local: rank 0 sees no CUDA device");
    FG_CHECK(strstr(res->out, "epoch 1/") == NULL);
  }
  free(res);
  fgt_rmtree(tmpdir);
}

/* The graph-hash check through the CLI: rank 1 loads a model with another learning rate
 * (MPMD launch, "A : B"), so the files differ. */
/* MPMD: rank 0 runs `train m1 ... extra0`, rank 1 `train m2 ... extra1`
 * (each up to 4 more arguments, NULL-ended), both --dist mpi on the linear
 * data. Refused on the graph hash before any epoch. */
static void check_mpmd_refused(const char *m1, const char *const *extra0, const char *m2,
                               const char *const *extra1) {
  char xi[700], yi[700];
  lin_inputs(xi, yi);
  char *args[48];
  int n = 0;
  for (int r = 0; r < 2; r++) {
    if (r) {
      args[n++] = ":";
      args[n++] = "-np";
      args[n++] = "1";
    }
    const char *const head[] = {FG_CLI_PATH, "train", r ? m2 : m1, "-i", xi,       "-i", yi,
                                "--batch",   "8",     "--epochs",  "1",  "--dist", "mpi"};
    for (size_t k = 0; k < sizeof head / sizeof *head; k++)
      args[n++] = (char *)head[k];
    for (const char *const *e = r ? extra1 : extra0; e && *e; e++)
      args[n++] = (char *)*e;
  }
  args[n] = NULL;
  run_result *res = malloc(sizeof *res);
  mpirun(1, NULL, args, 30, res);
  FG_CHECK(res->status != -1 && res->status != 0);
  FG_CHECK_STR_CONTAINS(res->out, "ranks disagree on the graph: rank 0 has graph hash 0x");
  FG_CHECK_STR_CONTAINS(res->out, ", rank 1 has 0x");
  FG_CHECK_STR_CONTAINS(res->out, "(every rank must load the same file with the same options)");
  FG_CHECK(strstr(res->out, "epoch 1/1") == NULL);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\n", res->out);
  free(res);
}

FG_TEST(mpi_train_mismatched_models_refused, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  FG_REQUIRE(build_linreg(tpath("lin2.fgb"), 0, 0.2) == 0);
  char m1[700], m2[700];
  snprintf(m1, sizeof m1, "%s", tpath("lin.fgb"));
  snprintf(m2, sizeof m2, "%s", tpath("lin2.fgb"));
  check_mpmd_refused(m1, NULL, m2, NULL);
  fgt_rmtree(tmpdir);
}

/* A model whose weight gradient, 64 x 64 f32 (16 KiB; 32 KiB over 2 ranks),
 * is over the small path: x [?,64] w, the mean squared error against y
 * [?,64], SGD. */
static int build_wide(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 64}, wd[2] = {64, 64};
  fg_tensor *w = fg_tensor_new(FG_F32, 2, wd, NULL);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, xd);
  fg_output d = fg_sub(g, fg_matmul(g, x, fg_variable(g, "w", w), 0, 0), y);
  fg_output loss = fg_set_name(g, fg_reduce_mean(g, fg_mul(g, d, d), NULL, 0, 0), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  fg_status *st = fg_status_new();
  int rc = fg_minimize(g, loss, NULL, 0, &cfg, st).node >= 0 ? fg_graph_save(g, path, st) : -1;
  fg_status_free(st);
  fg_tensor_free(w);
  fg_graph_free(g);
  return rc;
}

/* Data parallelism over 2 processes on one host: the session's arenas are
 * memory the other rank maps, so the gradient's all_reduce reads both
 * buffers in place, once per run (1 warm-up and 3 measured, at least), and
 * the profile says so (4 measured). Over MPI messages (FG_MPI_SHM=0) it
 * does not. */
FG_TEST(mpi_profile_reads_buffers_in_place, "dist") {
  MPI_REQUIRED();
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_wide(tpath("wide.fgb")) == 0);
  char path[700];
  snprintf(path, sizeof path, "%s", tpath("wide.fgb"));
  char *args[] = {FG_CLI_PATH, "profile", path, "--random-inputs", "--batch", "8", "--runs", "3",
                  "--dist",    "mpi",     NULL};
  for (int shm_off = 0; shm_off < 2; shm_off++) {
    run_result *res = malloc(sizeof *res);
    if (shm_off) setenv("FG_MPI_SHM", "0", 1);
    mpirun(2, NULL, args, 50, res);
    if (shm_off) unsetenv("FG_MPI_SHM");
    FG_CHECK_INT(res->status, 0);
    /* "gradients all-reduced over PATH; N all_reduces read the ranks'
     * buffers in place", the count only when N > 0. */
    const char *at = strstr(res->out, "gradients all-reduced over ");
    const char *nl = at ? strchr(at, '\n') : NULL;
    const char *tail = at ? strstr(at, " all_reduces read the ranks' buffers in place") : NULL;
    const char *semi = at ? strstr(at, "; ") : NULL;
    FG_CHECK(at != NULL && nl != NULL);
    long n = tail && semi && tail < nl && semi < tail ? atol(semi + 2) : 0;
    if (!shm_off && strcmp(mpi_local_reduce_path(), "shared memory") == 0)
      FG_CHECK(n >= 4);
    else
      FG_CHECK(n == 0 && (!tail || tail > nl));
    /* Over messages, each all_reduce of the 16 KiB gradient sends it all
     * to the other rank (its slice in the reduce-scatter, the other's in
     * the all-gather): 16384 bytes each, 4 of them (1 warm-up, 3 runs),
     * plus the profile's few small ones. None over shared memory. */
    const char *sent = at ? strstr(at, "; rank 0 sent ") : NULL;
    long long bytes = sent && sent < nl ? atoll(sent + strlen("; rank 0 sent ")) : 0;
    if (shm_off) {
      FG_CHECK(bytes >= 4 * 16384 && bytes < 5 * 16384);
      FG_CHECK(sent && strstr(sent, " bytes of them as MPI messages\n") != NULL);
    } else if (strcmp(mpi_local_reduce_path(), "shared memory") == 0) {
      FG_CHECK(bytes == 0);
    }
    if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\n", res->out);
    free(res);
  }
  fgt_rmtree(tmpdir);
}

/* The graph-hash check for the options: rank 0 bounds the micro-batches in flight, rank 1
 * does not, so their rewritten graphs differ. Refused before any step. */
FG_TEST(mpi_train_mismatched_in_flight_refused, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  char m1[700];
  snprintf(m1, sizeof m1, "%s", tpath("lin.fgb"));
  const char *const bounded[] = {"--micro-batches", "4", "--in-flight", "1", NULL};
  const char *const plain[] = {"--micro-batches", "4", NULL};
  check_mpmd_refused(m1, bounded, m1, plain);
  fgt_rmtree(tmpdir);
}

/* The graph-hash check for what the ranks run: rank 0 evaluates "mae" after every epoch,
 * rank 1 does not (its next training step would pair with rank 0's eval
 * run); then the two name different --loss nodes. Refused before any
 * step. */
FG_TEST(mpi_train_mismatched_eval_or_loss_refused, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  char m1[700];
  snprintf(m1, sizeof m1, "%s", tpath("lin.fgb"));
  const char *const eval[] = {"--eval", "mae", NULL};
  check_mpmd_refused(m1, eval, m1, NULL);
  const char *const loss_mae[] = {"--loss", "mae", NULL};
  check_mpmd_refused(m1, NULL, m1, loss_mae);
  fgt_rmtree(tmpdir);
}

/* ---- Deadlines through the CLI: a rank killed mid-training --------------- */

#include <pthread.h>

#include "mpi/mpi_procs.h"

typedef struct killer {
  char mark[32];
  int killed;
  int no_segment; /* all_reduce goes through MPI messages here */
} killer;

/* Waits until rank 1 is in the training loop (wait_training), then
 * SIGKILLs it. */
static void *kill_rank1(void *arg) {
  killer *k = arg;
  pid_t p = wait_training(k->mark, 1, k->no_segment, 500, NULL);
  k->killed = p > 0 && kill(p, SIGKILL) == 0;
  return NULL;
}

static int same_rank(int rank, int want) { return rank == want; }

/* Whether some "(timeout 2.0 s) for rank(s) A, B, ...;" in out lists
 * `rank`. */
static int waited_for_rank(const char *out, int rank) {
  const char *key = "timeout 2.0 s) for rank(s) ";
  for (const char *p = strstr(out, key); p; p = strstr(p + 1, key))
    if (rank_list_any(p + strlen(key), same_rank, rank)) return 1;
  return 0;
}

FG_TEST(mpi_train_killed_rank_gives_deadline, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  killer k = {{0}, 0, strcmp(mpi_local_reduce_path(), "shared memory") != 0};
  snprintf(k.mark, sizeof k.mark, "%ld", (long)getpid());
  setenv("FG_TEST_MARK", k.mark, 1);
  char xi[700], yi[700];
  lin_inputs(xi, yi);
  /* Far more epochs than the test lets it run: the kill lands mid-run. */
  char *args[] = {FG_CLI_PATH, "train",    (char *)tpath("lin.fgb"),
                  "-i",        xi,         "-i",
                  yi,          "--batch",  "8",
                  "--epochs",  "10000000", "-q",
                  "--dist",    "mpi",      "--dist-timeout",
                  "2",         NULL};
  pthread_t th;
  FG_REQUIRE(pthread_create(&th, NULL, kill_rank1, &k) == 0);
  run_result *res = malloc(sizeof *res);
  mpirun(4, "--enable-recovery", args, 40, res);
  pthread_join(th, NULL);
  unsetenv("FG_TEST_MARK");
  FG_CHECK(k.killed);
  FG_CHECK(res->status != -1);
  FG_CHECK(res->wall < 30);
  /* Every survivor stops: by its own deadline, or earlier, told by the
   * first survivor whose deadline passed (its abort names the dead rank). */
  for (int r = 0; r < 4; r += r == 0 ? 2 : 1) {
    char waited[64], stopped[64];
    snprintf(waited, sizeof waited, "on rank %d of 4: waited ", r);
    snprintf(stopped, sizeof stopped, "on rank %d of 4: stopped: rank ", r);
    if (!strstr(res->out, waited) && !strstr(res->out, stopped))
      FG_FAIL_AT("rank %d reports neither '%s' nor '%s' in:\n%s", r, waited, stopped, res->out);
  }
  FG_CHECK_STR_CONTAINS(res->out, "DEADLINE_EXCEEDED");
  /* A deadline names the killed rank among those it waited for. Not
   * always alone: a survivor slow to reach the collective (seen under ASan
   * on 2 cores: "for rank(s) 0, 1") is named too. */
  if (!waited_for_rank(res->out, 1))
    FG_FAIL_AT("no deadline names rank 1, the killed one, in:\n%s", res->out);
  free(res);
  fgt_rmtree(tmpdir);
}

/* Model parallelism through the CLI: lin.fgb with its loss (and so most of
 * the backward pass) placed on rank 1, the rest on rank 0. Every rank feeds
 * whole batches; rank 0 prints and saves after collecting rank 1's
 * variables. The same kernels on the same data as one process: the same
 * epoch losses and the same trained bits. */
/* A linear regression model of the test's folder (`src`) with its loss on
 * rank 1 and pred on rank 0, saved as `dst` (lin.fgb as lin_mp.fgb); the
 * graph is returned for the caller to inspect. */
static fg_graph *split_model(const char *src, const char *dst, fg_status *st) {
  fg_graph *g = fg_graph_load(tpath(src), st);
  if (!g) return NULL;
  int loss = fg_graph_find(g, "loss"), pred = fg_graph_find(g, "pred");
  if (loss < 0 || pred < 0) {
    fg_graph_free(g);
    return NULL;
  }
  fg_set_device(g, (fg_output){loss, 0}, "rank:1/cpu:0");
  fg_set_device(g, (fg_output){pred, 0}, "rank:0/cpu:0");
  if (fg_graph_save(g, tpath(dst), st) != 0) {
    fg_graph_free(g);
    return NULL;
  }
  return g;
}

static fg_graph *make_lin_mp(fg_status *st) { return split_model("lin.fgb", "lin_mp.fgb", st); }

/* Model parallelism inside each process with data parallelism across
 * them: lin.fgb split over cpu:0 and cpu:1 of every rank. The rewrite
 * puts every collective on one device (cpu:0, where x is), so
 * 2 ranks train as one process on the full batches (1e-5) and as SGD by
 * hand (1e-4). */
FG_TEST(mpi_train_np2_model_on_two_devices_matches_single, "dist") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(tpath("lin.fgb"), st);
  FG_REQUIRE(g);
  /* pred = x w + b: the matmul (w's gradient with it) on cpu:0, the add
   * (b's gradient) and the loss on cpu:1: gradients on both devices. */
  int pred = fg_graph_find(g, "pred");
  FG_REQUIRE(pred >= 0);
  fg_set_device(g, g->nodes[pred].inputs[0], "cpu:0");
  fg_set_device(g, (fg_output){pred, 0}, "cpu:1");
  fg_set_device(g, (fg_output){fg_graph_find(g, "loss"), 0}, "cpu:1");
  FG_REQUIRE(fg_graph_save(g, tpath("lin_dev.fgb"), st) == 0);
  fg_graph_free(g);
  fg_status_free(st);
  run_result *res = malloc(sizeof *res);
  mpi_train(2, "lin_dev.fgb", "40", NULL, "mpi.fgb", res);
  FG_CHECK_INT(res->status, 0);
  check_vs_single_train(res, "40");
}

/* setup_linreg, then lin_mp.fgb for a test that only runs it. 0 or -1. */
static int setup_lin_mp(void) {
  if (setup_linreg() != 0) return -1;
  fg_status *st = fg_status_new();
  fg_graph *g = make_lin_mp(st);
  int rc = g ? 0 : -1;
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

/* np = 2: model parallelism. np = 4: hybrid, 2 replicas of the 2-stage
 * model (processes 0, 1 are replica 0's stages, 2, 3 replica 1's), each on
 * its half of every batch (uneven for batch 7), with each stage's
 * gradients all-reduced across the replicas. */
static void check_model_parallel_in_flight(int np, const char *batch, const char *micro,
                                           const char *in_flight) {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  fg_status *st = fg_status_new();
  fg_graph *g = make_lin_mp(st);
  FG_REQUIRE(g);
  fg_partition *p = fg_partition_new(g, NULL, st);
  FG_REQUIRE(p);
  FG_CHECK_INT(fg_partition_num_ranks(p), 2);
  /* Both ways: pred's difference to rank 1, the loss gradient back. */
  int to1 = 0, to0 = 0;
  for (int i = 0; i < fg_partition_num_transfers(p); i++) {
    const fg_transfer *t = fg_partition_transfer(p, i);
    to1 += fg_partition_device(p, t->dst_device).rank == 1;
    to0 += fg_partition_device(p, t->dst_device).rank == 0;
  }
  FG_CHECK(to1 > 0 && to0 > 0);
  fg_partition_free(p);
  fg_graph_free(g);
  run_result *res = malloc(sizeof *res);
  const char *extra[5] = {micro ? "--micro-batches" : NULL, micro, in_flight ? "--in-flight" : NULL,
                          in_flight, NULL};
  mpi_train(np, "lin_mp.fgb", batch, extra, "mp.fgb", res);
  FG_CHECK_INT(res->status, 0);
  char xi[700], yi[700];
  lin_inputs(xi, yi);
  cli_result r;
  cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", batch, "--epochs", "3",
      "--save", tpath("single.fgb"), NULL);
  FG_CHECK_INT(r.code, 0);
  float wm[2], bm[1];
  /* Model parallelism alone (np 2): the same kernels on the same rows. */
  check_vs_single(res->out, r.out, "mp.fgb", atoi(batch), 0, np == 2 && !micro, wm, bm);
  if (micro) {
    char says[64];
    snprintf(says, sizeof says, ", %s micro-batches per step\n", micro);
    FG_CHECK_INT(count_substr(res->out, says), 1);
  }
  if (np > 2 && !micro) {
    /* The unsplit model's in-process replicas reduce the same gradients
     * in the same order: the same bits. */
    float wi[2], bi[1];
    FG_CHECK_INT(inproc_train(np / 2, atoi(batch), 3, wi, bi), 0);
    FG_CHECK(memcmp(wi, wm, sizeof wi) == 0);
    FG_CHECK(memcmp(bi, bm, sizeof bi) == 0);
    /* Only process 0 (replica 0's stage 0) prints. */
    FG_CHECK_INT(count_substr(res->out, "wrote "), 1);
    FG_CHECK_INT(count_substr(res->out, grads_line("--dist mpi: ")), 1);
  }
  /* And it trained: w moved from its start toward (2, -3). */
  FG_CHECK(fabs(wm[0] - LIN_W0) > 1e-3);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\nsingle:\n%s\n", res->out, r.out);
  result_free(&r);
  free(res);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

static void check_model_parallel_with(int np, const char *batch, const char *micro) {
  check_model_parallel_in_flight(np, batch, micro, NULL);
}

static void check_model_parallel(int np, const char *batch) {
  check_model_parallel_with(np, batch, NULL);
}

FG_TEST(mpi_train_model_parallel_np2, "dist") { check_model_parallel(2, "8"); }
/* Pipelined: each rank's stage runs on micro-batches (8 rows as 3 + 3 + 2),
 * and the step is still the whole batch's. */
FG_TEST(mpi_train_model_parallel_np2_micro_batches, "dist") {
  check_model_parallel_with(2, "8", "3");
}
/* 8 rows as 8 micro-batches of one row over the 2 ranks' stages: more than
 * 4 (2 per stage), so micro-batch K + 4 waits for K on each rank (gates
 * inside each rank's part): no deadlock, the same step. */
FG_TEST(mpi_train_model_parallel_np2_micro_batches_bounded, "dist") {
  check_model_parallel_with(2, "8", "8");
}
/* One micro-batch in flight per rank (--in-flight 1): the stages take
 * turns, and the step is the same. */
FG_TEST(mpi_train_model_parallel_np2_in_flight_1, "dist") {
  check_model_parallel_in_flight(2, "8", "4", "1");
}
/* The 2-stage model with one stage on each of two hosts in network
 * namespaces (tools/netns_hosts.sh, tests/dist/test_mpi_hosts.c): the
 * activations and their gradients cross as MPI messages over TCP, and the
 * trained bits are still one process's; then in 4 micro-batches. */
static void check_model_parallel_on_two_hosts(const char *micro) {
  MPI_REQUIRED();
  netns_hosts h;
  NETNS_HOSTS_REQUIRED(&h, 1);
  g_hosts = &h;
  check_model_parallel_with(2, "8", micro);
  g_hosts = NULL;
  netns_hosts_down(&h);
}
FG_TEST(mpi_train_model_parallel_np2_two_hosts, "dist") { check_model_parallel_on_two_hosts(NULL); }
FG_TEST(mpi_train_model_parallel_np2_two_hosts_micro_batches, "dist") {
  check_model_parallel_on_two_hosts("4");
}
/* 2 replicas of the 2-stage model, each on its 4 rows as 2 micro-batches:
 * the combined gradients are all-reduced between the replicas' stages. */
FG_TEST(mpi_train_hybrid_np4_micro_batches, "dist") { check_model_parallel_with(4, "8", "2"); }
FG_TEST(mpi_train_hybrid_np4, "dist") { check_model_parallel(4, "8"); }
/* Batches of 7 split 4 + 3 over the replicas, the last (5) 3 + 2: the
 * row-weighted all_reduce, with rank 1 receiving the row counts. */
FG_TEST(mpi_train_hybrid_np4_uneven, "dist") { check_model_parallel(4, "7"); }

/* --dist-loss sum on a hybrid run: lsum.fgb (squared errors summed over
 * rows, SGD at 0.01) split over 2 ranks, 2 replicas of it on 4 processes,
 * batches of 7 (4 + 3 rows, the last 3 + 2). Each stage adds its replicas'
 * gradients, so epoch losses and saved w, b match one process on the full
 * batches (1e-5) and SGD on the summed loss by hand in double (1e-4). */
FG_TEST(mpi_train_hybrid_np4_loss_sum_uneven, "dist,slow") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  FG_REQUIRE(build_linreg_loss(tpath("lsum.fgb"), 0, LR_SUM, 1) == 0);
  fg_status *st = fg_status_new();
  fg_graph *g = split_model("lsum.fgb", "lsum_mp.fgb", st);
  FG_REQUIRE(g);
  fg_graph_free(g);
  fg_status_free(st);
  check_loss_sum(4, "lsum_mp.fgb");
  fgt_rmtree(tmpdir);
}

/* lin_mp.fgb with the variable b (read by pred on rank 0) on rank 1: its
 * update runs there, so before saving rank 0 gathers it from rank 1 over
 * the replica's own group, a split of the world in hybrid runs. Same
 * losses and trained values as one process. */
FG_TEST(mpi_train_hybrid_np4_variable_on_rank1, "dist") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  fg_status *st = fg_status_new();
  fg_graph *g = split_model("lin.fgb", "lin_b1.fgb", st);
  FG_REQUIRE(g);
  int b = fg_graph_find(g, "b");
  FG_REQUIRE(b >= 0);
  fg_set_device(g, (fg_output){b, 0}, "rank:1/cpu:0");
  FG_REQUIRE(fg_graph_save(g, tpath("lin_b1.fgb"), st) == 0);
  fg_graph_free(g);
  fg_status_free(st);
  run_result *res = malloc(sizeof *res);
  mpi_train(4, "lin_b1.fgb", "8", NULL, "mp.fgb", res);
  FG_CHECK_INT(res->status, 0);
  char xi[700], yi[700];
  lin_inputs(xi, yi);
  cli_result r;
  cli(&r, "train", tpath("lin.fgb"), "-i", xi, "-i", yi, "--batch", "8", "--epochs", "3", "--save",
      tpath("single.fgb"), NULL);
  FG_CHECK_INT(r.code, 0);
  float wm[2], bm[1];
  check_vs_single(res->out, r.out, "mp.fgb", 8, 0, 0, wm, bm);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\n", res->out);
  result_free(&r);
  free(res);
  fgt_rmtree(tmpdir);
}

/* Processes must be a multiple of the model's ranks; a batch must give
 * every replica a row. */
FG_TEST(mpi_train_hybrid_bad_setups_refused, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_lin_mp() == 0);
  run_result *res = malloc(sizeof *res);
  mpi_train(3, "lin_mp.fgb", "8", NULL, NULL, res);
  FG_CHECK(res->status != -1 && res->status != 0);
  FG_CHECK_STR_CONTAINS(res->out,
                        "--dist mpi: the model places nodes on 2 ranks (rank:0 .. rank:1), and 3 "
                        "processes are not a multiple of 2: start 2 for model parallelism, or 4, "
                        "6, ... to also train that many replicas of it");
  mpi_train(4, "lin_mp.fgb", "13", NULL, NULL, res);
  FG_CHECK(res->status != -1 && res->status != 0);
  FG_CHECK_STR_CONTAINS(res->out, "--dist mpi with 2 replicas: a batch of 1 rows (the last batch) "
                                  "leaves a replica without rows");
  free(res);
  fgt_rmtree(tmpdir);
}

/* `flowgraph profile --dist mpi` on lin_mp.fgb: each rank times its own
 * steps and rank 0 prints one report holding both ranks' nodes (pred from
 * rank 0, loss from rank 1, and the transfers between them) and writes one
 * trace with a process per rank whose tracks are named after the rank's
 * device. Rank 1 prints nothing. */
FG_TEST(mpi_profile_model_parallel_np2, "dist") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_lin_mp() == 0);
  char xi[700], yi[700], model[700], trace[700];
  lin_inputs(xi, yi);
  snprintf(model, sizeof model, "%s", tpath("lin_mp.fgb"));
  snprintf(trace, sizeof trace, "%s", tpath("t.json"));
  char svg[700];
  snprintf(svg, sizeof svg, "%s", tpath("m.svg"));
  char *args[] = {
      FG_CLI_PATH, "profile", model, "-i",           xi,  "-i",     yi,    "--runs",
      "3",         "--trace", trace, "--memory-svg", svg, "--dist", "mpi", "--dist-timeout",
      "20",        NULL};
  run_result *res = malloc(sizeof *res);
  mpirun(2, NULL, args, 50, res);
  FG_CHECK_INT(res->status, 0);
  FG_CHECK_INT(count_substr(res->out, "profile of "), 1);
  FG_CHECK_INT(count_substr(res->out, "wrote "), 2);
  /* Each rank's own plan in the partition lines: rank 1 holds the loss
   * and its gradient nodes (7: reduce_mean, ones_like, 2 numel, 2 div,
   * broadcast_like), so 9 steps with mul_3's receive and the gradient's
   * send, 8 with the passes on (the fuse pass joins two element-wise
   * steps into one); 40 rows x 1 f32 = 160 bytes each way. */
  const char *env = getenv("FG_PASSES");
  const int passes = !env || (strcmp(env, "off") != 0 && strcmp(env, "0") != 0);
  FG_CHECK_STR_CONTAINS(res->out, passes ? "  rank:1/cpu:0: 7 nodes, 8 steps (1 recv), arena "
                                         : "  rank:1/cpu:0: 7 nodes, 9 steps (1 recv), arena ");
  FG_CHECK_STR_CONTAINS(res->out, "transfer bytes per run: 320 (2 of the graph's 2 transfers)");
  char *pic = slurp(svg);
  FG_REQUIRE(pic);
  FG_CHECK_STR_CONTAINS(pic, ">rank:0/cpu:0: ");
  FG_CHECK_STR_CONTAINS(pic, ">rank:1/cpu:0: ");
  FG_CHECK_STR_CONTAINS(pic, "(all ranks)</text>");
  free(pic);
  FG_CHECK_STR_CONTAINS(res->out, "runs: 3,");
  /* Both ranks' nodes, and the steps moving tensors between them. */
  const char *order = strstr(res->out, "Run order");
  FG_REQUIRE(order);
  FG_CHECK(strstr(order, " pred ") != NULL);
  FG_CHECK(strstr(order, " loss ") != NULL);
  FG_CHECK(strstr(order, " send ") != NULL && strstr(order, " recv ") != NULL);
  int py = fgt_python(
      "import json,sys; d=json.load(open(sys.argv[1])); ev=d['traceEvents']; "
      "x=[e for e in ev if e['ph']=='X']; "
      "p={e['pid']: e['args']['name'] for e in ev if e['name']=='process_name'}; "
      "t={(e['pid'],e['tid']): e['args']['name'] for e in ev if e['name']=='thread_name'}; "
      "assert p=={1:sys.argv[2]+' rank 0', 2:sys.argv[2]+' rank 1'}, p; "
      "pids=set(e['pid'] for e in x); assert pids=={1,2}, pids; "
      "assert 'pred' in set(e['name'] for e in x if e['pid']==1); "
      "assert 'loss' in set(e['name'] for e in x if e['pid']==2); "
      "assert set(e['args']['run'] for e in x)=={0,1,2}; "
      "assert t[(1,0)]=='rank:0/cpu:0' and t[(2,0)]=='rank:1/cpu:0', t; "
      "assert all(t[(e['pid'],e['tid'])] for e in x)",
      trace, model);
  FG_CHECK_PYTHON(py);
  /* Both ranks share this host's CLOCK_MONOTONIC, so rank 1's true offset
   * is 0 and the estimate must lie within its stated bound (half a round
   * trip; + 0.001 for the printed rounding). */
  const char *clk = strstr(res->out, "clock of rank 1: ");
  FG_REQUIRE(clk);
  double off = 1e9, bound = -1;
  FG_REQUIRE(sscanf(clk, "clock of rank 1: %lf ms from rank 0's (within %lf", &off, &bound) == 2);
  FG_CHECK(bound >= 0 && bound < 50);
  FG_CHECK(fabs(off) <= bound + 0.001);
  /* On that clock a transfer's receive ends after its send started: every
   * recv event of node N has a send event of N in the same run on the
   * other rank starting no later than the receive's end (+ the bound). */
  char tol[32];
  snprintf(tol, sizeof tol, "%.3f", (bound + 0.001) * 1000.0);
  py = fgt_python(
      "import json,sys; d=json.load(open(sys.argv[1])); tol=float(sys.argv[2]); "
      "x=[e for e in d['traceEvents'] if e['ph']=='X' and e['cat']=='op']; "
      "rv=[e for e in x if e['args']['op']=='recv']; assert len(rv)>=6, len(rv); "
      "sd=[e for e in x if e['args']['op']=='send']; "
      "ok=[any(s['name']==r['name'] and s['pid']!=r['pid'] and "
      "s['args']['run']==r['args']['run'] and s['ts']<=r['ts']+r['dur']+tol for s in sd) "
      "for r in rv]; assert all(ok), ok",
      trace, tol);
  FG_CHECK_PYTHON(py);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\n", res->out);
  free(res);
  fgt_rmtree(tmpdir);
}

/* A model split over 2 ranks is profiled on 2 processes or a multiple: 3
 * are refused on every rank, before any run. */
FG_TEST(mpi_profile_model_parallel_wrong_np, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_lin_mp() == 0);
  char model[700];
  snprintf(model, sizeof model, "%s", tpath("lin_mp.fgb"));
  char *args[] = {FG_CLI_PATH,      "profile", model,    "--random-inputs",
                  "--batch",        "4",       "--dist", "mpi",
                  "--dist-timeout", "20",      NULL};
  run_result *res = malloc(sizeof *res);
  mpirun(3, NULL, args, 50, res);
  FG_CHECK(res->status != 0 && res->status != -1);
  FG_CHECK(res->wall < 15);
  FG_CHECK(count_substr(res->out, "places nodes on 2 MPI ranks; profile it with mpirun -np 2 (or "
                                  "4, 6, ... for replicas of it), not 3") >= 3);
  FG_CHECK(strstr(res->out, "profile of ") == NULL);
  free(res);
  fgt_rmtree(tmpdir);
}

/* mpirun -np `np` flowgraph profile MODEL -i x -i y --runs 3 --dist mpi
 * on replicas of `model` (a file of the test's folder), each on its 20 of
 * the 40 rows: one report (only replica 0's processes report), with
 * all_reduce rows and shapes [20,1], then the line `avg_line` starts, with
 * each process's average. */
static void check_profile_replicas_micro(int np, const char *model, const char *micro,
                                         const char *avg_line, run_result *res) {
  char xi[700], yi[700], path[700];
  lin_inputs(xi, yi);
  snprintf(path, sizeof path, "%s", tpath(model));
  char *args[] = {FG_CLI_PATH, "profile", path, "-i",     xi,    "-i",
                  yi,          "--runs",  "3",  "--dist", "mpi", "--dist-timeout",
                  "20",        NULL,      NULL, NULL};
  if (micro) {
    args[13] = "--micro-batches";
    args[14] = (char *)micro;
  }
  mpirun(np, NULL, args, 50, res);
  FG_CHECK_INT(res->status, 0);
  FG_CHECK_INT(count_substr(res->out, "profile of "), 1);
  FG_CHECK_INT(count_substr(res->out, "============ Run order"), 1);
  FG_CHECK_STR_CONTAINS(res->out, "all_reduce");
  /* A micro-batch of a replica's 20 rows: 20 / M rows. */
  char rows[32];
  snprintf(rows, sizeof rows, "f32 [%d,1]", micro ? 20 / atoi(micro) : 20);
  FG_CHECK_STR_CONTAINS(res->out, rows);
  FG_CHECK(strstr(res->out, "f32 [40,1]") == NULL);
  FG_CHECK_STR_CONTAINS(res->out, avg_line);
  char last[32];
  snprintf(last, sizeof last, " ms, rank %d ", np - 1);
  FG_CHECK_STR_CONTAINS(res->out, last);
  FG_CHECK_STR_CONTAINS(res->out, "runs: 3,");
  /* The ranks' agreement before each run (fg_run_metadata agree_ns). */
  FG_CHECK_STR_CONTAINS(res->out, "agreement to start a run: avg ");
  /* One host: the replicas' all_reduce goes through one shared segment. */
  FG_CHECK_INT(count_substr(res->out, grads_line("")), 1);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\n", res->out);
}

static void check_profile_replicas(int np, const char *model, const char *avg_line,
                                   run_result *res) {
  check_profile_replicas_micro(np, model, NULL, avg_line, res);
}

/* Hybrid: lin_mp.fgb (2 ranks) on 4 processes, 2 replicas of it, as
 * `train --dist mpi` runs them. Replica 0's two processes report together:
 * its partitions and the transfers between them (20 rows x 1 f32 each
 * way), each stage's all_reduce. */
FG_TEST(mpi_profile_hybrid_np4, "dist") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_lin_mp() == 0);
  run_result *res = malloc(sizeof *res);
  check_profile_replicas(4, "lin_mp.fgb",
                         "2 replicas of the 2-rank model (fg_data_parallel, all_reduce on the "
                         "gradients); run avg per process (rank = replica x 2 + stage): rank 0 ",
                         res);
  FG_CHECK_STR_CONTAINS(res->out, "  rank:1/cpu:0: ");
  FG_CHECK_STR_CONTAINS(res->out, "transfer bytes per run: 160 (2 of the graph's 2 transfers)");
  free(res);
  fgt_rmtree(tmpdir);
}

/* `flowgraph profile --dist mpi --micro-batches M` as `train` runs it:
 * first the hybrid with M = 2, each replica's 20 rows in 2 micro-batches of
 * 10, so the transfers between its stages are 10 rows x 1 f32 (40 bytes)
 * each way, per micro-batch: 160 bytes; then the split model alone, then
 * too few rows for M. */
FG_TEST(mpi_profile_micro_batches, "dist,badinput,slow") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_lin_mp() == 0);
  run_result *res = malloc(sizeof *res);
  check_profile_replicas_micro(4, "lin_mp.fgb", "2",
                               "2 replicas of the 2-rank model (fg_data_parallel, all_reduce on "
                               "the gradients); run avg per process (rank = replica x 2 + "
                               "stage): rank 0 ",
                               res);
  FG_CHECK_STR_CONTAINS(res->out, "micro-batches: 2 per run (fg_micro_batch; batch inputs: x, y)");
  FG_CHECK(strstr(res->out, "f32 [20,1]") == NULL);
  FG_CHECK_STR_CONTAINS(res->out, "transfer micro_batch_1/mul_3:0->rank:1/cpu:0: rank:0/cpu:0 -> "
                                  "rank:1/cpu:0, 40 bytes");
  FG_CHECK_STR_CONTAINS(res->out, "transfer bytes per run: 160 (4 of the graph's ");
  free(res);
  res = malloc(sizeof *res);
  char xi[700], yi[700], path[700];
  lin_inputs(xi, yi);
  snprintf(path, sizeof path, "%s", tpath("lin_mp.fgb"));
  /* The split model on its own 2 ranks: the 40 rows in 4 micro-batches of
   * 10, 40 bytes each way per micro-batch. */
  char *mp[] = {FG_CLI_PATH, "profile",         path, "-i", xi, "-i", yi, "--runs", "2", "--dist",
                "mpi",       "--micro-batches", "4",  NULL};
  mpirun(2, NULL, mp, 50, res);
  FG_CHECK_INT(res->status, 0);
  FG_CHECK_INT(count_substr(res->out, "profile of "), 1);
  FG_CHECK_STR_CONTAINS(res->out, "micro-batches: 4 per run (fg_micro_batch; batch inputs: x, y)");
  FG_CHECK_STR_CONTAINS(res->out, "transfer micro_batch_3/mul_3:0->rank:1/cpu:0: rank:0/cpu:0 -> "
                                  "rank:1/cpu:0, 40 bytes");
  FG_CHECK_STR_CONTAINS(res->out, "transfer bytes per run: 320 (8 of the graph's ");
  FG_CHECK_STR_CONTAINS(res->out, "f32 [10,1]");
  /* 41 rows a micro-batch: 40 rows are too few, on every rank alike. */
  char *bad[] = {
      FG_CLI_PATH, "profile",         path, "-i", xi, "-i", yi, "--dist", "mpi", "--dist-timeout",
      "20",        "--micro-batches", "41", NULL};
  mpirun(2, NULL, bad, 50, res);
  FG_CHECK(res->status != 0 && res->status != -1);
  FG_CHECK(res->wall < 15);
  FG_CHECK(count_substr(res->out, "--micro-batches 41: input 'x' has 40 rows, fewer than the "
                                  "micro-batches") >= 2);
  FG_CHECK(strstr(res->out, "profile of ") == NULL);
  /* On 4 processes each replica has 20 rows: 21 micro-batches are too
   * many, said by every process before any run. */
  bad[12] = "21";
  mpirun(4, NULL, bad, 50, res);
  FG_CHECK(res->status != 0 && res->status != -1);
  FG_CHECK(res->wall < 15);
  FG_CHECK(count_substr(res->out, "--micro-batches 21 with 2 replicas: replica ") >= 4);
  FG_CHECK(strstr(res->out, "profile of ") == NULL);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\n", res->out);
  free(res);
  fgt_rmtree(tmpdir);
}

/* `flowgraph profile --dist mpi` on a model that names no rank: data
 * parallelism as `train --dist mpi` runs it. Each rank profiles lin.fgb
 * rewritten with one replica on its 20 of the 40 rows (so x w is f32
 * [20,1]); rank 0 alone prints a report, which has the gradients' bucketed
 * all_reduce and the row counts' one, then every rank's average run. */
FG_TEST(mpi_profile_data_parallel_np2, "dist") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_linreg() == 0);
  run_result *res = malloc(sizeof *res);
  check_profile_replicas(2, "lin.fgb",
                         "data parallelism over 2 ranks (fg_data_parallel, all_reduce on the "
                         "gradients); run avg per rank: rank 0 ",
                         res);
  FG_CHECK_STR_CONTAINS(res->out, "data_parallel/all_reduce_0         all_reduce");
  FG_CHECK_STR_CONTAINS(res->out, "data_parallel/rows                 all_reduce");
  char model[700];
  snprintf(model, sizeof model, "%s", tpath("lin.fgb"));
  /* 2 rows over 3 ranks: every rank says so, none waits. */
  char *bad[] = {FG_CLI_PATH,      "profile", model,    "--random-inputs",
                 "--batch",        "2",       "--dist", "mpi",
                 "--dist-timeout", "20",      NULL};
  mpirun(3, NULL, bad, 50, res);
  FG_CHECK(res->status != 0 && res->status != -1);
  FG_CHECK(res->wall < 15);
  FG_CHECK(count_substr(res->out, "--dist mpi with 3 replicas: input 'x' has 2 rows, which leaves "
                                  "a replica without rows") >= 3);
  FG_CHECK(strstr(res->out, "could not start") == NULL);
  free(res);
  fgt_rmtree(tmpdir);
}

/* `flowgraph run --dist mpi` on the cross-process lin_mp.fgb: rank 0 prints
 * the loss (computed on rank 1) and writes pred; both equal one process's
 * `flowgraph run` on lin.fgb bit for bit (same kernels, same data), and
 * rank 1 prints nothing. */
static void check_run_model_parallel(int np) {
  MPI_REQUIRED();
  FG_REQUIRE(setup_lin_mp() == 0);
  fg_status *st = fg_status_new();
  char xi[700], yi[700], om[700], os[700];
  lin_inputs(xi, yi);
  snprintf(om, sizeof om, "pred=%s", tpath("pred_mp.npy"));
  snprintf(os, sizeof os, "pred=%s", tpath("pred_single.npy"));
  char *args[] = {FG_CLI_PATH,
                  "run",
                  (char *)tpath("lin_mp.fgb"),
                  "-i",
                  xi,
                  "-i",
                  yi,
                  "-o",
                  om,
                  "--fetch",
                  "loss",
                  "--repeat",
                  "3",
                  "--dist",
                  "mpi",
                  "--dist-timeout",
                  "20",
                  NULL};
  run_result *res = malloc(sizeof *res);
  mpirun(np, NULL, args, 50, res);
  FG_CHECK_INT(res->status, 0);
  cli_result r;
  cli(&r, "run", tpath("lin.fgb"), "-i", xi, "-i", yi, "-o", os, "--fetch", "loss", NULL);
  FG_CHECK_INT(r.code, 0);
  /* "loss: f32 [] ..." then its value line, once: only rank 0 prints. */
  const char *lm = strstr(res->out, "loss: "), *ls = strstr(r.out, "loss: ");
  FG_REQUIRE(lm && ls);
  FG_CHECK(strstr(lm + 1, "loss: ") == NULL);
  const char *em = strchr(strchr(lm, '\n') + 1, '\n'), *es = strchr(strchr(ls, '\n') + 1, '\n');
  FG_REQUIRE(em && es);
  if (em - lm != es - ls || memcmp(lm, ls, (size_t)(em - lm)) != 0)
    FG_FAIL_AT("loss differs:\n%.*s\nvs\n%.*s", (int)(em - lm), lm, (int)(es - ls), ls);
  FG_CHECK(strstr(res->out, "ran 3 times") != NULL);
  fg_tensor *pm = fg_npy_read(tpath("pred_mp.npy"), st),
            *ps = fg_npy_read(tpath("pred_single.npy"), st);
  FG_REQUIRE(pm && ps);
  FG_CHECK(fg_tensor_num_bytes(pm) == fg_tensor_num_bytes(ps) &&
           memcmp(fg_tensor_data(pm), fg_tensor_data(ps), fg_tensor_num_bytes(ps)) == 0);
  FG_CHECK_INT(fg_tensor_num_elements(pm), LIN_ROWS);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\nsingle:\n%s\n", res->out, r.out);
  fg_tensor_free(pm);
  fg_tensor_free(ps);
  result_free(&r);
  free(res);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

FG_TEST(mpi_run_model_parallel_np2, "dist") { check_run_model_parallel(2); }
FG_TEST(mpi_run_model_parallel_np3, "dist") { check_run_model_parallel(3); }

FG_TEST(mpi_run_bad_setups_refused, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_lin_mp() == 0);
  char xi[700], yi[700], bad_out[700];
  lin_inputs(xi, yi);
  snprintf(bad_out, sizeof bad_out, "pred=%s", tpath("no_such_dir/pred.npy"));
  /* Outside mpirun. */
  cli_result r;
  cli(&r, "run", tpath("lin_mp.fgb"), "-i", xi, "-i", yi, "--dist", "mpi", NULL);
  FG_CHECK(r.code != 0);
  FG_CHECK_STR_CONTAINS(r.err, "not started by mpirun (try mpirun -np 2 flowgraph run");
  result_free(&r);
  run_result *res = malloc(sizeof *res);
  /* A model that names no rank runs data-parallel (the tests above), but
   * one without a batch ('?') input leaves nothing to split. */
  FG_REQUIRE(build_fixed(tpath("fixed.fgb")) == 0);
  char *plain[] = {FG_CLI_PATH, "run", (char *)tpath("fixed.fgb"), "--random-inputs", "--dist",
                   "mpi",       NULL};
  mpirun(2, NULL, plain, 50, res);
  FG_CHECK(res->status != 0 && res->status != -1);
  FG_CHECK_STR_CONTAINS(res->out, "places no node on a rank and feeds no input with an open first "
                                  "dimension (a batch, '?'), so there is nothing to split");
  /* Rank 0 cannot write its output: it says why, rank 1 is told at once
   * (not after the 20 s timeout). */
  char *noout[] = {FG_CLI_PATH, "run", (char *)tpath("lin_mp.fgb"),
                   "-i",        xi,    "-i",
                   yi,          "-o",  bad_out,
                   "--dist",    "mpi", "--dist-timeout",
                   "20",        NULL};
  mpirun(2, NULL, noout, 50, res);
  FG_CHECK(res->status != 0 && res->status != -1);
  FG_CHECK_STR_CONTAINS(res->out, "no_such_dir");
  FG_CHECK(res->wall < 15);
  free(res);
  fgt_rmtree(tmpdir);
}
