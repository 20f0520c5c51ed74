"""moe_ref.py - the mixture-of-experts MLP of parity's golden GPT, written
again in PyTorch float64 (Megatron-core's router, top-k and capacity
semantics made per sequence, as ref/model/units/moe.c defines them).

With x = LN2's output [B, T, C] of an MoE layer:

  logits = x Wr^T                       [B, T, E], no bias
  probs  = softmax(logits)              over every expert
  choice = top-k experts by logit (by prob with pre_softmax), best first,
           ties to the lower expert index
  weight = softmax over the k chosen logits (pre_softmax: the chosen probs)
  kept   = within the expert's capacity in the token's sequence:
           cap = ceil(k T / E * cf), at most T (cf = 0: dropless); over
           capacity "probs" keeps the cap largest weights (ties: earlier
           position), "position" the first cap by position
  out[t] = sum over kept j of weight_j * expert_{e_j}(x_t),
           expert e: fc2(gelu_tanh(fc1(x)))

and two auxiliary losses added to the objective (not to the reported LM
loss): the load-balancing loss, per sequence s,
  aux_s = a E / (k T^2) * sum_e P_{s,e} f_{s,e}
(P the sequence's summed probs, f its count of tokens routed to e before
capacity, no gradient), totalled as sum_s aux_s / B (B the global batch);
and the z-loss z * sum_t logsumexp(logits_t)^2 / (B T).

The discrete decisions (choice, kept) are replayed from the C dump when
given (near-ties may round differently in float64); route() makes them
independently so that the test can check them where the margin is clear.
"""
import math

import torch

F64 = torch.float64


class MoEConfig:
    """The dump config's "moe" object."""

    def __init__(self, d):
        self.raw = dict(d)
        self.E = int(d["experts"])
        self.k = int(d.get("topk", 2))
        self.layer_freq = int(d.get("layer_freq", 1))
        self.pre_softmax = bool(d.get("pre_softmax", False))
        self.aux_coeff = float(d.get("aux_loss_coeff", 0.0))
        self.z_coeff = float(d.get("z_loss_coeff", 0.0))
        self.cf = float(d.get("capacity_factor", 0.0))
        drop = d.get("drop_policy", "probs")
        if drop not in ("probs", "position"):
            raise ValueError(f"config.moe.drop_policy: {drop!r}")
        self.drop_position = drop == "position"
        if not (1 <= self.k <= self.E) or self.layer_freq < 1:
            raise ValueError(f"config.moe: {d!r}")

    def is_moe_layer(self, l):
        return l % self.layer_freq == 0

    def capacity(self, T):
        """Per sequence and expert; T when dropless."""
        if not self.cf > 0.0:
            return T
        return min(int(math.ceil(self.k * T / self.E * self.cf)), T)


def param_shapes(E, C, F_):
    """An MoE layer's MLP tensors (suffixes after "layers.L.")."""
    return {"mlp.router.weight": (E, C),
            "mlp.experts.linear_fc1.weight": (E, F_, C),
            "mlp.experts.linear_fc1.bias": (E, F_),
            "mlp.experts.linear_fc2.weight": (E, C, F_),
            "mlp.experts.linear_fc2.bias": (E, C)}


# ------------------------------------------------------------ decisions

def top_k(values, k):
    """values [..., E] -> (choice [..., k] long, margin [...]): the k
    largest, best first, equal values to the lower index (a stable sort),
    and the smallest gap between consecutive sorted values among the first
    min(k+1, E): how far the ordered choice is from changing."""
    sv, idx = torch.sort(values, dim=-1, descending=True, stable=True)
    E = values.shape[-1]
    m = min(k + 1, E)
    if m >= 2:
        margin = (sv[..., :m - 1] - sv[..., 1:m]).min(-1).values
    else:
        margin = torch.full(values.shape[:-1], math.inf, dtype=values.dtype)
    return idx[..., :k], margin


