/* Sessions with the passes: on by default, off by option or FG_PASSES,
 * every name fetchable, the user's graph untouched, training steps bit
 * for bit those without passes. Values by hand in the comments. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_passes_util.h"

/* y = x*1 (a simplify), a = exp(y), b = exp(y) (a cse), out = a + b. */
static fg_graph *redundant_graph(void) {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_output y = fg_set_name(g, fg_mul(g, x, fg_scalar(g, FG_F32, 1.0)), "y");
  fg_output a = fg_set_name(g, fg_exp(g, y), "a"), b = fg_set_name(g, fg_exp(g, y), "b");
  fg_set_name(g, fg_add(g, a, b), "out");
  return g;
}

static fg_tensor *x3(float a, float b, float c) {
  int64_t d[1] = {3};
  float v[3] = {a, b, c};
  return fg_tensor_from_data(FG_F32, 1, d, v, sizeof v, NULL);
}

static int plan_steps(fg_graph *g, const fg_session_options *o, const char *fetch) {
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, o, st);
  fg_tensor *x = x3(0, 1, 2);
  fg_feed f = {"x", x};
  fg_plan_info *pi = s ? fg_session_plan_info(s, &f, 1, &fetch, 1, NULL, 0, st) : NULL;
  int n = pi ? pi->n_steps : -1;
  fg_plan_info_free(pi);
  fg_tensor_free(x);
  fg_session_free(s);
  fg_status_free(st);
  return n;
}

FG_TEST(passes_session_default_on_option_and_env_off, "") {
  fg_graph *g = redundant_graph();
  fg_session_options o;
  fg_session_options_init(&o);
  /* Without passes: mul, exp, exp, add. With them: exp, add, fused into
   * one node. */
  int on = plan_steps(g, &o, "out");
  o.no_passes = 1;
  int off = plan_steps(g, &o, "out");
  FG_CHECK_INT(on, 1);
  FG_CHECK_INT(off - on, 3);
  o.no_passes = 0;
  o.passes = "dce";
  FG_CHECK_INT(plan_steps(g, &o, "out"), off);
  o.passes = "cse";
  FG_CHECK_INT(plan_steps(g, &o, "out"), off - 1);
  o.passes = NULL;
  setenv("FG_PASSES", "off", 1);
  FG_CHECK_INT(plan_steps(g, &o, "out"), off);
  /* A list in FG_PASSES runs in sessions that name none. */
  setenv("FG_PASSES", "cse", 1);
  FG_CHECK_INT(plan_steps(g, &o, "out"), off - 1);
  o.passes = "dce";
  FG_CHECK_INT(plan_steps(g, &o, "out"), off);
  o.passes = NULL;
  setenv("FG_PASSES", "cse,nope", 1);
  fg_status *st = fg_status_new();
  fg_session *bad = fg_session_new(g, &o, st);
  fg_tensor *t = x3(0, 1, 2);
  fg_feed feed = {"x", t};
  const char *fetch = "out";
  fg_tensor *res = NULL;
  FG_CHECK(!bad || fg_session_run(bad, &feed, 1, &fetch, 1, &res, NULL, 0, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "unknown pass 'nope'");
  fg_tensor_free(res);
  fg_tensor_free(t);
  fg_session_free(bad);
  fg_status_free(st);
  unsetenv("FG_PASSES");
  FG_CHECK_INT(plan_steps(g, &o, "out"), on);
  fg_tensor *x = x3(-0.0f, NAN, 1.0f);
  FG_CHECK(same_bits_on_off(g, x, "out"));
  fg_tensor_free(x);
  fg_graph_free(g);
}

FG_TEST(passes_session_fetch_rewritten_nodes, "") {
  fg_graph *g = redundant_graph();
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  fg_tensor *x = x3(0.0f, 1.0f, -1.0f);
  fg_feed f = {"x", x};
  /* y (simplified away) is x; b (merged into a) is exp(x); out = 2 exp(x). */
  const char *fetches[3] = {"y", "b", "out"};
  fg_tensor *out[3];
  FG_REQUIRE(fg_session_run(s, &f, 1, fetches, 3, out, NULL, 0, st) == 0);
  const float *y = fg_tensor_data(out[0]), *b = fg_tensor_data(out[1]), *o = fg_tensor_data(out[2]);
  float xs[3] = {0.0f, 1.0f, -1.0f};
  for (int i = 0; i < 3; i++) {
    FG_CHECK(y[i] == xs[i]);
    FG_CHECK(b[i] == expf(xs[i]));
    FG_CHECK(o[i] == expf(xs[i]) + expf(xs[i]));
  }
  for (int i = 0; i < 3; i++)
    fg_tensor_free(out[i]);
  fg_tensor_free(x);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(passes_session_leaves_user_graph_unchanged, "") {
  fg_graph *g = redundant_graph();
  fg_status *st = fg_status_new();
  void *before = NULL, *after = NULL;
  size_t nb = 0, na = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &before, &nb, st) == 0);
  uint64_t version = fg_graph_version(g);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  fg_tensor *x = x3(1, 2, 3), *out = NULL;
  fg_feed f = {"x", x};
  const char *fetch = "out";
  FG_REQUIRE(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) == 0);
  FG_REQUIRE(fg_graph_save_memory(g, &after, &na, st) == 0);
  FG_CHECK(na == nb && memcmp(before, after, nb) == 0);
  FG_CHECK(fg_graph_version(g) == version);
  /* b still reads y, y still multiplies. */
  int b = fg_graph_find(g, "b");
  FG_CHECK_STR(fg_node_name(g, fg_node_input(g, b, 0).node), "y");
  FG_CHECK_STR(fg_node_op(g, fg_graph_find(g, "y")), "mul");
  /* An edit after a run: the session re-optimizes the new version. */
  fg_set_name(g, fg_neg(g, fg_neg(g, fg_graph_find_output(g, "out"))), "nn");
  fetch = "nn";
  fg_tensor *nn = NULL;
  FG_REQUIRE(fg_session_run(s, &f, 1, &fetch, 1, &nn, NULL, 0, st) == 0);
  FG_CHECK(memcmp(fg_tensor_data(nn), fg_tensor_data(out), 3 * sizeof(float)) == 0);
  fg_tensor_free(nn);
  fg_tensor_free(out);
  fg_tensor_free(x);
  free(before);
  free(after);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

