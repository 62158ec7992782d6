/* The ONNX importer's interface to its op mappers.
 *
 * onnx_import.c decodes the ModelProto, checks it, turns initializers and
 * inputs into values and then calls, for each node in order, the mapper
 * registered for its op type. A mapper reads the node's inputs and
 * attributes through the functions below, appends flowgraph nodes with the
 * public builders (fg_conv2d, fg_add, fg_op, ...) and binds each ONNX output
 * to a flowgraph output or to a value known at import.
 *
 * Values known at import. Initializers, Constant nodes and the shape
 * arithmetic exporters emit (Shape -> Gather -> Unsqueeze -> Concat ->
 * Reshape) are kept as tensors, so mappers can fold them: a Reshape whose
 * shape input is known becomes a reshape with that shape. A known value only
 * becomes a constant node when a mapper asks for it as a graph input
 * (fgx_input). An int64 known value may hold entries that depend on the
 * unknown batch size (the leading dimension of inputs with a symbolic
 * first dimension): where sym[i] is 1, element i stands for data[i] * batch.
 * Shape marks such entries; the mappers of the integer ops that shape
 * arithmetic uses carry them through (reading and writing fgx_known.sym)
 * and Reshape turns the one batch-dependent entry of its shape into -1.
 * Such a value has no constant form: fgx_input refuses it, naming the node.
 *
 * Every mapper returns 0, or -1 after fgx_fail. Errors name the ONNX node
 * (its name, or "#<index>" when it has none), its op type and the input,
 * attribute or value at fault. */
#ifndef FG_SCHEMA_ONNX_IMPORT_H
#define FG_SCHEMA_ONNX_IMPORT_H

#include <stdint.h>

#include "flowgraph/graph.h"
#include "flowgraph/status.h"
#include "onnx/onnx.pb-c.h"

typedef struct fgx_ctx fgx_ctx; /* one import in progress (onnx_import.c) */
typedef Onnx__NodeProto fgx_node;

/* A value known at import. t is owned by the importer; sym is NULL or one
 * flag per element of an int64 tensor (see above). */
typedef struct fgx_known {
  fg_tensor *t;
  uint8_t *sym;
} fgx_known;

typedef int (*fgx_map_fn)(fgx_ctx *c, const fgx_node *n);

/* One mapper of the default domain ("" or "ai.onnx"). A mapper handles
 * every opset from 7 to 17 for its op, switching on fgx_opset() where
 * the op changed (Squeeze's axes moved from an attribute to an input in
 * 13, Softmax's axis semantics changed in 13, ...). */
typedef struct fgx_op {
  const char *type;
  fgx_map_fn map;
} fgx_op;

/* The mapper tables, each ended by {NULL, NULL}; the importer looks a type
 * up in all of them (a type in two tables is a bug a test catches). */
extern const fgx_op fgx_ops_core[];   /* onnx_map_core.c: Constant, Identity, Shape, Cast, ... */
extern const fgx_op fgx_ops_nn[];     /* onnx_map_nn.c: Conv, pools, norms, Gemm, activations */
extern const fgx_op fgx_ops_math[];   /* onnx_map_math.c: element-wise, reductions, logic */
extern const fgx_op fgx_ops_tensor[]; /* onnx_map_tensor.c: Reshape, Concat, Slice, Gather, ... */
extern const fgx_op fgx_ops_rnn[];    /* onnx_map_rnn.c: LSTM, GRU (unrolled) */

/* ---- the import -------------------------------------------------------- */

