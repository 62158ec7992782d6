/* Shape inference, part 2: matmul, shaping ops, gather/one_hot, reductions,
 * the softmax family and assign, plus re-inference with concrete (fed)
 * shapes as the executor does at run time. Expected shapes are derived by
 * hand from NumPy/TensorFlow semantics. */
#include "graph/graph_internal.h"
#include "test_infer_util.h"

/* ---- matmul ------------------------------------------------------------- */

FG_TEST(matmul_plain_and_transposed, "") {
  fg_graph *g = fg_graph_new();
  fg_output a = ph(g, FG_F32, 2, DIMS(2, 3)), b = ph(g, FG_F32, 2, DIMS(3, 4));
  EXPECT_TINFO(g, fg_matmul(g, a, b, 0, 0), FG_F32, 2, 2, 4);
  fg_output at = ph(g, FG_F32, 2, DIMS(3, 2)), bt = ph(g, FG_F32, 2, DIMS(4, 3));
  EXPECT_TINFO(g, fg_matmul(g, at, b, 1, 0), FG_F32, 2, 2, 4);
  EXPECT_TINFO(g, fg_matmul(g, a, bt, 0, 1), FG_F32, 2, 2, 4);
  EXPECT_TINFO(g, fg_matmul(g, at, bt, 1, 1), FG_F32, 2, 2, 4);
  fg_output m = fg_matmul(g, at, bt, 5, -1); /* any non-zero means transposed */
  EXPECT_TINFO(g, m, FG_F32, 2, 2, 4);
  int64_t ta = -7;
  FG_CHECK_INT(fg_node_attr_int(g, m.node, "transpose_a", &ta), 0);
  FG_CHECK_INT(ta, 1);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(matmul_batched_broadcast, "") {
  fg_graph *g = fg_graph_new();
  fg_output a = ph(g, FG_F64, 4, DIMS(5, 1, 2, 3)), b = ph(g, FG_F64, 3, DIMS(4, 3, 6));
  EXPECT_TINFO(g, fg_matmul(g, a, b, 0, 0), FG_F64, 4, 5, 4, 2, 6);
  fg_output c = ph(g, FG_F64, 3, DIMS(U, 2, 3)), d = ph(g, FG_F64, 2, DIMS(3, 7));
  EXPECT_TINFO(g, fg_matmul(g, c, d, 0, 0), FG_F64, 3, U, 2, 7);
  /* An unknown inner dim matches anything. */
  fg_output e = ph(g, FG_F64, 2, DIMS(U, 8));
  EXPECT_TINFO(g, fg_matmul(g, e, e, 1, 0), FG_F64, 2, 8, 8);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(mlp_unknown_batch_carried, "") {
  /* [?,64] @ [64,32] + [32] -> [?,32] -> relu -> reduce over 0 -> [32]. */
  fg_graph *g = fg_graph_new();
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, DIMS(U, 64));
  fg_tensor *wt = zeros(FG_F32, 2, DIMS(64, 32)), *bt = zeros(FG_F32, 1, DIMS(32));
  FG_REQUIRE(wt && bt);
  fg_output w = fg_variable(g, "w", wt), b = fg_variable(g, "b", bt);
  fg_tensor_free(wt);
  fg_tensor_free(bt);
  fg_output h = fg_add(g, fg_matmul(g, x, w, 0, 0), b);
  EXPECT_TINFO(g, h, FG_F32, 2, U, 32);
  fg_output r = fg_relu(g, h);
  EXPECT_TINFO(g, r, FG_F32, 2, U, 32);
  EXPECT_TINFO(g, fg_reduce_mean(g, r, DIMS(0), 1, 0), FG_F32, 1, 32);
  EXPECT_TINFO(g, fg_reduce_sum(g, r, DIMS(0), 1, 1), FG_F32, 2, 1, 32);
  EXPECT_TINFO(g, fg_reduce_sum(g, r, DIMS(1), 1, 0), FG_F32, 1, U);
  EXPECT_TINFO(g, fg_softmax(g, r, -1), FG_F32, 2, U, 32);
  EXPECT_TINFO(g, fg_argmax(g, r, 1), FG_I64, 1, U);
  fg_output y = ph(g, FG_I64, 1, DIMS(U));
  EXPECT_SCALAR(g, fg_softmax_cross_entropy(g, r, y), FG_F32);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(matmul_inner_mismatch, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output in[2] = {ph(g, FG_F32, 2, DIMS(2, 3)), ph(g, FG_F32, 2, DIMS(4, 5))};
  fg_op(g, "matmul", "mm", in, 2, NULL);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'mm' (matmul)", "input 0 shape [2,3]", "K=3",
             "input 1 shape [4,5]", "K=4");
  fg_graph_free(g);
}

FG_TEST(matmul_rank_dtype_batch_errors, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_matmul(g, ph(g, FG_F32, 1, DIMS(3)), ph(g, FG_F32, 2, DIMS(3, 4)), 0, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(matmul)", "input 0 shape [3] has rank 1", "rank >= 2");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_output i = ph(g, FG_I32, 2, DIMS(2, 2));
  fg_matmul(g, i, i, 0, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(matmul)", "i32", "f32 or f64");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_matmul(g, ph(g, FG_F32, 2, DIMS(2, 2)), ph(g, FG_F64, 2, DIMS(2, 2)), 0, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 1 dtype f64 does not match input 0 dtype f32");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_matmul(g, ph(g, FG_F32, 3, DIMS(2, 2, 3)), ph(g, FG_F32, 3, DIMS(3, 3, 2)), 0, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "batch dimensions", "[2,2,3]", "[3,3,2]", "dim 0: 2 vs 3");
  fg_graph_free(g);
}

FG_TEST(matmul_transpose_flag_range, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output in[2] = {ph(g, FG_F32, 2, DIMS(2, 2)), ph(g, FG_F32, 2, DIMS(2, 2))};
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "transpose_a", 2);
  fg_op(g, "matmul", "mm", in, 2, a);
  fg_attrs_free(a);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'mm' (matmul)", "'transpose_a' = 2", "0 or 1");
  fg_graph_free(g);
}

/* ---- reshape ------------------------------------------------------------ */

FG_TEST(reshape_known_and_minus_one, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_I32, 3, DIMS(2, 3, 4));
  EXPECT_TINFO(g, fg_reshape(g, x, 2, DIMS(-1, 4)), FG_I32, 2, 6, 4);
  EXPECT_TINFO(g, fg_reshape(g, x, 3, DIMS(4, -1, 2)), FG_I32, 3, 4, 3, 2);
  EXPECT_TINFO(g, fg_reshape(g, x, 1, DIMS(24)), FG_I32, 1, 24);
  EXPECT_TINFO(g, fg_reshape(g, x, 1, DIMS(-1)), FG_I32, 1, 24);
  fg_output one = ph(g, FG_F32, 2, DIMS(1, 1));
  EXPECT_SCALAR(g, fg_reshape(g, one, 0, NULL), FG_F32);
  fg_output empty = ph(g, FG_F32, 2, DIMS(0, 3));
  EXPECT_TINFO(g, fg_reshape(g, empty, 3, DIMS(3, 0, 5)), FG_F32, 3, 3, 0, 5);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(reshape_unknown_input, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(U, 6));
  EXPECT_TINFO(g, fg_reshape(g, x, 3, DIMS(-1, 2, 3)), FG_F32, 3, U, 2, 3);
  /* Fully specified targets are accepted; the feed is checked at run time. */
  EXPECT_TINFO(g, fg_reshape(g, x, 2, DIMS(4, 3)), FG_F32, 2, 4, 3);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(reshape_element_count_mismatch, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_reshape(g, x, 2, DIMS(4, 2));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(reshape)", "input 0 shape [2,3] (6 elements)", "[4,2]",
             "(8 elements)");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_reshape(g, x, 2, DIMS(-1, 4));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(reshape)", "[2,3]", "[-1,4]", "not a multiple of 4");
  fg_graph_free(g);
}

