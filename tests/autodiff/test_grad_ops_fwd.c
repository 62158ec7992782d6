/* Forward behaviour of the ops that gradients are built from
 * (graph/op_table.h): erf, expand_dims, reshape_like, broadcast_like,
 * sum_to, numel, slice_grad and gather_grad, through sessions, in f32 and
 * f64, with unknown batch dimensions where the ops exist for them.
 * Expected values are worked out by hand in the comments (erf values are
 * standard table values). group and the optimizer updates are in
 * test_grad_ops_fwd_optim.c. */
#include "test_grad_ops_fwd_util.h"
/* ---- the op table rows ------------------------------------------------- */

FG_TEST(new_ops_table_flags, "") {
  const char *diff[] = {"erf",    "expand_dims", "reshape_like", "broadcast_like",
                        "sum_to", "slice_grad",  "gather_grad"};
  for (int i = 0; i < 7; i++) {
    int op = fg_op_lookup(diff[i]);
    FG_REQUIRE(op >= 0);
    if (!(fg_op_table[op].flags & FG_OPF_DIFFERENTIABLE))
      FG_FAIL_AT("%s not differentiable", diff[i]);
  }
  const char *stateful[] = {"group", "apply_sgd", "apply_momentum", "apply_adam"};
  for (int i = 0; i < 4; i++) {
    int op = fg_op_lookup(stateful[i]);
    FG_REQUIRE(op >= 0);
    FG_CHECK(fg_op_table[op].flags & FG_OPF_STATEFUL);
    FG_CHECK(!(fg_op_table[op].flags & FG_OPF_DIFFERENTIABLE));
  }
  FG_CHECK(!(fg_op_table[FG_OP_NUMEL].flags & FG_OPF_DIFFERENTIABLE));
  FG_CHECK(fg_op_table[FG_OP_ERF].flags & FG_OPF_INPLACE);
  FG_CHECK(fg_op_table[FG_OP_ERF].flags & FG_OPF_ELEMENTWISE);
  FG_CHECK(fg_op_table[FG_OP_EXPAND_DIMS].flags & FG_OPF_VIEW);
  FG_CHECK(!(fg_op_table[FG_OP_SUM_TO].flags & FG_OPF_INPLACE));
  FG_CHECK_INT(fg_op_table[FG_OP_APPLY_SGD].mutable_inputs, 0x1);
  FG_CHECK_INT(fg_op_table[FG_OP_APPLY_MOMENTUM].mutable_inputs, 0x3);
  FG_CHECK_INT(fg_op_table[FG_OP_APPLY_ADAM].mutable_inputs, 0x7);
  FG_CHECK_INT(fg_op_table[FG_OP_GROUP].min_inputs, 0);
  FG_CHECK_INT(fg_op_table[FG_OP_GROUP].max_inputs, -1);
}

/* ---- erf ----------------------------------------------------------------- */

FG_TEST(erf_values, "") {
  /* erf(-1) = -0.8427007929497149, erf(0) = 0, erf(0.5) = 0.5204998778130465,
   * erf(2) = 0.9953222650189527 (Abramowitz & Stegun table 7.1). */
  const double x[4] = {-1, 0, 0.5, 2};
  const double want[4] = {-0.8427007929497149, 0, 0.5204998778130465, 0.9953222650189527};
  for (int k = 0; k < 2; k++) {
    fg_graph *g = fg_graph_new();
    fg_output y = fg_erf(g, cst(g, floats[k], 1, DIMS(4), x));
    EXPECT_TINFO(g, y, floats[k], 1, 4);
    RUN_EXPECT(g, y, NULL, 0, floats[k], 1, DIMS(4), want);
    fg_graph_free(g);
  }
}

FG_TEST(erf_rejects_integers, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_I32, 1, DIMS(2));
  fg_set_name(g, fg_erf(g, x), "e");
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'erf_0' (erf): input 0 dtype i32 is not allowed; erf needs f32 or f64");
  fg_graph_free(g);
}

/* ---- expand_dims --------------------------------------------------------- */

