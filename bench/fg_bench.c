/* Benchmark driver: builds each case with the public C API and times it.
 *
 *   fg_bench CASE [--runs N] [--warmup N] [--threads N] [--save OUT.fgb]
 *
 * --save writes the MLP cases' training graph (feeds x and y, target
 * train), for `flowgraph profile`.
 *
 * CASE is op_overhead, mlp_small_train, mlp_medium_train, mlp_large_train,
 * wide_graph, mlp_large_infer_b1, sgemm, all, check_numerics (not part of all: it times
 * mlp_medium_train with fg_session_options.check_numerics off and on,
 * interleaved, and prints the overhead ratio), or blas_core (prints
 * core=NAME, the OpenBLAS kernels flowgraph runs, which the comparison
 * scripts give PyTorch's OpenBLAS too). Each case prints one
 * machine-readable line
 *
 *   FG <case> median_s=... min_s=... runs=N threads=T [extra key=value ...]
 *
 * which bench/compare_torch.py parses. Times are the median of N timed runs
 * after W untimed warm-up runs (the first run builds and caches the plan).
 * --threads sets fg_session_options.num_threads (0, the default, means one
 * per core); wide_graph and mlp_large_infer_b1 ignore it and time 1 and 2
 * threads (mlp_large_infer_b1's median_s is its 1-thread forward; t1_s,
 * t2_s, read1_s and read2_s are the forward and the plain read of its
 * weights on 1 and 2 threads).
 *
 * FLOPs of a training step: a dense layer [M,K] x [K,N] costs 2*M*N*K in
 * the forward pass, 2*M*N*K for dW = X^T dY and 2*M*N*K for dX = dY W^T.
 * The first layer's dX is not needed (x is fed, not trained) and neither
 * flowgraph's autodiff nor PyTorch computes it, so `flops` counts what both
 * run: 3 * 2*M*N*K per layer minus the first layer's dX. `flops_3x` is the
 * plain 3 * 2*M*N*K per layer convention, printed for comparison; it credits
 * work nobody does (9% more for mlp_large_train). Both ignore the
 * elementwise ops, softmax and the SGD update (under 1% of the matmul FLOPs
 * for these shapes). gflops and the fraction of plain sgemm GFLOP/s use
 * `flops`. */
#include <cblas.h>
#include <flowgraph/flowgraph.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"

typedef struct bench_opts {
  int runs;         /* -1: the case's default */
  int warmup;       /* -1: the case's default */
  int threads;      /* fg_session_options.num_threads */
  const char *save; /* --save: the MLP cases write their training graph here */
} bench_opts;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts in place. */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double min_of(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++)
    m = v[i] < m ? v[i] : m;
  return m;
}

static int fail(const char *what, fg_status *st) {
  fprintf(stderr, "fg_bench: %s: %s: %s\n", what, fg_code_name(fg_status_code(st)),
          fg_status_message(st));
  return 1;
}

static fg_session *open_session(fg_graph *g, int threads, fg_status *st) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  return fg_session_new(g, &o, st);
}

/* What one timed call runs: a session with its feeds, fetches and targets. */
typedef struct bench_run {
  fg_session *s;
  const fg_feed *feeds;
  int n_feeds;
  const char *const *fetches;
  int n_fetches;
  const char *const *targets;
  int n_targets;
} bench_run;

static int run_once(const bench_run *r, fg_status *st) {
  fg_tensor *out[4] = {NULL, NULL, NULL, NULL};
  int rc = fg_session_run(r->s, r->feeds, r->n_feeds, r->fetches, r->n_fetches, out, r->targets,
                          r->n_targets, st);
  for (int i = 0; i < r->n_fetches; i++)
    fg_tensor_free(out[i]);
  return rc;
}

/* Runs `r` (one f32 scalar fetch) and stores the value. */
static int fetch_scalar(const bench_run *r, double *v, fg_status *st) {
  fg_tensor *out = NULL;
  if (fg_session_run(r->s, r->feeds, r->n_feeds, r->fetches, 1, &out, NULL, 0, st) != 0) return -1;
  *v = *(const float *)fg_tensor_data(out);
  fg_tensor_free(out);
  return 0;
}

/* Warm-up, then `runs` timed runs into times[]; 0 or -1 (status set). */
static int time_runs(const bench_run *r, int warmup, int runs, double *times, fg_status *st) {
  for (int i = 0; i < warmup; i++)
    if (run_once(r, st) != 0) return -1;
  for (int i = 0; i < runs; i++) {
    double t0 = now_s();
    if (run_once(r, st) != 0) return -1;
    times[i] = now_s() - t0;
  }
  return 0;
}

