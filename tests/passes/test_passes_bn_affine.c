/* A batch_norm in inference that folds into no producer becomes the
 * per-channel x * a + b (fold_inference), which element-wise fusion joins
 * with what follows it: a and b by hand, the output against x * a + b
 * computed here and bit for bit against the batch_norm kernel, in
 * fg_optimize and in sessions, for ranks 2 to 4; where it must not happen;
 * and fusion taking in a fused_elementwise node a graph already holds. */
#include <math.h>

#include "test_passes_util.h"

/* A reproducible value in [lo, hi) for element i of stream k. */
static double value_at(int k, int i, double lo, double hi) {
  double u = 0.5 + 0.5 * sin(12.9898 * (i + 1) + 78.233 * (k + 1));
  return lo + (hi - lo) * u;
}

static fg_tensor *filled(fg_dtype dt, int rank, const int64_t *dims, int k, double lo, double hi) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  int64_t n = fg_tensor_num_elements(t);
  for (int64_t i = 0; i < n; i++) {
    double v = value_at(k, (int)i, lo, hi);
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)v;
    else
      ((double *)fg_tensor_data(t))[i] = v;
  }
  return t;
}

static fg_output constant(fg_graph *g, const char *name, fg_tensor *t) {
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

static double elem(const fg_tensor *t, int64_t i) {
  return fg_tensor_dtype(t) == FG_F32 ? ((const float *)fg_tensor_data(t))[i]
                                      : ((const double *)fg_tensor_data(t))[i];
}

/* x [dims] -> batch_norm "bn" (parameters bn_g, bn_b, bn_m, bn_v over
 * dims[1] channels; mode: a constant false, or the graph's flag) -> relu
 * "out". */
static fg_graph *bn_graph(fg_dtype dt, int rank, const int64_t *dims, int flag) {
  fg_graph *g = fg_graph_new();
  fg_output in[6];
  in[0] = fg_placeholder(g, "x", dt, rank, dims);
  const char *names[4] = {"bn_g", "bn_b", "bn_m", "bn_v"};
  const double lo[4] = {0.5, -0.5, -0.3, 0.4}, hi[4] = {1.5, 0.5, 0.3, 1.6};
  for (int i = 0; i < 4; i++)
    in[1 + i] = constant(g, names[i], filled(dt, 1, &dims[1], 10 + i, lo[i], hi[i]));
  unsigned char f = 0;
  in[5] = flag ? fg_training(g)
               : constant(g, "mode", fg_tensor_from_data(FG_BOOL, 0, NULL, &f, 1, NULL));
  fg_set_name(g, fg_relu(g, fg_op(g, "batch_norm", "bn", in, 6, NULL)), "out");
  return g;
}

/* The constant value of node `name` of g. */
static const fg_tensor *value_of(const fg_graph *g, const char *name) {
  const fg_tensor *t = NULL;
  int id = fg_graph_find_output(g, name).node;
  return id >= 0 && fg_node_attr_tensor(g, id, "value", &t) == 0 ? t : NULL;
}

/* a[c] and b[c] as the kernel rounds them, from g's parameters. */
static void affine_by_hand(const fg_graph *g, int64_t c, double *a, double *b, fg_dtype dt) {
  const fg_tensor *sc = value_of(g, "bn_g"), *sh = value_of(g, "bn_b");
  const fg_tensor *m = value_of(g, "bn_m"), *v = value_of(g, "bn_v");
  for (int64_t k = 0; k < c; k++) {
    double s = elem(sc, k) / sqrt(elem(v, k) + 1e-5);
    double t = elem(sh, k) - elem(m, k) * s;
    a[k] = dt == FG_F32 ? (double)(float)s : s;
    b[k] = dt == FG_F32 ? (double)(float)t : t;
  }
}

/* relu(x * a + b) in dt's arithmetic, two roundings, at element i of an
 * input of dims (channel i / inner % c). */
static double expected(fg_dtype dt, double x, double a, double b) {
  if (dt == FG_F32) {
    float p = (float)x * (float)a;
    float y = p + (float)b;
    return y > 0 ? y : 0;
  }
  double y = x * a + b;
  return y > 0 ? y : 0;
}

/* Checks o's output for input x against relu(x * a + b) by hand, bit for
 * bit, and against the double formula within 1e-6 of the largest |y|. */
static int check_output(const fg_graph *g, fg_graph *o, const fg_tensor *xt, int rank,
                        const int64_t *dims) {
  fg_dtype dt = fg_tensor_dtype(xt);
  double a[8], b[8];
  affine_by_hand(g, dims[1], a, b, dt);
  fg_tensor *y = run_fetch(o, xt, "out", 0);
  if (!y) return 0;
  int64_t inner = 1, n = fg_tensor_num_elements(xt);
  for (int d = 2; d < rank; d++)
    inner *= dims[d];
  int ok = 1;
  const fg_tensor *sc = value_of(g, "bn_g"), *sh = value_of(g, "bn_b");
  const fg_tensor *m = value_of(g, "bn_m"), *v = value_of(g, "bn_v");
  for (int64_t i = 0; i < n; i++) {
    int64_t c = i / inner % dims[1];
    double got = elem(y, i), x = elem(xt, i);
    double exact = (x - elem(m, c)) / sqrt(elem(v, c) + 1e-5) * elem(sc, c) + elem(sh, c);
    exact = exact > 0 ? exact : 0;
    double want = expected(dt, x, a[c], b[c]);
    double tol = (dt == FG_F32 ? 4e-6 : 1e-12) * fmax(1, fabs(exact));
    if (memcmp(&got, &want, sizeof got) != 0 || fabs(got - exact) > tol) {
      fprintf(stderr, "element %lld: got %.17g, want %.17g (exact %.17g)\n", (long long)i, got,
              want, exact);
      ok = 0;
      break;
    }
  }
  fg_tensor_free(y);
  return ok;
}

FG_TEST(passes_bn_affine_optimize_by_hand, "") {
  for (int k = 0; k < 2; k++) {
    fg_dtype dt = k ? FG_F64 : FG_F32;
    int64_t dims[4] = {2, 3, 16, 32};
    fg_graph *g = bn_graph(dt, 4, dims, 0);
    fg_pass_report *r = NULL;
    fg_graph *o = optimize1(g, "out", &r);
    FG_REQUIRE(o);
    /* x, bn_g (now a), bn_b (now b), out (mul+add+relu). */
    FG_CHECK_INT(fg_graph_num_nodes(o), 4);
    FG_CHECK_INT(count_op(o, "batch_norm"), 0);
    int out = fg_graph_find_output(o, "out").node;
    FG_CHECK_STR(fg_node_op(o, out), "fused_elementwise");
    const char *prog = NULL;
    FG_REQUIRE(fg_node_attr_string(o, out, "program", &prog) == 0);
    FG_CHECK_STR(prog, "mul(x0, x1); add(t0, x2); relu(t1)");
    const fg_pass_change *c = find_change(r, "fold_inference", "bn");
    FG_REQUIRE(c);
    FG_CHECK_STR(c->into, "fused_elementwise[mul+add]");
    FG_CHECK_STR(c->rule, "batch_norm into x * a + b per channel (same bits)");
    FG_REQUIRE(find_change(r, "fuse", "bn"));
    FG_CHECK_STR(find_change(r, "fuse", "bn")->action, "absorbed");
    /* a and b: [3, 1, 1], rounded once from the double formula. */
    double a[3], b[3];
    affine_by_hand(g, 3, a, b, dt);
    const fg_tensor *ta = value_of(o, "bn_g"), *tb = value_of(o, "bn_b");
    FG_REQUIRE(ta && tb);
    FG_CHECK_INT(fg_tensor_rank(ta), 3);
    FG_CHECK(fg_tensor_dims(ta)[0] == 3 && fg_tensor_dims(ta)[1] == 1 &&
             fg_tensor_dims(tb)[2] == 1);
    for (int i = 0; i < 3; i++)
      FG_CHECK(elem(ta, i) == a[i] && elem(tb, i) == b[i]);
    fg_tensor *xt = filled(dt, 4, dims, 3, -2, 2);
    FG_CHECK(check_output(g, o, xt, 4, dims));
    /* The batch_norm kernel's bits. */
    FG_CHECK(same_bits_as(o, g, xt, "out"));
    fg_tensor_free(xt);
    fg_pass_report_free(r);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

static fg_plan_info *plan_of(fg_graph *g, const fg_tensor *x, const char *fetch) {
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, 0, st);
  fg_feed feed = {"x", x};
  fg_plan_info *pi = s ? fg_session_plan_info(s, &feed, 1, &fetch, 1, NULL, 0, st) : NULL;
  if (!pi) fprintf(stderr, "plan '%s': %s\n", fetch, fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return pi;
}

FG_TEST(passes_bn_affine_session_ranks, "") {
  /* BatchNorm1d over [N, C] and [N, C, L], BatchNorm2d over [N, C, H, W]
   * with planes smaller and larger than the fused kernel's blocks (512
   * elements: blocks then lie inside one channel, and a and b are read as
   * one value each). */
  const int64_t shapes[4][4] = {{5, 4}, {2, 3, 512}, {2, 4, 16, 32}, {2, 3, 24, 24}};
  const int ranks[4] = {2, 3, 4, 4};
  for (int k = 0; k < 8; k++) {
    fg_dtype dt = k % 2 ? FG_F64 : FG_F32;
    const int rank = ranks[k / 2];
    const int64_t *dims = shapes[k / 2];
    fg_graph *g = bn_graph(dt, rank, dims, 0);
    fg_tensor *xt = filled(dt, rank, dims, 4 + k, -2, 2);
    fg_plan_info *pi = plan_of(g, xt, "out");
    FG_REQUIRE(pi);
    FG_CHECK_STR(step_op(pi, g, "bn"), "");
    FG_CHECK_STR(step_op(pi, g, "out"), "fused_elementwise[mul+add+relu]");
    const fg_plan_tensor *a = plan_constant(pi, "bn/affine_scale");
    FG_REQUIRE(a && plan_constant(pi, "bn/affine_shift"));
    FG_CHECK_INT(a->rank, rank - 1);
    FG_CHECK(a->dims[0] == dims[1]);
    for (int d = 1; d < a->rank; d++)
      FG_CHECK(a->dims[d] == 1);
    fg_plan_info_free(pi);
    FG_CHECK(check_output(g, g, xt, rank, dims));
    FG_CHECK(same_bits_on_off(g, xt, "out"));
    /* The batch norm's own value, fetched: its step is the mul+add. */
    FG_CHECK(same_bits_on_off(g, xt, "bn"));
    fg_tensor_free(xt);
    fg_graph_free(g);
  }
}

FG_TEST(passes_bn_affine_not_rewritten, "") {
  int64_t dims[4] = {2, 3, 16, 32};
  fg_tensor *xt = filled(FG_F32, 4, dims, 7, -2, 2);
  /* The graph's training flag: the mode is known per run only. */
  fg_graph *g = bn_graph(FG_F32, 4, dims, 1);
  fg_graph *o = optimize1(g, "out", NULL);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "batch_norm"), 1);
  fg_graph_free(o);
  FG_CHECK(same_bits_on_off(g, xt, "out"));
  fg_graph_free(g);
  /* Its mean output read: the rewritten node would have one output. */
  g = bn_graph(FG_F32, 4, dims, 0);
  fg_output mean = fg_output_at(fg_graph_find_output(g, "bn"), 1);
  fg_set_name(g, fg_neg(g, mean), "mean_read");
  const char *f2[2] = {"out", "mean_read"};
  o = optimize_fetches(g, f2, 2, NULL);
  FG_REQUIRE(o);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "bn").node), "batch_norm");
  fg_graph_free(o);
  fg_graph_free(g);
  /* A variable mean (a graph may update it). */
  g = bn_graph(FG_F32, 4, dims, 0);
  int bn = fg_graph_find_output(g, "bn").node;
  fg_tensor *mv = filled(FG_F32, 1, &dims[1], 1, -0.1, 0.1);
  fg_output var_mean = fg_variable(g, "moving_mean", mv);
  fg_tensor_free(mv);
  fg_output in[6];
  for (int i = 0; i < 6; i++)
    in[i] = fg_node_input(g, bn, i);
  in[3] = var_mean;
  fg_set_name(g, fg_relu(g, fg_op(g, "batch_norm", "bn_var", in, 6, NULL)), "out_var");
  o = optimize1(g, "out_var", NULL);
  FG_REQUIRE(o);
  FG_CHECK_STR(fg_node_op(o, fg_graph_find_output(o, "bn_var").node), "batch_norm");
  fg_graph_free(o);
  /* fg_optimize rewrites the scale and shift constants in place, so only
   * where nobody else reads them: bn_var shares them with bn. A session
   * makes constants of its own, so there both are rewritten. */
  const char *f3[2] = {"out", "out_var"};
  fg_graph_free(g);
  g = bn_graph(FG_F32, 4, dims, 0);
  bn = fg_graph_find_output(g, "bn").node;
  for (int i = 0; i < 6; i++)
    in[i] = fg_node_input(g, bn, i);
  in[0] = fg_set_name(g, fg_neg(g, in[0]), "neg_x");
  fg_set_name(g, fg_relu(g, fg_op(g, "batch_norm", "bn_var", in, 6, NULL)), "out_var");
  o = optimize_fetches(g, f3, 2, NULL);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "batch_norm"), 2);
  fg_graph_free(o);
  fg_plan_info *pi = plan_of(g, xt, "out_var");
  FG_REQUIRE(pi);
  FG_CHECK_STR(step_op(pi, g, "out_var"), "fused_elementwise[neg+mul+add+relu]");
  fg_plan_info_free(pi);
  FG_CHECK(same_bits_on_off(g, xt, "out_var"));
  fg_graph_free(g);
  fg_tensor_free(xt);
  /* Planes of 2 to 511 elements stay batch norms on the CPU (slower
   * fused); 1 and 512 are rewritten. */
  const int64_t planes[4][2] = {{1, 1}, {1, 2}, {7, 73}, {16, 32}};
  for (int k = 0; k < 4; k++) {
    int64_t d4[4] = {2, 3, planes[k][0], planes[k][1]};
    g = bn_graph(FG_F32, 4, d4, 0);
    o = optimize1(g, "out", NULL);
    FG_REQUIRE(o);
    FG_CHECK_INT(count_op(o, "batch_norm"), k == 1 || k == 2);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

FG_TEST(passes_fuse_takes_in_a_fused_node, "") {
  /* A fused_elementwise node the graph holds (as a saved optimized graph
   * does) joins the group of the relu and the neg after it: its program
   * spliced in, its constant merged with the group's. */
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, d);
  fg_output z = fg_placeholder(g, "z", FG_F64, 1, &d[1]);
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_string(a, "program", "mul(x0, x1); add(t0, 0x1p-1); sub(t1, x0)");
  fg_output in[2] = {x, z};
  fg_output f = fg_op(g, "fused_elementwise", "f", in, 2, a);
  fg_attrs_free(a);
  fg_output s = fg_set_name(g, fg_add(g, fg_relu(g, f), fg_scalar(g, FG_F64, 0.5)), "s");
  fg_set_name(g, fg_neg(g, s), "out");
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "out", &r);
  FG_REQUIRE(o);
  /* x, z, out. */
  FG_CHECK_INT(fg_graph_num_nodes(o), 3);
  const char *prog = NULL;
  FG_REQUIRE(fg_node_attr_string(o, fg_graph_find_output(o, "out").node, "program", &prog) == 0);
  FG_CHECK_STR(prog,
               "mul(x0, x1); add(t0, 0x1p-1); sub(t1, x0); relu(t2); add(t3, 0x1p-1); neg(t4)");
  FG_CHECK(find_change(r, "fuse", "f") &&
           strcmp(find_change(r, "fuse", "f")->action, "absorbed") == 0);
  /* -(relu(x z + 0.5 - x) + 0.5) by hand, for x = -2..3 and z = 1, -1, 2. */
  double xv[6] = {-2, -1, 0, 1, 2, 3}, zv[3] = {1, -1, 2};
  fg_tensor *xt = fg_tensor_from_data(FG_F64, 2, d, xv, sizeof xv, NULL);
  fg_tensor *zt = fg_tensor_from_data(FG_F64, 1, &d[1], zv, sizeof zv, NULL);
  fg_status *st = fg_status_new();
  for (int passes = 0; passes < 2; passes++) {
    fg_session *ss = passes_session(passes ? o : g, 1, passes == 0, st);
    FG_REQUIRE(ss);
    fg_feed feeds[2] = {{"x", xt}, {"z", zt}};
    const char *fetch = "out";
    fg_tensor *y = NULL;
    FG_REQUIRE(fg_session_run(ss, feeds, 2, &fetch, 1, &y, NULL, 0, st) == 0);
    for (int i = 0; i < 6; i++) {
      double t = xv[i] * zv[i % 3] + 0.5 - xv[i];
      FG_CHECK(((const double *)fg_tensor_data(y))[i] == -((t > 0 ? t : 0) + 0.5));
    }
    fg_tensor_free(y);
    fg_session_free(ss);
  }
  fg_status_free(st);
  fg_tensor_free(xt);
  fg_tensor_free(zt);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

