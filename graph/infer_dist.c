/* Shape inference for the data-parallel ops all_reduce and shard (see
 * graph/op_table.h and flowgraph/dist.h). */
#include "graph/infer_common.h"

int fgi_infer_all_reduce(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *st) {
  int mean;
  if (fgi_attr_flag(node, "mean", &mean, st)) return -1;
  if (!fgi_is_numeric(in[0].dtype))
    return fgi_fail(node, st, "input 0 dtype %s is not allowed; must be f32, f64, i32 or i64",
                    fg_dtype_name(in[0].dtype));
  for (int i = 1; i < node->n_inputs; i++)
    if (!fgi_dtype_valid(in[i].dtype))
      return fgi_fail(node, st, "input %d has invalid dtype %d", i, (int)in[i].dtype);
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
  if (b >= 0 && b % count != 0)
    return fgi_fail(node, st,
                    "input 0 has %lld rows (shape %s), which do not split into %lld equal shards",
                    (long long)b, fgi_shape(&in[0], s), (long long)count);
  out[0].dims[0] = b >= 0 ? b / count : FG_DIM_UNKNOWN;
  return 0;
}
