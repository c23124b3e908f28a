#!/usr/bin/env bash
# Creates a Python virtualenv of the package (by default build/venv, of its
# build and tests), cached: a no-op when VENV exists and its stamp matches
# the requirement files and the interpreter.
#
#   python/scripts/venv.sh [VENV]      (default build/venv)
#
# torch is installed the light way (docs/pytorch.md): --no-deps, with its
# pure-Python requirements and the few small NVIDIA wheels listed in
# requirements-torch-nodeps.txt, instead of the ~5.4 GB of CUDA wheels a
# plain `pip install torch` pulls; then the frameworks of the tests
# (requirements-frameworks.txt), also --no-deps. MUONC_NO_TORCH=1 skips
# torch and the frameworks (the package then builds and imports; its
# torch tests are skipped).
# MUONC_REQUIREMENTS names another requirement file of python/ than
# requirements-venv.txt (the wheel's test venv: requirements-test.txt; its
# build venv: requirements-wheel.txt); PYTHON, the interpreter.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-build/venv}
python=${PYTHON:-python3}
# A name like python3.12 that is not on PATH: the pyenv version that has
# it, where pyenv is.
if ! "$python" -c '' 2>/dev/null && command -v pyenv >/dev/null; then
  version=$(pyenv whence "$python" 2>/dev/null | tail -1 || true)
  [ -z "$version" ] || python=$(pyenv prefix "$version")/bin/$python
fi
"$python" -c '' 2>/dev/null || { echo "venv: no Python '$python'"; exit 1; }
base=$here/${MUONC_REQUIREMENTS:-requirements-venv.txt}
# The base file and those it includes (-r), which the stamp covers too.
reqs=("$base")
for ((i = 0; i < ${#reqs[@]}; i++)); do
  for r in $(sed -n 's/^-r *//p' "${reqs[$i]}"); do reqs+=("$here/$r"); done
done
[ "${MUONC_NO_TORCH:-0}" = 1 ] ||
  reqs+=("$here/requirements-torch-nodeps.txt" "$here/requirements-frameworks.txt")
stamp_value=$( (cat "${reqs[@]}"; "$python" -VV) | sha256sum | cut -d' ' -f1)
stamp="$venv/.muonc-stamp"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_value" ]; then
  exit 0
fi
echo "venv: creating $venv (pinned in python/requirements-*.txt)"
start=$(date +%s)
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" -r "$base"
if [ "${MUONC_NO_TORCH:-0}" != 1 ]; then
  "${pip[@]}" --no-deps -r "$here/requirements-torch-nodeps.txt"
  # The frameworks the tests run muonc inside, after torch: --no-deps, or
  # they would pull torch's CUDA wheels.
  "${pip[@]}" --no-deps -r "$here/requirements-frameworks.txt"
  "$venv/bin/python" -c 'import torch, torch.distributed as d; assert d.is_gloo_available(), "torch has no gloo"' \
    || { echo "venv: torch does not import (see docs/pytorch.md)"; exit 1; }
fi
echo "$stamp_value" > "$stamp"
echo "venv: ready in $(( $(date +%s) - start ))s, $(du -sh "$venv" | cut -f1)"
