#!/usr/bin/env bash
# test_tp2d_report.sh - the tensor-parallel report of `parity train` for
# Colossal-AI's 2-D and 2.5-D modes (ref/parallel/tp/tp_report.c, counting
# what ref/model/tp2d.c moves). Per step, device 0's row and column groups
# (both tallied as family "tp") must make exactly the collectives the
# report derives (kind, dtype, calls, elements, bytes, each row), and the
# report must say so. Independently of the report, this test recomputes
# the two collectives that carry the traffic, the SUMMA broadcasts and the
# open reduce-scatters, from the model's shape: calls and elements. Also
# the report's parameter blocks (= the parameter table = the arena's
# high-water), the activations (measured high-water = the allocation
# table), and for 2.5-D the depth's gradient reduction (= its formula).
# Layouts: 2-D q = 2; q = 3 (uneven blocks: 3 + 3 + 2 tiles); 2.5-D q = 2,
# d = 2; 2-D with dp = 2 and 2 microbatches. Negative control: Colossal's
# fp32 LayerNorm partials (--test-broken tp2d-layernorm-fp32) move the row
# sums from xacc_t to fp32 all-reduces: the report must say DIFFER.
# Ends with "RESULT test_tp2d_report.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
cd "$(dirname "$0")/.." || exit 1
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

# expected MODEL q d dp m: "broadcast f32 calls elements" and "reduce_scatter xvec
# calls elements" per step, from the shape (tp2d.c's SUMMA steps and open slots):
# column 0 holds ceil(units/q) of each kind's tiles (hidden and vocabulary tiles of
# tile_features, heads of D = h/heads, FFN tiles of tile_ffn)
expected() {
  local m=$1 q=$2 d=$3 dp=$4 mm=$5
  local h F V T L B heads tf tff
  h=$(cfg "$m" hidden); F=$(cfg "$m" ffn); V=$(cfg "$m" vocab); T=$(cfg "$m" seq_length)
  L=$(cfg "$m" layers); B=$(cfg "$m" global_batch); heads=$(cfg "$m" heads)
  tf=$("$PARITY" train --model "$m" --print-config | grep -oE '"features": [0-9]+' | awk '{print $2}')
  tff=$("$PARITY" train --model "$m" --print-config | grep -oE '"ffn": [0-9]+' | tail -1 | awk '{print $2}')
  awk -v h="$h" -v F="$F" -v V="$V" -v T="$T" -v L="$L" -v B="$B" -v heads="$heads" -v tf="$tf" \
      -v tff="$tff" -v q="$q" -v d="$d" -v dp="$dp" -v m="$mm" 'function ceil(a, b) { return int((a + b - 1) / b) }
    BEGIN {
      mb = B / dp / m                       # sequences of a microbatch
      n = mb / (q * d) * T                  # tokens of the row block
      C0 = ceil(h / tf, q) * tf; A0 = ceil(heads, q) * (h / heads)
      F0 = ceil(F / tff, q) * tff; V0 = ceil(V / tf, q) * tf
      w = C0; if (A0 > w) w = A0; if (F0 > w) w = F0; if (V0 > w) w = V0
      slot = 3 * mb * T * w; if (3 * w * w > slot) slot = 3 * w * w   # tp2d_layout_scratch
      big = T > 3 * w ? T : 3 * w; p = (int(big / q) + 1) * w; if (p > slot) slot = p
      # a linear [O, K]: 4q broadcasts, 2 n K of X blocks and 2 O K of W blocks
      bl = 2 * n * h + 2 * 3 * A0 * h + 2 * n * h + 2 * C0 * h + 2 * n * h + 2 * F0 * h + 2 * n * F + 2 * C0 * F
      bh = 2 * V * C0 + n * V               # the head: E twice, dlogits once
      printf "broadcast f32 %.0f %.0f\n", m * (16 * q * L + 3 * q), m * (L * bl + bh)
      # open reduce-scatters: dX, dW and the bias of 4 linears, 2 + 2 LayerNorm pieces a layer;
      # LNf 2, the logits and dE slots, the position table
      pl = q * (ceil(3 * A0, q) + ceil(C0, q) + ceil(F0, q) + ceil(C0, q)) + 4 * q * ceil(C0, q)
      e = L * (8 * q * slot + pl) + 2 * q * ceil(C0, q) + 2 * q * slot + q * ceil(T, q) * C0
      printf "reduce_scatter xvec %.0f %.0f\n", m * (16 * L + 5), m * e
    }'
}

