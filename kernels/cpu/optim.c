/* Optimizer updates: apply_sgd, apply_momentum, apply_adam, following
 * torch.optim's single-tensor (for-loop) implementations.
 *
 * The state inputs (var; buf; m, v) are the variables' own storage, handed
 * over by the executor (op_def.mutable_inputs), and are updated in place;
 * out[0] is the variable's storage too, so nothing is copied unless a
 * caller passes a separate output buffer. Per-element arithmetic is in the
 * variable's dtype; the scalars (lr, bias corrections) are computed in
 * double and converted once, as PyTorch does with Python-float
 * hyper-parameters. Control inputs after the fixed ones are ignored. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/optim_job.h"
#include "kernels/sgd.h"

/* A rank-0 numeric input as a double. */
int fgk_scalar_in(const fg_kctx *ctx, int i, const char *what, double *v) {
  const fg_kbuf *b = &ctx->in[i];
  if (b->rank != 0) return fgk_fail(ctx, "input %d (%s) has rank %d, expected 0", i, what, b->rank);
  switch (b->dtype) {
  case FG_F32: *v = *(const float *)b->data; break;
  case FG_F64: *v = *(const double *)b->data; break;
  case FG_I32: *v = *(const int32_t *)b->data; break;
  case FG_I64: *v = (double)*(const int64_t *)b->data; break;
  default: return fgk_fail(ctx, "input %d (%s) is %s", i, what, fg_dtype_name(b->dtype));
  }
  return 0;
}

/* Inputs 0..n_state (the var, its state and the gradient) must all be the
 * variable's dtype and element count. Shared with kernels/cuda/optim.cu. */
int fgk_optim_check(const fg_kctx *ctx, fg_dtype dt, int n) {
  const int64_t count = fgk_numel(&ctx->in[0]);
  if (ctx->out[0].dtype != dt || fgk_numel(&ctx->out[0]) != count)
    return fgk_fail(ctx, "output is %s with %lld elements, the variable %s with %lld",
                    fg_dtype_name(ctx->out[0].dtype), (long long)fgk_numel(&ctx->out[0]),
                    fg_dtype_name(dt), (long long)count);
  for (int i = 0; i < n; i++)
    if (ctx->in[i].dtype != dt || fgk_numel(&ctx->in[i]) != count)
      return fgk_fail(ctx, "input %d is %s with %lld elements, expected %s with %lld", i,
                      fg_dtype_name(ctx->in[i].dtype), (long long)fgk_numel(&ctx->in[i]),
                      fg_dtype_name(dt), (long long)count);
  return 0;
}

int fgk_sgd_product_check(const fg_kctx *ctx, int64_t *rows) {
  const fg_kbuf *v = &ctx->in[0], *a = &ctx->in[1], *b = &ctx->in[3];
  const fg_dtype dt = v->dtype;
  if (ctx->n_in < 4 || v->rank != 2 || a->rank != 2 || b->rank != 2 || a->dtype != dt ||
      b->dtype != dt || a->dims[0] != b->dims[0] || a->dims[1] != v->dims[0] ||
      b->dims[1] != v->dims[1])
    return fgk_fail(ctx,
                    "input 1 (a) %s [%lld, %lld] and input 3 (b) %s [%lld, %lld] "
                    "must be [rows, m] and [rows, n] for input 0 (var) %s [%lld, %lld]",
                    fg_dtype_name(a->dtype), (long long)a->dims[0], (long long)a->dims[1],
                    fg_dtype_name(b->dtype), (long long)b->dims[0], (long long)b->dims[1],
                    fg_dtype_name(dt), (long long)v->dims[0], (long long)v->dims[1]);
  *rows = a->dims[0];
  if (*rows > INT32_MAX || v->dims[0] > INT32_MAX || v->dims[1] > INT32_MAX)
    return fgk_fail(ctx, "the product [%lld, %lld] x [%lld, %lld] exceeds the GEMM's index type",
                    (long long)*rows, (long long)v->dims[0], (long long)*rows,
                    (long long)v->dims[1]);
  return 0;
}

/* For direct callers that pass an output buffer other than the variable. */
void fgk_optim_publish(const fg_kctx *ctx, size_t es) {
  if (ctx->out[0].data != ctx->in[0].data && fgk_numel(&ctx->out[0]) > 0)
    memcpy(ctx->out[0].data, ctx->in[0].data, (size_t)fgk_numel(&ctx->out[0]) * es);
}