FG_TEST(reshape_bad_shape_attr, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_reshape(g, x, 3, DIMS(-1, -1, 3));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(reshape)", "[-1,-1,3]", "more than one -1");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_reshape(g, x, 2, DIMS(-2, 3));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(reshape)", "negative dimension -2");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(0, 3));
  fg_reshape(g, x, 2, DIMS(0, -1));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(reshape)", "ambiguous");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(U, 3));
  fg_reshape(g, x, 3, DIMS(4294967296LL, 4294967296LL, 4));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(reshape)", "more than 2^63 elements");
  fg_graph_free(g);

  /* 2^62 elements fit in int64 but 2^64 bytes of f32 do not. */
  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(U, 3));
  fg_reshape(g, x, 3, DIMS(1073741824LL, 1073741824LL, 4));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(reshape)", "[1073741824,1073741824,4] f32 overflows 64-bit");
  fg_graph_free(g);
}

/* ---- transpose ---------------------------------------------------------- */

FG_TEST(transpose_perm, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F64, 3, DIMS(U, 3, 4));
  EXPECT_TINFO(g, fg_transpose(g, x, 3, DIMS(2, 0, 1)), FG_F64, 3, 4, U, 3);
  EXPECT_TINFO(g, fg_transpose(g, x, 3, DIMS(0, 1, 2)), FG_F64, 3, U, 3, 4);
  EXPECT_SCALAR(g, fg_transpose(g, ph(g, FG_F32, 0, NULL), 0, NULL), FG_F32);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(transpose_not_a_permutation, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_transpose(g, x, 2, DIMS(0, 0));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(transpose)", "perm [0,0] is not a permutation of 0..1");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_transpose(g, x, 2, DIMS(0, 2));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "perm [0,2] is not a permutation of 0..1");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_transpose(g, x, 2, DIMS(-1, 0));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "perm [-1,0] is not a permutation");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(2, 3));
  fg_transpose(g, x, 3, DIMS(0, 1, 2));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "perm [0,1,2] has 3 entries", "[2,3] has rank 2");
  fg_graph_free(g);
}

