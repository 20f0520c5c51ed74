#!/usr/bin/python3
"""order_dump.py LIBPARITY ORDER OUT MODELFLAGS... - a golden run of the
model in one float order (float_order.h: "pairwise", "random(3)+bf16",
...), written as a dump file (safetensors, dump.h's names) for
tests/cli/test_judge.sh: cut into rank files it is a correct float backend,
which the judge must find within its envelope. Calls libparity through
ctypes (float_order_parse, float_order_set, oracle_open,
oracle_run_golden, oracle_tensor_at) in one thread, the order's thread.
Writes OUT with json and struct, independently of parity's writer."""
import ctypes as C
import json, struct, sys

ST_MAX_DIMS = 8
DTYPES = ["F32", "F64", "I32", "I64", "U8", "I8", "F16", "BF16", "BOOL"]  # st_dtype_t
SIZE = {"F32": 4, "F64": 8, "I32": 4, "I64": 8, "U8": 1, "I8": 1, "F16": 2, "BF16": 2, "BOOL": 1}


class FloatOrder(C.Structure):
    _fields_ = [("kind", C.c_int), ("groups", C.c_int), ("seed", C.c_uint64), ("bf16", C.c_int)]


class Tensor(C.Structure):
    _fields_ = [("name", C.c_char_p), ("dtype", C.c_int), ("ndim", C.c_int),
                ("shape", C.c_int64 * ST_MAX_DIMS), ("begin", C.c_uint64), ("end", C.c_uint64)]


def main(lib, order, out, flags):
    L = C.CDLL(lib)
    err = C.create_string_buffer(1024)
    o = FloatOrder()
    if L.float_order_parse(order.encode(), C.byref(o), err):
        sys.exit(f"order_dump: {err.value.decode()}")
    L.float_order_set.restype = FloatOrder
    L.float_order_set(C.byref(o))
    argv = (C.c_char_p * len(flags))(*[f.encode() for f in flags])
    L.oracle_open.restype = C.c_void_p
    orc = L.oracle_open(len(flags), argv, err)
    if not orc or L.oracle_run_golden(C.c_void_p(orc), 0, err):
        sys.exit(f"order_dump: {err.value.decode()}")
    header, blobs, off = {}, [], 0
    for i in range(L.oracle_count(C.c_void_p(orc))):
        t, data = Tensor(), C.c_void_p()
        if L.oracle_tensor_at(C.c_void_p(orc), i, C.byref(t), C.byref(data)):
            sys.exit(f"order_dump: tensor {i}")
        dt = DTYPES[t.dtype]
        shape = list(t.shape[:t.ndim])
        n = SIZE[dt]
        for s in shape:
            n *= s
        blobs.append(C.string_at(data, n) if n else b"")
        header[t.name.decode()] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + n]}
        off += n
    L.oracle_close(C.c_void_p(orc))
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
