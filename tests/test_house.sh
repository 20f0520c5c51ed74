#!/usr/bin/env bash
# test_house.sh - the house rules (tests/house/house.py): no cycle in the
# folder-level dependency graph of ref/, no file in ref/ or include/ over
# 600 lines (data files excepted, by name), no function in ref/model,
# ref/parallel or ref/cli over 100 lines; no mode test in the model
# outside its style files, no mode's field in the shared scratch and
# activation structs, one parameter-table builder. Every offender is printed. First
# the checker itself on a small tree with one offence of each kind, so a
# checker that stopped seeing them fails here rather than passing quietly.
set -u
cd "$(dirname "$0")/.."
source tests/expect.sh
PY=/usr/bin/python3
tmp=$(mktemp -d /tmp/parity-house-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# the negative controls: a -> b -> a through two headers, a 601-line file,
# a 101-line function
mkdir -p "$tmp/ref/parallel/a" "$tmp/ref/parallel/b" "$tmp/include/parity"
printf 'int fa(void);\n' >"$tmp/include/parity/a.h"
printf 'int fb(void);\n' >"$tmp/include/parity/b.h"
printf '#include "parity/b.h"\nint fa(void) { return fb(); }\n' >"$tmp/ref/parallel/a/a.c"
printf '#include "parity/a.h"\nint fb(void) { return 0; }\nint fc(void) { return fa(); }\n' \
  >"$tmp/ref/parallel/b/b.c"
{ echo 'int long_one(void) {'; for i in $(seq 1 99); do echo "    (void)$i;"; done; echo '    return 0;'; echo '}'; } \
  >"$tmp/ref/parallel/a/long_fn.c"
seq 1 601 | sed 's|.*|/* & */|' >"$tmp/ref/parallel/b/long_file.c"
# a mode test in unit code, a mode's buffer in the shared scratch, a second
# parameter-table builder
mkdir -p "$tmp/ref/model/units" "$tmp/ref/model/styles"
printf 'int f(const gpt_t *g) {\n    if (g->local.t2q) return 1;\n    return 0;\n}\n' \
  >"$tmp/ref/model/units/unit_x.c"
printf 'int s(const gpt_t *g) { return g->local.t2q ? 1 : 0; }\n' >"$tmp/ref/model/styles/linear_x.c"
printf 'typedef struct {\n    float *d_tmp;\n    float *cp_kv[3], *ul_send;\n} gpt_scratch_t;\n' \
  >"$tmp/ref/model/gpt.h"
printf 'int param_table_build_mp(void);\n' >"$tmp/include/parity/params_x.h"
out=$("$PY" tests/house/house.py "$tmp" 2>&1); rc=$?
rc=$((rc == 1 ? 0 : 1)) # house.py exits 1 on offences
expect "the checker sees a cycle between two folders" 0 \
  "cycle between folders: ref/parallel/a, ref/parallel/b" \
  "ref/parallel/a -> ref/parallel/b: ref/parallel/a/a.c includes parity/b.h for fb"
expect "the checker sees a file over 600 lines" 0 "ref/parallel/b/long_file.c: 601 lines"
expect "the checker sees a function over 100 lines" 0 "long_fn.c:1: long_one: 102 lines"
expect "the checker sees a mode test in unit code, not in a style file" 0 \
  "modes: ref/model/units/unit_x.c:2: a mode test outside the style files"
if grep -q "linear_x.c" <<<"$out"; then fail "a style file may test modes" "$out"; else ok "a style file may test modes"; fi
expect "the checker sees a mode's buffers in the shared scratch" 0 \
  "state: ref/model/gpt.h: gpt_scratch_t.cp_kv" "state: ref/model/gpt.h: gpt_scratch_t.ul_send"
expect "the checker sees a second parameter-table builder" 0 \
  "builders: include/parity/params_x.h:1: param_table_build_mp"

# the tree itself: one check per rule, every offender listed
out=$("$PY" tests/house/house.py . 2>&1)
echo "$out" | grep -v '^ok \|^not ok '
for rule in cycles lines functions modes state builders; do
  line=$(echo "$out" | grep -E "^(ok|not ok) +$rule" | head -1)
  case $line in
    ok*) ok "$rule" ;;
    *)   fail "$rule" "${line:-house.py printed no line for $rule}" ;;
  esac
done

echo "RESULT test_house.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
