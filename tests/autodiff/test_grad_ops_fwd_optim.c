/* Forward behaviour of group and the optimizer updates apply_sgd,
 * apply_momentum and apply_adam (graph/op_table.h), through sessions with
 * variables, over three steps. Expected values are worked out by hand in
 * the comments; the Adam tests also recompute the update in plain C
 * doubles (adam_ref). */
#include "kernels/kernel.h"
#include "test_grad_ops_fwd_util.h"

/* ---- group --------------------------------------------------------------- */

FG_TEST(group_outputs_zero_and_runs_inputs, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  fg_output v = var(g, "v", FG_F64, 1, DIMS(2), (const double[]){1, 2});
  fg_output a = fg_assign(g, v, cst(g, FG_F64, 1, DIMS(2), (const double[]){5, 6}));
  fg_output x = cst(g, FG_F32, 0, NULL, (const double[]){3});
  fg_output ins[2] = {a, x};
  fg_output grp = fg_group(g, ins, 2);
  fg_set_name(g, grp, "grp");
  fg_output empty = fg_group(g, NULL, 0);
  EXPECT_SCALAR(g, grp, FG_I32);
  EXPECT_SCALAR(g, empty, FG_I32);
  RUN_EXPECT(g, empty, NULL, 0, FG_I32, 0, NULL, ((const double[]){0}));
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  /* As a target, group makes the assign run. */
  const char *target = "grp";
  FG_REQUIRE(fg_session_run(s, NULL, 0, NULL, 0, NULL, &target, 1, st) == 0);
  fg_tensor *vt = fg_session_variable(s, "v", st);
  EXPECT_VALUES(vt, FG_F64, 1, DIMS(2), ((const double[]){5, 6}), 0);
  fg_tensor_free(vt);
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, NULL, 0, &target, 1, &out, NULL, 0, st) == 0);
  EXPECT_VALUES(out, FG_I32, 0, NULL, ((const double[]){0}), 0);
  fg_tensor_free(out);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- optimizer updates --------------------------------------------------- */

/* Runs `target` n times in one session (feeding `step` = 1, 2, ... when
 * step_name is set, as dtype step_dt) and returns variable `name`. */
static fg_tensor *train(fg_graph *g, const char *target, int n, const char *step_name,
                        fg_dtype step_dt, const char *name, fg_status *st) {
  fg_session *s = fg_session_new(g, NULL, st);
  if (!s) return NULL;
  for (int i = 1; i <= n; i++) {
    fg_tensor *t = step_name ? tens(step_dt, 0, NULL, (const double[]){i}) : NULL;
    fg_feed feed = {step_name, t};
    int rc = fg_session_run(s, &feed, step_name ? 1 : 0, NULL, 0, NULL, &target, 1, st);
    fg_tensor_free(t);
    if (rc != 0) {
      fg_session_free(s);
      return NULL;
    }
  }
  fg_tensor *v = fg_session_variable(s, name, st);
  fg_session_free(s);
  return v;
}

FG_TEST(apply_sgd_three_steps, "") {
  /* var [1,-2,3], grad [0.5,0.25,-1], lr 0.1: each step subtracts
   * [0.05,0.025,-0.1]; after 3: [0.85,-2.075,3.3]. lr is f64 for an f32
   * variable too (any float scalar). A control input is ignored. */
  for (int k = 0; k < 2; k++) {
    fg_dtype dt = floats[k];
    fg_status *st = fg_status_new();
    fg_graph *g = fg_graph_new();
    fg_output v = var(g, "w", dt, 1, DIMS(3), (const double[]){1, -2, 3});
    fg_output gr = cst(g, dt, 1, DIMS(3), (const double[]){0.5, 0.25, -1});
    fg_output lr = fg_scalar(g, FG_F64, 0.1);
    fg_output ctrl = fg_group(g, NULL, 0);
    fg_output up = fg_apply_sgd(g, v, gr, lr, &ctrl, 1);
    fg_set_name(g, up, "up");
    EXPECT_TINFO(g, up, dt, 1, 3);
    FG_CHECK_INT(fg_node_flops(g, up.node), 6);
    fg_tensor *w = train(g, "up", 3, NULL, FG_F32, "w", st);
    if (!w) FG_FAIL_AT("%s", fg_status_message(st));
    /* f32: three roundings of values near 1-3. */
    EXPECT_VALUES(w, dt, 1, DIMS(3), ((const double[]){0.85, -2.075, 3.3}),
                  dt == FG_F32 ? 1e-6 : 1e-14);
    fg_tensor_free(w);
    /* Fetching the update runs it and returns the new value (output 0
     * aliases the variable); a fresh session starts again from [1,-2,3]. */
    RUN_EXPECT(g, up, NULL, 0, dt, 1, DIMS(3), ((const double[]){0.95, -2.025, 3.1}));
    fg_graph_free(g);
    fg_status_free(st);
  }
}

