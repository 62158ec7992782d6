/* Writers of the fused ops the optimization passes make (fused_matmul,
 * permuted_matmul, fused_conv2d, fused_conv2d_add, fused_elementwise):
 * each is written as the standard ONNX ops of the chain it replaced, in
 * the chain's order of operations, so an importer that runs them one by
 * one gets the values the fused kernel gives. The gradient fusions are
 * training-only and refused before any writer runs (onnx_export.c). */
#include <stdio.h>
#include <string.h>

#include "graph/fused_program.h"
#include "graph/op_table.h"
#include "schema/onnx/onnx_export.h"

#define NODE_NAME(c, id) fg_node_name(fgo_graph(c), id)
#define OP_NAME(c, id)   fg_node_op(fgo_graph(c), id)
#define UNSUPPORTED(c, id, ...)                                                                    \
  fgo_fail(c, FG_UNIMPLEMENTED, "ONNX export: node '%s' (%s): " __VA_ARGS__)

enum { ACT_NONE, ACT_RELU, ACT_CLIP };

/* The "activation" attribute: ACT_*, or -1 (failed). */
static int act_of(fgo_ctx *c, int id) {
  const char *act = "none";
  fg_node_attr_string(fgo_graph(c), id, "activation", &act);
  if (strcmp(act, "relu") == 0) return ACT_RELU;
  if (strcmp(act, "clip") == 0) return ACT_CLIP;
  if (strcmp(act, "none") == 0) return ACT_NONE;
  return UNSUPPORTED(c, id, "activation '%s'", NODE_NAME(c, id), OP_NAME(c, id), act);
}

/* Clip(v, min, max) into the node's output, the bounds (float or int
 * attributes, as the kernels take them) as constants of its dtype (Clip
 * takes them as inputs from opset 11). */
static int clip_to_out(fgo_ctx *c, int id, const char *v) {
  const double lo = fgo_get_float(c, id, "min", 0), hi = fgo_get_float(c, id, "max", 0);
  fg_dtype dt = fgo_graph(c)->nodes[id].outputs[0].dtype;
  const char *in[3] = {v, fgo_const_scalar(c, id, "min", dt, lo),
                       fgo_const_scalar(c, id, "max", dt, hi)};
  const char *out = fgo_out(c, id, 0);
  return in[1] && in[2] && out && fgo_emit(c, id, "Clip", in, 3, &out, 1) ? 0 : -1;
}

/* Where the value so far (`v`) goes next: the node's output when nothing
 * follows, else a new tensor named after the op that made it. */
static const char *next_out(fgo_ctx *c, int id, int last, const char *what) {
  return last ? fgo_out(c, id, 0) : fgo_tmp(c, id, what);
}

/* Add(v, addend) then the activation (Relu or Clip): the epilogue both
 * fused ops end with; v's addition first, as the kernels compute y + z and
 * y + bias. */
static int add_then_act(fgo_ctx *c, int id, const char *v, const char *addend, int act) {
  if (addend) {
    const char *in[2] = {v, addend}, *sum = next_out(c, id, act == ACT_NONE, "Add");
    if (!sum || !fgo_emit(c, id, "Add", in, 2, &sum, 1)) return -1;
    v = sum;
  }
  if (act == ACT_CLIP) return clip_to_out(c, id, v);
  if (act == ACT_NONE) return 0;
  return fgo_emit1(c, id, "Relu", v, fgo_out(c, id, 0)) ? 0 : -1;
}

/* act(op(a) @ op(b) + bias): MatMul (matmul's writer), Add, Relu. */
int fgo_w_fused_matmul(fgo_ctx *c, int id) {
  int act = act_of(c, id);
  if (act < 0) return -1;
  const char *mm = fgo_tmp(c, id, "MatMul"), *bias = fgo_in(c, id, 2);
  if (!mm || !bias || fgo_matmul_to(c, id, mm) != 0) return -1;
  return add_then_act(c, id, mm, bias, act);
}

static int is_identity(const int64_t *perm, int r) {
  for (int i = 0; i < r; i++)
    if (perm[i] != i) return 0;
  return 1;
}

/* permuted_matmul: Transpose(a, perm_a), Transpose(b, perm_b), MatMul,
 * Transpose(perm_out), each left out where its perm is the identity. */
