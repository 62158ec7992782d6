/* The neural-network op mappers (schema/onnx/onnx_map_nn.c, _conv.c,
 * _pool.c, _norm.c) against ONNX models that tests/schema/onnx/cases_nn.py
 * builds with onnx.helper, with expected values from PyTorch or from NumPy
 * reference code written from the ONNX operator documentation.
 *
 * Tolerances: float32 cases 1e-5 relative plus 1e-5 absolute (sums of up
 * to a few dozen products, ordered differently than PyTorch's or NumPy's,
 * and transcendental functions within a few ulp of each other); float64
 * cases 1e-12 and 1e-12. ln_f64_stash1 computes in float32 as its
 * stash_type says, so it gets the float32 bound.
 *
 * The bad_* cases are models the import must refuse with the given code
 * and a message naming the attribute, input or value at fault. The grad_*
 * cases import small loss models with trainable weights and compare the
 * gradients through the mappers with PyTorch's autograd (1e-4 relative
 * plus 1e-6 absolute: float32 backward passes summed in another order). */
#include "fgtest.h"
#include "flowgraph/autodiff.h"
#include "onnx_test_util.h"

#define F32_RTOL  1e-5
#define F32_ATOL  1e-5
#define F64_RTOL  1e-12
#define F64_ATOL  1e-12
#define GRAD_RTOL 1e-4
#define GRAD_ATOL 1e-6

#define CASES() (fg_onnx_available() ? onnx_cases("cases_nn.py") : NULL)
#define NEED_ONNX()                                                                                \
  do {                                                                                             \
    if (!fg_onnx_available()) FG_SKIP("this build has no ONNX support");                           \
  } while (0)

