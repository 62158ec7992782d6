/* Internal builders (graph/builders_internal.h): pack attributes, call
 * fg_op(). Values are checked by shape inference, as for every builder. */
#include <stdlib.h>

#include "graph/builders_internal.h"
#include "graph/graph_internal.h"

static int skip(fg_graph *g) { return !g || fg_graph_failed(g); }

fg_output fg_build_finish(fg_graph *g, const char *op, const fg_output *in, int n, fg_attrs *a,
                          int bad) {
  fg_output o;
  if (bad) {
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "%s: out of memory building attributes", op);
    o = FG_NO_OUTPUT;
  } else {
    o = fg_op(g, op, NULL, in, n, a);
  }
  fg_attrs_free(a);
  return o;
}

static fg_output fixed(fg_graph *g, const char *op, const fg_output *in, int n) {
  return skip(g) ? FG_NO_OUTPUT : fg_op(g, op, NULL, in, n, NULL);
}

fg_output fg_erf(fg_graph *g, fg_output x) { return fixed(g, "erf", &x, 1); }

fg_output fg_reshape_like(fg_graph *g, fg_output x, fg_output like) {
  fg_output in[2] = {x, like};
  return fixed(g, "reshape_like", in, 2);
}

fg_output fg_broadcast_like(fg_graph *g, fg_output x, fg_output like) {
  fg_output in[2] = {x, like};
  return fixed(g, "broadcast_like", in, 2);
}

fg_output fg_sum_to(fg_graph *g, fg_output x, fg_output like) {
  fg_output in[2] = {x, like};
  return fixed(g, "sum_to", in, 2);
}

fg_output fg_gather_grad(fg_graph *g, fg_output dy, fg_output indices, fg_output like) {
  fg_output in[3] = {dy, indices, like};
  return fixed(g, "gather_grad", in, 3);
}

fg_output fg_group(fg_graph *g, const fg_output *inputs, int n) {
  return fixed(g, "group", inputs, n);
}

fg_output fg_expand_dims(fg_graph *g, fg_output x, const int64_t *axes, int n_axes) {
  if (skip(g)) return FG_NO_OUTPUT;
  if (n_axes < 0 || (n_axes > 0 && !axes)) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "expand_dims: %d axes given with axes=%p", n_axes,
                  (const void *)axes);
    return FG_NO_OUTPUT;
  }
  fg_attrs *a = fg_attrs_new();
  int bad = !a || fg_attrs_set_ints(a, "axes", axes, n_axes) != 0;
  return fg_build_finish(g, "expand_dims", &x, 1, a, bad);
}

fg_output fg_build_int(fg_graph *g, const char *op, const fg_output *in, int n, const char *attr,
                       int64_t v) {
  if (skip(g)) return FG_NO_OUTPUT;
  fg_attrs *a = fg_attrs_new();
  int bad = !a || fg_attrs_set_int(a, attr, v) != 0;
  return fg_build_finish(g, op, in, n, a, bad);
}

fg_output fg_numel(fg_graph *g, fg_output x, fg_dtype dtype) {
  return fg_build_int(g, "numel", &x, 1, "dtype", dtype);
}

fg_output fg_slice_grad(fg_graph *g, fg_output dy, fg_output like, int rank, const int64_t *begin,
                        const int64_t *size) {
  if (skip(g)) return FG_NO_OUTPUT;
  if (rank < 0 || (rank > 0 && (!begin || !size))) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "slice_grad: rank %d with begin=%p size=%p", rank,
                  (const void *)begin, (const void *)size);
    return FG_NO_OUTPUT;
  }
  fg_output in[2] = {dy, like};
  fg_attrs *a = fg_attrs_new();
  int bad = !a || fg_attrs_set_ints(a, "begin", begin, rank) != 0 ||
            fg_attrs_set_ints(a, "size", size, rank) != 0;
  return fg_build_finish(g, "slice_grad", in, 2, a, bad);
}

/* fixed inputs followed by the control inputs, in one array. */
static fg_output apply(fg_graph *g, const char *op, const fg_output *fixed_in, int n_fixed,
                       const fg_output *ctrl, int n_ctrl, fg_attrs *a, int bad) {
  if (n_ctrl < 0 || (n_ctrl > 0 && !ctrl) || n_ctrl > 1 << 20) {
    fg_attrs_free(a);
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "%s: %d control inputs given with ctrl=%p", op, n_ctrl,
                  (const void *)ctrl);
    return FG_NO_OUTPUT;
  }
  fg_output *in = malloc((size_t)(n_fixed + n_ctrl) * sizeof *in);
  if (!in) {
    fg_attrs_free(a);
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "%s: out of memory", op);
    return FG_NO_OUTPUT;
  }
  for (int i = 0; i < n_fixed; i++)
    in[i] = fixed_in[i];
  for (int i = 0; i < n_ctrl; i++)
    in[n_fixed + i] = ctrl[i];
  fg_output o = fg_build_finish(g, op, in, n_fixed + n_ctrl, a, bad);
  free(in);
  return o;
}

fg_output fg_apply_sgd(fg_graph *g, fg_output var, fg_output grad, fg_output lr,
                       const fg_output *ctrl, int n_ctrl) {
  if (skip(g)) return FG_NO_OUTPUT;
  fg_output in[3] = {var, grad, lr};
  return apply(g, "apply_sgd", in, 3, ctrl, n_ctrl, NULL, 0);
}

fg_output fg_apply_momentum(fg_graph *g, fg_output var, fg_output buf, fg_output grad, fg_output lr,
                            double momentum, int nesterov, const fg_output *ctrl, int n_ctrl) {
  if (skip(g)) return FG_NO_OUTPUT;
  fg_output in[4] = {var, buf, grad, lr};
  fg_attrs *a = fg_attrs_new();
  int bad = !a || fg_attrs_set_float(a, "momentum", momentum) != 0 ||
            fg_attrs_set_int(a, "nesterov", nesterov) != 0;
  return apply(g, "apply_momentum", in, 4, ctrl, n_ctrl, a, bad);
}

fg_output fg_apply_adam(fg_graph *g, fg_output var, fg_output m, fg_output v, fg_output grad,
                        fg_output lr, fg_output step, double beta1, double beta2, double epsilon,
                        double weight_decay, const fg_output *ctrl, int n_ctrl) {
  if (skip(g)) return FG_NO_OUTPUT;
  fg_output in[6] = {var, m, v, grad, lr, step};
  fg_attrs *a = fg_attrs_new();
  int bad = !a || fg_attrs_set_float(a, "beta1", beta1) != 0 ||
            fg_attrs_set_float(a, "beta2", beta2) != 0 ||
            fg_attrs_set_float(a, "epsilon", epsilon) != 0 ||
            fg_attrs_set_float(a, "weight_decay", weight_decay) != 0;
  return apply(g, "apply_adam", in, 6, ctrl, n_ctrl, a, bad);
}
