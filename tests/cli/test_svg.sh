#!/usr/bin/env bash
# test_svg.sh - `parity svg`: each picture parses as XML (Python's
# ElementTree, not parity's writer) and has what it draws: a bar per
# forward/backward span of the trace and a label per device row; a box
# per device with the rank and coordinates --print-layout prints; a rank
# label per rank and the algorithm's number of steps. --logical is the
# same bytes on every run, the committed pictures equal what the command
# makes now (so they cannot go stale), and bad input exits 2 with a
# message naming the argument and leaves no file.
#
# Needs $PARITY (default build/parity) and /usr/bin/python3.
# Ends with "RESULT test_svg.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
PARITY=$(cd "$(dirname "$PARITY")" && pwd)/$(basename "$PARITY")
cd "$(dirname "$0")/../.."
PY=/usr/bin/python3
. tests/refuse.sh parity-svg # $tmp (removed on exit), ok, fail

# check NAME CMD...: the command succeeds (its output in $out)
check() {
  local name=$1; shift
  if out=$("$@" 2>&1); then ok "$name"; else fail "$name" "exit $?" "$out"; fi
}

# refuse_svg NAME PATTERN OUT CMD...: exit 2, a message matching PATTERN, and no OUT
refuse_svg() {
  local name=$1 pat=$2 o=$3; shift 3
  out=$("$@" 2>&1); local rc=$?
  if [ $rc -ne 2 ]; then fail "$name" "exit $rc, expected 2" "$out"
  elif ! grep -qiE -- "$pat" <<<"$out"; then fail "$name" "message lacks /$pat/" "$out"
  elif [ -e "$o" ]; then fail "$name" "left $o behind"
  elif [ -d "$(dirname "$o")" ] && [ -n "$(ls -A "$(dirname "$o")")" ]; then
    fail "$name" "left a file in $(dirname "$o")" "$(ls -A "$(dirname "$o")")"
  else ok "$name"; fi
  rm -f "$o"
}

# The traces: 1F1B (the committed picture's), interleaved, and a 2-step
# 3-stage run with data and tensor parallelism beside it.
(cd "$tmp" && "$PARITY" train --model gpt-micro --steps 1 --pipeline-model-parallel-size 2 \
   --num-microbatches 4 --trace T.json >/dev/null 2>&1) || fail "train --trace (1f1b)"
(cd "$tmp" && "$PARITY" train --model gpt-tiny --steps 1 --pipeline-model-parallel-size 2 \
   --virtual-pipeline-model-parallel-size 2 --num-microbatches 4 --trace I.json >/dev/null 2>&1) ||
  fail "train --trace (interleaved)"
(cd "$tmp" && "$PARITY" train --model gpt-tiny --steps 2 --pipeline-model-parallel-size 4 \
   --data-parallel-size 2 --num-microbatches 4 --trace D.json >/dev/null 2>&1) ||
  fail "train --trace (pp 4 x dp 2, 2 steps)"

# schedule: one bar per F/B span (logical) or per span (wall clock), a
# row label per device; logical bars never overlap on a row and respect
# the pipeline's order (F m on stage r+1 after F m on stage r).
cat >"$tmp/schedule.py" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
svg, trace, logical, pp = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(svg).getroot()
assert root.tag == ns + "svg", root.tag
assert root.find(ns + "title") is not None and root.find(ns + "title").text, "no title"
ev = [e for e in json.load(open(trace))["traceEvents"] if e["ph"] == "X"]
devs = sorted({e["tid"] for e in ev})
want = [e for e in ev if e["cat"] in ("forward", "backward")] if logical else ev
bars = [g for g in root.iter(ns + "g") if (g.get("class") or "").startswith("span ")]
assert len(bars) == len(want), "%d bars for %d spans" % (len(bars), len(want))
for cat in ("forward", "backward"):
    n = sum(1 for g in bars if g.get("class") == "span " + cat)
    m = sum(1 for e in want if e["cat"] == cat)
    assert n == m, "%s: %d bars, %d spans" % (cat, n, m)
