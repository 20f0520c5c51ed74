"""t5_ref.py - the T5-style encoder-decoder of ref/model/MODEL.md
("Encoder-decoder models (arch t5)"), written again in PyTorch float64
from the spec, the way a T5 user would write it.

The C golden model runs the encoder and the decoder on one stream of T
rows a sequence (rows < P the source, rows >= P the target) and zeroes the
branch outputs of the rows a unit does not own. This reference does not
use that trick: it keeps two tensors,

  enc [B, P, C]      the source rows: embedding, Le encoder layers with
                     bidirectional self-attention, the encoder's final
                     LayerNorm;
  dec [B, T-P, C]    the target rows: embedding, L decoder layers (causal
                     self-attention over the target rows; cross-attention
                     whose queries are LNx(dec) and whose keys and values
                     are `enc` itself; LN2 and the MLP), then the head
                     (final LayerNorm, untied output layer) and the mean
                     cross-entropy over the B*(T-P) target tokens.

The pieces are gpt_ref.py's (LayerNorm with eps inside the root, tanh GeLU,
inverted dropout from a given keep mask, Megatron's qkv row order, the
split-key causal attention, AdamW, the LR schedule); this file adds the
bidirectional / cross split-key attention and the encoder-decoder wiring.
The forward is ours, the backward is torch autograd's.

Dropout masks are the C run's, dumped over the whole stream ([B, T, C] or
[B, H, T, T]); each part takes its rows (and, for attention, its keys):
encoder [:P] / [:P, :P], decoder self-attention [P:] / [P:, P:],
cross-attention [P:, :P].
"""
import math

import torch
import torch.nn.functional as F

import gpt_ref as G

F64 = torch.float64


class T5Config(G.GPTConfig):
    """The dump's config JSON for "arch": "t5": the GPT fields (L = the
    decoder's layers, T = source + target rows) plus the encoder's."""

    def __init__(self, d):
        super().__init__(d)
        if d.get("arch") != "t5":
            raise ValueError(f"config arch {d.get('arch')!r}, expected 't5'")
        enc = d.get("encoder")
        if not isinstance(enc, dict):
            raise ValueError(f"config.encoder: expected an object, got {enc!r}")
        self.Le = int(enc["layers"])
        self.P = int(enc["seq_length"])
        if not 0 < self.P < self.T:
            raise ValueError(f"config: encoder seq_length {self.P} not in 1..{self.T - 1}")
        if self.moe is not None:
            raise ValueError("config: an MoE encoder-decoder is not covered by t5_ref.py")
        if self.tied:
            raise ValueError("config: t5_ref.py covers the untied head of the T5 built-ins")

    @property
    def Tt(self):
        """Target rows per sequence."""
        return self.T - self.P


# ---------------------------------------------------------------- parameters

def _gpt_layer_shapes(cfg):
    """The GPT layer's tensors (suffix -> shape), from gpt_ref's table."""
    return {n[len("layers.0."):]: s for n, s in G.param_shapes(cfg).items() if n.startswith("layers.0.")}


def param_shapes(cfg):
    """Name -> shape, in the order of the units (embedding, encoder layers,
    encoder final LayerNorm, decoder layers, head)."""
    C, V, T = cfg.C, cfg.V, cfg.T
    layer = _gpt_layer_shapes(cfg)
    s = {"embedding.word_embeddings.weight": (V, C),
         "embedding.position_embeddings.weight": (T, C)}
    for l in range(cfg.Le):
        for sfx, shape in layer.items():
            s[f"encoder.layers.{l}.{sfx}"] = shape
    s["encoder.final_layernorm.weight"] = (C,)
    s["encoder.final_layernorm.bias"] = (C,)
    for l in range(cfg.L):
        p = f"decoder.layers.{l}."
        for sfx, shape in layer.items():
            s[p + sfx] = shape
        s[p + "pre_cross_attn_layernorm.weight"] = (C,)
        s[p + "pre_cross_attn_layernorm.bias"] = (C,)
        s[p + "cross_attention.query_key_value.weight"] = (3 * C, C)
        s[p + "cross_attention.query_key_value.bias"] = (3 * C,)
        s[p + "cross_attention.dense.weight"] = (C, C)
        s[p + "cross_attention.dense.bias"] = (C,)
    s["final_layernorm.weight"] = (C,)
    s["final_layernorm.bias"] = (C,)
    s["output_layer.weight"] = (V, C)
    return s


