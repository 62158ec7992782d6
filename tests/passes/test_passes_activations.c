/* The activations pass: mul(x, sigmoid(x)) into silu(x), the written out
 * exact GELU (both forms exporters write, either operand order, divide by
 * sqrt(2) or multiply by its inverse) into gelu(x) and the tanh form (x^3
 * as two muls or a pow) into gelu_tanh(x): what is rewritten,
 * the values against the double formulas, the pattern against the op
 * within the 1e-6 (f32) and 1e-12 (f64) relative bounds, and the
 * graphs that must stay as they are. */
#include <math.h>

#include "test_passes_util.h"

enum { N = 41 };

/* x: N values from -9 to 9, and a few edges. */
static fg_tensor *input(fg_dtype dt) {
  int64_t d[1] = {N};
  fg_tensor *t = fg_tensor_new(dt, 1, d, NULL);
  for (int i = 0; i < N; i++) {
    double v = i < N - 3 ? -9.0 + 18.0 * i / (N - 4)
                         : (i == N - 3   ? 0.0
                            : i == N - 2 ? -0.0
                                         : 1e-3);
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)v;
    else
      ((double *)fg_tensor_data(t))[i] = v;
  }
  return t;
}

static double at(const fg_tensor *t, int i) {
  return fg_tensor_dtype(t) == FG_F32 ? ((const float *)fg_tensor_data(t))[i]
                                      : ((const double *)fg_tensor_data(t))[i];
}

static fg_output op2(fg_graph *g, const char *op, fg_output a, fg_output b) {
  fg_output in[2] = {a, b};
  return fg_op(g, op, NULL, in, 2, NULL);
}

static fg_output op1(fg_graph *g, const char *op, fg_output a) {
  return fg_op(g, op, NULL, &a, 1, NULL);
}

/* x * sigmoid(x) (swap: sigmoid(x) * x) named "out". */
static fg_graph *silu_graph(fg_dtype dt, int swap) {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {N};
  fg_output x = fg_placeholder(g, "x", dt, 1, d);
  fg_output s = fg_set_name(g, op1(g, "sigmoid", x), "sig");
  fg_set_name(g, swap ? op2(g, "mul", s, x) : op2(g, "mul", x, s), "out");
  return g;
}

/* GELU written out. form 0: mul(mul(x, term), 0.5); 1: mul(mul(x, 0.5),
 * term); term = add(erf(q), 1) with q = div(x, c) or (mul_inv)
 * mul(x, 1 / c); swap reverses every commutative operand pair. */
static fg_graph *gelu_graph(fg_dtype dt, int form, int mul_inv, int swap, double c, double one,
                            double half) {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {N};
  fg_output x = fg_placeholder(g, "x", dt, 1, d);
  fg_output q =
      mul_inv ? op2(g, "mul", x, fg_scalar(g, dt, 1.0 / c)) : op2(g, "div", x, fg_scalar(g, dt, c));
  fg_output e = fg_set_name(g, op1(g, "erf", fg_set_name(g, q, "q")), "e");
  fg_output k1 = fg_scalar(g, dt, one), kh = fg_scalar(g, dt, half);
  fg_output term = swap ? op2(g, "add", k1, e) : op2(g, "add", e, k1);
  fg_output out;
  if (form == 0) {
    fg_output in = swap ? op2(g, "mul", term, x) : op2(g, "mul", x, term);
    out = swap ? op2(g, "mul", kh, in) : op2(g, "mul", in, kh);
  } else {
    fg_output h = swap ? op2(g, "mul", kh, x) : op2(g, "mul", x, kh);
    out = swap ? op2(g, "mul", term, h) : op2(g, "mul", h, term);
  }
  fg_set_name(g, out, "out");
  return g;
}

/* The passes' output and the pattern's (passes off) agree within the
 * issue's bound, and the output is within `ulps` units of f's double
 * value, or of 1 below 1 (GELU's 1 + erf(x / sqrt(2)) cancels for
 * negative x: in f32 it is 0 from x = -5.5 on, where the value is
 * -1e-7 and less). */
