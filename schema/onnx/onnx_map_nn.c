/* ONNX neural-network ops onto flowgraph's builders: the fgx_ops_nn table,
 * the helpers the nn mappers share, the activations, Gemm, MatMul and the
 * softmax family. Convolutions, pools and normalizations live in
 * onnx_map_conv.c, onnx_map_pool.c and onnx_map_norm.c.
 *
 * Where flowgraph's op has fixed constants that ONNX makes attributes
 * (Selu's alpha and gamma, HardSigmoid's alpha and beta), the attribute's
 * default maps onto the op and any other value is composed from
 * element-wise ops with the same formula. */
#include <stdio.h>
#include <string.h>

#include "flowgraph/graph.h"
#include "schema/onnx/onnx_map_nn.h"

/* ---- shared helpers ------------------------------------------------------ */

int nnx_graph_ok(fgx_ctx *c, const fgx_node *n) {
  fg_status *st = fg_status_new();
  if (!st) return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory");
  fg_code code = fg_graph_status(fgx_graph(c), st);
  int r = 0;
  if (code != FG_OK) r = fgx_fail(c, n, code, "%s", fg_status_message(st));
  fg_status_free(st);
  return r;
}

int nnx_set(fgx_ctx *c, const fgx_node *n, int i, fg_output o) {
  if (nnx_graph_ok(c, n)) return -1;
  if (o.node < 0) return fgx_fail(c, n, FG_INTERNAL, "output %d was not built", i);
  return fgx_set_output(c, n, i, o);
}

const char *nnx_fmt(const int64_t *v, int64_t n, char *buf, size_t size) {
  size_t at = 0;
  buf[0] = '\0';
  at += (size_t)snprintf(buf, size, "[");
  for (int64_t i = 0; i < n && at < size; i++)
    at += (size_t)snprintf(buf + at, size - at, "%s%lld", i ? ", " : "", (long long)v[i]);
  if (at < size) snprintf(buf + at, size - at, "]");
  return buf;
}

int nnx_ints(fgx_ctx *c, const fgx_node *n, const char *name, int want, int64_t lo, int64_t def,
             int64_t *out, int *present) {
  const int64_t *v;
  int64_t len;
  char buf[256];
  int r = fgx_attr_ints(c, n, name, &v, &len);
  if (r < 0) return -1;
  if (present) *present = r;
  if (r == 0) {
    for (int k = 0; k < want; k++)
      out[k] = def;
    return 0;
  }
  if (len != want)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute '%s' = %s has %lld values; expected %d",
                    name, nnx_fmt(v, len, buf, sizeof buf), (long long)len, want);
  for (int k = 0; k < want; k++) {
    if (v[k] < lo || v[k] > NNX_ATTR_MAX)
      return fgx_fail(c, n, FG_INVALID_GRAPH,
                      "attribute '%s' = %s: value %d (%lld) is outside [%lld, %lld]", name,
                      nnx_fmt(v, len, buf, sizeof buf), k, (long long)v[k], (long long)lo,
                      (long long)NNX_ATTR_MAX);
    out[k] = v[k];
  }
  return 0;
}

