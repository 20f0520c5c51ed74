#!/usr/bin/env bash
# The largest grid parity runs, on one host: `parity check` of
# tp 8 x pp 16 x dp 128 = 16384 simulated devices (PARITY_MAX_DEVICES)
# on a small model (tests/configs/gpt_scale_16k.json: 16 layers, 8
# feature, ffn and head tiles, 64 vocabulary tiles, batch 128), bit-exact
# with the golden run. Prints the wall time and the peak RSS, and holds
# the peak to the run's own memory estimate (parity --print-layout:
# every device's arena plus the host buffers) plus a budget of host
# overhead per device (thread stack, tables, collective state; measured
# about 250 KiB, NOTES-scale.md).
#
# Slow (about a minute and 6-7 GB on the 2-core, 24 GB machine): not in
# `make check`; `make check-slow` runs it.
set -u
P=${PARITY:-build/parity}
HERE=$(cd "$(dirname "$0")/.." && pwd)
MODEL=$HERE/configs/gpt_scale_16k.json
# PARITY_SCALE_DP: fewer data-parallel replicas for a quick try (the test
# is the default, 128)
DP=${PARITY_SCALE_DP:-128}
LAYOUT="--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 --data-parallel-size $DP"
DEVICES=$((8 * 16 * DP))
OVERHEAD_KIB=512 # host overhead a device may cost beyond the estimate
pass=0; fail=0
ok() { if [ "$1" = 0 ]; then pass=$((pass+1)); echo "ok      $2"; else fail=$((fail+1)); echo "not ok  $2"; fi; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

if [ ! -x /usr/bin/time ]; then
  echo "test_scale_16k.sh: needs GNU time (/usr/bin/time) for the peak RSS"
  echo "RESULT test_scale_16k.sh: 0 passed, 1 failed"; exit 1
fi

# the estimate first: what the devices' arenas and the host buffers need
"$P" check --model "$MODEL" --global-batch-size "$DP" --steps 1 $LAYOUT --print-layout >"$tmp/layout.json" 2>&1
est=$(sed -n 's/.*"all_devices_bytes": \([0-9]*\), "host_bytes": \([0-9]*\).*/\1 \2/p' "$tmp/layout.json")
[ -n "$est" ]; ok $? "the layout's memory estimate ($DEVICES devices)"
set -- $est
dev_bytes=${1:-0} host_bytes=${2:-0}

/usr/bin/time -f "%e %M" -o "$tmp/time" "$P" check --model "$MODEL" --global-batch-size "$DP" --steps 1 $LAYOUT >"$tmp/out" 2>&1
rc=$?
read -r secs rss_kib <"$tmp/time" 2>/dev/null || { secs=0; rss_kib=0; }
[ $rc = 0 ] && grep -q "|  *$DEVICES |.*| yes" "$tmp/out"
ok $? "parity check, tp 8 x pp 16 x dp $DP = $DEVICES devices: bit-exact (exit $rc)"
[ $rc = 0 ] || tail -20 "$tmp/out"

budget_kib=$(( (dev_bytes + host_bytes) / 1024 + DEVICES * OVERHEAD_KIB ))
awk -v s="$secs" -v r="$rss_kib" -v n=$DEVICES -v d="$dev_bytes" -v h="$host_bytes" -v b="$budget_kib" 'BEGIN {
  printf "  %d devices: %.1f s wall, peak RSS %.0f MiB = %.0f KiB a device (estimate: arenas %.0f MiB + host %.0f MiB; budget %.0f MiB)\n",
         n, s, r / 1024, r / n, d / 1048576, h / 1048576, b / 1024 }'
[ "$rss_kib" -gt 0 ] && [ "$rss_kib" -le "$budget_kib" ]
ok $? "peak RSS ${rss_kib} KiB within the estimate + $OVERHEAD_KIB KiB a device (${budget_kib} KiB)"

echo "RESULT test_scale_16k.sh: $pass passed, $fail failed"
[ $fail = 0 ]
