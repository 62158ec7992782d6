/* flowgraph: ONNX models in and out (schema/onnx/).
 *
 * fg_onnx_load reads an ONNX ModelProto (opsets 7 to 17 of the default
 * domain) into a new fg_graph:
 * - graph inputs that are not initializers become placeholders with the
 *   input's name; a symbolic leading dimension becomes FG_DIM_UNKNOWN, the
 *   batch dimension the session resolves from the feed;
 * - initializers become constants (or, with `trainable`, floating-point ones
 *   become variables that fg_gradients and fg_minimize can train);
 * - graph outputs are marked outputs (fg_graph_add_output) fetchable by the
 *   output's ONNX name;
 * - the model's doc strings, producer and metadata_props become graph
 *   metadata ("onnx.producer_name", "onnx.doc_string", ...).
 *
 * Files are untrusted: nothing the file claims is believed before it is
 * checked. Errors: FG_NOT_FOUND (missing path), FG_FORMAT_ERROR (not a
 * well-formed ModelProto: truncated, wrong wire types, sizes that disagree),
 * FG_INVALID_GRAPH (well-formed but wrong: a node input naming no tensor, a
 * cycle, an attribute of the wrong type, an external data path outside the
 * model's folder), FG_UNSUPPORTED (an opset outside 7..17, a dtype flowgraph
 * lacks), FG_UNIMPLEMENTED (ONNX ops with no mapping: the message lists every
 * one in the model, with its node, domain and opset). A library built
 * without protobuf-c reports FG_UNIMPLEMENTED from every call here. */
#ifndef FLOWGRAPH_ONNX_H
#define FLOWGRAPH_ONNX_H

#include <stddef.h>

#include "flowgraph/graph.h"
#include "flowgraph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_onnx_options {
  /* Floating-point initializers become variables (default 0: constants). */
  int trainable;
  /* The folder external data is read from. NULL: the model file's folder
   * (fg_onnx_load); fg_onnx_load_memory refuses external data without it.
   * Paths in the file are relative to it and may not leave it. */
  const char *base_dir;
} fg_onnx_options;

FG_API void fg_onnx_options_init(fg_onnx_options *o);

/* opts may be NULL (the defaults). The caller owns the returned graph. */
FG_API fg_graph *fg_onnx_load(const char *path, const fg_onnx_options *opts, fg_status *status);
/* The bytes are only read during the call. */
FG_API fg_graph *fg_onnx_load_memory(const void *data, size_t size, const fg_onnx_options *opts,
                                     fg_status *status);

/* 1 when `size` bytes at `data` (a file's first bytes) look like an ONNX
 * ModelProto rather than a .fgb or JSON file; a cheap test on the first
 * protobuf fields, for tools that accept both. 0 otherwise. */
FG_API int fg_onnx_sniff(const void *data, size_t size);

/* 1 when this library was built with ONNX support, else 0. */
FG_API int fg_onnx_available(void);

/* ---- writing ONNX --------------------------------------------------------
 * fg_onnx_save writes an inference graph for `fetches` as an ONNX
 * ModelProto (ir_version 8, the default domain at `opset`):
 * - only what the fetches need is written (walking back from them);
 * - variables are frozen into initializers holding their value in the
 *   graph (a file saved by fg_session_save holds the trained values; a
 *   variable with only an initialiser gets the value a new session would
 *   draw), constants become initializers;
 * - placeholders become graph inputs (an unknown leading dim becomes the
 *   symbolic dim "batch");
 * - batch_norm and dropout take their inference form (running statistics;
 *   dropout an Identity), whatever feeds their training input: the
 *   training flag, or a constant false (a constant true is refused);
 * - the fetches are the graph's outputs, named "node" (output 0) or
 *   "node:index".
 * Errors: FG_INVALID_ARGUMENT (a fetch that does not exist; no fetches and
 * no marked outputs; an opset outside 11..17; a fetch that needs a
 * training-only node: a gradient, an optimizer update or its state, assign,
 * group, the training flag read by anything but batch_norm or dropout, or a
 * placeholder named "labels"; each is named with the fetch),
 * FG_UNIMPLEMENTED (ops with no ONNX writer: every such node is listed at
 * once), FG_IO_ERROR. The file is written to a temporary file and renamed,
 * as fg_graph_save. */
typedef struct fg_onnx_export_options {
  int opset; /* 0: 17; 11..17 */
  /* "node" or "node:index"; NULL/0: the graph's marked outputs. */
  const char *const *fetches;
  int n_fetches;
  /* The model's producer_version (NULL: the library's version). */
  const char *producer_version;
} fg_onnx_export_options;

FG_API void fg_onnx_export_options_init(fg_onnx_export_options *o);
/* o may be NULL (the defaults). */
FG_API int fg_onnx_save(const fg_graph *g, const char *path, const fg_onnx_export_options *o,
                        fg_status *status);
/* Serialises into a new malloc'ed buffer (free with free()). */
FG_API int fg_onnx_save_memory(const fg_graph *g, void **data, size_t *size,
                               const fg_onnx_export_options *o, fg_status *status);

#ifdef __cplusplus
}
#endif

#endif /* FLOWGRAPH_ONNX_H */
