#!/usr/bin/env bash
# bench_cp.sh - context parallelism, in one run: gpt-small with a longer
# sequence (T = 1024 positions, eight 128-token tiles; a batch of 2
# sequences, dropout off as gpt-small has it) at cp = 1 (the golden
# step), the ring at cp = 2 and 4 and Ulysses at 2 and 4:
#  - median step (barrier to barrier) and the process's CPU seconds, as
#    ratios to the golden run's;
#  - activation memory per device (the high-water) against the golden
#    run's: attention scores [b, H, T/cp, T] and token tensors shrink by cp;
#  - the context-parallel group's bytes per step against the report's
#    formulas (ring: K, V blocks and the dK/dV open sums; Ulysses: the
#    four all-to-alls), and what exactness adds.
# cp device threads share this machine's cores, so a step can only get
# faster where there are cores to spare. Reports, never asserts.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$root/build/parity}
steps=${BENCH_CP_STEPS:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$root/tests/bench/machine.sh"
bench_machine
model="--model gpt-small --seq-length 1024 --global-batch-size 2"
echo "gpt-small, T = 1024 (tile 128), batch 2, $steps steps each"
TIMEFORMAT='%3U %3S'
printf '%-16s %8s %8s %8s %8s %10s   %s\n' layout "step ms" "x gold" "cpu s" "x gold" "act. MB" \
  "cp traffic MB/step: measured vs formula"
g_ms=""; g_cpu=""
for spec in "golden" "p2p 2" "p2p 4" "a2a 2" "a2a 4"; do
  set -- $spec
  f="$tmp/${1}${2:-}"
  args=""; [ "$1" != golden ] && args="--context-parallel-size $2 --cp-comm-type $1"
  if ! { time "$PARITY" train $model --steps "$steps" $args >"$f" 2>&1; } 2>"$f.cpu"; then
    printf '%-16s failed: %s\n' "$spec" "$(tail -1 "$f" | cut -c1-100)"; continue
  fi
  ms=$(sed -nE 's/.*step median ([0-9.]+) ms.*/\1/p' "$f")
  cpu=$(awk '{print $1 + $2}' "$f.cpu")
  if [ "$1" = golden ]; then
    g_ms=$ms; g_cpu=$cpu
    act=$(sed -nE 's/.*activations ([0-9.]+) MB.*/\1/p' "$f" | head -1)
    traffic="-"
  else
    act=$(sed -nE 's/.*activations per device: measured ([0-9.]+) MB.*/\1/p' "$f")
    traffic=$(sed -nE 's/.* ([0-9.]+) MB   formula [^=]*= ([0-9.]+) MB.*/\1 vs \2/p;
                       s/^  exactness adds ([0-9.]+) MB.*/exactness adds \1/p' "$f" | paste -sd';' -)
  fi
  printf '%-16s %8s %8s %8s %8s %10s   %s\n' "$spec" "$ms" \
    "$(awk -v a="$ms" -v b="$g_ms" 'BEGIN { if (b > 0) printf "%.2f", a / b }')" "$cpu" \
    "$(awk -v a="$cpu" -v b="$g_cpu" 'BEGIN { if (b > 0) printf "%.2f", a / b }')" "$act" "$traffic"
done
echo "(x gold: ratio to the golden step; act. MB: a device's activation high-water (golden: the"
echo " estimate the allocation is held equal to); cp device"
echo " threads on $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg))"
exit 0
