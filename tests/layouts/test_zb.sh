#!/usr/bin/env bash
# test_zb.sh - pipeline schedules II: zero-bubble ZB-H1, ZB-H2 and ZB-V,
# and DualPipeV, with each backward split into B (the input gradient) and W
# (the weight gradient):
#  - each schedule's pass order at pp 4, m 8 (the schedule, and the
#    order of every device's F, B and W spans in a run's trace) equals a
#    table transcribed
#    from the published generators: ZB-H1 as PyTorch's
#    ScheduleInterleavedZeroBubble with one chunk a stage (the same order
#    as the authors' ZB-1p heuristic, sail-sg zb.py, at T_F=T_B=T_W);
#    ZB-V as sail-sg's handcrafted_zb_v.get_zb_v_schedule (PyTorch's
#    ScheduleZBVZeroBubble is a copy); DualPipeV as deepseek-ai/DualPipe's
#    DualPipeV.step (PyTorch's ScheduleDualPipeV): a full backward written
#    B then W, an overlapped F&B pair F then B;
#  - bit-exact against the golden run over 3 steps with dropout for each
#    schedule (ZB-H2 too) at pp 2 and 4, m = pp, 2 pp and 3 pp + 1 (DualPipeV: m >= 2 pp),
#    plain, x tp 2 + SP, x dp 2 ZeRO-1, accumulating over the microbatches;
#  - ZB-H2 (2(pp-r)-1 warm-up forwards, W lagging B by r): its pass order
#    at pp 4, m 8 (the rule's, no published table), bit-exact in the matrix,
#    and every stage's slots held = min(2 pp - r, m) in the pipeline report;
#  - the broken variant pp-stale-w (W reads dy where B left it) caught at
#    a weight gradient; the trace's F, B and W spans in their categories;
#  - --overlap-grad-reduce under each split schedule at pp 2 x dp 2, ZeRO 0
#    and 1, tiny buckets: bit-exact (a bucket goes after its chunk's last
#    W); the broken variant zb-early-reduce (at B) caught at a weight
#    gradient on device 2 (stage 1, whose W's lag most);
#  - refusals: DualPipeV with m < 2 pp, virtual stages with a V schedule,
#    an odd number of layers a stage.
# Ends with "RESULT test_zb.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/parity-zb-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }
export PARITY_COLL_TIMEOUT=30 # a schedule that deadlocks fails here, not after two minutes

