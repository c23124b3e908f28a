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
#   gpu-bundle/muonc.tar.xz  muonc (the Python package) for the machine's
#                         Python 3.12, its extension built here against an
#                         install of the full build (with the CUDA
#                         backend) and LLVM linked in statically
#                         (python/CMakeLists.txt's MUONC_STATIC_LLVM, as
#                         the wheel has it), with comm="mpi"'s plugin and
#                         oneDNN's library:
#                         bench/gpu/torch_bridge.py imports it there
# Then carry it: the device tool's `carry: ["gpu-bundle"]`, and run
# `bash bench/gpu/run.sh` there (see docs/performance.md). Everything that
# travels must stay under 64 MiB: the bundle is about 45 MB.
#
# JOBS: the compile jobs (default: every core; JOBS=2 on a shared machine).
# GPU_PYTHON: a Python 3.12 with its headers (default: python3.12 on PATH,
# else pyenv's 3.12); without one, the bundle has no muonc and run.sh's
# bridge step says so.
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
ninja -C "$gpu" -j "${JOBS:-$(nproc)}" muon-run muon-bench muon-cuda-check >/dev/null
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

# muonc for the GPU machine's Python (3.12 in its image, with torch).
py312=
for candidate in ${GPU_PYTHON:-} python3.12 \
  "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3; do
  if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' \
    2>/dev/null; then
    py312=$candidate
    break
  fi
done
if [ -z "$py312" ]; then
  echo "bundle.sh: no Python 3.12 here (GPU_PYTHON): no muonc in the bundle" >&2
else
  full=$(cd "$full" && pwd) # CMake takes the paths below from elsewhere
  cmake --install "$full" --prefix "$full/install" >/dev/null
  "$full/gpu-py/bin/python" -c \
    'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null ||
    "$py312" -m venv --clear "$full/gpu-py"
  "$full/gpu-py/bin/pip" install -q --disable-pip-version-check \
    nanobind==3.1.0
  rm -rf "$full/gpu-py-build" # a cache may name another Python
  cmake -G Ninja -S "$src/python" -B "$full/gpu-py-build" \
    -DPython_EXECUTABLE="$full/gpu-py/bin/python" \
    -DCMAKE_PREFIX_PATH="$full/install" -DCMAKE_BUILD_TYPE=Release \
    -DMUONC_STATIC_LLVM=ON >/dev/null
  cmake --build "$full/gpu-py-build" -j "${JOBS:-$(nproc)}" --target _core muonc_mpi >/dev/null
  core=$(ls "$full"/gpu-py-build/_core.cpython-312-*.so)
  # What the extension loads must be on the machine (cuBLAS, C and C++
  # runtimes), in debs.tar.gz (MPI, OpenBLAS) or in the archive (oneDNN).
  extra=$(readelf -d "$core" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' |
    grep -v -E '^(libcublas\.so\.13|libmpi\.so\.40|libopenblas\.so\.0|libdnnl\.so\.2|libstdc\+\+\.so\.6|libm\.so\.6|libgcc_s\.so\.1|libc\.so\.6|ld-linux-x86-64\.so\.2)$' || true)
  if [ -n "$extra" ]; then
    echo "bundle.sh: muonc's extension needs libraries the GPU machine lacks: $extra" >&2
    exit 1
  fi
  stage=$(mktemp -d)
  cp -r "$src/python/src/muonc" "$stage/"
  rm -f "$stage"/muonc/*.cpp "$stage"/muonc/*.h
  find "$stage" -name __pycache__ -prune -exec rm -rf {} +
  cp "$core" "$full/gpu-py-build/libmuonc_mpi.so" "$stage/muonc/"
  mkdir -p "$stage/lib"
  cp -L "$(ldconfig -p | sed -n 's/.*libdnnl\.so\.2 .*=> //p' | head -1)" \
    "$stage/lib/libdnnl.so.2"
  # xz through Python: the machine has no xz program, but Python's lzma.
  python3 - "$stage" "$out/muonc.tar.xz" <<'PY'
import os, sys, tarfile
stage, target = sys.argv[1:3]
with tarfile.open(target, "w:xz") as tar:
    for name in sorted(os.listdir(stage)):
        tar.add(os.path.join(stage, name), arcname=name)
PY
  rm -rf "$stage"
fi
du -sh "$out"
