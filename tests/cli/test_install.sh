#!/usr/bin/env bash
# test_install.sh - libparity as another project sees it: `make install
# PREFIX=$tmp`, then tests/oracle_example/oracle_example.c built with
# `pkg-config --cflags --libs parity` against the installed copy (shared,
# then static) and run from a directory that is not the source tree: it
# loads gpt-micro, runs the golden step, feeds every tensor back as
# shards of a 2 x 2 mesh (no divergence), then perturbs one element of
# one rank's copy, drops one block and feeds bad input; the oracle's
# answers are checked line by line. The same program reading a dump
# written by `parity train --dump` must answer the same. The installed
# Python binding is imported from its installed place.
#
# Needs $PARITY (the built program), pkg-config and readelf.
# Ends with "RESULT test_install.sh: N passed, M failed".
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PARITY=${PARITY:-$REPO/build/parity}
BUILD=${BUILD:-$REPO/build}
PY=/usr/bin/python3
tmp=$(mktemp -d /tmp/parity_install_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

source "$REPO/tests/expect.sh"
finish() { echo "RESULT test_install.sh: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }

out=$(make -s -C "$REPO" install PREFIX="$prefix" BUILD="$BUILD" 2>&1); rc=$?
expect "make install" 0
for f in include/parity/oracle.h include/parity/error.h lib/libparity.a lib/libparity.so \
         lib/pkgconfig/parity.pc share/parity/corpus.txt lib/python3/dist-packages/parity/__init__.py; do
  [ -f "$prefix/$f" ] && ok "installed $f" || fail "installed $f" "missing"
done
[ "$failed" -eq 0 ] || finish

# A sanitizer build (make asan/ubsan/tsan) installs a sanitized library:
# the example is built with the same -fsanitize, so that its runtime comes
# first, and Python (which is not) leaves the binding alone.
san=
case "$(ldd "$prefix/lib/libparity.so" 2>/dev/null)" in
  *libasan*) san=-fsanitize=address ;;
  *libtsan*) san=-fsanitize=thread ;;
  *libubsan*) san=-fsanitize=undefined ;;
esac

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
out=$(pkg-config --cflags --libs parity 2>&1); rc=$?
expect "pkg-config --cflags --libs parity" 0 "-I$prefix/include" "-L$prefix/lib" "-lparity"
out=$(pkg-config --static --libs parity 2>&1); rc=$?
expect "pkg-config --static: OpenBLAS's pthread build and libm" 0 "openblas-pthread" "-lopenblas" "-lm"

# The shared build: the installed header and library only (no -I into the tree).
src=$REPO/tests/oracle_example/oracle_example.c
mkdir -p "$tmp/run"
out=$(cc -std=c11 -Wall -Wextra -Werror $san "$src" $(pkg-config --cflags --libs parity) \
        -Wl,-rpath,"$prefix/lib" -o "$tmp/ex_shared" 2>&1); rc=$?
expect "cc with pkg-config (shared)" 0
out=$(readelf -d "$tmp/ex_shared" 2>&1 | grep NEEDED); rc=0
expect "the example needs libparity.so" 0 "libparity.so"
[ "$failed" -eq 0 ] || finish

# From $tmp/run: the corpus must come from PREFIX/share/parity, found
# beside the installed library.
check_example() { # LABEL: $out is the example's output
  local l=$1
  expect "$l: golden run of gpt-micro" 0 "golden: 175 tensors"
  expect "$l: an empty comparison is refused" 0 "empty: error: nothing to compare"
  expect "$l: golden tensors fed back as shards match" 0 "clean: no divergence (147 tensors compared)"
  expect "$l: a one-ulp perturbation is found at its tensor, element and rank" 0 \
    "perturbed: kind 1 tensor step0.grad.layers.0.mlp.dense_h_to_4h.weight step 0 index [37,5] flat 597 rank 3 ulp 1 copies 2 bad 1"
  expect "$l: the report line says it" 0 \
    "FIRST DIVERGENCE step0.grad.layers.0.mlp.dense_h_to_4h.weight[37,5] (flat 597 of 1024)" \
    "from rank 3 (mesh coordinates [1,1])" "1 of 2 copies of this element out of tolerance"
  expect "$l: a 1-ulp tolerance lets it pass" 0 "tolerance: no divergence"
  expect "$l: the reassembly names who supplied each element" 0 \
    "assembled: element 597 from rank 2, element 0 from rank 0"
  expect "$l: a block nobody put is a divergence" 0 \
    "missing: kind 2 tensor step0.act.layers.1.output step 0 index [2,0,0] flat 512 rank -1"
  expect "$l: a bad name is refused by name" 0 \
    "bad name: -1 'step0.grad.layers.0.no_such.weight' is not a golden tensor"
  expect "$l: a bad block shape is refused with both shapes" 0 \
    "bad shape: -1 'step0.grad.layers.0.mlp.dense_h_to_4h.weight' from rank 1: a block of shape [3,16], but its placement gives [32,16] of the global [64,16]"
  expect "$l: a bad placement is refused" 0 "bad placement: -1" "shards axis 5 of a 2-axis tensor"
}
out=$(cd "$tmp/run" && env -u PARITY_DATA "$tmp/ex_shared" --model gpt-micro --steps 1 2>&1); rc=$?
check_example shared
shared_out=$out

