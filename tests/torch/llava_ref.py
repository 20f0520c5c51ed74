"""llava_ref.py - the LLaVA-style model of parity's `llava-tiny` (arch
llava), written again in PyTorch float64 the way a LLaVA user would write
it: a ViT encoder over the image patches, a projector into the language
model's width, and a GPT decoder that reads the projected patches as a
prefix of its text.

The C golden model runs it on one stream of T rows a sequence (rows < P
the image patches, rows >= P the text) and zeroes the branch outputs of the
rows a unit does not own. This reference keeps two tensors until the
decoder:

  img [B, P, C]      the patch embedding (x = Wp . picture + bp + wpe[p],
                     then the embedding dropout), Le encoder layers with
                     bidirectional self-attention among the P patches (the
                     T5 encoder layer, t5_ref.py), and the projector
                     x = W2 gelu_tanh(W1 x + b1) + b2 (no residual, no
                     LayerNorm, no dropout);
  txt [B, T-P, C]    the text embedding (wte[token] + wpe[P + t], dropout);

then cat([img, txt]) [B, T, C] through L GPT layers (causal self-attention
over every row, the patches a prefix), the final LayerNorm and the untied
output layer; the loss is the mean cross-entropy over the B*(T-P) text
positions only (the image rows' logits are computed, as the stream's head
computes them, but count nowhere).

The pictures are inputs here ([B, P, patch_dim] float64, one per image
row): parity draws them from its own RNG (llava_picture), which this
reference does not reproduce; the test recovers them from the dump.

The pieces are gpt_ref.py's (LayerNorm, tanh GeLU, inverted dropout from a
given keep mask, Megatron's qkv order, the split-key causal attention,
AdamW, the LR schedule) and t5_ref.py's (the bidirectional split-key
attention, the self-attention and MLP blocks, the Recorder). The forward is
ours, the backward is torch autograd's.

Dropout masks are the C run's, dumped over the whole stream ([B, T, C] or
[B, H, T, T]); the encoder takes its rows [:P] (attention [:P, :P]), the
embedding and the decoder every row.
"""
import torch
import torch.nn.functional as F

import gpt_ref as G
import t5_ref as R5

F64 = torch.float64


class LlavaConfig(G.GPTConfig):
    """The dump's config JSON for "arch": "llava": the GPT fields (L = the
    decoder's layers, T = image + text rows, F = the decoder's and the
    encoder's and the projector's hidden width) plus the encoder's."""

    def __init__(self, d):
        super().__init__(d)
        if d.get("arch") != "llava":
            raise ValueError(f"config arch {d.get('arch')!r}, expected 'llava'")
        enc = d.get("encoder")
        if not isinstance(enc, dict):
            raise ValueError(f"config.encoder: expected an object, got {enc!r}")
        self.Le = int(enc["layers"])
        self.P = int(enc["seq_length"])
        self.patch_dim = int(enc["patch_dim"])
        if not 0 < self.P < self.T:
            raise ValueError(f"config: encoder seq_length {self.P} not in 1..{self.T - 1}")
        if self.patch_dim < 1:
            raise ValueError(f"config: patch_dim {self.patch_dim}")
        if self.moe is not None:
            raise ValueError("config: an MoE LLaVA is not covered by llava_ref.py")
        if self.tied:
            raise ValueError("config: llava_ref.py covers the untied head of llava-tiny")

    @property
    def Tt(self):
        """Text rows per sequence."""
        return self.T - self.P


# ---------------------------------------------------------------- parameters

def param_shapes(cfg):
    """Name -> shape, in the order of the units (patch embedding, encoder
    layers, projector, decoder layers, head)."""
    C, V, T, F_, D = cfg.C, cfg.V, cfg.T, cfg.F, cfg.patch_dim
    layer = R5._gpt_layer_shapes(cfg)
    s = {"embedding.word_embeddings.weight": (V, C),
         "embedding.position_embeddings.weight": (T, C),
         "vision.patch_embedding.weight": (C, D),
         "vision.patch_embedding.bias": (C,)}
    for l in range(cfg.Le):
        for sfx, shape in layer.items():
            s[f"encoder.layers.{l}.{sfx}"] = shape
    s["projector.linear_fc1.weight"] = (F_, C)
    s["projector.linear_fc1.bias"] = (F_,)
    s["projector.linear_fc2.weight"] = (C, F_)
    s["projector.linear_fc2.bias"] = (C,)
    for l in range(cfg.L):
        for sfx, shape in layer.items():
            s[f"layers.{l}.{sfx}"] = shape
    s["final_layernorm.weight"] = (C,)
    s["final_layernorm.bias"] = (C,)
    s["output_layer.weight"] = (V, C)
    return s


def init_std(name, cfg):
    """gpt_ref's rule: sigma for every weight (the patch embedding's and
    the projector's included: neither is a residual branch's output),
    sigma/sqrt(2L) for the layers' residual-branch output projections,
    None for the constants (LayerNorm 1, biases 0)."""
    return G.init_std(name, cfg)


