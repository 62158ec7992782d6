/* fg_minimize: gradients, optional clipping by global norm, optimizer state
 * variables and update ops, all appended to the graph, so that one target
 * node is one training step. The update rules live in the apply_* kernels
 * (kernels/cpu/optim.c); this file only wires the graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autodiff/grad.h"
#include "autodiff/lr_schedule.h"
#include "flowgraph/autodiff.h"

void fg_optimizer_config_init(fg_optimizer_config *cfg, fg_optimizer_kind kind) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->kind = kind;
  cfg->learning_rate = (kind == FG_OPTIMIZER_ADAM || kind == FG_OPTIMIZER_ADAMW) ? 1e-3 : 1e-2;
  cfg->momentum = kind == FG_OPTIMIZER_MOMENTUM ? 0.9 : 0.0;
  cfg->beta1 = 0.9;
  cfg->beta2 = 0.999;
  cfg->epsilon = 1e-8;
  cfg->weight_decay = kind == FG_OPTIMIZER_ADAMW ? 0.01 : 0.0;
  cfg->schedule.kind = FG_LR_CONSTANT;
  cfg->schedule.gamma = 0.1;                     /* StepLR's default */
  cfg->schedule.warmup_start_factor = 1.0 / 3.0; /* LinearLR's default */
}

/* A free node name: `base`, else base_1, base_2, ... */
static void unique_name(const fg_graph *g, const char *base, char *buf, size_t size) {
  snprintf(buf, size, "%s", base);
  for (int k = 1; fg_graph_find(g, buf) >= 0; k++)
    snprintf(buf, size, "%s_%d", base, k);
}

/* A zero-filled variable shaped like variable `like`, named <like>/<what>.
 * Its zeros come from an initialiser, not stored bytes, so the optimizer's
 * state adds no bytes per element to a saved graph. */
static fg_output state_variable(fg_graph *g, fg_output like, const char *what) {
  const fg_tinfo *t = fg_graph_tinfo(g, like);
  char base[4200], name[4300];
  snprintf(base, sizeof base, "%s/%s", g->nodes[like.node].name, what);
  unique_name(g, base, name, sizeof name);
  const fg_init zeros = {FG_INIT_ZEROS, 0, 0, 0, 0};
  return fg_variable_init(g, name, t->dtype, t->rank, t->dims, &zeros);
}

static fg_output scalar_variable(fg_graph *g, const char *base, double value, fg_status *st) {
  fg_tensor *t = fg_tensor_from_data(FG_F64, 0, NULL, &value, sizeof value, st);
  if (!t) {
    fg_graph_fail(g, fg_status_code(st), "fg_minimize: %s", fg_status_message(st));
    return FG_NO_OUTPUT;
  }
  char name[256];
  unique_name(g, base, name, sizeof name);
  fg_output v = fg_variable(g, name, t);
  fg_tensor_free(t);
  return v;
}

/* 1 when variable node `id` is a running statistic: written in place by a
 * batch_norm_update_stats node, or read as batch_norm's running_mean or
 * running_var. Those are buffers, not parameters (PyTorch's
 * register_buffer): no optimizer update, no weight decay. */
static int is_running_stat(const fg_graph *g, int id) {
  for (int k = id + 1; k < g->n_nodes; k++) {
    const fg_node *n = &g->nodes[k];
    if (n->op == FG_OP_BATCH_NORM_UPDATE_STATS && n->n_inputs >= 2 &&
        (n->inputs[0].node == id || n->inputs[1].node == id))
      return 1;
    if (n->op == FG_OP_BATCH_NORM && n->n_inputs >= 5 &&
        (n->inputs[3].node == id || n->inputs[4].node == id))
      return 1;
  }
  return 0;
}

/* The running-statistics updates that belong to the step (TensorFlow's
 * UPDATE_OPS): every batch_norm_update_stats node whose statistics input
 * (a batch_norm's output) the loss depends on, appended to *ups (room for
 * *n more made here). They already wait for their batch_norm, which read
 * the running statistics before; nothing else of the step reads them. */
