/* ONNX element-wise, logic and reduction ops (schema/onnx/onnx_map_math.c)
 * against NumPy: the models and expected values are made by
 * tests/schema/onnx/cases_math.py from the ONNX operator documentation,
 * one ctest case per model. Also the folding of integer values known at
 * import (a Shape's arithmetic becomes constants, batch-dependent entries
 * cancel where they can) and the models the importer must refuse, each
 * naming the node and the value at fault. */
#include <string.h>

#include "flowgraph/flowgraph.h"
#include "onnx_test_util.h"

#define SCRIPT "cases_math.py"

/* f32 cases: the references are NumPy's f32 (or f64 rounded) results, so
 * a few ulp apart from flowgraph's kernels and libm; f64 and integer
 * outputs compare within the same bound (integers and bools exactly). */
#define RTOL 2e-6
#define ATOL 1e-6

/* X(case): models whose outputs must match NumPy. */
#define MATH_CASES(X)                                                                              \
  X(add_f32_same)                                                                                  \
  X(add_f32_scalar)                                                                                \
  X(add_f32_row)                                                                                   \
  X(add_f32_col)                                                                                   \
  X(add_f32_rank)                                                                                  \
  X(add_f32_scalar_left)                                                                           \
  X(add_i32_row)                                                                                   \
  X(add_i64_row)                                                                                   \
  X(add_f64_row)                                                                                   \
  X(add_opset7)                                                                                    \
  X(sub_f32_same)                                                                                  \
  X(sub_f32_scalar)                                                                                \
  X(sub_f32_row)                                                                                   \
  X(sub_f32_col)                                                                                   \
  X(sub_f32_rank)                                                                                  \
  X(sub_f32_scalar_left)                                                                           \
  X(sub_i32_row)                                                                                   \
  X(sub_i64_row)                                                                                   \
  X(sub_f64_row)                                                                                   \
  X(mul_f32_same)                                                                                  \
  X(mul_f32_scalar)                                                                                \
  X(mul_f32_row)                                                                                   \
  X(mul_f32_col)                                                                                   \
  X(mul_f32_rank)                                                                                  \
  X(mul_f32_scalar_left)                                                                           \
  X(mul_i32_row)                                                                                   \
  X(mul_i64_row)                                                                                   \
  X(mul_f64_row)                                                                                   \
  X(div_f32_same)                                                                                  \
  X(div_f32_scalar)                                                                                \
  X(div_f32_row)                                                                                   \
  X(div_f32_col)                                                                                   \
  X(div_f32_rank)                                                                                  \
  X(div_f32_scalar_left)                                                                           \
  X(div_i32_trunc)                                                                                 \
  X(div_i64_trunc)                                                                                 \
  X(pow_f32_row)                                                                                   \
  X(pow_f32_i64_exponent)                                                                          \
  X(pow_i64_base)                                                                                  \
  X(pow_i32_f32_exponent)                                                                          \
  X(pow_f64_f32_exponent)                                                                          \
  X(pow_square)                                                                                    \
  X(pow_square_i64_exponent)                                                                       \
  X(sqrt_f32)                                                                                      \
  X(sqrt_f64)                                                                                      \
  X(reciprocal_f32)                                                                                \
  X(exp_f32)                                                                                       \
  X(log_f32)                                                                                       \
  X(abs_f32)                                                                                       \
  X(abs_i64)                                                                                       \
  X(neg_f32)                                                                                       \
  X(neg_i32)                                                                                       \
  X(floor_f32)                                                                                     \
  X(ceil_f32)                                                                                      \
  X(sign_f32)                                                                                      \
  X(sign_i32)                                                                                      \
  X(round_f32)                                                                                     \
  X(clip_attr_both)                                                                                \
  X(clip_attr_min)                                                                                 \
  X(clip_attr_max)                                                                                 \
  X(clip_attr_none)                                                                                \
  X(clip_in_both)                                                                                  \
  X(clip_in_max)                                                                                   \
  X(clip_in_min)                                                                                   \
  X(clip_in_none)                                                                                  \
  X(clip_min_above_max)                                                                            \
  X(clip_in_runtime)                                                                               \
  X(clip_i32)                                                                                      \
  X(clip_i64_min)                                                                                  \
  X(clip_f64)                                                                                      \
  X(min_3)                                                                                         \
  X(max_3)                                                                                         \
  X(sum_3)                                                                                         \
  X(mean_3)                                                                                        \
  X(max_1)                                                                                         \
  X(sum_1)                                                                                         \
  X(mean_1)                                                                                        \
  X(max_i32)                                                                                       \
  X(min_i64)                                                                                       \
  X(sum_i64_2)                                                                                     \
  X(mean_f64_rank)                                                                                 \
  X(equal_i64_row)                                                                                 \
  X(equal_f32_col)                                                                                 \
  X(equal_bool)                                                                                    \
  X(greater_f32_row)                                                                               \
  X(greater_i32_outer)                                                                             \
  X(less_f32_row)                                                                                  \
  X(less_i32_outer)                                                                                \
  X(greater_or_equal)                                                                              \
  X(less_or_equal)                                                                                 \
  X(greater_or_equal_i64)                                                                          \
  X(not_2d)                                                                                        \
  X(and_row)                                                                                       \
  X(or_col)                                                                                        \
  X(xor_row)                                                                                       \
  X(and_scalar)                                                                                    \
  X(where_f32)                                                                                     \
  X(where_i64)                                                                                     \
  X(where_f64)                                                                                     \
  REDUCE_CASES(X, reducesum)                                                                       \
  REDUCE_CASES(X, reducemean)                                                                      \
  REDUCE_CASES(X, reducemax)                                                                       \
  REDUCE_CASES(X, reducemin)                                                                       \
  REDUCE_CASES(X, reduceprod)                                                                      \
  REDUCE_CASES(X, reducel1)                                                                        \
  REDUCE_CASES(X, reducel2)                                                                        \
  REDUCE_CASES(X, reducesumsquare)                                                                 \
  REDUCE_CASES(X, reducelogsum)                                                                    \
  REDUCE_CASES(X, reducelogsumexp)                                                                 \
  X(reducemax_opset17)                                                                             \
  X(reducesum_i32)                                                                                 \
  X(reduceprod_i64)                                                                                \
  X(reducemax_i64)                                                                                 \
  X(reducemin_i32)                                                                                 \
  X(reducel2_f64)                                                                                  \
  X(reducemean_f64)                                                                                \
  X(reducesum13_axes)                                                                              \
  X(reducesum13_keep)                                                                              \
  X(reducesum13_none)                                                                              \
  X(reducesum13_empty_all)                                                                         \
  X(reducesum13_noop)                                                                              \
  X(reducesum13_noop_absent)                                                                       \
  X(reducesum13_i64)                                                                               \
  ARG_CASES(X, argmax)                                                                             \
  ARG_CASES(X, argmin)                                                                             \
  X(topk_default)                                                                                  \
  X(topk_smallest_ax1)                                                                             \
  X(topk_neg_axis_unsorted)                                                                        \
  X(topk_opset10_ax0)                                                                              \
  X(topk_k0)                                                                                       \
  X(topk_opset9_attr)                                                                              \
  X(topk_i64)                                                                                      \
  X(cumsum_axis1)                                                                                  \
  X(cumsum_excl_rev)                                                                               \
  X(cumsum_i32_excl)                                                                               \
  X(fold_known)                                                                                    \
  X(mod_known_int64_f0)                                                                            \
  X(mod_known_int32_f0)                                                                            \
  X(mod_known_int64_f1)                                                                            \
  X(mod_known_int32_f1)                                                                            \
  X(mod_known_feeds_add)                                                                           \
  X(mod_fold_batch)                                                                                \
  X(mod_fold_batch_b5)                                                                             \
  X(fold_batch)                                                                                    \
  X(fold_batch_b5)                                                                                 \
  X(fold_reshape)                                                                                  \
  X(fold_reshape_b5)                                                                               \
  X(fold_reduce)                                                                                   \
  X(fold_reduce_b5)                                                                                \
  X(reducemean_i32)                                                                                \
  X(reducel2_i32)                                                                                  \
  X(reducemean_batch)                                                                              \
  X(reducemean_batch_b5)                                                                           \
  X(mul_batch_row)                                                                                 \
  X(mul_batch_row_b5)

