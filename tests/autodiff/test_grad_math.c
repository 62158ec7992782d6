/* Gradients of the elementwise math ops and cast (autodiff/grad_math.c).
 *
 * Smooth cases are checked against central finite differences in f64
 * (tests/autodiff/grad_check.h), including the broadcasting shapes [2,3]+[3],
 * [2,1]+[1,3], rank-0+[2,3] and [4,1,3]+[2,3]. Inputs of ops with kinks
 * (relu, abs, maximum, ...) are chosen well away from the kink. Behaviour at
 * the kinks and ties, where finite differences say nothing, is checked
 * against values worked out by hand (PyTorch's conventions). */
#include <math.h>

#include <flowgraph/flowgraph.h>

#include "autodiff/grad.h"
#include "fgtest.h"
#include "grad_check.h"

/* An f64 input of the given shape, uniform in [lo, hi) ([-1, 1) when both 0). */
#define IN(lo, hi, rank, ...) ((fgt_input){FG_F64, rank, {__VA_ARGS__}, NULL, lo, hi})
#define IN0(lo, hi)           ((fgt_input){FG_F64, 0, {0}, NULL, lo, hi})
/* An f64 input with fixed data. */
#define IND(data, rank, ...) ((fgt_input){FG_F64, rank, {__VA_ARGS__}, data, 0, 0})

typedef fg_output (*bin_fn)(fg_graph *, fg_output, fg_output);
typedef fg_output (*un_fn)(fg_graph *, fg_output);
typedef struct bin_ctx {
  bin_fn f;
} bin_ctx;
typedef struct un_ctx {
  un_fn f;
} un_ctx;

static fg_output build_bin(fg_graph *g, const fg_output *xs, void *c) {
  return ((bin_ctx *)c)->f(g, xs[0], xs[1]);
}

static fg_output build_un(fg_graph *g, const fg_output *xs, void *c) {
  return ((un_ctx *)c)->f(g, xs[0]);
}

static double check_bin(bin_fn f, fgt_input a, fgt_input b, uint64_t seed) {
  bin_ctx c = {f};
  fgt_input ins[2] = {a, b};
  return fgt_grad_check(build_bin, &c, ins, 2, seed);
}

static double check_un(un_fn f, fgt_input x, uint64_t seed) {
  un_ctx c = {f};
  return fgt_grad_check(build_un, &c, &x, 1, seed);
}

/* ---- hand-computed cases: graphs on constants ---------------------------- */

static fg_output const_t(fg_graph *g, const char *name, fg_dtype dt, int rank, const int64_t *dims,
                         const void *data, size_t bytes) {
  fg_tensor *t = fg_tensor_from_data(dt, rank, dims, data, bytes, NULL);
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

static fg_output const_f64(fg_graph *g, const char *name, int rank, const int64_t *dims,
                           const double *data) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  return const_t(g, name, FG_F64, rank, dims, data, (size_t)n * sizeof(double));
}

/* Fetches d(sum(y))/d(xs[i]) into out[i]; 0 or -1 (printed). */
static int grad_of_sum(fg_graph *g, fg_output y, const fg_output *xs, int n, fg_tensor **out) {
  fg_status *st = fg_status_new();
  fg_output L = fg_reduce_sum(g, y, NULL, 0, 0);
  fg_output dx[4];
  char names[4][24];
  const char *fetch[4];
  int rc = -1;
  fg_session *s = NULL;
  if (n > 4 || fg_gradients(g, &L, 1, xs, n, NULL, dx, st) != 0) goto done;
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "hand_dx%d", i);
    fg_set_name(g, fg_identity(g, dx[i]), names[i]);
    fetch[i] = names[i];
  }
  s = fg_session_new(g, NULL, st);
  if (s && fg_session_run(s, NULL, 0, fetch, n, out, NULL, 0, st) == 0) rc = 0;
