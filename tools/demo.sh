#!/bin/sh
# The main job of `make demo`: build the digits classifiers with the C API
# (examples/digits/build_mlp.c, then the CNN of build_cnn.c), train each with
# `flowgraph train`, and measure the trained file's accuracy on the held-out
# 20% with `flowgraph run`.
# Usage: tools/demo.sh [BUILD_DIR]   (run from the repository root)
set -eu
build=${1:-build}
cli="$build/flowgraph"
data=examples/digits/data

# train_and_check NAME DESCRIPTION EPOCHS MIN_ACCURACY
train_and_check() {
  model="$build/digits_$1.fgb"
  trained="$build/digits_$1_trained.fgb"
  echo "== building the digits $2 with the C API"
  "$build/examples/example_digits_build_$1" "$model"
  echo
  echo "== flowgraph train $model --batch 64 --epochs $3 --shuffle 1"
  "$cli" train "$model" -i x="$data/train_x.npy" -i y="$data/train_y.npy" \
    --batch 64 --epochs "$3" --shuffle 1 \
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
  printf '%s test accuracy: %.3f\n' "$1" "$acc"
  echo "trained model written to $trained"
  if awk -v a="$acc" -v m="$4" 'BEGIN { exit !(a < m) }'; then
    echo "demo: $1 test accuracy $acc is below $4" >&2
    exit 1
  fi
}

train_and_check mlp "MLP (64-128-64-10, Adam)" 15 0.96
echo
train_and_check cnn "CNN (conv-pool-conv-global pool-dense, Adam)" 30 0.97
