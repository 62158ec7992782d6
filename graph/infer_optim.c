/* Shape inference for the optimizer updates apply_sgd, apply_momentum and
 * apply_adam. Their state inputs (var, buf, m, v) come straight from
 * variables (fg_op checks the producers via op_def.mutable_inputs) and are
 * written in place, so every other tensor input must match the variable
 * exactly: a kernel walks them element by element with the variable's
 * shape. Inputs after the fixed ones are control inputs of any type.
 *
 * Hyper-parameters are attributes with torch.optim's defaults where torch
 * has one (beta1 0.9, beta2 0.999, epsilon 1e-8, weight_decay 0); momentum
 * has no sensible default and is required. The parse hooks below give the
 * kernels the same values (fg_momentum_params, fg_adam_params). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "graph/infer_common.h"
#include "graph/infer_grad.h"

/* Input i must have input ref's (a variable's) dtype and shape; `what`
 * and `ref_what` name the two. */
static int like_input(const fg_node *node, const fg_tinfo *in, int i, const char *what, int ref,
                      const char *ref_what, fg_status *st) {
  char s1[FGI_STR], s2[FGI_STR];
  if (in[i].dtype != in[ref].dtype)
    return fgi_fail(node, st, "input %d (%s) dtype %s does not match input %d (%s) dtype %s", i,
                    what, fg_dtype_name(in[i].dtype), ref, ref_what, fg_dtype_name(in[ref].dtype));
  int same = in[i].rank == in[ref].rank;
  for (int d = 0; same && d < in[ref].rank; d++)
    if (in[i].dims[d] >= 0 && in[ref].dims[d] >= 0 && in[i].dims[d] != in[ref].dims[d]) same = 0;
  if (!same)
    return fgi_fail(node, st, "input %d (%s) shape %s does not match input %d (%s) shape %s", i,
                    what, fgi_shape(&in[i], s1), ref, ref_what, fgi_shape(&in[ref], s2));
  return 0;
}

/* Input i must have input 0's (the variable's) dtype and shape. */
static int like_var(const fg_node *node, const fg_tinfo *in, int i, const char *what,
                    fg_status *st) {
  return like_input(node, in, i, what, 0, "var", st);
}

/* Input i must be a rank-0 scalar of a float dtype (or any numeric dtype
 * when `numeric`). */
static int scalar(const fg_node *node, const fg_tinfo *in, int i, const char *what, int numeric,
                  fg_status *st) {
  char s[FGI_STR];
  fg_dtype dt = in[i].dtype;
  if (numeric ? !fgi_is_numeric(dt) : !fg_dtype_is_float(dt))
    return fgi_fail(node, st, "input %d (%s) dtype %s is not allowed; %s must be %s", i, what,
                    fg_dtype_name(dt), what, numeric ? "f32, f64, i32 or i64" : "f32 or f64");
  if (in[i].rank != 0)
    return fgi_fail(node, st, "input %d (%s) shape %s must be a scalar (rank 0)", i, what,
                    fgi_shape(&in[i], s));
  return 0;
}

/* A float attribute in [lo, hi) (hi_open) or [lo, hi]. */
static int hyper(const fg_node *node, const char *name, double dflt, double lo, double hi,
                 int hi_open, double *v, fg_status *st) {
  if (fgi_attr_float(node, name, dflt, v, st)) return -1;
  if (*v < lo || *v > hi || (hi_open && *v == hi))
    return fgi_fail(node, st, "attribute '%s' = %g is out of range %s%g, %g%s", name, *v, "[", lo,
                    hi, hi_open ? ")" : "]");
  return 0;
}

/* sufficient_factor_apply_sgd: the gradient is a^T b, a (input 1) [rows,
 * m] and b (input 3) [rows, n] of the variable's dtype, the variable [m,
 * n]. The op table's arity guarantees the 4 inputs. */
static int check_product(const fg_node *node, const fg_tinfo *in, fg_status *st) {
  char s0[FGI_STR], s1[FGI_STR], s3[FGI_STR];
  const fg_tinfo *v = &in[0], *a = &in[1], *b = &in[3];
  if (a->dtype != v->dtype || b->dtype != v->dtype)
    return fgi_fail(node, st,
                    "input 1 (a) is %s and input 3 (b) %s; both must be input "
                    "0's (var) %s",
                    fg_dtype_name(a->dtype), fg_dtype_name(b->dtype), fg_dtype_name(v->dtype));
  /* Unknown dims (-1) match anything; the kernel checks the values. */
  const int64_t rows_a = a->rank == 2 ? a->dims[0] : 0, rows_b = b->rank == 2 ? b->dims[0] : 0;
  int ok = v->rank == 2 && a->rank == 2 && b->rank == 2 &&
           (rows_a < 0 || rows_b < 0 || rows_a == rows_b) &&
           (a->dims[1] < 0 || v->dims[0] < 0 || a->dims[1] == v->dims[0]) &&
           (b->dims[1] < 0 || v->dims[1] < 0 || b->dims[1] == v->dims[1]);
  if (!ok)
    return fgi_fail(node, st,
                    "the gradient a^T b of input 1 (a) %s and input 3 (b) %s "
                    "must have input 0's (var) shape %s: a [rows, m], b [rows, n], var [m, n]",
                    fgi_shape(a, s1), fgi_shape(b, s3), fgi_shape(v, s0));
  return 0;
}

