/* fg_gradients core and fg_minimize: registry coverage, naming, summing of
 * several consumers, unconnected and non-differentiable inputs, a
 * Hessian-vector product against finite differences, optimizers against
 * hand-computed updates, and bitwise save/resume. */
#include <flowgraph/flowgraph.h>
#include <math.h>
#include <unistd.h>

#include "autodiff/grad.h"
#include "fgtest.h"
#include "graph/op_table.h"

static fg_tensor *f64_tensor(int rank, const int64_t *dims, const double *v) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  return fg_tensor_from_data(FG_F64, rank, dims, v, (size_t)n * sizeof(double), NULL);
}

static double fetch_scalar(fg_session *s, const fg_feed *feeds, int nf, const char *name) {
  fg_tensor *out = NULL;
  fg_status *st = fg_status_new();
  double v = NAN;
  if (fg_session_run(s, feeds, nf, &name, 1, &out, NULL, 0, st) == 0) {
    v = fg_tensor_dtype(out) == FG_F64 ? ((double *)fg_tensor_data(out))[0]
                                       : ((float *)fg_tensor_data(out))[0];
  } else {
    fprintf(stderr, "fetch %s: %s\n", name, fg_status_message(st));
  }
  fg_tensor_free(out);
  fg_status_free(st);
  return v;
}

FG_TEST(grad_registry_covers_every_differentiable_op, "") {
  for (int op = 0; op < FG_OP_COUNT; op++) {
    unsigned f = fg_op_table[op].flags;
    if ((f & FG_OPF_DIFFERENTIABLE) && !(f & FG_OPF_SOURCE) && !fg_grad_lookup(op))
      FG_FAIL_AT("op '%s' is differentiable but has no gradient", fg_op_table[op].name);
  }
  /* No op is registered by two families. */
  const fg_grad_reg *fams[] = {fg_grads_math, fg_grads_shape, fg_grads_reduce2, fg_grads_shape_ops,
                               fg_grads_pool, fg_grads_norm,  fg_grads_dropout, fg_grads_conv};
  const int n_fams = (int)(sizeof fams / sizeof fams[0]);
  for (int i = 0; i < n_fams; i++)
    for (int j = i + 1; j < n_fams; j++)
      for (const fg_grad_reg *a = fams[i]; a->op >= 0; a++)
        for (const fg_grad_reg *b = fams[j]; b->op >= 0; b++)
          if (a->op == b->op) FG_FAIL_AT("op '%s' registered twice", fg_op_table[a->op].name);
}

FG_TEST(grad_names_use_gradients_scope_and_sum_consumers, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {2};
  fg_output x = fg_placeholder(g, "x", FG_F64, 1, d);
  /* y = sum(x*x + 3x): dy/dx = 2x + 3 (x reaches y through three uses). */
  fg_output y = fg_reduce_sum(g, fg_add(g, fg_mul(g, x, x), fg_mul(g, fg_scalar(g, FG_F64, 3), x)),
                              NULL, 0, 0);
  fg_output dx;
  FG_REQUIRE(fg_gradients(g, &y, 1, &x, 1, NULL, &dx, st) == 0);
  FG_CHECK(strncmp(fg_node_name(g, dx.node), "gradients/", 10) == 0);
  fg_set_name(g, dx, "dx");
  /* A second call uses gradients_1/. */
  fg_output dx2;
  FG_REQUIRE(fg_gradients(g, &y, 1, &x, 1, NULL, &dx2, st) == 0);
  FG_CHECK(strncmp(fg_node_name(g, dx2.node), "gradients_1/", 12) == 0);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  double xv[2] = {1.5, -4};
  fg_tensor *xt = f64_tensor(1, d, xv);
  fg_feed f = {"x", xt};
  const char *fetch = "dx";
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) == 0);
  FG_CHECK_NEAR(((double *)fg_tensor_data(out))[0], 6.0, 1e-15);
  FG_CHECK_NEAR(((double *)fg_tensor_data(out))[1], -5.0, 1e-15);
  fg_tensor_free(out);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* No path from y gives zeros (or NULL on request); integer tensors and
 * argmax are not differentiable. */
