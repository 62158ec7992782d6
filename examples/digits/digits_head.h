/* What the digits classifiers (build_mlp.c, build_cnn.c) share: the
 * outputs, metrics and training step on top of their logits, and saving.
 *
 *   loss      = softmax_cross_entropy(logits, y)          (mean over the batch)
 *   accuracy  = mean(cast(argmax(logits, 1) == cast(y, i64), f32))
 *   probs     = softmax(logits), prediction = argmax(logits, 1)  (graph outputs)
 *   train     = fg_minimize(loss, Adam, learning rate `lr`)
 *
 * Header-only (static functions) so that each example stays one program. */
#ifndef DIGITS_HEAD_H
#define DIGITS_HEAD_H

#include <flowgraph/flowgraph.h>
#include <stdio.h>

/* Adds the head to `logits` (labels "y" [?] i32), records "train" and
 * "loss" in the metadata with `description`, and saves the graph to `out`.
 * Returns the exit status of the program: 0, or 1 after printing why. */
static int digits_finish(fg_graph *g, fg_output logits, double lr, const char *description,
                         const char *prog, const char *out, fg_status *st) {
  int64_t yd[1] = {FG_DIM_UNKNOWN};
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  logits = fg_set_name(g, logits, "logits");
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, y), "loss");
  fg_output pred = fg_set_name(g, fg_argmax(g, logits, 1), "prediction");
  fg_output correct = fg_equal(g, pred, fg_cast(g, y, FG_I64));
  fg_set_name(g, fg_reduce_mean(g, fg_cast(g, correct, FG_F32), NULL, 0, 0), "accuracy");
  fg_output probs = fg_set_name(g, fg_softmax(g, logits, 1), "probs");
  fg_graph_add_output(g, probs);
  fg_graph_add_output(g, pred);

  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_ADAM);
  cfg.learning_rate = lr;
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, st);
  if (train.node >= 0) fg_set_name(g, train, "train");
  /* fg_minimize recorded the target under its automatic name. */
  fg_graph_set_metadata(g, "train_target", "train");
  fg_graph_set_metadata(g, "loss", "loss");
  fg_graph_set_metadata(g, "description", description);

  /* fg_minimize reports through st; only then is the graph's own state asked. */
  if (train.node < 0 || fg_graph_status(g, st) != FG_OK || fg_graph_save(g, out, st) != 0) {
    fprintf(stderr, "%s: %s: %s\n", prog, fg_code_name(fg_status_code(st)), fg_status_message(st));
    return 1;
  }
  printf("wrote %s (%d nodes)\n", out, fg_graph_num_nodes(g));
  return 0;
}

#endif