# The static build: libparity.a, its private libraries from the .pc.
out=$(cc -std=c11 -Wall -Wextra -Werror $san "$src" $(pkg-config --cflags parity) \
        "$prefix/lib/libparity.a" -Wl,--as-needed $(pkg-config --static --libs parity) \
        -o "$tmp/ex_static" 2>&1); rc=$?
expect "cc with pkg-config --static (libparity.a)" 0
if readelf -d "$tmp/ex_static" | grep -q 'libparity'; then
  fail "the static example does not need libparity.so" "$(readelf -d "$tmp/ex_static" | grep NEEDED)"
else
  ok "the static example does not need libparity.so"
fi
out=$(cd "$tmp/run" && PARITY_DATA="$prefix/share/parity/corpus.txt" "$tmp/ex_static" \
        --model gpt-micro --steps 1 2>&1); rc=$?
[ "$out" = "$shared_out" ] && ok "static: the same answers as shared" \
  || fail "static: the same answers as shared" "$(diff <(echo "$shared_out") <(echo "$out"))"

# A golden dump written by parity train: the same answers from the file.
out=$("$PARITY" train --model gpt-micro --steps 1 --dump "$tmp/run/golden.safetensors" --quiet 2>&1); rc=$?
expect "parity train --dump" 0
out=$(cd "$tmp/run" && "$tmp/ex_shared" --from-dump golden.safetensors 2>&1); rc=$?
[ "$out" = "$shared_out" ] && ok "from the dump: the same answers as the golden run in memory" \
  || fail "from the dump: the same answers as the golden run in memory" \
          "$(diff <(echo "$shared_out") <(echo "$out"))"

# Bad input to open: a message, exit 2, no crash.
out=$(cd "$tmp/run" && "$tmp/ex_shared" --model no-such-model 2>&1); rc=$?
expect "an unknown model is refused by name" 2 "open: error: --model: unknown model 'no-such-model'"
out=$(cd "$tmp/run" && "$tmp/ex_shared" --model gpt-micro --tensor-model-parallel-size 2 2>&1); rc=$?
expect "a layout flag is refused (the layout is the backend's)" 2 \
  "unknown option '--tensor-model-parallel-size'"
out=$(cd "$tmp/run" && "$tmp/ex_shared" --from-dump "$prefix/share/parity/corpus.txt" 2>&1); rc=$?
expect "a file that is no dump is refused" 2 "open: error:" "corpus.txt"

# The Python binding from its installed place, on the installed library.
if [ -n "$san" ]; then
  echo "skip    python: a sanitized libparity.so cannot be loaded into an unsanitized python"
elif [ -x "$PY" ] && "$PY" -c "import numpy" 2>/dev/null; then
  out=$(cd "$tmp/run" && env -u PARITY_LIB PYTHONPATH="$prefix/lib/python3/dist-packages" "$PY" -c '
import numpy as np, parity
print(parity.__file__)
o = parity.Oracle("--model", "gpt-micro").run_golden()
w = o.golden("step0.grad.final_layernorm.weight")
for r, part in enumerate(np.array_split(w, 2)):
    o.put("grad.final_layernorm.weight", 0, part, placements=[parity.Shard(0)], mesh=[2], coords=[r])
print("clean", o.compare())
o.clear()
bad = w.copy(); bad[11] *= 2
for r, part in enumerate(np.array_split(bad, 2)):
    o.put("grad.final_layernorm.weight", 0, part, placements=[parity.Shard(0)], mesh=[2], coords=[r])
d = o.compare()
print("bad", d.tensor, d.index, d.rank)
' 2>&1); rc=$?
  expect "python: import parity from PREFIX, compare shards" 0 \
    "$prefix/lib/python3/dist-packages/parity/__init__.py" "clean None" \
    "bad step0.grad.final_layernorm.weight (11,) 1"
else
  echo "skip    python: numpy is not installed"
fi
finish
