/* Fused updates that take a weight gradient's factors
 * (sufficient_factor_apply_sgd: var -= lr * mean over ranks of a^T b, the gradient
 * never made; fg_data_parallel's fused_update on a hidden layer's weight)
 * in one process (label dist): the rewrite, a group of one, two ranks of
 * the in-process communicator (which make the product, all-reduce it and
 * update), values worked out by hand, and bad inputs. The MPI runs, where
 * each rank reads the others' factors in place, are in test_mpi.c
 * (mpi_dp_fused_product_*), the shared-memory collective in
 * test_shm_reduce.c. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "fgtest.h"
#include "flowgraph/flowgraph.h"
#include "test_dist_util.h"

enum { STEPS = 3, BATCH = 32 };

/* The nodes of op `op`; *last = the last one. */
static int count_op(const fg_graph *g, const char *op, int *last) {
  int n = 0;
  for (int i = 0; i < fg_graph_num_nodes(g); i++)
    if (strcmp(fg_node_op(g, i), op) == 0) {
      n++;
      *last = i;
    }
  return n;
}

static const char *const sf_op = "sufficient_factor_apply_sgd";

/* dense2/w's update takes relu1 (a) as input 1 and dense2's delta (b,
 * [?, 1024]) as input 3, the rows and sums as 4 and 5; dense1/w's (a
 * bucket's) and dense3/w's (under 1 MiB) are not fused. Without
 * fused_update nothing is. Saved and loaded, it stays. (fg_micro_batch
 * refuses it: test_dist_fused.c.) */
FG_TEST(dist_product_rewrite, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_deep_mlp(), *plain = dist_rewrite_fused(g, 1, 0),
           *fused = dist_rewrite_fused(g, 1, 1);
  FG_REQUIRE(plain && fused);
  int u = -1;
  FG_CHECK_INT(count_op(plain, sf_op, &u), 0);
  FG_CHECK_INT(count_op(fused, "all_reduce_apply_sgd", &u), 0);
  FG_CHECK_INT(count_op(fused, sf_op, &u), 1);
  FG_REQUIRE(u >= 0);
  FG_CHECK_STR(fg_node_name(fused, fg_node_input(fused, u, 0).node), "dense2/w");
  FG_CHECK_STR(fg_node_op(fused, fg_node_input(fused, u, 1).node), "relu");
  fg_output b = fg_node_input(fused, u, 3);
  int64_t dims[FG_MAX_RANK];
  FG_CHECK_INT(fg_output_shape(fused, b, dims), 2);
  FG_CHECK(dims[1] == 1024);
  FG_CHECK_INT(fg_output_dtype(fused, fg_node_input(fused, u, 4)), FG_F64);
  FG_CHECK_STR(fg_node_name(fused, fg_node_input(fused, u, 5).node), "data_parallel/rows");

  fg_graph *back = dist_save_load(fused, st);
  FG_REQUIRE(back);
  FG_CHECK_INT(count_op(back, sf_op, &u), 1);
  fg_graph_free(back);
  fg_graph_free(fused);
  fg_graph_free(plain);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Without a communicator (a group of one) the product is added into the
 * variable in one GEMM: the same training as the unrewritten graph within
 * f64 rounding (not bit for bit: one product into var, not a gradient
 * then an update). */
FG_TEST(dist_product_group_of_one_trains_as_sgd, "dist") {
  fg_status *st = fg_status_new();
  fg_graph *g = dist_deep_mlp(), *fused = dist_rewrite_fused(g, 1, 1);
  FG_REQUIRE(fused);
  fg_session *a = fg_session_new(g, NULL, st), *b = fg_session_new(fused, NULL, st);
  FG_REQUIRE(a && b);
  double la[STEPS], lb[STEPS];
  FG_REQUIRE(dist_train(a, FG_F64, STEPS, BATCH, la, st) == 0);
  FG_REQUIRE(dist_train(b, FG_F64, STEPS, BATCH, lb, st) == 0);
  for (int k = 0; k < STEPS; k++)
    FG_CHECK(fabs(la[k] - lb[k]) <= 1e-12 * fabs(la[k]));
  /* The loss moved: the steps trained. */
  FG_CHECK(lb[STEPS - 1] != lb[0]);
  const char *vars[] = {"dense1/w", "dense2/w", "dense3/w"};
  for (int v = 0; v < 3; v++) {
    double d = dist_var_diff(a, vars[v], b, vars[v]);
    FG_CHECK(d >= 0 && d < 1e-12);
  }
  fg_session_free(a);
  fg_session_free(b);
  fg_graph_free(fused);
  fg_graph_free(g);
  fg_status_free(st);
}

/* Two ranks of the in-process communicator (no fused form: the product is
 * made, all-reduced and applied): both ranks end with the same dense1/w,
 * bit for bit, within f64 rounding of the unfused rewrite's. */
FG_TEST(dist_product_two_ranks_in_process, "dist") {
  fg_graph *g = dist_deep_mlp(), *plain = dist_rewrite_fused(g, 1, 0),
           *fused = dist_rewrite_fused(g, 1, 1);
  FG_REQUIRE(plain && fused);
  dist_rank_arg p[2], f[2];
  FG_REQUIRE(dist_run_two_ranks(plain, NULL, 10, STEPS, BATCH, p) == 0);
  FG_REQUIRE(dist_run_two_ranks(fused, NULL, 10, STEPS, BATCH, f) == 0);
  FG_REQUIRE(p[0].w && f[0].w && f[1].w);
  const int64_t n = 64 * 128;
  FG_CHECK(memcmp(fg_tensor_data(f[0].w), fg_tensor_data(f[1].w), (size_t)n * 8) == 0);
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = ((const double *)fg_tensor_data(f[0].w))[i],
           w = ((const double *)fg_tensor_data(p[0].w))[i];
    if (fabs(x - w) > worst) worst = fabs(x - w);
  }
  FG_CHECK(worst < 1e-12);
  for (int k = 0; k < STEPS; k++)
    FG_CHECK(fabs(f[0].losses[k] - p[0].losses[k]) <= 1e-12 * fabs(p[0].losses[k]));
  for (int r = 0; r < 2; r++) {
    fg_tensor_free(p[r].w);
    fg_tensor_free(f[r].w);
  }
  fg_graph_free(fused);
  fg_graph_free(plain);
  fg_graph_free(g);
}

