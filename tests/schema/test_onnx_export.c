/* fg_onnx_save: trained models (an MLP, a CNN with batch norm, pooling and
 * dropout) and graphs covering the op writers, exported, checked by
 * onnx.checker (full_check) and evaluated by the NumPy/torch reference
 * interpreter of tests/schema/onnx/check_export.py, whose outputs must
 * match flowgraph's own run; bad exports. The CLI and the round trip
 * through fg_onnx_load: test_onnx_export_cli.c. */
#include <flowgraph/passes.h>

#include "onnx_export_util.h"

/* ---- trained models ------------------------------------------------------------ */

/* x [?, 8] -> dense(16) relu -> dense(4) = logits; y labels; the digits head:
 * probs, prediction, loss and an optimizer step "train". */
static fg_graph *build_mlp(int adam) {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 8}, yd[1] = {FG_DIM_UNKNOWN};
  int64_t w1[2] = {8, 16}, b1[1] = {16}, w2[2] = {16, 4}, b2[1] = {4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output h = fg_relu(g, fg_add(g, fg_matmul(g, x, ox_var(g, "d1/w", 2, w1, -0.5, 0.5, 1), 0, 0),
                                  ox_var(g, "d1/b", 1, b1, -0.1, 0.1, 2)));
  fg_output logits =
      fg_set_name(g,
                  fg_add(g, fg_matmul(g, h, ox_var(g, "d2/w", 2, w2, -0.5, 0.5, 3), 0, 0),
                         ox_var(g, "d2/b", 1, b2, -0.1, 0.1, 4)),
                  "logits");
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, y), "loss");
  fg_graph_add_output(g, fg_set_name(g, fg_softmax(g, logits, 1), "probs"));
  fg_graph_add_output(g, fg_set_name(g, fg_argmax(g, logits, 1), "prediction"));
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, adam ? FG_OPTIMIZER_ADAM : FG_OPTIMIZER_SGD);
  cfg.learning_rate = adam ? 0.01 : 0.1;
  fg_status *st = fg_status_new();
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, st);
  if (train.node >= 0) fg_set_name(g, train, "train");
  fg_status_free(st);
  return g;
}

/* Labels in [0, classes) as i32. */
static fg_tensor *labels(int n, int classes) {
  int64_t d[1] = {n};
  fg_tensor *t = fg_tensor_new(FG_I32, 1, d, NULL);
  for (int i = 0; i < n; i++)
    ((int32_t *)fg_tensor_data(t))[i] = (i * 7 + 1) % classes;
  return t;
}

/* Runs `steps` steps of "train" on (x, y), saves the session to dir/name.fgb
 * and loads it back: the trained graph, variables holding trained values. */
static fg_graph *train_and_reload(fg_graph *g, const char *name, const fg_feed *feeds, int n_feeds,
                                  int steps) {
  fg_status *st = fg_status_new();
  fg_session *s = fg_session_new(g, NULL, st);
  const char *target = "train";
  for (int i = 0; s && i < steps; i++)
    if (fg_session_run(s, feeds, n_feeds, NULL, 0, NULL, &target, 1, st) != 0)
      FG_FAIL_AT("%s: training step %d: %s", name, i, fg_status_message(st));
  fg_graph *loaded = NULL;
  if (s && fg_session_save(s, ox_path(name, ".fgb"), st) == 0)
    loaded = fg_graph_load(ox_path(name, ".fgb"), st);
  if (!loaded) FG_FAIL_AT("%s: %s", name, fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return loaded;
}

/* The values of variable `var` in two graphs differ somewhere: training
 * moved them, so an export of stale values would be caught. */
static int values_differ(const fg_graph *a, const fg_graph *b, const char *var) {
  const fg_tensor *ta = NULL, *tb = NULL;
  if (fg_node_attr_tensor(a, fg_graph_find(a, var), "value", &ta) != 0 ||
      fg_node_attr_tensor(b, fg_graph_find(b, var), "value", &tb) != 0)
    return 0;
  return memcmp(fg_tensor_data(ta), fg_tensor_data(tb), fg_tensor_num_bytes(ta)) != 0;
}

/* rt: the round trip's tolerance, or -1 for none. */
static void mlp_case(int opset, int adam, double rt) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = build_mlp(adam);
  int64_t xd[2] = {6, 8};
  fg_tensor *x = ox_random(2, xd, -1, 1, 11), *y = labels(6, 4);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  fg_graph *trained = train_and_reload(g, "mlp", feeds, 2, 3);
  FG_REQUIRE(trained);
  FG_CHECK(values_differ(g, trained, "d1/w"));
  /* The marked outputs (NULL fetches) are probs and prediction. */
  const char *fetches[2] = {"probs", "prediction"};
  fg_onnx_export_options o;
  fg_onnx_export_options_init(&o);
  o.opset = opset;
  fg_status *st = fg_status_new();
  FG_CHECK(fg_onnx_save(trained, ox_path("mlp_default", ".onnx"), &o, st) == 0);
  ox_check(trained, "mlp", feeds, 1, fetches, 2, opset, 1e-5, 1e-6, rt);
  /* The default fetches wrote the same bytes as the explicit ones. */
  void *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  FG_CHECK(fg_onnx_save_memory(trained, &a, &na, &o, st) == 0);
  o.fetches = fetches, o.n_fetches = 2;
  FG_CHECK(fg_onnx_save_memory(trained, &b, &nb, &o, st) == 0);
  FG_CHECK(na == nb && na > 0 && memcmp(a, b, na) == 0);
  free(a), free(b);
  fg_status_free(st);
  fg_tensor_free(x), fg_tensor_free(y);
  fg_graph_free(trained), fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_trained_mlp_adam, "") { mlp_case(0, 1, -1); }
