/* The grad_epilogue pass (executor/passes/epilogue_grad.c) on crafted
 * graphs: relu's gradient of a product, select(greater(y, 0), matmul, 0),
 * becomes one fused_matmul_relu_grad; what stays (another zero, another
 * comparison, an outside consumer, a fetched node in fg_optimize, an
 * unknown dim, a variable written between its read and the root); the
 * bits with the passes on and off; a training step of a 4-layer MLP whose
 * losses and weights are bit for bit those without passes while its
 * input-gradient products are gone from the plan; and a run-time y of
 * the wrong shape refused with the node's name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "executor/cuda_backend.h"
#include "test_passes_mlp.h"

/* sin-based values; every 7th is -0.0, +0.0, NaN or -inf in turn when
 * special. */
static fg_tensor *vals(int rank, const int64_t *dims, int salt, int special) {
  fg_tensor *t = fg_tensor_new(FG_F32, rank, dims, NULL);
  float *p = fg_tensor_data(t);
  static const float sp[4] = {-0.0f, 0.0f, NAN, -INFINITY};
  for (int64_t i = 0; i < fg_tensor_num_elements(t); i++)
    p[i] = special && i % 7 == 3 ? sp[(i / 7) % 4] : sinf(0.41f * (float)(i + 1) + (float)salt);
  return t;
}

/* How the crafted relu gradient varies. */
typedef struct rg_opts {
  int transpose_b; /* w is [6, 5] (dz @ w^T) instead of [5, 6] */
  int else_neg;    /* the select's zero is -0.0 */
  int cmp_one;     /* greater(y, 1) */
  int cmp_less;    /* less(0, y): the same mask, another op */
  int side_of_mm;  /* side = exp(mm) */
  int side_of_gt;  /* side = logical_not(gt) */
  int unknown;     /* dz and h [-1, ...] */
  int y_variable;  /* y is a variable written after the greater */
} rg_opts;

/* dz [4, 5] (placeholder) -> mm = dz @ w -> out = select(greater(y, 0),
 * mm, 0) with y = relu(h), h [4, 6] a placeholder. */
static fg_graph *relu_grad_graph(const rg_opts *o) {
  fg_graph *g = fg_graph_new();
  const int64_t b = o->unknown ? -1 : 4;
  const int64_t dzd[2] = {b, 5}, hd[2] = {b, 6}, wd[2] = {5, 6}, wtd[2] = {6, 5};
  fg_output dz = fg_placeholder(g, "dz", FG_F32, 2, dzd);
  fg_tensor *wt = vals(2, o->transpose_b ? wtd : wd, 1, 0);
  fg_output w = fg_constant(g, "w", wt);
  fg_tensor_free(wt);
  fg_output y, h = fg_placeholder(g, "h", FG_F32, 2, hd); /* fed, unread with y_variable */
  if (o->y_variable) {
    const int64_t d4[2] = {4, 6};
    fg_tensor *v0 = vals(2, d4, 5, 1);
    y = fg_variable(g, "v", v0);
    fg_tensor_free(v0);
  } else {
    y = fg_set_name(g, fg_relu(g, h), "y");
  }
  fg_output mm = fg_set_name(g, fg_matmul(g, dz, w, 0, o->transpose_b), "mm");
  fg_output zero = fg_scalar(g, FG_F32, 0), one = fg_scalar(g, FG_F32, 1);
  fg_output gt = fg_set_name(g,
                             o->cmp_less  ? fg_less(g, zero, y)
                             : o->cmp_one ? fg_greater(g, y, one)
                                          : fg_greater(g, y, zero),
                             "gt");
  fg_output z2 = o->else_neg ? fg_scalar(g, FG_F32, -0.0) : zero;
  for (int at = 1; at <= 2; at++) {
    /* 1: written between the greater and the select; 2: after both. */
    if (o->y_variable == at) {
      const int64_t d4[2] = {4, 6};
      fg_tensor *v1 = vals(2, d4, 6, 0);
      fg_output c = fg_constant(g, "c", v1);
      fg_tensor_free(v1);
      fg_set_name(g, fg_assign(g, y, c), "write");
    }
    if (at == 1) fg_set_name(g, fg_select(g, gt, mm, z2), "out");
  }
  if (o->side_of_mm) fg_set_name(g, fg_exp(g, mm), "side");
  if (o->side_of_gt) fg_set_name(g, fg_logical_not(g, gt), "side");
  return g;
}

