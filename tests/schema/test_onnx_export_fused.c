/* fg_onnx_save of the fused ops the optimization passes make: fused_matmul,
 * permuted_matmul, fused_conv2d, fused_conv2d_add and fused_elementwise
 * become the standard ONNX ops of the chain they replaced. Each export is
 * checked by
 * onnx.checker and evaluated by check_export.py's reference interpreter
 * (NumPy / torch, nothing of flowgraph's) against flowgraph's run of the
 * fused graph; re-imported, it gives the same bits where the ONNX ops keep
 * the fused kernel's order of operations. fused_matmul and two programs
 * are also checked against values worked out here by hand or with libm in
 * double. The ONNX ops written are asserted one by one. Then graphs made
 * by fg_optimize and by `flowgraph optimize`, exported; and refusals. */
#include <flowgraph/passes.h>

#include "graph/fused_program.h"
#include "graph/op_table.h"
#include "onnx_export_util.h"
#include "test_cli_train_util.h"

/* The op types of the nodes of the export of `fetch` at `opset`, joined
 * with ',' into buf ("" when the export fails). */
static const char *onnx_ops(const fg_graph *g, const char *fetch, int opset, char *buf,
                            size_t size) {
  fg_status *st = fg_status_new();
  fg_onnx_export_options o;
  fg_onnx_export_options_init(&o);
  o.opset = opset, o.fetches = &fetch, o.n_fetches = 1;
  void *data = NULL;
  size_t n = 0;
  buf[0] = 0;
  if (fg_onnx_save_memory(g, &data, &n, &o, st) != 0) {
    FG_FAIL_AT("export of %s: %s", fetch, fg_status_message(st));
  } else {
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, n, data);
    FG_CHECK(m && m->graph);
    size_t used = 0;
    for (size_t i = 0; m && m->graph && i < m->graph->n_node && used < size; i++)
      used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? "," : "",
                               m->graph->node[i]->op_type);
    if (m) onnx__model_proto__free_unpacked(m, NULL);
  }
  free(data);
  fg_status_free(st);
  return buf;
}

static fg_output named(fg_graph *g, fg_output o, const char *name) {
  return fg_set_name(g, o, name);
}

/* Checks t's f32 values against want[0..n), exactly. */
static void check_exact(const char *what, const fg_tensor *t, const double *want, int n) {
  FG_REQUIRE(t && fg_tensor_num_elements(t) == n);
  for (int i = 0; i < n; i++)
    if (ox_at(t, i) != want[i])
      FG_FAIL_AT("%s: element %d is %.9g, want %.9g", what, i, ox_at(t, i), want[i]);
}

/* ---- fused_matmul ------------------------------------------------------------------ */

/* x [2, 3] @ W [3, 2] + b [2] with values whose products and sums are exact
 * in f32; by hand: x @ W = [[-4, -1], [2.5, -4]], + b = [[-3.75, 1],
 * [2.75, -2]]; relu: [[0, 1], [2.75, 0]]. The same product as x @ op(Wt)
 * with transpose_b and op(xt) @ W with transpose_a. */
