/* GPU benchmark driver: the CPU driver's models on cuda:0.
 *
 *   fg_bench_gpu CASE [--runs N] [--warmup N] [--streams N] [--profile]
 *
 * CASE is gpu_op_overhead, gpu_mlp_small_train, gpu_mlp_large_train,
 * gpu_mlp_large_train_tf32, gpu_host_steps, cublas_peak or all. Each case prints the CPU
 * driver's line format
 *
 *   FG <case> median_s=... min_s=... runs=N threads=1 [extra key=value ...]
 *
 * which bench/compare_torch_gpu.py parses; without a GPU (or in a build
 * without the CUDA backend) every case prints "FG <case> skipped: no GPU"
 * and the driver exits 0. A timed run is one fg_session_run: feeds copied to
 * the device, the plan (replayed as a CUDA Graph from its third run on, the
 * session default), fetches copied back, one synchronisation.
 *
 * The helpers (timing, median, the MLP builder, FLOP counts) are the CPU
 * driver's: it is included with its main renamed, so both drivers time and
 * build exactly the same way. cublas_peak is a plain cublasSgemm C = A B of
 * 8192^3 on the device, in f32 and with TF32 tensor cores, the reference
 * for the fraction of peak. --profile adds, for the MLP cases, one run with
 * per-node CUDA-event timings summed per op ("PROFILE <case> op=..."), to
 * see where a step's device time goes. --streams N sets every session's
 * num_streams. */
#define main fg_bench_cpu_main
#include "fg_bench.c"
#undef main

#ifdef FG_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

/* Whether cuda:0 exists, asked through the public API: a session on it. */
static int have_gpu(void) {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {1};
  fg_relu(g, fg_placeholder(g, "x", FG_F32, 1, d));
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = "cuda:0";
  fg_session *s = fg_session_new(g, &o, NULL);
  int ok = s != NULL;
  fg_session_free(s);
  fg_graph_free(g);
  return ok;
}

/* --streams N: the sessions' num_streams (0: the session default). */
static int g_streams;

static fg_session *gpu_session(fg_graph *g, int graphs, int tf32, fg_status *st) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = "cuda:0";
  o.cuda_graphs = graphs;
  o.allow_tf32 = tf32;
  if (g_streams > 0) o.num_streams = g_streams;
  return fg_session_new(g, &o, st);
}

static int gpu_op_overhead(const bench_opts *bo, fg_status *st) {
  int runs = pick(bo->runs, 300), warmup = pick(bo->warmup, 30);
  int64_t d[1] = {16};
  uint64_t rng = 7;
  fg_tensor *c = random_f32(1, d, 1.0, &rng, st), *x = random_f32(1, d, 1.0, &rng, st);
  fg_graph *g = c ? overhead_graph(c, d) : NULL;
  double *times = calloc((size_t)runs, sizeof *times);
  double *plain = calloc((size_t)runs, sizeof *plain);
  fg_session *s = NULL, *sp = NULL;
  int rc = 1;
  if (!g || !c || !x || !times || !plain) goto done;
  if (!(s = gpu_session(g, 0, 0, st)) || !(sp = gpu_session(g, -1, 0, st))) {
    rc = fail("gpu_op_overhead: session", st);
    goto done;
  }
  fg_feed feed = {"x", x};
  const char *fetch = "y";
  bench_run r = {s, &feed, 1, &fetch, 1, NULL, 0}, rp = {sp, &feed, 1, &fetch, 1, NULL, 0};
  /* y = x + 1000 c, as in the CPU case. */
  double max_err = 0;
  if (time_runs(&r, warmup, runs, times, st) != 0 || time_runs(&rp, warmup, runs, plain, st) != 0 ||
      overhead_err(s, &feed, x, c, &max_err, st) != 0) {
    rc = fail("gpu_op_overhead: run", st);
    goto done;
  }
  char extra[192];
  double med = median(times, runs);
  snprintf(extra, sizeof extra,
           "nodes=%d per_node_s=%.9g no_cuda_graph_median_s=%.9g check_max_err=%.3g",
           OVERHEAD_NODES, med / OVERHEAD_NODES, median(plain, runs), max_err);
  print_line("gpu_op_overhead", times, runs, 1, extra);
  rc = 0;
done:
  fg_session_free(s);
  fg_session_free(sp);
  fg_graph_free(g);
  fg_tensor_free(c);
  fg_tensor_free(x);
  free(times);
  free(plain);
  return rc;
}

