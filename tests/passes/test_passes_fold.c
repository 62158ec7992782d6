/* Constant folding (fold): which nodes fold, the values they hold (by
 * hand), the size cap, what never folds, and the same bits as a session
 * without passes. */
#include <math.h>

#include "test_passes_util.h"

static fg_output const_of(fg_graph *g, const char *name, int rank, const int64_t *dims,
                          const float *v) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  fg_tensor *t = fg_tensor_from_data(FG_F32, rank, dims, v, (size_t)n * sizeof(float), NULL);
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* The f32 values of constant node `name` of g, or NULL. */
static const float *const_values(const fg_graph *g, const char *name) {
  int id = fg_graph_find_output(g, name).node;
  const fg_tensor *t = NULL;
  if (id < 0 || strcmp(fg_node_op(g, id), "constant") != 0) return NULL;
  if (fg_node_attr_tensor(g, id, "value", &t) != 0 || !t) return NULL;
  return fg_tensor_data(t);
}

/* Runs `fetch` of g (no feeds), passes on or off. */
static fg_tensor *run0(fg_graph *g, const char *fetch, int no_passes) {
  return run_fetch(g, NULL, fetch, no_passes);
}

/* x [2,2]; a = c1 + c2, b = a * 2, e = -b, y = x + e. */
static fg_graph *chain_graph(void) {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 2};
  float v1[4] = {1, 2, 3, 4}, v2[4] = {10, 20, 30, 40};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  fg_output a =
      fg_set_name(g, fg_add(g, const_of(g, "c1", 2, d, v1), const_of(g, "c2", 2, d, v2)), "a");
  fg_output b = fg_set_name(g, fg_mul(g, a, fg_scalar(g, FG_F32, 2.0)), "b");
  fg_output e = fg_set_name(g, fg_neg(g, b), "e");
  fg_set_name(g, fg_add(g, x, e), "y");
  return g;
}

FG_TEST(passes_fold_chain, "") {
  fg_graph *g = chain_graph();
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "y", &r);
  FG_REQUIRE(o);
  /* x, e (a constant now), y. */
  FG_CHECK_INT(fg_graph_num_nodes(o), 3);
  FG_CHECK_INT(count_op(o, "constant"), 1);
  const float *e = const_values(o, "e");
  FG_REQUIRE(e);
  FG_CHECK(e[0] == -22.0f && e[1] == -44.0f && e[2] == -66.0f && e[3] == -88.0f);
  const char *folded[3] = {"a", "b", "e"};
  for (int i = 0; i < 3; i++) {
    const fg_pass_change *c = find_change(r, "fold", folded[i]);
    FG_REQUIRE(c);
    FG_CHECK_STR(c->action, "folded");
    FG_CHECK_STR(c->into, folded[i]);
  }
  FG_CHECK(find_change(r, "dce", "c1") && find_change(r, "dce", "a"));
  fg_pass_report_free(r);
  fg_graph_free(o);
  int64_t d[2] = {2, 2};
  float xv[4] = {1, 1, 1, 1};
  fg_tensor *x = fg_tensor_from_data(FG_F32, 2, d, xv, sizeof xv, NULL);
  fg_tensor *y = run_fetch(g, x, "y", 0);
  FG_REQUIRE(y);
  const float *yv = fg_tensor_data(y);
  FG_CHECK(yv[0] == -21.0f && yv[1] == -43.0f && yv[2] == -65.0f && yv[3] == -87.0f);
  FG_CHECK(same_bits_on_off(g, x, "y"));
  fg_tensor_free(y);
  fg_tensor_free(x);
  fg_graph_free(g);
}

