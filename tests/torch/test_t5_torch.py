#!/usr/bin/env python3
"""test_t5_torch.py - the golden T5-style encoder-decoder (parity train
--model t5-tiny, fp32) against an independent float64 PyTorch reference
written from ref/model/MODEL.md ("Encoder-decoder models (arch t5)").

The reference (t5_ref.py) keeps the encoder's and the decoder's rows in
two tensors, as a T5 user would, instead of the C model's one stream with
zeroed branch rows. The test runs

  $PARITY train --model t5-tiny --steps 3 --dump FILE --backend portable

and replays the 3 steps in float64 from the dumped initial parameters,
inputs and dropout masks: t5_ref's forward, torch autograd's backward,
gpt_ref's clipping/AdamW/LR. It compares loss, lr, grad norm, the logits,
every dumped activation (each stream checkpoint's rows of the part that
computes it: rows < P for the encoder's, rows >= P for the decoder's; the
cross-attention's qkv output by its q columns on the target rows and its
k and v columns on the source rows), every grad_input checkpoint (both
parts' rows), every gradient and every updated parameter, with the GPT
test's tolerances (tests/torch/test_gpt_torch.py: compare(), Checker,
adam_slack), in three modes:

  per-step   each step starts from the C run's previous parameters;
  trajectory the reference runs its own 3 steps from init;
  optimizer  the reference AdamW applied to the C gradients and params.

The rows a unit does not own must pass through it unchanged (bit for bit):
the target rows through the encoder units, the source rows (`enc`) through
the decoder layers and into each cross-attention. The tokens follow
MODEL.md's encoder-decoder data rule; masks keep ~1-p where drawn; the init
has the spec's constants and standard deviations.

Negative controls must be flagged: references whose encoder
self-attention is causal, whose cross-attention keys/values come from
LNx(enc) or from the encoder before its final LayerNorm, whose loss also
counts the source rows; a gradient and an activation element perturbed by
a relative 1e-3.

Run from the repository root:  PARITY=build/parity python3 tests/torch/test_t5_torch.py
Prints "ok  NAME" / "not ok  NAME" lines and
"RESULT test_t5_torch.py: N passed, M failed"; exits 1 on failure.
Without a working $PARITY (or without torch) the test fails, never skips.
"""
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
NAME = "test_t5_torch.py"

# the comparison machinery and tolerances (one definition); without torch
# it fails the test, loudly
import torch_harness as TH  # noqa: E402
import torch  # noqa: E402
import gpt_ref as G  # noqa: E402
import t5_ref as R5  # noqa: E402

torch.set_num_threads(1)
F64 = torch.float64
PERTURB = TH.PERTURB
MODEL = "t5-tiny"
STEPS = 3


# "ok  NAME" / "not ok  NAME" lines
Results = TH.Results


# ------------------------------------------------------------- self-tests

def tiny_cfg(hidden_drop=0.0, attn_drop=0.0):
    return R5.T5Config({
        "vocab": 11, "seq_length": 7, "hidden": 8, "heads": 2, "layers": 2, "ffn": 12, "tied": False,
        "dropouts": {"hidden": hidden_drop, "attention": attn_drop}, "global_batch": 2,
        "lr": 1e-3, "min_lr": 1e-4, "warmup": 2, "decay_steps": 10, "beta1": 0.9, "beta2": 0.95,
        "eps": 1e-8, "weight_decay": 0.1, "clip_grad": 1.0, "ln_eps": 1e-5,
        "arch": "t5", "encoder": {"layers": 2, "seq_length": 3}})


def random_params(cfg, gen, shapes=None, init_std=None):
    """Random parameters of the reference's shapes (t5_ref's by default),
    10x the init's spread (constants jittered)."""
    P = {}
    init_std = init_std or R5.init_std
    for n, s in (shapes or R5.param_shapes(cfg)).items():
        std = init_std(n, cfg)
        if std is None:
            P[n] = G.init_const(n) + 0.1 * torch.randn(s, generator=gen, dtype=F64)
        else:
            P[n] = std * 10 * torch.randn(s, generator=gen, dtype=F64)
    return P