rows = [t for t in root.iter(ns + "text") if t.get("class") == "row"]
assert [r.text.split()[1] for r in rows] == [str(d) for d in devs], [r.text for r in rows]
if logical:
    # per device: bars in order, no overlap; stage from the row label
    stage = {int(r.text.split()[1]): int(r.text.split()[3].rstrip(")")) for r in rows}
    assert max(stage.values()) == pp - 1, stage
    at = {}
    for g in bars:
        r = g.find(ns + "rect"); x, w = float(r.get("x")), float(r.get("width"))
        name = g.find(ns + "title").text.split()[0]
        at.setdefault(int(g.get("data-device")), []).append((x, w, name))
    for d, b in at.items():
        for (x0, w0, _), (x1, _, _) in zip(b, b[1:]):
            assert x1 >= x0 + w0 - 1e-6, "device %d: bars overlap" % d
    first = {}
    for d, b in at.items():
        for x, w, name in b:
            first.setdefault((stage[d], name), x)
    for (s, name), x in first.items():
        if name.startswith("F") and (s + 1, name) in first:
            assert first[(s + 1, name)] >= x + 1, "%s on stage %d before stage %d" % (name, s + 1, s)
        if name.startswith("B") and (s - 1, name) in first:
            assert first[(s - 1, name)] >= x + 1, "%s on stage %d before stage %d" % (name, s - 1, s)