FG_TEST(expand_dims_positions_in_output, "") {
  const double x[6] = {1, 2, 3, 4, 5, 6};
  for (int k = 0; k < 2; k++) {
    fg_dtype dt = floats[k];
    fg_graph *g = fg_graph_new();
    fg_output c = cst(g, dt, 2, DIMS(2, 3), x);
    fg_output a = fg_expand_dims(g, c, DIMS(0), 1);
    fg_output b = fg_expand_dims(g, c, DIMS(-1), 1);
    fg_output d = fg_expand_dims(g, c, DIMS(3, 1), 2); /* output [2,1,3,1] */
    fg_output e = fg_expand_dims(g, c, DIMS(0, -1), 2);
    fg_output f = fg_expand_dims(g, c, NULL, 0);
    EXPECT_TINFO(g, a, dt, 3, 1, 2, 3);
    EXPECT_TINFO(g, b, dt, 3, 2, 3, 1);
    EXPECT_TINFO(g, d, dt, 4, 2, 1, 3, 1);
    EXPECT_TINFO(g, e, dt, 4, 1, 2, 3, 1);
    EXPECT_TINFO(g, f, dt, 2, 2, 3);
    /* The bytes are unchanged. */
    RUN_EXPECT(g, d, NULL, 0, dt, 4, DIMS(2, 1, 3, 1), x);
    RUN_EXPECT(g, e, NULL, 0, dt, 4, DIMS(1, 2, 3, 1), x);
    fg_graph_free(g);
  }
}

FG_TEST(expand_dims_unknown_batch_and_other_dtypes, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_I64, 2, DIMS(U, 3));
  fg_output y = fg_expand_dims(g, x, DIMS(1), 1);
  EXPECT_TINFO(g, y, FG_I64, 3, U, 1, 3);
  const double xv[6] = {1, -2, 3, 4, 5, -6};
  fg_tensor *xt = tens(FG_I64, 2, DIMS(2, 3), xv);
  fg_feed feed = {"x", xt};
  RUN_EXPECT(g, y, &feed, 1, FG_I64, 3, DIMS(2, 1, 3), xv);
  fg_tensor_free(xt);
  fg_graph_free(g);
}

FG_TEST(expand_dims_bad_axes, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 1, DIMS(4));
  fg_set_name(g, fg_expand_dims(g, x, DIMS(1, -2), 2), "e"); /* rank 3: -2 is 1 */
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'expand_dims_0' (expand_dims): axes [1,-2] name output dim 1 twice");
  fg_graph_free(g);

  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 2, DIMS(2, 3));
  fg_expand_dims(g, x, DIMS(3), 1);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(expand_dims)", "axes[0] = 3 is out of range [-3, 3)",
             "input 0 shape [2,3]");
  fg_graph_free(g);

  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 2, DIMS(2, 3));
  fg_expand_dims(g, x, DIMS(-4), 1);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "axes[0] = -4 is out of range [-3, 3)");
  fg_graph_free(g);

  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 7, DIMS(1, 1, 1, 1, 1, 1, 2));
  fg_expand_dims(g, x, DIMS(0, 1), 2);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "output rank 9 is above the maximum 8");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_expand_dims(g, fg_placeholder(g, "x", FG_F32, 0, NULL), NULL, -1);
  EXPECT_ERR(g, FG_INVALID_ARGUMENT, "expand_dims: -1 axes");
  fg_graph_free(g);
}

/* ---- reshape_like -------------------------------------------------------- */

FG_TEST(reshape_like_values_and_unknown_batch, "") {
  const double x[6] = {1, 2, 3, 4, 5, 6};
  for (int k = 0; k < 2; k++) {
    fg_dtype dt = floats[k];
    fg_graph *g = fg_graph_new();
    fg_output a = cst(g, dt, 2, DIMS(2, 3), x);
    fg_output like = cst(g, FG_I32, 2, DIMS(3, 2), x); /* like's dtype does not matter */
    fg_output y = fg_reshape_like(g, a, like);
    EXPECT_TINFO(g, y, dt, 2, 3, 2);
    RUN_EXPECT(g, y, NULL, 0, dt, 2, DIMS(3, 2), x);
    fg_graph_free(g);
  }
  /* Unknown batch on both sides: checked when run. */
  fg_graph *g = fg_graph_new();
  fg_output a = fg_placeholder(g, "a", FG_F64, 2, DIMS(U, 3));
  fg_output like = fg_placeholder(g, "like", FG_F64, 2, DIMS(U, 2));
  fg_output y = fg_reshape_like(g, a, like);
  EXPECT_TINFO(g, y, FG_F64, 2, U, 2);
  fg_tensor *at_ = tens(FG_F64, 2, DIMS(2, 3), x), *lt = tens(FG_F64, 2, DIMS(3, 2), x);
  fg_feed feeds[2] = {{"a", at_}, {"like", lt}};
  RUN_EXPECT(g, y, feeds, 2, FG_F64, 2, DIMS(3, 2), x);
  fg_tensor_free(lt);
  /* [2,3] into [2,2] only fails once the shapes are fed. */
  lt = tens(FG_F64, 2, DIMS(2, 2), x);
  feeds[1].tensor = lt;
  fg_status *st = fg_status_new();
  fg_tensor *t = run(g, y, feeds, 2, st);
  FG_CHECK(t == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "cannot reshape input 0 shape [2,3] (6 elements) into input 1 (like) "
                        "shape [2,2] (4 elements)");
  fg_tensor_free(t);
  fg_status_free(st);
  fg_tensor_free(at_);
  fg_tensor_free(lt);
  fg_graph_free(g);
}

