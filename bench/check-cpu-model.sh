#!/usr/bin/env bash
# The simulator against a real run on this machine (a measurement).
#   bench/check-cpu-model.sh [build-dir] [ranks: 2|4] [steps]
# 1. Calibrates the CPU profile's f32 matrix rate: `muon-bench ns` on the
#    demo model's four shapes, the rate weighted by the model's NS flops
#    (each shape appears equally often).
# 2. Runs the demo model (examples/gpt-fsdp-tp.json; its dp axis resized to
#    1 for 2 ranks) for `steps` steps with --trace and --simulate against a
#    copy of share/muon/profiles.json whose `cpu` rate is the calibrated one.
# 3. Prints the measured median step, the prediction, and what the trace
#    shows: the NS rate the ranks really got, and the prediction again with
#    that rate (what is left is the schedule and the exchanges).
set -euo pipefail
build=${1:-build}
ranks=${2:-2}
steps=${3:-10}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/bin/muon-bench" ns --shapes 768x256,256x256,1024x256,256x1024 \
  --repeats 7 --json > "$tmp/bench.jsonl"
python3 "$here/scale_mesh.py" "$here/../examples/gpt-fsdp-tp.json" \
  "$tmp/spec.json" "$ranks"
python3 - "$tmp" "$build/share/muon/profiles.json" <<'PY'
import json, sys
tmp, profiles = sys.argv[1:3]
rows = [json.loads(l) for l in open(f"{tmp}/bench.jsonl") if l.strip()]
flops = sum(r["dense_flops"] for r in rows)
seconds = sum(r["ns_seconds"] for r in rows)
rate = flops / seconds
p = json.load(open(profiles))
p["profiles"]["cpu"]["matmul_flops_per_second"]["f32"] = rate
json.dump(p, open(f"{tmp}/profiles.json", "w"))
print(f"calibrated f32 NS rate (muon-bench ns, demo shapes): {rate / 1e9:.1f} GFLOP/s")
PY
# f32, as calibrated (ns_dtype auto would be bf16 on a CPU with bf16
# products, which the `cpu` profile does not model yet).
"$build/bin/muon-run" "$tmp/spec.json" --steps "$steps" --quiet \
  --ns-dtype f32 --trace "$tmp/trace.json" --report "$tmp/report.json" \
  --simulate cpu --profiles "$tmp/profiles.json"
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
r = json.load(open(f"{tmp}/report.json"))
t = json.load(open(f"{tmp}/trace.json"))
ns = [e for e in t["traceEvents"] if e.get("cat") == "ns"]
rate = sum(e["args"]["flops"] for e in ns) / (sum(e["dur"] for e in ns) / 1e6)
measured = r["step_seconds"]["median"]
predicted = r["simulation"]["step_seconds"]
print(f"measured median step {measured * 1e3:.1f} ms (min {r['step_seconds']['min'] * 1e3:.1f}) "
      f"over {r['steps'] - 1} steps; predicted {predicted * 1e3:.1f} ms; "
      f"predicted / measured {predicted / measured:.2f}")
print(f"NS rate inside the run (trace of the last step): {rate / 1e9:.1f} GFLOP/s")
p = json.load(open(f"{tmp}/profiles.json"))
p["profiles"]["cpu"]["matmul_flops_per_second"]["f32"] = rate
# The rate the ranks got already includes their sharing of the cores.
p["profiles"]["cpu"]["compute_slots_per_node"] = 0
json.dump(p, open(f"{tmp}/inrun.json", "w"))
PY
"$build/bin/muon-run" "$tmp/spec.json" --dry-run --quiet \
  --simulate cpu --profiles "$tmp/inrun.json" --report "$tmp/inrun-report.json"
python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
m = json.load(open(f"{tmp}/report.json"))["step_seconds"]["median"]
s = json.load(open(f"{tmp}/inrun-report.json"))["simulation"]["step_seconds"]
print(f"predicted with the in-run NS rate {s * 1e3:.1f} ms; predicted / measured {s / m:.2f}")
PY
uptime
