#!/usr/bin/env python3
"""test_llava_torch.py - the golden LLaVA-style model (parity train --model
llava-tiny, fp32) against an independent float64 PyTorch reference
(llava_ref.py): a ViT encoder over the image patches, a projector, and a
GPT decoder reading the projected patches as a prefix of its text.

The reference keeps the image rows and the text rows in two tensors until
the decoder, as a LLaVA user would, instead of the C model's one stream
with zeroed branch rows. The test runs

  $PARITY train --model llava-tiny --steps 3 --dump FILE --backend portable

and replays the 3 steps in float64 from the dumped initial parameters,
inputs and dropout masks: llava_ref's forward, torch autograd's backward,
gpt_ref's clipping/AdamW/LR, with the T5 test's replay (test_t5_torch.py:
replay(), in three modes: per-step from the C run's previous parameters,
the reference's own 3-step trajectory from init, the reference AdamW fed
the C gradients) and the GPT test's tolerances (test_gpt_torch.py:
compare(), Checker, adam_slack). It compares loss, lr, grad norm, the
logits (every row: the stream's head runs on the image rows too, outside
the loss), every dumped activation on the rows its unit changes (the
encoder's and the projector's on the image rows, the decoder's and the
head's on every row), every grad_input checkpoint, every gradient and
every updated parameter.

The pictures. parity draws each byte's picture from its own RNG
(llava_picture), which Python does not reproduce, so the test recovers them
from the dump: the patch embedding is affine and injective (C = 64 >
patch_dim = 48), so every image row's kept (undropped) elements of
act.embedding.output give linear equations for the picture of the byte it
shows, with that step's patch weight, bias and position row. All
occurrences of a byte (every sequence and step, with three different sets
of parameters) are solved together by least squares in float64. The
embedding output's image rows are therefore fitted, not predicted; what is
checked there is that the fit is exact to fp32 rounding (relative residual
<= 1e-6 over >= 2x more equations than unknowns): each image row IS
Wp . picture(byte) + bp + wpe[row] (dropped out) for ONE picture per byte,
the same at every step, and the pictures look like normal(0, 1) draws.
Everything downstream (encoder, projector, decoder, loss, every gradient,
the patch embedding's included) is predicted.

The rows a unit does not change must pass through it bit for bit: the text
rows through the encoder layers and the projector (and their gradients
back through them); the encoder's branch outputs are +0 on the text rows;
no gradient reaches the image rows from the head. The tokens follow the
data rule (model_sample: the text is the GPT's corpus sample of T-P bytes,
image row p shows text byte p mod (T-P), its target 0); masks keep ~1-p
where drawn; the init has the spec's constants and standard deviations.

Negative controls must be flagged: references with a residual connection
around the projector, a causal encoder self-attention, the loss counted on
the image rows too; a gradient element and an activation element perturbed
by a relative 1e-3.

Run from the repository root:  PARITY=build/parity python3 tests/torch/test_llava_torch.py
Prints "ok  NAME" / "not ok  NAME" lines and
"RESULT test_llava_torch.py: N passed, M failed"; exits 1 on failure.
Without a working $PARITY (or without torch) the test fails, never skips.
"""
import math
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
NAME = "test_llava_torch.py"

# the comparison machinery and tolerances; without torch it fails the
# test, loudly
import torch_harness as TH  # noqa: E402
import torch  # noqa: E402
import t5_ref as R5  # noqa: E402
import llava_ref as RL  # noqa: E402
# the T5 test's replay of an encoder-decoder dump
import test_t5_torch as T5T  # noqa: E402

torch.set_num_threads(1)
F64 = torch.float64
PERTURB = TH.PERTURB
MODEL = "llava-tiny"
STEPS = 3
# the pictures' least-squares fit: fp32 rounding of the embedding output
# leaves a relative residual ~1e-7 (measured 8e-8); a wrong embedding
# formula (no bias, no position, another picture per step) leaves O(1)
PICTURE_RESIDUAL_TOL = 1e-6

