/* The CLI on ONNX models: `flowgraph import`, and run, inspect, plan,
 * profile and grad reading .onnx files directly, recognised by content.
 * The models and expected values come from tests/schema/onnx/cases_core.py
 * (NumPy). */
#include "flowgraph/io.h"
#include "test_cli_harness.h"
#include "schema/onnx_test_util.h"

static char case_path[8][1024];
static int case_slot;

/* dir/NAME, in one of a few rotating buffers. */
static const char *cpath(const char *dir, const char *name) {
  char *p = case_path[case_slot++ % 8];
  snprintf(p, sizeof case_path[0], "%s/%s", dir, name);
  return p;
}

/* The .npy at `got` equals the one at `want`, element for element. */
static void check_npy_equal(const char *got, const char *want) {
  fg_status *st = fg_status_new();
  fg_tensor *g = fg_npy_read(got, st), *w = fg_npy_read(want, st);
  FG_CHECK(g && w);
  if (g && w) onnx_compare(got, 0, g, w, 0, 0);
  fg_tensor_free(g);
  fg_tensor_free(w);
  fg_status_free(st);
}

FG_TEST(cli_onnx_import_then_run, "onnx") {
  if (!fg_onnx_available()) FG_SKIP("this flowgraph was built without ONNX");
  const char *d = onnx_cases("cases_core.py");
  FG_REQUIRE(d && make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "import", cpath(d, "identity_batch.onnx"), "-o", tpath("m.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "wrote ");
  FG_CHECK_STR_CONTAINS(r.out, "0 variables");
  result_free(&r);
  char in[1100], out[600];
  snprintf(in, sizeof in, "x=%s", cpath(d, "identity_batch.in.x.npy"));
  snprintf(out, sizeof out, "y=%s", tpath("y.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("m.fgb"), "-i", in, "-o", out, NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  check_npy_equal(tpath("y.npy"), cpath(d, "identity_batch.out.0.npy"));
  /* The JSON form too. */
  FG_REQUIRE(cli(&r, "import", cpath(d, "identity.onnx"), "--output", tpath("m.json"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  FG_CHECK(exists(tpath("m.json")));
  fgt_rmtree(tmpdir);
}

/* run, inspect, plan and profile take the .onnx file itself; the format
 * is told by content, so the name may say anything. */
FG_TEST(cli_onnx_direct_by_content, "onnx") {
  if (!fg_onnx_available()) FG_SKIP("this flowgraph was built without ONNX");
  const char *d = onnx_cases("cases_core.py");
  FG_REQUIRE(d && make_tmpdir());
  size_t n = 0;
  char *bytes = slurp(cpath(d, "identity_batch.onnx"));
  FG_REQUIRE(bytes);
  FILE *f = fopen(cpath(d, "identity_batch.onnx"), "rb");
  FG_REQUIRE(f);
  fseek(f, 0, SEEK_END);
  n = (size_t)ftell(f);
  fclose(f);
  FG_REQUIRE(fgt_write_file(tpath("model.fgb"), bytes, n) == 0);
  free(bytes);
  cli_result r;
  char in[1100], out[600];
  snprintf(in, sizeof in, "x=%s", cpath(d, "identity_batch.in.x.npy"));
  snprintf(out, sizeof out, "y=%s", tpath("y.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("model.fgb"), "-i", in, "-o", out, NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  check_npy_equal(tpath("y.npy"), cpath(d, "identity_batch.out.0.npy"));
  FG_REQUIRE(cli(&r, "inspect", cpath(d, "identity_batch.onnx"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "x: f32 [?,3]");
  FG_CHECK_STR_CONTAINS(r.out, "y: f32 [?,3]");
  FG_CHECK_STR_CONTAINS(r.out, "onnx.opset: 13");
  result_free(&r);
  FG_REQUIRE(cli(&r, "plan", cpath(d, "identity_batch.onnx"), "--random-inputs", "--batch", "4",
                 NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "fetches: y");
  result_free(&r);
  FG_REQUIRE(cli(&r, "profile", cpath(d, "identity_batch.onnx"), "--random-inputs", "--runs", "2",
                 NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "profile of ");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* --trainable: floating-point initializers become variables, so grad can
 * differentiate with respect to them. d sum(identity(w)) / dw = ones. */
FG_TEST(cli_onnx_trainable_grad, "onnx") {
  if (!fg_onnx_available()) FG_SKIP("this flowgraph was built without ONNX");
  const char *d = onnx_cases("cases_core.py");
  FG_REQUIRE(d && make_tmpdir());
  cli_result r;
  FG_REQUIRE(cli(&r, "import", cpath(d, "initializers.onnx"), "-o", tpath("t.fgb"), "--trainable",
                 NULL) == 0);
  CHECK_OK(r);
  /* w_raw, w_typed, d_typed, scalar: the float ones */
  FG_CHECK_STR_CONTAINS(r.out, "4 variables");
  result_free(&r);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(tpath("t.fgb"), st);
  FG_REQUIRE(g);
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "w_raw")), "variable");
  fg_graph_free(g);
  fg_status_free(st);
  FG_REQUIRE(cli(&r, "grad", cpath(d, "initializers.onnx"), "--trainable", "--loss", "w_raw_out",
                 "--wrt", "w_raw", "-o", tpath("g.fgb"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  char out[600];
  snprintf(out, sizeof out, "grad/w_raw=%s", tpath("gw.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("g.fgb"), "-o", out, NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  st = fg_status_new();
  fg_tensor *gw = fg_npy_read(tpath("gw.npy"), st);
  FG_REQUIRE(gw);
  FG_CHECK_INT(fg_tensor_num_elements(gw), 12);
  for (int i = 0; i < 12; i++)
    FG_CHECK_NEAR(((float *)fg_tensor_data(gw))[i], 1.0, 0);
  fg_tensor_free(gw);
  fg_status_free(st);
  /* Without --trainable the weight is a constant folded away: no such node. */
  FG_REQUIRE(cli(&r, "grad", cpath(d, "initializers.onnx"), "--loss", "w_raw_out", "--wrt", "w_raw",
                 "-o", tpath("g2.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "", "w_raw");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_onnx_errors, "onnx") {
  if (!fg_onnx_available()) FG_SKIP("this flowgraph was built without ONNX");
  const char *d = onnx_cases("cases_core.py");
  FG_REQUIRE(d && make_tmpdir());
  cli_result r;
  /* every unmapped op in one line */
  FG_REQUIRE(cli(&r, "run", cpath(d, "err_unmapped.onnx"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "UNIMPLEMENTED", "FooBar (domain '', opset 13) at node 'f1'");
  FG_CHECK_STR_CONTAINS(r.err, "Baz (domain 'com.example', opset 3)");
  result_free(&r);
  FG_REQUIRE(cli(&r, "import", cpath(d, "err_uint8_init.onnx"), "-o", tpath("u.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "UNSUPPORTED", "uint8 (ONNX TensorProto.UINT8)");
  FG_CHECK(!exists(tpath("u.fgb")));
  result_free(&r);
  FG_REQUIRE(cli(&r, "import", tpath("missing.onnx"), "-o", tpath("m.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "missing.onnx");
  result_free(&r);
  /* a damaged file named .onnx gets the ONNX reader's error */
  FG_REQUIRE(fgt_write_file(tpath("bad.onnx"), "\x08\x07\x3a\x7f", 4) == 0);
  FG_REQUIRE(cli(&r, "inspect", tpath("bad.onnx"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "FORMAT_ERROR", "ModelProto.graph");
  result_free(&r);
  /* an ONNX model has no training step of its own */
  char in[1100];
  snprintf(in, sizeof in, "x=%s", cpath(d, "identity_batch.in.x.npy"));
  FG_REQUIRE(cli(&r, "train", cpath(d, "identity_batch.onnx"), "--trainable", "-i", in, "--batch",
                 "1", "--epochs", "1", NULL) == 0);
  FG_CHECK_INT(r.code, 1);
  FG_CHECK_INT(count_lines(r.err), 1);
  result_free(&r);
  /* usage */
  FG_REQUIRE(cli(&r, "import", cpath(d, "identity.onnx"), NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "missing -o OUT.fgb");
  result_free(&r);
  FG_REQUIRE(cli(&r, "import", "-o", tpath("x.fgb"), NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "import", cpath(d, "identity.onnx"), "-o", tpath("x.onnx"), NULL) == 0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "import", cpath(d, "identity.onnx"), "-o", tpath("x.fgb"), "--bogus", NULL) ==
             0);
  CHECK_USAGE_ERROR(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "help", "import", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "--trainable");
  result_free(&r);
  fgt_rmtree(tmpdir);
}
