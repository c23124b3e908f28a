#!/usr/bin/env python3
"""A small character-level GPT trained with muonc.torch.Muon under FSDP2.

    torchrun --nproc-per-node 4 examples/torch/train_gpt.py    # FSDP2, 4 ranks
    python examples/torch/train_gpt.py                         # one process

Both runs see the same data in the same order: at every step all ranks draw
the same global batch of windows from the corpus and rank r trains on its
r-th slice of it. FSDP2 averages the ranks' gradients, so the 4-rank run's
gradient is the one-process run's (up to the order of the sums) and the two
loss curves agree to rounding. Muon updates the blocks' matrices; AdamW (a
group with use_muon=False) the embeddings, the head, the norms and the
biases. The learning rate warms up linearly, then decays on a cosine to 10%
(torch.optim.lr_scheduler.LambdaLR over both groups).

Prints "step N/M  loss X  lr xF" every --log-every steps (the loss of the
whole global batch, averaged over the ranks) and a final line.
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "trainer", "data", "corpus.txt")

SIZES = {
    # name: (layers, d_model, heads, context)
    "small": (2, 64, 4, 64),
    "tiny": (1, 32, 2, 16),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=32,
                   help="global batch (sequences per step, split over the ranks)")
    p.add_argument("--lr", type=float, default=0.02, help="Muon's lr")
    p.add_argument("--adamw-lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--threads", type=int, default=0,
                   help="torch's intra-op threads per process (0: 1 under "
                        "torchrun, torch's default alone)")
    p.add_argument("--corpus", default=CORPUS)
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        # No bias on q/k/v: a key bias shifts every score of a row by the
        # same amount, so softmax ignores it and its gradient is rounding
        # noise, which AdamW's normalized step would amplify.
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, layers, d, heads, context):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def muon_and_adamw(model):
    """The blocks' matrices for Muon; embeddings, head, norms, biases for
    AdamW (the usual split: Muon suits the hidden linear maps only)."""
    muon, adamw = [], []
    for name, p in model.named_parameters():
        hidden = name.startswith("blocks.") and p.ndim == 2
        (muon if hidden else adamw).append(p)
    return muon, adamw


def lr_factor(step, warmup, steps):
    """Linear warmup to 1 over `warmup` steps, then a cosine to 0.1."""
    if step < warmup:
        return (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, steps - warmup - 1))
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * t))


def main():
    args = parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    distributed = "RANK" in os.environ  # started by torchrun
    threads = args.threads or (1 if distributed else 0)
    if threads:
        torch.set_num_threads(threads)
    rank = 0
    if distributed:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        dist.init_process_group("gloo")
        rank = dist.get_rank()
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} does not split over {world} ranks")
    from muonc.torch import Muon

    text = open(args.corpus, encoding="utf-8").read()
    chars = sorted(set(text))
    # The vocabulary padded to a multiple of 16, so that FSDP2's dim-0
    # shards of the embedding and the head are even on 1, 2, 4, 8 or 16
    # ranks (the padding's ids never occur).
    vocab = -(-len(chars) // 16) * 16
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    layers, d, heads, context = SIZES[args.size]

    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = GPT(vocab, layers, d, heads, context)
    if distributed:
        mesh = init_device_mesh("cpu", (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
    muon, adamw = muon_and_adamw(model)
    opt = Muon([{"params": muon, "name": "muon"},
                {"params": adamw, "name": "adamw", "use_muon": False,
                 "lr": args.adamw_lr, "weight_decay": 0.0}],
               lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: lr_factor(s, args.warmup, args.steps))

    order = torch.Generator().manual_seed(args.seed + 1)
    local = args.batch // world
    if rank == 0:
        n_muon = sum(p.numel() for p in muon)
        n_adamw = sum(p.numel() for p in adamw)
        print(f"{world} rank{'s' if world > 1 else ''}"
              f"{' (FSDP2)' if distributed else ''}, {args.size}: {layers} "
              f"layer(s), d {d}, context {context}, vocab {len(chars)} "
              f"(padded to {vocab}); {n_muon} Muon + {n_adamw} AdamW "
              f"parameters; global batch {args.batch} ({local} per rank)",
              flush=True)
    start = time.perf_counter()
    loss_value = float("nan")
    for step in range(args.steps):
        # Every rank draws the same global batch; rank r takes slice r.
        at = torch.randint(0, len(data) - context - 1, (args.batch,),
                           generator=order)
        windows = torch.stack([data[i:i + context + 1] for i in at.tolist()])
        mine = windows[rank * local:(rank + 1) * local]
        x, y = mine[:, :-1], mine[:, 1:]
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        lr_now = sched.get_last_lr()[0] / args.lr
        opt.step()
        sched.step()
        loss_value = loss.detach().clone()
        if distributed:  # the global batch's loss: the mean of the slices'
            dist.all_reduce(loss_value)
            loss_value /= world
        loss_value = loss_value.item()
        if rank == 0 and ((step + 1) % args.log_every == 0 or step == 0
                          or step + 1 == args.steps):
            per_step = (time.perf_counter() - start) / (step + 1)
            print(f"step {step + 1}/{args.steps}  loss {loss_value:.9g}  "
                  f"lr x{lr_now:.4f}  ({per_step * 1e3:.0f} ms/step)", flush=True)
    if rank == 0:
        print(f"final loss {loss_value:.9g}  ({time.perf_counter() - start:.1f} s)",
              flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
