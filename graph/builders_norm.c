/* Builders of the normalization ops (include/flowgraph/graph.h says what
 * each computes). A missing scale or shift (.node < 0) becomes a fill of
 * ones or zeros, so the ops themselves always take three (or six) inputs
 * at fixed positions; the gradient reaching a fill is simply not used. */
#include <stdio.h>

#include "graph/builders_internal.h"
#include "graph/graph_internal.h"

/* `o`, or a fill of `value` shaped like x's dims from `from` on, which
 * must be known. */
static fg_output param_or_fill(fg_graph *g, const char *op, const char *what, fg_output o,
                               fg_output x, int from, double value) {
  if (o.node >= 0) return o;
  const fg_tinfo *t = fg_graph_tinfo(g, x);
  if (!t) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT, "%s: x (node %d output %d) does not exist", op, x.node,
                  x.index);
    return FG_NO_OUTPUT;
  }
  int64_t dims[FG_MAX_RANK];
  int n = 0;
  for (int d = from; d < t->rank && d >= 0; d++) {
    if (t->dims[d] < 0) {
      fg_graph_fail(g, FG_INVALID_ARGUMENT,
                    "%s: no %s given, and x's dim %d is unknown, so its default (%g) cannot be "
                    "made",
                    op, what, d, value);
      return FG_NO_OUTPUT;
    }
    dims[n++] = t->dims[d];
  }
  return fg_fill(g, t->dtype, n, dims, value);
}

static fg_output with_attrs(fg_graph *g, const char *op, const fg_output *in, int n_in,
                            const char *ia, int64_t iv, const char *fa, double fv) {
  fg_attrs *a = fg_attrs_new();
  if (!a) {
    fg_graph_fail(g, FG_RESOURCE_EXHAUSTED, "%s: out of memory", op);
    return FG_NO_OUTPUT;
  }
  if (ia) fg_attrs_set_int(a, ia, iv);
  if (fa) fg_attrs_set_float(a, fa, fv);
  fg_output r = fg_op(g, op, NULL, in, n_in, a);
  fg_attrs_free(a);
  return r;
}

/* A missing scale (shift) becomes ones (zeros) of [C]; C must be known. */
static int fill_channels(fg_graph *g, const char *api, fg_output x, fg_output *scale,
                         fg_output *shift) {
  const fg_tinfo *t = fg_graph_tinfo(g, x);
  if ((scale->node >= 0 && shift->node >= 0) || !t) return 0; /* the op reports a bad x */
  if (t->rank < 2) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT,
                  "%s: x has rank %d; it must be [N, C, ...] (rank >= 2) for a default scale "
                  "or shift of [C]",
                  api, t->rank);
    return -1;
  }
  if (t->dims[1] < 0) {
    fg_graph_fail(g, FG_INVALID_ARGUMENT,
                  "%s: no scale or shift given, and x's C (dim 1) is unknown", api);
    return -1;
  }
  if (scale->node < 0) *scale = fg_fill(g, t->dtype, 1, &t->dims[1], 1.0);
  if (shift->node < 0) *shift = fg_fill(g, t->dtype, 1, &t->dims[1], 0.0);
  return fg_graph_failed(g) ? -1 : 0;
}

fg_output fg_batch_norm(fg_graph *g, fg_output x, fg_output scale, fg_output shift,
                        fg_output running_mean, fg_output running_var, fg_output training,
                        double momentum, double epsilon) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  if (fill_channels(g, "fg_batch_norm", x, &scale, &shift) != 0) return FG_NO_OUTPUT;
  fg_output in[6] = {x, scale, shift, running_mean, running_var, training};
  fg_output y = with_attrs(g, "batch_norm", in, 6, NULL, 0, "epsilon", epsilon);
  if (fg_graph_failed(g)) return FG_NO_OUTPUT;
  /* The update reads the batch's mean and unbiased variance (outputs 1 and
   * 3), so it runs after y's node has read the running statistics. */
  fg_output up[5] = {running_mean, running_var, fg_output_at(y, 1), fg_output_at(y, 3), training};
  with_attrs(g, "batch_norm_update_stats", up, 5, NULL, 0, "momentum", momentum);
  return fg_graph_failed(g) ? FG_NO_OUTPUT : y;
}

fg_output fg_layer_norm(fg_graph *g, fg_output x, fg_output scale, fg_output shift,
                        int normalized_rank, double epsilon) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  const fg_tinfo *t = fg_graph_tinfo(g, x);
  if (t && (normalized_rank < 1 || normalized_rank > t->rank)) {
    /* The op's inference refuses too; here the fills would be wrong first. */
    fg_graph_fail(g, FG_INVALID_ARGUMENT,
                  "fg_layer_norm: normalized_rank = %d must be in [1, %d] (x's rank)",
                  normalized_rank, t->rank);
    return FG_NO_OUTPUT;
  }
  const int from = t ? t->rank - normalized_rank : 0;
  scale = param_or_fill(g, "fg_layer_norm", "scale", scale, x, from, 1.0);
  shift = param_or_fill(g, "fg_layer_norm", "shift", shift, x, from, 0.0);
  if (fg_graph_failed(g)) return FG_NO_OUTPUT;
  fg_output in[3] = {x, scale, shift};
  return with_attrs(g, "layer_norm", in, 3, "normalized_rank", normalized_rank, "epsilon", epsilon);
}

/* group_norm and instance_norm: scale and shift [C]. */
static fg_output channel_norm(fg_graph *g, const char *op, const char *api, fg_output x,
                              fg_output scale, fg_output shift, const char *ia, int64_t iv,
                              double epsilon) {
  if (!g || fg_graph_failed(g)) return FG_NO_OUTPUT;
  if (fill_channels(g, api, x, &scale, &shift) != 0) return FG_NO_OUTPUT;
  fg_output in[3] = {x, scale, shift};
  return with_attrs(g, op, in, 3, ia, iv, "epsilon", epsilon);
}

fg_output fg_group_norm(fg_graph *g, fg_output x, fg_output scale, fg_output shift,
                        int64_t num_groups, double epsilon) {
  return channel_norm(g, "group_norm", "fg_group_norm", x, scale, shift, "num_groups", num_groups,
                      epsilon);
}

fg_output fg_instance_norm(fg_graph *g, fg_output x, fg_output scale, fg_output shift,
                           double epsilon) {
  return channel_norm(g, "instance_norm", "fg_instance_norm", x, scale, shift, NULL, 0, epsilon);
}
