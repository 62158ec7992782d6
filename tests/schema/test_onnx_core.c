/* The ONNX importer core: model structure (initializers, inputs, outputs,
 * names, metadata, opsets, dtypes) and the core ops (Constant, Identity,
 * Cast, Shape, ConstantOfShape, Range, Dropout). Expected values come from
 * tests/schema/onnx/cases_core.py (NumPy), never from flowgraph. */
#include "fgtest.h"
#include "flowgraph/io.h"
#include "flowgraph/onnx.h"
#include "onnx_test_util.h"
#include "schema/onnx/onnx_import.h"
#include "schema/onnx/onnx_internal.h"

#define CORE() onnx_cases("cases_core.py")

/* Cases compared with NumPy's values, one test each. */
#define CASE(name)                                                                                 \
  FG_TEST(onnx_core_##name, "onnx") { onnx_check_case(CORE(), #name, NULL, 0, 0); }

CASE(identity)
CASE(identity_batch)
CASE(passthrough)
CASE(constant_value)
CASE(constant_float)
CASE(constant_floats)
CASE(constant_int)
CASE(constant_ints)
CASE(constant_double_typed)
CASE(initializers)
CASE(initializer_output)
CASE(cast_f32_i64)
CASE(cast_f32_i32)
CASE(cast_f32_f64)
CASE(cast_f32_bool)
CASE(cast_f32_f32)
CASE(cast_i64_f32)
CASE(cast_known)
CASE(shape)
CASE(shape_start)
CASE(shape_start_end)
CASE(shape_clamped)
CASE(shape_empty)
CASE(constant_of_shape)
CASE(constant_of_shape_default)
CASE(constant_of_shape_big)
CASE(range_i64)
CASE(range_f32)
CASE(range_i32)
CASE(range_empty)
CASE(range_i64_big)
CASE(names_many)
CASE(dropout13)
CASE(dropout7)
CASE(dropout12_plain)
CASE(names)
CASE(metadata)
CASE(colon_names)

static fg_graph *load_case(const char *name, const fg_onnx_options *opts) {
  const char *dir = CORE();
  if (!dir) return NULL;
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_onnx_load(path, opts, st);
  if (!g) FG_FAIL_AT("%s: %s", name, fg_status_message(st));
  fg_status_free(st);
  return g;
}

/* A model exported with a dynamic batch runs with any batch size. */
FG_TEST(onnx_core_any_batch, "onnx") {
  fg_graph *g = load_case("identity_batch", NULL);
  FG_REQUIRE(g);
  int64_t dims[FG_MAX_RANK];
  FG_CHECK_INT(fg_output_shape(g, fg_graph_find_output(g, "x"), dims), 2);
  FG_CHECK_INT(dims[0], FG_DIM_UNKNOWN);
  FG_CHECK_INT(dims[1], 3);
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  for (int64_t b = 1; b <= 9; b += 4) {
    int64_t shape[2] = {b, 3};
    fg_tensor *x = fg_tensor_new(FG_F32, 2, shape, st);
    float *xd = fg_tensor_data(x);
    for (int64_t i = 0; i < b * 3; i++)
      xd[i] = (float)i * 0.5f - 1.0f;
    fg_feed feed = {"x", x};
    const char *fetch = "y";
    fg_tensor *y = NULL;
    FG_CHECK_INT(fg_session_run(s, &feed, 1, &fetch, 1, &y, NULL, 0, st), 0);
    if (y) {
      FG_CHECK_INT(fg_tensor_dim(y, 0), b);
      for (int64_t i = 0; i < b * 3; i++)
        FG_CHECK_NEAR(((float *)fg_tensor_data(y))[i], (double)i * 0.5 - 1.0, 0);
    }
    fg_tensor_free(x);
    fg_tensor_free(y);
  }
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

/* Repeated and missing node names are made unique; graph outputs are
 * fetchable by their ONNX names. */
FG_TEST(onnx_core_node_names, "onnx") {
  fg_graph *g = load_case("names", NULL);
  FG_REQUIRE(g);
  /* node 0 "dup" keeps its name; node 1 (also "dup") makes graph output
   * "b" and takes that name; node 2 has none: "Identity_2"; node 3 makes
   * "y". */
  int dup = fg_graph_find(g, "dup");
  FG_CHECK(dup >= 0);
  FG_CHECK_STR(fg_node_op(g, dup), "identity");
  FG_CHECK(fg_graph_find(g, "Identity_2") >= 0);
  FG_CHECK(fg_graph_find(g, "y") >= 0);
  FG_CHECK(fg_graph_find(g, "b") >= 0);
  FG_CHECK(fg_graph_find(g, "last") < 0); /* renamed to its output's name */
  FG_CHECK_INT(fg_graph_num_outputs(g), 2);
  FG_CHECK_STR(fg_node_name(g, fg_graph_output(g, 0).node), "y");
  FG_CHECK_STR(fg_node_name(g, fg_graph_output(g, 1).node), "b");
  fg_graph_free(g);
  g = load_case("names_many", NULL);
  FG_REQUIRE(g);
  const char *want[] = {"same", "same_2", "same_3", "same_4", "same_5", "y"};
  for (int i = 0; i < 6; i++) {
    int id = fg_graph_find(g, want[i]);
    FG_CHECK(id >= 0);
    if (id >= 0) FG_CHECK_STR(fg_node_op(g, id), "identity");
  }
  FG_CHECK_INT(fg_graph_num_nodes(g), 7); /* with the placeholder */
  fg_graph_free(g);
  /* ':' is flowgraph's node:index separator: names carry '_' instead. */
  g = load_case("colon_names", NULL);
  FG_REQUIRE(g);
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "in__x")), "placeholder");
  FG_CHECK(fg_graph_find(g, "onnx__y") >= 0);
  fg_graph_free(g);
}

