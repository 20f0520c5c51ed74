#!/usr/bin/env bash
# test_diff.sh - drives `parity diff` on files written by an independent
# writer (Python's struct + json, below), so the reader is checked against
# the format itself and not against parity's own writer.
#
# Needs $PARITY (the built program; defaults to build/parity) and
# /usr/bin/python3. Ends with "RESULT test_diff.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
PY=/usr/bin/python3
tmp=$(mktemp -d /tmp/parity_diff_XXXXXX)
trap 'rm -rf "$tmp"' EXIT

source "$(dirname "$0")/../expect.sh"

# Runs parity diff; leaves stdout+stderr in $out and the status in $rc.
run_diff() { out=$("$PARITY" diff "$@" 2>&1); rc=$?; }

# Fixture writer: gen.py TESTS DIR CASE... (TESTS: the folder of st_write.py) writes DIR/CASE.safetensors for each
# case: the base set of tensors with one deliberate change, made at the
# bit level with struct. base2 is base again, written separately.
cat >"$tmp/gen.py" <<'EOF'
import json, struct, sys
sys.path.insert(0, sys.argv.pop(1))  # tests/: st_write.py
from st_write import write_safetensors

def f32_bits(x): return struct.unpack("<I", struct.pack("<f", x))[0]
def f64_bits(x): return struct.unpack("<Q", struct.pack("<d", x))[0]

def base():
    # name -> (dtype, shape, list of raw element bit patterns / ints)
    return {
        "w": ("F32", [3, 4], [f32_bits(0.1 * i - 0.5) for i in range(12)]),
        "b": ("F64", [4], [f64_bits(x) for x in (1.0, -2.5, 5e-324, 1e300)]),
        "i": ("I32", [5], [7, -3, 0, 2**31 - 1, -2**31]),
        "h": ("BF16", [2, 2], [0x3F80, 0x4000, 0xBF80, 0x0000]),
        "s": ("F32", [], [f32_bits(1.0)]),
        "e": ("F32", [0, 3], []),
        "n": ("F32", [2], [0x7FC00000, f32_bits(2.0)]),
    }

FMT = {"F32": "<I", "F64": "<Q", "I32": "<i", "I64": "<q", "BF16": "<H", "U8": "<B"}

def save(path, tensors):
    write_safetensors(path, {name: (dt, shape, b"".join(struct.pack(FMT[dt], v) for v in vals))
                             for name, (dt, shape, vals) in tensors.items()},
                      {"made_by": "test_diff.sh"})

def make(case):
    t = base()
    if case == "ulp1":        # w[1,2] (flat 6) moves to the next float up
        t["w"][2][6] += 1
    elif case == "cross0":    # b[2]: +min subnormal -> -min subnormal, 2 ulp apart
        t["b"][2][2] = f64_bits(-5e-324)
    elif case == "signedzero":  # h[1,1]: +0 -> -0, bits differ but 0 ulp
        t["h"][2][3] = 0x8000
    elif case == "int":       # i[3] decreases by 5
        t["i"][2][3] -= 5
    elif case == "nanpayload":  # n[0]: another NaN payload
        t["n"][2][0] = 0x7FC00001
    elif case == "missing":   # drop i, add x
        del t["i"]
        t["x"] = ("U8", [3], [1, 2, 3])
    elif case == "shape":     # w reshaped, i widened to I64
        t["w"] = ("F32", [4, 3], t["w"][2])
        t["i"] = ("I64", [5], t["i"][2])
    elif case not in ("base", "base2"):
        sys.exit("unknown case " + case)
    return t

for case in sys.argv[2:]:
    save("%s/%s.safetensors" % (sys.argv[1], case), make(case))
EOF

if ! "$PY" "$tmp/gen.py" "$(cd "$(dirname "$0")/.." && pwd)" "$tmp" base base2 ulp1 cross0 signedzero int nanpayload missing shape; then
  fail "generate fixtures" "python fixture writer failed"
fi

# Identical files (written twice, independently): exit 0, all bit-exact.
run_diff "$tmp/base.safetensors" "$tmp/base2.safetensors"
expect "identical files" 0 "bit-exact" "7 tensors, 7 bit-exact, 0 differ, 0 missing"
if grep -qE '^(w|e|s|n) .* bit-exact' <<<"$out" && ! grep -q "differ  " <<<"$out"; then ok "identical: every row bit-exact"
else fail "identical: every row bit-exact" "$out"; fi

