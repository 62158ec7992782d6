/* `mpirun -np N flowgraph run MODEL --dist mpi` on a model that names no
 * rank (label dist): data-parallel inference. Each rank runs the whole
 * graph on its array_split shard of the inputs whose first dimension is
 * '?'; rank 0 concatenates the fetches in rank order and prints and writes
 * exactly what one process's `flowgraph run` does. Fetches without a batch
 * dimension, batches below the ranks and inputs of different rows are
 * refused on every rank; a rank failing mid-run stops the others. */
#include "mpi/mpi_run.h"
#include "mpi/netns_hosts.h"
#include "executor/cuda_backend.h"
#include "flowgraph/dist.h"
#include "test_cli_train_util.h"

/* Rows of the data-parallel feeds: uneven over 2 (4+3) and 3 (3+2+2) ranks. */
#define DP_ROWS 7
static const float DP_S[3] = {0.5f, 2.0f, -1.25f};

/* x [?,4] and m [?,2] are split (first dimension '?'), s [3] is fed whole:
 * h = relu(x W1 + b1) * s, probs = softmax(h W2 + b2) [?,2],
 * masked = probs * m [?,2] and hsum = h summed over axis 1 [?] are the
 * graph outputs (all row-wise); hmean = mean(h) (a scalar) and
 * gram = x x^T ([?,?], batch by batch) cannot be assembled from shards. */
static int build_dp_model(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 4}, md[2] = {FG_DIM_UNKNOWN, 2}, sd[1] = {3};
  int64_t w1d[2] = {4, 3}, b1d[1] = {3}, w2d[2] = {3, 2}, b2d[1] = {2}, ax[1] = {1};
  fg_tensor *w1 = tensor_f32(2, w1d, &W1[0][0]), *b1 = tensor_f32(1, b1d, B1);
  fg_tensor *w2 = tensor_f32(2, w2d, &W2[0][0]), *b2 = tensor_f32(1, b2d, B2);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output m = fg_placeholder(g, "m", FG_F32, 2, md);
  fg_output s = fg_placeholder(g, "s", FG_F32, 1, sd);
  fg_output pre =
      fg_add(g, fg_matmul(g, x, fg_variable(g, "W1", w1), 0, 0), fg_constant(g, "b1", b1));
  fg_output h = fg_set_name(g, fg_mul(g, fg_relu(g, pre), s), "h");
  fg_output logits =
      fg_add(g, fg_matmul(g, h, fg_variable(g, "W2", w2), 0, 0), fg_constant(g, "b2", b2));
  fg_output probs = fg_set_name(g, fg_softmax(g, logits, 1), "probs");
  fg_graph_add_output(g, probs);
  fg_graph_add_output(g, fg_set_name(g, fg_mul(g, probs, m), "masked"));
  fg_graph_add_output(g, fg_set_name(g, fg_reduce_sum(g, h, ax, 1, 0), "hsum"));
  fg_set_name(g, fg_reduce_mean(g, h, NULL, 0, 0), "hmean");
  fg_set_name(g, fg_matmul(g, x, x, 0, 1), "gram");
  fg_tensor_free(w1);
  fg_tensor_free(b1);
  fg_tensor_free(w2);
  fg_tensor_free(b2);
  return save_and_free_graph(g, path);
}

static void dp_data(int rows, float (*x)[4], float (*m)[2]) {
  for (int r = 0; r < rows; r++) {
    for (int k = 0; k < 4; k++)
      x[r][k] = (float)(((r * 4 + k) * 37) % 17 - 8) / 4.0f;
    m[r][0] = (float)(r % 3) - 0.5f;
    m[r][1] = (float)(r % 2) + 0.25f;
  }
}

