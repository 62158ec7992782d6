/* Malformed files (F1-F19 in the case names): every malformed .fgb gets a clean error whose
 * code is right and whose message names the culprit (node, op, index,
 * versions, sizes). Bad files are made here from JSON text (the JSON parser
 * has no semantic checks) or by patching valid bytes, so each is exactly one
 * defect away from a good file.
 *
 * The same generators write tests/data/bad/F*.fgb for the CLI tests:
 *   FG_WRITE_BAD_FIXTURES=1 build/tests/test_badfiles bad_fixtures_match_generator
 * and bad_fixtures_match_generator / bad_fixtures_fail_to_load keep the
 * committed files honest. */
#include <flowgraph/flowgraph.h>
#include <time.h>

#include "fgtest.h"
#include "schema/fgb_internal.h"
#include "test_io_util.h"

/* ---- JSON pieces (FlatBuffers' parser takes unquoted keys) -------------- */

#define PH(name, dt, shape)                                                                        \
  "{name: \"" name "\", op: \"placeholder\", attrs: ["                                             \
  "{name: \"dtype\", value_type: IntValue, value: {v: " dt "}},"                                   \
  "{name: \"shape\", value_type: IntList, value: {v: " shape "}}]}"
#define CONST(name, dt, shape, buf)                                                                \
  "{name: \"" name "\", op: \"constant\", attrs: [{name: \"value\", value_type: TensorValue, "     \
  "value: {dtype: " dt ", shape: " shape ", buffer: " buf "}}]}"
#define IN(n, i)               "{node: " #n ", index: " #i "}"
#define NODE(name, op, inputs) "{name: \"" name "\", op: \"" op "\", inputs: [" inputs "]}"
#define BUF16                  "{data: [0,0,128,63, 0,0,0,64, 0,0,64,64, 0,0,128,64]}"
#define GRAPH(nodes, buffers)  "{version: 1, nodes: [" nodes "], buffers: [" buffers "]}"

/* y = x + c, x f32 [2,2] placeholder, c f32 [2,2] constant = [1,2,3,4]. The
 * good file the patched ones start from; "HUGE_NAME_MARKER" and the marker
 * list are where F19 patches lengths. */
static const char *BASE_JSON = "{version: 1, nodes: [" PH("x", "1", "[2,2]") "," CONST(
    "c", "F32", "[2,2]",
    "0") ","
         "{name: \"HUGE_NAME_MARKER\", op: \"add\", inputs: [" IN(0, 0) "," IN(
             1, 0) "],"
                   " attrs: [{name: \"_marker\", value_type: IntList, value: {v: "
                   "[81985529216486895]}}],"
                   " outputs: [{dtype: F32, shape: [2,2]}]}],"
                   " buffers: [{data: [17,34,51,68,85,102,119,136,153,170,187,204,221,238,255,1]}],"
                   " outputs: [" IN(
                       2, 0) "], metadata: [{key: \"producer\", value: \"test_badfiles\"}]}";

/* ---- making bad bytes --------------------------------------------------- */

static int from_json(const char *schema, const char *json, void **data, size_t *size) {
  fg_status *st = fg_status_new();
  int rc = fgb_json_to_binary(schema, json, strlen(json), data, size, st);
  if (rc != 0) printf("JSON does not parse: %s\n", fg_status_message(st));
  fg_status_free(st);
  return rc;
}

static int base(void **data, size_t *size) { return from_json(NULL, BASE_JSON, data, size); }

static void put_u32(void *data, size_t at, uint32_t v) { memcpy((char *)data + at, &v, 4); }
static uint32_t get_u32(const void *data, size_t at) {
  uint32_t v;
  memcpy(&v, (const char *)data + at, 4);
  return v;
}

static int truncate_to(void **data, size_t *size, int percent) {
  if (base(data, size) != 0) return -1;
  *size = *size * (size_t)percent / 100;
  return 0;
}
static int make_truncated_50(void **d, size_t *n) { return truncate_to(d, n, 50); }
static int make_truncated_99(void **d, size_t *n) { return truncate_to(d, n, 99); }

static int make_identifier(void **data, size_t *size) {
  if (base(data, size) != 0) return -1;
  memcpy((char *)*data + 4, "XXXX", 4);
  return 0;
}

static int make_root_offset(void **data, size_t *size) {
  if (base(data, size) != 0) return -1;
  put_u32(*data, 0, 0x7ffffff0u);
  return 0;
}

