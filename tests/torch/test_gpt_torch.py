#!/usr/bin/env python3
"""test_gpt_torch.py - the golden GPT (parity train, fp32, bf16, fp16) against an
independent float64 PyTorch reference written from ref/model/MODEL.md.

For each run variant (dropout on/off, tied/untied, clipping on/off, both
tile backends, a short LR schedule) it runs
`$PARITY train --model gpt-tiny --steps 3 --dump ...`, loads the dump, and
replays the 3 steps in float64 from the dumped initial parameters, inputs
and dropout masks: our forward (gpt_ref.py), torch autograd's backward,
our clipping/AdamW/LR. It compares loss, lr, grad norm, logits, every
dumped activation, every gradient and every updated parameter, three ways:

  per-step   each step starts from the C run's previous parameters
             ("re-seeded"): isolates one step's mathematics;
  trajectory the reference runs its own 3-step trajectory from init;
  optimizer  the reference AdamW applied to the C gradients and C
             parameters: isolates the optimizer formula (tight).

It also checks what can be checked without parity's RNG: tokens are the
corpus bytes at MODEL.md's offsets, masks keep ~1-p, the init has the
spec's constants and standard deviations. Negative controls show that the
comparison can fail: a gradient or activation element perturbed by a
relative 1e-3, weight decay on a LayerNorm gain, and references with a
wrong qkv row order, erf GeLU, or LayerNorm's eps outside the root must
all be flagged. Self-tests of the reference (finite differences, the
split-key attention formula, the tied gradient, AdamW against torch's)
run first and need no C program.

Mixture-of-experts runs (MOE_VARIANTS; moe_ref.py) are replayed the same
way with the C run's routing (top-k choice, capacity kept flags) taken
from the dump; the reference's own routing decisions are checked against
the dump wherever their margin is clear of rounding, and wrong MoE
references (load-balancing loss per microbatch, no aux or z-loss
gradient, top-k weights from the full softmax, no drops) must be flagged.

Mixed-precision runs (LOWP_VARIANTS: --bf16 with dropout, --fp16 with a
static --loss-scale 1024) are replayed by gpt_ref's Precision, which
rounds to S at MODEL.md's points: forward values by explicit rounding,
gradients by autograd Functions whose backward rounds what flows back
(fp16: the loss scale multiplies the loss's gradient once and divides the
weight gradients). Each step is compared per unit, teacher-forced from
the C run's dumped activations and residual-stream gradients, in ulps of
S: at most 1/500 of the activations (1/20 of the grad_inputs) may differ
at all, none by more than 2 (16) ulps, norm-wise <= u_S/4; weight
gradients, fp32 sums, <= 4 ulps, beyond 1/4 ulp for at most 15% of a
tensor, <= u_S/4 norm-wise (LOWP_TOL says why: fp32-vs-float64 flips of
single roundings). A free-running replay of step 0 must stay within the
flips' measured cascade (coarse), the updated fp32 master weights follow
AdamW on the reference's gradients (adam_slack), and AdamW on the C
gradients reproduces them. Negative controls: references that forget GeLU's
output rounding or the residual-gradient rounding (bf16), the logits'
gradient rounding (fp16), round the weight gradients to S, or take
dropout's scale as the exact 1/(1-p) must be flagged.

Run from the repository root:  PARITY=build/parity python3 tests/torch/test_gpt_torch.py
Prints "RESULT test_gpt_torch.py: N passed, M failed"; exits 1 on failure.
Without a working $PARITY the test fails (it never skips).
"""
import copy
import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import dumpio  # noqa: E402
import gpt_ref as G  # noqa: E402
import moe_ref as M  # noqa: E402
import torch_harness as TH  # noqa: E402
# the tolerances and the comparison (torch_harness.py, shared with the T5 and LLaVA tests)
from torch_harness import (TOL, compare, compare_lowp, Checker, print_table,  # noqa: E402
                           find_steps, fd_worst, adam_slack)

# One thread: the tensors are small, and on a loaded 2-core machine a second
# intra-op thread made each op ~50x slower (contention), measured.
torch.set_num_threads(1)
F64 = torch.float64

# ------------------------------------------------------------- self-tests
# Internal consistency of the reference itself; none needs the C program.

def tiny_cfg(tied=True, hidden_drop=0.0, attn_drop=0.0, L=2):
    return G.GPTConfig({
        "vocab": 11, "seq_length": 6, "hidden": 8, "heads": 2, "layers": L, "ffn": 12,
        "tied": tied, "dropouts": {"hidden": hidden_drop, "attention": attn_drop},
        "global_batch": 2, "lr": 1e-3, "min_lr": 1e-4, "warmup": 2, "decay_steps": 10,
        "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1, "clip_grad": 1.0,
        "ln_eps": 1e-5})


def random_params(cfg, gen, dtype=F64):
    P = {}
    for n, s in G.param_shapes(cfg).items():
        std = G.init_std(n, cfg)
        if std is None:
            # perturb the constants so that LN gamma/beta and biases matter
            P[n] = (G.init_const(n) + 0.1 * torch.randn(s, generator=gen, dtype=F64)).to(dtype)
        else:
            P[n] = (std * 10 * torch.randn(s, generator=gen, dtype=F64)).to(dtype)
    return P


def random_masks(cfg, B, gen):
    T, C, H = cfg.T, cfg.C, cfg.H
    masks = {}
    if cfg.hidden_dropout > 0:
        masks["dropout.embedding"] = (torch.rand(B, T, C, generator=gen) >= cfg.hidden_dropout).to(torch.uint8)
    for l in range(cfg.L):
        if cfg.attention_dropout > 0:
            masks[f"layers.{l}.attention_dropout"] = (
                torch.rand(B, H, T, T, generator=gen) >= cfg.attention_dropout).to(torch.uint8)
        if cfg.hidden_dropout > 0:
            for site in ("attention_output_dropout", "mlp_output_dropout"):
                masks[f"layers.{l}.{site}"] = (torch.rand(B, T, C, generator=gen) >= cfg.hidden_dropout).to(torch.uint8)
    return masks


def selftest_attention(R):
    """MODEL.md's split-key formula (exp(s - max), U = sum e*V, o = U / Z)
    equals textbook softmax attention, and with dropout equals dropout
    applied to the softmax probabilities."""
    gen = torch.Generator().manual_seed(1)
    B, H, T, D = 2, 3, 7, 4
    q, k, v = (torch.randn(B, H, T, D, generator=gen, dtype=F64) for _ in range(3))
    s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    probs = torch.softmax(s, -1)
    want = probs @ v
    got = G.causal_attention(q, k, v, None, 0.0)
    e1 = float((got - want).abs().max())
    keep = (torch.rand(B, H, T, T, generator=gen) >= 0.3).to(torch.uint8)
    want_d = (probs * keep.to(F64) / 0.7) @ v
    got_d = G.causal_attention(q, k, v, keep, 0.3)
    e2 = float((got_d - want_d).abs().max())
    # the max subtraction is a constant: shifting every score of a row by c
    # must not change anything (the reason dm is 0 in MODEL.md's backward)
    R.test("self: split-key attention == softmax attention (no dropout, dropout on probs)",
           e1 < 1e-13 and e2 < 1e-13, f"max diff {e1:.2e}, {e2:.2e}")


def selftest_qkv_order(R):
    """Row h*3D + w*D + d of query_key_value feeds head h's q (w=0), k (1), v (2)."""
    H, D, T = 3, 2, 1
    C = H * D
    qkv = torch.arange(3 * C, dtype=F64).view(1, T, 3 * C)
    q, k, v = G.split_qkv(qkv, H, D)
    ok = True
    for h in range(H):
        for w, t in enumerate((q, k, v)):
            for d in range(D):
                ok &= float(t[0, h, 0, d]) == h * 3 * D + w * D + d
    R.test("self: qkv rows in Megatron's (head, {q,k,v}, d) order", ok)


