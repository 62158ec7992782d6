/* The fuse pass on crafted graphs: exactly which node became a
 * fused_elementwise node with which program, and what stayed (a producer
 * read outside the group, a node fg_optimize keeps, one of another shape,
 * dtype or device, dropout and variable reads moved past a write), the
 * caps, and the same bits with the passes on and off. The programs below
 * are written out by hand from the graphs (inputs numbered in the order
 * the group's nodes first read them, node order). */
#include <math.h>
#include <stdlib.h>

#include "test_passes_util.h"

static fg_output ph(fg_graph *g, const char *name, int rank, int64_t d0, int64_t d1) {
  int64_t d[2] = {d0, d1};
  return fg_placeholder(g, name, FG_F32, rank, d);
}

static fg_output row_const(fg_graph *g, const char *name) {
  int64_t d[1] = {3};
  float v[3] = {0.5f, -1.0f, 2.0f};
  fg_tensor *t = fg_tensor_from_data(FG_F32, 1, d, v, sizeof v, NULL);
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* The program of node `name` in o, or "" when it has none. */
static const char *program_of(const fg_graph *o, const char *name) {
  const char *p = NULL;
  int id = fg_graph_find(o, name);
  if (id < 0 || fg_node_attr_string(o, id, "program", &p) != 0 || !p) return "";
  return p;
}

static const char *input_name(const fg_graph *o, const char *node, int i) {
  int id = fg_graph_find(o, node);
  return id >= 0 && i < fg_node_num_inputs(o, id) ? fg_node_name(o, fg_node_input(o, id, i).node)
                                                  : "";
}

static fg_tensor *x43(void) {
  int64_t d[2] = {4, 3};
  float v[12];
  for (int i = 0; i < 12; i++)
    v[i] = (float)(i % 5) - 2.25f + (i == 4 ? 0.25f : 0.0f);
  return fg_tensor_from_data(FG_F32, 2, d, v, sizeof v, NULL);
}

FG_TEST(fuse_add_relu_chain, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, "x", 2, 4, 3);
  fg_output a = fg_set_name(g, fg_add(g, x, row_const(g, "b")), "a");
  fg_set_name(g, fg_relu(g, a), "y");
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "y", &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(fg_graph_num_nodes(o), 3); /* x, b, y */
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "y")), "fused_elementwise");
  FG_CHECK_STR(program_of(o, "y"), "add(x0, x1); relu(t0)");
  FG_CHECK_STR(input_name(o, "y", 0), "x");
  FG_CHECK_STR(input_name(o, "y", 1), "b");
  FG_CHECK_INT(count_op(o, "add"), 0);
  const fg_pass_change *c = find_change(r, "fuse", "y");
  FG_REQUIRE(c);
  FG_CHECK_STR(c->action, "fused");
  FG_CHECK_STR(c->into, "fused_elementwise");
  FG_CHECK_STR(c->rule, "add+relu");
  FG_REQUIRE(find_change(r, "fuse", "a"));
  FG_CHECK_STR(find_change(r, "fuse", "a")->action, "absorbed");
  FG_CHECK_STR(find_change(r, "fuse", "a")->into, "y");
  fg_tensor *xt = x43();
  FG_CHECK(same_bits_on_off(g, xt, "y"));
  /* In a session every name stays fetchable: a, absorbed, still computes. */
  FG_CHECK(same_bits_on_off(g, xt, "a"));
  fg_tensor_free(xt);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* a is also read by a reduce_sum outside the group: a stays, and relu and
 * exp fuse on top of it. */
FG_TEST(fuse_keeps_a_producer_read_outside_the_group, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, "x", 2, 4, 3);
  fg_output a = fg_set_name(g, fg_add(g, x, row_const(g, "b")), "a");
  fg_set_name(g, fg_exp(g, fg_set_name(g, fg_relu(g, a), "r")), "y");
  fg_set_name(g, fg_reduce_sum(g, a, NULL, 0, 0), "s");
  fg_status *st = fg_status_new();
  const char *fetches[2] = {"y", "s"};
  fg_pass_report *r = NULL;
  fg_graph *o = fg_optimize(g, NULL, fetches, 2, &r, st);
  FG_REQUIRE(o);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "a")), "add");
  FG_CHECK_STR(program_of(o, "y"), "relu(x0); exp(t0)");
  FG_CHECK_STR(input_name(o, "y", 0), "a");
  FG_CHECK(find_change(r, "fuse", "a") == NULL);
  FG_CHECK_STR(find_change(r, "fuse", "r")->action, "absorbed");
  fg_tensor *xt = x43();
  FG_CHECK(same_bits_on_off(g, xt, "y"));
  FG_CHECK(same_bits_on_off(g, xt, "s"));
  fg_tensor_free(xt);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}

/* fg_optimize keeps what it is asked to fetch: a fetched a is not absorbed
 * (its value stays one node); the rest above it fuses. */
