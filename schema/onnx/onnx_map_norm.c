/* ONNX BatchNormalization, LayerNormalization, InstanceNormalization,
 * SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss onto flowgraph.
 *
 * BatchNormalization in inference (training_mode 0, every opset) is
 * flowgraph's batch_norm op with a constant false training input and no
 * running-statistics update: the file's statistics stay what the file
 * says, also when its initializers are imported as trainable variables.
 * training_mode 1 (opset 14+) is the same op with training true: both
 * normalise with the batch's mean and population variance. Its optional
 * running_mean and running_var outputs are composed from ONNX's formula
 * (input * momentum + batch * (1 - momentum), population variance), which
 * differs from flowgraph's own update (PyTorch's unbiased variance and
 * momentum on the batch side). Opsets before 14 say training by asking for
 * outputs 1..4 (mean, var, saved_mean, saved_var), whose meaning they
 * leave loose: refused. spatial 0 (opset 7) is per-activation statistics,
 * composed element-wise.
 *
 * The losses are composed: log_softmax over the class axis (axis 1), the
 * class of each label picked through a one-hot mask with select (not a
 * product, so that a -inf log-probability of another class cannot turn the
 * sum into NaN), weights picked alike, ignored labels masked out of the
 * sum and of the mean's denominator. */
#include <string.h>

#include "flowgraph/graph.h"
#include "schema/onnx/onnx_map_nn.h"

/* ---- BatchNormalization --------------------------------------------------- */

/* [C] -> [C, 1, ..., 1], broadcasting against x [N, C, spatial...]. */
static fg_output per_channel(fg_graph *g, fg_output v, int rank) {
  int64_t axes[FGX_MAX_DIMS];
  int k = 0;
  for (int a = 1; a < rank - 1; a++)
    axes[k++] = a;
  return k ? fg_unsqueeze(g, v, axes, k) : v;
}

/* (x - mean) / sqrt(var + epsilon) * scale + B with numpy broadcasting:
 * opset 7's spatial 0, where the four are [C, D1, ...]. */
static int bn_per_activation(fgx_ctx *c, const fgx_node *n, double eps, fg_dtype dt) {
  fg_output in[5];
  for (int i = 0; i < 5; i++)
    if ((in[i] = fgx_input(c, n, i)).node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  fg_output inv = fg_rsqrt(g, fg_add(g, in[4], nnx_scalar(c, dt, eps)));
  fg_output y = fg_add(g, fg_mul(g, fg_mul(g, fg_sub(g, in[0], in[3]), inv), in[1]), in[2]);
  return nnx_set(c, n, 0, y);
}

/* training_mode 1's outputs 1 and 2: the running statistics updated as
 * ONNX defines them, with the batch's population variance. */
static int bn_running(fgx_ctx *c, const fgx_node *n, fg_output x, fg_output y, int rank,
                      double momentum, fg_dtype dt) {
  fg_graph *g = fgx_graph(c);
  const fg_output bmean = fg_output_at(y, 1);
  int64_t axes[FGX_MAX_DIMS];
  int k = 0;
  for (int a = 0; a < rank; a++)
    if (a != 1) axes[k++] = a;
  fg_output d = fg_sub(g, x, per_channel(g, bmean, rank));
  fg_output bvar = fg_reduce_mean(g, fg_mul(g, d, d), axes, k, 0);
  const fg_output m = nnx_scalar(c, dt, momentum), m1 = nnx_scalar(c, dt, 1.0 - momentum);
  const fg_output batch[2] = {bmean, bvar};
  for (int o = 1; o <= 2; o++) {
    if (!fgx_has_output(n, o)) continue;
    fg_output r = fgx_input(c, n, 2 + o);
    if (r.node < 0) return -1;
    if (nnx_set(c, n, o, fg_add(g, fg_mul(g, r, m), fg_mul(g, batch[o - 1], m1))) < 0) return -1;
  }
  return 0;
}

int nnx_map_batch_norm(fgx_ctx *c, const fgx_node *n) {
  double eps, momentum;
  int64_t training = 0, spatial = 1, xd[FGX_MAX_DIMS];
  fg_dtype dt;
  int rank;
  const int opset = fgx_opset(c);
  if (fgx_attr_float(c, n, "epsilon", 1e-5, &eps) < 0 ||
      fgx_attr_float(c, n, "momentum", 0.9, &momentum) < 0 ||
      fgx_attr_int(c, n, "training_mode", 0, &training) < 0 ||
      fgx_attr_int(c, n, "spatial", 1, &spatial) < 0)
    return -1;
  if (training != 0 && training != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'training_mode' = %lld must be 0 or 1",
                    (long long)training);
  if (spatial != 0 && spatial != 1)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'spatial' = %lld must be 0 or 1",
                    (long long)spatial);
  if (opset < 14)
    for (int o = 1; o <= 4; o++)
      if (fgx_has_output(n, o))
        return fgx_fail(c, n, FG_UNIMPLEMENTED,
                        "output %d: training-mode BatchNormalization of opset %d (outputs mean, "
                        "var, saved_mean, saved_var) is not supported; opset 14's training_mode "
                        "is",
                        o, opset);
  if (opset >= 14 && !training && (fgx_has_output(n, 1) || fgx_has_output(n, 2)))
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "outputs running_mean and running_var need training_mode 1 (it is 0)");
  if (fgx_input_info(c, n, 0, &dt, &rank, xd) < 0) return -1;
  if (!spatial) return bn_per_activation(c, n, eps, dt);
  fg_output in[5];
  for (int i = 0; i < 5; i++)
    if ((in[i] = fgx_input(c, n, i)).node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  fg_attrs *a = fg_attrs_new();
  if (!a || fg_attrs_set_float(a, "epsilon", eps) != 0) {
    fg_attrs_free(a);
    return fgx_fail(c, n, FG_RESOURCE_EXHAUSTED, "out of memory");
  }
  const fg_output ins[6] = {in[0], in[1], in[2], in[3], in[4], fg_scalar(g, FG_BOOL, training)};
  fg_output y = fg_op(g, "batch_norm", NULL, ins, 6, a);
  fg_attrs_free(a);
  if (nnx_set(c, n, 0, y) < 0) return -1;
  return training ? bn_running(c, n, in[0], y, rank, momentum, dt) : 0;
}

