#!/bin/sh
# ctest with its arguments, in the current build folder; when tests fail,
# their whole output is printed again at the end, after ctest's summary.
# CI keeps only the tail of a run's output, where --output-on-failure's
# copy (printed when the test ended, thousands of lines earlier) is lost.
# Each failed test is then run once more, alone, and the line says whether
# it passed: a failure that does not repeat is told apart from one that
# does. The exit status stays ctest's first one: a test that passes only on
# its second run still fails the run.
#
#   tools/ctest_run.sh CTEST_ARGS...
set -u
ctest "$@"
rc=$?
[ "$rc" -eq 0 ] && exit 0
failed=Testing/Temporary/LastTestsFailed.log
log=Testing/Temporary/LastTest.log
[ -f "$failed" ] && [ -f "$log" ] || exit "$rc"
# LastTestsFailed.log lists "NUMBER:NAME" lines.
names=$(cut -d: -f2- "$failed")
echo
echo "== the output of each failed test, again (from $log)"
for name in $names; do
  echo "---- $name"
  # A test's block starts at "N/M Test: NAME" and ends at its end time.
  awk -v t="$name" '
    index($0, " Test: " t) && substr($0, index($0, " Test: ") + 7) == t { on = 1 }
    on { print }
    on && index($0, "\"" t "\" end time:") == 1 { exit }
  ' "$log" | tail -n 400
done
echo
echo "== each failed test run once more, alone"
for name in $names; do
  if ctest -R "^$(printf '%s' "$name" | sed 's/[.[\*^$+?(){}|]/\\&/g')\$" >/dev/null 2>&1; then
    echo "---- $name: passed when run again (the run still fails)"
  else
    echo "---- $name: failed again"
  fi
done
exit "$rc"