FG_TEST(onnx_export_trained_mlp_sgd_opset13, "") { mlp_case(13, 0, -1); }
FG_TEST(onnx_export_trained_mlp_opset11, "") { mlp_case(11, 1, -1); }
FG_TEST(onnx_export_round_trip_trained_mlp, "") { mlp_case(0, 1, 1e-6); }

/* x [?, 1, 8, 8] -> conv (asymmetric pads) -> batch_norm (training flag) ->
 * relu -> max_pool (pads, ceil_mode) -> conv (groups 2, dilation 2,
 * 'same') -> avg_pool (count_include_pad 0) -> dropout -> global avg pool
 * -> flatten -> dense -> softmax; SGD trains it, moving the running stats. */
static fg_graph *build_cnn(void) {
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {FG_DIM_UNKNOWN, 1, 8, 8}, w1[4] = {4, 1, 3, 3}, c4[1] = {4};
  int64_t w2[4] = {6, 2, 3, 3}, wd[2] = {6, 3}, bd[1] = {3}, yd[1] = {FG_DIM_UNKNOWN};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  fg_init init = {FG_INIT_KAIMING_UNIFORM, 0, 0, 0, 5};
  fg_output w = fg_variable_init(g, "conv1/w", FG_F32, 4, w1, &init); /* drawn by the session */
  fg_conv2d_opts co = {.pads = {1, 0, 2, 1}};
  fg_output h = fg_conv2d(g, x, w, ox_var(g, "conv1/b", 1, c4, -0.1, 0.1, 6), &co);
  fg_output tr = fg_training(g);
  h = fg_batch_norm(g, h, ox_var(g, "bn/scale", 1, c4, 0.5, 1.5, 7),
                    ox_var(g, "bn/shift", 1, c4, -0.2, 0.2, 8),
                    ox_var(g, "bn/mean", 1, c4, -0.3, 0.3, 9),
                    ox_var(g, "bn/var", 1, c4, 0.5, 2, 10), tr, 0.3, 1e-3);
  h = fg_relu(g, h);
  fg_pool2d_opts mp = {.kernel = {2, 2}, .strides = {2, 2}, .pads = {0, 0, 1, 1}, .ceil_mode = 1};
  h = fg_max_pool2d(g, h, &mp);
  fg_conv2d_opts c2 = {.dilations = {2, 2}, .groups = 2, .same = 1};
  h = fg_conv2d(g, h, ox_var(g, "conv2/w", 4, w2, -0.4, 0.4, 11), FG_NO_OUTPUT, &c2);
  fg_pool2d_opts ap = {.kernel = {3, 3}, .strides = {1, 1}, .pads = {1, 1, 1, 1}};
  h = fg_avg_pool2d(g, h, &ap);
  h = fg_dropout(g, h, tr, 0.25, 3);
  h = fg_flatten(g, fg_global_avg_pool(g, h), 1);
  fg_output logits =
      fg_set_name(g,
                  fg_add(g, fg_matmul(g, h, ox_var(g, "dense/w", 2, wd, -1, 1, 12), 0, 0),
                         ox_var(g, "dense/b", 1, bd, -0.1, 0.1, 13)),
                  "logits");
  fg_output y = fg_placeholder(g, "y", FG_I32, 1, yd);
  fg_output loss = fg_set_name(g, fg_softmax_cross_entropy(g, logits, y), "loss");
  fg_graph_add_output(g, fg_set_name(g, fg_softmax(g, logits, 1), "probs"));
  fg_optimizer_config cfg;
  fg_optimizer_config_init(&cfg, FG_OPTIMIZER_SGD);
  cfg.learning_rate = 0.05;
  fg_status *st = fg_status_new();
  fg_output train = fg_minimize(g, loss, NULL, 0, &cfg, st);
  if (train.node >= 0) fg_set_name(g, train, "train");
  fg_status_free(st);
  return g;
}

static void cnn_case(int opset, double rt) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = build_cnn();
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  int64_t xd[4] = {5, 1, 8, 8};
  fg_tensor *x = ox_random(4, xd, -1, 1, 21), *y = labels(5, 3);
  fg_feed feeds[2] = {{"x", x}, {"y", y}};
  fg_graph *trained = train_and_reload(g, "cnn", feeds, 2, 2);
  FG_REQUIRE(trained);
  FG_CHECK(values_differ(g, trained, "bn/mean")); /* the running stats moved */
  const char *fetches[2] = {"probs", "logits"};
  ox_check(trained, "cnn", feeds, 1, fetches, 2, opset, 1e-4, 1e-6, rt);
  /* The untrained graph: conv1/w only has an initialiser, drawn as a
   * session draws it. */
  ox_check(g, "cnn_init", feeds, 1, fetches, 2, opset, 1e-4, 1e-6, rt);
  fg_status_free(st);
  fg_tensor_free(x), fg_tensor_free(y);
  fg_graph_free(trained), fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_trained_cnn, "") { cnn_case(0, -1); }
FG_TEST(onnx_export_trained_cnn_opset15, "") { cnn_case(15, -1); }
FG_TEST(onnx_export_trained_cnn_opset11, "") { cnn_case(11, -1); }
FG_TEST(onnx_export_round_trip_trained_cnn, "") { cnn_case(0, 1e-6); }

