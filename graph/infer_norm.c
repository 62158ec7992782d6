/* Shape inference for the normalization ops: batch_norm (its running-
 * statistics update and gradient), layer_norm, group_norm and
 * instance_norm (and their gradients). Every refusal names the input and
 * its value: a scale, shift or running statistic whose length is not C, x
 * of rank < 2 (where a channel axis is needed), num_groups not dividing C,
 * epsilon <= 0, momentum outside [0, 1], a training input that is not a
 * bool scalar. Unknown dims (negative) are checked when known, at plan
 * time. */
#include "graph/infer_common.h"

static const char *const bn_names[] = {"x",           "scale",   "shift", "running_mean",
                                       "running_var", "training"};

static int need_float(const fg_node *node, const fg_tinfo *in, int i, const char *what,
                      fg_status *st) {
  if (fg_dtype_is_float(in[i].dtype)) return 0;
  return fgi_fail(node, st, "input %d (%s) dtype %s is not allowed; it must be f32 or f64", i, what,
                  fg_dtype_name(in[i].dtype));
}

/* Input i (`what`) has input 0's dtype and is rank 1 of length c (c < 0:
 * unknown), the channels of x (axis 1) or, where input 0 is not x
 * (batch_norm_update_stats), input 0's length. */
static int need_vec(const fg_node *node, const fg_tinfo *in, int i, const char *what, int64_t c,
                    fg_status *st) {
  char s[FGI_STR];
  const int of_x = node->op != FG_OP_BATCH_NORM_UPDATE_STATS;
  if (in[i].dtype != in[0].dtype)
    return fgi_fail(node, st, "input %d (%s) dtype %s differs from input 0 (%s) dtype %s", i, what,
                    fg_dtype_name(in[i].dtype), of_x ? "x" : "running_mean",
                    fg_dtype_name(in[0].dtype));
  if (in[i].rank != 1)
    return fgi_fail(node, st, "input %d (%s) shape %s has rank %d; it must be [C] = [%lld]", i,
                    what, fgi_shape(&in[i], s), in[i].rank, (long long)c);
  if (c >= 0 && in[i].dims[0] >= 0 && in[i].dims[0] != c)
    return fgi_fail(node, st, "input %d (%s) has length %lld, but %s %lld", i, what,
                    (long long)in[i].dims[0], of_x ? "x has C =" : "input 0 (running_mean) has",
                    (long long)c);
  return 0;
}

/* x: float, rank >= 2 (N, C, ...). */
static int need_nc(const fg_node *node, const fg_tinfo *x, fg_status *st) {
  char s[FGI_STR];
  if (!fg_dtype_is_float(x->dtype))
    return fgi_fail(node, st, "input 0 (x) dtype %s is not allowed; it must be f32 or f64",
                    fg_dtype_name(x->dtype));
  if (x->rank < 2)
    return fgi_fail(node, st,
                    "input 0 (x) shape %s has rank %d; it must be [N, C, ...] (rank >= 2)",
                    fgi_shape(x, s), x->rank);
  return 0;
}

static int need_training(const fg_node *node, const fg_tinfo *in, int i, fg_status *st) {
  char s[FGI_STR];
  if (in[i].dtype != FG_BOOL || in[i].rank != 0)
    return fgi_fail(node, st, "input %d (training) is %s %s; it must be a bool scalar", i,
                    fg_dtype_name(in[i].dtype), fgi_shape(&in[i], s));
  return 0;
}

static int need_epsilon(const fg_node *node, fg_status *st) {
  double eps;
  if (fgi_attr_float(node, "epsilon", 1e-5, &eps, st)) return -1;
  if (!(eps > 0)) return fgi_fail(node, st, "attribute 'epsilon' = %g must be > 0", eps);
  return 0;
}

static void vec_out(fg_tinfo *o, fg_dtype dt, int64_t c) {
  o->dtype = dt;
  o->rank = 1;
  o->dims[0] = c;
}

