"""parity.torch - capture a PyTorch backend's tensors into rank files, and
parity's randomness for it. torch is imported only by this module (`import
parity` and `parity.rankfile` never import it); dropout_mask needs only
numpy.

Capture(writer, model, plan=None, tp="tp", dp="dp", sp=False, acts="auto",
        prefix="", layer_offset=0)
    Hooks on `model` that put, into the RankWriter `writer`, what the rank
    holds under parity's tensor names (ref/judge/RANKFILES.md):
      act.<site>.output     forward hooks on the modules named as parity's
                            sites (acts="auto": embedding, layers.<l>,
                            layers.<l>.input_layernorm, .self_attention.
                            query_key_value/core_attention/dense,
                            .post_attention_layernorm, .mlp.dense_h_to_4h,
                            .mlp.dense_4h_to_h, final_layernorm; the unit
                            layers.<l> is "act.layers.<l>.output"), or an
                            explicit {module fqn: tensor name} dict
                            ({"transformer.h.0": "act.layers.0.output"});
      grad_input.layers.<l> the gradient arriving at layer l's input, and
      grad_input.head       at final_layernorm's input (the head's), from
                            hooks on those input tensors in the backward;
      grad.<param>, param.<param> (init.<param> for step -1),
      exp_avg.<param>, exp_avg_sq.<param>: cap.grads(s), cap.params(s),
                            cap.optimizer_state(opt, s);
      input_ids, labels, loss: cap.batch(ids, labels), cap.loss(loss);
      logits                cap.logits(t) (vocabulary-cut on tp);
      grad_norm, lr, ...    cap.scalar(what, v): one number, replicated;
      <when>flat.<tag>      cap.flat(what, step, tag, data, offset, params):
                            a ZeRO/FSDP flat-buffer shard of params, grads
                            or AdamW state (RANKFILES.md "flat").
    The model's fqns are the tensor names after removing `prefix` (e.g.
    "module." of DDP) and adding `layer_offset` to the layer number (a
    pipeline stage holding layers 2..3 as layers.0..1 says 2).
    Placement, given once per module: Megatron styles by the module's
    last name (query_key_value, dense_h_to_4h, linear_qkv, linear_fc1,
    c_attn, c_fc: "column"; dense, dense_4h_to_h, linear_proj,
    linear_fc2, c_proj: "row"; core_attention: its output column-cut;
    every other module "sequence" with sp=True, else "replicate"), or a
    torchtitan-style plan {fqn glob: "colwise"|"rowwise"|"sequence"|
    "replicate"|"vocab"} that overrides them, or per-module explicit
    p lists: {fqn glob: {"output": [...], "weight": [...], "bias": [...]}}.
    On the tp axis: column -> weight and bias Shard(0) (Conv1D: weight
    Shard(1)), output Shard(-1), each with strips=3 when the module is the
    GPT-2 schemes' fused q | k | v (c_attn, writer names hf-gpt2, nanogpt
    or auto: a tp rank holds its heads of q, of k and of v, RANKFILES.md;
    megatron's per-head query_key_value/linear_qkv need none);
    row -> weight Shard(1) (Conv1D: Shard(0)),
    bias Replicate, output Replicate (Shard(1), the sequence, with sp);
    sequence -> output Shard(1); vocab (an nn.Embedding cut by rows) ->
    weight Shard(0). On the dp axis activations, the batch and
    grad_input are Shard(0) (Megatron's split of the batch) and
    grad_input has "scale" 1/dp (a rank's gradient is of its local mean
    loss); the loss is Partial(sum) with scale 1/dp; parameters and their
    gradients and states Replicate. Every other axis: Replicate.
  cap.step(s)               the step the hooks write (None: stop writing);
                            also sets .step of every parity.torch.Dropout
                            in the model
  cap.microbatch(m, M)      the microbatch they write (None: whole step)
  cap.close()               removes the hooks

dropout_mask(seed, site, layer, step, global_shape, p, index=None)
    parity's position-keyed keep mask (numpy bool), bit for bit: element i
    of the site's GLOBAL tensor is kept iff rng_uniform(seed,
    rng_stream_id(name, step), i) >= p (float32 p), name "layers.<l>.<site>"
    (layer None: the site alone, e.g. "dropout.embedding"), sites as the
    dump's mask.* names: dropout.embedding, attention_dropout ([B, H, T, T];
    keys after the query are 0), attention_output_dropout,
    mlp_output_dropout ([B, T, C]). index: this rank's slice of the global
    tensor, a tuple of slices, ranges, index arrays or ints (None: all);
    each entry selects along its own axis (np.ix_'s outer product, not
    numpy's broadcast of several index arrays), an int drops its axis.
Dropout(seed, site, layer=None, p=0.1)   an nn.Module
    forward(x, index=None, global_shape=None): x * keep / (1 - p) (float32
    scale, dropped elements +0) with the mask of .step (set by Capture.step
    or by hand); global_shape defaults to x's, index to all of it.
rng_stream_id(name, step), philox_uniform(seed, stream, counters): the RNG
    (ref/kernels/rng.c) in numpy.
"""
import fnmatch
import re