def random_masks(cfg, gen):
    B, T, C, H = cfg.B, cfg.T, cfg.C, cfg.H

    def m(shape, p):
        return (torch.rand(shape, generator=gen) >= p).to(torch.uint8)
    masks = {"dropout.embedding": m((B, T, C), cfg.hidden_dropout)}
    for part, n in (("encoder", cfg.Le), ("decoder", cfg.L)):
        for l in range(n):
            pre = f"{part}.layers.{l}."
            masks[pre + "attention_dropout"] = m((B, H, T, T), cfg.attention_dropout)
            sites = ["attention_output_dropout", "mlp_output_dropout"]
            if part == "decoder":
                masks[pre + "cross_attention_dropout"] = m((B, H, T, T), cfg.attention_dropout)
                sites.append("cross_attention_output_dropout")
            for site in sites:
                masks[pre + site] = m((B, T, C), cfg.hidden_dropout)
    return masks


def selftest_attention(R):
    """full_attention (bidirectional / cross, Tq != Tk) equals softmax
    attention, and with dropout on e equals dropout on the probabilities;
    qkv_rows picks the same q/k/v rows as gpt_ref.split_qkv."""
    gen = torch.Generator().manual_seed(1)
    B, H, Tq, Tk, D = 2, 3, 5, 4, 4
    q = torch.randn(B, H, Tq, D, generator=gen, dtype=F64)
    k, v = (torch.randn(B, H, Tk, D, generator=gen, dtype=F64) for _ in range(2))
    probs = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(D), -1)
    e1 = float((R5.full_attention(q, k, v, None, 0.0) - probs @ v).abs().max())
    keep = (torch.rand(B, H, Tq, Tk, generator=gen) >= 0.3).to(torch.uint8)
    e2 = float((R5.full_attention(q, k, v, keep, 0.3) - (probs * keep.to(F64) / 0.7) @ v).abs().max())
    C = H * D
    x = torch.randn(B, Tq, C, generator=gen, dtype=F64)
    W = torch.randn(3 * C, C, generator=gen, dtype=F64)
    qs, ks, vs = G.split_qkv(x @ W.t(), H, D)
    iq, ik, iv = R5.qkv_rows(H, D)
    e3 = max(float((R5.heads(x @ W[i].t(), H, D) - t).abs().max()) for i, t in ((iq, qs), (ik, ks), (iv, vs)))
    R.test("self: cross/bidirectional split-key attention == softmax attention (dropout on probs); "
           "q/k/v rows of the fused weight == split_qkv's", max(e1, e2, e3) < 1e-13,
           f"max diff {e1:.2e}, {e2:.2e}, {e3:.2e}")


def selftest_finite_differences(R):
    """Autograd's gradient of the reference (with dropout masks) against
    central finite differences at 3 random elements of every parameter;
    the grad_input probes' gradients against finite differences too."""
    cfg = tiny_cfg(hidden_drop=0.2, attn_drop=0.25)
    gen = torch.Generator().manual_seed(7)
    P = random_params(cfg, gen)
    ids = torch.randint(0, cfg.V, (cfg.B, cfg.T), generator=gen)
    lab = torch.randint(0, cfg.V, (cfg.B, cfg.T), generator=gen)
    masks = random_masks(cfg, gen)
    fb = R5.forward_backward(P, cfg, ids, lab, masks, want_acts=False)

    def loss_at(P2):
        with torch.no_grad():
            return float(R5.t5_forward(P2, cfg, ids, lab, masks)[0])
    worst, where = TH.fd_worst(P, fb["grads"], loss_at, gen, lambda n: True)
    R.test("self: t5 reference's autograd gradient == central finite differences (float64)", worst <= 1.0,
           f"worst error {worst:.2e} x (1e-4 |g| + 1e-8) at {where}")


