/* Shape inference, part 1: the op table, sources, elementwise ops, the
 * sticky error and the generic builder. Shapes and FLOP counts below are
 * derived by hand from the rules in graph/op_table.h (NumPy broadcasting). */
#include "graph/op_table.h"
#include "test_infer_util.h"

/* ---- the op table ------------------------------------------------------- */

FG_TEST(op_table_rows_match_names, "") {
  FG_CHECK_INT(fg_num_ops(), FG_OP_COUNT);
  /* 71 + all_reduce, shard, after, all_reduce_apply_sgd,
   * sufficient_factor_apply_sgd (dist) + random_uniform, random_normal,
   * truncated_normal + reduce_min, reduce_prod, argmin, logsumexp, cumsum, topk,
   * topk_grad + pad, pad_grad, flatten, squeeze, expand, tile, tile_grad, split,
   * stack + the pools (max_pool2d, avg_pool2d, global_avg_pool, global_max_pool,
   * adaptive_avg_pool2d) and their four gradients + batch_norm,
   * batch_norm_update_stats, batch_norm_grad, layer_norm, layer_norm_grad,
   * group_norm, group_norm_grad, instance_norm + training_flag, dropout,
   * dropout_grad + conv2d, conv2d_grad_input, conv2d_grad_weight,
   * conv_transpose2d + sync_batch_norm, sync_batch_norm_grad + logical_not,
   * logical_and, logical_or, softmax_cross_entropy_grad, fused_matmul,
   * fused_elementwise, multi_apply_sgd, multi_apply_momentum, multi_apply_adam +
   * fused_conv2d, fused_conv2d_add + fused_matmul_relu_grad, matmul_bias_grad +
   * matmul_apply_sgd + softmax_cross_entropy_and_grad + gelu_tanh + resize_nearest,
   * resize_linear and their gradients + permuted_matmul */
  FG_CHECK_INT(FG_OP_COUNT, 142);
  for (int i = 0; i < fg_num_ops(); i++) {
    const fg_op_def *d = &fg_op_table[i];
    FG_REQUIRE(d->name != NULL);
    FG_REQUIRE(fg_op_name(i) != NULL);
    if (strcmp(d->name, fg_op_name(i)) != 0)
      FG_FAIL_AT("row %d: %s vs %s", i, d->name, fg_op_name(i));
    FG_CHECK(d->infer != NULL);
    /* split's count comes from its attributes (count_outputs); topk has
     * values and indices, matmul_bias_grad dw and db,
     * softmax_cross_entropy_and_grad the loss and its gradient; the
     * normalization ops y and its statistics
     * (batch_norm: mean, inv_std, var; the others: mean, inv_std), and the
     * gradients' dx, dscale, dshift; every other op has one output. */
    const char *norms[] = {"batch_norm",      "batch_norm_grad",      "layer_norm",
                           "layer_norm_grad", "group_norm",           "group_norm_grad",
                           "instance_norm",   "sync_batch_norm_grad", "sync_batch_norm"};
    int norm = 0;
    for (int k = 0; k < 9; k++)
      norm |= !strcmp(d->name, norms[k]);
    if (i == FG_OP_SPLIT) {
      FG_CHECK_INT(d->n_outputs, -1);
      FG_CHECK(d->count_outputs != NULL);
    } else {
      FG_CHECK_INT(d->n_outputs,
                   i == FG_OP_TOPK || i == FG_OP_MATMUL_BIAS_GRAD ||
                           i == FG_OP_SOFTMAX_CROSS_ENTROPY_AND_GRAD
                       ? 2
                   : !norm                                                                 ? 1
                   : !strcmp(d->name, "batch_norm") || !strcmp(d->name, "sync_batch_norm") ? 4
                                                                                           : 3);
      FG_CHECK(d->count_outputs == NULL);
    }
    FG_CHECK_INT(fg_op_lookup(d->name), i);
    FG_CHECK(d->max_inputs == -1 || d->max_inputs >= d->min_inputs);
  }
  FG_CHECK(fg_op_name(-1) == NULL);
  FG_CHECK(fg_op_name(FG_OP_COUNT) == NULL);
  FG_CHECK_INT(fg_op_lookup("no_such_op"), -1);
  FG_CHECK_INT(fg_op_lookup(NULL), -1);
  FG_CHECK_INT(fg_op_lookup("Add"), -1); /* names are case-sensitive */
}