/* cublasSgemm C = A B, n^3, GFLOP/s (median of runs); -1 on failure. */
static double cublas_gflops(int n, int tf32, int runs) {
#ifdef FG_HAVE_CUDA
  size_t bytes = (size_t)n * (size_t)n * sizeof(float);
  float *a = NULL, *b = NULL, *c = NULL;
  cublasHandle_t h = NULL;
  cudaEvent_t e0 = NULL, e1 = NULL;
  double result = -1;
  double *t = calloc((size_t)runs, sizeof *t);
  if (!t || cudaMalloc((void **)&a, bytes) != cudaSuccess ||
      cudaMalloc((void **)&b, bytes) != cudaSuccess ||
      cudaMalloc((void **)&c, bytes) != cudaSuccess || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS ||
      cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess)
    goto done;
  (void)cudaMemset(a, 0, bytes);
  (void)cudaMemset(b, 0, bytes);
  cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  const float one = 1, zero = 0;
  for (int i = -2; i < runs; i++) {
    cudaEventRecord(e0, 0);
    if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n) !=
        CUBLAS_STATUS_SUCCESS)
      goto done;
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (i >= 0) t[i] = ms * 1e-3;
  }
  result = 2.0 * n * (double)n * n / median(t, runs) / 1e9;
done:
  if (h) cublasDestroy(h);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  cudaFree(a), cudaFree(b), cudaFree(c);
  free(t);
  return result;
#else
  (void)n, (void)tf32, (void)runs;
  return -1;
#endif
}

/* --profile: after the timed runs, a training step in a session of one
 * stream without CUDA Graphs (so a node's events bracket its own kernels
 * and no wait on another stream), with per-node timings summed per op and
 * printed largest first. */
static int g_profile;

static void print_profile(fg_graph *g, int tf32, const fg_feed *feeds, const char *name,
                          fg_status *st) {
  const int streams = g_streams;
  g_streams = 1;
  fg_session *s = gpu_session(g, -1, tf32, st);
  g_streams = streams;
  const char *target = "train";
  fg_run_options ro = {1};
  fg_run_metadata *md = NULL;
  for (int warm = 0; s && warm < 3; warm++)
    if (fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st) != 0) break;
  if (!s || fg_session_run_ex(s, feeds, 2, NULL, 0, NULL, &target, 1, &ro, &md, st) != 0 || !md) {
    fprintf(stderr, "%s: profile run: %s\n", name, fg_status_message(st));
    fg_run_metadata_free(md);
    fg_session_free(s);
    return;
  }
  enum { MAX_OPS = 64 };
  const char *ops[MAX_OPS];
  int64_t total[MAX_OPS] = {0}, sum = 0;
  int count[MAX_OPS] = {0}, n_ops = 0;
  for (int i = 0; i < md->n_nodes; i++) {
    int k = 0;
    while (k < n_ops && strcmp(ops[k], md->nodes[i].op) != 0)
      k++;
    if (k == n_ops) {
      if (n_ops == MAX_OPS) continue;
      ops[n_ops++] = md->nodes[i].op;
    }
    int64_t t = md->nodes[i].end_ns - md->nodes[i].start_ns;
    total[k] += t, count[k]++, sum += t;
  }
  for (int done = 0; done < n_ops; done++) {
    int best = -1;
    for (int k = 0; k < n_ops; k++)
      if (count[k] > 0 && (best < 0 || total[k] > total[best])) best = k;
    printf("PROFILE %s op=%s nodes=%d total_us=%.1f\n", name, ops[best], count[best],
           total[best] / 1e3);
    count[best] = -count[best];
  }
  printf("PROFILE %s run_us=%.1f node_sum_us=%.1f nodes=%d\n", name, md->run_ns / 1e3, sum / 1e3,
         md->n_nodes);
  fg_run_metadata_free(md);
  fg_session_free(s);
}

/* A copy of t in page-locked host memory (fg_tensor_new_pinned), which a
 * session feeds to the device without its staging copy: what the PyTorch
 * side's pin_memory() batch is. NULL when none could be had. */
