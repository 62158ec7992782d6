/* The multi_update pass (executor/passes/multi_update.c): a step's
 * optimizer updates of one rule, dtype and hyper-parameters run as one
 * multi_apply_* node, with the bits of the single updates; what it must
 * leave alone; and the multi-tensor ops' checks on bad graphs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <flowgraph/dist.h>
#include <flowgraph/flowgraph.h>
#include <flowgraph/passes.h>
#include <flowgraph/profile.h>

#include "fgtest.h"
#include "test_passes_mlp.h"

/* A new f32 tensor of rank 1 holding values[0 .. n). */
static fg_tensor *f32_vec(int64_t n, const float *values) {
  fg_tensor *t = fg_tensor_new(FG_F32, 1, &n, NULL);
  memcpy(fg_tensor_data(t), values, (size_t)n * sizeof(float));
  return t;
}

/* A 12-10-8-3 network, batch 16, trained by `kind` at lr 0.05. */
static mlp_spec spec_of(fg_optimizer_kind kind, int nesterov) {
  mlp_spec m = {3, {12, 10, 8, 3}, 16, 0, 7, {0}};
  fg_optimizer_config_init(&m.opt, kind);
  m.opt.learning_rate = 0.05;
  m.opt.nesterov = nesterov;
  if (kind == FG_OPTIMIZER_ADAMW) m.opt.weight_decay = 0.01;
  return m;
}

static const char *const var_names[6] = {"w0", "b0", "w1", "b1", "w2", "b2"};

/* Losses and all six variables bit for bit with the passes on and off,
 * over 4 steps, with 1 and 2 threads; on, the plan runs one multi update
 * of the six variables and no single update; off, six single updates. */
static void rule_case(fg_optimizer_kind kind, int nesterov, const char *single, const char *multi) {
  const char *target = NULL;
  const mlp_spec m = spec_of(kind, nesterov);
  fg_graph *g = mlp_build(&m, &target);
  FG_REQUIRE(g && target);
  for (int threads = 1; threads <= 2; threads++) {
    float loss_on[4], loss_off[4];
    fg_tensor *on[6], *off[6];
    fg_plan_info *p_on = NULL, *p_off = NULL;
    const mlp_run r_on = {NULL, threads, 0, 4}, r_off = {NULL, threads, 1, 4};
    mlp_train(g, &m, target, &r_on, loss_on, on, &p_on);
    mlp_train(g, &m, target, &r_off, loss_off, off, &p_off);
    FG_CHECK(mlp_count_step_op(p_on, multi) == 1 && mlp_count_step_op(p_on, single) == 0);
    /* The train target waits for the multi node itself: no step copies
     * an absorbed update's variable into the arena. */
    FG_CHECK_INT(mlp_count_step_op(p_on, "after"), 0);
    FG_CHECK(mlp_count_step_op(p_off, multi) == 0 && mlp_count_step_op(p_off, single) == 6);
    FG_CHECK(memcmp(loss_on, loss_off, sizeof loss_on) == 0);
    FG_CHECK(loss_on[3] < loss_on[0]); /* it trains */
    for (int i = 0; i < 6; i++)
      if (!mlp_same_tensors(on + i, off + i, 1))
        FG_FAIL_AT("%s: %s differs with the passes on (%d threads)", multi, var_names[i], threads);
    mlp_free_tensors(on, 6), mlp_free_tensors(off, 6);
    fg_plan_info_free(p_on), fg_plan_info_free(p_off);
  }
  /* fg_optimize of the step: one multi node of n = 6 under the first
   * update's name, five after nodes standing for the others. */
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, target, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, multi), 1);
  FG_CHECK_INT(count_op(o, single), 0);
  FG_CHECK_INT(count_op(o, "after"), 5);
  int absorbed = 0;
  for (int i = 0; i < fg_pass_report_size(r); i++) {
    const fg_pass_change *c = fg_pass_report_change(r, i);
    if (strcmp(c->pass, "multi_update") != 0) continue;
    if (strcmp(c->action, "fused") == 0) {
      FG_CHECK_STR(c->into, multi);
      const int id = fg_graph_find(o, c->node);
      int64_t n = 0;
      FG_REQUIRE(id >= 0 && fg_node_attr_int(o, id, "n", &n) == 0);
      FG_CHECK_INT(n, 6);
    }
    absorbed += strcmp(c->action, "absorbed") == 0;
  }
  FG_CHECK_INT(absorbed, 5);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