FG_TEST(apply_momentum_three_steps, "") {
  /* momentum 0.9, lr 0.1, constant grad g:
   *   buf: g, 1.9g, 2.71g (buf = 0.9 buf + g from 0)
   *   plain:    var -= 0.1 * buf        -> total 0.1 * 5.61 g
   *   nesterov: var -= 0.1 * (g + 0.9 buf) = 1.9g, 2.71g, 3.439g
   *                                      -> total 0.1 * 8.049 g
   * With var0 = [1,-1], g = [1,-2]: plain [0.439, 0.122],
   * nesterov [0.1951, 0.6098]; buf ends at 2.71 g = [2.71,-5.42]. */
  const double want_var[2][2] = {{0.439, 0.122}, {0.1951, 0.6098}};
  for (int k = 0; k < 2; k++)
    for (int nest = 0; nest < 2; nest++) {
      fg_dtype dt = floats[k];
      fg_status *st = fg_status_new();
      fg_graph *g = fg_graph_new();
      fg_output v = var(g, "w", dt, 1, DIMS(2), (const double[]){1, -1});
      fg_output buf = var(g, "buf", dt, 1, DIMS(2), (const double[]){0, 0});
      fg_output gr = cst(g, dt, 1, DIMS(2), (const double[]){1, -2});
      fg_output up = fg_apply_momentum(g, v, buf, gr, fg_scalar(g, dt, 0.1), 0.9, nest, NULL, 0);
      fg_set_name(g, up, "up");
      EXPECT_OK(g);
      fg_session *s = fg_session_new(g, NULL, st);
      FG_REQUIRE(s);
      const char *target = "up";
      for (int i = 0; i < 3; i++)
        FG_REQUIRE(fg_session_run(s, NULL, 0, NULL, 0, NULL, &target, 1, st) == 0);
      fg_tensor *w = fg_session_variable(s, "w", st), *b = fg_session_variable(s, "buf", st);
      double tol = dt == FG_F32 ? 1e-6 : 1e-14;
      EXPECT_VALUES(w, dt, 1, DIMS(2), want_var[nest], tol);
      EXPECT_VALUES(b, dt, 1, DIMS(2), ((const double[]){2.71, -5.42}), tol);
      fg_tensor_free(w);
      fg_tensor_free(b);
      fg_session_free(s);
      fg_graph_free(g);
      fg_status_free(st);
    }
}

/* The reference: torch.optim.Adam/AdamW written out in doubles. */
static void adam_ref(double *var, double *m, double *v, const double *g, int n, double lr, double t,
                     double b1, double b2, double eps, double wd) {
  for (int i = 0; i < n; i++) {
    if (wd > 0) var[i] *= 1 - lr * wd;
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    double mhat = m[i] / (1 - pow(b1, t)), vhat = v[i] / (1 - pow(b2, t));
    var[i] -= lr * mhat / (sqrt(vhat) + eps);
  }
}

/* Builds var w (and m, v) and apply_adam with grad = 2 w (the gradient of
 * sum(w^2)), so the gradient changes from step to step. */
static fg_graph *adam_graph(fg_dtype dt, fg_dtype step_dt, const double *w0, double wd) {
  fg_graph *g = fg_graph_new();
  fg_output w = var(g, "w", dt, 1, DIMS(2), w0);
  fg_output m = var(g, "m", dt, 1, DIMS(2), (const double[]){0, 0});
  fg_output v = var(g, "v", dt, 1, DIMS(2), (const double[]){0, 0});
  fg_output gr = fg_mul(g, fg_scalar(g, dt, 2), w);
  fg_output step = fg_placeholder(g, "step", step_dt, 0, NULL);
  fg_output up = fg_apply_adam(g, w, m, v, gr, fg_scalar(g, FG_F64, 0.01), step, 0.9, 0.999, 1e-8,
                               wd, NULL, 0);
  fg_set_name(g, up, "up");
  return g;
}