def selftest_structure(R):
    """What the encoder-decoder wiring implies: the loss at target position
    i depends on every source token and on target inputs <= i only; the
    encoder's output does not depend on the target; the grad_input sums
    are consistent (the source rows entering decoder layer 0 carry all of
    enc's gradient, which is what the encoder's final LN receives)."""
    cfg = tiny_cfg()
    gen = torch.Generator().manual_seed(5)
    P = random_params(cfg, gen)
    ids = torch.randint(0, cfg.V, (cfg.B, cfg.T), generator=gen)
    lab = torch.randint(0, cfg.V, (cfg.B, cfg.T), generator=gen)
    Pn = cfg.P

    def run(i):
        rec = R5.Recorder(True)
        with torch.no_grad():
            _, lt, _ = R5.t5_forward(P, cfg, i, lab, None, rec)
        enc = [t for r, c, t in rec.acts["encoder.final_layernorm.output"] if r == "src"][0]
        return lt, enc
    lt0, enc0 = run(ids)
    bad = []
    j = cfg.T - 2                                      # a late target input
    ids2 = ids.clone()
    ids2[:, j] = (ids2[:, j] + 1) % cfg.V
    lt2, enc2 = run(ids2)
    if not torch.equal(enc0, enc2):
        bad.append("the encoder's output depends on a target token")
    jt = j - Pn
    if not torch.equal(lt0[:, :jt], lt2[:, :jt]):
        bad.append("a target position sees a later target input")
    if torch.equal(lt0[:, jt:], lt2[:, jt:]):
        bad.append("changing target input j changed nothing at j")
    ids3 = ids.clone()
    ids3[:, Pn - 1] = (ids3[:, Pn - 1] + 1) % cfg.V   # the last source token
    lt3, _ = run(ids3)
    if bool((lt3 - lt0).abs().amax(-1).eq(0).any()):
        bad.append("a target position does not see the last source token")
    fb = R5.forward_backward(P, cfg, ids, lab, None, want_acts=False)
    gi = R5.grad_inputs(cfg, fb["probe_grads"])
    if float(gi["decoder.layers.0"]["src"].abs().max()) == 0.0:
        bad.append("no gradient reaches the encoder output")
    if float(gi["head"]["src"].abs().max()) != 0.0:
        bad.append("the head's source rows have a gradient")
    R.test("self: encoder-decoder structure (source seen by every target position, target causal, "
           "encoder blind to the target)", not bad, "; ".join(bad))


# ------------------------------------------------------ the golden run

def run_parity(parity, dump, log, tries=3, model=MODEL):
    """parity train, from the repository root (ref/data/corpus.txt). Other
    people may rebuild build/parity while this runs: a failure is retried."""
    cmd = [parity, "train", "--model", model, "--steps", str(STEPS), "--dump", dump, "--backend", "portable"]
    why = ""
    for attempt in range(tries):
        t0 = time.time()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120, cwd=REPO)
        except (OSError, subprocess.TimeoutExpired) as e:
            why = f"{' '.join(cmd)}: {e}"
            time.sleep(2)
            continue
        out = p.stdout.decode("utf-8", "replace")
        with open(log, "w") as f:
            f.write(out)
        if p.returncode == 0 and os.path.exists(dump):
            print(f"# ran {' '.join(cmd)} in {time.time() - t0:.1f}s")
            return True, ""
        tail = "\n".join(out.strip().splitlines()[-5:])
        why = f"`{' '.join(cmd)}` exited {p.returncode}: {tail}"
        time.sleep(2)
    return False, why


def row_slice(cfg, rows):
    return slice(0, cfg.P) if rows == "src" else slice(cfg.P, cfg.T)


