#!/bin/sh
# Distributed benchmarks (issue 6): MPI all-reduce bus bandwidth over 2 ranks,
# data-parallel images/s of mlp_large_train on 2 ranks x 1 thread against
# 1 rank x 1 thread, and a gradient bucket sweep (1, 4, 25 MB); a model split
# over 2 ranks in 1, 2, 4 and 8 micro-batches; then the PyTorch DDP peer
# (bench/torch_ddp.py) when /usr/bin/python3 has torch.
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
# What a small data-parallel step pays besides its compute (the ranks'
# agreement to start the run, the all_reduce's latency), in us a step.
$run -np 2 "$out" dp 26214400 small | grep '^FG'
# The same through the segment's slots (buffers on the heap, no in-place
# reads), the path of buffers a session does not hold.
echo "FG_MPI_SHM_ARENA=0 (copies through the shared segment):"
$run -np 2 -x FG_MPI_SHM_ARENA=0 "$out" busbw | grep '^FG allreduce'
# The same over MPI messages, the path of ranks on several hosts.
echo "FG_MPI_SHM=0 (MPI messages):"
$run -np 2 -x FG_MPI_SHM=0 "$out" busbw | grep '^FG allreduce'
# 4 ranks: one host, then two pretend hosts of 2 (FG_MPI_HOST; shared
# memory within each, messages between them), then messages among all. On
# one machine the messages between pretend hosts still go through Open
# MPI's shared memory; the bytes each rank sends as messages are what would
# cross the network.
echo "4 ranks, one host:"
$run -np 4 "$out" busbw | grep -E '^FG allreduce_busbw (ranks 4 size +(1048576|16777216|268435456) |path|messages)'
echo "4 ranks, 2 pretend hosts (FG_MPI_HOST):"
$run -np 4 sh -c 'FG_MPI_HOST=pretend-$((OMPI_COMM_WORLD_RANK / 2)) exec "$0" busbw' "$out" |
  grep -E '^FG allreduce_busbw (ranks 4 size +(1048576|16777216|268435456) |path|messages)'
