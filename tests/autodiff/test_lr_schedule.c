/* fg_minimize's learning-rate schedules: the rate each step reads against
 * torch.optim.lr_scheduler's closed forms (written out here), against the
 * rates torch itself gave (tests/data/lr_schedule_torch.h, from tests/gen/gen_lr_schedule.py)
 * and against its chainable forms (what stepping a torch scheduler returns: StepLR,
 * CosineAnnealingLR and LinearLR's get_lr, SequentialLR switching at the
 * milestone with the next scheduler's step(0)); SGD moving weights by
 * exactly the rate of each step; a saved and reloaded session continuing
 * the schedule; assigning the rate variable; bad schedules. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "data/lr_schedule_torch.h"
#include "fgtest.h"
#include "flowgraph/autodiff.h"
#include "flowgraph/io.h"
#include "flowgraph/passes.h"
#include "flowgraph/session.h"

#define BASE_LR 0.2
#define LR_PI   3.14159265358979323846 /* M_PI is not C11 */

/* ---- references ---------------------------------------------------------------------- */

/* The closed forms, with t the steps done before the step. */
static double closed_main(const fg_lr_schedule *s, double base, double t) {
  if (s->kind == FG_LR_STEP) return base * pow(s->gamma, floor(t / (double)s->step_size));
  if (s->kind == FG_LR_COSINE)
    return s->eta_min + (base - s->eta_min) * (1 + cos(LR_PI * t / (double)s->t_max)) / 2;
  return base;
}

static double closed_form(const fg_lr_schedule *s, double base, int64_t t) {
  const double w = (double)s->warmup_steps, f = s->warmup_start_factor;
  if (t < s->warmup_steps) return base * (f + (1 - f) * (double)t / w);
  return closed_main(s, base, (double)(t - s->warmup_steps));
}

/* torch's chainable get_lr, step by step: rates[t] for t < n. */
static void chainable(const fg_lr_schedule *s, double base, int n, double *rates) {
  const int64_t w = s->warmup_steps;
  double lr = base;
  for (int t = 0; t < n; t++) {
    if (t < w) { /* LinearLR(start_factor f, end_factor 1, total_iters w) */
      const double f = s->warmup_start_factor;
      lr = t == 0 ? base * f : lr * (1 + (1 - f) / ((double)w * f + (double)(t - 1) * (1 - f)));
    } else if (t == w) {
      lr = base; /* SequentialLR: the next scheduler's step(0), its closed form at 0 */
    } else {
      const int64_t e = t - w; /* the main scheduler's last_epoch, >= 1 */
      if (s->kind == FG_LR_STEP) {
        if (e % s->step_size == 0) lr *= s->gamma;
      } else if (s->kind == FG_LR_COSINE) {
        const double T = (double)s->t_max, m = s->eta_min;
        if ((e - 1 - s->t_max) % (2 * s->t_max) == 0)
          lr = lr + (base - m) * (1 - cos(LR_PI / T)) / 2;
        else
          lr =
              (1 + cos(LR_PI * (double)e / T)) / (1 + cos(LR_PI * (double)(e - 1) / T)) * (lr - m) +
              m;
      }
    }
    rates[t] = lr;
  }
}

/* ---- the model --------------------------------------------------------------------------- */

/* w (f64 [2]) and v (f32 [2]) with loss = sum(w * cw) + sum(v * cv): the
 * gradients are cw and cv, powers of two, so lr * grad is exact in either
 * type and an update moves a weight by exactly lr * grad. */
static const double CW[2] = {1.0, -2.0};
static const float CV[2] = {0.5f, 4.0f};

typedef struct model {
  fg_graph *g;
  fg_status *st;
  fg_session *s;
} model;