/* `fetches` of g (feeds dz and h, with NaN, infinities and signed zeros)
 * with the passes on (no_passes 0) or off, each also running `target`
 * (NULL: none); into out[]. 0 or -1. */
static int run_rg(fg_graph *g, int no_passes, const char **fetches, int n, const char *target,
                  fg_tensor **out) {
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 2, no_passes, st);
  const int64_t dzd[2] = {4, 5}, hd[2] = {4, 6};
  fg_tensor *dz = vals(2, dzd, 2, 1), *h = vals(2, hd, 3, 1);
  fg_feed feeds[2] = {{"dz", dz}, {"h", h}};
  int rc =
      s ? fg_session_run(s, feeds, 2, fetches, n, out, target ? &target : NULL, target ? 1 : 0, st)
        : -1;
  if (rc != 0) fprintf(stderr, "run: %s\n", fg_status_message(st));
  fg_tensor_free(dz), fg_tensor_free(h);
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

/* 1 when fetch gives the same bytes with the passes on and off. */
static int rg_same_on_off(fg_graph *g, const char *fetch) {
  fg_tensor *on = NULL, *off = NULL;
  int ok = run_rg(g, 0, &fetch, 1, NULL, &on) == 0 && run_rg(g, 1, &fetch, 1, NULL, &off) == 0 &&
           fg_tensor_num_bytes(on) == fg_tensor_num_bytes(off) &&
           memcmp(fg_tensor_data(on), fg_tensor_data(off), fg_tensor_num_bytes(on)) == 0;
  fg_tensor_free(on), fg_tensor_free(off);
  return ok;
}

static int n_changes(const fg_pass_report *r) {
  int n = 0;
  for (int i = 0; r && i < fg_pass_report_size(r); i++)
    n += strcmp(fg_pass_report_change(r, i)->pass, "grad_epilogue") == 0;
  return n;
}

FG_TEST(grad_epilogue_fuses_relu_grad_of_a_product, "") {
  for (int tb = 0; tb < 2; tb++) {
    rg_opts o = {.transpose_b = tb};
    fg_graph *g = relu_grad_graph(&o);
    fg_pass_report *r = NULL;
    fg_graph *opt = optimize1(g, "out", &r);
    FG_REQUIRE(opt);
    /* dz, w, h, y and out = fused_matmul_relu_grad(dz, w, y). */
    FG_CHECK_INT(fg_graph_num_nodes(opt), 5);
    FG_CHECK_INT(count_op(opt, "fused_matmul_relu_grad"), 1);
    FG_CHECK_INT(count_op(opt, "matmul") + count_op(opt, "greater") + count_op(opt, "select"), 0);
    FG_CHECK_INT(n_changes(r), 3);
    const char *names[3] = {"mm", "gt", "out"};
    for (int k = 0; k < 3; k++) {
      const fg_pass_change *c = find_change(r, "grad_epilogue", names[k]);
      FG_REQUIRE(c);
      FG_CHECK_STR(c->action, "fused");
      FG_CHECK_STR(c->into, "out");
      FG_CHECK_STR(c->rule, "matmul+relu_grad");
    }
    int out = fg_graph_find(opt, "out");
    int64_t t = -1;
    FG_CHECK(fg_node_attr_int(opt, out, "transpose_b", &t) == 0 && t == tb);
    FG_CHECK_STR(fg_node_name(opt, fg_node_input(opt, out, 0).node), "dz");
    FG_CHECK_STR(fg_node_name(opt, fg_node_input(opt, out, 1).node), "w");
    FG_CHECK_STR(fg_node_name(opt, fg_node_input(opt, out, 2).node), "y");
    FG_CHECK(rg_same_on_off(g, "out"));
    fg_pass_report_free(r);
    fg_graph_free(opt);
    fg_graph_free(g);
  }
}

/* Chains that are not relu's gradient of a product, or whose nodes
 * others read, stay as they are; so does one with an unknown batch dim
 * (y and the product could differ at run time, where the select would
 * broadcast them). */
