/* Element-wise fusion: a tree or chain of float element-wise nodes of one
 * output shape and dtype becomes one fused_elementwise node, which reads
 * each outside input once and writes one output (graph/fused_program.h).
 *
 * Groups grow from a root (the highest unfused node id first) towards its
 * producers. A producer joins when every node that reads it is in the
 * group, so nothing is computed twice; when it is no pinned node, on the
 * root's device group and device; when its output has the root's shape
 * and dtype (a comparison: the root's shape in bool, read only as the
 * condition of a select in the group); and when the caps of a program
 * (inputs, instructions, constants) still hold. One-element float
 * constants become program constants. The root is rewritten in place, so
 * its name, id and output type stay; the absorbed producers keep their
 * own nodes, which a session computes only when a run fetches them (it
 * keeps every node, so keep[] only protects nodes where not every node is
 * kept: fg_optimize's fetches and outputs are never absorbed).
 *
 * The program applies each node's own element function in node order, so
 * the fused node computes the bits of the nodes it replaces. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "executor/passes/passes.h"
#include "graph/fused_program.h"
#include "graph/op_table.h"
#include "graph/tensor_internal.h"

typedef struct fuse_state {
  fg_pass_ctx *ctx;
  int *cons_start, *cons;  /* consumers of each node (CSR), one entry per reading input */
  unsigned char *assigned; /* in a fused group already */
  unsigned char *member;   /* in the group being grown */
  /* Per node: the program of a fused_elementwise node the graph held when
   * the pass began (fold_inference's, a saved graph's), parsed once; NULL
   * for every other node. */
  fg_fused_params **prog;
} fuse_state;

typedef struct group {
  int root;
  int ids[FG_FUSED_MAX_INSTRS]; /* members, ascending after sort */
  int n;
} group;

static const char *colocate_of(const fg_node *n) {
  const fg_attr *a = fg_attrs_find(&n->attrs, FG_COLOCATE_ATTR);
  return a && a->type == FG_ATTR_STRING ? a->s : NULL;
}

/* Consumers per node, over the nodes still alive. */
static int build_consumers(fuse_state *S) {
  const fg_graph *g = &S->ctx->w->g;
  int n = g->n_nodes, total = 0;
  S->cons_start = calloc((size_t)n + 2, sizeof(int));
  if (!S->cons_start) return -1;
  for (int id = 0; id < n; id++)
    for (int i = 0; !S->ctx->dead[id] && i < g->nodes[id].n_inputs; i++, total++)
      S->cons_start[g->nodes[id].inputs[i].node + 1]++;
  for (int id = 0; id < n; id++)
    S->cons_start[id + 1] += S->cons_start[id];
  S->cons = malloc(((size_t)total + 1) * sizeof(int));
  int *fill = malloc(((size_t)n + 1) * sizeof(int));
  if (!S->cons || !fill) return free(fill), -1;
  memcpy(fill, S->cons_start, (size_t)n * sizeof(int));
  for (int id = 0; id < n; id++)
    for (int i = 0; !S->ctx->dead[id] && i < g->nodes[id].n_inputs; i++)
      S->cons[fill[g->nodes[id].inputs[i].node]++] = id;
  free(fill);
  return 0;
}

/* S->prog for the fused_elementwise nodes whose program parses. 0 or -1
 * (out of memory). */
static int parse_programs(fuse_state *S) {
  const fg_graph *g = &S->ctx->w->g;
  S->prog = calloc((size_t)g->n_nodes + 1, sizeof *S->prog);
  if (!S->prog) return -1;
  for (int id = 0; id < g->n_nodes; id++) {
    const fg_node *n = &g->nodes[id];
    const fg_attr *a = fg_attrs_find(&n->attrs, "program");
    char err[256];
    if (S->ctx->dead[id] || n->op != FG_OP_FUSED_ELEMENTWISE || !a || a->type != FG_ATTR_STRING)
      continue;
    if (!(S->prog[id] = malloc(sizeof **S->prog))) return -1;
    if (fg_fused_parse(a->s, n->n_inputs, S->prog[id], err, sizeof err) != 0) {
      free(S->prog[id]);
      S->prog[id] = NULL;
    }
  }
  return 0;
}

/* The instructions node id adds to a program. */
static int instrs_of(const fuse_state *S, int id) {
  return S->prog[id] ? S->prog[id]->n_instrs : 1;
}