/* threads 0 is the session default, one per core: print what it means. */
static void print_line(const char *name, double *times, int runs, int threads, const char *extra) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (threads == 0) threads = cores > 0 ? (int)cores : 1;
  double mn = min_of(times, runs), med = median(times, runs);
  printf("FG %s median_s=%.9g min_s=%.9g runs=%d threads=%d%s%s\n", name, med, mn, runs, threads,
         extra && *extra ? " " : "", extra ? extra : "");
  fflush(stdout);
}

static int pick(int v, int dflt) { return v >= 0 ? v : dflt; }

/* ---- op_overhead: y = x + c + c + ... (1000 adds of 16 f32) --------------- */

#define OVERHEAD_NODES 1000

/* y = x + c + c + ... (OVERHEAD_NODES adds) over d[0] f32; NULL on failure. */
static fg_graph *overhead_graph(const fg_tensor *c, const int64_t *d) {
  fg_graph *g = fg_graph_new();
  if (!g) return NULL;
  fg_output y = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_output k = fg_constant(g, "c", c);
  for (int i = 0; i < OVERHEAD_NODES; i++)
    y = fg_add(g, y, k);
  fg_set_name(g, y, "y");
  return g;
}

/* A cheap guard against an executor that skips work: runs s once and
 * returns max |y - (x + OVERHEAD_NODES c)| in *max_err; 0 or -1. */
static int overhead_err(fg_session *s, const fg_feed *feed, const fg_tensor *x, const fg_tensor *c,
                        double *max_err, fg_status *st) {
  const char *fetch = "y";
  fg_tensor *out = NULL;
  if (fg_session_run(s, feed, 1, &fetch, 1, &out, NULL, 0, st) != 0) return -1;
  const float *yp = fg_tensor_data(out), *xp = fg_tensor_data(x), *cp = fg_tensor_data(c);
  const int64_t n = fg_tensor_num_elements(x);
  *max_err = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)yp[i] - ((double)xp[i] + OVERHEAD_NODES * (double)cp[i]));
    *max_err = e > *max_err ? e : *max_err;
  }
  fg_tensor_free(out);
  return 0;
}

static int case_op_overhead(const bench_opts *bo, fg_status *st) {
  int runs = pick(bo->runs, 300), warmup = pick(bo->warmup, 30);
  int64_t d[1] = {16};
  uint64_t rng = 7;
  fg_tensor *c = random_f32(1, d, 1.0, &rng, st), *x = random_f32(1, d, 1.0, &rng, st);
  fg_graph *g = c ? overhead_graph(c, d) : NULL;
  double *times = calloc((size_t)runs, sizeof *times);
  fg_session *s = NULL;
  int rc = 1;
  if (!g || !c || !x || !times) {
    fprintf(stderr, "fg_bench: out of memory\n");
    goto done;
  }
  if (!(s = open_session(g, bo->threads, st))) {
    rc = fail("op_overhead: session", st);
    goto done;
  }
  fg_feed feed = {"x", x};
  const char *fetch = "y";
  bench_run r = {s, &feed, 1, &fetch, 1, NULL, 0};
  double max_err = 0;
  if (time_runs(&r, warmup, runs, times, st) != 0 ||
      overhead_err(s, &feed, x, c, &max_err, st) != 0) {
    rc = fail("op_overhead: run", st);
    goto done;
  }
  char extra[128];
  double med = median(times, runs);
  snprintf(extra, sizeof extra, "nodes=%d per_node_s=%.9g check_max_err=%.3g", OVERHEAD_NODES,
           med / OVERHEAD_NODES, max_err);
  print_line("op_overhead", times, runs, bo->threads, extra);
  rc = 0;
done:
  fg_session_free(s);
  fg_graph_free(g);
  fg_tensor_free(c);
  fg_tensor_free(x);
  free(times);
  return rc;
}

/* ---- MLP training step: dense layers, ReLU, softmax cross-entropy, SGD --- */

typedef struct mlp_shape {
  const char *name;
  int batch;
  int n_layers; /* dense layers; widths has n_layers + 1 entries */
  int widths[4];
  int runs, warmup;
} mlp_shape;

static const mlp_shape MLP_SMALL = {"mlp_small_train", 32, 3, {64, 128, 128, 10}, 400, 40};
static const mlp_shape MLP_MEDIUM = {"mlp_medium_train", 128, 3, {784, 512, 512, 10}, 60, 6};
static const mlp_shape MLP_LARGE = {"mlp_large_train", 256, 3, {1024, 2048, 2048, 1000}, 8, 2};

