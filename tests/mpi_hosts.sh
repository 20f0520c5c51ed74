#!/usr/bin/env bash
# mpi_hosts.sh - `make check-mpi-hosts`: the MPI transport between two
# hosts, simulated on this machine by two network namespaces joined by a
# veth pair (10.77.<n>.1 and .2), with TCP as the only transport between
# them (no shared memory). mpirun starts in the first namespace and
# reaches the second through an rsh agent that is `ip netns exec`.
#  - every collective form on 4 devices, 2 per host: the threaded bits;
#  - `parity check` of a 3-D layout (tp 2 + SP x pp 2 x dp 2) on 8
#    processes, 4 per host, ranks alternating between hosts: the threaded
#    run's digests, bit-exact.
# Needs root and iproute2 (ip netns); not part of make check.
# Ends with "RESULT mpi_hosts.sh: N passed, M failed".
set -u
PARITY=${PARITY:-build/parity}
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d /tmp/parity-hosts-XXXXXX)
id=$$
net=$(( (id % 200) + 20 ))
ns1=parity-h1-$id ns2=parity-h2-$id
cleanup() { ip netns del "$ns1" 2>/dev/null; ip netns del "$ns2" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
passed=0; failed=0
ok()   { passed=$((passed + 1)); echo "ok      $1"; }
fail() { failed=$((failed + 1)); echo "not ok  $1"; shift; for l in "$@"; do echo "  $l"; done; }

h1=10.77.$net.1 h2=10.77.$net.2
if ! ip netns add "$ns1" || ! ip netns add "$ns2" ||
   ! ip link add "pv1-$id" type veth peer name "pv2-$id" ||
   ! ip link set "pv1-$id" netns "$ns1" || ! ip link set "pv2-$id" netns "$ns2" ||
   ! ip -n "$ns1" addr add "$h1/24" dev "pv1-$id" || ! ip -n "$ns2" addr add "$h2/24" dev "pv2-$id" ||
   ! ip -n "$ns1" link set "pv1-$id" up || ! ip -n "$ns2" link set "pv2-$id" up ||
   ! ip -n "$ns1" link set lo up || ! ip -n "$ns2" link set lo up; then
  echo "RESULT mpi_hosts.sh: 0 passed, 1 failed (could not make the namespaces: root and iproute2 needed)"
  exit 1
fi
cat >"$tmp/agent" <<AGENT
#!/bin/sh
host=\$1; shift
case "\$host" in $h1) ns=$ns1;; $h2) ns=$ns2;; *) echo "no host \$host" >&2; exit 1;; esac
exec ip netns exec \$ns sh -c "\$*"
AGENT
chmod +x "$tmp/agent"
printf '%s slots=8\n%s slots=8\n' "$h1" "$h2" >"$tmp/hosts"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(timeout -k 10 300 ip netns exec "$ns1" mpirun --hostfile "$tmp/hosts" --map-by node --oversubscribe
        --mca plm_rsh_agent "$tmp/agent" --mca btl tcp,self --mca btl_tcp_if_include "10.77.$net.0/24"
        --mca oob_tcp_if_include "10.77.$net.0/24" --mca mpi_yield_when_idle 1)

"${MPIRUN[@]}" -np 2 sh -c 'ip -o -4 addr show | grep -o "10\.77\.[0-9]*\.[0-9]"' 2>&1 | sort >"$tmp/where"
if [ "$(cat "$tmp/where")" = "$(printf '%s\n%s' "$h1" "$h2")" ]; then ok "ranks 0 and 1 run in different namespaces ($h1, $h2)"
else fail "ranks in different namespaces" "$(cat "$tmp/where")"; fi

"$BUILD/tests/mpi_coll" run 4 | sort >"$tmp/threads"
"${MPIRUN[@]}" -np 4 "$BUILD/tests/mpi_coll" run 2>"$tmp/err" | sort >"$tmp/procs"
if [ "$(wc -l <"$tmp/threads")" = 4 ] && cmp -s "$tmp/threads" "$tmp/procs"; then
  ok "collectives on 4 devices over 2 hosts: the threaded bits"
else fail "collectives over 2 hosts" "$(cat "$tmp/procs"; tail -3 "$tmp/err")"; fi

L=(--model gpt-micro --num-layers 4 --steps 3 --tensor-model-parallel-size 2 --sequence-parallel
   --pipeline-model-parallel-size 2 --data-parallel-size 2 --zero-stage 1 --num-microbatches 2)
"$PARITY" check "${L[@]}" --digest "$tmp/threads.sha" >"$tmp/t.out" 2>&1
"${MPIRUN[@]}" -np 8 "$PARITY" check "${L[@]}" --digest "$tmp/procs.sha" >"$tmp/p.out" 2>&1
if [ -s "$tmp/threads.sha" ] && cmp -s "$tmp/threads.sha" "$tmp/procs.sha" && grep -q '| yes$' "$tmp/p.out"; then
  ok "3-D layout on 8 processes over 2 hosts: the threaded run's $(wc -l <"$tmp/threads.sha") digests, bit-exact"
else fail "3-D layout over 2 hosts" "$(grep -v '^\[' "$tmp/p.out" | tail -4)"; fi

echo "RESULT mpi_hosts.sh: $passed passed, $failed failed"
[ $failed -eq 0 ]