/* The model above in double: probs, masked and hsum of `rows` rows. */
static void dp_reference(int rows, double (*probs)[2], double (*masked)[2], double *hsum) {
  float x[16][4], m[16][2];
  dp_data(rows, x, m);
  for (int r = 0; r < rows; r++) {
    double h[3], l[2];
    hsum[r] = 0;
    for (int j = 0; j < 3; j++) {
      double v = B1[j];
      for (int k = 0; k < 4; k++)
        v += (double)x[r][k] * W1[k][j];
      h[j] = (v > 0 ? v : 0) * DP_S[j];
      hsum[r] += h[j];
    }
    for (int j = 0; j < 2; j++) {
      l[j] = B2[j];
      for (int k = 0; k < 3; k++)
        l[j] += h[k] * W2[k][j];
    }
    double mx = l[0] > l[1] ? l[0] : l[1], e0 = exp(l[0] - mx), e1 = exp(l[1] - mx);
    probs[r][0] = e0 / (e0 + e1);
    probs[r][1] = e1 / (e0 + e1);
    for (int j = 0; j < 2; j++)
      masked[r][j] = probs[r][j] * m[r][j];
  }
}

/* Writes dp.fgb and x.npy, m.npy (`rows` and `m_rows` rows) and s.npy. */
static int setup_dp(int rows, int m_rows) {
  if (!make_tmpdir() || build_dp_model(tpath("dp.fgb")) != 0) return -1;
  float x[16][4], m[16][2];
  dp_data(16, x, m);
  int64_t xd[2] = {rows, 4}, md[2] = {m_rows, 2}, sd[1] = {3};
  if (write_npy_f32(tpath("x.npy"), 2, xd, &x[0][0]) != 0) return -1;
  if (write_npy_f32(tpath("m.npy"), 2, md, &m[0][0]) != 0) return -1;
  return write_npy_f32(tpath("s.npy"), 1, sd, DP_S);
}

/* When set, the runs start mpirun on these two hosts of
 * tools/netns_hosts.sh. */
static const netns_hosts *g_hosts;

/* mpirun -np `np` flowgraph run dp.fgb -i x -i m -i s ARGS... --dist mpi. */
static void mpi_run_dp(int np, const char *const extra[], double limit, run_result *res) {
  static char xi[700], mi[700], si[700];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(mi, sizeof mi, "m=%s", tpath("m.npy"));
  snprintf(si, sizeof si, "s=%s", tpath("s.npy"));
  char *args[40] = {FG_CLI_PATH, "run", (char *)tpath("dp.fgb"), "-i", xi, "-i", mi, "-i", si};
  int k = 9;
  for (int i = 0; extra && extra[i] && k < 34; i++)
    args[k++] = (char *)extra[i];
  args[k++] = "--dist";
  args[k++] = "mpi";
  args[k++] = "--dist-timeout";
  args[k++] = "20";
  args[k] = NULL;
  mpirun_at(g_hosts ? g_hosts->where : NULL, np, NULL, args, limit, res);
  if (g_hosts && !netns_hosts_both_used(g_hosts, res->out))
    FG_FAIL_AT("mpirun did not put ranks on both hosts:\n%s", res->out);
}