Results = TH.Results


# ------------------------------------------------------------- self-tests

def tiny_cfg(hidden_drop=0.0, attn_drop=0.0):
    return RL.LlavaConfig({
        "vocab": 11, "seq_length": 7, "hidden": 8, "heads": 2, "layers": 2, "ffn": 12, "tied": False,
        "dropouts": {"hidden": hidden_drop, "attention": attn_drop}, "global_batch": 2,
        "lr": 1e-3, "min_lr": 1e-4, "warmup": 2, "decay_steps": 10, "beta1": 0.9, "beta2": 0.95,
        "eps": 1e-8, "weight_decay": 0.1, "clip_grad": 1.0, "ln_eps": 1e-5,
        "arch": "llava", "encoder": {"layers": 2, "seq_length": 3, "patch_dim": 5}})


def random_params(cfg, gen):
    return T5T.random_params(cfg, gen, RL.param_shapes(cfg), RL.init_std)


def random_masks(cfg, gen):
    B, T, C, H = cfg.B, cfg.T, cfg.C, cfg.H

    def m(shape, p):
        return (torch.rand(shape, generator=gen) >= p).to(torch.uint8)
    masks = {"dropout.embedding": m((B, T, C), cfg.hidden_dropout)}
    for pre, n in (("encoder.layers.", cfg.Le), ("layers.", cfg.L)):
        for l in range(n):
            masks[f"{pre}{l}.attention_dropout"] = m((B, H, T, T), cfg.attention_dropout)
            for site in ("attention_output_dropout", "mlp_output_dropout"):
                masks[f"{pre}{l}.{site}"] = m((B, T, C), cfg.hidden_dropout)
    return masks


def random_inputs(cfg, gen):
    ids = torch.randint(0, cfg.V, (cfg.B, cfg.T), generator=gen)
    lab = torch.randint(0, cfg.V, (cfg.B, cfg.T), generator=gen)
    pix = torch.randn(cfg.B, cfg.P, cfg.patch_dim, generator=gen, dtype=F64)
    return ids, lab, pix


def selftest_finite_differences(R):
    """Autograd's gradient of the reference (with dropout masks) against
    central finite differences at 3 random elements of every parameter."""
    cfg = tiny_cfg(hidden_drop=0.2, attn_drop=0.25)
    gen = torch.Generator().manual_seed(7)
    P = random_params(cfg, gen)
    ids, lab, pix = random_inputs(cfg, gen)
    masks = random_masks(cfg, gen)
    fb = RL.forward_backward(P, cfg, ids, lab, pix, masks, want_acts=False)

    def loss_at(P2):
        with torch.no_grad():
            return float(RL.llava_forward(P2, cfg, ids, lab, pix, masks)[0])
    worst, where = TH.fd_worst(P, fb["grads"], loss_at, gen, lambda n: True)
    R.test("self: llava reference's autograd gradient == central finite differences (float64)", worst <= 1.0,
           f"worst error {worst:.2e} x (1e-4 |g| + 1e-8) at {where}")


