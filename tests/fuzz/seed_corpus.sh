#!/bin/sh
# Fills the fuzz corpora under BUILD_DIR/corpus/{load,api} with seeds:
#   - every .fgb in the source tree (tests/data/**, examples/**, tests/fuzz/seeds/),
#   - small valid graphs from BUILD_DIR/fuzz/fuzz_gen_seeds (every op family,
#     training steps),
#   - the digits model from example_digits_build_mlp when a build has it,
#   - the regression inputs (tests/fuzz/regressions/), for both harnesses,
#   - API decision streams that reach the dist rewrites (tests/fuzz/seeds/api/).
# Corpora only grow: files libFuzzer added in earlier runs stay.
# Usage: tests/fuzz/seed_corpus.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1
bld=$2
load=$bld/corpus/load
api=$bld/corpus/api
mkdir -p "$load" "$api"
find "$src/tests" "$src/examples" -name '*.fgb' -type f -size -1024k 2>/dev/null |
  while read -r f; do
    rel=$(printf '%s' "${f#"$src"/}" | tr '/' '_')
    cp "$f" "$load/$rel"
  done
if [ -x "$bld/fuzz/fuzz_gen_seeds" ]; then
  "$bld/fuzz/fuzz_gen_seeds" "$load"
fi
for b in "$src/build/examples/example_digits_build_mlp" "$bld/examples/example_digits_build_mlp"; do
  if [ -x "$b" ]; then
    "$b" "$load/digits_mlp.fgb" >/dev/null 2>&1 || true
    break
  fi
done
if [ -d "$src/tests/fuzz/regressions" ]; then
  for f in "$src/tests/fuzz/regressions"/*; do
    [ -f "$f" ] || continue
    cp "$f" "$load/regression_$(basename "$f")"
    cp "$f" "$api/regression_$(basename "$f")"
  done
fi
# Decision streams kept because they reach the dist rewrites (fg_data_parallel,
# fg_micro_batch, its bound on micro-batches in flight) within the smoke run.
for f in "$src/tests/fuzz/seeds/api"/*; do
  [ -f "$f" ] && cp "$f" "$api/seed_$(basename "$f")"
done
# The API harness reads bytes as decisions; any bytes are a fine start, and a
# few file seeds give it long decision streams.
for f in "$load"/gen_*.fgb; do
  [ -f "$f" ] && cp "$f" "$api/$(basename "$f")"
done
printf 'seeded: %s load inputs, %s api inputs\n' "$(ls "$load" | wc -l)" "$(ls "$api" | wc -l)"
# The ONNX harness: the small models the ONNX tests' scripts write
# (tests/schema/onnx/cases_*.py, run with python3-onnx when it is there).
onnx=$bld/corpus/onnx
mkdir -p "$onnx"
py=/usr/bin/python3
if [ -x "$py" ] && "$py" -c 'import onnx, numpy' 2>/dev/null; then
  for s in "$src"/tests/schema/onnx/cases_*.py; do
    [ -f "$s" ] || continue
    stem=$(basename "$s" .py)
    out=$bld/onnx-seeds/$stem
    rm -rf "$out"
    mkdir -p "$out"
    "$py" "$s" "$out" >/dev/null 2>&1 || continue
    find "$out" -name '*.onnx' -type f -size -64k | while read -r f; do
      cp "$f" "$onnx/${stem}_$(basename "$f")"
    done
  done
fi
for f in "$src/tests/fuzz/regressions"/onnx_*; do
  [ -f "$f" ] && cp "$f" "$onnx/regression_$(basename "$f")"
done
printf 'seeded: %s onnx inputs\n' "$(ls "$onnx" | wc -l)"