static int add_stat_updates(const fg_graph *g, fg_output loss, fg_output **ups, int *n) {
  char *need = calloc((size_t)g->n_nodes + 1, 1);
  if (!need) return -1;
  need[loss.node] = 1;
  for (int id = loss.node; id >= 0; id--)
    if (need[id])
      for (int k = 0; k < g->nodes[id].n_inputs; k++)
        need[g->nodes[id].inputs[k].node] = 1;
  int rc = 0;
  for (int id = 0; id < g->n_nodes && rc == 0; id++) {
    const fg_node *nd = &g->nodes[id];
    if (nd->op != FG_OP_BATCH_NORM_UPDATE_STATS || nd->n_inputs < 3 || !need[nd->inputs[2].node])
      continue;
    fg_output *grown = realloc(*ups, ((size_t)*n + 2) * sizeof **ups);
    if (!grown) {
      rc = -1;
      break;
    }
    *ups = grown;
    (*ups)[(*n)++] = (fg_output){id, 0};
  }
  free(need);
  return rc;
}

/* Every float variable the loss depends on, in node order, except the
 * running statistics of batch norms. */
static int collect_variables(const fg_graph *g, fg_output loss, fg_output **out) {
  char *need = calloc((size_t)g->n_nodes + 1, 1);
  int n = 0;
  *out = malloc(((size_t)g->n_nodes + 1) * sizeof **out);
  if (!need || !*out) {
    free(need);
    return -1;
  }
  need[loss.node] = 1;
  for (int id = loss.node; id >= 0; id--)
    if (need[id])
      for (int k = 0; k < g->nodes[id].n_inputs; k++)
        need[g->nodes[id].inputs[k].node] = 1;
  for (int id = 0; id < g->n_nodes; id++)
    if (need[id] && g->nodes[id].op == FG_OP_VARIABLE &&
        fg_dtype_is_float(g->nodes[id].outputs[0].dtype) && !is_running_stat(g, id))
      (*out)[n++] = (fg_output){id, 0};
  free(need);
  return n;
}

static int check_config(fg_graph *g, const fg_optimizer_config *c) {
  const char *bad = NULL;
  if (c->kind < FG_OPTIMIZER_SGD || c->kind > FG_OPTIMIZER_ADAMW)
    bad = "kind";
  else if (!(c->learning_rate > 0))
    bad = "learning_rate (must be > 0)";
  else if (!(c->momentum >= 0 && c->momentum < 1 + 1e-12))
    bad = "momentum (must be in [0, 1])";
  else if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1))
    bad = "beta1/beta2 (must be in [0, 1))";
  else if (!(c->epsilon >= 0))
    bad = "epsilon (must be >= 0)";
  else if (!(c->weight_decay >= 0))
    bad = "weight_decay (must be >= 0)";
  else if (!(c->clip_global_norm >= 0))
    bad = "clip_global_norm (must be >= 0; 0 = off)";
  else
    bad = fg_lr_schedule_check(&c->schedule);
  if (bad) fg_graph_fail(g, FG_INVALID_ARGUMENT, "fg_minimize: bad optimizer config: %s", bad);
  return bad ? -1 : 0;
}

/* Scales every gradient by clip / max(global_norm, clip), computed in f64. */
static int clip_by_global_norm(fg_graph *g, fg_output *grads, int n, double clip) {
  fg_output total = FG_NO_OUTPUT;
  for (int i = 0; i < n; i++) {
    fg_output g64 = fg_cast(g, grads[i], FG_F64);
    fg_output sq = fg_reduce_sum(g, fg_mul(g, g64, g64), NULL, 0, 0);
    total = total.node < 0 ? sq : fg_add(g, total, sq);
  }
  fg_output c = fg_scalar(g, FG_F64, clip);
  fg_output scale = fg_div(g, c, fg_maximum(g, fg_sqrt(g, total), c));
  for (int i = 0; i < n; i++)
    grads[i] = fg_mul(g, grads[i], fg_cast(g, scale, fg_output_dtype(g, grads[i])));
  return fg_graph_failed(g) ? -1 : 0;
}

