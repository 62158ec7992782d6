#!/bin/sh
# libflowgraph.so exports exactly its public API: every dynamic symbol it
# defines is an fg_ function declared with FG_API in include/flowgraph/,
# and every such function is exported. Anything else in the table (an
# internal fgk_/fgi_ function, a static library's libxsmm_ symbol, a C++
# template) would be reachable by users and clash with other libraries in
# the same process.
# usage: symbols_test.sh LIBFLOWGRAPH_SO INCLUDE_DIR
set -eu
lib=$1
inc=$2
[ -f "$lib" ] || { echo "FAIL: no library at $lib"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The declared API: the name before the '(' of every FG_API declaration
# (declarations may span lines, so the headers are read as one line);
# export.h, which defines the macro, declares nothing.
for h in "$inc"/*.h; do [ "$(basename "$h")" = export.h ] || cat "$h"; done | tr '\n' ' ' | grep -oE 'FG_API[^;(]*\(' |
  sed -E 's/[[:space:]]*\($//; s/.*[^A-Za-z0-9_]//' | sort -u >"$tmp/declared"
# The exported: defined dynamic symbols (nm prints "ADDRESS TYPE NAME").
nm -D --defined-only "$lib" | awk '{print $NF}' | sed 's/@.*//' | sort -u >"$tmp/exported"

n_decl=$(wc -l <"$tmp/declared")
n_exp=$(wc -l <"$tmp/exported")
echo "declared with FG_API: $n_decl; exported by $(basename "$lib"): $n_exp"
[ "$n_decl" -gt 100 ] || { echo "FAIL: found only $n_decl FG_API declarations in $inc"; exit 1; }

status=0
bad=$(grep -v '^fg_' "$tmp/declared" || true)
if [ -n "$bad" ]; then
  echo "FAIL: FG_API declarations without the fg_ prefix:"
  echo "$bad" | sed 's/^/  /'
  status=1
fi
extra=$(comm -23 "$tmp/exported" "$tmp/declared")
if [ -n "$extra" ]; then
  echo "FAIL: $(echo "$extra" | wc -l) exported symbols are not public fg_ functions of $inc:"
  echo "$extra" | sed 's/^/  /'
  status=1
fi
missing=$(comm -13 "$tmp/exported" "$tmp/declared")
if [ -n "$missing" ]; then
  echo "FAIL: declared with FG_API but not exported (hidden or not defined):"
  echo "$missing" | sed 's/^/  /'
  status=1
fi
[ $status -eq 0 ] && echo "OK: the exported symbols are exactly the public API"
exit $status
