/* ONNX files are untrusted input: every malformed or hostile file of
 * tests/schema/onnx/cases_bad.py gets FG_FORMAT_ERROR, FG_INVALID_GRAPH (or
 * the code its kind of problem has) with a message naming the node or
 * field, never a crash; external data is read only from inside the
 * model's folder. */
#include "fgtest.h"
#include "flowgraph/onnx.h"
#include "onnx_test_util.h"
#include "test_io_util.h"

#define BAD() onnx_cases("cases_bad.py")

/* The bytes of case NAME's file (its path into path), or NULL. */
static void *case_bytes(const char *name, char *path, size_t cap, size_t *n) {
  const char *d = BAD();
  if (!d) return NULL;
  snprintf(path, cap, "%s/%s.onnx", d, name);
  return tio_read(path, n);
}

FG_TEST(onnx_bad_truncated, "onnx,badinput") {
  onnx_expect_error(BAD(), "truncated_raw", FG_FORMAT_ERROR,
                    "ModelProto.graph at byte 2: a length of 106 bytes runs past the end");
  onnx_expect_error(BAD(), "truncated_varint", FG_FORMAT_ERROR,
                    "ModelProto.ir_version at byte 0: a varint is truncated");
}

/* Every prefix of a valid model loads or fails cleanly: never a crash. */
FG_TEST(onnx_bad_every_prefix, "onnx,badinput") {
  char path[1024];
  size_t n = 0;
  unsigned char *bytes = case_bytes("good", path, sizeof path, &n);
  FG_REQUIRE(bytes && n > 50);
  fg_status *st = fg_status_new();
  int loaded = 0;
  for (size_t len = 0; len < n; len++) {
    fg_graph *g = fg_onnx_load_memory(bytes, len, NULL, st);
    if (g) {
      loaded++;
      fg_graph_free(g);
    } else if (!fg_status_message(st)[0]) {
      FG_FAIL_AT("prefix of %zu bytes: failed without a message", len);
    }
  }
  /* A prefix cut at a field boundary is a well-formed but incomplete
   * model: none of them has both the opset and the whole graph. */
  FG_CHECK_INT(loaded, 0);
  fg_graph *g = fg_onnx_load_memory(bytes, n, NULL, st);
  FG_CHECK(g != NULL);
  fg_graph_free(g);
  fg_status_free(st);
  free(bytes);
}

/* Bytes flipped at random places (a fixed sequence): never a crash. */
FG_TEST(onnx_bad_mutations, "onnx,badinput") {
  char path[1024];
  size_t n = 0;
  unsigned char *bytes = case_bytes("good", path, sizeof path, &n);
  FG_REQUIRE(bytes);
  unsigned char *m = malloc(n);
  FG_REQUIRE(m);
  fg_status *st = fg_status_new();
  uint64_t s = 34;
  int failed = 0;
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(m, bytes, n);
    for (int k = 0; k < 1 + iter % 4; k++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      m[(s >> 33) % n] = (unsigned char)(s >> 13);
    }
    fg_graph *g = fg_onnx_load_memory(m, n, NULL, st);
    if (!g) {
      failed++;
      if (!fg_status_message(st)[0]) FG_FAIL_AT("mutation %d: failed without a message", iter);
    }
    fg_graph_free(g);
  }
  FG_CHECK(failed > 100); /* the mutations do break the file */
  free(m);
  free(bytes);
  fg_status_free(st);
}

FG_TEST(onnx_bad_wire_types, "onnx,badinput") {
  onnx_expect_error(BAD(), "wire_top", FG_FORMAT_ERROR,
                    "ModelProto.ir_version at byte 0: wire type 32-bit, expected varint");
  onnx_expect_error(BAD(), "wire_node", FG_FORMAT_ERROR,
                    "ModelProto.graph.node[0].op_type at byte 22: wire type varint, expected "
                    "length-delimited");
  onnx_expect_error(BAD(), "wire_group", FG_FORMAT_ERROR, "wire type start-group");
}

