#!/usr/bin/env python3
"""torch_bridge.py: muonc.torch.Muon on CUDA tensors against torch.optim.Muon.

Trains the example GPT (examples/torch/train_gpt.py's model, data and
learning-rate schedule) with the same seed and batches under each
configuration below, each in processes of its own, and prints a table of
losses and optimizer-step times against torch.optim.Muon (+ AdamW for the
embeddings, the head, the norms and the biases):

  torch          torch.optim.Muon + torch.optim.AdamW, one process: the
                 reference
  muonc          muonc.torch.Muon, one process (ns_form auto: the Gram form
                 on wide and tall matrices)
  muonc-std      the same with ns_form="standard" (torch's iteration)
  muonc-gloo2    2 processes sharing the device through a gloo process group
                 (each a slice of the batch, gradients averaged; the
                 optimizer's exchanges host-staged through gloo, as NCCL
                 refuses two ranks on one GPU: the documented fallback)
  muonc-nccl2    2 processes over an NCCL process group, each on a GPU of
                 its own, where there are 2 or more GPUs (else skipped,
                 saying so): the optimizer's exchanges on the runtime's
                 NCCL communicator, bootstrapped over torch's group

Every configuration runs under torchrun (python -m torch.distributed.run),
as users launch; each muonc row says what its exchanges went through
(opt.transport) and the host copies of exchange buffers it made.

On a lent GPU (bench/gpu/run.sh): `python3 bench/gpu/torch_bridge.py`.
Without one, `--device cpu` runs the same on CPU tensors (what make check's
machine can do; the muonc runs then use the CPU backend).

Losses are compared with the reference step by step: each configuration's
largest relative difference, and whether it is within --tolerance (bf16
Newton-Schulz on both sides, products in different orders, so the curves
agree to bf16 rounding, not bit for bit). Step times are the median of
opt.step() alone (the device synchronized around it) after --warmup steps.
--json FILE writes one JSON object per configuration.
"""
import argparse
import importlib.util
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "torch", "train_gpt.py")

# Sizes beyond the example's: (layers, d_model, heads, context).
EXTRA_SIZES = {"medium": (4, 256, 8, 128)}

CONFIGS = {
    # name: (optimizer, processes, backend, ns_form)
    "torch": ("torch", 1, None, None),
    "muonc": ("muonc", 1, None, "auto"),
    "muonc-std": ("muonc", 1, None, "standard"),
    "muonc-gloo2": ("muonc", 2, "gloo", "auto"),
    "muonc-nccl2": ("muonc", 2, "nccl", "auto"),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="comma-separated, of: " + ", ".join(CONFIGS))
    p.add_argument("--size", default="small",
                   help="the example's sizes (small, tiny) or medium")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--warmup", type=int, default=5,
                   help="steps not timed (the first compile the plan and "
                        "warm the device up)")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--adamw-lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tolerance", type=float, default=2e-2,
                   help="largest relative loss difference from the reference "
                        "that counts as agreeing (default 2e-2)")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds each configuration may take")
    p.add_argument("--json", help="write one JSON object per configuration")
    # A worker's own arguments (the driver starts workers with them).
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for name in args.configs.split(","):
        if name not in CONFIGS:
            p.error(f"unknown configuration '{name}' (expected one of "
                    f"{', '.join(CONFIGS)})")
    if args.steps < 2 or args.warmup < 0 or args.warmup >= args.steps:
        p.error("--steps must be at least 2 and above --warmup")
    return args


def load_example():
    """examples/torch/train_gpt.py as a module: its model, sizes, parameter
    split and schedule."""
    spec = importlib.util.spec_from_file_location("train_gpt", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.SIZES.update(EXTRA_SIZES)
    return module


# The worker: one process of one configuration.

def synchronize(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_optimizers(torch, ex, model, args, optimizer, ns_form):
    """The optimizers and their schedulers, as the example sets them up."""
    muon, adamw = ex.muon_and_adamw(model)
    factor = lambda s: ex.lr_factor(s, args.warmup_lr, args.steps)  # noqa: E731
    if optimizer == "torch":
        opts = [torch.optim.Muon(muon, lr=args.lr, weight_decay=0.01),
                torch.optim.AdamW(adamw, lr=args.adamw_lr, weight_decay=0.0)]
    else:
        from muonc.torch import Muon
        opts = [Muon([{"params": muon, "name": "muon"},
                      {"params": adamw, "name": "adamw", "use_muon": False,
                       "lr": args.adamw_lr, "weight_decay": 0.0}],
                     lr=args.lr, weight_decay=0.01, ns_form=ns_form)]
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, factor) for o in opts]
    return opts, scheds


def worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    optimizer, world, backend, ns_form = CONFIGS[args.config]
    rank = int(os.environ.get("RANK", args.rank))  # torchrun's
    if args.device == "cuda":
        if torch.cuda.device_count() == 0:
            raise SystemExit("torch sees no CUDA device")
        # Processes share GPU 0 unless there is one per rank (NCCL).
        torch.cuda.set_device(rank if backend == "nccl" else 0)
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    if world > 1:  # torchrun's address, rank and world
        dist.init_process_group(backend)
    ex = load_example()
    args.warmup_lr = 20  # the example's warmup of the learning rate
    text = open(ex.CORPUS, encoding="utf-8").read()
    chars = sorted(set(text))
    vocab = -(-len(chars) // 16) * 16
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    layers, d, heads, context = ex.SIZES[args.size]
    torch.manual_seed(args.seed)  # the same initial weights everywhere
    model = ex.GPT(vocab, layers, d, heads, context).to(device)
    opts, scheds = make_optimizers(torch, ex, model, args, optimizer, ns_form)
    order = torch.Generator().manual_seed(args.seed + 1)
    local = args.batch // world
    losses, step_seconds, host_copies = [], [], 0
    for step in range(args.steps):
        at = torch.randint(0, len(data) - context - 1, (args.batch,),
                           generator=order)
        windows = torch.stack([data[i:i + context + 1] for i in at.tolist()])
        mine = windows[rank * local:(rank + 1) * local].to(device)
        x, y = mine[:, :-1], mine[:, 1:]
        # The example's forward makes its positions with torch.arange on the
        # default device: the model's, here.
        with torch.device(device):
            logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        for o in opts:
            o.zero_grad()
        loss.backward()
        if world > 1:  # the global batch's gradient: the slices' mean
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
        synchronize(torch, device)
        start = time.perf_counter()
        for o in opts:
            o.step()
        synchronize(torch, device)
        step_seconds.append(time.perf_counter() - start)
        if optimizer == "muonc":
            host_copies += opts[0].last_step_counters.get("host_copies", 0)
        for s in scheds:
            s.step()
        value = loss.detach().clone()
        if world > 1:
            dist.all_reduce(value)
            value /= world
        losses.append(value.item())
    result = {"config": args.config, "device": str(device), "world": world,
              "backend": backend, "ns_form": ns_form, "size": args.size,
              "steps": args.steps, "losses": losses,
              "step_seconds": step_seconds}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    if optimizer == "muonc":
        engine = getattr(opts[0], "engine", None)
        result["engine_device"] = getattr(engine, "device", None)
        result["transport"] = opts[0].transport
        result["host_copies"] = host_copies
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(result, f)
    if world > 1:
        dist.destroy_process_group()


# The driver.

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_count(device):
    """GPUs torch sees (0 on the CPU), in a process of its own so that the
    driver never initializes CUDA before its workers."""
    if device != "cuda":
        return 0
    out = subprocess.run(
        [sys.executable, "-c",
         "import torch; print(torch.cuda.device_count())"],
        capture_output=True, text=True, timeout=120)
    try:
        return int(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


def run_config(args, name, tmp):
    """Runs configuration `name`; its result, or a dict saying why not."""
    _, world, backend, _ = CONFIGS[name]
    if backend == "nccl" and args.device == "cpu":
        return {"config": name, "skipped": "NCCL needs GPUs"}
    if backend == "nccl" and (gpus := gpu_count(args.device)) < world:
        return {"config": name, "skipped": f"NCCL needs {world} GPUs, "
                f"{gpus} here (gloo shares one)"}
    out = os.path.join(tmp, name + ".json")
    command = [sys.executable, "-m", "torch.distributed.run",
               f"--nproc_per_node={world}", f"--master_port={free_port()}",
               "--master_addr=127.0.0.1", os.path.abspath(__file__),
               "--worker", "--config", name, "--device", args.device,
               "--size", args.size, "--steps", str(args.steps),
               "--batch", str(args.batch), "--warmup", str(args.warmup),
               "--lr", str(args.lr), "--adamw-lr", str(args.adamw_lr),
               "--seed", str(args.seed), "--out", out]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    procs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)]
    logs, failed = [], None
    deadline = time.monotonic() + args.timeout
    for r, p in enumerate(procs):
        try:
            log, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            log, _ = p.communicate()
            failed = failed or f"rank {r} timed out after {args.timeout} s"
        logs.append(log)
        if p.returncode and not failed:
            failed = f"rank {r} exited {p.returncode}"
    if failed or not os.path.exists(out):
        tail = "\n".join(l for log in logs for l in log.splitlines()[-15:])
        return {"config": name, "failed": failed or "no result", "log": tail}
    with open(out) as f:
        return json.load(f)