def selftest_structure(R):
    """What the LLaVA wiring implies: the projected patches do not depend
    on the text; every patch sees every other (bidirectional encoder);
    every text position sees every patch and the text inputs <= its own
    only; image rows' labels do not matter; no gradient reaches the image
    rows' head input; the projector replaces (does not add to) its input."""
    cfg = tiny_cfg()
    gen = torch.Generator().manual_seed(5)
    P = random_params(cfg, gen)
    ids, lab, pix = random_inputs(cfg, gen)
    Pn = cfg.P

    def run(i, x, lb=lab, wrong=None):
        rec = R5.Recorder(True)
        with torch.no_grad():
            loss, lg = RL.llava_forward(P, cfg, i, lb, x, None, rec, wrong=wrong)
        proj = rec.acts["projector.output"][0][2]
        return loss, lg, proj
    l0, lg0, pr0 = run(ids, pix)
    bad = []
    j = cfg.T - 2                                      # a late text input
    ids2 = ids.clone()
    ids2[:, j] = (ids2[:, j] + 1) % cfg.V
    _, lg2, pr2 = run(ids2, pix)
    if not torch.equal(pr0, pr2):
        bad.append("the projected patches depend on a text token")
    if not torch.equal(lg0[:, :j], lg2[:, :j]):
        bad.append("a row sees a later text input")
    if torch.equal(lg0[:, j:], lg2[:, j:]):
        bad.append("changing text input j changed nothing at j")
    pix3 = pix.clone()
    pix3[:, Pn - 1] += 1.0                             # the last patch's picture
    _, lg3, pr3 = run(ids, pix3)
    if bool((pr3[:, 0] - pr0[:, 0]).abs().amax(-1).eq(0).any()):
        bad.append("the first patch does not see the last (encoder not bidirectional)")
    if bool((lg3[:, Pn:] - lg0[:, Pn:]).abs().amax(-1).eq(0).any()):
        bad.append("a text position does not see the last patch")
    ids4 = ids.clone()
    ids4[:, :Pn] = (ids4[:, :Pn] + 3) % cfg.V          # the image rows' tokens: unused
    lab4 = lab.clone()
    lab4[:, :Pn] = (lab4[:, :Pn] + 1) % cfg.V          # the image rows' labels: no loss
    l4, lg4, _ = run(ids4, pix, lab4)
    if not (torch.equal(lg4, lg0) and float(l4) == float(l0)):
        bad.append("the image rows' tokens or labels change the model")
    fb = RL.forward_backward(P, cfg, ids, lab, pix, None, want_acts=False)
    gi = RL.grad_inputs(cfg, fb["probe_grads"])
    if float(gi["head"]["all"][:, :Pn].abs().max()) != 0.0:
        bad.append("the head's image rows have a gradient")
    if float(gi["projector"]["img"].abs().max()) == 0.0:
        bad.append("no gradient reaches the encoder output")
    _, _, pr5 = run(ids, pix, wrong="projector_residual")
    if torch.equal(pr5, pr0):
        bad.append("the projector's residual variant is the model")
    R.test("self: llava structure (patches bidirectional and blind to the text, text causal and seeing "
           "every patch, image rows' tokens/labels unused, no gradient into the head's image rows)",
           not bad, "; ".join(bad))


def selftest_pictures(R):
    """recover_pictures gives back known pictures from a reference
    embedding output with dropout (the bytes repeating across rows,
    sequences and two parameter sets), to float64 precision, and a residual
    that exposes an embedding output without its position rows."""
    cfg = tiny_cfg(hidden_drop=0.2)
    gen = torch.Generator().manual_seed(11)
    Pn, D = cfg.P, cfg.patch_dim
    table = torch.randn(cfg.V, D, generator=gen, dtype=F64)
    obs, obs_bad = [], []
    for k in range(2):
        P = random_params(cfg, gen)
        ids = torch.randint(0, 4, (cfg.B, cfg.T), generator=gen)
        masks = random_masks(cfg, gen)
        rec = R5.Recorder(True)
        with torch.no_grad():
            RL.llava_forward(P, cfg, ids, ids, table[ids[:, :Pn]], masks, rec)
        emb = [t for r, _, t in rec.acts["embedding.output"] if r == "img"][0]
        keep = masks["dropout.embedding"][:, :Pn]
        W, b = P["vision.patch_embedding.weight"], P["vision.patch_embedding.bias"]
        wpe = P["embedding.position_embeddings.weight"][:Pn]
        obs.append((ids[:, :Pn], emb, keep, W, b, wpe))
        obs_bad.append((ids[:, :Pn], emb, keep, W, b, torch.zeros_like(wpe)))
    pics, info = RL.recover_pictures(cfg, obs)
    err = max(float((pics[k] - table[k]).abs().max()) for k in pics)
    res = max(i[2] for i in info.values())
    _, info_bad = RL.recover_pictures(cfg, obs_bad)
    res_bad = max(i[2] for i in info_bad.values())
    R.test("self: pictures recovered by least squares from a dropped-out patch embedding (error "
           f"{err:.1e}, residual {res:.1e}; without the position rows: residual {res_bad:.2g})",
           err < 1e-12 and res < 1e-12 and res_bad > 1e-3, f"error {err:.2e}, residual {res:.2e}, "
           f"wrong-model residual {res_bad:.2e}")


