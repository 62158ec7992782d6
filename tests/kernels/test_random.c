/* The random ops (random_uniform, random_normal, truncated_normal) and the
 * Philox4x32-10 generator under them (kernels/philox.h).
 *
 * Reference values: the Philox core against Random123's known-answer
 * vectors (tests/kat_vectors of the Random123 distribution, the three
 * "philox4x32 10" lines); the ops' values against tests/gen/random_ref.py,
 * a separate Python implementation of the generator and of the documented
 * mappings (run: python3 tests/gen/random_ref.py; it asserts the same
 * known answers first); statistics over 10^6 draws against the
 * distributions' moments; the CUDA kernels against the CPU kernels. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/graph.h"
#include "flowgraph/io.h"
#include "flowgraph/session.h"
#include "flowgraph/status.h"
#include "flowgraph/tensor.h"
#include "graph/op_table.h"
#include "kernels/kernel.h"
#include "kernels/philox.h"

#ifdef FG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_kernels.h"
#endif

/* ---- the generator ---------------------------------------------------------- */

/* Random123 tests/kat_vectors: counter (4 words), key (2 words), result. */
FG_TEST(random_philox_known_answers, "") {
  static const uint32_t kat[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
       0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
       0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int t = 0; t < 3; t++) {
    const uint32_t *k = kat[t];
    const fg_philox4 r = fg_philox4x32_10(k[0], k[1], k[2], k[3], k[4], k[5]);
    for (int i = 0; i < 4; i++)
      if (r.v[i] != k[6 + i])
        FG_FAIL_AT("vector %d word %d: %08x, want %08x", t, i, (unsigned)r.v[i],
                   (unsigned)k[6 + i]);
  }
  /* The ops' layout: the pi vector is block 0x85a308d3243f6a88 of stream
   * 0x13198a2e, draw 0x03707344, seed 0x299f31d0a4093822. */
  const fg_philox4 r =
      fg_philox_block(0x299f31d0a4093822ull, 0x13198a2e, 0x03707344, 0x85a308d3243f6a88ull);
  FG_CHECK(r.v[0] == 0xd16cfe09 && r.v[1] == 0x94fdcceb && r.v[2] == 0x5001e420 &&
           r.v[3] == 0x24126ea1);
}

/* ---- kernels, called directly ------------------------------------------------ */

static fg_op_params rparams(int64_t seed, int64_t stream, double a, double b) {
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.random.seed = seed;
  p.random.stream = stream;
  p.random.low = p.random.mean = a;
  p.random.high = p.random.stddev = b;
  return p;
}

/* Runs the CPU kernel of op for n elements of dt into out. */
static int run_cpu(const char *op, fg_dtype dt, int64_t n, const fg_op_params *p, void *out) {
  fg_kbuf o = {dt, 1, {n}, out, 0};
  char err[160] = "";
  fg_kctx ctx = {NULL, 0,    &o, 1, p, err, sizeof err, NULL, NULL, NULL,
                 NULL, NULL, 0,  0, 0, 0,   0,          0,    NULL};
  fg_kernel_fn fn = fg_cpu_kernel(op, dt);
  if (!fn) return -2;
  const int rc = fn(&ctx);
  if (rc) fprintf(stderr, "%s: %s\n", op, err);
  return rc;
}

/* Seed 0, stream 0: elements 0-3 of an f32 uniform are the top 24 bits of
 * the known answer for key (0, 0), counter (0, 0, 0, 0), times 2^-24:
 * 0x6627e8, 0xe169c5, 0xbc57ac, 0x9b00db. */