/* A 4-3-2 MLP with redundancy the passes remove (x*1, h duplicated), an
 * SGD-with-momentum step from fg_minimize. */
static fg_graph *train_graph(const char **target) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {-1, 4}, yd[1] = {-1}, sizes[3] = {4, 3, 2};
  fg_output h = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  h = fg_mul(g, h, fg_scalar(g, FG_F32, 1.0));
  for (int l = 0; l < 2; l++) {
    int64_t wd[2] = {sizes[l], sizes[l + 1]}, bd[1] = {sizes[l + 1]};
    fg_tensor *w = fg_tensor_new(FG_F32, 2, wd, NULL), *b = fg_tensor_new(FG_F32, 1, bd, NULL);
    float *wv = fg_tensor_data(w), *bv = fg_tensor_data(b);
    for (int64_t i = 0; i < wd[0] * wd[1]; i++)
      wv[i] = sinf(1.3f * (float)(i + 7 * l)) * 0.5f;
    for (int64_t i = 0; i < bd[0]; i++)
      bv[i] = 0.1f * (float)i;
    char wn[8], bn[8];
    snprintf(wn, sizeof wn, "w%d", l);
    snprintf(bn, sizeof bn, "b%d", l);
    fg_output wvar = fg_variable(g, wn, w), bvar = fg_variable(g, bn, b);
    fg_output z1 = fg_add(g, fg_matmul(g, h, wvar, 0, 0), bvar);
    fg_output z2 = fg_add(g, fg_matmul(g, h, wvar, 0, 0), bvar);
    h = fg_mul(g, fg_add(g, z1, z2), fg_scalar(g, FG_F32, 0.5));
    if (l == 0) h = fg_relu(g, fg_identity(g, h));
    fg_tensor_free(w);
    fg_tensor_free(b);
  }
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, h, y), "loss");
  fg_optimizer_config c;
  fg_optimizer_config_init(&c, FG_OPTIMIZER_MOMENTUM);
  c.learning_rate = 0.1;
  fg_output t = fg_minimize(g, loss, NULL, 0, &c, NULL);
  *target = t.node >= 0 ? fg_node_name(g, t.node) : NULL;
  return g;
}

