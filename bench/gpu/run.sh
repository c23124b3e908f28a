#!/usr/bin/env bash
# bench/gpu/run.sh: issue 53's GPU proof in one device call, from the
# repository root on the lent GPU machine with gpu-bundle/ carried (see
# bundle.sh and docs/performance.md, "GPU"). Writes every log and JSON
# under $OUT (default ./gpu-out) and ends with bench/gpu/summary.py's table:
# each target of issue 53, PASS or FAIL. In order:
#   check            muon-cuda-check: every kernel and Newton-Schulz (both
#                    forms, f32, bf16, f16) against the CPU
#   ns-*             Newton-Schulz per shape against the dense bf16 GEMM
#                    floor measured in the same run: squares and 1:4 shapes,
#                    bf16 and f16, the default form (Gram on 1:4) and the
#                    standard form, and batches of 16
#   step-ours        one optimizer step of 8 Llama-3-8B layers on one GPU
#   step-torch       torch.optim.Muon's step on the same shapes
#   bridge           bench/gpu/torch_bridge.py under torchrun: torch, muonc
#                    in 1 process and in 2 (NCCL where there are 2 GPUs,
#                    else gloo sharing one), 100 steps
#   then, while time is left, the extras: the demo model on 4 ranks sharing
#   the GPU in f16, verified against the CPU (muon-run --verify: within
#   1e-2 of the reference's update), and the step in f16, with step graphs
#   and in the standard form.
# The call has 600 s: every step gets its own cap or what is left of
# BUDGET (default 560 s from the start) less the summary's 15 s, and a step
# with less than 10 s left is skipped, saying so. ONLY="check step-ours ..."
# runs just those steps.
#
# BACKEND=cpu is the dry run on a development machine (the build's tools
# in MUON_BIN, default build/bin, and the Python in PYTHON with torch and
# muonc): the bundle checked where there is one (BUNDLE, default
# gpu-bundle/: its files, debs and muonc archives, and its plans loaded by
# the build's muon-run; a bad bundle makes the dry run exit 1), then the
# same steps and summary on the CPU backend with small shapes, the fake
# GPU's muon-cuda-check-fakegpu, and the bridge on CPU tensors
# (python/tests/test_gpu_run_script.py). Its verdicts are the CPU's, a
# check of the script and the summary's keys, not of the targets. A target
# whose step did not run (ONLY, out of time) reads "not run".
set -uo pipefail
source "$(dirname "$0")/env.sh"
backend=${BACKEND:-cuda}
deadline=$((SECONDS + ${BUDGET:-560}))
reserve=15 # the summary's

step() { # name, cap in seconds, command...
  local name=$1 cap=$2
  shift 2
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && return 0
  local left=$((deadline - SECONDS - reserve))
  if ((left < 10)); then
    echo "== $name: skipped: ${left} s left of the call" | tee -a "$out/summary.txt"
    return 0
  fi
  local limit=$((cap < left ? cap : left))
  echo "== $name (at most $limit s): $*" | tee -a "$out/summary.txt"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  tail -n 6 "$out/$name.log" | tee -a "$out/summary.txt"
  echo "   exit $rc after $((SECONDS - started)) s of the call" |
    tee -a "$out/summary.txt"
}
started=$SECONDS

plan8="$bundle/plans/llama3-8b-L8.plan.json"
if [ "$backend" = cpu ]; then
  echo "== bundle: $bundle_check" | tee -a "$out/summary.txt"
  check=(muon-cuda-check-fakegpu --small)
  squares=64x64,96x96 quarter=32x128,128x32 batch_shapes=32x128,64x64
  batch=4 repeats=2 batch_repeats=1 form_variable=MUON_CPU_NS_FORM
  python3 "$src/bench/llama3_8b_spec.py" --layers 1 --divide 32 \
    > "$bundle/plans/llama3-8b-L8.spec.json"
  muon-run "$bundle/plans/llama3-8b-L8.spec.json" --dry-run --quiet \
    --plan "$plan8"
  muon-run "$src/examples/gpt-fsdp-tp.json" --dry-run --quiet \
    --plan "$bundle/plans/demo-4.plan.json"
  step_args=(--steps 3)
  torch_step_args=(--layers 1 --divide 32 --device cpu --steps 2)
  bridge_args=(--device cpu --size tiny --steps 6 --warmup 2 --timeout 120)
  bridge_steps=6 two=muonc-gloo2
