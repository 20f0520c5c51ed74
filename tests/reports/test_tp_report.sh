#!/usr/bin/env bash
# test_tp_report.sh - the tensor-parallel report of `parity train` against
# Megatron's formulas computed here, independently of the report's own:
# per step, device 0's tensor-parallel group must make exactly the
# collectives the formula lists (kind, dtype, calls, elements, bytes) and
# nothing else, so a collective added to or dropped from the model fails
# it; under full recomputation too, where a recomputed layer's forward
# collectives come again in its backward (selective recomputation adds
# none). Also the activation slot's bytes per token per layer, with and
# without sequence parallelism. Negative control: the deliberately broken
# fp32 completions (--test-broken tp-fp32-sums) move the row-parallel sums
# from the open-sum all-reduce to the fp32 one, and both this test's
# comparison and the report must say so.
# Ends with "RESULT test_tp_report.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d /tmp/parity-tp-report-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

# cfg MODEL KEY: a field of the model's config (--print-config's JSON)
cfg() { "$PARITY" train --model "$1" --print-config | grep -oE "\"$2\": [0-9.]+" | head -1 | awk '{print $2}'; }

# expected L h T tokens m sp R: the formula's rows per step, "kind dtype calls elements",
# tokens = sequences of device 0's dp rank x T, m = its microbatches per step,
# R = the layers full recomputation runs forward again (0: none)
expected() {
  awk -v L="$1" -v h="$2" -v tok="$4" -v m="$5" -v sp="$6" -v R="${7:-0}" 'BEGIN {
    # a recomputed layer repeats its forward collectives: the dense and fc2
    # outputs (SP: the gathers before qkv and fc1 too)
    l4 = 4 * L + 2 * R
    if (sp == 0) {
      # 4 all-reduces of [b s, h] a layer (dense, fc2 outputs; qkv, fc1 input grads)
      # + the LM-head input gradient, as open sums; the embedding [b s, h], and
      # cross-entropy max, target logit [b s] in fp32; the sum of exps as xacc_t
      printf "all_reduce xvec %.0f %.0f\n", m * (l4 + 1), (l4 + 1) * tok * h
      printf "all_reduce f32 %.0f %.0f\n", 3 * m, tok * h + 2 * tok
      printf "all_reduce xacc %.0f %.0f\n", m, tok
    } else {
      # each all-reduce becomes an all-gather / reduce-scatter pair of the same
      # volume; LayerNorm gradients (2 LayerNorms a layer + LNf, weight and bias)
      printf "all_gather f32 %.0f %.0f\n", m * (l4 + 2), (l4 + 2) * tok * h
      printf "reduce_scatter xvec %.0f %.0f\n", m * (l4 + 1), (l4 + 1) * tok * h
      printf "reduce_scatter f32 %.0f %.0f\n", m, tok * h
      printf "all_reduce xvec %.0f %.0f\n", m * (4 * L + 2), (4 * L + 2) * m * h
      printf "all_reduce f32 %.0f %.0f\n", 2 * m, 2 * tok
      printf "all_reduce xacc %.0f %.0f\n", m, tok
    }
  }' | sort
}

# rows FILE measured|formula: the report's table as "kind dtype calls elements"
rows() {
  awk -v which="$2" '$7 == "|" && $1 ~ /^(all_reduce|reduce_scatter|all_gather|broadcast|reduce|all_to_all|all_to_all_v|barrier|send|recv)$/ {
    if (which == "measured") { if ($3 + 0 > 0) print $1, $2, $3, $4 }
    else if ($8 + 0 > 0) print $1, $2, $8, $9 }' "$1" | sort
}

# bytes_ok FILE: every measured row's bytes = elements x the dtype's size
bytes_ok() {
  local xs; xs=$(sed -nE 's/.*xacc_t \(([0-9]+) B\).*/\1/p' "$1" | head -1)
  awk -v xs="$xs" '$7 == "|" && $3 + 0 > 0 {
    es = $2 == "xvec" ? 8 : $2 == "xacc" ? xs : 4
    if ($4 * es != $5) { print "bytes " $5 " != " $4 " x " es " (" $1 " " $2 ")"; bad = 1 } }
    END { exit bad }' "$1"
}

