#!/usr/bin/env python3
"""torch_muon_ddp.py SPEC [--ranks 2] [--steps 4] [--threads 1]: times
torch.optim.Muon's step as it runs under DDP on the CPU: every rank holds
every parameter (f32) and orthogonalizes every matrix itself, in bf16 as
torch.optim.Muon does (torch's bf16 matmuls). SPEC gives the Muon matrices
(a muon-spec/1 file's params of 2 or more dims). The gradients are already
averaged when DDP's backward returns, so the step moves no bytes. Each rank
is a process of its own (gloo, `threads` intra-op threads); a step lasts
until the slowest rank is done (a barrier before each). Prints one JSON
line: the median and minimum step seconds after one warm-up step, as
`muon-run --report` counts them. Not part of `make check` (needs torch).
"""

import time

from torch_ranks import init_rank, parse_args, report, run

args = parse_args(default_port=29517)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def rank_main(rank, shapes, out):
    init_rank(args, rank)
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen) * 0.02)
              for s in shapes]
    opt = torch.optim.Muon(params, lr=1e-3, momentum=0.95, nesterov=True,
                           weight_decay=0.1, ns_steps=5,
                           adjust_lr_fn="original")
    times = []
    for step in range(args.steps):
        for p in params:  # the averaged gradient DDP leaves, the same on every rank
            p.grad = torch.randn(p.shape, generator=gen)
        dist.barrier()
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    report(args, times, out,
           note=f"torch {torch.__version__} Muon, bf16, every rank every "
                "matrix",
           matrices=len(shapes), bytes_received=0)


if __name__ == "__main__":
    run(args, rank_main)
