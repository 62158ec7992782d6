/* The CLI on distributed graphs: `flowgraph inspect` shows the all_reduce
 * nodes and placement of a data-parallel graph, `flowgraph plan` and
 * `flowgraph profile` the partitions and transfer bytes, and `flowgraph
 * train` runs a data-parallel graph unchanged. */
#include "test_cli_harness.h"
#include "test_dist_util.h"

static const char *const batch_names[2] = {"x", "y"};

/* Saves the digits MLP (f32, SGD) rewritten for `replicas` replicas, or
 * split over cpu:0/cpu:1 when replicas is 0. */
static int save_model(const char *path, int replicas) {
  fg_status *st = fg_status_new();
  fg_graph *g = replicas ? dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, NULL, NULL)
                         : dist_mlp(FG_F32, FG_OPTIMIZER_SGD, 0.1, "cpu:0", "cpu:1");
  fg_graph *out = replicas ? fg_data_parallel(g, replicas, batch_names, 2, NULL, st) : g;
  int rc = out ? fg_graph_save(out, path, st) : -1;
  if (rc) fprintf(stderr, "save_model: %s\n", fg_status_message(st));
  if (out != g) fg_graph_free(out);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

/* x.npy and y.npy with the first `rows` digits. */
static int save_batch(int rows) {
  fg_tensor *x, *y;
  if (dist_batch(FG_F32, 0, rows, &x, &y) != 0) return -1;
  int rc = fg_npy_write(tpath("x.npy"), x, NULL) | fg_npy_write(tpath("y.npy"), y, NULL);
  fg_tensor_free(x);
  fg_tensor_free(y);
  return rc;
}

/* Lines of [from, to) holding both a and b. */
static int lines_with(const char *from, const char *to, const char *a, const char *b) {
  int n = 0;
  while (from < to) {
    const char *eol = memchr(from, '\n', (size_t)(to - from));
    if (!eol) eol = to;
    char line[512];
    snprintf(line, sizeof line, "%.*s", (int)(eol - from), from);
    n += strstr(line, a) && strstr(line, b);
    from = eol + 1;
  }
  return n;
}

/* The first event of op node `node` in the Chrome trace is on track `tid`
 * (a device's track). */
static void check_trace_track(const char *trace, const char *node, int tid) {
  char *json = slurp(trace);
  FG_REQUIRE(json);
  char key[300], want[32];
  snprintf(key, sizeof key, "\"name\":\"%s\",\"cat\":\"op\"", node);
  const char *ev = strstr(json, key);
  const char *t = ev ? strstr(ev, "\"tid\":") : NULL;
  snprintf(want, sizeof want, "\"tid\":%d,", tid);
  FG_CHECK(t && strncmp(t, want, strlen(want)) == 0);
  free(json);
}