FG_TEST(random_uniform_from_known_answer_words, "") {
  const fg_op_params p = rparams(0, 0, 0.0, 1.0);
  float u[4];
  FG_REQUIRE(run_cpu("random_uniform", FG_F32, 4, &p, u) == 0);
  FG_CHECK(u[0] == 6694888.0f / 16777216.0f);
  FG_CHECK(u[1] == 14772677.0f / 16777216.0f);
  FG_CHECK(u[2] == 12343212.0f / 16777216.0f);
  FG_CHECK(u[3] == 10158299.0f / 16777216.0f);
  /* f64: 53 bits from words 0-1 and 2-3:
   * ((0x6627e8d5 >> 5) * 2^26 + (0xe169c58d >> 6)) * 2^-53. */
  double d[2];
  FG_REQUIRE(run_cpu("random_uniform", FG_F64, 2, &p, d) == 0);
  FG_CHECK(d[0] ==
           ((double)(0x6627e8d5u >> 5) * 67108864.0 + (double)(0xe169c58du >> 6)) * 0x1.0p-53);
  FG_CHECK(d[1] ==
           ((double)(0xbc57ac4cu >> 5) * 67108864.0 + (double)(0x9b00dbd8u >> 6)) * 0x1.0p-53);
}

/* Values printed by tests/gen/random_ref.py (seed 0x0123456789abcdef,
 * stream 7; uniform in [-2, 3); normal and truncated mean 1, stddev 2). The
 * sizes leave a partial last block. */
FG_TEST(random_values_match_python_reference, "") {
  const int64_t seed = 0x0123456789abcdefll;
  const fg_op_params pu = rparams(seed, 7, -2.0, 3.0), pn = rparams(seed, 7, 1.0, 2.0);
  static const double uf32[6] = {-0.9707773923873901, 0.7884092926979065, 2.956022262573242,
                                 1.2568490505218506,  2.875746965408325,  -1.3968623876571655};
  static const double uf64[3] = {-0.970777259853413, 2.9560222272340155, 2.8757470444078574};
  static const double nf32[6] = {-2.3249921798706055, -0.26075369119644165, 0.8455947637557983,
                                 0.7835865616798401,  1.3258624076843262,   1.3084321022033691};
  static const double nf64[3] = {4.550562188520656, 0.8035813764369606, 1.0134674171120144};
  static const double tf32[5] = {-2.3249921798706055, 1.3258624076843262, -1.4395384788513184,
                                 3.150289297103882, 4.0275115966796875};
  static const double tf64[5] = {4.550562188520656, 1.0134674171120144, -0.8722633199856356,
                                 -2.5494310208089033, 0.2715001510711401};
  float f[6];
  double d[6];
  FG_REQUIRE(run_cpu("random_uniform", FG_F32, 6, &pu, f) == 0);
  for (int i = 0; i < 6; i++)
    FG_CHECK(f[i] == (float)uf32[i]); /* exact arithmetic: the same bits */
  FG_REQUIRE(run_cpu("random_uniform", FG_F64, 3, &pu, d) == 0);
  for (int i = 0; i < 3; i++)
    FG_CHECK(d[i] == uf64[i]);
  /* Normals go through log, cos and sin: within an ulp of Python's. */
  FG_REQUIRE(run_cpu("random_normal", FG_F32, 6, &pn, f) == 0);
  for (int i = 0; i < 6; i++)
    FG_CHECK_NEAR(f[i], nf32[i], 2.5e-7 * fabs(nf32[i]));
  FG_REQUIRE(run_cpu("random_normal", FG_F64, 3, &pn, d) == 0);
  for (int i = 0; i < 3; i++)
    FG_CHECK_NEAR(d[i], nf64[i], 1e-14 * fabs(nf64[i]));
  FG_REQUIRE(run_cpu("truncated_normal", FG_F32, 5, &pn, f) == 0);
  for (int i = 0; i < 5; i++)
    FG_CHECK_NEAR(f[i], tf32[i], 2.5e-7 * fabs(tf32[i]));
  FG_REQUIRE(run_cpu("truncated_normal", FG_F64, 5, &pn, d) == 0);
  for (int i = 0; i < 5; i++)
    FG_CHECK_NEAR(d[i], tf64[i], 1e-14 * fabs(tf64[i]));
}

/* ---- through a session --------------------------------------------------------- */