/* Every reduction with default axes (all), one axis with keepdims 1, a
 * negative axis with keepdims 0, two axes, and two with one negative. */
#define REDUCE_CASES(X, op) X(op##_all) X(op##_ax1) X(op##_neg) X(op##_ax02) X(op##_neg2k)
#define ARG_CASES(X, op)    X(op##_default) X(op##_neg_nokeep) X(op##_ax1_keep) X(op##_i32)

#define DEFINE_CASE(name)                                                                          \
  FG_TEST(onnx_math_##name, "onnx") {                                                              \
    onnx_check_case(onnx_cases(SCRIPT), #name, NULL, RTOL, ATOL);                                  \
  }
MATH_CASES(DEFINE_CASE)
#undef DEFINE_CASE

/* ---- folding: which ops the imported graph holds --------------------------- */

/* Nodes of op `op` in the graph imported from case `name`; -1 when it
 * does not load. */
static int count_ops(const char *dir, const char *name, const char *const *ops, int n_ops) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_onnx_load(path, NULL, st);
  int count = -1;
  if (!g) {
    FG_FAIL_AT("%s: %s", name, fg_status_message(st));
  } else {
    count = 0;
    for (int i = 0; i < fg_graph_num_nodes(g); i++)
      for (int k = 0; k < n_ops; k++)
        count += strcmp(fg_node_op(g, i), ops[k]) == 0;
  }
  fg_graph_free(g);
  fg_status_free(st);
  return count;
}

