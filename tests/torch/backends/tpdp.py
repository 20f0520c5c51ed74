"""tpdp.py - tp.py's TP+SP (tp 2) times data parallelism (dp 2), mesh
{"dp": 2, "tp": 2}, rank = dp*2 + tp; the dp ranks average their
gradients after backward (Megatron's data-parallel all-reduce)."""
import torch.distributed as dist

import tp as tpmod
from common import capture, train

WORLD = 4


def main(job, sp=True):
    T, D = 2, 2
    d, t = job.rank // T, job.rank % T
    tp_groups = [dist.new_group([x * T + y for y in range(T)]) for x in range(D)]
    dp_groups = [dist.new_group([x * T + y for x in range(D)]) for y in range(T)]
    model, opt, tp_reduce, clip = tpmod.build(job, tp_groups[d], t, T, sp)

    def reduce():
        tp_reduce()
        for p in model.parameters():
            dist.all_reduce(p.grad, group=dp_groups[t])
            p.grad /= D
    cap = capture(job, model, {"dp": D, "tp": T}, {"dp": d, "tp": t}, sp=sp, plan=tpmod.PLAN)  # parity
    train(job, cap, model, opt, dp=D, dp_rank=d, M=job.cfg.B // D // job.cfg.micro_batch,
          reduce=reduce, clip=clip)