/* sufficient_factor_apply_sgd(v, a, lr, b; mean) on cpu:r
 * with variable "v<r>", constants a and b. */
static fg_output product_on(fg_graph *g, int r, const fg_tensor *vt, const fg_tensor *at,
                            const fg_tensor *bt, int mean, const char *name) {
  char dev[16], vn[16], an[16], bn[16];
  snprintf(dev, sizeof dev, "cpu:%d", r);
  snprintf(vn, sizeof vn, "v%d", r);
  snprintf(an, sizeof an, "a%d", r);
  snprintf(bn, sizeof bn, "b%d", r);
  fg_attrs *attrs = fg_attrs_new();
  fg_attrs_set_int(attrs, "mean", mean);
  fg_output in[4] = {fg_variable(g, vn, vt), fg_constant(g, an, at), fg_scalar(g, FG_F64, 0.5),
                     fg_constant(g, bn, bt)};
  fg_output u = fg_op(g, sf_op, name, in, 4, attrs);
  for (int k = 0; k < 4; k++)
    fg_set_device(g, in[k], dev);
  fg_set_device(g, u, dev);
  fg_attrs_free(attrs);
  return u;
}

/* By hand: v = [[1, 2, 3], [4, 5, 6]] on two devices of one process; rank
 * 0 has a0 = I (2 rows), b0 = [[1, 2, 0], [0, -2, 4]], so a0^T b0 = b0;
 * rank 1 has one row, a1 = [[2, 1]], b1 = [[1, 0, -1]], so a1^T b1 =
 * [[2, 0, -2], [1, 0, -1]]. Sum [[3, 2, -2], [1, -2, 3]]; lr 0.5: the sum
 * gives v - 0.5 sum = [[-0.5, 1, 4], [3.5, 6, 4.5]], the mean [[0.25, 1.5,
 * 3.5], [3.75, 5.5, 5.25]]. Rank 0 alone (a group of one): v - 0.5 b0 =
 * [[0.5, 1, 3], [4, 6, 4]]. */
FG_TEST(dist_product_apply_sgd_by_hand, "dist") {
  static const double v0[6] = {1, 2, 3, 4, 5, 6}, a0[4] = {1, 0, 0, 1}, b0[6] = {1, 2, 0, 0, -2, 4},
                      a1[2] = {2, 1}, b1[3] = {1, 0, -1};
  static const double want[3][6] = {
      {-0.5, 1, 4, 3.5, 6, 4.5}, {0.25, 1.5, 3.5, 3.75, 5.5, 5.25}, {0.5, 1, 3, 4, 6, 4}};
  int64_t vd[2] = {2, 3}, a0d[2] = {2, 2}, b0d[2] = {2, 3}, a1d[2] = {1, 2}, b1d[2] = {1, 3};
  for (int c = 0; c < 3; c++) {
    fg_status *st = fg_status_new();
    fg_graph *g = fg_graph_new();
    fg_tensor *vt = fg_tensor_from_data(FG_F64, 2, vd, v0, sizeof v0, st),
              *at[2] = {fg_tensor_from_data(FG_F64, 2, a0d, a0, sizeof a0, st),
                        fg_tensor_from_data(FG_F64, 2, a1d, a1, sizeof a1, st)},
              *bt[2] = {fg_tensor_from_data(FG_F64, 2, b0d, b0, sizeof b0, st),
                        fg_tensor_from_data(FG_F64, 2, b1d, b1, sizeof b1, st)};
    const char *fetch[2] = {"u0", "u1"};
    const int ranks = c == 2 ? 1 : 2;
    for (int r = 0; r < ranks; r++)
      product_on(g, r, vt, at[r], bt[r], c == 1, fetch[r]);
    dist_check_updates(g, ranks, want[c], 6);
    for (int r = 0; r < 2; r++) {
      fg_tensor_free(at[r]);
      fg_tensor_free(bt[r]);
    }
    fg_tensor_free(vt);
    fg_status_free(st);
  }
}

