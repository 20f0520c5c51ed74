#!/usr/bin/env python3
"""test_oracle_args.py - the Python binding (ref/python/parity) checks every
argument before the C call: nothing truncated or wrapped by ctypes, every
refusal a ParityError subclass naming the argument.

Two parts:
  cases     one test per hole found (each passed the old binding): a
            coordinate 2**40 became 0, rank 2**33 became 0, run_golden(2**40)
            ran one step, max_ulp=-1 wrapped to 2^64-1 (a 1e30 error passed)
            and 2**64 to 0, complex arrays lost their imaginary part,
            Shard(-3) on a 2-axis tensor became Replicate, Shard(0.7) became
            Shard(0), None values became NaN, names() after close() was [],
            a non-str name raised AttributeError, a name was cut at a NUL.
  property  random ints, floats, dtypes, shapes and placements thrown at
            put/compare/run_golden/golden: a call either succeeds, and then
            its arguments were valid by this file's own model of them
            (torch.chunk cuts the expected block; the block reassembles at
            its rank), or raises a ParityError; an argument invalid by the
            model raises a ParityArgumentError (refused in Python). Any other
            exception, or a crash, is a finding. A fixed seed and
            PROPERTY_SECONDS here (make check); the long campaign:
            PARITY_FUZZ_SECONDS=600 [PARITY_FUZZ_SEED=N] (make fuzz-python).

Run from the repository root: python3 tests/torch/test_oracle_args.py
(libparity.so: $PARITY_LIB, else $BUILD/libparity.so, else build/; the
binding: $PARITY_PYTHON, else ref/python).
Prints "RESULT test_oracle_args.py: N passed, M failed".
"""
import os
import random
import sys
import time

NAME = "test_oracle_args.py"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

import numpy as np  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

sys.path.insert(0, os.environ.get("PARITY_PYTHON", os.path.join(REPO, "ref", "python")))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tally.py
os.environ.setdefault("PARITY_LIB", os.path.join(os.environ.get("BUILD", os.path.join(REPO, "build")),
                                                 "libparity.so"))
LIB = os.environ["PARITY_LIB"]


def _sanitized(lib):  # as test_oracle_tp2.py: a sanitizer build cannot load into python
    import subprocess
    try:
        out = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
    except OSError:
        return False
    return any(s in out for s in ("libasan", "libtsan", "libubsan"))


if not os.path.exists(LIB):
    print(f"not ok  libparity.so: {LIB} is missing (make shared)")
    print(f"RESULT {NAME}: 0 passed, 1 failed")
    sys.exit(1)
if _sanitized(LIB):
    print(f"SKIP: {LIB} is a sanitizer build")
    print(f"RESULT {NAME}: 0 passed, 0 failed")
    sys.exit(0)

import parity  # noqa: E402
from tally import Tally  # noqa: E402

MODEL = ["--model", "gpt-micro", "--steps", "1"]
GW = "grad.layers.0.mlp.dense_h_to_4h.weight"          # step0., F32 [64,16]
FC = "act.layers.0.mlp.dense_h_to_4h.output"           # step0., F32 [4,16,64]
IDS = "input_ids"                                      # step0., I32 [4,16]
PROPERTY_SECONDS = 12.0
SEED = 44

TALLY = Tally(NAME)
check = TALLY.check


def refused(what, fn, argument, kind):
    """fn() must raise a ParityError that is also a TypeError or ValueError
    (kind), naming `argument`."""
    base = {"type": TypeError, "value": ValueError}[kind]
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - any other class is the finding
        ok = isinstance(e, parity.ParityError) and isinstance(e, base) and argument in str(e)
        check(f"refuses {what}", ok, f"{type(e).__name__}: {e} (want a ParityError and "
                                     f"{base.__name__} naming {argument!r})")
        return
    check(f"refuses {what}", False, f"accepted, returned {r!r:.200}")


# ------------------------------------------------------------- the cases