FG_TEST(passes_fold_fetched_node_keeps_its_value, "") {
  fg_graph *g = chain_graph();
  /* In a session b folds into a constant named b: still fetchable. */
  fg_tensor *b = run0(g, "b", 0);
  FG_REQUIRE(b);
  const float *bv = fg_tensor_data(b);
  FG_CHECK(bv[0] == 22.0f && bv[1] == 44.0f && bv[2] == 66.0f && bv[3] == 88.0f);
  fg_tensor_free(b);
  /* fg_optimize keeps a fetched node that folds, as a constant. */
  fg_graph *o = optimize1(g, "b", NULL);
  FG_REQUIRE(o);
  FG_CHECK_INT(fg_graph_num_nodes(o), 2); /* placeholders always stay */
  const float *v = const_values(o, "b");
  FG_REQUIRE(v);
  FG_CHECK(v[0] == 22.0f && v[3] == 88.0f);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* Values with no short binary form, for the transcendental kernels. */
static void fill_values(float *v, int n, float scale) {
  for (int i = 0; i < n; i++)
    v[i] = scale * (float)sin(0.7 * i + 0.3);
}

FG_TEST(passes_fold_same_bits_as_running, "") {
  fg_graph *g = fg_graph_new();
  int64_t d34[2] = {3, 4}, d45[2] = {4, 5}, d3[1] = {3}, ax[1] = {1};
  float a[12], b[20];
  fill_values(a, 12, 1.3f);
  fill_values(b, 20, 0.9f);
  fg_output ca = const_of(g, "ca", 2, d34, a), cb = const_of(g, "cb", 2, d45, b);
  fg_output t = fg_tanh(g, fg_mul(g, fg_exp(g, ca), fg_scalar(g, FG_F32, 0.37)));
  fg_output s = fg_sqrt(g, fg_abs(g, fg_matmul(g, t, cb, 0, 0)));
  fg_output r = fg_set_name(g, fg_reduce_sum(g, s, ax, 1, 0), "r");
  fg_set_name(g, fg_add(g, fg_placeholder(g, "x", FG_F32, 1, d3), r), "y");
  fg_graph *o = optimize1(g, "y", NULL);
  FG_REQUIRE(o);
  FG_CHECK_INT(fg_graph_num_nodes(o), 3); /* x, r, y */
  FG_CHECK_INT(count_op(o, "exp") + count_op(o, "matmul") + count_op(o, "reduce_sum"), 0);
  fg_graph_free(o);
  float xv[3] = {0.25f, -1.0f, 3.0f};
  fg_tensor *x = fg_tensor_from_data(FG_F32, 1, d3, xv, sizeof xv, NULL);
  FG_CHECK(same_bits_on_off(g, x, "y"));
  FG_CHECK(same_bits_on_off(g, x, "r"));
  fg_tensor_free(x);
  fg_graph_free(g);
}

FG_TEST(passes_fold_size_cap, "") {
  fg_graph *g = fg_graph_new();
  int64_t d1k[1] = {1024}, d4[2] = {4, 1024}, d5[2] = {5, 1024}, s1024[1] = {1024},
          s1025[1] = {1025};
  static float v[1024];
  fill_values(v, 1024, 1.0f);
  fg_output c = const_of(g, "c", 1, d1k, v); /* 4 KiB */
  fg_output one = fg_scalar(g, FG_F32, 1.5);
  /* 16 KiB = 4x its input: folds; 20 KiB: stays. 4096 bytes of a
   * scalar: small enough to fold always; 4100: stays. */
  fg_set_name(g, fg_expand(g, c, 2, d4), "e4");
  fg_set_name(g, fg_expand(g, c, 2, d5), "e5");
  fg_set_name(g, fg_expand(g, one, 1, s1024), "s1024");
  fg_set_name(g, fg_expand(g, one, 1, s1025), "s1025");
  const char *fetches[4] = {"e4", "e5", "s1024", "s1025"};
  fg_status *st = fg_status_new();
  fg_graph *o = fg_optimize(g, NULL, fetches, 4, NULL, st);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "expand"), 2);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "e5").node), "expand");
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "s1025").node), "expand");
  const float *e4 = const_values(o, "e4"), *s = const_values(o, "s1024");
  FG_REQUIRE(e4 && s);
  FG_CHECK(e4[3 * 1024 + 7] == v[7] && s[1023] == 1.5f);
  for (int i = 0; i < 4; i++)
    FG_CHECK(same_bits_on_off(g, NULL, fetches[i]));
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(passes_fold_never_stateful_or_random, "") {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {4};
  float v[4] = {1, 2, 3, 4};
  fg_output c = const_of(g, "c", 1, d, v);
  fg_tensor *init = fg_tensor_from_data(FG_F32, 1, d, v, sizeof v, NULL);
  fg_output var = fg_variable(g, "v", init);
  fg_tensor_free(init);
  /* Random (dropout in training on constants), a variable's value, the
   * training flag, a random source: none folds. */
  fg_set_name(g, fg_dropout(g, c, fg_scalar(g, FG_BOOL, 1), 0.5, 7), "drop");
  fg_set_name(g, fg_add(g, var, c), "vsum");
  fg_set_name(g, fg_dropout(g, c, fg_training(g), 0.5, 7), "drop_t");
  fg_set_name(g, fg_add(g, fg_random_uniform(g, FG_F32, 1, d, 0, 1, 3), c), "rsum");
  const char *fetches[4] = {"drop", "vsum", "drop_t", "rsum"};
  fg_status *st = fg_status_new();
  fg_pass_report *r = NULL;
  fg_graph *o = fg_optimize(g, NULL, fetches, 4, &r, st);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "dropout"), 2);
  FG_CHECK_INT(count_op(o, "add"), 2);
  FG_CHECK_INT(count_op(o, "random_uniform"), 1);
  for (int i = 0; i < fg_pass_report_size(r); i++)
    FG_CHECK(strcmp(fg_pass_report_change(r, i)->pass, "fold") != 0);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(passes_fold_only_when_listed, "") {
  fg_graph *g = chain_graph();
  fg_status *st = fg_status_new();
  const char *fetch = "y";
  fg_pass_options po = {0, "cse,dce"};
  fg_graph *o = fg_optimize(g, &po, &fetch, 1, NULL, st);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "neg"), 1); /* no fold without "fold" */
  fg_graph_free(o);
  po.passes = "fold";
  o = fg_optimize(g, &po, &fetch, 1, NULL, st);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "neg"), 0);
  FG_CHECK_INT(fg_graph_num_nodes(o), 8); /* fold alone leaves the dead inputs */
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(passes_fold_not_nan_or_inf, "") {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {2};
  float a[2] = {0, 1}, b[2] = {0, 4}, c[2] = {2, 4};
  fg_output ca = const_of(g, "a", 1, d, a);
  /* 0/0 and 1/4: a NaN, left to run (check_numerics names the node that
   * makes one); 0/2 and 1/4 fold. */
  fg_set_name(g, fg_div(g, ca, const_of(g, "b", 1, d, b)), "nan");
  fg_set_name(g, fg_div(g, ca, const_of(g, "c", 1, d, c)), "fine");
  const char *fetches[2] = {"nan", "fine"};
  fg_status *st = fg_status_new();
  fg_graph *o = fg_optimize(g, NULL, fetches, 2, NULL, st);
  FG_REQUIRE(o);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "nan").node), "div");
  const float *v = const_values(o, "fine");
  FG_REQUIRE(v);
  FG_CHECK(v[0] == 0.0f && v[1] == 0.25f);
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(passes_fold_shape_ops, "") {
  fg_graph *g = fg_graph_new();
  int64_t d23[2] = {2, 3}, d2[1] = {2}, perm[2] = {1, 0}, d6[1] = {6};
  float a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {7, 8};
  /* transpose [[1,2,3],[4,5,6]] -> [[1,4],[2,5],[3,6]], reshape to [6],
   * concat with [7,8]: 1 4 2 5 3 6 7 8. */
  fg_output t = fg_transpose(g, const_of(g, "a", 2, d23, a), 2, perm);
  fg_output r = fg_reshape(g, t, 1, d6);
  fg_output parts[2] = {r, const_of(g, "b", 1, d2, b)};
  fg_output c = fg_set_name(g, fg_concat(g, parts, 2, 0), "c");
  int64_t d8[1] = {8};
  fg_set_name(g, fg_add(g, fg_placeholder(g, "x", FG_F32, 1, d8), c), "y");
  fg_graph *o = optimize1(g, "y", NULL);
  FG_REQUIRE(o);
  FG_CHECK_INT(fg_graph_num_nodes(o), 3); /* x, c, y */
  const float *v = const_values(o, "c");
  FG_REQUIRE(v);
  const float want[8] = {1, 4, 2, 5, 3, 6, 7, 8};
  for (int i = 0; i < 8; i++)
    FG_CHECK(v[i] == want[i]);
  fg_graph_free(o);
  fg_graph_free(g);
}

