/* fg_variable_set_value: a session made after the call starts from the new
 * value, a saved graph keeps it, and a wrong name, a node that is no
 * variable, another dtype or another shape are refused naming both. */
#include <stdio.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/graph.h"
#include "flowgraph/io.h"
#include "flowgraph/session.h"

static fg_tensor *f32_tensor(int rank, const int64_t *dims, const float *v) {
  fg_tensor *t = fg_tensor_new(FG_F32, rank, dims, NULL);
  if (t) memcpy(fg_tensor_data(t), v, fg_tensor_num_bytes(t));
  return t;
}

/* y = x * w for w [2] = {1, 2}, with w drawn by no initialiser. */
static fg_graph *build(void) {
  fg_graph *g = fg_graph_new();
  int64_t d2[1] = {2};
  const float w0[2] = {1, 2};
  fg_tensor *w = f32_tensor(1, d2, w0);
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d2);
  fg_set_name(g, fg_mul(g, x, fg_variable(g, "w", w)), "y");
  fg_tensor_free(w);
  return g;
}

/* y for x = {3, 5} in a fresh session on g. */
static void run_y(fg_graph *g, float out[2]) {
  fg_status *st = fg_status_new();
  int64_t d2[1] = {2};
  const float xv[2] = {3, 5};
  fg_tensor *x = f32_tensor(1, d2, xv);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  fg_feed feed = {"x", x};
  const char *fetch = "y";
  fg_tensor *y = NULL;
  FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &y, NULL, 0, st) == 0);
  memcpy(out, fg_tensor_data(y), 2 * sizeof(float));
  fg_tensor_free(y);
  fg_tensor_free(x);
  fg_session_free(s);
  fg_status_free(st);
}

FG_TEST(variable_set_value_runs_and_saves, "") {
  fg_graph *g = build();
  fg_status *st = fg_status_new();
  int64_t d2[1] = {2};
  const float nv[2] = {-0.5f, 4};
  fg_tensor *v = f32_tensor(1, d2, nv);
  float y[2];
  run_y(g, y);
  FG_CHECK(y[0] == 3 && y[1] == 10);
  FG_REQUIRE(fg_variable_set_value(g, "w", v, st) == 0);
  run_y(g, y);
  FG_CHECK(y[0] == -1.5f && y[1] == 20);
  /* The graph holds a copy: changing v afterwards changes nothing. */
  ((float *)fg_tensor_data(v))[0] = 100;
  run_y(g, y);
  FG_CHECK(y[0] == -1.5f);
  char dir[256], fgb[320];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_varvalue"));
  snprintf(fgb, sizeof fgb, "%s/g.fgb", dir);
  FG_REQUIRE(fg_graph_save(g, fgb, st) == 0);
  fg_graph *h = fg_graph_load(fgb, st);
  FG_REQUIRE(h);
  run_y(h, y);
  FG_CHECK(y[0] == -1.5f && y[1] == 20);
  fg_graph_free(h);
  fgt_rmtree(dir);
  fg_tensor_free(v);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(variable_set_value_bad_inputs, "") {
  fg_graph *g = build();
  fg_status *st = fg_status_new();
  int64_t d2[1] = {2}, d3[1] = {3};
  const float v3[3] = {1, 2, 3};
  fg_tensor *wrong_shape = f32_tensor(1, d3, v3);
  fg_tensor *wrong_dtype = fg_tensor_new(FG_F64, 1, d2, NULL);
  fg_tensor *ok = f32_tensor(1, d2, v3);
  FG_CHECK(fg_variable_set_value(g, "v", ok, st) == -1);
  FG_CHECK_INT(fg_status_code(st), FG_NOT_FOUND);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "no node named 'v'");
  FG_CHECK(fg_variable_set_value(g, "y", ok, st) == -1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'y' is a mul, not a variable");
  FG_CHECK(fg_variable_set_value(g, "w", wrong_shape, st) == -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "variable 'w' is f32 [2], the value f32 [3]");
  FG_CHECK(fg_variable_set_value(g, "w", wrong_dtype, st) == -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "variable 'w' is f32 [2], the value f64 [2]");
  FG_CHECK(fg_variable_set_value(g, "w", NULL, st) == -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "the value is NULL");
  FG_CHECK(fg_variable_set_value(NULL, "w", ok, st) == -1);
  /* Nothing changed: w still multiplies by {1, 2}. */
  float y[2];
  run_y(g, y);
  FG_CHECK(y[0] == 3 && y[1] == 10);
  fg_tensor_free(wrong_shape);
  fg_tensor_free(wrong_dtype);
  fg_tensor_free(ok);
  fg_graph_free(g);
  fg_status_free(st);
}
