"""torch_harness.py - what the float64 reference tests of tests/torch share:
their results and RESULT line, the comparison of a parity tensor with the
reference's (the tolerances, compare, the mixed-precision rule, Checker,
the table of worst errors), finite differences, AdamW's slack, and the
steps of a dump: reading it back checked, its tokens against the corpus,
its units' activations and gradients against the reference, and the
negative controls that perturb one element. test_gpt_torch.py,
test_t5_torch.py and test_llava_torch.py import it; the references
themselves (gpt_ref.py, t5_ref.py, llava_ref.py, moe_ref.py) know nothing
of parity's dumps.

Imported after torch: a test without torch calls need_torch first.
"""
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def need_torch(name, e):
    """The import of torch (or of a module that needs it) failed: the test
    fails loudly, never skips."""
    print(f"not ok  torch available: cannot import ({e}); the float64 reference needs PyTorch "
          f"(run with /usr/bin/python3 or install torch)")
    print(f"RESULT {name}: 0 passed, 1 failed")
    sys.exit(1)


try:
    import torch
    import dumpio
    import gpt_ref as G
except ImportError as e:  # the running test's RESULT line
    need_torch(os.path.basename(sys.argv[0]), e)

F64 = torch.float64


# ----------------------------------------------------------------- results

class Results:
    """Pass/fail counts, the compared tensors' rows (ratio, variant, mode,
    step, name, category, norm_err, max_abs) and the failures; a test's
    lines start with ok_word or fail_word."""

    def __init__(self, ok_word="ok  ", fail_word="not ok  "):
        self.passed = 0
        self.failed = 0
        self.rows = []
        self.failures = []
        self.ok_word, self.fail_word = ok_word, fail_word

    def test(self, label, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"{self.ok_word}{label}")
        else:
            self.failed += 1
            print(f"{self.fail_word}{label}" + (f": {detail}" if detail else ""))
            self.failures.append(label + (f": {detail}" if detail else ""))


def finish(R, name, seconds):
    """The closing lines: time, failures, RESULT; the exit status."""
    print(f"# {seconds:.1f}s")
    if R.failures:
        print("\nFAILURES:")
        for f in R.failures:
            print("  " + f)
    print(f"RESULT {name}: {R.passed} passed, {R.failed} failed")
    return 1 if R.failed else 0


# ------------------------------------------------------------- tolerances
#
# Each tensor is compared two ways against the float64 reference b:
#   norm-wise   ||a - b|| / max(||b||, 1e-30)       <= norm
#   element     |a - b| <= atol * max|b| + rtol * |b|   for every element
# The golden run is fp32 (unit roundoff 6e-8) with exact sums, so its
# distance from the exact mathematics is small. Measured on gpt-tiny
# (8 layers, 3 steps, every variant), norm-wise: loss <= 7e-8, logits
# <= 1.6e-7, activations <= 2e-7, gradients <= 5e-7, AdamW on C's
# gradients <= 8e-8; the 3-step trajectory drifts to ~1.5e-5 (Adam
# amplifies near-zero gradients). The tolerances sit >= 20x above those;
# a wrong formula moves tensors by far more (the negative controls print
# their ratios: 4x for erf-vs-tanh GeLU at init, 1e5x for a wrong head
# order). atol is a fraction of the tensor's largest element so that small
# elements, whose relative error cancellation inflates, need no loose rtol.
TOL = {
    # name: (norm, atol (x max|b|), rtol)
    "scalar": (1e-5, 0.0, 1e-5),        # loss, grad_norm, lr
    "logits": (1e-5, 1e-5, 1e-4),
    "act": (1e-5, 1e-5, 1e-4),
    "grad": (1e-5, 1e-5, 1e-4),
    # Updated parameters p - lr*u: C rounds p to fp32 (~6e-8 |p|), and
    # where a gradient is near zero Adam turns the gradients' rounding
    # differences into visible update differences; that part is bounded
    # per element from the measured gradient differences (adam_slack), so
    # these tolerances only cover the rest.
    "param": (1e-6, 1e-6, 1e-6),
    # The trajectory carries 3 steps of those differences forward.
    "traj_param": (1e-6, 1e-6, 1e-6),
    "traj_fwd": (5e-4, 5e-4, 5e-3),
    "traj_grad": (5e-4, 5e-4, 5e-3),
    # AdamW fed the C gradients: only fp32 rounding of the update differs.
    "optim": (1e-6, 1e-6, 1e-6),
}
# adam_slack is a bound (not an estimate); this factor only keeps the
# fp32 arithmetic inside C's optimizer (its own m, v, sqrt) from eating
# the last bits of it.
ADAM_SLACK_SAFETY = 2.0
# The negative controls perturb by a relative 1e-3; they must be flagged.
PERTURB = 1e-3

