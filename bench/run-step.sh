#!/usr/bin/env bash
# Real optimizer steps on MPI ranks (a benchmark, not a test).
#   bench/run-step.sh [build-dir] [steps]
# Runs the demo model (examples/gpt-fsdp-tp.json, 4 ranks) with the
# overlapped schedule (prefetch 1, the spec's setting), with prefetch 0, and
# in the sequential debug order, then prints each run's median step time
# (after one warm-up step; a step lasts until its slowest rank is done) and
# the busiest rank's Newton-Schulz GFLOP/s.
set -euo pipefail
build=${1:-build}
steps=${2:-10}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
spec="$here/../examples/gpt-fsdp-tp.json"
variant() { # name, python expression on the distributed dict
  python3 - "$spec" "$tmp/$1.json" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.argv[3], {"d": d["distributed"]})
json.dump(d, open(sys.argv[2], "w"))
PY
}
variant prefetch1 "pass"
variant prefetch0 "d['prefetch_count'] = 0"
variant debug "d['async'] = False"
printf "%-10s %12s %12s %14s\n" schedule median_ms min_ms "NS GFLOP/s"
for name in prefetch1 prefetch0 debug; do
  "$build/bin/muon-run" "$tmp/$name.json" --steps "$steps" --quiet \
    --report "$tmp/$name.report.json"
  python3 - "$tmp/$name.report.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["step_seconds"]
busiest = max(r["per_rank"], key=lambda x: x["ns_flops"])
rate = busiest["ns_flops"] / busiest["seconds"]["median"] / 1e9
print(f"{sys.argv[2]:<10} {s['median']*1e3:12.2f} {s['min']*1e3:12.2f} {rate:14.2f}")
PY
done
