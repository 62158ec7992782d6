/* fg_session_options.check_numerics: after every node its
 * floating-point outputs are checked for NaN and Inf, and the first node in
 * plan order that produced one fails the run with FG_INVALID_ARGUMENT naming
 * it, its op and the counts. A feed holding NaN or Inf is named as the
 * source. Expected counts are worked out by hand in each case (IEEE 754:
 * log(-1) = NaN, log(0) = -Inf, 0/0 = NaN, 1/0 = Inf, expf(89) > FLT_MAX). */
#include <flowgraph/flowgraph.h>
#include <float.h>

#include "fgtest.h"

static fg_tensor *f32(int n, const float *v) {
  int64_t d[1] = {n};
  return fg_tensor_from_data(FG_F32, 1, d, v, (size_t)n * sizeof(float), NULL);
}

static fg_session *session(fg_graph *g, int check, int threads) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.check_numerics = check;
  o.num_threads = threads;
  return fg_session_new(g, &o, NULL);
}

/* Runs fetch "name" with feed x (may be NULL); returns the status code and
 * copies the message. */
static int run1(fg_session *s, const fg_tensor *x, const char *name, fg_tensor **out, char *msg,
                size_t msg_size) {
  fg_status *st = fg_status_new();
  fg_feed feed = {"x", x};
  *out = NULL;
  fg_session_run(s, &feed, x ? 1 : 0, &name, 1, out, NULL, 0, st);
  int code = fg_status_code(st);
  snprintf(msg, msg_size, "%s", fg_status_message(st));
  fg_status_free(st);
  return code;
}

FG_TEST(badinput_M4_log_of_negative_and_zero, "badinput") {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_output lg = fg_set_name(g, fg_log(g, x), "lg");
  fg_set_name(g, fg_mul(g, lg, lg), "sq"); /* propagates, must not be named */
  fg_tensor *xv = f32(4, (const float[]){1, -1, 0, -3});
  char msg[1024];
  fg_tensor *out;
  fg_session *on = session(g, 1, 1);
  FG_REQUIRE(on);
  FG_CHECK_INT(run1(on, xv, "sq", &out, msg, sizeof msg), FG_INVALID_ARGUMENT);
  FG_CHECK(out == NULL);
  /* log: 0, NaN, -Inf, NaN. */
  FG_CHECK_STR_CONTAINS(msg, "node 'lg' (log): produced 2 NaN and 1 Inf in output 0");
  FG_CHECK_STR_CONTAINS(msg, "check_numerics");
  /* Off: the same run succeeds and returns the non-finite values. */
  fg_session *off = session(g, 0, 1);
  FG_REQUIRE(off);
  FG_CHECK_INT(run1(off, xv, "sq", &out, msg, sizeof msg), FG_OK);
  FG_REQUIRE(out);
  const float *v = fg_tensor_data(out);
  FG_CHECK(v[0] == 0.0f && isnan(v[1]) && isinf(v[2]) && v[2] > 0 && isnan(v[3]));
  fg_tensor_free(out);
  fg_session_free(on);
  fg_session_free(off);
  fg_tensor_free(xv);
  fg_graph_free(g);
}

