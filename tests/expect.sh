# expect.sh - sourced by script tests that check a command's output
# (test_diff.sh, test_install.sh): pass/fail counters, ok, fail, and
# `expect`, which holds the last run ($out, $rc) to its status and to
# fixed strings in its output.
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; local l; for l in "$@"; do echo "  $l"; done; }

# expect NAME RC PATTERN... : last run's status is RC and its output
# contains every fixed-string PATTERN.
expect() {
  local name=$1 want_rc=$2; shift 2
  if [ "$rc" -ne "$want_rc" ]; then fail "$name" "exit $rc, expected $want_rc" "$out"; return; fi
  local p
  for p in "$@"; do
    if ! grep -qF -- "$p" <<<"$out"; then fail "$name" "output lacks: $p" "$out"; return; fi
  done
  ok "$name"
}
