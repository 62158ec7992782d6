/* The CNN benchmarks' networks; see cnn_models.h. */
#include "cnn_models.h"

#include <math.h>
#include <stdio.h>

#define MAX_PARAMS 128

/* What the layer builders share: the graph, the trainable variables so far,
 * the seed of the next initialiser and the training flag. */
typedef struct net {
  fg_graph *g;
  fg_output params[MAX_PARAMS];
  int n_params;
  int64_t n_weights;
  int64_t seed;
  fg_output training; /* batch norm's mode; .node -1 in networks without */
  int64_t batch;
  double flops; /* forward convolutions and matmuls: 2 per multiply-add */
} net;

static fg_output param(net *n, const char *name, int rank, const int64_t *dims, fg_init init) {
  init.seed = n->seed++;
  fg_output v = fg_variable_init(n->g, name, FG_F32, rank, dims, &init);
  if (n->n_params < MAX_PARAMS) n->params[n->n_params++] = v;
  int64_t e = 1;
  for (int i = 0; i < rank; i++)
    e *= dims[i];
  n->n_weights += e;
  return v;
}

/* State that is not trained (batch norm's running statistics). */
static fg_output state(net *n, const char *name, int64_t c, fg_init_kind kind) {
  fg_init init = {kind, 0, 0, 0, 0};
  return fg_variable_init(n->g, name, FG_F32, 1, &c, &init);
}

/* PyTorch's default for conv and linear weights and biases: uniform
 * +-1/sqrt(fan_in). */
static fg_init torch_default(int64_t fan_in) {
  double b = 1.0 / sqrt((double)fan_in);
  fg_init init = {FG_INIT_UNIFORM, -b, b, 0, 0};
  return init;
}

/* *side: the input's height and width, then the output's. */
static fg_output conv(net *n, const char *name, fg_output x, int64_t *side, int64_t cin,
                      int64_t cout, int64_t k, int64_t stride, int64_t pad, int bias) {
  char buf[96];
  *side = (*side + 2 * pad - k) / stride + 1;
  n->flops += 2.0 * (double)n->batch * cout * *side * *side * cin * k * k;
  int64_t wd[4] = {cout, cin, k, k};
  snprintf(buf, sizeof buf, "%s/w", name);
  fg_output w = param(n, buf, 4, wd, torch_default(cin * k * k));
  fg_output b = {-1, 0};
  if (bias) {
    snprintf(buf, sizeof buf, "%s/b", name);
    b = param(n, buf, 1, &cout, torch_default(cin * k * k));
  }
  fg_conv2d_opts o = {{stride, stride}, {pad, pad, pad, pad}, {1, 1}, 1, 0, {0, 0}};
  return fg_conv2d(n->g, x, w, b, &o);
}

static fg_output dense(net *n, const char *name, fg_output x, int64_t in, int64_t out) {
  char buf[96];
  int64_t wd[2] = {in, out};
  snprintf(buf, sizeof buf, "%s/w", name);
  fg_output w = param(n, buf, 2, wd, torch_default(in));
  snprintf(buf, sizeof buf, "%s/b", name);
  fg_output b = param(n, buf, 1, &out, torch_default(in));
  n->flops += 2.0 * (double)n->batch * in * out;
  return fg_add(n->g, fg_matmul(n->g, x, w, 0, 0), b);
}

static fg_output batch_norm(net *n, const char *name, fg_output x, int64_t c) {
  char buf[96];
  fg_init ones = {FG_INIT_ONES, 0, 0, 0, 0}, zeros = {FG_INIT_ZEROS, 0, 0, 0, 0};
  snprintf(buf, sizeof buf, "%s/scale", name);
  fg_output scale = param(n, buf, 1, &c, ones);
  snprintf(buf, sizeof buf, "%s/shift", name);
  fg_output shift = param(n, buf, 1, &c, zeros);
  snprintf(buf, sizeof buf, "%s/running_mean", name);
  fg_output mean = state(n, buf, c, FG_INIT_ZEROS);
  snprintf(buf, sizeof buf, "%s/running_var", name);
  fg_output var = state(n, buf, c, FG_INIT_ONES);
  return fg_batch_norm(n->g, x, scale, shift, mean, var, n->training, 0.1, 1e-5);
}

static fg_output max_pool(net *n, fg_output x, int64_t *side, int64_t k, int64_t stride,
                          int64_t pad) {
  *side = (*side + 2 * pad - k) / stride + 1;
  fg_pool2d_opts o = {{k, k}, {stride, stride}, {pad, pad, pad, pad}, {1, 1}, 0, 1};
  return fg_max_pool2d(n->g, x, &o);
}

/* x [N, C, H, W] -> [N, C*H*W]. */
static fg_output flatten(net *n, fg_output x, int64_t features) {
  int64_t d[2] = {-1, features};
  return fg_reshape(n->g, x, 2, d);
}

/* The loss against "y" and the optimizer's step over the trainable
 * variables, named "loss" and "train". */
