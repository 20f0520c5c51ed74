"""fsdp.py - ZeRO-3 written by hand (torch 1.13's FullyShardedDataParallel
does not import on this Python: a dataclass of torch.distributed._shard
is refused by Python 3.11), FSDP1-style: the parameters are flattened
into FlatParameters (one per AdamW group: decayed matrices, the rest),
each padded to a multiple of dp and sharded over dp 2; before each
microbatch's forward the shards are all-gathered into the module's
parameters, after its backward the flat gradient is reduce-scattered
(averaged over dp) into the shard's. AdamW runs on the shards; a rank
writes its flat shards (RANKFILES.md "flat") of parameters, gradients
and AdamW state. Microbatches of one sequence: two a rank, accumulated.

Bug: accum_double_scaled (DeepSpeed #1488: the accumulated gradient
divided by the number of microbatches again)."""
import torch
import torch.distributed as dist
import torch.nn as nn

from common import capture, clip_grads, decayed, load_init, train
from model import GPT

WORLD = 2


class Flat:
    """One FlatParameter: members (name, parameter) concatenated row-major,
    padded to a multiple of dp; `.shard` is this rank's piece of it."""

    def __init__(self, tag, members, dp, rank):
        self.tag, self.members, self.dp, self.rank = tag, members, dp, rank
        n = sum(p.numel() for _, p in members)
        self.size = -(-n // dp)
        full = torch.zeros(self.size * dp)
        full[:n] = torch.cat([p.detach().reshape(-1) for _, p in members])
        self.offset = rank * self.size
        self.shard = nn.Parameter(full[self.offset:self.offset + self.size].clone())
        self.shard.grad = torch.zeros_like(self.shard)

    def gather(self):
        parts = [torch.empty(self.size) for _ in range(self.dp)]
        dist.all_gather(parts, self.shard.detach().contiguous())
        full, at = torch.cat(parts), 0
        with torch.no_grad():
            for _, p in self.members:
                p.copy_(full[at:at + p.numel()].view_as(p))
                at += p.numel()

    def reduce(self, divide):
        """Reduce-scatter the members' gradients (gloo: all-reduce, keep
        this rank's piece), average over dp, accumulate into the shard's."""
        g = torch.zeros(self.size * self.dp)
        at = 0
        for _, p in self.members:
            if p.grad is not None:
                g[at:at + p.numel()] = p.grad.reshape(-1)
            at += p.numel()
            p.grad = None
        dist.all_reduce(g)
        self.shard.grad += g[self.offset:self.offset + self.size] / (self.dp * divide)



class Sharded:
    """train()'s ZeRO-3 hooks (common.train's `sharded`)."""

    def __init__(self, flats, cap, opt, M, bugs):
        self.flats, self.cap, self.opt, self.M, self.bugs = flats, cap, opt, M, bugs

    def gather(self):
        for f in self.flats:
            f.gather()

    def reduce(self, m):
        # BUG (DeepSpeed #1488): the accumulated gradient scaled by 1/M a
        # second time, on top of the loss's 1/M
        divide = self.M if "accum_double_scaled" in self.bugs else 1
        for f in self.flats:
            f.reduce(divide)

    def put(self, what, s):
        """The rank's flat shards of `what` (param, grad, exp_avg, exp_avg_sq)."""
        for f in self.flats:
            t = {"param": f.shard, "grad": f.shard.grad}.get(what)
            t = self.opt.state[f.shard][what] if t is None else t
            self.cap.flat(what, s, f.tag, t, f.offset, f.members)  # parity

    def zero_grad(self):
        for f in self.flats:
            f.shard.grad.zero_()


def main(job):
    cfg, dp, r = job.cfg, job.world, job.rank
    model = GPT(cfg, rows=lambda: job.rows)
    load_init(model, job)
    named = list(model.named_parameters())
    flats = [Flat("decay", [(n, p) for n, p in named if decayed(n, p)], dp, r),
             Flat("no_decay", [(n, p) for n, p in named if not decayed(n, p)], dp, r)]
    opt = torch.optim.AdamW([{"params": [flats[0].shard]},
                             {"params": [flats[1].shard], "weight_decay": 0.0}],
                            lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.wd)
    cap = capture(job, model, {"dp": dp}, {"dp": r})  # parity
    M = cfg.B // dp
    sharded = Sharded(flats, cap, opt, M, job.bugs)
    opt.zero_grad = lambda set_to_none=True: sharded.zero_grad()
    shards = [f.shard for f in flats]
    train(job, cap, model, opt, dp=dp, dp_rank=r, M=M, sharded=sharded,
          clip=lambda: clip_grads(cfg, shards, lambda p: True, dist.group.WORLD, job.bugs))