# One element one ULP up: exit 1, its index, coordinates and distance.
run_diff "$tmp/base.safetensors" "$tmp/ulp1.safetensors"
expect "one ulp" 1 "first diff at flat index 6 [1,2]" ", 1 ulp" "7 tensors, 6 bit-exact, 1 differ, 0 missing" \
  "1/12"
row=$(grep -E '^w ' <<<"$out")
if [ "$(awk '{print $NF}' <<<"$row")" = "1" ] && grep -q "differ" <<<"$row"; then ok "one ulp: max_ulp column is 1"
else fail "one ulp: max_ulp column is 1" "row: $row"; fi
# A's and B's values: 0.1*6-0.5 in fp32 and its successor, independently.
vals=$("$PY" -c 'import struct
b = struct.unpack("<I", struct.pack("<f", 0.1 * 6 - 0.5))[0]
f = lambda u: struct.unpack("<f", struct.pack("<I", u))[0]
print("A = %.9g (0x%08x), B = %.9g (0x%08x)" % (f(b), b, f(b + 1), b + 1))')
run_diff "$tmp/base.safetensors" "$tmp/ulp1.safetensors"
expect "one ulp: both values and bits" 1 "$vals"

run_diff "$tmp/base.safetensors" "$tmp/cross0.safetensors"
expect "ulp across zero" 1 "first diff at flat index 2 [2]" "A = 4.9406564584124654e-324 (0x0000000000000001)" \
  "B = -4.9406564584124654e-324 (0x8000000000000001), 2 ulp"

run_diff "$tmp/base.safetensors" "$tmp/signedzero.safetensors"
expect "signed zero differs by 0 ulp" 1 "first diff at flat index 3 [1,1]" "(0x0000), B = -0 (0x8000), 0 ulp"

run_diff "$tmp/base.safetensors" "$tmp/int.safetensors"
expect "integer difference" 1 "A = 2147483647, B = 2147483642" "7 tensors, 6 bit-exact, 1 differ, 0 missing"
row=$(grep -E '^i ' <<<"$out")
if [ "$(awk '{print $NF}' <<<"$row")" = "-" ] && grep -qE ' 5 ' <<<"$row"; then ok "integer: max_abs 5, no ulp"
else fail "integer: max_abs 5, no ulp" "row: $row"; fi

run_diff "$tmp/base.safetensors" "$tmp/nanpayload.safetensors"
expect "NaN payloads differ" 1 "involve NaN" "A = nan (0x7fc00000)"

run_diff "$tmp/base.safetensors" "$tmp/missing.safetensors"
expect "missing tensors" 1 "only in A" "only in B" "8 tensors, 6 bit-exact, 0 differ, 2 missing"

run_diff "$tmp/base.safetensors" "$tmp/shape.safetensors"
expect "shape and dtype differ" 1 "shape differs" "[3,4]|[4,3]" "dtype differs" "I32|I64" \
  "7 tensors, 5 bit-exact, 2 differ, 0 missing"

# Options.
run_diff --quiet "$tmp/base.safetensors" "$tmp/ulp1.safetensors"
expect "--quiet" 1 "7 tensors, 6 bit-exact, 1 differ, 0 missing"
if [ "$(wc -l <<<"$out")" -eq 1 ]; then ok "--quiet prints one line"; else fail "--quiet prints one line" "$out"; fi
run_diff "$tmp/base.safetensors" "$tmp/ulp1.safetensors" --max-rows 1
expect "--max-rows keeps the differing row" 1 "first diff at flat index 6" "6 more tensor row(s) not shown"
run_diff --max-rows=x "$tmp/base.safetensors" "$tmp/base2.safetensors"
expect "--max-rows validates" 2 "--max-rows: expected a non-negative integer, got 'x'"
run_diff --help
expect "--help" 0 "usage: parity diff"
run_diff "$tmp/base.safetensors"
expect "one file only" 2 "expected two .safetensors files, got 1"
run_diff --bogus "$tmp/base.safetensors" "$tmp/base2.safetensors"
expect "unknown option" 2 "unknown option '--bogus'"

# Bad input: exit 2 with the file name and what was wrong.
run_diff "$tmp/base.safetensors" "$tmp/nope.safetensors"
expect "missing file" 2 "$tmp/nope.safetensors" "No such file or directory"
head -c 100 "$tmp/base.safetensors" >"$tmp/trunc.safetensors"
run_diff "$tmp/trunc.safetensors" "$tmp/base.safetensors"
expect "truncated file" 2 "$tmp/trunc.safetensors" "exceeds the"
printf 'garbage' >"$tmp/tiny.safetensors"
run_diff "$tmp/base.safetensors" "$tmp/tiny.safetensors"
expect "7-byte file" 2 "$tmp/tiny.safetensors: file is 7 bytes, too short"
"$PY" - "$tmp/base.safetensors" "$tmp/badjson.safetensors" <<'EOF'
import sys, struct
blob = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
hdr = blob[8:8 + n].replace(b'"dtype": "F32"', b'"dtype": "F33"', 1)
open(sys.argv[2], "wb").write(blob[:8] + hdr + blob[8 + n:])
EOF
run_diff "$tmp/badjson.safetensors" "$tmp/base.safetensors"
expect "unknown dtype" 2 "$tmp/badjson.safetensors: tensor \"w\": dtype: unknown \"F33\""

# Names are printed escaped: a name holding terminal escapes or a newline
# can neither hide the report nor forge a summary line (issue 22).
"$PY" - "$tmp" <<'EOF'
import json, struct, sys
def save(path, names, dtype="U8"):
    header, off = {}, 0
    for n in names:
        header[n] = {"dtype": dtype, "shape": [1], "data_offsets": [off, off + 1]}
        off += 1
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + bytes(off))
forged = "z\n1 tensors, 1 bit-exact, 0 differ, 0 missing\n"
save(sys.argv[1] + "/evilA.safetensors", ["ok", "\x1b[2J\x1b[Hhidden\x07", forged])
save(sys.argv[1] + "/evilB.safetensors", ["ok", "\x1b[2J\x1b[Hhidden\x07"])
save(sys.argv[1] + "/evildt.safetensors", ["\x1b]0;title\x07w"], dtype="U9")
EOF
run_diff "$tmp/evilA.safetensors" "$tmp/evilB.safetensors"
expect "escaped names" 1 '\x1b[2J\x1b[Hhidden\x07' 'z\x0a1 tensors, 1 bit-exact' "3 tensors, 2 bit-exact, 0 differ, 1 missing"
if grep -q $'[\x01-\x08\x0b-\x1f\x7f]' <<<"$out"; then fail "no control byte reaches the terminal" "$(od -c <<<"$out" | head)"
else ok "no control byte reaches the terminal"; fi
if grep -qx "1 tensors, 1 bit-exact, 0 differ, 0 missing" <<<"$out"; then fail "a name cannot forge the summary" "$out"
else ok "a name cannot forge the summary"; fi
run_diff "$tmp/evildt.safetensors" "$tmp/evilB.safetensors"
expect "escaped name in an error" 2 'tensor "\x1b]0;title\x07w": dtype: unknown "U9"'
if grep -q $'[\x01-\x08\x0b-\x1f\x7f]' <<<"$out"; then fail "no control byte in an error" "$(od -c <<<"$out" | head)"
else ok "no control byte in an error"; fi

