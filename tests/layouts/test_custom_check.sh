#!/usr/bin/env bash
# test_custom_check.sh - `parity check` on a model the library does not
# know: build/tests/parity-scaled is the parity program linked with a
# test-only unit kind (tests/unit_scaled_residual.c: a scaled residual
# layer with a 3-D parameter S [2, 1, C]) registered in place of the
# transformer layer (tests/parity_scaled.c, tests/custom_unit.mk). Nothing
# under ref/parallel, ref/cli or ref/config knows it. The checker must find
# tp 2 x pp 2 x dp 2 with ZeRO-3 bit-exact over 3 steps, the 3-D parameter
# among the tensors compared, and still catch a broken reduction.
# Ends with "RESULT test_custom_check.sh: N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
P=$BUILD/tests/parity-scaled
GPT=${PARITY:-$BUILD/parity}
tmp=$(mktemp -d /tmp/parity-custom-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

L=(--model gpt-micro --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
   --data-parallel-size 2)
out=$("$P" check "${L[@]}" --zero-stage 3 --steps 3 --dump "$tmp/layout.safetensors" 2>&1); rc=$?
if [ $rc -eq 0 ] && grep -qE '^tp=2 pp=2 .*dp=2 zero=3 .*\| +8 \| +3 \| +[0-9]+ \| yes$' <<<"$out"; then
  ok "parity check: tp2 x pp2 x dp2 ZeRO-3 is bit-exact for the custom kind over 3 steps"
else fail "parity check on the custom kind (rc $rc)" "$(tail -5 <<<"$out")"; fi

# the 3-D parameter is in what was compared: its gradient and update, every step
shapes=$(python3 - "$tmp/layout.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
for k in ('step0.grad.layers.0.scale.weight', 'step2.param.layers.1.scale.weight'):
    print(k, h[k]['shape'] if k in h else None)
PY
)
if grep -q "step0.grad.layers.0.scale.weight \[2, 1, 16\]" <<<"$shapes" &&
   grep -q "step2.param.layers.1.scale.weight \[2, 1, 16\]" <<<"$shapes"; then
  ok "the 3-D parameter's gradient and update are dumped and compared ([2, 1, 16])"
else fail "the 3-D parameter in the dump" "$shapes"; fi

# it is another model: the GPT program's golden digests differ
"$P" train --model gpt-micro --steps 1 --quiet --digest "$tmp/custom.txt" >/dev/null 2>&1
"$GPT" train --model gpt-micro --steps 1 --quiet --digest "$tmp/gpt.txt" >/dev/null 2>&1
if [ -s "$tmp/custom.txt" ] && ! cmp -s "$tmp/custom.txt" "$tmp/gpt.txt" &&
   grep -q "scale.weight" "$tmp/custom.txt" && ! grep -q "scale.weight" "$tmp/gpt.txt"; then
  ok "the program trains the custom model, not the GPT"
else fail "the custom program's model"; fi

# the checker still sees a broken reduction on it
out=$("$P" check "${L[@]}" --steps 1 --zero-stage 1 --test-broken fp32-sums 2>&1); rc=$?
if [ $rc -eq 1 ] && grep -qE '^  tensor      step0\.grad\.' <<<"$out"; then
  ok "--test-broken fp32-sums on the custom kind: caught at a gradient"
else fail "--test-broken fp32-sums on the custom kind (rc $rc)" "$(grep -m2 'tensor\|bit-exact' <<<"$out")"; fi

echo "RESULT test_custom_check.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