int fgo_w_permuted_matmul(fgo_ctx *c, int id) {
  int64_t pa[FG_MAX_RANK], pb[FG_MAX_RANK], po[FG_MAX_RANK];
  const int r = fgo_get_ints(c, id, "perm_a", pa, FG_MAX_RANK);
  if (r < 2 || fgo_get_ints(c, id, "perm_b", pb, FG_MAX_RANK) != r ||
      fgo_get_ints(c, id, "perm_out", po, FG_MAX_RANK) != r)
    return UNSUPPORTED(c, id, "perms of different lengths", NODE_NAME(c, id), OP_NAME(c, id));
  const char *in[2] = {fgo_in(c, id, 0), fgo_in(c, id, 1)};
  if (!is_identity(pa, r)) in[0] = fgo_transpose_to(c, id, in[0], pa, r, NULL);
  if (!is_identity(pb, r)) in[1] = fgo_transpose_to(c, id, in[1], pb, r, NULL);
  const int out_ident = is_identity(po, r);
  const char *mm = out_ident ? fgo_out(c, id, 0) : fgo_tmp(c, id, "MatMul");
  if (!in[0] || !in[1] || !mm || !fgo_emit(c, id, "MatMul", in, 2, &mm, 1)) return -1;
  return out_ident || fgo_transpose_to(c, id, mm, po, r, fgo_out(c, id, 0)) ? 0 : -1;
}

/* act(conv2d(x, w, b) [+ z]): the bias inside the Conv, as conv2d adds it
 * (its sums start at b), then Add z, then Relu or Clip. fused_conv2d's
 * inputs are x, w, [b]; fused_conv2d_add's x, w, z, [b]. */
int fgo_w_fused_conv(fgo_ctx *c, int id) {
  int act = act_of(c, id), n_in = fg_node_num_inputs(fgo_graph(c), id);
  if (act < 0) return -1;
  int has_z = strcmp(OP_NAME(c, id), "fused_conv2d_add") == 0, b_at = has_z ? 3 : 2;
  const char *z = has_z ? fgo_in(c, id, 2) : NULL;
  const char *b = n_in > b_at ? fgo_in(c, id, b_at) : NULL;
  const char *y = next_out(c, id, !has_z && act == ACT_NONE, "Conv");
  if (!y || (has_z && !z) || fgo_conv2d_to(c, id, b, y) != 0) return -1;
  return add_then_act(c, id, y, z, act);
}

/* ---- fused_elementwise ------------------------------------------------------ */

typedef struct program_out {
  fgo_ctx *c;
  int id;
  const fg_fused_params *p;
  fg_dtype dtype;                       /* the output's: every value and constant has it */
  const char *val[FG_FUSED_MAX_INSTRS]; /* each instruction's result */
} program_out;

/* The name of argument a of instruction k. A select's condition is a bool
 * tensor in ONNX: a comparison's result is one already (the parser lets a
 * comparison be read by nothing else), a bool input too; another value
 * is cast, which tests != 0 as the kernel does (NaN is true in both). */
static const char *arg_name(program_out *po, int k, int a) {
  fgo_ctx *c = po->c;
  const fg_fused_instr *in = &po->p->ins[k];
  fg_fused_ref r = in->arg[a];
  const char *v = NULL;
  int is_bool = 0;
  if (r.kind == FG_FUSED_INPUT) {
    v = fgo_in(c, po->id, r.index);
    const fg_tinfo *t = fgo_in_info(c, po->id, r.index);
    is_bool = t && t->dtype == FG_BOOL;
  } else if (r.kind == FG_FUSED_TEMP) {
    v = po->val[r.index];
    is_bool = fg_fused_is_compare(po->p->ins[r.index].op);
  } else {
    v = fgo_const_scalar(c, po->id, "k", po->dtype, po->p->consts[r.index]);
  }
  if (!v || is_bool || !(in->op == FG_FUSED_SELECT && a == 0)) return v;
  const char *cond = fgo_tmp(c, po->id, "Cast");
  Onnx__NodeProto *n = cond ? fgo_emit1(c, po->id, "Cast", v, cond) : NULL;
  return fgo_attr_int(c, n, "to", fgo_onnx_dtype(FG_BOOL)) == 0 ? cond : NULL;
}

