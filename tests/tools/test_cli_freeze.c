/* `flowgraph freeze` and fg_freeze: the trained digits MLP frozen runs to
 * the same bits in a file about the weights' size; the nodes kept are the
 * ones the fetches read, counted by hand; variables become constants of
 * their values (an initialiser's draw included); and the bad inputs: an
 * unknown fetch, a fetch past a node's outputs, a fetch that needs the
 * training step, no fetches at all, an unwritable -o, a model without
 * variables. */
#include "flowgraph/autodiff.h"
#include "flowgraph/passes.h"
#include "flowgraph/session.h"
#include "test_cli_train_util.h"

static long file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* 1 when the two files hold the same bytes. */
static int same_bytes(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  while (same) {
    int ca = fgetc(fa), cb = fgetc(fb);
    same = ca == cb;
    if (ca == EOF || cb == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

static fg_graph *load(const char *path) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(path, st);
  if (!g) fprintf(stderr, "load %s: %s\n", path, fg_status_message(st));
  fg_status_free(st);
  return g;
}

static int count_op(const fg_graph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < fg_graph_num_nodes(g); i++)
    n += strcmp(fg_node_op(g, i), op) == 0;
  return n;
}

/* The digits MLP (examples/digits/build_mlp.c), 64-128-64-10: weights
 * 64*128 + 128 + 128*64 + 64 + 64*10 + 10 = 17226 floats. */
#define DIGITS_WEIGHT_BYTES (17226L * 4)

FG_TEST(cli_freeze_digits_same_bits_weights_size, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder(tpath("digits.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("digits.fgb"), "-i", "x=" DIGITS_DATA "/train_x.npy", "-i",
                 "y=" DIGITS_DATA "/train_y.npy", "--batch", "64", "--epochs", "3", "--shuffle",
                 "1", "--quiet", "--save", tpath("trained.fgb"), NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  FG_REQUIRE(cli(&r, "freeze", tpath("trained.fgb"), "-o", tpath("frozen.fgb"), NULL) == 0);
  CHECK_OK(r);
  char want[200];
  snprintf(want, sizeof want, "6 variables made constants (%ld bytes of values)\n",
           DIGITS_WEIGHT_BYTES);
  FG_CHECK_STR_CONTAINS(r.out, want);
  result_free(&r);

  /* About the weights' size: at most 8% over them (the graph's own
   * bytes), and under a third of the trained file (weights, Adam's two
   * moments and the backward graph). */
  const long frozen = file_size(tpath("frozen.fgb")), trained = file_size(tpath("trained.fgb"));
  printf("digits: trained %ld bytes, frozen %ld bytes, weights %ld bytes\n", trained, frozen,
         DIGITS_WEIGHT_BYTES);
  FG_CHECK(frozen >= DIGITS_WEIGHT_BYTES);
  FG_CHECK(frozen <= DIGITS_WEIGHT_BYTES * 108 / 100);
  FG_CHECK(frozen * 3 < trained);

  /* No variable, update, gradient or optimizer state is left; the marked
   * outputs are the trained model's. */
  fg_graph *f = load(tpath("frozen.fgb")), *t = load(tpath("trained.fgb"));
  FG_REQUIRE(f && t);
  FG_CHECK_INT(count_op(f, "variable"), 0);
  /* Each weight is a constant holding the trained variable's bytes. */
  const char *weights[6] = {"dense1/w", "dense1/b", "dense2/w", "dense2/b", "dense3/w", "dense3/b"};
  long sum = 0;
  for (int i = 0; i < 6; i++) {
    const int fi = fg_graph_find(f, weights[i]), ti = fg_graph_find(t, weights[i]);
    FG_REQUIRE(fi >= 0 && ti >= 0);
    FG_CHECK_STR(fg_node_op(f, fi), "constant");
    FG_CHECK_STR(fg_node_op(t, ti), "variable");
    const fg_tensor *fv = NULL, *tv = NULL;
    FG_REQUIRE(fg_node_attr_tensor(f, fi, "value", &fv) == 0);
    FG_REQUIRE(fg_node_attr_tensor(t, ti, "value", &tv) == 0);
    FG_REQUIRE(fg_tensor_num_bytes(fv) == fg_tensor_num_bytes(tv));
    FG_CHECK(memcmp(fg_tensor_data(fv), fg_tensor_data(tv), fg_tensor_num_bytes(fv)) == 0);
    sum += (long)fg_tensor_num_bytes(fv);
  }
  FG_CHECK_INT(sum, DIGITS_WEIGHT_BYTES);
  FG_CHECK_INT(count_op(f, "apply_adam") + count_op(f, "multi_apply_adam"), 0);
  for (int i = 0; i < fg_graph_num_nodes(f); i++)
    FG_CHECK(strncmp(fg_node_name(f, i), "gradients", 9) != 0);
  FG_CHECK_INT(fg_graph_num_outputs(f), fg_graph_num_outputs(t));
  for (int i = 0; i < fg_graph_num_outputs(f); i++)
    FG_CHECK_STR(fg_node_name(f, fg_graph_output(f, i).node),
                 fg_node_name(t, fg_graph_output(t, i).node));
  FG_CHECK(fg_graph_metadata(f, "train_target") == NULL);
  FG_CHECK(fg_graph_metadata(f, "loss") == NULL);
  FG_CHECK_STR(fg_graph_metadata(f, "producer"), fg_graph_metadata(t, "producer"));
  fg_graph_free(f);
  fg_graph_free(t);

  /* run on both: the same bytes in every output file. */
  const char *models[2] = {tpath("trained.fgb"), tpath("frozen.fgb")};
  for (int m = 0; m < 2; m++) {
    char o1[600], o2[600];
    snprintf(o1, sizeof o1, "probs=%s", tpath(m ? "fp.npy" : "tp.npy"));
    snprintf(o2, sizeof o2, "prediction=%s", tpath(m ? "fq.npy" : "tq.npy"));
    FG_REQUIRE(cli(&r, "run", models[m], "-i", "x=" DIGITS_DATA "/test_x.npy", "-o", o1, "-o", o2,
                   NULL) == 0);
    FG_CHECK_INT(r.code, 0);
    result_free(&r);
  }
  FG_CHECK(same_bytes(tpath("tp.npy"), tpath("fp.npy")));
  FG_CHECK(same_bytes(tpath("tq.npy"), tpath("fq.npy")));
  fg_tensor *p = read_npy(tpath("fp.npy"));
  FG_REQUIRE(p);
  FG_CHECK_INT(fg_tensor_dim(p, 0), 360);
  FG_CHECK_INT(fg_tensor_dim(p, 1), 10);
  fg_tensor_free(p);

  /* --fetch accuracy keeps the labels' placeholder, and gives the trained
   * model's accuracy. */
  FG_REQUIRE(cli(&r, "freeze", tpath("trained.fgb"), "-o", tpath("acc.fgb"), "--fetch", "accuracy",
                 "-q", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_INT(strlen(r.out), 0);
  result_free(&r);
  FG_CHECK(digits_accuracy(tpath("acc.fgb")) == digits_accuracy(tpath("trained.fgb")));
  FG_CHECK(digits_accuracy(tpath("acc.fgb")) > 0.5);
  fgt_rmtree(tmpdir);
}

/* The harness MLP, in node order: x, W1 (variable), b1, W2 (variable), b2,
 * mm1, add1, h, mm2, logits, probs. */
FG_TEST(cli_freeze_keeps_what_the_fetch_reads, "") {
  FG_REQUIRE(setup_mlp() == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "freeze", tpath("mlp.fgb"), "-o", tpath("h.fgb"), "--fetch", "h", NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "6 nodes (was 11), 1 variables made constants (48 bytes");
  result_free(&r);
  fg_graph *g = load(tpath("h.fgb"));
  FG_REQUIRE(g);
  const char *want[6] = {"x", "W1", "b1", "mm1", "add1", "h"};
  FG_CHECK_INT(fg_graph_num_nodes(g), 6);
  FG_CHECK_STR(fg_node_op(g, 1), "constant");
  for (int i = 0; i < 6 && i < fg_graph_num_nodes(g); i++)
    FG_CHECK_STR(fg_node_name(g, i), want[i]);
  fg_graph_free(g);

  /* The whole MLP: probs by hand (plain C, double) from the frozen file. */
  FG_REQUIRE(cli(&r, "freeze", tpath("mlp.fgb"), "-o", tpath("f.json"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "11 nodes (was 11), 2 variables made constants (72 bytes");
  result_free(&r);
  char in[600], out[600];
  snprintf(in, sizeof in, "x=%s", tpath("x.npy"));
  snprintf(out, sizeof out, "probs=%s", tpath("p.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("f.json"), "-i", in, "-o", out, NULL) == 0);
  FG_CHECK_INT(r.code, 0);
  result_free(&r);
  double h[2][3], logits[2][2], probs[2][2];
  mlp_forward(X, 2, h, logits, probs);
  fg_tensor *p = read_npy(tpath("p.npy"));
  check_f32_tensor(p, 2, 2, &probs[0][0], 1e-6);
  fg_tensor_free(p);
  fgt_rmtree(tmpdir);
}

/* fg_freeze through the C API: a variable with only an initialiser
 * becomes a constant of what a session draws for it; a training step's
 * nodes are refused by name. */
FG_TEST(fg_freeze_initialiser_and_update, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 3}, wd[2] = {3, 2};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_init init = {FG_INIT_NORMAL, 0.0, 1.0, 0, 7};
  fg_output w = fg_variable_init(g, "w", FG_F32, 2, wd, &init);
  fg_output y = fg_set_name(g, fg_matmul(g, x, w, 0, 0), "y");
  fg_output loss = fg_set_name(g, fg_reduce_sum(g, y, NULL, 0, 0), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  fg_output step = fg_minimize(g, loss, NULL, 0, &cfg, st);
  FG_REQUIRE(step.node >= 0);
  fg_graph_add_output(g, y);

  /* What a session holds for w before any step. */
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const char *fw[1] = {"w"};
  fg_tensor *got[1] = {NULL};
  FG_REQUIRE(fg_session_run(s, NULL, 0, fw, 1, got, NULL, 0, st) == 0);
  fg_session_free(s);

  fg_graph *f = fg_freeze(g, NULL, 0, st);
  FG_REQUIRE(f);
  FG_CHECK_INT(fg_graph_num_nodes(f), 3);
  const fg_tensor *v = NULL;
  FG_REQUIRE(fg_node_attr_tensor(f, fg_graph_find(f, "w"), "value", &v) == 0);
  FG_CHECK_INT(fg_tensor_num_bytes(v), 24);
  FG_CHECK(memcmp(fg_tensor_data(v), fg_tensor_data(got[0]), 24) == 0);
  fg_tensor_free(got[0]);
  fg_graph_free(f);

  const char *bad[1] = {fg_node_name(g, step.node)};
  FG_CHECK(fg_freeze(g, bad, 1, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "needs node '");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "a frozen graph computes inference only");
  const char *missing[1] = {"lost"};
  FG_CHECK(fg_freeze(g, missing, 1, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "fetch 'lost': no such node or output; did you "
                                               "mean 'loss'?");
  FG_CHECK(fg_freeze(NULL, NULL, 0, st) == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(cli_freeze_bad_inputs, "badinput") {
  FG_REQUIRE(setup_mlp() == 0);
  const char *m = tpath("mlp.fgb");
  char out[600];
  snprintf(out, sizeof out, "%s", tpath("out.fgb"));
  cli_result r;
  FG_REQUIRE(cli(&r, "freeze", m, "-o", out, "--fetch", "prob", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "fetch 'prob': ");
  FG_CHECK_STR_CONTAINS(r.err, "has no such node or output; did you mean 'probs'?\n");
  result_free(&r);
  FG_REQUIRE(cli(&r, "freeze", m, "-o", out, "--fetch", "probs:1", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "NOT_FOUND", "node 'probs' (softmax) has one output (probs or probs:0)");
  result_free(&r);
  FG_CHECK(!exists(out));
  /* -o in a directory that does not exist, and a directory itself. */
  FG_REQUIRE(cli(&r, "freeze", m, "-o", tpath("no/such/dir/f.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "IO_ERROR", "does not exist");
  result_free(&r);
  FG_REQUIRE(mkdir(tpath("d.fgb"), 0755) == 0);
  FG_REQUIRE(cli(&r, "freeze", m, "-o", tpath("d.fgb"), NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "IO_ERROR", "is a directory");
  result_free(&r);
  FG_REQUIRE(cli(&r, "freeze", m, NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "missing -o OUT.fgb");
  result_free(&r);
  FG_REQUIRE(cli(&r, "freeze", m, "-o", out, "--fetchs", "probs", NULL) == 0);
  CHECK_USAGE_ERROR(r);
  FG_CHECK_STR_CONTAINS(r.err, "unknown option '--fetchs'; did you mean '--fetch'?");
  result_free(&r);
  /* No marked outputs and no --fetch. */
  FG_REQUIRE(build_mlp(tpath("bare.fgb"), 0, 1) == 0);
  FG_REQUIRE(cli(&r, "freeze", tpath("bare.fgb"), "-o", out, NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "marks no outputs");
  result_free(&r);
  FG_CHECK(!exists(out));
  fgt_rmtree(tmpdir);
}

/* A model without variables: freezing its outputs is a copy, node for
 * node, that runs to the same bits. A training model's step is refused. */
FG_TEST(cli_freeze_no_variables_and_training_step, "badinput") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_fixed(tpath("fixed.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "freeze", tpath("fixed.fgb"), "-o", tpath("f.fgb"), "--fetch", "out", NULL) ==
             0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "5 nodes (was 5), 0 variables made constants (0 bytes of values)");
  result_free(&r);
  char o1[600], o2[600];
  snprintf(o1, sizeof o1, "out=%s", tpath("a.npy"));
  snprintf(o2, sizeof o2, "out=%s", tpath("b.npy"));
  FG_REQUIRE(cli(&r, "run", tpath("fixed.fgb"), "--random-inputs", "-o", o1, NULL) == 0);
  FG_CHECK_INT(r.code, 0);
  result_free(&r);
  FG_REQUIRE(cli(&r, "run", tpath("f.fgb"), "--random-inputs", "-o", o2, NULL) == 0);
  FG_CHECK_INT(r.code, 0);
  result_free(&r);
  FG_CHECK(same_bytes(tpath("a.npy"), tpath("b.npy")));

  FG_REQUIRE(run_builder(tpath("digits.fgb")) == 0);
  FG_REQUIRE(
      cli(&r, "freeze", tpath("digits.fgb"), "-o", tpath("t.fgb"), "--fetch", "train", NULL) == 0);
  CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "fetch 'train' needs node 'train' (group)");
  result_free(&r);
  FG_CHECK(!exists(tpath("t.fgb")));
  fgt_rmtree(tmpdir);
}
