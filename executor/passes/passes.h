/* The pass framework (internal; the public side is flowgraph/passes.h).
 *
 * Passes rewrite a working copy of a graph (fg_pass_graph) that keeps the
 * source's node ids, names, ops and output types, so everything a session
 * indexes by node id (variables, placement, the plan cache's feeds and
 * fetches) stays valid. A pass never deletes a node from the copy: it
 * records that consumers of a node's outputs now read an equivalent output
 * (fg_pass_replace), may rewrite a node in place (its inputs, its
 * attributes, keeping its output types), and marks nodes dead. A session
 * plans from the copy, whose pruning skips what nothing needs; fg_optimize
 * compacts the copy into a new graph without the dead nodes.
 *
 * A new pass is one row in the table of pipeline.c and one function that
 * reads and rewrites ctx->w->g; the framework applies its replacements to
 * every consumer and records what it did. */
#ifndef FG_PASSES_INTERNAL_H
#define FG_PASSES_INTERNAL_H

#include "flowgraph/op_params.h"
#include "flowgraph/passes.h"
#include "graph/graph_internal.h"

/* The working copy: g.nodes is a new array whose names, devices, output
 * types and attribute values are the source's (borrowed); every node owns
 * its inputs array and the array of its attributes, whose contents it
 * deep-copies once a pass rewrites them (attrs_owned). The copy has no
 * graph outputs or metadata. The source must outlive the copy, which is
 * valid for the source's version it was made from. */
typedef struct fg_pass_graph {
  fg_graph g;
  unsigned char *attrs_owned;   /* per node */
  unsigned char *outputs_owned; /* per node: its outputs array is the copy's */
  int n_src;                    /* the source's nodes; ids from here on are appended constants */
  /* 1 where passes may append constants (fg_pass_add_constant): set by
   * the session's pipeline unless the session has host steps (whose
   * per-node arrays are sized by the source's node count); a multi-device
   * session places each appended constant on its node's device
   * (fg_pass_graph_placed_as). */
  int may_append;
  /* 1 in fg_optimize: its result is saved, so fold_inference rewrites
   * values in place there rather than adding copies, even where every node
   * is kept (fetched) as in a session. */
  int optimizing;
  /* Per node id from n_src on: the source node an appended constant was
   * placed as (its device); NULL until one is appended. */
  int *placed_as;
  /* 1 when a GPU session runs the copy (passes that weigh launches
   * against memory, as multi_update, decide by it); 0 on the CPU and in
   * fg_optimize. */
  int gpu;
  /* Per source node: the node holding its multi-tensor update (the
   * multi_update pass's group, its first member's id) when it is one of a
   * group's updates, else -1; NULL when the pass made no group. A run that
   * needs some of a group's updates but not all cannot use the copy: the
   * multi node would update the others too (fg_session_plan_graph). */
  int *multi_of;
} fg_pass_graph;

fg_pass_graph *fg_pass_graph_new(const fg_graph *src, fg_status *st);
/* The source node whose placement node id takes: itself for a source
 * node, for an appended constant the node it was placed as. */
int fg_pass_graph_placed_as(const fg_pass_graph *w, int id);
/* Accepts NULL. Frees only what the copy owns. */
void fg_pass_graph_free(fg_pass_graph *w);
/* Node id's attributes, made the copy's own so a pass may edit them. 0 or
 * -1 (out of memory). */
int fg_pass_graph_own_attrs(fg_pass_graph *w, int id);
/* Rewrites node id in place into a constant holding `value` (taken over,
 * freed on failure too), with no inputs and its placement attribute kept;
 * its name and output type stay, so `value` must have that type. 0 or -1
 * (out of memory). */
int fg_pass_graph_set_constant(fg_pass_graph *w, int id, fg_tensor *value);
/* Rewrites node id in place into `op` reading `inputs` (copied), with no
 * attributes but its placement; its name and output types stay, so the
 * new op must compute a value of those types. 0 or -1 (out of memory). */
int fg_pass_graph_set_op(fg_pass_graph *w, int id, int op, const fg_output *inputs, int n_inputs);
/* Node id's attributes replaced by a deep copy of src. 0 or -1. */
int fg_pass_graph_set_attrs(fg_pass_graph *w, int id, const struct fg_attrs *src);
/* Appends a constant node named `name` (copied) holding `value` (taken
 * over, freed on failure too), placed as node `like` (its device and
 * colocation). No source node reads it and the copy's name index does not
 * know it. Its id (past every existing one), or -1 (out of memory). */
