#!/usr/bin/env bash
# bench_large.sh - the golden step at a real size (issue 25): the
# built-in gpt-124m (GPT-2 small's shape: vocab 50304, seq 1024,
# hidden 768, 12 heads, 12 layers, tied head, batch 1 x 1024 tokens) against
# PyTorch CPU eager fp32 with one thread on the same shape, and where the
# golden step's time goes. Reports, never asserts: it prints figures and
# exits 0 whatever they are. About 8-10 minutes on an idle 2-core machine:
# the golden run on the portable backend (golden/'s bits) and PyTorch side
# by side, tp 2 and tp 4 on the same shape, then the golden run on the
# OpenBLAS backend (the default).
#
# One perf-sampled golden run gives both the step medians (perf at
# $BENCH_LARGE_FREQ Hz costs well under 1%) and the phase split, taken
# from the samples after step 0 (start-up and the first step's one-time
# work are left out with perf report --time's percentage range).
#
# Uses $PARITY (the parity program); BENCH_LARGE_STEPS (default 4) golden
# steps (the first is not timed), BENCH_LARGE_TORCH_STEPS (default 3)
# timed PyTorch steps after 2 warm-up steps.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$root/build/parity}
STEPS=${BENCH_LARGE_STEPS:-4}
TSTEPS=${BENCH_LARGE_TORCH_STEPS:-3}
FREQ=${BENCH_LARGE_FREQ:-199}
model=gpt-124m
anchors="$root/../shared/anchors"
cd "$root" # parity finds ref/data/corpus.txt here
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$root/tests/bench/machine.sh"
bench_machine
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores (timings under load are noisy)"

# ---- the golden step and PyTorch eager, side by side ---------------------------
# This machine's speed drifts by up to 40% over minutes (a shared VM), so
# the two runs go at the same time, each pinned to a core of its own
# where there are two: the drift then hits both alike. Each figure is the
# median of its steady steps: the golden run's after step 0 (which first
# touches every buffer; the start-up line below counts it), PyTorch's
# after 2 warm-up steps. One thread each.
# torch.set_num_threads(1) does not reach the OpenBLAS Debian's torch 1.13
# multiplies with, so OPENBLAS_NUM_THREADS=1 pins it too (bench_gpt.sh).
# The tokens are random ids: which ids a step sees does not change its work.
perf_ok=0
command -v perf >/dev/null && perf_ok=1
pin_parity= pin_torch= side=sequential
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
  pin_parity="taskset -c 0" pin_torch="taskset -c 1" side="side by side on cores 0 and 1"
fi
torch_ok=0
[ -f "$anchors/torch_gpt_model.py" ] && /usr/bin/python3 -c "import torch" 2>/dev/null && torch_ok=1
run_torch() {
  OPENBLAS_NUM_THREADS=1 $pin_torch /usr/bin/python3 - "$anchors/torch_gpt_model.py" "$TSTEPS" >"$tmp/torch" 2>&1 <<'EOF'
import importlib.util, sys, time, torch
spec = importlib.util.spec_from_file_location("g", sys.argv[1])
g = importlib.util.module_from_spec(spec); spec.loader.exec_module(g)
V, S, D, H, L, B = 50304, 1024, 768, 12, 12, 1  # parity's built-in gpt-124m
torch.manual_seed(0); torch.set_num_threads(1)
m = g.GPT(V, S, D, H, L); opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
idx = torch.randint(0, V, (B, S)); tgt = torch.randint(0, V, (B, S))
def step():
    opt.zero_grad(); loss = m(idx, tgt); loss.backward(); opt.step()
for _ in range(2): step()
ts = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); step(); ts.append(time.perf_counter() - t)
ts.sort()
print(f"torch {torch.__version__} threads={torch.get_num_threads()} "
      f"params={sum(p.numel() for p in m.parameters())} step median={ts[len(ts) // 2] * 1e3:.1f} ms")
