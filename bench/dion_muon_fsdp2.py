#!/usr/bin/env python3
"""dion_muon_fsdp2.py SPEC [--ranks 2] [--steps 4] [--threads 1]
[--ns-dtype bf16|f32]: times microsoft/dion's Muon step under FSDP2 on the
CPU (gloo), for bench/step-compare.py's --extra. dion must be installed
beside the project (`pip install --no-deps -e <a checkout of
microsoft/dion>` into the interpreter that runs this; it is never part of
this repository). SPEC gives the Muon matrices (a muon-spec/1 file's params
of 2 or more dims), each sharded on dim 0 over the ranks with fully_shard,
as the spec's FSDP does. dion runs as it does by default (its bf16
Newton-Schulz, Polar Express coefficients); with --ns-dtype f32 its
Newton-Schulz runs in float32 instead (the same Polar Express iteration,
through dion's newton_schulz_func argument; dion still sends the momentum
in bf16, so only the orthogonalization changes precision). Prints one JSON line: the median and minimum step
seconds after one warm-up step (a barrier before each step; a step lasts
until the slowest rank is done). The bytes dion moves are not counted
(bytes_received 0). Not part of `make check`.
"""

import time

from torch_ranks import init_rank, parse_args, report, run

args = parse_args(default_port=29527, default_ns_dtype="bf16")
ns_dtype = args.ns_dtype

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def polar_express_f32(G, epsilon=1e-6):
    """dion's Polar Express iteration (dion/polar_express.py: the same
    coefficients, normalization and tall/wide handling) in float32."""
    from dion.polar_express import _POLAR_EXPRESS_COEFFS
    x = G.to(torch.float32)
    x = x / (x.norm(dim=(-2, -1), keepdim=True) * 1.02 + epsilon)
    tall = G.size(-2) > G.size(-1)
    for a, b, c in _POLAR_EXPRESS_COEFFS:
        gram = x.mT @ x if tall else x @ x.mT
        poly = b * gram + c * (gram @ gram)
        x = a * x + (x @ poly if tall else poly @ x)
    return x


def rank_main(rank, shapes, out):
    init_rank(args, rank)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor
    from dion import Muon
    mesh = init_device_mesh("cpu", (args.ranks,))
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Module()
    for i, s in enumerate(shapes):
        model.register_parameter(
            f"w{i}", torch.nn.Parameter(torch.randn(s, generator=gen) * 0.02))
    fully_shard(model, mesh=mesh)
    params = list(model.parameters())
    extra = {"newton_schulz_func": polar_express_f32} if ns_dtype == "f32" else {}
    opt = Muon(params, distributed_mesh=mesh, lr=1e-3, mu=0.95,
               weight_decay=0.1, nesterov=True, **extra)
    times = []
    for step in range(args.steps):
        for p in params:  # the reduce-scattered gradient FSDP2 leaves
            p.grad = distribute_tensor(torch.randn(p.shape, generator=gen),
                                       p.device_mesh, p.placements)
        dist.barrier()
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    report(args, times, out,
           note=f"dion Muon, FSDP2, {ns_dtype} Newton-Schulz"
                f"{' (its default)' if ns_dtype == 'bf16' else ''}, bf16 "
                "wire (bytes not counted)",
           matrices=len(shapes), bytes_received=0)


if __name__ == "__main__":
    run(args, rank_main)