# ------------------------------------------------------------------ model

# Deliberately wrong variants, for the test's negative controls only.
WRONG = ("projector_residual",  # the projector's output added to its input
         "encoder_causal",      # the encoder's self-attention causal among the patches
         "loss_all_rows")       # the loss averaged over the image rows' labels (0) too


def slice_masks(masks, cfg):
    """The stream's dumped masks -> each part's (None where absent)."""
    masks = masks or {}
    P, T, C, H = cfg.P, cfg.T, cfg.C, cfg.H

    def get(site, shape):
        m = masks.get(site)
        return None if m is None else m.reshape((-1,) + shape)

    out = {}
    emb = get("dropout.embedding", (T, C))
    out["emb.img"] = None if emb is None else emb[:, :P]
    out["emb.txt"] = None if emb is None else emb[:, P:]
    for l in range(cfg.Le):
        pre = f"encoder.layers.{l}."
        a = get(pre + "attention_dropout", (H, T, T))
        out[pre + "attn"] = None if a is None else a[:, :, :P, :P]
        for site in ("attention_output_dropout", "mlp_output_dropout"):
            m = get(pre + site, (T, C))
            out[pre + site] = None if m is None else m[:, :P]
    for l in range(cfg.L):
        pre = f"layers.{l}."
        out[pre + "attn"] = get(pre + "attention_dropout", (H, T, T))
        for site in ("attention_output_dropout", "mlp_output_dropout"):
            out[pre + site] = get(pre + site, (T, C))
    return out


def llava_forward(params, cfg, input_ids, labels, pictures, masks=None, acts=None, probes=None,
                  wrong=None):
    """params: name -> float64 tensor; input_ids, labels [B, T] (the
    stream's: the bytes the patches show in columns < P, unused here but
    for their count; the text in columns >= P); pictures [B, P, patch_dim]
    (each image row's picture); masks: the dump's site -> keep mask over
    the whole stream (missing: no dropout there); acts: a t5_ref.Recorder
    (or None) whose rows are "img" (stream rows < P), "txt" (rows >= P) or
    "all"; probes: dict to fill with the intermediate tensors whose
    gradients the test compares (each retains its grad), or None; wrong:
    one of WRONG (negative controls). Returns (loss, logits [B, T, V])."""
    if wrong is not None and wrong not in WRONG:
        raise ValueError(f"unknown wrong variant {wrong!r}")
    rec = acts if acts is not None else R5.Recorder(False)
    M = slice_masks(masks, cfg)
    Pm = params
    Pn, T = cfg.P, cfg.T
    ph = cfg.hidden_dropout

    def probe(name, t):
        if probes is not None:
            t.retain_grad()
            probes[name] = t
        return t

    ids = input_ids.long().reshape(-1, T)
    B = ids.shape[0]
    pix = pictures.to(F64).reshape(B, Pn, cfg.patch_dim)
    wte = Pm["embedding.word_embeddings.weight"]
    wpe = Pm["embedding.position_embeddings.weight"]

    # embedding: the patches' linear embedding and the text's lookup, one position table
    img = F.linear(pix, Pm["vision.patch_embedding.weight"], Pm["vision.patch_embedding.bias"]) + wpe[:Pn]
    img = G.dropout(img, M["emb.img"], ph)
    txt = G.dropout(F.embedding(ids[:, Pn:], wte) + wpe[Pn:T], M["emb.txt"], ph)
    rec("embedding.output", "img", img)
    rec("embedding.output", "txt", txt)
    probe("txt.emb", txt)

    # the vision encoder: bidirectional self-attention among the patches
    enc_attn = G.causal_attention if wrong == "encoder_causal" else R5.full_attention
    for l in range(cfg.Le):
        pre = f"encoder.layers.{l}."
        probe(f"enc.in.{l}", img)
        img = R5.self_attention_block(img, Pm, pre, cfg, enc_attn, M[pre + "attn"],
                                      M[pre + "attention_output_dropout"], rec, "img")
        img = R5.mlp_block(img, Pm, pre, cfg, M[pre + "mlp_output_dropout"], rec, "img")
        rec(pre + "output", "img", img)

    # the projector: a 2-layer MLP that replaces the patches' hidden states
    probe("proj.in", img)
    h = F.linear(img, Pm["projector.linear_fc1.weight"], Pm["projector.linear_fc1.bias"])
    rec("projector.linear_fc1.output", "img", h)
    y = F.linear(G.gelu_tanh(h), Pm["projector.linear_fc2.weight"], Pm["projector.linear_fc2.bias"])
    img = img + y if wrong == "projector_residual" else y
    rec("projector.output", "img", img)

    # the language model: the GPT's layers over [patches, text], causal
    x = torch.cat([img, txt], dim=1)                                  # [B, T, C]
    for l in range(cfg.L):
        pre = f"layers.{l}."
        probe(f"dec.in.{l}", x)
        x = R5.self_attention_block(x, Pm, pre, cfg, G.causal_attention, M[pre + "attn"],
                                    M[pre + "attention_output_dropout"], rec, "all")
        x = R5.mlp_block(x, Pm, pre, cfg, M[pre + "mlp_output_dropout"], rec, "all")
        rec(pre + "output", "all", x)
    probe("head.in", x)

    # head (untied) and the loss over the text tokens
    xf = R5._ln(x, Pm, "final_layernorm", cfg.ln_eps)
    rec("final_layernorm.output", "all", xf)
    logits = F.linear(xf, Pm["output_layer.weight"])                  # [B, T, V], no bias
    V = logits.shape[-1]
    lab = labels.long().reshape(-1, T)
    if wrong == "loss_all_rows":
        # (a wrong objective: the image rows' labels counted as well)
        loss = F.cross_entropy(logits.reshape(-1, V), lab.reshape(-1), reduction="mean")
    else:
        loss = F.cross_entropy(logits[:, Pn:].reshape(-1, V), lab[:, Pn:].reshape(-1), reduction="mean")
    return loss, logits


