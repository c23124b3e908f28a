#!/usr/bin/env python3
"""What a bucket's reduction costs on gloo, one way against another: the
collectives muonc's DDP hook could use for a bucket of `numel` float32
gradients, on N spawned ranks (one thread each), median ms of the slowest
rank:

  all_reduce        DDP's default;
  reduces           one dist.reduce per owner (a 1/N slice each);
  reduce_scatter    dist.reduce_scatter of N equal slices;
  all_to_all + sum  one all_to_all_single (each rank its summand of every
                    other rank's slice), then the N summands added in rank
                    order: what reduce_gradients_to_owners does;
  all_gather        dist.all_gather of the slices, and the same through
                    one all_to_all_single (the step's gather of shares).

Not part of `make check`:

    build/venv/bin/python bench/gloo_collectives.py --ranks 4
"""
import argparse
import os
import statistics
import time


def timed(fn, repeats):
    import torch
    import torch.distributed as dist
    times = []
    for _ in range(repeats + 3):  # 3 warm-ups
        dist.barrier()
        start = time.perf_counter()
        fn()
        slowest = torch.tensor([time.perf_counter() - start])
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        times.append(slowest.item())
    return statistics.median(times[3:]) * 1e3


def rank_main(rank, args):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    n = args.ranks
    dist.init_process_group("gloo", rank=rank, world_size=n)
    rows = []
    for numel in args.numel:
        x = torch.randn(numel // n * n)
        slices = list(x.chunk(n))
        part = torch.empty_like(slices[0])
        out = torch.empty_like(x)

        def reduces():
            works = [dist.reduce(s, dst=r, async_op=True)
                     for r, s in enumerate(slices)]
            for w in works:
                w.wait()

        def all_to_all_sum():
            dist.all_to_all_single(out, x)
            summands = out.view(n, -1)
            total = summands[0].clone()
            for s in summands[1:]:
                total += s

        gathered = [torch.empty_like(s) for s in slices]
        repeated = slices[rank].repeat(n)
        cases = {
            "all_reduce": lambda: dist.all_reduce(x),
            "reduces": reduces,
            "reduce_scatter": lambda: dist.reduce_scatter(part, slices),
            "all_to_all + sum": all_to_all_sum,
            "all_gather": lambda: dist.all_gather(gathered, slices[rank]),
            "all_gather by all_to_all": lambda: dist.all_to_all_single(
                out, repeated),
        }
        for name, fn in cases.items():
            rows.append((numel, name, timed(fn, args.repeats)))
    if rank == 0:
        print(f"{n} ranks, gloo, one thread each; median ms of the slowest "
              f"rank over {args.repeats} runs")
        for numel, name, ms in rows:
            print(f"{numel:>10} floats  {name:26} {ms:8.2f}")
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--numel", type=int, nargs="+",
                   default=[250_000, 1_000_000, 4_000_000, 14_000_000])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--port", type=int, default=29573)
    args = p.parse_args()
    import torch.multiprocessing as mp
    mp.start_processes(rank_main, args=(args,), nprocs=args.ranks,
                       join=True, start_method="spawn")


if __name__ == "__main__":
    main()