/* ---- op writers ---------------------------------------------------------------- */

#define NAMED(g, o, name) fg_set_name(g, o, name)

/* Element-wise ops of x [2, 3, 4] in (-2, 2) and b [4]. */
static void elementwise_case(int opset, double rt) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[3] = {2, 3, 4}, bd[1] = {4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 3, xd), b = fg_placeholder(g, "b", FG_F32, 1, bd);
  fg_output pos = fg_add(g, fg_abs(g, x), fg_scalar(g, FG_F32, 0.5));
  const char *f[] = {"leaky",  "elu",   "selu", "softplus", "softplus_b", "silu",  "hsig",
                     "hswish", "mish",  "gelu", "rsqrt",    "sign",       "recip", "floor",
                     "ceil",   "round", "clip", "erf",      "tanh",       "sigm",  "exp",
                     "log",    "sqrt",  "neg",  "where",    "max",        "min",   "pow",
                     "div",    "sub",   "less", "cast",     "zeros",      "ones",  "identity",
                     "rsub",   "gelu_t"};
  NAMED(g, fg_leaky_relu(g, x, 0.2), f[0]);
  NAMED(g, fg_elu(g, x, 0.7), f[1]);
  NAMED(g, fg_selu(g, x), f[2]);
  NAMED(g, fg_softplus(g, x, 1, 20), f[3]);
  NAMED(g, fg_softplus(g, x, 2, 20), f[4]);
  NAMED(g, fg_silu(g, x), f[5]);
  NAMED(g, fg_hard_sigmoid(g, fg_mul(g, x, fg_scalar(g, FG_F32, 2))), f[6]);
  NAMED(g, fg_hard_swish(g, fg_mul(g, x, fg_scalar(g, FG_F32, 2))), f[7]);
  NAMED(g, fg_mish(g, x), f[8]);
  NAMED(g, fg_gelu(g, x), f[9]);
  NAMED(g, fg_rsqrt(g, pos), f[10]);
  NAMED(g, fg_sign(g, fg_round(g, x)), f[11]);
  NAMED(g, fg_reciprocal(g, pos), f[12]);
  NAMED(g, fg_floor(g, fg_mul(g, x, fg_scalar(g, FG_F32, 3))), f[13]);
  NAMED(g, fg_ceil(g, fg_mul(g, x, fg_scalar(g, FG_F32, 3))), f[14]);
  NAMED(g, fg_round(g, fg_mul(g, x, fg_scalar(g, FG_F32, 3))), f[15]);
  NAMED(g, fg_clip(g, x, -0.5, 0.75), f[16]);
  NAMED(g, fg_op(g, "erf", NULL, &x, 1, NULL), f[17]);
  NAMED(g, fg_tanh(g, x), f[18]);
  NAMED(g, fg_sigmoid(g, x), f[19]);
  NAMED(g, fg_exp(g, x), f[20]);
  NAMED(g, fg_log(g, pos), f[21]);
  NAMED(g, fg_sqrt(g, pos), f[22]);
  NAMED(g, fg_neg(g, x), f[23]);
  NAMED(g, fg_select(g, fg_greater(g, x, b), x, fg_mul(g, x, b)), f[24]);
  NAMED(g, fg_maximum(g, x, b), f[25]);
  NAMED(g, fg_minimum(g, x, b), f[26]);
  NAMED(g, fg_pow(g, pos, fg_add(g, b, fg_scalar(g, FG_F32, 2))), f[27]);
  NAMED(g, fg_div(g, x, fg_add(g, fg_abs(g, b), fg_scalar(g, FG_F32, 1))), f[28]);
  NAMED(g, fg_sub(g, x, b), f[29]);
  NAMED(g, fg_less(g, x, b), f[30]);
  NAMED(g, fg_cast(g, fg_mul(g, x, fg_scalar(g, FG_F32, 3)), FG_I32), f[31]);
  NAMED(g, fg_zeros_like(g, x), f[32]);
  NAMED(g, fg_ones_like(g, b), f[33]);
  NAMED(g, fg_identity(g, fg_stop_gradient(g, x)), f[34]);
  NAMED(g, fg_sub(g, fg_scalar(g, FG_F32, 1), x), f[35]);
  NAMED(g, fg_gelu_tanh(g, fg_mul(g, x, fg_scalar(g, FG_F32, 2))), f[36]);
  fg_tensor *xt = ox_random(3, xd, -2, 2, 31), *bt = ox_random(1, bd, -1, 1, 32);
  fg_feed feeds[2] = {{"x", xt}, {"b", bt}};
  ox_check(g, ox_name("ew", opset), feeds, 2, f, (int)(sizeof f / sizeof *f), opset, 2e-6, 2e-6,
           rt);
  fg_tensor_free(xt), fg_tensor_free(bt);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_elementwise_opset11, "") { elementwise_case(11, -1); }
FG_TEST(onnx_export_elementwise_opset13, "") { elementwise_case(13, -1); }
FG_TEST(onnx_export_elementwise_opset17, "") { elementwise_case(17, -1); }
FG_TEST(onnx_export_round_trip_elementwise, "") { elementwise_case(17, 2e-6); }

