/* The small training model of the profile tests (test_cli_profile.c,
 * test_cli_profile_stats.c), after test_cli_harness.h: x [?,4], labels [?]
 * i32, logits = relu(x W1) W2 with 10 classes (so random labels in [0, 10)
 * are valid), SGD on the cross entropy. With `mark_probs`, softmax(logits)
 * is the marked output "probs": a model with both an inference and a
 * training step. The training target's name goes to target[256] (when not
 * NULL). */
#ifndef FG_TEST_CLI_PROFILE_MODEL_H
#define FG_TEST_CLI_PROFILE_MODEL_H

#include "flowgraph/autodiff.h"

static int build_profile_train(const char *path, int mark_probs, char *target) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 4}, ld[1] = {FG_DIM_UNKNOWN}, w1d[2] = {4, 3}, w2d[2] = {3, 10};
  float w1[12], w2[30];
  for (int i = 0; i < 12; i++)
    w1[i] = (float)(i % 5 - 2) * 0.25f;
  for (int i = 0; i < 30; i++)
    w2[i] = (float)(i % 7 - 3) * 0.125f;
  fg_tensor *tw1 = tensor_f32(2, w1d, w1), *tw2 = tensor_f32(2, w2d, w2);
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output labels = fg_placeholder(g, "labels", FG_I32, 1, ld);
  fg_output h = fg_relu(g, fg_matmul(g, x, fg_variable(g, "W1", tw1), 0, 0));
  fg_output logits = fg_matmul(g, h, fg_variable(g, "W2", tw2), 0, 0);
  if (mark_probs) fg_graph_add_output(g, fg_set_name(g, fg_softmax(g, logits, 1), "probs"));
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, labels), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  fg_status *st = fg_status_new();
  fg_output step = fg_minimize(g, loss, NULL, 0, &cfg, st);
  if (step.node < 0) fprintf(stderr, "fg_minimize: %s\n", fg_status_message(st));
  if (target) snprintf(target, 256, "%s", step.node >= 0 ? fg_node_name(g, step.node) : "");
  fg_status_free(st);
  fg_tensor_free(tw1);
  fg_tensor_free(tw2);
  return save_and_free_graph(g, path);
}

#endif