static int check(fg_graph *g, fg_graph *o, fg_dtype dt, double (*f)(double), double ulps) {
  fg_tensor *xt = input(dt);
  fg_tensor *on = run_fetch(o, xt, "out", 0), *off = run_fetch(g, xt, "out", 1);
  int ok = on && off;
  double big = 0, diff = 0;
  for (int i = 0; ok && i < N; i++) {
    double got = at(on, i), want = f(at(xt, i));
    double unit = dt == FG_F32 ? 0x1p-23 : 0x1p-52;
    double tol = ulps * unit * fmax(fabs(want), 1.0);
    if (!(fabs(got - want) <= tol)) {
      fprintf(stderr, "x %.17g: got %.17g, want %.17g\n", at(xt, i), got, want);
      ok = 0;
    }
    big = fmax(big, fabs(at(off, i)));
    diff = fmax(diff, fabs(got - at(off, i)));
  }
  if (ok && diff > (dt == FG_F32 ? 1e-6 : 1e-12) * big) {
    fprintf(stderr, "on and off differ by %g of %g\n", diff, big);
    ok = 0;
  }
  fg_tensor_free(on);
  fg_tensor_free(off);
  fg_tensor_free(xt);
  return ok;
}

static double silu_ref(double x) { return x / (1.0 + exp(-x)); }
static double gelu_ref(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }

/* o's "out" is op(x) on the placeholder, and x and out are its only nodes. */
static int rewritten_to(const fg_graph *o, const char *op) {
  int id = fg_graph_find_output(o, "out").node;
  return id >= 0 && strcmp(fg_node_op(o, id), op) == 0 && fg_graph_num_nodes(o) == 2 &&
         strcmp(fg_node_name(o, fg_node_input(o, id, 0).node), "x") == 0;
}

/* g optimized is op(x), reported as `part` fused into "out" by `rule`,
 * and both the optimized graph and a session on g are within `ulps` of f
 * and of the pattern. */
static int rewrites(fg_graph *g, fg_dtype dt, const char *op, const char *part, const char *rule,
                    double (*f)(double), double ulps) {
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "out", &r);
  const fg_pass_change *c = find_change(r, "activations", part);
  int ok = o && rewritten_to(o, op) && c && strcmp(c->into, "out") == 0 &&
           strcmp(c->rule, rule) == 0 && check(g, o, dt, f, ulps) && check(g, g, dt, f, ulps);
  fg_pass_report_free(r);
  fg_graph_free(o);
  return ok;
}

FG_TEST(passes_activations_silu, "") {
  for (int k = 0; k < 4; k++) {
    fg_dtype dt = k & 1 ? FG_F64 : FG_F32;
    fg_graph *g = silu_graph(dt, k >> 1);
    FG_CHECK(rewrites(g, dt, "silu", "sig", "mul(x, sigmoid(x)) into silu", silu_ref, 4));
    /* In a session the sigmoid is computed only when fetched, and then
     * gives its own value. */
    fg_tensor *xt = input(dt);
    FG_CHECK(same_bits_on_off(g, xt, "sig"));
    fg_tensor_free(xt);
    fg_graph_free(g);
  }
}

FG_TEST(passes_activations_gelu_forms, "") {
  for (int k = 0; k < 16; k++) {
    fg_dtype dt = k & 1 ? FG_F64 : FG_F32;
    int form = (k >> 1) & 1, mul_inv = (k >> 2) & 1, swap = (k >> 3) & 1;
    fg_graph *g = gelu_graph(dt, form, mul_inv, swap, sqrt(2.0), 1, 0.5);
    FG_CHECK(
        rewrites(g, dt, "gelu", "e", "x * 0.5 * (1 + erf(x / sqrt(2))) into gelu", gelu_ref, 8));
    fg_graph_free(g);
  }
}

/* Optimizing leaves the pattern as it is: the activations pass records
 * nothing and no silu or gelu appears. */
static int kept(fg_graph *g, const char **fetches, int n) {
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, fetches, n, &r);
  int ok = o && count_op(o, "silu") + count_op(o, "gelu") + count_op(o, "gelu_tanh") == 0;
  for (int i = 0; ok && i < fg_pass_report_size(r); i++)
    ok = strcmp(fg_pass_report_change(r, i)->pass, "activations") != 0;
  fg_pass_report_free(r);
  fg_graph_free(o);
  return ok;
}