/* ---- concat ------------------------------------------------------------- */

FG_TEST(concat_shapes, "") {
  fg_graph *g = fg_graph_new();
  fg_output xs[3] = {ph(g, FG_F32, 2, DIMS(2, 3)), ph(g, FG_F32, 2, DIMS(2, 5)),
                     ph(g, FG_F32, 2, DIMS(2, 1))};
  EXPECT_TINFO(g, fg_concat(g, xs, 3, 1), FG_F32, 2, 2, 9);
  EXPECT_TINFO(g, fg_concat(g, xs, 2, -1), FG_F32, 2, 2, 8);
  EXPECT_TINFO(g, fg_concat(g, xs, 1, 0), FG_F32, 2, 2, 3);
  fg_output ys[2] = {ph(g, FG_F32, 2, DIMS(U, 3)), ph(g, FG_F32, 2, DIMS(4, 3))};
  EXPECT_TINFO(g, fg_concat(g, ys, 2, 0), FG_F32, 2, U, 3);
  EXPECT_TINFO(g, fg_concat(g, ys, 2, 1), FG_F32, 2, 4, 6); /* unknown meets 4 */
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(concat_axis_out_of_range, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output xs[2] = {ph(g, FG_F32, 2, DIMS(2, 3)), ph(g, FG_F32, 2, DIMS(2, 3))};
  fg_concat(g, xs, 2, 2);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(concat)", "axis 2 is out of range [-2, 2)", "[2,3]");
  fg_graph_free(g);

  g = fg_graph_new();
  xs[0] = ph(g, FG_F32, 2, DIMS(2, 3));
  xs[1] = xs[0];
  fg_concat(g, xs, 2, -3);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "axis -3 is out of range");
  fg_graph_free(g);
}

