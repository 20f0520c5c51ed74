#!/usr/bin/env bash
# test_ckpt.sh - layout-free checkpoints (`parity train --save DIR` /
# `--load DIR`, include/parity/ckpt.h) from the outside:
#  - a run saved after 2 steps and resumed for 2 more gives every tensor
#    of steps 2 and 3 with the bits of an uninterrupted 4-step golden run,
#    whatever layout saved it and whatever layout resumes it (tp, dp,
#    ZeRO 0-3, accumulation, overlap);
#  - a checkpoint is layout-free in the strictest sense: every layout
#    writes the golden run's file byte for byte, and a resumed run saves
#    the uninterrupted run's file;
#  - bad input (a missing, corrupt or foreign checkpoint, another model,
#    an unusable --save) is refused with a non-zero exit that is not a
#    signal, a message naming the field or file, and no file created or
#    changed;
#  - --fp16 runs save the loss scaler's state and resume with the
#    uninterrupted run's bits; the broken variant fp16-scale-lost (the
#    scaler reset on load) is caught.
# Ends with "RESULT test_ckpt.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/parity-ckpt-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

M=(--model gpt-tiny --backend portable --quiet)
TP4DP2=(--tensor-model-parallel-size 4 --data-parallel-size 2)
# train NAME ARGS...: a run that must succeed (a failure is reported as NAME)
train() {
  local name=$1; shift
  if "$PARITY" train "${M[@]}" "$@" >"$tmp/out" 2>"$tmp/err"; then return 0; fi
  fail "$name" "parity train $* failed:" "$(tail -3 "$tmp/err")"
  return 1
}

# the uninterrupted golden run: steps 2 and 3 dumped, its state after step 3 saved
train "golden 4 steps" --steps 4 --dump "$tmp/full.st" --dump-steps 2,3 --save "$tmp/full4" || {
  echo "RESULT test_ckpt.sh: $passed passed, $((failed + 1)) failed"; exit 1; }
n_step=$("$PARITY" diff "$tmp/full.st" "$tmp/full.st" --max-rows 100000 | grep -c '^step[23]\.')

# same_steps NAME DUMP: every step2.* and step3.* tensor of DUMP is
# present and bit-exact against the uninterrupted run's
same_steps() {
  local name=$1 dump=$2
  "$PARITY" diff "$tmp/full.st" "$dump" --max-rows 100000 >"$tmp/diff" 2>&1
  local n bad
  n=$(grep -c '^step[23]\.' "$tmp/diff")
  bad=$(grep '^step[23]\.' "$tmp/diff" | grep -vc 'bit-exact')
  if [ "$n_step" -gt 0 ] && [ "$n" -eq "$n_step" ] && [ "$bad" -eq 0 ]; then
    ok "$name: $n tensors of steps 2-3 bit-exact"
  else
    fail "$name: $bad of $n tensors of steps 2-3 differ (want $n_step, all bit-exact)" \
      "$(grep '^step[23]\.' "$tmp/diff" | grep -v 'bit-exact' | head -3)"
  fi
}

# same_file NAME A B: two checkpoints byte for byte
same_file() {
  if cmp -s "$2/model.safetensors" "$3/model.safetensors"; then ok "$1"
  else fail "$1" "$(cmp "$2/model.safetensors" "$3/model.safetensors" 2>&1 | head -1)"; fi
}

# resume NAME CKPT ARGS...: steps 2-3 from CKPT on the layout ARGS
resume() {
  local name=$1 ck=$2; shift 2
  rm -f "$tmp/r.st"
  train "$name" --steps 2 --load "$ck" --dump "$tmp/r.st" --dump-steps 2,3 "$@" && same_steps "$name" "$tmp/r.st"
}

# --- (a) golden -> golden ---
train "golden save" --steps 2 --save "$tmp/A" && ok "golden: 2 steps saved"
resume "(a) golden save, golden resume" "$tmp/A" --save "$tmp/A4"
same_file "(a) a resumed run saves the uninterrupted run's checkpoint" "$tmp/A4" "$tmp/full4"
resume "golden resume with another micro batch (it changes no bit)" "$tmp/A" --micro-batch-size 6

# --- (b) tp=1 -> tp=4 x dp=2 ---
train "tp=1 layout save" --steps 2 --tensor-model-parallel-size 1 --save "$tmp/T1" &&
  same_file "(b) the tp=1 layout writes the golden checkpoint" "$tmp/T1" "$tmp/A"
resume "(b) tp=1 save, tp=4 x dp=2 (DDP) resume" "$tmp/T1" "${TP4DP2[@]}"
resume "(b) tp=1 save, tp=4 x dp=2 ZeRO-1 resume" "$tmp/T1" "${TP4DP2[@]}" --zero-stage 1 \
  --save "$tmp/B4"
