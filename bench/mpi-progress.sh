#!/usr/bin/env bash
# The MPI progress thread against progress by the runtime's own calls (a
# benchmark, not a test).
#   bench/mpi-progress.sh [build-dir] [spec] [steps] [repeats] [hog]
# Runs SPEC (default: the GPT-2-small 4-layer FSDP spec on 2 ranks) with
# --mpi-progress thread and calls, interleaved, REPEATS times each, and
# prints the best and the median of the runs' median step times. With HOG=1
# a busy process per core runs beside the ranks (a loaded machine), which
# is where progress only at the runtime's polls hurts most.
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
spec=${2:-$here/specs/gpt2-small-4layer-fsdp2.json}
steps=${3:-4}
repeats=${4:-3}
hog=${5:-0}
tmp=$(mktemp -d)
hogs=()
cleanup() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
if [ "$hog" = 1 ]; then
  for _ in $(seq "$(nproc)"); do (while :; do :; done) & hogs+=($!); done
fi
for r in $(seq "$repeats"); do
  for mode in thread calls; do
    "$build/bin/muon-run" "$spec" --steps "$steps" --quiet --mpi-progress "$mode" \
      --report "$tmp/$mode-$r.json"
  done
done
python3 - "$tmp" "$repeats" <<'PY'
import json, statistics, sys
tmp, repeats = sys.argv[1], int(sys.argv[2])
print(f"{'progress':<8} {'best ms':>10} {'median ms':>10}")
res = {}
for mode in ("thread", "calls"):
    med = [json.load(open(f"{tmp}/{mode}-{r}.json"))["step_seconds"]["median"]
           for r in range(1, repeats + 1)]
    res[mode] = med
    print(f"{mode:<8} {min(med)*1e3:10.1f} {statistics.median(med)*1e3:10.1f}")
print(f"thread / calls: best {min(res['thread'])/min(res['calls']):.3f}, "
      f"median {statistics.median(res['thread'])/statistics.median(res['calls']):.3f}")
PY
