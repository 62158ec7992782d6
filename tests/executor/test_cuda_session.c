/* Sessions on a GPU ("cuda:0"): every case labelled gpu compares the GPU run
 * with the same graph on cpu:0 (the CPU kernels are the reference, checked
 * against NumPy and PyTorch in their own tests) and skips visibly when the
 * build has no CUDA backend or the machine no device. The bad device name
 * cases run everywhere. */
#include <fcntl.h>
#include <flowgraph/flowgraph.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "executor/cuda_backend.h"
#include "fgtest.h"
#include "test_cli_harness.h"
#include "test_threads_util.h"
#ifdef FG_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

extern char **environ;

#define NEED_GPU()                                                                                 \
  do {                                                                                             \
    if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA device (%s)", no_gpu_reason());        \
  } while (0)

static const char *no_gpu_reason(void) {
#ifdef FG_HAVE_CUDA
  return "the build has the CUDA backend, but no GPU or driver was found";
#else
  return "this build has no CUDA backend";
#endif
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 40) * 0x1p-24 * 2.0 - 1.0);
}

static fg_tensor *rand_f32(int rank, const int64_t *dims) {
  fg_tensor *t = fg_tensor_new(FG_F32, rank, dims, NULL);
  float *p = fg_tensor_data(t);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    p[i] = frand();
  return t;
}

static fg_session *session_on(fg_graph *g, const char *device, int streams, int graphs,
                              fg_status *st) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = device;
  o.num_streams = streams;
  o.cuda_graphs = graphs;
  return fg_session_new(g, &o, st);
}

/* Largest |a - b| / (1 + |b|) over two tensors of the same shape; 1e30 on a
 * shape or dtype mismatch. Integer dtypes compare exactly. */
static double max_rel_diff(const fg_tensor *a, const fg_tensor *b) {
  if (!a || !b || fg_tensor_dtype(a) != fg_tensor_dtype(b) ||
      fg_tensor_num_elements(a) != fg_tensor_num_elements(b))
    return 1e30;
  double m = 0;
  int64_t n = fg_tensor_num_elements(a);
  for (int64_t i = 0; i < n; i++) {
    double x, y;
    switch (fg_tensor_dtype(a)) {
    case FG_F32: x = ((float *)fg_tensor_data(a))[i], y = ((float *)fg_tensor_data(b))[i]; break;
    case FG_F64: x = ((double *)fg_tensor_data(a))[i], y = ((double *)fg_tensor_data(b))[i]; break;
    case FG_I32:
      x = ((int32_t *)fg_tensor_data(a))[i], y = ((int32_t *)fg_tensor_data(b))[i];
      break;
    case FG_I64:
      x = (double)((int64_t *)fg_tensor_data(a))[i], y = (double)((int64_t *)fg_tensor_data(b))[i];
      break;
    default: x = ((uint8_t *)fg_tensor_data(a))[i], y = ((uint8_t *)fg_tensor_data(b))[i]; break;
    }
    double d = fabs(x - y) / (1 + fabs(y));
    if (!(d <= m)) m = d; /* NaN counts */
  }
  return m;
}

/* ---- bad device names (every build) --------------------------------------------------- */

FG_TEST(cuda_bad_device_refused, "badinput") {
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {2};
  fg_set_name(g, fg_relu(g, fg_placeholder(g, "x", FG_F32, 1, d)), "y");
  fg_status *st = fg_status_new();
  int count = fg_cuda_device_count();
  const char *bad[4] = {"cuda:7", "cuda:999999999", "cuda:-1", "cuda:x"};
  for (int i = 0; i < 4; i++) {
    if (i == 0 && count > 7) continue; /* cuda:7 exists on an 8-GPU machine */
    fg_session *s = session_on(g, bad[i], 0, 0, st);
    FG_CHECK(s == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), bad[i]);
    fg_session_free(s);
  }
  /* The message says how many devices exist. */
  fg_session *s = session_on(g, "cuda:7", 0, 0, st);
  if (count == 0) {
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "no CUDA device");
  } else if (count <= 7) {
    char want[64];
    snprintf(want, sizeof want, "has %d CUDA device", count);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), want);
  }
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(cuda_mixed_placement_refused, "badinput") {
  /* A node placed on a GPU in a CPU session: one device per session. */
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {2};
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d);
  fg_set_device(g, fg_set_name(g, fg_relu(g, x), "on_gpu"), "cuda:0");
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  FG_CHECK(s == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "on_gpu");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "cuda:0");
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

/* check_numerics on cuda:0, counts worked out by hand:
 * log(x) of x = {1, -1, 0, -3, 2} is {0, NaN, -Inf, NaN, 0.69}. The first
 * bad node in plan order is named ('lg', not the 'sq' it flows into), and
 * the assign that reads it later in the plan does not run, as on cpu:0. A
 * fed NaN is named as the feed. Clean runs give the CPU's values. */