def stream(T, key, cfg):
    """A dumped stream checkpoint as [B, T, last]."""
    t = T[key]
    return t.reshape(cfg.B, cfg.T, -1)


def mask_problems(T, s, sites):
    """Step s's dumped masks: site -> (shape, p, sel) with sel(mask) the
    region the model uses (None: all); each is 0/1 and keeps 1-p of that
    region within 6 standard deviations. Returns the problems found."""
    bad = []
    for site, (shape, p, sel) in sites.items():
        m = T.get(f"step{s}.mask.{site}")
        if m is None:
            if p > 0:
                bad.append(f"step {s}: mask.{site} missing with dropout p={p}")
            continue
        if m.numel() != math.prod(shape):
            bad.append(f"step {s}: mask.{site} has {m.numel()} elements, expected shape {shape}")
            continue
        m = m.reshape(shape)
        vals = (m if sel is None else sel(m)).double().reshape(-1)
        if not bool(((vals == 0) | (vals == 1)).all()):
            bad.append(f"step {s}: mask.{site} has values other than 0/1")
        kept, n = float(vals.mean()), vals.numel()
        sd = math.sqrt(max(p * (1 - p), 1e-12) / n)
        if abs(kept - (1 - p)) > 6 * sd + 1e-12:
            bad.append(f"step {s}: mask.{site} keeps {kept:.4f} of the used region, expected "
                       f"{1 - p:.4f} +- {6 * sd:.4f}")
    return bad


def init_problems(T, cfg, shapes, init_std):
    """The dump's initial parameters: every one of `shapes` present with its
    shape, the constants exact, the others N(0, init_std(name, cfg)) within
    6 standard errors; no parameter the reference lacks. Returns the
    problems found."""
    bad = []
    for n, shape in shapes.items():
        t = T.get("init." + n)
        if t is None:
            bad.append(f"init.{n} missing")
            continue
        if tuple(t.shape) != tuple(shape):
            bad.append(f"init.{n}: shape {tuple(t.shape)}, expected {shape}")
            continue
        std = init_std(n, cfg)
        if std is None:
            c = G.init_const(n)
            if not bool((t == c).all()):
                bad.append(f"init.{n}: expected all {c}")
        else:
            x = t.double().reshape(-1)
            k = x.numel()
            got = float(x.std())
            if abs(got / std - 1) > 6 / math.sqrt(2 * k) or abs(float(x.mean())) > 6 * std / math.sqrt(k):
                bad.append(f"init.{n}: mean {float(x.mean()):.3g} std {got:.5g}, expected N(0, {std:.5g})")
    extra = [k[5:] for k in T if k.startswith("init.") and k[5:] not in shapes]
    if extra:
        bad.append(f"dump has parameters the reference lacks: {extra[:4]}")
    return bad


