/* `flowgraph inspect` on models with a training step: the optimizer state
 * fg_minimize adds is counted apart from the parameters (counts worked out
 * by hand from the layer sizes), and the node table of a deep model keeps
 * its lines within 120 columns while still naming every node and counting
 * every input. The basic inspect cases are in test_cli.c. */
#include "test_cli_train_util.h"

/* The longest line of `s`, in bytes (the table is ASCII). */
static size_t longest_line(const char *s) {
  size_t best = 0;
  while (*s) {
    const char *eol = strchr(s, '\n');
    size_t len = eol ? (size_t)(eol - s) : strlen(s);
    if (len > best) best = len;
    s += len + (eol ? 1 : 0);
  }
  return best;
}

/* The digits MLP of examples/digits (64-128-64-10, Adam). By hand:
 * parameters 64*128 + 128 + 128*64 + 64 + 64*10 + 10 = 17226 f32 in 6
 * tensors (68904 bytes); Adam keeps m and v for each, 2 * 17226 = 34452
 * f32 in 12 tensors (137808 bytes), and one f64 step counter (8 bytes):
 * 34453 in 13 tensors, 137816 bytes. */
FG_TEST(cli_inspect_optimizer_state_apart, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(run_builder(tpath("digits.fgb")) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("digits.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "  trainable (variables): 17226 (68904 bytes) in 6 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "optimizer state (kept by the update ops, not counted above): "
                               "34454 (137824 bytes) in 14 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "  Adam m and v: 34452 (137808 bytes) in 12 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "  step counters: 1 (8 bytes) in 1 tensor\n");
  /* fg_minimize's base learning rate, an f64 variable. */
  FG_CHECK_STR_CONTAINS(r.out, "  learning rates: 1 (8 bytes) in 1 tensor\n");
  FG_CHECK(strstr(r.out, "momentum buffers") == NULL);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* x [?,2] -> w [2,1], b [1] -> mean squared error against y [?,1],
 * trained by fg_minimize with `kind`. */
static int build_lin_optimizer(const char *path, fg_optimizer_kind kind) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 2}, yd[2] = {FG_DIM_UNKNOWN, 1}, wd[2] = {2, 1}, bd[1] = {1};
  float w0[2] = {0.5f, -0.5f}, b0[1] = {0};
  fg_tensor *w = tensor_f32(2, wd, w0), *b = tensor_f32(1, bd, b0);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, yd);
  fg_output d = fg_sub(
      g, fg_add(g, fg_matmul(g, x, fg_variable(g, "w", w), 0, 0), fg_variable(g, "b", b)), y);
  fg_output loss = fg_reduce_mean(g, fg_mul(g, d, d), NULL, 0, 0);
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, kind);
  fg_status *st = fg_status_new();
  int rc = fg_minimize(g, loss, NULL, 0, &cfg, st).node >= 0 ? save_graph(g, path, 0) : -1;
  if (rc != 0) fprintf(stderr, "build_lin_optimizer: %s\n", fg_status_message(st));
  fg_status_free(st);
  fg_tensor_free(w);
  fg_tensor_free(b);
  fg_graph_free(g);
  return rc;
}

/* w [2,1] and b [1]: 3 parameters (12 bytes) in 2 tensors. Momentum keeps
 * one buffer like each (3, 12 bytes, 2 tensors); SGD keeps no buffer. Both
 * keep the learning rate (an f64 variable: 1, 8 bytes). */
