/* Shape inference for the pooling ops (NCHW, torch.nn.functional's
 * semantics) and their gradients, and the parse hook that turns the window
 * attributes into fg_pool2d_params. Attribute values may come from an
 * untrusted file: every one is range-checked here before any arithmetic,
 * so the size formulas below cannot overflow or divide by zero. */
#include "graph/infer_common.h"

/* Window attributes above this are refused: no real window is that large,
 * and the bound keeps d * (k - 1) + pads well inside int64. */
#define POOL_ATTR_MAX 2147483647LL

static const char *const pad_side[4] = {"top", "left", "bottom", "right"};
static const char *const dim_name[2] = {"height", "width"};

static int is_max(const fg_node *n) {
  return n->op == FG_OP_MAX_POOL2D || n->op == FG_OP_MAX_POOL2D_GRAD;
}

/* An optional list of exactly `want` ints, each in [lo, POOL_ATTR_MAX];
 * absent: *found = 0 and v untouched. */
static int int_list(const fg_node *node, const char *name, int required, int want, int64_t lo,
                    int64_t *v, int *found, fg_status *st) {
  const int64_t *a;
  int n;
  char s[FGI_STR];
  if (fgi_attr_ints(node, name, required, &a, &n, st)) return -1;
  *found = a != NULL || n >= 0;
  if (!*found) return 0;
  if (n != want)
    return fgi_fail(node, st, "attribute '%s' = %s has %d values; it needs %d", name,
                    fgi_ints(a, n, s), n, want);
  for (int i = 0; i < n; i++) {
    if (a[i] < lo)
      return fgi_fail(node, st, "attribute '%s' = %s: value %d is %lld; it must be >= %lld", name,
                      fgi_ints(a, n, s), i, (long long)a[i], (long long)lo);
    if (a[i] > POOL_ATTR_MAX)
      return fgi_fail(node, st, "attribute '%s' = %s: value %d is %lld, above %lld", name,
                      fgi_ints(a, n, s), i, (long long)a[i], POOL_ATTR_MAX);
    v[i] = a[i];
  }
  return 0;
}

/* The window attributes of max_pool2d, avg_pool2d and their gradients,
 * checked on their own (no shapes needed). */
static int pool_attrs(const fg_node *node, fg_pool2d_params *p, fg_status *st) {
  int found;
  int64_t cip = 1;
  if (int_list(node, "kernel", 1, 2, 1, p->kernel, &found, st)) return -1;
  p->strides[0] = p->kernel[0];
  p->strides[1] = p->kernel[1];
  if (int_list(node, "strides", 0, 2, 1, p->strides, &found, st)) return -1;
  for (int i = 0; i < 4; i++)
    p->pads[i] = 0;
  if (int_list(node, "pads", 0, 4, 0, p->pads, &found, st)) return -1;
  p->dilations[0] = p->dilations[1] = 1;
  if (is_max(node) && int_list(node, "dilations", 0, 2, 1, p->dilations, &found, st)) return -1;
  if (fgi_attr_flag(node, "ceil_mode", &p->ceil_mode, st)) return -1;
  p->count_include_pad = 0;
  if (!is_max(node)) {
    if (fgi_attr_int(node, "count_include_pad", 0, 1, &cip, st)) return -1;
    if (cip != 0 && cip != 1)
      return fgi_fail(node, st, "attribute 'count_include_pad' = %lld must be 0 or 1",
                      (long long)cip);
    p->count_include_pad = (int)cip;
  }
  /* torch refuses a pad above half the kernel: such a window could lie
   * wholly in the padding, with no input element to take. */
  for (int i = 0; i < 4; i++) {
    const int64_t k = p->kernel[i % 2];
    if (p->pads[i] > k / 2)
      return fgi_fail(node, st,
                      "attribute 'pads' %s pad %lld is larger than half the kernel's %s %lld",
                      pad_side[i], (long long)p->pads[i], dim_name[i % 2], (long long)k);
  }
  return 0;
}

/* Output size along one spatial dim (torch's pooling_output_shape, with
 * separate begin and end pads); an unknown input gives unknown. */
static int out_dim(const fg_node *node, const fg_pool2d_params *p, int d, int64_t in, int64_t *out,
                   fg_status *st) {
  const int64_t k = p->kernel[d], s = p->strides[d], dl = p->dilations[d];
  const int64_t pb = p->pads[d], pe = p->pads[d + 2];
  if (in < 0) {
    *out = FG_DIM_UNKNOWN;
    return 0;
  }
  const int64_t eff = dl * (k - 1) + 1, padded = in + pb + pe;
  if (eff > padded) {
    if (dl > 1)
      return fgi_fail(node, st,
                      "kernel %s %lld (dilated by %lld to %lld) is larger than the padded input "
                      "%s %lld (%lld + pads %lld and %lld)",
                      dim_name[d], (long long)k, (long long)dl, (long long)eff, dim_name[d],
                      (long long)padded, (long long)in, (long long)pb, (long long)pe);
    return fgi_fail(node, st,
                    "kernel %s %lld is larger than the padded input %s %lld (%lld + pads %lld "
                    "and %lld)",
                    dim_name[d], (long long)k, dim_name[d], (long long)padded, (long long)in,
                    (long long)pb, (long long)pe);
  }
  int64_t o = (padded - eff + (p->ceil_mode ? s - 1 : 0)) / s + 1;
  /* ceil_mode: the last window must start inside the input or its
   * leading padding, never wholly in the trailing padding. */
  if (p->ceil_mode && (o - 1) * s >= in + pb) o--;
  if (o <= 0)
    return fgi_fail(node, st, "output %s %lld is not positive (input %s %lld)", dim_name[d],
                    (long long)o, dim_name[d], (long long)in);
  *out = o;
  return 0;
}

