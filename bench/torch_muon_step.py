#!/usr/bin/env python3
"""torch_muon_step.py [--layers N] [--steps S]: times torch.optim.Muon's step
on the Muon matrices of N Llama-3-8B layers (the shapes of
llama3_8b_spec.py), f32 parameters and gradients on one GPU, Newton-Schulz in
bf16 as torch.optim.Muon runs it. Prints one JSON line: the median and
minimum step seconds after two warm-up steps, timed with CUDA events."""
import argparse
import json
import statistics

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--layers", type=int, default=8)
parser.add_argument("--steps", type=int, default=10)
args = parser.parse_args()

hidden, kv, mlp = 4096, 1024, 14336
shapes = [[hidden, hidden], [kv, hidden], [kv, hidden], [hidden, hidden],
          [mlp, hidden], [mlp, hidden], [hidden, mlp]] * args.layers
torch.manual_seed(0)
params = [torch.nn.Parameter(torch.randn(s, device="cuda") * 0.02)
          for s in shapes]
for p in params:
    p.grad = torch.randn_like(p)
opt = torch.optim.Muon(params, lr=0.02, momentum=0.95, nesterov=True,
                       weight_decay=0.1, ns_steps=5, adjust_lr_fn="original")
times = []
for step in range(args.steps + 2):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    opt.step()
    end.record()
    torch.cuda.synchronize()
    if step >= 2:
        times.append(start.elapsed_time(end) / 1e3)
print(json.dumps({"impl": "torch.optim.Muon", "torch": torch.__version__,
                  "device": torch.cuda.get_device_name(),
                  "matrices": len(shapes), "step_seconds": statistics.median(times),
                  "step_seconds_min": min(times)}))
