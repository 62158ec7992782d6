/* Finite-difference checks (f64, tests/autodiff/grad_check.h) of the
 * normalization ops' gradients for x, scale and shift, on odd shapes:
 * C = 3 and 5, spatial 2x3, 3x3 and 4, groups of 2 and 3 channels, one group,
 * one group per channel; batch_norm in both modes (inference with running
 * statistics that are not 0 and 1). */
#include <stdint.h>

#include "fgtest.h"
#include "grad_check.h"

#define IN(lo, hi, rank, ...) ((fgt_input){FG_F64, rank, {__VA_ARGS__}, NULL, lo, hi})

static const uint8_t yes = 1, no = 0;
#define FLAG(p) ((fgt_input){FG_BOOL, 0, {0}, p, 0, 0})

static fg_output vec_var(fg_graph *g, const char *name, int64_t c, double base, double step) {
  double v[8];
  for (int i = 0; i < c && i < 8; i++)
    v[i] = base + step * i;
  fg_tensor *t = fg_tensor_from_data(FG_F64, 1, &c, v, (size_t)c * sizeof *v, NULL);
  fg_output o = fg_variable(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* xs: x, scale, shift, training. */
static fg_output build_bn(fg_graph *g, const fg_output *xs, void *ctx) {
  (void)ctx;
  int64_t d[FG_MAX_RANK];
  fg_output_shape(g, xs[0], d);
  fg_output rm = vec_var(g, "rm", d[1], -0.3, 0.2), rv = vec_var(g, "rv", d[1], 0.6, 0.35);
  return fg_batch_norm(g, xs[0], xs[1], xs[2], rm, rv, xs[3], 0.1, 1e-5);
}

FG_TEST(grad_batch_norm_training_c5, "") {
  fgt_input in[4] = {IN(-2, 2, 4, 3, 5, 2, 3), IN(0.5, 1.5, 1, 5), IN(0, 0, 1, 5), FLAG(&yes)};
  FG_CHECK_GRAD(fgt_grad_check(build_bn, NULL, in, 4, 1));
}

FG_TEST(grad_batch_norm_inference_c5, "") {
  fgt_input in[4] = {IN(-2, 2, 4, 3, 5, 2, 3), IN(0.5, 1.5, 1, 5), IN(0, 0, 1, 5), FLAG(&no)};
  FG_CHECK_GRAD(fgt_grad_check(build_bn, NULL, in, 4, 2));
}

FG_TEST(grad_batch_norm_training_rank2_c3, "") {
  fgt_input in[4] = {IN(-1, 3, 2, 7, 3), IN(-1.5, -0.5, 1, 3), IN(0, 0, 1, 3), FLAG(&yes)};
  FG_CHECK_GRAD(fgt_grad_check(build_bn, NULL, in, 4, 3));
}

/* ctx: the normalized rank. */
static fg_output build_ln(fg_graph *g, const fg_output *xs, void *ctx) {
  return fg_layer_norm(g, xs[0], xs[1], xs[2], *(int *)ctx, 1e-5);
}
static fg_output build_ln_plain(fg_graph *g, const fg_output *xs, void *ctx) {
  return fg_layer_norm(g, xs[0], FG_NO_OUTPUT, FG_NO_OUTPUT, *(int *)ctx, 1e-5);
}

FG_TEST(grad_layer_norm_last_two_dims, "") {
  int k = 2;
  fgt_input in[3] = {IN(-2, 2, 3, 2, 3, 5), IN(0.5, 1.5, 2, 3, 5), IN(0, 0, 2, 3, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_ln, &k, in, 3, 4));
}

FG_TEST(grad_layer_norm_last_dim_no_affine, "") {
  int k = 1;
  fgt_input in[1] = {IN(-2, 2, 3, 2, 3, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_ln_plain, &k, in, 1, 5));
}

/* ctx: num_groups. */
static fg_output build_gn(fg_graph *g, const fg_output *xs, void *ctx) {
  return fg_group_norm(g, xs[0], xs[1], xs[2], *(int64_t *)ctx, 1e-5);
}

FG_TEST(grad_group_norm_3_groups_of_2, "") {
  int64_t groups = 3;
  fgt_input in[3] = {IN(-2, 2, 4, 2, 6, 2, 3), IN(0.5, 1.5, 1, 6), IN(0, 0, 1, 6)};
  FG_CHECK_GRAD(fgt_grad_check(build_gn, &groups, in, 3, 6));
}

FG_TEST(grad_group_norm_one_group_c5, "") {
  int64_t groups = 1;
  fgt_input in[3] = {IN(-2, 2, 3, 3, 5, 4), IN(0.5, 1.5, 1, 5), IN(0, 0, 1, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_gn, &groups, in, 3, 7));
}

static fg_output build_in(fg_graph *g, const fg_output *xs, void *ctx) {
  (void)ctx;
  return fg_instance_norm(g, xs[0], xs[1], xs[2], 1e-5);
}

FG_TEST(grad_instance_norm_c5, "") {
  fgt_input in[3] = {IN(-2, 2, 4, 2, 5, 3, 3), IN(0.5, 1.5, 1, 5), IN(0, 0, 1, 5)};
  FG_CHECK_GRAD(fgt_grad_check(build_in, NULL, in, 3, 8));
}