def selftest_finite_differences(R):
    """Autograd's gradient of our float64 forward against central finite
    differences, for a few elements of every parameter, tied and untied,
    with dropout masks in place."""
    worst = 0.0
    where = ""
    for tied in (True, False):
        cfg = tiny_cfg(tied=tied, hidden_drop=0.2, attn_drop=0.25)
        gen = torch.Generator().manual_seed(7 + tied)
        P = random_params(cfg, gen)
        B = cfg.B
        ids = torch.randint(0, cfg.V, (B, cfg.T), generator=gen)
        lab = torch.randint(0, cfg.V, (B, cfg.T), generator=gen)
        masks = random_masks(cfg, B, gen)
        fb = G.forward_backward(P, cfg, ids, lab, masks, want_acts=False)

        def loss_at(P2):
            with torch.no_grad():
                return float(G.gpt_forward(P2, cfg, ids, lab, masks)[0])
        w, at = fd_worst(P, fb["grads"], loss_at, gen, lambda n: True)
        if w > worst:
            worst, where = w, f"{at} tied={tied}"
    R.test("self: autograd gradient == central finite differences (float64)", worst <= 1.0,
           f"worst error {worst:.2e} x (1e-4 |g| + 1e-8) at {where}")


def selftest_tied_gradient(R):
    """The tied word-embedding gradient is the sum of the embedding-lookup
    gradient and the LM-head gradient: an untied model whose output layer
    equals the embedding must have grads that add up to the tied grad."""
    cfg_t = tiny_cfg(tied=True)
    cfg_u = tiny_cfg(tied=False)
    gen = torch.Generator().manual_seed(3)
    P = random_params(cfg_t, gen)
    ids = torch.randint(0, cfg_t.V, (cfg_t.B, cfg_t.T), generator=gen)
    lab = torch.randint(0, cfg_t.V, (cfg_t.B, cfg_t.T), generator=gen)
    Pu = dict(P)
    Pu["output_layer.weight"] = P["embedding.word_embeddings.weight"].clone()
    gt = G.forward_backward(P, cfg_t, ids, lab, None, False)
    gu = G.forward_backward(Pu, cfg_u, ids, lab, None, False)
    w = "embedding.word_embeddings.weight"
    s = gu["grads"][w] + gu["grads"]["output_layer.weight"]
    err = float((s - gt["grads"][w]).abs().max())
    lerr = abs(float(gt["loss"]) - float(gu["loss"]))
    R.test("self: tied embedding grad == lookup grad + LM-head grad", err < 1e-14 and lerr < 1e-14,
           f"max diff {err:.2e}, loss diff {lerr:.2e}")


def selftest_adamw(R):
    """Our hand-written AdamW (MODEL.md's formula) against torch.optim.AdamW,
    which is the same mathematics written differently (decoupled decay as
    p*(1-lr*wd), eps added to sqrt(v)/sqrt(bc2)); plus clipping."""
    cfg = tiny_cfg()
    gen = torch.Generator().manual_seed(5)
    shapes = G.param_shapes(cfg)
    P = random_params(cfg, gen)
    opt = G.AdamW(cfg, shapes)
    tp = {n: p.clone().requires_grad_(True) for n, p in P.items()}
    dec = [tp[n] for n in shapes if G.weight_decayed(n, shapes[n])]
    nodec = [tp[n] for n in shapes if not G.weight_decayed(n, shapes[n])]
    topt = torch.optim.AdamW([{"params": dec, "weight_decay": cfg.weight_decay},
                              {"params": nodec, "weight_decay": 0.0}],
                             lr=1.0, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)
    worst = 0.0
    clipped_seen = unclipped_seen = False
    for s in range(4):
        # step 1 has a big gradient (clipped), the others small ones
        scale = 5.0 if s == 1 else 0.01
        grads = {n: scale * torch.randn(sh, generator=gen, dtype=F64) for n, sh in shapes.items()}
        lr = G.lr_at(cfg, s)
        P, norm, factor, _ = opt.step(P, grads, lr)
        want_norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
        if factor is not None:
            clipped_seen = True
            gscale = cfg.clip_grad / (want_norm + 1e-6)
        else:
            unclipped_seen = True
            gscale = 1.0
        for g in topt.param_groups:
            g["lr"] = lr
        for n in shapes:
            tp[n].grad = grads[n] * gscale
        topt.step()
        for n in shapes:
            d = float((P[n] - tp[n].detach()).abs().max())
            worst = max(worst, d)
    R.test("self: hand AdamW + clipping == torch.optim.AdamW on the same math", worst < 1e-13
           and clipped_seen and unclipped_seen, f"max diff {worst:.2e}, clipped {clipped_seen}")


def selftest_lr(R):
    cfg = tiny_cfg()  # lr 1e-3, min 1e-4, warmup 2, decay_steps 10
    got = [G.lr_at(cfg, s) for s in range(12)]
    ok = abs(got[0] - 0.5e-3) < 1e-18 and abs(got[1] - 1e-3) < 1e-18
    ok &= abs(got[2] - 1e-3) < 1e-18                       # cosine starts at lr_max
    ok &= abs(got[6] - 0.55e-3) < 1e-15                   # half way: the mean
    ok &= abs(got[10] - 1e-4) < 1e-18 and abs(got[11] - 1e-4) < 1e-18
    ok &= all(a >= b for a, b in zip(got[2:], got[3:]))
    R.test("self: LR warm-up then cosine to min_lr", ok, f"{got}")


def selftest_dumpio(R, tmp):
    path = os.path.join(tmp, "rt.safetensors")
    gen = torch.Generator().manual_seed(9)
    ts = {"a": torch.randn(3, 4, generator=gen), "b": torch.arange(5, dtype=torch.int32),
          "c": torch.tensor([0, 1, 1], dtype=torch.uint8), "d": torch.randn(2, generator=gen, dtype=F64),
          "e": torch.zeros(0, dtype=torch.float32)}
    dumpio.save(path, ts, {"format": "x"})
    back, meta = dumpio.load(path)
    ok = meta == {"format": "x"} and set(back) == set(ts)
    ok &= all(back[k].dtype == ts[k].dtype and torch.equal(back[k], ts[k]) for k in ts)
    # a truncated file must be refused with the tensor's name
    with open(path, "rb") as f:
        blob = f.read()
    with open(path, "wb") as f:
        f.write(blob[:-3])
    try:
        dumpio.load(path)
        refused = False
    except dumpio.DumpError as e:
        refused = "'" in str(e)
    R.test("self: safetensors reader round trip; truncated file refused", ok and refused)


def selftest_lowp_rounding(R):
    """Mixed precision's rounding (gpt_ref): torch's float32 -> bfloat16
    conversion against the bit formula of MODEL.md (random fp32 patterns,
    exact ties both ways, overflow); fp16 at its edges (ties, subnormals
    down to 2^-24, 65520 -> inf); and the autograd rounding points: a
    stored value's gradient comes back rounded, a forgotten point is the
    identity both ways."""
    bad = []
    gen = torch.Generator().manual_seed(13)
    bits = torch.randint(0, 2 ** 31, (1 << 16,), generator=gen, dtype=torch.int64)
    bits = bits | (torch.randint(0, 2, bits.shape, generator=gen) << 31)
    low = torch.tensor([0x8000, 0x7FFF, 0x8001, 0x0000, 0xFFFF], dtype=torch.int64)
    bits[:5 * 256] = (bits[:5 * 256] & ~0xFFFF) | low.repeat_interleave(256)       # ties and neighbours
    bits = bits[((bits & 0x7F800000) != 0x7F800000)]                               # finite
    x32 = torch.where(bits >= 2 ** 31, bits - 2 ** 32, bits).to(torch.int32).view(torch.float32)
    x = x32.to(F64)
    if not torch.equal(G.round_bf16(x), G.round_bf16_bits(x)):
        n = int((G.round_bf16(x) != G.round_bf16_bits(x)).sum())
        bad.append(f"torch's bf16 conversion differs from the bit formula at {n} values")
    edge = torch.tensor([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 3.4028234663852886e38, -(1 + 2.0 ** -8)], dtype=F64)
    want = torch.tensor([1.0, 1 + 2.0 ** -6, math.inf, -1.0], dtype=F64)
    if not torch.equal(G.round_bf16_bits(edge), want):
        bad.append(f"bf16 ties/overflow: {G.round_bf16_bits(edge).tolist()}, expected {want.tolist()}")
    cases = [(65504.0, 65504.0), (65519.99, 65504.0), (65520.0, math.inf), (-65520.0, -math.inf),
             (2.0 ** -25, 0.0), (3 * 2.0 ** -25, 2.0 ** -23), (2.0 ** -25 * (1 + 2.0 ** -20), 2.0 ** -24),
             (1 + 2.0 ** -11, 1.0), (1 + 3 * 2.0 ** -11, 1 + 2.0 ** -9), (2.0 ** -14 * 1.5, 2.0 ** -14 * 1.5)]
    got = G.round_fp16(torch.tensor([c for c, _ in cases], dtype=F64)).tolist()
    for (c, w), g in zip(cases, got):
        if g != w:
            bad.append(f"fp16({c!r}) = {g!r}, expected {w!r}")
    if float(G.round_f32(torch.tensor(1 + 2.0 ** -24, dtype=F64))) != 1.0:
        bad.append("round_f32 tie not to even")
    prec = G.Precision("bf16")
    xs = torch.tensor([1.0, 2.0, 3.0], dtype=F64, requires_grad=True)
    c = torch.tensor([1 + 2.0 ** -9, 1 + 3 * 2.0 ** -9, 1.00390625 + 2.0 ** -12], dtype=F64)
    (prec.act("gelu", xs * (1 + 2.0 ** -10)) * c).sum().backward()
    if not torch.equal(xs.grad, G.round_bf16(c) * (1 + 2.0 ** -10)):
        bad.append(f"act's backward did not round: {xs.grad.tolist()}")
    xs.grad = None
    (G.Precision("bf16", forget={"gelu"}).act("gelu", xs * (1 + 2.0 ** -10)) * c).sum().backward()
    if not torch.equal(xs.grad, c * (1 + 2.0 ** -10)):
        bad.append("a forgotten rounding point still rounds")
    R.test("self: mixed precision rounding (bf16 == bit formula, fp16 edges, autograd rounding points)", not bad,
           "; ".join(bad[:4]))


