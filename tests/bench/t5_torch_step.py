#!/usr/bin/env python3
"""t5_torch_step.py CONFIG_JSON STEPS - PyTorch CPU eager (float32, one
thread) forward and backward of the T5-style model of tests/torch/t5_ref.py
(the encoder on its P source rows, the decoder on its T - P target rows:
no row computed twice), with the config parity prints (--print-config).
Prints "torch step median MS ms" over STEPS timed steps after one
untimed. The reference bench_encdec.sh puts beside parity's step."""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "torch"))
import torch  # noqa: E402

import t5_ref as R5  # noqa: E402

torch.set_num_threads(1)
cfg = R5.T5Config(json.load(open(sys.argv[1])))
steps = int(sys.argv[2])
g = torch.Generator().manual_seed(1)
params = {n: torch.randn(s, generator=g, dtype=torch.float32) * 0.02
          for n, s in R5.param_shapes(cfg).items()}
B = cfg.global_batch if hasattr(cfg, "global_batch") else 4
ids = torch.randint(0, cfg.V, (B, cfg.T), generator=g)
times = []
for k in range(steps + 1):
    t0 = time.perf_counter()
    R5.forward_backward(params, cfg, ids, ids, masks=None, want_acts=False)
    if k:
        times.append(time.perf_counter() - t0)
print(f"torch step median {1e3 * statistics.median(times):.1f} ms")