/* Shaping and reductions of x [2, 3, 4]. */
static void shape_case(int opset, double rt) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[3] = {2, 3, 4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 3, xd);
  int64_t shp[2] = {4, 6}, perm[3] = {2, 0, 1}, beg[3] = {0, 1, 1}, sz[3] = {-1, 2, 2};
  int64_t ax1[1] = {1}, ax02[2] = {0, 2}, axm1[1] = {-1}, sq[1] = {1}, ex[4] = {3, 2, 3, 4};
  int64_t rep[3] = {1, 2, 1}, pads[6] = {0, 1, 2, 1, 0, 1}, pads_r[6] = {0, 1, 2, 0, 1, 1};
  int64_t sizes[2] = {1, 3}, idx_d[2] = {2, 2};
  double idx_v[4] = {1, 0, 1, 1}, hot_v[3] = {2, 0, 3};
  const char *f[] = {"reshape",  "transpose", "concat",  "slice",    "gather",  "onehot",
                     "unsq",     "squeeze",   "expand",  "tile",     "pad_c",   "pad_r",
                     "pad_e",    "split",     "split:1", "halves:1", "stack",   "rsum",
                     "rsum_all", "rmean",     "rmax",    "rmin",     "rprod",   "lse",
                     "argmax",   "argmin",    "smax",    "lsmax",    "flatten", "fill"};
  NAMED(g, fg_reshape(g, x, 2, shp), f[0]);
  NAMED(g, fg_transpose(g, x, 3, perm), f[1]);
  fg_output cat[2] = {x, fg_neg(g, x)};
  NAMED(g, fg_concat(g, cat, 2, -1), f[2]);
  NAMED(g, fg_slice(g, x, 3, beg, sz), f[3]);
  NAMED(g,
        fg_gather(g, fg_reshape(g, x, 2, (int64_t[]){6, 4}), ox_const(g, FG_I64, 2, idx_d, idx_v)),
        f[4]);
  NAMED(g, fg_one_hot(g, ox_const(g, FG_I32, 1, (int64_t[]){3}, hot_v), 4, FG_F32), f[5]);
  NAMED(g, fg_unsqueeze(g, x, ax1, 1), f[6]);
  NAMED(g, fg_squeeze(g, fg_unsqueeze(g, x, ax1, 1), sq, 1), f[7]);
  NAMED(g, fg_expand(g, fg_slice(g, x, 3, (int64_t[]){0, 0, 0}, (int64_t[]){1, 3, 4}), 4, ex),
        f[8]);
  NAMED(g, fg_tile(g, x, rep, 3), f[9]);
  NAMED(g, fg_pad(g, x, pads, "constant", 1.5), f[10]);
  NAMED(g, fg_pad(g, x, pads_r, "reflect", 0), f[11]);
  NAMED(g, fg_pad(g, x, pads, "edge", 0), f[12]);
  fg_output parts[3];
  fg_split(g, x, 2, sizes, 2, parts);
  NAMED(g, parts[0], "split");
  fg_split(g, x, 1, NULL, 2, parts); /* ceil(3 / 2) = 2, then 1 */
  NAMED(g, parts[0], "halves");
  NAMED(g, fg_stack(g, cat, 2, -2), f[16]);
  NAMED(g, fg_reduce_sum(g, x, ax1, 1, 1), f[17]);
  NAMED(g, fg_reduce_sum(g, x, NULL, 0, 0), f[18]);
  NAMED(g, fg_reduce_mean(g, x, ax02, 2, 0), f[19]);
  NAMED(g, fg_reduce_max(g, x, axm1, 1, 1), f[20]);
  NAMED(g, fg_reduce_min(g, x, ax02, 2, 1), f[21]);
  NAMED(g, fg_reduce_prod(g, x, ax1, 1, 0), f[22]);
  NAMED(g, fg_logsumexp(g, x, axm1, 1, 0), f[23]);
  NAMED(g, fg_argmax(g, x, 1), f[24]);
  NAMED(g, fg_argmin(g, x, -1), f[25]);
  NAMED(g, fg_softmax(g, x, 1), f[26]);
  NAMED(g, fg_log_softmax(g, x, -1), f[27]);
  NAMED(g, fg_flatten(g, x, 2), f[28]);
  NAMED(g, fg_add(g, fg_fill(g, FG_F32, 1, (int64_t[]){4}, 0.25), x), f[29]);
  fg_tensor *xt = ox_random(3, xd, -2, 2, 41);
  fg_feed feeds[1] = {{"x", xt}};
  fg_status *st = fg_status_new();
  FG_REQUIRE(fg_graph_status(g, st) == FG_OK);
  fg_status_free(st);
  ox_check(g, ox_name("shape", opset), feeds, 1, f, (int)(sizeof f / sizeof *f), opset, 2e-6, 2e-6,
           rt);
  fg_tensor_free(xt);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_shape_and_reduce_opset11, "") { shape_case(11, -1); }
FG_TEST(onnx_export_shape_and_reduce_opset13, "") { shape_case(13, -1); }
FG_TEST(onnx_export_shape_and_reduce_opset17, "") { shape_case(17, -1); }
FG_TEST(onnx_export_round_trip_shape_and_reduce, "") { shape_case(13, 2e-6); }
/* The attribute forms of opset 11 (axes, split) read back too. */
FG_TEST(onnx_export_round_trip_shape_and_reduce_opset11, "") { shape_case(11, 2e-6); }

/* cumsum (exclusive, reversed) and topk (the smallest, both outputs);
 * rt >= 0: imported back too. */
