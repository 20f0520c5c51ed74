#!/usr/bin/env bash
# bench_tp_modes.sh - Colossal-AI's tensor-parallel modes against 1-D
# (Megatron) at the same device count, in one run: 4 devices = 1-D tp=4
# vs 2-D q=2; 8 devices = 1-D tp=8 vs 2.5-D q=2 d=2 vs 3-D q=2; 9 = 2-D
# q=3 (uneven blocks; 1-D tp=9 cannot split 8 heads). On gpt-tiny, and
# on gpt-small with --tile-features 64 (as bench_tp.sh: its own 128-wide
# tiles give 2 hidden tiles, q = 2 columns at most, and admit 1-D tp <= 2;
# a different tile grid is a different golden run, so the ratios compare
# layouts of one grid), plus gpt-small's own tiles in 2-D q=2.
# Per layout: the median step (barrier to barrier) and the run's CPU
# seconds as ratios to 1-D at the same device count; device 0's
# tensor-parallel bus bytes per step (the report's measured column,
# families tp + tp2, 3-D's + tp-vec) against 1-D's, and the report's
# verdict against its formula (1-D: Megatron's; 2-D, 2.5-D, 3-D: derived
# from tp2d.c and tp3d.c); 2.5-D's gradient reduction over depth (tp3) on
# its own; one layer's bus bytes against Colossal-AI's table (bandwidth
# 2(P-1)/P, 6(q-1)/q, 3(q-1)(d+1)/(d q), 6(q-1)/q^3 of b·s·h, in fp32
# bytes). Reports, never asserts. On a 2-core machine 4 to
# 9 device threads oversubscribe the cores: the step times measure that.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$root/build/parity}
steps=${BENCH_TP_MODES_STEPS:-4}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

. "$root/tests/bench/machine.sh"
bench_machine
echo "$steps steps a layout, fwd + bwd + AdamW; gpt-tiny 24 x 32 tokens a step, gpt-small 8 x 128"

median() { sed -nE 's/.*step median ([0-9.]+) ms.*/\1/p' "$1" | head -1; }
# device 0's tensor-parallel bus bytes per step: the report's table, measured side
tp_mb() { awk '$7 == "|" && $1 ~ /^(all_reduce|reduce_scatter|all_gather|broadcast)$/ {s += $6} END {printf "%.2f", s / 1e6}' "$1"; }
verdict() {
  if grep -q "measured = formula: calls" "$1" && ! grep -q "DIFFER" "$1"; then echo "= formula"
  elif grep -q "DIFFER" "$1"; then echo "DIFFERS"; else echo "-"; fi
}
# 2.5-D: the depth's gradient reduction, bus bytes per step
depth_mb() {
  sed -nE 's/.*measured per step: reduce-scatter of open sums [0-9]+ B \(bus ([0-9]+)\), all-gather of fp32 [0-9]+ B \(bus ([0-9]+)\).*/\1 \2/p' "$1" |
    awk '{printf "%.2f", ($1 + $2) / 1e6}'
}
# one layer's bus bytes over Colossal-AI's row for the mode, in fp32 bytes
paper_x() {
  local table layer
  table=$(sed -nE "s/.*Colossal-AI's table.* -> ([0-9]+) elements.*/\1/p" "$1" | head -1)
  layer=$(sed -nE 's/.*parity.s layer above: [0-9]+ bus elements = [0-9.]+x the table.s \(([0-9]+) B bus\).*/\1/p; s/.*per layer per microbatch \(derived.*elements, [0-9]+ B, ([0-9]+) B bus;.*/\1/p' "$1" | head -1)
  [ -n "$table" ] && [ -n "$layer" ] && awk -v t="$table" -v l="$layer" 'BEGIN{printf "%.2fx", l / (4 * t)}' || echo "-"
}

