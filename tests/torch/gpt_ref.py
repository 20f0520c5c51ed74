"""gpt_ref.py - the golden GPT of ref/model/MODEL.md, written again in
PyTorch float64 from the spec (not from the C code).

It is the independent check on the golden mathematics: the forward is
ours, the backward is torch autograd's (so it shares nothing with the C
backward), and clipping, AdamW and the learning-rate schedule are
written out by hand from MODEL.md's formulas. Everything runs in float64,
so the reference is the exact mathematics up to ~1e-16; the fp32 golden
run should sit ~1e-6..1e-5 away from it, and a wrong formula much further.

Shapes: B sequences, T tokens, C hidden, H heads, D = C/H, F ffn, V vocab.
"""
import math

import torch
import torch.nn.functional as F

import moe_ref

F64 = torch.float64


class GPTConfig:
    """The model and optimizer config, as the dump's `config` JSON gives it."""

    def __init__(self, d):
        self.raw = dict(d)
        self.V = int(d["vocab"])
        self.T = int(d["seq_length"])
        self.C = int(d["hidden"])
        self.H = int(d["heads"])
        self.L = int(d["layers"])
        self.F = int(d["ffn"])
        self.tied = bool(d.get("tied", True))
        self.ln_eps = float(d.get("ln_eps", 1e-5))
        drop = d.get("dropouts", {}) or {}
        if not isinstance(drop, dict):
            raise ValueError(f"config.dropouts: expected an object, got {drop!r}")
        self.hidden_dropout = float(drop.get("hidden", 0.0))
        self.attention_dropout = float(drop.get("attention", 0.0))
        self.B = int(d["global_batch"])
        self.lr = float(d["lr"])
        self.min_lr = float(d.get("min_lr", 0.0))
        self.warmup = int(d.get("warmup", 0))
        self.decay_steps = int(d.get("decay_steps", 0))
        self.beta1 = float(d["beta1"])
        self.beta2 = float(d["beta2"])
        self.eps = float(d["eps"])
        self.weight_decay = float(d["weight_decay"])
        self.clip_grad = float(d.get("clip_grad", 0.0))
        if self.C % self.H:
            raise ValueError(f"config: hidden {self.C} is not a multiple of heads {self.H}")
        self.D = self.C // self.H
        # mixture of experts (moe_ref.py): None = every MLP dense
        moe = d.get("moe")
        self.moe = moe_ref.MoEConfig(moe) if moe and int(moe.get("experts", 0)) > 0 else None

    def is_moe_layer(self, l):
        return self.moe is not None and self.moe.is_moe_layer(l)


# ---------------------------------------------------------------- parameters

def param_shapes(cfg):
    """Name -> shape, in MODEL.md's table order."""
    V, T, C, F_, L = cfg.V, cfg.T, cfg.C, cfg.F, cfg.L
    s = {"embedding.word_embeddings.weight": (V, C),
         "embedding.position_embeddings.weight": (T, C)}
    for l in range(L):
        p = f"layers.{l}."
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "input_layernorm.bias"] = (C,)
        s[p + "self_attention.query_key_value.weight"] = (3 * C, C)
        s[p + "self_attention.query_key_value.bias"] = (3 * C,)
        s[p + "self_attention.dense.weight"] = (C, C)
        s[p + "self_attention.dense.bias"] = (C,)
        s[p + "post_attention_layernorm.weight"] = (C,)
        s[p + "post_attention_layernorm.bias"] = (C,)
        if cfg.is_moe_layer(l):
            for sfx, shape in moe_ref.param_shapes(cfg.moe.E, C, F_).items():
                s[p + sfx] = shape
            continue
        s[p + "mlp.dense_h_to_4h.weight"] = (F_, C)
        s[p + "mlp.dense_h_to_4h.bias"] = (F_,)
        s[p + "mlp.dense_4h_to_h.weight"] = (C, F_)
        s[p + "mlp.dense_4h_to_h.bias"] = (C,)
    s["final_layernorm.weight"] = (C,)
    s["final_layernorm.bias"] = (C,)
    if not cfg.tied:
        s["output_layer.weight"] = (V, C)
    return s


def init_std(name, cfg):
    """MODEL.md's init: N(0, sigma) for weights, sigma/sqrt(2L) for the two
    residual-branch output projections; None for constants (LN 1, bias 0)."""
    sigma = 0.02
    if (name.endswith("self_attention.dense.weight") or name.endswith("mlp.dense_4h_to_h.weight")
            or name.endswith("mlp.experts.linear_fc2.weight")):
        return sigma / math.sqrt(2.0 * cfg.L)
    if name.endswith(".bias") or "layernorm" in name:
        return None
    return sigma


def init_const(name):
    """The constant an init_std()==None parameter starts at."""
    return 1.0 if ("layernorm" in name and name.endswith(".weight")) else 0.0