static unsigned flags_of(const char *name) {
  int i = fg_op_lookup(name);
  return i < 0 ? 0xffffffffu : fg_op_table[i].flags;
}

FG_TEST(op_table_flags, "") {
  const char *sources[] = {"placeholder", "constant", "variable"};
  for (int i = 0; i < 3; i++)
    FG_CHECK(flags_of(sources[i]) & FG_OPF_SOURCE);
  FG_CHECK(!(flags_of("fill") & FG_OPF_SOURCE));
  FG_CHECK(flags_of("variable") & FG_OPF_STATEFUL);
  FG_CHECK(flags_of("assign") & FG_OPF_STATEFUL);
  FG_CHECK(!(flags_of("add") & FG_OPF_STATEFUL));
  FG_CHECK(flags_of("reshape") & FG_OPF_VIEW);
  const char *keyin[] = {"equal", "greater", "less", "argmax", "argmin"};
  for (int i = 0; i < 5; i++)
    FG_CHECK(flags_of(keyin[i]) & FG_OPF_KERNEL_KEY_INPUT);
  FG_CHECK(!(flags_of("add") & FG_OPF_KERNEL_KEY_INPUT));
  const char *nondiff[] = {"placeholder", "constant", "variable", "fill",          "argmax",
                           "equal",       "greater",  "less",     "stop_gradient", "zeros_like",
                           "ones_like",   "one_hot",  "assign",   "after",         "argmin"};
  for (int i = 0; i < 15; i++)
    if (flags_of(nondiff[i]) & FG_OPF_DIFFERENTIABLE)
      FG_FAIL_AT("%s is differentiable", nondiff[i]);
  int n_diff = 0;
  for (int i = 0; i < FG_OP_COUNT; i++)
    n_diff += (fg_op_table[i].flags & FG_OPF_DIFFERENTIABLE) != 0;
  /* all_reduce, shard, after, the fused updates, the random ops,
   * batch_norm_update_stats, argmin, the training flag, the logical ops,
   * and the passes' fused_matmul, softmax_cross_entropy_grad,
   * fused_elementwise, multi_apply_*, fused_conv2d, fused_conv2d_add,
   * fused_matmul_relu_grad, matmul_bias_grad, matmul_apply_sgd,
   * softmax_cross_entropy_and_grad and permuted_matmul (made after
   * autodiff) are not differentiable */
  FG_CHECK_INT(n_diff, FG_OP_COUNT - 45);
  FG_CHECK(!(flags_of("matmul_apply_sgd") & (FG_OPF_DIFFERENTIABLE | FG_OPF_COLLECTIVE)));
  FG_CHECK(flags_of("matmul_apply_sgd") & FG_OPF_STATEFUL);
  const char *rnd[] = {"random_uniform", "random_normal", "truncated_normal"};
  for (int i = 0; i < 3; i++) {
    if (!(flags_of(rnd[i]) & FG_OPF_RANDOM)) FG_FAIL_AT("%s not flagged random", rnd[i]);
    if (flags_of(rnd[i]) & (FG_OPF_DIFFERENTIABLE | FG_OPF_SOURCE))
      FG_FAIL_AT("%s is differentiable or a source", rnd[i]);
  }
  /* The collectives are flagged as such, and only they. */
  const char *coll[] = {"all_reduce", "all_reduce_apply_sgd", "sufficient_factor_apply_sgd"};
  int n_coll = 0;
  for (int i = 0; i < 3; i++) {
    if (!(flags_of(coll[i]) & FG_OPF_COLLECTIVE)) FG_FAIL_AT("%s not a collective", coll[i]);
    if (flags_of(coll[i]) & FG_OPF_DIFFERENTIABLE) FG_FAIL_AT("%s is differentiable", coll[i]);
  }
  /* sync_batch_norm and its gradient call the communicator too, and are
   * differentiable (they replace batch_norm). */
  const char *sync[] = {"sync_batch_norm", "sync_batch_norm_grad"};
  for (int i = 0; i < 2; i++)
    if ((flags_of(sync[i]) & (FG_OPF_COLLECTIVE | FG_OPF_DIFFERENTIABLE)) !=
        (FG_OPF_COLLECTIVE | FG_OPF_DIFFERENTIABLE))
      FG_FAIL_AT("%s not a differentiable collective", sync[i]);
  for (int i = 0; i < FG_OP_COUNT; i++)
    n_coll += (fg_op_table[i].flags & FG_OPF_COLLECTIVE) != 0;
  FG_CHECK_INT(n_coll, 5);
  FG_CHECK(!(flags_of("apply_sgd") & FG_OPF_COLLECTIVE));
  const char *ew[] = {"add",           "sub",        "mul",       "div",     "pow",
                      "maximum",       "minimum",    "equal",     "greater", "less",
                      "select",        "neg",        "exp",       "relu",    "identity",
                      "stop_gradient", "zeros_like", "ones_like", "cast"};
  for (int i = 0; i < 19; i++)
    if (!(flags_of(ew[i]) & FG_OPF_ELEMENTWISE)) FG_FAIL_AT("%s not elementwise", ew[i]);
  FG_CHECK(!(flags_of("matmul") & FG_OPF_ELEMENTWISE));
  /* In-place: same dtype and input 0's shape; not binary ops (broadcasting)
   * nor cast (dtype changes). */
  FG_CHECK(flags_of("exp") & FG_OPF_INPLACE);
  FG_CHECK(flags_of("identity") & FG_OPF_INPLACE);
  FG_CHECK(flags_of("add") & FG_OPF_INPLACE);
  FG_CHECK(!(flags_of("greater") & FG_OPF_INPLACE));
  FG_CHECK(!(flags_of("cast") & FG_OPF_INPLACE));
  FG_CHECK(!(flags_of("reshape") & FG_OPF_INPLACE));
}

