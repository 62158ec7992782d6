/* The ONNX shape and tensor op mappers (schema/onnx/onnx_map_tensor*.c):
 * each case of tests/schema/onnx/cases_tensor.py imported, run and compared
 * with NumPy's answer written from the ONNX operator documentation. These
 * ops move elements without arithmetic, so the comparison is exact. Cases
 * ending in "_k" have their data as an initializer: the importer folds the
 * op at import, and the output must be the same. dyn_* cases have a
 * symbolic batch dimension and run at two batch sizes. ScatterND is only
 * folded (flowgraph has no scatter op): its cases are all "_k". The
 * torch_* cases are models PyTorch exported, against its own output. */
#include "fgtest.h"
#include "flowgraph/onnx.h"
#include "onnx_test_util.h"

#define SCRIPT "cases_tensor.py"

/* Every case that must import and match. */
#define TENSOR_CASES(X)                                                                            \
  X(concat_1)                                                                                      \
  X(concat_1_k)                                                                                    \
  X(concat_empty_k)                                                                                \
  X(concat_m1)                                                                                     \
  X(concat_m1_k)                                                                                   \
  X(concat_mixed)                                                                                  \
  X(dyn_concat_b2)                                                                                 \
  X(dyn_concat_b3)                                                                                 \
  X(dyn_expand_b2)                                                                                 \
  X(dyn_expand_b3)                                                                                 \
  X(dyn_flatten_b1)                                                                                \
  X(dyn_flatten_b3)                                                                                \
  X(dyn_flatten_op_b2)                                                                             \
  X(dyn_flatten_op_b3)                                                                             \
  X(dyn_gather_axis1_b2)                                                                           \
  X(dyn_gather_axis1_b3)                                                                           \
  X(dyn_one_hot_b2)                                                                                \
  X(dyn_one_hot_b3)                                                                                \
  X(dyn_pad_crop_b2)                                                                               \
  X(dyn_pad_crop_b3)                                                                               \
  X(dyn_reshape_b2)                                                                                \
  X(dyn_reshape_b5)                                                                                \
  X(dyn_shape_merged_batch_b2)                                                                     \
  X(dyn_shape_merged_batch_b3)                                                                     \
  X(init_used_then_read)                                                                           \
  X(dyn_slice_step_b2)                                                                             \
  X(dyn_slice_step_b3)                                                                             \
  X(dyn_split_axis1_b2)                                                                            \
  X(dyn_split_axis1_b3)                                                                            \
  X(dyn_squeeze_b2)                                                                                \
  X(dyn_squeeze_b3)                                                                                \
  X(dyn_tile_b2)                                                                                   \
  X(dyn_tile_b3)                                                                                   \
  X(dyn_transpose_b2)                                                                              \
  X(dyn_transpose_b3)                                                                              \
  X(dyn_unsqueeze_b2)                                                                              \
  X(dyn_unsqueeze_b3)                                                                              \
  X(expand_basic)                                                                                  \
  X(expand_basic_k)                                                                                \
  X(expand_keep)                                                                                   \
  X(expand_keep_k)                                                                                 \
  X(expand_ones)                                                                                   \
  X(expand_ones_k)                                                                                 \
  X(expand_rank_up)                                                                                \
  X(expand_rank_up_k)                                                                              \
  X(flatten_0)                                                                                     \
  X(flatten_0_k)                                                                                   \
  X(flatten_1)                                                                                     \
  X(flatten_1_k)                                                                                   \
  X(flatten_3)                                                                                     \
  X(flatten_3_k)                                                                                   \
  X(flatten_4)                                                                                     \
  X(flatten_4_k)                                                                                   \
  X(flatten_default)                                                                               \
  X(flatten_default_k)                                                                             \
  X(flatten_m1)                                                                                    \
  X(flatten_m1_k)                                                                                  \
  X(flatten_m3)                                                                                    \
  X(flatten_m3_k)                                                                                  \
  X(gather_axis0)                                                                                  \
  X(gather_axis0_k)                                                                                \
  X(gather_axis1)                                                                                  \
  X(gather_axis1_k)                                                                                \
  X(gather_neg_axis)                                                                               \
  X(gather_neg_axis_k)                                                                             \
  X(gather_neg_idx)                                                                                \
  X(gather_neg_idx_k)                                                                              \
  X(gather_runtime_i32)                                                                            \
  X(gather_runtime_idx)                                                                            \
  X(gather_run)                                                                                    \
  X(gather_run_k)                                                                                  \
  X(gather_run_neg)                                                                                \
  X(gather_run_neg_k)                                                                              \
  X(dyn_gather_token_b2)                                                                           \
  X(dyn_gather_token_b3)                                                                           \
  X(gather_scalar)                                                                                 \
  X(gather_scalar_axis2)                                                                           \
  X(gather_scalar_axis2_k)                                                                         \
  X(gather_scalar_k)                                                                               \
  X(one_hot_0)                                                                                     \
  X(one_hot_1)                                                                                     \
  X(one_hot_float_idx)                                                                             \
  X(one_hot_m1)                                                                                    \
  X(pad_attr)                                                                                      \
  X(pad_attr_k)                                                                                    \
  X(pad_constant)                                                                                  \
  X(pad_constant_k)                                                                                \
  X(pad_default)                                                                                   \
  X(pad_default_k)                                                                                 \
  X(pad_edge)                                                                                      \
  X(pad_edge_k)                                                                                    \
  X(pad_negative)                                                                                  \
  X(pad_negative_k)                                                                                \
  X(pad_reflect)                                                                                   \
  X(pad_reflect_k)                                                                                 \
  X(reshape)                                                                                       \
  X(reshape_allowzero)                                                                             \
  X(reshape_allowzero0)                                                                            \
  X(reshape_allowzero0_k)                                                                          \
  X(reshape_allowzero_k)                                                                           \
  X(reshape_k)                                                                                     \
  X(reshape_neg)                                                                                   \
  X(reshape_neg_k)                                                                                 \
  X(reshape_zero)                                                                                  \
  X(reshape_zero_k)                                                                                \
  X(reshape_zero_mid)                                                                              \
  X(reshape_zero_mid_k)                                                                            \
  X(slice_attr)                                                                                    \
  X(slice_attr_k)                                                                                  \
  X(slice_basic)                                                                                   \
  X(slice_basic_k)                                                                                 \
  X(slice_clamp)                                                                                   \
  X(slice_clamp_k)                                                                                 \
  X(slice_empty)                                                                                   \
  X(slice_empty_k)                                                                                 \
  X(slice_neg)                                                                                     \
  X(slice_neg_k)                                                                                   \
  X(slice_rev)                                                                                     \
  X(slice_rev_k)                                                                                   \
  X(slice_rev_step)                                                                                \
  X(slice_rev_step_k)                                                                              \
  X(slice_step2)                                                                                   \
  X(slice_step2_k)                                                                                 \
  X(split_attr)                                                                                    \
  X(split_attr_k)                                                                                  \
  X(split_equal)                                                                                   \
  X(split_equal_k)                                                                                 \
  X(split_input)                                                                                   \
  X(split_input_k)                                                                                 \
  X(split_neg_axis)                                                                                \
  X(split_neg_axis_k)                                                                              \
  X(squeeze_all)                                                                                   \
  X(squeeze_all_k)                                                                                 \
  X(squeeze_attr)                                                                                  \
  X(squeeze_attr_k)                                                                                \
  X(squeeze_input)                                                                                 \
  X(squeeze_input_k)                                                                               \
  X(scatter_nd_slices_k)                                                                           \
  X(scatter_nd_elems_k)                                                                            \
  X(scatter_nd_k2_k)                                                                               \
  X(scatter_nd_mask_k)                                                                             \
  X(scatter_nd_add_k)                                                                              \
  X(scatter_nd_mul_k)                                                                              \
  X(scatter_nd_feeds_add)                                                                          \
  X(tile)                                                                                          \
  X(tile_k)                                                                                        \
  X(tile_zero)                                                                                     \
  X(tile_zero_k)                                                                                   \
  X(transpose_default)                                                                             \
  X(transpose_default_k)                                                                           \
  X(transpose_i64)                                                                                 \
  X(transpose_i64_k)                                                                               \
  X(transpose_perm)                                                                                \
  X(transpose_perm_k)                                                                              \
  X(unsqueeze_attr)                                                                                \
  X(unsqueeze_attr_k)                                                                              \
  X(unsqueeze_input)                                                                               \
  X(unsqueeze_input_k)                                                                             \
  X(unsqueeze_scalar)                                                                              \
  X(unsqueeze_scalar_k)                                                                            \
  X(depth_to_space_dcr)                                                                            \
  X(depth_to_space_dcr_k)                                                                          \
  X(depth_to_space_opset9)                                                                         \
  X(depth_to_space_opset9_k)                                                                       \
  X(depth_to_space_crd)                                                                            \
  X(depth_to_space_crd_k)                                                                          \
  X(space_to_depth)                                                                                \
  X(space_to_depth_k)                                                                              \
  X(space_to_depth_b1)                                                                             \
  X(space_to_depth_b1_k)                                                                           \
  X(trilu_upper)                                                                                   \
  X(trilu_upper_k)                                                                                 \
  X(trilu_lower_k_m1)                                                                              \
  X(trilu_lower_k_m1_k)                                                                            \
  X(trilu_upper_k2)                                                                                \
  X(trilu_upper_k2_k)                                                                              \
  X(trilu_upper_k_past)                                                                            \
  X(trilu_upper_k_past_k)                                                                          \
  X(trilu_lower_k_low)                                                                             \
  X(trilu_lower_k_low_k)                                                                           \
  X(trilu_int64_lower_k1)                                                                          \
  X(trilu_int64_lower_k1_k)                                                                        \
  X(trilu_empty_tall)                                                                              \
  X(trilu_empty_tall_k)                                                                            \
  X(space_depth_round_trip)                                                                        \
  X(dyn_depth_to_space_b2)                                                                         \
  X(dyn_depth_to_space_b3)                                                                         \
  X(dyn_space_to_depth_b2)                                                                         \
  X(dyn_space_to_depth_b3)                                                                         \
  X(dyn_trilu_b2)                                                                                  \
  X(dyn_trilu_b3)