static void fused_matmul_case(int opset) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {2, 3}, xtd[2] = {3, 2}, wd[2] = {3, 2}, wtd[2] = {2, 3}, bd[1] = {2};
  static const double xv[6] = {1, -2, 0.5, 3, 0, -1}, xtv[6] = {1, 3, -2, 0, 0.5, -1};
  static const double wv[6] = {0.5, -1, 2, 0.25, -1, 1}, wtv[6] = {0.5, 2, -1, -1, 0.25, 1};
  static const double bv[2] = {0.25, 2};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd), xt = fg_placeholder(g, "xt", FG_F32, 2, xtd);
  fg_output w = ox_const(g, FG_F32, 2, wd, wv), wt = ox_const(g, FG_F32, 2, wtd, wtv);
  fg_output b = ox_const(g, FG_F32, 1, bd, bv);
  named(g, fg_fused_matmul(g, x, wt, b, 0, 1, "relu"), "y_tb");
  named(g, fg_fused_matmul(g, xt, w, b, 1, 0, "relu"), "y_ta");
  named(g, fg_fused_matmul(g, x, w, b, 0, 0, "none"), "lin");
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  char ops[512];
  FG_CHECK_STR(onnx_ops(g, "y_tb", opset, ops, sizeof ops), "Transpose,MatMul,Add,Relu");
  FG_CHECK_STR(onnx_ops(g, "y_ta", opset, ops, sizeof ops), "Transpose,MatMul,Add,Relu");
  FG_CHECK_STR(onnx_ops(g, "lin", opset, ops, sizeof ops), "MatMul,Add");
  fg_tensor *xt_ = ox_tensor(FG_F32, 2, xd, xv), *xtt = ox_tensor(FG_F32, 2, xtd, xtv);
  fg_feed feeds[2] = {{"x", xt_}, {"xt", xtt}};
  const char *fetches[3] = {"y_tb", "y_ta", "lin"};
  fg_tensor *outs[3] = {0};
  static const double relu_want[4] = {0, 1, 2.75, 0}, lin_want[4] = {-3.75, 1, 2.75, -2};
  FG_REQUIRE(ox_run(g, feeds, 2, fetches, 3, outs) == 0);
  check_exact("y_tb", outs[0], relu_want, 4);
  check_exact("y_ta", outs[1], relu_want, 4);
  check_exact("lin", outs[2], lin_want, 4);
  /* Python's evaluation and the round trip, bit for bit (tolerance 0). */
  ox_check(g, ox_name("fmm", opset), feeds, 2, fetches, 3, opset, 0, 0, 0);
  for (int k = 0; k < 3; k++)
    fg_tensor_free(outs[k]);
  fg_tensor_free(xt_), fg_tensor_free(xtt);
  fg_status_free(st);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_fused_matmul_opset11, "") { fused_matmul_case(11); }
FG_TEST(onnx_export_fused_matmul_opset13, "") { fused_matmul_case(13); }
FG_TEST(onnx_export_fused_matmul_opset17, "") { fused_matmul_case(17); }

/* ---- fused_conv2d, fused_conv2d_add ------------------------------------------------- */

static fg_output fused_conv(fg_graph *g, const char *op, const fg_output *in, int n, int same,
                            const char *act) {
  fg_attrs *a = fg_attrs_new();
  static const int64_t pads[4] = {1, 1, 1, 1};
  if (same)
    fg_attrs_set_string(a, "auto_pad", "same");
  else
    fg_attrs_set_ints(a, "pads", pads, 4);
  fg_attrs_set_string(a, "activation", act);
  if (strcmp(act, "clip") == 0)
    fg_attrs_set_float(a, "min", -0.25), fg_attrs_set_float(a, "max", 0.5);
  /* Integer bounds, which a graph may hold for a float attribute. */
  if (strcmp(act, "clip_int") == 0)
    fg_attrs_set_string(a, "activation", "clip"), fg_attrs_set_int(a, "min", 0),
        fg_attrs_set_int(a, "max", 1);
  fg_output o = fg_op(g, op, NULL, in, n, a);
  fg_attrs_free(a);
  return o;
}

/* x [2, 2, 5, 5], w [3, 2, 3, 3], b [3], z [2, 3, 5, 5]: relu(conv + b),
 * relu(conv + b + z), conv + z ('same', no bias), clip(conv + b, -0.25,
 * 0.5) and clip(conv + b + z, 0, 1) (relu6's form; its bounds given as
 * ints). torch's conv in
 * check_export.py is the independent reference. */
