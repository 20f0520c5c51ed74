#!/usr/bin/env bash
# Data parallelism on gpt-small: median step time (barrier to barrier, as
# PyTorch's DDP anchor times it) at dp = 1, 2, 4, 8, as a ratio to dp = 1,
# the share of device 0's time spent in exact reductions, in other
# collectives and in the optimizer (barrier waits count in the phase
# that waited), and PyTorch DDP over gloo (../shared/anchors/torch_ddp_gpt.py)
# at the same dp in the same run when python3 has torch. Also parity with
# the distributed optimizer (ZeRO-1: AdamW on a 1/dp shard, then a
# parameter all-gather), which has the same bits and moves less memory
# per device. Every layout gives
# the golden bits (make check); this measures what that costs. On a 2-core
# machine dp > 2 oversubscribes the cores: compare on the 16-core one.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$root/build/parity}
steps=${BENCH_DP_STEPS:-8}
anchor=${TORCH_DDP_ANCHOR:-$root/../shared/anchors/torch_ddp_gpt.py}
# Debian's python3-torch lives in /usr/bin/python3; elsewhere take PATH's.
py=${PYTHON:-/usr/bin/python3}
"$py" -c "import torch" 2>/dev/null || py=python3
torch_ok=0
[ -f "$anchor" ] && "$py" -c "import torch" 2>/dev/null && torch_ok=1
printf '%-4s %12s %9s %11s %12s %10s %10s %14s %12s\n' dp "parity ms" "speed-up" "exact red." "collectives" "optimizer" "ZeRO-1 ms" "PyTorch DDP ms" "parity vs DDP"
base=""
median() { sed -nE 's/.*step median ([0-9.]+) ms.*/\1/p'; }
for dp in 1 2 4 8; do
  out=$("$PARITY" train --model gpt-small --steps "$steps" --data-parallel-size "$dp" 2>&1) || {
    echo "dp=$dp failed:"; echo "$out" | tail -3; continue; }
  ms=$(echo "$out" | median)
  z1=$("$PARITY" train --model gpt-small --steps "$steps" --data-parallel-size "$dp" --zero-stage 1 \
       --quiet 2>&1 | median)
  red=$(echo "$out" | sed -nE 's/.*exact reductions [0-9.]+ ms \(([0-9.]+)%\).*/\1/p')
  col=$(echo "$out" | sed -nE 's/.*collectives [0-9.]+ ms \(([0-9.]+)%\).*/\1/p')
  opt=$(echo "$out" | sed -nE 's/.*optimizer [0-9.]+ ms \(([0-9.]+)%\).*/\1/p')
  [ -z "$base" ] && base=$ms
  t="-"; vs="-"
  if [ "$torch_ok" = 1 ]; then
    # one thread per rank, as the anchor means: torch.set_num_threads(1)
    # does not pin Debian torch's OpenBLAS (bench_gpt.sh); MKL ignores this
    t=$(OPENBLAS_NUM_THREADS=1 "$py" "$anchor" "$dp" 2>&1 | sed -nE 's/.*step median=([0-9.]+) ms.*/\1/p')
    [ -n "$t" ] && vs=$(awk -v a="$t" -v b="$ms" 'BEGIN{printf "%.2fx %s", a/b, (a>=b?"faster":"slower")}') || t="failed"
  fi
  printf '%-4s %12s %8sx %10s%% %11s%% %9s%% %10s %14s %12s\n' "$dp" "$ms" \
    "$(awk -v a="$ms" -v b="$base" 'BEGIN{printf "%.2f", b/a}')" "$red" "$col" "$opt" "${z1:-failed}" \
    "$t" "$vs"
done
echo "(parity ms, speed-up and vs DDP: ZeRO stage 0, DDP's layout; speed-up = parity dp=1 / parity dp=N; issue 4's target on the 16-core machine: faster than DDP at every dp, >= 6x at dp=8)"
echo "(load average $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores)"