/* Models that must be refused: the name, the code, a piece of the message. */
#define TENSOR_BAD(X)                                                                              \
  X(bad_concat_no_axis, FG_INVALID_GRAPH, "axis is required")                                      \
  X(bad_depth_to_space_rank, FG_INVALID_GRAPH,                                                     \
    "input 0 shape [8, 2, 2] has rank 3; it must be [N, C, H, W]")                                 \
  X(bad_depth_to_space_channels, FG_INVALID_GRAPH,                                                 \
    "channels 6 are not a multiple of blocksize^2 = 4")                                            \
  X(bad_depth_to_space_mode, FG_INVALID_GRAPH, "attribute mode = 'DRC' must be 'DCR' or 'CRD'")    \
  X(bad_depth_to_space_no_block, FG_INVALID_GRAPH, "attribute blocksize is required")              \
  X(bad_space_to_depth_block0, FG_INVALID_GRAPH,                                                   \
    "attribute blocksize = 0 is outside [1, 1048576]")                                             \
  X(bad_space_to_depth_width, FG_INVALID_GRAPH,                                                    \
    "H = 4 and W = 5 must be multiples of blocksize = 2")                                          \
  X(bad_depth_to_space_zero_open_batch, FG_UNIMPLEMENTED,                                          \
    "input 0 shape [?, 0, 2, 2] has a zero dim beside the open batch")                             \
  X(bad_space_to_depth_zero_open_batch, FG_UNIMPLEMENTED,                                          \
    "input 0 shape [?, 2, 0, 4] has a zero dim beside the open batch")                             \
  X(bad_trilu_rank, FG_INVALID_GRAPH, "input 0 shape [5] has rank 1; Trilu needs rank >= 2")       \
  X(bad_trilu_upper, FG_INVALID_GRAPH, "attribute upper = 2 must be 0 or 1")                       \
  X(bad_trilu_k_runtime, FG_UNIMPLEMENTED, "input 1 'k' must be known at import")                  \
  X(bad_trilu_k_two, FG_INVALID_GRAPH, "input 1 (k) has 2 entries; it needs one")                  \
  X(bad_expand, FG_INVALID_GRAPH, "does not broadcast")                                            \
  X(bad_expand_to_batch, FG_UNIMPLEMENTED, "to the batch size")                                    \
  X(bad_reshape_two_batch, FG_UNIMPLEMENTED, "two entries that depend on the batch size")          \
  X(bad_shape_batch_plus_rows, FG_UNIMPLEMENTED,                                                   \
    "dim 0 of input 0 ('m') is 4 at batch 2 and 6 at batch 4: not a multiple of the batch")        \
  X(bad_slice_batch_from_end, FG_UNIMPLEMENTED, "depends on the batch size")                       \
  X(bad_gather_axis, FG_INVALID_GRAPH, "axis")                                                     \
  X(bad_gather_index, FG_INVALID_GRAPH, "out of range")                                            \
  X(bad_pad_mode, FG_INVALID_GRAPH, "mode 'wrap'")                                                 \
  X(bad_reshape_count, FG_INVALID_GRAPH, "cannot reshape")                                         \
  X(bad_reshape_runtime_shape, FG_UNIMPLEMENTED, "computed at run time")                           \
  X(bad_reshape_two_neg, FG_INVALID_GRAPH, "two -1")                                               \
  X(bad_slice_step0, FG_INVALID_GRAPH, "steps[0] is 0")                                            \
  X(bad_split_sizes, FG_INVALID_GRAPH, "add up to 2")                                              \
  X(bad_squeeze_axis, FG_INVALID_GRAPH, "axes")                                                    \
  X(bad_squeeze_not_one, FG_INVALID_GRAPH, "not 1")                                                \
  X(bad_tile_repeats, FG_INVALID_GRAPH, "repeats")                                                 \
  X(bad_transpose_perm, FG_INVALID_GRAPH, "not a permutation")                                     \
  X(bad_pad_huge, FG_INVALID_GRAPH, "out of range")                                                \
  X(bad_tile_overflow, FG_INVALID_GRAPH, "overflows")                                              \
  X(bad_split_overflow, FG_INVALID_GRAPH, "past 2^63")                                             \
  X(bad_slice_step_min, FG_INVALID_GRAPH, "steps[0] is -9223372036854775808")                      \
  X(bad_one_hot_depth, FG_UNIMPLEMENTED, "flowgraph takes up to")                                  \
  X(bad_unsqueeze_twice, FG_INVALID_GRAPH, "twice")                                                \
  X(bad_scatter_nd_runtime, FG_UNIMPLEMENTED, "input 0 'd' (data) must be known at import")        \
  X(bad_scatter_nd_index, FG_INVALID_GRAPH, "tuple 1 has 3 at position 0, outside [-3, 3)")        \
  X(bad_scatter_nd_updates, FG_INVALID_GRAPH, "updates [2, 3] must be")                            \
  X(bad_scatter_nd_reduction, FG_INVALID_GRAPH, "'reduction' is 'xor'")