/* For each of the nv variables vs[i], a group of the nodes that read it
 * directly and that the step runs (ancestors of the loss or of a
 * gradient), or FG_NO_OUTPUT when there are none; in ctrl[i]. Only direct
 * readers touch a variable's storage: the executor never lets an arena
 * tensor alias it (a reshape of it is a copy). -1 when out of memory. */
static int update_waits(fg_graph *g, fg_output loss, const fg_output *vs, const fg_output *grads,
                        int nv, fg_output *ctrl) {
  const int n = g->n_nodes;
  char *need = calloc((size_t)n, 1);
  int *stack = malloc(((size_t)n + 1) * sizeof *stack),
      *var_of = malloc((size_t)n * sizeof *var_of);
  int *cnt = calloc((size_t)nv + 1, sizeof *cnt), *rd = NULL;
  fg_output *in = NULL;
  int rc = -1;
  if (!need || !stack || !var_of || !cnt) goto done;
  int top = 0;
  for (int i = 0; i <= nv; i++) {
    const int r = i < nv ? grads[i].node : loss.node;
    if (r >= 0 && r < n && !need[r]) need[r] = 1, stack[top++] = r;
  }
  while (top > 0) {
    const fg_node *nd = &g->nodes[stack[--top]];
    for (int k = 0; k < nd->n_inputs; k++) {
      const int q = nd->inputs[k].node;
      if (q >= 0 && q < n && !need[q]) need[q] = 1, stack[top++] = q;
    }
  }
  for (int id = 0; id < n; id++)
    var_of[id] = -1;
  for (int i = 0; i < nv; i++)
    var_of[vs[i].node] = i;
  /* Readers per variable (CSR), each once, in node order. */
  for (int pass = 0; pass < 2; pass++) {
    int *at = cnt;
    if (pass == 1) {
      for (int i = nv; i > 0; i--)
        cnt[i] = cnt[i - 1];
      cnt[0] = 0;
      for (int i = 0; i < nv; i++)
        cnt[i + 1] += cnt[i];
      if (!(rd = malloc(((size_t)cnt[nv] + 1) * sizeof *rd))) goto done;
      if (!(at = malloc(((size_t)nv + 1) * sizeof *at))) goto done;
      memcpy(at, cnt, ((size_t)nv + 1) * sizeof *at);
    }
    for (int id = 0; id < n; id++) {
      const fg_node *nd = &g->nodes[id];
      if (!need[id]) continue;
      for (int k = 0; k < nd->n_inputs; k++) {
        const int v = nd->inputs[k].node >= 0 ? var_of[nd->inputs[k].node] : -1;
        int seen = v < 0;
        for (int j = 0; j < k && !seen; j++)
          seen = nd->inputs[j].node == nd->inputs[k].node;
        if (seen) continue;
        if (pass == 0)
          cnt[v]++;
        else
          rd[at[v]++] = id;
      }
    }
    if (pass == 1) free(at);
  }
  int most = 0;
  for (int i = 0; i < nv; i++)
    if (cnt[i + 1] - cnt[i] > most) most = cnt[i + 1] - cnt[i];
  if (!(in = malloc(((size_t)most + 1) * sizeof *in))) goto done;
  for (int i = 0; i < nv; i++) {
    const int m = cnt[i + 1] - cnt[i];
    for (int j = 0; j < m; j++)
      in[j] = (fg_output){rd[cnt[i] + j], 0};
    ctrl[i] = m > 0 ? fg_op(g, "group", NULL, in, m, NULL) : FG_NO_OUTPUT;
  }
  rc = 0;
done:
  free(need);
  free(stack);
  free(var_of);
  free(cnt);
  free(rd);
  free(in);
  return rc;
}

/* The rate in `dt`: the f64 rate itself, or its one cast to dt (made on
 * first use, before the gradients, and kept in casts[dt]), so that every update of a dtype reads
 * the same node and the multi_update pass can group them. */
