/* The ONNX benchmark driver: imports a model and times its inference.
 *
 *   fg_bench_onnx CASE MODEL.onnx --batch N [--runs N] [--warmup N] [--threads N]
 *
 * Every placeholder is fed uniform values in +-1 (integer ones with 0),
 * with N in place of an unknown leading dimension; every marked output is
 * fetched. One case per process, so that the peak resident memory it
 * prints is that case's alone. It prints one line that
 * bench/compare_torch_onnx.py parses:
 *
 *   FG <case> median_s=... min_s=... runs=N threads=T import_s=...
 *      arena_bytes=... lower_bound_bytes=... maxrss_kb=... file_bytes=...
 *      import_peak_kb=... import_held_kb=...
 *
 * import_s is fg_onnx_load's time (decoding, checks, mapping);
 * import_peak_kb the resident memory it added at its peak (VmHWM after it
 * less VmRSS before it: the import is the process's first large
 * allocation) and import_held_kb what it still holds after (the graph),
 * against the model's file_bytes; arena_bytes
 * is the plan's arena and lower_bound_bytes the peak of live intermediate
 * bytes over its schedule (fg_plan_info). */
#include <flowgraph/flowgraph.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "bench_common.h"

#define MAX_FEEDS 16
#define MAX_FETCH 16

typedef struct model_io {
  fg_tensor *t[MAX_FEEDS];
  fg_feed f[MAX_FEEDS];
  int n_feeds;
  char names[MAX_FETCH][256];
  const char *fetch[MAX_FETCH];
  int n_fetch;
} model_io;

static int fail(const char *what, fg_status *st) {
  fprintf(stderr, "fg_bench_onnx: %s: %s: %s\n", what, fg_code_name(fg_status_code(st)),
          fg_status_message(st));
  return 1;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* A random tensor for placeholder `node`, N for an unknown dimension. */
static fg_tensor *feed_for(const fg_graph *g, int node, int64_t batch, uint64_t *rng,
                           fg_status *st) {
  fg_output o = {node, 0};
  int64_t dims[16];
  int rank = fg_output_shape(g, o, dims);
  if (rank < 0 || rank > 16) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "placeholder %s has no known rank",
                  fg_node_name(g, node));
    return NULL;
  }
  for (int i = 0; i < rank; i++)
    if (dims[i] < 0) dims[i] = batch;
  fg_dtype dt = fg_output_dtype(g, o);
  fg_tensor *t = fg_tensor_new(dt, rank, dims, st);
  if (!t) return NULL;
  if (dt == FG_F32) {
    float *x = fg_tensor_data(t);
    for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
      x[i] = uniform(rng, 1.0);
  } else {
    memset(fg_tensor_data(t), 0, fg_tensor_num_bytes(t));
  }
  return t;
}

static int make_io(const fg_graph *g, int64_t batch, model_io *io, fg_status *st) {
  uint64_t rng = 11;
  for (int i = 0; i < fg_graph_num_nodes(g); i++) {
    if (strcmp(fg_node_op(g, i), "placeholder") != 0) continue;
    if (io->n_feeds == MAX_FEEDS) {
      fg_status_set(st, FG_INVALID_ARGUMENT, "more than %d inputs", MAX_FEEDS);
      return -1;
    }
    fg_tensor *t = feed_for(g, i, batch, &rng, st);
    if (!t) return -1;
    io->t[io->n_feeds] = t;
    io->f[io->n_feeds++] = (fg_feed){fg_node_name(g, i), t};
  }
  for (int k = 0; k < fg_graph_num_outputs(g) && k < MAX_FETCH; k++) {
    fg_output o = fg_graph_output(g, k);
    if (o.index == 0)
      snprintf(io->names[k], sizeof io->names[k], "%s", fg_node_name(g, o.node));
    else
      snprintf(io->names[k], sizeof io->names[k], "%s:%d", fg_node_name(g, o.node), o.index);
    io->fetch[io->n_fetch++] = io->names[k];
  }
  return 0;
}