FG_TEST(onnx_core_metadata_keys, "onnx") {
  fg_graph *g = load_case("metadata", NULL);
  FG_REQUIRE(g);
  FG_CHECK_STR(fg_graph_metadata(g, "onnx.producer_name"), "cases_core");
  FG_CHECK_STR(fg_graph_metadata(g, "onnx.producer_version"), "1.2.3");
  FG_CHECK_STR(fg_graph_metadata(g, "onnx.domain"), "org.flowgraph.test");
  FG_CHECK_STR(fg_graph_metadata(g, "onnx.model_version"), "42");
  FG_CHECK_STR(fg_graph_metadata(g, "onnx.doc_string"), "model docs");
  FG_CHECK_STR(fg_graph_metadata(g, "onnx.graph.doc_string"), "graph docs");
  FG_CHECK_STR(fg_graph_metadata(g, "onnx.graph.name"), "g_name");
  FG_CHECK_STR(fg_graph_metadata(g, "onnx.metadata_props.author"), "tests");
  FG_CHECK_STR(fg_graph_metadata(g, "onnx.metadata_props.license"), "MIT");
  FG_CHECK_STR(fg_graph_metadata(g, "onnx.opset"), "13");
  fg_graph_free(g);
}

/* Initializers are constants; with `trainable`, the floating-point ones
 * are variables (integer and bool ones stay constants). */
FG_TEST(onnx_core_trainable, "onnx") {
  /* Without it, Identity of an initializer folds at import. */
  fg_graph *g = load_case("initializers", NULL);
  FG_REQUIRE(g);
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "w_raw_out")), "constant");
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "d_typed_out")), "constant");
  FG_CHECK(fg_graph_find(g, "w_raw") < 0);
  fg_graph_free(g);
  fg_onnx_options o;
  fg_onnx_options_init(&o);
  FG_CHECK_INT(o.trainable, 0);
  FG_CHECK(o.base_dir == NULL);
  o.trainable = 1;
  g = load_case("initializers", &o);
  FG_REQUIRE(g);
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "w_raw")), "variable");
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "w_typed")), "variable");
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "d_typed")), "variable");
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "scalar")), "variable");
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "w_raw_out")), "identity");
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "i64_raw_out")), "constant");
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "b_typed_out")), "constant");
  FG_CHECK(fg_graph_find(g, "i64_raw") < 0);
  fg_graph_free(g);
  /* and the values are the same */
  onnx_check_case(CORE(), "initializers", &o, 0, 0);
}

