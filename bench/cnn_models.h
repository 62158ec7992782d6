/* The convolutional networks of the CNN benchmarks (bench/cnn_bench.c),
 * built with the public C API only, layer for layer as their PyTorch
 * counterparts in bench/compare_torch_cnn.py:
 *
 * - LeNet-5 on 1x28x28: conv5x5(6), relu, max_pool 2, conv5x5(16), relu,
 *   max_pool 2, fc 120, relu, fc 84, relu, fc 10 (no padding, so the
 *   flattened features are 16x4x4 = 256).
 * - ResNet-18 (He et al. 2016, torchvision's resnet18): basic blocks
 *   [2, 2, 2, 2] of widths 64, 128, 256, 512, batch norm after every
 *   convolution, a 1x1 convolution with batch norm on the shortcut where the
 *   shape changes. The ImageNet form has a 7x7/2 stem and a 3x3/2 max pool;
 *   the CIFAR form (3x32x32) a 3x3/1 stem and no max pool.
 *
 * Weights start as PyTorch's defaults (kaiming_uniform with a = sqrt(5):
 * uniform +-1/sqrt(fan_in)) from fixed seeds; batch norm starts at scale 1,
 * shift 0, running mean 0 and running variance 1. */
#ifndef FG_CNN_MODELS_H
#define FG_CNN_MODELS_H

#include <flowgraph/flowgraph.h>

typedef struct cnn_model {
  fg_graph *g;
  fg_output loss;  /* training graphs: softmax cross-entropy over "y" */
  fg_output train; /* training graphs: the optimizer's step, named "train" */
  fg_output logits;
  int n_params;      /* trainable variables */
  int64_t n_weights; /* their elements */
  /* FLOPs of the forward pass's convolutions and matmuls (2 per
   * multiply-add; batch norm, pooling and activations not counted), and of
   * the first convolution alone: a training step runs the forward pass,
   * the weight gradients and the input gradients but the first layer's. */
  double forward_flops, stem_flops;
} cnn_model;

/* LeNet-5, placeholders "x" [batch, 1, 28, 28] f32 and "y" [batch] i32, one
 * SGD step (learning rate 0.01). 0, or -1 with status set. */
int cnn_lenet(int64_t batch, cnn_model *m, fg_status *st);

/* ResNet-18 with `classes` outputs on "x" [batch, 3, image, image]; cifar: the
 * 3x3 stem without max pool. train: batch norm in training mode (the graph's
 * fg_training node fed true) and an SGD step with momentum 0.9 (learning
 * rate 0.01); else inference only (fetch "logits", batch norm on the
 * running statistics). 0, or -1 with status set. */
int cnn_resnet18(int64_t batch, int image, int classes, int cifar, int train, cnn_model *m,
                 fg_status *st);

#endif