/* ---- LayerNormalization and InstanceNormalization ------------------------- */

/* Whether input i's shape is exactly x's dims from `axis` on. */
static int same_tail(fgx_ctx *c, const fgx_node *n, int i, const int64_t *xd, int rank, int axis) {
  fg_dtype dt;
  int r;
  int64_t d[FGX_MAX_DIMS];
  if (fgx_input_info(c, n, i, &dt, &r, d) < 0) return -1;
  if (r != rank - axis) return 0;
  for (int k = 0; k < r; k++)
    if (d[k] < 0 || d[k] != xd[axis + k]) return 0;
  return 1;
}

/* stash_type: the ONNX TensorProto dtype stage one computes in. */
static int stash_dtype(fgx_ctx *c, const fgx_node *n, fg_dtype *u) {
  int64_t st;
  if (fgx_attr_int(c, n, "stash_type", 1, &st) < 0) return -1;
  if (st == 1 || st == 11) {
    *u = st == 1 ? FG_F32 : FG_F64;
    return 0;
  }
  return fgx_fail(c, n, FG_UNIMPLEMENTED,
                  "attribute 'stash_type' = %lld: flowgraph computes in float (1) or double (11) "
                  "only",
                  (long long)st);
}

int nnx_map_layer_norm(fgx_ctx *c, const fgx_node *n) {
  int64_t axis, xd[FGX_MAX_DIMS];
  double eps;
  fg_dtype t, u = FG_F32;
  int rank;
  if (fgx_attr_int(c, n, "axis", -1, &axis) < 0 ||
      fgx_attr_float(c, n, "epsilon", 1e-5, &eps) < 0 || stash_dtype(c, n, &u) < 0 ||
      fgx_input_info(c, n, 0, &t, &rank, xd) < 0)
    return -1;
  /* ONNX allows axis = rank: normalising over no axis at all. */
  if (axis == rank)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "attribute 'axis' = %lld (X's rank) normalises over no axis; not supported",
                    (long long)axis);
  if (fgx_axis(c, n, "attribute 'axis'", axis, rank, &axis) < 0) return -1;
  const int has_b = fgx_has_input(n, 2);
  int fused = t == u;
  int tail;
  if ((tail = same_tail(c, n, 1, xd, rank, (int)axis)) < 0) return -1;
  fused &= tail;
  if (has_b) {
    if ((tail = same_tail(c, n, 2, xd, rank, (int)axis)) < 0) return -1;
    fused &= tail;
  }
  fg_output x = fgx_input(c, n, 0), scale = fgx_input(c, n, 1);
  fg_output b = has_b ? fgx_input(c, n, 2) : (fg_output){-1, 0};
  if (x.node < 0 || scale.node < 0 || (has_b && b.node < 0)) return -1;
  fg_graph *g = fgx_graph(c);
  const int k = rank - (int)axis;
  const fg_output none = {-1, 0};
  fg_output y, core;
  if (fused) {
    y = core = fg_layer_norm(g, x, scale, b, k, eps);
  } else {
    /* Stage one in u, stage two (scale, then B, broadcasting) in t. */
    core = fg_layer_norm(g, t == u ? x : fg_cast(g, x, u), none, none, k, eps);
    y = fg_mul(g, t == u ? core : fg_cast(g, core, t), scale);
    if (has_b) y = fg_add(g, y, b);
  }
  if (nnx_set(c, n, 0, y) < 0) return -1;
  /* Mean and InvStdDev keep the normalised axes as 1s. */
  int64_t axes[FGX_MAX_DIMS];
  for (int a = 0; a < k; a++)
    axes[a] = axis + a;
  for (int o = 1; o <= 2; o++)
    if (fgx_has_output(n, o) &&
        nnx_set(c, n, o, fg_unsqueeze(g, fg_output_at(core, o), axes, k)) < 0)
      return -1;
  return 0;
}

