"""gpt_ref.py - the golden GPT of ref/model/MODEL.md, written again in
PyTorch float64 from the spec (not from the C code).

It is the independent check on the golden mathematics: the forward is
ours, the backward is torch autograd's (so it shares nothing with the C
backward), and clipping, AdamW and the learning-rate schedule are
written out by hand from MODEL.md's formulas. Everything runs in float64,
so the reference is the exact mathematics up to ~1e-16; the fp32 golden
run should sit ~1e-6..1e-5 away from it, and a wrong formula much further.

Mixed precision (MODEL.md "Mixed precision"): a Precision rounds to bf16
or fp16 at the spec's points, forward values explicitly and gradients by
autograd Functions that round what flows back; gpt_forward's teacher
forcing lets the test compare each unit from the C run's own inputs.

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
        # mixed precision (MODEL.md): "fp32", "bf16" or "fp16"; fp16's static
        # loss scale (0: dynamic)
        prec = d.get("precision") or {}
        self.precision = str(prec.get("dtype", "fp32"))
        self.loss_scale = float(prec.get("loss_scale", 0) or 0)

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


def gpt_forward(params, cfg, input_ids, labels, masks=None, acts=None, aux=None, prec=None,
                grad_inputs=None, force=None):
    """params: name -> float64 tensor; input_ids, labels [B, T] (int);
    masks: site -> uint8 keep mask (None or missing = no dropout there);
    for an MoE layer also "layers.L.mlp.router.choice" [B, T, k] and
    "layers.L.mlp.router.kept" [B, T, k], the routing to replay (missing:
    the reference routes itself, moe_ref.py);
    acts: dict to fill with the dumped activation names (or None);
    aux: list to append the MoE layers' auxiliary losses to (or None);
    prec: a Precision (mixed precision's rounding points) or None (fp32:
    the exact mathematics, every rounding point the identity);
    grad_inputs: dict that the backward fills with grad_input.layers.L and
    grad_input.head (the residual stream's gradient entering layer L and
    the final LayerNorm, after its sum's rounding), or None;
    force: teacher forcing (None: off), a dict of the C run's tensors by
    dump name: each activation named in it ("logits" too) goes on with the
    C value after this reference's own value is recorded (the gradient
    flows through the reference's computation, evaluated at the C run's
    inputs), and each "grad_input.X" replaces the gradient that the
    backward passes below that point, so that every unit is checked from
    the C run's own inputs, not from the reference's drifting copy.
    Returns (loss scalar, logits [B, T, V]); loss is the LM loss alone."""
    masks = masks or {}
    force = force or {}
    H, D, L, eps = cfg.H, cfg.D, cfg.L, cfg.ln_eps
    ph, pa = cfg.hidden_dropout, cfg.attention_dropout
    B, T = input_ids.shape
    R = prec if prec is not None else EXACT
    if R.lowp and cfg.moe is not None:
        raise ValueError("mixed precision: the reference has no rounding points for MoE layers yet "
                         "(parity's: MOE.md, \"Mixed precision\")")
    P = R.weights(params)

    def rec(name, t):
        """Record the reference's value; go on with the C run's if forced."""
        if acts is not None:
            acts[name] = t
        return t if name not in force else _forced(t, force[name])

    def stream(name):
        """The backward's end of the residual stream entering unit `name`:
        (callback that records its gradient, the C run's gradient to go on
        with or None)."""
        sink = None if grad_inputs is None else (lambda g: grad_inputs.__setitem__(name, g))
        return sink, force.get("grad_input." + name)

    ids = input_ids.long()
    x = P["embedding.word_embeddings.weight"][ids] + P["embedding.position_embeddings.weight"][:T]
    # dropout backward's output rounded; the output after dropout rounded
    x = R.act("embedding", R.dropout(R.grad("dropout", x), masks.get("dropout.embedding"), ph),  # [B, T, C]
              *stream("layers.0"))
    x = rec("embedding.output", x)
    for l in range(L):
        pre = f"layers.{l}."
        a = R.act("layernorm", layernorm(R.grad("layernorm_input", x), P[pre + "input_layernorm.weight"],
                                         P[pre + "input_layernorm.bias"], eps))
        a = rec(pre + "input_layernorm.output", a)
        qkv = R.linear(a, P[pre + "self_attention.query_key_value.weight"],
                       P[pre + "self_attention.query_key_value.bias"])
        qkv = rec(pre + "self_attention.query_key_value.output", qkv)  # [B, T, 3C]
        q, k, v = split_qkv(qkv, H, D)
        o = causal_attention(q, k, v, masks.get(pre + "attention_dropout"), pa)
        ctx = R.act("ctx", o.permute(0, 2, 1, 3).reshape(B, T, H * D))  # head h in columns hD..hD+D-1
        ctx = rec(pre + "self_attention.core_attention.output", ctx)
        y = R.linear(ctx, P[pre + "self_attention.dense.weight"], P[pre + "self_attention.dense.bias"])
        y = rec(pre + "self_attention.dense.output", y)
        x = R.act("residual", x + R.dropout(y, masks.get(pre + "attention_output_dropout"), ph))
        m = R.act("layernorm", layernorm(R.grad("layernorm_input", x), P[pre + "post_attention_layernorm.weight"],
                                         P[pre + "post_attention_layernorm.bias"], eps))
        m = rec(pre + "post_attention_layernorm.output", m)
        if cfg.is_moe_layer(l):
            y = moe_ref.moe_mlp(m, P, pre, cfg.moe, cfg.B, masks, rec, aux, gelu_tanh)
            x = x + dropout(y, masks.get(pre + "mlp_output_dropout"), ph)
            x = rec(pre + "output", x)
            continue
        h = R.linear(m, P[pre + "mlp.dense_h_to_4h.weight"], P[pre + "mlp.dense_h_to_4h.bias"])
        h = rec(pre + "mlp.dense_h_to_4h.output", h)                 # [B, T, F], before GeLU
        h = R.act("gelu", gelu_tanh(h))
        y = R.linear(h, P[pre + "mlp.dense_4h_to_h.weight"], P[pre + "mlp.dense_4h_to_h.bias"])
        y = rec(pre + "mlp.dense_4h_to_h.output", y)
        x = R.act("residual", x + R.dropout(y, masks.get(pre + "mlp_output_dropout"), ph),
                  *stream(f"layers.{l + 1}" if l + 1 < L else "head"))
        x = rec(pre + "output", x)
    xf = R.act("layernorm", layernorm(R.grad("layernorm_input", x), P["final_layernorm.weight"],
                                      P["final_layernorm.bias"], eps))
    xf = rec("final_layernorm.output", xf)
    W = P["embedding.word_embeddings.weight"] if cfg.tied else P["output_layer.weight"]
    logits = R.linear(xf, W, None)                                   # [B, T, V], no bias
    # (forced: the loss from the C run's logits; the reference's own returned)
    fl = _forced(logits, force["logits"]) if "logits" in force else logits
    loss = F.cross_entropy(fl.reshape(B * T, -1), labels.long().reshape(B * T), reduction="mean")
    return loss, logits


class _Forced(torch.autograd.Function):
    """Teacher forcing: the value is the C run's, the gradient goes to the
    reference's tensor unchanged."""

    @staticmethod
    def forward(ctx, t, c):
        return c.to(t.dtype).reshape(t.shape).clone()

    @staticmethod
    def backward(ctx, g):
        return g, None