def check_inputs(R, cfg, T, steps):
    """Tokens by MODEL.md's encoder-decoder data rule; masks 0/1 keeping
    about 1-p on the region each part uses; init constants and std."""
    bad = []
    corpus = TH.read_corpus(REPO, bad)
    B, Tn, Pn, C, H = cfg.B, cfg.T, cfg.P, cfg.C, cfg.H
    for s in steps:
        tokens = TH.dumped_tokens(T, s, B, Tn, bad)
        if tokens is None:
            continue
        ids, lab = tokens
        if corpus is not None:
            N = len(corpus)
            for b in range(B):
                g = s * B + b
                off = (g * Pn) % (N - Pn - 1)
                x = list(corpus[off:off + Pn])
                y = [x[Pn - 1 - (t % Pn)] for t in range(Tn - Pn)]
                want_in = x + [2] + y[:Tn - Pn - 1]
                want_lab = [0] * Pn + y
                if ids[b].tolist() != want_in or lab[b].tolist() != want_lab:
                    bad.append(f"step {s} sample {b}: tokens are not MODEL.md's source/target at offset {off}")
                    break
        tri = torch.tril(torch.ones(Tn - Pn, Tn - Pn, dtype=torch.bool))
        sites = {"dropout.embedding": ((B, Tn, C), cfg.hidden_dropout, None)}
        for part, n in (("encoder", cfg.Le), ("decoder", cfg.L)):
            rows = slice(0, Pn) if part == "encoder" else slice(Pn, Tn)
            for l in range(n):
                pre = f"{part}.layers.{l}."
                sel = ((lambda m: m[:, :, :Pn, :Pn]) if part == "encoder"
                       else (lambda m: m[:, :, Pn:, Pn:][..., tri]))
                sites[pre + "attention_dropout"] = ((B, H, Tn, Tn), cfg.attention_dropout, sel)
                out_sites = ["attention_output_dropout", "mlp_output_dropout"]
                if part == "decoder":
                    sites[pre + "cross_attention_dropout"] = ((B, H, Tn, Tn), cfg.attention_dropout,
                                                              lambda m: m[:, :, Pn:, :Pn])
                    out_sites.append("cross_attention_output_dropout")
                for site in out_sites:
                    sites[pre + site] = ((B, Tn, C), cfg.hidden_dropout, (lambda r: lambda m: m[:, r])(rows))
        bad += mask_problems(T, s, sites)
    bad += init_problems(T, cfg, R5.param_shapes(cfg), R5.init_std)
    R.test(f"{MODEL}: data (source, reversed target, BOS), masks and init follow MODEL.md", not bad,
           "; ".join(bad[:5]))


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
        chk(s, "logits[target rows]", lg[:, Pn:], ref["logits_tgt"], lcat)
        chk(s, "logits[source rows: head on enc]", lg[:, :Pn], ref["logits_src"], lcat)
    else:
        chk.missing(s, "logits")

    def parts_of(key, rows, cols):
        a = stream(T, key, cfg)[:, row_slice(cfg, rows)]
        if cols is None:
            return a, f"{rows} rows"
        return a[..., cols], f"{rows} rows, {'qkv'[int(cols[0]) // cfg.D % 3]} columns"
    return TH.compare_units(chk, T, s, ref, cats, grad_norm, parts_of,
                            R5.grad_inputs(cfg, ref["probe_grads"]), R5.param_shapes(cfg))


def check_coverage(R, T, steps, covered, cfg, names=None, model=MODEL):
    """Every dumped act/grad_input/grad/param tensor of every step was
    compared (a checkpoint added to the C dump needs a reference)."""
    names = set(R5.param_shapes(cfg) if names is None else names)
    left = []
    for k in T:
        m = re.match(r"step(\d+)\.(act|grad_input|grad|param)\.(.+)$", k)
        if not m:
            continue
        kind, name = m.group(2), m.group(3)
        if kind in ("grad", "param"):
            if name not in names:
                left.append(k)
        elif f"{kind}.{name}" not in covered:
            left.append(k)
    R.test(f"{model}: every dumped activation, grad_input, gradient and parameter has a reference",
           not left, f"{len(left)} not compared, e.g. {left[:4]}")


