#!/usr/bin/env bash
# Mixed precision (--bf16, --fp16 with loss scaling; MODEL.md "Mixed
# precision", ref/model/optim/precision.c, units_internal.h's act_round): the
# golden run and every layout round activations, their gradients and the
# parameters' compute copy at the same points, so they stay bit-exact.
# bf16 over 3 steps with dropout on the layout matrix's representatives;
# fp16 with dynamic loss scaling forced to overflow on its first step (the
# skip, the halved scale and the later growth identical in every layout,
# the dumps' loss_scale and skipped scalars compared); a static scale;
# encoder-decoders (T5, LLaVA) over their meshes; Colossal-AI's 2-D, 2.5-D
# and 3-D with their negative control; the precision changes the bits; what
# is refused is refused by name.
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

# ---- encoder-decoders (MODEL.md "Mixed precision", ENCDEC.md): the encoder's
# output rounded by its final LayerNorm, cross-attention a block like the
# others, the bridge carrying S values; LLaVA's patch embedding and projector
# in S. t5-tiny and llava-tiny over the meshes: dp, tp + SP, an encoder stage
# before the decoder's (epp 1 x pp 1, and pp 2), an encoder mesh of fewer tp
# ranks (etp 1 < tp 2), selective recomputation
EPP="--encoder-pipeline-model-parallel-size 1 --encoder-tensor-model-parallel-size 1"
exact "bf16, t5 dp 2 ZeRO-1" t5-tiny 3 --bf16 --data-parallel-size 2 --zero-stage 1
exact "bf16, t5 tp 2 + SP x dp 2 ZeRO-3" t5-tiny 3 --bf16 --tensor-model-parallel-size 2 --sequence-parallel \
  --data-parallel-size 2 --zero-stage 3
exact "bf16, t5 epp 1 x pp 2" t5-tiny 3 --bf16 $EPP --pipeline-model-parallel-size 2 --num-microbatches 2
exact "bf16, t5 etp 1 < tp 2, epp 1 x pp 1, recompute selective" t5-tiny 3 --bf16 $EPP \
  --tensor-model-parallel-size 2 --recompute-granularity selective
exact "bf16, llava tp 2 + SP" llava-tiny 3 --bf16 --tensor-model-parallel-size 2 --sequence-parallel
exact "bf16, llava etp 1 < tp 2, epp 1 x pp 2 x dp 2 ZeRO-1" llava-tiny 3 --bf16 $EPP --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --num-microbatches 2 --data-parallel-size 2 --zero-stage 1
exact "fp16 overflow, t5 dp 2 ZeRO-3" t5-tiny 4 $F16 --data-parallel-size 2 --zero-stage 3
exact "fp16 overflow, t5 etp 1 < tp 2, epp 1 x pp 2" t5-tiny 4 $F16 $EPP --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --num-microbatches 2
exact "fp16 overflow, llava tp 2 + SP, recompute selective" llava-tiny 4 $F16 --tensor-model-parallel-size 2 \
  --sequence-parallel --recompute-granularity selective
g=$("$P" train --model t5-tiny --steps 4 $F16 2>&1)
if echo "$g" | grep -q '^step     0 .*(skipped)' && echo "$g" | grep -q '^step     1 .*loss scale 1.04858e+06 |'; then
  ok "fp16 t5: step 0 overflows and is skipped, the scale halves"
else fail "fp16 t5: the forced overflow" "$(echo "$g" | grep '^step')"; fi
# every rounding point is in the golden run: each activation and input
# gradient a bf16 run dumps holds bf16 values only (the encoder's output,
# the patch embedding and the projector included)
for m in t5-tiny llava-tiny; do
  "$P" train --model $m --steps 1 --bf16 --dump "$w/$m.st" >/dev/null 2>&1
  if r=$(python3 - "$w/$m.st" <<'PY'
import array, json, struct, sys
f = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", f[:8])[0]
head, base, good, bad = json.loads(f[8:8 + n]), 8 + n, 0, []
for k, v in head.items():
    if k == "__metadata__" or v["dtype"] != "F32" or not k.startswith(("step0.act.", "step0.grad_input.")):
        continue
    a, b = v["data_offsets"]
    x = array.array("I", f[base + a:base + b])
    if any(e & 0xFFFF for e in x): bad.append(k)
    else: good += 1
print(f"{good} tensors bf16-valued" if good and not bad else f"{good} bf16-valued, not: {bad}")
sys.exit(0 if good and not bad else 1)
PY
); then ok "$m --bf16: every dumped activation and input gradient is bf16-valued ($r)"
  else fail "$m --bf16: the dumped activations are bf16-valued" "$r"; fi
done
for m in t5-tiny llava-tiny; do
  e32=$("$P" train --model $m --steps 2 2>&1 | grep '^step     1' | grep -oE '\(0x[0-9a-f]+\)')
  eb=$("$P" train --model $m --steps 2 --bf16 2>&1 | grep '^step     1' | grep -oE '\(0x[0-9a-f]+\)')
  if [ -n "$e32" ] && [ -n "$eb" ] && [ "$e32" != "$eb" ]; then ok "$m: step 1's loss differs, fp32 $e32, bf16 $eb"
  else fail "$m: bf16 changes the bits" "fp32 $e32 bf16 $eb"; fi
done