/* x must be a rank-4 f32/f64 tensor, NCHW. */
static int check_x(const fg_node *node, const fg_tinfo *x, int i, const char *what, fg_status *st) {
  char s[FGI_STR];
  if (x->rank != 4)
    return fgi_fail(node, st, "input %d (%s) shape %s has rank %d; pooling needs NCHW, rank 4", i,
                    what, fgi_shape(x, s), x->rank);
  if (!fg_dtype_is_float(x->dtype))
    return fgi_fail(node, st, "input %d (%s) dtype %s is not allowed; pooling needs f32 or f64", i,
                    what, fg_dtype_name(x->dtype));
  return 0;
}

/* The forward output's shape for input x, by op family. */
static int forward_shape(const fg_node *node, const fg_tinfo *x, fg_tinfo *y, fg_status *st) {
  *y = *x;
  switch (node->op) {
  case FG_OP_MAX_POOL2D:
  case FG_OP_AVG_POOL2D:
  case FG_OP_MAX_POOL2D_GRAD:
  case FG_OP_AVG_POOL2D_GRAD: {
    fg_pool2d_params p;
    if (pool_attrs(node, &p, st)) return -1;
    for (int d = 0; d < 2; d++)
      if (out_dim(node, &p, d, x->dims[2 + d], &y->dims[2 + d], st)) return -1;
    return 0;
  }
  case FG_OP_ADAPTIVE_AVG_POOL2D: {
    int found;
    int64_t os[2];
    if (int_list(node, "output_size", 1, 2, 1, os, &found, st)) return -1;
    y->dims[2] = os[0];
    y->dims[3] = os[1];
    break;
  }
  default: /* the global pools; the adaptive gradient takes dy's size */
    y->dims[2] = y->dims[3] = 1;
    break;
  }
  /* An empty plane has no mean or maximum. */
  for (int d = 2; d < 4; d++)
    if (x->dims[d] == 0)
      return fgi_fail(node, st, "input %s is 0; an empty plane has no %s", dim_name[d - 2],
                      node->op == FG_OP_GLOBAL_MAX_POOL || node->op == FG_OP_GLOBAL_MAX_POOL_GRAD
                          ? "maximum"
                          : "mean");
  return 0;
}

int fgi_infer_pool(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  if (check_x(node, &in[0], 0, "x", status)) return -1;
  if (forward_shape(node, &in[0], &out[0], status)) return -1;
  return fgi_check_bytes(node, &out[0], status);
}

/* The gradients (dy, x) -> dx: x's shape, and dy must be the forward
 * output's shape for that x. */
int fgi_infer_pool_grad(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  char s1[FGI_STR], s2[FGI_STR], s3[FGI_STR];
  fg_tinfo y;
  if (check_x(node, &in[1], 1, "x", status) || check_x(node, &in[0], 0, "dy", status)) return -1;
  if (fgi_same_dtype(node, in, 1, 0, status)) return -1;
  if (forward_shape(node, &in[1], &y, status)) return -1;
  /* The adaptive gradient's window count comes from dy itself. */
  if (node->op == FG_OP_ADAPTIVE_AVG_POOL2D_GRAD) {
    y.dims[2] = in[0].dims[2];
    y.dims[3] = in[0].dims[3];
    for (int d = 2; d < 4; d++)
      if (in[0].dims[d] == 0)
        return fgi_fail(node, status, "input 0 (dy) shape %s has %s 0", fgi_shape(&in[0], s1),
                        dim_name[d - 2]);
  }
  for (int d = 0; d < 4; d++)
    if (in[0].dims[d] >= 0 && y.dims[d] >= 0 && in[0].dims[d] != y.dims[d])
      return fgi_fail(node, status,
                      "input 0 (dy) shape %s is not the pooled shape %s of input 1 (x) shape %s",
                      fgi_shape(&in[0], s1), fgi_shape(&y, s2), fgi_shape(&in[1], s3));
  out[0] = in[1];
  return fgi_check_bytes(node, &out[0], status);
}

int fgi_parse_pool2d(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  (void)in;
  return pool_attrs(node, &p->pool2d, st);
}

/* One compare or add per window element. */
int64_t fgi_flops_pool(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  const fg_attr *k = fg_attrs_find(&node->attrs, "kernel");
  int64_t e = fgi_elements(&out[0]);
  if (node->op == FG_OP_GLOBAL_AVG_POOL || node->op == FG_OP_GLOBAL_MAX_POOL ||
      node->op == FG_OP_ADAPTIVE_AVG_POOL2D)
    return fgi_elements(&in[0]);
  if (e < 0 || !k || k->type != FG_ATTR_INTS || k->n != 2 || k->ints[0] < 0 || k->ints[1] < 0)
    return -1;
  return fgi_mul_sat(e, fgi_mul_sat(k->ints[0], k->ints[1]));
}