# ------------------------------------------------------ the golden run

def row_slice(cfg, rows):
    return {"img": slice(0, cfg.P), "txt": slice(cfg.P, cfg.T), "all": slice(0, cfg.T)}[rows]


def stream(T, key, cfg):
    """A dumped stream checkpoint as [B, T, last]."""
    return T[key].reshape(cfg.B, cfg.T, -1)


def check_inputs(R, cfg, T, steps):
    """Tokens by model_sample's LLaVA rule; masks 0/1 keeping about 1-p on
    the region each part uses; init constants and std."""
    bad = []
    corpus = TH.read_corpus(REPO, bad)
    B, Tn, Pn, Tt, C, H = cfg.B, cfg.T, cfg.P, cfg.Tt, cfg.C, cfg.H
    for s in steps:
        tokens = TH.dumped_tokens(T, s, B, Tn, bad)
        if tokens is None:
            continue
        ids, lab = tokens
        if corpus is not None:
            N = len(corpus)
            for b in range(B):
                g = s * B + b
                off = (g * Tt) % (N - Tt - 1)
                x = list(corpus[off:off + Tt])
                y = list(corpus[off + 1:off + Tt + 1])
                want_in = [x[p % Tt] for p in range(Pn)] + x
                want_lab = [0] * Pn + y
                if ids[b].tolist() != want_in or lab[b].tolist() != want_lab:
                    bad.append(f"step {s} sample {b}: tokens are not the text at offset {off} with "
                               f"image row p showing text byte p mod {Tt}")
                    break
        causal = ~torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1)
        sites = {"dropout.embedding": ((B, Tn, C), cfg.hidden_dropout, None)}
        for l in range(cfg.Le):
            pre = f"encoder.layers.{l}."
            sites[pre + "attention_dropout"] = ((B, H, Tn, Tn), cfg.attention_dropout,
                                                lambda m: m[:, :, :Pn, :Pn])
            for site in ("attention_output_dropout", "mlp_output_dropout"):
                sites[pre + site] = ((B, Tn, C), cfg.hidden_dropout, lambda m: m[:, :Pn])
        for l in range(cfg.L):
            pre = f"layers.{l}."
            sites[pre + "attention_dropout"] = ((B, H, Tn, Tn), cfg.attention_dropout,
                                                lambda m: m[..., causal])
            for site in ("attention_output_dropout", "mlp_output_dropout"):
                sites[pre + site] = ((B, Tn, C), cfg.hidden_dropout, None)
        bad += T5T.mask_problems(T, s, sites)
    bad += T5T.init_problems(T, cfg, RL.param_shapes(cfg), RL.init_std)
    R.test(f"{MODEL}: data (text, image rows showing its bytes, no image loss), masks and init follow "
           f"the spec", not bad, "; ".join(bad[:5]))


