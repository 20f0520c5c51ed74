#!/usr/bin/python3
"""rename.py DUMP OUT SCHEME [WRONG...] - a `parity train --dump` file's
tensors as a backend in another naming scheme holds them (include/parity/
names.h: megatron-core, hf-gpt2, nanogpt), for tests/cli/test_judge.sh: every
parameter tensor (init.<p>, step<s>.{param,grad,exp_avg,exp_avg_sq}.<p>)
renamed, and relaid where the scheme lays it out otherwise: hf-gpt2's
Conv1D linears transposed to [in, out], the GPT-2 schemes' fused c_attn
ordered q | k | v (of every head) instead of parity's per-head q, k, v.
nanoGPT's tied lm_head.weight is written too (its state_dict holds it),
for init. and param. tensors. cut.py then cuts OUT as it cuts a dump,
reading the metadata this writes: "names" (the scheme), "parity_of" (each
renamed key's parity name, for cut.py's placement rules) and "transposed"
(the keys held [in, out], whose tensor-parallel cut is then Shard(1)).

The table is this test's own, written from the backends' documentation
(names.h quotes it), independently of parity's names.c.

WRONG: a backend bug to plant, on every tensor of one parity parameter:
  transpose:PARAM   a Conv1D weight written in nn.Linear's [out, in]
  qk:PARAM          the fused qkv's q and k blocks swapped
  name:PARAM        the scheme's name misspelt (".weight" -> ".wieght")
"""
import json, sys
import numpy as np
sys.path.insert(0, __import__("os").path.dirname(__file__))
from cut import load, save

# parity's name in a layer, megatron-core's, the GPT-2 schemes', linear, qkv
LAYER = [
    ("input_layernorm.weight", "input_layernorm.weight", "ln_1.weight", 0, 0),
    ("input_layernorm.bias", "input_layernorm.bias", "ln_1.bias", 0, 0),
    ("self_attention.query_key_value.weight", "self_attention.linear_qkv.weight", "attn.c_attn.weight", 1, 1),
    ("self_attention.query_key_value.bias", "self_attention.linear_qkv.bias", "attn.c_attn.bias", 0, 1),
    ("self_attention.dense.weight", "self_attention.linear_proj.weight", "attn.c_proj.weight", 1, 0),
    ("self_attention.dense.bias", "self_attention.linear_proj.bias", "attn.c_proj.bias", 0, 0),
    ("post_attention_layernorm.weight", "pre_mlp_layernorm.weight", "ln_2.weight", 0, 0),
    ("post_attention_layernorm.bias", "pre_mlp_layernorm.bias", "ln_2.bias", 0, 0),
    ("mlp.dense_h_to_4h.weight", "mlp.linear_fc1.weight", "mlp.c_fc.weight", 1, 0),
    ("mlp.dense_h_to_4h.bias", "mlp.linear_fc1.bias", "mlp.c_fc.bias", 0, 0),
    ("mlp.dense_4h_to_h.weight", "mlp.linear_fc2.weight", "mlp.c_proj.weight", 1, 0),
    ("mlp.dense_4h_to_h.bias", "mlp.linear_fc2.bias", "mlp.c_proj.bias", 0, 0),
]
MODEL = [
    ("embedding.word_embeddings.weight", "embedding.word_embeddings.weight", "transformer.wte.weight"),
    ("embedding.position_embeddings.weight", "embedding.position_embeddings.weight", "transformer.wpe.weight"),
    ("final_layernorm.weight", "decoder.final_layernorm.weight", "transformer.ln_f.weight"),
    ("final_layernorm.bias", "decoder.final_layernorm.bias", "transformer.ln_f.bias"),
    ("output_layer.weight", "output_layer.weight", "lm_head.weight"),
]
KINDS = ("param.", "grad.", "exp_avg_sq.", "exp_avg.")


def split(key):
    """'step0.grad.layers.0.x' -> ('step0.grad.', 'layers.0.x'); (None, None) if no parameter."""
    if key.startswith("init."):
        return "init.", key[5:]
    when, _, w = key.partition(".")
    for k in KINDS:
        if w.startswith(k):
            return when + "." + k, w[len(k):]
    return None, None


def scheme_of(p, scheme):
    """p's name in scheme, whether the scheme transposes it, whether it is the fused qkv."""
    col = {"megatron-core": 1, "hf-gpt2": 2, "nanogpt": 2}[scheme]
    for row in MODEL:
        if row[0] == p:
            return row[col], False, False
    _, l, rest = p.split(".", 2)
    for row in LAYER:
        if row[0] == rest:
            pre = "decoder.layers." if scheme == "megatron-core" else "transformer.h."
            return "%s%s.%s" % (pre, l, row[col]), row[3] and scheme == "hf-gpt2", row[4] and col == 2
    sys.exit("rename.py: no %s name for %s" % (scheme, p))


def qkv_to_gpt2(a, heads, swap_qk):
    """parity's rows (head, which, d) -> (which, head, d); a is [3C] or [3C, K]."""
    rest = a.shape[1:]
    D = a.shape[0] // (3 * heads)
    b = a.reshape((heads, 3, D) + rest).swapaxes(0, 1)
    if swap_qk:
        b = b[[1, 0, 2]]
    return np.ascontiguousarray(b).reshape(a.shape)


def main():
    dump, out, scheme, wrong = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    g, meta = load(dump), {}
    with open(dump, "rb") as f:
        import struct
        n = struct.unpack("<Q", f.read(8))[0]
        cfg = json.loads(json.loads(f.read(n))["__metadata__"]["config"])
    bugs = {}
    for w in wrong:
        kind, p = w.split(":", 1)
        bugs.setdefault(p, set()).add(kind)
    T, parity_of, transposed = {}, {}, []
    for k, a in g.items():
        pre, p = split(k)
        if p is None:
            T[k] = a
            continue
        name, tr, qkv = scheme_of(p, scheme)
        b = bugs.get(p, set())
        if qkv or "qk" in b:
            a = qkv_to_gpt2(a, cfg["heads"], "qk" in b) if qkv else a
        if tr and "transpose" not in b:
            a = np.ascontiguousarray(a.T)
        if "name" in b:
            name = name.replace(".weight", ".wieght")
        T[pre + name] = a
        parity_of[pre + name] = k
        if tr:
            transposed.append(pre + name)
        if scheme == "nanogpt" and cfg["tied"] and p == MODEL[0][0] and pre in ("init.", "step0.param.", "step1.param."):
            T[pre + "lm_head.weight"] = a  # one tensor, two keys
            parity_of[pre + "lm_head.weight"] = k
    meta = {"names": scheme, "parity_of": json.dumps(parity_of), "transposed": json.dumps(transposed)}
    save(out, T, meta)


main()
