/* The layer_norm pass: layer normalization written out (as PyTorch exports
 * nn.LayerNorm below opset 17: ReduceMean, Sub, Pow, ReduceMean, Add,
 * Sqrt, Div, Mul, Add) becomes one layer_norm node. What is rewritten and
 * into what (normalized_rank, epsilon, the parameters read), the values
 * against the formula computed here in double, the pattern against the op
 * within the 1e-6 (f32) and 1e-12 (f64) relative bounds, and the
 * graphs that must stay as they are. */
#include <math.h>

#include "test_passes_util.h"

enum { B = 3, S = 4, C = 6 };

typedef struct ln_form {
  fg_dtype dt;
  int k;        /* axes normalized: the last k of x [B, S, C] */
  int affine;   /* 0: none, 1: scale, 2: scale and shift */
  int pow_form; /* the square as pow(d, 2), else mul(d, d) */
  int swap;     /* reverse every commutative operand pair */
  int positive; /* axes written from the front (1, 2), else from the end */
  int unknown;  /* x's batch dim unknown */
} ln_form;

static fg_output op2(fg_graph *g, const char *op, const char *name, fg_output a, fg_output b) {
  fg_output in[2] = {a, b};
  return fg_op(g, op, name, in, 2, NULL);
}

static fg_output mean_over(fg_graph *g, const char *name, fg_output x, const int64_t *axes, int n,
                           int keepdims) {
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_ints(a, "axes", axes, n);
  fg_attrs_set_int(a, "keepdims", keepdims);
  fg_output o = fg_op(g, "reduce_mean", name, &x, 1, a);
  fg_attrs_free(a);
  return o;
}

/* Value i of a parameter: scale near 1, shift near 0, both varied. */
static double param_at(int shift, int i) {
  return shift ? 0.25 * sin(1.3 * i + 0.4) : 1.0 + 0.5 * cos(0.7 * i);
}

static fg_tensor *param(fg_dtype dt, int k, int shift) {
  int64_t d[2] = {S, C};
  fg_tensor *t = fg_tensor_new(dt, k, k == 2 ? d : d + 1, NULL);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)param_at(shift, (int)i);
    else
      ((double *)fg_tensor_data(t))[i] = param_at(shift, (int)i);
  return t;
}

/* A constant node holding t (freed here). */
static fg_output param_node(fg_graph *g, const char *name, fg_tensor *t) {
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* The pattern on placeholder "x", output "out"; the intermediates named
 * m, d, sq, v, ve, sd, n, sc. eps is a scalar constant. */
static fg_graph *ln_graph(const ln_form *f, double eps) {
  fg_graph *g = fg_graph_new();
  int64_t dims[3] = {f->unknown ? FG_DIM_UNKNOWN : B, S, C};
  int64_t axes[2];
  for (int i = 0; i < f->k; i++)
    axes[i] = f->positive ? 3 - f->k + i : i - f->k;
  fg_output x = fg_placeholder(g, "x", f->dt, 3, dims);
  fg_output m = mean_over(g, "m", x, axes, f->k, 1);
  fg_output d = op2(g, "sub", "d", x, m);
  fg_output sq =
      f->pow_form ? op2(g, "pow", "sq", d, fg_scalar(g, f->dt, 2.0)) : op2(g, "mul", "sq", d, d);
  fg_output v = mean_over(g, "v", sq, axes, f->k, 1);
  fg_output e = fg_scalar(g, f->dt, eps);
  fg_output ve = f->swap ? op2(g, "add", "ve", e, v) : op2(g, "add", "ve", v, e);
  fg_output sd = fg_op(g, "sqrt", "sd", &ve, 1, NULL);
  const char *names[3] = {"out", "n", "n"};
  fg_output n = op2(g, "div", names[f->affine], d, sd);
  if (f->affine >= 1) {
    fg_output gm = param_node(g, "gamma", param(f->dt, f->k, 0));
    const char *nm = f->affine == 1 ? "out" : "sc";
    n = f->swap ? op2(g, "mul", nm, gm, n) : op2(g, "mul", nm, n, gm);
  }
  if (f->affine == 2) {
    fg_output bt = param_node(g, "beta", param(f->dt, f->k, 1));
    if (f->swap)
      op2(g, "add", "out", bt, n);
    else
      op2(g, "add", "out", n, bt);
  }
  return g;
}

static double at(const fg_tensor *t, int64_t i) {
  return fg_tensor_dtype(t) == FG_F32 ? ((const float *)fg_tensor_data(t))[i]
                                      : ((const double *)fg_tensor_data(t))[i];
}

/* x [B, S, C]: values around an offset of 3 (a mean to take away). */
static fg_tensor *input(fg_dtype dt) {
  fg_tensor *t = fg_tensor_new(dt, 3, (int64_t[]){B, S, C}, NULL);
  for (int i = 0; i < B * S * C; i++) {
    double v = 3.0 + 2.0 * sin(0.37 * i * i + 0.1 * i);
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)v;
    else
      ((double *)fg_tensor_data(t))[i] = v;
  }
  return t;
}

