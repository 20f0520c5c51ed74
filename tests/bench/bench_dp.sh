#!/usr/bin/env bash
# Data parallelism on gpt-small: step time at dp = 1, 2, 4, 8 as a ratio
# to dp = 1, and the share of device 0's time spent in exact reductions
# and in collectives. Every layout gives the golden bits (make check); this
# measures what that costs. Wall time includes set-up and is divided by
# the steps; on a 2-core machine dp > 2 oversubscribes the cores.
set -u
PARITY=${PARITY:-build/parity}
steps=${BENCH_DP_STEPS:-4}
printf '%-4s %14s %10s %18s %16s\n' dp "ms/step (wall)" "x dp=1" "exact reductions" "collectives"
base=""
for dp in 1 2 4 8; do
  out=$("$PARITY" train --model gpt-small --steps "$steps" --data-parallel-size "$dp" 2>&1) || {
    echo "dp=$dp failed:"; echo "$out" | tail -3; continue; }
  ms=$(echo "$out" | sed -nE 's/.*\| ([0-9.]+) ms per step.*/\1/p')
  red=$(echo "$out" | sed -nE 's/.*exact reductions [0-9.]+ ms \(([0-9.]+)%\).*/\1/p')
  col=$(echo "$out" | sed -nE 's/.*collectives [0-9.]+ ms \(([0-9.]+)%\).*/\1/p')
  [ -z "$base" ] && base=$ms
  printf '%-4s %14s %10s %17s%% %15s%%\n' "$dp" "$ms" "$(awk -v a="$ms" -v b="$base" 'BEGIN{printf "%.2f", a/b}')" "$red" "$col"
done
echo "(x dp=1 < 1 means faster; PyTorch DDP/gloo anchor on the 16-core machine: 305/190/106/85 ms at dp 1/2/4/8)"