# per_token MODEL tp sp: the slot's bytes per token of one layer
per_token() {
  local m=$1 t=$2 sp=$3 h a T f hd ad
  h=$(cfg "$m" hidden); a=$(cfg "$m" heads); T=$(cfg "$m" seq_length); f=$(cfg "$m" ffn)
  # dropout switches: masks (1 byte) and the probabilities after dropout exist only when on
  hd=$("$PARITY" train --model "$m" --print-config | grep -oE '"dropouts": \{"hidden": [0-9.e-]+' | awk '{print ($NF > 0)}')
  ad=$("$PARITY" train --model "$m" --print-config | grep -oE '"attention": [0-9.e-]+' | awk '{print ($NF > 0)}')
  awk -v h="$h" -v a="$a" -v T="$T" -v f="$f" -v t="$t" -v sp="$sp" -v hd="$hd" -v ad="$ad" 'BEGIN {
    rep = 32 * h + 2 * h * hd + 8                     # replicated over tp: 8 [n,h] values, 2 masks, 2 1/std
    part = (16 * h + 12 * f + a * (T * (4 + 5 * ad) + 4)) / t   # qkv, ctx; fc1, GeLU; attention
    print sp ? rep / t + 8 * h + part : rep + part }'   # SP: gathered LayerNorm outputs kept
}

# check NAME MODEL ARGS...: runs a tp layout for 2 steps and compares
check() {
  local name=$1 model=$2; shift 2
  local out="$tmp/out"
  if ! "$PARITY" train --model "$model" --steps 2 "$@" >"$out" 2>&1; then
    fail "$name: parity train failed" "$(tail -3 "$out")"; return
  fi
  local layout L h T B dp m sp=0 R=0 N
  layout=$(sed -nE 's/.*layout (tp=[^(]*[^( ]) *\(.*/\1/p' "$out" | head -1)
  dp=$(echo "$layout" | sed -nE 's/.*dp=([0-9]+).*/\1/p')
  m=$(echo "$layout" | sed -nE 's/.*accum=([0-9]+).*/\1/p')
  case " $* " in *" --sequence-parallel "*) sp=1 ;; esac
  L=$(cfg "$model" layers); h=$(cfg "$model" hidden); T=$(cfg "$model" seq_length)
  B=$(cfg "$model" global_batch)
  # full recomputation (no pipeline here): uniform recomputes every layer,
  # block the first N; selective recomputes attention's core, no collective
  case " $* " in *" --recompute-granularity full "*)
    R=$L
    case " $* " in *" --recompute-method block "*)
      N=$(echo " $* " | sed -nE 's/.* --recompute-num-layers ([0-9]+) .*/\1/p')
      R=$(( N < L ? N : L )) ;;
    esac ;;
  esac
  local tokens=$(( B / dp * T ))
  expected "$L" "$h" "$T" "$tokens" "$m" "$sp" "$R" >"$tmp/want"
  rows "$out" measured >"$tmp/got"
  rows "$out" formula >"$tmp/formula"
  if ! diff -u "$tmp/want" "$tmp/got" >"$tmp/diff"; then
    fail "$name: measured tp collectives = the formula ($layout)" "$(cat "$tmp/diff")"; return
  fi
  if ! diff -u "$tmp/want" "$tmp/formula" >"$tmp/diff"; then
    fail "$name: the report's formula columns = this test's formula" "$(cat "$tmp/diff")"; return
  fi
  if ! bytes_ok "$out" >"$tmp/bytes"; then fail "$name: bytes" "$(cat "$tmp/bytes")"; return; fi
  if ! grep -q "measured = formula" "$out"; then fail "$name: the report's verdict" "$(grep -A8 '^tensor par' "$out")"; return; fi
  local note=""
  if [ "$R" -gt 0 ]; then # the recomputed collectives are there to count: without them it differs
    expected "$L" "$h" "$T" "$tokens" "$m" "$sp" 0 >"$tmp/stored"
    if diff -q "$tmp/stored" "$tmp/got" >/dev/null; then
      fail "$name: recomputation adds no collective to count" "$(cat "$tmp/got")"; return
    fi
    note=", $R layers' forward collectives again"
  fi
  ok "$name: $(wc -l <"$tmp/want") collective rows, calls/elements/bytes = formula ($layout$note)"
}