FG_TEST(reshape_like_count_mismatch, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output a = fg_placeholder(g, "a", FG_F32, 2, DIMS(2, 3));
  fg_output like = fg_placeholder(g, "like", FG_F32, 2, DIMS(4, 2));
  fg_reshape_like(g, a, like);
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'reshape_like_0' (reshape_like): cannot reshape input 0 shape [2,3] (6 "
             "elements) into input 1 (like) shape [4,2] (8 elements)");
  fg_graph_free(g);
}

/* ---- broadcast_like ------------------------------------------------------ */

FG_TEST(broadcast_like_values, "") {
  const double row[3] = {1, 2, 3}, col[2] = {10, 20}, like6[6] = {0};
  for (int k = 0; k < 2; k++) {
    fg_dtype dt = floats[k];
    fg_graph *g = fg_graph_new();
    fg_output like = cst(g, FG_BOOL, 2, DIMS(2, 3), like6);
    fg_output a = fg_broadcast_like(g, cst(g, dt, 1, DIMS(3), row), like);
    fg_output b = fg_broadcast_like(g, cst(g, dt, 2, DIMS(2, 1), col), like);
    fg_output c = fg_broadcast_like(g, cst(g, dt, 0, NULL, (const double[]){7}), like);
    fg_output d = fg_broadcast_like(g, cst(g, dt, 2, DIMS(1, 3), row), like);
    RUN_EXPECT(g, a, NULL, 0, dt, 2, DIMS(2, 3), ((const double[]){1, 2, 3, 1, 2, 3}));
    RUN_EXPECT(g, b, NULL, 0, dt, 2, DIMS(2, 3), ((const double[]){10, 10, 10, 20, 20, 20}));
    RUN_EXPECT(g, c, NULL, 0, dt, 2, DIMS(2, 3), ((const double[]){7, 7, 7, 7, 7, 7}));
    RUN_EXPECT(g, d, NULL, 0, dt, 2, DIMS(2, 3), ((const double[]){1, 2, 3, 1, 2, 3}));
    fg_graph_free(g);
  }
}

FG_TEST(broadcast_like_unknown_batch, "") {
  fg_graph *g = fg_graph_new();
  fg_output like = fg_placeholder(g, "like", FG_F32, 2, DIMS(U, 3));
  fg_output y = fg_broadcast_like(g, cst(g, FG_F32, 1, DIMS(3), (const double[]){1, 2, 3}), like);
  EXPECT_TINFO(g, y, FG_F32, 2, U, 3);
  const double z[9] = {0};
  fg_tensor *lt = tens(FG_F32, 2, DIMS(3, 3), z);
  fg_feed feed = {"like", lt};
  RUN_EXPECT(g, y, &feed, 1, FG_F32, 2, DIMS(3, 3), ((const double[]){1, 2, 3, 1, 2, 3, 1, 2, 3}));
  fg_tensor_free(lt);
  /* A known x dim fixes an unknown like dim: [4,3] to [?,3] is [4,3]. */
  fg_output z4 = cst(g, FG_F32, 2, DIMS(4, 3), (const double[12]){0});
  EXPECT_TINFO(g, fg_broadcast_like(g, z4, like), FG_F32, 2, 4, 3);
  fg_graph_free(g);
}

