/* The normalization ops on the CPU, direct loops (torch.nn.functional's
 * semantics): batch_norm (statistics per channel over N and the spatial
 * dims), its running-statistics update and gradient; layer_norm (per row
 * over the last k dims), group_norm and instance_norm (per sample and
 * group of channels), and their gradients. x is C-order [N, C, ...].
 *
 * Work splits over channels (batch_norm) or rows (the others) with
 * fgk_parallel_for; each channel's or row's sums run in one thread in a
 * fixed order, so results do not depend on the thread count. The
 * gradients' dscale and dshift of the row norms split over parameters.
 * norm_body.h holds the loops, instantiated for float and double. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/norm_sync.h"

/* Parameters summed together per chunk in the row norms' dscale/dshift. */
#define NORM_PBLOCK 64
/* Partial sums per reduction (norm_body.h). */
#define NORM_LANES 8

/* One job type for every norm: batch_norm uses C = Cg channels (G = 1),
 * the row norms N * G rows of Cg * S values. */
typedef struct norm_job {
  const void *x, *dy, *scale, *shift, *rm, *rv;
  void *y, *mean, *inv, *var, *dscale, *dshift; /* grad: y is dx; mean, inv are inputs */
  int64_t N, G, Cg, S;
  double eps;
  int training;
  /* sync_batch_norm (kernels/cpu/norm_sync.c): the statistics of every
   * replica, [mean | inv_std | var] per channel (gs) or the gradient's
   * [sum dy / M | sum dy xhat / M] (gd); part receives the local sums. */
  const double *gs, *gd;
  double *part;
} norm_job;

#define NT   float
#define NSUF f32
#include "kernels/cpu/norm_body.h"
#undef NT
#undef NSUF
#define NT   double
#define NSUF f64
#include "kernels/cpu/norm_body.h"
#undef NT
#undef NSUF

/* ---- checks, shared with kernels/cuda/norm.cu ------------------------------ */

static int geom_of(const fg_kctx *ctx, int op, const fg_kbuf *x, fgk_norm_geom *g) {
  const int row = op == FGK_NORM_LAYER || op == FGK_NORM_LAYER_GRAD;
  if (row) {
    const int64_t k = ctx->p->norm.normalized_rank;
    if (k < 1 || k > x->rank)
      return fgk_fail(ctx, "normalized_rank %lld is out of range [1, %d]", (long long)k, x->rank);
    g->N = 1;
    g->Cg = 1;
    for (int d = 0; d < x->rank; d++)
      *(d < x->rank - k ? &g->N : &g->Cg) *= x->dims[d];
    g->G = g->S = 1;
    return 0;
  }
  if (x->rank < 2) return fgk_fail(ctx, "x has rank %d, expected [N, C, ...]", x->rank);
  const int64_t C = x->dims[1];
  g->N = x->dims[0];
  g->S = 1;
  for (int d = 2; d < x->rank; d++)
    g->S *= x->dims[d];
  g->G = 1;
  if (op == FGK_NORM_GROUP || op == FGK_NORM_GROUP_GRAD) {
    g->G = ctx->p->norm.num_groups;
    if (g->G < 1 || C % g->G != 0)
      return fgk_fail(ctx, "num_groups %lld does not divide C = %lld", (long long)g->G,
                      (long long)C);
  }
  g->Cg = C / g->G;
  return 0;
}

/* One buffer's dtype and element count. */
static int need(const fg_kctx *ctx, const fg_kbuf *b, const char *what, int i, fg_dtype dt,
                int64_t n) {
  if (b->dtype != dt || fgk_numel(b) != n)
    return fgk_fail(ctx, "%s %d is %s with %lld elements, expected %s with %lld", what, i,
                    fg_dtype_name(b->dtype), (long long)fgk_numel(b), fg_dtype_name(dt),
                    (long long)n);
  return 0;
}

