/* Variables made with initialisers (fg_variable_init): the fans against
 * torch.nn.init._calculate_fan_in_and_fan_out, the gains against
 * calculate_gain, each kind's statistics against its formula (bounds and
 * standard deviations computed here by hand), the values against the random
 * ops with the same seed and stream (bit for bit), reproducibility, the
 * .fgb and JSON round trips and their size, checkpoints that keep trained
 * values, and bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fgtest.h"
#include "flowgraph/autodiff.h"
#include "flowgraph/graph.h"
#include "flowgraph/io.h"
#include "flowgraph/session.h"
#include "flowgraph/status.h"
#include "flowgraph/tensor.h"
#include "graph/graph_internal.h"
#include "graph/init.h"

/* Generated with python3 (torch 1.13):
 *   from torch.nn.init import _calculate_fan_in_and_fan_out as f
 *   for s in [(64,3,7,7),(256,128,3,3),(16,6,5,5),(120,400),(10,84),(8,4,3),(2,3,4,5,6)]:
 *       print(s, f(torch.empty(s)))
 * and f(torch.empty(10)) raises "Fan in and fan out can not be computed for
 * tensor with fewer than 2 dimensions". */
FG_TEST(init_fans_match_torch, "") {
  static const struct {
    int rank;
    int64_t dims[5], fan_in, fan_out;
  } cases[7] = {{4, {64, 3, 7, 7}, 147, 3136}, {4, {256, 128, 3, 3}, 1152, 2304},
                {4, {16, 6, 5, 5}, 150, 400},  {2, {120, 400}, 400, 120},
                {2, {10, 84}, 84, 10},         {3, {8, 4, 3}, 12, 24},
                {5, {2, 3, 4, 5, 6}, 360, 240}};
  for (int i = 0; i < 7; i++) {
    int64_t fi = -1, fo = -1;
    FG_REQUIRE(fg_init_fans(cases[i].rank, cases[i].dims, &fi, &fo) == 0);
    if (fi != cases[i].fan_in || fo != cases[i].fan_out)
      FG_FAIL_AT("case %d: fans %lld, %lld; torch %lld, %lld", i, (long long)fi, (long long)fo,
                 (long long)cases[i].fan_in, (long long)cases[i].fan_out);
  }
  const int64_t d1[1] = {10};
  FG_CHECK_INT(fg_init_fans(1, d1, NULL, NULL), -1);
  FG_CHECK_INT(fg_init_fans(0, NULL, NULL, NULL), -1);
}

/* torch.nn.init.calculate_gain: relu 1.4142135623730951, tanh
 * 1.6666666666666667, leaky_relu(0.2) 1.3867504905630728, leaky_relu with
 * torch's default slope 0.01 1.4141428569978354, selu 0.75, linear 1. */
FG_TEST(init_gains_match_torch, "") {
  FG_CHECK(fg_init_gain("relu", 0) == 1.4142135623730951);
  FG_CHECK(fg_init_gain("tanh", 0) == 1.6666666666666667);
  FG_CHECK_NEAR(fg_init_gain("leaky_relu", 0.2), 1.3867504905630728, 1e-15);
  FG_CHECK_NEAR(fg_init_gain("leaky_relu", 0.01), 1.4141428569978354, 1e-15);
  FG_CHECK(fg_init_gain("selu", 0) == 0.75);
  FG_CHECK(fg_init_gain("linear", 0) == 1.0);
  FG_CHECK(fg_init_gain("conv2d", 0) == 1.0);
  FG_CHECK(isnan(fg_init_gain("swish", 0)));
  FG_CHECK(isnan(fg_init_gain(NULL, 0)));
}