/* The formula in double on x's values: row r of L = (k == 2 ? S C : C)
 * elements, the parameters indexed by the position in the row. */
static double want_at(const ln_form *f, const fg_tensor *x, double eps, int64_t i) {
  const int64_t L = f->k == 2 ? S * C : C, r = i / L;
  double mean = 0, var = 0;
  for (int64_t j = 0; j < L; j++)
    mean += at(x, r * L + j);
  mean /= (double)L;
  for (int64_t j = 0; j < L; j++)
    var += (at(x, r * L + j) - mean) * (at(x, r * L + j) - mean);
  var /= (double)L;
  /* The parameters as the graph holds them (rounded to the dtype). */
  double gm = f->affine >= 1 ? param_at(0, (int)(i % L)) : 1.0;
  double bt = f->affine == 2 ? param_at(1, (int)(i % L)) : 0.0;
  if (f->dt == FG_F32) gm = (float)gm, bt = (float)bt;
  return (at(x, i) - mean) / sqrt(var + eps) * gm + bt;
}

/* "out" with the passes on and off: both within the bound of the formula
 * (relative to the largest value) and of each other. */
static int values_ok(const ln_form *f, fg_graph *g, double eps) {
  fg_tensor *xt = input(f->dt);
  fg_tensor *on = run_fetch(g, xt, "out", 0), *off = run_fetch(g, xt, "out", 1);
  int ok = on && off;
  double big = 0, err_on = 0, err_off = 0, diff = 0;
  const double epsd = f->dt == FG_F32 ? (double)(float)eps : eps;
  for (int64_t i = 0; ok && i < B * S * C; i++) {
    double w = want_at(f, xt, epsd, i);
    big = fmax(big, fabs(w));
    err_on = fmax(err_on, fabs(at(on, i) - w));
    err_off = fmax(err_off, fabs(at(off, i) - w));
    diff = fmax(diff, fabs(at(on, i) - at(off, i)));
  }
  const double tol = (f->dt == FG_F32 ? 1e-6 : 1e-12) * big;
  if (ok && !(err_on <= tol && err_off <= tol && diff <= tol)) {
    fprintf(stderr, "errors: on %g, off %g, on - off %g (bound %g)\n", err_on, err_off, diff, tol);
    ok = 0;
  }
  fg_tensor_free(on);
  fg_tensor_free(off);
  fg_tensor_free(xt);
  return ok;
}

/* The plan's op for "out" in a session on g, fed input(dt). */
static const char *session_op(fg_graph *g, fg_dtype dt, char *buf, size_t size) {
  fg_tensor *xt = input(dt);
  session_step_op(g, xt, "out", "out", buf, size);
  fg_tensor_free(xt);
  return buf;
}

/* Parameter `which` (1 scale, 2 shift) of the layer_norm `id` of o: the
 * form's own constant (gamma, beta) where it has one, else a constant
 * "out/scale" of ones or "out/shift" of zeros of x's last k dims (what
 * the pass adds: 1 and 0 by definition). */
static int param_ok(const ln_form *f, const fg_graph *o, int id, int which) {
  static const char *const own[3] = {"", "gamma", "beta"};
  static const char *const added[3] = {"", "out/scale", "out/shift"};
  const int node = fg_node_input(o, id, which).node;
  if (f->affine >= which) return strcmp(fg_node_name(o, node), own[which]) == 0;
  const fg_tensor *t = NULL;
  if (strcmp(fg_node_name(o, node), added[which]) != 0 || strcmp(fg_node_op(o, node), "constant") ||
      fg_node_attr_tensor(o, node, "value", &t) != 0 || !t || fg_tensor_dtype(t) != f->dt ||
      fg_tensor_rank(t) != f->k || fg_tensor_dim(t, f->k - 1) != C ||
      (f->k == 2 && fg_tensor_dim(t, 0) != S))
    return 0;
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    if (at(t, i) != (which == 1 ? 1.0 : 0.0)) return 0;
  return 1;
}