int fgk_norm_check(const fg_kctx *ctx, int op, fg_dtype dt, fgk_norm_geom *g) {
  static const int n_in[] = {6, 6, 3, 5, 3, 5, 5}, n_out[] = {4, 3, 3, 3, 3, 3, 1};
  if (op < FGK_NORM_BN || op > FGK_NORM_BN_UPDATE) return fgk_fail(ctx, "bad norm op %d", op);
  if (fgk_check(ctx, n_in[op], n_out[op]) != 0) return -1;
  if (op == FGK_NORM_BN_UPDATE) {
    const int64_t C = fgk_numel(&ctx->in[0]);
    memset(g, 0, sizeof *g);
    g->Cg = C;
    for (int i = 0; i < 4; i++)
      if (need(ctx, &ctx->in[i], "input", i, dt, C)) return -1;
    if (need(ctx, &ctx->in[4], "input", 4, FG_BOOL, 1) ||
        need(ctx, &ctx->out[0], "output", 0, dt, C))
      return -1;
    return 0;
  }
  const int grad = op == FGK_NORM_BN_GRAD || op == FGK_NORM_LAYER_GRAD || op == FGK_NORM_GROUP_GRAD;
  const int bn = op == FGK_NORM_BN || op == FGK_NORM_BN_GRAD;
  const fg_kbuf *x = &ctx->in[grad ? 1 : 0];
  if (geom_of(ctx, op, x, g) != 0) return -1;
  const int64_t P = g->G * g->Cg, total = g->N * P * g->S, stats = bn ? P : g->N * g->G;
  if (need(ctx, x, "input", grad, dt, total)) return -1;
  if (grad) {
    /* dy, x, scale, mean, inv_std [, training] -> dx, dscale, dshift */
    if (need(ctx, &ctx->in[0], "input", 0, dt, total) ||
        need(ctx, &ctx->in[2], "input", 2, dt, P) ||
        need(ctx, &ctx->in[3], "input", 3, dt, stats) ||
        need(ctx, &ctx->in[4], "input", 4, dt, stats) ||
        (bn && need(ctx, &ctx->in[5], "input", 5, FG_BOOL, 1)) ||
        need(ctx, &ctx->out[0], "output", 0, dt, total) ||
        need(ctx, &ctx->out[1], "output", 1, dt, P) || need(ctx, &ctx->out[2], "output", 2, dt, P))
      return -1;
    return 0;
  }
  /* x, scale, shift [, running_mean, running_var, training] -> y, mean,
   * inv_std [, var] */
  for (int i = 1; i < (bn ? 5 : 3); i++)
    if (need(ctx, &ctx->in[i], "input", i, dt, P)) return -1;
  if (bn && need(ctx, &ctx->in[5], "input", 5, FG_BOOL, 1)) return -1;
  if (need(ctx, &ctx->out[0], "output", 0, dt, total)) return -1;
  for (int o = 1; o < (bn ? 4 : 3); o++)
    if (need(ctx, &ctx->out[o], "output", o, dt, stats)) return -1;
  return 0;
}

/* Channels (or rows) per chunk: about FGK_GRAIN_MATH elements. */
static int64_t grain_for(int64_t per_item) {
  return per_item >= FGK_GRAIN_MATH ? 1 : FGK_GRAIN_MATH / (per_item > 0 ? per_item : 1);
}

/* ---- the kernels ------------------------------------------------------------ */

/* The fields every job of its direction shares. Forward: x, scale, shift
 * -> y, mean, inv; gradient: dy, x, scale, mean, inv -> dx (in y), dscale,
 * dshift. */
static norm_job job_of(const fg_kctx *ctx, const fgk_norm_geom *g, int grad) {
  norm_job J = {.y = ctx->out[0].data, .N = g->N, .G = g->G, .Cg = g->Cg, .S = g->S};
  const fg_kbuf *in = ctx->in + grad; /* x, scale: inputs 0, 1 forward, 1, 2 backward */
  J.x = in[0].data;
  J.scale = in[1].data;
  if (grad) {
    J.dy = ctx->in[0].data;
    J.mean = (void *)ctx->in[3].data;
    J.inv = (void *)ctx->in[4].data;
    J.dscale = ctx->out[1].data;
    J.dshift = ctx->out[2].data;
  } else {
    J.shift = ctx->in[2].data;
    J.mean = ctx->out[1].data;
    J.inv = ctx->out[2].data;
    J.eps = ctx->p->norm.epsilon;
  }
  return J;
}

/* batch_norm (statistics per channel) and its gradient, per channel;
 * `every`: sync_batch_norm's statistics of every replica, or NULL. */
static int batch_norm(const fg_kctx *ctx, int op, fg_dtype dt, const double *every) {
  const int grad = op == FGK_NORM_BN_GRAD;
  fgk_norm_geom g;
  if (fgk_norm_check(ctx, op, dt, &g) != 0) return -1;
  const int training = *(const uint8_t *)ctx->in[5].data != 0;
  if (!grad && !every && training && g.N * g.S < 2)
    return fgk_fail(ctx, "training needs more than 1 value per channel, got %lld (N %lld x %lld)",
                    (long long)(g.N * g.S), (long long)g.N, (long long)g.S);
  norm_job J = job_of(ctx, &g, grad);
  J.training = training;
  *(grad ? &J.gd : &J.gs) = every;
  if (!grad) {
    J.rm = ctx->in[3].data;
    J.rv = ctx->in[4].data;
    J.var = ctx->out[3].data;
  }
  const int f32 = dt == FG_F32;
  if (ctx->in[grad].layout == FGK_LAYOUT_NC16) {
    /* The planner hands NC16 to every same-shaped operand at once, and only
     * to a sync-free batch_norm (its statistics are per channel here). */
    if (every || g.Cg % 16 != 0 || ctx->in[0].layout != ctx->out[0].layout)
      return fgk_fail(ctx, "NC16 needs C %% 16 == 0 and every [N, C, H, W] operand in it");
    fgk_parallel_for(ctx, g.Cg / 16, 1,
                     grad ? (f32 ? bn_grad_nc16_range_f32 : bn_grad_nc16_range_f64)
                          : (f32 ? bn_fwd_nc16_range_f32 : bn_fwd_nc16_range_f64),
                     &J);
    return 0;
  }
  fgk_parallel_for(ctx, g.Cg, grain_for(g.N * g.S),
                   grad ? (f32 ? bn_grad_range_f32 : bn_grad_range_f64)
                        : (f32 ? bn_fwd_range_f32 : bn_fwd_range_f64),
                   &J);
  return 0;
}

