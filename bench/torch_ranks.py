"""torch_ranks.py: what bench/torch_muon_ddp.py and bench/dion_muon_fsdp2.py
share: their command line, the Muon matrices of a spec, the gloo ranks
(spawned processes) and the one JSON line they print. Not part of
`make check`."""
import argparse
import json
import os
import statistics
import subprocess
import sys


def parse_args(default_port, default_ns_dtype="bf16"):
    parser = argparse.ArgumentParser()
    parser.add_argument("spec")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--port", type=int, default=default_port)
    parser.add_argument("--ns-dtype", default=default_ns_dtype,
                        choices=["f32", "bf16"])
    parser.add_argument("--ns-form", default="auto",
                        choices=["auto", "standard", "gram"],
                        help="muonc.torch's Newton-Schulz form (ns_form)")
    parser.add_argument("--communicator", default="torch",
                        choices=["torch", "mpi"],
                        help="mpi: the ranks are started by mpirun (this "
                             "script starts it) instead of spawned")
    args = parser.parse_args()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    return args


def shapes_of(spec_path):
    """The shapes of the spec's Muon matrices (2 or more dims, not AdamW)."""
    spec = json.load(open(spec_path))
    return [p["shape"] for p in spec["params"]
            if len(p["shape"]) >= 2 and p.get("optimizer", "muon") != "adamw"]


def init_rank(args, rank):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    if args.communicator == "mpi":
        args.port += 1  # mpirun's own ports are not torch's
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)


def report(args, times, out, **fields):
    """Every rank's step times to rank 0, which puts the median and the
    minimum of the slowest rank's steps after the first on `out`."""
    import torch.distributed as dist
    gathered = [None] * args.ranks
    dist.all_gather_object(gathered, times)
    if dist.get_rank() == 0:
        steps = [max(t[s] for t in gathered) for s in range(args.steps)][1:]
        out.put(dict(fields, ranks=args.ranks, threads=args.threads,
                     step_seconds=statistics.median(steps),
                     step_seconds_min=min(steps)))
    dist.destroy_process_group()


def run(args, rank_main):
    """Runs rank_main(rank, shapes, queue) on every rank and prints rank
    0's JSON line."""
    import torch.multiprocessing as mp
    shapes = shapes_of(args.spec)
    if args.communicator == "mpi":
        if "OMPI_COMM_WORLD_RANK" not in os.environ:
            # Start the ranks under mpirun; rank 0 prints the line.
            cmd = ["mpirun", "-q", "--allow-run-as-root", "--oversubscribe",
                   "--bind-to", "none", "--mca",
                   "btl_vader_single_copy_mechanism", "none", "-x",
                   "OMP_NUM_THREADS", "-x", "MKL_NUM_THREADS", "-np",
                   str(args.ranks), sys.executable] + sys.argv
            sys.exit(subprocess.run(cmd).returncode)

        class Printer:
            def put(self, result):
                print(json.dumps(result), flush=True)
        rank_main(int(os.environ["OMPI_COMM_WORLD_RANK"]), shapes, Printer())
        return
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