static fg_output lr_as(fg_graph *g, fg_output lr, fg_dtype dt, fg_output *casts) {
  if (dt == FG_F64 || (int)dt <= 0 || (int)dt >= FG_DTYPE_COUNT) return lr;
  if (casts[dt].node < 0) casts[dt] = fg_cast(g, lr, dt);
  return casts[dt];
}

static fg_output update(fg_graph *g, const fg_optimizer_config *c, fg_output var, fg_output grad,
                        fg_output ctrl, fg_output step, fg_output lr) {
  fg_attrs *a = fg_attrs_new();
  fg_output out = FG_NO_OUTPUT;
  if (!a) {
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_minimize: out of memory");
    return out;
  }
  if (c->kind == FG_OPTIMIZER_SGD) {
    fg_output in[4] = {var, grad, lr, ctrl};
    out = fg_op(g, "apply_sgd", NULL, in, ctrl.node >= 0 ? 4 : 3, a);
  } else if (c->kind == FG_OPTIMIZER_MOMENTUM) {
    fg_output buf = state_variable(g, var, "momentum");
    fg_attrs_set_float(a, "momentum", c->momentum);
    fg_attrs_set_int(a, "nesterov", c->nesterov ? 1 : 0);
    fg_output in[5] = {var, buf, grad, lr, ctrl};
    out = fg_op(g, "apply_momentum", NULL, in, ctrl.node >= 0 ? 5 : 4, a);
  } else {
    double wd = c->weight_decay;
    if (c->kind == FG_OPTIMIZER_ADAM && wd > 0) {
      /* torch.optim.Adam couples weight decay into the gradient (L2):
       * apply_adam's l2 adds it in the kernel (the same bits as a mul and
       * an add node). As nodes made here, after every gradient, they would
       * hold each update to the step's tail (executor/plan_order.h).
       * apply_adam's weight_decay is AdamW's decoupled one. */
      fg_attrs_set_float(a, "l2", wd);
      wd = 0;
    }
    fg_output m = state_variable(g, var, "adam_m");
    fg_output v = state_variable(g, var, "adam_v");
    fg_attrs_set_float(a, "beta1", c->beta1);
    fg_attrs_set_float(a, "beta2", c->beta2);
    fg_attrs_set_float(a, "epsilon", c->epsilon);
    fg_attrs_set_float(a, "weight_decay", wd);
    fg_output in[7] = {var, m, v, grad, lr, step, ctrl};
    out = fg_op(g, "apply_adam", NULL, in, ctrl.node >= 0 ? 7 : 6, a);
  }
  fg_attrs_free(a);
  return out;
}

/* Every vars[i] a variable; with `given` (the caller's list), none a batch
 * norm's running statistic, which its own update node writes in place:
 * two writers in one step. 0, or -1 with the graph failed. */
static int check_vars(fg_graph *g, const fg_output *vs, int nv, int given) {
  for (int i = 0; i < nv; i++) {
    const fg_node *vn = fg_graph_node(g, vs[i].node);
    if (!vn || vn->op != FG_OP_VARIABLE) {
      fg_graph_fail(g, FG_INVALID_ARGUMENT, "fg_minimize: vars[%d] (%s) is not a variable", i,
                    vn ? vn->name : "no such node");
      return -1;
    }
    if (given && is_running_stat(g, vs[i].node)) {
      fg_graph_fail(g, FG_INVALID_ARGUMENT,
                    "fg_minimize: vars[%d] (%s) is a batch_norm running statistic, which its "
                    "update node sets; it cannot also be trained",
                    i, vn->name);
      return -1;
    }
  }
  return 0;
}

