#!/usr/bin/env bash
# test_plan.sh - `parity plan` (include/parity/plan.h). gpt-small on 8
# devices with a budget 1 MB under plain DP's own estimate (dp 8, ZeRO-0,
# read from --print-layout, never written here): plain DP is not listed,
# every row's memory is at most the budget, the first rows' own
# --print-layout estimates are their rows' figures, rows are sorted by
# cost, --json parses, and the first row runs under --arena-mb BUDGET.
# The communication formulas equal a run's counters on a tp x cp layout,
# stored and recomputed.
# Bad input is refused naming the flag (tests/refuse.sh's rules).
# Ends with "RESULT test_plan.sh: N passed, M failed".
set -u
P=${PARITY:-build/parity}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
cd "$(dirname "$0")/../.."
. tests/refuse.sh parity-plan

# --print-layout's per-device estimate (bytes) of a layout
device_bytes() { "$P" train --model "$1" "${@:2}" --print-layout | grep -oE '"device_bytes": [0-9]+' | grep -oE '[0-9]+'; }
# field F of row I (from 0) of a JSON array file
field() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[int(sys.argv[2])]
for k in sys.argv[3].split('.'): r=r[k]
print(r)" "$1" "$2" "$3"; }

plain=$(device_bytes gpt-small --data-parallel-size 8)
budget=$(awk -v b="$plain" 'BEGIN { printf "%.6f", (b - 1e6) / 1e6 }')
budget_bytes=$(awk -v b="$budget" 'BEGIN { printf "%.0f", b * 1e6 }')
echo "plain DP (dp 8, ZeRO-0) needs $plain bytes a device; budget $budget MB"

table=$("$P" plan --model gpt-small --devices 8 --device-memory-mb "$budget"); rc=$?
if [ $rc = 0 ] && echo "$table" | grep -q '^cost model: step ms = compute / (1 - bubble) + comm /'; then
  ok "plan prints its table and the cost model's formula"
else fail "plan's table" "exit $rc" "$(echo "$table" | head -5)"; fi

"$P" plan --model gpt-small --devices 8 --device-memory-mb "$budget" --json >"$tmp/plan.json"; rc=$?
if [ $rc = 0 ] && python3 -m json.tool "$tmp/plan.json" >/dev/null; then ok "--json is valid JSON"
else fail "--json" "exit $rc" "$(head -c 300 "$tmp/plan.json")"; fi

check=$(python3 - "$tmp/plan.json" "$budget_bytes" <<'EOF'
import json, sys
rows, budget = json.load(open(sys.argv[1])), int(sys.argv[2])
bad = []
if not rows: bad.append("no rows")
for r in rows:
    m = r["memory_bytes"]
    if m["total"] > budget: bad.append("over budget: " + r["flags"])
    if m["total"] != sum(v for k, v in m.items() if k != "total"): bad.append("categories do not sum: " + r["flags"])
    if r["tp"] * r["pp"] * r["cp"] * r["dp"] != 8: bad.append("not 8 devices: " + r["flags"])
    if (r["tp"], r["pp"], r["cp"], r["zero_stage"], r["recompute"]) == (1, 1, 1, 0, "none"):
        bad.append("plain DP listed: " + r["flags"])
    for k in ("precision", "offload", "command"): r[k]
costs = [r["cost_s"] for r in rows]
if costs != sorted(costs): bad.append("not sorted by cost")
print("; ".join(bad) if bad else "ok %d" % len(rows))
EOF
)
case $check in
  ok*) ok "${check#ok } rows: each within the budget, 8 devices, categories summing to the total, plain DP absent, sorted by cost" ;;
  *) fail "the rows" "$check" ;;
esac

# the first rows (and the last) against their own --print-layout estimate
n=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$tmp/plan.json")
for i in 0 1 2 $((n - 1)); do
  [ "$i" -ge 0 ] && [ "$i" -lt "$n" ] || continue
  flags=$(field "$tmp/plan.json" $i flags)
  want=$(field "$tmp/plan.json" $i memory_bytes.total)
  got=$(device_bytes gpt-small $flags)
  if [ -n "$got" ] && [ "$got" = "$want" ] && [ "$got" -le "$budget_bytes" ]; then
    ok "row $((i + 1)): --print-layout's estimate $got = the row's, within the budget ($flags)"
  else fail "row $((i + 1)) ($flags)" "print-layout $got, row $want, budget $budget_bytes"; fi
done

first=$(field "$tmp/plan.json" 0 command)
if echo "$table" | grep -qxF "    $first"; then ok "the table's first command is the JSON's: $first"
else fail "the table's first command" "$first not in the table"; fi

# the first row runs within the budget: the arenas refuse anything over it
flags=$(field "$tmp/plan.json" 0 flags)
out=$("$P" train --model gpt-small $flags --steps 1 --arena-mb "$budget" 2>&1); rc=$?
if [ $rc = 0 ] && echo "$out" | grep -q '^step     0 | loss'; then ok "the first row trains a step under --arena-mb $budget"
else fail "the first row runs under --arena-mb $budget" "exit $rc" "$(echo "$out" | tail -3)"; fi