FG_TEST(grad_epilogue_leaves_other_chains, "") {
  const rg_opts cases[6] = {{.else_neg = 1},   {.cmp_one = 1},    {.cmp_less = 1},
                            {.side_of_mm = 1}, {.side_of_gt = 1}, {.unknown = 1}};
  for (int k = 0; k < 6; k++) {
    fg_graph *g = relu_grad_graph(&cases[k]);
    const char *fetch[2] = {"out", "side"};
    const int nf = cases[k].side_of_mm || cases[k].side_of_gt ? 2 : 1;
    fg_pass_report *r = NULL;
    fg_graph *opt = optimize_fetches(g, fetch, nf, &r);
    FG_REQUIRE(opt);
    if (n_changes(r) != 0) FG_FAIL_AT("case %d: %d grad_epilogue changes", k, n_changes(r));
    FG_CHECK_INT(count_op(opt, "fused_matmul_relu_grad"), 0);
    FG_CHECK_INT(count_op(opt, "matmul"), 1);
    FG_CHECK(rg_same_on_off(g, "out"));
    fg_pass_report_free(r);
    fg_graph_free(opt);
    fg_graph_free(g);
  }
}

/* fg_optimize keeps what it is asked for: with the product fetched too,
 * nothing fuses. A session keeps every node and fuses anyway: the plan of
 * out alone runs the fused node, not the matmul. */
FG_TEST(grad_epilogue_fetched_product, "") {
  rg_opts o = {0};
  fg_graph *g = relu_grad_graph(&o);
  const char *fetch[2] = {"out", "mm"};
  fg_pass_report *r = NULL;
  fg_graph *opt = optimize_fetches(g, fetch, 2, &r);
  FG_REQUIRE(opt);
  FG_CHECK_INT(n_changes(r), 0);
  FG_CHECK_INT(count_op(opt, "fused_matmul_relu_grad"), 0);
  fg_pass_report_free(r);
  fg_graph_free(opt);
  fg_tensor *res[2] = {NULL, NULL}, *off[2] = {NULL, NULL};
  FG_CHECK(run_rg(g, 0, fetch, 2, NULL, res) == 0 && run_rg(g, 1, fetch, 2, NULL, off) == 0);
  for (int k = 0; k < 2; k++) {
    FG_CHECK(same_values(res[k], off[k]));
    fg_tensor_free(res[k]), fg_tensor_free(off[k]);
  }
  /* Steps are source node ids: out (the select, run as the fused node)
   * stays, the matmul and the greater are gone. */
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, 0, st);
  const int64_t dzd[2] = {4, 5}, hd[2] = {4, 6};
  fg_tensor *dz = vals(2, dzd, 2, 1), *h = vals(2, hd, 3, 1);
  fg_feed feeds[2] = {{"dz", dz}, {"h", h}};
  fg_plan_info *pi = s ? fg_session_plan_info(s, feeds, 2, fetch, 1, NULL, 0, st) : NULL;
  int outs = 0, parts = 0;
  for (int i = 0; pi && i < pi->n_steps; i++) {
    const char *name = fg_node_name(g, pi->step_nodes[i]);
    outs += strcmp(name, "out") == 0;
    parts += strcmp(name, "mm") == 0 || strcmp(name, "gt") == 0;
  }
  FG_CHECK(pi != NULL);
  FG_CHECK_INT(outs, 1);
  FG_CHECK_INT(parts, 0);
  fg_plan_info_free(pi);
  fg_tensor_free(dz), fg_tensor_free(h);
  fg_session_free(s);
  fg_status_free(st);
  fg_graph_free(g);
}

/* y is a variable written between the greater and the select: the fused
 * node would read it at the select's place, after the write. Nothing
 * fuses, and out still masks with v's value from before the write.
 * Written after the select, it fuses. */