/* The step's learning rate, made in `scope` before the gradients: the
 * base-rate variable (its name into lr_name) and, for Adam or a schedule
 * that counts steps, the counter variable (*counter, its name into
 * step_name), then the schedule's rate from them.
 *
 * Adam's step counter goes before the gradients in node order: every
 * update reads it, and the plan moves an update up only past nodes it
 * does not wait for (executor/plan_order.h). Made after the gradients,
 * its increment would come after the last of them and hold every update
 * to the step's tail. The learning rate goes there too, for the same
 * reason: it is read by every update. A schedule computes it from the
 * counter as read before the increment (its nodes come before the assign:
 * the plan runs a variable's reads and writes in node id order), so that
 * fetching the rate in a run of its own (a log of it) reads the next
 * step's rate and does not advance the counter. */
static fg_output make_rate(fg_graph *g, const fg_optimizer_config *cfg, const char *scope, int adam,
                           fg_output *counter, char step_name[96], char lr_name[96],
                           fg_status *st) {
  char base[80];
  if (adam || fg_lr_schedule_needs_step(&cfg->schedule)) {
    snprintf(base, sizeof base, "%sstep", scope);
    *counter = scalar_variable(g, base, 0.0, st);
    if (counter->node >= 0) snprintf(step_name, 96, "%s", g->nodes[counter->node].name);
  }
  snprintf(base, sizeof base, "%slearning_rate", scope);
  fg_output base_lr = scalar_variable(g, base, cfg->learning_rate, st);
  snprintf(lr_name, 96, "%s", base_lr.node >= 0 ? g->nodes[base_lr.node].name : "");
  fg_output lr = fg_lr_schedule_rate(g, &cfg->schedule, base_lr, *counter);
  if (lr.node != base_lr.node) {
    snprintf(base, sizeof base, "%slr", scope);
    char name[96];
    unique_name(g, base, name, sizeof name);
    lr = fg_set_name(g, lr, name);
  }
  return lr;
}