# estimate = allocation, to the byte: the row's own total as --arena-mb
# runs, one byte less is refused before anything is allocated
need=$(field "$tmp/plan.json" 0 memory_bytes.total)
exact=$(awk -v b="$need" 'BEGIN { printf "%.6f", b / 1e6 }')
short=$(awk -v b="$need" 'BEGIN { printf "%.6f", (b - 1) / 1e6 }')
out=$("$P" train --model gpt-small $flags --steps 1 --quiet --arena-mb "$exact" 2>&1); rc=$?
if [ $rc = 0 ]; then ok "the first row runs with --arena-mb $exact, its own estimate"
else fail "the first row with --arena-mb $exact" "exit $rc" "$(echo "$out" | tail -2)"; fi
refuse "the first row with --arena-mb one byte under its estimate" "more than its capacity --arena-mb" -- \
  "$P" train --model gpt-small $flags --steps 1 --quiet --arena-mb "$short"

"$P" plan --model gpt-small --devices 8 --device-memory-mb "$budget" --json --top 2 >"$tmp/top.json"
if [ "$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$tmp/top.json")" = 2 ] &&
   [ "$(field "$tmp/top.json" 1 flags)" = "$(field "$tmp/plan.json" 1 flags)" ]; then ok "--top 2: the two cheapest"
else fail "--top 2" "$(head -c 300 "$tmp/top.json")"; fi