/* Matmul FLOPs of one step; with_first_dx adds the first layer's unneeded dX
 * (the 3x convention). */
static double mlp_flops(const mlp_shape *m, int with_first_dx) {
  double f = 0;
  for (int l = 0; l < m->n_layers; l++) {
    double mnk2 = 2.0 * m->batch * (double)m->widths[l] * (double)m->widths[l + 1];
    f += (l > 0 || with_first_dx ? 3.0 : 2.0) * mnk2;
  }
  return f;
}

/* The training graph of `m` (bench_common.h); the step's target is named
 * "train". */
static fg_graph *build_mlp(const mlp_shape *m, fg_status *st) {
  fg_output train;
  fg_graph *g = mlp_graph(m->batch, m->n_layers, m->widths, &train, st);
  if (!g) return NULL;
  fg_set_name(g, train, "train");
  if (fg_graph_status(g, st) != FG_OK) {
    fg_graph_free(g);
    return NULL;
  }
  return g;
}

/* Plain cblas_sgemm C = A B with n x n x n, OpenBLAS on every core: the
 * machine's practical matmul peak. Returns GFLOP/s (0 on failure) and prints
 * its own FG line. */
static double sgemm_gflops(int n, int runs, int warmup) {
  size_t nn = (size_t)n * (size_t)n;
  float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = calloc(nn, sizeof *c);
  double *times = calloc((size_t)runs, sizeof *times);
  double gflops = 0;
  if (!a || !b || !c || !times) {
    fprintf(stderr, "fg_bench: sgemm: out of memory\n");
    goto done;
  }
  uint64_t rng = 3;
  for (size_t i = 0; i < nn; i++)
    a[i] = uniform(&rng, 1.0), b[i] = uniform(&rng, 1.0);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int saved = openblas_get_num_threads();
  openblas_set_num_threads(cores > 0 ? (int)cores : 1);
  for (int i = 0; i < warmup + runs; i++) {
    double t0 = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    if (i >= warmup) times[i - warmup] = now_s() - t0;
  }
  openblas_set_num_threads(saved);
  char name[32], extra[96];
  gflops = 2.0 * (double)n * n * n / median(times, runs) / 1e9;
  snprintf(name, sizeof name, "sgemm_%d", n);
  snprintf(extra, sizeof extra, "gflops=%.4g blas_threads=%ld", gflops, cores);
  print_line(name, times, runs, (int)cores, extra);
done:
  free(a);
  free(b);
  free(c);
  free(times);
  return gflops;
}

#define SGEMM_N 2048

/* The step's matmuls alone (forward, dW = X^T dY, dX = dY W^T but for the
 * first layer), as direct cblas_sgemm calls on every core: the time a step
 * would take if everything else were free. Median of `runs` after one
 * warm-up; -1 when out of memory. */
static double mlp_blas_only_s(const mlp_shape *m, int runs) {
  size_t mx = 0, wmax = 0, gmax = 0, omax = 0, bt = (size_t)m->batch;
  for (int l = 0; l < m->n_layers; l++) {
    size_t k = (size_t)m->widths[l], n = (size_t)m->widths[l + 1];
    mx = bt * k > mx ? bt * k : mx;
    wmax = k * n > wmax ? k * n : wmax;
    gmax = bt * n > gmax ? bt * n : gmax;
  }
  omax = mx > wmax ? mx : wmax;
  omax = gmax > omax ? gmax : omax;
  float *x = calloc(mx, sizeof *x), *w = calloc(wmax, sizeof *w), *gr = calloc(gmax, sizeof *gr),
        *o = calloc(omax, sizeof *o);
  double *times = calloc((size_t)runs, sizeof *times), result = -1;
  if (!x || !w || !gr || !o || !times) goto done;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int saved = openblas_get_num_threads();
  openblas_set_num_threads(cores > 0 ? (int)cores : 1);
  const int bm = m->batch;
  for (int r = 0; r < runs + 1; r++) {
    double t0 = now_s();
    for (int l = 0; l < m->n_layers; l++) {
      int k = m->widths[l], n = m->widths[l + 1];
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, bm, n, k, 1.0f, x, k, w, n, 0.0f, o,
                  n);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k, n, bm, 1.0f, x, k, gr, n, 0.0f, o, n);
      if (l > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, bm, k, n, 1.0f, gr, n, w, n, 0.0f, o,
                    k);
    }
    if (r > 0) times[r - 1] = now_s() - t0;
  }
  openblas_set_num_threads(saved);
  result = median(times, runs);
done:
  free(x);
  free(w);
  free(gr);
  free(o);
  free(times);
  return result;
}