# ------------------------------------------------------ the golden run

def as_f64(t):
    return t.to(F64)


def check_dump_metadata(R, variant, T, meta):
    fmt = meta.get("format")
    if fmt != "parity-dump-1":
        R.test(f"{variant}: dump format", False, f"format {fmt!r}, expected 'parity-dump-1'")
        return None
    try:
        cfg = G.GPTConfig(json.loads(meta["config"]))
    except (KeyError, ValueError, TypeError) as e:
        R.test(f"{variant}: dump config", False, f"cannot read config: {e!r}")
        return None
    return cfg


def check_inputs(R, variant, cfg, T, steps, repo):
    """The dumped data, masks and initial parameters match MODEL.md's
    definitions where that can be checked without parity's RNG: tokens
    are the corpus bytes at the spec's offsets; masks have the site's shape
    and keep about 1-p; the init has the spec's constants and std."""
    bad = []
    corpus = TH.read_corpus(repo, bad)
    B, Tn = cfg.B, cfg.T
    for s in steps:
        tokens = TH.dumped_tokens(T, s, B, Tn, bad)
        if tokens is None:
            continue
        ids, lab = tokens
        if corpus is not None:
            N = len(corpus)
            for b in range(B):
                g = s * B + b
                off = (g * Tn) % (N - Tn - 1)
                want_x = torch.tensor(list(corpus[off:off + Tn]))
                want_y = torch.tensor(list(corpus[off + 1:off + Tn + 1]))
                if not torch.equal(ids[b], want_x) or not torch.equal(lab[b], want_y):
                    bad.append(f"step {s} sample {b}: tokens are not corpus bytes at offset {off}")
                    break
        sites = {"dropout.embedding": ((B, Tn, cfg.C), cfg.hidden_dropout)}
        for l in range(cfg.L):
            sites[f"layers.{l}.attention_dropout"] = ((B, cfg.H, Tn, Tn), cfg.attention_dropout)
            sites[f"layers.{l}.attention_output_dropout"] = ((B, Tn, cfg.C), cfg.hidden_dropout)
            sites[f"layers.{l}.mlp_output_dropout"] = ((B, Tn, cfg.C), cfg.hidden_dropout)
        for site, (shape, p) in sites.items():
            m = T.get(f"step{s}.mask.{site}")
            if m is None:
                if p > 0:
                    bad.append(f"step {s}: mask.{site} missing with dropout p={p}")
                continue
            if m.numel() != math.prod(shape):
                bad.append(f"step {s}: mask.{site} has {m.numel()} elements, expected shape {shape}")
                continue
            m = m.reshape(shape)
            if "attention_dropout" in site:
                # only the causal part is drawn from / used
                sel = ~torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1)
                vals = m[..., sel].double()
            else:
                vals = m.double().reshape(-1)
            if not bool(((vals == 0) | (vals == 1)).all()):
                bad.append(f"step {s}: mask.{site} has values other than 0/1")
            kept = float(vals.mean())
            n = vals.numel()
            sd = math.sqrt(max(p * (1 - p), 1e-12) / n)
            if abs(kept - (1 - p)) > 6 * sd + 1e-12:
                bad.append(f"step {s}: mask.{site} keeps {kept:.4f}, expected {1 - p:.4f} +- {6 * sd:.4f}")
    for n, shape in G.param_shapes(cfg).items():
        t = T.get("init." + n)
        if t is None:
            bad.append(f"init.{n} missing")
            continue
        if tuple(t.shape) != tuple(shape):
            bad.append(f"init.{n}: shape {tuple(t.shape)}, expected {shape}")
            continue
        std = G.init_std(n, cfg)
        if std is None:
            c = G.init_const(n)
            if not bool((t == c).all()):
                bad.append(f"init.{n}: expected all {c}")
        else:
            x = t.double().reshape(-1)
            k = x.numel()
            got_std = float(x.std())
            # sample std of k normals: relative sd ~ 1/sqrt(2k)
            if abs(got_std / std - 1) > 6 / math.sqrt(2 * k) or abs(float(x.mean())) > 6 * std / math.sqrt(k):
                bad.append(f"init.{n}: mean {float(x.mean()):.3g} std {got_std:.5g}, expected N(0, {std:.5g})")
    R.test(f"{variant}: data, masks and init follow MODEL.md", not bad, "; ".join(bad[:5]))


def step_masks(T, s):
    """Step s's dropout masks and, for MoE layers, the routing to replay:
    mask "layers.L.mlp.router.kept" and act "layers.L.mlp.router.choice"."""
    pre = f"step{s}.mask."
    out = {k[len(pre):]: v for k, v in T.items() if k.startswith(pre)}
    pre = f"step{s}.act."
    out.update({k[len(pre):]: v for k, v in T.items()
                if k.startswith(pre) and k.endswith(".mlp.router.choice")})
    return out


def reshape_masks(cfg, masks, B):
    out = {}
    for site, m in masks.items():
        if "attention_dropout" in site:
            out[site] = m.reshape(B, cfg.H, cfg.T, cfg.T)
        elif ".mlp.router." in site:
            out[site] = m.reshape(B, cfg.T, cfg.moe.k)
        else:
            out[site] = m.reshape(B, cfg.T, cfg.C)
    return out


def act_names(cfg):
    names = ["embedding.output"]
    for l in range(cfg.L):
        p = f"layers.{l}."
        names += [p + "input_layernorm.output", p + "self_attention.query_key_value.output",
                  p + "self_attention.core_attention.output", p + "self_attention.dense.output",
                  p + "post_attention_layernorm.output"]
        if cfg.is_moe_layer(l):
            # the float checkpoints; choice and kept are replayed (check_moe_routing)
            names += [p + "mlp.router.logits", p + "mlp.router.weight", p + "mlp.experts.output",
                      p + "output"]
            continue
        names += [p + "mlp.dense_h_to_4h.output", p + "mlp.dense_4h_to_h.output", p + "output"]
    names.append("final_layernorm.output")
    return names


def compare_forward_backward(chk, T, s, ref, cfg, cats, grad_norm=None):
    """Loss, logits, activations, grads and grad norm of step s."""
    cat_scalar, cat_fwd, _ = cats
    if f"step{s}.loss" in T:
        chk(s, "loss", T[f"step{s}.loss"], ref["loss"], cat_scalar)
    else:
        chk.missing(s, "loss")
    if f"step{s}.logits" in T:
        chk(s, "logits", T[f"step{s}.logits"], ref["logits"], cat_fwd if cat_fwd != "act" else "logits")
    else:
        chk.missing(s, "logits")
    for a in act_names(cfg):
        k = f"step{s}.act.{a}"
        if k in T:
            chk(s, "act." + a, T[k], ref["acts"][a], cat_fwd)
        else:
            chk.missing(s, "act." + a)
    TH.compare_grads(chk, T, s, ref, cats, grad_norm, G.param_shapes(cfg))


