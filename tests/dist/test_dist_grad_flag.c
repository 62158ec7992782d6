/* fg_gradients records the nodes it makes (FG_NODE_MADE_BY_GRADIENTS), and
 * the rewrites read that flag, not names: a user's node called
 * "gradients_mask" is not taken for a gradient by fg_data_parallel or
 * fg_micro_batch. The flag survives .fgb and JSON save and load. Expected
 * weights are worked out in the test from the least-squares gradient
 * 2/N X^T (Xw - y), independently of the graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"

enum { N = 4, D = 3 };
static const double X[N][D] = {{1, 2, 0}, {0, 1, -1}, {2, 0, 1}, {-1, 1, 3}};
static const double Y[N] = {1, -2, 0.5, 3};
static const double W0[D] = {0.5, -0.25, 1};
static const double MASK[D] = {1, 0, 1};
static const double LR = 0.1;

/* x [?,3], y [?,1] -> loss = mean((x w - y)^2); dw from fg_gradients;
 * train = apply_sgd(w, dw * gradients_mask, lr) where "gradients_mask" is
 * the user's constant. `mask_only` 1: the update takes gradients_mask
 * itself as its gradient (no output of fg_gradients on its path); 2: the
 * update takes dw * gradients_scale, the user's node reduce_mean(x), which
 * depends on the batch. */
static fg_graph *masked_graph(int mask_only) {
  fg_graph *g = fg_graph_new();
  fg_status *st = fg_status_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, D}, yd[2] = {FG_DIM_UNKNOWN, 1}, wd[2] = {D, 1};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_F64, 2, yd);
  fg_tensor *w0 = fg_tensor_from_data(FG_F64, 2, wd, W0, sizeof W0, st);
  fg_tensor *m = fg_tensor_from_data(FG_F64, 2, wd, MASK, sizeof MASK, st);
  fg_output w = fg_variable(g, "w", w0);
  fg_output mask = fg_constant(g, "gradients_mask", m);
  fg_tensor_free(w0);
  fg_tensor_free(m);
  fg_output d = fg_sub(g, fg_matmul(g, x, w, 0, 0), y);
  fg_output loss = fg_set_name(g, fg_reduce_mean(g, fg_mul(g, d, d), NULL, 0, 0), "loss");
  fg_output dw;
  FG_CHECK_INT(fg_gradients(g, &loss, 1, &w, 1, NULL, &dw, st), 0);
  fg_output scale = fg_set_name(g, fg_reduce_mean(g, x, NULL, 0, 0), "gradients_scale");
  fg_output grad = mask_only == 1   ? mask
                   : mask_only == 2 ? fg_set_name(g, fg_mul(g, dw, scale), "masked")
                                    : fg_set_name(g, fg_mul(g, dw, mask), "masked");
  fg_output in[3] = {w, grad, fg_scalar(g, FG_F64, LR)};
  fg_op(g, "apply_sgd", "train", in, 3, NULL);
  fg_graph_set_metadata(g, "loss", "loss");
  fg_graph_set_metadata(g, "train_target", "train");
  FG_CHECK_INT(fg_graph_status(g, st), FG_OK);
  fg_status_free(st);
  return g;
}

/* w after one step on all N rows, by hand. */
static void expected_w(double *w) {
  double grad[D] = {0};
  for (int i = 0; i < N; i++) {
    double r = -Y[i];
    for (int j = 0; j < D; j++)
      r += X[i][j] * W0[j];
    for (int j = 0; j < D; j++)
      grad[j] += 2.0 / N * X[i][j] * r;
  }
  for (int j = 0; j < D; j++)
    w[j] = W0[j] - LR * MASK[j] * grad[j];
}

/* One training step of g's session on all N rows; checks w against
 * expected_w. */
