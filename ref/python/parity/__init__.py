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

libparity.so is found through $PARITY_LIB, else $PARITY_PREFIX/lib, else
beside this package as `make install` lays it out
(PREFIX/lib/python3/dist-packages/parity -> PREFIX/lib/libparity.so), else
`pkg-config --variable=libdir parity`, /usr/local/lib, /usr/lib, else the
source tree's build/ (the tree `pip install ref/python` built from, or
the one this file is in); none: a ParityError saying what to set or run.
It is loaded by the first Oracle, not by `import parity`.

The submodules parity.rankfile (rank files for `parity judge`, numpy only)
and parity.torch (capture from PyTorch, parity's dropout; the only one
that imports torch) are documented in their docstrings and README.md.

Every argument is checked here before the C call, so nothing is
truncated or wrapped by ctypes: integers must be integers (not bool, not
float) inside the C type's range and the argument's own (a coordinate
inside its mesh, a step >= -1, max_ulp 0 to 2^63-1); arrays must be
numbers (complex, object, string and None refused) that convert to the
golden dtype exactly, or by float rounding (a 0-d array, a torch loss,
is a [1] tensor); Shard(dim) must name an axis
of the tensor (negative dims count from the end, as PyTorch's); names
and flags must not hold NUL. Errors are ParityError subclasses:
ParityTypeError (also a TypeError) and ParityValueError (also a
ValueError) name the argument (.argument); ParityClosedError (also a
ValueError) is any method of a closed Oracle; a plain ParityError is
libparity's own message.
"""
import ctypes
import operator
import os

import numpy as np

__all__ = ["Oracle", "Shard", "Replicate", "Divergence", "ParityError", "ParityArgumentError",
           "ParityTypeError", "ParityValueError", "ParityClosedError"]


class ParityError(Exception):
    """A message from libparity or the binding (bad input is reported, never a crash)."""


class ParityArgumentError(ParityError):
    """An argument refused before the C call; .argument names it."""

    def __init__(self, argument, message):
        super().__init__(f"{argument}: {message}")
        self.argument = argument


class ParityTypeError(ParityArgumentError, TypeError):
    """An argument of the wrong type (a float or bool for an integer, a
    complex or object array, None)."""


class ParityValueError(ParityArgumentError, ValueError):
    """An argument of the right type out of its range (a negative rank, a
    coordinate outside its mesh, an axis the tensor lacks, a NUL in a name)."""


class ParityClosedError(ParityError, ValueError):
    """A method of an Oracle after close()."""


# ------------------------------------------------------- argument checks
# One set for every method: each returns the value the C call takes, or
# raises a ParityArgumentError naming the argument.

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _show(v):
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _int(arg, v, lo, hi, why=""):
    """v as an int in lo..hi: an integer (int, numpy or torch integer), never
    a bool or a float, which ctypes would truncate or take as 0/1."""
    if isinstance(v, (bool, np.bool_)) or not hasattr(type(v), "__index__"):
        raise ParityTypeError(arg, f"expected an integer, got {type(v).__name__} {_show(v)}")
    try:
        n = operator.index(v)
    except TypeError as e:  # a torch tensor of floats, a numpy array of several
        raise ParityTypeError(arg, f"expected an integer, got {_show(v)} ({e})") from None
    if not lo <= n <= hi:
        raise ParityValueError(arg, f"{n} is out of range {lo}..{hi}{why}")
    return n


def _text(arg, v):
    """A str for the C side: NUL-free UTF-8 (C would cut it at the NUL)."""
    if not isinstance(v, str):
        raise ParityTypeError(arg, f"expected a str, got {type(v).__name__} {_show(v)}")
    if "\0" in v:
        raise ParityValueError(arg, f"{_show(v)} holds a NUL character")
    try:
        return v.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ParityValueError(arg, f"{_show(v)} is not UTF-8 ({e.reason})") from None


def _path(arg, v):
    if not isinstance(v, (str, bytes, os.PathLike)):
        raise ParityTypeError(arg, f"expected a path, got {type(v).__name__} {_show(v)}")
    b = os.fsencode(v)
    if b"\0" in b:
        raise ParityValueError(arg, f"{_show(v)} holds a NUL character")
    return b


def _flag(arg, v):
    """A model flag or its value: a str, or a number written as one."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (str, int, float, np.integer,
                                                             np.floating)):
        raise ParityTypeError(arg, f"expected a str or a number, got {type(v).__name__} "
                                   f"{_show(v)}")
    return _text(arg, v if isinstance(v, str) else str(v))