/* The fixed batch of `m`: x uniform in +-1, then labels, from one stream. */
static void mlp_batch(const mlp_shape *m, fg_tensor **x, fg_tensor **y, fg_status *st) {
  uint64_t rng = 11;
  int64_t xd[2] = {m->batch, m->widths[0]}, yd[1] = {m->batch};
  *x = random_f32(2, xd, 1.0, &rng, st);
  *y = fg_tensor_new(FG_I32, 1, yd, st);
  if (!*x || !*y) return;
  int32_t *yp = fg_tensor_data(*y);
  int classes = m->widths[m->n_layers];
  for (int i = 0; i < m->batch; i++)
    yp[i] = (int32_t)(splitmix64(&rng) % (uint64_t)classes);
}

/* Times the "train" step of s on the batch; the loss on it before and after
 * the steps must fall, a cheap guard against an executor that skips the
 * update. 0 or -1 (status set). */
static int mlp_time(fg_session *s, const fg_feed *feeds, int warmup, int runs, double *times,
                    double *loss0, double *loss1, fg_status *st) {
  const char *target = "train", *loss_name = "loss";
  bench_run r = {s, feeds, 2, NULL, 0, &target, 1};
  bench_run probe = {s, feeds, 2, &loss_name, 1, NULL, 0};
  if (fetch_scalar(&probe, loss0, st) != 0 || time_runs(&r, warmup, runs, times, st) != 0 ||
      fetch_scalar(&probe, loss1, st) != 0)
    return -1;
  return 0;
}

static int case_mlp(const mlp_shape *m, const bench_opts *bo, int with_sgemm, fg_status *st) {
  int runs = pick(bo->runs, m->runs), warmup = pick(bo->warmup, m->warmup);
  fg_graph *g = build_mlp(m, st);
  if (!g) return fail(m->name, st);
  /* For `flowgraph profile` (feeds x and y, target train). */
  if (bo->save && fg_graph_save(g, bo->save, st) != 0) {
    fg_graph_free(g);
    return fail(m->name, st);
  }
  fg_tensor *x = NULL, *y = NULL;
  mlp_batch(m, &x, &y, st);
  double *times = calloc((size_t)runs, sizeof *times);
  fg_session *s = NULL;
  int rc = 1;
  if (!x || !y || !times) {
    fprintf(stderr, "fg_bench: out of memory\n");
    goto done;
  }
  if (!(s = open_session(g, bo->threads, st))) {
    rc = fail(m->name, st);
    goto done;
  }
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  double loss0 = 0, loss1 = 0;
  if (mlp_time(s, feeds, warmup, runs, times, &loss0, &loss1, st) != 0) {
    rc = fail(m->name, st);
    goto done;
  }
  const char *target = "train";
  fg_plan_info *info = fg_session_plan_info(s, feeds, 2, NULL, 0, &target, 1, st);
  size_t arena = info ? info->arena_bytes : 0;
  fg_plan_info_free(info);
  /* The session's pool and arena go before the sgemm runs alone. */
  fg_session_free(s);
  s = NULL;
  double flops = mlp_flops(m, 0), flops_3x = mlp_flops(m, 1), med = median(times, runs);
  char extra[384];
  int len = snprintf(extra, sizeof extra,
                     "flops=%.6g flops_3x=%.6g gflops=%.4g loss_first=%.6g loss_last=%.6g "
                     "arena_bytes=%zu",
                     flops, flops_3x, flops / med / 1e9, loss0, loss1, arena);
  double blas_s = mlp_blas_only_s(m, runs);
  if (blas_s > 0)
    len += snprintf(extra + len, sizeof extra - (size_t)len,
                    " blas_only_s=%.6g blas_only_gflops=%.4g", blas_s, flops / blas_s / 1e9);
  if (with_sgemm && len < (int)sizeof extra) {
    double peak = sgemm_gflops(SGEMM_N, 5, 1);
    if (peak > 0)
      snprintf(extra + len, sizeof extra - (size_t)len, " sgemm_gflops=%.4g fraction=%.4f", peak,
               flops / med / 1e9 / peak);
  }
  print_line(m->name, times, runs, bo->threads, extra);
  rc = 0;
done:
  fg_session_free(s);
  fg_graph_free(g);
  fg_tensor_free(x);
  fg_tensor_free(y);
  free(times);
  return rc;
}

/* ---- check_numerics: mlp_medium_train with the NaN/Inf scan off and on ----- */

/* Two sessions on one graph, one with check_numerics; blocks of runs
 * alternate between them so that drift (frequency, other load) hits both. */
