#!/usr/bin/env python3
"""What leaving parameters without a gradient costs muonc.torch's step: the
example GPT (examples/torch/train_gpt.py) under FSDP2 on N spawned gloo
ranks, `opt.step()` timed in three interleaved modes, round after round:

  all      every parameter has its gradient (no agreement beyond the
           step's one control all-gather);
  adamw    one AdamW parameter (the final norm's weight) has none;
  muon     one Muon matrix (the last block's fc) has none, so its bytes and
           its Newton-Schulz are left out too;
  flip     the same matrix has none on every other step: the set changes
           at every step, so every step agrees on it again (the worst
           case: one more small all-gather).

Prints, per mode, the median and best of the slowest rank's step times
over the rounds, each mode against `all`, and the control collectives a
step made on average (opt.last_step_counters). Not part of `make check`:

    build/venv/bin/python bench/torch_none_grads.py --ranks 2 --rounds 5
"""
import argparse
import os
import statistics
import sys
import time

from example_gpt import load_example, spawn
MODES = ("all", "adamw", "muon", "flip")


def rank_main(rank, args, out):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from muonc.torch import Muon
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    gpt = load_example()
    layers, d, heads, context = gpt.SIZES[args.size]
    vocab = 96
    torch.manual_seed(0)
    model = gpt.GPT(vocab, layers, d, heads, context)
    mesh = init_device_mesh("cpu", (args.ranks,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    muon, adamw = gpt.muon_and_adamw(model)
    opt = Muon([{"params": muon}, {"params": adamw, "use_muon": False,
                                   "lr": 3e-3}], lr=0.02)
    fc = model.blocks[-1].fc.weight
    left_out = {"all": None, "adamw": model.ln.weight, "muon": fc,
                "flip": fc}
    g = torch.Generator().manual_seed(1)
    times = {m: [] for m in MODES}
    control = {m: [] for m in MODES}
    local = args.batch // args.ranks
    for r in range(args.rounds + 1):  # round 0 warms up
        for mode in MODES:
            for s in range(args.steps):
                x = torch.randint(0, vocab, (args.batch, context + 1),
                                  generator=g)[rank * local:(rank + 1) * local]
                opt.zero_grad()
                F.cross_entropy(model(x[:, :-1]).reshape(-1, vocab),
                                x[:, 1:].reshape(-1)).backward()
                if left_out[mode] is not None and (mode != "flip" or s % 2):
                    left_out[mode].grad = None
                dist.barrier()
                start = time.perf_counter()
                opt.step()
                elapsed = time.perf_counter() - start
                slowest = torch.tensor([elapsed])
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                if r:
                    times[mode].append(slowest.item())
                    control[mode].append(
                        opt.last_step_counters["control_collectives"])
    if rank == 0:
        base = statistics.median(times["all"])
        print(f"{args.ranks} ranks, {args.size} GPT under FSDP2, "
              f"{args.rounds} rounds x {args.steps} steps per mode "
              "(opt.step(), the slowest rank's)")
        print(f"{'mode':8} {'median ms':>10} {'best ms':>9} {'vs all':>8} "
              f"{'control/step':>13}")
        for mode in MODES:
            med = statistics.median(times[mode])
            print(f"{mode:8} {med * 1e3:10.3f} {min(times[mode]) * 1e3:9.3f} "
                  f"{med / base:8.3f} {statistics.mean(control[mode]):13.2f}")
        sys.stdout.flush()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--size", default="small")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--port", type=int, default=29561)
    spawn(rank_main, p.parse_args())


if __name__ == "__main__":
    main()