FG_TEST(cuda_check_numerics_names_first_bad_node, "gpu,badinput") {
  NEED_GPU();
  for (int d64 = 0; d64 < 2; d64++) {
    const fg_dtype dt = d64 ? FG_F64 : FG_F32;
    fg_graph *g = fg_graph_new();
    int64_t d[1] = {5};
    fg_output x = fg_placeholder(g, "x", dt, 1, d);
    fg_output lg = fg_set_name(g, fg_log(g, x), "lg");
    fg_output sq = fg_set_name(g, fg_mul(g, lg, lg), "sq");
    fg_tensor *v0 = fg_tensor_new(dt, 0, NULL, NULL);
    memset(fg_tensor_data(v0), 0, fg_tensor_num_bytes(v0));
    fg_output v = fg_variable(g, "v", v0);
    fg_tensor_free(v0);
    fg_set_name(g, fg_assign(g, v, fg_add(g, v, fg_reduce_sum(g, sq, NULL, 0, 0))), "acc");
    fg_status *st = fg_status_new();
    fg_session_options o;
    fg_session_options_init(&o);
    o.device = "cuda:0";
    o.check_numerics = 1;
    fg_session *s = fg_session_new(g, &o, st);
    FG_REQUIRE(s);
    const double good[5] = {1, 0.5, 2, 3, 4}, bad[5] = {1, -1, 0, -3, 2};
    const double nan_feed[5] = {1, NAN, 2, 3, 4};
    fg_tensor *xt = fg_tensor_new(dt, 1, d, NULL);
    const char *target = "acc", *fetch = "sq";
    fg_feed f = {"x", xt};
    /* clean: 3 runs (a CUDA Graph would be captured by now without the
     * check), sq equals log(x)^2 computed here, v accumulates */
    double want_v = 0;
    for (int r = 0; r < 3; r++) {
      for (int i = 0; i < 5; i++)
        d64 ? (((double *)fg_tensor_data(xt))[i] = good[i])
            : (((float *)fg_tensor_data(xt))[i] = (float)good[i]);
      fg_tensor *out = NULL;
      FG_REQUIRE(fg_session_run(s, &f, 1, &fetch, 1, &out, &target, 1, st) == 0);
      for (int i = 0; i < 5; i++) {
        const double l = log(good[i]);
        const double got =
            d64 ? ((double *)fg_tensor_data(out))[i] : ((float *)fg_tensor_data(out))[i];
        FG_CHECK_NEAR(got, l * l, d64 ? 1e-15 : 1e-6);
        want_v += l * l;
      }
      fg_tensor_free(out);
    }
    /* a bad feed value: log makes 2 NaN and 1 Inf; nothing after it runs */
    for (int i = 0; i < 5; i++)
      d64 ? (((double *)fg_tensor_data(xt))[i] = bad[i])
          : (((float *)fg_tensor_data(xt))[i] = (float)bad[i]);
    fg_tensor *out = NULL;
    FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, &target, 1, st) != 0);
    FG_CHECK(out == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(fg_status_message(st),
                          "node 'lg' (log) on cuda:0: produced 2 NaN and 1 Inf in output 0 "
                          "(check_numerics)");
    fg_tensor *vt = fg_session_variable(s, "v", st);
    FG_REQUIRE(vt);
    const double got_v = d64 ? *(double *)fg_tensor_data(vt) : *(float *)fg_tensor_data(vt);
    FG_CHECK_NEAR(got_v, want_v, d64 ? 1e-12 : 1e-4);
    fg_tensor_free(vt);
    /* a NaN fed: named as the feed before anything runs */
    for (int i = 0; i < 5; i++)
      d64 ? (((double *)fg_tensor_data(xt))[i] = nan_feed[i])
          : (((float *)fg_tensor_data(xt))[i] = (float)nan_feed[i]);
    FG_CHECK(fg_session_run(s, &f, 1, &fetch, 1, &out, &target, 1, st) != 0);
    FG_CHECK_STR_CONTAINS(fg_status_message(st),
                          "feed 'x' (placeholder): holds 1 NaN and 0 Inf (check_numerics)");
    fg_tensor_free(xt);
    fg_session_free(s);
    fg_status_free(st);
    fg_graph_free(g);
  }
}