static const char *cases_dir(void) {
  if (!fg_onnx_available()) return NULL;
  return onnx_cases(SCRIPT);
}

#define CHECK_CASE(name)                                                                           \
  FG_TEST(onnx_tensor_##name, "onnx") {                                                            \
    if (!fg_onnx_available()) FG_SKIP("built without ONNX");                                       \
    const char *dir = cases_dir();                                                                 \
    FG_REQUIRE(dir != NULL);                                                                       \
    onnx_check_case(dir, #name, NULL, 0, 0);                                                       \
  }
TENSOR_CASES(CHECK_CASE)

#define CHECK_BAD(name, code, needle)                                                              \
  FG_TEST(onnx_tensor_##name, "onnx badinput") {                                                   \
    if (!fg_onnx_available()) FG_SKIP("built without ONNX");                                       \
    const char *dir = cases_dir();                                                                 \
    FG_REQUIRE(dir != NULL);                                                                       \
    onnx_expect_error(dir, #name, code, needle);                                                   \
  }
TENSOR_BAD(CHECK_BAD)

/* What PyTorch exports as DepthToSpace (pixel_shuffle: mode CRD) and
 * Trilu (triu and tril of run-time tensors), against PyTorch's output
 * (tests/schema/onnx/torch_blocks.py): an ESPCN super-resolution net at
 * opsets 13 and 17 and with an open batch fed 1 and 3 images, and a causal
 * score mask. The convolutions' sums are ordered differently: 1e-5. */
#define TORCH_BLOCK_CASES(X)                                                                       \
  X(espcn_op13)                                                                                    \
  X(espcn_op17)                                                                                    \
  X(espcn_dyn)                                                                                     \
  X(espcn_dyn_b3)                                                                                  \
  X(causal_op14)

#define CHECK_TORCH(name)                                                                          \
  FG_TEST(onnx_tensor_torch_##name, "onnx") {                                                      \
    if (!fg_onnx_available()) FG_SKIP("built without ONNX");                                       \
    const char *dir = onnx_cases("torch_blocks.py");                                               \
    FG_REQUIRE(dir != NULL);                                                                       \
    onnx_check_case(dir, #name, NULL, 1e-5, 1e-5);                                                 \
  }
TORCH_BLOCK_CASES(CHECK_TORCH)