/* live[k]: instruction k feeds the output; read[i]: input i reaches it. */
static void mark_live(const fg_fused_params *p, int *live, int *read) {
  memset(live, 0, FG_FUSED_MAX_INSTRS * sizeof *live);
  memset(read, 0, FG_FUSED_MAX_INPUTS * sizeof *read);
  live[p->n_instrs - 1] = 1;
  for (int k = p->n_instrs - 1; k >= 0; k--) {
    if (!live[k]) continue;
    for (int a = 0; a < p->ins[k].n_args; a++) {
      fg_fused_ref r = p->ins[k].arg[a];
      if (r.kind == FG_FUSED_TEMP) live[r.index] = 1;
      if (r.kind == FG_FUSED_INPUT) read[r.index] = 1;
    }
  }
}

/* Instruction k through its op's element-wise writer, into out. */
static int write_instr(program_out *po, int k, const char *out) {
  fgo_ctx *c = po->c;
  const fg_fused_instr *in = &po->p->ins[k];
  int op = fg_fused_graph_op(in->op);
  const char *name = op >= 0 && op < FG_OP_COUNT ? fg_op_table[op].name : "?";
  char who[400];
  snprintf(who, sizeof who, "node '%s' (fused_elementwise): program instruction %d (%s)",
           NODE_NAME(c, po->id), k, name);
  fgo_ew_writer write = op >= 0 ? fgo_ew_of(name) : NULL;
  if (!write)
    return fgo_fail(c, FG_UNIMPLEMENTED, "ONNX export: %s: the exporter has no ONNX form of %s",
                    who, name);
  fgo_ew e = {.id = po->id, .out = out, .dtype = po->dtype, .who = who};
  for (int a = 0; a < in->n_args && a < 3; a++)
    if (!(e.in[a] = arg_name(po, k, a))) return -1;
  e.attr[0] = in->attr[0], e.attr[1] = in->attr[1];
  return write(c, &e);
}

/* One ONNX node (or an op's formula) per instruction that feeds the
 * output, in program order: each reads its arguments' values and
 * computes in the output's dtype, as the kernel does. An input that feeds
 * no live instruction still broadcasts the output: an Expand to its
 * shape applies that. */
int fgo_w_fused_elementwise(fgo_ctx *c, int id) {
  const char *text = NULL;
  fg_node_attr_string(fgo_graph(c), id, "program", &text);
  fg_fused_params p;
  char err[320];
  int n_in = fg_node_num_inputs(fgo_graph(c), id);
  if (!text || fg_fused_parse(text, n_in, &p, err, sizeof err) != 0)
    return fgo_fail(c, FG_INVALID_GRAPH, "ONNX export: node '%s' (fused_elementwise): %s",
                    NODE_NAME(c, id), text ? err : "no program attribute");
  const fg_tinfo *t = fgo_info(c, (fg_output){id, 0});
  program_out po = {.c = c, .id = id, .p = &p, .dtype = t ? t->dtype : FG_F32};
  int live[FG_FUSED_MAX_INSTRS], read[FG_FUSED_MAX_INPUTS], unread[FG_FUSED_MAX_INPUTS];
  int n_unread = 0;
  mark_live(&p, live, read);
  for (int i = 0; i < n_in; i++)
    if (!read[i]) unread[n_unread++] = i;
  for (int k = 0; k < p.n_instrs; k++) {
    if (!live[k]) continue;
    const char *out = k == p.n_instrs - 1 && !n_unread ? fgo_out(c, id, 0) : fgo_tmp(c, id, "t");
    if (!out || write_instr(&po, k, out) != 0) return -1;
    po.val[k] = out;
  }
  const char *v = po.val[p.n_instrs - 1];
  for (int u = 0; u < n_unread; u++) {
    const char *shape = fgo_tmp(c, id, "Shape");
    const char *out = u + 1 < n_unread ? fgo_tmp(c, id, "Expand") : fgo_out(c, id, 0);
    const char *ein[2] = {v, shape};
    if (!shape || !out || !fgo_emit1(c, id, "Shape", fgo_in(c, id, unread[u]), shape) ||
        !fgo_emit(c, id, "Expand", ein, 2, &out, 1))
      return -1;
    v = out;
  }
  return 0;
}
