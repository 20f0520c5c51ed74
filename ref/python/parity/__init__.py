"""parity - the golden run of parity as an oracle for Python tests (ctypes
over libparity.so; the C API is include/parity/oracle.h).

    import parity
    o = parity.Oracle("--model", "gpt-micro", "--steps", "2")   # or Oracle(dump="run.safetensors")
    o.run_golden()
    w = o.golden("init.layers.0.mlp.dense_h_to_4h.weight")      # a numpy array
    o.put("grad.layers.0.mlp.dense_h_to_4h.weight", 0, my_shard,
          placements=[parity.Shard(0)], mesh=[2], coords=[rank])
    d = o.compare(max_ulp=0)          # None, or the first divergence
    if d: print(d.report, d.tensor, d.rank)

Names are the dump's (include/parity/dump.h): put(name, step, ...) takes
the name without its "step<s>." prefix; golden() takes the full name.
A tensor put is converted to the golden tensor's dtype first (numpy's
astype: a float64 result is rounded to nearest float32), which is the
backend's own last rounding. torch tensors are accepted (.detach().cpu()).

libparity.so is found through $PARITY_LIB, else beside this package as
`make install` lays it out (PREFIX/lib/python3/dist-packages/parity ->
PREFIX/lib/libparity.so), else in the source tree's build/.
"""
import ctypes
import os

import numpy as np

__all__ = ["Oracle", "Shard", "Replicate", "Divergence", "ParityError"]


class ParityError(Exception):
    """A message from libparity (bad input is reported, never a crash)."""


class Shard:
    """DTensor's Shard(dim): the mesh dimension cuts tensor axis `dim` as
    torch.chunk does."""

    def __init__(self, dim):
        self.dim = int(dim)

    def __repr__(self):
        return f"Shard({self.dim})"


class Replicate:
    """DTensor's Replicate(): every rank along the mesh dimension holds a copy."""

    def __repr__(self):
        return "Replicate()"


# ---------------------------------------------------------------- the C side

_MAX_DIMS = 8
_MAX_MESH = 4
_REPLICATE = -1
# st_dtype_t (safetensors.h), in enum order
_DTYPES = ["F32", "F64", "I32", "I64", "U8", "I8", "F16", "BF16", "BOOL", "I16", "U16", "U32",
           "U64", "F8_E4M3", "F8_E5M2"]
_NUMPY = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64,
          "U8": np.uint8, "I8": np.int8, "F16": np.float16, "BOOL": np.bool_, "I16": np.int16,
          "U16": np.uint16, "U32": np.uint32, "U64": np.uint64}


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int),
                ("shape", ctypes.c_int64 * _MAX_DIMS), ("begin", ctypes.c_uint64),
                ("end", ctypes.c_uint64)]


class _Placement(ctypes.Structure):
    _fields_ = [("ndim", ctypes.c_int), ("mesh", ctypes.c_int * _MAX_MESH),
                ("coord", ctypes.c_int * _MAX_MESH), ("shard", ctypes.c_int * _MAX_MESH)]


class _Tolerance(ctypes.Structure):
    _fields_ = [("max_ulp", ctypes.c_uint64), ("scale", ctypes.c_int)]


class _Divergence(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("tensor", ctypes.c_char * 160), ("step", ctypes.c_int64),
                ("flat", ctypes.c_uint64), ("ndim", ctypes.c_int),
                ("index", ctypes.c_int64 * _MAX_DIMS), ("got", ctypes.c_double),
                ("want", ctypes.c_double), ("got_bits", ctypes.c_uint64),
                ("want_bits", ctypes.c_uint64), ("ulp", ctypes.c_uint64), ("rank", ctypes.c_int),
                ("copies", ctypes.c_int), ("bad_copies", ctypes.c_int),
                ("ndiff", ctypes.c_uint64), ("numel", ctypes.c_uint64),
                ("max_ulp", ctypes.c_uint64), ("compared", ctypes.c_int),
                ("report", ctypes.c_char * 1024)]