#define CASE32(name)                                                                               \
  FG_TEST(name, "onnx") {                                                                          \
    NEED_ONNX();                                                                                   \
    onnx_check_case(CASES(), #name, NULL, F32_RTOL, F32_ATOL);                                     \
  }
#define CASE64(name)                                                                               \
  FG_TEST(name, "onnx") {                                                                          \
    NEED_ONNX();                                                                                   \
    onnx_check_case(CASES(), #name, NULL, F64_RTOL, F64_ATOL);                                     \
  }
#define BAD(name, code, needle)                                                                    \
  FG_TEST(name, "onnx,badinput") {                                                                 \
    NEED_ONNX();                                                                                   \
    const char *d = CASES();                                                                       \
    if (d) onnx_expect_error(d, #name, code, needle);                                              \
  }

/* ---- Conv ------------------------------------------------------------------ */
CASE32(conv1d)
CASE32(conv1d_same_upper)
CASE32(conv2d_basic)
CASE32(conv2d_depthwise)
CASE32(conv2d_dynbatch)
CASE64(conv2d_f64)
CASE32(conv2d_group)
CASE32(conv2d_kernel_shape)
CASE32(conv2d_opset7)
CASE32(conv2d_pads_strides_dil)
CASE32(conv2d_same_lower)
CASE32(conv2d_same_lower_dil)
CASE32(conv2d_same_upper)
CASE32(conv2d_same_upper_dil)
CASE32(conv2d_valid)
BAD(bad_conv_3d, FG_UNIMPLEMENTED, "3-D convolution")
BAD(bad_conv_auto_pad, FG_INVALID_GRAPH, "'auto_pad' = 'SAME'")
BAD(bad_conv_group, FG_INVALID_GRAPH, "'group' = 2")
BAD(bad_conv_kernel_shape, FG_INVALID_GRAPH, "'kernel_shape' = [2, 2] disagrees")
BAD(bad_conv_weight_rank, FG_INVALID_GRAPH, "input 1 (W) shape [4, 3, 3]")

/* ---- ConvTranspose --------------------------------------------------------- */
CASE32(convt1d)
CASE32(convt2d_basic)
CASE32(convt2d_group_dil)
CASE32(convt2d_output_shape)
CASE32(convt2d_same_lower)
CASE32(convt2d_same_upper)
CASE32(convt2d_strides_pads_outpad)
BAD(bad_convt_channels, FG_INVALID_GRAPH, "input channels")
BAD(bad_convt_output_padding, FG_UNIMPLEMENTED, "'output_padding' 2")

/* ---- pools ----------------------------------------------------------------- */
CASE32(avgpool1d)
CASE32(avgpool2d_basic)
CASE32(avgpool2d_big_pads_cip0)
CASE32(avgpool2d_big_pads_cip1)
CASE32(avgpool2d_ceil)
CASE32(avgpool2d_count_include_pad)
CASE32(avgpool2d_same_lower)
CASE32(avgpool2d_same_upper)
CASE32(globalavgpool)
CASE32(globalavgpool_3d)
CASE32(globalmaxpool)
CASE32(globalmaxpool_1d)
CASE32(maxpool1d)
CASE32(maxpool2d_basic)
CASE32(maxpool2d_big_pads)
CASE32(maxpool2d_ceil)
CASE32(maxpool2d_ceil_pads)
CASE32(maxpool2d_default_strides)
CASE32(maxpool2d_pads_dil)
CASE32(maxpool2d_same_lower)
CASE32(maxpool2d_same_upper)
CASE32(maxpool2d_storage_order)
CASE32(maxpool2d_valid)
BAD(bad_avgpool_auto_pad, FG_INVALID_GRAPH, "auto_pad")
BAD(bad_maxpool_3d, FG_UNIMPLEMENTED, "3-D pooling")
BAD(bad_maxpool_ceil_mode, FG_INVALID_GRAPH, "'ceil_mode' = 2")
BAD(bad_maxpool_indices, FG_UNIMPLEMENTED, "Indices")
BAD(bad_maxpool_no_kernel, FG_INVALID_GRAPH, "'kernel_shape' is required")

/* ---- normalizations -------------------------------------------------------- */
CASE32(bn_opset14_training_mode0)
CASE32(bn_opset15)
CASE32(bn_opset7_spatial0)
CASE32(bn_opset7_spatial1)
CASE32(bn_opset9_2d)
CASE32(bn_training_mode1)
CASE32(instancenorm)
CASE32(instancenorm_1d)
CASE32(ln_axis1_stats)
CASE32(ln_broadcast_scale)
CASE32(ln_f64_stash1)
CASE64(ln_f64_stash11)
CASE32(ln_decomposed_op14)
CASE32(ln_last)
CASE32(ln_negative_axis_no_bias)
BAD(bad_bn_opset9_training_outputs, FG_UNIMPLEMENTED, "training-mode BatchNormalization")
BAD(bad_bn_training_mode, FG_INVALID_GRAPH, "training_mode")
BAD(bad_ln_axis, FG_INVALID_GRAPH, "axis")
BAD(bad_ln_axis_rank, FG_UNIMPLEMENTED, "normalises over no axis")
BAD(bad_ln_stash_type, FG_UNIMPLEMENTED, "'stash_type' = 10")

/* ---- Gemm and MatMul ------------------------------------------------------- */
CASE32(gemm_beta0)
CASE32(gemm_c_column)
CASE32(gemm_c_scalar)
CASE32(gemm_default)
CASE64(gemm_f64)
CASE32(gemm_no_c)
CASE32(gemm_trans_alpha_beta_bcast)
CASE32(matmul_1d_2d)
CASE32(matmul_1d_both)
CASE32(matmul_1d_left)
CASE32(matmul_1d_right)
CASE32(matmul_2d)
CASE32(matmul_batched)
CASE32(matmul_broadcast)
CASE32(matmul_dynbatch_weight)
CASE32(matmul_rank_mixed)
/* ---- Resize ---------------------------------------------------------------- */

CASE32(resize_nearest_scales)
CASE32(resize_linear_sizes)
CASE32(resize_linear_align_corners_op11)
CASE32(resize_nearest_exact)
CASE32(resize_nearest_default_shrink)
CASE32(resize_linear_pytorch_half_pixel)
CASE32(resize_op10_nearest)
CASE32(resize_op10_linear)
CASE32(resize_dyn_b2)
CASE32(resize_dyn_b3)
CASE32(resize_torch_head_b2)
CASE32(resize_torch_head_b3)
CASE32(resize_merged_batch_b2)
CASE32(resize_merged_batch_b3)
CASE32(resize_scales_empty_sizes)
BAD(bad_resize_cubic, FG_UNIMPLEMENTED, "attribute 'mode' = 'cubic' is not supported")
BAD(bad_resize_channels, FG_UNIMPLEMENTED, "is 2 on axis 1")
BAD(bad_resize_tf_crop, FG_UNIMPLEMENTED, "'tf_crop_and_resize' is not supported")
BAD(bad_resize_both, FG_INVALID_GRAPH, "exactly one of input 2 (scales) and input 3 (sizes)")
BAD(bad_resize_runtime_sizes, FG_UNIMPLEMENTED, "input 3 (sizes) is not known at import")
BAD(bad_resize_op10_shrink, FG_UNIMPLEMENTED, "opset 10 nearest with scales 0.5, 0.5")
BAD(bad_resize_exclude_outside, FG_UNIMPLEMENTED, "'exclude_outside' = 1")
BAD(bad_resize_huge_scale, FG_INVALID_GRAPH, "input 2 (scales) 1e+30 on axis 2 of size 4 gives")

/* ---- Einsum ---------------------------------------------------------------- */
CASE32(einsum_attn_scores)
CASE32(einsum_attn_values)
CASE32(einsum_maxvit)
CASE32(einsum_implicit_matmul)
CASE32(einsum_outer)
CASE32(einsum_two_contracted)
CASE32(einsum_sum_out)
CASE32(einsum_dot)
CASE32(einsum_batch_permuted)
CASE32(einsum_a_transposed)
CASE32(einsum_transpose)
CASE32(einsum_reduce)
CASE64(einsum_f64)
CASE32(einsum_dyn_b2)
CASE32(einsum_dyn_b3)
CASE32(einsum_dyn_grouped_b2)
CASE32(einsum_dyn_grouped_b3)
BAD(bad_einsum_ellipsis, FG_UNIMPLEMENTED, "ellipsis ('...') is not supported")
BAD(bad_einsum_diagonal, FG_UNIMPLEMENTED, "label 'i' repeats within one term")
BAD(bad_einsum_three, FG_UNIMPLEMENTED, "more than 2 operands")
BAD(bad_einsum_sizes, FG_INVALID_GRAPH, "label 'j' is 4 in input 1 and 3 before")
BAD(bad_einsum_out_label, FG_INVALID_GRAPH, "output label 'z' is in no input")
BAD(bad_einsum_rank, FG_INVALID_GRAPH, "input 0 has rank 2, its term 3 labels")
BAD(bad_einsum_implicit_wide, FG_UNIMPLEMENTED,
    "equation 'abcde,fghij': its implicit output has more than 8 labels")
BAD(bad_einsum_no_equation, FG_INVALID_GRAPH, "attribute 'equation' is required")
BAD(bad_einsum_int, FG_UNIMPLEMENTED, "input 0 is i64; Einsum takes f32 and f64")

BAD(bad_gemm_c, FG_INVALID_GRAPH, "input 2 (C) shape [4, 5]")
BAD(bad_gemm_int, FG_UNIMPLEMENTED, "f32 and f64 only")
BAD(bad_gemm_rank, FG_INVALID_GRAPH, "not 2-D")

/* ---- activations ----------------------------------------------------------- */
CASE32(elu_alpha)
CASE32(elu_default)
CASE32(erf)
CASE32(gelu)
CASE32(gelu_tanh)
CASE32(hardsigmoid_alpha_beta)
CASE32(hardsigmoid_default)
CASE32(hardsigmoid_torch)
CASE32(hardswish)
CASE32(leakyrelu_alpha)
CASE32(leakyrelu_default)
CASE32(prelu_channel)
CASE32(prelu_full)
CASE32(prelu_input_slope)
CASE32(prelu_scalar)
CASE32(relu)
CASE32(selu_alpha_gamma)
CASE32(selu_default)
CASE32(sigmoid)
CASE64(sigmoid_f64)
CASE32(softplus)
CASE64(softplus_f64)
CASE32(tanh)
BAD(bad_gelu_approximate, FG_INVALID_GRAPH, "'approximate' = 'fast'")
BAD(bad_prelu_slope, FG_INVALID_GRAPH, "input 1 (slope) shape [3]")

/* ---- softmax family -------------------------------------------------------- */
CASE32(logsoftmax_opset11_0)
CASE32(logsoftmax_opset11_2)
CASE32(logsoftmax_opset11_default)
CASE32(logsoftmax_opset11_m2)
CASE32(logsoftmax_opset13_1)
CASE32(logsoftmax_opset13_default)
CASE32(logsoftmax_opset13_m3)
CASE32(softmax_opset11_0)
CASE32(softmax_opset11_2)
CASE32(softmax_opset11_default)
CASE32(softmax_opset11_m2)
CASE32(softmax_opset13_1)
CASE32(softmax_opset13_default)
CASE32(softmax_opset13_m3)
CASE32(softmax_opset7)
BAD(bad_softmax_axis, FG_INVALID_GRAPH, "axis")

/* ---- losses ---------------------------------------------------------------- */
CASE32(nll_mean)
CASE32(nll_mean_ignore)
CASE32(nll_mean_weights)
CASE32(nll_mean_weights_ignore_kdim)
CASE32(nll_none)
CASE32(nll_none_kdim_ignore_negative)
CASE32(nll_sum)
CASE32(nll_sum_weights_kdim)
CASE32(sce_log_prob)
CASE32(sce_mean)
CASE32(sce_mean_ignore)
CASE32(sce_mean_weights)
CASE32(sce_mean_weights_ignore_kdim)
CASE32(sce_none)
CASE32(sce_none_kdim_ignore_negative)
CASE32(sce_sum)
CASE32(sce_sum_weights_kdim)
BAD(bad_loss_labels, FG_INVALID_GRAPH, "input 1 (labels)")
BAD(bad_loss_reduction, FG_INVALID_GRAPH, "'reduction' = 'avg'")

/* ---- gradients through the mappers ------------------------------------------ */

/* Imports NAME with trainable weights, checks the loss, takes its gradient
 * for every initializer k that has a NAME.grad.<k>.npy (PyTorch's autograd
 * on the same computation) and compares. The inputs are x and lab. */
static void check_grads(const char *name) {
  NEED_ONNX();
  const char *dir = CASES();
  if (!dir) return;
  fg_onnx_options opts;
  fg_onnx_options_init(&opts);
  opts.trainable = 1;
  onnx_check_case(dir, name, &opts, F32_RTOL, F32_ATOL);
  enum { MAXV = 16 };
  char path[1024], vars[MAXV][128], fetch[MAXV][300];
  const char *fetches[MAXV];
  fg_tensor *want[MAXV] = {0}, *got[MAXV] = {0}, *x = NULL, *lab = NULL;
  fg_output xs[MAXV], dxs[MAXV];
  int nv = 0;
  fg_status *st = fg_status_new();
  snprintf(path, sizeof path, "%s/%s.onnx", dir, name);
  fg_graph *g = fg_onnx_load(path, &opts, st);
  fg_session *s = NULL;
  FG_REQUIRE(g != NULL);
  char prefix[256];
  snprintf(prefix, sizeof prefix, "%s.grad.", name);
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)) && nv < MAXV) {
    size_t len = strlen(e->d_name), pl = strlen(prefix);
    if (len <= pl + 4 || strncmp(e->d_name, prefix, pl) != 0) continue;
    snprintf(vars[nv], sizeof vars[nv], "%.*s", (int)(len - pl - 4), e->d_name + pl);
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    want[nv] = fg_npy_read(path, st);
    xs[nv] = fg_graph_find_output(g, vars[nv]);
    FG_REQUIRE(want[nv] != NULL);
    FG_REQUIRE(xs[nv].node >= 0);
    FG_CHECK_STR(fg_node_op(g, xs[nv].node), "variable");
    nv++;
  }
  if (d) closedir(d);
  FG_REQUIRE(nv >= 5);
  fg_output loss = fg_graph_output(g, 0);
  if (fg_gradients(g, &loss, 1, xs, nv, NULL, dxs, st) != 0) {
    FG_FAIL_AT("%s: gradients: %s", name, fg_status_message(st));
    goto done;
  }
  for (int k = 0; k < nv; k++) {
    snprintf(fetch[k], sizeof fetch[k], "%s:%d", fg_node_name(g, dxs[k].node), dxs[k].index);
    fetches[k] = fetch[k];
  }
  snprintf(path, sizeof path, "%s/%s.in.x.npy", dir, name);
  x = fg_npy_read(path, st);
  snprintf(path, sizeof path, "%s/%s.in.lab.npy", dir, name);
  lab = fg_npy_read(path, st);
  FG_REQUIRE(x && lab);
  s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s != NULL);
  fg_feed feeds[2] = {{"x", x}, {"lab", lab}};
  if (fg_session_run(s, feeds, 2, fetches, nv, got, NULL, 0, st) != 0) {
    FG_FAIL_AT("%s: run: %s", name, fg_status_message(st));
    goto done;
  }
  for (int k = 0; k < nv; k++)
    onnx_compare(vars[k], 0, got[k], want[k], GRAD_RTOL, GRAD_ATOL);
