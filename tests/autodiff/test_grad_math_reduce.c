/* Gradients of reduce_sum, reduce_mean and reduce_max (autodiff/grad_math.c),
 * the unknown batch dimension, and refusing an integer x.
 *
 * Axes, keepdims and negative axes are checked against finite differences
 * in f64. reduce_max is smooth only without ties, so its finite-difference
 * inputs are random (ties have probability 0) and the tie rule -- the
 * gradient shared equally among the maxima, as torch.amax -- is checked by
 * hand. */
#include <flowgraph/flowgraph.h>

#include "fgtest.h"
#include "grad_check.h"

#define IN(lo, hi, rank, ...) ((fgt_input){FG_F64, rank, {__VA_ARGS__}, NULL, lo, hi})

typedef struct reduce_ctx {
  fg_output (*f)(fg_graph *, fg_output, const int64_t *, int, int);
  int n_axes;
  int64_t axes[4];
  int keepdims;
} reduce_ctx;

static fg_output build_reduce(fg_graph *g, const fg_output *xs, void *c) {
  reduce_ctx *r = c;
  return r->f(g, xs[0], r->axes, r->n_axes, r->keepdims);
}

static double check_reduce(reduce_ctx c, fgt_input x, uint64_t seed) {
  return fgt_grad_check(build_reduce, &c, &x, 1, seed);
}

/* ---- finite differences --------------------------------------------------- */

FG_TEST(grad_reduce_sum_all, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_sum, 0, {0}, 0}, IN(0, 0, 2, 2, 3), 1));
}
FG_TEST(grad_reduce_sum_all_keepdims, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_sum, 0, {0}, 1}, IN(0, 0, 2, 2, 3), 2));
}
FG_TEST(grad_reduce_sum_axis0, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_sum, 1, {0}, 0}, IN(0, 0, 2, 2, 3), 3));
}
FG_TEST(grad_reduce_sum_middle_axis_rank3, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_sum, 1, {1}, 0}, IN(0, 0, 3, 2, 3, 4), 4));
}
FG_TEST(grad_reduce_sum_axes_keepdims, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_sum, 2, {0, 2}, 1}, IN(0, 0, 3, 2, 3, 4), 5));
}
FG_TEST(grad_reduce_sum_negative_axes, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_sum, 2, {-1, 0}, 0}, IN(0, 0, 3, 2, 3, 4), 6));
}
FG_TEST(grad_reduce_sum_scalar_input, "") {
  fgt_input x = {FG_F64, 0, {0}, NULL, 0, 0};
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_sum, 0, {0}, 0}, x, 7));
}

FG_TEST(grad_reduce_mean_all, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_mean, 0, {0}, 0}, IN(0, 0, 2, 2, 3), 8));
}
FG_TEST(grad_reduce_mean_axis1, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_mean, 1, {1}, 0}, IN(0, 0, 2, 2, 3), 9));
}
FG_TEST(grad_reduce_mean_axes_keepdims, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_mean, 2, {0, 2}, 1}, IN(0, 0, 3, 2, 3, 4), 10));
}
FG_TEST(grad_reduce_mean_negative_axis, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_mean, 1, {-2}, 0}, IN(0, 0, 3, 2, 3, 4), 11));
}

FG_TEST(grad_reduce_max_all, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_max, 0, {0}, 0}, IN(0, 0, 2, 2, 3), 12));
}
FG_TEST(grad_reduce_max_axis1, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_max, 1, {1}, 0}, IN(0, 0, 2, 3, 4), 13));
}
FG_TEST(grad_reduce_max_axes_keepdims, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_max, 2, {0, 2}, 1}, IN(0, 0, 3, 2, 3, 4), 14));
}
FG_TEST(grad_reduce_max_negative_axis, "") {
  FG_CHECK_GRAD(check_reduce((reduce_ctx){fg_reduce_max, 1, {-3}, 0}, IN(0, 0, 3, 2, 3, 4), 15));
}

/* ---- hand-computed -------------------------------------------------------- */

