#!/usr/bin/env bash
# `parity check` and `parity train` with a layout, from the command line:
# exit 0 and "yes" when bit-exact, 1 and a first-divergence report for the
# broken variant, 2 and a message naming the field for an invalid layout,
# and a layout dump that `parity diff` finds identical to the golden dump.
set -u
P=${PARITY:-build/parity}
pass=0; fail=0
ok() { if [ "$1" = 0 ]; then pass=$((pass+1)); echo "ok      $2"; else fail=$((fail+1)); echo "not ok  $2"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

out=$("$P" check --model gpt-micro --data-parallel-size 2 --zero-stage 3 --accum-degree 2 --overlap-grad-reduce 2>&1); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q '| yes'; ok $? "check: ZeRO-3 with overlap is bit-exact (exit 0)"

out=$("$P" check --model gpt-micro --data-parallel-size 4 --coll-algo ring --test-broken-fp32-sums 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q 'FIRST DIVERGENCE' && echo "$out" | grep -q 'ulp' && echo "$out" | grep -q '| NO'
ok $? "check: fp32 ring sums are caught (exit 1, first-divergence report)"

expect_bad() { # flags... ; the message must contain $needle
  out=$("$P" check --model gpt-micro "$@" 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q -- "$needle"; ok $? "invalid layout '$*' -> exit 2 naming '$needle'"
}
needle="data-parallel-size: 3 does not divide"; expect_bad --data-parallel-size 3
needle="--bucket-cap-mb"; expect_bad --bucket-cap-mb 0
needle="unknown ZeRO stage 7"; expect_bad --zero-stage 7
needle="not yet supported"; expect_bad --dtype bf16
needle="--coll-algo"; expect_bad --coll-algo tree
needle="accum-degree: 5"; expect_bad --data-parallel-size 2 --accum-degree 5

# an arena too small: a clear report naming the device, not a crash
out=$("$P" train --model gpt-micro --steps 1 --data-parallel-size 2 --arena-mb 0.05 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "device" && echo "$out" | grep -qi "capacity"
ok $? "an arena too small is reported (exit 2)"

# the layout's reassembled dump equals the golden dump, tensor for tensor
"$P" train --model gpt-micro --steps 3 --dump "$tmp/golden.safetensors" --quiet >/dev/null 2>&1 &&
"$P" train --model gpt-micro --steps 3 --data-parallel-size 2 --zero-stage 2 --dump "$tmp/dp.safetensors" --quiet >/dev/null 2>&1 &&
"$P" diff "$tmp/golden.safetensors" "$tmp/dp.safetensors" --quiet >/dev/null 2>&1
ok $? "parity diff: a ZeRO-2 layout's dump is bit-exact with the golden dump"

echo "RESULT test_check.sh: $pass passed, $fail failed"
[ $fail = 0 ]