FG_TEST(concat_input_mismatches, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output xs[2] = {ph(g, FG_F32, 2, DIMS(2, 3)), ph(g, FG_F32, 2, DIMS(4, 3))};
  fg_concat(g, xs, 2, 1);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 1 shape [4,3]", "input 0 shape [2,3]", "dim 0 (4 vs 2)");
  fg_graph_free(g);

  g = fg_graph_new();
  xs[0] = ph(g, FG_F32, 2, DIMS(2, 3));
  xs[1] = ph(g, FG_I32, 2, DIMS(2, 3));
  fg_concat(g, xs, 2, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 1 dtype i32 does not match input 0 dtype f32");
  fg_graph_free(g);

  g = fg_graph_new();
  xs[0] = ph(g, FG_F32, 2, DIMS(2, 3));
  xs[1] = ph(g, FG_F32, 1, DIMS(3));
  fg_concat(g, xs, 2, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 1 shape [3] has rank 1");
  fg_graph_free(g);
}

/* ---- slice -------------------------------------------------------------- */

FG_TEST(slice_shapes, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(4, 5));
  EXPECT_TINFO(g, fg_slice(g, x, 2, DIMS(1, 2), DIMS(2, -1)), FG_F32, 2, 2, 3);
  EXPECT_TINFO(g, fg_slice(g, x, 2, DIMS(0, 0), DIMS(-1, -1)), FG_F32, 2, 4, 5);
  EXPECT_TINFO(g, fg_slice(g, x, 2, DIMS(4, 5), DIMS(0, -1)), FG_F32, 2, 0, 0);
  fg_output u = ph(g, FG_F32, 2, DIMS(U, 5));
  EXPECT_TINFO(g, fg_slice(g, u, 2, DIMS(0, 1), DIMS(-1, 2)), FG_F32, 2, U, 2);
  EXPECT_TINFO(g, fg_slice(g, u, 2, DIMS(3, 1), DIMS(2, -1)), FG_F32, 2, 2, 4);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(slice_out_of_bounds, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(4, 5));
  fg_slice(g, x, 2, DIMS(1, 2), DIMS(2, 4));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(slice)", "begin[1] + size[1] = 2 + 4", "[4,5]");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(4, 5));
  fg_slice(g, x, 2, DIMS(5, 0), DIMS(-1, -1));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "begin[0] = 5 is past the end");
  fg_graph_free(g);
}

FG_TEST(slice_negative_and_length, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(4, 5));
  fg_slice(g, x, 2, DIMS(-1, 0), DIMS(1, 1));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "begin[0] = -1 is negative");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(4, 5));
  fg_slice(g, x, 2, DIMS(0, 0), DIMS(1, -2));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "size[1] = -2 is negative");
  fg_graph_free(g);

  g = fg_graph_new();
  x = ph(g, FG_F32, 2, DIMS(4, 5));
  fg_slice(g, x, 1, DIMS(0), DIMS(1));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "begin has 1 entries", "[4,5] has rank 2");
  fg_graph_free(g);
}

/* ---- gather and one_hot ------------------------------------------------- */