/* The session's value of variable "w" (a new tensor). */
static fg_tensor *value_of(fg_graph *g, const char *name, int threads) {
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  fg_session *s = fg_session_new(g, &o, st);
  fg_tensor *t = s ? fg_session_variable(s, name, st) : NULL;
  if (!t) fprintf(stderr, "%s: %s\n", name, fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return t;
}

static fg_tensor *make(const char *name, fg_dtype dt, int rank, const int64_t *dims, fg_init init) {
  fg_graph *g = fg_graph_new();
  fg_variable_init(g, name, dt, rank, dims, &init);
  fg_tensor *t = fg_graph_status(g, NULL) == FG_OK ? value_of(g, name, 1) : NULL;
  fg_graph_free(g);
  return t;
}

typedef struct stats {
  double min, max, mean, sd;
} stats;

static stats stats_of(const fg_tensor *t) {
  const int64_t n = fg_tensor_num_elements(t);
  const int f64 = fg_tensor_dtype(t) == FG_F64;
  stats s = {INFINITY, -INFINITY, 0, 0};
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; i++) {
    const double v =
        f64 ? ((const double *)fg_tensor_data(t))[i] : ((const float *)fg_tensor_data(t))[i];
    s.min = v < s.min ? v : s.min;
    s.max = v > s.max ? v : s.max;
    sum += v;
    sq += v * v;
  }
  s.mean = sum / (double)n;
  s.sd = sqrt(sq / (double)n - s.mean * s.mean);
  return s;
}

/* Uniform kinds: every value in [-bound, bound), the extremes within 0.1%
 * of the bound, the standard deviation bound / sqrt(3) within 1%. Normal
 * kinds: mean within 1% of the std of 0, std within 1%. Over 294912 (conv)
 * or 150000 (linear) elements the sampling error of the std is about
 * 0.2%. Bounds by hand: conv [256, 128, 3, 3]: fan_in 1152, fan_out 2304;
 * linear [300, 500]: fan_in 500, fan_out 300. */