def cases():
    o = parity.Oracle(*MODEL).run_golden()
    g = o.golden("step0." + GW)
    top, bottom = g[:32], g[32:]

    def put(block, **kw):
        o.clear()
        args = dict(placements=[parity.Shard(0)], mesh=[2], coords=[0])
        args.update(kw)
        return o.put(GW, 0, block, **args)

    refused("a coordinate 2**40 (was 0)", lambda: put(top, coords=[2**40]), "coords[0]", "value")
    refused("a coordinate -1", lambda: put(top, coords=[-1]), "coords[0]", "value")
    refused("rank 2**33 (was 0)", lambda: put(top, rank=2**33), "rank", "value")
    refused("rank -2", lambda: put(top, rank=-2), "rank", "value")
    refused("rank True (a bool for an int)", lambda: put(top, rank=True), "rank", "type")
    refused("a mesh of (2^31-1)^4 ranks",
            lambda: put(g, placements=[parity.Replicate()] * 4, mesh=[2**31 - 1] * 4,
                        coords=[0] * 4), "mesh", "value")
    refused("mesh size 2**32 (was 0)", lambda: put(top, mesh=[2**32]), "mesh[0]", "value")
    refused("step 2**64", lambda: o.put(GW, 2**64, g), "step", "value")
    refused("step 0.0 (a float for an int)", lambda: o.put(GW, 0.0, g), "step", "type")

    fresh = parity.Oracle(*MODEL)
    refused("run_golden(2**40) (ran one step)", lambda: fresh.run_golden(2**40), "steps", "value")
    refused("run_golden(-1)", lambda: fresh.run_golden(-1), "steps", "value")
    refused("run_golden(1.5)", lambda: fresh.run_golden(1.5), "steps", "type")
    fresh.close()

    o.clear()
    huge = g.copy()
    huge[0, 0] = 1e30
    o.put(GW, 0, huge)
    refused("compare(max_ulp=-1) (wrapped to 2^64-1: a 1e30 error passed)",
            lambda: o.compare(max_ulp=-1), "max_ulp", "value")
    refused("compare(max_ulp=2**64) (wrapped to 0)", lambda: o.compare(max_ulp=2**64),
            "max_ulp", "value")
    refused("compare(max_ulp=2**63)", lambda: o.compare(max_ulp=2**63), "max_ulp", "value")
    refused("compare(max_ulp=1e9) (a float)", lambda: o.compare(max_ulp=1e9), "max_ulp", "type")
    refused("compare(scale=None)", lambda: o.compare(scale=None), "scale", "type")
    d = o.compare(max_ulp=2**63 - 1)
    check("compare(max_ulp=2**63-1) is taken, and the 1e30 error still passes it only as ULPs "
          "allow", d is None or d.flat == 0, repr(d))

    refused("a complex array (imaginary part dropped)",
            lambda: put(top.astype(np.complex64) + 1j), "tensor", "type")
    refused("Shard(-3) of a 2-axis tensor (became Replicate)",
            lambda: put(top, placements=[parity.Shard(-3)]), "placements[0]", "value")
    refused("Shard(2) of a 2-axis tensor", lambda: put(top, placements=[parity.Shard(2)]),
            "placements[0]", "value")
    refused("Shard(0.7) (became Shard(0))", lambda: parity.Shard(0.7), "Shard.dim", "type")
    refused("Shard(True)", lambda: parity.Shard(True), "Shard.dim", "type")
    refused("Shard(2**40)", lambda: parity.Shard(2**40), "Shard.dim", "value")
    refused("None values (became NaN)",
            lambda: put([[None] * 16] + top[1:].tolist()), "tensor", "type")
    refused("tensor None", lambda: put(None), "tensor", "type")
    refused("a string array", lambda: put(top.astype(str)), "tensor", "type")
    refused("an object array", lambda: put(top.astype(object)), "tensor", "type")
    refused("a bool array for a float tensor", lambda: put(top > 0), "tensor", "type")
    ids = o.golden("step0." + IDS)
    o.clear()
    refused("token ids over int32 (wrapped)",
            lambda: o.put(IDS, 0, ids.astype(np.int64) + 2**32), "tensor", "value")
    refused("token ids 1.5 (truncated)", lambda: o.put(IDS, 0, ids + 0.5), "tensor", "value")
    o.clear()
    o.put(IDS, 0, ids.astype(np.float64))  # integral floats: exact, taken
    check("integral float token ids are taken exactly", o.compare() is None)

    refused("a name that is not a str (AttributeError)", lambda: o.put(123, 0, g), "name", "type")
    refused("golden(None) (AttributeError)", lambda: o.golden(None), "name", "type")
    refused("a name with a NUL (cut at it)", lambda: o.golden("step0.loss\0junk"), "name", "value")
    refused("a put name with a NUL", lambda: o.put("loss\0junk", 0, np.zeros(1)), "name", "value")
    refused("a model flag with a NUL",
            lambda: parity.Oracle("--model", "gpt-micro\0x"), "args[1]", "value")
    refused("a model flag None", lambda: parity.Oracle("--model", None), "args[1]", "type")
    refused("a dump path with a NUL", lambda: parity.Oracle(dump="x\0y"), "dump", "value")
    refused("flags and dump= together", lambda: parity.Oracle("--model", "gpt-micro", dump="x"),
            "dump", "value")

    # Shard(-1) is the last axis, as PyTorch counts
    o.clear()
    for r, part in enumerate(np.array_split(g, 2, axis=1)):
        o.put(GW, 0, part, placements=[parity.Shard(-1)], mesh=[2], coords=[r])
    check("Shard(-1) of a 2-axis tensor is Shard(1)", o.compare() is None)
    o.clear()
    o.put(GW, 0, top, placements=[parity.Shard(0)], mesh=[np.int64(2)], coords=[np.uint8(0)],
          rank=np.int32(3))
    check("numpy integers are integers", int(o.assembled("step0." + GW)[1][0, 0]) == 3)

    o.close()
    names = []
    for what, fn in [("names()", o.names), ("run_golden()", o.run_golden), ("config()", o.config),
                     ("golden()", lambda: o.golden("step0.loss")),
                     ("put()", lambda: o.put(GW, 0, g)), ("clear()", o.clear),
                     ("assembled()", lambda: o.assembled("step0." + GW)),
                     ("compare()", o.compare)]:
        try:
            fn()
            names.append(f"{what} returned")
        except Exception as e:  # noqa: BLE001
            closed = getattr(parity, "ParityClosedError", ())
            if not (closed and isinstance(e, closed) and isinstance(e, ValueError)):
                names.append(f"{what}: {type(e).__name__} {e}")
    check("every method of a closed Oracle raises ParityClosedError (names() was [])", not names,
          "; ".join(names))
    o.close()  # twice: a no-op