# ---- the published pass orders, pp 4, m 8 (schedule, stage, passes; ".c": chunk c) ----
cat >"$tmp/tables" <<'TABLES'
zb-h1 0 F0 F1 F2 F3 B0 W0 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 B5 W5 B6 W6 B7 W7
zb-h1 1 F0 F1 F2 B0 F3 B1 W0 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 B6 W5 B7 W6 W7
zb-h1 2 F0 F1 B0 F2 B1 F3 B2 W0 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 B7 W5 W6 W7
zb-h1 3 F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7
zb-v 0 F0.0 F1.0 F2.0 F3.0 F4.0 F5.0 F6.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F3.1 B3.1 W3.1 F7.0 B0.0 W0.0 F4.1 B4.1 W4.1 B1.0 W1.0 F5.1 B5.1 W5.1 B2.0 W2.0 F6.1 B6.1 W6.1 B3.0 W3.0 F7.1 B7.1 W7.1 B4.0 W4.0 B5.0 W5.0 B6.0 W6.0 B7.0 W7.0
zb-v 1 F0.0 F1.0 F2.0 F3.0 F4.0 F0.1 F5.0 F1.1 B0.1 W0.1 F2.1 B1.1 W1.1 F3.1 B2.1 W2.1 F6.0 B0.0 W0.0 F4.1 B3.1 W3.1 F7.0 B1.0 W1.0 F5.1 B4.1 W4.1 B2.0 W2.0 F6.1 B5.1 W5.1 B3.0 W3.0 F7.1 B6.1 W6.1 B4.0 B7.1 B5.0 W4.0 B6.0 W5.0 B7.0 W6.0 W7.1 W7.0
zb-v 2 F0.0 F1.0 F2.0 F0.1 F3.0 F1.1 F4.0 F2.1 B0.1 W0.1 F3.1 B1.1 W1.1 F5.0 B0.0 W0.0 F4.1 B2.1 W2.1 F6.0 B1.0 W1.0 F5.1 B3.1 W3.1 F7.0 B2.0 W2.0 F6.1 B4.1 W4.1 B3.0 W3.0 F7.1 B5.1 W5.1 B4.0 B6.1 B5.0 B7.1 B6.0 W4.0 B7.0 W5.0 W6.1 W7.1 W6.0 W7.0
zb-v 3 F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 F3.0 F3.1 B0.1 W0.1 F4.0 B0.0 W0.0 F4.1 B1.1 W1.1 F5.0 B1.0 W1.0 F5.1 B2.1 W2.1 F6.0 B2.0 W2.0 F6.1 B3.1 W3.1 F7.0 B3.0 W3.0 F7.1 B4.1 W4.1 B4.0 B5.1 B5.0 B6.1 B6.0 B7.1 B7.0 W4.0 W5.1 W6.1 W7.1 W5.0 W6.0 W7.0
dualpipev 0 F0.0 F1.0 F2.0 F3.0 F4.0 F5.0 F6.0 F0.1 B0.1 W0.1 F1.1 B1.1 W1.1 F2.1 B2.1 W2.1 F3.1 F7.0 B3.1 W3.1 F4.1 B0.0 W0.0 B4.1 W4.1 F5.1 B1.0 W1.0 B5.1 W5.1 F6.1 B2.0 W2.0 B6.1 W6.1 F7.1 B3.0 W3.0 B7.1 W7.1 B4.0 W4.0 B5.0 W5.0 B6.0 W6.0 B7.0 W7.0
dualpipev 1 F0.0 F1.0 F2.0 F3.0 F4.0 F0.1 F5.0 F1.1 B0.1 W0.1 F2.1 B1.1 W1.1 F3.1 F6.0 B2.1 W2.1 F4.1 B0.0 W0.0 F7.0 B3.1 W3.1 F5.1 B1.0 W1.0 B4.1 W4.1 F6.1 B2.0 W2.0 B5.1 W5.1 F7.1 B3.0 W3.0 B6.1 W6.1 B4.0 W4.0 B7.1 B5.0 W7.1 B6.0 W5.0 B7.0 W6.0 W7.0
dualpipev 2 F0.0 F1.0 F2.0 F0.1 F3.0 F1.1 F4.0 F2.1 B0.1 W0.1 F3.1 F5.0 B1.1 W1.1 F4.1 B0.0 W0.0 F6.0 B2.1 W2.1 F5.1 B1.0 W1.0 F7.0 B3.1 W3.1 F6.1 B2.0 W2.0 B4.1 W4.1 F7.1 B3.0 W3.0 B5.1 W5.1 B4.0 W4.0 B6.1 W6.1 B5.0 B7.1 B6.0 W5.0 B7.0 W7.1 W6.0 W7.0
dualpipev 3 F0.0 F0.1 F1.0 F1.1 F2.0 F2.1 F3.0 F3.1 F4.0 B0.1 W0.1 F4.1 B0.0 W0.0 F5.0 B1.1 W1.1 F5.1 B1.0 W1.0 F6.0 B2.1 W2.1 F6.1 B2.0 W2.0 F7.0 B3.1 W3.1 F7.1 B3.0 W3.0 B4.1 W4.1 B4.0 W4.0 B5.1 W5.1 B5.0 W5.0 B6.1 B6.0 B7.1 B7.0 W6.1 W6.0 W7.1 W7.0
TABLES
for s in zb-h1 zb-v dualpipev; do
  "$PARITY" train --model gpt-micro --num-layers 8 --pipeline-model-parallel-size 4 --global-batch-size 8 \
    --micro-batch-size 1 --pipeline-schedule $s --print-layout 2>&1 |
    sed -n 's/.*"stage": \([0-9]*\).*"passes": "\([^"]*\)".*/\1 \2/p' | sed "s/^/$s /" >"$tmp/got.$s"
  grep "^$s " "$tmp/tables" >"$tmp/want.$s"
  if [ -s "$tmp/got.$s" ] && cmp -s "$tmp/got.$s" "$tmp/want.$s"; then ok "$s at pp 4, m 8: the published pass order, every stage"
  else fail "$s pass order" "$(diff "$tmp/want.$s" "$tmp/got.$s" | head -4)"; fi
done

# ---- the same order in the run itself: each device's pass spans in its trace ----
for s in zb-h1 zb-v dualpipev; do
  "$PARITY" train --model gpt-micro --num-layers 8 --steps 1 --pipeline-model-parallel-size 4 --global-batch-size 8 \
    --micro-batch-size 1 --pipeline-schedule $s --trace "$tmp/$s.json" >/dev/null 2>&1
  python3 - "$tmp/$s.json" "$s" >"$tmp/traced.$s" <<'PY'
import json, sys
spans = [e for e in json.load(open(sys.argv[1]))["traceEvents"]
         if e.get("ph") == "X" and e.get("cat") in ("forward", "backward", "weight")]
for dev in sorted({e["tid"] for e in spans}):
    mine = sorted((e for e in spans if e["tid"] == dev), key=lambda e: e["ts"])
    print(sys.argv[2], dev, " ".join(e["name"] for e in mine))