def compare(result, reference, args):
    """Adds the loss comparison with the reference and the step times."""
    times = result["step_seconds"][args.warmup:]
    result["step_ms_median"] = statistics.median(times) * 1e3
    result["step_ms_min"] = min(times) * 1e3
    if reference is None or "losses" not in reference:
        return
    diffs = [abs(a - b) / max(abs(b), 1e-30)
             for a, b in zip(result["losses"], reference["losses"])]
    result["loss_rel_max"] = max(diffs)
    result["loss_rel_final"] = diffs[-1]
    result["within_tolerance"] = all(math.isfinite(a) for a in
                                     result["losses"]) and \
        max(diffs) <= args.tolerance
    result["step_vs_torch"] = result["step_ms_median"] / \
        reference["step_ms_median"]


def driver(args):
    names = args.configs.split(",")
    if "torch" in names:  # the reference first
        names = ["torch"] + [n for n in names if n != "torch"]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            started = time.perf_counter()
            result = run_config(args, name, tmp)
            result["wall_seconds"] = time.perf_counter() - started
            results.append(result)
    reference = next((r for r in results if r["config"] == "torch" and
                      "losses" in r), None)
    if reference:
        compare(reference, None, args)
    for r in results:
        if "losses" in r and r is not reference:
            compare(r, reference, args)
    print_table(results, reference, args)
    if args.json:
        with open(args.json, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    ok = all("losses" in r or "skipped" in r for r in results) and all(
        r.get("within_tolerance", True) for r in results)
    return 0 if ok else 1


def print_table(results, reference, args):
    gpu = next((r["gpu"] for r in results if "gpu" in r), args.device)
    print(f"torch_bridge: the example GPT ({args.size}), {args.steps} steps, "
          f"batch {args.batch}, on {gpu}; step times: median of opt.step() "
          f"after {args.warmup} steps; losses against torch.optim.Muon "
          f"(tolerance {args.tolerance:g} relative)")
    print(f"{'config':<12} {'final loss':>11} {'max rel diff':>12} "
          f"{'step ms':>9} {'vs torch':>8}  {'exchanges':<16} verdict")
    for r in results:
        name = r["config"]
        if "skipped" in r:
            print(f"{name:<12} skipped: {r['skipped']}")
            continue
        if "losses" not in r:
            print(f"{name:<12} FAILED: {r['failed']}\n{r.get('log', '')}")
            continue
        rel = r.get("loss_rel_max")
        verdict = "reference" if r is reference else (
            "agrees" if r.get("within_tolerance") else "DIFFERS")
        where = (f"{r['transport']}, {r['host_copies']} copies"
                 if "transport" in r else "")
        print(f"{name:<12} {r['losses'][-1]:>11.6f} "
              f"{'' if rel is None else f'{rel:.2e}':>12} "
              f"{r['step_ms_median']:>9.3f} "
              f"{r.get('step_vs_torch', 1.0):>8.3f}  {where:<16} {verdict}")
    sys.stdout.flush()


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