/* A file's bytes and size (NULL when unreadable). */
static unsigned char *file_bytes(const char *path, long *size) {
  FILE *f = fopen(path, "rb");
  unsigned char *b = NULL;
  *size = -1;
  if (f && fseek(f, 0, SEEK_END) == 0 && (*size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (b = malloc((size_t)*size + 1)) && fread(b, 1, (size_t)*size, f) != (size_t)*size) {
    free(b);
    b = NULL;
  }
  if (f) fclose(f);
  return b;
}

static void check_same_file(const char *a, const char *b) {
  long na, nb;
  unsigned char *fa = file_bytes(a, &na), *fb = file_bytes(b, &nb);
  FG_CHECK(fa && fb);
  if (fa && fb && (na != nb || memcmp(fa, fb, (size_t)na) != 0))
    FG_FAIL_AT("%s (%ld bytes) differs from %s (%ld bytes)", a, na, b, nb);
  free(fa);
  free(fb);
}

/* Rank 0's stdout (echoed by mpirun) holds the single run's whole stdout
 * once: the same text, and no other rank printed it. */
static void check_prints_single(const char *mpi_out, const char *single_out) {
  FG_REQUIRE(single_out[0]);
  const char *at = strstr(mpi_out, single_out);
  if (!at) FG_FAIL_AT("the single run's output\n%s\nis not in mpirun's\n%s", single_out, mpi_out);
  if (at) FG_CHECK(strstr(at + 1, single_out) == NULL);
}

/* 7 rows over np ranks (uneven): rank 0 prints, and writes with -o, the
 * single process's text and files byte for byte, and those match the model
 * computed in double. */
static void check_run_data_parallel(int np) {
  MPI_REQUIRED();
  FG_REQUIRE(setup_dp(DP_ROWS, DP_ROWS) == 0);
  double probs[DP_ROWS][2], masked[DP_ROWS][2], hsum[DP_ROWS];
  dp_reference(DP_ROWS, probs, masked, hsum);
  char xi[700], mi[700], si[700];
  snprintf(xi, sizeof xi, "x=%s", tpath("x.npy"));
  snprintf(mi, sizeof mi, "m=%s", tpath("m.npy"));
  snprintf(si, sizeof si, "s=%s", tpath("s.npy"));
  run_result *res = malloc(sizeof *res);
  cli_result r;

  /* 1. The graph outputs, printed. */
  mpi_run_dp(np, NULL, 50, res);
  FG_CHECK_INT(res->status, 0);
  cli(&r, "run", tpath("dp.fgb"), "-i", xi, "-i", mi, "-i", si, NULL);
  FG_CHECK_INT(r.code, 0);
  FG_CHECK_STR_CONTAINS(r.out, "probs: f32 [7,2]");
  check_prints_single(res->out, r.out);
  double v[16];
  FG_CHECK_INT(parse_printed(res->out, "hsum", v, 16), DP_ROWS);
  for (int i = 0; i < DP_ROWS; i++)
    FG_CHECK_NEAR(v[i], hsum[i], 1e-5 * (1 + fabs(hsum[i])));
  FG_CHECK_INT(parse_printed(res->out, "probs", v, 16), 10); /* the first 10 of 14 */
  for (int i = 0; i < 10; i++)
    FG_CHECK_NEAR(v[i], probs[i / 2][i % 2], 1e-6);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\nsingle:\n%s\n", res->out, r.out);
  result_free(&r);

  /* 2. -o files, --repeat 2 (outputs of the last run, a timing line). */
  const char *o_mp[] = {"-o", NULL, "-o", NULL, "-o", NULL, "--repeat", "2", NULL};
  char om[3][700], os[3][700];
  const char *names[3] = {"probs", "masked", "hsum"};
  for (int i = 0; i < 3; i++) {
    snprintf(om[i], sizeof om[i], "%s=%s_mp.npy", names[i], tpath(names[i]));
    snprintf(os[i], sizeof os[i], "%s=%s_single.npy", names[i], tpath(names[i]));
    o_mp[2 * i + 1] = om[i];
  }
  mpi_run_dp(np, o_mp, 50, res);
  FG_CHECK_INT(res->status, 0);
  FG_CHECK_STR_CONTAINS(res->out, "ran 2 times: total ");
  FG_CHECK_STR_CONTAINS(res->out, "wrote masked: f32 [7,2] -> ");
  cli(&r, "run", tpath("dp.fgb"), "-i", xi, "-i", mi, "-i", si, "-o", os[0], "-o", os[1], "-o",
      os[2], NULL);
  FG_CHECK_INT(r.code, 0);
  for (int i = 0; i < 3; i++) {
    char a[700], b[700];
    snprintf(a, sizeof a, "%s_mp.npy", tpath(names[i]));
    snprintf(b, sizeof b, "%s_single.npy", tpath(names[i]));
    check_same_file(a, b);
  }
  fg_tensor *t = read_npy(tpath("masked_mp.npy"));
  check_f32_tensor(t, DP_ROWS, 2, &masked[0][0], 1e-6);
  fg_tensor_free(t);
  t = read_npy(tpath("hsum_mp.npy"));
  FG_REQUIRE(t);
  FG_CHECK_INT(fg_tensor_num_elements(t), DP_ROWS);
  for (int i = 0; i < DP_ROWS && fg_tensor_num_elements(t) == DP_ROWS; i++)
    FG_CHECK_NEAR(((const float *)fg_tensor_data(t))[i], hsum[i], 1e-5 * (1 + fabs(hsum[i])));
  fg_tensor_free(t);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\nsingle:\n%s\n", res->out, r.out);
  result_free(&r);

  /* 3. --random-inputs: every rank draws the same full batch and keeps its
   * rows, so the result is the single run's on the same seed. */
  char *rnd[] = {FG_CLI_PATH,
                 "run",
                 (char *)tpath("dp.fgb"),
                 "--random-inputs",
                 "--batch",
                 "7",
                 "--seed",
                 "5",
                 "--fetch",
                 "masked",
                 "--dist",
                 "mpi",
                 NULL};
  mpirun_at(g_hosts ? g_hosts->where : NULL, np, NULL, rnd, 50, res);
  if (g_hosts && !netns_hosts_both_used(g_hosts, res->out))
    FG_FAIL_AT("mpirun did not put ranks on both hosts:\n%s", res->out);
  FG_CHECK_INT(res->status, 0);
  cli(&r, "run", tpath("dp.fgb"), "--random-inputs", "--batch", "7", "--seed", "5", "--fetch",
      "masked", NULL);
  FG_CHECK_INT(r.code, 0);
  check_prints_single(res->out, r.out);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\nsingle:\n%s\n", res->out, r.out);
  result_free(&r);
  free(res);
  fgt_rmtree(tmpdir);
}

FG_TEST(mpi_run_data_parallel_np2, "dist") { check_run_data_parallel(2); }
FG_TEST(mpi_run_data_parallel_np3, "dist") { check_run_data_parallel(3); }
/* Ranks 0 and 1 on one host, 2 on another (tools/netns_hosts.sh): rank 2's
 * shard and fetches cross by MPI messages over TCP. */
FG_TEST(mpi_run_data_parallel_np3_two_hosts, "dist,slow") {
  MPI_REQUIRED();
  netns_hosts h;
  NETNS_HOSTS_REQUIRED(&h, 2);
  g_hosts = &h;
  check_run_data_parallel(3);
  g_hosts = NULL;
  netns_hosts_down(&h);
}

/* What cannot be split is refused on every rank before anything runs, and
 * quickly (the timeout is 20 s). */
static void check_dp_refused(int np, const char *const extra[], const char *want) {
  run_result *res = malloc(sizeof *res);
  mpi_run_dp(np, extra, 50, res);
  FG_CHECK(res->status != 0 && res->status != -1);
  FG_CHECK(res->wall < 15);
  /* Every rank names the problem itself: none says that another "could
   * not start" (mpirun may echo a rank's stderr besides its file, so the
   * count is at least, not exactly, np). */
  int n = 0;
  for (const char *p = strstr(res->out, want); p; p = strstr(p + 1, want))
    n++;
  if (n < np) FG_FAIL_AT("'%s' appears %d times, not %d, in:\n%s", want, n, np, res->out);
  FG_CHECK(strstr(res->out, "could not start") == NULL);
  FG_CHECK(strstr(res->out, "probs: ") == NULL);
  free(res);
}

FG_TEST(mpi_run_data_parallel_bad_inputs_refused, "dist,badinput,slow") {
  MPI_REQUIRED();
  /* A scalar over the batch, a batch-by-batch matrix. */
  FG_REQUIRE(setup_dp(DP_ROWS, DP_ROWS) == 0);
  const char *scalar[] = {"--fetch", "probs", "--fetch", "hmean", NULL};
  check_dp_refused(2, scalar,
                   "--dist mpi: fetch 'hmean' is f32 []: a scalar, with no batch dimension, so it "
                   "cannot be assembled from the ranks' shards of the batch; fetch per-row outputs "
                   "(first dimension '?') or run without --dist");
  const char *gram[] = {"--fetch", "gram", NULL};
  check_dp_refused(3, gram,
                   "fetch 'gram' is f32 [?,?]: it depends on the batch beyond its first dimension");
  fgt_rmtree(tmpdir);
  /* 2 rows over 3 ranks. */
  FG_REQUIRE(setup_dp(2, 2) == 0);
  char want[1600];
  snprintf(want, sizeof want,
           "--dist mpi with 3 ranks: a batch of 2 rows ('x', %s) leaves a rank without rows; "
           "every rank needs at least one: feed at least 3 rows, or start fewer ranks",
           tpath("x.npy"));
  check_dp_refused(3, NULL, want);
  fgt_rmtree(tmpdir);
  /* x has 7 rows, m 6. */
  FG_REQUIRE(setup_dp(DP_ROWS, 6) == 0);
  snprintf(want, sizeof want,
           "--dist mpi splits every input whose first dimension is '?' into the ranks' shards, "
           "so they need the same rows: 'x' (%s) has 7 rows, 'm' (%s) has 6",
           tpath("x.npy"), tpath("m.npy"));
  check_dp_refused(2, NULL, want);
  fgt_rmtree(tmpdir);
}

/* --device cuda:local: without --dist mpi a usage error; under mpirun on a
 * machine without a GPU every rank names the rank that has none, and none
 * waits for another. */
FG_TEST(mpi_run_cuda_local, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(setup_dp(DP_ROWS, DP_ROWS) == 0);
  cli_result r;
  cli(&r, "run", tpath("dp.fgb"), "--random-inputs", "--device", "cuda:local", NULL);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--device cuda:local needs --dist mpi");
  result_free(&r);
  if (fg_cuda_device_count() == 0) {
    const char *local[] = {"--device", "cuda:local", NULL};
    check_dp_refused(2, local, "--device cuda:local: rank 0 sees no CUDA device");
  }
  fgt_rmtree(tmpdir);
}

/* A rank whose run fails (a label out of range in its rows only) stops the
 * others at once: rank 0 reports ABORTED naming it, well before the 20 s
 * timeout, and writes nothing. */
FG_TEST(mpi_run_data_parallel_failed_rank_aborts, "dist,badinput") {
  MPI_REQUIRED();
  FG_REQUIRE(make_tmpdir());
  fg_graph *g = fg_graph_new();
  int64_t ld[1] = {FG_DIM_UNKNOWN};
  fg_graph_add_output(
      g,
      fg_set_name(g, fg_one_hot(g, fg_placeholder(g, "labels", FG_I32, 1, ld), 3, FG_F32), "oh"));
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK && fg_graph_save(g, tpath("oh.fgb"), st) == 0);
  fg_graph_free(g);
  /* 7 rows over 3 ranks: rank 2 gets rows 5 and 6, and the 9. */
  int32_t lab[DP_ROWS] = {0, 1, 2, 0, 1, 2, 9};
  int64_t n = DP_ROWS;
  fg_tensor *t = fg_tensor_from_data(FG_I32, 1, &n, lab, sizeof lab, st);
  FG_REQUIRE(t && fg_npy_write(tpath("labels.npy"), t, st) == 0);
  fg_tensor_free(t);
  char li[700], oo[700];
  snprintf(li, sizeof li, "labels=%s", tpath("labels.npy"));
  snprintf(oo, sizeof oo, "oh=%s", tpath("oh.npy"));
  char *args[] = {FG_CLI_PATH, "run", (char *)tpath("oh.fgb"), "-i", li,  "-o", oo,
                  "--dist",    "mpi", "--dist-timeout",        "20", NULL};
  run_result *res = malloc(sizeof *res);
  /* By default mpirun kills the job as soon as rank 2 exits non-zero,
   * racing rank 0's report; this way only flowgraph's abort can end ranks
   * 0 and 1 before their 20 s timeout. */
  setenv("OMPI_MCA_orte_abort_on_non_zero_status", "0", 1);
  mpirun(3, NULL, args, 50, res);
  unsetenv("OMPI_MCA_orte_abort_on_non_zero_status");
  /* (mpirun then exits 0 whatever the ranks return: the lines tell.) */
  FG_CHECK(res->status != -1);
  FG_CHECK_STR_CONTAINS(res->out,
                        "flowgraph: INVALID_ARGUMENT: node 'oh' (one_hot): indices[1] = 9");
  FG_CHECK(res->wall < 15);
  FG_CHECK_STR_CONTAINS(res->out, "on rank 0 of 3: stopped: rank 2 failed: ");
  FG_CHECK_STR_CONTAINS(res->out, "ABORTED");
  FG_CHECK(!exists(tpath("oh.npy")));
  /* One process on the same labels fails the same way (the reference). */
  cli_result r;
  cli(&r, "run", tpath("oh.fgb"), "-i", li, NULL);
  FG_CHECK(r.code == 1);
  if (fgt_failures) fprintf(stderr, "mpirun output:\n%s\nsingle:\n%s\n", res->out, r.err);
  result_free(&r);
  free(res);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}
