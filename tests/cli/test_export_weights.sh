#!/usr/bin/env bash
# test_export_weights.sh - `parity train --export-weights DIR --names S`
# and the oracle's --weights / --load (include/parity/names.h) from the
# outside:
#  - every scheme's export holds the golden init (a --dump's init.*
#    tensors) with the meaning the scheme gives its names, checked by an
#    independent numpy reading of each layout (tests/names_check.py):
#    hf-gpt2's Conv1D x @ c_attn split into q | k | v then heads,
#    nanogpt's nn.Linear, megatron-core's per-group [q, k, v] view, the
#    tied head's key, on 2 and 4 heads, tied and untied;
#  - the oracle (Python binding) opened with --weights EXPORT (declared,
#    from parity.names, or detected without it) runs a golden run bit
#    for bit the default one; with --load CKPT the checkpoint's steps;
#  - bad input exits 2 (train) or raises a ParityError (oracle) naming
#    what: an unknown scheme, --names without --export-weights, a file
#    missing a parameter, a wrong shape, a name no scheme knows, another
#    dtype, an untied head on a tied model.
# Needs $PARITY (default build/parity) and $BUILD/libparity.so.
# Ends with "RESULT test_export_weights.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
PARITY=$(cd "$(dirname "$PARITY")" && pwd)/$(basename "$PARITY")
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-$PWD/build}
. tests/refuse.sh parity-export
P="$PARITY"

M=(train --model gpt-micro --steps 1 --quiet)
# export NAME ARGS...: an export that must succeed
export_ok() {
  local name=$1; shift
  run_ok "$name" "${M[@]}" "$@"
}
run_ok() {
  local name=$1; shift
  if (cd "$w" && "$P" "$@" >"$tmp/out" 2>&1); then ok "$name"
  else fail "$name" "exit $?" "$(tail -3 "$tmp/out")"; fi
}

for heads in 2 4; do
  H=(--num-attention-heads $heads)
  export_ok "dump h$heads" "${H[@]}" --dump "$tmp/d$heads.st"
  export_ok "untied dump h$heads" "${H[@]}" --untie-embeddings-and-output-weights --dump "$tmp/u$heads.st"
  for s in megatron-lm megatron-core hf-gpt2 nanogpt; do
    export_ok "export $s h$heads" "${H[@]}" --export-weights "$tmp/$s-$heads" --names $s
    export_ok "export untied $s h$heads" "${H[@]}" --untie-embeddings-and-output-weights \
      --export-weights "$tmp/$s-u$heads" --names $s
  done
done
# the export does not change the run: the same loss bits with or without it
a=$("$P" "${M[@]}" | grep -o 'loss .*(0x[0-9a-f]*)')
b=$("$P" "${M[@]}" --export-weights "$tmp/again" --names hf-gpt2 | grep -o 'loss .*(0x[0-9a-f]*)')
[ -n "$a" ] && [ "$a" = "$b" ] && ok "the run with an export is the run without ($a)" ||
  fail "the run with an export differs" "$a" "$b"
# --load's weights: the checkpoint's parameters
run_ok "save a checkpoint" train --model gpt-micro --steps 2 --quiet --save "$tmp/ck"
export_ok "export from --load" --load "$tmp/ck" --export-weights "$tmp/from-ck" --names nanogpt

# the layouts' meaning, the oracle from the exports, the oracle's refusals
# (python cannot load a sanitized library first: CONTRIBUTING.md, LD_PRELOAD)
case "$(ldd "$BUILD/libparity.so" 2>/dev/null)" in
  *libasan*|*libtsan*|*libubsan*)
    echo "skip: names_check.py (a sanitized libparity.so)" ;;
  *)
  if PARITY_LIB=$BUILD/libparity.so /usr/bin/python3 tests/names_check.py "$tmp" >"$tmp/py" 2>&1; then
    r=0
  else
    r=1
  fi
  while read -r line; do
    case $line in
      "ok "*) ok "${line#ok }" ;;
      "not ok "*) fail "${line#not ok }" ;;
      *) [ $r -ne 0 ] && echo "  $line" ;;
    esac
  done <"$tmp/py"
  grep -q '^ok ' "$tmp/py" || fail "names_check.py ran no check" "$(tail -5 "$tmp/py")"
  [ $r -eq 0 ] || grep -q '^not ok ' "$tmp/py" || fail "names_check.py failed outside its checks" "$(tail -5 "$tmp/py")"
    ;;
esac

# train's refusals: exit 2, the flag or value named, nothing written
refuse "--names foo" "'foo'.*megatron-lm" -- "$P" "${M[@]}" --export-weights ex --names foo
refuse "--names without --export-weights" "names.*export-weights" -- "$P" "${M[@]}" --names hf-gpt2
refuse "--export-weights without --names" "export-weights.*--names" -- "$P" "${M[@]}" --export-weights ex
refuse "--export-weights on MoE" "hf-gpt2.*mixture of experts" -- "$P" "${M[@]}" --num-experts 2 \
  --export-weights ex --names hf-gpt2
refuse "--export-weights on T5" "megatron-core.*t5" -- "$P" train --model t5-tiny --steps 1 --quiet \
  --export-weights ex --names megatron-core
refuse "--export-weights in check" "export-weights" -- "$P" check --model gpt-micro --steps 1 --quiet \
  --export-weights ex --names hf-gpt2
refuse "--export-weights with --print-config" "export-weights" -- "$P" "${M[@]}" --print-config \
  --export-weights ex --names hf-gpt2
refuse "--export-weights = --save" "export-weights" -- "$P" "${M[@]}" --save ex \
  --export-weights ex --names hf-gpt2
mkdir -p "$w/ck" && cp "$tmp/ck/model.safetensors" "$w/ck/"
refuse "--export-weights over --load's checkpoint" "export-weights.*load" -- "$P" "${M[@]}" \
  --load ck --export-weights ck --names megatron-lm
mkdir -p "$w/ex"
refuse "--dump inside --export-weights" "dump.*export-weights" -- "$P" "${M[@]}" --dump ex/x.st \
  --export-weights ex --names hf-gpt2

echo "RESULT test_export_weights.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
