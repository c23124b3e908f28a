#!/usr/bin/env bash
# bench/gpu/variants.sh: the CUDA Newton-Schulz and the Llama-3-8B step
# under each of the backend's product strategies (the MUON_CUDA_* knobs of
# docs/runtime.md), in one call on the lent GPU machine, so the defaults are
# chosen from one run's figures. Same set-up as run.sh (gpu-bundle/ carried).
set -uo pipefail
source "$(dirname "$0")/env.sh"
shapes=${SHAPES:-1024x1024,2048x2048,4096x4096,8192x8192,1024x4096,2048x8192,4096x1024,4096x14336,14336x4096}
# name=environment (the knobs, comma-separated; "-" for the defaults)
variants=${VARIANTS:-"default=- dense=MUON_CUDA_SYMMETRIC_MIN=1000000 tile512=MUON_CUDA_SYMMETRIC_TILE=512 tile2048=MUON_CUDA_SYMMETRIC_TILE=2048 ungrouped=MUON_CUDA_GROUPED_GEMM=0"}
for v in $variants; do
  name=${v%%=*} envs=${v#*=}
  [ "$envs" = - ] && envs=
  echo "== ns bf16, $name ($envs)"
  env ${envs//,/ } timeout 200 muon-bench ns --backend cuda --ns-dtype bf16 \
    --shapes "$shapes" --repeats 10 > "$out/ns-$name.log" 2>&1
  echo "   exit $?"; cat "$out/ns-$name.log"
  # STEPS_FOR: the variants whose step is timed too (a regular expression).
  [[ $name =~ ^(${STEPS_FOR:-.*})$ ]] || continue
  for layers in ${STEP_LAYERS:-8}; do
    echo "== step L$layers, $name"
    env ${envs//,/ } timeout 200 muon-bench step "$bundle/plans/llama3-8b-L$layers.plan.json" \
      --backend cuda --ns-dtype bf16 --steps 12 > "$out/step-L$layers-$name.log" 2>&1
    echo "   exit $?"; cat "$out/step-L$layers-$name.log"
  done
done
# torch.optim.Muon on the same shapes and GPU, in the same call.
for layers in ${STEP_LAYERS:-8}; do
  echo "== torch.optim.Muon step L$layers"
  env LD_LIBRARY_PATH="$torch_ld" timeout 200 "$py" "$bundle/torch_muon_step.py" \
    --layers "$layers" --steps 10 2>&1 | tail -3
done
rm -rf "$root"