def forward_backward(params, cfg, input_ids, labels, pictures, masks=None, want_acts=True, wrong=None):
    """One forward and autograd backward from float64 params. Returns
    dict(loss, logits, acts (Recorder.acts or None), grads (name -> tensor),
    probe_grads (name -> the loss's gradient with respect to that
    intermediate tensor))."""
    leaves = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
    rec = R5.Recorder(want_acts)
    probes = {}
    loss, logits = llava_forward(leaves, cfg, input_ids, labels, pictures, masks, rec, probes, wrong)
    loss.backward()

    def grad_of(t):
        return t.grad.detach().clone() if t.grad is not None else torch.zeros_like(t).detach()

    acts = None
    if rec.acts is not None:
        acts = {k: [(r, c, t.detach()) for r, c, t in v] for k, v in rec.acts.items()}
    return {"loss": loss.detach(), "logits": logits.detach(), "acts": acts,
            "grads": {n: grad_of(p) for n, p in leaves.items()},
            "probe_grads": {n: grad_of(t) for n, t in probes.items()}}


def grad_inputs(cfg, pg):
    """The dump's grad_input.* checkpoints (the loss's gradient with respect
    to the stream entering a unit, [B, T, C]) from the probes' gradients:
    name -> {rows: tensor} with rows "img" [B, P, C], "txt" [B, T-P, C] or
    "all" [B, T, C]. A text row entering an encoder layer or the projector
    carries the text embedding to the decoder unchanged, so its gradient is
    the text embedding's."""
    out = {}
    for l in range(cfg.Le):
        out[f"encoder.layers.{l}"] = {"img": pg[f"enc.in.{l}"], "txt": pg["txt.emb"]}
    out["projector"] = {"img": pg["proj.in"], "txt": pg["txt.emb"]}
    for l in range(cfg.L):
        out[f"layers.{l}"] = {"all": pg[f"dec.in.{l}"]}
    out["head"] = {"all": pg["head.in"]}
    return out


# ------------------------------------------------------------- the pictures

def recover_pictures(cfg, observations):
    """The pictures of the bytes the image rows show, from the dumped
    embedding outputs. The patch embedding is affine and injective
    (C > patch_dim): on an image row p of byte b whose dropout mask kept
    the elements J,
        emb[p, J] (1-p_h) - bp[J] - wpe[p, J] = Wp[J, :] . picture(b),
    and a picture depends on the byte alone (llava_picture), so every
    occurrence of b (any sequence, row or step, each with that step's
    parameters) adds equations for the same unknown. observations: a list
    of (ids_img [B, P], emb_img [B, P, C], keep_img [B, P, C] or None,
    Wp [C, patch_dim], bp [C], wpe_img [P, C]), float64. Returns
    (pictures: byte -> [patch_dim] float64, info: byte -> (equations,
    rank, relative residual ||A x - y|| / ||y||))."""
    scale = 1.0 - cfg.hidden_dropout
    rows = {}
    for ids, emb, keep, W, b, wpe in observations:
        ids = ids.long()
        Bn, Pn = ids.shape
        for s in range(Bn):
            for p in range(Pn):
                k = (keep[s, p] != 0) if keep is not None else torch.ones(W.shape[0], dtype=torch.bool)
                v = emb[s, p] * scale if keep is not None else emb[s, p]
                y = (v - b - wpe[p])[k]
                rows.setdefault(int(ids[s, p]), []).append((W[k], y))
    pics, info = {}, {}
    for byte, eqs in sorted(rows.items()):
        A = torch.cat([a for a, _ in eqs])
        y = torch.cat([t for _, t in eqs])
        rank = int(torch.linalg.matrix_rank(A))
        x = torch.linalg.lstsq(A, y.unsqueeze(1), driver="gelsd").solution.squeeze(1)
        res = float((A @ x - y).norm()) / max(float(y.norm()), 1e-300)
        pics[byte] = x
        info[byte] = (A.shape[0], rank, res)
    return pics, info