/* The root table's vtable is at table - soffset: point it past the end. */
static int make_vtable_offset(void **data, size_t *size) {
  if (base(data, size) != 0) return -1;
  uint32_t root = get_u32(*data, 0);
  put_u32(*data, root, (uint32_t)(int32_t)((int64_t)root - (int64_t)*size - 1000));
  return 0;
}

/* A fixed-seed generator, so the fixture is the same on every machine. */
static int make_random(void **data, size_t *size, int with_identifier) {
  *size = 1024;
  unsigned char *p = malloc(*size);
  if (!p) return -1;
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < *size; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (unsigned char)(s >> 56);
  }
  if (with_identifier) memcpy(p + 4, "FGB1", 4);
  *data = p;
  return 0;
}
static int make_random_fgb1(void **d, size_t *n) { return make_random(d, n, 1); }
static int make_random_plain(void **d, size_t *n) { return make_random(d, n, 0); }

/* Patches the 4-byte length in front of the first occurrence of `marker`
 * (a string's bytes or a vector's first element). */
static int patch_length(void **data, size_t *size, const void *marker, size_t m, uint32_t len) {
  if (base(data, size) != 0) return -1;
  long at = tio_find(*data, *size, marker, m);
  if (at < 4) return -1;
  put_u32(*data, (size_t)at - 4, len);
  return 0;
}
static int make_huge_name(void **d, size_t *n) {
  return patch_length(d, n, "HUGE_NAME_MARKER", 16, 0x80000000u); /* 2 GiB */
}
static int make_huge_vector(void **d, size_t *n) {
  int64_t marker = 81985529216486895; /* 0x0123456789ABCDEF */
  return patch_length(d, n, &marker, 8, 0x7fffffffu);
}
static int make_huge_buffer(void **d, size_t *n) {
  const unsigned char marker[4] = {17, 34, 51, 68};
  return patch_length(d, n, marker, 4, 0x7fffffffu);
}

/* A newer writer's schema with one more attribute type: its files carry an
 * AttrValue this reader does not know. */
static int make_future_attr_type(void **data, size_t *size) {
  size_t n = 0;
  char *fbs = tio_read(FG_SOURCE_DIR "/schema/graph.fbs", &n);
  if (!fbs) return -1;
  char *u = strstr(fbs, "union AttrValue");
  char *close = u ? strchr(u, '}') : NULL;
  if (!close) {
    free(fbs);
    return -1;
  }
  size_t head = (size_t)(u - fbs);
  size_t cap = n + 128;
  char *schema = malloc(cap);
  snprintf(schema, cap, "%.*stable FutureValue { v:long; }\n%.*s, FutureValue%s", (int)head, fbs,
           (int)(close - u), u, close);
  int rc = from_json(schema,
                     "{version: 1, nodes: [{name: \"p\", op: \"placeholder\", attrs: ["
                     "{name: \"dtype\", value_type: IntValue, value: {v: 1}},"
                     "{name: \"shape\", value_type: IntList, value: {v: []}},"
                     "{name: \"future\", value_type: FutureValue, value: {v: 5}}]}]}",
                     data, size);
  free(schema);
  free(fbs);
  return rc;
}

/* ---- the cases ---------------------------------------------------------- */

typedef struct bad_spec {
  const char *row;     /* "F07" */
  const char *fixture; /* file under tests/data/bad/, NULL: memory only */
  const char *json;    /* the bad file as JSON, or */
  int (*make)(void **data, size_t *size);
  fg_code code;
  const char *needles[4]; /* all must appear in the message */
} bad_spec;