def weight_decayed(name, shape):
    """Which parameters AdamW decays: the 2-D weight matrices (embeddings
    and the LM head included), never biases or LayerNorm gamma/beta.
    This is Megatron's rule (no decay for biases and 1-D parameters); an
    MoE layer's stacked expert weights [E, F, C] are weights (Megatron's
    per-expert matrices), its stacked expert biases [E, F] are not."""
    return len(shape) >= 2 and not name.endswith(".bias")


# --------------------------------------------------------------- the layers

def layernorm(x, w, b, eps):
    # x [..., C]; biased variance over C, eps inside the root.
    mu = x.mean(-1, keepdim=True)
    d = x - mu
    var = (d * d).mean(-1, keepdim=True)
    return d * torch.rsqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def dropout(x, keep, p):
    # keep: uint8 mask of x's shape, 1 = kept; inverted dropout 1/(1-p).
    if p == 0.0 or keep is None:
        return x
    return x * keep.to(x.dtype) * (1.0 / (1.0 - p))


def split_qkv(qkv, H, D):
    """qkv [B, T, 3C] with columns in Megatron's (head, {q,k,v}, d) order
    -> q, k, v each [B, H, T, D]."""
    B, T, _ = qkv.shape
    x = qkv.view(B, T, H, 3, D).permute(3, 0, 2, 1, 4)  # [3, B, H, T, D]
    return x[0], x[1], x[2]


def causal_attention(q, k, v, keep, p):
    """MODEL.md's split-key formula: o = (sum_j e_ij keep_ij/(1-p) v_j) / Z_i
    with e = exp(s - max) over keys j <= i and Z = sum_j e (undropped).
    q, k, v [B, H, T, D] -> o [B, H, T, D]."""
    T, D = q.shape[-2], q.shape[-1]
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))          # [B, H, T, T]
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    s = s.masked_fill(future, float("-inf"))
    m = s.max(-1, keepdim=True).values.detach()                      # a constant (MODEL.md)
    e = torch.exp(s - m)                                             # exactly 0 above the diagonal
    Z = e.sum(-1, keepdim=True)                                      # [B, H, T, 1]
    e_hat = dropout(e, keep, p)
    return (e_hat @ v) / Z


def gpt_forward(params, cfg, input_ids, labels, masks=None, acts=None, aux=None):
    """params: name -> float64 tensor; input_ids, labels [B, T] (int);
    masks: site -> uint8 keep mask (None or missing = no dropout there);
    for an MoE layer also "layers.L.mlp.router.choice" [B, T, k] and
    "layers.L.mlp.router.kept" [B, T, k], the routing to replay (missing:
    the reference routes itself, moe_ref.py);
    acts: dict to fill with the dumped activation names (or None);
    aux: list to append the MoE layers' auxiliary losses to (or None).
    Returns (loss scalar, logits [B, T, V]); loss is the LM loss alone."""
    masks = masks or {}
    H, D, L, eps = cfg.H, cfg.D, cfg.L, cfg.ln_eps
    ph, pa = cfg.hidden_dropout, cfg.attention_dropout
    B, T = input_ids.shape
    P = params
    rec = (lambda name, t: acts.__setitem__(name, t)) if acts is not None else (lambda name, t: None)

    ids = input_ids.long()
    x = P["embedding.word_embeddings.weight"][ids] + P["embedding.position_embeddings.weight"][:T]
    x = dropout(x, masks.get("dropout.embedding"), ph)                # [B, T, C]
    rec("embedding.output", x)
    for l in range(L):
        pre = f"layers.{l}."
        a = layernorm(x, P[pre + "input_layernorm.weight"], P[pre + "input_layernorm.bias"], eps)
        rec(pre + "input_layernorm.output", a)
        qkv = a @ P[pre + "self_attention.query_key_value.weight"].t() + P[pre + "self_attention.query_key_value.bias"]
        rec(pre + "self_attention.query_key_value.output", qkv)      # [B, T, 3C]
        q, k, v = split_qkv(qkv, H, D)
        o = causal_attention(q, k, v, masks.get(pre + "attention_dropout"), pa)
        ctx = o.permute(0, 2, 1, 3).reshape(B, T, H * D)             # head h in columns hD..hD+D-1
        rec(pre + "self_attention.core_attention.output", ctx)
        y = ctx @ P[pre + "self_attention.dense.weight"].t() + P[pre + "self_attention.dense.bias"]
        rec(pre + "self_attention.dense.output", y)
        x = x + dropout(y, masks.get(pre + "attention_output_dropout"), ph)
        m = layernorm(x, P[pre + "post_attention_layernorm.weight"], P[pre + "post_attention_layernorm.bias"], eps)
        rec(pre + "post_attention_layernorm.output", m)
        if cfg.is_moe_layer(l):
            y = moe_ref.moe_mlp(m, P, pre, cfg.moe, cfg.B, masks, rec, aux, gelu_tanh)
            x = x + dropout(y, masks.get(pre + "mlp_output_dropout"), ph)
            rec(pre + "output", x)
            continue
        h = m @ P[pre + "mlp.dense_h_to_4h.weight"].t() + P[pre + "mlp.dense_h_to_4h.bias"]
        rec(pre + "mlp.dense_h_to_4h.output", h)                     # [B, T, F], before GeLU
        h = gelu_tanh(h)
        y = h @ P[pre + "mlp.dense_4h_to_h.weight"].t() + P[pre + "mlp.dense_4h_to_h.bias"]
        rec(pre + "mlp.dense_4h_to_h.output", y)
        x = x + dropout(y, masks.get(pre + "mlp_output_dropout"), ph)
        rec(pre + "output", x)
    xf = layernorm(x, P["final_layernorm.weight"], P["final_layernorm.bias"], eps)
    rec("final_layernorm.output", xf)
    W = P["embedding.word_embeddings.weight"] if cfg.tied else P["output_layer.weight"]
    logits = xf @ W.t()                                              # [B, T, V], no bias
    loss = F.cross_entropy(logits.reshape(B * T, -1), labels.long().reshape(B * T), reduction="mean")
    return loss, logits


