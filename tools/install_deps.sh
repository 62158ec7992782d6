#!/bin/sh
# Installs the Debian packages flowgraph needs, only when one is missing, so
# it is quick and idempotent. Runs as root (CI) or through sudo.
#
# Usage: tools/install_deps.sh [demo|all]   (default: all)
#   demo  what `make demo` needs: the compiler, CMake with Ninja, OpenBLAS,
#         libxsmm, oneDNN (the CNN's convolutions) and FlatBuffers (the .fgb
#         files).
#   all   what `make test` and `make bench` need on top: protobuf-c and
#         ONNX's schema (python3-onnx) for ONNX import and export, NumPy and
#         PyTorch for the reference values and benchmarks, Open MPI, and clang
#         with its runtime for the fuzzers, and LLVM's linker lld (it links
#         the 160 test programs in half of GNU ld's time). Open MPI's mpirun
#         looks for an rsh agent (ssh) even for a local launch, hence
#         openssh-client; iproute2's `ip netns` makes the two hosts of the
#         tests across hosts (tools/netns_hosts.sh).
set -eu
profile=${1:-all}
DEMO_PKGS="cmake ninja-build make gcc g++ pkg-config libopenblas-dev libxsmm-dev libdnnl-dev flatbuffers-compiler libflatbuffers-dev"
TEST_PKGS="lld python3-numpy python3-torch python3-torchvision python3-onnx libprotobuf-c-dev protobuf-c-compiler clang openmpi-bin libopenmpi-dev openssh-client iproute2"
case "$profile" in
  demo) PKGS="$DEMO_PKGS" ;;
  all) PKGS="$DEMO_PKGS $TEST_PKGS" ;;
  *) echo "usage: $0 [demo|all]" >&2; exit 2 ;;
esac

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
updated=""

# install PKG...: installs those of PKG... that are not installed.
install() {
  missing=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  echo "install_deps: installing$missing"
  if [ -z "$updated" ]; then
    $SUDO apt-get update -qq
    updated=1
  fi
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq --no-install-recommends $missing
}

# shellcheck disable=SC2086
install $PKGS
[ "$profile" = all ] || exit 0

# The fuzzers link clang's sanitizer and libFuzzer runtime, packaged per LLVM
# version (libclang-rt-N-dev): the one of the clang just installed, which
# Debian's `clang` points to as /usr/lib/llvm-N/bin/clang.
clang_path=$(readlink -f "$(command -v clang)")
llvm=${clang_path#/usr/lib/llvm-}
llvm=${llvm%%/*}
case "$llvm" in
  '' | *[!0-9]*) echo "install_deps: cannot tell the LLVM version of clang ($clang_path)" >&2; exit 1 ;;
esac
install "libclang-rt-$llvm-dev"