/* Checks variable w (w0 = [1,-2]) of g's update "up": after 1 step against
 * want1 (worked by hand), after 3 against adam_ref fed the gradient
 * gfactor * w (lr 0.01, decoupled decay wd). */
static void adam_check(fg_graph *g, fg_dtype dt, fg_dtype step_dt, const double *want1,
                       double gfactor, double wd) {
  fg_status *st = fg_status_new();
  fg_tensor *w = train(g, "up", 1, "step", step_dt, "w", st);
  if (!w) FG_FAIL_AT("%s", fg_status_message(st));
  EXPECT_VALUES(w, dt, 1, DIMS(2), want1, dt == FG_F32 ? 1e-7 : 1e-15);
  fg_tensor_free(w);
  double rw[2] = {1, -2}, rm[2] = {0}, rv[2] = {0};
  for (int t = 1; t <= 3; t++) {
    double gr[2] = {gfactor * rw[0], gfactor * rw[1]};
    adam_ref(rw, rm, rv, gr, 2, 0.01, t, 0.9, 0.999, 1e-8, wd);
  }
  w = train(g, "up", 3, "step", step_dt, "w", st);
  if (!w) FG_FAIL_AT("%s", fg_status_message(st));
  EXPECT_VALUES(w, dt, 1, DIMS(2), rw, dt == FG_F32 ? 1e-6 : 1e-14);
  fg_tensor_free(w);
  fg_status_free(st);
}

FG_TEST(apply_adam_three_steps, "") {
  /* Step 1 by hand: w0 = [1,-2], g = 2 w0 = [2,-4]. m1 = 0.1 g, v1 = 0.001 g^2,
   * so mhat = g, vhat = g^2 and the step is lr g / (|g| + eps):
   *   w1[0] = 1 - 0.01 * 2/(2 + 1e-8) = 1 - 0.01 (1 - 5e-9)  = 0.99000000005
   *   w1[1] = -2 + 0.01 * 4/(4 + 1e-8) = -2 + 0.01 (1 - 2.5e-9) = -1.990000000025
   * Steps 2 and 3 are checked against adam_ref. Step fed as f64 and i64. */
  const double w0[2] = {1, -2};
  const fg_dtype step_dts[2] = {FG_F64, FG_I64};
  for (int k = 0; k < 2; k++) {
    fg_graph *g = adam_graph(floats[k], step_dts[k], w0, 0);
    EXPECT_OK(g);
    adam_check(g, floats[k], step_dts[k], (const double[]){0.99000000005, -1.990000000025}, 2, 0);
    fg_graph_free(g);
  }
}

FG_TEST(apply_adamw_weight_decay, "") {
  /* lr 0.01, wd 0.1: w is first scaled by 1 - 0.001 = 0.999 (decoupled),
   * then takes the Adam step computed from the gradient 2 w taken before
   * the update. Step 1 by hand for w0 = [1,-2]:
   *   w1[0] = 0.999 - 0.01 * 2/(2 + 1e-8) = 0.98900000005
   *   w1[1] = -1.998 + 0.01 * 4/(4 + 1e-8) = -1.988000000025 */
  const double w0[2] = {1, -2};
  for (int k = 0; k < 2; k++) {
    fg_graph *g = adam_graph(floats[k], FG_F32, w0, 0.1);
    adam_check(g, floats[k], FG_F32, (const double[]){0.98900000005, -1.988000000025}, 2, 0.1);
    fg_graph_free(g);
  }
}

/* apply_adam with attribute l2 (torch.optim.Adam's coupled weight decay):
 * grad = 2 w (the gradient of sum(w^2)), and as a second graph the same
 * with the L2 term as mul and add nodes instead (l2_nodes), the graph
 * fg_minimize made before the attribute. */
static fg_graph *adam_l2_graph(fg_dtype dt, const double *w0, double l2, int l2_nodes) {
  fg_graph *g = fg_graph_new();
  fg_output w = var(g, "w", dt, 1, DIMS(2), w0);
  fg_output m = var(g, "m", dt, 1, DIMS(2), (const double[]){0, 0});
  fg_output v = var(g, "v", dt, 1, DIMS(2), (const double[]){0, 0});
  fg_output gr = fg_mul(g, fg_scalar(g, dt, 2), w);
  if (l2_nodes) gr = fg_add(g, gr, fg_mul(g, fg_scalar(g, dt, l2), w));
  fg_output step = fg_placeholder(g, "step", FG_F64, 0, NULL);
  fg_attrs *a = fg_attrs_new();
  if (!l2_nodes) fg_attrs_set_float(a, "l2", l2);
  fg_output in[6] = {w, m, v, gr, fg_scalar(g, FG_F64, 0.01), step};
  fg_op(g, "apply_adam", "up", in, 6, a);
  fg_attrs_free(a);
  return g;
}

