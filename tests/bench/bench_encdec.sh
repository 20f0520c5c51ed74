#!/usr/bin/env bash
# Encoder-decoders (issue 27): the golden t5-small step (7.6M parameters,
# 4 x (128 source + 128 target) tokens, one thread) against PyTorch CPU
# eager float32 of the same model (tests/torch/t5_ref.py, one thread) in
# the same run. parity runs every block on every row of its stream (the
# rows a block does not change are zeroed, MODEL.md), so it computes
# about twice an encoder-decoder's own layer flops at P = T/2; PyTorch
# runs the encoder on the source rows and the decoder on the target rows
# only. Also the bridge: t5-small on an encoder mesh (etp 1 < tp 2,
# epp 1) against the golden step. Reports, never asserts.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$root/build/parity}
steps=${BENCH_ENCDEC_STEPS:-4}
py=/usr/bin/python3
median() { sed -nE 's/.*step median ([0-9.]+) ms.*/\1/p'; }
cfg=$(mktemp /tmp/parity-t5s-XXXXXX.json)
trap 'rm -f "$cfg"' EXIT
"$PARITY" train --model t5-small --print-config > "$cfg" 2>/dev/null
p=$("$PARITY" train --model t5-small --steps "$steps" --quiet 2>&1 | median)
t=""
if "$py" -c 'import torch' 2>/dev/null; then
  t=$("$py" "$root/tests/bench/t5_torch_step.py" "$cfg" "$steps" 2>&1 | sed -nE 's/^torch step median ([0-9.]+) ms$/\1/p')
fi
hout=$("$PARITY" train --model t5-small --steps "$steps" --tensor-model-parallel-size 2 \
      --encoder-tensor-model-parallel-size 1 --encoder-pipeline-model-parallel-size 1 \
      --num-microbatches 2 2>&1)
h=$(echo "$hout" | median)
echo "t5-small, $steps steps a run, medians (ms a step):"
printf '  parity golden step (one thread, stream of 256 rows)   %8s\n' "${p:-failed}"
if [ -n "$t" ] && [ -n "$p" ]; then
  printf '  PyTorch eager float32, one thread (separate rows)     %8s   parity %.2fx its speed\n' "$t" "$(echo "$t / $p" | bc -l)"
else echo "  PyTorch: skipped (needs python3-torch)"; fi
if [ -n "$h" ] && [ -n "$p" ]; then
  printf '  etp 1 < tp 2, epp 1 (1 + 2 devices on %s cores)        %8s   %.2fx the golden step'"'"'s speed\n' "$(nproc)" "$h" "$(echo "$p / $h" | bc -l)"
  # the bridge's traffic and the memory estimate against what the devices used
  echo "$hout" | grep -E '^  encoder-decoder bridge|^memory estimate per device' | sed 's/^ */  /'
  echo "$hout" | awk '/^  [0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +\(peak total/ {
      gsub(/[()]/, ""); if ($NF + 0 > max) max = $NF + 0 }
    END { if (max) printf "  measured peak of the largest device: %.2f MB\n", max }'
fi
