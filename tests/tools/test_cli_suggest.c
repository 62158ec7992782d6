/* Helpful errors and defaults: suggestions for unknown fetches, ops,
 * attributes, options and commands (fg_closest_name, by edit distance);
 * NAME:N past a node's outputs; --threads out of range; a .fgb named .json
 * and JSON named .fgb; grad's warning for a gradient cut by argmax
 * (fg_gradient_blocked); --random-inputs within the range integer feeds'
 * readers accept. The expected texts are written out by hand. */
#include "flowgraph/autodiff.h"
#include "flowgraph/passes.h"
#include "flowgraph/session.h"
#include "test_cli_harness.h"

FG_TEST(closest_name_by_edit_distance, "") {
  const char *words[] = {"accuracy", "loss",        "probs",      "train",
                         "relu",     "transpose_a", "transpose_b"};
  const int n = 7;
  FG_CHECK_STR(fg_closest_name("acuracy", words, n), "accuracy"); /* one deletion */
  FG_CHECK_STR(fg_closest_name("trian", words, n), "train");      /* one swap */
  FG_CHECK_STR(fg_closest_name("relux", words, n), "relu");       /* one insertion */
  FG_CHECK_STR(fg_closest_name("LOSS", words, n), "loss");        /* case ignored */
  FG_CHECK_STR(fg_closest_name("prbos", words, n), "probs");      /* one swap */
  /* A tie goes to the earlier candidate. */
  FG_CHECK_STR(fg_closest_name("transpose_x", words, n), "transpose_a");
  /* "acrcy" is 3 edits from accuracy: over the limit of 5 / 3 = 1. */
  FG_CHECK(fg_closest_name("acrcy", words, n) == NULL);
  /* 8 characters allow 8 / 3 = 2 edits: one swap, one deletion pass; three
   * substitutions do not. */
  FG_CHECK_STR(fg_closest_name("accurcay", words, n), "accuracy");
  FG_CHECK_STR(fg_closest_name("accuray", words, n), "accuracy");
  FG_CHECK(fg_closest_name("axxurxcy", words, n) == NULL);       /* 3 substitutions */
  FG_CHECK_STR(fg_closest_name("acurac", words, n), "accuracy"); /* 2 insertions, 6 / 3 = 2 */
  FG_CHECK(fg_closest_name("acura", words, n) == NULL);          /* 3 insertions, 5 / 3 = 1 */
  FG_CHECK(fg_closest_name("x", words, n) == NULL);
  FG_CHECK(fg_closest_name("", words, n) == NULL);
  FG_CHECK(fg_closest_name(NULL, words, n) == NULL);
  FG_CHECK(fg_closest_name("loss", NULL, 0) == NULL);
  FG_CHECK_STR(fg_closest_name("loss", words, n), "loss");
}

/* ---- models --------------------------------------------------------------------- */

/* logits = x W (x [?,3], W [3,4] variable), prediction = argmax(logits),
 * accuracy = mean(cast(equal(prediction, cast(y)))), loss =
 * mean(softmax_cross_entropy(logits, y)), blocked = sum(stop_gradient(logits)). */
static int build_classifier(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 3}, yd[1] = {FG_DIM_UNKNOWN}, wd[2] = {3, 4};
  float wv[12] = {0.5f, -0.25f, 0.125f, 1, -0.5f, 0.75f, 0.25f, 0, 0.25f, 0.5f, -1, 0.5f};
  fg_tensor *w = tensor_f32(2, wd, wv);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  fg_output vw = fg_variable(g, "W", w);
  fg_output logits = fg_set_name(g, fg_matmul(g, x, vw, 0, 0), "logits");
  fg_output pred = fg_set_name(g, fg_argmax(g, logits, 1), "prediction");
  fg_output eq = fg_set_name(g, fg_equal(g, pred, fg_cast(g, y, FG_I64)), "eq");
  fg_output acc = fg_set_name(g, fg_reduce_mean(g, fg_cast(g, eq, FG_F32), NULL, 0, 0), "accuracy");
  fg_output xent = fg_softmax_cross_entropy(g, logits, y);
  fg_output loss = fg_set_name(g, fg_reduce_mean(g, xent, NULL, 0, 0), "loss");
  fg_output stop = fg_set_name(g, fg_stop_gradient(g, logits), "stopped");
  fg_set_name(g, fg_reduce_sum(g, stop, NULL, 0, 0), "blocked");
  fg_graph_add_output(g, acc);
  fg_graph_add_output(g, loss);
  fg_tensor_free(w);
  return save_and_free_graph(g, path);
}

