"""tp_nosp.py - tp.py without sequence parallelism (Megatron's f and g
around each column/row pair); the backend of bug f_no_allreduce (the
column-parallel input gradient without its all-reduce: Megatron's f)."""
import tp

WORLD = tp.WORLD


def main(job):
    tp.main(job, sp=False)