/* sufficient_factor_apply_sgd's bad inputs, refused when the node is
 * built, naming it: a missing b, a's columns or b's not var's, another
 * dtype, rows that differ; and apply_sgd with the old grad_product
 * attribute (`op` "apply_sgd"). */
static void check_product_refused(const char *op, int n_in, const int64_t *ad, fg_dtype b_dt,
                                  const int64_t *bd, const char *want) {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t vd[2] = {2, 3};
  fg_tensor *vt = fg_tensor_new(FG_F32, 2, vd, st), *at = fg_tensor_new(FG_F32, 2, ad, st),
            *bt = fg_tensor_new(b_dt, 2, bd, st);
  fg_output in[4] = {fg_variable(g, "v", vt), fg_constant(g, "a", at), fg_scalar(g, FG_F32, 0.1),
                     fg_constant(g, "b", bt)};
  fg_attrs *a = fg_attrs_new();
  if (strcmp(op, "apply_sgd") == 0) fg_attrs_set_int(a, "grad_product", 1);
  dist_check_update_refused(g, op, in, n_in, a, want);
  fg_attrs_free(a);
  fg_tensor_free(vt);
  fg_tensor_free(at);
  fg_tensor_free(bt);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(dist_product_apply_sgd_bad_inputs, "dist,badinput") {
  const int64_t a_ok[2] = {4, 2}, b_ok[2] = {4, 3}, a_cols[2] = {4, 3}, b_cols[2] = {4, 2},
                b_rows[2] = {5, 3};
  check_product_refused("apply_sgd", 4, a_ok, FG_F32, b_ok,
                        "unknown attribute 'grad_product'; apply_sgd accepts: none");
  check_product_refused(sf_op, 3, a_ok, FG_F32, b_ok, "takes at least 4 inputs, got 3");
  check_product_refused(sf_op, 4, a_cols, FG_F32, b_ok,
                        "input 1 (a) [4,3] and input 3 (b) [4,3] must have input 0's (var) shape "
                        "[2,3]");
  check_product_refused(sf_op, 4, a_ok, FG_F32, b_cols, "input 3 (b) [4,2]");
  check_product_refused(sf_op, 4, a_ok, FG_F32, b_rows, "input 3 (b) [5,3]");
  check_product_refused(sf_op, 4, a_ok, FG_F64, b_ok, "input 3 (b) f64");
}

/* Rows known only when fed: a [?, 2] and b [?, 3] fed 4 and 5 rows. The
 * run fails naming the node and both shapes (the plan's inference with the
 * fed shapes; the kernel checks them again), and the variable keeps its
 * value. */
FG_TEST(dist_product_rows_that_differ_at_run_time_refused, "dist,badinput") {
  fg_status *st = fg_status_new();
  fg_graph *g = fg_graph_new();
  int64_t vd[2] = {2, 3}, ad[2] = {FG_DIM_UNKNOWN, 2}, bd[2] = {FG_DIM_UNKNOWN, 3};
  static const double v0[6] = {1, 2, 3, 4, 5, 6};
  fg_tensor *vt = fg_tensor_from_data(FG_F64, 2, vd, v0, sizeof v0, st);
  fg_output in[4] = {fg_variable(g, "v", vt), fg_placeholder(g, "a", FG_F64, 2, ad),
                     fg_scalar(g, FG_F64, 0.5), fg_placeholder(g, "b", FG_F64, 2, bd)};
  fg_attrs *attrs = fg_attrs_new();
  fg_op(g, sf_op, "upd", in, 4, attrs);
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s);
  int64_t fa[2] = {4, 2}, fb[2] = {5, 3};
  fg_tensor *ta = fg_tensor_new(FG_F64, 2, fa, st), *tb = fg_tensor_new(FG_F64, 2, fb, st);
  fg_feed feeds[2] = {{"a", ta}, {"b", tb}};
  const char *target = "upd";
  FG_CHECK(fg_session_run(s, feeds, 2, NULL, 0, NULL, &target, 1, st) != 0);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "upd");
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "input 1 (a) [4,2] and input 3 (b) [5,3]");
  fg_tensor *v = fg_session_variable(s, "v", st);
  FG_REQUIRE(v);
  FG_CHECK(memcmp(fg_tensor_data(v), v0, sizeof v0) == 0);
  fg_tensor_free(v);
  fg_tensor_free(ta);
  fg_tensor_free(tb);
  fg_session_free(s);
  fg_tensor_free(vt);
  fg_attrs_free(attrs);
  fg_graph_free(g);
  fg_status_free(st);
}