def init_std(name, cfg):
    """gpt_ref's rule (sigma, or sigma/sqrt(2L) for a residual branch's
    output projection, L = cfg.L = the decoder's layers); the
    cross-attention's output projection is a residual branch's too."""
    if name.endswith("cross_attention.dense.weight"):
        return 0.02 / math.sqrt(2.0 * cfg.L)
    return G.init_std(name, cfg)


# --------------------------------------------------------------- attention

def qkv_rows(H, D):
    """Row indices of the q, k and v parts of a fused [3C, C] weight in
    Megatron's order (row h*3D + w*D + d), each ordered (head, d)."""
    base = torch.arange(H).view(H, 1) * 3 * D + torch.arange(D).view(1, D)
    return [(base + w * D).reshape(-1) for w in range(3)]


def full_attention(q, k, v, keep, p):
    """The split-key formula without a causal mask: every query attends
    every key. q [B, H, Tq, D], k, v [B, H, Tk, D], keep [B, H, Tq, Tk] or
    None -> o [B, H, Tq, D]; o = (sum_j e_ij keep_ij/(1-p) v_j) / Z_i with
    e = exp(s - max) and Z the sum of the undropped e (MODEL.md)."""
    D = q.shape[-1]
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    m = s.max(-1, keepdim=True).values.detach()
    e = torch.exp(s - m)
    Z = e.sum(-1, keepdim=True)
    return (G.dropout(e, keep, p) @ v) / Z


def heads(x, H, D):
    """[B, n, H*D] -> [B, H, n, D]."""
    B, n, _ = x.shape
    return x.view(B, n, H, D).transpose(1, 2)


def merge_heads(o):
    """[B, H, n, D] -> [B, n, H*D] (head h in columns hD .. hD+D-1)."""
    B, H, n, D = o.shape
    return o.transpose(1, 2).reshape(B, n, H * D)


# ------------------------------------------------------------------ blocks

class Recorder:
    """Collects the reference's values of the dumped stream checkpoints:
    acts[name] = list of (rows, cols, tensor) with rows "src" (stream rows
    < P) or "tgt" (rows >= P) and cols None (every column) or an index
    tensor into the checkpoint's last axis."""

    def __init__(self, enabled):
        self.acts = {} if enabled else None

    def __call__(self, name, rows, t, cols=None):
        if self.acts is not None:
            self.acts.setdefault(name, []).append((rows, cols, t))


def _ln(x, P, pre, eps):
    return G.layernorm(x, P[pre + ".weight"], P[pre + ".bias"], eps)


def self_attention_block(x, P, pre, cfg, attn, keep_attn, keep_out, rec, rows):
    """x + drop(dense(attn(split(qkv(LN1 x))))) on one part's rows.
    attn(q, k, v, keep, p) is the attention pattern."""
    H, D = cfg.H, cfg.D
    a = _ln(x, P, pre + "input_layernorm", cfg.ln_eps)
    rec(pre + "input_layernorm.output", rows, a)
    qkv = F.linear(a, P[pre + "self_attention.query_key_value.weight"],
                   P[pre + "self_attention.query_key_value.bias"])
    rec(pre + "self_attention.query_key_value.output", rows, qkv)
    q, k, v = G.split_qkv(qkv, H, D)
    ctx = merge_heads(attn(q, k, v, keep_attn, cfg.attention_dropout))
    rec(pre + "self_attention.core_attention.output", rows, ctx)
    y = F.linear(ctx, P[pre + "self_attention.dense.weight"], P[pre + "self_attention.dense.bias"])
    rec(pre + "self_attention.dense.output", rows, y)
    return x + G.dropout(y, keep_out, cfg.hidden_dropout)


