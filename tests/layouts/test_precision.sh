#!/usr/bin/env bash
# Mixed precision (--bf16, --fp16 with loss scaling; MODEL.md "Mixed
# precision", ref/model/optim/precision.c, units_internal.h's act_round): the
# golden run and every layout round activations, their gradients and the
# parameters' compute copy at the same points, so they stay bit-exact.
# bf16 over 3 steps with dropout on the layout matrix's representatives;
# fp16 with dynamic loss scaling forced to overflow on its first step (the
# skip, the halved scale and the later growth identical in every layout,
# the dumps' loss_scale and skipped scalars compared); a static scale; the
# precision changes the bits; what is refused is refused by name.
set -u
P=${PARITY:-build/parity}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
. tests/refuse.sh parity-precision

exact() { # name, model, steps, flags...
  local name=$1 model=$2 steps=$3; shift 3
  out=$("$P" check --model "$model" --steps "$steps" "$@" 2>&1); rc=$?
  if [ $rc = 0 ] && echo "$out" | grep -q '| yes$'; then ok "$name: bit-exact over $steps steps"
  else fail "$name" "exit $rc" "$(echo "$out" | tail -4)"; fi
}

# bf16 (dropout on): gpt-tiny on dp ZeRO-1 and a tp x pp x dp layout;
# gpt-micro with 4 layers on ZeRO-3, tp + SP, pp 1F1B and interleaved, cp
exact "bf16, gpt-tiny dp 2 ZeRO-1" gpt-tiny 3 --bf16 --data-parallel-size 2 --zero-stage 1
exact "bf16, gpt-tiny tp 2 x pp 2 x dp 2 ZeRO-1" gpt-tiny 3 --bf16 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --data-parallel-size 2 --zero-stage 1 --num-microbatches 2
M4="--num-layers 4"
exact "bf16, dp 2 ZeRO-3" gpt-micro 3 $M4 --bf16 --data-parallel-size 2 --zero-stage 3
exact "bf16, tp 2 + SP" gpt-micro 3 $M4 --bf16 --tensor-model-parallel-size 2 --sequence-parallel
exact "bf16, pp 2 1F1B" gpt-micro 3 $M4 --bf16 --pipeline-model-parallel-size 2 --num-microbatches 2
exact "bf16, pp 2 interleaved" gpt-micro 3 $M4 --bf16 --pipeline-model-parallel-size 2 \
  --virtual-pipeline-model-parallel-size 2 --num-microbatches 2
exact "bf16, cp 2 ring" gpt-micro 3 $M4 --bf16 --context-parallel-size 2

# fp16, dynamic scaling from 2^21 on gpt-micro with 4 layers: step 0
# overflows (skipped, the scale halves: hysteresis 1), two clean steps grow
# it back (window 2), and step 3 overflows again
F16="--fp16 --initial-loss-scale 2097152 --hysteresis 1 --loss-scale-window 2"
g=$("$P" train --model gpt-micro --steps 4 --num-layers 4 $F16 2>&1)
scales=$(echo "$g" | grep -oE 'loss scale [0-9.e+]+( \(skipped\))?' | tr '\n' ',')
if echo "$g" | grep -q '^step     0 .*loss scale 2.09715e+06 (skipped)' &&
   echo "$g" | grep -q '^step     1 .*lr 5.0000e-04 .*loss scale 1.04858e+06 |' &&
   echo "$g" | grep -q '^step     3 .*loss scale 2.09715e+06 (skipped)'; then
  ok "fp16: step 0 overflows and is skipped, the scale halves and the schedule waits; 2 clean steps grow it, step 3 overflows again ($scales)"
else fail "fp16: the forced overflow" "$(echo "$g" | grep '^step')"; fi
exact "fp16 overflow, dp 2 ZeRO-1" gpt-micro 4 $M4 $F16 --data-parallel-size 2 --zero-stage 1
exact "fp16 overflow, dp 2 ZeRO-3" gpt-micro 4 $M4 $F16 --data-parallel-size 2 --zero-stage 3
exact "fp16 overflow, tp 2 + SP" gpt-micro 4 $M4 $F16 --tensor-model-parallel-size 2 --sequence-parallel
exact "fp16 overflow, pp 2 1F1B" gpt-micro 4 $M4 $F16 --pipeline-model-parallel-size 2 --num-microbatches 2
exact "fp16 overflow, pp 2 interleaved" gpt-micro 4 $M4 $F16 --pipeline-model-parallel-size 2 \
  --virtual-pipeline-model-parallel-size 2 --num-microbatches 2
exact "fp16 overflow, cp 2 ring" gpt-micro 4 $M4 $F16 --context-parallel-size 2
exact "fp16 overflow, tp 2 x pp 2 x dp 2 ZeRO-3" gpt-micro 4 $M4 $F16 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --data-parallel-size 2 --zero-stage 3 --global-batch-size 8
exact "fp16 static scale 1024, dp 2" gpt-micro 3 --fp16 --loss-scale 1024 --data-parallel-size 2

# NeMo's (Apex DistributedFusedAdam's) dtypes, the model's in parity: the
# reduced gradients rounded to bf16 (grad_sync_dtype), the master weights
# and AdamW's state after each update (dtype; grad_sync_dtype follows it)
DFA="--optim model.optim.name=distributed_fused_adam"
exact "NeMo grad_sync_dtype=bf16, dp 2 (ZeRO-2)" gpt-micro 3 $DFA --optim model.optim.grad_sync_dtype=bf16 \
  --data-parallel-size 2
