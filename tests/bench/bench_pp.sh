#!/usr/bin/env bash
# bench_pp.sh - pipeline parallelism, in one run:
#  1. the bubble each schedule measures against its theory, at pp = 4 with
#     m = 8 and m = 16 microbatches: GPipe, 1F1B, interleaved, and the
#     split-backward ZB-H1, ZB-V and DualPipeV, side by side; gpt-small
#     with 8 layers (two a stage; interleaving, ZB-V, DualPipeV: 2 chunks
#     of one) and a batch of 16 sequences. The
#     measured bubble is the mean over devices of 1 - (forward + backward
#     seconds) / (the step's start to the last backward anywhere), the
#     report's figure; theory (p-1)/(m+p-1), / v interleaved; the split
#     schedules' own simulation at T_F = T_B = T_W (pp_bubble_formula:
#     ZB-H1's (p-1)/(3m+p-1), a third of 1F1B's). With pp = 4
#     device threads on fewer cores a stage also waits for a core, so the
#     measured bubble here is not the schedule's alone;
#  2. per stage: activation slots (the schedule's formula, and what the
#     stage held at most) and the activation high-water in MB;
#  3. a 3-D layout of gpt-small (dp 2 x tp 2 x pp 2, 1F1B, 4 microbatches)
#     against the golden step, same run: median step (barrier to barrier)
#     and the process's CPU seconds as ratios.
# Reports, never asserts.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$root/build/parity}
steps=${BENCH_PP_STEPS:-4}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$root/tests/bench/machine.sh"
bench_machine
model="--model gpt-small --num-layers 8 --global-batch-size 16"
echo "bubble: gpt-small with 8 layers, a batch of 16 x 128 tokens, pp = 4, $steps steps each"
printf '%-12s %4s %10s %10s %10s   %s\n' schedule m "measured" "theory" "step ms" \
  "per stage: slots formula/held, activations MB"
for m in 8 16; do
  for s in gpipe 1f1b interleaved zb-h1 zb-v dualpipev; do
    f="$tmp/$s$m"
    extra=""; [ "$s" = interleaved ] && extra="--virtual-pipeline-model-parallel-size 2"
    if ! "$PARITY" train $model --steps "$steps" --pipeline-model-parallel-size 4 \
         --pipeline-schedule "$s" --num-microbatches "$m" $extra >"$f" 2>&1; then
      printf '%-12s %4s failed: %s\n' "$s" "$m" "$(tail -1 "$f" | cut -c1-100)"; continue
    fi
    meas=$(sed -nE 's/.*bubble: measured ([0-9.]+%).*/\1/p' "$f")
    theory=$(sed -nE 's/.*theory .* = ([0-9.]+%).*/\1/p' "$f")
    ms=$(sed -nE 's/.*step median ([0-9.]+) ms.*/\1/p' "$f")
    stages=$(awk '/^  stage device units/ {on = 1; next} on && $1 ~ /^[0-9]+$/ {
                    printf "%s%d/%d %.1f", sep, $(NF-5), $(NF-4), $(NF-2); sep = ", "; next } on {on = 0}' "$f")
    printf '%-12s %4s %10s %10s %10s   %s\n' "$s" "$m" "$meas" "$theory" "$ms" "$stages"
  done
done
echo "(slots: (microbatch, chunk) pairs; GPipe holds m, 1F1B min(pp - r, m), interleaved"
echo " min(warm-up + 1, m v) chunks of half a stage, ZB-H1 min(pp, m), ZB-V min(2 pp, 2 m),"
echo " DualPipeV 2 pp + 1 (until W); MB: the stage's activation high-water)"

echo
echo "3-D gpt-small against the golden step, same run, $((steps * 2)) steps each"
TIMEFORMAT='%3U %3S'
run() { # label args...
  local label=$1; shift
  local f="$tmp/run_$label"
  if { time "$PARITY" train --model gpt-small --steps "$((steps * 2))" --quiet "$@" >"$f" 2>&1; } 2>"$f.cpu"; then
    echo "$(sed -nE 's/.*step median ([0-9.]+) ms.*/\1/p' "$f") $(awk '{print $1 + $2}' "$f.cpu")"
  else
    echo "failed: $(tail -1 "$f")" >&2; echo "- -"
  fi
}
read -r g_ms g_cpu < <(run golden)
read -r d_ms d_cpu < <(run 3d --data-parallel-size 2 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --num-microbatches 4)
printf '%-34s %10s %10s\n' layout "step ms" "cpu s"
printf '%-34s %10s %10s\n' "golden (1 device)" "$g_ms" "$g_cpu"
printf '%-34s %10s %10s\n' "dp2 x tp2 x pp2, 1F1B, m=4" "$d_ms" "$d_cpu"
awk -v a="$d_ms" -v b="$g_ms" -v c="$d_cpu" -v d="$g_cpu" -v n="$(nproc)" 'BEGIN { if (a != "-" && b != "-")
  printf "3-D / golden: step %.2fx, CPU %.2fx (8 device threads on %d cores)\n", a / b, c / d, n }'
echo "(load average $(cut -d' ' -f1-3 /proc/loadavg))"
exit 0
