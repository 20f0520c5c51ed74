#!/usr/bin/env bash
# Colossal-AI's 2-D (SUMMA), 2.5-D and 3-D tensor parallelism
# (ref/model/styles/tp2d.c, tp3d.c): bit-exact with the golden run over 3 steps
# with dropout (gpt-tiny) on 2-D q 2 and 3 (uneven column blocks: 8
# feature tiles and 8 heads over 3), 2.5-D q 2 depth 2 and 3-D q 2, each x
# pp 2 (which accumulates 4-6 microbatches) and x dp 2 (ZeRO-1, ZeRO-3); Colossal config
# files run as they are; checkpoints are the golden file and reshard
# between 1-D, 2-D, 2.5-D and 3-D; the broken variants are caught at the
# first wrong tensor; bad layouts are refused by name.
set -u
P=${PARITY:-build/parity}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
cfgs=$(pwd)/tests/configs
. tests/refuse.sh parity-tp2d

exact() { # name, flags...: `parity check` exits 0 and says yes (over $STEPS steps, 3)
  local name=$1 steps=${STEPS:-3}; shift
  out=$("$P" check --model gpt-tiny --steps "$steps" "$@" 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then
    ok "$name: bit-exact over $steps step(s)"
  else fail "$name" "exit $rc" "$(echo "$out" | tail -4)"; fi
}
# same() { name, flags... }: the layout's 3-step dump against one golden
# dump made once (`parity diff`: every tensor bit-exact); `exact` runs the
# checker itself (element writers, replicas) on the other layouts
"$P" train --model gpt-tiny --steps 3 --quiet --dump "$tmp/golden.st" >/dev/null 2>&1
same() {
  local name=$1; shift
  rm -f "$tmp/layout.st"
  out=$("$P" train --model gpt-tiny --steps 3 --quiet "$@" --dump "$tmp/layout.st" 2>&1 &&
        "$P" diff "$tmp/golden.st" "$tmp/layout.st" 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -qE '^([0-9]+) tensors, \1 bit-exact, 0 differ, 0 missing$'; then
    ok "$name: every tensor of 3 steps equals the golden dump"
  else fail "$name" "exit $rc" "$(echo "$out" | tail -4)"; fi
}
D2=(--tensor-model-parallel-size 4 --tensor-parallel-mode 2d)
D3=(--tensor-model-parallel-size 9 --tensor-parallel-mode 2d)
D25=(--tensor-model-parallel-size 8 --tensor-parallel-mode 2.5d --tensor-parallel-depth 2)
D3D=(--tensor-model-parallel-size 8 --tensor-parallel-mode 3d)
# each mode x pp 2 (1F1B, 3-6 microbatches accumulated) x dp 2 ZeRO-1, and
# x dp 2 ZeRO-3; 2d q 2 alone, with GPipe and an untied head, and q 3 with
# accumulation alone
for mode in D2 D3 D25 D3D; do
  declare -n mode_flags=$mode
  mb=4; [ $mode = D3 ] && mb=6
  check=same; [ $mode = D3 ] || [ $mode = D3D ] && check=exact
  $check "${mode_flags[*]:1} x pp 2 x dp 2 ZeRO-1" "${mode_flags[@]}" --pipeline-model-parallel-size 2 \
    --micro-batch-size $mb --data-parallel-size 2 --zero-stage 1
  same "${mode_flags[*]:1} x dp 2 ZeRO-3" "${mode_flags[@]}" --data-parallel-size 2 --zero-stage 3
  unset -n mode_flags
done
same "2d q 2" "${D2[@]}"
exact "2d q 2, GPipe, untied head (its own golden run)" "${D2[@]}" --pipeline-model-parallel-size 2 --micro-batch-size 4 \
  --pipeline-schedule gpipe --untie-embeddings-and-output-weights
same "2d q 3 (uneven: 3, 3, 2 feature tiles and heads), 2 microbatches accumulated" "${D3[@]}" --accum-degree 2

# with cp: the cp axis is orthogonal to tp's sub-axes; each rank holds
# [b/q, s/cp, h/q] (the ring's chunks r and 2cp-1-r, or Ulysses' r-th
# piece), its column's whole heads run the ring over the cp group, or
# Ulysses' all-to-all (cp | heads/q)
same "2d q 2 x cp 2 (ring)" "${D2[@]}" --context-parallel-size 2
exact "2d q 2 x cp 2 (Ulysses) x dp 2 ZeRO-1" "${D2[@]}" --context-parallel-size 2 --cp-comm-type a2a \
  --data-parallel-size 2 --zero-stage 1
same "2.5d q 2 d 2 x cp 2 (ring)" "${D25[@]}" --context-parallel-size 2
exact "3d q 2 x cp 2 (ring) x pp 2" "${D3D[@]}" --context-parallel-size 2 --pipeline-model-parallel-size 2 \
  --micro-batch-size 4
same "3d q 2 x cp 2 (Ulysses: the inner layout's heads)" "${D3D[@]}" --context-parallel-size 2 --cp-comm-type a2a

# encoder-decoders (t5-tiny): one stream of source then target rows on 2-D's
# [b/q, s, h/q] blocks; the encoder's bidirectional span, the decoder's
# causal target span and cross-attention are key spans of each column's
# heads; the encoder's final LayerNorm completes its statistics over the row
t5() { local name=$1; shift; out=$("$P" check --model t5-tiny --steps 3 "$@" 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "t5-tiny $name: bit-exact over 3 steps"
  else fail "t5-tiny $name" "exit $rc" "$(echo "$out" | tail -4)"; fi; }
t5 "2d q 2 x dp 2 ZeRO-3" "${D2[@]}" --data-parallel-size 2 --zero-stage 3
t5 "2.5d q 2 d 2" "${D25[@]}"
t5 "3d q 2, the encoder on its own stage (epp 1 pp 1)" "${D3D[@]}" --encoder-pipeline-model-parallel-size 1 \
  --pipeline-model-parallel-size 1 --micro-batch-size 4
t5 "2d q 2, epp 2 pp 2" "${D2[@]}" --encoder-pipeline-model-parallel-size 2 --pipeline-model-parallel-size 2 \
  --micro-batch-size 4

# Colossal-AI config files, unedited
# (one step each: their layouts are the flags' above, compared below)
STEPS=1 exact "Colossal file: pipeline 2, tensor 1d size 4" --parallel-config "$cfgs/colossal_1d4.py" --num-microbatches 4
STEPS=1 exact "Colossal file: pipeline 2, tensor 2d size 4" --parallel-config "$cfgs/colossal_2d.py" --num-microbatches 4
STEPS=1 exact "Colossal file: pipeline 2, tensor 2.5d size 8 depth 2" --parallel-config "$cfgs/colossal_2p5d.py" --num-microbatches 3
STEPS=1 exact "Colossal file: pipeline 2, tensor 3d size 8" --parallel-config "$cfgs/colossal_3d.py" --num-microbatches 3

# --print-layout: the sub-axes, each rank's sub-coordinates and groups;
# a Colossal file gives the flags' layout
L="$P train --model gpt-tiny --print-layout"
out=$($L "${D2[@]}" --data-parallel-size 2 2>&1)
if echo "$out" | grep -q '"mode": "2d", "sub_axes": \[{"axis": "tp", "name": "column", "size": 2}, {"axis": "tp2", "name": "row", "size": 2}\]' &&
   echo "$out" | grep -q '{"rank": 3, "tp": 1, "tp_sub": {"column": 1, "along_column": \[2, 3\], "row": 1, "along_row": \[1, 3\]}, "pp": 0, "dp": 0}' &&
   echo "$out" | grep -q '{"rank": 5, "tp": 1, "tp_sub": {"column": 1, "along_column": \[4, 5\], "row": 0, "along_row": \[5, 7\]}, "pp": 0, "dp": 1}'; then
  ok "--print-layout: 2d sub-axes, sub-coordinates and row/column groups"
else fail "--print-layout 2d" "$(echo "$out" | sed -n 7,10p)"; fi
out=$($L "${D3D[@]}" 2>&1)
if echo "$out" | grep -q '{"rank": 6, "tp": 0, "tp_sub": {"output": 0, "along_output": \[6, 7\], "input": 1, "along_input": \[4, 6\], "weight": 1, "along_weight": \[2, 6\]}'; then
  ok "--print-layout: 3d output, input and weight coordinates and groups"
else fail "--print-layout 3d" "$(echo "$out" | sed -n 7,16p)"; fi
for f in 2d 2p5d 3d; do
  case $f in 2d) flags=("${D2[@]}");; 2p5d) flags=("${D25[@]}");; 3d) flags=("${D3D[@]}");; esac
  if cmp -s <($L --parallel-config "$cfgs/colossal_$f.py" --num-microbatches 3 2>&1) \
            <($L "${flags[@]}" --pipeline-model-parallel-size 2 --num-microbatches 3 2>&1); then
    ok "colossal_$f.py prints the flags' layout"
  else fail "colossal_$f.py prints the flags' layout"; fi