FG_TEST(badinput_M4_zero_over_zero, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_tensor *a = f32(3, (const float[]){0, 1, 0});
  fg_tensor *b = f32(3, (const float[]){0, 0, 2});
  fg_output q = fg_set_name(g, fg_div(g, fg_constant(g, "a", a), fg_constant(g, "b", b)), "q");
  fg_set_name(g, fg_add(g, q, q), "z");
  char msg[1024];
  fg_tensor *out;
  fg_session *s = session(g, 1, 2);
  FG_REQUIRE(s);
  /* 0/0 = NaN, 1/0 = Inf, 0/2 = 0. */
  FG_CHECK_INT(run1(s, NULL, "z", &out, msg, sizeof msg), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(msg, "node 'q' (div): produced 1 NaN and 1 Inf in output 0");
  /* The error repeats on the cached plan: the check is per run. */
  FG_CHECK_INT(run1(s, NULL, "z", &out, msg, sizeof msg), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(msg, "node 'q' (div)");
  fg_session_free(s);
  fg_tensor_free(a);
  fg_tensor_free(b);
  fg_graph_free(g);
}

FG_TEST(badinput_M4_exp_overflow_f32_not_f64, "badinput") {
  /* expf(88) = 1.65e38 < FLT_MAX = 3.40e38 < expf(89) = 4.49e38; in f64
   * all three are finite. */
  FG_CHECK(exp(88.0) < FLT_MAX && exp(89.0) > FLT_MAX);
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_set_name(g, fg_exp(g, x), "e");
  fg_output x64 = fg_cast(g, x, FG_F64);
  fg_set_name(g, fg_exp(g, x64), "e64");
  fg_tensor *xv = f32(3, (const float[]){88, 89, 100});
  char msg[1024];
  fg_tensor *out;
  fg_session *s = session(g, 1, 1);
  FG_REQUIRE(s);
  FG_CHECK_INT(run1(s, xv, "e", &out, msg, sizeof msg), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(msg, "node 'e' (exp): produced 0 NaN and 2 Inf in output 0");
  FG_CHECK_INT(run1(s, xv, "e64", &out, msg, sizeof msg), FG_OK);
  FG_REQUIRE(out);
  FG_CHECK_NEAR(((const double *)fg_tensor_data(out))[2], exp(100.0), 1e-12);
  fg_tensor_free(out);
  fg_session_free(s);
  fg_tensor_free(xv);
  fg_graph_free(g);
}

FG_TEST(badinput_M4_feed_with_nan_is_named, "badinput") {
  /* Decision (documented in session.h): a fed tensor holding NaN/Inf is the
   * source; the nodes it flows through did not produce it. */
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_set_name(g, fg_tanh(g, fg_identity(g, x)), "t");
  fg_tensor *xv = f32(3, (const float[]){1, INFINITY, NAN});
  char msg[1024];
  fg_tensor *out;
  fg_session *s = session(g, 1, 1);
  FG_REQUIRE(s);
  FG_CHECK_INT(run1(s, xv, "t", &out, msg, sizeof msg), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(msg, "feed 'x' (placeholder): holds 1 NaN and 1 Inf");
  /* Off: tanh(Inf) = 1 and NaN passes through. */
  fg_session *off = session(g, 0, 1);
  FG_CHECK_INT(run1(off, xv, "t", &out, msg, sizeof msg), FG_OK);
  FG_REQUIRE(out);
  const float *v = fg_tensor_data(out);
  FG_CHECK(v[1] == 1.0f && isnan(v[2]));
  FG_CHECK_NEAR(v[0], tanh(1.0), 1e-6);
  fg_tensor_free(out);
  fg_session_free(off);
  fg_session_free(s);
  fg_tensor_free(xv);
  fg_graph_free(g);
}

FG_TEST(badinput_M4_integer_outputs_not_checked, "badinput") {
  /* Only f32/f64 outputs can hold NaN; an argmax over finite data passes. */
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_set_name(g, fg_argmax(g, x, 0), "am");
  fg_tensor *xv = f32(3, (const float[]){1, 5, 2});
  char msg[1024];
  fg_tensor *out;
  fg_session *s = session(g, 1, 1);
  FG_CHECK_INT(run1(s, xv, "am", &out, msg, sizeof msg), FG_OK);
  FG_REQUIRE(out);
  FG_CHECK_INT(((const int64_t *)fg_tensor_data(out))[0], 1);
  fg_tensor_free(out);
  fg_session_free(s);
  fg_tensor_free(xv);
  fg_graph_free(g);
}

/* Two independent branches both produce NaN; branch A (earlier in plan
 * order) is slow (a 256^3 matmul first), branch B is instant. Run as a DAG
 * on 4 threads, B usually fails first in time, but A is always the node
 * named, as on one thread. */
FG_TEST(badinput_M4_parallel_names_earliest_step, "badinput") {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {256, 256};
  fg_output ca = fg_fill(g, FG_F32, 2, d, -1.0);
  fg_output m = fg_matmul(g, ca, ca, 0, 0); /* every entry 256 */
  fg_output bad_a = fg_set_name(g, fg_log(g, fg_neg(g, m)), "bad_a");
  fg_output cb = fg_fill(g, FG_F32, 2, d, -4.0);
  fg_output bad_b = fg_set_name(g, fg_sqrt(g, cb), "bad_b");
  fg_set_name(g, fg_add(g, bad_a, bad_b), "sum");
  for (int threads = 1; threads <= 4; threads += 3) {
    fg_session *s = session(g, 1, threads);
    FG_REQUIRE(s);
    for (int rep = 0; rep < 20; rep++) {
      char msg[1024];
      fg_tensor *out;
      FG_CHECK_INT(run1(s, NULL, "sum", &out, msg, sizeof msg), FG_INVALID_ARGUMENT);
      FG_CHECK_STR_CONTAINS(msg, "node 'bad_a' (log): produced 65536 NaN and 0 Inf in output 0");
    }
    fg_session_free(s);
  }
  fg_graph_free(g);
}

FG_TEST(check_numerics_off_and_on_give_same_bits, "") {
  /* Finite everywhere: the check changes nothing, on any thread count. */
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {64, 64};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  fg_output h = fg_tanh(g, fg_matmul(g, x, x, 0, 1));
  fg_set_name(g, fg_softmax(g, fg_matmul(g, h, x, 0, 0), 1), "y");
  fg_tensor *xv = fg_tensor_new(FG_F32, 2, d, NULL);
  float *xd = fg_tensor_data(xv);
  for (int i = 0; i < 64 * 64; i++)
    xd[i] = (float)((i * 37 % 101) - 50) / 50.0f;
  fg_tensor *ref = NULL;
  for (int threads = 1; threads <= 4; threads++)
    for (int check = 0; check <= 1; check++) {
      fg_session *s = session(g, check, threads);
      FG_REQUIRE(s);
      char msg[1024];
      fg_tensor *out;
      FG_CHECK_INT(run1(s, xv, "y", &out, msg, sizeof msg), FG_OK);
      FG_REQUIRE(out);
      if (!ref)
        ref = out;
      else {
        FG_CHECK(memcmp(fg_tensor_data(ref), fg_tensor_data(out), 64 * 64 * sizeof(float)) == 0);
        fg_tensor_free(out);
      }
      fg_session_free(s);
    }
  /* Row sums of a softmax are 1. */
  const float *r = fg_tensor_data(ref);
  double sum = 0;
  for (int j = 0; j < 64; j++)
    sum += r[j];
  FG_CHECK_NEAR(sum, 1.0, 1e-5);
  fg_tensor_free(ref);
  fg_tensor_free(xv);
  fg_graph_free(g);
}

/* SGD on loss = mean((w x)^2), x = [1, 2], w = 1, lr = 1e20:
 * step 1: loss = (1 + 4) / 2 = 2.5, dloss/dw = mean(2 w x^2) = 5, so
 *         w = 1 - 5e20 (finite in f32);
 * step 2: (w x)^2 = 2.5e41 and 1e42 overflow f32: the square is the first
 *         node to produce Inf, and the run fails there. */
FG_TEST(badinput_M4_diverging_training_is_caught, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_tensor *w0 = f32(1, (const float[]){1});
  fg_tensor *xv = f32(2, (const float[]){1, 2});
  fg_output w = fg_variable(g, "w", w0);
  fg_output pred = fg_set_name(g, fg_mul(g, w, fg_constant(g, "xc", xv)), "pred");
  fg_output sq = fg_set_name(g, fg_mul(g, pred, pred), "sq");
  int64_t axes[1] = {0};
  fg_output loss = fg_set_name(g, fg_reduce_mean(g, sq, axes, 1, 0), "loss");
  fg_optimizer_config c;
  fg_optimizer_config_init(&c, FG_OPTIMIZER_SGD);
  c.learning_rate = 1e20;
  fg_status *st = fg_status_new();
  fg_output t = fg_minimize(g, loss, NULL, 0, &c, st);
  FG_REQUIRE(t.node >= 0);
  fg_session *s = session(g, 1, 1);
  FG_REQUIRE(s);
  const char *fetch = "loss", *target = fg_node_name(g, t.node);
  fg_tensor *out = NULL;
  FG_CHECK_INT(fg_session_run(s, NULL, 0, &fetch, 1, &out, &target, 1, st), 0);
  FG_REQUIRE(out);
  FG_CHECK_NEAR(((const float *)fg_tensor_data(out))[0], 2.5, 1e-7);
  fg_tensor_free(out);
  fg_tensor *wv = fg_session_variable(s, "w", st);
  FG_REQUIRE(wv);
  FG_CHECK_NEAR(((const float *)fg_tensor_data(wv))[0], 1.0 - 5e20, 1e-6);
  fg_tensor_free(wv);
  FG_CHECK(fg_session_run(s, NULL, 0, &fetch, 1, &out, &target, 1, st) != 0);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'sq' (mul): produced 0 NaN and 2 Inf");
  FG_CHECK(out == NULL);
  fg_session_free(s);
  fg_status_free(st);
  fg_tensor_free(w0);
  fg_tensor_free(xv);
  fg_graph_free(g);
}