static fg_tensor *pinned_copy(const fg_tensor *t, fg_status *st) {
  fg_tensor *p = fg_tensor_new_pinned(fg_tensor_dtype(t), fg_tensor_rank(t), fg_tensor_dims(t), st);
  if (p && !fg_tensor_is_pinned(p)) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "no page-locked memory for the batch");
    fg_tensor_free(p);
    return NULL;
  }
  if (p) memcpy(fg_tensor_data(p), fg_tensor_data(t), fg_tensor_num_bytes(t));
  return p;
}

/* Times the step with the batch in ordinary (pageable) memory, then in
 * page-locked memory; the case's figure is the page-locked one, as on the
 * PyTorch side, and pageable_median_s the other. */
static int gpu_mlp(const mlp_shape *m, const char *name, int tf32, int with_peak,
                   const bench_opts *bo, fg_status *st) {
  int runs = pick(bo->runs, m->runs * 4), warmup = pick(bo->warmup, m->warmup + 3);
  fg_graph *g = build_mlp(m, st);
  if (!g) return fail(name, st);
  fg_tensor *x = NULL, *y = NULL, *px = NULL, *py = NULL;
  mlp_batch(m, &x, &y, st);
  double *times = calloc((size_t)runs, sizeof *times);
  double *pageable = calloc((size_t)runs, sizeof *pageable);
  fg_session *s = NULL;
  int rc = 1;
  if (!x || !y || !times || !pageable) goto done;
  if (!(px = pinned_copy(x, st)) || !(py = pinned_copy(y, st))) {
    rc = fail(name, st);
    goto done;
  }
  if (!(s = gpu_session(g, 0, tf32, st))) {
    rc = fail(name, st);
    goto done;
  }
  fg_feed feeds[2] = {{"x", x}, {"y", y}}, pfeeds[2] = {{"x", px}, {"y", py}};
  double loss0 = 0, loss1 = 0, unused;
  if (mlp_time(s, feeds, warmup, runs, pageable, &loss0, &unused, st) != 0 ||
      mlp_time(s, pfeeds, warmup, runs, times, &unused, &loss1, st) != 0) {
    rc = fail(name, st);
    goto done;
  }
  fg_session_free(s);
  s = NULL;
  if (g_profile) print_profile(g, tf32, feeds, name, st);
  double flops = mlp_flops(m, 0), med = median(times, runs);
  char extra[320];
  int len = snprintf(extra, sizeof extra,
                     "flops=%.6g gflops=%.4g loss_first=%.6g loss_last=%.6g tf32=%d "
                     "pageable_median_s=%.9g",
                     flops, flops / med / 1e9, loss0, loss1, tf32, median(pageable, runs));
  if (with_peak) {
    double peak = cublas_gflops(8192, tf32, 10);
    if (peak > 0)
      snprintf(extra + len, sizeof extra - (size_t)len, " cublas_gflops=%.6g fraction=%.4f", peak,
               flops / med / 1e9 / peak);
  }
  print_line(name, times, runs, 1, extra);
  rc = 0;
done:
  fg_session_free(s);
  fg_graph_free(g);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_tensor_free(px);
  fg_tensor_free(py);
  free(times);
  free(pageable);
  return rc;
}

/* gpu_host_steps: the small MLP's training step on cuda:0 with its first
 * layer (forward, backward and update) placed on cpu:0, so a GPU session
 * runs those nodes on the host (executor/dist/session_dist.c host_steps), against
 * the same graph all on the GPU (all_gpu_median_s). What the placement
 * costs: the staging copies and the CPU kernels in the step. */
