#!/bin/sh
# Packs what a GPU check needs from a CUDA build into .gpu/pack.tar.xz for
# the lent device machine: the CUDA-using test binaries and their ctest
# files, the CLI, the GPU bench driver, and the Debian libraries they load
# that the device image lacks (OpenBLAS, oneDNN, FlatBuffers, Open MPI). The CUDA
# libraries are not packed: the device has its own toolkit (gpu_check.sh
# finds them). Usage: tools/device/pack.sh [BUILD_DIR]
set -eu
B=${1:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
rm -rf .gpu && mkdir -p .gpu/stage/lib
mkdir -p .git/info && { grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >>.git/info/exclude; }
# Every test binary (8.9 MB of the archive): the whole suite runs there,
# not only the CUDA cases, because a GPU in the machine changes more than
# the CUDA code (the driver's own threads, device-wide memory figures).
files="$B/CTestTestfile.cmake $B/tests/CTestTestfile.cmake $B/flowgraph $B/bench/fg_bench_gpu"
[ -x $B/bench/dist_bench ] && files="$files $B/bench/dist_bench"
[ -x $B/bench/fg_bench_cnn ] && files="$files $B/bench/fg_bench_cnn"
files="$files $(find $B/tests $B/examples -maxdepth 1 -type f -perm -u+x | tr "\n" " ")"
files="$files $(ls $B/tests/*_cases.cmake $B/libflowgraph.so* | tr "\n" " ")"
for f in $B/*.fgb; do files="$files $f"; done
tar cf .gpu/stage/build.tar $files
for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libflatbuffers.so.2 libmpi.so.40 \
  libopen-rte.so.40 libopen-pal.so.40 libhwloc.so.15 libevent_core-2.1.so.7 \
  libevent_pthreads-2.1.so.7 libudev.so.1 libdnnl.so.2 libgomp.so.1; do
  cp -L /lib/x86_64-linux-gnu/$l .gpu/stage/lib/
done
tar cf - -C .gpu/stage build.tar lib | xz -T2 -6 >.gpu/pack.tar.xz
rm -rf .gpu/stage
ls -la .gpu/pack.tar.xz