/* An element-wise node the pass may put in a group at all: one op, or a
 * fused node, whose program joins the group's. */
static int fusable(const fuse_state *S, int id) {
  const fg_node *n = &S->ctx->w->g.nodes[id];
  return !S->ctx->dead[id] && !S->assigned[id] && n->n_outputs == 1 &&
         (fg_fused_opcode_of(n->op) >= 0 || S->prog[id]) && !fg_pass_node_pinned(n);
}

static int can_root(const fuse_state *S, int id) {
  const fg_node *n = &S->ctx->w->g.nodes[id];
  fg_dtype dt = n->outputs[0].dtype;
  return fusable(S, id) && (dt == FG_F32 || dt == FG_F64) &&
         !fg_fused_is_compare(fg_fused_opcode_of(n->op));
}

/* The fused node reads c's inputs at the root's place in node order: a
 * variable must not be written in between, and what an update returns
 * (the variable's storage) is not moved at all. */
static int reads_stay_valid(const fg_graph *g, int c, int root) {
  const fg_node *n = &g->nodes[c];
  for (int i = 0; i < n->n_inputs; i++) {
    int op = g->nodes[n->inputs[i].node].op;
    if (op == FG_OP_VARIABLE && fg_pass_written_between(g, n->inputs[i].node, c, root)) return 0;
    if (op == FG_OP_ASSIGN || fg_op_table[op].mutable_inputs) return 0;
  }
  return 1;
}

/* Every reader of c is in the group; a comparison's readers read it only
 * as a select's condition. */
static int readers_in_group(const fuse_state *S, int c, int compare) {
  const fg_graph *g = &S->ctx->w->g;
  for (int k = S->cons_start[c]; k < S->cons_start[c + 1]; k++) {
    const fg_node *r = &g->nodes[S->cons[k]];
    if (!S->member[S->cons[k]]) return 0;
    for (int i = 0; compare && i < r->n_inputs; i++)
      if (r->inputs[i].node == c && (r->op != FG_OP_SELECT || i != 0)) return 0;
  }
  return 1;
}

static int may_join(const fuse_state *S, int c, int root) {
  const fg_pass_ctx *ctx = S->ctx;
  const fg_graph *g = &ctx->w->g;
  const fg_node *n = &g->nodes[c], *r = &g->nodes[root];
  if (!fusable(S, c) || S->member[c] || (!ctx->all_kept && ctx->keep[c])) return 0;
  if ((ctx->group && ctx->group[c] != ctx->group[root]) ||
      !fg_pass_str_equal(n->device, r->device) ||
      !fg_pass_str_equal(colocate_of(n), colocate_of(r)))
    return 0;
  int compare = fg_fused_is_compare(fg_fused_opcode_of(n->op));
  if (compare) {
    fg_tinfo want = r->outputs[0];
    want.dtype = FG_BOOL;
    if (!fg_pass_tinfo_equal(&n->outputs[0], &want) ||
        fg_pass_type_of(g, n->inputs[0])->dtype != r->outputs[0].dtype)
      return 0;
  } else if (!fg_pass_tinfo_equal(&n->outputs[0], &r->outputs[0])) {
    return 0;
  }
  return readers_in_group(S, c, compare) && reads_stay_valid(g, c, root);
}

/* A one-element float constant of the group's dtype: a program constant
 * (NaN stays an input, so its payload is the constant's own). */
static int const_operand(const fg_graph *g, fg_output o, fg_dtype dt, double *v) {
  const fg_tensor *t = fg_pass_const_value(g, o);
  if (!t || t->dtype != dt || fg_tensor_num_bytes(t) != fg_dtype_size(dt)) return 0;
  *v = dt == FG_F32 ? (double)((const float *)t->data)[0] : ((const double *)t->data)[0];
  return !isnan(*v);
}

/* v into the n constants of c unless there (bit for bit) or c holds cap:
 * the new count. */
static int add_const(double *c, int n, int cap, double v) {
  int k = 0;
  while (k < n && memcmp(&c[k], &v, sizeof v) != 0)
    k++;
  if (k == n && n < cap) c[n++] = v;
  return n;
}

/* The outside inputs and constants the members read (each once), counted
 * into *n_ext and *n_const, which stop one past the caps; ext may be NULL. */
