/* The ONNX exporter's inside (schema/onnx/onnx_export.c): what the per-op
 * writers (onnx_export_ops.c) see. A writer turns one flowgraph node into
 * ONNX nodes whose outputs carry the node's output names; everything it
 * allocates lives in the context's arena until the model is packed. */
#ifndef FG_ONNX_EXPORT_H
#define FG_ONNX_EXPORT_H

#include <stdint.h>
#include <string.h>

#include "flowgraph/graph.h"
#include "flowgraph/status.h"
#include "graph/graph_internal.h"
#include "onnx/onnx.pb-c.h"

typedef struct fgo_ctx fgo_ctx;

/* Writes node `id` of the graph: 0, or -1 with the status set (fgo_fail). */
typedef int (*fgo_writer)(fgo_ctx *c, int id);

typedef struct fgo_op {
  const char *op; /* the flowgraph op's name */
  fgo_writer write;
  /* Bit i set: the export follows input i back (0: every input). Inputs
   * left out are read by the writer itself (batch_norm's and dropout's
   * training input, after's ordering inputs). */
  unsigned follow;
} fgo_op;

/* The writers, ended by {NULL, NULL, 0}. */
extern const fgo_op fgo_ops[];

const fg_graph *fgo_graph(const fgo_ctx *c);
int fgo_opset(const fgo_ctx *c);
/* Records the error (FG_INVALID_ARGUMENT unless `code` says otherwise) and
 * returns -1. */
int fgo_fail(fgo_ctx *c, fg_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The ONNX tensor name of output `index` of node `id`: "name" for output 0,
 * "name:index" after (NULL when out of memory). */
const char *fgo_out(fgo_ctx *c, int id, int index);
/* The name of input i of node `id` (the producing output's name). */
const char *fgo_in(fgo_ctx *c, int id, int i);
/* A fresh tensor name "<node>/<what>_<k>" no node of the graph takes. */
const char *fgo_tmp(fgo_ctx *c, int id, const char *what);
/* The dtype and shape of an output of the graph. */
const fg_tinfo *fgo_info(fgo_ctx *c, fg_output o);
const fg_tinfo *fgo_in_info(fgo_ctx *c, int id, int i);

/* Appends an ONNX node of `op_type` (named after node `id`; extra nodes
 * get a suffix) with the given input and output names; NULL after an
 * error (out of memory). An input name of "" is an omitted optional. */
Onnx__NodeProto *fgo_emit(fgo_ctx *c, int id, const char *op_type, const char *const *in, int n_in,
                          const char *const *out, int n_out);
/* One input, one output: the common case. */
Onnx__NodeProto *fgo_emit1(fgo_ctx *c, int id, const char *op_type, const char *in,
                           const char *out);
/* Attributes on an emitted node (n NULL: a no-op, so calls chain after a
 * failed emit); -1 when out of memory. */
int fgo_attr_int(fgo_ctx *c, Onnx__NodeProto *n, const char *name, int64_t v);
int fgo_attr_float(fgo_ctx *c, Onnx__NodeProto *n, const char *name, double v);
int fgo_attr_ints(fgo_ctx *c, Onnx__NodeProto *n, const char *name, const int64_t *v, int count);
int fgo_attr_string(fgo_ctx *c, Onnx__NodeProto *n, const char *name, const char *v);
/* A one-element tensor attribute of `dtype` holding v (ConstantOfShape). */
int fgo_attr_scalar(fgo_ctx *c, Onnx__NodeProto *n, const char *name, fg_dtype dtype, double v);

/* New initializers named after node `id`; their names, or NULL. */
const char *fgo_const_i64(fgo_ctx *c, int id, const char *what, const int64_t *v, int count);
/* A rank-0 initializer of `dtype` holding v. */
const char *fgo_const_scalar(fgo_ctx *c, int id, const char *what, fg_dtype dtype, double v);

/* A rank-1 initializer of `dtype` holding v[0..n). */
const char *fgo_const_vec(fgo_ctx *c, int id, const char *what, fg_dtype dtype, const double *v,
                          int n);

/* The ONNX TensorProto data type of a flowgraph dtype (0 for none). */
int fgo_onnx_dtype(fg_dtype dtype);

/* An element-wise op written from tensor names rather than a node, so a
 * plain node (onnx_export_ops.c) and an instruction of a fused_elementwise
 * program (onnx_export_fused.c) share one writer per op. */
typedef struct fgo_ew {
  int id;            /* the flowgraph node the ONNX nodes are named after */
  const char *in[3]; /* the op's inputs, in its order */
  const char *out;   /* the result's name */
  fg_dtype dtype;    /* x's dtype: the formulas' scalar constants take it */
  double attr[2];    /* the op's attributes, in the fused program's order */
  const char *who;   /* what a refusal names: "node 'n' (softplus)" */
} fgo_ew;

typedef int (*fgo_ew_writer)(fgo_ctx *c, const fgo_ew *e);
/* The writer of element-wise op `op` ("softplus"), or NULL when it has
 * none. */
fgo_ew_writer fgo_ew_of(const char *op);

/* Transpose(x, perm) into the tensor `out` (NULL: a new one); its name,
 * or NULL after failing (x NULL, out of memory). */
const char *fgo_transpose_to(fgo_ctx *c, int id, const char *x, const int64_t *perm, int rank,
                             const char *out);
/* matmul's MatMul (with a Transpose for transpose_a/b) of node id's inputs
 * 0 and 1 into the tensor `out`. */
int fgo_matmul_to(fgo_ctx *c, int id, const char *out);
/* conv2d's Conv of node id's inputs 0 (x) and 1 (w), with the bias `b`
 * (NULL: none), into the tensor `out`, with the node's conv attributes. */
int fgo_conv2d_to(fgo_ctx *c, int id, const char *b, const char *out);

/* Node attributes with defaults (the op table's defaults where absent). */
static inline int64_t fgo_get_int(fgo_ctx *c, int id, const char *name, int64_t dflt) {
  int64_t v;
  return fg_node_attr_int(fgo_graph(c), id, name, &v) == 0 ? v : dflt;
}

static inline double fgo_get_float(fgo_ctx *c, int id, const char *name, double dflt) {
  double v;
  if (fg_node_attr_float(fgo_graph(c), id, name, &v) == 0) return v;
  int64_t i;
  return fg_node_attr_int(fgo_graph(c), id, name, &i) == 0 ? (double)i : dflt;
}

/* ints attribute into v (at most max entries); the count, or -1 when absent. */
static inline int fgo_get_ints(fgo_ctx *c, int id, const char *name, int64_t *v, int max) {
  const int64_t *p;
  int n;
  if (fg_node_attr_ints(fgo_graph(c), id, name, &p, &n) != 0) return -1;
  if (n > max) n = max;
  if (n > 0) memcpy(v, p, (size_t)n * sizeof *v);
  return n;
}

#endif