FG_TEST(dist_cli_inspect_shows_all_reduce, "dist") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(save_model(tpath("dp.fgb"), 2) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("dp.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "replica_1/data_parallel/all_reduce_0");
  /* Per replica: its bucket and its row count. */
  FG_CHECK_STR_CONTAINS(r.out, "replica_1/data_parallel/rows");
  FG_CHECK_STR_CONTAINS(r.out, "all_reduce nodes: 4");
  FG_CHECK_STR_CONTAINS(r.out, "devices (2): cpu:0");
  FG_CHECK_STR_CONTAINS(r.out, "cpu:1 (");
  FG_CHECK_STR_CONTAINS(r.out, "replica_1/x/shard");
  FG_CHECK_STR_CONTAINS(r.out, "cpu:0 (auto)");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* A fresh folder with mp.fgb (the MLP split over cpu:0/cpu:1) and 8 rows
 * in x.npy, y.npy: the -i values for them, and a trace path. */
static int setup_split_model(char xin[static 400], char yin[static 400], char trace[static 400]) {
  if (!make_tmpdir() || save_model(tpath("mp.fgb"), 0) != 0 || save_batch(8) != 0) return -1;
  snprintf(xin, 400, "x=%s", tpath("x.npy"));
  snprintf(yin, 400, "y=%s", tpath("y.npy"));
  snprintf(trace, 400, "%s", tpath("trace.json"));
  return 0;
}

FG_TEST(dist_cli_plan_and_profile_show_partitions, "dist") {
  char xin[400], yin[400], trace[400];
  FG_REQUIRE(setup_split_model(xin, yin, trace) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "plan", tpath("mp.fgb"), "-i", xin, "-i", yin, "--fetch", "loss", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "partitions: 2 devices");
  /* hidden2 (relu of layer 2, on cpu:1) is not sent; relu_* of layer 1 is:
   * 8 rows x 128 f32 = 4096 bytes. */
  FG_CHECK_STR_CONTAINS(r.out, "->cpu:1: cpu:0 -> cpu:1, 4096 bytes");
  FG_CHECK_STR_CONTAINS(r.out, "transfer bytes per run: 4096");
  result_free(&r);
  /* A training step (the default target) adds the gradient of that relu
   * coming back: 2 x 4096 bytes, and the step's learning rate (one f32
   * scalar, computed once from fg_minimize's rate variable) going to the
   * updates on cpu:1: 8196. The backward pass runs where the forward pass
   * did, so no weight gradient or labels cross. */
  FG_REQUIRE(cli(&r, "plan", tpath("mp.fgb"), "-i", xin, "-i", yin, NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "transfer bytes per run: 8196");
  FG_CHECK_STR_CONTAINS(r.out, ":0->cpu:1: cpu:0 -> cpu:1, 4 bytes");
  result_free(&r);
  /* Each device has its own arena, offsets from its own 0: the drawing has
   * one plot per device, headed with the arena the plan prints for it. */
  FG_REQUIRE(cli(&r, "plan", tpath("mp.fgb"), "-i", xin, "-i", yin, "--memory-svg", tpath("m.svg"),
                 NULL) == 0);
  CHECK_OK(r);
  char *svg = slurp(tpath("m.svg"));
  FG_REQUIRE(svg);
  int rects = 0;
  for (int d = 0; d < 2; d++) {
    char key[32], want[96];
    snprintf(key, sizeof key, "  cpu:%d: ", d);
    const char *line = strstr(r.out, key), *ar = line ? strstr(line, "arena ") : NULL;
    FG_REQUIRE(ar);
    long long bytes = -1;
    FG_REQUIRE(sscanf(ar, "arena %lld bytes", &bytes) == 1 && bytes > 0);
    snprintf(key, sizeof key, ">cpu:%d: ", d);
    const char *head = strstr(svg, key);
    FG_REQUIRE(head);
    int n = -1;
    FG_REQUIRE(sscanf(head + strlen(key), "%d arena tensors", &n) == 1 && n > 0);
    rects += n;
    snprintf(want, sizeof want, "%s%d arena tensors, arena %lld bytes</text>", key, n, bytes);
    FG_CHECK_STR_CONTAINS(svg, want);
  }
  FG_CHECK_INT(lines_with(svg, svg + strlen(svg), "<rect ", ""), rects);
  free(svg);
  result_free(&r);
  FG_REQUIRE(cli(&r, "profile", tpath("mp.fgb"), "-i", xin, "-i", yin, "--fetch", "loss", "--runs",
                 "2", "--trace", trace, NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "partitions: 2 devices");
  FG_CHECK_STR_CONTAINS(r.out, "transfer bytes per run: 4096");
  /* The receive of layer 1's relu (relu_2) on cpu:1 is a row of its own
   * next to the relu computed on cpu:0, not folded into it. With the
   * passes on, the relu is a fused_matmul (the epilogue pass takes the
   * layer's matmul and bias add into it). */
  const char *order = strstr(r.out, "Run order"), *top = strstr(r.out, "Top by time");
  FG_REQUIRE(order && top);
  const char *env = getenv("FG_PASSES");
  const int passes = !env || (strcmp(env, "off") != 0 && strcmp(env, "0") != 0);
  const char *relu_op = passes ? " fused_matmul " : " relu ";
  FG_CHECK_INT(lines_with(order, top, " relu_2 ", relu_op), 1);
  FG_CHECK_INT(lines_with(order, top, " relu_2 ", " recv "), 1);
  FG_CHECK_INT(lines_with(order, top, " recv ", ""), 1);
  /* With two devices each row names its device: the relu of layer 1 ran
   * on cpu:0 (relu_5, layer 2's, on cpu:1) and the receive on cpu:1. */
  FG_CHECK_INT(lines_with(order, top, " op ", " device "), 1);
  FG_CHECK_INT(lines_with(order, top, relu_op, " cpu:0 "), 1);
  FG_CHECK_INT(lines_with(order, top, " recv ", " cpu:1 "), 1);
  FG_CHECK_INT(lines_with(order, top, " loss ", " cpu:1 "), 1);
  /* Device 1's steps are on their own track: the loss runs on cpu:1. */
  check_trace_track(trace, "loss", 1);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* x [?,4] -> h = relu(x) on rank 0 -> e = exp(h), o = e + h on rank 1:
 * one transfer (h to rank 1) and the fetch o sent back to rank 0. */
static int save_two_rank_model(const char *path) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output h = fg_set_name(g, fg_relu(g, x), "h");
  fg_set_device(g, h, "rank:0/cpu:0");
  fg_output e = fg_set_name(g, fg_exp(g, h), "e");
  fg_set_device(g, e, "rank:1/cpu:0");
  fg_output o = fg_set_name(g, fg_add(g, e, h), "o");
  fg_set_device(g, o, "rank:1/cpu:0");
  int rc = fg_graph_save(g, path, st);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}

/* A model naming 65 ranks (one node on rank:64): plan and profile make
 * every rank's plan and handle at most FG_MAX_CPU_DEVICES (64) of them;
 * profile refuses before it joins MPI or runs anything. */
FG_TEST(dist_cli_too_many_ranks_refused, "dist,badinput") {
  FG_REQUIRE(make_tmpdir());
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 4};
  fg_output h = fg_set_name(g, fg_relu(g, fg_placeholder(g, "x", FG_F32, 2, xd)), "h");
  fg_set_device(g, fg_set_name(g, fg_exp(g, h), "e"), "rank:64/cpu:0");
  FG_REQUIRE(fg_graph_save(g, tpath("r65.fgb"), st) == 0);
  fg_graph_free(g);
  fg_status_free(st);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("r65.fgb"), "--random-inputs", "--batch", "2", "--dist",
                 "mpi", NULL) == 0);
  FG_CHECK(r.code != 0);
  FG_CHECK_STR_CONTAINS(r.err, "places nodes on 65 MPI ranks; flowgraph profile reports at most "
                               "64 of them");
  result_free(&r);
  FG_REQUIRE(cli(&r, "plan", tpath("r65.fgb"), "--random-inputs", "--batch", "2", NULL) == 0);
  FG_CHECK(r.code != 0);
  FG_CHECK_STR_CONTAINS(r.err, "places nodes on 65 MPI ranks; flowgraph plans at most 64");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* `flowgraph plan` of a model split across MPI ranks needs no mpirun: it
 * prints each rank's own plan (its steps, transfers and arena) as that rank
 * would make it. With 3 rows, h is 3 x 4 f32 = 48 bytes, 64 in an arena
 * (64-byte aligned): rank 0 holds h, rank 1 the received h; e and o are
 * one fused node there (exp(x0); add(t0, x0)), so e needs no bytes. */
FG_TEST(dist_cli_plan_shows_each_ranks_plan, "dist") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(save_two_rank_model(tpath("mp2.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "plan", tpath("mp2.fgb"), "--random-inputs", "--batch", "3", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, ": 2 MPI ranks (rank:R/ devices), one plan each\n");
  FG_CHECK_STR_CONTAINS(r.out, "  rank:0/cpu:0: 2 nodes, 3 steps (1 recv), arena 64 bytes\n");
  FG_CHECK_STR_CONTAINS(r.out, "  rank:1/cpu:0: 2 nodes, 3 steps (1 recv), arena 64 bytes\n");
  FG_CHECK_STR_CONTAINS(r.out, "  transfer h:0->rank:1/cpu:0: rank:0/cpu:0 -> rank:1/cpu:0, "
                               "48 bytes\n  transfer bytes per run: 48 (1 of the graph's 1 "
                               "transfers)\n");
  /* Rank 0 computes h, sends it, receives the fetch; rank 1 the rest. */
  FG_CHECK_STR_CONTAINS(r.out, "rank 0: 3 steps, 3 tensors\n\nsteps:\n   step  node  op\n"
                               "      0  h     relu\n      1  h     send\n      2  o     recv\n");
  FG_CHECK_STR_CONTAINS(r.out, "rank 1: 3 steps, 3 tensors\n\nsteps:\n   step  node  op\n"
                               "      0  h     recv\n      1  o     fused_elementwise[exp+add]\n"
                               "      2  o     send\n");
  FG_CHECK_STR_CONTAINS(r.out, "rank 0 arena_bytes: 64\n");
  FG_CHECK_STR_CONTAINS(r.out, "rank 1 arena_bytes: 64\n");
  /* No rank lists the other's tensors; the summary adds the ranks up. */
  FG_CHECK(strstr(r.out, "remote") == NULL);
  const char *tail = strstr(r.out, "\nall ranks:\n");
  FG_REQUIRE(tail);
  FG_CHECK(strcmp(tail, "\nall ranks:\narena_bytes: 128\nlower_bound_bytes: 128\n"
                        "naive_bytes: 128\n") == 0);
  result_free(&r);
  /* The memory drawing has one plot per rank's device, each with its own
   * arena: h on rank 0; the received h on rank 1. */
  FG_REQUIRE(cli(&r, "plan", tpath("mp2.fgb"), "--random-inputs", "--batch", "3", "--memory-svg",
                 tpath("m.svg"), NULL) == 0);
  CHECK_OK(r);
  char *svg = slurp(tpath("m.svg"));
  FG_REQUIRE(svg);
  FG_CHECK_STR_CONTAINS(svg, ">rank:0/cpu:0: 1 arena tensors, arena 64 bytes</text>");
  FG_CHECK_STR_CONTAINS(svg, ">rank:1/cpu:0: 1 arena tensors, arena 64 bytes</text>");
  FG_CHECK_STR_CONTAINS(svg, "mp2.fgb (6 steps, 2 arena tensors)</text>");
  FG_CHECK_STR_CONTAINS(svg, "arena 128 bytes | lower bound 128 bytes | naive 128 bytes");
  FG_CHECK_INT(lines_with(svg, svg + strlen(svg), "<rect ", ""), 2);
  free(svg);
  result_free(&r);
  /* Profiling needs every rank running: refused, pointing to what works. */
  FG_REQUIRE(cli(&r, "profile", tpath("mp2.fgb"), "--random-inputs", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT",
                      "places nodes on 2 MPI ranks (rank:R/ devices): profile it with "
                      "'mpirun -np 2 flowgraph profile ... --dist mpi' ('flowgraph plan' "
                      "prints each rank's plan)");
  result_free(&r);
  /* --dist mpi outside mpirun, and its options' misuse. */
  FG_REQUIRE(cli(&r, "profile", tpath("mp2.fgb"), "--random-inputs", "--dist", "mpi", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT",
                      "--dist mpi: this process was not started by mpirun (try mpirun -np 2 "
                      "flowgraph profile ... --dist mpi)");
  result_free(&r);
  FG_REQUIRE(cli(&r, "profile", tpath("mp2.fgb"), "--dist-timeout", "5", NULL) == 0);
  FG_CHECK_INT(r.code, 2);
  FG_CHECK_STR_CONTAINS(r.err, "--dist-timeout needs --dist mpi");
  result_free(&r);
  FG_REQUIRE(cli(&r, "profile", tpath("mp2.fgb"), "--dist", "tcp", NULL) == 0);
  FG_CHECK_INT(r.code, 2);
  FG_CHECK_STR_CONTAINS(r.err, "--dist needs 'mpi' (run under mpirun), got 'tcp'");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* Epoch losses printed by `flowgraph train` ("epoch k/n  loss X"). */
static int epoch_losses(const char *out, double *loss, int max) {
  int n = 0;
  for (const char *p = strstr(out, "epoch "); p && n < max; p = strstr(p + 1, "epoch ")) {
    const char *l = strstr(p, "  loss ");
    if (!l) break;
    loss[n++] = strtod(l + 7, NULL);
  }
  return n;
}

FG_TEST(dist_cli_train_runs_data_parallel_graph, "dist") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(save_model(tpath("dp.fgb"), 4) == 0);
  FG_REQUIRE(save_model(tpath("mp.fgb"), 0) == 0);
  FG_REQUIRE(save_batch(64) == 0);
  char xin[400], yin[400];
  snprintf(xin, sizeof xin, "x=%s", tpath("x.npy"));
  snprintf(yin, sizeof yin, "y=%s", tpath("y.npy"));
  double a[3], b[3];
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("dp.fgb"), "-i", xin, "-i", yin, "--batch", "16", "--epochs",
                 "3", "--save", tpath("out.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_INT(epoch_losses(r.out, a, 3), 3);
  result_free(&r);
  /* The same model on one device (mp.fgb: cpu:0/cpu:1 model parallel,
   * numerically the single-device model). */
  FG_REQUIRE(cli(&r, "train", tpath("mp.fgb"), "-i", xin, "-i", yin, "--batch", "16", "--epochs",
                 "3", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_INT(epoch_losses(r.out, b, 3), 3);
  result_free(&r);
  for (int e = 0; e < 3; e++)
    FG_CHECK_NEAR(a[e], b[e], 1e-5);
  FG_CHECK(a[2] < a[0]);
  FG_CHECK(exists(tpath("out.fgb")));
  fgt_rmtree(tmpdir);
}

/* `flowgraph profile --micro-batches 4` on the MLP split over cpu:0 and
 * cpu:1 profiles the step `train --micro-batches 4` runs: every micro-batch
 * has rows of its own on its device and track. Per micro-batch of 2 rows,
 * layer 1's relu goes to cpu:1 (2 x 128 f32 = 1024 bytes), its gradient
 * comes back (1024) and the labels' shard goes over (2 i32 = 8): 4 x 2056
 * = 8224 bytes, and the 4 gradients' combination sends each micro-batch's
 * row weight as a 4-byte scalar, and the learning rate (an f32 scalar)
 * goes to the updates on cpu:1: 8244 bytes per run (with the passes off
 * the weights go as 16 bytes each: 8292). */
FG_TEST(dist_cli_profile_micro_batches, "dist") {
  char xin[400], yin[400], trace[400];
  FG_REQUIRE(setup_split_model(xin, yin, trace) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "profile", tpath("mp.fgb"), "-i", xin, "-i", yin, "--runs", "2",
                 "--micro-batches", "4", "--trace", trace, NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "micro-batches: 4 per run (fg_micro_batch; batch inputs: x, y)");
  FG_CHECK_STR_CONTAINS(r.out, "targets: train\n");
  FG_CHECK_STR_CONTAINS(r.out, "partitions: 2 devices");
  FG_CHECK_STR_CONTAINS(r.out,
                        "transfer micro_batch_3/relu_2:0->cpu:1: cpu:0 -> cpu:1, 1024 bytes");
  const char *env = getenv("FG_PASSES");
  const int passes = !env || (strcmp(env, "off") != 0 && strcmp(env, "0") != 0);
  FG_CHECK_STR_CONTAINS(r.out,
                        passes ? "transfer bytes per run: 8244" : "transfer bytes per run: 8292");
  const char *order = strstr(r.out, "Run order"), *top = strstr(r.out, "Top by time");
  FG_REQUIRE(order && top);
  for (int k = 0; k < 4; k++) {
    char node[64];
    /* Each micro-batch's first layer on cpu:0 with its 2 rows, its loss on
     * cpu:1, and its relu received there. With the passes on the first
     * layer's matmul and bias add run inside its relu (a fused_matmul, the
     * epilogue pass), which then shows [2,128] on cpu:0 and, received, on
     * cpu:1. */
    snprintf(node, sizeof node, " micro_batch_%d/matmul_0 ", k);
    FG_CHECK_INT(lines_with(order, top, node, " cpu:0 "), !passes);
    FG_CHECK_INT(lines_with(order, top, node, " f32 [2,128]"), !passes);
    snprintf(node, sizeof node, " micro_batch_%d/relu_2 ", k);
    FG_CHECK_INT(lines_with(order, top, node, " cpu:0 "), 1);
    FG_CHECK_INT(lines_with(order, top, node, " f32 [2,128]"), 2);
    snprintf(node, sizeof node, " micro_batch_%d/loss ", k);
    FG_CHECK_INT(lines_with(order, top, node, " cpu:1 "), 1);
    snprintf(node, sizeof node, " micro_batch_%d/relu_2 ", k);
    FG_CHECK_INT(lines_with(order, top, node, " recv "), 1);
  }
  /* The full-batch nodes stay in the graph for fetches, but the step does
   * not run them. */
  FG_CHECK_INT(lines_with(order, top, " matmul_0 ", ""), 0);
  check_trace_track(trace, "micro_batch_2/loss", 1);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(dist_cli_profile_micro_batches_bad_args, "dist,badinput") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(save_model(tpath("mp.fgb"), 0) == 0);
  FG_REQUIRE(save_two_rank_model(tpath("fwd.fgb")) == 0);
  const char *m = tpath("mp.fgb");
  cli_result r;
  static const char *const bad[] = {"0", "1025", "two"};
  for (int i = 0; i < 3; i++) {
    FG_REQUIRE(cli(&r, "profile", m, "--random-inputs", "--batch", "8", "--micro-batches", bad[i],
                   NULL) == 0);
    CHECK_USAGE_ERROR(r);
    FG_CHECK_STR_CONTAINS(r.err, "--micro-batches needs an integer from 1 to 1024");
    result_free(&r);
  }
  /* 3 rows cannot make 4 micro-batches: refused before any run. */
  FG_REQUIRE(
      cli(&r, "profile", m, "--random-inputs", "--batch", "3", "--micro-batches", "4", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT",
                      "--micro-batches 4: input 'x' has 3 rows, fewer than the "
                      "micro-batches");
  FG_CHECK(strstr(r.out, "Run order") == NULL);
  result_free(&r);
  /* A model without a training step has nothing to pipeline. */
  FG_REQUIRE(cli(&r, "profile", tpath("fwd.fgb"), "--random-inputs", "--batch", "4",
                 "--micro-batches", "2", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT",
                      "fg_micro_batch: the graph needs metadata \"loss\" and \"train_target\"");
  FG_CHECK(strstr(r.out, "Run order") == NULL);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* The arena_bytes line of `flowgraph plan` on mp.fgb with M micro-batches
 * of 256 rows (M = 1: none), or -1. */
static long long plan_arena_in_flight(int micro, const char *in_flight) {
  char m[16];
  snprintf(m, sizeof m, "%d", micro);
  cli_result r;
  if (cli(&r, "plan", tpath("mp.fgb"), "--random-inputs", "--batch", "256", "--micro-batches", m,
          in_flight ? "--in-flight" : NULL, in_flight, NULL) != 0)
    return -1;
  long long bytes = -1;
  const char *line = strstr(r.out, "\narena_bytes: ");
  if (r.code == 0 && line) bytes = atoll(line + 14);
  if (micro > 1) FG_CHECK_STR_CONTAINS(r.out, "micro-batches: ");
  if (in_flight && strcmp(in_flight, "all") == 0) FG_CHECK_STR_CONTAINS(r.out, "; all in flight)");
  result_free(&r);
  return bytes;
}

static long long plan_arena(int micro) { return plan_arena_in_flight(micro, NULL); }

/* `flowgraph plan --micro-batches M` plans the step `train
 * --micro-batches M` runs, so the memory of the pipeline shows: with 32
 * micro-batches of 8 rows the arenas (both devices) take less than with 8
 * of 32, as at most 4 are in flight per device (fg_micro_batch). */
FG_TEST(dist_cli_plan_micro_batches_memory, "dist,badinput,slow") {
  char xin[400], yin[400], trace[400];
  FG_REQUIRE(setup_split_model(xin, yin, trace) == 0);
  long long m8 = plan_arena(8), m32 = plan_arena(32);
  FG_CHECK(m8 > 0 && m32 > 0 && m32 < m8);
  if (!(m32 < m8)) fprintf(stderr, "arena: M=8 %lld, M=32 %lld\n", m8, m32);
  cli_result r;
  FG_REQUIRE(cli(&r, "plan", tpath("mp.fgb"), "--random-inputs", "--micro-batches", "0", NULL) ==
             0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--micro-batches needs an integer from 1 to 1024");
  result_free(&r);
  /* --in-flight 2 (the 2 stages) takes less than the default 4, and all
   * (no bound) more, where 32 micro-batches would be in flight. */
  long long w2 = plan_arena_in_flight(32, "2"), all = plan_arena_in_flight(32, "all");
  FG_CHECK(w2 > 0 && w2 < m32 && all > m32);
  if (!(w2 > 0 && w2 < m32 && all > m32))
    fprintf(stderr, "arena at M=32: in flight 2 %lld, 4 %lld, all %lld\n", w2, m32, all);
  FG_REQUIRE(cli(&r, "plan", tpath("mp.fgb"), "--random-inputs", "--micro-batches", "4",
                 "--in-flight", "-1", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--in-flight needs an integer from 1 to 1024, or all");
  result_free(&r);
  FG_REQUIRE(cli(&r, "plan", tpath("mp.fgb"), "--random-inputs", "--in-flight", "2", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--in-flight needs --micro-batches");
  result_free(&r);
  fgt_rmtree(tmpdir);
}
