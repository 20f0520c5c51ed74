"""tp.py - Megatron-style tensor parallelism with sequence parallelism,
tp 2 (model.py: column/row-parallel linears, vocab-parallel embedding and
cross entropy; under sp the residual stream holds T/tp positions).

Under sp every replicated parameter that acts on positions (LayerNorm
gamma/beta, the row-parallel biases, the position embedding) gets only
this rank's positions' share of its gradient: the shares are summed over
tp after backward (Megatron's allreduce of the layernorm grads).
The grad norm counts a tp-sharded parameter on every tp rank and a
replicated one once, summed over tp.

Bugs: f_no_allreduce (tp_nosp.py: the column-parallel input gradient
without its all-reduce), sp_allreduce, vocab_pad,
same_dropout_mask, norm_not_reduced (model.py, common.clip_grads)."""
import torch.distributed as dist

from common import adamw, capture, clip_grads, load_init, param_groups, train
from model import GPT, Par

WORLD = 2
COLUMN = ("query_key_value", "dense_h_to_4h", "word_embeddings")
ROW = ("self_attention.dense.weight", "dense_4h_to_h.weight")


def tp_dim(name):
    """The tensor axis tp cuts parameter `name` along, or None (replicated)."""
    if any(c in name for c in COLUMN):
        return 0
    return 1 if name.endswith(ROW) else None


# parity.torch.Capture's plan: its Megatron defaults (by the module names)
# and the vocab-parallel word embedding
PLAN = {"embedding.word_embeddings": "vocab"}


def build(job, group, rank, tp, sp):
    """The tp-sharded model from parity's init, its optimizer, the grad
    reduction over tp and the clip: (model, opt, reduce, clip)."""
    cfg = job.cfg
    par = Par(group, tp, rank, sp, job.bugs)
    model = GPT(cfg, par, rows=lambda: job.rows)

    def shard(name, t):
        d = tp_dim(name)
        return t if d is None else t.chunk(tp, d)[rank]
    load_init(model, job, shard)
    opt = adamw(cfg, param_groups(model, job.bugs), job.bugs)
    replicated = [p for n, p in model.named_parameters() if tp_dim(n) is None]

    def reduce():
        if par.sp:
            for p in replicated:
                dist.all_reduce(p.grad, group=group)
    is_rep = {id(p) for p in replicated}

    def clip():
        return clip_grads(cfg, list(model.parameters()), lambda p: rank == 0 or id(p) not in is_rep,
                          group, job.bugs)
    return model, opt, reduce, clip


def main(job, sp=True):
    model, opt, reduce, clip = build(job, dist.group.WORLD, job.rank, job.world, sp)
    cap = capture(job, model, {"tp": job.world}, {"tp": job.rank}, sp=sp, plan=PLAN)  # parity
    train(job, cap, model, opt, M=job.cfg.B // job.cfg.micro_batch, reduce=reduce, clip=clip)