FG_TEST(onnx_core_errors, "onnx") {
  const char *d = CORE();
  onnx_expect_error(d, "err_uint8_init", FG_UNSUPPORTED, "uint8 (ONNX TensorProto.UINT8)");
  onnx_expect_error(d, "err_uint8_init", FG_UNSUPPORTED, "initializer 'w8'");
  onnx_expect_error(d, "err_uint8_input", FG_UNSUPPORTED,
                    "graph input 'x' has elem_type uint8 (ONNX TensorProto.UINT8)");
  onnx_expect_error(d, "err_symbolic_dim", FG_UNSUPPORTED, "dimension 1 is symbolic ('S')");
  onnx_expect_error(d, "err_opset6", FG_UNSUPPORTED, "opset 6 of the default domain");
  onnx_expect_error(d, "err_opset18", FG_UNSUPPORTED, "opset 18 of the default domain");
  onnx_expect_error(d, "err_shape_batch", FG_UNIMPLEMENTED, "unknown batch size");
  onnx_expect_error(d, "err_cast_to_f16", FG_UNSUPPORTED,
                    "ONNX node 'to_half' (Cast): attribute 'to' is float16");
  onnx_expect_error(d, "err_dropout_training", FG_UNIMPLEMENTED,
                    "ONNX node 'drop' (Dropout): training_mode is true");
  onnx_expect_error(d, "err_constant_sparse", FG_UNSUPPORTED, "'value_string'");
}

/* What value_info and the graph outputs declare is checked against what
 * the nodes compute (dtype, rank, every dim known on both sides). */
FG_TEST(onnx_core_declared_types_checked, "onnx") {
  const char *d = CORE();
  onnx_expect_error(d, "err_declared_shape", FG_INVALID_GRAPH,
                    "ONNX node 'ident' (Identity): output 0 'y' has shape [2,3] here, but the "
                    "model declares [3,2]");
  onnx_expect_error(d, "err_declared_dtype", FG_INVALID_GRAPH,
                    "ONNX node 'caster' (Cast): output 0 'y' is i64 here, but the model declares "
                    "float32 (ONNX TensorProto.FLOAT)");
  onnx_expect_error(d, "err_declared_value_info", FG_INVALID_GRAPH,
                    "ONNX node 'first' (Identity): output 0 'a' has shape [2,3] here, but the "
                    "model declares [2,4]");
}

/* Every op with no mapping is listed at once, with node, domain and opset. */
FG_TEST(onnx_core_unmapped_listed, "onnx") {
  const char *d = CORE();
  onnx_expect_error(d, "err_unmapped", FG_UNIMPLEMENTED, "2 ONNX op types with no mapping");
  onnx_expect_error(d, "err_unmapped", FG_UNIMPLEMENTED,
                    "FooBar (domain '', opset 13) at node 'f1' and 1 more");
  onnx_expect_error(d, "err_unmapped", FG_UNIMPLEMENTED,
                    "Baz (domain 'com.example', opset 3) at node 'z1'");
}

/* A type in two mapper tables would map by whichever table comes first. */
FG_TEST(onnx_core_tables_disjoint, "onnx") {
  const fgx_op *tables[] = {fgx_ops_core, fgx_ops_nn, fgx_ops_math, fgx_ops_tensor};
  int total = 0;
  for (int a = 0; a < 4; a++)
    for (const fgx_op *x = tables[a]; x->type; x++) {
      total++;
      FG_CHECK(x->map != NULL);
      for (int b = a; b < 4; b++)
        for (const fgx_op *y = b == a ? x + 1 : tables[b]; y->type; y++)
          if (strcmp(x->type, y->type) == 0) FG_FAIL_AT("ONNX op %s is mapped twice", x->type);
    }
  FG_CHECK(total >= 7);
}