done

# checkpoints: a 2-D run saves the golden file; it resumes at 1-D and 2.5-D
"$P" train --model gpt-tiny --steps 2 --quiet --save "$tmp/ck1" >/dev/null 2>&1
"$P" train --model gpt-tiny --steps 2 --quiet "${D3[@]}" --save "$tmp/ck2d" >/dev/null 2>&1
if [ -s "$tmp/ck1/model.safetensors" ] && cmp -s "$tmp/ck1/model.safetensors" "$tmp/ck2d/model.safetensors"; then
  ok "2d q 3 saves the golden checkpoint byte for byte"
else fail "2d q 3 saves the golden checkpoint byte for byte" "$(ls "$tmp/ck1" "$tmp/ck2d" 2>&1)"; fi
for to in "--tensor-model-parallel-size 2" "${D25[*]}" "${D3D[*]}"; do
  # shellcheck disable=SC2086
  out=$("$P" check --model gpt-tiny --load "$tmp/ck2d" --steps 1 $to 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "the 2d checkpoint resumes bit-exact at $to"
  else fail "the 2d checkpoint resumes at $to" "exit $rc" "$(echo "$out" | tail -3)"; fi
done

# broken variants: caught at the first wrong tensor, the device named
broken() { # variant, tensor, flags...
  local v=$1 want=$2; shift 2
  out=$("$P" check --model gpt-tiny --steps 1 "$@" --test-broken "$v" 2>&1); rc=$?
  if [ $rc = 1 ] && echo "$out" | grep -q "tensor *step0\.$want\$" && echo "$out" | grep -q "produced by device"; then
    ok "$v is caught at $want"
  else fail "$v is caught at $want" "exit $rc" "$(echo "$out" | grep -E 'tensor|produced' | head -3)"; fi
}
broken tp2d-layernorm-fp32 act.layers.0.input_layernorm.output "${D2[@]}"
broken tp2d-summa-rounded act.layers.0.self_attention.query_key_value.output "${D2[@]}"
broken tp2d-layernorm-fp32 act.layers.0.input_layernorm.output "${D25[@]}"
broken tp3d-no-group-swap act.layers.0.self_attention.dense.output "${D3D[@]}"
broken tp2d-cp-ring-group act.layers.0.self_attention.core_attention.output "${D2[@]}" --context-parallel-size 2

# bad layouts
refuse "2d on a non-square tp" "tensor-model-parallel-size: 8 for mode 2d: expected a square" -- \
  "$P" check --model gpt-tiny --tensor-model-parallel-size 8 --tensor-parallel-mode 2d --steps 1
refuse "2.5d without a depth" "tensor-parallel-depth: missing" -- \
  "$P" check --model gpt-tiny --tensor-model-parallel-size 8 --tensor-parallel-mode 2.5d --steps 1
refuse "a depth without 2.5d" "tensor-parallel-depth: only mode 2.5d" -- \
  "$P" check --model gpt-tiny --tensor-model-parallel-size 4 --tensor-parallel-mode 2d --tensor-parallel-depth 2 --steps 1
refuse "an unknown mode" "tensor-parallel-mode: expected 1d, 2d, 2.5d or 3d" -- \
  "$P" check --model gpt-tiny --tensor-model-parallel-size 4 --tensor-parallel-mode 4d --steps 1
refuse "2d with sequence parallelism" "2d is not combined with sequence-parallel" -- \
  "$P" check --model gpt-tiny --tensor-model-parallel-size 4 --tensor-parallel-mode 2d --sequence-parallel --steps 1
refuse "2d q 3 x Ulysses: uneven head blocks" "whole heads, but 8 heads do not split evenly over 3 tensor-parallel blocks" -- \
  "$P" check --model gpt-tiny --tensor-model-parallel-size 9 --tensor-parallel-mode 2d --context-parallel-size 2 --cp-comm-type a2a --steps 1
refuse "microbatches not in whole row blocks" "micro-batch-size: mode 2d cuts each microbatch's sequences into 3 blocks" -- \
  "$P" check --model gpt-tiny --tensor-model-parallel-size 9 --tensor-parallel-mode 2d --micro-batch-size 4 --steps 1
refuse "more columns than feature tiles" "8 tiles of 8 cannot give each of 16 columns" -- \
  "$P" check --model gpt-tiny --tensor-model-parallel-size 256 --tensor-parallel-mode 2d --global-batch-size 16 --steps 1
refuse "2d of llava" "2-D tensor parallelism of llava's patch embedding is not built" -- \
  "$P" check --model llava-tiny --tensor-model-parallel-size 4 --tensor-parallel-mode 2d --steps 1
refuse "2d with an encoder mesh of fewer tp ranks" "2d is not combined with an encoder mesh of fewer" -- \
  "$P" check --model t5-tiny --tensor-model-parallel-size 4 --tensor-parallel-mode 2d --encoder-tensor-model-parallel-size 1 \
  --encoder-pipeline-model-parallel-size 1 --pipeline-model-parallel-size 1 --steps 1
refuse "2d of an MoE model" "2-D tensor parallelism runs the GPT" -- \
  "$P" check --model gpt-tiny --num-experts 4 --tensor-model-parallel-size 4 --tensor-parallel-mode 2d --steps 1

echo "RESULT test_tp2d.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
