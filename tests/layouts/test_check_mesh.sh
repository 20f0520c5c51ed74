#!/usr/bin/env bash
# The first-divergence report in mesh terms (issue 23): for every checker
# negative control, on a small layout where it applies, `parity check`
#  (a) exits 1;
#  (b) names the device that produced the element with all five axes,
#      "device N (tp a, cp b, ep c, dp d, pp e", and those coordinates are
#      the device number's under the default rank order tp-cp-ep-dp-pp
#      (first fastest), computed here from the layout's sizes;
#  (c) has a microbatch line, a global index, a ulp line and a
#      "last touched by <mode>" line whose mode is the bug's mode.
# The runs are gpt-micro, one step, a few devices: well under a second each.
set -u
P=${PARITY:-build/parity}
pass=0; fail=0
ok() { if [ "$1" = 0 ]; then pass=$((pass+1)); echo "ok      $2"; else fail=$((fail+1)); echo "not ok  $2"; fi; }

# "tp=2 cp=1 dp=2 pp=1", the device number -> the coordinates the report must print
coords() { # tp cp dp pp device
  local tp=$1 cp=$2 dp=$3 pp=$4 d=$5 ep=1
  echo "tp $((d % tp)), cp $((d / tp % cp)), ep $((d / (tp * cp) % ep)), dp $((d / (tp * cp * ep) % dp)), pp $((d / (tp * cp * ep * dp) % pp))"
}

# name sizes(tp cp dp pp) mode tensor-prefix flags...
expect() {
  local name=$1 tp=$2 cp=$3 dp=$4 pp=$5 mode=$6 tensor=$7; shift 7
  local out rc dev want line
  out=$("$P" check --model gpt-micro --steps 1 "$@" 2>&1); rc=$?
  [ $rc = 1 ]; ok $? "$name: exit 1 (got $rc)"
  echo "$out" | grep -q "^  tensor      $tensor"; ok $? "$name: the first divergence is $tensor"
  line=$(echo "$out" | grep -m1 '^  produced by device ')
  dev=$(echo "$line" | sed -n 's/^  produced by device \([0-9]*\) (.*/\1/p')
  [ -n "$dev" ] && want="device $dev ($(coords "$tp" "$cp" "$dp" "$pp" "$dev")" &&
  case "$line" in *"$want"[\;\)]*) true ;; *) false ;; esac
  ok $? "$name: '$line' names the device on every axis, as the rank order places device ${dev:-?}"
  echo "$out" | grep -q '^  microbatch  [^ ]' &&
  echo "$out" | grep -Eq '^  element     global index \[[0-9,]+\] \(flat index [0-9]+ of [0-9]+\)' &&
  echo "$out" | grep -q '^  ulp         [^ ]'
  ok $? "$name: microbatch, global index (by axis and flat) and ulp"
  echo "$out" | grep -q "^  last touched by $mode[: (]"; ok $? "$name: last touched by $mode"
  [ "${VERBOSE:-}" ] && echo "$out"
}

expect "fp32 sums (tp 2 x dp 2)" 2 1 2 1 dp step0.grad. \
  --tensor-model-parallel-size 2 --data-parallel-size 2 --test-broken fp32-sums
expect "fp32 sums (dp 2 x cp 2, ZeRO-2)" 1 2 2 1 dp step0.grad. \
  --context-parallel-size 2 --data-parallel-size 2 --zero-stage 2 --test-broken fp32-sums
expect "tp fp32 sums (tp 2)" 2 1 1 1 tp step0.act.layers.0. \
  --tensor-model-parallel-size 2 --test-broken tp-fp32-sums
expect "tp fp32 sums (tp 2, sequence parallel, dp 2)" 2 1 2 1 tp step0.act.layers.0. \
  --tensor-model-parallel-size 2 --sequence-parallel --data-parallel-size 2 --test-broken tp-fp32-sums
# gpt-micro's 256 tokens are already a multiple of 128 x 2: a vocabulary of 272 pads
expect "tp vocab padding (tp 2)" 2 1 1 1 tp step0.loss \
  --vocab-size 272 --tensor-model-parallel-size 2 --test-broken tp-vocab-padding
expect "pp mask key (pp 2, 2 microbatches)" 1 1 1 2 pp step0.mask. \
  --pipeline-model-parallel-size 2 --num-microbatches 2 --test-broken pp-mask-key
expect "pp tied embedding (pp 2)" 1 1 1 2 pp step0.grad.embedding.word_embeddings \
  --pipeline-model-parallel-size 2 --test-broken pp-tied-embedding
expect "cp online softmax (cp 2)" 1 2 1 1 cp step0.act.layers.0.self_attention.core_attention \
  --context-parallel-size 2 --test-broken cp-online-softmax
