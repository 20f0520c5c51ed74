"""model.py - gpt-micro (ref/model/MODEL.md) as ordinary fp32 PyTorch
training code, with optional Megatron-style tensor parallelism.

The formulas are gpt_ref.py's (pre-LN blocks, tanh GeLU, LayerNorm with
eps inside the root, causal attention scaled by 1/sqrt(D), dropout on the
attention probabilities and on both residual branches and the embedding
(parity.torch.Dropout: parity's masks),
tied LM head, mean token loss); the code is what a user writes: nn.Linear
shards, nn.LayerNorm, F.gelu, softmax. Module names are parity's sites
(megatron-lm names), so forward hooks find `layers.0.mlp.dense_h_to_4h`.

Tensor parallelism (`Par`, tp > 1): query_key_value and dense_h_to_4h are
column-parallel (whole heads per rank: the qkv rows are (head, q/k/v, d)),
dense and dense_4h_to_h row-parallel, the word embedding vocab-parallel
(its lookup summed over tp, the tied LM head column-parallel with a
vocab-parallel cross entropy). With sequence parallelism (sp) the
residual stream, LayerNorms and dropouts hold T/tp positions; the column
linears all-gather their input along the sequence and the row linears
reduce-scatter their output (Megatron's g and g-bar).

Shapes: B local sequences, T tokens, C hidden, H heads, D = C/H, F ffn,
V vocab; a tp rank holds H/tp heads, F/tp ffn columns, V/tp vocab rows,
T/tp positions under sp.
"""
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import parity.torch


class Config:
    """The model/optimizer config, from a parity dump's `config` JSON."""

    def __init__(self, d):
        self.V, self.T, self.C = int(d["vocab"]), int(d["seq_length"]), int(d["hidden"])
        self.H, self.L, self.F = int(d["heads"]), int(d["layers"]), int(d["ffn"])
        self.D = self.C // self.H
        self.eps_ln = float(d["ln_eps"])
        self.p_hidden = float(d["dropouts"]["hidden"])
        self.p_attn = float(d["dropouts"]["attention"])
        self.B, self.micro_batch = int(d["global_batch"]), int(d["micro_batch"])
        self.lr, self.min_lr = float(d["lr"]), float(d["min_lr"])
        self.warmup, self.decay_steps = int(d["warmup"]), int(d["decay_steps"])
        self.betas = (float(d["beta1"]), float(d["beta2"]))
        self.eps, self.wd, self.clip = float(d["eps"]), float(d["weight_decay"]), float(d["clip_grad"])
        self.seed = int(d["seed"])

    def lr_at(self, s):
        """MODEL.md's schedule: linear warm-up, cosine decay to min_lr."""
        if self.warmup > 0 and s < self.warmup:
            return self.lr * (s + 1) / self.warmup
        if self.decay_steps == 0:
            return self.lr
        if s >= self.decay_steps:
            return self.min_lr
        ratio = (s - self.warmup) / (self.decay_steps - self.warmup)
        return self.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (self.lr - self.min_lr)


class Par:
    """Where this rank sits in tensor parallelism; `bugs` names the
    injected bugs the TP code path honours (test_backends.py)."""

    def __init__(self, group=None, tp=1, rank=0, sp=False, bugs=()):
        self.group, self.tp, self.rank, self.sp, self.bugs = group, tp, rank, sp and tp > 1, set(bugs)


NOPAR = Par()


# ------------------------------------------------------- tp communication
# gloo has no reduce_scatter and reduces no bf16: reduce in fp32 (as
# Megatron does its gradient reductions) and cast back.

def _all_reduce(x, par):
    y = x.float().contiguous()
    dist.all_reduce(y, group=par.group)
    return y.to(x.dtype)


def _all_gather(x, par, dim):
    parts = [torch.empty(x.shape) for _ in range(par.tp)]
    dist.all_gather(parts, x.float().contiguous(), group=par.group)
    return torch.cat(parts, dim).to(x.dtype)


def _reduce_scatter(x, par, dim):
    return _all_reduce(x, par).chunk(par.tp, dim)[par.rank].contiguous()