static void operands(const fuse_state *S, const group *G, fg_output *ext, int *n_ext,
                     double *consts, int *n_const) {
  const fg_graph *g = &S->ctx->w->g;
  fg_dtype dt = g->nodes[G->root].outputs[0].dtype;
  fg_output seen[FG_FUSED_MAX_INPUTS + 1];
  double cv[FG_FUSED_MAX_CONSTS + 1];
  int ne = 0, nc = 0;
  for (int m = 0; m < G->n; m++) {
    const fg_node *n = &g->nodes[G->ids[m]];
    const fg_fused_params *q = S->prog[G->ids[m]];
    for (int k = 0; q && k < q->n_consts; k++)
      nc = add_const(cv, nc, FG_FUSED_MAX_CONSTS + 1, q->consts[k]);
    for (int i = 0; i < n->n_inputs; i++) {
      fg_output o = n->inputs[i];
      double v;
      if (S->member[o.node]) continue;
      if (const_operand(g, o, dt, &v)) {
        nc = add_const(cv, nc, FG_FUSED_MAX_CONSTS + 1, v);
        continue;
      }
      int k = 0;
      while (k < ne && !(seen[k].node == o.node && seen[k].index == o.index))
        k++;
      if (k == ne && ne <= FG_FUSED_MAX_INPUTS) seen[ne++] = o;
    }
  }
  if (ext) memcpy(ext, seen, (size_t)ne * sizeof *ext);
  if (consts) memcpy(consts, cv, (size_t)nc * sizeof *consts);
  *n_ext = ne;
  *n_const = nc;
}