FG_TEST(cuda_cli_device_refused, "badinput") {
  /* `flowgraph run/profile --device cuda:7`: exit 1, one line naming the
   * device, nothing on stdout; --device without a value is a usage error. */
  if (fg_cuda_device_count() > 7) FG_SKIP("this machine has a cuda:7");
  FG_REQUIRE(make_tmpdir());
  FG_REQUIRE(build_mlp(tpath("m.fgb"), 0, 0) == 0);
  const char *cmds[2] = {"run", "profile"};
  for (int i = 0; i < 2; i++) {
    cli_result r;
    FG_REQUIRE(cli(&r, cmds[i], tpath("m.fgb"), "--random-inputs", "--device", "cuda:7", NULL) ==
               0);
    CHECK_RUNTIME_ERROR(r, "INVALID_ARGUMENT", "cuda:7");
    FG_CHECK_INT(strlen(r.out), 0);
    result_free(&r);
    FG_REQUIRE(cli(&r, cmds[i], tpath("m.fgb"), "--random-inputs", "--device", NULL) == 0);
    CHECK_USAGE_ERROR(r);
    result_free(&r);
  }
  /* cpu:0 is the default and runs. */
  cli_result r;
  FG_REQUIRE(cli(&r, "run", tpath("m.fgb"), "--random-inputs", "--device", "cpu:0", NULL) == 0);
  CHECK_OK(r);
  result_free(&r);
  fgt_rmtree(tmpdir);
}

/* ---- every op: GPU against CPU --------------------------------------------------------- */

/* Runs fetches on cpu:0 and on cuda:0 (plain, then replayed) and compares. */
static void compare_devices(fg_graph *g, const fg_feed *feeds, int n_feeds, const char **fetches,
                            int n_fetches, double tol, const char *what) {
  fg_status *st = fg_status_new();
  fg_session *cpu = session_on(g, NULL, 0, 0, st);
  FG_REQUIRE(cpu);
  fg_session *gpu = session_on(g, "cuda:0", 0, 0, st);
  if (!gpu) {
    FG_FAIL_AT("%s: %s", what, fg_status_message(st));
    fg_session_free(cpu);
    fg_status_free(st);
    return;
  }
  fg_tensor *want[8] = {0}, *got[8] = {0};
  if (fg_session_run(cpu, feeds, n_feeds, fetches, n_fetches, want, NULL, 0, st) != 0)
    FG_FAIL_AT("%s on cpu: %s", what, fg_status_message(st));
  /* Three runs: plain, captured, replayed. */
  for (int r = 0; r < 3; r++) {
    for (int i = 0; i < n_fetches; i++)
      fg_tensor_free(got[i]), got[i] = NULL;
    if (fg_session_run(gpu, feeds, n_feeds, fetches, n_fetches, got, NULL, 0, st) != 0) {
      FG_FAIL_AT("%s on cuda:0 (run %d): %s", what, r, fg_status_message(st));
      break;
    }
    for (int i = 0; i < n_fetches; i++) {
      double d = max_rel_diff(got[i], want[i]);
      if (!(d <= tol)) FG_FAIL_AT("%s: fetch '%s' run %d differs by %g", what, fetches[i], r, d);
    }
  }
  for (int i = 0; i < n_fetches; i++)
    fg_tensor_free(want[i]), fg_tensor_free(got[i]);
  fg_session_free(cpu);
  fg_session_free(gpu);
  fg_status_free(st);
}

typedef fg_output (*unary_fn)(fg_graph *, fg_output);
typedef fg_output (*binary_fn)(fg_graph *, fg_output, fg_output);

