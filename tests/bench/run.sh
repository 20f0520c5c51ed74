#!/usr/bin/env bash
# `make bench`: parity's figures next to the references they are judged
# against, measured on this machine in this run (memcpy, OpenMPI's
# shared-memory MPI_Allreduce, plain fp32 adds, PyTorch CPU). Figures are
# reported, never asserted: timing never fails the build.
set -u
BUILD=${BUILD:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
anchors="$root/../shared/anchors"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "parity bench on $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
. "$root/tests/bench/machine.sh"
bench_machine

section() { printf '\n== %s\n' "$*"; }

section "memcpy bandwidth (the physical limit)"
"$BUILD/bench/bench_memcpy" | tee "$out/memcpy.txt" | grep -v '^CSV'

section "exact sums: cost per term against a plain fp32 add"
"$BUILD/bench/bench_xacc" | grep -v '^CSV'

if [ -x "$BUILD/bench/bench_tile" ]; then
  section "tile GEMM: OpenBLAS and portable backends"
  "$BUILD/bench/bench_tile" | grep -v '^CSV'
fi

if [ -x "$BUILD/bench/bench_contract" ]; then
  section "matrix products at gpt-124m's shapes: tiles and exact sums vs one whole sgemm"
  "$BUILD/bench/bench_contract" | grep -v '^CSV'
fi

if [ -x "$BUILD/bench/bench_coll" ]; then
  section "collectives (nccl-tests conventions: algbw = bytes/time, busbw = algbw x factor)"
  "$BUILD/bench/bench_coll" | tee "$out/coll.txt" | grep -v '^CSV'
fi

section "OpenMPI shared-memory MPI_Allreduce (the peer)"
if command -v mpicc >/dev/null && [ -f "$anchors/mpi_allreduce.c" ]; then
  mpicc -O2 "$anchors/mpi_allreduce.c" -o "$out/mpi_ar" 2>/dev/null
  for np in 2 4 8; do
    mpirun --allow-run-as-root --oversubscribe -np "$np" "$out/mpi_ar" 2>/dev/null | tee -a "$out/mpi.txt"
  done
else
  echo "skipped: needs mpicc (Debian openmpi-bin libopenmpi-dev) and ../shared/anchors"
fi

if [ -s "$out/coll.txt" ] && [ -s "$out/mpi.txt" ]; then
  section "parity fp32 all-reduce vs OpenMPI, same machine, same run"
  printf '%-6s %-10s %-6s %12s %12s %9s %12s %12s %9s\n' devs bytes algo \
    "parity GB/s" "mpi GB/s" "busbw x" "parity us" "mpi us" "time x"
  awk -F, '$1=="CSV" && $2=="all_reduce" && $3 != "" {print $4, $5, $3, $6, $8}' "$out/coll.txt" \
    > "$out/p.txt"
  sed -nE 's/.*world=([0-9]+) bytes= *([0-9]+) time_us= *([0-9.]+) .*busbw= *([0-9.]+)GB.*/\1 \2 \3 \4/p' \
    "$out/mpi.txt" > "$out/m.txt"
  awk 'NR==FNR {mt[$1" "$2]=$3; mb[$1" "$2]=$4; next}
       ($1" "$2) in mt {
         printf "%-6s %-10s %-6s %12.2f %12.2f %9.2f %12.1f %12.1f %9.2f\n",
           $1, $2, $3, $5, mb[$1" "$2], $5/mb[$1" "$2], $4, mt[$1" "$2], mt[$1" "$2]/$4 }' \
    "$out/m.txt" "$out/p.txt"
  echo "(busbw x > 1 and time x > 1 mean parity is faster; target: busbw x >= 1.5 at >= 1 MiB, time x >= 1 at 4 KiB)"
fi

if [ -x "$BUILD/bench/bench_mpi" ] && command -v mpirun >/dev/null; then
  section "MPI transport (parity under mpirun, one device a process) against OpenMPI's MPI_Allreduce, same processes"
  for np in 2 4; do
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np "$np" \
      "$BUILD/bench/bench_mpi" 2>/dev/null | tee -a "$out/mpit.txt" | grep -v '^CSV'
  done
  if [ -s "$out/coll.txt" ]; then
    echo "fp32 all-reduce busbw (GB/s): the MPI transport, MPI_Allreduce, the shared-memory transport (bench_coll, direct)"
    printf '%-6s %-10s %10s %10s %10s %12s %12s
' devs bytes mpi-trans MPI_Allred shm "MPI/mpi-tr" "shm/mpi-tr"
    awk -F, 'NR==FNR { if ($1=="CSV" && $2=="all_reduce" && $3=="direct") shm[$4" "$5]=$8; next }
             $1=="CSV" && $3=="parity-mpi-f32" { p[$4" "$5]=$7 }
             $1=="CSV" && $3=="openmpi-allreduce" { k=$4" "$5; if (k in p)
               printf "%-6s %-10s %10.2f %10.2f %10s %12.2f %12s\n", $4, $5, p[k], $7,
                 (k in shm) ? sprintf("%.2f", shm[k]) : "-", $7/p[k],
                 (k in shm) ? sprintf("%.2f", shm[k]/p[k]) : "-" }' "$out/coll.txt" "$out/mpit.txt"
  fi
fi

# A parallel mode's bench script, when there is one: section title, then it runs.
mode_bench() { # script title
  [ -f "$root/tests/bench/$1" ] || return 0
  section "$2"
  PARITY="$PARITY" bash "$root/tests/bench/$1"
}
mode_bench bench_dp.sh "data parallelism on gpt-small"
mode_bench bench_tp.sh "tensor parallelism on gpt-small (traffic against Megatron's formulas)"
mode_bench bench_tp_modes.sh "tensor parallelism's modes: 1-D against 2-D, 2.5-D and 3-D at the same device count"
mode_bench bench_pp.sh "pipeline parallelism: bubble against theory, activation slots, 3-D against golden"
mode_bench bench_cp.sh "context parallelism: ring and Ulysses on gpt-small with T = 1024 against golden"
mode_bench bench_moe.sh "mixture of experts on gpt-small: the MoE step against the dense one"
mode_bench bench_encdec.sh "encoder-decoder: t5-small against PyTorch eager, and on an encoder mesh"

if [ -n "${PARITY_BASE:-}" ]; then
  section "this tree against an earlier build (PARITY_BASE): golden and tp2 x pp2 steps"
  PARITY="$PARITY" bash "$root/tests/bench/bench_refactor.sh"
fi

if [ -f "$root/tests/bench/bench_gpt.sh" ]; then
  section "golden GPT step against PyTorch CPU eager"
  bash "$root/tests/bench/bench_gpt.sh"
fi
