#!/bin/sh
# Every C/C++ source follows the one .clang-format (generated fixtures aside).
# Skipped (exit 77) where clang-format is not installed.
set -eu
cd "$1"
command -v clang-format >/dev/null 2>&1 || { echo "SKIPPED: clang-format not installed"; exit 77; }
files=$(git ls-files '*.c' '*.h' '*.cc' 2>/dev/null | grep -v '^tests/data/' || true)
[ -n "$files" ] || files=$(find . -path ./tests/data -prune -o \( -name '*.c' -o -name '*.h' -o -name '*.cc' \) -print | grep -v '/build')
# shellcheck disable=SC2086
clang-format --dry-run --Werror $files
