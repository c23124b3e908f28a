#!/usr/bin/env bash
# `make demo`: compile the embedded example (a small GPT-like model with
# FSDP x TP on 4 ranks), show what the compiler decided (owners, traffic
# against the lower bound, the overlapped schedule), then run 10 optimizer
# steps on 4 MPI ranks and verify the parameters against one device.
# Usage: examples/demo.sh [BUILD_DIR] (DEMO_STEPS overrides the 10 steps).
set -euo pipefail
build=${1:-build}
steps=${DEMO_STEPS:-10}
here=$(cd "$(dirname "$0")" && pwd)
spec="$here/gpt-fsdp-tp.json"

echo "== spec: examples/gpt-fsdp-tp.json (mesh dp=2 x tp=2, $(grep -c '"name"' "$spec") parameters)"
echo "== owners: muon-translate --import-spec | muon-opt --muon-assign-owners --muon-print-owners"
"$build/bin/muon-translate" --import-spec "$spec" |
  "$build/bin/muon-opt" --muon-convert-process-groups-to-mesh \
    --muon-assign-owners --muon-print-owners -o /dev/null
echo
echo "== compiled step: muon-run --dry-run"
"$build/bin/muon-run" "$spec" --dry-run
echo
echo "== run: muon-run --steps $steps --verify (4 MPI ranks; report: $build/demo-report.json, plan: $build/demo-plan.json)"
"$build/bin/muon-run" "$spec" --steps "$steps" --verify \
  --report "$build/demo-report.json" --plan "$build/demo-plan.json"
