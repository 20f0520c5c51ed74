#!/usr/bin/env bash
# test_broken.sh - the checker's negative controls are one table
# (ref/cli/broken.c), and this holds every entry to it. For each line of
# `parity check --test-broken list`:
#  (a) on its example layout, `parity check` exits 1 and the first
#      divergent tensor matches the entry's pattern (after "stepN.");
#  (b) on one device, where no entry can fire, the run is refused with
#      exit 2 and a message naming `--test-broken NAME` and what it needs
#      (replica:R there asks for device 1 of 1).
# Also: the list exits 0 and is not empty, an unknown name or replica
# without its device is refused, the old --test-broken-NAME spellings are
# gone, and train refuses replica:R with nothing to compare.
# Needs $PARITY (default build/parity). gpt-micro, one step: a few seconds.
# Ends with "RESULT test_broken.sh: N passed, M failed".
set -u
P=${PARITY:-build/parity}
pass=0; fail=0
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok() { if [ "$1" = 0 ]; then pass=$((pass+1)); echo "ok      $2"; else fail=$((fail+1)); echo "not ok  $2"; [ -n "${3:-}" ] && echo "$3" | sed 's/^/  /'; fi; }

list=$("$P" check --test-broken list); rc=$?
n=$(echo "$list" | grep -vc '^#')
[ $rc = 0 ] && [ "$n" -ge 7 ]; ok $? "--test-broken list exits 0 with the table ($n entries, rc $rc)"
"$P" train --test-broken list | cmp -s - <(echo "$list"); ok $? "train lists the same table"

while IFS=$'\t' read -r name pattern example needs breaks; do
  case $name in '#'*|'') continue ;; esac
  base=${name%%:R}
  [ -n "$pattern" ] && [ -n "$needs" ] && [ -n "$breaks" ]; ok $? "$name: the entry has a pattern, a precondition and what it breaks"
  # (a) the example layout: exit 1, the first divergence matches
  # shellcheck disable=SC2086 # the example is flags, word-split on purpose
  model=(--model gpt-micro); case $example in *--model*) model=() ;; esac # its own model
  # an example that resumes (--load CKPT) gets a checkpoint saved by the
  # same flags over 2 steps
  case $example in *'--load CKPT'*)
    ck=$tmp/ckpt; rm -rf "$ck"
    # shellcheck disable=SC2086
    "$P" train "${model[@]}" --steps 2 --quiet $(echo "$example" | sed 's/--test-broken [^ ]*//; s/--load CKPT//') \
      --save "$ck" >/dev/null 2>&1
    example=${example//CKPT/$ck} ;;
  esac
  out=$("$P" check "${model[@]}" --steps 1 $example 2>&1); rc=$?
  first=$(echo "$out" | sed -n 's/^  tensor      step[0-9]*\.//p' | head -1)
  # shellcheck disable=SC2053 # the pattern is a glob on purpose
  [ $rc = 1 ] && [[ $first == $pattern ]]
  ok $? "$name: on '$example' the first divergence '$first' matches '$pattern' (exit $rc)" "$out"
  # (b) one device: refused, naming the flag and what it needs
  value=$base; [ "$name" != "$base" ] && value=$base:1
  out=$("$P" check --model gpt-micro --steps 1 --test-broken "$value" 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q -- "--test-broken $value: needs "
  ok $? "$name: refused on one device (exit $rc): $(echo "$out" | head -1)"
  # the old spelling is no flag any more
  out=$("$P" check --model gpt-micro --steps 1 "--test-broken-$base" 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q "unknown option '--test-broken-$base'"
  ok $? "$name: the old spelling --test-broken-$base is refused"
done <<<"$list"

out=$("$P" check --model gpt-micro --steps 1 --data-parallel-size 2 --test-broken no-such 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--test-broken: unknown variant 'no-such' (expected one of fp32-sums, .*replica:R, or list)"
ok $? "an unknown variant is refused with the names (exit $rc)" "$out"
out=$("$P" check --model gpt-micro --steps 1 --data-parallel-size 2 --test-broken replica 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--test-broken replica: needs its device, replica:R"
ok $? "replica without its device is refused (exit $rc)" "$out"
out=$("$P" check --model gpt-micro --steps 1 --data-parallel-size 2 --test-broken fp32-sums:1 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--test-broken: unknown variant 'fp32-sums:1'"
ok $? "a device given to a variant that takes none is refused (exit $rc)" "$out"
out=$("$P" check --model gpt-micro --steps 1 --data-parallel-size 2 --zero-stage 3 --test-broken replica:1 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--test-broken replica:1: needs ZeRO stage 0-2"
ok $? "replica at ZeRO-3 is refused before the run (exit $rc)" "$out"
out=$("$P" check --model gpt-micro --steps 1 --pipeline-model-parallel-size 2 --untie-embeddings-and-output-weights --test-broken pp-tied-embedding 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--test-broken pp-tied-embedding: needs a head tied to the embedding"
ok $? "pp-tied-embedding with an untied head is refused (exit $rc)" "$out"
out=$("$P" train --model gpt-micro --steps 1 --data-parallel-size 2 --test-broken replica:1 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--test-broken replica:1: .*give --dump or --digest"
ok $? "train --test-broken replica:1 needs something to compare (exit $rc)" "$out"

echo "RESULT test_broken.sh: $pass passed, $fail failed"
[ $fail = 0 ]
