#!/usr/bin/python3
"""cut.py DUMP OUTDIR [EDIT...] - rank files (ref/judge/RANKFILES.md) cut
from a `parity train --dump` file's own tensors, as a correct backend on a
{"dp": 2, "tp": 2} mesh would write them, for tests/cli/test_judge.sh.

Placements exercised: Shard(d) on one and on two mesh axes (nesting),
Shard(-1), Replicate (every rank a copy), Partial(sum) addends that sum to
the golden value exactly, microbatches with the @mb<m> suffix, a scale of
1/dp on the input gradients, and a flat buffer of layer 0's gradients
that crosses member boundaries and is cut over dp. Written with struct and
json, independently of parity's own writer.

EDITs change the result after cutting:
  perturb:RANK:FILETENSOR:FLAT:FACTOR  multiply one element of one rank's block
  meta:RANK:KEY:JSON                   set one rank's metadata key (JSON text, '' removes)
  place:RANK:FILETENSOR:JSON           set one placement of one rank
  drop:RANK                            no file for that rank
  dup:RANK:OTHER                       write rank OTHER's file again as RANK's
  dtype:RANK:FILETENSOR:F64            store one tensor as another float dtype
  qkvtp:strips|plain                   (applies while cutting) every fused qkv tensor
                                       (parity's query_key_value weight and bias, any
                                       step and kind) cut over tp as a tensor-parallel
                                       backend holds a q | k | v fusion (hf-gpt2's and
                                       nanogpt's c_attn): the rank's part of each of the
                                       three strips, Replicate over dp; described as
                                       Shard(d, strips=3) (strips), or as a plain
                                       Shard(d) (plain: the description is wrong)

DUMP may be rename.py's (a backend's naming scheme): its metadata then
gives the scheme (parity.names), each key's parity name (the placement
rules below are parity's names) and the keys held [in, out] (their
tensor-parallel cut moves to axis 1: a Conv1D's output columns).
"""
import json, os, struct, sys
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
from st_write import write_safetensors  # noqa: E402

DT = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "U8": np.uint8, "BF16": None}


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        out[k] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype=DT[v["dtype"]]).reshape(v["shape"])
    return out


def load_meta(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


DTYPE = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64",
         np.dtype(np.int32): "I32", np.dtype(np.uint8): "U8"}


def save(path, tensors, meta):
    write_safetensors(path, {name: (DTYPE[a.dtype], a.shape, np.ascontiguousarray(a).tobytes())
                             for name, a in tensors.items()}, meta)


