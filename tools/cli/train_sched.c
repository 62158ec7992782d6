/* `flowgraph train`'s learning-rate schedule options (--lr-schedule,
 * --lr-step-size, --lr-gamma, --lr-t-max, --lr-min, --warmup,
 * --warmup-factor), which set fg_optimizer_config's schedule for the step
 * --optimizer builds, and --seed, which reseeds the model's random draws
 * (fg_graph_reseed). All counts are training steps (batches), not epochs. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train.h"

/* Steps beyond this are refused (fg_minimize keeps counts below 2^50). */
#define MAX_STEPS ((int64_t)1 << 50)

/* A finite number, or -1. */
static int parse_double(const char *v, double *out) {
  char *end = NULL;
  if (!v || !*v) return -1;
  *out = strtod(v, &end);
  return end && !*end && isfinite(*out) ? 0 : -1;
}

static int steps_opt(const cli_command *cmd, const char *opt, int r, const char *v, int64_t min,
                     int64_t *out) {
  if (r < 0 || cli_parse_i64(v, INT64_MIN, INT64_MAX, out) != 0)
    return cli_usage(cmd, "%s needs a whole number of steps, got '%s'", opt, r < 0 ? "" : v);
  if (*out < min || *out > MAX_STEPS)
    return cli_usage(cmd, "%s needs a number of steps from %" PRId64 " to 2^50, got %s", opt, min,
                     v);
  return CLI_OK;
}

int train_sched_opt(const cli_command *cmd, int argc, char **argv, int *i, train_sched *t,
                    int *rc) {
  const char *v = NULL;
  int r;
  fg_lr_schedule *s = &t->schedule;
  if ((r = cli_opt_value(argc, argv, i, NULL, "--lr-schedule", &v)) != 0) {
    static const char *const kinds[3] = {"constant", "step", "cosine"};
    int k = -1;
    for (int j = 0; j < 3 && r > 0; j++)
      if (strcmp(v, kinds[j]) == 0) k = j; /* fg_lr_schedule_kind */
    if (k < 0)
      *rc =
          cli_usage(cmd, "--lr-schedule needs constant, step or cosine, got '%s'", r < 0 ? "" : v);
    s->kind = (fg_lr_schedule_kind)k;
    t->kind_set = 1;
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--lr-step-size", &v)) != 0) {
    *rc = steps_opt(cmd, "--lr-step-size", r, v, 1, &s->step_size);
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--lr-t-max", &v)) != 0) {
    *rc = steps_opt(cmd, "--lr-t-max", r, v, 1, &s->t_max);
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--warmup", &v)) != 0) {
    *rc = steps_opt(cmd, "--warmup", r, v, 0, &s->warmup_steps);
    t->warmup_set = 1;
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--lr-gamma", &v)) != 0) {
    if (r < 0 || parse_double(v, &s->gamma) != 0 || !(s->gamma > 0))
      *rc = cli_usage(cmd, "--lr-gamma needs a decay factor > 0, got '%s'", r < 0 ? "" : v);
    t->gamma_set = 1;
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--lr-min", &v)) != 0) {
    if (r < 0 || parse_double(v, &s->eta_min) != 0 || !(s->eta_min >= 0))
      *rc = cli_usage(cmd, "--lr-min needs a learning rate >= 0, got '%s'", r < 0 ? "" : v);
    t->eta_min_set = 1;
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--warmup-factor", &v)) != 0) {
    double f = 0;
    if (r < 0 || parse_double(v, &f) != 0 || !(f > 0 && f <= 1))
      *rc = cli_usage(cmd, "--warmup-factor needs a factor in (0, 1], got '%s'", r < 0 ? "" : v);
    s->warmup_start_factor = f;
    t->factor_set = 1;
  } else if ((r = cli_opt_value(argc, argv, i, NULL, "--seed", &v)) != 0) {
    *rc = cli_int_opt(cmd, "--seed", r, v, 0, INT64_MAX, &t->seed);
    t->seed_set = 1;
  } else {
    return 0;
  }
  return 1;
}

int train_sched_check(const cli_command *cmd, const train_sched *t, int optimizer) {
  const fg_lr_schedule *s = &t->schedule;
  const int any = t->kind_set || t->warmup_set || t->factor_set || s->step_size || s->t_max ||
                  t->gamma_set || t->eta_min_set;
  if (any && !optimizer)
    return cli_usage(cmd, "--lr-schedule, --warmup and their options need --optimizer (they set "
                          "the step --optimizer builds; a saved step keeps its own schedule)");
  if (s->kind == FG_LR_STEP && !s->step_size)
    return cli_usage(cmd, "--lr-schedule step needs --lr-step-size N (steps between decays)");
  if (s->kind == FG_LR_COSINE && !s->t_max)
    return cli_usage(cmd, "--lr-schedule cosine needs --lr-t-max N (steps from the rate to "
                          "--lr-min)");
  if (s->kind != FG_LR_STEP && (s->step_size || t->gamma_set))
    return cli_usage(cmd, "--lr-step-size and --lr-gamma need --lr-schedule step");
  if (s->kind != FG_LR_COSINE && (s->t_max || t->eta_min_set))
    return cli_usage(cmd, "--lr-t-max and --lr-min need --lr-schedule cosine");
  if (t->factor_set && s->warmup_steps == 0)
    return cli_usage(cmd, "--warmup-factor needs --warmup N with N > 0");
  return CLI_OK;
}

/* Over fg_optimizer_config_init's defaults: what was given (the struct
 * starts zeroed, so a zero count means "not given"). */
void train_sched_apply(const train_sched *t, fg_optimizer_config *cfg) {
  fg_lr_schedule *c = &cfg->schedule;
  const fg_lr_schedule *s = &t->schedule;
  c->kind = s->kind;
  c->step_size = s->step_size;
  c->t_max = s->t_max;
  c->warmup_steps = s->warmup_steps;
  if (t->gamma_set) c->gamma = s->gamma;
  if (t->eta_min_set) c->eta_min = s->eta_min;
  if (t->factor_set) c->warmup_start_factor = s->warmup_start_factor;
}

int train_sched_reseed(const train_sched *t, const char *model, int quiet, fg_graph *g,
                       fg_status *st) {
  if (!t->seed_set) return 0;
  int n = fg_graph_reseed(g, t->seed, st);
  if (n < 0) return -1;
  /* Said, so that nobody takes an unchanged result for a bad seed. */
  if (n == 0 && !quiet)
    printf("note: --seed %" PRId64 ": %s draws nothing at random (no dropout, random op or "
           "initialiser of an untrained variable); the row order is --shuffle's\n",
           t->seed, model);
  return 0;
}
