#!/usr/bin/env python3
"""torch-compare.py: our CPU Newton-Schulz against torch.optim.Muon's, same
shapes, same thread count, interleaved in one run.

    python3 bench/torch-compare.py [--muon-bench build/bin/muon-bench]
        [--shapes 1024x1024,2048x2048,1024x4096,4096x1024] [--threads 1]
        [--repeats 5] [--ns-dtype f32|bf16] [--json]

torch.optim.Muon runs Newton-Schulz in bf16 (`_zeropower_via_newtonschulz`
casts the update to bfloat16); on a CPU that is not what anyone would run,
so the comparison is against the same algorithm in f32 through torch's
matmuls: X = G / (||G||_F + eps), transposed when tall, then ns_steps times
A = X Xᵀ, B = b A + c A A, X = a X + B X, with Jordan's coefficients
(torch's defaults). torch's own bf16 function is timed too, for reference.

With --ns-dtype bf16, ours runs in bf16 (oneDNN's bf16 products where the
CPU has them) and `ours/torch` is against torch's own bf16 function, the
one torch.optim.Muon calls.

Each repeat times torch once and `muon-bench ns --repeats 1` once per shape
(muon-bench times its own run after a warm-up), so both see the same machine
load; the table gives the best and the median of the repeats and the ratio
ours / torch. Not part of `make check`: `pip install torch` is large.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--muon-bench", default=os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin",
    "muon-bench"))
parser.add_argument("--shapes", default="1024x1024,2048x2048,1024x4096,4096x1024")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--repeats", type=int, default=5)
parser.add_argument("--ns-steps", type=int, default=5)
parser.add_argument("--ns-dtype", choices=["f32", "bf16"], default="f32")
parser.add_argument("--json", action="store_true")
args = parser.parse_args()

# Thread counts must be set before torch starts its pools.
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[var] = str(args.threads)
import torch  # noqa: E402

torch.set_num_threads(args.threads)
A, B, C = 3.4445, -4.775, 2.0315
EPS = 1e-7


def torch_ns_f32(g):
    x = g / (g.norm() + EPS)
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    for _ in range(args.ns_steps):
        a = x @ x.T
        b = B * a + C * (a @ a)
        x = A * x + b @ x
    return x.T if tall else x


def torch_ns_own(g):
    """torch.optim.Muon's own function (bf16), where this torch has it."""
    from torch.optim import _muon
    return _muon._zeropower_via_newtonschulz(g, (A, B, C), args.ns_steps, EPS)


def timed(fn, g):
    start = time.perf_counter()
    fn(g)
    return time.perf_counter() - start


def ours(shape):
    out = subprocess.run(
        [args.muon_bench, "ns", "--shapes", shape, "--repeats", "1",
         "--ns-steps", str(args.ns_steps), "--blas-threads",
         str(args.threads), "--ns-dtype", args.ns_dtype, "--json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])["ns_seconds"]


rows = []
for shape in args.shapes.split(","):
    m, n = (int(v) for v in shape.split("x"))
    torch.manual_seed(0)
    g = torch.randn(m, n, dtype=torch.float32)
    torch_ns_f32(g)  # warm-up
    has_own = True
    try:
        torch_ns_own(g)
    except (ImportError, AttributeError):
        has_own = False
    t_f32, t_own, t_ours = [], [], []
    for _ in range(args.repeats):
        t_f32.append(timed(torch_ns_f32, torch.randn(m, n)))
        if has_own:
            t_own.append(timed(torch_ns_own, torch.randn(m, n)))
        t_ours.append(ours(shape))
    if args.ns_dtype == "bf16" and not has_own:
        sys.exit("--ns-dtype bf16 compares with torch's own bf16 function, "
                 "which this torch lacks")
    against = t_own if args.ns_dtype == "bf16" else t_f32
    row = {"shape": shape, "threads": args.threads, "torch": torch.__version__,
           "ns_dtype": args.ns_dtype,
           "torch_f32_best": min(t_f32), "torch_f32_median": statistics.median(t_f32),
           "ours_best": min(t_ours), "ours_median": statistics.median(t_ours),
           "ratio_best": min(t_ours) / min(against),
           "ratio_median": statistics.median(t_ours) / statistics.median(against)}
    if has_own:
        row["torch_bf16_best"] = min(t_own)
        row["torch_bf16_median"] = statistics.median(t_own)
    rows.append(row)
    if args.json:
        print(json.dumps(row))
    else:
        if len(rows) == 1:
            print(f"torch {torch.__version__}, {args.threads} thread(s), "
                  f"{args.repeats} interleaved repeats; seconds best / median; "
                  f"ours in {args.ns_dtype}, ours/torch against torch "
                  f"{'bf16 (own)' if args.ns_dtype == 'bf16' else 'f32'}")
            print(f"{'shape':<11} {'torch f32':>17} {'ours':>17} "
                  f"{'ours/torch':>16} {'torch bf16 (own)':>18}")
        own = (f"{row['torch_bf16_best']:.3f} / {row['torch_bf16_median']:.3f}"
               if has_own else "n/a")
        print(f"{shape:<11} {row['torch_f32_best']:7.3f} / {row['torch_f32_median']:7.3f} "
              f"{row['ours_best']:7.3f} / {row['ours_median']:7.3f} "
              f"{row['ratio_best']:6.3f} / {row['ratio_median']:6.3f} {own:>18}")
    sys.stdout.flush()
