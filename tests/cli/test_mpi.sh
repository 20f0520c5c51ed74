#!/usr/bin/env bash
# test_mpi.sh - the MPI transport (coll.h) on one machine, processes
# oversubscribing its cores (mpirun --oversubscribe):
#  - every collective and point-to-point form, on 2..5 devices, both
#    algorithms, every dtype, open sums with slow elements: the digests
#    of what each device received are the threaded run's
#    (tests/mpi/mpi_coll.c);
#  - across processes a mismatched collective, a mismatched receive and
#    a missing rank are fatal with the messages that name them;
#  - `mpirun -np N parity check` gives the threaded run's bits for dp
#    (ZeRO-1, ZeRO-3), tp + SP, pp (1F1B, interleaved), cp (ring and
#    Ulysses), a 3-D layout (tp 2 + SP x pp 2 x dp 2) and the ring
#    algorithm with the communication thread: --digest files equal, and
#    the run is bit-exact against the golden run;
#  - a broken variant is caught under mpirun at the tensor the threaded
#    run names; what is not supported across processes is refused.
# Skips (0 passed) when this machine has no mpirun or parity was built
# without MPI. Ends with "RESULT test_mpi.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/parity-mpi-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

if ! command -v mpirun >/dev/null || ! "$BUILD/tests/mpi_coll" 2>&1 | grep -q usage ||
   ! nm "$PARITY" 2>/dev/null | grep -q MPI_Init_thread; then
  echo "SKIP    test_mpi.sh: no mpirun, or parity built without MPI (install libopenmpi-dev)"
  echo "RESULT test_mpi.sh: 0 passed, 0 failed"
  exit 0
fi
# root in CI: OpenMPI refuses root unless told; a watchdog well inside the test's time
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# -k: an mpirun that ignores SIGTERM after an abort is killed 10 s later
MPIRUN=(timeout -k 10 120 mpirun --oversubscribe --mca mpi_yield_when_idle 1)
# under make asan: no leak report for the processes mpirun starts, whose
# leaks are OpenMPI's plugins' (unloaded at exit, so not even named); the
# threaded runs of the same code keep leak detection; under make tsan,
# OpenMPI's own frames are suppressed (tests/mpi/tsan.supp)
MPIRUN=(env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
        TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS }suppressions=$PWD/tests/mpi/tsan.supp" "${MPIRUN[@]}")

# ---- the collectives ----
for n in 2 3 4 5; do
  "$BUILD/tests/mpi_coll" run $n 2>"$tmp/t.err" | sort >"$tmp/threads"
  "${MPIRUN[@]}" -np $n "$BUILD/tests/mpi_coll" run 2>"$tmp/m.err" | sort >"$tmp/procs"
  if [ "$(wc -l <"$tmp/threads")" = $n ] && cmp -s "$tmp/threads" "$tmp/procs"; then
    ok "collectives on $n devices: $n processes receive the bits of $n threads"
  else
    fail "collectives on $n devices" "threads: $(cat "$tmp/threads" "$tmp/t.err")" \
         "processes: $(cat "$tmp/procs"; tail -3 "$tmp/m.err")"
  fi
done

# expect NAME PATTERN -- COMMAND: fails (not by a signal) and says PATTERN
expect() {
  local name=$1 pat=$2; shift 3
  "$@" >"$tmp/out" 2>&1; local rc=$?
  if [ $rc -ne 0 ] && [ $rc -lt 124 ] && grep -Eq -- "$pat" "$tmp/out"; then ok "$name"
  else fail "$name" "exit $rc, expected a message matching: $pat" "$(grep -v '^\[' "$tmp/out" | head -5)"; fi
}
expect "a mismatched collective across processes names both calls" \
  "collective mismatch in group 'world' call #1: rank 0 \(world 0\) called all_reduce\(f32, sum, count=8\) but rank 1 \(world 1\) called all_reduce\(f32, sum, count=4\)" \
  -- "${MPIRUN[@]}" -np 3 "$BUILD/tests/mpi_coll" mismatch
expect "a mismatched receive across processes names both ranks" \
  "p2p mismatch in group 'pair' \(tag 3\): rank 0 \(world 0\) sends 8 f32 to rank 1 but rank 1 \(world 1\) receives 4 f32" \
  -- "${MPIRUN[@]}" -np 2 "$BUILD/tests/mpi_coll" p2p-mismatch
