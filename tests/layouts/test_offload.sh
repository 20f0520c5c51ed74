#!/usr/bin/env bash
# Optimizer offload (DeepSpeed's ZeRO-Offload / ZeRO-Infinity:
# --offload-optimizer cpu|nvme, --offload-path DIR; ref/parallel/engine/
# offload.c): the same bits as keeping the state on the device; cpu moves
# the optimizer shard into each rank's host arena (the device's optimizer
# column drops to zero), nvme into one file per rank read and written
# bucket by bucket through bounded staging (the trace shows the
# transfers); a run killed during an nvme step leaves its checkpoint
# intact and resuming from it gives the uninterrupted run's checkpoint,
# byte for byte; adamw8bit's 8-bit state (codes and block absmax) goes to
# the file as fp32's does; bad paths and impossible combinations are
# refused naming the flag or the file. The files themselves (the run's
# own, locked, removed): tests/cli/test_offload_files.sh.
set -u
P=${PARITY:-build/parity}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
. tests/refuse.sh parity-offload
off=$tmp/offload
mkdir -p "$off"

exact() { # name, flags...
  local name=$1; shift
  out=$("$P" check --model gpt-micro --num-layers 4 --steps 3 "$@" 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "$name: bit-exact over 3 steps"
  else fail "$name" "exit $rc" "$(echo "$out" | tail -4)"; fi
}
CPU="--offload-optimizer cpu"
NVME="--offload-optimizer nvme --offload-path $off"
exact "cpu, dp 2 ZeRO-1" $CPU --data-parallel-size 2 --zero-stage 1
exact "cpu, dp 2 ZeRO-3" $CPU --data-parallel-size 2 --zero-stage 3
exact "cpu, adamw8bit dp 2 ZeRO-2" $CPU --optimizer adamw8bit --data-parallel-size 2 --zero-stage 2
exact "nvme, dp 2 ZeRO-1, small buckets" $NVME --data-parallel-size 2 --zero-stage 1 --bucket-cap-mb 0.01
exact "nvme, dp 2 ZeRO-3" $NVME --data-parallel-size 2 --zero-stage 3
exact "nvme, bf16, tp 2 x pp 2 x dp 2 ZeRO-2" $NVME --bf16 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --data-parallel-size 2 --zero-stage 2 --num-microbatches 2 \
  --global-batch-size 8
# adamw8bit: the rank's file holds its codes and block absmax, bucket by bucket
exact "nvme, adamw8bit dp 2 ZeRO-1, small buckets" $NVME --optimizer adamw8bit --data-parallel-size 2 \
  --zero-stage 1 --bucket-cap-mb 0.01
exact "nvme, adamw8bit dp 2 ZeRO-3" $NVME --optimizer adamw8bit --data-parallel-size 2 --zero-stage 3
exact "nvme, adamw8bit tp 2 x dp 2 ZeRO-2 (blocks of 8)" $NVME --optimizer adamw8bit --optimizer-block 8 \
  --tensor-model-parallel-size 2 --data-parallel-size 2 --zero-stage 2
"$P" train --model gpt-micro --num-layers 4 --steps 2 --optimizer adamw8bit --data-parallel-size 2 \
  --zero-stage 1 --save "$tmp/ck8" >/dev/null 2>&1
exact "nvme, adamw8bit resumed from a checkpoint, dp 2 ZeRO-2" $NVME --optimizer adamw8bit --load "$tmp/ck8" \
  --data-parallel-size 2 --zero-stage 2

# the device's optimizer column: the state's (none), the host's, one bucket's piece
opt_col() { "$P" train --model gpt-tiny --steps 1 --data-parallel-size 2 --zero-stage 1 "$@" 2>&1 |
            awk '$1 == "0" && NF >= 5 {print $4; exit}'; }
o0=$(opt_col); oc=$(opt_col $CPU); on=$(opt_col $NVME --bucket-cap-mb 0.1)
hp=$("$P" train --model gpt-tiny --steps 1 --data-parallel-size 2 --zero-stage 1 $CPU 2>&1 |
     grep -oE "device 0's peak [0-9.]+ MB" | awk '{print $4}')
if [ "$oc" = "0.00" ] && [ -n "$hp" ] && [ "$hp" = "$o0" ]; then
  ok "cpu: device 0's optimizer column $o0 MB -> $oc MB, its host arena's peak $hp MB"
else fail "cpu: the device holds no optimizer state" "stored $o0 cpu $oc host $hp"; fi
if [ -n "$on" ] && awk -v a="$on" -v b="$o0" 'BEGIN {exit !(a < b / 4)}'; then
  ok "nvme with 0.1 MB buckets: the device keeps two buckets' pieces (one updated, one read), $on MB of the shard's $o0 MB"
else fail "nvme: bounded staging" "stored $o0 nvme $on"; fi

# the run's transfers in its trace (its files, their contents and their
# removal: tests/cli/test_offload_files.sh)
"$P" train --model gpt-tiny --steps 2 --data-parallel-size 2 --zero-stage 1 $NVME --bucket-cap-mb 0.1 \
  --trace "$tmp/t.json" >/dev/null 2>&1
if grep -q '"offload write m, v"' "$tmp/t.json" && grep -q '"offload read m, v"' "$tmp/t.json"; then
  ok "the trace shows the offload's reads and writes ($(grep -o '"offload [a-z]* m, v"' "$tmp/t.json" | wc -l) spans)"
else fail "the trace shows the offload's transfers"; fi

# killed during an nvme step: the checkpoint is intact, resuming gives the
# uninterrupted run's checkpoint byte for byte
L="--model gpt-micro --num-layers 4 --data-parallel-size 2 --zero-stage 1"
"$P" train $L --steps 2 --save "$tmp/ck" >/dev/null 2>&1
before=$(sha256sum "$tmp/ck/model.safetensors")
PARITY_OFFLOAD_KILL_AFTER=3 "$P" train $L --load "$tmp/ck" --steps 2 $NVME --bucket-cap-mb 0.01 \
  --save "$tmp/ck-killed" >/dev/null 2>&1 &
wait $! 2>/dev/null
krc=$?
after=$(sha256sum "$tmp/ck/model.safetensors")
"$P" train $L --load "$tmp/ck" --steps 2 $NVME --bucket-cap-mb 0.01 --save "$tmp/ck-resumed" >/dev/null 2>&1
"$P" train $L --steps 4 --save "$tmp/ck-straight" >/dev/null 2>&1
if [ "$krc" = 137 ] && [ "$before" = "$after" ] && [ ! -e "$tmp/ck-killed/model.safetensors" ] &&
   cmp -s "$tmp/ck-resumed/model.safetensors" "$tmp/ck-straight/model.safetensors"; then
  ok "killed mid-step (SIGKILL after 3 piece writes): the checkpoint intact, the resumed run's checkpoint is the uninterrupted one's"
else fail "kill and resume" "exit $krc" "ck $( [ "$before" = "$after" ] && echo intact || echo CHANGED)" \
     "$(cmp "$tmp/ck-resumed/model.safetensors" "$tmp/ck-straight/model.safetensors" 2>&1)"; fi

refuse "offload at ZeRO-0" "offload-optimizer: cpu needs the optimizer state sharded" -- \
  "$P" check --model gpt-micro --steps 1 --data-parallel-size 2 $CPU
refuse "nvme without a path" "offload-optimizer: nvme needs --offload-path" -- \
  "$P" check --model gpt-micro --steps 1 --data-parallel-size 2 --zero-stage 1 --offload-optimizer nvme
refuse "a path without nvme" "offload-path: only --offload-optimizer nvme reads it" -- \
  "$P" check --model gpt-micro --steps 1 --data-parallel-size 2 --zero-stage 1 $CPU --offload-path "$off"
refuse "a missing path" "--offload-path '$tmp/nowhere': No such file or directory" -- \
  "$P" check --model gpt-micro --steps 1 --data-parallel-size 2 --zero-stage 1 \
  --offload-optimizer nvme --offload-path "$tmp/nowhere"
echo "not a directory" >"$tmp/afile"
refuse "a path that is a file" "--offload-path '$tmp/afile': not a directory" -- \
  "$P" check --model gpt-micro --steps 1 --data-parallel-size 2 --zero-stage 1 \
  --offload-optimizer nvme --offload-path "$tmp/afile"
refuse "an unknown device" "offload-optimizer: unknown value 'gpu'" -- \
  "$P" check --model gpt-micro --steps 1 --offload-optimizer gpu
# a full disk: tests/cli/test_offload_files.sh (the message, and nothing left)

echo "RESULT test_offload.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
