#!/usr/bin/env python3
"""ns-numerics.py: one Muon step in bf16 against the f32 reference, ours and
torch.optim.Muon's, on the same gradient.

    python3 bench/ns-numerics.py [--muon-bench build/bin/muon-bench]
        [--shapes 768x768,2304x768,3072x768,768x3072,1024x1024,2048x2048]
        [--seed 0] [--json]

Per shape: a parameter P and a gradient G (Gaussian, seeded), and one step
of Muon with torch.optim.Muon's defaults (lr 1e-3, momentum 0.95, Nesterov,
weight decay 0.1, Jordan's coefficients, 5 steps, adjust_lr "original"):
the update U = G.lerp(0.05 G, 0.95), O = NewtonSchulz(U), P' = P (1 - lr wd)
- lr' O. The step is taken four ways:
  - f32:        our CPU Newton-Schulz in f32 (`muon-bench orthogonalize`),
                the reference;
  - ours bf16:  our CPU Newton-Schulz in bf16 as it runs by default (oneDNN's
                bf16 products where the CPU has them, ns_form auto: the Gram
                form on wide and tall matrices; the `products` column);
  - ours bf16 standard: the same with ns_form standard (MUON_CPU_NS_FORM),
                every step as torch.optim.Muon runs it;
  - torch bf16: torch.optim.Muon.step() itself (its bf16 Newton-Schulz,
                torch's bf16 matmuls on the CPU);
  - ours bf16, f32 products: the bf16 semantics on f32 BLAS products (what
                a CPU without bf16 products runs; DNNL_MAX_CPU_ISA).
and each step's change (P' - P) is compared with the reference's:
||dP - dP_f32||_F / ||dP_f32||_F. Only Newton-Schulz differs between them
(the elementwise parts are f32 everywhere), so this is also the relative
error of O. `ours vs torch` compares the two bf16 steps with each other.
Not part of `make check` (needs torch).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--muon-bench", default=os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "build", "bin",
    "muon-bench"))
parser.add_argument("--shapes",
                    default="768x768,2304x768,3072x768,768x3072,1024x1024,2048x2048")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--json", action="store_true")
args = parser.parse_args()

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402

torch.set_num_threads(1)
LR, MOMENTUM, WD = 1e-3, 0.95, 0.1


def ours(update, dtype, env=None):
    """Our CPU Newton-Schulz of `update` (f32 tensor) in `dtype`."""
    m, n = update.shape
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "in.f32"), os.path.join(tmp, "out.f32")
        update.contiguous().numpy().astype("<f4").tofile(src)
        out = subprocess.run(
            [args.muon_bench, "orthogonalize", "--rows", str(m), "--cols",
             str(n), "--input", src, "--output", dst, "--ns-dtype", dtype],
            check=True, capture_output=True, text=True,
            env={**os.environ, **(env or {})}).stdout
        products = json.loads(out.splitlines()[-1])["products"]
        with open(dst, "rb") as f:
            data = bytearray(f.read())
        return torch.frombuffer(data, dtype=torch.float32).reshape(m, n).clone(), products


def step_with(p, orth):
    """P' from P and an orthogonalized update, as torch.optim.Muon applies it."""
    m, n = p.shape
    adjusted = LR * max(1.0, m / n) ** 0.5
    return p * (1 - LR * WD) - adjusted * orth


def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


rows = []
for shape in args.shapes.split(","):
    m, n = (int(v) for v in shape.split("x"))
    g = torch.Generator().manual_seed(args.seed)
    p = torch.randn(m, n, generator=g) * 0.02
    grad = torch.randn(m, n, generator=g)
    # The update of the first step, as torch.optim.Muon computes it.
    buf = torch.zeros_like(grad).lerp_(grad, 1 - MOMENTUM)
    update = grad.lerp(buf, MOMENTUM)

    o32, _ = ours(update, "f32")
    o16, products = ours(update, "bf16")
    o16s, _ = ours(update, "bf16", {"MUON_CPU_NS_FORM": "standard"})
    o16e, products_e = ours(update, "bf16", {"DNNL_MAX_CPU_ISA": "AVX512_CORE"})
    d32 = step_with(p, o32) - p
    d16 = step_with(p, o16) - p
    d16s = step_with(p, o16s) - p
    d16e = step_with(p, o16e) - p
    # torch.optim.Muon's own step on the same parameter and gradient.
    param = torch.nn.Parameter(p.clone())
    param.grad = grad.clone()
    opt = torch.optim.Muon([param], lr=LR, momentum=MOMENTUM, nesterov=True,
                           weight_decay=WD, adjust_lr_fn="original")
    opt.step()
    dtorch = param.detach() - p
    row = {"shape": shape, "torch": torch.__version__, "products": products,
           "ours_bf16_vs_f32": rel(d16, d32),
           "ours_bf16_standard_vs_f32": rel(d16s, d32),
           "ours_bf16_standard_vs_torch_bf16": rel(d16s, dtorch),
           "torch_bf16_vs_f32": rel(dtorch, d32),
           "ours_bf16_vs_torch_bf16": rel(d16, dtorch),
           "ours_bf16_f32_products_vs_f32": rel(d16e, d32),
           "f32_products": products_e}
    rows.append(row)
    if args.json:
        print(json.dumps(row))
    else:
        if len(rows) == 1:
            print(f"torch {torch.__version__}; ours bf16: {products}")
            print(f"{'shape':<11} {'ours bf16':>10} {'standard':>10} "
                  f"{'torch bf16':>11} {'ours vs torch':>14} "
                  f"{'standard vs torch':>18} {'bf16 on f32 products':>21}")
        print(f"{shape:<11} {row['ours_bf16_vs_f32']:10.3e} "
              f"{row['ours_bf16_standard_vs_f32']:10.3e} "
              f"{row['torch_bf16_vs_f32']:11.3e} "
              f"{row['ours_bf16_vs_torch_bf16']:14.3e} "
              f"{row['ours_bf16_standard_vs_torch_bf16']:18.3e} "
              f"{row['ours_bf16_f32_products_vs_f32']:21.3e}")
    sys.stdout.flush()
