#!/bin/sh
# The main job of `make demo`: until training lands, run the saved example
# classifier (examples/mlp.fgb) through the CLI.
set -eu
build=${1:-build}
cli="$build/flowgraph"
model=examples/mlp.fgb
echo "== flowgraph inspect $model"
"$cli" inspect "$model"
echo
echo "== flowgraph run $model --random-inputs --batch 4 --seed 7"
"$cli" run "$model" --random-inputs --batch 4 --seed 7
echo
echo "== JSON round trip: convert to JSON and back, run again"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cli" convert "$model" "$tmp/mlp.json"
"$cli" convert "$tmp/mlp.json" "$tmp/mlp.fgb"
"$cli" run "$tmp/mlp.fgb" --random-inputs --batch 4 --seed 7 --fetch class
