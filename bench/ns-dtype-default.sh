#!/usr/bin/env bash
# The default Newton-Schulz precision against both explicit ones (issue
# 52): per round, muon-run on SPEC with ns_dtype auto, --ns-dtype f32 and
# --ns-dtype bf16, one after another (each round starting with the next),
# so that the three see the same machine load; per round the default's
# step over the faster of the two explicit ones (each run's median step,
# and each run's fastest), the median and the best of those ratios over
# the rounds, and the ratio of each variant's fastest step over all rounds.
#
#   bench/ns-dtype-default.sh [BUILD] [SPEC] [ROUNDS] [RANKS] [STEPS]
#
# Defaults: build, bench/specs/gpt2-small-4layer-fsdp2.json, 3 rounds, 2
# ranks, 4 steps (the first a warm-up). The environment passes through, so
# that oneDNN and OpenBLAS can run this CPU as an older one:
#
#   DNNL_MAX_CPU_ISA=AVX512_CORE bench/ns-dtype-default.sh    # AVX-512, no bf16
#   DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell bench/ns-dtype-default.sh
#
# Figures: docs/performance.md (issue 52).
set -euo pipefail
build=${1:-build}
spec=${2:-bench/specs/gpt2-small-4layer-fsdp2.json}
rounds=${3:-3}
ranks=${4:-2}
steps=${5:-4}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

variants=(auto f32 bf16)
for round in $(seq 1 "$rounds"); do
  # Each round starts with the next variant, so that none is always first
  # after the machine was idle.
  for i in 0 1 2; do
    variant=${variants[$(( (round + i - 1) % 3 ))]}
    "$build/bin/muon-run" "$spec" --ranks "$ranks" --steps "$steps" --quiet \
      --ns-dtype "$variant" --report "$tmp/$variant-$round.json"
  done
done

python3 - "$tmp" "$rounds" <<'EOF'
import json
import statistics
import sys

tmp, rounds = sys.argv[1], int(sys.argv[2])


def report(variant, r):
    with open(f"{tmp}/{variant}-{r}.json") as f:
        return json.load(f)


ratios, fastest = [], []
for r in range(1, rounds + 1):
    runs = {v: report(v, r) for v in ("auto", "f32", "bf16")}
    med = {v: runs[v]["step_seconds"]["median"] for v in runs}
    low = {v: runs[v]["step_seconds"]["min"] for v in runs}
    ratios.append(med["auto"] / min(med["f32"], med["bf16"]))
    fastest.append(low["auto"] / min(low["f32"], low["bf16"]))
    print(f"round {r}: default ({runs['auto']['ns_dtype']}) {med['auto']:.3f} s, "
          f"f32 {med['f32']:.3f} s, bf16 {med['bf16']:.3f} s (medians; fastest "
          f"steps {low['auto']:.3f}, {low['f32']:.3f}, {low['bf16']:.3f}); "
          f"default / faster {ratios[-1]:.3f} (fastest steps {fastest[-1]:.3f})")
print(f"default / faster explicit, medians: median of rounds "
      f"{statistics.median(ratios):.3f}, best {min(ratios):.3f}; fastest steps: "
      f"median of rounds {statistics.median(fastest):.3f}, best {min(fastest):.3f}")
# The fastest step of each variant over every round: on a shared machine
# whose load comes and goes, the figure a slowed round disturbs least.
best = {v: min(report(v, r)["step_seconds"]["min"] for r in range(1, rounds + 1))
        for v in ("auto", "f32", "bf16")}
print(f"fastest step of all rounds: default {best['auto']:.3f} s, f32 "
      f"{best['f32']:.3f} s, bf16 {best['bf16']:.3f} s; default / faster "
      f"{best['auto'] / min(best['f32'], best['bf16']):.3f}")
print("default: " + report("auto", 1).get("ns_dtype_reason", "(no reason in the report)"))
EOF
