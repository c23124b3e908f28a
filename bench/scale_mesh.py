#!/usr/bin/env python3
"""scale_mesh.py SPEC OUT GPUS [--axis dp]: writes SPEC with its data-parallel
mesh axis resized so that the mesh has GPUS devices (the other axes keep
their sizes). Only the mesh size changes: placements are per axis, so every
parameter keeps its layout (an axis that splits a dim into more chunks than
it has rows leaves trailing chunks empty, as torch.chunk does). Specs in
the process-group style have no mesh to scale and are refused."""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("out")
    ap.add_argument("gpus", type=int)
    ap.add_argument("--axis", default="dp")
    a = ap.parse_args()
    with open(a.spec) as f:
        spec = json.load(f)
    mesh = spec.get("mesh")
    if not mesh or a.axis not in mesh.get("names", []):
        sys.exit(f"{a.spec}: no mesh axis named '{a.axis}'")
    i = mesh["names"].index(a.axis)
    others = 1
    for j, n in enumerate(mesh["shape"]):
        if j != i:
            others *= n
    if a.gpus % others:
        sys.exit(f"{a.spec}: {a.gpus} GPUs is not a multiple of the other "
                 f"axes' {others}")
    mesh["shape"][i] = a.gpus // others
    with open(a.out, "w") as f:
        json.dump(spec, f)
        f.write("\n")


if __name__ == "__main__":
    main()