static int build(model *m, const fg_optimizer_config *cfg) {
  m->g = fg_graph_new();
  m->st = fg_status_new();
  m->s = NULL;
  int64_t d[1] = {2};
  const double w0[2] = {1.0, 3.0};
  const float v0[2] = {-1.0f, 2.0f};
  fg_tensor *tw = fg_tensor_from_data(FG_F64, 1, d, w0, sizeof w0, m->st);
  fg_tensor *tv = fg_tensor_from_data(FG_F32, 1, d, v0, sizeof v0, m->st);
  fg_tensor *cw = fg_tensor_from_data(FG_F64, 1, d, CW, sizeof CW, m->st);
  fg_tensor *cv = fg_tensor_from_data(FG_F32, 1, d, CV, sizeof CV, m->st);
  fg_output w = fg_variable(m->g, "w", tw), v = fg_variable(m->g, "v", tv);
  fg_output lw = fg_reduce_sum(m->g, fg_mul(m->g, w, fg_constant(m->g, "cw", cw)), NULL, 0, 0);
  fg_output lv = fg_reduce_sum(m->g, fg_mul(m->g, v, fg_constant(m->g, "cv", cv)), NULL, 0, 0);
  fg_output loss = fg_set_name(m->g, fg_add(m->g, lw, fg_cast(m->g, lv, FG_F64)), "loss");
  fg_tensor_free(tw);
  fg_tensor_free(tv);
  fg_tensor_free(cw);
  fg_tensor_free(cv);
  if (fg_minimize(m->g, loss, NULL, 0, cfg, m->st).node < 0) return -1;
  m->s = fg_session_new(m->g, NULL, m->st);
  return m->s ? 0 : -1;
}

static void model_free(model *m) {
  fg_session_free(m->s);
  fg_graph_free(m->g);
  fg_status_free(m->st);
}

/* One step: fetches the rate it used ("train/lr", or the variable for a
 * constant rate) and the weights before and after. */
static int step(model *m, const char *lr_name, double *lr, double w_before[2], float v_before[2],
                double w_after[2], float v_after[2]) {
  const char *fetch[3] = {lr_name, "w", "v"}, *target = "train";
  fg_tensor *out[3] = {NULL, NULL, NULL};
  if (fg_session_run(m->s, NULL, 0, fetch + 1, 2, out + 1, NULL, 0, m->st) != 0) return -1;
  memcpy(w_before, fg_tensor_data(out[1]), 2 * sizeof(double));
  memcpy(v_before, fg_tensor_data(out[2]), 2 * sizeof(float));
  fg_tensor_free(out[1]);
  fg_tensor_free(out[2]);
  /* The rate is fetched in the step's own run: the one the updates read. */
  if (fg_session_run(m->s, NULL, 0, fetch, 1, out, &target, 1, m->st) != 0) return -1;
  *lr = *(const double *)fg_tensor_data(out[0]);
  fg_tensor_free(out[0]);
  if (fg_session_run(m->s, NULL, 0, fetch + 1, 2, out + 1, NULL, 0, m->st) != 0) return -1;
  memcpy(w_after, fg_tensor_data(out[1]), 2 * sizeof(double));
  memcpy(v_after, fg_tensor_data(out[2]), 2 * sizeof(float));
  fg_tensor_free(out[1]);
  fg_tensor_free(out[2]);
  return 0;
}

/* Runs n steps of the schedule and checks every rate and update. `exact`:
 * the closed form's bits (every schedule but cosine, whose cos is a series
 * in the graph: within 1e-15 relative). */
static void check_schedule(const fg_lr_schedule *sched, int n, int exact, const double *torch) {
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = BASE_LR;
  cfg.schedule = *sched;
  model m;
  int ok = build(&m, &cfg) == 0;
  if (!ok) fprintf(stderr, "build: %s\n", fg_status_message(m.st));
  FG_REQUIRE(ok);
  const int constant = sched->kind == FG_LR_CONSTANT && sched->warmup_steps == 0;
  FG_CHECK_STR(fg_graph_metadata(m.g, "learning_rate"), "train/learning_rate");
  const char *lr_name = constant ? "train/learning_rate" : "train/lr";
  double chain[64];
  FG_REQUIRE(n <= 64);
  chainable(sched, BASE_LR, n, chain);
  for (int t = 0; t < n; t++) {
    double lr, wb[2], wa[2];
    float vb[2], va[2];
    int rc = step(&m, lr_name, &lr, wb, vb, wa, va);
    if (rc != 0) fprintf(stderr, "step %d: %s\n", t, fg_status_message(m.st));
    FG_REQUIRE(rc == 0);
    const double want = closed_form(sched, BASE_LR, t);
    if (exact) {
      if (lr != want) FG_FAIL_AT("step %d: rate %.17g, closed form %.17g", t, lr, want);
    } else {
      FG_CHECK_NEAR(lr, want, 1e-15 * BASE_LR);
    }
    FG_CHECK_NEAR(lr, chain[t], 1e-12 * BASE_LR);
    if (torch) FG_CHECK_NEAR(lr, torch[t], 1e-12 * BASE_LR);
    /* SGD: w -= lr * grad, bit for bit, in each variable's type. */
    for (int k = 0; k < 2; k++) {
      if (wa[k] != wb[k] - lr * CW[k])
        FG_FAIL_AT("step %d: w[%d] %.17g -> %.17g, want -%.17g", t, k, wb[k], wa[k], lr * CW[k]);
      const float lr32 = (float)lr;
      if (va[k] != vb[k] - lr32 * CV[k])
        FG_FAIL_AT("step %d: v[%d] %.9g -> %.9g, want -%.9g", t, k, vb[k], va[k], lr32 * CV[k]);
    }
  }
  model_free(&m);
}