PY
  if [ -s "$tmp/traced.$s" ] && cmp -s "$tmp/traced.$s" "$tmp/want.$s"; then ok "$s at pp 4, m 8: the trace runs the published order on every device"
  else fail "$s traced order" "$(diff "$tmp/want.$s" "$tmp/traced.$s" | head -4)"; fi
done

# ---- bit-exact matrix ----
bad=0; runs=0
for s in zb-h1 zb-h2 zb-v dualpipev; do
  for pp in 2 4; do
    for m in $pp $((2 * pp)) $((3 * pp + 1)); do
      [ $s = dualpipev ] && [ $m -lt $((2 * pp)) ] && continue
      for extra in "" "--tensor-model-parallel-size 2 --sequence-parallel" "--data-parallel-size 2 --zero-stage 1"; do
        dp=1; case "$extra" in *data-parallel*) dp=2 ;; esac
        # shellcheck disable=SC2086
        out=$("$PARITY" check --model gpt-micro --num-layers $((2 * pp)) --steps 3 --pipeline-model-parallel-size $pp \
              --global-batch-size $((m * dp)) --micro-batch-size 1 --pipeline-schedule $s $extra 2>&1)
        runs=$((runs + 1))
        if ! echo "$out" | grep -q '| yes$'; then
          bad=$((bad + 1)); fail "$s pp $pp m $m $extra bit-exact" "$(echo "$out" | tail -3)"
        fi
      done
    done
  done
done
[ $bad = 0 ] && ok "all $runs layouts bit-exact over 3 steps with dropout (zb-h1, zb-h2, zb-v, dualpipev x pp 2, 4 x m x tp 2 + SP / dp 2 ZeRO-1)"

# ---- ZB-H2: its rule's pass order, and the slots each stage held against the formula ----
cat >"$tmp/want.zb-h2" <<'TABLE'
zb-h2 0 F0 F1 F2 F3 F4 F5 F6 B0 F7 W0 B1 W1 B2 W2 B3 W3 B4 W4 B5 W5 B6 W6 B7 W7
zb-h2 1 F0 F1 F2 F3 F4 B0 F5 B1 F6 W0 B2 F7 W1 B3 W2 B4 W3 B5 W4 B6 W5 B7 W6 W7
zb-h2 2 F0 F1 F2 B0 F3 B1 F4 B2 F5 W0 B3 F6 W1 B4 F7 W2 B5 W3 B6 W4 B7 W5 W6 W7
zb-h2 3 F0 B0 F1 B1 F2 B2 F3 B3 F4 W0 B4 F5 W1 B5 F6 W2 B6 F7 W3 B7 W4 W5 W6 W7
TABLE
"$PARITY" train --model gpt-micro --num-layers 8 --pipeline-model-parallel-size 4 --global-batch-size 8 \
  --micro-batch-size 1 --pipeline-schedule zb-h2 --print-layout 2>&1 |
  sed -n 's/.*"stage": \([0-9]*\).*"passes": "\([^"]*\)".*/\1 \2/p' | sed "s/^/zb-h2 /" >"$tmp/got.zb-h2"
if cmp -s "$tmp/got.zb-h2" "$tmp/want.zb-h2"; then ok "zb-h2 at pp 4, m 8: 2(pp-r)-1 warm-up forwards, B F W with W lagging r"
else fail "zb-h2 pass order" "$(diff "$tmp/want.zb-h2" "$tmp/got.zb-h2" | head -4)"; fi
for m in 8 5; do
  rows=$("$PARITY" train --model gpt-micro --num-layers 8 --steps 1 --pipeline-model-parallel-size 4 --global-batch-size $m \
         --micro-batch-size 1 --pipeline-schedule zb-h2 2>&1 | awk '/slots: formula/ { on = 1; next } on && $1 ~ /^[0-9]+$/ { print $1, $(NF-5), $(NF-4) }')
  want=$(for r in 0 1 2 3; do f=$((8 - r)); [ $f -gt $m ] && f=$m; echo "$r $f $f"; done)
  if [ "$rows" = "$want" ]; then ok "zb-h2 m $m: every stage held min(2 pp - r, m) microbatches, the formula"
  else fail "zb-h2 m $m slots" "$rows"; fi
done

# ---- the broken variant ----
out=$("$PARITY" check --model gpt-micro --num-layers 4 --steps 2 --pipeline-model-parallel-size 2 --global-batch-size 4 \
      --micro-batch-size 1 --pipeline-schedule zb-h1 --test-broken pp-stale-w 2>&1); rc=$?
if [ $rc = 1 ] && echo "$out" | grep -Eq '^  tensor +step0\.grad\.'; then
  ok "pp-stale-w caught at a weight gradient ($(echo "$out" | sed -n 's/^  tensor *//p' | head -1))"
else fail "pp-stale-w caught" "exit $rc" "$(echo "$out" | grep -m1 tensor)"; fi