FG_TEST(init_statistics_match_formulas, "") {
  const int64_t conv[4] = {256, 128, 3, 3}, lin[2] = {300, 500};
  const struct {
    fg_init init;
    int conv;
    fg_dtype dt;
    int uniform;
    double bound_or_std;
  } cases[6] = {
      /* kaiming_uniform, relu: sqrt(2) * sqrt(3 / 1152) */
      {{FG_INIT_KAIMING_UNIFORM, 0, 0, 0, 1}, 1, FG_F32, 1, sqrt(2.0) * sqrt(3.0 / 1152)},
      /* kaiming_normal, leaky_relu 0.2, fan_out: sqrt(2 / 1.04) / sqrt(2304) */
      {{FG_INIT_KAIMING_NORMAL, 0.2, 0, 1, 2}, 1, FG_F64, 0, sqrt(2.0 / 1.04) / sqrt(2304.0)},
      /* xavier_uniform, gain 1: sqrt(6 / 800) */
      {{FG_INIT_XAVIER_UNIFORM, 0, 0, 0, 3}, 0, FG_F32, 1, sqrt(6.0 / 800)},
      /* xavier_normal, tanh's gain 5/3: 5/3 * sqrt(2 / 800) */
      {{FG_INIT_XAVIER_NORMAL, 5.0 / 3.0, 0, 0, 4}, 0, FG_F32, 0, 5.0 / 3.0 * sqrt(2.0 / 800)},
      /* kaiming_uniform on a linear weight, fan_in 500 */
      {{FG_INIT_KAIMING_UNIFORM, 0, 0, 0, 5}, 0, FG_F64, 1, sqrt(2.0) * sqrt(3.0 / 500)},
      /* kaiming_normal fan_in on conv: sqrt(2) / sqrt(1152) */
      {{FG_INIT_KAIMING_NORMAL, 0, 0, 0, 6}, 1, FG_F32, 0, sqrt(2.0) / sqrt(1152.0)},
  };
  for (int i = 0; i < 6; i++) {
    fg_tensor *t =
        make("w", cases[i].dt, cases[i].conv ? 4 : 2, cases[i].conv ? conv : lin, cases[i].init);
    FG_REQUIRE(t != NULL);
    const stats s = stats_of(t);
    const double b = cases[i].bound_or_std;
    if (cases[i].uniform) {
      if (!(s.min >= -b && s.max <= b && s.min < -0.999 * b && s.max > 0.999 * b &&
            fabs(s.sd - b / sqrt(3.0)) < 0.01 * b / sqrt(3.0)))
        FG_FAIL_AT("case %d: min %g max %g sd %g, bound %g", i, s.min, s.max, s.sd, b);
    } else if (!(fabs(s.mean) < 0.01 * b && fabs(s.sd - b) < 0.01 * b)) {
      FG_FAIL_AT("case %d: mean %g sd %g, want 0 and %g", i, s.mean, s.sd, b);
    }
    fg_tensor_free(t);
  }
  /* uniform(a, b), normal(mean, std), zeros, ones, constant. */
  const int64_t d[1] = {200000};
  fg_tensor *u = make("u", FG_F32, 1, d, (fg_init){FG_INIT_UNIFORM, -2, 3, 0, 7});
  fg_tensor *nm = make("n", FG_F64, 1, d, (fg_init){FG_INIT_NORMAL, 1.5, 0.25, 0, 8});
  FG_REQUIRE(u && nm);
  stats su = stats_of(u), sn = stats_of(nm);
  FG_CHECK(su.min >= -2 && su.max < 3 && su.min < -1.99 && su.max > 2.99);
  FG_CHECK_NEAR(su.sd, 5 / sqrt(12.0), 0.01 * 5 / sqrt(12.0));
  FG_CHECK_NEAR(sn.mean, 1.5, 0.01 * 0.25);
  FG_CHECK_NEAR(sn.sd, 0.25, 0.01 * 0.25);
  fg_tensor_free(u), fg_tensor_free(nm);
  const int64_t small[2] = {3, 4};
  fg_tensor *z = make("z", FG_F32, 2, small, (fg_init){FG_INIT_ZEROS, 0, 0, 0, 0});
  fg_tensor *o = make("o", FG_F64, 2, small, (fg_init){FG_INIT_ONES, 0, 0, 0, 0});
  fg_tensor *c = make("c", FG_I32, 2, small, (fg_init){FG_INIT_CONSTANT, -7, 0, 0, 0});
  FG_REQUIRE(z && o && c);
  for (int i = 0; i < 12; i++) {
    FG_CHECK(((const float *)fg_tensor_data(z))[i] == 0.0f);
    FG_CHECK(((const double *)fg_tensor_data(o))[i] == 1.0);
    FG_CHECK_INT(((const int32_t *)fg_tensor_data(c))[i], -7);
  }
  fg_tensor_free(z), fg_tensor_free(o), fg_tensor_free(c);
}

/* Element i of an initialiser is element i of the random op with the same
 * seed, stream and range: kaiming_uniform [64, 3, 7, 7] (fan_in 147) is
 * random_uniform(-b, b) with b = sqrt(2) sqrt(3 / 147), its stream the hash
 * of the variable's name; the same seed gives the same bits for 1 and 3
 * threads, another seed other values. */