echo "4 ranks, FG_MPI_SHM=0 (MPI messages):"
$run -np 4 -x FG_MPI_SHM=0 "$out" busbw | grep -E '^FG allreduce_busbw (ranks 4 size +(1048576|16777216|268435456) |path|messages)'
# Two hosts in network namespaces of this machine (tools/netns_hosts.sh): a
# daemon per host, TCP over a veth link between them, so the bytes between
# hosts take a kernel network path; as root where namespaces can be made.
# Up to 64 MB: TCP over the link runs at a fraction of shared memory's rate.
# The images/s of a dp line.
ips_of() { sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p'; }
hosts=$(dirname "$0")/../tools/netns_hosts.sh
hp=fgb$$
# dash runs no EXIT trap on a signal: the signals exit, so that it runs.
trap '"$hosts" down "$hp" 2>/dev/null || true' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
if [ "$(id -u)" -ne 0 ]; then
  why="not root"
elif "$hosts" sweep fgb && why=$("$hosts" up "$hp" 2>&1); then
  why=""
fi
if [ -z "$why" ]; then
  echo "2 ranks, 2 hosts in network namespaces (one rank each; TCP over a veth link):"
  "$hosts" mpirun "$hp" 1 --bind-to none -np 2 "$out" busbw 67108864 | grep '^FG allreduce'
  echo "4 ranks, 2 hosts in network namespaces (2 ranks each):"
  "$hosts" mpirun "$hp" 2 --bind-to none -np 4 "$out" busbw 16777216 |
    grep -E '^FG allreduce_busbw (ranks 4 size +(1024|1048576|16777216) |path|messages)'
  # Data parallelism with one rank on each host: every gradient crosses the
  # link (on one machine TCP's copies take CPU time from the compute).
  echo "2 ranks, one on each of 2 hosts in network namespaces, against 1 rank:"
  hb=$($run -np 1 "$out" dp 26214400 | grep '^FG' | ips_of)
  line=$("$hosts" mpirun "$hp" 1 --bind-to none -np 2 "$out" dp 26214400 | grep '^FG')
  hi=$(echo "$line" | ips_of)
  echo "$line; ratio $(awk -v a="$hi" -v b="$hb" 'BEGIN { printf "%.2f", a / b }')x (1 rank: $hb images/s)"
  "$hosts" mpirun "$hp" 1 --bind-to none -np 2 "$out" exchange | grep '^FG'
  "$hosts" down "$hp"
else
  echo "2 hosts in network namespaces: skipped ($hosts: $why)"
fi
one=$($run -np 1 "$out" dp 26214400 | grep '^FG')
echo "$one"
base=$(echo "$one" | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
# The machine's ceiling: two ranks that never exchange anything.
line=$($run -np 2 "$out" dp 0 independent | grep '^FG')
ips=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
echo "$line; ratio $(awk -v a="$ips" -v b="$base" 'BEGIN { printf "%.2f", a / b }')x (ceiling, no communication)"
cms=$(echo "$line" | sed -n 's/.*(\([0-9.]*\) ms\/step).*/\1/p')
# What the exchange alone costs. When the ranks' compute fills every core
# (2 ranks x 1 thread on 2 cores), its CPU time adds to the ceiling's step
# instead of hiding behind the backward pass: the ratio to expect then.
line=$($run -np 2 "$out" exchange | grep '^FG')
xms=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) ms\/step (.*/\1/p')
echo "$line; ceiling step + exchange: $(awk -v c="$cms" -v x="$xms" 'BEGIN { printf "%.1f", c + x }') ms, ratio $(awk -v c="$cms" -v x="$xms" -v b="$base" 'BEGIN { printf "%.2f", 256 / ((c + x) / 1000) / b }')x (no overlap, cores full)"
line=$($run -np 2 -x FG_MPI_SHM=0 "$out" exchange | grep '^FG')
echo "$line"
# The ratio to 1 rank, per bucket size; collectives where the session puts
# them by default (here in line when the 2 ranks' threads fill the cores;
# the line says which), on their own lane, in line with the compute, and
# by default with fused updates (fused_update: each weight's all_reduce and
# SGD update as one collective, as `flowgraph train --dist mpi` runs on CPUs). A shared VM's speed drifts by tens
# of percent within minutes, so the sweep runs DP_ROUNDS rounds (default 3),
# each starting with its own 1-rank run, and reports per case the median of
# the rounds' ratios (and of their images/s): drift between rounds cancels.
# Each round also runs the ceiling (2 ranks that never exchange), and each
# case reports its images/s over that too: how much of what the machine
# allowed two processes in that round the exchange kept.
rounds=${DP_ROUNDS:-3}
all=""
r=1
while [ "$r" -le "$rounds" ]; do
  b=$($run -np 1 "$out" dp 26214400 | grep '^FG' | ips_of)
  ind=$($run -np 2 "$out" dp 0 independent | grep '^FG' | ips_of)
  all="$all 0:independent:$ind:$b:$ind"
  echo "round $r: 1 rank $b images/s, 2 independent ranks $ind images/s"
  for mb in 1 4 25; do
    for mode in default own-lane inline fused; do
      line=$($run -np 2 "$out" dp $((mb * 1048576)) $mode | grep '^FG')
      [ "$mode" != default ] || chosen=$(echo "$line" | sed -n 's/.*collectives default (\([^)]*\)).*/\1/p')
      ips=$(echo "$line" | ips_of)
      all="$all $mb:$mode:$ips:$b:$ind"
    done
  done
  r=$((r + 1))
done
for case in 0:independent 1:default 1:own-lane 1:inline 1:fused 4:default 4:own-lane 4:inline 4:fused 25:default 25:own-lane 25:inline 25:fused; do
  mb=${case%%:*} mode=${case#*:}
  line=$(echo "$all" | tr ' ' '\n' | awk -F: -v mb="$mb" -v mode="$mode" '
    function median(v, n,   i, j, t) {
      for (i = 1; i < n; i++)
        for (j = i; j > 0 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
      return n % 2 ? v[(n - 1) / 2] : (v[n / 2 - 1] + v[n / 2]) / 2
    }
    BEGIN { n = 0 } # numeric from the start: v[0] must be the first value
    $1 == mb && $2 == mode && $3 > 0 && $4 > 0 {
      ips[n] = $3; rat[n] = $3 / $4; ofc[n] = $5 > 0 ? $3 / $5 : 0
      each = each sprintf("%s%.2f", n ? " " : "", $3 / $4); n++
    }
    END {
      if (n == 0) { print "FAILED"; exit }
      printf "%.1f %.2f %.2f %s", median(ips, n), median(rat, n), median(ofc, n), each
    }')
  [ "$line" != FAILED ] || { echo "dist_bench: dp $mb MB $mode failed"; exit 1; }
  set -- $line
  med_ips=$1 med_ratio=$2 med_ofc=$3
  shift 3
  if [ "$mode" = independent ]; then
    echo "FG dp_scaling mlp_large_train ranks 2 threads 1 collectives none (independent ranks): $med_ips images/s (median of $rounds rounds); ratio ${med_ratio}x (rounds: $*) (ceiling, no communication)"
    continue
  fi
  label=$mode
  [ "$mode" != default ] || label="default (${chosen:-?})"
  echo "FG dp_scaling mlp_large_train ranks 2 threads 1 bucket $((mb * 1048576)) B collectives $label: $med_ips images/s (median of $rounds rounds); dp_scaling ${med_ratio}x (rounds: $*) [target >= 1.8x]; $med_ofc of the round's ceiling"
  if [ "$mode" = default ]; then fgs="${fgs-} $mb=$med_ips"; fi
  if [ "$mode" = fused ]; then fgf="${fgf-} $mb=$med_ips"; fi
done
# Pipeline parallelism (fg_micro_batch): a 4-layer MLP split over 2 ranks,
# batch 1024 (micro-batches of 128 rows and more keep the matmuls
# efficient), each step in M micro-batches against M = 1, where one rank
# idles while the other computes.
pbase=""
for m in 1 2 4 8; do
  line=$($run -np 2 "$out" pipe $m 1024 | grep '^FG')
  ips=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) images\/s.*/\1/p')
  [ -n "$pbase" ] || pbase=$ips
  echo "$line; $(awk -v a="$ips" -v b="$pbase" 'BEGIN { printf "%.2f", a / b }')x of 1 micro-batch"
done
# The PyTorch DDP (gloo) peer, bench/torch_ddp.py: same model, shards and
# timing. Torch at its best setting (gradient_as_bucket_view=True) against
# flowgraph's default.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else printf "n/a" }'; }
py=/usr/bin/python3
if [ -x "$py" ] && "$py" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  tout=$("$py" "$(dirname "$0")/torch_ddp.py") || { echo "$tout"; echo "dist_bench: torch peer failed"; exit 1; }
  echo "$tout" | grep '^TORCH'
  tbase=$(echo "$tout" | sed -n 's/^TORCH dp_scaling ranks 1 .*: \([0-9.]*\) images\/s.*/\1/p')
  tind=$(echo "$tout" | sed -n 's/^TORCH dp_scaling ranks 2 independent .*: \([0-9.]*\) images\/s.*/\1/p')
  echo "TORCH ceiling (2 independent ranks / 1 rank): $(ratio "$tind" "$tbase")x"
  for mb in 1 4 25; do
    t2=$(echo "$tout" | sed -n "s/^TORCH dp_scaling ranks 2 bucket $mb MB gradient_as_bucket_view=True: \([0-9.]*\) images\/s.*/\1/p")
    f2=$(echo "${fgs-}" | tr ' ' '\n' | sed -n "s/^$mb=//p")
    ff=$(echo "${fgf-}" | tr ' ' '\n' | sed -n "s/^$mb=//p")
    echo "TORCH vs FG bucket $mb MB: torch dp_scaling $(ratio "$t2" "$tbase")x (gradient_as_bucket_view=True); fg/torch $(ratio "$base" "$tbase")x at 1 rank, $(ratio "$f2" "$t2")x at 2 ranks (fg default), $(ratio "$ff" "$t2")x (fg fused)"
  done
else
  echo "TORCH peer skipped: $py cannot import torch with gloo"
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
