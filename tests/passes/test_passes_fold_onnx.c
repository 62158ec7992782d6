/* Inference folding on an imported ONNX model: Conv -> BatchNormalization
 * (inference) -> PRelu -> pools -> Gemm -> SoftmaxCrossEntropyLoss
 * (grad_cnn of tests/schema/onnx/cases_nn.py, whose expected loss is
 * PyTorch's). Imported without trainable, its weights are constants, so
 * fg_optimize folds the batch norm into the convolution; the optimized
 * model must still give PyTorch's loss, and the model without passes'. */
#include <math.h>

#include "../schema/onnx_test_util.h"
#include "test_passes_util.h"

#define NEED_ONNX()                                                                                \
  do {                                                                                             \
    if (!fg_onnx_available()) FG_SKIP("this build has no ONNX support");                           \
  } while (0)

static fg_tensor *case_file(const char *dir, const char *file) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_npy_read(path, st);
  if (!t) fprintf(stderr, "%s: %s\n", path, fg_status_message(st));
  fg_status_free(st);
  return t;
}

/* The loss of g for the case's x and lab, passes on or off. */
static fg_tensor *loss_of(fg_graph *g, const fg_tensor *x, const fg_tensor *lab, int no_passes) {
  fg_feed feeds[2] = {{"x", x}, {"lab", lab}};
  return run_feeds_on(g, NULL, 1, no_passes, feeds, 2, fg_node_name(g, fg_graph_output(g, 0).node));
}

FG_TEST(passes_fold_onnx_conv_bn, "onnx") {
  NEED_ONNX();
  const char *dir = onnx_cases("cases_nn.py");
  FG_REQUIRE(dir);
  char path[1024];
  snprintf(path, sizeof path, "%s/grad_cnn.onnx", dir);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_onnx_load(path, NULL, st);
  FG_REQUIRE(g);
  FG_CHECK_INT(count_op(g, "batch_norm"), 1);
  fg_pass_report *r = NULL;
  fg_graph *o = fg_optimize(g, NULL, NULL, 0, &r, st);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "batch_norm"), 0);
  FG_CHECK_INT(count_op(o, "conv2d"), 1);
  /* The batch norm, the conv and the scale, mean and variance go. */
  FG_CHECK(fg_graph_num_nodes(o) <= fg_graph_num_nodes(g) - 5);
  int folded = 0;
  for (int i = 0; i < fg_pass_report_size(r); i++)
    folded += strcmp(fg_pass_report_change(r, i)->rule ? fg_pass_report_change(r, i)->rule : "",
                     "batch_norm(conv2d) into conv2d") == 0;
  FG_CHECK_INT(folded, 1);
  fg_tensor *x = case_file(dir, "grad_cnn.in.x.npy"), *lab = case_file(dir, "grad_cnn.in.lab.npy");
  fg_tensor *want = case_file(dir, "grad_cnn.out.0.npy");
  FG_REQUIRE(x && lab && want);
  fg_tensor *got = loss_of(o, x, lab, 0), *off = loss_of(g, x, lab, 1);
  /* A session on the imported graph folds too (on constants of its own). */
  fg_tensor *sess = loss_of(g, x, lab, 0);
  FG_REQUIRE(got && off && sess);
  double w = onnx_elem(want, 0), a = onnx_elem(got, 0), b = onnx_elem(off, 0);
  double c = onnx_elem(sess, 0);
  FG_CHECK(fabs(a - w) <= 1e-5 * fabs(w) + 1e-6);
  FG_CHECK(fabs(a - b) <= 1e-5 * fabs(b));
  FG_CHECK(fabs(c - w) <= 1e-5 * fabs(w) + 1e-6);
  FG_CHECK(fabs(c - b) <= 1e-5 * fabs(b));
  fprintf(stderr, "loss: torch %.9g, folded %.9g, session %.9g, passes off %.9g\n", w, a, c, b);
  fg_tensor_free(sess);
  fg_tensor_free(got);
  fg_tensor_free(off);
  fg_tensor_free(x);
  fg_tensor_free(lab);
  fg_tensor_free(want);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
  fg_status_free(st);
}

/* The output of a one-thread session on g (passes on or off) for x fed
 * as "x", and the number of batch_norm steps its plan runs (*n_bn). */
