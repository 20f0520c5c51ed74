#!/usr/bin/env bash
# test_tp2d_report.sh - the tensor-parallel report of `parity train` for
# Colossal-AI's 2-D, 2.5-D and 3-D modes (ref/parallel/reports/tp_modes_count.c,
# counting what ref/model/styles/tp2d.c and tp3d.c move). Per step, device 0's
# tensor-parallel groups (tp, tp2, tp3 all tallied as family "tp"; 3-D's
# vector groups as "tp-vec") must make exactly the collectives the report
# derives (kind, dtype, calls, elements, bytes, each row), and the report
# must say so (3-D: the vector groups' family on its own too).
# Independently of the report, this test recomputes from the model's shape
# the collectives that carry the traffic: 2-D's SUMMA broadcasts and open
# reduce-scatters (slots as wide as the kind's widest column block); 3-D's
# all-gathers (fp32, i32) and open reduce-scatters. Also the report's
# parameter blocks (= the parameter table = the arena's high-water), the
# activations (measured high-water = the allocation table), for 2.5-D the
# depth's gradient reduction (= its formula), for 3-D the data-parallel
# gradient reduction (= its formula).
# Layouts: 2-D q = 2; q = 3 (uneven blocks: 3 + 3 + 2 tiles); 2.5-D q = 2,
# d = 2; 2-D with dp = 2 and 2 microbatches; 3-D q = 2; 3-D q = 2 with
# dp = 2 and 3 microbatches. Negative control: Colossal's fp32 LayerNorm
# partials (--test-broken tp2d-layernorm-fp32) move the row sums from
# xacc_t to fp32 all-reduces: the report must say DIFFER. (3-D's broken
# group swap moves the same counts over other groups of the same family:
# the counters cannot see it, the report says so.)
# Ends with "RESULT test_tp2d_report.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
cd "$(dirname "$0")/../.." || exit 1
tmp=$(mktemp -d /tmp/parity-tp2d-report-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

# cfg MODEL KEY: a field of the model's config (--print-config's JSON)
cfg() { "$PARITY" train --model "$1" --print-config | grep -oE "\"$2\": [0-9.]+" | head -1 | awk '{print $2}'; }

# the report's table: "kind dtype calls elements bytes" measured / formula
rows() {
  awk -v which="$2" '$7 == "|" && $1 ~ /^(all_reduce|reduce_scatter|all_gather|broadcast|reduce|all_to_all|all_to_all_v|barrier|send|recv)$/ {
    if (which == "measured") print $1, $2, $3, $4, $5; else print $1, $2, $8, $9, $10 }' "$1" | sort
}

# bytes_ok FILE: every measured row's bytes = elements x the dtype's size
bytes_ok() {
  local xs; xs=$(sed -nE 's/.*xacc_t \(([0-9]+) B\).*/\1/p' "$1" | head -1)
  awk -v xs="$xs" '$7 == "|" && $3 + 0 > 0 {
    es = $2 == "xvec" || $2 == "i64" ? 8 : $2 == "xacc" ? xs : 4
    if ($4 * es != $5) { print "bytes " $5 " != " $4 " x " es " (" $1 " " $2 ")"; bad = 1 } }
    END { exit bad }' "$1"
}

# shape MODEL: "h F V T L B heads tf tff" from --print-config
shape() {
  local j; j=$("$PARITY" train --model "$1" --print-config)
  for k in hidden ffn vocab seq_length layers global_batch heads; do
    echo "$j" | grep -oE "\"$k\": [0-9.]+" | head -1 | awk '{printf "%s ", $2}'
  done
  echo "$j" | grep -oE '"features": [0-9]+' | awk '{printf "%s ", $2}'
  echo "$j" | grep -oE '"ffn": [0-9]+' | tail -1 | awk '{print $2}'
}