# Mixed precision (--bf16, --fp16; MODEL.md "Mixed precision"). The C run
# and the reference round to S at the same points, so most S values agree
# exactly; they part where the fp32 arithmetic of a unit that is not an
# exact sum (LayerNorm, the attention core's exp and softmax, GeLU, the
# cross-entropy, and their backwards) and the reference's float64 fall on
# two sides of a rounding boundary of S: a one-ulp flip, rare because the
# fp32 error (~2^-24) is far below S's spacing (2^-8 bf16, 2^-11 fp16).
# A flip then spreads: the free-running replay (the reference's own
# forward and backward) differs at the last layers in ~10% of the
# elements by a norm of ~1-2 u_S, as much as a reference that forgets a
# rounding point, so the sharp check is per unit, by teacher forcing
# (gpt_ref.gpt_forward's force): every dumped activation and residual-
# stream gradient goes on with the C value, so each unit is compared from
# the C run's own inputs and sees only its own flips.
#
# The rule, with u_S the unit roundoff of S (2^-8 bf16, 2^-11 fp16) and an
# element's ulp the spacing of S at max(|ref|, 2^-4 max|ref|) (smaller
# elements are cancellations of larger terms, whose flips are that large):
#   norm-wise   ||C - ref|| / ||ref||                      <= norm  u_S
#   every elt   |C - ref|                                  <= elt   ulps
#   bulk        fraction of elements with |C - ref| > q ulps <= frac
# q = 0 for S-valued tensors (any difference is a flip); 1/4 ulp for the
# weight gradients, which are exact sums rounded to fp32 and so never
# equal. Measured on gpt-tiny (3 steps, bf16 / fp16 with scale 1024):
# activations and logits differ in <= 0.051% of the elements, by <= 1 ulp,
# norm <= 0.03 u_S; grad_input (the backward's LayerNorm cancellations)
# in <= 1.4%, <= 4 ulps, norm <= 0.08 u_S; weight gradients beyond 1/4 ulp
# in <= 4.7% of an element set (3 of a LayerNorm gain's 64), <= 1 ulp,
# norm <= 0.09 u_S; grad norm <= 2e-4 u_S. A reference that forgets one
# rounding point or rounds the weight gradients to S moves >= 19% of the
# S elements / >= 32% of a gradient's beyond 1/4 ulp and the norm by
# 0.24..0.9 u_S (the negative controls print their ratios).
LOWP_UNIT = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
LOWP_MANT = {"bf16": 7, "fp16": 10}      # stored significand bits
LOWP_FLOOR = 2.0 ** -4
LOWP_TOL = {
    # name: (norm (x u_S), elt (ulps) or None, q (ulps), frac) ; None: a scalar
    "lp_act": (0.25, 2, 0.0, 0.002),
    "lp_grad_input": (0.25, 16, 0.0, 0.05),
    "lp_grad": (0.25, 4, 0.25, 0.15),
    # loss (fp32 cross-entropy of the same logits) and the grad norm
    "lp_scalar": (0.005, None, None, None),
    # free-running: only that the flips' cascade stays at its measured
    # size (tensors <= 1.9 u_S, loss and norm <= 0.02 u_S), a coarse check
    "lp_free": (4.0, None, None, None),
    "lp_free_scalar": (0.1, None, None, None),
}

# -------------------------------------------------------------- comparing

def find_steps(T):
    return sorted({int(m.group(1)) for k in T for m in [re.match(r"step(\d+)\.loss$", k)] if m})


