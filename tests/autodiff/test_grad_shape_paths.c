/* How gradients of shape ops behave on whole graphs: the unknown batch
 * dimension, x with no path from y, non-differentiable ops on the path,
 * unsupported cases, several ys and explicit dys. Reference values are
 * computed in plain C in the test (or by hand in the comments), never by
 * the graph. */
#include <flowgraph/autodiff.h>
#include <flowgraph/flowgraph.h>

#include "fgtest.h"

static fg_tensor *tensor_f64(int rank, const int64_t *dims, const double *data) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++)
    n *= dims[i];
  return fg_tensor_from_data(FG_F64, rank, dims, data, (size_t)n * sizeof(double), NULL);
}

/* Runs one fetch with up to two feeds; NULL on error (printed). */
static fg_tensor *run1(fg_session *s, const fg_feed *feeds, int n_feeds, const char *fetch) {
  fg_status *st = fg_status_new();
  fg_tensor *out = NULL;
  if (fg_session_run(s, feeds, n_feeds, &fetch, 1, &out, NULL, 0, st) != 0)
    fprintf(stderr, "run %s: %s\n", fetch, fg_status_message(st));
  fg_status_free(st);
  return out;
}

/* Deterministic values in [-1, 1). */
static double val(int k) { return (double)((k * 37 + 11) % 23) / 11.5 - 1.0; }

/* ---- unknown batch ------------------------------------------------------- */

/* dW of L = sce(x @ W, labels) for x [n,4], W [4,3], by hand in C:
 * p = softmax(x W) per row, dlogits = (p - onehot) / n, dW = x^T dlogits. */
static void sce_dw_reference(int n, const double *x, const double *w, const int64_t *labels,
                             double *dw) {
  for (int k = 0; k < 12; k++)
    dw[k] = 0;
  for (int r = 0; r < n; r++) {
    double z[3], m = -1e300, s = 0;
    for (int j = 0; j < 3; j++) {
      z[j] = 0;
      for (int i = 0; i < 4; i++)
        z[j] += x[r * 4 + i] * w[i * 3 + j];
      m = z[j] > m ? z[j] : m;
    }
    for (int j = 0; j < 3; j++)
      s += exp(z[j] - m);
    for (int j = 0; j < 3; j++) {
      double d = (exp(z[j] - m) / s - (labels[r] == j)) / n;
      for (int i = 0; i < 4; i++)
        dw[i * 3 + j] += x[r * 4 + i] * d;
    }
  }
}

FG_TEST(grad_unknown_batch_matmul_softmax_cross_entropy, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  double w[12];
  for (int k = 0; k < 12; k++)
    w[k] = val(k + 100);
  int64_t xd[2] = {-1, 4}, ld[1] = {-1}, wd[2] = {4, 3};
  fg_tensor *wt = tensor_f64(2, wd, w);
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, xd);
  fg_output labels = fg_placeholder(g, "labels", FG_I64, 1, ld);
  fg_output wv = fg_variable(g, "W", wt);
  fg_output loss = fg_softmax_cross_entropy(g, fg_matmul(g, x, wv, 0, 0), labels);
  fg_output dw;
  FG_REQUIRE(fg_gradients(g, &loss, 1, &wv, 1, NULL, &dw, st) == 0);
  fg_set_name(g, fg_identity(g, dw), "dW");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  const int batches[2] = {3, 7};
  for (int b = 0; b < 2; b++) {
    int n = batches[b];
    double xv[28], want[12];
    int64_t lv[7];
    for (int k = 0; k < n * 4; k++)
      xv[k] = 2 * val(k + 13 * n);
    for (int r = 0; r < n; r++)
      lv[r] = (r * 2 + n) % 3;
    sce_dw_reference(n, xv, w, lv, want);
    int64_t xs[2] = {n, 4}, ls[1] = {n};
    fg_tensor *xt = tensor_f64(2, xs, xv);
    fg_tensor *lt = fg_tensor_from_data(FG_I64, 1, ls, lv, (size_t)n * sizeof(int64_t), NULL);
    fg_feed feeds[2] = {{"x", xt}, {"labels", lt}};
    fg_tensor *got = run1(s, feeds, 2, "dW");
    FG_CHECK(got != NULL);
    if (got) {
      FG_CHECK_INT(fg_tensor_rank(got), 2);
      FG_CHECK_INT(fg_tensor_dim(got, 0), 4);
      FG_CHECK_INT(fg_tensor_dim(got, 1), 3);
      const double *gd = fg_tensor_data(got);
      for (int k = 0; k < 12; k++)
        FG_CHECK_NEAR(gd[k], want[k], 1e-12);
    }
    fg_tensor_free(got);
    fg_tensor_free(xt);
    fg_tensor_free(lt);
  }
  fg_session_free(s);
  fg_tensor_free(wt);
  fg_graph_free(g);
  fg_status_free(st);
}