static void scan_case(int opset, double rt) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[3] = {2, 3, 4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 3, xd);
  const char *f[] = {"cumsum", "cumsum_plain", "topk", "topk:1", "top1"};
  NAMED(g, fg_cumsum(g, x, 1, 1, 1), f[0]);
  NAMED(g, fg_cumsum(g, x, -1, 0, 0), f[1]);
  NAMED(g, fg_topk(g, x, 2, -1, 0, 1), f[2]);
  NAMED(g, fg_topk(g, x, 1, 1, 1, 1), f[4]);
  fg_tensor *xt = ox_random(3, xd, -2, 2, 43);
  fg_feed feeds[1] = {{"x", xt}};
  ox_check(g, "scan", feeds, 1, f, 5, opset, 2e-6, 2e-6, rt);
  fg_tensor_free(xt);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_cumsum_topk, "") { scan_case(17, -1); }
FG_TEST(onnx_export_round_trip_cumsum_topk, "") { scan_case(13, 0); }

/* layer norm (a decomposition before opset 17), group and instance norm,
 * conv_transpose2d, global max pool, even adaptive pooling, an untransposed
 * and a transposed matmul. */
static void norm_case(int opset, double rt) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {FG_DIM_UNKNOWN, 4, 4, 4}, c4[1] = {4}, hw[2] = {4, 4};
  int64_t wt[4] = {4, 3, 3, 3}, c3[1] = {3}, m[2] = {4, 5};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  const char *f[] = {"ln", "gn", "in", "convt", "gmax", "adapt", "mm_t", "mm", "sbn", "avgc"};
  NAMED(g,
        fg_layer_norm(g, x, ox_var(g, "ln/s", 2, hw, 0.5, 1.5, 51),
                      ox_var(g, "ln/b", 2, hw, -0.5, 0.5, 52), 2, 1e-5),
        f[0]);
  NAMED(g,
        fg_group_norm(g, x, ox_var(g, "gn/s", 1, c4, 0.5, 1.5, 53),
                      ox_var(g, "gn/b", 1, c4, -0.5, 0.5, 54), 2, 1e-5),
        f[1]);
  NAMED(g,
        fg_instance_norm(g, x, ox_var(g, "in/s", 1, c4, 0.5, 1.5, 55),
                         ox_var(g, "in/b", 1, c4, -0.5, 0.5, 56), 1e-4),
        f[2]);
  fg_conv2d_opts t = {.strides = {2, 2}, .pads = {1, 1, 1, 1}, .output_padding = {1, 0}};
  NAMED(g,
        fg_conv_transpose2d(g, x, ox_var(g, "ct/w", 4, wt, -0.5, 0.5, 57),
                            ox_var(g, "ct/b", 1, c3, -0.1, 0.1, 58), &t),
        f[3]);
  NAMED(g, fg_global_max_pool(g, x), f[4]);
  NAMED(g, fg_adaptive_avg_pool2d(g, x, 2, 1), f[5]);
  NAMED(g, fg_matmul(g, x, ox_var(g, "mm/w", 2, m, -1, 1, 59), 1, 0), f[6]);
  NAMED(g,
        fg_matmul(g, x, fg_transpose(g, ox_var(g, "mm/v", 2, m, -1, 1, 60), 2, (int64_t[]){1, 0}),
                  0, 1),
        f[7]);
  /* sync_batch_norm in inference: batch_norm with the running statistics. */
  fg_output sbn_in[6] = {x,
                         ox_var(g, "sbn/s", 1, c4, 0.5, 1.5, 62),
                         ox_var(g, "sbn/b", 1, c4, -0.5, 0.5, 63),
                         ox_var(g, "sbn/m", 1, c4, -0.5, 0.5, 64),
                         ox_var(g, "sbn/v", 1, c4, 0.5, 1.5, 65),
                         fg_training(g)};
  fg_op(g, "sync_batch_norm", "sbn", sbn_in, 6, NULL);
  /* ceil_mode with a last window past the padding: 3 windows of 3 rows
   * from row -1 in 4 rows padded by 1, the last one divided by the 2 rows
   * (times columns) inside the padded input. */
  fg_pool2d_opts ac = {.kernel = {3, 3},
                       .strides = {2, 2},
                       .pads = {1, 1, 1, 1},
                       .ceil_mode = 1,
                       .count_include_pad = 1};
  NAMED(g, fg_avg_pool2d(g, x, &ac), "avgc");
  int64_t feed_d[4] = {3, 4, 4, 4};
  fg_tensor *xt = ox_random(4, feed_d, -2, 2, 61);
  fg_feed feeds[1] = {{"x", xt}};
  ox_check(g, ox_name("norm", opset), feeds, 1, f, 10, opset, 1e-5, 1e-5, rt);
  fg_tensor_free(xt);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_norm_conv_transpose_pool_opset11, "") { norm_case(11, -1); }
FG_TEST(onnx_export_norm_conv_transpose_pool_opset13, "") { norm_case(13, -1); }
FG_TEST(onnx_export_norm_conv_transpose_pool_opset17, "") { norm_case(17, -1); }
FG_TEST(onnx_export_round_trip_norm_conv_transpose_pool, "") { norm_case(13, 2e-6); }
FG_TEST(onnx_export_round_trip_layer_norm_opset17, "") { norm_case(17, 2e-6); }

/* resize_linear with sizes on a symbolic batch (Resize's sizes from the
 * input's Shape), resize_nearest with given scales (Resize's scales
 * input), and a shrinking align_corners resize. */