// clang-format off
static const bad_spec SPECS[] = {
    {"F01", "F01_empty.fgb", NULL, NULL, FG_FORMAT_ERROR, {"empty"}},
    {"F01", "F01_three_bytes.fgb", NULL, NULL, FG_FORMAT_ERROR, {"3 bytes"}},
    {"F02", "F02_truncated_50.fgb", NULL, make_truncated_50, FG_FORMAT_ERROR, {"verifier failed"}},
    {"F02", "F02_truncated_99.fgb", NULL, make_truncated_99, FG_FORMAT_ERROR, {"verifier failed"}},
    {"F03", "F03_identifier.fgb", NULL, make_identifier, FG_FORMAT_ERROR,
     {"identifier", "'XXXX'", "'FGB1'"}},
    {"F04", "F04_root_offset.fgb", NULL, make_root_offset, FG_FORMAT_ERROR, {"verifier failed"}},
    {"F04", "F04_vtable_offset.fgb", NULL, make_vtable_offset, FG_FORMAT_ERROR,
     {"verifier failed"}},
    {"F04", "F04_random.fgb", NULL, make_random_fgb1, FG_FORMAT_ERROR, {"verifier failed"}},
    {"F04", NULL, NULL, make_random_plain, FG_FORMAT_ERROR, {"identifier"}},
    {"F06", "F06_version.fgb",
     "{version: 7, nodes: [" PH("x", "1", "[2]") "]}", NULL, FG_UNSUPPORTED,
     {"version 7", "version 1"}},
    {"F06", NULL, "{nodes: [" PH("x", "1", "[2]") "]}", NULL, FG_FORMAT_ERROR, {"version"}},
    {"F07", "F07_node_index.fgb",
     GRAPH(PH("x", "1", "[2]") "," NODE("y", "add", IN(0, 0) "," IN(3, 0)) ","
           NODE("z", "relu", IN(1, 0)), ""),
     NULL, FG_INVALID_GRAPH, {"node 'y' (add)", "input 1", "node 3", "3 nodes"}},
    {"F07", "F07_node_index_max.fgb",
     GRAPH(PH("x", "1", "[2]") "," NODE("y", "relu", IN(2147483647, 0)), ""), NULL,
     FG_INVALID_GRAPH, {"node 'y' (relu)", "input 0", "node 2147483647", "2 nodes"}},
    {"F07", NULL, GRAPH(PH("x", "1", "[2]") "," NODE("y", "relu", IN(-1, 0)), ""), NULL,
     FG_INVALID_GRAPH, {"node 'y' (relu)", "input 0", "node -1"}},
    {"F07", NULL,
     "{version: 1, nodes: [" PH("x", "1", "[2]") "], outputs: [" IN(1, 0) "]}", NULL,
     FG_INVALID_GRAPH, {"graph output 0", "node 1", "1 nodes"}},
    {"F08", "F08_output_index.fgb",
     GRAPH(CONST("c", "F32", "[2,2]", "0") "," NODE("y", "relu", IN(0, 1)), BUF16), NULL,
     FG_INVALID_GRAPH, {"node 'y' (relu)", "input 0", "output 1", "node 'c' (constant)"}},
    {"F08", NULL, GRAPH(PH("x", "1", "[2]") "," NODE("y", "relu", IN(0, -1)), ""), NULL,
     FG_INVALID_GRAPH, {"node 'y' (relu)", "output -1"}},
    {"F08", NULL,
     "{version: 1, nodes: [" PH("x", "1", "[2]") "], outputs: [" IN(0, 3) "]}", NULL,
     FG_INVALID_GRAPH, {"graph output 0", "output 3", "node 'x'"}},
    {"F09", "F09_unknown_op.fgb",
     GRAPH(PH("x", "1", "[2]") "," NODE("f", "frobnicate", IN(0, 0)), ""), NULL,
     FG_UNIMPLEMENTED, {"node 'f'", "unknown op 'frobnicate'"}},
    {"F10", "F10_dtype.fgb",
     GRAPH(CONST("c", "99", "[2,2]", "0"), BUF16), NULL, FG_INVALID_GRAPH,
     {"node 'c' (constant)", "attribute 'value'", "unknown dtype 99"}},
    {"F10", NULL,
     "{version: 1, nodes: [{name: \"x\", op: \"placeholder\", attrs: ["
     "{name: \"dtype\", value_type: IntValue, value: {v: 1}},"
     "{name: \"shape\", value_type: IntList, value: {v: [2]}}],"
     " outputs: [{dtype: -3, shape: [2]}]}]}",
     NULL, FG_INVALID_GRAPH, {"node 'x' (placeholder)", "output 0", "unknown dtype -3"}},
    {"F10", NULL, GRAPH(PH("x", "42", "[2]"), ""), NULL, FG_INVALID_GRAPH, {"node 'x'", "42"}},
    {"F10", "F10_attr_type.fgb", NULL, make_future_attr_type, FG_INVALID_GRAPH,
     {"node 'p' (placeholder)", "attribute 'future'", "unknown value type 7"}},
    {"F11", "F11_negative_dim.fgb",
     GRAPH(CONST("c", "F32", "[2,-2]", "0"), BUF16), NULL, FG_INVALID_GRAPH,
     {"node 'c' (constant)", "dimension 1 = -2"}},
    {"F11", "F11_rank.fgb",
     GRAPH(CONST("c", "F32", "[1,1,1,1,1,1,1,1,4]", "0"), BUF16), NULL, FG_INVALID_GRAPH,
     {"node 'c' (constant)", "rank 9", "maximum 8"}},
    {"F11", NULL, GRAPH(PH("x", "1", "[2,-3]"), ""), NULL, FG_INVALID_GRAPH,
     {"node 'x' (placeholder)", "-3"}},
    {"F11", NULL, GRAPH(PH("x", "1", "[1,1,1,1,1,1,1,1,1]"), ""), NULL, FG_INVALID_GRAPH,
     {"node 'x' (placeholder)", "rank 9"}},
    {"F11", NULL,
     "{version: 1, nodes: [{name: \"x\", op: \"placeholder\", attrs: ["
     "{name: \"dtype\", value_type: IntValue, value: {v: 1}},"
     "{name: \"shape\", value_type: IntList, value: {v: [2]}}],"
     " outputs: [{dtype: F32, shape: [-5]}]}]}",
     NULL, FG_INVALID_GRAPH, {"node 'x' (placeholder)", "output 0", "dimension 0 = -5"}},
    {"F12", "F12_overflow.fgb",
     GRAPH(CONST("c", "F32", "[4294967296,4294967296,4]", "0"), "{data: []}"), NULL,
     FG_INVALID_GRAPH, {"node 'c' (constant)", "[4294967296,4294967296,4]", "overflows"}},
    {"F12", NULL, GRAPH(PH("x", "1", "[4294967296,4294967296,4]"), ""), NULL, FG_INVALID_GRAPH,
     {"node 'x' (placeholder)", "overflow"}},
    {"F13", "F13_buffer_short.fgb",
     GRAPH(CONST("c", "F32", "[2,2]", "0"), "{data: [1,2,3,4,5,6,7,8,9,10,11,12]}"), NULL,
     FG_INVALID_GRAPH, {"node 'c' (constant)", "holds 12 bytes", "needs 16"}},
    {"F13", "F13_buffer_long.fgb",
     GRAPH(CONST("c", "F32", "[2,2]", "0"),
           "{data: [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}"),
     NULL, FG_INVALID_GRAPH, {"node 'c' (constant)", "holds 20 bytes", "needs 16"}},
    {"F14", "F14_buffer_index.fgb", GRAPH(CONST("c", "F32", "[2,2]", "5"), BUF16), NULL,
     FG_INVALID_GRAPH, {"node 'c' (constant)", "buffer 5", "1 buffers"}},
    {"F14", NULL, "{version: 1, nodes: [" CONST("c", "F32", "[2,2]", "0") "]}", NULL,
     FG_INVALID_GRAPH, {"node 'c' (constant)", "buffer 0", "0 buffers"}},
    {"F15", "F15_cycle.fgb",
     GRAPH(PH("x", "1", "[2]") "," NODE("a", "add", IN(0, 0) "," IN(2, 0)) ","
           NODE("b", "relu", IN(1, 0)), ""),
     NULL, FG_INVALID_GRAPH, {"cycle", "'a' <- 'b' <- 'a'"}},
    {"F15", "F15_self_loop.fgb", GRAPH(NODE("r", "relu", IN(0, 0)), ""), NULL, FG_INVALID_GRAPH,
     {"node 'r' (relu)", "its own input"}},
    {"F16", "F16_duplicate_name.fgb",
     GRAPH(PH("x", "1", "[2]") "," PH("x", "1", "[3]"), ""), NULL, FG_INVALID_GRAPH,
     {"'x'", "twice", "nodes 0 and 1"}},
    {"F17", "F17_axis.fgb",
     GRAPH(PH("x", "1", "[2,3]") ",{name: \"s\", op: \"softmax\", inputs: [" IN(0, 0) "], attrs: "
           "[{name: \"axis\", value_type: IntValue, value: {v: 2}}]}", ""),
     NULL, FG_INVALID_GRAPH, {"node 's' (softmax)", "axis"}},
    {"F17", "F17_perm.fgb",
     GRAPH(PH("x", "1", "[2,3]") ",{name: \"t\", op: \"transpose\", inputs: [" IN(0, 0) "], attrs: "
           "[{name: \"perm\", value_type: IntList, value: {v: [0, 0]}}]}", ""),
     NULL, FG_INVALID_GRAPH, {"node 't' (transpose)", "perm", "not a permutation"}},
    {"F17", NULL,
     GRAPH(PH("x", "3", "[2]") ",{name: \"h\", op: \"one_hot\", inputs: [" IN(0, 0) "], attrs: "
           "[{name: \"depth\", value_type: IntValue, value: {v: 0}},"
           "{name: \"dtype\", value_type: IntValue, value: {v: 1}}]}", ""),
     NULL, FG_INVALID_GRAPH, {"node 'h' (one_hot)", "depth"}},
    {"F17", NULL,
     GRAPH(PH("x", "1", "[2,3]") ",{name: \"s\", op: \"slice\", inputs: [" IN(0, 0) "], attrs: "
           "[{name: \"begin\", value_type: IntList, value: {v: [0, -1]}},"
           "{name: \"size\", value_type: IntList, value: {v: [1, 1]}}]}", ""),
     NULL, FG_INVALID_GRAPH, {"node 's' (slice)"}},
    {"F17", NULL,
     GRAPH(PH("x", "1", "[2,3]") ",{name: \"r\", op: \"reduce_sum\", inputs: [" IN(0, 0) "], "
           "attrs: [{name: \"axes\", value_type: IntList, value: {v: [5]}}]}", ""),
     NULL, FG_INVALID_GRAPH, {"node 'r' (reduce_sum)"}},
    {"F18", "F18_dtype_mismatch.fgb",
     GRAPH(PH("x", "1", "[2]") "," PH("i", "3", "[2]") ","
           NODE("y", "add", IN(0, 0) "," IN(1, 0)), ""),
     NULL, FG_INVALID_GRAPH, {"node 'y' (add)", "f32", "i32"}},
    {"F18", NULL,
     GRAPH(PH("x", "3", "[2,2]") "," PH("w", "3", "[2,2]") ","
           NODE("m", "matmul", IN(0, 0) "," IN(1, 0)), ""),
     NULL, FG_INVALID_GRAPH, {"node 'm' (matmul)", "i32"}},
    {"F18", "F18_declared_output.fgb",
     "{version: 1, nodes: [" PH("x", "1", "[2]") ", {name: \"y\", op: \"relu\", inputs: ["
     IN(0, 0) "], outputs: [{dtype: F64, shape: [2]}]}]}",
     NULL, FG_INVALID_GRAPH, {"node 'y' (relu)", "declared f64[2]", "infers as f32[2]"}},
    {"F19", "F19_huge_name.fgb", NULL, make_huge_name, FG_FORMAT_ERROR, {"verifier failed"}},
    {"F19", "F19_huge_vector.fgb", NULL, make_huge_vector, FG_FORMAT_ERROR, {"verifier failed"}},
    {"F19", NULL, NULL, make_huge_buffer, FG_FORMAT_ERROR, {"verifier failed"}},
};
// clang-format on
#define N_SPECS ((int)(sizeof SPECS / sizeof SPECS[0]))

