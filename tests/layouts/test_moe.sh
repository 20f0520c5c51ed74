#!/usr/bin/env bash
# test_moe.sh - mixture-of-experts layers (issue 26, ref/model/units/moe.c):
#  - the golden run routes, drops over capacity and prints per-expert
#    statistics every step;
#  - data, ZeRO, accumulation, tensor (+SP), context (ring, Ulysses),
#    expert (ep ranks out of dp holding their experts only, all-to-all of
#    the experts' rows; dense and expert gradients in two groups) and
#    pipeline layouts are bit-exact with it
#    over 3 steps (routing, drops, dropout, aux and z losses active; E 4
#    and 8, top-1 and top-2, both drop policies, pre-softmax, every other
#    layer MoE) - the checker compares the routing checkpoints (choice,
#    weight, kept) with memcmp like every other tensor;
#  - router ties and capacity overflow forced (a checkpoint whose router
#    weights are zero: every score ties) make the same choices on every
#    layout, and the tie-order bug is caught there;
#  - expert tensor parallelism (etp = tp, Megatron's default: each
#    expert's FFN split over tp; etp 1: whole; etp a divisor of tp),
#    Megatron-core's MoE parallel folding (ep onto the tp ranks, etp 1;
#    onto cp; over tp x dp and cp x dp), and the expert grid of
#    --print-layout;
#  - bf16 and fp16 (MOE.md "Mixed precision"): the router in the model's
#    dtype or fp32 (--moe-router-dtype), over dp/ZeRO, ep, tp + SP with
#    etp 1 and 2, ep folded onto tp, pp, cp and selective recomputation;
#    fp16's loss scale covers the aux and z losses;
#  - a checkpoint saved by the golden run resumes bit-exact at dp 2, and
#    one saved at tp 2 etp 2 ep 2 is the golden one and resumes at ep 4;
#  - what cannot work is refused naming the flag.
# Needs $PARITY (default build/parity). Ends with "RESULT test_moe.sh: N passed, M failed".
set -u
P=${PARITY:-build/parity}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
. tests/refuse.sh parity-moe

MOE="--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001 --moe-expert-capacity-factor 1.0"