FG_TEST(cuda_every_op_matches_cpu, "gpu") {
  NEED_GPU();
  /* Odd sizes and broadcasting: a [5, 7, 3], b [7, 1] broadcast against it. */
  int64_t ad[3] = {5, 7, 3}, bd[2] = {7, 1}, md[2] = {37, 19}, nd[2] = {19, 23};
  fg_tensor *a = rand_f32(3, ad), *b = rand_f32(2, bd), *m = rand_f32(2, md), *n = rand_f32(2, nd);
  float *pa = fg_tensor_data(a);
  fg_tensor *apos = fg_tensor_clone(a, NULL);
  float *pp = fg_tensor_data(apos);
  for (int i = 0; i < 105; i++)
    pp[i] = fabsf(pa[i]) + 0.1f; /* for log, sqrt, rsqrt, pow */
  struct {
    const char *name;
    unary_fn f;
  } unary[] = {{"neg", fg_neg},   {"exp", fg_exp},          {"log", fg_log},
               {"sqrt", fg_sqrt}, {"rsqrt", fg_rsqrt},      {"abs", fg_abs},
               {"tanh", fg_tanh}, {"sigmoid", fg_sigmoid},  {"relu", fg_relu},
               {"gelu", fg_gelu}, {"identity", fg_identity}};
  struct {
    const char *name;
    binary_fn f;
  } binary[] = {{"add", fg_add},         {"sub", fg_sub},     {"mul", fg_mul},
                {"div", fg_div},         {"pow", fg_pow},     {"maximum", fg_maximum},
                {"minimum", fg_minimum}, {"equal", fg_equal}, {"greater", fg_greater},
                {"less", fg_less}};
  for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", FG_F32, 3, ad);
    fg_set_name(g, unary[i].f(g, x), "y");
    fg_feed f = {"x", apos};
    const char *fetch = "y";
    compare_devices(g, &f, 1, &fetch, 1, 1e-5, unary[i].name);
    fg_graph_free(g);
  }
  for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++) {
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", FG_F32, 3, ad);
    fg_output y = fg_placeholder(g, "y", FG_F32, 2, bd);
    fg_set_name(g, binary[i].f(g, x, y), "z");
    fg_feed f[2] = {{"x", apos}, {"y", b}};
    const char *fetch = "z";
    compare_devices(g, f, 2, &fetch, 1, 1e-5, binary[i].name);
    fg_graph_free(g);
  }
  {
    /* matmul (both transposes), reductions, softmax family, argmax,
     * transpose, concat, slice, reshape, cast, leaky_relu, select. */
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "m", FG_F32, 2, md);
    fg_output y = fg_placeholder(g, "n", FG_F32, 2, nd);
    fg_output a3 = fg_placeholder(g, "a", FG_F32, 3, ad);
    fg_set_name(g, fg_matmul(g, x, y, 0, 0), "mm");
    fg_set_name(g, fg_matmul(g, y, x, 1, 1), "mm_tt");
    int64_t ax1[1] = {1}, ax02[2] = {0, 2};
    fg_set_name(g, fg_reduce_sum(g, a3, ax1, 1, 0), "sum1");
    fg_set_name(g, fg_reduce_mean(g, a3, ax02, 2, 1), "mean02");
    fg_set_name(g, fg_reduce_max(g, a3, NULL, 0, 0), "maxall");
    fg_set_name(g, fg_softmax(g, x, 1), "softmax");
    fg_set_name(g, fg_log_softmax(g, x, 0), "log_softmax");
    fg_set_name(g, fg_argmax(g, x, 1), "argmax");
    int64_t perm[3] = {2, 0, 1};
    fg_set_name(g, fg_transpose(g, a3, 3, perm), "transpose");
    fg_output parts[2] = {a3, a3};
    fg_set_name(g, fg_concat(g, parts, 2, 1), "concat");
    int64_t begin[3] = {1, 2, 0}, size[3] = {3, 4, 2};
    fg_set_name(g, fg_slice(g, a3, 3, begin, size), "slice");
    int64_t rs[2] = {15, 7};
    fg_set_name(g, fg_reshape(g, a3, 2, rs), "reshape");
    fg_set_name(g, fg_cast(g, a3, FG_F64), "cast");
    fg_set_name(g, fg_leaky_relu(g, a3, 0.2), "leaky");
    fg_set_name(g, fg_select(g, fg_greater(g, a3, fg_scalar(g, FG_F32, 0.0)), a3, fg_neg(g, a3)),
                "select");
    fg_feed f[3] = {{"m", m}, {"n", n}, {"a", a}};
    const char *fetches[8] = {"mm",     "mm_tt",   "sum1",        "mean02",
                              "maxall", "softmax", "log_softmax", "argmax"};
    compare_devices(g, f, 3, fetches, 8, 1e-4, "matmul/reduce/softmax");
    const char *fetches2[7] = {"transpose", "concat", "slice", "reshape",
                               "cast",      "leaky",  "select"};
    compare_devices(g, f, 3, fetches2, 7, 1e-6, "shape ops");
    fg_graph_free(g);
  }
  {
    /* gather, one_hot, cross-entropy with integer labels. */
    fg_graph *g = fg_graph_new();
    int64_t ld[1] = {37};
    fg_output x = fg_placeholder(g, "m", FG_F32, 2, md);
    fg_output lab = fg_placeholder(g, "labels", FG_I32, 1, ld);
    fg_set_name(g, fg_gather(g, x, lab), "gather");
    fg_set_name(g, fg_one_hot(g, lab, 19, FG_F32), "one_hot");
    fg_set_name(g, fg_softmax_cross_entropy(g, x, lab), "xent");
    fg_tensor *labels = fg_tensor_new(FG_I32, 1, ld, NULL);
    for (int i = 0; i < 37; i++)
      ((int32_t *)fg_tensor_data(labels))[i] = (i * 7) % 19;
    fg_feed f[2] = {{"m", m}, {"labels", labels}};
    const char *fetches[3] = {"gather", "one_hot", "xent"};
    compare_devices(g, f, 2, fetches, 3, 1e-5, "gather/one_hot/xent");
    /* A label out of range: the kernel's error record names the node. */
    ((int32_t *)fg_tensor_data(labels))[5] = 40;
    fg_status *st = fg_status_new();
    fg_session *s = session_on(g, "cuda:0", 0, 0, st);
    FG_REQUIRE(s);
    fg_tensor *out = NULL;
    const char *gfetch = "gather";
    FG_CHECK(fg_session_run(s, f, 2, &gfetch, 1, &out, NULL, 0, st) != 0);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "gather");
    FG_CHECK_STR_CONTAINS(fg_status_message(st), "40");
    fg_session_free(s);
    fg_status_free(st);
    fg_tensor_free(labels);
    fg_graph_free(g);
  }
  fg_tensor_free(a), fg_tensor_free(apos), fg_tensor_free(b), fg_tensor_free(m), fg_tensor_free(n);
}

