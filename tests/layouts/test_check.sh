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

# ZeRO-3 with --overlap-param-gather: unit u+1's all-gather prefetched on
# the communication thread while u runs (forward up, backward down)
bad=0
for f in "--data-parallel-size 2" "--data-parallel-size 4" "--data-parallel-size 2 --tensor-model-parallel-size 2" \
         "--data-parallel-size 2 --pipeline-model-parallel-size 2" "--data-parallel-size 2 --overlap-grad-reduce --bucket-cap-mb 0.001" \
         "--data-parallel-size 2 --recompute-granularity full --recompute-method block --recompute-num-layers 1"; do
  # shellcheck disable=SC2086 # flags, word-split on purpose
  out=$("$P" check --model gpt-micro --num-layers 4 --steps 3 --global-batch-size 16 --accum-degree 2 --zero-stage 3 \
        --overlap-param-gather $f 2>&1)
  echo "$out" | grep -q '| yes$' || { bad=1; echo "  not bit-exact: $f"; }
done
ok $bad "check: ZeRO-3 prefetch bit-exact at dp 2/4 with accumulation, x tp 2, x pp 2, x overlapped reduce, x recompute"
# memory: at most two units gathered at once: the measured parameter peak
# equals the estimate (shard + the largest two adjacent units), above the
# just-in-time run's (shard + the largest unit)
run_tiny() { "$P" train --model gpt-tiny --num-layers 4 --steps 1 --global-batch-size 4 --accum-degree 2 \
             --zero-stage 3 --data-parallel-size 2 "$@" 2>&1; }
jit=$(run_tiny | awk '$1 == "0" && NF > 4 { print $2 }')
out=$(run_tiny --overlap-param-gather)
pre=$(echo "$out" | awk '$1 == "0" && NF > 4 { print $2 }')
est=$(echo "$out" | sed -n 's/^memory estimate per device: params \([0-9.]*\) MB.*/\1/p')
[ -n "$pre" ] && [ "$pre" = "$est" ] && awk -v a="$jit" -v b="$pre" 'BEGIN { exit !(b > a && b < 2 * a) }'
ok $? "check: ZeRO-3 prefetch holds two units at most (params peak $jit MB just in time, $pre MB prefetched = the estimate $est MB)"

out=$("$P" check --model gpt-micro --data-parallel-size 4 --coll-algo ring --test-broken fp32-sums 2>&1); rc=$?
[ $rc = 1 ] && echo "$out" | grep -q 'FIRST DIVERGENCE' && echo "$out" | grep -q 'ulp' && echo "$out" | grep -q '| NO'
ok $? "check: fp32 ring sums are caught (exit 1, first-divergence report)"
# gpt-micro is one bucket of 10944 elements, so dp=4 pieces are 2736 long:
# final_layernorm.weight (the first gradient in backward order) lies in
# piece 3, and the report must name device 3 as the one that rounds it
echo "$out" | grep -q 'tensor      step0.grad.final_layernorm' &&
echo "$out" | grep -q 'produced by device 3 (tp 0, cp 0, ep 0, dp 3, pp 0; gradient-group rank 3 of 4, ZeRO-0)' &&
echo "$out" | grep -q 'the exact reduce-scatter rounds it in piece 3 of bucket 0.*gradient-group rank 3 of 4' &&
! echo "$out" | grep -q 'replicated on every device for stage 0'
ok $? "check: the fp32-sums divergence names the owner of the gradient's bucket piece (device 3)"

# a drifting replica (one bit of device 2's parameters) is reported as such
for z in 0 1 2; do
  out=$("$P" check --model gpt-micro --data-parallel-size 4 --zero-stage $z --test-broken replica:2 2>&1); rc=$?
  [ $rc = 1 ] && echo "$out" | grep -q 'the replicas of a tensor disagree' &&
  echo "$out" | grep -q "device 2 (tp 0, cp 0, ep 0, dp 2, pp 0)'s copy differs from device 0 (tp 0, cp 0, ep 0, dp 0, pp 0)'s"
  ok $? "check: device 2's drifting parameter replica is caught and named (ZeRO-$z)"
