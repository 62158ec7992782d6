/* The CNN benchmark driver: builds one network of bench/cnn_models.h and
 * times it.
 *
 *   fg_bench_cnn CASE [--runs N] [--warmup N] [--threads N] [--save OUT.fgb]
 *
 * CASE is cnn_small_train (LeNet-5, batch 64, SGD), resnet18_cifar_train
 * (ResNet-18 on 3x32x32, batch 32, SGD with momentum, batch norm in
 * training mode), resnet18_infer_b1 or resnet18_infer_b8 (ResNet-18 on
 * 3x224x224, batch norm on the running statistics), or
 * gpu_resnet18_cifar_train (the CIFAR step on cuda:0; "FG <case> skipped:
 * no GPU" where there is none). One case per process,
 * so that the peak resident memory it prints is that case's alone. It
 * prints one line that bench/compare_torch_cnn.py parses:
 *
 *   FG <case> median_s=... min_s=... runs=N threads=T arena_bytes=...
 *      lower_bound_bytes=... weights_bytes=... maxrss_kb=... gflops=...
 *
 * arena_bytes is the plan's arena and lower_bound_bytes the peak of live
 * intermediate bytes over its schedule (fg_plan_info). gflops counts the
 * convolutions and matmuls only (cnn_models.h says which). --save writes
 * the case's graph, for `flowgraph plan` and `flowgraph profile`. */
#include <flowgraph/flowgraph.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench_common.h"
#include "cnn_models.h"

typedef struct cnn_case {
  const char *name;
  int64_t batch;
  int resnet, side, classes, cifar, train;
  int runs, warmup;
  const char *device; /* NULL: the CPU */
} cnn_case;

static const cnn_case CASES[] = {
    {"cnn_small_train", 64, 0, 28, 10, 0, 1, 200, 20, NULL},
    {"resnet18_cifar_train", 32, 1, 32, 10, 1, 1, 8, 2, NULL},
    {"resnet18_infer_b1", 1, 1, 224, 1000, 0, 0, 20, 3, NULL},
    {"resnet18_infer_b8", 8, 1, 224, 1000, 0, 0, 6, 2, NULL},
    /* bench/compare_torch_gpu.py: TF32 off on both sides, as the session's
     * default; the batch in page-locked memory, as torch's pin_memory(). */
    {"gpu_resnet18_cifar_train", 32, 1, 32, 10, 1, 1, 30, 5, "cuda:0"},
};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int fail(const char *what, fg_status *st) {
  fprintf(stderr, "fg_bench_cnn: %s: %s: %s\n", what, fg_code_name(fg_status_code(st)),
          fg_status_message(st));
  return 1;
}

/* The feeds: "x" uniform in +-1, labels "y" for training, and the
 * training flag where the network has batch norm. */
typedef struct feeds {
  fg_tensor *x, *y, *mode;
  fg_feed f[3];
  int n;
} feeds;

static int make_feeds(const cnn_case *c, feeds *fd, fg_status *st) {
  uint64_t rng = 11;
  int64_t xd[4] = {c->batch, c->resnet ? 3 : 1, c->side, c->side};
  fd->x = c->device ? fg_tensor_new_pinned(FG_F32, 4, xd, st) : fg_tensor_new(FG_F32, 4, xd, st);
  if (!fd->x) return -1;
  float *x = fg_tensor_data(fd->x);
  for (int64_t i = 0; i < fg_tensor_num_elements(fd->x); i++)
    x[i] = uniform(&rng, 1.0);
  fd->f[fd->n++] = (fg_feed){"x", fd->x};
  if (c->train) {
    int64_t yd[1] = {c->batch};
    fd->y = fg_tensor_new(FG_I32, 1, yd, st);
    if (!fd->y) return -1;
    int32_t *y = fg_tensor_data(fd->y);
    for (int64_t i = 0; i < c->batch; i++)
      y[i] = (int32_t)(splitmix64(&rng) % (uint64_t)c->classes);
    fd->f[fd->n++] = (fg_feed){"y", fd->y};
  }
  if (c->resnet) {
    fd->mode = fg_tensor_new(FG_BOOL, 0, NULL, st);
    if (!fd->mode) return -1;
    *(uint8_t *)fg_tensor_data(fd->mode) = (uint8_t)c->train;
    fd->f[fd->n++] = (fg_feed){"training", fd->mode};
  }
  return 0;
}