static fg_lr_schedule sched_default(void) {
  fg_optimizer_config c;
  fg_optimizer_config_init(&c, FG_OPTIMIZER_SGD);
  return c.schedule;
}

FG_TEST(lr_defaults_are_torchs, "") {
  fg_lr_schedule s = sched_default();
  FG_CHECK_INT(s.kind, FG_LR_CONSTANT);
  FG_CHECK(s.gamma == 0.1);                     /* StepLR */
  FG_CHECK(s.warmup_start_factor == 1.0 / 3.0); /* LinearLR */
  FG_CHECK(s.eta_min == 0 && s.warmup_steps == 0);
}

FG_TEST(lr_constant, "") { check_schedule((fg_lr_schedule[]){sched_default()}, 5, 1, NULL); }

FG_TEST(lr_step_decay, "") {
  fg_lr_schedule s = sched_default();
  s.kind = FG_LR_STEP;
  s.step_size = 3;
  s.gamma = 0.5;
  check_schedule(&s, 12, 1, TORCH_STEP);
  /* By hand: 0.2 for t = 0..2, 0.1 for 3..5, 0.05 for 6..8. */
  FG_CHECK(closed_form(&s, BASE_LR, 2) == 0.2 && closed_form(&s, BASE_LR, 3) == 0.1);
  FG_CHECK(closed_form(&s, BASE_LR, 8) == 0.05);
}

FG_TEST(lr_step_decay_default_gamma, "") {
  fg_lr_schedule s = sched_default();
  s.kind = FG_LR_STEP;
  s.step_size = 2;
  check_schedule(&s, 7, 1, TORCH_STEP_DEFAULT_GAMMA);
}

FG_TEST(lr_cosine, "") {
  fg_lr_schedule s = sched_default();
  s.kind = FG_LR_COSINE;
  s.t_max = 5;
  s.eta_min = 0.01;
  /* Two and a half periods: down to eta_min at t = 5, up again to base at
   * 10 (the closed form's period), down at 15. */
  check_schedule(&s, 24, 0, TORCH_COSINE);
  FG_CHECK_NEAR(closed_form(&s, BASE_LR, 5), 0.01, 1e-17);
  FG_CHECK_NEAR(closed_form(&s, BASE_LR, 10), 0.2, 1e-16);
}

FG_TEST(lr_cosine_long, "") {
  fg_lr_schedule s = sched_default();
  s.kind = FG_LR_COSINE;
  s.t_max = 40;
  check_schedule(&s, 60, 0, TORCH_COSINE_LONG);
}

FG_TEST(lr_warmup_then_constant, "") {
  fg_lr_schedule s = sched_default();
  s.warmup_steps = 4;
  check_schedule(&s, 8, 1, TORCH_WARMUP_CONSTANT);
  /* By hand, f = 1/3: 0.2 * (1/3 + (2/3) t / 4) at t = 2 is 0.2 * 2/3. */
  FG_CHECK_NEAR(closed_form(&s, BASE_LR, 2), 0.2 * 2.0 / 3.0, 1e-16);
}

