/* Multi-tensor optimizer updates (kernels/cpu/optim_multi.h).
 *
 * The variables' elements are numbered one after another and cut into
 * chunks by fgk_parallel_for, whatever the thread count; a chunk may span
 * several tensors, and each tensor's part runs the single-tensor update's
 * own loop (kernels/cpu/optim_job.h). Every element is independent, so the
 * cut never changes a bit. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/optim_job.h"
#include "kernels/cpu/optim_multi.h"

/* What each input list holds, in the order the lists come. */
enum { R_VAR, R_BUF, R_M, R_V, R_GRAD };
static const char *const role_name[] = {"var", "buf", "m", "v", "grad"};

typedef struct multi_rule {
  const char *op;
  int n_lists, n_scalars;
  int roles[4];
} multi_rule;

static const multi_rule rule_sgd = {"multi_apply_sgd", 2, 1, {R_VAR, R_GRAD}};
static const multi_rule rule_momentum = {"multi_apply_momentum", 3, 1, {R_VAR, R_BUF, R_GRAD}};
static const multi_rule rule_adam = {"multi_apply_adam", 4, 2, {R_VAR, R_M, R_V, R_GRAD}};

/* The whole update: the kernel's buffers, its rule, the scalars every
 * tensor's job shares, and the single update's loop. Nothing is allocated
 * (a cached plan's run allocates nothing): each chunk finds its tensors by
 * summing element counts, O(n) per chunk, small beside the chunk's work. */
typedef struct multi_job {
  const fg_kctx *ctx;
  const struct multi_rule *r;
  const opt_job *proto;
  int n;
  fg_krange_fn fn;
} multi_job;

static void set_tensor(opt_job *J, int role, void *data);

static void multi_range(void *arg, int64_t i0, int64_t i1) {
  const multi_job *M = (const multi_job *)arg;
  int64_t start = 0;
  for (int k = 0; k < M->n && start < i1; k++) {
    const int64_t end = start + fgk_numel(&M->ctx->in[k]);
    const int64_t a = (i0 > start ? i0 : start) - start, b = (i1 < end ? i1 : end) - start;
    if (b > a) {
      opt_job J = *M->proto;
      for (int l = 0; l < M->r->n_lists; l++)
        set_tensor(&J, M->r->roles[l], M->ctx->in[l * M->n + k].data);
      M->fn(&J, a, b);
    }
    start = end;
  }
}

/* The list lengths, and every entry against its variable (dtype and
 * element count), naming the input that differs. */
static int multi_check(const fg_kctx *ctx, const multi_rule *r, fg_dtype dt) {
  const int64_t n = ctx->p->multi_update.n;
  const int64_t need = r->n_lists * n + r->n_scalars;
  if (n < 1 || ctx->n_in < need || ctx->n_out != 1)
    return fgk_fail(ctx,
                    "%s takes %d lists of n tensors and %d scalar(s), one output: n = %lld needs "
                    "%lld inputs, got %d inputs and %d outputs",
                    r->op, r->n_lists, r->n_scalars, (long long)n, (long long)need, ctx->n_in,
                    ctx->n_out);
  if (ctx->out[0].dtype != dt || fgk_numel(&ctx->out[0]) != fgk_numel(&ctx->in[0]))
    return fgk_fail(ctx, "output 0 is %s with %lld elements, var 0 %s with %lld",
                    fg_dtype_name(ctx->out[0].dtype), (long long)fgk_numel(&ctx->out[0]),
                    fg_dtype_name(dt), (long long)fgk_numel(&ctx->in[0]));
  for (int k = 0; k < (int)n; k++) {
    const fg_kbuf *var = &ctx->in[k];
    const int64_t count = fgk_numel(var);
    if (var->dtype != dt)
      return fgk_fail(ctx, "input %d (var %d) is %s, expected %s", k, k, fg_dtype_name(var->dtype),
                      fg_dtype_name(dt));
    for (int l = 1; l < r->n_lists; l++) {
      const int i = l * (int)n + k;
      const fg_kbuf *b = &ctx->in[i];
      if (b->dtype != dt || fgk_numel(b) != count)
        return fgk_fail(ctx, "input %d (%s %d) is %s with %lld elements, var %d %s with %lld", i,
                        role_name[r->roles[l]], k, fg_dtype_name(b->dtype), (long long)fgk_numel(b),
                        k, fg_dtype_name(dt), (long long)count);
    }
  }
  return 0;
}

int fgk_multi_optim_check(const fg_kctx *ctx, int rule, fg_dtype dt) {
  static const multi_rule *const rules[] = {&rule_sgd, &rule_momentum, &rule_adam};
  return multi_check(ctx, rules[rule], dt);
}