FG_TEST(grad_epilogue_variable_written_between, "") {
  for (int at = 1; at <= 2; at++) {
    rg_opts o = {.y_variable = at};
    fg_graph *g = relu_grad_graph(&o);
    fg_pass_report *r = NULL;
    fg_graph *opt = optimize1(g, "out", &r);
    FG_REQUIRE(opt);
    FG_CHECK_INT(n_changes(r), at == 1 ? 0 : 3);
    fg_pass_report_free(r);
    fg_graph_free(opt);
    const char *fetch = "out";
    fg_tensor *on = NULL, *off = NULL;
    FG_CHECK(run_rg(g, 0, &fetch, 1, "write", &on) == 0);
    FG_CHECK(run_rg(g, 1, &fetch, 1, "write", &off) == 0);
    FG_CHECK(on && off && memcmp(fg_tensor_data(on), fg_tensor_data(off), 96) == 0);
    fg_tensor_free(on), fg_tensor_free(off);
    fg_graph_free(g);
  }
}

/* A 12-16-10-8-3 network (test_passes_mlp.h), batch 8, trained by SGD
 * with momentum. */
static mlp_spec deep_spec(void) {
  mlp_spec m = {4, {12, 16, 10, 8, 3}, 8, 0, 5, {0}};
  fg_optimizer_config_init(&m.opt, FG_OPTIMIZER_MOMENTUM);
  m.opt.learning_rate = 0.05;
  return m;
}

/* 4 steps on `device` (NULL: the CPU), 2 threads, with the passes on
 * (no_passes 0) or off: losses, the weights after them, and the plan's
 * steps whose source op is `op`. */
static int deep_train_on(fg_graph *g, const char *device, const char *target, int no_passes,
                         float *losses, fg_tensor **w, const char *op) {
  const mlp_spec m = deep_spec();
  const mlp_run r = {device, 2, no_passes, 4};
  fg_plan_info *pi = NULL;
  mlp_train(g, &m, target, &r, losses, w, &pi);
  const int n = mlp_count_source_op(pi, g, op);
  fg_plan_info_free(pi);
  return n;
}

static int deep_train(fg_graph *g, const char *target, int no_passes, float *losses, fg_tensor **w,
                      const char *op) {
  return deep_train_on(g, NULL, target, no_passes, losses, w, op);
}

static fg_graph *deep_mlp(const char **target) {
  const mlp_spec m = deep_spec();
  return mlp_build(&m, target);
}

/* Losses and weights bit for bit with the passes on and off; with them on
 * the 3 input gradients that feed a relu gradient are inside
 * fused_matmul_relu_grad (the plan runs 3 fewer matmul and greater steps:
 * the 4 weight gradients stay, as matmul_bias_grad with their layer's
 * bias gradient, and the 4 forward products are fused_matmul), and
 * fg_optimize of the step makes 3 such nodes and 4 matmul_bias_grad. */
FG_TEST(grad_epilogue_mlp_training_bit_identical, "") {
  const char *target = NULL;
  fg_graph *g = deep_mlp(&target);
  FG_REQUIRE(g && target);
  float on_l[4], off_l[4];
  fg_tensor *on[8], *off[8];
  FG_CHECK_INT(deep_train(g, target, 1, off_l, off, "matmul"), 4 + 4 + 3);
  FG_CHECK_INT(deep_train(g, target, 0, on_l, on, "matmul"), 4);
  FG_CHECK(memcmp(on_l, off_l, sizeof on_l) == 0);
  FG_CHECK(on_l[3] < on_l[0]);
  FG_CHECK(mlp_same_tensors(on, off, 8));
  mlp_free_tensors(on, 8), mlp_free_tensors(off, 8);
  /* The greater steps of the 3 relu gradients: run off, absorbed on. */
  FG_CHECK_INT(deep_train(g, target, 1, off_l, off, "greater"), 3);
  FG_CHECK_INT(deep_train(g, target, 0, on_l, on, "greater"), 0);
  mlp_free_tensors(on, 8), mlp_free_tensors(off, 8);
  const char *fetch[2] = {"loss", target};
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, fetch, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "fused_matmul_relu_grad"), 3);
  FG_CHECK_INT(count_op(o, "select") + count_op(o, "greater"), 0);
  /* Each layer's dw and db: one matmul_bias_grad, no matmul or sum_to
   * left (the forward products are fused_matmul). */
  FG_CHECK_INT(count_op(o, "matmul_bias_grad"), 4);
  FG_CHECK_INT(count_op(o, "matmul") + count_op(o, "sum_to"), 0);
  /* 3 relu gradients of 3 nodes, 4 bias gradients of 2. */
  FG_CHECK_INT(n_changes(r), 3 * 3 + 4 * 2);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* A fused_matmul_relu_grad built by hand whose y has an unknown dim that
 * a run feeds with another size than the product's: refused with a
 * status that names the node, input 2 and both shapes. */