def load_checked(R, variant, path):
    """The dump, its metadata and its config, each failure a test result:
    (T, meta, cfg), cfg None when the dump is unusable."""
    try:
        T, meta = dumpio.load(path)
    except (OSError, dumpio.DumpError) as e:
        R.test(f"{variant}: load dump", False, str(e))
        return None, None, None
    return T, meta, check_dump_metadata(R, variant, T, meta)


def check_run(R, variant, path, repo, backend=None):
    """All comparisons of one dump. Returns the per-step reference results
    (for the negative controls) or None when the dump is unusable."""
    T, meta, cfg = load_checked(R, variant, path)
    if cfg is None:
        return None
    if backend is not None and meta.get("backend") != backend:
        R.test(f"{variant}: tile backend", False,
               f"dump metadata backend {meta.get('backend')!r}, expected {backend!r} (PARITY_BACKEND)")
    steps = find_steps(T)
    if steps != list(range(len(steps))) or not steps:
        R.test(f"{variant}: steps in dump", False, f"found steps {steps}, expected 0..n-1")
        return None
    shapes = G.param_shapes(cfg)
    missing = [n for n in shapes if "init." + n not in T]
    if missing:
        R.test(f"{variant}: initial parameters in dump", False, f"missing init.{missing[0]} (+{len(missing) - 1})")
        return None
    print(f"# {variant}: V={cfg.V} T={cfg.T} C={cfg.C} H={cfg.H} L={cfg.L} F={cfg.F} B={cfg.B} "
          f"tied={cfg.tied} dropout hidden={cfg.hidden_dropout} attention={cfg.attention_dropout} "
          f"lr={cfg.lr} wd={cfg.weight_decay} clip={cfg.clip_grad}")
    check_inputs(R, variant, cfg, T, steps, repo)

    def inputs(T, s):
        return (T[f"step{s}.input_ids"].reshape(cfg.B, cfg.T), T[f"step{s}.labels"].reshape(cfg.B, cfg.T),
                reshape_masks(cfg, step_masks(T, s), cfg.B))
    per_step, _ = TH.replay(R, variant, T, cfg, steps, shapes, G.forward_backward, compare_forward_backward,
                            inputs, what="loss/logits/activations/grads/grad_norm")
    return per_step, T, cfg


def negative_controls(R, variant, path, per_step, T, cfg):
    """The comparison must be able to fail."""
    # 1. one gradient element perturbed by a relative 1e-3: flagged?
    name = "layers.0.mlp.dense_h_to_4h.weight"
    TH.perturbed_grad_flagged(R, variant, T, name, per_step[0]["grads"][name])
    # same for an activation element of a quarter of the largest magnitude
    an = "layers.0.self_attention.core_attention.output"
    TH.perturbed_act_flagged(R, variant, T[f"step0.act.{an}"].clone().double().reshape(-1),
                            per_step[0]["acts"][an], lambda j: f"act.{an}[{j}]")
    # 2. AdamW that also decays a LayerNorm gain (a wrong decay list) must
    #    be flagged by the optimizer check: it moves the gain by lr*wd*p.
    shapes = G.param_shapes(cfg)
    if cfg.weight_decay > 0:
        opt = G.AdamW(cfg, shapes)
        init = {n: T["init." + n].double() for n in shapes}
        grads = {n: T[f"step0.grad.{n}"].double() for n in shapes}
        lr = G.lr_at(cfg, 0)
        new, _, _, _ = opt.step(init, grads, lr)
        ln = "final_layernorm.weight"
        wrong = new[ln] - lr * cfg.weight_decay * init[ln]
        c = compare(wrong, new[ln], "optim")
        R.test(f"{variant}: negative control: weight decay on {ln} is flagged by the optimizer check "
               f"(ratio {c['ratio']:.3g})", not c["ok"], f"not flagged: ratio {c['ratio']:.3g}")
    # 3. references with a plausible wrong formula must disagree with the
    #    golden activations of step 0: q|k|v as three [C] blocks (not
    #    Megatron's per-head order), erf GeLU instead of tanh, LayerNorm's
    #    eps outside the root.
    def qkv_blocks(qkv, H, D):
        B_, T_, _ = qkv.shape
        x = qkv.view(B_, T_, 3, H, D).permute(2, 0, 3, 1, 4)
        return x[0], x[1], x[2]

    def gelu_erf(x):
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))

    def ln_eps_outside(x, w, b, eps):
        mu = x.mean(-1, keepdim=True)
        d = x - mu
        return d / (torch.sqrt((d * d).mean(-1, keepdim=True)) + eps) * w + b

    for what, attr, fn in (("q|k|v block rows", "split_qkv", qkv_blocks),
                           ("erf GeLU", "gelu_tanh", gelu_erf),
                           ("LayerNorm eps outside the root", "layernorm", ln_eps_outside)):
        worst, worst_name = wrong_model_ratio(T, cfg, attr, fn)
        R.test(f"{variant}: negative control: reference with {what} is flagged "
               f"(worst ratio {worst:.3g} at {worst_name})", worst > 1.0,
               f"not flagged: worst ratio {worst:.3g}")


def wrong_model_ratio(T, cfg, attr, fn):
    """Step 0's forward with gpt_ref.<attr> replaced by fn; returns the
    worst error/tolerance ratio over the dumped activations and logits."""
    orig = getattr(G, attr)
    setattr(G, attr, fn)
    try:
        params = {n: T["init." + n].double() for n in G.param_shapes(cfg)}
        masks = reshape_masks(cfg, step_masks(T, 0), cfg.B)
        acts = {}
        with torch.no_grad():
            _, logits = G.gpt_forward(params, cfg, T["step0.input_ids"].reshape(cfg.B, cfg.T),
                                      T["step0.labels"].reshape(cfg.B, cfg.T), masks, acts)
    finally:
        setattr(G, attr, orig)
    worst, worst_name = compare(T["step0.logits"], logits, "logits")["ratio"], "logits"
    for a in act_names(cfg):
        r = compare(T[f"step0.act.{a}"], acts[a], "act")["ratio"]
        if r > worst:
            worst, worst_name = r, "act." + a
    return worst, worst_name


# ------------------------------------------------ mixed precision (bf16, fp16)
# gpt_ref.Precision rounds at MODEL.md's points; the comparison rule is
# LOWP_TOL's (torch_harness.py).

# (name, flags, S): bf16 with gpt-tiny's dropout (the dropout scale's
# rounding matters there, gpt_ref.Precision.dropout), fp16 with a static
# loss scale (the reference does not re-derive a dynamic scaler's history)
LOWP_VARIANTS = [
    ("bf16", ["--bf16"], "bf16"),
    ("fp16-loss-scale-1024", ["--fp16", "--loss-scale", "1024"], "fp16"),
]


def lowp_force(T, s):
    """Step s's C values for teacher forcing (gpt_ref.gpt_forward's force):
    every dumped activation, the logits and the residual stream's
    gradients (grad_input.*)."""
    act, gin = f"step{s}.act.", f"step{s}.grad_input."
    force = {k[len(act):]: v for k, v in T.items() if k.startswith(act)}
    force.update({k[len(f"step{s}."):]: v for k, v in T.items() if k.startswith(gin)})
    force["logits"] = T[f"step{s}.logits"]
    return force


def grad_input_names(cfg):
    return [f"layers.{l}" for l in range(cfg.L)] + ["head"]


def compare_grad_inputs(chk, T, s, ref, cfg, cat):
    for k in grad_input_names(cfg):
        key = f"step{s}.grad_input.{k}"
        if key not in T:
            chk.missing(s, "grad_input." + k)
        elif k not in ref["grad_inputs"]:
            chk.missing(s, "grad_input." + k + " (in the reference)")
        else:
            chk(s, "grad_input." + k, T[key], ref["grad_inputs"][k], cat)


