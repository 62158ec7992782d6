/* fg_graph_reseed: every node that draws gets a seed derived from the
 * given one and its own; a dropout and its gradient keep one seed; a
 * variable holding a value and nodes that draw nothing are left alone;
 * one seed gives the same draws, another seed other draws. */
#include <string.h>

#include "fgtest.h"
#include "flowgraph/autodiff.h"
#include "flowgraph/graph.h"
#include "flowgraph/session.h"

static int64_t seed_of(const fg_graph *g, const char *name) {
  int id = fg_graph_find(g, name);
  int64_t v = -1;
  if (id < 0 || fg_node_attr_int(g, id, "seed", &v) != 0) return -1;
  return v;
}

/* u = random_uniform [4] (seed 5), k = a Kaiming-drawn variable [2,2]
 * (seed 5), c = a variable with a value, d = dropout(x, p 0.5, seed 9) and
 * its gradient; returns the graph. */
static fg_graph *build(void) {
  fg_graph *g = fg_graph_new();
  int64_t d4[1] = {4}, d22[2] = {2, 2};
  fg_set_name(g, fg_random_uniform(g, FG_F64, 1, d4, 0, 1, 5), "u");
  const fg_init k = {FG_INIT_KAIMING_UNIFORM, 0, 0, 0, 5};
  fg_variable_init(g, "k", FG_F64, 2, d22, &k);
  double one = 1;
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_tensor_from_data(FG_F64, 0, NULL, &one, sizeof one, st);
  fg_variable(g, "c", t);
  fg_tensor_free(t);
  const fg_init ones = {FG_INIT_ONES, 0, 0, 0, 0};
  fg_output x = fg_variable_init(g, "x", FG_F64, 1, d4, &ones);
  fg_output d = fg_set_name(g, fg_dropout(g, x, fg_training(g), 0.5, 9), "d");
  fg_output loss = fg_set_name(g, fg_reduce_sum(g, d, NULL, 0, 0), "loss");
  fg_output dx;
  fg_gradients(g, &loss, 1, &x, 1, NULL, &dx, st);
  fg_set_name(g, dx, "dx");
  fg_status_free(st);
  return g;
}

/* The dropout_grad node's id, or -1. */
static int dropout_grad(const fg_graph *g) {
  for (int id = 0; id < fg_graph_num_nodes(g); id++)
    if (strcmp(fg_node_op(g, id), "dropout_grad") == 0) return id;
  return -1;
}

/* u's values and k's initial values with the graph reseeded by `seed`. */
static void draws(int64_t seed, double u[4], double k[4]) {
  fg_graph *g = build();
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_reseed(g, seed, st) == 4);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const char *f[1] = {"u"};
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, NULL, 0, f, 1, &out, NULL, 0, st) == 0);
  memcpy(u, fg_tensor_data(out), 4 * sizeof(double));
  fg_tensor_free(out);
  fg_tensor *kv = fg_session_variable(s, "k", st);
  FG_REQUIRE(kv);
  memcpy(k, fg_tensor_data(kv), 4 * sizeof(double));
  fg_tensor_free(kv);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(reseed_sets_the_drawing_nodes, "") {
  fg_graph *g = build();
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  int gd = dropout_grad(g);
  FG_REQUIRE(gd >= 0);
  int64_t before = -1;
  FG_REQUIRE(fg_node_attr_int(g, gd, "seed", &before) == 0);
  FG_CHECK_INT(before, 9);
  /* u, k, the dropout and its gradient. */
  FG_REQUIRE(fg_graph_reseed(g, 42, st) == 4);
  const int64_t u = seed_of(g, "u"), k = seed_of(g, "k"), d = seed_of(g, "d");
  FG_CHECK(u >= 0 && u != 5);
  FG_CHECK(d >= 0 && d != 9);
  /* u and k had one seed: they still share it (a function of it). */
  FG_CHECK(k == u);
  int64_t after = -1;
  FG_REQUIRE(fg_node_attr_int(g, gd, "seed", &after) == 0);
  FG_CHECK(after == d);
  /* A variable with a value and one with ones draw nothing. */
  FG_CHECK_INT(seed_of(g, "c"), -1);
  FG_CHECK_INT(seed_of(g, "x"), 0);
  /* Reseeding again with 42 from the original gives the same seeds. */
  fg_graph *h = build();
  FG_REQUIRE(fg_graph_reseed(h, 42, st) == 4);
  FG_CHECK(seed_of(h, "u") == u && seed_of(h, "d") == d);
  FG_REQUIRE(fg_graph_reseed(h, 43, st) == 4); /* from the reseeded ones now */
  fg_graph *e = build();
  FG_REQUIRE(fg_graph_reseed(e, 43, st) == 4);
  FG_CHECK(seed_of(e, "u") != u && seed_of(e, "d") != d);
  fg_graph_free(e);
  fg_graph_free(h);
  fg_graph_free(g);
  /* A graph that draws nothing: 0 nodes. */
  fg_graph *none = fg_graph_new();
  fg_set_name(none, fg_scalar(none, FG_F64, 1), "one");
  FG_CHECK_INT(fg_graph_reseed(none, 42, st), 0);
  fg_graph_free(none);
  FG_CHECK(fg_graph_reseed(NULL, 1, st) == -1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  fg_status_free(st);
}

FG_TEST(reseed_same_seed_same_draws, "") {
  double u1[4], k1[4], u2[4], k2[4], u3[4], k3[4];
  draws(7, u1, k1);
  draws(7, u2, k2);
  draws(8, u3, k3);
  FG_CHECK(memcmp(u1, u2, sizeof u1) == 0);
  FG_CHECK(memcmp(k1, k2, sizeof k1) == 0);
  FG_CHECK(memcmp(u1, u3, sizeof u1) != 0);
  FG_CHECK(memcmp(k1, k3, sizeof k1) != 0);
  for (int i = 0; i < 4; i++)
    FG_CHECK(u1[i] >= 0 && u1[i] < 1);
}