/* A session runs "out" as a layer_norm. fg_optimize rewrites it into one
 * of x with f's normalized_rank and epsilon reading gamma and beta, or
 * the constants of ones and zeros it adds where the form has no such
 * parameter, none of the pattern's nodes left and d reported as fused
 * into out; that graph computes the formula. */
static int rewritten(const ln_form *f, fg_graph *g, double eps) {
  char buf[256];
  int ok = strcmp(session_op(g, f->dt, buf, sizeof buf), "layer_norm") == 0;
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "out", &r);
  int id = o ? fg_graph_find_output(o, "out").node : -1;
  ok = ok && id >= 0 && strcmp(fg_node_op(o, id), "layer_norm") == 0;
  int64_t k = 0;
  double e = 0;
  ok = ok && fg_node_attr_int(o, id, "normalized_rank", &k) == 0 && k == f->k &&
       fg_node_attr_float(o, id, "epsilon", &e) == 0 &&
       e == (f->dt == FG_F32 ? (double)(float)eps : eps);
  ok = ok && strcmp(fg_node_name(o, fg_node_input(o, id, 0).node), "x") == 0 &&
       param_ok(f, o, id, 1) && param_ok(f, o, id, 2);
  static const char *const gone[] = {"reduce_mean", "sub", "sqrt", "div", "pow"};
  for (int i = 0; ok && i < 5; i++)
    ok = count_op(o, gone[i]) == 0;
  const fg_pass_change *c = find_change(r, "layer_norm", "d");
  ok = ok && c && strcmp(c->into, "out") == 0 && values_ok(f, o, eps);
  if (!ok) fprintf(stderr, "not rewritten as expected (k %d, affine %d)\n", f->k, f->affine);
  fg_pass_report_free(r);
  fg_graph_free(o);
  return ok;
}

FG_TEST(passes_layer_norm_forms, "") {
  /* Every form: dtype, axes, parameters, square, operand order. */
  for (int bits = 0; bits < 96; bits++) {
    ln_form f = {bits & 1 ? FG_F64 : FG_F32,
                 1 + (bits >> 1 & 1),
                 bits >> 2 & 1 ? 2 : 0,
                 bits >> 3 & 1,
                 bits >> 4 & 1,
                 0,
                 0};
    if (bits >> 5) f.affine = (int)(bits >> 5) == 1 ? 1 : 2, f.positive = bits >> 5 == 2;
    const double eps = f.k == 2 ? 1e-5 : 1e-3;
    fg_graph *g = ln_graph(&f, eps);
    FG_CHECK(rewritten(&f, g, eps));
    FG_CHECK(values_ok(&f, g, eps));
    fg_graph_free(g);
  }
}

FG_TEST(passes_layer_norm_unknown_batch, "") {
  for (int affine = 0; affine <= 2; affine++) {
    ln_form f = {FG_F32, 1, affine, 0, 0, 0, 1};
    fg_graph *g = ln_graph(&f, 1e-5);
    FG_CHECK(rewritten(&f, g, 1e-5));
    FG_CHECK(values_ok(&f, g, 1e-5));
    fg_graph_free(g);
  }
}

/* Optimizing keeps the pattern: no layer_norm, nothing reported. */
static int kept(fg_graph *g, const char **fetches, int n) {
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, fetches, n, &r);
  int ok = o && count_op(o, "layer_norm") == 0;
  for (int i = 0; ok && i < fg_pass_report_size(r); i++)
    ok = strcmp(fg_pass_report_change(r, i)->pass, "layer_norm") != 0;
  fg_pass_report_free(r);
  fg_graph_free(o);
  return ok;
}

/* x [B, S, C] -> out by the pattern (scale and shift of [C]) with a part
 * swapped for a wrong one: 0 the two means over different axes, 1 a
 * middle axis, 2 pow(d, 3), 3 sub(m, x), 4 eps read from a placeholder,
 * 5 mul(x, d) for the square with d read outside the chain too (as
 * often as the right square reads it), 6 d read outside the chain too, 7
 * the mean taken of another tensor than the one centred. */
