/* Internal entry points of schema/ that C code (tests, tools) may call.
 * Not part of the public API; see include/flowgraph/io.h for that. */
#ifndef FG_SCHEMA_FGB_INTERNAL_H
#define FG_SCHEMA_FGB_INTERNAL_H

#include <stddef.h>

#include "flowgraph/graph.h"
#include "flowgraph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The verifier limits fg_graph_load_memory uses. */
#define FGB_VERIFY_MAX_DEPTH  64
#define FGB_VERIFY_MAX_TABLES 1000000

/* fg_graph_load_memory with explicit verifier limits. The schema has no
 * recursive tables, so a real file nests at most 4 tables deep and only a
 * smaller limit than the default can show that the depth check works. */
fg_graph *fgb_load_memory_limits(const void *data, size_t size, unsigned max_depth,
                                 unsigned max_tables, fg_status *status);

/* JSON text (NUL-terminated, `len` bytes) to .fgb bytes, with no checks
 * beyond the parser's: used to make test files, good and bad. `schema` is the
 * text of a .fbs schema, NULL for schema/graph.fbs. *data is malloc'ed
 * (free with free()). Returns 0, or -1 with FG_FORMAT_ERROR and the parser's
 * message. */
int fgb_json_to_binary(const char *schema, const char *json, size_t len, void **data, size_t *size,
                       fg_status *status);

/* Strict JSON text for verified .fgb bytes. Floats are printed with 17
 * significant digits so text -> bytes gives back the same values (FlatBuffers'
 * own GenerateText keeps only 12 decimals). *text is malloc'ed and
 * NUL-terminated. */
int fgb_binary_to_json(const void *data, size_t size, char **text, size_t *len, fg_status *status);

#ifdef __cplusplus
}
#endif
#endif