int fgi_infer_batch_norm(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                         fg_status *status) {
  if (need_nc(node, &in[0], status)) return -1;
  const int64_t c = in[0].dims[1];
  for (int i = 1; i <= 4; i++)
    if (need_vec(node, in, i, bn_names[i], c, status)) return -1;
  if (need_training(node, in, 5, status) || need_epsilon(node, status)) return -1;
  out[0] = in[0];
  for (int o = 1; o <= 3; o++)
    vec_out(&out[o], in[0].dtype, c);
  return 0;
}

/* running_mean, running_var (variables), mean, var (batch_norm's outputs 1
 * and 3), training. */
int fgi_infer_batch_norm_update(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                                fg_status *status) {
  static const char *const names[] = {"running_mean", "running_var", "mean", "var"};
  if (need_float(node, in, 0, names[0], status)) return -1;
  const int64_t c = in[0].rank == 1 ? in[0].dims[0] : -1;
  for (int i = 0; i < 4; i++)
    if (need_vec(node, in, i, names[i], c, status)) return -1;
  if (need_training(node, in, 4, status)) return -1;
  double m;
  if (fgi_attr_float(node, "momentum", 0.1, &m, status)) return -1;
  if (!(m >= 0 && m <= 1))
    return fgi_fail(node, status, "attribute 'momentum' = %g must be in [0, 1]", m);
  out[0] = in[0];
  return 0;
}

/* Input 0 (dy) is x's dtype and shape (x is input 1). */
static int dy_like_x(const fg_node *node, const fg_tinfo *in, fg_status *st) {
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_same_dtype(node, in, 0, 1, st)) return -1;
  int same = in[0].rank == in[1].rank;
  for (int d = 0; same && d < in[0].rank; d++)
    same = in[0].dims[d] < 0 || in[1].dims[d] < 0 || in[0].dims[d] == in[1].dims[d];
  if (!same)
    return fgi_fail(node, st, "input 0 (dy) shape %s differs from input 1 (x) shape %s",
                    fgi_shape(&in[0], s1), fgi_shape(&in[1], s2));
  return 0;
}

/* dy, x, scale, mean, inv_std, training -> dx, dscale, dshift. */
int fgi_infer_batch_norm_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                              fg_status *status) {
  static const char *const names[] = {"dy", "x", "scale", "mean", "inv_std"};
  if (need_nc(node, &in[1], status) || dy_like_x(node, in, status)) return -1;
  const int64_t c = in[1].dims[1];
  /* need_vec compares dtypes with input 0, dy, which is x's. */
  for (int i = 2; i <= 4; i++)
    if (need_vec(node, in, i, names[i], c, status)) return -1;
  if (need_training(node, in, 5, status)) return -1;
  out[0] = in[1];
  vec_out(&out[1], in[1].dtype, c);
  vec_out(&out[2], in[1].dtype, c);
  return 0;
}

/* layer_norm: x, scale, shift; scale and shift are x's last k dims. */
static int layer_norm_common(const fg_node *node, const fg_tinfo *x, const fg_tinfo *in, int first,
                             int *k_out, fg_status *st) {
  char s1[FGI_STR], s2[FGI_STR];
  int64_t k;
  if (!fg_dtype_is_float(x->dtype))
    return fgi_fail(node, st, "input x dtype %s is not allowed; it must be f32 or f64",
                    fg_dtype_name(x->dtype));
  if (fgi_attr_int(node, "normalized_rank", 0, 1, &k, st)) return -1;
  if (k < 1 || k > x->rank)
    return fgi_fail(node, st, "attribute 'normalized_rank' = %lld must be in [1, %d] (x is %s)",
                    (long long)k, x->rank, fgi_shape(x, s1));
  for (int i = first; i < first + 2; i++) {
    const char *what = i == first ? "scale" : "shift";
    int ok = in[i].dtype == x->dtype && in[i].rank == k;
    for (int d = 0; ok && d < k; d++) {
      const int64_t a = in[i].dims[d], b = x->dims[x->rank - k + d];
      ok = a < 0 || b < 0 || a == b;
    }
    if (!ok)
      return fgi_fail(node, st,
                      "input %d (%s) is %s %s; it must be x's last %lld dims with x's dtype "
                      "(x is %s %s)",
                      i, what, fg_dtype_name(in[i].dtype), fgi_shape(&in[i], s1), (long long)k,
                      fg_dtype_name(x->dtype), fgi_shape(x, s2));
  }
  *k_out = (int)k;
  return 0;
}