FG_TEST(lr_warmup_then_step, "") {
  fg_lr_schedule s = sched_default();
  s.kind = FG_LR_STEP;
  s.step_size = 2;
  s.gamma = 0.25;
  s.warmup_steps = 3;
  s.warmup_start_factor = 0.5;
  check_schedule(&s, 10, 1, TORCH_WARMUP_STEP);
}

FG_TEST(lr_warmup_then_cosine, "") {
  fg_lr_schedule s = sched_default();
  s.kind = FG_LR_COSINE;
  s.t_max = 6;
  s.eta_min = 0.02;
  s.warmup_steps = 5;
  s.warmup_start_factor = 0.1;
  check_schedule(&s, 20, 0, TORCH_WARMUP_COSINE);
}

/* Three f32 variables v0..v2 [3], loss = sum of their squares, trained
 * by momentum SGD with a cosine schedule. */
static fg_graph *three_vars(fg_status *st) {
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_MOMENTUM);
  cfg.schedule.kind = FG_LR_COSINE;
  cfg.schedule.t_max = 3;
  fg_graph *g = fg_graph_new();
  int64_t d[1] = {3};
  fg_init z = {FG_INIT_ONES, 0, 0, 0, 0};
  fg_output loss = fg_scalar(g, FG_F32, 0);
  for (int i = 0; i < 3; i++) {
    char name[16];
    snprintf(name, sizeof name, "v%d", i);
    fg_output v = fg_variable_init(g, name, FG_F32, 1, d, &z);
    loss = fg_add(g, loss, fg_reduce_sum(g, fg_mul(g, v, v), NULL, 0, 0));
  }
  if (fg_minimize(g, loss, NULL, 0, &cfg, st).node < 0) {
    fg_graph_free(g);
    return NULL;
  }
  return g;
}

static int count_op(const fg_graph *g, const char *op) {
  int n = 0;
  for (int id = 0; id < fg_graph_num_nodes(g); id++)
    n += strcmp(fg_node_op(g, id), op) == 0;
  return n;
}

/* Every update of a step reads one rate node per dtype, made before the
 * gradients, so the multi_update pass still groups them. */
FG_TEST(lr_one_rate_node_per_dtype, "") {
  fg_status *st = fg_status_new();
  fg_graph *g = three_vars(st);
  FG_REQUIRE(g);
  int lr_in = -1, n_updates = 0, first_grad = -1;
  for (int id = 0; id < fg_graph_num_nodes(g); id++) {
    const char *op = fg_node_op(g, id);
    if (first_grad < 0 && strncmp(fg_node_name(g, id), "gradients/", 10) == 0) first_grad = id;
    if (strcmp(op, "apply_momentum") != 0) continue;
    fg_output in = fg_node_input(g, id, 3);
    if (lr_in < 0) lr_in = in.node;
    FG_CHECK_INT(in.node, lr_in);
    n_updates++;
  }
  FG_CHECK_INT(n_updates, 3);
  FG_CHECK_STR(fg_node_op(g, lr_in), "cast");
  FG_CHECK(lr_in < first_grad);
  FG_CHECK_STR(fg_graph_metadata(g, "train_step"), "train/step");
  const char *fetch[1] = {"train"};
  fg_graph *o = fg_optimize(g, NULL, fetch, 1, NULL, st);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "multi_apply_momentum"), 1);
  FG_CHECK_INT(count_op(o, "apply_momentum"), 0);
  fg_graph_free(o);
  fg_status_free(st);
  fg_graph_free(g);
}

/* The counter and the rate are variables: a saved session resumes the
 * schedule at the step it stopped, and assigning the rate variable changes
 * later steps' rates. */