FG_TEST(multi_update_sgd_bitwise, "") {
  /* update_epilogue would take the three weights' updates into their
   * gradients' GEMMs (test_passes_update_epilogue.c). */
  test_pass_list = NO_UPDATE_EPILOGUE;
  rule_case(FG_OPTIMIZER_SGD, 0, "apply_sgd", "multi_apply_sgd");
  test_pass_list = NULL;
}

FG_TEST(multi_update_momentum_bitwise, "") {
  rule_case(FG_OPTIMIZER_MOMENTUM, 0, "apply_momentum", "multi_apply_momentum");
  rule_case(FG_OPTIMIZER_MOMENTUM, 1, "apply_momentum", "multi_apply_momentum");
}

FG_TEST(multi_update_adam_bitwise, "") {
  rule_case(FG_OPTIMIZER_ADAM, 0, "apply_adam", "multi_apply_adam");
  rule_case(FG_OPTIMIZER_ADAMW, 0, "apply_adam", "multi_apply_adam");
}

/* Two variables with constant gradients, by hand: v0 = [1, 2] - 0.5 *
 * [4, -2] = [-1, 3]; v1 = [3] - 0.5 * [1] = [2.5]. */
static fg_graph *two_updates(void) {
  fg_graph *g = fg_graph_new();
  const float v0[2] = {1, 2}, v1[1] = {3}, g0[2] = {4, -2}, g1[1] = {1};
  fg_tensor *t;
  t = f32_vec(2, v0), fg_variable(g, "v0", t), fg_tensor_free(t);
  t = f32_vec(1, v1), fg_variable(g, "v1", t), fg_tensor_free(t);
  t = f32_vec(2, g0), fg_constant(g, "g0", t), fg_tensor_free(t);
  t = f32_vec(1, g1), fg_constant(g, "g1", t), fg_tensor_free(t);
  fg_output lr = fg_set_name(g, fg_scalar(g, FG_F32, 0.5), "lr");
  fg_output in0[3] = {{fg_graph_find(g, "v0"), 0}, {fg_graph_find(g, "g0"), 0}, lr};
  fg_output in1[3] = {{fg_graph_find(g, "v1"), 0}, {fg_graph_find(g, "g1"), 0}, lr};
  fg_output u[2] = {fg_op(g, "apply_sgd", "u0", in0, 3, NULL),
                    fg_op(g, "apply_sgd", "u1", in1, 3, NULL)};
  fg_op(g, "group", "step", u, 2, NULL);
  return g;
}

/* Steps of the plan running `op`. */
static int count_steps(const fg_plan_info *pi, const char *op) {
  int n = 0;
  for (int i = 0; i < pi->n_steps; i++)
    n += strcmp(pi->step_ops[i], op) == 0;
  return n;
}

static float var_at(fg_session *s, const char *name, int i) {
  fg_status *st = fg_status_new();
  fg_tensor *t = fg_session_variable(s, name, st);
  float v = t ? ((const float *)fg_tensor_data(t))[i] : NAN;
  fg_tensor_free(t);
  fg_status_free(st);
  return v;
}

/* The step updates both variables once; fetching the absorbed update u1
 * with the step gives v1 as updated, and applies nothing twice. */