FG_TEST(onnx_core_memory_and_sniff, "onnx") {
  const char *dir = CORE();
  FG_REQUIRE(dir);
  char path[1024];
  snprintf(path, sizeof path, "%s/identity.onnx", dir);
  FILE *f = fopen(path, "rb");
  FG_REQUIRE(f);
  unsigned char buf[4096];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  FG_CHECK_INT(fg_onnx_available(), 1);
  FG_CHECK_INT(fg_onnx_sniff(buf, n), 1);
  FG_CHECK_INT(fg_onnx_sniff(buf, 16), 1); /* a prefix is enough */
  fg_status *st = fg_status_new();
  fg_graph *g = fg_onnx_load_memory(buf, n, NULL, st);
  FG_CHECK(g != NULL);
  FG_CHECK_INT(fg_status_code(st), FG_OK);
  fg_graph_free(g);
  /* .fgb, JSON and text are not ONNX */
  fg_graph *fg = fg_graph_new();
  fg_output x = fg_placeholder(fg, "x", FG_F32, 1, (int64_t[]){3});
  fg_graph_add_output(fg, fg_relu(fg, x));
  char fgb[1024];
  snprintf(fgb, sizeof fgb, "%s/onnx_core_sniff.fgb", FG_BUILD_DIR);
  FG_REQUIRE(fg_graph_save(fg, fgb, st) == 0);
  fg_graph_free(fg);
  f = fopen(fgb, "rb");
  FG_REQUIRE(f);
  n = fread(buf, 1, 64, f);
  fclose(f);
  remove(fgb);
  FG_CHECK_INT(fg_onnx_sniff(buf, n), 0);
  FG_CHECK_INT(fg_onnx_sniff("{\"nodes\": []}", 13), 0);
  FG_CHECK_INT(fg_onnx_sniff("hello world, not a model", 24), 0);
  FG_CHECK_INT(fg_onnx_sniff(NULL, 10), 0);
  FG_CHECK_INT(fg_onnx_sniff("\x08\x07", 2), 0); /* ir_version alone: too little */
  /* NULL data, missing files */
  FG_CHECK(fg_onnx_load_memory(NULL, 10, NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK(fg_onnx_load("/nonexistent/model.onnx", NULL, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "/nonexistent/model.onnx");
  FG_CHECK(fg_onnx_load(dir, NULL, st) == NULL); /* a folder */
  FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
  fg_status_free(st);
}

/* An initializer's bytes go to the graph on first use and the decoded
 * message's copy is freed (onnx_values.c): converting it again, which a
 * mapper could ask for after the graph refused a node, is refused with a
 * message, not read from the freed field. */
FG_TEST(onnx_core_initializer_converted_twice_refused, "onnx,badinput") {
  fgx_ctx c;
  memset(&c, 0, sizeof c);
  c.st = fg_status_new();
  c.node = -1;
  Onnx__TensorProto tp;
  onnx__tensor_proto__init(&tp);
  int64_t dims[1] = {2};
  float two[2] = {1.5f, -2.0f};
  tp.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, tp.has_data_type = 1;
  tp.n_dims = 1, tp.dims = dims;
  tp.has_raw_data = 1, tp.raw_data.len = sizeof two, tp.raw_data.data = (uint8_t *)two;
  fg_tensor *t = fgx_tensor_from_proto(&c, NULL, &tp, "initializer 'w'");
  FG_REQUIRE(t);
  FG_CHECK(((const float *)fg_tensor_data(t))[1] == -2.0f);
  fg_tensor_free(t);
  tp.raw_data.data = NULL; /* as after the graph took it */
  FG_CHECK(fgx_tensor_from_proto(&c, NULL, &tp, "initializer 'w'") == NULL);
  FG_CHECK_INT(fg_status_code(c.st), FG_INTERNAL);
  FG_CHECK_STR(fg_status_message(c.st),
               "ONNX model: initializer 'w': its bytes were already given to the graph");
  fg_status_free(c.st);
}