static void resize_case(int opset, double rt) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[4] = {FG_DIM_UNKNOWN, 3, 5, 6};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  const char *f[] = {"up_lin", "up_near", "down_ac"};
  fg_resize_opts lin = {{7, 9}, {0, 0}, FG_RESIZE_HALF_PIXEL, 0};
  fg_resize_opts near = {{10, 12}, {2, 2}, FG_RESIZE_ASYMMETRIC, FG_NEAREST_FLOOR};
  fg_resize_opts ac = {{3, 4}, {0, 0}, FG_RESIZE_ALIGN_CORNERS, 0};
  NAMED(g, fg_resize_linear(g, x, &lin), f[0]);
  NAMED(g, fg_resize_nearest(g, x, &near), f[1]);
  NAMED(g, fg_resize_linear(g, x, &ac), f[2]);
  int64_t feed_d[4] = {2, 3, 5, 6};
  fg_tensor *xt = ox_random(4, feed_d, -2, 2, 71);
  fg_feed feeds[1] = {{"x", xt}};
  ox_check(g, ox_name("resize", opset), feeds, 1, f, 3, opset, 1e-5, 1e-5, rt);
  fg_tensor_free(xt);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_resize_opset11, "") { resize_case(11, -1); }
FG_TEST(onnx_export_resize_opset17, "") { resize_case(17, -1); }
FG_TEST(onnx_export_round_trip_resize, "") { resize_case(13, 0); }

/* f64 throughout: the helper constants of the decompositions (gelu,
 * softplus with beta, layer norm before opset 17, clip) take x's dtype. */
static void f64_case(int opset) {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[3] = {FG_DIM_UNKNOWN, 3, 4}, nd[1] = {4};
  fg_output x = fg_cast(g, fg_placeholder(g, "x", FG_F32, 3, xd), FG_F64);
  fg_tensor *sc = ox_tensor(FG_F64, 1, nd, (double[]){0.5, 1, 1.5, 2});
  fg_output scale = fg_constant(g, "scale", sc);
  fg_tensor_free(sc);
  const char *f[] = {"gelu", "softplus", "ln", "clip", "hswish", "lsm", "gelu_t"};
  NAMED(g, fg_gelu(g, x), f[0]);
  NAMED(g, fg_softplus(g, x, 3, 20), f[1]);
  NAMED(g, fg_layer_norm(g, x, scale, FG_NO_OUTPUT, 1, 1e-6), f[2]);
  NAMED(g, fg_clip(g, x, -0.25, 0.5), f[3]);
  NAMED(g, fg_hard_swish(g, fg_mul(g, x, fg_scalar(g, FG_F64, 3))), f[4]);
  NAMED(g, fg_log_softmax(g, x, 1), f[5]);
  NAMED(g, fg_gelu_tanh(g, fg_mul(g, x, fg_scalar(g, FG_F64, 3))), f[6]);
  int64_t fd[3] = {2, 3, 4};
  fg_tensor *xt = ox_random(3, fd, -2, 2, 81);
  fg_feed feeds[1] = {{"x", xt}};
  ox_check(g, ox_name("f64_", opset), feeds, 1, f, 7, opset, 1e-12, 1e-12, -1);
  fg_tensor_free(xt);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_f64_opset11, "") { f64_case(11); }
FG_TEST(onnx_export_f64_opset17, "") { f64_case(17); }

/* logical_not/and/or (ops of the ONNX import's own branch: a build
 * without them skips visibly) as Not, And, Or, broadcasting. */
static void logical_case(double rt) {
  if (fg_op_find("logical_and") < 0) FG_SKIP("the logical ops are not in this build");
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {3, 4}, yd[1] = {4};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd), y = fg_placeholder(g, "y", FG_F32, 1, yd);
  fg_output a = fg_greater(g, x, fg_scalar(g, FG_F32, 0)),
            b = fg_less(g, y, fg_scalar(g, FG_F32, 0));
  fg_output ab[2] = {a, b};
  fg_op(g, "logical_not", "not", &a, 1, NULL);
  fg_op(g, "logical_and", "and", ab, 2, NULL);
  fg_op(g, "logical_or", "or", ab, 2, NULL);
  const char *f[] = {"not", "and", "or"};
  fg_tensor *xt = ox_random(2, xd, -1, 1, 91), *yt = ox_random(1, yd, -1, 1, 92);
  fg_feed feeds[2] = {{"x", xt}, {"y", yt}};
  ox_check(g, "logical", feeds, 2, f, 3, 0, 0, 0, rt);
  fg_tensor_free(xt), fg_tensor_free(yt);
  fg_graph_free(g);
  ox_end();
}

FG_TEST(onnx_export_logical, "") { logical_case(-1); }
FG_TEST(onnx_export_round_trip_logical, "") { logical_case(0); }

/* Fetches that are the sources themselves (a graph input, initializers)
 * and an output fetched twice; a bool and an i64 input. */
