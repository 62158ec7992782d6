/* The gradient epilogue ops on a GPU ("cuda:0") against the same nodes
 * on the CPU: fused_matmul_relu_grad (cuBLAS, then the mask kernel; f32
 * and f64, transposes, a batched product), whose masked elements must be
 * exactly +0.0 and whose kept ones agree within the GEMM's rounding; and
 * matmul_bias_grad (f32: one cuBLASLt matmul with the BGRADA epilogue;
 * f64: cuBLAS and sum_to's reduction), dw and db within rounding. Cases
 * skip visibly without a CUDA build or a device (fail with
 * FG_REQUIRE_GPU=1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "executor/cuda_backend.h"
#include "test_passes_util.h"

#define NEED_GPU()                                                                                 \
  do {                                                                                             \
    if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA build or no CUDA device");             \
  } while (0)

/* Values in [-0.9, 0.9]; with `special`, every 11th is NaN, -0.0 or +0.0
 * in turn (y's cases the mask must get right). */
static fg_tensor *gvals(fg_dtype dt, int rank, const int64_t *dims, int salt, int special) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  static const double sp[3] = {NAN, -0.0, 0.0};
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++) {
    double v = special && i % 11 == 4 ? sp[(i / 11) % 3] : 0.9 * sin(0.29 * (i + 1) + salt);
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)v;
    else
      ((double *)fg_tensor_data(t))[i] = v;
  }
  return t;
}

static double gat(const fg_tensor *t, int64_t i) {
  return fg_tensor_dtype(t) == FG_F32 ? ((const float *)fg_tensor_data(t))[i]
                                      : ((const double *)fg_tensor_data(t))[i];
}

/* Runs `fetch` (n outputs) of g on `device` (NULL: the CPU) with the passes
 * off (the node runs as built), into out[]. 0 or -1. */
static int run_on(fg_graph *g, const char *device, const char **fetch, int n, fg_tensor **out) {
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = device;
  o.no_passes = 1;
  fg_session *s = fg_session_new(g, &o, st);
  int rc = s ? fg_session_run(s, NULL, 0, fetch, n, out, NULL, 0, st) : -1;
  if (rc != 0)
    fprintf(stderr, "run on %s: %s\n", device ? device : "the CPU", fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

/* The largest difference of a and b scaled by 1 + |b|; 1e30 where a
 * masked element (b exactly +0.0 with mask false) is not +0.0 or the
 * NaNs differ. */
static double worst_diff(const fg_tensor *a, const fg_tensor *b) {
  double w = 0;
  for (int64_t i = 0; i < fg_tensor_num_elements(b); i++) {
    const double x = gat(a, i), y = gat(b, i);
    if (isnan(x) || isnan(y)) {
      if (isnan(x) != isnan(y)) return 1e30;
      continue;
    }
    if (y == 0 && !signbit(y) && (x != 0 || signbit(x))) return 1e30;
    const double d = fabs(x - y) / (1 + fabs(y));
    w = d > w ? d : w;
  }
  return w;
}

FG_TEST(gpu_fused_matmul_relu_grad_vs_cpu, "gpu") {
  NEED_GPU();
  static const struct {
    fg_dtype dt;
    int rank, ta, tb;
    int64_t ad[3], bd[3], od[3];
  } cases[] = {
      {FG_F32, 2, 0, 1, {64, 40}, {96, 40}, {64, 96}}, /* dX = dZ W^T */
      {FG_F32, 2, 1, 0, {40, 64}, {40, 96}, {64, 96}},
      {FG_F32, 3, 0, 0, {3, 20, 9}, {9, 11}, {3, 20, 11}},
      {FG_F64, 2, 0, 1, {33, 17}, {29, 17}, {33, 29}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    fg_graph *g = fg_graph_new();
    const int rb = 2, ra = cases[k].rank;
    fg_tensor *a = gvals(cases[k].dt, ra, cases[k].ad, 1, 1);
    fg_tensor *b = gvals(cases[k].dt, rb, cases[k].bd, 2, 0);
    fg_tensor *y = gvals(cases[k].dt, ra, cases[k].od, 3, 1);
    fg_set_name(g,
                fg_fused_matmul_relu_grad(g, fg_constant(g, "a", a), fg_constant(g, "b", b),
                                          fg_constant(g, "y", y), cases[k].ta, cases[k].tb),
                "rg");
    const char *fetch = "rg";
    fg_tensor *gpu = NULL, *cpu = NULL;
    FG_CHECK(run_on(g, "cuda:0", &fetch, 1, &gpu) == 0 && run_on(g, NULL, &fetch, 1, &cpu) == 0);
    const double tol = cases[k].dt == FG_F64 ? 1e-12 : 1e-5;
    const double w = gpu && cpu ? worst_diff(gpu, cpu) : 1e30;
    if (!(w <= tol)) FG_FAIL_AT("case %zu: difference %g above %g", k, w, tol);
    fg_tensor_free(gpu), fg_tensor_free(cpu);
    fg_tensor_free(a), fg_tensor_free(b), fg_tensor_free(y);
    fg_graph_free(g);
  }
}

FG_TEST(gpu_matmul_bias_grad_vs_cpu, "gpu") {
  NEED_GPU();
  static const struct {
    fg_dtype dt;
    int64_t R, K, N;
  } cases[] = {
      {FG_F32, 128, 64, 32}, {FG_F32, 33, 17, 9}, {FG_F32, 256, 512, 384}, {FG_F64, 64, 48, 40}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    fg_graph *g = fg_graph_new();
    const int64_t ad[2] = {cases[k].R, cases[k].K}, dd[2] = {cases[k].R, cases[k].N};
    fg_tensor *a = gvals(cases[k].dt, 2, ad, 4, 0), *dz = gvals(cases[k].dt, 2, dd, 5, 0);
    fg_output o = fg_matmul_bias_grad(g, fg_constant(g, "a", a), fg_constant(g, "dz", dz));
    fg_set_name(g, o, "bg");
    const char *fetch[2] = {"bg:0", "bg:1"};
    fg_tensor *gpu[2] = {NULL, NULL}, *cpu[2] = {NULL, NULL};
    FG_CHECK(run_on(g, "cuda:0", fetch, 2, gpu) == 0 && run_on(g, NULL, fetch, 2, cpu) == 0);
    /* Sums of R terms below 1 in size: FP32 error grows with R. */
    const double tol = cases[k].dt == FG_F64 ? 1e-12 : 1e-6 * (double)cases[k].R;
    for (int i = 0; i < 2; i++) {
      const double w = gpu[i] && cpu[i] ? worst_diff(gpu[i], cpu[i]) : 1e30;
      if (!(w <= tol)) FG_FAIL_AT("case %zu output %d: difference %g above %g", k, i, w, tol);
      fg_tensor_free(gpu[i]), fg_tensor_free(cpu[i]);
    }
    fg_tensor_free(a), fg_tensor_free(dz);
    fg_graph_free(g);
  }
}