/* var -= lr * grad (kernels/sgd.h) */
#define FGK_SGD(fn, T, DT)                                                                         \
  void fn##_range(void *arg, int64_t i0, int64_t i1) {                                             \
    const opt_job *J = (const opt_job *)arg;                                                       \
    T *var = (T *)J->var + i0;                                                                     \
    void *dst[1] = {var};                                                                          \
    fgk_sgd_to(DT, dst, 1, var, (const T *)J->g + i0, i1 - i0, J->lr);                             \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    double lr;                                                                                     \
    if (fgk_check(ctx, 3, 1) != 0 || fgk_optim_check(ctx, DT, 2) != 0 ||                           \
        fgk_scalar_in(ctx, 2, "lr", &lr) != 0)                                                     \
      return -1;                                                                                   \
    opt_job J = {.var = ctx->in[0].data, .g = ctx->in[1].data, .lr = lr};                          \
    fgk_parallel_for(ctx, fgk_numel(&ctx->in[0]), FGK_GRAIN_CHEAP, fn##_range, &J);                \
    fgk_optim_publish(ctx, sizeof(T));                                                             \
    return 0;                                                                                      \
  }
FGK_SGD(fgk_apply_sgd_f32, float, FG_F32)
FGK_SGD(fgk_apply_sgd_f64, double, FG_F64)

void fgk_sgd_product_apply(const fg_kctx *ctx, double lr, int64_t rows) {
  const fg_kbuf *v = &ctx->in[0];
  const int64_t m = v->dims[0], n = v->dims[1];
  fgk_gemm_tn((void *)ctx, v->dtype, m, n, rows, -lr, ctx->in[1].data, m, ctx->in[3].data, n, 1.0,
              v->data, n);
}

/* matmul_apply_sgd: var -= lr * a^T b, the product added into var by its
 * GEMM (alpha -lr, beta 1; kernels/cpu/matmul.c), so the gradient is
 * never stored or read back. Each element is rounded where the GEMM
 * rounds (var + (-lr) * sum, after the sum), not as apply_sgd of a stored
 * gradient, var - lr * round(sum): the bits may differ from the unfused
 * pair, within the rounding of the update's terms. */
static int matmul_sgd(const fg_kctx *ctx, fg_dtype dt) {
  double lr;
  int64_t rows;
  if (fgk_check(ctx, 4, 1) != 0 || fgk_optim_check(ctx, dt, 1) != 0 ||
      fgk_scalar_in(ctx, 2, "lr", &lr) != 0 || fgk_sgd_product_check(ctx, &rows) != 0)
    return -1;
  fgk_sgd_product_apply(ctx, lr, rows);
  fgk_optim_publish(ctx, dt == FG_F64 ? sizeof(double) : sizeof(float));
  return 0;
}
int fgk_matmul_apply_sgd_f32(const fg_kctx *ctx) { return matmul_sgd(ctx, FG_F32); }
int fgk_matmul_apply_sgd_f64(const fg_kctx *ctx) { return matmul_sgd(ctx, FG_F64); }

/* torch.optim.SGD (dampening 0): buf = mom*buf + grad;
 * var -= lr * (nesterov ? grad + mom*buf : buf). */