EOF
}
run_golden() {
  if [ "$perf_ok" = 1 ]; then
    $pin_parity perf record -q -F "$FREQ" -o "$tmp/perf.data" "$PARITY" train --model "$model" \
      --steps "$STEPS" --backend portable >"$tmp/run" 2>"$tmp/perr" && return
    perf_ok=0 # perf may not sample here: time it without
  fi
  $pin_parity "$PARITY" train --model "$model" --steps "$STEPS" --backend portable >"$tmp/run" 2>&1
}
if [ "$torch_ok" = 1 ] && [ -n "$pin_torch" ]; then run_torch & fi
t0=$(date +%s%N)
run_golden
t1=$(date +%s%N)
wait
if [ "$torch_ok" = 1 ] && [ -z "$pin_torch" ]; then run_torch; fi
summary=$(grep '^summary:' "$tmp/run")
if [ -z "$summary" ]; then
  echo "golden gpt-124m run failed: $(tail -2 "$tmp/run" "$tmp/perr" 2>/dev/null)"; exit 0
fi
# The median of a run's steady steps (1 ..): each step line ends "| <ms> ms".
steady_median() {
  sed -nE 's/^step +([0-9]+) \|.*\| +([0-9.]+) ms$/\1 \2/p' "$1" |
    awk '$1 > 0 {print $2}' | sort -g | awk '{v[NR] = $1} END{if (NR) print v[int((NR + 1) / 2)]}'
}
wall=$(steady_median "$tmp/run")
mem=$(sed -nE 's/^memory estimate of the run: .* = ([0-9.]+ [KMG]B)$/\1/p' "$tmp/run")
torch_ms=
if [ "$torch_ok" = 1 ]; then
  torch_ms=$(sed -nE 's/.*step median=([0-9.]+) ms.*/\1/p' "$tmp/torch")
  [ -n "$torch_ms" ] || echo "PyTorch run failed: $(tail -1 "$tmp/torch")"
else
  echo "PyTorch skipped: needs $anchors/torch_gpt_model.py and /usr/bin/python3 with torch"
fi

# ---- figures -----------------------------------------------------------------
echo "gpt-124m (124,475,904 params), 1 x 1024 tokens a step, fwd + bwd + AdamW, one thread each, $side"
printf '%-56s %9s ms   (memory estimate %s)\n' \
  "parity golden, portable backend, median of steps 1..$((STEPS - 1))" "${wall:-?}" "${mem:-?}"
if [ -n "$torch_ms" ]; then
  printf '%-56s %9s ms   (%s)\n' "PyTorch CPU eager fp32, median of $TSTEPS after 2 warm-up" \
    "$torch_ms" "$(cut -c1-14 "$tmp/torch" | head -1)"
  [ -n "$wall" ] && awk -v t="$torch_ms" -v w="$wall" 'BEGIN{
    printf "golden step vs PyTorch eager, one thread each: %.2fx PyTorch'"'"'s speed (>= 1: no slower)\n", t / w }'
fi

# ---- bytes per parameter and start-up ------------------------------------------
# The estimate equals the allocation (test_memest); everything but the
# activations, over the parameter count the run prints.
params=$(sed -nE 's/.*\(([0-9]+) parameters.*/\1/p' "$tmp/run" | head -1)
sed -n 's/^memory estimate per device: //p' "$tmp/run" | tr ',' '\n' | awk -v P="$params" '
  { sub(/= .*/, ""); n = $(NF - 1); u = $NF; what = $0; sub(/ [0-9.]+ [KMG]B *$/, "", what); gsub(/^ +/, "", what)
    b = n * (u == "GB" ? 1e9 : u == "MB" ? 1e6 : 1e3)
    if (what == "activations") act = b; else { rest = rest sprintf(" %s %.2f", what, b / P); tot += b } }
  END { if (P > 0) printf "bytes per parameter on one device, activations aside: %.2f (%s; activations %.2f GB more)\n", tot / P, substr(rest, 2), act / 1e9 }'
