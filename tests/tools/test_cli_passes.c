/* `flowgraph optimize`, `plan --passes`, and --passes/--no-passes on the
 * commands that make sessions: what the passes did (by hand from the
 * model), the saved graph, results equal with and without, and refusals
 * (exit 2 naming the unknown pass). */
#include "test_cli_train_util.h"

/* x [?,3]; y = x*1; a = exp(y), b = exp(y); out = a + b (marked output);
 * unused = tanh(x). The passes: y simplified to x, b merged into a, a
 * fused into out (exp(x); add(t0, t0)), and dce removes the constant 1, a
 * and unused: x and out remain. */
static int build_redundant(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {FG_DIM_UNKNOWN, 3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  fg_output y = fg_set_name(g, fg_mul(g, x, fg_scalar(g, FG_F32, 1.0)), "y");
  fg_output a = fg_set_name(g, fg_exp(g, y), "a"), b = fg_set_name(g, fg_exp(g, y), "b");
  fg_graph_add_output(g, fg_set_name(g, fg_add(g, a, b), "out"));
  fg_set_name(g, fg_tanh(g, x), "unused");
  int rc = save_graph(g, path, 0);
  fg_graph_free(g);
  return rc;
}

FG_TEST(cli_optimize_saves_the_optimized_graph, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_redundant(tpath("m.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "optimize", tpath("m.fgb"), "-o", tpath("o.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "  simplify: 0 removed, 0 merged, 1 simplified, 0 folded, 0 fused\n"
                               "    simplified y -> x (x*1)\n");
  FG_CHECK_STR_CONTAINS(
      r.out, "  cse: 0 removed, 1 merged, 0 simplified, 0 folded, 0 fused\n    merged b -> a\n");
  FG_CHECK_STR_CONTAINS(r.out, "  fuse: 0 removed, 0 merged, 0 simplified, 0 folded, 1 fused\n"
                               "    fused out -> fused_elementwise (exp+add)\n"
                               "    absorbed a -> out\n");
  FG_CHECK_STR_CONTAINS(r.out, "  dce: 3 removed, 0 merged, 0 simplified, 0 folded, 0 fused\n");
  FG_CHECK_STR_CONTAINS(r.out, "    removed unused\n");
  FG_CHECK_STR_CONTAINS(r.out, "wrote ");
  FG_CHECK_STR_CONTAINS(r.out, ": 2 nodes (was 7)\n");
  result_free(&r);
  fg_status *st = fg_status_new();
  fg_graph *o = fg_graph_load(tpath("o.fgb"), st);
  FG_REQUIRE(o);
  FG_CHECK_INT(fg_graph_num_nodes(o), 2);
  int out = fg_graph_find(o, "out");
  FG_REQUIRE(out >= 0);
  FG_CHECK_STR(fg_node_op(o, out), "fused_elementwise");
  FG_CHECK_INT(fg_node_num_inputs(o, out), 1);
  FG_CHECK_STR(fg_node_name(o, fg_node_input(o, out, 0).node), "x");
  const char *prog = NULL;
  FG_CHECK_INT(fg_node_attr_string(o, out, "program", &prog), 0);
  FG_CHECK_STR(prog ? prog : "", "exp(x0); add(t0, t0)");
  FG_CHECK_INT(fg_graph_num_outputs(o), 1);
  fg_graph_free(o);
  /* --no-passes saves the graph as it was; --passes dce removes only unused. */
  FG_REQUIRE(cli(&r, "optimize", tpath("m.fgb"), "-o", tpath("n.fgb"), "--no-passes", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "passes: off\nwrote ");
  FG_CHECK_STR_CONTAINS(r.out, ": 7 nodes (was 7)\n");
  result_free(&r);
  FG_REQUIRE(
      cli(&r, "optimize", tpath("m.fgb"), "-o", tpath("d.fgb"), "--passes=dce", "-q", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_INT(strlen(r.out), 0);
  result_free(&r);
  o = fg_graph_load(tpath("d.fgb"), st);
  FG_REQUIRE(o);
  FG_CHECK_INT(fg_graph_num_nodes(o), 6);
  FG_CHECK(fg_graph_find(o, "unused") < 0);
  fg_graph_free(o);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_plan_passes_prints_what_they_did, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_redundant(tpath("m.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "plan", "--passes", tpath("m.fgb"), "--random-inputs", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK(strncmp(r.out, "passes: default\n", 16) == 0);
  FG_CHECK_STR_CONTAINS(r.out, "    merged b -> a\n");
  FG_CHECK_STR_CONTAINS(r.out, "    fused out -> fused_elementwise (exp+add)\n");
  /* The plan itself: exp once, add, fused into one step. */
  FG_CHECK_STR_CONTAINS(r.out, ": 1 steps,");
  result_free(&r);
  FG_REQUIRE(cli(&r, "plan", "--passes", "cse", tpath("m.fgb"), "--random-inputs", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK(strncmp(r.out, "passes: cse\n", 12) == 0);
  FG_CHECK_STR_CONTAINS(r.out,
                        "  simplify: 0 removed, 0 merged, 0 simplified, 0 folded, 0 fused\n");
  FG_CHECK_STR_CONTAINS(r.out, ": 3 steps,"); /* mul, exp, add */
  result_free(&r);
  FG_REQUIRE(cli(&r, "plan", tpath("m.fgb"), "--random-inputs", "--no-passes", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK(strstr(r.out, "passes:") == NULL);
  FG_CHECK_STR_CONTAINS(r.out, ": 4 steps,"); /* mul, exp, exp, add */
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* 1 when both files exist and hold the same bytes. */
static int same_file(const char *p, const char *q) {
  FILE *a = fopen(p, "rb"), *b = fopen(q, "rb");
  int same = a && b, ca = 0, cb = 0;
  while (same && (ca = fgetc(a)) == (cb = fgetc(b)) && ca != EOF) {
  }
  same = same && ca == cb;
  if (a) fclose(a);
  if (b) fclose(b);
  return same;
}

FG_TEST(cli_run_same_bytes_with_and_without_passes, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_redundant(tpath("m.fgb")) == 0);
  cli_result r;
  char on[600], off[600];
  snprintf(on, sizeof on, "out=%s", tpath("on.npy"));
  snprintf(off, sizeof off, "out=%s", tpath("off.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("m.fgb"), "--random-inputs", "--batch", "4", "-o", on, NULL) ==
             0);
  CHECK_OK(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "run", tpath("m.fgb"), "--random-inputs", "--batch", "4", "-o", off,
                 "--no-passes", NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  FG_CHECK(same_file(tpath("on.npy"), tpath("off.npy")));
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_unknown_pass_is_a_usage_error, "badinput") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_redundant(tpath("m.fgb")) == 0);
  const char *cmds[4] = {"run", "plan", "profile", "optimize"};
  for (int i = 0; i < 4; i++) {
    cli_result r;
    int opt = i == 3;
    FG_REQUIRE(cli(&r, cmds[i], tpath("m.fgb"), opt ? "-o" : "--random-inputs",
                   opt ? tpath("x.fgb") : "--passes", opt ? "--passes" : "cse,fuse_all",
                   opt ? "cse,fuse_all" : NULL, NULL) == 0);
    CHECK_USAGE_ERROR(r);
    FG_CHECK_STR_CONTAINS(r.err,
                          "unknown pass 'fuse_all' (known: simplify, fold, fold_inference, "
                          "cse, activations, layer_norm, xent_grad, epilogue, conv_epilogue, "
                          "update_epilogue, "
                          "grad_epilogue, transpose_matmul, fuse, multi_update, dce)");
    result_free(&r);
  }
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tpath("m.fgb"), "--random-inputs", "--passes", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "--passes needs a comma-separated list of passes");
  result_free(&r);
  FG_REQUIRE(cli(&r, "optimize", tpath("m.fgb"), NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "missing -o OUT.fgb");
  result_free(&r);
  FG_REQUIRE(cli(&r, "optimize", tpath("m.fgb"), "-o", tpath("o.fgb"), "--fetch", "nope", NULL) ==
             0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "fetch 'nope'");
  FG_CHECK(!exists(tpath("o.fgb")));
  result_free(&r);
  fgt_rmtree(tmpdir);
}
