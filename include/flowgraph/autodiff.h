/* flowgraph: symbolic reverse-mode differentiation and training.
 *
 * fg_gradients appends the backward graph to the same graph, so a whole
 * training step (forward, backward, update) is one static graph that can be
 * saved, loaded and run like any other. Backward nodes are named under the
 * prefix "gradients/" ("gradients_1/", ... for later calls), and each
 * carries a string attribute "_colocate" naming the forward node it
 * differentiates, which placement follows (flowgraph/dist.h, rule 2).
 */
#ifndef FLOWGRAPH_AUTODIFF_H
#define FLOWGRAPH_AUTODIFF_H

#include "flowgraph/graph.h"
#include "flowgraph/session.h"
#include "flowgraph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_gradients_options {
  /* What an x with no path from any y gets: 1 (default) a zeros_like(x)
   * node, 0 FG_NO_OUTPUT (node -1). */
  int zeros_for_unconnected;
} fg_gradients_options;

FG_API void fg_gradients_options_init(fg_gradients_options *opts);

/* dxs[i] = sum over j of d(ys[j])/d(xs[i]) weighted by dys[j] (ones_like
 * ys[j] when dys is NULL or dys[j].node < 0). Gradients reaching a tensor
 * from several consumers are summed; broadcast inputs get their gradient
 * reduced back to their shape; an unknown batch dimension is fine.
 *
 * Not differentiable: integer and bool tensors, stop_gradient, argmax,
 * argmin, topk's indices, comparisons, one_hot; topk's gradient has no
 * gradient of its own (a second derivative through topk is refused).
 * Asking for the gradient of such an x, or of an
 * integer y, gives FG_INVALID_ARGUMENT naming it. An op on the path that has
 * no gradient gives FG_UNIMPLEMENTED naming the op and the node.
 * Returns 0, or -1 with status set (and the graph's sticky error set). */
FG_API int fg_gradients(fg_graph *g, const fg_output *ys, int ny, const fg_output *xs, int nx,
                        const fg_output *dys, fg_output *dxs, fg_status *status);
FG_API int fg_gradients_ex(fg_graph *g, const fg_output *ys, int ny, const fg_output *xs, int nx,
                           const fg_output *dys, fg_output *dxs, const fg_gradients_options *opts,
                           fg_status *status);

/* Whether the gradient of y with respect to x is identically zero because
 * every path from x to y is cut: 1 when x reaches y but no gradient flows
 * back (each path passes a node whose op stops gradients, such as argmax,
 * a comparison, stop_gradient or one_hot, or an integer or bool tensor),
 * with *blocker (may be NULL) the first such node on a path to y; 0 when a
 * gradient flows, or when y does not depend on x at all (*blocker -1;
 * fg_gradients gives zeros then too); -1 for a missing graph or output.
 * Follows fg_gradients' own rule, so 1 means its dx is all zeros. */
FG_API int fg_gradient_blocked(const fg_graph *g, fg_output y, fg_output x, int *blocker);

/* ---- optimizers --------------------------------------------------------- */

typedef enum fg_optimizer_kind {
  FG_OPTIMIZER_SGD = 1,
  FG_OPTIMIZER_MOMENTUM = 2, /* SGD with momentum, optionally Nesterov */
  FG_OPTIMIZER_ADAM = 3,
  FG_OPTIMIZER_ADAMW = 4 /* Adam with decoupled weight decay */
} fg_optimizer_kind;

/* Learning-rate schedules, in training steps (runs of the step fg_minimize
 * returns), with torch.optim.lr_scheduler's closed forms. t counts the steps
 * done before the current one (0 for the first), base is the config's
 * learning_rate:
 * - FG_LR_CONSTANT: base;
 * - FG_LR_STEP (StepLR): base * gamma^floor(t / step_size);
 * - FG_LR_COSINE (CosineAnnealingLR):
 *     eta_min + (base - eta_min) * (1 + cos(pi * t / t_max)) / 2,
 *   periodic beyond t_max as torch's closed form (it rises again towards
 *   base over the next t_max steps);
 * - warm-up (warmup_steps W > 0, LinearLR with end_factor 1 followed by the
 *   schedule above, as SequentialLR(milestones=[W]) runs them): for t < W,
 *   base * (s + (1 - s) * t / W) with s = warmup_start_factor; from t = W
 *   on, the schedule above at t - W (so it starts from base at step W).
 * The rate is computed in the graph from a step counter variable, so a
 * saved and reloaded graph (fg_session_save) continues the schedule. */
