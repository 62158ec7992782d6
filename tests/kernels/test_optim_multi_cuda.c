/* Multi-tensor optimizer updates on the GPU (kernels/cuda/optim.cu): one
 * fgc_multi_apply_* call over a list of variables gives, bit for bit, what
 * the single-variable CUDA kernels give one variable at a time, over lists
 * longer than one launch's table (32) and sizes around its chunks. The
 * case is labelled "gpu": without CUDA in the build or without a device it
 * says why and skips (fails with FG_REQUIRE_GPU=1). */
#include <stdlib.h>
#include <string.h>

#include "fgtest.h"
#include "kernels/kernel.h"
#include "test_kernels_util.h"

#ifdef FG_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cpu/optim_multi.h"
#include "kernels/cuda/cuda_kernels.h"

enum { NV = 35, MAXL = 4 };

static int64_t size_of(int k) { return k == 3 ? 0 : k == 5 ? 9000 : k == 7 ? 4096 : 1 + k * 37; }

typedef struct dev_set {
  void *d[MAXL][NV];
} dev_set;

/* Device copies of the host tensors h (lists x variables). */
static void upload(void *const h[MAXL][NV], int lists, size_t es, dev_set *s) {
  for (int l = 0; l < lists; l++)
    for (int k = 0; k < NV; k++) {
      const size_t bytes = (size_t)size_of(k) * es;
      cudaMalloc(&s->d[l][k], bytes + 16);
      cudaMemcpy(s->d[l][k], h[l][k], bytes, cudaMemcpyHostToDevice);
    }
}

/* 1 when every state tensor (all lists but the gradient) has equal bits. */
static int same_on_host(const dev_set *a, const dev_set *b, int lists, size_t es) {
  int same = 1;
  for (int l = 0; l < lists - 1; l++)
    for (int k = 0; k < NV; k++) {
      const size_t bytes = (size_t)size_of(k) * es;
      char *x = malloc(bytes + 1), *y = malloc(bytes + 1);
      cudaMemcpy(x, a->d[l][k], bytes, cudaMemcpyDeviceToHost);
      cudaMemcpy(y, b->d[l][k], bytes, cudaMemcpyDeviceToHost);
      same = same && memcmp(x, y, bytes) == 0;
      free(x), free(y);
    }
  return same;
}

static fg_kbuf dbuf(fg_dtype dt, int64_t n, void *d) {
  return (fg_kbuf){.dtype = dt, .rank = 1, .dims = {n}, .data = d};
}

static void check_rule(int rule, fg_dtype dt, fg_kcuda *kc, void *lr_d, void *step_d) {
  static const char *const single[] = {"apply_sgd", "apply_momentum", "apply_adam"};
  fg_kernel_fn one = fg_cuda_kernel(single[rule], dt);
  fg_kernel_fn multi[2][3] = {
      {fgc_multi_apply_sgd_f32, fgc_multi_apply_momentum_f32, fgc_multi_apply_adam_f32},
      {fgc_multi_apply_sgd_f64, fgc_multi_apply_momentum_f64, fgc_multi_apply_adam_f64}};
  const int lists = rule + 2, f64 = dt == FG_F64;
  const size_t es = f64 ? 8 : 4;
  FG_REQUIRE(one);
  void *h[MAXL][NV];
  uint64_t seed = 77 + (uint64_t)rule;
  for (int l = 0; l < lists; l++)
    for (int k = 0; k < NV; k++) {
      h[l][k] = malloc((size_t)size_of(k) * es + 1);
      for (int64_t i = 0; i < size_of(k); i++) {
        const double u = rng_unit(&seed);
        elem_store(h[l][k], dt, i, rule == 2 && l == 2 ? u * u : u);
      }
    }
  fg_op_params p;
  memset(&p, 0, sizeof p);
  p.momentum = (fg_momentum_params){0.9, 1};
  p.adam = (fg_adam_params){0.9, 0.999, 1e-8, 0.01, 0.001};
  fg_op_params pm;
  memset(&pm, 0, sizeof pm);
  pm.multi_update.n = NV;
  pm.multi_update.momentum = p.momentum;
  pm.multi_update.adam = p.adam;
  dev_set a, b;
  upload((void *const(*)[NV])h, lists, es, &a);
  upload((void *const(*)[NV])h, lists, es, &b);
  char err[256] = "";
  fg_kbuf sc[2] = {{.dtype = FG_F64, .rank = 0, .data = lr_d},
                   {.dtype = FG_F64, .rank = 0, .data = step_d}};
  for (int k = 0; k < NV; k++) { /* one variable at a time */
    fg_kbuf in[6], out = dbuf(dt, size_of(k), a.d[0][k]);
    for (int l = 0; l < lists; l++)
      in[l] = dbuf(dt, size_of(k), a.d[l][k]);
    in[lists] = sc[0], in[lists + 1] = sc[1];
    fg_kctx c = {.in = in,
                 .n_in = lists + 1 + (rule == 2),
                 .out = &out,
                 .n_out = 1,
                 .p = &p,
                 .err = err,
                 .err_size = sizeof err,
                 .cuda = kc};
    FG_CHECK_INT(one(&c), 0);
  }
  fg_kbuf in[MAXL * NV + 2], out[1];
  for (int l = 0; l < lists; l++)
    for (int k = 0; k < NV; k++)
      in[l * NV + k] = dbuf(dt, size_of(k), b.d[l][k]);
  in[lists * NV] = sc[0], in[lists * NV + 1] = sc[1];
  out[0] = in[0];
  fg_kctx c = {.in = in,
               .n_in = lists * NV + 1 + (rule == 2),
               .out = out,
               .n_out = 1,
               .p = &pm,
               .err = err,
               .err_size = sizeof err,
               .cuda = kc};
  FG_CHECK_INT(multi[f64][rule](&c), 0);
  FG_CHECK_INT(cudaStreamSynchronize((cudaStream_t)kc->stream), cudaSuccess);
  if (!same_on_host(&a, &b, lists, es))
    FG_FAIL_AT("%s %s: multi-tensor kernel differs", single[rule], fg_dtype_name(dt));
  for (int l = 0; l < lists; l++)
    for (int k = 0; k < NV; k++)
      cudaFree(a.d[l][k]), cudaFree(b.d[l][k]), free(h[l][k]);
}
#endif

FG_TEST(cuda_multi_updates_match_single_bitwise, "gpu") {
#ifndef FG_HAVE_CUDA
  FG_SKIP_NO_GPU("this build has no CUDA backend");
#else
  FG_SKIP_NO_CUDA_DEVICE();
  cudaStream_t stream;
  void *flag = NULL, *lr_d = NULL, *step_d = NULL;
  const double lr = 0.01, step = 4;
  FG_REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  FG_REQUIRE(cudaMalloc(&flag, 4096) == cudaSuccess && cudaMemset(flag, 0, 4096) == cudaSuccess);
  cudaMalloc(&lr_d, 8), cudaMalloc(&step_d, 8);
  cudaMemcpy(lr_d, &lr, 8, cudaMemcpyHostToDevice);
  cudaMemcpy(step_d, &step, 8, cudaMemcpyHostToDevice);
  fg_kcuda kc = {.stream = stream, .error_flag = (int *)flag};
  for (int rule = 0; rule < 3; rule++) {
    check_rule(rule, FG_F32, &kc, lr_d, step_d);
    check_rule(rule, FG_F64, &kc, lr_d, step_d);
  }
  cudaFree(flag), cudaFree(lr_d), cudaFree(step_d);
  cudaStreamDestroy(stream);
#endif
}