static fg_graph *wrong_graph(int which) {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 3, (int64_t[]){B, S, C});
  const int64_t last[1] = {-1}, mid[1] = {1};
  fg_output mx = which == 7 ? op2(g, "mul", "x2", x, fg_scalar(g, FG_F32, 2.0)) : x;
  fg_output m = mean_over(g, "m", mx, which == 1 ? mid : last, 1, 1);
  fg_output d = which == 3 ? op2(g, "sub", "d", m, x) : op2(g, "sub", "d", x, m);
  fg_output sq = which == 2   ? op2(g, "pow", "sq", d, fg_scalar(g, FG_F32, 3.0))
                 : which == 5 ? op2(g, "mul", "sq", x, d)
                              : op2(g, "mul", "sq", d, d);
  fg_output v = mean_over(g, "v", sq, which == 0 || which == 1 ? mid : last, 1, 1);
  fg_output e = which == 4 ? fg_placeholder(g, "e", FG_F32, 0, NULL) : fg_scalar(g, FG_F32, 1e-5);
  fg_output ve = op2(g, "add", "ve", v, e);
  fg_output sd = fg_op(g, "sqrt", "sd", &ve, 1, NULL);
  fg_output n = op2(g, "div", "n", d, sd);
  fg_output sc = op2(g, "mul", "sc", n, param_node(g, "gamma", param(FG_F32, 1, 0)));
  fg_output out = op2(g, "add", "out", sc, param_node(g, "beta", param(FG_F32, 1, 1)));
  if (which == 5 || which == 6) op2(g, "add", "out2", out, d);
  return g;
}

/* Neither fg_optimize nor a session (fed x, and e = 1e-5 where it is
 * read) makes a layer_norm of the pattern. */
static int nowhere(fg_graph *g, const char **fetches, int n) {
  if (!kept(g, fetches, n)) return 0;
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, 0, st);
  fg_tensor *xt = input(FG_F32), *et = fg_tensor_new(FG_F32, 0, NULL, NULL);
  *(float *)fg_tensor_data(et) = 1e-5f;
  fg_feed feed[2] = {{"x", xt}, {"e", et}};
  const int n_feeds = fg_graph_find(g, "e") >= 0 ? 2 : 1;
  fg_plan_info *pi = s ? fg_session_plan_info(s, feed, n_feeds, fetches, n, NULL, 0, st) : NULL;
  int ok = pi != NULL;
  for (int si = 0; ok && si < pi->n_steps; si++)
    ok = strcmp(pi->step_ops[si], "layer_norm") != 0;
  if (!pi) fprintf(stderr, "plan: %s\n", fg_status_message(st));
  fg_plan_info_free(pi);
  fg_tensor_free(xt);
  fg_tensor_free(et);
  fg_session_free(s);
  fg_status_free(st);
  return ok;
}

FG_TEST(passes_layer_norm_not_rewritten, "") {
  const char *out = "out";
  const char *outs[2] = {"out", "out2"};
  for (int which = 0; which < 8; which++) {
    fg_graph *g = wrong_graph(which);
    FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
    const int two = which == 5 || which == 6;
    FG_CHECK(nowhere(g, two ? outs : &out, two ? 2 : 1));
    fg_graph_free(g);
  }
  /* The same graph with every part right is rewritten (the cases above
   * fail for their one wrong part). */
  fg_graph *right = wrong_graph(8);
  FG_CHECK(!kept(right, &out, 1));
  fg_graph_free(right);
  /* A fetched intermediate (fg_optimize keeps it: no rewrite); in a
   * session the rewrite is made and the intermediate keeps its own
   * value. */
  ln_form f = {FG_F32, 1, 2, 0, 0, 0, 0};
  fg_graph *g = ln_graph(&f, 1e-5);
  const char *two[2] = {"out", "v"};
  FG_CHECK(kept(g, two, 2));
  fg_tensor *xt = input(FG_F32);
  FG_CHECK(same_bits_on_off(g, xt, "v"));
  FG_CHECK(values_ok(&f, g, 1e-5));
  fg_tensor_free(xt);
  fg_graph_free(g);
}