/* ---- streams and graphs ----------------------------------------------------------------- */

/* Eight independent branches of matmul + tanh + reduce, joined by adds. */
static fg_graph *branches(void) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {64, 96}, wd[2] = {96, 96};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output acc = FG_NO_OUTPUT;
  for (int i = 0; i < 8; i++) {
    fg_tensor *w = rand_f32(2, wd);
    char name[32];
    snprintf(name, sizeof name, "w%d", i);
    fg_output wv = fg_variable(g, name, w);
    fg_output h = fg_tanh(g, fg_matmul(g, x, wv, 0, 0));
    h = fg_relu(g, fg_matmul(g, h, wv, 0, 1));
    fg_output r = fg_reduce_sum(g, h, NULL, 0, 0);
    acc = i == 0 ? r : fg_add(g, acc, r);
    fg_tensor_free(w);
  }
  fg_set_name(g, acc, "out");
  return g;
}

FG_TEST(cuda_multi_stream_equals_single_stream, "gpu") {
  NEED_GPU();
  fg_graph *g = branches();
  int64_t xd[2] = {64, 96};
  fg_tensor *x = rand_f32(2, xd);
  fg_feed f = {"x", x};
  const char *fetch = "out";
  fg_status *st = fg_status_new();
  fg_tensor *ref = NULL;
  fg_session *one = session_on(g, "cuda:0", 1, -1, st);
  FG_REQUIRE(one);
  FG_REQUIRE(fg_session_run(one, &f, 1, &fetch, 1, &ref, NULL, 0, st) == 0);
  int counts[3] = {2, 4, 16};
  for (int c = 0; c < 3; c++) {
    fg_session *s = session_on(g, "cuda:0", counts[c], -1, st);
    FG_REQUIRE(s);
    for (int r = 0; r < 20; r++) {
      fg_tensor *out = NULL;
      FG_REQUIRE(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) == 0);
      /* Same kernels, same inputs: bitwise equal whatever the streams. */
      FG_CHECK(max_rel_diff(out, ref) == 0);
      fg_tensor_free(out);
    }
    fg_session_free(s);
  }
  fg_tensor_free(ref);
  fg_session_free(one);
  fg_tensor_free(x);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(cuda_graph_replay_equals_plain_run, "gpu") {
  NEED_GPU();
  fg_graph *g = branches();
  int64_t xd[2] = {64, 96};
  fg_status *st = fg_status_new();
  fg_session *plain = session_on(g, "cuda:0", 0, -1, st);
  fg_session *replay = session_on(g, "cuda:0", 0, 0, st);
  FG_REQUIRE(plain && replay);
  const char *fetch = "out";
  /* New feed values every run: the replayed graph must read the new feed
   * (copied into the plan's fixed device buffer), not the captured one. */
  for (int r = 0; r < 10; r++) {
    fg_tensor *x = rand_f32(2, xd);
    fg_feed f = {"x", x};
    fg_tensor *a = NULL, *b = NULL;
    FG_REQUIRE(fg_session_run(plain, &f, 1, &fetch, 1, &a, NULL, 0, st) == 0);
    FG_REQUIRE(fg_session_run(replay, &f, 1, &fetch, 1, &b, NULL, 0, st) == 0);
    FG_CHECK(max_rel_diff(b, a) == 0);
    fg_tensor_free(a), fg_tensor_free(b), fg_tensor_free(x);
  }
  fg_session_free(plain);
  fg_session_free(replay);
  fg_status_free(st);
  fg_graph_free(g);
}

#ifdef FG_HAVE_CUDA
/* A [n] f32 tensor over page-locked memory (cudaHostAlloc), as a user would
 * feed a pinned batch; *mem is freed after the tensor. */
static fg_tensor *pinned_f32(int64_t n, void **mem) {
  if (cudaHostAlloc(mem, (size_t)n * sizeof(float), cudaHostAllocDefault) != cudaSuccess)
    return NULL;
  return fg_tensor_wrap(FG_F32, 1, &n, *mem, (size_t)n * sizeof(float), NULL);
}
#endif

/* Feeds in page-locked memory (fg_tensor_new_pinned, or a wrapped buffer
 * the caller page-locked) are copied to the device directly, outside
 * the captured graph; any other goes through the plan's staging. Runs mix
 * the two for each of two feeds, switch between two pinned buffers, and
 * rewrite a pinned buffer in place between runs: every run (the replayed
 * ones from the third on) must read the values fed to it. out = 2 x + z,
 * exact in f32, is checked against the same sum done here. */
