#!/usr/bin/env bash
# test_pairs.sh - the composition matrix, run: every pair of modes that
# `parity modes` calls supported runs `parity check` over 3 steps with
# dropout and must be bit-exact in every tensor; every pair it refuses
# must be listed in tests/compose/refused.txt (a new refusal, or a listed
# one that now runs, fails: the list is the open work, kept true); then
# a seeded random sample of 3- and 4-way compositions (the seed printed,
# PARITY_COMPOSE_SEED=S reruns one) runs the same way.
#   PARITY_COMPOSE_SIZE=large   the pairs at `parity modes --large`'s size
#   PARITY_COMPOSE_SAMPLE=N     compositions in the sample (default 6)
# The matrix is read from `parity modes --tsv`, never written here, so
# the test and the printed matrix cannot disagree.
# Ends with "RESULT test_pairs.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/parity-pairs-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); [ -n "${VERBOSE:-}" ] && echo "ok      $1"; return 0; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }
export PARITY_COLL_TIMEOUT=60 # a composition that deadlocks fails here
large=; [ "${PARITY_COMPOSE_SIZE:-}" = large ] && large=--large
jobs=${PARITY_COMPOSE_JOBS:-2}

# run_all FILE: each line "NAME<TAB>FLAGS" run as parity check, $jobs at a
# time; leaves NAME's exit status and output in $tmp/out
run_all() {
  mkdir -p "$tmp/out" "$tmp/off"
  while IFS=$'\t' read -r name flags; do
    printf '%s\0%s\0' "$name" "$flags"
  done <"$1" | xargs -0 -n 2 -P "$jobs" sh -c \
    'p=$1; t=$2; n=$3; d=$t/off/$n; mkdir -p "$d"; f=$(echo "$4" | sed "s|@TMP|$d|g")
     $p check $f --steps 3 >"$t/out/$n.log" 2>&1; echo $? >"$t/out/$n.rc"' \
    sh "$PARITY" "$tmp"
}

# verdicts FILE WHAT: each run's result
verdicts() {
  while IFS=$'\t' read -r name flags; do
    rc=$(cat "$tmp/out/$name.rc" 2>/dev/null || echo none)
    if [ "$rc" = 0 ] && grep -q '| yes$' "$tmp/out/$name.log"; then ok "$2 $name"
    else fail "$2 $name: parity check exit $rc, not bit-exact" "flags: $flags" \
      "$(grep -E 'FIRST DIVERGENCE|parity check:' "$tmp/out/$name.log" | head -2)"; fi
  done <"$1"
}

# ---- the pairs ----
if ! $PARITY modes --tsv $large >"$tmp/modes.tsv" 2>"$tmp/modes.err"; then
  fail "parity modes --tsv" "$(cat "$tmp/modes.err")"
fi
awk -F'\t' '$1 == "pair" && $3 == "supported" {print $2 "\t" $4}' "$tmp/modes.tsv" >"$tmp/supported"
awk -F'\t' '$1 == "pair" && $3 == "refused" {print $2 "\t" $5}' "$tmp/modes.tsv" >"$tmp/refused"
npairs=$(awk -F'\t' '$1 == "pair"' "$tmp/modes.tsv" | wc -l)
[ "$npairs" -gt 100 ] && ok "parity modes lists $npairs pairs" || fail "parity modes lists $npairs pairs"
echo "pairs: $(wc -l <"$tmp/supported") supported, $(wc -l <"$tmp/refused") refused"
run_all "$tmp/supported"
verdicts "$tmp/supported" pair

# every refusal listed, every listed pair still refused
list=tests/compose/refused.txt
while IFS=$'\t' read -r name reason; do
  if grep -q "^$name	" "$list"; then ok "refused $name (listed)"
  else fail "pair $name: refused but not in $list (a new refusal)" "$reason"; fi
done <"$tmp/refused"
grep -v '^#' "$list" | cut -f1 | while read -r name; do
  [ -z "$name" ] && continue
  grep -q "^$name	" "$tmp/refused" || echo "$name"
done >"$tmp/stale"
if [ -s "$tmp/stale" ]; then
  fail "$list lists pairs parity now runs (remove them): $(tr '\n' ' ' <"$tmp/stale")"
else ok "$list: every listed pair is still refused"; fi
# the refusals no implementation could avoid: at most three reasons
impossible=$(awk -F'\t' '!/^#/ && $2 == "impossible" {print $3}' "$list" | sort -u | wc -l)
[ "$impossible" -le 3 ] && ok "$impossible reasons marked impossible (at most 3)" \
  || fail "$impossible reasons marked impossible in $list (at most 3)"

# ---- the random compositions ----
seed=${PARITY_COMPOSE_SEED:-$(( $(date +%s%N) % 1000000007 ))}
echo "compositions: seed $seed (PARITY_COMPOSE_SEED=$seed reruns this sample)"
$PARITY modes --tsv $large --sample "${PARITY_COMPOSE_SAMPLE:-6}" --seed "$seed" >"$tmp/combos.tsv"
awk -F'\t' '$1 == "combo" && $3 == "supported" {print $2 "\t" $4}' "$tmp/combos.tsv" >"$tmp/csup"
awk -F'\t' '$1 == "combo" && $3 == "refused" {print "  refused " $2 ": " $5}' "$tmp/combos.tsv"
run_all "$tmp/csup"
verdicts "$tmp/csup" combo
echo "compositions: $(wc -l <"$tmp/csup") run of $(grep -c '^combo' "$tmp/combos.tsv")"

echo "RESULT test_pairs.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
