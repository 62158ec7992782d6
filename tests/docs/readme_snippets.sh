#!/bin/sh
# Every ```c block of README.md and docs/*.md compiles, as a user would build
# it: against the public headers (include/ only) and the shared library, with
# -Wall -Wextra -Werror. A block with main() is a program and is linked and
# run; any other block is compiled and linked with an empty main() added
# (so misspelled functions fail at link time). Two programs also have their
# results checked against values worked out independently of the library:
#   - the first program (README, between the example markers) computes
#     relu([1, 2, 3] w + b) with w = [[1, 0], [0, 1], [1, 1]], b = [2.5, 0.5]:
#     [1 + 3 + 2.5, 2 + 3 + 0.5] = [6.5, 5.5];
#   - the training program fits y = 2 x0 - 3 x1 + 1 on noise-free data, so
#     the least-squares solution is exactly w = [2, -3], b = 1 and the loss
#     at it 0; it starts from random weights (its first loss must be above
#     1) and prints the values it reads back from the file it saved, which
#     must be within 1e-3 of the solution, with a loss below 1e-6 (an error
#     of 1e-3 in each of w0, w1, b gives at most (3e-3)^2 = 9e-6 per row, and
#     the fit reaches far less). The saved file is read a second time
#     through the CLI, which must print the same w.
# Every fg_/FG_ name in the README must be declared in include/flowgraph/,
# and every command of `flowgraph --help` and every option of each command's
# help must appear in the README.
# Usage: readme_snippets.sh SOURCE_DIR C_COMPILER LIB_DIR FLOWGRAPH_CLI [EXTRA_CFLAGS]
# (EXTRA_CFLAGS: the sanitizer flags of a sanitized build, word-split.)
set -eu
src=$1
cc=$2
libdir=$3
cli=$4
extra_cflags=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# Writes each ```c block of $1 to $tmp/<name>_<n>.c; prints how many.
extract() {
  awk -v out="$tmp/$2" '
    /^```c$/ { n++; f = sprintf("%s_%d.c", out, n); on = 1; next }
    on && /^```$/ { on = 0; close(f); next }
    on { print > f }
    END { print n + 0 }' "$1"
}

n_readme=$(extract "$src/README.md" readme)
if [ "$n_readme" -lt 3 ]; then
  echo "README.md: expected at least 3 C blocks (first program, training program, options), found $n_readme"
  exit 1