FG_TEST(op_table_arity, "") {
  struct {
    const char *op;
    int lo, hi;
  } want[] = {{"placeholder", 0, 0}, {"fill", 0, 0},
              {"concat", 1, -1},     {"select", 3, 3},
              {"add", 2, 2},         {"exp", 1, 1},
              {"assign", 2, 2},      {"matmul", 2, 2},
              {"gather", 2, 2},      {"softmax_cross_entropy", 2, 2},
              {"reduce_sum", 1, 1}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int id = fg_op_lookup(want[i].op);
    FG_REQUIRE(id >= 0);
    FG_CHECK_INT(fg_op_table[id].min_inputs, want[i].lo);
    FG_CHECK_INT(fg_op_table[id].max_inputs, want[i].hi);
  }
}

/* ---- sources ------------------------------------------------------------ */

FG_TEST(placeholder_shape_and_dtype, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F64, 3, DIMS(2, 0, 5));
  fg_output b = fg_placeholder(g, "b", FG_I32, 2, DIMS(U, 7));
  fg_output s = fg_placeholder(g, "s", FG_BOOL, 0, NULL);
  EXPECT_OK(g);
  EXPECT_TINFO(g, x, FG_F64, 3, 2, 0, 5);
  EXPECT_TINFO(g, b, FG_I32, 2, U, 7);
  EXPECT_SCALAR(g, s, FG_BOOL);
  FG_CHECK_INT(fg_graph_find(g, "b"), b.node);
  fg_graph_free(g);
}

FG_TEST(placeholder_negative_dim, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, DIMS(4, -3));
  FG_CHECK_INT(x.node, -1);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'x' (placeholder)", "[4,-3]", "-3", "dim 1");
  fg_graph_free(g);
}

FG_TEST(placeholder_unknown_inner_dim, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_placeholder(g, "x", FG_F32, 2, DIMS(4, U));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'x' (placeholder)", "[4,-1]", "dim 1", "only dim 0");
  fg_graph_free(g);
}

FG_TEST(placeholder_rank_above_max, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_placeholder(g, "x", FG_F32, 9, DIMS(1, 1, 1, 1, 1, 1, 1, 1, 1));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'x' (placeholder)", "rank 9", "maximum 8");
  FG_CHECK_INT(fg_graph_num_nodes(g), 0);
  fg_graph_free(g);
}