import numpy as np

__all__ = ["Capture", "Dropout", "dropout_mask", "rng_stream_id", "philox_uniform"]

# ------------------------------------------------------------------ RNG
# ref/kernels/rng.c: Philox4x32-10 with key = seed, counter = (counter lo,
# counter hi, stream lo, stream hi); word 0 of the block, 24 bits.
_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_PHILOX_M0, _PHILOX_M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_PHILOX_W0, _PHILOX_W1 = 0x9E3779B9, 0xBB67AE85


def _mix64(x):
    x ^= x >> 32
    x = (x * 0x6A09E667F3BCC909) & _M64
    x ^= x >> 29
    x = (x * 0xBB67AE8584CAA73B) & _M64
    return x ^ (x >> 32)


def _fnv1a64(name):
    h = 0xCBF29CE484222325
    for b in name.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & _M64
    return h


def rng_stream_id(name, step):
    """rng.h's rng_stream_id: mix64(fnv1a64(name) ^ mix64(step))."""
    return _mix64(_fnv1a64(name) ^ _mix64(int(step) & _M64))


def _philox_word0(seed, stream, counters):
    """Word 0 of philox4x32_10 for each counter (uint64 array), as uint64."""
    ctr = np.asarray(counters, dtype=np.uint64)
    m32, s32 = np.uint64(_M32), np.uint64(32)
    c0, c1 = ctr & m32, ctr >> s32
    c2 = np.full(ctr.shape, stream & _M32, dtype=np.uint64)
    c3 = np.full(ctr.shape, stream >> 32, dtype=np.uint64)
    k0, k1 = seed & _M32, (seed >> 32) & _M32
    for r in range(10):
        if r:
            k0, k1 = (k0 + _PHILOX_W0) & _M32, (k1 + _PHILOX_W1) & _M32
        p0, p1 = c0 * _PHILOX_M0, c2 * _PHILOX_M1  # 32 x 32 -> 64 bits, exact in uint64
        n0 = (p1 >> s32) ^ c1 ^ np.uint64(k0)
        n2 = (p0 >> s32) ^ c3 ^ np.uint64(k1)
        c1, c3, c0, c2 = p1 & m32, p0 & m32, n0, n2
    return c0


def philox_uniform(seed, stream, counters):
    """rng_uniform for each counter: (word0 >> 8) * 2^-24 (float32, exact)."""
    w = _philox_word0(int(seed) & _M64, int(stream) & _M64, counters)
    return ((w >> np.uint64(8)).astype(np.float64) * 2.0 ** -24).astype(np.float32)