same_file "(b) tp=4 x dp=2 ZeRO-1 resumed saves the uninterrupted checkpoint" "$tmp/B4" "$tmp/full4"

# --- (c) tp=4 x dp=2 ZeRO-1 -> tp=1 ---
train "tp=4 x dp=2 ZeRO-1 save" --steps 2 "${TP4DP2[@]}" --zero-stage 1 --save "$tmp/C" &&
  same_file "(c) tp=4 x dp=2 ZeRO-1 writes the golden checkpoint" "$tmp/C" "$tmp/A"
resume "(c) tp=4 x dp=2 ZeRO-1 save, golden resume" "$tmp/C"
resume "(c) tp=4 x dp=2 ZeRO-1 save, tp=1 layout resume" "$tmp/C" --tensor-model-parallel-size 1

# --- (d) ZeRO-3 dp=2 -> ZeRO-0 tp=2 ---
train "ZeRO-3 dp=2 save" --steps 2 --data-parallel-size 2 --zero-stage 3 --save "$tmp/D" &&
  same_file "(d) ZeRO-3 dp=2 writes the golden checkpoint" "$tmp/D" "$tmp/A"
resume "(d) ZeRO-3 dp=2 save, ZeRO-0 tp=2 resume" "$tmp/D" --tensor-model-parallel-size 2 --zero-stage 0

# --- more layouts resuming: ZeRO-3 shards, ZeRO-2 with accumulation, overlap, ring ---
resume "golden save, tp=2 x dp=2 ZeRO-3 resume" "$tmp/A" --tensor-model-parallel-size 2 \
  --data-parallel-size 2 --zero-stage 3
resume "golden save, dp=4 ZeRO-2 accum 2 overlap ring resume" "$tmp/A" --data-parallel-size 4 \
  --zero-stage 2 --accum-degree 2 --overlap-grad-reduce --overlap-param-gather --coll-algo ring
train "tp=2 x dp=3 ZeRO-2 save" --steps 2 --tensor-model-parallel-size 2 --data-parallel-size 3 \
  --zero-stage 2 --save "$tmp/E" &&
  same_file "tp=2 x dp=3 ZeRO-2 (uneven bucket pieces) writes the golden checkpoint" "$tmp/E" "$tmp/A"

# --- (e) pipeline stages: a 3-D layout saves and resumes ---
PP3D=(--pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 --data-parallel-size 2 --num-microbatches 2)
train "pp=2 x tp=2 x dp=2 ZeRO-1 save" --steps 2 "${PP3D[@]}" --zero-stage 1 --save "$tmp/P" &&
  same_file "(e) pp=2 x tp=2 x dp=2 ZeRO-1 writes the golden checkpoint" "$tmp/P" "$tmp/A"
resume "(e) pp=2 x tp=2 x dp=2 save, golden resume" "$tmp/P"
resume "(e) golden save, pp=4 interleaved x dp=2 ZeRO-3 resume" "$tmp/A" --pipeline-model-parallel-size 4 \
  --virtual-pipeline-model-parallel-size 2 --num-microbatches 4 --data-parallel-size 2 --zero-stage 3 \
  --save "$tmp/P4"
same_file "(e) the pp=4 interleaved ZeRO-3 resumed run saves the uninterrupted checkpoint" "$tmp/P4" "$tmp/full4"

# --- (f) context parallelism: ZeRO shards over dp x cp, positions split ---
train "cp=2 ring x dp=2 ZeRO-2 save" --steps 2 --context-parallel-size 2 --data-parallel-size 2 \
  --zero-stage 2 --save "$tmp/CP" &&
  same_file "(f) cp=2 x dp=2 ZeRO-2 writes the golden checkpoint" "$tmp/CP" "$tmp/A"
resume "(f) golden save, Ulysses cp=2 x tp=2 ZeRO-1 resume" "$tmp/A" --context-parallel-size 2 \
  --cp-comm-type a2a --tensor-model-parallel-size 2 --zero-stage 1

# --- saving into the directory loaded from ---
cp -r "$tmp/A" "$tmp/S"
train "load and save one directory" --steps 2 --load "$tmp/S" --save "$tmp/S" "${TP4DP2[@]}" &&
  same_file "--load DIR --save DIR: replaced by the step-4 checkpoint" "$tmp/S" "$tmp/full4"
if [ "$(ls -A "$tmp/S")" = "model.safetensors" ]; then ok "--save leaves only model.safetensors"
else fail "--save leaves only model.safetensors" "$(ls -A "$tmp/S")"; fi

