/* fused_elementwise: shape inference, parameters and FLOPs from its
 * program (graph/fused_program.h). The output is the NumPy broadcast of
 * every input, in the one float dtype among them. */
#include <string.h>

#include "graph/fused_program.h"
#include "graph/infer_common.h"

/* The node's program, parsed and checked against its inputs' dtypes. */
static int read_program(const fg_node *node, const fg_tinfo *in, fg_fused_params *p, fg_dtype *dt,
                        fg_status *st) {
  const fg_attr *a = fg_attrs_find(&node->attrs, "program");
  if (!a || a->type != FG_ATTR_STRING || !a->s)
    return fgi_fail(node, st, "missing attribute 'program' (string)");
  char err[320];
  if (fg_fused_parse(a->s, node->n_inputs, p, err, sizeof err) != 0)
    return fgi_fail(node, st, "%s", err);
  fg_dtype dts[FG_FUSED_MAX_INPUTS];
  for (int i = 0; i < node->n_inputs; i++)
    dts[i] = in[i].dtype;
  if (fg_fused_check_dtypes(p, dts, dt, err, sizeof err) != 0) return fgi_fail(node, st, "%s", err);
  return 0;
}

int fgi_infer_fused(const fg_node *node, const fg_tinfo *in, fg_tinfo *out, fg_status *status) {
  fg_fused_params p;
  fg_dtype dt;
  if (read_program(node, in, &p, &dt, status) != 0) return -1;
  fg_tinfo acc = in[0];
  for (int i = 1; i < node->n_inputs; i++) {
    char s1[FGI_STR], s2[FGI_STR];
    int bad, rank = acc.rank > in[i].rank ? acc.rank : in[i].rank;
    int64_t va, vb, dims[FG_MAX_RANK];
    if (fgi_broadcast_dims(acc.rank, acc.dims, in[i].rank, in[i].dims, dims, &bad, &va, &vb))
      return fgi_fail(node, status,
                      "input %d shape %s does not broadcast with shape %s of inputs 0..%d "
                      "(dim %d: %lld vs %lld)",
                      i, fgi_shape(&in[i], s1), fgi_shape(&acc, s2), i - 1, bad, (long long)vb,
                      (long long)va);
    acc.rank = rank;
    memcpy(acc.dims, dims, sizeof dims);
  }
  out[0] = acc;
  out[0].dtype = dt;
  return fgi_check_bytes(node, &out[0], status);
}

int fgi_parse_fused(const fg_node *node, const fg_tinfo *in, fg_op_params *p, fg_status *st) {
  fg_dtype dt;
  return read_program(node, in, &p->fused, &dt, st);
}

/* One operation per instruction and output element. */
int64_t fgi_flops_fused(const fg_node *node, const fg_tinfo *in, const fg_tinfo *out) {
  (void)in;
  const fg_attr *a = fg_attrs_find(&node->attrs, "program");
  fg_fused_params p;
  char err[8];
  if (!a || a->type != FG_ATTR_STRING || fg_fused_parse(a->s, node->n_inputs, &p, err, sizeof err))
    return 0;
  return fgi_mul_sat(fgi_elements(&out[0]), p.n_instrs);
}
