#!/usr/bin/env bash
# test_encdec.sh - encoder-decoder models (issue 27, MODEL.md "Encoder-decoder
# models", ref/model/units/unit_encdec.c, unit_llava.c):
#  - the golden t5-tiny and llava-tiny runs learn their tasks (the loss falls);
#  - data, ZeRO 1 and 3, accumulation, tensor (+SP, row-parallel linears,
#    tp 3 on a 6-head model) and pipeline layouts - the encoder on stages
#    of its own (--encoder-pipeline-model-parallel-size 1, 2) before the
#    decoder's (pp 1, 2), every schedule - are bit-exact with it over 3
#    steps with dropout (t5-tiny and llava-tiny), and each runs on Megatron-core's device count
#    dp*etp*epp*cp + dp*tp*pp*cp;
#  - context parallelism (ring and Ulysses) of t5-tiny and llava-tiny, with
#    tp (+SP), dp, encoder stages and an encoder mesh;
#  - heterogeneous meshes: an encoder mesh of etp < tp (1 < 2, 2 < 4, 1 < 3,
#    1 < 4) beside the decoder's, with and without SP, dp 2, ZeRO 1 and 3;
#  - a checkpoint saved on an encoder pipeline or mesh is the golden one and
#    resumes on other encoder degrees bit-exact;
#  - broken variants are caught at an encoder-decoder tensor;
#  - every Megatron-core rule on the encoder's degrees, and what is not
#    built, is refused naming the flag.
# Needs $PARITY (default build/parity). Ends with "RESULT test_encdec.sh: N passed, M failed".
set -u
P=${PARITY:-build/parity}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
. tests/refuse.sh parity-encdec

# exact NAME MODEL DP TP ETP EPP PP FLAGS...: bit-exact over 3 steps on
# dp*etp*epp + dp*tp*pp devices (cp 1; etp counts only with epp > 0)
exact() {
  local name=$1 model=$2 dp=$3 tp=$4 etp=$5 epp=$6 pp=$7; shift 7
  local flags=(--data-parallel-size "$dp" --tensor-model-parallel-size "$tp" --pipeline-model-parallel-size "$pp")
  [ "$epp" -gt 0 ] && flags+=(--encoder-pipeline-model-parallel-size "$epp" --encoder-tensor-model-parallel-size "$etp")
  local want=$((dp * etp * epp + dp * tp * pp))
  out=$("$P" check --model "$model" --steps 3 "${flags[@]}" "$@" 2>&1); rc=$?
  local devices; devices=$(echo "$out" | tail -1 | awk -F'|' '{gsub(/ /, "", $2); print $2}')
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$' && [ "$devices" = "$want" ]; then
    ok "$name: bit-exact over 3 steps on $devices devices (dp*etp*epp + dp*tp*pp)"
  else fail "$name" "exit $rc, $devices devices (expected $want)" "$(echo "$out" | tail -4)"; fi
}

# learns MODEL WHAT: the golden run's loss falls by 0.5 in 12 steps
learns() {
  out=$("$P" train --model "$1" --steps 12 2>&1); rc=$?
  first=$(echo "$out" | sed -nE 's/^step +0 \| loss ([0-9.]+).*/\1/p')
  last=$(echo "$out" | sed -nE 's/^step +11 \| loss ([0-9.]+).*/\1/p')
  if [ $rc = 0 ] && awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < a - 0.5)}'; then
    ok "golden $1 learns $2: loss $first -> $last in 12 steps"
  else fail "golden $1 trains" "exit $rc, loss $first -> $last" "$(echo "$out" | tail -3)"; fi
}

# ---- the golden run ------------------------------------------------------------
learns t5-tiny "the reversed source"
if echo "$out" | grep -q "2 encoder + 2 layers"; then ok "the banner counts encoder and decoder layers"
else fail "banner" "$(echo "$out" | grep 'parity train:')"; fi