#define FGK_MOMENTUM(fn, T, DT)                                                                    \
  void fn##_range(void *arg, int64_t i0, int64_t i1) {                                             \
    const opt_job *J = (const opt_job *)arg;                                                       \
    T *var = (T *)J->var, *buf = (T *)J->buf;                                                      \
    const T *g = (const T *)J->g;                                                                  \
    const T a = (T)J->lr, mom = (T)J->mom;                                                         \
    const int nesterov = J->nesterov;                                                              \
    for (int64_t i = i0; i < i1; i++) {                                                            \
      const T b = mom * buf[i] + g[i];                                                             \
      buf[i] = b;                                                                                  \
      var[i] -= a * (nesterov ? g[i] + mom * b : b);                                               \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    double lr;                                                                                     \
    if (fgk_check(ctx, 4, 1) != 0 || fgk_optim_check(ctx, DT, 3) != 0 ||                           \
        fgk_scalar_in(ctx, 3, "lr", &lr) != 0)                                                     \
      return -1;                                                                                   \
    opt_job J = {.var = ctx->in[0].data,                                                           \
                 .buf = ctx->in[1].data,                                                           \
                 .g = ctx->in[2].data,                                                             \
                 .lr = lr,                                                                         \
                 .mom = ctx->p->momentum.momentum,                                                 \
                 .nesterov = ctx->p->momentum.nesterov};                                           \
    fgk_parallel_for(ctx, fgk_numel(&ctx->in[0]), FGK_GRAIN_CHEAP, fn##_range, &J);                \
    fgk_optim_publish(ctx, sizeof(T));                                                             \
    return 0;                                                                                      \
  }
FGK_MOMENTUM(fgk_apply_momentum_f32, float, FG_F32)
FGK_MOMENTUM(fgk_apply_momentum_f64, double, FG_F64)

/* torch.optim.Adam / AdamW (weight_decay > 0, decoupled), t = step:
 *   g += l2 * var        (attribute l2: torch.optim.Adam's weight_decay,
 *                         rounded as a mul and then an add in T)
 *   var *= 1 - lr*wd
 *   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g
 *   var -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps)
 * which is lr * mhat / (sqrt(vhat) + eps) arranged as torch computes it. */
#define FGK_ADAM(fn, T, DT, SQRT)                                                                  \
  void fn##_range(void *arg, int64_t i0, int64_t i1) {                                             \
    const opt_job *J = (const opt_job *)arg;                                                       \
    const T b1 = (T)J->b1, b2 = (T)J->b2, c1 = (T)J->c1, c2 = (T)J->c2, eps = (T)J->eps;           \
    const T step_size = (T)J->step_size, bc2_sqrt = (T)J->bc2_sqrt, keep = (T)J->keep;             \
    const int decay = J->decay, coupled = J->l2 > 0;                                               \
    const T l2 = (T)J->l2;                                                                         \
    T *var = (T *)J->var, *m = (T *)J->m, *v = (T *)J->v;                                          \
    const T *g = (const T *)J->g;                                                                  \
    for (int64_t i = i0; i < i1; i++) {                                                            \
      T x = var[i], gi = g[i];                                                                     \
      if (coupled) {                                                                               \
        const T term = l2 * x;                                                                     \
        gi = gi + term;                                                                            \
      }                                                                                            \
      if (decay) x *= keep;                                                                        \
      const T mi = b1 * m[i] + c1 * gi;                                                            \
      const T vi = b2 * v[i] + c2 * (gi * gi);                                                     \
      m[i] = mi;                                                                                   \
      v[i] = vi;                                                                                   \
      var[i] = x - step_size * (mi / (SQRT(vi) / bc2_sqrt + eps));                                 \
    }                                                                                              \
  }                                                                                                \
  int fn(const fg_kctx *ctx) {                                                                     \
    double lr, t;                                                                                  \
    if (fgk_check(ctx, 6, 1) != 0 || fgk_optim_check(ctx, DT, 4) != 0 ||                           \
        fgk_scalar_in(ctx, 4, "lr", &lr) != 0 || fgk_scalar_in(ctx, 5, "step", &t) != 0)           \
      return -1;                                                                                   \
    if (!(t >= 1))                                                                                 \
      return fgk_fail(ctx,                                                                         \
                      "input 5 (step) = %g must be >= 1 (the step count after "                    \
                      "incrementing)",                                                             \
                      t);                                                                          \
    opt_job J = {                                                                                  \
        .var = ctx->in[0].data, .m = ctx->in[1].data, .v = ctx->in[2].data, .g = ctx->in[3].data}; \
    fgk_adam_scalars(&J, &ctx->p->adam, lr, t);                                                    \
    fgk_parallel_for(ctx, fgk_numel(&ctx->in[0]), FGK_GRAIN_CHEAP, fn##_range, &J);                \
    fgk_optim_publish(ctx, sizeof(T));                                                             \
    return 0;                                                                                      \
  }
FGK_ADAM(fgk_apply_adam_f32, float, FG_F32, sqrtf)
FGK_ADAM(fgk_apply_adam_f64, double, FG_F64, sqrt)