def check_lowp_run(R, variant, path, repo, dtype):
    """A mixed-precision dump against gpt_ref's Precision, per step from
    the C run's parameters: teacher-forced per unit (the sharp check),
    free-running (the flips' cascade stays small), the update (AdamW on
    the reference's gradients, with adam_slack) and AdamW on the C run's
    own gradients. No 3-step trajectory: the flips' cascade, not the
    mathematics, would decide how far it drifts."""
    T, meta, cfg = load_checked(R, variant, path)
    if cfg is None:
        return None
    if cfg.precision != dtype:
        R.test(f"{variant}: dump precision", False, f"config precision {cfg.precision!r}, expected {dtype!r}")
        return None
    try:
        prec = G.precision_of(cfg)
    except ValueError as e:
        R.test(f"{variant}: precision replayable", False, str(e))
        return None
    steps = find_steps(T)
    shapes = G.param_shapes(cfg)
    if steps != list(range(len(steps))) or not steps or any("init." + n not in T for n in shapes):
        R.test(f"{variant}: steps and initial parameters in dump", False, f"steps {steps}")
        return None
    print(f"# {variant}: {cfg.precision} (loss scale {prec.loss_scale:g}), L={cfg.L} B={cfg.B} "
          f"dropout hidden={cfg.hidden_dropout} attention={cfg.attention_dropout}")
    check_inputs(R, variant, cfg, T, steps, repo)
    if cfg.precision == "fp16":
        # a skipped step is not replayed: with a static scale of 1024 none
        # overflows; say so if that ever changes, rather than mis-compare
        bad = [f"step {s}: loss_scale {float(T[f'step{s}.loss_scale'])}, skipped {float(T[f'step{s}.skipped'])}"
               for s in steps if f"step{s}.loss_scale" not in T or f"step{s}.skipped" not in T
               or float(T[f"step{s}.loss_scale"]) != prec.loss_scale or float(T[f"step{s}.skipped"]) != 0.0]
        R.test(f"{variant}: static loss scale {prec.loss_scale:g} at every step, no step skipped", not bad,
               "; ".join(bad[:3]))
        if bad:
            return None

    chk_unit = Checker(R, variant, "per-unit", dtype)
    chk_free = Checker(R, variant, "free-run", dtype)
    chk_par = Checker(R, variant, "per-step", dtype)
    chk_opt = Checker(R, variant, "optimizer", dtype)
    chk_lr = Checker(R, variant, "lr", dtype)
    opt_r = G.AdamW(cfg, shapes)
    opt_c = G.AdamW(cfg, shapes)
    dmax = {n: torch.zeros(sh, dtype=F64) for n, sh in shapes.items()}
    init = {n: as_f64(T["init." + n]) for n in shapes}
    for s in steps:
        ids = T[f"step{s}.input_ids"].reshape(cfg.B, cfg.T)
        lab = T[f"step{s}.labels"].reshape(cfg.B, cfg.T)
        masks = reshape_masks(cfg, step_masks(T, s), cfg.B)
        lr = G.lr_at(cfg, s)
        chk_lr(s, "lr", T[f"step{s}.lr"], torch.tensor(lr, dtype=F64), "scalar")
        p_prev_c = init if s == 0 else {n: as_f64(T[f"step{s - 1}.param.{n}"]) for n in shapes}
        cgrads = {n: as_f64(T[f"step{s}.grad.{n}"]) for n in shapes if f"step{s}.grad.{n}" in T}
        have_all = len(cgrads) == len(shapes) and f"step{s}.grad_norm" in T
        cfac = dumpio.clip_factor(T, s, cfg.clip_grad) if have_all else None

        # per unit: every unit from the C run's own inputs
        ref = G.forward_backward(p_prev_c, cfg, ids, lab, masks, True, prec, lowp_force(T, s))
        new_r, norm_r, fac_r, info_r = opt_r.step(p_prev_c, ref["grads"], lr)
        compare_forward_backward(chk_unit, T, s, ref, cfg, ("lp_scalar", "lp_act", "lp_grad"), norm_r)
        compare_grad_inputs(chk_unit, T, s, ref, cfg, "lp_grad_input")
        if have_all:
            new_c, _, _, _ = opt_c.step(p_prev_c, cgrads, lr)
            for n in shapes:
                k = f"step{s}.param.{n}"
                if k not in T:
                    chk_par.missing(s, "param." + n)
                    continue
                slack = adam_slack(cfg, lr, n, shapes[n], dmax, cgrads[n], cfac, ref["grads"][n], fac_r,
                                   info_r[n], None)
                chk_par(s, "param." + n, T[k], new_r[n], "param", slack)
                chk_opt(s, "param." + n, T[k], new_c[n], "optim")

        # free-running, the reference's own forward and backward: step 0
        # only (a coarse check of the whole; the per-unit one covers every
        # step), to keep the test's time down
        if s == 0:
            free = G.forward_backward(p_prev_c, cfg, ids, lab, masks, True, prec)
            free_norm = G.AdamW.global_norm(free["grads"])
            compare_forward_backward(chk_free, T, s, free, cfg, ("lp_free_scalar", "lp_free", "lp_free"),
                                     free_norm)
            compare_grad_inputs(chk_free, T, s, free, cfg, "lp_free")
    chk_lr.finish(f"{variant}: learning rate per step")
    chk_unit.finish(f"{variant}: loss/logits/activations/grad_inputs/grads/grad_norm per unit "
                    f"(teacher-forced, {dtype} ulp rule)")
    chk_free.finish(f"{variant}: free-running replay of step 0 within the flips' cascade (norm-wise)")
    chk_par.finish(f"{variant}: updated fp32 master params, per step (AdamW on the reference's grads)")
    chk_opt.finish(f"{variant}: AdamW on C's grads == C's updated params")
    return T, cfg, prec


def lowp_wrong_ratio(T, cfg, prec, round_grads=False):
    """Step 0, teacher-forced, with a wrong reference (prec: one that
    forgets rounding points; round_grads: weight gradients rounded to S):
    the worst error/tolerance ratio over everything the per-unit check
    compares, and where."""
    params = {n: T["init." + n].double() for n in G.param_shapes(cfg)}
    masks = reshape_masks(cfg, step_masks(T, 0), cfg.B)
    ref = G.forward_backward(params, cfg, T["step0.input_ids"].reshape(cfg.B, cfg.T),
                             T["step0.labels"].reshape(cfg.B, cfg.T), masks, True, prec, lowp_force(T, 0))
    grads = {n: prec.round(g) for n, g in ref["grads"].items()} if round_grads else ref["grads"]
    pairs = [("logits", T["step0.logits"], ref["logits"], "lp_act"),
             ("grad_norm", T["step0.grad_norm"], torch.tensor(G.AdamW.global_norm(grads), dtype=F64), "lp_scalar")]
    pairs += [("act." + a, T[f"step0.act.{a}"], ref["acts"][a], "lp_act") for a in act_names(cfg)]
    pairs += [("grad_input." + k, T[f"step0.grad_input.{k}"], ref["grad_inputs"][k], "lp_grad_input")
              for k in grad_input_names(cfg)]
    pairs += [("grad." + n, T[f"step0.grad.{n}"], grads[n], "lp_grad") for n in grads]
    worst, worst_name = 0.0, ""
    for name, a, b, cat in pairs:
        r = compare_lowp(a, b, cat, prec.dtype)["ratio"]
        if r > worst:
            worst, worst_name = r, name
    return worst, worst_name


def lowp_negative_controls(R, variant, T, cfg, prec):
    """References that get mixed precision wrong must be flagged by the
    per-unit check: bf16, one that forgets a forward rounding point
    (GeLU's output) and one that forgets a backward one (the residual
    stream's gradient sum); fp16, the logits' gradient unrounded (where
    the scale enters); both, one that rounds the weight gradients to S (a
    low-precision main-grad); and (bf16, with dropout) one that scales
    dropout by the exact 1/(1-p) rather than fp32's. (The rounding points
    are one code path for both dtypes: each is forgotten once.)"""
    forgets = ([("the logits' gradient not rounded", {"grad:logits"})] if prec.dtype == "fp16" else
               [("GeLU's output not rounded", {"gelu"}),
                ("the residual stream's gradient sum not rounded", {"grad:residual"})])
    cases = [(what, G.Precision(prec.dtype, prec.loss_scale, f), False) for what, f in forgets]
    cases.append((f"weight gradients rounded to {prec.dtype}", prec, True))
    for what, wrong, round_grads in cases:
        worst, name = lowp_wrong_ratio(T, cfg, wrong, round_grads)
        R.test(f"{variant}: negative control: reference with {what} is flagged (worst ratio {worst:.3g} at {name})",
               worst > 1.0, f"not flagged: worst ratio {worst:.3g}")
    if prec.dtype == "bf16" and cfg.hidden_dropout > 0:
        class ExactDropout(G.Precision):
            dropout = staticmethod(G.dropout)  # float64's 1/(1-p), no fp32 product

        worst, name = lowp_wrong_ratio(T, cfg, ExactDropout(prec.dtype, prec.loss_scale))
        R.test(f"{variant}: negative control: reference with the exact dropout scale 1/(1-p) is flagged "
               f"(worst ratio {worst:.3g} at {name})", worst > 1.0, f"not flagged: worst ratio {worst:.3g}")