static fg_output const_f64(fg_graph *g, const char *name, int rank, const int64_t *dims,
                           const double *data) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  fg_tensor *t = fg_tensor_from_data(FG_F64, rank, dims, data, (size_t)n * sizeof(double), NULL);
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* Fetches d(sum(y * w))/dx into *out; 0 or -1 (printed). */
static int grad_values(fg_graph *g, fg_output y, fg_output w, fg_output x, fg_tensor **out) {
  fg_status *st = fg_status_new();
  fg_output L = fg_reduce_sum(g, fg_mul(g, y, w), NULL, 0, 0), dx;
  int rc = -1;
  fg_session *s = NULL;
  if (fg_gradients(g, &L, 1, &x, 1, NULL, &dx, st) == 0) {
    fg_set_name(g, fg_identity(g, dx), "hand_dx");
    const char *fetch = "hand_dx";
    s = fg_session_new(g, NULL, st);
    if (s && fg_session_run(s, NULL, 0, &fetch, 1, out, NULL, 0, st) == 0) rc = 0;
  }
  if (rc) fprintf(stderr, "grad_values: %s\n", fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

/* x = [[1, 3, 3], [2, 0, 1]], y = max over axis 1 = [3, 2], w = [10, 20]:
 * row 0's two maxima share 10 (5 each), row 1's single maximum gets 20. */
FG_TEST(grad_reduce_max_ties_axis, "") {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {2, 3}, wd = 2, axis = 1;
  double xv[6] = {1, 3, 3, 2, 0, 1}, wv[2] = {10, 20};
  fg_output x = const_f64(g, "x", 2, xd, xv);
  fg_tensor *out = NULL;
  FG_REQUIRE(grad_values(g, fg_reduce_max(g, x, &axis, 1, 0), const_f64(g, "w", 1, &wd, wv), x,
                         &out) == 0);
  double want[6] = {0, 5, 5, 20, 0, 0};
  FG_REQUIRE(fg_tensor_num_elements(out) == 6);
  const double *v = fg_tensor_data(out);
  for (int i = 0; i < 6; i++)
    FG_CHECK_NEAR(v[i], want[i], 1e-12);
  fg_tensor_free(out);
  fg_graph_free(g);
}

/* x = [1, 3, 3, 3], max over everything = 3 (three ties), w = 1: 1/3 each. */
FG_TEST(grad_reduce_max_ties_all, "") {
  fg_graph *g = fg_graph_new();
  int64_t xd = 4;
  double xv[4] = {1, 3, 3, 3};
  fg_output x = const_f64(g, "x", 1, &xd, xv);
  fg_tensor *out = NULL;
  FG_REQUIRE(grad_values(g, fg_reduce_max(g, x, NULL, 0, 0), fg_scalar(g, FG_F64, 1), x, &out) ==
             0);
  double want[4] = {0, 1.0 / 3, 1.0 / 3, 1.0 / 3};
  FG_REQUIRE(fg_tensor_num_elements(out) == 4);
  const double *v = fg_tensor_data(out);
  for (int i = 0; i < 4; i++)
    FG_CHECK_NEAR(v[i], want[i], 1e-12);
  fg_tensor_free(out);
  fg_graph_free(g);
}

/* ---- unknown batch -------------------------------------------------------- */

/* x [?, 3], b [3], s = x + b, q = s * s, c = [1, 2, 3]:
 *   L1 = mean(q)                     dL1/dx_ij = 2 s_ij / (3N)
 *                                    dL1/db_j  = sum_i 2 s_ij / (3N)
 *   L2 = sum(mean(q, axis 0) * c)    dL2/dx_ij = 2 c_j s_ij / N
 *                                    dL2/db_j  = sum_i 2 c_j s_ij / N
 * Both means divide by a count that involves the unknown N, and b's
 * gradient is summed over the runtime batch. One session serves N = 2 and
 * then N = 5. */
FG_TEST(grad_unknown_batch_bias_mean, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {-1, 3}, bd = 3, axis0 = 0;
  double cv[3] = {1, 2, 3};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, xd);
  fg_output b = fg_placeholder(g, "b", FG_F64, 1, &bd);
  fg_output s = fg_add(g, x, b), q = fg_mul(g, s, s);
  fg_output L1 = fg_reduce_mean(g, q, NULL, 0, 0);
  fg_output L2 = fg_reduce_sum(
      g, fg_mul(g, fg_reduce_mean(g, q, &axis0, 1, 0), const_f64(g, "c", 1, &bd, cv)), NULL, 0, 0);
  fg_output xs[2] = {x, b}, d1[2], d2[2];
  FG_REQUIRE(fg_gradients(g, &L1, 1, xs, 2, NULL, d1, st) == 0);
  FG_REQUIRE(fg_gradients(g, &L2, 1, xs, 2, NULL, d2, st) == 0);
  const char *names[4] = {"d1x", "d1b", "d2x", "d2b"};
  fg_output ds[4] = {d1[0], d1[1], d2[0], d2[1]};
  for (int i = 0; i < 4; i++)
    fg_set_name(g, fg_identity(g, ds[i]), names[i]);
  int64_t shp[2];
  FG_CHECK_INT(fg_output_shape(g, d1[0], shp), 2);
  FG_CHECK_INT(shp[0], -1);
  fg_session *sess = fg_session_new(g, NULL, st);
  FG_REQUIRE(sess);
  double bv[3] = {0.5, -1, 2};
  fg_tensor *bt = fg_tensor_from_data(FG_F64, 1, &bd, bv, sizeof bv, st);
  int batches[2] = {2, 5};
  for (int k = 0; k < 2; k++) {
    int n = batches[k];
    double xv[15];
    for (int i = 0; i < 3 * n; i++)
      xv[i] = 0.25 * i - 1.5 + (i % 2 ? 0.1 : 0);
    int64_t xdn[2] = {n, 3};
    fg_tensor *xt = fg_tensor_from_data(FG_F64, 2, xdn, xv, sizeof(double) * 3 * n, st);
    fg_feed feeds[2] = {{"x", xt}, {"b", bt}};
    fg_tensor *out[4] = {0};
    FG_REQUIRE(fg_session_run(sess, feeds, 2, names, 4, out, NULL, 0, st) == 0);
    FG_REQUIRE(fg_tensor_num_elements(out[0]) == 3 * n && fg_tensor_num_elements(out[2]) == 3 * n);
    FG_REQUIRE(fg_tensor_num_elements(out[1]) == 3 && fg_tensor_num_elements(out[3]) == 3);
    const double *g1x = fg_tensor_data(out[0]), *g1b = fg_tensor_data(out[1]);
    const double *g2x = fg_tensor_data(out[2]), *g2b = fg_tensor_data(out[3]);
    for (int j = 0; j < 3; j++) {
      double sb1 = 0, sb2 = 0;
      for (int i = 0; i < n; i++) {
        double sij = xv[3 * i + j] + bv[j];
        FG_CHECK_NEAR(g1x[3 * i + j], 2 * sij / (3.0 * n), 1e-12);
        FG_CHECK_NEAR(g2x[3 * i + j], 2 * cv[j] * sij / n, 1e-12);
        sb1 += 2 * sij / (3.0 * n);
        sb2 += 2 * cv[j] * sij / n;
      }
      FG_CHECK_NEAR(g1b[j], sb1, 1e-12);
      FG_CHECK_NEAR(g2b[j], sb2, 1e-12);
    }
    for (int i = 0; i < 4; i++)
      fg_tensor_free(out[i]);
    fg_tensor_free(xt);
  }
  fg_tensor_free(bt);
  fg_session_free(sess);
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- refusals -------------------------------------------------------------- */

FG_TEST(grad_integer_input_error, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d = 3;
  fg_output x = fg_placeholder(g, "int_x", FG_I32, 1, &d);
  fg_output y = fg_reduce_sum(g, fg_cast(g, x, FG_F64), NULL, 0, 0);
  fg_output dx = {123, 0};
  FG_CHECK_INT(fg_gradients(g, &y, 1, &x, 1, NULL, &dx, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "int_x");
  FG_CHECK(dx.node < 0);
  fg_graph_free(g);
  fg_status_free(st);
}
