"""single.py - the single-device backend: the whole model, the whole
batch in MODEL.md's microbatches (gradient accumulation), torch AdamW."""
from common import adamw, capture, load_init, param_groups, train
from model import GPT

WORLD = 1


def main(job):
    cfg = job.cfg
    model = GPT(cfg, rows=lambda: job.rows)
    load_init(model, job)
    opt = adamw(cfg, param_groups(model, job.bugs), job.bugs)
    cap = capture(job, model, {}, {})  # parity
    train(job, cap, model, opt, M=cfg.B // cfg.micro_batch)
