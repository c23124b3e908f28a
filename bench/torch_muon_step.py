#!/usr/bin/env python3
"""torch_muon_step.py [--layers N] [--steps S] [--device cuda|cpu]
[--divide D]: times torch.optim.Muon's step on the Muon matrices of N
Llama-3-8B layers (the shapes of llama3_8b_spec.py, every side divided by D:
--divide 32 for a dry run on the CPU), f32 parameters and gradients on one
GPU, Newton-Schulz in bf16 as torch.optim.Muon runs it. Prints one JSON
line: the median and minimum step seconds after two warm-up steps, timed
with CUDA events (on the CPU, with the wall clock)."""
import argparse
import json
import statistics
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--layers", type=int, default=8)
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
parser.add_argument("--divide", type=int, default=1)
args = parser.parse_args()

hidden, kv, mlp = (side // args.divide for side in (4096, 1024, 14336))
shapes = [[hidden, hidden], [kv, hidden], [kv, hidden], [hidden, hidden],
          [mlp, hidden], [mlp, hidden], [hidden, mlp]] * args.layers
torch.manual_seed(0)
params = [torch.nn.Parameter(torch.randn(s, device=args.device) * 0.02)
          for s in shapes]
for p in params:
    p.grad = torch.randn_like(p)
opt = torch.optim.Muon(params, lr=0.02, momentum=0.95, nesterov=True,
                       weight_decay=0.1, ns_steps=5, adjust_lr_fn="original")


def timed_step():
    """Seconds of one opt.step(): CUDA events on a GPU, else the clock."""
    if args.device == "cpu":
        start = time.perf_counter()
        opt.step()
        return time.perf_counter() - start
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    opt.step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3


times = [timed_step() for _ in range(args.steps + 2)][2:]
device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
print(json.dumps({"impl": "torch.optim.Muon", "torch": torch.__version__,
                  "device": device, "matrices": len(shapes),
                  "step_seconds": statistics.median(times),
                  "step_seconds_min": min(times)}))
