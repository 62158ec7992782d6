/* Replays the fuzzers' regression inputs (tests/fuzz/regressions/) and the
 * hand-made bad files (tests/data/bad/) through the libFuzzer harnesses'
 * own entry points, built here with the normal compiler: every file goes
 * through every harness (the file loader, the API decision stream and the
 * ONNX importer).
 * A broken contract aborts (tests/fuzz/fuzz_common.h), which fails the case;
 * the ASan build of the suite adds the memory checks.
 */
#define FGFUZZ_NO_MAIN
#include "fgtest.h"

#include <dirent.h>

#include "fuzz/fuzz_api.c"
#include "fuzz/fuzz_load.c"
#include "fuzz/fuzz_onnx.c"

static uint8_t *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      uint8_t *nb = realloc(buf, cap *= 2);
      if (!nb) free(buf);
      buf = nb;
    }
  }
  fclose(f);
  *size = n;
  return buf;
}

/* Runs every regular file in `dir` through every harness; returns the count. */
static int replay_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int count = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t size = 0;
    uint8_t *data = read_all(path, &size);
    if (!data) continue;
    fprintf(stderr, "replay %s (%zu bytes)\n", e->d_name, size);
    fgfuzz_load(data, size);
    fgfuzz_api(data, size);
    fgfuzz_onnx(data, size);
    free(data);
    count++;
  }
  closedir(d);
  return count;
}

FG_TEST(replay_fuzz_regressions, "badinput") {
  int n = replay_dir(FG_SOURCE_DIR "/tests/fuzz/regressions");
  FG_CHECK(n >= 2);
}

/* Decision streams the fuzzer found that reach fg_data_parallel and
 * fg_micro_batch (10 of them its bound on micro-batches in flight) and run
 * the result: kept as seeds (tests/fuzz/seeds/api/) and replayed here. */
FG_TEST(replay_api_seeds, "badinput,dist") {
  int n = replay_dir(FG_SOURCE_DIR "/tests/fuzz/seeds/api");
  FG_CHECK(n >= 18);
}

FG_TEST(replay_bad_files_through_harnesses, "badinput") {
  int n = replay_dir(FG_TEST_DATA_DIR "/bad");
  FG_CHECK(n >= 20);
}

/* The first fuzz find: a file whose shape vector ([long]) starts 4 bytes
 * off 8-byte alignment passed the FlatBuffers verifier and was read in place
 * (UBSan: misaligned load). It must be refused as a format error. */
FG_TEST(misaligned_int64_vector_refused, "badinput") {
  size_t size = 0;
  uint8_t *data =
      read_all(FG_SOURCE_DIR "/tests/fuzz/regressions/load_misaligned_int64_vector.fgb", &size);
  FG_CHECK(data != NULL);
  if (!data) return;
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load_memory(data, size, st);
  FG_CHECK(g == NULL);
  FG_CHECK(fg_status_code(st) == FG_FORMAT_ERROR);
  FG_CHECK(strstr(fg_status_message(st), "not 8-byte aligned") != NULL);
  fg_graph_free(g);
  fg_status_free(st);
  free(data);
}

/* The writer leaves empty [long] vectors (scalar shapes) 4 bytes off 8-byte
 * alignment; the alignment check must let them through, or valid graphs with
 * scalars stop loading. */
FG_TEST(scalar_shapes_round_trip, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 0, NULL);
  fg_output y = x;
  for (int i = 0; i < 6; i++)
    y = fg_add(g, y, fg_scalar(g, FG_F32, 1.0));
  fg_graph_add_output(g, y);
  void *buf = NULL;
  size_t size = 0;
  FG_CHECK(fg_graph_save_memory(g, &buf, &size, st) == 0);
  fg_graph *g2 = fg_graph_load_memory(buf, size, st);
  FG_CHECK(g2 != NULL);
  if (!g2) fprintf(stderr, "load: %s\n", fg_status_message(st));
  FG_CHECK(fg_graph_num_nodes(g2) == fg_graph_num_nodes(g));
  fg_graph_free(g2);
  free(buf);
  fg_graph_free(g);
  fg_status_free(st);
}