FG_TEST(placeholder_byte_size_overflow, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_placeholder(g, "x", FG_F32, 3, DIMS(4294967296LL, 4294967296LL, 4));
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'x' (placeholder): shape [4294967296,4294967296,4] f32 overflows 64-bit byte "
             "size");
  fg_graph_free(g);
}

FG_TEST(placeholder_overflow_with_unknown_batch, "badinput") {
  /* The unknown dim counts as 1, so [?, 2^62, 4] f32 still overflows. */
  fg_graph *g = fg_graph_new();
  fg_placeholder(g, "x", FG_F32, 3, DIMS(U, 4611686018427387904LL, 4));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'x' (placeholder)", "overflows 64-bit byte size");
  fg_graph_free(g);
}

FG_TEST(placeholder_invalid_dtype, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_placeholder(g, "x", (fg_dtype)9, 1, DIMS(3));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'x' (placeholder)", "'dtype' = 9", "not a valid dtype");
  fg_graph_free(g);
  g = fg_graph_new();
  fg_placeholder(g, "y", FG_DTYPE_INVALID, 1, DIMS(3));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'y' (placeholder)", "'dtype' = 0");
  fg_graph_free(g);
}

FG_TEST(placeholder_bad_dims_argument, "") {
  fg_graph *g = fg_graph_new();
  FG_CHECK_INT(fg_placeholder(g, "x", FG_F32, 2, NULL).node, -1);
  EXPECT_ERR(g, FG_INVALID_ARGUMENT, "placeholder", "NULL");
  fg_graph_free(g);
  g = fg_graph_new();
  FG_CHECK_INT(fg_placeholder(g, "x", FG_F32, -1, DIMS(1)).node, -1);
  EXPECT_ERR(g, FG_INVALID_ARGUMENT, "rank -1");
  fg_graph_free(g);
}

FG_TEST(constant_variable_scalar, "") {
  fg_graph *g = fg_graph_new();
  fg_tensor *t = zeros(FG_F64, 2, DIMS(2, 3));
  FG_REQUIRE(t);
  fg_output c = fg_constant(g, "c", t);
  fg_output v = fg_variable(g, "w", t);
  fg_output s = fg_scalar(g, FG_I32, 7);
  fg_output f = fg_scalar(g, FG_F32, 0.5);
  fg_tensor_free(t); /* the graph holds its own copy */
  EXPECT_OK(g);
  EXPECT_TINFO(g, c, FG_F64, 2, 2, 3);
  EXPECT_TINFO(g, v, FG_F64, 2, 2, 3);
  EXPECT_SCALAR(g, s, FG_I32);
  EXPECT_SCALAR(g, f, FG_F32);
  FG_CHECK(strcmp(fg_node_op(g, s.node), "constant") == 0);
  FG_CHECK(strcmp(fg_node_op(g, v.node), "variable") == 0);
  const fg_tensor *val = NULL;
  FG_REQUIRE(fg_node_attr_tensor(g, s.node, "value", &val) == 0 && val);
  FG_CHECK_INT(fg_tensor_rank(val), 0);
  FG_CHECK_INT(*(const int32_t *)fg_tensor_data(val), 7);
  FG_REQUIRE(fg_node_attr_tensor(g, f.node, "value", &val) == 0 && val);
  FG_CHECK_NEAR(*(const float *)fg_tensor_data(val), 0.5, 0);
  fg_graph_free(g);
}

FG_TEST(constant_null_and_scalar_out_of_range, "") {
  fg_graph *g = fg_graph_new();
  FG_CHECK_INT(fg_constant(g, "c", NULL).node, -1);
  EXPECT_ERR(g, FG_INVALID_ARGUMENT, "constant", "NULL");
  fg_graph_free(g);
  g = fg_graph_new();
  FG_CHECK_INT(fg_scalar(g, FG_I32, 1e20).node, -1);
  EXPECT_ERR(g, FG_INVALID_ARGUMENT, "does not fit in i32");
  fg_graph_free(g);
  g = fg_graph_new();
  FG_CHECK_INT(fg_scalar(g, (fg_dtype)42, 1).node, -1);
  FG_CHECK(fg_graph_status(g, NULL) != FG_OK);
  fg_graph_free(g);
}

