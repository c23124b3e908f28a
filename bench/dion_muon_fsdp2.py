#!/usr/bin/env python3
"""dion_muon_fsdp2.py SPEC [--ranks 2] [--steps 4] [--threads 1]: times microsoft/dion's Muon step under FSDP2 on the
CPU (gloo), for bench/step-compare.py's --extra. dion must be installed
beside the project (`pip install --no-deps -e <a checkout of
microsoft/dion>` into the interpreter that runs this; it is never part of
this repository). SPEC gives the Muon matrices (a muon-spec/1 file's params
of 2 or more dims), each sharded on dim 0 over the ranks with fully_shard,
as the spec's FSDP does. dion runs as it does by default (its bf16
Newton-Schulz, Polar Express coefficients). Prints one JSON line: the median and minimum step
seconds after one warm-up step (a barrier before each step; a step lasts
until the slowest rank is done). The bytes dion moves are not counted
(bytes_received 0). Not part of `make check`.
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
parser.add_argument("--port", type=int, default=29527)
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
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from dion import Muon
    mesh = init_device_mesh("cpu", (args.ranks,))
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Module()
    for i, s in enumerate(shapes):
        model.register_parameter(
            f"w{i}", torch.nn.Parameter(torch.randn(s, generator=gen) * 0.02))
    fully_shard(model, mesh=mesh)
    params = list(model.parameters())
    opt = Muon(params, distributed_mesh=mesh, lr=1e-3, mu=0.95,
               weight_decay=0.1, nesterov=True)
    times = []
    for step in range(args.steps):
        for p in params:  # the reduce-scattered gradient FSDP2 leaves
            full = torch.randn(p.shape, generator=gen)
            p.grad = torch.distributed.tensor.distribute_tensor(
                full, p.device_mesh, p.placements)
        dist.barrier()
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    gathered = [None] * args.ranks
    dist.all_gather_object(gathered, times)
    if rank == 0:
        steps = [max(t[s] for t in gathered) for s in range(args.steps)][1:]
        out.put({"note": "dion Muon, FSDP2, its default (bf16) Newton-Schulz "
                         "(bytes not counted)",
                 "ranks": args.ranks, "threads": args.threads,
                 "matrices": len(shapes),
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
