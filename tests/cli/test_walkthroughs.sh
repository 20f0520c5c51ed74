#!/usr/bin/env bash
# test_walkthroughs.sh - the walkthrough pages' commands, run as written.
#
# Each page keeps the commands a reader should run in ```sh blocks, one
# command a line starting with "$ " (a line ending in " \" continues on
# the next). They run from the repository root with `parity` replaced by
# $PARITY (default build/parity). An output path ref/.../pictures/NAME.svg
# is rewritten to the same path under a scratch folder ($PARITY_WALK_OUT,
# default a fresh temporary one), and so are the pages' temporary files
# (/tmp/parity-walk/...), so the test writes neither into the tree nor
# into a path another run shares;
# the picture it produced must then parse as XML with an <svg> root, and
# must equal the committed picture byte for byte when one is committed
# (only deterministic pictures are: --logical schedules, grids,
# collectives). A command ending in "# exit N" must exit N; any other
# must exit 0. Also: every page exists and README.md links it, and every
# picture a page shows (![..](pictures/..svg)) is produced by one of its
# commands and is committed.
# Ends with "RESULT test_walkthroughs.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
cd "$(dirname "$0")/../.."
root=$PWD
if [ -n "${PARITY_WALK_OUT:-}" ]; then
  tmp=$PARITY_WALK_OUT; mkdir -p "$tmp"
else
  tmp=$(mktemp -d /tmp/walkthroughs-XXXXXX)
  trap 'rm -rf "$tmp"' EXIT
fi
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do printf '%s\n' "$l" | sed 's/^/  /'; done; }

pages="ref/parallel/dp/WALKTHROUGH.md ref/model/WALKTHROUGH-tp.md
       ref/parallel/pp/WALKTHROUGH.md ref/model/WALKTHROUGH-cp.md"

# commands PAGE: the page's commands, one a line ("$ " removed,
# continuations joined), from its ```sh blocks only
commands() {
  awk '
    /^```sh[[:space:]]*$/ { insh = 1; cont = 0; next }
    /^```/                { insh = 0; next }
    insh {
      if (cont) { l = $0; sub(/^[[:space:]]+/, "", l); line = line " " l }
      else if ($0 ~ /^\$ /) line = substr($0, 3)
      else next
      if (line ~ / \\$/) { sub(/ \\$/, "", line); cont = 1; next }
      cont = 0; print line; line = ""
    }' "$1"
}

# images PAGE: the pictures/..svg paths the page shows, relative to its folder
images() { grep -oE '!\[[^]]*\]\(pictures/[^)]+\.svg\)' "$1" | sed -E 's/.*\((pictures\/[^)]+)\)/\1/'; }

svg_ok() {
  python3 - "$1" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
sys.exit(0 if root.tag in ("svg", "{http://www.w3.org/2000/svg}svg") else 1)
EOF
}

for page in $pages; do
  if [ ! -f "$page" ]; then fail "$page exists"; continue; fi
  ok "$page exists"
  if grep -qF "]($page)" README.md; then ok "README.md links $page"
  else fail "README.md links $page" "no Markdown link to $page in README.md"; fi
  dir=$(dirname "$page")
  produced=""
  n=0
  while IFS= read -r cmd; do
    n=$((n + 1))
    want=0
    if [[ $cmd =~ \#[[:space:]]*exit[[:space:]]+([0-9]+)[[:space:]]*$ ]]; then want=${BASH_REMATCH[1]}; fi
    cmd=$(printf '%s' "$cmd" | sed -E 's/[[:space:]]*#[[:space:]]*exit[[:space:]]+[0-9]+[[:space:]]*$//')
    # the pictures it writes, redirected under $tmp
    outs=$(printf '%s\n' "$cmd" | grep -oE 'ref/[^ ]*/pictures/[^ /]+\.svg' || true)
    run=${cmd//\/tmp\/parity-walk/"$tmp/parity-walk"}   # temporary files: under $tmp too
    for o in $outs; do
      mkdir -p "$tmp/$(dirname "$o")"
      rm -f "$tmp/$o"
      run=${run//"$o"/"$tmp/$o"}
      produced="$produced $o"
    done
    run=$(printf '%s' "$run" | sed -E "s#^parity([[:space:]])#$(printf '%s' "$PARITY" | sed 's/[#&\\]/\\&/g')\\1#")
    log="$tmp/cmd.log"
    ( cd "$root" && bash -c "$run" ) </dev/null >"$log" 2>&1
    rc=$?
    name="$page command $n: ${cmd:0:110}"
    if [ "$rc" -eq "$want" ]; then ok "$name (exit $rc)"
    else fail "$name" "exit $rc, expected $want; output tail:" "$(tail -5 "$log")"; continue; fi
    for o in $outs; do
      if [ ! -s "$tmp/$o" ]; then fail "$o written" "the command wrote nothing there"; continue; fi
      if svg_ok "$tmp/$o" 2>"$log"; then ok "$o parses as XML with an <svg> root"
      else fail "$o parses as XML with an <svg> root" "$(tail -2 "$log")"; fi
      if [ -f "$o" ]; then
        if cmp -s "$tmp/$o" "$o"; then ok "$o equals the committed picture"
        else fail "$o equals the committed picture" "regenerate it with the page's command"; fi
      fi
    done
  done < <(commands "$page")
  if [ "$n" -eq 0 ]; then fail "$page has commands" "no \$ lines in a \`\`\`sh block"; fi
  for img in $(images "$page"); do
    if [[ " $produced " == *" $dir/$img "* ]]; then ok "$dir/$img is made by a command of the page"
    else fail "$dir/$img is made by a command of the page" "no command writes -o $dir/$img"; fi
    if [ -f "$dir/$img" ]; then ok "$dir/$img is committed"
    else fail "$dir/$img is committed" "missing; run the page's command to make it"; fi
  done
done

echo "RESULT test_walkthroughs.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
