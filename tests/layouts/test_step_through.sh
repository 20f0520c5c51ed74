#!/usr/bin/env bash
# test_step_through.sh - step-through mode (--step-through, runtime.h)
# gives the threaded run's bits on the representatives of the layout
# matrix, refuses bad values, and works in gdb: a scripted batch session
# stops device 3 of a dp 2 x tp 2 + SP x pp 2 run inside a collective,
# prints `parity devices` and `parity where` for all eight devices, steps
# device 3 through the collective, continues, and the run's digests equal
# the threaded run's. (gdb: .ci/run installs it; without it the session
# is skipped with a note.)
# Ends with "RESULT test_step_through.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/parity-step-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

# same NAME FLAGS...: threaded, stepping and stepping with a focus device
# give the same digests of every tensor of two steps
same() {
  local name=$1; shift
  local base=(train --steps 2 --quiet "$@")
  if ! "$PARITY" "${base[@]}" --digest "$tmp/th.txt" >"$tmp/th.log" 2>&1; then
    fail "$name: threaded run" "$(tail -3 "$tmp/th.log")"; return
  fi
  for mode in --step-through --step-through=1; do
    if ! "$PARITY" "${base[@]}" "$mode" --digest "$tmp/st.txt" >"$tmp/st.log" 2>&1; then
      fail "$name $mode: run" "$(tail -3 "$tmp/st.log")"; continue
    fi
    if cmp -s "$tmp/th.txt" "$tmp/st.txt" && [ "$(wc -l <"$tmp/th.txt")" -gt 50 ]; then
      ok "$name $mode: digests equal the threaded run's ($(wc -l <"$tmp/th.txt") tensors)"
    else
      fail "$name $mode: digests differ" "$(diff "$tmp/th.txt" "$tmp/st.txt" | head -3)"
    fi
  done
}

M=(--model gpt-micro)
same "dp 4 ZeRO-1, overlapped reduction" "${M[@]}" --data-parallel-size 4 --zero-stage 1 \
  --overlap-grad-reduce --overlap-param-gather --bucket-cap-mb 0.001
same "dp 2 ZeRO-3" "${M[@]}" --data-parallel-size 2 --zero-stage 3
same "tp 2 + SP" "${M[@]}" --tensor-model-parallel-size 2 --sequence-parallel
same "pp 2 interleaved" --model gpt-tiny --global-batch-size 8 --pipeline-model-parallel-size 2 \
  --pipeline-schedule interleaved --virtual-pipeline-model-parallel-size 2 --num-microbatches 4
same "cp 2 ring" "${M[@]}" --context-parallel-size 2 --cp-comm-type p2p
same "cp 2 all-to-all" "${M[@]}" --context-parallel-size 2 --cp-comm-type a2a
same "3-D dp 2 x tp 2 + SP x pp 2" "${M[@]}" --data-parallel-size 2 --tensor-model-parallel-size 2 \
  --sequence-parallel --pipeline-model-parallel-size 2 --num-microbatches 2
same "encoder mesh etp 1 < tp 2 + SP, epp 1 pp 2 x dp 2" --model llava-tiny --data-parallel-size 2 \
  --tensor-model-parallel-size 2 --encoder-tensor-model-parallel-size 1 --sequence-parallel \
  --encoder-pipeline-model-parallel-size 1 --pipeline-model-parallel-size 2 --num-microbatches 2

# refused with a message naming the flag or variable, exit 2
refused() {
  local name=$1 want=$2; shift 2
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" <<<"$out"; then ok "$name"
  else fail "$name" "rc $rc, want '$want' in: $out"; fi
}
refused "--step-through=4 on 4 devices" "--step-through=4: the layout has devices 0 .. 3" \
  "$PARITY" train "${M[@]}" --steps 1 --data-parallel-size 4 --step-through=4
refused "--step-through=x" "--step-through: expected an integer" \
  "$PARITY" train "${M[@]}" --steps 1 --step-through=x
refused "--step-through twice" "are one flag" \
  "$PARITY" train "${M[@]}" --steps 1 --step-through --step-through=0
refused "--step-through with --print-layout" "step through" \
  "$PARITY" train "${M[@]}" --print-layout --step-through
refused "PARITY_STEP_THROUGH=yes" "PARITY_STEP_THROUGH='yes' is not valid" \
  env PARITY_STEP_THROUGH=yes "$PARITY" train "${M[@]}" --steps 1
refused "PARITY_STEP_THROUGH_DEVICE=9 on 2 devices" "step-through: device 9 is not in the run" \
  env PARITY_STEP_THROUGH_DEVICE=9 "$PARITY" train "${M[@]}" --steps 1 --data-parallel-size 2

# the environment turns it on like the flag (same bits)
"$PARITY" train "${M[@]}" --steps 2 --quiet --data-parallel-size 2 --digest "$tmp/a.txt" >/dev/null 2>&1
PARITY_STEP_THROUGH=1 "$PARITY" train "${M[@]}" --steps 2 --quiet --data-parallel-size 2 \
  --digest "$tmp/b.txt" >/dev/null 2>&1
