#!/usr/bin/env bash
# The 8-bit optimizer (--optimizer adamw8bit: ref/model/optim/adamw8bit.c, the
# golden run included) from the outside:
#  - bit-exact with the golden run over 3 steps (losses, gradients,
#    parameters and the dequantized m and v, memcmp) on dp ZeRO-1 and
#    ZeRO-3, tp, tp x dp ZeRO-1 and tp + SP x pp x dp ZeRO-2;
#  - the flag is used: another loss than fp32 AdamW's, and the optimizer's
#    memory estimate falls below a third;
#  - a layout that splits a quantization block is refused before it runs,
#    naming the block size; bad values of the flags are refused by name;
#  - checkpoints: any layout writes the golden file byte for byte, a run
#    resumed on another layout continues with the golden bits, a value
#    that is no 8-bit state or another optimizer's checkpoint is refused;
#  - the negative control adamw8bit-shard-blocks (per-shard blocks) is
#    caught at the optimizer state.
set -u
P=${PARITY:-build/parity}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
cd "$(dirname "$0")/../.."
. tests/refuse.sh parity-adam8

A8=(--optimizer adamw8bit)
exact() { # name, flags...
  local name=$1; shift
  out=$("$P" check --model gpt-micro --num-layers 4 --steps 3 "${A8[@]}" "$@" 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "$name: bit-exact over 3 steps"
  else fail "$name" "exit $rc" "$(echo "$out" | tail -4)"; fi
}
exact "dp 2 ZeRO-1" --data-parallel-size 2 --zero-stage 1
exact "dp 4 ZeRO-3 (pieces moved to block boundaries)" --data-parallel-size 4 --zero-stage 3
# gpt-micro's row-parallel weights give a tp 2 rank 8 columns: blocks of 8
exact "tp 2" --optimizer-block 8 --tensor-model-parallel-size 2
exact "tp 2 x dp 2 ZeRO-1" --optimizer-block 8 --tensor-model-parallel-size 2 \
  --data-parallel-size 2 --zero-stage 1
exact "tp 2 + SP x pp 2 x dp 2 ZeRO-2" --optimizer-block 8 --tensor-model-parallel-size 2 \
  --sequence-parallel --pipeline-model-parallel-size 2 --num-microbatches 2 \
  --data-parallel-size 2 --zero-stage 2

# the flag is used: the loss moves, the state shrinks
loss() { "$P" train --model gpt-tiny --steps 3 --quiet "$@" 2>&1 | grep -oE 'loss [0-9.]+ -> [0-9.]+ \(0x[0-9a-f]+\)'; }
l32=$(loss); l8=$(loss "${A8[@]}")
if [ -n "$l32" ] && [ -n "$l8" ] && [ "$l32" != "$l8" ]; then ok "fp32 AdamW $l32, adamw8bit $l8"
else fail "adamw8bit changes the run" "fp32 '$l32' 8-bit '$l8'"; fi
opt() { "$P" train --model gpt-tiny --data-parallel-size 2 --zero-stage 1 --steps 1 "$@" 2>&1 |
  grep '^memory estimate per device' | grep -oE 'optimizer [0-9.]+ MB' | awk '{print $2}'; }
o32=$(opt); o8=$(opt "${A8[@]}")
if [ -n "$o8" ] && awk -v a="$o8" -v b="$o32" 'BEGIN {exit !(a > 0 && 3 * a < b)}'; then
  ok "optimizer memory per device, ZeRO-1: $o32 MB fp32, $o8 MB 8-bit"
else fail "the optimizer's memory falls" "fp32 '$o32' 8-bit '$o8'"; fi

refuse "tp 2 with blocks of 256 (a rank holds 96 of the qkv bias's 192)" \
  "optimizer_block = 256 \(--optimizer-block\); every device must hold whole blocks" -- \
  "$P" check --model gpt-tiny --steps 1 "${A8[@]}" --tensor-model-parallel-size 2
refuse "an unknown optimizer" "--optimizer 'sgd': expected adam" -- \
  "$P" train --model gpt-micro --steps 1 --optimizer sgd
refuse "a block size without adamw8bit" "--optimizer-block\) = 64: only --optimizer adamw8bit" -- \
  "$P" train --model gpt-micro --steps 1 --optimizer-block 64
refuse "a block of 0" "optimizer.block \(--optimizer-block\) = 0: expected 1 to 4096" -- \
  "$P" train --model gpt-micro --steps 1 "${A8[@]}" --optimizer-block 0

# checkpoints (gpt-micro, blocks of 8): the golden 4 steps, then 2 + 2
M=(--model gpt-micro "${A8[@]}" --optimizer-block 8 --quiet)
ck=$tmp/ck
mkdir -p "$ck"
train() { "$P" train "${M[@]}" "$@" >"$tmp/log" 2>&1 || { cat "$tmp/log"; return 1; }; }
if train --steps 4 --dump "$ck/full.st" --dump-steps 2,3 --save "$ck/full4" &&
   train --steps 2 --save "$ck/G" &&
   train --steps 2 --data-parallel-size 2 --zero-stage 3 --save "$ck/L"; then
  cmp -s "$ck/G/model.safetensors" "$ck/L/model.safetensors" &&
    ok "dp 2 ZeRO-3 writes the golden checkpoint byte for byte" ||
    fail "dp 2 ZeRO-3 writes the golden checkpoint" "$(cmp "$ck/G/model.safetensors" "$ck/L/model.safetensors")"
  if train --steps 2 --load "$ck/L" --tensor-model-parallel-size 2 --data-parallel-size 2 \
       --zero-stage 1 --dump "$ck/r.st" --dump-steps 2,3 --save "$ck/R4"; then
    "$P" diff "$ck/full.st" "$ck/r.st" --max-rows 100000 >"$tmp/diff" 2>&1
    n=$(grep -c '^step[23]\.' "$tmp/diff"); bad=$(grep '^step[23]\.' "$tmp/diff" | grep -vc 'bit-exact')
    [ "$n" -gt 0 ] && [ "$bad" = 0 ] && ok "resumed on tp 2 x dp 2 ZeRO-1: $n tensors of steps 2-3 bit-exact" ||
      fail "resumed on tp 2 x dp 2 ZeRO-1" "$bad of $n differ" "$(grep '^step[23]\.' "$tmp/diff" | grep -v bit-exact | head -3)"
    cmp -s "$ck/R4/model.safetensors" "$ck/full4/model.safetensors" &&
      ok "the resumed run saves the uninterrupted run's checkpoint" ||
      fail "the resumed run saves the uninterrupted run's checkpoint"
  else fail "resume on tp 2 x dp 2 ZeRO-1" "$(tail -3 "$tmp/log")"; fi
  # one moment nudged to a value no code gives, the digest recomputed
  /usr/bin/python3 - "$ck/G" "$w/bad" <<'PY'
import hashlib, json, os, struct, sys
src, dst = sys.argv[1], sys.argv[2]
b = bytearray(open(src + "/model.safetensors", "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); m = h["__metadata__"]
lo, hi = h["adam_m.layers.0.mlp.dense_h_to_4h.weight"]["data_offsets"]
at = 8 + n + lo + 4 * 5  # element 5
x = struct.unpack("<f", b[at:at + 4])[0]
b[at:at + 4] = struct.pack("<f", x * (1 + 2**-20) if x else 1e-30)
d = hashlib.sha256()
for k in ("format", "config", "step", "adam_t", "backend"):
    d.update(k.encode() + b"\0" + m[k].encode() + b"\0")
d.update(bytes(b[8 + n:]))
m["sha256"] = d.hexdigest()
t = json.dumps(h, separators=(",", ":")).encode()
assert len(t) <= n
os.makedirs(dst)
open(dst + "/model.safetensors", "wb").write(bytes(b[:8]) + t + b" " * (n - len(t)) + bytes(b[8 + n:]))
PY
  refuse "--load: a moment that is no 8-bit state (digest recomputed)" \
    "tensor 'adam_m.layers.0.mlp.dense_h_to_4h.weight': element 5 .* is no 8-bit state value" -- \
    "$P" train "${M[@]}" --steps 1 --load "$w/bad"
  refuse "--load: an 8-bit checkpoint into fp32 AdamW" \
    "field 'optimizer' is adamw8bit in the checkpoint, absent \(adam\) here" -- \
    "$P" train --model gpt-micro --steps 1 --load "$ck/G"
else fail "the checkpoint runs" "$(tail -3 "$tmp/log")"; fi

out=$("$P" check --model gpt-micro --steps 1 "${A8[@]}" --data-parallel-size 4 --zero-stage 1 \
  --test-broken adamw8bit-shard-blocks 2>&1); rc=$?
first=$(echo "$out" | sed -n 's/^  tensor      //p' | head -1)
[ $rc = 1 ] && [[ $first == step0.exp_avg.* ]] && ok "per-shard blocks are caught at $first" ||
  fail "per-shard blocks are caught at the optimizer state" "exit $rc, first '$first'" "$(echo "$out" | tail -3)"

echo "RESULT test_adamw8bit.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