/* A scale that is not of x's last dims ([1, C] for k = 1): the mul and
 * the add stay, and the division alone becomes a layer_norm with scale
 * ones and shift zeros (constants the pass adds). */
FG_TEST(passes_layer_norm_scale_of_other_shape, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F64, 3, (int64_t[]){B, S, C});
  const int64_t last[1] = {-1};
  fg_output m = mean_over(g, "m", x, last, 1, 1);
  fg_output d = op2(g, "sub", "d", x, m);
  fg_output v = mean_over(g, "v", op2(g, "mul", "sq", d, d), last, 1, 1);
  fg_output ve = op2(g, "add", "ve", v, fg_scalar(g, FG_F64, 1e-5));
  fg_output n = op2(g, "div", "n", d, fg_op(g, "sqrt", "sd", &ve, 1, NULL));
  fg_tensor *gt = fg_tensor_new(FG_F64, 2, (int64_t[]){1, C}, NULL);
  for (int i = 0; i < C; i++)
    ((double *)fg_tensor_data(gt))[i] = param_at(0, i);
  fg_output sc = op2(g, "mul", "sc", n, fg_constant(g, "gamma", gt));
  fg_tensor_free(gt);
  op2(g, "add", "out", sc, param_node(g, "beta", param(FG_F64, 1, 1)));
  /* fg_optimize: "n" becomes the layer_norm, on constants it adds. */
  fg_graph *o = optimize1(g, "out", NULL);
  const int id = o ? fg_graph_find_output(o, "n").node : -1;
  FG_CHECK(id >= 0 && strcmp(fg_node_op(o, id), "layer_norm") == 0);
  FG_CHECK(id >= 0 && strcmp(fg_node_name(o, fg_node_input(o, id, 1).node), "n/scale") == 0);
  FG_CHECK(id >= 0 && strcmp(fg_node_name(o, fg_node_input(o, id, 2).node), "n/shift") == 0);
  FG_CHECK_INT(o ? count_op(o, "reduce_mean") : -1, 0);
  fg_graph_free(o);
  char buf[256];
  FG_CHECK_STR(session_op(g, FG_F64, buf, sizeof buf), "fused_elementwise[mul+add]");
  fg_tensor *xt = input(FG_F64);
  FG_CHECK_STR(session_step_op(g, xt, "out", "n", buf, sizeof buf), "layer_norm");
  FG_CHECK_STR(session_step_op(g, xt, "out", "m", buf, sizeof buf), "");
  fg_tensor_free(xt);
  ln_form f = {FG_F64, 1, 2, 0, 0, 0, 0}; /* the same values as [C] parameters */
  FG_CHECK(values_ok(&f, g, 1e-5));
  fg_graph_free(g);
}

/* fg_optimize names an added constant "<node>/<what>", or with "_1",
 * "_2", ... where the graph has a node of that name (here "out/scale",
 * fetched, and "out/scale_1", dropped as nothing reads it): that node
 * keeps its name and value. */
FG_TEST(passes_layer_norm_optimize_names, "") {
  ln_form f = {FG_F32, 1, 0, 0, 0, 0, 0};
  fg_graph *g = ln_graph(&f, 1e-5);
  param_node(g, "out/scale", param(FG_F32, 1, 1));
  param_node(g, "out/scale_1", param(FG_F32, 1, 1));
  const char *fetches[2] = {"out", "out/scale"};
  fg_graph *o = optimize_fetches(g, fetches, 2, NULL);
  FG_REQUIRE(o != NULL);
  const int id = fg_graph_find_output(o, "out").node;
  FG_CHECK_STR(fg_node_op(o, id), "layer_norm");
  FG_CHECK_STR(fg_node_name(o, fg_node_input(o, id, 1).node), "out/scale_2");
  FG_CHECK_STR(fg_node_name(o, fg_node_input(o, id, 2).node), "out/shift");
  const fg_tensor *t = NULL;
  const int user = fg_graph_find(o, "out/scale");
  FG_CHECK(user >= 0 && fg_node_attr_tensor(o, user, "value", &t) == 0 && t);
  FG_CHECK(t && at(t, 2) == (float)param_at(1, 2));
  FG_CHECK(values_ok(&f, o, 1e-5));
  fg_graph_free(o);
  fg_graph_free(g);
}
