/* Second derivatives through the math gradients (autodiff/grad_math.c):
 * the backward graph must itself be differentiable.
 *
 * The finite-difference cases build, inside the checked function, the
 * gradient G(x) = d/dx [ sum(f(x)^2) / 2 ] = f(x) * f'(x) and let
 * tests/autodiff/grad_check.h differentiate G again (a Hessian-vector product
 * against its random weights). Squaring f makes the inner dy depend on x,
 * so both the dy path and the x path of each gradient are exercised. */
#include <flowgraph/flowgraph.h>

#include "fgtest.h"
#include "grad_check.h"

#define IN(lo, hi, rank, ...) ((fgt_input){FG_F64, rank, {__VA_ARGS__}, NULL, lo, hi})
#define IND(data, rank, ...)  ((fgt_input){FG_F64, rank, {__VA_ARGS__}, data, 0, 0})

typedef fg_output (*fwd_fn)(fg_graph *, const fg_output *);

typedef struct hvp_ctx {
  fwd_fn f;
  int n; /* inputs; the returned gradient is the sum over them when n == 2
            and same_shape, else the gradient of input 0 */
  int same_shape;
} hvp_ctx;

static fg_output build_grad(fg_graph *g, const fg_output *xs, void *c) {
  hvp_ctx *h = c;
  fg_output y = h->f(g, xs);
  fg_output inner =
      fg_mul(g, fg_reduce_sum(g, fg_mul(g, y, y), NULL, 0, 0), fg_scalar(g, FG_F64, 0.5));
  fg_output dx[2];
  fg_status *st = fg_status_new();
  int rc = fg_gradients(g, &inner, 1, xs, h->n, NULL, dx, st);
  if (rc) fprintf(stderr, "inner fg_gradients: %s\n", fg_status_message(st));
  fg_status_free(st);
  if (rc) return FG_NO_OUTPUT;
  return (h->n == 2 && h->same_shape) ? fg_add(g, dx[0], dx[1]) : dx[0];
}

static double check_hvp(fwd_fn f, int n, int same_shape, const fgt_input *ins, uint64_t seed) {
  hvp_ctx c = {f, n, same_shape};
  return fgt_grad_check(build_grad, &c, ins, n, seed);
}

static fg_output f_mul(fg_graph *g, const fg_output *x) { return fg_mul(g, x[0], x[1]); }
static fg_output f_div(fg_graph *g, const fg_output *x) { return fg_div(g, x[0], x[1]); }
static fg_output f_pow(fg_graph *g, const fg_output *x) { return fg_pow(g, x[0], x[1]); }
static fg_output f_max(fg_graph *g, const fg_output *x) { return fg_maximum(g, x[0], x[1]); }
static fg_output f_sub(fg_graph *g, const fg_output *x) { return fg_sub(g, x[0], x[1]); }
static fg_output f_exp(fg_graph *g, const fg_output *x) { return fg_exp(g, x[0]); }
static fg_output f_log(fg_graph *g, const fg_output *x) { return fg_log(g, x[0]); }
static fg_output f_sqrt(fg_graph *g, const fg_output *x) { return fg_sqrt(g, x[0]); }
static fg_output f_rsqrt(fg_graph *g, const fg_output *x) { return fg_rsqrt(g, x[0]); }
static fg_output f_tanh(fg_graph *g, const fg_output *x) { return fg_tanh(g, x[0]); }
static fg_output f_sigmoid(fg_graph *g, const fg_output *x) { return fg_sigmoid(g, x[0]); }
static fg_output f_gelu(fg_graph *g, const fg_output *x) { return fg_gelu(g, x[0]); }
static fg_output f_erf(fg_graph *g, const fg_output *x) {
  return fg_op(g, "erf", NULL, x, 1, NULL);
}
static fg_output f_abs(fg_graph *g, const fg_output *x) { return fg_abs(g, x[0]); }
static fg_output f_relu(fg_graph *g, const fg_output *x) { return fg_relu(g, x[0]); }
static fg_output f_leaky(fg_graph *g, const fg_output *x) { return fg_leaky_relu(g, x[0], 0.3); }
static fg_output f_cast(fg_graph *g, const fg_output *x) {
  return fg_cast(g, fg_tanh(g, x[0]), FG_F64);
}
/* cond = x0 > 0.1 (bool, no gradient), values x0^2 and 3 x1. */
static fg_output f_select(fg_graph *g, const fg_output *x) {
  return fg_select(g, fg_greater(g, x[0], fg_scalar(g, FG_F64, 0.1)), fg_mul(g, x[0], x[0]),
                   fg_mul(g, x[1], fg_scalar(g, FG_F64, 3)));
}
/* Reductions of x^2, so the second derivative is not zero. */
static fg_output f_rsum(fg_graph *g, const fg_output *x) {
  int64_t ax = 1;
  return fg_reduce_sum(g, fg_mul(g, x[0], x[0]), &ax, 1, 0);
}
static fg_output f_rmean(fg_graph *g, const fg_output *x) {
  int64_t ax = 1;
  return fg_reduce_mean(g, fg_mul(g, x[0], x[0]), &ax, 1, 0);
}
static fg_output f_rmean_all(fg_graph *g, const fg_output *x) {
  return fg_reduce_mean(g, fg_mul(g, x[0], x[0]), NULL, 0, 0);
}
static fg_output f_rmax(fg_graph *g, const fg_output *x) {
  int64_t ax = 1;
  return fg_reduce_max(g, fg_mul(g, x[0], x[0]), &ax, 1, 0);
}