FG_TEST(multi_update_values_by_hand_and_fetches, "") {
  fg_graph *g = two_updates();
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, 0, st);
  FG_REQUIRE(s);
  const char *step = "step", *fetch = "u1";
  fg_tensor *got = NULL;
  FG_CHECK(fg_session_run(s, NULL, 0, &fetch, 1, &got, &step, 1, st) == 0);
  FG_REQUIRE(got);
  FG_CHECK(((const float *)fg_tensor_data(got))[0] == 2.5f);
  FG_CHECK(var_at(s, "v0", 0) == -1 && var_at(s, "v0", 1) == 3 && var_at(s, "v1", 0) == 2.5f);
  fg_tensor_free(got);
  fg_plan_info *pi = fg_session_plan_info(s, NULL, 0, &fetch, 1, &step, 1, st);
  FG_REQUIRE(pi);
  int multi = 0, single = 0, after = 0;
  for (int i = 0; i < pi->n_steps; i++)
    multi += strcmp(pi->step_ops[i], "multi_apply_sgd") == 0,
        single += strcmp(pi->step_ops[i], "apply_sgd") == 0,
        after += strcmp(pi->step_ops[i], "after") == 0;
  FG_CHECK(multi == 1 && single == 0 && after == 1); /* u1's value, fetched */
  fg_plan_info_free(pi);
  /* The step alone: the group waits for the multi node, and no step
   * copies v1 for u1. */
  pi = fg_session_plan_info(s, NULL, 0, NULL, 0, &step, 1, st);
  FG_REQUIRE(pi);
  after = multi = 0;
  for (int i = 0; i < pi->n_steps; i++)
    multi += strcmp(pi->step_ops[i], "multi_apply_sgd") == 0,
        after += strcmp(pi->step_ops[i], "after") == 0;
  FG_CHECK(multi == 1 && after == 0);
  FG_CHECK(fg_session_run(s, NULL, 0, NULL, 0, NULL, &step, 1, st) == 0);
  /* v0 = [-1, 3] - 0.5 * [4, -2] = [-3, 4]; v1 = 2.5 - 0.5 * 1 = 2. */
  FG_CHECK(var_at(s, "v0", 0) == -3 && var_at(s, "v0", 1) == 4 && var_at(s, "v1", 0) == 2);
  fg_plan_info_free(pi);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

/* Steps of their own over one multi update (a GAN's two optimizers with a
 * shared rate, built by hand): targeting one update, or a group of some
 * of them, applies those only, as without the passes; a run needing all
 * of them still runs the multi node. v0 = [1, 2] - 0.5 [4, -2] = [-1, 3],
 * v1 = 3 - 0.5 = 2.5. */
FG_TEST(multi_update_runs_needing_some_members_update_only_those, "") {
  fg_graph *g = two_updates();
  fg_output u0 = {fg_graph_find(g, "u0"), 0}, u1 = {fg_graph_find(g, "u1"), 0};
  fg_op(g, "group", "step_a", &u0, 1, NULL);
  fg_op(g, "group", "step_b", &u1, 1, NULL);
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, 0, st);
  FG_REQUIRE(s);
  const char *step_a = "step_a", *step_b = "step_b", *both = "step", *name_u1 = "u1";
  FG_CHECK(fg_session_run(s, NULL, 0, NULL, 0, NULL, &step_a, 1, st) == 0);
  FG_CHECK(var_at(s, "v0", 0) == -1 && var_at(s, "v0", 1) == 3 && var_at(s, "v1", 0) == 3);
  fg_plan_info *pi = fg_session_plan_info(s, NULL, 0, NULL, 0, &step_a, 1, st);
  FG_REQUIRE(pi);
  FG_CHECK(count_steps(pi, "apply_sgd") == 1 && count_steps(pi, "multi_apply_sgd") == 0);
  fg_plan_info_free(pi);
  /* v1 = 3 - 0.5 = 2.5 fetched by name; v0 stays [-1, 3]. */
  fg_tensor *got = NULL;
  FG_CHECK(fg_session_run(s, NULL, 0, &name_u1, 1, &got, NULL, 0, st) == 0);
  FG_REQUIRE(got);
  FG_CHECK(((const float *)fg_tensor_data(got))[0] == 2.5f);
  fg_tensor_free(got);
  FG_CHECK(var_at(s, "v0", 0) == -1 && var_at(s, "v0", 1) == 3 && var_at(s, "v1", 0) == 2.5f);
  FG_CHECK(fg_session_run(s, NULL, 0, NULL, 0, NULL, &step_b, 1, st) == 0);
  FG_CHECK(var_at(s, "v0", 0) == -1 && var_at(s, "v1", 0) == 2);
  /* Both: v0 = [-1, 3] - 0.5 [4, -2] = [-3, 4], v1 = 2 - 0.5 = 1.5, as one multi update. */
  FG_CHECK(fg_session_run(s, NULL, 0, NULL, 0, NULL, &both, 1, st) == 0);
  FG_CHECK(var_at(s, "v0", 0) == -3 && var_at(s, "v0", 1) == 4 && var_at(s, "v1", 0) == 1.5f);
  pi = fg_session_plan_info(s, NULL, 0, NULL, 0, &both, 1, st);
  FG_REQUIRE(pi);
  FG_CHECK(count_steps(pi, "multi_apply_sgd") == 1 && count_steps(pi, "apply_sgd") == 0);
  fg_plan_info_free(pi);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