FG_TEST(fused_matmul_relu_grad_run_time_shape_mismatch, "badinput") {
  fg_graph *g = fg_graph_new();
  const int64_t ad[2] = {4, 6}, bd[2] = {6, 5}, yd[2] = {-1, 5}, yf[2] = {3, 5};
  fg_output a = fg_placeholder(g, "a", FG_F32, 2, ad), b = fg_placeholder(g, "b", FG_F32, 2, bd);
  fg_output y = fg_placeholder(g, "y", FG_F32, 2, yd);
  fg_output in[3] = {a, b, y};
  FG_REQUIRE(fg_op(g, "fused_matmul_relu_grad", "rg", in, 3, NULL).node >= 0);
  fg_tensor *at = vals(2, ad, 1, 0), *bt = vals(2, bd, 2, 0), *yt = vals(2, yf, 3, 0);
  fg_feed feeds[3] = {{"a", at}, {"b", bt}, {"y", yt}};
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, 0, st);
  const char *fetch = "rg";
  fg_tensor *out = NULL;
  FG_REQUIRE(s);
  FG_CHECK(fg_session_run(s, feeds, 3, &fetch, 1, &out, NULL, 0, st) != 0);
  FG_CHECK(out == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "'rg'");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "input 2 (y) shape [3,5] must be the product's "
                                               "shape [4,5]");
  fg_session_free(s);
  fg_status_free(st);
  fg_tensor_free(at), fg_tensor_free(bt), fg_tensor_free(yt);
  fg_graph_free(g);
}

/* How the crafted bias gradient varies. */
typedef struct bg_opts {
  int fetch_db;     /* fg_optimize keeps db */
  int early_reader; /* a reader of db before the matmul */
  int no_transpose; /* dw = matmul(a^T as given, dz): a [6, 8], not transposed */
  int dz_first;     /* dw = matmul(dz, a, transpose_a), as for a w used transposed */
} bg_opts;

/* db = sum_to(dz, b) and dw = matmul(a, dz, transpose_a), a [8, 6] and dz
 * [8, 5] placeholders, b a [5] constant; "ndb" = neg(db) reads db after
 * the matmul (and "early" = exp(db) before it when early_reader). */
static fg_graph *bias_grad_graph(const bg_opts *o) {
  fg_graph *g = fg_graph_new();
  const int64_t ad[2] = {8, 6}, at[2] = {6, 8}, zd[2] = {8, 5}, bd[1] = {5};
  fg_output a = fg_placeholder(g, "a", FG_F32, 2, o->no_transpose ? at : ad);
  fg_output dz = fg_placeholder(g, "dz", FG_F32, 2, zd);
  fg_tensor *bt = vals(1, bd, 4, 0);
  fg_output b = fg_constant(g, "b", bt);
  fg_tensor_free(bt);
  fg_output db = fg_set_name(g, fg_op(g, "sum_to", "db", (fg_output[]){dz, b}, 2, NULL), "db");
  if (o->early_reader) fg_set_name(g, fg_exp(g, db), "early");
  if (o->dz_first)
    fg_set_name(g, fg_matmul(g, dz, a, 1, 0), "dw");
  else
    fg_set_name(g, fg_matmul(g, a, dz, !o->no_transpose, 0), "dw");
  fg_set_name(g, fg_neg(g, db), "ndb");
  return g;
}

/* fetches of g fed a and dz (NaN, infinities and signed zeros in dz),
 * passes on or off, into out[]. 0 or -1. */