/* A 2-D weight broadcast over an unknown batch of matrices: the weight's
 * gradient is summed over the batch by a sum_to that only knows the batch
 * at run time. L = sum(x @ W), x [?,2,3], W [3,2]: dW[k][j] = sum over b,i
 * of x[b,i,k]; dx[b,i,k] = sum over j of W[k][j]. Also concat along the
 * feature axis and a reshape with the batch unknown. */
FG_TEST(grad_unknown_batch_broadcast_concat_reshape, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  double w[6] = {1, -2, 0.5, 3, -1, 0.25};
  int64_t xd[3] = {-1, 2, 3}, wd[2] = {3, 2};
  fg_tensor *wt = tensor_f64(2, wd, w);
  fg_output x = fg_placeholder(g, "x", FG_F64, 3, xd);
  fg_output wv = fg_variable(g, "W", wt);
  fg_output y = fg_matmul(g, x, wv, 0, 0);                  /* [?,2,2] */
  fg_output cat = fg_concat(g, (fg_output[]){y, x}, 2, -1); /* [?,2,5] */
  fg_output flat = fg_reshape(g, cat, 2, (int64_t[]){-1, 10});
  /* L = sum(flat * flat_weights) would need a known batch; sum all. */
  fg_output loss = fg_reduce_sum(g, flat, NULL, 0, 0);
  fg_output xs[2] = {wv, x}, dxs[2];
  FG_REQUIRE(fg_gradients(g, &loss, 1, xs, 2, NULL, dxs, st) == 0);
  fg_set_name(g, fg_identity(g, dxs[0]), "dW");
  fg_set_name(g, fg_identity(g, dxs[1]), "dx");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  for (int n = 1; n <= 5; n += 4) {
    double xv[30];
    for (int k = 0; k < n * 6; k++)
      xv[k] = val(k + n);
    int64_t xs_[3] = {n, 2, 3};
    fg_tensor *xt = tensor_f64(3, xs_, xv);
    fg_feed feed = {"x", xt};
    fg_tensor *dwt = run1(s, &feed, 1, "dW"), *dxt = run1(s, &feed, 1, "dx");
    FG_CHECK(dwt && dxt);
    if (dwt && dxt) {
      const double *dw = fg_tensor_data(dwt), *dx = fg_tensor_data(dxt);
      for (int k = 0; k < 3; k++) {
        double colsum = 0;
        for (int b = 0; b < n * 2; b++)
          colsum += xv[b * 3 + k];
        for (int j = 0; j < 2; j++)
          FG_CHECK_NEAR(dw[k * 2 + j], colsum, 1e-12);
      }
      FG_CHECK_INT(fg_tensor_dim(dxt, 0), n);
      /* Through y: sum_j W[k][j]; through the concat: 1. */
      for (int k = 0; k < n * 6; k++)
        FG_CHECK_NEAR(dx[k], w[(k % 3) * 2] + w[(k % 3) * 2 + 1] + 1.0, 1e-12);
    }
    fg_tensor_free(dwt);
    fg_tensor_free(dxt);
    fg_tensor_free(xt);
  }
  fg_session_free(s);
  fg_tensor_free(wt);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Concat along the unknown batch axis: the last input may have an unknown
 * size (its slice runs to the end), and the known-size first input slices
 * from 0. y = concat(a [2,2], x [?,2]) along 0; L = sum(y * y):
 * da = 2a, dx = 2x. */
FG_TEST(grad_concat_unknown_last_input, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t ad[2] = {2, 2}, xd[2] = {-1, 2};
  fg_output a = fg_placeholder(g, "a", FG_F64, 2, ad);
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, xd);
  fg_output y = fg_concat(g, (fg_output[]){a, x}, 2, 0);
  fg_output loss = fg_reduce_sum(g, fg_mul(g, y, y), NULL, 0, 0);
  fg_output xs[2] = {a, x}, dxs[2];
  FG_REQUIRE(fg_gradients(g, &loss, 1, xs, 2, NULL, dxs, st) == 0);
  fg_set_name(g, fg_identity(g, dxs[0]), "da");
  fg_set_name(g, fg_identity(g, dxs[1]), "dx");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  double av[4] = {1, 2, 3, 4}, xv[6] = {-1, 0.5, 2, -3, 7, 0};
  int64_t xs3[2] = {3, 2};
  fg_tensor *at = tensor_f64(2, ad, av), *xt = tensor_f64(2, xs3, xv);
  fg_feed feeds[2] = {{"a", at}, {"x", xt}};
  fg_tensor *da = run1(s, feeds, 2, "da"), *dx = run1(s, feeds, 2, "dx");
  FG_CHECK(da && dx);
  if (da && dx) {
    FG_CHECK_INT(fg_tensor_dim(dx, 0), 3);
    for (int k = 0; k < 4; k++)
      FG_CHECK_NEAR(((double *)fg_tensor_data(da))[k], 2 * av[k], 1e-12);
    for (int k = 0; k < 6; k++)
      FG_CHECK_NEAR(((double *)fg_tensor_data(dx))[k], 2 * xv[k], 1e-12);
  }
  fg_tensor_free(da);
  fg_tensor_free(dx);
  fg_tensor_free(at);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* An input after an unknown-size input along the axis has no static slice:
 * FG_UNIMPLEMENTED naming the concat node. */
FG_TEST(grad_concat_unknown_offset_unimplemented, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {-1, 2}, ad[2] = {2, 2};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, xd);
  fg_output a = fg_placeholder(g, "a", FG_F64, 2, ad);
  fg_output y = fg_set_name(g, fg_concat(g, (fg_output[]){x, a}, 2, 0), "cat");
  fg_output loss = fg_reduce_sum(g, y, NULL, 0, 0);
  fg_output dx;
  FG_CHECK(fg_gradients(g, &loss, 1, &a, 1, NULL, &dx, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'cat' (concat)");
  FG_CHECK_INT(dx.node, -1);
  fg_graph_free(g);
  fg_status_free(st);
}

/* softmax_cross_entropy's one_hot needs the class count at build time. A
 * reshape of an unknown-batch input into [2, -1] leaves C unknown. */
FG_TEST(grad_softmax_cross_entropy_unknown_classes_unimplemented, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {-1, 4}, ld[1] = {2};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, xd);
  fg_output labels = fg_placeholder(g, "labels", FG_I32, 1, ld);
  fg_output logits = fg_reshape(g, x, 2, (int64_t[]){2, -1});
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, labels), "xent");
  fg_output dx;
  FG_CHECK(fg_gradients(g, &loss, 1, &x, 1, NULL, &dx, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'xent' (softmax_cross_entropy)");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "class count");
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- connectivity -------------------------------------------------------- */

/* y = sum(softmax(a)); b is not on any path to y. */
FG_TEST(grad_unconnected_zeros_or_none, "badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3};
  fg_output a = fg_placeholder(g, "a", FG_F64, 2, d);
  fg_output b = fg_placeholder(g, "b", FG_F64, 2, d);
  fg_output y = fg_reduce_sum(g, fg_softmax(g, a, 1), NULL, 0, 0);
  fg_output db;
  FG_REQUIRE(fg_gradients(g, &y, 1, &b, 1, NULL, &db, st) == 0);
  FG_REQUIRE(db.node >= 0);
  fg_set_name(g, fg_identity(g, db), "db");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  double bv[6] = {1, 2, 3, 4, 5, 6};
  fg_tensor *bt = tensor_f64(2, d, bv);
  fg_feed feed = {"b", bt};
  fg_tensor *got = run1(s, &feed, 1, "db");
  FG_CHECK(got != NULL);
  if (got) {
    FG_CHECK_INT(fg_tensor_num_elements(got), 6);
    for (int k = 0; k < 6; k++)
      FG_CHECK_NEAR(((double *)fg_tensor_data(got))[k], 0.0, 0);
  }
  fg_tensor_free(got);
  fg_tensor_free(bt);
  fg_session_free(s);

  fg_gradients_options opts;
  fg_gradients_options_init(&opts);
  opts.zeros_for_unconnected = 0;
  fg_output xs[2] = {a, b}, dxs[2];
  FG_REQUIRE(fg_gradients_ex(g, &y, 1, xs, 2, NULL, dxs, &opts, st) == 0);
  FG_CHECK(dxs[0].node >= 0);
  FG_CHECK_INT(dxs[1].node, -1);
  fg_graph_free(g);
  fg_status_free(st);
}

/* argmax and one_hot stop the gradient. y1 = sum(one_hot(argmax(x))) gets
 * zeros; y2 = sum(x * one_hot(argmax(x, 1), 3)) gets exactly the one-hot
 * mask (the argmax path adds nothing). x rows: argmax 2, 0. */
FG_TEST(grad_argmax_one_hot_stop_gradient, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, d);
  fg_output mask = fg_one_hot(g, fg_argmax(g, x, 1), 3, FG_F64);
  fg_output y1 = fg_reduce_sum(g, mask, NULL, 0, 0);
  fg_output y2 = fg_reduce_sum(g, fg_mul(g, x, mask), NULL, 0, 0);
  fg_output d1, d2;
  FG_REQUIRE(fg_gradients(g, &y1, 1, &x, 1, NULL, &d1, st) == 0);
  FG_REQUIRE(fg_gradients(g, &y2, 1, &x, 1, NULL, &d2, st) == 0);
  fg_set_name(g, fg_identity(g, d1), "d1");
  fg_set_name(g, fg_identity(g, d2), "d2");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  double xv[6] = {0.1, -2, 3, 5, 4, -1};
  fg_tensor *xt = tensor_f64(2, d, xv);
  fg_feed feed = {"x", xt};
  fg_tensor *g1 = run1(s, &feed, 1, "d1"), *g2 = run1(s, &feed, 1, "d2");
  FG_CHECK(g1 && g2);
  if (g1 && g2) {
    double want2[6] = {0, 0, 1, 1, 0, 0};
    for (int k = 0; k < 6; k++) {
      FG_CHECK_NEAR(((double *)fg_tensor_data(g1))[k], 0.0, 0);
      FG_CHECK_NEAR(((double *)fg_tensor_data(g2))[k], want2[k], 0);
    }
  }
  fg_tensor_free(g1);
  fg_tensor_free(g2);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* ---- several ys, explicit dys --------------------------------------------- */

/* y1 = sum(slice(x)^2) over rows 1..2, y2 = sum(transpose(x) * 3):
 * dx = 2x on rows 1..2, 0 on row 0, plus 3 everywhere. */
FG_TEST(grad_two_ys_summed, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {3, 2};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, d);
  fg_output sl = fg_slice(g, x, 2, (int64_t[]){1, 0}, (int64_t[]){-1, -1});
  fg_output ys[2] = {
      fg_reduce_sum(g, fg_mul(g, sl, sl), NULL, 0, 0),
      fg_reduce_sum(g, fg_mul(g, fg_transpose(g, x, 2, (int64_t[]){1, 0}), fg_scalar(g, FG_F64, 3)),
                    NULL, 0, 0)};
  fg_output dx;
  FG_REQUIRE(fg_gradients(g, ys, 2, &x, 1, NULL, &dx, st) == 0);
  fg_set_name(g, fg_identity(g, dx), "dx");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  double xv[6] = {1, 2, 3, 4, 5, 6};
  fg_tensor *xt = tensor_f64(2, d, xv);
  fg_feed feed = {"x", xt};
  fg_tensor *got = run1(s, &feed, 1, "dx");
  FG_CHECK(got != NULL);
  if (got) {
    double want[6] = {3, 3, 9, 11, 13, 15};
    for (int k = 0; k < 6; k++)
      FG_CHECK_NEAR(((double *)fg_tensor_data(got))[k], want[k], 1e-12);
  }
  fg_tensor_free(got);
  fg_tensor_free(xt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* y = gather(p, [2, 0, 2]) with p [3,2]; dy given = [[1,2],[3,4],[5,6]]:
 * dp row 0 = dy row 1 = [3,4]; row 1 = 0; row 2 = dy rows 0 + 2 = [6,8]. */
FG_TEST(grad_explicit_dy, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t pd[2] = {3, 2}, id[1] = {3};
  int32_t idx[3] = {2, 0, 2};
  double dyv[6] = {1, 2, 3, 4, 5, 6};
  fg_tensor *it = fg_tensor_from_data(FG_I32, 1, id, idx, sizeof idx, NULL);
  fg_tensor *dyt = tensor_f64(2, pd, dyv);
  fg_output p = fg_placeholder(g, "p", FG_F64, 2, pd);
  fg_output y = fg_gather(g, p, fg_constant(g, "idx", it));
  fg_output dy = fg_constant(g, "dy", dyt);
  fg_output dp;
  FG_REQUIRE(fg_gradients(g, &y, 1, &p, 1, &dy, &dp, st) == 0);
  fg_set_name(g, fg_identity(g, dp), "dp");
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  double pv[6] = {0};
  fg_tensor *pt = tensor_f64(2, pd, pv);
  fg_feed feed = {"p", pt};
  fg_tensor *got = run1(s, &feed, 1, "dp");
  FG_CHECK(got != NULL);
  if (got) {
    double want[6] = {3, 4, 0, 0, 6, 8};
    for (int k = 0; k < 6; k++)
      FG_CHECK_NEAR(((double *)fg_tensor_data(got))[k], want[k], 1e-12);
  }
  fg_tensor_free(got);
  fg_tensor_free(pt);
  fg_tensor_free(it);
  fg_tensor_free(dyt);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Backward nodes carry the "gradients/" prefix. */
FG_TEST(grad_shape_nodes_scoped, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3};
  fg_output x = fg_placeholder(g, "x", FG_F64, 2, d);
  fg_output y =
      fg_reduce_sum(g, fg_softmax(g, fg_transpose(g, x, 2, (int64_t[]){1, 0}), 0), NULL, 0, 0);
  int before = fg_graph_num_nodes(g);
  fg_output dx;
  FG_REQUIRE(fg_gradients(g, &y, 1, &x, 1, NULL, &dx, st) == 0);
  FG_CHECK(fg_graph_num_nodes(g) > before);
  for (int i = before; i < fg_graph_num_nodes(g); i++)
    FG_CHECK_STR_CONTAINS(fg_node_name(g, i), "gradients/");
  fg_graph_free(g);
  fg_status_free(st);
}
