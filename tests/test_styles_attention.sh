#!/usr/bin/env bash
# test_styles_attention.sh - a test-only attention style added from
# outside the library (issue 46, acceptance 1): build/tests/parity-two-passes
# is the parity program linked with tests/styles/attention_two_passes.c
# (the golden core in two passes over the slot's sequences, registered
# ahead of ref/model/styles/styles.c's attention_table; tests/styles_attention.mk).
# `parity check` must find it bit-exact with the golden run (which keeps
# the built-in style: it applies only where heads are cut) in a 3-D
# tensor-parallel layout and with bf16 (1-D tensor parallelism x pp: 3-D
# with bf16 is refused today), show that it ran in two passes, and catch
# it when it is broken (PARITY_TWO_PASSES_BREAK=1).
# Ends with "RESULT test_styles_attention.sh: N passed, M failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
P=$BUILD/tests/parity-two-passes
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

# name, pattern of the layout's row, flags...: bit-exact, and the style ran
# on both halves of a slot's sequences
exact() {
  local name=$1 row=$2; shift 2
  out=$("$P" check "$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] && grep -qE "^$row .*\| yes$" <<<"$out" &&
     grep -qE '^two-passes attention: [1-9][0-9]* \+ [1-9][0-9]* sequences$' <<<"$out"; then
    ok "$name: the two-passes style ran and is bit-exact"
  else fail "$name (rc $rc)" "$(tail -4 <<<"$out")"; fi
}
D3D=(--tensor-model-parallel-size 8 --tensor-parallel-mode 3d --micro-batch-size 8)
exact "3-D tp 8 (2x2x2), gpt-tiny with dropout, 3 steps" 'tp=8 3d\(2x2x2\)' \
  --model gpt-tiny --steps 3 "${D3D[@]}"
exact "bf16, tp 2 x pp 2, gpt-tiny with dropout, 3 steps" 'tp=2 pp=2' \
  --model gpt-tiny --steps 3 --bf16 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --micro-batch-size 4

# the golden run alone does not take it (its heads are whole)
out=$("$P" train --model gpt-tiny --steps 1 --quiet 2>&1)
if ! grep -q 'two-passes' <<<"$out"; then ok "the golden run keeps the built-in style"
else fail "the golden run took the test style" "$out"; fi

# broken, it is caught where it writes: the core's output of layer 0
out=$(PARITY_TWO_PASSES_BREAK=1 "$P" check --model gpt-tiny --steps 1 "${D3D[@]}" 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -q "layer 0's self_attention.core_attention.output" <<<"$out" &&
   grep -qE '\| NO$' <<<"$out"; then
  ok "PARITY_TWO_PASSES_BREAK=1: caught at layer 0's core attention output"
else fail "the broken two-passes style (rc $rc)" "$(grep -m3 'touched\|bit-exact\|NO' <<<"$out")"; fi

echo "RESULT test_styles_attention.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