int nnx_auto_pad(fgx_ctx *c, const fgx_node *n, int *mode) {
  static const char *const names[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  const char *s;
  if (fgx_attr_string(c, n, "auto_pad", "NOTSET", &s) < 0) return -1;
  for (int k = 0; k < 4; k++)
    if (strcmp(s, names[k]) == 0) {
      *mode = k;
      return 0;
    }
  return fgx_fail(c, n, FG_INVALID_GRAPH,
                  "attribute 'auto_pad' = '%s' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID", s);
}

int nnx_same_pads(fgx_ctx *c, const fgx_node *n, int upper, int64_t in, int64_t ext, int64_t stride,
                  int axis, int64_t *begin, int64_t *end) {
  int64_t total;
  if (stride == 1) {
    total = ext - 1;
  } else {
    if (in < 0)
      return fgx_fail(c, n, FG_UNIMPLEMENTED,
                      "auto_pad SAME_%s with stride %lld needs spatial axis %d's size at import, "
                      "and it is unknown",
                      upper ? "UPPER" : "LOWER", (long long)stride, axis);
    int64_t out = (in + stride - 1) / stride;
    total = (out - 1) * stride + ext - in;
  }
  if (total < 0) total = 0;
  *begin = upper ? total / 2 : total - total / 2;
  *end = total - *begin;
  return 0;
}

fg_output nnx_scalar(fgx_ctx *c, fg_dtype dt, double v) { return fg_scalar(fgx_graph(c), dt, v); }

/* ---- activations ---------------------------------------------------------- */

typedef fg_output (*unary_fn)(fg_graph *, fg_output);

static int unary(fgx_ctx *c, const fgx_node *n, unary_fn f) {
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  return nnx_set(c, n, 0, f(fgx_graph(c), x));
}

static fg_output erf_of(fg_graph *g, fg_output x) { return fg_op(g, "erf", NULL, &x, 1, NULL); }

static int map_relu(fgx_ctx *c, const fgx_node *n) { return unary(c, n, fg_relu); }
static int map_sigmoid(fgx_ctx *c, const fgx_node *n) { return unary(c, n, fg_sigmoid); }
static int map_tanh(fgx_ctx *c, const fgx_node *n) { return unary(c, n, fg_tanh); }
static int map_hard_swish(fgx_ctx *c, const fgx_node *n) { return unary(c, n, fg_hard_swish); }
static int map_erf(fgx_ctx *c, const fgx_node *n) { return unary(c, n, erf_of); }

/* The input and its dtype, which the scalars of a composition take. */
static fg_output input_dt(fgx_ctx *c, const fgx_node *n, int i, fg_dtype *dt) {
  fg_output x = fgx_input(c, n, i);
  if (x.node < 0) return x;
  *dt = fg_output_dtype(fgx_graph(c), x);
  return x;
}

static int map_leaky_relu(fgx_ctx *c, const fgx_node *n) {
  double alpha;
  if (fgx_attr_float(c, n, "alpha", 0.01, &alpha) < 0) return -1;
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  return nnx_set(c, n, 0, fg_leaky_relu(fgx_graph(c), x, alpha));
}

static int map_elu(fgx_ctx *c, const fgx_node *n) {
  double alpha;
  if (fgx_attr_float(c, n, "alpha", 1.0, &alpha) < 0) return -1;
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  return nnx_set(c, n, 0, fg_elu(fgx_graph(c), x, alpha));
}

/* ONNX's defaults are float32 roundings of SELU's constants; flowgraph's
 * selu holds the exact ones, within one float32 ulp of them. */
#define ONNX_SELU_ALPHA 1.67326319217681884765625
#define ONNX_SELU_GAMMA 1.05070102214813232421875

static int map_selu(fgx_ctx *c, const fgx_node *n) {
  double alpha, gamma;
  fg_dtype dt = FG_F32;
  if (fgx_attr_float(c, n, "alpha", ONNX_SELU_ALPHA, &alpha) < 0 ||
      fgx_attr_float(c, n, "gamma", ONNX_SELU_GAMMA, &gamma) < 0)
    return -1;
  fg_output x = input_dt(c, n, 0, &dt);
  if (x.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  if ((float)alpha == (float)ONNX_SELU_ALPHA && (float)gamma == (float)ONNX_SELU_GAMMA)
    return nnx_set(c, n, 0, fg_selu(g, x));
  /* gamma * (x > 0 ? x : alpha (e^x - 1)) = gamma * elu(x, alpha) */
  return nnx_set(c, n, 0, fg_mul(g, fg_elu(g, x, alpha), nnx_scalar(c, dt, gamma)));
}

static int map_hard_sigmoid(fgx_ctx *c, const fgx_node *n) {
  double alpha, beta;
  fg_dtype dt = FG_F32;
  if (fgx_attr_float(c, n, "alpha", 0.2, &alpha) < 0 ||
      fgx_attr_float(c, n, "beta", 0.5, &beta) < 0)
    return -1;
  fg_output x = input_dt(c, n, 0, &dt);
  if (x.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  /* PyTorch exports its hardsigmoid (relu6(x + 3) / 6) with alpha 1/6. */
  if ((float)alpha == (float)(1.0 / 6.0) && beta == 0.5)
    return nnx_set(c, n, 0, fg_hard_sigmoid(g, x));
  fg_output lin = fg_add(g, fg_mul(g, x, nnx_scalar(c, dt, alpha)), nnx_scalar(c, dt, beta));
  return nnx_set(c, n, 0, fg_clip(g, lin, 0.0, 1.0));
}

static int map_softplus(fgx_ctx *c, const fgx_node *n) {
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  /* ln(e^x + 1) - x is below 5e-18 past x = 40, under a float64 ulp of x,
   * so the threshold changes nothing and keeps e^x finite. */
  return nnx_set(c, n, 0, fg_softplus(fgx_graph(c), x, 1.0, 40.0));
}

static int map_gelu(fgx_ctx *c, const fgx_node *n) {
  const char *approx;
  fg_dtype dt = FG_F32;
  if (fgx_attr_string(c, n, "approximate", "none", &approx) < 0) return -1;
  fg_output x = input_dt(c, n, 0, &dt);
  if (x.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  if (strcmp(approx, "none") == 0) return nnx_set(c, n, 0, fg_gelu(g, x));
  if (strcmp(approx, "tanh") == 0) return nnx_set(c, n, 0, fg_gelu_tanh(g, x));
  return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'approximate' = '%s' is not none or tanh",
                  approx);
}

/* slope broadcasts to X one way: right-aligned, each of its dims 1 or X's. */
static int map_prelu(fgx_ctx *c, const fgx_node *n) {
  fg_dtype dx, ds;
  int rx, rs;
  int64_t xd[FGX_MAX_DIMS], sd[FGX_MAX_DIMS];
  char b1[256], b2[256];
  if (fgx_input_info(c, n, 0, &dx, &rx, xd) < 0 || fgx_input_info(c, n, 1, &ds, &rs, sd) < 0)
    return -1;
  int ok = rs <= rx;
  for (int k = 0; ok && k < rs; k++) {
    int64_t s = sd[rs - 1 - k], d = xd[rx - 1 - k];
    ok = s == 1 || s < 0 || d < 0 || s == d;
  }
  if (!ok)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 1 (slope) shape %s does not broadcast to input 0 (X) shape %s",
                    nnx_fmt(sd, rs, b1, sizeof b1), nnx_fmt(xd, rx, b2, sizeof b2));
  fg_output x = fgx_input(c, n, 0), slope = fgx_input(c, n, 1);
  if (x.node < 0 || slope.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  fg_output neg = fg_less(g, x, nnx_scalar(c, dx, 0.0));
  return nnx_set(c, n, 0, fg_select(g, neg, fg_mul(g, x, slope), x));
}

/* ---- softmax family ------------------------------------------------------- */

/* Softmax over axes [axis, rank) together (opsets before 13 coerce the
 * input to 2-D there): shifted by the maximum so that exp cannot
 * overflow. */
static fg_output softmax_tail(fg_graph *g, fg_output x, int axis, int rank, int log) {
  int64_t axes[FGX_MAX_DIMS];
  int k = 0;
  for (int a = axis; a < rank; a++)
    axes[k++] = a;
  fg_output shifted = fg_sub(g, x, fg_reduce_max(g, x, axes, k, 1));
  fg_output e = fg_exp(g, shifted);
  fg_output s = fg_reduce_sum(g, e, axes, k, 1);
  return log ? fg_sub(g, shifted, fg_log(g, s)) : fg_div(g, e, s);
}

static int softmax_common(fgx_ctx *c, const fgx_node *n, int log) {
  fg_dtype dt;
  int rank;
  int64_t dims[FGX_MAX_DIMS], axis;
  const int v13 = fgx_opset(c) >= 13;
  if (fgx_input_info(c, n, 0, &dt, &rank, dims) < 0) return -1;
  if (fgx_attr_int(c, n, "axis", v13 ? -1 : 1, &axis) < 0) return -1;
  if (fgx_axis(c, n, "attribute 'axis'", axis, rank, &axis) < 0) return -1;
  fg_output x = fgx_input(c, n, 0);
  if (x.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  if (v13 || axis == rank - 1)
    return nnx_set(c, n, 0, log ? fg_log_softmax(g, x, (int)axis) : fg_softmax(g, x, (int)axis));
  return nnx_set(c, n, 0, softmax_tail(g, x, (int)axis, rank, log));
}

static int map_softmax(fgx_ctx *c, const fgx_node *n) { return softmax_common(c, n, 0); }
static int map_log_softmax(fgx_ctx *c, const fgx_node *n) { return softmax_common(c, n, 1); }

/* ---- Gemm and MatMul ------------------------------------------------------ */

static int need_float(fgx_ctx *c, const fgx_node *n, int i, const char *what, fg_dtype dt) {
  if (dt == FG_F32 || dt == FG_F64) return 0;
  return fgx_fail(c, n, FG_UNIMPLEMENTED,
                  "input %d (%s) has dtype %s; flowgraph's matmul is f32 and f64 only", i, what,
                  fg_dtype_name(dt));
}

/* C must broadcast one way to [M, N]: rank <= 2, each dim 1 or the
 * output's. */
static int check_gemm_c(fgx_ctx *c, const fgx_node *n, int64_t m, int64_t nn) {
  fg_dtype dt;
  int rank;
  int64_t d[FGX_MAX_DIMS];
  char buf[256];
  if (fgx_input_info(c, n, 2, &dt, &rank, d) < 0) return -1;
  const int64_t want[2] = {m, nn};
  int ok = rank <= 2;
  for (int k = 0; ok && k < rank; k++) {
    int64_t have = d[rank - 1 - k], w = want[1 - k];
    ok = have == 1 || have < 0 || w < 0 || have == w;
  }
  if (!ok)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 2 (C) shape %s does not broadcast to [%lld, %lld]",
                    nnx_fmt(d, rank, buf, sizeof buf), (long long)m, (long long)nn);
  return 0;
}

static int map_gemm(fgx_ctx *c, const fgx_node *n) {
  int64_t ta, tb, da[FGX_MAX_DIMS], db[FGX_MAX_DIMS];
  double alpha, beta;
  fg_dtype ta_dt, tb_dt;
  int ra, rb;
  char buf[256];
  if (fgx_attr_int(c, n, "transA", 0, &ta) < 0 || fgx_attr_int(c, n, "transB", 0, &tb) < 0 ||
      fgx_attr_float(c, n, "alpha", 1.0, &alpha) < 0 ||
      fgx_attr_float(c, n, "beta", 1.0, &beta) < 0)
    return -1;
  if (fgx_input_info(c, n, 0, &ta_dt, &ra, da) < 0 || fgx_input_info(c, n, 1, &tb_dt, &rb, db) < 0)
    return -1;
  if (need_float(c, n, 0, "A", ta_dt) || need_float(c, n, 1, "B", tb_dt)) return -1;
  if (ra != 2)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 0 (A) shape %s is not 2-D",
                    nnx_fmt(da, ra, buf, sizeof buf));
  if (rb != 2)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 1 (B) shape %s is not 2-D",
                    nnx_fmt(db, rb, buf, sizeof buf));
  const int64_t m = ta ? da[1] : da[0], nn = tb ? db[0] : db[1];
  if (fgx_has_input(n, 2) && check_gemm_c(c, n, m, nn)) return -1;
  fg_output a = fgx_input(c, n, 0), b = fgx_input(c, n, 1);
  if (a.node < 0 || b.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  fg_output y = fg_matmul(g, a, b, ta != 0, tb != 0);
  if (alpha != 1.0) y = fg_mul(g, y, nnx_scalar(c, ta_dt, alpha));
  /* beta 0 leaves C out (as BLAS does: C need not hold numbers then). */
  if (fgx_has_input(n, 2) && beta != 0.0) {
    fg_output cc = fgx_input(c, n, 2);
    if (cc.node < 0) return -1;
    if (beta != 1.0) cc = fg_mul(g, cc, nnx_scalar(c, ta_dt, beta));
    y = fg_add(g, y, cc);
  }
  return nnx_set(c, n, 0, y);
}

/* numpy.matmul: a 1-D operand gains a dim of 1 (before for A, after for
 * B) that the result then loses; leading dims broadcast (flowgraph's
 * matmul broadcasts them). */
static int map_matmul(fgx_ctx *c, const fgx_node *n) {
  fg_dtype da, db;
  int ra, rb;
  int64_t ad[FGX_MAX_DIMS], bd[FGX_MAX_DIMS];
  if (fgx_input_info(c, n, 0, &da, &ra, ad) < 0 || fgx_input_info(c, n, 1, &db, &rb, bd) < 0)
    return -1;
  if (need_float(c, n, 0, "A", da) || need_float(c, n, 1, "B", db)) return -1;
  if (ra < 1 || rb < 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input %d (%s) is a scalar; MatMul needs rank >= 1",
                    ra < 1 ? 0 : 1, ra < 1 ? "A" : "B");
  fg_output a = fgx_input(c, n, 0), b = fgx_input(c, n, 1);
  if (a.node < 0 || b.node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  static const int64_t ax0 = 0, ax1 = 1;
  if (ra == 1) a = fg_unsqueeze(g, a, &ax0, 1);
  if (rb == 1) b = fg_unsqueeze(g, b, &ax1, 1);
  fg_output y = fg_matmul(g, a, b, 0, 0);
  int ry = (ra > rb ? ra : rb) < 2 ? 2 : (ra > rb ? ra : rb);
  int64_t drop[2];
  int nd = 0;
  if (ra == 1) drop[nd++] = ry - 2;
  if (rb == 1) drop[nd++] = ry - 1;
  if (nd) y = fg_squeeze(g, y, drop, nd);
  return nnx_set(c, n, 0, y);
}

/* ---- the table ------------------------------------------------------------ */

const fgx_op fgx_ops_nn[] = {
    {"Conv", nnx_map_conv},
    {"ConvTranspose", nnx_map_conv_transpose},
    {"MaxPool", nnx_map_max_pool},
    {"AveragePool", nnx_map_avg_pool},
    {"GlobalAveragePool", nnx_map_global_avg_pool},
    {"GlobalMaxPool", nnx_map_global_max_pool},
    {"Resize", nnx_map_resize},
    {"BatchNormalization", nnx_map_batch_norm},
    {"LayerNormalization", nnx_map_layer_norm},
    {"InstanceNormalization", nnx_map_instance_norm},
    {"Gemm", map_gemm},
    {"MatMul", map_matmul},
    {"Einsum", nnx_map_einsum},
    {"Relu", map_relu},
    {"LeakyRelu", map_leaky_relu},
    {"PRelu", map_prelu},
    {"Elu", map_elu},
    {"Selu", map_selu},
    {"Sigmoid", map_sigmoid},
    {"HardSigmoid", map_hard_sigmoid},
    {"HardSwish", map_hard_swish},
    {"Tanh", map_tanh},
    {"Softplus", map_softplus},
    {"Erf", map_erf},
    {"Gelu", map_gelu},
    {"Softmax", map_softmax},
    {"LogSoftmax", map_log_softmax},
    {"SoftmaxCrossEntropyLoss", nnx_map_sce_loss},
    {"NegativeLogLikelihoodLoss", nnx_map_nll_loss},
    {NULL, NULL},
};
