#!/bin/sh
# The main job of `make demo`: build the digits classifier with the C API
# (examples/digits/build_mlp.c), train it with `flowgraph train`, and measure
# the trained file's accuracy on the held-out 20% with `flowgraph run`.
# Usage: tools/demo.sh [BUILD_DIR]   (run from the repository root)
set -eu
build=${1:-build}
cli="$build/flowgraph"
data=examples/digits/data
model="$build/digits_mlp.fgb"
trained="$build/digits_mlp_trained.fgb"
epochs=15

echo "== building the digits MLP (64-128-64-10, Adam) with the C API"
"$build/examples/example_digits_build_mlp" "$model"
echo
echo "== flowgraph train $model --batch 64 --epochs $epochs --shuffle 1"
"$cli" train "$model" -i x="$data/train_x.npy" -i y="$data/train_y.npy" \
  --batch 64 --epochs "$epochs" --shuffle 1 \
  --eval accuracy --eval-input x="$data/test_x.npy" --eval-input y="$data/test_y.npy" \
  --save "$trained"
echo
echo "== flowgraph run $trained --fetch accuracy on the test set"
out=$("$cli" run "$trained" -i x="$data/test_x.npy" -i y="$data/test_y.npy" --fetch accuracy)
# `run` prints "accuracy: f32 []" and then the value as "  [0.9722222]".
acc=$(printf '%s\n' "$out" | awk '/^accuracy:/ { getline; gsub(/[][ ]/, ""); print; exit }')
case "$acc" in
  '' | *[!0-9.eE+-]*) echo "demo: could not read the accuracy from: $out" >&2; exit 1 ;;
esac
printf 'test accuracy: %.3f\n' "$acc"
echo "trained model written to $trained"
if awk -v a="$acc" 'BEGIN { exit !(a < 0.96) }'; then
  echo "demo: test accuracy $acc is below 0.96" >&2
  exit 1
fi