def check_pass_through(R, T, steps, cfg):
    """Each unit leaves the rows it does not own unchanged (MODEL.md: those
    rows are x + (+0)), bit for bit: the target rows through the encoder
    layers and the encoder's final LN; the source rows (enc) through every
    decoder layer; and the cross-attention's input on the source rows is
    enc itself, not LNx(enc)."""
    bad, n = [], 0
    for s in steps:
        def get(name):
            k = f"step{s}.act.{name}"
            return stream(T, k, cfg) if k in T else None
        emb, encf = get("embedding.output"), get("encoder.final_layernorm.output")
        if emb is None or encf is None:
            bad.append(f"step {s}: embedding.output or encoder.final_layernorm.output missing")
            continue
        pairs = [(f"encoder.layers.{l}.output", "tgt", emb, "embedding.output") for l in range(cfg.Le)]
        pairs.append(("encoder.final_layernorm.output", "tgt", emb, "embedding.output"))
        for l in range(cfg.L):
            pairs.append((f"decoder.layers.{l}.output", "src", encf, "encoder.final_layernorm.output"))
            pairs.append((f"decoder.layers.{l}.pre_cross_attn_layernorm.output", "src", encf,
                          "encoder.final_layernorm.output"))
        for name, rows, want, wname in pairs:
            got = get(name)
            n += 1
            if got is None:
                bad.append(f"step {s}: act.{name} missing")
                continue
            r = row_slice(cfg, rows)
            if not torch.equal(got[:, r], want[:, r]):
                d = float((got[:, r].double() - want[:, r].double()).abs().max())
                bad.append(f"step {s}: act.{name}[{rows} rows] != act.{wname}[{rows} rows] (max |diff| {d:.3g})")
    R.test(f"{MODEL}: rows a unit does not own pass through it bit for bit ({n} checkpoints)", not bad and n > 0,
           "; ".join(bad[:4]))
    # the branch outputs that feed a residual add are +0 on those rows
    # (MODEL.md: "set to +0 on the rows it does not change, before the
    # residual add"; the dumped checkpoints show them after that)
    bad, n = [], 0
    for s in steps:
        for part, n_layers, rows in (("encoder", cfg.Le, "tgt"), ("decoder", cfg.L, "src")):
            for l in range(n_layers):
                names = ["self_attention.dense.output", "mlp.dense_4h_to_h.output"]
                if part == "decoder":
                    names.append("cross_attention.dense.output")
                for nm in names:
                    k = f"step{s}.act.{part}.layers.{l}.{nm}"
                    n += 1
                    if k not in T:
                        bad.append(f"{k} missing")
                        continue
                    t = stream(T, k, cfg)[:, row_slice(cfg, rows)]
                    if not bool((t == 0).all()):
                        bad.append(f"{k}[{rows} rows]: max |x| {float(t.abs().max()):.3g}, expected +0")
    R.test(f"{MODEL}: branch outputs are +0 on the rows their unit does not own ({n} checkpoints)",
           not bad and n > 0, "; ".join(bad[:4]))


def check_run(R, path):
    got = TH.load_dump(R, MODEL, path, STEPS, R5.T5Config, "an encoder-decoder t5_ref covers",
                       R5.param_shapes)
    if got is None:
        return None
    T, cfg, steps, shapes = got
    print(f"# {MODEL}: V={cfg.V} T={cfg.T} (source P={cfg.P}, target {cfg.Tt}) C={cfg.C} H={cfg.H} "
          f"encoder layers={cfg.Le} decoder layers={cfg.L} F={cfg.F} B={cfg.B} tied={cfg.tied} "
          f"dropout hidden={cfg.hidden_dropout} attention={cfg.attention_dropout} lr={cfg.lr} "
          f"wd={cfg.weight_decay} clip={cfg.clip_grad}")
    check_inputs(R, cfg, T, steps)
    check_pass_through(R, T, steps, cfg)

    per_step, covered = TH.replay(R, MODEL, T, cfg, steps, shapes, R5.forward_backward, compare_step)
    check_coverage(R, T, steps, covered, cfg)
    return per_step, T, cfg


# ------------------------------------------------------ negative controls

