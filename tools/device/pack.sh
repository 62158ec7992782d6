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
# The test binaries link the library statically (about 11 MB each), so all
# of them come to far more than the device tool carries (64 MiB): by
# default only those with a gpu-labelled case, those gpu_check.sh's "tests"
# runs, the MPI helpers and the examples. xz -9's 64 MiB window sees the
# binaries' shared copies of the library: 23 MB against 60 MB at -6. (a GPU case runs the digits
# builder). FG_PACK_ALL=1 packs every test binary, for "alltests" on a
# machine that takes the size.
files="$B/CTestTestfile.cmake $B/tests/CTestTestfile.cmake $B/flowgraph $B/bench/fg_bench_gpu"
[ -x $B/bench/dist_bench ] && files="$files $B/bench/dist_bench"
[ -x $B/bench/fg_bench_cnn ] && files="$files $B/bench/fg_bench_cnn"
if [ "${FG_PACK_ALL:-0}" = 1 ]; then
  files="$files $(find $B/tests -maxdepth 1 -type f -perm -u+x | tr "\n" " ")"
else
  for t in $(find $B/tests -maxdepth 1 -type f -perm -u+x -name 'test_*'); do
    case $(basename $t) in
    test_cuda_* | test_host_steps | test_streams | test_dist | test_dist_exec | test_dist_ranks)
      files="$files $t" ;;
    *) "$t" --list 2>/dev/null | awk '$2 ~ /(^|,)gpu(,|$)/ {f = 1} END {exit !f}' &&
      files="$files $t" ;;
    esac
  done
  files="$files $(find $B/tests -maxdepth 1 -type f -perm -u+x ! -name 'test_*' | tr "\n" " ")"
fi
files="$files $(find $B/examples -maxdepth 1 -type f -perm -u+x | tr "\n" " ")"
files="$files $(ls $B/tests/*_cases.cmake $B/libflowgraph.so* | tr "\n" " ")"
for f in $B/*.fgb; do files="$files $f"; done
tar cf .gpu/stage/build.tar $files
for l in libopenblas.so.0 libgfortran.so.5 libquadmath.so.0 libflatbuffers.so.2 libmpi.so.40 \
  libopen-rte.so.40 libopen-pal.so.40 libhwloc.so.15 libevent_core-2.1.so.7 \
  libevent_pthreads-2.1.so.7 libudev.so.1 libdnnl.so.2 libgomp.so.1 libprotobuf-c.so.1; do
  cp -L /lib/x86_64-linux-gnu/$l .gpu/stage/lib/
done
tar cf - -C .gpu/stage build.tar lib | xz -T2 -9 >.gpu/pack.tar.xz
rm -rf .gpu/stage
ls -la .gpu/pack.tar.xz