def _forced(t, c):
    return _Forced.apply(t, c)


# ---------------------------------------------------------- mixed precision
#
# MODEL.md "Mixed precision": values live in fp32 and are rounded to the
# storage dtype S (bf16 or fp16, round to nearest even on the fp32 value)
# at named points of the forward and of the backward. Autograd cannot
# round an intermediate gradient by itself, so each point is an autograd
# Function that rounds on the way forward, on the way back, or both.

def round_f32(x):
    """float64 -> the nearest float32 (IEEE conversion: ties to even), as float64."""
    return x.to(torch.float32).to(F64)


def round_bf16_bits(x):
    """float64 -> fp32 (RNE) -> bf16 (RNE on the fp32 bits: add 0x7fff plus
    the kept part's lowest bit, clear the low 16 bits; MODEL.md's and
    pm_round_bf16's definition), as float64; NaN stays NaN, overflow goes
    to inf. Written on the bits, independently of torch: the self-test
    holds torch's conversion (round_bf16, 3x faster) to it."""
    f = x.to(torch.float32).contiguous()
    u = f.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000)
    r = torch.where((u & 0x7FFFFFFF) > 0x7F800000, u, r)             # NaN: unchanged
    r = torch.where(r >= 0x80000000, r - (1 << 32), r).to(torch.int32)
    return r.view(torch.float32).to(F64).reshape(x.shape)


