"""st_write.py - the tests' own safetensors writer, written from the
format's description (8-byte little-endian header length, the JSON header
padded with spaces to 8 bytes, the tensors packed in order), not from
parity's writer, so a test's fixture checks parity's reader independently.
"""
import json
import struct


def write_safetensors(path, tensors, meta=None):
    """tensors: name -> (dtype name such as "F32", shape, raw little-endian
    bytes), written in that order; meta: the __metadata__ strings or None."""
    head, blobs, at = {}, [], 0
    if meta:
        head["__metadata__"] = meta
    for name, (dtype, shape, raw) in tensors.items():
        head[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