/* Runs node `name` of g with `threads` threads; NULL on failure. */
static fg_tensor *run_node(fg_graph *g, const char *name, int threads) {
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.num_threads = threads;
  fg_session *s = fg_session_new(g, &o, st);
  fg_tensor *out = NULL;
  if (!s || fg_session_run(s, NULL, 0, &name, 1, &out, NULL, 0, st) != 0)
    fprintf(stderr, "run %s: %s\n", name, fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return out;
}

/* The stream of a node whose attribute is left at -1 is FNV-1a of its
 * name: "r" hashes to 4144776981 (tests/gen/random_ref.py). */
FG_TEST(random_default_stream_is_name_hash, "") {
  fg_graph *g = fg_graph_new();
  const int64_t d[1] = {9};
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "dtype", FG_F32);
  fg_attrs_set_ints(a, "shape", d, 1);
  fg_attrs_set_int(a, "seed", 5);
  fg_op(g, "random_uniform", "r", NULL, 0, a);
  fg_attrs_free(a);
  FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
  fg_tensor *t = run_node(g, "r", 1);
  FG_REQUIRE(t != NULL);
  float want[9];
  const fg_op_params p = rparams(5, 4144776981ll, 0.0, 1.0);
  FG_REQUIRE(run_cpu("random_uniform", FG_F32, 9, &p, want) == 0);
  FG_CHECK(memcmp(fg_tensor_data(t), want, sizeof want) == 0);
  fg_tensor_free(t);
  fg_graph_free(g);
}

static void moments(const fg_tensor *t, double *mean, double *sd, double *maxabs, double center) {
  const int64_t n = fg_tensor_num_elements(t);
  const int f32 = fg_tensor_dtype(t) == FG_F32;
  double s = 0, s2 = 0, m = 0;
  for (int64_t i = 0; i < n; i++) {
    const double v =
        f32 ? ((const float *)fg_tensor_data(t))[i] : ((const double *)fg_tensor_data(t))[i];
    s += v;
    s2 += v * v;
    if (fabs(v - center) > m) m = fabs(v - center);
  }
  *mean = s / (double)n;
  *sd = sqrt(s2 / (double)n - *mean * *mean);
  *maxabs = m;
}

/* 10^6 draws: uniform [0, 1) has mean 1/2 (standard error 0.0003) and
 * values in [0, 1); the normal mean 0 and stddev 1 (errors 0.001 and
 * 0.0007); the normal truncated at +-2 has no value beyond 2 and stddev
 * sqrt(1 - 4 phi(2) / (Phi(2) - Phi(-2))) = 0.8796. */
FG_TEST(random_statistics_million_draws, "") {
  const int64_t d[2] = {1000, 1000};
  for (int k = 0; k < 2; k++) {
    const fg_dtype dt = k ? FG_F64 : FG_F32;
    fg_graph *g = fg_graph_new();
    fg_output u = fg_random_uniform(g, dt, 2, d, 0.0, 1.0, 11);
    fg_output n = fg_random_normal(g, dt, 2, d, 0.0, 1.0, 12);
    fg_output t = fg_truncated_normal(g, dt, 2, d, 0.0, 1.0, 13);
    fg_output t2 = fg_truncated_normal(g, dt, 2, d, 3.0, 0.5, 13);
    FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
    double mean, sd, mx;
    fg_tensor *x = run_node(g, fg_node_name(g, u.node), 2);
    FG_REQUIRE(x != NULL);
    moments(x, &mean, &sd, &mx, 0.5);
    FG_CHECK_NEAR(mean, 0.5, 0.002);
    FG_CHECK_NEAR(sd, sqrt(1.0 / 12.0), 0.002);
    FG_CHECK(mx <= 0.5);
    fg_tensor_free(x);
    x = run_node(g, fg_node_name(g, n.node), 2);
    FG_REQUIRE(x != NULL);
    moments(x, &mean, &sd, &mx, 0.0);
    FG_CHECK_NEAR(mean, 0.0, 0.005);
    FG_CHECK_NEAR(sd, 1.0, 0.005);
    FG_CHECK(mx > 4.0); /* a normal's tail: P(|z| > 4) = 6.3e-5, ~63 of 10^6 */
    fg_tensor_free(x);
    x = run_node(g, fg_node_name(g, t.node), 2);
    FG_REQUIRE(x != NULL);
    moments(x, &mean, &sd, &mx, 0.0);
    FG_CHECK_NEAR(mean, 0.0, 0.005);
    FG_CHECK_NEAR(sd, 0.8796, 0.005);
    FG_CHECK(mx <= 2.0 && mx > 1.99);
    fg_tensor_free(x);
    x = run_node(g, fg_node_name(g, t2.node), 2);
    FG_REQUIRE(x != NULL);
    moments(x, &mean, &sd, &mx, 3.0);
    FG_CHECK_NEAR(mean, 3.0, 0.0025);
    FG_CHECK_NEAR(sd, 0.5 * 0.8796, 0.0025);
    FG_CHECK(mx <= 1.0);
    fg_tensor_free(x);
    fg_graph_free(g);
  }
}