FG_TEST(cuda_page_locked_feeds_read_every_run, "gpu") {
  NEED_GPU();
#ifdef FG_HAVE_CUDA
  enum { N = 4099 }; /* odd: no feed is a whole number of vectors */
  int64_t d[1] = {N};
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, d), z = fg_placeholder(g, "z", FG_F32, 1, d);
  fg_set_name(g, fg_add(g, fg_mul(g, x, fg_scalar(g, FG_F32, 2.0)), z), "out");
  fg_status *st = fg_status_new();
  fg_session *s = session_on(g, "cuda:0", 0, 0, st);
  FG_REQUIRE(s);
  /* two wrapped cudaHostAlloc buffers and one fg_tensor_new_pinned */
  void *mem[3] = {NULL, NULL, NULL};
  fg_tensor *pin[3] = {pinned_f32(N, &mem[0]), pinned_f32(N, &mem[1]),
                       fg_tensor_new_pinned(FG_F32, 1, d, st)};
  FG_REQUIRE(pin[2]);
  FG_CHECK_INT(fg_tensor_is_pinned(pin[2]), 1);
  FG_CHECK_INT(fg_tensor_is_pinned(pin[0]), 0); /* borrowed: fed directly all the same */
  struct cudaPointerAttributes attr;
  FG_REQUIRE(cudaPointerGetAttributes(&attr, fg_tensor_data(pin[2])) == cudaSuccess);
  FG_CHECK_INT(attr.type, cudaMemoryTypeHost);
  fg_tensor *pageable[2] = {fg_tensor_new(FG_F32, 1, d, NULL), fg_tensor_new(FG_F32, 1, d, NULL)};
  FG_REQUIRE(pin[0] && pin[1] && pin[2] && pageable[0] && pageable[1]);
  const char *fetch = "out";
  for (int r = 0; r < 12; r++) {
    /* x: pinned buffer 0, pageable, pinned buffer 1, in turn; z: pinned
     * buffer 2 on even runs, else pageable. */
    fg_tensor *xt = r % 3 == 0 ? pin[0] : r % 3 == 1 ? pageable[0] : pin[1];
    fg_tensor *zt = r % 2 == 0 ? pin[2] : pageable[1];
    float *xp = fg_tensor_data(xt), *zp = fg_tensor_data(zt);
    for (int i = 0; i < N; i++)
      xp[i] = frand(), zp[i] = frand();
    fg_feed f[2] = {{"x", xt}, {"z", zt}};
    fg_tensor *out = NULL;
    FG_REQUIRE(fg_session_run(s, f, 2, &fetch, 1, &out, NULL, 0, st) == 0);
    const float *o = fg_tensor_data(out);
    int wrong = 0;
    for (int i = 0; i < N; i++)
      wrong += o[i] != xp[i] * 2.0f + zp[i];
    if (wrong) printf("run %d: %d of %d elements wrong\n", r, wrong, N);
    FG_CHECK_INT(wrong, 0);
    fg_tensor_free(out);
  }
  for (int i = 0; i < 3; i++) {
    fg_tensor_free(pin[i]);
    if (mem[i]) cudaFreeHost(mem[i]);
  }
  fg_tensor_free(pageable[0]), fg_tensor_free(pageable[1]);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
#endif
}

FG_TEST(cuda_variables_update_and_read_back, "gpu") {
  NEED_GPU();
  /* v = [1, 2, 3]; each run assigns v + 1 (replayed from the third run on):
   * after 5 runs v = [6, 7, 8], read back through fg_session_variable and
   * fg_session_save. */
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  float init[3] = {1, 2, 3};
  fg_tensor *t = fg_tensor_from_data(FG_F32, 1, d, init, sizeof init, NULL);
  fg_output v = fg_variable(g, "v", t);
  fg_set_name(g, fg_assign(g, v, fg_add(g, v, fg_scalar(g, FG_F32, 1.0))), "step");
  fg_tensor_free(t);
  fg_status *st = fg_status_new();
  fg_session *s = session_on(g, "cuda:0", 0, 0, st);
  FG_REQUIRE(s);
  const char *target = "step";
  for (int r = 0; r < 5; r++)
    FG_REQUIRE(fg_session_run(s, NULL, 0, NULL, 0, NULL, &target, 1, st) == 0);
  fg_tensor *now = fg_session_variable(s, "v", st);
  FG_REQUIRE(now);
  for (int i = 0; i < 3; i++)
    FG_CHECK_NEAR(((float *)fg_tensor_data(now))[i], init[i] + 5, 0);
  fg_tensor_free(now);
  char dir[256];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_cuda"));
  char path[300];
  snprintf(path, sizeof path, "%s/v.fgb", dir);
  FG_REQUIRE(fg_session_save(s, path, st) == 0);
  fg_graph *back = fg_graph_load(path, st);
  FG_REQUIRE(back);
  fg_session *cpu = fg_session_new(back, NULL, st);
  FG_REQUIRE(cpu);
  fg_tensor *saved = fg_session_variable(cpu, "v", st);
  FG_REQUIRE(saved);
  FG_CHECK_NEAR(((float *)fg_tensor_data(saved))[2], 8, 0);
  fg_tensor_free(saved);
  fg_session_free(cpu);
  fg_graph_free(back);
  fgt_rmtree(dir);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(cuda_profile_one_track_per_stream, "gpu") {
  NEED_GPU();
  fg_graph *g = branches();
  int64_t xd[2] = {64, 96};
  fg_tensor *x = rand_f32(2, xd);
  fg_feed f = {"x", x};
  const char *fetch = "out";
  fg_status *st = fg_status_new();
  fg_session *s = session_on(g, "cuda:0", 4, 0, st);
  FG_REQUIRE(s);
  fg_run_options ro = {1};
  fg_run_metadata *md = NULL;
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run_ex(s, &f, 1, &fetch, 1, &out, NULL, 0, &ro, &md, st) == 0);
  FG_REQUIRE(md);
  int used[4] = {0};
  for (int i = 0; i < md->n_nodes; i++) {
    FG_CHECK(md->nodes[i].thread >= 0 && md->nodes[i].thread < 4);
    FG_CHECK(md->nodes[i].start_ns >= 0 && md->nodes[i].end_ns >= md->nodes[i].start_ns);
    if (md->nodes[i].thread >= 0 && md->nodes[i].thread < 4) used[md->nodes[i].thread] = 1;
  }
  /* Stream 0 always runs something; whether the branches spread over the
   * others depends on the memory planner's reuse edges (the stream
   * assignment itself is tested in test_streams.c). */
  FG_CHECK(used[0]);
  printf("streams used: %d %d %d %d\n", used[0], used[1], used[2], used[3]);
  fg_run_metadata_free(md);
  fg_tensor_free(out);
  fg_session_free(s);
  fg_tensor_free(x);
  fg_status_free(st);
  fg_graph_free(g);
}

