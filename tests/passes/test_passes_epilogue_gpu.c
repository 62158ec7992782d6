/* fused_matmul on a GPU ("cuda:0"), against a double loop computed here:
 * the cuBLASLt epilogue (f32, FP32 and TF32, relu and none, both
 * transposes), the cuBLAS product with the bias kernel (f64, and an f32
 * batched product with a per-batch b, which cuBLASLt is not given), and
 * an MLP training session on the GPU whose losses with the passes on
 * (fused) stay within rounding of those with them off. Cases skip
 * visibly without a CUDA build or a device (fail with FG_REQUIRE_GPU=1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "executor/cuda_backend.h"
#include "test_passes_util.h"

#define NEED_GPU()                                                                                 \
  do {                                                                                             \
    if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA build or no CUDA device");             \
  } while (0)

static double value(int i, int salt) { return sin(0.37 * (i + 1) + salt) * 0.8; }

static fg_tensor *tensor(fg_dtype dt, int rank, const int64_t *dims, int salt) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)value((int)i, salt);
    else
      ((double *)fg_tensor_data(t))[i] = value((int)i, salt);
  return t;
}

static double at(const fg_tensor *t, int64_t i) {
  return fg_tensor_dtype(t) == FG_F32 ? ((const float *)fg_tensor_data(t))[i]
                                      : ((const double *)fg_tensor_data(t))[i];
}

typedef struct gcase {
  fg_dtype dt;
  int ar, br;
  int64_t ad[3], bd[3];
  int ta, tb, relu, tf32;
} gcase;

/* act(op(a) @ op(b) + bias) element (batch bi, i, j) in double. */
static double ref(const gcase *c, const fg_tensor *a, const fg_tensor *b, const fg_tensor *bias,
                  int64_t bi, int64_t i, int64_t j, int64_t M, int64_t N, int64_t K) {
  const int64_t ab = c->ar == 3 ? bi * M * K : 0, bb = c->br == 3 ? bi * K * N : 0;
  double s = at(bias, j);
  for (int64_t k = 0; k < K; k++)
    s += at(a, ab + (c->ta ? k * M + i : i * K + k)) * at(b, bb + (c->tb ? j * K + k : k * N + j));
  return c->relu && s < 0 ? 0 : s;
}

/* One fused_matmul node on cuda:0; the largest error against ref, scaled
 * by 1 + |ref|, or 1e30 when the run fails. */
static double run_case(const gcase *c) {
  fg_graph *g = fg_graph_new();
  const int r = c->ar > c->br ? c->ar : c->br;
  const int64_t M = c->ta ? c->ad[c->ar - 1] : c->ad[c->ar - 2];
  const int64_t K = c->ta ? c->ad[c->ar - 2] : c->ad[c->ar - 1];
  const int64_t N = c->tb ? c->bd[c->br - 2] : c->bd[c->br - 1], batch = r == 3 ? c->ad[0] : 1;
  fg_tensor *a = tensor(c->dt, c->ar, c->ad, 1), *b = tensor(c->dt, c->br, c->bd, 2);
  fg_tensor *bias = tensor(c->dt, 1, &N, 3);
  fg_output y =
      fg_fused_matmul(g, fg_constant(g, "a", a), fg_constant(g, "b", b),
                      fg_constant(g, "bias", bias), c->ta, c->tb, c->relu ? "relu" : "none");
  fg_set_name(g, y, "y");
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = "cuda:0";
  o.allow_tf32 = c->tf32;
  o.passes = "dce"; /* no folding: the GPU kernel must run */
  fg_session *s = fg_session_new(g, &o, st);
  const char *fetch = "y";
  fg_tensor *out = NULL;
  double worst = 1e30;
  if (s && fg_session_run(s, NULL, 0, &fetch, 1, &out, NULL, 0, st) == 0) {
    worst = 0;
    for (int64_t bi = 0; bi < batch; bi++)
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
          const double want = ref(c, a, b, bias, bi, i, j, M, N, K);
          const double d = fabs(at(out, (bi * M + i) * N + j) - want) / (1 + fabs(want));
          worst = d > worst || isnan(d) ? d : worst;
        }
  } else {
    fprintf(stderr, "run: %s\n", fg_status_message(st));
  }
  fg_tensor_free(out), fg_tensor_free(a), fg_tensor_free(b), fg_tensor_free(bias);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
  return worst;
}