FG_TEST(fuse_optimize_never_absorbs_a_fetched_node, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, "x", 2, 4, 3);
  fg_output a = fg_set_name(g, fg_mul(g, x, x), "a");
  fg_set_name(g, fg_neg(g, fg_set_name(g, fg_sigmoid(g, a), "sg")), "y");
  fg_status *st = fg_status_new();
  const char *fetches[2] = {"y", "a"};
  fg_graph *o = fg_optimize(g, NULL, fetches, 2, NULL, st);
  FG_REQUIRE(o);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "a")), "mul");
  FG_CHECK_STR(program_of(o, "y"), "sigmoid(x0); neg(t0)");
  FG_CHECK(fg_graph_find(o, "sg") < 0);
  /* Fetched alone, a joins y's group. */
  fg_graph_free(o);
  o = optimize1(g, "y", NULL);
  FG_REQUIRE(o);
  FG_CHECK_STR(program_of(o, "y"), "mul(x0, x0); sigmoid(t0); neg(t1)");
  FG_CHECK(fg_graph_find(o, "a") < 0);
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}

/* relu's gradient: select(x > 0, dy, 0); the comparison joins as the
 * select's condition, one-element constants become program constants
 * (C99 hex floats: 0.1f exactly as a double). */
FG_TEST(fuse_comparison_select_and_constants, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, "x", 2, 4, 3), dy = ph(g, "dy", 2, 4, 3);
  fg_output m = fg_set_name(g, fg_greater(g, x, fg_scalar(g, FG_F32, 0.0)), "m");
  fg_output s = fg_set_name(g, fg_select(g, m, dy, fg_scalar(g, FG_F32, 0.0)), "s");
  fg_set_name(g, fg_mul(g, s, fg_scalar(g, FG_F32, 0.1)), "y");
  fg_graph *o = optimize1(g, "y", NULL);
  FG_REQUIRE(o);
  FG_CHECK_STR(program_of(o, "y"),
               "greater(x0, 0x0p+0); select(t0, x1, 0x0p+0); mul(t1, 0x1.99999ap-4)");
  FG_CHECK_INT(fg_graph_num_nodes(o), 3); /* x, dy, y */
  fg_graph_free(o);
  /* A comparison read outside a select stays a node: then the select
   * reads its bool output as an input. */
  fg_set_name(g, fg_cast(g, m, FG_F32), "mf");
  const char *fetches[2] = {"y", "mf"};
  fg_status *st = fg_status_new();
  o = fg_optimize(g, NULL, fetches, 2, NULL, st);
  FG_REQUIRE(o);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "m")), "greater");
  FG_CHECK_STR(program_of(o, "y"), "select(x0, x1, 0x0p+0); mul(t0, 0x1.99999ap-4)");
  FG_CHECK_STR(input_name(o, "y", 0), "m");
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}

/* Producers of another shape (a [3] row computed before broadcasting) or
 * of another dtype stay outside; a node on another device too. */
FG_TEST(fuse_only_the_roots_shape_dtype_and_device, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, "x", 2, 4, 3), b = ph(g, "b", 1, 3, 0);
  fg_output rb = fg_set_name(g, fg_relu(g, b), "rb");
  fg_output e = fg_set_name(g, fg_add(g, x, rb), "e");
  fg_set_name(g, fg_exp(g, e), "y");
  fg_graph *o = optimize1(g, "y", NULL);
  FG_REQUIRE(o);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "rb")), "relu");
  FG_CHECK_STR(program_of(o, "y"), "add(x0, x1); exp(t0)");
  FG_CHECK_STR(input_name(o, "y", 1), "rb");
  fg_graph_free(o);
  fg_graph_free(g);

  g = fg_graph_new();
  int64_t d[2] = {4, 3};
  fg_output x64 = fg_placeholder(g, "x", FG_F64, 2, d);
  fg_output c = fg_set_name(g, fg_cast(g, fg_neg(g, x64), FG_F32), "c");
  fg_output t = fg_set_name(g, fg_tanh(g, c), "t");
  fg_output dev = fg_set_name(g, fg_abs(g, t), "dev");
  fg_set_device(g, dev, "cpu:0");
  fg_set_name(g, fg_sqrt(g, fg_set_name(g, fg_sigmoid(g, dev), "sg")), "y");
  o = optimize1(g, "y", NULL);
  FG_REQUIRE(o);
  /* the f64 neg and the cast stay; tanh and abs (another device) stay
   * apart from y's group; sigmoid and sqrt fuse. */
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "c")), "cast");
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "dev")), "abs");
  FG_CHECK_STR(program_of(o, "y"), "sigmoid(x0); sqrt(t0)");
  FG_CHECK_STR(input_name(o, "y", 0), "dev");
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "t")), "tanh");
  fg_graph_free(o);
  fg_graph_free(g);
}

/* dropout (random), a variable read that an assign writes before the
 * group's root, and what an update returns stay inputs of the group; a
 * read with no write in between joins. */
