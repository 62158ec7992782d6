/* gelu_tanh, GELU's tanh approximation (PyTorch's approximate='tanh'): the
 * values and the gradient against PyTorch in float64
 * (tests/data/gelu_tanh_refs.h, written by tests/gen/gen_gelu_tanh.py), f32
 * against the same references, the special values PyTorch gives, the op
 * inside a fused node with the bits of its own kernel, and its refusal of
 * an integer input. */
#include <math.h>
#include <string.h>

#include "data/gelu_tanh_refs.h"
#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "test_kernels_util.h"

/* fetch of g fed x (n values of dtype dt as placeholder "x"), passes on or
 * off; NULL (reported) on failure. */
static fg_tensor *run(fg_graph *g, fg_dtype dt, const double *x, int64_t n, const char *fetch,
                      int no_passes) {
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.no_passes = no_passes;
  fg_session *s = fg_session_new(g, &o, st);
  fg_tensor *xt = tensor_of_doubles(dt, 1, &n, x), *out = NULL;
  fg_feed feed = {"x", xt};
  if (!s || fg_session_run(s, &feed, 1, &fetch, 1, &out, NULL, 0, st) != 0) {
    FG_FAIL_AT("run '%s': %s", fetch, fg_status_message(st));
    out = NULL;
  }
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_status_free(st);
  return out;
}

/* "y" = gelu_tanh(x), and with grad "dx" = d sum(y) / dx. */
static fg_graph *graph_of(fg_dtype dt, int64_t n, int grad) {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", dt, 1, &n);
  fg_output y = fg_set_name(g, fg_gelu_tanh(g, x), "y");
  if (grad) {
    fg_output loss = fg_reduce_sum(g, y, NULL, 0, 0), dx;
    fg_status *st = fg_status_new();
    if (fg_gradients(g, &loss, 1, &x, 1, NULL, &dx, st) == 0)
      fg_set_name(g, dx, "dx");
    else
      FG_FAIL_AT("fg_gradients: %s", fg_status_message(st));
    fg_status_free(st);
  }
  return g;
}

FG_TEST(gelu_tanh_matches_torch, "") {
  fg_graph *g64 = graph_of(FG_F64, GT_N, 0), *g32 = graph_of(FG_F32, GT_N, 0);
  fg_tensor *y64 = run(g64, FG_F64, gt_x, GT_N, "y", 0),
            *y32 = run(g32, FG_F32, gt_x, GT_N, "y", 0);
  FG_REQUIRE(y64 && y32);
  for (int i = 0; i < GT_N; i++) {
    /* f64: 8 units in the last place of y, and PyTorch's own rounding of
     * 1 + tanh(u), which it carries as x ulp(1) (it gives -0 from x = -6
     * on where the value is still -1e-16 and less). */
    const double want = gt_y[i], x = gt_x[i];
    const double tol64 = 8 * 0x1p-52 * fabs(want) + 2 * 0x1p-52 * fabs(x);
    if (!(fabs(tensor_elem(y64, i) - want) <= tol64))
      FG_FAIL_AT("f64 x %.17g: %.17g, torch %.17g", x, tensor_elem(y64, i), want);
    /* f32: x rounded to f32 moves y by dx (xf - x); the result then within
     * a few ulp per unit of the function's condition |x y' / y|, large
     * where exp(-2u) amplifies the error of u (x << 0). */
    const double xf = (double)(float)x, wf = want + gt_dx[i] * (xf - x);
    const double cond = want != 0 ? fabs(x * gt_dx[i] / want) : 0;
    const double tol32 = (8 + 4 * cond) * 0x1p-23 * fabs(wf) + 2 * 0x1p-52 * fabs(x);
    if (!(fabs(tensor_elem(y32, i) - wf) <= tol32))
      FG_FAIL_AT("f32 x %.9g: %.9g, torch %.9g", xf, tensor_elem(y32, i), wf);
  }
  fg_tensor_free(y64);
  fg_tensor_free(y32);
  fg_graph_free(g64);
  fg_graph_free(g32);
}