FG_TEST(onnx_bad_dims, "onnx,badinput") {
  onnx_expect_error(BAD(), "dims_overflow", FG_FORMAT_ERROR,
                    "initializer 'huge': dims multiply past 2^63 (dims[1] = 4294967296 after a "
                    "product of 4294967296)");
  onnx_expect_error(BAD(), "dims_vs_raw", FG_FORMAT_ERROR,
                    "initializer 'big': raw_data has 16 bytes but its dims give 1099511627776 "
                    "elements");
  onnx_expect_error(BAD(), "dims_vs_typed", FG_FORMAT_ERROR,
                    "initializer 'short': float_data has 2 values but its dims give 6 elements");
  onnx_expect_error(BAD(), "dims_negative", FG_FORMAT_ERROR, "initializer 'neg': dims[1] is -3");
  onnx_expect_error(BAD(), "typed_wrong_field", FG_FORMAT_ERROR,
                    "initializer 'mixed': holds float_data, which tensors of int64");
}

FG_TEST(onnx_bad_input_names_no_tensor, "onnx,badinput") {
  onnx_expect_error(BAD(), "input_no_tensor", FG_INVALID_GRAPH,
                    "ONNX node 'second' (Identity): input 0 'ghost' names no tensor");
  onnx_expect_error(BAD(), "graph_output_no_tensor", FG_INVALID_GRAPH,
                    "graph output[0] 'z' names no tensor");
}

FG_TEST(onnx_bad_cycles, "onnx,badinput") {
  onnx_expect_error(BAD(), "cycle", FG_INVALID_GRAPH,
                    "ONNX node 'A' (Identity): input 0 'b' is produced by node 'B' (#1), which "
                    "comes later: the graph has a cycle");
  onnx_expect_error(BAD(), "self_loop", FG_INVALID_GRAPH,
                    "ONNX node 'loop' (Identity): input 0 'y' is produced by node 'loop' (#0), "
                    "this node itself");
}

FG_TEST(onnx_bad_duplicate_outputs, "onnx,badinput") {
  onnx_expect_error(BAD(), "dup_output", FG_INVALID_GRAPH,
                    "ONNX node 'two' (Identity): output 0 'a' is already produced by node 'one'");
  onnx_expect_error(BAD(), "dup_output_input", FG_INVALID_GRAPH,
                    "ONNX node 'over' (Identity): output 0 'x' is already produced by a graph "
                    "input");
  onnx_expect_error(BAD(), "dup_graph_output", FG_INVALID_GRAPH,
                    "graph output 'y' is listed twice (outputs 0 and 1)");
}

FG_TEST(onnx_bad_opsets, "onnx,badinput") {
  onnx_expect_error(BAD(), "opset_99", FG_UNSUPPORTED,
                    "opset 99 of the default domain (opset_import[0]) is outside the opsets "
                    "flowgraph reads (7 to 17)");
  onnx_expect_error(BAD(), "opset_0", FG_UNSUPPORTED, "opset 0 of the default domain");
  onnx_expect_error(BAD(), "opset_none", FG_UNSUPPORTED,
                    "opset_import declares no opset of the default domain");
}

FG_TEST(onnx_bad_external_paths, "onnx,badinput") {
  onnx_expect_error(BAD(), "ext_dotdot", FG_INVALID_GRAPH,
                    "initializer 'ext': external data location '../weights.bin' leaves the "
                    "model's folder");
  onnx_expect_error(BAD(), "ext_dotdot_inner", FG_INVALID_GRAPH,
                    "'sub/../../weights.bin' leaves the model's folder");
  onnx_expect_error(BAD(), "ext_absolute", FG_INVALID_GRAPH,
                    "external data location '/etc/passwd' leaves the model's folder");
  onnx_expect_error(BAD(), "ext_symlink", FG_INVALID_GRAPH,
                    "external data 'escape.bin' leads out of the model's folder");
  onnx_expect_error(BAD(), "ext_no_location", FG_INVALID_GRAPH,
                    "initializer 'ext': external data without a location");
}