FG_TEST(grad_unconnected_and_non_differentiable, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F64, 1, d);
  fg_output z = fg_placeholder(g, "z", FG_F64, 1, d);
  fg_output k = fg_placeholder(g, "k", FG_I64, 1, d);
  fg_output y = fg_reduce_sum(g, fg_exp(g, x), NULL, 0, 0);
  fg_output dz;
  FG_REQUIRE(fg_gradients(g, &y, 1, &z, 1, NULL, &dz, st) == 0);
  FG_CHECK_STR_CONTAINS(fg_node_op(g, dz.node), "zeros_like");
  fg_gradients_options o;
  fg_gradients_options_init(&o);
  o.zeros_for_unconnected = 0;
  FG_REQUIRE(fg_gradients_ex(g, &y, 1, &z, 1, NULL, &dz, &o, st) == 0);
  FG_CHECK_INT(dz.node, -1);
  /* Through argmax nothing flows: gradient of a cast argmax is zeros. */
  fg_output am = fg_cast(g, fg_argmax(g, x, 0), FG_F64);
  fg_output dxa;
  FG_REQUIRE(fg_gradients(g, &am, 1, &x, 1, NULL, &dxa, st) == 0);
  FG_CHECK_STR_CONTAINS(fg_node_op(g, dxa.node), "zeros_like");
  /* Integer x or y: a clear error naming it. */
  fg_output dk;
  FG_CHECK(fg_gradients(g, &y, 1, &k, 1, NULL, &dk, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'k:0' is i64");
  fg_graph_free(g);
  g = fg_graph_new();
  k = fg_placeholder(g, "k", FG_I64, 1, d);
  x = fg_placeholder(g, "x", FG_F64, 1, d);
  fg_output dx;
  FG_CHECK(fg_gradients(g, &k, 1, &x, 1, NULL, &dx, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "ys[0]");
  FG_CHECK(fg_gradients(NULL, &k, 1, &x, 1, NULL, &dx, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A state update on the path (assign) is not differentiable: the gradient
 * stops there, giving zeros rather than an error or a crash. */
FG_TEST(grad_stops_at_state_updates, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {2};
  double init[2] = {1, 2};
  fg_tensor *t = f64_tensor(1, d, init);
  fg_output v = fg_variable(g, "v", t);
  fg_output x = fg_placeholder(g, "x", FG_F64, 1, d);
  fg_output y = fg_reduce_sum(g, fg_assign(g, v, x), NULL, 0, 0);
  fg_output dx;
  FG_REQUIRE(fg_gradients(g, &y, 1, &x, 1, NULL, &dx, st) == 0);
  FG_CHECK_STR_CONTAINS(fg_node_op(g, dx.node), "zeros_like");
  fg_tensor_free(t);
  fg_graph_free(g);
  fg_status_free(st);
}

/* loss(W1, W2) = cross_entropy(tanh(x W1) W2, labels). Hessian-vector
 * product H v = d/dW <dL/dW, v>, against central differences of the
 * gradient: (g(W + h v) - g(W - h v)) / 2h. */
FG_TEST(grad_hessian_vector_product_mlp, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {4, 3}, w1d[2] = {3, 5}, w2d[2] = {5, 2}, yd[1] = {4};
  double xv[12], w1v[15], w2v[10], v1v[15], v2v[10];
  uint64_t s = 7;
  for (int i = 0; i < 12; i++)
    xv[i] = sin(1.3 * i + 0.2);
  for (int i = 0; i < 15; i++)
    w1v[i] = 0.5 * cos(0.7 * i), v1v[i] = sin(2.1 * i + 1);
  for (int i = 0; i < 10; i++)
    w2v[i] = 0.4 * sin(0.9 * i + 0.3), v2v[i] = cos(1.7 * i);
  (void)s;
  int32_t labels[4] = {0, 1, 1, 0};
  fg_tensor *xt = f64_tensor(2, xd, xv), *vt1 = f64_tensor(2, w1d, v1v),
            *vt2 = f64_tensor(2, w2d, v2v);
  fg_tensor *yt = fg_tensor_from_data(FG_I32, 1, yd, labels, sizeof labels, st);
  fg_output w1 = fg_placeholder(g, "w1", FG_F64, 2, w1d);
  fg_output w2 = fg_placeholder(g, "w2", FG_F64, 2, w2d);
  fg_output logits =
      fg_matmul(g, fg_tanh(g, fg_matmul(g, fg_constant(g, "x", xt), w1, 0, 0)), w2, 0, 0);
  fg_output loss = fg_softmax_cross_entropy(g, logits, fg_constant(g, "labels", yt));
  fg_output ws[2] = {w1, w2}, gr[2];
  FG_REQUIRE(fg_gradients(g, &loss, 1, ws, 2, NULL, gr, st) == 0);
  fg_set_name(g, gr[0], "g1");
  fg_set_name(g, gr[1], "g2");
  fg_output dot =
      fg_add(g, fg_reduce_sum(g, fg_mul(g, gr[0], fg_constant(g, "v1", vt1)), NULL, 0, 0),
             fg_reduce_sum(g, fg_mul(g, gr[1], fg_constant(g, "v2", vt2)), NULL, 0, 0));
  fg_output hv[2];
  FG_REQUIRE(fg_gradients(g, &dot, 1, ws, 2, NULL, hv, st) == 0);
  fg_set_name(g, hv[0], "hv1");
  fg_set_name(g, hv[1], "hv2");
  fg_session *sess = fg_session_new(g, NULL, st);
  FG_REQUIRE(sess);
  const double h = 1e-5;
  double wp1[15], wp2[10], wm1[15], wm2[10];
  for (int i = 0; i < 15; i++)
    wp1[i] = w1v[i] + h * v1v[i], wm1[i] = w1v[i] - h * v1v[i];
  for (int i = 0; i < 10; i++)
    wp2[i] = w2v[i] + h * v2v[i], wm2[i] = w2v[i] - h * v2v[i];
  const double *sets[3][2] = {{w1v, w2v}, {wp1, wp2}, {wm1, wm2}};
  fg_tensor *res[3][2] = {{0}};
  for (int k = 0; k < 3; k++) {
    fg_tensor *a = f64_tensor(2, w1d, sets[k][0]), *b = f64_tensor(2, w2d, sets[k][1]);
    fg_feed feeds[2] = {{"w1", a}, {"w2", b}};
    const char *f0[2] = {"hv1", "hv2"}, *f1[2] = {"g1", "g2"};
    FG_REQUIRE(fg_session_run(sess, feeds, 2, k == 0 ? f0 : f1, 2, res[k], NULL, 0, st) == 0);
    fg_tensor_free(a);
    fg_tensor_free(b);
  }
  double worst = 0;
  for (int j = 0; j < 2; j++) {
    const double *hvp = fg_tensor_data(res[0][j]), *gp = fg_tensor_data(res[1][j]),
                 *gm = fg_tensor_data(res[2][j]);
    for (int64_t i = 0; i < fg_tensor_num_elements(res[0][j]); i++) {
      double num = (gp[i] - gm[i]) / (2 * h);
      double err = fabs(hvp[i] - num) / fmax(fmax(fabs(hvp[i]), fabs(num)), 1e-3);
      if (err > worst) worst = err;
    }
  }
  FG_CHECK(worst < 1e-6);
  if (worst >= 1e-6) fprintf(stderr, "HVP max relative error %g\n", worst);
  for (int k = 0; k < 3; k++)
    fg_tensor_free(res[k][0]), fg_tensor_free(res[k][1]);
  fg_tensor_free(xt), fg_tensor_free(yt), fg_tensor_free(vt1), fg_tensor_free(vt2);
  fg_session_free(sess);
  fg_graph_free(g);
  fg_status_free(st);
}

/* loss = sum((w - c)^2) with w, c in R^2: grad = 2 (w - c). */
static fg_graph *quadratic(fg_output *loss_out, double w0, double w1) {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {2};
  double init[2] = {w0, w1}, c[2] = {1, -2};
  fg_tensor *t = f64_tensor(1, d, init), *ct = f64_tensor(1, d, c);
  fg_output w = fg_variable(g, "w", t);
  fg_output diff = fg_sub(g, w, fg_constant(g, "c", ct));
  *loss_out = fg_set_name(g, fg_reduce_sum(g, fg_mul(g, diff, diff), NULL, 0, 0), "loss");
  fg_tensor_free(t);
  fg_tensor_free(ct);
  return g;
}

static void read_w(fg_session *s, double *w) {
  fg_tensor *t = fg_session_variable(s, "w", NULL);
  w[0] = t ? ((double *)fg_tensor_data(t))[0] : NAN;
  w[1] = t ? ((double *)fg_tensor_data(t))[1] : NAN;
  fg_tensor_free(t);
}

/* A new session on g runs the training step `steps` times, then reads w
 * into w[0..1] and is freed; 0, or -1 with st set when a step fails. */
static int train_w(fg_graph *g, fg_output step, int steps, double *w, fg_status *st) {
  fg_session *s = fg_session_new(g, NULL, st);
  if (!s) return -1;
  const char *target = fg_node_name(g, step.node);
  int rc = 0;
  for (int i = 0; i < steps && rc == 0; i++)
    rc = fg_session_run(s, NULL, 0, NULL, 0, NULL, &target, 1, st);
  read_w(s, w);
  fg_session_free(s);
  return rc;
}

FG_TEST(train_sgd_matches_hand_computed_steps, "") {
  fg_status *st = fg_status_new();
  fg_output loss;
  fg_graph *g = quadratic(&loss, 3, 0);
  fg_optimizer_config c;
  fg_optimizer_config_init(&c, FG_OPTIMIZER_SGD);
  c.learning_rate = 0.1;
  fg_output t = fg_minimize(g, loss, NULL, 0, &c, st);
  FG_REQUIRE(t.node >= 0);
  FG_CHECK(strcmp(fg_graph_metadata(g, "loss"), "loss") == 0);
  FG_CHECK(strcmp(fg_graph_metadata(g, "train_target"), fg_node_name(g, t.node)) == 0);
  double w[2];
  FG_REQUIRE(train_w(g, t, 2, w, st) == 0);
  /* w - c = [2, 2] -> each step multiplies it by (1 - 2*0.1) = 0.8:
   * after 2 steps [1.28, 1.28], w = [2.28, -0.72]. */
  FG_CHECK_NEAR(w[0], 2.28, 1e-14);
  FG_CHECK_NEAR(w[1], -0.72, 1e-14);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(train_momentum_and_nesterov_hand_computed, "") {
  for (int nesterov = 0; nesterov <= 1; nesterov++) {
    fg_status *st = fg_status_new();
    fg_output loss;
    fg_graph *g = quadratic(&loss, 3, 0);
    fg_optimizer_config c;
    fg_optimizer_config_init(&c, FG_OPTIMIZER_MOMENTUM);
    c.learning_rate = 0.1;
    c.momentum = 0.5;
    c.nesterov = nesterov;
    fg_output t = fg_minimize(g, loss, NULL, 0, &c, st);
    FG_REQUIRE(t.node >= 0);
    double w[2];
    FG_REQUIRE(train_w(g, t, 2, w, st) == 0);
    /* Coordinate 0: w = 3, c = 1. Step 1: g = 4, buf = 4,
     *   plain: w = 3 - 0.4 = 2.6; nesterov: step = 4 + 0.5*4 = 6, w = 2.4.
     * Step 2 plain: g = 3.2, buf = 2 + 3.2 = 5.2, w = 2.6 - 0.52 = 2.08.
     * Step 2 nesterov: g = 2.8, buf = 2 + 2.8 = 4.8, step = 2.8 + 2.4 = 5.2,
     *   w = 2.4 - 0.52 = 1.88. */
    FG_CHECK_NEAR(w[0], nesterov ? 1.88 : 2.08, 1e-14);
    fg_graph_free(g);
    fg_status_free(st);
  }
}

FG_TEST(train_adam_and_adamw_hand_computed, "") {
  for (int kind = FG_OPTIMIZER_ADAM; kind <= FG_OPTIMIZER_ADAMW; kind++) {
    fg_status *st = fg_status_new();
    fg_output loss;
    fg_graph *g = quadratic(&loss, 3, 0);
    fg_optimizer_config c;
    fg_optimizer_config_init(&c, (fg_optimizer_kind)kind);
    c.learning_rate = 0.1;
    fg_output t = fg_minimize(g, loss, NULL, 0, &c, st);
    FG_REQUIRE(t.node >= 0);
    double w[2];
    FG_REQUIRE(train_w(g, t, 1, w, st) == 0);
    /* Step 1 of Adam moves every coordinate by lr * g/|g| (bias-corrected
     * mhat = g, vhat = g^2), up to eps: coordinate 0 (g = 4): 3 - 0.1 = 2.9;
     * coordinate 1 (w = 0, c = -2, g = 4): -0.1. AdamW first multiplies w by
     * 1 - lr*wd = 0.999: 2.997 - 0.1 = 2.897 and 0 - 0.1 = -0.1. */
    double eps_term = 0.1 * 4 / (4 + 1e-8) - 0.1; /* ~ -2.5e-10 */
    FG_CHECK_NEAR(w[0], (kind == FG_OPTIMIZER_ADAMW ? 2.897 : 2.9) - eps_term, 1e-12);
    FG_CHECK_NEAR(w[1], -0.1 - eps_term, 1e-12);
    fg_graph_free(g);
    fg_status_free(st);
  }
}

FG_TEST(train_clip_by_global_norm, "") {
  fg_status *st = fg_status_new();
  fg_output loss;
  fg_graph *g = quadratic(&loss, 4, 2); /* grad = 2 * [3, 4] = [6, 8], norm 10 */
  fg_optimizer_config c;
  fg_optimizer_config_init(&c, FG_OPTIMIZER_SGD);
  c.learning_rate = 1.0;
  c.clip_global_norm = 5.0; /* scaled to [3, 4] */
  fg_output t = fg_minimize(g, loss, NULL, 0, &c, st);
  FG_REQUIRE(t.node >= 0);
  double w[2];
  FG_REQUIRE(train_w(g, t, 1, w, st) == 0);
  FG_CHECK_NEAR(w[0], 1.0, 1e-14);
  FG_CHECK_NEAR(w[1], -2.0, 1e-14);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(train_minimize_bad_inputs, "badinput") {
  fg_status *st = fg_status_new();
  fg_output loss;
  fg_graph *g = quadratic(&loss, 1, 1);
  fg_optimizer_config c;
  fg_optimizer_config_init(&c, FG_OPTIMIZER_SGD);
  c.learning_rate = -1;
  FG_CHECK_INT(fg_minimize(g, loss, NULL, 0, &c, st).node, -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "learning_rate");
  fg_graph_free(g);
  g = quadratic(&loss, 1, 1);
  fg_optimizer_config_init(&c, FG_OPTIMIZER_SGD);
  fg_output not_scalar = fg_graph_find_output(g, "c");
  FG_CHECK_INT(fg_minimize(g, not_scalar, NULL, 0, &c, st).node, -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "scalar");
  fg_graph_free(g);
  g = quadratic(&loss, 1, 1);
  fg_output notvar = fg_graph_find_output(g, "c");
  FG_CHECK_INT(fg_minimize(g, loss, &notvar, 1, &c, st).node, -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "not a variable");
  FG_CHECK_INT(fg_minimize(NULL, loss, NULL, 0, &c, st).node, -1);
  FG_CHECK_INT(fg_minimize(g, loss, NULL, 0, NULL, st).node, -1);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Train 3 steps, save, load, and the next loss and weights are bitwise the
 * same as continuing in the original session. */
FG_TEST(train_save_resume_is_bitwise, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {-1, 3}, wd[2] = {3, 1}, yd[2] = {-1, 1};
  double w0[3] = {0.1, -0.2, 0.3};
  fg_tensor *wt = f64_tensor(2, wd, w0);
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, xd);
  fg_output y = fg_placeholder(g, "y", FG_F64, 2, yd);
  fg_output err = fg_sub(g, fg_matmul(g, x, fg_variable(g, "w", wt), 0, 0), y);
  fg_output loss = fg_set_name(g, fg_reduce_mean(g, fg_mul(g, err, err), NULL, 0, 0), "loss");
  fg_optimizer_config c;
  fg_optimizer_config_init(&c, FG_OPTIMIZER_ADAM);
  c.learning_rate = 0.05;
  fg_output t = fg_minimize(g, loss, NULL, 0, &c, st);
  FG_REQUIRE(t.node >= 0);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  double xv[12] = {1, 2, 3, 0, 1, 0, -1, 0.5, 2, 3, -2, 1}, yv[4] = {1, 0.5, -1, 2};
  int64_t xfd[2] = {4, 3}, yfd[2] = {4, 1};
  fg_tensor *xt = f64_tensor(2, xfd, xv), *yt = f64_tensor(2, yfd, yv);
  fg_feed feeds[2] = {{"x", xt}, {"y", yt}};
  const char *target = fg_node_name(g, t.node), *lname = "loss";
  for (int i = 0; i < 3; i++)
    FG_REQUIRE(fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st) == 0);
  char path[] = "/tmp/fg_resume_XXXXXX";
  int fd = mkstemp(path);
  FG_REQUIRE(fd >= 0);
  close(fd);
  FG_REQUIRE(fg_session_save(s, path, st) == 0);
  fg_graph *g2 = fg_graph_load(path, st);
  unlink(path);
  FG_REQUIRE(g2);
  fg_session *s2 = fg_session_new(g2, NULL, st);
  FG_REQUIRE(s2);
  for (int i = 0; i < 2; i++) {
    FG_REQUIRE(fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st) == 0);
    FG_REQUIRE(fg_session_run(s2, feeds, 2, NULL, 0, NULL, &target, 1, st) == 0);
    double l1 = fetch_scalar(s, feeds, 2, lname), l2 = fetch_scalar(s2, feeds, 2, lname);
    FG_CHECK(memcmp(&l1, &l2, sizeof l1) == 0);
  }
  fg_tensor *a = fg_session_variable(s, "w", st), *b = fg_session_variable(s2, "w", st);
  FG_REQUIRE(a && b);
  FG_CHECK(memcmp(fg_tensor_data(a), fg_tensor_data(b), fg_tensor_num_bytes(a)) == 0);
  /* The original graph still holds the initial values. */
  FG_CHECK(fg_graph_find(g, "w") >= 0);
  const fg_tensor *init = NULL;
  fg_node_attr_tensor(g, fg_graph_find(g, "w"), "value", &init);
  FG_CHECK_NEAR(((const double *)fg_tensor_data(init))[0], 0.1, 0);
  fg_tensor_free(a), fg_tensor_free(b), fg_tensor_free(xt), fg_tensor_free(yt), fg_tensor_free(wt);
  fg_session_free(s2);
  fg_graph_free(g2);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}