fg_graph *fgx_graph(fgx_ctx *c);
/* The model's opset of the default domain (7..17). */
int fgx_opset(const fgx_ctx *c);
/* Sets the import's error: "ONNX node 'NAME' (TYPE): <message>"; returns -1. */
int fgx_fail(fgx_ctx *c, const fgx_node *n, fg_code code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* The node's name as errors print it. */
const char *fgx_node_label(fgx_ctx *c, const fgx_node *n);

/* ---- inputs -------------------------------------------------------------
 * i counts the node's inputs as the file lists them; an optional input may
 * be absent (past the end, or named ""). */

int fgx_num_inputs(const fgx_node *n);
int fgx_has_input(const fgx_node *n, int i);
/* The input as a graph value (a known value becomes a constant node the
 * first time). FG_NO_OUTPUT after fgx_fail when absent or batch-dependent. */
fg_output fgx_input(fgx_ctx *c, const fgx_node *n, int i);
/* The input's value when it is known at import, else NULL (also when
 * absent). */
const fgx_known *fgx_input_known(fgx_ctx *c, const fgx_node *n, int i);
/* A known integer input (int32 or int64, no batch-dependent entries) as
 * int64: *v points into importer-owned memory valid for the import. -1
 * after fgx_fail (naming the input and why) when it is absent, not known
 * at import, not an integer or batch-dependent. */
int fgx_input_ints(fgx_ctx *c, const fgx_node *n, int i, const int64_t **v, int64_t *len);
/* fgx_input_ints of one entry (a scalar or [1]), `what` naming it in the
 * error when it has another count. */
int fgx_input_int(fgx_ctx *c, const fgx_node *n, int i, const char *what, int64_t *v);
/* dtype, rank and dims (FG_DIM_UNKNOWN where unknown) of a present input,
 * known or not; -1 after fgx_fail when absent. dims holds FG_MAX_DIMS. */
#define FGX_MAX_DIMS 8
int fgx_input_info(fgx_ctx *c, const fgx_node *n, int i, fg_dtype *dtype, int *rank, int64_t *dims);

/* How unknown dimension d of present input i depends on the batch size B:
 * *k with the dimension k x B, k >= 1 (Shape reports it so). Found by
 * inferring the graph's shapes at B = 2 and B = 4; where that inference
 * fails (a shape rule that holds only for some batch sizes), *k is 1, the
 * batch itself. -1 after fgx_fail when it is not a multiple of B (naming
 * the node, the input and both sizes). For unknown dimensions only. */
int fgx_input_batch_multiple(fgx_ctx *c, const fgx_node *n, int i, int d, int64_t *k);

/* ---- attributes ---------------------------------------------------------
 * Each returns 1 when the attribute is present, 0 when absent (the output
 * gets the default), -1 after fgx_fail when present with another type. */

int fgx_attr_int(fgx_ctx *c, const fgx_node *n, const char *name, int64_t def, int64_t *v);
int fgx_attr_float(fgx_ctx *c, const fgx_node *n, const char *name, double def, double *v);
/* *v is the node's bytes, NUL-terminated copy owned by the importer. */
int fgx_attr_string(fgx_ctx *c, const fgx_node *n, const char *name, const char *def,
                    const char **v);
/* *v points into the node (valid for the import); *len is 0 when absent. */
int fgx_attr_ints(fgx_ctx *c, const fgx_node *n, const char *name, const int64_t **v, int64_t *len);
int fgx_attr_floats(fgx_ctx *c, const fgx_node *n, const char *name, const float **v, int64_t *len);
/* A tensor attribute converted and checked as initializers are; the caller
 * owns *t. */
int fgx_attr_tensor(fgx_ctx *c, const fgx_node *n, const char *name, fg_tensor **t);

/* An axis attribute or input value in [-rank, rank) made non-negative; -1
 * after fgx_fail naming `what` and the value otherwise. */
int fgx_axis(fgx_ctx *c, const fgx_node *n, const char *what, int64_t axis, int rank, int64_t *out);

/* ---- outputs ------------------------------------------------------------ */

int fgx_num_outputs(const fgx_node *n);
/* An optional output may be unused (past the end, or named ""). */
int fgx_has_output(const fgx_node *n, int i);
/* Binds output i to a graph value. */
int fgx_set_output(fgx_ctx *c, const fgx_node *n, int i, fg_output o);
/* Binds output i to a value known at import; takes ownership of t and sym
 * (sym may be NULL), also on failure. */
int fgx_set_output_known(fgx_ctx *c, const fgx_node *n, int i, fg_tensor *t, uint8_t *sym);

#endif /* FG_SCHEMA_ONNX_IMPORT_H */