static void fused_conv_case(int opset) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {2, 2, 5, 5}, wd[4] = {3, 2, 3, 3}, bd[1] = {3}, zd[4] = {2, 3, 5, 5};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd), z = fg_placeholder(g, "z", FG_F32, 4, zd);
  fg_output w = ox_var(g, "w", 4, wd, -0.5, 0.5, 41), b = ox_var(g, "b", 1, bd, -0.3, 0.3, 42);
  const fg_output c1[3] = {x, w, b}, c2[4] = {x, w, z, b}, c3[3] = {x, w, z};
  named(g, fused_conv(g, "fused_conv2d", c1, 3, 0, "relu"), "c1");
  named(g, fused_conv(g, "fused_conv2d_add", c2, 4, 0, "relu"), "c2");
  named(g, fused_conv(g, "fused_conv2d_add", c3, 3, 1, "none"), "c3");
  named(g, fused_conv(g, "fused_conv2d", c1, 3, 0, "clip"), "c4");
  named(g, fused_conv(g, "fused_conv2d_add", c2, 4, 0, "clip_int"), "c5");
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  char ops[512];
  FG_CHECK_STR(onnx_ops(g, "c1", opset, ops, sizeof ops), "Conv,Relu");
  FG_CHECK_STR(onnx_ops(g, "c2", opset, ops, sizeof ops), "Conv,Add,Relu");
  FG_CHECK_STR(onnx_ops(g, "c3", opset, ops, sizeof ops), "Conv,Add");
  FG_CHECK_STR(onnx_ops(g, "c4", opset, ops, sizeof ops), "Conv,Clip");
  FG_CHECK_STR(onnx_ops(g, "c5", opset, ops, sizeof ops), "Conv,Add,Clip");
  fg_tensor *xt = ox_random(4, xd, -1, 1, 43), *zt = ox_random(4, zd, -1, 1, 44);
  fg_feed feeds[2] = {{"x", xt}, {"z", zt}};
  const char *fetches[5] = {"c1", "c2", "c3", "c4", "c5"};
  ox_check(g, ox_name("fconv", opset), feeds, 2, fetches, 5, opset, 1e-5, 1e-6, 0);
  fg_tensor_free(xt), fg_tensor_free(zt);
  fg_status_free(st);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_fused_conv_opset11, "") { fused_conv_case(11); }
FG_TEST(onnx_export_fused_conv_opset17, "") { fused_conv_case(17); }

/* ---- fused_elementwise ---------------------------------------------------------------- */

static fg_output fused_ew(fg_graph *g, const char *name, const char *program, const fg_output *in,
                          int n) {
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_string(a, "program", program);
  fg_output o = fg_op(g, "fused_elementwise", name, in, n, a);
  fg_attrs_free(a);
  return o;
}

static double gelu_ref(double x) { return 0.5 * x * (1 + erf(x / sqrt(2.0))); }

/* x0 [2, 4], x1 [4], m (bool) [2, 4]:
 *   p1 = m ? (x0 > 0.5 ? gelu(x0) : 3 softplus(x1, beta 2)) : -1.5
 * (a comparison read by a select, a bool input as a condition, constants
 * of the output's dtype and two formula ops), and
 *   p2 = x1 != 0 ? clip(leaky_relu(x0, 0.125), -0.25, 1) : rsqrt(|x0| + 1)
 * broadcast with an input it never reads, u [3, 1, 1] (a float condition
 * cast to bool, attributes, an Expand), and
 *   p3 = x0 < x1 ? relu((x0 + x1) * 1.5) : x0
 * whose ONNX ops keep the kernel's order: bit for bit after the round
 * trip. Values worked out in double with libm. */
