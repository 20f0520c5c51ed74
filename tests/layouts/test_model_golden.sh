#!/usr/bin/env bash
# test_model_golden.sh - this machine reproduces golden/ bit for bit (I5).
#
# For each run in golden/manifest.txt, the portable backend must give the
# SHA-256 digests of golden/<model>.sha256 for every dumped tensor:
#   - with $PARITY (the -O2 build), for every run (gpt-micro only when
#     $PARITY is a sanitizer build);
#   - with $BUILD/o0/parity (the whole program at -O0, built by
#     tests/model.mk) for gpt-micro, gpt-tiny, t5-tiny and llava-tiny, when that build exists
#     (it is skipped under sanitizers).
# Also: golden/gpt-micro.safetensors matches its digests, and a single
# flipped bit in it is detected (the check can fail).
# Ends with "RESULT test_model_golden.sh: N passed, M failed".
set -u
cd "$(dirname "$0")/../.."
PARITY=${PARITY:-build/parity}
BUILD=${BUILD:-build}
tmp=$(mktemp -d /tmp/parity-golden-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

# check_run BINARY LABEL MODEL STEPS [NAME FLAGS]
check_run() {
  local bin=$1 label=$2 model=$3 steps=$4 name=${5:-$3} flags=${6:-}
  local want=golden/$name.sha256 got=$tmp/$name.$label.sha256
  if [ ! -s "$want" ]; then fail "$model ($label): $want missing (make golden)"; return; fi
  local start=$(date +%s.%N)
  # shellcheck disable=SC2086 # the flags are words
  if ! "$bin" train --model "$model" --steps "$steps" --backend portable --quiet \
       --digest "$got" $flags >"$tmp/log" 2>&1; then
    fail "$model ($label): parity train failed" "$(tail -3 "$tmp/log")"; return
  fi
  local secs; secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  if cmp -s "$want" "$got"; then
    ok "$name ($label, portable): $(wc -l <"$want") tensor digests reproduced bit for bit (${secs}s)"
  else
    local first; first=$(diff "$want" "$got" | grep '^[<>]' | head -1 | awk '{print $3}')
    fail "$name ($label, portable): digests differ" \
         "$(diff "$want" "$got" | grep -c '^<') of $(wc -l <"$want") tensors differ; first: $first"
  fi
}

runs=$(grep -v '^#' golden/manifest.txt | awk 'NF >= 2')
# Under a sanitizer (make asan/ubsan/tsan) every run is 3-40x slower; the
# point there is memory and thread errors, which gpt-micro (dropout, two
# microbatches, every layer) exercises. The normal build checks them all.
sanitized=0
if ldd "$PARITY" 2>/dev/null | grep -qE 'lib(a|t|ub)san'; then sanitized=1; fi
while read -r model steps name flags; do
  if [ "$sanitized" = 1 ] && [ "$model" != gpt-micro ]; then
    echo "skip    ${name:-$model}: sanitizer build (checked by the normal build)"; continue
  fi
  check_run "$PARITY" O2 "$model" "$steps" "$name" "$flags"
done <<<"$runs"

O0=$BUILD/o0/parity
if [ -x "$O0" ]; then
  while read -r model steps name flags; do
    [ -n "$name" ] && [ "$model" != gpt-micro ] && continue # named variants: gpt-micro's at -O0 (time)
    case $model in gpt-micro|gpt-tiny|t5-tiny|llava-tiny)
      check_run "$O0" O0 "$model" "$steps" "$name" "$flags" ;; esac
  done <<<"$runs"
else
  echo "skip    -O0 reproduction: $O0 not built (sanitizer builds skip it)"
fi

# The committed full dump agrees with its digests; a flipped bit is caught.
verify() {
  /usr/bin/python3 - "$1" golden/gpt-micro.sha256 <<'PY'
import hashlib, json, struct, sys
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
h = json.loads(blob[8:8 + n]); h.pop("__metadata__", None)
data = blob[8 + n:]
got = {k: hashlib.sha256(data[v["data_offsets"][0]:v["data_offsets"][1]]).hexdigest() for k, v in h.items()}
want = dict(reversed(l.split()) for l in open(sys.argv[2]) if l.strip())
bad = sorted(k for k in want if got.get(k) != want[k]) + sorted(set(got) - set(want))
print("%d tensors, %d differ%s" % (len(want), len(bad), (": " + bad[0]) if bad else ""))
sys.exit(1 if bad else 0)
PY
}
if [ -s golden/gpt-micro.safetensors ]; then
  if msg=$(verify golden/gpt-micro.safetensors); then ok "golden/gpt-micro.safetensors matches its digests ($msg)"
  else fail "golden/gpt-micro.safetensors matches its digests" "$msg"; fi
  cp golden/gpt-micro.safetensors "$tmp/flip.safetensors"
  size=$(stat -c %s "$tmp/flip.safetensors")
  /usr/bin/python3 -c "
import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[int(sys.argv[2])] ^= 1; open(p,'wb').write(b)" \
    "$tmp/flip.safetensors" $((size - 5))
  if msg=$(verify "$tmp/flip.safetensors"); then fail "a flipped bit in the dump is detected" "$msg"
  else ok "a flipped bit in the dump is detected ($msg)"; fi
else
  fail "golden/gpt-micro.safetensors present (make golden)"
fi

echo "RESULT test_model_golden.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