done:
  for (int k = 0; k < nv; k++) {
    fg_tensor_free(want[k]);
    fg_tensor_free(got[k]);
  }
  fg_tensor_free(x);
  fg_tensor_free(lab);
  fg_session_free(s);
  fg_graph_free(g);
  fg_status_free(st);
}

FG_TEST(grad_cnn, "onnx") { check_grads("grad_cnn"); }
FG_TEST(grad_mlp, "onnx") { check_grads("grad_mlp"); }

/* A label outside [0, C) that is not ignore_index is bad input at run time:
 * the run fails naming it, it does not read out of bounds. */
FG_TEST(loss_label_out_of_range, "onnx,badinput") {
  NEED_ONNX();
  const char *dir = CASES();
  if (!dir) return;
  char path[1024];
  fg_status *st = fg_status_new();
  snprintf(path, sizeof path, "%s/nll_mean_ignore.onnx", dir);
  fg_graph *g = fg_onnx_load(path, NULL, st);
  FG_REQUIRE(g != NULL);
  snprintf(path, sizeof path, "%s/nll_mean_ignore.in.x.npy", dir);
  fg_tensor *x = fg_npy_read(path, st);
  FG_REQUIRE(x != NULL);
  const int64_t n = fg_tensor_dim(x, 0);
  fg_tensor *lab = fg_tensor_new(FG_I64, 1, &n, st);
  FG_REQUIRE(lab != NULL);
  int64_t *l = fg_tensor_data(lab);
  for (int64_t i = 0; i < n; i++)
    l[i] = i == 2 ? 5 : 1; /* C is 5: class 5 does not exist; 1 is ignored */
  fg_session *s = fg_session_new(g, NULL, st);
  FG_REQUIRE(s != NULL);
  fg_feed feeds[2] = {{"x", x}, {"lab", lab}};
  fg_output o = fg_graph_output(g, 0);
  char fetch[300];
  snprintf(fetch, sizeof fetch, "%s:%d", fg_node_name(g, o.node), o.index);
  const char *f = fetch;
  fg_tensor *out = NULL;
  FG_CHECK(fg_session_run(s, feeds, 2, &f, 1, &out, NULL, 0, st) != 0);
  FG_CHECK(out == NULL);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "= 5 is out of range");
  fg_session_free(s);
  fg_tensor_free(x);
  fg_tensor_free(lab);
  fg_graph_free(g);
  fg_status_free(st);
}