exact "NeMo dtype=bf16 (and its grad sync), dp 2 (ZeRO-2) with --bf16" gpt-micro 3 --bf16 $DFA \
  --optim model.optim.dtype=bf16 --data-parallel-size 2
exact "--grad-sync-dtype bf16 --dtype bf16, tp 2 x pp 2 x dp 2 ZeRO-3" gpt-micro 3 --grad-sync-dtype bf16 \
  --dtype bf16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --data-parallel-size 2 \
  --zero-stage 3 --num-microbatches 2 --global-batch-size 8
norm() { "$P" train --model gpt-micro --steps 2 "$@" 2>&1 | grep '^step     1' | grep -oE 'grad norm [0-9.]+'; }
n32=$(norm); ng=$(norm --grad-sync-dtype bf16); no=$(norm --dtype bf16)
if [ -n "$ng" ] && [ -n "$no" ] && [ "$n32" != "$ng" ] && [ "$n32" != "$no" ]; then
  ok "the dtypes are used: step 1's $n32 in fp32, $ng with bf16 gradients, $no with bf16 state"
else fail "the NeMo dtypes change the bits" "fp32 $n32 grad $ng state $no"; fi
if "$P" train --model gpt-tiny --grad-sync-dtype bf16 --print-config 2>&1 | grep -q '"grad_dtype": "bf16"'; then
  ok "the model's JSON names the gradient dtype (dumps and checkpoints carry it)"
else fail "the model's JSON names the gradient dtype"; fi

# the precision is used: each gives other bits than fp32 (and each other)
loss() { "$P" train --model gpt-micro --steps 2 "$@" 2>&1 | grep '^step     1' | grep -oE '\(0x[0-9a-f]+\)'; }
l32=$(loss); lb=$(loss --bf16); lh=$(loss --fp16 --loss-scale 1024)
if [ -n "$l32" ] && [ -n "$lb" ] && [ -n "$lh" ] && [ "$l32" != "$lb" ] && [ "$l32" != "$lh" ] && [ "$lb" != "$lh" ]; then
  ok "step 1's loss differs: fp32 $l32, bf16 $lb, fp16 $lh"
else fail "the precision changes the bits" "fp32 $l32 bf16 $lb fp16 $lh"; fi

# memory: the compute copy is one more fp32 block of the parameters
pm() { "$P" train --model gpt-tiny --steps 1 "$@" 2>&1 | grep -oE 'params [0-9.]+ MB' | head -1 | awk '{print $2}'; }
p32=$(pm); pb=$(pm --bf16)
if [ -n "$pb" ] && awk -v a="$p32" -v b="$pb" 'BEGIN {exit !(b > 1.99 * a && b < 2.01 * a)}'; then
  ok "parameters per device: $p32 MB fp32, $pb MB with the bf16 compute copy"
else fail "the compute copy's memory" "fp32 $p32 bf16 $pb"; fi

refuse "a loss scale without fp16" "loss-scale: loss scaling is for --fp16 .the model is bf16" -- \
  "$P" check --model gpt-micro --bf16 --loss-scale 128 --steps 1
refuse "bf16 and fp16 together" "--bf16 and --fp16: give one" -- \
  "$P" check --model gpt-micro --bf16 --fp16 --steps 1
refuse "a negative initial scale" "initial-loss-scale: -2, expected a finite value >= 0" -- \
  "$P" check --model gpt-micro --fp16 --initial-loss-scale -2 --steps 1
refuse "a negative window" "loss-scale-window: -1, expected a finite value >= 0" -- \
  "$P" check --model gpt-micro --fp16 --loss-scale-window -1 --steps 1
refuse "a minimum above the initial scale" "min-loss-scale: 1024 exceeds --initial-loss-scale 512" -- \
  "$P" check --model gpt-micro --fp16 --initial-loss-scale 512 --min-loss-scale 1024 --steps 1
refuse "bf16 with an encoder-decoder" "--bf16: mixed precision is built for the dense GPT, not for encoder-decoders" -- \
  "$P" check --model t5-tiny --bf16 --steps 1
refuse "bf16 with 2-D tensor parallelism" "--bf16: mixed precision with Colossal-AI's 2-D" -- \
  "$P" check --model gpt-tiny --bf16 --tensor-model-parallel-size 4 --tensor-parallel-mode 2d --steps 1
refuse "an fp16 checkpoint" "--save: checkpoints of --fp16 runs .the loss scaler's state. are not built yet" -- \
  "$P" train --model gpt-micro --fp16 --steps 1 --save "$w/ck"
"$P" train --model gpt-micro --bf16 --steps 1 --save "$w/bf" >/dev/null 2>&1
refuse "a bf16 checkpoint loaded as fp32" "its precision is bf16, here fp32" -- \
  "$P" train --model gpt-micro --steps 1 --load "$w/bf"
exact "a bf16 checkpoint resumed on dp 2 ZeRO-3" gpt-micro 2 --bf16 --load "$w/bf" --data-parallel-size 2 --zero-stage 3

echo "RESULT test_precision.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