FG_TEST(cuda_no_leak_over_1000_runs, "gpu") {
  NEED_GPU();
#ifdef FG_HAVE_CUDA
  fg_graph *g = branches();
  int64_t xd[2] = {64, 96};
  fg_tensor *x = rand_f32(2, xd);
  fg_feed f = {"x", x};
  const char *fetch = "out";
  fg_status *st = fg_status_new();
  size_t free_after_1[2] = {0, 0};
  for (int graphs = 0; graphs >= -1; graphs--) {
    fg_session *s = session_on(g, "cuda:0", 0, graphs, st);
    FG_REQUIRE(s);
    size_t free_b = 0, total = 0;
    for (int r = 0; r < 1000; r++) {
      fg_tensor *out = NULL;
      FG_REQUIRE(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) == 0);
      fg_tensor_free(out);
      /* After the second run the graph (if any) is captured: from then on
       * nothing may be allocated on the device. */
      if (r == 1) FG_REQUIRE(cudaMemGetInfo(&free_after_1[-graphs], &total) == cudaSuccess);
    }
    FG_REQUIRE(cudaMemGetInfo(&free_b, &total) == cudaSuccess);
    FG_CHECK_INT(free_b, free_after_1[-graphs]);
    fg_session_free(s);
  }
  fg_tensor_free(x);
  fg_status_free(st);
  fg_graph_free(g);
#endif
}

/* A graph on CPU devices never starts the CUDA driver, also where a GPU
 * exists: it costs a thread, address space and a fraction of a second, and
 * on an H100 machine a CPU session under a 512 MiB RLIMIT_AS died in it
 * (test_limits.c's arena case). fgt_count_threads(0) counts the threads
 * flowgraph did not start. The device names were checked against the
 * GPU count for every name, cpu:N included. Skipped without the driver's
 * device node, which is looked for without asking the driver. */
FG_TEST(cuda_cpu_session_leaves_driver_alone, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("%s", no_gpu_reason());
#else
  if (access("/dev/nvidiactl", F_OK) != 0)
    FG_SKIP_NO_GPU("no NVIDIA driver (/dev/nvidiactl is absent)");
  const int before = fgt_count_threads(0);
  FG_REQUIRE(before >= 1);
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {4, 8};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, d);
  fg_output r = fg_set_device(g, fg_relu(g, x), "cpu:0");
  fg_set_name(g, fg_set_device(g, fg_exp(g, r), "cpu:1"), "out");
  fg_tensor *xv = rand_f32(2, d);
  fg_feed f = {"x", xv};
  const char *fetch = "out";
  fg_status *st = fg_status_new();
  fg_session *s = session_on(g, NULL, 0, 0, st);
  FG_REQUIRE(s);
  fg_tensor *out = NULL;
  FG_REQUIRE(fg_session_run(s, &f, 1, &fetch, 1, &out, NULL, 0, st) == 0);
  const float *xp = fg_tensor_data(xv), *op = fg_tensor_data(out);
  for (int i = 0; i < 32; i++)
    FG_CHECK_NEAR(op[i], expf(xp[i] > 0 ? xp[i] : 0), 1e-6);
  FG_CHECK_INT(fgt_count_threads(0), before);
  /* The control: once asked, the driver does start a thread (seen on an
   * H100 with driver 580), so the check above can see one. */
  if (fg_cuda_device_count() >= 1) FG_CHECK(fgt_count_threads(0) > before);
  fg_tensor_free(out);
  fg_session_free(s);
  fg_tensor_free(xv);
  fg_status_free(st);
  fg_graph_free(g);
