#!/usr/bin/env bash
# Predicted optimizer-step time at scale (a model, not a measurement).
#   bench/simulate-scale.sh [build-dir] [models-dir] [gpus...]
# For every spec in models-dir (default ../shared/models) and every GPU
# count (default 64 256 1024 4096 16384), resizes the spec's `dp` mesh axis
# (bench/scale_mesh.py), compiles it with `muon-run --dry-run` and
# simulates the step on the h100 and h200 profiles
# (share/muon/profiles.json). Prints one markdown row per (model, GPUs):
# the mesh, the nodes, the predicted step, the bound max(compute,
# communication) and its two parts, the step over the bound, and the wall
# seconds of the h100 dry run (compile, plan, simulation).
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
models=${2:-$here/../../shared/models}
shift $(( $# > 2 ? 2 : $# ))
gpus=${*:-64 256 1024 4096 16384}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| model | GPUs | mesh | nodes | H100 step ms | H100 bound ms (compute / comm) | H100 step/bound | H200 step ms | H200 step/bound | dry run s |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for spec in "$models"/*.json; do
  name=$(basename "$spec" .json)
  for n in $gpus; do
    scaled="$tmp/$name-$n.json"
    if ! python3 "$here/scale_mesh.py" "$spec" "$scaled" "$n" 2>"$tmp/err"; then
      echo "| $name | $n | $(cat "$tmp/err") |"
      continue
    fi
    start=$(date +%s.%N)
    "$build/bin/muon-run" "$scaled" --dry-run --quiet \
      --simulate h100 --report "$tmp/h100.json"
    end=$(date +%s.%N)
    # Compiled again rather than through a plan file: at 16,384 GPUs a plan
    # file of Llama-3-70B holds 9 million transfers (0.9 GB).
    "$build/bin/muon-run" "$scaled" --dry-run --quiet \
      --simulate h200 --report "$tmp/h200.json"
    python3 - "$tmp/h100.json" "$tmp/h200.json" "$scaled" "$name" "$n" \
      "$(echo "$end - $start" | bc)" <<'PY'
import json, sys
h100, h200 = (json.load(open(f))["simulation"] for f in sys.argv[1:3])
mesh = json.load(open(sys.argv[3]))["mesh"]
shape = " x ".join(f"{n} {s}" for n, s in zip(mesh["names"], mesh["shape"]))
ms = lambda x: f"{x * 1e3:.2f}"
print(f"| {sys.argv[4]} | {sys.argv[5]} | {shape} | {h100['nodes']} "
      f"| {ms(h100['step_seconds'])} "
      f"| {ms(h100['bound_seconds'])} ({ms(h100['compute_bound_seconds'])} / "
      f"{ms(h100['comm_bound_seconds'])}) | {h100['step_over_bound']:.2f} "
      f"| {ms(h200['step_seconds'])} | {h200['step_over_bound']:.2f} "
      f"| {float(sys.argv[6]):.1f} |")
PY
  done
done