# ------------------------------------------------------ the property test

INTS = [-2**64, -2**63 - 1, -2**63, -2**31 - 1, -2**31, -3, -2, -1, 0, 1, 2, 3, 4, 5, 7, 16, 64,
        2**31 - 1, 2**31, 2**32, 2**33, 2**40, 2**63 - 1, 2**63, 2**64]
JUNK = [True, False, 0.7, 1.0, -1.0, float("nan"), float("inf"), None, "1", b"1", 1 + 0j, [1],
        np.float32(2), np.bool_(True)]


def rand_int(rng, small=8):
    """An integer argument, sometimes one that is not: (value, an int or None)."""
    k = rng.random()
    if k < 0.55:
        v = rng.randrange(-2, small)
    elif k < 0.8:
        v = rng.choice(INTS)
    elif k < 0.9:
        v = rng.choice(INTS + [rng.randrange(-10, 10)])
        t = rng.choice([np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                        np.uint64])
        info = np.iinfo(t)
        v = min(max(v, int(info.min)), int(info.max))
        return t(v), int(v)
    else:
        return rng.choice(JUNK), None
    return v, v


NUMPY_DTYPES = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
                np.uint8, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128, object,
                str, "datetime64[s]"]


def expected_block(golden, placements, mesh, coords):
    """The block a rank holds, as torch.chunk cuts it (empty past the last
    chunk), mesh dimensions in order; None where the model says invalid."""
    x = torch.from_numpy(golden) if torch is not None else None
    for p, m, c in zip(placements, mesh, coords):
        if isinstance(p, parity.Replicate):
            continue
        d = p.dim + golden.ndim if p.dim < 0 else p.dim
        chunks = torch.chunk(x, m, dim=d)
        if c < len(chunks):
            x = chunks[c]
        else:
            shape = list(x.shape)
            shape[d] = 0
            x = x.new_empty(shape)
    return x.numpy()