FG_TEST(fill_shape_and_errors, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output f = fg_fill(g, FG_I64, 2, DIMS(3, 4), 1.0);
  EXPECT_OK(g);
  EXPECT_TINFO(g, f, FG_I64, 2, 3, 4);
  double v = 0;
  FG_CHECK_INT(fg_node_attr_float(g, f.node, "value", &v), 0);
  FG_CHECK_NEAR(v, 1.0, 0);
  /* fill has no feed to resolve an unknown dim from. */
  fg_fill(g, FG_F32, 2, DIMS(U, 4), 0.0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(fill)", "[-1,4]", "negative dimension -1");
  fg_graph_free(g);
}

/* ---- binary ops --------------------------------------------------------- */

FG_TEST(binary_all_ops_dtypes, "") {
  fg_graph *g = fg_graph_new();
  fg_output a = ph(g, FG_F32, 2, DIMS(2, 3)), b = ph(g, FG_F32, 1, DIMS(3));
  const char *arith[] = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"};
  const char *cmp[] = {"equal", "greater", "less"};
  fg_output in[2] = {a, b};
  for (int i = 0; i < 7; i++)
    EXPECT_TINFO(g, fg_op(g, arith[i], NULL, in, 2, NULL), FG_F32, 2, 2, 3);
  for (int i = 0; i < 3; i++)
    EXPECT_TINFO(g, fg_op(g, cmp[i], NULL, in, 2, NULL), FG_BOOL, 2, 2, 3);
  /* The typed builders reach the same ops. */
  EXPECT_TINFO(g, fg_sub(g, b, a), FG_F32, 2, 2, 3);
  EXPECT_TINFO(g, fg_less(g, b, a), FG_BOOL, 2, 2, 3);
  FG_CHECK(strcmp(fg_node_op(g, fg_maximum(g, a, b).node), "maximum") == 0);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(broadcast_rules, "") {
  fg_graph *g = fg_graph_new();
  fg_output a = ph(g, FG_F32, 3, DIMS(4, 1, 3)), b = ph(g, FG_F32, 2, DIMS(2, 1));
  fg_output s = ph(g, FG_F32, 0, NULL), m = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_output e = ph(g, FG_F32, 2, DIMS(0, 1));
  EXPECT_TINFO(g, fg_add(g, a, b), FG_F32, 3, 4, 2, 3); /* both sides stretch */
  EXPECT_TINFO(g, fg_mul(g, s, m), FG_F32, 2, 2, 3);    /* scalar */
  EXPECT_TINFO(g, fg_mul(g, m, s), FG_F32, 2, 2, 3);
  EXPECT_SCALAR(g, fg_add(g, s, s), FG_F32);
  EXPECT_TINFO(g, fg_add(g, e, ph(g, FG_F32, 1, DIMS(5))), FG_F32, 2, 0, 5); /* 0 vs 1 -> 0 */
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(broadcast_unknown_dims, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(U, 3));
  EXPECT_TINFO(g, fg_add(g, x, ph(g, FG_F32, 2, DIMS(1, 3))), FG_F32, 2, U, 3);
  EXPECT_TINFO(g, fg_add(g, x, ph(g, FG_F32, 2, DIMS(5, 3))), FG_F32, 2, 5, 3);
  EXPECT_TINFO(g, fg_add(g, x, ph(g, FG_F32, 2, DIMS(U, 3))), FG_F32, 2, U, 3);
  EXPECT_TINFO(g, fg_add(g, x, ph(g, FG_F32, 1, DIMS(3))), FG_F32, 2, U, 3);
  EXPECT_TINFO(g, fg_greater(g, ph(g, FG_F32, 3, DIMS(U, 1, 1)), x), FG_BOOL, 3, U, U, 3);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(broadcast_mismatch, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output in[2] = {ph(g, FG_F32, 2, DIMS(2, 3)), ph(g, FG_F32, 2, DIMS(4, 3))};
  FG_CHECK_INT(fg_op(g, "add", "add_3", in, 2, NULL).node, -1);
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'add_3' (add): input 0 shape [2,3] and input 1 shape [4,3] do not broadcast "
             "(dim 0: 2 vs 4)");
  fg_graph_free(g);
  /* Ranks differ: the dim is counted in the output (right-aligned). */
  g = fg_graph_new();
  fg_mul(g, ph(g, FG_F32, 3, DIMS(7, 2, 3)), ph(g, FG_F32, 1, DIMS(4)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(mul)", "[7,2,3]", "[4]", "dim 2: 3 vs 4");
  fg_graph_free(g);
}

FG_TEST(binary_dtype_mismatch, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output in[2] = {ph(g, FG_F32, 1, DIMS(3)), ph(g, FG_F64, 1, DIMS(3))};
  fg_op(g, "add", "add_3", in, 2, NULL);
  EXPECT_MSG(g, FG_INVALID_GRAPH,
             "node 'add_3' (add): input 1 dtype f64 does not match input 0 dtype f32");
  fg_graph_free(g);
}

FG_TEST(binary_dtype_classes, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output bl = ph(g, FG_BOOL, 1, DIMS(3)), i = ph(g, FG_I32, 1, DIMS(3));
  EXPECT_TINFO(g, fg_add(g, i, i), FG_I32, 1, 3);      /* ints are numeric */
  EXPECT_TINFO(g, fg_equal(g, bl, bl), FG_BOOL, 1, 3); /* equal takes bool */
  EXPECT_TINFO(g, fg_less(g, i, i), FG_BOOL, 1, 3);
  EXPECT_OK(g);
  fg_add(g, bl, bl);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(add)", "input 0 dtype bool is not allowed");
  fg_graph_free(g);

  g = fg_graph_new();
  i = ph(g, FG_I64, 1, DIMS(3));
  fg_pow(g, i, i);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(pow)", "i64", "f32 or f64");
  fg_graph_free(g);

  g = fg_graph_new();
  bl = ph(g, FG_BOOL, 1, DIMS(3));
  fg_greater(g, bl, bl);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(greater)", "bool");
  fg_graph_free(g);
}

/* ---- select ------------------------------------------------------------- */

FG_TEST(select_three_way_broadcast, "") {
  fg_graph *g = fg_graph_new();
  fg_output c = ph(g, FG_BOOL, 2, DIMS(2, 1)), a = ph(g, FG_F32, 1, DIMS(3));
  fg_output b = ph(g, FG_F32, 0, NULL);
  EXPECT_TINFO(g, fg_select(g, c, a, b), FG_F32, 2, 2, 3);
  fg_output bb = ph(g, FG_I64, 3, DIMS(U, 1, 1));
  EXPECT_TINFO(g, fg_select(g, c, bb, bb), FG_I64, 3, U, 2, 1);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(select_errors, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output f = ph(g, FG_F32, 1, DIMS(3));
  fg_select(g, f, f, f);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(select)", "input 0 (cond) dtype f32 must be bool");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_output c = ph(g, FG_BOOL, 1, DIMS(3));
  fg_select(g, c, ph(g, FG_F32, 1, DIMS(3)), ph(g, FG_I32, 1, DIMS(3)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 2 dtype i32 does not match input 1 dtype f32");
  fg_graph_free(g);

  g = fg_graph_new();
  c = ph(g, FG_BOOL, 2, DIMS(2, 1));
  fg_select(g, c, ph(g, FG_F32, 1, DIMS(3)), ph(g, FG_F32, 1, DIMS(4)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 2 shape [4]", "[2,3]", "dim 1: 4 vs 3");
  fg_graph_free(g);
}

/* ---- unary and cast ----------------------------------------------------- */

FG_TEST(unary_float_ops, "badinput") {
  const char *ops[] = {"exp",        "log",   "sqrt",         "rsqrt",      "tanh",
                       "sigmoid",    "gelu",  "leaky_relu",   "elu",        "softplus",
                       "selu",       "silu",  "hard_sigmoid", "hard_swish", "mish",
                       "reciprocal", "floor", "ceil",         "round"};
  for (int k = 0; k < 19; k++) {
    fg_graph *g = fg_graph_new();
    fg_output x = ph(g, FG_F64, 2, DIMS(U, 5));
    EXPECT_TINFO(g, fg_op(g, ops[k], NULL, &x, 1, NULL), FG_F64, 2, U, 5);
    EXPECT_OK(g);
    fg_output i = ph(g, FG_I32, 1, DIMS(5));
    FG_CHECK_INT(fg_op(g, ops[k], "u", &i, 1, NULL).node, -1);
    EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'u'", ops[k], "i32", "f32 or f64");
    fg_graph_free(g);
  }
}

FG_TEST(unary_numeric_and_any_dtype, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output i = ph(g, FG_I64, 1, DIMS(4)), b = ph(g, FG_BOOL, 2, DIMS(2, 2));
  EXPECT_TINFO(g, fg_neg(g, i), FG_I64, 1, 4);
  EXPECT_TINFO(g, fg_abs(g, i), FG_I64, 1, 4);
  EXPECT_TINFO(g, fg_relu(g, i), FG_I64, 1, 4);
  EXPECT_TINFO(g, fg_identity(g, b), FG_BOOL, 2, 2, 2);
  EXPECT_TINFO(g, fg_stop_gradient(g, b), FG_BOOL, 2, 2, 2);
  EXPECT_TINFO(g, fg_zeros_like(g, b), FG_BOOL, 2, 2, 2);
  EXPECT_TINFO(g, fg_ones_like(g, i), FG_I64, 1, 4);
  EXPECT_TINFO(g, fg_exp(g, ph(g, FG_F32, 1, DIMS(4))), FG_F32, 1, 4);
  EXPECT_OK(g);
  fg_relu(g, b);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(relu)", "bool");
  fg_graph_free(g);
}

FG_TEST(leaky_relu_alpha, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 1, DIMS(3));
  fg_output l = fg_leaky_relu(g, x, 0.2);
  double a = 0;
  FG_CHECK_INT(fg_node_attr_float(g, l.node, "alpha", &a), 0);
  FG_CHECK_NEAR(a, 0.2, 0);
  /* Absent alpha: the default 0.01 applies, no error. */
  EXPECT_TINFO(g, fg_op(g, "leaky_relu", NULL, &x, 1, NULL), FG_F32, 1, 3);
  EXPECT_OK(g);
  fg_attrs *at = fg_attrs_new();
  fg_attrs_set_string(at, "alpha", "big");
  fg_op(g, "leaky_relu", "lr", &x, 1, at);
  fg_attrs_free(at);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'lr' (leaky_relu)", "'alpha'", "string");
  fg_graph_free(g);
}

FG_TEST(cast_dtype, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(U, 3));
  EXPECT_TINFO(g, fg_cast(g, x, FG_I64), FG_I64, 2, U, 3);
  EXPECT_TINFO(g, fg_cast(g, x, FG_BOOL), FG_BOOL, 2, U, 3);
  EXPECT_OK(g);
  fg_cast(g, x, (fg_dtype)6);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(cast)", "'dtype' = 6", "not a valid dtype");
  fg_graph_free(g);
}

/* ---- the sticky error and the generic builder --------------------------- */

FG_TEST(sticky_first_error_kept, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output a = ph(g, FG_F32, 1, DIMS(2)), b = ph(g, FG_F32, 1, DIMS(3));
  fg_output bad = fg_add(g, a, b);
  FG_CHECK_INT(bad.node, -1);
  int n = fg_graph_num_nodes(g);
  /* Later calls, valid or not, do nothing and return no output. */
  FG_CHECK_INT(fg_relu(g, a).node, -1);
  FG_CHECK_INT(fg_matmul(g, a, b, 0, 0).node, -1);
  FG_CHECK_INT(fg_relu(g, bad).node, -1);
  FG_CHECK_INT(ph(g, FG_F32, 1, DIMS(1)).node, -1);
  FG_CHECK_INT(fg_graph_num_nodes(g), n);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(add)", "[2]", "[3]", "dim 0: 2 vs 3");
  fg_graph_free(g);
}

FG_TEST(nested_builders_one_check, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(4, 3));
  fg_output y = fg_relu(
      g, fg_add(g, fg_matmul(g, x, ph(g, FG_F32, 2, DIMS(5, 2)), 0, 0), ph(g, FG_F32, 1, DIMS(2))));
  FG_CHECK_INT(y.node, -1);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(matmul)", "K=3", "K=5");
  fg_graph_free(g);
}

FG_TEST(unknown_op_and_arity, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 1, DIMS(3));
  FG_CHECK_INT(fg_op(g, "conv9d", "c", &x, 1, NULL).node, -1);
  EXPECT_ERR(g, FG_UNIMPLEMENTED, "conv9d");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 1, DIMS(3));
  FG_CHECK_INT(fg_op(g, "add", "a", &x, 1, NULL).node, -1);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'a' (add)", "2 inputs", "got 1");
  fg_graph_free(g);

  g = fg_graph_new();
  FG_CHECK_INT(fg_concat(g, NULL, 0, 0).node, -1);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(concat)", "at least 1");
  fg_graph_free(g);
}

FG_TEST(missing_and_mistyped_attrs, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_op(g, "transpose", "t", &x, 1, NULL);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 't' (transpose)", "missing attribute 'perm'");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "shape", 6);
  fg_op(g, "reshape", "r", &x, 1, a);
  fg_attrs_free(a);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'r' (reshape)", "'shape' has type int", "expected ints");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_op(g, "placeholder", "p", NULL, 0, NULL);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'p' (placeholder)", "missing attribute 'dtype'");
  fg_graph_free(g);
}

FG_TEST(null_graph_builders, "") {
  fg_output x = {0, 0};
  FG_CHECK_INT(fg_add(NULL, x, x).node, -1);
  FG_CHECK_INT(fg_placeholder(NULL, "x", FG_F32, 1, DIMS(1)).node, -1);
  FG_CHECK_INT(fg_scalar(NULL, FG_F32, 1).node, -1);
  FG_CHECK_INT(fg_reduce_sum(NULL, x, NULL, 0, 0).node, -1);
  FG_CHECK_INT(fg_concat(NULL, &x, 1, 0).node, -1);
  FG_CHECK_INT(fg_graph_status(NULL, NULL), FG_INVALID_ARGUMENT);
}

FG_TEST(input_reference_out_of_range, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 1, DIMS(3));
  fg_output ghost = {5, 0};
  FG_CHECK_INT(fg_add(g, x, ghost).node, -1);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(add)", "input 1", "node 5");
  fg_graph_free(g);
}

/* ---- FLOP counts -------------------------------------------------------- */

FG_TEST(flops_counts, "") {
  fg_graph *g = fg_graph_new();
  fg_output a = ph(g, FG_F32, 2, DIMS(2, 3)), w = ph(g, FG_F32, 2, DIMS(3, 4));
  fg_output mm = fg_matmul(g, a, w, 0, 0);
  fg_output bm = fg_matmul(g, ph(g, FG_F32, 3, DIMS(5, 4, 3)), ph(g, FG_F32, 2, DIMS(4, 3)), 0, 1);
  fg_output ad = fg_add(g, a, a);
  fg_output rs = fg_reduce_sum(g, a, DIMS(1), 1, 0);
  fg_output sm = fg_softmax(g, a, 1);
  fg_output rh = fg_reshape(g, a, 1, DIMS(6));
  fg_output id = fg_identity(g, a);
  fg_output un = fg_add(g, ph(g, FG_F32, 2, DIMS(U, 3)), a);
  EXPECT_OK(g);
  FG_CHECK_INT(fg_node_flops(g, mm.node), 2 * 2 * 4 * 3);     /* 2*M*N*K */
  FG_CHECK_INT(fg_node_flops(g, bm.node), 2 * 5 * 4 * 4 * 3); /* batch 5, M=4, N=4, K=3 */
  FG_CHECK_INT(fg_node_flops(g, ad.node), 6);
  FG_CHECK_INT(fg_node_flops(g, rs.node), 6); /* reductions: input elements */
  FG_CHECK_INT(fg_node_flops(g, sm.node), 30);
  FG_CHECK_INT(fg_node_flops(g, rh.node), 0);
  FG_CHECK_INT(fg_node_flops(g, id.node), 0);
  FG_CHECK_INT(fg_node_flops(g, un.node), -1); /* unknown batch */
  FG_CHECK_INT(fg_node_flops(g, a.node), 0);   /* placeholder */
  fg_graph_free(g);
}