fg_output fg_minimize(fg_graph *g, fg_output loss, const fg_output *vars, int n_vars,
                      const fg_optimizer_config *cfg, fg_status *st) {
  if (!g || !cfg || n_vars < 0 || (n_vars > 0 && !vars)) {
    fg_status_set(st, FG_INVALID_ARGUMENT, "fg_minimize: %s",
                  !g     ? "graph is NULL"
                  : !cfg ? "optimizer config is NULL"
                         : "bad variable list");
    if (g) fg_graph_fail(g, FG_INVALID_ARGUMENT, "%s", fg_status_message(st));
    return FG_NO_OUTPUT;
  }
  if (fg_graph_status(g, st) != FG_OK) return FG_NO_OUTPUT;
  const fg_tinfo *lt = fg_graph_tinfo(g, loss);
  if (!lt || !fg_dtype_is_float(lt->dtype) || lt->rank != 0) {
    char shape[FG_SHAPE_STR_MAX] = "?";
    if (lt) fg_shape_str(lt->rank, lt->dims, shape, sizeof shape);
    fg_graph_fail(
        g, FG_INVALID_ARGUMENT, "fg_minimize: loss '%s' must be a float scalar (rank 0), got %s %s",
        lt ? g->nodes[loss.node].name : "?", lt ? fg_dtype_name(lt->dtype) : "nothing", shape);
    fg_graph_status(g, st);
    return FG_NO_OUTPUT;
  }
  if (check_config(g, cfg) != 0) {
    fg_graph_status(g, st);
    return FG_NO_OUTPUT;
  }
  fg_output *vs = NULL;
  int nv = n_vars;
  if (n_vars == 0) {
    nv = collect_variables(g, loss, &vs);
    if (nv < 0) {
      fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_minimize: out of memory");
      fg_graph_status(g, st);
      return FG_NO_OUTPUT;
    }
  } else {
    vs = malloc((size_t)n_vars * sizeof *vs);
    if (vs) memcpy(vs, vars, (size_t)n_vars * sizeof *vs);
  }
  fg_output *grads = malloc(((size_t)nv + 1) * sizeof *grads);
  fg_output *updates = malloc(((size_t)nv + 3) * sizeof *updates);
  fg_output target = FG_NO_OUTPUT;
  if (!vs || !grads || !updates) {
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_minimize: out of memory");
    goto done;
  }
  if (nv == 0) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "fg_minimize: loss '%s' depends on no float variable",
                  g->nodes[loss.node].name);
    goto done;
  }
  if (check_vars(g, vs, nv, n_vars > 0) != 0) goto done;
  char *saved = fg_strdup(fg_graph_scope(g));
  char scope[64];
  unique_name(g, "train", scope, sizeof scope - 1);
  strcat(scope, "/");
  fg_output counter = FG_NO_OUTPUT, step = FG_NO_OUTPUT;
  char step_name[96] = "", lr_name[96] = "";
  const int adam = cfg->kind == FG_OPTIMIZER_ADAM || cfg->kind == FG_OPTIMIZER_ADAMW;
  fg_graph_set_scope(g, scope);
  fg_output lr = make_rate(g, cfg, scope, adam, &counter, step_name, lr_name, st);
  /* Adam reads the count after the increment (its bias correction's t);
   * without Adam the increment is a member of the step's group. */
  if (counter.node >= 0)
    step = fg_assign(g, counter, fg_add(g, counter, fg_scalar(g, FG_F64, 1.0)));
  fg_output casts[FG_DTYPE_COUNT];
  for (int i = 0; i < FG_DTYPE_COUNT; i++)
    casts[i] = FG_NO_OUTPUT;
  for (int i = 0; i < nv; i++) /* here, before the gradients, as the rate */
    lr_as(g, lr, fg_output_dtype(g, vs[i]), casts);
  fg_graph_set_scope(g, saved);
  if (fg_gradients(g, &loss, 1, vs, nv, NULL, grads, st) != 0) {
    free(saved);
    goto done;
  }
  fg_graph_set_scope(g, scope);
  if (cfg->clip_global_norm > 0) clip_by_global_norm(g, grads, nv, cfg->clip_global_norm);
  /* An update overwrites its variable, so it waits for every node of the
   * step that reads it (the forward pass, and gradient nodes such as
   * dX = dY W^T), whatever order a scheduler picks; and for nothing else,
   * so that a layer's update runs as soon as its gradient and the reads
   * of its weights are done, beside the rest of the backward pass, and its
   * gradient's buffer is free for reuse from then on. (Waiting for every
   * gradient, as before, held all updates to the step's tail.) */
  fg_output *ctrl = malloc(((size_t)nv + 1) * sizeof *ctrl);
  if (!ctrl || update_waits(g, loss, vs, grads, nv, ctrl) != 0) {
    free(ctrl);
    fg_graph_set_scope(g, saved);
    free(saved);
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_minimize: out of memory");
    goto done;
  }
  for (int i = 0; i < nv; i++)
    updates[i] = update(g, cfg, vs[i], grads[i], ctrl[i], step,
                        lr_as(g, lr, fg_output_dtype(g, vs[i]), casts));
  free(ctrl);
  int n_up = nv;
  if (step.node >= 0 && !adam) updates[n_up++] = step;
  if (add_stat_updates(g, loss, &updates, &n_up) != 0) {
    fg_graph_set_scope(g, saved);
    free(saved);
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "fg_minimize: out of memory");
    goto done;
  }
  fg_output group = fg_op(g, "group", NULL, updates, n_up, NULL);
  char tname[80];
  snprintf(tname, sizeof tname, "%.*s", (int)strlen(scope) - 1, scope); /* "train" */
  target = fg_set_name(g, group, tname);
  fg_graph_set_scope(g, saved);
  free(saved);
  if (!fg_graph_failed(g)) {
    char lname[4200];
    snprintf(lname, sizeof lname, loss.index ? "%s:%d" : "%s", g->nodes[loss.node].name,
             loss.index);
    fg_graph_set_metadata(g, "loss", lname);
    fg_graph_set_metadata(g, "train_target", tname);
    fg_graph_set_metadata(g, "learning_rate", lr_name);
    if (step_name[0]) fg_graph_set_metadata(g, "train_step", step_name);
  }
done:
  free(vs);
  free(grads);
  free(updates);
  if (fg_graph_status(g, st) != FG_OK) return FG_NO_OUTPUT;
  return target;
}