int fgk_bn_forward(const fg_kctx *ctx, fg_dtype dt, const double *gs) {
  return batch_norm(ctx, FGK_NORM_BN, dt, gs);
}
int fgk_bn_backward(const fg_kctx *ctx, fg_dtype dt, const double *gd) {
  return batch_norm(ctx, FGK_NORM_BN_GRAD, dt, gd);
}
void fgk_bn_partials(const fg_kctx *ctx, fg_dtype dt, int grad, const fgk_norm_geom *g,
                     const double *gm, double *part) {
  norm_job J = job_of(ctx, g, grad);
  if (!grad) J.gs = gm;
  J.part = part;
  fgk_parallel_for(ctx, g->Cg, grain_for(g->N * g->S),
                   dt == FG_F32 ? bn_part_range_f32 : bn_part_range_f64, &J);
}

static int bn_update(const fg_kctx *ctx, fg_dtype dt) {
  fgk_norm_geom g;
  if (fgk_norm_check(ctx, FGK_NORM_BN_UPDATE, dt, &g) != 0) return -1;
  const double m = ctx->p->norm.momentum;
  if (!(m >= 0 && m <= 1)) return fgk_fail(ctx, "momentum %g is outside [0, 1]", m);
  if (*(const uint8_t *)ctx->in[4].data) {
    if (dt == FG_F32)
      bn_update_f32(ctx, m);
    else
      bn_update_f64(ctx, m);
  }
  fgk_optim_publish(ctx, fg_dtype_size(dt));
  return 0;
}

/* layer, group and instance norm, and their gradients: dx per row, then
 * dscale and dshift per parameter. */
static int row_norm(const fg_kctx *ctx, int op, fg_dtype dt) {
  const int grad = op == FGK_NORM_LAYER_GRAD || op == FGK_NORM_GROUP_GRAD;
  fgk_norm_geom g;
  if (fgk_norm_check(ctx, op, dt, &g) != 0) return -1;
  norm_job J = job_of(ctx, &g, grad);
  const int f32 = dt == FG_F32;
  const fg_krange_fn rows = grad ? (f32 ? row_dx_range_f32 : row_dx_range_f64)
                                 : (f32 ? row_fwd_range_f32 : row_fwd_range_f64);
  fgk_parallel_for(ctx, g.N * g.G, grain_for(g.Cg * g.S), rows, &J);
  if (grad)
    fgk_parallel_for(ctx, g.G * g.Cg,
                     grain_for(g.N * g.S) > NORM_PBLOCK ? grain_for(g.N * g.S) : NORM_PBLOCK,
                     f32 ? row_dparam_range_f32 : row_dparam_range_f64, &J);
  return 0;
}

#define NORM_ENTRY(name, call)                                                                     \
  int name##_f32(const fg_kctx *ctx) { return call(FG_F32); }                                      \
  int name##_f64(const fg_kctx *ctx) { return call(FG_F64); }
#define BN_CALL(dt)      batch_norm(ctx, FGK_NORM_BN, dt, NULL)
#define BN_GRAD_CALL(dt) batch_norm(ctx, FGK_NORM_BN_GRAD, dt, NULL)
#define BN_UPD_CALL(dt)  bn_update(ctx, dt)
#define LN_CALL(dt)      row_norm(ctx, FGK_NORM_LAYER, dt)
#define LN_GRAD_CALL(dt) row_norm(ctx, FGK_NORM_LAYER_GRAD, dt)
#define GN_CALL(dt)      row_norm(ctx, FGK_NORM_GROUP, dt)
#define GN_GRAD_CALL(dt) row_norm(ctx, FGK_NORM_GROUP_GRAD, dt)
NORM_ENTRY(fgk_batch_norm, BN_CALL)
NORM_ENTRY(fgk_batch_norm_grad, BN_GRAD_CALL)
NORM_ENTRY(fgk_batch_norm_update_stats, BN_UPD_CALL)
NORM_ENTRY(fgk_layer_norm, LN_CALL)
NORM_ENTRY(fgk_layer_norm_grad, LN_GRAD_CALL)
NORM_ENTRY(fgk_group_norm, GN_CALL)
NORM_ENTRY(fgk_group_norm_grad, GN_GRAD_CALL)