def round_bf16(x):
    """float64 -> fp32 (RNE) -> bf16 (RNE), as float64: torch's float32 ->
    bfloat16 conversion, which rounds to nearest even (the self-test checks
    it against round_bf16_bits, ties included). Going through float32 first
    matters: parity's values are fp32 before they are rounded to S."""
    return x.to(torch.float32).to(torch.bfloat16).to(F64)


def round_fp16(x):
    """float64 -> fp32 (RNE) -> fp16 (IEEE RNE: subnormals down to 2^-24,
    +-inf from 65520), as float64; torch's conversion (the self-test checks
    its ties, subnormals and overflow against MODEL.md's definition)."""
    return x.to(torch.float32).to(torch.float16).to(F64)


class _RoundBoth(torch.autograd.Function):
    """A rounding point: fwd applied to the value, bwd to the gradient that
    flows back (a stored value's gradient is itself stored, so most points
    round both ways; either may be the identity). sink records the
    gradient after bwd; force (teacher forcing) replaces it."""

    @staticmethod
    def forward(ctx, x, fwd, bwd, sink=None, force=None):
        ctx.bwd, ctx.sink, ctx.force = bwd, sink, force
        return fwd(x)

    @staticmethod
    def backward(ctx, g):
        g = ctx.bwd(g)
        if ctx.sink is not None:
            ctx.sink(g.detach())
        if ctx.force is not None:  # teacher forcing (gpt_forward's force)
            g = ctx.force.to(g.dtype).reshape(g.shape)
        return g, None, None, None, None


def _same(x):
    return x


class Precision:
    """The rounding points of MODEL.md's mixed precision.

    dtype: "bf16" or "fp16"; loss_scale: fp16's (static) scale, which
    multiplies the loss's gradient once (forward_backward) and divides the
    weight gradients before the norm; forget: a set of rounding-point
    names the reference leaves out (the test's negative controls; empty
    for the real reference). The names: "weights", "embedding", "dropout"
    (the embedding dropout's backward output; a residual branch's is its
    linear's output gradient), "layernorm", "layernorm_input" (LayerNorm's
    input gradient), "linear", "ctx", "gelu", "residual", "logits" (the
    forward and backward of one stored value share a name) and
    "grad:<name>" to leave out only the backward half of one."""

    lowp = True

    def __init__(self, dtype, loss_scale=1.0, forget=()):
        if dtype not in ("bf16", "fp16"):
            raise ValueError(f"Precision: dtype {dtype!r}, expected bf16 or fp16")
        self.dtype = dtype
        self.round = round_bf16 if dtype == "bf16" else round_fp16
        self.loss_scale = float(loss_scale)
        self.forget = frozenset(forget)

    def _rounders(self, name):
        fwd = _same if name in self.forget else self.round
        bwd = _same if (name in self.forget or "grad:" + name in self.forget) else self.round
        return fwd, bwd

    def weights(self, params):
        """The compute copy round_S(master); its gradient is the master's."""
        fwd = _same if "weights" in self.forget else self.round
        return {n: _RoundBoth.apply(p, fwd, _same, None) for n, p in params.items()}

    def act(self, name, x, sink=None, force=None):
        fwd, bwd = self._rounders(name)
        return _RoundBoth.apply(x, fwd, bwd, sink, force)

    def grad(self, name, x):
        """Identity forward; the gradient flowing back rounded (a dropout
        backward's output, LayerNorm's input gradient before it joins the
        residual stream's)."""
        _, bwd = self._rounders(name)
        return _RoundBoth.apply(x, _same, bwd, None)

    @staticmethod
    def dropout(x, keep, p):
        """Inverted dropout as fp32 storage computes it: the scale is the fp32
        value 1/(1 - p) (p the config's fp32 value), the product rounded to
        fp32. With S = bf16 this is not a detail: x has a short significand,
        x/0.9 is often exact and then falls on a tie of S, which the fp32
        scale (just above 10/9) and the exact 1/(1 - p) round apart. The
        backward's product g*keep*scale is exact in float64; the rounding
        point upstream takes it to fp32 and then S, as fp32 storage does."""
        if p == 0.0 or keep is None:
            return x
        one = torch.tensor(1.0, dtype=torch.float32)
        scale = float(one / (one - torch.tensor(p, dtype=torch.float32)))
        return _RoundBoth.apply(x * (keep.to(x.dtype) * scale), round_f32, _same, None)

    def linear(self, x, W, b):
        """The exact sum of products rounded to fp32 once, the bias added in
        fp32, the result rounded to S (a GEMM accumulating in fp32); its
        gradient, the next unit's, rounded to S on the way back. The
        float64 product stands for the exact sum: it differs from it far
        below an fp32 ulp."""
        y = _RoundBoth.apply(x @ W.t(), round_f32, _same, None)
        if b is not None:
            y = _RoundBoth.apply(y + b, round_f32, _same, None)
        return self.act("logits" if b is None else "linear", y)


