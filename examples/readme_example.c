#include <flowgraph/flowgraph.h>
#include <stdio.h>

int main(void) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {-1, 3}, wd[2] = {3, 2}, bd[1] = {2};
  float w_data[6] = {1, 0, 0, 1, 1, 1}, b_data[2] = {2.5f, 0.5f};
  fg_tensor *w = fg_tensor_from_data(FG_F32, 2, wd, w_data, sizeof w_data, st);
  fg_tensor *b = fg_tensor_from_data(FG_F32, 1, bd, b_data, sizeof b_data, st);

  /* y = relu(x @ w + b); x has an unknown batch dimension. */
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output y =
      fg_relu(g, fg_add(g, fg_matmul(g, x, fg_constant(g, "w", w), 0, 0), fg_constant(g, "b", b)));
  fg_set_name(g, y, "y");

  fg_session *s = fg_session_new(g, NULL, st); /* reports the first builder error */
  float x_data[3] = {1, 2, 3};
  int64_t x_dims[2] = {1, 3};
  fg_tensor *xt = fg_tensor_wrap(FG_F32, 2, x_dims, x_data, sizeof x_data, st);
  fg_feed feed = {"x", xt};
  const char *fetch = "y";
  fg_tensor *out = NULL;
  int rc = s ? fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) : -1;
  if (rc == 0) {
    const float *v = fg_tensor_data(out);
    printf("y = [%g, %g]\n", v[0], v[1]);
  } else {
    fprintf(stderr, "%s: %s\n", fg_code_name(fg_status_code(st)), fg_status_message(st));
  }
  fg_tensor_free(out);
  fg_tensor_free(xt);
  fg_tensor_free(w);
  fg_tensor_free(b);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
  return rc == 0 ? 0 : 1;
}