# --- parity check from a checkpoint: both runs start there ---
if "$PARITY" check "${M[@]}" --steps 2 --load "$tmp/A" --tensor-model-parallel-size 2 \
     --data-parallel-size 2 --zero-stage 2 >"$tmp/out" 2>&1 && grep -q '| yes$' "$tmp/out"; then
  ok "parity check --load: bit-exact from the checkpoint"
else
  fail "parity check --load: bit-exact from the checkpoint" "$(tail -5 "$tmp/out")"
fi

# --- bad input: refused, named, nothing written ---
w="$tmp/w"
mkdir -p "$w/empty" "$w/trunc" "$w/flip" "$w/dump" "$w/good"
cp "$tmp/A/model.safetensors" "$w/good/"
head -c 100000 "$tmp/A/model.safetensors" >"$w/trunc/model.safetensors"
cp "$tmp/A/model.safetensors" "$w/flip/"
size=$(stat -c %s "$w/flip/model.safetensors")
printf '\x55' | dd of="$w/flip/model.safetensors" bs=1 seek=$((size - 1000)) conv=notrunc 2>/dev/null
cp "$tmp/full.st" "$w/dump/model.safetensors"
echo "not a checkpoint" >"$w/file"
snapshot() { (cd "$w" && find . -printf '%p %y %s\n' | sort && find . -type f -exec sha256sum {} + | sort); }
snapshot >"$tmp/before"

# expect_error NAME PATTERN CMD ARGS...: non-zero exit (not a signal), stderr
# matching PATTERN, the work directory unchanged
expect_error() {
  local name=$1 pat=$2 cmd=$3; shift 3
  "$PARITY" "$cmd" "${M[@]}" "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ "$rc" -eq 0 ]; then fail "$name" "exit 0, expected an error"; return; fi
  if [ "$rc" -ge 128 ]; then fail "$name" "killed by signal $((rc - 128))" "$(tail -3 "$tmp/err")"; return; fi
  if ! grep -qE -- "$pat" "$tmp/err"; then fail "$name" "message does not match /$pat/:" "$(cat "$tmp/err")"; return; fi
  snapshot >"$tmp/after"
  if ! cmp -s "$tmp/before" "$tmp/after"; then fail "$name" "the work directory changed:" "$(diff "$tmp/before" "$tmp/after" | head -5)"; return; fi
  ok "$name  ($(head -1 "$tmp/err"))"
}
expect_error "(e) missing checkpoint directory" "--load '.*/none': cannot open" train --steps 1 --load "$w/none"
expect_error "(e) directory without a checkpoint" "model.safetensors.*cannot open" train --steps 1 --load "$w/empty"
expect_error "(e) a file as the checkpoint directory" "not a directory" train --steps 1 --load "$w/file"
expect_error "(e) truncated checkpoint" "trunc/model.safetensors" train --steps 1 --load "$w/trunc"
expect_error "(e) a flipped bit in the data" "corrupt.*SHA-256" train --steps 1 --load "$w/flip"
expect_error "(e) a dump is not a checkpoint" "not a parity checkpoint.*parity-dump-1" train --steps 1 --load "$w/dump"
expect_error "(e) another model: layers" "field 'layers' is 8 in the checkpoint, 2 here" train --steps 1 --load "$w/good" --num-layers 2
expect_error "(e) another model on a layout: layers" "field 'layers' is 8 in the checkpoint, 4 here" train --steps 1 --load "$w/good" --num-layers 4 --tensor-model-parallel-size 2
expect_error "(e) another learning rate" "field 'lr'" train --steps 1 --load "$w/good" --lr 0.002
expect_error "(e) another token tile" "field 'tiles.tokens'" train --steps 1 --load "$w/good" --tile-tokens 8
expect_error "(e) another seed" "field 'seed'" check --steps 1 --load "$w/good" --seed 7 --data-parallel-size 2
expect_error "(e) --dump-steps before the checkpoint's step" "--dump-steps: step 1 is not run.*2\.\.3" train --steps 2 --load "$w/good" --dump "$w/x.st" --dump-steps 1
expect_error "(e) --save onto a file" "--save '.*/file': not a directory" train --steps 1 --save "$w/file"
expect_error "(e) --save under a missing directory" "--save '.*/none/ck': cannot create the directory" train --steps 1 --save "$w/none/ck"
expect_error "(e) parity check --save" "--save: the checker.*saves nothing" check --steps 1 --save "$w/new"
expect_error "(e) --print-config with --load" "--print-config" train --print-config --load "$w/good"
expect_error "(e) --dump onto the checkpoint file" "is the checkpoint file of --save" train --steps 1 --save "$w/good" --dump "$w/good/model.safetensors"
expect_error "(e) --load needs a value" "--load" train --steps 1 --load

