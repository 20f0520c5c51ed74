"""dumpio.py - read (and, for tests, write) .safetensors files with only
the standard library and torch.

The format, as parity's dumps use it:
    8 bytes   little-endian u64: N, the length of the JSON header
    N bytes   JSON object: {"__metadata__": {str: str, ...},
                            name: {"dtype": D, "shape": [...],
                                   "data_offsets": [begin, end]}, ...}
    rest      raw little-endian tensor data; offsets are relative to the
              first byte after the header.

Only the dtypes parity writes are accepted (F32, F64, I32, I64, U8); anything
else, a truncated file or overlapping/out-of-range offsets is an error
with a message naming the tensor, never a silent misread.
"""
import json
import struct

import torch

# dtype name -> (torch dtype, bytes per element)
DTYPES = {
    "F32": (torch.float32, 4),
    "F64": (torch.float64, 8),
    "I32": (torch.int32, 4),
    "I64": (torch.int64, 8),
    "U8": (torch.uint8, 1),
}


class DumpError(Exception):
    pass


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def load(path):
    """Returns (tensors: dict name -> torch.Tensor, metadata: dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise DumpError(f"{path}: {len(blob)} bytes, too short for a header length")
    (hlen,) = struct.unpack("<Q", blob[:8])
    if 8 + hlen > len(blob):
        raise DumpError(f"{path}: header length {hlen} runs past the end of the file ({len(blob)} bytes)")
    try:
        header = json.loads(blob[8:8 + hlen].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DumpError(f"{path}: header is not valid JSON: {e}")
    if not isinstance(header, dict):
        raise DumpError(f"{path}: header is not a JSON object")
    data = memoryview(blob)[8 + hlen:]
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    spans = []
    for name, info in header.items():
        dt = info.get("dtype")
        if dt not in DTYPES:
            raise DumpError(f"{path}: tensor '{name}' has dtype {dt!r}; expected one of {sorted(DTYPES)}")
        tdtype, esize = DTYPES[dt]
        shape = [int(s) for s in info.get("shape", [])]
        begin, end = (int(x) for x in info.get("data_offsets", [-1, -1]))
        want = _numel(shape) * esize
        if begin < 0 or end < begin or end > len(data):
            raise DumpError(f"{path}: tensor '{name}' data_offsets [{begin}, {end}] outside the "
                            f"{len(data)}-byte data section")
        if end - begin != want:
            raise DumpError(f"{path}: tensor '{name}' shape {shape} {dt} needs {want} bytes, "
                            f"data_offsets give {end - begin}")
        spans.append((begin, end, name))
        raw = bytes(data[begin:end])
        if want == 0:
            t = torch.empty(shape, dtype=tdtype)
        else:
            # frombuffer reads native byte order; this machine (and every
            # machine parity targets) is little-endian like the format.
            t = torch.frombuffer(bytearray(raw), dtype=tdtype).reshape(shape).clone()
        tensors[name] = t
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise DumpError(f"{path}: tensors '{n0}' and '{n1}' overlap in the data section")
    return tensors, meta


def save(path, tensors, metadata=None):
    """Writes tensors (name -> torch.Tensor of a supported dtype); used by
    the self-tests of this directory to build synthetic dumps."""
    rev = {v[0]: k for k, v in DTYPES.items()}
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    chunks = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        if t.dtype not in rev:
            raise DumpError(f"tensor '{name}': dtype {t.dtype} not supported")
        raw = t.numpy().tobytes()
        header[name] = {"dtype": rev[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)  # align the data section to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for c in chunks:
            f.write(c)


def clip_factor(T, s, clip_grad):
    """The C run's clipping factor at step s from its dumped grad_norm
    (MODEL.md: clip / (norm + 1e-6) when the norm exceeds clip), or None."""
    cnorm = float(T[f"step{s}.grad_norm"].reshape(-1)[0])
    return clip_grad / (cnorm + 1e-6) if clip_grad > 0 and cnorm > clip_grad else None