FG_TEST(fuse_random_and_state_stay_outside, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, "x", 2, 4, 3);
  int64_t d[2] = {4, 3};
  float zero[12] = {0};
  fg_tensor *zt = fg_tensor_from_data(FG_F32, 2, d, zero, sizeof zero, NULL);
  fg_output v = fg_variable(g, "v", zt), w = fg_variable(g, "w", zt);
  fg_tensor_free(zt);
  fg_output dr = fg_set_name(g, fg_dropout(g, x, fg_training(g), 0.5, 3), "dr");
  fg_output rv = fg_set_name(g, fg_mul(g, v, fg_scalar(g, FG_F32, 2.0)), "rv");
  fg_output rw = fg_set_name(g, fg_mul(g, w, fg_scalar(g, FG_F32, 3.0)), "rw");
  fg_output as = fg_op(g, "assign", "as", (fg_output[]){v, fg_add(g, x, x)}, 2, NULL);
  fg_output sum = fg_add(g, fg_add(g, fg_relu(g, dr), rv), rw);
  fg_set_name(g, fg_add(g, fg_exp(g, sum), as), "y");
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "y", &r);
  FG_REQUIRE(o);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "dr")), "dropout");
  FG_CHECK_STR(fg_node_op(o, fg_graph_find(o, "rv")), "mul");
  FG_CHECK(fg_graph_find(o, "rw") < 0);
  /* In node order: w * 3, relu(dr), + rv, + w*3, exp, + the assign's
   * output (an input). */
  FG_CHECK_STR(program_of(o, "y"), "mul(x0, 0x1.8p+1); relu(x1); add(t1, x2); add(t2, t0); "
                                   "exp(t3); add(t4, x3)");
  FG_CHECK_STR(input_name(o, "y", 0), "w");
  FG_CHECK_STR(input_name(o, "y", 1), "dr");
  FG_CHECK_STR(input_name(o, "y", 2), "rv");
  FG_CHECK_STR(input_name(o, "y", 3), "as");
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* 40 chained ops: at most 32 instructions a program, so two nodes. 20
 * distinct inputs: at most 16 each. Bits equal either way. */
FG_TEST(fuse_respects_the_caps, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, "x", 2, 4, 3), t = x;
  for (int i = 0; i < 40; i++)
    t = i % 2 ? fg_tanh(g, t) : fg_mul(g, t, fg_scalar(g, FG_F32, 1.25));
  fg_set_name(g, t, "chain");
  fg_output s = x;
  for (int i = 0; i < 20; i++) {
    char name[16];
    int64_t d3[1] = {3};
    float v[3] = {(float)i, 2, 3};
    fg_tensor *c = fg_tensor_from_data(FG_F32, 1, d3, v, sizeof v, NULL);
    snprintf(name, sizeof name, "p%d", i);
    s = fg_add(g, s, fg_constant(g, name, c));
    fg_tensor_free(c);
  }
  fg_set_name(g, s, "wide");
  fg_graph *o = optimize1(g, "chain", NULL);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "fused_elementwise"), 2);
  FG_CHECK_INT(count_op(o, "mul") + count_op(o, "tanh"), 0);
  fg_graph_free(o);
  o = optimize1(g, "wide", NULL);
  FG_REQUIRE(o);
  /* 20 adds, 21 inputs: a group of 15 adds (16 inputs) on top of one of 5 */
  FG_CHECK_INT(count_op(o, "fused_elementwise"), 2);
  for (int i = 0; i < fg_graph_num_nodes(o); i++)
    if (fg_node_num_inputs(o, i) > 16) FG_FAIL_AT("%s has > 16 inputs", fg_node_name(o, i));
  fg_graph_free(o);
  fg_tensor *xt = x43();
  FG_CHECK(same_bits_on_off(g, xt, "chain"));
  FG_CHECK(same_bits_on_off(g, xt, "wide"));
  fg_tensor_free(xt);
  fg_graph_free(g);
}

/* A session's profile names the fused node with the ops it holds. */
FG_TEST(fuse_run_metadata_names_the_ops, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, "x", 2, 4, 3);
  fg_set_name(g, fg_relu(g, fg_add(g, x, row_const(g, "b"))), "y");
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, 0, st);
  FG_REQUIRE(s);
  fg_tensor *xt = x43(), *out = NULL;
  fg_feed f = {"x", xt};
  const char *fetch = "y";
  fg_run_options ro = {1};
  fg_run_metadata *md = NULL;
  FG_REQUIRE(fg_session_run_ex(s, &f, 1, &fetch, 1, &out, NULL, 0, &ro, &md, st) == 0);
  int found = 0;
  for (int i = 0; i < md->n_nodes; i++)
    if (!strcmp(md->nodes[i].name, "y")) {
      FG_CHECK_STR(md->nodes[i].op, "fused_elementwise[add+relu]");
      found = 1;
    }
  FG_CHECK(found);
  FG_CHECK_INT(md->n_nodes, 1);
  fg_run_metadata_free(md);
  fg_tensor_free(out);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}