def valid_values(a, golden_dtype):
    """Whether array a converts to the golden dtype as the binding promises."""
    k = a.dtype.kind
    if k in "cOUSVMm":
        return False
    g = np.dtype(golden_dtype)
    if g.kind == "f":
        return k != "b"
    if k == "b" or a.size == 0:
        return True
    lo, hi = (0, 1) if g.kind == "b" else (int(np.iinfo(g).min), int(np.iinfo(g).max))
    if k == "f":
        with np.errstate(invalid="ignore"):
            return bool(np.all(np.isfinite(a)) and np.all(a == np.floor(a)) and
                        a.min() >= lo and a.max() < hi + 1)
    return int(a.min()) >= lo and int(a.max()) <= hi


OK, LIBPARITY, BINDING = 0, 1, 2  # what a put's arguments deserve: taken, or refused by whom


def note(tally, e):
    key = "refused " + (getattr(e, "argument", None) or "by libparity")
    tally[key] = tally.get(key, 0) + 1


def one_put(rng, o, goldens, tally):
    """One random put: a failure string, or None."""
    name = rng.choice(list(goldens))
    g = goldens[name]
    want, why = OK, ""
    name_ok = True  # the name reaches libparity's lookup (which runs before the values' checks)
    k = rng.random()
    if name.startswith("init."):
        step, pname = -1, name
    elif k < 0.45:
        step, pname = 0, name[len("step0."):]
    elif k < 0.9:
        step, pname = -1, name
    else:
        step, step_int = rand_int(rng)
        pname = rng.choice([name, name[len("step0."):], name + "\0x", 7, None])
        if step_int is None or not -1 <= step_int <= 2**63 - 1 or not isinstance(pname, str) \
                or "\0" in pname:
            want = BINDING
            why += " name/step"
        elif (pname if step_int < 0 else f"step{step_int}.{pname}") not in goldens:
            want, name_ok = LIBPARITY, False
    placements, mesh, coords, ranks = [], [], [], 1
    nmesh = rng.choice([0, 0, 1, 1, 2, 3, 4, 5])
    if nmesh > 4:  # ORACLE_MAX_MESH
        want = max(want, BINDING)
        why += " mesh dims"
    for _ in range(nmesh):
        r = rng.random()
        if r < 0.4:
            placements.append(parity.Replicate())
        elif r < 0.95:
            dim, dim_int = rand_int(rng, small=4)
            shard_ok = dim_int is not None and -(2**31 - 1) <= dim_int <= 2**31 - 1
            try:
                placements.append(parity.Shard(dim))
            except parity.ParityError:
                if shard_ok:
                    return f"Shard({dim!r}) refused"
                placements.append(parity.Replicate())  # the put goes on without it
            except Exception as e:  # noqa: BLE001
                return f"Shard({dim!r}): {type(e).__name__}: {e}"
            else:
                if not shard_ok:
                    return f"Shard({dim!r}) accepted"
                if not -g.ndim <= dim_int < g.ndim:
                    want = max(want, BINDING)
                    why += " shard dim"
        else:
            placements.append(rng.choice(["Shard(0)", 0, None, parity.Shard]))
            want = max(want, BINDING)
            why += " placement type"
        m, m_int = rand_int(rng, small=5)
        c, c_int = rand_int(rng, small=5)
        mesh.append(m)
        coords.append(c)
        if m_int is None or not 1 <= m_int <= 2**31 - 1 or c_int is None or \
                not 0 <= c_int < m_int:
            want = max(want, BINDING)
            why += " mesh/coords"
        else:
            ranks *= m_int
    if ranks > 2**31 - 1:
        want = max(want, BINDING)
        why += " ranks"
    if rng.random() < 0.05:  # lengths that disagree
        mesh.append(2)
        want = max(want, BINDING)
        why += " lengths"
    rank, rank_int = rand_int(rng) if rng.random() < 0.3 else (-1, -1)
    if rank_int is None or not -1 <= rank_int <= 2**31 - 1:
        want = max(want, BINDING)
        why += " rank"
    # the values: the right block in a random dtype, or a random shape
    block = g
    if want == OK:
        block = expected_block(g, placements, [int(m) for m in mesh], [int(c) for c in coords])
    data = block
    if rng.random() < 0.15:
        shape, n = [], 1
        for _ in range(rng.randrange(0, 10)):  # up to 9 axes, at most 2^16 elements
            d = rng.choice([0, 1, 2, 3, 4, 16, 64])
            d = d if n * d <= 65536 else 1
            shape.append(d)
            n *= d
        shape = tuple(shape)
        data = np.zeros(shape, dtype=np.float32)
    dt = rng.choice(NUMPY_DTYPES)
    arr = data.astype(dt)
    if rng.random() < 0.2 and arr.dtype.kind in "fiucb":
        with np.errstate(all="ignore"):
            arr = arr + rng.choice([0, 0.5, 2**32, -1, float("nan"), float("inf"), 1j])
    if rng.random() < 0.05:
        arr = rng.choice([None, "x", arr.tolist(), [[None] * 3]])
    try:
        a = np.asarray(arr)
        a = a.reshape(1) if a.ndim == 0 else a  # a scalar is a [1] tensor (the binding's rule)
    except ValueError:  # ragged
        a = None
    if a is None or not valid_values(a, g.dtype) or a.ndim > 8:
        want = max(want, BINDING)
        why += " values"
    elif a.shape != block.shape:
        want = max(want, LIBPARITY)
        why = f"shape {a.shape}, block {block.shape}"
    if torch is not None and isinstance(arr, np.ndarray) and arr.dtype.kind in "fiub" \
            and arr.dtype not in (np.uint32, np.uint64) and rng.random() < 0.15:
        arr = torch.from_numpy(np.ascontiguousarray(arr))
    o.clear()
    try:
        o.put(pname, step, arr, placements=placements, mesh=mesh, coords=coords, rank=rank)
    except parity.ParityError as e:
        note(tally, e)
        if want == OK:
            return f"valid put refused: {e}"
        if want == BINDING and name_ok and \
                not isinstance(e, getattr(parity, "ParityArgumentError", ())):
            return f"an argument the binding should refuse reached libparity: {e} ({why})"
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__} (not a ParityError): {e}"
    tally["accepted"] = tally.get("accepted", 0) + 1
    if want != OK:
        return (f"accepted an invalid put ({'libparity' if want == LIBPARITY else 'binding'} "
                f"should refuse): {pname!r} step {step!r} placements {placements} mesh {mesh} "
                f"coords {coords} rank {rank!r} values {type(arr).__name__} "
                f"{getattr(arr, 'dtype', '')} {getattr(arr, 'shape', '')} {why}")
    v, who = o.assembled(name)
    want_rank = rank_int
    if want_rank == -1:
        want_rank = 0
        for m, c in zip(mesh, coords):
            want_rank = want_rank * int(m) + int(c)
    mine = who == want_rank
    if int(mine.sum()) != block.size:
        return f"an accepted put covers {int(mine.sum())} elements, its block has {block.size}"
    # a rectangular block's elements, in the global row-major order, are its own row-major ones
    if not np.array_equal(v[mine], a.astype(g.dtype).ravel(), equal_nan=True):
        return f"an accepted put's values are not the block's (dtype {a.dtype} into {g.dtype})"
    return None


