#!/usr/bin/env bash
# test_cp_report.sh - the context-parallel report of `parity train` against
# the traffic computed here, independently of the report's own formula:
# per step, device 0's cp family must send exactly the ring's K and V
# blocks (fp32) and at least its dK/dV open sums (8 bytes an element; the
# exact sums' exception accumulators come on top), or exactly Ulysses'
# all-to-alls; and the report's formula column and verdict must agree.
# Recomputation repeats the forward's exchange of every layer whose
# attention core runs again: full, the recomputed layers (uniform: every
# layer; block N: the first N of the stage's layers); selective, every
# layer. So a report that leaves recomputation out fails here.
#
# Per layer, n = B/dp x T/cp tokens held, A = h/tp features, 4-byte floats:
#   ring     K/V blocks 4 (cp-1) n A (+ 2 (cp-1) n A a recomputed core),
#            open sums (cp-1) n 2A at 8 bytes
#   Ulysses  all-to-alls 8 (cp-1)/cp n A (+ 4 (cp-1)/cp n A recomputed)
# Ends with "RESULT test_cp_report.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/parity-cp-report-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

# cfg MODEL KEY: a field of the model's config (--print-config's JSON)
cfg() { "$PARITY" train --model "$1" --print-config | grep -oE "\"$2\": [0-9.]+" | head -1 | awk '{print $2}'; }

# flag NAME DEFAULT ARGS...: the value given to --NAME, or DEFAULT
flag() {
  local name=$1 def=$2; shift 2
  local v; v=$(echo " $* " | sed -nE "s/.* --$name ([^ ]+) .*/\\1/p")
  echo "${v:-$def}"
}

# check NAME MODEL ARGS...: one step of a cp layout (no pipeline: device 0
# holds every layer), its counters against the traffic above
check() {
  local name=$1 model=$2; shift 2
  local out="$tmp/out"
  if ! "$PARITY" train --model "$model" --steps 1 "$@" >"$out" 2>&1; then
    fail "$name: parity train failed" "$(tail -3 "$out")"; return
  fi
  local L h T B cp tp dp a2a=0 cores=0 N
  L=$(cfg "$model" layers); h=$(cfg "$model" hidden); T=$(cfg "$model" seq_length)
  B=$(cfg "$model" global_batch)
  cp=$(flag context-parallel-size 1 "$@"); tp=$(flag tensor-model-parallel-size 1 "$@")
  dp=$(flag data-parallel-size 1 "$@")
  [ "$(flag cp-comm-type p2p "$@")" = a2a ] && a2a=1
  case "$(flag recompute-granularity none "$@")" in
    selective) cores=$L ;;
    full) cores=$L
          if [ "$(flag recompute-method uniform "$@")" = block ]; then
            N=$(flag recompute-num-layers 1 "$@"); cores=$(( N < L ? N : L ))
          fi ;;
  esac
  # bytes a step, in MB to the report's 3 decimals
  local want_kv want_open want_a2a got_kv got_open got_a2a form_kv form_a2a
  read -r want_kv want_open want_a2a <<<"$(awk -v L="$L" -v c="$cores" -v n="$(( B / dp * T / cp ))" \
      -v A="$(( h / tp ))" -v cp="$cp" -v a2a="$a2a" 'BEGIN {
    if (a2a) printf "0.000 0.000 %.3f\n", 4 * (cp - 1) / cp * n * A * (8 * L + 4 * c) / 1e6
    else printf "%.3f %.3f 0.000\n", 4 * (cp - 1) * n * A * (4 * L + 2 * c) / 1e6, 8 * (cp - 1) * n * 2 * A * L / 1e6 }')"
  got_kv=$(sed -nE 's/^  forward K and V blocks.* ([0-9.]+) MB   formula.*/\1/p' "$out")
  got_open=$(sed -nE 's/^  backward dK\/dV open sums.* ([0-9.]+) MB   formula.*/\1/p' "$out")
  got_a2a=$(sed -nE 's/^  all-to-all of q,k,v.* ([0-9.]+) MB   formula.*/\1/p' "$out")
  form_kv=$(sed -nE 's/^  forward K and V blocks.* = ([0-9.]+) MB$/\1/p' "$out")
  form_a2a=$(sed -nE 's/^  all-to-all of q,k,v.* = ([0-9.]+) MB \(.*/\1/p' "$out")
  local bad=""
  if [ "$a2a" = 1 ]; then
    [ "$got_a2a" = "$want_a2a" ] || bad="$bad all-to-alls measured '$got_a2a' MB, expected $want_a2a;"
    [ "$form_a2a" = "$want_a2a" ] || bad="$bad the report's formula '$form_a2a' MB, expected $want_a2a;"
  else
    [ "$got_kv" = "$want_kv" ] || bad="$bad K/V blocks measured '$got_kv' MB, expected $want_kv;"
    [ "$form_kv" = "$want_kv" ] || bad="$bad the report's formula '$form_kv' MB, expected $want_kv;"
    awk -v g="${got_open:-0}" -v w="$want_open" 'BEGIN {exit !(g >= w)}' ||
      bad="$bad open sums measured '$got_open' MB, expected at least $want_open;"
  fi
  grep -q '^  measured = formula' "$out" || bad="$bad the report's verdict: $(grep -E '^  measured' "$out");"
  if [ -n "$bad" ]; then fail "$name" "$bad" "$(sed -n '/^context parallelism/,/^  measured/p' "$out")"; return; fi
  if [ "$cores" -gt 0 ]; then # recomputation's exchange is there to count
    local stored; stored=$(awk -v L="$L" -v n="$(( B / dp * T / cp ))" -v A="$(( h / tp ))" -v cp="$cp" \
        -v a2a="$a2a" 'BEGIN { printf "%.3f", a2a ? 4 * (cp - 1) / cp * n * A * 8 * L / 1e6 : 16 * (cp - 1) * n * A * L / 1e6 }')
    if [ "$stored" = "$want_kv" ] || [ "$stored" = "$want_a2a" ]; then
      fail "$name: recomputation adds no exchange to count" "stored $stored MB"; return
    fi
  fi
  if [ "$a2a" = 1 ]; then ok "$name: all-to-alls $got_a2a MB = formula ($cores cores again)"
  else ok "$name: K/V blocks $got_kv MB = formula, open sums $got_open MB >= $want_open ($cores cores again)"; fi
}

check "gpt-micro cp=2 ring" gpt-micro --context-parallel-size 2
check "gpt-micro cp=2 Ulysses" gpt-micro --context-parallel-size 2 --cp-comm-type a2a
check "gpt-tiny cp=2 ring, full recomputation" gpt-tiny --context-parallel-size 2 --recompute-granularity full
check "gpt-tiny cp=2 Ulysses, full recomputation" gpt-tiny --context-parallel-size 2 --cp-comm-type a2a \
      --recompute-granularity full
check "gpt-micro cp=2 ring, selective recomputation" gpt-micro --context-parallel-size 2 \
      --recompute-granularity selective
check "gpt-micro cp=2 Ulysses, selective recomputation" gpt-micro --context-parallel-size 2 --cp-comm-type a2a \
      --recompute-granularity selective
check "gpt-tiny cp=2 x tp=2 ring, full block 3" gpt-tiny --context-parallel-size 2 --tensor-model-parallel-size 2 \
      --recompute-granularity full --recompute-method block --recompute-num-layers 3
check "gpt-tiny cp=4 Ulysses, full uniform 2" gpt-tiny --context-parallel-size 4 --cp-comm-type a2a \
      --recompute-granularity full --recompute-num-layers 2

echo "RESULT test_cp_report.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
