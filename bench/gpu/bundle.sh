#!/usr/bin/env bash
# bench/gpu/bundle.sh: prepares, on a development machine (Debian 12 with
# the CUDA toolkit), everything the GPU measurements need on a lent GPU
# machine, which has CUDA, NCCL and PyTorch but no MPI, BLAS or LLVM:
#   gpu-bundle/bin        muon-run, muon-bench, muon-cuda-check from a
#                         runtime-only build with the CUDA backend
#                         (build-gpu/), so no LLVM is needed there
#   gpu-bundle/debs.tar.gz  OpenMPI and OpenBLAS as Debian packages
#                         (apt-get download, dpkg -x), unpacked there
#   gpu-bundle/plans      the plans to run, compiled here
# Then carry it: the device tool's `carry: ["gpu-bundle"]`, and run
# `bash bench/gpu/run.sh` there (see docs/performance.md).
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
full=${1:-build}          # a full build (the compiler) for the plans
out="$src/gpu-bundle"
gpu="$src/build-gpu"
rm -rf "$out" && mkdir -p "$out/bin" "$out/plans"

# Without oneDNN (the CPU's bf16 products): the GPU machine lacks the
# library, and its ranks' Newton-Schulz runs on the GPU.
cmake -G Ninja -S "$src" -B "$gpu" -DMUON_RUNTIME_ONLY=ON \
  -DMUON_ENABLE_CUDA=ON -DMUON_ONEDNN=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$gpu" muon-run muon-bench muon-cuda-check >/dev/null
grep -q "MUON_HAVE_CUDA:INTERNAL=ON" "$gpu/CMakeCache.txt" || {
  echo "bundle.sh: the CUDA backend is not in build-gpu (no CUDA toolkit?)" >&2
  exit 1
}
cp "$gpu/bin/muon-run" "$gpu/bin/muon-bench" "$gpu/bin/muon-cuda-check" \
  "$out/bin/"
strip "$out/bin/"*

# OpenMPI (with PMIx, hwloc, libevent) and OpenBLAS: the packages, not
# copies of this machine's files.
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
(cd "$debs" && apt-get download -q openmpi-bin openmpi-common libopenmpi3 \
  libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 \
  libevent-2.1-7 libopenblas0-pthread libopenblas0 libgfortran5 \
  libquadmath0 libltdl7 libnuma1 libudev1 >/dev/null)
mkdir -p "$debs/root"
for d in "$debs"/*.deb; do dpkg -x "$d" "$debs/root"; done
tar -C "$debs/root" -czf "$out/debs.tar.gz" .

# Plans: Llama-3-8B layer stacks on one GPU, and the demo model on 1, 2
# and 4 ranks (the same model, the mesh made smaller).
for layers in 1 8; do
  python3 "$src/bench/llama3_8b_spec.py" --layers "$layers" \
    > "$out/plans/llama3-8b-L$layers.spec.json"
  "$full/bin/muon-run" "$out/plans/llama3-8b-L$layers.spec.json" --dry-run \
    --quiet --plan "$out/plans/llama3-8b-L$layers.plan.json"
done
for mesh in "1,1" "2,1" "2,2"; do
  ranks=$(( ${mesh%,*} * ${mesh#*,} ))
  python3 - "$src/examples/gpt-fsdp-tp.json" "$out/plans/demo-$ranks.spec.json" \
    "$mesh" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["mesh"]["shape"] = [int(x) for x in sys.argv[3].split(",")]
json.dump(d, open(sys.argv[2], "w"), indent=1)
PY
  "$full/bin/muon-run" "$out/plans/demo-$ranks.spec.json" --dry-run --quiet \
    --plan "$out/plans/demo-$ranks.plan.json"
done
cp "$src/bench/torch_muon_step.py" "$out/"
du -sh "$out"