def recover_pictures(R, cfg, T, steps):
    """The pictures of every byte an image row shows, from every step's
    embedding output (see the module doc). Returns byte -> [patch_dim]
    float64, or None when some byte's system is not solvable."""
    Pn = cfg.P
    obs = []
    for s in steps:
        def prm(n):
            return (T["init." + n] if s == 0 else T[f"step{s - 1}.param.{n}"]).to(F64)
        keep = T.get(f"step{s}.mask.dropout.embedding")
        obs.append((T[f"step{s}.input_ids"].reshape(-1, cfg.T)[:, :Pn],
                    stream(T, f"step{s}.act.embedding.output", cfg)[:, :Pn].to(F64),
                    None if keep is None else keep.reshape(cfg.B, cfg.T, cfg.C)[:, :Pn],
                    prm("vision.patch_embedding.weight"), prm("vision.patch_embedding.bias"),
                    prm("embedding.position_embeddings.weight")[:Pn]))
    pics, info = RL.recover_pictures(cfg, obs)
    D = cfg.patch_dim
    under = [b for b, (n, rank, _) in info.items() if rank < D]
    worst_b = max(info, key=lambda b: info[b][2])
    worst = info[worst_b][2]
    n_min = min(n for n, _, _ in info.values())
    R.test(f"{MODEL}: image rows are Wp . picture(byte) + bp + wpe (dropped out), one picture per byte at "
           f"every step: {len(pics)} bytes, >= {n_min} equations for {D} unknowns each, worst relative "
           f"residual {worst:.2e} (byte {worst_b})",
           not under and worst <= PICTURE_RESIDUAL_TOL,
           (f"bytes {under[:5]} have fewer than {D} independent equations; " if under else "")
           + f"worst residual {worst:.3g} (tolerance {PICTURE_RESIDUAL_TOL:g}) at byte {worst_b}")
    # the same byte seen at step 0 only and at steps >= 1 only (other params): the same picture
    if len(steps) > 1:
        p0, i0 = RL.recover_pictures(cfg, obs[:1])
        p1, i1 = RL.recover_pictures(cfg, obs[1:])
        both = [b for b in p0 if b in p1 and i0[b][1] == D and i1[b][1] == D]
        d = max((float((p0[b] - p1[b]).abs().max()) for b in both), default=math.inf)
        R.test(f"{MODEL}: a byte's picture from step 0 alone == from steps 1.. alone ({len(both)} bytes, "
               f"max |diff| {d:.1e})", both and d < 1e-4, f"max |diff| {d:.3g} over {len(both)} bytes")
    x = torch.stack([pics[b] for b in sorted(pics)]).reshape(-1)
    k = x.numel()
    mean, std = float(x.mean()), float(x.std())
    R.test(f"{MODEL}: recovered pictures look like normal(0, 1) draws ({k} values: mean {mean:.3f}, "
           f"std {std:.3f})", abs(mean) <= 6 / math.sqrt(k) and abs(std - 1) <= 6 / math.sqrt(2 * k),
           f"mean {mean:.4g}, std {std:.4g}")
    return None if under else pics


def check_pass_through(R, T, steps, cfg):
    """The text rows pass through the encoder layers and the projector bit
    for bit, forward and backward; the encoder's branch outputs are +0 on
    the text rows; the head sends no gradient to the image rows."""
    P = cfg.P
    bad, n = [], 0
    for s in steps:
        def get(kind, name):
            k = f"step{s}.{kind}.{name}"
            return stream(T, k, cfg) if k in T else None
        pairs = [("act", f"encoder.layers.{l}.output", "act", "embedding.output") for l in range(cfg.Le)]
        pairs.append(("act", "projector.output", "act", "embedding.output"))
        pairs += [("grad_input", f"encoder.layers.{l}", "grad_input", "layers.0") for l in range(cfg.Le)]
        pairs.append(("grad_input", "projector", "grad_input", "layers.0"))
        for kind, name, wkind, wname in pairs:
            got, want = get(kind, name), get(wkind, wname)
            n += 1
            if got is None or want is None:
                bad.append(f"step {s}: {kind}.{name} or {wkind}.{wname} missing")
                continue
            if not torch.equal(got[:, P:], want[:, P:]):
                d = float((got[:, P:].double() - want[:, P:].double()).abs().max())
                bad.append(f"step {s}: {kind}.{name}[txt rows] != {wkind}.{wname}[txt rows] (max |diff| {d:.3g})")
    R.test(f"{MODEL}: text rows pass through the encoder layers and the projector bit for bit, forward "
           f"and backward ({n} checkpoints)", not bad and n > 0, "; ".join(bad[:4]))
    bad, n = [], 0
    for s in steps:
        keys = [f"step{s}.act.encoder.layers.{l}.{nm}" for l in range(cfg.Le)
                for nm in ("self_attention.dense.output", "mlp.dense_4h_to_h.output")]
        for k in keys:
            n += 1
            if k not in T:
                bad.append(f"{k} missing")
                continue
            t = stream(T, k, cfg)[:, P:]
            if not bool((t == 0).all()):
                bad.append(f"{k}[txt rows]: max |x| {float(t.abs().max()):.3g}, expected +0")
        k = f"step{s}.grad_input.head"
        n += 1
        if k not in T:
            bad.append(f"{k} missing")
        else:
            t = stream(T, k, cfg)[:, :P]
            if not bool((t == 0).all()):
                bad.append(f"{k}[img rows]: max |x| {float(t.abs().max()):.3g}, expected 0 (no loss there)")
    R.test(f"{MODEL}: encoder branch outputs +0 on the text rows, no head gradient on the image rows "
           f"({n} checkpoints)", not bad and n > 0, "; ".join(bad[:4]))