else
  check=(muon-cuda-check)
  squares=1024x1024,2048x2048,4096x4096,8192x8192
  quarter=1024x4096,2048x8192,4096x1024 batch_shapes=1024x4096,4096x4096
  batch=16 repeats=10 batch_repeats=5 form_variable=MUON_CUDA_NS_FORM
  step_args=(--steps 12)
  torch_step_args=(--layers 8 --steps 10)
  bridge_args=(--steps 100 --timeout 100)
  bridge_steps=100
  # 2 processes: each on a GPU of its own over NCCL where there are two,
  # else sharing one over gloo (the documented fallback).
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  two=muonc-gloo2
  ((gpus >= 2)) && two=muonc-nccl2
fi

# Newton-Schulz against the bf16 floor: name, precision, form (auto: the
# default; standard), shapes, more muon-bench arguments...
ns() {
  local name=$1 precision=$2 form=$3 shapes=$4
  shift 4
  step "$name" 60 env "$form_variable=$form" muon-bench ns \
    --backend "$backend" --ns-dtype "$precision" --floor-dtype bf16 \
    --shapes "$shapes" --json "$@"
}

step check 150 "${check[@]}"
for precision in bf16 f16; do
  ns "ns-$precision" "$precision" auto "$squares,$quarter" \
    --repeats "$repeats"
  ns "ns-$precision-batch16" "$precision" auto "$batch_shapes" \
    --batch "$batch" --repeats "$batch_repeats"
  # The standard form for comparison (the 1:4 shapes; squares run it
  # anyway).
  ns "ns-$precision-standard" "$precision" standard "$quarter" \
    --repeats "$repeats"
done
step step-ours 150 muon-bench step "$plan8" --backend "$backend" \
  --ns-dtype bf16 --json "${step_args[@]}"
step step-torch 120 env LD_LIBRARY_PATH="$torch_ld" "$py" \
  "$src/bench/torch_muon_step.py" "${torch_step_args[@]}"
step bridge 300 env LD_LIBRARY_PATH="$muonc_ld${muonc_ld:+:}$torch_ld" \
  PYTHONPATH="$muonc_path" "$py" "$src/bench/gpu/torch_bridge.py" \
  --configs "torch,muonc,$two" --json "$out/bridge.json" "${bridge_args[@]}"
# The extras, while time is left.
step demo-4-host-f16 90 muon-run "$bundle/plans/demo-4.plan.json" \
  --backend "$backend" --transport host --ns-dtype f16 --steps 3 \
  --timeout 60 --verify --report "$out/demo-4-host-f16.json"
step step-ours-f16 150 muon-bench step "$plan8" --backend "$backend" \
  --ns-dtype f16 --json "${step_args[@]}"
step step-ours-graphs 150 muon-bench step "$plan8" --backend "$backend" \
  --ns-dtype bf16 --graphs --json "${step_args[@]}"
step step-ours-standard 150 env "$form_variable=standard" muon-bench step \
  "$plan8" --backend "$backend" --ns-dtype bf16 --json "${step_args[@]}"

"$py" "$src/bench/gpu/summary.py" "$out" --bridge-steps "$bridge_steps" |
  tee -a "$out/summary.txt"
rm -rf "$root"
# A dry run's bundle that would not run on the GPU machine.
[ "$backend" != cpu ] || [[ "$bundle_check" != FAIL* ]]
