#!/usr/bin/env bash
# `make demo`: compile the embedded example (a small GPT-like model with
# FSDP x TP on 4 ranks) and print what the compiler decided: each rank's
# owned matrices and Newton-Schulz work, the traffic of the compiled step
# against the lower bounds of the run report, and the step's schedule.
# (Running the plan on MPI ranks arrives with the runtime.)
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
spec="$here/gpt-fsdp-tp.json"

echo "== spec: examples/gpt-fsdp-tp.json (mesh dp=2 x tp=2, $(grep -c '"name"' "$spec") parameters)"
echo "== owners: muon-translate --import-spec | muon-opt --muon-assign-owners --muon-print-owners"
"$build/bin/muon-translate" --import-spec "$spec" |
  "$build/bin/muon-opt" --muon-convert-process-groups-to-mesh \
    --muon-assign-owners --muon-print-owners -o /dev/null
echo
echo "== compiled step: muon-run --dry-run --print-schedule (report: build/demo-report.json, plan: build/demo-plan.json)"
"$build/bin/muon-run" "$spec" --dry-run --print-schedule \
  --report "$build/demo-report.json" --plan "$build/demo-plan.json"