def _list(arg, v):
    """A sequence argument (None: empty)."""
    if v is None:
        return []
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise ParityTypeError(arg, f"expected a list, got {type(v).__name__} {_show(v)}")
    return list(v)


def _mesh(full, placements, mesh, coords, ndim):
    """The placement (placements, mesh, coords) of a block of an ndim-axis
    tensor as _Placement fields: sizes 1..2^31-1 whose product is an int,
    coordinates inside them, Shard dims of the tensor (negative ones from
    its end)."""
    placements = _list("placements", placements)
    mesh, coords = _list("mesh", mesh), _list("coords", coords)
    if not (len(placements) == len(mesh) == len(coords)):
        raise ParityValueError("placements", f"{full}: placements {placements}, mesh {mesh} and "
                               f"coords {coords} must have one entry per mesh dimension")
    if len(mesh) > _MAX_MESH:
        raise ParityValueError("mesh", f"{full}: a mesh of {len(mesh)} dimensions (at most "
                                       f"{_MAX_MESH})")
    sizes, at, shard, ranks = [], [], [], 1
    for i, (p, m, c) in enumerate(zip(placements, mesh, coords)):
        m = _int(f"mesh[{i}]", m, 1, INT32_MAX)
        ranks *= m
        if ranks > INT32_MAX:
            raise ParityValueError("mesh", f"{full}: a mesh of {ranks} ranks up to dimension {i} "
                                           f"(at most {INT32_MAX})")
        sizes.append(m)
        at.append(_int(f"coords[{i}]", c, 0, m - 1, f" (mesh[{i}] is {m})"))
        if isinstance(p, Replicate):
            shard.append(_REPLICATE)
        elif isinstance(p, Shard):
            if not -ndim <= p.dim < ndim:
                raise ParityValueError(f"placements[{i}]", f"{full}: {p!r} of a {ndim}-axis "
                                       f"tensor (dims {-ndim}..{ndim - 1})")
            shard.append(p.dim % ndim)
        else:
            raise ParityTypeError(f"placements[{i}]", f"{full}: placement {_show(p)} is neither "
                                  f"Shard(dim) nor Replicate()")
    return sizes, at, shard


# numpy kinds that are no number a tensor holds
_NOT_NUMBERS = {"c": "complex", "O": "object (None, or mixed Python values)", "U": "string",
                "S": "bytes", "V": "structured", "M": "datetime", "m": "timedelta"}


def _values(arg, tensor, dtype, full):
    """tensor (numpy, torch, nested lists) as a C-contiguous array of the
    golden dtype: numbers only, converted exactly, or by rounding to the
    golden float type (the backend's own last rounding)."""
    if tensor is None:
        raise ParityTypeError(arg, f"{full}: expected an array, got None")
    if hasattr(tensor, "detach"):  # torch
        try:
            tensor = tensor.detach().cpu().numpy()
        except (TypeError, RuntimeError) as e:  # bfloat16 and other types numpy lacks
            raise ParityTypeError(arg, f"{full}: torch {tensor.dtype} has no numpy type ({e})") \
                from None
    try:
        a = np.asarray(tensor)
    except (TypeError, ValueError) as e:  # ragged lists
        raise ParityTypeError(arg, f"{full}: not an array ({e})") from None
    if a.ndim == 0:  # a scalar (a torch loss is 0-d): the dump's scalars are [1]
        a = a.reshape(1)
    if a.dtype.kind in _NOT_NUMBERS:
        raise ParityTypeError(arg, f"{full}: a {_NOT_NUMBERS[a.dtype.kind]} array ({a.dtype}); "
                                   f"the golden tensor is {dtype}")
    if a.ndim > _MAX_DIMS:
        raise ParityValueError(arg, f"{full}: {a.ndim} axes (at most {_MAX_DIMS})")
    want = _NUMPY.get(dtype)
    if want is None:
        raise ParityTypeError(arg, f"{full}: the golden tensor is {dtype}, which numpy has no "
                                   f"type for")
    w = np.dtype(want)
    if w.kind == "f":
        if a.dtype.kind == "b":
            raise ParityTypeError(arg, f"{full}: a bool array for a {dtype} tensor")
        return np.ascontiguousarray(a.astype(w, copy=False))
    # integers and bool: exactly, or refused (never wrapped or truncated)
    lo, hi = (0, 1) if w.kind == "b" else (int(np.iinfo(w).min), int(np.iinfo(w).max))
    if a.size and a.dtype.kind != "b":
        if a.dtype.kind == "f":  # hi + 1 and lo are powers of two: exact as floats
            with np.errstate(invalid="ignore"):
                exact = bool(np.all(np.isfinite(a)) and np.all(a == np.floor(a)) and
                             a.min() >= lo and a.max() < hi + 1)
        else:
            exact = int(a.min()) >= lo and int(a.max()) <= hi
        if not exact:
            raise ParityValueError(arg, f"{full}: values that {dtype} (the golden tensor's "
                                        f"dtype) does not hold exactly, in {lo}..{hi}")
    return np.ascontiguousarray(a.astype(w))