/* The same seed gives the same bits with 1 and 2 threads (the range is
 * split over threads only above a few thousand elements); another seed, or
 * another node name with the same seed, different values. */
FG_TEST(random_same_bits_any_threads, "") {
  const int64_t d[1] = {100003};
  const char *ops[3] = {"random_uniform", "random_normal", "truncated_normal"};
  for (int k = 0; k < 6; k++) {
    const fg_dtype dt = k % 2 ? FG_F64 : FG_F32;
    fg_graph *g = fg_graph_new();
    fg_output o[3];
    for (int s = 0; s < 3; s++) {
      fg_attrs *a = fg_attrs_new();
      fg_attrs_set_int(a, "dtype", dt);
      fg_attrs_set_ints(a, "shape", d, 1);
      fg_attrs_set_int(a, "seed", s == 1 ? 99 : 98);
      const char *names[3] = {"a", "b", "c"};
      o[s] = fg_op(g, ops[k / 2], names[s], NULL, 0, a);
      fg_attrs_free(a);
    }
    (void)o;
    FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
    fg_tensor *one = run_node(g, "a", 1), *two = run_node(g, "a", 2);
    fg_tensor *seed99 = run_node(g, "b", 2), *other = run_node(g, "c", 2);
    FG_REQUIRE(one && two && seed99 && other);
    const size_t bytes = (size_t)d[0] * fg_dtype_size(dt);
    if (memcmp(fg_tensor_data(one), fg_tensor_data(two), bytes) != 0)
      FG_FAIL_AT("%s %s: 1 and 2 threads differ", ops[k / 2], fg_dtype_name(dt));
    int same_seed = 0, same_name = 0;
    for (int64_t i = 0; i < d[0]; i++) {
      const size_t es = fg_dtype_size(dt);
      same_seed += !memcmp((char *)fg_tensor_data(one) + i * es,
                           (char *)fg_tensor_data(seed99) + i * es, es);
      same_name +=
          !memcmp((char *)fg_tensor_data(one) + i * es, (char *)fg_tensor_data(other) + i * es, es);
    }
    /* Independent draws agree on an element with probability ~2^-24 (f32). */
    FG_CHECK(same_seed < 10);
    FG_CHECK(same_name < 10);
    fg_tensor_free(one);
    fg_tensor_free(two);
    fg_tensor_free(seed99);
    fg_tensor_free(other);
    fg_graph_free(g);
  }
}

/* A graph saved and loaded (.fgb in memory) draws the same values: the
 * stream comes from the saved name, the seed from the saved attribute. */
FG_TEST(random_same_values_after_save_and_load, "") {
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {33, 5};
  fg_set_name(g, fg_truncated_normal(g, FG_F64, 2, d, 0.5, 2.0, 1234), "init_w");
  FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
  void *bytes = NULL;
  size_t size = 0;
  FG_REQUIRE(fg_graph_save_memory(g, &bytes, &size, NULL) == 0);
  fg_graph *back = fg_graph_load_memory(bytes, size, NULL);
  FG_REQUIRE(back != NULL);
  fg_tensor *a = run_node(g, "init_w", 1), *b = run_node(back, "init_w", 2);
  FG_REQUIRE(a && b);
  FG_CHECK(memcmp(fg_tensor_data(a), fg_tensor_data(b), 33 * 5 * sizeof(double)) == 0);
  fg_tensor_free(a);
  fg_tensor_free(b);
  free(bytes);
  fg_graph_free(back);
  fg_graph_free(g);
}

