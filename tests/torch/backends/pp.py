"""pp.py - a 2-stage pipeline over send/recv (GPipe: every microbatch's
forward, then every backward), optionally times data parallelism
(ppdp.py). Stage 0 holds the embedding and layer 0, stage 1 layer 1, the
final LayerNorm and its own copy of the tied word embedding for the LM
head, whose gradient is summed over the two stages after backward
(Megatron's embedding group). The grad norm counts the tied embedding on
stage 0 only and is summed over pp.

Mesh {"pp": 2, "dp": d}, rank = pp*d + dp; the dp ranks of a stage
average their gradients after backward.

Bugs: wrong_microbatch (stage 1 takes microbatch i's activation for
microbatch i+1), tied_not_summed, loss_not_divided, norm_not_reduced."""
import torch
import torch.distributed as dist

from common import adamw, capture, clip_grads, load_init, param_groups, set_lr
from model import GPT

WORLD = 2


def groups(pp, dp, rank):
    """(pp group of this rank, dp group of this rank); every rank creates
    every group, in the same order (torch.distributed's rule)."""
    mine = {}
    for d in range(dp):
        g = dist.new_group([s * dp + d for s in range(pp)])
        if rank % dp == d:
            mine["pp"] = g
    for s in range(pp):
        g = dist.new_group([s * dp + d for d in range(dp)]) if dp > 1 else None
        if rank // dp == s:
            mine["dp"] = g
    return mine["pp"], mine["dp"]


def main(job, dp=1):
    cfg, bugs = job.cfg, job.bugs
    stage, d = job.rank // dp, job.rank % dp
    pp_group, dp_group = groups(2, dp, job.rank)
    peer = job.rank + dp if stage == 0 else job.rank - dp
    model = GPT(cfg, rows=lambda: job.rows, layers=[stage], first=stage == 0, last=stage == 1)
    load_init(model, job)
    wte = model.embedding.word_embeddings.weight
    opt = adamw(cfg, param_groups(model, bugs), bugs)
    mesh, coords = {"pp": 2, "dp": dp}, {"pp": stage, "dp": d}
    cap = capture(job, model, mesh, coords)  # parity
    cap.params(-1)  # parity
    B_local = cfg.B // dp
    M = B_local // cfg.micro_batch if dp == 1 else B_local  # microbatches of 1 under dp
    mb = B_local // M
    divide = 1 if "loss_not_divided" in bugs else M
    shape = (mb, cfg.T, cfg.C)
    for s in range(job.inputs.steps):
        cap.step(s)  # parity
        ids, labels = job.inputs.batch(s)
        opt.zero_grad(set_to_none=True)
        kept, total = [], torch.zeros(1, dtype=torch.float64)
        for i in range(M):
            m = (i + 1) % M if stage == 1 and "wrong_microbatch" in bugs else i  # BUG: off by one
            r0 = d * B_local + m * mb
            job.rows = slice(r0, r0 + mb)
            cap.microbatch(m, M)  # parity
            with job.autocast():
                if stage == 0:
                    x = model(ids[job.rows])
                    dist.send(x.detach().float().contiguous(), peer)
                    kept.append(x)
                else:
                    x = torch.empty(shape)
                    dist.recv(x, peer)
                    x.requires_grad_(True)
                    logits, loss = model(x, labels[job.rows])
                    cap.logits(logits)  # parity
                    total += loss.detach().double() / M
                    kept.append((x, loss))
        for i in range(M):
            if stage == 1:
                x, loss = kept[i]
                (loss / divide).backward()
                dist.send(x.grad.contiguous(), peer)
            else:
                g = torch.empty(shape)
                dist.recv(g, peer)
                kept[i].backward(g.to(kept[i].dtype))
        cap.microbatch(None)  # parity
        if "tied_not_summed" not in bugs:  # BUG: each stage keeps its own share of the tied gradient
            dist.all_reduce(wte.grad, group=pp_group)
        if dp_group is not None:
            for p in model.parameters():
                dist.all_reduce(p.grad, group=dp_group)
                p.grad /= dp
        if stage == 1:
            cap.loss(total.float())  # parity
        cap.grads(s)  # parity
        norm = clip_grads(cfg, list(model.parameters()), lambda p: stage == 0 or p is not wte,
                          pp_group, bugs)
        cap.scalar("grad_norm", norm)  # parity
        cap.scalar("lr", set_lr(opt, cfg, s))  # parity
        opt.step()
        cap.params(s)  # parity
        cap.optimizer_state(opt, s)  # parity
    cap.w.save(job.path())  # parity