int nnx_map_instance_norm(fgx_ctx *c, const fgx_node *n) {
  double eps;
  if (fgx_attr_float(c, n, "epsilon", 1e-5, &eps) < 0) return -1;
  fg_output in[3];
  for (int i = 0; i < 3; i++)
    if ((in[i] = fgx_input(c, n, i)).node < 0) return -1;
  return nnx_set(c, n, 0, fg_instance_norm(fgx_graph(c), in[0], in[1], in[2], eps));
}

/* ---- the two losses --------------------------------------------------------- */

typedef struct loss_spec {
  int reduction; /* 0 none, 1 sum, 2 mean */
  int has_ignore;
  int64_t ignore;
  int rank;        /* of the scores / log-probabilities: N, C, D... */
  int64_t classes; /* C */
  fg_dtype dt, label_dt;
} loss_spec;

static int loss_attrs(fgx_ctx *c, const fgx_node *n, loss_spec *s) {
  static const char *const names[] = {"none", "sum", "mean"};
  const char *red;
  int64_t xd[FGX_MAX_DIMS], ld[FGX_MAX_DIMS];
  int lr;
  char b1[256], b2[256];
  if (fgx_attr_string(c, n, "reduction", "mean", &red) < 0) return -1;
  s->reduction = -1;
  for (int k = 0; k < 3; k++)
    if (strcmp(red, names[k]) == 0) s->reduction = k;
  if (s->reduction < 0)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "attribute 'reduction' = '%s' is not none, sum or mean",
                    red);
  if ((s->has_ignore = fgx_attr_int(c, n, "ignore_index", 0, &s->ignore)) < 0) return -1;
  if (fgx_input_info(c, n, 0, &s->dt, &s->rank, xd) < 0 ||
      fgx_input_info(c, n, 1, &s->label_dt, &lr, ld) < 0)
    return -1;
  if (s->rank < 2)
    return fgx_fail(c, n, FG_INVALID_GRAPH, "input 0 shape %s has rank %d; it must be [N, C, ...]",
                    nnx_fmt(xd, s->rank, b1, sizeof b1), s->rank);
  if (s->dt != FG_F32 && s->dt != FG_F64)
    return fgx_fail(c, n, FG_UNIMPLEMENTED, "input 0 has dtype %s; f32 and f64 are supported",
                    fg_dtype_name(s->dt));
  if (s->label_dt != FG_I32 && s->label_dt != FG_I64)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 1 (labels) has dtype %s; it must be int32 or int64",
                    fg_dtype_name(s->label_dt));
  int ok = lr == s->rank - 1;
  for (int k = 0; ok && k < lr; k++) {
    int64_t want = xd[k == 0 ? 0 : k + 1];
    ok = ld[k] < 0 || want < 0 || ld[k] == want;
  }
  if (!ok)
    return fgx_fail(c, n, FG_INVALID_GRAPH,
                    "input 1 (labels) shape %s is not input 0's %s without the class axis 1",
                    nnx_fmt(ld, lr, b1, sizeof b1), nnx_fmt(xd, s->rank, b2, sizeof b2));
  s->classes = xd[1];
  if (s->classes < 1)
    return fgx_fail(c, n, FG_UNIMPLEMENTED,
                    "the class count (input 0's axis 1) must be known at import; it is %lld",
                    (long long)s->classes);
  /* An ignore_index the labels' dtype cannot hold matches no label. */
  if (s->has_ignore && s->label_dt == FG_I32 &&
      (s->ignore < -2147483648LL || s->ignore > 2147483647LL))
    s->has_ignore = 0;
  return 0;
}