done
out=$("$P" check --model gpt-micro --data-parallel-size 2 --zero-stage 3 --test-broken replica:1 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q 'ZeRO-3 keeps no parameter replicas'; ok $? "--test-broken replica:1 at ZeRO-3 is an error"

# --compare: only the classes asked for are compared, and the rest counted
# (gpt-micro: 28 parameter tensors; per step m and v of each and the count)
out=$("$P" check --model gpt-micro --steps 2 --data-parallel-size 2 --zero-stage 1 --compare optim 2>&1); rc=$?
n=$(echo "$out" | awk -F'|' '/zero=1/ {gsub(/ /, "", $4); print $4}')
[ $rc = 0 ] && echo "$out" | grep -q '| yes' && [ "$n" = $((2 * (2 * 28 + 1))) ] &&
echo "$out" | grep -q 'tensors of the classes left out were not compared'
ok $? "check --compare optim: AdamW's m, v and step count of 2 steps only ($n tensors)"

# uneven accumulation: microbatch sizes differ by one and the largest does
# not divide the batch; exact sums still give the golden bits
out=$("$P" check --model gpt-tiny --data-parallel-size 1 --accum-degree 5 2>&1); rc=$?
[ $rc = 0 ] && echo "$out" | grep -q '| yes'; ok $? "check: gpt-tiny dp=1 accum=5 (5,5,5,5,4) is bit-exact"
echo '{"base": "gpt-tiny", "global_batch": 35, "micro_batch": 35}' > "$tmp/b35.json"
for l in "7 --accum-degree 2" "5 --accum-degree 4" "1 --accum-degree 4" "5 --zero-stage 3 --accum-degree 3"; do
  out=$("$P" check --model "$tmp/b35.json" --data-parallel-size $l 2>&1); rc=$?
  [ $rc = 0 ] && echo "$out" | grep -q '| yes'; ok $? "check: batch 35, --data-parallel-size $l is bit-exact"
done

expect_bad() { # flags... ; the message must contain $needle
  out=$("$P" check --model gpt-micro "$@" 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q -- "$needle"; ok $? "invalid layout '$*' -> exit 2 naming '$needle'"
}
needle="data-parallel-size: 3 does not divide"; expect_bad --data-parallel-size 3
needle="--bucket-cap-mb"; expect_bad --bucket-cap-mb 0
needle="unknown ZeRO stage 7"; expect_bad --zero-stage 7
needle="--dtype: expected fp32, bf16 or fp16"; expect_bad --dtype fp8
needle="--coll-algo"; expect_bad --coll-algo tree
needle="accum-degree: 5"; expect_bad --data-parallel-size 2 --accum-degree 5

# an arena too small: a clear report naming the device, not a crash;
# refused up front from the estimate, before a step runs
out=$("$P" train --model gpt-micro --steps 1 --data-parallel-size 2 --arena-mb 0.05 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "device" && echo "$out" | grep -qi "capacity"
ok $? "an arena too small is reported (exit 2)"
echo "$out" | grep -q "estimated .* (params .*open exact sums .*activations .*), more than its capacity --arena-mb 0.05" &&
! echo "$out" | grep -q "^step"
ok $? "--arena-mb: refused before the run, with the estimate by category"
out=$("$P" check --model gpt-micro --data-parallel-size 2 --arena-mb 0.05 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "more than its capacity --arena-mb"; ok $? "check: --arena-mb refused up front"
# the model needs twice the host: refused at once, with both figures
big="--hidden-size 1024 --num-attention-heads 128 --ffn-hidden-size 4096 --num-layers 168"
start=$(date +%s%N)
out=$(PARITY_MEM_AVAILABLE_MB=16000 "$P" train --model gpt-tiny $big --data-parallel-size 2 --steps 1 2>&1); rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $rc = 2 ] && echo "$out" | grep -q "host memory: the run needs an estimated .* GB .* but 16.00 GB is available" && [ $ms -lt 2000 ]
ok $? "168 layers on a 16 GB host: refused in ${ms} ms with the estimate and the available memory"
out=$("$P" train --model gpt-micro --steps 1 --data-parallel-size 2 --zero-stage 1 2>&1)
echo "$out" | grep -q "memory estimate per device: params" && echo "$out" | grep -q "memory estimate of the run: 2 devices"
ok $? "train: the layout header prints the memory estimate"

# the layout's reassembled dump equals the golden dump, tensor for tensor
"$P" train --model gpt-micro --steps 3 --dump "$tmp/golden.safetensors" --quiet >/dev/null 2>&1 &&
"$P" train --model gpt-micro --steps 3 --data-parallel-size 2 --zero-stage 2 --dump "$tmp/dp.safetensors" --quiet >/dev/null 2>&1 &&
"$P" diff "$tmp/golden.safetensors" "$tmp/dp.safetensors" --quiet >/dev/null 2>&1
ok $? "parity diff: a ZeRO-2 layout's dump is bit-exact with the golden dump"

echo "RESULT test_check.sh: $pass passed, $fail failed"
[ $fail = 0 ]