def one_other(rng, o, goldens, tally):
    """compare / run_golden / golden with random arguments."""
    k = rng.random()
    try:
        if k < 0.5:
            u, u_int = rand_int(rng, small=64)
            scale = rng.choice(["element", "tensor", "element", "relative", None, 1])
            ok = u_int is not None and 0 <= u_int <= 2**63 - 1 and scale in ("element", "tensor") \
                and isinstance(scale, str)
            o.clear()
            o.put(GW, 0, goldens["step0." + GW])
            d = o.compare(max_ulp=u, scale=scale)
            if not ok:
                return f"compare(max_ulp={u!r}, scale={scale!r}) accepted"
            if d is not None:
                return f"compare of the golden tensor itself diverges: {d}"
        elif k < 0.8:
            s, s_int = rand_int(rng, small=3)
            ok = s_int is not None and 0 <= s_int <= 2**31 - 1
            o.run_golden(s)
            if not ok or s_int not in (0, 1):
                return f"run_golden({s!r}) accepted on a 1-step oracle"
        else:
            n = rng.choice(list(goldens) + ["step0.loss\0x", None, 5, "", "step9.loss"])
            o.golden(n)
            if n not in goldens:
                return f"golden({n!r}) accepted"
    except parity.ParityError as e:
        note(tally, e)
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__} (not a ParityError): {e}"
    tally["accepted"] = tally.get("accepted", 0) + 1
    return None


