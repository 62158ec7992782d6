/* The per-element loops of the optimizer updates (kernels/cpu/optim.c),
 * shared with the multi-tensor updates (kernels/cpu/optim_multi.c) so that
 * both run literally the same arithmetic and give the same bits. */
#ifndef FG_KERNELS_CPU_OPTIM_JOB_H
#define FG_KERNELS_CPU_OPTIM_JOB_H

#include <math.h>
#include <stdint.h>

#include "flowgraph/op_params.h"

/* The tensors and scalars of one update, shared by its parallel chunks
 * (elementwise, so the split never changes a result). */
typedef struct opt_job {
  void *var, *buf, *m, *v;
  const void *g;
  double lr, mom, b1, b2, c1, c2, eps, step_size, bc2_sqrt, keep, l2;
  int nesterov, decay;
} opt_job;

/* Adam's scalars for learning rate lr at step t (>= 1), in double; they
 * round to the variable's dtype inside the loops. */
static inline void fgk_adam_scalars(opt_job *J, const fg_adam_params *p, double lr, double t) {
  const double bc1 = 1.0 - pow(p->beta1, t), bc2 = 1.0 - pow(p->beta2, t);
  J->b1 = p->beta1;
  J->b2 = p->beta2;
  J->c1 = 1.0 - p->beta1;
  J->c2 = 1.0 - p->beta2;
  J->eps = p->epsilon;
  J->step_size = lr / bc1;
  J->bc2_sqrt = sqrt(bc2);
  J->keep = 1.0 - lr * p->weight_decay;
  J->decay = p->weight_decay > 0;
  J->l2 = p->l2;
}

/* fn(job, i0, i1) updates elements [i0, i1) of the job's tensors. */
void fgk_apply_sgd_f32_range(void *job, int64_t i0, int64_t i1);
void fgk_apply_sgd_f64_range(void *job, int64_t i0, int64_t i1);
void fgk_apply_momentum_f32_range(void *job, int64_t i0, int64_t i1);
void fgk_apply_momentum_f64_range(void *job, int64_t i0, int64_t i1);
void fgk_apply_adam_f32_range(void *job, int64_t i0, int64_t i1);
void fgk_apply_adam_f64_range(void *job, int64_t i0, int64_t i1);

#endif
