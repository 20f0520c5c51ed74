#!/usr/bin/env bash
# The nvme offload's files are the run's own (ref/parallel/engine/
# offload.c, engine_offload_claim): they are made exclusively, links not
# followed, in a directory of the run's own inside --offload-path; a lock
# there refuses a second run, naming its holder; everything the run made
# is gone after a success, a mismatch, a fatal I/O error, a refusal and
# SIGTERM; SIGKILL's leftovers are taken over, with a note, by the next
# run. The user's files in the directory (one named like a rank's file, a
# link named like another) are never touched: refuse.sh's snapshot of the
# work directory, which holds --offload-path, must not change.
set -u
P=${PARITY:-build/parity}
P=$(cd "$(dirname "$P")" && pwd)/$(basename "$P")
. tests/refuse.sh parity-offload-files
off=$w/off
mkdir -p "$off"
echo "the user's own notes" >"$off/parity-optim-rank0.bin"
echo "precious" >"$tmp/target"
ln -s "$tmp/target" "$off/parity-optim-rank1.bin"
target_sum=$(sha256sum <"$tmp/target")
D="--data $(pwd)/ref/data/corpus.txt --data-parallel-size 2 --zero-stage 1 --offload-optimizer nvme --offload-path $off"
L="--model gpt-tiny $D"
T="timeout 60"

# the work directory as it was: a success leaves it so, files and link alike
base=$(snapshot)
out=$($T "$P" train $L --steps 2 2>&1); rc=$?
if [ $rc = 0 ] && [ "$(snapshot)" = "$base" ] && [ "$(sha256sum <"$tmp/target")" = "$target_sum" ]; then
  ok "a success: the user's parity-optim-rank0.bin byte for byte, the link parity-optim-rank1.bin and its target intact, nothing left in --offload-path"
else fail "a success leaves --offload-path as it was" "exit $rc" "$(echo "$out" | tail -2)" \
     "$(diff <(echo "$base") <(snapshot) | head -6)" "target: $(head -c 60 "$tmp/target" | tr -c '[:print:]' '.')"; fi

# a mismatch (check exits 1) leaves nothing either
out=$($T "$P" check --model gpt-micro --num-layers 4 $D --steps 2 --test-broken fp32-sums 2>&1); rc=$?
if [ $rc = 1 ] && [ "$(snapshot)" = "$base" ]; then ok "a mismatch (exit 1): nothing left in --offload-path"
else fail "a mismatch leaves nothing" "exit $rc" "$(diff <(echo "$base") <(snapshot) | head -6)"; fi

# a fatal write error (a file-size limit: EFBIG, exit 3) leaves nothing
refuse "a full disk (a 16 KB file-size limit): the run's directory removed" \
  "nvme offload: writing $off/parity-offload-[0-9]+-[A-Za-z0-9]{6}/parity-optim-rank[01].bin: File too large" 16 -- \
  "$P" train $L --steps 1

# a file or a link in the lock's place is refused, never overwritten or followed
echo "mine" >"$off/parity-offload.lock"
refuse "a file of the user's named like the lock: refused, kept" \
  "parity-offload.lock exists and holds no record of a parity run" -- "$P" train $L --steps 1
rm "$off/parity-offload.lock"
ln -s "$tmp/target" "$off/parity-offload.lock"
refuse "a link named like the lock: refused, not followed" \
  "parity-offload.lock: a symbolic link; parity follows no link in --offload-path" -- \
  "$P" train $L --steps 1
rm "$off/parity-offload.lock"

# a second run while the first holds the directory: refused, naming the
# holder's pid; then SIGTERM to the holder (stopped before its commit,
# PARITY_STOP_BEFORE_COMMIT) removes everything it made
(cd "$w" && PARITY_STOP_BEFORE_COMMIT=1 exec "$P" train $L --steps 2 >/dev/null 2>"$tmp/a.err") &
a=$! waited=0
while [ "$(awk '{print $3}' "/proc/$a/stat" 2>/dev/null)" != T ] && kill -0 $a 2>/dev/null &&
      [ $waited -lt 600 ]; do sleep 0.05; waited=$((waited + 1)); done
holder=$a
if [ "$(awk '{print $3}' "/proc/$holder/stat" 2>/dev/null)" = T ]; then
  made=$(ls -A "$off" | grep -c "^parity-offload") # its lock and its directory
  refuse "a second run in the same --offload-path: refused naming the holder" \
    "--offload-path '$off': in use by another parity run, pid $holder on host" -- "$P" train $L --steps 1
  kill -TERM $holder; kill -CONT $holder
  wait $a 2>/dev/null; arc=$?
  if [ $arc = 143 ] && [ "$made" = 2 ] && [ "$(snapshot)" = "$base" ]; then
    ok "the holder, SIGTERM: exit 143, its lock and directory removed, nothing else touched"
  else fail "SIGTERM leaves nothing" "exit $arc, made $made" "$(diff <(echo "$base") <(snapshot) | head -6)"; fi
else
  kill -KILL $a 2>/dev/null; wait $a 2>/dev/null
  fail "a second run in the same --offload-path is refused" "the first run never stopped before its commit" "$(tail -2 "$tmp/a.err")"
  fail "SIGTERM leaves nothing" "not run"
fi

# SIGKILL (PARITY_OFFLOAD_KILL_AFTER, mid-step) cleans nothing: its files
# hold the state; the next run takes the lock over, says so, removes them
PARITY_OFFLOAD_KILL_AFTER=8 "$P" train $L --steps 3 --bucket-cap-mb 0.1 >/dev/null 2>&1 &
k=$!
wait $k 2>/dev/null; krc=$?
f0=$(ls "$off"/parity-offload-$k-*/parity-optim-rank0.bin 2>/dev/null | head -1)
if [ $krc = 137 ] && [ -n "$f0" ] && [ -e "$off/parity-offload.lock" ] && /usr/bin/python3 - "$f0" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read()
n = len(b) // 8
m = struct.unpack("<%df" % n, b[:4 * n]); v = struct.unpack("<%df" % n, b[4 * n:])
ok = len(b) % 8 == 0 and any(x != 0 for x in m) and all(x >= 0 for x in v) and any(x > 0 for x in v)
sys.exit(0 if ok else 1)
PY
then ok "SIGKILL mid-step leaves the lock and rank 0's file ($(stat -c '%s bytes, mode %a' "$f0"): m, v >= 0, not zeros)"
else fail "SIGKILL's leftovers hold the state" "exit $krc" "$(ls -lR "$off" | head -12)"; fi
out=$($T "$P" train $L --steps 1 2>&1); rc=$?
if [ $rc = 0 ] && grep -qF "taking over the lock $off/parity-offload.lock left by pid $k on host" <<<"$out" &&
   grep -qF "removed its directory $off/parity-offload-$k-" <<<"$out" && [ "$(snapshot)" = "$base" ]; then
  ok "the next run takes the dead run's lock over with a note naming pid $k, and removes its directory"
else fail "a stale lock is taken over" "exit $rc" "$(echo "$out" | grep -i -m2 'lock\|offload')" \
     "$(diff <(echo "$base") <(snapshot) | head -6)"; fi

echo "RESULT test_offload_files.sh: $passed passed, $failed failed"
[ "$failed" = 0 ]
