/* Shared by the libFuzzer harnesses (fuzz_load.c, fuzz_api.c, fuzz_onnx.c) and by the
 * ctest replay of tests/fuzz/regressions/ (tests/schema/test_fuzz_regressions.c),
 * so a regression file is replayed through exactly the code that found it.
 *
 * The contract the harnesses check: every call either succeeds or fails with
 * a status whose code is not FG_OK and whose message is not empty; a failing
 * run leaves every output NULL. A broken contract calls abort(), which
 * libFuzzer reports as a crash and ctest as a failed case.
 *
 * Resource guards: the harnesses must never be the reason for an OOM or a
 * timeout, so a graph is only run when the byte size of every node output
 * (unknown batch dimensions at their fed size) and its FLOPs stay under
 * small caps. What is above the caps is still loaded, validated and given
 * to fg_session_new, just not run.
 */
#ifndef FG_FUZZ_COMMON_H
#define FG_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flowgraph/flowgraph.h"

/* Caps for one run: bytes of all node outputs together, FLOPs of all nodes
 * together, nodes. Small enough that ASan builds run a graph in milliseconds. */
#define FGFUZZ_MAX_BYTES (16ll << 20)
#define FGFUZZ_MAX_FLOPS (20ll * 1000 * 1000)
#define FGFUZZ_MAX_NODES 2048
#define FGFUZZ_MAX_FEEDS 16
#define FGFUZZ_MAX_FETCH 8

int fgfuzz_load(const uint8_t *data, size_t size);
int fgfuzz_api(const uint8_t *data, size_t size);
int fgfuzz_onnx(const uint8_t *data, size_t size);

/* How far inputs get, printed at exit when FGFUZZ_STATS is set (to judge
 * whether the fuzzers reach past validation). */
static struct { long inputs, graphs, sessions, runs, runs_ok, over_caps; } fgfuzz_stats;
static void fgfuzz_print_stats(void) {
  fprintf(stderr,
          "fgfuzz stats: %ld inputs, %ld graphs, %ld sessions, %ld over the caps, %ld runs, %ld "
          "ok\n",
          fgfuzz_stats.inputs, fgfuzz_stats.graphs, fgfuzz_stats.sessions, fgfuzz_stats.over_caps,
          fgfuzz_stats.runs, fgfuzz_stats.runs_ok);
}
static inline void fgfuzz_count_input(void) {
  if (fgfuzz_stats.inputs++ == 0 && getenv("FGFUZZ_STATS")) atexit(fgfuzz_print_stats);
}

static inline void fgfuzz_fail(const char *what, const fg_status *st) {
  fprintf(stderr, "fuzz contract broken: %s (code %s, message \"%s\")\n", what,
          fg_code_name(fg_status_code(st)), fg_status_message(st));
  abort();
}

/* A call reported failure: its status must say why. */
static inline void fgfuzz_expect_error(const fg_status *st, const char *call) {
  if (fg_status_code(st) == FG_OK) fgfuzz_fail(call, st);
  const char *m = fg_status_message(st);
  if (m == NULL || m[0] == '\0') fgfuzz_fail(call, st);
}

/* What the writer produces from a graph a harness got (`what`: loaded,
 * imported) must load again, with the same node count. */
static inline void fgfuzz_check_round_trip(const fg_graph *g, const char *what, fg_status *st) {
  void *buf = NULL;
  size_t buf_size = 0;
  if (fg_graph_save_memory(g, &buf, &buf_size, st) != 0) {
    fgfuzz_expect_error(st, "fg_graph_save_memory");
  } else {
    fg_graph *g2 = fg_graph_load_memory(buf, buf_size, st);
    char msg[96];
    snprintf(msg, sizeof msg, "a saved %s graph does not load again", what);
    if (!g2) fgfuzz_fail(msg, st);
    if (fg_graph_num_nodes(g2) != fg_graph_num_nodes(g))
      fgfuzz_fail("the reloaded graph has another node count", st);
    fg_graph_free(g2);
  }
  free(buf);
}

static char fgfuzz_file_dir[64], fgfuzz_file_path[96];

