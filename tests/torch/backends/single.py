"""single.py - the single-device backend: the whole model, the whole
batch in MODEL.md's microbatches (gradient accumulation), torch AdamW."""
from common import Capture, adamw, load_init, param_groups, train
from model import GPT

WORLD = 1


def main(job):
    cfg = job.cfg
    model = GPT(cfg, masks=job.masks, rows=lambda: job.rows)
    load_init(model, job)
    opt = adamw(cfg, param_groups(model, job.bugs), job.bugs)
    cap = Capture({}, {}, lambda kind, name: None, job.precision)
    train(job, cap, model, opt, model.named_parameters, M=cfg.B // cfg.micro_batch)