static int add_training(net *n, fg_output logits, int64_t batch, fg_optimizer_kind kind,
                        cnn_model *m, fg_status *st) {
  int64_t yd[1] = {batch};
  fg_output y = fg_placeholder(n->g, "y", FG_I32, 1, yd);
  m->loss = fg_set_name(n->g, fg_softmax_cross_entropy(n->g, logits, y), "loss");
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, kind);
  cfg.learning_rate = 0.01;
  m->train = fg_minimize(n->g, m->loss, n->params, n->n_params, &cfg, st);
  if (m->train.node < 0) return -1;
  fg_set_name(n->g, m->train, "train");
  return 0;
}

static int finish(net *n, fg_output logits, cnn_model *m, fg_status *st) {
  m->g = n->g;
  m->logits = fg_set_name(n->g, logits, "logits");
  m->n_params = n->n_params;
  m->n_weights = n->n_weights;
  m->forward_flops = n->flops;
  if (n->n_params >= MAX_PARAMS || fg_graph_status(n->g, st) != FG_OK) {
    fg_graph_free(n->g);
    m->g = NULL;
    return -1;
  }
  return 0;
}

int cnn_lenet(int64_t batch, cnn_model *m, fg_status *st) {
  net n = {.g = fg_graph_new(), .seed = 1, .training = {-1, 0}, .batch = batch};
  if (!n.g) return -1;
  int64_t xd[4] = {batch, 1, 28, 28}, side = 28;
  fg_output h = fg_placeholder(n.g, "x", FG_F32, 4, xd);
  h = fg_relu(n.g, conv(&n, "conv1", h, &side, 1, 6, 5, 1, 0, 1));
  m->stem_flops = n.flops;
  h = max_pool(&n, h, &side, 2, 2, 0);
  h = fg_relu(n.g, conv(&n, "conv2", h, &side, 6, 16, 5, 1, 0, 1));
  h = max_pool(&n, h, &side, 2, 2, 0);
  h = fg_relu(n.g, dense(&n, "fc1", flatten(&n, h, 256), 256, 120));
  h = fg_relu(n.g, dense(&n, "fc2", h, 120, 84));
  fg_output logits = dense(&n, "fc3", h, 84, 10);
  if (add_training(&n, logits, batch, FG_OPTIMIZER_SGD, m, st) != 0) {
    fg_graph_free(n.g);
    return -1;
  }
  return finish(&n, logits, m, st);
}

/* torchvision's BasicBlock: conv3x3(stride) bn relu conv3x3 bn, plus the
 * input (through conv1x1(stride) bn where the shape changes), relu. */
static fg_output basic_block(net *n, const char *name, fg_output x, int64_t *side, int64_t cin,
                             int64_t cout, int64_t stride) {
  char a[96], b[96];
  int64_t in_side = *side;
  snprintf(a, sizeof a, "%s/conv1", name);
  snprintf(b, sizeof b, "%s/bn1", name);
  fg_output h = conv(n, a, x, side, cin, cout, 3, stride, 1, 0);
  h = fg_relu(n->g, batch_norm(n, b, h, cout));
  snprintf(a, sizeof a, "%s/conv2", name);
  snprintf(b, sizeof b, "%s/bn2", name);
  h = batch_norm(n, b, conv(n, a, h, side, cout, cout, 3, 1, 1, 0), cout);
  fg_output skip = x;
  if (stride != 1 || cin != cout) {
    snprintf(a, sizeof a, "%s/down", name);
    snprintf(b, sizeof b, "%s/down_bn", name);
    skip = batch_norm(n, b, conv(n, a, x, &in_side, cin, cout, 1, stride, 0, 0), cout);
  }
  return fg_relu(n->g, fg_add(n->g, h, skip));
}

int cnn_resnet18(int64_t batch, int image, int classes, int cifar, int train, cnn_model *m,
                 fg_status *st) {
  net n = {.g = fg_graph_new(), .seed = 1, .batch = batch};
  if (!n.g) return -1;
  int64_t side = image;
  n.training = fg_training(n.g);
  int64_t xd[4] = {batch, 3, image, image};
  fg_output h = fg_placeholder(n.g, "x", FG_F32, 4, xd);
  if (cifar) {
    h = conv(&n, "conv1", h, &side, 3, 64, 3, 1, 1, 0);
  } else {
    h = conv(&n, "conv1", h, &side, 3, 64, 7, 2, 3, 0);
  }
  m->stem_flops = n.flops;
  h = fg_relu(n.g, batch_norm(&n, "bn1", h, 64));
  if (!cifar) h = max_pool(&n, h, &side, 3, 2, 1);
  static const int64_t widths[4] = {64, 128, 256, 512};
  int64_t cin = 64;
  for (int l = 0; l < 4; l++) {
    for (int b = 0; b < 2; b++) {
      char name[32];
      snprintf(name, sizeof name, "layer%d.%d", l + 1, b);
      int64_t stride = (l > 0 && b == 0) ? 2 : 1;
      h = basic_block(&n, name, h, &side, cin, widths[l], stride);
      cin = widths[l];
    }
  }
  h = flatten(&n, fg_global_avg_pool(n.g, h), 512);
  fg_output logits = dense(&n, "fc", h, 512, classes);
  if (train && add_training(&n, logits, batch, FG_OPTIMIZER_MOMENTUM, m, st) != 0) {
    fg_graph_free(n.g);
    return -1;
  }
  return finish(&n, logits, m, st);
}
