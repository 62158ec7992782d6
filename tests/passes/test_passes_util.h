/* Shared helpers of the pass tests: counting nodes, optimizing with one
 * fetch, and running a graph with the passes on and off. */
#ifndef TEST_PASSES_UTIL_H
#define TEST_PASSES_UTIL_H

#include <string.h>

#include <flowgraph/flowgraph.h>
#include <flowgraph/passes.h>

#include "fgtest.h"

static inline int count_op(const fg_graph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < fg_graph_num_nodes(g); i++)
    n += strcmp(fg_node_op(g, i), op) == 0;
  return n;
}

/* The change the report records for `node` by `pass`, or NULL. */
static inline const fg_pass_change *find_change(const fg_pass_report *r, const char *pass,
                                                const char *node) {
  for (int i = 0; i < fg_pass_report_size(r); i++) {
    const fg_pass_change *c = fg_pass_report_change(r, i);
    if (strcmp(c->pass, pass) == 0 && strcmp(c->node, node) == 0) return c;
  }
  return NULL;
}

/* The pass list the helpers here run with the passes on: NULL for the
 * default pipeline; the tests of a pass that is off by default name it. */
static const char *test_pass_list;

static inline fg_graph *optimize1(const fg_graph *g, const char *fetch, fg_pass_report **r) {
  fg_status *st = fg_status_new();
  fg_pass_options po = {0, test_pass_list};
  fg_graph *o = fg_optimize(g, &po, &fetch, 1, r, st);
  if (!o) fprintf(stderr, "fg_optimize: %s\n", fg_status_message(st));
  fg_status_free(st);
  return o;
}

/* fg_optimize of g keeping the n fetches, with test_pass_list. */
static inline fg_graph *optimize_fetches(const fg_graph *g, const char **fetch, int n,
                                         fg_pass_report **r) {
  fg_status *st = fg_status_new();
  fg_pass_options po = {0, test_pass_list};
  fg_graph *o = fg_optimize(g, &po, fetch, n, r, st);
  if (!o) fprintf(stderr, "fg_optimize: %s\n", fg_status_message(st));
  fg_status_free(st);
  return o;
}

/* The default pipeline without fuse, for tests of the other passes whose
 * nodes fuse would take into fused_elementwise nodes. */
#define NO_FUSE "simplify,fold,fold_inference,cse,dce"

/* The default pipeline without conv_epilogue, for the folding tests that
 * look at the conv2d a batch norm becomes (conv_epilogue would take it
 * into the relu after it). */
/* The default pipeline, named pass by pass. */
#define WITH_CONV_EPILOGUE                                                                         \
  "simplify,fold,fold_inference,cse,activations,layer_norm,xent_grad,epilogue,conv_epilogue,"      \
  "update_epilogue,grad_epilogue,transpose_matmul,fuse,multi_update,dce"
#define NO_CONV_EPILOGUE                                                                           \
  "simplify,fold,fold_inference,cse,activations,layer_norm,xent_grad,epilogue,update_epilogue,"    \
  "grad_epilogue,transpose_matmul,fuse,multi_update,dce"
/* The default pipeline without activations and layer_norm (not bitwise),
 * for the tests that compare whole graphs with the passes on and off bit
 * for bit. */
#define NO_ACTIVATIONS                                                                             \
  "simplify,fold,fold_inference,cse,xent_grad,epilogue,conv_epilogue,update_epilogue,grad_"        \
  "epilogue,transpose_matmul,fuse,multi_update,dce"
/* The default pipeline without update_epilogue, for the tests of passes
 * that take the weight gradients and their SGD updates themselves
 * (grad_epilogue's matmul_bias_grad, multi_update's multi_apply_sgd). */
#define NO_UPDATE_EPILOGUE                                                                         \
  "simplify,fold,fold_inference,cse,activations,layer_norm,xent_grad,epilogue,conv_epilogue,"      \
  "grad_epilogue,transpose_matmul,fuse,multi_update,dce"

static inline fg_graph *optimize_passes(const fg_graph *g, const char *fetch, const char *passes,
                                        fg_pass_report **r) {
  fg_status *st = fg_status_new();
  fg_pass_options po = {0, passes};
  fg_graph *o = fg_optimize(g, &po, &fetch, 1, r, st);
  if (!o) fprintf(stderr, "fg_optimize: %s\n", fg_status_message(st));
  fg_status_free(st);
  return o;
}

/* A session on g on `device` (NULL: the CPU) with `threads` threads, the
 * passes on (no_passes 0) or off. */
static inline fg_session *passes_session_on(fg_graph *g, const char *device, int threads,
                                            int no_passes, fg_status *st) {
  fg_session_options o;
  fg_session_options_init(&o);
  o.device = device;
  o.num_threads = threads;
  o.no_passes = no_passes;
  o.passes = no_passes ? NULL : test_pass_list;
  return fg_session_new(g, &o, st);
}

static inline fg_session *passes_session(fg_graph *g, int threads, int no_passes, fg_status *st) {
  return passes_session_on(g, NULL, threads, no_passes, st);
}