def mlp_block(x, P, pre, cfg, keep_out, rec, rows):
    """x + drop(W2 gelu(W1 LN2(x) + b1) + b2)."""
    m = _ln(x, P, pre + "post_attention_layernorm", cfg.ln_eps)
    rec(pre + "post_attention_layernorm.output", rows, m)
    h = F.linear(m, P[pre + "mlp.dense_h_to_4h.weight"], P[pre + "mlp.dense_h_to_4h.bias"])
    rec(pre + "mlp.dense_h_to_4h.output", rows, h)
    y = F.linear(G.gelu_tanh(h), P[pre + "mlp.dense_4h_to_h.weight"], P[pre + "mlp.dense_4h_to_h.bias"])
    rec(pre + "mlp.dense_4h_to_h.output", rows, y)
    return x + G.dropout(y, keep_out, cfg.hidden_dropout)


def cross_attention_block(dec, kv_src, P, pre, cfg, keep_attn, keep_out, rec):
    """dec + drop(dense(attn(q from LNx(dec), k and v from kv_src))): the
    q, k and v rows of the one fused cross_attention.query_key_value
    weight (and bias), Megatron's head order. kv_src is the encoder's
    output `enc` (not normalised again)."""
    H, D = cfg.H, cfg.D
    W = P[pre + "cross_attention.query_key_value.weight"]
    b = P[pre + "cross_attention.query_key_value.bias"]
    iq, ik, iv = qkv_rows(H, D)
    xn = _ln(dec, P, pre + "pre_cross_attn_layernorm", cfg.ln_eps)
    rec(pre + "pre_cross_attn_layernorm.output", "tgt", xn)
    q = F.linear(xn, W[iq], b[iq])                                   # [B, Tt, C]
    k = F.linear(kv_src, W[ik], b[ik])                               # [B, P, C]
    v = F.linear(kv_src, W[iv], b[iv])
    name = pre + "cross_attention.query_key_value.output"
    rec(name, "tgt", q, iq)
    rec(name, "src", k, ik)
    rec(name, "src", v, iv)
    ctx = merge_heads(full_attention(heads(q, H, D), heads(k, H, D), heads(v, H, D),
                                     keep_attn, cfg.attention_dropout))
    rec(pre + "cross_attention.core_attention.output", "tgt", ctx)
    y = F.linear(ctx, P[pre + "cross_attention.dense.weight"], P[pre + "cross_attention.dense.bias"])
    rec(pre + "cross_attention.dense.output", "tgt", y)
    return dec + G.dropout(y, keep_out, cfg.hidden_dropout)


# ------------------------------------------------------------------ model

# Deliberately wrong variants, for the test's negative controls only.
WRONG = ("encoder_causal",      # the encoder's self-attention causal
         "cross_kv_lnx",        # cross-attention k/v from LNx(enc)
         "cross_kv_pre_final",  # cross-attention k/v from the encoder before its final LN
         "loss_all_rows")       # the loss averaged over the source rows' labels too


def slice_masks(masks, cfg):
    """The stream's dumped masks -> each part's (None where absent)."""
    masks = masks or {}
    P, T, C, H = cfg.P, cfg.T, cfg.C, cfg.H

    def get(site, shape):
        m = masks.get(site)
        return None if m is None else m.reshape((-1,) + shape)

    out = {}
    emb = get("dropout.embedding", (T, C))
    out["emb.src"] = None if emb is None else emb[:, :P]
    out["emb.tgt"] = None if emb is None else emb[:, P:]
    for l in range(cfg.Le):
        pre = f"encoder.layers.{l}."
        a = get(pre + "attention_dropout", (H, T, T))
        out[pre + "attn"] = None if a is None else a[:, :, :P, :P]
        for site in ("attention_output_dropout", "mlp_output_dropout"):
            m = get(pre + site, (T, C))
            out[pre + site] = None if m is None else m[:, :P]
    for l in range(cfg.L):
        pre = f"decoder.layers.{l}."
        a = get(pre + "attention_dropout", (H, T, T))
        out[pre + "attn"] = None if a is None else a[:, :, P:, P:]
        x = get(pre + "cross_attention_dropout", (H, T, T))
        out[pre + "xattn"] = None if x is None else x[:, :, P:, :P]
        for site in ("attention_output_dropout", "mlp_output_dropout", "cross_attention_output_dropout"):
            m = get(pre + site, (T, C))
            out[pre + site] = None if m is None else m[:, P:]
    return out