static int run_once(fg_session *s, const cnn_case *c, const feeds *fd, fg_status *st) {
  const char *target = "train", *fetch = "logits";
  if (c->train) return fg_session_run(s, fd->f, fd->n, NULL, 0, NULL, &target, 1, st);
  fg_tensor *out = NULL;
  int rc = fg_session_run(s, fd->f, fd->n, &fetch, 1, &out, NULL, 0, st);
  fg_tensor_free(out);
  return rc;
}

/* Prints the case's FG line; 0, or 1 after printing why. */
static int report(const cnn_case *c, const cnn_model *m, fg_session *s, const feeds *fd,
                  double *times, int runs, int threads, fg_status *st) {
  const char *target = "train", *fetch = "logits";
  fg_plan_info *info = c->train ? fg_session_plan_info(s, fd->f, fd->n, NULL, 0, &target, 1, st)
                                : fg_session_plan_info(s, fd->f, fd->n, &fetch, 1, NULL, 0, st);
  if (!info) return fail("plan info", st);
  qsort(times, (size_t)runs, sizeof *times, cmp_double);
  double med = runs % 2 ? times[runs / 2] : 0.5 * (times[runs / 2 - 1] + times[runs / 2]);
  double flops = c->train ? 3.0 * m->forward_flops - m->stem_flops : m->forward_flops;
  printf("FG %s median_s=%.6g min_s=%.6g runs=%d threads=%d arena_bytes=%zu "
         "lower_bound_bytes=%zu weights_bytes=%lld maxrss_kb=%ld gflops=%.4g\n",
         c->name, med, times[0], runs, threads, info->arena_bytes, info->lower_bound_bytes,
         (long long)m->n_weights * 4, peak_rss_kb(), flops / med / 1e9);
  fg_plan_info_free(info);
  return 0;
}

static int run_case(const cnn_case *c, int runs, int warmup, int threads, const char *save,
                    fg_status *st) {
  cnn_model m = {0};
  int rc = c->resnet ? cnn_resnet18(c->batch, c->side, c->classes, c->cifar, c->train, &m, st)
                     : cnn_lenet(c->batch, &m, st);
  if (rc != 0) return fail("building the network", st);
  if (save && fg_graph_save(m.g, save, st) != 0) {
    fg_graph_free(m.g);
    return fail("saving", st);
  }
  feeds fd = {0};
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  o.device = c->device;
  if (c->device && fg_cuda_device_count() < 1) {
    printf("FG %s skipped: no GPU\n", c->name);
    fg_graph_free(m.g);
    return 0;
  }
  fg_session *s = make_feeds(c, &fd, st) == 0 ? fg_session_new(m.g, &o, st) : NULL;
  double *times = calloc((size_t)runs, sizeof *times);
  rc = 1;
  if (!s || !times) {
    fail("session", st);
    goto done;
  }
  for (int i = 0; i < warmup + runs; i++) {
    double t0 = now_s();
    if (run_once(s, c, &fd, st) != 0) {
      fail(c->name, st);
      goto done;
    }
    if (i >= warmup) times[i - warmup] = now_s() - t0;
  }
  rc = report(c, &m, s, &fd, times, runs, threads, st);
done:
  free(times);
  fg_session_free(s);
  fg_tensor_free(fd.x);
  fg_tensor_free(fd.y);
  fg_tensor_free(fd.mode);
  fg_graph_free(m.g);
  return rc;
}

static int usage(void) {
  fprintf(stderr, "usage: fg_bench_cnn CASE [--runs N] [--warmup N] [--threads N] "
                  "[--save OUT.fgb]\nCASE:");
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++)
    fprintf(stderr, " %s", CASES[i].name);
  fprintf(stderr, "\n");
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage();
  int runs = -1, warmup = -1, threads = 0;
  const char *save = NULL;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--save") && i + 1 < argc) {
      save = argv[++i];
      continue;
    }
    int *dst = !strcmp(argv[i], "--runs")      ? &runs
               : !strcmp(argv[i], "--warmup")  ? &warmup
               : !strcmp(argv[i], "--threads") ? &threads
                                               : NULL;
    char *end = NULL;
    long v = (dst && i + 1 < argc) ? strtol(argv[++i], &end, 10) : -1;
    if (!dst || !end || *end || v < 0 || v > 100000 || (dst == &runs && v == 0)) return usage();
    *dst = (int)v;
  }
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    const cnn_case *c = &CASES[i];
    if (strcmp(argv[1], c->name)) continue;
    fg_status *st = fg_status_new();
    int rc =
        run_case(c, runs > 0 ? runs : c->runs, warmup >= 0 ? warmup : c->warmup, threads, save, st);
    fg_status_free(st);
    return rc;
  }
  return usage();
}