FG_TEST(cli_inspect_momentum_and_sgd_state, "") {
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_lin_optimizer(tpath("mom.fgb"), FG_OPTIMIZER_MOMENTUM) == 0);
  FG_REQUIRE(build_lin_optimizer(tpath("sgd.fgb"), FG_OPTIMIZER_SGD) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("mom.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "  trainable (variables): 3 (12 bytes) in 2 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "optimizer state (kept by the update ops, not counted above): "
                               "4 (20 bytes) in 3 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "  momentum buffers: 3 (12 bytes) in 2 tensors\n");
  FG_CHECK(strstr(r.out, "step counters") == NULL);
  result_free(&r);
  FG_REQUIRE(cli(&r, "inspect", tpath("sgd.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "  trainable (variables): 3 (12 bytes) in 2 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "optimizer state (kept by the update ops, not counted above): "
                               "1 (8 bytes) in 1 tensor\n");
  FG_CHECK_STR_CONTAINS(r.out, "  learning rates: 1 (8 bytes) in 1 tensor\n");
  FG_CHECK(strstr(r.out, "momentum buffers") == NULL);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

#define DEEP_LAYERS 30
#define DEEP_WIDTH  16

/* x [?,16] through 30 layers relu(h w_i + b_i) (w_i [16,16], b_i [16],
 * named layer<i>/w and layer<i>/b), loss = mean((h - y)^2), Adam. */
static fg_graph *build_deep_mlp(void) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, DEEP_WIDTH}, wd[2] = {DEEP_WIDTH, DEEP_WIDTH},
          bd[1] = {DEEP_WIDTH};
  float w0[DEEP_WIDTH * DEEP_WIDTH], b0[DEEP_WIDTH] = {0};
  for (int i = 0; i < DEEP_WIDTH * DEEP_WIDTH; i++)
    w0[i] = (float)((i * 7) % 11 - 5) / 32.0f;
  fg_tensor *w = tensor_f32(2, wd, w0), *b = tensor_f32(1, bd, b0);
  fg_output h = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, xd);
  for (int l = 0; l < DEEP_LAYERS; l++) {
    char wn[32], bn[32];
    snprintf(wn, sizeof wn, "layer%d/w", l);
    snprintf(bn, sizeof bn, "layer%d/b", l);
    h = fg_relu(g, fg_add(g, fg_matmul(g, h, fg_variable(g, wn, w), 0, 0), fg_variable(g, bn, b)));
  }
  fg_output d = fg_sub(g, h, y);
  fg_output loss = fg_set_name(g, fg_reduce_mean(g, fg_mul(g, d, d), NULL, 0, 0), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_ADAM);
  fg_status *st = fg_status_new();
  if (fg_minimize(g, loss, NULL, 0, &cfg, st).node < 0) {
    fprintf(stderr, "build_deep_mlp: %s\n", fg_status_message(st));
    fg_graph_free(g);
    g = NULL;
  }
  fg_status_free(st);
  fg_tensor_free(w);
  fg_tensor_free(b);
  return g;
}

/* Node `id`'s table row: the line starting "  ID  NAME ", or NULL. */
static const char *find_row(const char *out, int id, const char *name, char *line, size_t size) {
  char start[600];
  snprintf(start, sizeof start, "\n  %d ", id);
  for (const char *p = strstr(out, start); p; p = strstr(p + 1, start)) {
    const char *eol = strchr(p + 1, '\n');
    size_t len = eol ? (size_t)(eol - p - 1) : strlen(p + 1);
    if (len >= size) continue;
    memcpy(line, p + 1, len);
    line[len] = '\0';
    /* The id, then spaces, then the name and two spaces. */
    const char *q = line + strlen(start) - 1;
    while (*q == ' ')
      q++;
    if (strncmp(q, name, strlen(name)) == 0 && strncmp(q + strlen(name), "  ", 2) == 0) return line;
  }
  return NULL;
}

/* How many inputs a row accounts for: those listed ("a:0, b:1") plus N of
 * a "+N more"; -1 when the row has no inputs cell that can be read. The
 * inputs cell is the one after the op's: `op` must be followed by it. */
static int row_inputs(const char *line, const char *op) {
  char pat[80];
  snprintf(pat, sizeof pat, "  %s  ", op);
  const char *p = strstr(line, pat);
  if (!p) return -1;
  p += strlen(pat);
  while (*p == ' ')
    p++;
  int n = 0;
  for (;;) {
    if (*p == '+') return n + atoi(p + 1);
    const char *colon = strchr(p, ':');
    if (!colon) return -1;
    n++;
    const char *after = colon + 1;
    while (*after >= '0' && *after <= '9')
      after++;
    if (strncmp(after, ", ", 2) != 0) return n; /* the last input */
    p = after + 2;
  }
}

/* A 30-layer MLP with an Adam step (the 593-column lines): every
 * line fits in 120 columns, every node has its row under its name, and each
 * row still accounts for all of its node's inputs (listed or "+N more").
 * By hand: 30 layers of 16*16 + 16 = 272 parameters, 8160 in 60 tensors;
 * Adam's m and v double that (16320 in 120 tensors); the step "train"
 * groups one update per variable, 60 inputs. */
FG_TEST(cli_inspect_deep_mlp_lines_within_120, "") {
  FG_REQUIRE(make_tmpdir());
  fg_graph *g = build_deep_mlp();
  FG_REQUIRE(g);
  FG_REQUIRE(save_graph(g, tpath("deep.fgb"), 0) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "inspect", tpath("deep.fgb"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK(longest_line(r.out) <= 120);
  FG_CHECK_STR_CONTAINS(r.out, "  trainable (variables): 8160 (32640 bytes) in 60 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "  Adam m and v: 16320 (65280 bytes) in 120 tensors\n");
  FG_CHECK_STR_CONTAINS(r.out, "  device of every node: cpu:0 (auto)\n");
  int n = fg_graph_num_nodes(g), train = fg_graph_find(g, "train");
  FG_REQUIRE(train >= 0);
  FG_CHECK_INT(fg_node_num_inputs(g, train), 2 * DEEP_LAYERS);
  char line[1024];
  int missing = 0, miscounted = 0, elided = 0;
  for (int id = 0; id < n; id++) {
    const char *row = find_row(r.out, id, fg_node_name(g, id), line, sizeof line);
    if (!row) {
      missing++;
      continue;
    }
    int ni = fg_node_num_inputs(g, id);
    int counted = ni == 0 ? (strstr(row, "  -  ") ? 0 : -1) : row_inputs(row, fg_node_op(g, id));
    if (counted != ni) {
      fprintf(stderr, "node %d (%d inputs): %s\n", id, ni, row);
      miscounted++;
    }
    elided += strstr(row, " more  ") != NULL;
  }
  FG_CHECK_INT(missing, 0);
  FG_CHECK_INT(miscounted, 0);
  /* The step's 60 inputs cannot all be listed in 120 columns. */
  FG_CHECK(find_row(r.out, train, "train", line, sizeof line) && strstr(line, " more  "));
  FG_CHECK(elided > 0);
  result_free(&r);
  fg_graph_free(g);
  fgt_rmtree(tmpdir);
}