def worst_step0(T, cfg, wrong, with_grads=False, fb=None, compare=None, shapes=None):
    """Step 0 from init with a wrong reference: the worst error/tolerance
    ratio over the dumped logits and activations (and the loss and
    gradients when with_grads), and where."""
    fb = fb or R5.forward_backward
    compare = compare or compare_step
    params = {n: T["init." + n].to(F64) for n in (shapes or R5.param_shapes(cfg))}
    ref = fb(params, cfg, T["step0.input_ids"], T["step0.labels"], TH.dumped_masks(T, 0),
             want_acts=True, wrong=wrong)
    rows = []

    class Sink:
        """compare_step's checker interface, keeping only the ratios."""

        def __call__(self, step, name, a, b, cat, slack=None):
            rows.append((TH.compare(a, b, cat, slack)["ratio"], name))

        def missing(self, step, name):
            rows.append((math.inf, name + " (missing)"))
    sink = Sink()
    compare(sink, T, 0, ref, cfg, ("scalar", "act", "grad"))
    if not with_grads:
        rows = [r for r in rows if not r[1].startswith(("grad", "loss"))]
    return max(rows) if rows else (0.0, "nothing compared")


def negative_controls(R, per_step, T, cfg):
    # a gradient element perturbed by a relative 1e-3
    name = "decoder.layers.0.cross_attention.query_key_value.weight"
    TH.perturbed_grad_flagged(R, MODEL, T, name, per_step[0]["grads"][name])
    # an activation element of a quarter of the largest magnitude, perturbed
    an = "decoder.layers.0.cross_attention.core_attention.output"
    a = stream(T, f"step0.act.{an}", cfg)[:, cfg.P:].clone().double().reshape(-1)
    ref_a = [t for r, _, t in per_step[0]["acts"][an] if r == "tgt"][0]
    TH.perturbed_act_flagged(R, MODEL, a, ref_a, lambda j: f"act.{an}[target rows, flat {j}]")
    # references with a plausible wrong encoder-decoder wiring
    for wrong, what, with_grads in (
            ("encoder_causal", "a causal encoder self-attention", False),
            ("cross_kv_lnx", "cross-attention keys/values from LNx(enc)", False),
            ("cross_kv_pre_final", "cross-attention keys/values from the encoder before its final LN", False),
            ("loss_all_rows", "the loss over the source rows' labels too", True)):
        ratio, where = worst_step0(T, cfg, wrong, with_grads)
        R.test(f"{MODEL}: negative control: reference with {what} is flagged (worst ratio {ratio:.3g} at {where})",
               ratio > 1.0, f"not flagged: worst ratio {ratio:.3g} at {where}")


# ------------------------------------------------------------------- main

def summarize(R):
    """The worst norm-wise relative error per category and mode."""
    best = {}
    for ratio, variant, mode, step, name, cat, ne, ma in R.rows:
        k = (mode, cat)
        if k not in best or ne > best[k][0]:
            best[k] = (ne, step, name, ratio)
    print("# worst norm-wise relative error per (mode, category): error, step, tensor, ratio to tolerance")
    for (mode, cat), (ne, step, name, ratio) in sorted(best.items()):
        print(f"#   {mode:<10} {cat:<10} {ne:9.2e}  step {step}  {name}  ({ratio:.3f})")


def main():
    t_start = time.time()
    R = Results()
    selftest_attention(R)
    selftest_finite_differences(R)
    selftest_structure(R)
    parity = os.environ.get("PARITY", "") or os.path.join(REPO, "build", "parity")
    parity = os.path.abspath(parity)
    if not os.access(parity, os.X_OK):
        R.test("parity train available", False,
               f"PARITY={parity!r} is not an executable; build it (make) and set PARITY=build/parity")
    else:
        with tempfile.TemporaryDirectory(prefix="parity-t5-torch-") as tmp:
            dump = os.path.join(tmp, MODEL + ".safetensors")
            ok, why = run_parity(parity, dump, os.path.join(tmp, MODEL + ".log"))
            if not ok:
                R.test(f"{MODEL}: parity train", False, why)
            else:
                res = check_run(R, dump)
                if res is not None:
                    negative_controls(R, *res)
                    TH.print_table("worst errors per category (ratio = error / tolerance; fail > 1)",
                                   R.rows, per_cat=3)
                    summarize(R)
    return TH.finish(R, NAME, time.time() - t_start)


if __name__ == "__main__":
    sys.exit(main())
