#!/usr/bin/env python3
"""run.py - launch a backend on gloo processes and write its rank files.

    python3 run.py BACKEND JOB [JOB ...]
    JOB = DUMP:PRECISION:BUGS:OUTDIR   (BUGS: comma-separated, or "-")

Spawns the backend's world of processes once (torch.multiprocessing, a
free localhost port) and runs every job in turn on the same process
group; each job writes OUTDIR/rank<r>.safetensors on every rank.
BACKEND: single, ddp, zero1, fsdp, tp, tp_nosp, pp, tpdp, ppdp.
Exit 0 when every rank finished, 1 when a rank failed, 2 on bad usage.
"""
import importlib
import os
import socket
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BACKENDS = ("single", "ddp", "zero1", "fsdp", "tp", "tp_nosp", "pp", "tpdp", "ppdp")


def parse_job(text):
    parts = text.rsplit(":", 3)
    if len(parts) != 4 or parts[1] not in ("fp32", "bf16"):
        raise ValueError(f"job {text!r}: expected DUMP:fp32|bf16:BUGS:OUTDIR")
    dump, prec, bugs, out = parts
    return dump, prec, [] if bugs in ("", "-") else bugs.split(","), out


def worker(rank, world, port, backend, jobs):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)  # tiny tensors; a second thread only contends on 2 cores
    if world > 1:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    from common import Job
    mod = importlib.import_module(backend)
    for dump, prec, bugs, out in jobs:
        os.makedirs(out, exist_ok=True)
        torch.manual_seed(0)
        mod.main(Job(dump, prec, bugs, out, rank, world))
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv):
    if len(argv) < 2 or argv[0] not in BACKENDS:
        print(f"usage: run.py BACKEND DUMP:fp32|bf16:BUGS:OUTDIR ...  (BACKEND: {', '.join(BACKENDS)})",
              file=sys.stderr)
        return 2
    try:
        jobs = [parse_job(j) for j in argv[1:]]
    except ValueError as e:
        print(f"run.py: {e}", file=sys.stderr)
        return 2
    backend = argv[0]
    world = importlib.import_module(backend).WORLD
    if world == 1:
        worker(0, 1, 0, backend, jobs)
        return 0
    import torch.multiprocessing as mp
    try:
        mp.spawn(worker, args=(world, free_port(), backend, jobs), nprocs=world)
    except Exception as e:  # a rank's traceback is in the exception's text
        print(f"run.py {backend}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
