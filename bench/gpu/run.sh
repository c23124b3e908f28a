#!/usr/bin/env bash
# bench/gpu/run.sh: the GPU measurements of docs/performance.md, run on the
# lent GPU machine from the repository root with gpu-bundle/ carried (see
# bundle.sh). Writes logs and JSON under $OUT (default ./gpu-out) and ends
# with a summary of issue 38's targets. About 7 minutes on an H100.
#   1. muon-cuda-check: every CUDA kernel and Newton-Schulz (both forms)
#      against the CPU
#   2. Newton-Schulz per shape, bf16 (ns_form auto: the Gram form on the
#      1:4 shapes; and standard), batches of 16 as the Llama stack's, f32
#   3. one optimizer step, Llama-3-8B x 8 layers on one GPU (eager, with
#      step graphs, in the standard form), against torch.optim.Muon on the
#      same shapes
#   4. the demo model on 1, 2 and 4 ranks sharing the GPU (host-staged) and
#      on 1 rank with NCCL (also with step graphs), verified against the CPU
#      reference
#   5. the torch bridge: the example GPT with muonc.torch.Muon on CUDA
#      tensors, 1 process and 2 sharing the GPU (gloo), against
#      torch.optim.Muon (bench/gpu/torch_bridge.py)
# ONLY="check step-ours ..." runs just those steps.
set -uo pipefail
source "$(dirname "$0")/env.sh"

step() { # name, command... (each at most 240 s: the call has 600 in all)
  local name=$1
  shift
  [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]] && return 0
  echo "== $name: $*" | tee -a "$out/summary.txt"
  timeout 240 "$@" > "$out/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$out/$name.log" | tee -a "$out/summary.txt"
  echo "   exit $rc" | tee -a "$out/summary.txt"
}

plan8="$bundle/plans/llama3-8b-L8.plan.json"
step check muon-cuda-check
shapes=1024x1024,2048x2048,4096x4096,8192x8192,1024x4096,2048x8192,4096x1024
wide=1024x4096,2048x8192,4096x1024,4096x14336,14336x4096
step ns-bf16 muon-bench ns --backend cuda --ns-dtype bf16 --shapes "$shapes" --repeats 10 --json
step ns-bf16-standard env MUON_CUDA_NS_FORM=standard muon-bench ns --backend cuda --ns-dtype bf16 --shapes "$wide" --repeats 10 --json
step ns-bf16-batch16 muon-bench ns --backend cuda --ns-dtype bf16 --shapes 1024x4096,4096x4096 --batch 16 --repeats 5 --json
step ns-f32 muon-bench ns --backend cuda --ns-dtype f32 --shapes "$shapes" --repeats 5
step step-ours muon-bench step "$plan8" --backend cuda --ns-dtype bf16 --steps 12 --json
step step-ours-graphs muon-bench step "$plan8" --backend cuda --ns-dtype bf16 --steps 12 --graphs --json
step step-ours-standard env MUON_CUDA_NS_FORM=standard muon-bench step "$plan8" --backend cuda --ns-dtype bf16 --steps 12 --json
step step-torch env LD_LIBRARY_PATH="$torch_ld" "$py" "$bundle/torch_muon_step.py" --layers 8 --steps 10
for n in 1 2 4; do
  step "demo-$n-host" muon-run "$bundle/plans/demo-$n.plan.json" --backend cuda \
    --transport host --steps 3 --timeout 60 --verify --report "$out/demo-$n-host.json"
done
step demo-1-nccl muon-run "$bundle/plans/demo-1.plan.json" --backend cuda \
  --transport nccl --steps 3 --timeout 60 --verify --report "$out/demo-1-nccl.json"
step demo-1-nccl-graphs muon-run "$bundle/plans/demo-1.plan.json" --backend cuda \
  --transport nccl --steps 5 --graphs --timeout 60 --verify --report "$out/demo-1-nccl-graphs.json"
step demo-4-f32 muon-run "$bundle/plans/demo-4.plan.json" --backend cuda \
  --transport host --ns-dtype f32 --steps 3 --timeout 60 --verify --report "$out/demo-4-f32.json"
if [ -n "$muonc_path" ]; then
  step bridge env LD_LIBRARY_PATH="$muonc_ld:$torch_ld" PYTHONPATH="$muonc_path" \
    "$py" bench/gpu/torch_bridge.py --steps 100 --timeout 100 --json "$out/bridge.json"
else
  echo "== bridge: skipped: the bundle has no muonc (bundle.sh found no Python 3.12)" |
    tee -a "$out/summary.txt"
fi

# Issue 38's targets, from the JSON lines above.
"$py" - "$out" <<'PY' | tee -a "$out/summary.txt"
import json, os, sys
out = sys.argv[1]

def lines(name):
    try:
        with open(os.path.join(out, name)) as f:
            return [json.loads(l) for l in f if l.startswith("{")]
    except OSError:
        return []

gpu = open(os.path.join(out, "gpu.txt")).read().splitlines()[-1] \
    if os.path.exists(os.path.join(out, "gpu.txt")) else "?"
print(f"== issue 38 on {gpu}")
torch_step = lines("step-torch.log")
torch_ms = torch_step[-1]["step_seconds"] * 1e3 if torch_step else None
for name, what in (("step-ours", "Gram form, eager"),
                   ("step-ours-graphs", "Gram form, step graphs"),
                   ("step-ours-standard", "standard form, eager")):
    r = lines(name + ".log")
    if not r:
        print(f"  Llama-3-8B x8 step ({what}): no result")
        continue
    ms = r[-1]["step_seconds"] * 1e3
    ratio = f"{ms / torch_ms:.3f}x torch.optim.Muon's {torch_ms:.1f} ms" \
        if torch_ms else "torch.optim.Muon: no result"
    print(f"  Llama-3-8B x8 step ({what}): {ms:.1f} ms = {ratio} "
          f"(target <= 0.6)")
for name, what in (("ns-bf16.log", "auto"), ("ns-bf16-standard.log",
                                             "standard"),
                   ("ns-bf16-batch16.log", "auto, batches of 16")):
    for r in lines(name):
        rows, cols = map(int, r["shape"].split("x"))
        if max(rows, cols) >= 4 * min(rows, cols) or r["batch"] > 1:
            print(f"  NS bf16 {r['shape']} x {r['batch']} ({what}): "
                  f"{r['ratio']:.3f} of the bf16 GEMM floor (best "
                  f"{r['ratio_best']:.3f}; target <= 1.0 on 1:4)")
for r in lines("bridge.json"):
    if "losses" in r:
        print(f"  bridge {r['config']}: final loss {r['losses'][-1]:.6f}, "
              f"max rel diff {r.get('loss_rel_max', 0):.2e}, step "
              f"{r['step_ms_median']:.3f} ms "
              f"({r.get('step_vs_torch', 1):.3f}x torch), "
              f"{'agrees' if r.get('within_tolerance', True) else 'DIFFERS'}")
    else:
        print(f"  bridge {r['config']}: {r.get('skipped') or r.get('failed')}")
PY
rm -rf "$root"
