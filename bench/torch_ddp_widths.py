#!/usr/bin/env python3
"""A whole DDP training step (zero_grad, forward, backward, optimizer step)
of the example GPT (examples/torch/train_gpt.py, 2 blocks; Muon on the 8
block matrices qkv 3d x d, proj d x d, fc 4d x d, out d x 4d, AdamW on the
rest) at several widths d, on N spawned gloo ranks, in the modes below timed
interleaved, round after round, on models of the same initial weights:

  torch   DDP all-reduces every gradient; torch.optim.Muon orthogonalizes
          every matrix on every rank, in f32 (its Newton-Schulz patched to
          f32 here: torch's own runs in bf16), torch.optim.AdamW the rest;
  muonc   the same DDP; muonc.torch.Muon (f32, one owner per matrix, then
          the update sent to the other ranks);
  placed  muonc with the placement redundant_below=--redundant-below: the
          smaller matrices orthogonalized by every rank (DDP left their
          whole gradient there), the others once;
  owner   muonc with opt.reduce_gradients_to_owners(ddp): DDP's hook
          reduces each matrix's gradient to its owner during the backward
          pass instead of all-reducing it (one all_to_all per bucket;
          AdamW's gradients summed in shares by it and gathered at the
          step).
  owner_all  (only with --modes) owner with the engine stepping the
          momentum of every matrix on every rank, as before 490dc14 (the
          zero momentum of the matrices a rank does not own included).

Prints per width and mode the median and best of the slowest rank's step
(ms) over the rounds, the bytes a rank sends per step (the mean over
the ranks): DDP's ring
all-reduce (2(N-1)/N of the gradients it reduces) plus muonc's exchanges
(opt.last_step_counters), against DDP's alone; `paired`: the median over
the rounds of the mode's step against the faster of the other modes in
the same round (below 1: faster than all of them); `step ms`: the median
of the slowest rank's optimizer step alone (opt.step(); the hook's work
is in the backward pass). Not part of `make check`:

    build/venv/bin/python bench/torch_ddp_widths.py --ranks 2

The ranks talk over loopback, where a byte costs about a memory copy. To
give them a link of a given bandwidth instead (as root; it shapes all of
the machine's loopback traffic until removed):

    tc qdisc add dev lo root tbf rate 2gbit burst 256kb latency 100ms
    build/venv/bin/python bench/torch_ddp_widths.py --ranks 2
    tc qdisc del dev lo root
"""
import argparse
import os
import statistics
import sys
import time

from example_gpt import load_example, spawn
MODES = ("torch", "muonc", "placed", "owner")
EXTRA_MODES = ("owner_all",)
VOCAB, CONTEXT, LAYERS = 96, 64, 2


