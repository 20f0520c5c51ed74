"""zero1.py - ZeRO-1 with torch's ZeroRedundancyOptimizer (AdamW state
sharded over dp 2 by whole parameters; each rank updates its own and
broadcasts them), gradients averaged by DDP. A rank writes the AdamW
state of the parameters it owns only."""
import torch
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from common import capture, load_init, param_groups, train
from model import GPT

WORLD = 2


def main(job):
    cfg, dp, r = job.cfg, job.world, job.rank
    model = GPT(cfg, rows=lambda: job.rows)
    load_init(model, job)
    groups = param_groups(model, job.bugs)
    opt = ZeroRedundancyOptimizer(groups[0]["params"], optimizer_class=torch.optim.AdamW, lr=cfg.lr,
                                  betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.wd)
    for g in groups[1:]:
        opt.add_param_group(g)
    cap = capture(job, model, {"dp": dp}, {"dp": r})  # parity
    train(job, cap, model, opt, net=DDP(model), dp=dp, dp_rank=r, M=cfg.B // dp // cfg.micro_batch)
