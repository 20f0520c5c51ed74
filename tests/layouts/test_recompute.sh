#!/usr/bin/env bash
# Activation recomputation (Megatron's --recompute-granularity full|
# selective, --recompute-method uniform|block, --recompute-num-layers N;
# units.c's gpt_recompute_chunk, unit_layer.c's core_bind): full keeps a
# chunk of layers' input and runs the chunk's forward again in the
# backward; selective keeps everything but attention's core (scores,
# softmax, dropout) and recomputes it from qkv. Bit-exact with the golden
# run (which stores) over 3 steps with dropout on data, tensor (+SP),
# pipeline (1F1B, interleaved), context (ring, Ulysses), 3-D tensor
# parallel, expert-parallel and encoder-decoder layouts, full with MoE
# layers (dense and MoE mixed in a chunk) and with encoder-decoders (T5's
# encoder and decoder chunks, LLaVA); the activation
# memory device 0 saves matches the layer formula (report_layer_per_token)
# for each granularity; what is wrong is refused by name.
set -u
P=${PARITY:-build/parity}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
. tests/refuse.sh parity-recompute

exact() { # name, model, flags...
  local name=$1 model=$2; shift 2
  out=$("$P" check --model "$model" --steps 3 "$@" 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "$name: bit-exact over 3 steps"
  else fail "$name" "exit $rc" "$(echo "$out" | tail -4)"; fi
}
FULL="--recompute-granularity full"
SEL="--recompute-granularity selective"
M4="--num-layers 4"
exact "full, one device" gpt-micro $M4 $FULL
exact "full, dp 2 ZeRO-3" gpt-micro $M4 $FULL --data-parallel-size 2 --zero-stage 3
exact "full, tp 2 + SP x pp 2 1F1B" gpt-micro $M4 $FULL --tensor-model-parallel-size 2 \
  --sequence-parallel --pipeline-model-parallel-size 2 --num-microbatches 4
exact "full, cp 2 (ring) x dp 2 ZeRO-1" gpt-micro $M4 $FULL --context-parallel-size 2 \
  --data-parallel-size 2 --zero-stage 1
exact "full, 3d q 2 x dp 2 ZeRO-3" gpt-tiny $FULL --tensor-model-parallel-size 8 \
  --tensor-parallel-mode 3d --data-parallel-size 2 --zero-stage 3
exact "full uniform 3 (chunks cut by the stage), tp 2 + SP x pp 2" gpt-micro $M4 $FULL \
  --recompute-num-layers 3 --tensor-model-parallel-size 2 --sequence-parallel \
  --pipeline-model-parallel-size 2 --num-microbatches 4
exact "full uniform 2, pp 2 interleaved x dp 2 ZeRO-3 (chunk gathers)" gpt-micro $M4 $FULL \
  --recompute-num-layers 2 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 \
  --num-microbatches 4 --data-parallel-size 2 --zero-stage 3 --global-batch-size 8
exact "full block 3, cp 2 (Ulysses)" gpt-micro $M4 $FULL --recompute-method block \
  --recompute-num-layers 3 --context-parallel-size 2 --cp-comm-type a2a
exact "selective, dp 2 ZeRO-3" gpt-micro $M4 $SEL --data-parallel-size 2 --zero-stage 3
# full x MoE: the replayed chunk routes as the first forward did (choice,
# weights, capacity drops) and draws the same dropout; the aux and z losses
# are counted once (after_forward is not replayed: Megatron-LM 1330/1514)
MOE="--num-experts 4 --moe-router-topk 2 --moe-expert-capacity-factor 1.0 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001"
exact "full x MoE, one device" gpt-micro $M4 $MOE $FULL
exact "full uniform 2 x MoE, dp 2" gpt-micro $M4 $MOE $FULL --recompute-num-layers 2 --data-parallel-size 2
exact "full x MoE, ep 2 of dp 2" gpt-micro $M4 $MOE $FULL --data-parallel-size 2 --expert-model-parallel-size 2
exact "full x MoE, tp 2 + SP" gpt-micro $M4 $MOE $FULL --tensor-model-parallel-size 2 --sequence-parallel
exact "full uniform 2 x MoE, pp 2 1F1B" gpt-micro $M4 $MOE $FULL --recompute-num-layers 2 \
  --pipeline-model-parallel-size 2 --num-microbatches 4
exact "full uniform 2 x MoE every other layer (dense and MoE in a chunk)" gpt-micro $M4 $MOE $FULL \
  --recompute-num-layers 2 --moe-layer-freq 2
exact "full block 3 x MoE every other layer, cp 2 (ring)" gpt-micro $M4 $MOE $FULL --recompute-method block \
  --recompute-num-layers 3 --moe-layer-freq 2 --context-parallel-size 2
# full x encoder-decoders: encoder and decoder chunks (never one across
# both); a decoder chunk's input is the stream, whose source rows are the
# encoder's output: kept, not recomputed (Megatron's T5)
exact "full x T5, one device" t5-tiny $FULL
exact "full uniform 2 x T5, epp 1 x pp 1" t5-tiny $FULL --recompute-num-layers 2 \
  --encoder-pipeline-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-microbatches 2
exact "full x T5, an encoder mesh (etp 1 < tp 2)" t5-tiny $FULL --tensor-model-parallel-size 2 \
  --encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 1 \
  --pipeline-model-parallel-size 1 --num-microbatches 2
exact "full uniform 2 x T5, dp 2 ZeRO-1" t5-tiny $FULL --recompute-num-layers 2 --data-parallel-size 2 \
  --zero-stage 1
exact "full block 1 x T5, tp 2" t5-tiny $FULL --recompute-method block --tensor-model-parallel-size 2
out=$("$P" train --model t5-tiny --steps 1 $FULL --tensor-model-parallel-size 2 2>&1)
if echo "$out" | grep -q "measured = formula: calls, elements and bytes"; then
  ok "full x T5, tp 2: the tp report counts a recomputed decoder layer's 3 forward all-reduces"
else fail "full x T5 tp report" "$(echo "$out" | grep -B3 'DIFFER')"; fi
exact "full uniform 2 x LLaVA, tp 2 + SP" llava-tiny $FULL --recompute-num-layers 2 \
  --tensor-model-parallel-size 2 --sequence-parallel
exact "selective, tp 2 + SP x pp 2 interleaved" gpt-micro $M4 $SEL --tensor-model-parallel-size 2 \
  --sequence-parallel --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 \
  --num-microbatches 4
exact "selective, cp 2 (ring)" gpt-micro $M4 $SEL --context-parallel-size 2
exact "selective, cp 2 (Ulysses)" gpt-micro $M4 $SEL --context-parallel-size 2 --cp-comm-type a2a
exact "selective, 2d q 2" gpt-tiny $SEL --tensor-model-parallel-size 4 --tensor-parallel-mode 2d
exact "selective, MoE ep 2" gpt-micro $SEL --num-experts 4 --moe-router-topk 2 \
  --data-parallel-size 2 --expert-model-parallel-size 2
exact "selective, T5 tp 2 (self- and cross-attention cores)" t5-tiny $SEL --tensor-model-parallel-size 2

# memory: device 0's saving, formula against the arena's measurement
saving() { # name, flags...
  local name=$1; shift
  out=$("$P" train --model gpt-micro --num-layers 4 --steps 1 "$@" 2>&1); rc=$?
  line=$(echo "$out" | grep 'formula vs measured:')
  saved=$(echo "$out" | grep -oE 'saved, measured: .* = [-0-9.]+ MB' | grep -oE '[-0-9.]+ MB$')
  if [ $rc = 0 ] && echo "$line" | grep -q ', match ('; then ok "$name: saves $saved, as the formula says"
  else fail "$name: saving against the formula" "exit $rc" "$line" "$(echo "$out" | tail -3)"; fi
}
saving "selective, dp 2" $SEL --data-parallel-size 2
saving "full, dp 2" $FULL --data-parallel-size 2
saving "full uniform 2, tp 2 + SP x pp 2" $FULL --recompute-num-layers 2 \
  --tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2 --num-microbatches 4
saving "full block 2, pp 2" $FULL --recompute-method block --recompute-num-layers 2 \
  --pipeline-model-parallel-size 2 --num-microbatches 4
saving "selective, pp 2 interleaved (6 slots)" $SEL --pipeline-model-parallel-size 2 \
  --virtual-pipeline-model-parallel-size 2 --num-microbatches 4
saving "selective, cp 2 Ulysses" $SEL --context-parallel-size 2 --cp-comm-type a2a

# and it falls: full below selective below storing (the estimate, which the
# arena's high-water equals: tests/unit/test_memest.c); --print-layout says which
pl=$("$P" train --model gpt-tiny $FULL --recompute-method block --recompute-num-layers 2 --print-layout 2>&1)
if echo "$pl" | grep -q '"recompute": {"granularity": "full", "method": "block", "num_layers": 2}'; then
  ok "--print-layout names the recomputation"
else fail "--print-layout names the recomputation" "$(echo "$pl" | grep recompute)"; fi
act() { "$P" train --model gpt-micro --num-layers 4 --steps 1 --data-parallel-size 2 "$@" 2>&1 |
        grep -oE 'activations [0-9.]+ MB' | head -1 | awk '{print $2}'; }
a0=$(act); a1=$(act $SEL); a2=$(act $FULL)
if [ -n "$a2" ] && awk -v a="$a0" -v b="$a1" -v c="$a2" 'BEGIN {exit !(c < b && b < a)}'; then
  ok "activations per device: $a0 MB stored, $a1 MB selective, $a2 MB full"
else fail "activations fall with recomputation" "stored $a0 selective $a1 full $a2"; fi

refuse "a method with selective" "recompute-method: needs --recompute-granularity full" -- \
  "$P" check --model gpt-tiny $SEL --recompute-method block --steps 1
refuse "a count without full" "recompute-num-layers: needs --recompute-granularity full" -- \
  "$P" check --model gpt-tiny --recompute-num-layers 2 --steps 1
refuse "a count above the layer count" "recompute-num-layers: 9 exceeds the model's 8 layers" -- \
  "$P" check --model gpt-tiny $FULL --recompute-num-layers 9 --steps 1
refuse "an unknown granularity" "recompute-granularity: unknown value 'some'" -- \
  "$P" check --model gpt-tiny --recompute-granularity some --steps 1

echo "RESULT test_recompute.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