# expected MODEL q d dp m: 2-D / 2.5-D: "broadcast f32 calls elements" and
# "reduce_scatter xvec calls elements" per step, from the shape (tp2d.c's SUMMA
# steps and open slots): column 0 holds ceil(units/q) of each kind's tiles
# (hidden and vocabulary tiles of tile_features, heads of D = h/heads, FFN tiles
# of tile_ffn), the widest block of each kind, so a slot is column 0's width
expected() {
  local m=$1 q=$2 d=$3 dp=$4 mm=$5
  # shellcheck disable=SC2046
  set -- $(shape "$m")
  awk -v h="$1" -v F="$2" -v V="$3" -v T="$4" -v L="$5" -v B="$6" -v heads="$7" -v tf="$8" \
      -v tff="$9" -v q="$q" -v d="$d" -v dp="$dp" -v m="$mm" 'function ceil(a, b) { return int((a + b - 1) / b) }
    BEGIN {
      mb = B / dp / m                       # sequences of a microbatch
      n = mb / (q * d) * T                  # tokens of the row block
      C0 = ceil(h / tf, q) * tf; A0 = ceil(heads, q) * (h / heads)
      F0 = ceil(F / tff, q) * tff; V0 = ceil(V / tf, q) * tf
      # a linear [O, K]: 4q broadcasts, 2 n K of X blocks and 2 O K of W blocks
      bl = 2 * n * h + 2 * 3 * A0 * h + 2 * n * h + 2 * C0 * h + 2 * n * h + 2 * F0 * h + 2 * n * F + 2 * C0 * F
      bh = 2 * V * C0 + n * V               # the head: E twice, dlogits once
      printf "broadcast f32 %.0f %.0f\n", m * (16 * q * L + 3 * q), m * (L * bl + bh)
      # open reduce-scatters: dX [n, widest in] and dW [O, widest in] slots of 4 linears,
      # the bias and 2 + 2 LayerNorm pieces a layer; LNf 2, the logits [n, widest V] and
      # dE [widest V, C0] slots, the position table
      rl = q * (n * C0 + 3 * A0 * C0) + q * (n * A0 + C0 * A0) + q * (n * C0 + F0 * C0) + q * (n * F0 + C0 * F0)
      pl = q * (ceil(3 * A0, q) + ceil(C0, q) + ceil(F0, q) + ceil(C0, q)) + 4 * q * ceil(C0, q)
      e = L * (rl + pl) + 2 * q * ceil(C0, q) + q * n * V0 + q * V0 * C0 + q * ceil(T, q) * C0
      printf "reduce_scatter xvec %.0f %.0f\n", m * (16 * L + 5), m * e
    }'
}

# expected3 MODEL q dp m: 3-D: "all_gather f32", "all_gather i32" and
# "reduce_scatter xvec" calls and elements per step, from the shape (tp3d.c):
# a linear [O, K] gathers X [q n, K] twice, W's pieces [q ceil(O/q), K] twice,
# dY [q n, O], reduce-scatters Y [q n, O], dX [q n, K], dW's pieces; a bias
# or LayerNorm vector moves q^2 pieces of ceil(ceil(R/q)/q)
expected3() {
  local m=$1 q=$2 dp=$3 mm=$4
  # shellcheck disable=SC2046
  set -- $(shape "$m")
  awk -v h="$1" -v F="$2" -v V="$3" -v T="$4" -v L="$5" -v B="$6" -v heads="$7" -v tf="$8" \
      -v tff="$9" -v q="$q" -v dp="$dp" -v m="$mm" 'function ceil(a, b) { return int((a + b - 1) / b) }
    function p2(x) { return ceil(ceil(x, q), q) }
    function lin(K, O, bias) {
      ag += 2 * q * n * K + q * n * O + 2 * q * ceil(O, q) * K + bias * q * q * p2(O); agc += 5 + bias
      rs += q * n * O + q * n * K + q * ceil(O, q) * K + bias * q * q * p2(O); rsc += 3 + bias
    }
    function ln() { ag += 3 * q * q * p2(C0); agc += 3; rs += 2 * q * q * p2(C0); rsc += 2 }
    BEGIN {
      n = B / dp / m / (q * q) * T          # tokens of device 0 block
      C0 = ceil(h / tf, q) * tf; A0 = ceil(heads, q) * (h / heads)
      F0 = ceil(F / tff, q) * tff; V0 = ceil(V / tf, q) * tf
      for (l = 0; l < L; l++) { ln(); lin(C0, 3 * A0, 1); lin(A0, C0, 1); ln(); lin(C0, F0, 1); lin(F0, C0, 1) }
      ag += q * q * p2(T) * C0 + q * q * n * C0; agc += 2; rs += q * q * p2(T) * C0; rsc += 1   # embedding
      ln(); lin(C0, V0, 0)                  # the final LayerNorm, the head
      printf "all_gather f32 %.0f %.0f\n", m * agc, m * ag
      printf "all_gather i32 %.0f %.0f\n", m * 4, m * 4 * q * q * n   # ids twice, targets twice
      printf "reduce_scatter xvec %.0f %.0f\n", m * rsc, m * rs
    }'
}

