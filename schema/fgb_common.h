/* Shared by the C++ files of schema/: FlatBuffers with throwing asserts,
 * the generated schema code, the C internals, and small helpers. Not part
 * of the public API. */
#ifndef FG_SCHEMA_FGB_COMMON_H
#define FG_SCHEMA_FGB_COMMON_H

#include <stdexcept>
#include <string>
#include <vector>

/* FlatBuffers' internal asserts abort in builds without NDEBUG. The library
 * must never abort on anything a file or a caller can cause, so they throw
 * instead and the C boundary turns that into an error. */
namespace fgb {
struct assert_error : std::logic_error {
  using std::logic_error::logic_error;
};
} // namespace fgb
#ifdef FLATBUFFERS_BASE_H_
#error "include schema/fgb_common.h before any FlatBuffers header"
#endif
#define FLATBUFFERS_ASSERT(x) ((x) ? (void)0 : throw ::fgb::assert_error("flatbuffers: " #x))

#include "flatbuffers/flatbuffers.h"
#include "schema/graph_generated.h"

extern "C" {
#include "flowgraph/io.h"
#include "graph/graph_internal.h"
#include "graph/op_table.h"
}

#include "schema/fgb_internal.h"

namespace fgb {

/* FlatBuffers addresses at most 2 GiB - 1 bytes; the verifier asserts on
 * more, so every entry point checks this first. */
constexpr size_t kMaxFileBytes = FLATBUFFERS_MAX_BUFFER_SIZE - 1;
/* JSON text is bigger than the bytes it describes; the parser holds both. */
constexpr size_t kMaxJsonBytes = (size_t)1 << 30;
/* Where fg_graph_save puts constant bytes (cache line, AVX-512). */
constexpr size_t kBufferAlign = 64;

/* A string from a file, fit for a one-line message: at most `max` bytes,
 * control characters, quotes and backslashes escaped. */
std::string esc(const char *s, size_t n, size_t max = 64);
inline std::string esc(const flatbuffers::String *s) {
  return s ? esc(s->c_str(), s->size()) : std::string("(none)");
}
inline std::string esc(const char *s) {
  return s ? esc(s, std::char_traits<char>::length(s)) : "(none)";
}
inline std::string path_str(const char *path) {
  return path ? esc(path, std::char_traits<char>::length(path), 1024) : "(null)";
}

/* Reads a whole file of at most `cap` bytes into `out`. Sets status and
 * returns -1 on failure: FG_NOT_FOUND for a missing path, FG_FORMAT_ERROR
 * for a directory, FG_RESOURCE_EXHAUSTED when over `cap`, FG_IO_ERROR when
 * the OS refuses. */
int read_file(const char *path, size_t cap, std::string *out, fg_status *st);
/* Writes `size` bytes to a temporary file beside `path`, then renames it over
 * `path`. On failure the temporary file is removed and `path` is untouched. */
int write_file_atomic(const char *path, const void *data, size_t size, fg_status *st);

/* The check every save entry point starts with: a graph, and no sticky
 * error on it. */
int check_graph(const fg_graph *g, const char *what, fg_status *st);
/* Serialises a graph into `fbb` (finished, with the file identifier). */
int serialize(const fg_graph *g, flatbuffers::FlatBufferBuilder *fbb, fg_status *st);

/* What validation hands the builder: op ids of the file's nodes, and the
 * file ids in an order where every node comes after its inputs. */
struct Plan {
  std::vector<int> op;
  std::vector<int> order;
};
/* Semantic checks of a verified file (see schema/fgb_validate.cc). */
int validate(const flowgraph::fb::Graph *root, Plan *plan, fg_status *st);

/* Verifies, validates and builds. `path` (may be NULL) prefixes file-level
 * messages. */
fg_graph *load_bytes(const void *data, size_t size, const char *path, unsigned max_depth,
                     unsigned max_tables, fg_status *st);

/* Translates the exception in flight at a C boundary into a status. */
void status_from_exception(fg_status *st, const char *what);

} // namespace fgb

#endif