FG_TEST(broadcast_like_one_way_only, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, DIMS(4, 3));
  fg_output like = fg_placeholder(g, "like", FG_F32, 2, DIMS(2, 3));
  fg_broadcast_like(g, x, like);
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'broadcast_like_0' (broadcast_like): input 0 shape [4,3] does not broadcast "
             "to input 1 (like) shape [2,3] (dim 0: 4 vs 2)");
  fg_graph_free(g);

  /* [2,3] to [3] would need summing, not broadcasting. */
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 2, DIMS(2, 3));
  like = fg_placeholder(g, "like", FG_F32, 1, DIMS(3));
  fg_broadcast_like(g, x, like);
  EXPECT_ERR(g, FG_INVALID_GRAPH,
             "input 0 shape [2,3] has rank 2, above the rank 1 of input 1 (like) shape [3]");
  fg_graph_free(g);

  /* [1,3] to [2,1]: like's 1 does not stretch. */
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 2, DIMS(1, 3));
  like = fg_placeholder(g, "like", FG_F32, 2, DIMS(2, 1));
  fg_broadcast_like(g, x, like);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(dim 1: 3 vs 1)");
  fg_graph_free(g);

  /* x [?,3] against like [2,3] builds; fed with 4 rows it fails before
   * the kernel runs. */
  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 2, DIMS(U, 3));
  like = fg_placeholder(g, "like", FG_F32, 2, DIMS(2, 3));
  fg_output y = fg_broadcast_like(g, x, like);
  EXPECT_OK(g);
  fg_tensor *xt = tens(FG_F32, 2, DIMS(4, 3), (const double[12]){0});
  fg_tensor *lt = tens(FG_F32, 2, DIMS(2, 3), (const double[6]){0});
  fg_feed feeds[2] = {{"x", xt}, {"like", lt}};
  fg_status *st = fg_status_new();
  fg_tensor *t = run(g, y, feeds, 2, st);
  FG_CHECK(t == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st),
                        "input 0 shape [4,3] does not broadcast to input 1 (like) shape [2,3]");
  fg_status_free(st);
  fg_tensor_free(xt);
  fg_tensor_free(lt);
  fg_graph_free(g);
}

/* ---- sum_to -------------------------------------------------------------- */

FG_TEST(sum_to_broadcast_cases, "") {
  /* x = [[1,2,3],[4,5,6]]: to [3] [5,7,9]; to [2,1] [6,15]; to [] 21;
   * to [1,3] [5,7,9]; to [2,3] itself; to [1,1] [21]. */
  const double x[6] = {1, 2, 3, 4, 5, 6};
  const fg_dtype dts[4] = {FG_F32, FG_F64, FG_I32, FG_I64};
  for (int k = 0; k < 4; k++) {
    fg_dtype dt = dts[k];
    fg_graph *g = fg_graph_new();
    fg_output c = cst(g, dt, 2, DIMS(2, 3), x);
    fg_output a = fg_sum_to(g, c, cst(g, FG_F32, 1, DIMS(3), x));
    fg_output b = fg_sum_to(g, c, cst(g, FG_F32, 2, DIMS(2, 1), x));
    fg_output s = fg_sum_to(g, c, cst(g, FG_F32, 0, NULL, x));
    fg_output d = fg_sum_to(g, c, cst(g, FG_F32, 2, DIMS(1, 3), x));
    fg_output e = fg_sum_to(g, c, c);
    fg_output f = fg_sum_to(g, c, cst(g, FG_F32, 2, DIMS(1, 1), x));
    RUN_EXPECT(g, a, NULL, 0, dt, 1, DIMS(3), ((const double[]){5, 7, 9}));
    RUN_EXPECT(g, b, NULL, 0, dt, 2, DIMS(2, 1), ((const double[]){6, 15}));
    RUN_EXPECT(g, s, NULL, 0, dt, 0, NULL, ((const double[]){21}));
    RUN_EXPECT(g, d, NULL, 0, dt, 2, DIMS(1, 3), ((const double[]){5, 7, 9}));
    RUN_EXPECT(g, e, NULL, 0, dt, 2, DIMS(2, 3), x);
    RUN_EXPECT(g, f, NULL, 0, dt, 2, DIMS(1, 1), ((const double[]){21}));
    fg_graph_free(g);
  }
}

