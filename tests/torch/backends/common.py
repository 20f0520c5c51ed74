"""common.py - what every backend shares and is not parity-specific:
parity's inputs (the config, initial weights and batches of a `parity
train --model gpt-micro --seed N --steps S --dump F` file, read with
parity.rankfile.read_rank_file), the AdamW set-up and schedule, the
distributed grad-norm clip and the training loop.

The parity-specific part of a backend is parity.torch's: a Capture (its
hooks write the activations and unit input gradients, its calls the
logits, loss, gradients, parameters and AdamW state, each with its
placement) into a parity.rankfile.RankWriter, and model.py's dropouts,
parity.torch.Dropout (parity's position-keyed masks).
"""
import json
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.environ.get("PARITY_PYTHON", os.path.join(REPO, "ref", "python")))

from parity.rankfile import RankWriter, read_rank_file  # noqa: E402
from parity.torch import Capture  # noqa: E402

from model import Config  # noqa: E402


class Inputs:
    """A parity dump's config, initial weights and batches."""

    def __init__(self, path):
        f = read_rank_file(path)
        self.t = f.tensors
        self.cfg = Config(json.loads(f.metadata["config"]))
        self.steps = 1 + max(int(k.split(".")[0][4:]) for k in self.t if k.startswith("step"))

    def init(self, name):
        return torch.from_numpy(self.t["init." + name].copy())

    def batch(self, s):
        return (torch.from_numpy(self.t[f"step{s}.input_ids"]).long(),
                torch.from_numpy(self.t[f"step{s}.labels"]).long())


def capture(job, model, mesh, coords, **kw):
    """parity.torch's Capture of `model` on this rank into a RankWriter."""
    return Capture(RankWriter(mesh, coords, precision=job.precision), model, **kw)


def decayed(name, p):
    """Megatron's rule: 2-D weights decay, biases and LayerNorm never."""
    return p.dim() >= 2


def param_groups(model, bugs=()):
    """AdamW's two groups (weight decay on the matrices only)."""
    named = list(model.named_parameters())
    if "wd_layernorm" in bugs:  # BUG: every parameter decayed, LayerNorm and biases too
        return [{"params": [p for _, p in named]}]
    return [{"params": [p for n, p in named if decayed(n, p)]},
            {"params": [p for n, p in named if not decayed(n, p)], "weight_decay": 0.0}]


def adamw(cfg, groups, bugs=()):
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.wd)
    if "adam_bc_off" in bugs:
        # BUG: the step count starts at 1, so each step's bias correction
        # is the next step's (a checkpoint restored with its step off by one)
        for g in opt.param_groups:
            for p in g["params"]:
                opt.state[p] = {"step": torch.tensor(1.0), "exp_avg": torch.zeros_like(p),
                                "exp_avg_sq": torch.zeros_like(p)}
    return opt


def set_lr(opt, cfg, s):
    lr = cfg.lr_at(s)
    for g in opt.param_groups:
        g["lr"] = lr
    return lr


def clip_grads(cfg, params, counted, group=None, bugs=()):
    """Global-norm clipping over a model sharded across `group` (tp and/or
    pp ranks; None: this rank holds the whole model). counted(p): whether
    this rank counts p's square sum (a replica is counted on one rank
    only). Returns the pre-clip norm (torch's clip_grad_norm_ formula)."""
    sq = torch.zeros(1, dtype=torch.float64)
    for p in params:
        if p.grad is not None and counted(p):
            sq += (p.grad.double() ** 2).sum()
    if group is not None and "norm_not_reduced" not in bugs:  # BUG: each rank's own share only
        dist.all_reduce(sq, group=group)
    norm = sq.sqrt().float()
    coef = cfg.clip / (norm + 1e-6)
    if coef < 1:
        for p in params:
            if p.grad is not None:
                p.grad.mul_(coef)
    return norm


# ------------------------------------------------------------------ a run

class Job:
    """One training run on this rank: the inputs, precision ("fp32" or
    "bf16": torch.autocast to bf16), injected bugs, the output directory;
    `rows`: the global batch rows of the current microbatch (the dropout
    masks' index, model.GPT's rows())."""

    def __init__(self, dump, precision, bugs, out, rank, world):
        self.inputs = Inputs(dump)
        self.cfg = self.inputs.cfg
        self.precision, self.bugs, self.out = precision, set(bugs), out
        self.rank, self.world = rank, world
        self.rows = slice(0, self.cfg.B)

    def autocast(self):
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bf16")

    def path(self):
        return os.path.join(self.out, f"rank{self.rank}.safetensors")


def load_init(model, job, shard=None):
    """parity's initial weights into model; shard(name, t) cuts this
    rank's block of the global tensor (None: whole tensors)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            t = job.inputs.init(n)
            p.copy_(shard(n, t) if shard else t)


def train(job, cap, model, opt, *, net=None, dp=1, dp_rank=0, M=1, reduce=None, clip=None,
          sharded=None):
    """The training loop every non-pipelined backend runs: M microbatches
    a step (gradient accumulation), then `reduce()` (the backend's own
    gradient reductions, if any), the clip, AdamW with the schedule; `cap`
    (parity.torch.Capture) writes the rank file. net: what the forward
    calls (a DDP wrapper of model; default model); sharded: a ZeRO-3
    backend's hooks (fsdp.Sharded: gather() before each forward, reduce(m)
    after each backward, put(what, s) for the rank's flat shards of
    parameters, gradients and AdamW state)."""
    cfg = job.cfg
    cap.params(-1) if sharded is None else sharded.put("param", -1)
    B_local = cfg.B // dp
    mb = B_local // M
    divide = 1 if "loss_not_divided" in job.bugs else M  # BUG: accumulated M times too large
    for s in range(job.inputs.steps):
        cap.step(s)
        ids, labels = job.inputs.batch(s)
        opt.zero_grad(set_to_none=True)
        total = torch.zeros(1, dtype=torch.float64)
        for m in range(M):
            r0 = dp_rank * B_local + m * mb
            job.rows = slice(r0, r0 + mb)
            cap.microbatch(m if M > 1 else None, M)
            if sharded is not None:
                sharded.gather()
            with job.autocast():
                logits, loss = (net or model)(ids[job.rows], labels[job.rows])
            cap.logits(logits)
            (loss / divide).backward()
            if sharded is not None:
                sharded.reduce(m)
            total += loss.detach().double() / M
        cap.microbatch(None)
        if reduce is not None:
            reduce()
        cap.loss(total.float())  # this rank's mean loss: Partial(sum) x 1/dp on dp
        cap.grads(s) if sharded is None else sharded.put("grad", s)
        norm = clip() if clip is not None else torch.nn.utils.clip_grad_norm_(
            model.parameters(), cfg.clip)
        cap.scalar("grad_norm", norm)
        cap.scalar("lr", set_lr(opt, cfg, s))
        opt.step()
        if sharded is None:
            cap.params(s)
            cap.optimizer_state(opt, s)
        else:
            sharded.put("param", s)
            sharded.put("exp_avg", s)
            sharded.put("exp_avg_sq", s)
    cap.w.save(job.path())