# ---- --overlap-grad-reduce: buckets reduced on the communication thread after their W ----
bad=0; runs=0
for s in zb-h1 zb-h2 zb-v dualpipev; do
  for z in 0 1; do
    out=$("$PARITY" check --model gpt-micro --num-layers 4 --steps 3 --pipeline-model-parallel-size 2 \
          --data-parallel-size 2 --global-batch-size 16 --micro-batch-size 2 --pipeline-schedule $s \
          --zero-stage $z --overlap-grad-reduce --bucket-cap-mb 0.001 2>&1)
    runs=$((runs + 1))
    echo "$out" | grep -q '| yes$' || { bad=$((bad + 1)); fail "$s ZeRO-$z --overlap-grad-reduce bit-exact" "$(echo "$out" | tail -3)"; }
  done
done
[ $bad = 0 ] && ok "all $runs layouts bit-exact with --overlap-grad-reduce (zb-h1, zb-h2, zb-v, dualpipev x ZeRO 0, 1 at pp 2 x dp 2, m 4)"
# the overlap is real: buckets go to the communication thread during the schedule, not at its end
for s in zb-h1 zb-h2 zb-v dualpipev; do
  line=$("$PARITY" train --model gpt-micro --num-layers 4 --steps 1 --pipeline-model-parallel-size 2 --data-parallel-size 2 \
         --global-batch-size 8 --micro-batch-size 1 --pipeline-schedule $s --overlap-grad-reduce --bucket-cap-mb 0.001 2>&1 |
         grep '^  overlap: buckets handed')
  if echo "$line" | grep -Eq 'stage 0 [1-9][0-9]* stage 1 [1-9][0-9]*$'; then ok "$s: buckets reduced on the communication thread while the schedule ran (${line##*ended: })"
  else fail "$s overlap during the schedule" "$line"; fi
done
out=$("$PARITY" check --model gpt-micro --steps 1 --pipeline-model-parallel-size 2 --data-parallel-size 2 \
      --pipeline-schedule zb-h1 --num-microbatches 2 --overlap-grad-reduce --bucket-cap-mb 0.001 \
      --test-broken zb-early-reduce 2>&1); rc=$?
if [ $rc = 1 ] && echo "$out" | grep -Eq '^  tensor +step0\.grad\.layers\.1\..*weight$' &&
   echo "$out" | grep -q '^  produced by device 2 '; then
  ok "zb-early-reduce caught at a weight gradient on device 2 ($(echo "$out" | sed -n 's/^  tensor *//p' | head -1))"
else fail "zb-early-reduce caught" "exit $rc" "$(echo "$out" | grep -m2 'tensor\|produced')"; fi

# ---- the trace: F, B and W passes in categories (and colours) of their own ----
"$PARITY" train --model gpt-micro --num-layers 4 --steps 1 --pipeline-model-parallel-size 2 --global-batch-size 4 \
  --micro-batch-size 1 --pipeline-schedule zb-v --trace "$tmp/t.json" >/dev/null 2>&1
nF=$(grep -o '"cat":"forward","cname":"thread_state_running"' "$tmp/t.json" | wc -l)
nB=$(grep -o '"cat":"backward","cname":"good"' "$tmp/t.json" | wc -l)
nW=$(grep -o '"name":"W[0-9]*\.[01]","cat":"weight","cname":"yellow"' "$tmp/t.json" | wc -l)
if [ "$nF" = 16 ] && [ "$nB" = 16 ] && [ "$nW" = 16 ]; then ok "trace: 16 F, 16 B and 16 W spans (2 stages x 4 microbatches x 2 chunks), three colours"
else fail "trace categories" "F $nF B $nB W $nW (expected 16 each)"; fi

# ---- refusals ----
refuse() { # NAME PATTERN ARGS...
  local name=$1 pat=$2; shift 2
  out=$("$PARITY" check --model gpt-micro "$@" 2>&1); rc=$?
  if [ $rc = 2 ] && echo "$out" | grep -Eq -- "$pat"; then ok "$name"; else fail "$name" "exit $rc" "$(echo "$out" | tail -2)"; fi
}
refuse "dualpipev with m < 2 pp" "dualpipev needs at least 2 x pipeline-model-parallel-size = 4" \
  --num-layers 4 --pipeline-model-parallel-size 2 --global-batch-size 2 --micro-batch-size 1 --pipeline-schedule dualpipev
refuse "virtual stages with zb-v" "zb-v places its two chunks per stage itself" \
  --num-layers 8 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --pipeline-schedule zb-v
refuse "an odd number of layers a stage in a V" "stage 0 holds 3 layers" \
  --num-layers 6 --pipeline-model-parallel-size 2 --pipeline-schedule zb-v

echo "RESULT test_zb.sh: $passed passed, $failed failed"
[ $failed -eq 0 ]
