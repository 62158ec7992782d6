#!/bin/sh
# Installs the Debian packages flowgraph needs, only when one is missing, so
# it is quick and idempotent. Runs as root (CI) or through sudo. Open MPI's
# mpirun looks for an rsh agent (ssh) even for a local launch, hence
# openssh-client. iproute2's `ip netns` makes the two hosts of the tests
# across hosts (tools/netns_hosts.sh).
set -eu
PKGS="cmake make gcc g++ pkg-config libopenblas-dev libxsmm-dev libdnnl-dev flatbuffers-compiler libflatbuffers-dev python3-numpy python3-torch python3-torchvision python3-onnx libprotobuf-c-dev protobuf-c-compiler clang libclang-rt-14-dev openmpi-bin libopenmpi-dev openssh-client iproute2"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install_deps: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