/* A node between the first update and a later one reads the later one's
 * variable: moving that write up would change what it reads, so the two
 * stay apart, and the read sees the old value (3 * 2). */
FG_TEST(multi_update_keeps_reads_between, "") {
  fg_graph *g = fg_graph_new();
  const float one[1] = {1}, three[1] = {3};
  fg_tensor *t;
  t = f32_vec(1, one), fg_variable(g, "v0", t), fg_tensor_free(t);
  t = f32_vec(1, three), fg_variable(g, "v1", t), fg_tensor_free(t);
  t = f32_vec(1, one), fg_constant(g, "grad", t), fg_tensor_free(t);
  fg_output lr = fg_scalar(g, FG_F32, 0.5), gr = {fg_graph_find(g, "grad"), 0};
  fg_output v0 = {fg_graph_find(g, "v0"), 0}, v1 = {fg_graph_find(g, "v1"), 0};
  fg_output in0[3] = {v0, gr, lr}, in1[3] = {v1, gr, lr};
  fg_output u0 = fg_op(g, "apply_sgd", "u0", in0, 3, NULL);
  fg_output r = fg_set_name(g, fg_mul(g, v1, fg_scalar(g, FG_F32, 2)), "read");
  fg_output u[2] = {u0, fg_op(g, "apply_sgd", "u1", in1, 3, NULL)};
  fg_op(g, "group", "step", u, 2, NULL);
  const char *fetch[2] = {"step", "read"};
  fg_status *st = fg_status_new();
  fg_graph *o = fg_optimize(g, NULL, fetch, 2, NULL, st);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "multi_apply_sgd"), 0);
  FG_CHECK_INT(count_op(o, "apply_sgd"), 2);
  fg_graph_free(o);
  fg_session *s = passes_session(g, 1, 0, st);
  fg_tensor *got = NULL;
  FG_REQUIRE(s && fg_session_run(s, NULL, 0, &fetch[1], 1, &got, &fetch[0], 1, st) == 0);
  FG_CHECK(((const float *)fg_tensor_data(got))[0] == 6);
  FG_CHECK(var_at(s, "v1", 0) == 2.5f);
  fg_tensor_free(got);
  fg_session_free(s);
  fg_status_free(st);
  (void)r;
  fg_graph_free(g);
}

/* Groups split by learning rate and by dtype; a variable over the
 * group's cap (2^16 elements on the CPU) keeps its own update (it frees
 * its gradient as soon as it is applied). */