/* Runs `fetch` of g fed feeds[0..n) in passes_session_on's session; NULL
 * after printing the message. */
static inline fg_tensor *run_feeds_on(fg_graph *g, const char *device, int threads, int no_passes,
                                      const fg_feed *feeds, int n, const char *fetch) {
  fg_status *st = fg_status_new();
  fg_session *s = passes_session_on(g, device, threads, no_passes, st);
  fg_tensor *out = NULL;
  if (s && fg_session_run(s, feeds, n, &fetch, 1, &out, NULL, 0, st) != 0) out = NULL;
  if (!out) fprintf(stderr, "run '%s': %s\n", fetch, fg_status_message(st));
  fg_session_free(s);
  fg_status_free(st);
  return out;
}

/* Runs `fetch` of g with one feed "x", passes on (no_passes 0) or off. */
static inline fg_tensor *run_fetch(fg_graph *g, const fg_tensor *x, const char *fetch,
                                   int no_passes) {
  fg_feed feed = {"x", x};
  return run_feeds_on(g, NULL, 1, no_passes, &feed, x ? 1 : 0, fetch);
}

/* 1 when a and b hold the same bytes, but that two NaNs (f32, f64) are
 * equal whatever their signs and payloads: where both operands of an
 * addition or a multiplication are NaN, the hardware keeps the one the
 * compiler made the first operand, which C leaves open, so a fused loop
 * and the op's own loop may keep different ones (flowgraph/passes.h). */
static inline int same_values(const fg_tensor *a, const fg_tensor *b) {
  if (!a || !b || fg_tensor_num_bytes(a) != fg_tensor_num_bytes(b) ||
      fg_tensor_dtype(a) != fg_tensor_dtype(b))
    return 0;
  fg_dtype dt = fg_tensor_dtype(a);
  if (dt != FG_F32 && dt != FG_F64)
    return memcmp(fg_tensor_data(a), fg_tensor_data(b), fg_tensor_num_bytes(a)) == 0;
  int64_t n = fg_tensor_num_elements(a);
  for (int64_t i = 0; i < n; i++) {
    double x = dt == FG_F32 ? ((const float *)fg_tensor_data(a))[i]
                            : ((const double *)fg_tensor_data(a))[i];
    double y = dt == FG_F32 ? ((const float *)fg_tensor_data(b))[i]
                            : ((const double *)fg_tensor_data(b))[i];
    if (x != x && y != y) continue;
    if (memcmp(&x, &y, sizeof x) != 0) return 0;
  }
  return 1;
}

/* 1 when `fetch` of on_g with the passes on gives the bytes of off_g
 * with them off (NaNs as same_values compares them). */
static inline int same_bits_as(fg_graph *on_g, fg_graph *off_g, const fg_tensor *x,
                               const char *fetch) {
  fg_tensor *on = run_fetch(on_g, x, fetch, 0), *off = run_fetch(off_g, x, fetch, 1);
  int same = same_values(on, off);
  fg_tensor_free(on);
  fg_tensor_free(off);
  return same;
}

/* The same for one graph: its passes change no bit of `fetch`. */
static inline int same_bits_on_off(fg_graph *g, const fg_tensor *x, const char *fetch) {
  return same_bits_as(g, g, x, fetch);
}

/* The op of node `name`'s step in a plan ("" when it has none). */
static inline const char *step_op(const fg_plan_info *pi, const fg_graph *g, const char *name) {
  int id = fg_graph_find_output(g, name).node;
  for (int si = 0; id >= 0 && si < pi->n_steps; si++)
    if (pi->step_nodes[si] == id && !pi->step_recv[si]) return pi->step_ops[si];
  return "";
}

/* The op of node `node`'s step in the plan of a session on g (the passes
 * of test_pass_list) fetching `fetch`, fed "x" (NULL: nothing), into buf;
 * the error message when there is no plan. */
static inline const char *session_step_op(fg_graph *g, const fg_tensor *x, const char *fetch,
                                          const char *node, char *buf, size_t size) {
  fg_status *st = fg_status_new();
  fg_session *s = passes_session(g, 1, 0, st);
  fg_feed feed = {"x", x};
  fg_plan_info *pi = s ? fg_session_plan_info(s, &feed, x ? 1 : 0, &fetch, 1, NULL, 0, st) : NULL;
  snprintf(buf, size, "%s", pi ? step_op(pi, g, node) : fg_status_message(st));
  fg_plan_info_free(pi);
  fg_session_free(s);
  fg_status_free(st);
  return buf;
}

/* The plan's constant tensor named `name`, or NULL. */
static inline const fg_plan_tensor *plan_constant(const fg_plan_info *pi, const char *name) {
  for (int k = 0; k < pi->n_tensors; k++)
    if (strcmp(pi->tensors[k].name, name) == 0 && strcmp(pi->tensors[k].kind, "constant") == 0)
      return &pi->tensors[k];
  return NULL;
}

#endif
