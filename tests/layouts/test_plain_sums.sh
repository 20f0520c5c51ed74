#!/usr/bin/env bash
# test_plain_sums.sh - the plain-sums diagnostic build runs every layout.
#
# $BUILD/plain/parity (-DPARITY_PLAIN_SUMS, tests/model.mk) replaces each
# device's exact sums by plain fp32 ones; it is the "cost of exactness"
# baseline of make bench and the demo of the drift plain sums bring.
#   - train runs gpt-tiny to the end (3 steps) with data (ZeRO-3), tensor
#     (with sequence parallelism), pipeline (1F1B), context (ring) and 3-D
#     parallelism, as the exact build does;
#   - parity check on it reports the first divergence (exit 1, no crash)
#     for tensor and data parallelism: fp32 sums split over devices are
#     added in another order than one device adds them;
#   - one device: its layout run reproduces its own one-device reference
#     bit for bit (check says bit-exact), but not golden/: every tensor no
#     sum touches (the initial parameters, the batch, the dropout masks,
#     the embedding output) has the golden bits, and the first tensor made
#     by a sum (layer 0's input LayerNorm, whose statistics are sums) does
#     not. Plain sums change the bits on one device too.
# Skipped where the plain build is absent (sanitizer builds do not build it).
# Ends with "RESULT test_plain_sums.sh: N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
PLAIN=$BUILD/plain/parity
tmp=$(mktemp -d /tmp/parity-plain-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }

if [ ! -x "$PLAIN" ]; then
  echo "skip    plain-sums build: $PLAIN not built (sanitizer builds skip it)"
  echo "RESULT test_plain_sums.sh: $passed passed, $failed failed"
  exit 0
fi

DP="--data-parallel-size 2 --zero-stage 3"
TP="--tensor-model-parallel-size 2 --sequence-parallel"
PP="--pipeline-model-parallel-size 2 --pipeline-schedule 1f1b --num-microbatches 4"
CP="--context-parallel-size 2"
D3="--data-parallel-size 2 $TP $PP --zero-stage 1"

# train_run LABEL FLAGS...: 3 steps of gpt-tiny to the end
train_run() {
  local label=$1; shift
  local start; start=$(date +%s.%N)
  "$PLAIN" train --model gpt-tiny --steps 3 --quiet "$@" >"$tmp/log" 2>&1
  local rc=$?
  if [ "$rc" = 0 ] && grep -q '^summary:' "$tmp/log"; then
    ok "train $label: 3 steps, last loss $(awk '$1 == "step" {l = $5} END {print l}' "$tmp/log") ($(since "$start")s)"
  else
    fail "train $label: exit $rc" "$(tail -3 "$tmp/log")"
  fi
}
# shellcheck disable=SC2086
{
  train_run "dp 2 ZeRO-3" $DP
  train_run "tp 2 + SP" $TP
  train_run "pp 2 1F1B" $PP
  train_run "cp 2 ring" $CP
  train_run "dp 2 x tp 2 + SP x pp 2, ZeRO-1" $D3
}

# check_drift LABEL FLAGS...: the checker finds the drift and says where
check_drift() {
  local label=$1; shift
  local start; start=$(date +%s.%N)
  "$PLAIN" check --model gpt-tiny --steps 1 "$@" >"$tmp/log" 2>&1
  local rc=$?
  if [ "$rc" = 1 ] && grep -q '^FIRST DIVERGENCE' "$tmp/log"; then
    ok "check $label: FIRST DIVERGENCE at $(awk '$1 == "tensor" {print $2; exit}' "$tmp/log"), $(awk '$1 == "ulp" {print $2 " ulp"; exit}' "$tmp/log") ($(since "$start")s)"
  else
    fail "check $label: exit $rc, want 1 with a FIRST DIVERGENCE report" "$(tail -3 "$tmp/log")"
  fi
}
# shellcheck disable=SC2086
{
  check_drift "tp 2" --tensor-model-parallel-size 2
  check_drift "dp 2 ZeRO-3" $DP
}

# one device: its own reference, bit for bit
"$PLAIN" check --model gpt-tiny --steps 1 --data-parallel-size 1 >"$tmp/log" 2>&1
rc=$?
if [ "$rc" = 0 ] && grep -qE '^dp=1 .*\| yes$' "$tmp/log"; then
  ok "check one device: bit-exact with the plain build's own one-device run"
else
  fail "check one device: exit $rc, want 0 and bit-exact" "$(tail -3 "$tmp/log")"
fi

# one device against golden/: the tensors no sum makes agree, the first sum does not
if "$PLAIN" train --model gpt-tiny --steps 3 --backend portable --quiet --digest "$tmp/plain.sha256" \
     >"$tmp/log" 2>&1; then
  digest() { awk -v t="$2" '$2 == t {print $1}' "$1"; }
  same() { # tensors with the same digest in golden/ and the plain run
    join -1 2 -2 2 <(sort -k2 golden/gpt-tiny.sha256) <(sort -k2 "$tmp/plain.sha256") |
      awk '$2 == $3 {print $1}'
  }
  n_init=$(grep -c ' init\.' golden/gpt-tiny.sha256)
  n_same_init=$(same | grep -c '^init\.')
  emb=step0.act.embedding.output ln=step0.act.layers.0.input_layernorm.output
  if [ "$n_init" -gt 0 ] && [ "$n_same_init" = "$n_init" ] &&
     [ "$(digest golden/gpt-tiny.sha256 $emb)" = "$(digest "$tmp/plain.sha256" $emb)" ] &&
     [ -n "$(digest "$tmp/plain.sha256" $ln)" ] &&
     [ "$(digest golden/gpt-tiny.sha256 $ln)" != "$(digest "$tmp/plain.sha256" $ln)" ]; then
    ok "one device vs golden/: $(same | wc -l) of $(wc -l <golden/gpt-tiny.sha256) digests agree (the $n_init initial parameters, batch, masks, $emb); $ln, the first sum, differs"
  else
    fail "one device vs golden/: want every init.* and $emb equal, $ln different" \
         "$n_same_init of $n_init init.* equal; $(same | wc -l) equal in all"
  fi
else
  fail "one device: parity train --digest failed" "$(tail -3 "$tmp/log")"
fi

echo "RESULT test_plain_sums.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