FG_TEST(sum_to_rank3_to_1x3, "") {
  /* x[i,j,c] = 6i + 3j + c over [4,2,3]; to [1,3]: for column c the eight
   * values 3k + c (k = 2i + j = 0..7) sum to 3*28 + 8c = 84, 92, 100. */
  double x[24];
  for (int i = 0; i < 24; i++)
    x[i] = i;
  for (int k = 0; k < 2; k++) {
    fg_graph *g = fg_graph_new();
    fg_output y =
        fg_sum_to(g, cst(g, floats[k], 3, DIMS(4, 2, 3), x), cst(g, floats[k], 2, DIMS(1, 3), x));
    EXPECT_TINFO(g, y, floats[k], 2, 1, 3);
    RUN_EXPECT(g, y, NULL, 0, floats[k], 2, DIMS(1, 3), ((const double[]){84, 92, 100}));
    /* And to [2,1]: rows j of all i, summed over i and c:
     * sum_{i,c} 6i + 3j + c = 4*3*3j + 3*36 + 4*3 = 36j + 120 -> 120, 156. */
    fg_output z =
        fg_sum_to(g, cst(g, floats[k], 3, DIMS(4, 2, 3), x), cst(g, floats[k], 2, DIMS(2, 1), x));
    RUN_EXPECT(g, z, NULL, 0, floats[k], 2, DIMS(2, 1), ((const double[]){120, 156}));
    fg_graph_free(g);
  }
}

FG_TEST(sum_to_unknown_batch, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, DIMS(U, 3));
  fg_output y = fg_sum_to(g, x, cst(g, FG_F32, 1, DIMS(3), (const double[3]){0}));
  /* like [?,1]: the batch stays, columns are summed. */
  fg_output like = fg_placeholder(g, "like", FG_F32, 2, DIMS(U, 1));
  fg_output z = fg_sum_to(g, x, like);
  EXPECT_TINFO(g, y, FG_F32, 1, 3);
  EXPECT_TINFO(g, z, FG_F32, 2, U, 1);
  const double xv[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  fg_tensor *xt = tens(FG_F32, 2, DIMS(3, 3), xv), *lt = tens(FG_F32, 2, DIMS(3, 1), xv);
  fg_feed feeds[2] = {{"x", xt}, {"like", lt}};
  RUN_EXPECT(g, y, feeds, 1, FG_F32, 1, DIMS(3), ((const double[]){12, 15, 18}));
  RUN_EXPECT(g, z, feeds, 2, FG_F32, 2, DIMS(3, 1), ((const double[]){6, 15, 24}));
  fg_tensor_free(xt);
  fg_tensor_free(lt);
  fg_graph_free(g);
}

FG_TEST(sum_to_f32_accumulates_in_double, "") {
  /* 1e8 + 1 - 1e8 + 1: a float fold gives 1 (1e8 + 1 rounds to 1e8), the
   * double fold reduce_sum uses gives 2. */
  fg_graph *g = fg_graph_new();
  fg_output y = fg_sum_to(g, cst(g, FG_F32, 1, DIMS(4), (const double[]){1e8, 1, -1e8, 1}),
                          cst(g, FG_F32, 0, NULL, (const double[]){0}));
  RUN_EXPECT(g, y, NULL, 0, FG_F32, 0, NULL, ((const double[]){2}));
  FG_CHECK_INT(fg_node_flops(g, y.node), 4);
  fg_graph_free(g);
}

FG_TEST(sum_to_bad_shapes, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, DIMS(2, 3));
  fg_output like = fg_placeholder(g, "like", FG_F32, 1, DIMS(4));
  fg_sum_to(g, x, like);
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'sum_to_0' (sum_to): input 1 (like) shape [4] does not broadcast to input 0 "
             "shape [2,3] (dim 1: 4 vs 3), so input 0 cannot be summed down to it");
  fg_graph_free(g);

  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_F32, 1, DIMS(3));
  like = fg_placeholder(g, "like", FG_F32, 2, DIMS(2, 3));
  fg_sum_to(g, x, like);
  EXPECT_ERR(g, FG_INVALID_GRAPH,
             "input 1 (like) shape [2,3] has rank 2, above the rank 1 of input 0 shape [3]");
  fg_graph_free(g);

  g = fg_graph_new();
  x = fg_placeholder(g, "x", FG_BOOL, 1, DIMS(3));
  fg_sum_to(g, x, x);
  EXPECT_ERR(g, FG_INVALID_GRAPH,
             "input 0 dtype bool is not allowed; sum_to needs f32, f64, i32 or i64");
  fg_graph_free(g);
}

/* ---- numel --------------------------------------------------------------- */