static void fused_ew_case(int opset, fg_dtype dt) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {2, 4}, x1d[1] = {4}, ud[3] = {3, 1, 1};
  fg_output x0 = fg_placeholder(g, "x0", dt, 2, xd), x1 = fg_placeholder(g, "x1", dt, 1, x1d);
  fg_output m = fg_placeholder(g, "m", FG_BOOL, 2, xd), u = fg_placeholder(g, "u", dt, 3, ud);
  const fg_output in1[3] = {x0, x1, m}, in2[3] = {x0, x1, u}, in3[2] = {x0, x1};
  fused_ew(g, "p1",
           "greater(x0, 0x1p-1); gelu(x0); softplus(x1, beta=2); mul(t2, 3); "
           "select(t0, t1, t3); select(x2, t4, -1.5)",
           in1, 3);
  fused_ew(g, "p2",
           "leaky_relu(x0, alpha=0x1p-3); clip(t0, min=-0x1p-2, max=1); abs(x0); add(t2, 1); "
           "rsqrt(t3); select(x1, t1, t4)",
           in2, 3);
  fused_ew(g, "p3", "add(x0, x1); mul(t0, 0x1.8p+0); relu(t1); less(x0, x1); select(t3, t2, x0)",
           in3, 2);
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  char ops[512];
  FG_CHECK_STR(onnx_ops(g, "p1", opset, ops, sizeof ops),
               "Greater,Mul,Erf,Add,Mul,Mul,Mul,Softplus,Div,Mul,Where,Where");
  FG_CHECK_STR(onnx_ops(g, "p2", opset, ops, sizeof ops),
               "LeakyRelu,Clip,Abs,Add,Sqrt,Reciprocal,Cast,Where,Shape,Expand");
  FG_CHECK_STR(onnx_ops(g, "p3", opset, ops, sizeof ops), "Add,Mul,Relu,Less,Where");
  static const double x0v[8] = {0.75, -1.25, 0.5, 2, -0.5, 1.5, 0.25, -3};
  static const double x1v[4] = {0.3, 0, -0.7, 1.2};
  static const double mv[8] = {1, 1, 1, 1, 0, 1, 1, 0};
  static const double uv[3] = {1, 2, 3};
  fg_tensor *t0 = ox_tensor(dt, 2, xd, x0v), *t1 = ox_tensor(dt, 1, x1d, x1v);
  fg_tensor *tm = ox_tensor(FG_BOOL, 2, xd, mv), *tu = ox_tensor(dt, 3, ud, uv);
  fg_feed feeds[4] = {{"x0", t0}, {"x1", t1}, {"m", tm}, {"u", tu}};
  const char *fetches[3] = {"p1", "p2", "p3"};
  fg_tensor *outs[3] = {0};
  FG_REQUIRE(ox_run(g, feeds, 4, fetches, 3, outs) == 0);
  /* The inputs as the dtype holds them. */
  double a[8], c[4];
  for (int i = 0; i < 8; i++)
    a[i] = ox_at(t0, i);
  for (int j = 0; j < 4; j++)
    c[j] = ox_at(t1, j);
  double tol = dt == FG_F32 ? 2e-6 : 1e-14;
  int bad = 0;
  for (int i = 0; i < 8; i++) {
    int j = i % 4;
    double sp = log1p(exp(2 * c[j])) / 2;
    double w1 = !mv[i] ? -1.5 : a[i] > 0.5 ? gelu_ref(a[i]) : 3 * sp;
    double lk = a[i] > 0 ? a[i] : 0.125 * a[i];
    double w2 = c[j] != 0 ? fmin(fmax(lk, -0.25), 1) : 1 / sqrt(fabs(a[i]) + 1);
    double s = (a[i] + c[j]) * 1.5;
    double w3 = a[i] < c[j] ? (s > 0 ? s : 0) : a[i];
    bad += fabs(ox_at(outs[0], i) - w1) > tol * (1 + fabs(w1));
    bad += fabs(ox_at(outs[2], i) - w3) > tol * (1 + fabs(w3));
    for (int k = 0; k < 3; k++) /* p2 is [3, 2, 4]: the same [2, 4] thrice */
      bad += fabs(ox_at(outs[1], k * 8 + i) - w2) > tol * (1 + fabs(w2));
  }
  FG_CHECK_INT(bad, 0);
  FG_CHECK_INT(fg_tensor_rank(outs[1]), 3);
  FG_CHECK(fg_tensor_dim(outs[1], 0) == 3 && fg_tensor_dim(outs[1], 1) == 2);
  /* Python's evaluation; the round trip within rounding where the ONNX
   * formulas (gelu, softplus with beta, rsqrt) are not the fused kernel's
   * arithmetic, bit for bit for p3. */
  ox_check(g, ox_name(dt == FG_F32 ? "few" : "few64_", opset), feeds, 4, fetches, 2, opset, tol,
           tol, tol);
  ox_check(g, ox_name(dt == FG_F32 ? "few_exact" : "few64_exact", opset), feeds, 2, fetches + 2, 1,
           opset, tol, tol, 0);
  for (int k = 0; k < 3; k++)
    fg_tensor_free(outs[k]);
  fg_tensor_free(t0), fg_tensor_free(t1), fg_tensor_free(tm), fg_tensor_free(tu);
  fg_status_free(st);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_fused_elementwise_opset11, "") { fused_ew_case(11, FG_F32); }
FG_TEST(onnx_export_fused_elementwise_opset13, "") { fused_ew_case(13, FG_F32); }
FG_TEST(onnx_export_fused_elementwise_opset17, "") { fused_ew_case(17, FG_F32); }
FG_TEST(onnx_export_fused_elementwise_f64_opset11, "") { fused_ew_case(11, FG_F64); }