int fg_pass_graph_append_constant(fg_pass_graph *w, const char *name, fg_tensor *value, int like);
/* Node id's output types replaced by a copy of outputs[0..n): for a node
 * rewritten into an op with more outputs, whose first ones keep their
 * types (its consumers read them as before). 0 or -1 (out of memory). */
int fg_pass_graph_set_outputs(fg_pass_graph *w, int id, const fg_tinfo *outputs, int n);

struct fg_pass_report {
  fg_pass_change *items;
  int n, cap;
};

typedef struct fg_pass_ctx {
  fg_pass_graph *w;
  /* Per node: the output standing for it once consumers are rewired
   * (node -1: none; index -1: the same output index of that node). */
  fg_output *fwd;
  unsigned char *dead; /* per node: removed (no consumer reads it) */
  unsigned char *keep; /* per node: must stay (fetched, output, variable, stateful) */
  int cap;             /* entries fwd, dead and keep have room for (the pipeline's own) */
  /* Per node the device group rewrites stay within (a consumer is only
   * rewired to an output produced in the same group), or NULL: one group.
   * The pipeline's own copy: an appended constant takes its node's. */
  int *group;
  fg_pass_report *report; /* NULL: nothing recorded */
  const char *pass;       /* the running pass's name, for the report */
  /* 1 when keep[] marks every node: a session, where any name may be
   * fetched, so keep[] cannot tell which nodes a fusion may absorb (the
   * plan computes an absorbed node only when a run fetches it). */
  int all_kept;
} fg_pass_ctx;

typedef struct fg_pass_def {
  const char *name;
  const char *doc;
  int default_on;
  int (*run)(fg_pass_ctx *ctx, fg_status *st);
} fg_pass_def;

/* The passes (pipeline.c); n_fg_passes rows. */
extern const fg_pass_def fg_passes[];
extern const int n_fg_passes;

/* Runs the passes `opts` selects on `w`. `keep` marks the nodes that must
 * stay (fg_pass_mark_keep); `group` may be NULL. 0, or -1 with the status
 * set (an unknown pass, out of memory). The report may be NULL. */
int fg_pass_pipeline_run(fg_pass_graph *w, const fg_pass_options *opts, unsigned char *keep,
                         const int *group, unsigned char *dead, fg_pass_report *report,
                         fg_status *st);
/* Marks in keep[] (n_nodes bytes, zeroed) the nodes fetched, the graph's
 * outputs, every node nothing consumes when there are neither, and always
 * variables, placeholders and stateful nodes. */
void fg_pass_mark_keep(const fg_graph *g, const fg_output *fetches, int n_fetches,
                       unsigned char *keep);

/* The framework's helpers for passes. */
/* o with every replacement applied. */
fg_output fg_pass_resolve(const fg_pass_ctx *ctx, fg_output o);
/* Resolves node id's inputs in place. */
void fg_pass_resolve_inputs(fg_pass_ctx *ctx, int id);
/* 1 when consumers of node id may read `by` instead: same device group,
 * and `by` is no value read from variable state (see passes.c). */
int fg_pass_can_replace(const fg_pass_ctx *ctx, int id, fg_output by);
/* Node id computes for no other node now (replaced, or absorbed into a
 * fused node): dead to the passes that follow, so its reads no longer
 * count as uses. fg_optimize keeps a kept node alive (it is fetched); a
 * session keeps every node in the graph anyway and computes a retired
 * one only when a run fetches it, so there it is dead to the passes. */
void fg_pass_retire(fg_pass_ctx *ctx, int id);
/* Consumers of node id read `by` from now on (index -1: each output of
 * by.node in place of the same output of id); id is retired.
 * Records `action` (and `rule`). 0 or -1 (out of memory). */
int fg_pass_replace(fg_pass_ctx *ctx, int id, fg_output by, const char *action, const char *rule,
                    fg_status *st);