static int case_check_numerics(const bench_opts *bo, fg_status *st) {
  const mlp_shape *m = &MLP_MEDIUM;
  int runs = pick(bo->runs, m->runs), warmup = pick(bo->warmup, m->warmup), block = 5;
  uint64_t rng = 11;
  int64_t xd[2] = {m->batch, m->widths[0]}, yd[1] = {m->batch};
  fg_graph *g = build_mlp(m, st);
  if (!g) return fail("check_numerics", st);
  fg_tensor *x = random_f32(2, xd, 1.0, &rng, st), *y = fg_tensor_new(FG_I32, 1, yd, st);
  double *times[2] = {calloc((size_t)runs, sizeof(double)), calloc((size_t)runs, sizeof(double))};
  fg_session *s[2] = {NULL, NULL};
  int rc = 1;
  if (!x || !y || !times[0] || !times[1]) {
    fprintf(stderr, "fg_bench: out of memory\n");
    goto done;
  }
  int32_t *yp = fg_tensor_data(y);
  for (int i = 0; i < m->batch; i++)
    yp[i] = (int32_t)(splitmix64(&rng) % (uint64_t)m->widths[m->n_layers]);
  for (int k = 0; k < 2; k++) {
    fg_session_options o;
    fg_session_options_init(&o);
    o.num_threads = bo->threads;
    o.check_numerics = k;
    if (!(s[k] = fg_session_new(g, &o, st))) {
      rc = fail("check_numerics", st);
      goto done;
    }
  }
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *target = "train";
  for (int done_runs = 0, first = 1; done_runs < runs; first = 0) {
    int n = runs - done_runs < block ? runs - done_runs : block;
    for (int k = 0; k < 2; k++) {
      bench_run r = {s[k], feeds, 2, NULL, 0, &target, 1};
      if (time_runs(&r, first ? warmup : 0, n, times[k] + done_runs, st) != 0) {
        rc = fail("check_numerics", st);
        goto done;
      }
    }
    done_runs += n;
  }
  double off = median(times[0], runs), on = median(times[1], runs);
  /* What the check scans per step: every node's outputs (f32 here). */
  fg_run_options ro = {1};
  fg_run_metadata *md = NULL;
  double scanned = 0;
  if (fg_session_run_ex(s[0], feeds, 2, NULL, 0, NULL, &target, 1, &ro, &md, st) == 0 && md)
    for (int i = 0; i < md->n_nodes; i++)
      scanned += (double)md->nodes[i].output_bytes;
  fg_run_metadata_free(md);
  char extra[256];
  snprintf(extra, sizeof extra,
           "off_median_s=%.9g off_min_s=%.9g overhead=%.4f overhead_min=%.4f scanned_bytes=%.0f",
           off, min_of(times[0], runs), on / off, min_of(times[1], runs) / min_of(times[0], runs),
           scanned);
  print_line("check_numerics", times[1], runs, bo->threads, extra);
  rc = 0;
done:
  for (int k = 0; k < 2; k++) {
    fg_session_free(s[k]);
    free(times[k]);
  }
  fg_graph_free(g);
  fg_tensor_free(x);
  fg_tensor_free(y);
  return rc;
}

/* ---- wide_graph: 8 independent x @ w_i, summed by a balanced tree -------- */

#define WIDE_BRANCHES 8
#define WIDE_M        256
#define WIDE_K        512
#define WIDE_N        512