exact() { # name, model, flags...: `parity check` exits 0 and says yes
  local name=$1 model=$2; shift 2
  out=$("$P" check --model "$model" --steps 3 "$@" 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then
    ok "$name: bit-exact over 3 steps"
  else fail "$name" "exit $rc" "$(echo "$out" | tail -4)"; fi
}

# ---- the golden run: routing statistics, drops -------------------------------
# shellcheck disable=SC2086
out=$("$P" train --model gpt-micro --steps 3 $MOE 2>&1); rc=$?
lines=$(echo "$out" | grep -c '^  moe layer [01] | routed')
dropped=$(echo "$out" | sed -nE 's/^  moe layer [0-9]+ \| routed [0-9 ]+\| dropped ([0-9 ]+)$/\1/p' | tr ' ' '\n' | awk '{s += $1} END {print s + 0}')
if [ $rc = 0 ] && [ "$lines" = 6 ] && [ "$dropped" -gt 0 ] && echo "$out" | grep -q '^  moe aux loss'; then
  ok "golden: per-expert routed/dropped lines for 2 layers x 3 steps, $dropped drops over capacity"
else fail "golden run prints routing statistics" "exit $rc, $lines lines, $dropped dropped" "$(echo "$out" | tail -5)"; fi
# every token is routed k times: 2 x 64 tokens a step in each layer
routed=$(echo "$out" | sed -nE 's/^  moe layer 0 \| routed ([0-9 ]+) \|.*/\1/p' | head -1 | tr ' ' '\n' | awk '{s += $1} END {print s + 0}')
if [ "$routed" = 128 ]; then ok "layer 0 routes 64 tokens x top-2 = 128 claims"; else fail "routed claims" "got $routed, expected 128"; fi

# ---- layouts ---------------------------------------------------------------
# shellcheck disable=SC2086
{
exact "dp 2 ZeRO-1" gpt-micro $MOE --data-parallel-size 2 --zero-stage 1
exact "dp 2 ZeRO-3" gpt-micro $MOE --data-parallel-size 2 --zero-stage 3
exact "dp 2 ZeRO-2, accumulation 2" gpt-micro $MOE --data-parallel-size 2 --zero-stage 2 --accum-degree 2
exact "pp 2 1F1B" gpt-micro $MOE --pipeline-model-parallel-size 2
exact "pp 2 GPipe x dp 2 ZeRO-1" gpt-micro $MOE --pipeline-model-parallel-size 2 --pipeline-schedule gpipe --data-parallel-size 2 --zero-stage 1
exact "E 8 top-1, position drops, dp 4 ZeRO-3" gpt-micro --num-experts 8 --moe-router-topk 1 --moe-expert-capacity-factor 1.0 --moe-token-drop-policy position --moe-aux-loss-coeff 0.01 --data-parallel-size 4 --zero-stage 3
exact "pre-softmax top-2, dropless, dp 2" gpt-micro --num-experts 4 --moe-router-pre-softmax --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001 --data-parallel-size 2
exact "tp 2 (etp 2 by default: each expert's FFN split over tp)" gpt-micro $MOE --tensor-model-parallel-size 2
exact "tp 2, etp 1 (whole experts on each tp rank)" gpt-micro $MOE --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1
exact "gpt-tiny: tp 3 etp 3 (FFN tiles split 96/96/64)" gpt-tiny $MOE --tensor-model-parallel-size 3
exact "gpt-tiny: tp 4 etp 4 x ep 2 ZeRO-3" gpt-tiny $MOE --tensor-model-parallel-size 4 --data-parallel-size 2 --expert-model-parallel-size 2 --zero-stage 3
exact "gpt-tiny: tp 2 etp 2 x cp 2 Ulysses" gpt-tiny $MOE --tensor-model-parallel-size 2 --context-parallel-size 2 --cp-comm-type a2a
exact "tp 2 etp 2 x ep 2 x pp 2 (1F1B)" gpt-micro $MOE --tensor-model-parallel-size 2 --data-parallel-size 2 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2
exact "tp 2 etp 2 x dp 2 ZeRO-1, accumulation 2" gpt-micro $MOE --tensor-model-parallel-size 2 --data-parallel-size 2 --zero-stage 1 --accum-degree 2
exact "tp 2 + SP x dp 2 ZeRO-3" gpt-micro $MOE --tensor-model-parallel-size 2 --sequence-parallel --data-parallel-size 2 --zero-stage 3
exact "tp 2 + SP x pp 2, top-1 position drops" gpt-micro --num-experts 4 --moe-router-topk 1 --moe-expert-capacity-factor 1.0 --moe-token-drop-policy position --tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2
exact "cp 2 ring (whole sequences gathered; tiles of the weight gradients split over cp)" gpt-micro $MOE --context-parallel-size 2
exact "cp 2 Ulysses x dp 2 ZeRO-1" gpt-micro $MOE --context-parallel-size 2 --cp-comm-type a2a --data-parallel-size 2 --zero-stage 1
exact "cp 2 x tp 2 + SP" gpt-micro $MOE --context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel
exact "cp 2 x pp 2, pre-softmax top-1" gpt-micro --num-experts 4 --moe-router-topk 1 --moe-router-pre-softmax --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff 0.01 --context-parallel-size 2 --pipeline-model-parallel-size 2
# expert parallelism: ep ranks out of the dp ranks, the experts' rows by all-to-all-v
exact "ep 2 of dp 2" gpt-micro $MOE --data-parallel-size 2 --expert-model-parallel-size 2
exact "ep 4 of dp 4, E 8 top-1, ZeRO-3" gpt-micro --num-experts 8 --moe-router-topk 1 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff 0.01 --data-parallel-size 4 --expert-model-parallel-size 4 --zero-stage 3
exact "ep 2 of dp 4 ZeRO-1, position drops" gpt-micro $MOE --moe-token-drop-policy position --data-parallel-size 4 --expert-model-parallel-size 2 --zero-stage 1
exact "ep 2 x tp 2 + SP" gpt-micro $MOE --data-parallel-size 2 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel
exact "ep 2 x pp 2 (1F1B)" gpt-micro $MOE --data-parallel-size 2 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2
exact "ep 2 x cp 2" gpt-micro $MOE --data-parallel-size 2 --expert-model-parallel-size 2 --context-parallel-size 2
exact "ep 2 x cp 2 x ZeRO-3" gpt-micro $MOE --data-parallel-size 2 --expert-model-parallel-size 2 --context-parallel-size 2 --zero-stage 3
exact "ep 2 x pp 2 x ZeRO-3" gpt-micro $MOE --data-parallel-size 2 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 3
exact "ep 2 of dp 4, ZeRO-1, overlapped reduce and gather" gpt-micro $MOE --data-parallel-size 4 --expert-model-parallel-size 2 --zero-stage 1 --overlap-grad-reduce --overlap-param-gather
exact "ep 2 of dp 4, ZeRO-3, tiny buckets, overlapped reduce" gpt-micro $MOE --data-parallel-size 4 --expert-model-parallel-size 2 --zero-stage 3 --bucket-cap-mb 0.001 --overlap-grad-reduce
exact "gpt-tiny: ep 8 of dp 8, E 8" gpt-tiny --num-experts 8 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff 0.01 --data-parallel-size 8 --expert-model-parallel-size 8
exact "gpt-tiny: every other layer MoE, E 8, pp 2 interleaved x dp 2" gpt-tiny --num-experts 8 --moe-layer-freq 2 --moe-expert-capacity-factor 1.25 --moe-aux-loss-coeff 0.01 --pipeline-model-parallel-size 2 --pipeline-schedule interleaved --virtual-pipeline-model-parallel-size 2 --num-microbatches 2 --data-parallel-size 2
}

# ---- ties and overflow forced: every router score equal ----------------------
# A golden checkpoint whose router weights are set to zero (its digest
# recomputed as ckpt.c does): every logit is 0, so top-2 is experts 0
# and 1 for every token (ties go to the lower index), each with weight
# 1/2, and their 16 claims a sequence overflow the capacity of 8 (ties
# in weight keep the earlier positions).
# shellcheck disable=SC2086
"$P" train --model gpt-micro --steps 1 --quiet $MOE --save "$tmp/ck" >/dev/null 2>&1
if python3 - "$tmp/ck/model.safetensors" <<'PY'
import hashlib, json, struct, sys
path = sys.argv[1]
b = bytearray(open(path, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
meta = h['__metadata__']
base = 8 + n
for k, v in h.items():
    if k != '__metadata__' and k.startswith('param.') and k.endswith('mlp.router.weight'):
        lo, hi = v['data_offsets']
        b[base + lo:base + hi] = bytes(hi - lo)
d = hashlib.sha256()
for key in ('format', 'config', 'step', 'adam_t', 'backend'):
    d.update(key.encode() + b'\0' + meta[key].encode() + b'\0')
d.update(bytes(b[base:]))
old = meta['sha256'].encode()
assert b[8:8 + n].count(old) == 1
b[8:8 + n] = b[8:8 + n].replace(old, d.hexdigest().encode())
open(path, 'wb').write(bytes(b))
PY
then ok "router weights zeroed in a golden checkpoint (digest recomputed)"
else fail "zero the router weights" "$(ls -la "$tmp/ck" 2>&1)"; fi
# shellcheck disable=SC2086
out=$("$P" train --model gpt-micro --load "$tmp/ck" --steps 1 $MOE 2>&1); rc=$?
l0=$(echo "$out" | grep '^  moe layer 0 |' | head -1)
if [ $rc = 0 ] && echo "$l0" | grep -qE '^  moe layer 0 \| routed 64 64 0 0 \| dropped 32 32 0 0$'; then
  ok "all scores tie: every token picks experts 0 and 1, half of each expert's claims dropped ($l0)"
else fail "ties route to the lower experts" "exit $rc" "$l0" "$(echo "$out" | tail -3)"; fi
# shellcheck disable=SC2086
for lay in "--data-parallel-size 2" "--data-parallel-size 4 --zero-stage 3" "--pipeline-model-parallel-size 2"; do
  out=$("$P" check --model gpt-micro --load "$tmp/ck" --steps 2 $MOE $lay 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "ties and overflow: $lay makes the golden choices (routing compared with memcmp)"
  else fail "ties and overflow: $lay" "exit $rc" "$(echo "$out" | tail -3)"; fi
done
# shellcheck disable=SC2086
out=$("$P" check --model gpt-micro --load "$tmp/ck" --steps 1 $MOE --data-parallel-size 2 --test-broken moe-tie-order 2>&1); rc=$?
if [ $rc = 1 ] && echo "$out" | grep -qE 'tensor +step[0-9]+\.(act|mask)\.layers\.0\.mlp\.router\.(choice|kept|weight)'; then
  ok "ties: the tie-order bug is caught at layer 0's routing"
else fail "ties: the tie-order bug is caught" "exit $rc" "$(echo "$out" | grep -A1 'FIRST' | tail -2)"; fi

# ---- checkpoints: the golden run's resumes at dp 2 ---------------------------
# shellcheck disable=SC2086
"$P" train --model gpt-micro --steps 2 --quiet $MOE --save "$tmp/ck2" >/dev/null 2>&1
# shellcheck disable=SC2086
"$P" train --model gpt-micro --steps 2 --quiet $MOE --data-parallel-size 2 --zero-stage 3 --save "$tmp/ck3" >/dev/null 2>&1
if [ -s "$tmp/ck2/model.safetensors" ] && cmp -s "$tmp/ck2/model.safetensors" "$tmp/ck3/model.safetensors"; then
  ok "dp 2 ZeRO-3 saves the golden checkpoint byte for byte"
else fail "dp 2 ZeRO-3 saves the golden checkpoint" "$(ls "$tmp/ck2" "$tmp/ck3" 2>&1)"; fi
# shellcheck disable=SC2086
"$P" train --model gpt-micro --steps 2 --quiet $MOE --tensor-model-parallel-size 2 --data-parallel-size 2 --expert-model-parallel-size 2 --save "$tmp/ck4" >/dev/null 2>&1
if [ -s "$tmp/ck4/model.safetensors" ] && cmp -s "$tmp/ck2/model.safetensors" "$tmp/ck4/model.safetensors"; then
  ok "tp 2 etp 2 x ep 2 saves the golden checkpoint byte for byte (experts gathered whole)"
else fail "tp 2 etp 2 x ep 2 saves the golden checkpoint" "$(ls "$tmp/ck2" "$tmp/ck4" 2>&1)"; fi
# shellcheck disable=SC2086
out=$("$P" check --model gpt-micro --load "$tmp/ck2" --steps 2 $MOE --data-parallel-size 2 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "the golden checkpoint resumes bit-exact at dp 2"
else fail "resume at dp 2" "exit $rc" "$(echo "$out" | tail -3)"; fi
# shellcheck disable=SC2086
out=$("$P" check --model gpt-micro --load "$tmp/ck4" --steps 2 $MOE --data-parallel-size 4 --expert-model-parallel-size 4 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "saved at tp 2 etp 2 ep 2, resumed bit-exact at ep 4 of dp 4"
else fail "resume at ep 4" "exit $rc" "$(echo "$out" | tail -3)"; fi

# ---- mixed precision (MOE.md "Mixed precision") ------------------------------
# The experts round as the dense MLP; the router in the model's dtype
# (Megatron-core's default) or in fp32 (--moe-router-dtype fp32); fp16's
# dynamic scale overflows on step 0 (skipped, halved) and covers the aux
# and z losses' gradients. Each layout in the three precisions, 3 steps,
# dropout, drops, aux and z losses on.
F16="--fp16 --initial-loss-scale 2097152 --hysteresis 1 --loss-scale-window 2"
# shellcheck disable=SC2086
while IFS='|' read -r name lay; do
  exact "bf16 (router bf16): $name" gpt-micro $MOE --bf16 $lay
  exact "bf16, --moe-router-dtype fp32: $name" gpt-micro $MOE --bf16 --moe-router-dtype fp32 $lay
  exact "fp16 dynamic scale, step 0 skipped: $name" gpt-micro $MOE $F16 $lay
done <<'LAYOUTS'
dp 2 ZeRO-1|--data-parallel-size 2 --zero-stage 1
dp 2 ZeRO-3|--data-parallel-size 2 --zero-stage 3
ep 2 of dp 2|--data-parallel-size 2 --expert-model-parallel-size 2
tp 2 + SP, etp 1|--tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 1
tp 2 + SP, etp 2|--tensor-model-parallel-size 2 --sequence-parallel
ep 2 folded onto tp 2 (etp 1)|--tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 --expert-model-parallel-size 2
pp 2 1F1B|--pipeline-model-parallel-size 2
cp 2 ring|--context-parallel-size 2
recompute selective, dp 2|--recompute-granularity selective --data-parallel-size 2
LAYOUTS
# shellcheck disable=SC2086
{
exact "bf16, pre-softmax top-1 (top-k on bf16 scores), ep 2 x tp 2 + SP" gpt-micro --num-experts 4 --moe-router-topk 1 --moe-router-pre-softmax --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff 0.01 --bf16 --data-parallel-size 2 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel
exact "fp16 static 1024, router fp32, cp 2 Ulysses x dp 2" gpt-micro $MOE --fp16 --loss-scale 1024 --moe-router-dtype fp32 --context-parallel-size 2 --cp-comm-type a2a --data-parallel-size 2
}
# the precisions and the router's dtype are used: step 1's loss differs
mloss() { "$P" train --model gpt-micro --steps 2 $MOE "$@" 2>&1 | grep '^step     1' | grep -oE '\(0x[0-9a-f]+\)'; }
# shellcheck disable=SC2086
l32=$(mloss); lb=$(mloss --bf16); lbf=$(mloss --bf16 --moe-router-dtype fp32); lh=$(mloss --fp16 --loss-scale 1024)
if [ -n "$l32" ] && [ -n "$lb" ] && [ -n "$lbf" ] && [ -n "$lh" ] && [ "$l32" != "$lb" ] && [ "$lb" != "$lbf" ] && [ "$l32" != "$lbf" ] && [ "$l32" != "$lh" ]; then
  ok "MoE step 1's loss: fp32 $l32, bf16 $lb, bf16 with an fp32 router $lbf, fp16 $lh"
else fail "the precision and the router dtype change the MoE bits" "fp32 $l32 bf16 $lb bf16+fp32 router $lbf fp16 $lh"; fi
# fp16: the loss scale multiplies the aux and z losses' gradients as the
# LM loss's (Megatron's MoEAuxLossAutoScaler.set_loss_scale), so two
# power-of-two scales give the same steps; were the aux gradient left
# unscaled, unscaling would shrink it by the scale (measured: grad norm
# 1.2587 at 1024 against 1.2588 at 16384, 1.3331 scaled)
AUX="--num-experts 4 --moe-aux-loss-coeff 1.0 --moe-z-loss-coeff 0.1 --moe-expert-capacity-factor 1.0"
steps16() { "$P" train --model gpt-micro --steps 3 $AUX --fp16 --loss-scale "$1" 2>&1 | grep '^step' | grep -oE 'loss [0-9.]+ \(0x[0-9a-f]+\)|grad norm [0-9.]+' | tr '\n' ' '; }
# shellcheck disable=SC2086
s1=$(steps16 1024); s2=$(steps16 16384)
if [ -n "$s1" ] && [ "$s1" = "$s2" ]; then ok "fp16: loss scales 1024 and 16384 give the same 3 steps (the aux and z gradients scaled): $s1"
else fail "fp16 scales the aux and z losses' gradients" "1024: $s1" "16384: $s2"; fi
refuse "an fp64 router" "moe-router-dtype fp64: not built .* expected fp32" -- "$P" check --model gpt-micro --num-experts 4 --bf16 --moe-router-dtype fp64 --steps 1
refuse "an unknown router dtype" "moe-router-dtype 'bf16': expected fp32" -- "$P" check --model gpt-micro --num-experts 4 --bf16 --moe-router-dtype bf16 --steps 1
refuse "an fp32 router in an fp32 model" "router_dtype .--moe-router-dtype. fp32: the model is fp32 already" -- "$P" check --model gpt-micro --num-experts 4 --moe-router-dtype fp32 --steps 1
refuse "a router dtype without experts" "moe-router-dtype: model gpt-micro has no experts" -- "$P" check --model gpt-micro --bf16 --moe-router-dtype fp32 --steps 1
echo '{"base": "gpt-micro", "moe": {"experts": 4, "router_dtype": "fp64"}, "precision": {"dtype": "bf16"}}' > "$tmp/bad3.json"
refuse "JSON router_dtype" "field 'moe.router_dtype': expected \"fp32\"" -- "$P" train --model "$tmp/bad3.json" --steps 1
# a bf16 checkpoint with an fp32 router resumes at ep 2; the router's dtype is the model's
# shellcheck disable=SC2086
"$P" train --model gpt-micro --steps 2 --quiet $MOE --bf16 --moe-router-dtype fp32 --save "$tmp/ckr" >/dev/null 2>&1
exact "bf16, router fp32: its checkpoint resumed at ep 2 of dp 2" gpt-micro $MOE --bf16 --moe-router-dtype fp32 --load "$tmp/ckr" --data-parallel-size 2 --expert-model-parallel-size 2
refuse "a router-fp32 checkpoint loaded with the router in bf16" "field 'moe.router_dtype' is \"fp32\" in the checkpoint, absent .the model's dtype" -- "$P" train --model gpt-micro --steps 1 $MOE --bf16 --load "$tmp/ckr"
"$P" train --model gpt-micro --num-experts 4 --bf16 --moe-router-dtype fp32 --print-config > "$tmp/rd.json" 2>&1
back=$("$P" train --model "$tmp/rd.json" --print-config 2>&1)
if grep -q '"router_dtype": "fp32"' "$tmp/rd.json" && [ "$back" = "$(cat "$tmp/rd.json")" ]; then
  ok "--print-config carries the router's dtype and reads back the same"
else fail "router dtype config round trip" "$(cat "$tmp/rd.json")" "$back"; fi

# ---- refusals ----------------------------------------------------------------
refuse "ep must divide the experts" "expert-model-parallel-size: 4 must divide the 6 experts" -- "$P" check --model gpt-micro --num-experts 6 --data-parallel-size 4 --expert-model-parallel-size 4 --steps 1
refuse "ep must tile a stage's ranks over etp (Megatron-core's rule)" "expert-model-parallel-size: 3 does not divide the 2 ranks of a pipeline stage over expert-tensor-parallel-size 1 .*no expert grid etp x ep x edp tiles them" -- "$P" check --model gpt-micro --num-experts 6 --data-parallel-size 2 --expert-model-parallel-size 3 --steps 1
refuse "ep without MoE layers" "expert-model-parallel-size: 2 needs mixture-of-experts layers" -- "$P" check --model gpt-micro --data-parallel-size 2 --expert-model-parallel-size 2 --steps 1
exact "ep 2 of dp 2, ZeRO-1" gpt-micro $MOE --data-parallel-size 2 --expert-model-parallel-size 2 --zero-stage 1
exact "ep 2 of dp 2, ZeRO-3" gpt-micro $MOE --data-parallel-size 2 --expert-model-parallel-size 2 --zero-stage 3
# the routing statistics are dumped ([L, E] int64), a layout's summed
"$P" train --model gpt-micro --steps 1 --quiet $MOE --data-parallel-size 2 --expert-model-parallel-size 2 --dump "$tmp/stats.safetensors" >/dev/null 2>&1
if python3 - "$tmp/stats.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
def get(name):
    lo, hi = h[name]['data_offsets']
    assert h[name]['dtype'] == 'I64' and h[name]['shape'] == [2, 4], h[name]
    return struct.unpack('<8q', b[8 + n + lo:8 + n + hi])
routed, dropped = get('step0.moe.routed'), get('step0.moe.dropped')
# 4 sequences x 16 tokens x top-2 = 128 claims a layer, over both ep ranks
assert sum(routed[:4]) == 128 and sum(routed[4:]) == 128, routed
assert 0 < sum(dropped) < 256, dropped
assert 'step0.moe.aux_loss' in h and 'step0.moe.z_loss' in h
PY
then ok "the dump holds the step's routing statistics, summed over the ep ranks (128 claims a layer)"
else fail "routing statistics in the dump" "$(ls -la "$tmp/stats.safetensors" 2>&1)"; fi
# each ep rank holds its experts only: measured parameter memory per device
p1=$("$P" train --model gpt-micro --steps 1 --num-experts 8 --data-parallel-size 4 2>&1 | awk '$1 == "0" && NF >= 5 {print $2; exit}')
p4=$("$P" train --model gpt-micro --steps 1 --num-experts 8 --data-parallel-size 4 --expert-model-parallel-size 4 2>&1 | awk '$1 == "0" && NF >= 5 {print $2; exit}')
if [ -n "$p1" ] && [ -n "$p4" ] && awk -v a="$p1" -v b="$p4" 'BEGIN {exit !(b < a / 2)}'; then
  ok "ep 4 holds a quarter of the experts: parameters $p4 MB a device against $p1 MB at ep 1"
else fail "expert parameters sharded over ep" "ep 1: '$p1' MB, ep 4: '$p4' MB"; fi
# routing statistics of a layout run: summed over its devices, each
# sequence once, the golden run's lines
golden_stats=$("$P" train --model gpt-micro --steps 2 --num-experts 4 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff 0.01 2>&1 | grep '^  moe ')
layout_stats=$("$P" train --model gpt-micro --steps 2 --num-experts 4 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff 0.01 --data-parallel-size 2 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --context-parallel-size 2 --accum-degree 2 2>&1 | grep '^  moe ')
if [ -n "$golden_stats" ] && [ "$golden_stats" = "$layout_stats" ]; then
  ok "tp 2 cp 2 ep 2 accumulation 2 prints the golden run's routing statistics ($(echo "$layout_stats" | wc -l) lines)"
else fail "layout routing statistics" "golden: $golden_stats" "layout: $layout_stats"; fi
# the ep report: all-to-all bytes against the formula
out=$("$P" train --model gpt-micro --steps 2 --num-experts 4 --data-parallel-size 4 --expert-model-parallel-size 2 2>&1)
ratio=$(echo "$out" | sed -nE 's/.*all-to-all of expert rows.*: ([0-9.]+)x$/\1/p')
if [ -n "$ratio" ] && awk -v r="$ratio" 'BEGIN {exit !(r >= 0.5 && r <= 2.0)}'; then
  ok "ep report: all-to-all bytes ${ratio}x the balanced formula (padding and imbalance within 2x)"
else fail "ep report" "ratio '$ratio'" "$(echo "$out" | grep -A2 'expert parallelism')"; fi
if echo "$out" | grep -qE '^  layer 1 +routed +[0-9]+ +busiest expert [0-9.]+x the mean, busiest ep rank [0-9.]+x, dropped [0-9]+'; then
  ok "ep report: load per expert and per ep rank, drops ($(echo "$out" | grep '^  layer 1 ' | tr -s ' '))"
else fail "ep report load lines" "$(echo "$out" | tail -4)"; fi
refuse "etp must divide tp" "expert-tensor-parallel-size: 3: expected 1 .* or a divisor of tensor-model-parallel-size 4" -- "$P" check --model gpt-tiny --num-experts 4 --tensor-model-parallel-size 4 --expert-tensor-parallel-size 3 --steps 1
# etp a proper divisor of tp (the expert grid's etp fastest): tp rank t
# holds FFN piece t mod etp, its etp group completes the expert's sums
exact "gpt-tiny: etp 2 at tp 4 (FFN halves; tp ranks t and t+2 hold copies)" gpt-tiny $MOE --tensor-model-parallel-size 4 --expert-tensor-parallel-size 2 --global-batch-size 4
exact "gpt-tiny: etp 2 at tp 4 + SP x ep 2 of dp 2, ZeRO-1" gpt-tiny $MOE --tensor-model-parallel-size 4 --sequence-parallel --expert-tensor-parallel-size 2 --data-parallel-size 2 --expert-model-parallel-size 2 --global-batch-size 4 --zero-stage 1
exact "gpt-tiny: etp 3 at tp 6 (FFN tiles 3/3/2, uneven)" gpt-tiny $MOE --tensor-model-parallel-size 6 --expert-tensor-parallel-size 3 --global-batch-size 2
refuse "etp > 1 without tp" "expert-tensor-parallel-size: 2: expected 1" -- "$P" check --model gpt-micro --num-experts 4 --data-parallel-size 2 --expert-tensor-parallel-size 2 --steps 1
refuse "etp > 1 with every linear row-parallel" "expert-tensor-parallel-size: 2 with every linear row-parallel" -- "$P" check --model gpt-micro --num-experts 4 --tensor-model-parallel-size 2 --tensor-parallel-row-linears --expert-tensor-parallel-size 2 --steps 1
exact "etp 1 x tp 2 x ep 2 of dp 4 (ep out of dp, experts whole on each tp rank)" gpt-micro $MOE --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 --data-parallel-size 4 --expert-model-parallel-size 2
# Megatron's parallel folding with etp 1 and ep = tp: the ep ranks are the tp ranks
exact "ep 2 folded onto tp 2 (etp 1, dp 1)" gpt-micro $MOE --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 --expert-model-parallel-size 2
exact "ep 2 folded onto tp 2 + SP x dp 2 ZeRO-3" gpt-micro $MOE --tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 1 --expert-model-parallel-size 2 --data-parallel-size 2 --zero-stage 3
exact "ep 2 folded onto tp 2 x pp 2 (1F1B)" gpt-micro $MOE --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2
exact "gpt-tiny: ep 3 folded onto tp 3, E 6 (uneven FFN tiles do not matter: experts whole)" gpt-tiny --num-experts 6 --moe-expert-capacity-factor 1.0 --tensor-model-parallel-size 3 --expert-tensor-parallel-size 1 --expert-model-parallel-size 3
exact "gpt-tiny: every other layer MoE, pp 2 interleaved x ep 2 of dp 2 ZeRO-3 (units of two gradient groups)" gpt-tiny --num-experts 8 --moe-layer-freq 2 --moe-expert-capacity-factor 1.25 --moe-aux-loss-coeff 0.01 --pipeline-model-parallel-size 2 --pipeline-schedule interleaved --virtual-pipeline-model-parallel-size 2 --num-microbatches 2 --data-parallel-size 2 --expert-model-parallel-size 2 --zero-stage 3
exact "gpt-tiny: ep 4 folded onto tp 4 x cp 2, E 8" gpt-tiny --num-experts 8 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff 0.01 --tensor-model-parallel-size 4 --expert-tensor-parallel-size 1 --expert-model-parallel-size 4 --context-parallel-size 2
# Megatron-core's MoE parallel folding beyond ep = tp: the expert rank is
# fold rank + fold size x ep-axis rank (the fold fastest, Megatron's
# "tp-ep-dp-pp" order for experts)
exact "ep 2 folded onto cp 2 (dp 1; expert grads over dp only)" gpt-micro $MOE --context-parallel-size 2 --expert-model-parallel-size 2
exact "ep 4 over cp 2 x dp 2 ZeRO-1" gpt-micro $MOE --context-parallel-size 2 --data-parallel-size 2 --expert-model-parallel-size 4 --zero-stage 1
exact "ep 2 folded onto cp 2 x tp 2 etp 2 (FFN over tp, experts over cp)" gpt-micro $MOE --tensor-model-parallel-size 2 --context-parallel-size 2 --expert-model-parallel-size 2
exact "ep 4 over tp 2 x dp 2, etp 1 (all-to-all over dp, then the tp fold's gather)" gpt-micro $MOE --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 --data-parallel-size 2 --expert-model-parallel-size 4
exact "ep 4 over tp 2 + SP x dp 2, etp 1, ZeRO-3" gpt-micro $MOE --tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 1 --data-parallel-size 2 --expert-model-parallel-size 4 --zero-stage 3
exact "ep 2 x etp 2 at tp 2 x dp 2" gpt-micro $MOE --tensor-model-parallel-size 2 --expert-tensor-parallel-size 2 --data-parallel-size 2 --expert-model-parallel-size 2
exact "gpt-tiny: ep 8 over tp 2 x dp 4, E 8 top-1, pp 2" gpt-tiny --num-experts 8 --moe-router-topk 1 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff 0.01 --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 --data-parallel-size 4 --expert-model-parallel-size 8 --pipeline-model-parallel-size 2
out=$("$P" check --model gpt-micro --steps 1 --num-experts 4 --context-parallel-size 2 --data-parallel-size 2 --expert-model-parallel-size 4 --print-layout 2>&1)
grid=$(echo "$out" | python3 -c 'import json, sys; d = json.load(sys.stdin)["experts"]; print(d["expert_grads_reduced_over"], " ".join("%d:%d+%d" % (x["rank"], x["expert0"], x["experts"]) for x in d["devices"]))' 2>&1)
if [ "$grid" = "dp 0:0+1 1:1+1 2:2+1 3:3+1" ]; then ok "folded onto cp x dp: --print-layout gives expert rank cp + 2 dp ($grid)"
else fail "--print-layout cp-folded expert grid" "$grid"; fi
out=$("$P" train --model gpt-micro --steps 2 --num-experts 4 --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 --data-parallel-size 4 --expert-model-parallel-size 4 2>&1)
ratio=$(echo "$out" | sed -nE 's/.*all-to-all of expert rows.*: ([0-9.]+)x$/\1/p')
if [ -n "$ratio" ] && awk -v r="$ratio" 'BEGIN {exit !(r >= 0.5 && r <= 2.0)}'; then
  ok "ep report over tp x dp: all-to-all bytes ${ratio}x the folded formula ((ep_dp-1)/ep)"
else fail "ep report over tp x dp" "ratio '$ratio'" "$(echo "$out" | grep -A2 'expert parallelism')"; fi
exact "gpt-tiny: ep 2 folded onto runs of 2 of tp 4 (etp 1; expert rank t mod 2)" gpt-tiny $MOE --tensor-model-parallel-size 4 --expert-tensor-parallel-size 1 --expert-model-parallel-size 2 --global-batch-size 4
out=$("$P" check --model gpt-tiny --steps 1 --num-experts 4 --tensor-model-parallel-size 4 --expert-tensor-parallel-size 1 --expert-model-parallel-size 2 --global-batch-size 4 --print-layout 2>&1)
grid=$(echo "$out" | python3 -c 'import json, sys; d = json.load(sys.stdin)["experts"]; print(" ".join("%d:%d+%d" % (x["rank"], x["expert0"], x["experts"]) for x in d["devices"]))' 2>&1)
if [ "$grid" = "0:0+2 1:2+2 2:0+2 3:2+2" ]; then ok "folded onto runs of tp ranks: --print-layout gives expert rank t mod ep ($grid)"
else fail "--print-layout partial tp fold" "$grid"; fi
refuse "ep over tp x cp (not built)" "expert-model-parallel-size: 4 must divide data-parallel-size 1 .*the folded grid" -- "$P" check --model gpt-micro --num-experts 4 --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 --context-parallel-size 2 --expert-model-parallel-size 4 --steps 1
out=$("$P" check --model gpt-micro --steps 1 --num-experts 4 --tensor-model-parallel-size 2 --expert-tensor-parallel-size 1 --expert-model-parallel-size 2 --print-layout 2>&1)
grid=$(echo "$out" | python3 -c 'import json, sys; d = json.load(sys.stdin)["experts"]; print(" ".join("%d:%d+%d" % (x["rank"], x["expert0"], x["experts"]) for x in d["devices"]))' 2>&1)
if [ "$grid" = "0:0+2 1:2+2" ]; then ok "folded onto tp: --print-layout gives each tp rank half the experts ($grid)"
else fail "--print-layout folded expert grid" "$grid"; fi
# the expert grid: experts by ep rank, FFN columns by tp rank
out=$("$P" check --model gpt-micro --steps 1 --num-experts 4 --tensor-model-parallel-size 2 --data-parallel-size 2 --expert-model-parallel-size 2 --print-layout 2>&1)
grid=$(echo "$out" | python3 -c 'import json, sys; d = json.load(sys.stdin)["experts"]; print(" ".join("%d:%d+%d/%d+%d" % (x["rank"], x["expert0"], x["experts"], x["ffn0"], x["ffn"]) for x in d["devices"]))' 2>&1)
if [ "$grid" = "0:0+2/0+32 1:0+2/32+32 2:2+2/0+32 3:2+2/32+32" ]; then ok "--print-layout shows the expert grid ($grid)"
else fail "--print-layout expert grid" "$grid"; fi
# acceptance: an MoE model trains with falling loss (gpt-micro, 100 steps)
out=$("$P" train --model gpt-micro --steps 100 --quiet --num-experts 4 --moe-expert-capacity-factor 1.25 --moe-aux-loss-coeff 0.01 2>&1)
first=$(echo "$out" | sed -nE 's/^summary:.*loss ([0-9.]+) -> ([0-9.]+) .*/\1/p')
last=$(echo "$out" | sed -nE 's/^summary:.*loss ([0-9.]+) -> ([0-9.]+) .*/\2/p')
if [ -n "$first" ] && awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < a - 1.0)}'; then
  ok "gpt-micro MoE trains 100 steps: loss $first -> $last"
else fail "MoE training lowers the loss" "$(echo "$out" | tail -2)"; fi
refuse "top-k 0" "moe.topk \(--moe-router-topk\) = 0: expected 1 to the 4 experts" -- "$P" check --model gpt-micro --num-experts 4 --moe-router-topk 0 --steps 1
refuse "more experts than the limit" "moe.experts \(--num-experts\) = 300: expected 0 \(dense\) to 256" -- "$P" check --model gpt-micro --num-experts 300 --steps 1
refuse "top-k above the expert count" "moe.topk \(--moe-router-topk\) = 5: expected 1 to the 4 experts" -- "$P" train --model gpt-micro --num-experts 4 --moe-router-topk 5 --steps 1
refuse "a negative expert count" "moe.experts \(--num-experts\) = -1" -- "$P" train --model gpt-micro --num-experts -1 --steps 1
refuse "an unknown drop policy" "moe-token-drop-policy 'tokens': expected probs or position" -- "$P" train --model gpt-micro --num-experts 4 --moe-token-drop-policy tokens --steps 1
refuse "a negative capacity factor" "capacity_factor \(--moe-expert-capacity-factor\) = -1" -- "$P" train --model gpt-micro --num-experts 4 --moe-expert-capacity-factor -1 --steps 1
refuse "--moe-layer-freq 0" "layer_freq \(--moe-layer-freq\) = 0" -- "$P" train --model gpt-micro --num-experts 4 --moe-layer-freq 0 --steps 1
echo '{"base": "gpt-micro", "moe": {"experts": 4, "drop_policy": "random"}}' > "$tmp/bad.json"
refuse "JSON drop_policy" "field 'moe.drop_policy': expected \"probs\" or \"position\"" -- "$P" train --model "$tmp/bad.json" --steps 1
echo '{"base": "gpt-micro", "moe": {"experts": 4, "top_k": 2}}' > "$tmp/bad2.json"
refuse "JSON unknown moe key" "unknown field 'moe.top_k'" -- "$P" train --model "$tmp/bad2.json" --steps 1
# the config a dump or checkpoint stores carries the MoE settings and reads back
"$P" train --model gpt-micro --num-experts 8 --moe-router-topk 1 --moe-expert-capacity-factor 1.5 --moe-token-drop-policy position --print-config > "$tmp/moe.json" 2>&1
back=$("$P" train --model "$tmp/moe.json" --print-config 2>&1)
if grep -q '"moe": {"experts": 8, "topk": 1' "$tmp/moe.json" && [ "$back" = "$(cat "$tmp/moe.json")" ]; then
  ok "--print-config carries the MoE settings and reads back the same"
else fail "MoE config round trip" "$(cat "$tmp/moe.json")" "$back"; fi

echo "RESULT test_moe.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
