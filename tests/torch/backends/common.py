"""common.py - what every backend shares: parity's inputs (initial
weights, batches, dropout masks), the AdamW set-up and schedule, the
distributed grad-norm clip, and the capture that writes rank files.

Inputs come from a `parity train --model gpt-micro --seed N --steps S
--dump F` file: `init.<param>`, `step<s>.input_ids/labels`; dropout masks
from parity.torch.dropout_mask when the package has it, else from the
dump's `step<s>.mask.<site>` (the same bits; RANKFILES.md's judge checks
the backend against parity's masks either way).

Capture (`Capture`) is the parity-specific part of a backend: forward
hooks on parity's site modules (`layers.0.mlp.dense_h_to_4h` ->
`act.layers.0.mlp.dense_h_to_4h.output`), tensor hooks for the unit input
gradients, and put_* calls for logits, loss, gradients, parameters and
AdamW state, each with its placement over the mesh (RANKFILES.md).
"""
import json
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))  # tests/torch: dumpio
sys.path.insert(0, os.environ.get("PARITY_PYTHON", os.path.join(REPO, "ref", "python")))

import dumpio  # noqa: E402
from parity.rankfile import RankWriter  # noqa: E402

from model import Config  # noqa: E402

SITES = ("input_layernorm", "self_attention.query_key_value", "self_attention.core_attention",
         "self_attention.dense", "post_attention_layernorm", "mlp.dense_h_to_4h", "mlp.dense_4h_to_h")


class Inputs:
    """A parity dump's config, initial weights, batches and masks."""

    def __init__(self, path):
        self.t, meta = dumpio.load(path)
        self.cfg = Config(json.loads(meta["config"]))
        self.steps = 1 + max(int(k.split(".")[0][4:]) for k in self.t if k.startswith("step"))
        try:
            from parity.torch import dropout_mask
            self._mask_fn = dropout_mask
        except ImportError:
            self._mask_fn = None

    def init(self, name):
        return self.t["init." + name].clone()

    def batch(self, s):
        return self.t[f"step{s}.input_ids"].long(), self.t[f"step{s}.labels"].long()

    def mask(self, s, site, index):
        """The keep mask (uint8) of slice `index` of site's global tensor at step s."""
        full = self.t[f"step{s}.mask.{site}"]
        if self._mask_fn is None:
            return full[index]
        layer, short = (int(site.split(".")[1]), site.split(".", 2)[2]) if site.startswith("layers.") \
            else (None, site)
        p = self.cfg.p_attn if short == "attention_dropout" else self.cfg.p_hidden
        keep = self._mask_fn(self.cfg.seed, short, layer, s, tuple(full.shape), p, index)
        return torch.from_numpy(keep.astype("uint8"))


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


class Capture:
    """Writes one rank's tensors. mesh/coords: RANKFILES.md's; place(kind,
    name) -> {axis: placement} for this backend's layout (kinds: "act",
    "grad_input", "logits", "param"); axes not given are Replicate();
    dp: the data-parallel axis name (acts are Shard(0) on it, grad_input
    scaled by 1/dp) or None."""

    def __init__(self, mesh, coords, place, precision, dp=None):
        self.mesh, self.place, self.dp = mesh, place, dp
        self.w = RankWriter(mesh, coords, precision=precision)
        self.s, self.mb = -1, None

    def _p(self, kind, name):
        pl = dict(self.place(kind, name) or {})
        if self.dp and kind in ("act", "grad_input", "logits"):
            pl[self.dp] = "Shard(0)"
        return [pl.get(a, "Replicate()") for a in self.mesh] if self.mesh else None

    def put(self, kind, what, t, microbatched=True):
        scale = None
        if kind == "grad_input" and self.dp and self.mesh[self.dp] > 1:
            scale = 1.0 / self.mesh[self.dp]
        mb = self.mb if microbatched else None
        self.w.put(f"step{self.s}.{what}", t.detach(), p=self._p(kind, what), microbatch=mb, scale=scale)

    def hook(self, model):
        """Forward hooks on parity's site modules, input-gradient hooks on
        the layers and the head."""
        def act(name):
            return lambda mod, inp, out: self.put("act", f"act.{name}.output", out)

        def grad_in(name):
            def pre(mod, inp):
                x = inp[0]
                if x.requires_grad:
                    mb = self.mb
                    x.register_hook(lambda g: self._put_mb("grad_input", f"grad_input.{name}", g, mb))
            return pre

        for fqn, mod in model.named_modules():
            parts = fqn.split(".")
            if fqn == "embedding" and hasattr(mod, "dropout"):
                mod.register_forward_hook(act(fqn))
            elif fqn == "final_layernorm":
                mod.register_forward_hook(act(fqn))
                mod.register_forward_pre_hook(grad_in("head"))
            elif len(parts) == 2 and parts[0] == "layers":
                mod.register_forward_hook(act(fqn))
                mod.register_forward_pre_hook(grad_in(fqn))
            elif parts[0] == "layers" and ".".join(parts[2:]) in SITES:
                mod.register_forward_hook(act(fqn))

    def _put_mb(self, kind, what, t, mb):
        keep, self.mb = self.mb, mb
        try:
            self.put(kind, what, t)
        finally:
            self.mb = keep

    def params(self, named, s, when=None, grads=False):
        """param.<name> (init.<name> for s == -1) or grad.<name> of every
        (name, tensor) this rank holds."""
        for n, p in named:
            t = p.grad if grads else p
            if t is None:
                continue
            key = f"init.{n}" if s < 0 else f"step{s}." + ("grad." if grads else "param.") + n
            self.w.put(key, t.detach(), p=self._p("param", n))

    def adam_state(self, named, opt, s):
        state = getattr(opt, "optim", opt).state  # ZeroRedundancyOptimizer: this rank's shard
        for n, p in named:
            st = state.get(p, {})
            for k in ("exp_avg", "exp_avg_sq"):
                if k in st:
                    self.w.put(f"step{s}.{k}.{n}", st[k], p=self._p("param", n))

    def scalar(self, what, v):
        self.w.put(f"step{self.s}.{what}", torch.tensor([float(v)], dtype=torch.float32))

    def save(self, path):
        self.w.save(path)


