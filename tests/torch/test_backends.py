#!/usr/bin/env python3
"""test_backends.py - real PyTorch backends (tests/torch/backends: DDP,
ZeRO-1, ZeRO-3, TP+SP, a 2-stage pipeline, TP x DP, PP x DP and one
device), judged end to end by `parity judge`.

Each backend trains gpt-micro for 3 steps from parity's initial weights,
batches and dropout masks (`parity train --seed N --dump`), in fp32 and
under torch.autocast(bf16), for seeds 1, 2, 3, and writes one rank file
per rank; `parity judge --model gpt-micro --seed N` must find every run
within tolerance (exit 0: zero false alarms). Then each injected bug
(backends' `bug=` options, modelled on real reports) must be caught:
judge exit 1, its first divergence at the expected tensor, step 0 (the
step it first acts in) and a rank where the bug acts. The measured
ratios are printed: the worst correct run's and the weakest caught bug's,
each against the threshold (the multiple).

Run from the repository root:
    PARITY=build/parity python3 tests/torch/test_backends.py
Prints "RESULT test_backends.py: N passed, M failed"; exits 1 on failure.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from tally import Tally  # noqa: E402

PARITY = os.environ.get("PARITY", os.path.join(REPO, "build", "parity"))
SEEDS = (1, 2, 3)
PRECISIONS = ("fp32", "bf16")
BACKENDS = ("single", "ddp", "zero1", "fsdp", "tp", "pp", "tpdp", "ppdp")

# (backend, bug, the first divergence's tensor (regex, step 0), the
# coordinates it may be reported at (None: any rank))
BUGS = [
    # the f operator's missing all-reduce first shows in the LM head's input gradient
    ("tp_nosp", "row_bwd_no_allreduce", r"step0\.grad(_input)?\.(final_layernorm|head|.*layers\.1)", None),
    ("tp", "sp_allreduce", r"step0\.grad(_input)?\..*layers\.1", None),
    ("tp", "vocab_pad", r"step0\.loss$", None),
    ("tp", "norm_not_reduced", r"step0\.grad_norm$", None),
    ("pp", "norm_not_reduced", r"step0\.grad_norm$", None),
    ("pp", "loss_not_divided", r"step0\.(grad_input\.head$|grad\.final_layernorm\.)", "pp=1"),
    ("fsdp", "accum_double_scaled", r"step0\.grad\.", None),
    ("pp", "tied_not_summed", r"step0\.grad\.embedding\.word_embeddings\.weight$", None),
    ("tp", "same_dropout_mask", r"step0\.act\.layers\.0\.self_attention\.core_attention\.output$", "tp=1"),
    ("ddp", "adam_bc_off", r"step0\.param\.", None),
    ("zero1", "wd_layernorm", r"step0\.param\..*(layernorm|bias)", None),
    ("ddp", "clip_before_reduce", r"step0\.grad\.", None),
    ("pp", "wrong_microbatch", r"step0\.act\.layers\.1\.", "pp=1"),
]


def sh(cmd, **kw):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def judge(seed, out, report):
    """Runs parity judge on out's rank files: (exit status, report JSON or None, output)."""
    files = sorted(os.path.join(out, f) for f in os.listdir(out) if f.endswith(".safetensors"))
    r = sh([PARITY, "judge", "--model", "gpt-micro", "--seed", str(seed), "--report", report] + files)
    rep = None
    if os.path.exists(report):
        with open(report) as f:
            rep = json.load(f)
    return r.returncode, rep, r.stdout


def worst_ratio(rep):
    """The largest ratio to the envelope over every tensor (local and
    trajectory), and its tensor."""
    best, name = 0.0, "-"
    for t in rep.get("tensors", []):
        for key in ("trajectory_ratio", "local_ratio"):
            v = t.get(key)
            if isinstance(v, (int, float)) and v > best:
                best, name = float(v), t["tensor"]
        loc = t.get("local")
        if isinstance(loc, dict) and isinstance(loc.get("ratio"), (int, float)) and loc["ratio"] > best:
            best, name = float(loc["ratio"]), t["tensor"]
    return best, name


def class_ratios(rep, into):
    """Per (judgment, class), the largest ratio to the envelope of one
    report, merged into `into`: {(kind, class): (ratio, tensor)}."""
    for t in rep.get("tensors", []):
        loc = t.get("local")
        for kind, v in (("trajectory", t.get("trajectory_ratio")),
                        ("local", loc.get("ratio") if isinstance(loc, dict) else None)):
            if isinstance(v, (int, float)) and v > into.get((kind, t["class"]), (-1.0,))[0]:
                into[(kind, t["class"])] = (float(v), t["tensor"])


def first_ratio(fd):
    loc = fd.get("local")
    if isinstance(loc, dict) and isinstance(loc.get("ratio"), (int, float)):
        return float(loc["ratio"])
    return float(fd.get("trajectory_ratio") or 0.0)


