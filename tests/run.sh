#!/usr/bin/env bash
# Runs every test binary given on the command line (and any extra test
# commands from tests/*.check scripts), adds up their RESULT lines and ends
# with the closing line "N passed, N failed". A binary that crashes or
# exits without a RESULT line counts as one failed test.
set -u
passed=0; failed=0
run_one() {
  local name=$1; shift
  local log; log=$(mktemp)
  local start=$(date +%s.%N)
  "$@" >"$log" 2>&1; local rc=$?
  local secs; secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  local line; line=$(grep -E '^RESULT .*: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
  if [ -n "$line" ]; then
    local p f
    p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed$/\1/')
    f=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed$/\2/')
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    printf '%-28s %4d passed %3d failed  %6ss\n' "$name" "$p" "$f" "$secs"
    if [ "$f" -ne 0 ]; then grep -v '^ok ' "$log" | tail -40; fi
  else
    failed=$((failed + 1))
    printf '%-28s CRASHED (exit %d, no RESULT line)  %6ss\n' "$name" "$rc" "$secs"
    tail -40 "$log"
  fi
  rm -f "$log"
}
for t in "$@"; do
  case "$t" in
    *.sh) run_one "$(basename "$t")" bash "$t" ;;
    *.py) run_one "$(basename "$t")" /usr/bin/python3 "$t" ;;
    *)    run_one "$(basename "$t")" "$t" ;;
  esac
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
