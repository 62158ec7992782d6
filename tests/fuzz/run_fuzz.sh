#!/bin/sh
# Runs the libFuzzer harnesses built in BUILD_DIR/fuzz for SECONDS each.
#   MODE=seq  one after the other (long runs on a shared machine)
#   MODE=par  all at once (the smoke run of `make test`)
# Logs go to BUILD_DIR/fuzz-logs/<harness>.log, crashing inputs to
# BUILD_DIR/fuzz-artifacts/. Exits 1 when any harness found a crash, leak,
# timeout or out-of-memory, after printing each harness's final figures.
# Usage: tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS [seq|par] [harness...]
set -u
bld=$1
secs=$2
mode=${3:-seq}
shift 2
[ $# -gt 0 ] && shift
harnesses=${*:-fuzz_load fuzz_api fuzz_onnx}
logs=$bld/fuzz-logs
art=$bld/fuzz-artifacts
mkdir -p "$logs" "$art"

run_one() {
  h=$1
  case $h in
  fuzz_load) corpus=$bld/corpus/load; maxlen=65536; dict=-dict=$(dirname "$0")/fgb.dict ;;
  fuzz_onnx) corpus=$bld/corpus/onnx; maxlen=65536; dict=-dict=$(dirname "$0")/onnx.dict ;;
  *) corpus=$bld/corpus/api; maxlen=4096; dict= ;;
  esac
  mkdir -p "$corpus"
  # -timeout: one input may take 10 s at most (a hang is a bug);
  # -rss_limit_mb/-malloc_limit_mb: the caps in fuzz_common.h keep real use
  # far below, so going over is a bug too.
  "$bld/fuzz/$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -max_len="$maxlen" -print_final_stats=1 \
    -artifact_prefix="$art/$h-" $dict "$corpus" >"$logs/$h.log" 2>&1
  echo $? >"$logs/$h.rc"
}

summary() {
  h=$1
  rc=$(cat "$logs/$h.rc" 2>/dev/null || echo 1)
  last=$(grep -E '^#[0-9]+' "$logs/$h.log" | tail -n 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$h.log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logs/$h.log")
  printf '%s: rc %s, %s s, %s executions, %s exec/s\n  %s\n' "$h" "$rc" "$secs" \
    "${execs:-?}" "${rate:-?}" "$last"
  if [ "$rc" != 0 ]; then
    grep -E 'ERROR|SUMMARY|contract|runtime error|Test unit written' "$logs/$h.log" | head -n 20
    return 1
  fi
  return 0
}

for h in $harnesses; do
  [ -x "$bld/fuzz/$h" ] || { echo "run_fuzz: $bld/fuzz/$h is not built" >&2; exit 1; }
done
if [ "$mode" = par ]; then
  for h in $harnesses; do run_one "$h" & done
  wait
else
  for h in $harnesses; do run_one "$h"; done
fi
fail=0
for h in $harnesses; do summary "$h" || fail=1; done
exit $fail
