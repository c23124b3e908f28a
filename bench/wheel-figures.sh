#!/usr/bin/env bash
# muonc from its wheel against muonc built from source, interleaved run by
# run (the machine is shared and noisy): `import muonc`, `import torch`
# then `import muonc.torch` (with torch, and the part after it), and the
# example's step time
# (examples/torch/train_gpt.py, one process). Prints best and median of
# RUNS runs of each (docs/pytorch.md, "Building the wheel").
#
#   bench/wheel-figures.sh WHEEL_VENV SOURCE_VENV [RUNS] [STEPS]
#
# WHEEL_VENV: python/scripts/wheel-venv.sh's; SOURCE_VENV: build/venv.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
wheel_venv=$(cd "${1:?usage: wheel-figures.sh WHEEL_VENV SOURCE_VENV [RUNS] [STEPS]}" && pwd)
source_venv=$(cd "${2:?usage: wheel-figures.sh WHEEL_VENV SOURCE_VENV [RUNS] [STEPS]}" && pwd)
runs=${3:-5}
steps=${4:-30}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

import_muonc='import time; t = time.perf_counter(); import muonc; print(f"{(time.perf_counter() - t) * 1e3:.1f}")'
import_torch='import time; t = time.perf_counter(); import torch; u = time.perf_counter(); import muonc.torch; v = time.perf_counter(); print(f"{(v - t) * 1e3:.1f} {(v - u) * 1e3:.1f}")'
cd "$out" # nothing of the tree on sys.path
for ((run = 0; run < runs; ++run)); do
  for side in wheel source; do
    venv=$wheel_venv
    [ "$side" = source ] && venv=$source_venv
    env -u PYTHONPATH "$venv/bin/python" -c "$import_muonc" >> "$out/$side.muonc"
    read -r total after < <(env -u PYTHONPATH "$venv/bin/python" -c "$import_torch")
    echo "$total" >> "$out/$side.total"
    echo "$after" >> "$out/$side.torch"
    env -u PYTHONPATH "$venv/bin/python" "$root/examples/torch/train_gpt.py" \
      --size tiny --steps "$steps" --log-every "$steps" |
      sed -n "s|^step $steps/$steps .*(\([0-9.]*\) ms/step)|\1|p" >> "$out/$side.step"
  done
done
summary() { # best and median of the numbers in $1
  sort -n "$1" | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
    printf "best %7.1f  median %7.1f  (%d runs)", v[1], m, NR}'
}
for what in "muonc:import muonc (ms)" "total:import muonc.torch, torch included (ms)" \
            "torch:import muonc.torch after torch (ms)" \
            "step:train_gpt.py tiny, $steps steps, one process (ms/step)"; do
  echo "${what#*:}"
  for side in wheel source; do
    printf '  %-6s %s\n' "$side" "$(summary "$out/$side.${what%%:*}")"
  done
done