def _positions(index, shape):
    """Per axis the selected positions of `index` over a tensor of `shape`,
    and which axes an int index drops."""
    if index is None:
        index = ()
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) > len(shape):
        raise ValueError(f"index {index!r} has {len(index)} entries for a {len(shape)}-axis "
                         f"tensor {list(shape)}")
    pos, drop = [], []
    for d, n in enumerate(shape):
        ix = index[d] if d < len(index) else slice(None)
        if isinstance(ix, slice):
            a = np.arange(*ix.indices(n))
        elif isinstance(ix, range):
            a = np.asarray(ix)
        elif isinstance(ix, (int, np.integer)):
            a = np.asarray([ix])
            drop.append(d)
        else:
            a = np.asarray(ix)
        if a.ndim != 1 or a.dtype.kind not in "iu":
            raise ValueError(f"index[{d}] {ix!r}: expected a slice, range, int or 1-D integers")
        a = np.where(a < 0, a + n, a)
        if a.size and (a.min() < 0 or a.max() >= n):
            raise ValueError(f"index[{d}] {ix!r} is outside axis {d} of size {n}")
        pos.append(a.astype(np.int64))
    return pos, drop


def dropout_mask(seed, site, layer, step, global_shape, p, index=None):
    """The keep mask (numpy bool) of parity's dropout at a site, for the
    slice `index` of the global tensor (see the module docstring)."""
    shape = tuple(int(n) for n in global_shape)
    name = site if layer is None or layer < 0 else f"layers.{int(layer)}.{site}"
    stream = rng_stream_id(name, step)
    pos, drop = _positions(index, shape)
    strides = np.cumprod((shape[1:] + (1,))[::-1])[::-1]
    grids = np.ix_(*pos)
    flat = sum(g.astype(np.uint64) * np.uint64(s) for g, s in zip(grids, strides))
    flat = np.broadcast_to(flat, tuple(len(a) for a in pos))
    keep = philox_uniform(seed, stream, flat) >= np.float32(p)
    if len(shape) == 4:  # attention scores [B, H, Tq, Tk]: causal, keys after the query undrawn
        keep &= grids[3] <= grids[2]
    return keep.squeeze(axis=tuple(drop)) if drop else keep


# ---------------------------------------------------------------- torch
import torch  # noqa: E402  (this module is the package's only torch user)


class Dropout(torch.nn.Module):
    """parity's dropout at a site (module docstring); .step picks the mask."""

    def __init__(self, seed, site, layer=None, p=0.1):
        super().__init__()
        self.seed, self.site, self.layer, self.p = int(seed), site, layer, float(p)
        self.step = None

    def forward(self, x, index=None, global_shape=None):
        if not self.training or self.p == 0.0:
            return x
        if self.step is None:
            raise RuntimeError(f"parity.torch.Dropout {self.site} (layer {self.layer}): .step is "
                               f"not set (Capture.step(s) sets it, or set dropout.step = s)")
        shape = tuple(global_shape) if global_shape is not None else tuple(x.shape)
        keep = dropout_mask(self.seed, self.site, self.layer, self.step, shape, self.p, index)
        if tuple(keep.shape) != tuple(x.shape):
            raise ValueError(f"parity.torch.Dropout {self.site}: the mask of slice {index!r} of "
                             f"{list(shape)} is {list(keep.shape)}, x is {list(x.shape)}")
        scale = np.float32(1.0) / (np.float32(1.0) - np.float32(self.p))  # dropout_scale in fp32
        k = torch.from_numpy(keep).to(x.device)
        return torch.where(k, x * float(scale), torch.zeros((), dtype=x.dtype, device=x.device))


_SITE = re.compile(r"^(embedding|final_layernorm|layers\.[0-9]+(\.(input_layernorm|"
                   r"post_attention_layernorm|self_attention\.(query_key_value|core_attention|"
                   r"dense)|mlp\.(dense_h_to_4h|dense_4h_to_h)))?)$")