FG_TEST(apply_adam_l2_coupled, "") {
  /* lr 0.01, l2 0.1: the gradient becomes 2 w + 0.1 w = 2.1 w before the
   * moments. Step 1 by hand for w0 = [1,-2] (g = [2.1,-4.2], mhat = g,
   * vhat = g^2, step lr g / (|g| + eps)):
   *   w1[0] = 1 - 0.01 * 2.1/(2.1 + 1e-8) = 0.99 + 0.01 * 1e-8/2.1
   *         = 0.990000000047619...
   *   w1[1] = -2 + 0.01 * 4.2/(4.2 + 1e-8) = -1.99 - 0.01 * 1e-8/4.2
   *         = -1.990000000023810...
   * Steps 2 and 3 against adam_ref fed 2.1 w; and the same bits as the L2
   * term made of a mul and an add node. */
  const double w0[2] = {1, -2};
  for (int k = 0; k < 2; k++) {
    fg_dtype dt = floats[k];
    fg_status *st = fg_status_new();
    fg_graph *g = adam_l2_graph(dt, w0, 0.1, 0), *gn = adam_l2_graph(dt, w0, 0.1, 1);
    EXPECT_OK(g);
    EXPECT_OK(gn);
    adam_check(g, dt, FG_F64, (const double[]){0.99 + 1e-10 / 2.1, -1.99 - 1e-10 / 4.2}, 2.1, 0);
    fg_tensor *w = train(g, "up", 3, "step", FG_F64, "w", st);
    fg_tensor *wn = train(gn, "up", 3, "step", FG_F64, "w", st);
    FG_REQUIRE(w && wn);
    FG_CHECK(memcmp(fg_tensor_data(w), fg_tensor_data(wn), 2 * fg_dtype_size(dt)) == 0);
    fg_tensor_free(w);
    fg_tensor_free(wn);
    fg_graph_free(g);
    fg_graph_free(gn);
    fg_status_free(st);
  }
}

FG_TEST(apply_adam_l2_out_of_range, "badinput") {
  const double w0[2] = {1, -2};
  fg_graph *g = adam_l2_graph(FG_F32, w0, -0.5, 0);
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'up' (apply_adam): attribute 'l2' = -0.5 is out of range [0, 1e+300]");
  fg_graph_free(g);
}