/* Every opcode a program runs, one fused node each, through check_export.py
 * and the round trip: each has an ONNX form at the opset, with the op's
 * default attributes (clip's bounds given). log, sqrt, rsqrt and pow's base read |x0| + 0.5; a
 * comparison feeds a select (it cannot be the output); select's
 * condition is relu(x1), a float (cast), 0 where x1 < 0. */
static void every_opcode_case(int opset) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {3, 4};
  fg_output x[2] = {fg_placeholder(g, "x0", FG_F32, 2, xd), fg_placeholder(g, "x1", FG_F32, 2, xd)};
  static char names[FG_FUSED_OPCODE_COUNT][48];
  const char *fetches[FG_FUSED_OPCODE_COUNT];
  for (int k = 0; k < FG_FUSED_OPCODE_COUNT; k++) {
    const char *op = fg_op_table[fg_fused_graph_op(k)].name;
    int positive =
        k == FG_FUSED_LOG || k == FG_FUSED_SQRT || k == FG_FUSED_RSQRT || k == FG_FUSED_POW;
    const char *a = positive ? "t1" : "x0";
    char prog[160];
    if (fg_fused_is_compare(k))
      snprintf(prog, sizeof prog, "abs(x0); add(t0, 0.5); %s(%s, x1); select(t2, x0, x1)", op, a);
    else if (fg_fused_arity(k) == 3)
      snprintf(prog, sizeof prog, "abs(x0); add(t0, 0.5); relu(x1); %s(t2, %s, x0)", op, a);
    else if (fg_fused_arity(k) == 2)
      snprintf(prog, sizeof prog, "abs(x0); add(t0, 0.5); %s(%s, x1)", op, a);
    else /* clip's bounds have no default */
      snprintf(prog, sizeof prog, "abs(x0); add(t0, 0.5); %s(%s%s)", op, a,
               k == FG_FUSED_CLIP ? ", min=-0.5, max=0.75" : "");
    snprintf(names[k], sizeof names[k], "op_%s", op);
    fetches[k] = names[k];
    FG_CHECK(fused_ew(g, names[k], prog, x, 2).node >= 0);
  }
  fg_status *st = fg_status_new();
  if (fg_graph_status(g, st) != FG_OK) FG_FAIL_AT("%s", fg_status_message(st));
  fg_tensor *t0 = ox_random(2, xd, -2, 2, 101), *t1 = ox_random(2, xd, -1, 1, 102);
  fg_feed feeds[2] = {{"x0", t0}, {"x1", t1}};
  ox_check(g, ox_name("every", opset), feeds, 2, fetches, FG_FUSED_OPCODE_COUNT, opset, 2e-6, 2e-6,
           2e-6);
  fg_tensor_free(t0), fg_tensor_free(t1);
  fg_status_free(st);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_fused_every_opcode_opset11, "") { every_opcode_case(11); }
FG_TEST(onnx_export_fused_every_opcode_opset17, "") { every_opcode_case(17); }

/* ---- graphs made by the passes --------------------------------------------------------- */

/* How many nodes of g run `op`. */
static int count_op(const fg_graph *g, const char *op) {
  int n = 0;
  for (int id = 0; id < fg_graph_num_nodes(g); id++)
    n += strcmp(fg_node_op(g, id), op) == 0;
  return n;
}

/* x [?, 8] -> relu(x W1 + b1) -> h W2 + b2 = logits -> out = sigmoid(logits)
 * * logits + 0.5: the passes make two fused_matmul and one
 * fused_elementwise. */
static fg_graph *build_dense(void) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 8}, w1[2] = {8, 16}, b1[1] = {16}, w2[2] = {16, 4}, b2[1] = {4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output h = fg_relu(g, fg_add(g, fg_matmul(g, x, ox_var(g, "w1", 2, w1, -0.5, 0.5, 51), 0, 0),
                                  ox_var(g, "b1", 1, b1, -0.1, 0.1, 52)));
  fg_output logits = fg_add(g, fg_matmul(g, h, ox_var(g, "w2", 2, w2, -0.5, 0.5, 53), 0, 0),
                            ox_var(g, "b2", 1, b2, -0.1, 0.1, 54));
  fg_output out = fg_add(g, fg_mul(g, fg_sigmoid(g, logits), logits), fg_scalar(g, FG_F32, 0.5));
  fg_graph_add_output(g, named(g, out, "out"));
  return g;
}