typedef enum fg_lr_schedule_kind {
  FG_LR_CONSTANT = 0,
  FG_LR_STEP = 1,
  FG_LR_COSINE = 2
} fg_lr_schedule_kind;

typedef struct fg_lr_schedule {
  fg_lr_schedule_kind kind;   /* default FG_LR_CONSTANT */
  int64_t step_size;          /* FG_LR_STEP: steps per decay, >= 1 */
  double gamma;               /* FG_LR_STEP: factor per decay, > 0; default 0.1 */
  int64_t t_max;              /* FG_LR_COSINE: steps of a half period, >= 1 */
  double eta_min;             /* FG_LR_COSINE: the lowest rate, >= 0; default 0 */
  int64_t warmup_steps;       /* >= 0; default 0 (none) */
  double warmup_start_factor; /* in (0, 1]; default 1/3 (LinearLR's) */
} fg_lr_schedule;

/* Semantics and defaults follow PyTorch's torch.optim. */
typedef struct fg_optimizer_config {
  fg_optimizer_kind kind;
  double learning_rate;    /* default 0.01 (SGD, momentum) or 0.001 (Adam, AdamW) */
  double momentum;         /* default 0.9 (momentum) */
  int nesterov;            /* default 0 */
  double beta1, beta2;     /* default 0.9, 0.999 */
  double epsilon;          /* default 1e-8 */
  double weight_decay;     /* default 0 (Adam), 0.01 (AdamW); Adam couples it
                              into the gradient (g + wd * var, as
                              torch.optim.Adam: apply_adam's attribute
                              "l2"), AdamW decays the variable */
  double clip_global_norm; /* 0: off; else gradients are scaled so their
                              global L2 norm is at most this */
  fg_lr_schedule schedule; /* default: constant, no warm-up */
} fg_optimizer_config;

FG_API void fg_optimizer_config_init(fg_optimizer_config *cfg, fg_optimizer_kind kind);

/* Builds gradients of `loss` (a float scalar) with respect to `vars` (the
 * outputs of variable nodes; NULL and 0 mean every float variable that
 * `loss` depends on), optimizer state variables, and the update ops, and
 * returns one target node: running it is one training step. Each update
 * waits for the nodes of the step that read its variable (a control input:
 * a group of them), so it can run, and free its gradient, while earlier
 * layers' gradients are still being computed. The target also runs every
 * running-statistics update (fg_batch_norm's batch_norm_update_stats node)
 * whose batch_norm `loss` depends on; with vars NULL the running
 * statistics are not among the variables trained, and naming one in vars
 * is refused (FG_INVALID_ARGUMENT). The graph's metadata
 * records "loss" and "train_target" for `flowgraph train`.
 *
 * The learning rate is an f64 scalar variable, "<scope>learning_rate"
 * (scope "train" for the first call, "train_1", ... after), holding the
 * base rate; every update of the step reads one node computing the
 * scheduled rate from it ("<scope>lr", cast once per variable dtype), so
 * the updates still group (multi_update pass). Assigning the variable
 * (fg_assign, in a run of its own, or fg_variable_set_value before a
 * session) changes the rate of later steps without
 * rebuilding anything. With a schedule other than constant, a warm-up, or
 * Adam, an f64 counter variable "<scope>step" is incremented by each step
 * (Adam's bias correction reads it after the increment); "<scope>lr" is
 * computed from it as read before the increment, so a run fetching the
 * rate alone gets the next step's rate and changes nothing. The metadata
 * records
 * "learning_rate" (the variable's name) and, when there is a counter,
 * "train_step" (its name). */
FG_API fg_output fg_minimize(fg_graph *g, fg_output loss, const fg_output *vars, int n_vars,
                             const fg_optimizer_config *cfg, fg_status *status);

#ifdef __cplusplus
}
#endif
#endif