FG_TEST(passes_activations_not_rewritten, "") {
  const char *out = "out";
  /* Wrong constants: c = 1.5, add 2, multiply by 0.25. */
  const double consts[3][3] = {{1.5, 1, 0.5}, {sqrt(2.0), 2, 0.5}, {sqrt(2.0), 1, 0.25}};
  for (int k = 0; k < 3; k++) {
    fg_graph *g = gelu_graph(FG_F32, 0, 0, 0, consts[k][0], consts[k][1], consts[k][2]);
    FG_CHECK(kept(g, &out, 1));
    fg_graph_free(g);
  }
  /* A fetched intermediate (fg_optimize keeps it: no rewrite), and in a
   * session its own value with the rewrite in place. */
  fg_graph *g = gelu_graph(FG_F32, 1, 0, 0, sqrt(2.0), 1, 0.5);
  const char *two[2] = {"out", "e"};
  FG_CHECK(kept(g, two, 2));
  fg_tensor *xt = input(FG_F32);
  FG_CHECK(same_bits_on_off(g, xt, "e"));
  fg_tensor_free(xt);
  fg_graph_free(g);
  g = silu_graph(FG_F32, 0);
  const char *sig[2] = {"out", "sig"};
  /* The sigmoid fetched as well: every node of this graph is kept, so
   * fg_optimize works as a session does (the mul becomes silu, the
   * sigmoid stays as its own node, computed when fetched). */
  fg_graph *o = optimize_fetches(g, sig, 2, NULL);
  FG_REQUIRE(o);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "sig").node), "sigmoid");
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "out").node), "silu");
  xt = input(FG_F32);
  FG_CHECK(same_bits_as(o, g, xt, "sig"));
  fg_tensor_free(xt);
  fg_graph_free(o);
  /* The sigmoid read by another node too. */
  fg_set_name(g, fg_neg(g, fg_graph_find_output(g, "sig")), "other");
  FG_CHECK(kept(g, &out, 1));
  fg_graph_free(g);
  /* y * sigmoid(x) with y another value; x * sigmoid(x) broadcasting x up. */
  g = fg_graph_new();
  int64_t d[2] = {3, N};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, &d[1]);
  fg_output y = fg_placeholder(g, "y", FG_F32, 1, &d[1]);
  fg_output big = fg_placeholder(g, "big", FG_F32, 2, d);
  fg_set_name(g, op2(g, "mul", y, op1(g, "sigmoid", x)), "out");
  FG_CHECK(kept(g, &out, 1));
  fg_set_name(g, op2(g, "mul", op1(g, "sigmoid", x), op2(g, "add", x, big)), "out2");
  const char *out2 = "out2";
  FG_CHECK(kept(g, &out2, 1));
  fg_graph_free(g);
}

FG_TEST(passes_activations_training_graph_unchanged, "") {
  /* Autodiff's gradient of x * sigmoid(x) reads the sigmoid too: the
   * forward stays as written, and both outputs keep their bits. */
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {N};
  fg_tensor *w0 = input(FG_F32);
  fg_output w = fg_variable(g, "x_var", w0);
  fg_tensor_free(w0);
  fg_output s = fg_set_name(g, op1(g, "sigmoid", w), "sig");
  fg_output loss = fg_set_name(g, fg_reduce_sum(g, op2(g, "mul", w, s), NULL, 0, 0), "loss");
  fg_output grad;
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_gradients(g, &loss, 1, &w, 1, NULL, &grad, st) == 0);
  fg_set_name(g, grad, "dx");
  (void)d;
  const char *f[2] = {"loss", "dx"};
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, f, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "silu"), 0);
  FG_CHECK(!find_change(r, "activations", "sig"));
  FG_CHECK(same_bits_on_off(g, NULL, "dx"));
  FG_CHECK(same_bits_on_off(g, NULL, "loss"));
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}