FG_TEST(numel_unknown_batch_all_dtypes, "") {
  const fg_dtype dts[4] = {FG_F32, FG_F64, FG_I32, FG_I64};
  for (int k = 0; k < 4; k++) {
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", FG_F32, 2, DIMS(U, 3));
    fg_output n = fg_numel(g, x, dts[k]);
    EXPECT_SCALAR(g, n, dts[k]);
    double z[15] = {0};
    for (int batch = 0; batch <= 5; batch += 5) { /* 0 rows: 0 elements */
      fg_tensor *xt = tens(FG_F32, 2, DIMS(batch, 3), z);
      fg_feed feed = {"x", xt};
      RUN_EXPECT(g, n, &feed, 1, dts[k], 0, NULL, ((const double[]){3.0 * batch}));
      fg_tensor_free(xt);
    }
    /* A scalar has one element, whatever its dtype. */
    fg_output one = fg_numel(g, cst(g, FG_BOOL, 0, NULL, (const double[]){1}), dts[k]);
    RUN_EXPECT(g, one, NULL, 0, dts[k], 0, NULL, ((const double[]){1}));
    fg_graph_free(g);
  }
}

FG_TEST(numel_bad_dtype, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_numel(g, fg_placeholder(g, "x", FG_F32, 1, DIMS(2)), FG_BOOL);
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'numel_0' (numel): dtype bool is not allowed; numel needs f32, f64, i32 or i64");
  fg_graph_free(g);
  g = fg_graph_new();
  fg_numel(g, fg_placeholder(g, "x", FG_F32, 1, DIMS(2)), (fg_dtype)9);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "attribute 'dtype' = 9 is not a valid dtype");
  fg_graph_free(g);
}

/* ---- slice_grad ---------------------------------------------------------- */

FG_TEST(slice_grad_places_dy, "") {
  const double dy[4] = {1, 2, 3, 4};
  const double like[12] = {0};
  for (int k = 0; k < 2; k++) {
    fg_dtype dt = floats[k];
    fg_graph *g = fg_graph_new();
    fg_output l = cst(g, dt, 2, DIMS(3, 4), like);
    fg_output d = cst(g, dt, 2, DIMS(2, 2), dy);
    /* begin [1,1] size [2,2]: rows 1-2, columns 1-2. */
    fg_output a = fg_slice_grad(g, d, l, 2, DIMS(1, 1), DIMS(2, 2));
    /* begin [1,2] size [-1,-1]: to the end, the same 2x2 block. */
    fg_output b = fg_slice_grad(g, d, l, 2, DIMS(1, 2), DIMS(-1, -1));
    EXPECT_TINFO(g, a, dt, 2, 3, 4);
    RUN_EXPECT(g, a, NULL, 0, dt, 2, DIMS(3, 4),
               ((const double[]){0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0}));
    RUN_EXPECT(g, b, NULL, 0, dt, 2, DIMS(3, 4),
               ((const double[]){0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4}));
    fg_graph_free(g);
  }
}

FG_TEST(slice_grad_unknown_batch, "") {
  /* y = slice(x, begin [0,1], size [-1,2]) on x [?,4]; slice_grad puts y
   * back: columns 1-2 kept, 0 and 3 zero. Bool, as slice allows any dtype. */
  for (int k = 0; k < 2; k++) {
    fg_dtype dt = k ? FG_BOOL : FG_F64;
    fg_graph *g = fg_graph_new();
    fg_output x = fg_placeholder(g, "x", dt, 2, DIMS(U, 4));
    fg_output y = fg_slice(g, x, 2, DIMS(0, 1), DIMS(-1, 2));
    fg_output z = fg_slice_grad(g, y, x, 2, DIMS(0, 1), DIMS(-1, 2));
    EXPECT_TINFO(g, z, dt, 2, U, 4);
    const double xv[8] = {1, 1, 0, 1, 1, 0, 1, 1};
    fg_tensor *xt = tens(dt, 2, DIMS(2, 4), xv);
    fg_feed feed = {"x", xt};
    RUN_EXPECT(g, z, &feed, 1, dt, 2, DIMS(2, 4), ((const double[]){0, 1, 0, 0, 0, 0, 1, 0}));
    fg_tensor_free(xt);
    fg_graph_free(g);
  }
}

