#!/bin/sh
# Installs the build into a temporary prefix, then builds a small program
# against it twice: through pkg-config and through find_package(flowgraph).
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib/x86_64-linux-gnu/pkgconfig"
libdir=$(pkg-config --variable=libdir flowgraph)
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/pc" "$src/examples/readme_example.c" \
  $(pkg-config --cflags --libs flowgraph)
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/pc")
echo "pkg-config build printed: $out"
[ "$out" = "y = [6.5, 5.5]" ] || { echo "unexpected output"; exit 1; }

mkdir "$tmp/cm"
cat >"$tmp/cm/CMakeLists.txt" <<EOC
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(flowgraph REQUIRED)
add_executable(consumer $src/examples/readme_example.c)
target_link_libraries(consumer PRIVATE flowgraph::flowgraph)
EOC
cmake -S "$tmp/cm" -B "$tmp/cm/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm/build" >/dev/null
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/cm/build/consumer")
echo "find_package build printed: $out"
[ "$out" = "y = [6.5, 5.5]" ] || { echo "unexpected output"; exit 1; }