static int gpu_host_steps(const bench_opts *bo, fg_status *st) {
  const mlp_shape *m = &MLP_SMALL;
  const char *name = "gpu_host_steps";
  int runs = pick(bo->runs, m->runs * 4), warmup = pick(bo->warmup, m->warmup + 3);
  static const char *const devices[3] = {"cpu:0", "cuda:0", "cuda:0"};
  fg_output train;
  fg_graph *g = mlp_graph_on(m->batch, m->n_layers, m->widths, devices, &train, st);
  if (g) fg_set_name(g, train, "train");
  fg_graph *ga = build_mlp(m, st);
  fg_tensor *x = NULL, *y = NULL, *px = NULL, *py = NULL;
  double *times = calloc((size_t)runs, sizeof *times), *all = calloc((size_t)runs, sizeof *all);
  fg_session *s = NULL, *sa = NULL;
  int rc = 1;
  if (g && ga) mlp_batch(m, &x, &y, st);
  if (!x || !y || !times || !all || !(px = pinned_copy(x, st)) || !(py = pinned_copy(y, st)) ||
      !(s = gpu_session(g, 1, 0, st)) || !(sa = gpu_session(ga, 1, 0, st))) {
    rc = fail(name, st);
    goto done;
  }
  fg_feed feeds[2] = {{"x", px}, {"y", py}};
  double l0 = 0, l1 = 0, a0 = 0, a1 = 0;
  if (mlp_time(s, feeds, warmup, runs, times, &l0, &l1, st) != 0 ||
      mlp_time(sa, feeds, warmup, runs, all, &a0, &a1, st) != 0) {
    rc = fail(name, st);
    goto done;
  }
  char extra[200];
  snprintf(extra, sizeof extra, "loss_first=%.6g loss_last=%.6g all_gpu_median_s=%.9g", l0, l1,
           median(all, runs));
  print_line(name, times, runs, 1, extra);
  rc = 0;
done:
  fg_session_free(s);
  fg_session_free(sa);
  fg_graph_free(g);
  fg_graph_free(ga);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_tensor_free(px);
  fg_tensor_free(py);
  free(times);
  free(all);
  return rc;
}

static const char *const GPU_CASES[] = {"gpu_op_overhead",     "gpu_mlp_small_train",
                                        "gpu_mlp_large_train", "gpu_mlp_large_train_tf32",
                                        "gpu_host_steps",      "cublas_peak"};
#define N_GPU_CASES ((int)(sizeof GPU_CASES / sizeof GPU_CASES[0]))

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: fg_bench_gpu CASE [--runs N] [--warmup N] [--streams N] [--profile]\n  CASE:");
    for (int i = 0; i < N_GPU_CASES; i++)
      fprintf(stderr, " %s", GPU_CASES[i]);
    fprintf(stderr, " all\n");
    return 2;
  }
  const char *which = argv[1];
  bench_opts bo = {-1, -1, 0, NULL};
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--profile")) {
      g_profile = 1;
      continue;
    }
    int *dst = !strcmp(argv[i], "--runs")      ? &bo.runs
               : !strcmp(argv[i], "--warmup")  ? &bo.warmup
               : !strcmp(argv[i], "--streams") ? &g_streams
                                               : NULL;
    if (!dst || i + 1 >= argc || parse_int(argv[++i], dst == &bo.runs ? 1 : 0, 1000000, dst) != 0)
      return 2;
  }
  int all = !strcmp(which, "all"), known = all;
  for (int i = 0; i < N_GPU_CASES; i++)
    known |= !strcmp(which, GPU_CASES[i]);
  if (!known) {
    fprintf(stderr, "fg_bench_gpu: unknown case '%s'\n", which);
    return 2;
  }
  if (!have_gpu()) {
    for (int i = 0; i < N_GPU_CASES; i++)
      if (all || !strcmp(which, GPU_CASES[i])) printf("FG %s skipped: no GPU\n", GPU_CASES[i]);
    return 0;
  }
  fg_status *st = fg_status_new();
  if (!st) return 1;
  int rc = 0;
#define CASE(name, call)                                                                           \
  if (all || !strcmp(which, name)) rc |= (call);
  CASE("gpu_op_overhead", gpu_op_overhead(&bo, st));
  CASE("gpu_mlp_small_train", gpu_mlp(&MLP_SMALL, "gpu_mlp_small_train", 0, 0, &bo, st));
  CASE("gpu_mlp_large_train", gpu_mlp(&MLP_LARGE, "gpu_mlp_large_train", 0, 1, &bo, st));
  CASE("gpu_mlp_large_train_tf32", gpu_mlp(&MLP_LARGE, "gpu_mlp_large_train_tf32", 1, 1, &bo, st));
  CASE("gpu_host_steps", gpu_host_steps(&bo, st));
#undef CASE
  if (all || !strcmp(which, "cublas_peak")) {
    double f32 = cublas_gflops(8192, 0, 10), tf32 = cublas_gflops(8192, 1, 10);
    printf("FG cublas_peak median_s=0 min_s=0 runs=10 threads=1 f32_gflops=%.6g tf32_gflops=%.6g\n",
           f32, tf32);
    rc |= f32 > 0 && tf32 > 0 ? 0 : 1;
  }
  fg_status_free(st);
  return rc;
}
