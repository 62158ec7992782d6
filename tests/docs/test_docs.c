/* The hand-written JSON model of docs/file-format.md: the document's ```json
 * block is exactly tests/data/docs/relu_dense.json, and that file loads and
 * computes y = relu(x w + b) with w = [[1, 0], [0, 1], [1, 1]] and
 * b = [2.5, 0.5] (its buffers' bytes, little-endian f32). Expected values
 * by hand: x = [1, 2, 3] gives x w = [4, 5], + b = [6.5, 5.5]; x = [-4, 0, 1]
 * gives [-3, 1] + b = [-0.5, 1.5], relu [0, 1.5]. */
#include <flowgraph/flowgraph.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"

#define FIXTURE FG_TEST_DATA_DIR "/docs/relu_dense.json"

/* The whole file, NUL-terminated; NULL when it cannot be read. */
static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
      if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
      } else {
        buf[n] = '\0';
      }
    }
  }
  fclose(f);
  return buf;
}

FG_TEST(docs_file_format_json_block_is_the_fixture, "") {
  char *doc = read_text(FG_SOURCE_DIR "/docs/file-format.md");
  char *fixture = read_text(FIXTURE);
  FG_REQUIRE(doc != NULL && fixture != NULL);
  const char *start = strstr(doc, "```json\n");
  FG_REQUIRE(start != NULL);
  start += strlen("```json\n");
  const char *end = strstr(start, "```\n");
  FG_REQUIRE(end != NULL);
  /* Exactly one json block, equal to the fixture byte for byte. */
  FG_CHECK(strstr(end, "```json") == NULL);
  FG_CHECK_INT((long long)(end - start), (long long)strlen(fixture));
  FG_CHECK(strncmp(start, fixture, strlen(fixture)) == 0);
  free(doc);
  free(fixture);
}

FG_TEST(docs_file_format_json_loads_and_runs, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load_json(FIXTURE, st);
  FG_REQUIRE(g != NULL);
  FG_CHECK_STR(fg_graph_metadata(g, "description"), "y = relu(x w + b)");
  FG_CHECK_INT(fg_graph_num_outputs(g), 1);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s != NULL);
  float x[6] = {1, 2, 3, -4, 0, 1};
  int64_t dims[2] = {2, 3};
  fg_tensor *xt = fg_tensor_wrap(FG_F32, 2, dims, x, sizeof x, st);
  fg_feed feed = {"x", xt};
  const char *fetch = "y";
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) == 0);
  FG_CHECK_INT(fg_tensor_dim(out, 0), 2);
  FG_CHECK_INT(fg_tensor_dim(out, 1), 2);
  const float *y = fg_tensor_data(out);
  const float want[4] = {6.5f, 5.5f, 0.0f, 1.5f};
  for (int i = 0; i < 4; i++)
    FG_CHECK_NEAR(y[i], want[i], 0);
  fg_tensor_free(out);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}