static int run_bg(fg_graph *g, const bg_opts *o, int no_passes, const char **fetch, int n,
                  fg_tensor **out) {
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 2, no_passes, st);
  const int64_t ad[2] = {o->no_transpose ? 6 : 8, o->no_transpose ? 8 : 6};
  const int64_t zd[2] = {8, 5};
  fg_tensor *a = vals(2, ad, 5, 0), *dz = vals(2, zd, 6, 1);
  fg_feed feeds[2] = {{"a", a}, {"dz", dz}};
  int rc = s ? fg_session_run(s, feeds, 2, fetch, n, out, NULL, 0, st) : -1;
  if (rc != 0) fprintf(stderr, "run: %s\n", fg_status_message(st));
  fg_tensor_free(a), fg_tensor_free(dz);
  fg_session_free(s);
  fg_status_free(st);
  return rc;
}

FG_TEST(grad_epilogue_fuses_bias_grad_into_weight_grad, "") {
  bg_opts o = {0};
  fg_graph *g = bias_grad_graph(&o);
  const char *fetch[2] = {"dw", "ndb"};
  fg_pass_report *r = NULL;
  fg_graph *opt = optimize_fetches(g, fetch, 2, &r);
  FG_REQUIRE(opt);
  FG_CHECK_INT(count_op(opt, "matmul_bias_grad"), 1);
  FG_CHECK_INT(count_op(opt, "matmul") + count_op(opt, "sum_to"), 0);
  FG_CHECK_INT(n_changes(r), 2);
  const fg_pass_change *c = find_change(r, "grad_epilogue", "db");
  FG_REQUIRE(c);
  FG_CHECK_STR(c->action, "fused");
  FG_CHECK_STR(c->into, "dw:1");
  FG_CHECK_STR(c->rule, "matmul+sum_to");
  c = find_change(r, "grad_epilogue", "dw");
  FG_REQUIRE(c);
  FG_CHECK_STR(c->into, "dw");
  int ndb = fg_graph_find(opt, "ndb");
  fg_output in = fg_node_input(opt, ndb, 0);
  FG_CHECK_STR(fg_node_name(opt, in.node), "dw");
  FG_CHECK_INT(in.index, 1);
  /* The same bits as matmul and sum_to, passes on and off, in a session
   * fetching both (and db itself, which a session keeps). */
  const char *f3[3] = {"dw", "ndb", "db"};
  fg_tensor *on[3] = {NULL, NULL, NULL}, *off[3] = {NULL, NULL, NULL};
  FG_CHECK(run_bg(g, &o, 0, f3, 3, on) == 0 && run_bg(g, &o, 1, f3, 3, off) == 0);
  for (int k = 0; k < 3; k++) {
    FG_CHECK(same_values(on[k], off[k]));
    fg_tensor_free(on[k]), fg_tensor_free(off[k]);
  }
  fg_pass_report_free(r);
  fg_graph_free(opt);
  fg_graph_free(g);
}

/* What stays: db kept by fg_optimize, a reader of db before the matmul,
 * a product that is not a^T dz. */
FG_TEST(grad_epilogue_bias_grad_leaves_others, "") {
  const bg_opts cases[4] = {
      {.fetch_db = 1}, {.early_reader = 1}, {.no_transpose = 1}, {.dz_first = 1}};
  for (int k = 0; k < 4; k++) {
    fg_graph *g = bias_grad_graph(&cases[k]);
    const char *fetch[3] = {"dw", "ndb", cases[k].fetch_db ? "db" : "early"};
    const int nf = cases[k].fetch_db || cases[k].early_reader ? 3 : 2;
    fg_pass_report *r = NULL;
    fg_graph *opt = optimize_fetches(g, fetch, nf, &r);
    FG_REQUIRE(opt);
    if (n_changes(r) != 0) FG_FAIL_AT("case %d: %d grad_epilogue changes", k, n_changes(r));
    FG_CHECK_INT(count_op(opt, "matmul_bias_grad"), 0);
    FG_CHECK_INT(count_op(opt, "matmul"), 1);
    fg_tensor *on[3] = {NULL, NULL, NULL}, *off[3] = {NULL, NULL, NULL};
    FG_CHECK(run_bg(g, &cases[k], 0, fetch, nf, on) == 0 &&
             run_bg(g, &cases[k], 1, fetch, nf, off) == 0);
    for (int i = 0; i < nf; i++) {
      FG_CHECK(same_values(on[i], off[i]));
      fg_tensor_free(on[i]), fg_tensor_free(off[i]);
    }
    fg_pass_report_free(r);
    fg_graph_free(opt);
    fg_graph_free(g);
  }
}