FG_TEST(onnx_bad_external_sizes, "onnx,badinput") {
  onnx_expect_error(BAD(), "ext_length", FG_FORMAT_ERROR,
                    "external data length 20 disagrees with its dims (24 bytes)");
  onnx_expect_error(BAD(), "ext_offset", FG_FORMAT_ERROR,
                    "external data 'weights.bin' has 48 bytes; offset 40 + 24 bytes runs past "
                    "its end");
  onnx_expect_error(BAD(), "ext_offset_text", FG_FORMAT_ERROR,
                    "external data offset '-5' is not a count");
  onnx_expect_error(BAD(), "ext_missing", FG_NOT_FOUND,
                    "ONNX node 'use_ext' (Identity): initializer 'ext': external data "
                    "'nothere.bin'");
}

/* External data inside the folder is read, offset and length honoured;
 * the expected values are the ones the script wrote into the file. */
FG_TEST(onnx_external_data_read, "onnx") {
  onnx_check_case(BAD(), "ext_ok", NULL, 0, 0);
  onnx_check_case(BAD(), "ext_subdir", NULL, 0, 0);
  /* From memory: only with a folder to read from. */
  const char *d = BAD();
  char path[1024];
  size_t n = 0;
  void *bytes = case_bytes("ext_ok", path, sizeof path, &n);
  FG_REQUIRE(d && bytes);
  fg_status *st = fg_status_new();
  FG_CHECK(fg_onnx_load_memory(bytes, n, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "fg_onnx_options.base_dir");
  fg_onnx_options o;
  fg_onnx_options_init(&o);
  o.base_dir = d;
  fg_graph *g = fg_onnx_load_memory(bytes, n, &o, st);
  FG_CHECK(g != NULL);
  fg_graph_free(g);
  /* A base_dir elsewhere: the file is not there. */
  o.base_dir = FG_SOURCE_DIR;
  FG_CHECK(fg_onnx_load_memory(bytes, n, &o, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);
  free(bytes);
  fg_status_free(st);
}

/* Initializers of 4 KiB and more are read from the file into the graph's
 * tensors, after the rest of the file is decoded without them: the values
 * the script wrote (y = x + w + b); w's raw_data given twice (protobuf
 * keeps the last) and two graph fields (protobuf merges them), which the
 * file-backed read leaves to a whole decode; and the graph's w holds the
 * same bytes as one imported from memory. */
FG_TEST(onnx_big_raw_read_from_file, "onnx") {
  onnx_check_case(BAD(), "big_raw_ok", NULL, 0, 0);
  onnx_check_case(BAD(), "big_raw_twice", NULL, 0, 0);
  onnx_check_case(BAD(), "big_graph_twice", NULL, 0, 0);
  char path[1024];
  size_t n = 0;
  void *bytes = case_bytes("big_raw_ok", path, sizeof path, &n);
  FG_REQUIRE(bytes);
  fg_status *st = fg_status_new();
  fg_graph *a = fg_onnx_load(path, NULL, st), *b = fg_onnx_load_memory(bytes, n, NULL, st);
  FG_REQUIRE(a && b);
  const fg_tensor *ta = NULL, *tb = NULL;
  FG_REQUIRE(fg_node_attr_tensor(a, fg_graph_find(a, "w"), "value", &ta) == 0 && ta);
  FG_REQUIRE(fg_node_attr_tensor(b, fg_graph_find(b, "w"), "value", &tb) == 0 && tb);
  FG_CHECK_INT(fg_tensor_num_elements(ta), 64 * 64);
  FG_CHECK(fg_tensor_num_bytes(ta) == fg_tensor_num_bytes(tb) &&
           memcmp(fg_tensor_data(ta), fg_tensor_data(tb), fg_tensor_num_bytes(ta)) == 0);
  fg_graph_free(a);
  fg_graph_free(b);
  fg_status_free(st);
  free(bytes);
}

/* A large raw_data longer than its dims, a file cut inside one, a varint
 * of more than 64 bits and a graph output of the wrong wire type in a
 * file with a large initializer: the messages a whole decode gives, at
 * the file's byte (big_bad_output.at.npy: where the script wrote it). */
FG_TEST(onnx_bad_big_raw, "onnx,badinput") {
  onnx_expect_error(BAD(), "big_varint_65_bits", FG_FORMAT_ERROR,
                    "ModelProto.ir_version at byte 0: a varint is truncated or longer than 10 "
                    "bytes");
  const char *d = BAD();
  FG_REQUIRE(d);
  char path[1024], want[256];
  snprintf(path, sizeof path, "%s/big_bad_output.at.npy", d);
  fg_status *st = fg_status_new();
  fg_tensor *at = fg_npy_read(path, st);
  FG_REQUIRE(at && fg_tensor_dtype(at) == FG_I64);
  snprintf(want, sizeof want, "ModelProto.graph.output[1] at byte %lld: wire type varint",
           (long long)*(const int64_t *)fg_tensor_data(at));
  onnx_expect_error(d, "big_bad_output", FG_FORMAT_ERROR, want);
  fg_tensor_free(at);
  fg_status_free(st);
  onnx_expect_error(BAD(), "big_raw_long", FG_FORMAT_ERROR,
                    "initializer 'w': raw_data has 16388 bytes but its dims give 4096 elements of "
                    "4 bytes (16384)");
  onnx_expect_error(BAD(), "big_raw_truncated", FG_FORMAT_ERROR,
                    "ModelProto.graph at byte 2: a length of 16765 bytes runs past the end (1070 "
                    "bytes left)");
}

FG_TEST(onnx_bad_attribute_type, "onnx,badinput") {
  onnx_expect_error(BAD(), "attr_type", FG_INVALID_GRAPH,
                    "ONNX node 'caster' (Cast): attribute 'to' is FLOAT, expected INT");
  onnx_expect_error(BAD(), "attr_constant_type", FG_INVALID_GRAPH,
                    "ONNX node 'konst' (Constant): attribute 'value' is INT, expected TENSOR");
}

FG_TEST(onnx_bad_empty_graph, "onnx,badinput") {
  onnx_expect_error(BAD(), "empty_graph", FG_INVALID_GRAPH, "the graph has no outputs");
  onnx_expect_error(BAD(), "no_graph", FG_INVALID_GRAPH, "the model has no graph");
  fg_status *st = fg_status_new();
  FG_CHECK(fg_onnx_load_memory("", 0, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_FORMAT_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "the file is empty");
  fg_status_free(st);
}

FG_TEST(onnx_bad_length_prefix, "onnx,badinput") {
  onnx_expect_error(BAD(), "length_2gb", FG_FORMAT_ERROR,
                    "ModelProto.graph at byte 8: a length of 2147483648 bytes runs past the end "
                    "(64 bytes left)");
  onnx_expect_error(BAD(), "length_huge", FG_FORMAT_ERROR,
                    "a length of 18446744073709551615 bytes runs past the end");
  onnx_expect_error(BAD(), "length_2gb_inner", FG_FORMAT_ERROR,
                    "ModelProto.graph.initializer[0].int64_data[0] at byte 17: a length of "
                    "2147483648 bytes");
}

FG_TEST(onnx_bad_deep_nesting, "onnx,badinput") {
  onnx_expect_error(BAD(), "deep_nesting", FG_FORMAT_ERROR, "messages nest deeper than 32 levels");
  onnx_expect_error(BAD(), "deep_nesting", FG_FORMAT_ERROR, "ModelProto.graph.node[0].attribute");
}