def keep(choice, weight, moe, T):
    """choice [B, T, k] long, weight [B, T, k] -> (kept [B, T, k] bool,
    margins: list of (b, e, gap) for every over-capacity (sequence, expert)
    decided by weight: the gap between the last kept and first dropped
    weight (inf when decided by position))."""
    B, Tn, k = choice.shape
    cap = moe.capacity(T)
    kept = torch.ones(B, Tn, k, dtype=torch.bool)
    margins = []
    ch = choice.tolist()
    w = weight.detach().tolist()
    for b in range(B):
        for e in range(moe.E):
            claims = [(t, j) for t in range(Tn) for j in range(k) if ch[b][t][j] == e]
            if len(claims) <= cap:
                continue
            if moe.drop_position:
                order = claims
                gap = math.inf
            else:
                order = sorted(claims, key=lambda tj: (-w[b][tj[0]][tj[1]], tj[0]))
                gap = w[b][order[cap - 1][0]][order[cap - 1][1]] - w[b][order[cap][0]][order[cap][1]]
            for t, j in order[cap:]:
                kept[b, t, j] = False
            margins.append((b, e, gap))
    return kept, margins


# ------------------------------------------------------------- the MLP
# Small functions, so that a negative control can replace one of them.

def router_weights(logits, probs, choice, pre_softmax):
    if pre_softmax:
        return probs.gather(-1, choice)
    return torch.softmax(logits.gather(-1, choice), dim=-1)


def aux_loss(probs, choice, moe, B_global):
    """sum over sequences of a E/(k T^2) sum_e P_{s,e} f_{s,e}, over B."""
    B, T, E = probs.shape
    f = torch.nn.functional.one_hot(choice, E).sum(dim=(1, 2)).to(F64)     # [B, E], no grad
    P = probs.sum(dim=1)                                                    # [B, E]
    return moe.aux_coeff * E / (moe.k * T * T) * (P * f).sum() / B_global


def z_loss(logits, moe, B_global):
    T = logits.shape[1]
    return moe.z_coeff * (torch.logsumexp(logits, dim=-1) ** 2).sum() / (B_global * T)


def experts(x, W1, b1, W2, b2, gelu):
    """Every expert on every token: x [B, T, C] -> y [B, T, E, C]."""
    h = gelu(torch.einsum("btc,efc->btef", x, W1) + b1)
    return torch.einsum("btef,ecf->btec", h, W2) + b2


def moe_mlp(x, P, pre, moe, B_global, routing, rec, aux, gelu):
    """x [B, T, C] (LN2's output); P the params; pre "layers.L.";
    routing: dict with pre+"mlp.router.choice" / "mlp.router.kept" from the
    dump (replayed), or without them (decided here); rec(name, tensor)
    records the checkpoints; aux: list the auxiliary losses are appended
    to (or None). Returns the combined output [B, T, C] (before dropout)."""
    B, T, C = x.shape
    logits = x @ P[pre + "mlp.router.weight"].t()                  # [B, T, E]
    rec(pre + "mlp.router.logits", logits)
    probs = torch.softmax(logits, dim=-1)
    routing = routing or {}
    choice = routing.get(pre + "mlp.router.choice")
    if choice is None:
        choice, _ = top_k((probs if moe.pre_softmax else logits).detach(), moe.k)
    choice = choice.long().reshape(B, T, moe.k)
    weight = router_weights(logits, probs, choice, moe.pre_softmax)  # [B, T, k]
    kept = routing.get(pre + "mlp.router.kept")
    if kept is None:
        kept, _ = keep(choice, weight, moe, T)
    kept = kept.reshape(B, T, moe.k).bool()
    rec(pre + "mlp.router.choice", choice)
    rec(pre + "mlp.router.weight", weight)
    rec(pre + "mlp.router.kept", kept)
    y = experts(x, P[pre + "mlp.experts.linear_fc1.weight"], P[pre + "mlp.experts.linear_fc1.bias"],
                P[pre + "mlp.experts.linear_fc2.weight"], P[pre + "mlp.experts.linear_fc2.bias"], gelu)
    ysel = y.gather(2, choice.unsqueeze(-1).expand(B, T, moe.k, C))  # [B, T, k, C]
    coef = weight * kept.to(weight.dtype)                            # a dropped pair: nothing
    out = (coef.unsqueeze(-1) * ysel).sum(dim=2)
    rec(pre + "mlp.experts.output", out)
    if aux is not None:
        if moe.aux_coeff > 0:
            aux.append(aux_loss(probs, choice, moe, B_global))
        if moe.z_coeff > 0:
            aux.append(z_loss(logits, moe, B_global))
    return out
