/* The epilogue pass (executor/passes/epilogue.c) on crafted graphs: what
 * becomes fused_matmul and what stays (an outside consumer, a fetched
 * node in fg_optimize, a bias that is not [N], a per-batch b, a variable
 * written between its read and the root), the bits with the passes on and
 * off, and an MLP training session whose losses and weights are bit for
 * bit those without passes while its forward matmuls are gone from the
 * plan. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_passes_epi_util.h"

/* How the crafted dense layer varies. */
typedef struct dense_opts {
  int bias_first;  /* add(b, mm) instead of add(mm, b) */
  int relu;        /* out = relu(lin); else out = lin */
  int transpose_b; /* w is [5, 6] */
  int bias_rank;   /* 1: [bias_n]; 2: [1, 5]; 0: a scalar */
  int64_t bias_n;  /* 5, or another length */
  int side_of_mm;  /* side = exp(mm) */
  int side_of_lin; /* side = exp(lin) */
  int batched;     /* x [2, 4, 6]; 2: w [2, 6, 5] too */
  int transpose_a; /* x [6, 4] (2-D) or [2, 6, 4] */
} dense_opts;

/* x (placeholder [4, 6]) -> mm = x @ w -> lin = mm + b -> out = relu(lin). */
static fg_graph *dense(const dense_opts *o) {
  fg_graph *g = fg_graph_new();
  int64_t dx[3] = {2, 4, 6}, dxt[3] = {2, 6, 4}, dw[3] = {2, 6, 5}, dwt[2] = {5, 6};
  int xr = o->batched ? 3 : 2;
  const int64_t *xd = o->transpose_a ? dxt + (o->batched ? 0 : 1) : dx + (o->batched ? 0 : 1);
  fg_output x = fg_placeholder(g, "x", FG_F32, xr, xd);
  fg_output w = o->batched == 2 ? const_f32(g, "w", 3, dw, 0.5f, 1)
                                : const_f32(g, "w", 2, o->transpose_b ? dwt : dw + 1, 0.5f, 1);
  fg_output mm = fg_set_name(g, fg_matmul(g, x, w, o->transpose_a, o->transpose_b), "mm");
  int64_t db[2] = {o->bias_rank == 2 ? 1 : o->bias_n, 5};
  fg_output b = const_f32(g, "b", o->bias_rank, db, 0.3f, 2);
  fg_output lin = fg_set_name(g, o->bias_first ? fg_add(g, b, mm) : fg_add(g, mm, b), "lin");
  if (o->relu) fg_set_name(g, fg_relu(g, lin), "out");
  if (o->side_of_mm) fg_set_name(g, fg_exp(g, mm), "side");
  if (o->side_of_lin) fg_set_name(g, fg_exp(g, lin), "side");
  return g;
}

/* x's values, with a NaN, an infinity and -0.0 among them. */
static fg_tensor *dense_x(const fg_graph *g) {
  int node = fg_graph_find(g, "x");
  const int64_t *dims = NULL;
  int n = 0;
  fg_node_attr_ints(g, node, "shape", &dims, &n);
  fg_tensor *t = f32_tensor(n, dims, 1.0f, 3);
  float *p = fg_tensor_data(t);
  p[3] = -0.0f, p[7] = NAN, p[12] = INFINITY;
  return t;
}

static int n_epilogue_changes(const fg_pass_report *r) {
  int n = 0;
  for (int i = 0; i < fg_pass_report_size(r); i++)
    n += strcmp(fg_pass_report_change(r, i)->pass, "epilogue") == 0;
  return n;
}

/* 1 when `fetch` of a and of b (both fed x) give the same bytes. */
static int same_bits(fg_graph *a, fg_graph *b, const char *fetch) {
  fg_tensor *x = dense_x(a);
  fg_tensor *ta = run_fetch(a, x, fetch, 1), *tb = run_fetch(b, x, fetch, 0);
  int same = ta && tb && fg_tensor_num_bytes(ta) == fg_tensor_num_bytes(tb) &&
             memcmp(fg_tensor_data(ta), fg_tensor_data(tb), fg_tensor_num_bytes(ta)) == 0;
  fg_tensor_free(ta), fg_tensor_free(tb), fg_tensor_free(x);
  return same;
}

static void check_fused(const fg_pass_report *r, const char *node, const char *into,
                        const char *rule) {
  check_change(r, "epilogue", node, into, rule);
}