_LAYER = re.compile(r"(^|\.)(layers|h)\.([0-9]+)(?=\.|$)")
_COLUMN = {"query_key_value", "dense_h_to_4h", "linear_qkv", "linear_fc1", "c_attn", "c_fc"}
_ROW = {"dense", "dense_4h_to_h", "linear_proj", "linear_fc2", "c_proj"}
# the GPT-2 schemes' fused linears: last name -> the strips a column cut keeps
# a piece of (c_attn: q | k | v of every head, RANKFILES.md "Shard(d, strips=k)")
_FUSED = {"c_attn": 3}
_STYLES = {"column": "colwise", "colwise": "colwise", "row": "rowwise", "rowwise": "rowwise",
           "sequence": "sequence", "replicate": "replicate", "vocab": "vocab",
           "core": "core"}


class Capture:
    """Hooks writing a model's tensors into a RankWriter (module docstring)."""

    def __init__(self, writer, model, plan=None, tp="tp", dp="dp", sp=False, acts="auto",
                 prefix="", layer_offset=0):
        self.w, self.model, self.plan = writer, model, dict(plan or {})
        self.sp, self.prefix, self.layer_offset = bool(sp), prefix, int(layer_offset)
        self.axes = list(writer.mesh)
        self.tp = tp if tp in writer.mesh else None
        self.dp = dp if dp in writer.mesh else None
        self.dp_size = writer.mesh[dp] if self.dp else 1
        self._step, self._mb = None, None
        self._modules = dict(model.named_modules())
        if acts == "auto":
            sites = {f: f"act.{self.rename(f)}.output" for f in self._modules
                     if _SITE.match(self.rename(f))}
        elif isinstance(acts, dict):
            sites = dict(acts)
            for f in sites:
                if f not in self._modules:
                    raise ValueError(f"Capture acts: the model has no module {f!r}")
        else:
            raise ValueError(f"Capture acts: {acts!r}, expected \"auto\" or {{module fqn: name}}")
        self._handles = []
        for f, tname in sites.items():
            self._handles.append(self._modules[f].register_forward_hook(self._fwd_hook(f, tname)))
        for f in self._modules:
            r = self.rename(f)
            if re.fullmatch(r"layers\.[0-9]+", r):
                self._handles.append(self._modules[f].register_forward_pre_hook(
                    self._gin_hook(f"grad_input.{r}")))
            elif r == "final_layernorm":
                self._handles.append(self._modules[f].register_forward_pre_hook(
                    self._gin_hook("grad_input.head")))

    # ------------------------------------------------------- names, places
    def rename(self, fqn):
        """A model fqn as parity's (or the scheme's) name: prefix removed,
        layer_offset added to the layer number."""
        if self.prefix and fqn.startswith(self.prefix):
            fqn = fqn[len(self.prefix):]
        if self.layer_offset:
            fqn = _LAYER.sub(lambda m: f"{m.group(1)}{m.group(2)}."
                                       f"{int(m.group(3)) + self.layer_offset}", fqn, count=1)
        return fqn

    def _style(self, fqn):
        """The plan's entry of a module (a style name or an explicit dict)."""
        for pat, style in self.plan.items():
            if fnmatch.fnmatchcase(fqn, pat) or fnmatch.fnmatchcase(self.rename(fqn), pat):
                if isinstance(style, dict):
                    return style
                if style not in _STYLES:
                    raise ValueError(f"Capture plan {pat!r}: style {style!r}, expected one of "
                                     f"{', '.join(sorted(_STYLES))} or a dict of p lists")
                return _STYLES[style]
        last = self.rename(fqn).rsplit(".", 1)[-1]
        if last in _COLUMN:
            return "colwise"
        if last in _ROW:
            return "rowwise"
        if last == "core_attention":
            return "core"
        return "sequence" if self.sp else "replicate"

    def _p(self, tp_place, batch=False):
        if not self.axes:
            return None  # one device: the whole tensor, no placement entry
        out = []
        for a in self.axes:
            if a == self.tp:
                out.append(tp_place)
            elif a == self.dp and batch:
                out.append("Shard(0)")
            else:
                out.append("Replicate()")
        return out

    def _strips(self, fqn, shard):
        """shard ("Shard(d)") with the strips of a fused module's column cut."""
        k = _FUSED.get(self.rename(fqn).rsplit(".", 1)[-1])
        if not k or self.w.names not in ("hf-gpt2", "nanogpt", "auto"):
            return shard
        return f"{shard[:-1]}, strips={k})"

    def _act_p(self, fqn):
        style = self._style(fqn)
        if isinstance(style, dict):
            return style.get("output") or self._p("Replicate()", batch=True)
        tp = {"colwise": self._strips(fqn, "Shard(-1)"), "core": "Shard(-1)",
              "sequence": "Shard(1)",
              "rowwise": "Shard(1)" if self.sp else "Replicate()"}.get(style, "Replicate()")
        return self._p(tp, batch=True)

    def _param_p(self, pname):
        owner, _, leaf = pname.rpartition(".")
        style = self._style(owner)
        if isinstance(style, dict):
            return style.get(leaf) or self._p("Replicate()")
        mod = self._modules.get(owner)
        conv1d = type(mod).__name__ == "Conv1D"  # HF's [in, out] linear
        emb = isinstance(mod, torch.nn.Embedding)
        tp = "Replicate()"
        if style == "colwise":
            tp = "Shard(1)" if (leaf == "weight" and (conv1d or emb)) else "Shard(0)"
            tp = self._strips(owner, tp)
        elif style == "rowwise" and leaf == "weight":
            tp = "Shard(0)" if (conv1d or emb) else "Shard(1)"
        elif style == "vocab" and leaf == "weight":
            tp = "Shard(0)"
        return self._p(tp)

    def _gin_p(self):
        return self._p("Shard(1)" if self.sp else "Replicate()", batch=True)

    # ------------------------------------------------------------ hooks
    def _put_act(self, tname, x, p, scale=None):
        if self._step is None:
            return
        if isinstance(x, (tuple, list)):
            x = x[0]
        if not torch.is_tensor(x):
            return
        self.w.put(f"step{self._step}.{tname}", x, p=p, microbatch=self._mb, scale=scale)

    def _fwd_hook(self, fqn, tname):
        p = self._act_p(fqn)

        def hook(module, inputs, output):
            self._put_act(tname, output, p)
        return hook

    def _gin_hook(self, tname):
        def pre(module, inputs):
            if self._step is None or not inputs or not torch.is_tensor(inputs[0]) \
                    or not inputs[0].requires_grad:
                return
            step, mb = self._step, self._mb
            scale = 1.0 / self.dp_size if self.dp_size > 1 else None

            def on_grad(g):
                s, m = self._step, self._mb
                self._step, self._mb = step, mb  # the forward's step and microbatch
                try:
                    self._put_act(tname, g, self._gin_p(), scale)
                finally:
                    self._step, self._mb = s, m
            inputs[0].register_hook(on_grad)
        return pre

    # -------------------------------------------------------------- API
    def step(self, s):
        self._step, self._mb = (None if s is None else int(s)), None
        for m in self._modules.values():
            if isinstance(m, Dropout):
                m.step = self._step
        return self

    def microbatch(self, m, M=None):
        self._mb = None if m is None else (int(m), int(M))
        return self

    def _named(self):
        seen = set()
        for n, prm in self.model.named_parameters():
            if id(prm) not in seen:
                seen.add(id(prm))
                yield n, prm

    def params(self, step):
        """init.<param> (step -1) or step<s>.param.<param>: every parameter."""
        when = "init." if step == -1 else f"step{int(step)}.param."
        for n, prm in self._named():
            self.w.put(when + self.rename(n), prm, p=self._param_p(n))

    def grads(self, step):
        """step<s>.grad.<param>: every parameter's .grad (None skipped)."""
        for n, prm in self._named():
            if prm.grad is not None:
                self.w.put(f"step{int(step)}.grad.{self.rename(n)}", prm.grad, p=self._param_p(n))

    def optimizer_state(self, optimizer, step):
        """step<s>.exp_avg.<param>, exp_avg_sq: AdamW's state (torch.optim
        or ZeroRedundancyOptimizer's local optimizer) of every parameter it has."""
        state = getattr(optimizer, "optim", optimizer).state
        for n, prm in self._named():
            st = state.get(prm)
            for key in ("exp_avg", "exp_avg_sq"):
                if st and key in st:
                    self.w.put(f"step{int(step)}.{key}.{self.rename(n)}", st[key],
                               p=self._param_p(n))

    def batch(self, input_ids, labels=None):
        """step<s>.input_ids / labels of the current step (and microbatch)."""
        p = self._p("Replicate()", batch=True)
        self._put_act("input_ids", input_ids, p)
        if labels is not None:
            self._put_act("labels", labels, p)

    def logits(self, logits, vocab_parallel=True):
        """step<s>.logits [B, T, V] of the current step (and microbatch): cut by
        the vocabulary on tp (Megatron's parallel LM head; vocab_parallel=False:
        each tp rank holds all of it), by the batch on dp."""
        self._put_act("logits", logits, self._p("Shard(-1)" if vocab_parallel else "Replicate()",
                                                batch=True))

    def scalar(self, what, value):
        """step<s>.<what>: one number every rank holds (grad_norm, lr), as a
        float32 [1]; a rank that does not have it puts nothing."""
        if self._step is None:
            return
        if torch.is_tensor(value):
            value = value.detach().double().reshape(-1)[0].item()
        self.w.put(f"step{self._step}.{what}", np.asarray([value], dtype=np.float32),
                   p=self._p("Replicate()"))

    def flat(self, what, step, tag, data, offset, params):
        """A flat-buffer shard (ZeRO, FSDP1's FlatParameter): `data` (1-D) is
        elements offset.. of the buffer that concatenates `params` (a list of
        (fqn, parameter or local shape), in buffer order) flattened, padding
        after the last allowed. what: "param" (step -1: init), "grad",
        "exp_avg" or "exp_avg_sq"; the file's name is "<when>flat.<tag>",
        the members' placements are their modules' (as params() puts them),
        the buffer itself is cut on dp."""
        if what not in ("param", "grad", "exp_avg", "exp_avg_sq"):
            raise ValueError(f"Capture.flat: what {what!r}, expected param, grad, exp_avg or "
                             f"exp_avg_sq")
        when = "init." if step == -1 and what == "param" else f"step{int(step)}.{what}."
        members = [(when + self.rename(n), tuple(t.shape) if torch.is_tensor(t) else tuple(t),
                    self._param_p(n)) for n, t in params]
        self.w.put_flat(f"{when}flat.{tag}", data.detach() if torch.is_tensor(data) else data,
                        int(offset), members, p=self._p("Replicate()", batch=True))

    def loss(self, loss):
        """step<s>.loss: the rank's local mean loss, Partial(sum) x 1/dp over dp."""
        if self._step is None:
            return
        if self._mb is not None:
            raise ValueError("Capture.loss: the step's loss is one number; add up the "
                             "microbatches' losses and put it after cap.microbatch(None)")
        p = ["Partial(sum)" if a == self.dp and self.dp_size > 1 else "Replicate()"
             for a in self.axes] or None
        self.w.put(f"step{self._step}.loss", loss.detach().reshape(1), p=p,
                   scale=1.0 / self.dp_size if self.dp_size > 1 else None)

    def close(self):
        for h in self._handles:
            h.remove()
        self._handles = []