# ---- 2-D/3-D (MODES.md "2-D"): Colossal-AI's layers under amp, every SUMMA
# and 3-D product the exact sum rounded to fp32, then to S where 1-D rounds;
# LayerNorm2D as the dense LayerNorm. gpt-micro (4 layers): 2-D q 2, 2.5-D q 2
# depth 2, 3-D q 2, each alone and x pp 2 x dp 2 ZeRO-1, bf16 and fp16
T2=("--tensor-model-parallel-size 4 --tensor-parallel-mode 2d"
    "--tensor-model-parallel-size 8 --tensor-parallel-mode 2.5d --tensor-parallel-depth 2"
    "--tensor-model-parallel-size 8 --tensor-parallel-mode 3d")
PPDP="--pipeline-model-parallel-size 2 --data-parallel-size 2 --zero-stage 1 --micro-batch-size 4 --global-batch-size 16"
for t in "${T2[@]}"; do
  mode=$(echo "$t" | grep -oE 'mode [0-9.]+d' | cut -d' ' -f2)
  # shellcheck disable=SC2086 # flags, word-split on purpose
  exact "bf16, $mode q 2" gpt-micro 3 $M4 --bf16 $t
  # shellcheck disable=SC2086
  exact "bf16, $mode q 2 x pp 2 x dp 2 ZeRO-1" gpt-micro 3 $M4 --bf16 $t $PPDP
  # shellcheck disable=SC2086
  exact "fp16 overflow, $mode q 2" gpt-micro 4 $M4 $F16 $t
  # shellcheck disable=SC2086
  exact "fp16 overflow, $mode q 2 x pp 2 x dp 2 ZeRO-1" gpt-micro 4 $M4 $F16 $t $PPDP
done
# the negative control (ref/cli/broken.c): a naive amp's SUMMA, each step's
# product and the running sum in bf16, caught at the first 2-D linear's
# output with the device named; at 2.5-D and with fp16 too
for b in "--bf16 ${T2[0]}" "--bf16 ${T2[1]}" "--fp16 --loss-scale 1024 ${T2[0]}"; do
  # shellcheck disable=SC2086
  out=$("$P" check --model gpt-micro --steps 1 $b --test-broken tp2d-summa-bf16 2>&1); rc=$?
  if [ $rc = 1 ] && echo "$out" | grep -q 'tensor *step0\.act\.layers\.0\.self_attention\.query_key_value\.output$' &&
     echo "$out" | grep -q 'produced by device'; then
    ok "tp2d-summa-bf16 is caught at layer 0's qkv output ($b), $(echo "$out" | grep -oE 'produced by device [0-9]+')"
  else fail "tp2d-summa-bf16 ($b)" "exit $rc" "$(echo "$out" | grep -E 'tensor|produced' | head -3)"; fi
done

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
# fp16 as Apex keeps it (MODEL.md): the loss-scaled gradients synced in
# fp16, unscaled after; master weights, m and v stored in fp16
exact "NeMo dtype=fp16 (and its grad sync) with --fp16, dp 2 (ZeRO-2)" gpt-micro 3 $M4 $F16 $DFA \
  --optim model.optim.dtype=fp16 --data-parallel-size 2
exact "--grad-sync-dtype fp16 --dtype fp16 --fp16, dp 2 ZeRO-1" gpt-micro 3 $M4 $F16 --grad-sync-dtype fp16 \
  --dtype fp16 --data-parallel-size 2 --zero-stage 1
exact "--grad-sync-dtype fp16 (fp32 state) --fp16, tp 2 x dp 2 ZeRO-2" gpt-micro 3 --fp16 --loss-scale 1024 \
  --grad-sync-dtype fp16 --tensor-model-parallel-size 2 --data-parallel-size 2 --zero-stage 2
n32=$(norm); ng=$(norm --grad-sync-dtype bf16); no=$(norm --dtype bf16)
if [ -n "$ng" ] && [ -n "$no" ] && [ "$n32" != "$ng" ] && [ "$n32" != "$no" ]; then
  ok "the dtypes are used: step 1's $n32 in fp32, $ng with bf16 gradients, $no with bf16 state"
else fail "the NeMo dtypes change the bits" "fp32 $n32 grad $ng state $no"; fi
nhg=$(norm --grad-sync-dtype fp16); nho=$(norm --dtype fp16)
if [ -n "$nhg" ] && [ -n "$nho" ] && [ "$n32" != "$nhg" ] && [ "$n32" != "$nho" ] && [ "$nhg" != "$ng" ] && [ "$nho" != "$no" ]; then
  ok "the fp16 dtypes are used: step 1's $nhg with fp16 gradients, $nho with fp16 state"
else fail "the NeMo fp16 dtypes change the bits" "fp32 $n32 grad $nhg state $nho"; fi
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
"$P" train --model gpt-micro --steps 2 $M4 $F16 --save "$w/f16" >/dev/null 2>&1
exact "an fp16 checkpoint (its loss scaler) resumed on dp 2 ZeRO-1" gpt-micro 2 $M4 $F16 --load "$w/f16" \
  --data-parallel-size 2 --zero-stage 1
"$P" train --model gpt-micro --bf16 --steps 1 --save "$w/bf" >/dev/null 2>&1
refuse "a bf16 checkpoint loaded as fp32" "its precision is bf16, here fp32" -- \
  "$P" train --model gpt-micro --steps 1 --load "$w/bf"
exact "a bf16 checkpoint resumed on dp 2 ZeRO-3" gpt-micro 2 --bf16 --load "$w/bf" --data-parallel-size 2 --zero-stage 3

echo "RESULT test_precision.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
