"""ddp.py - data parallelism with torch's DistributedDataParallel: dp 2,
each rank B/2 sequences (RANKFILES.md "Which sequences"), gradients
averaged by DDP's buckets during backward.

Bugs (test_backends.py): clip_before_reduce (each rank clips its own
gradient, then the average), plus the optimizer bugs common.adamw and
common.param_groups take (adam_bc_off, wd_layernorm)."""
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from common import adamw, capture, load_init, param_groups, train
from model import GPT

WORLD = 2


def main(job):
    cfg, dp, r = job.cfg, job.world, job.rank
    model = GPT(cfg, rows=lambda: job.rows)
    load_init(model, job)
    ddp = DDP(model)
    opt = adamw(cfg, param_groups(model, job.bugs), job.bugs)
    cap = capture(job, model, {"dp": dp}, {"dp": r})  # parity
    kw = {}
    if "clip_before_reduce" in job.bugs:
        # BUG: DDP's reduction skipped (no_sync), each rank clips its own
        # gradient to the global threshold, then the clipped ones averaged
        def reduce():
            import torch
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= dp
        kw = dict(reduce=reduce)
        ddp_call = _NoSyncAlways(ddp)
    else:
        ddp_call = ddp
    train(job, cap, model, opt, dp=dp, dp_rank=r, M=cfg.B // dp // cfg.micro_batch, net=ddp_call,
          **kw)


class _NoSyncAlways:
    """Calls the DDP model inside no_sync(), so its backward reduces nothing."""

    def __init__(self, ddp):
        self.ddp = ddp

    def __call__(self, *a):
        with self.ddp.no_sync():
            return self.ddp(*a)
