/* Builds a small convolutional classifier for the digits with its training
 * step and saves it:
 *
 *   x [?, 64] f32 -> reshape [?, 1, 8, 8]
 *     -> conv3x3(16, pad 1) -> relu -> max_pool 2x2        [?, 16, 4, 4]
 *     -> conv3x3(32, pad 1) -> relu -> global_avg_pool      [?, 32, 1, 1]
 *     -> reshape [?, 32] -> dense(10) = logits
 *   y [?] i32 (labels 0..9), and the loss, accuracy, outputs and Adam step
 *   (learning rate 1e-2) of digits_head.h
 *
 * The weights are initialised by the session from seeds stored in the graph
 * (fg_variable_init): Kaiming/He uniform for the convolutions, which a ReLU
 * follows, Xavier/Glorot uniform for the output layer, zero biases. The
 * saved file therefore carries no initial weight bytes, and it is the same
 * on every machine.
 *
 * Usage: example_digits_build_cnn [OUT.fgb]   (default build/digits_cnn.fgb) */
#include <flowgraph/flowgraph.h>
#include <stdio.h>

#include "digits_head.h"

#define LEARNING_RATE 1e-2

static fg_output var(fg_graph *g, const char *name, int rank, const int64_t *dims,
                     fg_init_kind kind, int64_t seed) {
  fg_init init = {kind, 0, 0, 0, seed};
  return fg_variable_init(g, name, FG_F32, rank, dims, &init);
}

/* x [?, cin, s, s] -> relu(conv3x3(x) + b), 'same' padding. */
static fg_output conv_relu(fg_graph *g, fg_output x, int64_t cin, int64_t cout, const char *name,
                           int64_t seed) {
  char wname[64], bname[64];
  snprintf(wname, sizeof wname, "%s/w", name);
  snprintf(bname, sizeof bname, "%s/b", name);
  int64_t wd[4] = {cout, cin, 3, 3};
  fg_output w = var(g, wname, 4, wd, FG_INIT_KAIMING_UNIFORM, seed);
  fg_output b = var(g, bname, 1, &cout, FG_INIT_ZEROS, 0);
  fg_conv2d_opts o = {{1, 1}, {1, 1, 1, 1}, {1, 1}, 1, 0, {0, 0}};
  return fg_relu(g, fg_conv2d(g, x, w, b, &o));
}

int main(int argc, char **argv) {
  if (argc > 2) {
    fprintf(stderr, "usage: %s [OUT.fgb]\n", argv[0]);
    return 2;
  }
  const char *out = argc == 2 ? argv[1] : "build/digits_cnn.fgb";
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  if (!st || !g) {
    fprintf(stderr, "build_cnn: out of memory\n");
    return 1;
  }
  int64_t xd[2] = {FG_DIM_UNKNOWN, 64}, img[4] = {-1, 1, 8, 8}, flat[2] = {-1, 32};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output h = conv_relu(g, fg_reshape(g, x, 4, img), 1, 16, "conv1", 1);
  fg_pool2d_opts pool = {{2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0, 1};
  h = fg_set_name(g, fg_max_pool2d(g, h, &pool), "pool1");
  h = conv_relu(g, h, 16, 32, "conv2", 2);
  h = fg_reshape(g, fg_global_avg_pool(g, h), 2, flat);
  int64_t wd[2] = {32, 10}, bd[1] = {10};
  fg_output logits =
      fg_add(g, fg_matmul(g, h, var(g, "dense/w", 2, wd, FG_INIT_XAVIER_UNIFORM, 3), 0, 0),
             var(g, "dense/b", 1, bd, FG_INIT_ZEROS, 0));
  int rc = digits_finish(g, logits, LEARNING_RATE,
                         "conv-pool-conv-global-pool CNN for the 8x8 digits, with an Adam "
                         "training step 'train'",
                         "build_cnn", out, st);
  fg_graph_free(g);
  fg_status_free(st);
  return rc;
}
