#!/bin/sh
# The layering check: every #include "..." in the tree must point along an
# allowed arrow, and no library .c file may exceed 1000 lines.
#
# Allowed arrows (a folder may always include its own headers; angle-bracket
# includes are system headers: libc, BLAS, libxsmm, oneDNN, MPI, CUDA, NCCL):
#
#   include/       -> (nothing else)
#   graph/         -> include/
#   schema/        -> graph/, include/
#   autodiff/      -> graph/, include/
#   dist/rewrite/  -> graph/, autodiff/, include/
#   dist/comm/     -> include/, kernels/
#   executor/      -> graph/, kernels/, dist/ (rewrite and comm), include/
#   kernels/       -> include/
#   tools/         -> include/ (the public API only)
#   bench/         -> include/ (the public API only)
#   examples/      -> include/ (the public API only)
#   tests/         -> anything
#
# A header is named by its path from the repository root ("graph/op_table.h",
# "dist/comm/comm.h") or, for the public API, from include/ ("flowgraph/
# session.h"); a name without a folder is a header next to the including
# file. Fails naming file, line and the forbidden header.
#
# Usage: layering_test.sh <repository root>
set -eu
cd "$1"

# Known exceptions: "file:header" per line (none now: tools/ and bench/ use
# the public API only). An entry that no longer matches is reported, so the
# list only shrinks.
exceptions=''
# Known exceptions to the size rule: library files over 1000 lines, one path
# per line (none now); reported when one no longer applies.
big_exceptions=''

# Third-party headers included with quotes (FlatBuffers' own convention):
# system headers for this check.
third_party() {
  case "$1" in
  flatbuffers/*) return 0 ;;
  # protobuf-c's C code generated from python3-onnx's onnx.proto (cmake/onnx.cmake)
  onnx/onnx.pb-c.h) return 0 ;;
  *) return 1 ;;
  esac
}

# layer_of PATH: the layer a file or header belongs to ("" = unknown).
layer_of() {
  case "$1" in
  include/* | flowgraph/*) echo include ;;
  dist/rewrite/*) echo dist/rewrite ;;
  dist/comm/*) echo dist/comm ;;
  dist/*) echo dist ;;
  graph/* | schema/* | autodiff/* | executor/* | kernels/* | tools/* | bench/* | examples/* | tests/*)
    echo "${1%%/*}" ;;
  *) echo "" ;;
  esac
}

# allowed FROM TO: 0 when layer FROM may include a header of layer TO.
allowed() {
  [ "$1" = "$2" ] && return 0
  [ "$2" = include ] && return 0
  case "$1" in
  include) return 1 ;;
  graph) return 1 ;;
  schema | autodiff) [ "$2" = graph ] ;;
  dist/rewrite) [ "$2" = graph ] || [ "$2" = autodiff ] ;;
  dist/comm) [ "$2" = kernels ] ;;
  executor) [ "$2" = graph ] || [ "$2" = kernels ] || [ "$2" = dist/rewrite ] || [ "$2" = dist/comm ] ;;
  kernels) return 1 ;;
  tools | bench | examples) return 1 ;;
  tests) return 0 ;;
  *) return 1 ;;
  esac
}

files=$(git ls-files '*.c' '*.h' '*.cc' '*.cu' 2>/dev/null || true)
[ -n "$files" ] || files=$(find . -path ./build -prune -o \( -name '*.c' -o -name '*.h' -o -name '*.cc' -o -name '*.cu' \) -print | sed 's|^\./||')

bad=0
used=""
for f in $files; do
  from=$(layer_of "$f")
  [ -n "$from" ] || continue
  [ "$from" = tests ] && continue
  # "N:header" for every quoted include of f.
  hits=$(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
    sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/' || true)
  for h in $hits; do
    line=${h%%:*}
    hdr=${h#*:}
    third_party "$hdr" && continue
    case "$hdr" in
    */*) path=$hdr ;;
    *) path="$(dirname "$f")/$hdr" ;; # next to the including file
    esac
    to=$(layer_of "$path")
    if [ -z "$to" ]; then
      # Generated headers live in the build tree under their layer's name
      # (schema/graph_generated.h); anything else is unknown.
      echo "layering: $f:$line includes \"$hdr\", which belongs to no layer"
      bad=1
      continue
    fi
    allowed "$from" "$to" && continue
    if printf '%s\n' "$exceptions" | grep -qxF "$f:$hdr"; then
      used="$used
$f:$hdr"
      continue
    fi
    echo "layering: $f:$line includes \"$hdr\": $from/ may not include $to/ headers"
    bad=1
  done
done

# Exceptions that no longer occur must leave the list.
for e in $exceptions; do
  if ! printf '%s\n' "$used" | grep -qxF "$e"; then
    echo "layering: known exception '$e' no longer occurs; remove it from tests/layering_test.sh"
    bad=1
  fi
done

# No library source over 1000 lines (split by concern instead).
for f in $files; do
  case "$f" in
  graph/*.c | schema/*.cc | schema/onnx/*.c | autodiff/*.c | dist/*.c | executor/*.c | kernels/*.c | kernels/*.cu | include/*) ;;
  *) continue ;;
  esac
  n=$(wc -l <"$f")
  known=0
  printf '%s\n' "$big_exceptions" | grep -qxF "$f" && known=1
  if [ "$n" -gt 1000 ] && [ "$known" -eq 0 ]; then
    echo "layering: $f has $n lines; a library source may have at most 1000"
    bad=1
  elif [ "$n" -le 1000 ] && [ "$known" -eq 1 ]; then
    echo "layering: $f has $n lines now; remove it from big_exceptions in tests/layering_test.sh"
    bad=1
  fi
done

[ "$bad" -eq 0 ] && echo "layering: ok"
exit "$bad"