def main():
    tally = Tally("test_backends.py")
    t0 = time.time()
    tmp = tempfile.mkdtemp(prefix="parity-backends-")
    env = dict(os.environ, PARITY_PYTHON=os.environ.get("PARITY_PYTHON", os.path.join(REPO, "ref", "python")))
    dumps = {}
    for s in SEEDS:
        dumps[s] = os.path.join(tmp, f"seed{s}.safetensors")
        r = sh([PARITY, "train", "--model", "gpt-micro", "--seed", str(s), "--steps", "3", "--dump", dumps[s]])
        tally.check(f"parity train --seed {s} --dump", r.returncode == 0, r.stdout[-400:])
    help_ = sh([PARITY, "judge", "--help"])
    tally.check("parity judge exists", help_.returncode == 0, help_.stdout[-300:])
    if help_.returncode != 0 or tally.failed:
        return tally.finish()

    # every backend once: its correct runs and its bugs on one process group
    jobs = {}
    for b in BACKENDS + ("tp_nosp",):
        jobs[b] = []
        if b != "tp_nosp":
            for s in SEEDS:
                for prec in PRECISIONS:
                    jobs[b].append((s, prec, "-", os.path.join(tmp, b, f"s{s}-{prec}")))
        for bb, bug, _, _ in BUGS:
            if bb == b:
                jobs[b].append((1, "fp32", bug, os.path.join(tmp, b, f"bug-{bug}")))
    for b, js in jobs.items():
        t = time.time()
        r = sh([sys.executable, os.path.join(HERE, "backends", "run.py"), b]
               + [f"{dumps[s]}:{prec}:{bug}:{out}" for s, prec, bug, out in js], env=env)
        tally.check(f"{b}: {len(js)} runs wrote their rank files ({time.time() - t:.1f} s)",
                    r.returncode == 0, r.stdout[-2000:])

    worst = {}  # precision -> (ratio, what)
    per_class = {p: {} for p in PRECISIONS}
    correct_runs, false_alarms, multiple = 0, 0, None
    for b in BACKENDS:
        for s, prec, bug, out in jobs[b]:
            if bug != "-":
                continue
            rc, rep, text = judge(s, out, out + ".json")
            ratio, name = worst_ratio(rep) if rep else (float("nan"), "-")
            correct_runs += 1
            false_alarms += rc != 0
            if rep:
                class_ratios(rep, per_class[prec])
                multiple = multiple or next((t["multiple"] for t in rep.get("tensors", [])), None)
            tally.check(f"{b} {prec} seed {s}: within tolerance (worst {ratio:.3g} x the envelope, {name})",
                        rc == 0, text[-1500:])
            if rep and ratio > worst.get(prec, (-1.0,))[0]:
                worst[prec] = (ratio, f"{b} seed {s} {name}", rep.get("first_divergence"))
    weakest = None
    rows = []
    for b, bug, want, coords in BUGS:
        out = os.path.join(tmp, b, f"bug-{bug}")
        rc, rep, text = judge(1, out, out + ".json")
        fd = (rep or {}).get("first_divergence") or {}
        name, where = fd.get("tensor", "-"), str(fd.get("coords", "-"))
        ratio = first_ratio(fd) if fd else 0.0
        ok = rc == 1 and re.match(want, name) is not None and fd.get("step") == 0 \
            and (coords is None or coords in where)
        tally.check(f"bug {bug} ({b}): caught at {name} step {fd.get('step')} rank {fd.get('rank')} "
                    f"({where}), {ratio:.3g} x the envelope", ok,
                    f"want exit 1 at /{want}/ step 0{' ' + coords if coords else ''}; got exit {rc}\n"
                    + text[-1500:])
        rows.append((bug, b, name, where, ratio))
        if ok and (weakest is None or ratio < weakest[0]):
            weakest = (ratio, bug)
    print("bug table: bug | backend | caught at | rank | ratio to the envelope")
    for bug, b, name, where, ratio in rows:
        print(f"  {bug} | {b} | {name} | {where} | {ratio:.3g}")
    for prec in PRECISIONS:
        print(f"worst correct {prec} run per class (x the envelope):")
        for (kind, cls), (ratio, what) in sorted(per_class[prec].items()):
            print(f"  {kind:10s} {cls:11s} {ratio:8.3g}  {what}")
    for prec, (ratio, what, _) in sorted(worst.items()):
        print(f"worst correct {prec} run: {ratio:.3g} x the envelope ({what})")
    print(f"false alarms: {false_alarms} of {correct_runs} correct runs "
          f"({100.0 * false_alarms / max(correct_runs, 1):.3g}%)")
    if weakest:
        print(f"weakest caught bug: {weakest[1]} at {weakest[0]:.3g} x the envelope")
    if multiple and worst and weakest:
        w = max(r for r, _, _ in worst.values())
        print(f"threshold: {multiple:g} x the envelope; margins: worst correct run {multiple / max(w, 1e-300):.3g}x "
              f"below it, weakest caught bug {weakest[0] / multiple:.3g}x above it")
    print(f"time: {time.time() - t0:.1f} s")
    if os.environ.get("PARITY_KEEP"):
        print(f"rank files kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return tally.finish()


if __name__ == "__main__":
    sys.exit(main())