/* Pairs at least 0.2 apart; values at least 0.1 from 0 and from 0.1's
 * neighbourhood, away from every kink. */
static const double kink_a[6] = {0.3, -0.7, 1.2, -0.15, 0.9, -1.4};
static const double kink_b[6] = {-0.5, 0.4, 0.8, 0.6, -0.2, -0.9};

FG_TEST(grad_hvp_mul, "") {
  fgt_input in[2] = {IN(0, 0, 2, 2, 3), IN(0, 0, 2, 2, 3)};
  FG_CHECK_GRAD(check_hvp(f_mul, 2, 1, in, 1));
}
FG_TEST(grad_hvp_mul_broadcast, "") {
  fgt_input in[2] = {IN(0, 0, 2, 2, 3), IN(0, 0, 1, 3)};
  FG_CHECK_GRAD(check_hvp(f_mul, 2, 0, in, 2));
}
FG_TEST(grad_hvp_sub_broadcast, "") {
  fgt_input in[2] = {IN(0, 0, 1, 3), IN(0, 0, 2, 2, 3)};
  FG_CHECK_GRAD(check_hvp(f_sub, 2, 0, in, 3));
}
FG_TEST(grad_hvp_div, "") {
  fgt_input in[2] = {IN(0, 0, 2, 2, 3), IN(0.5, 2, 2, 2, 3)};
  FG_CHECK_GRAD(check_hvp(f_div, 2, 1, in, 4));
}
FG_TEST(grad_hvp_pow, "") {
  fgt_input in[2] = {IN(0.5, 2, 2, 2, 3), IN(-2, 2, 2, 2, 3)};
  FG_CHECK_GRAD(check_hvp(f_pow, 2, 1, in, 5));
}
FG_TEST(grad_hvp_maximum, "") {
  fgt_input in[2] = {IND(kink_a, 2, 2, 3), IND(kink_b, 2, 2, 3)};
  FG_CHECK_GRAD(check_hvp(f_max, 2, 1, in, 6));
}
FG_TEST(grad_hvp_select, "") {
  fgt_input in[2] = {IND(kink_a, 2, 2, 3), IN(0, 0, 2, 2, 3)};
  FG_CHECK_GRAD(check_hvp(f_select, 2, 1, in, 7));
}
FG_TEST(grad_hvp_exp, "") {
  fgt_input in = IN(-1, 1, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_exp, 1, 0, &in, 8));
}
FG_TEST(grad_hvp_log, "") {
  fgt_input in = IN(0.5, 3, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_log, 1, 0, &in, 9));
}
FG_TEST(grad_hvp_sqrt, "") {
  fgt_input in = IN(0.5, 3, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_sqrt, 1, 0, &in, 10));
}
FG_TEST(grad_hvp_rsqrt, "") {
  fgt_input in = IN(0.5, 3, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_rsqrt, 1, 0, &in, 11));
}
FG_TEST(grad_hvp_tanh, "") {
  fgt_input in = IN(-2, 2, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_tanh, 1, 0, &in, 12));
}
FG_TEST(grad_hvp_sigmoid, "") {
  fgt_input in = IN(-3, 3, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_sigmoid, 1, 0, &in, 13));
}
FG_TEST(grad_hvp_gelu, "") {
  fgt_input in = IN(-3, 3, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_gelu, 1, 0, &in, 14));
}
FG_TEST(grad_hvp_erf, "") {
  fgt_input in = IN(-2, 2, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_erf, 1, 0, &in, 15));
}
FG_TEST(grad_hvp_abs, "") {
  fgt_input in = IND(kink_a, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_abs, 1, 0, &in, 16));
}
FG_TEST(grad_hvp_relu, "") {
  fgt_input in = IND(kink_a, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_relu, 1, 0, &in, 17));
}
FG_TEST(grad_hvp_leaky_relu, "") {
  fgt_input in = IND(kink_a, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_leaky, 1, 0, &in, 18));
}
FG_TEST(grad_hvp_cast, "") {
  fgt_input in = IN(0, 0, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_cast, 1, 0, &in, 19));
}
FG_TEST(grad_hvp_reduce_sum, "") {
  fgt_input in = IN(0, 0, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_rsum, 1, 0, &in, 20));
}
FG_TEST(grad_hvp_reduce_mean, "") {
  fgt_input in = IN(0, 0, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_rmean, 1, 0, &in, 21));
}
FG_TEST(grad_hvp_reduce_mean_all, "") {
  fgt_input in = IN(0, 0, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_rmean_all, 1, 0, &in, 22));
}
FG_TEST(grad_hvp_reduce_max, "") {
  fgt_input in = IN(0, 0, 2, 2, 3);
  FG_CHECK_GRAD(check_hvp(f_rmax, 1, 0, &in, 23));
}