class _CopyToTp(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the input gradient."""

    @staticmethod
    def forward(ctx, x, par):
        ctx.par = par
        return x

    @staticmethod
    def backward(ctx, g):
        if "f_no_allreduce" in ctx.par.bugs:
            # BUG: the column-parallel input gradient without its all-reduce
            # (Megatron's f; in plain TP the row-parallel side's backward is
            # the identity, so this is where a missing all-reduce lives):
            # each rank keeps its own heads'/ffn columns' share
            return g, None
        return _all_reduce(g, ctx.par), None


class _ReduceFromTp(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, par):
        return _all_reduce(x, par)

    @staticmethod
    def backward(ctx, g):
        return g, None


class _GatherSeq(torch.autograd.Function):
    """SP: all-gather along the sequence, reduce-scatter of the gradient."""

    @staticmethod
    def forward(ctx, x, par):
        ctx.par = par
        return _all_gather(x, par, 1)

    @staticmethod
    def backward(ctx, g):
        return _reduce_scatter(g, ctx.par, 1), None


class _ScatterSeq(torch.autograd.Function):
    """SP: reduce-scatter along the sequence, all-gather of the gradient."""

    @staticmethod
    def forward(ctx, x, par):
        ctx.par = par
        return _reduce_scatter(x, par, 1)

    @staticmethod
    def backward(ctx, g):
        return _all_gather(g, ctx.par, 1), None


def to_column_input(x, par):
    """A column-parallel linear's input: [B, T/tp or T, C] -> [B, T, C]."""
    if par.tp == 1:
        return x
    return _GatherSeq.apply(x, par) if par.sp else _CopyToTp.apply(x, par)


def from_row_output(y, par):
    """A row-parallel linear's partial output summed over tp: [B, T, C] ->
    [B, T/tp, C] under sp, [B, T, C] without."""
    if par.tp == 1:
        return y
    if par.sp and "sp_allreduce" in par.bugs:
        # BUG: Megatron's g (all-reduce, identity backward) and a plain
        # chunk in place of the reduce-scatter: the same forward, but the
        # backward hands each rank only its own positions' gradient.
        return _ReduceFromTp.apply(y, par).chunk(par.tp, 1)[par.rank]
    return _ScatterSeq.apply(y, par) if par.sp else _ReduceFromTp.apply(y, par)


# ----------------------------------------------------------------- layers

class ColumnLinear(nn.Linear):
    """Megatron's ColumnParallelLinear: this rank's out/tp rows of W and b;
    the input is gathered (sp) or copied (f) first."""

    def __init__(self, n_in, n_out, par):
        super().__init__(n_in, n_out // par.tp)
        self.par = par

    def forward(self, x):
        return super().forward(to_column_input(x, self.par))


class RowLinear(nn.Module):
    """Megatron's RowParallelLinear: this rank's in/tp columns of W; the
    partial products are summed over tp, then the bias is added once."""

    def __init__(self, n_in, n_out, par):
        super().__init__()
        self.par = par
        self.weight = nn.Parameter(torch.empty(n_out, n_in // par.tp))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return from_row_output(F.linear(x, self.weight), self.par) + self.bias


class Dropout(parity.torch.Dropout):
    """parity's dropout (its position-keyed masks; .step set by
    Capture.step) on this rank's slice `where(x)` of the site's global
    tensor: [B, H, T, T] attention probabilities, else [B, T, C]."""

    def __init__(self, cfg, site, layer, where):
        p = cfg.p_attn if site == "attention_dropout" else cfg.p_hidden
        super().__init__(cfg.seed, site, layer, p)
        self.where = where
        self.shape = (cfg.B, cfg.H, cfg.T, cfg.T) if site == "attention_dropout" else (cfg.B, cfg.T, cfg.C)

    def forward(self, x):
        return super().forward(x, self.where(x), self.shape)


class Embedding(nn.Module):
    """Word (vocab-parallel under tp) plus position embedding, dropout."""

    def __init__(self, cfg, par, where):
        super().__init__()
        self.par, self.cfg = par, cfg
        self.v_lo = par.rank * (cfg.V // par.tp)
        self.word_embeddings = nn.Embedding(cfg.V // par.tp, cfg.C)
        self.position_embeddings = nn.Embedding(cfg.T, cfg.C)
        self.dropout = Dropout(cfg, "dropout.embedding", None, where)

    def forward(self, ids):  # ids [B, T] -> [B, T/tp or T, C]
        par = self.par
        if par.tp == 1:
            x = self.word_embeddings(ids)
        else:
            local = ids - self.v_lo
            outside = (local < 0) | (local >= self.word_embeddings.num_embeddings)
            x = self.word_embeddings(local.masked_fill(outside, 0)).masked_fill(outside[..., None], 0.0)
            x = _ScatterSeq.apply(x, par) if par.sp else _ReduceFromTp.apply(x, par)
        T = x.shape[1]
        t0 = par.rank * T if par.sp else 0
        x = x + self.position_embeddings.weight[t0:t0 + T]
        return self.dropout(x)


class CoreAttention(nn.Module):
    """Causal softmax attention over this rank's heads.
    qkv [B, T, 3C/tp] (Megatron row order) -> ctx [B, T, C/tp]."""

    def __init__(self, cfg, heads, layer, where):
        super().__init__()
        self.heads, self.D = heads, cfg.D
        self.dropout = Dropout(cfg, "attention_dropout", layer, where)

    def forward(self, qkv):
        B, T, _ = qkv.shape
        q, k, v = qkv.view(B, T, self.heads, 3, self.D).permute(3, 0, 2, 1, 4)  # [B, h, T, D] each
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.D))
        future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        att = torch.softmax(s.masked_fill(future, float("-inf")), dim=-1)
        o = self.dropout(att) @ v
        return o.permute(0, 2, 1, 3).reshape(B, T, self.heads * self.D)


class SelfAttention(nn.Module):
    def __init__(self, cfg, par, l, where):
        super().__init__()
        C, tp = cfg.C, par.tp
        self.par = par
        self.query_key_value = ColumnLinear(C, 3 * C, par)
        self.core_attention = CoreAttention(cfg, cfg.H // tp, l, where)
        self.dense = RowLinear(C, C, par)

    def forward(self, a):
        return self.dense(self.core_attention(self.query_key_value(a)))


class MLP(nn.Module):
    def __init__(self, cfg, par):
        super().__init__()
        self.dense_h_to_4h = ColumnLinear(cfg.C, cfg.F, par)
        self.dense_4h_to_h = RowLinear(cfg.F, cfg.C, par)

    def forward(self, m):
        return self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(m), approximate="tanh"))


class Layer(nn.Module):
    def __init__(self, cfg, par, l, where):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.C, eps=cfg.eps_ln)
        self.self_attention = SelfAttention(cfg, par, l, where)
        self.attention_output_dropout = Dropout(cfg, "attention_output_dropout", l, where)
        self.post_attention_layernorm = nn.LayerNorm(cfg.C, eps=cfg.eps_ln)
        self.mlp = MLP(cfg, par)
        self.mlp_output_dropout = Dropout(cfg, "mlp_output_dropout", l, where)

    def forward(self, x):  # [B, T/tp or T, C]
        x = x + self.attention_output_dropout(self.self_attention(self.input_layernorm(x)))
        return x + self.mlp_output_dropout(self.mlp(self.post_attention_layernorm(x)))


def lm_loss(cfg, par, xf, wte, labels):
    """The tied LM head (column-parallel over the vocab) and the mean token
    loss (vocab-parallel cross entropy under tp). xf [B, T/tp or T, C],
    wte [V/tp, C], labels [B, T] -> (logits [B, T, V/tp], loss)."""
    logits = F.linear(to_column_input(xf, par), wte)
    z = logits
    if "vocab_pad" in par.bugs:
        # BUG (Megatron-LM #1754): the vocabulary padded to a multiple of
        # 48*tp, and the padded rows' logits (zero rows: logit 0) let into
        # the softmax; the correct head has no padding at all
        unit = 48 * par.tp
        pad = ((cfg.V + unit - 1) // unit * unit - cfg.V) // par.tp
        z = torch.cat([logits, logits.new_zeros(*logits.shape[:2], pad)], -1)
    if par.tp == 1:
        return logits, F.cross_entropy(z.flatten(0, 1).float(), labels.flatten().long())
    return logits, _vocab_parallel_ce(z.float(), labels, par, par.rank * (cfg.V // par.tp))


class _VocabCE(torch.autograd.Function):
    """Megatron's vocab-parallel cross entropy: the max, the sum of exps
    and the target logit each all-reduced over tp. z [N, V/tp] fp32."""

    @staticmethod
    def forward(ctx, z, target, par, v_lo):
        m = z.max(-1).values
        m = m.contiguous()
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=par.group)
        e = torch.exp(z - m[:, None])
        Z = e.sum(-1)
        dist.all_reduce(Z, group=par.group)
        local = target - v_lo
        mine = (local >= 0) & (local < z.shape[-1])
        zt = torch.where(mine, z.gather(1, local.clamp(0, z.shape[-1] - 1)[:, None])[:, 0], z.new_zeros(()))
        dist.all_reduce(zt, group=par.group)
        p = e / Z[:, None]
        ctx.save_for_backward(p, local, mine)
        return (m + torch.log(Z) - zt).mean()

    @staticmethod
    def backward(ctx, g):
        p, local, mine = ctx.saved_tensors
        d = p.clone()
        rows = torch.nonzero(mine)[:, 0]
        d[rows, local[rows]] -= 1.0
        return d * (g / p.shape[0]), None, None, None


def _vocab_parallel_ce(z, labels, par, v_lo):
    B, T, Vl = z.shape
    return _VocabCE.apply(z.reshape(B * T, Vl), labels.reshape(-1).long(), par, v_lo)


class GPT(nn.Module):
    """The whole model, or a pipeline stage of it (`layers`: which layers
    this stage holds; `first`/`last`: whether it has the embedding / the
    head). `rows()`: the global batch rows of the current microbatch
    (the dropout masks' index)."""

    def __init__(self, cfg, par=NOPAR, rows=None, layers=None, first=True, last=True):
        super().__init__()
        self.cfg, self.par = cfg, par
        self.first, self.last = first, last
        self.rows = rows
        if first:
            self.embedding = Embedding(cfg, par, self.where)
        elif last:
            # the last pipeline stage holds its own copy of the tied word
            # embedding (Megatron's), under the same name
            self.embedding = nn.Module()
            self.embedding.word_embeddings = nn.Embedding(cfg.V // par.tp, cfg.C)
        ls = range(cfg.L) if layers is None else layers
        self.layers = nn.ModuleDict({str(l): Layer(cfg, par, l, self.where) for l in ls})
        if last:
            self.final_layernorm = nn.LayerNorm(cfg.C, eps=cfg.eps_ln)

    def where(self, x):
        """The global index of a dropout site's local tensor x: the batch
        rows, this rank's heads (attention [B, h, T, T]) or positions (sp)."""
        par = self.par
        r = self.rows()
        if x.dim() == 4:
            h = x.shape[1]
            h0 = 0 if "same_dropout_mask" in par.bugs else par.rank * h  # BUG: tp rank 0's mask everywhere
            return (r, slice(h0, h0 + h), slice(None), slice(None))
        T = x.shape[1]
        t0 = par.rank * T if par.sp else 0
        return (r, slice(t0, t0 + T), slice(None))

    def forward(self, x, labels=None):
        """First stage: x = input ids [B, T]; otherwise the previous
        stage's output [B, T/tp or T, C]. Returns the last layer's output,
        or on the last stage (logits [B, T, V/tp], loss)."""
        if self.first:
            x = self.embedding(x)
        for layer in self.layers.values():
            x = layer(x)
        if not self.last:
            return x
        return lm_loss(self.cfg, self.par, self.final_layernorm(x), self.embedding.word_embeddings.weight,
                       labels)