static int check_momentum(const fg_node *node, fg_status *st) {
  double m;
  int nesterov;
  if (!fg_attrs_find(&node->attrs, "momentum"))
    return fgi_fail(node, st, "missing attribute 'momentum' (float)");
  if (hyper(node, "momentum", 0.0, 0.0, 1e300, 0, &m, st)) return -1;
  if (fgi_attr_flag(node, "nesterov", &nesterov, st)) return -1;
  /* As torch.optim.SGD: without momentum Nesterov is meaningless. */
  if (nesterov && m <= 0) return fgi_fail(node, st, "nesterov = 1 needs momentum > 0, got %g", m);
  return 0;
}

static int check_adam(const fg_node *node, fg_status *st) {
  double v;
  if (hyper(node, "beta1", 0.9, 0.0, 1.0, 1, &v, st) ||
      hyper(node, "beta2", 0.999, 0.0, 1.0, 1, &v, st) ||
      hyper(node, "epsilon", 1e-8, 0.0, 1e300, 0, &v, st) ||
      hyper(node, "weight_decay", 0.0, 0.0, 1e300, 0, &v, st) ||
      hyper(node, "l2", 0.0, 0.0, 1e300, 0, &v, st))
    return -1;
  return 0;
}

/* Control inputs (from `from` on) may have any valid dtype. */
static int control_inputs(const fg_node *node, const fg_tinfo *in, int from, fg_status *st) {
  for (int i = from; i < node->n_inputs; i++)
    if (!fgi_dtype_valid(in[i].dtype))
      return fgi_fail(node, st, "input %d (control) has invalid dtype %d", i, (int)in[i].dtype);
  return 0;
}

int fgi_infer_apply(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  if (!fg_dtype_is_float(in[0].dtype))
    return fgi_fail(node, status, "input 0 (var) dtype %s is not allowed; %s needs f32 or f64",
                    fg_dtype_name(in[0].dtype), fgi_opname(node));
  int n_fixed;
  switch (node->op) {
  case FG_OP_APPLY_SGD:
    n_fixed = 3;
    if (like_var(node, in, 1, "grad", status) || scalar(node, in, 2, "lr", 0, status)) return -1;
    break;
  case FG_OP_APPLY_MOMENTUM:
    n_fixed = 4;
    if (like_var(node, in, 1, "buf", status) || like_var(node, in, 2, "grad", status) ||
        scalar(node, in, 3, "lr", 0, status) || check_momentum(node, status))
      return -1;
    break;
  case FG_OP_APPLY_ADAM:
    n_fixed = 6;
    if (like_var(node, in, 1, "m", status) || like_var(node, in, 2, "v", status) ||
        like_var(node, in, 3, "grad", status) || scalar(node, in, 4, "lr", 0, status) ||
        scalar(node, in, 5, "step", 1, status) || check_adam(node, status))
      return -1;
    break;
  default: return fgi_fail(node, status, "not an optimizer update");
  }
  if (control_inputs(node, in, n_fixed, status)) return -1;
  out[0] = in[0];
  return 0;
}

/* multi_apply_sgd, _momentum and _adam: attribute n, then lists of n
 * tensors (var, the rule's state, grad), each entry k of a list like
 * variable k (one float dtype for all), then the single update's scalars
 * and control inputs. */
int fgi_infer_multi_apply(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                          fg_status *status) {
  static const char *const roles[3][4] = {
      {"var", "grad"}, {"var", "buf", "grad"}, {"var", "m", "v", "grad"}};
  const int rule = fg_op_table[node->op].mutable_lists - 1, lists = rule + 2;
  const int adam = node->op == FG_OP_MULTI_APPLY_ADAM;
  int64_t n;
  if (fgi_attr_int(node, "n", 1, 0, &n, status)) return -1;
  if (n < 1 || n > (INT32_MAX - 2) / lists)
    return fgi_fail(node, status, "attribute 'n' = %lld must be >= 1", (long long)n);
  const int fixed = lists * (int)n + 1 + adam;
  if (node->n_inputs < fixed)
    return fgi_fail(node, status,
                    "n = %lld variables need %d inputs (%d lists of n, then %s), got %d",
                    (long long)n, fixed, lists, adam ? "lr and step" : "lr", node->n_inputs);
  char what[48], ref[32];
  for (int k = 0; k < (int)n; k++) {
    if (!fg_dtype_is_float(in[k].dtype) || in[k].dtype != in[0].dtype)
      return fgi_fail(node, status, "input %d (var %d) dtype %s is not allowed; %s needs %s", k, k,
                      fg_dtype_name(in[k].dtype), fgi_opname(node),
                      k ? fg_dtype_name(in[0].dtype) : "f32 or f64");
    snprintf(ref, sizeof ref, "var %d", k);
    for (int l = 1; l < lists; l++) {
      snprintf(what, sizeof what, "%s %d", roles[rule][l], k);
      if (like_input(node, in, l * (int)n + k, what, k, ref, status)) return -1;
    }
  }
  /* Two entries writing one variable would race in the kernel. */
  const int n_mut = (lists - 1) * (int)n;
  for (int i = 0; i < n_mut; i++)
    for (int j = 0; j < i; j++)
      if (node->inputs[i].node == node->inputs[j].node)
        return fgi_fail(node, status,
                        "inputs %d and %d are the same variable; each is written once", j, i);
  if (scalar(node, in, fixed - 1 - adam, "lr", 0, status) ||
      (adam && scalar(node, in, fixed - 1, "step", 1, status)) ||
      (rule == 1 && check_momentum(node, status)) || (adam && check_adam(node, status)) ||
      control_inputs(node, in, fixed, status))
    return -1;
  out[0] = in[0];
  return 0;
}

