#!/usr/bin/env bash
# bench_tp.sh - tensor parallelism on gpt-small, in one run: the median
# step (barrier to barrier, as bench_dp.sh) at tp = 1, 2, 4 (and 8 when the
# tiles admit it) as a ratio to tp = 1, with device 0's tensor-parallel
# traffic per step next to Megatron's formula (the report's verdict) and
# the bytes that exactness adds. gpt-small's own tiles (128 features) admit
# tp <= 2 only, so every degree runs with --tile-features 64: 8 heads of
# D = 32 (two a tile), h = 256 and V = 256 in 4 tiles, F = 1024 in 4 tiles
# of 256, so tp = 4 is the largest; tp = 8 would cut a tile in half. A
# different tile grid is a different golden run (I1): the ratios compare
# layouts of the same grid. "cpu x" is the run's CPU time over tp = 1's:
# the cores a layout costs, which other processes' load changes far less
# than the wall time. Also the golden gpt-small step at its own tiles and,
# when BENCH_TP_BASELINE names an earlier parity binary, against it in the
# same run, e.g. the commit before tensor parallelism:
#   git archive 9b366b4 | tar -x -C /tmp/base && make -C /tmp/base build/parity
#   BENCH_TP_BASELINE=/tmp/base/build/parity make bench
# Reports, never asserts. On a 2-core machine tp = 4 runs four device
# threads on two cores: it measures oversubscription, not scaling.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$root/build/parity}
steps=${BENCH_TP_STEPS:-8}
tiles="--tile-features 64"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

. "$root/tests/bench/machine.sh"
bench_machine
echo "gpt-small $tiles, $steps steps each, fwd + bwd + AdamW, 8 x 128 tokens a step"

median() { sed -nE 's/.*step median ([0-9.]+) ms.*/\1/p' "$1" | head -1; }
# device 0's tensor-parallel bus bytes per step (the report's measured column)
tp_mb() { awk '$7 == "|" && $1 ~ /^(all_reduce|reduce_scatter|all_gather)$/ {s += $6} END {printf "%.2f", s / 1e6}' "$1"; }
verdict() {
  if grep -q "measured = formula" "$1"; then echo "= formula"
  elif grep -q "DIFFER" "$1"; then echo "DIFFERS"; else echo "-"; fi
}
extra() { sed -nE 's/.*open sums as fp64 \+([0-9.]+) MB over fp32.*/+\1 MB/p' "$1" | head -1; }

printf '%-4s %10s %9s %9s %14s %10s %16s\n' tp "step ms" "speed-up" "cpu x" "tp MB/step" "formula" \
  "fp64 over fp32"
base=""; base_cpu=""
TIMEFORMAT='%3U %3S'
for tp in 1 2 4 8; do
  f="$tmp/tp$tp"
  # the whole process's CPU seconds (user + system): what the layout costs
  # in cores, which other processes' load changes far less than wall time
  if ! { time "$PARITY" train --model gpt-small $tiles --tensor-model-parallel-size "$tp" \
           --steps "$steps" >"$f" 2>&1; } 2>"$f.cpu"; then
    printf '%-4s %s\n' "$tp" "not admitted: $(tail -1 "$f" | cut -c1-110)"
    continue
  fi
  ms=$(median "$f"); cpu=$(awk '{print $1 + $2}' "$f.cpu")
  [ -z "$base" ] && base=$ms && base_cpu=$cpu
  if [ "$tp" = 1 ]; then mb="-"; v="-"; x="-"; else mb=$(tp_mb "$f"); v=$(verdict "$f"); x=$(extra "$f"); fi
  printf '%-4s %10s %8sx %8sx %14s %10s %16s\n' "$tp" "$ms" \
    "$(awk -v a="$ms" -v b="$base" 'BEGIN{printf "%.2f", b/a}')" \
    "$(awk -v a="$cpu" -v b="$base_cpu" 'BEGIN{printf "%.2f", a/b}')" "$mb" "$v" "${x:--}"
done
echo "(speed-up = tp=1 / tp=N on the same tiles; cpu x = the run's CPU seconds / tp=1's, set-up included;"
echo " tp MB/step: device 0's bus bytes in its tensor-parallel group, nccl-tests convention; formula:"
echo " every collective's calls, elements and bytes equal Megatron's count)"

# the golden step: its own tiles, one device, no layout
golden() { # label binary
  local f="$tmp/golden_$1"
  if "$2" train --model gpt-small --steps "$((steps * 2))" --quiet >"$f" 2>&1; then
    printf '%-40s %8s ms wall  %8s ms cpu\n' "$1" "$(median "$f")" \
      "$(sed -nE 's/.*cpu median ([0-9.]+) ms.*/\1/p' "$f")"
  else
    printf '%-40s failed: %s\n' "$1" "$(tail -1 "$f")"
  fi
}
golden "golden gpt-small (this parity)" "$PARITY"
cpu_of() { sed -nE 's/.*cpu median ([0-9.]+) ms.*/\1/p' "$tmp/golden_$1"; }
g=$(cpu_of "golden gpt-small (this parity)")
if [ -n "${BENCH_TP_BASELINE:-}" ] && [ -x "$BENCH_TP_BASELINE" ]; then
  golden "golden gpt-small (BENCH_TP_BASELINE)" "$BENCH_TP_BASELINE"
  b=$(cpu_of "golden gpt-small (BENCH_TP_BASELINE)")
  [ -n "$g" ] && [ -n "$b" ] && awk -v a="$g" -v b="$b" 'BEGIN{printf "golden step vs the baseline, same run (cpu): %.3fx (%s)\n", a/b, (a <= b*1.02 ? "no slower" : "SLOWER")}'
fi
echo "(load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; tp > $(nproc) oversubscribes the cores)"
exit 0