def _find_library():
    env = os.environ.get("PARITY_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "..", "..", "..", "libparity.so"),          # installed
                 os.path.join(here, "..", "..", "..", "build", "libparity.so")):  # source tree
        if os.path.exists(cand):
            return os.path.normpath(cand)
    raise ParityError("libparity.so not found: set PARITY_LIB, or `make install PREFIX=...` and "
                      "import parity from PREFIX/lib/python3/dist-packages")


_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(_find_library())
    P, I, E = ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p
    sig = {
        "oracle_open": (P, [I, ctypes.POINTER(ctypes.c_char_p), E]),
        "oracle_open_dump": (P, [E, E]),
        "oracle_close": (None, [P]),
        "oracle_run_golden": (I, [P, I, E]),
        "oracle_config_json": (E, [P]),
        "oracle_count": (I, [P]),
        "oracle_tensor_at": (I, [P, I, ctypes.POINTER(_Tensor), ctypes.POINTER(P)]),
        "oracle_golden": (I, [P, E, ctypes.POINTER(_Tensor), ctypes.POINTER(P), E]),
        "oracle_put": (I, [P, E, ctypes.c_int64, I, I, ctypes.POINTER(ctypes.c_int64), P,
                           ctypes.POINTER(_Placement), I, E]),
        "oracle_clear": (None, [P]),
        "oracle_assembled": (I, [P, E, ctypes.POINTER(P), ctypes.POINTER(P), E]),
        "oracle_compare": (I, [P, ctypes.POINTER(_Tolerance), ctypes.POINTER(_Divergence), E]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    _lib = lib
    return lib


def _err():
    return ctypes.create_string_buffer(1024)  # perr_t: char msg[1024]


def _raise(buf):
    raise ParityError(buf.value.decode("utf-8", "replace"))


def _array(t, data):
    """A numpy copy of a C tensor (st_tensor_t + its bytes)."""
    dt = _DTYPES[t.dtype]
    if dt not in _NUMPY:
        raise ParityError(f"{t.name.decode()}: dtype {dt} has no numpy type")
    shape = tuple(t.shape[d] for d in range(t.ndim))
    n = int(np.prod(shape)) if shape else 1
    nbytes = n * np.dtype(_NUMPY[dt]).itemsize
    raw = ctypes.string_at(data, nbytes) if nbytes else b""
    return np.frombuffer(raw, dtype=_NUMPY[dt]).reshape(shape).copy()


class Divergence:
    """The first divergence (oracle_divergence_t): kind ("value" or
    "missing"), tensor (its full name), step, flat, index (by axis), got,
    want, ulp, rank (the rank that supplied the element; -1 when none did),
    copies, bad_copies, ndiff, numel, max_ulp, compared, report."""

    def __init__(self, d):
        self.kind = {1: "value", 2: "missing"}.get(d.kind, str(d.kind))
        self.tensor = d.tensor.decode("utf-8", "replace")
        self.step = d.step
        self.flat = d.flat
        self.index = tuple(d.index[k] for k in range(d.ndim))
        self.got, self.want, self.ulp, self.rank = d.got, d.want, d.ulp, d.rank
        self.copies, self.bad_copies = d.copies, d.bad_copies
        self.ndiff, self.numel, self.max_ulp = d.ndiff, d.numel, d.max_ulp
        self.compared = d.compared
        self.report = d.report.decode("utf-8", "replace")

    def __str__(self):
        return self.report

    def __repr__(self):
        return f"Divergence({self.report!r})"


class Oracle:
    """The golden run of a model (parity train's model flags) or of a dump."""

    def __init__(self, *args, dump=None):
        lib = _load()
        err = _err()
        if dump is not None:
            if args:
                raise ParityError("Oracle: give model flags or dump=, not both")
            self._o = lib.oracle_open_dump(os.fsencode(dump), err)
        else:
            argv = (ctypes.c_char_p * max(len(args), 1))(*[str(a).encode() for a in args])
            self._o = lib.oracle_open(len(args), argv, err)
        if not self._o:
            _raise(err)

    def close(self):
        if getattr(self, "_o", None):
            _load().oracle_close(self._o)
            self._o = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run_golden(self, steps=0):
        err = _err()
        if _load().oracle_run_golden(self._o, int(steps), err):
            _raise(err)
        return self

    def config(self):
        """The model's config (a dict, the dump's "config")."""
        import json
        return json.loads(_load().oracle_config_json(self._o).decode())

    def names(self):
        lib, t, out = _load(), _Tensor(), []
        for i in range(lib.oracle_count(self._o)):
            lib.oracle_tensor_at(self._o, i, ctypes.byref(t), None)
            out.append(t.name.decode())
        return out

    def _golden(self, name):
        err, t, data = _err(), _Tensor(), ctypes.c_void_p()
        if _load().oracle_golden(self._o, name.encode(), ctypes.byref(t), ctypes.byref(data), err):
            _raise(err)
        return t, data

    def golden(self, name):
        """The golden tensor of a full name ("step0.loss", "init.<param>") as
        a numpy array (torch.from_numpy takes it)."""
        t, data = self._golden(name)
        return _array(t, data)

    def put(self, name, step, tensor, placements=None, mesh=None, coords=None, rank=-1):
        """One rank's block of tensor `name` of step `step` (-1: name is full).
        placements: one Shard(dim) or Replicate() per mesh dimension (None:
        the global tensor); mesh: its sizes; coords: this rank's coordinates.
        rank -1: the row-major rank of coords."""
        full = name if step < 0 else f"step{step}.{name}"
        t, _ = self._golden(full)
        want = _NUMPY.get(_DTYPES[t.dtype])
        if hasattr(tensor, "detach"):  # torch
            tensor = tensor.detach().cpu().numpy()
        a = np.ascontiguousarray(np.asarray(tensor).astype(want, copy=False))
        pl = _Placement()
        placements = list(placements or [])
        mesh, coords = list(mesh or []), list(coords or [])
        if not (len(placements) == len(mesh) == len(coords)):
            raise ParityError(f"{full}: placements {placements}, mesh {mesh} and coords {coords} "
                              f"must have one entry per mesh dimension")
        if len(mesh) > _MAX_MESH:
            raise ParityError(f"{full}: a mesh of {len(mesh)} dimensions (at most {_MAX_MESH})")
        pl.ndim = len(mesh)
        for i, (p, m, c) in enumerate(zip(placements, mesh, coords)):
            pl.mesh[i], pl.coord[i] = int(m), int(c)
            if isinstance(p, Shard):
                pl.shard[i] = p.dim + t.ndim if p.dim < 0 else p.dim
            elif isinstance(p, Replicate):
                pl.shard[i] = _REPLICATE
            else:
                raise ParityError(f"{full}: placement {p!r} is neither Shard(dim) nor Replicate()")
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        err = _err()
        if _load().oracle_put(self._o, name.encode(), int(step), t.dtype, a.ndim, shape,
                              a.ctypes.data_as(ctypes.c_void_p), ctypes.byref(pl), int(rank), err):
            _raise(err)

    def clear(self):
        _load().oracle_clear(self._o)

    def assembled(self, name):
        """The reassembled global tensor of a full name and, per element, the
        rank that supplied it (-1: none): two numpy arrays."""
        err, values, who = _err(), ctypes.c_void_p(), ctypes.c_void_p()
        if _load().oracle_assembled(self._o, name.encode(), ctypes.byref(values),
                                    ctypes.byref(who), err):
            _raise(err)
        t, _ = self._golden(name)
        w = _Tensor(name=t.name, dtype=_DTYPES.index("I32"), ndim=t.ndim, shape=t.shape)
        return _array(t, values), _array(w, who)

    def compare(self, max_ulp=0, scale="element"):
        """None when every tensor put matches (bit for bit, or within max_ulp
        ULPs of the element, or of the tensor's largest element with
        scale="tensor"); else the first Divergence in execution order."""
        if scale not in ("element", "tensor"):
            raise ParityError(f"compare: scale {scale!r} (element or tensor)")
        tol = _Tolerance(int(max_ulp), 0 if scale == "element" else 1)
        d, err = _Divergence(), _err()
        rc = _load().oracle_compare(self._o, ctypes.byref(tol), ctypes.byref(d), err)
        if rc < 0:
            _raise(err)
        return Divergence(d) if rc == 1 else None