static const char *const ARITH[] = {"add",     "sub",     "mul",         "div",
                                    "equal",   "greater", "less",        "select",
                                    "minimum", "maximum", "logical_not", "cast"};

/* Shape -> Mul -> Div -> Sub -> Equal -> Where -> Max and Not on a fixed
 * shape: all known at import, so the graph computes none of it. */
FG_TEST(onnx_math_fold_known_leaves_no_ops, "onnx") {
  const char *dir = onnx_cases(SCRIPT);
  if (!dir) return;
  FG_CHECK_INT(count_ops(dir, "fold_known", ARITH, 12), 0);
}

/* The same with a dynamic batch: the batch-dependent entries cancel (B * k
 * / B, B - B, comparisons of B with B or with 0), so again nothing is left
 * to compute, and both batch sizes give the same outputs (the cases
 * fold_batch and fold_batch_b5 above check the values). */
FG_TEST(onnx_math_fold_batch_leaves_no_ops, "onnx") {
  const char *dir = onnx_cases(SCRIPT);
  if (!dir) return;
  FG_CHECK_INT(count_ops(dir, "fold_batch", ARITH, 12), 0);
}

/* Shape -> Gather -> Mul/Div/Add -> Unsqueeze -> Concat -> Reshape on a
 * dynamic batch: the arithmetic folds (B * 4 / 2 carried as a
 * batch-dependent entry), leaving a reshape and no arithmetic; the cases
 * fold_reshape and fold_reshape_b5 check the values at batch 2 and 5. */
FG_TEST(onnx_math_fold_reshape_leaves_no_ops, "onnx") {
  const char *dir = onnx_cases(SCRIPT);
  if (!dir) return;
  FG_CHECK_INT(count_ops(dir, "fold_reshape", ARITH, 12), 0);
  static const char *const shaping[] = {"gather", "concat", "expand_dims", "shape"};
  FG_CHECK_INT(count_ops(dir, "fold_reshape", shaping, 4), 0);
  static const char *const reshape[] = {"reshape"};
  FG_CHECK_INT(count_ops(dir, "fold_reshape", reshape, 1), 1);
}