/* all_reduce_apply_sgd(var, grad, lr, [rows, sums,] ctrl...; mean,
 * weighted) and sufficient_factor_apply_sgd(var, a, lr, b, [rows, sums,]
 * ctrl...; mean, weighted): the gradient (or its factors) reduced over the
 * ranks, then var -= lr * it. Rows and sums follow the fixed inputs. */
int fgi_infer_collective_sgd(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                             fg_status *status) {
  if (!fg_dtype_is_float(in[0].dtype))
    return fgi_fail(node, status, "input 0 (var) dtype %s is not allowed; %s needs f32 or f64",
                    fg_dtype_name(in[0].dtype), fgi_opname(node));
  const int factors = node->op == FG_OP_SUFFICIENT_FACTOR_APPLY_SGD, n_fixed = factors ? 4 : 3;
  if ((factors ? check_product(node, in, status) : like_var(node, in, 1, "grad", status)) ||
      scalar(node, in, 2, "lr", 0, status) || fgi_check_collective(node, in, 1, n_fixed, status))
    return -1;
  if (control_inputs(node, in, n_fixed, status)) return -1;
  out[0] = in[0];
  return 0;
}

/* matmul_apply_sgd(var, a, lr, b, ctrl...): var -= lr * a^T b, the
 * gradient's product made in the update's GEMM (no communicator). */
int fgi_infer_matmul_apply_sgd(const fg_node *node, const fg_tinfo *in, fg_tinfo *out,
                               fg_status *status) {
  if (!fg_dtype_is_float(in[0].dtype))
    return fgi_fail(node, status, "input 0 (var) dtype %s is not allowed; %s needs f32 or f64",
                    fg_dtype_name(in[0].dtype), fgi_opname(node));
  if (check_product(node, in, status) || scalar(node, in, 2, "lr", 0, status) ||
      control_inputs(node, in, 4, status))
    return -1;
  out[0] = in[0];
  return 0;
}

/* The product's multiply-adds (2 R M N) and the update's 2 per element. */
int64_t fgi_flops_matmul_apply_sgd(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)node, (void)out;
  const int64_t e = fgi_elements(&in[0]), rows = in[1].rank == 2 ? in[1].dims[0] : -1;
  if (e < 0 || rows < 0) return -1;
  const int64_t per = rows < INT64_MAX / 2 - 1 ? 2 * rows + 2 : INT64_MAX;
  return fgi_mul_sat(e, per);
}

/* Per element: sgd 2 (mul, sub); momentum 4 (2 for buf, 2 for var; 6 with
 * Nesterov); adam 14 (m 3, v 4, two bias corrections, sqrt, add, div, mul,
 * sub) plus 2 with weight decay and 2 with an L2 term. Rough counts, as for
 * the elementwise ops. */
static int64_t flops_per_element(const fg_node *node) {
  switch (node->op) {
  case FG_OP_APPLY_SGD:
  case FG_OP_ALL_REDUCE_APPLY_SGD:
  case FG_OP_SUFFICIENT_FACTOR_APPLY_SGD:
  case FG_OP_MULTI_APPLY_SGD: return 2;
  case FG_OP_APPLY_MOMENTUM:
  case FG_OP_MULTI_APPLY_MOMENTUM: return fg_attr_int_or(node, "nesterov", 0) ? 6 : 4;
  default:
    return 14 + (fg_attr_float_or(node, "weight_decay", 0.0) > 0 ? 2 : 0) +
           (fg_attr_float_or(node, "l2", 0.0) > 0 ? 2 : 0);
  }
}

int64_t fgi_flops_apply(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)out;
  int64_t e = fgi_elements(&in[0]);
  return e < 0 ? -1 : fgi_mul_sat(e, flops_per_element(node));
}

/* The sum over the n variables (inference has checked the lists). */
int64_t fgi_flops_multi_apply(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)out;
  const int64_t n = fg_attr_int_or(node, "n", 0);
  int64_t e = 0;
  for (int64_t k = 0; k < n && k < node->n_inputs; k++) {
    const int64_t ek = fgi_elements(&in[k]);
    if (ek < 0) return -1;
    e += ek;
  }
  return fgi_mul_sat(e, flops_per_element(node));
}
