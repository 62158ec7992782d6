/* fused_conv2d and fused_conv2d_add on a GPU ("cuda:0"; kernels/cuda/
 * conv.cu): conv2d -> add -> relu (or clip) with the conv_epilogue pass on (one
 * fused node) against the same chain on the CPU with the passes off
 * (within rounding: cuDNN's algorithms sum in other orders), and against
 * the same chain on the GPU with the passes off (the same bits: the fused
 * kernel makes conv2d's cuDNN call and then the add and relu kernels'
 * arithmetic). f32 and f64, bias or none, groups, strides and asymmetric
 * pads. Cases skip visibly without a CUDA build or a device (fail with
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

typedef struct gcase {
  fg_dtype dt;
  int64_t n, c, h, o, k, stride, groups;
  int64_t pads[4];
  int bias, add;
  int relu; /* 0 none, 1 relu, 2 clip(-0.25, 0.5) (relu6's form) */
} gcase;

static fg_output constant(fg_graph *g, const char *name, fg_dtype dt, int rank, const int64_t *dims,
                          int salt) {
  fg_tensor *t = fg_tensor_new(dt, rank, dims, NULL);
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++) {
    const double v = sin(0.37 * (double)(i + 1) + salt) * 0.8;
    if (dt == FG_F32)
      ((float *)fg_tensor_data(t))[i] = (float)v;
    else
      ((double *)fg_tensor_data(t))[i] = v;
  }
  fg_output o = fg_constant(g, name, t);
  fg_tensor_free(t);
  return o;
}

/* x, w, [b] and z constants; y = [relu](conv2d(x, w, b) [+ z]). */
static fg_graph *chain(const gcase *c) {
  fg_graph *g = fg_graph_new();
  const int64_t oh = (c->h + c->pads[0] + c->pads[2] - c->k) / c->stride + 1;
  const int64_t ow = (c->h + c->pads[1] + c->pads[3] - c->k) / c->stride + 1;
  const int64_t xd[4] = {c->n, c->c, c->h, c->h}, wd[4] = {c->o, c->c / c->groups, c->k, c->k};
  const int64_t bd[1] = {c->o}, zd[4] = {c->n, c->o, oh, ow};
  fg_conv2d_opts co = {{c->stride, c->stride},
                       {c->pads[0], c->pads[1], c->pads[2], c->pads[3]},
                       {1, 1},
                       c->groups,
                       0,
                       {0, 0}};
  fg_output y = fg_conv2d(g, constant(g, "x", c->dt, 4, xd, 1), constant(g, "w", c->dt, 4, wd, 2),
                          c->bias ? constant(g, "b", c->dt, 1, bd, 3) : FG_NO_OUTPUT, &co);
  if (c->add) y = fg_add(g, y, constant(g, "z", c->dt, 4, zd, 4));
  if (c->relu) y = c->relu == 2 ? fg_clip(g, y, -0.25, 0.5) : fg_relu(g, y);
  fg_set_name(g, y, "y");
  return g;
}

/* y on `device` with the pass list `passes` (no folding: the kernels must
 * run); the count of fused nodes the plan runs into *fused. */
static fg_tensor *run(fg_graph *g, const char *device, const char *passes) {
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = device;
  o.allow_tf32 = 0;
  o.passes = passes;
  fg_session *s = fg_session_new(g, &o, st);
  const char *fetch = "y";
  fg_tensor *out = NULL;
  if (s && fg_session_run(s, NULL, 0, &fetch, 1, &out, NULL, 0, st) != 0) out = NULL;
  if (!out) fprintf(stderr, "run on %s: %s\n", device, fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return out;
}

static double at(const fg_tensor *t, int64_t i) {
  return fg_tensor_dtype(t) == FG_F32 ? ((const float *)fg_tensor_data(t))[i]
                                      : ((const double *)fg_tensor_data(t))[i];
}

FG_TEST(gpu_fused_conv_vs_cpu_chain, "gpu") {
  NEED_GPU();
  static const gcase cases[] = {
      {FG_F32, 4, 8, 12, 16, 3, 1, 1, {1, 1, 1, 1}, 1, 1, 1},
      {FG_F32, 3, 4, 10, 6, 3, 2, 2, {1, 1, 1, 1}, 0, 0, 1},
      {FG_F32, 2, 16, 7, 16, 1, 1, 1, {0, 0, 0, 0}, 0, 1, 0},
      {FG_F32, 2, 3, 9, 5, 2, 1, 1, {0, 0, 1, 1}, 1, 1, 1}, /* asymmetric: a padded copy */
      {FG_F64, 2, 3, 8, 4, 3, 1, 1, {1, 1, 1, 1}, 1, 1, 1},
      {FG_F64, 2, 4, 6, 4, 3, 2, 1, {1, 1, 1, 1}, 1, 0, 0},
      {FG_F32, 4, 8, 12, 16, 3, 1, 1, {1, 1, 1, 1}, 1, 1, 2}, /* clip */
      {FG_F32, 3, 4, 10, 6, 3, 2, 2, {1, 1, 1, 1}, 0, 0, 2},
      {FG_F64, 2, 3, 8, 4, 3, 1, 1, {1, 1, 1, 1}, 1, 0, 2},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const gcase *c = &cases[k];
    fg_graph *g = chain(c);
    fg_tensor *cpu = run(g, "cpu:0", "dce");
    fg_tensor *off = run(g, "cuda:0", "dce");
    fg_tensor *on = run(g, "cuda:0", "conv_epilogue,dce");
    if (!cpu || !off || !on) {
      FG_FAIL_AT("case %zu: a run failed", k);
    } else {
      /* Sums of up to 144 products of size < 0.64 (FP32, no TF32). */
      const double tol = c->dt == FG_F64 ? 1e-12 : 1e-5;
      double worst = 0;
      for (int64_t i = 0; i < fg_tensor_num_elements(cpu); i++) {
        const double d = fabs(at(on, i) - at(cpu, i)) / (1 + fabs(at(cpu, i)));
        worst = d > worst || isnan(d) ? d : worst;
      }
      if (!(worst <= tol)) FG_FAIL_AT("case %zu: error %g above %g", k, worst, tol);
      if (!same_values(on, off)) FG_FAIL_AT("case %zu: fused and unfused GPU bits differ", k);
    }
    fg_tensor_free(cpu), fg_tensor_free(off), fg_tensor_free(on);
    fg_graph_free(g);
  }
}

/* The pass made the fused node for the GPU session too: fg_optimize with
 * the same list, and the plan's op. */
FG_TEST(gpu_fused_conv_plan_has_fused_node, "gpu") {
  NEED_GPU();
  const gcase c = {FG_F32, 2, 8, 8, 8, 3, 1, 1, {1, 1, 1, 1}, 1, 1, 1};
  fg_graph *g = chain(&c);
  fg_status *st = fg_status_new();
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = "cuda:0";
  o.passes = "conv_epilogue,dce";
  fg_session *s = fg_session_new(g, &o, st);
  const char *fetch = "y";
  fg_plan_info *pi = s ? fg_session_plan_info(s, NULL, 0, &fetch, 1, NULL, 0, st) : NULL;
  FG_REQUIRE(pi);
  int fused = 0, conv = 0;
  for (int i = 0; i < pi->n_steps; i++) {
    fused += strcmp(pi->step_ops ? pi->step_ops[i] : "", "fused_conv2d_add") == 0;
    conv += strcmp(pi->step_ops ? pi->step_ops[i] : "", "conv2d") == 0;
  }
  FG_CHECK_INT(fused, 1);
  FG_CHECK_INT(conv, 0);
  fg_plan_info_free(pi);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}
