#!/usr/bin/env bash
# Mixture of experts on gpt-small (issue 26): the golden step with every
# MLP an MoE of E = 4 experts, top-2, capacity factor 1.25, aux loss on,
# against the dense gpt-small step in the same run (alternating rounds,
# medians), with the expert FLOPs the MoE adds (k x the dense MLP's
# products, plus the rows padded to whole token tiles) for comparison;
# the same MoE at dp 2 and at tp 2 (gpt-small has one token tile a
# sequence, so no SP; each expert's FFN split over tp, etp = tp) as
# ratios to its one-device step; the drops a
# step; and dp 4 at ep 1, 2, 4 as ratios to ep 1, with the ep report's
# all-to-all bytes against the formula. Reports, never asserts.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$root/build/parity}
steps=${BENCH_MOE_STEPS:-6}
MOE="--num-experts 4 --moe-router-topk 2 --moe-expert-capacity-factor 1.25 --moe-aux-loss-coeff 0.01"
median() { sed -nE 's/.*step median ([0-9.]+) ms.*/\1/p'; }
run() { "$PARITY" train --model gpt-small --steps "$steps" --quiet "$@" 2>&1 | median; }
dense=() moe=()
for round in 1 2; do
  dense+=("$(run)")
  # shellcheck disable=SC2086
  moe+=("$(run $MOE)")
done
best() { printf '%s\n' "$@" | sort -n | head -1; }
d=$(best "${dense[@]}") m=$(best "${moe[@]}")
if [ -z "$d" ] || [ -z "$m" ]; then echo "a run failed (dense '$d', moe '$m')"; exit 0; fi
echo "gpt-small, $steps steps a run, best of two alternating rounds (ms a step):"
printf '  dense MLP                 %8.1f\n' "$d"
printf '  MoE E=4 top-2 cf 1.25     %8.1f   %.2fx the dense step\n' "$m" "$(echo "$m / $d" | bc -l)"
# gpt-small: the MLP's products are 2/3 of a layer's linear FLOPs (fc1 +
# fc2 = 16 C^2 of qkv + dense + fc1 + fc2 = 24 C^2 per token); top-2
# doubles them: without the head, 1 + 2/3 = 1.67x the layers' linear work
echo "  (expert work: top-2 runs two MLPs a token, 1.67x a dense layer's linear FLOPs before padding)"
# shellcheck disable=SC2086
out=$("$PARITY" train --model gpt-small --steps 2 $MOE 2>&1)
echo "$out" | grep -E '^  moe (layer 0|aux)' | head -2 | sed 's/^ */  step 0: /'
# expert parallelism: dp 4 with ep 1, 2 and 4 (the ep ranks out of dp), as
# ratios to ep 1, and the all-to-all bytes against the formula (ep report)
e1=""
for ep in 1 2 4; do
  # shellcheck disable=SC2086
  out=$("$PARITY" train --model gpt-small --steps "$steps" $MOE --data-parallel-size 4 --expert-model-parallel-size $ep 2>&1)
  x=$(echo "$out" | median)
  [ -z "$x" ] && { echo "  ep $ep failed: $(echo "$out" | tail -2)"; continue; }
  [ -z "$e1" ] && e1=$x
  a2a=$(echo "$out" | sed -nE 's/^  all-to-all of expert rows, outputs, gradients +([0-9.]+) MB +formula .* = ([0-9.]+) MB .*: ([0-9.]+)x$/\1 MB, formula \2 MB (\3x)/p')
  printf '  MoE dp 4, ep %d                       %8.1f   %.2fx ep 1'"'"'s speed%s\n' "$ep" "$x" "$(echo "$e1 / $x" | bc -l)" "${a2a:+; all-to-all $a2a}"
done
for lay in "--data-parallel-size 2" "--tensor-model-parallel-size 2"; do
  # shellcheck disable=SC2086
  x=$(run $MOE $lay)
  if [ -n "$x" ]; then printf '  MoE %-36s %8.1f   %.2fx the one-device MoE step (2 device threads on %s cores)\n' "$lay" "$x" "$(echo "$m / $x" | bc -l)" "$(nproc)"
  else echo "  MoE $lay failed"; fi
done
