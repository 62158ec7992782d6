/* The learning rate of fg_minimize's step as graph nodes
 * (autodiff/lr_schedule.c): the schedule's check and its f64 rate. */
#ifndef FG_AUTODIFF_LR_SCHEDULE_H
#define FG_AUTODIFF_LR_SCHEDULE_H

#include "flowgraph/autodiff.h"

/* NULL when the schedule is fine, else what is wrong with it (for the
 * "bad optimizer config" message). */
const char *fg_lr_schedule_check(const fg_lr_schedule *s);

/* 1 when the rate depends on the step counter (a schedule other than
 * constant, or a warm-up). */
int fg_lr_schedule_needs_step(const fg_lr_schedule *s);

/* The scheduled rate, an f64 scalar, from `base` (the learning-rate
 * variable) and `step` (the counter variable, f64: the steps done before
 * this one; only read when fg_lr_schedule_needs_step). */
fg_output fg_lr_schedule_rate(fg_graph *g, const fg_lr_schedule *s, fg_output base, fg_output step);

#endif