# ---------------------------------------------------------------- optimizer

def lr_at(cfg, s):
    """Learning rate of 0-based step s: linear warm-up lr*(s+1)/warmup for
    s < warmup; then cosine from lr down to min_lr, with Megatron's decay
    ratio (s - warmup)/(decay_steps - warmup); min_lr from decay_steps on.
    decay_steps = 0 means no decay (lr after warm-up)."""
    if cfg.warmup > 0 and s < cfg.warmup:
        return cfg.lr * (s + 1) / cfg.warmup
    if cfg.decay_steps == 0:
        return cfg.lr
    span = cfg.decay_steps - cfg.warmup
    if span <= 0 or s >= cfg.decay_steps:
        return cfg.min_lr
    ratio = (s - cfg.warmup) / span
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.lr - cfg.min_lr)


class AdamW:
    """MODEL.md's AdamW with global-norm clipping, in float64, by hand."""

    def __init__(self, cfg, shapes):
        self.cfg = cfg
        self.t = 0
        self.m = {n: torch.zeros(s, dtype=F64) for n, s in shapes.items()}
        self.v = {n: torch.zeros(s, dtype=F64) for n, s in shapes.items()}
        self.shapes = shapes

    def clone(self):
        o = AdamW.__new__(AdamW)
        o.cfg, o.t, o.shapes = self.cfg, self.t, self.shapes
        o.m = {n: t.clone() for n, t in self.m.items()}
        o.v = {n: t.clone() for n, t in self.v.items()}
        return o

    @staticmethod
    def global_norm(grads):
        return math.sqrt(sum(float((g * g).sum()) for g in grads.values()))

    def step(self, params, grads, lr):
        """Returns (new params, pre-clip grad norm, clip factor or None, info)
        with info[name] = (u, S): the update direction
        u = m_hat / (S + eps) (without weight decay) and S = sqrt(v_hat),
        which the test uses to bound how far gradient rounding moves p."""
        cfg = self.cfg
        norm = self.global_norm(grads)
        factor = None
        if cfg.clip_grad > 0 and norm > cfg.clip_grad:
            factor = cfg.clip_grad / (norm + 1e-6)
        self.t += 1
        bc1 = 1.0 - cfg.beta1 ** self.t
        bc2 = 1.0 - cfg.beta2 ** self.t
        out, info = {}, {}
        for n, p in params.items():
            g = grads[n] if factor is None else grads[n] * factor
            self.m[n] = cfg.beta1 * self.m[n] + (1.0 - cfg.beta1) * g
            self.v[n] = cfg.beta2 * self.v[n] + (1.0 - cfg.beta2) * (g * g)
            S = torch.sqrt(self.v[n] / bc2)
            u = (self.m[n] / bc1) / (S + cfg.eps)
            info[n] = (u, S)
            upd = u + cfg.weight_decay * p if weight_decayed(n, self.shapes[n]) else u
            out[n] = p - lr * upd
        return out, norm, factor, info


def forward_backward(params, cfg, input_ids, labels, masks=None, want_acts=True):
    """One forward and autograd backward from float64 params.
    The gradient is the objective's: the LM loss plus the MoE layers'
    auxiliary losses (aux_loss, their sum; 0 for a dense model).
    Returns dict(loss, aux_loss, logits, acts, grads)."""
    leaves = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    acts = {} if want_acts else None
    aux = []
    loss, logits = gpt_forward(leaves, cfg, input_ids, labels, masks, acts, aux)
    objective = loss + sum(aux) if aux else loss
    objective.backward()
    return {"loss": loss.detach(), "aux_loss": float(sum(aux)) if aux else 0.0,
            "logits": logits.detach(),
            "acts": {k: v.detach() for k, v in (acts or {}).items()},
            "grads": {n: p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
                      for n, p in leaves.items()}}
