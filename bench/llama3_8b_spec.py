#!/usr/bin/env python3
"""llama3_8b_spec.py [--layers N] [--dtype f32|bf16] [--ns-dtype f32|bf16|f16]
[--divide D]: writes a muon-spec/1 (to stdout) with the Muon matrices of N
Llama-3-8B layers (hidden 4096, 32 query and 8 key/value heads of 128, MLP
14336; every side divided by D, for a dry run on the CPU) on one device:
what one GPU orthogonalizes for that layer stack. Shapes are (out, in), as
torch.nn.Linear stores them."""
import argparse
import json

parser = argparse.ArgumentParser()
parser.add_argument("--layers", type=int, default=8)
parser.add_argument("--dtype", default="f32")
parser.add_argument("--ns-dtype", default="bf16")
parser.add_argument("--divide", type=int, default=1)
args = parser.parse_args()

hidden, kv, mlp = (side // args.divide for side in (4096, 1024, 14336))
per_layer = [("q_proj", [hidden, hidden]), ("k_proj", [kv, hidden]),
             ("v_proj", [kv, hidden]), ("o_proj", [hidden, hidden]),
             ("gate_proj", [mlp, hidden]), ("up_proj", [mlp, hidden]),
             ("down_proj", [hidden, mlp])]
params = []
for layer in range(args.layers):
    for name, shape in per_layer:
        params.append({"name": f"layers.{layer}.{name}", "shape": shape,
                       "dtype": args.dtype, "placements": ["R"]})
print(json.dumps({
    "format": "muon-spec/1",
    "mesh": {"shape": [1]},
    "optimizer": {"lr": 0.02, "momentum": 0.95, "nesterov": True,
                  "weight_decay": 0.1, "ns_steps": 5,
                  "adjust_lr": "original", "ns_dtype": args.ns_dtype},
    "distributed": None,
    "params": params,
}, indent=1))