/* The plan's op for "out" in a session on g, fed input(dt) ("" when none). */
static const char *session_op(fg_graph *g, fg_dtype dt, char *buf, size_t size) {
  fg_tensor *xt = input(dt);
  session_step_op(g, xt, "out", "out", buf, size);
  fg_tensor_free(xt);
  return buf;
}

static double silu_after_add(double x) { return 2.0 * silu_ref(x + 0.5); }
static double gelu_after_add(double x) { return gelu_ref(x + 0.25); }

/* A session keeps the nodes a rewrite replaced (a run may fetch them), but
 * they read nothing for the rest of the plan: the add before silu(t) or
 * gelu(t) joins them in one fused node although the pattern's own sigmoid,
 * div and mul still read t, as in fg_optimize; the sigmoid fetched gives
 * its own bits. */
FG_TEST(passes_activations_session_fuses_their_input, "") {
  for (int k = 0; k < 4; k++) {
    const fg_dtype dt = k & 1 ? FG_F64 : FG_F32;
    fg_graph *g = fg_graph_new();
    int64_t d[1] = {N};
    fg_output x = fg_placeholder(g, "x", dt, 1, d);
    fg_output t = fg_set_name(g, op2(g, "add", x, fg_scalar(g, dt, k < 2 ? 0.5 : 0.25)), "t");
    if (k < 2) {
      fg_output s = fg_set_name(g, op1(g, "sigmoid", t), "sig");
      fg_set_name(g, op2(g, "mul", op2(g, "mul", t, s), fg_scalar(g, dt, 2.0)), "out");
    } else {
      fg_output e = op1(g, "erf", op2(g, "div", t, fg_scalar(g, dt, sqrt(2.0))));
      fg_output term = op2(g, "add", e, fg_scalar(g, dt, 1.0));
      fg_set_name(g, op2(g, "mul", op2(g, "mul", t, term), fg_scalar(g, dt, 0.5)), "out");
    }
    char op[128];
    FG_CHECK_STR(session_op(g, dt, op, sizeof op),
                 k < 2 ? "fused_elementwise[add+silu+mul]" : "fused_elementwise[add+gelu]");
    FG_CHECK(check(g, g, dt, k < 2 ? silu_after_add : gelu_after_add, 8));
    fg_tensor *xt = input(dt);
    if (k < 2) FG_CHECK(same_bits_on_off(g, xt, "sig"));
    FG_CHECK(same_bits_on_off(g, xt, "t"));
    fg_tensor_free(xt);
    fg_graph_free(g);
  }
}

/* The tanh form, 0.5 x (1 + tanh(t (x + k x^3))). cube 0: mul(mul(x, x),
 * x), 1: mul(x, mul(x, x)), 2: pow(x, e); form and swap as gelu_graph's;
 * "th" names the tanh. */
typedef struct tanh_form {
  int form, cube, swap;
  double t, k, e;
} tanh_form;

static fg_graph *gelu_tanh_graph(fg_dtype dt, const tanh_form *f) {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {N};
  fg_output x = fg_placeholder(g, "x", dt, 1, d), x3;
  if (f->cube == 2) {
    x3 = op2(g, "pow", x, fg_scalar(g, dt, f->e));
  } else {
    fg_output sq = op2(g, "mul", x, x);
    x3 = f->cube ? op2(g, "mul", x, sq) : op2(g, "mul", sq, x);
  }
  fg_output kx3 = f->swap ? op2(g, "mul", fg_scalar(g, dt, f->k), x3)
                          : op2(g, "mul", x3, fg_scalar(g, dt, f->k));
  fg_output in = f->swap ? op2(g, "add", kx3, x) : op2(g, "add", x, kx3);
  fg_output m = f->swap ? op2(g, "mul", fg_scalar(g, dt, f->t), in)
                        : op2(g, "mul", in, fg_scalar(g, dt, f->t));
  fg_output th = fg_set_name(g, op1(g, "tanh", m), "th"), one = fg_scalar(g, dt, 1.0);
  fg_output term = f->swap ? op2(g, "add", one, th) : op2(g, "add", th, one);
  fg_output kh = fg_scalar(g, dt, 0.5), out;
  if (f->form == 0) {
    fg_output xt = f->swap ? op2(g, "mul", term, x) : op2(g, "mul", x, term);
    out = f->swap ? op2(g, "mul", kh, xt) : op2(g, "mul", xt, kh);
  } else {
    fg_output h = f->swap ? op2(g, "mul", kh, x) : op2(g, "mul", x, kh);
    out = f->swap ? op2(g, "mul", term, h) : op2(g, "mul", h, term);
  }
  fg_set_name(g, out, "out");
  return g;
}

