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
FG_API int fg_graph_save(const fg_graph *g, const char *path, fg_status *status);
/* Serialises into a new malloc'ed buffer (free with free()). */
FG_API int fg_graph_save_memory(const fg_graph *g, void **data, size_t *size, fg_status *status);
FG_API fg_graph *fg_graph_load(const char *path, fg_status *status);
/* The bytes are only read during the call. */
FG_API fg_graph *fg_graph_load_memory(const void *data, size_t size, fg_status *status);

/* The JSON text form of the same schema, through FlatBuffers' parser. */
FG_API int fg_graph_save_json(const fg_graph *g, const char *path, fg_status *status);
FG_API fg_graph *fg_graph_load_json(const char *path, fg_status *status);

/* ---- writing files as the library does --------------------------------
 * For programs that write files of their own (the CLI's traces and .npy
 * outputs) the way fg_graph_save and fg_npy_write do. A regular file is
 * written beside itself under a temporary name and renamed over the old
 * one, so it appears whole or not at all. That rename must not replace
 * what is not a regular file: a device (/dev/stdout, /dev/full) or FIFO is
 * written in place, and a symbolic link keeps leading to the new file. */

/* 1 when a file written to `path` must be opened and written in place: it
 * exists and, following links, is not a regular file (a device, a FIFO, a
 * socket). 0 for a regular file, a link to one or to nothing yet, or a path
 * where nothing is. */
FG_API int fg_path_write_in_place(const char *path);
/* Where the write-beside-and-rename of `path` happens (when
 * fg_path_write_in_place is 0): for a symbolic link, the file it leads to
 * (or names, when that does not exist yet); else `path` itself. A new
 * string the caller frees with free(), or NULL when out of memory. */
FG_API char *fg_path_write_target(const char *path);
/* Creates "<target>.tmp.<pid>.<k>" beside `target` (exclusively, k counting
 * up past names taken), open for writing with mode 0666 less the umask:
 * returns its descriptor (the caller closes it, then renames the file onto
 * `target` or unlinks it) and its name in *tmp_out (the caller frees it
 * with free()). -1 with errno set when it cannot. */
FG_API int fg_path_open_temp(const char *target, char **tmp_out);

#ifdef __cplusplus
}
#endif
#endif
