/* Shape inference for the data-parallel ops all_reduce and shard (see
 * graph/op_table.h and flowgraph/dist.h). */
#include "flowgraph/dist.h"
#include "graph/infer_common.h"

/* The attributes mean and weighted of a collective reducing `in[0]` (an
 * all_reduce's input, an apply_sgd's gradient), whose weighted form reads
 * this rank's rows at in[first] and the all-reduced [sum of rows, sum of
 * rows^2] at in[first + 1]. */
int fgi_check_collective(const fg_node *node, const fg_tinfo *in, int x, int first, fg_status *st) {
  int mean, weighted;
  char s1[FGI_STR], s2[FGI_STR];
  if (fgi_attr_flag(node, "mean", &mean, st) || fgi_attr_flag(node, "weighted", &weighted, st))
    return -1;
  if (!weighted) return 0;
  if (in[x].dtype != FG_F32 && in[x].dtype != FG_F64)
    return fgi_fail(node, st,
                    "input %d dtype %s is not allowed with weighted = 1; must be f32 or f64", x,
                    fg_dtype_name(in[x].dtype));
  if (node->n_inputs < first + 2)
    return fgi_fail(node, st,
                    "weighted = 1 needs %d inputs (then rows, [sum of rows, sum of rows^2]), "
                    "got %d",
                    first + 2, node->n_inputs);
  const fg_tinfo *r = &in[first], *s = &in[first + 1];
  if (r->dtype != FG_F64 || r->rank != 0 || s->dtype != FG_F64 || s->rank != 1 ||
      (s->dims[0] != 2 && s->dims[0] != FG_DIM_UNKNOWN))
    return fgi_fail(node, st,
                    "weighted = 1: input %d (rows) must be an f64 scalar and input %d an f64 [2], "
                    "got %s %s and %s %s",
                    first, first + 1, fg_dtype_name(r->dtype), fgi_shape(r, s1),
                    fg_dtype_name(s->dtype), fgi_shape(s, s2));
  return 0;
}

int fgi_infer_all_reduce(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *st) {
  if (!fgi_is_numeric(in[0].dtype))
    return fgi_fail(node, st, "input 0 dtype %s is not allowed; must be f32, f64, i32 or i64",
                    fg_dtype_name(in[0].dtype));
  for (int i = 1; i < node->n_inputs; i++)
    if (!fgi_dtype_valid(in[i].dtype))
      return fgi_fail(node, st, "input %d has invalid dtype %d", i, (int)in[i].dtype);
  /* weighted (fg_data_parallel with batch inputs): the mean of the ranks'
   * inputs weighted by their rows; input 1 is this rank's rows (f64
   * scalar), input 2 the all-reduced [sum of rows, sum of rows^2] (f64
   * [2]); later inputs only order it. */
  if (fgi_check_collective(node, in, 0, 1, st)) return -1;
  out[0] = in[0];
  return 0;
}

int fgi_infer_shard(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *st) {
  int64_t index, count;
  char s[FGI_STR];
  if (fgi_attr_int(node, "count", 1, 1, &count, st)) return -1;
  if (fgi_attr_int(node, "index", 1, 0, &index, st)) return -1;
  if (count < 1 || count > 1 << 20)
    return fgi_fail(node, st, "attribute 'count' = %lld must be in [1, 1048576]", (long long)count);
  if (index < 0 || index >= count)
    return fgi_fail(node, st, "attribute 'index' = %lld is out of range [0, %lld)",
                    (long long)index, (long long)count);
  if (in[0].rank < 1)
    return fgi_fail(node, st, "input 0 shape %s must have rank >= 1 (rows to split)",
                    fgi_shape(&in[0], s));
  out[0] = in[0];
  int64_t b = in[0].dims[0];
  if (b >= 0 && b < count)
    return fgi_fail(node, st,
                    "input 0 has %lld rows (shape %s), fewer than the %lld shards: shard %lld "
                    "would be empty",
                    (long long)b, fgi_shape(&in[0], s), (long long)count, (long long)(count - 1));
  out[0].dims[0] = b >= 0 ? fg_shard_rows(b, count, index, NULL) : FG_DIM_UNKNOWN;
  return 0;
}