static inline void fgfuzz_remove_file_dir(void) {
  unlink(fgfuzz_file_path);
  rmdir(fgfuzz_file_dir);
}

/* data as the file "input" of a folder of the process's own in $TMPDIR or
 * /tmp (made once, removed at a normal exit; an abort leaves it), for the
 * loaders that read files; NULL when it cannot be written. */
static inline const char *fgfuzz_as_file(const uint8_t *data, size_t size) {
  if (!fgfuzz_file_dir[0]) {
    const char *tmp = getenv("TMPDIR");
    snprintf(fgfuzz_file_dir, sizeof fgfuzz_file_dir, "%s/fgfuzz_XXXXXX",
             tmp && tmp[0] && strlen(tmp) < 40 ? tmp : "/tmp");
    if (!mkdtemp(fgfuzz_file_dir)) return fgfuzz_file_dir[0] = 0, NULL;
    snprintf(fgfuzz_file_path, sizeof fgfuzz_file_path, "%s/input", fgfuzz_file_dir);
    atexit(fgfuzz_remove_file_dir);
  }
  FILE *f = fopen(fgfuzz_file_path, "wb");
  if (!f) return NULL;
  const int ok = fwrite(data, 1, size, f) == size;
  return fclose(f) == 0 && ok ? fgfuzz_file_path : NULL;
}

static inline uint64_t fgfuzz_splitmix(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* FNV-1a: the seed of the random feed values, so a crash replays exactly. */
static inline uint64_t fgfuzz_hash(const uint8_t *data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; i++)
    h = (h ^ data[i]) * 1099511628211ull;
  return h;
}

/* Bytes of all node outputs with unknown dimensions at `batch`, saturating
 * at INT64_MAX; FLOPs summed from fg_node_flops (unknown: bytes as a proxy). */
static inline int fgfuzz_within_caps(const fg_graph *g, int64_t batch) {
  int n = fg_graph_num_nodes(g);
  if (n < 0 || n > FGFUZZ_MAX_NODES) return 0;
  int64_t bytes = 0, flops = 0;
  for (int i = 0; i < n; i++) {
    int no = fg_node_num_outputs(g, i);
    for (int k = 0; k < no; k++) {
      fg_output o = {i, k};
      int64_t dims[FG_MAX_RANK];
      int r = fg_output_shape(g, o, dims);
      if (r < 0 || r > FG_MAX_RANK) return 0;
      int64_t e = (int64_t)fg_dtype_size(fg_output_dtype(g, o));
      if (e == 0) e = 8;
      for (int d = 0; d < r; d++) {
        int64_t v = dims[d] < 0 ? batch : dims[d];
        if (v > 0 && e > FGFUZZ_MAX_BYTES / v) return 0;
        e *= v;
      }
      bytes += e;
      if (bytes > FGFUZZ_MAX_BYTES) return 0;
    }
    int64_t f = fg_node_flops(g, i);
    if (f < 0) f = 0;
    if (f > FGFUZZ_MAX_FLOPS) return 0;
    flops += f;
    if (flops > FGFUZZ_MAX_FLOPS) return 0;
  }
  return 1;
}

/* A random tensor for placeholder `node`: unknown dims are `batch`; values
 * are small (integers in [-1, 4], a few out of range for gather/one_hot). */
static inline fg_tensor *fgfuzz_random_feed(const fg_graph *g, int node, int64_t batch,
                                            uint64_t *rng, fg_status *st) {
  fg_output o = {node, 0};
  int64_t dims[FG_MAX_RANK];
  int r = fg_output_shape(g, o, dims);
  if (r < 0 || r > FG_MAX_RANK) return NULL;
  for (int d = 0; d < r; d++)
    if (dims[d] < 0) dims[d] = batch;
  fg_dtype dt = fg_output_dtype(g, o);
  fg_tensor *t = fg_tensor_new(dt, r, dims, st);
  if (!t) return NULL;
  int64_t n = fg_tensor_num_elements(t);
  void *p = fg_tensor_data(t);
  for (int64_t i = 0; i < n; i++) {
    uint64_t u = fgfuzz_splitmix(rng);
    double f = (double)(u >> 11) * 0x1p-53 * 4.0 - 2.0;
    int64_t k = (int64_t)(u % 64 == 0 ? u % 7 : u % 4) - (u % 97 == 0);
    switch (dt) {
    case FG_F32: ((float *)p)[i] = (float)f; break;
    case FG_F64: ((double *)p)[i] = f; break;
    case FG_I32: ((int32_t *)p)[i] = (int32_t)k; break;
    case FG_I64: ((int64_t *)p)[i] = k; break;
    case FG_BOOL: ((uint8_t *)p)[i] = (uint8_t)(u & 1); break;
    default: break;
    }
  }
  return t;
}