FG_TEST(slice_grad_bad_attrs_and_shapes, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output like = fg_placeholder(g, "like", FG_F32, 2, DIMS(3, 4));
  fg_output dy = fg_placeholder(g, "dy", FG_F32, 2, DIMS(2, 2));
  fg_slice_grad(g, dy, like, 2, DIMS(1, 1), DIMS(2, 3));
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'slice_grad_0' (slice_grad): input 0 (dy) shape [2,2] does not match the slice "
             "of input 1 (like) shape [3,4] at dim 1 (2 vs 3, begin 1 size 3)");
  fg_graph_free(g);

  g = fg_graph_new();
  like = fg_placeholder(g, "like", FG_F32, 2, DIMS(3, 4));
  dy = fg_placeholder(g, "dy", FG_F32, 2, DIMS(2, 2));
  fg_slice_grad(g, dy, like, 2, DIMS(2, 1), DIMS(2, 2));
  EXPECT_ERR(g, FG_INVALID_GRAPH,
             "begin[0] + size[0] = 2 + 2 exceeds dim 0 of input 1 (like) shape [3,4]");
  fg_graph_free(g);

  g = fg_graph_new();
  like = fg_placeholder(g, "like", FG_F32, 2, DIMS(3, 4));
  dy = fg_placeholder(g, "dy", FG_F32, 2, DIMS(2, 2));
  fg_slice_grad(g, dy, like, 1, DIMS(0), DIMS(2));
  EXPECT_ERR(g, FG_INVALID_GRAPH,
             "begin has 1 entries and size 1, but input 1 (like) shape [3,4] has rank 2");
  fg_graph_free(g);

  g = fg_graph_new();
  like = fg_placeholder(g, "like", FG_F32, 2, DIMS(3, 4));
  dy = fg_placeholder(g, "dy", FG_F32, 2, DIMS(2, 2));
  fg_slice_grad(g, dy, like, 2, DIMS(-1, 0), DIMS(2, 2));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "begin[0] = -1 is negative");
  fg_graph_free(g);

  /* Known at build time only through the feed: dy [?,2] fed with 3 rows
   * for a 2-row slice fails before the kernel runs. */
  g = fg_graph_new();
  like = fg_placeholder(g, "like", FG_F32, 2, DIMS(3, 4));
  dy = fg_placeholder(g, "dy", FG_F32, 2, DIMS(U, 2));
  fg_output z = fg_slice_grad(g, dy, like, 2, DIMS(1, 1), DIMS(2, 2));
  EXPECT_OK(g);
  fg_tensor *lt = tens(FG_F32, 2, DIMS(3, 4), (const double[12]){0});
  fg_tensor *dt = tens(FG_F32, 2, DIMS(3, 2), (const double[6]){0});
  fg_feed feeds[2] = {{"like", lt}, {"dy", dt}};
  fg_status *st = fg_status_new();
  fg_tensor *t = run(g, z, feeds, 2, st);
  FG_CHECK(t == NULL);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "input 0 (dy) shape [3,2] does not match the slice");
  fg_status_free(st);
  fg_tensor_free(lt);
  fg_tensor_free(dt);
  fg_graph_free(g);
}

/* ---- gather_grad --------------------------------------------------------- */

FG_TEST(gather_grad_accumulates_repeated_indices, "") {
  /* like [4,2], indices [2,0,2], dy [[1,2],[3,4],[5,6]]:
   * row 0 = dy[1] = [3,4]; row 2 = dy[0] + dy[2] = [6,8]; rows 1, 3 zero. */
  const double dy[6] = {1, 2, 3, 4, 5, 6};
  for (int k = 0; k < 2; k++) {
    fg_dtype dt = floats[k];
    fg_graph *g = fg_graph_new();
    fg_output like = cst(g, dt, 2, DIMS(4, 2), (const double[8]){0});
    fg_output idx = cst(g, FG_I32, 1, DIMS(3), (const double[]){2, 0, 2});
    fg_output y = fg_gather_grad(g, cst(g, dt, 2, DIMS(3, 2), dy), idx, like);
    EXPECT_TINFO(g, y, dt, 2, 4, 2);
    RUN_EXPECT(g, y, NULL, 0, dt, 2, DIMS(4, 2), ((const double[]){3, 4, 0, 0, 6, 8, 0, 0}));
    FG_CHECK_INT(fg_node_flops(g, y.node), 6);
    fg_graph_free(g);
  }
}