# memory NAME MODEL tp ARGS...: the slot formula's bytes per token per layer,
# and the allocation table's bytes per layer within 64-byte alignment
memory() {
  local name=$1 model=$2 t=$3; shift 3
  local out="$tmp/mem"
  if ! "$PARITY" train --model "$model" --steps 1 --tensor-model-parallel-size "$t" "$@" >"$out" 2>&1; then
    fail "$name: parity train failed" "$(tail -3 "$out")"; return
  fi
  local want0 want1 got0 got1
  want0=$(per_token "$model" "$t" 0); want1=$(per_token "$model" "$t" 1)
  got0=$(awk '$1 == "no" && $2 == "SP" {print $3}' "$out")
  got1=$(awk '$1 == "with" && $2 == "SP" {print $3}' "$out")
  if [ "$want0" != "$got0" ] || [ "$want1" != "$got1" ]; then
    fail "$name: bytes per token per layer" "want $want0 / $want1 (no SP / SP), report $got0 / $got1"; return
  fi
  if ! awk '($1 == "no" || $1 == "with") && $2 == "SP" && $9 != "" {
        d = $5 - $9; if (d < 0) d = -d; if (d > 0.002) { print; bad = 1 } } END { exit bad }' "$out" >"$tmp/far"; then
    fail "$name: formula per layer vs the allocation table" "$(cat "$tmp/far")"; return
  fi
  local meas table
  meas=$(sed -nE 's/.*measured high-water, device 0: ([0-9.]+) MB.*/\1/p' "$out")
  table=$(sed -nE 's/.*the allocation table: ([0-9.]+) MB.*/\1/p' "$out")
  if [ -z "$meas" ] || [ "$meas" != "$table" ]; then
    fail "$name: measured activation high-water = the allocation table" "measured '$meas' table '$table'"; return
  fi
  ok "$name: $want0 B (no SP) / $want1 B (SP) per token per layer; measured = table = $meas MB"
}

check "gpt-micro tp=2"                 gpt-micro --tensor-model-parallel-size 2
check "gpt-tiny tp=2 dp=2 uneven accum" gpt-tiny --tensor-model-parallel-size 2 --data-parallel-size 2 --accum-degree 5
check "gpt-tiny tp=4 dp=2 ZeRO-3 ring" gpt-tiny --tensor-model-parallel-size 4 --data-parallel-size 2 --zero-stage 3 \
      --accum-degree 2 --coll-algo ring
check "gpt-micro tp=2 ring" gpt-micro --tensor-model-parallel-size 2 --coll-algo ring
check "gpt-micro tp=2 sequence parallel" gpt-micro --tensor-model-parallel-size 2 --sequence-parallel
check "gpt-tiny tp=4 sequence parallel"  gpt-tiny --tensor-model-parallel-size 4 --sequence-parallel --accum-degree 3
# recomputation: full runs a layer's forward again, collectives included
check "gpt-tiny tp=2 full recomputation" gpt-tiny --tensor-model-parallel-size 2 --recompute-granularity full
check "gpt-tiny tp=2 SP full recomputation" gpt-tiny --tensor-model-parallel-size 2 --sequence-parallel \
      --recompute-granularity full
check "gpt-tiny tp=2 full recomputation, block 3, 2 microbatches" gpt-tiny --tensor-model-parallel-size 2 \
      --recompute-granularity full --recompute-method block --recompute-num-layers 3 --accum-degree 2
check "gpt-micro tp=2 SP selective recomputation" gpt-micro --tensor-model-parallel-size 2 --sequence-parallel \
      --recompute-granularity selective
memory "gpt-tiny tp=2 memory" gpt-tiny 2
memory "gpt-micro tp=2 SP memory" gpt-micro 2 --sequence-parallel

# negative control: the row-parallel sums move to fp32 all-reduces
if "$PARITY" train --model gpt-micro --steps 1 --tensor-model-parallel-size 2 --test-broken tp-fp32-sums \
     >"$tmp/broken" 2>&1; then
  L=$(cfg gpt-micro layers); h=$(cfg gpt-micro hidden); T=$(cfg gpt-micro seq_length); B=$(cfg gpt-micro global_batch)
  expected "$L" "$h" "$T" $((B * T)) 2 0 >"$tmp/want"
  rows "$tmp/broken" measured >"$tmp/got"
  if ! diff -q "$tmp/want" "$tmp/got" >/dev/null && grep -q "DIFFERS" "$tmp/broken"; then
    ok "negative control: broken fp32 completions differ from the formula, and the report says so"
  else
    fail "negative control: broken fp32 completions not caught" "$(grep -A8 '^tensor par' "$tmp/broken")"
  fi
else
  fail "negative control: parity train failed" "$(tail -3 "$tmp/broken")"
fi

echo "RESULT test_tp_report.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