static int case_wide(const bench_opts *bo, fg_status *st) {
  int runs = pick(bo->runs, 30), warmup = pick(bo->warmup, 3);
  uint64_t rng = 5;
  int64_t xd[2] = {WIDE_M, WIDE_K}, wd[2] = {WIDE_K, WIDE_N};
  fg_graph *g = fg_graph_new();
  fg_tensor *x = random_f32(2, xd, 1.0, &rng, st);
  double *t1 = calloc((size_t)runs, sizeof *t1), *t2 = calloc((size_t)runs, sizeof *t2);
  fg_session *s1 = NULL, *s2 = NULL;
  int rc = 1;
  if (!g || !x || !t1 || !t2) {
    fprintf(stderr, "fg_bench: out of memory\n");
    goto done;
  }
  fg_output xin = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output level[WIDE_BRANCHES];
  for (int i = 0; i < WIDE_BRANCHES; i++) {
    fg_tensor *w = random_f32(2, wd, 1.0 / sqrt((double)WIDE_K), &rng, st);
    char name[16];
    snprintf(name, sizeof name, "w%d", i);
    level[i] = fg_matmul(g, xin, fg_constant(g, name, w), 0, 0);
    fg_tensor_free(w);
  }
  for (int n = WIDE_BRANCHES; n > 1; n /= 2)
    for (int i = 0; i < n / 2; i++)
      level[i] = fg_add(g, level[2 * i], level[2 * i + 1]);
  fg_set_name(g, level[0], "sum");
  if (!(s1 = open_session(g, 1, st)) || !(s2 = open_session(g, 2, st))) {
    rc = fail("wide_graph: session", st);
    goto done;
  }
  fg_feed feed = {"x", x};
  const char *fetch = "sum";
  bench_run r1 = {s1, &feed, 1, &fetch, 1, NULL, 0}, r2 = {s2, &feed, 1, &fetch, 1, NULL, 0};
  if (time_runs(&r1, warmup, 0, NULL, st) != 0 || time_runs(&r2, warmup, 0, NULL, st) != 0) {
    rc = fail("wide_graph: run", st);
    goto done;
  }
  /* Alternating, so drift in the machine's load hits both alike. */
  for (int i = 0; i < runs; i++) {
    if (time_runs(&r1, 0, 1, &t1[i], st) != 0 || time_runs(&r2, 0, 1, &t2[i], st) != 0) {
      rc = fail("wide_graph: run", st);
      goto done;
    }
  }
  double flops = 2.0 * WIDE_BRANCHES * WIDE_M * (double)WIDE_K * WIDE_N;
  double m1 = median(t1, runs), m2 = median(t2, runs);
  char extra[192];
  snprintf(extra, sizeof extra, "t1_median_s=%.9g t2_median_s=%.9g speedup=%.4f flops=%.6g", m1, m2,
           m1 / m2, flops);
  print_line("wide_graph", t2, runs, 2, extra);
  rc = 0;
done:
  fg_session_free(s1);
  fg_session_free(s2);
  fg_graph_free(g);
  fg_tensor_free(x);
  free(t1);
  free(t2);
  return rc;
}

/* ---- mlp_large_infer_b1: the large MLP's forward at batch 1 ---------------- */

/* At batch 1 each layer is a matrix-vector product that reads its weights
 * once, so the floor is the time to read them: the case times the forward
 * at 1 and 2 threads and, in the same rounds, a plain sum over the same
 * weights on 1 and 2 threads. Each session holds its own copy of the
 * weights, and each thread count's read sums a copy of its own (the values
 * fetched from its session), so the forward and the read of a round each
 * read 33 MB that the other does not touch: neither finds its data fresher
 * in the caches than the other. */

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define READ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define READ_CLONES
#endif
#define READ_LANES 64 /* four AVX-512 registers of partial sums */

READ_CLONES static float sum_floats(const float *p, int64_t n) {
  float lane[READ_LANES] = {0};
  int64_t i = 0;
  for (; i + READ_LANES <= n; i += READ_LANES)
    for (int l = 0; l < READ_LANES; l++)
      lane[l] += p[i + l];
  float s = 0;
  for (int l = 0; l < READ_LANES; l++)
    s += lane[l];
  for (; i < n; i++)
    s += p[i];
  return s;
}

#define READ_MAX_BUFS 8

/* The buffers one read sums. */
typedef struct read_job {
  const float *bufs[READ_MAX_BUFS];
  int64_t lens[READ_MAX_BUFS];
  int n_bufs;
} read_job;

/* The sum of part `part` of `parts` of every buffer of j. */
static double read_part(const read_job *j, int part, int parts) {
  double s = 0;
  for (int b = 0; b < j->n_bufs; b++) {
    const int64_t i0 = j->lens[b] * part / parts, i1 = j->lens[b] * (part + 1) / parts;
    s += sum_floats(j->bufs[b] + i0, i1 - i0);
  }
  return s;
}

/* A second thread for the 2-thread read, woken through a barrier as the
 * session's pool wakes its workers (a futex), so both pay a wake-up. */
typedef struct reader {
  const read_job *job;
  pthread_t th;
  pthread_barrier_t start, end;
  int stop;
  double sum;
} reader;

static void *reader_main(void *arg) {
  reader *r = arg;
  for (;;) {
    pthread_barrier_wait(&r->start);
    if (r->stop) return NULL;
    r->sum = read_part(r->job, 1, 2);
    pthread_barrier_wait(&r->end);
  }
}

/* One timed read of j on 1 or 2 threads; the sum goes into *sink so it is
 * kept. */
static double timed_read(reader *r, const read_job *j, int threads, double *sink) {
  r->job = j;
  const double t0 = now_s();
  if (threads == 1) {
    *sink += read_part(r->job, 0, 1);
  } else {
    pthread_barrier_wait(&r->start);
    const double s = read_part(r->job, 0, 2);
    pthread_barrier_wait(&r->end);
    *sink += s + r->sum;
  }
  return now_s() - t0;
}

