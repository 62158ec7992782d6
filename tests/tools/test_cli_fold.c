/* The folding passes on the command line: `flowgraph optimize --passes
 * fold,fold_inference` and `plan --passes fold_inference`, with what they
 * did (by hand from the model). */
#include "test_cli_train_util.h"

static fg_output vec(fg_graph *g, const char *name, float v) {
  int64_t d[1] = {1};
  fg_tensor *t = fg_tensor_from_data(FG_F32, 1, d, &v, sizeof v, NULL);
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* x [1,1,2,2] -> conv(w) -> batch_norm(constants, false) -> dropout(false)
 * -> + (c1 * c2) = "out" (marked): 14 nodes. fold makes k = c1 * c2 a
 * constant; fold_inference folds bn into a conv2d (removing conv) and
 * removes the dropout; dce then drops c1, c2, g, m, v, the flag, drop:
 * x, w, b, bn, k, out remain. */
static int build_conv_bn(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t dx[4] = {1, 1, 2, 2}, dw[4] = {1, 1, 1, 1};
  float w = 2;
  unsigned char f = 0;
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, dx);
  fg_tensor *tw = fg_tensor_from_data(FG_F32, 4, dw, &w, sizeof w, NULL);
  fg_tensor *tf = fg_tensor_from_data(FG_BOOL, 0, NULL, &f, 1, NULL);
  fg_output cw = fg_constant(g, "w", tw), fl = fg_constant(g, "false", tf);
  fg_tensor_free(tw);
  fg_tensor_free(tf);
  fg_output conv = fg_set_name(g, fg_conv2d(g, x, cw, (fg_output){-1, 0}, NULL), "conv");
  fg_output in[6] = {conv, vec(g, "g", 3), vec(g, "b", 1), vec(g, "m", 0.5f), vec(g, "v", 3), fl};
  fg_output bn = fg_op(g, "batch_norm", "bn", in, 6, NULL);
  fg_output drop = fg_set_name(g, fg_dropout(g, bn, fl, 0.5, 1), "drop");
  fg_output k = fg_set_name(g, fg_mul(g, vec(g, "c1", 1.5f), vec(g, "c2", 4)), "k");
  fg_graph_add_output(g, fg_set_name(g, fg_add(g, drop, k), "out"));
  int rc = save_graph(g, path, 0);
  fg_graph_free(g);
  return rc;
}

FG_TEST(cli_optimize_folds, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_conv_bn(tpath("m.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "optimize", tpath("m.fgb"), "-o", tpath("o.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "  fold: 0 removed, 0 merged, 0 simplified, 1 folded, 0 fused\n"
                               "    folded k -> k\n");
  FG_CHECK_STR_CONTAINS(r.out,
                        "  fold_inference: 1 removed, 0 merged, 0 simplified, 2 folded, 0 fused\n");
  FG_CHECK_STR_CONTAINS(r.out, "    folded drop -> bn (dropout in inference mode)\n");
  FG_CHECK_STR_CONTAINS(r.out, "    folded bn -> bn (batch_norm(conv2d) into conv2d)\n");
  FG_CHECK_STR_CONTAINS(r.out, "    removed conv\n");
  FG_CHECK_STR_CONTAINS(r.out, ": 6 nodes (was 14)\n");
  result_free(&r);
  fg_status *st = fg_status_new();
  fg_graph *o = fg_graph_load(tpath("o.fgb"), st);
  FG_REQUIRE(o);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "bn")), "conv2d");
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "k")), "constant");
  fg_graph_free(o);
  fg_status_free(st);
  /* One pass by name; the other passes do nothing. */
  FG_REQUIRE(cli(&r, "optimize", tpath("m.fgb"), "-o", tpath("p.fgb"), "--passes", "fold_inference",
                 NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "passes: fold_inference\n");
  FG_CHECK_STR_CONTAINS(r.out, "  fold: 0 removed, 0 merged, 0 simplified, 0 folded, 0 fused\n");
  FG_CHECK_STR_CONTAINS(r.out,
                        "  fold_inference: 1 removed, 0 merged, 0 simplified, 2 folded, 0 fused\n");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_plan_passes_fold_inference, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_conv_bn(tpath("m.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(
      cli(&r, "plan", "--passes", "fold_inference", tpath("m.fgb"), "--random-inputs", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK(strncmp(r.out, "passes: fold_inference\n", 23) == 0);
  FG_CHECK_STR_CONTAINS(r.out, "    folded drop -> bn (dropout in inference mode)\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "help", "optimize", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "fold_inference");
  result_free(&r);
  fgt_rmtree(tmpdir);
}