def compare(a, b, cat, slack=None):
    """a: the C tensor (any dtype), b: the float64 reference. Returns a dict
    with the errors and `ratio` = worst error / tolerance (pass iff <= 1).
    slack (>= 0, b's shape): extra per-element allowance that the caller
    derived from already-checked differences (see adam_slack); it is added
    to the element bound and taken off each element before the norm."""
    norm_tol, atol_frac, rtol = TOL[cat]
    a = a.to(F64).reshape(-1)
    b = b.to(F64).reshape(-1)
    if a.numel() != b.numel():
        return {"ok": False, "ratio": math.inf, "norm_err": math.inf, "max_abs": math.inf,
                "why": f"{a.numel()} elements, reference has {b.numel()}"}
    if not torch.isfinite(a).all():
        return {"ok": False, "ratio": math.inf, "norm_err": math.inf, "max_abs": math.inf,
                "why": "non-finite values in the C tensor"}
    if b.numel() == 0:
        return {"ok": True, "ratio": 0.0, "norm_err": 0.0, "max_abs": 0.0, "elem_ratio": 0.0,
                "worst_index": 0, "why": ""}
    slack = torch.zeros_like(b) if slack is None else slack.to(F64).reshape(-1)
    diff = (a - b).abs()
    unexplained = (diff - slack).clamp_min(0.0)
    norm_err = float(unexplained.norm()) / max(float(b.norm()), 1e-30)
    bound = atol_frac * float(b.abs().max()) + rtol * b.abs() + slack
    # An exact match passes even where the bound is 0 (an all-zero tensor).
    elem = torch.where(diff == 0, torch.zeros_like(diff), diff / bound.clamp_min(1e-300))
    worst = int(torch.argmax(elem))
    elem_ratio = float(elem[worst])
    ratio = max(norm_err / norm_tol, elem_ratio)
    return {"ok": ratio <= 1.0, "ratio": ratio, "norm_err": norm_err, "max_abs": float(diff.max()),
            "elem_ratio": elem_ratio, "worst_index": worst, "why": "",
            "worst": (float(a[worst]), float(b[worst]), float(bound[worst]))}


def ulp_lowp(x, dtype):
    """The spacing of S at magnitude x (> 0): 2^(floor(log2 x) - stored
    significand bits); fp16's subnormals are spaced 2^-24."""
    _, e = torch.frexp(x.clamp_min(1e-300))          # x = m 2^e, m in [0.5, 1)
    u = torch.ldexp(torch.ones_like(x), e - 1 - LOWP_MANT[dtype])
    return u.clamp_min(2.0 ** -24) if dtype == "fp16" else u


def compare_lowp(a, b, cat, dtype):
    """compare() for a mixed-precision run (LOWP_TOL's rule above): a, the
    C tensor, against b, the reference that rounds at the same points."""
    norm_tol, elt_tol, q, frac = LOWP_TOL[cat]
    u = LOWP_UNIT[dtype]
    a = a.to(F64).reshape(-1)
    b = b.to(F64).reshape(-1)
    if a.numel() != b.numel():
        return {"ok": False, "ratio": math.inf, "norm_err": math.inf, "max_abs": math.inf,
                "detail": f"{a.numel()} elements, reference has {b.numel()}"}
    if not torch.isfinite(a).all() or not torch.isfinite(b).all():
        return {"ok": False, "ratio": math.inf, "norm_err": math.inf, "max_abs": math.inf,
                "detail": "non-finite values in the C tensor or the reference"}
    if b.numel() == 0:
        return {"ok": True, "ratio": 0.0, "norm_err": 0.0, "max_abs": 0.0, "detail": ""}
    diff = (a - b).abs()
    norm_err = float(diff.norm()) / max(float(b.norm()), 1e-30)
    ratio = norm_err / (norm_tol * u)
    detail = f"norm err {norm_err:.3g} = {norm_err / u:.3g} u_S (tol {norm_tol:g} u_S)"
    if elt_tol is not None:
        scale = b.abs().clamp_min(LOWP_FLOOR * float(b.abs().max()))
        e = torch.where(diff == 0, torch.zeros_like(diff), diff / ulp_lowp(scale, dtype))
        worst = int(torch.argmax(e))
        bulk = float((e > q).double().mean())
        ratio = max(ratio, float(e[worst]) / elt_tol, bulk / frac)
        detail += (f", worst element [flat {worst}] {float(e[worst]):.3g} ulps (tol {elt_tol}; C {float(a[worst]):.8g}"
                   f", ref {float(b[worst]):.8g}), {100 * bulk:.3g}% of the elements "
                   f"{'differ' if q == 0 else f'beyond {q:g} ulp'} (tol {100 * frac:g}%)")
    return {"ok": ratio <= 1.0, "ratio": ratio, "norm_err": norm_err, "max_abs": float(diff.max()),
            "detail": detail}


