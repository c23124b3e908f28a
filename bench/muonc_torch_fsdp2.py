#!/usr/bin/env python3
"""muonc_torch_fsdp2.py SPEC [--ranks 2] [--steps 4] [--threads 1]
[--ns-dtype f32|bf16] [--ns-form auto|standard|gram]: times muonc.torch.Muon's step under FSDP2 on the CPU
(gloo), for bench/step-compare.py. Run it with an interpreter that has
torch and muonc (`make python`: build/venv/bin/python). SPEC gives the
Muon matrices (a muon-spec/1 file's params of 2 or more dims), each sharded
on dim 0 over the ranks with fully_shard, as bench/dion_muon_fsdp2.py does;
muonc reads the placements (create_dtensor_config) and compiles the plan
at construction, outside the timed steps. --ns-dtype: muonc.torch's
default on the CPU is f32; --ns-form: muonc.torch's ns_form (auto, the
default: the Gram form on wide and tall matrices where it pays; standard:
torch's iteration; gram). --communicator mpi: the ranks run under mpirun (started
here) and the exchanges go through MPI, as muon-run's do, which leaves the
Python layer as the only difference from muon-run on the same plan. Prints one JSON line: the median and minimum step seconds
after one warm-up step (a barrier before each step; a step lasts until the
slowest rank is done) and the bytes all ranks receive in a step (what the
runtime asks the communicator to receive). Not part of `make check`.
"""

import time

from torch_ranks import init_rank, parse_args, report, run

args = parse_args(default_port=29537, default_ns_dtype="f32")
ns_dtype = args.ns_dtype

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def rank_main(rank, shapes, out):
    init_rank(args, rank)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor
    from muonc.torch import Muon
    mesh = init_device_mesh("cpu", (args.ranks,))
    gen = torch.Generator().manual_seed(0)
    model = torch.nn.Module()
    for i, s in enumerate(shapes):
        model.register_parameter(
            f"w{i}", torch.nn.Parameter(torch.randn(s, generator=gen) * 0.02))
    fully_shard(model, mesh=mesh)
    params = list(model.parameters())
    opt = Muon(params, lr=1e-3, momentum=0.95, nesterov=True,
               weight_decay=0.1, ns_steps=5, ns_dtype=ns_dtype,
               communicator=args.communicator, ns_form=args.ns_form)
    # Count the bytes the plan's exchanges receive (the communicator's
    # all_to_all_v, which the runtime calls) from the second step on: the
    # optimizer binds its parameters, and makes its communicator, at the
    # first.
    received = [0]

    def count_exchanges():
        # The runtime starts exchanges with start_all_to_all_v where the
        # communicator has it, else calls all_to_all_v.
        for method in ("all_to_all_v", "start_all_to_all_v"):
            inner = getattr(opt._comm, method)

            def counting(send, sc, so, recv, rc, ro, inner=inner):
                received[0] += sum(rc)
                return inner(send, sc, so, recv, rc, ro)
            setattr(opt._comm, method, counting)
    times = []
    for step in range(args.steps):
        if step == 1 and args.communicator == "torch":
            count_exchanges()
        for p in params:  # the reduce-scattered gradient FSDP2 leaves
            p.grad = distribute_tensor(torch.randn(p.shape, generator=gen),
                                       p.device_mesh, p.placements)
        dist.barrier()
        start = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - start)
    every = [None] * args.ranks
    dist.all_gather_object(every, received[0] // max(1, args.steps - 1))
    report(args, times, out,
           note=f"muonc.torch.Muon, FSDP2, ns {ns_dtype}"
                f", form {args.ns_form}, "
                f"{args.communicator} exchanges",
           matrices=len(shapes),
           # MPI's bytes are not counted here (muon-run counts the plan's).
           bytes_received=sum(every))


if __name__ == "__main__":
    run(args, rank_main)