FG_TEST(cli_unknown_fetch_suggests, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  FG_REQUIRE(build_classifier(tpath("c.fgb")) == 0);
  char in[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tpath("c.fgb"), "--random-inputs", "--fetch", "acuracy", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "has no such node or output; did you mean 'accuracy'?\n");
  FG_CHECK_STR_CONTAINS(r.err, "fetch 'acuracy': ");
  result_free(&r);
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "--fetch", "probs:1", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND",
                      "no such node or output; node 'probs' (softmax) has one output (probs or "
                      "probs:0)\n");
  result_free(&r);
  /* A typo in the node part keeps the index. */
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "--fetch", "prbs:0", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "did you mean 'probs:0'?\n");
  result_free(&r);
  /* Nothing close: no suggestion. */
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "--fetch", "zzzzzz", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "fetch 'zzzzzz': ");
  FG_CHECK(strstr(r.err, "did you mean") == NULL);
  result_free(&r);
  /* Feeds and targets. */
  char bad_in[600];
  snprintf(bad_in, sizeof bad_in, "xx=%s", tpath("x.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", bad_in, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "feed 'xx': ");
  FG_CHECK_STR_CONTAINS(r.err, "has no node of that name; did you mean 'x'?\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "--target", "prbos", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "has no node of that name; did you mean 'probs'?\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "grad", tpath("c.fgb"), "--loss", "los", "--wrt", "W", "-o", tpath("g.fgb"),
                 NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "loss 'los': ");
  FG_CHECK_STR_CONTAINS(r.err, "did you mean 'loss'?");
  result_free(&r);
  FG_REQUIRE(cli(&r, "grad", tpath("c.fgb"), "--loss", "loss", "--wrt", "w", "-o", tpath("g.fgb"),
                 NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "did you mean 'W'?");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* The library's own messages carry the same hints. */
FG_TEST(library_hints_fetch_op_attribute, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 2};
  fg_output x = fg_placeholder(g, "inputs", FG_F32, 2, d);
  fg_set_name(g, fg_relu(g, x), "activation");
  char hint[200];
  FG_CHECK_STR(fg_graph_output_hint(g, "activaton", hint, sizeof hint),
               "did you mean 'activation'?");
  FG_CHECK_STR(fg_graph_output_hint(g, "activation:2", hint, sizeof hint),
               "node 'activation' (relu) has one output (activation or activation:0)");
  FG_CHECK_STR(fg_graph_output_hint(g, "qqqq", hint, sizeof hint), "");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const char *fetch[1] = {"activatoin"};
  fg_tensor *out[1] = {NULL};
  FG_CHECK(fg_session_run(s, NULL, 0, fetch, 1, out, NULL, 0, st) != 0);
  FG_CHECK_STR(fg_status_message(st),
               "fetch 'activatoin': no such node or output; did you mean 'activation'?");
  int64_t two[2] = {2, 2};
  fg_tensor *t = fg_tensor_new(FG_F32, 2, two, st);
  FG_REQUIRE(t);
  fg_feed feed = {"input", t};
  const char *good[1] = {"activation"};
  FG_CHECK(fg_session_run(s, &feed, 1, good, 1, out, NULL, 0, st) != 0);
  FG_CHECK_STR(fg_status_message(st), "feed 'input': no node of that name; did you mean 'inputs'?");
  fg_tensor_free(t);
  fg_session_free(s);
  FG_CHECK(fg_optimize(g, NULL, fetch, 1, NULL, st) == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "did you mean 'activation'?");
  /* An unknown attribute, then an unknown op: the graph keeps the first. */
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "transpose_aa", 1);
  fg_output in2[2] = {x, x};
  fg_op(g, "matmul", "mm", in2, 2, a);
  fg_attrs_free(a);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "node 'mm' (matmul): unknown attribute 'transpose_aa'; did you mean "
                        "'transpose_a'?; matmul accepts: transpose_a");
  fg_graph_free(g);
  g = fg_graph_new();
  fg_op(g, "relux", "r", NULL, 0, NULL);
  FG_CHECK_INT(fg_graph_status(g, st), FG_UNIMPLEMENTED);
  FG_CHECK_STR(fg_status_message(st), "node 'r': unknown op 'relux'; did you mean 'relu'?");
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(cli_unknown_op_attribute_option_command, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "ops", "relux", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "no op named 'relux'; did you mean 'relu'? (flowgraph ops");
  result_free(&r);
  FG_REQUIRE(cli(&r, "ops", "qqqqqqqq", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "no op named 'qqqqqqqq' (flowgraph ops lists them)");
  result_free(&r);

  /* An attribute misspelt in a JSON file: the loader's message. */
  FG_REQUIRE(cli(&r, "convert", tpath("mlp.fgb"), tpath("m.json"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  char *json = slurp(tpath("m.json"));
  FG_REQUIRE(json);
  char *at = strstr(json, "\"transpose_b\"");
  FG_REQUIRE(at);
  memcpy(at, "\"transpose_x\"", 13);
  FILE *f = fopen(tpath("bad.json"), "wb");
  FG_REQUIRE(f);
  fputs(json, f);
  fclose(f);
  free(json);
  FG_REQUIRE(cli(&r, "inspect", tpath("bad.json"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "", "unknown attribute 'transpose_x'; did you mean 'transpose_a'?");
  result_free(&r);

  /* Options, from the command's own list. */
  FG_REQUIRE(cli(&r, "train", tpath("mlp.fgb"), "--epoch", "3", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  const char *want = "flowgraph train: unknown option '--epoch'; did you mean '--epochs'?\n";
  FG_CHECK(strncmp(r.err, want, strlen(want)) == 0);
  result_free(&r);
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "--fetc=probs", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "unknown option '--fetc=probs'; did you mean '--fetch'?\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "profile", tpath("mlp.fgb"), "--warmpu", "2", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "did you mean '--warmup'?\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "inspect", tpath("mlp.fgb"), "--bogus-option", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "unknown option '--bogus-option'\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "--verison", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "unknown option '--verison'; did you mean '--version'?\n");
  result_free(&r);

  /* Commands. */
  FG_REQUIRE(cli(&r, "trian", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  want = "flowgraph: unknown command 'trian'; did you mean 'train'?\n";
  FG_CHECK(strncmp(r.err, want, strlen(want)) == 0);
  result_free(&r);
  FG_REQUIRE(cli(&r, "help", "frezee", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "unknown command or help topic 'frezee'; did you mean 'freeze'?\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "xyzzy", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "unknown command 'xyzzy'\n");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(cli_threads_range_is_a_usage_error, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  char in[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  const char *bad[] = {"5000", "1025", "-1", "2147483648", "two"};
  const char *cmds[] = {"run", "profile", "train"};
  cli_result r;
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < 5; i++) {
      FG_REQUIRE(cli(&r, cmds[c], tpath("mlp.fgb"), "-i", in, "--threads", bad[i], NULL) == 0);
      CHECK_USAGE_ERROR(r);
      FG_CHECK_STR_CONTAINS(r.err, "--threads needs an integer from 0 (all cores) to 1024\n");
      result_free(&r);
    }
  FG_REQUIRE(cli(&r, "run", tpath("mlp.fgb"), "-i", in, "--threads", "2", NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

static void copy_file(const char *from, const char *to) {
  FILE *f = fopen(from, "rb"), *t = fopen(to, "wb");
  FG_REQUIRE(f && t);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0)
    FG_REQUIRE(fwrite(buf, 1, n, t) == n);
  fclose(f);
  fclose(t);
}

/* The same probs (the same bytes in the .npy) from a model loaded by its
 * content under a name that says otherwise, with one note on stderr. */
FG_TEST(cli_model_recognised_by_content, "") {
  FG_REQUIRE(setup_mlp() == 0);
  char in[600], o[3][600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  cli_result r;
  FG_REQUIRE(cli(&r, "convert", tpath("mlp.fgb"), tpath("real.json"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  copy_file(tpath("mlp.fgb"), tpath("binary.json"));
  copy_file(tpath("real.json"), tpath("text.fgb"));
  const char *models[3] = {tpath("mlp.fgb"), tpath("binary.json"), tpath("text.fgb")};
  char note[3][700];
  note[0][0] = '\0';
  snprintf(note[1], sizeof note[1],
           "flowgraph: note: %s is a binary .fgb file (FlatBuffers identifier FGB1), not JSON; "
           "loading it as .fgb\n",
           models[1]);
  snprintf(note[2], sizeof note[2],
           "flowgraph: note: %s holds JSON, not a binary .fgb file; loading it as JSON\n",
           models[2]);
  for (int m = 0; m < 3; m++) {
    snprintf(o[m], sizeof o[m], "probs=%s/p%d.npy", tmpdir, m);
    FG_REQUIRE(cli(&r, "run", models[m], "-i", in, "-o", o[m], NULL) == 0);
    FG_CHECK_INT(r.code, 0);
    FG_CHECK_STR(r.err, note[m]);
    result_free(&r);
  }
  double h[2][3], logits[2][2], probs[2][2];
  mlp_forward(X, 2, h, logits, probs);
  fg_tensor *ref = read_npy(tpath("p0.npy"));
  check_f32_tensor(ref, 2, 2, &probs[0][0], 1e-6);
  for (int m = 1; m < 3; m++) {
    char p[600];
    snprintf(p, sizeof p, "%s/p%d.npy", tmpdir, m);
    fg_tensor *t = read_npy(p);
    FG_REQUIRE(t && ref);
    FG_CHECK(memcmp(fg_tensor_data(t), fg_tensor_data(ref), 16) == 0);
    fg_tensor_free(t);
  }
  fg_tensor_free(ref);
  /* Neither: the .json reader's own error, one line. */
  FILE *f = fopen(tpath("junk.json"), "wb");
  FG_REQUIRE(f);
  fputs("not a model", f);
  fclose(f);
  FG_REQUIRE(cli(&r, "inspect", tpath("junk.json"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "", "junk.json");
  result_free(&r);
  fgt_rmtree(tmpdir);
}

FG_TEST(grad_warns_when_the_path_is_cut, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_classifier(tpath("c.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "grad", tpath("c.fgb"), "--loss", "accuracy", "--wrt", "W", "-o",
                 tpath("g.fgb"), NULL) == 0);
  FG_CHECK_INT(r.code, 0);
  FG_CHECK_STR(r.err, "flowgraph grad: warning: d accuracy / d W is identically zero: no "
                      "differentiable path from 'W' to 'accuracy'; node 'prediction' (argmax) "
                      "stops the gradient\n");
  FG_CHECK_STR_CONTAINS(r.out, "grad/W: f32 [3,4] (d accuracy / d W)");
  result_free(&r);
  FG_REQUIRE(cli(&r, "grad", tpath("c.fgb"), "--loss", "blocked", "--wrt", "W", "-o",
                 tpath("g2.fgb"), NULL) == 0);
  FG_CHECK_INT(r.code, 0);
  FG_CHECK_STR_CONTAINS(r.err, "node 'stopped' (stop_gradient) stops the gradient\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "grad", tpath("c.fgb"), "--loss", "loss", "--wrt", "W", "-o", tpath("g3.fgb"),
                 NULL) == 0);
  CHECK_OK(r);
  result_free(&r);

  /* The C API's answer, node by node. */
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(tpath("c.fgb"), st);
  FG_REQUIRE(g);
  fg_output w = fg_graph_find_output(g, "W"), x = fg_graph_find_output(g, "x");
  int cut = 7;
  FG_CHECK_INT(fg_gradient_blocked(g, fg_graph_find_output(g, "accuracy"), w, &cut), 1);
  FG_CHECK_INT(cut, fg_graph_find(g, "prediction"));
  FG_CHECK_INT(fg_gradient_blocked(g, fg_graph_find_output(g, "eq"), x, &cut), 1);
  FG_CHECK_INT(cut, fg_graph_find(g, "prediction"));
  FG_CHECK_INT(fg_gradient_blocked(g, fg_graph_find_output(g, "loss"), w, &cut), 0);
  FG_CHECK_INT(cut, -1);
  /* y reaches loss only as integer labels: blocked at the cross-entropy. */
  fg_output y = fg_graph_find_output(g, "y");
  FG_CHECK_INT(fg_gradient_blocked(g, fg_graph_find_output(g, "loss"), y, &cut), 1);
  FG_CHECK_STR(fg_node_op(g, cut), "softmax_cross_entropy");
  /* W does not reach x at all: not blocked, just unconnected. */
  FG_CHECK_INT(fg_gradient_blocked(g, x, w, &cut), 0);
  FG_CHECK_INT(cut, -1);
  FG_CHECK_INT(fg_gradient_blocked(NULL, x, w, &cut), -1);
  FG_CHECK_INT(fg_gradient_blocked(g, (fg_output){999, 0}, w, NULL), -1);
  fg_graph_free(g);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

/* Integer placeholders: `idx` read by one_hot (depth 4), `rows` by gather
 * (a table of 3 rows), `labels` by softmax_cross_entropy (5 classes) and,
 * through a cast, by one_hot of depth 7; `free` by nothing that bounds it.
 * Each is fetched back through an identity. */
static int build_index_model(const char *path) {
  fg_graph *g = fg_graph_new();
  int64_t vd[1] = {FG_DIM_UNKNOWN}, ld[2] = {FG_DIM_UNKNOWN, 5}, td[2] = {3, 2};
  float tv[6] = {1, 2, 3, 4, 5, 6};
  fg_tensor *table = tensor_f32(2, td, tv);
  fg_output idx = fg_placeholder(g, "idx", FG_I32, 1, vd);
  fg_output rows = fg_placeholder(g, "rows", FG_I64, 1, vd);
  fg_output labels = fg_placeholder(g, "labels", FG_I32, 1, vd);
  fg_output logits = fg_placeholder(g, "logits", FG_F32, 2, ld);
  fg_output fr = fg_placeholder(g, "free", FG_I32, 1, vd);
  fg_set_name(g, fg_reduce_sum(g, fg_one_hot(g, idx, 4, FG_F32), NULL, 0, 0), "oh");
  fg_set_name(g, fg_reduce_sum(g, fg_gather(g, fg_constant(g, "table", table), rows), NULL, 0, 0),
              "ga");
  fg_set_name(g, fg_reduce_sum(g, fg_softmax_cross_entropy(g, logits, labels), NULL, 0, 0), "xe");
  fg_set_name(g, fg_one_hot(g, fg_cast(g, labels, FG_I64), 7, FG_F32), "oh7");
  const char *names[4] = {"idx_v", "rows_v", "labels_v", "free_v"};
  fg_output src[4] = {idx, rows, labels, fr};
  for (int i = 0; i < 4; i++)
    fg_set_name(g, fg_identity(g, src[i]), names[i]);
  fg_tensor_free(table);
  return save_and_free_graph(g, path);
}

/* Every value of an integer .npy in [0, bound), and every value of that
 * range drawn at least once. */
static void check_range(const char *path, int64_t bound) {
  fg_tensor *t = read_npy(path);
  FG_REQUIRE(t);
  int seen[16] = {0};
  const int64_t n = fg_tensor_num_elements(t);
  FG_CHECK_INT(n, 300);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = fg_tensor_dtype(t) == FG_I64 ? ((const int64_t *)fg_tensor_data(t))[i]
                                             : ((const int32_t *)fg_tensor_data(t))[i];
    FG_CHECK(v >= 0 && v < bound);
    if (v >= 0 && v < 16) seen[v] = 1;
  }
  for (int64_t v = 0; v < bound; v++)
    FG_CHECK_INT(seen[v], 1);
  fg_tensor_free(t);
}

FG_TEST(cli_random_inputs_within_readers_range, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_index_model(tpath("idx.fgb")) == 0);
  cli_result r;
  char o[8][600];
  const char *fetch[4] = {"idx_v", "rows_v", "labels_v", "free_v"};
  for (int i = 0; i < 4; i++)
    snprintf(o[i], sizeof o[i], "%s=%s/%d.npy", fetch[i], tmpdir, i);
  FG_REQUIRE(cli(&r, "run", tpath("idx.fgb"), "--random-inputs", "--batch", "300", "-o", o[0], "-o",
                 o[1], "-o", o[2], "-o", o[3], "--fetch", "oh", "--fetch", "ga", "--fetch", "xe",
                 "--fetch", "oh7", NULL) == 0);
  CHECK_OK(r);
  /* one_hot of 300 indices below 4: 300 ones in all. */
  FG_CHECK_STR_CONTAINS(r.out, "oh: f32 []\n  [300]\n");
  result_free(&r);
  const int64_t bound[4] = {4, 3, 5, 10};
  for (int i = 0; i < 4; i++) {
    char p[600];
    snprintf(p, sizeof p, "%s/%d.npy", tmpdir, i);
    check_range(p, bound[i]);
  }
  fgt_rmtree(tmpdir);
}