# check NAME q d dp m ARGS...: a 2-D layout for 2 steps (1 with dp or m > 1)
check() {
  local name=$1 q=$2 d=$3 dp=$4 m=$5; shift 5
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
  expected gpt-tiny "$q" "$d" "$dp" "$m" >"$tmp/want"
  awk '{print $1, $2, $3, $4}' "$tmp/got" | grep -E '^(broadcast f32|reduce_scatter xvec) ' >"$tmp/got2"
  if ! diff -u "$tmp/want" "$tmp/got2" >"$tmp/diff"; then
    fail "$name: broadcasts and open reduce-scatters = this test's count" "$(cat "$tmp/diff")"; return
  fi
  if ! grep -qE "the parameter table: [0-9]+ \(= formula\); measured arena high-water [0-9]+ B = [0-9]+ x 4 B" "$out"; then
    fail "$name: parameter blocks" "$(grep -A3 '^parameters per device' "$out")"; return
  fi
  local psi arena
  psi=$(sed -nE 's/.*the parameter table: ([0-9]+) .*/\1/p' "$out")
  arena=$(sed -nE 's/.*measured arena high-water ([0-9]+) B.*/\1/p' "$out")
  if [ "$arena" != "$((psi * 4))" ]; then fail "$name: arena params = 4 Psi" "arena $arena, Psi $psi"; return; fi
  local meas table
  meas=$(sed -nE 's/.*measured high-water, device 0: ([0-9.]+) MB; the allocation table: .*/\1/p' "$out")
  table=$(sed -nE 's/.*measured high-water, device 0: [0-9.]+ MB; the allocation table: ([0-9.]+) MB.*/\1/p' "$out")
  if [ -z "$meas" ] || [ "$meas" != "$table" ]; then
    fail "$name: activations: measured high-water = the allocation table" "measured '$meas' table '$table'"; return
  fi
  if ! awk '$1 == "2-D" || $1 == "2.5-D" { d = $5 - $9; if (d < 0) d = -d; found = 1; if (d > 0.002) bad = 1 }
            END { exit !found || bad }' "$out"; then
    fail "$name: activations: formula per layer = the table's" "$(grep -E '^  (2-D|2.5-D) ' "$out")"; return
  fi
  if [ "$d" -gt 1 ] && ! grep -q "per device): .*: measured = formula" "$out"; then
    fail "$name: the depth's gradient reduction = its formula" "$(grep -A3 'depth (tp3)' "$out")"; return
  fi
  grep -q "Colossal-AI's table" "$out" || { fail "$name: the paper's formula line" ""; return; }
  ok "$name: $(wc -l <"$tmp/got") collective rows = derived formula; broadcasts, open reduce-scatters = shape count; Psi $psi = table = arena; activations = table"
}

check "2d q=2"                2 1 1 1 --tensor-model-parallel-size 4 --tensor-parallel-mode 2d
check "2d q=3 uneven blocks"  3 1 1 1 --tensor-model-parallel-size 9 --tensor-parallel-mode 2d
check "2.5d q=2 d=2"          2 2 1 1 --tensor-model-parallel-size 8 --tensor-parallel-mode 2.5d --tensor-parallel-depth 2
check "2d q=2 dp=2 accum=2"   2 1 2 2 --tensor-model-parallel-size 4 --tensor-parallel-mode 2d --data-parallel-size 2 \
      --accum-degree 2

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
