"""tp_nosp.py - tp.py without sequence parallelism (Megatron's f and g
around each column/row pair); the backend of bug row_bwd_no_allreduce."""
import tp

WORLD = tp.WORLD


def main(job):
    tp.main(job, sp=False)