# the formulas against a run's counters: gpt-tiny tp 2 x cp 2, ZeRO-3, 2
# microbatches, stored and recomputed (its forward's collectives again)
"$P" plan --model gpt-tiny --devices 4 --device-memory-mb 1000 --json >"$tmp/tiny.json"
formulas() { # recompute: none|full
  local row flags out tp_run dp_run cp_run psi tp_plan dp_plan cp_plan
  row=$(python3 -c "import json,sys
rows = json.load(open(sys.argv[1]))
print([i for i, r in enumerate(rows) if (r['tp'], r['cp'], r['zero_stage'], r['micro_batch'], r['recompute']) == (2, 2, 3, 12, sys.argv[2])][0])" "$tmp/tiny.json" "$1")
  flags=$(field "$tmp/tiny.json" "$row" flags)
  out=$("$P" train --model gpt-tiny $flags --steps 1 2>&1)
  tp_run=$(echo "$out" | awk '/^  per step .*measured/ {on = 1; next} on && /^  (all_reduce|all_gather|reduce_scatter) / {s += $6} /measured = formula|DIFFER/ {on = 0} END {print s + 0}')
  # the ZeRO report's figures in Psi elements (3 decimals; its MB have 2):
  # (8 B x reduce-scattered + 4 B x gathered) x (N-1)/N x Psi, N = dp x cp = 2
  psi=$(echo "$out" | grep -oE 'Psi=[0-9]+' | head -1 | cut -d= -f2)
  dp_run=$(echo "$out" | grep -E '(reduce-scatter of exact fp64 sums|all-gather of fp32 values)' | grep -oE '[0-9.]+ Psi elements' |
    awk -v psi="$psi" 'NR == 1 {s += 8 * $1} NR == 2 {s += 4 * $1} END {printf "%.0f", s * psi / 2}')
  cp_run=$(echo "$out" | grep -E '^  (forward K and V|backward dK/dV)' | grep -oE '[0-9.]+ MB   formula' | awk '{s += $1} END {printf "%.3f", s}')
  tp_plan=$(field "$tmp/tiny.json" "$row" comm_bytes_per_step.tp)
  dp_plan=$(field "$tmp/tiny.json" "$row" comm_bytes_per_step.dp)
  cp_plan=$(awk -v b="$(field "$tmp/tiny.json" "$row" comm_bytes_per_step.cp)" 'BEGIN {printf "%.3f", b / 1e6}')
  # tp to the byte, cp to the report's 3 decimals of MB, dp to its Psi figures' (0.1%)
  if [ "$tp_run" = "$tp_plan" ] && [ "$cp_run" = "$cp_plan" ] && [ "$tp_run" != 0 ] && [ "$cp_run" != 0.000 ] &&
     awk -v a="$dp_run" -v b="$dp_plan" 'BEGIN {d = a - b; exit !(b > 0 && d * d <= 1e-6 * b * b)}'; then
    ok "formulas = the run's counters ($flags): tp $tp_plan B, dp $dp_plan B (report $dp_run), cp $cp_plan MB"
  else fail "formulas against the counters ($flags)" "tp plan $tp_plan run $tp_run; dp plan $dp_plan run $dp_run; cp plan $cp_plan run $cp_run"; fi
}
formulas none
formulas full

# nothing fits: the smallest layout's need, from the same estimate
"$P" plan --model gpt-small --devices 8 --device-memory-mb 1e9 --json >"$tmp/all.json"
least=$(python3 -c "import json,sys; print('%.2f' % (min(r['memory_bytes']['total'] for r in json.load(open(sys.argv[1]))) / 1e6))" "$tmp/all.json")
refuse "a budget nothing fits says so, with the smallest layout's need" \
  "nothing fits --device-memory-mb 1: the smallest of the [0-9]+ layouts of gpt-small on 8 devices needs $least MB" -- \
  "$P" plan --model gpt-small --devices 8 --device-memory-mb 1
"$P" plan --model gpt-small --devices 8 --device-memory-mb 1 >/dev/null 2>&1; rc=$?
if [ $rc = 1 ]; then ok "nothing fits: exit 1"; else fail "nothing fits: exit 1" "exit $rc"; fi
refuse "no layout on 7 devices" "nothing fits: no layout of gpt-small runs on --devices 7" -- \
  "$P" plan --model gpt-small --devices 7 --device-memory-mb 1000

# bad input: every flag named
G="$P plan --model gpt-small"
refuse "--devices missing" "--devices N is required" -- $G --device-memory-mb 100
refuse "--device-memory-mb missing" "--device-memory-mb X is required" -- $G --devices 8
refuse "--devices without a value" "--devices" -- $G --device-memory-mb 100 --devices
refuse "--devices followed by a flag" "--devices" -- $G --devices --device-memory-mb 100
refuse "--devices 0" "--devices.*0" -- $G --devices 0 --device-memory-mb 100
refuse "--devices abc" "--devices.*abc" -- $G --devices abc --device-memory-mb 100
refuse "--devices beyond 16384" "--devices.*16385" -- $G --devices 16385 --device-memory-mb 100
refuse "--device-memory-mb -5" "--device-memory-mb.*-5" -- $G --devices 8 --device-memory-mb -5
refuse "--device-memory-mb abc" "--device-memory-mb.*abc" -- $G --devices 8 --device-memory-mb abc
refuse "--device-memory-mb 0" "--device-memory-mb.*'0'" -- $G --devices 8 --device-memory-mb 0
refuse "--device-memory-mb nan" "--device-memory-mb.*nan" -- $G --devices 8 --device-memory-mb nan
refuse "--device-memory-mb under a byte" "--device-memory-mb: '1e-7' MB is less than one byte" -- $G --devices 8 --device-memory-mb 1e-7
refuse "--top 0" "--top.*0" -- $G --devices 8 --device-memory-mb 100 --top 0
refuse "--link-gbs inf" "--link-gbs.*inf" -- $G --devices 8 --device-memory-mb 100 --link-gbs inf
refuse "--device-tflops -1" "--device-tflops.*-1" -- $G --devices 8 --device-memory-mb 100 --device-tflops -1
refuse "--link-gbs 1e-320 (its comm time was inf in the JSON)" "--link-gbs: expected a number from 0.001 to 1e\+06, got '1e-320'" -- $G --devices 8 --device-memory-mb 100 --link-gbs 1e-320 --json
refuse "--link-gbs 1e300" "--link-gbs: expected a number from 0.001 to 1e\+06" -- $G --devices 8 --device-memory-mb 100 --link-gbs 1e300
refuse "--device-tflops 1e-300 (a 300-digit cost)" "--device-tflops: expected a number from 0.001 to 1e\+06, got '1e-300'" -- $G --devices 8 --device-memory-mb 100 --device-tflops 1e-300
refuse "--device-tflops 1e7" "--device-tflops: expected a number from 0.001 to 1e\+06" -- $G --devices 8 --device-memory-mb 100 --device-tflops 1e7
# the ranges' ends: finite numbers only (Python's json.load would take Infinity and NaN)
for rates in "0.001 0.001" "1e6 1e6"; do
  set -- $rates
  "$P" plan --model gpt-small --devices 8 --device-memory-mb 1e9 --device-tflops "$1" --link-gbs "$2" --json --top 50 >"$tmp/ends.json"; rc=$?
  if [ $rc = 0 ] && python3 -c "import json,sys
def bad(c): raise ValueError(c)
json.load(open(sys.argv[1]), parse_constant=bad)" "$tmp/ends.json" && ! grep -qiE 'inf|nan' "$tmp/ends.json"; then
    ok "--device-tflops $1 --link-gbs $2: finite JSON"
  else fail "--device-tflops $1 --link-gbs $2" "exit $rc" "$(head -c 300 "$tmp/ends.json")"; fi
done
refuse "--json twice" "--json given twice" -- $G --devices 8 --device-memory-mb 100 --json --json
refuse "--devices twice" "--devices given twice" -- $G --devices 8 --devices 4 --device-memory-mb 100
refuse "an unknown flag" "unknown option '--arena-mb'" -- $G --devices 8 --device-memory-mb 100 --arena-mb 5
refuse "an unknown model" "--model: unknown model 'gpt-huge'" -- "$P" plan --model gpt-huge --devices 8 --device-memory-mb 100
refuse "a model file that is missing" "/nonexistent-parity-dir/m.json" -- "$P" plan --model /nonexistent-parity-dir/m.json --devices 8 --device-memory-mb 100
refuse "an encoder-decoder" "--model t5-tiny: plan enumerates dense GPT models only" -- "$P" plan --model t5-tiny --devices 8 --device-memory-mb 100

echo "RESULT test_plan.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
