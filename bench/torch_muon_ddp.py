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
import argparse
import json
import os
import statistics
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("spec")
parser.add_argument("--ranks", type=int, default=2)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--port", type=int, default=29517)
args = parser.parse_args()
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(args.threads)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def shapes_of(spec_path):
    spec = json.load(open(spec_path))
    return [p["shape"] for p in spec["params"]
            if len(p["shape"]) >= 2 and p.get("optimizer", "muon") != "adamw"]


def rank_main(rank, shapes, out):
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
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
    gathered = [None] * args.ranks
    dist.all_gather_object(gathered, times)
    if rank == 0:
        steps = [max(t[s] for t in gathered) for s in range(args.steps)][1:]
        out.put({"note": f"torch {torch.__version__} Muon, bf16, every rank "
                         "every matrix",
                 "ranks": args.ranks,
                 "threads": args.threads, "matrices": len(shapes),
                 "step_seconds": statistics.median(steps),
                 "step_seconds_min": min(steps), "bytes_received": 0})
    dist.destroy_process_group()


if __name__ == "__main__":
    shapes = shapes_of(args.spec)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, shapes, queue))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    result = queue.get()
    for p in procs:
        p.join()
    print(json.dumps(result))
    sys.exit(max(p.exitcode for p in procs))
