/* flowgraph: .fgb files (FlatBuffers, schema/graph.fbs) and their JSON form.
 *
 * Files are untrusted. Loading runs the FlatBuffers verifier, then semantic
 * validation (node indices, cycles, duplicate names, dtypes, shapes, byte
 * sizes with overflow checks, buffers, attributes) before building the graph.
 * Errors: FG_NOT_FOUND (missing path), FG_FORMAT_ERROR (not a valid .fgb),
 * FG_UNSUPPORTED (a newer format version), FG_UNIMPLEMENTED (unknown op),
 * FG_INVALID_GRAPH (everything semantic), FG_IO_ERROR (read/write failed).
 */
#ifndef FLOWGRAPH_IO_H
#define FLOWGRAPH_IO_H

#include "flowgraph/graph.h"
#include "flowgraph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The version written into files; readers refuse files with a larger one. */
#define FG_FORMAT_VERSION 1

/* Writes to a temporary file and renames it: no partial file is left. A
 * symbolic link keeps leading to the new file (written beside its
 * target); a device or FIFO (/dev/stdout) is written in place. */
int fg_graph_save(const fg_graph *g, const char *path, fg_status *status);
/* Serialises into a new malloc'ed buffer (free with free()). */
int fg_graph_save_memory(const fg_graph *g, void **data, size_t *size, fg_status *status);
fg_graph *fg_graph_load(const char *path, fg_status *status);
/* The bytes are only read during the call. */
fg_graph *fg_graph_load_memory(const void *data, size_t size, fg_status *status);

/* The JSON text form of the same schema, through FlatBuffers' parser. */
int fg_graph_save_json(const fg_graph *g, const char *path, fg_status *status);
fg_graph *fg_graph_load_json(const char *path, fg_status *status);

#ifdef __cplusplus
}
#endif
#endif
