#!/usr/bin/env python3
"""placement-specs.py MODEL.json OUT_DIR

Writes the two layouts of issue 35's placement figures from a model of
../shared/models (its parameters' names, shapes and optimizers; its own
layout is dropped):

  OUT_DIR/<stem>-ddp8.json    DDP on 8 ranks: every parameter replicated
  OUT_DIR/<stem>-hsdp2x8.json HSDP on 2 x 8: replicated across the 2
                              replicas, dim 0 sharded over the 8 ranks of
                              each (FSDP inside a node)

Both leave `distributed.placement` at its default ("auto"); muon-run's
--placement picks the policy (docs/performance.md).
"""
import json
import os
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model_path, out = sys.argv[1], sys.argv[2]
    with open(model_path) as f:
        model = json.load(f)
    stem = os.path.splitext(os.path.basename(model_path))[0].split("-dp")[0]
    params = []
    for p in model["params"]:
        q = {"name": p["name"], "shape": p["shape"]}
        if "optimizer" in p:
            q["optimizer"] = p["optimizer"]
        if "dtype" in p:
            q["dtype"] = p["dtype"]
        params.append(q)
    layouts = {
        "ddp8": ({"shape": [8], "names": ["dp"]}, lambda p: ["R"]),
        "hsdp2x8": ({"shape": [2, 8], "names": ["replicate", "shard"]},
                    lambda p: ["R", "S(0)"]),
    }
    os.makedirs(out, exist_ok=True)
    for name, (mesh, placements) in layouts.items():
        spec = {"format": "muon-spec/1", "mesh": mesh, "distributed": {},
                "params": [dict(p, placements=placements(p)) for p in params]}
        for key in ("optimizer", "adamw", "param_groups"):
            if key in model:
                spec[key] = model[key]
        path = os.path.join(out, "%s-%s.json" % (stem, name))
        with open(path, "w") as f:
            json.dump(spec, f)
        print(path)


if __name__ == "__main__":
    main()