/* The session's weights and biases, fetched (copies of the same values). */
static int infer_weights(fg_session *s, int n_layers, fg_tensor **t, read_job *j, fg_status *st) {
  j->n_bufs = 0;
  for (int l = 0; l < n_layers && 2 * l + 1 < READ_MAX_BUFS; l++)
    for (int k = 0; k < 2; k++) {
      char name[32];
      snprintf(name, sizeof name, "dense%d/%c", l + 1, k ? 'b' : 'w');
      if (!(t[j->n_bufs] = fg_session_variable(s, name, st))) return -1;
      j->bufs[j->n_bufs] = fg_tensor_data(t[j->n_bufs]);
      j->lens[j->n_bufs] = fg_tensor_num_elements(t[j->n_bufs]);
      j->n_bufs++;
    }
  return 0;
}

/* The forward graph of m's layers at batch 1: "x" [1, widths[0]] to
 * "logits". */
static fg_graph *infer_graph(const mlp_shape *m, fg_status *st) {
  fg_graph *g = fg_graph_new();
  if (!g) return NULL;
  int64_t xd[2] = {1, m->widths[0]};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_set_name(g, mlp_layers(g, x, m->n_layers, m->widths, NULL, st), "logits");
  if (fg_graph_status(g, st) != FG_OK) {
    fg_graph_free(g);
    return NULL;
  }
  return g;
}

#define INFER_BLOCK  25     /* rounds of one thread count before the other's */
#define INFER_GAP_NS 200000 /* between a forward and the read after it */

/* times[k] for k = forward on 1 thread, on 2, read on 1, on 2. A round
 * times the forward and the read at one thread count, each over its own
 * weights; blocks of rounds alternate between 1 and 2 threads, so drift in
 * the machine's load hits all four alike while the data a round reads (two
 * copies of the weights) stays what one thread count uses. */
static int infer_rounds(fg_session **s, const fg_feed *feed, reader *rd, const read_job *jobs,
                        int warmup, int runs, double **times, double *sink, fg_status *st) {
  const char *fetch = "logits";
  bench_run r[2] = {{s[0], feed, 1, &fetch, 1, NULL, 0}, {s[1], feed, 1, &fetch, 1, NULL, 0}};
  const int blocks = 2 * ((runs + INFER_BLOCK - 1) / INFER_BLOCK);
  for (int b = 0; b < blocks; b++) {
    const int k = b % 2, i0 = b / 2 * INFER_BLOCK;
    const int n = runs - i0 < INFER_BLOCK ? runs - i0 : INFER_BLOCK;
    for (int i = 0; i < (b < 2 ? warmup : 0); i++) {
      if (time_runs(&r[k], 1, 0, NULL, st) != 0) return -1;
      timed_read(rd, &jobs[k], 1 + k, sink);
    }
    for (int i = i0; i < i0 + n; i++) {
      if (time_runs(&r[k], 0, 1, &times[k][i], st) != 0) return -1;
      /* The session's idle threads spin a while for more work before they
       * sleep (executor/threadpool.c); the read must not share a core with
       * them. */
      nanosleep(&(struct timespec){0, INFER_GAP_NS}, NULL);
      times[2 + k][i] = timed_read(rd, &jobs[k], 1 + k, sink);
    }
  }
  return 0;
}

static void infer_print(double **times, int runs, const read_job *j, double sink) {
  double med[4];
  for (int k = 0; k < 4; k++)
    med[k] = median(times[k], runs);
  double bytes = 0;
  for (int b = 0; b < j->n_bufs; b++)
    bytes += 4.0 * (double)j->lens[b];
  char extra[384];
  snprintf(extra, sizeof extra,
           "t1_s=%.9g t2_s=%.9g read1_s=%.9g read2_s=%.9g over_read1=%.4f over_read2=%.4f "
           "weight_bytes=%.0f read1_gbs=%.4g read2_gbs=%.4g checksum=%.6g",
           med[0], med[1], med[2], med[3], med[0] / med[2], med[1] / med[3], bytes,
           bytes / med[2] / 1e9, bytes / med[3] / 1e9, sink);
  print_line("mlp_large_infer_b1", times[0], runs, 1, extra);
}