# check NAME MODE q d dp m ARGS...: a layout for 2 steps (1 with dp or m > 1)
check() {
  local name=$1 mode=$2 q=$3 d=$4 dp=$5 m=$6; shift 6
  local out="$tmp/out" steps=2
  [ "$dp" -gt 1 ] || [ "$m" -gt 1 ] && steps=1
  if ! "$PARITY" train --model gpt-tiny --steps "$steps" "$@" >"$out" 2>&1; then
    fail "$name: parity train failed" "$(tail -3 "$out")"; return
  fi
  rows "$out" measured >"$tmp/got"; rows "$out" formula >"$tmp/formula"
  if [ ! -s "$tmp/got" ]; then fail "$name: no tensor-parallel table" "$(grep -A3 '^tensor par' "$out")"; return; fi
  if ! diff -u "$tmp/formula" "$tmp/got" >"$tmp/diff"; then
    fail "$name: measured = the report's derived formula, every row" "$(cat "$tmp/diff")"; return
  fi
  if ! grep -q "measured = formula: calls, elements and bytes" "$out" || grep -q "DIFFER" "$out"; then
    fail "$name: the report's verdict" "$(grep -E 'measured|DIFFER' "$out")"; return
  fi
  if ! bytes_ok "$out" >"$tmp/bytes"; then fail "$name: bytes" "$(cat "$tmp/bytes")"; return; fi
  local what
  if [ "$mode" = 3d ]; then
    expected3 gpt-tiny "$q" "$dp" "$m" >"$tmp/want"
    what="all-gathers, open reduce-scatters"
    awk '{print $1, $2, $3, $4}' "$tmp/got" | grep -E '^(all_gather f32|all_gather i32|reduce_scatter xvec) ' >"$tmp/got2"
    if ! grep -qE "the vector groups .*: ([0-9]+) calls, ([0-9]+) elements per step; the formula's vec column: .*: equal, kind by kind" "$out"; then
      fail "$name: the vector groups' family = the formula's vec column" "$(grep 'the vector groups' "$out")"; return
    fi
  else
    expected gpt-tiny "$q" "$d" "$dp" "$m" >"$tmp/want"
    what="broadcasts, open reduce-scatters"
    awk '{print $1, $2, $3, $4}' "$tmp/got" | grep -E '^(broadcast f32|reduce_scatter xvec) ' >"$tmp/got2"
  fi
  if ! diff -u "$tmp/want" "$tmp/got2" >"$tmp/diff"; then
    fail "$name: $what = this test's count" "$(cat "$tmp/diff")"; return
  fi
  if ! grep -qE "the parameter table: [0-9]+ \(= formula\); measured arena high-water [0-9]+ B = [0-9]+ x 4 B" "$out"; then
    fail "$name: parameter blocks" "$(grep -A3 '^parameters per device' "$out")"; return
  fi
  local psi arena golden
  psi=$(sed -nE 's/.*the parameter table: ([0-9]+) .*/\1/p' "$out")
  arena=$(sed -nE 's/.*measured arena high-water ([0-9]+) B.*/\1/p' "$out")
  if [ "$arena" != "$((psi * 4))" ]; then fail "$name: arena params = 4 Psi" "arena $arena, Psi $psi"; return; fi
  if [ "$mode" = 3d ]; then # even blocks: exactly the golden model's / q^3
    golden=$(sed -nE "s/.*against the golden model's ([0-9]+): .*/\1/p" "$out")
    if [ "$((psi * q * q * q))" != "$golden" ]; then
      fail "$name: 3-D parameters = golden / q^3 (even blocks)" "Psi $psi, golden $golden"; return
    fi
  fi
  local meas table
  meas=$(sed -nE 's/.*measured high-water, device 0: ([0-9.]+) MB; the allocation table: .*/\1/p' "$out")
  table=$(sed -nE 's/.*measured high-water, device 0: [0-9.]+ MB; the allocation table: ([0-9.]+) MB.*/\1/p' "$out")
  if [ -z "$meas" ] || [ "$meas" != "$table" ]; then
    fail "$name: activations: measured high-water = the allocation table" "measured '$meas' table '$table'"; return
  fi
  if ! awk '$1 == "2-D" || $1 == "2.5-D" || $1 == "3-D" { d = $5 - $9; if (d < 0) d = -d; found = 1; if (d > 0.002) bad = 1 }
            END { exit !found || bad }' "$out"; then
    fail "$name: activations: formula per layer = the table's" "$(grep -E '^  (2-D|2.5-D|3-D) ' "$out")"; return
  fi
  if [ "$mode" = 2.5d ] && ! grep -q "per device): .*: measured = formula" "$out"; then
    fail "$name: the depth's gradient reduction = its formula" "$(grep -A3 'depth (tp3)' "$out")"; return
  fi
  if [ "$mode" = 3d ] && ! grep -q "no depth reduction: .* = formula)" "$out"; then
    fail "$name: the data-parallel gradient reduction = its formula" "$(grep 'no depth reduction' "$out")"; return
  fi
  grep -q "Colossal-AI's table" "$out" || { fail "$name: the paper's formula line" ""; return; }
  ok "$name: $(wc -l <"$tmp/got") collective rows = derived formula; $what = shape count; Psi $psi = table = arena; activations = table"
}