class Checker:
    """Compares many tensors under one test label and records the table.
    dtype: a mixed-precision run's S ("bf16", "fp16"), for the lp_*
    categories (compare_lowp); the others go to compare."""

    def __init__(self, R, variant, mode, dtype=None):
        self.R, self.variant, self.mode, self.dtype = R, variant, mode, dtype
        self.bad = []
        self.n = 0

    def __call__(self, step, name, a, b, cat, slack=None):
        c = compare_lowp(a, b, cat, self.dtype) if cat in LOWP_TOL else compare(a, b, cat, slack)
        self.n += 1
        self.R.rows.append((c["ratio"], self.variant, self.mode, step, name, cat,
                            c["norm_err"], c["max_abs"]))
        if not c["ok"] and "detail" in c:
            self.bad.append(f"step {step} {name} [{cat}] {c['detail']}")
        elif not c["ok"]:
            self.bad.append(f"step {step} {name} [{cat}] norm err {c['norm_err']:.3g} "
                            f"(tol {TOL[cat][0]:.0e}), max |diff| {c['max_abs']:.3g}, worst element [flat "
                            f"{c.get('worst_index', '?')}] at {c.get('elem_ratio', math.inf):.3g}x "
                            f"its bound (C, ref, bound = {c.get('worst', '?')}; atol {TOL[cat][1]:.0e}*max|ref| "
                            f"+ rtol {TOL[cat][2]:.0e}*|ref|{' + Adam slack' if slack is not None else ''}) {c['why']}")
        return c

    def missing(self, step, name):
        self.n += 1
        self.bad.append(f"step {step} {name}: missing from the dump")

    def finish(self, label):
        detail = "; ".join(self.bad[:6]) + (f" (+{len(self.bad) - 6} more)" if len(self.bad) > 6 else "")
        self.R.test(f"{label} ({self.n} tensors)", not self.bad and self.n > 0,
                    detail or ("nothing compared" if self.n == 0 else ""))


def print_table(title, rows, per_cat=3):
    """The worst tensors of each category (ratio = error / tolerance)."""
    rows = sorted(rows, key=lambda r: -r[0])
    seen = {}
    keep = []
    for r in rows:
        seen[r[5]] = seen.get(r[5], 0) + 1
        if seen[r[5]] <= per_cat:
            keep.append(r)
    print(f"\n{title}")
    print(f"{'ratio':>8} {'variant':<26} {'mode':<10} {'st':>2} {'category':<10} {'norm err':>10} "
          f"{'max|diff|':>10}  tensor")
    for ratio, variant, mode, step, name, cat, ne, ma in sorted(keep, key=lambda r: (r[5], -r[0])):
        print(f"{ratio:8.3f} {variant:<26} {mode:<10} {step:>2} {cat:<10} {ne:10.2e} {ma:10.2e}  {name}")
    print()


def fd_worst(P, grads, loss_at, gen, wanted):
    """Central finite differences of loss_at at 3 random elements of every
    parameter whose name `wanted` accepts, against autograd's grads: the
    worst error in units of (1e-4 |g| + 1e-8), and where."""
    # h = 1e-5: truncation ~h^2 * f''' ~1e-10, roundoff ~1e-16 * loss / h ~1e-11
    h = 1e-5
    worst, where = 0.0, ""
    for n, p in P.items():
        if not wanted(n):
            continue
        for _ in range(3):
            i = int(torch.randint(0, p.numel(), (1,), generator=gen))
            Pp = dict(P)
            Pp[n] = p.clone()
            Pp[n].view(-1)[i] += h
            lp = loss_at(Pp)
            Pp[n].view(-1)[i] -= 2 * h
            lm = loss_at(Pp)
            fd = (lp - lm) / (2 * h)
            ag = float(grads[n].view(-1)[i])
            # a wrong gradient is off by O(|ag|); fd's own error is ~1e-10
            err = abs(fd - ag) / (1e-4 * abs(ag) + 1e-8)
            if err > worst:
                worst, where = err, f"{n}[{i}]: autograd {ag:.10g}, fd {fd:.10g}"
    return worst, where