def compare_step(chk, T, s, ref, cfg, cats, grad_norm=None):
    """Loss, logits, activations, grad_inputs, grads and grad norm of step s.
    Returns the set of dumped act/grad_input names the reference covered."""
    cat_scalar, cat_fwd, cat_grad = cats
    Pn = cfg.P
    if f"step{s}.loss" in T:
        chk(s, "loss", T[f"step{s}.loss"], ref["loss"], cat_scalar)
    else:
        chk.missing(s, "loss")
    lcat = cat_fwd if cat_fwd != "act" else "logits"
    if f"step{s}.logits" in T:
        lg = stream(T, f"step{s}.logits", cfg)
        chk(s, "logits[txt rows]", lg[:, Pn:], ref["logits"][:, Pn:], lcat)
        chk(s, "logits[img rows: head outside the loss]", lg[:, :Pn], ref["logits"][:, :Pn], lcat)
    else:
        chk.missing(s, "logits")

    def parts_of(key, rows, cols):  # the image or text rows (no column cuts here)
        return stream(T, key, cfg)[:, row_slice(cfg, rows)], f"{rows} rows"
    return TH.compare_units(chk, T, s, ref, cats, grad_norm, parts_of,
                            RL.grad_inputs(cfg, ref["probe_grads"]), RL.param_shapes(cfg))


def with_pictures(cfg, pics):
    """llava_ref.forward_backward with the pictures of the image rows'
    bytes: the (params, cfg, ids, labels, masks) interface of the replay."""
    def fb(params, cfg_, ids, lab, masks=None, want_acts=True, wrong=None):
        img = ids.reshape(-1, cfg.T)[:, :cfg.P].long()
        pix = torch.stack([torch.stack([pics[int(b)] for b in row]) for row in img])
        return RL.forward_backward(params, cfg_, ids, lab, pix, masks, want_acts, wrong)
    return fb