def t5_forward(params, cfg, input_ids, labels, masks=None, acts=None, probes=None, wrong=None):
    """params: name -> float64 tensor; input_ids, labels [B, T] (the
    stream's: source tokens in columns < P, target inputs in columns >= P);
    masks: the dump's site -> keep mask over the whole stream (missing: no
    dropout there); acts: a Recorder (or None); probes: dict to fill with
    the intermediate tensors whose gradients the test compares (each
    retains its grad), or None; wrong: one of WRONG (negative controls).
    Returns (loss, logits_tgt [B, T-P, V], logits_src [B, P, V]);
    logits_src is the head applied to `enc` (the stream's head runs on
    every row, MODEL.md), outside the loss and the graph."""
    if wrong is not None and wrong not in WRONG:
        raise ValueError(f"unknown wrong variant {wrong!r}")
    rec = acts if acts is not None else Recorder(False)
    M = slice_masks(masks, cfg)
    Pm = params
    Pn, T, eps = cfg.P, cfg.T, cfg.ln_eps
    ph = cfg.hidden_dropout

    def probe(name, t):
        if probes is not None:
            t.retain_grad()
            probes[name] = t
        return t

    ids = input_ids.long().reshape(-1, T)
    src_ids, tgt_ids = ids[:, :Pn], ids[:, Pn:]
    wte = Pm["embedding.word_embeddings.weight"]
    wpe = Pm["embedding.position_embeddings.weight"]

    # embedding: one table, source positions 0..P-1, target positions P..T-1
    enc = G.dropout(F.embedding(src_ids, wte) + wpe[:Pn], M["emb.src"], ph)
    dec = G.dropout(F.embedding(tgt_ids, wte) + wpe[Pn:T], M["emb.tgt"], ph)
    rec("embedding.output", "src", enc)
    rec("embedding.output", "tgt", dec)
    probe("dec.emb", dec)

    # encoder: bidirectional self-attention over the source rows
    enc_attn = G.causal_attention if wrong == "encoder_causal" else full_attention
    for l in range(cfg.Le):
        pre = f"encoder.layers.{l}."
        probe(f"enc.in.{l}", enc)
        enc = self_attention_block(enc, Pm, pre, cfg, enc_attn, M[pre + "attn"],
                                   M[pre + "attention_output_dropout"], rec, "src")
        enc = mlp_block(enc, Pm, pre, cfg, M[pre + "mlp_output_dropout"], rec, "src")
        rec(pre + "output", "src", enc)
    enc_pre_final = probe("enc.pre_final", enc)
    enc = _ln(enc_pre_final, Pm, "encoder.final_layernorm", eps)
    rec("encoder.final_layernorm.output", "src", enc)

    # decoder
    for l in range(cfg.L):
        pre = f"decoder.layers.{l}."
        probe(f"dec.in.{l}", dec)
        # the encoder output as this layer's cross-attention reads it
        # (its own node, so the test can read this layer's share of enc's gradient)
        kv = enc.clone()
        probe(f"enc.kv.{l}", kv)
        if wrong == "cross_kv_lnx":
            kv = _ln(kv, Pm, pre + "pre_cross_attn_layernorm", eps)
        elif wrong == "cross_kv_pre_final":
            kv = enc_pre_final
        dec = self_attention_block(dec, Pm, pre, cfg, G.causal_attention, M[pre + "attn"],
                                   M[pre + "attention_output_dropout"], rec, "tgt")
        dec = cross_attention_block(dec, kv, Pm, pre, cfg, M[pre + "xattn"],
                                    M[pre + "cross_attention_output_dropout"], rec)
        dec = mlp_block(dec, Pm, pre, cfg, M[pre + "mlp_output_dropout"], rec, "tgt")
        rec(pre + "output", "tgt", dec)
    probe("head.in", dec)

    # head (untied) and the loss over the target tokens
    W = Pm["output_layer.weight"]
    xf = _ln(dec, Pm, "final_layernorm", eps)
    rec("final_layernorm.output", "tgt", xf)
    logits = F.linear(xf, W)                                          # [B, T-P, V], no bias
    V = logits.shape[-1]
    lab = labels.long().reshape(-1, T)
    loss = F.cross_entropy(logits.reshape(-1, V), lab[:, Pn:].reshape(-1), reduction="mean")
    with torch.no_grad():
        xf_src = _ln(enc, Pm, "final_layernorm", eps)
        logits_src = F.linear(xf_src, W)
    rec("final_layernorm.output", "src", xf_src)
    if wrong == "loss_all_rows":
        # (a wrong objective: the source rows' labels counted as well)
        ls = F.linear(_ln(enc, Pm, "final_layernorm", eps), W)
        n_t, n_s = logits.shape[0] * logits.shape[1], ls.shape[0] * ls.shape[1]
        loss = (loss * n_t + F.cross_entropy(ls.reshape(-1, V), lab[:, :Pn].reshape(-1),
                                             reduction="sum")) / (n_t + n_s)
    return loss, logits, logits_src


