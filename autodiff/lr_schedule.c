/* Learning-rate schedules as graph nodes: the rate of step t is computed
 * from a counter variable by ordinary f64 ops, so it needs no host code
 * per step, and a saved graph (the counter saved with it) continues the
 * schedule. The formulas are torch.optim.lr_scheduler's closed forms
 * (flowgraph/autodiff.h). */
#include <math.h>
#include <stddef.h>

#include "autodiff/lr_schedule.h"

/* pi as the nearest double (M_PI is not C11). */
#define LR_PI 3.14159265358979323846

const char *fg_lr_schedule_check(const fg_lr_schedule *s) {
  if (s->kind < FG_LR_CONSTANT || s->kind > FG_LR_COSINE) return "schedule.kind";
  if (s->kind == FG_LR_STEP && s->step_size < 1) return "schedule.step_size (must be >= 1)";
  if (s->kind == FG_LR_STEP && !(s->gamma > 0 && isfinite(s->gamma)))
    return "schedule.gamma (must be > 0)";
  if (s->kind == FG_LR_COSINE && s->t_max < 1) return "schedule.t_max (must be >= 1)";
  if (s->kind == FG_LR_COSINE && !(s->eta_min >= 0 && isfinite(s->eta_min)))
    return "schedule.eta_min (must be >= 0)";
  if (s->warmup_steps < 0) return "schedule.warmup_steps (must be >= 0)";
  if (s->warmup_steps > 0 && !(s->warmup_start_factor > 0 && s->warmup_start_factor <= 1))
    return "schedule.warmup_start_factor (must be in (0, 1])";
  /* Counts stay exact integers in f64, with room for t - W and 2 t_max. */
  if (s->step_size > (int64_t)1 << 50 || s->t_max > (int64_t)1 << 50 ||
      s->warmup_steps > (int64_t)1 << 50)
    return "schedule step counts (must be <= 2^50)";
  return NULL;
}

int fg_lr_schedule_needs_step(const fg_lr_schedule *s) {
  return s->kind != FG_LR_CONSTANT || s->warmup_steps > 0;
}

static fg_output num(fg_graph *g, double v) { return fg_scalar(g, FG_F64, v); }

/* cos(y) for y in [0, pi/2]: its Taylor series to y^22, whose first left-out
 * term is below 2e-17 there, by Horner in y^2. No cos op is needed, and the
 * result is within a few ulp of the C library's cos. */
static fg_output cos_quarter(fg_graph *g, fg_output y) {
  enum { TERMS = 12 };
  double c[TERMS], fact = 1;
  for (int j = 0; j < TERMS; j++) {
    if (j > 0) fact *= (double)(2 * j - 1) * (double)(2 * j);
    c[j] = (j % 2 ? -1.0 : 1.0) / fact;
  }
  fg_output z = fg_mul(g, y, y), p = num(g, c[TERMS - 1]);
  for (int j = TERMS - 2; j >= 0; j--)
    p = fg_add(g, fg_mul(g, p, z), num(g, c[j]));
  return p;
}

/* The main schedule at step tt (f64, may be negative before a warm-up
 * ends: that value is not selected). */
static fg_output main_rate(fg_graph *g, const fg_lr_schedule *s, fg_output base, fg_output tt) {
  if (s->kind == FG_LR_STEP) {
    fg_output k = fg_floor(g, fg_div(g, tt, num(g, (double)s->step_size)));
    return fg_mul(g, base, fg_pow(g, num(g, s->gamma), k));
  }
  if (s->kind == FG_LR_COSINE) {
    /* (1 + cos(pi t / T)) / 2 = cos(pi k / (2T))^2, k = the distance of t
     * mod 2T from 0 or 2T: in [0, T], so the angle is in [0, pi/2]. */
    const double two_t = 2.0 * (double)s->t_max;
    fg_output r =
        fg_sub(g, tt, fg_mul(g, fg_floor(g, fg_div(g, tt, num(g, two_t))), num(g, two_t)));
    fg_output k = fg_minimum(g, r, fg_sub(g, num(g, two_t), r));
    fg_output c = cos_quarter(g, fg_mul(g, k, num(g, LR_PI / two_t)));
    fg_output eta = num(g, s->eta_min);
    return fg_add(g, eta, fg_mul(g, fg_sub(g, base, eta), fg_mul(g, c, c)));
  }
  return base;
}

fg_output fg_lr_schedule_rate(fg_graph *g, const fg_lr_schedule *s, fg_output base,
                              fg_output step) {
  if (!fg_lr_schedule_needs_step(s)) return base;
  fg_output t = step; /* steps done before this one */
  if (s->warmup_steps == 0) return main_rate(g, s, base, t);
  const double w = (double)s->warmup_steps, f = s->warmup_start_factor;
  fg_output warm =
      fg_mul(g, base, fg_add(g, num(g, f), fg_div(g, fg_mul(g, num(g, 1.0 - f), t), num(g, w))));
  fg_output after = main_rate(g, s, base, fg_sub(g, t, num(g, w)));
  return fg_select(g, fg_less(g, t, num(g, w)), warm, after);
}