/* The loss from log-probabilities lp [N, C, D...] (see the file's comment). */
static fg_output nll(fgx_ctx *c, const loss_spec *s, fg_output lp, fg_output labels,
                     fg_output weights) {
  fg_graph *g = fgx_graph(c);
  const int r = s->rank;
  if (r > 2) { /* the class axis last: [N, D..., C] */
    int64_t perm[FGX_MAX_DIMS];
    perm[0] = 0;
    for (int a = 2; a < r; a++)
      perm[a - 1] = a;
    perm[r - 1] = 1;
    lp = fg_transpose(g, lp, r, perm);
  }
  fg_output ignored = {-1, 0};
  if (s->has_ignore) {
    ignored = fg_equal(g, labels, fg_scalar(g, s->label_dt, (double)s->ignore));
    labels = fg_select(g, ignored, fg_scalar(g, s->label_dt, 0), labels);
  }
  const fg_output zero = nnx_scalar(c, s->dt, 0.0);
  fg_output hot = fg_cast(g, fg_one_hot(g, labels, s->classes, s->dt), FG_BOOL);
  const int64_t last = r - 1;
  fg_output loss = fg_neg(g, fg_reduce_sum(g, fg_select(g, hot, lp, zero), &last, 1, 0));
  fg_output w = {-1, 0}; /* each element's weight; none means 1 */
  if (weights.node >= 0) w = fg_reduce_sum(g, fg_select(g, hot, weights, zero), &last, 1, 0);
  if (s->has_ignore) w = fg_select(g, ignored, zero, w.node >= 0 ? w : nnx_scalar(c, s->dt, 1.0));
  if (w.node >= 0) loss = fg_select(g, fg_equal(g, w, zero), zero, fg_mul(g, loss, w));
  if (s->reduction == 0) return loss;
  fg_output sum = fg_reduce_sum(g, loss, NULL, 0, 0);
  if (s->reduction == 1) return sum;
  if (w.node < 0) return fg_reduce_mean(g, loss, NULL, 0, 0);
  /* w has the loss's shape here (a weight picked or an ignore mask). */
  return fg_div(g, sum, fg_reduce_sum(g, w, NULL, 0, 0));
}

static int loss_common(fgx_ctx *c, const fgx_node *n, int from_scores) {
  loss_spec s;
  memset(&s, 0, sizeof s);
  if (loss_attrs(c, n, &s) < 0) return -1;
  fg_output x = fgx_input(c, n, 0), labels = fgx_input(c, n, 1), w = {-1, 0};
  if (x.node < 0 || labels.node < 0) return -1;
  if (fgx_has_input(n, 2) && (w = fgx_input(c, n, 2)).node < 0) return -1;
  fg_graph *g = fgx_graph(c);
  fg_output lp = from_scores ? fg_log_softmax(g, x, 1) : x;
  if (nnx_set(c, n, 0, nll(c, &s, lp, labels, w)) < 0) return -1;
  if (from_scores && fgx_has_output(n, 1)) return nnx_set(c, n, 1, lp);
  return 0;
}

int nnx_map_sce_loss(fgx_ctx *c, const fgx_node *n) { return loss_common(c, n, 1); }
int nnx_map_nll_loss(fgx_ctx *c, const fgx_node *n) { return loss_common(c, n, 0); }