FG_TEST(passes_fold_conv_same_bits, "") {
  /* A convolution (oneDNN's where built with it, which then runs without
   * its plan-time state) of constants folds to the bits a run computes. */
  fg_graph *g = fg_graph_new();
  int64_t dx[4] = {1, 16, 6, 6}, dw[4] = {16, 16, 3, 3}, dy[4] = {1, 16, 6, 6};
  static float x[576], w[2304];
  fill_values(x, 576, 1.0f);
  fill_values(w, 2304, 0.2f);
  fg_conv2d_opts o1 = {.pads = {1, 1, 1, 1}};
  fg_output c = fg_set_name(g,
                            fg_conv2d(g, const_of(g, "cx", 4, dx, x), const_of(g, "cw", 4, dw, w),
                                      (fg_output){-1, 0}, &o1),
                            "c");
  fg_set_name(g, fg_add(g, fg_placeholder(g, "x", FG_F32, 4, dy), c), "y");
  fg_graph *o = optimize1(g, "y", NULL);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "conv2d"), 0);
  fg_graph_free(o);
  fg_tensor *xt = fg_tensor_from_data(FG_F32, 4, dy, x, sizeof x, NULL);
  FG_CHECK(same_bits_on_off(g, xt, "y"));
  FG_CHECK(same_bits_on_off(g, xt, "c"));
  fg_tensor_free(xt);
  fg_graph_free(g);
}