static int run_once(fg_session *s, const model_io *io, fg_status *st) {
  fg_tensor *out[MAX_FETCH] = {0};
  int rc = fg_session_run(s, io->f, io->n_feeds, io->fetch, io->n_fetch, out, NULL, 0, st);
  for (int k = 0; k < io->n_fetch; k++)
    fg_tensor_free(out[k]);
  return rc;
}

/* What the import cost: its time and resident memory. */
typedef struct import_cost {
  double s;
  long peak_kb, held_kb;
  long long file_bytes;
} import_cost;

static int report(const char *name, fg_session *s, const model_io *io, double *times, int runs,
                  int threads, const import_cost *imp, fg_status *st) {
  fg_plan_info *info =
      fg_session_plan_info(s, io->f, io->n_feeds, io->fetch, io->n_fetch, NULL, 0, st);
  if (!info) return fail("plan info", st);
  qsort(times, (size_t)runs, sizeof *times, cmp_double);
  double med = runs % 2 ? times[runs / 2] : 0.5 * (times[runs / 2 - 1] + times[runs / 2]);
  printf("FG %s median_s=%.6g min_s=%.6g runs=%d threads=%d import_s=%.6g arena_bytes=%zu "
         "lower_bound_bytes=%zu maxrss_kb=%ld file_bytes=%lld import_peak_kb=%ld "
         "import_held_kb=%ld\n",
         name, med, times[0], runs, threads, imp->s, info->arena_bytes, info->lower_bound_bytes,
         peak_rss_kb(), imp->file_bytes, imp->peak_kb, imp->held_kb);
  fg_plan_info_free(info);
  return 0;
}

static int run_case(const char *name, const char *path, int64_t batch, int runs, int warmup,
                    int threads, fg_status *st) {
  import_cost imp = {0};
  struct stat sb;
  imp.file_bytes = stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
  long rss0 = proc_status_kb("VmRSS");
  double t0 = now_s();
  fg_graph *g = fg_onnx_load(path, NULL, st);
  imp.s = now_s() - t0;
  imp.peak_kb = proc_status_kb("VmHWM") - rss0;
  imp.held_kb = proc_status_kb("VmRSS") - rss0;
  if (!g) return fail(path, st);
  model_io io = {0};
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  fg_session *s = make_io(g, batch, &io, st) == 0 ? fg_session_new(g, &o, st) : NULL;
  double *times = calloc((size_t)runs, sizeof *times);
  int rc = 1;
  if (!s || !times) {
    fail("session", st);
    goto done;
  }
  for (int i = 0; i < warmup + runs; i++) {
    double t1 = now_s();
    if (run_once(s, &io, st) != 0) {
      fail(name, st);
      goto done;
    }
    if (i >= warmup) times[i - warmup] = now_s() - t1;
  }
  rc = report(name, s, &io, times, runs, threads, &imp, st);
done:
  free(times);
  fg_session_free(s);
  for (int k = 0; k < io.n_feeds; k++)
    fg_tensor_free(io.t[k]);
  fg_graph_free(g);
  return rc;
}

static int usage(void) {
  fprintf(stderr, "usage: fg_bench_onnx CASE MODEL.onnx --batch N [--runs N] [--warmup N] "
                  "[--threads N]\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 3) return usage();
  int runs = 10, warmup = 2, threads = 0, batch = -1;
  for (int i = 3; i < argc; i++) {
    int *dst = !strcmp(argv[i], "--runs")      ? &runs
               : !strcmp(argv[i], "--warmup")  ? &warmup
               : !strcmp(argv[i], "--threads") ? &threads
               : !strcmp(argv[i], "--batch")   ? &batch
                                               : NULL;
    char *end = NULL;
    long v = (dst && i + 1 < argc) ? strtol(argv[++i], &end, 10) : -1;
    if (!dst || !end || *end || v < 0 || v > 100000 || (dst == &runs && v == 0)) return usage();
    *dst = (int)v;
  }
  if (batch < 1) return usage();
  fg_status *st = fg_status_new();
  int rc = run_case(argv[1], argv[2], batch, runs, warmup, threads, st);
  fg_status_free(st);
  return rc;
}