# ---------------------------------------------------- mixture of experts
# moe_ref.py's MoE layers: the reference replays the C run's discrete
# routing (choice, kept), so these check the decisions on their own.

# A routing decision (top-k order, capacity cut) is only checked where its
# margin exceeds what the compared values may differ by: twice the act
# tolerance's element bound at the larger value (each side may be off by
# one bound). Disagreements inside the margin are counted and reported.
def moe_margin_tol(values):
    atol_frac, rtol = TOL["act"][1], TOL["act"][2]
    return 2.0 * (atol_frac * float(values.abs().max()) + rtol * float(values.abs().max()))


def moe_cfg(E=3, k=2, aux=0.01, z=0.001, cf=1.0, drop="probs", pre=False, freq=1, **kw):
    cfg = tiny_cfg(**kw)
    d = dict(cfg.raw)
    d["moe"] = {"experts": E, "topk": k, "layer_freq": freq, "pre_softmax": pre,
                "aux_loss_coeff": aux, "z_loss_coeff": z, "capacity_factor": cf, "drop_policy": drop}
    return G.GPTConfig(d)


def selftest_moe_routing(R):
    """moe_ref's decisions on hand-made cases: ties to the lower expert,
    best first; capacity ceil(k T/E cf) capped at T; over capacity the
    largest weights (ties: the earlier position) or the first positions."""
    bad = []
    v = torch.tensor([[0.5, 0.9, 0.9, 0.1]], dtype=F64)
    ch, margin = M.top_k(v, 2)
    if ch.tolist() != [[1, 2]] or float(margin[0]) != 0.0:
        bad.append(f"top_k tie: {ch.tolist()} margin {margin.tolist()}")
    ch, _ = M.top_k(torch.tensor([[0.2, 0.7, 0.1, 0.7]], dtype=F64), 1)
    if ch.tolist() != [[1]]:
        bad.append(f"top_k(1) tie: {ch.tolist()}")
    caps = [M.MoEConfig({"experts": E, "topk": k, "capacity_factor": cf}).capacity(T)
            for E, k, cf, T in ((4, 2, 1.0, 32), (4, 1, 1.25, 32), (4, 2, 0.0, 32), (4, 2, 1e6, 32),
                                (3, 2, 1.0, 6), (8, 1, 0.3, 32))]
    if caps != [16, 10, 32, 32, 4, 2]:
        bad.append(f"capacities {caps}")
    # one sequence of 5 tokens, E 2, k 1, cap ceil(1*5/2*0.5) = 2: expert 0
    # claimed by positions 0, 1, 3, 4 with weights .3 .6 .6 .9
    choice = torch.tensor([[[0], [0], [1], [0], [0]]])
    w = torch.tensor([[[0.3], [0.6], [0.5], [0.6], [0.9]]], dtype=F64)
    for drop, want in (("probs", [0, 1, 1, 0, 1]), ("position", [1, 1, 1, 0, 0])):
        moe = M.MoEConfig({"experts": 2, "topk": 1, "capacity_factor": 0.5, "drop_policy": drop})
        kept, margins = M.keep(choice, w, moe, 5)
        if kept.reshape(-1).int().tolist() != want or len(margins) != 1:
            bad.append(f"{drop}: kept {kept.reshape(-1).int().tolist()}, expected {want}")
    R.test("self: MoE routing (top-k ties, capacity, drop policies) on hand-made cases", not bad,
           "; ".join(bad))


def selftest_moe_finite_differences(R):
    """Autograd's gradient of the MoE objective (LM loss + load-balancing
    + z-loss, with capacity drops) against central finite differences, the
    routing held at the unperturbed model's (as the C run's is replayed)."""
    worst, where = 0.0, ""
    for pre in (False, True):
        cfg = moe_cfg(E=3, k=2 - pre, aux=0.3, z=0.2, cf=1.0, pre=pre, drop="position" if pre else "probs",
                      freq=1 + pre, L=2 + pre, hidden_drop=0.2)
        gen = torch.Generator().manual_seed(11 + pre)
        P = random_params(cfg, gen)
        ids = torch.randint(0, cfg.V, (cfg.B, cfg.T), generator=gen)
        lab = torch.randint(0, cfg.V, (cfg.B, cfg.T), generator=gen)
        masks = random_masks(cfg, cfg.B, gen)
        acts = {}
        with torch.no_grad():
            G.gpt_forward(P, cfg, ids, lab, masks, acts)
        routed = dict(masks)
        drops = 0
        for l in range(cfg.L):
            if cfg.is_moe_layer(l):
                routed[f"layers.{l}.mlp.router.choice"] = acts[f"layers.{l}.mlp.router.choice"]
                routed[f"layers.{l}.mlp.router.kept"] = acts[f"layers.{l}.mlp.router.kept"]
                drops += int((~acts[f"layers.{l}.mlp.router.kept"]).sum())
        fb = G.forward_backward(P, cfg, ids, lab, routed, want_acts=False)

        def objective(P2):
            aux = []
            with torch.no_grad():
                loss = G.gpt_forward(P2, cfg, ids, lab, routed, None, aux)[0]
            return float(loss + sum(aux))
        w, at = fd_worst(P, fb["grads"], objective, gen,
                         lambda n: "mlp." in n or "post_attention" in n)
        if w > worst:
            worst, where = w, f"{at} pre_softmax={pre}"
        if drops == 0:
            worst, where = math.inf, f"pre_softmax={pre}: no capacity drop in the self-test"
    R.test("self: MoE objective's autograd gradient == central finite differences (float64)",
           worst <= 1.0, f"worst error {worst:.2e} x (1e-4 |g| + 1e-8) at {where}")


def moe_routing_disagreements(T, cfg, per_step, moe):
    """The C run's routing against the reference's own decisions, step by
    step from the C run's parameters (per_step): the top-k choice from the
    float64 logits (probs with pre_softmax), and which claims are kept
    given the dump's choice and the float64 weights. A decision counts
    against C only where its margin exceeds moe_margin_tol. moe: the
    routing rules to check against (cfg.moe; a negative control's own).
    Returns (list of disagreements beyond the margin, counts)."""
    bad = []
    tokens = claims_over = drops = 0
    near_choice = near_kept = 0
    for s, ref in enumerate(per_step):
        for l in range(cfg.L):
            if not cfg.is_moe_layer(l):
                continue
            pre = f"layers.{l}."
            kc = f"step{s}.act.{pre}mlp.router.choice"
            kk = f"step{s}.mask.{pre}mlp.router.kept"
            if kc not in T or kk not in T:
                bad.append(f"step {s} {pre}: router choice or kept missing from the dump")
                continue
            cch = T[kc].long().reshape(cfg.B, cfg.T, moe.k)
            ckept = T[kk].reshape(cfg.B, cfg.T, moe.k)
            # shape of the decisions: distinct experts in range, 0/1 kept
            if int(cch.min()) < 0 or int(cch.max()) >= moe.E:
                bad.append(f"step {s} {pre}: choice outside 0..{moe.E - 1}")
                continue
            srt = cch.sort(-1).values
            if moe.k > 1 and bool((srt[..., 1:] == srt[..., :-1]).any()):
                bad.append(f"step {s} {pre}: a token chose one expert twice")
            if not bool(((ckept == 0) | (ckept == 1)).all()):
                bad.append(f"step {s} {pre}: kept has values other than 0/1")
            drops += int((ckept == 0).sum())
            tokens += cfg.B * cfg.T
            # the top-k choice
            logits = ref["acts"][pre + "mlp.router.logits"]
            values = torch.softmax(logits, -1) if moe.pre_softmax else logits
            rch, margin = M.top_k(values, moe.k)
            tol = moe_margin_tol(values)
            differ = (rch != cch).any(-1)
            n_diff = int(differ.sum())
            n_clear = int((differ & (margin > tol)).sum())
            near_choice += n_diff - n_clear
            if n_clear:
                b, t = [int(i) for i in (differ & (margin > tol)).nonzero()[0]]
                bad.append(f"step {s} {pre}: {n_clear} tokens' top-{moe.k} differs beyond margin {tol:.2e} "
                           f"(first: sequence {b} position {t}: C {cch[b, t].tolist()}, reference "
                           f"{rch[b, t].tolist()}, margin {float(margin[b, t]):.3g})")
            # the capacity cut, on the dump's choice with the float64 weights
            w = ref["acts"][pre + "mlp.router.weight"]
            rkept, margins = M.keep(cch, w, moe, cfg.T)
            claims_over += len(margins)
            wtol = moe_margin_tol(w)
            gap_of = {(b, e): g for b, e, g in margins}
            mism = (rkept != ckept.bool())
            for b, t, j in mism.nonzero().tolist():
                e = int(cch[b, t, j])
                gap = gap_of.get((b, e), math.inf)
                if gap > wtol:
                    bad.append(f"step {s} {pre}: sequence {b} position {t} choice {j} (expert {e}): C kept "
                               f"{int(ckept[b, t, j])}, reference {int(rkept[b, t, j])}, margin {gap:.3g} "
                               f"> {wtol:.2e}")
                else:
                    near_kept += 1
    return bad, (tokens, claims_over, drops, near_choice, near_kept)


