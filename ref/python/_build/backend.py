"""backend.py - the PEP 517 build backend of parity's Python package: a
wheel (PEP 427) of parity/*.py written with zipfile, no setuptools.

The wheel also carries parity/_where.json, the source tree it was built
from, so that an installed package finds that tree's build/libparity.so
when nothing else is there (parity/__init__.py, _find_library).
build_editable (PEP 660) installs a .pth pointing at ref/python instead.

The metadata is pyproject.toml's [project] table, which this backend
reads with tomllib where Python has it (3.11+); the few fields it uses
are repeated in _FALLBACK for older Pythons (keep them in step)."""
import base64
import hashlib
import json
import os
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # ref/python
_FALLBACK = {"name": "parity", "version": "0.1", "requires-python": ">=3.8",
             "dependencies": ["numpy"], "optional-dependencies": {"torch": ["torch"]},
             "description": ""}
TAG = "py3-none-any"


def _project():
    try:
        import tomllib
    except ImportError:
        return _FALLBACK
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _metadata(p):
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}", f"Requires-Python: {p['requires-python']}"]
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    for extra, deps in p.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f"Requires-Dist: {d}; extra == \"{extra}\"" for d in deps]
    return "\n".join(lines) + "\n"


def _digest(data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={h},{len(data)}"


def _write_wheel(wheel_directory, files):
    """files: [(archive name, bytes)]; adds dist-info and RECORD. Written to a
    temp name and renamed, so a wheel directory never holds half a wheel."""
    p = _project()
    dist = f"{p['name']}-{p['version']}"
    info = f"{dist}.dist-info"
    files = list(files) + [
        (f"{info}/METADATA", _metadata(p).encode()),
        (f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: parity-backend\nRoot-Is-Purelib: "
                          f"true\nTag: {TAG}\n".encode()),
        (f"{info}/top_level.txt", b"parity\n")]
    record = "".join(f"{n},{_digest(d)}\n" for n, d in files) + f"{info}/RECORD,,\n"
    files.append((f"{info}/RECORD", record.encode()))
    name = f"{dist}-{TAG}.whl"
    path = os.path.join(wheel_directory, name)
    tmp = path + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            zi = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, d)
    os.replace(tmp, path)
    return name


def _package_files():
    pkg = os.path.join(HERE, "parity")
    out = []
    for n in sorted(os.listdir(pkg)):
        if n.endswith(".py"):
            with open(os.path.join(pkg, n), "rb") as f:
                out.append((f"parity/{n}", f.read()))
    where = {"source": HERE}
    out.append(("parity/_where.json", json.dumps(where).encode()))
    return out


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("parity_editable.pth", (HERE + "\n").encode())])


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []
