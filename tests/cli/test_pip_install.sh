#!/usr/bin/env bash
# test_pip_install.sh - parity's Python package as a user installs it:
# a fresh venv (--system-site-packages: numpy from the system), `pip
# install --no-index ref/python` with no network (the in-tree build
# backend, requires = []), then from a directory outside the tree:
# `import parity` (without torch), the core of the TP example (golden run,
# two column-parallel shards of a layer's fc output computed in numpy and
# put with Shard(-1), compared within the README's tolerance; a rank
# holding the wrong shard named), parity.rankfile and parity.torch's
# dropout_mask against the golden masks. How libparity is found:
# $PARITY_LIB, the source tree recorded in the wheel, $PARITY_PREFIX and
# pkg-config after `make install PREFIX=...`, and the error naming what to
# set when nothing is there. A plain `pip install` (index unreachable) must
# work too; `pip uninstall` removes it.
#
# SKIPs (with a message) when python3 cannot make a venv (Debian: the
# python3-venv package) or numpy is missing.
# Ends with "RESULT test_pip_install.sh: N passed, M failed".
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$REPO/build}
PY=/usr/bin/python3
NAME=test_pip_install.sh
tmp=$(mktemp -d /tmp/parity_pip_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
source "$REPO/tests/expect.sh"
finish() { echo "RESULT $NAME: $passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit; }
skip() { echo "SKIP: $1"; finish; }

"$PY" -c 'import numpy' 2>/dev/null || skip "numpy is not installed for $PY (python3-numpy)"
"$PY" -m venv --system-site-packages "$tmp/v" >"$tmp/venv.log" 2>&1 ||
  skip "$PY -m venv does not work here ($(tail -1 "$tmp/venv.log")); Debian/Ubuntu: apt-get install python3-venv"
[ -x "$tmp/v/bin/pip" ] || skip "the venv has no pip (ensurepip missing; Debian: python3-venv)"
case "$(ldd "$BUILD/libparity.so" 2>/dev/null)" in
  *libasan*|*libtsan*|*libubsan*) skip "a sanitized libparity.so cannot be loaded into an unsanitized python" ;;
esac
[ -f "$BUILD/libparity.so" ] || { fail "$BUILD/libparity.so exists" "run make shared"; finish; }

# No network: an index pip could reach would hide a backend that needs one.
export PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_RETRIES=0 PIP_TIMEOUT=3
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
V=$tmp/v/bin
git_before=$(git -C "$REPO" status --porcelain -- ref/python 2>/dev/null)
out=$("$V/pip" install --no-index "$REPO/ref/python" 2>&1); rc=$?
expect "pip install --no-index ref/python into a fresh venv" 0 "Successfully installed parity-0.1"
site=$("$V/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
for f in __init__.py rankfile.py torch.py _where.json; do
  [ -f "$site/parity/$f" ] && ok "installed parity/$f" || fail "installed parity/$f" "missing in $site"
done
[ "$(git -C "$REPO" status --porcelain -- ref/python 2>/dev/null)" = "$git_before" ] &&
  ok "the build leaves nothing in ref/python" || fail "the build leaves nothing in ref/python" \
  "$(git -C "$REPO" status --porcelain -- ref/python)"
[ "$failed" -eq 0 ] || finish

mkdir -p "$tmp/run"
cat >"$tmp/check.py" <<'EOF'
"""The installed package, run from outside the tree."""
import sys
import numpy as np
import parity
print("from", parity.__file__)
print("torch imported:", "torch" in sys.modules)
print("library:", parity._find_library())
o = parity.Oracle("--model", "gpt-micro", "--steps", "1").run_golden()
# the TP example's core: dense_h_to_4h column-parallel over 2 ranks
x = o.golden("step0.act.layers.0.post_attention_layernorm.output").astype(np.float64)
W = o.golden("init.layers.0.mlp.dense_h_to_4h.weight").astype(np.float64)
b = o.golden("init.layers.0.mlp.dense_h_to_4h.bias").astype(np.float64)
Ws, bs = np.array_split(W, 2, 0), np.array_split(b, 2)
name = "act.layers.0.mlp.dense_h_to_4h.output"
def put(shard_of):
    o.clear()
    for r in range(2):
        s = shard_of[r]
        o.put(name, 0, (x @ Ws[s].T + bs[s]).astype(np.float32),
              placements=[parity.Shard(-1)], mesh=[2], coords=[r])
    return o.compare(max_ulp=16, scale="tensor")
print("clean:", put([0, 1]))
d = put([0, 0])
print("wrong shard:", d.tensor, "rank", d.rank)
# rank files and parity's dropout, installed
from parity.rankfile import RankWriter, read_rank_file
w = RankWriter({"tp": 2}, {"tp": 1})
w.put("step0." + name, (x @ Ws[1].T + bs[1]).astype(np.float32), p=["Shard(-1)"])
rf = read_rank_file(w.save(sys.argv[1]))
print("rankfile:", rf.metadata["parity.format"], rf.placements)
from parity.torch import dropout_mask
c = o.config()
m = o.golden("step0.mask.layers.1.mlp_output_dropout")
got = dropout_mask(c["seed"], "mlp_output_dropout", 1, 0, m.shape, c["dropouts"]["hidden"],
                   (slice(None), slice(8, 16)))
print("dropout mask:", np.array_equal(got, m[:, 8:16].astype(bool)))
EOF
out=$(cd "$tmp/run" && env -u PARITY_LIB -u PARITY_PREFIX PKG_CONFIG_PATH= "$V/python" "$tmp/check.py" \
        "$tmp/run/rank1.safetensors" 2>&1); rc=$?
expect "installed: import parity from the venv, torch not imported" 0 "from $site/parity/__init__.py" \
  "torch imported: False"
if [ "$BUILD" = "$REPO/build" ]; then
  expect "installed: libparity found in the source tree the wheel was built from" 0 \
    "library: $REPO/build/libparity.so"
fi
out=$(cd "$tmp/run" && env -u PARITY_PREFIX PARITY_LIB="$BUILD/libparity.so" "$V/python" \
        "$tmp/check.py" "$tmp/run/rank1.safetensors" 2>&1); rc=$?
expect "installed: \$PARITY_LIB names the library" 0 "library: $BUILD/libparity.so"
expect "installed: TP=2 column-parallel shards match the golden run" 0 "clean: None"
expect "installed: a rank holding the wrong shard is named" 0 \
  "wrong shard: step0.act.layers.0.mlp.dense_h_to_4h.output rank 1"
expect "installed: parity.rankfile writes and reads a rank file" 0 \
  "rankfile: 1 {'step0.act.layers.0.mlp.dense_h_to_4h.output': {'p': ['Shard(-1)']}}"
expect "installed: parity.torch.dropout_mask is the golden mask" 0 "dropout mask: True"

# After `make install PREFIX=...`: found through $PARITY_PREFIX, and through
# pkg-config, from a copy of the package whose source tree has no build/.
mkdir -p "$tmp/src/ref" && cp -r "$REPO/ref/python" "$tmp/src/ref/python" &&
  rm -rf "$tmp/src/ref/python/parity/__pycache__" "$tmp/src/ref/python/_build/__pycache__"
"$PY" -m venv --system-site-packages "$tmp/v2" >/dev/null 2>&1
out=$("$tmp/v2/bin/pip" install --no-index "$tmp/src/ref/python" 2>&1); rc=$?
expect "pip install --no-index from a copy of ref/python" 0 "Successfully installed parity-0.1"
out=$(make -s -C "$REPO" install PREFIX="$tmp/prefix" BUILD="$BUILD" 2>&1); rc=$?
expect "make install PREFIX=tmp" 0
find='import parity; print("library:", parity._find_library())'
out=$(cd "$tmp/run" && env -u PARITY_LIB PKG_CONFIG_PATH= PARITY_PREFIX="$tmp/prefix" \
        "$tmp/v2/bin/python" -c "$find" 2>&1); rc=$?
expect "installed copy: \$PARITY_PREFIX finds make install's library" 0 "library: $tmp/prefix/lib/libparity.so"
if command -v pkg-config >/dev/null; then
  out=$(cd "$tmp/run" && env -u PARITY_LIB -u PARITY_PREFIX PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig" \
          "$tmp/v2/bin/python" -c "$find" 2>&1); rc=$?
  expect "installed copy: pkg-config parity finds make install's library" 0 \
    "library: $tmp/prefix/lib/libparity.so"
fi
if [ -e /usr/local/lib/libparity.so ] || [ -e /usr/lib/libparity.so ] || pkg-config --exists parity 2>/dev/null; then
  echo "skip    not-found message: this machine has libparity installed system-wide"
else
  out=$(cd "$tmp/run" && env -u PARITY_LIB -u PARITY_PREFIX PKG_CONFIG_PATH= "$tmp/v2/bin/python" \
          -c 'import parity; parity.Oracle("--model", "gpt-micro")' 2>&1); rc=$?
  expect "installed copy, no library anywhere: an error saying what to set" 1 \
    "libparity.so not found. Set PARITY_LIB=" "PARITY_PREFIX" "$tmp/src/build/libparity.so"
  out=$(cd "$tmp/run" && env PARITY_LIB="$tmp/nothing.so" "$tmp/v2/bin/python" \
          -c 'import parity; parity.Oracle("--model", "gpt-micro")' 2>&1); rc=$?
  expect "a PARITY_LIB that is not there is named" 1 "PARITY_LIB=$tmp/nothing.so: no such file"
fi

# Without --no-index: nothing to fetch (requires = [], numpy present), so
# an unreachable index is never asked.
out=$("$V/pip" install --force-reinstall --no-deps "$REPO/ref/python" 2>&1); rc=$?
expect "plain pip install (index unreachable) works offline" 0 "Successfully installed parity-0.1"
out=$("$V/pip" install "$REPO/ref/python" 2>&1); rc=$?
expect "plain pip install with its dependencies resolved offline" 0 "Requirement already satisfied: numpy"

out=$("$V/pip" uninstall -y parity 2>&1); rc=$?
expect "pip uninstall parity" 0 "Successfully uninstalled parity-0.1"
out=$(cd "$tmp/run" && "$V/python" -c 'import parity' 2>&1); rc=$?
expect "uninstalled: import parity fails outside the tree" 1 "No module named 'parity'"
[ ! -e "$site/parity" ] && ok "uninstalled: nothing left in site-packages" ||
  fail "uninstalled: nothing left in site-packages" "$(ls "$site/parity")"
finish