class Shard:
    """DTensor's Shard(dim): the mesh dimension cuts tensor axis `dim` as
    torch.chunk does (negative: from the last axis, as PyTorch counts)."""

    def __init__(self, dim):
        self.dim = _int("Shard.dim", dim, -INT32_MAX, INT32_MAX)

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


def _candidates():
    """Where libparity.so may be, in the order searched (README.md)."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    prefix = os.environ.get("PARITY_PREFIX")
    if prefix:
        out.append(("$PARITY_PREFIX/lib", os.path.join(prefix, "lib", "libparity.so")))
    # make install: PREFIX/lib/python3/dist-packages/parity -> PREFIX/lib
    out.append(("beside the package (make install)",
                os.path.join(here, "..", "..", "..", "libparity.so")))
    try:
        import subprocess
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "parity"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        if libdir:
            out.append(("pkg-config parity", os.path.join(libdir, "libparity.so")))
    except (OSError, subprocess.SubprocessError):
        pass
    out += [("/usr/local/lib", "/usr/local/lib/libparity.so"), ("/usr/lib", "/usr/lib/libparity.so")]
    # the source tree: the one a pip-installed wheel was built from, or ours
    try:
        import json
        with open(os.path.join(here, "_where.json")) as f:
            src = json.load(f)["source"]
        out.append(("the source tree pip installed from", os.path.join(src, "..", "..", "build",
                                                                       "libparity.so")))
    except (OSError, ValueError, KeyError, TypeError):  # not pip-installed: in the tree
        out.append(("the source tree", os.path.join(here, "..", "..", "..", "build",
                                                    "libparity.so")))
    return [(why, os.path.normpath(c)) for why, c in out]


def _find_library():
    env = os.environ.get("PARITY_LIB")
    if env:
        if not os.path.exists(env):
            raise ParityError(f"PARITY_LIB={env}: no such file (set it to libparity.so's path, "
                              f"e.g. build/libparity.so after `make shared`)")
        return env
    cands = _candidates()
    for _, cand in cands:
        if os.path.exists(cand):
            return cand
    looked = "; ".join(f"{why}: {c}" for why, c in cands)
    raise ParityError("libparity.so not found. Set PARITY_LIB=/path/to/libparity.so (built by "
                      "`make shared` in parity's tree: build/libparity.so), or PARITY_PREFIX to "
                      "the prefix of `make install PREFIX=...` (or put PREFIX/lib/pkgconfig on "
                      f"PKG_CONFIG_PATH). Looked at: {looked}")


_lib = None
_lib_path = None


def _default_data(args):
    """["--data", corpus] when the library is a source tree's build (which
    finds no corpus of its own from a python outside the tree) and the
    caller chose none (--data, $PARITY_DATA); else []."""
    if any(isinstance(a, str) and (a == "--data" or a.startswith("--data=")) for a in args) \
            or os.environ.get("PARITY_DATA") or not _lib_path:
        return []
    tree = os.path.dirname(os.path.dirname(os.path.abspath(_lib_path)))  # <tree>/build/libparity.so
    corpus = os.path.join(tree, "ref", "data", "corpus.txt")
    return [b"--data", os.fsencode(corpus)] if os.path.isfile(corpus) else []


def _load():
    global _lib
    if _lib is not None:
        return _lib
    global _lib_path
    _lib_path = _find_library()
    lib = ctypes.CDLL(_lib_path)
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
    """The golden run of a model (parity train's model flags) or of a dump.
    Every method of a closed Oracle raises ParityClosedError."""

    def __init__(self, *args, dump=None):
        self._o = None  # before anything can fail: close() and __del__ read it
        lib = _load()
        err = _err()
        if dump is not None:
            if args:
                raise ParityValueError("dump", "give model flags or dump=, not both")
            self._o = lib.oracle_open_dump(_path("dump", dump), err)
        else:
            flags = [_flag(f"args[{i}]", a) for i, a in enumerate(args)] + _default_data(args)
            argv = (ctypes.c_char_p * max(len(flags), 1))(*flags)
            self._o = lib.oracle_open(len(flags), argv, err)
        if not self._o:
            self._o = None
            _raise(err)

    def _handle(self):
        """The C oracle; a closed one is an error, never a NULL the C side
        would answer with an empty list or a zero."""
        if not getattr(self, "_o", None):
            raise ParityClosedError("the Oracle is closed")
        return self._o

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
        self._handle()
        return self

    def __exit__(self, *exc):
        self.close()

    def run_golden(self, steps=0):
        """Runs golden steps 0..steps-1 (0: the --steps given, default 1)."""
        o, steps = self._handle(), _int("steps", steps, 0, INT32_MAX)
        err = _err()
        if _load().oracle_run_golden(o, steps, err):
            _raise(err)
        return self

    def config(self):
        """The model's config (a dict, the dump's "config")."""
        import json
        return json.loads(_load().oracle_config_json(self._handle()).decode())

    def names(self):
        o, lib, t, out = self._handle(), _load(), _Tensor(), []
        for i in range(lib.oracle_count(o)):
            if lib.oracle_tensor_at(o, i, ctypes.byref(t), None):
                raise ParityError(f"names: golden tensor {i} of {lib.oracle_count(o)} is missing")
            out.append(t.name.decode())
        return out

    def _golden(self, name, arg="name"):
        o, key = self._handle(), _text(arg, name)
        err, t, data = _err(), _Tensor(), ctypes.c_void_p()
        if _load().oracle_golden(o, key, ctypes.byref(t), ctypes.byref(data), err):
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
        o = self._handle()
        key = _text("name", name)
        step = _int("step", step, -1, INT64_MAX)
        rank = _int("rank", rank, -1, INT32_MAX)
        full = name if step < 0 else f"step{step}.{name}"
        t, _ = self._golden(full)
        a = _values("tensor", tensor, _DTYPES[t.dtype], full)
        sizes, at, shard = _mesh(full, placements, mesh, coords, t.ndim)
        pl = _Placement()
        pl.ndim = len(sizes)
        for i in range(pl.ndim):
            pl.mesh[i], pl.coord[i], pl.shard[i] = sizes[i], at[i], shard[i]
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        err = _err()
        if _load().oracle_put(o, key, step, t.dtype, a.ndim, shape,
                              a.ctypes.data_as(ctypes.c_void_p), ctypes.byref(pl), rank, err):
            _raise(err)

    def clear(self):
        _load().oracle_clear(self._handle())

    def assembled(self, name):
        """The reassembled global tensor of a full name and, per element, the
        rank that supplied it (-1: none): two numpy arrays."""
        o, key = self._handle(), _text("name", name)
        err, values, who = _err(), ctypes.c_void_p(), ctypes.c_void_p()
        if _load().oracle_assembled(o, key, ctypes.byref(values), ctypes.byref(who), err):
            _raise(err)
        t, _ = self._golden(name)
        w = _Tensor(name=t.name, dtype=_DTYPES.index("I32"), ndim=t.ndim, shape=t.shape)
        return _array(t, values), _array(w, who)

    def compare(self, max_ulp=0, scale="element"):
        """None when every tensor put matches (bit for bit, or within max_ulp
        ULPs of the element, or of the tensor's largest element with
        scale="tensor"); else the first Divergence in execution order.
        max_ulp: 0 to 2^63-1."""
        o = self._handle()
        max_ulp = _int("max_ulp", max_ulp, 0, INT64_MAX)
        if not isinstance(scale, str):
            raise ParityTypeError("scale", f"expected \"element\" or \"tensor\", got "
                                           f"{type(scale).__name__} {_show(scale)}")
        if scale not in ("element", "tensor"):
            raise ParityValueError("scale", f"{scale!r} (element or tensor)")
        tol = _Tolerance(max_ulp, 0 if scale == "element" else 1)
        d, err = _Divergence(), _err()
        rc = _load().oracle_compare(o, ctypes.byref(tol), ctypes.byref(d), err)
        if rc < 0:
            _raise(err)
        return Divergence(d) if rc == 1 else None