/* ---- by hand: d/dx sum(d/dx sum(x^3)) = d/dx sum(3x^2) = 6x -------------- */

static void second_order_cube(int use_pow) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d = 3;
  fg_output x = fg_placeholder(g, "x", FG_F64, 1, &d);
  fg_output cube = use_pow ? fg_pow(g, x, fg_scalar(g, FG_F64, 3)) : fg_mul(g, fg_mul(g, x, x), x);
  fg_output y = fg_reduce_sum(g, cube, NULL, 0, 0), g1, g2;
  FG_REQUIRE(fg_gradients(g, &y, 1, &x, 1, NULL, &g1, st) == 0);
  fg_output z = fg_reduce_sum(g, g1, NULL, 0, 0);
  FG_REQUIRE(fg_gradients(g, &z, 1, &x, 1, NULL, &g2, st) == 0);
  fg_set_name(g, fg_identity(g, g1), "g1");
  fg_set_name(g, fg_identity(g, g2), "g2");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  double xv[3] = {1, -2, 0.5};
  fg_tensor *xt = fg_tensor_from_data(FG_F64, 1, &d, xv, sizeof xv, st);
  fg_feed feed = {"x", xt};
  const char *fetch[2] = {"g1", "g2"};
  fg_tensor *out[2] = {0};
  FG_REQUIRE(fg_session_run(s, &feed, 1, fetch, 2, out, NULL, 0, st) == 0);
  const double *v1 = fg_tensor_data(out[0]), *v2 = fg_tensor_data(out[1]);
  double w1[3] = {3, 12, 0.75}, w2[3] = {6, -12, 3};
  for (int i = 0; i < 3; i++) {
    FG_CHECK_NEAR(v1[i], w1[i], 1e-12);
    FG_CHECK_NEAR(v2[i], w2[i], 1e-12);
  }
  for (int i = 0; i < 2; i++)
    fg_tensor_free(out[i]);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(grad_second_order_cube_mul, "") { second_order_cube(0); }
FG_TEST(grad_second_order_cube_pow, "") { second_order_cube(1); }