/* ReduceProd, ReduceMin and ReduceSum of a Shape's entries (12B over B
 * included) fold: no reduction is left in the graph. */
FG_TEST(onnx_math_fold_reduce_leaves_no_ops, "onnx") {
  const char *dir = onnx_cases(SCRIPT);
  if (!dir) return;
  static const char *const red[] = {"reduce_prod", "reduce_min", "reduce_sum", "div"};
  FG_CHECK_INT(count_ops(dir, "fold_reduce", red, 4), 0);
}

/* Clip with known float bounds (ReLU6 as torch exports it) is flowgraph's
 * one clip node; a one-sided bound is a maximum alone. */
FG_TEST(onnx_math_clip_known_bounds_one_node, "onnx") {
  const char *dir = onnx_cases(SCRIPT);
  if (!dir) return;
  static const char *const clip[] = {"clip"}, *const minmax[] = {"maximum", "minimum"};
  FG_CHECK_INT(count_ops(dir, "clip_in_both", clip, 1), 1);
  FG_CHECK_INT(count_ops(dir, "clip_in_both", minmax, 2), 0);
  FG_CHECK_INT(count_ops(dir, "clip_attr_both", clip, 1), 1);
  FG_CHECK_INT(count_ops(dir, "clip_in_min", minmax, 2), 1);
  FG_CHECK_INT(count_ops(dir, "clip_in_min", clip, 1), 0);
}

/* Pow with a known exponent 2 is a mul; other exponents stay pow. */
FG_TEST(onnx_math_pow_square_is_mul, "onnx") {
  const char *dir = onnx_cases(SCRIPT);
  if (!dir) return;
  static const char *const pow[] = {"pow"}, *const mul[] = {"mul"};
  FG_CHECK_INT(count_ops(dir, "pow_square", pow, 1), 0);
  FG_CHECK_INT(count_ops(dir, "pow_square", mul, 1), 1);
  FG_CHECK_INT(count_ops(dir, "pow_square_i64_exponent", mul, 1), 1);
  FG_CHECK_INT(count_ops(dir, "pow_f32_row", pow, 1), 1);
}

/* ---- refused models --------------------------------------------------------- */

/* Loading case `name` fails with `code` and a message holding every
 * needle (NULL-terminated). */
