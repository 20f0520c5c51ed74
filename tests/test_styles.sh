#!/usr/bin/env bash
# test_styles.sh - styles a test adds (ref/model/styles/style.h's
# style_register): build/tests/parity-styles is the parity program linked
# with tests/styles/linear_split_rows.c (tests/styles.mk), a linear style
# that wraps the one the table would choose and runs every linear on the
# token rows in two parts. Nothing under ref/ knows it. The wrapper must
# change no bit: its golden run's digests are the plain program's, and
# `parity check` finds every layout below bit-exact over 3 steps (3-D
# tensor parallelism, bf16 with tp + SP, MoE experts with tp + SP x pp,
# 2-D, every linear row-parallel). The program says how many linears it
# split, so a style that was not in use fails the test.
# Ends with "RESULT test_styles.sh: N passed, M failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
S=$BUILD/tests/parity-styles
P=${PARITY:-$BUILD/parity}
. tests/refuse.sh parity-styles

split_count() { sed -n 's/^split-rows: \([0-9]*\) linears run in two parts$/\1/p' <<<"$1"; }

# golden NAME FLAGS...: the wrapped golden run's digests are the plain one's
golden() {
  local name=$1 rp rs; shift
  rm -f "$tmp/plain.txt" "$tmp/split.txt" # no case reads the one before's
  "$P" train --steps 2 --quiet "$@" --digest "$tmp/plain.txt" >/dev/null 2>&1; rp=$?
  out=$("$S" train --steps 2 --quiet "$@" --digest "$tmp/split.txt" 2>&1); rs=$?
  local k; k=$(split_count "$out")
  if [ $rp = 0 ] && [ $rs = 0 ] && [ -s "$tmp/plain.txt" ] && cmp -s "$tmp/plain.txt" "$tmp/split.txt" &&
     [ "${k:-0}" -gt 0 ]; then
    ok "$name golden (linears split in two: $k): $(wc -l <"$tmp/plain.txt") digests as the plain program's"
  else fail "$name golden: digests differ or nothing split (${k:-none})" "$(tail -3 <<<"$out")"; fi
}

# exact NAME FLAGS...: `parity check` with the wrapper, bit-exact, style in use
exact() {
  local name=$1; shift
  out=$("$S" check --steps 3 "$@" 2>&1); rc=$?
  local k; k=$(split_count "$out")
  if [ $rc = 0 ] && grep -q '| yes$' <<<"$out" && [ "${k:-0}" -gt 0 ]; then
    ok "$name: bit-exact over 3 steps linears split in two: $k"
  else fail "$name (exit $rc, split ${k:-none})" "$(tail -4 <<<"$out")"; fi
}

MOE=(--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-expert-capacity-factor 1.0)
golden "gpt-tiny" --model gpt-tiny
golden "gpt-micro bf16" --model gpt-micro --bf16
golden "gpt-micro MoE" --model gpt-micro "${MOE[@]}"
exact "3-D tp 8 (q 2), gpt-tiny" --model gpt-tiny --tensor-model-parallel-size 8 --tensor-parallel-mode 3d
exact "bf16, tp 2 + SP x dp 2" --model gpt-micro --bf16 --tensor-model-parallel-size 2 \
  --sequence-parallel --data-parallel-size 2
exact "MoE E 4 top-2, tp 2 + SP x pp 2" --model gpt-micro "${MOE[@]}" --tensor-model-parallel-size 2 \
  --sequence-parallel --pipeline-model-parallel-size 2
exact "2-D tp 4 (q 2), gpt-tiny" --model gpt-tiny --tensor-model-parallel-size 4 --tensor-parallel-mode 2d
exact "every linear row-parallel, tp 2" --model gpt-micro --tensor-model-parallel-size 2 \
  --tensor-parallel-row-linears

# the 3-D layout's dump with the wrapper equals the plain program's golden dump
"$P" train --model gpt-tiny --steps 2 --quiet --dump "$tmp/golden.st" >/dev/null 2>&1
out=$("$S" train --model gpt-tiny --steps 2 --quiet --tensor-model-parallel-size 8 \
      --tensor-parallel-mode 3d --dump "$tmp/split.st" 2>&1 && "$P" diff "$tmp/golden.st" "$tmp/split.st" 2>&1); rc=$?
if [ $rc = 0 ] && grep -qE '^([0-9]+) tensors, \1 bit-exact, 0 differ, 0 missing$' <<<"$out"; then
  ok "3-D with the wrapper: every tensor of 2 steps equals the plain golden dump"
else fail "3-D with the wrapper against the plain golden dump (exit $rc)" "$(tail -3 <<<"$out")"; fi

echo "RESULT test_styles.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