expect "the watchdog names the process that never came" \
  "barrier of group 'world' is still waiting on rank 1 \(world 1, MPI process 1\)" \
  -- env PARITY_COLL_TIMEOUT=2 "${MPIRUN[@]}" -np 3 "$BUILD/tests/mpi_coll" hang

# ---- parity check: the threaded run's digests ----
M=(--model gpt-micro --num-layers 4 --steps 3)
same() { # NAME NP ARGS...
  local name=$1 np=$2; shift 2
  "$PARITY" check "${M[@]}" "$@" --digest "$tmp/threads.sha" >"$tmp/t.out" 2>&1; local rt=$?
  "${MPIRUN[@]}" -np "$np" "$PARITY" check "${M[@]}" "$@" --digest "$tmp/procs.sha" >"$tmp/p.out" 2>&1
  local rp=$?
  if [ $rt = 0 ] && [ $rp = 0 ] && [ -s "$tmp/threads.sha" ] && cmp -s "$tmp/threads.sha" "$tmp/procs.sha" &&
     grep -q '| yes$' "$tmp/p.out"; then
    ok "$name: $np processes, the threaded run's $(wc -l <"$tmp/threads.sha") digests, bit-exact"
  else
    fail "$name" "threads exit $rt, processes exit $rp" "$(grep -v '^\[' "$tmp/p.out" | tail -4)"
  fi
  rm -f "$tmp/threads.sha" "$tmp/procs.sha"
}
same "dp 2 ZeRO-1" 2 --data-parallel-size 2 --zero-stage 1
same "dp 4 ZeRO-3" 4 --data-parallel-size 4 --zero-stage 3
same "tp 2 + SP" 2 --tensor-model-parallel-size 2 --sequence-parallel
same "pp 2 1F1B" 2 --pipeline-model-parallel-size 2 --num-microbatches 4
same "pp 2 interleaved" 2 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
  --num-microbatches 4
same "cp 2 ring" 2 --context-parallel-size 2 --cp-comm-type p2p
same "cp 2 Ulysses" 2 --context-parallel-size 2 --cp-comm-type a2a
same "3-D: tp 2 + SP x pp 2 x dp 2" 8 --tensor-model-parallel-size 2 --sequence-parallel \
  --pipeline-model-parallel-size 2 --data-parallel-size 2 --zero-stage 1 --num-microbatches 2
same "ring algorithm, communication thread" 4 --data-parallel-size 4 --zero-stage 2 --coll-algo ring \
  --overlap-grad-reduce --overlap-param-gather

# ---- a broken variant, and refusals ----
expect "tp-fp32-sums is caught across processes at the threaded run's tensor" \
  "tensor +step0\.act\.layers\.0\.mlp\.dense_4h_to_h\.output" \
  -- "${MPIRUN[@]}" -np 2 "$PARITY" check "${M[@]}" --tensor-model-parallel-size 2 --test-broken tp-fp32-sums
expect "a process count that is not the layout's is refused" \
  "the layout has 4 devices but mpirun started 2 processes" \
  -- "${MPIRUN[@]}" -np 2 "$PARITY" check "${M[@]}" --data-parallel-size 4
expect "--trace is refused across processes" "--trace .*is not supported" \
  -- "${MPIRUN[@]}" -np 2 "$PARITY" check "${M[@]}" --data-parallel-size 2 --trace "$tmp/t.json"
expect "parity train is refused under mpirun" "only .parity check. runs" \
  -- "${MPIRUN[@]}" -np 2 "$PARITY" train "${M[@]}"
if [ ! -e "$tmp/t.json" ]; then ok "the refused run wrote no trace"; else fail "a refused run wrote $tmp/t.json"; fi