if cmp -s "$tmp/a.txt" "$tmp/b.txt"; then ok "PARITY_STEP_THROUGH=1: same digests"
else fail "PARITY_STEP_THROUGH=1: digests differ"; fi

# ---- the scripted gdb session ----
L=(--model gpt-tiny --steps 2 --quiet --data-parallel-size 2 --tensor-model-parallel-size 2
   --sequence-parallel --pipeline-model-parallel-size 2)
if ! command -v gdb >/dev/null; then
  echo "note: gdb is not installed; the scripted session is skipped (.ci/run installs it)"
elif ! "$PARITY" train "${L[@]}" --digest "$tmp/threaded.txt" >/dev/null 2>&1; then
  fail "gdb: the threaded run"
else
  cat >"$tmp/session.gdb" <<'GDB'
set pagination off
set confirm off
source ref/debug/parity_gdb.py
parity break-collective 3 reduce-scatter
run
echo === devices\n
parity devices
echo === where\n
parity where
frame function gpt_unit_forward
echo === tensor\n
parity tensor g layers.0.self_attention.query_key_value.weight 4
parity placement g->table.info[g->table.unit_first[1] + 2]
print g->table.info[g->table.unit_first[1] + 2]
echo === finish\n
parity finish-collective
echo === after\n
parity devices
delete
continue
GDB
  # LeakSanitizer cannot run under ptrace: an ASan build would exit 1 at the end
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
  timeout 300 gdb -q -batch -nx -x "$tmp/session.gdb" --args "$PARITY" train "${L[@]}" --step-through \
    --digest "$tmp/gdb.txt" >"$tmp/gdb.log" 2>&1
  rc=$?
  log=$tmp/gdb.log
  sec() { sed -n "/^=== $1\$/,/^===/p" "$log"; }
  [ $rc -eq 0 ] && grep -q "exited normally" "$log" && ok "gdb: the session ran to the end" ||
    fail "gdb: the session (rc $rc)" "$(tail -5 "$log")"
  n=$(sec devices | grep -cE '^  device [0-7] \(tp [01], cp 0, ep 0, dp [01], pp [01]\) thread [0-9]+: ')
  [ "$n" -eq 8 ] && ok "gdb: parity devices lists all eight with their coordinates" ||
    fail "gdb: parity devices ($n of 8)" "$(sec devices | head -12)"
  sec devices | grep -q "device 3 (tp 1, cp 0, ep 0, dp 1, pp 0) thread [0-9]*: step 0 forward unit 0 mb 0; RUNNING (holds the baton); waits in reduce-scatter call #1 of group 'tp1' (rank 1 of 2)" &&
    ok "gdb: device 3 is stopped inside the sequence-parallel reduce-scatter, holding the baton" ||
    fail "gdb: device 3's line" "$(sec devices | grep 'device 3')"
  n=$(sec where | grep -cE '^  device [0-7] ')
  w3=$(sec where | grep -A1 '^  device 3 ')
  if [ "$n" -eq 8 ] && grep -q "reduce-scatter call #1 of group 'tp1'" <<<"$w3" &&
     grep -q "called from sp_reduce_scatter_f32 (ref/model/styles/tp.c:" <<<"$w3"; then
    ok "gdb: parity where names each device's wait point and its caller"
  else fail "gdb: parity where" "$(sec where | head -20)"; fi
  sec tensor | grep -q "layers.0.self_attention.query_key_value.weight: global shape \[.*\]; axis 0 split over tp" &&
    sec tensor | grep -q "this device 3 (tp 1, .*) holds \[" && sec tensor | grep -q "first 4 values: " &&
    ok "gdb: parity tensor and parity placement" || fail "gdb: parity tensor" "$(sec tensor)"
  sec tensor | grep -qE '^\$1 = layers\.0\.self_attention\.query_key_value\.weight: local \[[0-9]+, [0-9]+\] at offset [0-9]+; global shape \[[0-9]+, [0-9]+\]; axis 0 split over tp' &&
    ok "gdb: param_info_t pretty-printed" || fail "gdb: the pretty-printer" "$(sec tensor | tail -3)"
  # leaving: device 3 still holds the baton, and its tp partner has moved on
  if grep -q "hit Temporary breakpoint .*coll_activity_exit (world_rank=3)" "$log" &&
     sec after | grep -q "^  device 3 .*RUNNING (holds the baton)" &&
     ! sec after | grep -q "^  device 2 .*reduce-scatter call #1 "; then
    ok "gdb: device 3 stepped through the collective"
  else fail "gdb: finish-collective" "$(sec after | head -10)"; fi
  if cmp -s "$tmp/threaded.txt" "$tmp/gdb.txt" && [ -s "$tmp/gdb.txt" ]; then
    ok "gdb: the run's digests equal the threaded run's"
  else fail "gdb: digests differ from the threaded run's"; fi
fi

echo "RESULT test_step_through.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