check "2d q=2"                2d 2 1 1 1 --tensor-model-parallel-size 4 --tensor-parallel-mode 2d
cp "$tmp/out" "$tmp/even"
check "2d q=3 uneven blocks"  2d 3 1 1 1 --tensor-model-parallel-size 9 --tensor-parallel-mode 2d
cp "$tmp/out" "$tmp/uneven"
check "2.5d q=2 d=2"          2.5d 2 2 1 1 --tensor-model-parallel-size 8 --tensor-parallel-mode 2.5d --tensor-parallel-depth 2
check "2d q=2 dp=2 accum=2"   2d 2 1 2 2 --tensor-model-parallel-size 4 --tensor-parallel-mode 2d --data-parallel-size 2 \
      --accum-degree 2
check "3d q=2"                3d 2 2 1 1 --tensor-model-parallel-size 8 --tensor-parallel-mode 3d
check "3d q=2 dp=2 accum=3"   3d 2 2 2 3 --tensor-model-parallel-size 8 --tensor-parallel-mode 3d --data-parallel-size 2 \
      --accum-degree 3

# even column blocks: the open reduce-scatters move exactly the blocks they complete
# (slots as wide as the widest block); q = 3's uneven ones (3 + 3 + 2 tiles) pad
pad_even=$(sed -nE 's/.*reduce-scatters per step: .*\(([0-9.]+)%\).*/\1/p' "$tmp/even")
pad_uneven=$(sed -nE 's/.*reduce-scatters per step: .*\(([0-9.]+)%\).*/\1/p' "$tmp/uneven")
if [ "$pad_even" = "100.0" ] && [ -n "$pad_uneven" ] && awk -v p="$pad_uneven" 'BEGIN { exit !(p < 100) }'; then
  ok "open reduce-scatters: q=2 all blocks (100.0%), q=3 uneven blocks $pad_uneven% (slots pad to the widest)"
else
  fail "open reduce-scatters' padding" "q=2: '$pad_even'%, q=3: '$pad_uneven'%"
fi

# negative control: Colossal's fp32 LayerNorm partials
if "$PARITY" train --model gpt-tiny --steps 1 --tensor-model-parallel-size 4 --tensor-parallel-mode 2d \
     --test-broken tp2d-layernorm-fp32 >"$tmp/broken" 2>&1; then
  if grep -q "all_reduce .*DIFFERS" "$tmp/broken" && grep -q "measured and formula DIFFER" "$tmp/broken"; then
    ok "negative control: fp32 LayerNorm partials differ from the formula, and the report says so"
  else
    fail "negative control: fp32 LayerNorm partials not caught" "$(grep -E 'all_reduce|measured' "$tmp/broken")"
  fi
else
  fail "negative control: parity train failed" "$(tail -3 "$tmp/broken")"
fi

echo "RESULT test_tp2d_report.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
