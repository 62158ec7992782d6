#!/bin/sh
# The README's C example must be exactly examples/readme_example.c, which the
# install test compiles and runs.
set -eu
src=$1
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
awk '/<!-- example:start -->/{on=1; next} /<!-- example:end -->/{on=0} on' "$src/README.md" \
  | sed '1d;$d' >"$tmp"
diff -u "$src/examples/readme_example.c" "$tmp"