static void set_tensor(opt_job *J, int role, void *data) {
  switch (role) {
  case R_VAR: J->var = data; break;
  case R_BUF: J->buf = data; break;
  case R_M: J->m = data; break;
  case R_V: J->v = data; break;
  default: J->g = data; break;
  }
}

/* Runs fn over all tensors with the scalars of *proto (checked). */
static int multi_run(const fg_kctx *ctx, const multi_rule *r, size_t es, fg_krange_fn fn,
                     const opt_job *proto) {
  const int n = (int)ctx->p->multi_update.n;
  const multi_job M = {ctx, r, proto, n, fn};
  int64_t total = 0;
  for (int k = 0; k < n; k++)
    total += fgk_numel(&ctx->in[k]);
  fgk_parallel_for(ctx, total, FGK_GRAIN_CHEAP, multi_range, (void *)&M);
  /* Output 0 is variable 0 (a separate buffer receives a copy). */
  if (ctx->out[0].data != ctx->in[0].data && fgk_numel(&ctx->out[0]) > 0)
    memcpy(ctx->out[0].data, ctx->in[0].data, (size_t)fgk_numel(&ctx->out[0]) * es);
  return 0;
}

/* The scalars follow the lists: lr, then Adam's step. */
static int scalar_after(const fg_kctx *ctx, const multi_rule *r, int j, const char *what,
                        double *v) {
  return fgk_scalar_in(ctx, r->n_lists * (int)ctx->p->multi_update.n + j, what, v);
}

#define FGK_MULTI_SGD(fn, T, DT, RANGE)                                                            \
  int fn(const fg_kctx *ctx) {                                                                     \
    double lr;                                                                                     \
    if (multi_check(ctx, &rule_sgd, DT) != 0 || scalar_after(ctx, &rule_sgd, 0, "lr", &lr) != 0)   \
      return -1;                                                                                   \
    const opt_job J = {.lr = lr};                                                                  \
    return multi_run(ctx, &rule_sgd, sizeof(T), RANGE, &J);                                        \
  }
FGK_MULTI_SGD(fgk_multi_apply_sgd_f32, float, FG_F32, fgk_apply_sgd_f32_range)
FGK_MULTI_SGD(fgk_multi_apply_sgd_f64, double, FG_F64, fgk_apply_sgd_f64_range)

#define FGK_MULTI_MOMENTUM(fn, T, DT, RANGE)                                                       \
  int fn(const fg_kctx *ctx) {                                                                     \
    double lr;                                                                                     \
    if (multi_check(ctx, &rule_momentum, DT) != 0 ||                                               \
        scalar_after(ctx, &rule_momentum, 0, "lr", &lr) != 0)                                      \
      return -1;                                                                                   \
    const opt_job J = {.lr = lr,                                                                   \
                       .mom = ctx->p->multi_update.momentum.momentum,                              \
                       .nesterov = ctx->p->multi_update.momentum.nesterov};                        \
    return multi_run(ctx, &rule_momentum, sizeof(T), RANGE, &J);                                   \
  }
FGK_MULTI_MOMENTUM(fgk_multi_apply_momentum_f32, float, FG_F32, fgk_apply_momentum_f32_range)
FGK_MULTI_MOMENTUM(fgk_multi_apply_momentum_f64, double, FG_F64, fgk_apply_momentum_f64_range)

/* A step below 1 is refused before anything is written, as apply_adam. */
#define FGK_MULTI_ADAM(fn, T, DT, RANGE)                                                           \
  int fn(const fg_kctx *ctx) {                                                                     \
    double lr, t;                                                                                  \
    if (multi_check(ctx, &rule_adam, DT) != 0 ||                                                   \
        scalar_after(ctx, &rule_adam, 0, "lr", &lr) != 0 ||                                        \
        scalar_after(ctx, &rule_adam, 1, "step", &t) != 0)                                         \
      return -1;                                                                                   \
    if (!(t >= 1))                                                                                 \
      return fgk_fail(ctx,                                                                         \
                      "input %d (step) = %g must be >= 1 (the step count after incrementing)",     \
                      4 * (int)ctx->p->multi_update.n + 1, t);                                     \
    opt_job J = {0};                                                                               \
    fgk_adam_scalars(&J, &ctx->p->multi_update.adam, lr, t);                                       \
    return multi_run(ctx, &rule_adam, sizeof(T), RANGE, &J);                                       \
  }
FGK_MULTI_ADAM(fgk_multi_apply_adam_f32, float, FG_F32, fgk_apply_adam_f32_range)
FGK_MULTI_ADAM(fgk_multi_apply_adam_f64, double, FG_F64, fgk_apply_adam_f64_range)