static void step_and_check(fg_graph *g) {
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  if (!s) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(s);
  int64_t xd[2] = {N, D}, yd[2] = {N, 1};
  fg_tensor *xt = fg_tensor_from_data(FG_F64, 2, xd, X, sizeof X, st);
  fg_tensor *yt = fg_tensor_from_data(FG_F64, 2, yd, Y, sizeof Y, st);
  fg_feed feeds[2] = {{"x", xt}, {"y", yt}};
  const char *target = "train";
  int rc = fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st);
  if (rc) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_CHECK_INT(rc, 0);
  fg_tensor *w = fg_session_variable(s, "w", st);
  FG_REQUIRE(w);
  double want[D];
  expected_w(want);
  const double *got = fg_tensor_data(w);
  for (int j = 0; j < D; j++)
    FG_CHECK_NEAR(got[j], want[j], 1e-12);
  FG_CHECK(got[1] == W0[1]); /* masked out: unchanged */
  fg_tensor_free(w);
  fg_tensor_free(xt);
  fg_tensor_free(yt);
  fg_session_free(s);
  fg_status_free(st);
}

static int ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && strcmp(s + a - b, tail) == 0;
}

/* 1 when node id of g or one of its ancestors is named "...<tail>". */
static int reaches(const fg_graph *g, int id, const char *tail, char *seen) {
  if (seen[id]) return 0;
  seen[id] = 1;
  if (ends_with(fg_node_name(g, id), tail)) return 1;
  for (int k = 0; k < fg_node_num_inputs(g, id); k++)
    if (reaches(g, fg_node_input(g, id, k).node, tail, seen)) return 1;
  return 0;
}

/* fg_gradients flags exactly the nodes it appended. */
FG_TEST(grad_flag_set_on_backward_nodes_only, "autodiff") {
  fg_graph *g = masked_graph(0);
  int first = fg_graph_find(g, "gradients_mask"), flagged = 0;
  FG_REQUIRE(first >= 0);
  for (int i = 0; i < g->n_nodes; i++) {
    int is = (g->nodes[i].flags & FG_NODE_MADE_BY_GRADIENTS) != 0;
    flagged += is;
    /* Everything before fg_gradients ran, and the user's nodes after it
     * (gradients_mask, masked, the lr scalar, train), is unflagged. */
    if (strcmp(g->nodes[i].name, "gradients_mask") == 0 ||
        strcmp(g->nodes[i].name, "masked") == 0 || strcmp(g->nodes[i].name, "train") == 0 ||
        strcmp(g->nodes[i].name, "loss") == 0 || strcmp(g->nodes[i].name, "w") == 0)
      FG_CHECK(!is);
    if (is) FG_CHECK(strncmp(g->nodes[i].name, "gradients/", 10) == 0);
  }
  FG_CHECK(flagged >= 3); /* ones_like, the mean's and the matmul's backward at least */
  fg_graph_free(g);
}

/* No all_reduce reads a replica's copy of gradients_mask, even through the
 * bucket's reshape and concat: only dw (and the rows of the weighted mean)
 * are reduced; each replica's `masked` reads its own copy of the mask;
 * both replicas train as the full batch on one device. */