FG_TEST(passes_fuse_fused_node_within_caps, "") {
  /* A fused node of 31 instructions, then relu and neg: 33 do not fit one
   * program (32), so the relu and the neg fuse on their own and the
   * fused node stays as it is. */
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  char prog[1024] = "neg(x0)";
  for (int i = 1; i < 31; i++) {
    char ins[32];
    snprintf(ins, sizeof ins, "; neg(t%d)", i - 1);
    strcat(prog, ins);
  }
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_string(a, "program", prog);
  fg_output f = fg_op(g, "fused_elementwise", "f", &x, 1, a);
  fg_attrs_free(a);
  fg_set_name(g, fg_neg(g, fg_relu(g, f)), "out");
  fg_graph *o = optimize1(g, "out", NULL);
  FG_REQUIRE(o);
  /* x, f, out (relu+neg). */
  FG_CHECK_INT(fg_graph_num_nodes(o), 3);
  const char *p = NULL;
  FG_REQUIRE(fg_node_attr_string(o, fg_graph_find_output(o, "f").node, "program", &p) == 0);
  FG_CHECK_STR(p, prog);
  FG_REQUIRE(fg_node_attr_string(o, fg_graph_find_output(o, "out").node, "program", &p) == 0);
  FG_CHECK_STR(p, "relu(x0); neg(t0)");
  /* 31 negations: -x; then -relu(-x) = -max(-x, 0), bit for bit. */
  float xv[4] = {-1.5f, 2, 0, -0.25f};
  fg_tensor *xt = fg_tensor_from_data(FG_F32, 1, d, xv, sizeof xv, NULL);
  fg_tensor *y = run_fetch(o, xt, "out", 0);
  FG_REQUIRE(y);
  for (int i = 0; i < 4; i++) {
    float t = -xv[i];
    FG_CHECK(((const float *)fg_tensor_data(y))[i] == -(t > 0 ? t : 0.0f));
  }
  fg_tensor_free(y);
  fg_tensor_free(xt);
  fg_graph_free(o);
  fg_graph_free(g);
}