static void stats_out(fg_tinfo *o, const fg_tinfo *x, int lead) {
  o->dtype = x->dtype;
  o->rank = lead;
  for (int d = 0; d < lead; d++)
    o->dims[d] = x->dims[d];
}

int fgi_infer_layer_norm(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                         fg_status *status) {
  int k;
  if (layer_norm_common(node, &in[0], in, 1, &k, status) || need_epsilon(node, status)) return -1;
  out[0] = in[0];
  stats_out(&out[1], &in[0], in[0].rank - k);
  stats_out(&out[2], &in[0], in[0].rank - k);
  return 0;
}

/* dy, x, scale, mean, inv_std: scale stands in for the shift check too. */
int fgi_infer_layer_norm_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                              fg_status *status) {
  int k;
  fg_tinfo two[4] = {in[1], in[1], in[2], in[2]};
  if (dy_like_x(node, in, status) || layer_norm_common(node, &in[1], two, 2, &k, status)) return -1;
  out[0] = in[1];
  out[1] = in[2];
  out[2] = in[2];
  return 0;
}

/* group_norm's num_groups; instance_norm's is C (or unknown). */
static int groups_of(const fg_node *node, const fg_tinfo *x, int64_t *g, fg_status *st) {
  const int64_t c = x->dims[1];
  if (node->op == FG_OP_INSTANCE_NORM) {
    *g = c;
    return 0;
  }
  if (fgi_attr_int(node, "num_groups", 1, 0, g, st)) return -1;
  if (*g < 1)
    return fgi_fail(node, st, "attribute 'num_groups' = %lld must be >= 1", (long long)*g);
  if (c >= 0 && c % *g != 0)
    return fgi_fail(node, st, "attribute 'num_groups' = %lld does not divide C = %lld channels",
                    (long long)*g, (long long)c);
  return 0;
}

/* group_norm and instance_norm: x [N, C, ...], scale and shift [C]. */
int fgi_infer_group_norm(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                         fg_status *status) {
  int64_t g;
  if (need_nc(node, &in[0], status) || groups_of(node, &in[0], &g, status)) return -1;
  if (need_vec(node, in, 1, "scale", in[0].dims[1], status) ||
      need_vec(node, in, 2, "shift", in[0].dims[1], status) || need_epsilon(node, status))
    return -1;
  out[0] = in[0];
  for (int o = 1; o <= 2; o++) {
    out[o].dtype = in[0].dtype;
    out[o].rank = 2;
    out[o].dims[0] = in[0].dims[0];
    out[o].dims[1] = g;
  }
  return 0;
}

int fgi_infer_group_norm_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                              fg_status *status) {
  int64_t g;
  if (need_nc(node, &in[1], status) || dy_like_x(node, in, status) ||
      groups_of(node, &in[1], &g, status))
    return -1;
  if (need_vec(node, in, 2, "scale", in[1].dims[1], status)) return -1;
  out[0] = in[1];
  out[1] = in[2];
  out[2] = in[2];
  return 0;
}

/* About eight operations per element of x: two passes of statistics, the
 * normalisation and the affine map (the gradients about as many). */
int64_t fgi_flops_norm(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)node;
  (void)in;
  const int64_t e = fgi_elements(&out[0]);
  return e < 0 ? -1 : fgi_mul_sat(e, 8);
}

int fgi_parse_instance_norm(const fg_node *node, const fg_tinfo *in, fg_op_params *p,
                            fg_status *st) {
  if (in[0].rank < 2 || in[0].dims[1] < 1)
    return fgi_fail(node, st, "input 0 (x) needs a known channel count (axis 1)");
  p->norm.num_groups = in[0].dims[1];
  return 0;
}