def chunk(n, k, i):
    c = -(-n // k)
    s = min(c * i, n)
    return s, min(n - s, c)


def block(a, p, coord, sizes):
    """The block of a at placement p (torch.chunk cuts, mesh axes nesting;
    Shard(d, strips=k): the rank's chunk of each of k equal strips)."""
    at = [np.arange(s) for s in a.shape]  # per axis, the global indices held
    for pl, c, k in zip(p, coord, sizes):
        if pl.startswith("Shard("):
            d, _, st = pl[6:-1].partition(", strips=")
            d, strips = int(d) % a.ndim, int(st or 1)
            w = len(at[d]) // strips
            lo, n = chunk(w, k, c)
            at[d] = np.concatenate([at[d][j * w + lo:j * w + lo + n] for j in range(strips)])
    return a[np.ix_(*at)] if a.ndim else a


def split_exact(g, parts):
    """parts float32 addends whose exact sum is g: the high bits, then the rest."""
    out, rest = [], g.astype(np.float32)
    for _ in range(parts - 1):
        hi = (rest.view(np.uint32) & np.uint32(0xFFFFF000)).view(np.float32)
        out.append(hi)
        rest = (rest - hi).astype(np.float32)  # exact: the low bits of rest
    out.append(rest)
    return out


def main():
    dump, outdir, edits = sys.argv[1], sys.argv[2], sys.argv[3:]
    g, m = load(dump), load_meta(dump)
    scheme = m.get("names", "megatron-lm")
    parity_of = json.loads(m.get("parity_of", "{}"))
    transposed = set(json.loads(m.get("transposed", "[]")))
    pk = lambda k: parity_of.get(k, k)  # the rules speak of parity's names

    def sw(k, p):  # a transposed 2-D tensor's cuts along the other axis
        if k not in transposed:
            return p
        return [{"Shard(0)": "Shard(1)", "Shard(1)": "Shard(0)"}.get(x, x) for x in p]
    mesh = {"dp": 2, "tp": 2}
    sizes = list(mesh.values())
    steps = sorted({k.split(".")[0] for k in g if k.startswith("step")})
    qkvtp = [e.split(":", 1)[1] for e in edits if e.startswith("qkvtp:")]
    edits = [e for e in edits if not e.startswith("qkvtp:")]

    def qkv(k):  # k's tp cut as a q | k | v fusion: (the true p, the p written) or None
        if not qkvtp or not pk(k).endswith((".query_key_value.weight", ".query_key_value.bias")):
            return None
        d = 1 if k in transposed else 0
        true = ["Replicate()", "Shard(%d, strips=3)" % d]
        return true, (true if qkvtp[0] == "strips" else ["Replicate()", "Shard(%d)" % d])
    files = {}
    for r in range(4):
        dp, tp = divmod(r, 2)
        coord = [dp, tp]
        T, P = {}, {}

        def put(name, p, a=None, **extra):
            a = g[name] if a is None else a
            p, written = qkv(name) or (sw(name, p),) * 2
            T[name] = block(a, p, coord, sizes).copy()
            P[name] = dict(p=written, **extra)

        for k in g:
            if k.startswith("init."):
                put(k, ["Replicate()", "Replicate()"])
        for s in steps:
            for k in [k for k in g if k.startswith(s + ".")]:
                w = pk(k)[len(s) + 1:]
                if w in ("input_ids", "labels") or w.startswith("mask."):
                    put(k, ["Shard(0)", "Replicate()"])
                elif w == "logits":
                    put(k, ["Shard(0)", "Shard(2)"])
                elif w.startswith("act.") and w.endswith("query_key_value.output"):
                    put(k, ["Shard(0)", "Shard(-1)"])
                elif w.startswith("act."):  # one file tensor per microbatch (2 of the rank's 2 rows)
                    a = block(g[k], ["Shard(0)", "Replicate()"], coord, sizes)
                    for m in range(2):
                        T["%s@mb%d" % (k, m)] = a[m:m + 1].copy()
                        P["%s@mb%d" % (k, m)] = {"p": ["Shard(0)", "Replicate()"], "microbatch": [m, 2]}
                elif w.startswith("grad_input."):  # of the rank's local mean loss: x dp
                    a = (g[k] * np.float32(2)).astype(np.float32)
                    put(k, ["Shard(0)", "Replicate()"], a, scale=0.5)
                elif w.startswith("grad.layers.0."):
                    pass  # the flat buffer below
                elif w.startswith("grad.") and w.endswith("dense.bias"):  # addends over dp and tp
                    addends = split_exact(g[k], 4)
                    T[k] = addends[r].copy()
                    P[k] = {"p": ["Partial(sum)", "Partial(sum)"]}
                elif w.startswith("grad.") and g[k].ndim == 2:
                    put(k, ["Replicate()", "Shard(0)"] if "dense.weight" not in w else ["Replicate()", "Shard(1)"])
                elif w.startswith("exp_avg"):
                    put(k, ["Shard(0)", "Shard(0)"] if g[k].ndim == 2 else ["Replicate()", "Shard(-1)"])
                else:
                    put(k, ["Replicate()", "Replicate()"])
            # layer 0's gradients: one flat buffer of the tp rank's blocks, cut over dp
            members, parts = [], []
            for k in [k for k in g if pk(k).startswith(s + ".grad.layers.0.")]:
                p = sw(k, ["Replicate()", "Shard(0)"] if g[k].ndim == 2 else ["Replicate()", "Replicate()"])
                p, written = qkv(k) or (p, p)
                b = block(g[k], p, coord, sizes)
                members.append({"name": k, "shape": list(b.shape), "p": written})
                parts.append(b.reshape(-1))
            buf = np.concatenate(parts + [np.zeros(3, np.float32)])  # alignment padding
            lo, n = chunk(len(buf), 2, dp)
            name = "%s.flat_grads.layers.0" % s
            T[name] = buf[lo:lo + n].copy()
            P[name] = {"p": ["Shard(0)", "Replicate()"], "flat": {"offset": lo, "members": members}}
        meta = {"parity.format": "1", "parity.mesh": json.dumps(mesh),
                "parity.coords": json.dumps({"dp": dp, "tp": tp}), "parity.names": scheme,
                "parity.placements": json.dumps(P)}
        files[r] = (T, meta, P)
    drop, dup = set(), {}
    for e in edits:
        kind, rest = e.split(":", 1)
        if kind == "perturb":
            r, name, flat, factor = rest.split(":")
            a = files[int(r)][0][name]
            a.reshape(-1)[int(flat)] *= a.dtype.type(float(factor))
        elif kind == "meta":
            r, key, val = rest.split(":", 2)
            if val == "":
                files[int(r)][1].pop(key, None)
            else:
                files[int(r)][1][key] = val
        elif kind == "place":
            r, name, val = rest.split(":", 2)
            files[int(r)][2][name] = json.loads(val)
            files[int(r)][1]["parity.placements"] = json.dumps(files[int(r)][2])
        elif kind == "dtype":
            r, name, dt = rest.split(":")
            files[int(r)][0][name] = files[int(r)][0][name].astype(DT[dt])
        elif kind == "drop":
            drop.add(int(rest))
        elif kind == "dup":
            r, other = rest.split(":")
            dup[int(r)] = int(other)
        else:
            sys.exit("cut.py: unknown edit " + e)
    for r in range(4):
        if r in drop:
            continue
        T, meta, _ = files[dup.get(r, r)]
        save("%s/rank%d.safetensors" % (outdir, r), T, meta)


if __name__ == "__main__":
    main()