def forward_backward(params, cfg, input_ids, labels, masks=None, want_acts=True, wrong=None):
    """One forward and autograd backward from float64 params. Returns
    dict(loss, logits_tgt, logits_src, acts (Recorder.acts or None),
    grads (name -> tensor), probe_grads (name -> the loss's gradient with
    respect to that intermediate tensor))."""
    leaves = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    rec = Recorder(want_acts)
    probes = {}
    loss, lt, ls = t5_forward(leaves, cfg, input_ids, labels, masks, rec, probes, wrong)
    loss.backward()

    def grad_of(t):
        return t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t).detach()

    acts = None
    if rec.acts is not None:
        acts = {k: [(r, c, t.detach()) for r, c, t in v] for k, v in rec.acts.items()}
    return {"loss": loss.detach(), "logits_tgt": lt.detach(), "logits_src": ls.detach(), "acts": acts,
            "grads": {n: grad_of(p) for n, p in leaves.items()},
            "probe_grads": {n: grad_of(t) for n, t in probes.items()}}


def grad_inputs(cfg, pg):
    """The dump's grad_input.* checkpoints (the loss's gradient with respect
    to the stream entering a unit, [B, T, C]) from the probes' gradients:
    name -> {"src": [B, P, C], "tgt": [B, T-P, C]}. A source row entering
    decoder layer l carries `enc` to layers l .. L-1, so its gradient is the
    sum of those layers' cross-attention gradients; a target row entering
    an encoder unit carries the target embedding to the decoder."""
    out = {}
    for l in range(cfg.Le):
        out[f"encoder.layers.{l}"] = {"src": pg[f"enc.in.{l}"], "tgt": pg["dec.emb"]}
    out["encoder.final_layernorm"] = {"src": pg["enc.pre_final"], "tgt": pg["dec.emb"]}
    acc = torch.zeros_like(pg["enc.kv.0"]) if cfg.L else None
    for l in reversed(range(cfg.L)):
        acc = acc + pg[f"enc.kv.{l}"]
        out[f"decoder.layers.{l}"] = {"src": acc.clone(), "tgt": pg[f"dec.in.{l}"]}
    out["head"] = {"src": torch.zeros_like(pg["enc.pre_final"]), "tgt": pg["head.in"]}
    return out