/* The same step on a GPU ("cuda:0"): with the passes on it runs
 * fused_matmul_relu_grad (cuBLAS and the mask kernel) and
 * matmul_bias_grad (cuBLASLt's bias-gradient epilogue, or cuBLAS and
 * sum_to), so losses and weights agree with the passes off within f32
 * rounding, not bit for bit; and with the CPU's. Skips visibly without
 * a CUDA build or a device (fails with FG_REQUIRE_GPU=1). */
FG_TEST(gpu_grad_epilogue_mlp_training_close_to_unfused, "gpu") {
  if (fg_cuda_device_count() < 1) FG_SKIP_NO_GPU("no CUDA build or no CUDA device");
  const char *target = NULL;
  fg_graph *g = deep_mlp(&target);
  FG_REQUIRE(g && target);
  float l[3][4];
  fg_tensor *w[3][8];
  FG_CHECK_INT(deep_train_on(g, "cuda:0", target, 0, l[0], w[0], "greater"), 0);
  FG_CHECK(deep_train_on(g, "cuda:0", target, 1, l[1], w[1], "greater") >= 0);
  FG_CHECK(deep_train_on(g, NULL, target, 1, l[2], w[2], "greater") >= 0);
  for (int i = 0; i < 4; i++)
    for (int k = 1; k < 3; k++)
      FG_CHECK(fabsf(l[0][i] - l[k][i]) <= 1e-5f * (1 + fabsf(l[k][i])));
  FG_CHECK(l[0][3] < l[0][0]);
  for (int v = 0; v < 8; v++) {
    double worst = w[0][v] && w[2][v] ? 0 : 1e30;
    for (int64_t e = 0; worst < 1e30 && e < fg_tensor_num_elements(w[2][v]); e++) {
      const float a = ((const float *)fg_tensor_data(w[0][v]))[e];
      const float b = ((const float *)fg_tensor_data(w[2][v]))[e];
      const double d = fabs((double)a - b) / (1 + fabs((double)b));
      worst = d > worst ? d : worst;
    }
    if (!(worst <= 1e-5)) FG_FAIL_AT("variable %d: GPU and CPU differ by %g", v, worst);
    for (int k = 0; k < 3; k++)
      fg_tensor_free(w[k][v]);
  }
  fg_graph_free(g);
}

/* The arena of a 64-48-32-10 MLP's SGD step at batch 600: with every pass
 * on the plan reaches its lower bound (the peak of live bytes), 307520
 * bytes, below the 313408 of the passes off. The fused relu gradients
 * cannot overwrite relu's outputs they read, and every greedy placement
 * order of the memory planner had left that plan at 331264 bytes; its
 * search over orders (executor/memplan.c) finds the bound. */
FG_TEST(grad_epilogue_mlp_arena_at_its_lower_bound, "") {
  mlp_spec m = {3, {64, 48, 32, 10}, 600, 0, 7, {0}};
  fg_optimizer_config_init(&m.opt, FG_OPTIMIZER_SGD);
  const char *target = NULL;
  fg_graph *g = mlp_build(&m, &target);
  FG_REQUIRE(g && target);
  const int64_t xd[2] = {600, 64}, yd[1] = {600};
  fg_tensor *x = f32_tensor(2, xd, 1.0f, 3), *y = fg_tensor_new(FG_I32, 1, yd, NULL);
  FG_REQUIRE(x && y);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  size_t arena[2] = {0, 0}, bound[2] = {0, 0};
  for (int off = 0; off < 2; off++) {
    fg_status *st = fg_status_new();
    fg_session *s = passes_session(g, 1, off, st);
    fg_plan_info *pi = s ? fg_session_plan_info(s, feeds, 2, NULL, 0, &target, 1, st) : NULL;
    FG_REQUIRE(pi);
    arena[off] = pi->arena_bytes, bound[off] = pi->lower_bound_bytes;
    fg_plan_info_free(pi);
    fg_session_free(s);
    fg_status_free(st);
  }
  FG_CHECK_INT(arena[0], bound[0]);
  FG_CHECK(arena[0] < arena[1]);
  fg_tensor_free(x), fg_tensor_free(y);
  fg_graph_free(g);
}