done:
  if (rc) fprintf(stderr, "grad_of_sum: %s\n", fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

static void check_values(const fg_tensor *t, const double *want, int n) {
  FG_REQUIRE(t && fg_tensor_dtype(t) == FG_F64 && fg_tensor_num_elements(t) == n);
  const double *v = fg_tensor_data(t);
  for (int i = 0; i < n; i++)
    FG_CHECK_NEAR(v[i], want[i], 1e-12);
}

/* ---- add, sub, mul, div -------------------------------------------------- */

FG_TEST(grad_add_same_shape, "") {
  FG_CHECK_GRAD(check_bin(fg_add, IN(0, 0, 2, 2, 3), IN(0, 0, 2, 2, 3), 1));
}
FG_TEST(grad_add_broadcast_row, "") {
  FG_CHECK_GRAD(check_bin(fg_add, IN(0, 0, 2, 2, 3), IN(0, 0, 1, 3), 2));
}
FG_TEST(grad_add_outer, "") {
  FG_CHECK_GRAD(check_bin(fg_add, IN(0, 0, 2, 2, 1), IN(0, 0, 2, 1, 3), 3));
}
FG_TEST(grad_add_scalar, "") { FG_CHECK_GRAD(check_bin(fg_add, IN0(0, 0), IN(0, 0, 2, 2, 3), 4)); }
FG_TEST(grad_add_rank3, "") {
  FG_CHECK_GRAD(check_bin(fg_add, IN(0, 0, 3, 4, 1, 3), IN(0, 0, 2, 2, 3), 5));
}

FG_TEST(grad_sub_broadcast_row, "") {
  FG_CHECK_GRAD(check_bin(fg_sub, IN(0, 0, 2, 2, 3), IN(0, 0, 1, 3), 6));
}
FG_TEST(grad_sub_outer, "") {
  FG_CHECK_GRAD(check_bin(fg_sub, IN(0, 0, 2, 1, 3), IN(0, 0, 2, 2, 1), 7));
}
FG_TEST(grad_sub_scalar_lhs, "") {
  FG_CHECK_GRAD(check_bin(fg_sub, IN0(0, 0), IN(0, 0, 2, 2, 3), 8));
}

FG_TEST(grad_mul_same_shape, "") {
  FG_CHECK_GRAD(check_bin(fg_mul, IN(0, 0, 2, 2, 3), IN(0, 0, 2, 2, 3), 9));
}
FG_TEST(grad_mul_scalar, "") { FG_CHECK_GRAD(check_bin(fg_mul, IN(0, 0, 2, 2, 3), IN0(0, 0), 10)); }
FG_TEST(grad_mul_outer, "") {
  FG_CHECK_GRAD(check_bin(fg_mul, IN(0, 0, 2, 2, 1), IN(0, 0, 2, 1, 3), 11));
}
FG_TEST(grad_mul_rank3, "") {
  FG_CHECK_GRAD(check_bin(fg_mul, IN(0, 0, 2, 2, 3), IN(0, 0, 3, 4, 1, 3), 12));
}

FG_TEST(grad_div, "") {
  FG_CHECK_GRAD(check_bin(fg_div, IN(0, 0, 2, 2, 3), IN(0.5, 2, 2, 2, 3), 13));
}
FG_TEST(grad_div_negative_divisor, "") {
  FG_CHECK_GRAD(check_bin(fg_div, IN(0, 0, 2, 2, 3), IN(-2, -0.5, 2, 2, 3), 14));
}
FG_TEST(grad_div_broadcast_rank3, "") {
  FG_CHECK_GRAD(check_bin(fg_div, IN(0, 0, 3, 4, 1, 3), IN(0.5, 2, 2, 2, 3), 15));
}
FG_TEST(grad_div_scalar_divisor, "") {
  FG_CHECK_GRAD(check_bin(fg_div, IN(0, 0, 2, 2, 3), IN0(0.5, 2), 16));
}
FG_TEST(grad_div_scalar_numerator, "") {
  FG_CHECK_GRAD(check_bin(fg_div, IN0(0, 0), IN(0.5, 2, 2, 2, 3), 17));
}

/* ---- pow ----------------------------------------------------------------- */

FG_TEST(grad_pow_positive_base, "") {
  FG_CHECK_GRAD(check_bin(fg_pow, IN(0.5, 2, 2, 2, 3), IN(-2, 2, 2, 2, 3), 18));
}
FG_TEST(grad_pow_broadcast_exponent, "") {
  FG_CHECK_GRAD(check_bin(fg_pow, IN(0.5, 2, 2, 2, 3), IN(-2, 2, 1, 3), 19));
}
FG_TEST(grad_pow_scalar_exponent, "") {
  FG_CHECK_GRAD(check_bin(fg_pow, IN(0.5, 2, 2, 2, 3), IN0(-2, 2), 20));
}
FG_TEST(grad_pow_outer, "") {
  FG_CHECK_GRAD(check_bin(fg_pow, IN(0.5, 2, 2, 2, 1), IN(-2, 2, 2, 1, 3), 21));
}

/* A negative base is fine for an integer exponent; the exponent is a
 * constant here (x^b for b < 0 has no real derivative in b). */
static fg_output build_pow_int_exponent(fg_graph *g, const fg_output *xs, void *c) {
  (void)c;
  int64_t d = 3;
  double b[3] = {2, 3, -1};
  return fg_pow(g, xs[0], const_f64(g, "b", 1, &d, b));
}

FG_TEST(grad_pow_negative_base_int_exponent, "") {
  fgt_input a = IN(-2, -0.5, 2, 2, 3);
  FG_CHECK_GRAD(fgt_grad_check(build_pow_int_exponent, NULL, &a, 1, 22));
}

/* y = a^b at a = [0, -1, 2, 0], b = [0, 2, 3, 2]:
 *   da = b a^(b-1), 0 where b == 0: [0 (not 0 * inf), 2 * -1 = -2, 3 * 4 = 12, 2 * 0 = 0]
 *   db = y log a where a > 0, else 0: [0, 0, 8 ln 2, 0] */
FG_TEST(grad_pow_zero_and_negative_base_by_hand, "") {
  fg_graph *g = fg_graph_new();
  int64_t d = 4;
  double av[4] = {0, -1, 2, 0}, bv[4] = {0, 2, 3, 2};
  fg_output xs[2] = {const_f64(g, "a", 1, &d, av), const_f64(g, "b", 1, &d, bv)};
  fg_tensor *out[2] = {0};
  FG_REQUIRE(grad_of_sum(g, fg_pow(g, xs[0], xs[1]), xs, 2, out) == 0);
  double da[4] = {0, -2, 12, 0}, db[4] = {0, 0, 8 * log(2.0), 0};
  check_values(out[0], da, 4);
  check_values(out[1], db, 4);
  for (int i = 0; i < 2; i++)
    fg_tensor_free(out[i]);
  fg_graph_free(g);
}

/* ---- maximum, minimum ---------------------------------------------------- */

/* Pairs at least 0.2 apart, so no difference step crosses a tie. */
static const double mm_a[6] = {0.3, -0.7, 1.2, -0.1, 0.9, -1.4};
static const double mm_b[6] = {-0.5, 0.4, 0.8, 0.6, -0.2, -0.9};
static const double mm_row[3] = {0.1, -0.3, 0.5};

FG_TEST(grad_maximum, "") {
  FG_CHECK_GRAD(check_bin(fg_maximum, IND(mm_a, 2, 2, 3), IND(mm_b, 2, 2, 3), 23));
}
FG_TEST(grad_maximum_broadcast_row, "") {
  FG_CHECK_GRAD(check_bin(fg_maximum, IND(mm_a, 2, 2, 3), IND(mm_row, 1, 3), 24));
}
FG_TEST(grad_minimum, "") {
  FG_CHECK_GRAD(check_bin(fg_minimum, IND(mm_a, 2, 2, 3), IND(mm_b, 2, 2, 3), 25));
}
FG_TEST(grad_minimum_outer, "") {
  FG_CHECK_GRAD(check_bin(fg_minimum, IND(mm_b, 2, 2, 1), IND(mm_row, 2, 1, 3), 26));
}

/* a = [1, 2, 3, 4], b = [1, 0, 5, 4]: ties at 0 and 3 split dy equally.
 *   maximum: da = [.5, 1, 0, .5], db = [.5, 0, 1, .5]
 *   minimum: da = [.5, 0, 1, .5], db = [.5, 1, 0, .5] */
static void minmax_ties(bin_fn f, const double *want_a, const double *want_b) {
  fg_graph *g = fg_graph_new();
  int64_t d = 4;
  double av[4] = {1, 2, 3, 4}, bv[4] = {1, 0, 5, 4};
  fg_output xs[2] = {const_f64(g, "a", 1, &d, av), const_f64(g, "b", 1, &d, bv)};
  fg_tensor *out[2] = {0};
  FG_REQUIRE(grad_of_sum(g, f(g, xs[0], xs[1]), xs, 2, out) == 0);
  check_values(out[0], want_a, 4);
  check_values(out[1], want_b, 4);
  for (int i = 0; i < 2; i++)
    fg_tensor_free(out[i]);
  fg_graph_free(g);
}

FG_TEST(grad_maximum_ties_split, "") {
  double da[4] = {.5, 1, 0, .5}, db[4] = {.5, 0, 1, .5};
  minmax_ties(fg_maximum, da, db);
}

FG_TEST(grad_minimum_ties_split, "") {
  double da[4] = {.5, 0, 1, .5}, db[4] = {.5, 1, 0, .5};
  minmax_ties(fg_minimum, da, db);
}

/* a = [[1, 2], [3, 1]], b = [1, 2] (broadcast over rows); maximum:
 *   da = [[.5, .5], [1, 0]]; db = column sums of [[.5, .5], [0, 1]] = [.5, 1.5] */
FG_TEST(grad_maximum_ties_broadcast, "") {
  fg_graph *g = fg_graph_new();
  int64_t da_d[2] = {2, 2}, db_d = 2;
  double av[4] = {1, 2, 3, 1}, bv[2] = {1, 2};
  fg_output xs[2] = {const_f64(g, "a", 2, da_d, av), const_f64(g, "b", 1, &db_d, bv)};
  fg_tensor *out[2] = {0};
  FG_REQUIRE(grad_of_sum(g, fg_maximum(g, xs[0], xs[1]), xs, 2, out) == 0);
  double wa[4] = {.5, .5, 1, 0}, wb[2] = {.5, 1.5};
  check_values(out[0], wa, 4);
  check_values(out[1], wb, 2);
  for (int i = 0; i < 2; i++)
    fg_tensor_free(out[i]);
  fg_graph_free(g);
}

/* ---- select -------------------------------------------------------------- */

typedef struct select_ctx {
  int rank;
  int64_t dims[2];
  const uint8_t *cond;
} select_ctx;

static fg_output build_select(fg_graph *g, const fg_output *xs, void *c) {
  select_ctx *s = c;
  int64_t n = s->rank ? s->dims[0] * (s->rank > 1 ? s->dims[1] : 1) : 1;
  fg_output cond = const_t(g, "cond", FG_BOOL, s->rank, s->dims, s->cond, (size_t)n);
  return fg_select(g, cond, xs[0], xs[1]);
}

FG_TEST(grad_select_broadcast, "") {
  static const uint8_t cond[6] = {1, 0, 0, 1, 1, 0};
  select_ctx c = {2, {2, 3}, cond};
  fgt_input ins[2] = {IN(0, 0, 2, 2, 3), IN(0, 0, 1, 3)};
  FG_CHECK_GRAD(fgt_grad_check(build_select, &c, ins, 2, 27));
}

/* cond [3] broadcasts against a [2,1] and a rank-0 b: the output is [2,3]. */
FG_TEST(grad_select_cond_broadcast, "") {
  static const uint8_t cond[3] = {1, 0, 1};
  select_ctx c = {1, {3, 0}, cond};
  fgt_input ins[2] = {IN(0, 0, 2, 2, 1), IN0(0, 0)};
  FG_CHECK_GRAD(fgt_grad_check(build_select, &c, ins, 2, 28));
}

/* ---- unary --------------------------------------------------------------- */

static fg_output leaky_02(fg_graph *g, fg_output x) { return fg_leaky_relu(g, x, 0.2); }
static fg_output elu_05(fg_graph *g, fg_output x) { return fg_elu(g, x, 0.5); }
static fg_output erf_(fg_graph *g, fg_output x) { return fg_op(g, "erf", NULL, &x, 1, NULL); }
static fg_output cast_f64(fg_graph *g, fg_output x) { return fg_cast(g, x, FG_F64); }
static fg_output softplus_2_3(fg_graph *g, fg_output x) { return fg_softplus(g, x, 2, 3); }
static fg_output softplus_2_1(fg_graph *g, fg_output x) { return fg_softplus(g, x, 2, 1); }
static fg_output clip_m05_1(fg_graph *g, fg_output x) { return fg_clip(g, x, -0.5, 1); }
static fg_output clip_0_2(fg_graph *g, fg_output x) { return fg_clip(g, x, 0, 2); }
static fg_output clip_1_1(fg_graph *g, fg_output x) { return fg_clip(g, x, 1, 1); }

/* Values at least 0.1 from 0 (the kink of relu, abs and leaky_relu). */
static const double kink_x[6] = {-1.3, -0.2, 0.15, 0.7, -0.6, 2.1};

FG_TEST(grad_neg, "") { FG_CHECK_GRAD(check_un(fg_neg, IN(0, 0, 2, 2, 3), 30)); }
FG_TEST(grad_exp, "") { FG_CHECK_GRAD(check_un(fg_exp, IN(-2, 2, 2, 2, 3), 31)); }
FG_TEST(grad_exp_scalar, "") { FG_CHECK_GRAD(check_un(fg_exp, IN0(-1, 1), 32)); }
FG_TEST(grad_log, "") { FG_CHECK_GRAD(check_un(fg_log, IN(0.2, 3, 2, 2, 3), 33)); }
FG_TEST(grad_sqrt, "") { FG_CHECK_GRAD(check_un(fg_sqrt, IN(0.2, 3, 2, 2, 3), 34)); }
FG_TEST(grad_rsqrt, "") { FG_CHECK_GRAD(check_un(fg_rsqrt, IN(0.2, 3, 2, 2, 3), 35)); }
FG_TEST(grad_abs, "") { FG_CHECK_GRAD(check_un(fg_abs, IND(kink_x, 2, 2, 3), 36)); }
FG_TEST(grad_tanh, "") { FG_CHECK_GRAD(check_un(fg_tanh, IN(-2, 2, 2, 2, 3), 37)); }
FG_TEST(grad_sigmoid, "") { FG_CHECK_GRAD(check_un(fg_sigmoid, IN(-3, 3, 2, 2, 3), 38)); }
FG_TEST(grad_relu, "") { FG_CHECK_GRAD(check_un(fg_relu, IND(kink_x, 2, 2, 3), 39)); }
FG_TEST(grad_leaky_relu, "") { FG_CHECK_GRAD(check_un(leaky_02, IND(kink_x, 2, 2, 3), 40)); }
FG_TEST(grad_elu, "") { FG_CHECK_GRAD(check_un(elu_05, IND(kink_x, 2, 2, 3), 45)); }
FG_TEST(grad_gelu, "") { FG_CHECK_GRAD(check_un(fg_gelu, IN(-3, 3, 3, 2, 2, 3), 41)); }
FG_TEST(grad_gelu_tanh, "") { FG_CHECK_GRAD(check_un(fg_gelu_tanh, IN(-4, 4, 3, 2, 2, 3), 141)); }
FG_TEST(grad_erf, "") { FG_CHECK_GRAD(check_un(erf_, IN(-2, 2, 2, 2, 3), 42)); }
FG_TEST(grad_identity, "") { FG_CHECK_GRAD(check_un(fg_identity, IN(0, 0, 2, 2, 3), 43)); }
FG_TEST(grad_cast_f64_to_f64, "") { FG_CHECK_GRAD(check_un(cast_f64, IN(0, 0, 2, 2, 3), 44)); }

/* The ops added for CNN ports. Fixed inputs stay at least 0.1 from every
 * kink: softplus(beta 2, threshold 3) switches at x = 1.5, the hard ops at
 * +-3, clip(-0.5, 1) at its bounds, floor/ceil/round at integers and halves. */
static const double hard_x[6] = {-4.1, -2.2, 0.3, 1.7, 2.6, 3.8};
static const double sp_x[6] = {-2, -0.3, 0.4, 1.2, 2.5, 4};
static const double recip_x[6] = {-2, -0.5, 0.4, 1.5, -1.1, 3};
FG_TEST(grad_softplus, "") { FG_CHECK_GRAD(check_un(softplus_2_3, IND(sp_x, 2, 2, 3), 46)); }
FG_TEST(grad_selu, "") { FG_CHECK_GRAD(check_un(fg_selu, IND(kink_x, 2, 2, 3), 47)); }
FG_TEST(grad_silu, "") { FG_CHECK_GRAD(check_un(fg_silu, IN(-4, 4, 2, 2, 3), 48)); }
FG_TEST(grad_hard_sigmoid, "") {
  FG_CHECK_GRAD(check_un(fg_hard_sigmoid, IND(hard_x, 2, 2, 3), 49));
}
FG_TEST(grad_hard_swish, "") { FG_CHECK_GRAD(check_un(fg_hard_swish, IND(hard_x, 2, 2, 3), 50)); }
FG_TEST(grad_mish, "") { FG_CHECK_GRAD(check_un(fg_mish, IN(-3, 3, 2, 2, 3), 51)); }
FG_TEST(grad_reciprocal, "") { FG_CHECK_GRAD(check_un(fg_reciprocal, IND(recip_x, 2, 2, 3), 52)); }
FG_TEST(grad_clip, "") { FG_CHECK_GRAD(check_un(clip_m05_1, IND(kink_x, 2, 2, 3), 53)); }
FG_TEST(grad_sign_is_zero, "") { FG_CHECK_GRAD(check_un(fg_sign, IND(kink_x, 2, 2, 3), 54)); }
FG_TEST(grad_floor_is_zero, "") { FG_CHECK_GRAD(check_un(fg_floor, IND(kink_x, 2, 2, 3), 55)); }
FG_TEST(grad_ceil_is_zero, "") { FG_CHECK_GRAD(check_un(fg_ceil, IND(kink_x, 2, 2, 3), 56)); }
FG_TEST(grad_round_is_zero, "") { FG_CHECK_GRAD(check_un(fg_round, IND(kink_x, 2, 2, 3), 57)); }

/* At the kink, x = 0: relu' = 0, abs' = 0, leaky_relu' = alpha (PyTorch:
 * x > 0 ? dy : alpha dy), elu' = alpha e^0 = alpha (PyTorch's
 * elu_backward for x <= 0); at x = -1 elu' = 0.5 e^-1. x = [-1, 0, 2]. */
FG_TEST(grad_kinks_at_zero_by_hand, "") {
  un_fn fs[4] = {fg_relu, fg_abs, leaky_02, elu_05};
  double want[4][3] = {{0, 0, 1}, {-1, 0, 1}, {0.2, 0.2, 1}, {0.18393972058572117, 0.5, 1}};
  for (int k = 0; k < 4; k++) {
    fg_graph *g = fg_graph_new();
    int64_t d = 3;
    double xv[3] = {-1, 0, 2};
    fg_output x = const_f64(g, "x", 1, &d, xv);
    fg_tensor *out = NULL;
    FG_REQUIRE(grad_of_sum(g, fs[k](g, x), &x, 1, &out) == 0);
    check_values(out, want[k], 3);
    fg_tensor_free(out);
    fg_graph_free(g);
  }
}

/* The new ops at their kinks, PyTorch's choices (checked with torch 1.13's
 * autograd): hard_sigmoid' = 0 at x = +-3 and 1/6 inside; hard_swish' =
 * x/3 + 1/2 on [-3, 3], so -1/2 at -3 and 3/2 at 3; selu' = alpha scale
 * e^x for x <= 0 (alpha scale = 1.7580993408473766 at 0), scale above;
 * silu'(0) = 1/2; mish'(0) = tanh(log 2) = 0.6; softplus(beta 2,
 * threshold 1) at beta x = threshold still takes sigmoid(1); clip passes dy
 * on both bounds and gives 0 for NaN; the rounding ops and sign give 0. */
FG_TEST(grad_new_kinks_by_hand, "") {
  struct {
    un_fn f;
    double x[3], want[3];
  } cases[] = {
      {fg_hard_sigmoid, {-3, 0, 3}, {0, 1.0 / 6, 0}},
      {fg_hard_swish, {-3, 0, 3}, {-0.5, 0.5, 1.5}},
      {fg_selu, {-1, 0, 2}, {0.646768603034814, 1.7580993408473766, 1.0507009873554805}},
      {fg_silu, {0, -1, 1}, {0.5, 0.07232948812851325, 0.9276705118714868}},
      {fg_mish, {0, -1, 40}, {0.6, 0.059216755877395014, 1}},
      {softplus_2_1, {0.5, 0, 3}, {0.7310585786300049, 0.5, 1}},
      {clip_0_2, {0, 2, 2.5}, {1, 1, 0}},
      {clip_0_2, {NAN, -1, 1}, {0, 0, 1}},
      {clip_1_1, {1, 0, 1.5}, {1, 0, 0}},
      {fg_reciprocal, {-1, 0.5, 2}, {-1, -4, -0.25}},
      {fg_sign, {-1, 0, 2}, {0, 0, 0}},
      {fg_floor, {-1, 0, 2.5}, {0, 0, 0}},
      {fg_ceil, {-1, 0, 2.5}, {0, 0, 0}},
      {fg_round, {-0.5, 0.5, 2.5}, {0, 0, 0}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    fg_graph *g = fg_graph_new();
    int64_t d = 3;
    fg_output x = const_f64(g, "x", 1, &d, cases[k].x);
    fg_tensor *out = NULL;
    FG_REQUIRE(grad_of_sum(g, cases[k].f(g, x), &x, 1, &out) == 0);
    check_values(out, cases[k].want, 3);
    fg_tensor_free(out);
    fg_graph_free(g);
  }
}

/* f32 gradients build their scalars in f32: gelu'(x) = Phi(x) + x phi(x),
 * evaluated here in double with the C library's erf. */
FG_TEST(grad_gelu_f32_formula, "") {
  fg_graph *g = fg_graph_new();
  int64_t d = 5;
  float xv[5] = {-2.0f, -0.5f, 0.0f, 1.0f, 3.0f};
  fg_output x = const_t(g, "x", FG_F32, 1, &d, xv, sizeof xv);
  fg_tensor *out = NULL;
  FG_REQUIRE(grad_of_sum(g, fg_gelu(g, x), &x, 1, &out) == 0);
  FG_REQUIRE(fg_tensor_dtype(out) == FG_F32 && fg_tensor_num_elements(out) == 5);
  const float *v = fg_tensor_data(out);
  for (int i = 0; i < 5; i++) {
    double t = xv[i];
    double want =
        0.5 * (1 + erf(t / sqrt(2.0))) + t * exp(-t * t / 2) / sqrt(2 * 3.14159265358979323846);
    FG_CHECK_NEAR(v[i], want, 2e-6);
  }
  fg_tensor_free(out);
  fg_graph_free(g);
}

/* ---- cast ---------------------------------------------------------------- */

/* sum(cast(x, f64) * [1, 2, 3]) for x f32: dx = [1, 2, 3] in f32. */
FG_TEST(grad_cast_f32_to_f64, "") {
  fg_graph *g = fg_graph_new();
  int64_t d = 3;
  float xv[3] = {1.5f, -2.0f, 3.0f};
  double wv[3] = {1, 2, 3};
  fg_output x = const_t(g, "x", FG_F32, 1, &d, xv, sizeof xv);
  fg_output y = fg_mul(g, fg_cast(g, x, FG_F64), const_f64(g, "w", 1, &d, wv));
  fg_tensor *out = NULL;
  FG_REQUIRE(grad_of_sum(g, y, &x, 1, &out) == 0);
  FG_REQUIRE(fg_tensor_dtype(out) == FG_F32 && fg_tensor_num_elements(out) == 3);
  const float *v = fg_tensor_data(out);
  for (int i = 0; i < 3; i++)
    FG_CHECK_NEAR(v[i], wv[i], 0);
  fg_tensor_free(out);
  fg_graph_free(g);
}

/* f64 -> f32 -> (times [2, 3]) -> f64: the gradient comes back as f64 [2, 3]. */
FG_TEST(grad_cast_round_trip_f32, "") {
  fg_graph *g = fg_graph_new();
  int64_t d = 2;
  double xv[2] = {0.1, 0.2};
  float wv[2] = {2, 3};
  fg_output x = const_f64(g, "x", 1, &d, xv);
  fg_output w = const_t(g, "w", FG_F32, 1, &d, wv, sizeof wv);
  fg_output y = fg_cast(g, fg_mul(g, fg_cast(g, x, FG_F32), w), FG_F64);
  fg_tensor *out = NULL;
  FG_REQUIRE(grad_of_sum(g, y, &x, 1, &out) == 0);
  double want[2] = {2, 3};
  check_values(out, want, 2);
  fg_tensor_free(out);
  fg_graph_free(g);
}

/* An integer input cast to f64 takes part but gets no gradient; the float
 * input beside it does. */
static fg_output build_mul_cast_int(fg_graph *g, const fg_output *xs, void *c) {
  (void)c;
  return fg_mul(g, xs[0], fg_cast(g, xs[1], FG_F64));
}

FG_TEST(grad_cast_from_int_no_gradient, "") {
  static const int32_t iv[3] = {1, -2, 3};
  fgt_input ins[2] = {IN(0, 0, 2, 2, 3), {FG_I32, 1, {3}, iv, 0, 0}};
  FG_CHECK_GRAD(fgt_grad_check(build_mul_cast_int, NULL, ins, 2, 45));
}

/* ---- registry ------------------------------------------------------------ */

/* Every entry of this family is an op flagged differentiable, registered
 * once, and is what the registry hands out (no other family overrides it). */
FG_TEST(grad_math_registry, "") {
  int seen[FG_OP_COUNT] = {0};
  int n = 0;
  for (const fg_grad_reg *r = fg_grads_math; r->op >= 0; r++, n++) {
    FG_REQUIRE(r->op < FG_OP_COUNT);
    FG_CHECK(fg_op_table[r->op].flags & FG_OPF_DIFFERENTIABLE);
    FG_CHECK_INT(seen[r->op]++, 0);
    FG_CHECK(fg_grad_lookup(r->op) == r->fn);
  }
  FG_CHECK_INT(n, 39);
  int family[] = {
      FG_OP_ADD,        FG_OP_SUB,         FG_OP_MUL,          FG_OP_DIV,        FG_OP_POW,
      FG_OP_MAXIMUM,    FG_OP_MINIMUM,     FG_OP_SELECT,       FG_OP_NEG,        FG_OP_EXP,
      FG_OP_LOG,        FG_OP_SQRT,        FG_OP_RSQRT,        FG_OP_ABS,        FG_OP_TANH,
      FG_OP_SIGMOID,    FG_OP_RELU,        FG_OP_LEAKY_RELU,   FG_OP_ELU,        FG_OP_SOFTPLUS,
      FG_OP_SELU,       FG_OP_SILU,        FG_OP_HARD_SIGMOID, FG_OP_HARD_SWISH, FG_OP_MISH,
      FG_OP_SIGN,       FG_OP_RECIPROCAL,  FG_OP_FLOOR,        FG_OP_CEIL,       FG_OP_ROUND,
      FG_OP_CLIP,       FG_OP_GELU,        FG_OP_ERF,          FG_OP_IDENTITY,   FG_OP_CAST,
      FG_OP_REDUCE_SUM, FG_OP_REDUCE_MEAN, FG_OP_REDUCE_MAX,   FG_OP_GELU_TANH};
  for (size_t i = 0; i < sizeof family / sizeof family[0]; i++)
    FG_CHECK(seen[family[i]] == 1);
}
