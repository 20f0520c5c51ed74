#!/usr/bin/env python3
"""names_check.py DIR - test_export_weights.sh's independent reading of
the exports it wrote into DIR (d<H>.st / u<H>.st: parity train --dump of
the same model, tied / untied; <scheme>-<H>, <scheme>-u<H>: the exports;
ck: a 2-step checkpoint), then the oracle opened from them.

The layouts are read as each backend's own code reads them, written here
from their documentation, not from parity's: hf-gpt2's Conv1D computes
x @ W + b and splits the 3C outputs into q | k | v, then each into heads
(GPT2Attention); nanogpt's nn.Linear computes x @ W.T + b and splits
likewise (CausalSelfAttention); megatron-core views linear_qkv's output
as [ng, (np/ng + 2) * hn] and splits each group into q, k, v
(SelfAttention.get_query_key_value_tensors). Parity's meaning is
MODEL.md's: qkv row h*3D + w*D + d (w: q, k, v). Prints "ok NAME" or
"not ok NAME" lines.
"""
import json
import os
import struct
import sys

import numpy as np

DIR = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from st_write import write_safetensors  # noqa: E402
sys.path.insert(0, os.environ.get("PARITY_PYTHON", os.path.join(os.path.dirname(HERE), "ref", "python")))
failed = 0


def check(cond, name, detail=""):
    global failed
    print(("ok " if cond else "not ok ") + name + ("" if cond else f": {detail}"))
    failed += not cond


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    meta = head.pop("__metadata__", {})
    out = {}
    for k, v in head.items():
        if v["dtype"] != "F32":  # a dump's token ids and masks: not parameters
            continue
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(data[b:e], dtype="<f4").reshape(v["shape"])
    return meta, out


def write_st(path, tensors, meta):
    write_safetensors(path, {k: (dt, a.shape, a.tobytes()) for k, (dt, a) in tensors.items()}, meta)


def q_k_v_parity(p, l, x, H):
    """MODEL.md: per head h, rows h*3D + w*D + d of query_key_value."""
    W = p[f"layers.{l}.self_attention.query_key_value.weight"].astype(np.float64)
    b = p[f"layers.{l}.self_attention.query_key_value.bias"].astype(np.float64)
    C = W.shape[1]
    D = C // H
    y = x @ W.T + b
    return [np.stack([y[:, h * 3 * D + w * D: h * 3 * D + w * D + D] for h in range(H)], 1)
            for w in range(3)]