FG_TEST(lr_schedule_resumes_after_save, "") {
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = BASE_LR;
  cfg.schedule.kind = FG_LR_STEP;
  cfg.schedule.step_size = 2;
  cfg.schedule.gamma = 0.5;
  cfg.schedule.warmup_steps = 2;
  model m;
  FG_REQUIRE(build(&m, &cfg) == 0);
  char dir[256], path[300];
  FG_REQUIRE(fgt_mkdtemp(dir, sizeof dir, "fg_lr_sched"));
  snprintf(path, sizeof path, "%s/m.fgb", dir);
  double lr, wb[2], wa[2];
  float vb[2], va[2];
  for (int t = 0; t < 5; t++)
    FG_REQUIRE(step(&m, "train/lr", &lr, wb, vb, wa, va) == 0);
  FG_REQUIRE(fg_session_save(m.s, path, m.st) == 0);
  fg_session_free(m.s);
  fg_graph_free(m.g);
  m.g = fg_graph_load(path, m.st);
  FG_REQUIRE(m.g);
  m.s = fg_session_new(m.g, NULL, m.st);
  FG_REQUIRE(m.s);
  /* Fetched alone (as a log would), the rate is the next step's, and
   * fetching it changes nothing. */
  for (int k = 0; k < 2; k++) {
    const char *f = "train/lr";
    fg_tensor *r = NULL;
    FG_REQUIRE(fg_session_run(m.s, NULL, 0, &f, 1, &r, NULL, 0, m.st) == 0);
    FG_CHECK(*(const double *)fg_tensor_data(r) == 0.1);
    fg_tensor_free(r);
  }
  fg_tensor *c = fg_session_variable(m.s, "train/step", m.st);
  FG_REQUIRE(c);
  FG_CHECK(*(const double *)fg_tensor_data(c) == 5.0);
  fg_tensor_free(c);
  for (int t = 5; t < 9; t++) {
    FG_REQUIRE(step(&m, "train/lr", &lr, wb, vb, wa, va) == 0);
    /* By hand: warm-up 2 steps, then 0.2 halved every 2 steps: t = 5 is
     * main step 3 (0.1), t = 6, 7 are 0.05, t = 8 is 0.025. */
    const double want[9] = {0, 0, 0, 0, 0, 0.1, 0.05, 0.05, 0.025};
    if (lr != want[t]) FG_FAIL_AT("step %d after the reload: rate %.17g, want %g", t, lr, want[t]);
    FG_CHECK(lr == closed_form(&cfg.schedule, BASE_LR, t));
  }
  /* A new base rate, assigned in a run of its own. */
  fg_output lrv = fg_graph_find_output(m.g, fg_graph_metadata(m.g, "learning_rate"));
  FG_REQUIRE(lrv.node >= 0);
  fg_output set = fg_assign(m.g, lrv, fg_scalar(m.g, FG_F64, 0.8));
  FG_REQUIRE(fg_graph_status(m.g, m.st) == FG_OK);
  const char *set_name = fg_node_name(m.g, set.node);
  FG_REQUIRE(fg_session_run(m.s, NULL, 0, NULL, 0, NULL, &set_name, 1, m.st) == 0);
  FG_REQUIRE(step(&m, "train/lr", &lr, wb, vb, wa, va) == 0);
  FG_CHECK(lr == 0.8 * 0.125); /* t = 9: main step 7, gamma^3 */
  model_free(&m);
  fgt_rmtree(dir);
}

static void check_bad(const fg_lr_schedule *s, const char *needle) {
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_ADAM);
  cfg.schedule = *s;
  model m;
  FG_CHECK(build(&m, &cfg) != 0);
  FG_CHECK_INT(fg_status_code(m.st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(m.st), needle);
  model_free(&m);
}

FG_TEST(lr_bad_schedules_refused, "") {
  fg_lr_schedule s = sched_default();
  s.kind = (fg_lr_schedule_kind)7;
  check_bad(&s, "schedule.kind");
  s = sched_default();
  s.kind = FG_LR_STEP; /* step_size 0 */
  check_bad(&s, "schedule.step_size (must be >= 1)");
  s.step_size = 2;
  s.gamma = 0;
  check_bad(&s, "schedule.gamma (must be > 0)");
  s.gamma = -0.5;
  check_bad(&s, "schedule.gamma");
  s = sched_default();
  s.kind = FG_LR_COSINE;
  check_bad(&s, "schedule.t_max (must be >= 1)");
  s.t_max = 3;
  s.eta_min = -1;
  check_bad(&s, "schedule.eta_min (must be >= 0)");
  s = sched_default();
  s.warmup_steps = -1;
  check_bad(&s, "schedule.warmup_steps (must be >= 0)");
  s.warmup_steps = 3;
  s.warmup_start_factor = 0;
  check_bad(&s, "schedule.warmup_start_factor (must be in (0, 1])");
  s.warmup_start_factor = 1.5;
  check_bad(&s, "schedule.warmup_start_factor");
}
