#!/usr/bin/env bash
# bench_refactor.sh - this tree's parity against an earlier build of it
# ($PARITY_BASE, e.g. the commit before a refactor: `git worktree add
# /tmp/base <commit> && make -C /tmp/base build/parity`), on the golden
# gpt-small step and a tp2 x pp2 step. A refactor that changes no number
# must not cost time either. Runs alternate A/B (each round swaps which
# goes first) so the machine's drift and other processes' load fall on
# both; each figure is the median of the rounds' step medians. Reports,
# never asserts.
#
# Uses $PARITY (this tree's program) and $PARITY_BASE (the earlier one);
# skipped when $PARITY_BASE is not set.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$root/build/parity}
ROUNDS=${BENCH_REFACTOR_ROUNDS:-5}
STEPS=${BENCH_REFACTOR_STEPS:-3}
if [ -z "${PARITY_BASE:-}" ] || [ ! -x "$PARITY_BASE" ]; then
  echo "skipped: set PARITY_BASE to an earlier build's parity to compare against"
  exit 0
fi
cd "$root" # both programs find ref/data/corpus.txt here
. "$root/tests/bench/machine.sh"
bench_machine
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# Each case: a name and its options (gpt-small, $STEPS steps).
golden="--backend openblas"
tp2pp2="--backend openblas --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 4"
# run WHICH PROGRAM CASE OPTIONS...: the step's wall median into
# $tmp/CASE.WHICH, and its CPU median (the golden run prints one: the
# calling thread's, which other processes' load does not inflate) into
# $tmp/CASE.WHICH.cpu
run() {
  local which=$1 prog=$2 case=$3; shift 3
  local model=gpt-small steps=$STEPS
  [ "$case" = large ] && model=gpt-124m steps=2
  if "$prog" train --model "$model" --steps "$steps" "$@" >"$tmp/last" 2>&1; then
    sed -nE 's/.*step median ([0-9.]+) ms.*/\1/p' "$tmp/last" | tail -1 >>"$tmp/$case.$which"
    sed -nE 's/.*cpu median ([0-9.]+) ms.*/\1/p' "$tmp/last" | tail -1 >>"$tmp/$case.$which.cpu"
  else
    echo "$case ($which) failed: $(tail -1 "$tmp/last")"
  fi
}
large="--backend openblas"
cases="golden tp2pp2"
[ "${BENCH_REFACTOR_124M:-1}" = 0 ] || cases="$cases large"
for r in $(seq "$ROUNDS"); do
  for case in $cases; do
    opts=${!case}
    # shellcheck disable=SC2086 # the options are words
    if [ $((r % 2)) = 1 ]; then
      run base "$PARITY_BASE" "$case" $opts; run this "$PARITY" "$case" $opts
    else
      run this "$PARITY" "$case" $opts; run base "$PARITY_BASE" "$case" $opts
    fi
  done
done
med() { [ -s "$1" ] && sort -n "$1" | awk '{v[NR]=$1} END{print v[int((NR+1)/2)]}'; }
echo "gpt-small, $STEPS steps a run (gpt-124m: 2), $ROUNDS alternating rounds; the step's median of each run,"
echo "then the median over rounds (base: $PARITY_BASE)"
printf '%-40s %10s %10s %9s\n' case "base ms" "this ms" "this/base"
line() { # label file-suffix
  local b t; b=$(med "$tmp/$2.base$3"); t=$(med "$tmp/$2.this$3")
  [ -n "$b" ] && [ -n "$t" ] || return 0
  printf '%-40s %10.1f %10.1f %9.3f   (base: %s; this: %s)\n' "$1" "$b" "$t" \
    "$(awk -v a="$t" -v b="$b" 'BEGIN{print a/b}')" \
    "$(tr '\n' ' ' <"$tmp/$2.base$3" | sed 's/ $//')" "$(tr '\n' ' ' <"$tmp/$2.this$3" | sed 's/ $//')"
}
line "golden step (1 device), cpu" golden .cpu
line "golden step (1 device), wall" golden ""
line "tp2 x pp2 step (4 devices, m 4), wall" tp2pp2 ""
line "gpt-124m golden step (2 steps a run), cpu" large .cpu
line "gpt-124m golden step (2 steps a run), wall" large ""
echo "(this/base <= 1: no slower; load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores)"
exit 0