def adam_slack(cfg, lr, name, shape, dmax, g_c, fac_c, g_ref, fac_ref, info, prev_diff):
    """How far C's updated parameter may lie from the reference's because
    the two runs fed AdamW slightly different gradients (each within its own
    checked tolerance). With delta_i the largest difference of the clipped
    gradients so far, m_hat and S = sqrt(v_hat) move by at most delta_i
    (weighted means with weights summing to 1; triangle inequality), so
    |u_C - u_ref| <= delta (1 + |u|) / (max(S - delta, 0) + eps). This
    matters where a gradient is near zero: Adam's g/(|g|+eps) turns
    rounding noise into an update of up to lr. The key part of the qkv bias
    is such a place: its exact gradient is 0 (softmax ignores a shift that
    is the same for every key), so its update is rounding noise in any fp32
    run. prev_diff: |p_C - p_ref| before the step (trajectory mode)."""
    gc = g_c if fac_c is None else g_c * fac_c
    gr = g_ref if fac_ref is None else g_ref * fac_ref
    dmax[name] = torch.maximum(dmax[name], (gc - gr).abs())
    d = dmax[name]
    u, S = info
    slack = ADAM_SLACK_SAFETY * lr * d * (1 + u.abs()) / ((S - d).clamp_min(0.0) + cfg.eps)
    if prev_diff is not None:
        wd = cfg.weight_decay if G.weight_decayed(name, shape) else 0.0
        slack = slack + ADAM_SLACK_SAFETY * prev_diff * abs(1 - lr * wd)
    return slack


# ------------------------------------------------------------------ dumps

def load_dump(R, model, path, steps_n, make_cfg, what, shapes_of, check_init=True):
    """A dump of steps_n steps read back, each failure a test result:
    (T, cfg, steps, shapes), or None when it is unusable. make_cfg builds
    the reference's config from the dump's JSON; what names the model in
    the message when it cannot; shapes_of gives its parameter shapes, whose
    initial values must be in the dump (unless check_init is false: the
    caller checks them with more)."""
    try:
        T, meta = dumpio.load(path)
    except (OSError, dumpio.DumpError) as e:
        R.test(f"{model}: load dump", False, str(e))
        return None
    if meta.get("format") != "parity-dump-1":
        R.test(f"{model}: dump format", False, f"format {meta.get('format')!r}, expected 'parity-dump-1'")
        return None
    try:
        cfg = make_cfg(json.loads(meta["config"]))
    except (KeyError, ValueError, TypeError) as e:
        R.test(f"{model}: dump config is {what}", False, repr(e))
        return None
    if meta.get("backend") != "portable":
        R.test(f"{model}: tile backend", False, f"dump metadata backend {meta.get('backend')!r}, expected 'portable'")
    steps = find_steps(T)
    if steps != list(range(steps_n)):
        R.test(f"{model}: steps in dump", False, f"found steps {steps}, expected 0..{steps_n - 1}")
        return None
    shapes = shapes_of(cfg)
    missing = [n for n in shapes if "init." + n not in T] if check_init else []
    if missing:
        R.test(f"{model}: initial parameters in dump", False, f"missing init.{missing[0]} (+{len(missing) - 1})")
        return None
    return T, cfg, steps, shapes


def read_corpus(repo, bad):
    """ref/data/corpus.txt's bytes, or None (and a line in bad)."""
    corpus_path = os.path.join(repo, "ref", "data", "corpus.txt")
    corpus = open(corpus_path, "rb").read() if os.path.exists(corpus_path) else None
    if corpus is None:
        bad.append(f"{corpus_path} not found: cannot check the tokens")
    return corpus


def dumped_tokens(T, s, B, Tn, bad):
    """Step s's input_ids and labels as [B, Tn] int64, or None (and a
    line in bad) when they are missing or hold another batch."""
    ids = T.get(f"step{s}.input_ids")
    lab = T.get(f"step{s}.labels")
    if ids is None or lab is None:
        bad.append(f"step {s}: input_ids/labels missing")
        return None
    ids = ids.reshape(-1, Tn).long()
    lab = lab.reshape(-1, Tn).long()
    if ids.shape[0] != B:
        bad.append(f"step {s}: {ids.shape[0]} sequences, config global_batch {B}")
        return None
    return ids, lab