# Start-up: the run's wall time less its steps' (initialising 124M
# parameters, the first-use tile checks, and the exit's unmapping).
steps_ms=$(sed -nE 's/^step +[0-9]+ \|.*\| +([0-9.]+) ms$/\1/p' "$tmp/run" | awk '{s += $1} END{print s + 0}')
awk -v a="$t0" -v b="$t1" -v s="$steps_ms" 'BEGIN{printf "start-up and exit (the run'"'"'s wall less its steps'"'"'): %.1f s\n", (b - a) / 1e9 - s / 1e3}'

# ---- tensor parallelism on the same shape ----------------------------------------
# tp 2: 393 vocabulary tiles each; tp 4: 197, 197, 196, 196 (uneven whole
# tiles). A layout run prints no time a step, so both sides are the
# summary's step median over all $STEPS steps (step 0 included).
# The device threads share this machine's cores: tp 4 on 2 cores waits.
gsum=$(sed -nE 's/^summary: .*step median ([0-9.]+) ms.*/\1/p' "$tmp/run")
for tp in 2 4; do
  if "$PARITY" train --model "$model" --steps "$STEPS" --backend portable --tensor-model-parallel-size "$tp" >"$tmp/tp$tp" 2>&1 &&
     tw=$(sed -nE 's/^summary: .*step median ([0-9.]+) ms.*/\1/p' "$tmp/tp$tp") && [ -n "$tw" ]; then
    awk -v t="$tp" -v w="$tw" -v g="$gsum" 'BEGIN{printf "tp %d step median (wall): %9.1f ms: %.2fx the golden step'"'"'s speed (%s ms)\n", t, w, g / w, g}'
  else
    echo "tp $tp run failed: $(tail -1 "$tmp/tp$tp")"
  fi
done

# ---- the same golden run on the OpenBLAS backend (the default) -----------------
# Its bits are this CPU's, not golden/'s; where the portable vector kernel
# runs (AVX2), this is the comparison that says what owning the order costs.
if "$PARITY" train --model "$model" --steps "$STEPS" --backend openblas >"$tmp/ob" 2>&1 &&
   oc=$(steady_median "$tmp/ob") && [ -n "$oc" ]; then
  awk -v o="$oc" -v c="$wall" -v tc="$torch_ms" 'BEGIN{
    printf "OpenBLAS backend (the default) step median: %9.1f ms: the portable backend is %.2fx its speed", o, o / c
    if (tc != "") printf "; it is %.2fx PyTorch eager'"'"'s (run after, not beside, it)", tc / o
    printf "\n" }'
else
  echo "OpenBLAS backend run failed: $(tail -1 "$tmp/ob")"
fi

# ---- where the golden step's time goes ---------------------------------------
if [ "$perf_ok" = 1 ]; then
  # The samples after step 0: the run's wall time less the later steps'.
  later_ms=$(sed -nE 's/^step +([0-9]+) \|.*\| +([0-9.]+) ms$/\1 \2/p' "$tmp/run" | awk '$1 > 0 {s += $2} END{print s + 0}')
  from=$(awk -v a="$t0" -v b="$t1" -v l="$later_ms" 'BEGIN{t = (b - a) / 1e6; f = 100 * (t - l) / t; printf "%.1f", (f > 0 ? f : 0)}')
  perf report -i "$tmp/perf.data" --time "$from%-100%" --no-children --sort symbol --stdio 2>/dev/null |
    awk '/^ +[0-9.]+%/ {sub(/%/, "", $1); print $1, $3}' >"$tmp/syms"
  echo "where the golden step's time goes (perf samples of steps 1..$((STEPS - 1)); phases as in bench_phases.sh):"
  awk -f "$root/tests/bench/phases.awk" "$tmp/syms"
  echo "top symbols:"
  head -8 "$tmp/syms" | awk '{printf "  %5.1f%%  %s\n", $1, $2}'
else
  echo "phases skipped: perf is not installed or may not sample here"
fi
exit 0