print("ok")
EOF
for t in T:2 I:2 D:4; do
  n=${t%%:*}; pp=${t#*:}
  [ -f "$tmp/$n.json" ] || continue
  check "schedule --logical of $n.json" "$PARITY" svg schedule "$tmp/$n.json" --logical -o "$tmp/$n-l.svg"
  check "schedule of $n.json (wall clock)" "$PARITY" svg schedule "$tmp/$n.json" -o "$tmp/$n-w.svg"
  check "schedule --logical of $n.json: a bar per pass, rows, stages in order" \
    $PY "$tmp/schedule.py" "$tmp/$n-l.svg" "$tmp/$n.json" 1 "$pp"
  check "schedule of $n.json: a bar per span" $PY "$tmp/schedule.py" "$tmp/$n-w.svg" "$tmp/$n.json" 0 "$pp"
done
"$PARITY" svg schedule "$tmp/T.json" --logical -o "$tmp/T-l2.svg" 2>/dev/null
if cmp -s "$tmp/T-l.svg" "$tmp/T-l2.svg"; then ok "--logical: the same bytes twice"
else fail "--logical: the same bytes twice"; fi
# ... and from another run's trace (other wall-clock times)
(cd "$tmp" && "$PARITY" train --model gpt-micro --steps 1 --pipeline-model-parallel-size 2 \
   --num-microbatches 4 --trace T2.json >/dev/null 2>&1)
"$PARITY" svg schedule "$tmp/T2.json" --logical -o "$tmp/T2-l.svg" 2>/dev/null
if cmp -s "$tmp/T-l.svg" "$tmp/T2-l.svg"; then ok "--logical: the same bytes from another run"
else fail "--logical: the same bytes from another run"; fi

# grid: a box per device whose rank and coordinates are --print-layout's
cat >"$tmp/grid.py" <<'EOF'
import json, sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
layout = json.load(open(sys.argv[2]))
boxes = [g for g in root.iter(ns + "g") if g.get("class") == "device"]
assert len(boxes) == len(layout["devices"]), "%d boxes, %d devices" % (len(boxes), len(layout["devices"]))
for d in layout["devices"]:
    b = [g for g in boxes if g.get("data-rank") == str(d["rank"])]
    assert len(b) == 1, "rank %d: %d boxes" % (d["rank"], len(b))
    texts = [t.text for t in b[0].iter(ns + "text")]
    assert "rank %d" % d["rank"] in texts, texts
    coords = "tp%d cp%d dp%d pp%d" % (d["tp"], d.get("cp", 0), d["dp"], d["pp"])
    assert any(t.startswith(coords) for t in texts), (coords, texts)
stages = [g for g in root.iter(ns + "g") if g.get("class") == "stage"]
assert len(stages) == layout["layout"]["pp"], len(stages)
print("ok")
EOF
for args in "--data-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2" \
            "--tensor-model-parallel-size 2 --context-parallel-size 2 --pipeline-model-parallel-size 2" \
            "--data-parallel-size 4 --rank-order tp-cp-ep-pp-dp --pipeline-model-parallel-size 2"; do
  rm -f "$tmp/g.svg"
  if "$PARITY" svg grid --model gpt-tiny $args -o "$tmp/g.svg" >/dev/null 2>"$tmp/g.err" &&
     "$PARITY" train --model gpt-tiny $args --print-layout >"$tmp/g.json" 2>>"$tmp/g.err"; then
    check "grid $args: the boxes --print-layout names" $PY "$tmp/grid.py" "$tmp/g.svg" "$tmp/g.json"
  else fail "grid $args" "$(cat "$tmp/g.err")"; fi
done

# collective: a rank label per rank, the algorithm's steps, and what the
# last step leaves (every cell complete after an all-reduce)
cat >"$tmp/coll.py" <<'EOF'
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
svg, kind, algo, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
root = ET.parse(svg).getroot()
assert root.find(ns + "title").text.startswith(kind), root.find(ns + "title").text
ranks = [t.text for t in root.iter(ns + "text") if t.get("class") == "rank"]
assert ranks == ["rank %d" % r for r in range(n)], ranks
ring = algo == "ring"
steps = {"all-reduce": 2 * (n - 1) if ring else 2, "reduce-scatter": n - 1 if ring else 1,
         "all-gather": n - 1 if ring else 1, "broadcast": n - 1 if ring else 1}.get(kind, 1)
if n == 1: steps = 0
panels = [g for g in root.iter(ns + "g") if g.get("class") == "step"]
assert len(panels) == steps, "%d steps, expected %d" % (len(panels), steps)
moves = {"all-reduce": n if ring else n * (n - 1), "reduce-scatter": n if ring else n * (n - 1),
         "all-gather": n if ring else n * (n - 1), "broadcast": 1 if ring else n - 1,
         "all-to-all": n * (n - 1), "send-recv": n - 1}[kind]
for p in panels:
    m = [x for x in p.iter(ns + "path") if x.get("class") == "move"]
    assert len(m) == moves, "step %s: %d moves, expected %d" % (p.get("data-step"), len(m), moves)
if panels:
    last = [t.text for t in panels[-1].iter(ns + "text")][1:]
    if kind == "all-reduce": assert last == ["\u03a3 all"] * (n * n), last
    if kind == "all-gather": assert sorted(last) == sorted(["x%d" % i for i in range(n)] * n), last
    if kind == "all-to-all": assert last == ["%d\u2192%d" % (j, r) for r in range(n) for j in range(n)], last
    if kind == "reduce-scatter":
        cells = [t for t in last]
        for r in range(n): assert cells[r * n + r] == "\u03a3 all", (r, cells)
print("ok")
EOF
for kind in all-reduce reduce-scatter all-gather broadcast all-to-all send-recv; do
  for algo in direct ring; do
    for n in 2 5; do
      if "$PARITY" svg collective $kind --ranks $n --algo $algo -o "$tmp/c.svg" 2>"$tmp/c.err"; then
        check "collective $kind --ranks $n --algo $algo" $PY "$tmp/coll.py" "$tmp/c.svg" $kind $algo $n
      else fail "collective $kind --ranks $n --algo $algo" "$(cat "$tmp/c.err")"; fi
    done
  done
done
check "collective all-reduce --ranks 1" "$PARITY" svg collective all-reduce --ranks 1 -o "$tmp/c1.svg"
check "collective --ranks 1: no steps" $PY "$tmp/coll.py" "$tmp/c1.svg" all-reduce ring 1
"$PARITY" svg collective all-reduce --ranks 4 --algo ring -o "$tmp/r1.svg"
"$PARITY" svg collective all-reduce --ranks 4 --algo ring -o "$tmp/r2.svg"
if cmp -s "$tmp/r1.svg" "$tmp/r2.svg"; then ok "collective: the same bytes twice"; else fail "collective: the same bytes twice"; fi

# A label with & < > " is escaped: a trace whose span names need it
$PY - "$tmp/T.json" "$tmp/esc.json" <<'EOF'
import json, sys
t = json.load(open(sys.argv[1]))
for e in t["traceEvents"]:
    if e.get("cat") == "send": e["name"] = 'a<b>&"c"'
json.dump(t, open(sys.argv[2], "w"))
EOF
check "schedule: names with & < > \"" "$PARITY" svg schedule "$tmp/esc.json" -o "$tmp/esc.svg"
check "schedule: escaped names parse" $PY -c "
import sys, xml.etree.ElementTree as ET
ns = '{http://www.w3.org/2000/svg}'
r = ET.parse('$tmp/esc.svg').getroot()
assert any(t.text == 'a<b>&\"c\" (send)' for t in r.iter(ns + 'title')), 'no escaped title'"

# The committed pictures are the walkthrough pages' (ref/**/WALKTHROUGH*.md):
# tests/cli/test_walkthroughs.sh regenerates each with the page's own command
# and compares it byte for byte.

# Bad input: exit 2, a message naming the argument, no output file.
o="$tmp/bad/out.svg"; mkdir -p "$tmp/bad"
printf '{"traceEvents": [' >"$tmp/bad.json"
printf '{"traceEvents": [{"name":"thread_name","ph":"M","pid":0,"tid":0,"args":{"name":"device 0"}}]}' >"$tmp/empty.json"
printf '{"traceEvents": [{"name":"F0","cat":"forward","ph":"X","ts":"x","dur":1,"pid":0,"tid":0}]}' >"$tmp/badts.json"
refuse_svg "schedule: malformed JSON" "trace file.*line" "$o" "$PARITY" svg schedule "$tmp/bad.json" -o "$o"
refuse_svg "schedule: a trace with no spans" "no spans" "$o" "$PARITY" svg schedule "$tmp/empty.json" -o "$o"
refuse_svg "schedule: a span without a number ts" '"ts"' "$o" "$PARITY" svg schedule "$tmp/badts.json" -o "$o"
# absurd times: a span at 1e300 us (or ending past 1e12 us) would shrink every
# other span to nothing; refused naming the event and field
span() { printf '{"traceEvents": [{"name":"F0","cat":"forward","ph":"X","ts":0,"dur":5,"pid":0,"tid":0},
  {"name":"B0","cat":"backward","ph":"X","ts":%s,"dur":%s,"pid":0,"tid":1}]}' "$1" "$2" >"$tmp/$3"; }
