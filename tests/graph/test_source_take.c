/* Nodes that take their tensors instead of copying them (graph internals
 * the ONNX importer builds weights with: fg_source_take, fg_op_move,
 * fg_attrs_take_tensor). A taken tensor is the node's own, by address;
 * whatever the outcome it is freed exactly once (the ASan build's leak
 * check and double-free detection watch these cases). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "graph/graph_internal.h"

/* A [2, 3] f32 tensor of 0.5, 1.5, ... 5.5. */
static fg_tensor *six(void) {
  fg_tensor *t = fg_tensor_new(FG_F32, 2, (int64_t[]){2, 3}, NULL);
  float *d = fg_tensor_data(t);
  for (int i = 0; i < 6; i++)
    d[i] = (float)i + 0.5f;
  return t;
}

/* The tensor node o holds as "value", or NULL. */
static const fg_tensor *held_value(const fg_graph *g, fg_output o) {
  const fg_tensor *t = NULL;
  return o.node >= 0 && fg_node_attr_tensor(g, o.node, "value", &t) == 0 ? t : NULL;
}

FG_TEST(source_take_constant_holds_the_given_tensor, "") {
  fg_graph *g = fg_graph_new();
  fg_tensor *t = six();
  fg_output o = fg_source_take(g, "w", t, 0);
  const fg_tensor *held = held_value(g, o);
  FG_REQUIRE(held);
  FG_CHECK_STR(fg_node_op(g, o.node), "constant");
  FG_CHECK(held == t); /* the same tensor, not a copy */
  FG_CHECK_INT(fg_tensor_dtype(held), FG_F32);
  FG_CHECK_INT(fg_tensor_dim(held, 0), 2);
  FG_CHECK_INT(fg_tensor_dim(held, 1), 3);
  FG_CHECK(((const float *)fg_tensor_data(held))[5] == 5.5f);
  /* It runs like fg_constant's node. */
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const char *fetch[] = {"w"};
  fg_tensor *out[1] = {0};
  FG_REQUIRE(fg_session_run(s, NULL, 0, fetch, 1, out, NULL, 0, st) == 0);
  FG_CHECK(((const float *)fg_tensor_data(out[0]))[4] == 4.5f);
  fg_tensor_free(out[0]);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g); /* frees t */
}

FG_TEST(source_take_variable, "") {
  fg_graph *g = fg_graph_new();
  fg_tensor *t = six();
  fg_output o = fg_source_take(g, "v", t, 1);
  FG_REQUIRE(held_value(g, o));
  FG_CHECK_STR(fg_node_op(g, o.node), "variable");
  FG_CHECK(held_value(g, o) == t);
  fg_graph_free(g);
}

/* The node cannot be made: the tensor is freed with the refusal, and the
 * message names the node as fg_constant's would. */
FG_TEST(source_take_refused_frees_the_tensor, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  FG_REQUIRE(fg_source_take(g, "w", six(), 0).node >= 0);
  FG_CHECK_INT(fg_source_take(g, "w", six(), 0).node, -1); /* the name is taken */
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'w'");
  /* The graph has failed: later calls free their tensor and do nothing. */
  FG_CHECK_INT(fg_source_take(g, "x", six(), 1).node, -1);
  FG_CHECK_INT(fg_graph_num_nodes(g), 1);
  fg_graph_free(g);
  /* A NULL value is a caller error, named as fg_constant names it. */
  g = fg_graph_new();
  FG_CHECK_INT(fg_source_take(g, "n", NULL, 0).node, -1);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR(fg_status_message(st), "node 'n' (constant): value is NULL");
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(op_move_empties_the_attributes, "") {
  fg_graph *g = fg_graph_new();
  fg_attrs *a = fg_attrs_new();
  fg_tensor *t = six();
  FG_REQUIRE(fg_attrs_take_tensor(a, "value", t) == 0);
  fg_output o = fg_op_move(g, "constant", "c", NULL, 0, a);
  FG_REQUIRE(held_value(g, o));
  FG_CHECK_INT(fg_node_num_attrs(g, o.node), 1);
  FG_CHECK(held_value(g, o) == t);
  FG_CHECK_INT(a->n, 0);
  FG_CHECK(a->items == NULL);
  fg_attrs_free(a);
  /* Refused before the node is made: the attributes stay the caller's. */
  a = fg_attrs_new();
  FG_REQUIRE(fg_attrs_take_tensor(a, "value", six()) == 0);
  FG_CHECK_INT(fg_op_move(g, "constant", "c", NULL, 0, a).node, -1);
  FG_CHECK_INT(a->n, 1);
  fg_attrs_free(a); /* frees the second tensor */
  fg_graph_free(g);
}