def compare_units(chk, T, s, ref, cats, grad_norm, parts_of, grad_inputs, shapes):
    """The tail of a step's comparison for a model whose checkpoints are
    row regions of the stream: every activation of ref["acts"] ({name:
    [(rows, cols, tensor)]}), every input gradient of grad_inputs ({name:
    {rows: tensor}}), every weight gradient of shapes, the grad norm when
    given. parts_of(key, rows, cols) cuts the dumped tensor; returns
    (slice, label). The names of the act/grad_input checkpoints compared."""
    _, cat_fwd, cat_grad = cats
    covered = set()
    for name, parts in ref["acts"].items():
        key = f"step{s}.act.{name}"
        if key not in T:
            chk.missing(s, "act." + name)
            continue
        covered.add("act." + name)
        for rows, cols, t in parts:
            a, label = parts_of(key, rows, cols)
            chk(s, f"act.{name}[{label}]", a, t, cat_fwd)
    for name, parts in grad_inputs.items():
        key = f"step{s}.grad_input.{name}"
        if key not in T:
            chk.missing(s, "grad_input." + name)
            continue
        covered.add("grad_input." + name)
        for rows, t in parts.items():
            a, label = parts_of(key, rows, None)
            chk(s, f"grad_input.{name}[{label}]", a, t, cat_grad)
    compare_grads(chk, T, s, ref, cats, grad_norm, shapes)
    return covered


def compare_grads(chk, T, s, ref, cats, grad_norm, shapes):
    """Step s's weight gradients of shapes and, when given, its grad norm."""
    cat_scalar, _, cat_grad = cats
    for n in shapes:
        k = f"step{s}.grad.{n}"
        if k in T:
            chk(s, "grad." + n, T[k], ref["grads"][n], cat_grad)
        else:
            chk.missing(s, "grad." + n)
    if grad_norm is not None:
        if f"step{s}.grad_norm" in T:
            chk(s, "grad_norm", T[f"step{s}.grad_norm"], torch.tensor(grad_norm, dtype=F64), cat_scalar)
        else:
            chk.missing(s, "grad_norm")


def dumped_masks(T, s):
    """Step s's dropout masks as dumped, by site."""
    pre = f"step{s}.mask."
    return {k[len(pre):]: v for k, v in T.items() if k.startswith(pre)}


def dumped_inputs(T, s):
    """Step s's (ids, labels, masks) as dumped."""
    return T[f"step{s}.input_ids"], T[f"step{s}.labels"], dumped_masks(T, s)