/* x [?, 2, 6, 6] -> h = relu(conv(x) + b1) -> relu(conv(h) + b2 + h) ->
 * global average pool: fused_conv2d and fused_conv2d_add. */
static fg_graph *build_convnet(void) {
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {FG_DIM_UNKNOWN, 2, 6, 6}, w1[4] = {3, 2, 3, 3}, w2[4] = {3, 3, 3, 3},
          c3[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  fg_conv2d_opts co = {.pads = {1, 1, 1, 1}};
  fg_output h = fg_relu(g, fg_conv2d(g, x, ox_var(g, "w1", 4, w1, -0.5, 0.5, 61),
                                     ox_var(g, "b1", 1, c3, -.1, .1, 62), &co));
  fg_output r = fg_conv2d(g, h, ox_var(g, "w2", 4, w2, -0.5, 0.5, 63),
                          ox_var(g, "b2", 1, c3, -0.1, 0.1, 64), &co);
  fg_output out = fg_global_avg_pool(g, fg_relu(g, fg_add(g, r, h)));
  fg_graph_add_output(g, named(g, out, "out"));
  return g;
}

/* fg_optimize with `passes` (NULL: the default pipeline), then export:
 * the fused ops are there, and the ONNX model
 * computes what the unoptimized graph does, bit for bit after the round
 * trip. */
static void optimized_case(fg_graph *(*build)(void), const char *name, const char *passes,
                           const int64_t *xd, int rank, const char *const *want_ops, int n_want) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = build();
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  const char *fetch = "out";
  fg_pass_options po = {0, passes};
  fg_graph *o = fg_optimize(g, &po, &fetch, 1, NULL, st);
  if (!o) FG_FAIL_AT("fg_optimize: %s", fg_status_message(st));
  FG_REQUIRE(o);
  for (int i = 0; i < n_want; i++)
    if (count_op(o, want_ops[i]) == 0) FG_FAIL_AT("%s: no %s after fg_optimize", name, want_ops[i]);
  fg_tensor *x = ox_random(rank, xd, -1, 1, 71), *want = NULL;
  fg_feed feed = {"x", x};
  FG_REQUIRE(ox_run(g, &feed, 1, &fetch, 1, &want) == 0);
  ox_check(o, name, &feed, 1, &fetch, 1, 0, 1e-5, 1e-6, 0);
  /* The ONNX model against the unoptimized graph's run too. */
  if (ox_importer_maps_ops()) ox_round_trip(name, &feed, 1, &fetch, 1, &want, 0);
  fg_tensor_free(x), fg_tensor_free(want);
  fg_graph_free(o), fg_graph_free(g);
  fg_status_free(st);
  ox_end();
}

FG_TEST(onnx_export_optimized_mlp, "") {
  int64_t xd[2] = {5, 8};
  const char *ops[2] = {"fused_matmul", "fused_elementwise"};
  optimized_case(build_dense, "opt_mlp", NULL, xd, 2, ops, 2);
}

FG_TEST(onnx_export_optimized_cnn, "") {
  int64_t xd[4] = {3, 2, 6, 6};
  const char *ops[2] = {"fused_conv2d", "fused_conv2d_add"};
  optimized_case(build_convnet, "opt_cnn", "conv_epilogue,dce", xd, 4, ops, 2);
}

/* Attention on x [2, 12, 3, 8] (q = x, k = x / 2, v = x + 1): the heads'
 * transposes around both products fold into permuted_matmul, which the
 * exporter writes back as Transpose, MatMul, Transpose. */
static fg_graph *build_attention(void) {
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {2, 12, 3, 8};
  static const int64_t p0213[4] = {0, 2, 1, 3}, p0231[4] = {0, 2, 3, 1};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  fg_output k = fg_mul(g, x, fg_scalar(g, FG_F32, 0.5)), v = fg_add(g, x, fg_scalar(g, FG_F32, 1));
  fg_output sc = fg_matmul(g, fg_transpose(g, x, 4, p0213), fg_transpose(g, k, 4, p0231), 0, 0);
  fg_output ctx = fg_matmul(g, fg_softmax(g, sc, -1), fg_transpose(g, v, 4, p0213), 0, 0);
  named(g, fg_transpose(g, ctx, 4, p0213), "out");
  return g;
}