FG_TEST(gather_grad_rank2_indices_i64, "") {
  /* like [4] (rows are scalars), indices [[1,1],[3,1]] i64, dy [[1,2],[3,4]]:
   * row 1 = 1 + 2 + 4 = 7, row 3 = 3. */
  for (int k = 0; k < 2; k++) {
    fg_dtype dt = floats[k];
    fg_graph *g = fg_graph_new();
    fg_output like = fg_placeholder(g, "like", dt, 1, DIMS(4));
    fg_output idx = fg_placeholder(g, "idx", FG_I64, 2, DIMS(U, 2));
    fg_output dy = fg_placeholder(g, "dy", dt, 2, DIMS(U, 2));
    fg_output y = fg_gather_grad(g, dy, idx, like);
    EXPECT_TINFO(g, y, dt, 1, 4);
    fg_tensor *lt = tens(dt, 1, DIMS(4), (const double[4]){9, 9, 9, 9});
    fg_tensor *it = tens(FG_I64, 2, DIMS(2, 2), (const double[]){1, 1, 3, 1});
    fg_tensor *dyt = tens(dt, 2, DIMS(2, 2), (const double[]){1, 2, 3, 4});
    fg_feed feeds[3] = {{"like", lt}, {"idx", it}, {"dy", dyt}};
    RUN_EXPECT(g, y, feeds, 3, dt, 1, DIMS(4), ((const double[]){0, 7, 0, 3}));
    fg_tensor_free(lt);
    fg_tensor_free(it);
    fg_tensor_free(dyt);
    fg_graph_free(g);
  }
}

FG_TEST(gather_grad_index_out_of_range, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output like = cst(g, FG_F32, 2, DIMS(4, 2), (const double[8]){0});
  fg_output idx = fg_placeholder(g, "idx", FG_I32, 1, DIMS(2));
  fg_output y = fg_gather_grad(g, cst(g, FG_F32, 2, DIMS(2, 2), (const double[4]){0}), idx, like);
  fg_set_name(g, y, "gg");
  EXPECT_OK(g);
  const double bad[2][2] = {{0, 4}, {-1, 0}};
  const char *msg[2] = {"node 'gg' (gather_grad): indices[1] = 4 is out of range [0, 4)",
                        "node 'gg' (gather_grad): indices[0] = -1 is out of range [0, 4)"};
  for (int k = 0; k < 2; k++) {
    fg_tensor *it = tens(FG_I32, 1, DIMS(2), bad[k]);
    fg_feed feed = {"idx", it};
    fg_status *st = fg_status_new();
    fg_tensor *t = run(g, y, &feed, 1, st);
    FG_CHECK(t == NULL);
    FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
    FG_CHECK_STR_CONTAINS(fg_status_message(st), msg[k]);
    fg_status_free(st);
    fg_tensor_free(it);
  }
  fg_graph_free(g);
}

FG_TEST(gather_grad_bad_shapes, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output like = fg_placeholder(g, "like", FG_F32, 2, DIMS(4, 2));
  fg_output idx = fg_placeholder(g, "idx", FG_I32, 1, DIMS(3));
  fg_output dy = fg_placeholder(g, "dy", FG_F32, 2, DIMS(3, 5));
  fg_gather_grad(g, dy, idx, like);
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'gather_grad_0' (gather_grad): input 0 (dy) shape [3,5] is not input 1 "
             "(indices) shape [3] + input 2 (like) shape [4,2] without dim 0");
  fg_graph_free(g);

  g = fg_graph_new();
  like = fg_placeholder(g, "like", FG_F32, 2, DIMS(4, 2));
  idx = fg_placeholder(g, "idx", FG_F32, 1, DIMS(3));
  dy = fg_placeholder(g, "dy", FG_F32, 2, DIMS(3, 2));
  fg_gather_grad(g, dy, idx, like);
  EXPECT_ERR(g, FG_INVALID_GRAPH,
             "input 1 (indices) dtype f32 is not allowed; gather_grad needs i32 or i64");
  fg_graph_free(g);

  g = fg_graph_new();
  like = fg_placeholder(g, "like", FG_F32, 0, NULL);
  idx = fg_placeholder(g, "idx", FG_I32, 1, DIMS(3));
  dy = fg_placeholder(g, "dy", FG_F32, 1, DIMS(3));
  fg_gather_grad(g, dy, idx, like);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 2 (like) shape [] is a scalar");
  fg_graph_free(g);
}