FG_TEST(gather_shapes, "") {
  fg_graph *g = fg_graph_new();
  fg_output p = ph(g, FG_F32, 2, DIMS(10, 4));
  EXPECT_TINFO(g, fg_gather(g, p, ph(g, FG_I32, 2, DIMS(2, 3))), FG_F32, 3, 2, 3, 4);
  EXPECT_TINFO(g, fg_gather(g, p, ph(g, FG_I64, 0, NULL)), FG_F32, 1, 4);
  EXPECT_TINFO(g, fg_gather(g, ph(g, FG_BOOL, 1, DIMS(7)), ph(g, FG_I64, 1, DIMS(U))), FG_BOOL, 1,
               U);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(gather_errors, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_gather(g, ph(g, FG_F32, 2, DIMS(10, 4)), ph(g, FG_F32, 1, DIMS(2)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(gather)", "input 1 (indices) dtype f32", "i32 or i64");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_gather(g, ph(g, FG_F32, 0, NULL), ph(g, FG_I32, 1, DIMS(2)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 0 (params) shape [] is a scalar");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_gather(g, ph(g, FG_F32, 5, DIMS(2, 1, 1, 1, 1)), ph(g, FG_I32, 5, DIMS(1, 1, 1, 1, 1)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "output rank 9", "maximum 8");
  fg_graph_free(g);
}

FG_TEST(one_hot_shapes, "") {
  fg_graph *g = fg_graph_new();
  EXPECT_TINFO(g, fg_one_hot(g, ph(g, FG_I64, 1, DIMS(5)), 10, FG_F32), FG_F32, 2, 5, 10);
  EXPECT_TINFO(g, fg_one_hot(g, ph(g, FG_I32, 2, DIMS(U, 3)), 1, FG_I32), FG_I32, 3, U, 3, 1);
  EXPECT_TINFO(g, fg_one_hot(g, ph(g, FG_I32, 0, NULL), 4, FG_F64), FG_F64, 1, 4);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(one_hot_bad_depth_and_dtype, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_one_hot(g, ph(g, FG_I64, 1, DIMS(5)), 0, FG_F32);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(one_hot)", "depth 0 must be >= 1");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_one_hot(g, ph(g, FG_I64, 1, DIMS(5)), -3, FG_F32);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "depth -3 must be >= 1");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_one_hot(g, ph(g, FG_I64, 1, DIMS(5)), 3, FG_BOOL);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "dtype bool is not allowed");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_one_hot(g, ph(g, FG_F32, 1, DIMS(5)), 3, FG_F32);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 0 (indices) dtype f32");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_one_hot(g, ph(g, FG_I32, 1, DIMS(1LL << 40)), 1LL << 40, FG_F64);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "overflows 64-bit byte size");
  fg_graph_free(g);
}

/* ---- reductions --------------------------------------------------------- */

FG_TEST(reduce_shapes, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 3, DIMS(2, 3, 4));
  EXPECT_SCALAR(g, fg_reduce_sum(g, x, NULL, 0, 0), FG_F32);
  EXPECT_TINFO(g, fg_reduce_sum(g, x, NULL, 0, 1), FG_F32, 3, 1, 1, 1);
  EXPECT_TINFO(g, fg_reduce_mean(g, x, DIMS(1), 1, 0), FG_F32, 2, 2, 4);
  EXPECT_TINFO(g, fg_reduce_max(g, x, DIMS(-1, 0), 2, 0), FG_F32, 1, 3);
  EXPECT_TINFO(g, fg_reduce_max(g, x, DIMS(-1, 0), 2, 1), FG_F32, 3, 1, 3, 1);
  EXPECT_TINFO(g, fg_reduce_sum(g, ph(g, FG_I64, 2, DIMS(U, 5)), DIMS(1), 1, 0), FG_I64, 1, U);
  EXPECT_SCALAR(g, fg_reduce_sum(g, ph(g, FG_F64, 0, NULL), NULL, 0, 0), FG_F64);
  fg_output r = fg_reduce_sum(g, x, NULL, 0, 0);
  FG_CHECK_INT(fg_node_attr_type(g, r.node, "axes"), 0); /* absent means all */
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(reduce_bad_axes, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_reduce_sum(g, ph(g, FG_F32, 3, DIMS(2, 3, 4)), DIMS(3), 1, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(reduce_sum)", "axes[0] = 3 is out of range [-3, 3)", "[2,3,4]");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_reduce_mean(g, ph(g, FG_F32, 3, DIMS(2, 3, 4)), DIMS(1, -2), 2, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(reduce_mean)", "axes [1,-2] name dim 1 twice");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_reduce_max(g, ph(g, FG_BOOL, 1, DIMS(3)), NULL, 0, 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(reduce_max)", "bool");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 1, DIMS(3));
  fg_attrs *a = fg_attrs_new();
  fg_attrs_set_int(a, "keepdims", 2);
  fg_op(g, "reduce_sum", "rs", &x, 1, a);
  fg_attrs_free(a);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "node 'rs' (reduce_sum)", "'keepdims' = 2");
  fg_graph_free(g);
}

FG_TEST(argmax_shape_and_axis, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 3, DIMS(U, 3, 4));
  EXPECT_TINFO(g, fg_argmax(g, x, 1), FG_I64, 2, U, 4);
  EXPECT_TINFO(g, fg_argmax(g, x, -1), FG_I64, 2, U, 3);
  EXPECT_SCALAR(g, fg_argmax(g, ph(g, FG_I32, 1, DIMS(9)), 0), FG_I64);
  EXPECT_OK(g);
  fg_argmax(g, x, 3);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(argmax)", "axis 3 is out of range [-3, 3)");
  fg_graph_free(g);
}

/* ---- softmax family ----------------------------------------------------- */

FG_TEST(softmax_shapes_and_errors, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F64, 2, DIMS(U, 10));
  EXPECT_TINFO(g, fg_softmax(g, x, 1), FG_F64, 2, U, 10);
  EXPECT_TINFO(g, fg_log_softmax(g, x, 0), FG_F64, 2, U, 10);
  EXPECT_OK(g);
  fg_softmax(g, x, 2);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(softmax)", "axis 2 is out of range [-2, 2)");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_log_softmax(g, ph(g, FG_I32, 1, DIMS(3)), 0);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(log_softmax)", "i32", "f32 or f64");
  fg_graph_free(g);
}

FG_TEST(softmax_cross_entropy_shapes, "") {
  fg_graph *g = fg_graph_new();
  fg_output l = ph(g, FG_F32, 2, DIMS(8, 10));
  EXPECT_SCALAR(g, fg_softmax_cross_entropy(g, l, ph(g, FG_I32, 1, DIMS(8))), FG_F32);
  EXPECT_SCALAR(
      g, fg_softmax_cross_entropy(g, ph(g, FG_F64, 2, DIMS(U, 3)), ph(g, FG_I64, 1, DIMS(5))),
      FG_F64);
  EXPECT_OK(g);
  fg_graph_free(g);
}