FG_TEST(apply_adam_step_zero, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = adam_graph(FG_F64, FG_I32, (const double[]){1, 2}, 0);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  fg_tensor *t = tens(FG_I32, 0, NULL, (const double[]){0});
  fg_feed feed = {"step", t};
  const char *target = "up";
  FG_CHECK(fg_session_run(s, &feed, 1, NULL, 0, NULL, &target, 1, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "node 'up' (apply_adam): input 5 (step) = 0 must be >= 1");
  /* The variable is untouched. */
  fg_tensor *w = fg_session_variable(s, "w", st);
  EXPECT_VALUES(w, FG_F64, 1, DIMS(2), ((const double[]){1, 2}), 0);
  fg_tensor_free(w);
  fg_tensor_free(t);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(apply_bad_inputs, "badinput") {
  const double z[6] = {0};
  /* grad shape differs from var. */
  fg_graph *g = fg_graph_new();
  fg_output v = var(g, "w", FG_F32, 2, DIMS(2, 3), z);
  fg_apply_sgd(g, v, cst(g, FG_F32, 1, DIMS(3), z), fg_scalar(g, FG_F32, 0.1), NULL, 0);
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'apply_sgd_2' (apply_sgd): input 1 (grad) shape [3] does not match input 0 "
             "(var) shape [2,3]");
  fg_graph_free(g);

  /* lr not a scalar, lr an integer. */
  g = fg_graph_new();
  v = var(g, "w", FG_F32, 1, DIMS(3), z);
  fg_apply_sgd(g, v, cst(g, FG_F32, 1, DIMS(3), z), cst(g, FG_F32, 1, DIMS(1), z), NULL, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 2 (lr) shape [1] must be a scalar (rank 0)");
  fg_graph_free(g);
  g = fg_graph_new();
  v = var(g, "w", FG_F32, 1, DIMS(3), z);
  fg_apply_sgd(g, v, cst(g, FG_F32, 1, DIMS(3), z), fg_scalar(g, FG_I32, 1), NULL, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 2 (lr) dtype i32 is not allowed; lr must be f32 or f64");
  fg_graph_free(g);

  /* grad dtype differs; var an integer. */
  g = fg_graph_new();
  v = var(g, "w", FG_F32, 1, DIMS(3), z);
  fg_apply_sgd(g, v, cst(g, FG_F64, 1, DIMS(3), z), fg_scalar(g, FG_F32, 1), NULL, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH,
             "input 1 (grad) dtype f64 does not match input 0 (var) dtype f32");
  fg_graph_free(g);
  g = fg_graph_new();
  v = var(g, "w", FG_I32, 1, DIMS(3), z);
  fg_apply_sgd(g, v, cst(g, FG_I32, 1, DIMS(3), z), fg_scalar(g, FG_F32, 1), NULL, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH,
             "input 0 (var) dtype i32 is not allowed; apply_sgd needs f32 or f64");
  fg_graph_free(g);

  /* var not a variable (fg_op checks mutable inputs). */
  g = fg_graph_new();
  fg_output c = cst(g, FG_F32, 1, DIMS(3), z);
  fg_apply_sgd(g, c, c, fg_scalar(g, FG_F32, 1), NULL, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 0 must be a variable");
  fg_graph_free(g);

  /* momentum: the buffer must be a variable too; missing momentum;
   * nesterov without momentum. */
  g = fg_graph_new();
  v = var(g, "w", FG_F32, 1, DIMS(3), z);
  c = cst(g, FG_F32, 1, DIMS(3), z);
  fg_apply_momentum(g, v, c, c, fg_scalar(g, FG_F32, 1), 0.9, 0, NULL, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 1 must be a variable");
  fg_graph_free(g);
  g = fg_graph_new();
  v = var(g, "w", FG_F32, 1, DIMS(3), z);
  fg_output b = var(g, "b", FG_F32, 1, DIMS(3), z);
  c = cst(g, FG_F32, 1, DIMS(3), z);
  fg_output in[4] = {v, b, c, fg_scalar(g, FG_F32, 1)};
  fg_op(g, "apply_momentum", "m", in, 4, NULL);
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'm' (apply_momentum): missing attribute 'momentum' (float)");
  fg_graph_free(g);
  g = fg_graph_new();
  v = var(g, "w", FG_F32, 1, DIMS(3), z);
  b = var(g, "b", FG_F32, 1, DIMS(3), z);
  fg_apply_momentum(g, v, b, cst(g, FG_F32, 1, DIMS(3), z), fg_scalar(g, FG_F32, 1), 0, 1, NULL, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "nesterov = 1 needs momentum > 0, got 0");
  fg_graph_free(g);

  /* adam: beta1 = 1 is out of range; step must be a numeric scalar. */
  g = fg_graph_new();
  v = var(g, "w", FG_F64, 1, DIMS(3), z);
  fg_output m = var(g, "m", FG_F64, 1, DIMS(3), z), vv = var(g, "v", FG_F64, 1, DIMS(3), z);
  c = cst(g, FG_F64, 1, DIMS(3), z);
  fg_apply_adam(g, v, m, vv, c, fg_scalar(g, FG_F64, 1), fg_scalar(g, FG_I64, 1), 1.0, 0.999, 1e-8,
                0, NULL, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "attribute 'beta1' = 1 is out of range [0, 1)");
  fg_graph_free(g);
  g = fg_graph_new();
  v = var(g, "w", FG_F64, 1, DIMS(3), z);
  m = var(g, "m", FG_F64, 1, DIMS(3), z);
  vv = var(g, "v", FG_F64, 1, DIMS(3), z);
  c = cst(g, FG_F64, 1, DIMS(3), z);
  fg_apply_adam(g, v, m, vv, c, fg_scalar(g, FG_F64, 1), fg_scalar(g, FG_BOOL, 1), 0.9, 0.999, 1e-8,
                0, NULL, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH,
             "input 5 (step) dtype bool is not allowed; step must be f32, f64, i32 or i64");
  fg_graph_free(g);
  g = fg_graph_new();
  v = var(g, "w", FG_F64, 1, DIMS(3), z);
  m = var(g, "m", FG_F64, 1, DIMS(2), z);
  vv = var(g, "v", FG_F64, 1, DIMS(3), z);
  c = cst(g, FG_F64, 1, DIMS(3), z);
  fg_apply_adam(g, v, m, vv, c, fg_scalar(g, FG_F64, 1), fg_scalar(g, FG_F64, 1), 0.9, 0.999, 1e-8,
                0, NULL, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 1 (m) shape [2] does not match input 0 (var) shape [3]");
  fg_graph_free(g);

  /* Too few inputs for the generic builder. */
  g = fg_graph_new();
  v = var(g, "w", FG_F64, 1, DIMS(3), z);
  fg_op(g, "apply_adam", "a", &v, 1, NULL);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'a' (apply_adam): takes at least 6 inputs, got 1");
  fg_graph_free(g);
}

/* ---- direct kernel calls ------------------------------------------------- */

static fg_kbuf kbuf(fg_dtype dt, int rank, const int64_t *dims, void *data) {
  fg_kbuf b = {dt, rank, {0}, data, 0};
  for (int i = 0; i < rank; i++)
    b.dims[i] = dims[i];
  return b;
}

/* A caller other than the executor may pass an output buffer that is not
 * the variable: the variable is still updated in place and the output gets
 * a copy. Mis-wired calls fail with a message instead of reading past a
 * buffer. */
FG_TEST(optimizer_kernels_direct_calls, "badinput") {
  float w[2] = {1, 2}, gr[2] = {10, 20}, lr = 0.5f, out[2] = {0, 0}, short_g[1] = {1};
  fg_kbuf in[3] = {kbuf(FG_F32, 1, DIMS(2), w), kbuf(FG_F32, 1, DIMS(2), gr),
                   kbuf(FG_F32, 0, NULL, &lr)};
  fg_kbuf o = kbuf(FG_F32, 1, DIMS(2), out);
  fg_op_params p;
  memset(&p, 0, sizeof p);
  char err[160] = "";
  fg_kctx ctx = {in,   3,    &o, 1, &p, err, sizeof err, NULL, NULL, NULL,
                 NULL, NULL, 0,  0, 0,  0,   0,          0,    NULL};
  fg_kernel_fn sgd = fg_cpu_kernel("apply_sgd", FG_F32);
  FG_REQUIRE(sgd != NULL);
  FG_REQUIRE(sgd(&ctx) == 0);
  /* 1 - 0.5*10 = -4, 2 - 0.5*20 = -8. */
  FG_CHECK_NEAR(w[0], -4, 0);
  FG_CHECK_NEAR(w[1], -8, 0);
  FG_CHECK_NEAR(out[0], -4, 0);
  FG_CHECK_NEAR(out[1], -8, 0);
  in[1] = kbuf(FG_F32, 1, DIMS(1), short_g);
  FG_CHECK(sgd(&ctx) != 0);
  FG_CHECK_STR_CONTAINS(err, "input 1 is f32 with 1 elements, expected f32 with 2");
  in[1] = kbuf(FG_F32, 1, DIMS(2), gr);
  in[2] = kbuf(FG_F32, 1, DIMS(1), &lr);
  FG_CHECK(sgd(&ctx) != 0);
  FG_CHECK_STR_CONTAINS(err, "input 2 (lr) has rank 1, expected 0");
  ctx.n_in = 2;
  FG_CHECK(sgd(&ctx) != 0);
  FG_CHECK_STR_CONTAINS(err, "expected 3 inputs, got 2");

  /* sum_to whose output does not broadcast to the input. */
  double x[6] = {1, 2, 3, 4, 5, 6}, y[2] = {0, 0};
  fg_kbuf xi = kbuf(FG_F64, 2, DIMS(2, 3), x), yo = kbuf(FG_F64, 1, DIMS(2), y);
  fg_kctx c2 = {&xi,  1,    &yo, 1, &p, err, sizeof err, NULL, NULL, NULL,
                NULL, NULL, 0,   0, 0,  0,   0,          0,    NULL};
  FG_CHECK(fg_cpu_kernel("sum_to", FG_F64)(&c2) != 0);
  FG_CHECK_STR_CONTAINS(err, "output dim 0 (2) does not broadcast to input dim 1 (3)");
  /* group's output must be an i32 scalar. */
  FG_CHECK(fg_cpu_kernel("group", FG_F32)(&c2) != 0);
  FG_CHECK_STR_CONTAINS(err, "expected an i32 scalar");
}