FG_TEST(epilogue_fuses_matmul_add_relu, "") {
  for (int k = 0; k < 4; k++) {
    dense_opts d = {
        .bias_first = k & 1, .relu = 1, .transpose_b = k >> 1, .bias_rank = 1, .bias_n = 5};
    fg_graph *g = dense(&d);
    fg_pass_report *r = NULL;
    fg_graph *o = optimize1(g, "out", &r);
    FG_REQUIRE(o);
    /* x, w, b and out, now act(x @ w + b). */
    FG_CHECK_INT(fg_graph_num_nodes(o), 4);
    FG_CHECK_INT(count_op(o, "fused_matmul"), 1);
    FG_CHECK_INT(count_op(o, "matmul") + count_op(o, "add") + count_op(o, "relu"), 0);
    FG_CHECK_INT(n_epilogue_changes(r), 3);
    check_fused(r, "out", "out", "matmul+add+relu");
    check_fused(r, "mm", "out", "matmul+add+relu");
    check_fused(r, "lin", "out", "matmul+add+relu");
    int out = fg_graph_find(o, "out");
    const char *act = NULL;
    int64_t tb = -1;
    FG_CHECK(fg_node_attr_string(o, out, "activation", &act) == 0 && act &&
             strcmp(act, "relu") == 0);
    FG_CHECK(fg_node_attr_int(o, out, "transpose_b", &tb) == 0 && tb == (k >> 1));
    FG_CHECK_STR(fg_node_op(o, fg_node_input(o, out, 2).node), "constant");
    FG_CHECK_STR(fg_node_name(o, fg_node_input(o, out, 2).node), "b");
    FG_CHECK(same_bits(g, o, "out"));
    fg_tensor *x = dense_x(g);
    FG_CHECK(same_bits_on_off(g, x, "out"));
    fg_tensor_free(x);
    fg_pass_report_free(r);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

/* Without a relu the add is the root: matmul + b, activation none. */
FG_TEST(epilogue_fuses_matmul_add, "") {
  dense_opts d = {.bias_first = 1, .relu = 0, .bias_rank = 1, .bias_n = 5};
  fg_graph *g = dense(&d);
  fg_pass_report *r = NULL;
  fg_graph *o = optimize1(g, "lin", &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(fg_graph_num_nodes(o), 4);
  FG_CHECK_INT(count_op(o, "fused_matmul"), 1);
  FG_CHECK_INT(n_epilogue_changes(r), 2);
  check_fused(r, "lin", "lin", "matmul+add");
  check_fused(r, "mm", "lin", "matmul+add");
  const char *act = NULL;
  FG_CHECK(fg_node_attr_string(o, fg_graph_find(o, "lin"), "activation", &act) == 0 && act &&
           strcmp(act, "none") == 0);
  FG_CHECK(same_bits(g, o, "lin"));
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* A consumer outside the chain: of the matmul, nothing fuses; of the
 * add, the relu stays and the add alone becomes matmul + b. */
FG_TEST(epilogue_outside_consumer, "") {
  const char *fetch[2] = {"out", "side"};
  dense_opts d = {.relu = 1, .bias_rank = 1, .bias_n = 5, .side_of_mm = 1};
  fg_graph *g = dense(&d);
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, fetch, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(n_epilogue_changes(r), 0);
  FG_CHECK_INT(count_op(o, "fused_matmul"), 0);
  FG_CHECK_INT(count_op(o, "matmul"), 1);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);

  d.side_of_mm = 0, d.side_of_lin = 1;
  g = dense(&d);
  o = optimize_fetches(g, fetch, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(n_epilogue_changes(r), 2);
  check_fused(r, "lin", "lin", "matmul+add");
  check_fused(r, "mm", "lin", "matmul+add");
  FG_CHECK(find_change(r, "epilogue", "out") == NULL);
  FG_CHECK_INT(count_op(o, "relu"), 1);
  FG_CHECK_INT(count_op(o, "fused_matmul"), 1);
  FG_CHECK(same_bits(g, o, "out") && same_bits(g, o, "side"));
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* fg_optimize keeps what it is asked for: a fetched matmul is not fused
 * (it would run twice); a fetched add is the root of its own fusion and
 * the relu stays. */
FG_TEST(epilogue_fetched_nodes_in_optimize, "") {
  dense_opts d = {.relu = 1, .bias_rank = 1, .bias_n = 5};
  fg_graph *g = dense(&d);
  const char *fetch_mm[2] = {"out", "mm"}, *fetch_lin[2] = {"out", "lin"};
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, fetch_mm, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(n_epilogue_changes(r), 0);
  FG_CHECK_INT(count_op(o, "fused_matmul"), 0);
  fg_pass_report_free(r);
  fg_graph_free(o);
  o = optimize_fetches(g, fetch_lin, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(n_epilogue_changes(r), 2);
  check_fused(r, "lin", "lin", "matmul+add");
  FG_CHECK_INT(count_op(o, "relu"), 1);
  FG_CHECK(same_bits(g, o, "out") && same_bits(g, o, "lin"));
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* A bias that is not one value per column ([1, 5], a scalar, [1]
 * broadcast) is left to the add kernel. */
FG_TEST(epilogue_bias_not_n, "") {
  const int ranks[3] = {2, 0, 1};
  const int64_t lens[3] = {5, 5, 1};
  for (int k = 0; k < 3; k++) {
    dense_opts d = {.relu = 1, .bias_rank = ranks[k], .bias_n = lens[k]};
    fg_graph *g = dense(&d);
    fg_pass_report *r = NULL;
    /* Without fuse, which would take the add and the relu. */
    fg_pass_options po = {0, "simplify,fold,fold_inference,cse,epilogue,dce"};
    fg_status *st = fg_status_new();
    const char *fetch = "out";
    fg_graph *o = fg_optimize(g, &po, &fetch, 1, &r, st);
    fg_status_free(st);
    FG_REQUIRE(o);
    FG_CHECK_INT(n_epilogue_changes(r), 0);
    FG_CHECK_INT(count_op(o, "fused_matmul"), 0);
    FG_CHECK_INT(count_op(o, "matmul") + count_op(o, "add") + count_op(o, "relu"), 3);
    fg_pass_report_free(r);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

/* Batched: a's batches over a shared 2-D w fuse (one GEMM); a per-batch w
 * or a transposed batched a do not. */
FG_TEST(epilogue_batched_products, "") {
  const dense_opts cases[3] = {
      {.relu = 1, .bias_rank = 1, .bias_n = 5, .batched = 1},
      {.relu = 1, .bias_rank = 1, .bias_n = 5, .batched = 2},
      {.relu = 1, .bias_rank = 1, .bias_n = 5, .batched = 1, .transpose_a = 1}};
  const int fused[3] = {1, 0, 0};
  for (int k = 0; k < 3; k++) {
    fg_graph *g = dense(&cases[k]);
    fg_pass_report *r = NULL;
    fg_graph *o = optimize1(g, "out", &r);
    FG_REQUIRE(o);
    FG_CHECK_INT(count_op(o, "fused_matmul"), fused[k]);
    FG_CHECK_INT(n_epilogue_changes(r), 3 * fused[k]);
    FG_CHECK(same_bits(g, o, "out"));
    fg_pass_report_free(r);
    fg_graph_free(o);
    fg_graph_free(g);
  }
}

/* lin reads variable v before an assign to v and the relu comes after
 * it: the fused node would read v at the relu's place, after the write.
 * The add alone fuses (it reads v where it did); the relu stays. */
FG_TEST(epilogue_variable_written_between, "") {
  fg_graph *g = fg_graph_new();
  const int64_t dx[2] = {4, 6}, dw[2] = {6, 5}, db[1] = {5};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, dx);
  fg_output w = const_f32(g, "w", 2, dw, 0.5f, 1);
  fg_tensor *b0 = f32_tensor(1, db, 0.3f, 2);
  fg_output v = fg_variable(g, "v", b0);
  fg_output mm = fg_set_name(g, fg_matmul(g, x, w, 0, 0), "mm");
  fg_output lin = fg_set_name(g, fg_add(g, mm, v), "lin");
  fg_output two = const_f32(g, "two", 1, db, 2.0f, 5);
  fg_set_name(g, fg_assign(g, v, two), "write");
  fg_set_name(g, fg_relu(g, lin), "out");
  fg_tensor_free(b0);
  fg_pass_report *r = NULL;
  const char *fetch[1] = {"out"};
  fg_graph *o = optimize_fetches(g, fetch, 1, &r);
  FG_REQUIRE(o);
  check_fused(r, "lin", "lin", "matmul+add");
  FG_CHECK(find_change(r, "epilogue", "out") == NULL);
  FG_CHECK_INT(count_op(o, "relu"), 1);
  /* In a session running the write and out together, out still sees v's
   * value from before the write. */
  fg_tensor *xt = dense_x(g), *res[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    fg_status *st = fg_status_new();
    fg_session *s = passes_session(g, 1, k, st);
    fg_feed feed = {"x", xt};
    const char *out = "out", *write = "write";
    FG_CHECK(s && fg_session_run(s, &feed, 1, &out, 1, &res[k], &write, 1, st) == 0);
    fg_session_free(s);
    fg_status_free(st);
  }
  FG_REQUIRE(res[0] && res[1]);
  FG_CHECK(memcmp(fg_tensor_data(res[0]), fg_tensor_data(res[1]), fg_tensor_num_bytes(res[0])) ==
           0);
  fg_tensor_free(res[0]), fg_tensor_free(res[1]), fg_tensor_free(xt);
  fg_pass_report_free(r);
  fg_graph_free(o);
  fg_graph_free(g);
}

/* A 12-10-8-3 MLP (test_passes_mlp.h), batch 16, known or unknown (-1:
 * the gradients then take the add's shape with sum_to(dy, like = the
 * matmul)), one SGD step per run. */
static mlp_spec spec_of(int unknown) {
  mlp_spec m = {3, {12, 10, 8, 3}, 16, unknown, 7, {0}};
  fg_optimizer_config_init(&m.opt, FG_OPTIMIZER_SGD);
  m.opt.learning_rate = 0.1;
  return m;
}

/* 5 steps with the passes on (no_passes 0) or off on 2 threads: losses,
 * variables, and the plan's steps that are matmul nodes of g. */
static int mlp_train5(fg_graph *g, const mlp_spec *m, const char *target, int no_passes,
                      float *losses, fg_tensor **vars) {
  const mlp_run r = {NULL, 2, no_passes, 5};
  fg_plan_info *pi = NULL;
  mlp_train(g, m, target, &r, losses, vars, &pi);
  int matmuls = mlp_count_source_op(pi, g, "matmul");
  fg_plan_info_free(pi);
  return matmuls;
}

/* Losses and weights bit for bit with the passes on and off over 5 SGD
 * steps; with them on, the plan runs no forward matmul (3 fewer: each is
 * inside a fused_matmul; the weight gradients stay, and the 2 input
 * gradients too where grad_epilogue cannot take them: mm_on), and
 * fg_optimize of the step makes 3 fused_matmul nodes. */
static void mlp_case(fg_graph *g, const mlp_spec *m, const char *target, int mm_on_want) {
  FG_REQUIRE(target);
  float loss_on[5], loss_off[5];
  fg_tensor *on[6], *off[6];
  int mm_on = mlp_train5(g, m, target, 0, loss_on, on);
  int mm_off = mlp_train5(g, m, target, 1, loss_off, off);
  /* Off: 3 forward products, 3 weight gradients, 2 input gradients. */
  FG_CHECK_INT(mm_off, 8);
  FG_CHECK_INT(mm_on, mm_on_want);
  FG_CHECK(memcmp(loss_on, loss_off, sizeof loss_on) == 0);
  FG_CHECK(loss_on[4] < loss_on[0]); /* it trains */
  FG_CHECK(mlp_same_tensors(on, off, 6));
  mlp_free_tensors(on, 6), mlp_free_tensors(off, 6);
  const char *fetch[2] = {"loss", target};
  fg_pass_report *r = NULL;
  fg_graph *o = optimize_fetches(g, fetch, 2, &r);
  FG_REQUIRE(o);
  FG_CHECK_INT(count_op(o, "fused_matmul"), 3);
  FG_CHECK_INT(count_op(o, "relu"), 0);
  fg_pass_report_free(r);
  fg_graph_free(o);
}

FG_TEST(epilogue_mlp_training_bit_identical, "") {
  /* update_epilogue moves the SGD updates' rounding into the weight
   * gradients' GEMMs (not bitwise; test_passes_update_epilogue.c). */
  test_pass_list = NO_UPDATE_EPILOGUE;
  for (int unknown = 0; unknown < 2; unknown++) {
    const char *target = NULL;
    const mlp_spec m = spec_of(unknown);
    fg_graph *g = mlp_build(&m, &target);
    FG_REQUIRE(g && target);
    /* A known batch: grad_epilogue fuses the 2 input gradients into the
     * relu gradients after them; an unknown one puts a sum_to between. */
    mlp_case(g, &m, target, unknown ? 5 : 3);
    fg_graph_free(g);
  }
  test_pass_list = NULL;
}
