#!/bin/sh
# ctest with its arguments, in the current build folder; when tests fail,
# their whole output is printed again at the end, after ctest's summary.
# CI keeps only the tail of a run's output, where --output-on-failure's
# copy (printed when the test ended, thousands of lines earlier) is lost.
# Each failed test (the first 10) is then run once more, alone, and the
# line says whether it passed (with the tail of its output when it failed
# again): a failure that does not repeat is told apart from one that does.
# The exit status stays ctest's first one: a test that passes only on its
# second run still fails the run. ctest's logs are those of the first run.
#
#   tools/ctest_run.sh CTEST_ARGS...
set -u
tmp=Testing/Temporary
failed=$tmp/LastTestsFailed.log
log=$tmp/LastTest.log
# ctest leaves an earlier run's list in place when none fails.
rm -f "$failed"
ctest "$@"
rc=$?
[ "$rc" -eq 0 ] && exit 0
[ -f "$failed" ] && [ -f "$log" ] || exit "$rc"
echo
echo "== the output of each failed test, again (from $log)"
# LastTestsFailed.log lists "NUMBER:NAME" lines.
cut -d: -f2- "$failed" | while IFS= read -r name; do
  echo "---- $name"
  # A test's block starts at "N/M Test: NAME" and ends at its end time.
  awk -v t="$name" '
    index($0, " Test: " t) && substr($0, index($0, " Test: ") + 7) == t { on = 1 }
    on { print }
    on && index($0, "\"" t "\" end time:") == 1 { exit }
  ' "$log" | tail -n 400
done
# The reruns rewrite ctest's logs: the first run's are put back after.
keep=$(mktemp -d) || exit "$rc"
cp "$failed" "$log" "$keep/"
echo
echo "== each failed test run once more, alone"
cut -d: -f2- "$keep/LastTestsFailed.log" | head -n 10 | while IFS= read -r name; do
  re=$(printf '%s' "$name" | sed 's/[.[\*^$+?(){}|]/\\&/g')
  if out=$(ctest --no-tests=error --output-on-failure -R "^$re\$" 2>&1); then
    echo "---- $name: passed when run again (the run still fails)"
  else
    echo "---- $name: failed again; the rerun's last lines:"
    printf '%s\n' "$out" | tail -n 40
  fi
done
cp "$keep/LastTestsFailed.log" "$keep/LastTest.log" "$tmp/"
rm -rf "$keep"
exit "$rc"