# The file's size is checked against its header before a data byte is
# read: a sparse 4 GiB file after a valid header is refused at once,
# naming both sizes, in bounded memory (1 GB of address space).
cp "$tmp/base.safetensors" "$tmp/sparse.safetensors"
truncate -s 4G "$tmp/sparse.safetensors"
hlen=$("$PY" -c 'import struct,sys; print(struct.unpack("<Q", open(sys.argv[1],"rb").read(8))[0])' "$tmp/base.safetensors")
dlen=$(( $(stat -c %s "$tmp/base.safetensors") - 8 - hlen ))
start=$(date +%s)
# (a sanitizer build maps terabytes of shadow memory at start-up, so it
# runs without the address-space limit; the normal build keeps it)
limit="ulimit -v 1000000"
if ldd "$PARITY" 2>/dev/null | grep -qE 'lib(a|t|ub)san'; then limit=:; fi
out=$( ($limit; timeout 60 "$PARITY" diff "$tmp/sparse.safetensors" "$tmp/base.safetensors") 2>&1); rc=$?
expect "sparse 4 GiB file refused by its header" 2 "$tmp/sparse.safetensors: file is 4294967296 bytes" \
  "declares $dlen bytes of tensor data: expected 8 + $hlen (header) + $dlen = $((8 + hlen + dlen)) bytes"
if [ $(( $(date +%s) - start )) -le 10 ]; then ok "sparse file refused quickly"; else fail "sparse file refused quickly"; fi
rm -f "$tmp/sparse.safetensors"
head -c $(( 8 + hlen + dlen - 4 )) "$tmp/base.safetensors" >"$tmp/short.safetensors"
run_diff "$tmp/base.safetensors" "$tmp/short.safetensors"
expect "file shorter than its header declares" 2 "$tmp/short.safetensors: file is $(( 8 + hlen + dlen - 4 )) bytes" \
  "declares $dlen bytes of tensor data"

echo "RESULT test_diff.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