fi
for doc in "$src"/docs/*.md; do
  [ -e "$doc" ] || continue
  extract "$doc" "doc_$(basename "$doc" .md)" >/dev/null
done

cflags="-std=c11 -Wall -Wextra -Werror $extra_cflags -I$src/include"
ldflags="-L$libdir -lflowgraph -lm -Wl,-rpath,$libdir"
for c in "$tmp"/*.c; do
  [ -e "$c" ] || continue
  name=$(basename "$c" .c)
  if ! grep -q 'int main(' "$c"; then
    printf '\nint main(void) { return 0; }\n' >>"$c"
    extra=-Wno-unused-function
  else
    extra=
  fi
  # shellcheck disable=SC2086
  if ! "$cc" $cflags $extra -o "$tmp/$name" "$c" $ldflags 2>"$tmp/$name.err"; then
    echo "FAIL: C block $name does not build:"
    sed 's/^/  /' "$c" | head -40
    cat "$tmp/$name.err"
    fail=1
  else
    echo "ok: C block $name builds"
  fi
done
[ "$fail" = 0 ] || exit 1

# The first program.
first=
for c in "$tmp"/readme_*.c; do
  if grep -q 'int main(' "$c" && ! grep -q fg_minimize "$c"; then
    first=${c%.c}
    break
  fi
done
[ -n "$first" ] || { echo "FAIL: no first program in README.md"; exit 1; }
out=$("$first")
[ "$out" = "y = [6.5, 5.5]" ] || { echo "FAIL: first program printed '$out', want 'y = [6.5, 5.5]'"; exit 1; }
echo "ok: first program printed $out"

# The training program.
train=
for c in "$tmp"/readme_*.c; do
  if grep -q 'int main(' "$c" && grep -q fg_minimize "$c" && grep -q fg_graph_load "$c"; then
    train=${c%.c}
  fi
done
[ -n "$train" ] || { echo "FAIL: no training program (fg_minimize, fg_graph_load, main) in README.md"; exit 1; }
mkdir "$tmp/run"
out=$(cd "$tmp/run" && "$train")
echo "$out" | sed 's/^/  /'
echo "$out" | awk '
  /^epoch 0: loss / { first = $4 }
  /^loaded: / {
    line = $0
    gsub(/[][,=]/, " ", line)
    split(line, f, " ")      # loaded: w w0 w1 b b0 loss L
    w0 = f[3]; w1 = f[4]; b = f[6]; loss = f[8]; seen = 1
  }
  function abs(v) { return v < 0 ? -v : v }
  END {
    if (first == "" || first + 0 <= 1) { print "FAIL: first loss " first " is not above 1"; exit 1 }
    if (!seen) { print "FAIL: no loaded: line"; exit 1 }
    if (abs(w0 - 2) > 1e-3 || abs(w1 + 3) > 1e-3 || abs(b - 1) > 1e-3) {
      print "FAIL: loaded w = [" w0 ", " w1 "], b = " b ", want [2, -3], 1 within 1e-3"; exit 1
    }
    if (loss + 0 > 1e-6) { print "FAIL: loaded loss " loss " above 1e-6"; exit 1 }
    print "ok: training program learned w = [" w0 ", " w1 "], b = " b ", loss " loss
  }'
# The saved file through the CLI: `run --fetch w` prints "w: f32 [2,1]" and
# then the values.
vals=$("$cli" run "$tmp/run/linear.fgb" --fetch w | awk '/^w:/ { getline; gsub(/[][ ]/, ""); print; exit }')
echo "$vals" | awk -F, '
  function abs(v) { return v < 0 ? -v : v }
  { if (NF != 2 || abs($1 - 2) > 1e-3 || abs($2 + 3) > 1e-3) { print "FAIL: flowgraph run --fetch w gave " $0; exit 1 } }
  END { if (NR != 1) { print "FAIL: flowgraph run --fetch w printed no values"; exit 1 } }'
echo "ok: flowgraph run linear.fgb --fetch w gives $vals"

# Every fg_ / FG_ name the README mentions, in code or prose, is declared in
# a public header (a user copies them).
for id in $(grep -oE '(^|[^A-Za-z0-9_])(fg|FG)_[A-Za-z0-9_]+' "$src/README.md" | grep -oE '(fg|FG)_[A-Za-z0-9_]+' | sort -u); do
  grep -qw "$id" "$src"/include/flowgraph/*.h || { echo "FAIL: README names $id, which no public header declares"; fail=1; }
done
[ "$fail" = 0 ] || exit 1
echo "ok: every fg_/FG_ name in the README is public"

# Every command and option of the CLI is in the README.
cmds=$("$cli" --help | awk '/^commands:/ { on = 1; next } on && /^$/ { on = 0 } on { print $1 }')
[ -n "$cmds" ] || { echo "FAIL: no commands in flowgraph --help"; exit 1; }
for cmd in $cmds; do
  grep -q "flowgraph $cmd" "$src/README.md" || { echo "FAIL: README lacks 'flowgraph $cmd'"; fail=1; }
  [ "$cmd" = help ] && continue
  opts=$("$cli" help "$cmd" | grep -oE '^  (-[a-zA-Z], )?--[a-z][a-z-]*' | grep -oE -- '--?[a-zA-Z][a-z-]*' || true)
  for o in $opts; do
    grep -qe "$o" "$src/README.md" || { echo "FAIL: README lacks option $o of flowgraph $cmd"; fail=1; }
  done
done
[ "$fail" = 0 ] || exit 1
echo "ok: README names every command and option of flowgraph"
