#!/usr/bin/env bash
# bench/gpu/run.sh: the GPU measurements of docs/performance.md, run on the
# lent GPU machine from the repository root with gpu-bundle/ carried (see
# bundle.sh). Writes logs and JSON under $OUT (default ./gpu-out) and ends
# with a short table.
#   1. muon-cuda-check: every CUDA kernel and Newton-Schulz against the CPU
#   2. Newton-Schulz per shape, bf16 and f32, against cuBLAS's GEMM rate
#   3. one optimizer step, Llama-3-8B x 8 layers on one GPU, against
#      torch.optim.Muon on the same shapes
#   4. the demo model on 1, 2 and 4 ranks sharing the GPU (host-staged) and
#      on 1 rank with NCCL, verified against the CPU reference
set -uo pipefail
source "$(dirname "$0")/env.sh"

step() { # name, command... (each at most 240 s: the call has 600 in all)
  local name=$1
  shift
  # ONLY="check step-ours ...": run just those steps.
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && return 0
  echo "== $name: $*" | tee -a "$out/summary.txt"
  timeout 240 "$@" > "$out/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$out/$name.log" | tee -a "$out/summary.txt"
  echo "   exit $rc" | tee -a "$out/summary.txt"
}

step check muon-cuda-check
shapes=1024x1024,2048x2048,4096x4096,8192x8192,1024x4096,2048x8192,4096x1024
step ns-bf16 muon-bench ns --backend cuda --ns-dtype bf16 --shapes "$shapes" --repeats 10
step ns-f32 muon-bench ns --backend cuda --ns-dtype f32 --shapes "$shapes" --repeats 5
step step-ours muon-bench step "$bundle/plans/llama3-8b-L8.plan.json" --backend cuda --ns-dtype bf16 --steps 12
step step-torch env LD_LIBRARY_PATH="$torch_ld" "$py" "$bundle/torch_muon_step.py" --layers 8 --steps 10
for n in 1 2 4; do
  step "demo-$n-host" muon-run "$bundle/plans/demo-$n.plan.json" --backend cuda \
    --transport host --steps 3 --timeout 60 --verify --report "$out/demo-$n-host.json"
done
step demo-1-nccl muon-run "$bundle/plans/demo-1.plan.json" --backend cuda \
  --transport nccl --steps 3 --timeout 60 --verify --report "$out/demo-1-nccl.json"
step demo-4-f32 muon-run "$bundle/plans/demo-4.plan.json" --backend cuda \
  --transport host --ns-dtype f32 --steps 3 --timeout 60 --verify --report "$out/demo-4-f32.json"
rm -rf "$root"
