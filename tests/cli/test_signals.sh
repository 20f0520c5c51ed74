#!/bin/bash
# test_signals.sh - a signal (SIGTERM, SIGHUP) during a run, while it
# trains or while it writes its outputs, kills it with the conventional
# status 128 + N, leaves no temporary file or new directory behind, and
# the previous outputs byte-identical (fileio.h: pio_cleanup_on_signals,
# and the outputs' transaction). SIGINT takes the same handler; a
# non-interactive shell starts background jobs with SIGINT ignored, and
# parity leaves an ignored signal ignored, so it is not sent here.
# Ends with "RESULT test_signals.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
PARITY=$(cd "$(dirname "$PARITY")" && pwd)/$(basename "$PARITY")
cd "$(dirname "$0")/../.."
. tests/refuse.sh parity-signals
P="$PARITY"

# the outputs to protect
if ! $P train --model gpt-micro --steps 1 --quiet --dump "$w/old.st" --digest "$w/old.sha256" \
     --save "$w/ck" >/dev/null 2>"$tmp/err"; then
  fail "fixture: old outputs" "$(cat "$tmp/err")"
fi

# signal_case NAME SIGNAL WHEN -- COMMAND...: start COMMAND in $w; WHEN is
# "temp" (send the signal once a temporary output file exists), "temp:DIR"
# (once one exists in $w/DIR), "spill" (once a check's golden step file
# exists under $w/scratch), "commit" (the command runs with
# PARITY_STOP_BEFORE_COMMIT: once it has stopped itself with every output
# finished in its temporary file and none renamed; then SIGCONT) or a
# number of seconds to wait first.
signal_case() {
  local name=$1 sig=$2 when=$3
  shift 4
  local before; before=$(snapshot)
  if [ "$when" = commit ]; then
    (cd "$w" && PARITY_STOP_BEFORE_COMMIT=1 exec "$@" >/dev/null 2>"$tmp/err") &
  else
    (cd "$w" && exec "$@" >/dev/null 2>"$tmp/err") &
  fi
  local pid=$! waited=0
  if [ "$when" = commit ]; then # state T in /proc/PID/stat: stopped
    while [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != T ] && kill -0 "$pid" 2>/dev/null \
          && [ "$waited" -lt 2400 ]; do
      sleep 0.05; waited=$((waited + 1))
    done
    if [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != T ]; then
      kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
      fail "$name" "the run never stopped before its commit" "$(tail -3 "$tmp/err")"
      return
    fi
  elif [ "$when" = spill ]; then # a streamed check's golden step file in $w/scratch
    while [ -z "$(find "$w/scratch" -name '*.safetensors' 2>/dev/null)" ] && kill -0 "$pid" 2>/dev/null \
          && [ "$waited" -lt 1200 ]; do
      sleep 0.05; waited=$((waited + 1))
    done
  elif [ "${when%%:*}" = temp ]; then
    local in=$w
    [ "$when" = temp ] || in=$w/${when#temp:}
    while [ -z "$(find "$in" -name '.*.tmp-*' 2>/dev/null)" ] && kill -0 "$pid" 2>/dev/null \
          && [ "$waited" -lt 1200 ]; do
      sleep 0.05; waited=$((waited + 1))
    done
    if [ -z "$(find "$in" -name '.*.tmp-*' 2>/dev/null)" ]; then
      wait "$pid"
      fail "$name" "no temporary file appeared while the run wrote its outputs" "$(tail -3 "$tmp/err")"
      return
    fi
  else
    sleep "$when"
  fi
  kill -"$sig" "$pid"
  [ "$when" != commit ] || kill -CONT "$pid" # the signal is delivered as it resumes
  { wait "$pid"; } 2>/dev/null # not bash's "Hangup" job notice
  local rc=$? want=$((128 + $(kill -l "$sig")))
  local after; after=$(snapshot)
  if [ "$rc" -ne "$want" ]; then fail "$name" "exit $rc, expected $want" "$(tail -3 "$tmp/err")"; return; fi
  if [ -n "$(find "$w" -name '.*.tmp-*')" ]; then
    fail "$name" "temporary files left:" "$(find "$w" -name '.*.tmp-*')"
    find "$w" -name '.*.tmp-*' -delete # the next case starts clean
    return
  fi
  if [ "$before" != "$after" ]; then
    fail "$name" "the work directory changed:" "$(diff <(echo "$before") <(echo "$after") | head -8)"
    return
  fi
  ok "$name (exit $rc)"
}

BIG="$P train --model gpt-small --steps 2 --quiet"
signal_case "SIGTERM while the dump and checkpoint are written" TERM temp -- \
  $BIG --dump "$w/old.st" --save "$w/ck"
signal_case "SIGHUP with the outputs finished, before the commit, checkpoint in a new directory" HUP commit -- \
  $BIG --dump "$w/new.st" --digest "$w/old.sha256" --save "$w/newck"
signal_case "SIGTERM while training (the golden run)" TERM 1 -- \
  $BIG --dump "$w/old.st" --save "$w/ck"
signal_case "SIGTERM while a layout trains (dp 2)" TERM 1 -- \
  $P train --model gpt-tiny --steps 50 --quiet --data-parallel-size 2 --trace "$w/t.json" \
  --dump "$w/old.st" --dump-steps 0 --save "$w/ck"

# parity check keeps its golden run in $TMPDIR/parity-check-XXXXXX, one
# file a step; a signal must take the directory away with its files.
mkdir -p "$w/scratch"
TMPDIR=$w/scratch signal_case "SIGTERM during a check, its golden run spilled to \$TMPDIR" TERM spill -- \
  $P check --model gpt-small --steps 4 --tensor-model-parallel-size 2

echo "RESULT test_signals.sh: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
