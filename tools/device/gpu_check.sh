#!/bin/bash
# Runs on the lent GPU machine, in the repository copy, with .gpu carried
# (tools/device/pack.sh). Unpacks the build where the ctest files expect it
# (/work/main/build), finds the device's CUDA and NCCL libraries, and runs
# what is asked: "tests" (the CUDA-using ctest cases), "alltests" (the
# whole Release suite), "bench" (GPU bench vs PyTorch), "hostsan"
# (memcheck over the host-step cases), "dp" (dp_scaling on this machine's
# cores), "sanitize"
# (compute-sanitizer memcheck and racecheck over the CUDA kernel and session
# cases), or any shell words after "sh". Logs go to $OUT.
set -u
here=$PWD
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /work
[ -e /work/main ] || ln -s "$here" /work/main
mkdir -p /tmp/gpu && xz -dc .gpu/pack.tar.xz | tar xf - -C /tmp/gpu
(cd /work/main && tar xf /tmp/gpu/build.tar)
libdirs=/tmp/gpu/lib
for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libcudnn.so.9 libnvrtc.so.13; do
  p=$(ldconfig -p | awk -v l=$l '$1==l {print $NF; exit}')
  [ -n "$p" ] || p=$(find /usr/local /opt /usr/lib -name "$l" 2>/dev/null | head -1)
  echo "lib $l -> ${p:-MISSING}"
  [ -n "$p" ] && libdirs="$libdirs:$(dirname "$p")"
done
export LD_LIBRARY_PATH=$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
# This machine has a GPU: a test that finds none (a broken driver, a build
# without CUDA) fails instead of skipping (tests/fgtest.h, FG_SKIP_NO_GPU).
export FG_REQUIRE_GPU=1
export PATH=$PATH:/usr/local/cuda/bin
cs=/usr/local/cuda/bin/compute-sanitizer
# One compute-sanitizer tool ($1: memcheck, racecheck) over case $3 of test
# binary $2; the line, and the tool's last words when it failed, go to $4.
sanitize_case() {
  (cd /work/main/build/tests && timeout 300 $cs --tool "$1" --error-exitcode 9 ./"$2" "$3") \
    >/tmp/san.log 2>&1
  local rc=$?
  echo "$1 rc $rc $2.$3" >>"$4"
  [ $rc = 0 ] || tail -30 /tmp/san.log >>"$4"
}
# The gpu-labelled cases of test binary $1.
gpu_cases() { /work/main/build/tests/$1 --list | awk '$2 ~ /(^|,)gpu(,|$)/ {print $1}'; }
for what in "$@"; do
  case $what in
  tests)
    # Every gpu-labelled case (the pass tests' CUDA cases live in their own
    # binaries), then the rest of the suites that drive CUDA sessions.
    (cd /work/main/build && ctest -j8 --timeout 300 --output-on-failure -L gpu \
      >"$OUT/ctest.log" 2>&1; echo "ctest gpu-label rc $?" >>"$OUT/ctest.log"
    ctest -j8 --timeout 300 --output-on-failure -LE gpu \
      -R '^(test_cuda_kernels|test_cuda_session|test_fused_cuda|test_host_steps|test_mpi_nccl|test_streams|test_dist|test_dist_exec|test_dist_ranks)\.' \
      >>"$OUT/ctest.log" 2>&1; echo "ctest suites rc $?" >>"$OUT/ctest.log")
    grep -E 'tests passed|Failed|\*\*\*|SKIP|rc ' "$OUT/ctest.log" | tail -40 ;;
  alltests)
    (cd /work/main/build && ctest -j16 --timeout 200 --output-on-failure \
      >"$OUT/ctest_all.log" 2>&1; echo "ctest rc $?" >>"$OUT/ctest_all.log")
    grep -E 'tests passed|\((Failed|Timeout|Not Run)\)|rc ' "$OUT/ctest_all.log" | tail -60 ;;
  bench)
    PYTHONUNBUFFERED=1 python3 bench/compare_torch_gpu.py --driver /work/main/build/bench/fg_bench_gpu \
      >"$OUT/bench.log" 2>&1; echo "bench rc $?" >>"$OUT/bench.log"
    tail -30 "$OUT/bench.log" ;;
  sanitize)
    # compute-sanitizer: memcheck over the gpu cases of the CUDA kernel and
    # session tests (not the slow digits training, the 1000-run leak check or
    # the driver-thread count, which counts the tool's own threads), then
    # racecheck over the cases whose kernels share memory in a block.
    : >"$OUT/sanitize.log"
    for b in test_cuda_kernels test_cuda_session; do
      for c in $(gpu_cases $b); do
        case $c in *digits* | *leak* | *leaves_driver*) continue ;; esac
        sanitize_case memcheck $b $c "$OUT/sanitize.log"
      done
    done
    for c in cuda_reduce_vs_cpu cuda_sum_to_vs_cpu cuda_softmax_vs_cpu cuda_softmax_xent_vs_cpu \
      cuda_argmax_vs_cpu; do
      sanitize_case racecheck test_cuda_kernels $c "$OUT/sanitize.log"
    done
    echo "sanitize: $(grep -c ' rc 0 ' "$OUT/sanitize.log") clean, $(grep -Ec ' rc [1-9]' "$OUT/sanitize.log") not"
    grep -E ' rc [1-9]' "$OUT/sanitize.log" ;;
  hostsan)
    # compute-sanitizer memcheck over the host-step cases (CPU kernels on
    # pinned staging inside a GPU session's plan).
    : >"$OUT/hostsan.log"
    for c in $(gpu_cases test_host_steps); do
      sanitize_case memcheck test_host_steps $c "$OUT/hostsan.log"
    done
    cat "$OUT/hostsan.log" ;;
  dp)
    # dp_scaling where cores are free (this machine's, not the 2-core VM's):
    # 1 rank against 2 ranks of 1 thread, the default, and 2 ranks that never
    # exchange, alternated over 3 rounds.
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    db="mpirun --oversubscribe --bind-to none"
    : >"$OUT/dp.log"
    echo "cores: $(nproc)" >>"$OUT/dp.log"
    for r in 1 2 3; do
      $db -np 1 /work/main/build/bench/dist_bench dp 26214400 2>&1 | grep '^FG' >>"$OUT/dp.log"
      $db -np 2 /work/main/build/bench/dist_bench dp 26214400 2>&1 | grep '^FG' >>"$OUT/dp.log"
      $db -np 2 /work/main/build/bench/dist_bench dp 26214400 own-lane 2>&1 | grep '^FG' >>"$OUT/dp.log"
      $db -np 2 /work/main/build/bench/dist_bench dp 0 independent 2>&1 | grep '^FG' >>"$OUT/dp.log"
    done
    cat "$OUT/dp.log" ;;
  sh) shift_rest=1 ;;
  *) [ -n "${shift_rest:-}" ] && eval "$what" ;;
  esac
done