/* Creates a session (one thread: results do not depend on it, and libFuzzer
 * wants determinism) and runs it once or twice: every placeholder fed with
 * random values, `fetches` fetched, `targets` run. Checks the contract. */
static inline void fgfuzz_session_run(fg_graph *g, const char *const *fetches, int n_fetches,
                                      const char *const *targets, int n_targets, uint64_t seed) {
  fg_status *st = fg_status_new();
  if (!st) return;
  fg_session_options opts;
  fg_session_options_init(&opts);
  opts.num_threads = 1;
  opts.max_memory_bytes = 4 * FGFUZZ_MAX_BYTES;
  opts.max_nodes = FGFUZZ_MAX_NODES;
  uint64_t rng = seed;
  int64_t batch = (int64_t)(fgfuzz_splitmix(&rng) % 4); /* 0 included: empty batches */
  int run = fgfuzz_within_caps(g, batch > 0 ? batch : 1);
  fgfuzz_stats.graphs++;
  fg_session *s = fg_session_new(g, &opts, st);
  if (!s) {
    fgfuzz_expect_error(st, "fg_session_new");
    fg_status_free(st);
    return;
  }
  fgfuzz_stats.sessions++;
  fgfuzz_stats.over_caps += !run;
  fg_feed feeds[FGFUZZ_MAX_FEEDS];
  fg_tensor *feed_t[FGFUZZ_MAX_FEEDS];
  int n_feeds = 0;
  int n = fg_graph_num_nodes(g);
  for (int i = 0; run && i < n && n_feeds < FGFUZZ_MAX_FEEDS; i++) {
    const char *op = fg_node_op(g, i);
    if (!op || strcmp(op, "placeholder") != 0) continue;
    fg_tensor *t = fgfuzz_random_feed(g, i, batch, &rng, st);
    if (!t) continue; /* an unfeedable placeholder: the run must report it */
    feed_t[n_feeds] = t;
    feeds[n_feeds].name = fg_node_name(g, i);
    feeds[n_feeds].tensor = t;
    n_feeds++;
  }
  for (int rep = 0; run && rep < 2; rep++) {
    fg_tensor *outs[FGFUZZ_MAX_FETCH] = {0};
    fg_status_clear(st);
    fgfuzz_stats.runs++;
    int rc = fg_session_run(s, feeds, n_feeds, fetches, n_fetches, outs, targets, n_targets, st);
    if (rc != 0) {
      fgfuzz_expect_error(st, "fg_session_run");
      for (int k = 0; k < n_fetches; k++)
        if (outs[k]) fgfuzz_fail("fg_session_run failed but left an output", st);
      break;
    }
    if (fg_status_code(st) != FG_OK) fgfuzz_fail("fg_session_run returned 0 with an error", st);
    fgfuzz_stats.runs_ok++;
    for (int k = 0; k < n_fetches; k++) {
      if (!outs[k]) fgfuzz_fail("fg_session_run returned 0 with a NULL output", st);
      /* Touch every byte so ASan sees a short buffer. */
      const volatile uint8_t *b = fg_tensor_data(outs[k]);
      size_t nb = fg_tensor_num_bytes(outs[k]);
      uint8_t acc = 0;
      for (size_t j = 0; j < nb; j++)
        acc ^= b[j];
      (void)acc;
      fg_tensor_free(outs[k]);
    }
  }
  for (int i = 0; i < n_feeds; i++)
    fg_tensor_free(feed_t[i]);
  fg_session_free(s);
  fg_status_free(st);
}

#endif
