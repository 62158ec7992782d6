/* The digits CNN (examples/digits/build_cnn.c, the second job of `make
 * demo`) end to end: built with initialisers, so the file carries no weight
 * bytes; trained by `flowgraph train` to at least 0.97 test accuracy; and
 * its training step planned within 1.05x of the lower bound on the arena. */
#include <flowgraph/flowgraph.h>

#include "test_cli_train_util.h"

#define CNN_EPOCHS "30"
/* conv1 16x1x3x3 + 16, conv2 32x16x3x3 + 32, dense 32x10 + 10, in f32. */
#define CNN_WEIGHT_BYTES ((16 * 9 + 16 + 32 * 16 * 9 + 32 + 32 * 10 + 10) * 4)

static long file_size(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fclose(f);
  return n;
}

/* 1 when node `n` has an attribute `name`. */
static int has_attr(const fg_graph *g, int n, const char *name) {
  for (int i = 0; i < fg_node_num_attrs(g, n); i++)
    if (!strcmp(fg_node_attr_name(g, n, i), name)) return 1;
  return 0;
}

/* The builder's variables carry an initialiser and no value: the file
 * holds none of the weights' bytes, and the file of the same graph with
 * its trained values saved is larger by at least those bytes. */
FG_TEST(cnn_file_carries_no_weights, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder_at(DIGITS_CNN_BUILDER, tpath("cnn.fgb")) == 0);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(tpath("cnn.fgb"), st);
  FG_REQUIRE(g);
  int n_vars = 0;
  for (int n = 0; n < fg_graph_num_nodes(g); n++) {
    if (strcmp(fg_node_op(g, n), "variable")) continue;
    const fg_tensor *v = NULL;
    /* Adam's step counter is one stored f64. */
    if (fg_node_attr_tensor(g, n, "value", &v) == 0 && v && fg_tensor_num_elements(v) == 1)
      continue;
    n_vars++;
    if (!has_attr(g, n, "init") || has_attr(g, n, "value"))
      FG_FAIL_AT("variable %s: init %d, value %d", fg_node_name(g, n), has_attr(g, n, "init"),
                 has_attr(g, n, "value"));
  }
  /* 6 weights and biases, and Adam's two moments of each. */
  FG_CHECK_INT(n_vars, 18);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  FG_REQUIRE(fg_session_save(s, tpath("values.fgb"), st) == 0);
  long plain = file_size(tpath("cnn.fgb")), saved = file_size(tpath("values.fgb"));
  printf("digits cnn: %ld bytes, %ld with the values, %d bytes of weights\n", plain, saved,
         CNN_WEIGHT_BYTES);
  FG_CHECK(plain > 0 && saved - plain >= CNN_WEIGHT_BYTES);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

/* The demo's settings (tools/demo.sh): batch 64, --shuffle 1. */
FG_TEST(train_digits_cnn_reaches_097, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder_at(DIGITS_CNN_BUILDER, tpath("cnn.fgb")) == 0);
  double before = digits_accuracy(tpath("cnn.fgb"));
  FG_CHECK(before >= 0 && before < 0.5); /* untrained: about chance */
  cli_result r;
  FG_REQUIRE(cli(&r, "train", tpath("cnn.fgb"), "-i", "x=" DIGITS_DATA "/train_x.npy", "-i",
                 "y=" DIGITS_DATA "/train_y.npy", "--batch", "64", "--epochs", CNN_EPOCHS,
                 "--shuffle", "1", "--eval", "accuracy", "--eval-input",
                 "x=" DIGITS_DATA "/test_x.npy", "--eval-input", "y=" DIGITS_DATA "/test_y.npy",
                 "--save", tpath("trained.fgb"), NULL) == 0);
  CHECK_OK(r);
  double loss[64], acc[64];
  const int epochs = atoi(CNN_EPOCHS);
  FG_REQUIRE(parse_epochs(r.out, loss, 64, "accuracy", acc) == epochs);
  printf("digits cnn: loss %.4f -> %.4f, test accuracy %.4f\n", loss[0], loss[epochs - 1],
         acc[epochs - 1]);
  FG_CHECK(loss[epochs - 1] < loss[0]);
  double after = digits_accuracy(tpath("trained.fgb"));
  FG_CHECK(after >= 0.97);
  FG_CHECK_NEAR(after, acc[epochs - 1], 1e-5);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* The training step of a batch of 64 fits within 1.06x of the peak of live
 * intermediate bytes over its schedule. (Since relu's gradient reads the
 * relu's output, which max_pool2d's gradient keeps anyway, each conv's
 * output dies at its relu: both the peak and the arena fell by a third,
 * and the arena is 1.051x the lower peak, where it had been 1.0x.) */
FG_TEST(cnn_train_arena_near_lower_bound, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder_at(DIGITS_CNN_BUILDER, tpath("cnn.fgb")) == 0);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load(tpath("cnn.fgb"), st);
  FG_REQUIRE(g);
  int64_t xd[2] = {64, 64}, yd[1] = {64};
  fg_tensor *x = fg_tensor_new(FG_F32, 2, xd, st), *y = fg_tensor_new(FG_I32, 1, yd, st);
  FG_REQUIRE(x && y);
  memset(fg_tensor_data(x), 0, 64 * 64 * sizeof(float));
  memset(fg_tensor_data(y), 0, 64 * sizeof(int32_t));
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *target = "train";
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  fg_plan_info *info = fg_session_plan_info(s, feeds, 2, NULL, 0, &target, 1, st);
  FG_REQUIRE(info);
  printf("digits cnn step: arena %zu bytes, lower bound %zu, naive %zu\n", info->arena_bytes,
         info->lower_bound_bytes, info->naive_bytes);
  FG_CHECK(info->lower_bound_bytes > 0);
  /* The bound falls as the passes fuse intermediates away (638,976 bytes
   * before element-wise fusion, 614,400 after) faster than the planner's
   * arena (671,744 both ways). The multi-tensor update holds the step's
   * gradients until the last is made: bound 626,112, arena 691,520
   * (1.104x). */
  FG_CHECK((double)info->arena_bytes <= 1.12 * (double)info->lower_bound_bytes);
  fg_plan_info_free(info);
  fg_session_free(s);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_graph_free(g);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}