static void expect_error(const char *name, fg_code code, const char *const *needles) {
  const char *dir = onnx_cases(SCRIPT);
  if (!dir) return;
  onnx_expect_error(dir, name, code, needles[0]);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  fg_status *st = fg_status_new();
  fg_graph *g = fg_onnx_load(path, NULL, st);
  FG_CHECK(g == NULL);
  for (int i = 1; needles[i]; i++)
    FG_CHECK_STR_CONTAINS(fg_status_message(st), needles[i]);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(onnx_math_err_reduce_axis_range, "onnx,badinput") {
  const char *n[] = {"'bad_axes'", "ReduceSum", "axes 2 is outside [-2, 2)", NULL};
  expect_error("err_reduce_axis_range", FG_INVALID_GRAPH, n);
}

FG_TEST(onnx_math_err_reduce_axis_twice, "onnx,badinput") {
  const char *n[] = {"'twice'", "axis 1 twice", NULL};
  expect_error("err_reduce_axis_twice", FG_INVALID_GRAPH, n);
}

/* ReduceSum-13's axes fed at run time: flowgraph's reductions need them
 * at import. */
FG_TEST(onnx_math_err_reduce_axes_runtime, "onnx,badinput") {
  const char *n[] = {"'rt_axes'", "input 1 'axes'", "must be known at import", NULL};
  expect_error("err_reduce_axes_runtime", FG_UNIMPLEMENTED, n);
}

FG_TEST(onnx_math_err_reducesum13_axes_attribute, "onnx,badinput") {
  const char *n[] = {"'old_axes'", "attribute 'axes'", "input 1", NULL};
  expect_error("err_reducesum13_attr", FG_INVALID_GRAPH, n);
}

FG_TEST(onnx_math_err_add_shapes, "onnx,badinput") {
  const char *n[] = {"'bad_add'", "input 0 shape [2, 3] and input 1 shape [4] do not broadcast",
                     NULL};
  expect_error("err_add_shapes", FG_INVALID_GRAPH, n);
}

/* Variadic: the third input against the broadcast of the first two. */
FG_TEST(onnx_math_err_sum_shapes, "onnx,badinput") {
  const char *n[] = {"'bad_sum'", "input 2 shape [5, 1, 2]", "[2, 3]", NULL};
  expect_error("err_sum_shapes", FG_INVALID_GRAPH, n);
}

FG_TEST(onnx_math_err_argmax_select_last_index, "onnx,badinput") {
  const char *n[] = {"'last'", "select_last_index' = 1", NULL};
  expect_error("err_argmax_last", FG_UNIMPLEMENTED, n);
}

FG_TEST(onnx_math_err_topk_k, "onnx,badinput") {
  const char *n[] = {"'top9'", "K = 9 is outside [0, 3], the size of axis 1", NULL};
  expect_error("err_topk_k", FG_INVALID_GRAPH, n);
  const char *n2[] = {"'top2k'", "input 1 (K) has 2 entries; it needs one", NULL};
  expect_error("err_topk_k_len", FG_INVALID_GRAPH, n2);
}

FG_TEST(onnx_math_err_cumsum_axis, "onnx,badinput") {
  const char *n[] = {"'cs3'", "axis 2 is outside [-2, 2)", NULL};
  expect_error("err_cumsum_axis", FG_INVALID_GRAPH, n);
}

FG_TEST(onnx_math_err_argmin_axis, "onnx,badinput") {
  const char *n[] = {"'argax'", "axis -3 is outside [-2, 2)", NULL};
  expect_error("err_argmax_axis", FG_INVALID_GRAPH, n);
}

FG_TEST(onnx_math_err_keepdims, "onnx,badinput") {
  const char *n[] = {"'keep2'", "'keepdims' = 2", NULL};
  expect_error("err_keepdims", FG_INVALID_GRAPH, n);
}

FG_TEST(onnx_math_err_div_zero_known, "onnx,badinput") {
  const char *n[] = {"'div0'", "division by zero at output element 1", NULL};
  expect_error("err_div_zero_known", FG_INVALID_GRAPH, n);
}

/* Mod is folded at import or refused: flowgraph has no remainder op. */
FG_TEST(onnx_math_err_mod, "onnx,badinput") {
  static const struct {
    const char *name;
    fg_code code;
    const char *needles[4];
  } bad[] = {
      {"err_mod_runtime",
       FG_UNIMPLEMENTED,
       {"'rt_mod'", "input 0 'a' must be known at import", "no remainder op", NULL}},
      {"err_mod_zero", FG_INVALID_GRAPH, {"'mod0'", "remainder by zero at output element 1", NULL}},
      {"err_mod_float_fmod0", FG_INVALID_GRAPH, {"'fmod0'", "Mod of f32 needs fmod = 1", NULL}},
      {"err_mod_fmod2", FG_INVALID_GRAPH, {"'fmod2'", "attribute 'fmod' is 2", NULL}},
      {"err_mod_bool", FG_INVALID_GRAPH, {"'bmod2'", "Mod is not defined on bool", NULL}},
      {"err_mod_one_input", FG_INVALID_GRAPH, {"'mod1'", "Mod takes 2 inputs, got 1", NULL}},
      {"err_mod_batch", FG_UNIMPLEMENTED, {"'bmod'", "unknown batch size", NULL}},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    expect_error(bad[i].name, bad[i].code, bad[i].needles);
}

/* Shape(x)[0] + 1 with a dynamic batch: B + 1 has no known form and the
 * graph holds no value for B. */
FG_TEST(onnx_math_err_fold_batch_plus_one, "onnx,badinput") {
  const char *n[] = {"'plus_one'", "unknown batch size", NULL};
  expect_error("err_fold_batch_plus_one", FG_UNIMPLEMENTED, n);
}