span 1e300 1 hugets.json; span 5 1e300 hugedur.json; span 1e12 1 pastend.json; span 1e-320 1e-320 tiny.json
refuse_svg "schedule: a span at ts 1e300" 'event 1: "ts": expected a number from 0 to 1e\+12' "$o" "$PARITY" svg schedule "$tmp/hugets.json" -o "$o"
refuse_svg "schedule: a span of dur 1e300" 'event 1: "dur": expected a number from 0 to 1e\+12' "$o" "$PARITY" svg schedule "$tmp/hugedur.json" -o "$o"
refuse_svg "schedule: a span ending past 1e12 us" 'event 1: "ts" \+ "dur" = 1000000000001: beyond' "$o" "$PARITY" svg schedule "$tmp/pastend.json" -o "$o"
if "$PARITY" svg schedule "$tmp/tiny.json" -o "$tmp/tiny.svg" 2>"$tmp/err" && $PY -c "import xml.etree.ElementTree as ET; ET.parse('$tmp/tiny.svg')"; then
  ok "schedule: subnormal times draw (a range under a nanosecond is one)"
else fail "schedule: subnormal times" "$(cat "$tmp/err")"; fi
refuse_svg "schedule: missing trace file" "trace file" "$o" "$PARITY" svg schedule "$tmp/none.json" -o "$o"
refuse_svg "schedule: no TRACE" "TRACE" "$o" "$PARITY" svg schedule -o "$o"
refuse_svg "schedule: missing -o" "-o" "$o" "$PARITY" svg schedule "$tmp/T.json"
refuse_svg "schedule: -o without a value" "-o" "$o" "$PARITY" svg schedule "$tmp/T.json" -o
refuse_svg "schedule: unknown flag" "--bogus" "$o" "$PARITY" svg schedule "$tmp/T.json" --bogus -o "$o"
refuse_svg "schedule: --logical twice" "--logical" "$o" "$PARITY" svg schedule "$tmp/T.json" --logical --logical -o "$o"
refuse_svg "collective: unknown KIND" "KIND.*all-reduce" "$o" "$PARITY" svg collective all-sum --ranks 4 -o "$o"
refuse_svg "collective: --ranks 0" "--ranks" "$o" "$PARITY" svg collective all-reduce --ranks 0 -o "$o"
refuse_svg "collective: --ranks 65" "--ranks" "$o" "$PARITY" svg collective all-reduce --ranks 65 -o "$o"
refuse_svg "collective: --ranks missing" "--ranks" "$o" "$PARITY" svg collective all-reduce -o "$o"
refuse_svg "collective: send-recv --ranks 1" "--ranks" "$o" "$PARITY" svg collective send-recv --ranks 1 -o "$o"
refuse_svg "collective: --algo tree" "--algo" "$o" "$PARITY" svg collective all-reduce --ranks 4 --algo tree -o "$o"
refuse_svg "collective: missing -o" "-o" "$o" "$PARITY" svg collective all-reduce --ranks 4
refuse_svg "collective: unknown flag" "--root" "$o" "$PARITY" svg collective broadcast --ranks 4 --root 1 -o "$o"
refuse_svg "grid: unknown flag" "--bogus" "$o" "$PARITY" svg grid --bogus -o "$o"
refuse_svg "grid: a run's flag" "--trace" "$o" "$PARITY" svg grid --trace "$tmp/x.json" -o "$o"
refuse_svg "grid: --step-through (a run's flag)" "--step-through" "$o" "$PARITY" svg grid --data-parallel-size 2 --step-through=1 -o "$o"
refuse_svg "grid: an invalid layout" "tensor-model-parallel-size" "$o" "$PARITY" svg grid --tensor-model-parallel-size 16 -o "$o"
refuse_svg "grid: unknown model" "--model" "$o" "$PARITY" svg grid --model gpt-huge -o "$o"
refuse_svg "grid: missing -o" "-o" "$o" "$PARITY" svg grid --data-parallel-size 2
refuse_svg "grid: a flag twice" "--data-parallel-size" "$o" "$PARITY" svg grid --data-parallel-size 2 --data-parallel-size 2 -o "$o"
refuse_svg "svg: unknown picture" "picture" "$o" "$PARITY" svg histogram -o "$o"
refuse_svg "svg: -o in a missing directory" "-o" "$tmp/nodir/x.svg" "$PARITY" svg collective all-reduce --ranks 2 -o "$tmp/nodir/x.svg"
# an existing file is left as it was when the picture fails
echo keep >"$tmp/keep.svg"
"$PARITY" svg schedule "$tmp/empty.json" -o "$tmp/keep.svg" 2>/dev/null
if [ "$(cat "$tmp/keep.svg")" = keep ]; then ok "a failed picture leaves the old file"; else fail "a failed picture leaves the old file"; fi
if "$PARITY" svg --help | grep -q -- "--logical" && "$PARITY" --help | grep -q "svg"; then ok "svg --help"
else fail "svg --help"; fi

echo "RESULT test_svg.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