def q_k_v_gpt2(y, H):
    """GPT2Attention / nanoGPT: y.split(C) into q, k, v, then view (n, H, D)."""
    C = y.shape[1] // 3
    return [y[:, w * C:(w + 1) * C].reshape(len(y), H, C // H) for w in range(3)]


def q_k_v_core(y, H):
    """get_query_key_value_tensors with ng = np = H: [n, ng, (1 + 2) * hn], split [hn, hn, hn]."""
    D = y.shape[1] // (3 * H)
    g = y.reshape(len(y), H, 3 * D)
    return [g[:, :, w * D:(w + 1) * D] for w in range(3)]


LIN = {"self_attention.dense": ("attn.c_proj", "self_attention.linear_proj"),
       "mlp.dense_h_to_4h": ("mlp.c_fc", "mlp.linear_fc1"),
       "mlp.dense_4h_to_h": ("mlp.c_proj", "mlp.linear_fc2")}
LNS = {"input_layernorm": ("ln_1", "input_layernorm"),
       "post_attention_layernorm": ("ln_2", "pre_mlp_layernorm")}


def check_layout(scheme, H, tied):
    meta_d, dump = read_st(os.path.join(DIR, f"{'d' if tied else 'u'}{H}.st"))
    meta, w = read_st(os.path.join(DIR, f"{scheme}-{'' if tied else 'u'}{H}", "model.safetensors"))
    cfg = json.loads(meta["config"])
    tag = f"{scheme} h{H} {'tied' if tied else 'untied'}"
    check(meta.get("parity.names") == scheme and cfg["heads"] == H, f"{tag}: metadata",
          f"{meta.get('parity.names')} heads {cfg['heads']}")
    init = {k[5:]: v for k, v in dump.items() if k.startswith("init.")}
    if scheme == "megatron-lm":
        same = set(w) == set(init) and all(np.array_equal(w[k], init[k]) for k in init)
        check(same, f"{tag}: parity's names and values", sorted(set(w) ^ set(init))[:4])
        return
    L = cfg["layers"]
    C = cfg["hidden"]
    rng = np.random.default_rng(H)
    x = rng.standard_normal((5, C))
    gpt2 = scheme in ("hf-gpt2", "nanogpt")
    lay = (lambda l: f"transformer.h.{l}.") if gpt2 else (lambda l: f"decoder.layers.{l}.")
    expect = set()
    bad = []

    def same(name, a, b):
        expect.add(name)
        if name not in w or not np.array_equal(a, b):
            bad.append(name)

    def close(what, a, b):
        if not np.allclose(a, b, rtol=1e-12, atol=1e-12):
            bad.append(what)

    emb = ("transformer.wte.weight", "transformer.wpe.weight") if gpt2 else \
        ("embedding.word_embeddings.weight", "embedding.position_embeddings.weight")
    same(emb[0], w.get(emb[0]), init["embedding.word_embeddings.weight"])
    same(emb[1], w.get(emb[1]), init["embedding.position_embeddings.weight"])
    lnf = "transformer.ln_f." if gpt2 else "decoder.final_layernorm."
    for p in ("weight", "bias"):
        same(lnf + p, w.get(lnf + p), init["final_layernorm." + p])
    head = "lm_head.weight" if gpt2 else "output_layer.weight"
    if not tied:
        same(head, w.get(head), init["output_layer.weight"])
    elif scheme == "nanogpt":  # its state_dict holds the tied head under both keys
        same(head, w.get(head), init["embedding.word_embeddings.weight"])
    for l in range(L):
        for ours, (g, c) in LNS.items():
            for p in ("weight", "bias"):
                n = lay(l) + (g if gpt2 else c) + "." + p
                same(n, w.get(n), init[f"layers.{l}.{ours}.{p}"])
        qkv = lay(l) + ("attn.c_attn" if gpt2 else "self_attention.linear_qkv")
        expect.update({qkv + ".weight", qkv + ".bias"})
        Wq, bq = w[qkv + ".weight"].astype(np.float64), w[qkv + ".bias"].astype(np.float64)
        if scheme == "hf-gpt2":
            check(Wq.shape == (C, 3 * C), f"{tag}: layer {l}'s c_attn is Conv1D [C, 3C]", Wq.shape)
            got = q_k_v_gpt2(x @ Wq + bq, H)
        elif scheme == "nanogpt":
            got = q_k_v_gpt2(x @ Wq.T + bq, H)
        else:
            got = q_k_v_core(x @ Wq.T + bq, H)
        for which, a, b in zip("qkv", got, q_k_v_parity(init, l, x, H)):
            close(f"layer {l} {which}", a, b)
        for ours, (g, c) in LIN.items():
            n = lay(l) + (g if gpt2 else c)
            expect.update({n + ".weight", n + ".bias"})
            Wp = init[f"layers.{l}.{ours}.weight"].astype(np.float64)
            W = w[n + ".weight"].astype(np.float64)
            xin = rng.standard_normal((3, Wp.shape[1]))
            y = xin @ W if scheme == "hf-gpt2" else xin @ W.T  # Conv1D or nn.Linear
            close(n, y, xin @ Wp.T)
            same(n + ".bias", w.get(n + ".bias"), init[f"layers.{l}.{ours}.bias"])
    check(not bad, f"{tag}: every tensor means what the scheme says", bad[:4])
    check(set(w) == expect, f"{tag}: exactly the scheme's names", sorted(set(w) ^ expect)[:4])


for H in (2, 4):
    for tied in (True, False):
        for s in ("megatron-lm", "megatron-core", "hf-gpt2", "nanogpt"):
            check_layout(s, H, tied)

meta, ck_w = read_st(os.path.join(DIR, "from-ck", "model.safetensors"))
_, ck = read_st(os.path.join(DIR, "ck", "model.safetensors"))
check(np.array_equal(ck_w["transformer.h.1.mlp.c_fc.weight"], ck["param.layers.1.mlp.dense_h_to_4h.weight"]),
      "--load's export holds the checkpoint's parameters")

# ---- the oracle from the exports -------------------------------------------------
import parity  # noqa: E402

MODEL = ["--model", "gpt-micro", "--num-attention-heads", "4", "--steps", "2"]


def golden_all(o):
    o.run_golden()
    return {n: o.golden(n).tobytes() for n in o.names()}


with parity.Oracle(*MODEL) as o:
    base = golden_all(o)
check(len(base) > 50, "the default golden run", len(base))


def same_run(name, *flags):
    try:
        with parity.Oracle(*MODEL, *flags) as o:
            got = golden_all(o)
    except parity.ParityError as e:
        check(False, name, str(e))
        return
    diff = [n for n in base if got.get(n) != base[n]]
    check(set(got) == set(base) and not diff, name + ": bit for bit the default golden run",
          diff[:3])


for s in ("megatron-lm", "megatron-core", "hf-gpt2", "nanogpt"):
    f = os.path.join(DIR, f"{s}-4", "model.safetensors")
    same_run(f"oracle --weights {s} --names {s}", "--weights", f, "--names", s)
    same_run(f"oracle --weights {s} (its parity.names)", "--weights", f)
    if s != "megatron-lm":  # megatron-lm's names are parity's dump names too: detected the same
        m, t = read_st(f)
        bare = os.path.join(DIR, f"bare-{s}.st")
        write_st(bare, {k: ("F32", v) for k, v in t.items()}, {})
        same_run(f"oracle --weights {s} (detected, no metadata)", "--weights", bare)

# --load: the checkpoint's two steps done, steps 2 and 3 named as parity train --load names them
with parity.Oracle("--model", "gpt-micro", "--steps", "4") as o:
    four = golden_all(o)
with parity.Oracle("--model", "gpt-micro", "--steps", "2", "--load", os.path.join(DIR, "ck")) as o:
    resumed = golden_all(o)
steps = [n for n in resumed if n.startswith("step")]
diff = [n for n in steps if four.get(n) != resumed[n]]
check(steps and all(n.startswith(("step2.", "step3.")) for n in steps) and not diff,
      "oracle --load: steps 2 and 3 bit for bit the 4-step run's", diff[:3] or steps[:2])


def refused(name, want, *flags):
    try:
        with parity.Oracle(*MODEL, *flags) as o:
            o.run_golden()
        check(False, name, "accepted")
    except parity.ParityError as e:
        check(want in str(e), name, f"message {str(e)!r} lacks {want!r}")


hf = os.path.join(DIR, "hf-gpt2-4", "model.safetensors")
meta, t = read_st(hf)
refused("oracle --names foo", "'foo'", "--weights", hf, "--names", "foo")
refused("oracle --names without --weights", "--weights", "--names", "hf-gpt2")
refused("oracle --load and --weights", "--load and --weights", "--weights", hf, "--load",
        os.path.join(DIR, "ck"))
refused("oracle --names other than the file's", "parity.names", "--weights", hf, "--names", "nanogpt")
refused("oracle --weights of another model", "transformer.h.1", "--weights", hf, "--num-layers", "1")


def variant(name, want, edit, meta_=None):
    tt = {k: ("F32", v) for k, v in t.items()}
    edit(tt)
    path = os.path.join(DIR, "bad.st")
    write_st(path, tt, meta if meta_ is None else meta_)
    refused(name, want, "--weights", path)


variant("a file missing a parameter", "'transformer.h.1.ln_2.bias'",
        lambda tt: tt.pop("transformer.h.1.ln_2.bias"))
variant("a wrong shape", "transformer.h.0.attn.c_attn.weight",
        lambda tt: tt.update({"transformer.h.0.attn.c_attn.weight":
                              ("F32", np.ascontiguousarray(t["transformer.h.0.attn.c_attn.weight"].T))}))
variant("a name the scheme does not know", "'transformer.h.0.attn.bias'",
        lambda tt: tt.update({"transformer.h.0.attn.bias": ("F32", np.zeros(4, np.float32))}))
variant("a name no scheme knows (detected)", "'h.0.attn.bias'",
        lambda tt: tt.update({"h.0.attn.bias": ("F32", np.zeros(4, np.float32))}), {})
variant("another dtype", "F64",
        lambda tt: tt.update({"transformer.wpe.weight": ("F64", t["transformer.wpe.weight"].astype("<f8"))}))
variant("a tied head that is not the embedding", "lm_head.weight",
        lambda tt: tt.update({"lm_head.weight": ("F32", t["transformer.wte.weight"] + 1)}))
variant("an unknown parity.names", "'gpt-3'", lambda tt: None, {"parity.names": "gpt-3"})

sys.exit(1 if failed else 0)