FG_TEST(init_values_are_the_random_ops_values, "") {
  const int64_t d[4] = {64, 3, 7, 7};
  const int64_t n = 64 * 3 * 49;
  const double b = sqrt(2.0) * sqrt(3.0 / 147);
  fg_graph *g = fg_graph_new();
  const fg_init ki = {FG_INIT_KAIMING_UNIFORM, 0, 0, 0, 99};
  fg_variable_init(g, "conv1/w", FG_F32, 4, d, &ki);
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "dtype", FG_F32);
  fg_attrs_set_ints(a, "shape", d, 4);
  fg_attrs_set_int(a, "seed", 99);
  fg_attrs_set_int(a, "stream", fg_name_stream("conv1/w"));
  fg_attrs_set_float(a, "low", -b);
  fg_attrs_set_float(a, "high", b);
  fg_op(g, "random_uniform", "r", NULL, 0, a);
  fg_attrs_free(a);
  FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
  fg_tensor *w1 = value_of(g, "conv1/w", 1), *w3 = value_of(g, "conv1/w", 3), *r = NULL;
  fg_session *s = fg_session_new(g, NULL, NULL);
  const char *fetch = "r";
  FG_REQUIRE(s && fg_session_run(s, NULL, 0, &fetch, 1, &r, NULL, 0, NULL) == 0);
  FG_REQUIRE(w1 && w3 && r);
  FG_CHECK(memcmp(fg_tensor_data(w1), fg_tensor_data(r), (size_t)n * 4) == 0);
  FG_CHECK(memcmp(fg_tensor_data(w1), fg_tensor_data(w3), (size_t)n * 4) == 0);
  fg_graph *g2 = fg_graph_new();
  const fg_init other = {FG_INIT_KAIMING_UNIFORM, 0, 0, 0, 100};
  fg_variable_init(g2, "conv1/w", FG_F32, 4, d, &other);
  fg_tensor *w2 = value_of(g2, "conv1/w", 1);
  FG_REQUIRE(w2 != NULL);
  int64_t same = 0;
  for (int64_t i = 0; i < n; i++)
    same += ((const float *)fg_tensor_data(w1))[i] == ((const float *)fg_tensor_data(w2))[i];
  FG_CHECK(same < n / 100);
  fg_tensor_free(w1), fg_tensor_free(w2), fg_tensor_free(w3), fg_tensor_free(r);
  fg_session_free(s);
  fg_graph_free(g);
  fg_graph_free(g2);
}

static long file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* A graph with a 1M-element initialised variable saves in under 4 KB (.fgb
 * and JSON: attributes, no bytes) and loads back to the same values. A
 * session that trained saves the trained values; a session on that file
 * starts from them, not from a new draw; the graph itself stays small. */
FG_TEST(init_saved_graph_small_and_checkpoint_keeps_trained_values, "") {
  fg_status *st = fg_status_new();
  char dir[256], fgb[300], json[300], ckpt[300], again[300];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_init"));
  snprintf(fgb, sizeof fgb, "%s/g.fgb", dir);
  snprintf(json, sizeof json, "%s/g.json", dir);
  snprintf(ckpt, sizeof ckpt, "%s/ckpt.fgb", dir);
  snprintf(again, sizeof again, "%s/again.fgb", dir);
  fg_graph *g = fg_graph_new();
  const int64_t dw[2] = {1000, 1000};
  const fg_init xi = {FG_INIT_XAVIER_NORMAL, 0, 0, 0, 5};
  fg_output w = fg_variable_init(g, "w", FG_F32, 2, dw, &xi);
  fg_output loss = fg_reduce_sum(g, fg_mul(g, w, w), NULL, 0, 0);
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = 0.25;
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, st);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  FG_REQUIRE(fg_graph_save(g, fgb, st) == 0 && fg_graph_save_json(g, json, st) == 0);
  FG_CHECK(file_size(fgb) > 0 && file_size(fgb) < 4096);
  FG_CHECK(file_size(json) > 0 && file_size(json) < 8192);
  fg_tensor *w0 = value_of(g, "w", 2);
  fg_graph *lf = fg_graph_load(fgb, st), *lj = fg_graph_load_json(json, st);
  FG_REQUIRE(w0 && lf && lj);
  fg_tensor *wf = value_of(lf, "w", 1), *wj = value_of(lj, "w", 1);
  FG_REQUIRE(wf && wj);
  FG_CHECK(memcmp(fg_tensor_data(w0), fg_tensor_data(wf), 4000000) == 0);
  FG_CHECK(memcmp(fg_tensor_data(w0), fg_tensor_data(wj), 4000000) == 0);
  /* One SGD step on sum(w^2): w <- w - 0.25 * 2w = w / 2, exact. */
  fg_session *s = fg_session_new(g, NULL, st);
  const char *t = fg_node_name(g, train.node);
  FG_REQUIRE(s && fg_session_run(s, NULL, 0, NULL, 0, NULL, &t, 1, st) == 0);
  FG_REQUIRE(fg_session_save(s, ckpt, st) == 0);
  FG_CHECK(file_size(ckpt) > 4000000); /* the trained bytes */
  FG_REQUIRE(fg_graph_save(g, again, st) == 0);
  FG_CHECK(file_size(again) < 4096); /* the graph is unchanged */
  fg_graph *lc = fg_graph_load(ckpt, st);
  FG_REQUIRE(lc != NULL);
  fg_tensor *wc = value_of(lc, "w", 1);
  FG_REQUIRE(wc != NULL);
  int bad = 0;
  for (int64_t i = 0; i < 1000000; i++)
    bad += ((const float *)fg_tensor_data(wc))[i] != ((const float *)fg_tensor_data(w0))[i] / 2;
  FG_CHECK_INT(bad, 0);
  fg_tensor *ts[5] = {w0, wf, wj, wc, NULL};
  for (int i = 0; i < 4; i++)
    fg_tensor_free(ts[i]);
  fg_session_free(s);
  fg_graph_free(lc), fg_graph_free(lf), fg_graph_free(lj), fg_graph_free(g);
  fgt_rmtree(dir);
  fg_status_free(st);
}