FG_TEST(softmax_cross_entropy_errors, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_softmax_cross_entropy(g, ph(g, FG_F32, 2, DIMS(8, 10)), ph(g, FG_I32, 1, DIMS(4)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(softmax_cross_entropy)", "[8,10]", "[4]", "8 vs 4");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_softmax_cross_entropy(g, ph(g, FG_F32, 2, DIMS(8, 10)), ph(g, FG_F32, 1, DIMS(8)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 1 (labels) dtype f32");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_softmax_cross_entropy(g, ph(g, FG_F32, 3, DIMS(2, 8, 10)), ph(g, FG_I32, 1, DIMS(8)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 0 (logits) shape [2,8,10] has rank 3");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_softmax_cross_entropy(g, ph(g, FG_F32, 2, DIMS(8, 10)), ph(g, FG_I32, 2, DIMS(8, 1)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 1 (labels) shape [8,1] has rank 2");
  fg_graph_free(g);
}

/* ---- assign ------------------------------------------------------------- */

FG_TEST(assign_shapes_and_errors, "badinput") {
  fg_graph *g = fg_graph_new();
  fg_tensor *t = zeros(FG_F32, 2, DIMS(3, 2));
  FG_REQUIRE(t);
  fg_output v = fg_variable(g, "v", t);
  fg_tensor_free(t);
  EXPECT_TINFO(g, fg_assign(g, v, ph(g, FG_F32, 2, DIMS(3, 2))), FG_F32, 2, 3, 2);
  EXPECT_OK(g);
  fg_assign(g, v, ph(g, FG_F32, 2, DIMS(2, 3)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(assign)", "input 1 (value) shape [2,3]",
             "input 0 (variable) shape [3,2]");
  fg_graph_free(g);

  g = fg_graph_new();
  t = zeros(FG_F32, 1, DIMS(3));
  v = fg_variable(g, "v", t);
  fg_tensor_free(t);
  fg_assign(g, v, ph(g, FG_F64, 1, DIMS(3)));
  EXPECT_ERR(g, FG_INVALID_GRAPH, "input 1 dtype f64 does not match input 0 dtype f32");
  fg_graph_free(g);

  g = fg_graph_new();
  fg_output p = ph(g, FG_F32, 1, DIMS(3));
  fg_assign(g, p, p);
  EXPECT_ERR(g, FG_INVALID_GRAPH, "(assign)", "variable");
  fg_graph_free(g);
}

/* ---- run-time re-inference with fed (concrete) shapes ------------------- */

FG_TEST(reinfer_with_concrete_shapes, "") {
  fg_graph *g = fg_graph_new();
  fg_output x = ph(g, FG_F32, 2, DIMS(U, 6));
  fg_output r = fg_reshape(g, x, 2, DIMS(-1, 3));
  fg_output s = fg_slice(g, x, 2, DIMS(2, 0), DIMS(-1, 6));
  EXPECT_TINFO(g, r, FG_F32, 2, U, 3);
  EXPECT_OK(g);
  fg_status *st = fg_status_new();
  fg_tinfo in = {FG_F32, 2, {4, 6}}, out;
  FG_REQUIRE(fg_infer(fg_graph_node(g, r.node), &in, &out, st) == 0);
  FG_CHECK_INT(out.rank, 2);
  FG_CHECK_INT(out.dims[0], 8); /* 24 elements / 3 */
  FG_CHECK_INT(out.dims[1], 3);
  FG_REQUIRE(fg_infer(fg_graph_node(g, s.node), &in, &out, st) == 0);
  FG_CHECK_INT(out.dims[0], 2);
  /* A feed too short for the slice is caught at run time. */
  fg_tinfo small = {FG_F32, 2, {1, 6}};
  FG_CHECK_INT(fg_infer(fg_graph_node(g, s.node), &small, &out, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_GRAPH);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "begin[0] = 2 is past the end");
  fg_tinfo odd = {FG_F32, 2, {1, 5}};
  FG_CHECK_INT(fg_infer(fg_graph_node(g, r.node), &odd, &out, st), -1);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "not a multiple of 3");
  fg_status_free(st);
  fg_graph_free(g);
}
