#!/usr/bin/env bash
# bench/before-after.sh BEFORE [ROUNDS] [SPEC]: the optimizer step of an
# earlier build against this tree's, interleaved in rounds, for a change
# that must leave speed as it was (a refactor).
#
# BEFORE is a folder holding the earlier build's muon-bench and its muonc
# package (copy them before rebuilding:
#   mkdir -p /tmp/before && cp build/bin/muon-bench /tmp/before/ &&
#   cp -r build/venv/lib/python3.11/site-packages/muonc /tmp/before/
# ). Each round runs, alternating which goes first:
#   - `muon-bench step SPEC --ranks 2 --steps 4 --repeats 3` of each
#     build (its best step and median, ms);
#   - bench/muonc_torch_fsdp2.py SPEC --ranks 2 --steps 4 in build/venv's
#     Python, with BEFORE first on PYTHONPATH for the earlier muonc (the
#     torch bridge's step: median and best, ms).
# Prints one line per measurement and, at the end, each build's median of
# the round values and best. Not part of `make check`.
set -euo pipefail
before=${1:?usage: bench/before-after.sh BEFORE [ROUNDS] [SPEC]}
rounds=${2:-3}
spec=${3:-bench/specs/gpt2-small-4layer-fsdp2.json}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=build/venv/bin/python
[ -x "$before/muon-bench" ] || { echo "no $before/muon-bench" >&2; exit 2; }
[ -d "$before/muonc" ] || { echo "no $before/muonc" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

bench_step() { # $1 label, $2 muon-bench
  "$2" step "$spec" --ranks 2 --steps 4 --repeats 3 |
    awk -v l="$1" '/compiled plan/ {print "step", l, $4, $7}'
}
bridge_step() { # $1 label, $2 PYTHONPATH prefix (empty: this tree's)
  (cd bench && PYTHONPATH="$2${2:+:}${PYTHONPATH:-}" \
     "$root/$python" muonc_torch_fsdp2.py "$root/$spec" --ranks 2 --steps 4) |
    tail -1 | "$root/$python" -c '
import json, sys
r = json.loads(sys.stdin.read())
print("bridge", sys.argv[1], round(r["step_seconds_min"] * 1e3, 1),
      round(r["step_seconds"] * 1e3, 1))' "$1"
}

for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then order="before after"; else order="after before"; fi
  for which in $order; do
    if [ "$which" = before ]; then
      bench_step before "$before/muon-bench"
      bridge_step before "$before"
    else
      bench_step after build/bin/muon-bench
      bridge_step after ""
    fi
  done | tee -a "$out"
done
echo "== over $rounds rounds: median of the round medians, best (ms)"
"$python" - "$out" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for kind in ("step", "bridge"):
    for which in ("before", "after"):
        best = [float(r[2]) for r in rows if r[:2] == [kind, which]]
        med = [float(r[3]) for r in rows if r[:2] == [kind, which]]
        if best:
            print(f"{kind:6} {which:6} median {statistics.median(med):8.1f}"
                  f"  best {min(best):8.1f}")
EOF