def check_moe_routing(R, variant, T, cfg, per_step, expect_drops):
    bad, (tokens, claims_over, drops, near_choice, near_kept) = moe_routing_disagreements(T, cfg, per_step,
                                                                                          cfg.moe)
    print(f"# {variant}: MoE routing: {tokens} token decisions, {claims_over} over-capacity (sequence, "
          f"expert) blocks, {drops} dropped claims; disagreements within the margin: {near_choice} "
          f"choices, {near_kept} kept flags")
    R.test(f"{variant}: MoE routing: reference top-k and capacity decisions == the dump's beyond the "
           f"margin ({near_choice} + {near_kept} near-ties)", not bad and tokens > 0,
           "; ".join(bad[:4]) or "no MoE layer compared")
    if expect_drops:
        R.test(f"{variant}: MoE capacity drops some claims ({drops} kept==0 in the dump)", drops > 0,
               "no claim dropped: the capacity branch is not exercised")


def moe_wrong_ratio(T, cfg, patches, replay_kept=True):
    """Step 0 forward and backward from init with moe_ref's functions
    replaced (patches: attr -> fn); the worst error/tolerance ratio over
    the dumped logits, activations and gradients. replay_kept False: the
    reference decides the capacity cut itself (moe_ref.keep)."""
    orig = {a: getattr(M, a) for a in patches}
    for a, fn in patches.items():
        setattr(M, a, fn)
    try:
        params = {n: T["init." + n].double() for n in G.param_shapes(cfg)}
        masks = reshape_masks(cfg, step_masks(T, 0), cfg.B)
        if not replay_kept:
            masks = {k: v for k, v in masks.items() if not k.endswith(".mlp.router.kept")}
        ref = G.forward_backward(params, cfg, T["step0.input_ids"].reshape(cfg.B, cfg.T),
                                 T["step0.labels"].reshape(cfg.B, cfg.T), masks)
    finally:
        for a, fn in orig.items():
            setattr(M, a, fn)
    worst, worst_name = compare(T["step0.logits"], ref["logits"], "logits")["ratio"], "logits"
    for a in act_names(cfg):
        r = compare(T[f"step0.act.{a}"], ref["acts"][a], "act")["ratio"]
        if r > worst:
            worst, worst_name = r, "act." + a
    for n in G.param_shapes(cfg):
        r = compare(T[f"step0.grad.{n}"], ref["grads"][n], "grad")["ratio"]
        if r > worst:
            worst, worst_name = r, "grad." + n
    return worst, worst_name


def moe_negative_controls(R, variant, T, cfg, per_step):
    """References with a plausible wrong MoE formula must be flagged; so
    must routing rules other than the C run's (the other drop policy, the
    capacity over the microbatch's tokens, not per sequence)."""
    moe = cfg.moe
    mb = int(cfg.raw.get("micro_batch", cfg.B))
    flipped = copy.copy(moe)
    flipped.drop_position = not moe.drop_position

    def keep_per_microbatch(choice, weight, moe_, T_):
        # Megatron's: capacity over the tokens a rank holds (a microbatch)
        B, Tn, k = choice.shape
        kept, margins = orig_keep(choice.reshape(B // mb, mb * Tn, k), weight.reshape(B // mb, mb * Tn, k),
                                  moe_, mb * Tn)
        return kept.reshape(B, Tn, k), [(b * mb, e, g) for b, e, g in margins]

    orig_keep = M.keep
    for what, rules, patch in ((f"drop policy {'position' if flipped.drop_position else 'probs'}", flipped, None),
                               ("capacity over the microbatch's tokens", moe, keep_per_microbatch)):
        if patch is not None:
            M.keep = patch
        try:
            bad, _ = moe_routing_disagreements(T, cfg, per_step, rules)
        finally:
            M.keep = orig_keep
        R.test(f"{variant}: negative control: routing check against {what} is flagged "
               f"({len(bad)} disagreements beyond the margin)", len(bad) > 0, "not flagged")

    def aux_per_microbatch(probs, choice, moe_, B_global):
        # Megatron's: P and f over all a microbatch's tokens at once, the
        # microbatches' losses averaged
        B, T_, E = probs.shape
        N = mb * T_
        total = 0.0
        for b0 in range(0, B, mb):
            f = torch.nn.functional.one_hot(choice[b0:b0 + mb], E).sum(dim=(0, 1, 2)).to(F64)
            P = probs[b0:b0 + mb].sum(dim=(0, 1))
            total = total + moe_.aux_coeff * E / (moe_.k * N * N) * (P * f).sum() * mb / B_global
        return total

    def aux_no_grad(probs, choice, moe_, B_global):
        return orig_aux(probs.detach(), choice, moe_, B_global)

    def z_none(logits, moe_, B_global):
        return logits.sum() * 0.0

    def weights_all_experts(logits, probs, choice, pre_softmax):
        # the chosen experts' probs under the softmax over every expert
        return probs.gather(-1, choice)

    def renormalised(logits, probs, choice, pre_softmax):
        # pre-softmax probs of the chosen experts renormalised to sum 1
        w = probs.gather(-1, choice)
        return w / w.sum(-1, keepdim=True)

    def dropless(choice, weight, moe_, T_):
        return torch.ones(choice.shape, dtype=torch.bool), []

    orig_aux = M.aux_loss
    controls = []
    if moe.aux_coeff > 0:
        controls += [("the load-balancing loss over the microbatch's tokens (not per sequence)",
                      {"aux_loss": aux_per_microbatch}),
                     ("no gradient through the load-balancing loss", {"aux_loss": aux_no_grad})]
    if moe.z_coeff > 0:
        controls.append(("no z-loss", {"z_loss": z_none}))
    if not moe.pre_softmax:
        controls.append(("weights from the softmax over all experts (not the top k)",
                         {"router_weights": weights_all_experts}))
    else:
        controls.append(("the chosen probs renormalised", {"router_weights": renormalised}))
    controls.append(("no capacity drops (routing's kept not replayed)", {"keep": dropless}))
    for what, patches in controls:
        # the replayed kept flags would override keep(): leave them out there
        worst, name = moe_wrong_ratio(T, cfg, patches, replay_kept="keep" not in patches)
        R.test(f"{variant}: negative control: MoE reference with {what} is flagged "
               f"(worst ratio {worst:.3g} at {name})", worst > 1.0, f"not flagged: worst ratio {worst:.3g}")


# ------------------------------------------------------------------- main

def sanitizer_build():
    """`make asan|ubsan|tsan` runs this test against a sanitized parity:
    a full gpt-tiny run takes ~85 s under TSan, so there the shapes shrink
    (the mathematics checked is the same; `make check` covers full size)."""
    build = os.path.basename(os.environ.get("BUILD", "").rstrip("/"))
    return (any(k in os.environ for k in ("TSAN_OPTIONS", "ASAN_OPTIONS", "UBSAN_OPTIONS"))
            or build in ("build-asan", "build-tsan", "build-ubsan"))


# Mixture-of-experts runs (moe_ref.py), 2 layers each: (a) top-2 of 4
# experts with both auxiliary losses, capacity factor 1 (claims dropped by
# weight) and dropout, 4-sequence microbatches (capacity and the
# load-balancing counts are per sequence, so the microbatch size must not
# matter); (b) top-1 by the softmax over every expert, every
# other layer MoE (a dense layer between), drops by position, no auxiliary
# loss, the portable tile backend.
MOE_VARIANTS = [
    ("moe-e4k2-cap1-probs-dropout",
     ["--num-layers", "2", "--num-experts", "4", "--moe-router-topk", "2", "--moe-aux-loss-coeff", "0.01",
      "--moe-z-loss-coeff", "0.001", "--moe-expert-capacity-factor", "1.0", "--moe-token-drop-policy", "probs",
      "--hidden-dropout", "0.1", "--attention-dropout", "0.1", "--micro-batch-size", "4"], {}),
    ("moe-e4k1-presoftmax-position-freq2",
     ["--num-layers", "2", "--num-experts", "4", "--moe-router-topk", "1", "--moe-router-pre-softmax",
      "--moe-layer-freq", "2", "--moe-expert-capacity-factor", "1.25", "--moe-token-drop-policy", "position",
      "--hidden-dropout", "0", "--attention-dropout", "0"], {"PARITY_BACKEND": "portable"}),
]
# the variants whose capacity must drop claims (asserted from the dump)
MOE_EXPECT_DROPS = ("moe-e4k2-cap1-probs-dropout", "moe-e4k1-presoftmax-position-freq2")

# Under a sanitizer: 2 layers, 4 sequences in 2 microbatches.
SMALL_ARGS = ["--num-layers", "2", "--global-batch-size", "4", "--micro-batch-size", "2"]


def run_parity(parity, args, env_extra, dump, log):
    env = dict(os.environ)
    env.update(env_extra)
    cmd = [parity, "train", "--model", "gpt-tiny", "--steps", "3", "--dump", dump] + args
    if sanitizer_build():
        # (a flag the variant gives itself, as the MoE runs' --num-layers, stays the variant's)
        cmd += [a for i in range(0, len(SMALL_ARGS), 2) if SMALL_ARGS[i] not in args
                for a in SMALL_ARGS[i:i + 2]]
    t0 = time.time()
    try:
        # from the repository root, where parity finds ref/data/corpus.txt
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
                           cwd=REPO)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"{' '.join(cmd)}: {e}"
    out = p.stdout.decode("utf-8", "replace")
    with open(log, "w") as f:
        f.write(out)
    if p.returncode != 0:
        tail = "\n".join(out.strip().splitlines()[-5:])
        return False, f"`{' '.join(cmd)}` exited {p.returncode}: {tail}"
    if not os.path.exists(dump):
        return False, f"`{' '.join(cmd)}` wrote no dump at {dump}"
    print(f"# ran {' '.join(cmd)} {' '.join(f'{k}={v}' for k, v in env_extra.items())} in {time.time() - t0:.1f}s")
    return True, ""