#define SQRT_2_PI 0.79788456080286535588 /* sqrt(2 / pi) */

static double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + tanh(SQRT_2_PI * (x + 0.044715 * x * x * x)));
}

/* Every form, cube, operand order and dtype: gelu_tanh, within 8 ulp of
 * the double formula (of 1 below 1: the pattern's 1 + tanh(u) cancels
 * for x << 0) and of the pattern by the bounds. */
FG_TEST(passes_activations_gelu_tanh_forms, "") {
  for (int k = 0; k < 24; k++) {
    const fg_dtype dt = k & 1 ? FG_F64 : FG_F32;
    const tanh_form f = {(k >> 1) & 1, (k >> 2) % 3, k >= 12, SQRT_2_PI, 0.044715, 3};
    fg_graph *g = gelu_tanh_graph(dt, &f);
    if (!rewrites(g, dt, "gelu_tanh", "th",
                  "x * 0.5 * (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) into gelu_tanh",
                  gelu_tanh_ref, 8))
      FG_FAIL_AT("form %d cube %d swap %d %s", f.form, f.cube, f.swap, fg_dtype_name(dt));
    fg_graph_free(g);
  }
}

/* Other constants, x^2, x cubed from another value, and a fetched tanh
 * (fg_optimize keeps it) are left as written. */
FG_TEST(passes_activations_gelu_tanh_not_rewritten, "") {
  const char *out = "out";
  const tanh_form bad[4] = {{0, 0, 0, 0.8, 0.044715, 3},
                            {0, 0, 0, SQRT_2_PI, 0.044, 3},
                            {1, 2, 0, SQRT_2_PI, 0.044715, 2},
                            {1, 2, 1, SQRT_2_PI, 0.044715, 3.0000001}};
  for (int k = 0; k < 4; k++) {
    fg_graph *g = gelu_tanh_graph(FG_F64, &bad[k]);
    FG_CHECK(kept(g, &out, 1));
    fg_graph_free(g);
  }
  const tanh_form ok = {0, 0, 0, SQRT_2_PI, 0.044715, 3};
  fg_graph *g = gelu_tanh_graph(FG_F32, &ok);
  const char *two[2] = {"out", "th"};
  FG_CHECK(kept(g, two, 2));
  fg_graph_free(g);
  /* Another value y in one place: x + k (y y) y, x + k (x y) x, x + k (y
   * y) x, y + k (x x) x. */
  const int y_at[4][4] = {{1, 1, 1, 0}, {0, 1, 0, 0}, {1, 1, 0, 0}, {0, 0, 0, 1}};
  for (int k = 0; k < 4; k++) {
    g = fg_graph_new();
    int64_t d[1] = {N};
    fg_output v[2] = {fg_placeholder(g, "x", FG_F32, 1, d), fg_placeholder(g, "y", FG_F32, 1, d)};
    const int *w = y_at[k];
    fg_output x3 = op2(g, "mul", op2(g, "mul", v[w[0]], v[w[1]]), v[w[2]]);
    fg_output in = op2(g, "add", v[w[3]], op2(g, "mul", x3, fg_scalar(g, FG_F32, 0.044715)));
    fg_output th = op1(g, "tanh", op2(g, "mul", in, fg_scalar(g, FG_F32, SQRT_2_PI)));
    fg_output term = op2(g, "add", th, fg_scalar(g, FG_F32, 1));
    fg_set_name(g, op2(g, "mul", op2(g, "mul", v[0], term), fg_scalar(g, FG_F32, 0.5)), "out");
    if (!kept(g, &out, 1)) FG_FAIL_AT("case %d rewritten", k);
    fg_graph_free(g);
  }
}