FG_TEST(multi_update_groups_by_rate_dtype_and_size, "") {
  fg_graph *g = fg_graph_new();
  const int64_t small[1] = {4}, big[2] = {1100, 1000};
  fg_output lr1 = fg_scalar(g, FG_F32, 0.5), lr2 = fg_scalar(g, FG_F32, 0.25);
  fg_output lr64 = fg_scalar(g, FG_F64, 0.5);
  fg_output ups[8];
  int n = 0;
  for (int k = 0; k < 7; k++) {
    const int dt64 = k == 4 || k == 5, is_big = k == 6;
    fg_tensor *t =
        fg_tensor_new(dt64 ? FG_F64 : FG_F32, is_big ? 2 : 1, is_big ? big : small, NULL);
    char vn[16], gn[16];
    snprintf(vn, sizeof vn, "v%d", k);
    snprintf(gn, sizeof gn, "g%d", k);
    fg_output v = fg_variable(g, vn, t), gr = fg_constant(g, gn, t);
    fg_tensor_free(t);
    fg_output in[3] = {v, gr, dt64 ? lr64 : k < 2 || k == 6 ? lr1 : lr2};
    ups[n++] = fg_op(g, "apply_sgd", NULL, in, 3, NULL);
  }
  fg_op(g, "group", "step", ups, n, NULL);
  const char *fetch = "step";
  fg_graph *o = optimize1(g, fetch, NULL);
  FG_REQUIRE(o);
  /* v0, v1 at lr1; v2, v3 at lr2; v4, v5 in f64; v6 alone (1.1M). */
  FG_CHECK_INT(count_op(o, "multi_apply_sgd"), 3);
  FG_CHECK_INT(count_op(o, "apply_sgd"), 1);
  FG_CHECK_INT(count_op(o, "after"), 3);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* What the multi-tensor ops refuse, naming the node, input and values. */
FG_TEST(multi_update_op_bad_inputs, "badinput") {
  static const struct {
    int n, n_in, dup, shape_off, constant_var;
    const char *msg;
  } cases[] = {
      {0, 5, 0, 0, 0, "node 'm' (multi_apply_sgd): attribute 'n' = 0 must be >= 1"},
      {2, 4, 0, 0, 0, "n = 2 variables need 5 inputs (2 lists of n, then lr), got 4"},
      {2, 5, 1, 0, 0, "inputs 0 and 1 are the same variable; each is written once"},
      {2, 5, 0, 1, 0, "input 3 (grad 1) shape [3] does not match input 1 (var 1) shape [2]"},
      {2, 5, 0, 0, 1, "node 'm' (multi_apply_sgd): input 1 must be a variable, got node 'c'"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    fg_graph *g = fg_graph_new();
    const int64_t d2[1] = {2}, d3[1] = {3};
    fg_tensor *t2 = fg_tensor_new(FG_F32, 1, d2, NULL), *t3 = fg_tensor_new(FG_F32, 1, d3, NULL);
    fg_output a = fg_variable(g, "a", t2), b = fg_variable(g, "b", t2);
    fg_output k = fg_constant(g, "c", t2);
    fg_output g1 = fg_constant(g, "g1", cases[c].shape_off ? t3 : t2);
    fg_tensor_free(t2), fg_tensor_free(t3);
    fg_output lr = fg_scalar(g, FG_F32, 0.1);
    fg_output in[5] = {a, cases[c].dup ? a : cases[c].constant_var ? k : b, k, g1, lr};
    if (cases[c].n_in == 4) in[3] = lr;
    fg_attrs *at = fg_attrs_new();
    fg_attrs_set_int(at, "n", cases[c].n);
    fg_output m = fg_op(g, "multi_apply_sgd", "m", in, cases[c].n_in, at);
    fg_attrs_free(at);
    fg_status *st = fg_status_new();
    if (m.node >= 0) {
      fg_session *s = passes_session(g, 1, 1, st);
      const char *target = "m";
      if (s) fg_session_run(s, NULL, 0, NULL, 0, NULL, &target, 1, st);
      fg_session_free(s);
    } else {
      fg_graph_status(g, st);
    }
    FG_CHECK(fg_status_code(st) != FG_OK);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), cases[c].msg);
    fg_status_free(st);
    fg_graph_free(g);
  }
}

/* Data parallelism reduces each update's gradient: a graph whose updates
 * are already one node is refused, with what to do instead. */
FG_TEST(multi_update_refused_by_data_parallel, "badinput") {
  const char *target = NULL;
  const mlp_spec m = spec_of(FG_OPTIMIZER_SGD, 0);
  fg_graph *g = mlp_build(&m, &target);
  FG_REQUIRE(g && target);
  fg_graph *o = optimize1(g, target, NULL);
  FG_REQUIRE(o);
  fg_status *st = fg_status_new();
  const char *batch[2] = {"x", "y"};
  fg_graph *dp = fg_data_parallel(o, 2, batch, 2, NULL, st);
  FG_CHECK(dp == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_UNIMPLEMENTED);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "(multi_apply_sgd) updates several variables");
  fg_graph_free(dp);
  fg_status_free(st);
  fg_graph_free(o);
  fg_graph_free(g);
}