expect "cp online softmax (tp 2 x cp 2 x dp 2)" 2 2 2 1 cp step0.act.layers.0.self_attention.core_attention \
  --tensor-model-parallel-size 2 --context-parallel-size 2 --data-parallel-size 2 --test-broken cp-online-softmax
expect "drifting replica 3 (dp 4, ZeRO-1)" 1 1 4 1 optimizer step0.param. \
  --data-parallel-size 4 --zero-stage 1 --test-broken replica:3
expect "drifting replica 10 (tp 2 x cp 2 x dp 2 x pp 2)" 2 2 2 2 optimizer step0.param. \
  --tensor-model-parallel-size 2 --context-parallel-size 2 --data-parallel-size 2 \
  --pipeline-model-parallel-size 2 --num-microbatches 2 --test-broken replica:10

# the drifting replica is device 10 itself, and the coordinates of 10 on
# tp 2 x cp 2 x dp 2 x pp 2 are (0, 1, 0, 0, 1): the test's own arithmetic
[ "$(coords 2 2 2 2 10)" = "tp 0, cp 1, ep 0, dp 0, pp 1" ]; ok $? "coords: device 10 of tp2 cp2 dp2 pp2"
out=$("$P" check --model gpt-micro --steps 1 --tensor-model-parallel-size 2 --context-parallel-size 2 \
  --data-parallel-size 2 --pipeline-model-parallel-size 2 --num-microbatches 2 --test-broken replica:10 2>&1)
echo "$out" | grep -q '^  produced by device 10 (tp 0, cp 1, ep 0, dp 0, pp 1; .*gradient-group rank 1 of 4'
ok $? "the drifting replica is device 10, rank 1 of its dp-cp gradient group"

# sub-axes: an interleaved schedule names the virtual-pipeline chunk; a
# context-parallel token its cp chunk, under sequence parallelism its slice
out=$("$P" check --model gpt-micro --num-layers 4 --steps 1 --pipeline-model-parallel-size 2 \
  --virtual-pipeline-model-parallel-size 2 --num-microbatches 2 --test-broken pp-mask-key 2>&1)
echo "$out" | grep -q '^  produced by device 0 (tp 0, cp 0, ep 0, dp 0, pp 0; vpp chunk 0 of 2)' &&
echo "$out" | grep -q '^  microbatch  1 of 2 ' && echo "$out" | grep -q '^  last touched by pp: '
ok $? "interleaved 1F1B: the mask's device names its vpp chunk, the microbatch is 1 of 2"
out=$("$P" check --model gpt-micro --steps 1 --tensor-model-parallel-size 2 --sequence-parallel \
  --context-parallel-size 2 --test-broken tp-fp32-sums 2>&1)
echo "$out" | grep -Eq '^  produced by device [0-9]+ \(tp [01], cp 0, ep 0, dp 0, pp 0; cp chunk 0 of 4 \(positions 0-3\), sequence-parallel slice 0 of 2\)' &&
echo "$out" | grep -q '^  last touched by tp: the row-parallel reduce-scatter (sequence parallel)'
ok $? "tp x cp with sequence parallelism: the token's cp chunk and sequence-parallel slice"
# the tied embedding under pp x dp: the dp reduce-scatter touched it last, the pp group before it
out=$("$P" check --model gpt-micro --steps 1 --pipeline-model-parallel-size 2 --data-parallel-size 2 \
  --test-broken pp-tied-embedding 2>&1)
echo "$out" | grep -q "^  last touched by dp: the exact reduce-scatter of gradient bucket 0 over group 'dp-cp'.*; before it, pp: the embedding group's all-reduce"
ok $? "the tied embedding under pp x dp: dp last, the embedding group (pp) before it"
# a gradient accumulated over microbatches says so
out=$("$P" check --model gpt-micro --steps 1 --data-parallel-size 2 --accum-degree 2 --test-broken fp32-sums 2>&1)
echo "$out" | grep -q '^  microbatch  all 2 microbatches of the step (summed'
ok $? "a gradient's microbatch line: all 2 microbatches, summed"

# a tensor every tp rank holds whole: the lowest device's copy is kept and
# named, whichever rank reports first (five runs, one answer)
for i in 1 2 3 4 5; do
  "$P" check --model gpt-micro --steps 1 --tensor-model-parallel-size 2 --test-broken tp-fp32-sums 2>&1 |
    grep -m1 '^  produced by device '
done | sort -u >/tmp/parity-mesh-who.$$
[ "$(cat /tmp/parity-mesh-who.$$)" = "  produced by device 0 (tp 0, cp 0, ep 0, dp 0, pp 0)" ]
ok $? "a tp-replicated activation is named by its lowest device on every run ($(tr -s ' ' </tmp/parity-mesh-who.$$ | tr '\n' '|'))"
rm -f /tmp/parity-mesh-who.$$

echo "RESULT test_check_mesh.sh: $pass passed, $fail failed"
[ $fail = 0 ]