static int case_infer_b1(const bench_opts *bo, fg_status *st) {
  const mlp_shape *m = &MLP_LARGE;
  int runs = pick(bo->runs, 200), warmup = pick(bo->warmup, 20);
  uint64_t rng = 11;
  int64_t xd[2] = {1, m->widths[0]};
  fg_graph *g = infer_graph(m, st);
  fg_tensor *x = random_f32(2, xd, 1.0, &rng, st), *w[2][READ_MAX_BUFS] = {{NULL}};
  double *times[4] = {NULL};
  fg_session *s[2] = {NULL, NULL};
  reader rd = {0};
  read_job jobs[2];
  int rc = 1, started = 0;
  for (int k = 0; k < 4; k++)
    times[k] = calloc((size_t)runs, sizeof(double));
  if (!g || !x || !times[0] || !times[1] || !times[2] || !times[3]) {
    rc = fail("mlp_large_infer_b1: setup", st);
    goto done;
  }
  if (!(s[0] = open_session(g, 1, st)) || !(s[1] = open_session(g, 2, st)) ||
      infer_weights(s[0], m->n_layers, w[0], &jobs[0], st) != 0 ||
      infer_weights(s[1], m->n_layers, w[1], &jobs[1], st) != 0) {
    rc = fail("mlp_large_infer_b1: session", st);
    goto done;
  }
  pthread_barrier_init(&rd.start, NULL, 2);
  pthread_barrier_init(&rd.end, NULL, 2);
  if (pthread_create(&rd.th, NULL, reader_main, &rd) != 0) {
    fprintf(stderr, "fg_bench: mlp_large_infer_b1: no thread\n");
    goto done;
  }
  started = 1;
  fg_feed feed = {"x", x};
  double sink = 0;
  if (infer_rounds(s, &feed, &rd, jobs, warmup, runs, times, &sink, st) != 0) {
    rc = fail("mlp_large_infer_b1: run", st);
    goto done;
  }
  infer_print(times, runs, &jobs[0], sink);
  rc = 0;
done:
  if (started) {
    rd.stop = 1;
    pthread_barrier_wait(&rd.start);
    pthread_join(rd.th, NULL);
  }
  for (int k = 0; k < READ_MAX_BUFS; k++) {
    fg_tensor_free(w[0][k]);
    fg_tensor_free(w[1][k]);
  }
  for (int k = 0; k < 4; k++)
    free(times[k]);
  fg_session_free(s[0]);
  fg_session_free(s[1]);
  fg_graph_free(g);
  fg_tensor_free(x);
  return rc;
}

/* ---- main ---------------------------------------------------------------- */

static int usage(void) {
  fprintf(stderr, "usage: fg_bench CASE [--runs N] [--warmup N] [--threads N] [--save OUT.fgb]\n"
                  "CASE: op_overhead mlp_small_train mlp_medium_train mlp_large_train wide_graph\n"
                  "      mlp_large_infer_b1 sgemm all check_numerics blas_core\n");
  return 2;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  const char *which = argv[1];
  bench_opts bo = {-1, -1, 0, NULL};
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--save") && i + 1 < argc) {
      bo.save = argv[++i];
      continue;
    }
    int *dst = !strcmp(argv[i], "--runs")      ? &bo.runs
               : !strcmp(argv[i], "--warmup")  ? &bo.warmup
               : !strcmp(argv[i], "--threads") ? &bo.threads
                                               : NULL;
    int lo = dst == &bo.runs ? 1 : 0;
    if (!dst || i + 1 >= argc || parse_int(argv[++i], lo, 1000000, dst) != 0) return usage();
  }
  fg_status *st = fg_status_new();
  if (!st) return 1;
  int all = !strcmp(which, "all"), known = all, rc = 0;
#define CASE(name, call)                                                                           \
  if (all || !strcmp(which, name)) {                                                               \
    known = 1;                                                                                     \
    rc |= (call);                                                                                  \
  }
  CASE("op_overhead", case_op_overhead(&bo, st));
  CASE("mlp_small_train", case_mlp(&MLP_SMALL, &bo, 0, st));
  CASE("mlp_medium_train", case_mlp(&MLP_MEDIUM, &bo, 0, st));
  CASE("mlp_large_train", case_mlp(&MLP_LARGE, &bo, 1, st));
  CASE("wide_graph", case_wide(&bo, st));
  CASE("mlp_large_infer_b1", case_infer_b1(&bo, st));
#undef CASE
  if (!strcmp(which, "check_numerics")) {
    known = 1;
    rc |= case_check_numerics(&bo, st);
  }
  if (!strcmp(which, "blas_core")) {
    known = 1;
    printf("FG blas_core core=%s\n", openblas_get_corename());
  }
  if (!strcmp(which, "sgemm")) {
    known = 1;
    rc |= sgemm_gflops(SGEMM_N, pick(bo.runs, 5), pick(bo.warmup, 1)) > 0 ? 0 : 1;
  }
  fg_status_free(st);
  if (!known) return usage();
  return rc;
}