def main():
    t_start = time.time()
    R = TH.Results("ok   ", "FAIL ")
    repo = REPO
    with tempfile.TemporaryDirectory(prefix="parity-torch-") as tmp:
        selftest_attention(R)
        selftest_qkv_order(R)
        selftest_finite_differences(R)
        selftest_tied_gradient(R)
        selftest_adamw(R)
        selftest_lr(R)
        selftest_dumpio(R, tmp)
        selftest_lowp_rounding(R)
        selftest_moe_routing(R)
        selftest_moe_finite_differences(R)

        parity = os.environ.get("PARITY", "")
        parity = os.path.abspath(parity) if parity else ""
        if not parity or not os.access(parity, os.X_OK):
            R.test("parity train available", False,
                   f"PARITY={parity!r} is not an executable; build it (make) and set PARITY=build/parity")
        else:
            # Variants: gpt-tiny as built in (OpenBLAS backend); the other
            # dropout setting with a short LR schedule (portable backend);
            # the untied LM head with dropout on and clipping off. The first
            # run's config says which dropout setting is the default.
            first_dump = os.path.join(tmp, "default.safetensors")
            ok, why = run_parity(parity, [], {}, first_dump, os.path.join(tmp, "default.log"))
            p_default = None
            if ok:
                try:
                    _, meta = dumpio.load(first_dump)
                    c0 = G.GPTConfig(json.loads(meta["config"]))
                    p_default = max(c0.hidden_dropout, c0.attention_dropout)
                except (OSError, KeyError, ValueError, TypeError, dumpio.DumpError) as e:
                    why = f"cannot read the config of {first_dump}: {e!r}"
            if p_default is None:
                R.test("parity train --model gpt-tiny runs and dumps its config", False, why)
            else:
                on = ["--hidden-dropout", "0.1", "--attention-dropout", "0.1"]
                off = ["--hidden-dropout", "0", "--attention-dropout", "0"]
                variants = [
                    ("default" + ("-dropout" if p_default > 0 else "-nodropout"), None, {}),
                    # a short schedule, so that step 2 is half way down the
                    # cosine (gpt-tiny's own is still warming up or at lr_max)
                    (("nodropout" if p_default > 0 else "dropout") + "-portable-cosine",
                     (off if p_default > 0 else on) + ["--lr-warmup-iters", "1", "--lr-decay-iters", "3"],
                     {"PARITY_BACKEND": "portable"}),
                    # clipping off here: gpt-tiny's default clip (1.0) clips
                    # every one of the first steps, so this covers the other
                    # branch. Attention dropout differs from hidden dropout,
                    # so a site using the wrong p is caught by the 1/(1-p) scale.
                    ("untied-dropout-noclip", ["--untie-embeddings-and-output-weights", "--clip-grad", "0",
                                               "--hidden-dropout", "0.1", "--attention-dropout", "0.2"], {}),
                ] + MOE_VARIANTS
                first = True
                for name, args, env in variants:
                    if args is None:
                        dump = first_dump
                    else:
                        dump = os.path.join(tmp, name + ".safetensors")
                        ok, why = run_parity(parity, args, env, dump, os.path.join(tmp, name + ".log"))
                        if not ok:
                            R.test(f"{name}: parity train", False, why)
                            continue
                    res = check_run(R, name, dump, repo, backend=env.get("PARITY_BACKEND"))
                    if res is not None and first:
                        negative_controls(R, name, dump, *res)
                        first = False
                    if res is not None and res[2].moe is not None:
                        per_step, T, cfg = res
                        check_moe_routing(R, name, T, cfg, per_step, expect_drops=name in MOE_EXPECT_DROPS)
                        moe_negative_controls(R, name, T, cfg, per_step)
                lowp_names = {v[0] for v in LOWP_VARIANTS}
                for name, args, dtype in LOWP_VARIANTS:
                    dump = os.path.join(tmp, name + ".safetensors")
                    ok, why = run_parity(parity, args, {}, dump, os.path.join(tmp, name + ".log"))
                    if not ok:
                        R.test(f"{name}: parity train", False, why)
                        continue
                    res = check_lowp_run(R, name, dump, repo, dtype)
                    if res is not None:
                        lowp_negative_controls(R, name, *res)
                print_table("worst errors per category (ratio = error / tolerance; fail > 1)",
                            [r for r in R.rows if r[1] not in lowp_names], per_cat=3)
                print_table("mixed precision: worst errors per category (LOWP_TOL's rule)",
                            [r for r in R.rows if r[1] in lowp_names], per_cat=3)
                print_table("MoE runs: worst errors per category",
                            [r for r in R.rows if r[1] in {v[0] for v in MOE_VARIANTS}], per_cat=2)
                print_table("MoE runs: worst errors of the router and expert tensors",
                            [r for r in R.rows if r[1] in {v[0] for v in MOE_VARIANTS}
                             and (".mlp.router." in r[4] or ".mlp.experts." in r[4])], per_cat=2)
    return TH.finish(R, "test_gpt_torch.py", time.time() - t_start)


if __name__ == "__main__":
    sys.exit(main())