def newton_schulz_f32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim.Muon's orthogonalization (the quintic iteration with its
    coefficients), kept in f32: what "torch, f32" means in this table."""
    import torch
    a, b, c = ns_coefficients
    x = grad.to(torch.float32)
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def paired_ratios(times, steps):
    """{mode: the median over the rounds of (its median step in the round /
    the faster of the other modes' median steps in that round)}. The modes
    of one round run within a minute of each other, so the ratio is less
    exposed to the machine's drift than the medians over the whole run."""
    rounds = len(next(iter(times.values()))) // steps
    per_round = {m: [statistics.median(t[r * steps:(r + 1) * steps])
                     for r in range(rounds)] for m, t in times.items()}
    return {m: statistics.median(
                own[r] / min(per_round[o][r] for o in per_round if o != m)
                for r in range(rounds)) if len(per_round) > 1 else 1.0
            for m, own in per_round.items()}


def make_mode(gpt, mode, d, heads, below):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from muonc.torch import Muon
    torch.manual_seed(0)
    model = gpt.GPT(VOCAB, LAYERS, d, heads, CONTEXT)
    ddp = DDP(model)
    muon, adamw = gpt.muon_and_adamw(model)
    if mode == "torch":
        opts = [torch.optim.Muon(muon, lr=0.02, momentum=0.95,
                                 weight_decay=0.1, adjust_lr_fn="original"),
                torch.optim.AdamW(adamw, lr=3e-3, weight_decay=0.1)]
    else:
        from muonc.torch import create_dtensor_config
        config = create_dtensor_config(model)
        if mode == "placed":
            config.update(placement="redundant_below", redundant_below=below)
        opts = [Muon([{"params": muon, "lr": 0.02, "weight_decay": 0.1},
                      {"params": adamw, "use_muon": False, "lr": 3e-3,
                       "weight_decay": 0.1}], ns_dtype="f32",
                     adjust_lr_fn="original", distributed_config=config)]
        if mode in ("owner", "owner_all"):
            opts[0].reduce_gradients_to_owners(ddp)
        if mode == "owner_all":
            opts[0].engine.set_gradients_reduced_to_owners(False)
    return model, ddp, opts


def rank_main(rank, args, out):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import torch.optim._muon as torch_muon
    torch.set_num_threads(1)
    torch_muon._zeropower_via_newtonschulz = newton_schulz_f32
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    gpt = load_example()
    n = args.ranks
    rows = []
    modes = args.modes
    for d in args.widths:
        runs = {m: make_mode(gpt, m, d, args.heads, args.redundant_below)
                for m in modes}
        first = runs[modes[0]][0]
        params = sum(p.numel() for p in first.parameters())
        allreduce = 2 * (n - 1) / n * params * 4
        # What DDP's hook still all-reduces in owner mode: the gradients of
        # parameters outside muonc's optimizer (none here). Its own
        # gradients (matrices to owners, AdamW's in shares) are counted in
        # opt.last_step_counters.
        owners = [runs[m] for m in modes if m.startswith("owner")]
        foreign = 0
        for model, _, opts in owners[:1]:
            ours = {id(p) for g in opts[0].param_groups for p in g["params"]}
            foreign = sum(p.numel() for p in model.parameters()
                          if id(p) not in ours)
        owner_allreduce = 2 * (n - 1) / n * foreign * 4
        times = {m: [] for m in modes}
        steps = {m: [] for m in modes}  # opt.step() alone
        sent = {m: 0 for m in modes}
        g = torch.Generator().manual_seed(1)
        for r in range(args.rounds + 1):  # round 0 warms up
            # The same batches for every mode.
            xs = [torch.randint(0, VOCAB, (args.batch * n, CONTEXT + 1),
                                generator=g)[rank::n]
                  for _ in range(args.steps)]
            for mode in modes:
                model, ddp, opts = runs[mode]
                for x in xs:
                    dist.barrier()
                    start = time.perf_counter()
                    for o in opts:
                        o.zero_grad()
                    logits = ddp(x[:, :-1])
                    F.cross_entropy(logits.reshape(-1, VOCAB),
                                    x[:, 1:].reshape(-1)).backward()
                    stepping = time.perf_counter()
                    for o in opts:
                        o.step()
                    end = time.perf_counter()
                    slowest = torch.tensor([end - start, end - stepping])
                    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                    if r:
                        times[mode].append(slowest[0].item())
                        steps[mode].append(slowest[1].item())
                if mode != "torch":
                    # The mean over the ranks: owners send more than others.
                    mine = torch.tensor(
                        [float(opts[0].last_step_counters["bytes_sent"])])
                    dist.all_reduce(mine)
                    sent[mode] = mine.item() / n
        # DDP's all-reduce (of everything, or in owner mode of what is not
        # reduced to owners), plus muonc's exchanges.
        total = {m: (allreduce if m == "torch" else
                     owner_allreduce + sent[m] if m.startswith("owner") else
                     allreduce + sent[m]) for m in modes}
        paired = paired_ratios(times, args.steps)
        for mode in modes:
            rows.append((d, mode, statistics.median(times[mode]),
                         min(times[mode]), total[mode], allreduce,
                         paired[mode], statistics.median(steps[mode])))
        # Every mode trained the same batches from the same weights.
        ref = list(first.parameters())
        for mode in modes[1:]:
            worst = max(((p - q).abs().max() / q.abs().max()).item()
                        for p, q in zip(runs[mode][0].parameters(), ref))
            rows.append((d, f"{mode} vs {modes[0]}", worst))
    if rank == 0:
        print(f"{n} ranks (gloo, 1 thread each), 2-block GPT, batch "
              f"{args.batch}x{CONTEXT} per rank, {args.rounds} rounds x "
              f"{args.steps} steps per mode; whole step, the slowest rank's")
        print(f"{'d':>4} {'mode':9} {'median ms':>10} {'best ms':>9} "
              f"{'MB sent/rank':>13} {'vs DDP':>7} {'paired':>8} "
              f"{'step ms':>8}")
        for row in rows:
            if len(row) == 3:
                print(f"{row[0]:>4} {row[1]}: largest relative difference "
                      f"of the weights {row[2]:.2e}")
                continue
            d, mode, med, best, total, allreduce, paired, step = row
            print(f"{d:>4} {mode:9} {med * 1e3:10.1f} {best * 1e3:9.1f} "
                  f"{total / 1e6:13.3f} {total / allreduce:7.2f} "
                  f"{paired:8.3f} {step * 1e3:8.1f}")
        sys.stdout.flush()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--widths", type=int, nargs="+",
                   default=[96, 192, 384, 768])
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--redundant-below", type=int, default=40000,
                   help="placed: matrices of fewer elements are "
                   "orthogonalized by every rank")
    p.add_argument("--modes", nargs="+", default=list(MODES),
                   choices=MODES + EXTRA_MODES,
                   help="the modes to time, interleaved in this order (the "
                   "first is the reference of the weights' comparison)")
    p.add_argument("--port", type=int, default=29571)
    spawn(rank_main, p.parse_args())


if __name__ == "__main__":
    main()