FG_TEST(onnx_export_fetches_sources, "") {
  FG_REQUIRE(ox_begin());
  fg_graph *g = fg_graph_new();
  int64_t xd[3] = {FG_DIM_UNKNOWN, 2, 3}, wd[1] = {3}, md[2] = {FG_DIM_UNKNOWN, 3};
  double wv[3] = {1, -2, 3.5}, cv[3] = {4, 5, 6};
  fg_output x = fg_placeholder(g, "x", FG_F32, 3, xd);
  fg_tensor *wt = ox_tensor(FG_F32, 1, wd, wv);
  fg_output w = fg_variable(g, "w", wt);
  fg_tensor_free(wt);
  fg_set_name(g, ox_const(g, FG_I64, 1, wd, cv), "c");
  fg_set_name(g, fg_add(g, x, w), "y");
  fg_output m = fg_placeholder(g, "mask", FG_BOOL, 2, md);
  fg_output k = fg_placeholder(g, "k", FG_I64, 2, md);
  fg_set_name(g, fg_select(g, m, fg_cast(g, k, FG_F32), fg_reduce_sum(g, x, (int64_t[]){1}, 1, 0)),
              "picked");
  const char *f[] = {"x", "w", "c", "y", "picked", "y"};
  int64_t fd[3] = {2, 2, 3}, fm[2] = {2, 3};
  double mv[6] = {1, 0, 0, 1, 1, 0}, kv[6] = {-3, 7, 9, 100, -1, 2};
  fg_tensor *xt = ox_random(3, fd, -1, 1, 71), *mt = ox_tensor(FG_BOOL, 2, fm, mv),
            *kt = ox_tensor(FG_I64, 2, fm, kv);
  fg_feed feeds[3] = {{"x", xt}, {"mask", mt}, {"k", kt}};
  /* The repeated fetch is written once: five outputs. */
  ox_check(g, "sources", feeds, 3, f, 5, 0, 1e-6, 1e-6, -1);
  void *data = NULL;
  size_t size = 0;
  fg_onnx_export_options o;
  fg_onnx_export_options_init(&o);
  o.fetches = f, o.n_fetches = 6;
  fg_status *st = fg_status_new();
  FG_CHECK(fg_onnx_save_memory(g, &data, &size, &o, st) == 0);
  FG_CHECK(fg_onnx_sniff(data, size) || !fg_onnx_available());
  free(data);
  fg_status_free(st);
  fg_tensor_free(xt), fg_tensor_free(mt), fg_tensor_free(kt);
  fg_graph_free(g);
  ox_end();
}

/* ---- bad exports ------------------------------------------------------------------ */

FG_TEST(onnx_export_lists_every_op_without_writer, "") {
  fg_graph *g = fg_graph_new();
  int64_t d[2] = {2, 3};
  fg_output r = fg_set_name(g, fg_random_uniform(g, FG_F32, 2, d, 0, 1, 1), "noise");
  fg_output n = fg_set_name(g, fg_truncated_normal(g, FG_F32, 2, d, 0, 1, 2), "tnoise");
  NAMED(g, fg_add(g, r, n), "sum");
  const char *fetch[1] = {"sum"};
  const char *needles[] = {"2 nodes with no ONNX writer", "node 'noise' (random_uniform)",
                           "node 'tnoise' (truncated_normal)", NULL};
  ox_expect_error(g, fetch, 1, 0, FG_UNIMPLEMENTED, needles);
  /* An op whose writer refuses a value: uneven adaptive pooling. */
  int64_t xd[4] = {1, 2, 5, 5};
  fg_output x = fg_placeholder(g, "x", FG_F32, 4, xd);
  NAMED(g, fg_adaptive_avg_pool2d(g, x, 2, 2), "adapt");
  const char *fetch2[1] = {"adapt"};
  const char *needles2[] = {"node 'adapt' (adaptive_avg_pool2d)", "5 by 5 to output 2 by 2", NULL};
  ox_expect_error(g, fetch2, 1, 0, FG_UNIMPLEMENTED, needles2);
  /* ceil_mode where flowgraph (as torch) drops a window starting in the
   * padding: 4 rows, kernel 2, stride 2, bottom pad 1 give 2 rows here and
   * ceil(3 / 2) + 1 = 3 in ONNX. */
  int64_t pd[4] = {1, 1, 4, 4};
  fg_pool2d_opts po = {.kernel = {2, 2}, .strides = {2, 2}, .pads = {0, 0, 1, 1}, .ceil_mode = 1};
  NAMED(g, fg_max_pool2d(g, fg_placeholder(g, "xp", FG_F32, 4, pd), &po), "pool");
  const char *fetch3[1] = {"pool"};
  const char *needles3[] = {"node 'pool' (max_pool2d)", "2 positions along dim 2",
                            "ceil_mode gives 3", NULL};
  ox_expect_error(g, fetch3, 1, 0, FG_UNIMPLEMENTED, needles3);
  fg_graph_free(g);
}

