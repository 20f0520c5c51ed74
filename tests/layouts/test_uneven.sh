#!/usr/bin/env bash
# Uneven whole-tile splits (placement_split): a vocabulary of 33 tiles
# (tests/configs/uneven.json: 264 = 33 x 8) split over tp 2 (17 + 16) and
# tp 4 (9 + 8 + 8 + 8) is bit-exact with the golden run over 3 steps, with
# sequence parallelism, pipeline stages and ZeRO-3 replicas; heads and FFN
# tiles over tp 3 (2 + 1 + 1) likewise; a broken
# variant is still caught; a degree leaving a rank without a whole tile is
# refused naming the tile count; --make-vocab-size-divisible-by pads the
# vocabulary to a multiple of N whatever the layout (I4).
set -u
P=${PARITY:-build/parity}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
M=$(pwd)/tests/configs/uneven.json
. tests/refuse.sh parity-uneven

exact() { # name, flags...: `parity check` exits 0 and says yes
  local name=$1; shift
  out=$("$P" check --model "$M" --steps 3 "$@" 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then
    ok "$name: bit-exact over 3 steps"
  else fail "$name" "exit $rc" "$(echo "$out" | tail -4)"; fi
}
exact "33 vocabulary tiles over tp 2" --tensor-model-parallel-size 2
exact "33 vocabulary tiles over tp 4" --tensor-model-parallel-size 4
exact "tp 2 --sequence-parallel" --tensor-model-parallel-size 2 --sequence-parallel
exact "tp 4 --sequence-parallel" --tensor-model-parallel-size 4 --sequence-parallel
exact "tp 2 x pp 2 (tied head on the last stage)" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
exact "tp 2 x dp 2 ZeRO-3" --tensor-model-parallel-size 2 --data-parallel-size 2 --zero-stage 3
exact "tp 2 x dp 2 ZeRO-1 x cp 2" --tensor-model-parallel-size 2 --data-parallel-size 2 --zero-stage 1 --context-parallel-size 2
exact "tp 2 untied head" --tensor-model-parallel-size 2 --untie-embeddings-and-output-weights
# heads and FFN tiles too (the column-then-row pairs): tp 3 holds 2, 1, 1
# of the 4 heads and of the 4 FFN tiles, and 11 vocabulary tiles each
exact "4 heads, 4 FFN tiles, 33 vocabulary tiles over tp 3" --tensor-model-parallel-size 3
exact "tp 3 x cp 2 (ring)" --tensor-model-parallel-size 3 --context-parallel-size 2
exact "tp 3 x dp 2 ZeRO-3" --tensor-model-parallel-size 3 --data-parallel-size 2 --zero-stage 3
exact "tp 3 x pp 2" --tensor-model-parallel-size 3 --pipeline-model-parallel-size 2

# checkpoints: saved at tp 3 (uneven blocks) the file is the golden run's,
# byte for byte, and resumes bit-exact at tp 4
"$P" train --model "$M" --steps 2 --quiet --save "$tmp/ck1" >/dev/null 2>&1
"$P" train --model "$M" --steps 2 --quiet --tensor-model-parallel-size 3 --save "$tmp/ck3" >/dev/null 2>&1
if [ -s "$tmp/ck1/model.safetensors" ] && cmp -s "$tmp/ck1/model.safetensors" "$tmp/ck3/model.safetensors"; then
  ok "tp 3 saves the golden checkpoint byte for byte"
else fail "tp 3 saves the golden checkpoint byte for byte" "$(ls "$tmp/ck1" "$tmp/ck3" 2>&1)"; fi
out=$("$P" check --model "$M" --load "$tmp/ck3" --steps 1 --tensor-model-parallel-size 4 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "the tp 3 checkpoint resumes bit-exact at tp 4"
else fail "the tp 3 checkpoint resumes at tp 4" "exit $rc" "$(echo "$out" | tail -3)"; fi

# the uneven split still catches a broken layout (the test can fail)
out=$("$P" check --model "$M" --steps 1 --tensor-model-parallel-size 4 --test-broken tp-fp32-sums 2>&1); rc=$?
if [ $rc = 1 ] && echo "$out" | grep -q '| NO$'; then ok "tp 4 over 33 tiles: tp-fp32-sums is caught"
else fail "tp 4 tp-fp32-sums is caught" "exit $rc" "$(echo "$out" | tail -3)"; fi

# a degree that leaves a rank without a whole tile: 3 tiles of 96 over tp 4
echo '{"base": "gpt-micro", "vocab": 288, "hidden": 96, "heads": 4, "tiles": {"features": 96}}' > "$tmp/v3.json"
refuse "3 vocabulary tiles over tp 4" "3 tiles of 96 .*tp=4" -- "$P" check --model "$tmp/v3.json" --tensor-model-parallel-size 4 --steps 1
refuse "every linear row-parallel splits heads evenly only" "3 must divide the 4 attention heads" -- "$P" check --model "$M" --tensor-model-parallel-size 3 --tensor-parallel-row-linears --steps 1
refuse "Ulysses needs equal heads" "Ulysses" -- "$P" check --model "$M" --tensor-model-parallel-size 3 --context-parallel-size 2 --cp-comm-type a2a --steps 1
refuse "--make-vocab-size-divisible-by 0" "make-vocab-size-divisible-by = 0: expected >= 1" -- "$P" check --model "$M" --make-vocab-size-divisible-by 0
refuse "--make-vocab-size-divisible-by -8" "make-vocab-size-divisible-by = -8" -- "$P" check --model "$M" --make-vocab-size-divisible-by -8
echo '{"base": "gpt-micro", "make_vocab_size_divisible_by": 0}' > "$tmp/pad0.json"
refuse "JSON make_vocab_size_divisible_by 0" "field 'make_vocab_size_divisible_by' = 0" -- "$P" check --model "$tmp/pad0.json"

# padding: 257 words to a multiple of 24 is 264 = 33 tiles, whatever tp
# and wherever the flag stands; the JSON field gives the same
for tp in 1 2 4; do
  v=$("$P" check --model "$M" --make-vocab-size-divisible-by 24 --vocab-size 257 --tensor-model-parallel-size $tp --print-config 2>&1 | grep -o '"vocab": [0-9]*')
  if [ "$v" = '"vocab": 264' ]; then ok "tp $tp: 257 padded to 264"; else fail "tp $tp: 257 padded to 264" "got '$v'"; fi
done
echo "{\"base\": \"gpt-micro\", \"vocab\": 257, \"make_vocab_size_divisible_by\": 24}" > "$tmp/pad.json"
v=$("$P" check --model "$tmp/pad.json" --print-config 2>&1 | grep -o '"vocab": [0-9]*')
if [ "$v" = '"vocab": 264' ]; then ok "JSON field: 257 padded to 264"; else fail "JSON field pads" "got '$v'"; fi
for tp in 2 4; do
  exact "padded vocabulary (257 -> 264) over tp $tp" --vocab-size 257 --make-vocab-size-divisible-by 24 --tensor-model-parallel-size $tp
done
# the padded rows are parameters like the others: their gradient is not all zero
"$P" train --model "$M" --vocab-size 257 --make-vocab-size-divisible-by 24 --steps 1 --quiet \
  --dump "$tmp/d" >/dev/null 2>&1
if python3 - "$tmp/d" <<'PY'
import sys, json, struct
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
for k, v in h.items():
    if k.endswith('grad.embedding.word_embeddings.weight'):
        lo, hi = v['data_offsets']; C = v['shape'][1]
        x = struct.unpack('<%df' % ((hi - lo) // 4), b[8 + n + lo:8 + n + hi])
        pad = x[257 * C:]
        sys.exit(0 if v['shape'][0] == 264 and any(t != 0 for t in pad) else 1)
sys.exit(1)
PY
then ok "padded rows 257..263 get gradients"; else fail "padded rows 257..263 get gradients" "$(ls "$tmp/d" 2>&1 | head -3)"; fi

echo "RESULT test_uneven.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