/* ---- bad input -------------------------------------------------------------------- */

/* Builds node "bad" of op with the attributes set by `set` and expects
 * FG_INVALID_GRAPH whose message contains every `want`. */
static void expect_bad(const char *op, fg_attrs *a, const char *w1, const char *w2) {
  fg_graph *g = fg_graph_new();
  fg_status *st = fg_status_new();
  fg_op(g, op, "bad", NULL, 0, a);
  FG_CHECK_INT(fg_graph_status(g, st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "node 'bad'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), op);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), w1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), w2);
  fg_status_free(st);
  fg_graph_free(g);
  fg_attrs_free(a);
}

static fg_attrs *base(fg_dtype dt, int rank, const int64_t *dims) {
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "dtype", dt);
  fg_attrs_set_ints(a, "shape", dims, rank);
  return a;
}

FG_TEST(random_bad_inputs, "badinput") {
  const int64_t ok[2] = {2, 3}, neg[2] = {2, -3}, unk[2] = {-1, 3};
  const int64_t huge[3] = {1ll << 30, 1ll << 30, 1ll << 30};
  fg_attrs *a = base(FG_F32, 2, ok);
  fg_attrs_set_float(a, "low", 1.0);
  fg_attrs_set_float(a, "high", 1.0);
  expect_bad("random_uniform", a, "'low' = 1", "'high' = 1");
  a = base(FG_F32, 2, ok);
  fg_attrs_set_float(a, "low", 2.0);
  fg_attrs_set_float(a, "high", -1.0);
  expect_bad("random_uniform", a, "'low' = 2", "'high' = -1");
  a = base(FG_F64, 2, ok);
  fg_attrs_set_float(a, "stddev", 0.0);
  expect_bad("random_normal", a, "'stddev' = 0", "> 0");
  a = base(FG_F64, 2, ok);
  fg_attrs_set_float(a, "stddev", -1.5);
  expect_bad("truncated_normal", a, "'stddev' = -1.5", "> 0");
  expect_bad("random_normal", base(FG_F32, 2, neg), "[2,-3]", "negative dimension -3");
  expect_bad("truncated_normal", base(FG_F32, 2, unk), "[-1,3]", "negative dimension -1");
  expect_bad("random_uniform", base(FG_F32, 3, huge), "[1073741824,1073741824,1073741824]",
             "overflows");
  expect_bad("random_uniform", base(FG_I32, 2, ok), "'dtype' = i32", "f32 or f64");
  a = base(FG_F32, 2, ok);
  fg_attrs_set_float(a, "stdev", 2.0);
  expect_bad("random_normal", a, "unknown attribute 'stdev'; did you mean 'stddev'?",
             "stddev (float, default 1)");
  a = base(FG_F32, 2, ok);
  fg_attrs_set_int(a, "stream", -2);
  expect_bad("random_normal", a, "'stream' = -2", "2^32");
  /* The builders reach the same checks. */
  fg_graph *g = fg_graph_new();
  fg_random_uniform(g, FG_F32, 2, ok, 3.0, 2.0, 0);
  FG_CHECK_INT(fg_graph_status(g, NULL), FG_INVALID_GRAPH);
  fg_graph_free(g);
}

/* ---- the GPU against the CPU ----------------------------------------------------- */

/* Sizes with partial blocks, and one that spans many thread blocks. The
 * uniforms are exact arithmetic and must match bit for bit; the normals
 * go through the device's log/sin/cos (within 2 ulp of glibc's), so f64
 * may differ in the last bits and f32 (rounded from double) by an ulp. */
FG_TEST(cuda_random_vs_cpu, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) FG_SKIP_NO_GPU("no CUDA device");
  cudaStream_t stream;
  FG_REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  const char *ops[3] = {"random_uniform", "random_normal", "truncated_normal"};
  const int64_t sizes[4] = {1, 7, 4099, 1000003};
  for (int o = 0; o < 3; o++)
    for (int k = 0; k < 2; k++)
      for (int s = 0; s < 4; s++) {
        const fg_dtype dt = k ? FG_F64 : FG_F32;
        const int64_t n = sizes[s];
        const size_t es = fg_dtype_size(dt), bytes = (size_t)n * es;
        const fg_op_params p =
            o ? rparams(-7, 0xfedcba98ll, 0.25, 3.0) : rparams(-7, 0xfedcba98ll, -1.0, 4.0);
        void *want = malloc(bytes), *got = malloc(bytes), *dev = NULL;
        FG_REQUIRE(want && got && cudaMalloc(&dev, bytes) == cudaSuccess);
        FG_REQUIRE(run_cpu(ops[o], dt, n, &p, want) == 0);
        fg_kbuf out = {dt, 1, {n}, dev, 0};
        char err[160] = "";
        fg_kcuda kc = {stream, NULL, NULL, 0, NULL, 0};
        fg_kctx ctx = {NULL, 0,    &out, 1, &p, err, sizeof err, NULL, &kc, NULL,
                       NULL, NULL, 0,    0, 0,  0,   0,          0,    NULL};
        fg_kernel_fn fn = fg_cuda_kernel(ops[o], dt);
        FG_REQUIRE(fn != NULL);
        if (fn(&ctx) != 0) FG_FAIL_AT("%s: %s", ops[o], err);
        FG_REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
        FG_REQUIRE(cudaMemcpy(got, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
          const double g = k ? ((double *)got)[i] : ((float *)got)[i];
          const double w = k ? ((double *)want)[i] : ((float *)want)[i];
          /* A normal value is r cos(2 pi v) with r = sqrt(-2 log u) of
           * order 1: near a zero of the cosine the device's and the host's
           * libm (each within an ulp or two, not rounding alike) differ by
           * about an ulp of r, not of the value, so f64 gets that floor. */
          const double tol = o == 0 ? 0 : k ? 1e-14 * (fabs(w) + 1) : 2.5e-7 * (fabs(w) + 1e-3);
          if (!(fabs(g - w) <= tol) && bad++ < 5)
            fprintf(stderr, "  %s %s n=%lld [%lld]: gpu %.17g cpu %.17g\n", ops[o],
                    fg_dtype_name(dt), (long long)n, (long long)i, g, w);
        }
        if (bad)
          FG_FAIL_AT("%s %s n=%lld: %d mismatches", ops[o], fg_dtype_name(dt), (long long)n, bad);
        cudaFree(dev);
        free(want);
        free(got);
      }
  cudaStreamDestroy(stream);
#endif
}

/* A whole session on the GPU ("cuda:0") fetches what a CPU session does:
 * the uniforms bit for bit. */
FG_TEST(cuda_random_session_matches_cpu, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) FG_SKIP_NO_GPU("no CUDA device");
  fg_graph *g = fg_graph_new();
  const int64_t d[2] = {257, 9};
  fg_set_name(g, fg_random_uniform(g, FG_F32, 2, d, -3.0, 3.0, 77), "u");
  FG_REQUIRE(fg_graph_status(g, NULL) == FG_OK);
  fg_tensor *cpu = run_node(g, "u", 2);
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = "cuda:0";
  fg_session *s = fg_session_new(g, &o, st);
  const char *fetch = "u";
  fg_tensor *gpu = NULL;
  if (!s || fg_session_run(s, NULL, 0, &fetch, 1, &gpu, NULL, 0, st) != 0)
    FG_FAIL_AT("cuda session: %s", fg_status_message(st));
  FG_REQUIRE(cpu && gpu);
  FG_CHECK(memcmp(fg_tensor_data(cpu), fg_tensor_data(gpu), 257 * 9 * sizeof(float)) == 0);
  fg_tensor_free(cpu);
  fg_tensor_free(gpu);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
#endif
}