/* The variables after `steps` training steps, with the passes on or off. */
static void train(fg_graph *g, const char *target, int no_passes, int steps, fg_tensor **vars) {
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 2, no_passes, st);
  int64_t xd[2] = {5, 4}, yd[1] = {5};
  fg_tensor *x = fg_tensor_new(FG_F32, 2, xd, NULL), *y = fg_tensor_new(FG_I32, 1, yd, NULL);
  for (int i = 0; i < 20; i++)
    ((float *)fg_tensor_data(x))[i] = cosf(0.7f * (float)i);
  for (int i = 0; i < 5; i++)
    ((int32_t *)fg_tensor_data(y))[i] = i % 2;
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  for (int i = 0; s && i < steps; i++)
    if (fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st) != 0) break;
  const char *names[4] = {"w0", "b0", "w1", "b1"};
  for (int i = 0; i < 4; i++)
    vars[i] = s ? fg_session_variable(s, names[i], st) : NULL;
  fg_tensor_free(x);
  fg_tensor_free(y);
  fg_session_free(s);
  fg_status_free(st);
}

FG_TEST(passes_session_training_bit_identical, "") {
  const char *target = NULL;
  fg_graph *g = train_graph(&target);
  FG_REQUIRE(target);
  fg_tensor *on[4], *off[4], *start[4];
  train(g, target, 0, 0, start);
  train(g, target, 0, 6, on);
  train(g, target, 1, 6, off);
  for (int i = 0; i < 4; i++) {
    FG_REQUIRE(on[i] && off[i] && start[i]);
    size_t n = fg_tensor_num_bytes(on[i]);
    FG_CHECK(n == fg_tensor_num_bytes(off[i]));
    FG_CHECK(memcmp(fg_tensor_data(on[i]), fg_tensor_data(off[i]), n) == 0);
    /* The steps did train: every variable moved. */
    FG_CHECK(memcmp(fg_tensor_data(on[i]), fg_tensor_data(start[i]), n) != 0);
    fg_tensor_free(on[i]);
    fg_tensor_free(off[i]);
    fg_tensor_free(start[i]);
  }
  fg_graph_free(g);
}

FG_TEST(passes_session_save_then_run, "") {
  const char *target = NULL;
  fg_graph *g = train_graph(&target);
  FG_REQUIRE(target);
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  char dir[256], path[300];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_passes_save"));
  snprintf(path, sizeof path, "%s/model.fgb", dir);
  FG_CHECK(fg_session_save(s, path, st) == 0);
  /* After the save lent values through the graph's attributes, the
   * session's optimized copy still runs. */
  int64_t xd[2] = {1, 4}, yd[1] = {1};
  fg_tensor *x = fg_tensor_new(FG_F32, 2, xd, NULL), *y = fg_tensor_new(FG_I32, 1, yd, NULL);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  const char *fetch = "loss";
  fg_tensor *loss = NULL;
  FG_CHECK(fg_session_run(s, feeds, 2, &fetch, 1, &loss, &target, 1, st) == 0);
  FG_CHECK(loss && isfinite(*(const float *)fg_tensor_data(loss)));
  fg_tensor_free(loss);
  fg_tensor_free(x);
  fg_tensor_free(y);
  fgt_rmtree(dir);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(passes_session_other_session_saves_shared_graph, "") {
  /* Variables from an initialiser have no "value": a save adds one to
   * each through the shared graph and drops it after, reallocating their
   * attribute arrays; the other session's optimized copy must not care. */
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  fg_init init = {FG_INIT_UNIFORM, -1.0, 1.0, 0, 5};
  fg_output v = fg_variable_init(g, "v", FG_F32, 1, d, &init);
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_set_name(g, fg_add(g, fg_mul(g, v, fg_scalar(g, FG_F32, 1.0)), x), "y");
  fg_status *st = fg_status_new();
  fg_session *a = fg_session_new(g, NULL, st), *b = fg_session_new(g, NULL, st);
  FG_REQUIRE(a && b);
  char dir[256], path[300];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_passes_shared"));
  snprintf(path, sizeof path, "%s/model.fgb", dir);
  FG_CHECK(fg_session_save(a, path, st) == 0);
  fgt_rmtree(dir);
  fg_tensor *xt = x3(1, 2, 3), *y = NULL, *vv = fg_session_variable(b, "v", st);
  fg_feed f = {"x", xt};
  const char *fetch = "y";
  FG_REQUIRE(vv);
  FG_REQUIRE(fg_session_run(b, &f, 1, &fetch, 1, &y, NULL, 0, st) == 0);
  /* y = v*1 + x: v + x exactly. */
  for (int i = 0; i < 3; i++)
    FG_CHECK(((float *)fg_tensor_data(y))[i] ==
             ((float *)fg_tensor_data(vv))[i] + ((float *)fg_tensor_data(xt))[i]);
  fg_tensor_free(y);
  fg_tensor_free(vv);
  fg_tensor_free(xt);
  fg_session_free(a);
  fg_session_free(b);
  fg_status_free(st);
  fg_graph_free(g);
}
