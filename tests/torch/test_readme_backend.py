#!/usr/bin/env python3
"""test_readme_backend.py - README's oracle example (tests/torch/readme_backend.py,
a TP=2 gpt-micro backend written from the docs only) runs as the README
says and passes `parity judge` with the default tolerances:

  - `parity train --export-weights W --names megatron-lm` gives it parity's
    initial weights; it trains 3 steps on 2 gloo processes and writes
    OUT/rank0.safetensors and OUT/rank1.safetensors (mesh tp=2);
  - `parity judge --model gpt-micro OUT/*.safetensors` exits 0 (its worst
    ratio to the envelope and the local verdict are printed);
  - README.md has the markers <!-- readme-backend:begin --> and
    <!-- readme-backend:end --> (missing ones fail), and the code block
    between them is the file, character for character.

Run from the repository root: python3 tests/torch/test_readme_backend.py
($PARITY: the program, default build/parity). Prints
"RESULT test_readme_backend.py: N passed, M failed"; a missing torch is a
printed SKIP.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "ref", "python"))

from tally import Tally  # noqa: E402

NAME = "test_readme_backend.py"
PARITY = os.environ.get("PARITY", os.path.join(REPO, "build", "parity"))
BACKEND = os.path.join(HERE, "readme_backend.py")
BEGIN, END = "<!-- readme-backend:begin -->", "<!-- readme-backend:end -->"


def sh(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def readme_block(text):
    """The code of the fenced block between the markers, or None when the
    README has no markers; "" when the markers hold no fenced block."""
    if BEGIN not in text or END not in text:
        return None
    inner = text.split(BEGIN, 1)[1].split(END, 1)[0]
    m = re.search(r"^```[a-z]*\n(.*?)^```", inner, re.S | re.M)
    return m.group(1) if m else ""


def main():
    T = Tally(NAME)
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: torch is not installed (python3-torch)")
        return T.finish()
    from parity.rankfile import read_rank_file

    tmp = tempfile.mkdtemp(prefix="parity-readme-backend-")
    try:
        w, out = os.path.join(tmp, "w"), os.path.join(tmp, "out")
        os.makedirs(out)
        r = sh([PARITY, "train", "--model", "gpt-micro", "--steps", "1", "--export-weights", w,
                "--names", "megatron-lm"])
        weights = os.path.join(w, "model.safetensors")
        T.check("parity train --export-weights wrote the initial weights",
                r.returncode == 0 and os.path.exists(weights), r.stdout[-800:])
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   PYTHONPATH=os.path.join(REPO, "ref", "python"))
        r = sh([sys.executable, BACKEND, weights, out, os.path.join(REPO, "ref", "data", "corpus.txt")],
               env=env, timeout=300)
        files = [os.path.join(out, f"rank{i}.safetensors") for i in range(2)]
        T.check("readme_backend.py ran on 2 gloo processes and wrote rank0/rank1.safetensors",
                r.returncode == 0 and all(os.path.exists(f) for f in files), r.stdout[-2000:])
        if T.failed:
            return T.finish()
        rfs = [read_rank_file(f) for f in files]
        T.check("the rank files: mesh tp=2, coords tp=0 and tp=1, 3 steps of params",
                [rf.mesh for rf in rfs] == [{"tp": 2}] * 2
                and [rf.coords for rf in rfs] == [{"tp": 0}, {"tp": 1}]
                and all("step2.param.layers.1.mlp.dense_4h_to_h.weight" in rf.tensors for rf in rfs),
                str([(rf.mesh, rf.coords, len(rf.tensors)) for rf in rfs]))
        report = os.path.join(tmp, "report.json")
        r = sh([PARITY, "judge", "--model", "gpt-micro", "--report", report] + files)
        rep = json.load(open(report)) if os.path.exists(report) else {}
        worst = max(((t.get("trajectory_ratio") or 0, t.get("tensor", "-"))
                     for t in rep.get("tensors", [])), default=(float("nan"), "-"))
        loc = max(((t.get("local") or {}).get("ratio") or 0 for t in rep.get("tensors", [])),
                  default=float("nan"))
        print(f"readme backend: worst trajectory {worst[0]:.4g} x the envelope ({worst[1]}), "
              f"worst local {loc:.4g} x, judge exit {r.returncode}")
        T.check("parity judge --model gpt-micro passes it with the default tolerances (exit 0)",
                r.returncode == 0, r.stdout[-2500:])

        # the same backend with Megatron's f missing its all-reduce (the
        # backward of a column-parallel input keeps this rank's share only)
        broken = os.path.join(tmp, "broken.py")
        with open(BACKEND) as f:
            src = f.read()
        bug = "staticmethod(lambda ctx, g: all_reduced(g))"
        with open(broken, "w") as f:
            f.write(src.replace(bug, "staticmethod(lambda ctx, g: g)", 1))
        out2 = os.path.join(tmp, "out2")
        os.makedirs(out2)
        env["MASTER_PORT"] = str(free_port())
        r = sh([sys.executable, broken, weights, out2, os.path.join(REPO, "ref", "data", "corpus.txt")],
               env=env, timeout=300)
        files2 = [os.path.join(out2, f"rank{i}.safetensors") for i in range(2)]
        r2 = sh([PARITY, "judge", "--model", "gpt-micro", "--report", report + "2"] + files2) \
            if r.returncode == 0 else r
        fd = (json.load(open(report + "2")) if os.path.exists(report + "2") else {}).get(
            "first_divergence") or {}
        T.check(f"the backend with f's all-reduce removed is caught: exit 1, first divergence "
                f"{fd.get('tensor')} step {fd.get('step')}", bug in src and r2.returncode == 1
                and fd.get("step") == 0 and re.match(r"step0\.grad", fd.get("tensor", "")) is not None,
                r2.stdout[-1500:])

        with open(os.path.join(REPO, "README.md")) as f:
            block = readme_block(f.read())
        with open(BACKEND) as f:
            code = f.read()
        fake = f"# x\n{BEGIN}\n```python\n{code}```\n{END}\n"
        T.check("the README block extraction gives back a pasted file", readme_block(fake) == code
                and readme_block("no markers") is None)
        # README's example is the file this test runs: without the markers
        # nothing ties them, so their absence is a failure, not a skip
        T.check(f"README.md has the {BEGIN} ... {END} block", block is not None,
                f"README.md lacks {BEGIN} or {END}: put them around the example backend's "
                "```python block (tests/torch/readme_backend.py)")
        if block is not None:
            T.check("README's example block is tests/torch/readme_backend.py, character for character",
                    block == code, "README's block differs from readme_backend.py (paste the file "
                    "between the markers, in one ```python fence)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return T.finish()


if __name__ == "__main__":
    sys.exit(main())