/* The bytes of one spec (malloc'ed; may be empty). */
static int spec_bytes(const bad_spec *s, void **data, size_t *size) {
  *data = NULL;
  *size = 0;
  if (s->json) return from_json(NULL, s->json, data, size);
  if (s->make) return s->make(data, size);
  /* F1: an empty file and a 3-byte one. */
  *size = strstr(s->fixture, "three") ? 3 : 0;
  *data = malloc(4);
  if (*data) memcpy(*data, "FGB", 3);
  return *data ? 0 : -1;
}

static void check_error(const bad_spec *s, const char *what, fg_graph *g, const fg_status *st) {
  const char *msg = fg_status_message(st);
  if (g || fg_status_code(st) != s->code)
    FG_FAIL_AT("%s %s: got %s (%s), want %s", s->row, what,
               g ? "a graph" : fg_code_name(fg_status_code(st)), msg, fg_code_name(s->code));
  for (int i = 0; i < 4 && s->needles[i]; i++)
    FG_CHECK_STR_CONTAINS(msg, s->needles[i]);
  FG_CHECK(strchr(msg, '\n') == NULL); /* the CLI prints it as one line */
}

/* Runs every spec of `row` through fg_graph_load_memory. */
static void run_row(const char *row) {
  fg_status *st = fg_status_new();
  int ran = 0;
  for (int i = 0; i < N_SPECS; i++) {
    const bad_spec *s = &SPECS[i];
    if (strcmp(s->row, row) != 0) continue;
    void *data = NULL;
    size_t size = 0;
    if (spec_bytes(s, &data, &size) != 0) {
      FG_FAIL_AT("%s: cannot make spec %d", row, i);
      continue;
    }
    fg_graph *g = fg_graph_load_memory(data, size, st);
    check_error(s, s->fixture ? s->fixture : "(memory)", g, st);
    fg_graph_free(g);
    free(data);
    ran++;
  }
  FG_CHECK(ran > 0);
  fg_status_free(st);
}

/* Where the base file is a good file, the patched ones are one step away. */
FG_TEST(bad_base_file_is_good, "badinput") {
  fg_status *st = fg_status_new();
  void *data = NULL;
  size_t size = 0;
  FG_REQUIRE(base(&data, &size) == 0);
  fg_graph *g = fg_graph_load_memory(data, size, st);
  if (!g) printf("%s\n", fg_status_message(st));
  FG_CHECK(g != NULL);
  fg_graph_free(g);
  free(data);
  fg_status_free(st);
}

FG_TEST(F01_empty_short_directory_missing, "badinput") {
  run_row("F01");
  fg_status *st = fg_status_new();
  char dir[64], path[128];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_io_test"));
  FG_CHECK(fg_graph_load(dir, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "directory");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), dir);
  FG_CHECK(fg_graph_load_json(dir, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);

  snprintf(path, sizeof path, "%s/missing.fgb", dir);
  FG_CHECK(fg_graph_load(path, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "missing.fgb");
  FG_CHECK(fg_graph_load_json(path, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);

  FG_REQUIRE(fgt_write_file(path, "", 0) == 0);
  FG_CHECK(fg_graph_load(path, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "empty");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "missing.fgb");
  FG_REQUIRE(fgt_write_file(path, "FGB", 3) == 0);
  FG_CHECK(fg_graph_load(path, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "3 bytes");

  /* A sparse 3 GiB file is refused from its size, before any read. */
  FILE *f = fopen(path, "wb");
  FG_REQUIRE(f);
  int trunc_ok = ftruncate(fileno(f), (off_t)3 << 30) == 0;
  fclose(f);
  if (trunc_ok) {
    FG_CHECK(fg_graph_load(path, st) == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_RESOURCE_EXHAUSTED);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "3221225472 bytes");
  }
  fgt_rmtree(dir);
  fg_status_free(st);
}

FG_TEST(F02_truncated, "badinput") {
  run_row("F02");
  /* Files from fg_graph_save_memory too. */
  fg_status *st = fg_status_new();
  void *data = NULL;
  size_t size = 0;
  FG_REQUIRE(base(&data, &size) == 0);
  fg_graph *g = fg_graph_load_memory(data, size, st);
  FG_REQUIRE(g);
  free(data);
  FG_REQUIRE(fg_graph_save_memory(g, &data, &size, st) == 0);
  for (int pct = 1; pct < 100; pct++) {
    size_t cut = size * (size_t)pct / 100;
    fg_graph *h = fg_graph_load_memory(data, cut, st);
    if (h || fg_status_code(st) != FG_FORMAT_ERROR)
      FG_FAIL_AT("saved file cut to %zu of %zu bytes: %s", cut, size, fg_status_message(st));
    fg_graph_free(h);
  }
  free(data);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(F03_wrong_identifier, "badinput") { run_row("F03"); }
FG_TEST(F04_offsets_and_random_bytes, "badinput") { run_row("F04"); }

/* The schema has no recursive tables: a file nests at most 4 tables deep
 * (Graph > Node > Attr > TensorValue), far below the verifier's limit of 64,
 * so no file can reach it. What can be checked is that the loader sets the
 * limits and that passing one fails cleanly. */
FG_TEST(F05_verifier_depth_and_table_limits, "badinput") {
  fg_status *st = fg_status_new();
  void *data = NULL;
  size_t size = 0;
  FG_REQUIRE(base(&data, &size) == 0);
  fg_graph *g = fgb_load_memory_limits(data, size, 4, 1000, st);
  FG_CHECK(g != NULL);
  fg_graph_free(g);
  g = fgb_load_memory_limits(data, size, 3, 1000, st);
  FG_CHECK(g == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "depth 3");
  g = fgb_load_memory_limits(data, size, 64, 3, st);
  FG_CHECK(g == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "verifier failed");
  FG_CHECK_INT(FGB_VERIFY_MAX_DEPTH, 64);
  free(data);
  fg_status_free(st);
}

FG_TEST(F06_newer_version, "badinput") { run_row("F06"); }
FG_TEST(F07_node_index_out_of_range, "badinput") { run_row("F07"); }
FG_TEST(F08_output_index_out_of_range, "badinput") { run_row("F08"); }
FG_TEST(F09_unknown_op, "badinput") { run_row("F09"); }
FG_TEST(F10_unknown_dtype_and_attr_type, "badinput") { run_row("F10"); }
FG_TEST(F11_negative_dim_and_rank, "badinput") { run_row("F11"); }
FG_TEST(F12_byte_size_overflow, "badinput") { run_row("F12"); }
FG_TEST(F13_buffer_size_mismatch, "badinput") { run_row("F13"); }
FG_TEST(F14_buffer_index_out_of_range, "badinput") { run_row("F14"); }
FG_TEST(F15_cycles, "badinput") { run_row("F15"); }
FG_TEST(F16_duplicate_names, "badinput") { run_row("F16"); }
FG_TEST(F17_attribute_out_of_range, "badinput") { run_row("F17"); }
FG_TEST(F18_dtype_mismatch, "badinput") { run_row("F18"); }

/* Lengths of 2^31 - 1 elements are refused before anything walks them:
 * the CPU time this thread spends (which a loaded machine does not stretch,
 * unlike the wall clock) stays under a second; walking that many elements
 * takes seconds. */
FG_TEST(F19_huge_lengths_fail_fast, "badinput") {
  struct timespec t0, t1;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
  run_row("F19");
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  FG_CHECK(secs < 1.0);
}

/* Other defects that the loader names. */
FG_TEST(bad_other_semantic_defects, "badinput") {
  // clang-format off
  static const bad_spec more[] = {
      {"X", NULL, GRAPH("{name: \"\", op: \"relu\"}", ""), NULL, FG_INVALID_GRAPH,
       {"node 0", "no name"}},
      {"X", NULL, GRAPH("{name: \"n\"}", ""), NULL, FG_INVALID_GRAPH, {"node 'n'", "no op"}},
      {"X", NULL, GRAPH("{name: \"a\\u0000b\", op: \"relu\"}", ""), NULL, FG_INVALID_GRAPH,
       {"NUL"}},
      {"X", NULL,
       GRAPH("{name: \"x\", op: \"placeholder\", attrs: [{name: \"dtype\", value_type: IntValue}]}",
             ""),
       NULL, FG_INVALID_GRAPH, {"node 'x' (placeholder)", "attribute 'dtype'", "no value"}},
      {"X", NULL,
       GRAPH("{name: \"x\", op: \"placeholder\", attrs: [{name: \"dtype\", value_type: IntValue, "
             "value: {v: 1}}, {name: \"dtype\", value_type: IntValue, value: {v: 2}}]}", ""),
       NULL, FG_INVALID_GRAPH, {"attribute 'dtype'", "twice"}},
      {"X", NULL, "{version: 1, nodes: [" PH("x", "1", "[2]") "], inputs: [\"y\"]}", NULL,
       FG_INVALID_GRAPH, {"graph input 0", "'y'", "not a placeholder"}},
      {"X", NULL, "{version: 1, nodes: [" PH("x", "1", "[2]") "], metadata: [{value: \"v\"}]}",
       NULL, FG_INVALID_GRAPH, {"metadata entry 0"}},
      {"X", NULL,
       GRAPH(PH("x", "1", "[2]") ", {name: \"y\", op: \"relu\", inputs: [" IN(0, 0) "], "
             "outputs: []}", ""),
       NULL, FG_INVALID_GRAPH, {"node 'y' (relu)", "declares 0 output(s)"}},
      {"X", NULL, GRAPH(NODE("y", "add", IN(1, 0)) "," PH("x", "1", "[2]"), ""), NULL,
       FG_INVALID_GRAPH, {"node 'y' (add)", "inputs"}},
      {"X", NULL,
       GRAPH(PH("x", "1", "[2]") ", {name: \"y\", op: \"relu\", inputs: [" IN(0, 0) "], "
             "device: \"\"}", ""),
       NULL, FG_INVALID_GRAPH, {"node 'y'", "device"}},
      /* UTF-8 names stay readable; control characters are escaped. */
      {"X", NULL, GRAPH(NODE("caf\u00e9", "nope", ""), ""), NULL, FG_UNIMPLEMENTED,
       {"node 'caf\xc3\xa9'", "unknown op 'nope'"}},
      {"X", NULL, GRAPH(NODE("a\\nb", "nope", ""), ""), NULL, FG_UNIMPLEMENTED,
       {"node 'a\\x0ab'"}},
  };
  // clang-format on
  fg_status *st = fg_status_new();
  for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
    void *data = NULL;
    size_t size = 0;
    if (spec_bytes(&more[i], &data, &size) != 0) {
      FG_FAIL_AT("cannot make case %zu", i);
      continue;
    }
    fg_graph *g = fg_graph_load_memory(data, size, st);
    check_error(&more[i], "(memory)", g, st);
    fg_graph_free(g);
    free(data);
  }
  fg_status_free(st);
}

FG_TEST(bad_json_text, "badinput") {
  fg_status *st = fg_status_new();
  char dir[64], path[128];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_io_test"));
  snprintf(path, sizeof path, "%s/bad.json", dir);
  struct {
    const char *text;
    size_t len;
    fg_code code;
    const char *needle;
  } cases[] = {
      {"{version: 1, nodes: [", 0, FG_FORMAT_ERROR, "not a valid flowgraph JSON file"},
      {"{version: 1, bogus_field: 3}", 0, FG_FORMAT_ERROR, "bogus_field"},
      {"{version: 1, nodes: [{name: \"a\", attrs: [{name: \"x\", value_type: Nope}]}]}", 0,
       FG_FORMAT_ERROR, "Nope"},
      {"{version: 1}\0junk", 17, FG_FORMAT_ERROR, "NUL byte at offset 12"},
      {"", 0, FG_FORMAT_ERROR, "not a valid flowgraph JSON file"},
      /* Parsed, then refused by the same checks as binary files. */
      {"{version: 1, nodes: [{name: \"r\", op: \"relu\", inputs: [{node: 0, index: 0}]}]}", 0,
       FG_INVALID_GRAPH, "its own input"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
    FG_REQUIRE(fgt_write_file(path, cases[i].text, len) == 0);
    fg_graph *g = fg_graph_load_json(path, st);
    FG_CHECK(g == NULL);
    FG_CHECK_INT(fg_status_code(st), cases[i].code);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), cases[i].needle);
    FG_CHECK(strchr(fg_status_message(st), '\n') == NULL);
    fg_graph_free(g);
  }
  fgt_rmtree(dir);
  fg_status_free(st);
}

/* Random byte changes to a good file (fixed seed): each load either
 * succeeds or fails with a code and a message; never a crash (run under
 * ASan/UBSan to make that mean something). */
FG_TEST(bad_random_mutations_fail_cleanly, "badinput") {
  fg_status *st = fg_status_new();
  void *good = NULL;
  size_t size = 0;
  FG_REQUIRE(base(&good, &size) == 0);
  unsigned char *p = malloc(size);
  FG_REQUIRE(p);
  uint64_t s = 12345;
  int loaded = 0, failed = 0;
  for (int k = 0; k < 3000; k++) {
    memcpy(p, good, size);
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int flips = 1 + (int)((s >> 60) & 3);
    for (int f = 0; f < flips; f++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      p[(s >> 33) % size] ^= (unsigned char)(1u << ((s >> 20) & 7));
    }
    fg_graph *g = fg_graph_load_memory(p, size, st);
    if (g) {
      loaded++;
      FG_CHECK_INT(fg_status_code(st), FG_OK);
    } else {
      failed++;
      FG_CHECK(fg_status_code(st) != FG_OK && fg_status_message(st)[0] != '\0');
      FG_CHECK(fg_status_code(st) != FG_INTERNAL);
    }
    fg_graph_free(g);
  }
  FG_CHECK(failed > 0);
  printf("mutations: %d loaded, %d refused\n", loaded, failed);
  free(p);
  free(good);
  fg_status_free(st);
}

/* tests/data/bad/F*.fgb are exactly what the generators above make. */
FG_TEST(bad_fixtures_match_generator, "badinput") {
  const char *write = getenv("FG_WRITE_BAD_FIXTURES");
  int n = 0;
  for (int i = 0; i < N_SPECS; i++) {
    const bad_spec *s = &SPECS[i];
    if (!s->fixture) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/bad/%s", FG_TEST_DATA_DIR, s->fixture);
    void *data = NULL, *file = NULL;
    size_t size = 0, file_size = 0;
    FG_REQUIRE(spec_bytes(s, &data, &size) == 0);
    FG_CHECK(size < 64 * 1024);
    if (write && *write) {
      FG_CHECK(fgt_write_file(path, data, size) == 0);
    } else {
      file = tio_read(path, &file_size);
      if (!file || file_size != size || memcmp(file, data, size) != 0)
        FG_FAIL_AT("%s is missing or stale: regenerate with FG_WRITE_BAD_FIXTURES=1 "
                   "test_badfiles bad_fixtures_match_generator",
                   path);
    }
    free(file);
    free(data);
    n++;
  }
  FG_CHECK(n >= 19);
}

/* What `flowgraph run` meets: each committed fixture, through the path API. */
FG_TEST(bad_fixtures_fail_to_load, "badinput") {
  fg_status *st = fg_status_new();
  for (int i = 0; i < N_SPECS; i++) {
    const bad_spec *s = &SPECS[i];
    if (!s->fixture) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/bad/%s", FG_TEST_DATA_DIR, s->fixture);
    fg_graph *g = fg_graph_load(path, st);
    check_error(s, s->fixture, g, st);
    fg_graph_free(g);
  }
  fg_status_free(st);
}