/* Where ctx->w->may_append: a new constant "<node's name>/<suffix>"
 * holding `value` (taken over, freed on failure too), placed as node
 * `node` it serves, neither kept nor dead; its id past every source node,
 * so a node it feeds reads a later id. Such a constant has no inputs, and
 * plans bind every constant before any step, so node order still holds for
 * every step. -1 with the status set (out of memory). */
int fg_pass_add_constant(fg_pass_ctx *ctx, int node, const char *suffix, fg_tensor *value,
                         fg_status *st);
/* A fused_elementwise node's attributes into *a (zeroed first): program
 * p as text, and like's colocation. 0; 1 when the text does not fit (*a
 * empty); -1 out of memory (*a cleared). */
int fg_pass_fused_attrs(const fg_node *like, const fg_fused_params *p, struct fg_attrs *a);
/* 1 when the copy may gain fused_elementwise nodes: always on the CPU; in
 * a GPU session only where NVRTC loads, since their CUDA kernels are
 * generated and compiled with it when the plan is built (a machine
 * without it runs the nodes unfused rather than failing every plan). */
int fg_pass_fusion_allowed(const fg_pass_ctx *ctx);
/* The type of output o. */
static inline const fg_tinfo *fg_pass_type_of(const fg_graph *g, fg_output o) {
  return &g->nodes[o.node].outputs[o.index];
}
/* Records a change of node id ("into" NULL for removals). 0 or -1. */
int fg_pass_record(fg_pass_ctx *ctx, int id, const char *action, const char *into, const char *rule,
                   fg_status *st);
/* uses[id] (n_nodes ints, from the caller): how many input edges of live
 * nodes read node id, after the replacements so far. */
void fg_pass_count_uses(const fg_pass_ctx *ctx, int *uses);
/* 1 when a node with an id in (lo, hi) writes variable node v: the plan
 * orders a variable's reads and writes by node id, so a read may move
 * past no such write. */
int fg_pass_written_between(const fg_graph *g, int v, int lo, int hi);
/* 1 for a node whose output is variable state or whose run has an effect
 * (stateful, collective), or that draws random values: passes leave such
 * nodes where they are. */
int fg_pass_node_pinned(const fg_node *n);
/* Same dtype, rank and dims. */
int fg_pass_tinfo_equal(const fg_tinfo *a, const fg_tinfo *b);
/* Equal strings, or both NULL. */
int fg_pass_str_equal(const char *a, const char *b);
/* The value of output o when it is a constant node's, else NULL. */
const fg_tensor *fg_pass_const_value(const fg_graph *g, fg_output o);
/* 1 when output o is a constant or a fill whose every element is 1
 * (simplify.c's x*1 test). */
int fg_pass_const_all_one(const fg_graph *g, fg_output o);

/* The passes. */
int fg_pass_dce(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_cse(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_simplify(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_fold(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_fold_inference(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_activations(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_layer_norm(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_xent_grad(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_epilogue(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_conv_epilogue(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_update_epilogue(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_grad_epilogue(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_transpose_matmul(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_fuse(fg_pass_ctx *ctx, fg_status *st);
int fg_pass_multi_update(fg_pass_ctx *ctx, fg_status *st);

/* The report (report.c). */
int fg_pass_report_add(fg_pass_report *r, const char *pass, const char *action, const char *node,
                       const char *into, const char *rule);
void fg_pass_report_clear(fg_pass_report *r);

/* What a session runs (session_passes.c): the pipeline of `opts` on a
 * copy of g, every node kept (a session may fetch any name), rewrites kept
 * within each node_dev device and host_nodes side (either may be NULL);
 * gpu: the session runs on a GPU. NULL with the status clear when `opts`
 * or the environment turn the passes off. */
fg_pass_graph *fg_passes_for_session(const fg_graph *g, const fg_pass_options *opts,
                                     const int *node_dev, const unsigned char *host_nodes, int gpu,
                                     fg_status *st);
/* A multi-device plan of w: node_dev (the partition's, per source node)
 * extended to w's appended constants, each on the device of the node it
 * was placed as (fg_pass_graph_placed_as); the caller frees it. NULL when
 * w appended nothing (node_dev serves) or out of memory (*failed set). */
int *fg_passes_node_devices(const fg_pass_graph *w, const int *node_dev, int *failed);
/* 1 when FG_PASSES is "off" or "0". */
int fg_passes_env_off(void);

#endif