def precision_of(cfg, forget=()):
    """The Precision a dump's config asks for (None for fp32). fp16 is
    replayed with a static loss scale only: a dynamic scaler's state is
    the C run's history, which this reference does not re-derive."""
    if cfg.precision == "fp32":
        return None
    if cfg.precision == "fp16" and cfg.loss_scale <= 0:
        raise ValueError("fp16 with dynamic loss scaling: the reference replays a static --loss-scale only")
    return Precision(cfg.precision, cfg.loss_scale if cfg.precision == "fp16" else 1.0, forget)


class _Exact:
    """fp32's reference: the exact mathematics, no rounding point."""
    lowp = False
    loss_scale = 1.0

    @staticmethod
    def weights(params):
        return params

    @staticmethod
    def act(name, x, sink=None, force=None):
        # the fp32 test compares no grad_input and forces nothing
        if sink is not None or force is not None:
            raise ValueError("grad_input recording and teacher forcing need a Precision")
        return x

    @staticmethod
    def grad(name, x):
        return x

    @staticmethod
    def dropout(x, keep, p):
        return dropout(x, keep, p)

    @staticmethod
    def linear(x, W, b):
        return x @ W.t() + b if b is not None else x @ W.t()


EXACT = _Exact()


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


def forward_backward(params, cfg, input_ids, labels, masks=None, want_acts=True, prec=None, force=None):
    """One forward and autograd backward from float64 params.
    The gradient is the objective's: the LM loss plus the MoE layers'
    auxiliary losses (aux_loss, their sum; 0 for a dense model).
    prec: a Precision (mixed precision) or None (fp32). fp16's loss scale
    multiplies the objective (so the loss's gradient, the one place it
    enters) and divides the weight gradients again, as MODEL.md unscales
    them before the norm; grad_inputs stay scaled, as parity dumps them.
    force: teacher forcing (gpt_forward).
    Returns dict(loss, aux_loss, logits, acts, grads, grad_inputs)."""
    leaves = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    acts = {} if want_acts else None
    aux = []
    grad_inputs = {} if prec is not None else None
    loss, logits = gpt_forward(leaves, cfg, input_ids, labels, masks, acts, aux, prec, grad_inputs, force)
    objective = loss + sum(aux) if aux else loss
    scale = prec.loss_scale if prec is not None else 1.0
    (objective * scale if scale != 1.0 else objective).backward()
    return {"loss": loss.detach(), "aux_loss": float(sum(aux)) if aux else 0.0,
            "logits": logits.detach(),
            "acts": {k: v.detach() for k, v in (acts or {}).items()},
            "grad_inputs": grad_inputs or {},
            "grads": {n: (p.grad.detach().clone() / scale if scale != 1.0 else p.grad.detach().clone())
                      if p.grad is not None else torch.zeros_like(p)
                      for n, p in leaves.items()}}