printf '%-15s %4s %-13s %9s %7s %7s %10s %7s %9s %9s %8s\n' model devs layout "step ms" "time x" "cpu x" \
  "tp MB/step" "MB x" formula "depth MB" "vs paper"
TIMEFORMAT='%3U %3S'
base_ms=""; base_cpu=""; base_mb=""
row() { # model label devices base(1: 1-D reference of this device count) args...
  local model=$1 label=$2 devs=$3 isbase=$4; shift 4
  local f="$tmp/run" name=$model
  case "$model" in *--tile-features*) name="${model%% *} tf${model##* }" ;; esac
  # $model may carry --tile-features: split on purpose
  # shellcheck disable=SC2086
  if ! { time "$PARITY" train --model $model --steps "$steps" "$@" >"$f" 2>&1; } 2>"$f.cpu"; then
    printf '%-15s %4s %-13s %s\n' "$name" "$devs" "$label" "not admitted: $(tail -1 "$f" | cut -c1-100)"
    [ "$isbase" = 1 ] && base_ms="" && base_cpu="" && base_mb=""
    return
  fi
  local ms cpu mb dmb
  ms=$(median "$f"); cpu=$(awk '{print $1 + $2}' "$f.cpu"); mb=$(tp_mb "$f"); dmb=$(depth_mb "$f")
  if [ "$isbase" = 1 ]; then base_ms=$ms; base_cpu=$cpu; base_mb=$mb; fi
  ratio() { [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2fx", a / b}' || echo "-"; }
  printf '%-15s %4s %-13s %9s %7s %7s %10s %7s %9s %9s %8s\n' "$name" "$devs" "$label" "$ms" \
    "$(ratio "$ms" "$base_ms")" "$(ratio "$cpu" "$base_cpu")" "$mb" "$(ratio "$mb" "$base_mb")" \
    "$(verdict "$f")" "${dmb:--}" "$(paper_x "$f")"
  # the blocks' share of the open reduce-scatters (2-D, 3-D modes)
  sed -nE 's/.*reduce-scatters per step: ([0-9]+) B of which the blocks they complete are ([0-9]+) B \(([0-9.]+)%\).*/    open reduce-scatters \1 B a step, \3% of it the blocks they complete (the rest: padding of uneven blocks)/p' "$f"
}

for m in "gpt-tiny" "gpt-small --tile-features 64"; do
  row "$m" "1d tp=4" 4 1 --tensor-model-parallel-size 4
  row "$m" "2d q=2" 4 0 --tensor-model-parallel-size 4 --tensor-parallel-mode 2d
  row "$m" "1d tp=8" 8 1 --tensor-model-parallel-size 8
  row "$m" "2.5d q=2 d=2" 8 0 --tensor-model-parallel-size 8 --tensor-parallel-mode 2.5d --tensor-parallel-depth 2
  row "$m" "3d q=2" 8 0 --tensor-model-parallel-size 8 --tensor-parallel-mode 3d
done
base_ms=""; base_cpu=""; base_mb=""
row "gpt-tiny" "2d q=3" 9 0 --tensor-model-parallel-size 9 --tensor-parallel-mode 2d
row "gpt-small" "2d q=2" 4 0 --tensor-model-parallel-size 4 --tensor-parallel-mode 2d
echo "(tf64: --tile-features 64; time x, cpu x, MB x: over 1-D at the same device count and tiles;"
echo " cpu: the run's CPU seconds, set-up included; tp MB/step: device 0's bus bytes in its tensor-parallel groups, nccl-tests"
echo " convention; formula: every collective's calls, elements and bytes equal the report's formula;"
echo " depth MB: 2.5-D's gradient reduction over depth (tp3), bus; vs paper: one layer's bus bytes over"
echo " Colossal-AI's bandwidth row for the mode read as a fraction of b·s·h in fp32 bytes; 3-D's row counts one [h, h]"
echo " linear a layer, parity's 4 linears and exact sums move more: see the report)"
echo "(load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores)"
exit 0