def binding_lines():
    """Line coverage of the binding's own file while the property test runs."""
    path = os.path.abspath(parity.__file__)
    hit = set()

    def local(frame, event, arg):
        if event == "line":
            hit.add(frame.f_lineno)
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename == path else None

    def lines(code):
        out = {ln for _, _, ln in code.co_lines() if ln is not None}
        for c in code.co_consts:
            if hasattr(c, "co_lines"):
                out |= lines(c)
        return out

    with open(path) as f:
        total = lines(compile(f.read(), path, "exec"))
    return tracer, hit, total


def property_test():
    seconds = float(os.environ.get("PARITY_FUZZ_SECONDS", PROPERTY_SECONDS))
    seed = int(os.environ.get("PARITY_FUZZ_SEED", SEED if "PARITY_FUZZ_SECONDS" not in os.environ
                              else int(time.time())))
    rng = random.Random(seed)
    o = parity.Oracle(*MODEL).run_golden()
    goldens = {n: o.golden(n) for n in ["step0." + GW, "step0." + FC, "step0." + IDS,
                                        "step0.loss", "init.layers.0.input_layernorm.bias"]}
    tally, findings, n = {}, [], 0
    tracer, hit, total = binding_lines()
    sys.settrace(tracer)
    start = time.monotonic()
    end = start + seconds
    try:
        while time.monotonic() < end and len(findings) < 5:
            n += 1
            f = one_put(rng, o, goldens, tally) if rng.random() < 0.8 else \
                one_other(rng, o, goldens, tally)
            if f:
                findings.append(f"call {n}: {f}")
    finally:
        sys.settrace(None)
    o.close()
    seconds = time.monotonic() - start
    refusals = sum(v for k, v in tally.items() if k.startswith("refused"))
    print(f"        property: seed {seed}, {n} calls in {seconds:.1f} s: "
          f"{tally.get('accepted', 0)} accepted, {refusals} refused "
          f"({len([k for k in tally if k.startswith('refused')])} distinct arguments named); "
          f"binding lines run {len(hit & total)} of {len(total)}")
    check(f"property: {n} random calls, no crash, nothing invalid accepted, every refusal a "
          f"ParityError", not findings, "\n  ".join(findings))
    check("property: both outcomes seen (valid calls accepted, invalid refused)",
          tally.get("accepted", 0) > 0 and refusals > 0, repr(tally))


if __name__ == "__main__":
    cases()
    property_test()
    sys.exit(TALLY.finish())