# ------------------------------------------------------------------ a run

class Job:
    """One training run on this rank: the inputs, precision ("fp32" or
    "bf16": torch.autocast to bf16), injected bugs, the output directory;
    `step` and `rows` say what the dropout masks are drawn for."""

    def __init__(self, dump, precision, bugs, out, rank, world):
        self.inputs = Inputs(dump)
        self.cfg = self.inputs.cfg
        self.precision, self.bugs, self.out = precision, set(bugs), out
        self.rank, self.world = rank, world
        self.step, self.rows = 0, slice(0, self.cfg.B)

    def masks(self, site, index):
        return self.inputs.mask(self.step, site, index)

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


def train(job, cap, model, opt, named, *, net=None, dp=1, dp_rank=0, M=1, dp_group=None,
          reduce=None, clip=None, sharded=None):
    """The training loop every non-pipelined backend runs: M microbatches
    a step (gradient accumulation), then `reduce()` (the backend's own
    gradient reductions, if any), the clip, AdamW with the schedule.
    named(): the (parity name, parameter) pairs this rank writes; net:
    what the forward calls (a DDP wrapper of model; default model);
    sharded: a ZeRO-3 backend's hooks (fsdp.Sharded: gather() before each
    forward, reduce(m) after each backward, put(kind, s) for the rank's
    flat shards of parameters, gradients and AdamW state)."""
    cfg = job.cfg
    cap.hook(model)
    cap.params(named(), -1) if sharded is None else sharded.put("init", -1)
    B_local = cfg.B // dp
    mb = B_local // M
    divide = 1 if "loss_not_divided" in job.bugs else M  # BUG: accumulated M times too large
    for s in range(job.inputs.steps):
        cap.s, job.step = s, s
        ids, labels = job.inputs.batch(s)
        opt.zero_grad(set_to_none=True)
        total = torch.zeros(1, dtype=torch.float64)
        for m in range(M):
            r0 = dp_rank * B_local + m * mb
            job.rows = slice(r0, r0 + mb)
            cap.mb = (m, M) if M > 1 else None
            if sharded is not None:
                sharded.gather()
            with job.autocast():
                logits, loss = (net or model)(ids[job.rows], labels[job.rows])
            cap.put("logits", "logits", logits)
            (loss / divide).backward()
            if sharded is not None:
                sharded.reduce(m)
            total += loss.detach().double() / M
        cap.mb = None
        if reduce is not None:
            reduce()
        if dp_group is not None:
            dist.all_reduce(total, group=dp_group)
        cap.scalar("loss", total.item() / dp)
        cap.params(named(), s, grads=True) if sharded is None else sharded.put("grad", s)
        norm = clip() if clip is not None else torch.nn.utils.clip_grad_norm_(
            [p for _, p in named()], cfg.clip)
        cap.scalar("grad_norm", norm)
        cap.scalar("lr", set_lr(opt, cfg, s))
        opt.step()
        if sharded is None:
            cap.params(named(), s)
            cap.adam_state(named(), opt, s)
        else:
            sharded.put("param", s)
            sharded.put("state", s)
    cap.save(job.path())