FG_TEST(onnx_export_refuses_bad_fetches_and_opsets, "") {
  fg_graph *g = build_mlp(1);
  const char *nope[1] = {"nope"}, *probs[1] = {"probs"}, *bad_index[1] = {"probs:3"};
  const char *n1[] = {"fetch 'nope' names no output", NULL};
  ox_expect_error(g, nope, 1, 0, FG_INVALID_ARGUMENT, n1);
  const char *n1b[] = {"fetch 'probs:3' names no output", NULL};
  ox_expect_error(g, bad_index, 1, 0, FG_INVALID_ARGUMENT, n1b);
  const char *n2[] = {"opset 10 is not supported", "11 to 17", NULL};
  ox_expect_error(g, probs, 1, 10, FG_INVALID_ARGUMENT, n2);
  const char *n3[] = {"opset 18 is not supported", NULL};
  ox_expect_error(g, probs, 1, 18, FG_INVALID_ARGUMENT, n3);
  /* Forms opset 11 lacks: the loss op (12), integer Max (12). */
  const char *loss[1] = {"loss"};
  const char *n3b[] = {"node 'loss' (softmax_cross_entropy)", "needs opset 12", NULL};
  ox_expect_error(g, loss, 1, 11, FG_UNIMPLEMENTED, n3b);
  fg_output yi = fg_graph_find_output(g, "y");
  NAMED(g, fg_maximum(g, yi, fg_scalar(g, FG_I32, 1)), "ymax");
  const char *ymax[1] = {"ymax"};
  const char *n3c[] = {"node 'ymax' (maximum): Max of i32 needs opset 12", NULL};
  ox_expect_error(g, ymax, 1, 11, FG_UNIMPLEMENTED, n3c);
  /* The training step and what only it needs. */
  const char *train[1] = {"train"};
  const char *n4[] = {"fetch 'train' needs", "training-only node", "(apply_adam)", NULL};
  ox_expect_error(g, train, 1, 0, FG_INVALID_ARGUMENT, n4);
  /* The same step after the passes: its updates are one multi update. */
  fg_graph *opt = fg_optimize(g, NULL, train, 1, NULL, NULL);
  FG_REQUIRE(opt);
  const char *n4b[] = {"fetch 'train' needs", "training-only node", "(multi_apply_adam)", NULL};
  ox_expect_error(opt, train, 1, 0, FG_INVALID_ARGUMENT, n4b);
  fg_graph_free(opt);
  /* With SGD the weights' updates are inside their gradients' GEMMs. */
  fg_graph *sgd = build_mlp(0), *opt_sgd = NULL;
  FG_REQUIRE(sgd);
  opt_sgd = fg_optimize(sgd, NULL, train, 1, NULL, NULL);
  FG_REQUIRE(opt_sgd);
  const char *n4c[] = {"fetch 'train' needs", "training-only node", "(matmul_apply_sgd)", NULL};
  ox_expect_error(opt_sgd, train, 1, 0, FG_INVALID_ARGUMENT, n4c);
  fg_graph_free(opt_sgd);
  fg_graph_free(sgd);
  fg_graph *empty = fg_graph_new();
  fg_placeholder(empty, "x", FG_F32, 0, NULL);
  const char *n5[] = {"no fetches given and the graph marks no outputs", NULL};
  ox_expect_error(empty, NULL, 0, 0, FG_INVALID_ARGUMENT, n5);
  fg_graph_free(empty);
  fg_graph_free(g);
}

FG_TEST(onnx_export_refuses_labels_and_training_mode, "") {
  fg_graph *g = fg_graph_new();
  int64_t xd[2] = {FG_DIM_UNKNOWN, 4}, ld[1] = {FG_DIM_UNKNOWN};
  fg_output x = fg_placeholder(g, "x", FG_F32, 2, xd);
  fg_output lab = fg_placeholder(g, "labels", FG_I64, 1, ld);
  NAMED(g, fg_softmax_cross_entropy(g, x, lab), "xent");
  const char *xent[1] = {"xent"};
  const char *n1[] = {"fetch 'xent' needs 1 training-only node: 'labels' (placeholder)", NULL};
  ox_expect_error(g, xent, 1, 0, FG_INVALID_ARGUMENT, n1);
  /* The training flag read by something other than batch_norm/dropout. */
  NAMED(g, fg_cast(g, fg_training(g), FG_F32), "mode");
  const char *mode[1] = {"mode"};
  const char *n2[] = {"fetch 'mode' needs 1 training-only node: 'training' (training_flag)", NULL};
  ox_expect_error(g, mode, 1, 0, FG_INVALID_ARGUMENT, n2);
  /* batch_norm in training mode (a constant true) has no inference form,
   * and its statistics outputs have no ONNX form. */
  int64_t c[1] = {4}, bd[4] = {2, 4, 1, 1};
  fg_output xb = fg_placeholder(g, "xb", FG_F32, 4, bd);
  double one = 1;
  fg_output on = fg_set_name(g, ox_const(g, FG_BOOL, 0, NULL, &one), "always");
  fg_output bn = fg_batch_norm(g, xb, FG_NO_OUTPUT, FG_NO_OUTPUT, ox_var(g, "m", 1, c, 0, 1, 1),
                               ox_var(g, "v", 1, c, 1, 2, 2), on, 0.1, 1e-5);
  NAMED(g, bn, "bn");
  const char *fbn[1] = {"bn"}, *fmean[1] = {"bn:1"};
  const char *n3[] = {"node 'bn' (batch_norm)", "constant true", NULL};
  ox_expect_error(g, fbn, 1, 0, FG_UNIMPLEMENTED, n3);
  const char *n4[] = {"node 'bn' (batch_norm): only its output 0", NULL};
  ox_expect_error(g, fmean, 1, 0, FG_UNIMPLEMENTED, n4);
  fg_graph_free(g);
}

FG_TEST(onnx_export_io_error_leaves_no_file, "") {
  FG_REQUIRE(ox_begin());
  fg_graph *g = build_mlp(0);
  fg_status *st = fg_status_new();
  FG_CHECK_INT(fg_onnx_save(g, ox_path("missing/dir/m", ".onnx"), NULL, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_IO_ERROR);
  FG_CHECK_STR_CONTAINS(fg_status_message(st), "missing/dir/m.onnx");
  FG_CHECK_INT(fgt_count_entries(ox_dir), 0);
  /* A failed export writes nothing either. */
  fg_onnx_export_options o;
  fg_onnx_export_options_init(&o);
  o.opset = 99;
  FG_CHECK_INT(fg_onnx_save(g, ox_path("m", ".onnx"), &o, st), -1);
  FG_CHECK_INT(fgt_count_entries(ox_dir), 0);
  FG_CHECK_INT(fg_onnx_save(NULL, ox_path("m", ".onnx"), NULL, st), -1);
  FG_CHECK_INT(fg_status_code(st), FG_INVALID_ARGUMENT);
  fg_status_free(st);
  fg_graph_free(g);
  ox_end();
}