# a save that fails while writing (a full disk: a file-size limit) keeps
# the old checkpoint and leaves no partial file nor a new directory
(ulimit -f 1024; exec "$PARITY" train "${M[@]}" --steps 1 --save "$w/good") >"$tmp/out" 2>"$tmp/err"; rc=$?
snapshot >"$tmp/after"
if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && grep -q "write failed" "$tmp/err" && cmp -s "$tmp/before" "$tmp/after"; then
  ok "(e) a failed save keeps the old checkpoint intact ($(head -1 "$tmp/err"))"
else
  fail "(e) a failed save keeps the old checkpoint intact" "exit $rc" "$(head -2 "$tmp/err")" "$(diff "$tmp/before" "$tmp/after" | head -3)"
fi
(ulimit -f 1024; exec "$PARITY" train "${M[@]}" --steps 1 --save "$w/new") >"$tmp/out" 2>"$tmp/err"; rc=$?
snapshot >"$tmp/after"
if [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] && cmp -s "$tmp/before" "$tmp/after"; then
  ok "(e) a failed save into a new directory leaves nothing"
else
  fail "(e) a failed save into a new directory leaves nothing" "exit $rc" "$(diff "$tmp/before" "$tmp/after" | head -3)"
fi

# --- (g) --fp16: the loss scaler's state travels (scale, clean steps,
# hysteresis, skipped steps); gpt-micro overflows at steps 0 and 1 (both
# skipped, the scale halved twice: adam_t 0 at step 2), then grows ---
M=(--model gpt-micro --backend portable --quiet --fp16 --initial-loss-scale 4194304 --hysteresis 1
   --loss-scale-window 2)
train "fp16 golden 4 steps" --steps 4 --dump "$tmp/full.st" --dump-steps 2,3 --save "$tmp/F16full4" &&
  n_step=$("$PARITY" diff "$tmp/full.st" "$tmp/full.st" --max-rows 100000 | grep -c '^step[23]\.')
train "fp16 golden save" --steps 2 --save "$tmp/F16" && ok "fp16 golden: 2 steps (both skipped) saved"
if grep -aq 'scale 1048576 growth 0 hysteresis_left -1 skipped 2' "$tmp/F16/model.safetensors"; then
  ok "(g) the fp16 checkpoint holds the scaler: scale 2^20 after two halvings, 2 skipped (Megatron's hysteresis goes below 0 until the scale grows)"
else fail "(g) the fp16 checkpoint holds the scaler" "$(grep -ao 'scale [^"]*' "$tmp/F16/model.safetensors")"; fi
resume "(g) fp16 golden save, golden resume" "$tmp/F16" --save "$tmp/F16r4"
same_file "(g) an fp16 resumed run saves the uninterrupted run's checkpoint" "$tmp/F16r4" "$tmp/F16full4"
resume "(g) fp16 golden save, tp=2 x dp=2 ZeRO-1 resume" "$tmp/F16" --tensor-model-parallel-size 2 \
  --data-parallel-size 2 --zero-stage 1
train "fp16 dp=2 ZeRO-3 save" --steps 2 --data-parallel-size 2 --zero-stage 3 --save "$tmp/F16z" &&
  same_file "(g) fp16 dp=2 ZeRO-3 writes the golden checkpoint" "$tmp/F16z" "$tmp/F16"
if "$PARITY" check "${M[@]}" --steps 2 --load "$tmp/F16" --data-parallel-size 2 --zero-stage 2 \
     --test-broken fp16-scale-lost >"$tmp/out" 2>&1; then
  fail "(g) fp16-scale-lost: caught" "exit 0"
elif grep -q 'tensor      step2.grad_input.head' "$tmp/out"; then
  ok "(g) fp16-scale-lost (the scaler reset on load) is caught at step 2's first gradient"
else fail "(g) fp16-scale-lost: caught at step2.grad_input.head" "$(grep -m3 'tensor\|produced' "$tmp/out")"; fi
M=(--model gpt-micro --backend portable --quiet)
expect_error "(g) an fp16 checkpoint into an fp32 run" "precision is fp16, here fp32" \
  train --steps 1 --load "$tmp/F16"
M=(--model gpt-tiny --backend portable --quiet --fp16)
expect_error "(g) an fp32 checkpoint into an fp16 run" "precision is fp32, here fp16" train --steps 1 --load "$w/good"

echo "RESULT test_ckpt.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