# ---- layouts -------------------------------------------------------------------
exact "dp 2" t5-tiny 2 1 1 0 1
exact "dp 2 ZeRO-3, accumulation 2" t5-tiny 2 1 1 0 1 --zero-stage 3 --accum-degree 2
exact "tp 2" t5-tiny 1 2 2 0 1
exact "tp 2 SP x dp 2 ZeRO-1" t5-tiny 2 2 2 0 1 --sequence-parallel --zero-stage 1
exact "tp 4 SP x dp 2 ZeRO-3" t5-tiny 2 4 4 0 1 --sequence-parallel --zero-stage 3
exact "tp 2 every linear row-parallel" t5-tiny 1 2 2 0 1 --tensor-parallel-row-linears
# context parallelism (ENCDEC.md, "Context parallelism"): the one stream
# cut into 2cp chunks (rank r: r and 2cp-1-r); each block's key span
# (bidirectional source, causal target, cross-attention to the source)
# honoured tile by tile on the ring, and by the golden core after Ulysses'
# all-to-all. cpexact NAME MODEL CP DEVICES FLAGS...
cpexact() {
  local name=$1 model=$2 cp=$3 want=$4; shift 4
  out=$("$P" check --model "$model" --steps 3 --context-parallel-size "$cp" "$@" 2>&1); rc=$?
  local devices; devices=$(echo "$out" | tail -1 | awk -F'|' '{gsub(/ /, "", $2); print $2}')
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$' && [ "$devices" = "$want" ]; then
    ok "$name: bit-exact over 3 steps on $devices devices"
  else fail "$name" "exit $rc, $devices devices (expected $want)" "$(echo "$out" | tail -4)"; fi
}
cpexact "cp 2 ring" t5-tiny 2 2
cpexact "cp 2 Ulysses" t5-tiny 2 2 --cp-comm-type a2a
cpexact "cp 4 ring (chunks of one tile)" t5-tiny 4 4
cpexact "cp 2 ring x tp 2" t5-tiny 2 4 --tensor-model-parallel-size 2
cpexact "cp 2 Ulysses x tp 2 SP" t5-tiny 2 4 --cp-comm-type a2a --tensor-model-parallel-size 2 --sequence-parallel
cpexact "cp 2 ring x dp 2, epp 1 x pp 1" t5-tiny 2 8 --data-parallel-size 2 \
  --encoder-pipeline-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-microbatches 2
cpexact "cp 2 ring, an encoder mesh (etp 1 < tp 2)" t5-tiny 2 6 --tensor-model-parallel-size 2 \
  --encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 1 \
  --pipeline-model-parallel-size 1 --num-microbatches 2
cpexact "llava cp 2 ring" llava-tiny 2 2
cpexact "llava cp 2 Ulysses x dp 2" llava-tiny 2 4 --cp-comm-type a2a --data-parallel-size 2
cpexact "cp 2 ring x full recomputation" t5-tiny 2 2 --recompute-granularity full
# the cp report counts attention blocks (a decoder layer's two)
for comm in p2p a2a; do
  out=$("$P" train --model t5-tiny --steps 1 --context-parallel-size 2 --cp-comm-type $comm 2>&1)
  if echo "$out" | grep -q "6 attention blocks held" && echo "$out" | grep -q "  measured = formula: bytes"; then
    ok "cp 2 $comm: the cp report's formula over 6 attention blocks = measured"
  else fail "cp 2 $comm report" "$(echo "$out" | grep -A6 'context parallelism (')"; fi
