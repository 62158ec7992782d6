/* Writes small valid .fgb graphs into a folder: seeds for fuzz_load that
 * reach past the verifier into validation, shape inference, planning and the
 * kernels. The repo's own .fgb files are mostly bad inputs and the digits
 * model is 200 KB, too big to mutate quickly; these are a few hundred bytes
 * each and cover every op family, unknown batch dimensions and a training
 * step per optimizer.
 *
 * Usage: fuzz_gen_seeds OUT_DIR
 */
#include <stdio.h>
#include <stdlib.h>

#include "flowgraph/flowgraph.h"

static int save(fg_graph *g, const char *dir, const char *name, fg_status *st) {
  char path[4096];
  snprintf(path, sizeof path, "%s/gen_%s.fgb", dir, name);
  if (fg_graph_status(g, st) != FG_OK || fg_graph_save(g, path, st) != 0) {
    fprintf(stderr, "fuzz_gen_seeds: %s: %s\n", name, fg_status_message(st));
    fg_graph_free(g);
    return 1;
  }
  fg_graph_free(g);
  return 0;
}

static fg_tensor *ramp(fg_dtype dt, int rank, const int64_t *dims, fg_status *st) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, st);
  int64_t n = fg_tensor_num_elements(t);
  for (int64_t i = 0; i < n; i++) {
    double v = (double)(i % 7) * 0.25 - 0.5;
    switch (dt) {
    case FG_F32: ((float *)fg_tensor_data(t))[i] = (float)v; break;
    case FG_F64: ((double *)fg_tensor_data(t))[i] = v; break;
    case FG_I32: ((int32_t *)fg_tensor_data(t))[i] = (int32_t)(i % 3); break;
    case FG_I64: ((int64_t *)fg_tensor_data(t))[i] = i % 3; break;
    case FG_BOOL: ((uint8_t *)fg_tensor_data(t))[i] = (uint8_t)(i & 1); break;
    default: break;
    }
  }
  return t;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  fg_status *st = fg_status_new();
  int bad = 0;
  const int64_t d23[2] = {2, 3}, d32[2] = {3, 2}, dq3[2] = {-1, 3}, d3[1] = {3}, dq[1] = {-1};

  { /* elementwise and unary chain on an unknown batch */
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", FG_F32, 2, dq3);
    fg_tensor *c = ramp(FG_F32, 1, d3, st);
    fg_output b = fg_constant(g, "b", c);
    fg_tensor_free(c);
    fg_output y = fg_add(g, fg_mul(g, x, b), fg_scalar(g, FG_F32, 0.5));
    y = fg_sub(g, fg_div(g, y, fg_add(g, fg_abs(g, x), fg_scalar(g, FG_F32, 1))), x);
    y = fg_maximum(g, fg_minimum(g, y, fg_exp(g, x)), fg_neg(g, y));
    y = fg_add(g, fg_tanh(g, y), fg_sigmoid(g, fg_relu(g, y)));
    y = fg_add(g, fg_gelu(g, y), fg_leaky_relu(g, y, 0.1));
    y = fg_add(g, fg_sqrt(g, fg_abs(g, y)),
               fg_log(g, fg_add(g, fg_abs(g, y), fg_scalar(g, FG_F32, 1))));
    y = fg_add(g, y, fg_rsqrt(g, fg_add(g, fg_abs(g, y), fg_scalar(g, FG_F32, 1))));
    y = fg_pow(g, fg_abs(g, y), fg_scalar(g, FG_F32, 2));
    y = fg_select(g, fg_greater(g, y, x), y, fg_stop_gradient(g, fg_identity(g, x)));
    fg_output e = fg_cast(g, fg_less(g, x, fg_zeros_like(g, x)), FG_F32);
    y = fg_add(g, y, fg_add(g, e, fg_ones_like(g, x)));
    fg_graph_add_output(g, y);
    fg_graph_add_output(g, fg_equal(g, x, y));
    bad |= save(g, dir, "elementwise", st);
  }
  { /* linear algebra and shaping */
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", FG_F32, 2, d23);
    fg_tensor *w = ramp(FG_F32, 2, d32, st);
    fg_output wv = fg_constant(g, "w", w);
    fg_tensor_free(w);
    fg_output m = fg_matmul(g, x, wv, 0, 0);  /* [2,2] */
    fg_output m2 = fg_matmul(g, wv, x, 1, 1); /* [2,2] */
    const int64_t perm[2] = {1, 0}, r4[1] = {4}, r22[2] = {2, -1};
    fg_output t = fg_transpose(g, fg_add(g, m, m2), 2, perm);
    fg_output r = fg_reshape(g, fg_reshape(g, t, 1, r4), 2, r22);
    fg_output parts[2] = {r, x};
    fg_output c = fg_concat(g, parts, 2, 1); /* [2,5] */
    const int64_t b0[2] = {0, 1}, s0[2] = {-1, 3};
    fg_output s = fg_slice(g, c, 2, b0, s0);
    fg_tensor *idx = ramp(FG_I32, 1, d3, st);
    fg_output iv = fg_constant(g, "idx", idx);
    fg_tensor_free(idx);
    fg_output ga = fg_gather(g, fg_transpose(g, s, 2, perm), iv);
    fg_output oh = fg_one_hot(g, iv, 4, FG_F32);
    fg_graph_add_output(g, ga);
    fg_graph_add_output(g, oh);
    bad |= save(g, dir, "shaping", st);
  }
  { /* reductions, softmax family, argmax */
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", FG_F64, 2, dq3);
    const int64_t ax1[1] = {1}, axm[1] = {-1};
    fg_output s = fg_reduce_sum(g, x, ax1, 1, 1);
    fg_output mn = fg_reduce_mean(g, x, NULL, 0, 0);
    fg_output mx = fg_reduce_max(g, x, axm, 1, 0);
    fg_output sm = fg_softmax(g, fg_sub(g, x, s), 1);
    fg_output lsm = fg_log_softmax(g, x, -1);
    fg_graph_add_output(g, fg_add(g, sm, lsm));
    fg_graph_add_output(g, fg_add(g, mn, fg_reduce_sum(g, mx, NULL, 0, 0)));
    fg_graph_add_output(g, fg_argmax(g, x, 1));
    fg_graph_add_output(g, fg_fill(g, FG_I64, 1, d3, 2));
    bad |= save(g, dir, "reduce", st);
  }
  /* a small classifier with a training step per optimizer */
  const fg_optimizer_kind kinds[4] = {FG_OPTIMIZER_SGD, FG_OPTIMIZER_MOMENTUM, FG_OPTIMIZER_ADAM,
                                      FG_OPTIMIZER_ADAMW};
  const char *kn[4] = {"train_sgd", "train_momentum", "train_adam", "train_adamw"};
  for (int k = 0; k < 4; k++) {
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", FG_F32, 2, dq3);
    fg_output y = fg_placeholder(g, "y", k % 2 ? FG_I64 : FG_I32, 1, dq);
    fg_tensor *w = ramp(FG_F32, 2, (const int64_t[2]){3, 4}, st);
    fg_tensor *b = ramp(FG_F32, 1, (const int64_t[1]){4}, st);
    fg_output wv = fg_variable(g, "w", w);
    fg_output bv = fg_variable(g, "b", b);
    fg_tensor_free(w);
    fg_tensor_free(b);
    fg_output logits = fg_add(g, fg_matmul(g, x, wv, 0, 0), bv);
    fg_output loss = fg_softmax_cross_entropy(g, logits, y);
    fg_optimizer_config cfg;
    fg_optimizer_config_init(&cfg, kinds[k]);
    if (k == 1) cfg.nesterov = 1;
    if (k == 2) cfg.clip_global_norm = 1.0;
    fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, st);
    (void)train;
    fg_graph_add_output(g, loss);
    fg_graph_add_output(g, fg_softmax(g, logits, 1));
    bad |= save(g, dir, kn[k], st);
  }
  { /* gradients of a mixed graph, assign */
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", FG_F32, 2, d23);
    fg_tensor *v0 = ramp(FG_F32, 2, d23, st);
    fg_output v = fg_variable(g, "v", v0);
    fg_tensor_free(v0);
    const int64_t b0[2] = {0, 0}, s0[2] = {2, 2};
    fg_output ps[2] = {fg_slice(g, x, 2, b0, s0), fg_slice(g, v, 2, b0, s0)};
    fg_output yv =
        fg_reduce_mean(g, fg_mul(g, fg_concat(g, ps, 2, 0), fg_concat(g, ps, 2, 0)), NULL, 0, 0);
    fg_output xs[2] = {x, v}, dx[2];
    fg_gradients(g, &yv, 1, xs, 2, NULL, dx, st);
    fg_output a = fg_assign(g, v, fg_sub(g, v, dx[1]));
    fg_graph_add_output(g, dx[0]);
    fg_graph_add_output(g, a);
    bad |= save(g, dir, "grad_assign", st);
  }
  fg_status_free(st);
  return bad;
}