FG_TEST(gelu_tanh_gradient_matches_torch, "") {
  fg_graph *g = graph_of(FG_F64, GT_N, 1);
  fg_tensor *dx = run(g, FG_F64, gt_x, GT_N, "dx", 0);
  FG_REQUIRE(dx);
  for (int i = 0; i < GT_N; i++)
    FG_CHECK_NEAR(tensor_elem(dx, i), gt_dx[i], 1e-13 * (fabs(gt_dx[i]) + 1));
  fg_tensor_free(dx);
  fg_graph_free(g);
}

/* As PyTorch: NaN and -inf give NaN (x / inf), inf itself, the zeros keep
 * their sign, and past where x^3 overflows the limits x and -0. */
FG_TEST(gelu_tanh_special_values, "") {
  const double x[7] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e13, -1e13};
  for (int d = 0; d < 2; d++) {
    const fg_dtype dt = d ? FG_F64 : FG_F32;
    fg_graph *g = graph_of(dt, 7, 0);
    fg_tensor *y = run(g, dt, x, 7, "y", 0);
    FG_REQUIRE(y);
    FG_CHECK(isnan(tensor_elem(y, 0)));
    FG_CHECK(tensor_elem(y, 1) == INFINITY);
    FG_CHECK(isnan(tensor_elem(y, 2)));
    FG_CHECK(tensor_elem(y, 3) == 0 && !signbit(tensor_elem(y, 3)));
    FG_CHECK(tensor_elem(y, 4) == 0 && signbit(tensor_elem(y, 4)));
    FG_CHECK(tensor_elem(y, 5) == (dt == FG_F32 ? (double)1e13f : 1e13));
    FG_CHECK(tensor_elem(y, 6) == 0 && signbit(tensor_elem(y, 6)));
    fg_tensor_free(y);
    fg_graph_free(g);
  }
}

/* In a fused node (add, gelu_tanh, mul) the op computes its own kernel's
 * bits: passes on and off agree bit for bit, f32 and f64. */
FG_TEST(gelu_tanh_fused_same_bits, "") {
  for (int d = 0; d < 2; d++) {
    const fg_dtype dt = d ? FG_F64 : FG_F32;
    fg_graph *g = fg_graph_new();
    int64_t n = GT_N;
    fg_output x = fg_placeholder(g, "x", dt, 1, &n);
    fg_output t = fg_gelu_tanh(g, fg_add(g, x, fg_scalar(g, dt, 0.5)));
    fg_set_name(g, fg_mul(g, t, fg_scalar(g, dt, 2)), "y");
    fg_status *st = fg_status_new();
    fg_session *s = fg_session_new(g, NULL, st);
    fg_tensor *xt = tensor_of_doubles(dt, 1, &n, gt_x);
    fg_feed feed = {"x", xt};
    const char *fetch = "y";
    fg_plan_info *pi = s ? fg_session_plan_info(s, &feed, 1, &fetch, 1, NULL, 0, st) : NULL;
    FG_REQUIRE(pi && pi->n_steps == 1);
    FG_CHECK_STR(pi->step_ops[0], "fused_elementwise[add+gelu_tanh+mul]");
    fg_plan_info_free(pi);
    fg_tensor *on = run(g, dt, gt_x, GT_N, "y", 0), *off = run(g, dt, gt_x, GT_N, "y", 1);
    FG_REQUIRE(on && off);
    FG_CHECK(memcmp(fg_tensor_data(on), fg_tensor_data(off), fg_tensor_num_bytes(on)) == 0);
    fg_tensor_free(on);
    fg_tensor_free(off);
    fg_tensor_free(xt);
    fg_session_free(s);
    fg_status_free(st);
    fg_graph_free(g);
  }
}

FG_TEST(gelu_tanh_integer_input_refused, "badinput") {
  fg_graph *g = fg_graph_new();
  int64_t n = 3;
  fg_set_name(g, fg_gelu_tanh(g, fg_placeholder(g, "ints", FG_I32, 1, &n)), "y");
  fg_status *st = fg_status_new();
  FG_CHECK(fg_graph_status(g, st) != FG_OK);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "gelu_tanh");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "i32");
  fg_status_free(st);
  fg_graph_free(g);
}