#endif
}

/* ---- the digits MLP trains on the GPU ----------------------------------------------------- */

#define DIGITS_DATA    FG_SOURCE_DIR "/examples/digits/data"
#define DIGITS_BUILDER FG_BUILD_DIR "/examples/example_digits_build_mlp"

static int run_builder(const char *out) {
  const char *argv[] = {DIGITS_BUILDER, out, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, DIGITS_BUILDER, &fa, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  if (rc != 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* 15 epochs of batch 64 in a fixed shuffled order (the demo's settings),
 * then the test accuracy. */
static double train_digits(const char *model, const char *device, fg_status *st) {
  fg_graph *g = fg_graph_load(model, st);
  fg_tensor *tx = fg_npy_read(DIGITS_DATA "/train_x.npy", st);
  fg_tensor *ty = fg_npy_read(DIGITS_DATA "/train_y.npy", st);
  fg_tensor *vx = fg_npy_read(DIGITS_DATA "/test_x.npy", st);
  fg_tensor *vy = fg_npy_read(DIGITS_DATA "/test_y.npy", st);
  double acc = -1;
  fg_session *s = g && tx && ty && vx && vy ? session_on(g, device, 0, 0, st) : NULL;
  if (s) {
    int64_t n = fg_tensor_dim(tx, 0), feat = fg_tensor_dim(tx, 1);
    int *order = malloc((size_t)n * sizeof *order);
    float *bx = malloc((size_t)(64 * feat) * sizeof *bx);
    int32_t by[64];
    uint64_t r = 12345;
    for (int64_t i = 0; i < n; i++)
      order[i] = (int)i;
    int ok = 1;
    for (int epoch = 0; ok && epoch < 15; epoch++) {
      for (int64_t i = n - 1; i > 0; i--) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int64_t j = (int64_t)((r >> 33) % (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[j], order[j] = t;
      }
      for (int64_t b0 = 0; ok && b0 + 64 <= n; b0 += 64) { /* full batches: one plan */
        for (int k = 0; k < 64; k++) {
          memcpy(bx + k * feat, (float *)fg_tensor_data(tx) + order[b0 + k] * feat,
                 (size_t)feat * sizeof(float));
          by[k] = ((int32_t *)fg_tensor_data(ty))[order[b0 + k]];
        }
        int64_t xd[2] = {64, feat}, yd[1] = {64};
        fg_tensor *xb = fg_tensor_from_data(FG_F32, 2, xd, bx, (size_t)(64 * feat) * 4, st);
        fg_tensor *yb = fg_tensor_from_data(FG_I32, 1, yd, by, sizeof by, st);
        fg_feed f[2] = {{"x", xb}, {"y", yb}};
        const char *target = "train";
        ok = fg_session_run(s, f, 2, NULL, 0, NULL, &target, 1, st) == 0;
        fg_tensor_free(xb), fg_tensor_free(yb);
      }
    }
    fg_feed f[2] = {{"x", vx}, {"y", vy}};
    const char *fetch = "accuracy";
    fg_tensor *out = NULL;
    if (ok && fg_session_run(s, f, 2, &fetch, 1, &out, NULL, 0, st) == 0)
      acc = ((float *)fg_tensor_data(out))[0];
    fg_tensor_free(out);
    free(order);
    free(bx);
  }
  fg_session_free(s);
  fg_tensor_free(tx), fg_tensor_free(ty), fg_tensor_free(vx), fg_tensor_free(vy);
  fg_graph_free(g);
  return acc;
}

FG_TEST(cuda_digits_mlp_trains_like_cpu, "gpu") {
  NEED_GPU();
  char dir[256];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_cuda_digits"));
  char model[300];
  snprintf(model, sizeof model, "%s/digits.fgb", dir);
  FG_REQUIRE(run_builder(model) == 0);
  fg_status *st = fg_status_new();
  double cpu = train_digits(model, NULL, st);
  FG_CHECK(cpu >= 0.96);
  double gpu = train_digits(model, "cuda:0", st);
  if (gpu < 0) FG_FAIL_AT("cuda:0: %s", fg_status_message(st));
  printf("digits test accuracy: cpu %.4f, cuda:0 %.4f\n", cpu, gpu);
  FG_CHECK(gpu >= 0.96);
  FG_CHECK(fabs(gpu - cpu) <= 0.01);
  fg_status_free(st);
  fgt_rmtree(dir);
}