def check_run(R, path):
    got = TH.load_dump(R, MODEL, path, STEPS, RL.LlavaConfig, "a LLaVA-style model llava_ref covers",
                       RL.param_shapes, check_init=False)
    if got is None:
        return None
    T, cfg, steps, shapes = got
    missing = [n for n in shapes if "init." + n not in T]
    missing += [f"step{s}.{k}" for s in steps for k in ("act.embedding.output", "input_ids", "labels")
                if f"step{s}.{k}" not in T]
    if missing:
        R.test(f"{MODEL}: initial parameters and inputs in dump", False,
               f"missing {missing[0]} (+{len(missing) - 1})")
        return None
    print(f"# {MODEL}: V={cfg.V} T={cfg.T} (image P={cfg.P} x patch_dim {cfg.patch_dim}, text {cfg.Tt}) "
          f"C={cfg.C} H={cfg.H} encoder layers={cfg.Le} decoder layers={cfg.L} F={cfg.F} B={cfg.B} "
          f"tied={cfg.tied} dropout hidden={cfg.hidden_dropout} attention={cfg.attention_dropout} "
          f"lr={cfg.lr} wd={cfg.weight_decay} clip={cfg.clip_grad}")
    check_inputs(R, cfg, T, steps)
    check_pass_through(R, T, steps, cfg)
    pics = recover_pictures(R, cfg, T, steps)
    if pics is None:
        R.test(f"{MODEL}: replay", False, "no pictures for some image rows: nothing to replay")
        return None
    fb = with_pictures(cfg, pics)
    per_step, covered = TH.replay(R, MODEL, T, cfg, steps, shapes, fb, compare_step)
    T5T.check_coverage(R, T, steps, covered, cfg, names=shapes, model=MODEL)
    return per_step, T, cfg, fb


# ------------------------------------------------------ negative controls

def negative_controls(R, per_step, T, cfg, fb):
    # a gradient element perturbed by a relative 1e-3
    name = "projector.linear_fc1.weight"
    TH.perturbed_grad_flagged(R, MODEL, T, name, per_step[0]["grads"][name])
    # an activation element of a quarter of the largest magnitude, perturbed
    an = "projector.output"
    a = stream(T, f"step0.act.{an}", cfg)[:, :cfg.P].clone().double().reshape(-1)
    ref_a = [t for r, _, t in per_step[0]["acts"][an] if r == "img"][0]
    TH.perturbed_act_flagged(R, MODEL, a, ref_a, lambda j: f"act.{an}[img rows, flat {j}]")
    # references with a plausible wrong LLaVA wiring
    for wrong, what, with_grads in (
            ("projector_residual", "a residual connection around the projector", False),
            ("encoder_causal", "a causal encoder self-attention", False),
            ("loss_all_rows", "the loss over the image rows' labels too", True)):
        ratio, where = T5T.worst_step0(T, cfg, wrong, with_grads, fb=fb, compare=compare_step,
                                       shapes=RL.param_shapes(cfg))
        R.test(f"{MODEL}: negative control: reference with {what} is flagged (worst ratio {ratio:.3g} at {where})",
               ratio > 1.0, f"not flagged: worst ratio {ratio:.3g} at {where}")


# ------------------------------------------------------------------- main

def main():
    t_start = time.time()
    R = Results()
    selftest_finite_differences(R)
    selftest_structure(R)
    selftest_pictures(R)
    parity = os.environ.get("PARITY", "") or os.path.join(REPO, "build", "parity")
    parity = os.path.abspath(parity)
    if not os.access(parity, os.X_OK):
        # others may be rebuilding it: wait a little before failing
        for _ in range(15):
            time.sleep(2)
            if os.access(parity, os.X_OK):
                break
    if not os.access(parity, os.X_OK):
        R.test("parity train available", False,
               f"PARITY={parity!r} is not an executable; build it (make) and set PARITY=build/parity")
    else:
        with tempfile.TemporaryDirectory(prefix="parity-llava-torch-") as tmp:
            dump = os.path.join(tmp, MODEL + ".safetensors")
            ok, why = T5T.run_parity(parity, dump, os.path.join(tmp, MODEL + ".log"), model=MODEL)
            if not ok:
                R.test(f"{MODEL}: parity train", False, why)
            else:
                res = check_run(R, dump)
                if res is not None:
                    negative_controls(R, *res)
                    TH.print_table("worst errors per category (ratio = error / tolerance; fail > 1)",
                                   R.rows, per_cat=3)
                    T5T.summarize(R)
    return TH.finish(R, NAME, time.time() - t_start)


if __name__ == "__main__":
    sys.exit(main())
