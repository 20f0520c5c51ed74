#!/usr/bin/env bash
# bench_phases.sh - where the golden gpt-small step spends its time, by
# phase: perf samples of the steps (start-up skipped), each function put
# in one phase by its name. Reports, never asserts; prints why when perf
# cannot sample (not installed, or perf_event_paranoid forbids it).
#
#   GEMM kernel       OpenBLAS's compute kernels (sgemm_kernel, the small-
#                     matrix kernels)
#   GEMM packing      OpenBLAS copying operands into its panels, and
#                     clearing C for beta = 0 (memset)
#   exact sums        the K-tile folds, row and array sums, open
#                     accumulators, superaccumulators, rounding
#   elementwise       GeLU, exp/softmax, LayerNorm, bias, dropout, residual,
#                     embedding, loss
#   optimizer         AdamW and gradient clipping's norm
#   collectives       coll_* (none in a one-device run)
#   page faults       the kernel handing the process fresh (cleared) pages
#   other             everything else (kernel, libc, the driver)
#
# Uses $PARITY (the parity program).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$root/build/parity}
STEPS=${BENCH_PHASES_STEPS:-12}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

if ! command -v perf >/dev/null; then
  echo "phases skipped: needs perf (Debian linux-perf)"; exit 0
fi
# Start-up (parameter init, the OpenBLAS self-check) is skipped: its
# length is the run's wall time less the steps' time.
t0=$(date +%s%N)
"$PARITY" train --model gpt-small --steps 2 --quiet >"$tmp/one" 2>&1 || { echo "phases: parity failed: $(tail -1 "$tmp/one")"; exit 0; }
t1=$(date +%s%N)
steps_ms=$(sed -nE 's/.*total ([0-9.]+) s.*/\1/p' "$tmp/one" | awk '{print $1 * 1000}')
delay=$(awk -v a="$t0" -v b="$t1" -v s="$steps_ms" 'BEGIN{d = (b - a) / 1e6 - s; print (d > 0 ? int(d) + 50 : 0)}')
if ! perf record -q -D "$delay" -o "$tmp/perf.data" "$PARITY" train --model gpt-small --steps "$STEPS" --quiet >"$tmp/run" 2>"$tmp/perr"; then
  echo "phases skipped: perf record failed: $(tail -1 "$tmp/perr")"; exit 0
fi
perf report -i "$tmp/perf.data" --no-children --sort symbol --stdio 2>/dev/null |
  awk '/^ +[0-9.]+%/ {sub(/%/, "", $1); print $1, $3}' >"$tmp/syms"
awk -f "$root/tests/bench/phases.awk" "$tmp/syms"
echo "(perf samples of $STEPS golden gpt-small steps, OpenBLAS backend, start-up skipped; $(sed -nE 's/.*cpu median ([0-9.]+) ms.*/cpu median \1 ms a step/p' "$tmp/run"))"