static fg_tensor *session_output(fg_graph *g, fg_tensor *x, int no_passes, int *n_bn) {
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, no_passes, st);
  fg_feed feed = {"x", x};
  const char *fetch = fg_node_name(g, fg_graph_output(g, 0).node);
  fg_tensor *got = NULL;
  fg_plan_info *pi = s ? fg_session_plan_info(s, &feed, 1, &fetch, 1, NULL, 0, st) : NULL;
  *n_bn = -1;
  if (pi && fg_session_run(s, &feed, 1, &fetch, 1, &got, NULL, 0, st) == 0) {
    *n_bn = 0;
    for (int si = 0; si < pi->n_steps; si++)
      *n_bn += strcmp(pi->step_ops[si], "batch_norm") == 0;
  }
  if (!got) fprintf(stderr, "run: %s\n", fg_status_message(st));
  fg_plan_info_free(pi);
  fg_session_free(s);
  fg_status_free(st);
  return got;
}

/* Largest |got - want| within 1e-5 of the largest |want| (10 values). */
static int close_to_torch(const fg_tensor *got, const fg_tensor *want, const char *what) {
  double md = 0, mx = 0;
  for (int i = 0; i < 10; i++) {
    md = fmax(md, fabs(onnx_elem(got, i) - onnx_elem(want, i)));
    mx = fmax(mx, fabs(onnx_elem(want, i)));
  }
  fprintf(stderr, "%s: largest difference to PyTorch %.3g of %.3g\n", what, md, mx);
  return md <= 1e-5 * mx;
}

/* A conv -> batch_norm -> relu net exported by PyTorch with its batch
 * norms kept (tests/passes/fold_torch_bn.py): both fold, in fg_optimize
 * and in a session on the imported graph, and both give PyTorch's
 * output. */
FG_TEST(passes_fold_torch_conv_bn, "onnx") {
  NEED_ONNX();
  char dir[600], path[700];
  snprintf(dir, sizeof dir, "%s/fold_torch_bn.%ld", FG_BUILD_DIR, (long)getpid());
  int rc = fgt_python_cached(dir, FG_SOURCE_DIR "/tests/passes/fold_torch_bn.py", NULL);
  FG_CHECK_PYTHON(rc);
  if (rc != 0) return;
  fg_status *st = fg_status_new();
  snprintf(path, sizeof path, "%s/conv_bn.onnx", dir);
  fg_graph *g = fg_onnx_load(path, NULL, st);
  FG_REQUIRE(g);
  FG_CHECK_INT(count_op(g, "batch_norm"), 2);
  fg_pass_options po = {0, NO_CONV_EPILOGUE};
  fg_graph *o = fg_optimize(g, &po, NULL, 0, NULL, st);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "batch_norm"), 0);
  FG_CHECK_INT(count_op(o, "conv2d"), 2);
  /* Each fold removes at least the conv, the scale, mean and variance. */
  FG_CHECK(fg_graph_num_nodes(o) <= fg_graph_num_nodes(g) - 8);
  fg_tensor *x = case_file(dir, "x.npy"), *want = case_file(dir, "y.npy");
  FG_REQUIRE(x && want);
  fg_status *st2 = fg_status_new();
  fg_session *s = passes_session(o, 1, 0, st2);
  FG_REQUIRE(s);
  fg_feed feed = {"x", x};
  const char *fetch = fg_node_name(o, fg_graph_output(o, 0).node);
  fg_tensor *got = NULL;
  FG_REQUIRE(fg_session_run(s, &feed, 1, &fetch, 1, &got, NULL, 0, st2) == 0);
  FG_CHECK_INT(fg_tensor_num_elements(got), 10);
  FG_CHECK(close_to_torch(got, want, "fg_optimize"));
  int n_on = -1, n_off = -1;
  fg_tensor *on = session_output(g, x, 0, &n_on), *off = session_output(g, x, 1, &n_off);
  FG_REQUIRE(on && off);
  FG_CHECK_INT(n_on, 0);
  FG_CHECK_INT(n_off, 2);
  FG_CHECK(close_to_torch(on, want, "session"));
  FG_CHECK(close_to_torch(off, want, "session without passes"));
  fg_tensor_free(on);
  fg_tensor_free(off);
  fg_tensor_free(got);
  fg_session_free(s);
  fg_tensor_free(x);
  fg_tensor_free(want);
  fg_graph_free(o);
  fg_graph_free(g);
  fg_status_free(st2);
  fg_status_free(st);
  fgt_rmtree(dir);
}
