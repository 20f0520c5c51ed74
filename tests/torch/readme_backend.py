"""A Megatron-style TP=2 gpt-micro backend (gloo, 2 processes), judged by parity:
    parity train --model gpt-micro --steps 1 --export-weights W --names megatron-lm
    python3 readme_backend.py W/model.safetensors OUT ref/data/corpus.txt
    parity judge --model gpt-micro OUT/*.safetensors"""
import math, os, sys
import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
from parity.rankfile import RankWriter, read_rank_file
from parity.torch import Capture, Dropout

V, T, C, H, L, FF, B, P, SEED, TP = 256, 16, 16, 2, 2, 64, 4, 0.1, 1234, 2  # MODEL.md: gpt-micro

def all_reduced(x):
    x = x.clone(); dist.all_reduce(x); return x
class Copy(torch.autograd.Function):  # Megatron's f: identity forward, all-reduced gradient
    forward, backward = staticmethod(lambda ctx, x: x), staticmethod(lambda ctx, g: all_reduced(g))
class Sum(torch.autograd.Function):  # Megatron's g: all-reduced forward, identity gradient
    forward, backward = staticmethod(lambda ctx, x: all_reduced(x)), staticmethod(lambda ctx, g: g)
class Column(nn.Linear):  # this rank's out/TP rows (qkv rows are (head, q|k|v, d): whole heads)
    cut = {"weight": 0, "bias": 0}
    def forward(self, x): return super().forward(Copy.apply(x))
class Row(nn.Linear):  # this rank's in/TP columns; the partial products summed, then the bias
    cut = {"weight": 1}
    def forward(self, x): return Sum.apply(F.linear(x, self.weight)) + self.bias
class Attention(nn.Module):  # causal softmax attention over this rank's heads
    def __init__(s, l, r):
        super().__init__(); s.drop, s.h = Dropout(SEED, "attention_dropout", l, P), r * H // TP
    def forward(s, qkv):
        q, k, v = qkv.view(B, T, H // TP, 3, C // H).permute(3, 0, 2, 1, 4)
        a = (q @ k.transpose(-1, -2) / math.sqrt(C // H)).masked_fill(torch.ones(T, T).triu(1) > 0, -math.inf)
        a = s.drop(a.softmax(-1), (slice(None), slice(s.h, s.h + H // TP)), (B, H, T, T))  # our heads' mask
        return (a @ v).transpose(1, 2).reshape(B, T, C // TP)
class Layer(nn.Module):
    def __init__(s, l, r):
        super().__init__(); s.input_layernorm, s.post_attention_layernorm = nn.LayerNorm(C), nn.LayerNorm(C)
        s.self_attention, s.mlp = a, m = nn.Module(), nn.Module()
        a.query_key_value, a.core_attention = Column(C, 3 * C // TP), Attention(l, r)
        a.dense = Row(C // TP, C)
        m.dense_h_to_4h, m.dense_4h_to_h = Column(C, FF // TP), Row(FF // TP, C)
        s.drop1, s.drop2 = (Dropout(SEED, f"{x}_output_dropout", l, P) for x in ("attention", "mlp"))
    def forward(s, x):
        a, m = s.self_attention, s.mlp
        x = x + s.drop1(a.dense(a.core_attention(a.query_key_value(s.input_layernorm(x)))))
        h = F.gelu(m.dense_h_to_4h(s.post_attention_layernorm(x)), approximate="tanh")
        return x + s.drop2(m.dense_4h_to_h(h))
class GPT(nn.Module):  # parity's module names, so Capture finds every site; the embedding replicated
    def __init__(s, r):
        super().__init__(); s.embedding = e = nn.Module(); s.final_layernorm = nn.LayerNorm(C)
        e.word_embeddings, e.position_embeddings = nn.Embedding(V, C), nn.Embedding(T, C)
        e.dropout = Dropout(SEED, "dropout.embedding", None, P)
        e.forward = lambda ids: e.dropout(e.word_embeddings(ids) + e.position_embeddings.weight)
        s.layers = nn.ModuleList(Layer(l, r) for l in range(L))
    def forward(s, ids, labels):
        x = s.embedding(ids)
        for layer in s.layers: x = layer(x)
        logits = s.final_layernorm(x) @ s.embedding.word_embeddings.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, V), labels.reshape(-1))

def main(r, weights, out, corpus):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=r, world_size=TP); torch.set_num_threads(1)
    model, w0 = GPT(r), read_rank_file(weights).tensors  # parity's initial weights
    for name, mod in model.named_modules():
        for pn, p in mod.named_parameters(recurse=False):
            t, p.cut = torch.from_numpy(w0[f"{name}.{pn}"]), getattr(mod, "cut", {}).get(pn)
            p.data.copy_(t if p.cut is None else t.chunk(TP, p.cut)[r])  # this rank's block
    ps = list(model.parameters())
    groups = [{"params": [p for p in ps if p.dim() == 2]}, {"params": [p for p in ps if p.dim() < 2],
                                                          "weight_decay": 0.0}]  # no decay on 1-D tensors
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    data = torch.tensor(list(open(corpus, "rb").read()))
    w = RankWriter(mesh={"tp": TP}, coords={"tp": r}); cap = Capture(w, model)  # parity
    cap.params(-1)  # parity
    for s in range(3):
        x = torch.stack([data[(s * B + b) * T % (len(data) - T - 1):][:T + 1] for b in range(B)])  # MODEL.md
        cap.step(s); cap.batch(x[:, :-1], x[:, 1:])  # parity
        loss = model(x[:, :-1], x[:, 1:]); loss.backward()
        cap.loss(loss); cap.grads(s)  # parity
        sq = sum((p.grad.double() ** 2).sum() / (TP if p.cut is None else 1) for p in ps)  # replicas once
        norm = all_reduced(sq.reshape(1)).sqrt().float()
        for p in ps:
            p.grad.mul_(1.0 / (norm + 1e-6)) if norm > 1.0 else None  # clip 1.0
        for g in opt.param_groups: g["lr"] = 1e-3 * min(1.0, (s + 1) / 2)  # warm-up 2, then cosine: 1e-3 at 2
        cap.scalar("grad_norm", norm); cap.scalar("lr", opt.param_groups[0]["lr"])  # parity
        opt.step(); opt.zero_grad()
        cap.params(s); cap.optimizer_state(opt, s)  # parity
    w.save(os.path.join(out, f"rank{r}.safetensors")); dist.destroy_process_group()  # parity

if __name__ == "__main__":
    torch.multiprocessing.spawn(main, args=tuple(sys.argv[1:4]), nprocs=TP)