FG_TEST(onnx_export_optimized_attention, "") {
  int64_t xd[4] = {2, 12, 3, 8};
  const char *ops[1] = {"permuted_matmul"};
  optimized_case(build_attention, "opt_attention", "transpose_matmul,dce", xd, 4, ops, 1);
}

/* `flowgraph optimize M -o O.fgb`, then `flowgraph export O.fgb -o O.onnx`:
 * the saved graph holds the fused ops, and the model computes the MLP's
 * values. */
FG_TEST(onnx_export_cli_optimize_then_export, "") {
  FG_REQUIRE(make_tmpdir());
  snprintf(ox_dir, sizeof ox_dir, "%s", tmpdir);
  fg_graph *g = build_dense();
  FG_REQUIRE(save_graph(g, tpath("m.fgb"), 0) == 0);
  cli_result r;
  FG_REQUIRE(cli(&r, "optimize", tpath("m.fgb"), "-o", tpath("o.fgb"), "-q", NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  fg_status *st = fg_status_new();
  fg_graph *o = fg_graph_load(tpath("o.fgb"), st);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "fused_matmul"), 2);
  FG_CHECK_INT(count_op(o, "fused_elementwise"), 1);
  FG_REQUIRE(cli(&r, "export", tpath("o.fgb"), "-o", tpath("mlp.onnx"), NULL) == 0);
  CHECK_OK(r);
  FG_CHECK_STR_CONTAINS(r.out, "outputs: out");
  result_free(&r);
  int64_t xd[2] = {4, 8};
  fg_tensor *x = ox_random(2, xd, -1, 1, 81), *want = NULL;
  FG_REQUIRE(fg_npy_write(ox_in_path("mlp", "x"), x, st) == 0);
  int rc = ox_python("mlp", 17);
  FG_CHECK_PYTHON(rc);
  fg_feed feed = {"x", x};
  const char *fetch = "out";
  FG_REQUIRE(ox_run(g, &feed, 1, &fetch, 1, &want) == 0);
  if (rc == 0) {
    fg_tensor *py = fg_npy_read(ox_path("mlp", ".out.0.npy"), st);
    FG_REQUIRE(py);
    ox_compare("out (Python)", want, py, 1e-5, 1e-6);
    fg_tensor_free(py);
  }
  ox_round_trip("mlp", &feed, 1, &fetch, 1, &want, 0);
  fg_tensor_free(x), fg_tensor_free(want);
  fg_graph_free(o), fg_graph_free(g);
  fg_status_free(st);
  fgt_rmtree(tmpdir);
}

/* ---- refusals ------------------------------------------------------------------------- */

FG_TEST(onnx_export_fused_refusals, "") {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  /* softplus's threshold 5 has no ONNX form: the node and the instruction
   * are named. */
  fused_ew(g, "f", "neg(x0); softplus(t0, threshold=5); relu(t1)", &x, 1);
  const char *fetch[1] = {"f"};
  const char *needles[] = {"node 'f' (fused_elementwise): program instruction 1 (softplus)",
                           "threshold 5", NULL};
  ox_expect_error(g, fetch, 1, 0, FG_UNIMPLEMENTED, needles);
  /* A plain node's refusal still names the node. */
  named(g, fg_softplus(g, x, 1, 5), "sp");
  const char *fetch2[1] = {"sp"};
  const char *needles2[] = {"node 'sp' (softplus)", "threshold 5", NULL};
  ox_expect_error(g, fetch2, 1, 0, FG_UNIMPLEMENTED, needles2);
  /* The gradient fusions are training-only. */
  int64_t wd[2] = {3, 3};
  fg_output w = ox_var(g, "w", 2, wd, -1, 1, 91);
  named(g, fg_fused_matmul_relu_grad(g, x, w, fg_relu(g, x), 0, 0), "dx");
  const char *fetch3[1] = {"dx"};
  const char *needles3[] = {"training-only", "'dx' (fused_matmul_relu_grad)", NULL};
  ox_expect_error(g, fetch3, 1, 0, FG_INVALID_ARGUMENT, needles3);
  fg_status *st = fg_status_new();
  FG_CHECK(fg_graph_status(g, st) == FG_OK);
  fg_status_free(st);
  fg_graph_free(g);
}