FG_TEST(grad_flag_dp_user_gradients_mask_not_reduced, "dist") {
  fg_graph *g = masked_graph(0);
  fg_status *st = fg_status_new();
  const char *batch[2] = {"x", "y"};
  fg_graph *dg = fg_data_parallel(g, 2, batch, 2, NULL, st);
  if (!dg) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(dg);
  int reduces = 0;
  for (int i = 0; i < fg_graph_num_nodes(dg); i++) {
    if (strcmp(fg_node_op(dg, i), "all_reduce") != 0) continue;
    reduces++;
    char *seen = calloc((size_t)fg_graph_num_nodes(dg), 1);
    FG_REQUIRE(seen);
    if (reaches(dg, i, "gradients_mask", seen))
      FG_FAIL_AT("all_reduce '%s' reduces gradients_mask", fg_node_name(dg, i));
    free(seen);
  }
  FG_CHECK(reduces >= 2); /* one per replica at least */
  for (int r = 0; r < 2; r++) {
    char name[64], mask[64];
    snprintf(name, sizeof name, "replica_%d/masked", r);
    snprintf(mask, sizeof mask, "replica_%d/gradients_mask", r);
    int m = fg_graph_find(dg, name);
    FG_REQUIRE(m >= 0);
    FG_CHECK_STR(fg_node_name(dg, fg_node_input(dg, m, 1).node), mask);
  }
  step_and_check(g);
  step_and_check(dg);
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* An update whose gradient is only the user's gradients_mask has no
 * gradient to all-reduce: refused, naming the update and the node. */
FG_TEST(grad_flag_dp_mask_only_refused, "dist") {
  fg_graph *g = masked_graph(1);
  fg_status *st = fg_status_new();
  const char *batch[2] = {"x", "y"};
  fg_graph *dg = fg_data_parallel(g, 2, batch, 2, NULL, st);
  FG_CHECK(dg == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'train'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'gradients_mask'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "does not derive from any output of fg_gradients");
  fg_graph_free(dg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* fg_micro_batch combines the gradients of fg_gradients over the
 * micro-batches ("gradients/micro_batch/<name>/..."); the user's
 * gradients_mask is not one of them, and the step equals the full batch's. */
FG_TEST(grad_flag_micro_batch_user_gradients_mask_not_combined, "dist") {
  fg_graph *g = masked_graph(0);
  fg_status *st = fg_status_new();
  const char *batch[2] = {"x", "y"};
  fg_graph *mg = fg_micro_batch(g, 2, batch, 2, FG_DP_LOSS_MEAN, st);
  if (!mg) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(mg);
  int combined = 0;
  for (int i = 0; i < fg_graph_num_nodes(mg); i++) {
    const char *name = fg_node_name(mg, i);
    if (strncmp(name, "gradients/micro_batch/", 22) != 0) continue;
    combined++;
    FG_CHECK(strstr(name, "gradients_mask") == NULL);
  }
  FG_CHECK(combined >= 1); /* dw is combined */
  step_and_check(mg);
  fg_graph_free(mg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A user's node named gradients_scale that depends on the batch (x) sits
 * between fg_gradients and the update: it is not a gradient, so its
 * per-micro-batch values cannot be combined, and fg_micro_batch refuses,
 * naming the update and the batch input. (Taken for a gradient by name,
 * it was combined over the micro-batches as if it were one.) */
FG_TEST(grad_flag_micro_batch_user_gradients_scale_refused, "dist,badinput") {
  fg_graph *g = masked_graph(2);
  fg_status *st = fg_status_new();
  const char *batch[2] = {"x", "y"};
  fg_graph *mg = fg_micro_batch(g, 2, batch, 2, FG_DP_LOSS_MEAN, st);
  FG_CHECK(mg == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "the gradient of update 'train' depends on batch input 'x'");
  fg_graph_free(mg);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The flag of every node comes back from .fgb and from JSON; a file
 * without the field (written before it existed) loads unflagged. */
static void check_same_flags(const fg_graph *a, const fg_graph *b) {
  FG_CHECK_INT(b->n_nodes, a->n_nodes);
  int flagged = 0;
  for (int i = 0; i < a->n_nodes; i++) {
    int j = fg_graph_find(b, a->nodes[i].name);
    FG_REQUIRE(j >= 0);
    FG_CHECK_INT((int)b->nodes[j].flags, (int)a->nodes[i].flags);
    flagged += (a->nodes[i].flags & FG_NODE_MADE_BY_GRADIENTS) != 0;
  }
  FG_CHECK(flagged >= 3 && flagged < a->n_nodes);
}

FG_TEST(grad_flag_survives_save_load, "io") {
  fg_graph *g = masked_graph(0);
  fg_status *st = fg_status_new();
  char dir[256], path[600];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_grad_flag"));
  snprintf(path, sizeof path, "%s/g.fgb", dir);
  FG_REQUIRE(fg_graph_save(g, path, st) == 0);
  fg_graph *back = fg_graph_load(path, st);
  FG_REQUIRE(back);
  check_same_flags(g, back);
  snprintf(path, sizeof path, "%s/g.json", dir);
  FG_REQUIRE(fg_graph_save_json(g, path, st) == 0);
  fg_graph *json = fg_graph_load_json(path, st);
  if (!json) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(json);
  check_same_flags(g, json);
  /* The rewrite of the loaded graph still finds the gradient. */
  const char *batch[2] = {"x", "y"};
  fg_graph *dg = fg_data_parallel(back, 2, batch, 2, NULL, st);
  FG_REQUIRE(dg);
  step_and_check(dg);
  fg_graph_free(dg);
  fg_graph_free(json);
  fg_graph_free(back);
  fgt_rmtree(dir);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(grad_flag_absent_in_old_file_loads_unflagged, "io") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_load_json(FG_SOURCE_DIR "/tests/data/io_unordered.json", st);
  if (!g) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(g);
  FG_REQUIRE(g->n_nodes > 0);
  for (int i = 0; i < g->n_nodes; i++)
    FG_CHECK_INT((int)g->nodes[i].flags, 0);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A file saved before the fused updates had their own ops holds
 * apply_sgd with all_reduce = 1: refused on load, naming the node and the
 * op to use. */
FG_TEST(old_fused_apply_sgd_file_refused, "io,badinput") {
  static const char json[] =
      "{\"version\": 1, \"nodes\": [\n"
      " {\"name\": \"v\", \"op\": \"variable\", \"attrs\": [{\"name\": \"value\", \"value_type\": "
      "\"TensorValue\", \"value\": {\"dtype\": \"F32\", \"shape\": [2], \"buffer\": 0}}]},\n"
      " {\"name\": \"g\", \"op\": \"constant\", \"attrs\": [{\"name\": \"value\", \"value_type\": "
      "\"TensorValue\", \"value\": {\"dtype\": \"F32\", \"shape\": [2], \"buffer\": 1}}]},\n"
      " {\"name\": \"lr\", \"op\": \"constant\", \"attrs\": [{\"name\": \"value\", \"value_type\": "
      "\"TensorValue\", \"value\": {\"dtype\": \"F32\", \"shape\": [], \"buffer\": 2}}]},\n"
      " {\"name\": \"fused_upd\", \"op\": \"apply_sgd\", \"inputs\": [{\"node\": 0, \"index\": 0}, "
      "{\"node\": 1, \"index\": 0}, {\"node\": 2, \"index\": 0}], \"attrs\": [{\"name\": "
      "\"all_reduce\", \"value_type\": \"IntValue\", \"value\": {\"v\": 1}}, {\"name\": \"mean\", "
      "\"value_type\": \"IntValue\", \"value\": {\"v\": 1}}]}\n"
      "], \"buffers\": [{\"data\": [0, 0, 128, 63, 0, 0, 0, 64]}, {\"data\": [0, 0, 128, 63, 0, 0, "
      "128, 63]}, {\"data\": [205, 204, 204, 61]}]}\n";
  fg_status *st = fg_status_new();
  char dir[256], path[600];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_old_fused"));
  snprintf(path, sizeof path, "%s/old.json", dir);
  FILE *f = fopen(path, "w");
  FG_REQUIRE(f);
  fputs(json, f);
  fclose(f);
  fg_graph *g = fg_graph_load_json(path, st);
  FG_CHECK(g == NULL);
  FG_CHECK(fg_status_code(st) != FG_OK);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "fused_upd");
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "(apply_sgd): unknown attribute 'all_reduce'; apply_sgd accepts: none");
  /* The same node with the op that replaced it loads. */
  char *fixed = malloc(sizeof json + 64);
  FG_REQUIRE(fixed);
  const char *at = strstr(json, "\"op\": \"apply_sgd\"");
  FG_REQUIRE(at);
  const char *attrs = strstr(at, "{\"name\": \"all_reduce\"");
  const char *mean = strstr(at, "{\"name\": \"mean\"");
  FG_REQUIRE(attrs && mean);
  snprintf(fixed, sizeof json + 64, "%.*s\"op\": \"all_reduce_apply_sgd\"%.*s%s", (int)(at - json),
           json, (int)(attrs - (at + strlen("\"op\": \"apply_sgd\""))),
           at + strlen("\"op\": \"apply_sgd\""), mean);
  f = fopen(path, "w");
  FG_REQUIRE(f);
  fputs(fixed, f);
  fclose(f);
  free(fixed);
  g = fg_graph_load_json(path, st);
  if (!g) fprintf(stderr, "%s\n", fg_status_message(st));
  FG_REQUIRE(g);
  int u = fg_graph_find(g, "fused_upd");
  FG_REQUIRE(u >= 0);
  FG_CHECK_STR(fg_node_op(g, u), "all_reduce_apply_sgd");
  fg_graph_free(g);
  fgt_rmtree(dir);
  fg_status_free(st);
}
