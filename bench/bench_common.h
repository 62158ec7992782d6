/* What the benchmark drivers share: the clock, the random numbers and the
 * MLP training graph, so fg_bench (and fg_bench_gpu, which includes it) and
 * dist_bench time and build the same models the same way. Public API only;
 * static inline so a driver that uses part of it compiles warning-free. */
#ifndef FG_BENCH_COMMON_H
#define FG_BENCH_COMMON_H

#include <flowgraph/flowgraph.h>
#include <math.h>
#include <stdint.h>
#include <sys/resource.h>
#include <stdio.h>
#include <time.h>

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A "Key:  N kB" line of /proc/self/status (VmRSS, VmHWM), in KiB; -1
 * where there is none. */
static inline long proc_status_kb(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0 && line[n] == ':') kb = atol(line + n + 1);
  if (f) fclose(f);
  return kb;
}

/* The process's peak resident memory in KiB: VmHWM, the high-water mark
 * of this program's own memory. Not getrusage's ru_maxrss, which Linux
 * carries across fork and exec: a driver started by the Python comparison
 * scripts (PyTorch imported, about 230 MiB) reported the parent's size
 * whatever it used itself. */
static inline long peak_rss_kb(void) {
  long kb = proc_status_kb("VmHWM");
  if (kb < 0) {
    struct rusage ru;
    kb = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
  }
  return kb;
}

static inline uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-bound, bound). */
static inline float uniform(uint64_t *rng, double bound) {
  double u = (double)(splitmix64(rng) >> 40) * 0x1p-24;
  return (float)((2.0 * u - 1.0) * bound);
}

static inline fg_tensor *random_f32(int rank, const int64_t *dims, double bound, uint64_t *rng,
                                    fg_status *st) {
  fg_tensor *t = fg_tensor_new(FG_F32, rank, dims, st);
  if (!t) return NULL;
  float *p = fg_tensor_data(t);
  for (int64_t i = 0, n = fg_tensor_num_elements(t); i < n; i++)
    p[i] = uniform(rng, bound);
  return t;
}

/* The MLP's dense layers (matmul + bias, ReLU between them) on h, added to
 * g: weights and biases "dense<l>/w" and "dense<l>/b" start uniform in
 * +-1/sqrt(fan_in), as PyTorch's nn.Linear, from a fixed seed. devices
 * (NULL: none) places layer l's ops on devices[l]. Returns the logits; a
 * failure sticks on the graph. */
static inline fg_output mlp_layers(fg_graph *g, fg_output h, int n_layers, const int *widths,
                                   const char *const *devices, fg_status *st) {
  uint64_t rng = 42;
  for (int l = 0; l < n_layers; l++) {
    int in = widths[l], out = widths[l + 1];
    int64_t wd[2] = {in, out}, bd[1] = {out};
    double bound = 1.0 / sqrt((double)in);
    fg_tensor *w = random_f32(2, wd, bound, &rng, st);
    fg_tensor *b = random_f32(1, bd, bound, &rng, st);
    char wname[32], bname[32];
    snprintf(wname, sizeof wname, "dense%d/w", l + 1);
    snprintf(bname, sizeof bname, "dense%d/b", l + 1);
    /* A NULL tensor makes the builder fail, which sticks on the graph. */
    fg_output mm = fg_matmul(g, h, fg_variable(g, wname, w), 0, 0);
    if (devices) fg_set_device(g, mm, devices[l]);
    h = fg_add(g, mm, fg_variable(g, bname, b));
    if (devices) fg_set_device(g, h, devices[l]);
    if (l + 1 < n_layers) h = fg_relu(g, h);
    if (devices && l + 1 < n_layers) fg_set_device(g, h, devices[l]);
    fg_tensor_free(w);
    fg_tensor_free(b);
  }
  return h;
}

/* The MLP training graph: mlp_layers from placeholder "x" [batch,
 * widths[0]], softmax cross-entropy "loss" against i32 labels "y" [batch],
 * one SGD step (learning rate 0.01) whose target goes to *train. batch may
 * be FG_DIM_UNKNOWN. devices (NULL: none) places layer l's ops on
 * devices[l], the loss with the last layer (model parallelism). NULL on
 * failure (status set). */
static inline fg_graph *mlp_graph_on(int64_t batch, int n_layers, const int *widths,
                                     const char *const *devices, fg_output *train, fg_status *st) {
  fg_graph *g = fg_graph_new();
  if (!g) return NULL;
  int64_t xd[2] = {batch, widths[0]}, yd[1] = {batch};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output labels = fg_placeholder(g, "y", FG_I32, 1, yd);
  fg_output h = mlp_layers(g, x, n_layers, widths, devices, st);
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, h, labels), "loss");
  if (devices) fg_set_device(g, loss, devices[n_layers - 1]);
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = 0.01;
  *train = fg_minimize(g, loss, NULL, 0, &cfg, st);
  if (train->node < 0 || fg_graph_status(g, st) != FG_OK) {
    fg_graph_free(g);
    return NULL;
  }
  return g;
}

static inline fg_graph *mlp_graph(int64_t batch, int n_layers, const int *widths, fg_output *train,
                                  fg_status *st) {
  return mlp_graph_on(batch, n_layers, widths, NULL, train, st);
}

#endif