FG_TEST(gpu_fused_matmul_vs_double, "gpu") {
  NEED_GPU();
  static const gcase cases[] = {
      {FG_F32, 2, 2, {64, 96}, {96, 40}, 0, 0, 1, 0},
      {FG_F32, 2, 2, {96, 64}, {40, 96}, 1, 1, 1, 0},
      {FG_F32, 2, 2, {7, 33}, {5, 33}, 0, 1, 0, 0},
      {FG_F32, 2, 2, {256, 512}, {512, 384}, 0, 0, 1, 1}, /* TF32 */
      {FG_F32, 3, 2, {3, 20, 9}, {9, 11}, 0, 0, 1, 0},    /* stacked over b */
      {FG_F32, 3, 3, {3, 20, 9}, {3, 9, 11}, 0, 0, 1, 0}, /* per batch: cuBLAS */
      {FG_F64, 2, 2, {64, 96}, {96, 40}, 0, 0, 1, 0},
      {FG_F64, 2, 2, {96, 64}, {40, 96}, 1, 1, 0, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const gcase *c = &cases[k];
    /* FP32 sums of up to 512 terms of size < 1; TF32 rounds the inputs
     * to 10 mantissa bits; f64 near its epsilon. */
    const double tol = c->dt == FG_F64 ? 1e-12 : c->tf32 ? 2e-2 : 1e-5;
    const double worst = run_case(c);
    if (!(worst <= tol)) FG_FAIL_AT("case %zu: error %g above %g", k, worst, tol);
  }
}

/* The MLP training step on the GPU, fused (passes on) and not: losses
 * within f32 rounding of each other over 4 steps (cuBLASLt's algorithm
 * may sum in another order than cuBLAS's GEMM). */
FG_TEST(gpu_epilogue_mlp_training_close_to_unfused, "gpu") {
  NEED_GPU();
  float losses[2][4];
  for (int off = 0; off < 2; off++) {
    fg_graph *g = fg_graph_new();
    const int64_t xd[2] = {32, 48}, yd[1] = {32}, widths[4] = {48, 64, 32, 10};
    fg_output h = fg_placeholder(g, "x", FG_F32, 2, xd), y = fg_placeholder(g, "y", FG_I32, 1, yd);
    for (int l = 0; l < 3; l++) {
      const int64_t wd[2] = {widths[l], widths[l + 1]}, bd[1] = {widths[l + 1]};
      fg_tensor *w = tensor(FG_F32, 2, wd, l), *b = tensor(FG_F32, 1, bd, 7 + l);
      char wn[16], bn[16];
      snprintf(wn, sizeof wn, "w%d", l), snprintf(bn, sizeof bn, "b%d", l);
      h = fg_add(g, fg_matmul(g, h, fg_variable(g, wn, w), 0, 0), fg_variable(g, bn, b));
      if (l < 2) h = fg_relu(g, h);
      fg_tensor_free(w), fg_tensor_free(b);
    }
    fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, h, y), "loss");
    fg_optimizer_config cfg;
    fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
    cfg.learning_rate = 0.05;
    fg_output t = fg_minimize(g, loss, NULL, 0, &cfg, NULL);
    const char *target = fg_node_name(g, t.node), *fetch = "loss";
    fg_tensor *x = tensor(FG_F32, 2, xd, 5), *yt = fg_tensor_new(FG_I32, 1, yd, NULL);
    for (int i = 0; i < 32; i++)
      ((int32_t *)fg_tensor_data(yt))[i] = i % 10;
    fg_feed feeds[2] = {{"x", x}, {"y", yt}};
    fg_status *st = fg_status_new();
    fg_session_options o;
    fg_session_options_init(&o);
    o.device = "cuda:0";
    o.no_passes = off;
    fg_session *s = fg_session_new(g, &o, st);
    for (int i = 0; i < 4; i++) {
      fg_tensor *l = NULL;
      FG_CHECK(s && fg_session_run(s, feeds, 2, &fetch, 1, &l, &target, 1, st) == 0);
      losses[off][i] = l ? *(float *)fg_tensor_data(l) : NAN;
      fg_tensor_free(l);
    }
    fg_session_free(s);
    fg_status_free(st);
    fg_tensor_free(x), fg_tensor_free(yt);
    fg_graph_free(g);
  }
  for (int i = 0; i < 4; i++)
    FG_CHECK(fabsf(losses[0][i] - losses[1][i]) <= 1e-5f * (1 + fabsf(losses[1][i])));
  FG_CHECK(losses[0][3] < losses[0][0]);
}