# ---- the processes agree on what they were given (coll.h) ----
# agree NAME PATTERN -- MPMD ARGS: refused before any work with PATTERN,
# fast (no watchdog), every process exiting 2 on its own (no MPI_Abort)
# and no output written
agree() {
  local name=$1 pat=$2; shift 3
  rm -f "$tmp/rc."* "$tmp/agree.sha"
  local t0=$SECONDS
  # (mpirun would kill the others once one process exits non-zero: let
  # each end on its own, so that each one's status is seen; mpirun then
  # exits 0 itself, so the statuses are what counts)
  "${MPIRUN[@]}" --mca orte_abort_on_non_zero_status 0 "$@" >"$tmp/out" 2>&1
  local rc=$? took=$((SECONDS - t0))
  local codes; codes=$(cat "$tmp/rc."* 2>/dev/null | sort | uniq -c | tr -s ' ')
  if [ $rc -lt 124 ] && [ "$codes" = " 2 2" ] && [ $took -lt 30 ] &&
     grep -Ezq -- "$pat" "$tmp/out" && ! grep -q MPI_ABORT "$tmp/out" && [ ! -e "$tmp/agree.sha" ]; then
    ok "$name"
  else
    fail "$name" "mpirun exit $rc after $took s, process exits: ${codes:-none}, expected a message matching: $pat" \
         "$(grep -v '^\[' "$tmp/out" | head -5)"
  fi
}
# each process through a shell that records its own exit status
printf '#!/bin/sh\n"%s" "$@"; r=$?; echo $r >"%s/rc.$OMPI_COMM_WORLD_RANK"; exit $r\n' \
  "$(cd "$(dirname "$PARITY")" && pwd)/$(basename "$PARITY")" "$tmp" >"$tmp/rank.sh"
chmod +x "$tmp/rank.sh"
rank() { echo "$tmp/rank.sh"; }
A=(check --model gpt-micro --steps 2 --quiet --data-parallel-size 2)
agree "a different --steps on one process is refused naming the process and the flag" \
  "MPI process 1 was started with other arguments than process 0: argument [0-9]+ is '--steps 3' on process 1 and '--steps 2' on process 0" \
  -- -np 1 $(rank) "${A[@]}" : -np 1 $(rank) check --model gpt-micro --steps 3 --quiet --data-parallel-size 2
agree "a different --seed on one process is refused, not blamed on the layout" \
  "argument [0-9]+ is '--seed 7' on process 1 and nothing on process 0" \
  -- -np 1 $(rank) "${A[@]}" : -np 1 $(rank) "${A[@]}" --seed 7
agree "a different PARITY_BACKEND on one process is refused naming the variable" \
  "PARITY_BACKEND is 'portable' on process 1 and unset on process 0" \
  -- -np 1 $(rank) "${A[@]}" : -np 1 -x PARITY_BACKEND=portable $(rank) "${A[@]}"
agree "--digest on process 1 only is refused, not dropped" \
  "argument [0-9]+ is '--digest $tmp/agree.sha' on process 1 and nothing on process 0" \
  -- -np 1 $(rank) "${A[@]}" : -np 1 $(rank) "${A[@]}" --digest "$tmp/agree.sha"
mkdir -p "$tmp/wa" "$tmp/wb"
head -c 100000 ref/data/corpus.txt >"$tmp/wa/text.txt"
{ head -c 99999 ref/data/corpus.txt; printf '~'; } >"$tmp/wb/text.txt"
agree "the same --data naming other text on two hosts is refused before any step" \
  "MPI process 1 resolved the training text differently from process 0" \
  -- -np 1 -wdir "$tmp/wa" $(rank) "${A[@]}" --data text.txt : -np 1 -wdir "$tmp/wb" $(rank) "${A[@]}" --data text.txt
mkdir -p "$tmp/wc"
agree "a --data missing on one host stops every process, the others not waiting" \
  "data file 'text.txt': cannot open.*MPI process 1 resolved whether its inputs could be read" \
  -- -np 1 -wdir "$tmp/wa" $(rank) "${A[@]}" --data text.txt : -np 1 -wdir "$tmp/wc" $(rank) "${A[@]}" --data text.txt
"${MPIRUN[@]}" -np 1 "$PARITY" "${A[@]}" --digest "$tmp/one.sha" >"$tmp/out" 2>&1; rc=$?
"$PARITY" "${A[@]}" --digest "$tmp/threads.sha" >/dev/null 2>&1
if [ $rc = 0 ] && grep -q "mpirun started 1 process, so the layout's 2 devices run as its threads" "$tmp/out" &&
   cmp -s "$tmp/one.sha" "$tmp/threads.sha"; then
  ok "mpirun -np 1 for a 2-device layout says it runs the devices as threads, with the threaded bits"
else
  fail "mpirun -np 1 for a 2-device layout" "exit $rc" "$(grep -v '^\[' "$tmp/out" | head -5)"
fi

echo "RESULT test_mpi.sh: $passed passed, $failed failed"
[ $failed -eq 0 ]
