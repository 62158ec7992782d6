/* flowgraph: FG_API marks the functions libflowgraph exports.
 *
 * The library is compiled with -fvisibility=hidden, so only declarations
 * that carry FG_API (every function declared in include/flowgraph/) are in
 * libflowgraph.so's dynamic symbol table; internal functions and the
 * static libraries linked into it (libxsmm) stay private to it.
 *
 * - Shared library (the default): default visibility on ELF; on Windows,
 *   dllexport while building the library (FG_BUILD) and dllimport for its
 *   users.
 * - Static library: define FG_STATIC before including any flowgraph header
 *   (flowgraph.pc's Libs.private users may) and FG_API expands to nothing.
 *   Leaving it undefined is harmless too: the attribute only matters when a
 *   program links flowgraph into a shared object of its own, which then
 *   exports flowgraph's API as well.
 */
#ifndef FLOWGRAPH_EXPORT_H
#define FLOWGRAPH_EXPORT_H

#if defined(FG_STATIC)
#define FG_API
#elif defined(_WIN32) || defined(__CYGWIN__)
#if defined(FG_BUILD)
#define FG_API __declspec(dllexport)
#else
#define FG_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define FG_API __attribute__((visibility("default")))
#else
#define FG_API
#endif

#endif
