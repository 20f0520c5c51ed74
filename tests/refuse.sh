# refuse.sh - sourced by the bad-input tests (test_bad_input.sh,
# test_frontends.sh): a private work directory $w under $tmp, pass/fail
# counters, and `refuse`, which requires a run to exit non-zero (not by a
# signal, not after a hang) with a message matching a pattern, leaving
# the work directory exactly as it was. $1: the temporary directory's
# name prefix.
tmp=$(mktemp -d "/tmp/${1:-parity-refuse}-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
w=$tmp/work
mkdir -p "$w"
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

# The state of the work directory: every entry with its type, and the
# SHA-256 of every regular file.
snapshot() {
  (cd "$w" && find . -mindepth 1 -printf '%y %p %l\n' | sort
   cd "$w" && find . -type f -exec sha256sum {} + | sort -k2)
}

# refuse NAME PATTERN [FSIZE_KB] -- COMMAND...: run in $w with a 30 s limit
# (and a file-size limit when FSIZE_KB is given).
refuse() {
  local name=$1 pat=$2 fsize=unlimited
  shift 2
  if [ "$1" != "--" ]; then fsize=$1; shift; fi
  shift
  local before; before=$(snapshot)
  # stderr through a pipe: the file-size limit must not cut the message
  (cd "$w" && ulimit -f "$fsize" && exec timeout 30 "$@" 2>&1 >"$tmp/out") | cat >"$tmp/err"
  local rc=${PIPESTATUS[0]}
  local after; after=$(snapshot)
  if [ "$rc" -eq 0 ]; then fail "$name" "exit 0, expected a refusal" "$(tail -3 "$tmp/out")"; return; fi
  if [ "$rc" -eq 124 ]; then fail "$name" "hung (killed after 30 s)"; return; fi
  if [ "$rc" -ge 128 ]; then fail "$name" "killed by signal $((rc - 128))" "$(tail -3 "$tmp/err")"; return; fi
  if ! grep -qE -- "$pat" "$tmp/err"; then fail "$name" "message does not match /$pat/:" "$(cat "$tmp/err")"; return; fi
  if [ "$before" != "$after" ]; then
    fail "$name" "the work directory changed:" "$(diff <(echo "$before") <(echo "$after") | head -8)"
    return
  fi
  ok "$name  ($(head -1 "$tmp/err" | cut -c1-150))"
}
