#!/bin/sh
# Distributed benchmarks (issue 6): MPI all-reduce bus bandwidth over 2 ranks,
# data-parallel images/s of mlp_large_train on 2 ranks x 1 thread against
# 1 rank x 1 thread, and a gradient bucket sweep (1, 4, 25 MB).
# Usage: bench/dist_bench.sh [BUILD_DIR]   (needs a build with MPI and mpirun)
set -eu
build=${1:-build}
command -v mpirun >/dev/null || { echo "dist_bench: mpirun not found (openmpi-bin), skipped"; exit 0; }
# The target exists in builds with MPI (cmake/mpi.cmake); not part of `all`.
cmake --build "$build" --target dist_bench >/dev/null
out="$build/bench/dist_bench"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run="mpirun --oversubscribe --bind-to none"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), cores: $(nproc)"
$run -np 2 "$out" busbw | grep '^FG'
one=$($run -np 1 "$out" dp 26214400 | grep '^FG')
echo "$one"
base=$(echo "$one" | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
# The machine's ceiling: two ranks that never exchange anything.
line=$($run -np 2 "$out" dp 0 independent | grep '^FG')
ips=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
echo "$line; ratio $(awk -v a="$ips" -v b="$base" 'BEGIN { printf "%.2f", a / b }')x (ceiling, no communication)"
# The ratio to 1 rank, per bucket size; collectives on their own lane (the
# default) and in line with the compute.
for mb in 1 4 25; do
  for mode in own-lane inline; do
    line=$($run -np 2 "$out" dp $((mb * 1048576)) $mode | grep '^FG')
    ips=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
    echo "$line; dp_scaling $(awk -v a="$ips" -v b="$base" 'BEGIN { printf "%.2f", a / b }')x [target >= 1.8x]"
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