def replay(R, model, T, cfg, steps, shapes, forward_backward, compare_step, inputs=None,
           what="loss/logits/activations/grad_inputs/grads/grad_norm"):
    """The replay of the dumped steps in three modes (per-step from the C
    run's previous parameters, the reference's own trajectory from init,
    and the reference AdamW fed the C gradients), with Checker, the
    tolerances and adam_slack. forward_backward(params, cfg, ids, labels,
    masks) is the reference's (gpt_ref's, t5_ref's, llava_ref's); compare_step(chk, T, s, ref, cfg,
    cats, grad_norm) compares one step and returns the act/grad_input names
    it covered (or None). inputs(T, s): step s's (ids, labels, masks) as
    forward_backward takes them (default: as dumped); what: the per-step
    comparison's label. Returns (the per-step reference results, those
    names)."""
    init = {n: T["init." + n].to(F64) for n in shapes}
    chk_step = Checker(R, model, "per-step")
    chk_par = Checker(R, model, "per-step")
    chk_traj = Checker(R, model, "trajectory")
    chk_opt = Checker(R, model, "optimizer")
    chk_lr = Checker(R, model, "lr")
    opt_r, opt_t, opt_c = G.AdamW(cfg, shapes), G.AdamW(cfg, shapes), G.AdamW(cfg, shapes)
    p_traj = init
    dmax_r = {n: torch.zeros(sh, dtype=F64) for n, sh in shapes.items()}
    dmax_t = {n: torch.zeros(sh, dtype=F64) for n, sh in shapes.items()}
    per_step, covered, clipped, clip_notes = [], set(), [], []
    for s in steps:
        ids, lab, masks = (inputs or dumped_inputs)(T, s)
        lr = G.lr_at(cfg, s)
        if f"step{s}.lr" in T:
            chk_lr(s, "lr", T[f"step{s}.lr"], torch.tensor(lr, dtype=F64), "scalar")
        else:
            chk_lr.missing(s, "lr")
        p_prev_c = init if s == 0 else {n: T[f"step{s - 1}.param.{n}"].to(F64) for n in shapes}
        cgrads = {n: T[f"step{s}.grad.{n}"].to(F64) for n in shapes if f"step{s}.grad.{n}" in T}
        have_all = len(cgrads) == len(shapes) and f"step{s}.grad_norm" in T
        cfac = dumpio.clip_factor(T, s, cfg.clip_grad) if have_all else None

        # per step, from the C run's previous parameters
        ref = forward_backward(p_prev_c, cfg, ids, lab, masks)
        new_r, norm_r, fac_r, info_r = opt_r.step(p_prev_c, ref["grads"], lr)
        if fac_r is not None:
            clipped.append(s)
        covered |= compare_step(chk_step, T, s, ref, cfg, ("scalar", "act", "grad"), norm_r) or set()
        per_step.append(ref)
        # clipping is a branch on the norm: say so when fp32 could decide it differently
        if cfg.clip_grad > 0 and abs(norm_r / cfg.clip_grad - 1) < 1e-5:
            clip_notes.append(f"step {s}: grad norm {norm_r:.9g} within 1e-5 of clip {cfg.clip_grad}")
        if have_all:
            for n in shapes:
                k = f"step{s}.param.{n}"
                if k not in T:
                    chk_par.missing(s, "param." + n)
                    continue
                slack = adam_slack(cfg, lr, n, shapes[n], dmax_r, cgrads[n], cfac, ref["grads"][n], fac_r,
                                   info_r[n], None)
                chk_par(s, "param." + n, T[k], new_r[n], "param", slack)

        # trajectory: the reference's own parameters from init
        ref_t = ref if s == 0 else forward_backward(p_traj, cfg, ids, lab, masks)
        new_t, norm_t, fac_t, info_t = opt_t.step(p_traj, ref_t["grads"], lr)
        compare_step(chk_traj, T, s, ref_t, cfg, ("traj_fwd", "traj_fwd", "traj_grad"), norm_t)
        if have_all:
            for n in shapes:
                k = f"step{s}.param.{n}"
                if k in T:
                    prev_diff = (p_prev_c[n] - p_traj[n]).abs()
                    slack = adam_slack(cfg, lr, n, shapes[n], dmax_t, cgrads[n], cfac, ref_t["grads"][n],
                                       fac_t, info_t[n], prev_diff)
                    chk_traj(s, "param." + n, T[k], new_t[n], "traj_param", slack)
        p_traj = new_t

        # the optimizer alone: the reference AdamW fed the C gradients
        if have_all:
            new_c, _, _, _ = opt_c.step(p_prev_c, cgrads, lr)
            for n in shapes:
                k = f"step{s}.param.{n}"
                if k in T:
                    chk_opt(s, "param." + n, T[k], new_c[n], "optim")
    print(f"# {model}: gradient clipping active at steps {clipped} of {steps}")
    for note in clip_notes:
        print(f"# note: {note}")
    chk_lr.finish(f"{model}: learning rate per step")
    chk_step.finish(f"{model}: {what}, per step")
    chk_par.finish(f"{model}: updated params, per step (re-seeded from C params)")
    chk_opt.finish(f"{model}: AdamW on C's grads == C's updated params")
    chk_traj.finish(f"{model}: 3-step trajectory from init (own params)")
    return per_step, covered


# ------------------------------------------------------ negative controls

def perturbed_grad_flagged(R, label, T, name, ref):
    """Step 0's gradient of name with its largest element times (1 +
    PERTURB) must fail against the reference's."""
    g = T[f"step0.grad.{name}"].clone().double()
    i = int(torch.argmax(g.abs().reshape(-1)))
    g.view(-1)[i] *= (1 + PERTURB)
    c = compare(g.float(), ref, "grad")
    R.test(f"{label}: negative control: grad.{name}[{i}] x (1+{PERTURB:g}) is flagged "
           f"(ratio {c['ratio']:.3g})",
           not c["ok"], f"not flagged: ratio {c['ratio']:.3g}")


def perturbed_act_flagged(R, label, a, ref, what):
    """An activation (flat float64 a) with an element of a quarter of its
    largest magnitude times (1 + PERTURB) must fail against ref (not the
    largest one: the elementwise bound must be tight there too). what(j)
    names the element in the test's label."""
    j = int(torch.argmin((a.abs() - float(a.abs().max()) * 0.25).abs()))
    a[j] *= (1 + PERTURB)
    c = compare(a, ref, "act")
    R.test(f"{label}: negative control: {what(j)} (|x| ~ max/4) x (1+{PERTURB:g}) is flagged "
           f"(ratio {c['ratio']:.3g})",
           not c["ok"], f"not flagged: ratio {c['ratio']:.3g}")
