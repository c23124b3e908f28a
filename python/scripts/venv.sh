#!/usr/bin/env bash
# Creates the Python virtualenv of the package's build and tests, cached:
# a no-op when VENV exists and its stamp matches the requirement files.
#
#   python/scripts/venv.sh [VENV]      (default build/venv)
#
# torch is installed the light way (docs/pytorch.md): --no-deps, with its
# pure-Python requirements and the few small NVIDIA wheels listed in
# requirements-torch-nodeps.txt, instead of the ~5.4 GB of CUDA wheels a
# plain `pip install torch` pulls. MUONC_NO_TORCH=1 skips torch (the
# package then builds and imports; its torch tests are skipped).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-build/venv}
python=${PYTHON:-python3}
reqs=("$here/requirements-venv.txt")
[ "${MUONC_NO_TORCH:-0}" = 1 ] || reqs+=("$here/requirements-torch-nodeps.txt")
stamp_value=$(cat "${reqs[@]}" | sha256sum | cut -d' ' -f1)
stamp="$venv/.muonc-stamp"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_value" ]; then
  exit 0
fi
echo "venv: creating $venv (pinned in python/requirements-*.txt)"
start=$(date +%s)
rm -rf "$venv"
"$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" -r "$here/requirements-venv.txt"
if [ "${MUONC_NO_TORCH:-0}" != 1 ]; then
  "${pip[@]}" --no-deps -r "$here/requirements-torch-nodeps.txt"
  "$venv/bin/python" -c 'import torch, torch.distributed as d; assert d.is_gloo_available(), "torch has no gloo"' \
    || { echo "venv: torch does not import (see docs/pytorch.md)"; exit 1; }
fi
echo "$stamp_value" > "$stamp"
echo "venv: ready in $(( $(date +%s) - start ))s, $(du -sh "$venv" | cut -f1)"