/* Builds variable "w" with init and expects FG_INVALID_GRAPH naming it and
 * w1, w2. */
static void expect_bad(fg_dtype dt, int rank, const int64_t *dims, fg_init init, const char *w1,
                       const char *w2) {
  fg_graph *g = fg_graph_new();
  fg_status *st = fg_status_new();
  fg_variable_init(g, "w", dt, rank, dims, &init);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'w' (variable)");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), w1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), w2);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(init_bad_inputs, "badinput") {
  const int64_t d1[1] = {10}, d2[2] = {4, 5}, neg[2] = {4, -5};
  expect_bad(FG_F32, 1, d1, (fg_init){FG_INIT_KAIMING_UNIFORM, 0, 0, 0, 0}, "rank >= 2", "[10]");
  expect_bad(FG_F32, 1, d1, (fg_init){FG_INIT_XAVIER_NORMAL, 0, 0, 0, 0}, "xavier_normal",
             "rank >= 2");
  expect_bad(FG_F32, 2, d2, (fg_init){(fg_init_kind)42, 0, 0, 0, 0}, "'init' = 42",
             "no initialiser kind");
  expect_bad(FG_F32, 2, d2, (fg_init){FG_INIT_NORMAL, 0, 0, 0, 0}, "std (init_b) = 0", "> 0");
  expect_bad(FG_F64, 2, d2, (fg_init){FG_INIT_NORMAL, 1, -2, 0, 0}, "std (init_b) = -2", "> 0");
  expect_bad(FG_F32, 2, d2, (fg_init){FG_INIT_UNIFORM, 3, 3, 0, 0}, "low (init_a) = 3",
             "high (init_b) = 3");
  expect_bad(FG_I32, 2, d2, (fg_init){FG_INIT_KAIMING_NORMAL, 0, 0, 0, 0}, "dtype i32",
             "f32 or f64");
  expect_bad(FG_F32, 2, d2, (fg_init){FG_INIT_XAVIER_UNIFORM, -1, 0, 0, 0}, "gain (init_a) = -1",
             "> 0");
  expect_bad(FG_F32, 2, neg, (fg_init){FG_INIT_ZEROS, 0, 0, 0, 0}, "[4,-5]",
             "negative dimension -5");
  expect_bad(FG_I32, 2, d2, (fg_init){FG_INIT_CONSTANT, 2.5, 0, 0, 0}, "value (init_a) = 2.5",
             "integer i32");
  expect_bad(FG_I32, 2, d2, (fg_init){FG_INIT_CONSTANT, 3e9, 0, 0, 0}, "= 3e+09", "integer i32");
  /* A NULL init is the caller's error. */
  fg_graph *g = fg_graph_new();
  fg_status *st = fg_status_new();
  fg_variable_init(g, "w", FG_F32, 2, d2, NULL);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'w' (variable): init is NULL");
  fg_graph_free(g);
  /* A variable with neither value nor init (a file may hold one). */
  g = fg_graph_new();
  fg_op(g, "variable", "v", NULL, 0, NULL);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "node 'v' (variable): has neither 'value' nor 'init'");
  fg_graph_free(g);
  fg_status_free(st);
}
