#!/usr/bin/env python3
"""test_parity_torch.py - parity.rankfile and parity.torch (ref/python):

  - `import parity` and `import parity.rankfile` import no torch;
  - dropout_mask is parity's mask bit for bit: every step<s>.mask.* of a
    `parity train --model gpt-micro --steps 2 --dump` file, whole and in
    several slices (a tp rank's heads, an sp rank's positions, index
    lists, ints, negative indices), and Dropout applies it (1/(1-p) in
    float32, dropped elements +0, the same in the backward);
  - RankWriter's file parses back with exactly the format's metadata keys,
    its placements (p, microbatch's @mb<m> suffix, scale, flat), BF16 bits,
    and refuses bad input naming the field;
  - Capture on a tiny model named as parity's sites writes the expected
    tensor names and placements (Megatron styles on a dp x tp mesh, sp,
    a plan override, prefix and layer_offset), and its grad_input is
    autograd's gradient of the unit's input; logits, scalars and flat
    shards get their placements, one device none;
  - Capture on a tiny hf-gpt2 / nanogpt model with a colwise fused c_attn
    writes Shard(d, strips=3) (megatron's per-head query_key_value none),
    and RankWriter reads DTensor's _StridedShard and refuses bad strips.

Run from the repository root: python3 tests/torch/test_parity_torch.py
($PARITY: the program, default build/parity). Prints
"RESULT test_parity_torch.py: N passed, M failed"; a missing torch is a
printed SKIP.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

NAME = "test_parity_torch.py"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PKG = os.path.join(REPO, "ref", "python")
PARITY = os.environ.get("PARITY", os.path.join(REPO, "build", "parity"))

try:
    import torch
except ImportError:
    print("SKIP: torch is not installed (python3-torch)")
    print(f"RESULT {NAME}: 0 passed, 0 failed")
    sys.exit(0)

import numpy as np  # noqa: E402

sys.path.insert(0, PKG)
sys.path.insert(0, HERE)
from tally import Tally  # noqa: E402
from parity.rankfile import RankWriter, read_rank_file, RankFileError  # noqa: E402
from parity.torch import Capture, Dropout, dropout_mask  # noqa: E402

T = Tally(NAME)
tmp = tempfile.mkdtemp(prefix="parity_torch_")


def raises(what, fn, *needles):
    try:
        fn()
    except RankFileError as e:
        msg = str(e)
        T.check(what, all(n in msg for n in needles), f"message {msg!r} lacks {needles}")
        return
    except Exception as e:  # noqa: BLE001 - any other exception is the failure reported
        T.check(what, False, f"raised {type(e).__name__}: {e}, not a RankFileError")
        return
    T.check(what, False, "nothing raised")


# ------------------------------------------------------- no torch by import
for mod in ("parity", "parity.rankfile"):
    r = subprocess.run([sys.executable, "-c", f"import sys, {mod}; print('torch' in sys.modules)"],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=PKG))
    T.check(f"import {mod} does not import torch", r.stdout.strip() == "False",
            r.stdout + r.stderr)

# ------------------------------------------------------ masks vs the dump
dump = os.path.join(tmp, "run.safetensors")
r = subprocess.run([PARITY, "train", "--model", "gpt-micro", "--steps", "2", "--dump", dump],
                   capture_output=True, text=True)
T.check("parity train --dump for the masks", r.returncode == 0, r.stderr[-500:])
if r.returncode == 0:
    d = read_rank_file(dump)
    cfg = json.loads(d.metadata["config"])
    masks = {k: v for k, v in d.tensors.items() if ".mask." in k}
    T.check("the dump has masks of every site, two steps", len(masks) == 14, sorted(masks))
    for k, v in sorted(masks.items()):
        step = int(re.match(r"step([0-9]+)\.", k).group(1))
        site = k.split(".mask.", 1)[1]
        m = re.match(r"layers\.([0-9]+)\.(.+)$", site)
        layer, sn = (int(m.group(1)), m.group(2)) if m else (None, site)
        p = cfg["dropouts"]["attention" if sn == "attention_dropout" else "hidden"]
        want = v.astype(bool)
        slices = [None]
        if v.ndim == 4:  # [B, H, T, T]: tp rank 1's head, a query range, one sequence
            slices += [(slice(None), slice(1, 2)), (2, slice(None), slice(5, 12)),
                       (slice(None), -1, [0, 7, 15], slice(3, None))]
        else:            # [B, T, C]: an sp rank's positions, a 2-D column, index lists
            slices += [(slice(None), slice(8, 16)), (slice(0, 2), slice(None), range(4, 12)),
                       ([3, 0], -1, slice(0, 16, 5))]
        bad = []
        for ix in slices:
            got = dropout_mask(cfg["seed"], sn, layer, step, v.shape, p, ix)
            w = want if ix is None else want[ix]
            if got.shape != w.shape or not np.array_equal(got, w):
                bad.append(ix)
        T.check(f"dropout_mask = {k} (whole and {len(slices) - 1} slices)", not bad,
                f"differs at slices {bad}")
    # Dropout: the mask applied, forward and backward
    k = "step1.mask.layers.0.mlp_output_dropout"
    keep = torch.from_numpy(masks[k].astype(bool))
    drop = Dropout(cfg["seed"], "mlp_output_dropout", layer=0, p=cfg["dropouts"]["hidden"])
    drop.step = 1
    x = torch.randn(masks[k].shape, dtype=torch.float32, requires_grad=True)
    y = drop(x)
    scale = np.float32(1) / (np.float32(1) - np.float32(cfg["dropouts"]["hidden"]))
    want = torch.where(keep, x.detach() * float(scale), torch.zeros(()))
    T.check("Dropout forward: x * 1/(1-p) where kept, +0 where dropped",
            torch.equal(y.detach(), want) and not torch.signbit(y.detach()[~keep]).any())
    y.backward(torch.ones_like(y))
    T.check("Dropout backward: 1/(1-p) where kept, 0 where dropped",
            torch.equal(x.grad, torch.where(keep, torch.full((), float(scale)), torch.zeros(()))))
    xs = x.detach()[:, 8:16]
    ys = drop(xs, index=(slice(None), slice(8, 16)), global_shape=masks[k].shape)
    T.check("Dropout on an sp rank's slice draws the golden slice",
            torch.equal(ys, want[:, 8:16]))

# ------------------------------------------------------------- RankWriter
w = RankWriter({"pp": 2, "dp": 2, "tp": 2}, {"pp": 1, "dp": 0, "tp": 1}, names="hf-gpt2",
               precision="bf16")
T.check("RankWriter.rank is row-major over the mesh", w.rank == 5, str(w.rank))
g = np.arange(12, dtype=np.float32).reshape(4, 3)
w.put("step0.grad.transformer.h.0.mlp.c_fc.weight", g, p=["Replicate()", "Replicate()", "Shard(1)"])
act = torch.randn(2, 4, 8).to(torch.bfloat16)
w.put("step0.act.layers.1.output", act, p=["Replicate()", "Shard(0)", "Replicate()"],
      microbatch=(3, 4))
w.put("step0.grad_input.layers.1", torch.ones(2, 4, 8), p=["Replicate()", "Shard(0)", "Shard(1)"],
      scale=0.5)
w.put("step0.loss", torch.tensor(1.5))
w.put_flat("step0.grad.flat.bucket0", np.arange(7, dtype=np.float32), 5,
           [("step0.grad.transformer.h.0.ln_1.weight", (8,), None),
            ("step0.grad.transformer.h.0.ln_1.bias", [8], ["Replicate()", "Replicate()",
                                                          "Replicate()"])],
           p=["Replicate()", "Shard(0)", "Replicate()"])
path = w.save(os.path.join(tmp, "rank5.safetensors"))
T.check("save leaves no temp file", sorted(os.listdir(tmp)) == ["rank5.safetensors", "run.safetensors"]
        or sorted(os.listdir(tmp)) == ["rank5.safetensors"], str(os.listdir(tmp)))
rf = read_rank_file(path)
T.check("metadata keys are exactly the format's",
        sorted(rf.metadata) == ["parity.coords", "parity.format", "parity.mesh", "parity.names",
                                "parity.placements", "parity.precision"], str(sorted(rf.metadata)))
T.check("format, names, precision", (rf.metadata["parity.format"], rf.names, rf.precision)
        == ("1", "hf-gpt2", "bf16"))
T.check("mesh in mesh order, coords", list(rf.mesh.items()) == [("pp", 2), ("dp", 2), ("tp", 2)]
        and rf.coords == {"pp": 1, "dp": 0, "tp": 1}, f"{rf.mesh} {rf.coords}")
T.check("tensor names (the microbatch's @mb suffix)", sorted(rf.tensors) == sorted([
    "step0.grad.transformer.h.0.mlp.c_fc.weight", "step0.act.layers.1.output@mb3",
    "step0.grad_input.layers.1", "step0.loss", "step0.grad.flat.bucket0"]), str(sorted(rf.tensors)))
T.check("values round-trip", np.array_equal(rf.tensors["step0.grad.transformer.h.0.mlp.c_fc.weight"], g)
        and rf.tensors["step0.loss"].shape == (1,) and rf.tensors["step0.loss"][0] == 1.5)
with open(path, "rb") as f:
    n = int.from_bytes(f.read(8), "little")
    header = json.loads(f.read(n))
T.check("a bf16 tensor is BF16 with torch's bits",
        header["step0.act.layers.1.output@mb3"]["dtype"] == "BF16" and np.array_equal(
            rf.raw_bf16["step0.act.layers.1.output@mb3"],
            act.view(torch.int16).numpy().view(np.uint16)), header["step0.act.layers.1.output@mb3"])
T.check("the header is padded to 8 bytes", n % 8 == 0, str(n))
pl = rf.placements
T.check("placements: p, microbatch, scale, flat", pl == {
    "step0.grad.transformer.h.0.mlp.c_fc.weight": {"p": ["Replicate()", "Replicate()", "Shard(1)"]},
    "step0.act.layers.1.output@mb3": {"p": ["Replicate()", "Shard(0)", "Replicate()"],
                                      "microbatch": [3, 4]},
    "step0.grad_input.layers.1": {"p": ["Replicate()", "Shard(0)", "Shard(1)"], "scale": 0.5},
    "step0.grad.flat.bucket0": {"flat": {"offset": 5, "members": [
        {"name": "step0.grad.transformer.h.0.ln_1.weight", "shape": [8],
         "p": ["Replicate()", "Replicate()", "Replicate()"]},
        {"name": "step0.grad.transformer.h.0.ln_1.bias", "shape": [8],
         "p": ["Replicate()", "Replicate()", "Replicate()"]}]},
        "p": ["Replicate()", "Shard(0)", "Replicate()"]}}, json.dumps(pl, indent=1))
raises("bad placement refused by name", lambda: w.put("step1.grad.x", g, p=["Shard(0)", "Nope", "Replicate()"]),
       "step1.grad.x", "p[1]", "Nope")
raises("p of the wrong length refused", lambda: w.put("step1.grad.x", g, p=["Shard(0)"]),
       "p has 1 entries", "3 axes")
raises("Shard of an axis the tensor lacks refused", lambda: w.put("step1.grad.x", g,
       p=["Shard(2)", "Replicate()", "Replicate()"]), "Shard(2) of a 2-axis tensor")
raises("a tensor put twice refused", lambda: w.put("step0.loss", g), "step0.loss", "put twice")
raises("a name without <when>. refused", lambda: w.put("grad.x", g), "grad.x", "step<s>")
raises("a step above the judge's 999999 refused", lambda: w.put("step1000000.grad.x", g),
       "step1000000.grad.x", "999999")
T.check("step 999999 accepted (the judge's largest)", w.put("step999999.lr", np.ones(1, np.float32))
        == "step999999.lr")
for dt in (np.int8, np.int16, np.uint16, np.uint32, np.uint64):
    raises(f"dtype {np.dtype(dt).name} refused (the judge reads only I32, I64, U8, BOOL integers)",
           lambda: w.put("step1.input_ids", np.zeros(4, dt)), "step1.input_ids", np.dtype(dt).name,
           "int32, int64")
for dt in (np.int32, np.int64, np.uint8, np.bool_):
    T.check(f"dtype {np.dtype(dt).name} accepted (the judge reads it)",
            w.put(f"step2.mask_{np.dtype(dt).name}", np.zeros(4, dt)) == f"step2.mask_{np.dtype(dt).name}")
raises("a coordinate outside the mesh refused", lambda: RankWriter({"tp": 2}, {"tp": 2}),
       "coords['tp']", "0..1")
raises("coords missing an axis refused", lambda: RankWriter({"dp": 2, "tp": 2}, {"tp": 0}),
       "coords", "one coordinate per mesh axis")
raises("an unknown naming scheme refused", lambda: RankWriter({}, {}, names="hf"), "names", "hf-gpt2")
raises("microbatch m >= M refused", lambda: w.put("step1.act.x", g, microbatch=(4, 4)),
       "microbatch (4, 4)")
raises("a flat offset past the members refused", lambda: w.put_flat(
    "step1.grad.flat", np.ones(3, np.float32), 16, [("step1.grad.a", (4, 4), None)]), "offset 16")


# ---------------------------------------------------------------- Capture
class Lin(torch.nn.Linear):
    pass


class Attn(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.query_key_value = torch.nn.Linear(c, 3 * c)
        self.dense = torch.nn.Linear(c, c)

    def forward(self, x):
        return self.dense(self.query_key_value(x)[..., : x.shape[-1]])


class Mlp(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.dense_h_to_4h = torch.nn.Linear(c, 4 * c)
        self.dense_4h_to_h = torch.nn.Linear(4 * c, c)

    def forward(self, x):
        return self.dense_4h_to_h(torch.nn.functional.gelu(self.dense_h_to_4h(x)))


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = torch.nn.LayerNorm(c)
        self.self_attention = Attn(c)
        self.post_attention_layernorm = torch.nn.LayerNorm(c)
        self.mlp = Mlp(c)

    def forward(self, x):
        x = x + self.self_attention(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Tiny(torch.nn.Module):
    def __init__(self, c=8, v=16, layers=2):
        super().__init__()
        self.embedding = torch.nn.Embedding(v, c)
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(layers))
        self.final_layernorm = torch.nn.LayerNorm(c)

    def forward(self, ids):
        x = self.embedding(ids)
        for layer in self.layers:
            x = layer(x)
        return self.final_layernorm(x) @ self.embedding.weight.t()


def run_capture(mesh, coords, steps=1, mbs=None, **kw):
    torch.manual_seed(0)
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    wr = RankWriter(mesh, coords)
    cap = Capture(wr, model, **kw)
    cap.params(-1)
    seen = {}
    for s in range(steps):
        cap.step(s)
        for mb in (range(mbs) if mbs else [None]):
            if mb is not None:
                cap.microbatch(mb, mbs)
            ids = torch.randint(0, 16, (2, 4))
            cap.batch(ids, ids)
            x0 = []
            h = model.layers[0].register_forward_pre_hook(
                lambda m, i: (i[0].retain_grad(), x0.append(i[0]))[-1] and None)
            logits = model(ids)
            h.remove()
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 16), ids.reshape(-1))
            loss.backward()
            seen[(s, mb)] = x0[0].grad.clone()
        cap.microbatch(None)
        if not mbs:
            cap.loss(loss)
        cap.grads(s)
        opt.step()
        opt.zero_grad()
        cap.params(s)
        cap.optimizer_state(opt, s)
    cap.close()
    return read_rank_file(wr.save(os.path.join(tmp, f"cap{wr.rank}.safetensors"))), seen


rf, seen = run_capture({"dp": 2, "tp": 2}, {"dp": 1, "tp": 0})
names = set(rf.tensors)
want_acts = ["embedding", "layers.0.input_layernorm", "layers.0.self_attention.query_key_value",
             "layers.0.self_attention.dense", "layers.0.post_attention_layernorm",
             "layers.0.mlp.dense_h_to_4h", "layers.0.mlp.dense_4h_to_h", "layers.0",
             "layers.1", "final_layernorm"]
T.check("Capture: act.<site>.output of every site", all(f"step0.act.{a}.output" in names
                                                        for a in want_acts),
        str(sorted(n for n in names if ".act." in n)))
T.check("Capture: grad_input of every layer and the head", {"step0.grad_input.layers.0",
        "step0.grad_input.layers.1", "step0.grad_input.head"} <= names)
nparam = len(list(Tiny().parameters()))
for when in ("init.", "step0.param.", "step0.grad.", "step0.exp_avg.", "step0.exp_avg_sq."):
    got = [n for n in names if n.startswith(when)]
    T.check(f"Capture: {when}<param> of every parameter", len(got) == nparam,
            f"{len(got)} of {nparam}: {sorted(got)}")
T.check("Capture: the batch and the loss", {"step0.input_ids", "step0.labels", "step0.loss"} <= names)
P = rf.placements
expect = {
    "step0.act.layers.0.self_attention.query_key_value.output": ["Shard(0)", "Shard(-1)"],
    "step0.act.layers.0.self_attention.dense.output": ["Shard(0)", "Replicate()"],
    "step0.act.layers.0.mlp.dense_h_to_4h.output": ["Shard(0)", "Shard(-1)"],
    "step0.act.layers.0.output": ["Shard(0)", "Replicate()"],
    "init.layers.0.self_attention.query_key_value.weight": ["Replicate()", "Shard(0)"],
    "init.layers.0.self_attention.query_key_value.bias": ["Replicate()", "Shard(0)"],
    "step0.grad.layers.1.mlp.dense_4h_to_h.weight": ["Replicate()", "Shard(1)"],
    "step0.grad.layers.1.mlp.dense_4h_to_h.bias": ["Replicate()", "Replicate()"],
    "step0.exp_avg.layers.0.input_layernorm.weight": ["Replicate()", "Replicate()"],
    "step0.input_ids": ["Shard(0)", "Replicate()"],
    "step0.loss": ["Partial(sum)", "Replicate()"],
}
bad = {k: P.get(k, {}).get("p") for k, v in expect.items() if P.get(k, {}).get("p") != v}
T.check("Capture: Megatron placements on dp x tp", not bad, str(bad))
T.check("Capture: grad_input is scaled 1/dp", P["step0.grad_input.layers.0"] ==
        {"p": ["Shard(0)", "Replicate()"], "scale": 0.5}, str(P["step0.grad_input.layers.0"]))
T.check("Capture: the loss is scaled 1/dp", P["step0.loss"].get("scale") == 0.5)
T.check("Capture: grad_input.layers.0 is autograd's gradient of layer 0's input",
        np.array_equal(rf.tensors["step0.grad_input.layers.0"], seen[(0, None)].numpy()))

rf, seen = run_capture({"tp": 2}, {"tp": 1}, steps=2, mbs=2, sp=True,
                       plan={"layers.*.mlp.dense_h_to_4h": "replicate"}, layer_offset=2)
P, names = rf.placements, set(rf.tensors)
T.check("Capture: microbatches and steps get @mb<m> names",
        {"step0.act.layers.2.output@mb0", "step0.act.layers.2.output@mb1",
         "step1.act.layers.3.output@mb1", "step1.grad_input.head@mb1"} <= names,
        str(sorted(n for n in names if "@mb" in n)[:8]))
T.check("Capture: layer_offset renames layers", "init.layers.3.mlp.dense_4h_to_h.weight" in names
        and not any(".layers.0." in n for n in names))
expect = {
    "step0.act.layers.2.self_attention.dense.output@mb0": {"p": ["Shard(1)"], "microbatch": [0, 2]},
    "step0.act.layers.2.input_layernorm.output@mb1": {"p": ["Shard(1)"], "microbatch": [1, 2]},
    "step0.act.layers.2.self_attention.query_key_value.output@mb1":
        {"p": ["Shard(-1)"], "microbatch": [1, 2]},
    "step1.grad_input.layers.3@mb0": {"p": ["Shard(1)"], "microbatch": [0, 2]},
    "init.layers.2.mlp.dense_h_to_4h.weight": {"p": ["Replicate()"]},
    "init.layers.2.mlp.dense_4h_to_h.weight": {"p": ["Shard(1)"]},
}
bad = {k: P.get(k) for k, v in expect.items() if P.get(k) != v}
T.check("Capture: sp placements, the plan's override, the microbatch", not bad, str(bad))
T.check("Capture: a microbatch's grad_input is its own gradient",
        np.array_equal(rf.tensors["step1.grad_input.layers.2@mb1"], seen[(1, 1)].numpy()))

# logits, scalars and flat shards (what the backends in tests/torch/backends put)
torch.manual_seed(0)
model = Tiny()
wr = RankWriter({"dp": 2, "tp": 2}, {"dp": 0, "tp": 1})
cap = Capture(wr, model)
cap.scalar("lr", 1e-3)  # no step yet: nothing written
cap.step(0).microbatch(1, 2)
cap.logits(torch.zeros(1, 4, 8))
cap.microbatch(None)
cap.logits(torch.zeros(2, 4, 16), vocab_parallel=False)
cap.scalar("grad_norm", torch.tensor(1.5, dtype=torch.float64))
members = [("layers.0.mlp.dense_h_to_4h.weight", model.layers[0].mlp.dense_h_to_4h.weight),
           ("final_layernorm.bias", (8,))]
cap.flat("exp_avg", 0, "b0", torch.arange(5.0), 250, members)
cap.flat("param", -1, "b0", torch.arange(5.0), 0, members)
try:
    cap.flat("weights", 0, "b", torch.zeros(1), 0, members)
    T.check("Capture.flat refuses an unknown kind", False, "nothing raised")
except ValueError as e:
    T.check("Capture.flat refuses an unknown kind", "'weights'" in str(e), str(e))
rf = read_rank_file(wr.save(os.path.join(tmp, "extras.safetensors")))
P = rf.placements
T.check("Capture.logits: vocab-cut on tp, batch on dp, the microbatch's name",
        P.get("step0.logits@mb1") == {"p": ["Shard(0)", "Shard(-1)"], "microbatch": [1, 2]}
        and P.get("step0.logits") == {"p": ["Shard(0)", "Replicate()"]}, str(P.get("step0.logits@mb1")))
T.check("Capture.scalar: float32 [1], replicated, only inside a step",
        rf.tensors["step0.grad_norm"].dtype == np.float32 and rf.tensors["step0.grad_norm"].tolist() == [1.5]
        and P["step0.grad_norm"] == {"p": ["Replicate()", "Replicate()"]}
        and not any(n.endswith(".lr") for n in rf.tensors), str(sorted(rf.tensors)))
fl = P.get("step0.exp_avg.flat.b0", {})
T.check("Capture.flat: members named and placed as params() would, the buffer cut on dp",
        fl.get("p") == ["Shard(0)", "Replicate()"] and fl.get("flat", {}).get("offset") == 250
        and fl["flat"]["members"] == [
            {"name": "step0.exp_avg.layers.0.mlp.dense_h_to_4h.weight", "shape": [32, 8],
             "p": ["Replicate()", "Shard(0)"]},
            {"name": "step0.exp_avg.final_layernorm.bias", "shape": [8], "p": ["Replicate()", "Replicate()"]}]
        and "init.flat.b0" in rf.tensors, str(fl))
wr = RankWriter({}, {})
cap = Capture(wr, Tiny())
cap.params(-1)
cap.step(0)
cap.loss(torch.tensor(2.0))
cap.logits(torch.zeros(2, 4, 16))
rf = read_rank_file(wr.save(os.path.join(tmp, "one.safetensors")))
T.check("Capture on one device (mesh {}): no placement entries", rf.placements == {}
        and {"init.final_layernorm.weight", "step0.loss", "step0.logits"} <= set(rf.tensors),
        str(rf.placements))

# --- a fused q | k | v (the GPT-2 schemes' c_attn): a tp rank's block is
# its part of each of the three strips: Shard(d, strips=3) (RANKFILES.md)


class Conv1D(torch.nn.Module):  # HF's [in, out] linear: the type name is what Capture reads
    def __init__(self, nin, nout):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(nin, nout))
        self.bias = torch.nn.Parameter(torch.randn(nout))

    def forward(self, x):
        return x @ self.weight + self.bias


def gpt2_like(linear):
    """transformer.h.0.attn.{c_attn, c_proj}, the local blocks of tp rank 1 of 2 (C 8)."""
    attn = torch.nn.Module()
    attn.c_attn, attn.c_proj = linear(8, 12), linear(4, 8)
    h0 = torch.nn.Module()
    h0.attn = attn
    m = torch.nn.Module()
    m.transformer = torch.nn.Module()
    m.transformer.h = torch.nn.ModuleList([h0])
    return m


def nn_linear(nin, nout):
    return torch.nn.Linear(nin, nout)


for names, linear, plan, wd in [("hf-gpt2", Conv1D, None, 1), ("nanogpt", nn_linear, None, 0),
                                ("auto", Conv1D, {"*.c_attn": "colwise", "*.c_proj": "rowwise"}, 1)]:
    wr = RankWriter({"dp": 2, "tp": 2}, {"dp": 0, "tp": 1}, names=names)
    cap = Capture(wr, gpt2_like(linear), plan=plan,
                  acts={"transformer.h.0.attn.c_attn": "act.layers.0.self_attention.query_key_value.output"})
    cap.params(-1)
    cap.step(0)
    cap.model.transformer.h[0].attn.c_attn(torch.randn(2, 3, 8))
    P = read_rank_file(wr.save(os.path.join(tmp, f"fused_{names}.safetensors"))).placements
    a = "init.transformer.h.0.attn."
    T.check(f"Capture {names}{' (a plan)' if plan else ''}: colwise c_attn weight and bias "
            f"Shard(d, strips=3), its output Shard(-1, strips=3); c_proj rowwise plain",
            P[a + "c_attn.weight"]["p"] == ["Replicate()", f"Shard({wd}, strips=3)"]
            and P[a + "c_attn.bias"]["p"] == ["Replicate()", "Shard(0, strips=3)"]
            and P["step0.act.layers.0.self_attention.query_key_value.output"]["p"]
            == ["Shard(0)", "Shard(-1, strips=3)"]
            and P[a + "c_proj.weight"]["p"] == ["Replicate()", f"Shard({1 - wd})"]
            and P[a + "c_proj.bias"]["p"] == ["Replicate()", "Replicate()"], str(P))
wr = RankWriter({"dp": 2, "tp": 2}, {"dp": 0, "tp": 1})
qkv = torch.nn.Module()
qkv.layers = torch.nn.ModuleList([torch.nn.Module()])
qkv.layers[0].self_attention = torch.nn.Module()
qkv.layers[0].self_attention.query_key_value = torch.nn.Linear(8, 12)
Capture(wr, qkv).params(-1)
P = read_rank_file(wr.save(os.path.join(tmp, "perhead.safetensors"))).placements
T.check("Capture megatron-lm: the per-head query_key_value is a plain Shard(0) (whole heads contiguous)",
        P["init.layers.0.self_attention.query_key_value.weight"]["p"] == ["Replicate()", "Shard(0)"]
        and P["init.layers.0.self_attention.query_key_value.bias"]["p"] == ["Replicate()", "Shard(0)"], str(P))
wr = RankWriter({"tp": 2}, {"tp": 0})
wr.put("init.x", np.zeros((4, 6), np.float32), p=["_StridedShard(dim=1, sf=3)"])
wr.put("init.y", np.zeros((6,), np.float32), p=["Shard(-1,strips=2)"])
P = read_rank_file(wr.save(os.path.join(tmp, "strided.safetensors"))).placements
T.check("RankWriter: DTensor's _StridedShard(dim=1, sf=3) is Shard(1, strips=3); 'Shard(-1,strips=2)' normalized",
        P["init.x"]["p"] == ["Shard(1, strips=3)"] and P["init.y"]["p"] == ["Shard(-1, strips=2)"], str(P))
raises("strips=0 refused", lambda: wr.put("init.z", np.zeros(6, np.float32), p=["Shard(0, strips=0)"]),
       "init.z", "strips must be an integer >= 1")
raises("strips not dividing the block refused", lambda: wr.put("init.z", np.zeros(7, np.float32),
                                                               p=["Shard(0, strips=3)"]),
       "init.z", "7 positions, not a multiple of its 3 strips")
raises("a malformed strips refused", lambda: wr.put("init.z", np.zeros(6, np.float32), p=["Shard(0, strips=x)"]),
       "init.z", "Shard(d, strips=k)")

sys.exit(T.finish())