static int within_caps(const fuse_state *S, const group *G) {
  int ne, nc, ni = 0;
  for (int m = 0; m < G->n; m++)
    ni += instrs_of(S, G->ids[m]);
  if (ni > FG_FUSED_MAX_INSTRS) return 0;
  operands(S, G, NULL, &ne, NULL, &nc);
  return ne <= FG_FUSED_MAX_INPUTS && nc <= FG_FUSED_MAX_CONSTS;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Adds node id's producers to the candidates (once each). */
static void add_producers(const fuse_state *S, int id, int *cand, int *n_cand, int cap) {
  const fg_node *n = &S->ctx->w->g.nodes[id];
  for (int i = 0; i < n->n_inputs; i++) {
    int p = n->inputs[i].node, k = 0;
    while (k < *n_cand && cand[k] != p)
      k++;
    if (k == *n_cand && !S->member[p] && *n_cand < cap) cand[(*n_cand)++] = p;
  }
}

/* Grows the group of G->root: producers in descending id order, so when
 * one is looked at, every member that could read it is decided (readers
 * have higher ids). */
static void grow(fuse_state *S, group *G) {
  enum { CAP = 3 * FG_FUSED_MAX_INSTRS + 3 };
  int cand[CAP], n_cand = 0;
  G->n = 1;
  G->ids[0] = G->root;
  S->member[G->root] = 1;
  add_producers(S, G->root, cand, &n_cand, CAP);
  while (n_cand > 0 && G->n < FG_FUSED_MAX_INSTRS) {
    int best = 0;
    for (int k = 1; k < n_cand; k++)
      if (cand[k] > cand[best]) best = k;
    int c = cand[best];
    cand[best] = cand[--n_cand];
    if (!may_join(S, c, G->root)) continue;
    G->ids[G->n++] = c;
    S->member[c] = 1;
    if (!within_caps(S, G)) {
      S->member[c] = 0;
      G->n--;
      continue;
    }
    add_producers(S, c, cand, &n_cand, CAP);
  }
  qsort(G->ids, (size_t)G->n, sizeof G->ids[0], cmp_int);
}

/* Program constant v (added unless there; the caps were checked). */
static fg_fused_ref const_ref(fg_fused_params *p, double v) {
  p->n_consts = add_const(p->consts, p->n_consts, FG_FUSED_MAX_CONSTS, v);
  int k = 0;
  while (k + 1 < p->n_consts && memcmp(&p->consts[k], &v, sizeof v) != 0)
    k++;
  return (fg_fused_ref){FG_FUSED_CONST, (uint8_t)k};
}

/* An instruction's argument for a member's input o; res[m]: the
 * instruction whose result is member m's value. */
static fg_fused_ref ref_of(const fuse_state *S, const group *G, const int *res, fg_output o,
                           const fg_output *ext, int n_ext, fg_fused_params *p) {
  const fg_graph *g = &S->ctx->w->g;
  double v;
  for (int m = 0; m < G->n; m++)
    if (G->ids[m] == o.node) return (fg_fused_ref){FG_FUSED_TEMP, (uint8_t)res[m]};
  if (const_operand(g, o, g->nodes[G->root].outputs[0].dtype, &v)) return const_ref(p, v);
  int k = 0;
  while (k < n_ext - 1 && !(ext[k].node == o.node && ext[k].index == o.index))
    k++;
  return (fg_fused_ref){FG_FUSED_INPUT, (uint8_t)k};
}

/* The op's attributes (leaky_relu's alpha, clip's bounds) as its kernel
 * reads them. */
static int instr_attrs(const fg_graph *g, int id, fg_fused_instr *in, fg_status *st) {
  const fg_node *n = &g->nodes[id];
  if (!fg_fused_attr_name(in->op, 0)) return 0;
  fg_tinfo tin[3];
  fg_op_params prm;
  for (int i = 0; i < n->n_inputs && i < 3; i++)
    tin[i] = *fg_pass_type_of(g, n->inputs[i]);
  if (fg_op_parse_params(n, tin, &prm, st) != 0) return -1;
  switch (in->op) {
  case FG_FUSED_LEAKY_RELU: in->attr[0] = prm.leaky_relu.alpha; break;
  case FG_FUSED_ELU: in->attr[0] = prm.elu.alpha; break;
  case FG_FUSED_SOFTPLUS:
    in->attr[0] = prm.softplus.beta, in->attr[1] = prm.softplus.threshold;
    break;
  case FG_FUSED_CLIP: in->attr[0] = prm.clip.min, in->attr[1] = prm.clip.max; break;
  default: break;
  }
  return 0;
}

/* A fused member's program q into p from instruction p->n_instrs on, its
 * inputs and temporaries renamed to the group's. */
static void splice(const fuse_state *S, const group *G, const int *res, int id,
                   const fg_fused_params *q, const fg_output *ext, int n_ext, fg_fused_params *p) {
  const fg_node *n = &S->ctx->w->g.nodes[id];
  const int base = p->n_instrs;
  for (int j = 0; j < q->n_instrs; j++) {
    fg_fused_instr *in = &p->ins[p->n_instrs++];
    *in = q->ins[j];
    for (int a = 0; a < in->n_args; a++) {
      const fg_fused_ref r = q->ins[j].arg[a];
      in->arg[a] = r.kind == FG_FUSED_INPUT ? ref_of(S, G, res, n->inputs[r.index], ext, n_ext, p)
                   : r.kind == FG_FUSED_TEMP
                       ? (fg_fused_ref){FG_FUSED_TEMP, (uint8_t)(base + r.index)}
                       : const_ref(p, q->consts[r.index]);
    }
  }
}

/* The group as a program over its outside inputs ext: each member's
 * instruction, or a fused member's whole program, in node order. -1: a
 * member's attributes did not parse (the group is then left alone). */
static int build_program(const fuse_state *S, const group *G, fg_output *ext, int *n_ext,
                         fg_fused_params *p, fg_status *st) {
  const fg_graph *g = &S->ctx->w->g;
  int nc, res[FG_FUSED_MAX_INSTRS];
  operands(S, G, ext, n_ext, NULL, &nc);
  memset(p, 0, sizeof *p);
  p->n_inputs = *n_ext;
  for (int m = 0; m < G->n; m++) {
    const fg_node *n = &g->nodes[G->ids[m]];
    if (S->prog[G->ids[m]]) {
      splice(S, G, res, G->ids[m], S->prog[G->ids[m]], ext, *n_ext, p);
    } else {
      fg_fused_instr *in = &p->ins[p->n_instrs++];
      in->op = (uint8_t)fg_fused_opcode_of(n->op);
      in->n_args = (uint8_t)n->n_inputs;
      for (int i = 0; i < n->n_inputs; i++)
        in->arg[i] = ref_of(S, G, res, n->inputs[i], ext, *n_ext, p);
      if (instr_attrs(g, G->ids[m], in, st) != 0) return -1;
    }
    res[m] = p->n_instrs - 1;
  }
  return 0;
}

/* 1 when the fused node infers the root's output type: constants of a
 * higher rank than every input would otherwise have added dims. */
static int same_output(const fg_node *root, const fg_output *ext, int n_ext,
                       const struct fg_attrs *a, const fg_graph *g) {
  fg_node tmp = *root;
  fg_tinfo in[FG_FUSED_MAX_INPUTS], out;
  tmp.op = FG_OP_FUSED_ELEMENTWISE;
  tmp.inputs = (fg_output *)ext;
  tmp.n_inputs = n_ext;
  tmp.attrs = *a;
  for (int i = 0; i < n_ext; i++)
    in[i] = *fg_pass_type_of(g, ext[i]);
  fg_status *st = fg_status_new();
  int ok = st && fg_op_table[FG_OP_FUSED_ELEMENTWISE].infer(&tmp, in, &out, st) == 0 &&
           fg_pass_tinfo_equal(&out, &root->outputs[0]);
  fg_status_free(st);
  return ok;
}

/* Rewrites G's root into the fused node. 1 when rewritten, 0 when the
 * group is left alone, -1 out of memory. */
static int fuse_group(fuse_state *S, const group *G, fg_status *st) {
  fg_pass_graph *w = S->ctx->w;
  fg_node *root = &w->g.nodes[G->root];
  fg_output ext[FG_FUSED_MAX_INPUTS * 3];
  int n_ext;
  fg_fused_params p;
  char ops[FG_FUSED_MAX_INSTRS * 24];
  fg_status *ignored = fg_status_new();
  int built = ignored && build_program(S, G, ext, &n_ext, &p, ignored) == 0;
  fg_status_free(ignored);
  if (!built || n_ext < 1) return 0;
  struct fg_attrs a;
  int rc = fg_pass_fused_attrs(root, &p, &a);
  if (rc != 0) return rc < 0 ? -1 : 0;
  if (!same_output(root, ext, n_ext, &a, &w->g)) return fg_attrs_clear(&a), 0;
  fg_output *inputs = malloc(((size_t)n_ext + 1) * sizeof *inputs);
  if (!inputs || fg_pass_graph_set_attrs(w, G->root, &a) != 0) {
    free(inputs);
    fg_attrs_clear(&a);
    return -1;
  }
  fg_attrs_clear(&a);
  memcpy(inputs, ext, (size_t)n_ext * sizeof *inputs);
  free(root->inputs);
  root->inputs = inputs;
  root->n_inputs = n_ext;
  root->op = FG_OP_FUSED_ELEMENTWISE;
  fg_fused_ops_list(&p, ops, sizeof ops);
  if (fg_pass_record(S->ctx, G->root, "fused", "fused_elementwise", ops, st) != 0) return -1;
  for (int m = 0; m + 1 < G->n; m++)
    if (fg_pass_record(S->ctx, G->ids[m], "absorbed", root->name, NULL, st) != 0) return -1;
  return 1;
}

static void fuse_state_free(fuse_state *S) {
  free(S->cons_start);
  free(S->cons);
  free(S->assigned);
  free(S->member);
  for (int id = 0; S->prog && id < S->ctx->w->g.n_nodes; id++)
    free(S->prog[id]);
  free(S->prog);
}

int fg_pass_fuse(fg_pass_ctx *ctx, fg_status *st) {
  if (!fg_pass_fusion_allowed(ctx)) return 0;
  const int n = ctx->w->g.n_nodes;
  fuse_state S = {ctx, NULL, NULL, calloc((size_t)n + 1, 1), calloc((size_t)n + 1, 1), NULL};
  for (int id = 0; id < n; id++)
    fg_pass_resolve_inputs(ctx, id);
  int rc = S.assigned && S.member && build_consumers(&S) == 0 && parse_programs(&S) == 0 ? 0 : -1;
  for (int id = n - 1; rc == 0 && id >= 0; id--) {
    if (!can_root(&S, id)) continue;
    group G = {.root = id};
    grow(&S, &G);
    int fused = G.n >= 2 ? fuse_group(&S, &G, st) : 0;
    for (int m = 0; m < G.n; m++) {
      S.member[G.ids[m]] = 0;
      S.assigned[G.ids[m]] |= fused > 0;
    }
    rc = fused < 0 ? -1 : 0;
  }
  if (rc != 0 && fg_status_code(st) == FG_OK)
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "fuse: out of memory");
  fuse_state_free(&S);
  return rc;
}