done
exact "epp 1 pp 1" t5-tiny 1 1 1 1 1
exact "epp 1 pp 2, 4 microbatches" t5-tiny 1 1 1 1 2 --num-microbatches 4
exact "epp 2 pp 1 GPipe x dp 2 ZeRO-1" t5-tiny 2 1 1 2 1 --pipeline-schedule gpipe --zero-stage 1 --num-microbatches 2
exact "epp 2 pp 2 tp 2 SP x dp 2 ZeRO-3" t5-tiny 2 2 2 2 2 --sequence-parallel --zero-stage 3 --num-microbatches 4
exact "epp 1 pp 2 tp 4 SP x dp 2 ZeRO-1" t5-tiny 2 4 4 1 2 --sequence-parallel --zero-stage 1 --num-microbatches 4
echo '{"base": "t5-tiny", "name": "t5-tiny-h6", "hidden": 48, "heads": 6, "ffn": 192}' > "$tmp/h6.json"
exact "tp 3 (6 heads) x dp 2 ZeRO-1" "$tmp/h6.json" 2 3 3 0 1 --zero-stage 1
exact "tp 3 (6 heads) epp 1 pp 1" "$tmp/h6.json" 1 3 3 1 1
# heterogeneous: an encoder mesh of etp < tp beside the decoder's
exact "etp 1 < tp 2, epp 1 pp 1" t5-tiny 1 2 1 1 1
exact "etp 1 < tp 2 SP, epp 1 pp 1 x dp 2 ZeRO-3" t5-tiny 2 2 1 1 1 --sequence-parallel --zero-stage 3
exact "etp 1 < tp 2, epp 2 pp 2 x dp 2 ZeRO-1" t5-tiny 2 2 1 2 2 --zero-stage 1 --num-microbatches 2
exact "etp 2 < tp 4 SP, epp 2 pp 2 x dp 2 ZeRO-3" t5-tiny 2 4 2 2 2 --sequence-parallel --zero-stage 3 --num-microbatches 4
exact "etp 1 < tp 4, epp 1 pp 2 x dp 2 ZeRO-1, GPipe" t5-tiny 2 4 1 1 2 --zero-stage 1 --num-microbatches 2 --pipeline-schedule gpipe
exact "etp 2 < tp 4, epp 1 pp 1 every linear row-parallel" t5-tiny 1 4 2 1 1 --tensor-parallel-row-linears
exact "etp 1 < tp 3 (6 heads: 3 decoder ranks an encoder rank), epp 1 pp 1 x dp 2 ZeRO-1" "$tmp/h6.json" 2 3 1 1 1 --zero-stage 1
exact "etp 1 < tp 3 (6 heads), epp 2 pp 2 x dp 2 ZeRO-3" "$tmp/h6.json" 2 3 1 2 2 --zero-stage 3 --num-microbatches 2
T=tests/layouts/models/t5-tiny-tied.json # a head tied to the embedding
# interleaved: the encoder's chunks round its 2 stages, the decoder's round
# its 2 (stage 1: encoder layer 1, then layer 3 and the final LayerNorm)
exact "epp 2 pp 2 interleaved V 2, 4 + 4 layers" t5-tiny 1 1 1 2 2 --encoder-num-layers 4 --num-layers 4 --virtual-pipeline-model-parallel-size 2 --num-microbatches 4
exact "epp 2 pp 2 interleaved V 2, etp 1 < tp 2 x dp 2 ZeRO-1, tied head" $T 2 2 1 2 2 --encoder-num-layers 4 --num-layers 4 --virtual-pipeline-model-parallel-size 2 --num-microbatches 4 --zero-stage 1
exact "epp 2 pp 2 --num-layers-per-virtual-pipeline-stage 1 (the final LayerNorm not counted)" t5-tiny 1 1 1 2 2 --encoder-num-layers 4 --num-layers 4 --num-layers-per-virtual-pipeline-stage 1 --num-microbatches 4
# a V (zb-v, dualpipev) on 2 + 2 stages: the encoder's last stage holds its
# final LayerNorm too (3 units), so its two chunks are unequal (1 + 2)
exact "epp 2 pp 2 zb-v, 4 + 4 layers, 8 microbatches" t5-tiny 1 1 1 2 2 --encoder-num-layers 4 --num-layers 4 --pipeline-schedule zb-v --num-microbatches 8
exact "epp 2 pp 2 dualpipev, 4 + 4 layers, tp 2 SP, 8 microbatches" t5-tiny 1 2 2 2 2 --encoder-num-layers 4 --num-layers 4 --pipeline-schedule dualpipev --num-microbatches 8 --sequence-parallel
exact "epp 2 pp 2 zb-v, etp 1 < tp 2, 4 + 4 layers" t5-tiny 1 2 1 2 2 --encoder-num-layers 4 --num-layers 4 --pipeline-schedule zb-v --num-microbatches 4
# a head tied across the meshes: the embedding's vocabulary cut over etp, the
# head's over tp, reconciled on the global rows (34 tiles of 272: 17 + 17
# over etp 2, 9 + 9 + 8 + 8 over tp 4, cuts that do not nest)
exact "tied head, etp 1 < tp 2, epp 1 pp 1" $T 1 2 1 1 1
exact "tied head, etp 2 < tp 4 SP, epp 2 pp 2 x dp 2 ZeRO-3" $T 2 4 2 2 2 --sequence-parallel --zero-stage 3 --num-microbatches 2
exact "tied head, vocab 272: cuts that do not nest, etp 2 < tp 4, epp 1 pp 1" $T 1 4 2 1 1 --vocab-size 272
# --rank-list on two meshes: it places dp*etp*epp*cp + dp*tp*pp*cp ranks
exact "shuffled --rank-list, etp 1 < tp 2, epp 2 pp 2 x dp 2 ZeRO-1, tied head" $T 2 2 1 2 2 --zero-stage 1 --num-microbatches 2 --rank-list 7,11,3,10,8,4,9,1,0,6,2,5
exact "shuffled --rank-list, etp 2 < tp 4 SP x dp 2" t5-tiny 2 4 2 1 1 --sequence-parallel --rank-list 5,2,0,4,1,3,11,9,6,10,8,7
out=$("$P" check --model t5-tiny --steps 1 --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 1 --data-parallel-size 2 --rank-list 5,2,0,4,1,3 --print-layout 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q '"name": "encoder", "ranks": \[2, 5\], "tp": 1' &&
   echo "$out" | grep -q '"name": "decoder", "ranks": \[0, 1, 3, 4\], "tp": 2' &&
   echo "$out" | grep -q '{"encoder": 5, "decoder": \[0, 4\]}' && echo "$out" | grep -q '{"encoder": 2, "decoder": \[1, 3\]}'; then
  ok "--rank-list places both meshes' ranks, and the bridge follows them"
else fail "--print-layout of meshes placed by a rank list" "exit $rc" "$(echo "$out" | sed -n 1,30p)"; fi

# LLaVA-style: a ViT encoder and a projector before a GPT decoder
exact "llava dp 2 ZeRO-1" llava-tiny 2 1 1 0 1 --zero-stage 1
exact "llava tp 2 SP x dp 2 ZeRO-3" llava-tiny 2 2 2 0 1 --sequence-parallel --zero-stage 3
exact "llava tp 2 every linear row-parallel" llava-tiny 1 2 2 0 1 --tensor-parallel-row-linears
exact "llava etp 1 < tp 2, epp 1 pp 2 x dp 2 (make demo-encdec's)" llava-tiny 2 2 1 1 2 --num-microbatches 2
exact "llava etp 2 < tp 4 SP, epp 2 pp 2 x dp 2 ZeRO-3" llava-tiny 2 4 2 2 2 --sequence-parallel --zero-stage 3 --num-microbatches 4
exact "llava etp 1 < tp 2, epp 1 pp 1 GPipe x dp 2 ZeRO-1" llava-tiny 2 2 1 1 1 --zero-stage 1 --num-microbatches 2 --pipeline-schedule gpipe
learns llava-tiny "its captions"

# ---- reports ---------------------------------------------------------------------
out=$("$P" check --model t5-tiny --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 1 --data-parallel-size 2 --print-layout 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q '"name": "encoder", "offset": 0, "ranks": \[0, 1\], "tp": 1' &&
   echo "$out" | grep -q '"name": "decoder", "offset": 2, "ranks": \[2, 5\], "tp": 2' &&
   echo "$out" | grep -q '"value": "2\*1\*1\*1 + 2\*2\*1\*1 = 6", "world_size": 6' &&
   echo "$out" | grep -q '{"encoder": 0, "decoder": \[2, 3\]}' && echo "$out" | grep -q '{"encoder": 1, "decoder": \[4, 5\]}' &&
   echo "$out" | grep -q '"rank": 5, "mesh": "decoder", "tp": 1, "pp": 1, "dp": 1'; then
  ok "--print-layout draws both meshes with their offsets, the bridge's pairs and dp*etp*epp*cp + dp*tp*pp*cp = 6"
else fail "--print-layout of an encoder mesh" "exit $rc" "$(echo "$out" | head -30)"; fi
out=$("$P" train --model llava-tiny --steps 2 --tensor-model-parallel-size 4 --encoder-tensor-model-parallel-size 2 --encoder-pipeline-model-parallel-size 1 --data-parallel-size 2 --num-microbatches 2 --sequence-parallel 2>&1); rc=$?
line=$(echo "$out" | grep 'encoder-decoder bridge')
mb=$(echo "$line" | sed -nE 's/.* messages, ([0-9.]+) MB sent; formula: .* = ([0-9.]+) MB.*/\1 \2/p')
if [ $rc = 0 ] && echo "$line" | grep -q ': 4 messages, .* formula: 2 decoder ranks x m = 4 messages' &&
   [ -n "$mb" ] && [ "${mb% *}" = "${mb#* }" ]; then
  ok "the bridge's traffic equals its formula (etp 2 < tp 4 SP: $mb MB)"
else fail "bridge traffic report" "exit $rc" "$line"; fi

out=$("$P" train --model t5-tiny --steps 1 --encoder-pipeline-model-parallel-size 2 --pipeline-model-parallel-size 2 --encoder-num-layers 4 --num-layers 4 --virtual-pipeline-model-parallel-size 2 --num-microbatches 4 --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 --rank-list 3,0,1,2,4,5 2>&1); rc=$?
line=$(echo "$out" | grep 'point to point')
if [ $rc = 0 ] && echo "$line" | grep -q 'device 0 (stage 1) per step: 12 messages, 0.197 MB sent; formula: 3 boundaries x m = 12 messages.* = 0.197 MB'; then
  ok "an interleaved encoder ring's point-to-point traffic equals its formula (device 0 placed on stage 1)"
else fail "interleaved encoder ring p2p report" "exit $rc" "$line"; fi

# ---- checkpoints -----------------------------------------------------------------
"$P" train --model t5-tiny --steps 2 --quiet --save "$tmp/ck" >/dev/null 2>&1
"$P" train --model t5-tiny --steps 2 --quiet --tensor-model-parallel-size 2 --encoder-pipeline-model-parallel-size 1 --pipeline-model-parallel-size 1 --data-parallel-size 2 --zero-stage 3 --save "$tmp/ck2" >/dev/null 2>&1
if [ -s "$tmp/ck/model.safetensors" ] && cmp -s "$tmp/ck/model.safetensors" "$tmp/ck2/model.safetensors"; then
  ok "epp 1 pp 1 tp 2 dp 2 ZeRO-3 saves the golden checkpoint byte for byte"
else fail "encoder pipeline checkpoint is the golden one" "$(ls -l "$tmp/ck" "$tmp/ck2" 2>&1 | head -6)"; fi
out=$("$P" check --model t5-tiny --load "$tmp/ck2" --steps 2 --encoder-pipeline-model-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 2 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "it resumes at epp 2 pp 2, bit-exact with the golden resume"
else fail "resume at epp 2 pp 2" "exit $rc" "$(echo "$out" | tail -4)"; fi
"$P" train --model t5-tiny --steps 2 --quiet --tensor-model-parallel-size 4 --encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 1 --data-parallel-size 2 --zero-stage 1 --save "$tmp/ck3" >/dev/null 2>&1
if cmp -s "$tmp/ck/model.safetensors" "$tmp/ck3/model.safetensors"; then
  ok "etp 1 < tp 4 (encoder mesh) saves the golden checkpoint byte for byte"
else fail "encoder mesh checkpoint is the golden one" "$(ls -l "$tmp/ck3" 2>&1 | head -4)"; fi
out=$("$P" check --model t5-tiny --load "$tmp/ck3" --steps 2 --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 2 --sequence-parallel 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "it resumes at etp 1 < tp 2 SP, epp 2: resharded between encoder degrees"
else fail "resume at etp 1 tp 2 epp 2" "exit $rc" "$(echo "$out" | tail -4)"; fi

# ---- broken variants are caught ------------------------------------------------------
out=$("$P" check --model t5-tiny --steps 1 --tensor-model-parallel-size 2 --test-broken tp-fp32-sums 2>&1)
if echo "$out" | grep -q "| NO$" && echo "$out" | grep -q "encoder layer 0's self_attention.dense.output"; then
  ok "tp-fp32-sums is caught at the encoder's first row-parallel output"
else fail "tp-fp32-sums on t5-tiny" "$(echo "$out" | tail -4)"; fi

for b in encdec-tied-cuts pp-tied-embedding; do # the tied head's group across the meshes
  out=$("$P" check --model $T --steps 1 --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 1 --test-broken $b 2>&1)
  if echo "$out" | grep -q "| NO$" && echo "$out" | grep -q "tensor      step0.grad.embedding.word_embeddings.weight" &&
     echo "$out" | grep -q "produced by device 0"; then
    ok "$b across the meshes is caught at the word embedding's gradient on device 0"
  else fail "$b on an encoder mesh" "$(echo "$out" | tail -4)"; fi
done

# ---- refusals ------------------------------------------------------------------
refuse "decoder pipeline without encoder stages" "pipeline-model-parallel-size: 2 with an encoder-decoder \(arch t5\) needs --encoder-pipeline-model-parallel-size > 0" -- "$P" check --model t5-tiny --pipeline-model-parallel-size 2 --steps 1
refuse "etp without epp" "encoder-tensor-model-parallel-size: 1 needs --encoder-pipeline-model-parallel-size > 0" -- "$P" check --model t5-tiny --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 --steps 1
refuse "etp must divide tp" "encoder-tensor-model-parallel-size: 3 does not divide tensor-model-parallel-size 4" -- "$P" check --model t5-tiny --tensor-model-parallel-size 4 --encoder-tensor-model-parallel-size 3 --encoder-pipeline-model-parallel-size 1 --steps 1
refuse "svg grid of two meshes" "svg grid: an encoder mesh beside the decoder's .* is no one rank grid to draw" -- "$P" svg grid --model t5-tiny --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 1 -o "$w/g.svg"
refuse "a world size that is no number of replicas" "world-size: 8 is not divisible by cp\*\(etp\*epp \+ tp\*pp\) \(an encoder mesh beside the decoder's\) = 3" -- "$P" check --model t5-tiny --world-size 8 --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 1 --steps 1
refuse "etp above tp" "encoder-tensor-model-parallel-size: 4 exceeds tensor-model-parallel-size 2" -- "$P" check --model t5-tiny --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 4 --encoder-pipeline-model-parallel-size 1 --steps 1
refuse "epp on a GPT" "encoder-pipeline-model-parallel-size: .*gpt-micro .*\(arch gpt\) has no encoder" -- "$P" check --model gpt-micro --encoder-pipeline-model-parallel-size 1 --steps 1
refuse "epp must divide the encoder layers" "encoder-pipeline-model-parallel-size: 3 does not divide the 2 encoder layers" -- "$P" check --model t5-tiny --encoder-pipeline-model-parallel-size 3 --steps 1
refuse "pp must divide the decoder layers" "pipeline-model-parallel-size: 3 does not divide the 2 decoder layers" -- "$P" check --model t5-tiny --encoder-pipeline-model-parallel-size 1 --pipeline-model-parallel-size 3 --steps 1
refuse "interleaving an encoder of one stage" "virtual-pipeline-model-parallel-size: 2 with an encoder-decoder: the encoder's chunks go round its 1 stage\(s\) and the decoder's round its 2, and a ring needs 2 stages" -- "$P" check --model t5-tiny --encoder-pipeline-model-parallel-size 1 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --num-microbatches 6 --micro-batch-size 1 --global-batch-size 6 --steps 1
refuse "a V with a chunk of no layer" "pipeline-schedule: zb-v puts 2 chunks on every stage, but stage 2 holds 1 layer\(s\), so its chunk 0 would hold no unit \(8 chunks for 5 layers between the embedding and the head" -- "$P" check --model t5-tiny --encoder-pipeline-model-parallel-size 2 --pipeline-model-parallel-size 2 --pipeline-schedule zb-v --num-microbatches 8 --steps 1
refuse "a layer split with epp" "pipeline-layer-split: not with --encoder-pipeline-model-parallel-size" -- "$P" check --model t5-tiny --encoder-pipeline-model-parallel-size 1 --pipeline-model-parallel-size 1 --pipeline-layer-split 2 --steps 1
refuse "MoE in an encoder-decoder" "moe.experts \(--num-experts\) = 4: an encoder-decoder \(arch t5\) has dense MLPs only" -- "$P" train --model t5-tiny --num-experts 4 --steps 1
refuse "an encoder on a GPT" "a GPT \(arch gpt\) has no encoder" -- "$P" train --model gpt-micro --encoder-num-layers 2 --steps 1
refuse "source longer than the stream" "encoder.seq_length \(--encoder-seq-length\) = 32: expected a multiple of tiles.tokens = 4 below seq_length = 32" -- "$P" train --model t5-tiny --encoder-seq-length 32 --steps 1
echo '{"base": "t5-tiny", "arch": "bart"}' > "$tmp/bad.json"
refuse "JSON arch" "field 'arch': expected \"gpt\", \"t5\" or \"llava\"" -- "$P" train --model "$tmp/bad.json" --steps 1
echo '{"base": "llava-tiny", "encoder": {"patch_dim": 50}}' > "$tmp/bad3.json"
refuse "a patch not of whole feature tiles" "encoder.patch_dim = 50: expected a positive multiple of tiles.features" -- "$P" train --model "$tmp/bad3.json" --steps 1
echo '{"base": "t5-tiny", "encoder": {"patch_dim": 48}}' > "$tmp/bad4.json"
refuse "patches on a T5" "encoder.patch_dim = 48: only a LLaVA-style model \(arch llava\) has image patches" -- "$P" train --model "$tmp/bad4.json" --steps 1
refuse "llava decoder pipeline without encoder stages" "pipeline-model-parallel-size: 2 with an encoder-decoder \(arch llava\) needs --encoder-pipeline-model-parallel-size > 0" -- "$P" check --model llava-tiny --pipeline-model-parallel-size 2 --steps 1
echo '{"base": "t5-tiny", "encoder": {"layer": 2}}' > "$tmp/bad2.json"
refuse "JSON unknown encoder key" "unknown field 'encoder.layer'" -- "$P" train --model "$tmp/bad2.json" --steps 1
# the config a dump or checkpoint stores carries the encoder and reads back
"$P" train --model t5-tiny --encoder-num-layers 3 --print-config > "$tmp/t5.json" 2>&1
back=$("$P" train --model "$tmp/t5.json" --print-config 2>&1)
if grep -q '"arch": "t5", "encoder": {"layers": 3, "seq_length": 16, "patch_dim": 0}' "$tmp/t5.json" && [ "$back" = "$(cat "$tmp/t5.json")" ]; then
  ok "--print-config carries arch and encoder and reads back the same"
else fail "t5 config round trip" "$(cat "$tmp/t5.json")" "$back"; fi

echo "RESULT test_encdec.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
