#!/usr/bin/env bash
# Runs every test binary and script given on the command line, adds up
# their RESULT lines and ends with the closing line "N passed, N failed".
# A test that crashes or exits without a RESULT line counts as one failed
# test.
#
# Tests run PARITY_TEST_JOBS at a time (default: the number of cores, at
# most 4), the longest first so that they do not finish last alone; each
# one's output goes to its own log, and the results are printed in launch
# order as soon as every test before them is done. Many tests already run
# several device threads, so two lanes on two cores buy about a third of
# the wall time, not half. PARITY_TEST_JOBS=1 runs them one at a time.
set -u
passed=0; failed=0
jobs_max=${PARITY_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $jobs_max in ''|*[!0-9]*|0) echo "run.sh: PARITY_TEST_JOBS must be a positive integer, got '$jobs_max'" >&2; exit 2 ;; esac
[ "$jobs_max" -gt 4 ] && [ -z "${PARITY_TEST_JOBS:-}" ] && jobs_max=4
dir=$(mktemp -d /tmp/parity-tests-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT

# The longest tests first (measured on the 2-core machine), then the rest
# in the order given.
heavy="test_dp test_tp2d.sh test_pp test_moe.sh test_gpt_torch.py test_ckpt.sh test_model_golden.sh test_encdec.sh test_check.sh test_frontends.sh test_recompute.sh"
order=()
for h in $heavy; do
  for t in "$@"; do [ "$(basename "$t")" = "$h" ] && order+=("$t"); done
done
for t in "$@"; do
  case " $heavy " in *" $(basename "$t") "*) ;; *) order+=("$t") ;; esac
done

# start I TEST: runs the test in the background, leaving I.log, I.secs, I.rc
start() {
  local i=$1 t=$2
  (
    s=$(date +%s.%N)
    case "$t" in
      *.sh) bash "$t" ;;
      *.py) /usr/bin/python3 "$t" ;;
      *)    "$t" ;;
    esac >"$dir/$i.log" 2>&1
    rc=$?
    awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}' >"$dir/$i.secs"
    echo "$rc" >"$dir/$i.rc.tmp" && mv "$dir/$i.rc.tmp" "$dir/$i.rc"
  ) &
}

# report I: the test's line (and its log's tail when it failed)
report() {
  local i=$1 name; name=$(basename "${order[$1]}")
  local log=$dir/$i.log rc secs line
  rc=$(cat "$dir/$i.rc"); secs=$(cat "$dir/$i.secs")
  line=$(grep -E '^RESULT .*: [0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
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
}

n=${#order[@]} next=0 shown=0 running=0
while [ "$shown" -lt "$n" ]; do
  while [ "$next" -lt "$n" ] && [ "$running" -lt "$jobs_max" ]; do
    start "$next" "${order[$next]}"
    next=$((next + 1)); running=$((running + 1))
  done
  wait -n 2>/dev/null
  running=0 # recount: a finished test has its .rc
  for ((i = shown; i < next; i++)); do [ -e "$dir/$i.rc" ] || running=$((running + 1)); done
  while [ "$shown" -lt "$next" ] && [ -e "$dir/$shown.rc" ]; do
    report "$shown"; shown=$((shown + 1))
  done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
